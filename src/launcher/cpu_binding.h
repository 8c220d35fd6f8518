// Binding the ranks hvdrun starts on this machine to CPUs (--bind-to).
//
// Without a binding the kernel may place two ranks' busy threads on one CPU
// and leave the other idle: a rank spinning in a shared-memory wait then holds
// the CPU its peer needs to make progress. The binding is applied in the
// child between fork and exec (sched_setaffinity), so everything the rank
// starts inherits it.
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

}  // namespace hvd::launcher
