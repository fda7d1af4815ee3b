// Checks for the C++ tests: a failed check prints its place and what was
// wrong and is counted; the test goes on, and CheckReport at the end gives
// the exit status.
#ifndef DS_TESTS_CPP_CHECK_H
#define DS_TESTS_CPP_CHECK_H

#include <cstdio>

#include "datasystem/datasystem.h"

static int g_failures = 0;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_CODE(expr, code)                                                                     \
    do {                                                                                           \
        datasystem::Status _s = (expr);                                                            \
        if (_s.GetCode() != (code)) {                                                              \
            fprintf(stderr, "%s:%d: %s: want %s, got %s\n", __FILE__, __LINE__, #expr,             \
                    datasystem::Status::StatusCodeName(code).c_str(), _s.ToString().c_str());      \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_OK(expr) CHECK_CODE(expr, datasystem::K_OK)

// The test's exit status: 1 (with the count) when any check failed.
static inline int CheckReport(const char *test)
{
    if (g_failures) {
        fprintf(stderr, "%d checks failed\n", g_failures);
        return 1;
    }
    printf("%s: all checks passed\n", test);
    return 0;
}

#endif
