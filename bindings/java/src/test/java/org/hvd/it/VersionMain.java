package org.hvd.it;

import org.hvd.Hvd;
import org.hvd.HvdException;

/** Prints where libhvd came from and its version; on a load failure, the error. */
public final class VersionMain {
  private VersionMain() {}

  public static void main(String[] args) {
    try {
      int[] v = Hvd.libraryVersion();
      System.out.println("hvd " + v[0] + "." + v[1] + "." + v[2] + " from " + Hvd.libraryFolder());
    } catch (HvdException e) {
      System.out.println("error: " + e.getMessage());
      System.exit(3);
    }
  }
}
