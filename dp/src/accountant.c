/* The composing RDP accountant.
 *
 * RDP composes additively order by order, so the accountant is one running curve
 * rdp[i] = sum over events of count * rdp_event(orders[i]). The RDP of the last distinct event
 * is cached: federated rounds repeat the same mechanism, so composing a round or asking
 * "what if" for the next one is O(orders) after the first. */

#include <math.h>
#include <string.h>

#include "rdp_internal.h"

struct fl_dp_accountant {
    fl_allocator alloc;    /* copied caller allocator (zeroed = libc) */
    struct fl__err err;    /* last failure */
    fl_dp_conversion conv; /* RDP -> DP conversion */
    size_t n;              /* number of orders */
    double *orders;        /* (n) Renyi orders */
    double *rdp;           /* (n) running RDP curve, nats */
    double *cache;         /* (n) RDP of one occurrence of cache_ev */
    double *tmp;           /* (n) scratch for what-if queries */
    fl_dp_event cache_ev;  /* event whose RDP is in cache */
    int cache_valid;       /* cache holds cache_ev */
    size_t bytes;          /* size of this block, for free */
};

void fl_dp_accountant_config_init(fl_dp_accountant_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->orders = NULL;
    cfg->n_orders = 0;
    cfg->conversion = FL_DP_CONVERSION_IMPROVED;
}

fl_status fl_dp_accountant_create(fl_dp_accountant **out, const fl_dp_accountant_config *cfg,
                                  const fl_allocator *alloc, char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    fl_allocator a;
    fl_dp_accountant_config defaults;
    fl_dp_accountant *acc = NULL;
    double def_orders[FL_DP_DEFAULT_ORDERS_COUNT];
    const double *orders;
    size_t n;

    fl__err_clear(&err);
    if (!out) {
        fl__err_set(&err, FL_ERR_MISUSE, "out is NULL");
        goto out;
    }
    *out = NULL;
    if (fl__allocator_copy(&a, alloc) != FL_OK) {
        fl__err_set(&err, FL_ERR_MISUSE, "alloc: struct_size too small or missing alloc/free");
        goto out;
    }
    if (!cfg) {
        fl_dp_accountant_config_init(&defaults);
        cfg = &defaults;
    }
    if (cfg->struct_size < sizeof(fl_dp_accountant_config)) {
        fl__err_set(&err, FL_ERR_MISUSE, "cfg.struct_size too small");
        goto out;
    }
    if (cfg->conversion != FL_DP_CONVERSION_IMPROVED &&
        cfg->conversion != FL_DP_CONVERSION_CLASSIC) {
        fl__err_set(&err, FL_ERR_MISUSE, "cfg.conversion = %d: unknown", (int)cfg->conversion);
        goto out;
    }
    if (cfg->orders) {
        orders = cfg->orders;
        n = cfg->n_orders;
        if (!fl__dp_orders_valid(orders, n, &err))
            goto out;
    } else {
        fl_dp_default_orders(def_orders, FL_DP_DEFAULT_ORDERS_COUNT);
        orders = def_orders;
        n = FL_DP_DEFAULT_ORDERS_COUNT;
    }
    /* One block: the struct, then 4 arrays of n doubles. */
    if (fl__mul_overflows(n, 4 * sizeof(double)) ||
        n * 4 * sizeof(double) > SIZE_MAX - sizeof(*acc)) {
        fl__err_set(&err, FL_ERR_MISUSE, "cfg.n_orders = %zu: too many", n);
        goto out;
    }
    size_t bytes = sizeof(*acc) + n * 4 * sizeof(double);
    acc = fl__alloc(&a, bytes);
    if (!acc) {
        fl__err_set(&err, FL_ERR_NOMEM, "out of memory allocating the accountant");
        goto out;
    }
    memset(acc, 0, sizeof(*acc));
    acc->alloc = a;
    acc->bytes = bytes;
    acc->conv = cfg->conversion;
    acc->n = n;
    acc->orders = (double *)(acc + 1);
    acc->rdp = acc->orders + n;
    acc->cache = acc->rdp + n;
    acc->tmp = acc->cache + n;
    memcpy(acc->orders, orders, n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        acc->rdp[i] = 0.0;
    fl__err_clear(&acc->err);
    *out = acc;
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}

void fl_dp_accountant_destroy(fl_dp_accountant *acc) {
    if (!acc)
        return;
    fl_allocator a = acc->alloc;
    fl__free(&a, acc, acc->bytes);
}

void fl_dp_accountant_reset(fl_dp_accountant *acc) {
    if (!acc)
        return;
    for (size_t i = 0; i < acc->n; i++)
        acc->rdp[i] = 0.0;
    fl__err_clear(&acc->err);
}

/* Makes acc->cache hold the one-occurrence RDP of a validated event. */
static void cache_event(fl_dp_accountant *acc, const fl_dp_event *ev) {
    if (acc->cache_valid && fl__dp_event_same(&acc->cache_ev, ev))
        return;
    fl__dp_event_rdp_one(acc->cache, acc->orders, acc->n, ev);
    acc->cache_ev = *ev;
    acc->cache_valid = 1;
}

/* out[i] = base[i] + count * cache[i], treating 0 * inf as 0. */
static void add_scaled(double *out, const double *base, const double *one, size_t n,
                       uint64_t count) {
    double c = (double)count;
    for (size_t i = 0; i < n; i++)
        out[i] = base[i] + (count == 0 || one[i] == 0.0 ? 0.0 : c * one[i]);
}

fl_status fl_dp_accountant_compose(fl_dp_accountant *acc, const fl_dp_event *ev) {
    if (!acc)
        return FL_ERR_MISUSE;
    fl__err_clear(&acc->err);
    fl_status rc = fl__dp_event_validate(ev, &acc->err);
    if (rc != FL_OK)
        return rc;
    if (ev->count == 0)
        return FL_OK;
    cache_event(acc, ev);
    add_scaled(acc->rdp, acc->rdp, acc->cache, acc->n, ev->count);
    return FL_OK;
}

static fl_status check_delta(fl_dp_accountant *acc, double delta) {
    if (!(delta > 0.0 && delta <= 1.0))
        return fl__err_set(&acc->err, FL_ERR_MISUSE, "delta = %g: must be in (0, 1]", delta);
    return FL_OK;
}

fl_status fl_dp_accountant_epsilon(fl_dp_accountant *acc, double *epsilon_out, double *order_out,
                                   double delta) {
    if (!acc)
        return FL_ERR_MISUSE;
    fl__err_clear(&acc->err);
    if (!epsilon_out)
        return fl__err_set(&acc->err, FL_ERR_MISUSE, "epsilon_out is NULL");
    fl_status rc = check_delta(acc, delta);
    if (rc != FL_OK)
        return rc;
    fl__dp_to_epsilon(epsilon_out, order_out, acc->orders, acc->rdp, acc->n, delta, acc->conv);
    return FL_OK;
}

fl_status fl_dp_accountant_delta(fl_dp_accountant *acc, double *delta_out, double *order_out,
                                 double epsilon) {
    if (!acc)
        return FL_ERR_MISUSE;
    fl__err_clear(&acc->err);
    if (!delta_out)
        return fl__err_set(&acc->err, FL_ERR_MISUSE, "delta_out is NULL");
    if (!(epsilon >= 0.0) || !isfinite(epsilon))
        return fl__err_set(&acc->err, FL_ERR_MISUSE, "epsilon = %g: must be finite and >= 0",
                           epsilon);
    fl__dp_to_delta(delta_out, order_out, acc->orders, acc->rdp, acc->n, epsilon, acc->conv);
    return FL_OK;
}

fl_status fl_dp_accountant_epsilon_if(fl_dp_accountant *acc, double *epsilon_out, double *order_out,
                                      const fl_dp_event *ev, double delta) {
    if (!acc)
        return FL_ERR_MISUSE;
    fl__err_clear(&acc->err);
    if (!epsilon_out)
        return fl__err_set(&acc->err, FL_ERR_MISUSE, "epsilon_out is NULL");
    fl_status rc = check_delta(acc, delta);
    if (rc == FL_OK)
        rc = fl__dp_event_validate(ev, &acc->err);
    if (rc != FL_OK)
        return rc;
    if (ev->count == 0) {
        memcpy(acc->tmp, acc->rdp, acc->n * sizeof(double));
    } else {
        cache_event(acc, ev);
        add_scaled(acc->tmp, acc->rdp, acc->cache, acc->n, ev->count);
    }
    fl__dp_to_epsilon(epsilon_out, order_out, acc->orders, acc->tmp, acc->n, delta, acc->conv);
    return FL_OK;
}

void fl_dp_accountant_curve(const fl_dp_accountant *acc, const double **orders_out,
                            const double **rdp_out, size_t *n_out) {
    if (orders_out)
        *orders_out = acc ? acc->orders : NULL;
    if (rdp_out)
        *rdp_out = acc ? acc->rdp : NULL;
    if (n_out)
        *n_out = acc ? acc->n : 0;
}

const char *fl_dp_accountant_errmsg(const fl_dp_accountant *acc) {
    if (!acc)
        return fl_status_str(FL_ERR_MISUSE);
    return fl__err_msg(&acc->err);
}

struct fl__err *fl__dp_accountant_err(fl_dp_accountant *acc) {
    return &acc->err;
}

/* ---- noise calibration ---- */

/* Epsilon of steps compositions of the sampled Gaussian (q, z) on a reset accountant. */
static fl_status eps_for_z(fl_dp_accountant *acc, double *eps, double q, double z, uint64_t steps,
                           double delta) {
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, q, z, steps);
    fl_dp_accountant_reset(acc);
    fl_status rc = fl_dp_accountant_compose(acc, &ev);
    if (rc == FL_OK)
        rc = fl_dp_accountant_epsilon(acc, eps, NULL, delta);
    return rc;
}

fl_status fl_dp_noise_multiplier_for_epsilon(double *z_out, double *epsilon_out, double q,
                                             uint64_t steps, double target_epsilon, double delta,
                                             double rel_tol, const fl_dp_accountant_config *cfg,
                                             const fl_allocator *alloc, char *errmsg,
                                             size_t errmsg_len) {
    struct fl__err err;
    fl_dp_accountant *acc = NULL;
    const double z_min = 1e-3, z_max = 1e4;
    double lo = z_min, hi = z_max, e_lo, e_hi;
    fl_status rc;

    fl__err_clear(&err);
    if (!z_out) {
        fl__err_set(&err, FL_ERR_MISUSE, "z_out is NULL");
        goto out;
    }
    if (!(q > 0.0 && q <= 1.0)) {
        fl__err_set(&err, FL_ERR_MISUSE, "q = %g: must be in (0, 1]", q);
        goto out;
    }
    if (steps < 1) {
        fl__err_set(&err, FL_ERR_MISUSE, "steps must be >= 1");
        goto out;
    }
    if (!(target_epsilon > 0.0) || !isfinite(target_epsilon)) {
        fl__err_set(&err, FL_ERR_MISUSE, "target epsilon = %g: must be finite and > 0",
                    target_epsilon);
        goto out;
    }
    if (!(delta > 0.0 && delta < 1.0)) {
        fl__err_set(&err, FL_ERR_MISUSE, "delta = %g: must be in (0, 1)", delta);
        goto out;
    }
    if (rel_tol == 0.0)
        rel_tol = 1e-6;
    if (!(rel_tol > 0.0 && rel_tol < 0.5)) {
        fl__err_set(&err, FL_ERR_MISUSE, "rel_tol = %g: must be in (0, 0.5)", rel_tol);
        goto out;
    }
    rc = fl_dp_accountant_create(&acc, cfg, alloc, err.msg, sizeof(err.msg));
    if (rc != FL_OK) {
        err.code = rc;
        goto out;
    }
    /* epsilon falls as z grows: keep eps(lo) > target >= eps(hi). */
    if ((rc = eps_for_z(acc, &e_hi, q, hi, steps, delta)) != FL_OK)
        goto out_acc;
    if (e_hi > target_epsilon) {
        fl__err_set(&err, FL_ERR_RANGE, "even noise multiplier %g gives epsilon %g > target %g", hi,
                    e_hi, target_epsilon);
        goto out_free;
    }
    if ((rc = eps_for_z(acc, &e_lo, q, lo, steps, delta)) != FL_OK)
        goto out_acc;
    if (e_lo <= target_epsilon) {
        hi = lo;
        e_hi = e_lo;
    }
    while (hi > lo && hi - lo > rel_tol * hi) {
        /* Geometric midpoint while the bracket spans decades, arithmetic once it is tight. */
        double mid = hi / lo > 2.0 ? sqrt(lo * hi) : 0.5 * (lo + hi);
        double e_mid;
        if ((rc = eps_for_z(acc, &e_mid, q, mid, steps, delta)) != FL_OK)
            goto out_acc;
        if (e_mid <= target_epsilon) {
            hi = mid;
            e_hi = e_mid;
        } else {
            lo = mid;
        }
    }
    *z_out = hi;
    if (epsilon_out)
        *epsilon_out = e_hi;
    goto out_free;
out_acc:
    fl__err_set(&err, rc, "%s", fl_dp_accountant_errmsg(acc));
out_free:
    fl_dp_accountant_destroy(acc);
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}
