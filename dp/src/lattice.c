/* Float <-> integer lattice maps and conditional randomized rounding. */

#include <math.h>

#include "lattice_round.h"

fl_status fl_dp_lattice_encode(int64_t *out, const float *x, size_t n, double granularity) {
    if ((!out || !x) && n > 0)
        return FL_ERR_MISUSE;
    if (!isfinite(granularity) || !(granularity > 0))
        return FL_ERR_MISUSE;
    /* Validate all before writing. */
    for (size_t i = 0; i < n; i++) {
        double v = (double)x[i] / granularity;
        if (!isfinite(v) || fabs(v) >= 0x1p62)
            return FL_ERR_RANGE;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (int64_t)nearbyint((double)x[i] / granularity); /* default mode: ties to even */
    return FL_OK;
}

fl_status fl_dp_lattice_decode(float *out, const int64_t *q, size_t n, double granularity) {
    if ((!out || !q) && n > 0)
        return FL_ERR_MISUSE;
    if (!isfinite(granularity) || !(granularity > 0))
        return FL_ERR_MISUSE;
    for (size_t i = 0; i < n; i++)
        out[i] = (float)((double)q[i] * granularity);
    return FL_OK;
}

fl_status fl__dp_round_bound_sq(fl__dp_u128 *out, double cs, double d, double beta) {
    double sd = sqrt(d);
    double b2 = (cs + sd) * (cs + sd);
    if (beta > 0) {
        double b1 = cs * cs + d / 4 + sqrt(2 * log(1 / beta)) * (cs + sd / 2);
        if (b1 < b2)
            b2 = b1;
    }
    if (!(b2 < 0x1p120))
        return FL_ERR_RANGE;
    *out = (fl__dp_u128)floor(b2);
    return FL_OK;
}

fl_status fl__dp_round_conditional(struct fl_dp_rng *rng, int64_t *out, const double *x, size_t n,
                                   fl__dp_u128 bound_sq) {
    for (int attempt = 0; attempt < FL__DP_ROUND_TRIES; attempt++) {
        /* The loop stops once ss > bound_sq, so ss < 2^120 + 2^124: no overflow. */
        fl__dp_u128 ss = 0;
        int over = 0;
        for (size_t i = 0; i < n && !over; i++) {
            double f = floor(x[i]);
            double frac = x[i] - f; /* exact for |x| < 2^61 */
            /* A 53-bit uniform decides the direction. Utility only: privacy rests on the
             * exact integer norm check. */
            double u = (double)(fl__dp_rng_u64(rng) >> 11) * 0x1p-53;
            int64_t q = (int64_t)f + (u < frac);
            out[i] = q;
            uint64_t a = q < 0 ? (uint64_t)0 - (uint64_t)q : (uint64_t)q;
            ss += (fl__dp_u128)a * a;
            over = ss > bound_sq;
        }
        if (rng->failed)
            return rng->failed;
        if (!over)
            return FL_OK;
    }
    return FL_ERR_AGAIN;
}
