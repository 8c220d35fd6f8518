// hvdrun's command line and the environment variables it reads: everything
// the launcher is configured by is resolved here, once.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/cpu_binding.h"
#include "launcher/hosts.h"

namespace hvd::launcher {

struct Options {
  int np = 0;                       // 0 = not given
  std::vector<HostSlots> hosts;     // from -H or --hostfile; empty = localhost:np
  bool hosts_given = false;

  std::string transport;            // HVD_TRANSPORT (--transport, --gloo, --mpi)
  std::string network_interface;    // HVD_NETWORK_INTERFACE, and the store's address
  // --transport mpi without --network-interface: the network every remote
  // host is reached in (ReachHosts), for mpirun's btl/oob_tcp_if_include.
  std::string mpi_network;
  std::string timeline_filename;    // HVD_TIMELINE
  std::string flight_recorder;      // HVD_FLIGHT_RECORDER_DIR (absolute); collected there
  std::optional<long long> fusion_threshold_bytes;  // HVD_FUSION_THRESHOLD
  std::optional<std::string> cycle_time_ms;         // HVD_CYCLE_TIME
  double start_timeout_s = 60;      // 0 = no start timeout
  bool start_timeout_given = false; // exported as HVD_START_TIMEOUT when given
  std::string start_timeout_text;
  double grace_s = 5;               // SIGTERM -> SIGKILL delay when stopping
  // CPU binding of the ranks started on this machine (--bind-to, HVD_BIND_TO).
  BindMode bind_to = BindMode::kAuto;

  bool verbose = false;
  // --metrics-port [ADDR:]P: the job's metrics for Prometheus (-1: none);
  // --summary: a summary of them at the job's end.
  int metrics_port = -1;
  std::string metrics_addr = "127.0.0.1";
  bool summary = false;
  bool tag_output = false;
  // --output-filename DIR: each rank's output also goes to
  // DIR/rank.N/{stdout,stderr} (horovodrun's layout).
  std::string output_filename;

  int ssh_port = 0;                 // 0 = ssh's default
  std::string ssh_identity;
  std::string ssh_program = "ssh";  // HVD_LAUNCHER_SSH (tests)
  std::string mpirun_program = "mpirun";  // HVD_LAUNCHER_MPIRUN: for --transport mpi
  std::vector<std::string> ssh_extra_args;  // HVD_LAUNCHER_SSH_ARGS
  bool force_ssh = false;           // HVD_LAUNCHER_FORCE_SSH=1: every host over ssh

  // torchrun-style launch: this hvdrun starts only this node's ranks.
  bool torchrun_style = false;
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;

  // Elastic training (docs/elastic.md): on with --min-np, --max-np or
  // --host-discovery-script. np is then the number of workers to start with.
  bool elastic = false;
  int min_np = 0;
  int max_np = 0;                   // 0 = no cap: every slot the hosts have
  std::string discovery_script;     // "": the hosts of -H/--hostfile (default localhost)
  std::string discovery_origin;     // where hvdrun found the script, "" if given
  int default_slots = 1;            // --slots: for discovery lines without ":N"
  double elastic_timeout_s = 600;   // HVD_ELASTIC_TIMEOUT (--elastic-timeout)
  std::string elastic_timeout_text = "600";
  bool cooldown_given = false;      // --blacklist-cooldown-range; else for good
  double cooldown_min_s = 0, cooldown_max_s = 0;
  int reset_limit = -1;             // -1: no limit

  // -x NAME[=VALUE], and the horovodrun-style flags that only set a library
  // variable (--autotune -> HVD_AUTOTUNE=1, --log-level, --cache-capacity, ...),
  // in command-line order: a later one wins.
  std::vector<std::pair<std::string, std::string>> extra_env;
  std::vector<std::string> command;
};

enum class ParseOutcome { kRun, kHelp, kVersion, kCheckBuild, kUsageError };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::kUsageError;
  Options options;
  std::string error;  // for kUsageError
};

// Parses argv (argv[0] is the program). Reads HVD_START_TIMEOUT, HVD_ELASTIC_TIMEOUT,
// HVD_BIND_TO, HVD_LAUNCHER_GRACE, HVD_LAUNCHER_FORCE_SSH, HVD_LAUNCHER_SSH,
// HVD_LAUNCHER_SSH_ARGS and HVD_LAUNCHER_MPIRUN from the environment as
// defaults.
ParseResult ParseArgs(int argc, char** argv);

// The --help text.
std::string UsageText();

}  // namespace hvd::launcher
