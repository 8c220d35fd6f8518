#include "launcher/cpu_binding.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <utility>

namespace hvd::launcher {
namespace {

// The integer on the first line of a sysfs file; -1 when absent or malformed.
int ReadInt(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line) || line.empty()) return -1;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(line.c_str(), &end, 10);
  if (errno != 0 || end == line.c_str() || v < 0 || v > 1000000000) return -1;
  return static_cast<int>(v);
}

// The usable CPUs grouped by physical core: cores in the order of their
// lowest CPU, each core's CPUs ascending.
std::vector<std::vector<int>> Cores(const std::vector<CpuInfo>& cpus) {
  std::vector<CpuInfo> sorted = cpus;
  std::sort(sorted.begin(), sorted.end(),
            [](const CpuInfo& a, const CpuInfo& b) { return a.cpu < b.cpu; });
  std::map<std::pair<int, int>, size_t> index;  // (package, core) -> position in cores
  std::vector<std::vector<int>> cores;
  for (const auto& c : sorted) {
    if (c.core < 0) {  // no topology: a core of its own
      cores.push_back({c.cpu});
      continue;
    }
    auto key = std::make_pair(c.package, c.core);
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(key, cores.size());
      cores.push_back({c.cpu});
    } else {
      cores[it->second].push_back(c.cpu);
    }
  }
  return cores;
}

// Every core's first CPU, then every core's second (its first hyperthread
// sibling), and so on.
std::vector<int> DistinctCoresFirst(const std::vector<std::vector<int>>& cores) {
  std::vector<int> order;
  size_t most = 0;
  for (const auto& c : cores) most = std::max(most, c.size());
  for (size_t t = 0; t < most; ++t) {
    for (const auto& c : cores) {
      if (t < c.size()) order.push_back(c[t]);
    }
  }
  return order;
}

// A whole decimal number in [lo, hi]; false for anything else.
bool ParseIntIn(const std::string& s, int lo, int hi, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  long v = std::strtol(s.c_str(), nullptr, 10);
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// Writes s to stderr, as much as goes (a message before exec: nothing to do
// when stderr is gone).
void ToStderr(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Binds this process to cpus; false (errno set) when the kernel refuses.
bool BindSelf(const std::vector<int>& cpus) {
  int top = *std::max_element(cpus.begin(), cpus.end());
  cpu_set_t* set = CPU_ALLOC(top + 1);
  if (set == nullptr) return false;
  size_t size = CPU_ALLOC_SIZE(top + 1);
  CPU_ZERO_S(size, set);
  for (int cpu : cpus) CPU_SET_S(static_cast<size_t>(cpu), size, set);
  int rc = ::sched_setaffinity(0, size, set);
  int e = errno;
  CPU_FREE(set);
  errno = e;
  return rc == 0;
}

}  // namespace

bool ParseBindMode(const std::string& s, BindMode* out) {
  if (s == "none") {
    *out = BindMode::kNone;
  } else if (s == "core") {
    *out = BindMode::kCore;
  } else if (s == "auto") {
    *out = BindMode::kAuto;
  } else {
    return false;
  }
  return true;
}

const char* BindModeName(BindMode m) {
  switch (m) {
    case BindMode::kNone: return "none";
    case BindMode::kCore: return "core";
    case BindMode::kAuto: return "auto";
  }
  return "?";
}

std::vector<CpuInfo> UsableCpus(const std::string& sysfs_cpu_dir) {
  // A mask big enough for the machine: grow it while the kernel's is larger.
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (set == nullptr) return {};
    size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    if (::sched_getaffinity(0, size, set) != 0) {
      CPU_FREE(set);
      if (errno == EINVAL) continue;
      return {};
    }
    std::vector<CpuInfo> out;
    for (int cpu = 0; cpu < ncpus; ++cpu) {
      if (!CPU_ISSET_S(cpu, size, set)) continue;
      CpuInfo c;
      c.cpu = cpu;
      const std::string base = sysfs_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
      c.package = ReadInt(base + "physical_package_id");
      c.core = ReadInt(base + "core_id");
      out.push_back(c);
    }
    CPU_FREE(set);
    return out;
  }
  return {};
}

std::vector<std::vector<int>> CpuBlocks(BindMode mode, const std::vector<CpuInfo>& cpus, int n) {
  if (mode == BindMode::kNone || n <= 0 || cpus.empty()) return {};
  const std::vector<std::vector<int>> cores = Cores(cpus);
  const std::vector<int> order = DistinctCoresFirst(cores);
  const int C = static_cast<int>(order.size());
  const int K = static_cast<int>(cores.size());
  std::vector<std::vector<int>> blocks(n);
  if (mode == BindMode::kCore) {
    for (int i = 0; i < n; ++i) blocks[i] = {order[i % C]};
    return blocks;
  }
  if (n > C) return {};
  if (n <= K) {
    const int k = K / n;
    for (int i = 0; i < n; ++i) {
      for (int j = i * k; j < (i + 1) * k; ++j) {
        blocks[i].insert(blocks[i].end(), cores[j].begin(), cores[j].end());
      }
      std::sort(blocks[i].begin(), blocks[i].end());
    }
    return blocks;
  }
  const int b = C / n;
  for (int i = 0; i < n; ++i) {
    blocks[i].assign(order.begin() + i * b, order.begin() + (i + 1) * b);
    std::sort(blocks[i].begin(), blocks[i].end());
  }
  return blocks;
}

std::vector<int> PickBlock(const std::vector<std::vector<int>>& blocks,
                           const std::vector<std::vector<int>>& taken, bool only_free) {
  const std::vector<int>* best = nullptr;
  size_t best_shared = 0;
  for (const auto& b : blocks) {
    std::set<int> mine(b.begin(), b.end());
    size_t shared = 0;
    for (const auto& t : taken) {
      bool any = false;
      for (int cpu : t) any = any || mine.count(cpu) != 0;
      shared += any ? 1 : 0;
    }
    if (best == nullptr || shared < best_shared) {
      best = &b;
      best_shared = shared;
    }
  }
  if (best == nullptr || (only_free && best_shared > 0)) return {};
  return *best;
}

std::string FormatCpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<std::string> BindExecArgv(const std::string& program, const BindExecArgs& a) {
  std::vector<std::string> argv = {program,
                                   "--bind-exec",
                                   BindModeName(a.mode),
                                   std::to_string(a.local_rank),
                                   std::to_string(a.local_size),
                                   a.verbose ? "1" : "0",
                                   a.host,
                                   a.who,
                                   "--"};
  argv.insert(argv.end(), a.command.begin(), a.command.end());
  return argv;
}

bool ParseBindExecArgs(const std::vector<std::string>& args, BindExecArgs* out,
                       std::string* error) {
  // MODE LOCAL_RANK LOCAL_SIZE VERBOSE HOST WHO -- COMMAND...
  if (args.size() < 8 || args[6] != "--") {
    *error = "usage: hvdrun --bind-exec MODE LOCAL_RANK LOCAL_SIZE VERBOSE HOST WHO -- COMMAND...";
    return false;
  }
  BindExecArgs a;
  if (!ParseBindMode(args[0], &a.mode) || a.mode == BindMode::kNone) {
    *error = "bad mode '" + args[0] + "' (core or auto)";
    return false;
  }
  if (!ParseIntIn(args[2], 1, 1000000, &a.local_size) ||
      !ParseIntIn(args[1], 0, a.local_size - 1, &a.local_rank)) {
    *error = "bad local rank/size '" + args[1] + "'/'" + args[2] + "'";
    return false;
  }
  if (args[3] != "0" && args[3] != "1") {
    *error = "bad verbosity '" + args[3] + "' (0 or 1)";
    return false;
  }
  a.verbose = args[3] == "1";
  a.host = args[4];
  a.who = args[5];
  a.command.assign(args.begin() + 7, args.end());
  *out = std::move(a);
  return true;
}

BindDecision DecideBinding(const BindExecArgs& a, const std::vector<CpuInfo>& usable) {
  BindDecision d;
  const std::string mode = std::string("--bind-to ") + BindModeName(a.mode) + ": ";
  if (usable.empty()) {
    d.note = mode + a.who + ": the usable CPUs of host " + a.host + " cannot be read: not bound";
    return d;
  }
  auto blocks = CpuBlocks(a.mode, usable, a.local_size);
  if (blocks.empty() || a.local_rank < 0 || a.local_rank >= static_cast<int>(blocks.size())) {
    // Said once a host: by its first rank (the others see the same CPUs).
    if (a.local_rank == 0) {
      std::vector<int> ids;
      for (const auto& c : usable) ids.push_back(c.cpu);
      d.note = mode + std::to_string(a.local_size) + " local rank(s) on host " + a.host +
               " do not fit its " + std::to_string(ids.size()) + " usable CPU(s) (" +
               FormatCpuList(ids) + "): not bound";
    }
    return d;
  }
  d.cpus = blocks[static_cast<size_t>(a.local_rank)];
  return d;
}

int RunBindExec(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  BindExecArgs a;
  std::string error;
  if (!ParseBindExecArgs(args, &a, &error)) {
    ToStderr("hvdrun: error: --bind-exec: " + error + "\n");
    return 2;
  }
  BindDecision d = DecideBinding(a, UsableCpus());
  if (!d.cpus.empty()) {
    const std::string list = FormatCpuList(d.cpus);
    if (BindSelf(d.cpus)) {
      if (a.verbose) ToStderr("hvdrun: " + a.who + ": CPUs " + list + "\n");
    } else {
      // As for a local rank: said whatever the verbosity, and the rank runs.
      ToStderr("hvdrun: warning: cannot bind this process to CPUs " + list +
               " (sched_setaffinity failed: " + std::strerror(errno) + "): it runs unbound\n");
    }
  } else if (a.verbose && !d.note.empty()) {
    ToStderr("hvdrun: " + d.note + "\n");
  }
  std::vector<char*> cargv;
  for (auto& s : a.command) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  ::execvp(cargv[0], cargv.data());
  int e = errno;
  // env's exit codes, which the remote script used before: 127 not found,
  // 126 found but not executable.
  ToStderr("hvdrun: " + a.who + ": cannot execute '" + a.command[0] + "': " + std::strerror(e) +
           "\n");
  return e == ENOENT ? 127 : 126;
}

}  // namespace hvd::launcher
