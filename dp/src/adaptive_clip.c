/* Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning
 * with Adaptive Clipping", NeurIPS 2021): geometric update of the clip norm towards a target
 * quantile, driven by a privately released count of unclipped clients. */

#include <math.h>
#include <string.h>

#include "discrete_noise.h"

void fl_dp_adaptive_clip_config_init(fl_dp_adaptive_clip_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->initial_clip = 0.1;
    cfg->target_quantile = 0.5;
    cfg->learning_rate = 0.2;
    cfg->bit_sigma2_num = 1;
    cfg->bit_sigma2_den = 1;
}

fl_status fl_dp_adaptive_clip_init(fl_dp_adaptive_clip *st, const fl_dp_adaptive_clip_config *cfg) {
    if (!st || !cfg || cfg->struct_size < sizeof(*cfg))
        return FL_ERR_MISUSE;
    const fl_dp_adaptive_clip_config *c = cfg;
    struct fl__dp_dgauss g;
    if (!isfinite(c->initial_clip) || !(c->initial_clip > 0) || !(c->target_quantile > 0) ||
        !(c->target_quantile < 1) || !isfinite(c->learning_rate) || !(c->learning_rate > 0) ||
        !isfinite(c->min_clip) || !(c->min_clip >= 0) || !isfinite(c->max_clip) ||
        !(c->max_clip >= 0) || (c->max_clip > 0 && c->max_clip < c->min_clip) ||
        fl__dp_dgauss_prepare(&g, c->bit_sigma2_num, c->bit_sigma2_den) != FL_OK)
        return FL_ERR_MISUSE;
    memset(st, 0, sizeof(*st));
    st->cfg = *c;
    st->cfg.struct_size = sizeof(st->cfg);
    st->clip = c->initial_clip;
    return FL_OK;
}

int fl_dp_adaptive_clip_bit(double update_norm, double clip) {
    return update_norm <= clip ? 1 : 0;
}

/* C <- C exp(-eta (b_hat - gamma)), kept within [min_clip, max_clip] and positive. */
static void apply(fl_dp_adaptive_clip *st, double b_hat) {
    double c = st->clip * exp(-st->cfg.learning_rate * (b_hat - st->cfg.target_quantile));
    if (st->cfg.min_clip > 0 && c < st->cfg.min_clip)
        c = st->cfg.min_clip;
    if (st->cfg.max_clip > 0 && c > st->cfg.max_clip)
        c = st->cfg.max_clip;
    if (isfinite(c) && c > 0) /* b_hat is bounded by the count range, so this always holds */
        st->clip = c;
    st->last_fraction = b_hat;
    st->rounds++;
}

fl_status fl_dp_adaptive_clip_update(fl_dp_adaptive_clip *st, fl_dp_rng *rng, uint64_t bit_sum,
                                     uint64_t n_clients, int64_t *noised_sum_out) {
    if (!st || !rng || n_clients == 0 || bit_sum > n_clients || n_clients > ((uint64_t)1 << 62))
        return FL_ERR_MISUSE;
    struct fl__dp_dgauss g;
    if (fl__dp_dgauss_prepare(&g, st->cfg.bit_sigma2_num, st->cfg.bit_sigma2_den) != FL_OK)
        return FL_ERR_MISUSE;
    if (rng->failed)
        return rng->failed;
    int64_t z;
    fl_status s = fl__dp_dgauss_one(rng, &g, &z);
    if (s != FL_OK)
        return s;
    int64_t noised = (int64_t)bit_sum + z; /* |z| < 2^62 and bit_sum <= 2^62 */
    apply(st, (double)noised / (double)n_clients);
    if (noised_sum_out)
        *noised_sum_out = noised;
    return FL_OK;
}

fl_status fl_dp_adaptive_clip_update_noised(fl_dp_adaptive_clip *st, int64_t noised_sum,
                                            uint64_t n_clients) {
    if (!st || n_clients == 0)
        return FL_ERR_MISUSE;
    apply(st, (double)noised_sum / (double)n_clients);
    return FL_OK;
}

fl_status fl_dp_adaptive_clip_update_multiplier(double *z_delta, double z, double sigma_b) {
    if (!z_delta || !isfinite(z) || !(z > 0) || !isfinite(sigma_b) || !(sigma_b > 0) ||
        !(2 * sigma_b > z))
        return FL_ERR_MISUSE;
    double inv = 1.0 / (z * z) - 1.0 / (4.0 * sigma_b * sigma_b);
    *z_delta = 1.0 / sqrt(inv);
    return FL_OK;
}
