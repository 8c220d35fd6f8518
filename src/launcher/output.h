// Line-by-line forwarding of the ranks' output to hvdrun's own stdout/stderr.
//
// hvdrun is single-threaded around this: every chunk read from a rank's pipe
// is cut at newlines, and only whole lines are written out (one write() per
// batch of whole lines), so lines from different ranks never mix mid-line.
// A partial line waits in its stream's buffer until its newline arrives or the
// pipe closes; a line longer than kMaxLine is cut into kMaxLine pieces.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace hvd::launcher {

// Writes all of buf to fd, retrying on EINTR/EAGAIN. Returns false when the
// output is gone (EPIPE and the like); the caller then drops further output.
bool WriteAll(int fd, const std::string& buf);

class LineStream {
 public:
  static constexpr size_t kMaxLine = 1 << 20;

  // out_fd: where the lines go; prefix: put before every line ("" for none).
  LineStream(int out_fd, std::string prefix) : out_fd_(out_fd), prefix_(std::move(prefix)) {}

  // Feeds bytes read from the rank; writes every completed line.
  void Feed(const char* data, size_t n);
  // The pipe closed: writes what is left as a last line.
  void Finish();

 private:
  void Emit(const std::string& lines);

  int out_fd_;
  std::string prefix_;
  std::string pending_;
  bool dead_ = false;  // the destination is gone
};

}  // namespace hvd::launcher
