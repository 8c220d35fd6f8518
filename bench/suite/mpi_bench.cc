// mpi-bench: raw Open MPI as a peer of hvd.
//
//   mpirun -np 2 build/bin/mpi-bench coll --system mpi
//   mpirun -np 2 -x GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296
//          build/bin/mpi-bench coll --system mpi-nommap
//
// Modes and variants (result lines: see bench_common.h)
//   coll     allreduce "inplace" (MPI_IN_PLACE) and "outofplace" (separate
//            send and receive buffers), float32 SUM; allgather (MPI_Allgather,
//            nccl-tests counts the whole output); broadcast (MPI_Bcast from
//            rank 0). Each iteration follows an MPI_Barrier; the slowest
//            rank's time counts.
//   fusion   --tensors N --tensor-bytes B: "separate" (N MPI_Allreduce calls
//            in place) and "handfused" (pack, one MPI_Allreduce in place,
//            unpack; the copies are timed).
//   latency  one 4-byte MPI_Allreduce in place per step, back to back
//            (--op broadcast: one 4-byte MPI_Bcast from rank 0 instead;
//            --op allgather: one 4-byte MPI_Allgather from each rank).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using hvdbench::Args;
using hvdbench::Buffer;
using hvdbench::NowUs;

int g_rank = 0;
int g_size = 1;

void Fail(const std::string& what) {
  std::fprintf(stderr, "mpi-bench rank %d: %s\n", g_rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 4);
}

std::vector<double> SlowestRank(std::vector<double> t) {
  if (g_size > 1 && !t.empty()) {
    MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX,
                  MPI_COMM_WORLD);
  }
  return t;
}

template <typename RunFn>
std::vector<double> TimeLoop(const hvdbench::Schedule& sch, RunFn run) {
  return SlowestRank(
      hvdbench::TimedIterations(sch, [] { MPI_Barrier(MPI_COMM_WORLD); }, run));
}

void CollAllreduce(const std::string& system, const std::string& variant, size_t bytes,
                   const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  const bool inplace = variant == "inplace";
  Buffer buf(count * sizeof(float));
  Buffer out(inplace ? 0 : count * sizeof(float));
  hvdbench::FillPattern(buf.p, count, g_rank);
  const int n = static_cast<int>(count);
  auto times = TimeLoop(sch, [&](int i) {
    if (inplace) {
      MPI_Allreduce(MPI_IN_PLACE, buf.p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Allreduce(buf.p, out.p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (i == 0) {
      std::string why;
      if (!hvdbench::CheckSum(inplace ? buf.p : out.p, count, g_size, &why)) {
        Fail("allreduce " + variant + ": " + why);
      }
    }
  });
  if (g_rank == 0) hvdbench::EmitColl(system, "allreduce", variant, g_size, count * 4, times);
}

void CollAllgather(const std::string& system, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t per = std::max<size_t>(1, bytes / sizeof(float) / static_cast<size_t>(g_size));
  Buffer in(per * sizeof(float));
  Buffer out(per * sizeof(float) * static_cast<size_t>(g_size));
  for (size_t i = 0; i < per; ++i) in.p[i] = static_cast<float>(g_rank);
  auto times = TimeLoop(sch, [&](int i) {
    MPI_Allgather(in.p, static_cast<int>(per), MPI_FLOAT, out.p, static_cast<int>(per), MPI_FLOAT,
                  MPI_COMM_WORLD);
    if (i == 0 && out.p[per * g_size - 1] != static_cast<float>(g_size - 1)) Fail("allgather wrong");
  });
  if (g_rank == 0) hvdbench::EmitColl(system, "allgather", "outofplace", g_size, out.bytes, times);
}

void CollBroadcast(const std::string& system, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  for (size_t k = 0; k < count; ++k) buf.p[k] = g_rank == 0 ? 7.0f : 0.0f;
  auto times = TimeLoop(sch, [&](int i) {
    MPI_Bcast(buf.p, static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (i == 0 && buf.p[count - 1] != 7.0f) Fail("broadcast wrong");
  });
  if (g_rank == 0) hvdbench::EmitColl(system, "broadcast", "inplace", g_size, buf.bytes, times);
}

void Fusion(const Args& a, const std::string& system, bool quick) {
  const int n = std::atoi(a.Get("--tensors", "200").c_str());
  const size_t tb = hvdbench::ParseBytes(a.Get("--tensor-bytes", "16K"));
  const size_t count = tb / sizeof(float);
  const hvdbench::Schedule sch = quick ? hvdbench::Schedule{1, 1}
                                       : hvdbench::Schedule{2, std::atoi(a.Get("--steps", "20").c_str())};
  std::vector<Buffer> bufs(static_cast<size_t>(n));
  for (auto& b : bufs) {
    b.Reset(tb);
    hvdbench::FillPattern(b.p, count, g_rank);
  }
  auto check = [&](const char* what) {
    std::string why;
    for (int i = 0; i < n; ++i) {
      if (!hvdbench::CheckSum(bufs[i].p, count, g_size, &why)) Fail(std::string(what) + ": " + why);
    }
  };
  auto t1 = TimeLoop(sch, [&](int it) {
    for (auto& b : bufs) {
      MPI_Allreduce(MPI_IN_PLACE, b.p, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (it == 0) check("separate");
  });
  if (g_rank == 0) hvdbench::EmitStep("fusion", system, "separate", g_size, n, tb, t1);
  for (auto& b : bufs) hvdbench::FillPattern(b.p, count, g_rank);
  Buffer packed(tb * static_cast<size_t>(n));
  auto t2 = TimeLoop(sch, [&](int it) {
    for (int i = 0; i < n; ++i) std::memcpy(packed.p + i * count, bufs[i].p, tb);
    MPI_Allreduce(MPI_IN_PLACE, packed.p, static_cast<int>(count * n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i) std::memcpy(bufs[i].p, packed.p + i * count, tb);
    if (it == 0) check("handfused");
  });
  if (g_rank == 0) hvdbench::EmitStep("fusion", system, "handfused", g_size, n, tb, t2);
}

void Latency(const Args& a, const std::string& system, bool quick) {
  const int steps = quick ? 5 : std::atoi(a.Get("--steps", "400").c_str());
  const int warmup = quick ? 2 : 50;
  const std::string op = a.Get("--op", "allreduce");
  const bool bcast = op == "broadcast";
  const bool gather = op == "allgather";
  float x = 1.0f;
  std::vector<float> all(static_cast<size_t>(g_size));
  std::vector<double> times;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int s = 0; s < warmup + steps; ++s) {
    const double t0 = NowUs();
    if (gather) {
      x = static_cast<float>(g_rank + s);
      MPI_Allgather(&x, 1, MPI_FLOAT, all.data(), 1, MPI_FLOAT, MPI_COMM_WORLD);
      for (int q = 0; q < g_size; ++q) {
        if (all[q] != static_cast<float>(q + s)) Fail("latency allgather wrong");
      }
      x = static_cast<float>(g_size);  // checked below like an allreduce's
    } else if (bcast) {
      x = g_rank == 0 ? static_cast<float>(s) : -1.0f;
      MPI_Bcast(&x, 1, MPI_FLOAT, 0, MPI_COMM_WORLD);
    } else {
      x = 1.0f;
      MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    const double t1 = NowUs();
    if (x != static_cast<float>(bcast ? s : g_size)) Fail("latency collective wrong");
    if (s >= warmup) times.push_back(t1 - t0);
  }
  std::vector<double> med(1, hvdbench::Median(times));
  med = SlowestRank(med);
  if (g_rank == 0) {
    hvdbench::EmitStep("latency", system,
                       gather ? "4B allgather" : bcast ? "4B broadcast" : "4B", g_size, 1, 4, med,
                       "\"steps\":" + std::to_string(steps));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mpi-bench coll|fusion|latency [--system NAME] [--quick] ...\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const std::string mode = argv[1];
  Args a(argc, argv);
  const bool quick = a.Has("--quick");
  const double scale = std::atof(a.Get("--iters-scale", "1").c_str());
  const std::string system = a.Get("--system", "mpi");
  if (mode == "coll") {
    const auto ops = hvdbench::SplitList(a.Get("--ops", "allreduce,allgather,broadcast"));
    const auto variants = hvdbench::SplitList(a.Get("--variants", "inplace,outofplace"));
    const auto sizes = hvdbench::ParseSizes(a.Get("--sizes", "4:256M"));
    for (const std::string& op : ops) {
      for (size_t bytes : sizes) {
        const auto sch = hvdbench::ScheduleFor(bytes, quick, scale);
        if (op == "allreduce") {
          for (const auto& v : variants) CollAllreduce(system, v, bytes, sch);
        } else if (op == "allgather") {
          CollAllgather(system, bytes, sch);
        } else if (op == "broadcast") {
          CollBroadcast(system, bytes, sch);
        }
      }
    }
  } else if (mode == "fusion") {
    Fusion(a, system, quick);
  } else if (mode == "latency") {
    Latency(a, system, quick);
  } else {
    if (g_rank == 0) std::fprintf(stderr, "mpi-bench: unknown mode '%s'\n", mode.c_str());
    MPI_Finalize();
    return 2;
  }
  MPI_Finalize();
  return 0;
}
