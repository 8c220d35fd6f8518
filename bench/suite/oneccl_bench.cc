// oneccl-bench: Intel oneCCL (the CPU build from the oneccl-cpu / oneccl-cpu-devel wheels) as
// a peer of hvd, through oneCCL's C++ API.
//
//   # the documented launch: Intel MPI's hydra (from the impi-rt wheel), oneCCL's default
//   # ATL/MPI transport (Intel MPI's shared memory between ranks of one host)
//   export I_MPI_ROOT=P LD_LIBRARY_PATH=P/lib FI_PROVIDER_PATH=P/lib I_MPI_FABRICS=shm
//   P/bin/mpiexec.hydra -n 2 build/bin/oneccl-bench coll --store $(mktemp -d)
//   # any plain launcher, ATL/OFI (libfabric's shm provider within a host, tcp between hosts)
//   export CCL_ATL_TRANSPORT=ofi CCL_ATL_SHM=1 LD_LIBRARY_PATH=P/lib FI_PROVIDER_PATH=P/lib
//   hvdrun --start-timeout 0 -np 2 build/bin/oneccl-bench coll --system oneccl-ofi --store DIR
//
// (P: the prefix bench/suite/install_peers.sh installed oneCCL into.) Rank and size come from
// the launcher's variables (hvdrun, Open MPI, Intel MPI's PMI_RANK/PMI_SIZE, torchrun). The
// communicator is made from a key-value store: rank 0 creates the main KVS and writes its
// address into --store DIR, the other ranks read it from there (the rank-0 address exchange
// of oneCCL's ccl::create_main_kvs / ccl::create_kvs API).
//
// Modes and variants (result lines: see bench_common.h)
//   coll     allreduce "inplace" (send buffer == receive buffer, as hvd's) and, with
//            --variants, "outofplace"; allgather (ccl::allgather, nccl-tests counts the whole
//            output); broadcast (ccl::broadcast from rank 0). float32 SUM. Each iteration
//            follows a ccl::barrier; the slowest rank's time counts.
//   latency  one 4-byte allreduce per step, back to back.
#include <unistd.h>

#include <oneapi/ccl.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

// The wheels' libccl.so is not loadable as shipped (it lists "libccl.so.2", which no wheel
// provides), so the suite links the static CPU archive (lib/ccl/cpu/lib/libccl.a) instead.
// That archive was compiled by Intel's compiler and refers to two functions of its runtime
// (libirc) and to the pointer table of Intel's ITT tracing API (libittnotify). Plain
// definitions stand in for them: the two copy/fill functions are memcpy/memset, and null ITT
// pointers are what ITT's own stubs hold while no tracing tool is attached (oneCCL calls
// through them only when they are set; CCL_ITT_LEVEL defaults to 0).
#ifdef HVD_ONECCL_STATIC
extern "C" {
void* _intel_fast_memcpy(void* d, const void* s, size_t n) { return std::memcpy(d, s, n); }
void* _intel_fast_memset(void* d, int c, size_t n) { return std::memset(d, c, n); }
void* __itt_domain_create_ptr__3_0 = nullptr;
void* __itt_event_create_ptr__3_0 = nullptr;
void* __itt_event_end_ptr__3_0 = nullptr;
void* __itt_event_start_ptr__3_0 = nullptr;
void* __itt_metadata_add_ptr__3_0 = nullptr;
void* __itt_string_handle_create_ptr__3_0 = nullptr;
void* __itt_task_begin_ptr__3_0 = nullptr;
void* __itt_task_end_ptr__3_0 = nullptr;
void* __itt_thread_set_name_ptr__3_0 = nullptr;
}
#endif

namespace {

using hvdbench::Args;
using hvdbench::Buffer;
using hvdbench::NowUs;

int g_rank = 0;
int g_size = 1;
ccl::communicator* g_comm = nullptr;
std::string g_system = "oneccl";

void Fail(const std::string& what) {
  std::fprintf(stderr, "oneccl-bench rank %d: %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  std::_Exit(4);
}

void Barrier() { ccl::barrier(*g_comm).wait(); }

std::vector<double> SlowestRank(std::vector<double> t) {
  if (g_size > 1 && !t.empty()) {
    ccl::allreduce(t.data(), t.data(), t.size(), ccl::reduction::max, *g_comm).wait();
  }
  return t;
}

template <typename RunFn>
std::vector<double> TimeLoop(const hvdbench::Schedule& sch, RunFn run) {
  return SlowestRank(hvdbench::TimedIterations(sch, [] { Barrier(); }, run));
}

void CollAllreduce(const std::string& variant, size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  const bool inplace = variant == "inplace";
  Buffer buf(count * sizeof(float));
  Buffer out(inplace ? 0 : count * sizeof(float));
  hvdbench::FillPattern(buf.p, count, g_rank);
  float* dst = inplace ? buf.p : out.p;
  auto times = TimeLoop(sch, [&](int i) {
    ccl::allreduce(buf.p, dst, count, ccl::reduction::sum, *g_comm).wait();
    if (i == 0) {
      std::string why;
      if (!hvdbench::CheckSum(dst, count, g_size, &why)) Fail("allreduce " + variant + ": " + why);
    }
  });
  if (g_rank == 0) hvdbench::EmitColl(g_system, "allreduce", variant, g_size, count * 4, times);
}

void CollAllgather(size_t bytes, const hvdbench::Schedule& sch) {
  const size_t per = std::max<size_t>(1, bytes / sizeof(float) / static_cast<size_t>(g_size));
  Buffer in(per * sizeof(float));
  Buffer out(per * sizeof(float) * static_cast<size_t>(g_size));
  for (size_t i = 0; i < per; ++i) in.p[i] = static_cast<float>(g_rank);
  auto times = TimeLoop(sch, [&](int i) {
    ccl::allgather(in.p, out.p, per, ccl::datatype::float32, *g_comm).wait();
    if (i == 0) {
      for (int r = 0; r < g_size; ++r) {
        if (out.p[per * static_cast<size_t>(r) + per - 1] != static_cast<float>(r)) {
          Fail("allgather wrong");
        }
      }
    }
  });
  if (g_rank == 0) hvdbench::EmitColl(g_system, "allgather", "outofplace", g_size, out.bytes, times);
}

void CollBroadcast(size_t bytes, const hvdbench::Schedule& sch) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  Buffer buf(count * sizeof(float));
  for (size_t k = 0; k < count; ++k) buf.p[k] = g_rank == 0 ? 7.0f : 0.0f;
  auto times = TimeLoop(sch, [&](int i) {
    ccl::broadcast(buf.p, count, ccl::datatype::float32, 0, *g_comm).wait();
    if (i == 0 && (buf.p[count - 1] != 7.0f || buf.p[0] != 7.0f)) Fail("broadcast wrong");
  });
  if (g_rank == 0) hvdbench::EmitColl(g_system, "broadcast", "inplace", g_size, buf.bytes, times);
}

void Latency(const Args& a, bool quick) {
  const int steps = quick ? 5 : std::atoi(a.Get("--steps", "400").c_str());
  const int warmup = quick ? 2 : 50;
  float x = 1.0f;
  std::vector<double> times;
  Barrier();
  for (int s = 0; s < warmup + steps; ++s) {
    x = 1.0f;
    const double t0 = NowUs();
    ccl::allreduce(&x, &x, 1, ccl::reduction::sum, *g_comm).wait();
    const double t1 = NowUs();
    if (x != static_cast<float>(g_size)) Fail("latency allreduce wrong");
    if (s >= warmup) times.push_back(t1 - t0);
  }
  std::vector<double> med(1, hvdbench::Median(times));
  med = SlowestRank(med);
  if (g_rank == 0) {
    hvdbench::EmitStep("latency", g_system, "4B", g_size, 1, 4, med,
                       "\"steps\":" + std::to_string(steps));
  }
}

// Rank and size: the suite's launchers (bench_common.h), else Intel MPI's hydra (PMI_*).
void FindRank() {
  if (hvdbench::LauncherRank(&g_rank, &g_size)) return;
  const char* r = std::getenv("PMI_RANK");
  const char* n = std::getenv("PMI_SIZE");
  if (r != nullptr && n != nullptr) {
    g_rank = std::atoi(r);
    g_size = std::atoi(n);
  }
}

// oneCCL reads its local rank and count from CCL_LOCAL_RANK/SIZE, or from the launcher it
// knows (Intel MPI's hydra), or asks the transport; hvdrun's and Open MPI's are passed on.
void LocalRankEnv() {
  if (std::getenv("CCL_LOCAL_RANK") != nullptr) return;
  for (const auto& p : {std::make_pair("HVD_LOCAL_RANK", "HVD_LOCAL_SIZE"),
                        std::make_pair("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")}) {
    const char* r = std::getenv(p.first);
    const char* n = std::getenv(p.second);
    if (r != nullptr && n != nullptr) {
      setenv("CCL_LOCAL_RANK", r, 0);
      setenv("CCL_LOCAL_SIZE", n, 0);
      return;
    }
  }
}

// Rank 0 publishes the main KVS's address in <store>/kvs_address (written to a temporary
// name, then renamed: readers see all of it or nothing); the others wait for it (bounded).
std::shared_ptr<ccl::kvs> MakeKvs(const std::string& store, double timeout_s) {
  const std::string path = store + "/kvs_address";
  if (g_rank == 0) {
    auto kvs = ccl::create_main_kvs();
    const ccl::kvs::address_type addr = kvs->get_address();
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(addr.data(), static_cast<std::streamsize>(addr.size()));
      if (!f) Fail("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) Fail("cannot rename " + tmp);
    return kvs;
  }
  ccl::kvs::address_type addr{};
  const double deadline = NowUs() + timeout_s * 1e6;
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(addr.data(), static_cast<std::streamsize>(addr.size()))) break;
    if (NowUs() > deadline) Fail("no KVS address from rank 0 in " + path + " (timeout)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ccl::create_kvs(addr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: oneccl-bench coll|latency --store DIR [--system NAME] [--quick] ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  Args a(argc, argv);
  const bool quick = a.Has("--quick");
  const double scale = std::atof(a.Get("--iters-scale", "1").c_str());
  g_system = a.Get("--system", "oneccl");
  FindRank();
  const std::string store = a.Get("--store");
  if (store.empty()) {
    std::fprintf(stderr, "oneccl-bench: --store DIR is required (an empty directory per job)\n");
    return 2;
  }
  LocalRankEnv();
  try {
    ccl::init();
    auto kvs = MakeKvs(store, std::atof(a.Get("--kvs-timeout-s", "120").c_str()));
    ccl::communicator comm = ccl::create_communicator(g_size, g_rank, kvs);
    g_comm = &comm;
    if (comm.size() != g_size || comm.rank() != g_rank) Fail("communicator rank/size mismatch");
    if (mode == "coll") {
      const auto ops = hvdbench::SplitList(a.Get("--ops", "allreduce,allgather,broadcast"));
      const auto variants = hvdbench::SplitList(a.Get("--variants", "inplace"));
      const auto sizes = hvdbench::ParseSizes(a.Get("--sizes", "4:256M"));
      for (const std::string& op : ops) {
        for (size_t bytes : sizes) {
          const auto sch = hvdbench::ScheduleFor(bytes, quick, scale);
          if (op == "allreduce") {
            for (const auto& v : variants) CollAllreduce(v, bytes, sch);
          } else if (op == "allgather") {
            CollAllgather(bytes, sch);
          } else if (op == "broadcast") {
            CollBroadcast(bytes, sch);
          } else {
            Fail("unknown op " + op);
          }
        }
      }
    } else if (mode == "latency") {
      Latency(a, quick);
    } else {
      std::fprintf(stderr, "oneccl-bench: unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    Barrier();
    g_comm = nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oneccl-bench rank %d: %s\n", g_rank, e.what());
    return 5;
  }
  return 0;
}
