#include "launcher/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hvd::launcher {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

Status MakePipe(Fd* r, Fd* w) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error(HVD_ERR_INTERNAL, std::string("pipe: ") + std::strerror(errno));
  }
  r->reset(p[0]);
  w->reset(p[1]);
  return Status::Ok();
}

// The CPU affinity a child is to get, prepared before fork.
struct Affinity {
  std::vector<unsigned long> bits;  // a cpu_set_t of `size` bytes
  size_t size = 0;
  std::string failed;               // written to the child's stderr if binding fails
  const cpu_set_t* set() const { return reinterpret_cast<const cpu_set_t*>(bits.data()); }
};

// Only async-signal-safe calls from here on: this runs in the forked child.
[[noreturn]] void ChildExec(char* const* argv, char* const* envp, int in_fd, int out_fd,
                            int err_fd, int err_pipe, pid_t parent, int max_fd,
                            const Affinity* aff) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // hvdrun is already gone

  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(127);
  if (aff != nullptr && ::sched_setaffinity(0, aff->size, aff->set()) != 0) {
    ssize_t ignored = ::write(2, aff->failed.data(), aff->failed.size());
    (void)ignored;
  }
  // The exec-error pipe moves to fd 3 (close-on-exec); everything above goes.
  if (err_pipe != 3) {
    if (::dup3(err_pipe, 3, O_CLOEXEC) < 0) ::_exit(127);
  }
  bool closed = false;
#ifdef SYS_close_range
  closed = ::syscall(SYS_close_range, 4u, ~0u, 0u) == 0;
#endif
  if (!closed) {
    for (int fd = 4; fd < max_fd; ++fd) ::close(fd);
  }
  ::execvpe(argv[0], argv, envp);
  int e = errno;
  ssize_t ignored = ::write(3, &e, sizeof(e));
  (void)ignored;
  ::_exit(127);
}

}  // namespace

int ReadExecErrno(int fd) {
  int e = 0;
  ssize_t n;
  do {
    n = ::read(fd, &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(e)) ? e : 0;
}

Result<Spawned> Spawn(const SpawnRequest& req) {
  if (req.argv.empty()) return Status(InvalidArgument("empty command"));
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  Spawned sp;
  Fd in_r, out_w, err_w, errp_r, errp_w;
  if (req.stdin_pipe) {
    HVD_CHECK(MakePipe(&in_r, &sp.stdin_w));
  } else {
    in_r.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_r.valid()) return Status(Error(HVD_ERR_INTERNAL, "cannot open /dev/null"));
  }
  HVD_CHECK(MakePipe(&sp.stdout_r, &out_w));
  HVD_CHECK(MakePipe(&sp.stderr_r, &err_w));
  HVD_CHECK(MakePipe(&errp_r, &errp_w));

  Affinity aff;
  if (!req.cpus.empty()) {
    int top = *std::max_element(req.cpus.begin(), req.cpus.end());
    if (top < 0) return Status(InvalidArgument("negative CPU number"));
    size_t words = static_cast<size_t>(top) / (8 * sizeof(unsigned long)) + 1;
    aff.bits.assign(words, 0);
    aff.size = words * sizeof(unsigned long);
    for (int cpu : req.cpus) {
      CPU_SET_S(static_cast<size_t>(cpu), aff.size, reinterpret_cast<cpu_set_t*>(aff.bits.data()));
    }
    std::string list;
    for (size_t i = 0; i < req.cpus.size(); ++i) list += (i ? "," : "") + std::to_string(req.cpus[i]);
    aff.failed = "hvdrun: warning: cannot bind this process to CPUs " + list +
                 " (sched_setaffinity failed): it runs unbound\n";
  }

  rlimit rl;
  int max_fd = 65536;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536) {
    max_fd = static_cast<int>(rl.rlim_cur);
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status(Error(HVD_ERR_INTERNAL, std::string("fork: ") + std::strerror(errno)));
  if (pid == 0) {
    ChildExec(argv.data(), envp.data(), in_r.get(), out_w.get(), err_w.get(), errp_w.get(), parent,
              max_fd, req.cpus.empty() ? nullptr : &aff);
  }
  // Both sides set the group, so it exists whichever runs first.
  ::setpgid(pid, pid);
  sp.pid = pid;
  in_r.reset();
  out_w.reset();
  err_w.reset();
  errp_w.reset();

  sp.exec_errno = ReadExecErrno(errp_r.get());

  for (Fd* f : {&sp.stdout_r, &sp.stderr_r}) {
    int fl = ::fcntl(f->get(), F_GETFL);
    ::fcntl(f->get(), F_SETFL, fl | O_NONBLOCK);
  }
  return Result<Spawned>(std::move(sp));
}

}  // namespace hvd::launcher
