/* RDP -> (epsilon, delta) conversion.
 *
 * Improved (default): Canonne, Kamath, Steinke 2020 "The Discrete Gaussian for Differential
 * Privacy", Prop. 12 (also Balle et al. 2020, "Hypothesis testing interpretations and Renyi
 * DP", Eq. 20): (a, r)-RDP implies (eps, delta)-DP for
 *     eps = r + log1p(-1/a) - log(delta * a) / (a - 1),
 *     delta = exp((a - 1)(r - eps + log1p(-1/a))) / a.
 * Also, since RDP grows with the order, r bounds the KL divergence, and Pinsker-type
 * reasoning (delta <= sqrt(1 - exp(-KL))) gives eps = 0 whenever delta^2 > 1 - exp(-r).
 * The first bound is numerically unstable as a -> 1, so (like dp_accounting) it is used only
 * for a > 1.01.
 * Classic: Mironov 2017 Prop. 3: eps = r + log(1/delta) / (a - 1). */

#include <math.h>

#include "rdp_internal.h"

void fl__dp_to_epsilon(double *eps_out, double *order_out, const double *orders, const double *rdp,
                       size_t n, double delta, fl_dp_conversion conv) {
    double best = INFINITY, best_order = 0.0;
    if (delta >= 1.0) {
        *eps_out = 0.0;
        if (order_out)
            *order_out = 0.0;
        return;
    }
    double ldelta = log(delta);
    for (size_t i = 0; i < n; i++) {
        double a = orders[i], r = rdp[i] < 0.0 ? 0.0 : rdp[i], e;
        if (isnan(r) || r == INFINITY)
            continue;
        if (conv == FL_DP_CONVERSION_CLASSIC) {
            e = r - ldelta / (a - 1.0);
        } else if (delta * delta + expm1(-r) > 0.0) {
            e = 0.0;
        } else if (a > 1.01) {
            e = r + log1p(-1.0 / a) - (ldelta + log(a)) / (a - 1.0);
        } else {
            continue;
        }
        if (e < best) {
            best = e;
            best_order = a;
        }
    }
    *eps_out = best < 0.0 ? 0.0 : best;
    if (order_out)
        *order_out = best_order;
}

void fl__dp_to_delta(double *delta_out, double *order_out, const double *orders, const double *rdp,
                     size_t n, double epsilon, fl_dp_conversion conv) {
    double best = INFINITY, best_order = 0.0; /* log delta */
    for (size_t i = 0; i < n; i++) {
        double a = orders[i], r = rdp[i] < 0.0 ? 0.0 : rdp[i], ld;
        if (isnan(r) || r == INFINITY)
            continue;
        if (conv == FL_DP_CONVERSION_CLASSIC) {
            ld = (a - 1.0) * (r - epsilon);
        } else {
            ld = r == 0.0 ? -INFINITY : 0.5 * log1p(-exp(-r));
            if (a > 1.01) {
                double b = (a - 1.0) * (r - epsilon + log1p(-1.0 / a)) - log(a);
                if (b < ld)
                    ld = b;
            }
        }
        if (ld < best) {
            best = ld;
            best_order = a;
        }
    }
    *delta_out = best >= 0.0 ? 1.0 : exp(best);
    if (order_out)
        *order_out = best_order;
}

static int conversion_valid(fl_dp_conversion conv, struct fl__err *err) {
    if (conv == FL_DP_CONVERSION_IMPROVED || conv == FL_DP_CONVERSION_CLASSIC)
        return 1;
    fl__err_set(err, FL_ERR_MISUSE, "conversion = %d: unknown", (int)conv);
    return 0;
}

fl_status fl_dp_rdp_to_epsilon(double *epsilon_out, double *order_out, const double *orders,
                               const double *rdp, size_t n_orders, double delta,
                               fl_dp_conversion conversion, char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    fl__err_clear(&err);
    if (!epsilon_out || !rdp) {
        fl__err_set(&err, FL_ERR_MISUSE, "epsilon_out and rdp must not be NULL");
        goto out;
    }
    if (!fl__dp_orders_valid(orders, n_orders, &err) || !conversion_valid(conversion, &err))
        goto out;
    if (!(delta > 0.0 && delta <= 1.0)) {
        fl__err_set(&err, FL_ERR_MISUSE, "delta = %g: must be in (0, 1]", delta);
        goto out;
    }
    fl__dp_to_epsilon(epsilon_out, order_out, orders, rdp, n_orders, delta, conversion);
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}

fl_status fl_dp_rdp_to_delta(double *delta_out, double *order_out, const double *orders,
                             const double *rdp, size_t n_orders, double epsilon,
                             fl_dp_conversion conversion, char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    fl__err_clear(&err);
    if (!delta_out || !rdp) {
        fl__err_set(&err, FL_ERR_MISUSE, "delta_out and rdp must not be NULL");
        goto out;
    }
    if (!fl__dp_orders_valid(orders, n_orders, &err) || !conversion_valid(conversion, &err))
        goto out;
    if (!(epsilon >= 0.0) || !isfinite(epsilon)) {
        fl__err_set(&err, FL_ERR_MISUSE, "epsilon = %g: must be finite and >= 0", epsilon);
        goto out;
    }
    fl__dp_to_delta(delta_out, order_out, orders, rdp, n_orders, epsilon, conversion);
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}
