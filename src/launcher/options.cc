#include "launcher/options.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "launcher/option_table.h"

namespace hvd::launcher {
namespace {

bool Truthy(const char* v) {
  if (v == nullptr) return false;
  std::string s = v;
  return s == "1" || s == "true" || s == "yes" || s == "on" || s == "TRUE" || s == "YES";
}

// The value of a variable that is set and not empty, else nullptr.
const char* NonEmptyEnv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Defaults from hvdrun's own environment, before the flags override them.
// Returns an error text, empty on success.
std::string ReadEnvironmentDefaults(Options& o) {
  if (const char* v = NonEmptyEnv("HVD_START_TIMEOUT")) {
    if (!ParseNonNegative(v, &o.start_timeout_s)) {
      return std::string("bad HVD_START_TIMEOUT '") + v + "' (seconds expected)";
    }
    o.start_timeout_given = true;
    o.start_timeout_text = v;
  }
  if (const char* v = NonEmptyEnv("HVD_ELASTIC_TIMEOUT")) {
    if (!ParseNonNegative(v, &o.elastic_timeout_s) || o.elastic_timeout_s <= 0) {
      return std::string("bad HVD_ELASTIC_TIMEOUT '") + v + "' (seconds above 0 expected)";
    }
    o.elastic_timeout_text = v;
  }
  if (const char* v = NonEmptyEnv("HVD_LAUNCHER_GRACE")) {
    if (!ParseNonNegative(v, &o.grace_s)) {
      return std::string("bad HVD_LAUNCHER_GRACE '") + v + "' (seconds expected)";
    }
  }
  if (const char* v = NonEmptyEnv("HVD_BIND_TO")) {
    if (!ParseBindMode(v, &o.bind_to)) {
      return std::string("bad HVD_BIND_TO '") + v + "' (none, core or auto)";
    }
  }
  o.force_ssh = Truthy(std::getenv("HVD_LAUNCHER_FORCE_SSH"));
  if (const char* v = NonEmptyEnv("HVD_LAUNCHER_SSH")) o.ssh_program = v;
  if (const char* v = NonEmptyEnv("HVD_LAUNCHER_MPIRUN")) o.mpirun_program = v;
  if (const char* v = std::getenv("HVD_LAUNCHER_SSH_ARGS"); v != nullptr) {
    std::stringstream ss(v);
    std::string w;
    while (ss >> w) o.ssh_extra_args.push_back(w);
  }
  return "";
}

// Walks argv[1..] over the table of options up to the command (after "--" or
// at the first word that is not an option), which it stores in o.command.
// Returns an error text, empty on success; s.stop is set for --help & co.
std::string WalkArguments(int argc, char** argv, ParseState& s) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the command starts here
    std::string name = arg, value;
    bool has_inline = false;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline = true;
    }
    const OptionRow* row = FindOption(name);
    if (row != nullptr && row->arity == Arity::kStop && has_inline) row = nullptr;
    if (row == nullptr) {
      if (const char* why = HorovodrunOnlyFlag(name)) {
        return "horovodrun's " + name + " is not supported by hvdrun: " + why;
      }
      return "unknown option '" + arg + "'";
    }
    if (row->arity == Arity::kTwo) {
      if (has_inline || i + 2 >= argc) return "option " + name + " needs two values (" + name + " A B)";
      value = std::string(argv[i + 1]) + " " + argv[i + 2];
      i += 2;
    } else if (row->arity == Arity::kOne && !has_inline) {
      if (i + 1 >= argc) return "option " + name + " needs a value";
      value = argv[++i];
    } else if (row->arity == Arity::kNone && has_inline) {
      return "option " + name + " takes no value";
    }
    std::string err = row->apply(s, *row, value);
    if (!err.empty() || s.stop) return err;
  }
  for (; i < argc; ++i) s.o.command.push_back(argv[i]);
  return "";
}

// -H or --hostfile into o.hosts. Returns an error text, empty on success.
std::string ResolveHosts(ParseState& s) {
  Options& o = s.o;
  if (!s.hosts_arg.empty() && !s.hostfile_arg.empty()) {
    return "-H and --hostfile cannot be used together";
  }
  if (s.hosts_arg.empty() && s.hostfile_arg.empty() && o.discovery_script.empty()) {
    std::string variable;
    s.hostfile_arg = HostfileFromEnvironment(&variable);  // an MPI Operator launcher pod's
    // An elastic job in such a pod: the operator's discover_hosts.sh beside
    // that hostfile, which it rewrites as workers come and go.
    const std::string script = DiscoveryScriptBeside(s.hostfile_arg);
    if ((s.min_np_given || s.max_np_given) && !script.empty()) {
      o.discovery_script = script;
      o.discovery_origin = "beside " + variable + "'s hostfile";
      s.hostfile_arg.clear();
    }
  }
  if (s.hosts_arg.empty() && s.hostfile_arg.empty()) return "";
  auto h = !s.hosts_arg.empty() ? ParseHostList(s.hosts_arg) : ParseHostfile(s.hostfile_arg);
  if (!h.ok()) return h.status().message();
  o.hosts = std::move(h).value();
  o.hosts_given = true;
  return "";
}

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

// A torchrun-style launch's consistency and defaults. Returns an error text,
// empty on success.
std::string ResolveTorchrun(ParseState& s) {
  Options& o = s.o;
  if (o.hosts_given) return "-H/--hostfile cannot be combined with torchrun-style options";
  if (o.nproc_per_node == 0) {
    if (s.np_given && o.nnodes == 1) {
      o.nproc_per_node = o.np;
    } else {
      return "--nproc-per-node is required with torchrun-style options";
    }
  }
  if (o.node_rank >= o.nnodes) {
    return "--node-rank " + std::to_string(o.node_rank) + " must be below --nnodes " +
           std::to_string(o.nnodes);
  }
  if (s.np_given && o.np != o.nproc_per_node * o.nnodes) {
    return "-np " + std::to_string(o.np) + " differs from --nnodes x --nproc-per-node (" +
           std::to_string(o.nproc_per_node * o.nnodes) + ")";
  }
  o.np = o.nproc_per_node * o.nnodes;
  if (o.nnodes > 1) {
    if (o.master_addr.empty()) return "--master-addr is required when --nnodes is above 1";
    if (!s.master_port_given) o.master_port = 29500;
    const char* secret = std::getenv("HVD_SECRET");
    std::string key = secret ? secret : "";
    bool hex = key.size() == 64;
    for (char c : key) hex = hex && std::strchr("0123456789abcdefABCDEF", c) != nullptr;
    if (!hex) {
      return "with --nnodes above 1 every node needs the same HVD_SECRET (64 hex digits) "
             "in its environment, e.g. from: openssl rand -hex 32";
    }
  }
  return "";
}

// The options' consistency once every flag is read. Returns an error text,
// empty on success.
std::string Resolve(ParseState& s) {
  Options& o = s.o;
  if (o.command.empty()) return "no command given";
  std::string err = ResolveHosts(s);
  if (!err.empty()) return err;

  o.elastic = s.min_np_given || s.max_np_given || !o.discovery_script.empty();
  if (s.slots_given && o.discovery_script.empty()) s.elastic_only = "--slots";
  if (!o.elastic && !s.elastic_only.empty()) {
    return s.elastic_only + " is for elastic jobs (--min-np, --max-np or --host-discovery-script)";
  }
  if (!o.output_filename.empty() && (o.elastic || o.transport == "mpi")) {
    return std::string("--output-filename is not supported with ") +
           (o.elastic ? "an elastic job (its ranks change with every reset)"
                      : "--transport mpi (mpirun starts the ranks: give mpirun's own "
                        "--output-filename through mpirun directly)");
  }
  if (o.elastic) return ResolveElastic(o, s.np_given, s.min_np_given, s.max_np_given);
  if (o.torchrun_style) return ResolveTorchrun(s);
  if (!s.np_given) {
    if (!o.hosts_given) return "-np is required (or -H/--hostfile to take it from the slots)";
    long total = 0;
    for (const auto& h : o.hosts) total += h.slots;
    o.np = static_cast<int>(total);
  }
  if (!o.hosts_given) o.hosts = {{"localhost", o.np}};
  return "";
}

}  // namespace

ParseResult ParseArgs(int argc, char** argv) {
  ParseResult res;
  ParseState s(res.options);
  res.error = ReadEnvironmentDefaults(res.options);
  if (res.error.empty()) res.error = WalkArguments(argc, argv, s);
  if (res.error.empty() && s.stop) {
    res.outcome = *s.stop;
    return res;
  }
  if (res.error.empty()) res.error = Resolve(s);
  if (res.error.empty()) res.outcome = ParseOutcome::kRun;
  return res;
}

}  // namespace hvd::launcher
