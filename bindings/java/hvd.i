// SWIG interface: JNI glue for include/hvd.h, used only by the org.hvd facade.
//
// Generated Java lands in package org.hvd.swig (class HvdNative, constants in
// HvdNativeConstants). Conventions of this layer:
//  - Every hvd_status_t result is checked inside the JNI call: a negative status
//    throws org.hvd.HvdException(status, function, hvd_last_error())
//    (HvdMembershipChangedException for HVD_ERR_MEMBERSHIP_CHANGED) before the
//    call returns, so the thread-local last error is read on the thread that
//    failed, in the same native frame.
//  - Opaque handles (hvd_context_t, hvd_handle_t) are Java longs; out-pointers
//    are one-element Java arrays.
//  - Tensor data comes from direct java.nio buffers (GetDirectBufferAddress: no
//    copy). The facade keeps each buffer strongly referenced until the
//    operation completes; this layer never pins a Java array across a call
//    (no Get*ArrayCritical anywhere).
//  - Functions taking hvd_tensor_t / hvd_params_t are replaced by hvdj_*
//    helpers with flat arguments (one JNI crossing per operation).
%module HvdNative

%{
#include <jni.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvd.h"

namespace {

jclass g_exception_class = nullptr;    // org.hvd.HvdException
jmethodID g_exception_ctor = nullptr;  // (int status, String function, String message)
jclass g_membership_class = nullptr;   // org.hvd.HvdMembershipChangedException (same ctor)
jmethodID g_membership_ctor = nullptr;
jclass g_iae_class = nullptr;          // java.lang.IllegalArgumentException
jmethodID g_oob_method = nullptr;      // org.hvd.OobAllgather.allgather(byte[]) -> byte[]
JavaVM* g_vm = nullptr;

// Throws org.hvd.HvdException for a failed call (its subclass
// HvdMembershipChangedException for HVD_ERR_MEMBERSHIP_CHANGED); the message is
// the calling thread's hvd_last_error().
void hvdj_throw(JNIEnv* env, int status, const char* function, const char* message) {
  if (env->ExceptionCheck()) return;  // keep the first exception
  if (message == nullptr) message = hvd_last_error();
  if (message == nullptr || *message == '\0') message = hvd_status_string((hvd_status_t)status);
  jstring fn = env->NewStringUTF(function);
  jstring msg = env->NewStringUTF(message);
  if (fn == nullptr || msg == nullptr) return;  // OutOfMemoryError pending
  const bool membership = status == HVD_ERR_MEMBERSHIP_CHANGED;
  jobject ex = env->NewObject(membership ? g_membership_class : g_exception_class,
                              membership ? g_membership_ctor : g_exception_ctor, (jint)status, fn,
                              msg);
  if (ex != nullptr) env->Throw((jthrowable)ex);
  env->DeleteLocalRef(fn);
  env->DeleteLocalRef(msg);
}

void hvdj_illegal_argument(JNIEnv* env, const char* message) {
  if (!env->ExceptionCheck()) env->ThrowNew(g_iae_class, message);
}

jclass hvdj_global_class(JNIEnv* env, const char* name) {
  jclass local = env->FindClass(name);
  if (local == nullptr) return nullptr;
  jclass global = (jclass)env->NewGlobalRef(local);
  env->DeleteLocalRef(local);
  return global;
}

}  // namespace

extern "C" JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void*) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv((void**)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
  g_vm = vm;
  g_exception_class = hvdj_global_class(env, "org/hvd/HvdException");
  if (g_exception_class == nullptr) return JNI_ERR;
  g_exception_ctor =
      env->GetMethodID(g_exception_class, "<init>", "(ILjava/lang/String;Ljava/lang/String;)V");
  g_membership_class = hvdj_global_class(env, "org/hvd/HvdMembershipChangedException");
  if (g_membership_class == nullptr) return JNI_ERR;
  g_membership_ctor =
      env->GetMethodID(g_membership_class, "<init>", "(ILjava/lang/String;Ljava/lang/String;)V");
  if (g_membership_ctor == nullptr) return JNI_ERR;
  g_iae_class = hvdj_global_class(env, "java/lang/IllegalArgumentException");
  jclass oob = env->FindClass("org/hvd/OobAllgather");
  if (g_exception_ctor == nullptr || g_iae_class == nullptr || oob == nullptr) return JNI_ERR;
  g_oob_method = env->GetMethodID(oob, "allgather", "([B)[B");
  env->DeleteLocalRef(oob);
  if (g_oob_method == nullptr) return JNI_ERR;
  return JNI_VERSION_1_8;
}
%}

%include "stdint.i"
%include "typemaps.i"
%include "enumsimple.swg"
%javaconst(1);

%pragma(java) jniclassclassmodifiers = "public final class"
%pragma(java) moduleclassmodifiers = "public final class"

// ---- status: checked in the JNI call ----------------------------------------
%typemap(out) hvd_status_t {
  $result = (jint)$1;
  if ((int)$1 < 0) {
    hvdj_throw(jenv, (int)$1, "$symname", nullptr);
    return $null;
  }
}

// ---- opaque handles as long ---------------------------------------------------
%define HVDJ_OPAQUE(TYPE)
%typemap(jni) TYPE "jlong"
%typemap(jtype) TYPE "long"
%typemap(jstype) TYPE "long"
%typemap(javain) TYPE "$javainput"
%typemap(javaout) TYPE { return $jnicall; }
%typemap(in) TYPE %{ $1 = (TYPE)(intptr_t)$input; %}
%typemap(out) TYPE %{ $result = (jlong)(intptr_t)$1; %}

%typemap(jni) TYPE *OUT "jlongArray"
%typemap(jtype) TYPE *OUT "long[]"
%typemap(jstype) TYPE *OUT "long[]"
%typemap(javain) TYPE *OUT "$javainput"
%typemap(in) TYPE *OUT (TYPE temp = nullptr) {
  if ($input == nullptr || jenv->GetArrayLength($input) < 1) {
    hvdj_illegal_argument(jenv, "$symname: the output array must have at least one element");
    return $null;
  }
  $1 = &temp;
}
%typemap(argout) TYPE *OUT {
  jlong v = (jlong)(intptr_t)temp$argnum;
  jenv->SetLongArrayRegion($input, 0, 1, &v);
}
%enddef
HVDJ_OPAQUE(hvd_context_t)
HVDJ_OPAQUE(hvd_handle_t)
%apply hvd_context_t *OUT { hvd_context_t *out, hvd_context_t *child };
%apply hvd_handle_t *OUT { hvd_handle_t *handle };

// ---- scalar out-pointers as one-element arrays -------------------------------
%apply int *OUTPUT { int *out, int *major, int *minor, int *patch };
%apply unsigned long *OUTPUT { size_t *out };

%typemap(jni) const char **out "jobjectArray"
%typemap(jtype) const char **out "String[]"
%typemap(jstype) const char **out "String[]"
%typemap(javain) const char **out "$javainput"
%typemap(in) const char **out (const char *temp = nullptr) {
  if ($input == nullptr || jenv->GetArrayLength($input) < 1) {
    hvdj_illegal_argument(jenv, "$symname: the output array must have at least one element");
    return $null;
  }
  $1 = ($1_ltype)&temp;
}
%typemap(argout) const char **out {
  if (temp$argnum != nullptr) {
    jstring s = jenv->NewStringUTF(temp$argnum);
    if (s != nullptr) jenv->SetObjectArrayElement($input, 0, s);
  }
}

// ---- alltoall receive splits: a long[] the library fills ---------------------
%typemap(jni) (int64_t *splits, int32_t n) "jlongArray"
%typemap(jtype) (int64_t *splits, int32_t n) "long[]"
%typemap(jstype) (int64_t *splits, int32_t n) "long[]"
%typemap(javain) (int64_t *splits, int32_t n) "$javainput"
%typemap(in) (int64_t *splits, int32_t n) {
  if ($input == nullptr) {
    hvdj_illegal_argument(jenv, "$symname: splits is null");
    return $null;
  }
  $2 = (int32_t)jenv->GetArrayLength($input);
  $1 = (int64_t*)std::calloc((size_t)$2 + 1, sizeof(int64_t));
  if ($1 == nullptr) {
    hvdj_illegal_argument(jenv, "$symname: out of memory");
    return $null;
  }
}
%typemap(argout) (int64_t *splits, int32_t n) {
  jenv->SetLongArrayRegion($input, 0, $2, (const jlong*)$1);
}
%typemap(freearg) (int64_t *splits, int32_t n) { std::free($1); }

// ---- process sets: rank lists as int[] ------------------------------------------
// hvd_process_set_create's list: copied in (null: an empty list, which the
// library refuses on every rank together, as any bad list). The copy lives in
// a typemap local, freed however the call returns (the status typemap returns
// early on failure).
%typemap(jni) (int32_t n, const int32_t *ranks) "jintArray"
%typemap(jtype) (int32_t n, const int32_t *ranks) "int[]"
%typemap(jstype) (int32_t n, const int32_t *ranks) "int[]"
%typemap(javain) (int32_t n, const int32_t *ranks) "$javainput"
%typemap(in) (int32_t n, const int32_t *ranks) (std::vector<int32_t> temp) {
  $1 = 0;
  $2 = nullptr;
  if ($input != nullptr) {
    jsize len = jenv->GetArrayLength($input);
    temp.resize((size_t)len + 1);
    if (len > 0) jenv->GetIntArrayRegion($input, 0, len, (jint*)temp.data());
    $1 = (int32_t)len;
    $2 = temp.data();
  }
}
// hvd_context_parent_ranks: fills an int[] (its length is n).
%typemap(jni) (int32_t *ranks, int32_t n) "jintArray"
%typemap(jtype) (int32_t *ranks, int32_t n) "int[]"
%typemap(jstype) (int32_t *ranks, int32_t n) "int[]"
%typemap(javain) (int32_t *ranks, int32_t n) "$javainput"
%typemap(in) (int32_t *ranks, int32_t n) (std::vector<int32_t> temp) {
  if ($input == nullptr) {
    hvdj_illegal_argument(jenv, "$symname: ranks is null");
    return $null;
  }
  $2 = (int32_t)jenv->GetArrayLength($input);
  temp.assign((size_t)$2 + 1, -1);
  $1 = temp.data();
}
%typemap(argout) (int32_t *ranks, int32_t n) {
  if ($2 > 0) jenv->SetIntArrayRegion($input, 0, $2, (const jint*)$1);
}

// ---- tensor data: direct java.nio buffers -------------------------------------
%typemap(jni) void *BUFFER "jobject"
%typemap(jtype) void *BUFFER "java.nio.Buffer"
%typemap(jstype) void *BUFFER "java.nio.Buffer"
%typemap(javain) void *BUFFER "$javainput"
%typemap(in) void *BUFFER {
  $1 = nullptr;
  if ($input != nullptr) {
    $1 = jenv->GetDirectBufferAddress($input);
    if ($1 == nullptr && jenv->GetDirectBufferCapacity($input) != 0) {
      hvdj_illegal_argument(jenv, "$symname: $1_name is not a direct buffer");
      return $null;
    }
  }
}

// Tensor shape: a Java long[] (at most HVD_MAX_NDIM entries), copied in.
%typemap(jni) (const int64_t *shape, int32_t ndim) "jlongArray"
%typemap(jtype) (const int64_t *shape, int32_t ndim) "long[]"
%typemap(jstype) (const int64_t *shape, int32_t ndim) "long[]"
%typemap(javain) (const int64_t *shape, int32_t ndim) "$javainput"
%typemap(in) (const int64_t *shape, int32_t ndim) (int64_t temp[HVD_MAX_NDIM]) {
  $1 = temp;
  $2 = 0;
  if ($input != nullptr) {
    jsize n = jenv->GetArrayLength($input);
    if (n > HVD_MAX_NDIM) {
      hvdj_illegal_argument(jenv, "$symname: a shape has at most HVD_MAX_NDIM (32) dimensions");
      return $null;
    }
    jenv->GetLongArrayRegion($input, 0, n, (jlong*)temp);
    $2 = (int32_t)n;
  }
}
// Alltoall splits: null (even split) or one entry per rank, copied in.
%typemap(jni) (const int64_t *splits, int32_t nsplits) "jlongArray"
%typemap(jtype) (const int64_t *splits, int32_t nsplits) "long[]"
%typemap(jstype) (const int64_t *splits, int32_t nsplits) "long[]"
%typemap(javain) (const int64_t *splits, int32_t nsplits) "$javainput"
%typemap(in) (const int64_t *splits, int32_t nsplits) {
  $1 = nullptr;
  $2 = 0;
  if ($input != nullptr) {
    $2 = (int32_t)jenv->GetArrayLength($input);
    $1 = (int64_t*)std::calloc((size_t)$2 + 1, sizeof(int64_t));
    if ($1 == nullptr) {
      hvdj_illegal_argument(jenv, "$symname: out of memory");
      return $null;
    }
    jenv->GetLongArrayRegion($input, 0, $2, (jlong*)$1);
  }
}
%typemap(freearg) (const int64_t *splits, int32_t nsplits) { std::free($1); }

// ---- what the facade does not use raw -------------------------------------------
%ignore hvd_metrics;  // hvdj_metrics below: a String
%ignore hvd_tensor;
%ignore hvd_tensor_t;
%ignore hvd_params;
%ignore hvd_params_t;
%ignore hvd_context_create;
%ignore hvd_init;
%ignore hvd_allreduce_async;
%ignore hvd_grouped_allreduce_async;
%ignore hvd_allgather_async;
%ignore hvd_broadcast_async;
%ignore hvd_alltoall_async;
%ignore hvd_reducescatter_async;
%ignore hvd_allreduce;
%ignore hvd_broadcast;
%ignore hvd_handle_output;
%ignore hvd_handle_output_shape;
%ignore hvd_handle_wait;      // hvdj_handle_wait tells a time slice from a failure
%ignore hvd_handle_cuda_event;   // stream-ordered completion: CUDA tensors, which Java has none of
%ignore hvd_handle_stream_wait;
%ignore HVD_TENSOR_INIT;
%ignore HVD_PARAMS_INIT;
%ignore HVD_API;
%ignore HVD_VERSION_CODE;
%ignore HVD_PARAM_RANK;
%ignore HVD_PARAM_SIZE;
%ignore HVD_PARAM_LOCAL_RANK;
%ignore HVD_PARAM_LOCAL_SIZE;
%ignore HVD_PARAM_CROSS_RANK;
%ignore HVD_PARAM_CROSS_SIZE;
%ignore HVD_PARAM_TRANSPORT;
%ignore HVD_PARAM_RENDEZVOUS_ADDR;
%ignore HVD_PARAM_SECRET;
%ignore HVD_PARAM_OOB;
%ignore HVD_PARAM_FUSION_THRESHOLD;
%ignore HVD_PARAM_CYCLE_TIME;
%ignore HVD_PARAM_CACHE_CAPACITY;
%ignore HVD_PARAM_STALL_WARNING;
%ignore HVD_PARAM_STALL_SHUTDOWN;
%ignore HVD_PARAM_START_TIMEOUT;
%ignore HVD_PARAM_TIMELINE;
%ignore HVD_PARAM_LOG_FN;
%ignore HVD_PARAM_LOG_LEVEL;
%ignore HVD_PARAM_NETWORK_INTERFACE;
%ignore HVD_PARAM_MPI_COMM;
%ignore HVD_PARAM_TRANSPORT_TIMEOUT;
%ignore HVD_PARAM_AUTOTUNE;
%ignore HVD_PARAM_TRANSPORT_PATH;
%ignore HVD_PARAM_PEER_TIMEOUT;
%ignore HVD_PARAM_ALL_;
%ignore hvd_oob_allgather_fn;
%ignore hvd_log_fn;
// hvd_membership_t and hvd_context_membership stay wrapped (a build folder that
// generated them once keeps the class file); the facade calls
// hvdj_context_membership, which answers a long[].

%include "hvd.h"

// ---- helpers: context creation with params ----------------------------------------
%typemap(in, numinputs=0) JNIEnv *jenv "$1 = jenv;"

%inline %{
// hvd_params_t plus the storage its strings and the OOB callback need. Setters
// set the field's mask bit. The object must outlive hvdj_context_create /
// hvdj_init only (the OOB callback runs during creation).
class HvdjParams {
 public:
  HvdjParams() {
    hvd_params_t init = HVD_PARAMS_INIT;
    p_ = init;
  }
  ~HvdjParams() {
    if (oob_ != nullptr && g_vm != nullptr) {
      JNIEnv* env = nullptr;
      if (g_vm->GetEnv((void**)&env, JNI_VERSION_1_8) == JNI_OK) env->DeleteGlobalRef(oob_);
    }
  }
  void setRank(int32_t v) { p_.rank = v; p_.mask |= HVD_PARAM_RANK; }
  void setSize(int32_t v) { p_.size = v; p_.mask |= HVD_PARAM_SIZE; }
  void setLocalRank(int32_t v) { p_.local_rank = v; p_.mask |= HVD_PARAM_LOCAL_RANK; }
  void setLocalSize(int32_t v) { p_.local_size = v; p_.mask |= HVD_PARAM_LOCAL_SIZE; }
  void setCrossRank(int32_t v) { p_.cross_rank = v; p_.mask |= HVD_PARAM_CROSS_RANK; }
  void setCrossSize(int32_t v) { p_.cross_size = v; p_.mask |= HVD_PARAM_CROSS_SIZE; }
  void setTransport(const char* v) { transport_ = v ? v : ""; p_.mask |= HVD_PARAM_TRANSPORT; }
  void setRendezvousAddr(const char* v) {
    rendezvous_addr_ = v ? v : "";
    p_.mask |= HVD_PARAM_RENDEZVOUS_ADDR;
  }
  void setSecret(const char* v) { secret_ = v ? v : ""; p_.mask |= HVD_PARAM_SECRET; }
  void setFusionThresholdBytes(long long v) {
    p_.fusion_threshold_bytes = (int64_t)v;
    p_.mask |= HVD_PARAM_FUSION_THRESHOLD;
  }
  void setCycleTimeMs(double v) { p_.cycle_time_ms = v; p_.mask |= HVD_PARAM_CYCLE_TIME; }
  void setCacheCapacity(int32_t v) { p_.cache_capacity = v; p_.mask |= HVD_PARAM_CACHE_CAPACITY; }
  void setStallWarningS(double v) { p_.stall_warning_s = v; p_.mask |= HVD_PARAM_STALL_WARNING; }
  void setStallShutdownS(double v) {
    p_.stall_shutdown_s = v;
    p_.mask |= HVD_PARAM_STALL_SHUTDOWN;
  }
  void setStartTimeoutS(double v) { p_.start_timeout_s = v; p_.mask |= HVD_PARAM_START_TIMEOUT; }
  void setTimelinePath(const char* v) { timeline_ = v ? v : ""; p_.mask |= HVD_PARAM_TIMELINE; }
  void setLogLevel(int32_t v) { p_.log_level = v; p_.mask |= HVD_PARAM_LOG_LEVEL; }
  void setNetworkInterface(const char* v) {
    network_interface_ = v ? v : "";
    p_.mask |= HVD_PARAM_NETWORK_INTERFACE;
  }
  void setTransportTimeoutS(double v) {
    p_.transport_timeout_s = v;
    p_.mask |= HVD_PARAM_TRANSPORT_TIMEOUT;
  }
  void setAutotune(int32_t v) { p_.autotune = v; p_.mask |= HVD_PARAM_AUTOTUNE; }
  void setTransportPath(const char* v) {
    transport_path_ = v ? v : "";
    p_.mask |= HVD_PARAM_TRANSPORT_PATH;
  }
  // callback: an org.hvd.OobAllgather; requires rank and size to be set (the
  // trampoline checks the result length against size * bytes).
  void setOob(JNIEnv* jenv, jobject callback) {
    if (oob_ != nullptr) jenv->DeleteGlobalRef(oob_);
    oob_ = callback != nullptr ? jenv->NewGlobalRef(callback) : nullptr;
    p_.oob_allgather = oob_ != nullptr ? &HvdjParams::Trampoline : nullptr;
    p_.oob_user = this;
    p_.mask |= HVD_PARAM_OOB;
  }
  // Mask of the fields set so far (tests).
  long long mask() const { return (long long)p_.mask; }

#ifndef SWIG
  const hvd_params_t* get() {
    p_.transport = transport_.c_str();
    p_.rendezvous_addr = rendezvous_addr_.c_str();
    p_.secret = secret_.c_str();
    p_.timeline_path = timeline_.c_str();
    p_.network_interface = network_interface_.c_str();
    p_.transport_path = transport_path_.c_str();
    return &p_;
  }

 private:
  // Runs on the thread that called hvd_context_create / hvd_init: a Java
  // thread, already attached.
  static int Trampoline(const void* send, void* recv, size_t bytes, void* user) {
    auto* self = static_cast<HvdjParams*>(user);
    if ((self->p_.mask & HVD_PARAM_SIZE) == 0 || self->p_.size < 1) return 3;
    JNIEnv* env = nullptr;
    bool attached = false;
    if (g_vm->GetEnv((void**)&env, JNI_VERSION_1_8) == JNI_EDETACHED) {
      if (g_vm->AttachCurrentThread((void**)&env, nullptr) != JNI_OK) return 4;
      attached = true;
    }
    int rc = 1;
    jbyteArray in = env->NewByteArray((jsize)bytes);
    if (in != nullptr) {
      env->SetByteArrayRegion(in, 0, (jsize)bytes, (const jbyte*)send);
      auto out = (jbyteArray)env->CallObjectMethod(self->oob_, g_oob_method, in);
      if (!env->ExceptionCheck() && out != nullptr) {
        jsize want = (jsize)(bytes * (size_t)self->p_.size);
        if (env->GetArrayLength(out) == want) {
          env->GetByteArrayRegion(out, 0, want, (jbyte*)recv);
          rc = 0;
        } else {
          rc = 2;
        }
      }
      if (out != nullptr) env->DeleteLocalRef(out);
      env->DeleteLocalRef(in);
    }
    // The facade's adapter catches everything; this only guards against an
    // Error thrown past it, which must not stay pending in native code.
    if (env->ExceptionCheck()) env->ExceptionClear();
    if (attached) g_vm->DetachCurrentThread();
    return rc;
  }

  hvd_params_t p_;
  std::string transport_, rendezvous_addr_, secret_, timeline_, network_interface_,
      transport_path_;
  jobject oob_ = nullptr;
#endif
};

hvd_status_t hvdj_context_create(HvdjParams* params, hvd_context_t* out) {
  return hvd_context_create(params != nullptr ? params->get() : nullptr, out);
}

hvd_status_t hvdj_init(HvdjParams* params) {
  return hvd_init(params != nullptr ? params->get() : nullptr);
}
%}

// ---- metrics: the report as a String (the text lives until the thread's next call) --
%inline %{
hvd_status_t hvdj_metrics(hvd_context_t ctx, int32_t format, const char** out) {
  static thread_local std::string text;
  size_t needed = 0;
  for (int tries = 0; tries < 8; ++tries) {
    hvd_status_t s = hvd_metrics(ctx, (hvd_metrics_format_t)format, nullptr, 0, &needed);
    if (s != HVD_OK) return s;
    text.assign(needed + 4096, '\0');  // room for counters that grow meanwhile
    s = hvd_metrics(ctx, (hvd_metrics_format_t)format, &text[0], text.size(), &needed);
    if (s == HVD_OK) {
      text.resize(needed - 1);
      *out = text.c_str();
      return HVD_OK;
    }
    if (s != HVD_ERR_INVALID_ARGUMENT || needed <= text.size()) return s;
  }
  return HVD_ERR_INTERNAL;
}
%}

// ---- helpers: operations on direct buffers ----------------------------------------
%apply void *BUFFER { void *input, void *output };

%inline %{
hvd_status_t hvdj_allreduce_async(hvd_context_t ctx, const char* name, void* input, void* output,
                                  int32_t dtype, const int64_t* shape, int32_t ndim, int32_t op,
                                  double prescale, double postscale, hvd_handle_t* handle) {
  hvd_tensor_t t = HVD_TENSOR_INIT;
  t.data = input;
  t.dtype = (hvd_dtype_t)dtype;
  t.ndim = ndim;
  t.shape = shape;
  return hvd_allreduce_async(ctx, name, &t, output, (hvd_reduce_op_t)op, prescale, postscale,
                             handle);
}

hvd_status_t hvdj_broadcast_async(hvd_context_t ctx, const char* name, void* input, void* output,
                                  int32_t dtype, const int64_t* shape, int32_t ndim, int32_t root,
                                  hvd_handle_t* handle) {
  hvd_tensor_t t = HVD_TENSOR_INIT;
  t.data = input;
  t.dtype = (hvd_dtype_t)dtype;
  t.ndim = ndim;
  t.shape = shape;
  return hvd_broadcast_async(ctx, name, &t, output, root, handle);
}

hvd_status_t hvdj_allgather_async(hvd_context_t ctx, const char* name, void* input, int32_t dtype,
                                  const int64_t* shape, int32_t ndim, hvd_handle_t* handle) {
  hvd_tensor_t t = HVD_TENSOR_INIT;
  t.data = input;
  t.dtype = (hvd_dtype_t)dtype;
  t.ndim = ndim;
  t.shape = shape;
  return hvd_allgather_async(ctx, name, &t, handle);
}

hvd_status_t hvdj_alltoall_async(JNIEnv* jenv, hvd_context_t ctx, const char* name, void* input,
                                 int32_t dtype, const int64_t* shape, int32_t ndim,
                                 const int64_t* splits, int32_t nsplits, hvd_handle_t* handle) {
  hvd_tensor_t t = HVD_TENSOR_INIT;
  t.data = input;
  t.dtype = (hvd_dtype_t)dtype;
  t.ndim = ndim;
  t.shape = shape;
  if (splits != nullptr) {
    // The library reads one entry per rank: a shorter Java array must not be
    // read past its end (the typemap's copy holds nsplits + 1 entries).
    int size = 0;
    hvd_status_t st = hvd_context_size(ctx, &size);
    if (st < 0) return st;
    if (nsplits != size) {
      std::string msg = "splits has " + std::to_string(nsplits) +
                        " entries, must have one per rank (the context size " +
                        std::to_string(size) + ")";
      hvdj_throw(jenv, HVD_ERR_INVALID_ARGUMENT, "hvdj_alltoall_async", msg.c_str());
      return HVD_ERR_INVALID_ARGUMENT;
    }
  }
  return hvd_alltoall_async(ctx, name, &t, splits, handle);
}

hvd_status_t hvdj_reducescatter_async(hvd_context_t ctx, const char* name, void* input,
                                      int32_t dtype, const int64_t* shape, int32_t ndim,
                                      int32_t op, double prescale, double postscale,
                                      hvd_handle_t* handle) {
  hvd_tensor_t t = HVD_TENSOR_INIT;
  t.data = input;
  t.dtype = (hvd_dtype_t)dtype;
  t.ndim = ndim;
  t.shape = shape;
  return hvd_reducescatter_async(ctx, name, &t, (hvd_reduce_op_t)op, prescale, postscale, handle);
}

// Grouped allreduce of 1-D tensors: tensors = {String[] names, Buffer[] inputs,
// Buffer[] outputs, long[] counts}, all of the same length.
hvd_status_t hvdj_grouped_allreduce_async(JNIEnv* jenv, hvd_context_t ctx, jobjectArray tensors,
                                          int32_t dtype, int32_t op, double prescale,
                                          double postscale, hvd_handle_t* handle) {
  if (tensors == nullptr || jenv->GetArrayLength(tensors) != 4) {
    hvdj_illegal_argument(jenv, "hvdj_grouped_allreduce_async: expected {names, inputs, outputs, counts}");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  auto names = (jobjectArray)jenv->GetObjectArrayElement(tensors, 0);
  auto ins = (jobjectArray)jenv->GetObjectArrayElement(tensors, 1);
  auto outs = (jobjectArray)jenv->GetObjectArrayElement(tensors, 2);
  auto counts = (jlongArray)jenv->GetObjectArrayElement(tensors, 3);
  jsize n = names != nullptr ? jenv->GetArrayLength(names) : -1;
  if (n < 1 || ins == nullptr || outs == nullptr || counts == nullptr ||
      jenv->GetArrayLength(ins) != n || jenv->GetArrayLength(outs) != n ||
      jenv->GetArrayLength(counts) != n) {
    hvdj_illegal_argument(jenv, "hvdj_grouped_allreduce_async: names, inputs, outputs and counts "
                                "must be non-empty and of one length");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  std::string* name_storage = new std::string[n];
  const char** name_ptrs = new const char*[n];
  hvd_tensor_t* ts = new hvd_tensor_t[n];
  void** out_ptrs = new void*[n];
  int64_t* shapes = new int64_t[n];
  jenv->GetLongArrayRegion(counts, 0, n, (jlong*)shapes);
  hvd_status_t st = HVD_OK;
  for (jsize i = 0; i < n && st == HVD_OK; ++i) {
    auto s = (jstring)jenv->GetObjectArrayElement(names, i);
    if (s != nullptr) {
      const char* c = jenv->GetStringUTFChars(s, nullptr);
      if (c != nullptr) {
        name_storage[i] = c;
        jenv->ReleaseStringUTFChars(s, c);
      }
      jenv->DeleteLocalRef(s);
    }
    name_ptrs[i] = s != nullptr ? name_storage[i].c_str() : nullptr;
    jobject in = jenv->GetObjectArrayElement(ins, i);
    jobject out = jenv->GetObjectArrayElement(outs, i);
    hvd_tensor_t t = HVD_TENSOR_INIT;
    t.data = in != nullptr ? jenv->GetDirectBufferAddress(in) : nullptr;
    t.dtype = (hvd_dtype_t)dtype;
    t.ndim = 1;
    t.shape = &shapes[i];
    ts[i] = t;
    out_ptrs[i] = out != nullptr ? jenv->GetDirectBufferAddress(out) : nullptr;
    if ((in != nullptr && t.data == nullptr) || (out != nullptr && out_ptrs[i] == nullptr)) {
      hvdj_illegal_argument(jenv, "hvdj_grouped_allreduce_async: buffers must be direct");
      st = HVD_ERR_INVALID_ARGUMENT;
    }
    if (in != nullptr) jenv->DeleteLocalRef(in);
    if (out != nullptr) jenv->DeleteLocalRef(out);
  }
  if (st == HVD_OK) {
    st = hvd_grouped_allreduce_async(ctx, (int32_t)n, name_ptrs, ts, out_ptrs,
                                     (hvd_reduce_op_t)op, prescale, postscale, handle);
  }
  delete[] shapes;
  delete[] out_ptrs;
  delete[] ts;
  delete[] name_ptrs;
  delete[] name_storage;
  return st;
}

// Waits up to timeout_s. Returns HVD_OK, or HVD_IN_PROGRESS when the time ran
// out with the operation still pending; an operation that failed throws.
hvd_status_t hvdj_handle_wait(hvd_handle_t handle, double timeout_s) {
  hvd_status_t st = hvd_handle_wait(handle, timeout_s);
  if (st == HVD_ERR_TIMEOUT && hvd_handle_poll(handle) == HVD_IN_PROGRESS) return HVD_IN_PROGRESS;
  return st;
}

// The result an operation's handle owns (allgather, alltoall, reducescatter),
// as a read-only view valid until the handle is released; null when empty.
jobject hvdj_handle_output_view(JNIEnv* jenv, hvd_handle_t handle) {
  const void* data = nullptr;
  size_t bytes = 0;
  hvd_status_t st = hvd_handle_output(handle, &data, &bytes);
  if (st < 0) {
    hvdj_throw(jenv, st, "hvd_handle_output", nullptr);
    return nullptr;
  }
  if (bytes == 0 || data == nullptr) return nullptr;
  return jenv->NewDirectByteBuffer(const_cast<void*>(data), (jlong)bytes);
}

jlongArray hvdj_handle_output_shape(JNIEnv* jenv, hvd_handle_t handle) {
  int64_t shape[HVD_MAX_NDIM];
  int32_t ndim = 0;
  hvd_status_t st = hvd_handle_output_shape(handle, shape, HVD_MAX_NDIM, &ndim);
  if (st < 0) {
    hvdj_throw(jenv, st, "hvd_handle_output_shape", nullptr);
    return nullptr;
  }
  if (ndim > HVD_MAX_NDIM) ndim = HVD_MAX_NDIM;
  jlongArray out = jenv->NewLongArray(ndim);
  if (out != nullptr) jenv->SetLongArrayRegion(out, 0, ndim, (const jlong*)shape);
  return out;
}

// Native scratch memory for the array overloads: freed explicitly, never by
// the garbage collector, and not zeroed (the caller fills it).
jobject hvdj_alloc(JNIEnv* jenv, long long bytes) {
  if (bytes < 0) {
    hvdj_illegal_argument(jenv, "hvdj_alloc: negative size");
    return nullptr;
  }
  void* p = std::malloc(bytes > 0 ? (size_t)bytes : 1);
  if (p == nullptr) {
    hvdj_throw(jenv, HVD_ERR_NO_MEMORY, "hvdj_alloc", "out of native memory");
    return nullptr;
  }
  jobject b = jenv->NewDirectByteBuffer(p, (jlong)bytes);
  if (b == nullptr) std::free(p);
  return b;
}

void hvdj_free(void* input) { std::free(input); }

// hvd_context_membership as {elastic, hosts_updated, epoch}.
jlongArray hvdj_context_membership(JNIEnv* jenv, hvd_context_t ctx) {
  hvd_membership_t m;
  std::memset(&m, 0, sizeof(m));
  m.struct_size = sizeof(m);
  hvd_status_t st = hvd_context_membership(ctx, &m);
  if (st < 0) {
    hvdj_throw(jenv, st, "hvd_context_membership", nullptr);
    return nullptr;
  }
  const jlong v[3] = {(jlong)m.elastic, (jlong)m.hosts_updated, (jlong)m.epoch};
  jlongArray out = jenv->NewLongArray(3);
  if (out != nullptr) jenv->SetLongArrayRegion(out, 0, 3, v);
  return out;
}
%}
