#ifndef FLOTILLA_DP_DISCRETE_NOISE_H
#define FLOTILLA_DP_DISCRETE_NOISE_H

/* Internal entry points of the exact discrete samplers, for the mechanisms that add noise
 * element by element (central, distributed, adaptive clipping). Never installed. */

#include <stdint.h>

#include "rng_bits.h"

/* Discrete Gaussian parameters precomputed from sigma^2 = num/den (reduced). */
struct fl__dp_dgauss {
    uint64_t num, den;  /* sigma^2 = num/den, reduced, each in [1, 2^40] */
    uint64_t t;         /* Laplace proposal scale 2^s, within sqrt(2) of sigma */
    unsigned s;         /* log2 t, <= 21 */
    uint8_t geo_th[32]; /* per-bit thresholds of the proposal (geometric_bits.h) */
    fl__dp_u128 tden;   /* t * den */
    fl__dp_u128 d;      /* 2 t^2 num den: denominator of the acceptance exponent */
    uint64_t xmax;      /* largest proposal magnitude with |Y| t den < 2^63 */
};

/* Validates and precomputes; FL_OK or FL_ERR_MISUSE (no message). */
fl_status fl__dp_dgauss_prepare(struct fl__dp_dgauss *g, uint64_t num, uint64_t den);

/* One exact sample into *out. Returns FL_OK, FL_ERR_RANGE (proposal overflow, no message) or
 * the rng's sticky failure. */
fl_status fl__dp_dgauss_one(struct fl_dp_rng *rng, const struct fl__dp_dgauss *g, int64_t *out);

#endif /* FLOTILLA_DP_DISCRETE_NOISE_H */
