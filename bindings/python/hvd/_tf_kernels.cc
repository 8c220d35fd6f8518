// TensorFlow kernels for hvd.tensorflow's collectives in graphs (tf.function,
// Keras' compiled train step, tf.compat.v1 Session.run).
//
// Built against the installed TensorFlow on first use (hvd/_tf_kernels.py:
// tf.sysconfig's compile and link flags, cached per TensorFlow version) and
// bound at run time to the libhvd.so the Python package loaded
// (hvd_tf_kernels_bind), so this file needs no hvd headers or libraries at
// build time.
//
// Why asynchronous kernels
// ------------------------
// A collective completes only once every rank has submitted it. A kernel
// that submits and then blocks until completion (what a tf.py_function
// around hvd.allreduce does) holds one of TensorFlow's inter-op threads while
// it waits. With more independent hvd ops in one graph run than the pool has
// threads, and ranks whose executors pick those ops in different orders,
// every thread of rank 0 waits for ops rank 1 has not submitted and every
// thread of rank 1 for ops rank 0 has not submitted: a deadlock (found with
// inter_op_parallelism_threads=1 and two ops).
//
// These kernels are AsyncOpKernels: ComputeAsync submits the operation
// (hvd_*_async never waits for other ranks) and returns at once; one poller
// thread, owned by this library, watches the pending handles and calls each
// op's done callback when its handle completes. So:
//   1. no TensorFlow thread ever waits for another rank: a TensorFlow thread
//      runs ComputeAsync for a time bounded by the local work of a submit;
//   2. hence every hvd op whose inputs are ready is submitted after bounded
//      time on every rank (the executor always has a free thread for it);
//   3. the poller never waits on one handle in a way that delays another:
//      it polls them all and sleeps at most kMaxSleep between rounds.
// By (2), an op that every rank's run reaches is eventually submitted by
// every rank, so it completes (hvd matches ops by name, in any order), and
// by (3) its done callback runs, which makes the ops that depend on it
// ready. Induction over the graph's dependency order: every run in which
// all ranks reach the same hvd ops finishes, whatever the thread pool size
// and however each rank orders independent ops. (Ranks that do not reach the
// same ops are a program error; hvd's stall inspector then fails the ops
// with an error naming the missing ranks.)
//
// The ops' definitions (attributes, shapes; all stateful) are in _tf_ops.cc.

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvd_tf {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace si = ::tensorflow::shape_inference;
using Status = ::absl::Status;

// ---------------------------------------------------------------------------
// The slice of include/hvd.h used here. Status numbers, enum values and the
// tensor descriptor's layout are frozen by the C ABI.
// ---------------------------------------------------------------------------
extern "C" {
typedef struct hvd_context_s *hvd_context_t;
typedef struct hvd_handle_s *hvd_handle_t;
typedef int hvd_status_t;
typedef struct {
  void *data;
  int dtype;
  int32_t ndim;
  const int64_t *shape;
  int32_t device;
  void *stream;
} hvd_tensor_t;
}

constexpr hvd_status_t kInProgress = 1;
constexpr int kMaxNdim = 32;
constexpr int32_t kDeviceCpu = -1;

struct Api {
  hvd_status_t (*allreduce_async)(hvd_context_t, const char *, const hvd_tensor_t *, void *,
                                  int, double, double, hvd_handle_t *);
  hvd_status_t (*grouped_allreduce_async)(hvd_context_t, int32_t, const char *const *,
                                          const hvd_tensor_t *, void *const *, int, double,
                                          double, hvd_handle_t *);
  hvd_status_t (*allgather_async)(hvd_context_t, const char *, const hvd_tensor_t *,
                                  hvd_handle_t *);
  hvd_status_t (*broadcast_async)(hvd_context_t, const char *, const hvd_tensor_t *, void *,
                                  int32_t, hvd_handle_t *);
  hvd_status_t (*alltoall_async)(hvd_context_t, const char *, const hvd_tensor_t *,
                                 const int64_t *, hvd_handle_t *);
  hvd_status_t (*reducescatter_async)(hvd_context_t, const char *, const hvd_tensor_t *, int,
                                      double, double, hvd_handle_t *);
  hvd_status_t (*handle_wait)(hvd_handle_t, double);
  hvd_status_t (*handle_poll)(hvd_handle_t);
  hvd_status_t (*handle_release)(hvd_handle_t);
  hvd_status_t (*handle_output)(hvd_handle_t, const void **, size_t *);
  hvd_status_t (*handle_output_shape)(hvd_handle_t, int64_t *, int32_t, int32_t *);
  hvd_status_t (*handle_recv_splits)(hvd_handle_t, int64_t *, int32_t);
  hvd_status_t (*rank)(int *);
  hvd_status_t (*size)(int *);
  hvd_status_t (*local_rank)(int *);
  hvd_status_t (*local_size)(int *);
  hvd_status_t (*context_size)(hvd_context_t, int *);
  const char *(*last_error)(void);
};

Api g_api;
bool g_bound = false;  // written once, before any kernel runs (Python binds first)

const char *StatusName(hvd_status_t st) {
  static const char *const kNames[] = {
      "HVD_OK",           "HVD_ERR_INVALID_ARGUMENT", "HVD_ERR_NOT_INITIALIZED",
      "HVD_ERR_NO_MEMORY", "HVD_ERR_TIMEOUT",         "HVD_ERR_MISMATCH",
      "HVD_ERR_TRANSPORT", "HVD_ERR_UNSUPPORTED",     "HVD_ERR_NOT_FOUND",
      "HVD_ERR_ABORTED",  "HVD_ERR_DUPLICATE_NAME",  "HVD_ERR_VERSION",
      "HVD_ERR_RENDEZVOUS", "HVD_ERR_INTERNAL", "HVD_ERR_MEMBERSHIP_CHANGED"};
  if (st <= 0 && st >= -14) return kNames[-st];
  return "HVD_ERR_UNKNOWN";
}

// hvd's error as TensorFlow's: the text is hvd's message (which names the
// operation) and status name, as str() of hvd's Python exception reads; the
// code follows the status.
Status ToTf(hvd_status_t st, const std::string &what, const std::string &msg) {
  std::string text = (msg.empty() ? what : msg) + " [" + StatusName(st) + "]";
  switch (st) {
    case -1: return errors::InvalidArgument(text);
    case -2: return errors::FailedPrecondition(text);  // not initialized
    case -3: return errors::ResourceExhausted(text);
    case -4: return errors::DeadlineExceeded(text);
    case -5: return errors::FailedPrecondition(text);  // ranks disagree
    case -6: return errors::Unavailable(text);         // transport failed
    case -7: return errors::Unimplemented(text);
    case -8: return errors::NotFound(text);
    case -9: return errors::Aborted(text);
    case -10: return errors::AlreadyExists(text);
    case -11: return errors::FailedPrecondition(text);
    case -12: return errors::Unavailable(text);
    case -13: return errors::Internal(text);
    case -14: return errors::Aborted(text);  // elastic job: hvd.elastic.run resets
    default: return errors::Unknown(text);
  }
}

std::string LastError() {
  const char *e = g_api.last_error ? g_api.last_error() : nullptr;
  return e ? std::string(e) : std::string();
}

Status CheckBound() {
  if (!g_bound) {
    return errors::FailedPrecondition(
        "hvd's TensorFlow kernels are not bound to libhvd.so: import hvd.tensorflow (which "
        "loads them) instead of loading this library directly");
  }
  return Status();
}

bool HvdDtype(DataType dt, int *out) {
  switch (dt) {
    case ::tensorflow::DT_UINT8: *out = 0; return true;
    case ::tensorflow::DT_INT8: *out = 1; return true;
    case ::tensorflow::DT_UINT16: *out = 2; return true;
    case ::tensorflow::DT_INT16: *out = 3; return true;
    case ::tensorflow::DT_INT32: *out = 4; return true;
    case ::tensorflow::DT_INT64: *out = 5; return true;
    case ::tensorflow::DT_HALF: *out = 6; return true;
    case ::tensorflow::DT_BFLOAT16: *out = 7; return true;
    case ::tensorflow::DT_FLOAT: *out = 8; return true;
    case ::tensorflow::DT_DOUBLE: *out = 9; return true;
    case ::tensorflow::DT_BOOL: *out = 10; return true;
    default: return false;
  }
}

// A descriptor of a TensorFlow tensor; the shape array lives with it.
struct Desc {
  hvd_tensor_t t;
  int64_t dims[kMaxNdim];

  Status Fill(const Tensor &x) {
    if (!HvdDtype(x.dtype(), &t.dtype)) {
      return errors::InvalidArgument("hvd: dtype ", ::tensorflow::DataTypeString(x.dtype()),
                                     " is not supported");
    }
    if (x.dims() > kMaxNdim) {
      return errors::InvalidArgument("hvd: tensors may have at most ", kMaxNdim,
                                     " dimensions, got ", x.dims());
    }
    t.ndim = x.dims();
    for (int i = 0; i < x.dims(); ++i) dims[i] = x.dim_size(i);
    t.shape = dims;
    t.data = x.NumElements() ? const_cast<char *>(x.tensor_data().data()) : nullptr;
    t.device = kDeviceCpu;
    t.stream = nullptr;
    return Status();
  }
};

// ---------------------------------------------------------------------------
// Process sets. An op's `process_set_id` attr names a process set registered
// on the default context (hvd.add_process_set); the Python package tells
// this library each set's context (hvd_tf_kernels_set_context) and takes it
// back before destroying the set. An op looks the id up and submits while
// holding the table's lock, so a set is never destroyed between the lookup
// and the submit; id 0 is the default context itself.
// ---------------------------------------------------------------------------
std::mutex g_sets_mu;
std::unordered_map<int64_t, hvd_context_t> g_sets;

// Runs submit(ctx) for the op's process set under the table's lock; an id
// that is not registered (never, or removed since the graph was built) fails
// without submitting.
hvd_status_t WithSet(int64_t id, const std::function<hvd_status_t(hvd_context_t)> &submit,
                     std::string *why) {
  if (id == 0) return submit(nullptr);
  std::lock_guard<std::mutex> lk(g_sets_mu);
  auto it = g_sets.find(id);
  if (it == g_sets.end()) {
    *why = "process set " + std::to_string(id) +
           " is not registered on this rank (removed with hvd.remove_process_set, or this "
           "rank is not one of its members)";
    return -1;
  }
  return submit(it->second);
}

// ---------------------------------------------------------------------------
// The poller: completes pending handles on a thread of its own.
// ---------------------------------------------------------------------------
using Finish = std::function<void(hvd_handle_t, hvd_status_t, const std::string &)>;

class Poller {
 public:
  static Poller &Get() {
    // Never destroyed: the thread may outlive static destruction at exit.
    static Poller *p = new Poller();
    return *p;
  }

  void Add(hvd_handle_t h, Finish finish) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      incoming_.push_back({h, std::move(finish)});
    }
    cv_.notify_one();
  }

 private:
  struct Item {
    hvd_handle_t handle;
    Finish finish;
  };
  static constexpr std::chrono::microseconds kMinSleep{20};
  static constexpr std::chrono::microseconds kMaxSleep{1000};

  Poller() { std::thread([this] { Loop(); }).detach(); }

  void Loop() {
    std::vector<Item> pending;
    auto sleep = kMinSleep;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (pending.empty()) {
          cv_.wait(lk, [this] { return !incoming_.empty(); });
        } else if (incoming_.empty()) {
          cv_.wait_for(lk, sleep, [this] { return !incoming_.empty(); });
        }
        for (auto &it : incoming_) pending.push_back(std::move(it));
        incoming_.clear();
      }
      bool completed = false;
      for (size_t i = 0; i < pending.size();) {
        hvd_handle_t h = pending[i].handle;
        if (g_api.handle_poll(h) == kInProgress) {
          ++i;
          continue;
        }
        // Done: wait(0) returns its status and sets this thread's last error.
        hvd_status_t st = g_api.handle_wait(h, 0.0);
        std::string msg = st < 0 ? LastError() : std::string();
        Finish finish = std::move(pending[i].finish);
        pending[i] = std::move(pending.back());
        pending.pop_back();
        finish(h, st, msg);
        g_api.handle_release(h);
        completed = true;
      }
      sleep = completed ? kMinSleep : std::min(sleep * 2, kMaxSleep);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Item> incoming_;
};

// The completion of an op whose outputs were written in place: its status,
// then done. `keep` holds the inputs (and anything else the library reads)
// alive until the op completes.
template <class Keep>
Finish StatusOnly(OpKernelContext *ctx, AsyncOpKernel::DoneCallback done, std::string what,
                  Keep keep) {
  return [ctx, done, what, keep](hvd_handle_t, hvd_status_t st, const std::string &msg) {
    if (st < 0) ctx->SetStatus(ToTf(st, what, msg));
    done();
  };
}

// Submits through `submit` on process set `set_id`'s context (it returns the
// status and sets *h); on failure fails the op at once, else hands the handle
// to the poller.
void Launch(OpKernelContext *ctx, AsyncOpKernel::DoneCallback done, const std::string &what,
            int64_t set_id,
            const std::function<hvd_status_t(hvd_context_t, hvd_handle_t *)> &submit,
            Finish finish) {
  hvd_handle_t h = nullptr;
  std::string why;
  hvd_status_t st = WithSet(set_id, [&](hvd_context_t c) { return submit(c, &h); }, &why);
  if (st < 0) {
    ctx->SetStatus(why.empty() ? ToTf(st, what, LastError())
                               : errors::FailedPrecondition("hvd: ", what, ": ", why));
    done();
    return;
  }
  Poller::Get().Add(h, std::move(finish));
}

Status ReadScale(OpKernelContext *ctx, int index, double *out) {
  const Tensor &t = ctx->input(index);
  if (t.dtype() != ::tensorflow::DT_DOUBLE || t.NumElements() != 1) {
    return errors::InvalidArgument("hvd: scale factors must be float64 scalars");
  }
  *out = t.flat<double>()(0);
  return Status();
}

// Result owned by the handle (allgather, alltoall, reducescatter): copied
// into a new output.
Status CopyOwnedOutput(OpKernelContext *ctx, hvd_handle_t h, int index) {
  int64_t dims[kMaxNdim];
  int32_t ndim = 0;
  hvd_status_t st = g_api.handle_output_shape(h, dims, kMaxNdim, &ndim);
  if (st < 0) return ToTf(st, "hvd: result shape", LastError());
  TensorShape shape;
  for (int i = 0; i < ndim; ++i) {
    Status s = shape.AddDimWithStatus(dims[i]);
    if (!s.ok()) return s;
  }
  Tensor *out = nullptr;
  Status s = ctx->allocate_output(index, shape, &out);
  if (!s.ok()) return s;
  const void *data = nullptr;
  size_t bytes = 0;
  st = g_api.handle_output(h, &data, &bytes);
  if (st < 0) return ToTf(st, "hvd: result", LastError());
  size_t want = out->TotalBytes();
  if (bytes != want && !(want == 0 && data == nullptr)) {
    return errors::Internal("hvd: result holds ", bytes, " bytes, its shape needs ", want);
  }
  if (want) std::memcpy(const_cast<char *>(out->tensor_data().data()), data, want);
  return Status();
}

class HvdKernel : public AsyncOpKernel {
 public:
  explicit HvdKernel(OpKernelConstruction *c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &set_));
  }

 protected:
  std::string What(const char *op) const { return std::string(op) + " '" + name_ + "'"; }
  std::string name_;
  int64_t set_ = 0;
};

class AllreduceOp : public HvdKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction *c) : HvdKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, CheckBound(), done);
    Tensor in = ctx->input(0);
    double pre = 1, post = 1;
    OP_REQUIRES_OK_ASYNC(ctx, ReadScale(ctx, 1, &pre), done);
    OP_REQUIRES_OK_ASYNC(ctx, ReadScale(ctx, 2, &post), done);
    Desc d;
    OP_REQUIRES_OK_ASYNC(ctx, d.Fill(in), done);
    Tensor *out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    void *out_ptr = in.NumElements() ? const_cast<char *>(out->tensor_data().data()) : nullptr;
    std::string what = What("allreduce");
    Launch(
        ctx, done, what, set_,
        [&](hvd_context_t hc, hvd_handle_t *h) {
          return g_api.allreduce_async(hc, name_.c_str(), &d.t, out_ptr, op_, pre, post, h);
        },
        StatusOnly(ctx, done, what, in));
  }

 private:
  int op_ = 0;
};

class GroupedAllreduceOp : public HvdKernel {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction *c) : HvdKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, CheckBound(), done);
    ::tensorflow::OpInputList ins;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->input_list("tensors", &ins), done);
    const int n = ins.size();
    double pre = 1, post = 1;
    OP_REQUIRES_OK_ASYNC(ctx, ReadScale(ctx, n, &pre), done);
    OP_REQUIRES_OK_ASYNC(ctx, ReadScale(ctx, n + 1, &post), done);
    std::vector<Tensor> keep;
    std::vector<Desc> descs(n);
    std::vector<hvd_tensor_t> ts(n);
    std::vector<void *> outs(n);
    std::vector<std::string> names(n);
    std::vector<const char *> name_ptrs(n);
    ::tensorflow::OpOutputList out_list;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->output_list("outputs", &out_list), done);
    for (int i = 0; i < n; ++i) {
      keep.push_back(ins[i]);
      OP_REQUIRES_OK_ASYNC(ctx, descs[i].Fill(ins[i]), done);
      ts[i] = descs[i].t;
      Tensor *o = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, out_list.allocate(i, ins[i].shape(), &o), done);
      outs[i] = ins[i].NumElements() ? const_cast<char *>(o->tensor_data().data()) : nullptr;
      names[i] = name_ + "." + std::to_string(i);  // as hvd.grouped_allreduce names them
      name_ptrs[i] = names[i].c_str();
    }
    std::string what = What("grouped allreduce");
    Launch(
        ctx, done, what, set_,
        [&](hvd_context_t hc, hvd_handle_t *h) {
          return g_api.grouped_allreduce_async(hc, n, name_ptrs.data(), ts.data(), outs.data(),
                                               op_, pre, post, h);
        },
        StatusOnly(ctx, done, what, keep));
  }

 private:
  int op_ = 0;
};

class BroadcastOp : public HvdKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction *c) : HvdKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, CheckBound(), done);
    Tensor in = ctx->input(0);
    Desc d;
    OP_REQUIRES_OK_ASYNC(ctx, d.Fill(in), done);
    Tensor *out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    void *out_ptr = in.NumElements() ? const_cast<char *>(out->tensor_data().data()) : nullptr;
    std::string what = What("broadcast");
    Launch(
        ctx, done, what, set_,
        [&](hvd_context_t hc, hvd_handle_t *h) {
          return g_api.broadcast_async(hc, name_.c_str(), &d.t, out_ptr, root_, h);
        },
        StatusOnly(ctx, done, what, in));
  }

 private:
  int root_ = 0;
};

class AllgatherOp : public HvdKernel {
 public:
  using HvdKernel::HvdKernel;

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, CheckBound(), done);
    Tensor in = ctx->input(0);
    Desc d;
    OP_REQUIRES_OK_ASYNC(ctx, d.Fill(in), done);
    std::string what = What("allgather");
    Launch(
        ctx, done, what, set_,
        [&](hvd_context_t hc, hvd_handle_t *h) {
          return g_api.allgather_async(hc, name_.c_str(), &d.t, h);
        },
        [ctx, done, in, what](hvd_handle_t h, hvd_status_t st, const std::string &msg) {
          if (st < 0) {
            ctx->SetStatus(ToTf(st, what, msg));
          } else {
            ctx->SetStatus(CopyOwnedOutput(ctx, h, 0));
          }
          done();
        });
  }
};

class ReducescatterOp : public HvdKernel {
 public:
  explicit ReducescatterOp(OpKernelConstruction *c) : HvdKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, CheckBound(), done);
    Tensor in = ctx->input(0);
    double pre = 1, post = 1;
    OP_REQUIRES_OK_ASYNC(ctx, ReadScale(ctx, 1, &pre), done);
    OP_REQUIRES_OK_ASYNC(ctx, ReadScale(ctx, 2, &post), done);
    Desc d;
    OP_REQUIRES_OK_ASYNC(ctx, d.Fill(in), done);
    std::string what = What("reducescatter");
    Launch(
        ctx, done, what, set_,
        [&](hvd_context_t hc, hvd_handle_t *h) {
          return g_api.reducescatter_async(hc, name_.c_str(), &d.t, op_, pre, post, h);
        },
        [ctx, done, in, what](hvd_handle_t h, hvd_status_t st, const std::string &msg) {
          if (st < 0) {
            ctx->SetStatus(ToTf(st, what, msg));
          } else {
            ctx->SetStatus(CopyOwnedOutput(ctx, h, 0));
          }
          done();
        });
  }

 private:
  int op_ = 0;
};

class AlltoallOp : public HvdKernel {
 public:
  using HvdKernel::HvdKernel;

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, CheckBound(), done);
    Tensor in = ctx->input(0);
    const Tensor &splits = ctx->input(1);
    int size = 0;
    std::string why;
    hvd_status_t st = WithSet(
        set_,
        [&](hvd_context_t hc) { return hc ? g_api.context_size(hc, &size) : g_api.size(&size); },
        &why);
    OP_REQUIRES_ASYNC(ctx, st >= 0,
                      why.empty() ? ToTf(st, What("alltoall"), LastError())
                                  : errors::FailedPrecondition("hvd: ", What("alltoall"), ": ",
                                                               why),
                      done);
    std::vector<int64_t> split_vec;
    if (splits.NumElements() > 0) {
      OP_REQUIRES_ASYNC(ctx, splits.NumElements() == size,
                        errors::InvalidArgument("hvd: alltoall splits has ",
                                                splits.NumElements(),
                                                " entries, need one per rank (", size, ")"),
                        done);
      auto f = splits.flat<int64_t>();
      for (int i = 0; i < size; ++i) split_vec.push_back(f(i));
    }
    Desc d;
    OP_REQUIRES_OK_ASYNC(ctx, d.Fill(in), done);
    std::string what = What("alltoall");
    Launch(
        ctx, done, what, set_,
        [&](hvd_context_t hc, hvd_handle_t *h) {
          return g_api.alltoall_async(hc, name_.c_str(), &d.t,
                                      split_vec.empty() ? nullptr : split_vec.data(), h);
        },
        [ctx, done, in, what, size](hvd_handle_t h, hvd_status_t st, const std::string &msg) {
          if (st < 0) {
            ctx->SetStatus(ToTf(st, what, msg));
            done();
            return;
          }
          Status s = CopyOwnedOutput(ctx, h, 0);
          if (s.ok()) {
            Tensor *recv = nullptr;
            s = ctx->allocate_output(1, TensorShape({size}), &recv);
            if (s.ok()) {
              hvd_status_t rs = g_api.handle_recv_splits(h, recv->flat<int64_t>().data(), size);
              if (rs < 0) s = ToTf(rs, what, LastError());
            }
          }
          ctx->SetStatus(s);
          done();
        });
  }
};

// rank_op and friends: evaluated when the graph runs, so a graph built
// before hvd.init() reports the rank of the context live at run time.
class TopologyOp : public OpKernel {
 public:
  using IntFn = hvd_status_t (*)(int *);
  TopologyOp(OpKernelConstruction *c, IntFn Api::*fn, const char *what)
      : OpKernel(c), fn_(fn), what_(what) {}

  void Compute(OpKernelContext *ctx) override {
    OP_REQUIRES_OK(ctx, CheckBound());
    int v = 0;
    hvd_status_t st = (g_api.*fn_)(&v);
    OP_REQUIRES(ctx, st >= 0, ToTf(st, what_, LastError()));
    Tensor *out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = v;
  }

 private:
  IntFn Api::*fn_;
  const char *what_;
};

#define HVD_TOPOLOGY_OP(Class, field)                                                     \
  class Class : public TopologyOp {                                                       \
   public:                                                                                \
    explicit Class(OpKernelConstruction *c) : TopologyOp(c, &Api::field, "hvd " #field) {} \
  };
HVD_TOPOLOGY_OP(RankOp, rank)
HVD_TOPOLOGY_OP(SizeOp, size)
HVD_TOPOLOGY_OP(LocalRankOp, local_rank)
HVD_TOPOLOGY_OP(LocalSizeOp, local_size)
#undef HVD_TOPOLOGY_OP

// ---------------------------------------------------------------------------
// Kernels of the ops _tf_ops.cc defines.
// ---------------------------------------------------------------------------
using ::tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("HvdAllreduce").Device(DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("HvdGroupedAllreduce").Device(DEVICE_CPU), GroupedAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("HvdBroadcast").Device(DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("HvdAllgather").Device(DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("HvdReducescatter").Device(DEVICE_CPU), ReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("HvdAlltoall").Device(DEVICE_CPU), AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("HvdRank").Device(DEVICE_CPU), RankOp);
REGISTER_KERNEL_BUILDER(Name("HvdSize").Device(DEVICE_CPU), SizeOp);
REGISTER_KERNEL_BUILDER(Name("HvdLocalRank").Device(DEVICE_CPU), LocalRankOp);
REGISTER_KERNEL_BUILDER(Name("HvdLocalSize").Device(DEVICE_CPU), LocalSizeOp);

}  // namespace hvd_tf

// Binds the kernels to the libhvd.so at `path` (already loaded by the Python
// package: RTLD_NOLOAD finds that very copy). Returns 0, or -1 with a
// message in err.
extern "C" __attribute__((visibility("default"))) int hvd_tf_kernels_bind(const char *path,
                                                                          char *err,
                                                                          size_t errlen) {
  using hvd_tf::g_api;
  auto fail = [&](const std::string &m) {
    if (err && errlen) {
      std::snprintf(err, errlen, "%s", m.c_str());
    }
    return -1;
  };
  void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fail(std::string("dlopen ") + path + ": " + dlerror());
  hvd_tf::Api api{};
  bool ok = true;
  std::string missing;
#define HVD_BIND(field, symbol)                                          \
  api.field = reinterpret_cast<decltype(api.field)>(dlsym(lib, symbol)); \
  if (!api.field) {                                                      \
    ok = false;                                                          \
    missing += std::string(" ") + symbol;                                \
  }
  HVD_BIND(allreduce_async, "hvd_allreduce_async")
  HVD_BIND(grouped_allreduce_async, "hvd_grouped_allreduce_async")
  HVD_BIND(allgather_async, "hvd_allgather_async")
  HVD_BIND(broadcast_async, "hvd_broadcast_async")
  HVD_BIND(alltoall_async, "hvd_alltoall_async")
  HVD_BIND(reducescatter_async, "hvd_reducescatter_async")
  HVD_BIND(handle_wait, "hvd_handle_wait")
  HVD_BIND(handle_poll, "hvd_handle_poll")
  HVD_BIND(handle_release, "hvd_handle_release")
  HVD_BIND(handle_output, "hvd_handle_output")
  HVD_BIND(handle_output_shape, "hvd_handle_output_shape")
  HVD_BIND(handle_recv_splits, "hvd_handle_recv_splits")
  HVD_BIND(rank, "hvd_rank")
  HVD_BIND(size, "hvd_size")
  HVD_BIND(local_rank, "hvd_local_rank")
  HVD_BIND(local_size, "hvd_local_size")
  HVD_BIND(context_size, "hvd_context_size")
  HVD_BIND(last_error, "hvd_last_error")
#undef HVD_BIND
  if (!ok) return fail(std::string(path) + " lacks" + missing);
  if (hvd_tf::g_bound) {
    // Rebinding to another library would strand pending handles; the same
    // functions again are fine.
    if (std::memcmp(&g_api, &api, sizeof(api)) != 0) {
      return fail("hvd's TensorFlow kernels are already bound to another libhvd.so");
    }
    return 0;
  }
  g_api = api;
  hvd_tf::g_bound = true;
  return 0;
}

// Tells the kernels process set `id`'s context (ctx NULL: forget the id).
// Called by hvd.tensorflow when an op is built for a set and before the set
// is destroyed; waits for any op submitting on the set at that moment.
extern "C" __attribute__((visibility("default"))) void hvd_tf_kernels_set_context(int64_t id,
                                                                                  void *ctx) {
  std::lock_guard<std::mutex> lk(hvd_tf::g_sets_mu);
  if (ctx == nullptr) {
    hvd_tf::g_sets.erase(id);
  } else {
    hvd_tf::g_sets[id] = static_cast<hvd_tf::hvd_context_t>(ctx);
  }
}
