/* Small helpers shared by the benchmark programs under tests/bench/: clock reads, the median
 * of a sample, count and size flag parsing, a seeded generator, and die(). Header-only
 * (static inline), so each bench stays one .c file; the benches are executables, so the
 * helpers may exit.
 *
 * bench_die() needs BENCH_NAME (the program name that prefixes its message, e.g.
 * "bench_registry") defined before this header is included; a bench that does not define
 * it simply does not get bench_die(). */
#ifndef FLOTILLA_BENCH_UTIL_H
#define FLOTILLA_BENCH_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- clocks ---- */

/* Seconds on clock id: CLOCK_MONOTONIC for wall time, CLOCK_THREAD_CPUTIME_ID or
 * CLOCK_PROCESS_CPUTIME_ID for CPU time. Each bench picks its own default (and whether
 * --wall switches it), so the clock is a parameter, not a global. */
static inline double bench_clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wall-clock seconds (CLOCK_MONOTONIC). */
static inline double bench_wall_s(void) {
    return bench_clock_s(CLOCK_MONOTONIC);
}

/* ---- samples ---- */

/* qsort comparator for doubles, ascending; -1, 0 or 1 (0 for NaN, as none is expected). */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (n >= 1), the mean of the two middle values when n is even. Sorts v in
 * place: copy first if the order matters. */
static inline double bench_median(double *v, size_t n) {
    qsort(v, n, sizeof(*v), bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- flags ---- */

/* A whole decimal count in [1, max] into *out; 0, or -1 (out untouched) on junk. */
static inline int bench_parse_count(const char *s, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno || v < 1 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* A byte size > 0 with an optional binary K/M/G suffix and an optional B ("4096", "16K",
 * "1MB"), ending at '\0' or ',' so that a comma-separated list can be walked; 0, or -1 (out
 * untouched) on junk. */
static inline int bench_parse_size(const char *s, size_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if ((*end != '\0' && *end != ',') || v == 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* $TMPDIR, or /tmp when it is unset or empty. */
static inline const char *bench_tmpdir(void) {
    const char *dir = getenv("TMPDIR");
    return dir && dir[0] ? dir : "/tmp";
}

/* ---- data ---- */

/* SplitMix64: the next value of the sequence seeded by *s (synthetic inputs, not crypto). */
static inline uint64_t bench_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- failure ---- */

#ifdef BENCH_NAME
/* Prints "BENCH_NAME: what" (": detail" when detail is not NULL) to stderr and exits 1. */
static inline _Noreturn void bench_die(const char *what, const char *detail) {
    fprintf(stderr, BENCH_NAME ": %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}
#endif

#endif /* FLOTILLA_BENCH_UTIL_H */
