// The last error (per thread) and the calls that need no context: the
// version, status text, the last error, dtype sizes.

#include "api/errors.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "api/validate.h"
#include "common/kernels.h"

namespace hvd::api {
namespace {

thread_local std::string t_last_error;

}  // namespace

const char* StatusText(hvd_status_t status) noexcept {
  switch (status) {
    case HVD_OK: return "success";
    case HVD_IN_PROGRESS: return "operation in progress";
    case HVD_ERR_INVALID_ARGUMENT: return "invalid argument";
    case HVD_ERR_NOT_INITIALIZED: return "not initialized (no default context, or context destroyed)";
    case HVD_ERR_NO_MEMORY: return "out of memory";
    case HVD_ERR_TIMEOUT: return "timed out";
    case HVD_ERR_MISMATCH: return "ranks disagree on the operation (dtype, shape, op or root)";
    case HVD_ERR_TRANSPORT: return "transport failure";
    case HVD_ERR_UNSUPPORTED: return "unsupported by this build";
    case HVD_ERR_NOT_FOUND: return "not found (transport plugin or library missing)";
    case HVD_ERR_ABORTED: return "aborted (context shut down while the operation was pending)";
    case HVD_ERR_DUPLICATE_NAME: return "a tensor of the same name is already in flight";
    case HVD_ERR_VERSION: return "incompatible versions";
    case HVD_ERR_RENDEZVOUS: return "rendezvous failed (could not form the job)";
    case HVD_ERR_INTERNAL: return "internal error in hvd (please report)";
    case HVD_ERR_MEMBERSHIP_CHANGED:
      return "the elastic job's membership changed (reset the context: hvd_context_reset)";
  }
  return "unknown status";
}

// Never throws: on allocation failure the message degrades to a constant that
// fits the string's inline buffer.
void SetLastError(const char* msg) noexcept {
  try {
    t_last_error.assign(msg);
  } catch (...) {
    t_last_error.clear();
    t_last_error.append("out of memory");  // 13 bytes: no allocation (SSO)
  }
}

hvd_status_t Fail(hvd_status_t code, const char* msg) noexcept {
  SetLastError(msg != nullptr && msg[0] != '\0' ? msg : StatusText(code));
  return code;
}

hvd_status_t Report(const hvd::Status& s) noexcept {
  const hvd_status_t code = s.code();
  if (code < 0) return Fail(code, s.message().c_str());
  return code;
}

hvd_status_t FailException(const char* fn, hvd_status_t code, const char* what) noexcept {
  try {
    std::string msg = std::string(fn) + ": " +
                      (code == HVD_ERR_NO_MEMORY ? "out of resources: " : "internal error: ") +
                      (what != nullptr ? what : "unknown exception");
    if (code == HVD_ERR_INTERNAL) msg += " (a bug in hvd: please report it)";
    return Fail(code, msg.c_str());
  } catch (...) {
    return Fail(code, StatusText(code));
  }
}

hvd_status_t FailSystemError(const char* fn, const std::system_error& e) noexcept {
  const std::error_code& ec = e.code();
  const bool resources = ec == std::errc::resource_unavailable_try_again ||
                         ec == std::errc::not_enough_memory ||
                         ec == std::errc::too_many_files_open;
  return FailException(fn, resources ? HVD_ERR_NO_MEMORY : HVD_ERR_INTERNAL, e.what());
}

}  // namespace hvd::api

using namespace hvd::api;  // NOLINT: the C calls below are this module's shims

extern "C" {

hvd_status_t hvd_version(int* major, int* minor, int* patch) {
  HVD_API_BEGIN();
  if (major != nullptr) *major = HVD_VERSION_MAJOR;
  if (minor != nullptr) *minor = HVD_VERSION_MINOR;
  if (patch != nullptr) *patch = HVD_VERSION_PATCH;
  return HVD_OK;
  HVD_API_END();
}

// The three functions below allocate nothing and cannot throw, so they need
// no exception wall.
const char* hvd_status_string(hvd_status_t status) {
  const int code = RawEnum(status);
  if (code < HVD_ERR_MEMBERSHIP_CHANGED || code > HVD_IN_PROGRESS) return "unknown status";
  return StatusText(static_cast<hvd_status_t>(code));
}

const char* hvd_last_error(void) { return t_last_error.c_str(); }

void hvd_clear_last_error(void) { t_last_error.clear(); }

hvd_status_t hvd_dtype_size(hvd_dtype_t dtype, size_t* out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  const int d = RawEnum(dtype);
  if (!hvd::IsValidDtype(d)) {
    return Report(Invalid(__func__, Cat("dtype ", d, " is not a valid hvd_dtype_t")));
  }
  *out = hvd::DtypeSize(d);
  return HVD_OK;
  HVD_API_END();
}

}  // extern "C"
