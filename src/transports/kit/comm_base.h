// What a point-to-point plugin's communicator keeps alike (gloo, ucx): its
// world, limits, logger and store, every rank's host name, the last error
// and the first failure. A plugin's Comm derives from it.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "hvd.h"
#include "errors.h"
#include "peers.h"
#include "settings.h"
#include "store.h"

namespace hvd::kit {

struct CommBase {
  int rank = 0;
  int size = 1;
  double limit_s = 0;       // the limit of waits given no timeout (set_timeout)
  bool peer_limit = false;  // ... and it is the core's peer timeout
  // The core's peer timeout, as last given (0: none yet): a peer that moves
  // no byte for this long, in a transfer too, is silent (silence.h).
  std::atomic<double> peer_s{0};
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  // The store (valid until finalize): a rank whose communicator breaks notes
  // why under "broken/<rank>" before closing its connections, so peers that
  // only see the closing can say what was behind it (BrokenNote).
  StoreCalls store;
  std::vector<std::string> hosts;  // every rank's host name (the core's host table)
  std::string last_error;          // the loop thread's
  Failure failure;                 // any thread: the first failure

  // Takes the world, the transfer limit, the logger, the store and the host names.
  void Adopt(const Settings& s) {
    rank = s.rank;
    size = s.size;
    limit_s = s.timeout_s;
    logger = s.logger;
    log = s.log;
    store = s.store;
    hosts = s.hosts;
  }
  std::string Who(int r, const std::string& addr = std::string()) const {
    return kit::Who(hosts, r, addr);
  }
  void Log(int level, const std::string& msg) const {
    if (log != nullptr) log(logger, level, msg.c_str());
  }
  // The first failure as this call's outcome.
  int Failed() { return failure.Take(&last_error); }
};

}  // namespace hvd::kit
