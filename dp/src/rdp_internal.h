#ifndef FLOTILLA_DP_RDP_INTERNAL_H
#define FLOTILLA_DP_RDP_INTERNAL_H

/* Internals shared by rdp.c, conversion.c, accountant.c and budget.c (fl__dp_ prefix,
 * never exported). */

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "fl_internal.h"
#include "flotilla/dp.h"

/* ---- streaming log-sum-exp ----
 * Holds sum_i exp(t_i) as exp(m) * s with s >= 1 once a term was added, so adding a term
 * costs one exp and never overflows. */
struct fl__dp_lse {
    double m; /* largest log-term so far (-inf when empty) */
    double s; /* sum of exp(t_i - m) */
};

static inline void fl__dp_lse_init(struct fl__dp_lse *a) {
    a->m = -INFINITY;
    a->s = 0.0;
}

static inline void fl__dp_lse_add(struct fl__dp_lse *a, double t) {
    if (t == -INFINITY)
        return;
    if (t <= a->m) {
        a->s += exp(t - a->m);
    } else {
        a->s = a->s * exp(a->m - t) + 1.0;
        a->m = t;
    }
}

static inline double fl__dp_lse_value(const struct fl__dp_lse *a) {
    return a->s > 0.0 ? a->m + log(a->s) : -INFINITY;
}

/* log(exp(a) + exp(b)). */
static inline double fl__dp_log_add(double a, double b) {
    double hi = a > b ? a : b, lo = a > b ? b : a;
    if (lo == -INFINITY)
        return hi;
    return hi + log1p(exp(lo - hi));
}

/* Copies err's message into a caller buffer (NULL or len 0: nothing) and returns err->code. */
fl_status fl__dp_err_out(const struct fl__err *err, char *errmsg, size_t errmsg_len);

/* 1 if the orders are all finite and > 1, else records FL_ERR_MISUSE into err and returns 0. */
int fl__dp_orders_valid(const double *orders, size_t n, struct fl__err *err);

/* Checks ev's fields for its kind; FL_OK or FL_ERR_MISUSE naming the field. */
fl_status fl__dp_event_validate(const fl_dp_event *ev, struct fl__err *err);

/* RDP of ONE occurrence of a validated event at each order (ignores ev->count). */
void fl__dp_event_rdp_one(double *rdp_out, const double *orders, size_t n, const fl_dp_event *ev);

/* 1 if a and b describe the same mechanism with the same parameters (count ignored). */
int fl__dp_event_same(const fl_dp_event *a, const fl_dp_event *b);

/* log A_alpha of the Poisson-subsampled Gaussian for 0 < q < 1, sigma > 0, alpha > 1 (exact
 * sum at integer alpha, signed two-series expansion otherwise). Exposed for tests. */
double fl__dp_log_a_int(double q, double sigma, unsigned long alpha);
double fl__dp_log_a_frac(double q, double sigma, double alpha, long *terms_out);

/* log(erfc(x)), accurate for large positive x where erfc underflows. */
double fl__dp_log_erfc(double x);

/* Conversion core without argument checks (delta in (0, 1], epsilon >= 0). */
void fl__dp_to_epsilon(double *eps_out, double *order_out, const double *orders, const double *rdp,
                       size_t n, double delta, fl_dp_conversion conv);
void fl__dp_to_delta(double *delta_out, double *order_out, const double *orders, const double *rdp,
                     size_t n, double epsilon, fl_dp_conversion conv);

/* The handle's error slot, so budget.c can record its messages there. */
struct fl__err *fl__dp_accountant_err(fl_dp_accountant *acc);

#endif /* FLOTILLA_DP_RDP_INTERNAL_H */
