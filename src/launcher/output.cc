#include "launcher/output.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
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

// ---- OutputSink ---------------------------------------------------------------

bool OutputSink::WriteLines(const std::string& text) {
  std::string out;
  if (owner_ != nullptr) out += '\n';
  owner_ = nullptr;
  out += text;
  if (dead_) return false;
  if (!WriteAll(fd_, out)) dead_ = true;
  return !dead_;
}

void OutputSink::Write(LineStream* from, std::string text, bool leaves_open) {
  if (owner_ != nullptr && owner_ != from) text.insert(text.begin(), '\n');
  owner_ = leaves_open ? from : nullptr;
  if (dead_) return;
  if (!WriteAll(fd_, text)) dead_ = true;
}

// ---- LineStream ---------------------------------------------------------------

LineStream::~LineStream() {
  if (sink_->owner_ == this) sink_->owner_ = nullptr;
}

void LineStream::AppendText(std::string& out, const char* p, size_t n, Col& st,
                            size_t& open_len) const {
  while (n > 0) {
    if (st != Col::kOpen) {
      out += prefix_;
      st = Col::kOpen;
      open_len = 0;
    } else if (open_len >= kMaxLine) {  // the line is full: cut it
      out += '\n';
      out += prefix_;
      open_len = 0;
    }
    size_t k = std::min(n, kMaxLine - open_len);
    out.append(p, k);
    open_len += k;
    p += k;
    n -= k;
  }
}

void LineStream::Feed(const char* data, size_t n, Clock::time_point now) {
  if (n == 0) return;
  last_input_ = now;
  bool pending_new = pending_.empty();  // pending_ will hold only bytes of now
  Col st = State();
  size_t open_len = st == Col::kOpen ? open_len_ : 0;
  // Another stream ended our open line since we last wrote: a '\n' that comes
  // next has nothing left to end.
  bool ended_by_other = sink_->owner_ != this && col_ != Col::kFresh;
  std::string out;
  const char* p = data;
  const char* end = data + n;
  // The held text and [from, to) on this rank's open line (tag first if the
  // line is not open yet).
  auto write_segment = [&](const char* from, const char* to) {
    if (st != Col::kOpen) {
      out += prefix_;
      st = Col::kOpen;
      open_len = 0;
    }
    AppendText(out, pending_.data(), pending_.size(), st, open_len);
    AppendText(out, from, static_cast<size_t>(to - from), st, open_len);
  };
  while (p < end) {
    const char* t = p;
    while (t < end && *t != '\n' && *t != '\r') ++t;
    if (t == end) break;
    size_t len = pending_.size() + static_cast<size_t>(t - p);
    if (*t == '\n' && len == 0 && ended_by_other) {
      // Dropped: the line it ends was ended already.
    } else if (*t == '\n') {
      if (!(len == 0 && st == Col::kCr)) {  // after "\r", the '\n' goes alone
        write_segment(p, t);
      }
      out += '\n';
      st = Col::kFresh;
      open_len = 0;
    } else if (len > 0 || st == Col::kOpen) {  // a '\r' over nothing of ours: dropped
      write_segment(p, t);
      out += '\r';
      st = Col::kCr;
      open_len = 0;
      ended_by_other = false;
    }
    if (*t == '\n') ended_by_other = false;
    pending_.clear();
    pending_new = true;
    p = t + 1;
  }
  pending_.append(p, static_cast<size_t>(end - p));
  if (pending_new && !pending_.empty()) first_pending_ = now;
  // A line without end that grew too long: write it (cut at kMaxLine).
  size_t room = open_len < kMaxLine ? kMaxLine - open_len : kMaxLine;
  if (pending_.size() >= room) {
    AppendText(out, pending_.data(), pending_.size(), st, open_len);
    pending_.clear();
  }
  if (out.empty()) {
    // Nothing written: the line state stands, unless the '\n' after another
    // stream ended our line was dropped just now.
    if (!ended_by_other && sink_->owner_ != this) col_ = Col::kFresh;
    return;
  }
  col_ = st;
  open_len_ = open_len;
  sink_->Write(this, std::move(out), st != Col::kFresh);
}

LineStream::Clock::time_point LineStream::Deadline() const {
  if (pending_.empty()) return Clock::time_point::max();
  return std::min(last_input_ + kIdleFlush, first_pending_ + kMaxHold);
}

void LineStream::FlushIdle(Clock::time_point now) {
  if (pending_.empty() || now < Deadline()) return;
  Col st = State();
  size_t open_len = st == Col::kOpen ? open_len_ : 0;
  std::string out;
  AppendText(out, pending_.data(), pending_.size(), st, open_len);
  pending_.clear();
  col_ = st;
  open_len_ = open_len;
  sink_->Write(this, std::move(out), true);
}

void LineStream::Finish() {
  Col st = State();
  size_t open_len = st == Col::kOpen ? open_len_ : 0;
  std::string out;
  AppendText(out, pending_.data(), pending_.size(), st, open_len);
  pending_.clear();
  if (st != Col::kFresh) out += '\n';
  col_ = Col::kFresh;
  open_len_ = 0;
  if (!out.empty()) sink_->Write(this, std::move(out), false);
}

}  // namespace hvd::launcher
