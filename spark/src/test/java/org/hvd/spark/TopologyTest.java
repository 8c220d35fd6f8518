package org.hvd.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class TopologyTest {
  @Test
  void ranksGroupedByHost() {
    String[] a = {"h1:7001", "h2:7002", "h1:7003", "[fe80::1]:7004", "h2:7005"};
    Topology t = Topology.of(2, a);
    assertEquals(1, t.localRank);
    assertEquals(2, t.localSize);
    assertEquals(0, t.crossRank);  // local rank 1 exists on h1 (rank 2) and h2 (rank 4)
    assertEquals(2, t.crossSize);
    Topology v6 = Topology.of(3, a);
    assertEquals(0, v6.localRank);
    assertEquals(1, v6.localSize);
    assertEquals(2, v6.crossRank);  // local rank 0: ranks 0, 1, 3
    assertEquals(3, v6.crossSize);
    assertEquals("fe80::1", Topology.host("[fe80::1]:7004"));
    assertEquals("h1", Topology.host("h1:7001"));
  }
}
