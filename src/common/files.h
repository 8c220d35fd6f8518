// Files and folders shared by the library and hvdrun.
#pragma once

#include <string>

#include "common/status.h"

namespace hvd {

// mkdir -p: path and every folder above it (HVD_ERR_INVALID_ARGUMENT naming
// the part that could not be made, or a path that is not a folder).
Status MakeDirs(const std::string& path);

}  // namespace hvd
