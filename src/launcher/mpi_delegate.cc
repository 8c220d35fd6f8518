#include "launcher/mpi_delegate.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "common/netif.h"
#include "launcher/hosts.h"
#include "launcher/job_metrics.h"
#include "launcher/output.h"
#include "launcher/process.h"
#include "rendezvous/store.h"

extern char** environ;

namespace hvd::launcher {
namespace {

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// "a:2,b:4" for -H (IPv6 literals keep their brackets).
std::string HostList(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const auto& h : hosts) {
    if (!s.empty()) s += ",";
    s += h.host + ":" + std::to_string(h.slots);
  }
  return s;
}

// UCX_NET_DEVICES for the ranks, so that Open MPI's UCX pml (which it may
// run across hosts) keeps to the interface the job was given, as its TCP
// BTL and out-of-band channel do. Returns the device name to export, or ""
// with *why saying why not. UCX takes device names, not networks: a CIDR
// (given, or the routed network of ReachHosts) would have to become this
// host's name for the interface, and another host may call its interface
// in that network differently (eth0 here, ens3 there), where UCX would then
// find no device at all. So only a name the user gave is passed on. RDMA
// devices are UCX devices too: naming one IP interface would take them
// from UCX, so on a host with any hvdrun leaves the variable to the user.
std::string UcxNetDevices(const Options& o, const MpirunHost& host, std::string* why) {
  const std::string& net = o.network_interface.empty() ? o.mpi_network : o.network_interface;
  uint32_t ignored_net = 0;
  int ignored_bits = 0;
  if (net.empty()) {
    why->clear();  // one host, or Open MPI's own choice: nothing to say
    return "";
  }
  if (ParseCidr(net, &ignored_net, &ignored_bits)) {
    *why = "UCX_NET_DEVICES left unset: the job's network is known only as " + net +
           ", and UCX takes device names, which can differ from host to host "
           "(--network-interface NAME, or UCX_NET_DEVICES, names it)";
    return "";
  }
  if (!host.rdma_devices.empty()) {
    std::string list;
    for (const std::string& d : host.rdma_devices) list += (list.empty() ? "" : ", ") + d;
    *why = "UCX_NET_DEVICES left unset: this host has RDMA devices (" + list +
           "), which UCX_NET_DEVICES=" + net + " would take from Open MPI's UCX pml "
           "(set UCX_NET_DEVICES to name both)";
    return "";
  }
  *why = "UCX_NET_DEVICES=" + net + " for the ranks (Open MPI's UCX pml)";
  return net;
}

}  // namespace

bool IsForeignJobVariable(const std::string& name) {
  static const std::set<std::string> kNames = {
      "HVD_RANK",       "HVD_SIZE",       "HVD_LOCAL_RANK",      "HVD_LOCAL_SIZE",
      "HVD_CROSS_RANK", "HVD_CROSS_SIZE", "HVD_RENDEZVOUS_ADDR", "HVD_SECRET",
      "HVD_HOSTNAME",   "RANK",           "WORLD_SIZE",          "LOCAL_RANK",
      "LOCAL_WORLD_SIZE", "GROUP_RANK", "HVD_START_REPORT_ADDR", "HVD_START_REPORT_SECRET"};
  return kNames.count(name) != 0;
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }
  // mpirun's default slot count is the number of cores, not of hardware
  // threads: count distinct (package, core) pairs.
  std::set<std::pair<std::string, std::string>> cores;
  int cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++cpus;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::string pkg = ReadLine(base + "physical_package_id");
    std::string core = ReadLine(base + "core_id");
    if (core.empty()) core = "cpu" + std::to_string(cpu);  // no topology: one core per CPU
    cores.emplace(pkg, core);
  }
  int n = static_cast<int>(cores.size());
  if (n == 0) n = cpus;
  return n > 0 ? n : 1;
}

// mpirun's --mca settings: ssh's port and identity, and the interface for
// MPI's own traffic.
void AddMcaArgs(const Options& o, std::vector<std::string>* args) {
  std::vector<std::string>& a = *args;
  std::string rsh;
  if (o.ssh_port > 0) rsh += "-p " + std::to_string(o.ssh_port);
  if (!o.ssh_identity.empty()) rsh += std::string(rsh.empty() ? "" : " ") + "-i " + o.ssh_identity;
  if (!rsh.empty()) {
    a.push_back("--mca");
    a.push_back("plm_rsh_args");
    a.push_back(rsh);
  }
  const std::string& net = o.network_interface.empty() ? o.mpi_network : o.network_interface;
  if (!net.empty()) {
    // MPI's own traffic and its out-of-band channel on the chosen interface
    // (a name, or a CIDR Open MPI matches on every host).
    for (const char* param : {"btl_tcp_if_include", "oob_tcp_if_include"}) {
      a.push_back("--mca");
      a.push_back(param);
      a.push_back(net);
    }
  }
}

MpirunCommand BuildMpirunCommand(const Options& o, const MpirunHost& host) {
  MpirunCommand cmd;
  if (o.torchrun_style) {
    cmd.error = "--transport mpi cannot be combined with torchrun-style options: mpirun "
                "starts every node's ranks (use -np with -H or --hostfile)";
    return cmd;
  }
  std::vector<std::string>& a = cmd.argv;
  a.push_back(o.mpirun_program);
  if (host.root) a.push_back("--allow-run-as-root");
  a.push_back("-np");
  a.push_back(std::to_string(o.np));
  if (o.hosts_given) {
    // The slots come from the list; hvdrun has checked that -np fits them.
    a.push_back("-H");
    a.push_back(HostList(o.hosts));
  } else if (o.np > host.cores) {
    // Without a host list mpirun offers one slot per core of this machine.
    a.push_back("--oversubscribe");
  }
  // hvd runs a background thread next to the application's own threads:
  // binding each rank to one core (mpirun's default for small jobs) would
  // make them share it. So only --bind-to core asks mpirun for a binding
  // (hvdrun's auto shares, floor(C/N) CPUs a rank, have no plain mpirun
  // spelling).
  a.push_back("--bind-to");
  a.push_back(o.bind_to == BindMode::kCore ? "core" : "none");
  if (o.tag_output) a.push_back("--tag-output");
  AddMcaArgs(o, &a);

  // Variables for every rank. Later sources win: HVD_* inherited from
  // hvdrun's environment, then -x, then hvdrun's own options.
  std::map<std::string, std::pair<bool, std::string>> vars;  // name -> (has value, value)
  std::vector<std::string> order;
  auto set = [&](const std::string& name, bool has_value, const std::string& value) {
    if (!vars.count(name)) order.push_back(name);
    vars[name] = {has_value, value};
  };
  const bool no_start_timeout = o.start_timeout_given && o.start_timeout_s <= 0;
  for (const std::string& entry : host.environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (!StartsWith(name, "HVD_") || StartsWith(name, "HVD_LAUNCHER_")) continue;
    if (IsForeignJobVariable(name)) continue;
    if (no_start_timeout && name == "HVD_START_TIMEOUT") continue;
    set(name, false, "");
  }
  for (const auto& kv : o.extra_env) set(kv.first, true, kv.second);
  set("HVD_TRANSPORT", true, o.transport.empty() ? "mpi" : o.transport);
  if (!o.network_interface.empty()) set("HVD_NETWORK_INTERFACE", true, o.network_interface);
  const std::string ucx_devices = UcxNetDevices(o, host, &cmd.ucx_note);
  if (!ucx_devices.empty()) {
    // The user's setting wins: a -x value stays as it is, and one from
    // hvdrun's environment is passed by name, so every host's ranks get it
    // (mpirun gives remote ranks only the variables it is told to).
    bool in_environment = false;
    for (const std::string& entry : host.environment) {
      in_environment = in_environment || StartsWith(entry, "UCX_NET_DEVICES=");
    }
    if (vars.count("UCX_NET_DEVICES")) {
      cmd.ucx_note = "UCX_NET_DEVICES as -x gives it (not " + ucx_devices + ")";
    } else if (in_environment) {
      set("UCX_NET_DEVICES", false, "");
      cmd.ucx_note = "UCX_NET_DEVICES from hvdrun's environment, for every rank (not " + ucx_devices + ")";
    } else {
      set("UCX_NET_DEVICES", true, ucx_devices);
    }
  }
  if (!o.timeline_filename.empty()) set("HVD_TIMELINE", true, o.timeline_filename);
  if (!o.flight_recorder.empty()) set("HVD_FLIGHT_RECORDER_DIR", true, o.flight_recorder);
  if (o.fusion_threshold_bytes) set("HVD_FUSION_THRESHOLD", true, std::to_string(*o.fusion_threshold_bytes));
  if (o.cycle_time_ms) set("HVD_CYCLE_TIME", true, *o.cycle_time_ms);
  if (o.start_timeout_given && o.start_timeout_s > 0) set("HVD_START_TIMEOUT", true, o.start_timeout_text);
  if (host.report_start && (o.metrics_port >= 0 || o.summary)) {
    // The ranks' metrics reports, to the same store (core/observability/metrics_publish.h).
    set("HVD_METRICS_PUBLISH", true, o.metrics_port >= 0 ? "1" : "10");
  }
  if (host.report_start) {
    // Values from mpirun's environment: the secret stays off command lines.
    set("HVD_START_REPORT_ADDR", false, "");
    set("HVD_START_REPORT_SECRET", false, "");
  }
  for (const std::string& name : order) {
    const auto& v = vars[name];
    a.push_back("-x");
    a.push_back(v.first ? name + "=" + v.second : name);
  }
  for (const std::string& w : o.command) a.push_back(w);
  return cmd;
}

std::string StartTimeoutMessage(const std::vector<bool>& started, const std::vector<bool>& ready,
                                const std::vector<std::string>& where, double timeout_s) {
  constexpr size_t kMaxListed = 16;
  std::vector<int> absent, pending;
  for (size_t r = 0; r < started.size(); ++r) {
    if (!started[r]) {
      absent.push_back(static_cast<int>(r));
    } else if (!ready[r]) {
      pending.push_back(static_cast<int>(r));
    }
  }
  if (absent.empty() && pending.empty()) return "";
  auto list = [&](const std::vector<int>& ranks) {
    std::string s = "[";
    for (size_t i = 0; i < ranks.size() && i < kMaxListed; ++i) {
      s += (i ? ", " : "") + std::to_string(ranks[i]);
    }
    if (ranks.size() > kMaxListed) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
    return s + "]";
  };
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", timeout_s);
  std::string msg = "start timeout: ";
  if (!absent.empty()) {
    msg += "ranks " + list(absent) + " did not start within " + secs + " s (no hvd_init";
    if (!pending.empty()) msg += "; the others wait for them inside MPI's initialisation";
    msg += ")";
  } else {
    // Every rank reached hvd_init, but MPI itself did not come up.
    msg += "ranks " + list(pending) + " started but MPI did not finish initialising within " +
           secs + " s:";
    for (size_t i = 0; i < pending.size() && i < kMaxListed; ++i) {
      const std::string& w = where[static_cast<size_t>(pending[i])];
      const size_t sp = w.rfind(' ');
      msg += (i ? ", rank " : " rank ") + std::to_string(pending[i]) +
             (sp == std::string::npos ? "" : " (host " + w.substr(0, sp) + ", pid " + w.substr(sp + 1) + ")");
    }
  }
  return msg + "; stopping mpirun (--start-timeout, HVD_START_TIMEOUT)";
}

namespace {

// ---- supervising mpirun: signals through a self-pipe ----------------------
int g_signal_pipe_w = -1;

// One byte per signal: its number, with 0x80 set when a process sent it to
// hvdrun (kill, sigqueue) rather than the kernel (a terminal's ^C reaches
// mpirun too, being in hvdrun's process group, and is not forwarded).
void OnSignal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  const bool sent = info != nullptr && info->si_code <= 0;
  unsigned char b = static_cast<unsigned char>((sig & 0x7f) | (sent ? 0x80 : 0));
  if (g_signal_pipe_w >= 0) {
    ssize_t ignored = ::write(g_signal_pipe_w, &b, 1);
    (void)ignored;
  }
  errno = saved;
}

// Where the report store listens, and the address the ranks are given: as
// for hvdrun's own rendezvous store (launcher/job.cc).
Result<std::string> ReportAddress(const Options& o) {
  bool all_local = true, all_loopback = true;
  std::vector<std::string> remote;
  for (const auto& h : o.hosts) {
    all_local = all_local && IsLocalHost(h.host);
    all_loopback = all_loopback && IsLoopbackHost(h.host);
    if (!IsLocalHost(h.host)) remote.push_back(h.host);
  }
  if (!o.hosts_given || all_local || all_loopback) return std::string("127.0.0.1");
  if (!o.network_interface.empty()) return InterfaceAddress(o.network_interface);
  auto reach = ReachHosts(remote);
  if (reach.ok()) return reach->address;
  std::string ifname;
  return DefaultAddress(&ifname);
}

// The names in /sys/class/infiniband (RDMA devices, RoCE and iWARP ones
// included), sorted; none where the folder is absent.
std::vector<std::string> RdmaDevices() {
  std::vector<std::string> names;
  DIR* d = ::opendir("/sys/class/infiniband");
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<char*> ArgvOf(std::vector<std::string>& words) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(&w[0]);
  argv.push_back(nullptr);
  return argv;
}

void CannotExecute(const std::string& program, int err) {
  WriteAll(2, "hvdrun: error: cannot execute '" + program + "': " + std::strerror(err) +
                  " (--transport mpi needs Open MPI's mpirun on PATH, or its path in "
                  "HVD_LAUNCHER_MPIRUN)\n");
}

int ExitCodeOf(int wstatus) {
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
}

// Reads which ranks have started and which are ready from the store; true
// once every rank is ready.
bool NoteStarts(const Options& o, const rdv::StoreServer& store, std::vector<bool>* started,
                std::vector<bool>* ready, std::vector<std::string>* where) {
  bool all_ready = true;
  for (int r = 0; r < o.np; ++r) {
    const std::string id = std::to_string(r);
    rdv::Bytes v;
    if (!(*started)[r] && store.TryGet("start/" + id, &v)) {
      (*started)[r] = true;
      (*where)[r].assign(v.begin(), v.end());
      if (o.verbose) WriteAll(2, "hvdrun: rank " + id + " started (host and pid: " + (*where)[r] + ")\n");
    }
    if (!(*ready)[r] && store.TryGet("ready/" + id, &v)) (*ready)[r] = true;
    all_ready = all_ready && (*ready)[r];
  }
  if (all_ready && o.verbose) WriteAll(2, "hvdrun: all " + std::to_string(o.np) + " ranks are up\n");
  return all_ready;
}

// Runs mpirun as a child and enforces the start timeout (see the header).
int Supervise(const Options& o, std::vector<std::string> words, const rdv::StoreServer& store) {
  using Clock = std::chrono::steady_clock;
  int sp[2];
  int ep[2];
  if (::pipe2(sp, O_CLOEXEC | O_NONBLOCK) != 0 || ::pipe2(ep, O_CLOEXEC) != 0) {
    WriteAll(2, std::string("hvdrun: error: pipe: ") + std::strerror(errno) + "\n");
    return 1;
  }
  Fd sig_r(sp[0]), sig_w(sp[1]), exec_r(ep[0]), exec_w(ep[1]);
  g_signal_pipe_w = sig_w.get();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) ::sigaction(s, &sa, nullptr);

  std::vector<char*> argv = ArgvOf(words);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    WriteAll(2, std::string("hvdrun: error: fork: ") + std::strerror(errno) + "\n");
    return 1;
  }
  if (pid == 0) {
    // mpirun: gone with hvdrun (SIGTERM ends its job), signals as hvdrun had them.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) ::sigaction(s, &dfl, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    ssize_t ignored = ::write(exec_w.get(), &err, sizeof(err));
    (void)ignored;
    ::_exit(127);
  }
  exec_w.reset();
  const int exec_errno = ReadExecErrno(exec_r.get());
  if (exec_errno != 0) {
    int ws = 0;
    while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    CannotExecute(words[0], exec_errno);
    return 127;
  }

  const int np = o.np;
  std::vector<bool> started(static_cast<size_t>(np), false), ready(static_cast<size_t>(np), false);
  std::vector<std::string> where(static_cast<size_t>(np));
  bool all_ready = np == 0;
  bool timed_out = false, killed = false;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(o.start_timeout_s));
  Clock::time_point kill_at{};
  int wstatus = 0;
  for (;;) {
    pollfd pfd = {sig_r.get(), POLLIN, 0};
    (void)::poll(&pfd, 1, 100);
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(sig_r.get(), buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const int sig = buf[i] & 0x7f;
        if (sig != SIGCHLD && (buf[i] & 0x80) != 0) ::kill(pid, sig);
      }
    }
    const pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
    if (w == pid) break;
    if (!all_ready) all_ready = NoteStarts(o, store, &started, &ready, &where);
    const auto now = Clock::now();
    if (!all_ready && !timed_out && o.start_timeout_s > 0 && now >= deadline) {
      timed_out = true;
      WriteAll(2, "hvdrun: error: " + StartTimeoutMessage(started, ready, where, o.start_timeout_s) + "\n");
      ::kill(pid, SIGTERM);
      kill_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
    }
    if (timed_out && !killed && now >= kill_at) {
      WriteAll(2, "hvdrun: mpirun still running after the grace period: SIGKILL\n");
      ::kill(pid, SIGKILL);
      killed = true;
    }
  }
  g_signal_pipe_w = -1;
  return timed_out ? 1 : ExitCodeOf(wstatus);
}

}  // namespace

namespace {

// Across hosts Open MPI picks its interfaces by name rules of its own (a
// docker0 bridge included): hand it the network the hosts are reached in
// (o->mpi_network), unless an interface was named.
void ChooseMpiNetwork(Options* o) {
  if (!o->network_interface.empty() || !o->hosts_given) return;
  std::vector<std::string> remote;
  for (const auto& h : o->hosts) {
    if (!IsLocalHost(h.host) && !IsLoopbackHost(h.host)) remote.push_back(h.host);
  }
  if (remote.empty()) return;
  auto reach = ReachHosts(remote);
  if (reach.ok() && !reach->cidr.empty()) {
    o->mpi_network = reach->cidr;
    if (o->verbose) WriteAll(2, "hvdrun: MPI network: " + reach->cidr + ": reaching " + reach->summary + "\n");
  } else if (o->verbose) {
    WriteAll(2, "hvdrun: MPI network left to Open MPI: " +
                    (reach.ok() ? "the hosts are not all in " + reach->summary
                                : reach.status().message()) + "\n");
  }
}

// The store the ranks report their start to (see the header); it also holds
// their metrics reports for --metrics-port and --summary. *store stays null
// where the job needs none or it cannot start (a warning, unless the metrics
// need it: then false, the error written).
bool StartReportStore(const Options& o, bool metrics, std::unique_ptr<rdv::StoreServer>* store,
                      std::string* report_addr, std::string* report_secret) {
  if (o.start_timeout_s <= 0 && !metrics) return true;
  auto addr = ReportAddress(o);
  Status why = addr.ok() ? Status::Ok() : addr.status();
  if (addr.ok()) {
    *report_secret = rdv::NewSecret();
    auto s = rdv::StoreServer::Start(*addr, 0, *report_secret);
    if (s.ok()) {
      *store = std::move(s).value();
      *report_addr = JoinHostPort(*addr, (*store)->port());
    } else {
      why = s.status();
    }
  }
  if (!*store && metrics) {
    WriteAll(2, "hvdrun: error: --metrics-port/--summary: cannot serve a store for the ranks' "
                "metrics reports: " + why.message() + "\n");
    return false;
  }
  if (!*store) {
    WriteAll(2, "hvdrun: warning: no start timeout for this job: cannot serve the ranks' "
                "start reports: " + why.message() + "\n");
  }
  return true;
}

}  // namespace

int RunWithMpirun(const Options& given) {
  Options o = given;
  ChooseMpiNetwork(&o);
  if (!o.network_interface.empty()) {
    auto addr = InterfaceAddress(o.network_interface);
    if (!addr.ok()) {
      WriteAll(2, "hvdrun: error: --network-interface: " + addr.status().message() + "\n");
      return 2;
    }
  }
  MpirunHost host;
  host.cores = UsableCores();
  host.root = geteuid() == 0;
  host.rdma_devices = RdmaDevices();
  for (char** e = environ; *e != nullptr; ++e) host.environment.emplace_back(*e);

  const bool metrics = o.metrics_port >= 0 || o.summary;
  std::unique_ptr<rdv::StoreServer> store;
  std::string report_addr, report_secret;
  if (!StartReportStore(o, metrics, &store, &report_addr, &report_secret)) return 1;
  host.report_start = store != nullptr;

  MpirunCommand cmd = BuildMpirunCommand(o, host);
  if (!cmd.error.empty()) {
    WriteAll(2, "hvdrun: error: " + cmd.error + "\nTry 'hvdrun --help' for the options.\n");
    return 2;
  }
  // Local ranks inherit mpirun's environment: drop another job's topology,
  // which the library would otherwise read before mpirun's variables.
  for (const std::string& entry : host.environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (IsForeignJobVariable(name)) unsetenv(name.c_str());
  }
  if (o.start_timeout_given && o.start_timeout_s <= 0) unsetenv("HVD_START_TIMEOUT");
  if (store) {
    setenv("HVD_START_REPORT_ADDR", report_addr.c_str(), 1);
    setenv("HVD_START_REPORT_SECRET", report_secret.c_str(), 1);
  }

  if (o.verbose) {
    std::string line = "hvdrun: transport mpi: running";
    for (const std::string& w : cmd.argv) line += " " + w;
    WriteAll(2, line + "\n");
    if (store) WriteAll(2, "hvdrun: start reports: serving at " + report_addr + "\n");
    if (!cmd.ucx_note.empty()) WriteAll(2, "hvdrun: " + cmd.ucx_note + "\n");
  }
  if (store) {
    JobMetrics job_metrics(store.get(), o.np,
                           [](const std::string& l) { WriteAll(2, "hvdrun: " + l + "\n"); });
    if (metrics && !job_metrics.Start(o.metrics_addr, o.metrics_port)) return 1;
    const int rc = Supervise(o, cmd.argv, *store);
    if (metrics) job_metrics.End(o.summary);
    return rc;
  }
  std::vector<char*> argv = ArgvOf(cmd.argv);
  execvp(argv[0], argv.data());
  CannotExecute(cmd.argv[0], errno);
  return 127;
}

}  // namespace hvd::launcher
