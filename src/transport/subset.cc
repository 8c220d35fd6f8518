// Process sets over a transport: a set of its ranks as a communicator of
// its own, running the core's algorithms over the transport's
// point-to-point (algo::SubsetLinks: the set's ranks and a tag band of its
// own) and shared memory of its own where every member shares a host. It
// lives beside the transport, not in algorithms/, because it shares the
// transport's failure state (a failure in a set breaks the transport, an
// abort of the transport wakes the set's segment) and its collectives'
// dispatch (CoreGroup).
#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/kernels.h"
#include "transport/comm_exchange.h"
#include "transport/transport.h"

namespace hvd {

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
    Status st = shm::Setup(ex, o, &shm_);
    if (!st.ok()) return Error(st.code(), "process set: " + st.message());
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
  algo::Algorithm Choose(int c, size_t bytes) const {
    return algo::ChooseInSet(c, bytes, t_->forced_[c], shm_ != nullptr, *links_);
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

// ---- the hierarchy's communicators ------------------------------------------

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
  HVD_CHECK(ex.Allgather("host ids", host_id_, &ids));
  std::unique_ptr<algo::Hierarchy> h = algo::GroupByHost(ids, rank_);
  const std::vector<std::vector<int>>& hosts = h->hosts;
  size_t most = 0;
  for (const auto& g : hosts) most = std::max(most, g.size());
  if (hosts.size() < 2 || (most < 2 && opts.hierarchical < 0)) {
    HVD_LOG(*log, HVD_LOG_DEBUG,
            "hierarchical collectives not used: " << hosts.size() << " host(s), at most " << most
                                                  << " rank(s) on one");
    return Status::Ok();
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

}  // namespace hvd
