/* L2 clipping of float32 updates, flat and per layer. The input is validated (finite) before
 * anything is written, so a NaN or infinity is reported and never spread into a sum. */

#include <math.h>

#include "fl_internal.h"
#include "flotilla/dp.h"

/* Sum of squares in double. A float squared stays finite in double and so does any realistic
 * sum, so the result is non-finite exactly when some element is NaN or infinite. */
static double sum_sq(const float *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * (double)v[i];
    return s;
}

/* Multiplier that brings a vector of norm `norm` to at most `clip` after rounding each
 * product to float: every product is rounded with relative error <= 2^-24, so shrinking the
 * factor by 2^-23 keeps the clipped norm <= clip. 1 when no clipping is needed. */
static double clip_factor(double norm, double clip) {
    if (!(norm > clip))
        return 1.0;
    return clip / norm * (1.0 - 0x1p-23);
}

static void scale(float *v, size_t n, double f) {
    if (f == 1.0)
        return;
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((double)v[i] * f);
}

static int clip_ok(double c) {
    return isfinite(c) && c > 0;
}

fl_status fl_dp_l2_norm(double *norm_out, const float *v, size_t n) {
    if (!norm_out || (!v && n > 0))
        return FL_ERR_MISUSE;
    double s = sum_sq(v, n);
    if (!isfinite(s))
        return FL_ERR_RANGE;
    *norm_out = sqrt(s);
    return FL_OK;
}

fl_status fl_dp_clip_l2(float *v, size_t n, double clip, double *norm_out) {
    if ((!v && n > 0) || !clip_ok(clip))
        return FL_ERR_MISUSE;
    double s = sum_sq(v, n);
    if (!isfinite(s))
        return FL_ERR_RANGE;
    double norm = sqrt(s);
    scale(v, n, clip_factor(norm, clip));
    if (norm_out)
        *norm_out = norm;
    return FL_OK;
}

fl_status fl_dp_clip_l2_layers(float *v, size_t n, const size_t *layer_sizes, const double *clips,
                               size_t n_layers, double *norms_out) {
    if ((!v && n > 0) || (n_layers > 0 && (!layer_sizes || !clips)))
        return FL_ERR_MISUSE;
    size_t total = 0;
    for (size_t i = 0; i < n_layers; i++) {
        if (!clip_ok(clips[i]) || layer_sizes[i] > SIZE_MAX - total)
            return FL_ERR_MISUSE;
        total += layer_sizes[i];
    }
    if (total != n)
        return FL_ERR_MISUSE;
    /* Pass 1: validate everything. */
    if (!isfinite(sum_sq(v, n)))
        return FL_ERR_RANGE;
    /* Pass 2: per-layer norms and scaling. */
    size_t off = 0;
    for (size_t i = 0; i < n_layers; i++) {
        double norm = sqrt(sum_sq(v + off, layer_sizes[i]));
        scale(v + off, layer_sizes[i], clip_factor(norm, clips[i]));
        if (norms_out)
            norms_out[i] = norm;
        off += layer_sizes[i];
    }
    return FL_OK;
}

double fl_dp_clip_layers_total(const double *clips, size_t n_layers) {
    if (!clips)
        return 0;
    double s = 0;
    for (size_t i = 0; i < n_layers; i++) {
        if (!clip_ok(clips[i]))
            return 0;
        s += clips[i] * clips[i];
    }
    return sqrt(s);
}
