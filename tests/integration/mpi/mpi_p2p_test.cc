// The MPI plugin's table, driven directly (no core), under mpirun:
//   mpi_p2p_test PLUGIN.so [app]
// dlopens the plugin, takes hvd_transport_plugin and checks, on every
// rank: the table and the info init writes; point-to-point to every peer at
// once (sizes 0, 1, 7, 1 MiB + 3; one tag for several messages, whose order
// must hold, and distinct tags; completed by wait and by test + progress),
// byte for byte; every native collective over every dtype and op against
// values computed independently (exact); a receive nobody sends to times out
// within its limit naming the silent rank (transfer and peer limits); abort
// from another thread ends a blocked wait and a blocked collective within a
// second. The plugin initialises MPI itself and must finalise it cleanly, or
// mpirun fails the run. With "app" the test initialises MPI instead (at
// MPI_THREAD_SERIALIZED, so the plugin serialises its calls) and hands the
// plugin a sub-communicator whose ranks are the world's reversed (the mpi_comm option).
// Every rank prints "rank R: N passed, F failed". Every wait is bounded.
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/kernels.h"
#include "hvd_transport.h"
#include "reference.h"

namespace {

using Clock = std::chrono::steady_clock;
using hvd::test::Expected;
using hvd::test::Load;
using hvd::test::Store;
using hvd::test::Value;

const hvd_transport_t* T = nullptr;
int rank_ = -1, size_ = 0;
int passed = 0, failed = 0;
std::atomic<int> kv_calls{0};
MPI_Comm app_comm = MPI_COMM_NULL;  // "app": the communicator handed to the plugin

#define CHECK(cond, ...)                                                           \
  do {                                                                             \
    if (cond) {                                                                    \
      ++passed;                                                                    \
    } else {                                                                       \
      ++failed;                                                                    \
      std::fprintf(stderr, "rank %d: FAIL line %d: %s: ", rank_, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, "\n");                                                  \
    }                                                                              \
  } while (0)

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The plugin must not need the core's store when MPI forms the job.
int KvSet(void*, const char*, const void*, size_t) { return ++kv_calls, HVD_ERR_UNSUPPORTED; }
int KvGet(void*, const char*, void**, size_t*, double) { return ++kv_calls, HVD_ERR_UNSUPPORTED; }
void KvFree(void* p) { std::free(p); }
void Log(void*, int level, const char* msg) {
  if (level <= HVD_LOG_WARNING)
    std::fprintf(stderr, "rank %d: plugin log %d: %s\n", rank_, level, msg);
}

void* Init(hvd_transport_info_t* info, double timeout_s) {
  hvd_transport_env_t env{};
  env.struct_size = sizeof(env);
  env.rank = rank_;
  env.size = size_;
  env.local_rank = rank_;
  env.local_size = size_;
  env.cross_size = 1;
  env.kv_set = &KvSet;
  env.kv_get = &KvGet;
  env.kv_free = &KvFree;
  env.log = &Log;
  env.reduce = &hvd::hvd_reduce_kernel;
  env.timeout_s = timeout_s;
  env.start_timeout_s = 60;
  hvd_transport_option_t comm_opt = {"mpi_comm", nullptr,
                                     app_comm != MPI_COMM_NULL ? &app_comm : nullptr};
  env.options = &comm_opt;
  env.noptions = 1;
  hvd_transport_info_t local{};
  if (info == nullptr) info = &local;
  *info = hvd_transport_info_t{};
  info->struct_size = sizeof(*info);
  void* comm = nullptr;
  char err[512] = {0};
  const int st = T->init(&env, info, &comm, err, sizeof(err));
  CHECK(st == HVD_OK && comm != nullptr, "init: %d %s", st, err);
  if (comm == nullptr) {
    std::fprintf(stderr, "rank %d: cannot go on without a communicator\n", rank_);
    std::exit(1);
  }
  return comm;
}

hvd_transport_buffer_t Buf(void* data, size_t bytes) {
  return hvd_transport_buffer_t{data, bytes, HVD_MEMORY_HOST, HVD_DEVICE_CPU, nullptr, nullptr};
}

uint8_t Pattern(int src, int dst, uint32_t tag, int idx, size_t j) {
  return static_cast<uint8_t>(src * 131 + dst * 17 + tag * 7 + idx * 29 + j * 31 + (j >> 8));
}

// ---- point-to-point ----------------------------------------------------------

struct Msg {
  int peer;
  uint32_t tag;
  int idx;
  bool recv;
  std::vector<uint8_t> data;
  hvd_transport_request_t* req = nullptr;
};

void TestP2P(void* comm, uint32_t max_tag) {
  const size_t sizes[] = {0, 1, 7, (size_t{1} << 20) + 3};
  std::vector<Msg> msgs;
  // Receives first, then sends, to and from every peer; per peer: the sizes
  // twice under one tag (order must hold), then once each under its own tag.
  for (int pass = 0; pass < 2; ++pass) {
    const bool recv = pass == 0;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      int idx = 0;
      for (int rep = 0; rep < 2; ++rep) {
        for (size_t s : sizes)
          msgs.push_back({p, 5, idx++, recv, std::vector<uint8_t>(s), nullptr});
      }
      uint32_t tag = 100;
      for (size_t s : sizes)
        msgs.push_back({p, tag++, idx++, recv, std::vector<uint8_t>(s), nullptr});
      msgs.push_back({p, max_tag, idx++, recv, std::vector<uint8_t>(13), nullptr});
    }
  }
  for (Msg& m : msgs) {
    const int src = m.recv ? m.peer : rank_, dst = m.recv ? rank_ : m.peer;
    for (size_t j = 0; j < m.data.size(); ++j)
      m.data[j] = m.recv ? 0 : Pattern(src, dst, m.tag, m.idx, j);
    hvd_transport_buffer_t b = Buf(m.data.data(), m.data.size());
    const int st = (m.recv ? T->irecv : T->isend)(comm, m.peer, m.tag, &b, &m.req);
    CHECK(st == HVD_OK && m.req != nullptr, "post %s peer %d tag %u: %d %s",
          m.recv ? "recv" : "send", m.peer, m.tag, st, T->last_error(comm));
  }
  // Half by wait, half by test + progress, each bounded.
  for (size_t i = 0; i < msgs.size(); ++i) {
    Msg& m = msgs[i];
    if (m.req == nullptr) continue;
    int st;
    if (i % 2 == 0) {
      st = T->wait(comm, m.req, 30);
    } else {
      const auto t0 = Clock::now();
      int done = 0;
      st = HVD_OK;
      while (st == HVD_OK && !done && Since(t0) < 30) {
        st = T->test(comm, m.req, &done);
        if (st == HVD_OK && !done) T->progress(comm);
      }
      if (!done) st = T->wait(comm, m.req, 1);  // releases it
    }
    CHECK(st == HVD_OK, "complete %s peer %d tag %u idx %d: %d %s", m.recv ? "recv" : "send",
          m.peer, m.tag, m.idx, st, T->last_error(comm));
    if (!m.recv) continue;
    size_t bad = 0;
    for (size_t j = 0; j < m.data.size(); ++j)
      bad += m.data[j] != Pattern(m.peer, rank_, m.tag, m.idx, j);
    CHECK(bad == 0, "recv from %d tag %u idx %d (%zu B): %zu bytes differ", m.peer, m.tag, m.idx,
          m.data.size(), bad);
  }
  // Bad arguments fail without breaking the communicator.
  uint8_t x = 0;
  hvd_transport_buffer_t b = Buf(&x, 1);
  hvd_transport_request_t* r = nullptr;
  CHECK(T->isend(comm, rank_, 1, &b, &r) == HVD_ERR_INVALID_ARGUMENT && r == nullptr,
        "send to self");
  CHECK(T->irecv(comm, size_, 1, &b, &r) == HVD_ERR_INVALID_ARGUMENT, "peer out of range");
  if (max_tag < UINT32_MAX)
    CHECK(T->isend(comm, (rank_ + 1) % size_, max_tag + 1, &b, &r) == HVD_ERR_INVALID_ARGUMENT,
          "tag");
  CHECK(T->async_error(comm) == HVD_OK, "async_error after bad arguments");
}

// ---- native collectives ------------------------------------------------------

const hvd_dtype_t kDtypes[] = {HVD_UINT8,   HVD_INT8,    HVD_UINT16,  HVD_INT16,
                               HVD_INT32,   HVD_INT64,   HVD_FLOAT16, HVD_BFLOAT16,
                               HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL};
const hvd_reduce_op_t kOps[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT};

std::vector<uint8_t> Inputs(hvd_dtype_t d, hvd_reduce_op_t op, int r, size_t n) {
  std::vector<uint8_t> v(n * hvd::DtypeSize(d) + 1);
  for (size_t i = 0; i < n; ++i) Store(d, v.data(), i, Value(d, op, r, i));
  return v;
}

void TestNatives(void* comm) {
  for (hvd_dtype_t d : kDtypes) {
    for (hvd_reduce_op_t op : kOps) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{4099}}) {
        std::vector<uint8_t> v = Inputs(d, op, rank_, n);
        hvd_transport_buffer_t b = Buf(v.data(), n * hvd::DtypeSize(d));
        const int st = T->allreduce(comm, &b, n, d, op);
        CHECK(st == HVD_OK, "allreduce dtype %d op %d n %zu: %d %s", d, op, n, st,
              T->last_error(comm));
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) bad += Load(d, v.data(), i) != Expected(d, op, size_, i);
        CHECK(bad == 0, "allreduce dtype %d op %d n %zu: %zu wrong", d, op, n, bad);
      }
      // Reducescatter: rank r's block holds r + 2 elements (rank 2's: none).
      std::vector<size_t> counts(size_);
      size_t total = 0, mine = 0;
      for (int r = 0; r < size_; ++r) {
        counts[r] = r == 2 ? 0 : r + 2;
        if (r == rank_) mine = total;
        total += counts[r];
      }
      std::vector<uint8_t> v = Inputs(d, op, rank_, total);
      hvd_transport_buffer_t b = Buf(v.data(), total * hvd::DtypeSize(d));
      const int st = T->reducescatter(comm, &b, counts.data(), d, op);
      CHECK(st == HVD_OK, "reducescatter dtype %d op %d: %d %s", d, op, st, T->last_error(comm));
      size_t bad = 0;
      for (size_t i = mine; i < mine + counts[rank_]; ++i)
        bad += Load(d, v.data(), i) != Expected(d, op, size_, i);
      CHECK(bad == 0, "reducescatter dtype %d op %d: %zu wrong", d, op, bad);
    }
  }
  // Allgatherv: rank r gives r * 5 + 3 bytes (rank 2: none); from a separate
  // buffer, and in place.
  for (int in_place = 0; in_place < 2; ++in_place) {
    std::vector<size_t> bytes(size_);
    size_t total = 0, mine = 0;
    for (int r = 0; r < size_; ++r) {
      bytes[r] = r == 2 ? 0 : r * 5 + 3 + (size_t{1} << 16) * in_place;
      if (r == rank_) mine = total;
      total += bytes[r];
    }
    std::vector<uint8_t> out(total, 0), own(bytes[rank_]);
    for (size_t j = 0; j < own.size(); ++j) own[j] = Pattern(rank_, 0, 1, in_place, j);
    if (in_place) std::memcpy(out.data() + mine, own.data(), own.size());
    hvd_transport_buffer_t s = Buf(in_place ? out.data() + mine : own.data(), own.size()),
                           rv = Buf(out.data(), total);
    const int st = T->allgatherv(comm, &s, &rv, bytes.data());
    CHECK(st == HVD_OK, "allgatherv: %d %s", st, T->last_error(comm));
    size_t bad = 0, off = 0;
    for (int r = 0; r < size_; ++r) {
      for (size_t j = 0; j < bytes[r]; ++j) bad += out[off + j] != Pattern(r, 0, 1, in_place, j);
      off += bytes[r];
    }
    CHECK(bad == 0, "allgatherv in_place %d: %zu bytes wrong", in_place, bad);
  }
  // Broadcast from every root.
  for (int root = 0; root < size_; ++root) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, (size_t{1} << 20) + 3}) {
      std::vector<uint8_t> v(n);
      for (size_t j = 0; j < n; ++j) v[j] = rank_ == root ? Pattern(root, 0, 2, 0, j) : 0;
      hvd_transport_buffer_t b = Buf(v.data(), n);
      const int st = T->broadcast(comm, &b, root);
      CHECK(st == HVD_OK, "broadcast root %d n %zu: %d %s", root, n, st, T->last_error(comm));
      size_t bad = 0;
      for (size_t j = 0; j < n; ++j) bad += v[j] != Pattern(root, 0, 2, 0, j);
      CHECK(bad == 0, "broadcast root %d n %zu: %zu bytes wrong", root, n, bad);
    }
  }
  // Alltoallv: src sends (src + dst) % 3 * 1000 + dst + 1 bytes to dst.
  const auto len = [](int src, int dst) {
    return static_cast<size_t>((src + dst) % 3 * 1000 + dst + 1);
  };
  std::vector<size_t> sb(size_), rb(size_);
  size_t stotal = 0, rtotal = 0;
  for (int p = 0; p < size_; ++p) {
    stotal += sb[p] = len(rank_, p);
    rtotal += rb[p] = len(p, rank_);
  }
  std::vector<uint8_t> send(stotal), recv(rtotal, 0);
  for (int p = 0, off = 0; p < size_; off += static_cast<int>(sb[p]), ++p) {
    for (size_t j = 0; j < sb[p]; ++j) send[off + j] = Pattern(rank_, p, 3, 0, j);
  }
  hvd_transport_buffer_t s = Buf(send.data(), stotal), rv = Buf(recv.data(), rtotal);
  int st = T->alltoallv(comm, &s, sb.data(), &rv, rb.data());
  CHECK(st == HVD_OK, "alltoallv: %d %s", st, T->last_error(comm));
  size_t bad = 0;
  for (int p = 0, off = 0; p < size_; off += static_cast<int>(rb[p]), ++p) {
    for (size_t j = 0; j < rb[p]; ++j) bad += recv[off + j] != Pattern(p, rank_, 3, 0, j);
  }
  CHECK(bad == 0, "alltoallv: %zu bytes wrong", bad);
  st = T->barrier(comm);
  CHECK(st == HVD_OK, "barrier: %d %s", st, T->last_error(comm));
  // Bad arguments.
  uint8_t x = 0;
  hvd_transport_buffer_t b = Buf(&x, 1);
  CHECK(T->allreduce(comm, &b, 1, HVD_UINT8, HVD_AVERAGE) == HVD_ERR_INVALID_ARGUMENT,
        "AVERAGE is the core's");
  CHECK(T->broadcast(comm, &b, size_) == HVD_ERR_INVALID_ARGUMENT, "root out of range");
}

// ---- faults ------------------------------------------------------------------

std::string Host() {
  char h[256] = {0};
  gethostname(h, sizeof(h) - 1);
  return h;
}

// Rank 0 receives from rank `from`, which never sends: the wait times out.
void TestTimeout(bool peer_kind) {
  void* comm = Init(nullptr, 30);
  const int from = peer_kind ? size_ - 1 : 1;
  if (rank_ == 0) {
    const double limit = peer_kind ? 1.5 : 2;
    if (peer_kind)
      CHECK(T->set_timeout(comm, limit, HVD_TRANSPORT_LIMIT_PEER) == HVD_OK, "set_timeout");
    uint8_t x[4];
    hvd_transport_buffer_t b = Buf(x, sizeof(x));
    hvd_transport_request_t* r = nullptr;
    CHECK(T->irecv(comm, from, 9, &b, &r) == HVD_OK, "irecv");
    const auto t0 = Clock::now();
    const int st = T->wait(comm, r, peer_kind ? -1 : limit);
    const double took = Since(t0);
    const std::string err = T->last_error(comm);
    const std::string who = "rank " + std::to_string(from) + " (host " + Host() + ")";
    CHECK(st == HVD_ERR_TIMEOUT, "wait returned %d: %s", st, err.c_str());
    CHECK(took >= limit - 0.05 && took < limit + 1, "timed out after %.3f s, limit %g", took,
          limit);
    const std::string me = "mpi: rank 0 (host " + Host() + "): ";
    const std::string want =
        peer_kind ? me + who +
                        " has not answered for 1.5 s (receive, tag 9, 4 bytes) (stopped or "
                        "cut off?; peer timeout)"
                  : me + "timed out after 2 s waiting for " + who +
                        " (receive, tag 9, 4 bytes; transfer timeout)";
    CHECK(err == want, "last_error '%s' lacks '%s'", err.c_str(), want.c_str());
    CHECK(T->async_error(comm) == HVD_ERR_TIMEOUT, "async_error %d", T->async_error(comm));
    CHECK(T->barrier(comm) == HVD_ERR_TIMEOUT, "broken communicator still used");
  }
  T->finalize(comm);  // the cancelled receive leaves nothing pending
}

// Rank 0 blocks (in a receive nobody sends to, then in an allreduce the
// others join only later); another thread aborts after 300 ms.
void TestAbort(void* world) {
  for (int coll = 0; coll < 2; ++coll) {
    void* comm = Init(nullptr, 30);
    std::vector<int32_t> v(1000, rank_ + 1);
    hvd_transport_buffer_t b = Buf(v.data(), v.size() * 4);
    if (rank_ == 0) {
      std::atomic<bool> aborted{false};
      Clock::time_point abort_at;
      std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        abort_at = Clock::now();
        aborted = true;
        T->abort(comm, HVD_ERR_ABORTED, "test abort");
      });
      int st;
      if (coll) {
        st = T->allreduce(comm, &b, v.size(), HVD_INT32, HVD_SUM);
      } else {
        uint8_t x[4];
        hvd_transport_buffer_t rb = Buf(x, sizeof(x));
        hvd_transport_request_t* r = nullptr;
        CHECK(T->irecv(comm, 1, 11, &rb, &r) == HVD_OK, "irecv");
        st = T->wait(comm, r, 30);
      }
      const auto returned = Clock::now();
      t.join();
      CHECK(aborted && std::chrono::duration<double>(returned - abort_at).count() < 1.0,
            "returned %.3f s after the abort",
            std::chrono::duration<double>(returned - abort_at).count());
      CHECK(st == HVD_ERR_ABORTED, "coll %d: status %d", coll, st);
      CHECK(std::string(T->last_error(comm)).find("test abort") != std::string::npos,
            "last_error %s", T->last_error(comm));
      CHECK(T->async_error(comm) == HVD_ERR_ABORTED, "async_error");
      CHECK(T->abort(comm, HVD_ERR_TRANSPORT, "again") == HVD_OK &&
                T->barrier(comm) == HVD_ERR_ABORTED,
            "idempotent");
    }
    // The others join the aborted allreduce late; rank 0's request completes
    // in the background (its buffer stays alive until finalize).
    CHECK(T->barrier(world) == HVD_OK, "barrier");
    if (coll && rank_ != 0) {
      const int st = T->allreduce(comm, &b, v.size(), HVD_INT32, HVD_SUM);
      CHECK(st == HVD_OK && v[999] == size_ * (size_ + 1) / 2, "late allreduce %d: %d", st, v[999]);
    }
    CHECK(T->barrier(world) == HVD_OK, "barrier");
    T->finalize(comm);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (argc < 2 || r == nullptr || n == nullptr) {
    std::fprintf(stderr, "usage: mpirun -np N mpi_p2p_test PLUGIN.so (Open MPI)\n");
    return 2;
  }
  rank_ = std::atoi(r);
  size_ = std::atoi(n);
  const bool app = argc > 2 && std::strcmp(argv[2], "app") == 0;
  if (app) {
    int level = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &level);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size_ - 1 - rank_, &app_comm);
    MPI_Comm_rank(app_comm, &rank_);
    CHECK(level == MPI_THREAD_SERIALIZED && rank_ == size_ - 1 - std::atoi(r), "level %d", level);
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  auto fn =
      lib != nullptr
          ? reinterpret_cast<hvd_transport_plugin_fn>(dlsym(lib, HVD_TRANSPORT_PLUGIN_SYMBOL))
          : nullptr;
  T = fn != nullptr ? fn() : nullptr;
  if (T == nullptr || size_ < 2) {
    std::fprintf(stderr, "rank %d: no table in %s (%s) or size %d < 2\n", rank_, argv[1],
                 dlerror(), size_);
    return 1;
  }
  const uint64_t caps = HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST |
                        HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
                        HVD_TRANSPORT_CAP_ANY_THREAD;
  CHECK(T->abi_version == HVD_TRANSPORT_ABI && T->struct_size == sizeof(hvd_transport_t) &&
            std::strcmp(T->name, "mpi") == 0 && T->caps == caps,
        "table header");
  CHECK(T->isend && T->irecv && T->wait && T->test && T->progress && T->allreduce &&
            T->allgatherv && T->broadcast && T->alltoallv && T->reducescatter && T->barrier &&
            T->abort && T->async_error && T->set_timeout,
        "entries");

  hvd_transport_info_t info{};
  void* world = Init(&info, 30);
  CHECK(info.max_tag >= 32767, "max_tag %u", info.max_tag);
  const int level = app ? 2 : 3;  // hvd's numbering: serialized, multiple
  CHECK(info.mpi_thread_level == level, "thread level %d", info.mpi_thread_level);
  CHECK(info.native_max_bytes[HVD_TRANSPORT_BARRIER] == SIZE_MAX, "barrier limit");
  if (rank_ == 0) {
    std::printf("native_max_bytes at %d ranks:", size_);
    for (size_t v : info.native_max_bytes) std::printf(" %zu", v);
    std::printf("\n");
  }
  TestP2P(world, info.max_tag);
  TestNatives(world);
  TestTimeout(false);
  TestTimeout(true);
  CHECK(T->barrier(world) == HVD_OK, "barrier after the timeouts: %s", T->last_error(world));
  TestAbort(world);
  TestP2P(world, info.max_tag);  // the world communicator is untouched by the others' faults
  CHECK(kv_calls == 0, "the store was used %d times", kv_calls.load());
  T->finalize(world);
  if (app) {
    int finalized = 1;
    MPI_Finalized(&finalized);
    CHECK(!finalized, "the plugin finalised the application's MPI");
    MPI_Comm_free(&app_comm);
    MPI_Finalize();
  } else {
    // The plugin initialised MPI, and leaves it unfinalised once one of its
    // communicators broke on a timeout (a peer may be gone for good, and
    // MPI_Finalize would wait for it): these peers are all alive, so the
    // test finalises.
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  std::printf("rank %d: %d passed, %d failed\n", rank_, passed, failed);
  return failed == 0 ? 0 : 1;
}
