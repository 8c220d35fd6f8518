package org.hvd;

/**
 * An out-of-band allgather that bootstraps a context (hvd_params_t.oob_allgather):
 * every rank passes the same number of bytes and gets back every rank's bytes,
 * concatenated in rank order (rank r's at offset r * mine.length).
 *
 * <p>It is called a few times during {@link HvdContext#create}, on the thread
 * that creates the context; a Spark barrier task implements it with
 * {@code BarrierTaskContext.allGather}. Requires {@link HvdConfig.Builder#rank}
 * and {@link HvdConfig.Builder#size}. An exception thrown here makes
 * context creation fail with {@link HvdException#RENDEZVOUS}, with this exception
 * as the cause.
 */
@FunctionalInterface
public interface OobAllgather {
  byte[] allgather(byte[] mine) throws Exception;
}
