#include "launcher/options.h"

#include "common/netif.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

namespace hvd::launcher {
namespace {

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

bool Truthy(const char* v) {
  if (v == nullptr) return false;
  std::string s = v;
  return s == "1" || s == "true" || s == "yes" || s == "on" || s == "TRUE" || s == "YES";
}

std::string Lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// horovodrun flags with no hvdrun equivalent: a usage error that says why,
// rather than "unknown option".
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

// A flag: its spellings, whether it takes a value, and what it does with it.
// The handler returns an error text, empty on success.
struct Flag {
  std::vector<std::string> names;
  bool takes_value;
  std::function<std::string(const std::string& value)> apply;
  bool two_values = false;  // the next two arguments, given to apply as "A B"
};

// The elastic options' consistency and defaults: min-np from -np, -np from
// min-np, the hosts. Returns an error text, empty on success.
std::string ResolveElastic(Options& o, bool np_given, bool min_np_given, bool max_np_given) {
  if (o.torchrun_style) return "elastic training cannot be combined with torchrun-style options";
  if (o.transport == "mpi") {
    return "elastic training cannot use the mpi transport (an MPI job's membership is fixed); use "
           "gloo";
  }
  if (!o.discovery_script.empty() && o.hosts_given) {
    return "-H/--hostfile and --host-discovery-script cannot be used together (the script lists "
           "the hosts)";
  }
  long total = 0;
  for (const auto& h : o.hosts) total += h.slots;
  if (!min_np_given) {
    if (np_given) {
      o.min_np = o.np;
    } else if (o.hosts_given) {
      o.min_np = static_cast<int>(total);
    } else {
      return "an elastic job needs -np or --min-np";
    }
  }
  if (!np_given) o.np = o.min_np;
  if (o.np < o.min_np) {
    return "-np " + std::to_string(o.np) + " is below --min-np " + std::to_string(o.min_np);
  }
  if (max_np_given && o.max_np < o.min_np) {
    return "--max-np " + std::to_string(o.max_np) + " is below --min-np " + std::to_string(o.min_np);
  }
  if (max_np_given && o.np > o.max_np) {
    return "-np " + std::to_string(o.np) + " is above --max-np " + std::to_string(o.max_np);
  }
  if (o.discovery_script.empty()) {
    if (!o.hosts_given) {
      o.hosts = {{"localhost", max_np_given ? o.max_np : o.np}};
      total = o.hosts[0].slots;
    }
    if (o.np > total) {
      return "-np " + std::to_string(o.np) + " is larger than the " + std::to_string(total) +
             " slots of the host list";
    }
    if (!max_np_given) o.max_np = static_cast<int>(total);
  }
  return "";
}

}  // namespace

std::string UsageText() {
  return R"(usage: hvdrun [options] [--] command [args...]

Starts N copies of command as the ranks of one hvd job, on this machine and/or
on remote hosts over ssh, hosts the job's rendezvous store, forwards every
rank's output, and stops the whole job as soon as one rank fails.

Job size and placement:
  -np, --num-proc N           number of ranks (default: the total slots of -H or
                              --hostfile; required without them)
  -H, --hosts LIST            host1:slots,host2:slots,... (slots default to 1);
                              ranks fill the hosts in order. Default: localhost:N
  --hostfile FILE             one host a line: "host", "host:N" or "host slots=N"

torchrun-style launch (one hvdrun per node; no ssh):
  --nproc-per-node N          ranks started by this hvdrun
  --nnodes M                  number of nodes (default 1)
  --node-rank R               this node's index, 0..M-1 (default 0); ranks are
                              R*N .. R*N+N-1 and node 0 hosts the store
  --master-addr ADDR          node 0's address (required when M > 1)
  --master-port PORT          the store's port on node 0 (default 29500 when
                              M > 1, else any free port)
                              With M > 1 every node must have the same
                              HVD_SECRET (64 hex digits) in its environment.

Elastic training (docs/elastic.md; on with any of the first three):
  --min-np N                  fewest workers the job runs with (default: -np)
  --max-np M                  most workers (default: every slot of the hosts)
  --host-discovery-script S   prints "host:slots" lines; run every second (with
                              sh -c); hosts that appear get workers, hosts that
                              vanish lose theirs. Without it: -H/--hostfile's
                              hosts (default localhost:M)
  -np N                       workers to start with (default --min-np)
  --slots N                   slots of a discovered host listed without ":N"
                              (default 1)
  --elastic-timeout T         seconds to wait for --min-np workers before
                              giving up; HVD_ELASTIC_TIMEOUT for the workers
                              (default 600, or $HVD_ELASTIC_TIMEOUT)
  --blacklist-cooldown-range A B  a host whose worker failed is left out for a
                              random time in [A, B] seconds (default: for good)
  --reset-limit K             end the job with an error after K resets
  --min-num-proc, --max-num-proc  the same as --min-np, --max-np

Settings passed to every rank (as environment variables):
  --transport NAME            HVD_TRANSPORT (gloo, mpi, local, ...)
                              mpi: the job is started by mpirun instead (with
                              -np, -H, -x HVD_*; see docs/mpi.md)
  --gloo, --mpi               --transport gloo, --transport mpi (horovodrun's)
  --network-interface IF      HVD_NETWORK_INTERFACE: a name (eth0) or an IPv4 CIDR
                              (10.0.0.0/24: the interface with an address in it,
                              whatever each host calls it); also where the store
                              listens, mpirun's btl/oob_tcp_if_include and, for
                              a name, UCX_NET_DEVICES (unless set already or this
                              host has RDMA devices: -v says why)
                              (one interface; --network-interfaces is the same
                              flag). Unset: the interface the routes to the
                              remote hosts use
  --timeline-filename FILE    HVD_TIMELINE
  --timeline-mark-cycles      HVD_TIMELINE_MARK_CYCLES=1: the timeline also marks
                              the start of every cycle
  --hierarchical-allreduce, --hierarchical-allgather
                              HVD_HIERARCHICAL=1 (hvd has one switch for every
                              collective)
  --fusion-threshold-mb M     HVD_FUSION_THRESHOLD (in bytes: M * 1048576)
  --cycle-time-ms T           HVD_CYCLE_TIME (milliseconds)
  --autotune                  HVD_AUTOTUNE=1
  --autotune-log-file FILE    HVD_AUTOTUNE_LOG
  --log-level LEVEL           HVD_LOG_LEVEL: trace, debug, info, warning, error
                              (any case; fatal means error)
  --cache-capacity N          HVD_CACHE_CAPACITY (--disable-cache: 0)
  --no-stall-check            HVD_STALL_WARNING_TIME=0 HVD_STALL_SHUTDOWN_TIME=0
  --stall-check-warning-time-seconds S    HVD_STALL_WARNING_TIME
  --stall-check-shutdown-time-seconds S   HVD_STALL_SHUTDOWN_TIME
  --gloo-timeout-seconds S    HVD_TRANSPORT_TIMEOUT
  --start-timeout S           HVD_START_TIMEOUT; also how long hvdrun waits for
                              every running rank to connect to the store
                              (default 60, or $HVD_START_TIMEOUT; 0 = no limit)
  -x, --env NAME[=VALUE]      also set NAME for every rank (its value here when
                              no VALUE is given); may be repeated

Remote hosts:
  -p, --ssh-port PORT         ssh port
  -i, --ssh-identity-file F   ssh private key

Behaviour:
  --bind-to none|core|auto    CPU binding of each host's ranks, within the CPU
                              affinity hvdrun has here (remote ranks: their
                              ssh session's there; hvdrun at the same path
                              there binds them). auto (the default, or
                              $HVD_BIND_TO): where the ranks fit the CPUs, each
                              gets an equal contiguous share of them (whole
                              physical cores first); else none. core: one CPU
                              each (round robin when more ranks than CPUs).
                              none: no binding
  --tag-output                prefix every output line with "[rank]<stdout>: " or
                              "[rank]<stderr>: "
  --output-filename DIR       also write each rank's output, as it comes, to
                              DIR/rank.N/stdout and DIR/rank.N/stderr (N padded
                              with zeros to the width of np-1; not with elastic
                              jobs or --transport mpi)
  -cb, --check-build          show the transports this hvd build has, and exit
  --grace-period S            seconds between SIGTERM and SIGKILL when stopping
                              the job (default 5, or $HVD_LAUNCHER_GRACE)
  -v, --verbose               log the host plan, the rendezvous address and every
                              rank's start, connection and exit on stderr
  -h, --help                  show this text
  --version                   show hvdrun's version

Every rank gets HVD_RANK, HVD_SIZE, HVD_LOCAL_RANK, HVD_LOCAL_SIZE,
HVD_CROSS_RANK, HVD_CROSS_SIZE, HVD_RENDEZVOUS_ADDR, HVD_SECRET, HVD_HOSTNAME;
the same under Horovod's names: HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE, HOROVOD_HOSTNAME
(not with --transport mpi: mpirun starts those ranks); and RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE.

horovodrun's flags above keep their meaning, so a launch script works with
hvdrun in its place; see docs/horovod.md for the ones hvdrun refuses.

Elastic workers get HVD_ELASTIC=1, HVD_ELASTIC_WORKER, HVD_ELASTIC_TIMEOUT,
HVD_RENDEZVOUS_ADDR, HVD_SECRET, HVD_HOSTNAME and no rank variables: their
ranks come from hvdrun with every epoch.

Exit status: 0 when every rank exits 0; the first failing rank's exit code
(128+signal when it was killed by a signal); 128+signal when hvdrun itself
is interrupted; 1 when a rank did not connect within the start timeout or the
launcher could not start the job; 2 for usage errors. Elastic: 0 when every
worker of the last epoch exits 0, else the first failed one's code; 1 when
fewer than --min-np workers remain or the reset limit is reached.
)";
}

ParseResult ParseArgs(int argc, char** argv) {
  ParseResult res;
  Options& o = res.options;
  std::string hosts_arg, hostfile_arg;
  bool np_given = false;
  bool min_np_given = false, max_np_given = false, slots_given = false;
  std::string elastic_only;  // an elastic-only option given, for the error without elastic
  bool nnodes_given = false, node_rank_given = false, master_port_given = false;

  // Defaults from the environment.
  if (const char* v = std::getenv("HVD_START_TIMEOUT"); v != nullptr && *v != '\0') {
    if (!ParseNonNegative(v, &o.start_timeout_s)) {
      res.error = std::string("bad HVD_START_TIMEOUT '") + v + "' (seconds expected)";
      return res;
    }
    o.start_timeout_given = true;
    o.start_timeout_text = v;
  }
  if (const char* v = std::getenv("HVD_ELASTIC_TIMEOUT"); v != nullptr && *v != '\0') {
    if (!ParseNonNegative(v, &o.elastic_timeout_s) || o.elastic_timeout_s <= 0) {
      res.error = std::string("bad HVD_ELASTIC_TIMEOUT '") + v + "' (seconds above 0 expected)";
      return res;
    }
    o.elastic_timeout_text = v;
  }
  if (const char* v = std::getenv("HVD_LAUNCHER_GRACE"); v != nullptr && *v != '\0') {
    if (!ParseNonNegative(v, &o.grace_s)) {
      res.error = std::string("bad HVD_LAUNCHER_GRACE '") + v + "' (seconds expected)";
      return res;
    }
  }
  if (const char* v = std::getenv("HVD_BIND_TO"); v != nullptr && *v != '\0') {
    if (!ParseBindMode(v, &o.bind_to)) {
      res.error = std::string("bad HVD_BIND_TO '") + v + "' (none, core or auto)";
      return res;
    }
  }
  o.force_ssh = Truthy(std::getenv("HVD_LAUNCHER_FORCE_SSH"));
  if (const char* v = std::getenv("HVD_LAUNCHER_SSH"); v != nullptr && *v != '\0') o.ssh_program = v;
  if (const char* v = std::getenv("HVD_LAUNCHER_MPIRUN"); v != nullptr && *v != '\0') o.mpirun_program = v;
  if (const char* v = std::getenv("HVD_LAUNCHER_SSH_ARGS"); v != nullptr) {
    std::stringstream ss(v);
    std::string w;
    while (ss >> w) o.ssh_extra_args.push_back(w);
  }

  auto positive_int = [](const char* what, int* out, long hi = 1000000) {
    return [what, out, hi](const std::string& v) -> std::string {
      if (!ParseInt(v, 1, hi, out)) return std::string("bad ") + what + " '" + v + "'";
      return "";
    };
  };

  std::string transport_from;  // the flag that chose o.transport, for conflicts
  auto set_transport = [&](const std::string& name, const std::string& flag) -> std::string {
    if (!transport_from.empty() && o.transport != name) {
      return flag + " conflicts with " + transport_from + " (one transport per job)";
    }
    o.transport = name;
    transport_from = flag;
    return "";
  };
  auto set_env = [&](const char* name, const std::string& value) {
    o.extra_env.emplace_back(name, value);
    return std::string();
  };
  auto seconds_env = [&](const char* flag, const char* name) {
    return [&, flag, name](const std::string& v) -> std::string {
      double s;
      if (!ParseNonNegative(v, &s)) return std::string("bad ") + flag + " '" + v + "'";
      return set_env(name, v);
    };
  };

  std::vector<Flag> flags = {
      {{"-np", "--num-proc", "-n"}, true,
       [&](const std::string& v) {
         np_given = true;
         return positive_int("-np", &o.np)(v);
       }},
      {{"--min-np", "--min-num-proc"}, true,
       [&](const std::string& v) {
         min_np_given = true;
         return positive_int("--min-np", &o.min_np)(v);
       }},
      {{"--max-np", "--max-num-proc"}, true,
       [&](const std::string& v) {
         max_np_given = true;
         return positive_int("--max-np", &o.max_np)(v);
       }},
      {{"--host-discovery-script"}, true,
       [&](const std::string& v) {
         if (v.empty()) return std::string("empty --host-discovery-script");
         o.discovery_script = v;
         return std::string();
       }},
      {{"--slots", "--slots-per-host"}, true,
       [&](const std::string& v) {
         slots_given = true;
         return positive_int("--slots", &o.default_slots)(v);
       }},
      {{"--elastic-timeout"}, true,
       [&](const std::string& v) {
         if (!ParseNonNegative(v, &o.elastic_timeout_s) || o.elastic_timeout_s <= 0) {
           return "bad --elastic-timeout '" + v + "' (seconds above 0)";
         }
         o.elastic_timeout_text = v;
         elastic_only = "--elastic-timeout";
         return std::string();
       }},
      {{"--blacklist-cooldown-range"}, true,
       [&](const std::string& v) {
         std::string a = v.substr(0, v.find(' ')), b = v.substr(v.find(' ') + 1);
         if (!ParseNonNegative(a, &o.cooldown_min_s) || !ParseNonNegative(b, &o.cooldown_max_s) ||
             o.cooldown_min_s > o.cooldown_max_s) {
           return "bad --blacklist-cooldown-range '" + v + "' (two numbers of seconds, A <= B)";
         }
         o.cooldown_given = true;
         elastic_only = "--blacklist-cooldown-range";
         return std::string();
       },
       true},
      {{"--reset-limit"}, true,
       [&](const std::string& v) {
         elastic_only = "--reset-limit";
         if (!ParseInt(v, 0, 1000000000, &o.reset_limit)) return "bad --reset-limit '" + v + "'";
         return std::string();
       }},
      {{"-H", "--hosts"}, true, [&](const std::string& v) { hosts_arg = v; return std::string(); }},
      {{"--hostfile", "-hostfile"}, true,
       [&](const std::string& v) { hostfile_arg = v; return std::string(); }},
      {{"--transport"}, true,
       [&](const std::string& v) {
         if (!ValidName(v)) return "bad transport name '" + v + "'";
         return set_transport(v, "--transport " + v);
       }},
      {{"--gloo"}, false, [&](const std::string&) { return set_transport("gloo", "--gloo"); }},
      {{"--mpi"}, false, [&](const std::string&) { return set_transport("mpi", "--mpi"); }},
      {{"--network-interface", "--network-interfaces"}, true,
       [&](const std::string& v) {
         if (v.find(',') != std::string::npos) {
           return "hvdrun takes one network interface, got '" + v +
                  "' (hvd sends its data over one interface)";
         }
         uint32_t net = 0;
         int bits = 0;
         if (v.find('/') != std::string::npos ? !ParseCidr(v, &net, &bits) : !ValidName(v)) {
           return "bad network interface '" + v + "' (a name such as eth0, or an IPv4 CIDR such as 10.0.0.0/24)";
         }
         o.network_interface = v;
         return std::string();
       }},
      {{"--start-timeout"}, true,
       [&](const std::string& v) {
         if (!ParseNonNegative(v, &o.start_timeout_s)) return "bad --start-timeout '" + v + "'";
         o.start_timeout_given = true;
         o.start_timeout_text = v;
         return std::string();
       }},
      {{"--bind-to"}, true,
       [&](const std::string& v) {
         if (!ParseBindMode(v, &o.bind_to)) return "bad --bind-to '" + v + "' (none, core or auto)";
         return std::string();
       }},
      {{"--grace-period"}, true,
       [&](const std::string& v) {
         if (!ParseNonNegative(v, &o.grace_s)) return "bad --grace-period '" + v + "'";
         return std::string();
       }},
      {{"--timeline-filename"}, true,
       [&](const std::string& v) {
         if (v.empty()) return std::string("empty --timeline-filename");
         o.timeline_filename = v;
         return std::string();
       }},
      {{"--fusion-threshold-mb"}, true,
       [&](const std::string& v) {
         double mb;
         if (!ParseNonNegative(v, &mb) || mb > 1e6) return "bad --fusion-threshold-mb '" + v + "'";
         o.fusion_threshold_bytes = std::llround(mb * 1048576.0);
         return std::string();
       }},
      {{"--cycle-time-ms"}, true,
       [&](const std::string& v) {
         double ms;
         if (!ParseNonNegative(v, &ms) || ms <= 0) return "bad --cycle-time-ms '" + v + "'";
         o.cycle_time_ms = v;
         return std::string();
       }},
      {{"--timeline-mark-cycles"}, false,
       [&](const std::string&) { return set_env("HVD_TIMELINE_MARK_CYCLES", "1"); }},
      {{"--hierarchical-allreduce", "--hierarchical-allgather"}, false,
       [&](const std::string&) { return set_env("HVD_HIERARCHICAL", "1"); }},
      {{"--autotune"}, false, [&](const std::string&) { return set_env("HVD_AUTOTUNE", "1"); }},
      {{"--autotune-log-file"}, true,
       [&](const std::string& v) {
         if (v.empty()) return std::string("empty --autotune-log-file");
         return set_env("HVD_AUTOTUNE_LOG", v);
       }},
      {{"--log-level"}, true,
       [&](const std::string& v) {
         std::string l = Lower(v);
         if (l == "fatal") l = "error";
         if (l == "warn") l = "warning";
         if (l != "trace" && l != "debug" && l != "info" && l != "warning" && l != "error") {
           return "bad --log-level '" + v + "' (trace, debug, info, warning, error or fatal)";
         }
         return set_env("HVD_LOG_LEVEL", l);
       }},
      {{"--cache-capacity"}, true,
       [&](const std::string& v) {
         int n;
         if (!ParseInt(v, 0, 1L << 20, &n)) return "bad --cache-capacity '" + v + "'";
         return set_env("HVD_CACHE_CAPACITY", std::to_string(n));
       }},
      {{"--disable-cache"}, false,
       [&](const std::string&) { return set_env("HVD_CACHE_CAPACITY", "0"); }},
      {{"--no-stall-check"}, false,
       [&](const std::string&) {
         set_env("HVD_STALL_WARNING_TIME", "0");
         return set_env("HVD_STALL_SHUTDOWN_TIME", "0");
       }},
      {{"--stall-check-warning-time-seconds"}, true,
       seconds_env("--stall-check-warning-time-seconds", "HVD_STALL_WARNING_TIME")},
      {{"--stall-check-shutdown-time-seconds"}, true,
       seconds_env("--stall-check-shutdown-time-seconds", "HVD_STALL_SHUTDOWN_TIME")},
      {{"--gloo-timeout-seconds"}, true,
       [&](const std::string& v) {
         double s;
         if (!ParseNonNegative(v, &s) || s <= 0) return "bad --gloo-timeout-seconds '" + v + "'";
         return set_env("HVD_TRANSPORT_TIMEOUT", v);
       }},
      {{"-p", "--ssh-port"}, true, positive_int("--ssh-port", &o.ssh_port, 65535)},
      {{"-i", "--ssh-identity-file"}, true,
       [&](const std::string& v) {
         if (v.empty()) return std::string("empty --ssh-identity-file");
         o.ssh_identity = v;
         return std::string();
       }},
      {{"--nproc-per-node", "--nproc_per_node"}, true,
       [&](const std::string& v) {
         o.torchrun_style = true;
         return positive_int("--nproc-per-node", &o.nproc_per_node)(v);
       }},
      {{"--nnodes"}, true,
       [&](const std::string& v) {
         o.torchrun_style = true;
         nnodes_given = true;
         return positive_int("--nnodes", &o.nnodes)(v);
       }},
      {{"--node-rank", "--node_rank"}, true,
       [&](const std::string& v) {
         o.torchrun_style = true;
         node_rank_given = true;
         if (!ParseInt(v, 0, 1000000, &o.node_rank)) return "bad --node-rank '" + v + "'";
         return std::string();
       }},
      {{"--master-addr", "--master_addr"}, true,
       [&](const std::string& v) {
         o.torchrun_style = true;
         if (v.empty() || v[0] == '-') return "bad --master-addr '" + v + "'";
         o.master_addr = v;
         return std::string();
       }},
      {{"--master-port", "--master_port"}, true,
       [&](const std::string& v) {
         o.torchrun_style = true;
         master_port_given = true;
         return positive_int("--master-port", &o.master_port, 65535)(v);
       }},
      {{"-x", "--env"}, true,
       [&](const std::string& v) {
         size_t eq = v.find('=');
         std::string name = v.substr(0, eq);
         if (!ValidEnvName(name)) return "bad variable name in -x '" + v + "'";
         if (eq != std::string::npos) {
           o.extra_env.emplace_back(name, v.substr(eq + 1));
         } else {
           const char* cur = std::getenv(name.c_str());
           if (cur == nullptr) return "-x " + name + ": not set in hvdrun's environment";
           o.extra_env.emplace_back(name, cur);
         }
         return std::string();
       }},
      {{"--tag-output"}, false, [&](const std::string&) { o.tag_output = true; return std::string(); }},
      {{"--output-filename"}, true,
       [&](const std::string& v) {
         if (v.empty()) return std::string("empty --output-filename");
         o.output_filename = v;
         return std::string();
       }},
      {{"-v", "--verbose"}, false, [&](const std::string&) { o.verbose = true; return std::string(); }},
  };

  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the command starts here
    if (arg == "-h" || arg == "--help") {
      res.outcome = ParseOutcome::kHelp;
      return res;
    }
    if (arg == "--version") {
      res.outcome = ParseOutcome::kVersion;
      return res;
    }
    if (arg == "--check-build" || arg == "-cb") {
      res.outcome = ParseOutcome::kCheckBuild;
      return res;
    }
    std::string name = arg, value;
    bool has_inline = false;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline = true;
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags) {
      for (const auto& n : f.names) {
        if (n == name) flag = &f;
      }
    }
    if (flag == nullptr) {
      if (const char* why = HorovodrunOnlyFlag(name)) {
        res.error = "horovodrun's " + name + " is not supported by hvdrun: " + why;
      } else {
        res.error = "unknown option '" + arg + "'";
      }
      return res;
    }
    if (flag->two_values) {
      if (has_inline || i + 2 >= argc) {
        res.error = "option " + name + " needs two values (" + name + " A B)";
        return res;
      }
      value = std::string(argv[i + 1]) + " " + argv[i + 2];
      i += 2;
    } else if (flag->takes_value && !has_inline) {
      if (i + 1 >= argc) {
        res.error = "option " + name + " needs a value";
        return res;
      }
      value = argv[++i];
    } else if (!flag->takes_value && has_inline) {
      res.error = "option " + name + " takes no value";
      return res;
    }
    std::string err = flag->apply(value);
    if (!err.empty()) {
      res.error = err;
      return res;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);

  // Consistency.
  if (o.command.empty()) {
    res.error = "no command given";
    return res;
  }
  if (!hosts_arg.empty() && !hostfile_arg.empty()) {
    res.error = "-H and --hostfile cannot be used together";
    return res;
  }
  if (!hosts_arg.empty()) {
    auto h = ParseHostList(hosts_arg);
    if (!h.ok()) {
      res.error = h.status().message();
      return res;
    }
    o.hosts = std::move(h).value();
    o.hosts_given = true;
  } else if (!hostfile_arg.empty()) {
    auto h = ParseHostfile(hostfile_arg);
    if (!h.ok()) {
      res.error = h.status().message();
      return res;
    }
    o.hosts = std::move(h).value();
    o.hosts_given = true;
  }

  o.elastic = min_np_given || max_np_given || !o.discovery_script.empty();
  if (slots_given && o.discovery_script.empty()) elastic_only = "--slots";
  if (!o.elastic && !elastic_only.empty()) {
    res.error = elastic_only + " is for elastic jobs (--min-np, --max-np or --host-discovery-script)";
    return res;
  }
  if (!o.output_filename.empty() && (o.elastic || o.transport == "mpi")) {
    res.error = std::string("--output-filename is not supported with ") +
                (o.elastic ? "an elastic job (its ranks change with every reset)"
                           : "--transport mpi (mpirun starts the ranks: give mpirun's own "
                             "--output-filename through mpirun directly)");
    return res;
  }
  if (o.elastic) {
    std::string err = ResolveElastic(o, np_given, min_np_given, max_np_given);
    if (!err.empty()) {
      res.error = err;
      return res;
    }
    res.outcome = ParseOutcome::kRun;
    return res;
  }

  if (o.torchrun_style) {
    if (o.hosts_given) {
      res.error = "-H/--hostfile cannot be combined with torchrun-style options";
      return res;
    }
    if (o.nproc_per_node == 0) {
      if (np_given && o.nnodes == 1) {
        o.nproc_per_node = o.np;
      } else {
        res.error = "--nproc-per-node is required with torchrun-style options";
        return res;
      }
    }
    if (o.node_rank >= o.nnodes) {
      res.error = "--node-rank " + std::to_string(o.node_rank) + " must be below --nnodes " +
                  std::to_string(o.nnodes);
      return res;
    }
    if (np_given && o.np != o.nproc_per_node * o.nnodes) {
      res.error = "-np " + std::to_string(o.np) + " differs from --nnodes x --nproc-per-node (" +
                  std::to_string(o.nproc_per_node * o.nnodes) + ")";
      return res;
    }
    o.np = o.nproc_per_node * o.nnodes;
    if (o.nnodes > 1) {
      if (o.master_addr.empty()) {
        res.error = "--master-addr is required when --nnodes is above 1";
        return res;
      }
      if (!master_port_given) o.master_port = 29500;
      const char* secret = std::getenv("HVD_SECRET");
      std::string s = secret ? secret : "";
      bool hex = s.size() == 64;
      for (char c : s) hex = hex && std::strchr("0123456789abcdefABCDEF", c) != nullptr;
      if (!hex) {
        res.error = "with --nnodes above 1 every node needs the same HVD_SECRET (64 hex digits) "
                    "in its environment, e.g. from: openssl rand -hex 32";
        return res;
      }
    }
    (void)nnodes_given;
    (void)node_rank_given;
  } else {
    if (!np_given) {
      if (!o.hosts_given) {
        res.error = "-np is required (or -H/--hostfile to take it from the slots)";
        return res;
      }
      long total = 0;
      for (const auto& h : o.hosts) total += h.slots;
      o.np = static_cast<int>(total);
    }
    if (!o.hosts_given) o.hosts = {{"localhost", o.np}};
  }
  res.outcome = ParseOutcome::kRun;
  return res;
}

}  // namespace hvd::launcher
