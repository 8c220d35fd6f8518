#include "core/config/settings.h"

#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "algorithms/collectives.h"
#include "core/observability/logging.h"

namespace hvd::config {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxBytes = static_cast<double>(int64_t{1} << 50);

constexpr Range kAny{};
constexpr Range kPositiveSeconds(const char* error) { return Range{0, kInf, true, error}; }

// Shorthands for the table.
constexpr Parse kText = Parse::kText, kInt = Parse::kInt, kNumber = Parse::kNumber,
                kSwitch = Parse::kSwitch;

const Setting kSettings[] = {
    // Bootstrap.
    {"transport", HVD_PARAM(HVD_PARAM_TRANSPORT, transport), "HVD_TRANSPORT", nullptr, kText,
     &Config::transport, kAny, 0,
     "the transport plugin (\"\" = choose); HOROVOD_CPU_OPERATIONS or HOROVOD_CONTROLLER "
     "where none is given (sources.cc)"},
    {"cpu_transport", HVD_NO_PARAM, "HVD_CPU_TRANSPORT", nullptr, kText, &Config::cpu_transport,
     kAny, 0,
     "the host transport beside a device-only one; else HOROVOD_CPU_OPERATIONS or "
     "HOROVOD_CONTROLLER where a transport is given"},
    {"rendezvous_addr", HVD_PARAM(HVD_PARAM_RENDEZVOUS_ADDR, rendezvous_addr),
     "HVD_RENDEZVOUS_ADDR", nullptr, kText, &Config::rendezvous_addr, kAny, 0,
     "host:port of the store to join; else MASTER_ADDR:MASTER_PORT (torchrun style)"},
    {"secret", HVD_PARAM(HVD_PARAM_SECRET, secret), "HVD_SECRET", nullptr, kText,
     &Config::secret, kAny, 0, "the job's secret (hex) for the store's messages"},
    {"timeline_path", HVD_PARAM(HVD_PARAM_TIMELINE, timeline_path), "HVD_TIMELINE",
     "HOROVOD_TIMELINE", kText, &Config::timeline_path, kAny, 0,
     "Chrome trace written from init (HOROVOD_TIMELINE=DYNAMIC: none at init)"},
    {"network_interface", HVD_PARAM(HVD_PARAM_NETWORK_INTERFACE, network_interface),
     "HVD_NETWORK_INTERFACE", nullptr, kText, &Config::network_interface, kAny, 0,
     "a name or an IPv4 CIDR"},
    {"transport_path", HVD_PARAM(HVD_PARAM_TRANSPORT_PATH, transport_path),
     "HVD_TRANSPORT_PATH", nullptr, kText, &Config::transport_path, kAny, 0,
     "extra plugin folders, ':'-separated"},
    {"hostname", HVD_NO_PARAM, "HVD_HOSTNAME", nullptr, kText, &Config::hostname, kAny, 0,
     "this rank's host name; default: the machine's"},

    // Engine.
    {"fusion_threshold", HVD_PARAM(HVD_PARAM_FUSION_THRESHOLD, fusion_threshold_bytes),
     "HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", kInt, &Config::fusion_threshold,
     Range{0, kInf, false, "fusion threshold must be >= 0 bytes"}, 0,
     "bytes of tensors fused into one collective"},
    {"cycle_time_ms", HVD_PARAM(HVD_PARAM_CYCLE_TIME, cycle_time_ms), "HVD_CYCLE_TIME",
     "HOROVOD_CYCLE_TIME", kNumber, &Config::cycle_time_ms,
     Range{0, 10000, false, "cycle time must be in [0, 10000] ms"}, 0,
     "the longest wait for more tensors to batch"},
    {"cache_capacity", HVD_PARAM(HVD_PARAM_CACHE_CAPACITY, cache_capacity),
     "HVD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", kInt, &Config::cache_capacity,
     Range{0, 1 << 20, false, "cache capacity must be in [0, 1048576]"}, 0,
     "entries of the response cache (0 = off)"},
    {"stall_warning_s", HVD_PARAM(HVD_PARAM_STALL_WARNING, stall_warning_s),
     "HVD_STALL_WARNING_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS", kNumber,
     &Config::stall_warning_s, kAny, 0, "seconds before a stall is reported (<= 0 = off)"},
    {"stall_shutdown_s", HVD_PARAM(HVD_PARAM_STALL_SHUTDOWN, stall_shutdown_s),
     "HVD_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", kNumber,
     &Config::stall_shutdown_s, kAny, 0, "seconds before a stall ends the job (<= 0 = off)"},
    {"start_timeout_s", HVD_PARAM(HVD_PARAM_START_TIMEOUT, start_timeout_s),
     "HVD_START_TIMEOUT", nullptr, kNumber, &Config::start_timeout_s,
     kPositiveSeconds("start_timeout_s must be > 0 seconds"), 0,
     "seconds for every rank to join at start"},
    {"transport_timeout_s", HVD_PARAM(HVD_PARAM_TRANSPORT_TIMEOUT, transport_timeout_s),
     "HVD_TRANSPORT_TIMEOUT", "HOROVOD_GLOO_TIMEOUT_SECONDS", kNumber,
     &Config::transport_timeout_s, kPositiveSeconds("transport_timeout_s must be > 0 seconds"),
     0, "seconds for a peer to answer within one transfer"},
    {"peer_timeout_s", HVD_PARAM(HVD_PARAM_PEER_TIMEOUT, peer_timeout_s), "HVD_PEER_TIMEOUT",
     nullptr, kNumber, &Config::peer_timeout_s, kAny, 0,
     "seconds before a peer absent from the negotiation is silent (<= 0 = off)"},
    {"timeline_mark_cycles", HVD_NO_PARAM, "HVD_TIMELINE_MARK_CYCLES",
     "HOROVOD_TIMELINE_MARK_CYCLES", kSwitch, &Config::timeline_mark_cycles, kAny, 0,
     "the timeline marks the start of every cycle"},
    {"flight_recorder_size", HVD_NO_PARAM, "HVD_FLIGHT_RECORDER_SIZE", nullptr, kInt,
     &Config::flight_recorder_size,
     Range{0, 1 << 24, false, "{var}={value} must be in [0, 16777216] operations"}, 0,
     "operations each rank's flight recorder keeps (0 = off)"},
    {"flight_recorder_dir", HVD_NO_PARAM, "HVD_FLIGHT_RECORDER_DIR", nullptr, kText,
     &Config::flight_recorder_dir, kAny, 0,
     "folder of the flight recorder's dumps (rank-<r>.json; \"\" = on request only)"},

    // Memory kept for reuse.
    {"fusion_buffer_initial", HVD_NO_PARAM, "HVD_FUSION_BUFFER_INITIAL", nullptr, kInt,
     &Config::fusion_buffer_initial,
     Range{0, kMaxBytes, false, "{var}={value} must be in [0, 2^50] bytes"}, 0,
     "bytes of fusion buffer faulted in at start"},
    {"buffer_pool_bytes", HVD_NO_PARAM, "HVD_BUFFER_POOL_SIZE", nullptr, kInt,
     &Config::buffer_pool_bytes,
     Range{0, kMaxBytes, false, "{var}={value} must be in [0, 2^50] bytes"}, 0,
     "bytes of spare buffers kept for the next operations"},

    // Collective algorithms (switches: 1 on, 0 off, unset = the default; the
    // overrides by collective index, as Config::algorithm).
    {"shm", HVD_NO_PARAM, "HVD_SHM", nullptr, kSwitch, &Config::shm, kAny, 0,
     "shared-memory collectives when every rank shares one host"},
    {"gloo_shm", HVD_NO_PARAM, "HVD_GLOO_SHM", nullptr, kSwitch, &Config::gloo_shm, kAny, 0,
     "HVD_SHM's older name for gloo"},
    {"mpi_shm", HVD_NO_PARAM, "HVD_MPI_SHM", nullptr, kSwitch, &Config::mpi_shm, kAny, 0,
     "HVD_SHM's older name for mpi"},
    {"hierarchical", HVD_NO_PARAM, "HVD_HIERARCHICAL", nullptr, kSwitch, &Config::hierarchical,
     kAny, 0,
     "hierarchical collectives across hosts; else Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE "
     "and _ALLGATHER (sources.cc)"},
    {"reproducible", HVD_NO_PARAM, "HVD_REPRODUCIBLE", nullptr, kSwitch, &Config::reproducible,
     kAny, 0,
     "1: the canonical reduction order on the hierarchical and device paths too; 0: native "
     "reductions allowed (docs/reproducibility.md)"},
    {"fusion_in_place", HVD_NO_PARAM, "HVD_FUSION_IN_PLACE", nullptr, kSwitch,
     &Config::fusion_in_place, kAny, 0, "a fused ring allreduce over the tensors in place"},
    {"caller_cycles", HVD_NO_PARAM, "HVD_CALLER_CYCLES", nullptr, kSwitch,
     &Config::caller_cycles, kAny, 0, "a waiting caller runs the cycle itself"},
    {"piggyback", HVD_NO_PARAM, "HVD_PIGGYBACK", nullptr, kSwitch, &Config::piggyback, kAny, 0,
     "small allreduces, broadcasts and allgathers ride in the negotiation"},
    {"metrics", HVD_NO_PARAM, "HVD_METRICS", nullptr, kSwitch, &Config::metrics, kAny, 0,
     "record metrics and stragglers (0 = off; docs/metrics.md)"},
    {"straggler_warning_s", HVD_NO_PARAM, "HVD_STRAGGLER_WARNING", nullptr, kNumber,
     &Config::straggler_warning_s, kAny, 0,
     "seconds between straggler warnings (<= 0 = none; docs/metrics.md)"},
    {"straggler_share", HVD_NO_PARAM, "HVD_STRAGGLER_SHARE", nullptr, kNumber,
     &Config::straggler_share, Range{0, 1, false, "straggler share must be in [0, 1]"}, 0,
     "a rank is late when by more than this share of the step"},
    {"metrics_publish_s", HVD_NO_PARAM, "HVD_METRICS_PUBLISH", nullptr, kNumber,
     &Config::metrics_publish_s, Range{0, kInf, false, "metrics publish period must be >= 0 s"},
     0, "seconds between metrics reports to the store for the launcher (0 = none)"},
    {"cuda_async_completion", HVD_NO_PARAM, "HVD_CUDA_ASYNC_COMPLETION",
     "HOROVOD_ENABLE_ASYNC_COMPLETION", kSwitch, &Config::cuda_async_completion, kAny, 0,
     "CUDA handles complete once queued on the stream"},
    {"host_id", HVD_NO_PARAM, "HVD_HOST_ID", nullptr, kText, &Config::host_id, kAny, 0,
     "this rank's host identity (simulated hosts in tests)"},
    {"algorithm_allreduce", HVD_NO_PARAM, "HVD_ALGORITHM_ALLREDUCE", nullptr, Parse::kAlgorithm,
     &Config::algorithm, kAny, 0, "force an allreduce algorithm"},
    {"algorithm_allgather", HVD_NO_PARAM, "HVD_ALGORITHM_ALLGATHER", nullptr, Parse::kAlgorithm,
     &Config::algorithm, kAny, 1, "force an allgather algorithm"},
    {"algorithm_broadcast", HVD_NO_PARAM, "HVD_ALGORITHM_BROADCAST", nullptr, Parse::kAlgorithm,
     &Config::algorithm, kAny, 2, "force a broadcast algorithm"},
    {"algorithm_alltoall", HVD_NO_PARAM, "HVD_ALGORITHM_ALLTOALL", nullptr, Parse::kAlgorithm,
     &Config::algorithm, kAny, 3, "force an alltoall algorithm"},
    {"algorithm_reducescatter", HVD_NO_PARAM, "HVD_ALGORITHM_REDUCESCATTER", nullptr,
     Parse::kAlgorithm, &Config::algorithm, kAny, 4,
     "force a reducescatter algorithm"},
    {"algorithm_barrier", HVD_NO_PARAM, "HVD_ALGORITHM_BARRIER", nullptr, Parse::kAlgorithm,
     &Config::algorithm, kAny, 5, "force a barrier algorithm"},

    // Autotuning (rank 0 decides); the tuner's knobs are environment only.
    {"autotune", HVD_PARAM(HVD_PARAM_AUTOTUNE, autotune), "HVD_AUTOTUNE", "HOROVOD_AUTOTUNE",
     Parse::kOnOff, &Config::autotune,
     Range{0, 1, false, "params.autotune is {value}; it must be 0 (off) or 1 (on)"}, 0,
     "tune the fusion threshold and cycle time"},
    {"autotune_log", HVD_NO_PARAM, "HVD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", kText,
     &Config::autotune_log, kAny, 0, "CSV of every sample (rank 0)"},
    {"autotune_warmup_samples", HVD_NO_PARAM, "HVD_AUTOTUNE_WARMUP_SAMPLES",
     "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", kInt, &Config::autotune_warmup_samples,
     Range{0, 1000, false, "{var} must be in [0, 1000]"}, 0, "windows ignored first"},
    {"autotune_steps_per_sample", HVD_NO_PARAM, "HVD_AUTOTUNE_STEPS_PER_SAMPLE",
     "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", kInt, &Config::autotune_steps_per_sample,
     Range{1, 1000000, false, "{var} must be in [1, 1000000]"}, 0, "busy cycles per window"},
    {"autotune_samples", HVD_NO_PARAM, "HVD_AUTOTUNE_SAMPLES", nullptr, kInt,
     &Config::autotune_samples, Range{1, 1000, false, "{var} must be in [1, 1000]"}, 0,
     "windows scored per candidate"},

    // Logging.
    {"log_level", HVD_PARAM(HVD_PARAM_LOG_LEVEL, log_level), "HVD_LOG_LEVEL",
     "HOROVOD_LOG_LEVEL", Parse::kLogLevel, &Config::log_level,
     Range{HVD_LOG_ERROR, HVD_LOG_TRACE, false,
           "log_level must be one of HVD_LOG_ERROR..HVD_LOG_TRACE"},
     0, "error, warning, info, debug or trace"},
};

static_assert(sizeof(kSettings) / sizeof(kSettings[0]) <= sizeof(Resolution::from) /
                                                             sizeof(Resolution::from[0]),
              "Resolution::from has a slot per setting");

}  // namespace

Status ParseInteger(const char* name, const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    return InvalidArgument(std::string(name) + "='" + text + "' is not an integer");
  }
  *out = v;
  return Status::Ok();
}

Status ParseNumber(const char* name, const std::string& text, double* out) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v)) {
    return InvalidArgument(std::string(name) + "='" + text + "' is not a number");
  }
  *out = v;
  return Status::Ok();
}

namespace {

// 1 for on, 0 for off, -1 for neither.
int SwitchWord(const std::string& v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return 1;
  if (v == "0" || v == "false" || v == "no" || v == "off") return 0;
  return -1;
}

Result<int64_t> ParseSwitch(const char* name, const std::string& text, bool any_case) {
  std::string v = text;
  if (any_case) {
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  int on = SwitchWord(v);
  if (on < 0) {
    return InvalidArgument(std::string(name) + "='" + text +
                           "' is not one of 1, 0, true, false, yes, no, on, off");
  }
  return on;
}

Result<int64_t> ParseLevel(const char* name, const std::string& text) {
  int level = ParseLogLevel(text);
  // Horovod's FATAL: hvd's least, error.
  if (level < 0 && strcasecmp(text.c_str(), "fatal") == 0) level = HVD_LOG_ERROR;
  if (level < 0) {
    return InvalidArgument(std::string(name) + "='" + text +
                           "' is not one of error, warning, info, debug, trace");
  }
  return level;
}

bool NumericParse(Parse p) { return p != Parse::kText && p != Parse::kAlgorithm; }

Status CheckRange(const Setting& s, const char* var, const Value& v) {
  if (s.range.error == nullptr) return Status::Ok();
  const double x = s.parse == Parse::kNumber ? v.d : static_cast<double>(v.i);
  const bool in = (s.range.lo_open ? x > s.range.lo : x >= s.range.lo) && x <= s.range.hi;
  if (in) return Status::Ok();
  std::string text = s.range.error;
  for (const auto& [key, with] :
       {std::pair<std::string, std::string>{"{var}", var},
        {"{value}", s.parse == Parse::kNumber ? std::to_string(v.d) : std::to_string(v.i)}}) {
    size_t at = text.find(key);
    if (at != std::string::npos) text.replace(at, key.size(), with);
  }
  return InvalidArgument(text);
}

}  // namespace

const Setting* Settings(size_t* count) {
  *count = sizeof(kSettings) / sizeof(kSettings[0]);
  return kSettings;
}

size_t RowOf(const char* name) {
  for (size_t k = 0; k < sizeof(kSettings) / sizeof(kSettings[0]); ++k) {
    if (std::strcmp(kSettings[k].name, name) == 0) return k;
  }
  return SIZE_MAX;
}

Result<Value> ParseText(const Setting& s, const char* var, const std::string& text) {
  Value v;
  v.text = text;
  switch (s.parse) {
    case Parse::kText:
      break;
    case Parse::kInt:
      HVD_CHECK(ParseInteger(var, text, &v.i));
      break;
    case Parse::kNumber:
      HVD_CHECK(ParseNumber(var, text, &v.d));
      break;
    case Parse::kSwitch:
    case Parse::kOnOff: {
      HVD_ASSIGN_OR_RETURN(v.i, ParseSwitch(var, text, s.parse == Parse::kSwitch));
      break;
    }
    case Parse::kLogLevel: {
      HVD_ASSIGN_OR_RETURN(v.i, ParseLevel(var, text));
      break;
    }
    case Parse::kAlgorithm:
      HVD_CHECK(algo::ParseAlgorithm(s.index, var, text).status());
      break;
  }
  return v;
}

Status Land(const Setting& s, size_t row, const char* var, const Value& v, Resolution* r) {
  if (NumericParse(s.parse)) HVD_CHECK(CheckRange(s, var, v));
  Config& c = r->config;
  if (auto* t = std::get_if<std::string Config::*>(&s.target)) c.*(*t) = v.text;
  if (auto* t = std::get_if<int64_t Config::*>(&s.target)) c.*(*t) = v.i;
  if (auto* t = std::get_if<int Config::*>(&s.target)) c.*(*t) = static_cast<int>(v.i);
  if (auto* t = std::get_if<double Config::*>(&s.target)) c.*(*t) = v.d;
  if (auto* t = std::get_if<bool Config::*>(&s.target)) c.*(*t) = v.i == 1;
  if (auto* t = std::get_if<std::string (Config::*)[6]>(&s.target)) (c.*(*t))[s.index] = v.text;
  r->from[row] = var;
  return Status::Ok();
}

}  // namespace hvd::config
