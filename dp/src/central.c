/* Central DP for DP-FedAvg (McMahan, Ramage, Talwar, Zhang 2018) on the integer lattice:
 * clipped updates are rounded onto gamma Z^d with conditional randomized rounding (so the
 * sensitivity of the integer sum is an exactly enforced integer bound), and the server adds
 * exact discrete Gaussian noise to the integer sum. */

#include <math.h>
#include <string.h>

#include "discrete_noise.h"
#include "lattice_round.h"

void fl_dp_central_params_init(fl_dp_central_params *p) {
    if (!p)
        return;
    memset(p, 0, sizeof(*p));
    p->struct_size = sizeof(*p);
    p->clip = 1.0;
    p->granularity = 1e-3;
    p->beta = exp(-0.5);
    p->sigma2_num = 1;
    p->sigma2_den = 1;
}

/* Validates p; on success fills the rounding bound and the sampler parameters. */
static fl_status central_check(const fl_dp_central_params *p, size_t dim, fl__dp_u128 *bound_sq,
                               struct fl__dp_dgauss *g) {
    if (!p || p->struct_size < sizeof(*p) || !isfinite(p->clip) || !(p->clip > 0) ||
        !isfinite(p->granularity) || !(p->granularity > 0) || !(p->beta >= 0) || !(p->beta < 1) ||
        fl__dp_dgauss_prepare(g, p->sigma2_num, p->sigma2_den) != FL_OK)
        return FL_ERR_MISUSE;
    double cs = p->clip / p->granularity;
    if (!(cs < FL__DP_LATTICE_MAX))
        return FL_ERR_MISUSE;
    if (fl__dp_round_bound_sq(bound_sq, cs, (double)dim, p->beta) != FL_OK)
        return FL_ERR_MISUSE;
    return FL_OK;
}

fl_status fl_dp_central_info_get(fl_dp_central_info *info, const fl_dp_central_params *p,
                                 size_t dim) {
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if (!info || central_check(p, dim, &b, &g) != FL_OK)
        return FL_ERR_MISUSE;
    info->l2_bound = sqrt((double)b);
    info->sigma = sqrt((double)p->sigma2_num / (double)p->sigma2_den);
    info->noise_multiplier = info->l2_bound > 0 ? info->sigma / info->l2_bound : INFINITY;
    return FL_OK;
}

fl_status fl_dp_central_encode(fl_dp_rng *rng, int64_t *out, const float *update, size_t dim,
                               const fl_dp_central_params *p, double *norm_out,
                               const fl_allocator *alloc) {
    if (!rng)
        return FL_ERR_MISUSE;
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if ((!out || !update) && dim > 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_central_encode: NULL vector");
    if (central_check(p, dim, &b, &g) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_central_encode: invalid params");
    fl_allocator a;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_central_encode: bad allocator");
    if (rng->failed)
        return rng->failed;
    double norm;
    if (fl_dp_l2_norm(&norm, update, dim) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_RANGE, "fl_dp_central_encode: non-finite update");
    double *w = fl__alloc_array(&a, dim, sizeof(double));
    if (!w)
        return FL_ERR_NOMEM;
    fl_status st = FL_OK;
    /* Clip in double (x c / ||x||) and scale to lattice units. */
    double f = (norm > p->clip ? p->clip / norm : 1.0) / p->granularity;
    for (size_t i = 0; i < dim; i++) {
        w[i] = (double)update[i] * f;
        if (!(fabs(w[i]) < FL__DP_LATTICE_MAX)) {
            st = fl__err_set(&rng->err, FL_ERR_RANGE, "fl_dp_central_encode: value too large");
            goto out_free_w;
        }
    }
    st = fl__dp_round_conditional(rng, out, w, dim, b);
    if (st == FL_ERR_AGAIN)
        fl__err_set(&rng->err, st, "fl_dp_central_encode: conditional rounding failed");
    if (st == FL_OK && norm_out)
        *norm_out = norm;
out_free_w:
    fl__free(&a, w, dim * sizeof(double));
    return st;
}

/* The streaming twin of fl_dp_central_encode: the clip-and-scale factor is applied as each
 * coordinate is rounded, and the rounded value goes straight into the caller's word, so the
 * encode needs no d-double workspace and no d-int64 vector (a client's update then costs its
 * float delta plus its wire words). Same checks, same doubles, same rng draws. */
fl_status fl_dp_central_encode_into(fl_dp_rng *rng, void *out, size_t out_len, size_t word_bytes,
                                    uint32_t modulus_bits, const float *update, size_t dim,
                                    const fl_dp_central_params *p, double *norm_out) {
    if (!rng)
        return FL_ERR_MISUSE;
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if ((!out || !update) && dim > 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_central_encode_into: NULL vector");
    if (out_len != dim)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_central_encode_into: out_len %zu != dim %zu", out_len, dim);
    if ((word_bytes != 4 && word_bytes != 8) || modulus_bits < 1 ||
        modulus_bits > 8 * word_bytes)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_central_encode_into: word_bytes must be 4 or 8 and "
                           "modulus_bits in [1, 8 * word_bytes]");
    if (central_check(p, dim, &b, &g) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_central_encode_into: invalid params");
    if (rng->failed)
        return rng->failed;
    double norm;
    if (fl_dp_l2_norm(&norm, update, dim) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_RANGE,
                           "fl_dp_central_encode_into: non-finite update");
    double f = (norm > p->clip ? p->clip / norm : 1.0) / p->granularity;
    for (size_t i = 0; i < dim; i++)
        if (!(fabs((double)update[i] * f) < FL__DP_LATTICE_MAX))
            return fl__err_set(&rng->err, FL_ERR_RANGE,
                               "fl_dp_central_encode_into: value too large");
    uint64_t mask = modulus_bits >= 64 ? UINT64_MAX : ((uint64_t)1 << modulus_bits) - 1;
    fl_status st = fl__dp_round_conditional_words(rng, out, word_bytes, mask, update, f, dim, b);
    if (st != FL_OK) {
        if (st == FL_ERR_AGAIN)
            fl__err_set(&rng->err, st, "fl_dp_central_encode_into: conditional rounding failed");
        if (dim > 0)
            fl_memzero(out, dim * word_bytes);
        return st;
    }
    if (norm_out)
        *norm_out = norm;
    return FL_OK;
}

fl_status fl_dp_central_noise(fl_dp_rng *rng, int64_t *sum, size_t dim,
                              const fl_dp_central_params *p) {
    if (!rng)
        return FL_ERR_MISUSE;
    fl__dp_u128 b;
    struct fl__dp_dgauss g;
    if ((!sum && dim > 0) || central_check(p, dim, &b, &g) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_central_noise: invalid arguments");
    return fl_dp_discrete_gaussian_add(rng, sum, dim, p->sigma2_num, p->sigma2_den);
}
