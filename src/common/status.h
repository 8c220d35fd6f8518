// Internal status and result types: errors travel as values, never as
// exceptions, up to the C boundary, where they become an hvd_status_t plus the
// thread's last-error text.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "hvd.h"

namespace hvd {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(hvd_status_t code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status Ok() { return Status(); }
  // Copies of a status without a message (every success) copy no string:
  // std::string's copy is out of line even when empty, and each completed
  // operation's status is copied three times on its way to the caller.
  Status(const Status& o) : code_(o.code_) {
    if (!o.msg_.empty()) msg_ = o.msg_;
  }
  Status& operator=(const Status& o) {
    code_ = o.code_;
    if (o.msg_.empty()) {
      msg_.clear();
    } else {
      msg_ = o.msg_;
    }
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return code_ == HVD_OK; }
  hvd_status_t code() const { return code_; }
  const std::string& message() const { return msg_; }

  // Adds context in front of the message: "while X: <message>".
  Status Wrap(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + msg_);
  }
  // The same for a literal: no string is made where the status is OK (a
  // cycle wraps a few).
  Status Wrap(const char* context) const {
    if (ok()) return *this;
    return Status(code_, std::string(context) + ": " + msg_);
  }

 private:
  hvd_status_t code_ = HVD_OK;
  std::string msg_;
};

inline Status Error(hvd_status_t code, std::string msg) { return Status(code, std::move(msg)); }
inline Status InvalidArgument(std::string msg) { return Status(HVD_ERR_INVALID_ARGUMENT, std::move(msg)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}   // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must be an error

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  T& operator*() { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hvd

// Early return on error: the caller gets the Status unchanged. It does not
// log: loggers belong to a context (level and callback per context), and
// this header serves code with none (the store, hvdrun, plugins); a
// process-wide hook would be global state, and a file:line in the message
// would change the texts users and tests read. Where the failing step is not
// clear from the message, add it with Status::Wrap.
#define HVD_CHECK(expr)                                \
  do {                                                 \
    ::hvd::Status hvd_check_s_ = (expr);               \
    if (!hvd_check_s_.ok()) return hvd_check_s_;       \
  } while (0)

#define HVD_CONCAT_INNER_(a, b) a##b
#define HVD_CONCAT_(a, b) HVD_CONCAT_INNER_(a, b)
// HVD_ASSIGN_OR_RETURN(auto x, Foo()): unwraps a Result or returns its Status.
#define HVD_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto HVD_CONCAT_(hvd_res_, __LINE__) = (expr);                          \
  if (!HVD_CONCAT_(hvd_res_, __LINE__).ok())                              \
    return HVD_CONCAT_(hvd_res_, __LINE__).status();                      \
  lhs = std::move(HVD_CONCAT_(hvd_res_, __LINE__)).value()
