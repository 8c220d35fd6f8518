// hvdrun --transport mpi: the job is started by mpirun instead of by hvdrun.
// MPI forms the job itself (no rendezvous store), so hvdrun translates its
// options into an mpirun command line and runs it; the job's exit status is
// mpirun's. See docs/mpi.md.
//
// The start timeout. A rank that never calls hvd_init leaves the others
// blocked in MPI_Init_thread, where no timeout of the library's reaches. So
// hvdrun enforces it itself: it serves a small store of its own, passes its
// address and secret to the ranks (HVD_START_REPORT_ADDR and, by name only,
// HVD_START_REPORT_SECRET), and each rank reports there when hvd_init begins
// and when its transport is up (core/observability/start_report.h). hvdrun runs mpirun as
// its child, in hvdrun's process group (so the terminal's signals reach both,
// as when hvdrun replaced itself with mpirun), forwards the signals sent to
// hvdrun alone, and when the start timeout passes with ranks not up it names
// them ("ranks [2] did not start within 5 s"), stops mpirun (SIGTERM, then
// SIGKILL after the grace period) and exits 1. With --start-timeout 0 it
// replaces itself with mpirun, as before.
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
  bool report_start = false;            // pass HVD_START_REPORT_* (see above)
  // RDMA devices of this host (/sys/class/infiniband): where there are any,
  // hvdrun leaves UCX_NET_DEVICES to the user (see UcxNetDevices).
  std::vector<std::string> rdma_devices;
};

// The mpirun command line (argv[0] is the mpirun program), or an error text
// for options that cannot be passed on (torchrun-style launch).
struct MpirunCommand {
  std::vector<std::string> argv;
  std::string error;
  std::string ucx_note;  // what was done about UCX_NET_DEVICES, and why (for -v)
};
MpirunCommand BuildMpirunCommand(const Options& o, const MpirunHost& host);

// The environment variables a delegated job must not inherit: the topology
// and rendezvous of some other job (hvdrun's and torchrun's variables), and
// another hvdrun's start-report store.
bool IsForeignJobVariable(const std::string& name);

// "ranks [2] did not start within 5 s ..." for a start timeout, or "" when
// every rank is up. started[r]/ready[r]: what rank r reported; where[r]: its
// "host pid" (for ranks that started).
std::string StartTimeoutMessage(const std::vector<bool>& started, const std::vector<bool>& ready,
                                const std::vector<std::string>& where, double timeout_s);

// Physical cores in this process's CPU affinity set (at least 1).
int UsableCores();

// Builds the command and runs it (see above). Returns the job's exit status:
// mpirun's (128 + signal when it was killed by one), 1 after a start
// timeout, 2 after a usage error, 127 when mpirun cannot be executed.
int RunWithMpirun(const Options& o);

}  // namespace hvd::launcher
