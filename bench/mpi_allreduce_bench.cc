// Allreduce throughput over MPI on one host: raw MPI_Allreduce against hvd.
//
//   mpirun -np 2 build/bin/mpi_allreduce_bench raw
//   mpirun -np 2 build/bin/mpi_allreduce_bench hvd
//   mpirun -np 2 build/bin/mpi_allreduce_bench plugin
//
// Modes:
//   raw     MPI_Allreduce(MPI_IN_PLACE, float32, MPI_SUM) on MPI_COMM_WORLD, MPI
//           initialised with plain MPI_Init (--thread multiple: MPI_Init_thread)
//   chunked the same MPI_Allreduce called on consecutive chunks of at most
//           --chunk bytes (default 4M): bounds Open MPI's per-call temporaries
//   hvd     hvd_allreduce through the public C API, on a context made from
//           MPI_COMM_WORLD (params.mpi_comm), MPI initialised with MULTIPLE
//   plugin  the MPI transport plugin's native allreduce entry (the plugin ABI
//           table) called directly (no negotiation, no background thread, none
//           of the core's algorithms): MPI's own cost through the plugin
//
// For every size (4 KiB .. 256 MiB, x4 steps, plus 32 and 128 MiB by default;
// --sizes to choose) the buffer is allocated and touched once, the result is
// checked once, then each timed iteration is barrier + one allreduce; the
// iteration time is the slowest rank's. Prints the median and best time, the
// algorithm bandwidth bytes / time in GB/s (1e9 bytes per second), and the
// minor page faults per iteration of the rank that had most (a fresh page
// costs a fault; a steady-state allreduce should cause none).
#include <dlfcn.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvd.h"
#include "hvd_transport.h"

namespace {

enum class Mode { kRaw, kChunked, kHvd, kPlugin };

int g_rank = 0, g_size = 1;

long MinorFaults() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "rank %d: %s\n", g_rank, msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

std::string PluginPath() {
  char exe[4096] = {0};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string(".");
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../lib/libhvd_transport_mpi.so";
}

void PluginLog(void*, int level, const char* msg) {
  if (level <= HVD_LOG_WARNING) std::fprintf(stderr, "rank %d: plugin: %s\n", g_rank, msg);
}

struct Plugin {
  const hvd_transport_t* table = nullptr;
  void* comm = nullptr;
};

Plugin OpenPlugin(const std::string& path, MPI_Comm* world) {
  void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) Die("cannot load " + path + ": " + dlerror());
  auto fn = reinterpret_cast<hvd_transport_plugin_fn>(dlsym(dl, HVD_TRANSPORT_PLUGIN_SYMBOL));
  if (fn == nullptr) Die(path + " is not an hvd transport plugin");
  Plugin p;
  p.table = fn();
  if (p.table == nullptr || p.table->allreduce == nullptr) Die(path + " has no native allreduce");
  hvd_transport_env_t env{};
  env.struct_size = sizeof(env);
  env.rank = g_rank;
  env.size = g_size;
  env.log = PluginLog;
  env.timeout_s = 600;
  env.start_timeout_s = 60;
  hvd_transport_option_t comm_opt = {"mpi_comm", nullptr, world};
  env.options = &comm_opt;
  env.noptions = 1;
  char err[512] = {0};
  hvd_transport_info_t info{};
  info.struct_size = sizeof(info);
  if (p.table->init(&env, &info, &p.comm, err, sizeof(err)) != HVD_OK) {
    Die(std::string("plugin init: ") + err);
  }
  return p;
}

struct Runner {
  Mode mode = Mode::kRaw;
  size_t chunk_bytes = 4u << 20;
  hvd_context_t ctx = nullptr;
  Plugin plugin;

  void Allreduce(float* buf, size_t count) {
    switch (mode) {
      case Mode::kRaw: {
        // Counts above INT_MAX floats are beyond this benchmark's sizes.
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) Die("MPI_Allreduce failed");
        break;
      }
      case Mode::kChunked: {
        const size_t step = std::max<size_t>(1, chunk_bytes / sizeof(float));
        for (size_t off = 0; off < count; off += step) {
          int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, static_cast<int>(std::min(step, count - off)),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          if (rc != MPI_SUCCESS) Die("MPI_Allreduce failed");
        }
        break;
      }
      case Mode::kHvd: {
        int64_t shape[1] = {static_cast<int64_t>(count)};
        hvd_tensor_t t = {buf, HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
        hvd_status_t s = hvd_allreduce(ctx, "bench", &t, buf, HVD_SUM);
        if (s != HVD_OK) Die(std::string("hvd_allreduce: ") + hvd_last_error());
        break;
      }
      case Mode::kPlugin: {
        hvd_transport_buffer_t b{};
        b.data = buf;
        b.bytes = count * sizeof(float);
        b.memory_type = HVD_MEMORY_HOST;
        b.device = HVD_DEVICE_CPU;
        int rc = plugin.table->allreduce(plugin.comm, &b, count, HVD_FLOAT32, HVD_SUM);
        if (rc != HVD_OK) Die(std::string("plugin allreduce: ") + plugin.table->last_error(plugin.comm));
        break;
      }
    }
  }
};

std::vector<size_t> DefaultSizes() {
  std::vector<size_t> s;
  for (size_t b = 4u << 10; b <= (256u << 20); b *= 4) {
    s.push_back(b);
    if (b == (16u << 20) || b == (64u << 20)) s.push_back(b * 2);
  }
  return s;
}

std::vector<size_t> ParseSizes(const char* text) {
  std::vector<size_t> out;
  std::string s = text;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    std::string unit = end ? end : "";
    size_t mult = unit == "K" ? 1024 : unit == "M" ? (1u << 20) : unit == "G" ? (1u << 30) : 1;
    if (v > 0) out.push_back(static_cast<size_t>(v * static_cast<double>(mult)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// The command line.
struct Options {
  std::string mode_name;
  Mode mode = Mode::kRaw;
  bool multiple = false;
  size_t chunk_bytes = 4u << 20;
  std::vector<size_t> sizes;
  std::string plugin_path;
  int fixed_iters = 0;
};

// Reads argv into *o; false (after saying why) on a bad command line.
bool ParseOptions(int argc, char** argv, Options* o) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: mpirun -np N %s raw|chunked|hvd|plugin [--thread single|multiple] "
                 "[--sizes 4K,1M,...] [--chunk 4M] [--plugin PATH] [--iters N]\n",
                 argv[0]);
    return false;
  }
  o->mode_name = argv[1];
  if (o->mode_name == "raw") {
    o->mode = Mode::kRaw;
  } else if (o->mode_name == "chunked") {
    o->mode = Mode::kChunked;
  } else if (o->mode_name == "hvd") {
    o->mode = Mode::kHvd;
  } else if (o->mode_name == "plugin") {
    o->mode = Mode::kPlugin;
  } else {
    std::fprintf(stderr, "unknown mode '%s'\n", argv[1]);
    return false;
  }
  o->multiple = o->mode == Mode::kHvd || o->mode == Mode::kPlugin;
  o->sizes = DefaultSizes();
  o->plugin_path = PluginPath();
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--thread" && i + 1 < argc) {
      o->multiple = std::string(argv[++i]) == "multiple";
    } else if (a == "--sizes" && i + 1 < argc) {
      o->sizes = ParseSizes(argv[++i]);
    } else if (a == "--chunk" && i + 1 < argc) {
      std::vector<size_t> c = ParseSizes(argv[++i]);
      if (c.size() != 1) {
        std::fprintf(stderr, "bad --chunk\n");
        return false;
      }
      o->chunk_bytes = c[0];
    } else if (a == "--plugin" && i + 1 < argc) {
      o->plugin_path = argv[++i];
    } else if (a == "--iters" && i + 1 < argc) {
      o->fixed_iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
      return false;
    }
  }
  return true;
}

// One size: checks the result once, warms up, times the iterations and prints
// rank 0's line.
void MeasureSize(Runner* run, size_t bytes, int fixed_iters) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> buf(count);
  // Check once: every rank contributes rank + 1.
  std::fill(buf.begin(), buf.end(), static_cast<float>(g_rank + 1));
  run->Allreduce(buf.data(), count);
  const float want = static_cast<float>(g_size * (g_size + 1) / 2);
  for (size_t i : {size_t{0}, count / 2, count - 1}) {
    if (buf[i] != want) {
      Die("wrong result at " + std::to_string(i) + " for " + std::to_string(bytes) +
          " bytes: " + std::to_string(buf[i]) + " want " + std::to_string(want));
    }
  }
  // Zeros stay zeros: no overflow or denormals however long it runs.
  std::fill(buf.begin(), buf.end(), 0.0f);
  run->Allreduce(buf.data(), count);  // warm-up

  int iters = fixed_iters > 0 ? fixed_iters
                              : static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 5, 100));
  std::vector<double> times;
  const long faults_before = MinorFaults();
  for (int it = 0; it < iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    run->Allreduce(buf.data(), count);
    double t = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(slowest);
  }
  long faults = MinorFaults() - faults_before, most_faults = 0;
  MPI_Allreduce(&faults, &most_faults, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  double best = times.front();
  if (g_rank == 0) {
    std::printf("  %-10zu %10.3f %10.3f %8.2f %8.2f %6d %12.1f\n", bytes, median * 1e3, best * 1e3,
                static_cast<double>(bytes) / median / 1e9, static_cast<double>(bytes) / best / 1e9,
                iters, static_cast<double>(most_faults) / iters);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!ParseOptions(argc, argv, &opt)) return 2;
  const Mode mode = opt.mode;
  const bool multiple = opt.multiple;
  const size_t chunk_bytes = opt.chunk_bytes;
  const std::string& mode_name = opt.mode_name;
  const std::string& plugin_path = opt.plugin_path;

  int provided = MPI_THREAD_SINGLE;
  if (multiple) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
    MPI_Query_thread(&provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm world = MPI_COMM_WORLD;

  Runner run;
  run.mode = mode;
  run.chunk_bytes = chunk_bytes;
  if (mode == Mode::kHvd) {
    hvd_params_t params = HVD_PARAMS_INIT;
    params.mpi_comm = &world;
    params.mask |= HVD_PARAM_MPI_COMM;
    if (hvd_context_create(&params, &run.ctx) != HVD_OK) {
      Die(std::string("hvd_context_create: ") + hvd_last_error());
    }
  } else if (mode == Mode::kPlugin) {
    run.plugin = OpenPlugin(plugin_path, &world);
  }
  if (g_rank == 0) {
    std::printf("# mode=%s ranks=%d thread_level=%d", mode_name.c_str(), g_size, provided);
    if (mode == Mode::kChunked) std::printf(" chunk=%zu", chunk_bytes);
    if (mode == Mode::kPlugin) std::printf(" plugin=%s", plugin_path.c_str());
    std::printf("\n");
    std::printf("# %-10s %10s %10s %8s %8s %6s %12s\n", "bytes", "median_ms", "best_ms", "GB/s", "best",
                "iters", "faults/iter");
    std::fflush(stdout);
  }

  for (size_t bytes : opt.sizes) MeasureSize(&run, bytes, opt.fixed_iters);

  if (mode == Mode::kHvd) hvd_context_destroy(run.ctx);
  if (mode == Mode::kPlugin) run.plugin.table->finalize(run.plugin.comm);
  MPI_Finalize();
  return 0;
}
