#ifndef FLOTILLA_DP_LATTICE_ROUND_H
#define FLOTILLA_DP_LATTICE_ROUND_H

/* Conditional randomized rounding onto Z^n (KLS21 Section 4.1), shared by the central and
 * distributed mechanisms. Never installed. */

#include "rng_bits.h"

/* Largest |x| (lattice units) accepted before rounding, so that a rounded value plus
 * discrete Gaussian noise stays far from int64 overflow. */
#define FL__DP_LATTICE_MAX 0x1p61

/* Rounding attempts before giving up with FL_ERR_AGAIN. */
#define FL__DP_ROUND_TRIES 1000

/* *out = floor(Delta^2) for KLS21's bound on the rounded vector, with scaled clip cs = c/gamma
 * in dimension d and bias beta in [0, 1):
 *   Delta^2 = min(cs^2 + d/4 + sqrt(2 ln(1/beta)) (cs + sqrt(d)/2), (cs + sqrt(d))^2)
 * (the first term is dropped when beta = 0). FL_OK, or FL_ERR_RANGE if it is >= 2^120. */
fl_status fl__dp_round_bound_sq(fl__dp_u128 *out, double cs, double d, double beta);

/* out[i] = floor(x[i]) + Bernoulli(x[i] - floor(x[i])), redrawn as a whole until
 * sum out[i]^2 <= bound_sq, at most FL__DP_ROUND_TRIES times. Callers guarantee
 * |x[i]| < FL__DP_LATTICE_MAX. Returns FL_OK, FL_ERR_AGAIN, or the rng's failure. */
fl_status fl__dp_round_conditional(struct fl_dp_rng *rng, int64_t *out, const double *x, size_t n,
                                   fl__dp_u128 bound_sq);

/* The same rounding of x[i] = (double)v[i] * f computed on the fly (callers guarantee
 * |x[i]| < FL__DP_LATTICE_MAX), each q[i] stored as a word of wb (4 or 8) bytes, reduced with
 * mask, into out. Draws the same random words as fl__dp_round_conditional on the stored x, so
 * the words are its output modulo mask + 1. Returns FL_OK, FL_ERR_AGAIN, or the rng's
 * failure. */
fl_status fl__dp_round_conditional_words(struct fl_dp_rng *rng, void *out, size_t wb,
                                         uint64_t mask, const float *v, double f, size_t n,
                                         fl__dp_u128 bound_sq);

/* The same rounding, recording the decisions instead of the values: bit i of bits (LSB first
 * within each byte; (n + 7) / 8 bytes) is q[i] - floor(x[i]). Same random words as
 * fl__dp_round_conditional. Returns FL_OK, FL_ERR_AGAIN, or the rng's failure. */
fl_status fl__dp_round_conditional_bits(struct fl_dp_rng *rng, uint8_t *bits, const double *x,
                                        size_t n, fl__dp_u128 bound_sq);

#endif /* FLOTILLA_DP_LATTICE_ROUND_H */
