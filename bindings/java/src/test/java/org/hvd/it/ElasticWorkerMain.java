package org.hvd.it;

import java.io.Serializable;
import org.hvd.Hvd;
import org.hvd.HvdMembershipChangedException;
import org.hvd.Membership;
import org.hvd.ReduceOp;
import org.hvd.elastic.Elastic;
import org.hvd.elastic.HostsUpdatedInterrupt;
import org.hvd.elastic.ObjectState;

/**
 * A worker of an elastic job (ElasticMultiProcessTest starts it under a fake
 * launcher): `steps` training steps, each adding the allreduced count of
 * ranks to a total, a commit after every second step. With `leaveAt` >= 0
 * the worker dies (halt, no shutdown; exit code `exitCode`, default 0) when
 * it reaches that step. Prints what
 * happens, one line each, for the test to compare.
 */
public final class ElasticWorkerMain {
  private ElasticWorkerMain() {}

  static final class Progress implements Serializable {
    private static final long serialVersionUID = 1L;
    int step;
    long total;
  }

  static void say(String fmt, Object... args) {
    System.out.println(String.format(fmt, args));
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    final int steps = Integer.parseInt(args[0]);
    final int leaveAt = Integer.parseInt(args[1]);
    final int exitCode = args.length > 2 ? Integer.parseInt(args[2]) : 0;
    Hvd.init();
    Membership m0 = Hvd.membership();
    say("start rank=%d size=%d epoch=%d elastic=%b", Hvd.rank(), Hvd.size(), m0.epoch(), m0.elastic());
    ObjectState<Progress> state = new ObjectState<>(new Progress());
    state.registerResetCallback(() -> say("reset epoch=%d rank=%d size=%d",
        Hvd.membership().epoch(), Hvd.rank(), Hvd.size()));
    Progress done;
    try {
      done = Elastic.run(state, s -> {
        Progress p = s.get();
        while (p.step < steps) {
          if (p.step == leaveAt) {
            say("leaving at step %d", p.step);
            try {
              Thread.sleep(300);  // the step before is over on every rank
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(exitCode);
          }
          try {
            p.total += Hvd.allreduce("step", new long[] {1}, ReduceOp.SUM)[0];
          } catch (HvdMembershipChangedException e) {
            say("lost a peer at step %d", p.step);
            throw e;
          }
          p.step++;
          if (p.step % 2 == 0) {
            try {
              s.commit();
            } catch (HostsUpdatedInterrupt e) {
              say("hosts updated at step %d", p.step);
              throw e;
            }
          }
        }
        return p;
      });
    } catch (HvdMembershipChangedException e) {
      say("ended: launcherEnded=%b %s", e.launcherEnded(), e.libraryMessage());
      Hvd.shutdown();
      return;
    }
    say("done total=%d step=%d epoch=%d rank=%d size=%d", done.total, done.step,
        Hvd.membership().epoch(), Hvd.rank(), Hvd.size());
    Hvd.shutdown();
  }
}
