// Argument validation for the C calls. Every message names the function,
// the argument and, when known, the tensor.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>

#include "api/objects.h"
#include "common/status.h"
#include "core/loop/request.h"
#include "hvd.h"

namespace hvd::api {

// The integer a C caller put in an enum-typed argument or field. C allows
// any int there (dtype 99); in C++ loading an out-of-range value as the enum
// type is undefined, so the bits are copied out instead.
template <typename E>
int RawEnum(const E& e) {
  static_assert(std::is_enum<E>::value, "enum types only");
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof(v));
  return static_cast<int>(v);
}

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// HVD_ERR_INVALID_ARGUMENT with "fn: msg".
hvd::Status Invalid(const char* fn, const std::string& msg);

// " (tensor 'name')" in messages; nothing when the name itself is unusable.
// Holds only the pointer: the text is formatted on the error path alone
// (this runs on every submit).
struct TensorTag {
  explicit TensorTag(const char* n) : name(n) {}
  const char* name;
};

std::ostream& operator<<(std::ostream& os, const TensorTag& t);

hvd::Status CheckHandle(const char* fn, hvd_handle_t h);
hvd::Status CheckOutPointer(const char* fn, const char* arg, const void* p);
hvd::Status ValidateName(const char* fn, const char* arg, const char* name);
hvd::Status ValidateReduceOp(const char* fn, const TensorTag& tag, int op, int dtype,
                             double prescale, double postscale, bool allreduce = true);
// A device ordinal >= 0 is a CUDA tensor: the context's CUDA runtime must
// load, the ordinal must name one of its devices, and data (unless NULL)
// must be that device's memory (or managed memory).
hvd::Status CheckDeviceSupported(const char* fn, const char* arg, const TensorTag& tag,
                                 int32_t device, hvd_context_s* ctx = nullptr,
                                 const void* data = nullptr);
// Checks one tensor descriptor and fills spec (without the name). The device
// is range-checked here; whether it is supported is checked by the caller
// (CheckDeviceSupported) so that groups can first report inconsistent
// devices.
hvd::Status ValidateTensor(const char* fn, const char* arg, const TensorTag& tag,
                           const hvd_tensor_t* t, hvd::TensorSpec* spec);
// output for ops that write into the caller's buffer: non-NULL unless empty,
// and either the input itself (in place) or not overlapping it.
hvd::Status ValidateOutput(const char* fn, const char* arg, const TensorTag& tag,
                           void* output, hvd::TensorSpec* spec);
hvd::Status RequireRows(const char* fn, const TensorTag& tag, const hvd::TensorSpec& spec);

}  // namespace hvd::api
