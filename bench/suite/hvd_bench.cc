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
//   latency  --steps S: one 4-byte allreduce per step, back to back (no
//            barrier: a training loop's steady state), median step time.
//   coll --process-set all: the same over a process set of every rank (the
//        cost of a set against its parent of the same size, same run);
//        --process-set halves: two sets of half the ranks each, running the
//        same collectives at once (the ensemble pattern), reported at the
//        set's size by the first half's rank 0.
// Common: --system NAME (the label in the results), --quick (1 warm-up, 1
// iteration), --iters-scale X. Transport, cycle time and fusion threshold
// come from the environment (HVD_TRANSPORT, HVD_CYCLE_TIME, ...), as for any
// hvd program. Result lines: see bench_common.h.
#include <cstdio>
#include <cstdlib>
#include <string>
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

void RunAllreduce(const std::string& system, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  hvd_tensor_t t = Tensor1D(buf.p, HVD_FLOAT32, shape);
  const std::string name = "ar." + std::to_string(bytes);
  std::vector<double> times;
  for (int i = 0; i < sch.warmup + sch.iters; ++i) {
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
  times = SlowestRank(times, name);
  if (g_emit) {
    hvdbench::EmitColl(system, "allreduce", "inplace", g_size, count * sizeof(float), times, EnvExtra());
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
  times = SlowestRank(times, name);
  if (g_emit) {
    hvdbench::EmitColl(system, "allgather", "outofplace", g_size,
                       per_rank * sizeof(float) * static_cast<size_t>(g_size), times, EnvExtra());
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
  times = SlowestRank(times, name);
  if (g_emit) {
    hvdbench::EmitColl(system, "broadcast", "inplace", g_size, count * sizeof(float), times, EnvExtra());
  }
}

void RunFusion(const Args& a, const std::string& system, bool quick) {
  const int n = std::atoi(a.Get("--tensors", "200").c_str());
  const size_t tb = hvdbench::ParseBytes(a.Get("--tensor-bytes", "16K"));
  const int steps = quick ? 1 : std::atoi(a.Get("--steps", "20").c_str());
  const int warmup = quick ? 1 : 3;
  const size_t count = tb / sizeof(float);
  std::vector<Buffer> bufs(static_cast<size_t>(n));
  std::vector<std::string> names(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    bufs[i].Reset(count * sizeof(float));
    names[i] = "fuse." + std::to_string(n) + "." + std::to_string(i);
  }
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  std::vector<hvd_handle_t> hs(static_cast<size_t>(n));
  std::vector<double> times, submit_times;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == 0) {
      for (auto& b : bufs) hvdbench::FillPattern(b.p, count, g_rank);
    }
    Check(hvd_barrier(g_ctx), "barrier");
    const double t0 = NowUs();
    for (int i = 0; i < n; ++i) {
      hvd_tensor_t t = Tensor1D(bufs[i].p, HVD_FLOAT32, shape);
      Check(hvd_allreduce_async(nullptr, names[i].c_str(), &t, bufs[i].p, HVD_SUM, 1.0, 1.0, &hs[i]),
            "allreduce");
    }
    const double t_sub = NowUs();
    for (int i = 0; i < n; ++i) Check(hvd_handle_wait(hs[i], -1), "wait");
    const double t1 = NowUs();
    for (int i = 0; i < n; ++i) Check(hvd_handle_release(hs[i]), "release");
    if (s == 0) {
      std::string why;
      for (int i = 0; i < n; ++i) {
        if (!hvdbench::CheckSum(bufs[i].p, count, g_size, &why)) {
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
  times = SlowestRank(times, "fusion." + std::to_string(n));
  // How long the caller spent in the n hvd_allreduce_async calls (this rank).
  char extra[96];
  std::snprintf(extra, sizeof(extra), ",\"submit_us\":%.1f", hvdbench::Median(submit_times));
  if (g_rank == 0) {
    hvdbench::EmitStep("fusion", system, "fused", g_size, n, tb, times, EnvExtra() + extra);
  }
}

void RunLatency(const Args& a, const std::string& system, bool quick) {
  const int steps = quick ? 5 : std::atoi(a.Get("--steps", "400").c_str());
  const int warmup = quick ? 2 : 50;
  float x = 1.0f;
  const int64_t shape[1] = {1};
  hvd_tensor_t t = Tensor1D(&x, HVD_FLOAT32, shape);
  std::vector<double> times;
  Check(hvd_barrier(g_ctx), "barrier");
  for (int s = 0; s < warmup + steps; ++s) {
    x = 1.0f;
    const double t0 = NowUs();
    hvd_handle_t h = nullptr;
    Check(hvd_allreduce_async(nullptr, "lat", &t, &x, HVD_SUM, 1.0, 1.0, &h), "allreduce");
    Check(hvd_handle_wait(h, -1), "wait");
    const double t1 = NowUs();
    Check(hvd_handle_release(h), "release");
    if (x != static_cast<float>(g_size)) {
      std::fprintf(stderr, "hvd-bench: latency allreduce gave %g\n", static_cast<double>(x));
      std::exit(4);
    }
    if (s >= warmup) times.push_back(t1 - t0);
  }
  // Steps are not barrier-aligned, so report each rank's own median; the
  // slowest rank's.
  double med = hvdbench::Median(times);
  const int64_t one[1] = {1};
  hvd_tensor_t m = Tensor1D(&med, HVD_FLOAT64, one);
  Check(hvd_allreduce(nullptr, "lat.median", &m, &med, HVD_MAX), "allreduce(median)");
  if (g_rank == 0) {
    std::vector<double> v(1, med);
    hvdbench::EmitStep("latency", system, "4B", g_size, 1, 4, v,
                       EnvExtra() + ",\"steps\":" + std::to_string(steps));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hvd-bench coll|fusion|latency [--system NAME] [--quick] ...\n");
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
    if (mode != "coll" || (set != "all" && set != "halves") || (set == "halves" && g_size < 2)) {
      std::fprintf(stderr, "hvd-bench: --process-set all|halves (halves: 2+ ranks), coll only\n");
      return 2;
    }
    const int parent_rank = g_rank;
    const int color = set == "all" ? 0 : (g_rank < g_size / 2 ? 0 : 1);
    Check(hvd_context_split(nullptr, color, g_rank, &g_ctx), "hvd_context_split");
    Check(hvd_context_rank(g_ctx, &g_rank), "hvd_context_rank");
    Check(hvd_context_size(g_ctx, &g_size), "hvd_context_size");
    g_emit = parent_rank == 0;
  }

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
