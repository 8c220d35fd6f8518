#include "launcher/job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "launcher/output.h"
#include "launcher/process.h"
#include "launcher/remote.h"
#include "rendezvous/store.h"

extern char** environ;

namespace hvd::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ---- signals: a self-pipe read by the poll loop ------------------------------
int g_signal_pipe_w = -1;

void OnSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_signal_pipe_w >= 0) {
    ssize_t ignored = ::write(g_signal_pipe_w, &b, 1);
    (void)ignored;
  }
  errno = saved;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    default: return nullptr;
  }
}

std::string DescribeSignal(int sig) {
  const char* n = SignalName(sig);
  return std::to_string(sig) + (n ? std::string(" (") + n + ")" : std::string());
}

// hvdrun's stderr while a job runs: hvdrun's messages then end a rank's open
// line there first (see output.h).
OutputSink* g_log_sink = nullptr;

void Log(const std::string& line) {
  std::string text = "hvdrun: " + line + "\n";
  if (g_log_sink != nullptr) {
    g_log_sink->WriteLines(text);
  } else {
    WriteAll(2, text);
  }
}

std::string HostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// ---- readiness through a client, for torchrun-style nodes other than 0 -------
// The store lives on node 0; this node's hvdrun asks it which of its ranks
// have connected. Runs in one background thread so a slow or unreachable
// store never stalls output forwarding. The destructor stops and joins it:
// waits are cut short and a call blocked on a silent store is interrupted,
// so no thread outlives the job (a detached one raced the process's exit
// handlers). The longest the join can take is one connect attempt (1 s).
class RemoteReadiness {
 public:
  RemoteReadiness(std::string host, int port, std::string secret, std::vector<int> ranks)
      : ready_(ranks.size()) {
    for (auto& r : ready_) r = false;
    thread_ = std::thread([this, host = std::move(host), port, secret = std::move(secret),
                           ranks = std::move(ranks)] { Poll(host, port, secret, ranks); });
  }
  ~RemoteReadiness() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
      if (client_) client_->Interrupt();
    }
    cv_.notify_all();
    thread_.join();
  }
  RemoteReadiness(const RemoteReadiness&) = delete;
  RemoteReadiness& operator=(const RemoteReadiness&) = delete;
  bool ready(size_t i) const { return ready_[i]; }

 private:
  // Sleeps up to ms; false once stopping.
  bool Pause(int ms) {
    std::unique_lock<std::mutex> l(mu_);
    return !cv_.wait_for(l, std::chrono::milliseconds(ms), [this] { return stop_; });
  }
  void Poll(const std::string& host, int port, const std::string& secret,
            const std::vector<int>& ranks) {
    std::vector<std::string> keys;
    for (int r : ranks) keys.push_back("ready/" + std::to_string(r));
    std::shared_ptr<rdv::StoreClient> client;
    for (;;) {
      if (!client) {
        auto c = rdv::StoreClient::Connect(host, port, secret, 1.0);
        if (!c.ok()) {
          if (!Pause(250)) return;
          continue;
        }
        client = std::shared_ptr<rdv::StoreClient>(std::move(c).value());
        std::lock_guard<std::mutex> g(mu_);
        if (stop_) return;
        client_ = client;
      }
      auto res = client->Check(keys);
      if (!res.ok()) {
        std::lock_guard<std::mutex> g(mu_);
        client_.reset();
        client.reset();
        if (stop_) return;
        continue;
      }
      bool all = true;
      for (size_t i = 0; i < ranks.size() && i < res->size(); ++i) {
        if ((*res)[i]) ready_[i] = true;
        all = all && ready_[i];
      }
      if (all || !Pause(200)) return;
    }
  }

  std::vector<std::atomic<bool>> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                          // guarded by mu_
  std::shared_ptr<rdv::StoreClient> client_;  // guarded by mu_; the one in use
  std::thread thread_;
};

// ---- the job ---------------------------------------------------------------
struct Rank {
  RankSlot slot;
  std::string host;
  bool remote = false;
  pid_t pid = -1;
  bool started = false;
  bool running = false;
  bool ready = false;
  bool exec_failed = false;
  Fd out_r, err_r, stdin_w;
  std::unique_ptr<LineStream> out, err;
  std::string err_tail;  // a remote rank's last stderr bytes: ssh's own message, if it failed
};

class Job {
 public:
  Job(const Options& o, const Plan& p) : o_(o), plan_(p) {}
  int Run();

 private:
  int Setup();  // 0 = ok, else an exit code
  void SpawnAll();
  Status SpawnRank(Rank& r);
  std::vector<std::pair<std::string, std::string>> RankVars(const Rank& r) const;
  void Loop();
  void HandleSignals();
  void Reap();
  void OnExit(Rank& r, int wstatus);
  std::string SshFailure(const Rank& r) const;
  void ReadOutput(const std::vector<pollfd>& fds, const std::vector<std::pair<Rank*, int>>& who);
  int PollTimeoutMs() const;
  void FlushIdleOutput();
  void UpdateReady();
  void CheckStartTimeout();
  void BeginStop(int exit_code);
  void KillAll(int sig);
  std::string Who(const Rank& r) const {
    return "rank " + std::to_string(r.slot.rank) + " (host " + r.host + ")";
  }

  const Options& o_;
  const Plan& plan_;
  // hvdrun's stdout and stderr; declared before ranks_, whose streams use them.
  OutputSink out_sink_{1};
  OutputSink err_sink_{2};
  std::vector<Rank> ranks_;
  std::map<pid_t, Rank*> by_pid_;

  std::unique_ptr<rdv::StoreServer> server_;
  std::unique_ptr<RemoteReadiness> remote_ready_;
  std::string rdv_addr_;
  std::string secret_;
  std::string cwd_;

  Fd sig_r_, sig_w_;
  Clock::time_point start_time_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
  int exit_code_ = -1;  // set by the first event that stops the job
};

int Job::Setup() {
  char buf[4096];
  cwd_ = ::getcwd(buf, sizeof(buf)) ? buf : "/";

  for (const auto& slot : plan_.ranks) {
    Rank r;
    r.slot = slot;
    r.host = plan_.hosts[slot.host_index].host;
    r.remote = !o_.torchrun_style && (o_.force_ssh || !IsLocalHost(r.host));
    ranks_.push_back(std::move(r));
  }
  bool any_remote = false, all_loopback = true;
  for (const auto& h : plan_.hosts) {
    all_loopback = all_loopback && IsLoopbackHost(h.host);
  }
  for (const auto& r : ranks_) any_remote = any_remote || r.remote;

  if (!o_.network_interface.empty() && !(o_.torchrun_style && o_.nnodes > 1)) {
    auto a = InterfaceAddress(o_.network_interface);
    if (!a.ok()) {
      Log("error: --network-interface: " + a.status().message());
      return 2;
    }
  }

  // Where the store listens, and the address the ranks are given.
  std::string bind_host, adv_host;
  int port = 0;
  if (o_.torchrun_style) {
    port = o_.master_port;
    if (o_.nnodes > 1) {
      bind_host = "";  // every interface: the other nodes reach it at --master-addr
      adv_host = o_.master_addr;
    } else {
      bind_host = adv_host = "127.0.0.1";
    }
  } else if (!any_remote || all_loopback) {
    bind_host = adv_host = "127.0.0.1";
  } else if (!o_.network_interface.empty()) {
    auto a = InterfaceAddress(o_.network_interface);
    bind_host = adv_host = a.value();
    if (IsLoopbackHost(adv_host)) {
      Log("warning: --network-interface " + o_.network_interface + " is a loopback interface (" +
          adv_host + "): ranks on other hosts will not reach the rendezvous store");
    }
  } else {
    // Where the remote hosts are reached, by the routes: a bridge or a
    // second network named first in the interface list cannot mislead it.
    std::vector<std::string> remote;
    for (const auto& r : ranks_) {
      if (r.remote && std::find(remote.begin(), remote.end(), r.host) == remote.end()) remote.push_back(r.host);
    }
    auto reach = ReachHosts(remote);
    if (reach.ok()) {
      bind_host = adv_host = reach->address;
      if (o_.verbose) Log("store interface: " + reach->ifname + " (" + adv_host + "): reaching " + reach->summary);
    } else {
      std::string ifname;
      auto a = DefaultAddress(&ifname);
      if (!a.ok()) {
        Log("error: " + a.status().message() + " (" + reach.status().message() + ")");
        return 1;
      }
      bind_host = adv_host = a.value();
      Log(std::string(o_.verbose ? "" : "warning: ") + "store interface: " + ifname + " (" + adv_host +
          "), the first that is up and not a bridge: " + reach.status().message() +
          "; name the one to use with --network-interface (a name or a CIDR)");
    }
  }

  if (o_.torchrun_style && o_.nnodes > 1) {
    secret_ = std::getenv("HVD_SECRET");  // checked by ParseArgs
  } else {
    secret_ = rdv::NewSecret();
  }

  if (!o_.torchrun_style || o_.node_rank == 0) {
    auto s = rdv::StoreServer::Start(bind_host, port, secret_);
    if (!s.ok()) {
      Log("error: cannot start the rendezvous store on " +
          JoinHostPort(bind_host.empty() ? "0.0.0.0" : bind_host, port) + ": " +
          s.status().message());
      return 1;
    }
    server_ = std::move(s).value();
    port = server_->port();
  }
  rdv_addr_ = JoinHostPort(adv_host, port);
  if (!server_) {
    std::vector<int> ids;
    for (const auto& r : ranks_) ids.push_back(r.slot.rank);
    remote_ready_ = std::make_unique<RemoteReadiness>(adv_host, port, secret_, ids);
  }

  if (o_.verbose) {
    if (o_.torchrun_style) {
      Log("plan: node " + std::to_string(o_.node_rank) + " of " + std::to_string(o_.nnodes) +
          ", ranks " + std::to_string(ranks_.front().slot.rank) + "-" +
          std::to_string(ranks_.back().slot.rank) + " of " + std::to_string(plan_.size));
    } else {
      Log("plan: " + std::to_string(plan_.size) + " rank(s) on " +
          std::to_string(plan_.hosts.size()) + " host(s)");
      int first = 0;
      for (size_t h = 0; h < plan_.hosts.size(); ++h) {
        int n = plan_.hosts[h].slots;
        bool remote = ranks_[first].remote;
        Log("  " + plan_.hosts[h].host + (remote ? " (ssh)" : " (local)") + ": ranks " +
            std::to_string(first) + (n > 1 ? "-" + std::to_string(first + n - 1) : ""));
        first += n;
      }
    }
    Log(std::string("rendezvous store: ") + (server_ ? "serving at " : "on node 0 at ") + rdv_addr_);
  }

  // Signals: handlers only write to the self-pipe; the loop does the work.
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    Log(std::string("error: pipe: ") + std::strerror(errno));
    return 1;
  }
  sig_r_.reset(p[0]);
  sig_w_.reset(p[1]);
  g_signal_pipe_w = sig_w_.get();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(s, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return 0;
}

std::vector<std::pair<std::string, std::string>> Job::RankVars(const Rank& r) const {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& kv : o_.extra_env) v.push_back(kv);
  auto add = [&](const char* k, const std::string& val) { v.emplace_back(k, val); };
  const RankSlot& s = r.slot;
  add("HVD_RANK", std::to_string(s.rank));
  add("HVD_SIZE", std::to_string(plan_.size));
  add("HVD_LOCAL_RANK", std::to_string(s.local_rank));
  add("HVD_LOCAL_SIZE", std::to_string(s.local_size));
  add("HVD_CROSS_RANK", std::to_string(s.cross_rank));
  add("HVD_CROSS_SIZE", std::to_string(s.cross_size));
  add("HVD_RENDEZVOUS_ADDR", rdv_addr_);
  add("HVD_HOSTNAME", o_.torchrun_style ? HostName() : r.host);
  add("RANK", std::to_string(s.rank));
  add("WORLD_SIZE", std::to_string(plan_.size));
  add("LOCAL_RANK", std::to_string(s.local_rank));
  add("LOCAL_WORLD_SIZE", std::to_string(s.local_size));
  // Horovod's names for the same numbers (horovodrun's Gloo launch sets
  // them), for scripts and tools that read them.
  add("HOROVOD_RANK", std::to_string(s.rank));
  add("HOROVOD_SIZE", std::to_string(plan_.size));
  add("HOROVOD_LOCAL_RANK", std::to_string(s.local_rank));
  add("HOROVOD_LOCAL_SIZE", std::to_string(s.local_size));
  add("HOROVOD_CROSS_RANK", std::to_string(s.cross_rank));
  add("HOROVOD_CROSS_SIZE", std::to_string(s.cross_size));
  add("HOROVOD_HOSTNAME", o_.torchrun_style ? HostName() : r.host);
  if (!o_.transport.empty()) add("HVD_TRANSPORT", o_.transport);
  if (!o_.network_interface.empty()) add("HVD_NETWORK_INTERFACE", o_.network_interface);
  if (!o_.timeline_filename.empty()) add("HVD_TIMELINE", o_.timeline_filename);
  if (o_.fusion_threshold_bytes) add("HVD_FUSION_THRESHOLD", std::to_string(*o_.fusion_threshold_bytes));
  if (o_.cycle_time_ms) add("HVD_CYCLE_TIME", *o_.cycle_time_ms);
  // 0 means "no start timeout" to hvdrun; the library wants a positive
  // number, so with 0 it gets none and uses its default.
  if (o_.start_timeout_given && o_.start_timeout_s > 0) add("HVD_START_TIMEOUT", o_.start_timeout_text);
  return v;
}

Status Job::SpawnRank(Rank& r) {
  auto vars = RankVars(r);
  SpawnRequest req;
  std::set<std::string> ours;  // set here: never inherited
  for (const auto& kv : vars) ours.insert(kv.first);
  if (o_.start_timeout_s <= 0) ours.insert("HVD_START_TIMEOUT");  // see RankVars

  if (!r.remote) {
    ours.insert("HVD_SECRET");
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      std::string name = entry.substr(0, entry.find('='));
      if (!ours.count(name)) req.envp.push_back(entry);
    }
    // Our variables replace inherited ones; among ours, the launcher's own
    // win over -x (they come later in vars).
    std::map<std::string, std::string> last;
    for (const auto& kv : vars) last[kv.first] = kv.second;
    for (const auto& kv : last) req.envp.push_back(kv.first + "=" + kv.second);
    req.envp.push_back("HVD_SECRET=" + secret_);
    req.argv = o_.command;
  } else {
    RemoteSpec spec;
    spec.host = r.host;
    spec.port = o_.ssh_port;
    spec.identity = o_.ssh_identity;
    spec.ssh_program = o_.ssh_program;
    spec.extra_args = o_.ssh_extra_args;
    spec.cwd = cwd_;
    spec.command = o_.command;
    spec.grace_s = o_.grace_s;
    spec.connect_timeout_s = o_.start_timeout_s;
    // hvdrun's own HVD_* settings travel too (HVD_LOG_LEVEL and the like).
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      size_t eq = entry.find('=');
      if (eq == std::string::npos) continue;
      std::string name = entry.substr(0, eq);
      if (name.rfind("HVD_", 0) != 0 || name.rfind("HVD_LAUNCHER_", 0) == 0 ||
          name == "HVD_SECRET" || ours.count(name)) {
        continue;
      }
      env[name] = entry.substr(eq + 1);
    }
    for (const auto& kv : env) spec.env.push_back(kv);
    for (const auto& kv : vars) spec.env.push_back(kv);
    req.argv = SshArgv(spec);
    req.stdin_pipe = true;
    for (char** e = environ; *e != nullptr; ++e) req.envp.push_back(*e);
  }

  HVD_ASSIGN_OR_RETURN(Spawned sp, Spawn(req));
  r.pid = sp.pid;
  r.started = r.running = true;
  by_pid_[r.pid] = &r;
  r.out_r = std::move(sp.stdout_r);
  r.err_r = std::move(sp.stderr_r);
  std::string tag = "[" + std::to_string(r.slot.rank) + "]";
  r.out = std::make_unique<LineStream>(&out_sink_, o_.tag_output ? tag + "<stdout>: " : "");
  r.err = std::make_unique<LineStream>(&err_sink_, o_.tag_output ? tag + "<stderr>: " : "");
  if (sp.exec_errno != 0) {
    r.exec_failed = true;
    Log(Who(r) + ": cannot execute '" + req.argv[0] + "': " + std::strerror(sp.exec_errno));
  }
  if (r.remote) {
    r.stdin_w = std::move(sp.stdin_w);
    // The secret goes as the first line of ssh's input, never on a command line.
    if (!WriteAll(r.stdin_w.get(), secret_ + "\n")) {
      Log(Who(r) + ": could not hand the secret to ssh");
    }
  }
  if (o_.verbose) {
    // A remote rank: only ssh has started here; "connected" follows once
    // the rank itself reaches the store.
    Log(Who(r) + (r.remote ? " ssh client started, pid " : " started, pid ") + std::to_string(r.pid));
  }
  return Status::Ok();
}

void Job::SpawnAll() {
  for (auto& r : ranks_) {
    HandleSignals();
    Reap();
    if (stopping_) return;
    Status st = SpawnRank(r);
    if (!st.ok()) {
      Log("error: cannot start " + Who(r) + ": " + st.message());
      BeginStop(1);
      return;
    }
  }
}

void Job::KillAll(int sig) {
  for (auto& r : ranks_) {
    if (!r.started) continue;
    // The group outlives its leader while the leader's children live on, so
    // ranks that already exited get the signal too.
    if (::killpg(r.pid, sig) != 0 && r.running) ::kill(r.pid, sig);
  }
}

void Job::BeginStop(int exit_code) {
  if (exit_code_ < 0) exit_code_ = exit_code;
  if (stopping_) return;
  stopping_ = true;
  bool any = false;
  for (const auto& r : ranks_) any = any || r.running;
  if (any && o_.verbose) Log("stopping the job: SIGTERM to every rank");
  KillAll(SIGTERM);
  kill_deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<long>(o_.grace_s * 1000));
}

void Job::OnExit(Rank& r, int wstatus) {
  r.running = false;
  bool failed;
  int code;
  std::string what;
  if (WIFSIGNALED(wstatus)) {
    failed = true;
    code = 128 + WTERMSIG(wstatus);
    what = "killed by signal " + DescribeSignal(WTERMSIG(wstatus));
  } else {
    code = WEXITSTATUS(wstatus);
    failed = code != 0;
    what = "exited with code " + std::to_string(code);
    if (code == 127 && !r.exec_failed) what += " (command not found?)";
    if (code == 126) what += " (command not executable?)";
    if (code == 255 && r.remote) what += " (" + SshFailure(r) + ")";
  }
  if (failed && !stopping_) {
    Log(Who(r) + " " + what);
    BeginStop(code);
  } else if (o_.verbose || (failed && exit_code_ < 0)) {
    Log(Who(r) + " " + what);
  }
}

// What an ssh that exited 255 (its own failure code) ran into, from the
// message it left on the rank's stderr: the host name does not resolve, no
// sshd listens, the host does not answer, the key is refused, the host key
// does not verify, or the connection was lost once the rank ran.
std::string Job::SshFailure(const Rank& r) const {
  const std::string& t = r.err_tail;
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  const std::string port = o_.ssh_port ? std::to_string(o_.ssh_port) : "22";
  const std::string try_it =
      "; try 'ssh" + (o_.ssh_port ? " -p " + port : std::string()) + " " + r.host + " true'";
  if (has("Could not resolve hostname") || has("Name or service not known") ||
      has("Temporary failure in name resolution")) {
    return "ssh cannot resolve the host name '" + r.host + "': check the name, /etc/hosts or DNS";
  }
  if (has("Connection refused")) {
    return "ssh: nothing listens on " + r.host + " port " + port +
           " (connection refused): is sshd running there, on that port?" + try_it;
  }
  if (has("Permission denied")) {
    return "ssh to " + r.host +
           " was refused: key-based login failed (hvdrun runs ssh with BatchMode=yes, so no "
           "password is asked); authorise this user's key there, or give one with -i" + try_it;
  }
  if (has("Host key verification failed") || has("REMOTE HOST IDENTIFICATION HAS CHANGED")) {
    return "ssh to " + r.host + ": host key verification failed (its key changed, or is unknown "
           "and not accepted); fix ~/.ssh/known_hosts" + try_it;
  }
  if (has("Connection timed out") || has("No route to host") || has("Network is unreachable") ||
      has("Operation timed out")) {
    return "ssh: " + r.host + " did not answer (" +
           (has("No route to host") ? std::string("no route to host")
            : has("Network is unreachable") ? std::string("network unreachable")
                                            : std::string("connection timed out")) +
           "): down, or cut off from this host?" + try_it;
  }
  if (r.ready || has("Connection closed by") || has("Connection reset") || has("Broken pipe") ||
      has("not responding")) {
    return "the ssh connection to " + r.host + " was lost" +
           (r.ready ? " after the rank had started" : "") +
           " (the host went down or was cut off, or its sshd ended the session; exit code 255 is "
           "also what a program that exits with 255 gives)";
  }
  return "ssh failed? check that 'ssh" + (o_.ssh_port ? " -p " + port : std::string()) + " " +
         r.host + "' works without a password";
}

void Job::Reap() {
  for (;;) {
    int wstatus = 0;
    pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0) return;
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) continue;
    OnExit(*it->second, wstatus);
  }
}

void Job::HandleSignals() {
  unsigned char buf[64];
  for (;;) {
    ssize_t n = ::read(sig_r_.get(), buf, sizeof(buf));
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      int sig = buf[i];
      if (sig == SIGCHLD) continue;  // Reap() runs every turn
      if (!stopping_) {
        Log(std::string("received ") + SignalName(sig) + ", stopping the job");
        BeginStop(128 + sig);
      } else if (!killed_) {
        // Impatient: a signal during the grace period skips the rest of it.
        Log(std::string("received ") + SignalName(sig) + " while stopping, killing the job");
        kill_deadline_ = Clock::now();
      }
    }
  }
}

void Job::UpdateReady() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (r.ready || !r.started) continue;
    bool now = false;
    if (server_) {
      rdv::Bytes v;
      now = server_->TryGet("ready/" + std::to_string(r.slot.rank), &v);
    } else if (remote_ready_) {
      now = remote_ready_->ready(i);
    }
    if (now) {
      r.ready = true;
      if (o_.verbose) Log(Who(r) + " connected to the rendezvous store");
    }
  }
}

void Job::CheckStartTimeout() {
  if (stopping_ || o_.start_timeout_s <= 0) return;
  if (SecondsSince(start_time_) < o_.start_timeout_s) return;
  std::vector<const Rank*> missing;
  for (const auto& r : ranks_) {
    if (r.running && !r.ready) missing.push_back(&r);
  }
  if (missing.empty()) return;
  std::string list;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i == 8 && missing.size() > 10) {
      list += ", ... (" + std::to_string(missing.size() - 8) + " more)";
      break;
    }
    list += (i ? ", " : "") + Who(*missing[i]);
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", o_.start_timeout_s);
  Log(std::string("start timeout: ") + std::to_string(missing.size()) + " running rank(s) did not " +
      "connect to the rendezvous store at " + rdv_addr_ + " within " + secs + " s: " + list);
  BeginStop(1);
}

void Job::ReadOutput(const std::vector<pollfd>& fds, const std::vector<std::pair<Rank*, int>>& who) {
  static char buf[65536];
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Rank* r = who[i].first;
    bool is_out = who[i].second == 1;
    Fd& fd = is_out ? r->out_r : r->err_r;
    LineStream& ls = is_out ? *r->out : *r->err;
    for (int rounds = 0; rounds < 4 && fd.valid(); ++rounds) {
      ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n > 0) {
        ls.Feed(buf, static_cast<size_t>(n));
        if (!is_out && r->remote) {
          constexpr size_t kTail = 2048;
          r->err_tail.append(buf, static_cast<size_t>(n));
          if (r->err_tail.size() > kTail) r->err_tail.erase(0, r->err_tail.size() - kTail);
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      ls.Finish();  // EOF or error
      fd.reset();
    }
  }
}

// 100 ms at most (the loop's other duties: children, signals, deadlines), less
// when a partial line of output is due sooner.
int Job::PollTimeoutMs() const {
  Clock::time_point due = Clock::time_point::max();
  for (const auto& r : ranks_) {
    if (r.out) due = std::min(due, r.out->Deadline());
    if (r.err) due = std::min(due, r.err->Deadline());
  }
  constexpr int kMaxMs = 100;
  if (due == Clock::time_point::max()) return kMaxMs;
  Clock::duration left = due - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Rounded up, so the loop wakes at or after the deadline, not just before it.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, kMaxMs));
}

void Job::FlushIdleOutput() {
  Clock::time_point now = Clock::now();
  for (auto& r : ranks_) {
    if (r.out) r.out->FlushIdle(now);
    if (r.err) r.err->FlushIdle(now);
  }
}

void Job::Loop() {
  bool any_open = true;
  Clock::time_point drain_deadline{};
  bool draining = false;
  for (;;) {
    bool any_running = false;
    for (const auto& r : ranks_) any_running = any_running || r.running;
    any_open = false;
    for (const auto& r : ranks_) any_open = any_open || r.out_r.valid() || r.err_r.valid();
    if (!any_running) {
      // Every rank is gone; give their pipes a moment (a child of a rank may
      // still hold them), then stop.
      if (!any_open) break;
      if (!draining) {
        draining = true;
        drain_deadline = Clock::now() + std::chrono::seconds(stopping_ ? 1 : 2);
      } else if (Clock::now() >= drain_deadline) {
        break;
      }
    }

    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, int>> who;
    fds.push_back({sig_r_.get(), POLLIN, 0});
    who.push_back({nullptr, 0});
    for (auto& r : ranks_) {
      if (r.out_r.valid()) {
        fds.push_back({r.out_r.get(), POLLIN, 0});
        who.push_back({&r, 1});
      }
      if (r.err_r.valid()) {
        fds.push_back({r.err_r.get(), POLLIN, 0});
        who.push_back({&r, 2});
      }
    }
    int n = ::poll(fds.data(), fds.size(), PollTimeoutMs());
    if (n < 0 && errno != EINTR) {
      Log(std::string("error: poll: ") + std::strerror(errno));
      BeginStop(1);
    }
    HandleSignals();
    if (n > 0) ReadOutput(fds, who);
    FlushIdleOutput();
    Reap();
    UpdateReady();
    CheckStartTimeout();
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
      bool any = false;
      for (const auto& r : ranks_) any = any || r.running;
      if (any) Log("ranks still running after the grace period: SIGKILL");
      KillAll(SIGKILL);
      killed_ = true;
    }
    if (killed_ && any_running &&
        Clock::now() >= kill_deadline_ + std::chrono::seconds(10)) {
      Log("error: some ranks did not die after SIGKILL; giving up on them");
      break;
    }
  }
  for (auto& r : ranks_) {
    if (r.out) r.out->Finish();
    if (r.err) r.err->Finish();
  }
}

int Job::Run() {
  g_log_sink = &err_sink_;
  struct LogSinkReset {
    ~LogSinkReset() { g_log_sink = nullptr; }
  } log_sink_reset;
  int rc = Setup();
  if (rc != 0) return rc;
  start_time_ = Clock::now();
  SpawnAll();
  Loop();
  // A clean finish still sweeps the ranks' process groups for leftovers when
  // the job was stopped.
  if (stopping_ && !killed_) KillAll(SIGKILL);
  g_signal_pipe_w = -1;
  if (exit_code_ >= 0) return exit_code_;
  return 0;
}

}  // namespace

int RunJob(const Options& opts, const Plan& plan) {
  Job job(opts, plan);
  return job.Run();
}

}  // namespace hvd::launcher
