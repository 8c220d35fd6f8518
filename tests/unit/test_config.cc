// Configuration: params, HVD_* environment, launcher environments, defaults.
#include <gtest/gtest.h>

#include <map>

#include "core/config/config.h"

namespace hvd {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

Config MustResolve(const hvd_params_t* p, std::map<std::string, std::string> env) {
  auto r = ResolveConfig(p, FakeEnv(std::move(env)));
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : Config{};
}

TEST(Config, NoLauncherIsAWorldOfOne) {
  Config c = MustResolve(nullptr, {});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.size, 1);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.local_size, 1);
  EXPECT_EQ(c.cross_size, 1);
  EXPECT_EQ(c.rank_source, "none");
  EXPECT_EQ(c.fusion_threshold, 128ll << 20);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 1.0);
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_DOUBLE_EQ(c.stall_warning_s, 60.0);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_s, 300.0);
}

TEST(Config, Hvdrun) {
  Config c = MustResolve(nullptr, {{"HVD_RANK", "3"}, {"HVD_SIZE", "4"}, {"HVD_LOCAL_RANK", "1"},
                                   {"HVD_LOCAL_SIZE", "2"}, {"HVD_CROSS_RANK", "1"},
                                   {"HVD_CROSS_SIZE", "2"}, {"HVD_RENDEZVOUS_ADDR", "10.0.0.1:99"},
                                   {"HVD_SECRET", "abcd"}, {"RANK", "0"}, {"WORLD_SIZE", "9"}});
  EXPECT_EQ(c.rank_source, "hvdrun");
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.size, 4);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 2);
  EXPECT_EQ(c.cross_rank, 1);
  EXPECT_EQ(c.cross_size, 2);
  EXPECT_EQ(c.rendezvous_addr, "10.0.0.1:99");
  EXPECT_EQ(c.secret, "abcd");
  EXPECT_FALSE(c.host_store);
}

TEST(Config, Torchrun) {
  Config c = MustResolve(nullptr, {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                   {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"},
                                   {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(c.rank_source, "torchrun");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 4);
  EXPECT_EQ(c.cross_rank, 1);
  EXPECT_EQ(c.cross_size, 2);
  EXPECT_EQ(c.rendezvous_addr, "node0:29500");
  EXPECT_FALSE(c.host_store);
  Config c0 = MustResolve(nullptr, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "::1"},
                                    {"MASTER_PORT", "1234"}});
  EXPECT_TRUE(c0.host_store);
  EXPECT_EQ(c0.rendezvous_addr, "[::1]:1234");
}

TEST(Config, OpenMpi) {
  Config c = MustResolve(nullptr, {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  EXPECT_EQ(c.rank_source, "mpi");
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 3);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.local_size, 1);
  EXPECT_EQ(c.cross_rank, -1);  // derived at rendezvous from host names
}

TEST(Config, PmiAndPmix) {
  Config c = MustResolve(nullptr, {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(c.rank_source, "pmi");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 2);
  Config x = MustResolve(nullptr, {{"PMIX_RANK", "3"}, {"PMIX_SIZE", "4"}});
  EXPECT_EQ(x.rank_source, "pmi");
  EXPECT_EQ(x.rank, 3);
}

TEST(Config, Slurm) {
  Config c = MustResolve(nullptr, {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"},
                                   {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                                   {"SLURM_NNODES", "3"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}});
  EXPECT_EQ(c.rank_source, "slurm");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.size, 6);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 2);
  EXPECT_EQ(c.cross_rank, 2);
  EXPECT_EQ(c.cross_size, 3);
  // Uneven nodes: the cross communicator is derived later instead.
  Config u = MustResolve(nullptr, {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"},
                                   {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"},
                                   {"SLURM_NNODES", "2"}, {"SLURM_TASKS_PER_NODE", "2,1"}});
  EXPECT_EQ(u.local_size, 1);
  EXPECT_EQ(u.cross_rank, -1);
}

TEST(Config, PrecedenceHvdrunOverTorchrunOverMpiOverSlurm) {
  EXPECT_EQ(MustResolve(nullptr, {{"RANK", "1"}, {"WORLD_SIZE", "2"},
                                  {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}})
                .rank_source,
            "torchrun");
  EXPECT_EQ(MustResolve(nullptr, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}})
                .rank_source,
            "mpi");
}

TEST(Config, ParamsWinOverEnvironment) {
  hvd_params_t p = HVD_PARAMS_INIT;
  p.rank = 1;
  p.size = 2;
  p.cycle_time_ms = 7.5;
  p.fusion_threshold_bytes = 0;
  p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE | HVD_PARAM_CYCLE_TIME | HVD_PARAM_FUSION_THRESHOLD;
  Config c = MustResolve(&p, {{"HVD_RANK", "0"}, {"HVD_SIZE", "4"}, {"HVD_CYCLE_TIME", "3"},
                              {"HVD_CACHE_CAPACITY", "17"}});
  EXPECT_EQ(c.rank_source, "params");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 2);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 7.5);
  EXPECT_EQ(c.fusion_threshold, 0);
  EXPECT_EQ(c.cache_capacity, 17);  // not in params: from the environment
}

TEST(Config, EnvironmentKnobs) {
  Config c = MustResolve(nullptr, {{"HVD_FUSION_THRESHOLD", "1048576"}, {"HVD_CYCLE_TIME", "2.5"},
                                   {"HVD_CACHE_CAPACITY", "0"}, {"HVD_STALL_WARNING_TIME", "5"},
                                   {"HVD_STALL_SHUTDOWN_TIME", "0"}, {"HVD_LOG_LEVEL", "debug"},
                                   {"HVD_TIMELINE", "/tmp/t.json"}, {"HVD_TRANSPORT", "gloo"}});
  EXPECT_EQ(c.fusion_threshold, 1048576);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 2.5);
  EXPECT_EQ(c.cache_capacity, 0);
  EXPECT_DOUBLE_EQ(c.stall_warning_s, 5);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_s, 0);
  EXPECT_EQ(c.log_level, HVD_LOG_DEBUG);
  EXPECT_EQ(c.timeline_path, "/tmp/t.json");
  EXPECT_EQ(c.transport, "gloo");
  EXPECT_NE(c.ToString().find("cycle_time_ms=2.5"), std::string::npos);
}

TEST(Config, BadValuesAreClearErrors) {
  auto bad = [](std::map<std::string, std::string> env, const char* needle) {
    auto r = ResolveConfig(nullptr, FakeEnv(std::move(env)));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad({{"HVD_CYCLE_TIME", "fast"}}, "HVD_CYCLE_TIME");
  bad({{"HVD_FUSION_THRESHOLD", "-1"}}, "fusion threshold");
  bad({{"HVD_LOG_LEVEL", "loud"}}, "HVD_LOG_LEVEL");
  bad({{"HVD_RANK", "4"}, {"HVD_SIZE", "4"}}, "rank 4");
  bad({{"HVD_RANK", "x"}, {"HVD_SIZE", "4"}}, "HVD_RANK");
  bad({{"HVD_START_TIMEOUT", "0"}}, "start_timeout_s");
  bad({{"HVD_AUTOTUNE", "maybe"}}, "HVD_AUTOTUNE");
  bad({{"HVD_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}, "HVD_AUTOTUNE_STEPS_PER_SAMPLE");
}

TEST(Config, HorovodVariables) {
  // A Horovod job's settings count under Horovod's names, in Horovod's units
  // (fusion threshold in bytes, cycle time in ms, stall times in seconds).
  Config c = MustResolve(nullptr, {{"HOROVOD_FUSION_THRESHOLD", "33554432"},
                                   {"HOROVOD_CYCLE_TIME", "3.5"},
                                   {"HOROVOD_CACHE_CAPACITY", "77"},
                                   {"HOROVOD_TIMELINE", "/tmp/h.json"},
                                   {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                                   {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                                   {"HOROVOD_STALL_CHECK_TIME_SECONDS", "12"},
                                   {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "34"},
                                   {"HOROVOD_GLOO_TIMEOUT_SECONDS", "45"},
                                   {"HOROVOD_AUTOTUNE", "1"},
                                   {"HOROVOD_AUTOTUNE_LOG", "/tmp/a.csv"},
                                   {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"},
                                   {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "6"},
                                   {"HOROVOD_LOG_LEVEL", "TRACE"}});
  EXPECT_EQ(c.fusion_threshold, 33554432);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 3.5);
  EXPECT_EQ(c.cache_capacity, 77);
  EXPECT_EQ(c.timeline_path, "/tmp/h.json");
  EXPECT_TRUE(c.timeline_mark_cycles);
  EXPECT_EQ(c.hierarchical, 1);
  EXPECT_DOUBLE_EQ(c.stall_warning_s, 12);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_s, 34);
  EXPECT_DOUBLE_EQ(c.transport_timeout_s, 45);
  EXPECT_TRUE(c.autotune);
  EXPECT_EQ(c.autotune_log, "/tmp/a.csv");
  EXPECT_EQ(c.autotune_warmup_samples, 5);
  EXPECT_EQ(c.autotune_steps_per_sample, 6);
  EXPECT_EQ(c.log_level, HVD_LOG_TRACE);

  // Horovod's CPU operations (or controller) choose the transport; its stall
  // switch turns both limits off unless one is given.
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_CPU_OPERATIONS", "MPI"}}).transport, "mpi");
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_CONTROLLER", "gloo"}}).transport, "gloo");
  EXPECT_EQ(MustResolve(nullptr, {{"HVD_TRANSPORT", "ucx"}, {"HOROVOD_CPU_OPERATIONS", "mpi"}})
                .transport,
            "ucx");
  // Beside a given transport (a device-only one, nccl), Horovod's CPU
  // operations name the host transport, unless HVD_CPU_TRANSPORT does.
  Config nccl = MustResolve(nullptr, {{"HVD_TRANSPORT", "nccl"}, {"HOROVOD_CPU_OPERATIONS", "mpi"}});
  EXPECT_EQ(nccl.transport, "nccl");
  EXPECT_EQ(nccl.cpu_transport, "mpi");
  EXPECT_EQ(MustResolve(nullptr, {{"HVD_TRANSPORT", "nccl"}, {"HVD_CPU_TRANSPORT", "ucx"},
                                  {"HOROVOD_CPU_OPERATIONS", "mpi"}})
                .cpu_transport,
            "ucx");
  EXPECT_EQ(MustResolve(nullptr, {{"HVD_TRANSPORT", "nccl"}}).cpu_transport, "");
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_CPU_OPERATIONS", "gloo"}}).cpu_transport, "");
  auto ccl = ResolveConfig(nullptr, FakeEnv({{"HOROVOD_CPU_OPERATIONS", "ccl"}}));
  ASSERT_FALSE(ccl.ok());
  EXPECT_NE(ccl.status().message().find("HOROVOD_CPU_OPERATIONS='ccl'"), std::string::npos)
      << ccl.status().message();
  Config off = MustResolve(nullptr, {{"HOROVOD_STALL_CHECK_DISABLE", "1"}});
  EXPECT_DOUBLE_EQ(off.stall_warning_s, 0);
  EXPECT_DOUBLE_EQ(off.stall_shutdown_s, 0);
  Config off_but = MustResolve(nullptr, {{"HOROVOD_STALL_CHECK_DISABLE", "1"},
                                         {"HVD_STALL_SHUTDOWN_TIME", "99"}});
  EXPECT_DOUBLE_EQ(off_but.stall_warning_s, 0);
  EXPECT_DOUBLE_EQ(off_but.stall_shutdown_s, 99);

  // Unset: the defaults.
  Config d = MustResolve(nullptr, {});
  EXPECT_FALSE(d.timeline_mark_cycles);
  EXPECT_EQ(d.hierarchical, -1);
  EXPECT_EQ(d.timeline_path, "");

  // HVD_* wins over HOROVOD_*; an empty HVD_* counts as unset.
  Config w = MustResolve(nullptr, {{"HVD_FUSION_THRESHOLD", "1024"},
                                   {"HOROVOD_FUSION_THRESHOLD", "2048"},
                                   {"HVD_CYCLE_TIME", "2"}, {"HOROVOD_CYCLE_TIME", "9"},
                                   {"HVD_CACHE_CAPACITY", ""}, {"HOROVOD_CACHE_CAPACITY", "5"},
                                   {"HVD_TIMELINE_MARK_CYCLES", "0"},
                                   {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                                   {"HVD_HIERARCHICAL", "0"},
                                   {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                                   {"HVD_STALL_WARNING_TIME", "7"},
                                   {"HOROVOD_STALL_CHECK_TIME_SECONDS", "8"},
                                   {"HVD_LOG_LEVEL", "error"}, {"HOROVOD_LOG_LEVEL", "debug"},
                                   {"HVD_AUTOTUNE", "0"}, {"HOROVOD_AUTOTUNE", "1"}});
  EXPECT_EQ(w.fusion_threshold, 1024);
  EXPECT_DOUBLE_EQ(w.cycle_time_ms, 2);
  EXPECT_EQ(w.cache_capacity, 5);
  EXPECT_FALSE(w.timeline_mark_cycles);
  EXPECT_EQ(w.hierarchical, 0);
  EXPECT_DOUBLE_EQ(w.stall_warning_s, 7);
  EXPECT_EQ(w.log_level, HVD_LOG_ERROR);
  EXPECT_FALSE(w.autotune);

  // Horovod's FATAL is hvd's error; HOROVOD_TIMELINE=DYNAMIC starts none at
  // init; the hierarchical switches: on if either is on, off if those set are.
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_LOG_LEVEL", "FATAL"}}).log_level, HVD_LOG_ERROR);
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_TIMELINE", "DYNAMIC"}}).timeline_path, "");
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"},
                                  {"HOROVOD_HIERARCHICAL_ALLGATHER", "1"}})
                .hierarchical,
            1);
  EXPECT_EQ(MustResolve(nullptr, {{"HOROVOD_HIERARCHICAL_ALLGATHER", "0"}}).hierarchical, 0);
  EXPECT_TRUE(MustResolve(nullptr, {{"HVD_TIMELINE_MARK_CYCLES", "yes"}}).timeline_mark_cycles);

  // The same checks, naming the variable given.
  auto bad = [](std::map<std::string, std::string> env, const char* needle) {
    auto r = ResolveConfig(nullptr, FakeEnv(std::move(env)));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad({{"HOROVOD_CYCLE_TIME", "fast"}}, "HOROVOD_CYCLE_TIME='fast'");
  bad({{"HOROVOD_CYCLE_TIME", "20000"}}, "cycle time must be in [0, 10000] ms");
  bad({{"HOROVOD_FUSION_THRESHOLD", "-1"}}, "fusion threshold");
  bad({{"HOROVOD_FUSION_THRESHOLD", "64MB"}}, "HOROVOD_FUSION_THRESHOLD='64MB'");
  bad({{"HOROVOD_CACHE_CAPACITY", "-2"}}, "cache capacity");
  bad({{"HOROVOD_LOG_LEVEL", "loud"}}, "HOROVOD_LOG_LEVEL='loud'");
  bad({{"HOROVOD_AUTOTUNE", "maybe"}}, "HOROVOD_AUTOTUNE='maybe'");
  bad({{"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE");
  bad({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "2"}}, "HOROVOD_HIERARCHICAL_ALLREDUCE='2'");
  bad({{"HOROVOD_TIMELINE_MARK_CYCLES", "x"}}, "HOROVOD_TIMELINE_MARK_CYCLES='x'");
  bad({{"HOROVOD_STALL_CHECK_TIME_SECONDS", "soon"}}, "HOROVOD_STALL_CHECK_TIME_SECONDS='soon'");
}

TEST(Config, BufferSizes) {
  Config d = MustResolve(nullptr, {});
  EXPECT_EQ(d.fusion_buffer_initial, 4ll << 20);
  EXPECT_EQ(d.buffer_pool_bytes, 512ll << 20);
  Config c = MustResolve(nullptr, {{"HVD_FUSION_BUFFER_INITIAL", "0"},
                                   {"HVD_BUFFER_POOL_SIZE", "1048576"}});
  EXPECT_EQ(c.fusion_buffer_initial, 0);
  EXPECT_EQ(c.buffer_pool_bytes, 1048576);
  EXPECT_NE(c.ToString().find("fusion_buffer_initial=0 buffer_pool_bytes=1048576"),
            std::string::npos)
      << c.ToString();
  for (const char* name : {"HVD_FUSION_BUFFER_INITIAL", "HVD_BUFFER_POOL_SIZE"}) {
    for (const char* value : {"-1", "lots", "1125899906842625"}) {  // 2^50 + 1
      auto r = ResolveConfig(nullptr, FakeEnv({{name, value}}));
      ASSERT_FALSE(r.ok()) << name << "=" << value;
      EXPECT_EQ(r.status().code(), HVD_ERR_INVALID_ARGUMENT);
      EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
    }
  }
}

TEST(Config, Autotune) {
  Config off = MustResolve(nullptr, {});
  EXPECT_FALSE(off.autotune);
  Config on = MustResolve(nullptr, {{"HVD_AUTOTUNE", "1"}, {"HVD_AUTOTUNE_LOG", "/tmp/t.csv"},
                                    {"HVD_AUTOTUNE_WARMUP_SAMPLES", "0"},
                                    {"HVD_AUTOTUNE_STEPS_PER_SAMPLE", "25"},
                                    {"HVD_AUTOTUNE_SAMPLES", "5"}});
  EXPECT_TRUE(on.autotune);
  EXPECT_EQ(on.autotune_log, "/tmp/t.csv");
  EXPECT_EQ(on.autotune_warmup_samples, 0);
  EXPECT_EQ(on.autotune_steps_per_sample, 25);
  EXPECT_EQ(on.autotune_samples, 5);
}

TEST(Config, AutotuneParamOverridesEnvironment) {
  hvd_params_t p = HVD_PARAMS_INIT;
  p.autotune = 1;
  p.mask = HVD_PARAM_AUTOTUNE;
  EXPECT_TRUE(MustResolve(&p, {}).autotune);
  EXPECT_TRUE(MustResolve(&p, {{"HVD_AUTOTUNE", "0"}}).autotune);
  p.autotune = 0;
  EXPECT_FALSE(MustResolve(&p, {{"HVD_AUTOTUNE", "1"}}).autotune);
  // The param replaces the switch only: the knobs still come from the environment,
  // and an HVD_AUTOTUNE the param overrides is not parsed.
  p.autotune = 1;
  Config c = MustResolve(&p, {{"HVD_AUTOTUNE", "maybe"}, {"HVD_AUTOTUNE_SAMPLES", "7"}});
  EXPECT_TRUE(c.autotune);
  EXPECT_EQ(c.autotune_samples, 7);
  EXPECT_NE(c.ToString().find("autotune=on"), std::string::npos);
  // Bit not set: the environment applies as before, whatever the field holds.
  p.mask = 0;
  EXPECT_TRUE(MustResolve(&p, {{"HVD_AUTOTUNE", "on"}}).autotune);
  EXPECT_FALSE(MustResolve(&p, {}).autotune);

  for (int32_t bad : {2, -1}) {
    p.autotune = bad;
    p.mask = HVD_PARAM_AUTOTUNE;
    auto r = ResolveConfig(&p, FakeEnv({}));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(r.status().message().find("params.autotune is " + std::to_string(bad)),
              std::string::npos)
        << r.status().message();
  }
}

TEST(Config, TransportPathParamOverridesEnvironment) {
  EXPECT_EQ(MustResolve(nullptr, {}).transport_path, "");
  EXPECT_EQ(MustResolve(nullptr, {{"HVD_TRANSPORT_PATH", "/env/a:/env/b"}}).transport_path,
            "/env/a:/env/b");
  hvd_params_t p = HVD_PARAMS_INIT;
  p.transport_path = "/params/plugins";
  p.mask = HVD_PARAM_TRANSPORT_PATH;
  Config c = MustResolve(&p, {{"HVD_TRANSPORT_PATH", "/env/a"}});
  EXPECT_EQ(c.transport_path, "/params/plugins");
  EXPECT_NE(c.ToString().find("transport_path=/params/plugins"), std::string::npos);
  // NULL or "" with the bit set: the default (next to libhvd.so), not the environment's.
  p.transport_path = "";
  EXPECT_EQ(MustResolve(&p, {{"HVD_TRANSPORT_PATH", "/env/a"}}).transport_path, "");
  p.transport_path = nullptr;
  EXPECT_EQ(MustResolve(&p, {{"HVD_TRANSPORT_PATH", "/env/a"}}).transport_path, "");
  // Bit not set: the field is ignored.
  p.transport_path = "/params/plugins";
  p.mask = 0;
  EXPECT_EQ(MustResolve(&p, {{"HVD_TRANSPORT_PATH", "/env/a"}}).transport_path, "/env/a");
}

TEST(Config, ParamsStructVersioning) {
  hvd_params_t p = HVD_PARAMS_INIT;
  p.mask = 1ULL << 60;
  auto r = ResolveConfig(&p, FakeEnv({}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), HVD_ERR_UNSUPPORTED);

  // An older caller whose struct ends before cycle_time_ms.
  hvd_params_t old = HVD_PARAMS_INIT;
  old.struct_size = offsetof(hvd_params_t, cycle_time_ms);
  old.fusion_threshold_bytes = 4096;
  old.mask = HVD_PARAM_FUSION_THRESHOLD;
  Config c = MustResolve(&old, {});
  EXPECT_EQ(c.fusion_threshold, 4096);
  old.mask |= HVD_PARAM_CYCLE_TIME;  // claims a field its struct does not have
  auto r2 = ResolveConfig(&old, FakeEnv({}));
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), HVD_ERR_INVALID_ARGUMENT);

  // A caller built before autotune and transport_path (its struct ends at
  // transport_timeout_s): fine while it leaves their bits clear, a clear error
  // naming the field if it sets one.
  hvd_params_t v0 = HVD_PARAMS_INIT;
  v0.struct_size = offsetof(hvd_params_t, autotune);
  v0.transport_timeout_s = 12.5;
  v0.mask = HVD_PARAM_TRANSPORT_TIMEOUT;
  EXPECT_DOUBLE_EQ(MustResolve(&v0, {{"HVD_AUTOTUNE", "1"}}).transport_timeout_s, 12.5);
  EXPECT_TRUE(MustResolve(&v0, {{"HVD_AUTOTUNE", "1"}}).autotune);
  for (uint64_t bit : {HVD_PARAM_AUTOTUNE, HVD_PARAM_TRANSPORT_PATH}) {
    hvd_params_t claims = v0;
    claims.mask |= bit;
    auto r3 = ResolveConfig(&claims, FakeEnv({}));
    ASSERT_FALSE(r3.ok());
    EXPECT_EQ(r3.status().code(), HVD_ERR_INVALID_ARGUMENT);
    const char* field = bit == HVD_PARAM_AUTOTUNE ? "autotune" : "transport_path";
    EXPECT_NE(r3.status().message().find(std::string("params.mask sets ") + field),
              std::string::npos)
        << r3.status().message();
    EXPECT_NE(r3.status().message().find("struct_size (" + std::to_string(v0.struct_size) + ")"),
              std::string::npos)
        << r3.status().message();
  }
  // ... and one that ends between the two new fields.
  hvd_params_t mid = HVD_PARAMS_INIT;
  mid.struct_size = offsetof(hvd_params_t, transport_path);
  mid.autotune = 1;
  mid.mask = HVD_PARAM_AUTOTUNE;
  EXPECT_TRUE(MustResolve(&mid, {}).autotune);
  mid.mask |= HVD_PARAM_TRANSPORT_PATH;
  EXPECT_FALSE(ResolveConfig(&mid, FakeEnv({})).ok());

  hvd_params_t half = HVD_PARAMS_INIT;
  half.rank = 0;
  half.mask = HVD_PARAM_RANK;  // rank without size
  EXPECT_FALSE(ResolveConfig(&half, FakeEnv({})).ok());
}

}  // namespace
}  // namespace hvd

namespace hvd {
namespace {

TEST(Config, PeerTimeout) {
  EXPECT_DOUBLE_EQ(MustResolve(nullptr, {}).peer_timeout_s, 10.0);
  EXPECT_DOUBLE_EQ(MustResolve(nullptr, {{"HVD_PEER_TIMEOUT", "3"}}).peer_timeout_s, 3.0);
  EXPECT_DOUBLE_EQ(MustResolve(nullptr, {{"HVD_PEER_TIMEOUT", "0"}}).peer_timeout_s, 0.0);  // off
  hvd_params_t p = HVD_PARAMS_INIT;
  p.peer_timeout_s = 4.5;
  p.mask = HVD_PARAM_PEER_TIMEOUT;
  EXPECT_DOUBLE_EQ(MustResolve(&p, {{"HVD_PEER_TIMEOUT", "3"}}).peer_timeout_s, 4.5);
  EXPECT_NE(MustResolve(&p, {}).ToString().find("peer_timeout_s=4.5"), std::string::npos);
  // A caller built against an older header (a struct without the field)
  // cannot set the bit.
  p.struct_size = offsetof(hvd_params_t, peer_timeout_s);
  auto r = ResolveConfig(&p, FakeEnv({}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("peer_timeout_s"), std::string::npos);
  p.mask = 0;
  EXPECT_DOUBLE_EQ(MustResolve(&p, {{"HVD_PEER_TIMEOUT", "2"}}).peer_timeout_s, 2.0);
  EXPECT_FALSE(ResolveConfig(nullptr, FakeEnv({{"HVD_PEER_TIMEOUT", "soon"}})).ok());
}

}  // namespace
}  // namespace hvd
