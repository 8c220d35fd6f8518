#include "transport/transport.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <atomic>
#include <mutex>
#include <new>
#include <set>
#include <sstream>

#include "common/kernels.h"
#include "rendezvous/store.h"

extern "C" const hvd_transport_t* hvd_local_transport_table(void);
#ifdef HVD_BUILTIN_GLOO
extern "C" const hvd_transport_t* hvd_gloo_transport_table(void);
#endif

namespace hvd {

namespace {

// The tables built into libhvd: "local", and gloo where the static library
// compiled it in.
const hvd_transport_t* BuiltinTable(const std::string& name) {
  if (name == "local") return hvd_local_transport_table();
#ifdef HVD_BUILTIN_GLOO
  if (name == "gloo") return hvd_gloo_transport_table();
#endif
  return nullptr;
}

// The folder this library (or, statically linked, the program) lives in.
std::string SelfDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&BuiltinTable), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<std::string> SearchDirs(const std::string& search_path) {
  std::vector<std::string> dirs;
  std::stringstream ss(search_path);
  std::string d;
  while (std::getline(ss, d, ':')) {
    if (!d.empty()) dirs.push_back(d);
  }
  std::string self = SelfDir();
  if (!self.empty()) dirs.push_back(self);
  return dirs;
}

bool FileExists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

struct Found {
  hvd_transport_t table{};  // zero-extended copy
  void* dl = nullptr;       // null: built in
};

// The table, copied into `out` zero-extended to this core's size (a
// smaller, older struct_size leaves the newer entries NULL). "" if usable,
// else what is wrong with it.
std::string TakeTable(const hvd_transport_t* t, hvd_transport_t* out) {
  if (t == nullptr) return "its table is NULL";
  if (t->abi_version != HVD_TRANSPORT_ABI) {
    return "its table says ABI version " + std::to_string(t->abi_version) + ", not " +
           std::to_string(HVD_TRANSPORT_ABI);
  }
  if (t->struct_size < HVD_TRANSPORT_MIN_SIZE) {
    return "its table's struct_size (" + std::to_string(t->struct_size) + ") is too small";
  }
  *out = hvd_transport_t{};
  std::memcpy(out, t, std::min<size_t>(t->struct_size, sizeof(*out)));
  // A capability whose entries lie beyond an older table's struct_size is
  // one that table cannot offer.
  const struct {
    uint64_t cap;
    size_t end;
  } reach[] = {
      {HVD_TRANSPORT_CAP_P2P, offsetof(hvd_transport_t, wait) + sizeof(void*)},
      {HVD_TRANSPORT_CAP_P2P_TEST, offsetof(hvd_transport_t, progress) + sizeof(void*)},
      {HVD_TRANSPORT_CAP_REGISTER_MEMORY, offsetof(hvd_transport_t, deregister_memory) + sizeof(void*)},
      {HVD_TRANSPORT_CAP_ABORT, offsetof(hvd_transport_t, async_error) + sizeof(void*)},
      {HVD_TRANSPORT_CAP_PEER_TIMEOUT, offsetof(hvd_transport_t, set_timeout) + sizeof(void*)},
  };
  for (const auto& r : reach) {
    if (t->struct_size < r.end) out->caps &= ~r.cap;
  }
  const hvd_transport_t& v = *out;
  if (v.name == nullptr || v.name[0] == '\0') return "the required entry 'name' is NULL or empty";
  struct Need {
    bool needed;
    const void* entry;
    const char* name;
    const char* why = nullptr;
  };
  const bool p2p = (v.caps & HVD_TRANSPORT_CAP_P2P) != 0;
  const Need needs[] = {
      {true, reinterpret_cast<const void*>(v.init), "init"},
      {true, reinterpret_cast<const void*>(v.finalize), "finalize"},
      {true, reinterpret_cast<const void*>(v.last_error), "last_error"},
      {p2p, reinterpret_cast<const void*>(v.isend), "isend", "caps: P2P"},
      {p2p, reinterpret_cast<const void*>(v.irecv), "irecv", "caps: P2P"},
      {p2p, reinterpret_cast<const void*>(v.wait), "wait", "caps: P2P"},
      {(v.caps & HVD_TRANSPORT_CAP_P2P_TEST) != 0, reinterpret_cast<const void*>(v.test), "test", "caps: P2P_TEST"},
      {(v.caps & HVD_TRANSPORT_CAP_P2P_TEST) != 0, reinterpret_cast<const void*>(v.progress), "progress", "caps: P2P_TEST"},
      {(v.caps & HVD_TRANSPORT_CAP_REGISTER_MEMORY) != 0, reinterpret_cast<const void*>(v.register_memory), "register_memory", "caps: REGISTER_MEMORY"},
      {(v.caps & HVD_TRANSPORT_CAP_REGISTER_MEMORY) != 0, reinterpret_cast<const void*>(v.deregister_memory), "deregister_memory", "caps: REGISTER_MEMORY"},
      {(v.caps & HVD_TRANSPORT_CAP_ABORT) != 0, reinterpret_cast<const void*>(v.abort), "abort", "caps: ABORT"},
      {(v.caps & HVD_TRANSPORT_CAP_ABORT) != 0, reinterpret_cast<const void*>(v.async_error), "async_error", "caps: ABORT"},
      {(v.caps & HVD_TRANSPORT_CAP_PEER_TIMEOUT) != 0, reinterpret_cast<const void*>(v.set_timeout), "set_timeout", "caps: PEER_TIMEOUT"},
      // Without point-to-point every collective must be native.
      {!p2p, reinterpret_cast<const void*>(v.allreduce), "allreduce", "no P2P in caps"},
      {!p2p, reinterpret_cast<const void*>(v.allgatherv), "allgatherv", "no P2P in caps"},
      {!p2p, reinterpret_cast<const void*>(v.broadcast), "broadcast", "no P2P in caps"},
      {!p2p, reinterpret_cast<const void*>(v.alltoallv), "alltoallv", "no P2P in caps"},
      {!p2p, reinterpret_cast<const void*>(v.barrier), "barrier", "no P2P in caps"},
  };
  for (const Need& n : needs) {
    if (n.needed && n.entry == nullptr) {
      return std::string("the required entry '") + n.name + "' is NULL" +
             (n.why != nullptr ? std::string(" (") + n.why + ")" : std::string());
    }
  }
  return "";
}

// Loads one candidate file. On failure: the reason (without the path) and
// whether it was a library that loaded but is no usable plugin.
Result<Found> LoadPlugin(const std::string& path, bool* bad_table) {
  *bad_table = false;
  void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* err = dlerror();
    std::string why = err != nullptr ? err : "unknown dlopen error";
    if (why.find("cannot open shared object file") != std::string::npos) {
      why += " (is the library it needs installed?)";
    }
    return Error(HVD_ERR_NOT_FOUND, "cannot load: " + why);
  }
  auto fn = reinterpret_cast<hvd_transport_plugin_fn>(dlsym(dl, HVD_TRANSPORT_PLUGIN_SYMBOL));
  *bad_table = true;
  if (fn == nullptr) {
    dlclose(dl);
    return Error(HVD_ERR_VERSION, std::string("not an hvd transport plugin (no ") +
                                      HVD_TRANSPORT_PLUGIN_SYMBOL + " symbol)");
  }
  Found f;
  const std::string bad = TakeTable(fn(), &f.table);
  if (!bad.empty()) {
    dlclose(dl);
    return Error(HVD_ERR_VERSION,
                 std::string("its ") + HVD_TRANSPORT_PLUGIN_SYMBOL + " table is unusable: " + bad);
  }
  *bad_table = false;
  f.dl = dl;
  return f;
}

// Built-in tables first, then libhvd_transport_<name>.so in each folder in
// turn. A candidate that does not load or is no usable plugin does not end
// the search: the next folder may hold a good one. When none serves, the
// message names every folder tried and what went wrong in each.
Result<Found> Find(const std::string& name, const std::string& search_path) {
  if (const hvd_transport_t* builtin = BuiltinTable(name)) {
    Found f;
    const std::string bad = TakeTable(builtin, &f.table);
    if (!bad.empty()) return Error(HVD_ERR_INTERNAL, "built-in transport '" + name + "': " + bad);
    return f;
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return InvalidArgument("transport name '" + name + "' may hold only letters, digits and _");
    }
  }
  std::string file = "libhvd_transport_" + name + ".so";
  std::vector<std::string> dirs = SearchDirs(search_path);
  std::string looked;   // every folder, comma-separated
  std::string tried;    // every folder with what it held
  bool any_file = false;
  bool bad_table = false;
  for (const std::string& dir : dirs) {
    std::string path = dir + "/" + file;
    looked += (looked.empty() ? "" : ", ") + dir;
    tried += tried.empty() ? "" : "; ";
    if (!FileExists(path)) {
      tried += dir + ": no " + file;
      continue;
    }
    any_file = true;
    bool bad = false;
    auto loaded = LoadPlugin(path, &bad);
    if (loaded.ok()) return std::move(loaded).value();
    bad_table = bad_table || bad;
    tried += path + ": " + loaded.status().message();
  }
  const std::string hint =
      " (set params.transport_path or HVD_TRANSPORT_PATH, or build hvd with that transport)";
  if (!any_file) {
    return Error(HVD_ERR_NOT_FOUND, "transport '" + name + "' is not available: " + file +
                                        " was not found in " +
                                        (looked.empty() ? "(no folders)" : looked) + hint);
  }
  // A file that loads but is no usable plugin is a version problem; one
  // that does not load at all, a missing library.
  return Error(bad_table ? HVD_ERR_VERSION : HVD_ERR_NOT_FOUND,
               "transport '" + name + "' is not available: no folder holds a usable " + file +
                   "; tried " + tried + hint);
}

}  // namespace

const char* PersistentTransportName(const char* name) {
  if (name == nullptr) return nullptr;
  static const char* const kKnown[] = {"local", "gloo", "mpi"};
  for (const char* k : kKnown) {
    if (std::strcmp(k, name) == 0) return k;
  }
  // Never destroyed, so the names stay valid during static destruction too;
  // std::set's nodes never move, so c_str() stays put as the set grows.
  static std::mutex* mu = new std::mutex;
  static std::set<std::string>* names = new std::set<std::string>;
  std::lock_guard<std::mutex> lock(*mu);
  return names->insert(name).first->c_str();
}

// ---- plugin env callbacks ------------------------------------------------

namespace {

// Logs a failed callback; never throws (a message that cannot be built is
// dropped: the status still says what happened).
void LogCallbackFailure(Logger* log, const char* call, const char* key, const char* what) noexcept {
  if (log == nullptr) return;
  try {
    std::string msg = std::string("transport callback ") + call + "('" + (key ? key : "") +
                      "') failed: " + what;
    log->Write(HVD_LOG_ERROR, msg);
  } catch (...) {
    Logger::PluginLog(log, HVD_LOG_ERROR, call);
  }
}

}  // namespace

int PluginKvSet(void* kv, const char* key, const void* value, size_t len) noexcept {
  auto* s = static_cast<PluginKv*>(kv);
  if (s == nullptr || s->client == nullptr || key == nullptr || (value == nullptr && len > 0)) {
    return HVD_ERR_INVALID_ARGUMENT;
  }
  try {
    const auto* p = static_cast<const uint8_t*>(value);
    Status st = s->client->Set(s->prefix + key, rdv::Bytes(p, p + len));
    return st.code();
  } catch (const std::bad_alloc&) {
    LogCallbackFailure(s->log, "kv_set", key, "out of memory");
    return HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    LogCallbackFailure(s->log, "kv_set", key, e.what());
    return HVD_ERR_INTERNAL;
  } catch (...) {
    LogCallbackFailure(s->log, "kv_set", key, "unknown exception");
    return HVD_ERR_INTERNAL;
  }
}

Result<rdv::Bytes> PluginKv::Get(const std::string& key, double timeout_s) const {
  if (abort_key.empty()) return client->Get(key, timeout_s);
  // In slices, looking for the epoch's failure between them.
  constexpr double kSliceS = 0.2;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const double left =
        std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
    auto r = client->Get(key, std::max(0.001, std::min(kSliceS, left)));
    if (r.ok() || r.status().code() != HVD_ERR_TIMEOUT || left <= kSliceS) return r;
    auto failed = client->Check({abort_key});
    if (!failed.ok()) return failed.status();
    if ((*failed)[0]) {
      auto why = client->Get(abort_key, 1.0);
      return Error(HVD_ERR_MEMBERSHIP_CHANGED,
                   "the elastic epoch being formed lost a member: " +
                       (why.ok() ? std::string(why->begin(), why->end()) : std::string("(no reason)")));
    }
  }
}

int PluginKvGet(void* kv, const char* key, void** value, size_t* len, double timeout_s) noexcept {
  auto* s = static_cast<PluginKv*>(kv);
  if (s == nullptr || s->client == nullptr || key == nullptr || value == nullptr ||
      len == nullptr) {
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *value = nullptr;
  *len = 0;
  try {
    auto r = s->Get(s->prefix + key, timeout_s);
    if (!r.ok()) {
      if (r.status().code() == HVD_ERR_MEMBERSHIP_CHANGED && s->log != nullptr) {
        HVD_LOG(*s->log, HVD_LOG_WARNING, r.status().message());
      }
      return r.status().code();
    }
    void* out = std::malloc(r->empty() ? 1 : r->size());
    if (out == nullptr) {
      LogCallbackFailure(s->log, "kv_get", key, "out of memory");
      return HVD_ERR_NO_MEMORY;
    }
    if (!r->empty()) std::memcpy(out, r->data(), r->size());
    *value = out;
    *len = r->size();
    return HVD_OK;
  } catch (const std::bad_alloc&) {
    LogCallbackFailure(s->log, "kv_get", key, "out of memory");
    return HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    LogCallbackFailure(s->log, "kv_get", key, e.what());
    return HVD_ERR_INTERNAL;
  } catch (...) {
    LogCallbackFailure(s->log, "kv_get", key, "unknown exception");
    return HVD_ERR_INTERNAL;
  }
}

void PluginKvFree(void* value) noexcept { std::free(value); }

// ---- Transport -------------------------------------------------------------

// The algorithms' view of a plugin's point-to-point. A failure's
// message is the plugin's (it names the peer), under the collective's name;
// a failed wait goes through LinkFailure, which needs the request's peer
// where this rank has a host segment (the only place it is used): there the
// requests posted and not yet waited for are kept with theirs (a few at a
// time; the loop thread only).
class Transport::PluginLinks : public algo::Links {
 public:
  PluginLinks(Transport* t, int rank, int size) : t_(t), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Isend(int peer, uint32_t tag, const void* data, size_t bytes, algo::Req* req) override {
    const hvd_transport_buffer_t b = t_->Host(data, bytes);
    HVD_CHECK(t_->Check(t_->table_.isend(t_->comm_, peer, tag, &b, req), t_->op_));
    if (t_->host_seg_ != nullptr) open_.emplace_back(*req, peer);
    return Status::Ok();
  }
  Status Irecv(int peer, uint32_t tag, void* data, size_t bytes, algo::Req* req) override {
    const hvd_transport_buffer_t b = t_->Host(data, bytes);
    HVD_CHECK(t_->Check(t_->table_.irecv(t_->comm_, peer, tag, &b, req), t_->op_));
    if (t_->host_seg_ != nullptr) open_.emplace_back(*req, peer);
    return Status::Ok();
  }
  Status Wait(algo::Req req) override {
    int peer = -1;
    for (size_t i = open_.size(); i-- > 0;) {
      if (open_[i].first == req) {
        peer = open_[i].second;
        open_[i] = open_.back();
        open_.pop_back();
        break;
      }
    }
    shm::Segment* host = t_->host_seg_;
    if (host != nullptr) host->NoteWait(peer);
    const int rc = t_->table_.wait(t_->comm_, req, -1.0);
    if (rc == HVD_OK) {
      if (host != nullptr) host->NoteWait(-1);
      return Status::Ok();
    }
    if (host != nullptr) host->NoteGaveUp();
    return t_->LinkFailure(rc, peer);
  }
  size_t segment_bytes() const override {
    return t_->info_.segment_bytes > 0 ? t_->info_.segment_bytes : algo::Links::segment_bytes();
  }

 private:
  Transport* t_;
  int rank_, size_;
  std::vector<std::pair<algo::Req, int>> open_;
};

namespace {

// shm::Setup's allgather of strings, over the transport itself (its
// allgatherv, before the shared-memory path exists): needs no store, so it
// serves MPI too.
class TransportExchange : public shm::Exchange {
 public:
  TransportExchange(Comm* t, int size) : t_(t), size_(size) {}
  int Allgather(const char*, const std::string& mine, std::vector<std::string>* all,
                std::string* err) override {
    std::vector<uint64_t> lens(static_cast<size_t>(size_));
    const uint64_t my_len = mine.size();
    std::vector<size_t> eight(static_cast<size_t>(size_), sizeof(uint64_t));
    Status st = t_->Allgatherv(&my_len, lens.data(), eight.data());
    std::vector<size_t> bytes(lens.begin(), lens.end());
    size_t total = 0;
    for (size_t b : bytes) total += b;
    std::string joined(total, '\0');
    if (st.ok()) st = t_->Allgatherv(mine.data(), &joined[0], bytes.data());
    if (!st.ok()) {
      *err = st.message();
      return st.code();
    }
    all->clear();
    size_t at = 0;
    for (size_t b : bytes) {
      all->push_back(joined.substr(at, b));
      at += b;
    }
    return HVD_OK;
  }

 private:
  Comm* t_;
  int size_;
};

}  // namespace

Status Transport::Check(const std::string& name, const std::string& search_path) {
  auto f = Find(name, search_path);
  if (!f.ok()) return f.status();
  if (f->dl != nullptr) dlclose(f->dl);
  return Status::Ok();
}

Result<uint64_t> Transport::Capabilities(const std::string& name,
                                          const std::string& search_path) {
  auto f = Find(name, search_path);
  if (!f.ok()) return f.status();
  const uint64_t caps = f->table.caps;
  if (f->dl != nullptr) dlclose(f->dl);
  return caps;
}

Result<std::unique_ptr<Transport>> Transport::Open(const std::string& name,
                                                   const std::string& search_path,
                                                   const hvd_transport_env_t& env,
                                                   const TransportOptions& opts, Logger* log) {
  HVD_ASSIGN_OR_RETURN(Found f, Find(name, search_path));
  std::unique_ptr<Transport> t(new Transport());
  t->log_ = log;
  t->dl_ = f.dl;
  t->rank_ = env.rank;
  t->size_ = env.size;
  t->limit_s_ = env.timeout_s;
  t->shm_enabled_ = opts.shm;
  t->shm_switch_ = opts.shm_switch;
  t->ring_spans_ = opts.fusion_in_place;
  t->table_ = f.table;
  t->name_ = PersistentTransportName(f.table.name);
  HVD_CHECK(t->Start(env, opts, log).Wrap("transport '" + name + "' failed to start"));
  return t;
}

Status Transport::Start(const hvd_transport_env_t& env_in, const TransportOptions& opts,
                        Logger* log) {
  const hvd_transport_t& v = table_;
  // The host table, where the caller knows every rank's host name and the
  // env has none.
  hvd_transport_env_t env = env_in;
  std::vector<hvd_transport_host_t> host_table;
  if (env.hosts == nullptr && opts.hosts.size() == static_cast<size_t>(env.size) && env.size > 0) {
    for (const std::string& h : opts.hosts) host_table.push_back({h.c_str(), nullptr});
    env.hosts = host_table.data();
  }
  host_id_ = opts.host_id.empty() ? shm::HostIdentity() : opts.host_id;
  info_ = hvd_transport_info_t{};
  info_.struct_size = sizeof(info_);
  info_.mpi_thread_level = -1;
  info_.rank = info_.size = info_.local_rank = info_.local_size = -1;
  info_.cross_rank = info_.cross_size = -1;
  char err[1024] = {0};
  const int rc = v.init(&env, &info_, &comm_, err, sizeof(err));
  if (rc != HVD_OK || comm_ == nullptr) {
    err[sizeof(err) - 1] = '\0';
    comm_ = nullptr;
    return Error(rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT,
                 err[0] ? std::string(err) : std::string("no reason given"));
  }
  reduce_ = env.reduce != nullptr ? env.reduce : hvd_reduce_kernel;
  const int rank = info_.rank >= 0 ? info_.rank : env.rank;
  const int size = info_.size > 0 ? info_.size : env.size;
  rank_ = rank;
  size_ = size;
  any_thread_ = (v.caps & HVD_TRANSPORT_CAP_ANY_THREAD) != 0;
  cuda_memory_ = (v.caps & HVD_TRANSPORT_CAP_CUDA_MEMORY) != 0;
  device_average_ = (v.caps & HVD_TRANSPORT_CAP_AVERAGE) != 0;
  reduce_dtypes_ = v.reduce_dtypes;  // zero where the plugin's table ends before it
  const struct {
    const char* key;
    int32_t found, given;
  } topo[] = {{"rank", info_.rank, env.rank},
              {"size", info_.size, env.size},
              {"local_rank", info_.local_rank, env.local_rank},
              {"local_size", info_.local_size, env.local_size},
              {"cross_rank", info_.cross_rank, env.cross_rank},
              {"cross_size", info_.cross_size, env.cross_size}};
  for (const auto& k : topo) {
    if (k.found >= 0) facts_.emplace_back(k.key, k.found);
  }
  if (info_.mpi_thread_level >= 0) {
    facts_.emplace_back("mpi_thread_level", info_.mpi_thread_level);
    facts_.emplace_back("mpi_thread_multiple", info_.mpi_thread_level >= 3 ? 1 : 0);
  }
  facts_.emplace_back("abi", HVD_TRANSPORT_ABI);
  if (v.caps & HVD_TRANSPORT_CAP_P2P) links_ = std::make_unique<PluginLinks>(this, rank, size);

  // Forced algorithms must be ones this transport can run.
  const void* natives[HVD_TRANSPORT_COLLECTIVES] = {
      reinterpret_cast<const void*>(v.allreduce), reinterpret_cast<const void*>(v.allgatherv),
      reinterpret_cast<const void*>(v.broadcast), reinterpret_cast<const void*>(v.alltoallv),
      reinterpret_cast<const void*>(v.reducescatter), reinterpret_cast<const void*>(v.barrier)};
  const char* const names[HVD_TRANSPORT_COLLECTIVES] = {
      "HVD_ALGORITHM_ALLREDUCE", "HVD_ALGORITHM_ALLGATHER", "HVD_ALGORITHM_BROADCAST",
      "HVD_ALGORITHM_ALLTOALL", "HVD_ALGORITHM_REDUCESCATTER", "HVD_ALGORITHM_BARRIER"};
  bool want_shm = false;
  for (int c = 0; c < HVD_TRANSPORT_COLLECTIVES; ++c) {
    HVD_ASSIGN_OR_RETURN(forced_[c], algo::ParseAlgorithm(c, names[c], opts.algorithm[c]));
    const algo::Algorithm a = forced_[c];
    if (a == algo::Algorithm::kNative && natives[c] == nullptr) {
      return InvalidArgument(std::string(names[c]) + "=native, but the " + name_ +
                             " transport has no native entry for it");
    }
    if (algo::IsP2pAlgorithm(c, a) && !links_) {
      return InvalidArgument(std::string(names[c]) + "=" + algo::AlgorithmName(a) + ", but the " +
                             name_ + " transport has no point-to-point");
    }
    want_shm = want_shm || a == algo::Algorithm::kShm;
  }

  // A device-only transport (NCCL) refuses host memory, so nothing is
  // exchanged over it: the host names come from the host transport beside
  // it (opts.hosts), and it has no shared-memory path.
  const bool device_only = DeviceOnly(v.caps);
  if (device_only) hosts_ = opts.hosts;
  // Every rank's host name, so messages about a peer can name its host.
  if (size > 1 && !device_only) {
    TransportExchange ex(this, size);
    std::string why;
    const int st = ex.Allgather("hosts", opts.hostname, &hosts_, &why);
    if (st != HVD_OK) return Error(static_cast<hvd_status_t>(st), why);
  }
  // The shared-memory path: agreed with every peer over the transport itself.
  if (size > 1 && !device_only) {
    shm::Options o;
    o.transport = name_;
    o.enabled = opts.shm;
    o.switch_name = opts.shm_switch;
    const std::string prefix = std::string("/hvd-") + name_ + "-";
    o.name_prefix = prefix.c_str();
    o.fallback = links_ ? "point-to-point" : "native collectives";
    o.rank = rank;
    o.size = size;
    o.identity = host_id_;
    o.timeout_s = env.timeout_s;
    o.log = [log](int level, const std::string& msg) { log->Write(level, msg); };
    TransportExchange ex(this, size);
    std::string why;
    const int st = shm::Setup(ex, o, &shm_, &why);
    if (st != HVD_OK) return Error(static_cast<hvd_status_t>(st), why);
    if (shm_) {
      std::vector<std::string> names;
      for (int r = 0; r < size; ++r) names.push_back(Who(r));
      shm_->set_names(std::move(names));
      host_seg_ = shm_.get();
    }
  }
  if (size > 1 && !shm_ && links_ && opts.hierarchical != 0) HVD_CHECK(StartHierarchy(opts, log));
  if (shm_) facts_.emplace_back("shm", 1);
  if (want_shm && !shm_) {
    return InvalidArgument(
        "an HVD_ALGORITHM_* setting asks for shm, but the shared-memory path is off (ranks on "
        "several hosts, or " + std::string(opts.shm_switch) + "=0)");
  }
  spans_ = shm_ != nullptr && (forced_[HVD_TRANSPORT_ALLREDUCE] == algo::Algorithm::kAuto ||
                               forced_[HVD_TRANSPORT_ALLREDUCE] == algo::Algorithm::kShm);
  HVD_LOG(*log, HVD_LOG_DEBUG,
          "transport '" << name_ << "' connected (" << (dl_ ? "plugin" : "built in")
                        << (links_ ? ", point-to-point" : "") << (shm_ ? ", shared memory" : "")
                        << (hier_ ? ", hierarchical" : "")
                        << "); allreduce of 4 B: " << algo::AlgorithmName(Choose(0, 4))
                        << ", of 64 MiB: " << algo::AlgorithmName(Choose(0, size_t{64} << 20)));
  return Status::Ok();
}

Transport::~Transport() {
  host_seg_ = nullptr;
  hier_.reset();  // its communicators run over this one's
  if (shm_) shm_->Depart();
  shm_.reset();
  if (comm_ != nullptr) table_.finalize(comm_);
  if (dl_ != nullptr) dlclose(dl_);
}

Status Transport::Check(int rc, const char* what) {
  if (rc == HVD_OK) return Status::Ok();
  const char* msg = table_.last_error(comm_);
  hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
  Status s = Error(code, std::string(name_) + " " + what + " failed: " +
                             (msg && *msg ? msg : "no reason given"));
  Broke(s);
  return s;
}

// Rank r's host index in host_seg_ (its line there), or -1 where r is not
// on this rank's host or there is no such segment.
int Transport::HostIndex(int r) const {
  if (host_seg_ == nullptr || r < 0 || r >= size_) return -1;
  if (shm_) return r;
  if (hier_ && hier_->host_of[static_cast<size_t>(r)] == hier_->host_of[static_cast<size_t>(rank_)]) {
    return hier_->local_index[static_cast<size_t>(r)];
  }
  return -1;
}

// Why rank r, on this host, may be silent: it is blocked itself, waiting
// for another rank (and that one, if on this host too, for another...), as
// their lines in the host's segment say. "" if r is not on this host or is
// not blocked in a point-to-point wait (then it is stopped, slow, or in
// another step). Waits shorter than 0.1 s are passing, not a cause.
std::string Transport::BlockedChain(int r) const {
  std::string out;
  for (int hop = 0, cur = r; hop < size_; ++hop) {
    const int idx = HostIndex(cur);
    int next = -1;
    double secs = 0;
    if (idx < 0 || cur == rank_ || !host_seg_->WaitingOn(idx, &next, &secs) || secs < 0.1) break;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", secs);
    out += "; " + Who(cur) + " is itself blocked: " + Who(next) + " has not answered it for " + buf + " s";
    if (next == rank_) break;
    cur = next;
  }
  return out;
}

// A wait on `peer` failed (the plugin has broken its communicator). A peer
// on this host that stopped answering, or hung up, may itself be blocked on
// someone else, or have given up first: the host's segment says, and the
// report names the rank at the end of that chain. Either way the host's
// other ranks learn this rank's reason at once (WarnHost).
Status Transport::LinkFailure(int rc, int peer) {
  const char* msg = table_.last_error(comm_);
  hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
  const std::string head = std::string(name_) + " " + op_ + " failed: ";
  std::string text = head + (msg && *msg ? msg : "no reason given");
  int by = -1, by_code = 0;
  std::string why;
  if (HostIndex(peer) >= 0 && peer != rank_) {
    if (host_seg_->AbortedBy(&by, &by_code, &why)) {
      const std::string first = host_seg_->Name(by);
      text = head + (first == Who(peer) ? first + " gave up first: "
                                        : Who(peer) + " stopped after " + first + " gave up: ") + why;
      if (by_code == HVD_ERR_TIMEOUT) code = HVD_ERR_TIMEOUT;
    } else {
      text += BlockedChain(peer);
    }
  }
  Status st = Error(code, text);
  Broke(st);
  WarnHost(code, text);
  return st;
}

// Writes a failure into every shared-memory segment this rank is in, so
// the ranks of its host blocked there (or about to blame it) see its reason.
void Transport::WarnHost(hvd_status_t code, const std::string& text) noexcept {
  try {
    if (shm_) shm_->Abort(code, text);
    std::lock_guard<std::mutex> lock(fail_mu_);
    for (shm::Segment* seg : subset_shm_) seg->Abort(code, text);
  } catch (...) {
  }
}

void Transport::Broke(const Status& s) noexcept {
  try {
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (failure_.load() != HVD_OK) return;
    fail_msg_ = s.message();
    failure_.store(s.code());
  } catch (...) {
    failure_.store(s.code());
  }
}

Status Transport::Unusable() const {
  std::lock_guard<std::mutex> lock(fail_mu_);
  return Error(static_cast<hvd_status_t>(failure_.load()),
               fail_msg_ + " (communicator unusable after this failure)");
}

hvd_transport_buffer_t Transport::Host(const void* data, size_t bytes) const {
  hvd_transport_buffer_t b{};
  b.data = const_cast<void*>(data);
  b.bytes = bytes;
  b.memory_type = HVD_MEMORY_HOST;
  b.device = HVD_DEVICE_CPU;
  return b;
}

Status Transport::ShmFailure(shm::Segment& seg, const char* what, const shm::Error& e,
                             const std::vector<int>* members) {
  std::string msg = e.what();
  if (e.code == HVD_ERR_TIMEOUT && !e.missing.empty()) {
    std::string who, chain;
    for (int r : e.missing) {
      const int pr = members != nullptr ? (*members)[static_cast<size_t>(r)] : r;
      who += (who.empty() ? "" : ", ") + Who(pr);
      chain += BlockedChain(pr);
    }
    if (peer_limit_) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", seg.timeout());
      msg = std::string(what) + " (shm): " + who + (e.missing.size() == 1 ? " has" : " have") +
            " not answered for " + secs + " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
    }
    msg += chain;
  }
  Status st = Error(static_cast<hvd_status_t>(e.code), std::string(name_) + " " + what + " failed: " + msg);
  Broke(st);
  // Peers waiting in this segment (shm_ or a subset's, both in WarnHost's
  // list) and in this rank's other segments fail at once.
  WarnHost(static_cast<hvd_status_t>(e.code), msg);
  // The communicator is broken for the core: the plugin's too (its finalize
  // then knows a peer may be gone, and nothing waits on it).
  if (table_.abort != nullptr) table_.abort(comm_, e.code, msg.c_str());
  return st;
}

algo::Algorithm Transport::Choose(int c, size_t bytes) const {
  using algo::Algorithm;
  if (forced_[c] != Algorithm::kAuto) return forced_[c];
  if (shm_ && c != HVD_TRANSPORT_ALLTOALLV) return Algorithm::kShm;
  const hvd_transport_t& v = table_;
  const void* natives[HVD_TRANSPORT_COLLECTIVES] = {
      reinterpret_cast<const void*>(v.allreduce), reinterpret_cast<const void*>(v.allgatherv),
      reinterpret_cast<const void*>(v.broadcast), reinterpret_cast<const void*>(v.alltoallv),
      reinterpret_cast<const void*>(v.reducescatter), reinterpret_cast<const void*>(v.barrier)};
  // Every rank must choose alike: alltoallv's size differs per rank, so
  // only "always" counts there.
  const size_t limit = info_.native_max_bytes[c];
  const bool within = c == HVD_TRANSPORT_ALLTOALLV ? limit == SIZE_MAX : bytes <= limit;
  if (natives[c] != nullptr && (!links_ || within)) return Algorithm::kNative;
  return ChooseP2p(c, bytes, *links_);
}

algo::Algorithm Transport::ChooseP2p(int c, size_t bytes, const algo::Links& links) const {
  using algo::Algorithm;
  switch (c) {
    case HVD_TRANSPORT_ALLREDUCE: return algo::ChooseAllreduce(links.size(), bytes);
    case HVD_TRANSPORT_BROADCAST:
      return algo::ChooseBroadcast(links.size(), bytes, links.segment_bytes());
    case HVD_TRANSPORT_ALLTOALLV: return Algorithm::kPairwise;
    case HVD_TRANSPORT_BARRIER: return Algorithm::kDissemination;
    default: return Algorithm::kRing;
  }
}

Status Transport::Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (broken()) return Unusable();
  op_ = "allreduce";
  const size_t es = DtypeSize(dtype);
  if (hierarchical_on() && forced_[HVD_TRANSPORT_ALLREDUCE] == algo::Algorithm::kAuto) {
    return AllreduceHier(buf, count, dtype, op);
  }
  const algo::Algorithm how = Choose(HVD_TRANSPORT_ALLREDUCE, count * es);
  if (how == algo::Algorithm::kNative) {
    const hvd_transport_buffer_t b = Host(buf, count * es);
    return Check(table_.allreduce(comm_, &b, count, dtype, op), "allreduce");
  }
  return CoreAllreduce(Whole(), how, buf, count, dtype, op);
}

Status Transport::DeviceAllreduce(const hvd_transport_buffer_t& buf, size_t count,
                                  hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (!device_memory() || table_.allreduce == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " takes no CUDA memory for allreduce");
  }
  if (broken()) return Unusable();
  op_ = "allreduce";
  return Check(table_.allreduce(comm_, &buf, count, dtype, op), "allreduce");
}

Status Transport::DeviceBroadcast(const hvd_transport_buffer_t& buf, int root) {
  if (!device_memory() || table_.broadcast == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " takes no CUDA memory for broadcast");
  }
  if (broken()) return Unusable();
  op_ = "broadcast";
  return Check(table_.broadcast(comm_, &buf, root), "broadcast");
}

Status Transport::DeviceAllgatherv(const hvd_transport_buffer_t& send,
                                   const hvd_transport_buffer_t& recv, const size_t* recv_bytes) {
  if (!device_memory() || table_.allgatherv == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " takes no CUDA memory for allgather");
  }
  if (broken()) return Unusable();
  op_ = "allgatherv";
  return Check(table_.allgatherv(comm_, &send, &recv, recv_bytes), "allgatherv");
}

Status Transport::DeviceAlltoallv(const hvd_transport_buffer_t& send, const size_t* send_bytes,
                                  const hvd_transport_buffer_t& recv, const size_t* recv_bytes) {
  if (!device_memory() || table_.alltoallv == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " takes no CUDA memory for alltoall");
  }
  if (broken()) return Unusable();
  op_ = "alltoallv";
  return Check(table_.alltoallv(comm_, &send, send_bytes, &recv, recv_bytes), "alltoallv");
}

Status Transport::DeviceReducescatter(const hvd_transport_buffer_t& buf, const size_t* counts,
                                      hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (!device_memory() || table_.reducescatter == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED,
                 std::string(name_) + " takes no CUDA memory for reducescatter");
  }
  if (broken()) return Unusable();
  op_ = "reducescatter";
  return Check(table_.reducescatter(comm_, &buf, counts, dtype, op), "reducescatter");
}

Status Transport::CoreAllreduce(const CoreGroup& g, algo::Algorithm how, void* buf, size_t count,
                                hvd_dtype_t dtype, hvd_reduce_op_t op) {
  switch (how) {
    case algo::Algorithm::kShm:
      try {
        shm::Allreduce(*g.shm, reduce_, static_cast<uint8_t*>(buf), count, DtypeSize(dtype), dtype,
                       op);
        return Status::Ok();
      } catch (const shm::Error& e) {
        return ShmFailure(*g.shm, "allreduce", e, g.members);
      }
    case algo::Algorithm::kDirect:
      return algo::AllreduceDirect(*g.links, *g.scratch, reduce_, buf, count, dtype, op);
    default:
      return algo::AllreduceRing(*g.links, *g.scratch, reduce_, buf, count, dtype, op);
  }
}

Status Transport::Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype,
                                hvd_reduce_op_t op) {
  if (!has_reducescatter()) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " has no reducescatter entry");
  }
  if (broken()) return Unusable();
  op_ = "reducescatter";
  const size_t es = DtypeSize(dtype);
  const int size = static_cast<int>(comm_size());
  std::vector<size_t> start(static_cast<size_t>(size) + 1, 0);
  for (int p = 0; p < size; ++p) start[p + 1] = start[p] + counts[p];
  if (hierarchical_on() && hier_->even &&
      forced_[HVD_TRANSPORT_REDUCESCATTER] == algo::Algorithm::kAuto) {
    return ReducescatterHier(buf, counts, start, dtype, op);
  }
  const algo::Algorithm how = Choose(HVD_TRANSPORT_REDUCESCATTER, start.back() * es);
  if (how == algo::Algorithm::kNative) {
    const hvd_transport_buffer_t b = Host(buf, start.back() * es);
    return Check(table_.reducescatter(comm_, &b, counts, dtype, op), "reducescatter");
  }
  return CoreReducescatter(Whole(), how, buf, counts, start, dtype, op);
}

Status Transport::CoreReducescatter(const CoreGroup& g, algo::Algorithm how, void* buf,
                                    const size_t* counts, const std::vector<size_t>& start,
                                    hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (how == algo::Algorithm::kShm) {
    try {
      shm::Reducescatter(*g.shm, reduce_, static_cast<uint8_t*>(buf), start.data(),
                         DtypeSize(dtype), dtype, op);
      return Status::Ok();
    } catch (const shm::Error& e) {
      return ShmFailure(*g.shm, "reducescatter", e, g.members);
    }
  }
  return algo::ReducescatterRing(*g.links, *g.scratch, reduce_, buf, counts, dtype, op);
}

bool Transport::RingSpans(size_t bytes) const {
  return ring_spans_ && links_ && !hierarchical_on() &&
         Choose(HVD_TRANSPORT_ALLREDUCE, bytes) == algo::Algorithm::kRing;
}

Status Transport::AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op) {
  size_t bytes = 0;
  for (size_t i = 0; i < nspans && spans != nullptr; ++i) bytes += spans[i].count * DtypeSize(dtype);
  if (!allreduce_spans(bytes)) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " does not serve allreduce_spans");
  }
  if (broken()) return Unusable();
  op_ = "allreduce";
  return CoreAllreduceSpans(Whole(), spans_ ? algo::Algorithm::kShm : algo::Algorithm::kRing,
                            spans, nspans, dtype, op);
}

Status Transport::CoreAllreduceSpans(const CoreGroup& g, algo::Algorithm how,
                                     const hvd_transport_span_t* spans, size_t nspans,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (how != algo::Algorithm::kShm) {
    return algo::AllreduceRingSpans(*g.links, *g.scratch, reduce_, spans, nspans, dtype, op);
  }
  try {
    shm::AllreduceSpans(*g.shm, reduce_, spans, nspans, DtypeSize(dtype), dtype, op);
    return Status::Ok();
  } catch (const shm::Error& e) {
    return ShmFailure(*g.shm, "allreduce", e, g.members);
  }
}

// Below this many bytes in all, an allgather runs flat even across hosts:
// the negotiation's own small allgathers (two per full round, a few bytes
// per rank) were slower in three steps (sim 2x2: 4-5x on allreduce steps
// that each follow a barrier, whose negotiation is a full round).
constexpr size_t kHierAllgatherMin = 64 << 10;

Status Transport::Allgatherv(const void* send, void* recv, const size_t* recv_bytes) {
  if (broken()) return Unusable();
  op_ = "allgather";
  const int size = static_cast<int>(comm_size());
  size_t total = 0;
  for (int p = 0; p < size; ++p) total += recv_bytes[p];
  if (hierarchical_on() && forced_[HVD_TRANSPORT_ALLGATHERV] == algo::Algorithm::kAuto &&
      total >= kHierAllgatherMin) {
    return AllgathervHier(send, recv, recv_bytes, total);
  }
  const algo::Algorithm how = Choose(HVD_TRANSPORT_ALLGATHERV, total);
  if (how == algo::Algorithm::kNative) {
    const int rank = links_ ? links_->rank() : static_cast<int>(FactOr("rank", 0));
    const hvd_transport_buffer_t s = Host(send, recv_bytes[rank]), r = Host(recv, total);
    return Check(table_.allgatherv(comm_, &s, &r, recv_bytes), "allgather");
  }
  return CoreAllgatherv(Whole(), how, send, recv, recv_bytes);
}

Status Transport::CoreAllgatherv(const CoreGroup& g, algo::Algorithm how, const void* send,
                                 void* recv, const size_t* recv_bytes) {
  if (how == algo::Algorithm::kShm) {
    try {
      shm::Allgatherv(*g.shm, static_cast<const uint8_t*>(send), static_cast<uint8_t*>(recv),
                      recv_bytes);
      return Status::Ok();
    } catch (const shm::Error& e) {
      return ShmFailure(*g.shm, "allgather", e, g.members);
    }
  }
  return algo::AllgathervRing(*g.links, send, recv, recv_bytes);
}

Status Transport::Broadcast(void* buf, size_t bytes, int root) {
  if (broken()) return Unusable();
  op_ = "broadcast";
  if (hierarchical_on() && hier_->even && forced_[HVD_TRANSPORT_BROADCAST] == algo::Algorithm::kAuto) {
    return BroadcastHier(buf, bytes, root);
  }
  const algo::Algorithm how = Choose(HVD_TRANSPORT_BROADCAST, bytes);
  if (how == algo::Algorithm::kNative) {
    const hvd_transport_buffer_t b = Host(buf, bytes);
    return Check(table_.broadcast(comm_, &b, root), "broadcast");
  }
  return CoreBroadcast(Whole(), how, buf, bytes, root);
}

Status Transport::CoreBroadcast(const CoreGroup& g, algo::Algorithm how, void* buf, size_t bytes,
                                int root) {
  switch (how) {
    case algo::Algorithm::kShm:
      try {
        shm::Broadcast(*g.shm, static_cast<uint8_t*>(buf), bytes, root);
        return Status::Ok();
      } catch (const shm::Error& e) {
        return ShmFailure(*g.shm, "broadcast", e, g.members);
      }
    case algo::Algorithm::kChain:
      return algo::BroadcastChain(*g.links, buf, bytes, root);
    default:
      return algo::BroadcastTree(*g.links, buf, bytes, root);
  }
}

Status Transport::Alltoallv(const void* send, const size_t* send_bytes, void* recv,
                            const size_t* recv_bytes) {
  if (broken()) return Unusable();
  op_ = "alltoall";
  const int size = static_cast<int>(comm_size());
  size_t sent = 0, got = 0;
  for (int p = 0; p < size; ++p) {
    sent += send_bytes[p];
    got += recv_bytes[p];
  }
  if (Choose(HVD_TRANSPORT_ALLTOALLV, std::max(sent, got)) == algo::Algorithm::kNative) {
    const hvd_transport_buffer_t s = Host(send, sent), r = Host(recv, got);
    return Check(table_.alltoallv(comm_, &s, send_bytes, &r, recv_bytes), "alltoall");
  }
  return algo::AlltoallvPairwise(*links_, send, send_bytes, recv, recv_bytes);
}

Status Transport::Barrier() {
  if (broken()) return Unusable();
  op_ = "barrier";
  const algo::Algorithm how = Choose(HVD_TRANSPORT_BARRIER, 0);
  if (how == algo::Algorithm::kNative) return Check(table_.barrier(comm_), "barrier");
  return CoreBarrier(Whole(), how);
}

Status Transport::CoreBarrier(const CoreGroup& g, algo::Algorithm how) {
  if (how == algo::Algorithm::kShm) {
    try {
      g.shm->Barrier("barrier (shm)");
      return Status::Ok();
    } catch (const shm::Error& e) {
      return ShmFailure(*g.shm, "barrier", e, g.members);
    }
  }
  return algo::BarrierDissemination(*g.links);
}

// ---- process sets ------------------------------------------------------------

// A process set over the transport's point-to-point (OpenSubset). A set of
// one rank needs no peer: its collectives are copies or nothing.
class Transport::Subset : public Comm {
 public:
  Subset(Transport* t, std::vector<int> members, uint32_t band)
      : t_(t), members_(std::move(members)), size_(static_cast<int>(members_.size())) {
    for (int i = 0; i < size_; ++i) {
      if (members_[static_cast<size_t>(i)] == t->rank_) rank_ = i;
    }
    if (size_ > 1) {
      links_ = std::make_unique<algo::SubsetLinks>(t->links_.get(), members_,
                                                   band * algo::SubsetLinks::kTagBand);
    }
  }
  ~Subset() override {
    if (shm_) {
      {
        std::lock_guard<std::mutex> lock(t_->fail_mu_);
        auto& v = t_->subset_shm_;
        v.erase(std::remove(v.begin(), v.end(), shm_.get()), v.end());
      }
      shm_->Depart();
    }
  }

  // The shared-memory path, agreed among the members as the transport's own.
  Status Start() {
    if (size_ == 1) return Status::Ok();
    shm::Options o;
    label_ = std::string(t_->name_) + " process set";
    o.transport = label_.c_str();
    o.enabled = t_->shm_enabled_;
    o.switch_name = t_->shm_switch_.c_str();
    const std::string prefix = std::string("/hvd-") + t_->name_ + "-";
    o.name_prefix = prefix.c_str();
    o.fallback = "point-to-point";
    o.rank = rank_;
    o.size = size_;
    o.identity = t_->host_id_;
    o.timeout_s = t_->limit_s_;
    Logger* log = t_->log_;
    // The transport logged its own choice at start; a set's (one per set
    // made) is for debugging.
    o.log = [log](int level, const std::string& msg) {
      const int at = std::max(level, static_cast<int>(HVD_LOG_DEBUG));
      if (log != nullptr && log->enabled(at)) log->Write(at, msg);
    };
    TransportExchange ex(this, size_);
    std::string why;
    const int st = shm::Setup(ex, o, &shm_, &why);
    if (st != HVD_OK) return Error(static_cast<hvd_status_t>(st), "process set: " + why);
    if (shm_) {
      std::vector<std::string> names;
      for (int r : members_) names.push_back(t_->Who(r));
      shm_->set_names(std::move(names));
      std::lock_guard<std::mutex> lock(t_->fail_mu_);
      t_->subset_shm_.push_back(shm_.get());
    }
    return Status::Ok();
  }
  shm::Segment* segment() const { return shm_.get(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool has_reducescatter() const override { return true; }
  bool allreduce_spans(size_t) const override {
    return shm_ != nullptr && Choose(0, 0) == algo::Algorithm::kShm;
  }

  Status Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) override {
    HVD_CHECK(Enter("allreduce"));
    if (size_ == 1) return Status::Ok();
    return t_->CoreAllreduce(Group(), Choose(HVD_TRANSPORT_ALLREDUCE, count * DtypeSize(dtype)),
                             buf, count, dtype, op);
  }
  Status Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype,
                       hvd_reduce_op_t op) override {
    HVD_CHECK(Enter("reducescatter"));
    if (size_ == 1) return Status::Ok();
    std::vector<size_t> start(static_cast<size_t>(size_) + 1, 0);
    for (int p = 0; p < size_; ++p) start[p + 1] = start[p] + counts[p];
    return t_->CoreReducescatter(
        Group(), Choose(HVD_TRANSPORT_REDUCESCATTER, start.back() * DtypeSize(dtype)), buf, counts,
        start, dtype, op);
  }
  Status AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                        hvd_reduce_op_t op) override {
    HVD_CHECK(Enter("allreduce"));
    if (!allreduce_spans(0)) {
      return Error(HVD_ERR_UNSUPPORTED, "this process set does not serve allreduce_spans");
    }
    return t_->CoreAllreduceSpans(Group(), algo::Algorithm::kShm, spans, nspans, dtype, op);
  }
  Status Allgatherv(const void* send, void* recv, const size_t* recv_bytes) override {
    HVD_CHECK(Enter("allgather"));
    size_t total = 0;
    for (int p = 0; p < size_; ++p) total += recv_bytes[p];
    if (size_ == 1) {
      if (total > 0 && recv != send) std::memmove(recv, send, total);
      return Status::Ok();
    }
    return t_->CoreAllgatherv(Group(), Choose(HVD_TRANSPORT_ALLGATHERV, total), send, recv,
                              recv_bytes);
  }
  Status Broadcast(void* buf, size_t bytes, int root) override {
    HVD_CHECK(Enter("broadcast"));
    if (size_ == 1) return Status::Ok();
    return t_->CoreBroadcast(Group(), Choose(HVD_TRANSPORT_BROADCAST, bytes), buf, bytes, root);
  }
  Status Alltoallv(const void* send, const size_t* send_bytes, void* recv,
                   const size_t* recv_bytes) override {
    HVD_CHECK(Enter("alltoall"));
    if (size_ == 1) {
      if (send_bytes[0] > 0 && recv != send) std::memmove(recv, send, send_bytes[0]);
      return Status::Ok();
    }
    return algo::AlltoallvPairwise(*links_, send, send_bytes, recv, recv_bytes);
  }
  Status Barrier() override {
    HVD_CHECK(Enter("barrier"));
    if (size_ == 1) return Status::Ok();
    return t_->CoreBarrier(Group(), Choose(HVD_TRANSPORT_BARRIER, 0));
  }

 private:
  CoreGroup Group() { return CoreGroup{shm_.get(), links_.get(), &scratch_, &members_}; }
  // Every call: the transport still works, and the limit in force applies.
  Status Enter(const char* op) {
    if (t_->broken()) return t_->Unusable();
    t_->op_ = op;
    if (shm_) shm_->set_timeout(t_->limit_s_);
    return Status::Ok();
  }
  // The transport's forced algorithm where a set can run it (natives span
  // the plugin's whole communicator), else shared memory, else point-to-point.
  algo::Algorithm Choose(int c, size_t bytes) const {
    using algo::Algorithm;
    const Algorithm forced = t_->forced_[c];
    if (forced == Algorithm::kShm && shm_) return forced;
    if (forced != Algorithm::kAuto && forced != Algorithm::kShm && forced != Algorithm::kNative) {
      return forced;
    }
    if (shm_ && c != HVD_TRANSPORT_ALLTOALLV) return Algorithm::kShm;
    return t_->ChooseP2p(c, bytes, *links_);
  }

  Transport* t_;
  std::vector<int> members_;
  int size_;
  int rank_ = -1;
  std::string label_;  // "<transport> process set", for the shared-memory path's messages
  std::unique_ptr<algo::SubsetLinks> links_;
  std::unique_ptr<shm::Segment> shm_;
  algo::Scratch scratch_;
};

uint32_t Transport::tag_bands() const {
  if (!links_) return 0;
  const uint64_t tags = static_cast<uint64_t>(info_.max_tag) + 1;
  return static_cast<uint32_t>(std::min<uint64_t>(tags / algo::SubsetLinks::kTagBand, UINT32_MAX));
}

Result<std::unique_ptr<Comm>> Transport::OpenSubset(std::vector<int> members, uint32_t band) {
  if (members.size() > 1 && !links_) {
    return Error(HVD_ERR_UNSUPPORTED,
                 std::string("process sets of more than one rank need a transport with "
                             "point-to-point (HVD_TRANSPORT_CAP_P2P); the ") +
                     name_ + " transport has none");
  }
  if (members.size() > 1 && (band == 0 || band >= tag_bands())) {
    return Error(HVD_ERR_UNSUPPORTED,
                 std::string("too many process sets at once for the ") + name_ +
                     " transport's tag range (max_tag " + std::to_string(info_.max_tag) + ": " +
                     std::to_string(tag_bands() > 0 ? tag_bands() - 1 : 0) +
                     " sets); remove some first");
  }
  if (broken()) return Unusable();
  auto sub = std::make_unique<Subset>(this, std::move(members), band);
  HVD_CHECK(sub->Start());
  return std::unique_ptr<Comm>(std::move(sub));
}

// ---- hierarchical collectives ---------------------------------------------

// Groups the ranks by host identity (hosts in order of their first rank) and
// opens the two steps' communicators: each host's ranks (shared memory where
// the host allows it) and, across hosts, the ranks with one local index (or,
// where hosts have different rank counts, the hosts' first ranks).
// Collective over every rank. Auto (-1): only where ranks span several hosts
// and some host has several; 1 asks for it wherever there is more than one
// host.
Status Transport::StartHierarchy(const TransportOptions& opts, Logger* log) {
  TransportExchange ex(this, size_);
  std::vector<std::string> ids;
  std::string why;
  const int st = ex.Allgather("host ids", host_id_, &ids, &why);
  if (st != HVD_OK) return Error(static_cast<hvd_status_t>(st), why);
  auto h = std::make_unique<Hierarchy>();
  std::vector<std::string> order;
  h->host_of.assign(static_cast<size_t>(size_), 0);
  std::vector<std::vector<int>>& hosts = h->hosts;
  h->local_index.assign(static_cast<size_t>(size_), 0);
  for (int r = 0; r < size_; ++r) {
    size_t k = std::find(order.begin(), order.end(), ids[r]) - order.begin();
    if (k == order.size()) {
      order.push_back(ids[r]);
      hosts.emplace_back();
    }
    h->host_of[r] = static_cast<int>(k);
    h->local_index[r] = static_cast<int>(hosts[k].size());
    hosts[k].push_back(r);
  }
  size_t most = 0;
  for (const auto& g : hosts) most = std::max(most, g.size());
  if (hosts.size() < 2 || (most < 2 && opts.hierarchical < 0)) {
    HVD_LOG(*log, HVD_LOG_DEBUG,
            "hierarchical collectives not used: " << hosts.size() << " host(s), at most " << most
                                                  << " rank(s) on one");
    return Status::Ok();
  }
  for (const auto& g : hosts) h->even = h->even && g.size() == hosts[0].size();
  // Each host's ranks consecutive, hosts in rank order: a host's block of
  // an allgather is then where the ranks' pieces go.
  for (size_t k = 0, next = 0; k < hosts.size(); ++k) {
    for (int r : hosts[k]) h->contiguous = h->contiguous && r == static_cast<int>(next++);
  }
  const int me = rank_;
  const std::vector<int>& mine = hosts[static_cast<size_t>(h->host_of[me])];
  const int li = h->local_index[me];
  std::vector<int> cross;
  for (const auto& g : hosts) {
    if (h->even) {
      cross.push_back(g[static_cast<size_t>(li)]);
    } else if (li == 0) {
      cross.push_back(g[0]);
    }
  }
  // Every host's ranks at once (disjoint), then every cross group at once.
  HVD_ASSIGN_OR_RETURN(h->local, OpenSubset(mine, 1));
  if (!cross.empty()) {
    HVD_ASSIGN_OR_RETURN(h->cross, OpenSubset(cross, 2));
  }
  HVD_LOG(*log, HVD_LOG_INFO,
          "hierarchical collectives: " << hosts.size() << " hosts, " << mine.size()
                                       << " rank(s) on this one"
                                       << (h->even ? "" : " (hosts differ in rank count: "
                                                          "their first ranks reduce across hosts)"));
  hier_ = std::move(h);
  host_seg_ = static_cast<const Subset*>(hier_->local.get())->segment();  // OpenSubset makes Subsets
  return Status::Ok();
}

// Even hosts: each host's ranks reduce-scatter the buffer among themselves
// (shared memory), every block is allreduced across hosts by the ranks
// holding it (one cross group per local index, all at once), and each host
// allgathers its blocks back. Only 1x the buffer leaves each host.
// Uneven hosts: host allreduce, leaders across hosts, host broadcast.
// Every rank ends with the same bits: each block is reduced once per cross
// group in one order, then copied.
Status Transport::AllreduceHier(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  Hierarchy& h = *hier_;
  const size_t es = DtypeSize(dtype);
  uint8_t* base = static_cast<uint8_t*>(buf);
  if (!h.even) {
    HVD_CHECK(h.local->Allreduce(buf, count, dtype, op));
    if (h.cross) HVD_CHECK(h.cross->Allreduce(buf, count, dtype, op));
    HVD_CHECK(h.local->Broadcast(buf, count * es, 0));
    op_ = "allreduce";
    return Status::Ok();
  }
  const int L = h.local->size();
  const int li = h.local->rank();
  std::vector<size_t> counts(static_cast<size_t>(L)), bytes(static_cast<size_t>(L));
  size_t start = 0, my_start = 0;
  for (int i = 0; i < L; ++i) {
    counts[i] = count / L + (static_cast<size_t>(i) < count % L ? 1 : 0);
    bytes[i] = counts[i] * es;
    if (i == li) my_start = start;
    start += counts[i];
  }
  HVD_CHECK(h.local->Reducescatter(buf, counts.data(), dtype, op));
  if (counts[li] > 0) HVD_CHECK(h.cross->Allreduce(base + my_start * es, counts[li], dtype, op));
  HVD_CHECK(h.local->Allgatherv(base + my_start * es, buf, bytes.data()));
  op_ = "allreduce";
  return Status::Ok();
}

// Each host gathers its ranks' pieces (shared memory), the hosts' first
// ranks exchange the hosts' blocks (one point-to-point allgather of one
// rank per host, instead of a ring through every rank), and each host
// broadcasts the whole from its first rank. Every piece crosses to each
// other host once, and no byte goes over loopback TCP. Where a host's ranks
// are not consecutive, the blocks are gathered in a scratch buffer in host
// order and each rank's piece copied to its place.
Status Transport::AllgathervHier(const void* send, void* recv, const size_t* recv_bytes, size_t total) {
  Hierarchy& h = *hier_;
  const size_t nhosts = h.hosts.size();
  const int me_host = h.host_of[static_cast<size_t>(rank_)];
  std::vector<size_t> offset(static_cast<size_t>(size_) + 1, 0);  // of each rank's piece in recv
  for (int r = 0; r < size_; ++r) offset[r + 1] = offset[r] + recv_bytes[r];
  std::vector<size_t> host_bytes(nhosts, 0), host_at(nhosts + 1, 0);
  for (size_t k = 0; k < nhosts; ++k) {
    for (int r : h.hosts[k]) host_bytes[k] += recv_bytes[r];
    host_at[k + 1] = host_at[k] + host_bytes[k];
  }
  uint8_t* g = static_cast<uint8_t*>(recv);
  if (!h.contiguous) {
    HVD_ASSIGN_OR_RETURN(g, scratch_.Get(total));
  }
  const std::vector<int>& mine = h.hosts[static_cast<size_t>(me_host)];
  std::vector<size_t> local_bytes(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) local_bytes[i] = recv_bytes[mine[i]];
  uint8_t* block = g + host_at[static_cast<size_t>(me_host)];
  HVD_CHECK(h.local->Allgatherv(send, block, local_bytes.data()));
  if (h.local->rank() == 0) {  // a host's first rank: its cross communicator is the leaders'
    HVD_CHECK(h.cross->Allgatherv(block, g, host_bytes.data()));
  }
  HVD_CHECK(h.local->Broadcast(g, total, 0));
  if (!h.contiguous) {
    uint8_t* out = static_cast<uint8_t*>(recv);
    for (size_t k = 0; k < nhosts; ++k) {
      size_t at = host_at[k];
      for (int r : h.hosts[k]) {
        if (recv_bytes[r] > 0) std::memcpy(out + offset[r], g + at, recv_bytes[r]);
        at += recv_bytes[r];
      }
    }
  }
  op_ = "allgather";
  return Status::Ok();
}

// Even hosts: the buffer is rearranged (scratch) so that the blocks of the
// ranks with local index c, host by host, are contiguous (partition c);
// each host reduce-scatters the partitions among its ranks (shared memory),
// then each cross group reduce-scatters its partition among the hosts, and
// every rank copies its block back. Each rank sends 1/L of the buffer
// across hosts (L ranks per host), none over loopback TCP.
Status Transport::ReducescatterHier(void* buf, const size_t* counts, const std::vector<size_t>& start,
                                    hvd_dtype_t dtype, hvd_reduce_op_t op) {
  Hierarchy& h = *hier_;
  const size_t es = DtypeSize(dtype);
  const size_t H = h.hosts.size(), L = h.hosts[0].size();
  const size_t li = static_cast<size_t>(h.local_index[static_cast<size_t>(rank_)]);
  const size_t hm = static_cast<size_t>(h.host_of[static_cast<size_t>(rank_)]);
  uint8_t* g = nullptr;
  HVD_ASSIGN_OR_RETURN(g, scratch_.Get(std::max<size_t>(start.back() * es, 1)));
  const uint8_t* in = static_cast<const uint8_t*>(buf);
  std::vector<size_t> part(L, 0);  // elements of each partition
  size_t at = 0, my_part = 0;
  for (size_t c = 0; c < L; ++c) {
    if (c == li) my_part = at;
    for (size_t k = 0; k < H; ++k) {
      const int r = h.hosts[k][c];
      if (counts[r] > 0) std::memcpy(g + at * es, in + start[r] * es, counts[r] * es);
      at += counts[r];
      part[c] += counts[r];
    }
  }
  HVD_CHECK(h.local->Reducescatter(g, part.data(), dtype, op));
  std::vector<size_t> cross(H);
  size_t mine = my_part;
  for (size_t k = 0; k < H; ++k) {
    cross[k] = counts[h.hosts[k][li]];
    if (k < hm) mine += cross[k];
  }
  HVD_CHECK(h.cross->Reducescatter(g + my_part * es, cross.data(), dtype, op));
  if (counts[rank_] > 0) {
    std::memcpy(static_cast<uint8_t*>(buf) + start[rank_] * es, g + mine * es, counts[rank_] * es);
  }
  op_ = "reducescatter";
  return Status::Ok();
}

// Even hosts: the root's cross group (the ranks with its local index)
// broadcasts from it, then every host broadcasts from that local index.
Status Transport::BroadcastHier(void* buf, size_t bytes, int root) {
  Hierarchy& h = *hier_;
  const int lr = h.local_index[static_cast<size_t>(root)];
  if (h.local->rank() == lr) HVD_CHECK(h.cross->Broadcast(buf, bytes, h.host_of[static_cast<size_t>(root)]));
  HVD_CHECK(h.local->Broadcast(buf, bytes, lr));
  op_ = "broadcast";
  return Status::Ok();
}

Status Transport::SetTimeout(double timeout_s, int32_t kind) {
  if (!has_set_timeout()) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " has no set_timeout entry");
  }
  peer_limit_ = kind == HVD_TRANSPORT_LIMIT_PEER;
  limit_s_ = timeout_s;
  if (shm_) shm_->set_timeout(timeout_s);
  return Check(table_.set_timeout(comm_, timeout_s, kind), "set_timeout");
}

bool Transport::Abort(hvd_status_t status, const std::string& reason) noexcept {
  bool done = false;
  try {
    Broke(Error(status, std::string(name_) + ": aborted: " + reason));
  } catch (...) {
  }
  WarnHost(status, reason);
  done = shm_ != nullptr;
  if (comm_ != nullptr && table_.abort != nullptr) {
    done = table_.abort(comm_, status, reason.c_str()) == HVD_OK || done;
  }
  return done;
}

std::string Transport::Who(int r) const {
  std::string s = "rank " + std::to_string(r);
  if (r >= 0 && r < static_cast<int>(hosts_.size()) && !hosts_[r].empty()) s += " (host " + hosts_[r] + ")";
  return s;
}

int64_t Transport::FactOr(const char* key, int64_t dflt) const {
  for (const auto& f : facts_) {
    if (f.first == key) return f.second;
  }
  return dflt;
}

size_t Transport::comm_size() const { return static_cast<size_t>(size_); }

Result<int64_t> Transport::Query(const std::string& key) const {
  for (const auto& f : facts_) {
    if (f.first == key) return f.second;
  }
  return Error(HVD_ERR_UNSUPPORTED,
               std::string("the ") + name_ + " transport does not report '" + key + "'");
}

}  // namespace hvd
