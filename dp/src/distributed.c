/* Distributed discrete Gaussian (Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian
 * Mechanism for Federated Learning with Secure Aggregation", ICML 2021), Algorithms 1-2:
 * the client encoder (clip, scale, rotate, conditional rounding, per-client discrete
 * Gaussian, reduction mod 2^b), the server decoder, parameter selection and the privacy
 * figures of Theorem 1 for the accountant. */

#include <math.h>
#include <string.h>

#include "discrete_noise.h"
#include "lattice_round.h"

#define MAX_DIM ((size_t)1 << 40)
#define PI 3.14159265358979323846

size_t fl_dp_distributed_padded_dim(size_t dim) {
    if (dim == 0 || dim > MAX_DIM)
        return 0;
    size_t d = 1;
    while (d < dim)
        d <<= 1;
    return d;
}

void fl_dp_distributed_params_init(fl_dp_distributed_params *p) {
    if (!p)
        return;
    memset(p, 0, sizeof(*p));
    p->struct_size = sizeof(*p);
    p->clip = 1.0;
    p->granularity = 1e-3;
    p->beta = exp(-0.5);
    p->modulus_bits = 20;
    p->n_min = 1;
    p->sigma2_num = 1;
    p->sigma2_den = 1;
}

/* Validates the fields every direction needs (not the noise). */
static int shape_ok(const fl_dp_distributed_params *p) {
    return p && p->struct_size >= sizeof(*p) && fl_dp_distributed_padded_dim(p->dim) != 0 &&
           isfinite(p->clip) && p->clip > 0 && p->beta >= 0 && p->beta < 1 &&
           p->modulus_bits >= 2 && p->modulus_bits <= 62 && p->n_min >= 1;
}

/* Full validation; fills the rounding bound and the sampler parameters. */
static fl_status check(const fl_dp_distributed_params *p, fl__dp_u128 *bound_sq,
                       struct fl__dp_dgauss *g) {
    if (!shape_ok(p) || !isfinite(p->granularity) || !(p->granularity > 0) ||
        fl__dp_dgauss_prepare(g, p->sigma2_num, p->sigma2_den) != FL_OK)
        return FL_ERR_MISUSE;
    double cs = p->clip / p->granularity;
    if (!(cs < FL__DP_LATTICE_MAX))
        return FL_ERR_MISUSE;
    size_t dp = fl_dp_distributed_padded_dim(p->dim);
    if (fl__dp_round_bound_sq(bound_sq, cs, (double)dp, p->beta) != FL_OK)
        return FL_ERR_MISUSE;
    return FL_OK;
}

/* Sub-Gaussian variance proxy of one coordinate of the modular sum over n clients (lattice
 * units): rotated signal (n c/gamma)^2 / d' + rounding n/4 + noise n sigma_c^2. */
static double wrap_proxy(double cs, double dpad, double n, double sc2) {
    return (n * cs) * (n * cs) / dpad + n / 4 + n * sc2;
}

fl_status fl_dp_distributed_info_get(fl_dp_distributed_info *info,
                                     const fl_dp_distributed_params *p, uint32_t n_survivors) {
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if (!info || check(p, &b, &g) != FL_OK || n_survivors < p->n_min)
        return FL_ERR_MISUSE;
    memset(info, 0, sizeof(*info));
    size_t dpad = fl_dp_distributed_padded_dim(p->dim);
    double d = (double)dpad, n = (double)n_survivors;
    double l2sq = (double)b, l2 = sqrt(l2sq);
    double sc2 = (double)p->sigma2_num / (double)p->sigma2_den;
    info->dim_padded = dpad;
    info->l2_bound = l2;
    info->l1_bound = fmin(l2sq, sqrt(d) * l2);
    info->client_variance = sc2;
    info->total_variance = n * sc2;
    /* tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sc2 k/(k+1)). The terms shrink as k grows (towards
     * exp(-2 pi^2 sc2)), so past 2^20 terms the rest is bounded by the first of them,
     * k = 2^20 + 1, each (an over-estimate, which is the safe side for privacy). */
    const uint32_t kmax = (uint32_t)1 << 20;
    double tau = 0;
    for (uint32_t k = 1; k < n_survivors && k <= kmax; k++)
        tau += exp(-2 * PI * PI * sc2 * ((double)k / (double)(k + 1)));
    if (n_survivors > kmax + 1)
        tau += (double)(n_survivors - 1 - kmax) *
               exp(-2 * PI * PI * sc2 * ((double)(kmax + 1) / (double)(kmax + 2)));
    tau *= 10;
    info->tau = tau;
    double tv = n * sc2;
    double eps = fmin(sqrt(l2sq / tv + tau * d / 2), l2 / sqrt(tv) + tau * sqrt(d));
    info->rho = eps * eps / 2;
    info->noise_multiplier = l2 > 0 ? sqrt(tv) / l2 : INFINITY;
    double m = ldexp(1.0, (int)p->modulus_bits);
    double v = wrap_proxy(p->clip / p->granularity, d, n, sc2);
    info->modular_wrap_bound = fmin(1.0, 2 * d * exp(-m * m / (8 * v)));
    return FL_OK;
}

fl_status fl_dp_distributed_choose(fl_dp_distributed_params *p, double noise_multiplier,
                                   uint32_t n_max, double wrap_prob) {
    if (!shape_ok(p) || !isfinite(noise_multiplier) || !(noise_multiplier > 0) ||
        n_max < p->n_min || !(wrap_prob > 0) || !(wrap_prob < 1))
        return FL_ERR_MISUSE;
    double d = (double)fl_dp_distributed_padded_dim(p->dim);
    double n = (double)n_max, nmin = (double)p->n_min, c = p->clip, z = noise_multiplier;
    double m = ldexp(1.0, (int)p->modulus_bits);
    /* Need v(gamma) = A / gamma^2 + n/4 <= m^2 / (8 L), L = ln(2 d' / wrap_prob). */
    double lim = m * m / (8 * log(2 * d / wrap_prob)) - n / 4;
    if (!(lim > 0))
        return FL_ERR_RANGE;
    double a = (n * c) * (n * c) / d + (n / nmin) * (z * c) * (z * c);
    double gamma = sqrt(a / lim) * (1 + 1e-9);
    /* A coarser grid only lowers the wrap probability: widen it if the per-client variance
     * would exceed what the sampler takes (many bits, few clients). */
    double gmin = z * c / sqrt((double)FL_DP_SIGMA2_MAX * nmin) * (1 + 1e-9);
    if (gamma < gmin)
        gamma = gmin;
    /* Per-client variance (z c / gamma)^2 / n_min, rounded up to a rational whose
     * denominator is the largest power of two <= 2^20 that keeps num <= 2^40. */
    double sc2 = (z * c / gamma) * (z * c / gamma) / nmin;
    if (!(sc2 <= (double)FL_DP_SIGMA2_MAX) || !(c / gamma < FL__DP_LATTICE_MAX))
        return FL_ERR_RANGE;
    uint64_t den = (uint64_t)1 << 20;
    while (den > 1 && sc2 * (double)den > (double)FL_DP_SIGMA2_MAX)
        den >>= 1;
    uint64_t num, dd;
    if (sc2 < 1.0 / (double)((uint64_t)1 << 20)) {
        num = 1;
        dd = (uint64_t)1 << 20;
    } else if (fl_dp_variance_to_rational(&num, &dd, sc2, den) != FL_OK) {
        return FL_ERR_RANGE;
    }
    p->granularity = gamma;
    p->sigma2_num = num;
    p->sigma2_den = dd;
    return FL_OK;
}

fl_status fl_dp_distributed_encode(fl_dp_rng *rng, uint64_t *out, size_t out_len,
                                   const float *update, const fl_dp_distributed_params *p,
                                   const uint8_t *rotation_seed, double *norm_out,
                                   const fl_allocator *alloc) {
    if (!rng)
        return FL_ERR_MISUSE;
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if (check(p, &b, &g) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_distributed_encode: invalid params");
    size_t dpad = fl_dp_distributed_padded_dim(p->dim);
    if (!out || !update || !rotation_seed || out_len != dpad)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_distributed_encode: NULL argument or out_len != %zu", dpad);
    fl_allocator a;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_distributed_encode: bad allocator");
    if (rng->failed)
        return rng->failed;
    double norm;
    if (fl_dp_l2_norm(&norm, update, p->dim) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_RANGE, "fl_dp_distributed_encode: non-finite update");
    double *w = fl__alloc_array(&a, dpad, sizeof(double));
    if (!w)
        return FL_ERR_NOMEM;
    fl_status st;
    /* 1. clip to c and scale by 1/gamma (in double), zero-pad to d'. */
    double f = (norm > p->clip ? p->clip / norm : 1.0) / p->granularity;
    for (size_t i = 0; i < p->dim; i++)
        w[i] = (double)update[i] * f;
    for (size_t i = p->dim; i < dpad; i++)
        w[i] = 0;
    /* 2. rotate: H D w. Coordinates stay below ||w|| <= c/gamma < 2^61. */
    st = fl_dp_rotation_forward(w, dpad, rotation_seed);
    if (st != FL_OK)
        goto out_free_w;
    /* 3. conditional randomized rounding into out (int64 and uint64 may alias). */
    int64_t *q = (int64_t *)out;
    st = fl__dp_round_conditional(rng, q, w, dpad, b);
    if (st != FL_OK) {
        if (st == FL_ERR_AGAIN)
            fl__err_set(&rng->err, st, "fl_dp_distributed_encode: conditional rounding failed");
        goto out_wipe;
    }
    /* 4. per-client discrete Gaussian, 5. reduce mod 2^b (two's complement wrap is mod 2^64,
     * which 2^b divides). */
    const uint64_t mask = ((uint64_t)1 << p->modulus_bits) - 1;
    for (size_t i = 0; i < dpad; i++) {
        int64_t z;
        st = fl__dp_dgauss_one(rng, &g, &z);
        if (st != FL_OK) {
            if (st == FL_ERR_RANGE)
                fl__err_set(&rng->err, st, "fl_dp_distributed_encode: sampler overflow");
            goto out_wipe;
        }
        out[i] = ((uint64_t)q[i] + (uint64_t)z) & mask;
    }
    if (norm_out)
        *norm_out = norm;
    goto out_free_w;
out_wipe:
    /* Never leave an un-noised rounded update in out. */
    fl_memzero(out, dpad * sizeof(uint64_t));
out_free_w:
    fl_memzero(w, dpad * sizeof(double));
    fl__free(&a, w, dpad * sizeof(double));
    return st;
}

/* Sum of squares in double, as fl_dp_l2_norm computes it for floats (same order, so the same
 * value for float-exact inputs). */
static double sum_sq_d(const double *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return s;
}

/* fl_dp_distributed_encode without its two d'-sized buffers. The rotated vector lives in buf;
 * conditional rounding only records its up/down decisions in a bitmap (one attempt may be
 * redrawn, so the rotated values must survive it), then one pass reads x[i], draws the noise
 * and writes word i over the front of buf. Word i occupies bytes [wb i, wb (i + 1)), which for
 * wb <= 8 never reaches a double x[j] with j > i, so every x[j] is read before it is
 * overwritten. Words are stored with memcpy (buf's bytes change type from double to word). */
fl_status fl_dp_distributed_encode_inplace(fl_dp_rng *rng, double *buf, size_t buf_len,
                                           size_t word_bytes, const fl_dp_distributed_params *p,
                                           const uint8_t *rotation_seed, double *norm_out,
                                           const fl_allocator *alloc) {
    if (!rng)
        return FL_ERR_MISUSE;
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if (check(p, &b, &g) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_distributed_encode_inplace: invalid params");
    size_t dpad = fl_dp_distributed_padded_dim(p->dim);
    if (!buf || !rotation_seed || buf_len < dpad)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_distributed_encode_inplace: NULL argument or buf_len < %zu",
                           dpad);
    if ((word_bytes != 4 && word_bytes != 8) || (word_bytes == 4 && p->modulus_bits > 32))
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_distributed_encode_inplace: word_bytes must be 8, or 4 with "
                           "modulus_bits <= 32");
    fl_allocator a;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_distributed_encode_inplace: bad allocator");
    if (rng->failed)
        return rng->failed;
    double s = sum_sq_d(buf, p->dim);
    if (!isfinite(s))
        return fl__err_set(&rng->err, FL_ERR_RANGE,
                           "fl_dp_distributed_encode_inplace: non-finite update");
    double norm = sqrt(s);
    size_t nbits = (dpad + 7) / 8;
    uint8_t *bits = fl__alloc(&a, nbits);
    if (!bits)
        return FL_ERR_NOMEM;
    fl_status st;
    /* 1. clip to c and scale by 1/gamma, zero-pad to d' (as fl_dp_distributed_encode). */
    double f = (norm > p->clip ? p->clip / norm : 1.0) / p->granularity;
    for (size_t i = 0; i < p->dim; i++)
        buf[i] = buf[i] * f;
    for (size_t i = p->dim; i < dpad; i++)
        buf[i] = 0;
    /* 2. rotate: H D x. */
    st = fl_dp_rotation_forward(buf, dpad, rotation_seed);
    if (st != FL_OK)
        goto out_wipe;
    /* 3. conditional randomized rounding: decisions only. */
    st = fl__dp_round_conditional_bits(rng, bits, buf, dpad, b);
    if (st != FL_OK) {
        if (st == FL_ERR_AGAIN)
            fl__err_set(&rng->err, st,
                        "fl_dp_distributed_encode_inplace: conditional rounding failed");
        goto out_wipe;
    }
    /* 4. per-client discrete Gaussian and 5. reduction mod 2^b, word i over the front. */
    const uint64_t mask = ((uint64_t)1 << p->modulus_bits) - 1;
    unsigned char *o = (unsigned char *)buf;
    for (size_t i = 0; i < dpad; i++) {
        int64_t q = (int64_t)floor(buf[i]) + (int64_t)((bits[i >> 3] >> (i & 7)) & 1);
        int64_t z;
        st = fl__dp_dgauss_one(rng, &g, &z);
        if (st != FL_OK) {
            if (st == FL_ERR_RANGE)
                fl__err_set(&rng->err, st, "fl_dp_distributed_encode_inplace: sampler overflow");
            goto out_wipe;
        }
        uint64_t w = ((uint64_t)q + (uint64_t)z) & mask;
        if (word_bytes == 4) {
            uint32_t w32 = (uint32_t)w;
            memcpy(o + 4 * i, &w32, 4);
        } else {
            memcpy(o + 8 * i, &w, 8);
        }
    }
    /* The back half of buf (4-byte words) still holds rotated values: wipe it. */
    fl_memzero(o + dpad * word_bytes, buf_len * sizeof(double) - dpad * word_bytes);
    if (norm_out)
        *norm_out = norm;
    goto out_free;
out_wipe:
    /* Never leave the un-noised rotation or a partly noised vector behind. */
    fl_memzero(buf, buf_len * sizeof(double));
out_free:
    fl_memzero(bits, nbits);
    fl__free(&a, bits, nbits);
    return st;
}

fl_status fl_dp_distributed_decode(float *out, const uint64_t *sum, size_t sum_len,
                                   const fl_dp_distributed_params *p, const uint8_t *rotation_seed,
                                   const fl_allocator *alloc) {
    if (!shape_ok(p) || !isfinite(p->granularity) || !(p->granularity > 0) || !out || !sum ||
        !rotation_seed)
        return FL_ERR_MISUSE;
    size_t dpad = fl_dp_distributed_padded_dim(p->dim);
    if (sum_len != dpad)
        return FL_ERR_MISUSE;
    fl_allocator a;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    const uint64_t m = (uint64_t)1 << p->modulus_bits, half = m >> 1;
    for (size_t i = 0; i < dpad; i++)
        if (sum[i] >= m)
            return FL_ERR_MISUSE;
    double *w = fl__alloc_array(&a, dpad, sizeof(double));
    if (!w)
        return FL_ERR_NOMEM;
    /* Centered lift to [-2^(b-1), 2^(b-1)), unscale, inverse rotation. */
    for (size_t i = 0; i < dpad; i++) {
        int64_t v = sum[i] >= half ? (int64_t)sum[i] - (int64_t)m : (int64_t)sum[i];
        w[i] = (double)v * p->granularity;
    }
    fl_status st = fl_dp_rotation_inverse(w, dpad, rotation_seed);
    if (st == FL_OK)
        for (size_t i = 0; i < p->dim; i++)
            out[i] = (float)w[i];
    fl__free(&a, w, dpad * sizeof(double));
    return st;
}
