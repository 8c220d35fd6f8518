// What every hvdrun job has in common, whatever decides its membership: the
// rendezvous store, signal handling, starting children (locally or over ssh)
// with their output forwarded, reaping them, and stopping them (SIGTERM, then
// SIGKILL to the process group after the grace period).
//
// A job (job.cc: fixed ranks; elastic.cc: workers that come and go) derives
// from Supervisor, owns its children (each holds a Child), and decides what
// an exit means (OnExit) and what else happens every turn of the loop (OnTurn).
// Everything runs on one thread: the loop polls the children's output and the
// signal pipe, at most MaxWaitMs() at a time.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "launcher/cpu_binding.h"
#include "launcher/options.h"
#include "launcher/output.h"
#include "launcher/process.h"
#include "launcher/remote.h"
#include "rendezvous/store.h"

namespace hvd::launcher {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t);

// "15 (SIGTERM)".
std::string DescribeSignal(int sig);

// "3", "0.5": seconds as given in messages.
std::string FormatSeconds(double s);

// hvdrun's own message: "hvdrun: <line>" on stderr (after ending a child's
// open line there while a job runs).
void Log(const std::string& line);

// A process started by hvdrun.
struct Child {
  std::string host;
  bool remote = false;       // started through ssh
  std::string who;           // in messages: "rank 3 (host a)"
  pid_t pid = -1;            // also its process group
  bool started = false;
  bool running = false;
  bool ready = false;        // reached the store (for ssh failure messages)
  // A remote child: its ssh brought the remote script's start marker (the
  // login completed and the script runs); the marker is taken out of its
  // stderr by `marker`.
  bool remote_started = false;
  StartMarkerFilter marker;
  bool exec_failed = false;  // the program could not be executed (exec_errno says why)
  int exec_errno = 0;
  Fd out_r, err_r, stdin_w;
  std::unique_ptr<LineStream> out, err;
  std::vector<int> cpus;     // a local child's CPU binding (--bind-to); empty: none
  // A remote child's place among its host's ranks, for --bind-to there
  // (hvdrun --bind-exec): bind_size 0: not bound.
  int bind_rank = 0, bind_size = 0;
  bool capture_out = false;  // stdout kept in `captured` instead of forwarded
  std::string captured;
  std::string err_tail;      // a remote child's last stderr bytes: ssh's own message, if it failed
  // --output-filename: the folder for this child's copies of its output
  // ("" none), and the files, opened (truncated) at each spawn.
  std::string output_dir;
  Fd out_file, err_file;
  // Stopped on its own (StopChild): SIGKILL to its group at kill_at.
  bool stop_requested = false;
  bool kill_sent = false;
  Clock::time_point kill_at = Clock::time_point::max();
};

// How a child ended, in words.
struct ExitInfo {
  bool failed = false;
  int code = 0;      // exit code, or 128 + signal
  std::string what;  // "exited with code 3", "killed by signal 9 (SIGKILL)"
};

class Supervisor {
 public:
  explicit Supervisor(const Options& o);
  virtual ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

 protected:
  // Chooses where the store listens, for children on `hosts` (every one that
  // may ever get one, as far as known now; hosts_may_change: more may come
  // later, so the store is reachable from other hosts unless every host
  // named is a loopback one), starts it (not on torchrun-style nodes other
  // than 0), and installs the signal handlers. Returns 0, or an exit code
  // after a message.
  int Setup(const std::vector<std::string>& hosts, bool hosts_may_change);
  // Setup's two halves, for a job that learns its hosts only once it runs.
  int StartStore(const std::vector<std::string>& hosts, bool hosts_may_change);
  int InstallSignals();

  // Whether a child on host is started through ssh.
  bool IsRemote(const std::string& host) const;

  // The variables every child of a job gets: -x and the library settings,
  // HVD_RENDEZVOUS_ADDR, HVD_HOSTNAME (and HOROVOD_HOSTNAME).
  std::vector<std::pair<std::string, std::string>> CommonVars(const std::string& host) const;

  // The CPU lists for n ranks started on this machine under --bind-to, one a
  // rank (CpuBlocks over hvdrun's own affinity); empty: they are not bound
  // (with -v, the first time, says why).
  std::vector<std::vector<int>> LocalCpuBlocks(int n);
  // With -v, once a job: how ranks on remote hosts are bound (or that they
  // are not: no path to this program).
  void NoteRemoteBinding();

  // Starts the job's command as c (c.host, c.remote, c.who set; c.cpus, a
  // local child's binding; c.bind_rank/bind_size, a remote one's), with vars
  // (a later one wins) and HVD_SECRET; `drop` names variables of hvdrun's
  // environment the child must not inherit. tag: its output prefix with
  // --tag-output ("[3]"). Tracks c.
  Status SpawnChild(Child& c, const std::vector<std::pair<std::string, std::string>>& vars,
                    const std::vector<std::string>& drop, const std::string& tag);

  // Starts argv on this host with hvdrun's environment; stdout is captured
  // (c.captured), stderr forwarded with the prefix err_prefix. Tracks c.
  Status SpawnHelper(Child& c, const std::vector<std::string>& argv, const std::string& err_prefix);

  // Stops one child: SIGTERM to its group now (when term), SIGKILL to the
  // group once the grace period is over (grace_s < 0: the option's).
  void StopChild(Child& c, bool term, double grace_s = -1);

  // Stops the job: SIGTERM to every child (unless term_all is false: the
  // caller stopped them as it wanted), SIGKILL after the grace period. The
  // first call's code is the job's exit code.
  void BeginStop(int exit_code, bool term_all = true);
  void KillAll(int sig);

  // Runs until Alive() is false and the children's output is drained.
  void Loop();
  // Without waiting: acts on signals received and reaps children that ended.
  void HandleEvents();

  // The job's exit code once Loop returned (sweeps the groups of a stopped job).
  int Finish();

  // A tracked child ended (wstatus as from waitpid); c.running is already false.
  virtual void OnExit(Child& c, int wstatus) = 0;
  // A failed or signalled job, before its processes get SIGTERM.
  virtual void BeforeStop() {}
  // Once a turn, after output, signals and exits were handled.
  virtual void OnTurn() {}
  // Whether the job goes on: by default, while any child runs.
  virtual bool Alive() const;
  // The longest the loop sleeps between turns.
  virtual int MaxWaitMs() const { return 100; }

  ExitInfo DescribeExit(const Child& c, int wstatus) const;

  const Options& o_;
  // hvdrun's stdout and stderr; declared before anything that writes to them.
  OutputSink out_sink_{1};
  OutputSink err_sink_{2};

  std::unique_ptr<rdv::StoreServer> server_;
  std::string adv_host_;  // the store's advertised host, and its port
  int port_ = 0;
  std::string rdv_addr_;
  std::string secret_;
  std::string cwd_;

  bool stopping_ = false;
  bool killed_ = false;
  int exit_code_ = -1;  // set by the first event that stops the job

 private:
  void Track(Child& c, Spawned&& sp, const std::string& tag, const std::string& err_prefix);
  std::string SshFailure(const Child& c) const;
  void HandleSignals();
  void Reap();
  void ReadOutput(const std::vector<pollfd>& fds, const std::vector<std::pair<Child*, int>>& who);
  void Forward(Child& c, bool is_out, const char* data, size_t n);
  int PollTimeoutMs() const;
  void FlushIdleOutput();
  void KillDue();

  std::vector<Child*> children_;
  std::map<pid_t, Child*> by_pid_;
  std::vector<CpuInfo> usable_cpus_;  // read once, when --bind-to is not none
  bool unbound_noted_ = false, remote_noted_ = false;
  std::string self_path_;  // this program, run on remote hosts to bind their ranks
  Fd sig_r_, sig_w_;
  Clock::time_point kill_deadline_;
};

}  // namespace hvd::launcher
