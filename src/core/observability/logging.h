// Per-context logging: one macro, a level from HVD_LOG_LEVEL (or params), an
// optional user sink. Default sink: stderr, one line per message.
#pragma once

#include <sstream>
#include <string>

#include "hvd.h"

namespace hvd {

class Logger {
 public:
  Logger() = default;
  Logger(int level, hvd_log_fn fn, void* user) : level_(level), fn_(fn), user_(user) {}

  bool enabled(int level) const { return level <= level_; }
  int level() const { return level_; }
  void set_rank(int rank) { rank_ = rank; }
  void Write(int level, const std::string& msg) const;

  // Adapter for the transport plugin env table (env.log). noexcept: an
  // exception never unwinds into a plugin. If writing throws (out of memory,
  // or a user sink that throws), the line goes to stderr as it is, with a
  // note saying why, and the call returns normally.
  static void PluginLog(void* logger, int level, const char* msg) noexcept;

 private:
  int level_ = HVD_LOG_WARNING;
  hvd_log_fn fn_ = nullptr;
  void* user_ = nullptr;
  int rank_ = -1;

  // One line to stderr without allocating; note (may be null): why the
  // normal path failed.
  void WriteRaw(int level, const char* msg, const char* note) const noexcept;
};

const char* LogLevelName(int level);
// Parses "error|warning|info|debug|trace" or a digit 0..4; -1 if invalid.
int ParseLogLevel(const std::string& s);

}  // namespace hvd

#define HVD_LOG(logger, lvl, expr)                     \
  do {                                                 \
    if ((logger).enabled(lvl)) {                       \
      std::ostringstream hvd_log_os_;                  \
      hvd_log_os_ << expr;                             \
      (logger).Write((lvl), hvd_log_os_.str());        \
    }                                                  \
  } while (0)
