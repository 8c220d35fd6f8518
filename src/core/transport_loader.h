// Finds, loads and wraps a transport: built-in tables first (the single-rank
// "local" transport, and whatever the static library compiled in), then
// libhvd_transport_<name>.so in the transport path's folders
// (params.transport_path or HVD_TRANSPORT_PATH) and next to libhvd.so itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/logging.h"
#include "transports/hvd_transport.h"

namespace hvd {

class Transport {
 public:
  // Loads `name` and connects (table->init). search_path: ':'-separated folders.
  static Result<std::unique_ptr<Transport>> Open(const std::string& name,
                                                 const std::string& search_path,
                                                 const hvd_transport_env_v1_t& env, Logger* log);
  // OK if a table for `name` can be found (does not connect); else why not,
  // naming the folders searched.
  static Status Check(const std::string& name, const std::string& search_path);
  static bool Available(const std::string& name, const std::string& search_path) {
    return Check(name, search_path).ok();
  }

  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const char* name() const { return table_->name; }

  Status Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op);
  Status Allgatherv(const void* send, void* recv, const size_t* recv_bytes);
  Status Broadcast(void* buf, size_t bytes, int root);
  Status Alltoallv(const void* send, const size_t* send_bytes, void* recv, const size_t* recv_bytes);
  Status Barrier();
  // In place over sum(counts) elements; on return this rank's block holds its
  // reduction (see hvd_transport_v2_t). HVD_ERR_UNSUPPORTED where the plugin
  // lacks the entry point (has_reducescatter()).
  Status Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype, hvd_reduce_op_t op);
  bool has_reducescatter() const { return v2_ != nullptr && v2_->reducescatter != nullptr; }
  // In place over the concatenation of spans, as one allreduce of them packed
  // (hvd_transport_v2_t). Only where allreduce_spans(): the plugin has the
  // entry point and its query("allreduce_spans") answered 1 at start.
  Status AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                        hvd_reduce_op_t op);
  bool allreduce_spans() const { return spans_; }
  Result<int64_t> Query(const std::string& key) const;

 private:
  Transport() = default;
  Status Check(int rc, const char* what);

  const hvd_transport_v1_t* table_ = nullptr;
  const hvd_transport_v2_t* v2_ = nullptr;  // null: a version 1 plugin
  void* dl_ = nullptr;
  void* comm_ = nullptr;
  bool spans_ = false;
};

}  // namespace hvd
