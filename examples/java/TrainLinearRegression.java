/*
 * Data-parallel linear regression on hvd's Java binding (org.hvd.Hvd).
 *
 * The single-process program plus a few hvd lines: init, broadcast rank 0's
 * initial weights, average the gradients with allreduce (a direct ByteBuffer,
 * so it names its DataType), average the epoch loss, check that every rank
 * ends with the same weights, shutdown. Each rank trains on its own shard of a
 * synthetic data set (y = w_true . x + b_true + noise). Runs alone as a world
 * of one, or as N ranks under hvdrun:
 *
 *   scripts/build.sh                              # the README's build: build/bin/hvdrun
 *   HVD_BUILD_DIR=build bindings/java/build.sh    # prints bindings/java/target/hvd-java-0.1.0.jar
 *   javac -cp bindings/java/target/hvd-java-0.1.0.jar -d /tmp/linreg examples/java/TrainLinearRegression.java
 *   build/bin/hvdrun -np 2 java -cp bindings/java/target/hvd-java-0.1.0.jar:/tmp/linreg TrainLinearRegression 20
 *
 * Usage: TrainLinearRegression [epochs]
 * Prints one line per rank at the end:
 *   rank R of N: final loss L, weights <hash> identical on all N ranks: true
 */
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.util.Arrays;
import java.util.Random;
import org.hvd.DataType;
import org.hvd.Hvd;
import org.hvd.ReduceOp;

public class TrainLinearRegression {
  static final int FEATURES = 8;
  static final int SAMPLES_PER_RANK = 2048;
  static final int BATCH = 64;
  static final double LEARNING_RATE = 0.05;

  public static void main(String[] args) {
    int epochs = args.length > 0 ? Integer.parseInt(args[0]) : 20;

    Hvd.init();  // hvdrun's variables, or a world of one
    int rank = Hvd.rank();
    int size = Hvd.size();

    // The true model is the same everywhere; each rank's data are its own.
    Random truth = new Random(12345);
    double[] wTrue = new double[FEATURES + 1];  // weights, then the bias
    for (int j = 0; j <= FEATURES; ++j) wTrue[j] = truth.nextGaussian();
    double[][] x = new double[SAMPLES_PER_RANK][FEATURES];
    double[] y = new double[SAMPLES_PER_RANK];
    Random data = new Random(1000 + 7919L * rank);
    for (int i = 0; i < SAMPLES_PER_RANK; ++i) {
      double t = wTrue[FEATURES];
      for (int j = 0; j < FEATURES; ++j) {
        x[i][j] = data.nextGaussian();
        t += wTrue[j] * x[i][j];
      }
      y[i] = t + 0.1 * data.nextGaussian();
    }

    // Every rank starts from its own random weights; rank 0's win.
    double[] w = new Random(99 + rank).doubles(FEATURES + 1).toArray();
    w = Hvd.broadcast("init_weights", w, 0);

    // The gradient lives in a direct ByteBuffer: zero-copy, reduced in place.
    ByteBuffer gradBytes = ByteBuffer.allocateDirect(8 * (FEATURES + 1)).order(ByteOrder.nativeOrder());
    DoubleBuffer grad = gradBytes.asDoubleBuffer();
    double loss = Double.NaN;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      double sse = 0;
      for (int start = 0; start < SAMPLES_PER_RANK; start += BATCH) {
        for (int j = 0; j <= FEATURES; ++j) grad.put(j, 0.0);
        for (int i = start; i < start + BATCH; ++i) {
          double err = predict(w, x[i]) - y[i];
          sse += err * err;
          for (int j = 0; j < FEATURES; ++j) grad.put(j, grad.get(j) + 2 * err * x[i][j] / BATCH);
          grad.put(FEATURES, grad.get(FEATURES) + 2 * err / BATCH);
        }
        // A ByteBuffer carries no element type: name it. No op: AVERAGE over the ranks.
        Hvd.allreduce("grad", gradBytes, gradBytes, DataType.FLOAT64);
        for (int j = 0; j <= FEATURES; ++j) w[j] -= LEARNING_RATE * grad.get(j);
      }
      loss = Hvd.allreduce("loss", new double[] {sse / SAMPLES_PER_RANK})[0];  // mean over ranks
      if (rank == 0 && (epoch == 1 || epoch % 5 == 0 || epoch == epochs)) {
        System.out.printf("epoch %d: loss %.6f%n", epoch, loss);
      }
    }

    // Same updates from the same start: the weights must agree bit for bit.
    double[] all = Hvd.allgather("final_weights", w);
    boolean identical = true;
    for (int r = 0; r < size; ++r) {
      identical &= Arrays.equals(w, Arrays.copyOfRange(all, r * w.length, (r + 1) * w.length));
    }
    double maxErr = 0;
    for (int j = 0; j <= FEATURES; ++j) maxErr = Math.max(maxErr, Math.abs(w[j] - wTrue[j]));
    System.out.printf("rank %d of %d: final loss %.6f, max |w - w_true| %.4f, weights %08x identical on all %d ranks: %b%n",
        rank, size, loss, maxErr, Arrays.hashCode(w), size, identical);
    Hvd.shutdown();
    if (!identical) System.exit(1);
  }

  static double predict(double[] w, double[] x) {
    double p = w[FEATURES];
    for (int j = 0; j < FEATURES; ++j) p += w[j] * x[j];
    return p;
  }
}
