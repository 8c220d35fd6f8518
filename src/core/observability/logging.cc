#include "core/observability/logging.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

namespace hvd {

const char* LogLevelName(int level) {
  switch (level) {
    case HVD_LOG_ERROR: return "ERROR";
    case HVD_LOG_WARNING: return "WARNING";
    case HVD_LOG_INFO: return "INFO";
    case HVD_LOG_DEBUG: return "DEBUG";
    case HVD_LOG_TRACE: return "TRACE";
    default: return "LOG";
  }
}

int ParseLogLevel(const std::string& s) {
  static const char* kNames[] = {"error", "warning", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i) {
    if (strcasecmp(s.c_str(), kNames[i]) == 0) return i;
  }
  if (strcasecmp(s.c_str(), "warn") == 0) return HVD_LOG_WARNING;
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '4') return s[0] - '0';
  return -1;
}

void Logger::Write(int level, const std::string& msg) const {
  if (fn_ != nullptr) {
    fn_(level, msg.c_str(), user_);
    return;
  }
  // One fprintf per line keeps lines from different threads whole.
  if (rank_ >= 0) {
    std::fprintf(stderr, "[hvd %d] %s: %s\n", rank_, LogLevelName(level), msg.c_str());
  } else {
    std::fprintf(stderr, "[hvd] %s: %s\n", LogLevelName(level), msg.c_str());
  }
}

void Logger::WriteRaw(int level, const char* msg, const char* note) const noexcept {
  const char* sep = note != nullptr ? " (logging failed: " : "";
  const char* end = note != nullptr ? ")" : "";
  if (note == nullptr) note = "";
  if (rank_ >= 0) {
    std::fprintf(stderr, "[hvd %d] %s: %s%s%s%s\n", rank_, LogLevelName(level), msg, sep, note, end);
  } else {
    std::fprintf(stderr, "[hvd] %s: %s%s%s%s\n", LogLevelName(level), msg, sep, note, end);
  }
}

void Logger::PluginLog(void* logger, int level, const char* msg) noexcept {
  auto* self = static_cast<Logger*>(logger);
  if (self == nullptr || msg == nullptr || !self->enabled(level)) return;
  try {
    self->Write(level, msg);
  } catch (const std::bad_alloc&) {
    self->WriteRaw(level, msg, "out of memory");
  } catch (const std::exception& e) {
    self->WriteRaw(level, msg, e.what());
  } catch (...) {
    self->WriteRaw(level, msg, "unknown exception");
  }
}

}  // namespace hvd
