/*
 * Data-parallel linear regression as a Spark job: hvd's barrier runner
 * (org.hvd.spark.HvdSpark) makes each partition of the training data one hvd
 * rank, and every rank runs minibatch SGD on its partition, averaging the
 * gradients with allreduce.
 *
 * Build and submit (from the repository root; SPARK_HOME is the pyspark
 * package folder, see docs/spark.md):
 *
 *   eval "$(spark/build.sh)"    # HVD_JAVA_JAR, HVD_SPARK_JAR, SPARK_HOME, ...
 *   javac -cp "$SPARK_HOME/jars/*:$HVD_JAVA_JAR:$HVD_SPARK_JAR" -d /tmp/sparklr examples/spark/SparkLinearRegression.java
 *   jar cf /tmp/sparklr.jar -C /tmp/sparklr .
 *   "$SPARK_HOME/bin/spark-submit" --master "local[2]" --jars "$HVD_JAVA_JAR,$HVD_SPARK_JAR" \
 *       --class SparkLinearRegression /tmp/sparklr.jar 2 20
 *
 * Arguments: [ranks (= partitions)] [epochs]. Prints each rank's final loss and
 * weights, and "weights identical on all N ranks: true"; exits 1 otherwise.
 */
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import org.hvd.HvdConfig;
import org.hvd.HvdContext;
import org.hvd.ReduceOp;
import org.hvd.spark.HvdSpark;

public class SparkLinearRegression {
  static final int FEATURES = 8;
  static final int SAMPLES = 4096;  // in all
  static final int BATCH = 64;      // rows per rank per step
  static final double LEARNING_RATE = 0.05;

  /** What each rank sends back. */
  public static final class Result implements Serializable {
    private static final long serialVersionUID = 1L;
    int rank;
    double loss;
    double[] weights;
  }

  /** Row i of the data set: FEATURES inputs, then the target. */
  static double[] sample(int i) {
    double[] wTrue = trueWeights();
    Random rnd = new Random(1000 + 7919L * i);
    double[] row = new double[FEATURES + 1];
    double t = wTrue[FEATURES];
    for (int j = 0; j < FEATURES; ++j) {
      row[j] = rnd.nextGaussian();
      t += wTrue[j] * row[j];
    }
    row[FEATURES] = t + 0.1 * rnd.nextGaussian();
    return row;
  }

  static double[] trueWeights() {
    Random truth = new Random(12345);
    double[] w = new double[FEATURES + 1];
    for (int j = 0; j <= FEATURES; ++j) w[j] = truth.nextGaussian();
    return w;
  }

  static double predict(double[] w, double[] row) {
    double p = w[FEATURES];
    for (int j = 0; j < FEATURES; ++j) p += w[j] * row[j];
    return p;
  }

  /** One rank's training: its partition's rows, the job's hvd context. */
  static Result train(HvdContext hvd, List<double[]> rows, int epochs) {
    // Every rank must take the same number of steps: the smallest partition decides.
    int steps = (int) hvd.allreduce("rows", new long[] {rows.size() / BATCH}, ReduceOp.MIN)[0];
    double[] w = new Random(99 + hvd.rank()).doubles(FEATURES + 1).toArray();
    w = hvd.broadcast("init_weights", w, 0);  // rank 0's start wins
    double loss = Double.NaN;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      double sse = 0;
      for (int s = 0; s < steps; ++s) {
        double[] grad = new double[FEATURES + 1];
        for (int i = s * BATCH; i < (s + 1) * BATCH; ++i) {
          double[] row = rows.get(i);
          double err = predict(w, row) - row[FEATURES];
          sse += err * err;
          for (int j = 0; j < FEATURES; ++j) grad[j] += 2 * err * row[j] / BATCH;
          grad[FEATURES] += 2 * err / BATCH;
        }
        grad = hvd.allreduce("grad", grad);  // no op: AVERAGE over the ranks
        for (int j = 0; j <= FEATURES; ++j) w[j] -= LEARNING_RATE * grad[j];
      }
      loss = hvd.allreduce("loss", new double[] {sse / (steps * BATCH)})[0];
    }
    Result r = new Result();
    r.rank = hvd.rank();
    r.loss = loss;
    r.weights = w;
    return r;
  }

  public static void main(String[] args) {
    int ranks = args.length > 0 ? Integer.parseInt(args[0]) : 2;
    int epochs = args.length > 1 ? Integer.parseInt(args[1]) : 20;
    SparkSession spark = SparkSession.builder().appName("hvd-linear-regression").getOrCreate();
    JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());

    List<Integer> ids = IntStream.range(0, SAMPLES).boxed().collect(Collectors.toList());
    JavaRDD<double[]> data = sc.parallelize(ids, ranks).map(SparkLinearRegression::sample);

    long t0 = System.nanoTime();
    // One rank per partition; fails at once (InsufficientSlotsException) when
    // the cluster has fewer task slots than partitions.
    List<Result> results = HvdSpark.run(data, (ctx, it) -> {
      List<double[]> rows = new ArrayList<>();
      it.forEachRemaining(rows::add);
      return train(ctx.hvd(), rows, epochs);
    }, HvdConfig.builder().build());
    System.out.printf("trained %d epochs on %d ranks in %.1f s%n", epochs, ranks, (System.nanoTime() - t0) / 1e9);

    double[] wTrue = trueWeights();
    boolean identical = true;
    for (Result r : results) {
      double maxErr = 0;
      for (int j = 0; j <= FEATURES; ++j) maxErr = Math.max(maxErr, Math.abs(r.weights[j] - wTrue[j]));
      System.out.printf("rank %d: final loss %.6f, max |w - w_true| %.4f, weights %08x%n",
          r.rank, r.loss, maxErr, Arrays.hashCode(r.weights));
      identical &= Arrays.equals(r.weights, results.get(0).weights);
    }
    System.out.printf("weights identical on all %d ranks: %b%n", results.size(), identical);
    spark.stop();
    if (!identical) System.exit(1);
  }
}
