// hvdrun --summary: at the job's end, a few lines from every rank's last
// metrics report: time in collectives, bus bandwidth per size class, the
// top stragglers and the response cache's hit rate.
#pragma once

#include <string>
#include <vector>

#include "launcher/prom_text.h"

namespace hvd::launcher {

// The summary's lines ("" where no rank reported).
std::vector<std::string> JobSummary(const PromMerge& reports, int ranks_reporting, int ranks);

}  // namespace hvd::launcher
