// One hvdrun job: the rendezvous store, the ranks, their output, and the
// rules for stopping: the first failure (or a signal to hvdrun, or a start
// timeout) stops every rank, SIGTERM then SIGKILL after the grace period.
#pragma once

#include "launcher/hosts.h"
#include "launcher/options.h"

namespace hvd::launcher {

// Runs the job to its end and returns hvdrun's exit code. Returns 2 (after a
// message) for configuration problems found only now, such as an unknown
// network interface.
int RunJob(const Options& opts, const Plan& plan);

}  // namespace hvd::launcher
