#include "core/config/sources.h"

#include <unistd.h>

#include <cctype>
#include <sstream>

namespace hvd::config {
namespace {

std::string EnvStr(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? std::string() : std::string(v);
}

// A params field's value, when the caller's mask sets it. Returns whether
// it was set.
Result<bool> ReadParamValue(const hvd_params_t* p, const ParamField& f, Value* v) {
  bool set = false;
  if (auto* m = std::get_if<const char* hvd_params_t::*>(&f.member)) {
    const char* s = nullptr;
    HVD_ASSIGN_OR_RETURN(set, ReadParam(p, f.bit, f.offset, &(p->*(*m)), &s, f.name));
    v->text = s == nullptr ? "" : s;
  } else if (auto* m = std::get_if<int64_t hvd_params_t::*>(&f.member)) {
    HVD_ASSIGN_OR_RETURN(set, ReadParam(p, f.bit, f.offset, &(p->*(*m)), &v->i, f.name));
  } else if (auto* m = std::get_if<int32_t hvd_params_t::*>(&f.member)) {
    int32_t i = 0;
    HVD_ASSIGN_OR_RETURN(set, ReadParam(p, f.bit, f.offset, &(p->*(*m)), &i, f.name));
    v->i = i;
  } else if (auto* m = std::get_if<double hvd_params_t::*>(&f.member)) {
    HVD_ASSIGN_OR_RETURN(set, ReadParam(p, f.bit, f.offset, &(p->*(*m)), &v->d, f.name));
  }
  return set;
}

// The callbacks and handles only params can give.
Status FromParamCallbacks(const hvd_params_t* params, Config* c) {
  bool set = false;
  HVD_ASSIGN_OR_RETURN(set, HVD_READ_PARAM(params, HVD_PARAM_OOB, oob_allgather, &c->oob_allgather));
  if (set) {
    c->oob_user = params->oob_user;
    if (c->oob_allgather == nullptr) return InvalidArgument("params.oob_allgather is NULL");
  }
  HVD_ASSIGN_OR_RETURN(set, HVD_READ_PARAM(params, HVD_PARAM_LOG_FN, log_fn, &c->log_fn));
  if (set) c->log_user = params->log_user;
  void* comm = nullptr;
  HVD_ASSIGN_OR_RETURN(set, HVD_READ_PARAM(params, HVD_PARAM_MPI_COMM, mpi_comm, &comm));
  if (set) c->mpi_comm = comm;
  return Status::Ok();
}

// Every row with a variable in this column (HVD_* or HOROVOD_*) that no
// earlier source set, where the variable is set and not empty.
Status FromVariables(const EnvLookup& env, const char* Setting::*column, Resolution* r) {
  size_t count = 0;
  const Setting* rows = Settings(&count);
  for (size_t k = 0; k < count; ++k) {
    const char* var = rows[k].*column;
    if (var == nullptr || r->from[k] != nullptr) continue;
    const char* text = env(var);
    if (text == nullptr || *text == '\0') continue;
    HVD_ASSIGN_OR_RETURN(Value v, ParseText(rows[k], var, text));
    HVD_CHECK(Land(rows[k], k, var, v, r));
  }
  return Status::Ok();
}

// A switch's value: 1 on, 0 off, -1 unset; an error for anything else.
Result<int> EnvSwitch(const EnvLookup& env, const char* name) {
  std::string v = EnvStr(env, name);
  if (v.empty()) return -1;
  Setting any_switch{};
  any_switch.parse = Parse::kSwitch;
  HVD_ASSIGN_OR_RETURN(Value value, ParseText(any_switch, name, v));
  return static_cast<int>(value.i);
}

// A Horovod job's choice of CPU operations (or of its controller, which in
// hvd is the transport too): the transport where none was given, else the
// host transport beside a device-only one.
Status HorovodCpuOperations(const EnvLookup& env, Resolution* r) {
  Config& c = r->config;
  const bool transport_given = !c.transport.empty() || r->from[RowOf("transport")] != nullptr;
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
  return Status::Ok();
}

// Horovod's two hierarchical switches, where HVD_HIERARCHICAL is unset: hvd
// has one for every collective, on when either is on, off when those set
// are off.
Status HorovodHierarchical(const EnvLookup& env, Resolution* r) {
  if (r->from[RowOf("hierarchical")] != nullptr) return Status::Ok();
  HVD_ASSIGN_OR_RETURN(int ar, EnvSwitch(env, "HOROVOD_HIERARCHICAL_ALLREDUCE"));
  HVD_ASSIGN_OR_RETURN(int ag, EnvSwitch(env, "HOROVOD_HIERARCHICAL_ALLGATHER"));
  if (ar == 1 || ag == 1) {
    r->config.hierarchical = 1;
  } else if (ar == 0 || ag == 0) {
    r->config.hierarchical = 0;
  }
  return Status::Ok();
}

}  // namespace

Status CheckParams(const hvd_params_t* params) {
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
  return Status::Ok();
}

Status FromParams(const hvd_params_t* params, Resolution* r) {
  size_t count = 0;
  const Setting* rows = Settings(&count);
  for (size_t k = 0; k < count; ++k) {
    if (rows[k].param.bit == 0) continue;
    Value v;
    HVD_ASSIGN_OR_RETURN(bool set, ReadParamValue(params, rows[k].param, &v));
    if (set) HVD_CHECK(Land(rows[k], k, "params", v, r));
  }
  return FromParamCallbacks(params, &r->config);
}

Status FromHvdEnv(const EnvLookup& env, Resolution* r) {
  return FromVariables(env, &Setting::hvd, r);
}

Status FromHorovodEnv(const EnvLookup& env, Resolution* r) {
  HVD_CHECK(FromVariables(env, &Setting::horovod, r));
  HVD_CHECK(HorovodCpuOperations(env, r));
  // HOROVOD_TIMELINE=DYNAMIC (Horovod: a timeline started later, by
  // start_timeline) starts none at init.
  const char* timeline_from = r->from[RowOf("timeline_path")];
  if (timeline_from != nullptr && std::string(timeline_from) == "HOROVOD_TIMELINE" &&
      r->config.timeline_path == "DYNAMIC") {
    r->config.timeline_path.clear();
  }
  // Horovod's switch for its stall inspector: both limits off, unless a
  // limit is given.
  HVD_ASSIGN_OR_RETURN(int off, EnvSwitch(env, "HOROVOD_STALL_CHECK_DISABLE"));
  if (off == 1) {
    if (r->from[RowOf("stall_warning_s")] == nullptr) r->config.stall_warning_s = 0;
    if (r->from[RowOf("stall_shutdown_s")] == nullptr) r->config.stall_shutdown_s = 0;
  }
  return HorovodHierarchical(env, r);
}

void FromLauncherEnv(const EnvLookup& env, Resolution* r) {
  // torchrun style: MASTER_ADDR/MASTER_PORT name a store that rank 0 hosts.
  Config& c = r->config;
  if (c.rendezvous_addr.empty() && c.size > 1 && LauncherStoreAddress(env, &c.rendezvous_addr)) {
    c.host_store = (c.rank == 0);
  }
}

void FromDefaults(Resolution* r) {
  Config& c = r->config;
  if (c.hostname.empty()) {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) c.hostname = buf;
    if (c.hostname.empty()) c.hostname = "localhost";
  }
}

Status FromElasticEnv(const EnvLookup& env, Config* c) {
  const std::string elastic = EnvStr(env, "HVD_ELASTIC");
  if (elastic.empty() || elastic == "0" || c->rank_source == "params" || c->mpi_comm != nullptr ||
      c->oob_allgather != nullptr) {
    return Status::Ok();
  }
  c->elastic = true;
  c->rank_source = "elastic";
  c->elastic_worker = EnvStr(env, "HVD_ELASTIC_WORKER");
  if (c->elastic_worker.empty() || c->rendezvous_addr.empty()) {
    return InvalidArgument(
        "HVD_ELASTIC=1 needs HVD_ELASTIC_WORKER and HVD_RENDEZVOUS_ADDR (an elastic job is "
        "launched by hvdrun --min-np/--max-np/--host-discovery-script, which sets them)");
  }
  if (c->transport == "mpi") {
    return Error(HVD_ERR_UNSUPPORTED,
                 "an elastic job cannot use the mpi transport (an MPI communicator's membership "
                 "is fixed): use gloo or ucx");
  }
  const std::string timeout = EnvStr(env, "HVD_ELASTIC_TIMEOUT");
  if (!timeout.empty()) {
    HVD_CHECK(ParseNumber("HVD_ELASTIC_TIMEOUT", timeout, &c->elastic_timeout_s));
    if (!(c->elastic_timeout_s > 0)) {
      return InvalidArgument("HVD_ELASTIC_TIMEOUT must be a positive number of seconds");
    }
  }
  return Status::Ok();
}

}  // namespace hvd::config
