// The topology source: rank, size and the local and cross topology from
// params, else from the first launcher whose variables are set (hvdrun,
// torchrun, Open MPI, PMIx/PMI, Slurm, a Kubernetes operator's pod); and
// where a launcher says the rendezvous store is (docs/kubernetes.md).
#include <cstdlib>
#include <sstream>
#include <utility>

#include "core/config/sources.h"

namespace hvd::config {
namespace {

std::string EnvStr(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Returns true if the variable is set (and parsed).
Result<bool> EnvInt(const EnvLookup& env, const char* name, int64_t* out) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return false;
  HVD_CHECK(ParseInteger(name, v, out));
  return true;
}

// A launcher's view of the topology. Any of the fields may be missing (-1).
struct Topology {
  int64_t rank = -1, size = -1, local_rank = -1, local_size = -1, cross_rank = -1,
          cross_size = -1;
};

// Slurm's SLURM_TASKS_PER_NODE looks like "2(x3),1": tasks per node, in node
// order. Returns the count for node index `node`, or -1.
int64_t SlurmTasksOnNode(const std::string& spec, int64_t node) {
  std::stringstream ss(spec);
  std::string item;
  int64_t index = 0;
  while (std::getline(ss, item, ',')) {
    int64_t tasks = std::atoll(item.c_str());
    int64_t repeat = 1;
    size_t x = item.find("(x");
    if (x != std::string::npos) repeat = std::atoll(item.c_str() + x + 2);
    if (node < index + repeat) return tasks;
    index += repeat;
  }
  return -1;
}

// torchrun gives the node's index (GROUP_RANK): the cross rank where every
// node runs the same number of ranks.
void TorchrunCross(const EnvLookup&, Topology* t) {
  if (t->cross_rank >= 0 && t->local_size > 0 && t->size % t->local_size == 0) {
    t->cross_size = t->size / t->local_size;
  } else {
    t->cross_rank = -1;
  }
}

void SlurmLocal(const EnvLookup& env, Topology* t) {
  std::string per_node = EnvStr(env, "SLURM_STEP_TASKS_PER_NODE");
  if (per_node.empty()) per_node = EnvStr(env, "SLURM_TASKS_PER_NODE");
  if (!per_node.empty() && t->cross_rank >= 0) {
    t->local_size = SlurmTasksOnNode(per_node, t->cross_rank);
  }
  // Cross rank (index among ranks with the same local rank) equals the
  // node index only when every node runs the same number of tasks.
  if (t->cross_size > 0 && t->size != t->cross_size * t->local_size) {
    t->cross_rank = t->cross_size = -1;
  }
}

// A Kubernetes pod started without a launcher (PyTorchJob, Trainer v2 and
// JobSet pods): one rank per pod, each pod its own host.
void KubernetesPod(const EnvLookup&, Topology* t) {
  t->local_rank = 0;
  t->local_size = 1;
  t->cross_rank = t->rank;
  t->cross_size = t->size;
}

// One launcher: its variables (rank and size required, the rest optional),
// in the order they are tried.
struct Launcher {
  const char* source;  // Config::rank_source
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* cross_rank;
  const char* cross_size;
  void (*adjust)(const EnvLookup& env, Topology* t);  // derived fields, or nullptr
};

const Launcher kLaunchers[] = {
    {"hvdrun", "HVD_RANK", "HVD_SIZE", "HVD_LOCAL_RANK", "HVD_LOCAL_SIZE", "HVD_CROSS_RANK",
     "HVD_CROSS_SIZE", nullptr},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", nullptr,
     TorchrunCross},
    {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr, nullptr},
    {"pmi", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE", nullptr, nullptr,
     nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr, nullptr,
     nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "SLURM_NODEID",
     "SLURM_NNODES", SlurmLocal},
    // Kubeflow Trainer v2 / PyTorchJob (torchrun's PET_* arguments), then an
    // Indexed Job or JobSet whose manifest sets WORLD_SIZE.
    {"kubernetes", "PET_NODE_RANK", "PET_NNODES", nullptr, nullptr, nullptr, nullptr,
     KubernetesPod},
    {"kubernetes", "JOB_COMPLETION_INDEX", "WORLD_SIZE", nullptr, nullptr, nullptr, nullptr,
     KubernetesPod},
};

// PET_NPROC_PER_NODE > 1 asks for several ranks per pod, which torchrun (or
// hvdrun) starts; a process the operator started itself is one rank, and the
// operator's RANK then counts pods, not ranks.
Status CheckRanksPerPod(const EnvLookup& env, const std::string& source) {
  if (source != "kubernetes" && !(source == "torchrun" && env("LOCAL_RANK") == nullptr)) {
    return Status::Ok();
  }
  const std::string per_node = EnvStr(env, "PET_NPROC_PER_NODE");
  int64_t n = 1;
  if (per_node.empty() || !ParseInteger("PET_NPROC_PER_NODE", per_node, &n).ok() || n <= 1) {
    return Status::Ok();
  }
  return InvalidArgument("PET_NPROC_PER_NODE=" + per_node + " asks for " + per_node +
                         " ranks in this pod, but this process was started without a launcher "
                         "(it would be one rank): start the pod's command with torchrun "
                         "--nproc-per-node=" + per_node + " or hvdrun -np " + per_node +
                         ", or set numProcPerNode to 1");
}

// Tries one launcher: rank and size variables are required, the rest optional.
Result<bool> ReadLauncher(const EnvLookup& env, const Launcher& l, Topology* t) {
  HVD_ASSIGN_OR_RETURN(bool has_rank, EnvInt(env, l.rank, &t->rank));
  HVD_ASSIGN_OR_RETURN(bool has_size, EnvInt(env, l.size, &t->size));
  if (!has_rank || !has_size) return false;
  if (l.local_rank) HVD_CHECK(EnvInt(env, l.local_rank, &t->local_rank).status());
  if (l.local_size) HVD_CHECK(EnvInt(env, l.local_size, &t->local_size).status());
  if (l.cross_rank) HVD_CHECK(EnvInt(env, l.cross_rank, &t->cross_rank).status());
  if (l.cross_size) HVD_CHECK(EnvInt(env, l.cross_size, &t->cross_size).status());
  if (l.adjust) l.adjust(env, t);
  return true;
}

// Rank and size from params (both or neither). Returns whether given.
Result<bool> RankFromParams(const hvd_params_t* params, Topology* t) {
  int32_t v = 0;
  HVD_ASSIGN_OR_RETURN(bool p_rank, HVD_READ_PARAM(params, HVD_PARAM_RANK, rank, &v));
  if (p_rank) t->rank = v;
  HVD_ASSIGN_OR_RETURN(bool p_size, HVD_READ_PARAM(params, HVD_PARAM_SIZE, size, &v));
  if (p_size) t->size = v;
  if (p_rank != p_size) {
    return InvalidArgument("params: set both rank and size, or neither");
  }
  return p_rank;
}

// Explicit local/cross params override whatever the launcher said.
Status LocalFromParams(const hvd_params_t* params, Topology* t) {
  int32_t v = 0;
  HVD_ASSIGN_OR_RETURN(bool p, HVD_READ_PARAM(params, HVD_PARAM_LOCAL_RANK, local_rank, &v));
  if (p) t->local_rank = v;
  HVD_ASSIGN_OR_RETURN(p, HVD_READ_PARAM(params, HVD_PARAM_LOCAL_SIZE, local_size, &v));
  if (p) t->local_size = v;
  HVD_ASSIGN_OR_RETURN(p, HVD_READ_PARAM(params, HVD_PARAM_CROSS_RANK, cross_rank, &v));
  if (p) t->cross_rank = v;
  HVD_ASSIGN_OR_RETURN(p, HVD_READ_PARAM(params, HVD_PARAM_CROSS_SIZE, cross_size, &v));
  if (p) t->cross_size = v;
  return Status::Ok();
}

// Checks rank and size, drops inconsistent local and cross values, and
// stores the result.
Status Store(Topology t, const std::string& source, Config* c) {
  if (t.size < 1 || t.size > (1 << 24)) {
    return InvalidArgument("size " + std::to_string(t.size) + " (from " + source +
                           ") must be between 1 and 16777216");
  }
  if (t.rank < 0 || t.rank >= t.size) {
    return InvalidArgument("rank " + std::to_string(t.rank) + " (from " + source +
                           ") is outside [0, " + std::to_string(t.size) + ")");
  }
  if (t.size == 1) t = Topology{0, 1, 0, 1, 0, 1};
  bool local_ok = t.local_size >= 1 && t.local_rank >= 0 && t.local_rank < t.local_size &&
                  t.local_size <= t.size;
  if (!local_ok) t.local_rank = t.local_size = -1;
  bool cross_ok = t.cross_size >= 1 && t.cross_rank >= 0 && t.cross_rank < t.cross_size;
  if (!cross_ok) t.cross_rank = t.cross_size = -1;

  c->rank = static_cast<int>(t.rank);
  c->size = static_cast<int>(t.size);
  c->local_rank = static_cast<int>(t.local_rank);
  c->local_size = static_cast<int>(t.local_size);
  c->cross_rank = static_cast<int>(t.cross_rank);
  c->cross_size = static_cast<int>(t.cross_size);
  c->rank_source = source;
  return Status::Ok();
}

}  // namespace

Status FromTopology(const hvd_params_t* params, const EnvLookup& env, Config* c) {
  Topology t;
  std::string source;
  HVD_ASSIGN_OR_RETURN(bool found, RankFromParams(params, &t));
  if (found) source = "params";
  for (const Launcher& l : kLaunchers) {
    if (found) break;
    HVD_ASSIGN_OR_RETURN(found, ReadLauncher(env, l, &t));
    if (found) source = l.source;
  }
  if (!found) {
    t = Topology{0, 1, 0, 1, 0, 1};
    source = "none";
  }
  HVD_CHECK(CheckRanksPerPod(env, source));
  HVD_CHECK(LocalFromParams(params, &t));
  return Store(t, source, c);
}

bool LauncherStoreAddress(const EnvLookup& env, std::string* addr) {
  for (const auto& [host_var, port_var] : {std::pair{"MASTER_ADDR", "MASTER_PORT"},
                                           std::pair{"PET_MASTER_ADDR", "PET_MASTER_PORT"}}) {
    const std::string host = EnvStr(env, host_var);
    const std::string port = EnvStr(env, port_var);
    if (!host.empty() && !port.empty()) {
      *addr = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
      return true;
    }
  }
  return false;
}

}  // namespace hvd::config
