#ifndef FLOTILLA_DP_SAMPLER_TABLE_H
#define FLOTILLA_DP_SAMPLER_TABLE_H

/* Table-driven exact discrete Gaussian sampler for batches (sampler_table.c). Never
 * installed. The tables depend only on sigma^2 and are cached on the rng handle. */

#include <stddef.h>
#include <stdint.h>

#include "rng_bits.h"

#define FL__DP_TABLE_KBITS_MAX 10 /* at most 2^10 alias columns */
#define FL__DP_TABLE_COLS (1u << FL__DP_TABLE_KBITS_MAX)

/* Batches at least this long build (or reuse) the table; shorter ones use the per-sample
 * CKS20 path of discrete_gaussian.c, so one-off draws pay no setup. */
#define FL__DP_TABLE_MIN_N 1024

struct fl__dp_sampler_table {
    uint64_t num, den;   /* sigma^2 = num/den, reduced: the cache key */
    unsigned kbits;      /* log2 K, K = alias columns (>= body bins + 1 for the tail) */
    unsigned wbits;      /* log2 W, W = width of a body bin (magnitudes) */
    unsigned tbits;      /* log2 of the tail's block width, 2^tbits >= sigma^2 / R */
    uint32_t nbody;      /* body bins; bin nbody is the tail */
    uint64_t r;          /* R = nbody W: magnitudes >= R come from the tail */
    uint64_t kappa_mant; /* kappa = kappa_mant 2^kappa_exp exactly (see sampler_table.c) */
    int kappa_exp;
    double c;                        /* den / (2 num) rounded: gamma(m) ~ m^2 c */
    uint64_t col[FL__DP_TABLE_COLS]; /* alias column: threshold (<= 2^32) | alias << 33 */
    uint64_t q[FL__DP_TABLE_COLS];   /* exact weight of bin i, sum 2^(kbits + 32) */
    double p[FL__DP_TABLE_COLS];     /* ~ kappa W / q_i exp(-gamma(i W)), rel. err < 2^-35 */
    uint64_t lo[FL__DP_TABLE_COLS];  /* lo <= 2^32 v(m) for every m of bin i */
    uint64_t hi[FL__DP_TABLE_COLS];  /* hi >= 2^32 v(m) for every m of bin i */
};

/* Fills t for sigma^2 = num/den (reduced, each in [1, 2^40]). Returns FL_OK, or
 * FL_ERR_INTERNAL if a defensive check fails (callers then use the CKS20 path). */
fl_status fl__dp_table_build(struct fl__dp_sampler_table *t, uint64_t num, uint64_t den);

/* The same with the body covering about body_sigmas sigma instead of 8 (tests use a short
 * body to exercise the tail; the output distribution is the same for every shape). */
fl_status fl__dp_table_build_shape(struct fl__dp_sampler_table *t, uint64_t num, uint64_t den,
                                   double body_sigmas);

/* The rng's cached table for num/den, built if needed; NULL if it cannot be allocated or
 * built (callers then use the CKS20 path). */
const struct fl__dp_sampler_table *fl__dp_table_get(struct fl_dp_rng *rng, uint64_t num,
                                                    uint64_t den);

/* n exact samples of N_Z(0, num/den) into out (add = 0) or added to out (add = 1). Returns
 * FL_OK; FL_ERR_RANGE with *bad = n for a proposal beyond the supported range (probability
 * below 2^-1000), or with *bad = i when adding sample i would overflow int64 (out[i] is left
 * as it was); or rng->failed. */
fl_status fl__dp_table_sample(struct fl_dp_rng *rng, const struct fl__dp_sampler_table *t,
                              int64_t *out, size_t n, int add, size_t *bad);

#endif /* FLOTILLA_DP_SAMPLER_TABLE_H */
