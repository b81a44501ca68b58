// A real program for tests/node_tsc.rs: the TypeScript compiler (npm's
// typescript package, its path in argv[0]) type-checking its own
// declarations (lib/typescript.d.ts against lib.es5.d.ts, strict, no
// emit), a new Program each round: the scanner, parser, binder and
// checker do all the work, this file's functions next to none.
//
// Usage: node [FLAGS] tscwork.js TYPESCRIPT_JS SECONDS [WARM]
// Speaks the tests/workloads protocol, as nodeservice.js (synchronously,
// on the main thread): rounds for WARM seconds (unmeasured), "tid N",
// "ready", waits for a line, then whole rounds until SECONDS have
// passed; "window START END" (the measured rounds' first and last
// instants, in microseconds of CLOCK_MONOTONIC: V8's CPU profile's
// clock), "rounds N", "cpu S" (the thread's CPU over the rounds), then
// waits for stdin to close and exits (--cpu-prof writes its file then).
"use strict";

const fs = require("fs");
const path = require("path");

const tsPath = process.argv[2];
const ts = require(tsPath);
const roots = [path.join(path.dirname(tsPath), "typescript.d.ts")];
const options = {
    noEmit: true,
    strict: true,
    target: ts.ScriptTarget.ES2020,
    lib: ["lib.es5.d.ts"],
    types: [],
};

let diagnostics = 0;

// One round: a new Program (parsing and binding) and its type check.
function round() {
    const program = ts.createProgram(roots, options);
    diagnostics = program.getSemanticDiagnostics().length;
}

// Microseconds of CLOCK_MONOTONIC (process.hrtime's clock).
function micros() {
    return process.hrtime.bigint() / 1000n;
}

function rounds(seconds) {
    const end = micros() + BigInt(Math.round(seconds * 1e6));
    let n = 0;
    do {
        round();
        n++;
    } while (micros() < end);
    return n;
}

function threadCpu() {
    if (typeof process.threadCpuUsage === "function") {
        const u = process.threadCpuUsage();
        return (u.user + u.system) / 1e6;
    }
    return Number(fs.readFileSync("/proc/thread-self/schedstat", "latin1").split(" ")[0]) / 1e9;
}

function tid() {
    const link = fs.readlinkSync("/proc/thread-self");
    return Number(link.slice(link.lastIndexOf("/") + 1));
}

function say(line) {
    fs.writeSync(1, line + "\n");
}

function readStdin(buf) {
    for (;;) {
        try {
            return fs.readSync(0, buf, 0, buf.length, null);
        } catch (e) {
            if (e.code !== "EAGAIN") throw e;
            Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
        }
    }
}

function main() {
    const seconds = Number(process.argv[3] || 4);
    const warm = Number(process.argv[4] || 0);
    if (warm > 0) rounds(warm);
    say(`tid ${tid()}`);
    say("ready");
    const one = Buffer.alloc(1);
    while (readStdin(one) === 1 && one[0] !== 10) {}
    const cpu0 = threadCpu();
    const start = micros();
    const n = rounds(seconds);
    const end = micros();
    const cpu = threadCpu() - cpu0;
    say(`window ${start} ${end}`);
    say(`rounds ${n} diagnostics ${diagnostics}`);
    say(`cpu ${cpu}`);
    const buf = Buffer.alloc(4096);
    while (readStdin(buf) > 0) {}
}

main();
