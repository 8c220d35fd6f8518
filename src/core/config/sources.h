// The sources of a configuration, one function each, applied by
// ResolveConfig in precedence order: a later source fills only what the
// earlier ones left (Resolution::from), and Config's initialisers are the
// defaults under them all.
#pragma once

#include "common/status.h"
#include "core/config/config.h"
#include "core/config/settings.h"
#include "hvd.h"

namespace hvd::config {

// struct_size and mask: an error for a struct too small or unknown bits.
Status CheckParams(const hvd_params_t* params);

// Rank, size and the local and cross topology: params, else the first
// launcher whose variables are set (hvdrun, torchrun, Open MPI, PMIx/PMI,
// Slurm), else a world of one (launchers.cc).
Status FromTopology(const hvd_params_t* params, const EnvLookup& env, Config* c);

// host:port of the store rank 0 hosts, from MASTER_ADDR/MASTER_PORT
// (torchrun, PyTorchJob) or PET_MASTER_ADDR/PET_MASTER_PORT (Kubeflow
// Trainer v2); false when neither pair is set (launchers.cc).
bool LauncherStoreAddress(const EnvLookup& env, std::string* addr);

// The params fields the caller's mask sets, and the callbacks (params only).
Status FromParams(const hvd_params_t* params, Resolution* r);

// The HVD_* variables.
Status FromHvdEnv(const EnvLookup& env, Resolution* r);

// Horovod's HOROVOD_* names where the HVD_* one is unset, and Horovod's
// settings with no single HVD_* counterpart.
Status FromHorovodEnv(const EnvLookup& env, Resolution* r);

// The launchers' variables beyond the topology: torchrun's store address.
void FromLauncherEnv(const EnvLookup& env, Resolution* r);

// Defaults that need the machine: the host name.
void FromDefaults(Resolution* r);

// An elastic job (HVD_ELASTIC=1, set by hvdrun): its worker id and timeout,
// and the settings it cannot be combined with.
Status FromElasticEnv(const EnvLookup& env, Config* c);

}  // namespace hvd::config
