// Forwarding of the ranks' output to hvdrun's own stdout/stderr.
//
// hvdrun is single-threaded around this. Each destination (hvdrun's stdout,
// hvdrun's stderr) is an OutputSink; every rank has one LineStream per pipe,
// feeding the sink of the same name. The rules:
//
// - Whole lines. The bytes up to each '\n' are written as soon as they
//   arrive, all lines of one read() in one write(), so lines of different
//   ranks never mix.
// - Carriage returns. The bytes up to and including each '\r' (a progress
//   bar's redraw) are written as soon as they arrive too. After a '\r' the
//   cursor is back at the start of the line, so the text that follows gets
//   the prefix again (the rank tag is redrawn with the bar). "\r\n" ends the
//   line: the '\n' right after a '\r' is written alone. A '\r' with nothing
//   of this stream on the line before it is a no-op and is dropped.
// - Partial lines. Bytes with no '\n' or '\r' after them yet are written once
//   the stream has been idle for kIdleFlush (no new bytes), and at the latest
//   kMaxHold after the oldest of them arrived (a stream that dribbles a byte
//   at a time still shows). The line is then open on the sink: what the same
//   stream writes next continues it, without a second prefix.
// - One open line per sink. When a stream writes to a sink on which another
//   stream's line is open (a partial line, or a bar after its '\r'), a '\n'
//   first ends that line; the other stream's next bytes start a new line,
//   with its prefix, and a lone '\n' that was to end the line is dropped. So
//   two ranks' partial lines never share a line, and a rank is never held
//   back by another one's unfinished line. hvdrun's own messages
//   (OutputSink::WriteLines) end an open line the same way.
// - Long lines. A line never grows past kMaxLine bytes (not counting the
//   prefix): it is cut into kMaxLine pieces, each ended with '\n'.
// - End. When the pipe closes (Finish), what is left is written and an open
//   line of the stream is ended with '\n'.
//
// stdout and stderr are separate sinks: their lines are not coordinated with
// each other.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

namespace hvd::launcher {

// Writes all of buf to fd, retrying on EINTR/EAGAIN. Returns false when the
// output is gone (EPIPE and the like); the caller then drops further output.
bool WriteAll(int fd, const std::string& buf);

class LineStream;

// One destination (a file descriptor) shared by the streams that write to it.
// It must outlive them.
class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {}
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  // Writes text from outside the ranks (whole lines), after ending an open
  // line. Returns false when the destination is gone.
  bool WriteLines(const std::string& text);

  // The stream whose line is open on this sink, or nullptr.
  const LineStream* open_line() const { return owner_; }

 private:
  friend class LineStream;
  // Writes text for `from`: first a '\n' when another stream's line is open.
  // Afterwards from's line is open when `leaves_open`.
  void Write(LineStream* from, std::string text, bool leaves_open);

  int fd_;
  LineStream* owner_ = nullptr;
  bool dead_ = false;  // the destination is gone
};

class LineStream {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxLine = 1 << 20;
  static constexpr std::chrono::milliseconds kIdleFlush{200};
  static constexpr std::chrono::milliseconds kMaxHold{1000};

  // sink: where the text goes; prefix: put before every line ("" for none).
  LineStream(OutputSink* sink, std::string prefix) : sink_(sink), prefix_(std::move(prefix)) {}
  ~LineStream();
  LineStream(const LineStream&) = delete;
  LineStream& operator=(const LineStream&) = delete;

  // Feeds bytes read from the rank at `now`; writes every completed line and
  // '\r' update, in one write.
  void Feed(const char* data, size_t n, Clock::time_point now = Clock::now());
  // Writes the partial line when its time has come (see Deadline).
  void FlushIdle(Clock::time_point now = Clock::now());
  // When FlushIdle has something to write: Clock::time_point::max() for never.
  Clock::time_point Deadline() const;
  // The pipe closed: writes what is left, and ends the stream's open line.
  void Finish();

 private:
  // What this stream has on the sink's current line.
  enum class Col {
    kFresh,  // nothing: the next text starts with the prefix
    kOpen,   // text, the cursor after it: the next text continues it
    kCr,     // text, the cursor back at its start (after '\r'): prefix again
  };
  Col State() const { return sink_->owner_ == this ? col_ : Col::kFresh; }
  // Appends content (no '\n'/'\r' in it) to out for the current line,
  // prefix and kMaxLine cuts included; updates st and open_len.
  void AppendText(std::string& out, const char* p, size_t n, Col& st, size_t& open_len) const;

  OutputSink* sink_;
  std::string prefix_;
  std::string pending_;      // bytes not yet written (never a '\n' or '\r' in it)
  Col col_ = Col::kFresh;    // valid while the sink's line is ours
  size_t open_len_ = 0;      // with kOpen: bytes of ours on the line
  Clock::time_point last_input_{};    // when the last bytes arrived
  Clock::time_point first_pending_{};  // when pending_'s first byte arrived
};

}  // namespace hvd::launcher
