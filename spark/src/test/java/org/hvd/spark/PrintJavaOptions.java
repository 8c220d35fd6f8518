package org.hvd.spark;

/**
 * Prints the JVM options the installed Spark needs on this Java (its launcher
 * adds them to spark-submit; a plain JVM hosting a driver needs them too).
 */
public final class PrintJavaOptions {
  private PrintJavaOptions() {}

  public static void main(String[] args) throws Exception {
    Object opts = Class.forName("org.apache.spark.launcher.JavaModuleOptions")
        .getMethod("defaultModuleOptions").invoke(null);
    System.out.println(opts);
  }
}
