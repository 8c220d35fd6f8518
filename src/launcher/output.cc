#include "launcher/output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace hvd::launcher {

bool WriteAll(int fd, const std::string& buf) {
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::write(fd, buf.data() + off, buf.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Our stdout is non-blocking (shared with someone who set it so): wait.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    return false;
  }
  return true;
}

void LineStream::Feed(const char* data, size_t n) {
  pending_.append(data, n);
  size_t last_nl = pending_.rfind('\n');
  std::string out;
  size_t consumed = 0;
  if (last_nl != std::string::npos) {
    size_t start = 0;
    while (start <= last_nl) {
      size_t nl = pending_.find('\n', start);
      out += prefix_;
      out.append(pending_, start, nl - start + 1);
      start = nl + 1;
    }
    consumed = last_nl + 1;
  }
  // A line without end that grew too long: cut it.
  while (pending_.size() - consumed >= kMaxLine) {
    out += prefix_;
    out.append(pending_, consumed, kMaxLine);
    out += '\n';
    consumed += kMaxLine;
  }
  if (consumed > 0) pending_.erase(0, consumed);
  if (!out.empty()) Emit(out);
}

void LineStream::Finish() {
  if (pending_.empty()) return;
  std::string out = prefix_ + pending_ + "\n";
  pending_.clear();
  Emit(out);
}

void LineStream::Emit(const std::string& lines) {
  if (dead_) return;
  if (!WriteAll(out_fd_, lines)) dead_ = true;
}

}  // namespace hvd::launcher
