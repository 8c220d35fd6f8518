// The exception wall and the last error.
//
// Each status-returning extern "C" body runs between HVD_API_BEGIN() and
// HVD_API_END(), which turn any exception into a status code plus the
// thread's last-error text, so no exception ever crosses the ABI. Internals
// return hvd::Status / hvd::Result; Report maps a Status to hvd_status_t.
//
// Last error (libgit2 style): a failing call stores its message in the calling
// thread's buffer; a successful call does NOT clear it. Read hvd_last_error()
// right after a call returned a negative status, or call
// hvd_clear_last_error() first. Positive statuses (HVD_IN_PROGRESS) are not
// errors and leave the buffer alone too.
#pragma once

#include <exception>
#include <new>
#include <system_error>

#include "common/status.h"
#include "hvd.h"

namespace hvd::api {

const char* StatusText(hvd_status_t status) noexcept;
// Stores msg (or the code's text when msg is empty) as the thread's last
// error and returns code.
hvd_status_t Fail(hvd_status_t code, const char* msg) noexcept;
// Maps an internal Status to the return code; errors set the last error.
hvd_status_t Report(const hvd::Status& s) noexcept;
hvd_status_t FailException(const char* fn, hvd_status_t code, const char* what) noexcept;
// std::system_error from thread or mutex creation means the process ran out
// of a resource; anything else escaping the internals is a bug.
hvd_status_t FailSystemError(const char* fn, const std::system_error& e) noexcept;

}  // namespace hvd::api

// The exception wall. The body between the two macros must return an
// hvd_status_t on every path.
#define HVD_API_BEGIN() try {
#define HVD_API_END()                                                         \
  }                                                                           \
  catch (const std::bad_alloc&) {                                             \
    return ::hvd::api::Fail(HVD_ERR_NO_MEMORY, "out of memory");              \
  }                                                                           \
  catch (const std::system_error& e) {                                        \
    return ::hvd::api::FailSystemError(__func__, e);                          \
  }                                                                           \
  catch (const std::exception& e) {                                           \
    return ::hvd::api::FailException(__func__, HVD_ERR_INTERNAL, e.what());   \
  }                                                                           \
  catch (...) {                                                               \
    return ::hvd::api::FailException(__func__, HVD_ERR_INTERNAL, nullptr);    \
  }
