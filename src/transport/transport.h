// A loaded, connected transport (the adapter from a plugin's table to the
// core's Comm) and how the core runs collectives over it. Finding and
// checking the table: loader.h; the store bridge: plugin_kv.h; failure
// diagnostics: diagnostics.cc; process sets: subset.cc; the hierarchical
// compositions and the choice of algorithm: algorithms/.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/hierarchical.h"
#include "algorithms/shm/shm.h"
#include "common/status.h"
#include "core/comm.h"
#include "core/observability/logging.h"
#include "hvd_transport.h"
#include "transport/loader.h"
#include "transport/plugin_kv.h"

namespace hvd {

// How the core runs collectives over a transport (from Config).
struct TransportOptions {
  // The shared-memory collectives where every rank shares one host: on
  // unless 0.
  bool shm = true;
  const char* shm_switch = "HVD_SHM";  // the setting that turned it off, for the log
  std::string hostname;  // this rank's, told to peers so messages name hosts
  // Forced algorithm per collective (HVD_TRANSPORT_* index): "" = auto.
  std::string algorithm[HVD_TRANSPORT_COLLECTIVES];
  // The hierarchical collectives (HVD_HIERARCHICAL): 1 on, 0 off, -1 auto
  // (on where ranks span several hosts and some host has several).
  int hierarchical = -1;
  // HVD_REPRODUCIBLE: 1 the canonical order everywhere, 0 natives allowed, -1 default.
  int reproducible = -1;
  std::string host_id;  // HVD_HOST_ID; empty: shm::HostIdentity()
  // Every rank's host name where the caller knows it (the rendezvous, or
  // for a device-only transport, which exchanges nothing in host memory,
  // the host transport's): the plugin's host table (env.hosts).
  std::vector<std::string> hosts;
  // A fused allreduce over the ring takes the tensors where they lie
  // (HVD_FUSION_IN_PLACE): on unless false.
  bool fusion_in_place = true;
};

// A loaded, connected transport and the collectives over it: the core's
// algorithms run over the plugin's point-to-point (algorithms/), with the
// shared-memory path and the plugin's native collectives chosen per call
// (Choose).
class Transport : public Comm {
 public:
  // Loads `name` and connects (table->init). search_path: ':'-separated folders.
  static Result<std::unique_ptr<Transport>> Open(const std::string& name,
                                                 const std::string& search_path,
                                                 const hvd_transport_env_t& env,
                                                 const TransportOptions& opts, Logger* log);
  // OK if a table for `name` can be found (does not connect); else why not,
  // naming the folders searched.
  static Status Check(const std::string& name, const std::string& search_path);
  // The capabilities the table declares (HVD_TRANSPORT_CAP_*), without
  // connecting; else why it cannot be found.
  static Result<uint64_t> Capabilities(const std::string& name, const std::string& search_path);
  // A transport for device memory only: HVD_TRANSPORT_CAP_CUDA_MEMORY and
  // no point-to-point (the NCCL plugin). It runs beside a host transport,
  // which carries the negotiation and host tensors.
  static bool DeviceOnly(uint64_t caps) {
    return (caps & HVD_TRANSPORT_CAP_CUDA_MEMORY) != 0 && (caps & HVD_TRANSPORT_CAP_P2P) == 0;
  }
  static bool Available(const std::string& name, const std::string& search_path) {
    return Check(name, search_path).ok();
  }

  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // The name the plugin gives itself (hvd_transport_t::name), with
  // static storage (PersistentTransportName): valid after this is destroyed.
  const char* name() const { return name_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) override;
  Status Allgatherv(const void* send, void* recv, const size_t* recv_bytes) override;
  Status Broadcast(void* buf, size_t bytes, int root) override;
  Status Alltoallv(const void* send, const size_t* send_bytes, void* recv,
                   const size_t* recv_bytes) override;
  Status Barrier() override;
  // In place over sum(counts) elements; on return this rank's block holds its
  // reduction. HVD_ERR_UNSUPPORTED where has_reducescatter() is false (no
  // point-to-point, no shared memory and no native entry).
  Status Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype,
                       hvd_reduce_op_t op) override;
  bool has_reducescatter() const override {
    return links_ || shm_ || table_.reducescatter != nullptr;
  }
  // In place over the concatenation of spans, as one allreduce of them packed.
  // Where allreduce_spans(bytes): the shared-memory path, or the ring over
  // point-to-point, when it is the allreduce chosen for
  // that many bytes (flat, not hierarchical; HVD_FUSION_IN_PLACE=0 turns
  // this one off).
  Status AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                        hvd_reduce_op_t op) override;
  bool allreduce_spans(size_t bytes) const override { return spans_ || RingSpans(bytes); }
  // CUDA memory straight to the plugin (Comm::device_memory): a plugin
  // with HVD_TRANSPORT_CAP_CUDA_MEMORY, no point-to-point (so every
  // collective is its native one), no shared-memory or hierarchical path.
  bool device_memory() const override {
    return cuda_memory_ && !links_ && !shm_ && !hier_;
  }
  Status DeviceAllreduce(const hvd_transport_buffer_t& buf, size_t count, hvd_dtype_t dtype,
                         hvd_reduce_op_t op) override;
  bool device_average() const override { return device_memory() && device_average_; }
  bool device_reduces(hvd_dtype_t d) const override {
    return reduce_dtypes_ == 0 || (d >= 0 && d < 64 && ((reduce_dtypes_ >> d) & 1) != 0);
  }
  Status DeviceBroadcast(const hvd_transport_buffer_t& buf, int root) override;
  Status DeviceAllgatherv(const hvd_transport_buffer_t& send, const hvd_transport_buffer_t& recv,
                          const size_t* recv_bytes) override;
  Status DeviceAlltoallv(const hvd_transport_buffer_t& send, const size_t* send_bytes,
                         const hvd_transport_buffer_t& recv, const size_t* recv_bytes) override;
  Status DeviceReducescatter(const hvd_transport_buffer_t& buf, const size_t* counts,
                             hvd_dtype_t dtype, hvd_reduce_op_t op) override;
  // What the transport said at start (never asks it again: answered from
  // what Open kept, so any thread may call it): "rank", "size",
  // "local_rank", "local_size", "cross_rank", "cross_size" (where the
  // transport owns its communicator), "mpi_thread_level", "shm" (1 if the
  // shared-memory path runs), "abi" (HVD_TRANSPORT_ABI).
  Result<int64_t> Query(const std::string& key) const;
  // The limit for peers to answer in the calls that follow (kind:
  // HVD_TRANSPORT_LIMIT_*). HVD_ERR_UNSUPPORTED where the plugin lacks the
  // entry point (has_set_timeout()).
  Status SetTimeout(double timeout_s, int32_t kind);
  // Whether the communicator may be called from any thread, one call at a
  // time (HVD_TRANSPORT_CAP_ANY_THREAD, or the built-in local transport).
  bool any_thread() const { return any_thread_; }
  bool has_set_timeout() const { return table_.set_timeout != nullptr; }
  // Any thread: every call blocked in this transport returns `status`
  // promptly, and every later one fails (plugins with abort, and the
  // shared-memory path). False where the transport cannot.
  bool Abort(hvd_status_t status, const std::string& reason) noexcept;

  // The algorithm the next call of `collective` over `bytes` bytes runs,
  // for logs and tests.
  algo::Algorithm Choose(int collective, size_t bytes, hvd_dtype_t dtype = HVD_UINT8) const;

  // A process set: `members` (ranks of this transport, distinct, in the
  // set's rank order, this rank among them) as a communicator of its own.
  // It runs the core's algorithms over this transport's point-to-point with
  // its tags in band `band` (algo::SubsetLinks; band 0 is this transport's
  // own, so 1 <= band < tag_bands()), and shared memory of its own where
  // every member shares a host (the same choice as the transport's: on
  // unless TransportOptions::shm is off). No native collectives: they span
  // the plugin's whole communicator. Collective over the members (the
  // shared-memory set-up); the loop thread only; this transport must
  // outlive it. A failure breaks the transport (every communicator over it).
  // HVD_ERR_UNSUPPORTED for a set of more than one rank where the transport
  // has no point-to-point.
  Result<std::unique_ptr<Comm>> OpenSubset(std::vector<int> members, uint32_t band);
  // How many tag bands of algo::SubsetLinks::kTagBand tags the plugin's tag
  // range holds (0 without point-to-point). Band 0 is the transport's own,
  // bands 1 and 2 its hierarchical steps'; process sets start at
  // kFirstSetBand.
  uint32_t tag_bands() const;
  static constexpr uint32_t kFirstSetBand = 3;
  // The hierarchical collectives are in use (StartHierarchy), for logs and tests.
  bool hierarchical() const { return hier_ != nullptr; }
  // Whether the hierarchical collectives run (autotune switches them off and
  // on, on every rank in the same cycle); only where hierarchical().
  void set_hierarchical(bool on) { hier_on_ = on; }
  bool hierarchical_on() const { return hier_ != nullptr && hier_on_; }
  // Rank r's host name ("" if unknown), as the transport learned it.
  std::string host_of(int r) const {
    return r >= 0 && r < static_cast<int>(hosts_.size()) ? hosts_[static_cast<size_t>(r)] : "";
  }

 private:
  class PluginLinks;
  class Subset;
  Transport() = default;
  Status Check(int rc, const char* what);
  Status LinkFailure(int rc, int peer);
  void WarnHost(hvd_status_t code, const std::string& text) noexcept;
  int HostIndex(int r) const;
  std::string BlockedChain(int r) const;
  Status Start(const hvd_transport_env_t& env, const TransportOptions& opts, Logger* log);
  Status Init(const hvd_transport_env_t& env, const TransportOptions& opts);
  Status ForceAlgorithms(const TransportOptions& opts, bool* want_shm);
  Status StartHosts(const TransportOptions& opts, double timeout_s, Logger* log);
  Status StartHierarchy(const TransportOptions& opts, Logger* log);
  // A shared-memory collective failed: breaks the transport, wakes the
  // segment's peers. members maps the segment's ranks to this transport's
  // (null: the same).
  Status ShmFailure(shm::Segment& seg, const char* what, const Status& e,
                    const std::vector<int>* members = nullptr);
  hvd_transport_buffer_t Host(const void* data, size_t bytes) const;
  // The core's own collectives over one group of ranks (this transport's,
  // or a process set's): the shared-memory segment where `how` is kShm,
  // else the point-to-point algorithm `how` names. Shared by the transport
  // and its process sets, which differ only in the group and the choice.
  struct CoreGroup {
    shm::Segment* shm = nullptr;
    algo::Links* links = nullptr;
    algo::Scratch* scratch = nullptr;
    const std::vector<int>* members = nullptr;  // for ShmFailure (null: every rank)
  };
  // st, or where a shared-memory collective of g failed, ShmFailure's.
  Status ShmChecked(const CoreGroup& g, const char* what, Status st);
  Status CoreAllreduce(const CoreGroup& g, algo::Algorithm how, void* buf, size_t count,
                       hvd_dtype_t dtype, hvd_reduce_op_t op);
  Status CoreReducescatter(const CoreGroup& g, algo::Algorithm how, void* buf,
                           const size_t* counts, const std::vector<size_t>& start,
                           hvd_dtype_t dtype, hvd_reduce_op_t op);
  Status CoreAllreduceSpans(const CoreGroup& g, algo::Algorithm how,
                            const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                            hvd_reduce_op_t op);
  // An allreduce of `bytes` runs the ring over point-to-point here, and may
  // take spans.
  bool RingSpans(size_t bytes) const;
  Status CoreAllgatherv(const CoreGroup& g, algo::Algorithm how, const void* send, void* recv,
                        const size_t* recv_bytes);
  Status CoreBroadcast(const CoreGroup& g, algo::Algorithm how, void* buf, size_t bytes, int root);
  Status CoreBarrier(const CoreGroup& g, algo::Algorithm how);
  CoreGroup Whole() { return CoreGroup{shm_.get(), links_.get(), &scratch_, nullptr}; }

  hvd_transport_t table_{};  // the plugin's table, zero-extended to this core's size
  const char* name_ = "";    // PersistentTransportName(table_.name)
  void* dl_ = nullptr;
  void* comm_ = nullptr;
  bool spans_ = false;
  bool ring_spans_ = true;  // HVD_FUSION_IN_PLACE
  bool any_thread_ = false;
  bool cuda_memory_ = false;  // HVD_TRANSPORT_CAP_CUDA_MEMORY
  bool device_average_ = false;  // HVD_TRANSPORT_CAP_AVERAGE
  uint64_t reduce_dtypes_ = 0;   // hvd_transport_t.reduce_dtypes (0: every dtype)
  std::vector<std::pair<std::string, int64_t>> facts_;  // Query's answers

  hvd_transport_info_t info_{};
  std::unique_ptr<algo::Links> links_;
  std::unique_ptr<shm::Segment> shm_;
  algo::Scratch scratch_;
  algo::Algorithm forced_[HVD_TRANSPORT_COLLECTIVES] = {};
  hvd_reduce_kernel_fn reduce_ = nullptr;
  Logger* log_ = nullptr;
  int rank_ = 0;             // env.rank (or the plugin's)
  int size_ = 1;             // env.size (or the plugin's)
  // Kept from Open for OpenSubset.
  bool shm_enabled_ = true;
  std::string shm_switch_ = "HVD_SHM";
  double limit_s_ = 0;  // the limit SetTimeout set last (env.timeout_s at first)
  bool peer_limit_ = false;  // the limit in force is the peer timeout
  const char* op_ = "";      // the collective running, for messages

  std::vector<std::string> hosts_;  // every rank's host name, for messages
  std::string host_id_;  // this rank's host identity (TransportOptions::host_id or the machine's)
  // The hierarchical steps (algorithms/hierarchical.h): the ranks of this
  // host (shared memory), and the ranks with this rank's local index on
  // every host (point-to-point).
  std::unique_ptr<algo::Hierarchy> hier_;
  bool hier_on_ = true;  // set_hierarchical
  int reproducible_ = -1;  // TransportOptions::reproducible
  // A host reduction that must keep the canonical order: OrderMatters, and
  // HVD_REPRODUCIBLE unset or 1 (level 0: natives) or 1 (level 1: hierarchy).
  bool Canonical(int c, hvd_dtype_t d, int level) const {
    return algo::OrderMatters(c, d) && (level == 0 ? reproducible_ != 0 : reproducible_ == 1);
  }
  // The shared memory of this rank's host: shm_, else the hierarchy's host
  // step's where it has one; null if neither. Point-to-point waits note
  // their peer in it (shm::Segment::NoteWait) for BlockedChain.
  shm::Segment* host_seg_ = nullptr;
  std::string Who(int r) const;     // "rank 2 (host h)"
  int64_t FactOr(const char* key, int64_t dflt) const;

  // The first failure: later calls fail at once with it, and
  // an abort from another thread sets it too.
  std::atomic<int> failure_{HVD_OK};
  mutable std::mutex fail_mu_;
  std::string fail_msg_;
  std::vector<shm::Segment*> subset_shm_;  // live subsets' segments (Abort wakes them); under fail_mu_
  bool broken() const { return failure_.load() != HVD_OK; }
  void Broke(const Status& s) noexcept;
  Status Unusable() const;
  size_t comm_size() const;  // the communicator's size
};

}  // namespace hvd
