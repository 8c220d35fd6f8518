// A device-only transport for tests on hosts without a GPU, in the NCCL
// plugin's place: a table with HVD_TRANSPORT_CAP_CUDA_MEMORY, no
// point-to-point, and native collectives over the fake CUDA runtime's
// "device memory" (host memory it remembers), among ranks that are threads
// of one process. Built as libhvd_transport_fakedev.so.
//
//  - Every buffer must be CUDA memory (as NCCL wants): host memory is
//    refused, so a core that sent its negotiation or host tensors here fails.
//  - Not stream-ordered: a call first synchronizes the buffer's stream (the
//    work the core queued before it), then reduces, and returns complete.
//  - The ranks meet through the store: rank 0 publishes its group's
//    address (one process), the others read it.
//  - FAKE_DEV_AVERAGE=1 declares HVD_TRANSPORT_CAP_AVERAGE (the sum divided
//    by the size here, in the element type).
//  - FAKE_DEV_REDUCE_DTYPES=mask declares the dtypes it reduces (the
//    table's reduce_dtypes) and refuses reductions of the others.
//  - FAKE_DEV_REFUSE_SIZE=n fails init of a communicator of n ranks (a
//    process set's, say).
//  - fake_dev_stats() says what the core asked for.
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/kernels.h"
#include "hvd_transport.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
typedef struct fake_dev_stats {
  long allreduces;
  long broadcasts;
  long others;      // barrier: the core should not call it (a host tensor's)
  long host_refused;
  long last_count;  // elements of the last allreduce
  int last_op;
  int last_dtype;
  long elements;    // of every allreduce
  long allgathers;
  long alltoalls;
  long reducescatters;
  int last_rs_op;   // the op of the last reducescatter
  long dtype_refused;  // reductions of a dtype outside FAKE_DEV_REDUCE_DTYPES
} fake_dev_stats_t;
}

namespace {

std::mutex g_stats_mu;
fake_dev_stats_t g_stats;

using StreamSync = int (*)(void*);

StreamSync Sync() {
  static StreamSync fn = [] {
    const char* lib = std::getenv("HVD_CUDA_RUNTIME");
    void* dl = lib != nullptr ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : nullptr;
    return dl != nullptr ? reinterpret_cast<StreamSync>(dlsym(dl, "cudaStreamSynchronize")) : nullptr;
  }();
  return fn;
}

struct Group {
  explicit Group(int n)
      : size(n), bufs(static_cast<size_t>(n), nullptr), sizes(static_cast<size_t>(n), nullptr) {}
  std::mutex mu;
  std::condition_variable cv;
  int size;
  int refs = 0;
  int arrived = 0;
  unsigned long gen = 0;
  bool aborted = false;
  std::vector<void*> bufs;
  std::vector<const size_t*> sizes;  // a rank's byte counts (alltoallv's send_bytes)
  // Meets every rank; false on timeout or abort.
  bool Meet(std::unique_lock<std::mutex>& lock, double timeout_s) {
    const unsigned long g = gen;
    if (++arrived == size) {
      arrived = 0;
      ++gen;
      cv.notify_all();
      return !aborted;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    const bool ok = cv.wait_until(lock, until, [&] { return gen != g || aborted; });
    return ok && !aborted;
  }
};

struct Comm {
  Group* group = nullptr;
  int rank = 0;
  double timeout_s = 30;
  std::string error;
};

int Fail(Comm* c, int code, const std::string& what) {
  c->error = "fakedev: rank " + std::to_string(c->rank) + ": " + what;
  return code;
}

int CheckDevice(Comm* c, const hvd_transport_buffer_t* b, const char* what) {
  if (b->bytes > 0 && b->memory_type != HVD_MEMORY_CUDA) {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    ++g_stats.host_refused;
    return Fail(c, HVD_ERR_UNSUPPORTED, std::string(what) + ": host memory (device memory only)");
  }
  if (b->bytes > 0 && Sync() != nullptr) Sync()(b->stream);
  return HVD_OK;
}

int CheckReduces(Comm* c, hvd_dtype_t dtype, const char* what) {
  const char* dts = std::getenv("FAKE_DEV_REDUCE_DTYPES");
  if (dts == nullptr) return HVD_OK;
  const uint64_t mask = std::strtoull(dts, nullptr, 0);
  if (mask == 0 || ((mask >> dtype) & 1) != 0) return HVD_OK;
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    ++g_stats.dtype_refused;
  }
  return Fail(c, HVD_ERR_UNSUPPORTED, std::string(what) + ": dtype " + std::to_string(dtype) + " is not reduced here");
}

int Init(const hvd_transport_env_t* env, hvd_transport_info_t* info, void** out, char* err,
         size_t err_len) {
  (void)info;
  *out = nullptr;
  auto fail = [&](const std::string& m) {
    std::snprintf(err, err_len, "fakedev: rank %d: %s", env->rank, m.c_str());
    return HVD_ERR_TRANSPORT;
  };
  const char* refuse = std::getenv("FAKE_DEV_REFUSE_SIZE");
  if (refuse != nullptr && std::atoi(refuse) == env->size) {
    return fail("refusing a communicator of " + std::to_string(env->size) +
                " ranks (FAKE_DEV_REFUSE_SIZE)");
  }
  Group* g = nullptr;
  if (env->size == 1) {
    g = new Group(1);
  } else {
    if (env->kv_set == nullptr || env->kv_get == nullptr) return fail("no store");
    if (env->rank == 0) {
      g = new Group(env->size);
      if (env->kv_set(env->kv, "fakedev/group", &g, sizeof(g)) != HVD_OK) return fail("kv_set");
    } else {
      void* v = nullptr;
      size_t len = 0;
      if (env->kv_get(env->kv, "fakedev/group", &v, &len, env->start_timeout_s > 0 ? env->start_timeout_s : 30) != HVD_OK ||
          len != sizeof(g)) {
        return fail("rank 0's group never appeared");
      }
      std::memcpy(&g, v, sizeof(g));
      env->kv_free(v);
    }
  }
  {
    std::lock_guard<std::mutex> lock(g->mu);
    ++g->refs;
  }
  Comm* c = new Comm();
  c->group = g;
  c->rank = env->rank;
  if (env->timeout_s > 0) c->timeout_s = env->timeout_s;
  *out = c;
  return HVD_OK;
}

void Finalize(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  Group* g = c->group;
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    last = --g->refs == 0;
  }
  if (last) delete g;
  delete c;
}

const char* LastError(void* comm) { return static_cast<Comm*>(comm)->error.c_str(); }

int Allreduce(void* comm, const hvd_transport_buffer_t* buf, size_t count, hvd_dtype_t dtype,
              hvd_reduce_op_t op) {
  Comm* c = static_cast<Comm*>(comm);
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    ++g_stats.allreduces;
    g_stats.last_count = static_cast<long>(count);
    g_stats.last_op = op;
    g_stats.last_dtype = dtype;
    g_stats.elements += static_cast<long>(count);
  }
  if (int rc = CheckDevice(c, buf, "allreduce")) return rc;
  if (int rc = CheckReduces(c, dtype, "allreduce")) return rc;
  const bool average = op == HVD_AVERAGE;
  if (average && !hvd::IsFloatingDtype(dtype)) return Fail(c, HVD_ERR_INVALID_ARGUMENT, "AVERAGE of an integer dtype");
  const size_t bytes = count * hvd::DtypeSize(dtype);
  Group* g = c->group;
  std::vector<unsigned char> mine(bytes);
  std::unique_lock<std::mutex> lock(g->mu);
  g->bufs[static_cast<size_t>(c->rank)] = buf->data;
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "allreduce: a rank did not come");
  // Every rank reads every buffer in rank order (the same bits everywhere),
  // then, after everyone has read, writes its own.
  if (bytes > 0) std::memcpy(mine.data(), g->bufs[0], bytes);
  for (int r = 1; r < g->size; ++r) {
    hvd::hvd_reduce_kernel(mine.data(), g->bufs[static_cast<size_t>(r)], count, dtype,
                      average ? HVD_SUM : op);
  }
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "allreduce: a rank did not finish");
  lock.unlock();
  if (average) hvd::ScaleInPlace(mine.data(), count, dtype, 1.0 / g->size);
  if (bytes > 0) std::memcpy(buf->data, mine.data(), bytes);
  return HVD_OK;
}

int Broadcast(void* comm, const hvd_transport_buffer_t* buf, int32_t root) {
  Comm* c = static_cast<Comm*>(comm);
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    ++g_stats.broadcasts;
  }
  if (int rc = CheckDevice(c, buf, "broadcast")) return rc;
  Group* g = c->group;
  std::vector<unsigned char> copy(buf->bytes);
  std::unique_lock<std::mutex> lock(g->mu);
  g->bufs[static_cast<size_t>(c->rank)] = buf->data;
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "broadcast: a rank did not come");
  if (buf->bytes > 0) std::memcpy(copy.data(), g->bufs[static_cast<size_t>(root)], buf->bytes);
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "broadcast: a rank did not finish");
  lock.unlock();
  if (c->rank != root && buf->bytes > 0) std::memcpy(buf->data, copy.data(), buf->bytes);
  return HVD_OK;
}

int Other(void* comm, const char* what) {
  Comm* c = static_cast<Comm*>(comm);
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++g_stats.others;
  return Fail(c, HVD_ERR_UNSUPPORTED, std::string(what) + " is not offered by this fake");
}

void Count(long fake_dev_stats_t::*field) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++(g_stats.*field);
}

// Every rank publishes its buffer (and counts), meets, reads what it needs
// from the others' into a private copy, meets again (so no buffer changes
// while another rank reads it), then writes its own.
int Allgatherv(void* comm, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
               const size_t* recv_bytes) {
  Comm* c = static_cast<Comm*>(comm);
  Count(&fake_dev_stats_t::allgathers);
  if (int rc = CheckDevice(c, send, "allgatherv send")) return rc;
  if (int rc = CheckDevice(c, recv, "allgatherv receive")) return rc;
  Group* g = c->group;
  size_t total = 0;
  for (int r = 0; r < g->size; ++r) total += recv_bytes[r];
  if (recv->bytes < total) return Fail(c, HVD_ERR_INVALID_ARGUMENT, "allgatherv: receive buffer too small");
  if (send->bytes != recv_bytes[c->rank]) return Fail(c, HVD_ERR_INVALID_ARGUMENT, "allgatherv: send bytes");
  std::vector<unsigned char> out(total);
  std::unique_lock<std::mutex> lock(g->mu);
  g->bufs[static_cast<size_t>(c->rank)] = send->data;
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "allgatherv: a rank did not come");
  size_t off = 0;
  for (int r = 0; r < g->size; off += recv_bytes[r], ++r) {
    if (recv_bytes[r] > 0) std::memcpy(out.data() + off, g->bufs[static_cast<size_t>(r)], recv_bytes[r]);
  }
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "allgatherv: a rank did not finish");
  lock.unlock();
  if (total > 0) std::memcpy(recv->data, out.data(), total);
  return HVD_OK;
}

int Alltoallv(void* comm, const hvd_transport_buffer_t* send, const size_t* send_bytes,
              const hvd_transport_buffer_t* recv, const size_t* recv_bytes) {
  Comm* c = static_cast<Comm*>(comm);
  Count(&fake_dev_stats_t::alltoalls);
  if (int rc = CheckDevice(c, send, "alltoallv send")) return rc;
  if (int rc = CheckDevice(c, recv, "alltoallv receive")) return rc;
  Group* g = c->group;
  size_t stotal = 0, rtotal = 0;
  for (int r = 0; r < g->size; ++r) {
    stotal += send_bytes[r];
    rtotal += recv_bytes[r];
  }
  if (send->bytes < stotal || recv->bytes < rtotal)
    return Fail(c, HVD_ERR_INVALID_ARGUMENT, "alltoallv: a buffer is smaller than its counts");
  std::vector<unsigned char> out(rtotal);
  std::unique_lock<std::mutex> lock(g->mu);
  g->bufs[static_cast<size_t>(c->rank)] = send->data;
  g->sizes[static_cast<size_t>(c->rank)] = send_bytes;
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "alltoallv: a rank did not come");
  size_t roff = 0;
  for (int p = 0; p < g->size; roff += recv_bytes[p], ++p) {
    const size_t* theirs = g->sizes[static_cast<size_t>(p)];
    if (theirs[c->rank] != recv_bytes[p]) {
      lock.unlock();
      return Fail(c, HVD_ERR_MISMATCH, "alltoallv: rank " + std::to_string(p) + " sends " +
                                           std::to_string(theirs[c->rank]) + " bytes, " +
                                           std::to_string(recv_bytes[p]) + " expected");
    }
    size_t soff = 0;
    for (int q = 0; q < c->rank; ++q) soff += theirs[q];
    if (recv_bytes[p] > 0) {
      std::memcpy(out.data() + roff, static_cast<const unsigned char*>(g->bufs[static_cast<size_t>(p)]) + soff,
                  recv_bytes[p]);
    }
  }
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "alltoallv: a rank did not finish");
  lock.unlock();
  if (rtotal > 0) std::memcpy(recv->data, out.data(), rtotal);
  return HVD_OK;
}

int Reducescatter(void* comm, const hvd_transport_buffer_t* buf, const size_t* counts,
                  hvd_dtype_t dtype, hvd_reduce_op_t op) {
  Comm* c = static_cast<Comm*>(comm);
  Count(&fake_dev_stats_t::reducescatters);
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    g_stats.last_rs_op = op;
  }
  if (int rc = CheckDevice(c, buf, "reducescatter")) return rc;
  if (int rc = CheckReduces(c, dtype, "reducescatter")) return rc;
  const bool average = op == HVD_AVERAGE;
  if (average && !hvd::IsFloatingDtype(dtype)) return Fail(c, HVD_ERR_INVALID_ARGUMENT, "AVERAGE of an integer dtype");
  Group* g = c->group;
  const size_t es = hvd::DtypeSize(dtype);
  size_t first = 0, total = 0;
  for (int r = 0; r < g->size; ++r) {
    if (r < c->rank) first += counts[r];
    total += counts[r];
  }
  if (buf->bytes < total * es) return Fail(c, HVD_ERR_INVALID_ARGUMENT, "reducescatter: buffer too small");
  const size_t n = counts[c->rank];
  std::vector<unsigned char> mine(n * es);
  std::unique_lock<std::mutex> lock(g->mu);
  g->bufs[static_cast<size_t>(c->rank)] = buf->data;
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "reducescatter: a rank did not come");
  auto block = [&](int r) { return static_cast<const unsigned char*>(g->bufs[static_cast<size_t>(r)]) + first * es; };
  if (n > 0) std::memcpy(mine.data(), block(0), n * es);
  for (int r = 1; r < g->size; ++r) {
    hvd::hvd_reduce_kernel(mine.data(), block(r), n, dtype, average ? HVD_SUM : op);
  }
  if (!g->Meet(lock, c->timeout_s)) return Fail(c, HVD_ERR_TIMEOUT, "reducescatter: a rank did not finish");
  lock.unlock();
  if (average) hvd::ScaleInPlace(mine.data(), n, dtype, 1.0 / g->size);
  if (n > 0) std::memcpy(static_cast<unsigned char*>(buf->data) + first * es, mine.data(), n * es);
  return HVD_OK;
}
int Barrier(void* comm) { return Other(comm, "barrier"); }

int Abort(void* comm, int status, const char* reason) {
  Comm* c = static_cast<Comm*>(comm);
  Group* g = c->group;
  std::lock_guard<std::mutex> lock(g->mu);
  g->aborted = true;
  g->cv.notify_all();
  c->error = std::string("fakedev: aborted: ") + (reason != nullptr ? reason : "");
  (void)status;
  return HVD_OK;
}
int AsyncError(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  std::lock_guard<std::mutex> lock(c->group->mu);
  return c->group->aborted ? HVD_ERR_ABORTED : HVD_OK;
}

hvd_transport_t MakeTable() {
  hvd_transport_t t{};
  t.abi_version = HVD_TRANSPORT_ABI;
  t.struct_size = sizeof(t);
  t.name = "fakedev";
  t.caps = HVD_TRANSPORT_CAP_CUDA_MEMORY | HVD_TRANSPORT_CAP_ABORT;
  // FAKE_DEV_REDUCE_DTYPES: a mask of the dtypes reduced here (0x...); the
  // others are refused (the core should stage them).
  const char* dts = std::getenv("FAKE_DEV_REDUCE_DTYPES");
  if (dts != nullptr) t.reduce_dtypes = std::strtoull(dts, nullptr, 0);
  const char* avg = std::getenv("FAKE_DEV_AVERAGE");
  if (avg != nullptr && std::strcmp(avg, "1") == 0) t.caps |= HVD_TRANSPORT_CAP_AVERAGE;
  t.init = Init;
  t.finalize = Finalize;
  t.last_error = LastError;
  t.allreduce = Allreduce;
  t.allgatherv = Allgatherv;
  t.broadcast = Broadcast;
  t.alltoallv = Alltoallv;
  t.reducescatter = Reducescatter;
  t.barrier = Barrier;
  t.abort = Abort;
  t.async_error = AsyncError;
  return t;
}

}  // namespace

FAKE_EXPORT const hvd_transport_t* hvd_transport_plugin(void) {
  // FAKE_DEV_AVERAGE is read at each call; the core copies the table at once.
  static thread_local hvd_transport_t table;
  table = MakeTable();
  return &table;
}
FAKE_EXPORT void fake_dev_stats(fake_dev_stats_t* out) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  *out = g_stats;
}
FAKE_EXPORT void fake_dev_reset(void) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  g_stats = fake_dev_stats_t{};
}
