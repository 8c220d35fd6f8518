// The context's wiring of its observers: the timeline started and stopped
// at run time (asked by a user thread, applied by the loop between cycles)
// and the autotuner's decisions applied to the loop's pacing and fusion.
#include "core/context_impl.h"

#include <algorithm>

namespace hvd {

Status ContextImpl::TimelineCommand(bool start, const std::string& path, bool mark_cycles) {
  const char* fn = start ? "hvd_timeline_start" : "hvd_timeline_stop";
  if (start && path.empty()) return InvalidArgument(std::string(fn) + ": path is empty");
  if (cfg_.rank != 0) return Status::Ok();  // rank 0 writes the timeline
  std::unique_lock<std::mutex> lock(mu_);
  if (loop_exited_ || shutdown_requested_) {
    return Error(HVD_ERR_ABORTED, std::string(fn) + ": the context has been shut down");
  }
  const uint64_t mine = ++tl_asked_;
  tl_cmd_ = TimelineCmd{start, path, mark_cycles};
  tl_pending_ = true;
  cv_.notify_all();
  constexpr int kWaitS = 30;
  if (!exit_cv_.wait_for(lock, std::chrono::seconds(kWaitS),
                         [&] { return tl_done_ >= mine || loop_exited_; })) {
    return Error(HVD_ERR_TIMEOUT, std::string(fn) + ": the background thread did not take it within " +
                                      std::to_string(kWaitS) + " s (busy in a transfer?)");
  }
  if (tl_done_ < mine) return Error(HVD_ERR_ABORTED, std::string(fn) + ": the context has been shut down");
  return tl_result_;
}

// A timeline start or stop handed over by TimelineCommand: applied, and its
// outcome handed back.
void ContextImpl::ApplyTimelineCommand(uint64_t tl_seq, const TimelineCmd& tl_take) {
  Status r = Status::Ok();
  if (tl_take.start) {
    r = timeline_.Open(tl_take.path);
    mark_cycles_ = r.ok() && tl_take.mark_cycles;
  } else {
    timeline_.Close();
    mark_cycles_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tl_result_ = r;
    tl_done_ = tl_seq;
    exact_enqueue_ = timeline_.enabled();
  }
  exit_cv_.notify_all();
}

// The autotuner's decision of this negotiation: every rank switches in this
// same cycle, before bucketing its responses.
void ContextImpl::ApplyTuning() {
  TuneParams tuned;
  if (!tuner_->Apply(root_->controller->decided(), &tuned)) return;
  fusion_threshold_ = tuned.fusion_threshold;
  pace_.SetCycleTime(tuned.cycle_time_ms);
  if (tuned.hierarchical >= 0) transport_->set_hierarchical(tuned.hierarchical == 1);
  HVD_LOG(log_, HVD_LOG_DEBUG,
          "autotune: fusion threshold " << tuned.fusion_threshold << " bytes, cycle time "
                                        << tuned.cycle_time_ms << " ms"
                                        << (tuned.hierarchical < 0 ? ""
                                            : tuned.hierarchical == 1 ? ", hierarchical on"
                                                                      : ", hierarchical off"));
}

}  // namespace hvd
