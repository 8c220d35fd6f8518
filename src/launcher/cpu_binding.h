// Binding the ranks hvdrun starts to CPUs (--bind-to): on this machine, and
// through hvdrun --bind-exec (below) on remote hosts.
//
// Without a binding the kernel may place two ranks' busy threads on one CPU
// and leave the other idle: a rank spinning in a shared-memory wait then holds
// the CPU its peer needs to make progress. The binding of a local rank is
// applied in the child between fork and exec (sched_setaffinity), that of a
// remote rank by hvdrun --bind-exec before it execs the rank; either way
// everything the rank starts inherits it.
#pragma once

#include <string>
#include <vector>

namespace hvd::launcher {

enum class BindMode { kNone, kCore, kAuto };

// "none", "core", "auto"; false for anything else.
bool ParseBindMode(const std::string& s, BindMode* out);
const char* BindModeName(BindMode m);

// A CPU this process may run on, and the physical core it belongs to.
struct CpuInfo {
  int cpu = 0;
  int package = -1;  // physical_package_id; -1: unknown
  int core = -1;     // core_id within the package; -1: unknown (the CPU is a core of its own)
};

// The CPUs of this process's affinity mask (sched_getaffinity, so taskset and
// cgroup cpusets are honoured), ascending, with their topology read from
// <sysfs_cpu_dir>/cpuN/topology/. Empty when the mask cannot be read.
std::vector<CpuInfo> UsableCpus(const std::string& sysfs_cpu_dir = "/sys/devices/system/cpu");

// The CPUs of n ranks on a machine whose usable CPUs are `cpus`: n lists,
// one a rank, or none at all (no binding).
//   kNone: none.
//   kCore: one CPU a rank, distinct physical cores first, then their
//          hyperthread siblings; with more ranks than CPUs, round robin.
//   kAuto: when the ranks fit the CPUs, each rank a contiguous share of
//          floor(C/n) CPUs: with n at most the number of physical cores K,
//          floor(K/n) whole cores (with their siblings, so no core is split
//          between ranks); with K < n <= C, floor(C/n) CPUs taken distinct
//          cores first. With more ranks than CPUs: none.
std::vector<std::vector<int>> CpuBlocks(BindMode mode, const std::vector<CpuInfo>& cpus, int n);

// For a rank started while other ranks hold the CPU lists `taken`: the block
// of `blocks` shared (one CPU or more in common) with the fewest of them, the
// first of those. With only_free, only a block shared with none; empty when
// there is none (or no blocks).
std::vector<int> PickBlock(const std::vector<std::vector<int>>& blocks,
                           const std::vector<std::vector<int>>& taken, bool only_free);

// "0-3,8,10-11" (the list sorted); "" for none.
std::string FormatCpuList(std::vector<int> cpus);

// ---- ranks on remote hosts: hvdrun --bind-exec ----------------------------------
// hvdrun cannot see a remote host's CPUs, so a rank started there over ssh
// binds itself: the remote script (remote.h) runs this same hvdrun program
// there as
//     hvdrun --bind-exec MODE LOCAL_RANK LOCAL_SIZE VERBOSE HOST WHO -- COMMAND [ARGS...]
// which shares out the CPUs of its own affinity mask (UsableCpus, on that
// host: its CPU count, topology, cpuset) among the LOCAL_SIZE ranks of the
// host with CpuBlocks, takes block LOCAL_RANK, binds itself
// (sched_setaffinity) and execs COMMAND, which inherits the binding. Where
// the ranks do not fit (auto) or the binding fails, COMMAND runs unbound:
// never a failure of the rank.
struct BindExecArgs {
  BindMode mode = BindMode::kAuto;
  int local_rank = 0;
  int local_size = 1;
  bool verbose = false;                  // -v: the CPUs, or why none, on stderr
  std::string host;                      // the host as hvdrun names it
  std::string who;                       // "rank 3 (host h2)", for messages
  std::vector<std::string> command;
};

// The argv that runs a (program first, then "--bind-exec" ...).
std::vector<std::string> BindExecArgv(const std::string& program, const BindExecArgs& a);

// args: what follows "--bind-exec". False, with *error, for anything that is
// not what BindExecArgv writes (mode "none" included: that is never bound).
bool ParseBindExecArgs(const std::vector<std::string>& args, BindExecArgs* out, std::string* error);

// What a rank of a remote host is bound to, from its host's usable CPUs:
// cpus empty means unbound, and then note says why (for -v; "" when there
// is nothing to say).
struct BindDecision {
  std::vector<int> cpus;
  std::string note;
};
BindDecision DecideBinding(const BindExecArgs& a, const std::vector<CpuInfo>& usable);

// hvdrun --bind-exec (argv[1] is "--bind-exec"): binds this process as
// above and execs the command; returns only when it cannot (an exit code:
// 127 not found, 126 not executable, 2 bad arguments), after a message.
int RunBindExec(int argc, char** argv);

}  // namespace hvd::launcher
