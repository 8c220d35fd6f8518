package org.hvd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A world of one through the default context (no launcher variables). */
@Timeout(60)
class SingleProcessTest {
  @BeforeEach
  void init() {
    Hvd.init();
  }

  @AfterEach
  void shutdown() {
    while (Hvd.isInitialized()) Hvd.shutdown();
  }

  @Test
  void topologyOfAWorldOfOne() {
    assertEquals(0, Hvd.rank());
    assertEquals(1, Hvd.size());
    assertEquals(0, Hvd.localRank());
    assertEquals(1, Hvd.localSize());
    assertEquals(0, Hvd.crossRank());
    assertEquals(1, Hvd.crossSize());
    assertEquals("local", Hvd.context().transport());
    assertArrayEquals(new int[] {0, 1, 0}, Hvd.libraryVersion());
  }

  @Test
  void metricsCountTheOperations() {
    HvdContext ctx = Hvd.context();
    for (int i = 0; i < 3; i++) ctx.allreduce("m", new float[16], ReduceOp.SUM);
    String json = ctx.metrics();
    assertTrue(json.startsWith("{\"version\":1,"), json);
    assertTrue(json.contains("\"allreduce\":{\"count\":3,\"bytes\":192,"), json);
    assertTrue(ctx.metricsPrometheus().contains("# TYPE hvd_allreduce_bytes_total counter"));
  }

  @Test
  void nativeFilesAreExtractedTogether() {
    Path dir = Paths.get(Hvd.libraryFolder());
    assertTrue(Files.isRegularFile(dir.resolve("libhvd_jni.so")), dir.toString());
    assertTrue(Files.isRegularFile(dir.resolve("libhvd.so.0")), dir.toString());
    // Every file the jar lists (the transport plugins too) lies beside libhvd.
    try (java.io.InputStream in = getClass().getClassLoader()
        .getResourceAsStream("org/hvd/native/" + NativeLibrary.platform() + "/files.txt")) {
      for (String f : new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8).split("\\s+")) {
        if (!f.isEmpty()) assertTrue(Files.isRegularFile(dir.resolve(f)), f);
      }
    } catch (java.io.IOException e) {
      throw new AssertionError(e);
    }
  }

  @Test
  void arrayOverloadsReturnNewArrays() {
    float[] f = {1.5f, -2f, 3f};
    float[] fr = Hvd.allreduce("f", f, ReduceOp.SUM);
    assertArrayEquals(f, fr);
    assertFalse(f == fr);
    assertArrayEquals(new double[] {0.25, 8}, Hvd.allreduce("d", new double[] {0.25, 8}, ReduceOp.AVERAGE));
    assertArrayEquals(new int[] {7, -7}, Hvd.allreduce(new int[] {7, -7}, ReduceOp.MAX));
    assertArrayEquals(new long[] {1L << 40}, Hvd.allreduce(new long[] {1L << 40}, ReduceOp.PRODUCT));
    assertArrayEquals(new float[0], Hvd.allreduce("empty", new float[0], ReduceOp.SUM));
    assertArrayEquals(new long[] {4, 5}, Hvd.allgather("g", new long[] {4, 5}));
    assertArrayEquals(new double[] {9, 10}, Hvd.broadcast("b", new double[] {9, 10}, 0));
    Hvd.barrier();
  }

  @Test
  void directBufferInPlaceIsZeroCopy() {
    FloatBuffer buf = ByteBuffer.allocateDirect(4 * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
    buf.put(new float[] {1, 2, 3, 4}).flip();
    buf.position(1);  // reduce elements 1..3 only
    FloatBuffer out = Hvd.allreduce("inplace", buf, buf, ReduceOp.SUM);
    assertSame(buf, out);
    assertEquals(1, buf.position(), "positions stay as they were");
    assertEquals(3f, buf.get(2));
  }

  @Test
  void heapAndForeignOrderBuffersAreCopied() {
    DoubleBuffer in = DoubleBuffer.wrap(new double[] {1, 2, 3});
    DoubleBuffer out = DoubleBuffer.allocate(3);
    Hvd.allreduce("heap", in, out, ReduceOp.SUM);
    assertArrayEquals(new double[] {1, 2, 3}, out.array());
    IntBuffer big = ByteBuffer.allocateDirect(8).order(ByteOrder.BIG_ENDIAN).asIntBuffer();
    big.put(0, 0x01020304).put(1, -5);
    Hvd.allreduce("bigendian", big, big, ReduceOp.SUM);
    assertEquals(0x01020304, big.get(0));
    assertEquals(-5, big.get(1));
  }

  @Test
  void asyncHandlesPollAndAwait() {
    HvdHandle<double[]> h = Hvd.allreduceAsync("async", new double[] {2, 4}, ReduceOp.AVERAGE);
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (!h.poll()) {
      assertTrue(System.nanoTime() < deadline, "poll never reported completion");
    }
    assertArrayEquals(new double[] {2, 4}, h.await());
    assertArrayEquals(new double[] {2, 4}, h.await(), "await after completion returns the same result");
    assertEquals(0, Hvd.context().pendingCount());
  }

  @Test
  void groupedAllreduce() {
    float[][] r = Hvd.groupedAllreduce(new String[] {"w", "b"}, new float[][] {{1, 2}, {3}}, ReduceOp.SUM);
    assertArrayEquals(new float[] {1, 2}, r[0]);
    assertArrayEquals(new float[] {3}, r[1]);
  }

  @Test
  void allgatherWithShape() {
    ByteBuffer in = ByteBuffer.allocateDirect(6 * 4).order(ByteOrder.nativeOrder());
    for (int i = 0; i < 6; ++i) in.putFloat(i);
    in.flip();
    Gathered g = Hvd.allgather("shaped", in, DataType.FLOAT32, new long[] {3, 2});
    assertArrayEquals(new long[] {3, 2}, g.shape());
    assertArrayEquals(new float[] {0, 1, 2, 3, 4, 5}, g.toFloatArray());
  }

  @Test
  void alltoallAndReducescatterInAWorldOfOne() {
    assertArrayEquals(new float[] {1, 2}, Hvd.alltoall("a2a", new float[] {1, 2}, new long[] {2}), 0f);
    assertArrayEquals(new long[] {3}, Hvd.alltoall("a2a.even", new long[] {3}, null));
    assertArrayEquals(new double[0], Hvd.alltoall("a2a.empty", new double[0], new long[] {0}), 0.0);
    HvdHandle<int[]> h = Hvd.alltoallAsync("a2a.async", new int[] {5, 6, 7}, null);
    assertArrayEquals(new int[] {5, 6, 7}, h.await());
    assertArrayEquals(new long[] {3}, h.receivedSplits());

    assertArrayEquals(new double[] {0.5, 1.5}, Hvd.reducescatter("rs", new double[] {0.5, 1.5}, ReduceOp.SUM), 0.0);
    assertArrayEquals(new int[] {-4}, Hvd.reducescatter("rs.i", new int[] {-4}, ReduceOp.MIN));
    assertArrayEquals(new long[] {1L << 40}, Hvd.reducescatterAsync("rs.l", new long[] {1L << 40}, ReduceOp.PRODUCT).await());
    assertArrayEquals(new float[] {2.5f}, Hvd.reducescatter("rs.f", new float[] {2.5f}, ReduceOp.AVERAGE), 0f);

    ByteBuffer in = ByteBuffer.allocateDirect(4 * 2).order(ByteOrder.nativeOrder());
    in.putShort((short) 1).putShort((short) -2).putShort((short) 3).putShort((short) 4).flip();
    Gathered g = Hvd.alltoall("a2a.shaped", in, DataType.INT16, new long[] {2, 2}, new long[] {2});
    assertArrayEquals(new long[] {2, 2}, g.shape());
    assertArrayEquals(new long[] {2}, g.receivedSplits());
    assertEquals(in, g.data());
    Gathered r = Hvd.reducescatter("rs.shaped", in, DataType.INT16, new long[] {2, 2}, ReduceOp.MAX);
    assertArrayEquals(new long[] {2, 2}, r.shape());
    assertEquals(in, r.data());
    assertEquals(null, r.receivedSplits());

    HvdException e = assertThrows(HvdException.class, () -> Hvd.alltoall("bad", new int[2], new long[] {1, 1}));
    assertEquals(HvdException.INVALID_ARGUMENT, e.status());
    assertTrue(e.getMessage().contains("splits has 2 entries, must have one per rank"), e.getMessage());

    // The JNI layer itself refuses a splits array whose length is not the
    // context size (the library would read one entry per rank).
    ByteBuffer two = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder());
    for (long[] splits : new long[][] {{}, {1, 1}}) {
      e = assertThrows(HvdException.class, () -> org.hvd.swig.HvdNative.hvdj_alltoall_async(
          0, "jni", two, DataType.INT32.code(), new long[] {2}, splits, new long[1]));
      assertEquals(HvdException.INVALID_ARGUMENT, e.status());
      assertTrue(e.getMessage().contains("one per rank"), e.getMessage());
    }
  }

  @Test
  void failuresThrowHvdExceptionWithTheLibraryMessage() {
    HvdException e = assertThrows(HvdException.class, () -> Hvd.broadcast("root", new float[] {1}, 3));
    assertEquals(HvdException.INVALID_ARGUMENT, e.status());
    assertTrue(e.getMessage().contains("HVD_ERR_INVALID_ARGUMENT"), e.getMessage());
    assertTrue(e.libraryMessage().contains("root"), e.libraryMessage());

    ByteBuffer ro = ByteBuffer.allocateDirect(4).asReadOnlyBuffer();
    e = assertThrows(HvdException.class,
        () -> Hvd.allreduce("ro", ByteBuffer.allocateDirect(4), ro, DataType.UINT8, ReduceOp.SUM));
    assertEquals(HvdException.INVALID_ARGUMENT, e.status());

    e = assertThrows(HvdException.class,
        () -> Hvd.allreduce("short", FloatBuffer.allocate(4), FloatBuffer.allocate(2), ReduceOp.SUM));
    assertTrue(e.getMessage().contains("output holds 2"), e.getMessage());
  }

  @Test
  void byteBuffersNeedADataType() {
    ByteBuffer bb = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder());
    bb.putFloat(0, 1.5f).putFloat(4, -0.25f);
    // The untyped forms would reduce the bytes as UINT8: refused, naming the call and tensor.
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> Hvd.allreduce("x", bb, bb, ReduceOp.SUM));
    assertTrue(e.getMessage().startsWith("allreduce 'x': a ByteBuffer carries no element type; pass a DataType"),
        e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> Hvd.allreduceAsync("y", bb, bb, ReduceOp.SUM));
    assertTrue(e.getMessage().contains("allreduce 'y'") && e.getMessage().contains("DataType"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> Hvd.allreduce("z", bb, bb));
    assertTrue(e.getMessage().contains("allreduce 'z'"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> Hvd.broadcast("b", bb, bb, 0));
    assertTrue(e.getMessage().startsWith("broadcast 'b': a ByteBuffer carries no element type; pass a DataType"),
        e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> Hvd.broadcastAsync("b", bb, bb, 0));
    assertTrue(e.getMessage().contains("broadcast 'b'"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class,
        () -> Hvd.context().allreduce(null, bb, bb, (DataType) null, ReduceOp.SUM));
    assertTrue(e.getMessage().contains("allreduce (unnamed): dtype is null") && e.getMessage().contains("DataType"),
        e.getMessage());
    assertEquals(0, Hvd.context().pendingCount(), "nothing was submitted");
    assertEquals(1.5f, bb.getFloat(0));

    // With a DataType: FLOAT32 elements, in place, position and limit respected.
    assertSame(bb, Hvd.allreduce("x", bb, bb, DataType.FLOAT32, ReduceOp.SUM));
    assertEquals(1.5f, bb.getFloat(0));
    assertEquals(-0.25f, bb.getFloat(4));
    ByteBuffer out = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder());
    assertSame(out, Hvd.allreduceAsync("x.async", bb, out, DataType.FLOAT32, ReduceOp.MAX).await());
    assertEquals(-0.25f, out.getFloat(4));
    ByteBuffer heap = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder()).putDouble(0, 2.5);
    assertEquals(2.5, Hvd.broadcast("b", heap, heap, DataType.FLOAT64, 0).getDouble(0));

    // The byte length must hold whole elements.
    e = assertThrows(IllegalArgumentException.class,
        () -> Hvd.allreduce("odd", bb.duplicate().position(1), bb.duplicate().position(1), DataType.FLOAT32,
            ReduceOp.SUM));
    assertTrue(e.getMessage().contains("allreduce 'odd': the input ByteBuffer has 7 bytes remaining, not a"
        + " multiple of FLOAT32's 4 bytes"), e.getMessage());
    // Elements wider than a byte in a buffer of the other order: refused (the
    // library reads memory as it is); one-byte elements have no order.
    ByteOrder other = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN ? ByteOrder.BIG_ENDIAN
        : ByteOrder.LITTLE_ENDIAN;
    ByteBuffer foreign = ByteBuffer.allocateDirect(8).order(other).putFloat(0, 1.5f);
    e = assertThrows(IllegalArgumentException.class,
        () -> Hvd.allreduce("foreign", foreign, foreign, DataType.FLOAT32, ReduceOp.SUM));
    assertTrue(e.getMessage().contains("allreduce 'foreign': the input ByteBuffer is " + other), e.getMessage());
    e = assertThrows(IllegalArgumentException.class,
        () -> Hvd.broadcast("foreign.out", bb, foreign, DataType.FLOAT32, 0));
    assertTrue(e.getMessage().contains("the output ByteBuffer is " + other), e.getMessage());
    // ... while its typed view is converted.
    FloatBuffer view = foreign.asFloatBuffer();
    Hvd.allreduce("foreign.view", view, view, ReduceOp.SUM);
    assertEquals(1.5f, foreign.getFloat(0));
    ByteBuffer bytes = ByteBuffer.allocateDirect(3).put(0, (byte) 200);
    Hvd.allreduce("bytes", bytes, bytes, DataType.UINT8, ReduceOp.SUM);
    assertEquals((byte) 200, bytes.get(0));

    // Typed views of different element types do not mix.
    HvdException he = assertThrows(HvdException.class,
        () -> Hvd.allreduce("mixed", (java.nio.Buffer) FloatBuffer.allocate(2), IntBuffer.allocate(2),
            ReduceOp.SUM));
    assertTrue(he.getMessage().contains("the input is a") && he.getMessage().contains("FLOAT32")
        && he.getMessage().contains("INT32"), he.getMessage());
  }

  @Test
  void allreduceWithoutAnOpAverages() {
    // A world of one: the average is the value itself, for every overload;
    // integers of an odd sum would round, so use what a SUM would also give.
    assertArrayEquals(new float[] {1.5f, -2f}, Hvd.allreduce("avg.f", new float[] {1.5f, -2f}));
    assertArrayEquals(new double[] {0.125}, Hvd.allreduce(new double[] {0.125}));
    assertArrayEquals(new int[] {-7}, Hvd.allreduce("avg.i", new int[] {-7}));
    assertArrayEquals(new long[] {1L << 40}, Hvd.allreduceAsync("avg.l", new long[] {1L << 40}).await());
    DoubleBuffer d = DoubleBuffer.wrap(new double[] {3.25});
    assertEquals(3.25, Hvd.allreduce("avg.buf", d, d).get(0));
    ByteBuffer bb = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).putInt(0, 9);
    assertEquals(9, Hvd.allreduce("avg.bb", bb, bb, DataType.INT32).getInt(0));
    float[][] g = Hvd.groupedAllreduce(new String[] {"avg.g0", "avg.g1"}, new float[][] {{1}, {2}});
    assertArrayEquals(new float[] {2}, g[1]);
    assertArrayEquals(new double[] {4.5}, Hvd.reducescatter("avg.rs", new double[] {4.5}));
  }

  @Test
  void shutdownWithoutInitIsANoOp() {
    Hvd.shutdown();
    assertFalse(Hvd.isInitialized());
    Hvd.shutdown();  // a second one does nothing, as in Horovod, Python and Julia
    Hvd.shutdown();
    assertFalse(Hvd.isInitialized());
    Hvd.init();  // and init works again afterwards
    assertEquals(1, Hvd.size());
    Hvd.shutdown();
    assertFalse(Hvd.isInitialized());
  }

  @Test
  void callsAfterShutdownThrowNotInitialized() {
    Hvd.shutdown();
    assertFalse(Hvd.isInitialized());
    HvdException e = assertThrows(HvdException.class, () -> Hvd.allreduce(new float[] {1}, ReduceOp.SUM));
    assertEquals(HvdException.NOT_INITIALIZED, e.status());
  }

  @Test
  void initIsReferenceCounted() {
    Hvd.init();
    Hvd.shutdown();
    assertTrue(Hvd.isInitialized());
    Hvd.shutdown();
    assertFalse(Hvd.isInitialized());
  }

  @Test
  void autotuneAndTransportPathReachTheLibrary() throws Exception {
    HvdConfig cfg = HvdConfig.builder().rank(0).size(1).autotune(true).transportPath("/p").build();
    assertTrue(cfg.toString().contains("autotune=true"), cfg.toString());
    assertEquals(cfg.toString(), cfg.toBuilder().build().toString());
    org.hvd.swig.HvdjParams raw = cfg.toNative(null);
    try {
      assertEquals(3L | (1L << 22) | (1L << 23), raw.mask());  // rank, size, the two new bits
      raw.setAutotune(2);  // past the facade's boolean: the library refuses it
      HvdException e = assertThrows(HvdException.class,
          () -> org.hvd.swig.HvdNative.hvdj_context_create(raw, new long[1]));
      assertEquals(HvdException.INVALID_ARGUMENT, e.status());
      assertTrue(e.libraryMessage().contains("params.autotune is 2"), e.libraryMessage());
    } finally {
      raw.delete();
    }
    org.hvd.swig.HvdjParams none = HvdConfig.builder().build().toNative(null);
    assertEquals(0L, none.mask());  // not given: HVD_AUTOTUNE and HVD_TRANSPORT_PATH apply
    none.delete();
    try (HvdContext ctx = HvdContext.create(HvdConfig.builder().autotune(true).build())) {
      assertEquals(1, ctx.size());
    }

    // A transport asked for by name is looked up in transportPath, even where a
    // world of one runs on "local": "alias" exists only in a temporary folder.
    Path gloo = Paths.get(Hvd.libraryFolder()).resolve("libhvd_transport_gloo.so");
    org.junit.jupiter.api.Assumptions.assumeTrue(Files.isRegularFile(gloo), "no Gloo plugin");
    Path dir = Files.createTempDirectory("hvd_plugins");
    Path alias = Files.createSymbolicLink(dir.resolve("libhvd_transport_alias.so"), gloo);
    try {
      try (HvdContext ctx = HvdContext.create(
          HvdConfig.builder().transport("alias").transportPath(dir.toString()).build())) {
        assertEquals("local", ctx.transport());
      }
      HvdException e = assertThrows(HvdException.class, () -> HvdContext.create(
          HvdConfig.builder().transport("alias").transportPath("/nonexistent/hvd-plugins").build()));
      assertEquals(HvdException.NOT_FOUND, e.status());
      assertTrue(e.libraryMessage().contains("/nonexistent/hvd-plugins")
          && e.libraryMessage().contains("libhvd_transport_alias.so"), e.libraryMessage());
      e = assertThrows(HvdException.class,
          () -> HvdContext.create(HvdConfig.builder().transport("alias").transportPath("").build()));
      assertEquals(HvdException.NOT_FOUND, e.status());
      try (HvdContext ctx = HvdContext.create(
          HvdConfig.builder().transport("gloo").transportPath(Hvd.libraryFolder()).build())) {
        assertEquals(1, ctx.size());
      }
    } finally {
      Files.delete(alias);
      Files.delete(dir);
    }
  }

  @Test
  void unknownSettingsAreRejected() {
    HvdException e = assertThrows(HvdException.class,
        () -> HvdContext.create(HvdConfig.builder().cycleTimeMs(-1).build()));
    assertEquals(HvdException.INVALID_ARGUMENT, e.status());
    assertTrue(e.libraryMessage().contains("cycle time"), e.libraryMessage());
  }
}
