// hvdrun's flags as one table: a row per flag with its spellings, metavar,
// help and the handler that parses its value into Options (or into the
// variable it exports to every rank). ParseArgs walks the table; UsageText
// prints it.
#pragma once

#include <optional>
#include <string>

#include "launcher/options.h"

namespace hvd::launcher {

// What ParseArgs learns while walking argv, beyond Options itself: which
// flags were given, for the consistency checks after the walk.
struct ParseState {
  explicit ParseState(Options& options) : o(options) {}
  Options& o;
  std::string hosts_arg, hostfile_arg;
  bool np_given = false;
  bool min_np_given = false, max_np_given = false, slots_given = false;
  std::string elastic_only;  // an elastic-only option given, for the error without elastic
  bool master_port_given = false;
  std::string transport_from;  // the flag that chose o.transport, for conflicts
  std::optional<ParseOutcome> stop;  // --help, --version, --check-build: stop here
};

// kTwo: the next two arguments, given as "A B". kStop: no value, and the
// parse ends here (--help); "--help=x" is not this flag but an unknown one.
enum class Arity { kNone, kOne, kTwo, kStop };

struct OptionRow;
// Parses `value` into the state; returns an error text, empty on success.
using OptionApply = std::string (*)(ParseState& s, const OptionRow& row, const std::string& value);

struct OptionRow {
  const char* section;  // the --help heading it is listed under
  const char* names;    // as --help shows them: "-np, --num-proc"
  const char* aliases;  // also accepted, not shown: "-n" ("" for none)
  const char* metavar;  // "N", "A B"; "" for a switch
  Arity arity;
  const char* help;     // --help's explanation, '\n' between lines
  OptionApply apply;
  const char* env;      // the rank variable it sets (nullptr: it sets Options)
};

// Every row, in --help's order (grouped by section).
const OptionRow* OptionRows(size_t* count);

// The row one spelling (a shown name or an alias) belongs to, or nullptr.
const OptionRow* FindOption(const std::string& name);

// horovodrun flags with no hvdrun equivalent: why, or nullptr.
const char* HorovodrunOnlyFlag(const std::string& name);

// Value parsers shared by the rows and the environment defaults.
bool ParseInt(const std::string& s, long lo, long hi, int* out);
bool ParseNonNegative(const std::string& s, double* out);

}  // namespace hvd::launcher
