/*
 * bench/parallel/Par.java -- the Java 17 parallel-streams peer of
 * `weft-bench parallel` (run by bench/parallel/peer.sh):
 *
 *   java Par uniform|skewed N THREADS REPS [MAX_ITER]
 *
 * uniform: the sum of Math.sqrt(i) for i in [0, N), as a Java user writes
 * it: LongStream.range(0, N).parallel().mapToDouble(i -> Math.sqrt(i))
 * .reduce(0, Double::sum) (plain summation, as the C peers do: .sum() would
 * add Kahan compensation).  skewed: an N x N Mandelbrot of [-2, 1] x
 * [0, 1.5] (bench/parallel/work.h), MAX_ITER (1000) iterations at most, one row per element of
 * IntStream.range(0, N).parallel().mapToLong(row).sum().  The common
 * ForkJoinPool runs THREADS - 1 workers plus the calling thread (peer.sh
 * sets java.util.concurrent.ForkJoinPool.common.parallelism).  One warm-up
 * run (the JIT compiles), then REPS measured; prints one line
 *   experiment=parallel workload=W peer=java17-streams status=ok threads=T
 *   n=N jvm=VERSION reps=R wall_s=MEDIAN wall_min_s=MIN check=VALUE
 */
import java.util.Arrays;
import java.util.stream.IntStream;
import java.util.stream.LongStream;

public class Par {
    static long mandelRow(int row, int size, int maxIter) {
        double xs = 3.0 / size, ys = 1.5 / size;
        double ci = row * ys;
        long total = 0;
        for (int x = 0; x < size; x++) {
            double cr = -2.0 + x * xs, zr = 0, zi = 0;
            int k = 0;
            while (k < maxIter && zr * zr + zi * zi <= 4.0) {
                double t = zr * zr - zi * zi + cr;
                zi = 2 * zr * zi + ci;
                zr = t;
                k++;
            }
            total += k;
        }
        return total;
    }

    public static void main(String[] a) {
        if (a.length < 4) {
            System.err.println("usage: java Par uniform|skewed N THREADS REPS [MAX_ITER]");
            System.exit(2);
        }
        boolean uniform = a[0].equals("uniform");
        long n = Long.parseLong(a[1]);
        int threads = Integer.parseInt(a[2]), reps = Integer.parseInt(a[3]);
        int maxIter = a.length > 4 ? Integer.parseInt(a[4]) : 1000;
        double[] wall = new double[reps];
        String check = "";
        for (int r = -1; r < reps; r++) {
            long t0 = System.nanoTime();
            if (uniform) {
                double s = LongStream.range(0, n).parallel().mapToDouble(i -> Math.sqrt(i)).reduce(0, Double::sum);
                check = String.format("%.10e", s);
            } else {
                int size = (int) n;
                long s = IntStream.range(0, size).parallel().mapToLong(row -> mandelRow(row, size, maxIter)).sum();
                check = Long.toString(s);
            }
            double dt = (System.nanoTime() - t0) / 1e9;
            if (r >= 0) wall[r] = dt;
        }
        Arrays.sort(wall);
        StringBuilder b = new StringBuilder();
        b.append("experiment=parallel workload=").append(a[0]).append(" peer=java17-streams status=ok threads=")
         .append(threads).append(" n=").append(n);
        if (!uniform) b.append(" max_iter=").append(maxIter);
        b.append(" jvm=").append(System.getProperty("java.version")).append(" reps=").append(reps).append(String.format(" wall_s=%.4f wall_min_s=%.4f", wall[reps / 2], wall[0]))
         .append(" check=").append(check);
        System.out.println(b);
    }
}
