/* RDP curves of single privacy events.
 *
 * Poisson-subsampled Gaussian (Mironov, Talwar, Zhang 2019, "Renyi Differential Privacy of
 * the Sampled Gaussian Mechanism"): with mu0 = N(0, s^2), mu1 = N(1, s^2) and
 * mu = (1 - q) mu0 + q mu1, the RDP at order a is log(A_a) / (a - 1) with
 * A_a = E_{z ~ mu0}[(mu(z) / mu0(z))^a].
 *   integer a:    A_a = sum_{i=0}^{a} C(a,i) (1-q)^(a-i) q^i exp((i^2 - i) / (2 s^2))
 *   fractional a: the two series of Sec. 3.3, split at z0 = s^2 log(1/q - 1) + 1/2,
 *     A0 = sum_i C(a,i) q^i (1-q)^(a-i) exp((i^2-i)/(2s^2)) erfc((i - z0)/(sqrt2 s)) / 2
 *     A1 = sum_i C(a,i) q^(a-i) (1-q)^i exp(((a-i)^2-(a-i))/(2s^2)) erfc((z0-(a-i))/(sqrt2 s)) / 2
 *   where C(a,i) alternates in sign once i > a + 1. We keep the signs (dp_accounting sums
 *   magnitudes, which over-estimates at large epsilon); the tail is an alternating series
 *   whose terms shrink monotonically, so truncating it after a term t leaves an error below
 *   |t|, which we add back to stay an upper bound.
 *
 * Discrete Gaussian (Canonne, Kamath, Steinke 2020): N_Z(0, s^2) per coordinate on integer
 * vectors with L2 sensitivity D satisfies RDP a D^2 / (2 s^2).
 * Distributed discrete Gaussian (Kairouz, Liu, Steinke 2021, Prop. 14): the sum of n shares of
 * N_Z(0, s^2) on Z^d with sensitivities D2, D1 satisfies, with l2 = D2 / (sqrt(n) s),
 * l1 = D1 / (sqrt(n) s) and tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k / (k + 1)),
 *   eps(a) = min(a/2 l2^2 + tau d, a/2 (l2^2 + 2 l1 tau + tau^2 d), a/2 (l2 + sqrt(d) tau)^2).
 * With n = 1 tau is 0 and this is the discrete Gaussian bound.
 * Subsampled discrete mechanisms use the general Poisson-subsampling upper bound of Zhu and
 * Wang 2019 (Thm 5) at integer orders, the value at ceil(a) for fractional a (RDP grows with
 * the order), and never more than the unsampled bound. */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rdp_internal.h"

/* Fractional-order series: stop once a term is below exp(-FRAC_REL_LOG) of the sum. */
#define FRAC_REL_LOG 28.0
/* Hard cap on fractional-order terms; past it the truncation bound is still added. */
#define FRAC_MAX_TERMS 200000L

/* ---- errors ---- */

fl_status fl__dp_err_out(const struct fl__err *err, char *errmsg, size_t errmsg_len) {
    if (errmsg && errmsg_len > 0)
        snprintf(errmsg, errmsg_len, "%s", fl__err_msg(err));
    return err->code;
}

int fl__dp_orders_valid(const double *orders, size_t n, struct fl__err *err) {
    if (!orders || n == 0) {
        fl__err_set(err, FL_ERR_MISUSE, "orders: need at least one order");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(orders[i]) || !(orders[i] > 1.0)) {
            fl__err_set(err, FL_ERR_MISUSE, "orders[%zu] = %g: each order must be finite and > 1",
                        i, orders[i]);
            return 0;
        }
    }
    return 1;
}

/* ---- default orders ---- */

size_t fl_dp_default_orders_count(void) {
    return FL_DP_DEFAULT_ORDERS_COUNT;
}

fl_status fl_dp_default_orders(double *orders_out, size_t orders_len) {
    if (!orders_out || orders_len < FL_DP_DEFAULT_ORDERS_COUNT)
        return FL_ERR_MISUSE;
    size_t k = 0;
    /* 1.1 .. 10.9 by 0.1, built from integers so each value is the nearest double. */
    for (int t = 11; t <= 109; t++)
        orders_out[k++] = t / 10.0;
    for (int a = 11; a <= 63; a++)
        orders_out[k++] = a;
    orders_out[k++] = 128;
    orders_out[k++] = 256;
    orders_out[k++] = 512;
    orders_out[k++] = 1024;
    return FL_ALWAYS(k == FL_DP_DEFAULT_ORDERS_COUNT) ? FL_OK : FL_ERR_INTERNAL;
}

/* ---- special functions ---- */

double fl__dp_log_erfc(double x) {
    if (x < 20.0)
        return log(erfc(x));
    /* erfc(x) = exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + ...);
     * at x >= 20 the truncation after five terms is below 1e-11 relative. */
    double r = 1.0 / (2.0 * x * x);
    double series = 1.0 - r * (1.0 - 3.0 * r * (1.0 - 5.0 * r * (1.0 - 7.0 * r)));
    return -x * x - log(x) - 0.5 * log(M_PI) + log(series);
}

/* log(expm1(x)) for x > 0, without overflow for large x. */
static double log_expm1(double x) {
    return x > 30.0 ? x + log1p(-exp(-x)) : log(expm1(x));
}

/* ---- Poisson-subsampled Gaussian ---- */

/* Integer order: A - 1 = sum_{i>=2} C(a,i) (1-q)^(a-i) q^i (exp((i^2-i)/(2s^2)) - 1), since the
 * binomial weights sum to 1 and the i = 0, 1 exponents are 0. Every term is positive, and
 * summing A - 1 keeps full relative precision when q is tiny. */
double fl__dp_log_a_int(double q, double sigma, unsigned long alpha) {
    double lq = log(q), l1q = log1p(-q), inv2s2 = 1.0 / (2.0 * sigma * sigma);
    double a = (double)alpha;
    double lc = log(a * (a - 1.0) / 2.0); /* log C(a, 2) */
    struct fl__dp_lse acc;
    fl__dp_lse_init(&acc);
    for (unsigned long i = 2; i <= alpha; i++) {
        double di = (double)i;
        fl__dp_lse_add(&acc, lc + di * lq + (a - di) * l1q + log_expm1((di * di - di) * inv2s2));
        lc += log(a - di) - log(di + 1.0);
    }
    double lam1 = fl__dp_lse_value(&acc);
    return lam1 > 30.0 ? lam1 + log1p(exp(-lam1)) : log1p(exp(lam1));
}

/* Signed accumulator for the alternating fractional-order series. */
struct signed_sum {
    struct fl__dp_lse pos, neg;
};

static double signed_sum_value(const struct signed_sum *s) {
    double p = fl__dp_lse_value(&s->pos), n = fl__dp_lse_value(&s->neg);
    if (n == -INFINITY)
        return p;
    if (!(p > n))
        return -INFINITY; /* cannot happen for a valid A_alpha; reported as "no bound" */
    return p + log1p(-exp(n - p));
}

double fl__dp_log_a_frac(double q, double sigma, double alpha, long *terms_out) {
    const double lq = log(q), l1q = log1p(-q), inv2s2 = 1.0 / (2.0 * sigma * sigma);
    const double rs = 1.0 / (M_SQRT2 * sigma), lhalf = -M_LN2;
    const double z0 = sigma * sigma * (l1q - lq) + 0.5;
    struct signed_sum sum;
    fl__dp_lse_init(&sum.pos);
    fl__dp_lse_init(&sum.neg);
    double lc = 0.0; /* log |C(alpha, i)| */
    int sign = 1;    /* sign of C(alpha, i) */
    double prev0 = INFINITY, prev1 = INFINITY, last = -INFINITY;
    long i;
    for (i = 0; i < FRAC_MAX_TERMS; i++) {
        double di = (double)i, j = alpha - di;
        double s0 = lc + di * lq + j * l1q + (di * di - di) * inv2s2 + lhalf +
                    fl__dp_log_erfc((di - z0) * rs);
        double s1 =
            lc + j * lq + di * l1q + (j * j - j) * inv2s2 + lhalf + fl__dp_log_erfc((z0 - j) * rs);
        struct fl__dp_lse *into = sign > 0 ? &sum.pos : &sum.neg;
        fl__dp_lse_add(into, s0);
        fl__dp_lse_add(into, s1);
        last = fl__dp_log_add(s0, s1);
        /* Past i = alpha + 1 the signs alternate; stop once both series shrink and the term
         * is negligible against the sum. */
        if (di > alpha + 1.0 && s0 < prev0 && s1 < prev1 &&
            last < signed_sum_value(&sum) - FRAC_REL_LOG)
            break;
        prev0 = s0;
        prev1 = s1;
        lc += log(fabs(alpha - di)) - log(di + 1.0);
        if (alpha - di < 0.0)
            sign = -sign;
    }
    if (terms_out)
        *terms_out = i + 1;
    /* Alternating tail with shrinking terms: the remainder is below the last term. */
    return fl__dp_log_add(signed_sum_value(&sum), last);
}

static double rdp_sampled_gaussian_one(double q, double z, double alpha) {
    if (q == 0.0)
        return 0.0;
    if (z == 0.0)
        return INFINITY;
    if (q == 1.0)
        return alpha / (2.0 * z * z);
    double la;
    if (alpha == floor(alpha) && alpha <= 1e7)
        la = fl__dp_log_a_int(q, z, (unsigned long)alpha);
    else
        la = fl__dp_log_a_frac(q, z, alpha, NULL);
    if (isnan(la) || la == -INFINITY)
        return INFINITY;
    return la / (alpha - 1.0);
}

fl_status fl_dp_rdp_sampled_gaussian(double *rdp_out, const double *orders, size_t n_orders,
                                     double q, double noise_multiplier, char *errmsg,
                                     size_t errmsg_len) {
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, q, noise_multiplier, 1);
    return fl_dp_rdp_event(rdp_out, orders, n_orders, &ev, errmsg, errmsg_len);
}

/* ---- discrete Gaussian and distributed discrete Gaussian ---- */

/* eps(a) = min(a c1 + b1, a c2, a c3): the (possibly distributed) discrete Gaussian bound. */
struct ddg_bound {
    double c1, b1, c2, c3;
};

static void ddg_bound_init(struct ddg_bound *b, const fl_dp_event *ev) {
    double n = ev->kind == FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN ? (double)ev->n_clients : 1.0;
    double d = ev->kind == FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN ? (double)ev->dim : 1.0;
    double s = ev->sigma, d2 = ev->l2_sensitivity;
    double d1 = ev->l1_sensitivity;
    if (d1 <= 0.0) /* integer vectors: |x|_1 <= sqrt(d) |x|_2 and |x|_1 <= |x|_2^2 */
        d1 = fmin(sqrt(d) * d2, d2 * d2);
    double tau = 0.0;
    if (ev->kind == FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN) {
        double c = -2.0 * M_PI * M_PI * s * s;
        for (uint64_t k = 1; k < ev->n_clients; k++)
            tau += exp(c * (double)k / (double)(k + 1));
        tau *= 10.0;
    }
    double l2 = d2 / (sqrt(n) * s), l1 = d1 / (sqrt(n) * s);
    b->c1 = 0.5 * l2 * l2;
    b->b1 = tau * d;
    b->c2 = 0.5 * (l2 * l2 + 2.0 * l1 * tau + tau * tau * d);
    double t3 = l2 + sqrt(d) * tau;
    b->c3 = 0.5 * t3 * t3;
}

static double ddg_eps(const struct ddg_bound *b, double a) {
    return fmin(a * b->c1 + b->b1, fmin(a * b->c2, a * b->c3));
}

/* Zhu & Wang 2019 Thm 5 at integer order a >= 2 for a base mechanism with RDP eps(.):
 * (1/(a-1)) log[(1-q)^(a-1) (a q - q + 1) + C(a,2) q^2 (1-q)^(a-2) e^{eps(2)}
 *               + 3 sum_{l=3}^{a} C(a,l) (1-q)^(a-l) q^l e^{(l-1) eps(l)}]. */
static double zhu_wang_int(const struct ddg_bound *b, double q, unsigned long a) {
    double da = (double)a, lq = log(q), l1q = log1p(-q);
    struct fl__dp_lse acc;
    fl__dp_lse_init(&acc);
    fl__dp_lse_add(&acc, (da - 1.0) * l1q + log1p(da * q - q));
    double lc = log(da * (da - 1.0) / 2.0);
    fl__dp_lse_add(&acc, lc + 2.0 * lq + (da - 2.0) * l1q + ddg_eps(b, 2.0));
    for (unsigned long l = 3; l <= a; l++) {
        double dl = (double)l;
        lc += log(da - dl + 1.0) - log(dl);
        fl__dp_lse_add(&acc,
                       log(3.0) + lc + dl * lq + (da - dl) * l1q + (dl - 1.0) * ddg_eps(b, dl));
    }
    return fl__dp_lse_value(&acc) / (da - 1.0);
}

static double rdp_discrete_one(const struct ddg_bound *b, double q, double alpha) {
    if (q == 0.0)
        return 0.0;
    double full = ddg_eps(b, alpha);
    if (q == 1.0 || ceil(alpha) > 1e6)
        return full;
    return fmin(full, zhu_wang_int(b, q, (unsigned long)ceil(alpha)));
}

/* ---- events ---- */

void fl_dp_event_gaussian(fl_dp_event *ev, double q, double noise_multiplier, uint64_t count) {
    if (!ev)
        return;
    memset(ev, 0, sizeof(*ev));
    ev->struct_size = sizeof(*ev);
    ev->kind = FL_DP_EVENT_GAUSSIAN;
    ev->q = q;
    ev->noise_multiplier = noise_multiplier;
    ev->count = count;
}

void fl_dp_event_discrete_gaussian(fl_dp_event *ev, double sigma, double l2_sensitivity, double q,
                                   uint64_t count) {
    if (!ev)
        return;
    memset(ev, 0, sizeof(*ev));
    ev->struct_size = sizeof(*ev);
    ev->kind = FL_DP_EVENT_DISCRETE_GAUSSIAN;
    ev->sigma = sigma;
    ev->l2_sensitivity = l2_sensitivity;
    ev->q = q;
    ev->dim = 1;
    ev->n_clients = 1;
    ev->count = count;
}

void fl_dp_event_distributed_discrete_gaussian(fl_dp_event *ev, double sigma, uint64_t n_clients,
                                               uint64_t dim, double l2_sensitivity,
                                               double l1_sensitivity, double q, uint64_t count) {
    if (!ev)
        return;
    memset(ev, 0, sizeof(*ev));
    ev->struct_size = sizeof(*ev);
    ev->kind = FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN;
    ev->sigma = sigma;
    ev->n_clients = n_clients;
    ev->dim = dim;
    ev->l2_sensitivity = l2_sensitivity;
    ev->l1_sensitivity = l1_sensitivity;
    ev->q = q;
    ev->count = count;
}

fl_status fl__dp_event_validate(const fl_dp_event *ev, struct fl__err *err) {
    if (!ev || ev->struct_size < sizeof(fl_dp_event))
        return fl__err_set(err, FL_ERR_MISUSE, "event: NULL or struct_size too small");
    if (!(ev->q >= 0.0 && ev->q <= 1.0))
        return fl__err_set(err, FL_ERR_MISUSE, "event.q = %g: must be in [0, 1]", ev->q);
    switch (ev->kind) {
    case FL_DP_EVENT_GAUSSIAN:
        if (!(ev->noise_multiplier >= 0.0) || !isfinite(ev->noise_multiplier))
            return fl__err_set(err, FL_ERR_MISUSE,
                               "event.noise_multiplier = %g: must be finite and >= 0",
                               ev->noise_multiplier);
        return FL_OK;
    case FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN:
        if (ev->n_clients < 1)
            return fl__err_set(err, FL_ERR_MISUSE, "event.n_clients must be >= 1");
        if (ev->dim < 1)
            return fl__err_set(err, FL_ERR_MISUSE, "event.dim must be >= 1");
        if (!(ev->sigma >= 0.5) || !isfinite(ev->sigma))
            return fl__err_set(err, FL_ERR_MISUSE,
                               "event.sigma = %g: the distributed discrete Gaussian bound "
                               "needs a finite sigma >= 0.5 (grid units)",
                               ev->sigma);
        if (!(ev->l1_sensitivity >= 0.0) || !isfinite(ev->l1_sensitivity))
            return fl__err_set(err, FL_ERR_MISUSE, "event.l1_sensitivity = %g: must be >= 0",
                               ev->l1_sensitivity);
        /* the common discrete checks follow */
        /* fall through */
    case FL_DP_EVENT_DISCRETE_GAUSSIAN:
        if (!(ev->sigma > 0.0) || !isfinite(ev->sigma))
            return fl__err_set(err, FL_ERR_MISUSE, "event.sigma = %g: must be finite and > 0",
                               ev->sigma);
        if (!(ev->l2_sensitivity > 0.0) || !isfinite(ev->l2_sensitivity))
            return fl__err_set(err, FL_ERR_MISUSE,
                               "event.l2_sensitivity = %g: must be finite and > 0",
                               ev->l2_sensitivity);
        return FL_OK;
    default:
        return fl__err_set(err, FL_ERR_MISUSE, "event.kind = %d: unknown", (int)ev->kind);
    }
}

int fl__dp_event_same(const fl_dp_event *a, const fl_dp_event *b) {
    if (a->kind != b->kind || a->q != b->q)
        return 0;
    if (a->kind == FL_DP_EVENT_GAUSSIAN)
        return a->noise_multiplier == b->noise_multiplier;
    int same = a->sigma == b->sigma && a->l2_sensitivity == b->l2_sensitivity;
    if (a->kind == FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN)
        same = same && a->l1_sensitivity == b->l1_sensitivity && a->dim == b->dim &&
               a->n_clients == b->n_clients;
    return same;
}

void fl__dp_event_rdp_one(double *rdp_out, const double *orders, size_t n, const fl_dp_event *ev) {
    if (ev->kind == FL_DP_EVENT_GAUSSIAN) {
        for (size_t i = 0; i < n; i++)
            rdp_out[i] = rdp_sampled_gaussian_one(ev->q, ev->noise_multiplier, orders[i]);
        return;
    }
    struct ddg_bound b;
    ddg_bound_init(&b, ev);
    for (size_t i = 0; i < n; i++)
        rdp_out[i] = rdp_discrete_one(&b, ev->q, orders[i]);
}

fl_status fl_dp_rdp_event(double *rdp_out, const double *orders, size_t n_orders,
                          const fl_dp_event *ev, char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    fl__err_clear(&err);
    if (!rdp_out) {
        fl__err_set(&err, FL_ERR_MISUSE, "rdp_out is NULL");
        goto out;
    }
    if (!fl__dp_orders_valid(orders, n_orders, &err))
        goto out;
    if (fl__dp_event_validate(ev, &err) != FL_OK)
        goto out;
    fl__dp_event_rdp_one(rdp_out, orders, n_orders, ev);
    for (size_t i = 0; i < n_orders; i++)
        rdp_out[i] = ev->count == 0 || rdp_out[i] == 0.0 ? 0.0 : rdp_out[i] * (double)ev->count;
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}
