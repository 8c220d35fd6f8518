// hvdrun --flight-recorder DIR: every rank records into DIR
// (HVD_FLIGHT_RECORDER_DIR); when the job fails or is signalled, hvdrun asks
// the local ranks still running for their record (SIGUSR1) before it stops
// them, and afterwards copies each remote rank's file from its host (ssh)
// into DIR. docs/flight-recorder.md.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/remote.h"

namespace hvd::launcher {

struct RecordSource {
  int rank = 0;
  std::string host;
  bool remote = false;
  pid_t pid = -1;  // a local rank's process
  bool running = false;
  int ssh_stdin = -1;  // a remote rank's ssh input (its host's watcher reads it), -1: none
};

// DIR/rank-<r>.json.
std::string RecordPath(const std::string& dir, int rank);

// SIGUSR1 (then SIGCONT, so that a stopped rank can answer once it runs) to
// every rank still running: a local one directly, a remote one through the
// watcher at the other end of its ssh (remote.h); then a wait of at most
// wait_s for the local ranks' files, the whole wait_s where a remote rank was
// asked (its file is not seen from here). Returns how many local ranks
// answered.
int RequestFlightRecords(const std::string& dir, const std::vector<RecordSource>& ranks,
                         double wait_s);

// Copies each remote rank's file from its host (ssh as `ssh` says, `cat` of
// the same path there) into dir, where dir does not already hold one
// written since `since` (a shared file system). Each copy is bounded by
// timeout_s. Returns the lines to log (what could not be copied, and why).
std::vector<std::string> CollectFlightRecords(const std::string& dir,
                                              const std::vector<RecordSource>& ranks,
                                              const RemoteSpec& ssh,
                                              std::chrono::system_clock::time_point since,
                                              double timeout_s);

}  // namespace hvd::launcher
