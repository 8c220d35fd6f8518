package org.hvd.spark.ml;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Random;
import org.apache.spark.ml.linalg.Vector;
import org.apache.spark.sql.Row;
import org.hvd.HvdContext;
import org.hvd.ReduceOp;
import org.hvd.spark.HvdTaskContext;
import org.hvd.spark.TrainFunction;

/**
 * Data-parallel minibatch SGD, one rank per partition: every step each rank
 * computes the gradient sum of its own minibatch (batchSize rows), and one
 * grouped allreduce (negotiated and fused as a unit: all gradient tensors, the
 * row count and the loss) sums them over ranks; every rank then applies the same
 * averaged update, so the replicas stay identical. Rank 0 initialises the
 * weights and broadcasts them. Ranks with fewer rows cycle through theirs so
 * that every rank runs the same number of steps (an empty partition adds
 * zeros).
 */
final class MlpTrainer implements TrainFunction<Row, MlpTrainer.Result>, Serializable {
  private static final long serialVersionUID = 1L;
  private final int hidden, epochs, batchSize;
  private final double learningRate;
  private final long seed;

  static final class Result implements Serializable {
    private static final long serialVersionUID = 1L;
    final Mlp model;
    final double[] epochLoss;

    Result(Mlp model, double[] epochLoss) {
      this.model = model;
      this.epochLoss = epochLoss;
    }
  }

  MlpTrainer(int hidden, int epochs, int batchSize, double learningRate, long seed) {
    this.hidden = hidden;
    this.epochs = epochs;
    this.batchSize = batchSize;
    this.learningRate = learningRate;
    this.seed = seed;
  }

  @Override
  public Result call(HvdTaskContext task, Iterator<Row> rows) {
    HvdContext hvd = task.hvd();
    int rank = task.rank();
    List<double[]> xs = new ArrayList<>();
    List<Integer> ys = new ArrayList<>();
    int maxLabel = -1;
    while (rows.hasNext()) {
      Row r = rows.next();
      double[] x = ((Vector) r.get(0)).toArray();
      double label = ((Number) r.get(1)).doubleValue();
      if (label < 0 || label != Math.rint(label)) {
        throw new IllegalArgumentException("labels must be class indices 0, 1, 2, ...; got " + label);
      }
      xs.add(x);
      ys.add((int) label);
      maxLabel = Math.max(maxLabel, (int) label);
    }
    int n = xs.size();
    int localD = n == 0 ? 0 : xs.get(0).length;
    for (double[] x : xs) {
      if (x.length != localD) throw new IllegalArgumentException("feature vectors differ in length");
    }
    long localSteps = n == 0 ? 0 : (n + batchSize - 1) / batchSize;
    long[] meta = hvd.allreduce("mlp.meta", new long[] {localD, maxLabel + 1, localSteps}, ReduceOp.MAX);
    int d = (int) meta[0], k = Math.max(2, (int) meta[1]);
    long steps = meta[2];
    if (n > 0 && localD != d) {
      throw new IllegalArgumentException("rank " + rank + " has " + localD + " features, another rank " + d);
    }
    if (d == 0) throw new IllegalArgumentException("the training set is empty");

    Mlp model = rank == 0 ? Mlp.init(d, hidden, k, seed) : Mlp.zeros(d, hidden, k);
    for (int i = 0; i < model.params.length; ++i) {
      double[] v = hvd.broadcast("mlp.init." + i, model.params[i], 0);
      System.arraycopy(v, 0, model.params[i], 0, v.length);
    }

    int np = model.params.length;
    String[] names = new String[np + 1];
    for (int i = 0; i < np; ++i) names[i] = "mlp.grad." + i;
    names[np] = "mlp.grad.count_loss";
    int[] order = new int[n];
    for (int i = 0; i < n; ++i) order[i] = i;
    double[] epochLoss = new double[epochs];
    for (int epoch = 0; epoch < epochs; ++epoch) {
      Random rnd = new Random(seed * 1_000_003L + rank * 7_919L + epoch);
      for (int i = n - 1; i > 0; --i) {
        int j = rnd.nextInt(i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
      double lossSum = 0, countSum = 0;
      for (long s = 0; s < steps; ++s) {
        double[][] g = new double[np + 1][];
        for (int i = 0; i < np; ++i) g[i] = new double[model.params[i].length];
        double loss = 0;
        int count = 0;
        if (n > 0) {
          for (int b = 0; b < batchSize; ++b) {
            int idx = order[(int) ((s * batchSize + b) % n)];
            loss += model.accumulate(xs.get(idx), ys.get(idx), g);
            count++;
          }
        }
        g[np] = new double[] {count, loss};
        double[][] sum = hvd.groupedAllreduce(names, g, ReduceOp.SUM);
        double total = sum[np][0];
        lossSum += sum[np][1];
        countSum += total;
        if (total == 0) continue;
        double step = learningRate / total;
        for (int i = 0; i < np; ++i) {
          double[] p = model.params[i], gi = sum[i];
          for (int j = 0; j < p.length; ++j) p[j] -= step * gi[j];
        }
      }
      epochLoss[epoch] = countSum == 0 ? Double.NaN : lossSum / countSum;
    }
    return rank == 0 ? new Result(model, epochLoss) : null;
  }
}
