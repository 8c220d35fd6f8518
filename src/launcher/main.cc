// hvdrun: starts the ranks of an hvd job. See docs/launcher.md.
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "hvd.h"
#include "launcher/cpu_binding.h"
#include "launcher/elastic.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/mpi_delegate.h"
#include "launcher/options.h"
#include "launcher/output.h"

namespace {

int UsageError(const std::string& msg) {
  hvd::launcher::WriteAll(2, "hvdrun: error: " + msg + "\nTry 'hvdrun --help' for the options.\n");
  return 2;
}

// torchrun-style: this node's nproc_per_node ranks of nnodes x nproc_per_node.
hvd::launcher::Plan TorchrunPlan(const hvd::launcher::Options& o) {
  hvd::launcher::Plan plan;
  plan.size = o.np;
  plan.hosts.push_back({"localhost", o.nproc_per_node});
  for (int l = 0; l < o.nproc_per_node; ++l) {
    hvd::launcher::RankSlot r;
    r.rank = o.node_rank * o.nproc_per_node + l;
    r.host_index = 0;
    r.local_rank = l;
    r.local_size = o.nproc_per_node;
    r.cross_rank = o.node_rank;
    r.cross_size = o.nnodes;
    plan.ranks.push_back(r);
  }
  return plan;
}

}  // namespace

// Folders the library looks in for transport plugins, as hvdrun can tell:
// $HVD_TRANSPORT_PATH, then where libhvd.so lives beside this program.
std::vector<std::string> PluginDirs() {
  std::vector<std::string> dirs;
  if (const char* p = std::getenv("HVD_TRANSPORT_PATH")) {
    std::stringstream ss(p);
    std::string d;
    while (std::getline(ss, d, ':')) {
      if (!d.empty()) dirs.push_back(d);
    }
  }
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    std::string exe(buf, static_cast<size_t>(n));
    std::string bin = exe.substr(0, exe.rfind('/'));
    std::string prefix = bin.substr(0, bin.rfind('/'));
    for (const std::string& d : {prefix + "/lib", prefix + "/" + HVD_INSTALL_LIBDIR}) {
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
  }
  return dirs;
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// --check-build: horovodrun's report, for what hvdrun can see of this build
// (the frameworks are the Python package's business).
std::string CheckBuildText() {
  const std::vector<std::string> dirs = PluginDirs();
  std::vector<std::string> found;  // transports with a plugin file
  bool have_lib = false;
  for (const std::string& d : dirs) {
    have_lib = have_lib || IsFile(d + "/libhvd.so");
    DIR* dir = ::opendir(d.c_str());
    if (dir == nullptr) continue;
    const std::string pre = "libhvd_transport_", post = ".so";
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name.size() <= pre.size() + post.size() || name.compare(0, pre.size(), pre) != 0 ||
          name.compare(name.size() - post.size(), post.size(), post) != 0) {
        continue;
      }
      std::string t = name.substr(pre.size(), name.size() - pre.size() - post.size());
      if (IsFile(d + "/" + name) && std::find(found.begin(), found.end(), t) == found.end()) {
        found.push_back(t);
      }
    }
    ::closedir(dir);
  }
  std::vector<std::string> names = {"gloo", "mpi", "ucx", "nccl"};
  std::sort(found.begin(), found.end());
  for (const std::string& t : found) {
    if (std::find(names.begin(), names.end(), t) == names.end()) names.push_back(t);
  }
  auto mark = [&](const std::string& t) {
    return std::find(found.begin(), found.end(), t) != found.end() ? "[X] " : "[ ] ";
  };
  std::string s = "hvd v" + std::to_string(HVD_VERSION_MAJOR) + "." +
                  std::to_string(HVD_VERSION_MINOR) + "." + std::to_string(HVD_VERSION_PATCH) +
                  ":\n\nAvailable Frameworks:\n    [" + (have_lib ? "X" : " ") +
                  "] C API (libhvd.so)\n"
                  "    (Python: hvd.tensorflow, hvd.torch, hvd.keras, ... as installed; see "
                  "hvd.mpi_built(), hvd.gloo_built())\n\nAvailable Controllers:\n"
                  "    [X] hvd (over any transport below)\n\nAvailable Tensor Operations:\n"
                  "    [X] local (built in: one process)\n";
  for (const std::string& t : names) s += "    " + std::string(mark(t)) + t + "\n";
  s += "\nPlugins looked for in:";
  for (const std::string& d : dirs) s += " " + d;
  s += "\n";
  return s;
}

int main(int argc, char** argv) {
  using namespace hvd::launcher;
  // Not an option of the command line: what the remote script runs to bind
  // a rank on its host (cpu_binding.h). It binds and execs the rank.
  if (argc >= 2 && std::string(argv[1]) == "--bind-exec") return RunBindExec(argc, argv);
  ParseResult pr = ParseArgs(argc, argv);
  switch (pr.outcome) {
    case ParseOutcome::kHelp:
      WriteAll(1, UsageText());
      return 0;
    case ParseOutcome::kVersion:
      WriteAll(1, "hvdrun " + std::to_string(HVD_VERSION_MAJOR) + "." +
                      std::to_string(HVD_VERSION_MINOR) + "." + std::to_string(HVD_VERSION_PATCH) +
                      "\n");
      return 0;
    case ParseOutcome::kCheckBuild:
      WriteAll(1, CheckBuildText());
      return 0;
    case ParseOutcome::kUsageError:
      return UsageError(pr.error);
    case ParseOutcome::kRun:
      break;
  }
  const Options& o = pr.options;
  if (o.elastic) return RunElastic(o);  // membership decided as the job goes
  Plan plan;
  if (o.torchrun_style) {
    plan = TorchrunPlan(o);
  } else {
    auto p = BuildPlan(o.hosts, o.np);
    if (!p.ok()) return UsageError(p.status().message());
    plan = std::move(p).value();
  }
  if (o.transport == "mpi") return RunWithMpirun(o);  // MPI forms the job: mpirun starts it
  return RunJob(o, plan);
}
