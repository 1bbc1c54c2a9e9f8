/* Float <-> integer lattice maps and conditional randomized rounding. */

#include <math.h>
#include <string.h>

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

/* The two variants below must consume the rng exactly as fl__dp_round_conditional does (one
 * fl__dp_rng_u64 per visited coordinate, a whole attempt stopping at the first coordinate
 * that takes the sum over the bound) and compute the same doubles: the unit tests compare
 * their output with the stored-vector encoders bit for bit. The dp sources are compiled with
 * -ffp-contract=off, so x * f is rounded before floor() and the subtraction, as when x is
 * stored first. */

fl_status fl__dp_round_conditional_words(struct fl_dp_rng *rng, void *out, size_t wb,
                                         uint64_t mask, const float *v, double f, size_t n,
                                         fl__dp_u128 bound_sq) {
    unsigned char *o = out;
    for (int attempt = 0; attempt < FL__DP_ROUND_TRIES; attempt++) {
        fl__dp_u128 ss = 0;
        int over = 0;
        for (size_t i = 0; i < n && !over; i++) {
            double x = (double)v[i] * f;
            double fl = floor(x);
            double frac = x - fl;
            double u = (double)(fl__dp_rng_u64(rng) >> 11) * 0x1p-53;
            int64_t q = (int64_t)fl + (u < frac);
            uint64_t a = q < 0 ? (uint64_t)0 - (uint64_t)q : (uint64_t)q;
            ss += (fl__dp_u128)a * a;
            over = ss > bound_sq;
            uint64_t w = (uint64_t)q & mask; /* two's complement mod 2^b */
            if (wb == 4) {
                uint32_t w32 = (uint32_t)w;
                memcpy(o + 4 * i, &w32, 4);
            } else {
                memcpy(o + 8 * i, &w, 8);
            }
        }
        if (rng->failed)
            return rng->failed;
        if (!over)
            return FL_OK;
    }
    return FL_ERR_AGAIN;
}

fl_status fl__dp_round_conditional_bits(struct fl_dp_rng *rng, uint8_t *bits, const double *x,
                                        size_t n, fl__dp_u128 bound_sq) {
    for (int attempt = 0; attempt < FL__DP_ROUND_TRIES; attempt++) {
        fl__dp_u128 ss = 0;
        int over = 0;
        memset(bits, 0, (n + 7) / 8);
        for (size_t i = 0; i < n && !over; i++) {
            double f = floor(x[i]);
            double frac = x[i] - f;
            double u = (double)(fl__dp_rng_u64(rng) >> 11) * 0x1p-53;
            unsigned up = u < frac;
            int64_t q = (int64_t)f + (int64_t)up;
            bits[i >> 3] |= (uint8_t)(up << (i & 7));
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
