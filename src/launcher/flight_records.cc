// hvdrun's side of the flight recorder: asking local ranks for their record
// before a failed job stops, and copying remote ranks' files afterwards.
#include "launcher/flight_records.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/files.h"

namespace hvd::launcher {
namespace {

using SysClock = std::chrono::system_clock;

// Whether path exists and was modified at or after t.
bool WrittenSince(const std::string& path, SysClock::time_point t) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  const auto mtime = SysClock::time_point(std::chrono::duration_cast<SysClock::duration>(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  // File systems keep coarse times: a second's slack.
  return mtime + std::chrono::seconds(1) >= t;
}

// Runs argv with its standard output into out_path; "" if it exited 0 within
// timeout_s, else why not.
std::string RunToFile(const std::vector<std::string>& argv, const std::string& out_path,
                      double timeout_s) {
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return "cannot write " + out_path + ": " + std::strerror(errno);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, 0);
    ::dup2(out, 1);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out);
  if (pid < 0) return std::string("cannot start ssh: ") + std::strerror(errno);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return std::string("waitpid: ") + std::strerror(errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return "ssh did not finish within " + std::to_string(static_cast<int>(timeout_s)) + " s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status) == 1 ? "no file there (the rank wrote none)"
                                    : "ssh exited with code " + std::to_string(WEXITSTATUS(status));
  }
  return "ssh was killed by signal " + std::to_string(WTERMSIG(status));
}

}  // namespace

std::string RecordPath(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".json";
}

int RequestFlightRecords(const std::string& dir, const std::vector<RecordSource>& ranks,
                         double wait_s) {
  const auto asked = SysClock::now();
  std::vector<const RecordSource*> waiting;
  bool remote_asked = false;
  for (const RecordSource& r : ranks) {
    if (r.remote && r.running && r.ssh_stdin >= 0) {
      static const char kAsk[] = "usr1\n";  // remote.cc's watcher
      remote_asked |= ::write(r.ssh_stdin, kAsk, sizeof(kAsk) - 1) == ssize_t{sizeof(kAsk) - 1};
      continue;
    }
    if (r.remote || !r.running || r.pid <= 0) continue;
    // The rank itself, not its process group: a shell around it would die
    // of SIGUSR1's default action.
    if (::kill(r.pid, SIGUSR1) == 0) {
      ::kill(r.pid, SIGCONT);
      waiting.push_back(&r);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long>(wait_s * 1000));
  int answered = 0;
  while ((!waiting.empty() || remote_asked) && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < waiting.size();) {
      if (WrittenSince(RecordPath(dir, waiting[i]->rank), asked)) {
        ++answered;
        waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return answered;
}

std::vector<std::string> CollectFlightRecords(const std::string& dir,
                                              const std::vector<RecordSource>& ranks,
                                              const RemoteSpec& ssh,
                                              SysClock::time_point since, double timeout_s) {
  std::vector<std::string> notes;
  const Status made = MakeDirs(dir);
  if (!made.ok()) return {"flight recorder: " + made.message()};
  for (const RecordSource& r : ranks) {
    const std::string path = RecordPath(dir, r.rank);
    if (!r.remote || WrittenSince(path, since)) continue;  // local, or a shared file system
    RemoteSpec spec = ssh;
    spec.host = r.host;
    std::vector<std::string> argv = SshArgv(spec);
    argv.back() = "exec cat -- " + ShellQuote(path);  // the command, instead of the rank's script
    const std::string tmp = path + ".copy";
    const std::string why = RunToFile(argv, tmp, timeout_s);
    if (why.empty() && ::rename(tmp.c_str(), path.c_str()) == 0) continue;
    ::unlink(tmp.c_str());
    notes.push_back("flight recorder: rank " + std::to_string(r.rank) + "'s record on host " +
                    r.host + " not copied: " + (why.empty() ? std::strerror(errno) : why));
  }
  return notes;
}

}  // namespace hvd::launcher
