#include "launcher/mpi_delegate.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "launcher/hosts.h"
#include "launcher/output.h"

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

}  // namespace

bool IsForeignJobVariable(const std::string& name) {
  static const std::set<std::string> kNames = {
      "HVD_RANK",       "HVD_SIZE",       "HVD_LOCAL_RANK",      "HVD_LOCAL_SIZE",
      "HVD_CROSS_RANK", "HVD_CROSS_SIZE", "HVD_RENDEZVOUS_ADDR", "HVD_SECRET",
      "HVD_HOSTNAME",   "RANK",           "WORLD_SIZE",          "LOCAL_RANK",
      "LOCAL_WORLD_SIZE", "GROUP_RANK"};
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
  // make them share it.
  a.push_back("--bind-to");
  a.push_back("none");
  if (o.tag_output) a.push_back("--tag-output");
  std::string rsh;
  if (o.ssh_port > 0) rsh += "-p " + std::to_string(o.ssh_port);
  if (!o.ssh_identity.empty()) rsh += std::string(rsh.empty() ? "" : " ") + "-i " + o.ssh_identity;
  if (!rsh.empty()) {
    a.push_back("--mca");
    a.push_back("plm_rsh_args");
    a.push_back(rsh);
  }
  if (!o.network_interface.empty()) {
    // MPI's own traffic and its out-of-band channel on the chosen interface.
    for (const char* param : {"btl_tcp_if_include", "oob_tcp_if_include"}) {
      a.push_back("--mca");
      a.push_back(param);
      a.push_back(o.network_interface);
    }
  }

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
  if (!o.timeline_filename.empty()) set("HVD_TIMELINE", true, o.timeline_filename);
  if (o.fusion_threshold_bytes) set("HVD_FUSION_THRESHOLD", true, std::to_string(*o.fusion_threshold_bytes));
  if (o.cycle_time_ms) set("HVD_CYCLE_TIME", true, *o.cycle_time_ms);
  if (o.start_timeout_given && o.start_timeout_s > 0) set("HVD_START_TIMEOUT", true, o.start_timeout_text);
  for (const std::string& name : order) {
    const auto& v = vars[name];
    a.push_back("-x");
    a.push_back(v.first ? name + "=" + v.second : name);
  }
  for (const std::string& w : o.command) a.push_back(w);
  return cmd;
}

int RunWithMpirun(const Options& o) {
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
  for (char** e = environ; *e != nullptr; ++e) host.environment.emplace_back(*e);
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

  if (o.verbose) {
    std::string line = "hvdrun: transport mpi: running";
    for (const std::string& w : cmd.argv) line += " " + w;
    WriteAll(2, line + "\n");
  }
  std::vector<char*> argv;
  for (std::string& w : cmd.argv) argv.push_back(&w[0]);
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  WriteAll(2, "hvdrun: error: cannot execute '" + cmd.argv[0] + "': " + std::strerror(err) +
                  " (--transport mpi needs Open MPI's mpirun on PATH, or its path in "
                  "HVD_LAUNCHER_MPIRUN)\n");
  return 127;
}

}  // namespace hvd::launcher
