#!/usr/bin/env python3
"""A small order service with a known hot path: the quick start's demo.

For SECONDS of wall time (default 5) it handles orders: parse_order
decodes a JSON body (C code inside CPython), price_order prices its lines
in pure Python (the hot path: about two thirds of the time), render_receipt
formats a receipt. Each step is timed with the thread's own CPU clock,
and at the end the program says what share of its CPU each took, so that
a flame graph can be checked against the program's own account.

    python3 scripts/demo.py [SECONDS]
"""

import json
import sys
import time

TAX = {"book": 0.07, "food": 0.05, "toy": 0.19}


def order_body(n):
    lines = [
        {"sku": "sku-%d" % (i * 7919 % 1000), "kind": ("book", "food", "toy")[i % 3],
         "qty": 1 + i % 4, "cents": 199 + i * 37 % 5000}
        for i in range(40 + n % 20)
    ]
    return json.dumps({"id": n, "customer": "c-%d" % (n % 97), "lines": lines})


def parse_order(body):
    return json.loads(body)


def discount(qty, cents):
    # A slow, pure-Python rule: what the profile should find.
    d = 0
    for step in range(1, 40):
        if (qty * cents + step) % 11 == 0:
            d += step % 3
    return d


def price_order(order):
    total = 0
    for line in order["lines"]:
        cents = line["cents"] * line["qty"] - discount(line["qty"], line["cents"])
        total += cents + int(cents * TAX[line["kind"]])
    return total


def render_receipt(order, total):
    rows = ["%-10s %3d x %7.2f" % (l["sku"], l["qty"], l["cents"] / 100) for l in order["lines"]]
    return "\n".join(["order %d for %s" % (order["id"], order["customer"])] + rows
                     + ["total %.2f" % (total / 100)])


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    spent = {"parse_order": 0.0, "price_order": 0.0, "render_receipt": 0.0}
    bodies = [order_body(n) for n in range(64)]
    clock = time.thread_time
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        t0 = clock()
        order = parse_order(bodies[n % 64])
        t1 = clock()
        total = price_order(order)
        t2 = clock()
        render_receipt(order, total)
        t3 = clock()
        spent["parse_order"] += t1 - t0
        spent["price_order"] += t2 - t1
        spent["render_receipt"] += t3 - t2
        n += 1
    cpu = sum(spent.values())
    print("demo: %d orders in %.1f s; by its own CPU clock:" % (n, seconds))
    for name, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print("demo:   %-15s %5.1f %%" % (name, 100 * s / cpu))


if __name__ == "__main__":
    main()
