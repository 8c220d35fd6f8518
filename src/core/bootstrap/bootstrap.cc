#include "core/bootstrap/bootstrap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "common/kernels.h"
#include "common/netif.h"
#include "core/observability/start_report.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

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
// members' host names as the host transport learnt them.
TransportOptions Bootstrap::DeviceOptions(const Transport& host, const std::vector<int>& members) const {
  TransportOptions topts;
  topts.hostname = cfg_->hostname;
  topts.shm = false;
  topts.shm_switch = "a device transport";
  topts.hierarchical = 0;
  topts.host_id = cfg_->host_id;
  for (int r : members) topts.hosts.push_back(host.host_of(r));
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
    HVD_CHECK(ResolveLocalTopology());
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
  TransportOptions topts;
  topts.hostname = cfg_->hostname;
  topts.hosts = hosts_;  // the host table, where the rendezvous learnt it
  // HVD_SHM decides; unset, the transport's older switch (HVD_GLOO_SHM,
  // HVD_MPI_SHM) does; unset too, on.
  const int older = transport == "gloo" ? cfg_->gloo_shm : transport == "mpi" ? cfg_->mpi_shm : -1;
  topts.shm = (cfg_->shm >= 0 ? cfg_->shm : older) != 0;
  topts.shm_switch = cfg_->shm >= 0 || older < 0 ? "HVD_SHM"
                     : transport == "gloo"      ? "HVD_GLOO_SHM"
                                                : "HVD_MPI_SHM";
  for (int c = 0; c < HVD_TRANSPORT_COLLECTIVES; ++c) topts.algorithm[c] = cfg_->algorithm[c];
  topts.hierarchical = cfg_->hierarchical;
  topts.fusion_in_place = cfg_->fusion_in_place != 0;
  topts.host_id = cfg_->host_id;
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

Status Bootstrap::Rendezvous() {
  const double timeout = cfg_->start_timeout_s;
  std::string host;
  int port = 0;
  std::string secret = cfg_->secret;

  if (cfg_->oob_allgather != nullptr) {
    // Rank 0 hosts a store; everyone learns where through the callback.
    constexpr size_t kBlob = 256;
    struct Blob {
      char addr[64];
      char port[16];
      char secret[128];
    };
    static_assert(sizeof(Blob) <= kBlob, "blob");
    std::vector<uint8_t> send(kBlob, 0), recv(kBlob * static_cast<size_t>(cfg_->size), 0);
    if (cfg_->rank == 0) {
      if (secret.empty()) secret = rdv::NewSecret();
      std::string addr = cfg_->local_size == cfg_->size ? std::string("127.0.0.1") : DefaultHostAddress();
      if (!cfg_->network_interface.empty()) {
        NetInterface nif;
        std::string why;
        if (!FindInterface(cfg_->network_interface, &nif, &why)) {
          return Error(HVD_ERR_RENDEZVOUS, "HVD_NETWORK_INTERFACE=" + cfg_->network_interface + ": " + why);
        }
        addr = nif.address;
      }
      HVD_ASSIGN_OR_RETURN(server_, rdv::StoreServer::Start("", 0, secret));
      Blob b{};
      std::snprintf(b.addr, sizeof(b.addr), "%s", addr.c_str());
      std::snprintf(b.port, sizeof(b.port), "%d", server_->port());
      std::snprintf(b.secret, sizeof(b.secret), "%s", secret.c_str());
      std::memcpy(send.data(), &b, sizeof(b));
    }
    int rc = cfg_->oob_allgather(send.data(), recv.data(), kBlob, cfg_->oob_user);
    if (rc != 0) {
      return Error(HVD_ERR_RENDEZVOUS,
                   "the out-of-band allgather callback failed (returned " + std::to_string(rc) + ")");
    }
    Blob b{};
    std::memcpy(&b, recv.data(), sizeof(b));
    b.addr[sizeof(b.addr) - 1] = b.port[sizeof(b.port) - 1] = b.secret[sizeof(b.secret) - 1] = 0;
    host = cfg_->rank == 0 ? "127.0.0.1" : b.addr;
    port = std::atoi(b.port);
    secret = b.secret;
    if (port <= 0) {
      return Error(HVD_ERR_RENDEZVOUS,
                   "the out-of-band allgather did not deliver rank 0's store address (is the "
                   "callback copying rank r's bytes to offset r * bytes?)");
    }
  } else if (!cfg_->rendezvous_addr.empty()) {
    HVD_CHECK(rdv::ParseHostPort(cfg_->rendezvous_addr, &host, &port)
                  .Wrap("rendezvous address '" + cfg_->rendezvous_addr + "'"));
    const bool authenticated = !secret.empty();
    if (!authenticated) {
      // torchrun-style launches carry no secret (torchrun shares none a
      // secret could be derived from): every rank uses the same well-known
      // key, which checks integrity but does not authenticate.
      secret = "6876642d6e6f2d736563726574";  // hex of "hvd-no-secret"
      if (!cfg_->host_store) {
        HVD_LOG(*log_, HVD_LOG_INFO,
                "no HVD_SECRET: the rendezvous store at " << cfg_->rendezvous_addr
                                                          << " is not authenticated");
      }
    }
    if (cfg_->host_store) {
      // With a secret the store may listen on every interface. Without one it
      // listens only on the rendezvous address (MASTER_ADDR), so that only
      // those who can reach that address can reach the store, and says so.
      std::string bind_host;
      if (!authenticated) {
        // A loopback address serves a job on this host only, or one whose
        // rendezvous address is itself loopback.
        const bool one_host = cfg_->local_size > 0 && cfg_->local_size == cfg_->size;
        const bool loopback_name = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
        std::string why;
        bind_host = rdv::OwnAddressOf(host, one_host || loopback_name, &why);
        if (bind_host == "0.0.0.0" || bind_host == "::") {
          why = "MASTER_ADDR is the wildcard address " + bind_host;
          bind_host.clear();
        }
        if (bind_host.empty()) {
          HVD_LOG(*log_, HVD_LOG_WARNING,
                  "no HVD_SECRET: the rendezvous store this rank hosts is NOT authenticated and "
                  "listens on EVERY interface, port "
                      << port << " (" << why
                      << "): anyone who can reach this host on that port can read and change "
                         "the job's rendezvous data. Set HVD_SECRET to the same 64 hex digits on "
                         "every rank (e.g. openssl rand -hex 32), or launch with hvdrun");
        } else {
          HVD_LOG(*log_, HVD_LOG_WARNING,
                  "no HVD_SECRET: the rendezvous store this rank hosts is NOT authenticated; it "
                  "listens only on "
                      << (bind_host.find(':') != std::string::npos ? "[" + bind_host + "]" : bind_host)
                      << ":" << port
                      << " (MASTER_ADDR), and anyone who can reach that address can read and "
                         "change the job's rendezvous data. Set HVD_SECRET to the same 64 hex "
                         "digits on every rank (e.g. openssl rand -hex 32), or launch with hvdrun");
        }
      }
      HVD_ASSIGN_OR_RETURN(server_, rdv::StoreServer::Start(bind_host, port, secret));
      host = bind_host.empty() ? "127.0.0.1" : bind_host;
    }
  } else {
    return Error(HVD_ERR_RENDEZVOUS,
                 "this is rank " + std::to_string(cfg_->rank) + " of " + std::to_string(cfg_->size) +
                     " (from " + cfg_->rank_source +
                     ") but there is no way to find the other ranks: launch with hvdrun, set "
                     "HVD_RENDEZVOUS_ADDR (and HVD_SECRET) or MASTER_ADDR/MASTER_PORT, pass "
                     "params.oob_allgather, or use the mpi transport under mpirun");
  }

  HVD_ASSIGN_OR_RETURN(client_, rdv::StoreClient::Connect(host, port, secret, timeout));

  // Keys of this communicator live under a prefix that differs for each
  // context a rank creates, so a second hvd_init in the same job never reads
  // the first one's keys.
  kv_.client = client_.get();
  if (!cfg_->kv_prefix.empty()) {
    kv_.prefix = cfg_->kv_prefix;  // an elastic epoch's
    if (cfg_->elastic) kv_.abort_key = "elastic/failed/" + std::to_string(cfg_->epoch);
  } else {
    HVD_ASSIGN_OR_RETURN(int64_t generation,
                         client_->Add("hvd/generation/" + std::to_string(cfg_->rank), 1));
    kv_.prefix = "hvd/" + std::to_string(generation) + "/";
  }
  // Tells a launcher this rank is up.
  HVD_CHECK(client_->Set("ready/" + std::to_string(cfg_->rank),
                         rdv::Bytes(cfg_->hostname.begin(), cfg_->hostname.end())));
  return Status::Ok();
}

// ---- ranks that never join -------------------------------------------------
//
// Each rank publishes its host name under host/<rank> and reads everyone
// else's. When the start timeout passes with ranks missing, the rank that
// hosts the store writes a mark in place of each missing rank's host name,
// listing them all, so every rank still waiting learns the same list at
// once; it then keeps the store up until those ranks have said they saw it
// (or briefly, at most kMissingLinger), since the store goes when it fails.

namespace {
const std::string kMissingMark("\0hvd-missing:", 13);  // no host name starts with NUL
constexpr auto kMissingLinger = std::chrono::seconds(2);

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
}  // namespace

bool Bootstrap::ParseMissingMark(const rdv::Bytes& value, std::vector<int>* missing) const {
  if (value.size() < kMissingMark.size() ||
      !std::equal(kMissingMark.begin(), kMissingMark.end(), value.begin())) {
    return false;
  }
  std::string list(value.begin() + kMissingMark.size(), value.end());
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    long r = std::strtol(item.c_str(), &end, 10);
    if (end != item.c_str() && r >= 0 && r < cfg_->size) missing->push_back(static_cast<int>(r));
  }
  return true;
}

// The ranks whose host name is not in the store, after waiting for rank r's
// timed out. If the store cannot say (it went away), rank r at least.
std::vector<int> Bootstrap::MissingRanks(int r) {
  std::vector<std::string> keys;
  for (int q = 0; q < cfg_->size; ++q) keys.push_back(kv_.prefix + "host/" + std::to_string(q));
  auto have = client_->Check(keys);
  std::vector<int> missing;
  if (!have.ok()) return {r};
  for (int q = 0; q < cfg_->size; ++q) {
    if (!(*have)[q]) missing.push_back(q);
  }
  return missing;
}

Status Bootstrap::NotJoined(const std::vector<int>& missing) {
  const std::string list = JoinRanks(missing);
  const std::string ack = kv_.prefix + "missing-seen";
  if (server_ != nullptr) {
    std::string mark = kMissingMark + list;
    rdv::Bytes value(mark.begin(), mark.end());
    bool published = true;
    for (int q : missing) {
      // Through the client: a Set returns once the Gets waiting for its key have their answer.
      published = client_->Set(kv_.prefix + "host/" + std::to_string(q), value).ok() && published;
    }
    const int others = cfg_->size - static_cast<int>(missing.size()) - 1;
    const auto until = Clock::now() + kMissingLinger;
    while (published && others > 0 && Clock::now() < until) {
      rdv::Bytes seen;
      if (server_->TryGet(ack, &seen) && seen.size() == 8) {
        int64_t n = 0;
        for (uint8_t b : seen) n = (n << 8) | b;
        if (n >= others) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    (void)client_->Add(ack, 1);  // best effort: lets the hosting rank close its store
  }
  std::ostringstream msg;
  msg << "ranks [" << list << "] did not join within " << cfg_->start_timeout_s
      << " s (start timeout; HVD_START_TIMEOUT)";
  return Error(HVD_ERR_TIMEOUT, msg.str());
}

// Fills local/cross rank and size from every rank's host name when the
// launcher did not say.
Status Bootstrap::ResolveLocalTopology() {
  if (cfg_->local_rank >= 0 && cfg_->cross_rank >= 0) return Status::Ok();
  const std::string& me = cfg_->hostname;
  HVD_CHECK(client_->Set(kv_.prefix + "host/" + std::to_string(cfg_->rank),
                         rdv::Bytes(me.begin(), me.end())));
  std::vector<std::string> hosts(static_cast<size_t>(cfg_->size));
  auto deadline = Clock::now() + std::chrono::duration<double>(cfg_->start_timeout_s);
  bool rechecked = false;
  for (int r = 0; r < cfg_->size; ++r) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    auto v = kv_.Get(kv_.prefix + "host/" + std::to_string(r), std::max(left, 0.001));
    std::vector<int> missing;
    if (v.ok()) {
      if (!ParseMissingMark(*v, &missing)) {
        hosts[r].assign(v->begin(), v->end());
        continue;
      }
    } else {
      if (v.status().code() != HVD_ERR_TIMEOUT) return v.status();
      missing = MissingRanks(r);
      if (missing.empty() && !rechecked) {
        rechecked = true;  // every rank is here after all: read the late one again
        --r;
        continue;
      }
    }
    return NotJoined(missing);
  }
  int local_rank = 0, local_size = 0;
  for (int r = 0; r < cfg_->size; ++r) {
    if (hosts[r] == me) {
      if (r < cfg_->rank) ++local_rank;
      ++local_size;
    }
  }
  // Cross communicator: one rank per host with the same local rank.
  std::vector<std::string> seen;
  std::unordered_map<std::string, int> counter;
  int cross_rank = -1;
  for (int r = 0; r < cfg_->size; ++r) {
    int lr = counter[hosts[r]]++;
    if (lr != local_rank) continue;
    if (r == cfg_->rank) cross_rank = static_cast<int>(seen.size());
    seen.push_back(hosts[r]);
  }
  if (cfg_->local_rank < 0) {
    cfg_->local_rank = local_rank;
    cfg_->local_size = local_size;
  }
  if (cfg_->cross_rank < 0) {
    cfg_->cross_rank = cross_rank;
    cfg_->cross_size = static_cast<int>(seen.size());
  }
  hosts_ = std::move(hosts);
  return Status::Ok();
}

}  // namespace hvd
