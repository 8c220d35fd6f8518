// The context: bootstrap (rendezvous, topology, transport) and the background
// loop (negotiate, fuse, run, complete).
#include "core/context.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#ifndef HVD_SETTLE_US
#define HVD_SETTLE_US 50
#endif

#include "common/kernels.h"
#include "common/netif.h"
#include "core/autotune.h"
#include "core/config.h"
#include "core/controller.h"
#include "core/fusion_buffer.h"
#include "core/logging.h"
#include "core/start_report.h"
#include "core/timeline.h"
#include "core/transport_loader.h"
#include "rendezvous/store.h"

namespace hvd {

// ---- ContextImpl ---------------------------------------------------------

class ContextImpl : public ControlPlane {
 public:
  explicit ContextImpl(Config cfg)
      : cfg_(std::move(cfg)),
        log_(cfg_.log_level, cfg_.log_fn, cfg_.log_user) {
    log_.set_rank(cfg_.rank);
    kv_.log = &log_;
    results_ = std::make_shared<BufferPool>(static_cast<size_t>(cfg_.buffer_pool_bytes));
  }

  ~ContextImpl() override {
    Shutdown();
    transport_.reset();
    client_.reset();
    server_.reset();
  }

  Status Start();
  Result<std::shared_ptr<Handle>> Enqueue(OpRequest req);
  void Shutdown();

  const Config& cfg() const { return cfg_; }
  Result<int64_t> Query(const std::string& key) const {
    if (!transport_) return Error(HVD_ERR_NOT_INITIALIZED, "no transport");
    return transport_->Query(key);
  }
  const char* transport_name() const { return transport_ ? transport_->name() : "none"; }
  Context::BufferStats buffer_stats() const {
    Context::BufferStats b;
    b.fusion_capacity = fusion_.capacity();
    b.pool_spare_bytes = results_->spare_bytes();
    return b;
  }

  // ControlPlane
  Status AllreduceMinU8(uint8_t* buf, size_t n) override {
    return transport_->Allreduce(buf, n, HVD_UINT8, HVD_MIN);
  }
  Status AllgatherBytes(const std::vector<uint8_t>& mine,
                        std::vector<std::vector<uint8_t>>* all) override;

 private:
  Status Rendezvous();
  Status ResolveLocalTopology();
  bool ParseMissingMark(const rdv::Bytes& value, std::vector<int>* missing) const;
  std::vector<int> MissingRanks(int r);
  Status NotJoined(const std::vector<int>& missing);
  std::string ChooseTransport() const;
  void Loop();
  void Cycle();
  uint64_t Execute(std::vector<Response>& responses);  // returns the bytes moved
  Status RunAllreduceBatch(std::vector<OpRequest*>& batch);
  Status RunOne(OpRequest& req, const Response& resp);
  Status TakeOutput(Handle* h, size_t bytes);
  void Finish(OpRequest& req, Status status);
  void FinishAll(OpRequest* const* reqs, size_t n, const Status& status);
  void FailEverything(const Status& why);

  Config cfg_;
  Logger log_;
  std::unique_ptr<Controller> controller_;  // made once the topology is final
  std::unique_ptr<rdv::StoreServer> server_;
  std::unique_ptr<rdv::StoreClient> client_;
  PluginKv kv_;
  std::unique_ptr<Transport> transport_;
  Timeline timeline_;
  FusionBuffer fusion_;
  std::vector<hvd_transport_span_t> spans_;  // a fused batch's outputs (in-place transports)
  std::unique_ptr<Autotuner> tuner_;  // made in Start()
  // Buffers recycled between operations: results of released handles
  // (allgather, alltoall, reducescatter) and reducescatter's scratch;
  // at most cfg_.buffer_pool_bytes spare.
  std::shared_ptr<BufferPool> results_;
  int64_t fusion_threshold_ = 0;      // cfg_'s, or the autotuner's current choice
  // The peer timeout in force around each negotiation (seconds); 0 = none:
  // off, not below the transport timeout, or a transport without set_timeout.
  double peer_timeout_ = 0;

  // Shared with user threads (guarded by mu_), and with handles (the signal).
  std::shared_ptr<LoopSignal> signal_ = std::make_shared<LoopSignal>();
  std::mutex& mu_ = signal_->mu;
  std::condition_variable& cv_ = signal_->cv;
  std::deque<OpRequest> queue_;
  Clock::time_point last_enqueue_;  // of the newest request in queue_
  std::unordered_set<std::string> inflight_;
  uint64_t barrier_count_ = 0;
  bool shutdown_requested_ = false;
  bool stopped_ = false;  // the loop has exited; enqueue fails with stop_reason_
  Status stop_reason_;
  std::thread thread_;
  std::once_flag shutdown_once_;

  // Background thread only.
  std::vector<uint64_t> lens_;
  std::vector<size_t> len_bytes_;
  std::vector<uint8_t> gather_buf_;
  std::vector<Response> responses_;
};

Status ContextImpl::AllgatherBytes(const std::vector<uint8_t>& mine,
                                   std::vector<std::vector<uint8_t>>* all) {
  const int n = cfg_.size;
  lens_.assign(static_cast<size_t>(n), 0);
  len_bytes_.assign(static_cast<size_t>(n), sizeof(uint64_t));
  uint64_t my_len = mine.size();
  HVD_CHECK(transport_->Allgatherv(&my_len, lens_.data(), len_bytes_.data()));
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    len_bytes_[r] = static_cast<size_t>(lens_[r]);
    total += len_bytes_[r];
  }
  gather_buf_.resize(std::max<size_t>(total, 1));
  HVD_CHECK(transport_->Allgatherv(mine.data(), gather_buf_.data(), len_bytes_.data()));
  all->resize(static_cast<size_t>(n));
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    (*all)[r].assign(gather_buf_.begin() + static_cast<std::ptrdiff_t>(off),
                     gather_buf_.begin() + static_cast<std::ptrdiff_t>(off + len_bytes_[r]));
    off += len_bytes_[r];
  }
  return Status::Ok();
}

std::string ContextImpl::ChooseTransport() const {
  // An MPI communicator, or MPI asked for by name: the MPI transport, which
  // needs no rendezvous and defines rank and size itself.
  if (cfg_.mpi_comm != nullptr || cfg_.transport == "mpi") return "mpi";
  // A world of one needs no network: "local" serves it whatever was asked
  // for (Start checks that a named transport exists, so a typo still fails).
  if (cfg_.size == 1) return "local";
  if (!cfg_.transport.empty()) return cfg_.transport;
  // Launched by mpirun with no other way to meet: the MPI transport needs none.
  if (cfg_.rank_source == "mpi" && cfg_.rendezvous_addr.empty() && cfg_.oob_allgather == nullptr &&
      Transport::Available("mpi", cfg_.transport_path)) {
    return "mpi";
  }
  return "gloo";
}

Status ContextImpl::Rendezvous() {
  const double timeout = cfg_.start_timeout_s;
  std::string host;
  int port = 0;
  std::string secret = cfg_.secret;

  if (cfg_.oob_allgather != nullptr) {
    // Rank 0 hosts a store; everyone learns where through the callback.
    constexpr size_t kBlob = 256;
    struct Blob {
      char addr[64];
      char port[16];
      char secret[128];
    };
    static_assert(sizeof(Blob) <= kBlob, "blob");
    std::vector<uint8_t> send(kBlob, 0), recv(kBlob * static_cast<size_t>(cfg_.size), 0);
    if (cfg_.rank == 0) {
      if (secret.empty()) secret = rdv::NewSecret();
      std::string addr = cfg_.network_interface.empty()
                             ? (cfg_.local_size == cfg_.size ? std::string("127.0.0.1")
                                                             : DefaultHostAddress())
                             : InterfaceAddress(cfg_.network_interface);
      if (addr.empty()) {
        return Error(HVD_ERR_RENDEZVOUS,
                     "network interface '" + cfg_.network_interface + "' has no IPv4 address");
      }
      HVD_ASSIGN_OR_RETURN(server_, rdv::StoreServer::Start("", 0, secret));
      Blob b{};
      std::snprintf(b.addr, sizeof(b.addr), "%s", addr.c_str());
      std::snprintf(b.port, sizeof(b.port), "%d", server_->port());
      std::snprintf(b.secret, sizeof(b.secret), "%s", secret.c_str());
      std::memcpy(send.data(), &b, sizeof(b));
    }
    int rc = cfg_.oob_allgather(send.data(), recv.data(), kBlob, cfg_.oob_user);
    if (rc != 0) {
      return Error(HVD_ERR_RENDEZVOUS,
                   "the out-of-band allgather callback failed (returned " + std::to_string(rc) + ")");
    }
    Blob b{};
    std::memcpy(&b, recv.data(), sizeof(b));
    b.addr[sizeof(b.addr) - 1] = b.port[sizeof(b.port) - 1] = b.secret[sizeof(b.secret) - 1] = 0;
    host = cfg_.rank == 0 ? "127.0.0.1" : b.addr;
    port = std::atoi(b.port);
    secret = b.secret;
    if (port <= 0) {
      return Error(HVD_ERR_RENDEZVOUS,
                   "the out-of-band allgather did not deliver rank 0's store address (is the "
                   "callback copying rank r's bytes to offset r * bytes?)");
    }
  } else if (!cfg_.rendezvous_addr.empty()) {
    HVD_CHECK(rdv::ParseHostPort(cfg_.rendezvous_addr, &host, &port)
                  .Wrap("rendezvous address '" + cfg_.rendezvous_addr + "'"));
    const bool authenticated = !secret.empty();
    if (!authenticated) {
      // torchrun-style launches carry no secret (torchrun shares none a
      // secret could be derived from): every rank uses the same well-known
      // key, which checks integrity but does not authenticate.
      secret = "6876642d6e6f2d736563726574";  // hex of "hvd-no-secret"
      if (!cfg_.host_store) {
        HVD_LOG(log_, HVD_LOG_INFO,
                "no HVD_SECRET: the rendezvous store at " << cfg_.rendezvous_addr
                                                          << " is not authenticated");
      }
    }
    if (cfg_.host_store) {
      // With a secret the store may listen on every interface. Without one it
      // listens only on the rendezvous address (MASTER_ADDR), so that only
      // those who can reach that address can reach the store, and says so.
      std::string bind_host;
      if (!authenticated) {
        // A loopback address serves a job on this host only, or one whose
        // rendezvous address is itself loopback.
        const bool one_host = cfg_.local_size > 0 && cfg_.local_size == cfg_.size;
        const bool loopback_name = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
        std::string why;
        bind_host = rdv::OwnAddressOf(host, one_host || loopback_name, &why);
        if (bind_host == "0.0.0.0" || bind_host == "::") {
          why = "MASTER_ADDR is the wildcard address " + bind_host;
          bind_host.clear();
        }
        if (bind_host.empty()) {
          HVD_LOG(log_, HVD_LOG_WARNING,
                  "no HVD_SECRET: the rendezvous store this rank hosts is NOT authenticated and "
                  "listens on EVERY interface, port "
                      << port << " (" << why
                      << "): anyone who can reach this host on that port can read and change "
                         "the job's rendezvous data. Set HVD_SECRET to the same 64 hex digits on "
                         "every rank (e.g. openssl rand -hex 32), or launch with hvdrun");
        } else {
          HVD_LOG(log_, HVD_LOG_WARNING,
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
                 "this is rank " + std::to_string(cfg_.rank) + " of " + std::to_string(cfg_.size) +
                     " (from " + cfg_.rank_source +
                     ") but there is no way to find the other ranks: launch with hvdrun, set "
                     "HVD_RENDEZVOUS_ADDR (and HVD_SECRET) or MASTER_ADDR/MASTER_PORT, pass "
                     "params.oob_allgather, or use the mpi transport under mpirun");
  }

  HVD_ASSIGN_OR_RETURN(client_, rdv::StoreClient::Connect(host, port, secret, timeout));

  // Keys of this communicator live under a prefix that differs for each
  // context a rank creates, so a second hvd_init in the same job never reads
  // the first one's keys.
  HVD_ASSIGN_OR_RETURN(int64_t generation,
                       client_->Add("hvd/generation/" + std::to_string(cfg_.rank), 1));
  kv_.client = client_.get();
  kv_.prefix = "hvd/" + std::to_string(generation) + "/";
  // Tells a launcher this rank is up.
  HVD_CHECK(client_->Set("ready/" + std::to_string(cfg_.rank),
                         rdv::Bytes(cfg_.hostname.begin(), cfg_.hostname.end())));
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

bool ContextImpl::ParseMissingMark(const rdv::Bytes& value, std::vector<int>* missing) const {
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
    if (end != item.c_str() && r >= 0 && r < cfg_.size) missing->push_back(static_cast<int>(r));
  }
  return true;
}

// The ranks whose host name is not in the store, after waiting for rank r's
// timed out. If the store cannot say (it went away), rank r at least.
std::vector<int> ContextImpl::MissingRanks(int r) {
  std::vector<std::string> keys;
  for (int q = 0; q < cfg_.size; ++q) keys.push_back(kv_.prefix + "host/" + std::to_string(q));
  auto have = client_->Check(keys);
  std::vector<int> missing;
  if (!have.ok()) return {r};
  for (int q = 0; q < cfg_.size; ++q) {
    if (!(*have)[q]) missing.push_back(q);
  }
  return missing;
}

Status ContextImpl::NotJoined(const std::vector<int>& missing) {
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
    const int others = cfg_.size - static_cast<int>(missing.size()) - 1;
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
  msg << "ranks [" << list << "] did not join within " << cfg_.start_timeout_s
      << " s (start timeout; HVD_START_TIMEOUT)";
  return Error(HVD_ERR_TIMEOUT, msg.str());
}

// Fills local/cross rank and size from every rank's host name when the
// launcher did not say.
Status ContextImpl::ResolveLocalTopology() {
  if (cfg_.local_rank >= 0 && cfg_.cross_rank >= 0) return Status::Ok();
  const std::string& me = cfg_.hostname;
  HVD_CHECK(client_->Set(kv_.prefix + "host/" + std::to_string(cfg_.rank),
                         rdv::Bytes(me.begin(), me.end())));
  std::vector<std::string> hosts(static_cast<size_t>(cfg_.size));
  auto deadline = Clock::now() + std::chrono::duration<double>(cfg_.start_timeout_s);
  bool rechecked = false;
  for (int r = 0; r < cfg_.size; ++r) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    auto v = client_->Get(kv_.prefix + "host/" + std::to_string(r), std::max(left, 0.001));
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
  for (int r = 0; r < cfg_.size; ++r) {
    if (hosts[r] == me) {
      if (r < cfg_.rank) ++local_rank;
      ++local_size;
    }
  }
  // Cross communicator: one rank per host with the same local rank.
  std::vector<std::string> seen;
  std::unordered_map<std::string, int> counter;
  int cross_rank = -1;
  for (int r = 0; r < cfg_.size; ++r) {
    int lr = counter[hosts[r]]++;
    if (lr != local_rank) continue;
    if (r == cfg_.rank) cross_rank = static_cast<int>(seen.size());
    seen.push_back(hosts[r]);
  }
  if (cfg_.local_rank < 0) {
    cfg_.local_rank = local_rank;
    cfg_.local_size = local_size;
  }
  if (cfg_.cross_rank < 0) {
    cfg_.cross_rank = cross_rank;
    cfg_.cross_size = static_cast<int>(seen.size());
  }
  return Status::Ok();
}

Status ContextImpl::Start() {
  HVD_LOG(log_, HVD_LOG_DEBUG, "config: " << cfg_.ToString());
  ReportStartStage(StartStage::kStarted, cfg_.hostname, log_);  // for hvdrun --transport mpi
  std::string transport = ChooseTransport();
  // A transport asked for by name must exist even where another serves (a
  // world of one), so a typo or a missing plugin still fails.
  if (!cfg_.transport.empty() && transport != cfg_.transport) {
    HVD_CHECK(Transport::Check(cfg_.transport, cfg_.transport_path));
  }
  if (cfg_.size > 1 && transport != "mpi") {
    HVD_CHECK(Rendezvous());
    HVD_CHECK(ResolveLocalTopology());
  }
  HVD_LOG(log_, HVD_LOG_DEBUG, "rank " << cfg_.rank << "/" << cfg_.size << " local "
                                       << cfg_.local_rank << "/" << cfg_.local_size << " cross "
                                       << cfg_.cross_rank << "/" << cfg_.cross_size << " from "
                                       << cfg_.rank_source << "; transport " << transport);

  hvd_transport_env_v1_t env{};
  env.struct_size = sizeof(env);
  env.rank = cfg_.rank;
  env.size = cfg_.size;
  env.local_rank = cfg_.local_rank;
  env.local_size = cfg_.local_size;
  env.cross_rank = cfg_.cross_rank;
  env.cross_size = cfg_.cross_size;
  if (client_) {
    env.kv = &kv_;
    env.kv_set = PluginKvSet;
    env.kv_get = PluginKvGet;
    env.kv_free = PluginKvFree;
  }
  env.logger = &log_;
  env.log = Logger::PluginLog;
  env.reduce = hvd_reduce_kernel;
  env.timeout_s = cfg_.transport_timeout_s;
  env.start_timeout_s = cfg_.start_timeout_s;
  env.network_interface = cfg_.network_interface.c_str();
  std::string local_address = client_ ? client_->local_address() : "";
  env.local_address = local_address.c_str();
  env.mpi_comm = cfg_.mpi_comm;
  TransportOptions topts;
  topts.hostname = cfg_.hostname;
  // HVD_SHM decides; unset, the transport's older switch (HVD_GLOO_SHM,
  // HVD_MPI_SHM) does; unset too, on.
  const int older = transport == "gloo" ? cfg_.gloo_shm : transport == "mpi" ? cfg_.mpi_shm : -1;
  topts.shm = (cfg_.shm >= 0 ? cfg_.shm : older) != 0;
  topts.shm_switch = cfg_.shm >= 0 || older < 0 ? "HVD_SHM"
                     : transport == "gloo"      ? "HVD_GLOO_SHM"
                                                : "HVD_MPI_SHM";
  for (int c = 0; c < HVD_TRANSPORT_COLLECTIVES; ++c) topts.algorithm[c] = cfg_.algorithm[c];
  HVD_ASSIGN_OR_RETURN(transport_,
                       Transport::Open(transport, cfg_.transport_path, env, topts, &log_));
  ReportStartStage(StartStage::kReady, cfg_.hostname, log_);
  // A transport that owns its communicator (MPI) has the last word on the
  // topology: a sub-communicator's rank differs from the launcher's.
  struct {
    const char* key;
    int* field;
  } topo[] = {{"rank", &cfg_.rank},           {"size", &cfg_.size},
              {"local_rank", &cfg_.local_rank}, {"local_size", &cfg_.local_size},
              {"cross_rank", &cfg_.cross_rank}, {"cross_size", &cfg_.cross_size}};
  for (auto& t : topo) {
    auto v = transport_->Query(t.key);
    if (v.ok()) *t.field = static_cast<int>(*v);
  }
  log_.set_rank(cfg_.rank);
  // The peer timeout bounds the negotiation only: every live rank enters it
  // at least once per heartbeat, whatever its user threads do, so a peer
  // that has not entered it for that long is stopped or cut off. Data
  // transfers keep the transport timeout (they may legitimately take long).
  if (cfg_.size > 1 && cfg_.peer_timeout_s > 0 &&
      (cfg_.transport_timeout_s <= 0 || cfg_.peer_timeout_s < cfg_.transport_timeout_s)) {
    if (transport_->has_set_timeout()) {
      peer_timeout_ = cfg_.peer_timeout_s;
    } else {
      HVD_LOG(log_, HVD_LOG_DEBUG,
              "the " << transport_->name()
                     << " transport cannot change its limit per call: no peer timeout (a silent "
                        "peer is noticed at the transport timeout)");
    }
  }
  controller_ = std::make_unique<Controller>(
      cfg_.rank, cfg_.size, cfg_.cache_capacity,
      StallConfig{cfg_.stall_warning_s, cfg_.stall_shutdown_s}, &log_);

  if (!cfg_.timeline_path.empty() && cfg_.rank == 0) HVD_CHECK(timeline_.Open(cfg_.timeline_path));
  fusion_threshold_ = cfg_.fusion_threshold;
  tuner_ = std::make_unique<Autotuner>(cfg_, &log_);
  const int64_t initial = std::min(cfg_.fusion_threshold, cfg_.fusion_buffer_initial);
  if (initial > 0) {
    // Fault the fusion buffer in now rather than during the first steps.
    if (fusion_.ReserveFaulted(static_cast<size_t>(initial)) == nullptr) {
      return Error(HVD_ERR_NO_MEMORY, "cannot allocate the fusion buffer's initial " +
                                          std::to_string(initial) +
                                          " bytes (HVD_FUSION_BUFFER_INITIAL)");
    }
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Result<std::shared_ptr<Handle>> ContextImpl::Enqueue(OpRequest req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || shutdown_requested_) {
    return stopped_ && !stop_reason_.ok()
               ? stop_reason_
               : Error(HVD_ERR_ABORTED, "the context has been shut down");
  }
  if (req.type == OpType::kBarrier) {
    req.tensors.front().name = "barrier#" + std::to_string(barrier_count_++);
  } else if (req.type == OpType::kJoin) {
    req.tensors.front().name = "join";
  }
  for (size_t i = 0; i < req.tensors.size(); ++i) {
    if (inflight_.count(req.tensors[i].name) != 0) {
      for (size_t j = 0; j < i; ++j) inflight_.erase(req.tensors[j].name);
      return Error(HVD_ERR_DUPLICATE_NAME,
                   "an operation on '" + req.tensors[i].name +
                       "' is already in flight; wait for it before reusing the name");
    }
    inflight_.insert(req.tensors[i].name);
  }
  std::shared_ptr<Handle> h = req.handle;
  req.enqueued = Clock::now();
  last_enqueue_ = req.enqueued;
  signal_->caller_waits = false;
  req.handle->set_signal(signal_);
  const bool was_empty = queue_.empty();
  queue_.push_back(std::move(req));
  // The loop waits for the queue to become non-empty; later submits of a
  // burst need no wake-up (it reads last_enqueue_ when it settles).
  if (was_empty) cv_.notify_one();
  return h;
}

void ContextImpl::Finish(OpRequest& req, Status status) {
  OpRequest* one = &req;
  FinishAll(&one, 1, status);
}

// One lock for the whole batch: a fused step completes hundreds of requests.
void ContextImpl::FinishAll(OpRequest* const* reqs, size_t n, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      for (const TensorSpec& t : reqs[i]->tensors) inflight_.erase(t.name);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    OpRequest& req = *reqs[i];
    if (!status.ok() && status.code() != HVD_ERR_ABORTED) {
      HVD_LOG(log_, HVD_LOG_DEBUG, req.handle->description() << " failed: " << status.message());
    }
    req.handle->Complete(status);
  }
}

void ContextImpl::FailEverything(const Status& why) {
  std::deque<OpRequest> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) stop_reason_ = why;  // keep the first reason
    stopped_ = true;
    queued.swap(queue_);
  }
  for (OpRequest& r : (controller_ ? controller_->TakeAll() : std::vector<OpRequest>())) Finish(r, why);
  for (OpRequest& r : queued) Finish(r, why);
}

void ContextImpl::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_requested_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    FailEverything(Error(HVD_ERR_ABORTED, "the context has been shut down"));
    timeline_.Close();
  });
}

// When the loop negotiates:
//  * Work arrives: a submit wakes it at once. It then waits until no further
//    submit has come for a settle time (a burst of submits is one batch, and
//    so one fusion bucket), at most one cycle time after the first. Where
//    submits come one at a time (the last 8 settle windows caught nothing,
//    and only one request is queued) it skips the settle, probing every
//    16th wake-up.
//  * Requests wait on other ranks: if the last negotiation changed anything
//    (something completed, or some rank announced new requests), it goes
//    straight into the next one: the ranks are mid-burst, and the others'
//    remaining submits are on their way. Otherwise it negotiates again every
//    cycle time, counted from the end of the last negotiation (all ranks
//    leave that collective together, so their cycles stay in phase).
//  * Nothing is pending here: it sleeps until a submit, shutdown, or a
//    heartbeat. No operation can complete without this rank's submit, so
//    ranks that do have work simply wait inside the negotiation collective;
//    the heartbeat keeps that wait well below the transport timeout and lets
//    an idle rank notice shutdown, stalls and dead peers.
//  * Silent peers: the loop thread runs whatever the user's threads do, so
//    a live rank enters the negotiation at least once per heartbeat (or as
//    soon as its current transfers end). Where the transport can change its
//    limit per call, the negotiation runs under the peer timeout
//    (HVD_PEER_TIMEOUT): a rank that has not entered it by then is stopped
//    or cut off, and every rank's pending handles fail naming it.
void ContextImpl::Loop() {
#if defined(__linux__)
  // The default 50 us of timer slack would be added to every wake-up.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // Named for top -H, perf and debuggers.
  prctl(PR_SET_NAME, "hvd-loop", 0UL, 0UL, 0UL);
#endif
  using std::chrono::duration;
  using std::chrono::duration_cast;
  auto cycle = duration_cast<Clock::duration>(duration<double, std::milli>(cfg_.cycle_time_ms));
  // How long a burst may pause between two submits and still be one batch:
  // C callers submit every 0.3-2 us, Python frontends every 5-15 us here.
  constexpr auto kSettle = std::chrono::microseconds(HVD_SETTLE_US);
  auto settle = std::min<Clock::duration>(cycle, kSettle);
  // An idle rank still negotiates this often: peers with work wait for it
  // inside the negotiation collective, which must end well within the
  // transport timeout.
  double heartbeat_s = 0.1;
  if (cfg_.transport_timeout_s > 0) {
    heartbeat_s = std::min(heartbeat_s, cfg_.transport_timeout_s / 4);
  }
  if (peer_timeout_ > 0) heartbeat_s = std::min(heartbeat_s, peer_timeout_ / 4);
  const auto heartbeat = duration_cast<Clock::duration>(duration<double>(heartbeat_s));
  // Adaptive settle (see below): after kQuietAfter wake-ups in a row whose
  // settle window caught nothing, lone submits are negotiated at once.
  constexpr int kQuietAfter = 8;
  constexpr uint64_t kProbeEvery = 16;
  int quiet_wakeups = 0;
  uint64_t wakeups = 0;
  auto next = Clock::now();
  std::deque<OpRequest> batch;
  while (true) {
    bool shutting_down;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] { return shutdown_requested_ || !queue_.empty(); };
      if (controller_->pending() == 0) {
        cv_.wait_until(lock, Clock::now() + heartbeat, ready);
      } else {
        cv_.wait_until(lock, next, ready);
      }
      if (!queue_.empty() && !shutdown_requested_) {
        // Settle only where submits come in bursts: several already queued
        // by the time this thread runs, or a recent settle window caught
        // more; a probe every kProbeEvery-th wake-up notices a change.
        ++wakeups;
        const size_t queued = queue_.size();
        if (queued > 1 || quiet_wakeups < kQuietAfter || wakeups % kProbeEvery == 0) {
          const auto limit = queue_.front().enqueued + cycle;
          // A caller blocking on a handle ends the burst at once.
          auto done = [this] { return shutdown_requested_ || signal_->caller_waits; };
          for (;;) {
            const auto until = std::min(last_enqueue_ + settle, limit);
            if (Clock::now() >= until) break;
            if (cv_.wait_until(lock, until, done)) break;
          }
          quiet_wakeups = queued > 1 || queue_.size() > queued ? 0 : quiet_wakeups + 1;
        }
      }
      shutting_down = shutdown_requested_;
      batch.swap(queue_);
    }
    auto now = Clock::now();
    for (OpRequest& r : batch) controller_->Add(std::move(r), now);
    batch.clear();

    bool shutdown = false;
    const uint64_t full_rounds = controller_->full_rounds();
    controller_->set_proposal(tuner_->Proposal());
    // The negotiation runs under the peer timeout, the transfers under the
    // transport timeout.
    Status s = peer_timeout_ > 0
                   ? transport_->SetTimeout(peer_timeout_, HVD_TRANSPORT_LIMIT_PEER)
                   : Status::Ok();
    if (s.ok()) s = controller_->Cycle(this, shutting_down, now, &responses_, &shutdown);
    if (s.ok() && peer_timeout_ > 0) {
      s = transport_->SetTimeout(cfg_.transport_timeout_s, HVD_TRANSPORT_LIMIT_TRANSFER);
    }
    const bool changed = !responses_.empty() || controller_->full_rounds() != full_rounds;
    next = changed ? Clock::now() : Clock::now() + cycle;
    if (!s.ok()) {
      HVD_LOG(log_, HVD_LOG_ERROR, s.message());
      FailEverything(Error(s.code(), "the context can no longer communicate: " + s.message()));
      return;
    }
    if (shutdown) {
      FailEverything(Error(HVD_ERR_ABORTED,
                           shutting_down ? "the context has been shut down"
                                         : "another rank shut down its context"));
      return;
    }
    TuneParams tuned;
    if (tuner_->Apply(controller_->decided(), &tuned)) {
      // Every rank switches in this same cycle, before bucketing its responses.
      fusion_threshold_ = tuned.fusion_threshold;
      cycle = duration_cast<Clock::duration>(duration<double, std::milli>(tuned.cycle_time_ms));
      settle = std::min<Clock::duration>(cycle, kSettle);
      HVD_LOG(log_, HVD_LOG_DEBUG,
              "autotune: fusion threshold " << tuned.fusion_threshold << " bytes, cycle time "
                                            << tuned.cycle_time_ms << " ms");
    }
    if (!responses_.empty()) {
      const uint64_t bytes = Execute(responses_);
      tuner_->Observe(bytes, now, Clock::now());
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
    }
  }
}

// Groups allreduces into fusion batches (same dtype, op, scaling and device,
// at most the fusion threshold of bytes), keeping every other operation in
// response order. All ranks hold the same responses, so all build the same
// batches in the same order.
uint64_t ContextImpl::Execute(std::vector<Response>& responses) {
  struct Unit {
    std::vector<OpRequest*> batch;  // allreduce batch
    OpRequest* single = nullptr;
    const Response* resp = nullptr;
    size_t bytes = 0;
  };
  std::vector<OpRequest> reqs(responses.size());
  std::vector<bool> have(responses.size(), false);
  std::vector<Unit> units;
  struct OpenBatch {
    size_t unit;
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    double pre, post;
    bool cpu;
  };
  std::vector<OpenBatch> open;
  std::deque<std::vector<uint8_t>> zeros;  // buffers of a joined rank's stand-in tensors
  const size_t threshold = static_cast<size_t>(fusion_threshold_);
  auto now = Clock::now();

  for (size_t i = 0; i < responses.size(); ++i) {
    Response& resp = responses[i];
    have[i] = controller_->Take(resp.key, &reqs[i]);
    if (!have[i] && resp.error.ok() && resp.all && !resp.all->empty() &&
        resp.desc(0).type == OpType::kAllreduce &&
        std::find(resp.joined.begin(), resp.joined.end(), cfg_.rank) != resp.joined.end()) {
      // This rank has joined: it contributes zeros of the same shape and
      // throws the result away.
      const RequestDesc& d = resp.desc(cfg_.rank);
      OpRequest& ph = reqs[i];
      ph.type = OpType::kAllreduce;
      ph.reduce_op = d.reduce_op;
      ph.prescale = d.prescale;
      ph.postscale = d.postscale;
      for (size_t k = 0; k < d.names.size(); ++k) {
        TensorSpec t;
        t.name = d.names[k];
        t.dtype = d.dtype;
        t.shape = d.shapes[k];
        zeros.emplace_back(static_cast<size_t>(t.NumElements()) * DtypeSize(d.dtype), 0);
        t.input = t.output = zeros.back().data();
        ph.tensors.push_back(std::move(t));
      }
      ph.handle = std::make_shared<Handle>("zeros for allreduce '" + resp.key + "' (joined)");
      ph.enqueued = now;
      have[i] = true;
    }
    if (!have[i]) continue;  // e.g. a stall error for a request this rank never made
    OpRequest& req = reqs[i];
    if (timeline_.enabled()) {
      timeline_.Span(resp.key, "NEGOTIATE", req.enqueued, now);
    }
    if (!resp.error.ok()) {
      Finish(req, resp.error);
      continue;
    }
    if (req.type != OpType::kAllreduce) {
      Unit u;
      u.single = &req;
      u.resp = &resp;
      units.push_back(u);
      continue;
    }
    size_t bytes = 0;
    for (const TensorSpec& t : req.tensors) {
      bytes += static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
    }
    const TensorSpec& t0 = req.tensors.front();
    OpenBatch* match = nullptr;
    for (OpenBatch& b : open) {
      if (b.dtype == t0.dtype && b.op == req.reduce_op && b.pre == req.prescale &&
          b.post == req.postscale && b.cpu == (t0.device == HVD_DEVICE_CPU)) {
        match = &b;
        break;
      }
    }
    if (match != nullptr && threshold > 0 && units[match->unit].bytes + bytes <= threshold) {
      units[match->unit].batch.push_back(&req);
      units[match->unit].bytes += bytes;
      continue;
    }
    Unit u;
    u.batch.push_back(&req);
    u.bytes = bytes;
    units.push_back(u);
    OpenBatch ob{units.size() - 1, t0.dtype, req.reduce_op, req.prescale, req.postscale,
                 t0.device == HVD_DEVICE_CPU};
    if (match != nullptr) {
      *match = ob;
    } else {
      open.push_back(ob);
    }
  }

  uint64_t moved = 0;
  for (size_t k = 0; k < units.size(); ++k) {
    Unit& u = units[k];
    if (u.single != nullptr) {
      for (const TensorSpec& t : u.single->tensors) {
        moved += static_cast<uint64_t>(t.NumElements()) * DtypeSize(t.dtype);
      }
    } else {
      moved += u.bytes;
    }
    Status s = u.single != nullptr ? RunOne(*u.single, *u.resp) : RunAllreduceBatch(u.batch);
    if (u.single != nullptr) {
      Finish(*u.single, s);
    } else {
      FinishAll(u.batch.data(), u.batch.size(), s);
    }
    if (!s.ok() && s.code() != HVD_ERR_MISMATCH && s.code() != HVD_ERR_INVALID_ARGUMENT) {
      // The transport failed: peers are gone or out of step.
      Status broken(s.code(), "the context can no longer communicate: " + s.message());
      HVD_LOG(log_, HVD_LOG_ERROR, broken.message());
      for (size_t j = k + 1; j < units.size(); ++j) {
        if (units[j].single != nullptr) Finish(*units[j].single, broken);
        for (OpRequest* r : units[j].batch) Finish(*r, broken);
      }
      FailEverything(broken);
      return moved;
    }
  }
  timeline_.Flush();
  return moved;
}

namespace {

// Result = post-op scaling of a reduced buffer (AVERAGE, postscale) while
// copying src -> dst (dst may equal src).
void Finalize(void* dst, const void* src, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
              double postscale, int size) {
  if (op == HVD_AVERAGE && !IsFloatingDtype(dtype)) {
    if (dst != src) std::memcpy(dst, src, count * DtypeSize(dtype));
    DivideInPlace(dst, count, dtype, size);
    ScaleInPlace(dst, count, dtype, postscale);
    return;
  }
  double f = postscale;
  if (op == HVD_AVERAGE) f /= size;
  if (dst == src) {
    ScaleInPlace(dst, count, dtype, f);
  } else {
    ScaleCopy(dst, src, count, dtype, f);
  }
}

// dst = src * prescale (dst may equal src).
void Prepare(void* dst, const void* src, size_t count, hvd_dtype_t dtype, double prescale) {
  if (dst == src) {
    ScaleInPlace(dst, count, dtype, prescale);
  } else if (count > 0) {
    ScaleCopy(dst, src, count, dtype, prescale);
  }
}

hvd_reduce_op_t TransportOp(hvd_reduce_op_t op) { return op == HVD_AVERAGE ? HVD_SUM : op; }

}  // namespace

Status ContextImpl::RunAllreduceBatch(std::vector<OpRequest*>& batch) {
  const OpRequest& first = *batch.front();
  const hvd_dtype_t dtype = first.tensors.front().dtype;
  const size_t esize = DtypeSize(dtype);
  const hvd_reduce_op_t op = first.reduce_op;
  auto t0 = Clock::now();

  size_t total = 0;
  size_t ntensors = 0;
  for (OpRequest* r : batch) {
    for (const TensorSpec& t : r->tensors) {
      total += static_cast<size_t>(t.NumElements());
      ++ntensors;
    }
  }

  if (ntensors == 1) {
    // Unfused: reduce straight in the caller's output buffer.
    TensorSpec& t = batch.front()->tensors.front();
    size_t n = static_cast<size_t>(t.NumElements());
    Prepare(t.output, t.input, n, dtype, first.prescale);
    HVD_CHECK(transport_->Allreduce(t.output, n, dtype, TransportOp(op)));
    Finalize(t.output, t.output, n, dtype, op, first.postscale, cfg_.size);
    if (timeline_.enabled()) {
      timeline_.Span(t.name, "ALLREDUCE", t0, Clock::now(),
                     "{\"bytes\":" + std::to_string(n * esize) + "}");
    }
    return Status::Ok();
  }

  if (transport_->allreduce_spans()) {
    // The transport reads and writes the outputs where they lie (shared
    // memory): no fusion buffer, no copy in or out.
    spans_.clear();
    for (OpRequest* r : batch) {
      for (TensorSpec& t : r->tensors) {
        size_t n = static_cast<size_t>(t.NumElements());
        Prepare(t.output, t.input, n, dtype, first.prescale);
        spans_.push_back({t.output, n});
      }
    }
    HVD_CHECK(transport_->AllreduceSpans(spans_.data(), spans_.size(), dtype, TransportOp(op)));
    for (OpRequest* r : batch) {
      for (TensorSpec& t : r->tensors) {
        Finalize(t.output, t.output, static_cast<size_t>(t.NumElements()), dtype, op,
                 first.postscale, cfg_.size);
      }
    }
    if (timeline_.enabled()) {
      auto t3 = Clock::now();
      std::string args = "{\"fused_tensors\":" + std::to_string(ntensors) +
                         ",\"bytes\":" + std::to_string(total * esize) + ",\"in_place\":true}";
      for (OpRequest* r : batch) {
        for (const TensorSpec& t : r->tensors) {
          timeline_.Span(t.name, "ALLREDUCE", t0, t3, args);
        }
      }
    }
    return Status::Ok();
  }

  uint8_t* buf = fusion_.Reserve(total * esize);
  if (buf == nullptr) return Error(HVD_ERR_NO_MEMORY, "cannot grow the fusion buffer");
  size_t off = 0;
  for (OpRequest* r : batch) {
    for (const TensorSpec& t : r->tensors) {
      size_t n = static_cast<size_t>(t.NumElements());
      Prepare(buf + off, t.input, n, dtype, first.prescale);
      off += n * esize;
    }
  }
  auto t1 = Clock::now();
  HVD_CHECK(transport_->Allreduce(buf, total, dtype, TransportOp(op)));
  auto t2 = Clock::now();
  off = 0;
  for (OpRequest* r : batch) {
    for (TensorSpec& t : r->tensors) {
      size_t n = static_cast<size_t>(t.NumElements());
      Finalize(t.output, buf + off, n, dtype, op, first.postscale, cfg_.size);
      off += n * esize;
    }
  }
  if (timeline_.enabled()) {
    auto t3 = Clock::now();
    std::string args = "{\"fused_tensors\":" + std::to_string(ntensors) +
                       ",\"bytes\":" + std::to_string(total * esize) + "}";
    for (OpRequest* r : batch) {
      for (const TensorSpec& t : r->tensors) {
        timeline_.Span(t.name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
        timeline_.Span(t.name, "ALLREDUCE", t1, t2, args);
        timeline_.Span(t.name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
      }
    }
  }
  return Status::Ok();
}

Status ContextImpl::RunOne(OpRequest& req, const Response& resp) {
  const int n = cfg_.size;
  const int me = cfg_.rank;
  auto t0 = Clock::now();
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const size_t esize = DtypeSize(t.dtype);
  // Bytes of one row (everything but the first dimension).
  size_t row = esize;
  for (size_t d = 1; d < t.shape.size(); ++d) row *= static_cast<size_t>(t.shape[d]);

  switch (req.type) {
    case OpType::kBroadcast: {
      size_t bytes = static_cast<size_t>(t.NumElements()) * esize;
      if (me == req.root && t.output != t.input && bytes > 0) std::memcpy(t.output, t.input, bytes);
      HVD_CHECK(transport_->Broadcast(t.output, bytes, req.root));
      break;
    }
    case OpType::kAllgather: {
      std::vector<size_t> recv(static_cast<size_t>(n));
      int64_t rows = 0;
      size_t total = 0;
      for (int r = 0; r < n; ++r) {
        int64_t rr = resp.desc(r).shapes[0][0];
        recv[r] = static_cast<size_t>(rr) * row;
        rows += rr;
        total += recv[r];
      }
      HVD_CHECK(TakeOutput(&h, total));
      HVD_CHECK(transport_->Allgatherv(t.input, h.output.data(), recv.data()));
      h.output_shape = t.shape;
      h.output_shape[0] = rows;
      break;
    }
    case OpType::kAlltoall: {
      std::vector<size_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
      h.recv_splits.assign(static_cast<size_t>(n), 0);
      int64_t rows = 0;
      size_t total = 0;
      for (int r = 0; r < n; ++r) {
        send[r] = static_cast<size_t>(req.splits[r]) * row;
        int64_t from_r = resp.desc(r).splits[me];
        h.recv_splits[r] = from_r;
        recv[r] = static_cast<size_t>(from_r) * row;
        rows += from_r;
        total += recv[r];
      }
      HVD_CHECK(TakeOutput(&h, total));
      HVD_CHECK(transport_->Alltoallv(t.input, send.data(), h.output.data(), recv.data()));
      h.output_shape = t.shape;
      h.output_shape[0] = rows;
      break;
    }
    case OpType::kReducescatter: {
      const size_t count = static_cast<size_t>(t.NumElements());
      const int64_t rows = t.shape[0];
      const int64_t base = rows / n, extra = rows % n;
      const int64_t my_rows = base + (me < extra ? 1 : 0);
      const int64_t first_row = me * base + std::min<int64_t>(me, extra);
      // Scratch for the in-place reduction: the fusion buffer where it is
      // big enough already, else a pool buffer handed back right after (the
      // pool keeps it only within its cap), so that one large reducescatter
      // does not pin an input-sized buffer for the context's life.
      const size_t scratch_bytes = count * esize;
      struct Scratch {
        BufferPool* pool;
        ByteBuffer b;
        ~Scratch() {
          if (b.capacity() > 0) pool->Give(std::move(b));
        }
      } scratch{results_.get(), ByteBuffer()};
      uint8_t* buf = nullptr;
      if (scratch_bytes <= fusion_.capacity()) {
        buf = fusion_.Reserve(scratch_bytes);
      } else {
        scratch.b = results_->Take(scratch_bytes);
        if (scratch.b.capacity() >= scratch_bytes) buf = scratch.b.data();
      }
      if (buf == nullptr) {
        return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(scratch_bytes) +
                                            " bytes of reducescatter scratch");
      }
      Prepare(buf, t.input, count, t.dtype, req.prescale);
      if (transport_->has_reducescatter()) {
        std::vector<size_t> counts(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          counts[r] = static_cast<size_t>(base + (r < extra ? 1 : 0)) * (row / esize);
        }
        HVD_CHECK(transport_->Reducescatter(buf, counts.data(), t.dtype, TransportOp(req.reduce_op)));
      } else {
        // A version 1 plugin: the whole reduction, of which this rank keeps its rows.
        HVD_CHECK(transport_->Allreduce(buf, count, t.dtype, TransportOp(req.reduce_op)));
      }
      const size_t row_elems = row / esize;
      HVD_CHECK(TakeOutput(&h, static_cast<size_t>(my_rows) * row));
      Finalize(h.output.data(), buf + static_cast<size_t>(first_row) * row,
               static_cast<size_t>(my_rows) * row_elems, t.dtype, req.reduce_op, req.postscale, n);
      h.output_shape = t.shape;
      h.output_shape[0] = my_rows;
      break;
    }
    case OpType::kBarrier:
      HVD_CHECK(transport_->Barrier());
      break;
    case OpType::kJoin:
      break;  // negotiation did the work: every rank has joined
    case OpType::kAllreduce:
      return Error(HVD_ERR_INTERNAL, "allreduce routed outside the fusion path");
  }
  if (timeline_.enabled()) {
    timeline_.Span(t.name, OpTypeName(req.type), t0, Clock::now());
  }
  return Status::Ok();
}

Status ContextImpl::TakeOutput(Handle* h, size_t bytes) {
  h->output = results_->Take(bytes);
  h->output_pool = results_;
  if (h->output.capacity() < bytes) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes for the result");
  }
  return Status::Ok();
}

// ---- Context -------------------------------------------------------------

Context::Context(std::unique_ptr<ContextImpl> impl) : impl_(std::move(impl)) {}
Context::~Context() { Shutdown(); }

Result<std::unique_ptr<Context>> Context::Create(const hvd_params_t* params) {
  HVD_ASSIGN_OR_RETURN(Config cfg, ResolveConfig(params, ProcessEnv()));
  auto impl = std::make_unique<ContextImpl>(std::move(cfg));
  HVD_CHECK(impl->Start());
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

int Context::rank() const { return impl_->cfg().rank; }
int Context::size() const { return impl_->cfg().size; }
int Context::local_rank() const { return impl_->cfg().local_rank; }
int Context::local_size() const { return impl_->cfg().local_size; }
int Context::cross_rank() const { return impl_->cfg().cross_rank; }
int Context::cross_size() const { return impl_->cfg().cross_size; }
const char* Context::transport_name() const { return impl_->transport_name(); }
Result<int64_t> Context::Query(const std::string& key) const { return impl_->Query(key); }
Context::BufferStats Context::buffer_stats() const { return impl_->buffer_stats(); }

Result<std::shared_ptr<Handle>> Context::Enqueue(OpRequest request) {
  if (!request.handle) return Error(HVD_ERR_INTERNAL, "request without a handle");
  if (request.tensors.empty()) return Error(HVD_ERR_INTERNAL, "request without tensors");
  return impl_->Enqueue(std::move(request));
}

void Context::Shutdown() {
  if (impl_) impl_->Shutdown();
}

}  // namespace hvd
