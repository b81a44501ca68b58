// A Java service with a known call chain and its own CPU accounting, for
// tests/java_frames.rs. Speaks the tests/workloads protocol: prints
// "tid N" for each worker thread and "ready", waits for a line, works,
// reports, then waits for stdin to close.
//
// Modes (argv[0]), with seconds of work in argv[1]:
// - cpu [WARM]: main -> serve -> handle -> parseRequest (which calls the small
//   mix) | renderPage (calling emit, which the JIT inlines), timing each leaf with the
//   thread's CPU clock ("share NAME SECONDS"), then "cpu S" (the thread's
//   CPU over the whole serve); with WARM, it serves WARM seconds
//   before "ready", unmeasured;
// - exit: as cpu, but the JVM exits right after its report;
// - threads: a thread "parser" runs parseRequest, a thread "renderer"
//   renderPage; "tcpu TID S" for each, then "cpu S";
// - sleep: nap() -> Thread.sleep(100) until the seconds are up;
// - socket: awaitRequest() blocks in a socket read, a byte arriving every
//   100 ms from another thread.
import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Paths;

public class Service {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    static long spentParse, spentRender, sink;
    // Work sizes vary from call to call (a fixed sequence), so that the
    // loop's period does not alias with the sampling period.
    static long seed = 1;

    static int next(int lo, int hi) {
        seed = seed * 6364136223846793005L + 1442695040888963407L;
        return lo + (int) ((seed >>> 33) % (hi - lo));
    }

    static long mix(int i) {
        return (long) i * i % 7;
    }

    static long parseRequest(int n) {
        long total = 0;
        for (int i = 0; i < n; i++) total += mix(i);
        return total;
    }

    // Small enough for the JIT to inline into renderPage; the calls it
    // makes (a growing buffer's allocation) carry its inlined frame.
    static void emit(StringBuilder sb, int i) {
        sb.append(i);
    }

    static int renderPage(int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++) emit(sb, i);
        return sb.length();
    }

    static void handle() {
        long t0 = MX.getCurrentThreadCpuTime();
        for (int k = 0; k < 50; k++) sink += parseRequest(next(1500, 4500));
        long t1 = MX.getCurrentThreadCpuTime();
        for (int k = 0; k < 20; k++) sink += renderPage(next(500, 1500));
        long t2 = MX.getCurrentThreadCpuTime();
        spentParse += t1 - t0;
        spentRender += t2 - t1;
    }

    static void serve(double seconds) {
        long end = System.nanoTime() + (long) (seconds * 1e9);
        while (System.nanoTime() < end) handle();
    }

    static void nap(double seconds) throws InterruptedException {
        long end = System.nanoTime() + (long) (seconds * 1e9);
        while (System.nanoTime() < end) Thread.sleep(100);
    }

    static int awaitRequest(InputStream in) throws Exception {
        return in.read();
    }

    static long tid() throws Exception {
        String link = Files.readSymbolicLink(Paths.get("/proc/thread-self")).toString();
        return Long.parseLong(link.substring(link.lastIndexOf('/') + 1));
    }

    // One loop per thread, not one loop with a branch: the JIT inlines a
    // leaf into its caller's compiled body, and a sample between two of
    // that body's debug points is named by the next one, which in a shared
    // body could be the other branch's leaf (4 % of one thread's samples
    // on one boot). That is HotSpot's own precision, which the share tests
    // bound; this mode tests that threads' stacks are kept apart.
    static void parseLoop(double seconds) {
        long end = System.nanoTime() + (long) (seconds * 1e9);
        while (System.nanoTime() < end) sink += parseRequest(next(1500, 4500));
    }

    static void renderLoop(double seconds) {
        long end = System.nanoTime() + (long) (seconds * 1e9);
        while (System.nanoTime() < end) sink += renderPage(next(500, 1500));
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "cpu";
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 3.0;
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        Thread[] workers = new Thread[0];
        long[] tids = new long[2];
        if (mode.equals("threads")) {
            java.util.concurrent.CountDownLatch named = new java.util.concurrent.CountDownLatch(2);
            java.util.concurrent.CountDownLatch go = new java.util.concurrent.CountDownLatch(1);
            long[] cpu = new long[2];
            workers = new Thread[2];
            for (int i = 0; i < 2; i++) {
                final int w = i;
                workers[i] = new Thread(() -> {
                    try {
                        tids[w] = tid();
                        named.countDown();
                        go.await();
                        if (w == 0) parseLoop(seconds);
                        else renderLoop(seconds);
                        cpu[w] = MX.getCurrentThreadCpuTime();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                }, w == 0 ? "parser" : "renderer");
                workers[i].start();
            }
            named.await();
            System.out.println("tid " + tids[0] + " 0");
            System.out.println("tid " + tids[1] + " 1");
            System.out.println("ready");
            stdin.readLine();
            go.countDown();
            for (Thread t : workers) t.join();
            System.out.println("tcpu " + tids[0] + " " + cpu[0] / 1e9);
            System.out.println("tcpu " + tids[1] + " " + cpu[1] / 1e9);
            System.out.println("cpu " + (cpu[0] + cpu[1]) / 1e9);
        } else if (mode.equals("sleep")) {
            System.out.println("tid " + tid());
            System.out.println("ready");
            stdin.readLine();
            nap(seconds);
            System.out.println("cpu 0");
        } else if (mode.equals("socket")) {
            ServerSocket server = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
            Socket client = new Socket(InetAddress.getLoopbackAddress(), server.getLocalPort());
            Socket peer = server.accept();
            System.out.println("tid " + tid());
            System.out.println("ready");
            stdin.readLine();
            Thread writer = new Thread(() -> {
                try {
                    OutputStream out = peer.getOutputStream();
                    long end = System.nanoTime() + (long) (seconds * 1e9);
                    while (System.nanoTime() < end) {
                        Thread.sleep(100);
                        out.write(1);
                        out.flush();
                    }
                    out.write(0);
                    out.flush();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, "writer");
            writer.start();
            InputStream in = client.getInputStream();
            while (awaitRequest(in) > 0) {}
            System.out.println("cpu 0");
        } else {
            // A warm-up (argv[2] seconds, default none) before "ready":
            // the JIT's tiers are settled when the measured run starts.
            double warm = args.length > 2 ? Double.parseDouble(args[2]) : 0;
            if (warm > 0) {
                serve(warm);
                spentParse = 0;
                spentRender = 0;
            }
            System.out.println("tid " + tid());
            System.out.println("ready");
            stdin.readLine();
            long start = MX.getCurrentThreadCpuTime();
            long startUser = MX.getCurrentThreadUserTime();
            serve(seconds);
            long total = MX.getCurrentThreadCpuTime() - start;
            long user = MX.getCurrentThreadUserTime() - startUser;
            System.out.println("share parseRequest " + spentParse / 1e9);
            System.out.println("share renderPage " + spentRender / 1e9);
            System.out.println("cpu " + total / 1e9);
            // The part of it in user mode: what a profile without root
            // can see (the kernel drops its samples taken in the kernel).
            System.out.println("user " + user / 1e9);
            if (mode.equals("exit")) {
                System.out.flush();
                System.exit(0);
            }
        }
        while (stdin.read() >= 0) {}
    }
}
