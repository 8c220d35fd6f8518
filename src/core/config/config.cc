#include "core/config/config.h"

#include <strings.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "algorithms/collectives.h"
#include "core/observability/logging.h"

namespace hvd {

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

namespace {

// Reads a field only if its mask bit is set and the caller's struct holds it.
class ParamReader {
 public:
  explicit ParamReader(const hvd_params_t* p) : p_(p) {}

  // `field` points into the caller's struct; it is read only after the mask
  // and struct_size checks, so an older (smaller) struct is never overread.
  template <typename T>
  Result<bool> Get(uint64_t bit, size_t offset, const T* field, T* out, const char* name) const {
    if (p_ == nullptr || (p_->mask & bit) == 0) return false;
    if (offset + sizeof(T) > p_->struct_size) {
      return InvalidArgument(std::string("params.mask sets ") + name +
                             " but params.struct_size (" + std::to_string(p_->struct_size) +
                             ") does not cover that field");
    }
    *out = *field;
    return true;
  }

 private:
  const hvd_params_t* p_;
};

#define HVD_PARAM_FIELD(reader, bit, field, out) \
  (reader).Get((bit), offsetof(hvd_params_t, field), &params->field, (out), #field)

Status ParseInt(const char* name, const char* text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    return InvalidArgument(std::string(name) + "='" + text + "' is not an integer");
  }
  *out = v;
  return Status::Ok();
}

Status ParseDouble(const char* name, const char* text, double* out) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v)) {
    return InvalidArgument(std::string(name) + "='" + text + "' is not a number");
  }
  *out = v;
  return Status::Ok();
}

// Returns true if the variable is set (and parsed).
Result<bool> EnvInt(const EnvLookup& env, const char* name, int64_t* out) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return false;
  HVD_CHECK(ParseInt(name, v, out));
  return true;
}

Result<bool> EnvDouble(const EnvLookup& env, const char* name, double* out) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return false;
  HVD_CHECK(ParseDouble(name, v, out));
  return true;
}

std::string EnvStr(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? std::string() : std::string(v);
}

// The variable to read for a setting that a Horovod job gives under its own
// name: hvd's when it is set (not empty), else Horovod's when that is set,
// else hvd's. Messages then name the variable the value came from.
const char* Pick(const EnvLookup& env, const char* hvd_name, const char* horovod_name) {
  const char* v = env(hvd_name);
  if (v != nullptr && *v != '\0') return hvd_name;
  const char* h = env(horovod_name);
  return h != nullptr && *h != '\0' ? horovod_name : hvd_name;
}

// A switch's value: 1 on, 0 off, -1 unset; an error for anything else.
Result<int> EnvSwitch(const EnvLookup& env, const char* name) {
  std::string v = EnvStr(env, name);
  for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (v.empty()) return -1;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return 1;
  if (v == "0" || v == "false" || v == "no" || v == "off") return 0;
  return InvalidArgument(std::string(name) + "='" + EnvStr(env, name) +
                         "' is not one of 1, 0, true, false, yes, no, on, off");
}

// A launcher's view of the topology. Any of the fields may be missing (-1).
struct Topology {
  int64_t rank = -1, size = -1, local_rank = -1, local_size = -1, cross_rank = -1,
          cross_size = -1;
};

// Tries one launcher: rank and size variables are required, the rest optional.
Result<bool> ReadLauncher(const EnvLookup& env, const char* rank_var, const char* size_var,
                          const char* local_rank_var, const char* local_size_var,
                          const char* cross_rank_var, const char* cross_size_var, Topology* t) {
  HVD_ASSIGN_OR_RETURN(bool has_rank, EnvInt(env, rank_var, &t->rank));
  HVD_ASSIGN_OR_RETURN(bool has_size, EnvInt(env, size_var, &t->size));
  if (!has_rank || !has_size) return false;
  if (local_rank_var) HVD_CHECK(EnvInt(env, local_rank_var, &t->local_rank).status());
  if (local_size_var) HVD_CHECK(EnvInt(env, local_size_var, &t->local_size).status());
  if (cross_rank_var) HVD_CHECK(EnvInt(env, cross_rank_var, &t->cross_rank).status());
  if (cross_size_var) HVD_CHECK(EnvInt(env, cross_size_var, &t->cross_size).status());
  return true;
}

// Slurm's SLURM_TASKS_PER_NODE looks like "2(x3),1": tasks per node, in node
// order. Returns the count for node index `node`, or -1.
int64_t SlurmTasksOnNode(const std::string& spec, int64_t node) {
  std::stringstream ss(spec);
  std::string item;
  int64_t index = 0;
  while (std::getline(ss, item, ',')) {
    int64_t tasks = std::atoll(item.c_str());
    int64_t repeat = 1;
    size_t x = item.find("(x");
    if (x != std::string::npos) repeat = std::atoll(item.c_str() + x + 2);
    if (node < index + repeat) return tasks;
    index += repeat;
  }
  return -1;
}

Status ResolveTopology(const hvd_params_t* params, const EnvLookup& env, Config* c) {
  Topology t;
  std::string source;

  ParamReader r(params);
  int32_t v = 0;
  HVD_ASSIGN_OR_RETURN(bool p_rank, HVD_PARAM_FIELD(r, HVD_PARAM_RANK, rank, &v));
  if (p_rank) t.rank = v;
  HVD_ASSIGN_OR_RETURN(bool p_size, HVD_PARAM_FIELD(r, HVD_PARAM_SIZE, size, &v));
  if (p_size) t.size = v;
  if (p_rank != p_size) {
    return InvalidArgument("params: set both rank and size, or neither");
  }
  if (p_rank) source = "params";

  bool found = p_rank;
  if (!found) {
    HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, "HVD_RANK", "HVD_SIZE", "HVD_LOCAL_RANK",
                                             "HVD_LOCAL_SIZE", "HVD_CROSS_RANK",
                                             "HVD_CROSS_SIZE", &t));
    if (found) source = "hvdrun";
  }
  if (!found) {
    HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                             "LOCAL_WORLD_SIZE", "GROUP_RANK", nullptr, &t));
    if (found) {
      source = "torchrun";
      if (t.cross_rank >= 0 && t.local_size > 0 && t.size % t.local_size == 0) {
        t.cross_size = t.size / t.local_size;
      } else {
        t.cross_rank = -1;
      }
    }
  }
  if (!found) {
    HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                             "OMPI_COMM_WORLD_LOCAL_RANK",
                                             "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr, &t));
    if (found) source = "mpi";
  }
  if (!found) {
    HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK",
                                             "PMIX_LOCAL_SIZE", nullptr, nullptr, &t));
    if (!found) {
      HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                               "MPI_LOCALNRANKS", nullptr, nullptr, &t));
    }
    if (found) source = "pmi";
  }
  if (!found) {
    HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, "SLURM_PROCID", "SLURM_NTASKS",
                                             "SLURM_LOCALID", nullptr, "SLURM_NODEID",
                                             "SLURM_NNODES", &t));
    if (found) {
      source = "slurm";
      std::string per_node = EnvStr(env, "SLURM_STEP_TASKS_PER_NODE");
      if (per_node.empty()) per_node = EnvStr(env, "SLURM_TASKS_PER_NODE");
      if (!per_node.empty() && t.cross_rank >= 0) {
        t.local_size = SlurmTasksOnNode(per_node, t.cross_rank);
      }
      // Cross rank (index among ranks with the same local rank) equals the
      // node index only when every node runs the same number of tasks.
      if (t.cross_size > 0 && t.size != t.cross_size * t.local_size) {
        t.cross_rank = t.cross_size = -1;
      }
    }
  }

  if (!found) {
    t = Topology{0, 1, 0, 1, 0, 1};
    source = "none";
  }

  // Explicit local/cross params override whatever the launcher said.
  HVD_ASSIGN_OR_RETURN(bool p, HVD_PARAM_FIELD(r, HVD_PARAM_LOCAL_RANK, local_rank, &v));
  if (p) t.local_rank = v;
  HVD_ASSIGN_OR_RETURN(p, HVD_PARAM_FIELD(r, HVD_PARAM_LOCAL_SIZE, local_size, &v));
  if (p) t.local_size = v;
  HVD_ASSIGN_OR_RETURN(p, HVD_PARAM_FIELD(r, HVD_PARAM_CROSS_RANK, cross_rank, &v));
  if (p) t.cross_rank = v;
  HVD_ASSIGN_OR_RETURN(p, HVD_PARAM_FIELD(r, HVD_PARAM_CROSS_SIZE, cross_size, &v));
  if (p) t.cross_size = v;

  if (t.size < 1 || t.size > (1 << 24)) {
    return InvalidArgument("size " + std::to_string(t.size) + " (from " + source +
                           ") must be between 1 and 16777216");
  }
  if (t.rank < 0 || t.rank >= t.size) {
    return InvalidArgument("rank " + std::to_string(t.rank) + " (from " + source +
                           ") is outside [0, " + std::to_string(t.size) + ")");
  }
  if (t.size == 1) t = Topology{0, 1, 0, 1, 0, 1};
  bool local_ok = t.local_size >= 1 && t.local_rank >= 0 && t.local_rank < t.local_size &&
                  t.local_size <= t.size;
  if (!local_ok) t.local_rank = t.local_size = -1;
  bool cross_ok = t.cross_size >= 1 && t.cross_rank >= 0 && t.cross_rank < t.cross_size;
  if (!cross_ok) t.cross_rank = t.cross_size = -1;

  c->rank = static_cast<int>(t.rank);
  c->size = static_cast<int>(t.size);
  c->local_rank = static_cast<int>(t.local_rank);
  c->local_size = static_cast<int>(t.local_size);
  c->cross_rank = static_cast<int>(t.cross_rank);
  c->cross_size = static_cast<int>(t.cross_size);
  c->rank_source = source;
  return Status::Ok();
}

}  // namespace

std::string Config::ToString() const {
  std::ostringstream os;
  os << "rank=" << rank << " size=" << size << " local_rank=" << local_rank
     << " local_size=" << local_size << " cross_rank=" << cross_rank
     << " cross_size=" << cross_size << " rank_source=" << rank_source
     << " transport=" << (transport.empty() ? "(auto)" : transport)
     << " cpu_transport=" << (cpu_transport.empty() ? "(auto)" : cpu_transport)
     << " transport_path=" << (transport_path.empty() ? "(next to libhvd.so)" : transport_path)
     << " rendezvous=" << (rendezvous_addr.empty() ? "(none)" : rendezvous_addr)
     << (host_store ? " (hosted here)" : "") << " oob=" << (oob_allgather ? "yes" : "no")
     << " secret=" << (secret.empty() ? "(none)" : "(set)")
     << " network_interface=" << (network_interface.empty() ? "(auto)" : network_interface)
     << " fusion_threshold=" << fusion_threshold << " cycle_time_ms=" << cycle_time_ms
     << " cache_capacity=" << cache_capacity << " stall_warning_s=" << stall_warning_s
     << " stall_shutdown_s=" << stall_shutdown_s << " start_timeout_s=" << start_timeout_s
     << " transport_timeout_s=" << transport_timeout_s << " peer_timeout_s=" << peer_timeout_s
     << " timeline=" << (timeline_path.empty() ? "(off)" : timeline_path)
     << " fusion_buffer_initial=" << fusion_buffer_initial
     << " buffer_pool_bytes=" << buffer_pool_bytes
     << " shm=" << (shm < 0 ? "(auto)" : shm ? "on" : "off")
     << " piggyback=" << (piggyback == 0 ? "off" : "on")
     << " cuda_async_completion=" << (cuda_async_completion == 1 ? "on" : "off")
     << " autotune=" << (autotune ? "on" : "off")
     << " elastic=" << (elastic ? "on (worker " + elastic_worker + ")" : std::string("off"))
     << " log_level=" << LogLevelName(log_level);
  return os.str();
}

Result<Config> ResolveConfig(const hvd_params_t* params, const EnvLookup& env) {
  Config c;
  // No params: read nothing from an empty struct (no field access through NULL).
  hvd_params_t none = HVD_PARAMS_INIT;
  if (params == nullptr) params = &none;
  if (params != nullptr) {
    if (params->struct_size < offsetof(hvd_params_t, rank)) {
      return InvalidArgument("params.struct_size (" + std::to_string(params->struct_size) +
                             ") is too small: initialise params with HVD_PARAMS_INIT");
    }
    uint64_t unknown = params->mask & ~static_cast<uint64_t>(HVD_PARAM_ALL_);
    if (unknown != 0) {
      std::ostringstream os;
      os << "params.mask has bits this library (version " << HVD_VERSION_MAJOR << "."
         << HVD_VERSION_MINOR << "." << HVD_VERSION_PATCH << ") does not know: 0x" << std::hex
         << unknown;
      return Error(HVD_ERR_UNSUPPORTED, os.str());
    }
  }
  HVD_CHECK(ResolveTopology(params, env, &c));

  ParamReader r(params);
  const char* s = nullptr;
  int64_t i64 = 0;
  int32_t i32 = 0;
  double d = 0;
  bool set = false;

  // Strings: params, then environment.
  auto str_setting = [&](uint64_t bit, size_t offset, const char* const* field, const char* name,
                         const char* env_name, std::string* out) -> Status {
    HVD_ASSIGN_OR_RETURN(bool have, r.Get(bit, offset, field, &s, name));
    if (have) {
      *out = s == nullptr ? "" : s;
    } else if (env_name != nullptr) {
      *out = EnvStr(env, env_name);
    }
    return Status::Ok();
  };

#define HVD_STR(bit, field, env_name, out)                                                   \
  HVD_CHECK(str_setting((bit), offsetof(hvd_params_t, field),                                \
                        &params->field, #field, (env_name), (out)))

  HVD_STR(HVD_PARAM_TRANSPORT, transport, "HVD_TRANSPORT", &c.transport);
  c.cpu_transport = EnvStr(env, "HVD_CPU_TRANSPORT");
  const bool transport_given =
      !c.transport.empty() || (params != nullptr && (params->mask & HVD_PARAM_TRANSPORT) != 0);
  {
    // A Horovod job's choice of CPU operations (or of its controller, which
    // in hvd is the transport too): the transport where none was given,
    // else the host transport beside a device-only one.
    std::string* into = transport_given ? &c.cpu_transport : &c.transport;
    for (const char* name : {"HOROVOD_CPU_OPERATIONS", "HOROVOD_CONTROLLER"}) {
      if (!into->empty()) break;
      std::string v = EnvStr(env, name);
      for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (v.empty()) continue;
      if (v != "gloo" && v != "mpi") {
        return InvalidArgument(std::string(name) + "='" + EnvStr(env, name) +
                               "': hvd's CPU transports are gloo, mpi and ucx (HVD_TRANSPORT); "
                               "it has no '" + v + "'");
      }
      *into = v;
      break;
    }
  }
  HVD_STR(HVD_PARAM_RENDEZVOUS_ADDR, rendezvous_addr, "HVD_RENDEZVOUS_ADDR", &c.rendezvous_addr);
  HVD_STR(HVD_PARAM_SECRET, secret, "HVD_SECRET", &c.secret);
  {
    // HOROVOD_TIMELINE=DYNAMIC (Horovod: a timeline started later, by
    // start_timeline) starts none at init.
    const char* name = Pick(env, "HVD_TIMELINE", "HOROVOD_TIMELINE");
    HVD_STR(HVD_PARAM_TIMELINE, timeline_path, name, &c.timeline_path);
    if (std::strcmp(name, "HOROVOD_TIMELINE") == 0 && c.timeline_path == "DYNAMIC") {
      c.timeline_path.clear();
    }
  }
  HVD_STR(HVD_PARAM_NETWORK_INTERFACE, network_interface, "HVD_NETWORK_INTERFACE",
          &c.network_interface);
  HVD_STR(HVD_PARAM_TRANSPORT_PATH, transport_path, "HVD_TRANSPORT_PATH", &c.transport_path);
#undef HVD_STR

  // torchrun style: MASTER_ADDR/MASTER_PORT name a store that rank 0 hosts.
  if (c.rendezvous_addr.empty() && c.size > 1) {
    std::string addr = EnvStr(env, "MASTER_ADDR");
    std::string port = EnvStr(env, "MASTER_PORT");
    if (!addr.empty() && !port.empty()) {
      c.rendezvous_addr = (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + port;
      c.host_store = (c.rank == 0);
    }
  }

  if (params != nullptr) {
    HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_OOB, oob_allgather, &c.oob_allgather));
    if (set) {
      c.oob_user = params->oob_user;
      if (c.oob_allgather == nullptr) return InvalidArgument("params.oob_allgather is NULL");
    }
    HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_LOG_FN, log_fn, &c.log_fn));
    if (set) c.log_user = params->log_user;
    void* comm = nullptr;
    HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_MPI_COMM, mpi_comm, &comm));
    if (set) c.mpi_comm = comm;
  }

  // Numbers: params, then environment, then the default already in c.
  HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_FUSION_THRESHOLD, fusion_threshold_bytes, &i64));
  if (!set) { HVD_ASSIGN_OR_RETURN(set, EnvInt(env, Pick(env, "HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"), &i64)); }
  if (set) {
    if (i64 < 0) return InvalidArgument("fusion threshold must be >= 0 bytes");
    c.fusion_threshold = i64;
  }
  HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_CYCLE_TIME, cycle_time_ms, &d));
  if (!set) { HVD_ASSIGN_OR_RETURN(set, EnvDouble(env, Pick(env, "HVD_CYCLE_TIME", "HOROVOD_CYCLE_TIME"), &d)); }
  if (set) {
    if (!(d >= 0 && d <= 10000)) return InvalidArgument("cycle time must be in [0, 10000] ms");
    c.cycle_time_ms = d;
  }
  HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_CACHE_CAPACITY, cache_capacity, &i32));
  if (set) {
    i64 = i32;
  } else {
    HVD_ASSIGN_OR_RETURN(set, EnvInt(env, Pick(env, "HVD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY"), &i64));
  }
  if (set) {
    if (i64 < 0 || i64 > (1 << 20)) return InvalidArgument("cache capacity must be in [0, 1048576]");
    c.cache_capacity = static_cast<int>(i64);
  }

  // Buffer sizes (bytes): environment only.
  {
    struct Size {
      const char* name;
      int64_t* out;
    };
    const Size sizes[] = {
        {"HVD_FUSION_BUFFER_INITIAL", &c.fusion_buffer_initial},
        {"HVD_BUFFER_POOL_SIZE", &c.buffer_pool_bytes},
    };
    for (const Size& z : sizes) {
      HVD_ASSIGN_OR_RETURN(set, EnvInt(env, z.name, &i64));
      if (!set) continue;
      if (i64 < 0 || i64 > (int64_t{1} << 50)) {
        return InvalidArgument(std::string(z.name) + "=" + std::to_string(i64) +
                               " must be in [0, 2^50] bytes");
      }
      *z.out = i64;
    }
  }

  struct Seconds {
    uint64_t bit;
    size_t offset;
    const double* field;
    const char* name;
    const char* env_name;
    double* out;
    bool allow_off;
    const char* horovod_name;  // Horovod's variable for it (seconds too)
  };
  const Seconds seconds[] = {
      {HVD_PARAM_STALL_WARNING, offsetof(hvd_params_t, stall_warning_s),
       &params->stall_warning_s, "stall_warning_s", "HVD_STALL_WARNING_TIME",
       &c.stall_warning_s, true, "HOROVOD_STALL_CHECK_TIME_SECONDS"},
      {HVD_PARAM_STALL_SHUTDOWN, offsetof(hvd_params_t, stall_shutdown_s),
       &params->stall_shutdown_s, "stall_shutdown_s", "HVD_STALL_SHUTDOWN_TIME",
       &c.stall_shutdown_s, true, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"},
      {HVD_PARAM_START_TIMEOUT, offsetof(hvd_params_t, start_timeout_s),
       &params->start_timeout_s, "start_timeout_s", "HVD_START_TIMEOUT",
       &c.start_timeout_s, false, nullptr},
      {HVD_PARAM_TRANSPORT_TIMEOUT, offsetof(hvd_params_t, transport_timeout_s),
       &params->transport_timeout_s, "transport_timeout_s",
       "HVD_TRANSPORT_TIMEOUT", &c.transport_timeout_s, false, "HOROVOD_GLOO_TIMEOUT_SECONDS"},
      {HVD_PARAM_PEER_TIMEOUT, offsetof(hvd_params_t, peer_timeout_s), &params->peer_timeout_s,
       "peer_timeout_s", "HVD_PEER_TIMEOUT", &c.peer_timeout_s, true, nullptr},
  };
  {
    // Horovod's switch for its stall inspector: both limits off, unless a
    // limit is given (below, which wins).
    HVD_ASSIGN_OR_RETURN(int off, EnvSwitch(env, "HOROVOD_STALL_CHECK_DISABLE"));
    if (off == 1) c.stall_warning_s = c.stall_shutdown_s = 0;
  }
  for (const Seconds& sec : seconds) {
    HVD_ASSIGN_OR_RETURN(set, r.Get(sec.bit, sec.offset, sec.field, &d, sec.name));
    if (!set) {
      const char* name =
          sec.horovod_name ? Pick(env, sec.env_name, sec.horovod_name) : sec.env_name;
      HVD_ASSIGN_OR_RETURN(set, EnvDouble(env, name, &d));
    }
    if (!set) continue;
    if (!sec.allow_off && !(d > 0)) {
      return InvalidArgument(std::string(sec.name) + " must be > 0 seconds");
    }
    *sec.out = d;
  }

  HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_LOG_LEVEL, log_level, &i32));
  if (set) {
    if (i32 < HVD_LOG_ERROR || i32 > HVD_LOG_TRACE) {
      return InvalidArgument("log_level must be one of HVD_LOG_ERROR..HVD_LOG_TRACE");
    }
    c.log_level = i32;
  } else {
    const char* name = Pick(env, "HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL");
    std::string lv = EnvStr(env, name);
    if (!lv.empty()) {
      int level = ParseLogLevel(lv);
      // Horovod's FATAL: hvd's least, error.
      if (level < 0 && strcasecmp(lv.c_str(), "fatal") == 0) level = HVD_LOG_ERROR;
      if (level < 0) {
        return InvalidArgument(std::string(name) + "='" + lv +
                               "' is not one of error, warning, info, debug, trace");
      }
      c.log_level = level;
    }
  }

  // Autotuning: the switch from params or the environment; the tuner's knobs
  // from the environment only, as they are experiment settings.
  {
    HVD_ASSIGN_OR_RETURN(set, HVD_PARAM_FIELD(r, HVD_PARAM_AUTOTUNE, autotune, &i32));
    const char* name = Pick(env, "HVD_AUTOTUNE", "HOROVOD_AUTOTUNE");
    std::string v = set ? std::string() : EnvStr(env, name);
    if (set) {
      if (i32 != 0 && i32 != 1) {
        return InvalidArgument("params.autotune is " + std::to_string(i32) +
                               "; it must be 0 (off) or 1 (on)");
      }
      c.autotune = i32 == 1;
    } else if (v == "1" || v == "true" || v == "yes" || v == "on") {
      c.autotune = true;
    } else if (!v.empty() && v != "0" && v != "false" && v != "no" && v != "off") {
      return InvalidArgument(std::string(name) + "='" + v +
                             "' is not one of 1, 0, true, false, yes, no, on, off");
    }
    c.autotune_log = EnvStr(env, Pick(env, "HVD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG"));
    struct Count {
      const char* name;
      int* out;
      int lo, hi;
      const char* horovod_name;
    };
    const Count counts[] = {
        {"HVD_AUTOTUNE_WARMUP_SAMPLES", &c.autotune_warmup_samples, 0, 1000,
         "HOROVOD_AUTOTUNE_WARMUP_SAMPLES"},
        {"HVD_AUTOTUNE_STEPS_PER_SAMPLE", &c.autotune_steps_per_sample, 1, 1000000,
         "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"},
        {"HVD_AUTOTUNE_SAMPLES", &c.autotune_samples, 1, 1000, nullptr},
    };
    for (const Count& k : counts) {
      const char* kname = k.horovod_name ? Pick(env, k.name, k.horovod_name) : k.name;
      HVD_ASSIGN_OR_RETURN(set, EnvInt(env, kname, &i64));
      if (!set) continue;
      if (i64 < k.lo || i64 > k.hi) {
        return InvalidArgument(std::string(kname) + " must be in [" + std::to_string(k.lo) + ", " +
                               std::to_string(k.hi) + "]");
      }
      *k.out = static_cast<int>(i64);
    }
  }

  // Collective algorithms: the switches, and the overrides checked here so a
  // misspelt one fails at start, naming the setting.
  {
    struct Switch {
      const char* name;
      int* out;
    };
    const Switch switches[] = {{"HVD_SHM", &c.shm},
                               {"HVD_GLOO_SHM", &c.gloo_shm},
                               {"HVD_MPI_SHM", &c.mpi_shm},
                               {"HVD_HIERARCHICAL", &c.hierarchical},
                               {"HVD_FUSION_IN_PLACE", &c.fusion_in_place},
                               {"HVD_CALLER_CYCLES", &c.caller_cycles},
                               {"HVD_PIGGYBACK", &c.piggyback},
                               {"HVD_CUDA_ASYNC_COMPLETION", &c.cuda_async_completion}};
    c.host_id = EnvStr(env, "HVD_HOST_ID");
    for (const Switch& w : switches) {
      HVD_ASSIGN_OR_RETURN(int v, EnvSwitch(env, w.name));
      if (v >= 0) *w.out = v;
    }
    // Horovod's two switches, where HVD_HIERARCHICAL is unset: hvd has one
    // for every collective, on when either is on, off when those set are off.
    if (c.hierarchical < 0) {
      HVD_ASSIGN_OR_RETURN(int ar, EnvSwitch(env, "HOROVOD_HIERARCHICAL_ALLREDUCE"));
      HVD_ASSIGN_OR_RETURN(int ag, EnvSwitch(env, "HOROVOD_HIERARCHICAL_ALLGATHER"));
      if (ar == 1 || ag == 1) {
        c.hierarchical = 1;
      } else if (ar == 0 || ag == 0) {
        c.hierarchical = 0;
      }
    }
    if (c.cuda_async_completion < 0) {
      HVD_ASSIGN_OR_RETURN(c.cuda_async_completion,
                           EnvSwitch(env, "HOROVOD_ENABLE_ASYNC_COMPLETION"));
    }
    HVD_ASSIGN_OR_RETURN(
        int mark, EnvSwitch(env, Pick(env, "HVD_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES")));
    c.timeline_mark_cycles = mark == 1;
    const char* const names[6] = {"HVD_ALGORITHM_ALLREDUCE", "HVD_ALGORITHM_ALLGATHER",
                                  "HVD_ALGORITHM_BROADCAST", "HVD_ALGORITHM_ALLTOALL",
                                  "HVD_ALGORITHM_REDUCESCATTER", "HVD_ALGORITHM_BARRIER"};
    for (int k = 0; k < 6; ++k) {
      c.algorithm[k] = EnvStr(env, names[k]);
      HVD_CHECK(algo::ParseAlgorithm(k, names[k], c.algorithm[k]).status());
    }
  }

  c.hostname = EnvStr(env, "HVD_HOSTNAME");
  if (c.hostname.empty()) {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) c.hostname = buf;
    if (c.hostname.empty()) c.hostname = "localhost";
  }

  const std::string elastic = EnvStr(env, "HVD_ELASTIC");
  if (!elastic.empty() && elastic != "0" && c.rank_source != "params" && c.mpi_comm == nullptr &&
      c.oob_allgather == nullptr) {
    c.elastic = true;
    c.rank_source = "elastic";
    c.elastic_worker = EnvStr(env, "HVD_ELASTIC_WORKER");
    if (c.elastic_worker.empty() || c.rendezvous_addr.empty()) {
      return InvalidArgument(
          "HVD_ELASTIC=1 needs HVD_ELASTIC_WORKER and HVD_RENDEZVOUS_ADDR (an elastic job is "
          "launched by hvdrun --min-np/--max-np/--host-discovery-script, which sets them)");
    }
    if (c.transport == "mpi") {
      return Error(HVD_ERR_UNSUPPORTED,
                   "an elastic job cannot use the mpi transport (an MPI communicator's membership "
                   "is fixed): use gloo or ucx");
    }
    HVD_ASSIGN_OR_RETURN(bool have_timeout,
                         EnvDouble(env, "HVD_ELASTIC_TIMEOUT", &c.elastic_timeout_s));
    if (have_timeout && !(c.elastic_timeout_s > 0)) {
      return InvalidArgument("HVD_ELASTIC_TIMEOUT must be a positive number of seconds");
    }
  }
  return c;
}

}  // namespace hvd
