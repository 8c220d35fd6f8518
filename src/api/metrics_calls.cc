// The C call for metrics: the context's report as JSON or Prometheus text.

#include <cstring>
#include <string>

#include "api/default_context.h"
#include "api/errors.h"
#include "api/objects.h"
#include "api/validate.h"
#include "hvd.h"

using namespace hvd::api;  // NOLINT: the C calls below are this module's shims

extern "C" {

hvd_status_t hvd_metrics(hvd_context_t ctx, hvd_metrics_format_t format, char* buf, size_t len,
                         size_t* needed) {
  HVD_API_BEGIN();
  if (needed == nullptr) return Report(Invalid(__func__, "needed is NULL"));
  const int f = RawEnum(format);
  if (f != HVD_METRICS_JSON && f != HVD_METRICS_PROMETHEUS) {
    return Report(Invalid(__func__, "format " + std::to_string(f) +
                                        " is not HVD_METRICS_JSON or HVD_METRICS_PROMETHEUS"));
  }
  if (buf == nullptr && len != 0) return Report(Invalid(__func__, "buf is NULL with len > 0"));
  return WithContext(__func__, ctx, [&](hvd_context_s* c) {
    const std::string text = c->impl->Metrics(f);
    *needed = text.size() + 1;
    if (buf == nullptr) return HVD_OK;
    if (len < *needed) {
      return Report(Invalid(__func__, "buf holds " + std::to_string(len) + " bytes; the report needs " +
                                          std::to_string(*needed) + " (call again with *needed)"));
    }
    std::memcpy(buf, text.c_str(), *needed);
    return HVD_OK;
  });
  HVD_API_END();
}

}  // extern "C"
