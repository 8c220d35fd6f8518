package org.hvd.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import org.hvd.Hvd;
import org.hvd.HvdConfig;
import org.hvd.ReduceOp;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * local[2]: both ranks are threads of this JVM (the driver's), so hvd's one
 * process-wide default context cannot be either's; the runner binds each
 * task's context to its thread and code written only against Hvd.* works.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(300)
class LocalModeStaticApiTest {
  SparkSession spark;
  JavaSparkContext sc;

  @BeforeAll
  void start() {
    spark = SparkSession.builder()
        .master("local[2]")
        .appName("hvd-spark-local-static-api")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.task.maxFailures", "1")
        .getOrCreate();
    sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
  }

  @AfterAll
  void stop() {
    if (spark != null) spark.stop();
    while (Hvd.isInitialized()) Hvd.shutdown();
  }

  /** Code written for hvdrun: nothing but Hvd.*, with its own init/shutdown pair. */
  static long[] hvdrunStyle(int value) {
    Hvd.init();
    try {
      int rank = Hvd.rank();
      int[] sum = Hvd.allreduce("static.sum", new int[] {value, rank, 1}, ReduceOp.SUM);
      long[] big = Hvd.allreduce("static.long", new long[] {(1L << 40) * (rank + 1)}, ReduceOp.SUM);
      int[] max = Hvd.allreduce("static.max", new int[] {value}, ReduceOp.MAX);
      long[] gathered = Hvd.allgather("static.gather", new long[] {100L * rank + value});
      int[] root1 = Hvd.broadcast("static.bcast", new int[] {value}, 1);
      Hvd.barrier();
      return new long[] {rank, Hvd.size(), Hvd.localRank(), Hvd.localSize(), sum[0], sum[1], sum[2],
          big[0], max[0], gathered[0], gathered[1], root1[0], Hvd.isInitialized() ? 1 : 0,
          ProcessHandle.current().pid()};
    } finally {
      Hvd.shutdown();
      Hvd.shutdown();  // one too many, as careless code might: the runner's context stays
    }
  }

  @Test
  void staticHvdCallsGiveExactResultsWithTwoRanksInOneJvm() {
    long driverPid = ProcessHandle.current().pid();
    // The driver holds a default context of its own (a world of one): the tasks'
    // Hvd.* must reach their own contexts, not it, and must leave it alone.
    Hvd.init();
    try {
      assertEquals(1, Hvd.size());
      for (int round = 0; round < 2; ++round) {  // twice: nothing may be left over from the first
        final int offset = round * 10;
        List<long[]> got = HvdSpark.run(sc, 2, (ctx, rows) -> {
          if (Hvd.context() != ctx.hvd()) throw new AssertionError("Hvd.context() is not the task's context");
          @SuppressWarnings("deprecation")
          boolean bound = ctx.staticApiBound();
          if (!bound) throw new AssertionError("staticApiBound() is false");
          return hvdrunStyle(ctx.rank() + 1 + offset);
        }, HvdConfig.builder().build());
        assertEquals(2, got.size());
        long v0 = 1 + offset, v1 = 2 + offset;
        for (int rank = 0; rank < 2; ++rank) {
          long[] r = got.get(rank);
          assertArrayEquals(new long[] {rank, 2, rank, 2, v0 + v1, 1, 2, 3L << 40, v1,
              v0, 100 + v1, v1, 1, driverPid}, r, "round " + round + ", rank " + rank);
        }
      }
      assertTrue(Hvd.isInitialized(), "the driver's default context survived the tasks' shutdowns");
      assertEquals(0, Hvd.rank());
      assertEquals(1, Hvd.size());
    } finally {
      Hvd.shutdown();
    }
    assertFalse(Hvd.isInitialized());
    // Spark's task threads (a pool it reuses) were given back unbound: a plain
    // task sees no binding and no hvd.
    List<String> after = sc.parallelize(List.of(0, 1), 2)
        .map(x -> Hvd.binding() + " " + Hvd.isInitialized()).collect();
    assertEquals(List.of("null false", "null false"), after);
  }
}
