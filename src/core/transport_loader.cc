#include "core/transport_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <set>
#include <sstream>

#include "rendezvous/store.h"

extern "C" const hvd_transport_v1_t* hvd_local_transport_table(void);
#ifdef HVD_BUILTIN_GLOO
extern "C" const hvd_transport_v1_t* hvd_gloo_transport_table(void);
extern "C" const hvd_transport_v2_t* hvd_gloo_transport_table_v2(void);
extern "C" const hvd_transport_v3_t* hvd_gloo_transport_table_v3(void);
#endif

namespace hvd {

namespace {

const hvd_transport_v1_t* BuiltinTable(const std::string& name) {
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
  const hvd_transport_v1_t* table = nullptr;
  const hvd_transport_v2_t* v2 = nullptr;
  const hvd_transport_v3_t* v3 = nullptr;
  void* dl = nullptr;
};

// The first required entry of a version 1 table that is NULL, or nullptr if
// none is. `query` is optional (version 1 says so), and so is every entry
// of the version 2 table: the core treats a NULL one as absent.
const char* MissingEntry(const hvd_transport_v1_t& t) {
  if (t.name == nullptr || t.name[0] == '\0') return "name";
  if (t.init == nullptr) return "init";
  if (t.finalize == nullptr) return "finalize";
  if (t.allreduce == nullptr) return "allreduce";
  if (t.allgatherv == nullptr) return "allgatherv";
  if (t.broadcast == nullptr) return "broadcast";
  if (t.alltoallv == nullptr) return "alltoallv";
  if (t.barrier == nullptr) return "barrier";
  if (t.last_error == nullptr) return "last_error";
  return nullptr;
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
  auto fn = reinterpret_cast<hvd_transport_plugin_v1_fn>(
      dlsym(dl, HVD_TRANSPORT_PLUGIN_V1_SYMBOL));
  const hvd_transport_v1_t* table = fn != nullptr ? fn() : nullptr;
  *bad_table = true;
  if (table == nullptr || table->abi_version != HVD_TRANSPORT_ABI_V1) {
    dlclose(dl);
    return Error(HVD_ERR_VERSION, "not an hvd transport plugin of ABI version " +
                                      std::to_string(HVD_TRANSPORT_ABI_V1) + " (no " +
                                      HVD_TRANSPORT_PLUGIN_V1_SYMBOL + " table of that version)");
  }
  if (const char* missing = MissingEntry(*table)) {
    dlclose(dl);
    return Error(HVD_ERR_VERSION, std::string("its ") + HVD_TRANSPORT_PLUGIN_V1_SYMBOL +
                                      " table lacks the required entry '" + missing +
                                      "' (NULL)");
  }
  Found f;
  f.table = table;
  f.dl = dl;
  auto fn2 = reinterpret_cast<hvd_transport_plugin_v2_fn>(
      dlsym(dl, HVD_TRANSPORT_PLUGIN_V2_SYMBOL));
  const hvd_transport_v2_t* t2 = fn2 != nullptr ? fn2() : nullptr;
  if (t2 != nullptr && t2->abi_version == HVD_TRANSPORT_ABI_V2 && t2->v1 == table) f.v2 = t2;
  if (f.v2 != nullptr) {
    auto fn3 = reinterpret_cast<hvd_transport_plugin_v3_fn>(
        dlsym(dl, HVD_TRANSPORT_PLUGIN_V3_SYMBOL));
    const hvd_transport_v3_t* t3 = fn3 != nullptr ? fn3() : nullptr;
    if (t3 != nullptr && t3->abi_version == HVD_TRANSPORT_ABI_V3 && t3->v2 == f.v2) f.v3 = t3;
  }
  *bad_table = false;
  return f;
}

// Built-in tables first, then libhvd_transport_<name>.so in each folder in
// turn. A candidate that does not load or is no usable plugin does not end
// the search: the next folder may hold a good one. When none serves, the
// message names every folder tried and what went wrong in each.
Result<Found> Find(const std::string& name, const std::string& search_path) {
  Found f;
  f.table = BuiltinTable(name);
#ifdef HVD_BUILTIN_GLOO
  if (name == "gloo") {
    f.v2 = hvd_gloo_transport_table_v2();
    f.v3 = hvd_gloo_transport_table_v3();
  }
#endif
  if (f.table != nullptr) {
    if (const char* missing = MissingEntry(*f.table)) {
      return Error(HVD_ERR_INTERNAL, "built-in transport '" + name + "' lacks the entry '" +
                                         missing + "'");
    }
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

int PluginKvGet(void* kv, const char* key, void** value, size_t* len, double timeout_s) noexcept {
  auto* s = static_cast<PluginKv*>(kv);
  if (s == nullptr || s->client == nullptr || key == nullptr || value == nullptr ||
      len == nullptr) {
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *value = nullptr;
  *len = 0;
  try {
    auto r = s->client->Get(s->prefix + key, timeout_s);
    if (!r.ok()) return r.status().code();
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

Status Transport::Check(const std::string& name, const std::string& search_path) {
  auto f = Find(name, search_path);
  if (!f.ok()) return f.status();
  if (f->dl != nullptr) dlclose(f->dl);
  return Status::Ok();
}

Result<std::unique_ptr<Transport>> Transport::Open(const std::string& name,
                                                   const std::string& search_path,
                                                   const hvd_transport_env_v1_t& env, Logger* log) {
  HVD_ASSIGN_OR_RETURN(Found f, Find(name, search_path));
  std::unique_ptr<Transport> t(new Transport());
  t->table_ = f.table;
  t->name_ = PersistentTransportName(f.table->name);
  t->v2_ = f.v2;
  t->v3_ = f.v3;
  t->dl_ = f.dl;
  char err[1024] = {0};
  int rc = f.table->init(&env, &t->comm_, err, sizeof(err));
  if (rc != HVD_OK || t->comm_ == nullptr) {
    err[sizeof(err) - 1] = '\0';
    hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
    t->comm_ = nullptr;
    return Error(code, "transport '" + name + "' failed to start: " +
                           (err[0] ? std::string(err) : std::string("no reason given")));
  }
  if (t->v2_ != nullptr && t->v2_->allreduce_spans != nullptr) {
    auto q = t->Query("allreduce_spans");
    t->spans_ = q.ok() && *q == 1;
  }
  HVD_LOG(*log, HVD_LOG_DEBUG, "transport '" << name << "' connected"
                                             << (f.dl ? " (plugin)" : " (built in)"));
  return t;
}

Transport::~Transport() {
  if (comm_ != nullptr) table_->finalize(comm_);
  if (dl_ != nullptr) dlclose(dl_);
}

Status Transport::Check(int rc, const char* what) {
  if (rc == HVD_OK) return Status::Ok();
  const char* msg = table_->last_error(comm_);
  hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
  return Error(code, std::string(name_) + " " + what + " failed: " +
                         (msg && *msg ? msg : "no reason given"));
}

Status Transport::Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  return Check(table_->allreduce(comm_, buf, count, dtype, op), "allreduce");
}
Status Transport::Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype,
                                hvd_reduce_op_t op) {
  if (!has_reducescatter()) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " has no reducescatter entry");
  }
  return Check(v2_->reducescatter(comm_, buf, counts, dtype, op), "reducescatter");
}
Status Transport::AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (!spans_) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " does not serve allreduce_spans");
  }
  return Check(v2_->allreduce_spans(comm_, spans, nspans, dtype, op), "allreduce");
}
Status Transport::Allgatherv(const void* send, void* recv, const size_t* recv_bytes) {
  return Check(table_->allgatherv(comm_, send, recv, recv_bytes), "allgather");
}
Status Transport::Broadcast(void* buf, size_t bytes, int root) {
  return Check(table_->broadcast(comm_, buf, bytes, root), "broadcast");
}
Status Transport::Alltoallv(const void* send, const size_t* send_bytes, void* recv,
                            const size_t* recv_bytes) {
  return Check(table_->alltoallv(comm_, send, send_bytes, recv, recv_bytes), "alltoall");
}
Status Transport::Barrier() { return Check(table_->barrier(comm_), "barrier"); }

Status Transport::SetTimeout(double timeout_s, int32_t kind) {
  if (!has_set_timeout()) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " has no set_timeout entry");
  }
  return Check(v3_->set_timeout(comm_, timeout_s, kind), "set_timeout");
}

Result<int64_t> Transport::Query(const std::string& key) const {
  int64_t v = 0;
  if (table_->query == nullptr || table_->query(comm_, key.c_str(), &v) != HVD_OK) {
    return Error(HVD_ERR_UNSUPPORTED,
                 std::string("the ") + name_ + " transport does not report '" + key + "'");
  }
  return v;
}

}  // namespace hvd
