package org.hvd.spark;

import java.util.HashMap;
import java.util.Map;

/**
 * Ranks from a barrier stage's task addresses ("host:port", in partition
 * order): rank = partition id, local rank = index among the tasks on the same
 * host, cross rank = index of this host among the hosts that have a task with
 * the same local rank (as hvdrun defines them).
 */
final class Topology {
  final int rank, size, localRank, localSize, crossRank, crossSize;

  private Topology(int rank, int size, int localRank, int localSize, int crossRank, int crossSize) {
    this.rank = rank;
    this.size = size;
    this.localRank = localRank;
    this.localSize = localSize;
    this.crossRank = crossRank;
    this.crossSize = crossSize;
  }

  static String host(String address) {
    String a = address == null ? "" : address.trim();
    if (a.startsWith("[")) {  // [v6]:port
      int close = a.indexOf(']');
      return close > 0 ? a.substring(1, close) : a;
    }
    int colon = a.lastIndexOf(':');
    if (colon > 0 && a.indexOf(':') == colon) return a.substring(0, colon);
    return a;  // no port, or a bare IPv6 address
  }

  static Topology of(int rank, String[] addresses) {
    int size = addresses.length;
    if (rank < 0 || rank >= size) {
      throw new IllegalArgumentException("rank " + rank + " outside the " + size + " barrier tasks");
    }
    int[] local = new int[size];
    Map<String, Integer> perHost = new HashMap<>();
    for (int i = 0; i < size; ++i) {
      String h = host(addresses[i]);
      local[i] = perHost.getOrDefault(h, 0);
      perHost.put(h, local[i] + 1);
    }
    int localSize = perHost.get(host(addresses[rank]));
    int crossRank = 0, crossSize = 0;
    for (int i = 0; i < size; ++i) {
      if (local[i] != local[rank]) continue;
      if (i < rank) crossRank++;
      crossSize++;
    }
    return new Topology(rank, size, local[rank], localSize, crossRank, crossSize);
  }

  @Override
  public String toString() {
    return "rank " + rank + "/" + size + " local " + localRank + "/" + localSize + " cross "
        + crossRank + "/" + crossSize;
  }
}
