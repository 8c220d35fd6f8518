// The table of settings behind ResolveConfig: one row per setting with the
// params field, the HVD_* variable, Horovod's HOROVOD_* name for it, how its
// text is parsed, its range and where it lands in Config. The sources
// (sources.cc) walk the table in precedence order: params, HVD_*, HOROVOD_*,
// the launchers' variables (launchers.cc), defaults.
//
// Defaults are Config's member initialisers (config.h), so there is one
// place for each; the defaults source only fills what needs the machine
// (the host name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "common/status.h"
#include "core/config/config.h"
#include "hvd.h"

namespace hvd::config {

// How a variable's text is read.
enum class Parse {
  kText,       // as it is
  kInt,        // a decimal integer
  kNumber,     // a finite decimal number
  kSwitch,     // 1/0, true/false, yes/no, on/off in any case: 1 or 0
  kOnOff,      // the same words, lower case only (HVD_AUTOTUNE)
  kLogLevel,   // error, warning, info, debug, trace in any case (fatal: error)
  kAlgorithm,  // an algorithm of the row's collective (algorithms/collectives.h)
};

// A params field: its mask bit, where it lies (for the struct_size check)
// and its name for messages.
struct ParamField {
  uint64_t bit = 0;  // 0: no params field
  size_t offset = 0;
  std::variant<std::monostate, const char* hvd_params_t::*, int64_t hvd_params_t::*,
               int32_t hvd_params_t::*, double hvd_params_t::*>
      member;
  const char* name = nullptr;
};
#define HVD_PARAM(bit, field) \
  ::hvd::config::ParamField { (bit), offsetof(hvd_params_t, field), &hvd_params_t::field, #field }
#define HVD_NO_PARAM ::hvd::config::ParamField{}

// Where a value lands in Config. A switch landing in a bool is on for 1.
using Target = std::variant<std::string Config::*, int64_t Config::*, int Config::*,
                            double Config::*, bool Config::*, std::string (Config::*)[6]>;

// The values a setting accepts, checked whatever the source. The error may
// name "{var}" (the variable or params field read) and "{value}".
struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false;        // lo itself is out
  const char* error = nullptr; // nullptr: any value
};

struct Setting {
  const char* name;     // Config's member
  ParamField param;     // the explicit parameter, if any
  const char* hvd;      // HVD_* variable (nullptr: params only)
  const char* horovod;  // Horovod's variable for it (nullptr: none)
  Parse parse;
  Target target;
  Range range;
  int index;            // the collective, for Parse::kAlgorithm
  const char* help;
};

// Every row; count set to their number.
const Setting* Settings(size_t* count);

// A setting's value as one source gives it.
struct Value {
  std::string text;
  int64_t i = 0;
  double d = 0;
};

// The configuration being resolved, and which source set each row (nullptr:
// none yet; else "params" or the variable's name), so a later source fills
// only what an earlier one left.
struct Resolution {
  Config config;
  const char* from[64] = {};
};

// A decimal integer, or a finite decimal number; errors name the variable.
Status ParseInteger(const char* name, const std::string& text, int64_t* out);
Status ParseNumber(const char* name, const std::string& text, double* out);

// Parses `text` from variable `var` as the row says. Errors name var.
Result<Value> ParseText(const Setting& s, const char* var, const std::string& text);

// Checks the range and stores the value; `var` is where it came from.
Status Land(const Setting& s, size_t row, const char* var, const Value& v, Resolution* r);

// The row named `name` (Config's member), or SIZE_MAX.
size_t RowOf(const char* name);

// Reads a params field only if its mask bit is set and the caller's struct
// holds it: `field` points into the caller's struct and is read only after
// the mask and struct_size checks, so an older (smaller) struct is never
// overread. Returns whether it was set.
template <typename T>
Result<bool> ReadParam(const hvd_params_t* p, uint64_t bit, size_t offset, const T* field, T* out,
                       const char* name) {
  if (p == nullptr || (p->mask & bit) == 0) return false;
  if (offset + sizeof(T) > p->struct_size) {
    return InvalidArgument(std::string("params.mask sets ") + name +
                           " but params.struct_size (" + std::to_string(p->struct_size) +
                           ") does not cover that field");
  }
  *out = *field;
  return true;
}
#define HVD_READ_PARAM(params, bit, field, out) \
  ::hvd::config::ReadParam((params), (bit), offsetof(hvd_params_t, field), &(params)->field, (out), #field)

}  // namespace hvd::config
