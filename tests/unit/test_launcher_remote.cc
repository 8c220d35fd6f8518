// Tests of how hvdrun starts a rank on a remote host (src/launcher/remote.h):
// the start marker the remote script writes first and hvdrun takes out of
// the rank's stderr, however the reads cut it; the start timeout's words
// for a login that never completed; and the script itself (the marker its
// first step, the binding through hvdrun --bind-exec, quoting).

#include "launcher/remote.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using hvd::launcher::BindMode;
using hvd::launcher::kRemoteStartMarker;
using hvd::launcher::LoginNotCompleted;
using hvd::launcher::RemoteScript;
using hvd::launcher::RemoteSpec;
using hvd::launcher::StartMarkerFilter;

const std::string kMarker = kRemoteStartMarker;

// text through a fresh filter, in reads of `step` bytes (0: one read); the
// bytes forwarded, and whether the marker was seen.
std::string Filter(const std::string& text, size_t step, bool* seen = nullptr) {
  StartMarkerFilter f;
  std::string out;
  int fired = 0;
  if (step == 0) step = text.size() ? text.size() : 1;
  for (size_t i = 0; i < text.size(); i += step) {
    std::string part = text.substr(i, step);
    if (f.Feed(part.data(), part.size(), &out)) ++fired;
  }
  f.Finish(&out);
  EXPECT_LE(fired, 1);
  EXPECT_EQ(fired == 1, f.seen());
  if (seen) *seen = f.seen();
  return out;
}

// Every way of cutting the stream into reads gives the same result.
void ExpectFiltered(const std::string& in, const std::string& want, bool want_seen) {
  for (size_t step = 0; step <= in.size() + 1; ++step) {
    bool seen = false;
    EXPECT_EQ(Filter(in, step, &seen), want) << "reads of " << step << " bytes: " << in;
    EXPECT_EQ(seen, want_seen) << "reads of " << step << " bytes: " << in;
  }
}

TEST(RemoteStartMarker, Alone) { ExpectFiltered(kMarker + "\n", "", true); }

TEST(RemoteStartMarker, OutputAfterItPasses) {
  ExpectFiltered(kMarker + "\nerr line\npartial", "err line\npartial", true);
}

TEST(RemoteStartMarker, LinesBeforeItPass) {
  // ssh's warnings, a login shell's chatter; one of them starts like the marker.
  ExpectFiltered("Warning: something\nhvdrun: cannot cd\n" + kMarker + "\nrank\n",
                 "Warning: something\nhvdrun: cannot cd\nrank\n", true);
}

TEST(RemoteStartMarker, OnlyTheFirstIsTaken) {
  ExpectFiltered(kMarker + "\n" + kMarker + "\n", kMarker + "\n", true);
}

TEST(RemoteStartMarker, NotAWholeLineIsNoMarker) {
  ExpectFiltered("x" + kMarker + "\n", "x" + kMarker + "\n", false);
  ExpectFiltered(kMarker + "x\n", kMarker + "x\n", false);
  ExpectFiltered(kMarker + " \n", kMarker + " \n", false);
  // A line that ends in the middle of the marker's words.
  ExpectFiltered(kMarker.substr(0, 7) + "\n" + kMarker + "\n", kMarker.substr(0, 7) + "\n", true);
}

TEST(RemoteStartMarker, NeverComes) {
  // ssh's own failure: everything passes, a partial line that looked like
  // the marker's start included (at the end).
  ExpectFiltered("ssh: connect to host h port 22: Connection refused\r\n",
                 "ssh: connect to host h port 22: Connection refused\r\n", false);
  ExpectFiltered(kMarker.substr(0, 10), kMarker.substr(0, 10), false);
  ExpectFiltered(kMarker, kMarker, false);  // no end of line: not the marker
  ExpectFiltered("", "", false);
}

TEST(RemoteStartMarker, HeldOnlyWhileItMayBeTheMarker) {
  StartMarkerFilter f;
  std::string out;
  EXPECT_FALSE(f.Feed("hvd", 3, &out));
  EXPECT_EQ(out, "");  // may be the marker
  EXPECT_FALSE(f.Feed("x", 1, &out));
  EXPECT_EQ(out, "hvdx");  // cannot be any more: forwarded at once
  EXPECT_FALSE(f.Feed("yz", 2, &out));
  EXPECT_EQ(out, "hvdxyz");
}

TEST(RemoteStartMarker, LoginNotCompletedWords) {
  std::string m = LoginNotCompleted("node3", 0, "10");
  EXPECT_EQ(m.rfind("ssh to host node3 did not complete the login (authentication) within 10 s", 0),
            0u)
      << m;
  EXPECT_NE(m.find("try 'ssh -v node3 true'"), std::string::npos) << m;
  EXPECT_NE(m.find("PAM"), std::string::npos) << m;
  EXPECT_EQ(m.find("store"), std::string::npos) << m;
  EXPECT_NE(LoginNotCompleted("node3", 2222, "10").find("try 'ssh -v -p 2222 node3 true'"),
            std::string::npos);
}

RemoteSpec Spec() {
  RemoteSpec s;
  s.host = "h2";
  s.cwd = "/work dir";
  s.env = {{"HVD_RANK", "3"}};
  s.command = {"python", "it's.py"};
  return s;
}

TEST(RemoteScript, MarkerIsTheFirstStep) {
  std::string s = RemoteScript(Spec());
  EXPECT_EQ(s.rfind("echo " + kMarker + " >&2; ", 0), 0u) << s;
}

TEST(RemoteScript, UnboundWithoutABindProgram) {
  std::string s = RemoteScript(Spec());
  EXPECT_EQ(s.find("--bind-exec"), std::string::npos) << s;
  EXPECT_EQ(s.find("\"$@\""), std::string::npos) << s;
  EXPECT_NE(s.find("env -- 'HVD_RANK=3' 'python' 'it'\\''s.py' 3<&-"), std::string::npos) << s;
}

TEST(RemoteScript, BindsThroughBindExec) {
  RemoteSpec spec = Spec();
  spec.bind_program = "/opt/hvd/bin/hvdrun";
  spec.bind.mode = BindMode::kAuto;
  spec.bind.local_rank = 1;
  spec.bind.local_size = 2;
  spec.bind.host = "h2";
  spec.bind.who = "rank 3 (host h2)";
  spec.bind.command = {"ignored"};
  std::string s = RemoteScript(spec);
  EXPECT_NE(s.find("if [ -x '/opt/hvd/bin/hvdrun' ]; then set -- '/opt/hvd/bin/hvdrun' "
                   "'--bind-exec' 'auto' '1' '2' '0' 'h2' 'rank 3 (host h2)' '--'; "
                   "else set --; :; fi"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("env -- 'HVD_RANK=3' \"$@\" 'python' 'it'\\''s.py' 3<&-"), std::string::npos)
      << s;
  EXPECT_EQ(s.find("ignored"), std::string::npos) << s;
  // With -v, a missing program is said.
  spec.bind.verbose = true;
  s = RemoteScript(spec);
  EXPECT_NE(s.find("else set --; echo 'hvdrun: --bind-to auto: rank 3 (host h2) is not bound: no "
                   "/opt/hvd/bin/hvdrun on host h2' >&2; fi"),
            std::string::npos)
      << s;
}

}  // namespace
