// A Context is one communicator: it owns its configuration, rendezvous
// client, transport, queue, fusion buffer, timeline and background thread.
// A process set (Split, CreateProcessSet) is a Context too: its own ranks,
// queue, negotiation, response cache and name scope, over its parent's
// connections and driven by its parent's one background thread.
// Nothing here is process-global.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/config/config.h"
#include "core/loop/request.h"
#include "hvd.h"

namespace hvd {

class ContextImpl;
class ElasticMember;
struct Scope;

class Context {
 public:
  // Collective over the job: forms the communicator (rendezvous, transport)
  // and starts the background thread. params may be NULL.
  static Result<std::unique_ptr<Context>> Create(const hvd_params_t* params);
  // The same with the settings read from `env` instead of the process's
  // environment (tests: thread-ranks of one process with different settings).
  static Result<std::unique_ptr<Context>> Create(const hvd_params_t* params,
                                                 const EnvLookup& env);
  ~Context();  // = Shutdown()

  // Process sets: collective over this context's ranks (every rank calls,
  // in the same order as its other process-set calls on this context). A
  // rank outside the new set gets nullptr. Only a context made by Create
  // can have process sets (not a process set itself).
  //  - Split: MPI_Comm_split: ranks with the same color >= 0 form one set,
  //    ordered by (key, rank); color HVD_UNDEFINED_COLOR joins none.
  //  - CreateProcessSet: the listed ranks (sorted, distinct, in range), the
  //    same list on every rank.
  // Disagreeing ranks all get HVD_ERR_MISMATCH, a bad list or color
  // HVD_ERR_INVALID_ARGUMENT, naming the rank and what it gave.
  Result<std::unique_ptr<Context>> Split(int color, int key);
  Result<std::unique_ptr<Context>> CreateProcessSet(const std::vector<int32_t>& ranks);
  bool is_process_set() const;
  // Ranks of the parent context, in this context's rank order (a context
  // made by Create: 0 .. size - 1).
  const std::vector<int>& parent_ranks() const;

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  int cross_rank() const;
  int cross_size() const;
  const char* transport_name() const;
  // A named integer property of the transport ("mpi_thread_level", ...);
  // HVD_ERR_UNSUPPORTED when the transport does not know it.
  Result<int64_t> Query(const std::string& key) const;

  // Memory the context holds for reuse, for tests and debugging: the
  // fusion buffer's capacity and the spare bytes of its buffer pool. Reads
  // the background thread's state: call only while no operation is in flight.
  struct BufferStats {
    size_t fusion_capacity = 0;
    size_t pool_spare_bytes = 0;
    size_t staging_capacity = 0;  // page-locked staging memory for CUDA tensors
  };
  BufferStats buffer_stats() const;

  // The timeline at run time (hvd_timeline_start / hvd_timeline_stop):
  // handed to the background thread, which applies it at its next cycle;
  // returns its outcome. No-ops (after checking arguments) except on rank 0
  // of the job.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  Status StopTimeline();
  // Writes this rank's flight record to path ("": the configured folder's
  // rank-<r>.json).
  Status DumpFlightRecorder(const std::string& path);

  // The metrics of the job context and its live sets, as text
  // (HVD_METRICS_JSON or HVD_METRICS_PROMETHEUS). Any thread.
  std::string Metrics(int format) const;

  // Whether a CUDA tensor on `device` (tensor `name`, data `data`, or null
  // not to check the pointer) can be served: loads the context's CUDA
  // runtime the first time (see core/exec/cuda_runtime.h). Any thread.
  Status CheckDevice(int device, const std::string& name, const void* data);

  // Queues a request and returns at once. OpType::kBarrier and kJoin get
  // their names here (callers leave them empty). Fails immediately (no handle) if the
  // context is shut down or broken, or a tensor name is already in flight.
  // On success the handle is request.handle itself.
  Result<HandleRef> Enqueue(OpRequest&& request);
  // The same for a request of one tensor, given apart (request.tensors
  // empty; `tensor` without its name, given as `name`): it is placed in a
  // tensor list a finished request gave back, its name assigned into that
  // list's string, so that a steady state of single-tensor submits
  // allocates neither (a step of 1,000 tensors made and freed 1,000 lists,
  // and as many strings for names past 15 characters, a frontend's).
  // The caller keeps its own reference to request.handle (no copy here:
  // a reference is an atomic count).
  Status EnqueueOne(OpRequest&& request, const TensorSpec& tensor, std::string_view name);

  // Stops the background thread; pending handles complete with
  // HVD_ERR_ABORTED; peers are told; process sets made from it stop too
  // (their pending handles complete with HVD_ERR_ABORTED and later calls
  // fail). For a process set: destroys the set, collective over its
  // members (pending handles complete with HVD_ERR_ABORTED). Idempotent.
  // Returns the set's close status (Ok for a context made by Create).
  Status Shutdown();

  // Elastic jobs (docs/elastic.md). Reset: leaves the current epoch (pending
  // operations and process sets fail with HVD_ERR_MEMBERSHIP_CHANGED), joins
  // the next one and forms the context again with the rank and size the
  // launcher assigned. Not concurrent with other calls on this context.
  // HVD_ERR_UNSUPPORTED for a context not in an elastic job, or a set.
  Status Reset();
  struct Membership {
    bool elastic = false;
    bool hosts_updated = false;
    int64_t epoch = 0;
  };
  // hosts_updated asks the store (one round trip) in an elastic job.
  Result<Membership> membership();

 private:
  Context(std::shared_ptr<ContextImpl> impl, std::shared_ptr<Scope> scope);
  std::shared_ptr<ContextImpl> impl_;
  std::shared_ptr<Scope> scope_;
  bool shut_ = false;
  // An elastic job's worker side, kept across resets (root contexts only).
  std::shared_ptr<ElasticMember> elastic_;
};

}  // namespace hvd
