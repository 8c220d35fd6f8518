// gloo-bench: raw Gloo (Debian's libgloo-dev) as a peer of hvd, over Gloo's
// TCP transport on 127.0.0.1, with a rendezvous it sets up itself
// (gloo::rendezvous::FileStore in a directory given with --store).
//
//   hvdrun --start-timeout 0 -np 2 build/bin/gloo-bench coll --store /tmp/x
//
// Rank and size come from the launcher's variables (hvdrun or mpirun); the
// launcher only starts the processes. Across hosts, --iface IF makes every
// rank listen on its interface IF (e.g. eth0) instead of 127.0.0.1; the
// --store directory must then be on a file system all hosts share.
//
// Modes and variants (result lines: see bench_common.h)
//   coll     allreduce: "ring" and "ringchunked" (the legacy AllreduceRing /
//            AllreduceRingChunked, built once per buffer, construction not
//            timed) and "allreduce" (gloo::allreduce, options built per call
//            as a caller would); allgather: gloo::allgather; broadcast:
//            gloo::broadcast from rank 0. Each iteration follows a
//            gloo::barrier; the slowest rank's time counts.
//   fusion   --tensors N --tensor-bytes B: "separate-allreduce" (N calls of
//            gloo::allreduce), "separate-ring" (N AllreduceRing objects built
//            once, run one after another), "handfused" (pack into one buffer,
//            one gloo::allreduce, unpack; the copies are timed).
//            Each variant runs on a fresh context (see FreshContext). A
//            variant whose median call exceeds --budget-s (default 2 s) is not
//            run at larger sizes (a "note" result says so).
//   latency  one 4-byte allreduce per step, back to back: "allreduce"
//            (gloo::allreduce) and "ring" (a prebuilt AllreduceRing).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench_common.h"

namespace {

using hvdbench::Args;
using hvdbench::Buffer;
using hvdbench::NowUs;

int g_rank = 0;
int g_size = 1;
std::shared_ptr<gloo::Context> g_ctx;
uint32_t g_tag = 1;
std::shared_ptr<gloo::transport::Device> g_dev;
gloo::rendezvous::Store* g_store = nullptr;



using ReduceFn = void (*)(void*, const void*, const void*, size_t);

void Barrier() {
  gloo::BarrierOptions o(g_ctx);
  o.setTag(0);
  gloo::barrier(o);
}

// Every variant runs on a context of its own: with this Gloo version, legacy
// algorithm objects (AllreduceRing*) built and destroyed on a context slow
// later gloo::allreduce calls on that same context by 10-100x (measured: a
// 3.2 MB gloo::allreduce 7 ms before 200 AllreduceRing objects, 54 ms after;
// at 4 ranks ~1 s per MiB), which would charge one variant for another.
void FreshContext(const std::string& tag) {
  if (g_ctx) Barrier();
  g_ctx.reset();
  gloo::rendezvous::PrefixStore store(tag, *g_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(g_rank, g_size);
  ctx->setTimeout(std::chrono::seconds(300));
  ctx->connectFullMesh(store, g_dev);
  g_ctx = ctx;
}

void AllreduceNew(float* p, size_t n) {
  gloo::AllreduceOptions o(g_ctx);
  o.setOutput(p, n);
  o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
  o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  o.setTag(g_tag);
  gloo::allreduce(o);
}

std::vector<double> SlowestRank(std::vector<double> t) {
  if (g_size == 1 || t.empty()) return t;
  gloo::AllreduceOptions o(g_ctx);
  o.setOutput(t.data(), t.size());
  o.setReduceFunction(static_cast<ReduceFn>(&gloo::max<double>));
  o.setTag(99);
  gloo::allreduce(o);
  return t;
}

void Fail(const std::string& what) {
  std::fprintf(stderr, "gloo-bench rank %d: %s\n", g_rank, what.c_str());
  std::exit(4);
}

template <typename RunFn>
std::vector<double> TimeLoop(const hvdbench::Schedule& sch, RunFn run) {
  return SlowestRank(hvdbench::TimedIterations(sch, [] { Barrier(); }, run));
}

// Returns the median time, so the caller can stop a variant that has become
// too slow to finish the suite in time (see --budget-s).
double CollAllreduce(const std::string& variant, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  hvdbench::FillPattern(buf.p, count, g_rank);
  std::unique_ptr<gloo::Algorithm> algo;
  if (variant == "ring") {
    algo = std::make_unique<gloo::AllreduceRing<float>>(g_ctx, std::vector<float*>{buf.p},
                                                        static_cast<int>(count));
  } else if (variant == "ringchunked") {
    algo = std::make_unique<gloo::AllreduceRingChunked<float>>(g_ctx, std::vector<float*>{buf.p},
                                                               static_cast<int>(count));
  }
  auto times = TimeLoop(sch, [&](int i) {
    if (algo) {
      algo->run();
    } else {
      AllreduceNew(buf.p, count);
    }
    if (i == 0) {
      std::string why;
      if (!hvdbench::CheckSum(buf.p, count, g_size, &why)) Fail("allreduce " + variant + ": " + why);
    }
  });
  if (g_rank == 0) hvdbench::EmitColl("gloo", "allreduce", variant, g_size, count * 4, times);
  return hvdbench::Median(times);
}

double CollAllgather(size_t bytes, const hvdbench::Schedule& sch) {
  const size_t per = std::max<size_t>(1, bytes / sizeof(float) / static_cast<size_t>(g_size));
  Buffer in(per * sizeof(float));
  Buffer out(per * sizeof(float) * static_cast<size_t>(g_size));
  for (size_t i = 0; i < per; ++i) in.p[i] = static_cast<float>(g_rank);
  auto times = TimeLoop(sch, [&](int i) {
    gloo::AllgatherOptions o(g_ctx);
    o.setInput(in.p, per);
    o.setOutput(out.p, per * static_cast<size_t>(g_size));
    o.setTag(g_tag);
    gloo::allgather(o);
    if (i == 0 && out.p[per * g_size - 1] != static_cast<float>(g_size - 1)) Fail("allgather wrong");
  });
  if (g_rank == 0) hvdbench::EmitColl("gloo", "allgather", "allgather", g_size, out.bytes, times);
  return hvdbench::Median(times);
}

double CollBroadcast(size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  for (size_t k = 0; k < count; ++k) buf.p[k] = g_rank == 0 ? 7.0f : 0.0f;
  auto times = TimeLoop(sch, [&](int i) {
    gloo::BroadcastOptions o(g_ctx);
    o.setOutput(buf.p, count);
    o.setRoot(0);
    o.setTag(g_tag);
    gloo::broadcast(o);
    if (i == 0 && buf.p[count - 1] != 7.0f) Fail("broadcast wrong");
  });
  if (g_rank == 0) hvdbench::EmitColl("gloo", "broadcast", "broadcast", g_size, buf.bytes, times);
  return hvdbench::Median(times);
}

void Fusion(const Args& a, bool quick) {
  const int n = std::atoi(a.Get("--tensors", "200").c_str());
  const size_t tb = hvdbench::ParseBytes(a.Get("--tensor-bytes", "16K"));
  const size_t count = tb / sizeof(float);
  const hvdbench::Schedule sch = quick ? hvdbench::Schedule{1, 1}
                                       : hvdbench::Schedule{2, std::atoi(a.Get("--steps", "10").c_str())};
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
  const auto variants = hvdbench::SplitList(
      a.Get("--variants", "handfused,separate-allreduce,separate-ring"));
  for (const std::string& v : variants) {
    FreshContext("fusion/" + std::to_string(n) + "/" + v);
    for (auto& b : bufs) hvdbench::FillPattern(b.p, count, g_rank);
    std::vector<double> t;
    if (v == "separate-allreduce") {
      // One gloo::allreduce per tensor.
      t = TimeLoop(sch, [&](int it) {
        for (auto& b : bufs) AllreduceNew(b.p, count);
        if (it == 0) check("separate-allreduce");
      });
    } else if (v == "separate-ring") {
      // N AllreduceRing objects built once, run one after another.
      std::vector<std::unique_ptr<gloo::AllreduceRing<float>>> rings;
      for (auto& b : bufs) {
        rings.push_back(std::make_unique<gloo::AllreduceRing<float>>(
            g_ctx, std::vector<float*>{b.p}, static_cast<int>(count)));
      }
      t = TimeLoop(sch, [&](int it) {
        for (auto& r : rings) r->run();
        if (it == 0) check("separate-ring");
      });
    } else if (v == "handfused") {
      // Pack, one gloo::allreduce, unpack.
      Buffer packed(tb * static_cast<size_t>(n));
      t = TimeLoop(sch, [&](int it) {
        for (int i = 0; i < n; ++i) std::memcpy(packed.p + i * count, bufs[i].p, tb);
        AllreduceNew(packed.p, count * static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) std::memcpy(bufs[i].p, packed.p + i * count, tb);
        if (it == 0) check("handfused");
      });
    } else {
      Fail("unknown fusion variant " + v);
    }
    if (g_rank == 0) hvdbench::EmitStep("fusion", "gloo", v, g_size, n, tb, t);
  }
}

void Latency(const Args& a, bool quick) {
  const int steps = quick ? 5 : std::atoi(a.Get("--steps", "400").c_str());
  const int warmup = quick ? 2 : 50;
  float x = 1.0f;
  for (const char* variant : {"allreduce", "ring"}) {
    FreshContext(std::string("latency/") + variant);
    std::unique_ptr<gloo::AllreduceRing<float>> ring;
    if (variant[0] == 'r') ring = std::make_unique<gloo::AllreduceRing<float>>(g_ctx, std::vector<float*>{&x}, 1);
    std::vector<double> times;
    Barrier();
    for (int s = 0; s < warmup + steps; ++s) {
      x = 1.0f;
      const double t0 = NowUs();
      if (variant[0] == 'a') {
        AllreduceNew(&x, 1);
      } else {
        ring->run();
      }
      const double t1 = NowUs();
      if (x != static_cast<float>(g_size)) Fail("latency allreduce wrong");
      if (s >= warmup) times.push_back(t1 - t0);
    }
    std::vector<double> med(1, hvdbench::Median(times));
    med = SlowestRank(med);
    if (g_rank == 0) {
      hvdbench::EmitStep("latency", "gloo", variant, g_size, 1, 4, med,
                         "\"steps\":" + std::to_string(steps));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gloo-bench coll|fusion|latency --store DIR [--quick] ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  Args a(argc, argv);
  const bool quick = a.Has("--quick");
  const double scale = std::atof(a.Get("--iters-scale", "1").c_str());
  hvdbench::LauncherRank(&g_rank, &g_size);
  const std::string store_dir = a.Get("--store");
  if (store_dir.empty()) {
    std::fprintf(stderr, "gloo-bench: --store DIR is required (an empty directory per job)\n");
    return 2;
  }
  try {
    // --iface IF: listen on IF's address (ranks on several hosts); else
    // 127.0.0.1 (every rank on this one).
    gloo::transport::tcp::attr attr;
    const std::string iface = a.Get("--iface", "");
    if (iface.empty()) {
      attr.hostname = "127.0.0.1";
    } else {
      attr.iface = iface;
    }
    g_dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    g_store = &file_store;

    if (mode == "coll") {
      const auto ops = hvdbench::SplitList(a.Get("--ops", "allreduce,allgather,broadcast"));
      const auto variants = hvdbench::SplitList(a.Get("--variants", "allreduce,ring,ringchunked"));
      const auto sizes = hvdbench::ParseSizes(a.Get("--sizes", "4:256M"));
      // A variant whose call takes longer than this is not run at larger
      // sizes (all ranks see the same slowest-rank median, so they agree).
      const double budget_us = std::atof(a.Get("--budget-s", "2").c_str()) * 1e6;
      for (const std::string& op : ops) {
        const std::vector<std::string> vs =
            op == "allreduce" ? variants : std::vector<std::string>{op};
        for (const std::string& v : vs) {
          FreshContext("coll/" + op + "/" + v);
          for (size_t bytes : sizes) {
            const auto sch = hvdbench::ScheduleFor(bytes, quick, scale);
            double med = 0;
            if (op == "allreduce") {
              med = CollAllreduce(v, bytes, sch);
            } else if (op == "allgather") {
              med = CollAllgather(bytes, sch);
            } else if (op == "broadcast") {
              med = CollBroadcast(bytes, sch);
            }
            if (med > budget_us && bytes != sizes.back()) {
              if (g_rank == 0) {
                std::printf("BENCH {\"kind\":\"note\",\"system\":\"gloo\",\"op\":\"%s\","
                            "\"variant\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"text\":\"over the "
                            "time budget of %g s per call: larger sizes not run\"}\n",
                            op.c_str(), v.c_str(), g_size, bytes, budget_us / 1e6);
                std::fflush(stdout);
              }
              break;
            }
          }
        }
      }
    } else if (mode == "fusion") {
      Fusion(a, quick);
    } else if (mode == "latency") {
      Latency(a, quick);
    } else {
      std::fprintf(stderr, "gloo-bench: unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    if (g_ctx) Barrier();
    g_ctx.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-bench rank %d: %s\n", g_rank, e.what());
    return 5;
  }
  return 0;
}
