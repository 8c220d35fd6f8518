package org.hvd.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;

/** The slots an application will have, from its master and settings (no cluster). */
class SlotsTest {
  @Test
  void expectedSlotsFromTheSettings() {
    SparkConf conf = new SparkConf(false);
    assertEquals(1, Slots.expected("local", conf));
    assertEquals(3, Slots.expected("local[3]", conf));
    assertEquals(2, Slots.expected("local[2, 4]", conf));
    assertEquals(Runtime.getRuntime().availableProcessors(), Slots.expected("local[*]", conf));
    assertEquals(6, Slots.expected("local-cluster[2,3,1024]", conf));
    assertEquals(-1, Slots.expected("spark://h:7077", conf), "standalone: not told by the settings");
    conf.set("spark.executor.instances", "4").set("spark.executor.cores", "3").set("spark.task.cpus", "2");
    assertEquals(4, Slots.expected("spark://h:7077", conf));
    assertEquals(2, Slots.expected("local-cluster[2,3,1024]", conf));
    conf.set("spark.dynamicAllocation.enabled", "true");
    assertEquals(-1, Slots.expected("yarn", conf));
  }
}
