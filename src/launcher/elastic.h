// An elastic hvdrun job (docs/elastic.md): workers come and go, and hvdrun
// forms the job anew, epoch by epoch, through the rendezvous store.
#pragma once

#include "launcher/options.h"

namespace hvd::launcher {

// Runs the elastic job to its end and returns hvdrun's exit code.
int RunElastic(const Options& opts);

}  // namespace hvd::launcher
