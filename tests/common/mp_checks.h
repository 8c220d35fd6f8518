// Check macros for the multi-process test programs: every check is counted,
// a failure prints the rank, file and line and the run goes on (a rank that
// stopped at its first failure would leave its peers waiting).
#pragma once

#include <cstdio>

#include "hvd.h"

namespace hvd::test {
inline int g_rank = -1;
inline int g_checks = 0;
inline int g_failures = 0;
}  // namespace hvd::test

#define CHECK_TRUE(cond, ...)                                                        \
  do {                                                                               \
    ++::hvd::test::g_checks;                                                         \
    if (!(cond)) {                                                                   \
      ++::hvd::test::g_failures;                                                     \
      std::fprintf(stderr, "rank %d: FAILED %s:%d: ", ::hvd::test::g_rank, __FILE__, \
                   __LINE__);                                                        \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fprintf(stderr, "\n");                                                    \
    }                                                                                \
  } while (0)

#define CHECK_OK(expr)                                                                        \
  do {                                                                                        \
    hvd_status_t s_ = (expr);                                                                 \
    CHECK_TRUE(s_ == HVD_OK, "%s -> %s: %s", #expr, hvd_status_string(s_), hvd_last_error()); \
  } while (0)
