// The table of settings behind ResolveConfig (src/core/config/settings.h):
// names and variables unique, and every row's variable, under hvd's name and
// Horovod's, landing in the Config member the row names, below params.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/config/config.h"
#include "core/config/settings.h"

namespace hvd {
namespace {

using config::Parse;
using config::Setting;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// A number inside the row's range: 7.5 where the range allows it (most
// rows), else the range's midpoint (a share in [0, 1]).
double ValidNumber(const Setting& s) {
  if (s.range.error == nullptr || (s.range.lo <= 7.5 && 7.5 <= s.range.hi)) return 7.5;
  return (s.range.lo + s.range.hi) / 2;
}

// A valid value for the row's parser, and how it reads back from Config.
std::string ValidText(const Setting& s) {
  switch (s.parse) {
    case Parse::kText: return "x";
    case Parse::kInt: return "7";
    case Parse::kNumber: return std::to_string(ValidNumber(s));
    case Parse::kSwitch: return "On";
    case Parse::kOnOff: return "on";
    case Parse::kLogLevel: return "debug";
    case Parse::kAlgorithm: return "auto";
  }
  return "";
}

std::string ReadBack(const Setting& s, const Config& c) {
  if (auto* t = std::get_if<std::string Config::*>(&s.target)) return c.*(*t);
  if (auto* t = std::get_if<int64_t Config::*>(&s.target)) return std::to_string(c.*(*t));
  if (auto* t = std::get_if<int Config::*>(&s.target)) return std::to_string(c.*(*t));
  if (auto* t = std::get_if<double Config::*>(&s.target)) return std::to_string(c.*(*t));
  if (auto* t = std::get_if<bool Config::*>(&s.target)) return c.*(*t) ? "true" : "false";
  if (auto* t = std::get_if<std::string (Config::*)[6]>(&s.target)) return (c.*(*t))[s.index];
  return "?";
}

std::string Expected(const Setting& s) {
  switch (s.parse) {
    case Parse::kText:
    case Parse::kAlgorithm: return ValidText(s);
    case Parse::kInt: return "7";
    case Parse::kNumber: return std::to_string(ValidNumber(s));
    case Parse::kSwitch:
    case Parse::kOnOff:
      return std::holds_alternative<bool Config::*>(s.target) ? "true" : "1";
    case Parse::kLogLevel: return std::to_string(HVD_LOG_DEBUG);
  }
  return "";
}

TEST(ConfigSettings, NamesAndVariablesAreUnique) {
  size_t count = 0;
  const Setting* rows = config::Settings(&count);
  ASSERT_GT(count, 30u);
  std::set<std::string> names, vars;
  for (size_t k = 0; k < count; ++k) {
    EXPECT_TRUE(names.insert(rows[k].name).second) << rows[k].name;
    EXPECT_EQ(config::RowOf(rows[k].name), k);
    ASSERT_NE(rows[k].hvd, nullptr) << rows[k].name;
    EXPECT_EQ(std::string(rows[k].hvd).rfind("HVD_", 0), 0u) << rows[k].hvd;
    EXPECT_TRUE(vars.insert(rows[k].hvd).second) << rows[k].hvd;
    if (rows[k].horovod != nullptr) {
      EXPECT_EQ(std::string(rows[k].horovod).rfind("HOROVOD_", 0), 0u) << rows[k].horovod;
      EXPECT_TRUE(vars.insert(rows[k].horovod).second) << rows[k].horovod;
    }
    EXPECT_NE(rows[k].help, nullptr) << rows[k].name;
  }
  EXPECT_EQ(config::RowOf("no_such_setting"), SIZE_MAX);
}

TEST(ConfigSettings, EveryVariableLandsInItsMember) {
  size_t count = 0;
  const Setting* rows = config::Settings(&count);
  for (size_t k = 0; k < count; ++k) {
    const Setting& s = rows[k];
    for (const char* var : {s.hvd, s.horovod}) {
      if (var == nullptr) continue;
      auto r = ResolveConfig(nullptr, FakeEnv({{var, ValidText(s)}}));
      ASSERT_TRUE(r.ok()) << var << ": " << r.status().message();
      EXPECT_EQ(ReadBack(s, r.value()), Expected(s)) << var;
    }
  }
}

TEST(ConfigSettings, ParamsThenHvdThenHorovod) {
  const std::map<std::string, std::string> both = {{"HVD_CYCLE_TIME", "2"},
                                                   {"HOROVOD_CYCLE_TIME", "3"}};
  auto from_env = ResolveConfig(nullptr, FakeEnv(both));
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env.value().cycle_time_ms, 2);

  // An empty HVD_* variable counts as unset: Horovod's name is read.
  auto empty = ResolveConfig(nullptr, FakeEnv({{"HVD_CYCLE_TIME", ""}, {"HOROVOD_CYCLE_TIME", "3"}}));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty.value().cycle_time_ms, 3);

  hvd_params_t p = HVD_PARAMS_INIT;
  p.mask = HVD_PARAM_CYCLE_TIME;
  p.cycle_time_ms = 4;
  auto from_params = ResolveConfig(&p, FakeEnv(both));
  ASSERT_TRUE(from_params.ok());
  EXPECT_EQ(from_params.value().cycle_time_ms, 4);
}

}  // namespace
}  // namespace hvd
