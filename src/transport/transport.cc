// The adapter that turns a loaded plugin into a communicator (Transport):
// start-up, the plugin's point-to-point as the algorithms' links, and every
// collective dispatched to the shared-memory path, the core's algorithms
// over point-to-point, or the plugin's native entry (algo::Choose).
#include "transport/transport.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/kernels.h"
#include "transport/comm_exchange.h"
#include "transport/loader.h"

namespace hvd {

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

// A plugin that loads stays loaded (its handle is kept, not closed): the
// default's probe (does UCX load here?) is followed by the transport opening
// it again, and UCX does not survive being unloaded and loaded again in one
// process (libucs stays, libucp and its transports come back beside its old
// state). cluster.hvdrun_2x2, whose default chose UCX after the probe, hung
// in 6 of 20 runs under load; with the handle kept, 0 of 16 (the same job
// naming UCX, no probe: 0 of 10). Likewise Capabilities, hvd_transport_probe
// and a Transport's end: an elastic reset, or a second context in the same
// process, opens the plugin again.
Status Transport::Check(const std::string& name, const std::string& search_path) {
  auto f = FindTransport(name, search_path);
  if (!f.ok()) return f.status();
  return Status::Ok();
}

Result<uint64_t> Transport::Capabilities(const std::string& name,
                                          const std::string& search_path) {
  auto f = FindTransport(name, search_path);
  if (!f.ok()) return f.status();
  return f->table.caps;  // the plugin stays loaded (above)
}

Result<std::unique_ptr<Transport>> Transport::Open(const std::string& name,
                                                   const std::string& search_path,
                                                   const hvd_transport_env_t& env,
                                                   const TransportOptions& opts, Logger* log) {
  HVD_ASSIGN_OR_RETURN(LoadedTable f, FindTransport(name, search_path));
  std::unique_ptr<Transport> t(new Transport());
  t->log_ = log;
  t->dl_ = f.dl;
  t->rank_ = env.rank;
  t->size_ = env.size;
  t->limit_s_ = env.timeout_s;
  t->shm_enabled_ = opts.shm;
  t->reproducible_ = opts.reproducible;
  t->shm_switch_ = opts.shm_switch;
  t->ring_spans_ = opts.fusion_in_place;
  t->table_ = f.table;
  t->name_ = PersistentTransportName(f.table.name);
  HVD_CHECK(t->Start(env, opts, log).Wrap("transport '" + name + "' failed to start"));
  return t;
}

// Connects (the plugin's init) and keeps what it reported.
Status Transport::Init(const hvd_transport_env_t& env_in, const TransportOptions& opts) {
  const hvd_transport_t& v = table_;
  // The host table (never NULL): the caller's entries, this rank's name
  // where the caller has none.
  hvd_transport_env_t env = env_in;
  const size_t n = static_cast<size_t>(std::max(env.size, 1));
  std::vector<hvd_transport_host_t> host_table(n, hvd_transport_host_t{nullptr, nullptr});
  for (size_t r = 0; r < n; ++r) {
    if (r < opts.hosts.size() && !opts.hosts[r].empty()) host_table[r].name = opts.hosts[r].c_str();
    if (r < opts.addresses.size() && !opts.addresses[r].empty()) {
      host_table[r].address = opts.addresses[r].c_str();
    }
  }
  if (env.rank >= 0 && static_cast<size_t>(env.rank) < n && host_table[env.rank].name == nullptr) {
    host_table[env.rank].name = opts.hostname.c_str();
  }
  env.hosts = host_table.data();
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
  // The table serves as this communicator's where its ranks are the env's
  // (a plugin that owns its communicator may number them otherwise).
  hosts_known_ = rank == env.rank && size == env.size &&
                 std::all_of(host_table.begin(), host_table.end(),
                             [](const hvd_transport_host_t& h) { return h.name != nullptr; });
  hosts_.clear();
  addresses_.clear();
  for (const hvd_transport_host_t& h : host_table) {
    hosts_.emplace_back(h.name != nullptr ? h.name : "");
    addresses_.emplace_back(h.address != nullptr ? h.address : "");
  }
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
  return Status::Ok();
}

// The HVD_ALGORITHM_* settings, which must be ones this transport can run;
// *want_shm: one asks for the shared-memory path.
Status Transport::ForceAlgorithms(const TransportOptions& opts, bool* want_shm) {
  const hvd_transport_t& v = table_;
  const char* const names[HVD_TRANSPORT_COLLECTIVES] = {
      "HVD_ALGORITHM_ALLREDUCE", "HVD_ALGORITHM_ALLGATHER", "HVD_ALGORITHM_BROADCAST",
      "HVD_ALGORITHM_ALLTOALL", "HVD_ALGORITHM_REDUCESCATTER", "HVD_ALGORITHM_BARRIER"};
  *want_shm = false;
  for (int c = 0; c < HVD_TRANSPORT_COLLECTIVES; ++c) {
    HVD_ASSIGN_OR_RETURN(forced_[c], algo::ParseAlgorithm(c, names[c], opts.algorithm[c]));
    const algo::Algorithm a = forced_[c];
    if (a == algo::Algorithm::kNative && NativeEntry(v, c) == nullptr) {
      return InvalidArgument(std::string(names[c]) + "=native, but the " + name_ +
                             " transport has no native entry for it");
    }
    if (algo::IsP2pAlgorithm(c, a) && !links_) {
      return InvalidArgument(std::string(names[c]) + "=" + algo::AlgorithmName(a) + ", but the " +
                             name_ + " transport has no point-to-point");
    }
    *want_shm = *want_shm || a == algo::Algorithm::kShm;
  }
  return Status::Ok();
}

// Every rank's host name where the host table lacks them, and the
// shared-memory path (agreed with every peer over the transport itself).
Status Transport::StartHosts(const TransportOptions& opts, double timeout_s, Logger* log) {
  const hvd_transport_t& v = table_;
  const int size = size_;
  // Every rank's host name, so messages about a peer can name its host:
  // the host table where it names every rank (always for a device-only
  // transport (NCCL), which refuses host memory: the host transport's);
  // else (the MPI transport, which starts without a store) gathered over
  // the transport itself.
  const bool device_only = DeviceOnly(v.caps);
  if (size > 1 && !hosts_known_ && !device_only) {
    TransportExchange ex(this, size);
    HVD_CHECK(ex.Allgather("hosts", opts.hostname, &hosts_));
    addresses_.assign(hosts_.size(), std::string());
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
    o.rank = rank_;
    o.size = size;
    o.identity = host_id_;
    o.timeout_s = timeout_s;
    o.log = [log](int level, const std::string& msg) { log->Write(level, msg); };
    TransportExchange ex(this, size);
    HVD_CHECK(shm::Setup(ex, o, &shm_));
    if (shm_) {
      std::vector<std::string> names;
      for (int r = 0; r < size; ++r) names.push_back(Who(r));
      shm_->set_names(std::move(names));
      host_seg_ = shm_.get();
    }
  }
  return Status::Ok();
}

Status Transport::Start(const hvd_transport_env_t& env, const TransportOptions& opts, Logger* log) {
  HVD_CHECK(Init(env, opts));
  bool want_shm = false;
  HVD_CHECK(ForceAlgorithms(opts, &want_shm));
  HVD_CHECK(StartHosts(opts, env.timeout_s, log));
  if (size_ > 1 && !shm_ && links_ && opts.hierarchical != 0) HVD_CHECK(StartHierarchy(opts, log));
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
  // dl_ stays open (above): an elastic reset opens the same plugin again.
}

hvd_transport_buffer_t Transport::Host(const void* data, size_t bytes) const {
  hvd_transport_buffer_t b{};
  b.data = const_cast<void*>(data);
  b.bytes = bytes;
  b.memory_type = HVD_MEMORY_HOST;
  b.device = HVD_DEVICE_CPU;
  return b;
}

algo::Algorithm Transport::Choose(int c, size_t bytes, hvd_dtype_t dtype) const {
  algo::Choice what;
  what.ordered = Canonical(c, dtype, 0);
  what.forced = forced_[c];
  what.shm = shm_ != nullptr;
  what.native = NativeEntry(table_, c) != nullptr;
  what.native_max_bytes = info_.native_max_bytes[c];
  what.links = links_.get();
  return algo::Choose(c, bytes, what);
}

Status Transport::Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  if (broken()) return Unusable();
  op_ = "allreduce";
  const size_t es = DtypeSize(dtype);
  if (hierarchical_on() && forced_[HVD_TRANSPORT_ALLREDUCE] == algo::Algorithm::kAuto &&
      !Canonical(HVD_TRANSPORT_ALLREDUCE, dtype, 1)) {
    HVD_CHECK(algo::AllreduceHier(*hier_, buf, count, dtype, op));
    op_ = "allreduce";  // the steps' communicators named theirs
    return Status::Ok();
  }
  const algo::Algorithm how = Choose(HVD_TRANSPORT_ALLREDUCE, count * es, dtype);
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
      return ShmChecked(g, "allreduce", shm::Allreduce(*g.shm, reduce_, static_cast<uint8_t*>(buf),
                                                       count, DtypeSize(dtype), dtype, op));
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
      forced_[HVD_TRANSPORT_REDUCESCATTER] == algo::Algorithm::kAuto &&
      !Canonical(HVD_TRANSPORT_REDUCESCATTER, dtype, 1)) {
    HVD_CHECK(algo::ReducescatterHier(*hier_, scratch_, buf, counts, start, dtype, op));
    op_ = "reducescatter";
    return Status::Ok();
  }
  const algo::Algorithm how = Choose(HVD_TRANSPORT_REDUCESCATTER, start.back() * es, dtype);
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
    return ShmChecked(g, "reducescatter",
                      shm::Reducescatter(*g.shm, reduce_, static_cast<uint8_t*>(buf), start.data(),
                                         DtypeSize(dtype), dtype, op));
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
  return ShmChecked(g, "allreduce", shm::AllreduceSpans(*g.shm, reduce_, spans, nspans,
                                                        DtypeSize(dtype), dtype, op));
}

Status Transport::Allgatherv(const void* send, void* recv, const size_t* recv_bytes) {
  if (broken()) return Unusable();
  op_ = "allgather";
  const int size = static_cast<int>(comm_size());
  size_t total = 0;
  for (int p = 0; p < size; ++p) total += recv_bytes[p];
  if (hierarchical_on() && forced_[HVD_TRANSPORT_ALLGATHERV] == algo::Algorithm::kAuto &&
      total >= algo::kHierAllgatherMin) {
    HVD_CHECK(algo::AllgathervHier(*hier_, scratch_, send, recv, recv_bytes, total));
    op_ = "allgather";
    return Status::Ok();
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
    return ShmChecked(g, "allgather", shm::Allgatherv(*g.shm, static_cast<const uint8_t*>(send),
                                                      static_cast<uint8_t*>(recv), recv_bytes));
  }
  return algo::AllgathervRing(*g.links, send, recv, recv_bytes);
}

Status Transport::Broadcast(void* buf, size_t bytes, int root) {
  if (broken()) return Unusable();
  op_ = "broadcast";
  if (hierarchical_on() && hier_->even && forced_[HVD_TRANSPORT_BROADCAST] == algo::Algorithm::kAuto) {
    HVD_CHECK(algo::BroadcastHier(*hier_, buf, bytes, root));
    op_ = "broadcast";
    return Status::Ok();
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
      return ShmChecked(g, "broadcast",
                        shm::Broadcast(*g.shm, static_cast<uint8_t*>(buf), bytes, root));
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
    return ShmChecked(g, "barrier", g.shm->Barrier("barrier (shm)"));
  }
  return algo::BarrierDissemination(*g.links);
}

Status Transport::SetTimeout(double timeout_s, int32_t kind) {
  if (!has_set_timeout()) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(name_) + " has no set_timeout entry");
  }
  peer_limit_ = kind == HVD_TRANSPORT_LIMIT_PEER;
  limit_s_ = timeout_s;
  if (shm_) shm_->set_timeout(timeout_s);
  if (shm_ && peer_limit_) shm_->set_silence(timeout_s);  // for transfers too
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
