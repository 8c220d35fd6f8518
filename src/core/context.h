// A Context is one communicator: it owns its configuration, rendezvous
// client, transport, queue, fusion buffer, timeline and background thread.
// Nothing here is process-global.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "core/request.h"
#include "hvd.h"

namespace hvd {

class ContextImpl;

class Context {
 public:
  // Collective over the job: forms the communicator (rendezvous, transport)
  // and starts the background thread. params may be NULL.
  static Result<std::unique_ptr<Context>> Create(const hvd_params_t* params);
  ~Context();  // = Shutdown()

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
  };
  BufferStats buffer_stats() const;

  // Queues a request and returns at once. OpType::kBarrier and kJoin get
  // their names here (callers leave them empty). Fails immediately (no handle) if the
  // context is shut down or broken, or a tensor name is already in flight.
  Result<std::shared_ptr<Handle>> Enqueue(OpRequest request);

  // Stops the background thread; pending handles complete with
  // HVD_ERR_ABORTED; peers are told. Idempotent.
  void Shutdown();

 private:
  explicit Context(std::unique_ptr<ContextImpl> impl);
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace hvd
