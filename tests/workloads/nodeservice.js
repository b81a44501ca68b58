// A Node.js service with a known call chain and its own CPU accounting,
// the JavaScript twin of Service.java. Speaks the tests/workloads
// protocol: prints "tid N" for each worker thread and "ready", waits for
// a line, works, reports, then waits for stdin to close. Everything is
// synchronous, on the main thread (the event loop never runs): stdin and
// stdout are read and written with fs.readSync / fs.writeSync.
//
// Modes (argv[0]), with seconds of work in argv[1]:
// - cpu [WARM]: main -> serve -> handle -> parseRequest (which calls the
//   small mix) | renderPage (calling emit, which TurboFan inlines),
//   timing each leaf with the thread's CPU clock ("share NAME SECONDS"),
//   then "cpu S" (the thread's CPU over the whole serve) and "user S" (its
//   user part); with WARM, it serves WARM seconds before "ready",
//   unmeasured;
// - exit: as cpu, but node exits right after its report;
// - threads: a worker thread (worker_threads: an isolate of its own)
//   runs parseRequest, another renderPage; "tid TID 0" for the parser,
//   "tid TID 1" for the renderer, then "tcpu TID S" for each and "cpu S";
// - sleep: nap() -> Atomics.wait for 100 ms until the seconds are up (a
//   futex wait);
// - pipe [FIFO]: awaitRequest() blocks in fs.readSync of a FIFO, a byte
//   arriving every 100 ms from a worker thread (Service.java's socket
//   mode: Node has no blocking socket read). FIFO is made with mkfifo in
//   a temporary directory unless its path is given.
//
// Clocks: the leaves are timed with the process's CPU clock (phaseCpu,
// below, says why not the thread's); a thread's whole CPU ("cpu", "tcpu")
// with its own clock: process.threadCpuUsage() (getrusage of the thread;
// Node 23.9+, backported to 22.x), else /proc/thread-self/schedstat (in
// ns) and /proc/thread-self/stat for the user part (Node 20).
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");

// --- clocks ---

const hasThreadCpuUsage = typeof process.threadCpuUsage === "function";

// The calling thread's CPU time (user + system), in seconds.
function threadCpu() {
    if (hasThreadCpuUsage) {
        const u = process.threadCpuUsage();
        return (u.user + u.system) / 1e6;
    }
    return Number(fs.readFileSync("/proc/thread-self/schedstat", "latin1").split(" ")[0]) / 1e9;
}

// The calling thread's user time, in seconds (in clock ticks, 100 Hz,
// from /proc without process.threadCpuUsage).
function threadUser() {
    if (hasThreadCpuUsage) {
        return process.threadCpuUsage().user / 1e6;
    }
    const stat = fs.readFileSync("/proc/thread-self/stat", "latin1");
    // Fields after the ")" closing comm: state is field 3, utime field 14.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[14 - 3]) / 100;
}

// The process's CPU time (user + system), in seconds, up to date: the
// leaves' clock. The thread clocks above are not: getrusage of a thread
// and /proc's schedstat give the time the scheduler last accounted (at
// its tick or a switch), so a phase ending in pure computation lost up to
// a tick to the next phase, whose garbage collection switches threads
// often: parseRequest's share came out 7-8 points low against perf, V8's
// own profiler and flare (Node 26, --no-opt). getrusage of the process
// brings the calling thread's time up to date; the other threads
// (compilers, GC helpers) add a point or two at most, mostly in the
// render phase whose garbage they collect.
function phaseCpu() {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
}

function now() {
    return Number(process.hrtime.bigint()) / 1e9;
}

// --- the service ---

let spentParse = 0;
let spentRender = 0;
let sink = 0;

// Work sizes vary from call to call (a fixed sequence), so that the
// loop's period does not alias with the sampling period.
let seed = 1;

function next(lo, hi) {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    return lo + ((seed >>> 8) % (hi - lo));
}

// What parseRequest scans, a character at a time.
const REQUEST =
    "GET /catalog/search?q=profilers&page=7&sort=price HTTP/1.1\r\n" +
    "Host: shop.example.com\r\nAccept: text/html,application/xhtml+xml\r\n" +
    "User-Agent: flare-test/1.0\r\nCookie: session=4f2a9c; theme=dark\r\n\r\n";

function mix(c, i) {
    return (c * i) % 7;
}

function parseRequest(n) {
    let total = 0;
    for (let i = 0; i < n; i++) {
        total += mix(REQUEST.charCodeAt(i % REQUEST.length), i);
    }
    return total;
}

// Small enough for TurboFan to inline into renderPage; the calls it makes
// (string concatenation, the array's growth) carry its inlined frame.
function emit(parts, i) {
    parts.push("<li>" + i + "</li>");
}

function renderPage(n) {
    const parts = [];
    for (let i = 0; i < n; i++) {
        emit(parts, i);
    }
    return parts.join("").length;
}

function handle() {
    const t0 = phaseCpu();
    for (let k = 0; k < 50; k++) sink += parseRequest(next(1500, 4500));
    const t1 = phaseCpu();
    for (let k = 0; k < 20; k++) sink += renderPage(next(500, 1500));
    const t2 = phaseCpu();
    spentParse += t1 - t0;
    spentRender += t2 - t1;
}

function serve(seconds) {
    const end = now() + seconds;
    while (now() < end) handle();
}

// One loop per thread (threads mode), as Service.java's, so that no
// optimized body holds both leaves.
function parseLoop(seconds) {
    const end = now() + seconds;
    while (now() < end) sink += parseRequest(next(1500, 4500));
}

function renderLoop(seconds) {
    const end = now() + seconds;
    while (now() < end) sink += renderPage(next(500, 1500));
}

const napCell = new Int32Array(new SharedArrayBuffer(4));

function sleepMs(ms) {
    Atomics.wait(napCell, 0, 0, ms);
}

function nap(seconds) {
    const end = now() + seconds;
    while (now() < end) sleepMs(100);
}

const oneByte = Buffer.alloc(1);

// The byte read, or -1 at the end of the FIFO.
function awaitRequest(fd) {
    return fs.readSync(fd, oneByte, 0, 1, null) === 1 ? oneByte[0] : -1;
}

function tid() {
    const link = fs.readlinkSync("/proc/thread-self");
    return Number(link.slice(link.lastIndexOf("/") + 1));
}

// --- stdio, synchronously ---

function say(line) {
    fs.writeSync(1, line + "\n");
}

function readStdin(buf) {
    for (;;) {
        try {
            return fs.readSync(0, buf, 0, buf.length, null);
        } catch (e) {
            // A non-blocking stdin (inherited): wait for it.
            if (e.code !== "EAGAIN") throw e;
            sleepMs(10);
        }
    }
}

// Waits for a line on stdin (or its end).
function awaitLine() {
    const buf = Buffer.alloc(1);
    while (readStdin(buf) === 1 && buf[0] !== 10) {}
}

// Waits for stdin to close.
function awaitEof() {
    const buf = Buffer.alloc(4096);
    while (readStdin(buf) > 0) {}
}

// --- worker threads ---

// Runs this file's function `role` in a worker thread; the main thread
// shares `cells` (an Int32Array) and `results` (a Float64Array) with it.
function startWorker(role, args, shared) {
    const { Worker } = require("worker_threads");
    return new Worker(__filename, {
        argv: ["--worker", role],
        workerData: { args, shared },
        stdout: false,
        stderr: false,
    });
}

// Cells of the threads mode's shared memory: each worker's tid (0, 1),
// the go flag (2), the workers done (3).
const TID = 0, GO = 2, DONE = 3;

function workerMain() {
    const { workerData } = require("worker_threads");
    const role = process.argv[process.argv.indexOf("--worker") + 1];
    const cells = new Int32Array(workerData.shared.cells);
    const results = new Float64Array(workerData.shared.results);
    if (role === "writer") {
        // The pipe mode's writer: opens the FIFO (which waits for the
        // reader), waits for go, then writes a byte every 100 ms.
        const { fifo, seconds } = workerData.args;
        const fd = fs.openSync(fifo, "w");
        Atomics.wait(cells, GO, 0);
        const end = now() + seconds;
        while (now() < end) {
            sleepMs(100);
            fs.writeSync(fd, Buffer.from([1]));
        }
        fs.writeSync(fd, Buffer.from([0]));
        fs.closeSync(fd);
        return;
    }
    const index = role === "parser" ? 0 : 1;
    Atomics.store(cells, TID + index, tid());
    Atomics.notify(cells, TID + index);
    Atomics.wait(cells, GO, 0);
    if (index === 0) parseLoop(workerData.args.seconds);
    else renderLoop(workerData.args.seconds);
    results[index] = threadCpu();
    Atomics.add(cells, DONE, 1);
    Atomics.notify(cells, DONE);
}

// --- main ---

function main() {
    const argv = process.argv.slice(2);
    const mode = argv.length > 0 ? argv[0] : "cpu";
    const seconds = argv.length > 1 ? Number(argv[1]) : 3.0;
    if (mode === "threads") {
        const shared = {
            cells: new SharedArrayBuffer(4 * 4),
            results: new SharedArrayBuffer(8 * 2),
        };
        const cells = new Int32Array(shared.cells);
        const results = new Float64Array(shared.results);
        const workers = ["parser", "renderer"].map((role) => startWorker(role, { seconds }, shared));
        for (let i = 0; i < 2; i++) {
            while (Atomics.load(cells, TID + i) === 0) Atomics.wait(cells, TID + i, 0);
        }
        const tids = [cells[TID], cells[TID + 1]];
        say(`tid ${tids[0]} 0`);
        say(`tid ${tids[1]} 1`);
        say("ready");
        awaitLine();
        Atomics.store(cells, GO, 1);
        Atomics.notify(cells, GO);
        for (let done; (done = Atomics.load(cells, DONE)) < 2; ) Atomics.wait(cells, DONE, done);
        say(`tcpu ${tids[0]} ${results[0]}`);
        say(`tcpu ${tids[1]} ${results[1]}`);
        say(`cpu ${results[0] + results[1]}`);
        awaitEof();
        // The workers have returned; their threads end with the process.
        for (const w of workers) w.unref();
    } else if (mode === "sleep") {
        say(`tid ${tid()}`);
        say("ready");
        awaitLine();
        nap(seconds);
        say("cpu 0");
        awaitEof();
    } else if (mode === "pipe") {
        let fifo = argv[2];
        let tmp = null;
        if (!fifo) {
            tmp = fs.mkdtempSync(path.join(os.tmpdir(), "nodeservice-"));
            fifo = path.join(tmp, "requests");
            require("child_process").execFileSync("mkfifo", [fifo]);
        }
        const shared = { cells: new SharedArrayBuffer(4 * 4), results: new SharedArrayBuffer(8) };
        const cells = new Int32Array(shared.cells);
        const writer = startWorker("writer", { fifo, seconds }, shared);
        // Waits for the writer to open its end.
        const fd = fs.openSync(fifo, "r");
        say(`tid ${tid()}`);
        say("ready");
        awaitLine();
        Atomics.store(cells, GO, 1);
        Atomics.notify(cells, GO);
        while (awaitRequest(fd) > 0) {}
        fs.closeSync(fd);
        if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
        say("cpu 0");
        awaitEof();
        writer.unref();
    } else {
        // A warm-up (argv[2] seconds, default none) before "ready": the
        // JIT's tiers are settled when the measured run starts.
        const warm = argv.length > 2 ? Number(argv[2]) : 0;
        if (warm > 0) {
            serve(warm);
            spentParse = 0;
            spentRender = 0;
        }
        say(`tid ${tid()}`);
        say("ready");
        awaitLine();
        const start = threadCpu();
        const startUser = threadUser();
        serve(seconds);
        const total = threadCpu() - start;
        const user = threadUser() - startUser;
        say(`share parseRequest ${spentParse}`);
        say(`share renderPage ${spentRender}`);
        say(`cpu ${total}`);
        // The part of it in user mode: what a profile without root can
        // see (the kernel drops its samples taken in the kernel).
        say(`user ${user}`);
        if (mode === "exit") process.exit(0);
        awaitEof();
    }
}

if (process.argv.includes("--worker") && !require("worker_threads").isMainThread) {
    workerMain();
} else {
    main();
}
