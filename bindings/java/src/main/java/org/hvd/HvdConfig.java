package org.hvd;

import java.util.ArrayList;
import java.util.List;
import org.hvd.swig.HvdjParams;

/**
 * Settings for a context (hvd_params_t). Only the settings given here are passed
 * to the library (each sets its HVD_PARAM_* mask bit); the rest come from HVD_*
 * environment variables and the launcher's variables, then from defaults.
 *
 * <pre>{@code
 * HvdConfig cfg = HvdConfig.builder().rank(r).size(n).oobAllgather(fn).build();
 * try (HvdContext ctx = HvdContext.create(cfg)) { ... }
 * }</pre>
 *
 * Immutable; {@link #toBuilder()} copies it. Serializable (Spark ships it to
 * executors) except for the OOB callback, which is transient.
 */
public final class HvdConfig implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  private final Integer rank, size, localRank, localSize, crossRank, crossSize;
  private final String transport, rendezvousAddr, secret, timelinePath, networkInterface,
      transportPath;
  private final Long fusionThresholdBytes;
  private final Double cycleTimeMs, stallWarningS, stallShutdownS, startTimeoutS, transportTimeoutS;
  private final Integer cacheCapacity, logLevel;
  private final Boolean autotune;
  private final transient OobAllgather oobAllgather;

  private HvdConfig(Builder b) {
    rank = b.rank;
    size = b.size;
    localRank = b.localRank;
    localSize = b.localSize;
    crossRank = b.crossRank;
    crossSize = b.crossSize;
    transport = b.transport;
    rendezvousAddr = b.rendezvousAddr;
    secret = b.secret;
    timelinePath = b.timelinePath;
    networkInterface = b.networkInterface;
    transportPath = b.transportPath;
    fusionThresholdBytes = b.fusionThresholdBytes;
    cycleTimeMs = b.cycleTimeMs;
    stallWarningS = b.stallWarningS;
    stallShutdownS = b.stallShutdownS;
    startTimeoutS = b.startTimeoutS;
    transportTimeoutS = b.transportTimeoutS;
    cacheCapacity = b.cacheCapacity;
    logLevel = b.logLevel;
    autotune = b.autotune;
    oobAllgather = b.oobAllgather;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** No settings: everything from the environment (what {@link Hvd#init()} uses). */
  public static HvdConfig fromEnvironment() {
    return new Builder().build();
  }

  public Builder toBuilder() {
    Builder b = new Builder();
    b.rank = rank;
    b.size = size;
    b.localRank = localRank;
    b.localSize = localSize;
    b.crossRank = crossRank;
    b.crossSize = crossSize;
    b.transport = transport;
    b.rendezvousAddr = rendezvousAddr;
    b.secret = secret;
    b.timelinePath = timelinePath;
    b.networkInterface = networkInterface;
    b.transportPath = transportPath;
    b.fusionThresholdBytes = fusionThresholdBytes;
    b.cycleTimeMs = cycleTimeMs;
    b.stallWarningS = stallWarningS;
    b.stallShutdownS = stallShutdownS;
    b.startTimeoutS = startTimeoutS;
    b.transportTimeoutS = transportTimeoutS;
    b.cacheCapacity = cacheCapacity;
    b.logLevel = logLevel;
    b.autotune = autotune;
    b.oobAllgather = oobAllgather;
    return b;
  }

  public Integer rank() { return rank; }
  public Integer size() { return size; }
  public Integer localRank() { return localRank; }
  public Integer localSize() { return localSize; }
  public Integer crossRank() { return crossRank; }
  public Integer crossSize() { return crossSize; }
  public OobAllgather oobAllgather() { return oobAllgather; }

  @Override
  public String toString() {
    List<String> s = new ArrayList<>();
    add(s, "rank", rank);
    add(s, "size", size);
    add(s, "localRank", localRank);
    add(s, "localSize", localSize);
    add(s, "crossRank", crossRank);
    add(s, "crossSize", crossSize);
    add(s, "transport", transport);
    add(s, "rendezvousAddr", rendezvousAddr);
    add(s, "secret", secret == null ? null : "(set)");
    add(s, "timelinePath", timelinePath);
    add(s, "networkInterface", networkInterface);
    add(s, "transportPath", transportPath);
    add(s, "fusionThresholdBytes", fusionThresholdBytes);
    add(s, "cycleTimeMs", cycleTimeMs);
    add(s, "cacheCapacity", cacheCapacity);
    add(s, "stallWarningS", stallWarningS);
    add(s, "stallShutdownS", stallShutdownS);
    add(s, "startTimeoutS", startTimeoutS);
    add(s, "transportTimeoutS", transportTimeoutS);
    add(s, "logLevel", logLevel);
    add(s, "autotune", autotune);
    add(s, "oobAllgather", oobAllgather == null ? null : "(set)");
    return "HvdConfig" + s;
  }

  private static void add(List<String> s, String k, Object v) {
    if (v != null) s.add(k + "=" + v);
  }

  /** Builds the native params; the caller deletes them after creation. */
  HvdjParams toNative(OobAdapter oob) {
    if (oobAllgather != null && (rank == null || size == null)) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdConfig",
          "oobAllgather needs rank and size to be set as well");
    }
    HvdjParams p = new HvdjParams();
    if (rank != null) p.setRank(rank);
    if (size != null) p.setSize(size);
    if (localRank != null) p.setLocalRank(localRank);
    if (localSize != null) p.setLocalSize(localSize);
    if (crossRank != null) p.setCrossRank(crossRank);
    if (crossSize != null) p.setCrossSize(crossSize);
    if (transport != null) p.setTransport(transport);
    if (rendezvousAddr != null) p.setRendezvousAddr(rendezvousAddr);
    if (secret != null) p.setSecret(secret);
    if (timelinePath != null) p.setTimelinePath(timelinePath);
    if (networkInterface != null) p.setNetworkInterface(networkInterface);
    if (transportPath != null) p.setTransportPath(transportPath);
    if (fusionThresholdBytes != null) p.setFusionThresholdBytes(fusionThresholdBytes);
    if (cycleTimeMs != null) p.setCycleTimeMs(cycleTimeMs);
    if (cacheCapacity != null) p.setCacheCapacity(cacheCapacity);
    if (stallWarningS != null) p.setStallWarningS(stallWarningS);
    if (stallShutdownS != null) p.setStallShutdownS(stallShutdownS);
    if (startTimeoutS != null) p.setStartTimeoutS(startTimeoutS);
    if (transportTimeoutS != null) p.setTransportTimeoutS(transportTimeoutS);
    if (logLevel != null) p.setLogLevel(logLevel);
    if (autotune != null) p.setAutotune(autotune ? 1 : 0);
    if (oob != null) p.setOob(oob);
    return p;
  }

  /** Wraps the user's callback for the native trampoline: never throws. */
  static final class OobAdapter implements OobAllgather {
    private final OobAllgather fn;
    Throwable error;

    OobAdapter(OobAllgather fn) {
      this.fn = fn;
    }

    @Override
    public byte[] allgather(byte[] mine) {
      if (error != null) return null;
      try {
        byte[] all = fn.allgather(mine);
        if (all == null) error = new IllegalStateException("oobAllgather returned null");
        return all;
      } catch (Throwable t) {
        error = t;
        return null;
      }
    }
  }

  /** Log levels for {@link Builder#logLevel}. */
  public static final int LOG_ERROR = 0, LOG_WARNING = 1, LOG_INFO = 2, LOG_DEBUG = 3, LOG_TRACE = 4;

  /** Collects settings; each setter marks its field as set. */
  public static final class Builder {
    private Integer rank, size, localRank, localSize, crossRank, crossSize;
    private String transport, rendezvousAddr, secret, timelinePath, networkInterface,
        transportPath;
    private Long fusionThresholdBytes;
    private Double cycleTimeMs, stallWarningS, stallShutdownS, startTimeoutS, transportTimeoutS;
    private Integer cacheCapacity, logLevel;
    private Boolean autotune;
    private OobAllgather oobAllgather;

    private Builder() {}

    /** This rank; set together with {@link #size}. */
    public Builder rank(int v) { rank = v; return this; }
    public Builder size(int v) { size = v; return this; }
    public Builder localRank(int v) { localRank = v; return this; }
    public Builder localSize(int v) { localSize = v; return this; }
    public Builder crossRank(int v) { crossRank = v; return this; }
    public Builder crossSize(int v) { crossSize = v; return this; }
    /** "gloo", "local", "mpi", ... */
    public Builder transport(String v) { transport = v; return this; }
    /** "host:port" of a rendezvous store to join. */
    public Builder rendezvousAddr(String v) { rendezvousAddr = v; return this; }
    /** The job secret (hex). */
    public Builder secret(String v) { secret = v; return this; }
    /** Chrome trace JSON written by rank 0. */
    public Builder timelinePath(String v) { timelinePath = v; return this; }
    public Builder networkInterface(String v) { networkInterface = v; return this; }
    /** 0 turns fusion off. */
    public Builder fusionThresholdBytes(long v) { fusionThresholdBytes = v; return this; }
    public Builder cycleTimeMs(double v) { cycleTimeMs = v; return this; }
    /** 0 turns the response cache off. */
    public Builder cacheCapacity(int v) { cacheCapacity = v; return this; }
    public Builder stallWarningSeconds(double v) { stallWarningS = v; return this; }
    public Builder stallShutdownSeconds(double v) { stallShutdownS = v; return this; }
    public Builder startTimeoutSeconds(double v) { startTimeoutS = v; return this; }
    public Builder transportTimeoutSeconds(double v) { transportTimeoutS = v; return this; }
    /** One of {@link HvdConfig#LOG_ERROR} .. {@link HvdConfig#LOG_TRACE}. */
    public Builder logLevel(int v) { logLevel = v; return this; }
    /**
     * Autotuning of fusion threshold and cycle time, over HVD_AUTOTUNE (the tuner's
     * knobs stay HVD_AUTOTUNE_* variables).
     */
    public Builder autotune(boolean v) { autotune = v; return this; }
    /**
     * ':'-separated folders searched for transport plugins before libhvd's own, over
     * HVD_TRANSPORT_PATH; "" searches libhvd's folder only.
     */
    public Builder transportPath(String v) { transportPath = v; return this; }
    /** Bootstrap through this callback instead of a launcher's variables. */
    public Builder oobAllgather(OobAllgather v) { oobAllgather = v; return this; }

    public HvdConfig build() {
      return new HvdConfig(this);
    }
  }
}
