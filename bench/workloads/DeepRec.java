/*
 * Deep Java stacks for bench/deep.py: DeepRec.main -> recurse x DEPTH ->
 * spin, on the main thread; prints "ready" at the leaf, spins there for
 * SECONDS, then returns through every level (work after each call).
 *
 * usage: javac -d DIR DeepRec.java && java -cp DIR DeepRec DEPTH SECONDS
 */
public class DeepRec {
    static volatile long sink;

    static long spin(double seconds) {
        System.out.println("ready");
        System.out.flush();
        long end = System.nanoTime() + (long) (seconds * 1e9);
        long x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 10000; i++)
                x = x * 6364136223846793005L + 1442695040888963407L;
            sink = x;
        }
        return x;
    }

    static long recurse(int depth, double seconds) {
        long r = depth <= 1 ? spin(seconds) : recurse(depth - 1, seconds);
        sink += depth;
        return r + depth;
    }

    public static void main(String[] args) {
        recurse(Integer.parseInt(args[0]), Double.parseDouble(args[1]));
    }
}
