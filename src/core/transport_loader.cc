#include "core/transport_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cctype>
#include <cstring>
#include <sstream>

extern "C" const hvd_transport_v1_t* hvd_local_transport_table(void);
#ifdef HVD_BUILTIN_GLOO
extern "C" const hvd_transport_v1_t* hvd_gloo_transport_table(void);
extern "C" const hvd_transport_v2_t* hvd_gloo_transport_table_v2(void);
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
  void* dl = nullptr;
};

Result<Found> Find(const std::string& name, const std::string& search_path) {
  Found f;
  f.table = BuiltinTable(name);
#ifdef HVD_BUILTIN_GLOO
  if (name == "gloo") f.v2 = hvd_gloo_transport_table_v2();
#endif
  if (f.table != nullptr) return f;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return InvalidArgument("transport name '" + name + "' may hold only letters, digits and _");
    }
  }
  std::string file = "libhvd_transport_" + name + ".so";
  std::vector<std::string> dirs = SearchDirs(search_path);
  std::string looked;
  for (const std::string& dir : dirs) {
    std::string path = dir + "/" + file;
    looked += (looked.empty() ? "" : ", ") + dir;
    if (!FileExists(path)) continue;
    void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (dl == nullptr) {
      const char* err = dlerror();
      return Error(HVD_ERR_NOT_FOUND, "transport '" + name + "': cannot load " + path + ": " +
                                          (err ? err : "unknown dlopen error") +
                                          " (is the library it needs installed?)");
    }
    auto fn = reinterpret_cast<hvd_transport_plugin_v1_fn>(
        dlsym(dl, HVD_TRANSPORT_PLUGIN_V1_SYMBOL));
    const hvd_transport_v1_t* table = fn != nullptr ? fn() : nullptr;
    if (table == nullptr || table->abi_version != HVD_TRANSPORT_ABI_V1 || table->init == nullptr) {
      dlclose(dl);
      return Error(HVD_ERR_VERSION, "transport '" + name + "': " + path +
                                        " is not an hvd transport plugin of ABI version " +
                                        std::to_string(HVD_TRANSPORT_ABI_V1));
    }
    f.table = table;
    f.dl = dl;
    auto fn2 = reinterpret_cast<hvd_transport_plugin_v2_fn>(
        dlsym(dl, HVD_TRANSPORT_PLUGIN_V2_SYMBOL));
    const hvd_transport_v2_t* t2 = fn2 != nullptr ? fn2() : nullptr;
    if (t2 != nullptr && t2->abi_version == HVD_TRANSPORT_ABI_V2 && t2->v1 == table) f.v2 = t2;
    return f;
  }
  return Error(HVD_ERR_NOT_FOUND, "transport '" + name + "' is not available: " + file +
                                      " was not found in " + (looked.empty() ? "(no folders)" : looked) +
                                      " (set params.transport_path or HVD_TRANSPORT_PATH, or "
                                      "build hvd with that transport)");
}

}  // namespace

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
  t->v2_ = f.v2;
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
  if (comm_ != nullptr && table_->finalize != nullptr) table_->finalize(comm_);
  if (dl_ != nullptr) dlclose(dl_);
}

Status Transport::Check(int rc, const char* what) {
  if (rc == HVD_OK) return Status::Ok();
  const char* msg = table_->last_error != nullptr ? table_->last_error(comm_) : nullptr;
  hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
  return Error(code, std::string(table_->name) + " " + what + " failed: " +
                         (msg && *msg ? msg : "no reason given"));
}

Status Transport::Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  return Check(table_->allreduce(comm_, buf, count, dtype, op), "allreduce");
}
Status Transport::Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype,
                                hvd_reduce_op_t op) {
  if (!has_reducescatter()) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(table_->name) + " has no reducescatter entry");
  }
  return Check(v2_->reducescatter(comm_, buf, counts, dtype, op), "reducescatter");
}
Status Transport::AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (!spans_) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(table_->name) + " does not serve allreduce_spans");
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

Result<int64_t> Transport::Query(const std::string& key) const {
  int64_t v = 0;
  if (table_->query == nullptr || table_->query(comm_, key.c_str(), &v) != HVD_OK) {
    return Error(HVD_ERR_UNSUPPORTED,
                 std::string("the ") + table_->name + " transport does not report '" + key + "'");
  }
  return v;
}

}  // namespace hvd
