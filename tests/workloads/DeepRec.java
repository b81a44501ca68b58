/*
 * Deep Java recursion with known truth (tests/deep_stacks.rs): main
 * recurses DEPTH levels through level(), then spins SECONDS of the
 * thread's own CPU time in leaf(): every sample of leaf holds main and
 * DEPTH + 1 level() frames.
 *
 * usage: DeepRec DEPTH SECONDS
 * Protocol on stdio: "ready", wait for a line, work, "cpu S", stay alive
 * until stdin closes.
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class DeepRec {
    static volatile long sink;
    static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    static void leaf(long nanos) {
        long end = THREADS.getCurrentThreadCpuTime() + nanos;
        while (THREADS.getCurrentThreadCpuTime() < end) {
            for (int i = 0; i < 20000; i++) {
                sink += i;
            }
        }
    }

    static int level(int n, long nanos) {
        if (n == 0) {
            leaf(nanos);
            return 0;
        }
        int r = level(n - 1, nanos);
        sink += r;
        return r + 1;
    }

    public static void main(String[] args) throws Exception {
        int depth = Integer.parseInt(args[0]);
        long nanos = (long) (Double.parseDouble(args[1]) * 1e9);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        in.readLine();
        level(depth, nanos);
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        System.out.printf("cpu %.6f%n", os.getProcessCpuTime() / 1e9);
        System.out.flush();
        while (in.readLine() != null) {
        }
    }
}
