#include "launcher/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/files.h"
#include "launcher/hosts.h"
#include "launcher/remote.h"

extern char** environ;

namespace hvd::launcher {
namespace {

// ssh probes of an elastic job's remote workers (RemoteSpec::alive_interval_s):
// a cut-off host's worker is gone for hvdrun within about 3 of these.
constexpr int kElasticSshAliveS = 2;

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

// hvdrun's stderr while a job runs: hvdrun's messages then end a child's
// open line there first (see output.h).
OutputSink* g_log_sink = nullptr;

std::string HostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Signals to a child's process group (which outlives its leader while the
// leader's children live on, so a child that already exited gets it too).
void SignalGroup(const Child& c, int sig) {
  if (!c.started) return;
  if (::killpg(c.pid, sig) != 0 && c.running) ::kill(c.pid, sig);
}

}  // namespace

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string DescribeSignal(int sig) {
  const char* n = SignalName(sig);
  return std::to_string(sig) + (n ? std::string(" (") + n + ")" : std::string());
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", s);
  return buf;
}

void Log(const std::string& line) {
  std::string text = "hvdrun: " + line + "\n";
  if (g_log_sink != nullptr) {
    g_log_sink->WriteLines(text);
  } else {
    WriteAll(2, text);
  }
}

Supervisor::Supervisor(const Options& o) : o_(o) {
  g_log_sink = &err_sink_;
  char buf[4096];
  cwd_ = ::getcwd(buf, sizeof(buf)) ? buf : "/";
  if (o_.bind_to != BindMode::kNone) {
    usable_cpus_ = UsableCpus();
    // A remote rank binds itself through this program, at the same path on
    // its host (hvd installed alike on every host).
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0 && buf[0] == '/') self_path_.assign(buf, static_cast<size_t>(n));
    // Replaced while running (a rebuild): no path to give.
    const std::string deleted = " (deleted)";
    if (self_path_.size() > deleted.size() &&
        self_path_.compare(self_path_.size() - deleted.size(), deleted.size(), deleted) == 0) {
      self_path_.clear();
    }
  }
}

std::vector<std::vector<int>> Supervisor::LocalCpuBlocks(int n) {
  if (o_.bind_to == BindMode::kNone || n <= 0) return {};
  auto blocks = CpuBlocks(o_.bind_to, usable_cpus_, n);
  if (blocks.empty() && o_.verbose && !unbound_noted_) {
    unbound_noted_ = true;
    std::vector<int> ids;
    for (const auto& c : usable_cpus_) ids.push_back(c.cpu);
    Log(std::string("--bind-to ") + BindModeName(o_.bind_to) + ": " + std::to_string(n) +
        " local rank(s) do not fit the " + std::to_string(ids.size()) + " usable CPU(s) (" +
        (ids.empty() ? std::string("unknown") : FormatCpuList(ids)) + "): not bound");
  }
  return blocks;
}

void Supervisor::NoteRemoteBinding() {
  if (o_.bind_to == BindMode::kNone || !o_.verbose || remote_noted_) return;
  remote_noted_ = true;
  if (self_path_.empty()) {
    Log(std::string("--bind-to ") + BindModeName(o_.bind_to) +
        ": ranks on remote hosts are not bound (the path of this program is unknown)");
  } else {
    Log(std::string("--bind-to ") + BindModeName(o_.bind_to) +
        ": ranks on remote hosts bind themselves to their host's CPUs (" + self_path_ +
        " --bind-exec there)");
  }
}

Supervisor::~Supervisor() {
  g_signal_pipe_w = -1;
  g_log_sink = nullptr;
}

bool Supervisor::IsRemote(const std::string& host) const {
  return !o_.torchrun_style && (o_.force_ssh || !IsLocalHost(host));
}

int Supervisor::Setup(const std::vector<std::string>& hosts, bool hosts_may_change) {
  int rc = StartStore(hosts, hosts_may_change);
  return rc != 0 ? rc : InstallSignals();
}

int Supervisor::StartStore(const std::vector<std::string>& hosts, bool hosts_may_change) {
  bool all_loopback = true;
  std::vector<std::string> remote;  // once each
  for (const auto& h : hosts) {
    all_loopback = all_loopback && IsLoopbackHost(h);
    if (IsRemote(h) && std::find(remote.begin(), remote.end(), h) == remote.end()) remote.push_back(h);
  }
  // Whether children on other hosts must reach the store.
  bool open = hosts_may_change ? (hosts.empty() || !all_loopback) : (!remote.empty() && !all_loopback);

  if (!o_.network_interface.empty() && !(o_.torchrun_style && o_.nnodes > 1)) {
    auto a = InterfaceAddress(o_.network_interface);
    if (!a.ok()) {
      Log("error: --network-interface: " + a.status().message());
      return 2;
    }
  }

  // Where the store listens, and the address the children are given.
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
  } else if (!open) {
    bind_host = adv_host = "127.0.0.1";
  } else if (!o_.network_interface.empty()) {
    auto a = InterfaceAddress(o_.network_interface);
    bind_host = adv_host = a.value();
    if (IsLoopbackHost(adv_host)) {
      Log("warning: --network-interface " + o_.network_interface + " is a loopback interface (" +
          adv_host + "): children on other hosts will not reach the rendezvous store");
    }
  } else {
    // Where the remote hosts are reached, by the routes: a bridge or a
    // second network named first in the interface list cannot mislead it.
    Result<Reach> reach = remote.empty()
                              ? Result<Reach>(Status(Error(HVD_ERR_RENDEZVOUS,
                                                           "no remote host is known yet (hosts may "
                                                           "be added later)")))
                              : ReachHosts(remote);
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
      if (o_.verbose || !remote.empty()) {
        Log(std::string(o_.verbose ? "" : "warning: ") + "store interface: " + ifname + " (" +
            adv_host + "), the first that is up and not a bridge: " + reach.status().message() +
            "; name the one to use with --network-interface (a name or a CIDR)");
      }
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
  adv_host_ = adv_host;
  port_ = port;
  rdv_addr_ = JoinHostPort(adv_host, port);
  return 0;
}

int Supervisor::InstallSignals() {
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

std::vector<std::pair<std::string, std::string>> Supervisor::CommonVars(const std::string& host) const {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& kv : o_.extra_env) v.push_back(kv);
  auto add = [&](const char* k, const std::string& val) { v.emplace_back(k, val); };
  add("HVD_RENDEZVOUS_ADDR", rdv_addr_);
  add("HVD_HOSTNAME", o_.torchrun_style ? HostName() : host);
  add("HOROVOD_HOSTNAME", o_.torchrun_style ? HostName() : host);
  if (!o_.transport.empty()) add("HVD_TRANSPORT", o_.transport);
  if (!o_.network_interface.empty()) add("HVD_NETWORK_INTERFACE", o_.network_interface);
  // UCX prints its own diagnostics on stdout unless told otherwise; a rank's
  // stdout is the program's (what a pipeline reads), so they go to stderr
  // with hvd's own messages, unless the user chose where (UCX_LOG_FILE).
  if (std::getenv("UCX_LOG_FILE") == nullptr) add("UCX_LOG_FILE", "stderr");
  if (!o_.timeline_filename.empty()) add("HVD_TIMELINE", o_.timeline_filename);
  if (!o_.flight_recorder.empty()) add("HVD_FLIGHT_RECORDER_DIR", o_.flight_recorder);
  if (o_.fusion_threshold_bytes) add("HVD_FUSION_THRESHOLD", std::to_string(*o_.fusion_threshold_bytes));
  if (o_.cycle_time_ms) add("HVD_CYCLE_TIME", *o_.cycle_time_ms);
  // The ranks' metrics reports for --metrics-port (every second) or --summary.
  if (o_.metrics_port >= 0 || o_.summary) add("HVD_METRICS_PUBLISH", o_.metrics_port >= 0 ? "1" : "10");
  // 0 means "no start timeout" to hvdrun; the library wants a positive
  // number, so with 0 it gets none and uses its default.
  if (o_.start_timeout_given && o_.start_timeout_s > 0) add("HVD_START_TIMEOUT", o_.start_timeout_text);
  return v;
}

namespace {

Result<Fd> OpenOutputFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return Error(HVD_ERR_INTERNAL, "cannot open " + path + ": " + std::strerror(errno));
  return Fd(fd);
}

}  // namespace

Status Supervisor::SpawnChild(Child& c, const std::vector<std::pair<std::string, std::string>>& vars,
                              const std::vector<std::string>& drop, const std::string& tag) {
  if (!c.output_dir.empty()) {
    HVD_CHECK(MakeDirs(c.output_dir));
    HVD_ASSIGN_OR_RETURN(c.out_file, OpenOutputFile(c.output_dir + "/stdout"));
    HVD_ASSIGN_OR_RETURN(c.err_file, OpenOutputFile(c.output_dir + "/stderr"));
  }
  SpawnRequest req;
  std::set<std::string> ours(drop.begin(), drop.end());  // set here (or dropped): never inherited
  for (const auto& kv : vars) ours.insert(kv.first);
  if (o_.start_timeout_s <= 0) ours.insert("HVD_START_TIMEOUT");  // see CommonVars

  if (!c.remote) {
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
    req.cpus = c.cpus;
  } else {
    RemoteSpec spec;
    spec.host = c.host;
    spec.port = o_.ssh_port;
    spec.identity = o_.ssh_identity;
    spec.ssh_program = o_.ssh_program;
    spec.extra_args = o_.ssh_extra_args;
    spec.cwd = cwd_;
    spec.command = o_.command;
    spec.grace_s = o_.grace_s;
    spec.connect_timeout_s = o_.start_timeout_s;
    // An elastic job must notice a host cut off: its worker then leaves the
    // epoch being formed at once instead of after the start timeout (the
    // survivors already reset; hvdrun waits for every live worker).
    if (o_.elastic) spec.alive_interval_s = kElasticSshAliveS;
    if (o_.bind_to != BindMode::kNone && c.bind_size > 0 && !self_path_.empty()) {
      spec.bind_program = self_path_;
      spec.bind.mode = o_.bind_to;
      spec.bind.local_rank = c.bind_rank;
      spec.bind.local_size = c.bind_size;
      spec.bind.verbose = o_.verbose;
      spec.bind.host = c.host;
      spec.bind.who = c.who;
    }
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
  Track(c, std::move(sp), o_.tag_output ? tag : std::string(), std::string());
  if (c.exec_failed) {
    Log(c.who + ": cannot execute '" + req.argv[0] + "': " + std::strerror(c.exec_errno));
  }
  if (c.remote) {
    // The secret goes as the first line of ssh's input, never on a command line.
    if (!WriteAll(c.stdin_w.get(), secret_ + "\n")) {
      Log(c.who + ": could not hand the secret to ssh");
    }
  }
  if (o_.verbose) {
    // A remote child: only ssh has started here; "connected" follows once
    // the child itself reaches the store.
    Log(c.who + (c.remote ? " ssh client started, pid " : " started, pid ") + std::to_string(c.pid));
    if (!c.remote && !c.cpus.empty()) Log(c.who + ": CPUs " + FormatCpuList(c.cpus));
  }
  return Status::Ok();
}

Status Supervisor::SpawnHelper(Child& c, const std::vector<std::string>& argv,
                               const std::string& err_prefix) {
  SpawnRequest req;
  req.argv = argv;
  for (char** e = environ; *e != nullptr; ++e) req.envp.push_back(*e);
  HVD_ASSIGN_OR_RETURN(Spawned sp, Spawn(req));
  c.capture_out = true;
  c.captured.clear();
  Track(c, std::move(sp), std::string(), err_prefix);
  return Status::Ok();
}

void Supervisor::Track(Child& c, Spawned&& sp, const std::string& tag, const std::string& err_prefix) {
  c.pid = sp.pid;
  c.started = c.running = true;
  c.ready = false;
  c.remote_started = false;
  c.marker = StartMarkerFilter();
  c.stop_requested = c.kill_sent = false;
  c.kill_at = Clock::time_point::max();
  c.exec_errno = sp.exec_errno;
  c.exec_failed = sp.exec_errno != 0;
  c.out_r = std::move(sp.stdout_r);
  c.err_r = std::move(sp.stderr_r);
  c.stdin_w = std::move(sp.stdin_w);
  std::string t = tag.empty() ? err_prefix : tag + "<stderr>: ";
  c.out = std::make_unique<LineStream>(&out_sink_, tag.empty() ? "" : tag + "<stdout>: ");
  c.err = std::make_unique<LineStream>(&err_sink_, t);
  by_pid_[c.pid] = &c;
  if (std::find(children_.begin(), children_.end(), &c) == children_.end()) children_.push_back(&c);
}

void Supervisor::StopChild(Child& c, bool term, double grace_s) {
  if (!c.started || c.stop_requested) return;
  c.stop_requested = true;
  if (term) SignalGroup(c, SIGTERM);
  double g = grace_s < 0 ? o_.grace_s : grace_s;
  c.kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(g * 1000));
}

void Supervisor::KillAll(int sig) {
  for (Child* c : children_) SignalGroup(*c, sig);
}

void Supervisor::BeginStop(int exit_code, bool term_all) {
  if (exit_code_ < 0) exit_code_ = exit_code;
  if (stopping_) return;
  stopping_ = true;
  bool any = false;
  for (const Child* c : children_) any = any || c->running;
  if (term_all) {
    if (exit_code_ != 0) BeforeStop();
    if (any && o_.verbose) Log("stopping the job: SIGTERM to every process");
    KillAll(SIGTERM);
  }
  kill_deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<long>(o_.grace_s * 1000));
}

ExitInfo Supervisor::DescribeExit(const Child& c, int wstatus) const {
  ExitInfo e;
  if (WIFSIGNALED(wstatus)) {
    e.failed = true;
    e.code = 128 + WTERMSIG(wstatus);
    e.what = "killed by signal " + DescribeSignal(WTERMSIG(wstatus));
  } else {
    e.code = WEXITSTATUS(wstatus);
    e.failed = e.code != 0;
    e.what = "exited with code " + std::to_string(e.code);
    if (e.code == 127 && !c.exec_failed) e.what += " (command not found?)";
    if (e.code == 126) e.what += " (command not executable?)";
    if (e.code == 255 && c.remote) e.what += " (" + SshFailure(c) + ")";
  }
  return e;
}

// What an ssh that exited 255 (its own failure code) ran into, from the
// message it left on the child's stderr: the host name does not resolve, no
// sshd listens, sshd accepts but never answers (hung), the host does not
// answer, the key is refused, the host key does not verify, or the
// connection was lost once the child ran.
std::string Supervisor::SshFailure(const Child& c) const {
  const std::string& t = c.err_tail;
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  const std::string port = o_.ssh_port ? std::to_string(o_.ssh_port) : "22";
  const std::string try_it =
      "; try 'ssh" + (o_.ssh_port ? " -p " + port : std::string()) + " " + c.host + " true'";
  if (has("Could not resolve hostname") || has("Name or service not known") ||
      has("Temporary failure in name resolution")) {
    return "ssh cannot resolve the host name '" + c.host + "': check the name, /etc/hosts or DNS";
  }
  if (has("Connection refused")) {
    return "ssh: nothing listens on " + c.host + " port " + port +
           " (connection refused): is sshd running there, on that port?" + try_it;
  }
  if (has("Permission denied")) {
    return "ssh to " + c.host +
           " was refused: key-based login failed (hvdrun runs ssh with BatchMode=yes, so no "
           "password is asked); authorise this user's key there, or give one with -i" + try_it;
  }
  if (has("Host key verification failed") || has("REMOTE HOST IDENTIFICATION HAS CHANGED")) {
    return "ssh to " + c.host + ": host key verification failed (its key changed, or is unknown "
           "and not accepted); fix ~/.ssh/known_hosts" + try_it;
  }
  if (has("during banner exchange")) {
    // The connection was made (the host and its network are up), but sshd
    // never sent its greeting.
    return "ssh: " + c.host + " accepted the connection but its sshd did not answer (no greeting "
           "within the connect timeout): sshd hung or overloaded there?" + try_it;
  }
  if (has("Connection timed out") || has("No route to host") || has("Network is unreachable") ||
      has("Operation timed out")) {
    return "ssh: " + c.host + " did not answer (" +
           (has("No route to host") ? std::string("no route to host")
            : has("Network is unreachable") ? std::string("network unreachable")
                                            : std::string("connection timed out")) +
           "): down, or cut off from this host?" + try_it;
  }
  if (c.ready || has("Connection closed by") || has("Connection reset") || has("Broken pipe") ||
      has("not responding")) {
    return "the ssh connection to " + c.host + " was lost" +
           (c.ready ? " after the rank had started" : "") +
           " (the host went down or was cut off, or its sshd ended the session; exit code 255 is "
           "also what a program that exits with 255 gives)";
  }
  if (c.remote_started) {
    // The login worked: the script ran on the host.
    return "after the login to " + c.host + " had completed: the command exited with 255 there, "
           "or the ssh connection broke";
  }
  return "ssh failed? check that 'ssh" + (o_.ssh_port ? " -p " + port : std::string()) + " " +
         c.host + "' works without a password";
}

void Supervisor::Reap() {
  for (;;) {
    int wstatus = 0;
    pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0) return;
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) continue;
    Child& c = *it->second;
    by_pid_.erase(it);
    c.running = false;
    OnExit(c, wstatus);
  }
}

void Supervisor::HandleEvents() {
  HandleSignals();
  Reap();
}

void Supervisor::HandleSignals() {
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

void Supervisor::ReadOutput(const std::vector<pollfd>& fds,
                            const std::vector<std::pair<Child*, int>>& who) {
  static char buf[65536];
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Child* c = who[i].first;
    bool is_out = who[i].second == 1;
    Fd& fd = is_out ? c->out_r : c->err_r;
    LineStream& ls = is_out ? *c->out : *c->err;
    for (int rounds = 0; rounds < 4 && fd.valid(); ++rounds) {
      ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n > 0) {
        if (is_out && c->capture_out) {
          constexpr size_t kMaxCapture = 1 << 20;
          if (c->captured.size() < kMaxCapture) c->captured.append(buf, static_cast<size_t>(n));
          continue;
        }
        const char* data = buf;
        size_t len = static_cast<size_t>(n);
        std::string kept;
        if (!is_out && c->remote && !c->marker.seen()) {
          // Until the remote script's start marker came: taken out here.
          if (c->marker.Feed(buf, len, &kept)) {
            c->remote_started = true;
            if (o_.verbose) {
              Log(c->who + ": ssh login to " + c->host + " complete, the remote script runs");
            }
          }
          data = kept.data();
          len = kept.size();
        }
        Forward(*c, is_out, data, len);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (!is_out && c->remote) {
        std::string held;
        c->marker.Finish(&held);
        Forward(*c, is_out, held.data(), held.size());
      }
      ls.Finish();  // EOF or error
      fd.reset();
      (is_out ? c->out_file : c->err_file).reset();
    }
  }
}

// Bytes of c's stdout or stderr: to hvdrun's own, to its --output-filename
// copy, and (a remote child's stderr) to its tail for ssh's messages.
void Supervisor::Forward(Child& c, bool is_out, const char* data, size_t n) {
  if (n == 0) return;
  (is_out ? *c.out : *c.err).Feed(data, n);
  Fd& copy = is_out ? c.out_file : c.err_file;
  if (copy.valid() && !WriteAll(copy.get(), std::string(data, n))) {
    Log(c.who + ": cannot write to its --output-filename file: " + std::strerror(errno));
    copy.reset();
  }
  if (!is_out && c.remote) {
    constexpr size_t kTail = 2048;
    c.err_tail.append(data, n);
    if (c.err_tail.size() > kTail) c.err_tail.erase(0, c.err_tail.size() - kTail);
  }
}

// MaxWaitMs() at most (the loop's other duties: children, signals,
// deadlines), less when a partial line of output is due sooner.
int Supervisor::PollTimeoutMs() const {
  Clock::time_point due = Clock::time_point::max();
  for (const Child* c : children_) {
    if (c->out) due = std::min(due, c->out->Deadline());
    if (c->err) due = std::min(due, c->err->Deadline());
  }
  const int max_ms = MaxWaitMs();
  if (due == Clock::time_point::max()) return max_ms;
  Clock::duration left = due - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Rounded up, so the loop wakes at or after the deadline, not just before it.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, max_ms));
}

void Supervisor::FlushIdleOutput() {
  Clock::time_point now = Clock::now();
  for (Child* c : children_) {
    if (c->out) c->out->FlushIdle(now);
    if (c->err) c->err->FlushIdle(now);
  }
}

bool Supervisor::Alive() const {
  for (const Child* c : children_) {
    if (c->running) return true;
  }
  return false;
}

// SIGKILL for children stopped one by one whose grace period is over, and
// for the whole job once its grace period is.
void Supervisor::KillDue() {
  Clock::time_point now = Clock::now();
  for (Child* c : children_) {
    if (c->stop_requested && !c->kill_sent && now >= c->kill_at) {
      if (c->running && o_.verbose) Log(c->who + " still running: SIGKILL");
      SignalGroup(*c, SIGKILL);
      c->kill_sent = true;
    }
  }
  if (stopping_ && !killed_ && now >= kill_deadline_) {
    bool any = false;
    for (const Child* c : children_) any = any || c->running;
    if (any) Log("processes still running after the grace period: SIGKILL");
    KillAll(SIGKILL);
    killed_ = true;
  }
}

void Supervisor::Loop() {
  Clock::time_point drain_deadline{};
  bool draining = false;
  for (;;) {
    bool any_running = false, any_open = false;
    for (const Child* c : children_) {
      any_running = any_running || c->running;
      any_open = any_open || c->out_r.valid() || c->err_r.valid();
    }
    if (!Alive()) {
      // Every child is gone; give their pipes a moment (a child of a child
      // may still hold them), then stop.
      if (!any_open) break;
      if (!draining) {
        draining = true;
        drain_deadline = Clock::now() + std::chrono::seconds(stopping_ ? 1 : 2);
      } else if (Clock::now() >= drain_deadline) {
        break;
      }
    } else {
      draining = false;
    }

    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, int>> who;
    fds.push_back({sig_r_.get(), POLLIN, 0});
    who.push_back({nullptr, 0});
    for (Child* c : children_) {
      if (c->out_r.valid()) {
        fds.push_back({c->out_r.get(), POLLIN, 0});
        who.push_back({c, 1});
      }
      if (c->err_r.valid()) {
        fds.push_back({c->err_r.get(), POLLIN, 0});
        who.push_back({c, 2});
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
    OnTurn();
    KillDue();
    if (killed_ && any_running && Clock::now() >= kill_deadline_ + std::chrono::seconds(10)) {
      Log("error: some processes did not die after SIGKILL; giving up on them");
      break;
    }
  }
  for (Child* c : children_) {
    if (c->out) c->out->Finish();
    if (c->err) c->err->Finish();
  }
}

int Supervisor::Finish() {
  // A clean finish still sweeps the children's process groups for leftovers
  // when the job was stopped, and those of children stopped one by one whose
  // grace period had not run out.
  if (stopping_ && !killed_) KillAll(SIGKILL);
  for (Child* c : children_) {
    if (c->stop_requested && !c->kill_sent) SignalGroup(*c, SIGKILL);
  }
  g_signal_pipe_w = -1;
  return exit_code_ >= 0 ? exit_code_ : 0;
}

}  // namespace hvd::launcher
