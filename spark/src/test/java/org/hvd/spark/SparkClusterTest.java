package org.hvd.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.spark.SparkException;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.ml.evaluation.BinaryClassificationEvaluator;
import org.apache.spark.ml.evaluation.MulticlassClassificationEvaluator;
import org.apache.spark.ml.evaluation.RegressionEvaluator;
import org.apache.spark.ml.linalg.SQLDataTypes;
import org.apache.spark.ml.linalg.Vector;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.linalg.Vectors;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.hvd.Hvd;
import org.hvd.HvdConfig;
import org.hvd.HvdContext;
import org.hvd.ReduceOp;
import org.hvd.spark.ml.HvdMlpClassificationModel;
import org.hvd.spark.ml.HvdEstimator;
import org.hvd.spark.ml.HvdMlpClassifier;
import org.hvd.spark.ml.HvdModel;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * Real executor JVMs: one local-cluster[2,1,1024] (two workers with one core
 * each, so a 2-task barrier stage spans two executor processes) shared by every
 * test. run_tests.sh puts the hvd jar, these classes and the tests on the
 * executors' class path (spark.executor.extraClassPath, from
 * -Dhvd.test.executorClasspath).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(300)
class SparkClusterTest {
  SparkSession spark;
  JavaSparkContext sc;
  HvdMlpClassificationModel model;  // fitted by one test, reloaded by the next
  Dataset<Row> test;

  @BeforeAll
  void startCluster() {
    long t0 = System.nanoTime();
    spark = SparkSession.builder()
        .master("local-cluster[2,1,1024]")
        .appName("hvd-spark-tests")
        .config("spark.executor.extraClassPath", System.getProperty("hvd.test.executorClasspath", ""))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.task.maxFailures", "1")
        .getOrCreate();
    sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    // No waiting for the executors here: the runner waits for its task slots.
    System.out.printf("SparkSession up in %.1f s%n", (System.nanoTime() - t0) / 1e9);
  }

  @AfterAll
  void stopCluster() {
    if (spark != null) spark.stop();
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** What each rank reports back in the allreduce test. */
  static final class Report implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    int rank, size, localRank, localSize;
    long pid;
    double[] sums;
    long[] gathered;
  }

  @Test
  @Order(1)
  void barrierRunnerAllreducesAcrossExecutors() {
    JavaRDD<Integer> data = sc.parallelize(IntStream.range(0, 8).boxed().collect(Collectors.toList()), 2);
    long t0 = System.nanoTime();
    List<Report> reports = HvdSpark.run(data, (ctx, rows) -> {
      double sum = 0, count = 0;
      while (rows.hasNext()) {
        sum += rows.next();
        count++;
      }
      HvdContext hvd = ctx.hvd();
      Report r = new Report();
      r.rank = hvd.rank();
      r.size = hvd.size();
      r.localRank = hvd.localRank();
      r.localSize = hvd.localSize();
      r.pid = ProcessHandle.current().pid();
      r.sums = hvd.allreduce("sum", new double[] {sum, count, hvd.rank()}, ReduceOp.SUM);
      r.gathered = hvd.allgather("pids", new long[] {r.pid});
      if (r.rank != ctx.rank() || r.size != ctx.size() || r.localRank != ctx.localRank()) {
        throw new AssertionError("hvd's topology differs from the runner's");
      }
      return r;
    }, HvdConfig.builder().startTimeoutSeconds(60).build());
    System.out.printf("first barrier job (executors registering): %.1f s%n", (System.nanoTime() - t0) / 1e9);
    assertEquals(2, reports.size());
    for (int rank = 0; rank < 2; ++rank) {
      Report r = reports.get(rank);
      assertEquals(rank, r.rank, "results come back in rank order");
      assertEquals(2, r.size);
      assertEquals(rank, r.localRank, "both executors run on this host");
      assertEquals(2, r.localSize);
      assertArrayEquals(new double[] {28, 8, 1}, r.sums, "0 + 1 + ... + 7 over both partitions");
      assertArrayEquals(new long[] {reports.get(0).pid, reports.get(1).pid}, r.gathered);
    }
    assertNotEquals(reports.get(0).pid, reports.get(1).pid, "two executor JVMs");
    assertNotEquals(ProcessHandle.current().pid(), reports.get(0).pid, "not the driver");
  }

  /** Two concentric rings in 2-D: not linearly separable. */
  Dataset<Row> rings(int n, long seed) {
    Random rnd = new Random(seed);
    List<Row> rows = new ArrayList<>();
    for (int i = 0; i < n; ++i) {
      int label = i % 2;
      double radius = label == 0 ? 0.8 * rnd.nextDouble() : 1.4 + 0.8 * rnd.nextDouble();
      double angle = 2 * Math.PI * rnd.nextDouble();
      rows.add(RowFactory.create(Vectors.dense(radius * Math.cos(angle), radius * Math.sin(angle)),
          (double) label));
    }
    StructType schema = new StructType()
        .add("features", SQLDataTypes.VectorType())
        .add("label", DataTypes.DoubleType);
    return spark.createDataFrame(rows, schema);
  }

  static double accuracy(Dataset<Row> scored) {
    long right = scored.filter("prediction = label").count();
    return (double) right / scored.count();
  }

  @Test
  @Order(2)
  void estimatorReachesTheStatedAccuracy() {
    Dataset<Row> train = rings(2000, 1);
    test = rings(1000, 2).cache();
    long t0 = System.nanoTime();
    model = new HvdMlpClassifier()
        .setNumProc(2).setEpochs(20).setBatchSize(32).setLearningRate(0.5).setHiddenSize(16).setSeed(7)
        .fit(train);
    double seconds = (System.nanoTime() - t0) / 1e9;
    double acc = accuracy(model.transform(test));
    double[] loss = model.trainingLoss();
    System.out.printf("fit: %.1f s, loss %.4f -> %.4f, test accuracy %.4f%n", seconds, loss[0],
        loss[loss.length - 1], acc);
    assertEquals(2, model.numClasses());
    assertEquals(2, model.numFeatures());
    assertTrue(loss[loss.length - 1] < loss[0], "the loss went down");
    assertTrue(acc >= 0.95, "accuracy " + acc + " on held-out rings, stated: >= 0.95");
  }

  @Test
  @Order(3)
  void rawPredictionAndProbabilityColumnsAsSparkClassifiersHaveThem() {
    if (model == null) estimatorReachesTheStatedAccuracy();
    Dataset<Row> scored = model.transform(test);
    assertEquals(List.of("features", "label", "rawPrediction", "probability", "prediction"),
        List.of(scored.columns()));
    for (Row r : scored.limit(200).collectAsList()) {
      double[] raw = ((Vector) r.getAs("rawPrediction")).toArray();
      double[] prob = ((Vector) r.getAs("probability")).toArray();
      double pred = r.getAs("prediction");
      assertEquals(2, raw.length);
      assertEquals(2, prob.length);
      double e0 = Math.exp(raw[0]), e1 = Math.exp(raw[1]);
      assertEquals(e1 / (e0 + e1), prob[1], 1e-12, "probability = softmax(rawPrediction)");
      assertEquals(1.0, prob[0] + prob[1], 1e-12);
      assertEquals(prob[1] > prob[0] ? 1.0 : 0.0, pred, "prediction = argmax");
      assertArrayEquals(raw, model.predictRaw((Vector) r.getAs("features")).toArray(), 0.0);
    }
    // Spark's evaluators take the columns as they are.
    double auc = new BinaryClassificationEvaluator().evaluate(scored);  // rawPrediction, label
    assertTrue(auc >= 0.99, "area under ROC " + auc);
    double logLoss = new MulticlassClassificationEvaluator().setMetricName("logLoss").evaluate(scored);
    assertTrue(logLoss < 0.1, "log loss " + logLoss);
    // An empty name leaves a column out.
    List<String> cols = List.of(model.copy(ParamMap.empty()).setRawPredictionCol("").setProbabilityCol("")
        .transform(test).columns());
    assertEquals(List.of("features", "label", "prediction"), cols);
    System.out.printf("rawPrediction/probability: AUC %.4f, log loss %.4f%n", auc, logLoss);
  }

  @Test
  @Order(4)
  void savedAndLoadedModelPredictsTheSame() throws Exception {
    if (model == null) estimatorReachesTheStatedAccuracy();
    Path dir = Files.createTempDirectory("hvd-mlp-");
    String path = dir.resolve("model").toString();
    model.write().overwrite().save(path);
    HvdMlpClassificationModel loaded = HvdMlpClassificationModel.load(path);
    assertEquals(model.uid(), loaded.uid());
    assertEquals(20, (int) (Integer) loaded.getOrDefault(loaded.epochs()));
    assertEquals(0.5, (double) (Double) loaded.getOrDefault(loaded.learningRate()));
    assertArrayEquals(model.trainingLoss(), loaded.trainingLoss());
    List<Double> a = model.transform(test).select("prediction").as(org.apache.spark.sql.Encoders.DOUBLE())
        .collectAsList();
    List<Double> b = loaded.transform(test).select("prediction").as(org.apache.spark.sql.Encoders.DOUBLE())
        .collectAsList();
    assertEquals(a, b);

    HvdMlpClassifier est = new HvdMlpClassifier().setEpochs(3).setNumProc(2);
    String estPath = dir.resolve("estimator").toString();
    est.write().save(estPath);
    HvdMlpClassifier est2 = HvdMlpClassifier.load(estPath);
    assertEquals(3, est2.getEpochs());
    assertEquals(est.uid(), est2.uid());
  }

  @Test
  @Order(5)
  void aThrowingTaskFailsTheJobWithItsMessageAndNoExecutorHangs() {
    JavaRDD<Integer> data = sc.parallelize(List.of(0, 1), 2);
    long t0 = System.nanoTime();
    SparkException e = assertThrows(SparkException.class, () -> HvdSpark.run(data, (ctx, rows) -> {
      HvdContext hvd = ctx.hvd();
      hvd.allreduce("warmup", new float[] {1}, ReduceOp.SUM);
      if (ctx.rank() == 1) throw new IllegalStateException("rank 1 exploded on purpose");
      // Rank 0 waits in collectives rank 1 never joins: only the kill or the
      // peer's closed context can end this.
      for (int i = 0; ; ++i) hvd.allreduce("step" + i, new float[] {1}, ReduceOp.SUM);
    }, HvdConfig.builder().build()));
    double failedAfter = (System.nanoTime() - t0) / 1e9;
    System.out.printf("failing job ended after %.1f s: %s%n", failedAfter, firstLine(e.getMessage()));
    assertTrue(e.getMessage().contains("rank 1 exploded on purpose"), e.getMessage());
    assertTrue(failedAfter < 60, "failed within 60 s");

    // Both slots must be free again: a new 2-task barrier job runs at once.
    long t1 = System.nanoTime();
    List<Integer> ranks = HvdSpark.run(sc, 2, (ctx, rows) -> {
      ctx.hvd().barrier();
      return ctx.rank();
    }, HvdConfig.builder().build());
    assertEquals(List.of(0, 1), ranks);
    assertTrue((System.nanoTime() - t1) / 1e9 < 60, "executors were free");
  }

  @Test
  @Order(6)
  void moreRanksThanSlotsFailsAtOnceNamingBothNumbers() {
    long t0 = System.nanoTime();
    InsufficientSlotsException e = assertThrows(InsufficientSlotsException.class,
        () -> HvdSpark.run(sc, 3, (ctx, rows) -> ctx.rank(), HvdConfig.builder().build()));
    double seconds = (System.nanoTime() - t0) / 1e9;
    assertEquals(3, e.requested());
    assertEquals(2, e.available());
    assertTrue(e.getMessage().contains("asks for 3 ranks, which need 3 barrier task slots")
        && e.getMessage().contains("the cluster has 2 (master local-cluster[2,1,1024], spark.task.cpus=1)"),
        e.getMessage());
    assertTrue(seconds < 5, "failed after " + seconds + " s");
    // The estimator too (it asks the runner for setNumProc ranks).
    assertThrows(InsufficientSlotsException.class,
        () -> new HvdMlpClassifier().setNumProc(3).setEpochs(1).fit(rings(30, 3)));
    assertEquals(0, sc.sc().statusTracker().getActiveJobIds().length, "nothing was submitted");
  }

  /** Code written for hvdrun: the static API, with its own init/shutdown pair. */
  static double[] hvdrunStyleStep(double value) {
    Hvd.init();  // inside a Spark task (bound): only counts a reference
    try {
      double[] sum = Hvd.allreduce("static.sum", new double[] {value, Hvd.rank()}, ReduceOp.SUM);
      double[] avg = Hvd.allreduce("static.avg", new double[] {value});  // AVERAGE
      return new double[] {Hvd.rank(), Hvd.size(), Hvd.localRank(), Hvd.localSize(), sum[0], sum[1], avg[0]};
    } finally {
      Hvd.shutdown();
    }
  }

  @Test
  @Order(7)
  void staticHvdApiReachesTheTasksContext() {
    for (int round = 0; round < 2; ++round) {  // twice: nothing may be left over from the first
      int offset = round * 10;
      List<double[]> got = HvdSpark.run(sc, 2, (ctx, rows) -> {
        if (Hvd.binding() == null || Hvd.binding().context() != ctx.hvd()) {
          throw new AssertionError("the task's context is not bound to the task's thread");
        }
        if (Hvd.context() != ctx.hvd()) throw new AssertionError("Hvd.context() is not the task's context");
        return hvdrunStyleStep(ctx.rank() + 1 + offset);
      }, HvdConfig.builder().build());
      for (int rank = 0; rank < 2; ++rank) {
        double s = 1 + offset + 2 + offset;
        assertArrayEquals(new double[] {rank, 2, rank, 2, s, 1, s / 2}, got.get(rank), "round " + round);
      }
    }
    // After the jobs the executors' default context is gone again.
    List<Boolean> initialized = sc.parallelize(List.of(0, 1), 2).map(x -> Hvd.isInitialized()).collect();
    assertEquals(List.of(false, false), initialized);
  }

  @Test
  @Order(8)
  void theDocsRunnerSnippetGivesWhatItSays() {
    // docs/spark.md, "The barrier runner", as printed there.
    JavaRDD<Double> values = sc.parallelize(List.of(1.0, 2.0, 3.0, 4.0), 2);   // 2 partitions = 2 ranks
    List<double[]> perRank = HvdSpark.run(values, (ctx, rows) -> {
      double local = 0;
      while (rows.hasNext()) local += rows.next();               // this partition's rows
      return ctx.hvd().allreduce("sum", new double[] {local}, ReduceOp.SUM);
    }, HvdConfig.builder().build());                             // per-rank results, in rank order: [10.0], [10.0]
    assertEquals(2, perRank.size());
    assertArrayEquals(new double[] {10.0}, perRank.get(0));
    assertArrayEquals(new double[] {10.0}, perRank.get(1));
  }

  /** A user's training function for HvdEstimator: full-batch gradient descent, linear model. */
  static double[] trainLinear(HvdContext hvd, Iterator<Row> it) {
    List<double[]> x = new ArrayList<>();
    List<Double> y = new ArrayList<>();
    it.forEachRemaining(r -> {
      x.add(((org.apache.spark.ml.linalg.Vector) r.getAs("features")).toArray());
      y.add(r.getAs("label"));
    });
    int d = x.get(0).length;
    double[] w = new double[d + 1];  // the same start on every rank
    for (int step = 0; step < 300; ++step) {
      double[] g = new double[d + 1];
      for (int i = 0; i < x.size(); ++i) {
        double err = w[d] - y.get(i);
        for (int j = 0; j < d; ++j) err += w[j] * x.get(i)[j];
        for (int j = 0; j < d; ++j) g[j] += 2 * err * x.get(i)[j] / x.size();
        g[d] += 2 * err / x.size();
      }
      g = hvd.allreduce("grad", g);  // AVERAGE
      for (int j = 0; j <= d; ++j) w[j] -= 0.1 * g[j];
    }
    return w;
  }

  @Test
  @Order(9)
  void anEstimatorAroundTheUsersTrainingFunction() {
    double[] truth = {1.5, -2.0, 0.5, 0.25};  // 3 weights, then the bias
    Random rnd = new Random(5);
    List<Row> rows = new ArrayList<>();
    for (int i = 0; i < 400; ++i) {
      double[] f = {rnd.nextGaussian(), rnd.nextGaussian(), rnd.nextGaussian()};
      double label = truth[3] + truth[0] * f[0] + truth[1] * f[1] + truth[2] * f[2] + 0.01 * rnd.nextGaussian();
      rows.add(RowFactory.create(Vectors.dense(f), label));
    }
    StructType schema = new StructType().add("features", SQLDataTypes.VectorType()).add("label", DataTypes.DoubleType);
    Dataset<Row> data = spark.createDataFrame(rows, schema);
    HvdModel<double[]> fitted = new HvdEstimator<double[]>()
        .setTrainer((ctx, it) -> trainLinear(ctx.hvd(), it))
        .setPredictor((w, v) -> w[3] + w[0] * v.apply(0) + w[1] * v.apply(1) + w[2] * v.apply(2))
        .setNumProc(2)
        .fit(data);
    assertArrayEquals(truth, fitted.state(), 0.01);
    Dataset<Row> scored = fitted.transform(data);
    double rmse = new RegressionEvaluator().setMetricName("rmse").evaluate(scored);
    System.out.printf("HvdEstimator: weights %s, rmse %.4f%n", java.util.Arrays.toString(fitted.state()), rmse);
    assertTrue(rmse < 0.05, "rmse " + rmse);
    assertThrows(IllegalStateException.class, () -> new HvdEstimator<double[]>().fit(data), "no trainer");
  }

  static String firstLine(String s) {
    int nl = s.indexOf('\n');
    return nl < 0 ? s : s.substring(0, nl);
  }
}
