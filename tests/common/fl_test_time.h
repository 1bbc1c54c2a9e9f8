#ifndef FL_TEST_TIME_H
#define FL_TEST_TIME_H
/* One factor for the waits of tests and fixtures: curl timeouts, "wait for the
 * coordinator's port" loops, poll deadlines and the wall-clock bounds a test checks.
 * FL_TEST_TIME_SCALE (a whole number, default 1) multiplies them all, so the suite can run
 * under a slow tool: scripts/valgrind.sh sets 20, valgrind's usual slowdown. Only the time a
 * test waits grows; what it asserts stays the same (a bound and the duration it bounds are
 * scaled together). */
#include <stdlib.h>

/* FL_TEST_TIME_SCALE in 1..1000; 1 when unset or not such a number. */
static inline long fl_test_time_scale(void) {
    const char *v = getenv("FL_TEST_TIME_SCALE");
    if (!v || !v[0])
        return 1;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end && *end == '\0' && n >= 1 && n <= 1000 ? n : 1;
}

/* n (milliseconds, seconds or loop iterations) times the scale. */
static inline long fl_test_scaled(long n) {
    return n * fl_test_time_scale();
}

/* Seconds (fractional) times the scale. */
static inline double fl_test_scaled_s(double s) {
    return s * (double)fl_test_time_scale();
}

#endif
