// Starting one child process: its own process group, pipes for its output,
// and a clear error when the program cannot be executed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace hvd::launcher {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// After fork: the errno a child wrote to the close-on-exec pipe `fd` when its
// exec failed, or 0 at end of file (the exec succeeded).
int ReadExecErrno(int fd);

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> envp;  // "NAME=value", the child's whole environment
  bool stdin_pipe = false;        // else /dev/null
  // Non-empty: the child is bound to these CPUs (sched_setaffinity before
  // exec). Should that fail, the child says so on its stderr and runs
  // with hvdrun's own affinity.
  std::vector<int> cpus;
};

struct Spawned {
  pid_t pid = -1;        // also its process group id
  Fd stdin_w;            // when stdin_pipe
  Fd stdout_r, stderr_r; // non-blocking read ends
  int exec_errno = 0;    // set when the program could not be executed (the
                         // child then exits 127)
};

// Forks and execs. The child: gets its own process group, SIGKILL when hvdrun
// dies (PR_SET_PDEATHSIG), default signal dispositions and an empty signal
// mask, no file descriptors but 0/1/2, and the CPU affinity of req.cpus. All
// allocation happens before fork, so this is safe while other threads (the
// store server) run.
Result<Spawned> Spawn(const SpawnRequest& req);

}  // namespace hvd::launcher
