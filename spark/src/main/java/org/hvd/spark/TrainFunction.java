package org.hvd.spark;

import java.io.Serializable;
import java.util.Iterator;

/**
 * The per-partition body of a barrier job: runs once per rank with hvd
 * initialised ({@link HvdTaskContext#hvd()}) and this partition's rows, and
 * returns this rank's result (null allowed). It must finish its collectives
 * before it returns: the context is closed right after.
 */
@FunctionalInterface
public interface TrainFunction<T, R> extends Serializable {
  R call(HvdTaskContext ctx, Iterator<T> rows) throws Exception;
}
