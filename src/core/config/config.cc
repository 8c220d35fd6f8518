#include "core/config/config.h"

#include <cstdlib>
#include <sstream>

#include "core/config/sources.h"
#include "core/observability/logging.h"

namespace hvd {

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

std::string Config::ToString() const {
  std::ostringstream os;
  os << "rank=" << rank << " size=" << size << " local_rank=" << local_rank
     << " local_size=" << local_size << " cross_rank=" << cross_rank
     << " cross_size=" << cross_size << " rank_source=" << rank_source
     << " transport=" << (transport.empty() ? "(auto)" : transport)
     << " cpu_transport=" << (cpu_transport.empty() ? "(auto)" : cpu_transport)
     << " transport_path=" << (transport_path.empty() ? "(next to libhvd.so)" : transport_path)
     << " rendezvous=" << (rendezvous_addr.empty() ? "(none)" : rendezvous_addr)
     << (host_store ? " (hosted here)" : "") << " oob=" << (oob_allgather ? "yes" : "no")
     << " secret=" << (secret.empty() ? "(none)" : "(set)")
     << " network_interface=" << (network_interface.empty() ? "(auto)" : network_interface)
     << " fusion_threshold=" << fusion_threshold << " cycle_time_ms=" << cycle_time_ms
     << " cache_capacity=" << cache_capacity << " stall_warning_s=" << stall_warning_s
     << " stall_shutdown_s=" << stall_shutdown_s << " start_timeout_s=" << start_timeout_s
     << " transport_timeout_s=" << transport_timeout_s << " peer_timeout_s=" << peer_timeout_s
     << " timeline=" << (timeline_path.empty() ? "(off)" : timeline_path)
     << " fusion_buffer_initial=" << fusion_buffer_initial
     << " buffer_pool_bytes=" << buffer_pool_bytes
     << " shm=" << (shm < 0 ? "(auto)" : shm ? "on" : "off")
     << " piggyback=" << (piggyback == 0 ? "off" : "on")
     << " cuda_async_completion=" << (cuda_async_completion == 1 ? "on" : "off")
     << " autotune=" << (autotune ? "on" : "off")
     << " elastic=" << (elastic ? "on (worker " + elastic_worker + ")" : std::string("off"))
     << " log_level=" << LogLevelName(log_level);
  return os.str();
}

Result<Config> ResolveConfig(const hvd_params_t* params, const EnvLookup& env) {
  // No params: read nothing from an empty struct (no field access through NULL).
  hvd_params_t none = HVD_PARAMS_INIT;
  if (params == nullptr) params = &none;
  HVD_CHECK(config::CheckParams(params));
  config::Resolution r;
  HVD_CHECK(config::FromTopology(params, env, &r.config));
  HVD_CHECK(config::FromParams(params, &r));
  HVD_CHECK(config::FromHvdEnv(env, &r));
  HVD_CHECK(config::FromHorovodEnv(env, &r));
  config::FromLauncherEnv(env, &r);
  config::FromDefaults(&r);
  HVD_CHECK(config::FromElasticEnv(env, &r.config));
  return r.config;
}

}  // namespace hvd
