// Bootstrap's transports: the host transport chosen and opened over the
// rendezvous and topology (rendezvous.cc, topology.cc), and the device-only
// transport beside it, for the context and for its process sets.
#include "core/bootstrap/bootstrap.h"

#include <algorithm>

#include "common/kernels.h"
#include "common/netif.h"
#include "core/observability/start_report.h"

namespace hvd {

namespace {
// The transport's connection limit in an elastic epoch (see Run).
constexpr double kElasticConnectS = 10.0;
}  // namespace

Bootstrap::~Bootstrap() {
  client_.reset();
  server_.reset();
}

// HVD_TRANSPORT may name a transport for device memory only (the NCCL
// plugin: native collectives on CUDA buffers, no point-to-point, host
// memory refused). The negotiation and host tensors then need a host
// transport beside it: HVD_CPU_TRANSPORT's, else the usual choice.
Status Bootstrap::ResolveDeviceTransport() {
  host_request_ = cfg_->transport;
  device_name_.clear();
  const std::string& t = cfg_->transport;
  if (t.empty() || t == "mpi" || t == "gloo" || t == "local") return Status::Ok();
  auto caps = Transport::Capabilities(t, cfg_->transport_path);
  if (!caps.ok() || !Transport::DeviceOnly(*caps)) return Status::Ok();  // Open says why
  device_name_ = t;
  host_request_ = cfg_->cpu_transport;
  if (!host_request_.empty() && host_request_ != "mpi" && host_request_ != "gloo" &&
      host_request_ != "local") {
    auto hc = Transport::Capabilities(host_request_, cfg_->transport_path);
    if (hc.ok() && Transport::DeviceOnly(*hc)) {
      return InvalidArgument("HVD_CPU_TRANSPORT=" + host_request_ +
                             " is a transport for device memory only; the host transport "
                             "beside " + t + " must move host memory (gloo, mpi or ucx)");
    }
  }
  return Status::Ok();
}

void Bootstrap::SetTopology(hvd_transport_env_t* env) const {
  env->rank = cfg_->rank;
  env->size = cfg_->size;
  env->local_rank = cfg_->local_rank;
  env->local_size = cfg_->local_size;
  env->cross_rank = cfg_->cross_rank;
  env->cross_size = cfg_->cross_size;
}

// A device transport's options over `members` (context ranks): no
// shared-memory or hierarchical path (its collectives are all native), the
// members' entries of the host transport's host table.
TransportOptions Bootstrap::DeviceOptions(const Transport& host, const std::vector<int>& members) const {
  TransportOptions topts;
  topts.hostname = cfg_->hostname;
  topts.shm = false;
  topts.shm_switch = "a device transport";
  topts.hierarchical = 0;
  topts.host_id = cfg_->host_id;
  for (int r : members) {
    topts.hosts.push_back(host.host_of(r));
    topts.addresses.push_back(host.address_of(r));
  }
  return topts;
}

// The device-only transport, over the same ranks as the host one, with
// keys of its own in the store; no shared-memory or hierarchical path (its
// collectives are all native).
Status Bootstrap::OpenDevice(const hvd_transport_env_t& host_env, const Transport& host) {
  hvd_transport_env_t env = host_env;
  SetTopology(&env);  // as the host transport left it (MPI has the last word)
  if (client_) {
    device_kv_ = kv_;
    device_kv_.prefix = kv_.prefix + "device/";
    env.kv = &device_kv_;
  }
  std::vector<int> all(static_cast<size_t>(cfg_->size));
  for (int r = 0; r < cfg_->size; ++r) all[static_cast<size_t>(r)] = r;
  HVD_ASSIGN_OR_RETURN(device_, Transport::Open(device_name_, cfg_->transport_path, env,
                                                DeviceOptions(host, all), log_));
  HVD_LOG(*log_, HVD_LOG_INFO, "rank " << cfg_->rank << ": CUDA tensors over " << device_->name()
                                       << ", host tensors and the negotiation over the host transport");
  return Status::Ok();
}

Result<std::unique_ptr<Transport>> Bootstrap::OpenDeviceSet(const DeviceSet& set,
                                                        const Transport& host, PluginKv* kv) {
  if (device_name_.empty()) return Error(HVD_ERR_INTERNAL, "no device transport to open for a set");
  if (!client_ && set.members.size() > 1) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "a process set's CUDA tensors on the " + device_name_ +
                     " transport need the job's store (this job formed without one)");
  }
  hvd_transport_env_t env = host_env_;
  SetTopology(&env);
  env.rank = set.set_rank;
  env.size = static_cast<int32_t>(set.members.size());
  env.cross_rank = set.cross_rank;
  env.cross_size = set.cross_size;
  // local_rank and local_size stay the context's: they pick this rank's
  // device, which the set's tensors are on.
  if (client_) {  // else a set of one, which meets no one
    *kv = kv_;
    kv->prefix = kv_.prefix + "device/set" + std::to_string(set.generation) + "/";
    env.kv = kv;
  }
  return Transport::Open(device_name_, cfg_->transport_path, env, DeviceOptions(host, set.members),
                         log_);
}

// The host transport's options: the host table, the shared-memory and
// hierarchical paths, the forced algorithms.
TransportOptions Bootstrap::HostOptions(const std::string& transport) const {
  TransportOptions topts;
  topts.hostname = cfg_->hostname;
  topts.hosts = hosts_;  // the host table (env.hosts)
  topts.addresses = addresses_;
  // HVD_SHM decides; unset, the transport's older switch (HVD_GLOO_SHM,
  // HVD_MPI_SHM) does; unset too, on.
  const int older = transport == "gloo" ? cfg_->gloo_shm : transport == "mpi" ? cfg_->mpi_shm : -1;
  topts.shm = (cfg_->shm >= 0 ? cfg_->shm : older) != 0;
  topts.shm_switch = cfg_->shm >= 0 || older < 0 ? "HVD_SHM"
                     : transport == "gloo"      ? "HVD_GLOO_SHM"
                                                : "HVD_MPI_SHM";
  for (int c = 0; c < HVD_TRANSPORT_COLLECTIVES; ++c) topts.algorithm[c] = cfg_->algorithm[c];
  topts.hierarchical = cfg_->hierarchical;
  topts.reproducible = cfg_->reproducible;
  topts.fusion_in_place = cfg_->fusion_in_place != 0;
  topts.host_id = cfg_->host_id;
  return topts;
}

Result<std::unique_ptr<Transport>> Bootstrap::Run() {
  HVD_CHECK(ResolveDeviceTransport());
  std::string transport = ChooseTransport();
  // A transport asked for by name must exist even where another serves (a
  // world of one), so a typo or a missing plugin still fails.
  if (!host_request_.empty() && transport != host_request_) {
    HVD_CHECK(Transport::Check(host_request_, cfg_->transport_path));
  }
  if (cfg_->size > 1 && transport != "mpi") {
    HVD_CHECK(Rendezvous());
    HVD_CHECK(LearnHosts(HostFlags(transport)));
    ResolveLocalTopology();
    transport = ChooseAcrossHosts(transport);
  } else {
    OwnHostOnly();
  }
  HVD_LOG(*log_, HVD_LOG_DEBUG, "rank " << cfg_->rank << "/" << cfg_->size << " local "
                                       << cfg_->local_rank << "/" << cfg_->local_size << " cross "
                                       << cfg_->cross_rank << "/" << cfg_->cross_size << " from "
                                       << cfg_->rank_source << "; transport " << transport);

  hvd_transport_env_t env{};
  env.struct_size = sizeof(env);
  SetTopology(&env);
  if (client_) {
    env.kv = &kv_;
    env.kv_set = PluginKvSet;
    env.kv_get = PluginKvGet;
    env.kv_free = PluginKvFree;
  }
  env.logger = log_;
  env.log = Logger::PluginLog;
  env.reduce = hvd_reduce_kernel;
  env.timeout_s = cfg_->transport_timeout_s;
  env.start_timeout_s = cfg_->start_timeout_s;
  if (cfg_->elastic) {
    // Every member of an elastic epoch asked to join it moments ago: their
    // connections form within seconds, or a member died after publishing its
    // address (a failure while the epoch forms), which a transport only
    // notices at this limit. The reset that follows forms the next epoch.
    env.start_timeout_s = std::min(cfg_->start_timeout_s, kElasticConnectS);
  }
  // A CIDR setting names the interface with an address in it (the same
  // setting serves hosts whose interface names differ).
  iface_ = cfg_->network_interface;
  if (!iface_.empty()) {
    NetInterface nif;
    std::string why;
    if (!FindInterface(iface_, &nif, &why)) {
      return InvalidArgument("HVD_NETWORK_INTERFACE=" + iface_ + " on host " + cfg_->hostname + ": " + why);
    }
    iface_ = nif.name;
  }
  local_address_ = client_ ? client_->local_address() : "";
  // The settings of particular transports, as options each plugin reads.
  options_ = {{"network_interface", iface_.c_str(), nullptr},
              {"local_address", local_address_.c_str(), nullptr},
              {"mpi_comm", nullptr, cfg_->mpi_comm}};
  env.options = options_.data();
  env.noptions = options_.size();
  const TransportOptions topts = HostOptions(transport);
  HVD_ASSIGN_OR_RETURN(std::unique_ptr<Transport> opened,
                       Transport::Open(transport, cfg_->transport_path, env, topts, log_));
  ReportStartStage(StartStage::kReady, cfg_->hostname, *log_);
  // A transport that owns its communicator (MPI) has the last word on the
  // topology: a sub-communicator's rank differs from the launcher's.
  struct {
    const char* key;
    int* field;
  } topo[] = {{"rank", &cfg_->rank},           {"size", &cfg_->size},
              {"local_rank", &cfg_->local_rank}, {"local_size", &cfg_->local_size},
              {"cross_rank", &cfg_->cross_rank}, {"cross_size", &cfg_->cross_size}};
  for (auto& t : topo) {
    auto v = opened->Query(t.key);
    if (v.ok()) *t.field = static_cast<int>(*v);
  }
  host_env_ = env;
  if (!device_name_.empty()) {
    Status s = OpenDevice(env, *opened);
    if (!s.ok()) {
      // The host transport's peers are connected: tell them this rank is
      // going (it is destroyed here, before the error is returned).
      opened.reset();
      return s;
    }
  }
  return opened;
}

std::string Bootstrap::ChooseTransport() const {
  // An MPI communicator, or MPI asked for by name: the MPI transport, which
  // needs no rendezvous and defines rank and size itself.
  if (cfg_->mpi_comm != nullptr || host_request_ == "mpi") return "mpi";
  // A world of one needs no network: "local" serves it whatever was asked
  // for (Start checks that a named transport exists, so a typo still fails).
  if (cfg_->size == 1) return "local";
  if (!host_request_.empty()) return host_request_;
  // Launched by mpirun with no other way to meet: the MPI transport needs none.
  if (cfg_->rank_source == "mpi" && cfg_->rendezvous_addr.empty() && cfg_->oob_allgather == nullptr &&
      Transport::Available("mpi", cfg_->transport_path)) {
    return "mpi";
  }
  return "gloo";
}

}  // namespace hvd
