// Tests of hvdrun's output forwarding (src/launcher/output.h): which bytes a
// rank's stream writes, when, and how two streams share one destination. The
// sinks write to temporary files, and time is passed in explicitly, so every
// case is exact and does not depend on the machine's speed.

#include "launcher/output.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using hvd::launcher::LineStream;
using hvd::launcher::OutputSink;
using Clock = LineStream::Clock;
using namespace std::chrono_literals;

// A destination file; Take() returns what was written since the last Take().
class Dest {
 public:
  Dest() {
    char name[] = "/tmp/hvd_output_test.XXXXXX";
    fd_ = ::mkstemp(name);
    if (fd_ >= 0) ::unlink(name);
  }
  ~Dest() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  std::string Take() {
    std::string all;
    char buf[65536];
    for (;;) {
      ssize_t n = ::pread(fd_, buf, sizeof(buf), static_cast<off_t>(read_ + all.size()));
      if (n <= 0) break;
      all.append(buf, static_cast<size_t>(n));
    }
    read_ += all.size();
    return all;
  }

 private:
  int fd_ = -1;
  size_t read_ = 0;
};

void Feed(LineStream& s, const std::string& text, Clock::time_point t) {
  s.Feed(text.data(), text.size(), t);
}

class OutputTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GE(dest_.fd(), 0); }
  Dest dest_;
  OutputSink sink_{dest_.fd()};
  Clock::time_point t0_ = Clock::now();
};

TEST_F(OutputTest, WholeLinesAtOnceWithPrefix) {
  LineStream s(&sink_, "[0]: ");
  Feed(s, "one\ntwo\nthr", t0_);
  EXPECT_EQ(dest_.Take(), "[0]: one\n[0]: two\n");
  Feed(s, "ee\n\n", t0_);
  EXPECT_EQ(dest_.Take(), "[0]: three\n[0]: \n");  // an empty line has its prefix too
  EXPECT_EQ(s.Deadline(), Clock::time_point::max());
}

TEST_F(OutputTest, PartialLineAfterIdleTimeWithoutSecondPrefix) {
  LineStream s(&sink_, "[0]: ");
  Feed(s, "loading", t0_);
  EXPECT_EQ(dest_.Take(), "");
  EXPECT_EQ(s.Deadline(), t0_ + LineStream::kIdleFlush);
  s.FlushIdle(t0_ + LineStream::kIdleFlush - 1ms);
  EXPECT_EQ(dest_.Take(), "");
  s.FlushIdle(t0_ + LineStream::kIdleFlush);
  EXPECT_EQ(dest_.Take(), "[0]: loading");
  EXPECT_EQ(sink_.open_line(), &s);
  EXPECT_EQ(s.Deadline(), Clock::time_point::max());
  // The continuation, partial again, then the end of the line.
  Feed(s, "...", t0_ + 1s);
  s.FlushIdle(t0_ + 1s + LineStream::kIdleFlush);
  EXPECT_EQ(dest_.Take(), "...");
  Feed(s, " done\nnext\n", t0_ + 2s);
  EXPECT_EQ(dest_.Take(), " done\n[0]: next\n");
  EXPECT_EQ(sink_.open_line(), nullptr);
}

TEST_F(OutputTest, NewBytesPostponeTheIdleFlushUpToMaxHold) {
  LineStream s(&sink_, "");
  Feed(s, "a", t0_);
  Feed(s, "b", t0_ + 150ms);
  s.FlushIdle(t0_ + 300ms);
  EXPECT_EQ(dest_.Take(), "");
  EXPECT_EQ(s.Deadline(), t0_ + 350ms);
  // A byte every 150 ms is never idle for 200 ms: kMaxHold bounds the wait.
  Clock::time_point t = t0_ + 150ms;
  while (t + 150ms < t0_ + LineStream::kMaxHold) {
    t += 150ms;
    Feed(s, "x", t);
    s.FlushIdle(t);
    ASSERT_EQ(dest_.Take(), "");
  }
  EXPECT_EQ(s.Deadline(), t0_ + LineStream::kMaxHold);
  s.FlushIdle(t0_ + LineStream::kMaxHold);
  EXPECT_EQ(dest_.Take(), "abxxxxx");
}

TEST_F(OutputTest, CarriageReturnUpdatesGoAtOnceAndRedrawThePrefix) {
  LineStream s(&sink_, "[1]: ");
  Feed(s, " 10%\r", t0_);
  EXPECT_EQ(dest_.Take(), "[1]:  10%\r");
  Feed(s, " 20%\r 30%\r 4", t0_ + 1ms);
  EXPECT_EQ(dest_.Take(), "[1]:  20%\r[1]:  30%\r");
  Feed(s, "0%\r", t0_ + 2ms);
  EXPECT_EQ(dest_.Take(), "[1]:  40%\r");
  Feed(s, "done\n", t0_ + 3ms);
  EXPECT_EQ(dest_.Take(), "[1]: done\n");
}

TEST_F(OutputTest, LeadingCarriageReturnsLikeTqdm) {
  // tqdm writes "\r" + bar: the bar itself is a partial line until the next '\r'.
  LineStream s(&sink_, "[0]: ");
  Feed(s, "\r 0/3", t0_);
  EXPECT_EQ(dest_.Take(), "");  // a '\r' over nothing of ours is dropped
  s.FlushIdle(t0_ + LineStream::kIdleFlush);
  EXPECT_EQ(dest_.Take(), "[0]:  0/3");
  Feed(s, "\r 1/3", t0_ + 300ms);
  EXPECT_EQ(dest_.Take(), "\r");
  Feed(s, "\r 2/3", t0_ + 350ms);  // before the idle time: the '\r' sends 1/3
  EXPECT_EQ(dest_.Take(), "[0]:  1/3\r");
  s.FlushIdle(t0_ + 550ms);
  EXPECT_EQ(dest_.Take(), "[0]:  2/3");
  s.Finish();
  EXPECT_EQ(dest_.Take(), "\n");
}

TEST_F(OutputTest, UntaggedCarriageReturnsPassThrough) {
  LineStream s(&sink_, "");
  Feed(s, "\ra\rb", t0_);
  EXPECT_EQ(dest_.Take(), "a\r");
  s.FlushIdle(t0_ + LineStream::kIdleFlush);
  EXPECT_EQ(dest_.Take(), "b");
  Feed(s, "\r\n", t0_ + 1s);
  EXPECT_EQ(dest_.Take(), "\r\n");
}

TEST_F(OutputTest, CrLfEndsTheLineOnce) {
  LineStream s(&sink_, "[0]: ");
  Feed(s, "dos\r\nline\r", t0_);
  EXPECT_EQ(dest_.Take(), "[0]: dos\r\n[0]: line\r");
  Feed(s, "\n", t0_);  // the '\n' of a "\r\n" cut between two reads
  EXPECT_EQ(dest_.Take(), "\n");
  Feed(s, "\r\n", t0_);  // nothing of ours on the line: an empty line
  EXPECT_EQ(dest_.Take(), "[0]: \n");
}

TEST_F(OutputTest, AnotherStreamEndsAnOpenPartialLine) {
  LineStream a(&sink_, "[0]: "), b(&sink_, "[1]: ");
  Feed(a, "a-part", t0_);
  a.FlushIdle(t0_ + 200ms);
  EXPECT_EQ(dest_.Take(), "[0]: a-part");
  Feed(b, "b-line\nb-part", t0_ + 300ms);
  EXPECT_EQ(dest_.Take(), "\n[1]: b-line\n");
  b.FlushIdle(t0_ + 500ms);
  EXPECT_EQ(dest_.Take(), "[1]: b-part");
  Feed(a, "-rest\n", t0_ + 600ms);  // a's line was ended: a starts a new one
  EXPECT_EQ(dest_.Take(), "\n[0]: -rest\n");
  Feed(b, "-rest\n", t0_ + 700ms);
  EXPECT_EQ(dest_.Take(), "[1]: -rest\n");
  // A partial line ended by another stream, then its own '\n': not doubled.
  Feed(a, "a2", t0_ + 800ms);
  a.FlushIdle(t0_ + 1s);
  Feed(b, "b2\n", t0_ + 1s);
  Feed(a, "\n", t0_ + 1s);
  Feed(a, "a3\n", t0_ + 1s);
  EXPECT_EQ(dest_.Take(), "[0]: a2\n[1]: b2\n[0]: a3\n");
  EXPECT_EQ(sink_.open_line(), nullptr);
}

TEST_F(OutputTest, AnotherStreamEndsAnOpenBar) {
  LineStream a(&sink_, ""), b(&sink_, "");
  Feed(a, "a 10%\r", t0_);
  Feed(b, "b 50%\r", t0_);
  Feed(a, "a 20%\r", t0_);
  Feed(a, "a 30%\r", t0_);
  Feed(b, "warning\n", t0_);
  Feed(b, "more\n", t0_);
  Feed(a, "\r", t0_);  // a's line was ended already: nothing to return over,
  Feed(a, "\n", t0_);  // nor to end
  Feed(a, "\n", t0_);  // a real empty line
  EXPECT_EQ(dest_.Take(), "a 10%\r\nb 50%\r\na 20%\ra 30%\r\nwarning\nmore\n\n");
}

TEST_F(OutputTest, HvdrunMessagesEndAnOpenLine) {
  LineStream a(&sink_, "[0]: ");
  Feed(a, "50%\r", t0_);
  EXPECT_TRUE(sink_.WriteLines("hvdrun: note\n"));
  Feed(a, "60%\r", t0_);
  EXPECT_TRUE(sink_.WriteLines("hvdrun: again\n"));
  EXPECT_EQ(dest_.Take(), "[0]: 50%\r\nhvdrun: note\n[0]: 60%\r\nhvdrun: again\n");
}

TEST_F(OutputTest, SinksAreIndependent) {
  Dest other;
  OutputSink err(other.fd());
  LineStream out_a(&sink_, "[0]<stdout>: "), err_b(&err, "[1]<stderr>: ");
  Feed(out_a, "partial", t0_);
  out_a.FlushIdle(t0_ + 1s);
  Feed(err_b, "line\n", t0_ + 1s);
  Feed(out_a, " end\n", t0_ + 1s);
  EXPECT_EQ(dest_.Take(), "[0]<stdout>: partial end\n");
  EXPECT_EQ(other.Take(), "[1]<stderr>: line\n");
}

TEST_F(OutputTest, FinishEndsWhatIsLeft) {
  LineStream a(&sink_, "[0]: "), b(&sink_, "[1]: "), c(&sink_, "[2]: ");
  Feed(a, "tail", t0_);
  a.Finish();
  EXPECT_EQ(dest_.Take(), "[0]: tail\n");
  Feed(b, "open", t0_);
  b.FlushIdle(t0_ + 1s);
  Feed(b, " more", t0_ + 1s);
  b.Finish();
  EXPECT_EQ(dest_.Take(), "[1]: open more\n");
  c.Finish();  // nothing to write
  a.Finish();
  EXPECT_EQ(dest_.Take(), "");
}

TEST_F(OutputTest, LongLinesAreCutAtMaxLine) {
  const size_t kMax = LineStream::kMaxLine;
  LineStream s(&sink_, "P ");
  // Exactly kMaxLine bytes and a newline: one line.
  std::string exact(kMax, 'e');
  Feed(s, exact + "\n", t0_);
  EXPECT_EQ(dest_.Take(), "P " + exact + "\n");
  // Longer, fed in pieces with no newline: written once a line is full.
  std::string piece(kMax / 2, 'x');
  Feed(s, piece, t0_);
  EXPECT_EQ(dest_.Take(), "");
  Feed(s, piece + "yyy", t0_);
  EXPECT_EQ(dest_.Take(), "P " + piece + piece + "\nP yyy");
  Feed(s, "zz\n", t0_);
  EXPECT_EQ(dest_.Take(), "zz\n");
  // A whole line of 2.5 kMaxLine in one piece.
  std::string big(kMax * 5 / 2, 'b');
  Feed(s, big + "\n", t0_);
  EXPECT_EQ(dest_.Take(), "P " + std::string(kMax, 'b') + "\nP " + std::string(kMax, 'b') +
                              "\nP " + std::string(kMax / 2, 'b') + "\n");
}

TEST_F(OutputTest, DeadDestinationDropsOutput) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  std::signal(SIGPIPE, SIG_IGN);
  OutputSink gone(p[1]);
  LineStream s(&gone, "");
  Feed(s, "lost\n", t0_);
  Feed(s, "lost too\n", t0_);
  EXPECT_FALSE(gone.WriteLines("x\n"));
  ::close(p[1]);
}

}  // namespace
