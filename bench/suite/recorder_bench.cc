// The flight recorder's cost per operation, in one process: the hooks the
// loop calls for one operation (submit, negotiation, start, completion),
// with the recorder off (HVD_FLIGHT_RECORDER_SIZE=0: each hook is a test)
// and on (2,000 records), an operation a unit (the completion reads the
// clock once) or served by the negotiation (a piggybacked small allreduce:
// no clock read). The best of 7 runs of N operations, as nanoseconds per
// operation; compare with a step's time (hvd-bench latency).
//   build/bin/recorder-bench [N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/observability/flight_recorder.h"

namespace {

using Clock = std::chrono::steady_clock;

double NsPerOp(size_t capacity, bool clock_read, int n) {
  hvd::FlightRecorder fr;
  hvd::FlightRecorder::Identity id;
  fr.Configure(capacity, "", id);
  hvd::OpRequest req;
  hvd::TensorSpec t;
  t.name = "DistributedOptimizer.Allreduce.grad.layer3.weight";
  t.shape = {1};
  req.tensors.push_back(t);
  req.enqueued = Clock::now();
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      // As queue.cc, dispatch.cc and FinishAll call them.
      const uint64_t seq = fr.on() ? fr.Submitted(req, -1, static_cast<uint64_t>(i)) : 0;
      fr.Negotiated(seq, t0);
      if (fr.on()) fr.Started(seq, t0, 4);
      const Clock::time_point done = fr.on() && clock_read ? Clock::now() : t0;
      if (fr.on()) fr.Finished(seq, done, hvd::Status::Ok());
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::min(best, ns / n);
  }
  return best;
}

double ClockNs(int n) {
  double best = 1e30;
  int64_t sink = 0;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) sink += Clock::now().time_since_epoch().count() & 1;
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  return sink < 0 ? 0 : best;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  for (size_t capacity : {size_t{0}, size_t{2000}}) {
    for (bool clock_read : {true, false}) {
      std::printf("BENCH {\"kind\":\"recorder\",\"capacity\":%zu,\"clock_read\":%s,"
                  "\"ops\":%d,\"ns_per_op\":%.1f}\n",
                  capacity, clock_read ? "true" : "false", n, NsPerOp(capacity, clock_read, n));
    }
    std::printf("BENCH {\"kind\":\"clock\",\"ns_per_read\":%.1f}\n", ClockNs(n));
  }
  return 0;
}
