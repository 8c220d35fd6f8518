// Configuration, resolved once per context: explicit params first, then the
// environment (HVD_* variables and the launchers' own: hvdrun, torchrun, Open
// MPI, PMI/PMIx, Slurm), then defaults. Nothing else in the library reads the
// environment.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "hvd.h"

namespace hvd {

// Looks up an environment variable; returns nullptr when unset. Injected so
// tests can simulate launchers without touching the process environment.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

struct Config {
  // Topology. -1 = unknown (local_* and cross_* are then derived from host
  // names exchanged at rendezvous).
  int rank = 0;
  int size = 1;
  int local_rank = -1;
  int local_size = -1;
  int cross_rank = -1;
  int cross_size = -1;
  std::string rank_source = "none";  // params | hvdrun | torchrun | mpi | pmi | slurm | none

  // Bootstrap.
  std::string transport;        // "" = choose
  // The host transport beside a device-only one (HVD_TRANSPORT=nccl): it
  // carries the negotiation and host tensors. HVD_CPU_TRANSPORT, else
  // HOROVOD_CPU_OPERATIONS; "" = choose as for any job (gloo, or mpi under
  // mpirun). Ignored where the transport is not device-only.
  std::string cpu_transport;
  std::string transport_path;   // extra plugin folders (HVD_TRANSPORT_PATH, ':'-separated)
  std::string rendezvous_addr;  // host:port of a store to join
  bool host_store = false;      // this rank hosts the store at rendezvous_addr (torchrun style)
  std::string secret;           // hex
  hvd_oob_allgather_fn oob_allgather = nullptr;
  void* oob_user = nullptr;
  std::string network_interface;
  std::string hostname;
  void* mpi_comm = nullptr;

  // Engine.
  int64_t fusion_threshold = 128ll << 20;
  double cycle_time_ms = 1.0;
  int cache_capacity = 1024;
  double stall_warning_s = 60.0;
  double stall_shutdown_s = 300.0;
  double start_timeout_s = 60.0;
  double transport_timeout_s = 30.0;
  // HVD_PEER_TIMEOUT / params.peer_timeout_s: a peer that has not entered
  // the negotiation for this long is declared silent (stopped or cut off);
  // <= 0 = off. Only where the transport can change its limit per call
  // (hvd_transport_t::set_timeout) and while below transport_timeout_s.
  double peer_timeout_s = 10.0;
  std::string timeline_path;
  // HVD_TIMELINE_MARK_CYCLES (or HOROVOD_TIMELINE_MARK_CYCLES): the timeline
  // started at init also marks the start of every cycle.
  bool timeline_mark_cycles = false;
  // HVD_FLIGHT_RECORDER_SIZE: the last operations each rank keeps for a
  // dump (0 = off); HVD_FLIGHT_RECORDER_DIR: where dumps go ("" = only on
  // request to a named file). docs/flight-recorder.md.
  int64_t flight_recorder_size = 2000;
  std::string flight_recorder_dir;

  // Memory the context keeps for reuse (environment only).
  // HVD_FUSION_BUFFER_INITIAL: bytes of fusion buffer allocated and faulted
  // in at start (at most fusion_threshold), so the first steps do not pay
  // for page faults; it grows on demand beyond that.
  int64_t fusion_buffer_initial = 4ll << 20;
  // HVD_BUFFER_POOL_SIZE: at most this many bytes of spare buffers (results
  // of released handles, reducescatter scratch) are kept for the next
  // operations; 0 keeps none.
  int64_t buffer_pool_bytes = 512ll << 20;

  // Collective algorithms (environment only: experiment settings).
  // HVD_SHM: the shared-memory collectives when every rank shares one host
  // (1 on, 0 off, -1 unset = on); HVD_GLOO_SHM / HVD_MPI_SHM, their older
  // per-transport names, count for that transport where HVD_SHM is unset.
  int shm = -1;
  int gloo_shm = -1;
  int mpi_shm = -1;
  // HVD_HIERARCHICAL: the hierarchical collectives where ranks span several
  // hosts and some host has several (1 on, 0 off, -1 unset = on).
  int hierarchical = -1;
  // HVD_REPRODUCIBLE: the canonical reduction order (docs/reproducibility.md)
  // also where it costs (1), not even where it is free (0); -1 unset.
  int reproducible = -1;
  // HVD_FUSION_IN_PLACE: a fused allreduce that runs the ring over
  // point-to-point reads and writes the tensors where they lie, with no copy
  // into and out of the fusion buffer (1 on, 0 off, -1 unset = on).
  int fusion_in_place = -1;
  // HVD_CALLER_CYCLES: a caller blocking on a handle while the background
  // thread is idle runs the cycle itself, saving two thread hand-offs
  // (1 on, 0 off, -1 unset = on; only where the transport allows any thread).
  int caller_cycles = -1;
  // HVD_PIGGYBACK: a small allreduce (or broadcast) seen in the last cycles
  // rides in the negotiation's own allreduce, so a steady-state small operation costs
  // one collective instead of two (1 on, 0 off, -1 unset = on; used only
  // where every rank has it on: see Controller's header byte 4).
  int piggyback = -1;
  // Metrics and stragglers (docs/metrics.md). HVD_STRAGGLER_WARNING: the
  // interval of the straggler warning in seconds (<= 0: none);
  // HVD_STRAGGLER_SHARE: late = by more than this share of the step;
  // HVD_METRICS_PUBLISH: publish the metrics to the store every so many
  // seconds for the launcher (hvdrun sets it; 0 = not). HVD_METRICS=0:
  // record nothing (-1 unset = on).
  int metrics = -1;
  double straggler_warning_s = 60;
  double straggler_share = 0.1;
  double metrics_publish_s = 0;
  // HVD_CUDA_ASYNC_COMPLETION (Horovod's HOROVOD_ENABLE_ASYNC_COMPLETION
  // where unset): a handle of CUDA tensors completes once its results are
  // queued on the tensors' stream, with an event marking them
  // (hvd_handle_cuda_event), instead of once the host has waited for them
  // (1 on, 0 off, -1 unset = off).
  int cuda_async_completion = -1;
  // HVD_HOST_ID: this rank's host identity for the shared-memory and
  // hierarchical paths (ranks with equal ones count as one host); unset:
  // the machine's (boot id, host name, IPC and PID namespaces). For
  // simulating hosts on one machine in tests.
  std::string host_id;
  // HVD_ALGORITHM_{ALLREDUCE,ALLGATHER,BROADCAST,ALLTOALL,REDUCESCATTER,
  // BARRIER}: force one algorithm (algorithms/collectives.h), by index
  // HVD_TRANSPORT_*; "" = auto (by size, ranks and the transport's limits).
  std::string algorithm[6];

  // Autotuning of fusion threshold and cycle time (rank 0 decides).
  bool autotune = false;             // HVD_AUTOTUNE
  std::string autotune_log;          // HVD_AUTOTUNE_LOG: CSV of every sample (rank 0)
  int autotune_warmup_samples = 3;   // HVD_AUTOTUNE_WARMUP_SAMPLES: windows ignored first
  int autotune_steps_per_sample = 10;  // HVD_AUTOTUNE_STEPS_PER_SAMPLE: busy cycles per window
  int autotune_samples = 3;          // HVD_AUTOTUNE_SAMPLES: windows scored per candidate

  // Elastic jobs (docs/elastic.md; environment only, set by hvdrun):
  // HVD_ELASTIC=1 with HVD_ELASTIC_WORKER (this worker's id) makes the
  // launcher assign rank and size at each join (the context's creation and
  // every reset); HVD_ELASTIC_TIMEOUT bounds the wait for an assignment.
  bool elastic = false;
  std::string elastic_worker;
  double elastic_timeout_s = 600.0;
  // The prefix of this communicator's rendezvous keys; "" = a fresh one per
  // context from the store's generation counter (an elastic epoch sets it).
  std::string kv_prefix;
  int64_t epoch = 0;  // the elastic epoch this configuration was formed in

  // Logging.
  int log_level = HVD_LOG_WARNING;
  hvd_log_fn log_fn = nullptr;
  void* log_user = nullptr;

  // One line per setting, for HVD_LOG_LEVEL=debug.
  std::string ToString() const;
};

// Validates the params struct (struct_size, mask bits) and resolves every
// setting. params may be NULL.
Result<Config> ResolveConfig(const hvd_params_t* params, const EnvLookup& env);

}  // namespace hvd
