#ifndef FLOTILLA_DP_SAMPLER_EXACT_H
#define FLOTILLA_DP_SAMPLER_EXACT_H

/* Exact comparisons against exp(-gamma) for the table-driven discrete Gaussian sampler
 * (sampler_table.c). Never installed.
 *
 * The fast sampler decides "U < v" for a uniform real U in [0, 1) and a threshold
 * v = (a 2^e / b) exp(-n/d) from a double approximation of v with a proven relative error
 * bound: the first bits of U are almost always far enough from v. Only when they are not
 * (probability about 2^-30) does it call fl__dp_cmp_exp, which finishes the same comparison
 * with the same leading bits of U and exact interval arithmetic on multi-word fixed-point
 * numbers. So the decision is always exactly [U < v]; floating point never decides it. */

#include "rng_bits.h"

/* Largest precision (bits of U and of v) fl__dp_cmp_exp works to. */
#define FL__DP_CMP_MAX_BITS 4096

/* Compares U with v = (a 2^e / b) exp(-n/d), where U is uniform in [0, 1) and its first kbits
 * bits (kbits <= 64) are `prefix`; the remaining bits are read from rng. a, b >= 1,
 * 0 <= n < 2^127, 1 <= d < 2^127, |e| <= 2048. Returns 1 if U < v, 0 if not, and -1 if the
 * first FL__DP_CMP_MAX_BITS bits of U and of v still agree (probability below 2^-4000;
 * callers report FL_ERR_RANGE instead of a sample). Once the rng has failed the answer is 0
 * and callers report rng->failed. */
int fl__dp_cmp_exp(struct fl_dp_rng *rng, uint64_t prefix, unsigned kbits, uint64_t a, int e,
                   uint64_t b, fl__dp_u128 n, fl__dp_u128 d);

/* Rigorous double bounds lo <= exp(-n/d) <= hi for 0 <= n < 2^127, 1 <= d < 2^127, from
 * double arithmetic with a stated error bound (no libm): relative error of the midpoint below
 * 2^-36, bounds widened by 2^-32. For n/d > 700, lo = 0 and hi = 2^-1000. */
void fl__dp_exp_neg_bounds(fl__dp_u128 n, fl__dp_u128 d, double *lo, double *hi);

#endif /* FLOTILLA_DP_SAMPLER_EXACT_H */
