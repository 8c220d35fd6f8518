// hvdrun: starts the ranks of an hvd job. See docs/launcher.md.
#include <cstdio>
#include <string>

#include "hvd.h"
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

int main(int argc, char** argv) {
  using namespace hvd::launcher;
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
