/* Exact discrete Laplace sampler: CKS20 Algorithm 2. For scale b = num/den, P(y) is
 * proportional to exp(-|y| den / num): with s = den and t = num, U uniform in [0, t) is
 * kept with probability exp(-U/t), V counts Bernoulli(exp(-1)) successes, X = U + t V,
 * Y = floor(X / s), a uniform sign, and (sign -, Y = 0) is rejected. */

#include "exact_coins.h"

fl_status fl_dp_discrete_laplace(fl_dp_rng *rng, int64_t *out, size_t n, uint64_t scale_num,
                                 uint64_t scale_den) {
    const uint64_t lim = (uint64_t)1 << 40;
    if (!rng)
        return FL_ERR_MISUSE;
    if (!out && n > 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_discrete_laplace: out is NULL");
    if (scale_num == 0 || scale_den == 0 || scale_num > lim || scale_den > lim)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_discrete_laplace: scale = %llu/%llu outside [1, 2^40]/[1, 2^40]",
                           (unsigned long long)scale_num, (unsigned long long)scale_den);
    const uint64_t t = scale_num, s = scale_den;
    size_t i = 0;
    while (i < n && !rng->failed) {
        uint64_t u = fl__dp_rng_below(rng, t);
        if (!fl__dp_bern_exp_frac(rng, u, t))
            continue;
        uint64_t v = 0;
        while (fl__dp_bern_exp1(rng))
            v++;
        if (rng->failed)
            break;
        /* X = U + t V stays below 2^63 except with probability exp(-2^22). */
        if (v >= (uint64_t)1 << 20 && v > (((uint64_t)1 << 63) - 1 - u) / t)
            return fl__err_set(&rng->err, FL_ERR_RANGE, "fl_dp_discrete_laplace: overflow");
        uint64_t y = s == 1 ? u + t * v : (u + t * v) / s;
        unsigned neg = fl__dp_rng_bit(rng);
        if (neg && y == 0)
            continue;
        out[i++] = neg ? -(int64_t)y : (int64_t)y;
    }
    return rng->failed;
}
