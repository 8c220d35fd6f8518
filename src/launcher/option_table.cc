#include "launcher/option_table.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "common/netif.h"

namespace hvd::launcher {

bool ParseInt(const std::string& s, long lo, long hi, int* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool ParseNonNegative(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

namespace {

bool ValidEnvName(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return s[0] != '-';
}

std::string Lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// --- Handlers shared by several rows --------------------------------------

std::string PositiveInt(const char* what, const std::string& v, int* out, long hi = 1000000) {
  if (!ParseInt(v, 1, hi, out)) return std::string("bad ") + what + " '" + v + "'";
  return "";
}

std::string NonEmpty(const char* what, const std::string& v, std::string* out) {
  if (v.empty()) return std::string("empty ") + what;
  *out = v;
  return "";
}

// --flight-recorder: the folder, absolute (remote ranks start in hvdrun's
// working directory too, but the collection copies by this path).
std::string SetFlightRecorder(ParseState& s, const std::string& v) {
  std::string err = NonEmpty("--flight-recorder", v, &s.o.flight_recorder);
  if (!err.empty() || v[0] == '/') return err;
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) != nullptr) s.o.flight_recorder = std::string(cwd) + "/" + v;
  return "";
}

std::string SetEnv(ParseState& s, const char* name, const std::string& value) {
  s.o.extra_env.emplace_back(name, value);
  return "";
}

// --metrics-port [ADDR:]P (an IPv6 ADDR in brackets: [::1]:9400).
std::string ParseMetricsPort(ParseState& s, const OptionRow&, const std::string& v) {
  const size_t colon = v.rfind(':');
  std::string addr = colon == std::string::npos ? "" : v.substr(0, colon);
  if (addr.size() >= 2 && addr.front() == '[' && addr.back() == ']') {
    addr = addr.substr(1, addr.size() - 2);
  }
  const std::string port = colon == std::string::npos ? v : v.substr(colon + 1);
  if (!ParseInt(port, 0, 65535, &s.o.metrics_port) ||
      (colon != std::string::npos && addr.empty())) {
    return "bad --metrics-port '" + v + "' (want [ADDR:]PORT)";
  }
  if (!addr.empty()) s.o.metrics_addr = addr;
  return "";
}

// A switch that sets its variable to 1.
std::string EnvOn(ParseState& s, const OptionRow& row, const std::string&) {
  return SetEnv(s, row.env, "1");
}

// A number of seconds (0 or more) passed on as given.
std::string EnvSeconds(ParseState& s, const OptionRow& row, const std::string& v) {
  double sec;
  if (!ParseNonNegative(v, &sec)) return std::string("bad ") + row.names + " '" + v + "'";
  return SetEnv(s, row.env, v);
}

std::string SetTransport(ParseState& s, const std::string& name, const std::string& flag) {
  if (!s.transport_from.empty() && s.o.transport != name) {
    return flag + " conflicts with " + s.transport_from + " (one transport per job)";
  }
  s.o.transport = name;
  s.transport_from = flag;
  return "";
}

std::string Stop(ParseState& s, ParseOutcome outcome) {
  s.stop = outcome;
  return "";
}

// --- Rows with a handler of their own -------------------------------------

std::string ApplyBlacklistCooldown(ParseState& s, const OptionRow&, const std::string& v) {
  Options& o = s.o;
  std::string a = v.substr(0, v.find(' ')), b = v.substr(v.find(' ') + 1);
  if (!ParseNonNegative(a, &o.cooldown_min_s) || !ParseNonNegative(b, &o.cooldown_max_s) ||
      o.cooldown_min_s > o.cooldown_max_s) {
    return "bad --blacklist-cooldown-range '" + v + "' (two numbers of seconds, A <= B)";
  }
  o.cooldown_given = true;
  s.elastic_only = "--blacklist-cooldown-range";
  return "";
}

std::string ApplyNetworkInterface(ParseState& s, const OptionRow&, const std::string& v) {
  if (v.find(',') != std::string::npos) {
    return "hvdrun takes one network interface, got '" + v +
           "' (hvd sends its data over one interface)";
  }
  uint32_t net = 0;
  int bits = 0;
  if (v.find('/') != std::string::npos ? !ParseCidr(v, &net, &bits) : !ValidName(v)) {
    return "bad network interface '" + v +
           "' (a name such as eth0, or an IPv4 CIDR such as 10.0.0.0/24)";
  }
  s.o.network_interface = v;
  return "";
}

std::string ApplyLogLevel(ParseState& s, const OptionRow& row, const std::string& v) {
  std::string l = Lower(v);
  if (l == "fatal") l = "error";
  if (l == "warn") l = "warning";
  if (l != "trace" && l != "debug" && l != "info" && l != "warning" && l != "error") {
    return "bad --log-level '" + v + "' (trace, debug, info, warning, error or fatal)";
  }
  return SetEnv(s, row.env, l);
}

std::string ApplyEnv(ParseState& s, const OptionRow&, const std::string& v) {
  size_t eq = v.find('=');
  std::string name = v.substr(0, eq);
  if (!ValidEnvName(name)) return "bad variable name in -x '" + v + "'";
  if (eq != std::string::npos) {
    s.o.extra_env.emplace_back(name, v.substr(eq + 1));
  } else {
    const char* cur = std::getenv(name.c_str());
    if (cur == nullptr) return "-x " + name + ": not set in hvdrun's environment";
    s.o.extra_env.emplace_back(name, cur);
  }
  return "";
}

constexpr const char* kPlace = "Job size and placement:";
constexpr const char* kTorchrun = "torchrun-style launch (one hvdrun per node; no ssh):";
constexpr const char* kElastic =
    "Elastic training (docs/elastic.md; on with any of the first three):";
constexpr const char* kSettings = "Settings passed to every rank (as environment variables):";
constexpr const char* kRemote = "Remote hosts:";
constexpr const char* kBehaviour = "Behaviour:";

using S = ParseState;
using R = OptionRow;
using V = std::string;

const OptionRow kRows[] = {
    {kPlace, "-np, --num-proc", "-n", "N", Arity::kOne,
     "number of ranks (default: the total slots of -H or\n"
     "--hostfile; required without them); in an elastic\n"
     "job, the workers to start with (default --min-np)",
     [](S& s, const R&, const V& v) { s.np_given = true; return PositiveInt("-np", v, &s.o.np); },
     nullptr},
    {kPlace, "-H, --hosts", "", "LIST", Arity::kOne,
     "host1:slots,host2:slots,... (slots default to 1);\n"
     "ranks fill the hosts in order. Default: localhost:N",
     [](S& s, const R&, const V& v) { s.hosts_arg = v; return V(); }, nullptr},
    {kPlace, "--hostfile", "-hostfile", "FILE", Arity::kOne,
     "one host a line: \"host\", \"host:N\" or \"host slots=N\"",
     [](S& s, const R&, const V& v) { s.hostfile_arg = v; return V(); }, nullptr},

    {kTorchrun, "--nproc-per-node", "--nproc_per_node", "N", Arity::kOne,
     "ranks started by this hvdrun",
     [](S& s, const R&, const V& v) {
       s.o.torchrun_style = true;
       return PositiveInt("--nproc-per-node", v, &s.o.nproc_per_node);
     },
     nullptr},
    {kTorchrun, "--nnodes", "", "M", Arity::kOne, "number of nodes (default 1)",
     [](S& s, const R&, const V& v) {
       s.o.torchrun_style = true;
       return PositiveInt("--nnodes", v, &s.o.nnodes);
     },
     nullptr},
    {kTorchrun, "--node-rank", "--node_rank", "R", Arity::kOne,
     "this node's index, 0..M-1 (default 0); ranks are\n"
     "R*N .. R*N+N-1 and node 0 hosts the store",
     [](S& s, const R&, const V& v) {
       s.o.torchrun_style = true;
       if (!ParseInt(v, 0, 1000000, &s.o.node_rank)) return "bad --node-rank '" + v + "'";
       return V();
     },
     nullptr},
    {kTorchrun, "--master-addr", "--master_addr", "ADDR", Arity::kOne,
     "node 0's address (required when M > 1). With\n"
     "M > 1 every node must have the same HVD_SECRET\n"
     "(64 hex digits) in its environment",
     [](S& s, const R&, const V& v) {
       s.o.torchrun_style = true;
       if (v.empty() || v[0] == '-') return "bad --master-addr '" + v + "'";
       s.o.master_addr = v;
       return V();
     },
     nullptr},
    {kTorchrun, "--master-port", "--master_port", "PORT", Arity::kOne,
     "the store's port on node 0 (default 29500 when\n"
     "M > 1, else any free port)",
     [](S& s, const R&, const V& v) {
       s.o.torchrun_style = true;
       s.master_port_given = true;
       return PositiveInt("--master-port", v, &s.o.master_port, 65535);
     },
     nullptr},

    {kElastic, "--min-np, --min-num-proc", "", "N", Arity::kOne,
     "fewest workers the job runs with (default: -np)",
     [](S& s, const R&, const V& v) {
       s.min_np_given = true;
       return PositiveInt("--min-np", v, &s.o.min_np);
     },
     nullptr},
    {kElastic, "--max-np, --max-num-proc", "", "M", Arity::kOne,
     "most workers (default: every slot of the hosts)",
     [](S& s, const R&, const V& v) {
       s.max_np_given = true;
       return PositiveInt("--max-np", v, &s.o.max_np);
     },
     nullptr},
    {kElastic, "--host-discovery-script", "", "S", Arity::kOne,
     "prints \"host:slots\" lines; run every second (with\n"
     "sh -c); hosts that appear get workers, hosts that\n"
     "vanish lose theirs. Without it: -H/--hostfile's\n"
     "hosts (default localhost:M)",
     [](S& s, const R&, const V& v) {
       return NonEmpty("--host-discovery-script", v, &s.o.discovery_script);
     },
     nullptr},
    {kElastic, "--slots", "--slots-per-host", "N", Arity::kOne,
     "slots of a discovered host listed without \":N\"\n"
     "(default 1)",
     [](S& s, const R&, const V& v) {
       s.slots_given = true;
       return PositiveInt("--slots", v, &s.o.default_slots);
     },
     nullptr},
    {kElastic, "--elastic-timeout", "", "T", Arity::kOne,
     "seconds to wait for --min-np workers before\n"
     "giving up; HVD_ELASTIC_TIMEOUT for the workers\n"
     "(default 600, or $HVD_ELASTIC_TIMEOUT)",
     [](S& s, const R&, const V& v) {
       if (!ParseNonNegative(v, &s.o.elastic_timeout_s) || s.o.elastic_timeout_s <= 0) {
         return "bad --elastic-timeout '" + v + "' (seconds above 0)";
       }
       s.o.elastic_timeout_text = v;
       s.elastic_only = "--elastic-timeout";
       return V();
     },
     nullptr},
    {kElastic, "--blacklist-cooldown-range", "", "A B", Arity::kTwo,
     "a host whose worker failed is left out for a\n"
     "random time in [A, B] seconds (default: for good)",
     ApplyBlacklistCooldown, nullptr},
    {kElastic, "--reset-limit", "", "K", Arity::kOne, "end the job with an error after K resets",
     [](S& s, const R&, const V& v) {
       s.elastic_only = "--reset-limit";
       if (!ParseInt(v, 0, 1000000000, &s.o.reset_limit)) return "bad --reset-limit '" + v + "'";
       return V();
     },
     nullptr},

    {kSettings, "--transport", "", "NAME", Arity::kOne,
     "HVD_TRANSPORT (gloo, mpi, local, ...)\n"
     "mpi: the job is started by mpirun instead (with\n"
     "-np, -H, -x HVD_*; see docs/mpi.md)",
     [](S& s, const R&, const V& v) {
       if (!ValidName(v)) return "bad transport name '" + v + "'";
       return SetTransport(s, v, "--transport " + v);
     },
     nullptr},
    {kSettings, "--gloo", "", "", Arity::kNone, "--transport gloo (horovodrun's)",
     [](S& s, const R&, const V&) { return SetTransport(s, "gloo", "--gloo"); }, nullptr},
    {kSettings, "--mpi", "", "", Arity::kNone, "--transport mpi (horovodrun's)",
     [](S& s, const R&, const V&) { return SetTransport(s, "mpi", "--mpi"); }, nullptr},
    {kSettings, "--network-interface, --network-interfaces", "", "IF", Arity::kOne,
     "HVD_NETWORK_INTERFACE: a name (eth0) or an IPv4 CIDR\n"
     "(10.0.0.0/24: the interface with an address in it,\n"
     "whatever each host calls it); also where the store\n"
     "listens, mpirun's btl/oob_tcp_if_include and, for\n"
     "a name, UCX_NET_DEVICES (unless set already or this\n"
     "host has RDMA devices: -v says why). One interface\n"
     "(the two spellings are the same flag). Unset: the\n"
     "interface the routes to the remote hosts use",
     ApplyNetworkInterface, "HVD_NETWORK_INTERFACE"},
    {kSettings, "--timeline-filename", "", "FILE", Arity::kOne, "HVD_TIMELINE",
     [](S& s, const R&, const V& v) {
       return NonEmpty("--timeline-filename", v, &s.o.timeline_filename);
     },
     "HVD_TIMELINE"},
    {kSettings, "--flight-recorder", "", "DIR", Arity::kOne,
     "HVD_FLIGHT_RECORDER_DIR: every rank writes its last\n"
     "operations to DIR/rank-N.json on an error or SIGUSR1;\n"
     "when the job fails or is signalled, hvdrun asks the\n"
     "running ranks for theirs and copies remote ranks'\n"
     "into DIR (python -m hvd.trace DIR reads them)",
     [](S& s, const R&, const V& v) { return SetFlightRecorder(s, v); },
     "HVD_FLIGHT_RECORDER_DIR"},
    {kSettings, "--timeline-mark-cycles", "", "", Arity::kNone,
     "HVD_TIMELINE_MARK_CYCLES=1: the timeline also marks\n"
     "the start of every cycle",
     EnvOn, "HVD_TIMELINE_MARK_CYCLES"},
    {kSettings, "--hierarchical-allreduce, --hierarchical-allgather", "", "", Arity::kNone,
     "HVD_HIERARCHICAL=1 (hvd has one switch for every\n"
     "collective)",
     EnvOn, "HVD_HIERARCHICAL"},
    {kSettings, "--fusion-threshold-mb", "", "M", Arity::kOne,
     "HVD_FUSION_THRESHOLD (in bytes: M * 1048576)",
     [](S& s, const R&, const V& v) {
       double mb;
       if (!ParseNonNegative(v, &mb) || mb > 1e6) return "bad --fusion-threshold-mb '" + v + "'";
       s.o.fusion_threshold_bytes = std::llround(mb * 1048576.0);
       return V();
     },
     "HVD_FUSION_THRESHOLD"},
    {kSettings, "--cycle-time-ms", "", "T", Arity::kOne, "HVD_CYCLE_TIME (milliseconds)",
     [](S& s, const R&, const V& v) {
       double ms;
       if (!ParseNonNegative(v, &ms) || ms <= 0) return "bad --cycle-time-ms '" + v + "'";
       s.o.cycle_time_ms = v;
       return V();
     },
     "HVD_CYCLE_TIME"},
    {kSettings, "--autotune", "", "", Arity::kNone, "HVD_AUTOTUNE=1", EnvOn, "HVD_AUTOTUNE"},
    {kSettings, "--autotune-log-file", "", "FILE", Arity::kOne, "HVD_AUTOTUNE_LOG",
     [](S& s, const R& row, const V& v) {
       if (v.empty()) return V("empty --autotune-log-file");
       return SetEnv(s, row.env, v);
     },
     "HVD_AUTOTUNE_LOG"},
    {kSettings, "--log-level", "", "LEVEL", Arity::kOne,
     "HVD_LOG_LEVEL: trace, debug, info, warning, error\n"
     "(any case; fatal means error)",
     ApplyLogLevel, "HVD_LOG_LEVEL"},
    {kSettings, "--cache-capacity", "", "N", Arity::kOne, "HVD_CACHE_CAPACITY",
     [](S& s, const R& row, const V& v) {
       int n;
       if (!ParseInt(v, 0, 1L << 20, &n)) return "bad --cache-capacity '" + v + "'";
       return SetEnv(s, row.env, std::to_string(n));
     },
     "HVD_CACHE_CAPACITY"},
    {kSettings, "--disable-cache", "", "", Arity::kNone, "HVD_CACHE_CAPACITY=0",
     [](S& s, const R& row, const V&) { return SetEnv(s, row.env, "0"); }, "HVD_CACHE_CAPACITY"},
    {kSettings, "--no-stall-check", "", "", Arity::kNone,
     "HVD_STALL_WARNING_TIME=0 HVD_STALL_SHUTDOWN_TIME=0",
     [](S& s, const R&, const V&) {
       SetEnv(s, "HVD_STALL_WARNING_TIME", "0");
       return SetEnv(s, "HVD_STALL_SHUTDOWN_TIME", "0");
     },
     "HVD_STALL_WARNING_TIME"},
    {kSettings, "--stall-check-warning-time-seconds", "", "S", Arity::kOne,
     "HVD_STALL_WARNING_TIME", EnvSeconds, "HVD_STALL_WARNING_TIME"},
    {kSettings, "--stall-check-shutdown-time-seconds", "", "S", Arity::kOne,
     "HVD_STALL_SHUTDOWN_TIME", EnvSeconds, "HVD_STALL_SHUTDOWN_TIME"},
    {kSettings, "--gloo-timeout-seconds", "", "S", Arity::kOne, "HVD_TRANSPORT_TIMEOUT",
     [](S& s, const R& row, const V& v) {
       double sec;
       if (!ParseNonNegative(v, &sec) || sec <= 0) return "bad --gloo-timeout-seconds '" + v + "'";
       return SetEnv(s, row.env, v);
     },
     "HVD_TRANSPORT_TIMEOUT"},
    {kSettings, "--start-timeout", "", "S", Arity::kOne,
     "HVD_START_TIMEOUT; also how long hvdrun waits for\n"
     "every running rank to connect to the store\n"
     "(default 60, or $HVD_START_TIMEOUT; 0 = no limit)",
     [](S& s, const R&, const V& v) {
       if (!ParseNonNegative(v, &s.o.start_timeout_s)) return "bad --start-timeout '" + v + "'";
       s.o.start_timeout_given = true;
       s.o.start_timeout_text = v;
       return V();
     },
     "HVD_START_TIMEOUT"},
    {kSettings, "-x, --env", "", "NAME[=VALUE]", Arity::kOne,
     "also set NAME for every rank (its value here when\n"
     "no VALUE is given); may be repeated",
     ApplyEnv, nullptr},

    {kRemote, "-p, --ssh-port", "", "PORT", Arity::kOne, "ssh port",
     [](S& s, const R&, const V& v) { return PositiveInt("--ssh-port", v, &s.o.ssh_port, 65535); },
     nullptr},
    {kRemote, "-i, --ssh-identity-file", "", "F", Arity::kOne, "ssh private key",
     [](S& s, const R&, const V& v) {
       return NonEmpty("--ssh-identity-file", v, &s.o.ssh_identity);
     },
     nullptr},

    {kBehaviour, "--bind-to", "", "none|core|auto", Arity::kOne,
     "CPU binding of each host's ranks, within the CPU\n"
     "affinity hvdrun has here (remote ranks: their\n"
     "ssh session's there; hvdrun at the same path\n"
     "there binds them). auto (the default, or\n"
     "$HVD_BIND_TO): where the ranks fit the CPUs, each\n"
     "gets an equal contiguous share of them (whole\n"
     "physical cores first); else none. core: one CPU\n"
     "each (round robin when more ranks than CPUs).\n"
     "none: no binding",
     [](S& s, const R&, const V& v) {
       if (!ParseBindMode(v, &s.o.bind_to)) return "bad --bind-to '" + v + "' (none, core or auto)";
       return V();
     },
     nullptr},
    {kBehaviour, "--tag-output", "", "", Arity::kNone,
     "prefix every output line with \"[rank]<stdout>: \"\n"
     "or \"[rank]<stderr>: \"",
     [](S& s, const R&, const V&) { s.o.tag_output = true; return V(); }, nullptr},
    {kBehaviour, "--output-filename", "", "DIR", Arity::kOne,
     "also write each rank's output, as it comes, to\n"
     "DIR/rank.N/stdout and DIR/rank.N/stderr (N padded\n"
     "with zeros to the width of np-1; not with elastic\n"
     "jobs or --transport mpi)",
     [](S& s, const R&, const V& v) {
       return NonEmpty("--output-filename", v, &s.o.output_filename);
     },
     nullptr},
    {kBehaviour, "-cb, --check-build", "", "", Arity::kStop,
     "show the transports this hvd build has, and exit",
     [](S& s, const R&, const V&) { return Stop(s, ParseOutcome::kCheckBuild); }, nullptr},
    {kBehaviour, "--grace-period", "", "S", Arity::kOne,
     "seconds between SIGTERM and SIGKILL when stopping\n"
     "the job (default 5, or $HVD_LAUNCHER_GRACE)",
     [](S& s, const R&, const V& v) {
       if (!ParseNonNegative(v, &s.o.grace_s)) return "bad --grace-period '" + v + "'";
       return V();
     },
     nullptr},
    {kBehaviour, "--metrics-port", "", "[ADDR:]P", Arity::kOne,
     "serve the job's metrics, every rank's, for\n"
     "Prometheus at http://ADDR:P/metrics (ADDR default\n"
     "127.0.0.1; P 0: any free port, logged)",
     ParseMetricsPort, nullptr},
    {kBehaviour, "--summary", "", "", Arity::kNone,
     "at the job's end, print a summary of its metrics:\n"
     "time in collectives, bus bandwidth, stragglers,\n"
     "cache hit rate",
     [](S& s, const R&, const V&) { s.o.summary = true; return V(); }, nullptr},
    {kBehaviour, "-v, --verbose", "", "", Arity::kNone,
     "log the host plan, the rendezvous address and every\n"
     "rank's start, connection and exit on stderr",
     [](S& s, const R&, const V&) { s.o.verbose = true; return V(); }, nullptr},
    {kBehaviour, "-h, --help", "", "", Arity::kStop, "show this text",
     [](S& s, const R&, const V&) { return Stop(s, ParseOutcome::kHelp); }, nullptr},
    {kBehaviour, "--version", "", "", Arity::kStop, "show hvdrun's version",
     [](S& s, const R&, const V&) { return Stop(s, ParseOutcome::kVersion); }, nullptr},
};

// True when `name` is one of the ", "- or " "-separated spellings in `list`.
bool Spells(const char* list, const std::string& name) {
  const char* p = list;
  while (*p != '\0') {
    while (*p == ',' || *p == ' ') ++p;
    const char* end = p;
    while (*end != '\0' && *end != ',' && *end != ' ') ++end;
    if (end > p && name.size() == static_cast<size_t>(end - p) &&
        std::strncmp(p, name.c_str(), name.size()) == 0) {
      return true;
    }
    p = end;
  }
  return false;
}

}  // namespace

const OptionRow* OptionRows(size_t* count) {
  *count = sizeof(kRows) / sizeof(kRows[0]);
  return kRows;
}

const OptionRow* FindOption(const std::string& name) {
  for (const OptionRow& row : kRows) {
    if (Spells(row.names, name) || Spells(row.aliases, name)) return &row;
  }
  return nullptr;
}

const char* HorovodrunOnlyFlag(const std::string& name) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"--mpi-args", "hvdrun builds the mpirun command itself (docs/mpi.md); run mpirun "
                     "directly for other MPI options"},
      {"--binding-args", "hvdrun builds the mpirun command itself (docs/mpi.md); run mpirun "
                         "directly for other MPI options"},
      {"--tcp", "hvdrun builds the mpirun command itself (docs/mpi.md); run mpirun directly "
                "for other MPI options"},
      {"--mpi-threads-disable", "hvd has no such setting"},
      {"--num-nccl-streams", "hvd's NCCL transport runs every collective on the stream of "
                             "the tensor's caller (docs/gpu.md): there is no stream count to set"},
      {"--config-file", "give the settings as flags or HVD_* variables (hvdrun reads no YAML: "
                        "it has no YAML parser, and its flags name every setting the file "
                        "could hold)"},
  };
  for (const auto& f : kFlags) {
    if (name == f.first) return f.second;
  }
  return nullptr;
}

}  // namespace hvd::launcher
