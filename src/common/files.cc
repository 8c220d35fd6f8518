#include "common/files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace hvd {

Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string part = path.substr(0, i);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      return Error(HVD_ERR_INVALID_ARGUMENT,
                   "cannot create the folder " + part + ": " + std::strerror(errno));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error(HVD_ERR_INVALID_ARGUMENT, path + " is not a folder");
  }
  return Status::Ok();
}

}  // namespace hvd
