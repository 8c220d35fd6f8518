// Tests of hvdrun's command line (src/launcher/options.h, option_table.h):
// the table of options (every spelling one row, every shown one in --help),
// values inline or as the next argument, hidden aliases, the variables the
// library flags export in command-line order, and usage errors.

#include "launcher/options.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "launcher/option_table.h"

namespace {

using hvd::launcher::FindOption;
using hvd::launcher::OptionRow;
using hvd::launcher::OptionRows;
using hvd::launcher::ParseArgs;
using hvd::launcher::ParseOutcome;
using hvd::launcher::ParseResult;
using hvd::launcher::UsageText;

ParseResult Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "hvdrun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseArgs(static_cast<int>(argv.size()), argv.data());
}

// The spellings in a row's "names" or "aliases" list.
std::vector<std::string> Spellings(const char* list) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = list;; ++p) {
    if (*p == '\0' || *p == ',' || *p == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

TEST(LauncherOptions, EverySpellingIsOneRowAndShownOnesAreInHelp) {
  size_t count = 0;
  const OptionRow* rows = OptionRows(&count);
  ASSERT_GT(count, 40u);
  const std::string usage = UsageText();
  std::set<std::string> seen;
  for (size_t i = 0; i < count; ++i) {
    ASSERT_NE(rows[i].apply, nullptr) << rows[i].names;
    for (const std::string& name : Spellings(rows[i].names)) {
      EXPECT_TRUE(seen.insert(name).second) << name << " is in two rows";
      EXPECT_EQ(FindOption(name), &rows[i]) << name;
      EXPECT_NE(usage.find(name), std::string::npos) << name << " is not in --help";
    }
    for (const std::string& name : Spellings(rows[i].aliases)) {
      EXPECT_TRUE(seen.insert(name).second) << name << " is in two rows";
      EXPECT_EQ(FindOption(name), &rows[i]) << name;
    }
  }
  EXPECT_EQ(FindOption("--no-such-flag"), nullptr);
}

TEST(LauncherOptions, ValuesInlineOrNextAndLibraryFlagsInOrder) {
  ParseResult r = Parse({"-n", "3", "--autotune", "--cache-capacity=5", "--disable-cache",
                         "--log-level", "FATAL", "--", "prog", "-np", "7"});
  ASSERT_EQ(r.outcome, ParseOutcome::kRun) << r.error;
  EXPECT_EQ(r.options.np, 3);
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(r.options.extra_env, (Env{{"HVD_AUTOTUNE", "1"},
                                      {"HVD_CACHE_CAPACITY", "5"},
                                      {"HVD_CACHE_CAPACITY", "0"},
                                      {"HVD_LOG_LEVEL", "error"}}));
  EXPECT_EQ(r.options.command, (std::vector<std::string>{"prog", "-np", "7"}));
  ASSERT_EQ(r.options.hosts.size(), 1u);
  EXPECT_EQ(r.options.hosts[0].slots, 3);
}

TEST(LauncherOptions, TorchrunAliasesAndTwoValueFlags) {
  ParseResult r = Parse({"--nproc_per_node", "2", "--node_rank=0", "prog"});
  ASSERT_EQ(r.outcome, ParseOutcome::kRun) << r.error;
  EXPECT_TRUE(r.options.torchrun_style);
  EXPECT_EQ(r.options.np, 2);

  r = Parse({"--min-np", "1", "--blacklist-cooldown-range", "1", "5", "prog"});
  ASSERT_EQ(r.outcome, ParseOutcome::kRun) << r.error;
  EXPECT_TRUE(r.options.elastic);
  EXPECT_TRUE(r.options.cooldown_given);
  EXPECT_EQ(r.options.cooldown_max_s, 5);
}

TEST(LauncherOptions, StopsAndUsageErrors) {
  EXPECT_EQ(Parse({"-np", "2", "--help", "--no-such-flag"}).outcome, ParseOutcome::kHelp);
  EXPECT_EQ(Parse({"--version"}).outcome, ParseOutcome::kVersion);
  EXPECT_EQ(Parse({"-cb"}).outcome, ParseOutcome::kCheckBuild);

  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const Case cases[] = {
      {{"-np", "2"}, "no command given"},
      {{"--tag-output=yes", "prog"}, "option --tag-output takes no value"},
      {{"-np"}, "option -np needs a value"},
      {{"--blacklist-cooldown-range=1", "prog"},
       "option --blacklist-cooldown-range needs two values (--blacklist-cooldown-range A B)"},
      {{"--bogus", "prog"}, "unknown option '--bogus'"},
      {{"--help=1", "prog"}, "unknown option '--help=1'"},
      {{"--gloo", "--mpi", "prog"}, "--mpi conflicts with --gloo (one transport per job)"},
      {{"-np", "1", "--reset-limit", "2", "prog"},
       "--reset-limit is for elastic jobs (--min-np, --max-np or --host-discovery-script)"},
  };
  for (const Case& c : cases) {
    ParseResult r = Parse(c.args);
    EXPECT_EQ(r.outcome, ParseOutcome::kUsageError) << c.error;
    EXPECT_EQ(r.error, c.error);
  }
  ParseResult r = Parse({"--config-file", "x.yaml", "prog"});
  EXPECT_EQ(r.outcome, ParseOutcome::kUsageError);
  EXPECT_EQ(r.error.rfind("horovodrun's --config-file is not supported by hvdrun: ", 0), 0u)
      << r.error;
}

}  // namespace
