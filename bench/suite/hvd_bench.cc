// hvd-bench: hvd's collectives through the public C API, nccl-tests style.
//
//   hvdrun -np 2 build/bin/hvd-bench coll --system hvd-gloo
//   mpirun -np 2 -x HVD_TRANSPORT=mpi build/bin/hvd-bench coll --system hvd-mpi
//   hvdrun -np 2 build/bin/hvd-bench fusion --tensors 200 --tensor-bytes 16K
//   hvdrun -np 2 --cycle-time-ms 0.1 build/bin/hvd-bench latency
//
// Modes
//   coll     --ops allreduce,allgather,broadcast --sizes 4:256M
//            Per size: warm-up, then timed iterations, each after hvd_barrier;
//            allreduce is SUM in place on one persistent float32 buffer (the
//            DistributedOptimizer path), allgather gathers size/ranks floats
//            per rank (nccl-tests counts the whole output), broadcast is in
//            place from rank 0. The first warm-up result is checked.
//   fusion   --tensors N --tensor-bytes B: one step submits N named in-place
//            allreduces at once (async), then waits for all of them.
//            --grouped: the N as one grouped allreduce (one call, one handle).
//            --contiguous: the N tensors are adjacent slices of one allocation
//            (a flat gradient buffer) instead of one allocation each.
//            --name-prefix P: tensor i is named "P.N.i" (default "fuse"; a
//            frontend's names are longer: "DistributedOptimizer.<parameter>"
//            is 30-60 characters, past std::string's 15 held in place).
//            Besides the step: "submit_us" (the N submits, this rank),
//            "data_us" and "batches_per_step" (the executor's time and fused
//            batches a step, from hvd_metrics; absent with metrics off).
//   latency  --steps S: one 4-byte allreduce per step, back to back (no
//            barrier: a training loop's steady state), median step time.
//            --op broadcast: one 4-byte broadcast from rank 0 instead;
//            --op allgather: one 4-byte allgather from each rank.
//   e2e      a synthetic training step with ResNet-50's gradients (torchvision's
//            resnet50: 161 tensors, 25,557,032 float32 parameters, 102 MB):
//            --compute-ms C of "compute" per step, slept (not spun, so ranks
//            that share cores do not slow each other's compute), a third as
//            the forward pass, the rest as the backward pass in equal shares
//            per weight tensor, last layer first; each gradient is submitted
//            (hvd_allreduce_async, average) as its share ends, as
//            DistributedOptimizer's hooks do, and the step ends when all are
//            done. --batch B (32) per rank, --steps S (10), --warmup W (2).
//            Reports the median step and images/s = ranks x B / step.
//   coll --process-set all: the same over a process set of every rank (the
//        cost of a set against its parent of the same size, same run);
//        --process-set halves: two sets of half the ranks each, running the
//        same collectives at once (the ensemble pattern), reported at the
//        set's size by the first half's rank 0. latency takes --process-set
//        too (the step over the set).
// Common: --system NAME (the label in the results), --quick (1 warm-up, 1
// iteration), --iters-scale X, --netdev IF (coll and e2e: the bytes each
// host sent and received on interface IF during the timed loop, from
// /proc/net/dev of its own network namespace, read by its local rank 0;
// see NetCounter). Transport, cycle time and fusion threshold
// come from the environment (HVD_TRANSPORT, HVD_CYCLE_TIME, ...), as for any
// hvd program. Result lines: see bench_common.h.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "hvd.h"

namespace {

using hvdbench::Args;
using hvdbench::Buffer;
using hvdbench::NowUs;

int g_rank = 0;
int g_size = 1;
hvd_context_t g_ctx = nullptr;  // where the collectives run: the default context, or a set
bool g_emit = true;             // this rank prints the results

void Check(hvd_status_t st, const char* what) {
  if (st == HVD_OK) return;
  std::fprintf(stderr, "hvd-bench rank %d: %s failed: %s (%s)\n", g_rank, what,
               hvd_status_string(st), hvd_last_error());
  std::exit(2);
}

hvd_tensor_t Tensor1D(void* data, hvd_dtype_t dtype, const int64_t* shape) {
  hvd_tensor_t t = HVD_TENSOR_INIT;
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.shape = shape;
  return t;
}

// Element-wise MAX over ranks of the per-iteration times, so every iteration
// counts as long as its slowest rank.
std::vector<double> SlowestRank(std::vector<double> t, const std::string& tag) {
  if (g_size == 1 || t.empty()) return t;
  const int64_t shape[1] = {static_cast<int64_t>(t.size())};
  hvd_tensor_t x = Tensor1D(t.data(), HVD_FLOAT64, shape);
  hvd_handle_t h = nullptr;
  Check(hvd_allreduce_async(g_ctx, ("times." + tag).c_str(), &x, t.data(), HVD_MAX, 1.0, 1.0, &h),
        "allreduce(times)");
  Check(hvd_handle_wait(h, -1), "wait(times)");
  Check(hvd_handle_release(h), "release");
  return t;
}

std::string TransportName() {
  const char* name = "?";
  Check(hvd_context_transport(nullptr, &name), "hvd_context_transport");
  return name;
}

std::string EnvExtra() {
  std::string extra = "\"transport\":\"" + TransportName() + "\"";
  const char* cyc = std::getenv("HVD_CYCLE_TIME");
  extra += ",\"cycle_time_ms\":" + std::string(cyc != nullptr && *cyc ? cyc : "1");
  const char* fus = std::getenv("HVD_FUSION_THRESHOLD");
  if (fus != nullptr && *fus) extra += ",\"fusion_threshold\":" + std::string(fus);
  return extra;
}

// --netdev IF: what crosses the hosts' links. Each host's local rank 0 reads
// IF's byte counters from /proc/net/dev (the network namespace of the reading
// process, so a container's or a simulated host's own interface) around the
// loop of one measurement, and the counts are summed over the hosts. The
// loop's barriers are measured alone right after, in the same shape (as many
// barriers, between the same reads), and their bytes reported apart, so that
// a reader can take them off:
//   "net_tx_per_op":  bytes all hosts sent on IF per iteration (op + barrier)
//   "net_rx_per_op":  the same, received
//   "net_barrier_tx": bytes all hosts sent per barrier alone
//   "net_hosts":      hosts counted (ranks with local rank 0)
// Counters include the headers of every packet (Ethernet, IP, TCP) and any
// other traffic on IF at the time.
struct NetBytes {
  double tx = 0;
  double rx = 0;
};

NetBytes ReadNetDev(const std::string& dev) {
  FILE* f = std::fopen("/proc/net/dev", "r");
  if (f == nullptr) {
    std::fprintf(stderr, "hvd-bench: --netdev: cannot read /proc/net/dev\n");
    std::exit(2);
  }
  char line[512];
  NetBytes nb;
  bool found = false;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    char* colon = std::strchr(line, ':');
    if (colon == nullptr) continue;
    *colon = '\0';
    const char* name = line;
    while (*name == ' ') ++name;
    if (dev != name) continue;
    unsigned long long v[9] = {0};
    // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ...
    if (std::sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7], &v[8]) == 9) {
      nb.rx = static_cast<double>(v[0]);
      nb.tx = static_cast<double>(v[8]);
      found = true;
    }
    break;
  }
  std::fclose(f);
  if (!found) {
    std::fprintf(stderr, "hvd-bench: --netdev: no interface '%s' in /proc/net/dev\n", dev.c_str());
    std::exit(2);
  }
  return nb;
}

class NetCounter {
 public:
  explicit NetCounter(std::string dev) : dev_(std::move(dev)) {
    if (dev_.empty()) return;
    int lr = 0;
    Check(hvd_local_rank(&lr), "hvd_local_rank");
    reader_ = lr == 0;
    if (reader_) ReadNetDev(dev_);  // fails early on a wrong name
  }
  bool on() const { return !dev_.empty(); }

  // Right before the loop: every rank past a barrier.
  void Start() {
    if (!on()) return;
    Check(hvd_barrier(g_ctx), "barrier");
    if (reader_) a0_ = ReadNetDev(dev_);
  }

  // Right after the loop of `ops` iterations, each with one barrier; returns
  // the result fields (empty when off). Collective.
  std::string Stop(int ops, const std::string& tag) {
    if (!on()) return "";
    Check(hvd_barrier(g_ctx), "barrier");
    NetBytes a1, b0, b1;
    if (reader_) a1 = ReadNetDev(dev_);
    Check(hvd_barrier(g_ctx), "barrier");
    if (reader_) b0 = ReadNetDev(dev_);
    for (int i = 0; i < ops; ++i) Check(hvd_barrier(g_ctx), "barrier");
    Check(hvd_barrier(g_ctx), "barrier");
    if (reader_) b1 = ReadNetDev(dev_);
    double v[5] = {0, 0, 0, 0, 0};
    if (reader_) {
      v[0] = a1.tx - a0_.tx;
      v[1] = a1.rx - a0_.rx;
      v[2] = b1.tx - b0.tx;
      v[3] = b1.rx - b0.rx;
      v[4] = 1;
    }
    const int64_t shape[1] = {5};
    hvd_tensor_t t = Tensor1D(v, HVD_FLOAT64, shape);
    Check(hvd_allreduce(g_ctx, ("net." + tag).c_str(), &t, v, HVD_SUM), "allreduce(net)");
    const double n = ops > 0 ? ops : 1;
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  ",\"net_dev\":\"%s\",\"net_hosts\":%.0f,\"net_tx_per_op\":%.1f,\"net_rx_per_op\":%.1f,"
                  "\"net_barrier_tx\":%.1f,\"net_barrier_rx\":%.1f",
                  dev_.c_str(), v[4], v[0] / n, v[1] / n, v[2] / n, v[3] / n);
    return buf;
  }

 private:
  std::string dev_;
  bool reader_ = false;
  NetBytes a0_;
};

NetCounter* g_net = nullptr;

void RunAllreduce(const std::string& system, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  hvd_tensor_t t = Tensor1D(buf.p, HVD_FLOAT32, shape);
  const std::string name = "ar." + std::to_string(bytes);
  std::vector<double> times;
  for (int i = 0; i < sch.warmup + sch.iters; ++i) {
    if (i == sch.warmup) g_net->Start();
    if (i == 0) hvdbench::FillPattern(buf.p, count, g_rank);
    Check(hvd_barrier(g_ctx), "barrier");
    const double t0 = NowUs();
    hvd_handle_t h = nullptr;
    Check(hvd_allreduce_async(g_ctx, name.c_str(), &t, buf.p, HVD_SUM, 1.0, 1.0, &h), "allreduce");
    Check(hvd_handle_wait(h, -1), "wait(allreduce)");
    const double t1 = NowUs();
    Check(hvd_handle_release(h), "release");
    if (i == 0) {
      std::string why;
      if (!hvdbench::CheckSum(buf.p, count, g_size, &why)) {
        std::fprintf(stderr, "hvd-bench: allreduce of %zu bytes is wrong: %s\n", bytes, why.c_str());
        std::exit(4);
      }
    }
    if (i >= sch.warmup) times.push_back(t1 - t0);
  }
  const std::string net = g_net->Stop(sch.iters, name);
  times = SlowestRank(times, name);
  if (g_emit) {
    hvdbench::EmitColl(system, "allreduce", "inplace", g_size, count * sizeof(float), times,
                       EnvExtra() + net);
  }
}

void RunAllgather(const std::string& system, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t per_rank = std::max<size_t>(1, bytes / sizeof(float) / static_cast<size_t>(g_size));
  Buffer buf(per_rank * sizeof(float));
  for (size_t i = 0; i < per_rank; ++i) buf.p[i] = static_cast<float>(g_rank);
  const int64_t shape[1] = {static_cast<int64_t>(per_rank)};
  hvd_tensor_t t = Tensor1D(buf.p, HVD_FLOAT32, shape);
  const std::string name = "ag." + std::to_string(bytes);
  std::vector<double> times;
  for (int i = 0; i < sch.warmup + sch.iters; ++i) {
    if (i == sch.warmup) g_net->Start();
    Check(hvd_barrier(g_ctx), "barrier");
    const double t0 = NowUs();
    hvd_handle_t h = nullptr;
    Check(hvd_allgather_async(g_ctx, name.c_str(), &t, &h), "allgather");
    Check(hvd_handle_wait(h, -1), "wait(allgather)");
    const double t1 = NowUs();
    if (i == 0) {
      const void* out = nullptr;
      size_t out_bytes = 0;
      Check(hvd_handle_output(h, &out, &out_bytes), "hvd_handle_output");
      const float* f = static_cast<const float*>(out);
      if (out_bytes != per_rank * sizeof(float) * g_size || f[0] != 0.0f ||
          f[out_bytes / sizeof(float) - 1] != static_cast<float>(g_size - 1)) {
        std::fprintf(stderr, "hvd-bench: allgather of %zu bytes is wrong\n", bytes);
        std::exit(4);
      }
    }
    Check(hvd_handle_release(h), "release");
    if (i >= sch.warmup) times.push_back(t1 - t0);
  }
  const std::string net = g_net->Stop(sch.iters, name);
  times = SlowestRank(times, name);
  if (g_emit) {
    hvdbench::EmitColl(system, "allgather", "outofplace", g_size,
                       per_rank * sizeof(float) * static_cast<size_t>(g_size), times, EnvExtra() + net);
  }
}

void RunBroadcast(const std::string& system, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  hvd_tensor_t t = Tensor1D(buf.p, HVD_FLOAT32, shape);
  const std::string name = "bc." + std::to_string(bytes);
  std::vector<double> times;
  for (int i = 0; i < sch.warmup + sch.iters; ++i) {
    if (i == sch.warmup) g_net->Start();
    if (i == 0) {
      for (size_t k = 0; k < count; ++k) buf.p[k] = g_rank == 0 ? 7.0f : 0.0f;
    }
    Check(hvd_barrier(g_ctx), "barrier");
    const double t0 = NowUs();
    hvd_handle_t h = nullptr;
    Check(hvd_broadcast_async(g_ctx, name.c_str(), &t, buf.p, 0, &h), "broadcast");
    Check(hvd_handle_wait(h, -1), "wait(broadcast)");
    const double t1 = NowUs();
    Check(hvd_handle_release(h), "release");
    if (i == 0 && (buf.p[0] != 7.0f || buf.p[count - 1] != 7.0f)) {
      std::fprintf(stderr, "hvd-bench: broadcast of %zu bytes is wrong\n", bytes);
      std::exit(4);
    }
    if (i >= sch.warmup) times.push_back(t1 - t0);
  }
  const std::string net = g_net->Stop(sch.iters, name);
  times = SlowestRank(times, name);
  if (g_emit) {
    hvdbench::EmitColl(system, "broadcast", "inplace", g_size, count * sizeof(float), times,
                       EnvExtra() + net);
  }
}

// The job context's executor time and fused batches so far (hvd_metrics'
// JSON: the first "data_seconds" and "batches" are the job scope's,
// docs/metrics.md); false where metrics are off or unreadable.
bool ExecutorTotals(double* data_s, double* batches) {
  size_t need = 0;
  if (hvd_metrics(g_ctx, HVD_METRICS_JSON, nullptr, 0, &need) != HVD_OK || need == 0) return false;
  std::string json(need, '\0');
  if (hvd_metrics(g_ctx, HVD_METRICS_JSON, &json[0], need, &need) != HVD_OK) return false;
  auto number = [&json](const char* key, double* v) {
    const size_t at = json.find(key);
    return at != std::string::npos && std::sscanf(json.c_str() + at + std::strlen(key), "%lf", v) == 1;
  };
  return number("\"data_seconds\":", data_s) && number("\"batches\":", batches);
}

void RunFusion(const Args& a, const std::string& system, bool quick) {
  const int n = std::atoi(a.Get("--tensors", "200").c_str());
  const size_t tb = hvdbench::ParseBytes(a.Get("--tensor-bytes", "16K"));
  const int steps = quick ? 1 : std::atoi(a.Get("--steps", "20").c_str());
  const int warmup = quick ? 1 : 3;
  const std::string prefix = a.Get("--name-prefix", "fuse");
  const size_t count = tb / sizeof(float);
  // --contiguous: the tensors are adjacent slices of one allocation (a
  // framework's flat gradient buffer); otherwise one allocation each.
  const bool contiguous = a.Has("--contiguous");
  std::vector<Buffer> bufs(contiguous ? 1 : static_cast<size_t>(n));
  std::vector<float*> ptr(static_cast<size_t>(n));
  std::vector<std::string> names(static_cast<size_t>(n));
  if (contiguous) bufs[0].Reset(static_cast<size_t>(n) * count * sizeof(float));
  for (int i = 0; i < n; ++i) {
    if (contiguous) {
      ptr[i] = bufs[0].p + static_cast<size_t>(i) * count;
    } else {
      bufs[i].Reset(count * sizeof(float));
      ptr[i] = bufs[i].p;
    }
    names[i] = prefix + "." + std::to_string(n) + "." + std::to_string(i);
  }
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  std::vector<hvd_handle_t> hs(static_cast<size_t>(n));
  std::vector<double> times, submit_times;
  // --grouped: the N tensors as one hvd_grouped_allreduce_async (one
  // request, one handle), the submission Horovod's grouped_allreduce makes.
  const bool grouped = a.Has("--grouped");
  std::vector<const char*> cnames(static_cast<size_t>(n));
  std::vector<hvd_tensor_t> tensors(static_cast<size_t>(n));
  std::vector<void*> outs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    cnames[i] = names[i].c_str();
    tensors[i] = Tensor1D(ptr[i], HVD_FLOAT32, shape);
    outs[i] = ptr[i];
  }
  const int nh = grouped ? 1 : n;
  // Executor time and batches over the timed steps (rank 0's): where a
  // step's time goes, beside the submit time.
  double data0 = 0, batches0 = 0, data1 = 0, batches1 = 0;
  bool totals = false;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == 0) {
      for (float* p : ptr) hvdbench::FillPattern(p, count, g_rank);
    }
    if (s == warmup) totals = ExecutorTotals(&data0, &batches0);
    Check(hvd_barrier(g_ctx), "barrier");
    const double t0 = NowUs();
    if (grouped) {
      Check(hvd_grouped_allreduce_async(nullptr, n, cnames.data(), tensors.data(), outs.data(),
                                        HVD_SUM, 1.0, 1.0, &hs[0]),
            "grouped allreduce");
    } else {
      for (int i = 0; i < n; ++i) {
        hvd_tensor_t t = Tensor1D(ptr[i], HVD_FLOAT32, shape);
        Check(hvd_allreduce_async(nullptr, names[i].c_str(), &t, ptr[i], HVD_SUM, 1.0, 1.0,
                                  &hs[i]),
              "allreduce");
      }
    }
    const double t_sub = NowUs();
    for (int i = 0; i < nh; ++i) Check(hvd_handle_wait(hs[i], -1), "wait");
    const double t1 = NowUs();
    for (int i = 0; i < nh; ++i) Check(hvd_handle_release(hs[i]), "release");
    if (s == 0) {
      std::string why;
      for (int i = 0; i < n; ++i) {
        if (!hvdbench::CheckSum(ptr[i], count, g_size, &why)) {
          std::fprintf(stderr, "hvd-bench: fused tensor %d is wrong: %s\n", i, why.c_str());
          std::exit(4);
        }
      }
    }
    if (s >= warmup) {
      times.push_back(t1 - t0);
      submit_times.push_back(t_sub - t0);
    }
  }
  totals = totals && ExecutorTotals(&data1, &batches1);
  times = SlowestRank(times, "fusion." + std::to_string(n));
  // How long the caller spent in the n hvd_allreduce_async calls (this
  // rank), and the executor's mean time and fused batches a step (the
  // step's barrier among the executor's ops; it is no batch).
  char extra[160];
  int len = std::snprintf(extra, sizeof(extra), ",\"submit_us\":%.1f", hvdbench::Median(submit_times));
  if (totals && steps > 0 && batches1 > batches0) {  // no batch: metrics off
    std::snprintf(extra + len, sizeof(extra) - static_cast<size_t>(len),
                  ",\"data_us\":%.1f,\"batches_per_step\":%.2f", (data1 - data0) * 1e6 / steps,
                  (batches1 - batches0) / steps);
  }
  if (g_rank == 0) {
    hvdbench::EmitStep("fusion", system, grouped ? "grouped" : "fused", g_size, n, tb, times,
                       EnvExtra() + extra);
  }
}

void RunLatency(const Args& a, const std::string& system, bool quick) {
  const int steps = quick ? 5 : std::atoi(a.Get("--steps", "400").c_str());
  const int warmup = quick ? 2 : 50;
  const std::string op = a.Get("--op", "allreduce");
  const bool bcast = op == "broadcast";
  const bool gather = op == "allgather";
  float x = 1.0f;
  const int64_t shape[1] = {1};
  hvd_tensor_t t = Tensor1D(&x, HVD_FLOAT32, shape);
  std::vector<double> times;
  Check(hvd_barrier(g_ctx), "barrier");
  for (int s = 0; s < warmup + steps; ++s) {
    const double t0 = NowUs();
    hvd_handle_t h = nullptr;
    if (gather) {
      x = static_cast<float>(g_rank + s);
      Check(hvd_allgather_async(g_ctx, "lat", &t, &h), "allgather");
    } else if (bcast) {
      x = g_rank == 0 ? static_cast<float>(s) : -1.0f;
      Check(hvd_broadcast_async(g_ctx, "lat", &t, &x, 0, &h), "broadcast");
    } else {
      x = 1.0f;
      Check(hvd_allreduce_async(g_ctx, "lat", &t, &x, HVD_SUM, 1.0, 1.0, &h), "allreduce");
    }
    Check(hvd_handle_wait(h, -1), "wait");
    const double t1 = NowUs();
    if (gather) {
      const void* data = nullptr;
      size_t bytes = 0;
      Check(hvd_handle_output(h, &data, &bytes), "allgather output");
      const float* all = static_cast<const float*>(data);
      for (int q = 0; q < g_size; ++q) {
        if (bytes != sizeof(float) * static_cast<size_t>(g_size) ||
            all[q] != static_cast<float>(q + s)) {
          std::fprintf(stderr, "hvd-bench: latency allgather: rank %d's part wrong\n", q);
          std::exit(4);
        }
      }
      x = static_cast<float>(g_size);  // checked below like an allreduce's
    }
    Check(hvd_handle_release(h), "release");
    if (x != static_cast<float>(bcast ? s : g_size)) {
      std::fprintf(stderr, "hvd-bench: latency %s gave %g\n", bcast ? "broadcast" : "allreduce",
                   static_cast<double>(x));
      std::exit(4);
    }
    if (s >= warmup) times.push_back(t1 - t0);
  }
  // Steps are not barrier-aligned, so report each rank's own median; the
  // slowest rank's.
  double med = hvdbench::Median(times);
  const int64_t one[1] = {1};
  hvd_tensor_t m = Tensor1D(&med, HVD_FLOAT64, one);
  Check(hvd_allreduce(g_ctx, "lat.median", &m, &med, HVD_MAX), "allreduce(median)");
  if (g_emit) {
    std::vector<double> v(1, med);
    hvdbench::EmitStep("latency", system,
                       gather ? "4B allgather" : bcast ? "4B broadcast" : "4B", g_size, 1, 4, v,
                       EnvExtra() + ",\"steps\":" + std::to_string(steps));
  }
}

// ResNet-50's parameter tensors in torchvision's registration order (conv,
// batch norm weight and bias, the downsample branch of each stage's first
// block, fc), as element counts. `weight` marks the conv and fc weights: the
// backward pass's compute is shared out among them.
struct GradTensor {
  size_t count;
  bool weight;
};

std::vector<GradTensor> ResNet50Tensors() {
  std::vector<GradTensor> t;
  auto conv = [&t](size_t in, size_t out, size_t k) { t.push_back({in * out * k * k, true}); };
  auto bn = [&t](size_t c) {
    t.push_back({c, false});
    t.push_back({c, false});
  };
  conv(3, 64, 7);
  bn(64);
  size_t in = 64;
  const size_t planes[4] = {64, 128, 256, 512};
  const int blocks[4] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    const size_t p = planes[s];
    for (int b = 0; b < blocks[s]; ++b) {
      conv(in, p, 1);
      bn(p);
      conv(p, p, 3);
      bn(p);
      conv(p, p * 4, 1);
      bn(p * 4);
      if (b == 0) {
        conv(in, p * 4, 1);
        bn(p * 4);
      }
      in = p * 4;
    }
  }
  t.push_back({2048 * 1000, true});
  t.push_back({1000, false});
  return t;
}

void RunE2e(const Args& a, const std::string& system, bool quick) {
  const std::string model = a.Get("--model", "resnet50");
  if (model != "resnet50") {
    std::fprintf(stderr, "hvd-bench: e2e --model resnet50 is the only model\n");
    std::exit(2);
  }
  const double compute_ms = std::atof(a.Get("--compute-ms", "100").c_str());
  const int batch = std::atoi(a.Get("--batch", "32").c_str());
  const int steps = quick ? 2 : std::atoi(a.Get("--steps", "10").c_str());
  const int warmup = quick ? 1 : std::atoi(a.Get("--warmup", "2").c_str());
  const std::vector<GradTensor> spec = ResNet50Tensors();
  size_t params = 0, weights = 0;
  for (const auto& g : spec) {
    params += g.count;
    weights += g.weight ? 1 : 0;
  }
  if (spec.size() != 161 || params != 25557032) {
    std::fprintf(stderr, "hvd-bench: ResNet-50 table is wrong: %zu tensors, %zu parameters\n", spec.size(),
                 params);
    std::exit(4);
  }
  const size_t n = spec.size();
  std::vector<Buffer> bufs(n);
  std::vector<std::string> names(n);
  std::vector<int64_t> shapes(n);
  for (size_t i = 0; i < n; ++i) {
    bufs[i].Reset(spec[i].count * sizeof(float));
    names[i] = "grad." + std::to_string(i);
    shapes[i] = static_cast<int64_t>(spec[i].count);
  }
  using Clock = std::chrono::steady_clock;
  const auto fwd = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
      compute_ms / 3.0));
  const auto share = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
      compute_ms * 2.0 / 3.0 / static_cast<double>(weights)));
  std::vector<hvd_handle_t> hs(n);
  std::vector<double> times;
  Check(hvd_barrier(g_ctx), "barrier");
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == 0) {
      for (size_t i = 0; i < n; ++i) hvdbench::FillPattern(bufs[i].p, spec[i].count, g_rank);
    }
    if (s == warmup) g_net->Start();
    const auto c0 = Clock::now();
    const double t0 = NowUs();
    auto due = c0 + fwd;
    std::this_thread::sleep_until(due);
    for (size_t k = n; k-- > 0;) {  // backward: last layer first
      if (spec[k].weight) {
        due += share;
        std::this_thread::sleep_until(due);
      }
      const int64_t shape[1] = {shapes[k]};
      hvd_tensor_t t = Tensor1D(bufs[k].p, HVD_FLOAT32, shape);
      Check(hvd_allreduce_async(nullptr, names[k].c_str(), &t, bufs[k].p, HVD_SUM, 1.0,
                                1.0 / static_cast<double>(g_size), &hs[k]),
            "allreduce");
    }
    for (size_t k = 0; k < n; ++k) Check(hvd_handle_wait(hs[k], -1), "wait");
    const double t1 = NowUs();
    for (size_t k = 0; k < n; ++k) Check(hvd_handle_release(hs[k]), "release");
    if (s == 0) {  // the average of FillPattern over the ranks: (size + 1) / 2 + i % 7
      for (size_t k = 0; k < n; ++k) {
        const float* p = bufs[k].p;
        const size_t c = spec[k].count;
        for (size_t i = 0; i < c; i += std::max<size_t>(1, c / 97)) {
          const float want = static_cast<float>(0.5 * (g_size + 1) + static_cast<double>(i % 7));
          if (std::fabs(p[i] - want) > 1e-5f * want) {
            std::fprintf(stderr, "hvd-bench: e2e gradient %zu element %zu is %g, expected %g\n", k, i,
                         static_cast<double>(p[i]), static_cast<double>(want));
            std::exit(4);
          }
        }
      }
    }
    if (s >= warmup) times.push_back(t1 - t0);
  }
  // Each step ends with the slowest rank's last gradient (all ranks wait for
  // it); the barrier-free steps are aligned by the collectives themselves.
  const std::string net = g_net->Stop(steps, "e2e");
  times = SlowestRank(times, "e2e");
  if (g_rank == 0) {
    const double med = hvdbench::Median(times);
    char extra[256];
    std::snprintf(extra, sizeof(extra),
                  ",\"model\":\"%s\",\"params\":%zu,\"compute_ms\":%g,\"batch\":%d,\"step_ms\":%.3f,"
                  "\"images_per_s\":%.1f",
                  model.c_str(), params, compute_ms, batch, med / 1e3,
                  med > 0 ? g_size * batch / (med / 1e6) : 0.0);
    hvdbench::EmitStep("e2e_synth", system, model, g_size, static_cast<int>(n), 0, times,
                       EnvExtra() + extra + net);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hvd-bench coll|fusion|latency|e2e [--system NAME] [--quick] ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  Args a(argc, argv);
  const bool quick = a.Has("--quick");
  const double scale = std::atof(a.Get("--iters-scale", "1").c_str());
  Check(hvd_init(nullptr), "hvd_init");
  Check(hvd_rank(&g_rank), "hvd_rank");
  Check(hvd_size(&g_size), "hvd_size");
  const std::string system = a.Get("--system", "hvd-" + TransportName());

  const std::string set = a.Get("--process-set", "");
  g_emit = g_rank == 0;
  if (!set.empty()) {
    if ((mode != "coll" && mode != "latency") || (set != "all" && set != "halves") ||
        (set == "halves" && g_size < 2)) {
      std::fprintf(stderr,
                   "hvd-bench: --process-set all|halves (halves: 2+ ranks), coll and latency only\n");
      return 2;
    }
    const int parent_rank = g_rank;
    const int color = set == "all" ? 0 : (g_rank < g_size / 2 ? 0 : 1);
    Check(hvd_context_split(nullptr, color, g_rank, &g_ctx), "hvd_context_split");
    Check(hvd_context_rank(g_ctx, &g_rank), "hvd_context_rank");
    Check(hvd_context_size(g_ctx, &g_size), "hvd_context_size");
    g_emit = parent_rank == 0;
  }

  NetCounter net(a.Get("--netdev", ""));
  g_net = &net;
  if (mode == "coll") {
    const auto ops = hvdbench::SplitList(a.Get("--ops", "allreduce,allgather,broadcast"));
    const auto sizes = hvdbench::ParseSizes(a.Get("--sizes", "4:256M"));
    for (const std::string& op : ops) {
      for (size_t bytes : sizes) {
        const auto sch = hvdbench::ScheduleFor(bytes, quick, scale);
        if (op == "allreduce") {
          RunAllreduce(system, bytes, sch);
        } else if (op == "allgather") {
          RunAllgather(system, bytes, sch);
        } else if (op == "broadcast") {
          RunBroadcast(system, bytes, sch);
        } else {
          std::fprintf(stderr, "hvd-bench: unknown op '%s'\n", op.c_str());
          return 2;
        }
      }
    }
  } else if (mode == "fusion") {
    RunFusion(a, system, quick);
  } else if (mode == "latency") {
    RunLatency(a, system, quick);
  } else if (mode == "e2e") {
    RunE2e(a, system, quick);
  } else {
    std::fprintf(stderr, "hvd-bench: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  if (g_ctx != nullptr) {
    Check(hvd_context_destroy(g_ctx), "hvd_context_destroy");
    Check(hvd_barrier(nullptr), "barrier");  // the other half may still be running
  }
  Check(hvd_shutdown(), "hvd_shutdown");
  return 0;
}
