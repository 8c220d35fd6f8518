package org.hvd.it;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import org.hvd.DataType;
import org.hvd.Hvd;
import org.hvd.ReduceOp;

/**
 * One rank of a job started by hvdrun (MultiProcessTest): ByteBuffers with a
 * DataType give exact float results, the untyped form is refused, an op left
 * out averages, and a second Hvd.shutdown() does nothing. Prints
 * "rank R/N: bytebuffer checks passed", exits 1 on the first failed check.
 */
public final class ByteBufferMain {
  private ByteBufferMain() {}

  static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  static ByteBuffer direct(int bytes) {
    return ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder());
  }

  public static void main(String[] args) {
    try {
      Hvd.init();
      int r = Hvd.rank(), n = Hvd.size();

      // 1.5f on every rank, summed as FLOAT32 through a direct ByteBuffer, in place.
      ByteBuffer x = direct(4).putFloat(0, 1.5f);
      Hvd.allreduce("x", x, x, DataType.FLOAT32, ReduceOp.SUM);
      check(x.getFloat(0) == 1.5f * n, "float32 sum " + x.getFloat(0));
      System.out.println("rank " + r + ": 1.5f summed over " + n + " ranks = " + x.getFloat(0));

      // The untyped form is refused before anything is submitted.
      ByteBuffer y = direct(4).putFloat(0, 1.5f);
      try {
        Hvd.allreduce("y", y, y, ReduceOp.SUM);
        check(false, "the untyped allreduce of a ByteBuffer was not refused");
      } catch (IllegalArgumentException e) {
        check(e.getMessage().startsWith("allreduce 'y': a ByteBuffer carries no element type; pass a DataType"),
            e.getMessage());
        System.out.println("rank " + r + ": refused: " + e.getMessage());
      }
      check(y.getFloat(0) == 1.5f, "the refused buffer is untouched");

      // Out of place, several elements, a limit, and the async form.
      ByteBuffer in = direct(4 * 4);
      for (int i = 0; i < 4; ++i) in.putFloat(4 * i, r + 0.25f * i);
      in.limit(3 * 4);
      ByteBuffer out = direct(3 * 4);
      Hvd.allreduceAsync("in.out", in, out, DataType.FLOAT32, ReduceOp.SUM).await();
      float tri = n * (n - 1) / 2f;
      for (int i = 0; i < 3; ++i) {
        check(out.getFloat(4 * i) == tri + n * 0.25f * i, "float32 out " + i + ": " + out.getFloat(4 * i));
      }
      ByteBuffer d = direct(8).putDouble(0, r == 0 ? 0.5 : 2.0);
      Hvd.allreduce("d.max", d, d, DataType.FLOAT64, ReduceOp.MAX);
      check(d.getDouble(0) == (n > 1 ? 2.0 : 0.5), "float64 max " + d.getDouble(0));

      // Without an op: AVERAGE.
      ByteBuffer avg = direct(8).putDouble(0, r);
      Hvd.allreduce("avg", avg, avg, DataType.FLOAT64);
      check(avg.getDouble(0) == (n - 1) / 2.0, "float64 average " + avg.getDouble(0));
      float[] favg = Hvd.allreduce("avg.array", new float[] {2f * r});
      check(favg[0] == n - 1, "float[] average " + Arrays.toString(favg));

      // Broadcast of raw INT64 elements from the last rank.
      ByteBuffer b = direct(16).putLong(0, 100L * r).putLong(8, -r);
      Hvd.broadcast("b", b, b, DataType.INT64, n - 1);
      check(b.getLong(0) == 100L * (n - 1) && b.getLong(8) == -(n - 1), "int64 broadcast");
      try {
        Hvd.broadcast("b.untyped", b, b, 0);
        check(false, "the untyped broadcast of a ByteBuffer was not refused");
      } catch (IllegalArgumentException e) {
        check(e.getMessage().startsWith("broadcast 'b.untyped': a ByteBuffer carries no element type"), e.getMessage());
      }

      Hvd.barrier();
      Hvd.shutdown();
      Hvd.shutdown();  // a no-op, as in Horovod, Python and Julia
      check(!Hvd.isInitialized(), "initialized after shutdown");
      System.out.println("rank " + r + "/" + n + ": bytebuffer checks passed");
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1);
    }
  }
}
