// hvdrun --transport mpi: the job is started by mpirun instead of by hvdrun.
// MPI forms the job itself (no rendezvous store), so hvdrun only translates
// its options into an mpirun command line and replaces itself with it; the
// job's exit status is then mpirun's. See docs/mpi.md.
#pragma once

#include <string>
#include <vector>

#include "launcher/options.h"

namespace hvd::launcher {

// What the mpirun command line depends on besides the options.
struct MpirunHost {
  int cores = 1;                        // physical cores hvdrun may use here
  bool root = false;                    // running as root
  std::vector<std::string> environment; // NAME=VALUE, as in environ
};

// The mpirun command line (argv[0] is the mpirun program), or an error text
// for options that cannot be passed on (torchrun-style launch).
struct MpirunCommand {
  std::vector<std::string> argv;
  std::string error;
};
MpirunCommand BuildMpirunCommand(const Options& o, const MpirunHost& host);

// The environment variables a delegated job must not inherit: the topology
// and rendezvous of some other job (hvdrun's and torchrun's variables).
bool IsForeignJobVariable(const std::string& name);

// Physical cores in this process's CPU affinity set (at least 1).
int UsableCores();

// Builds the command and execs it. Returns only on failure: 2 after a usage
// error, 127 when mpirun cannot be executed.
int RunWithMpirun(const Options& o);

}  // namespace hvd::launcher
