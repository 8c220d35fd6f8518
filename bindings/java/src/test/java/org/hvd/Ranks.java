package org.hvd;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/** Runs one body per rank, each on its own thread with its own HvdContext. */
final class Ranks {
  interface Body<T> {
    T run(HvdContext ctx, int rank) throws Exception;
  }

  static HvdConfig config(LocalOob oob, int rank, int size) {
    return HvdConfig.builder().rank(rank).size(size).localRank(rank).localSize(size)
        .oobAllgather(oob.forRank(rank)).startTimeoutSeconds(30).build();
  }

  static <T> List<T> run(int size, Body<T> body) throws Exception {
    LocalOob oob = new LocalOob(size);
    ExecutorService pool = Executors.newFixedThreadPool(size);
    try {
      List<Future<T>> fs = new ArrayList<>();
      for (int r = 0; r < size; ++r) {
        final int rank = r;
        fs.add(pool.submit(() -> {
          try (HvdContext ctx = HvdContext.create(config(oob, rank, size))) {
            return body.run(ctx, rank);
          }
        }));
      }
      List<T> out = new ArrayList<>();
      for (Future<T> f : fs) out.add(f.get(120, TimeUnit.SECONDS));
      return out;
    } finally {
      pool.shutdownNow();
    }
  }
}
