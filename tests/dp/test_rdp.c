/* RDP curves and conversions: closed forms, an independent quadrature of A_alpha at
 * fractional orders, the discrete bounds, and every row of tests/vectors/dp/dp_vectors.csv
 * (Google dp_accounting 0.6 and published tutorial values). */
#include "fl_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flotilla/dp.h"
#include "rdp_internal.h"

static double rel_err(double got, double want) {
    return fabs(got - want) / fmax(fabs(want), 1e-300);
}

/* ---- default orders ---- */

static void test_default_orders(void **state) {
    (void)state;
    double o[FL_DP_DEFAULT_ORDERS_COUNT];
    assert_int_equal(fl_dp_default_orders_count(), FL_DP_DEFAULT_ORDERS_COUNT);
    assert_int_equal(fl_dp_default_orders(o, FL_DP_DEFAULT_ORDERS_COUNT), FL_OK);
    assert_int_equal(fl_dp_default_orders(o, FL_DP_DEFAULT_ORDERS_COUNT - 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_default_orders(NULL, 200), FL_ERR_MISUSE);
    assert_true(o[0] == 1.1 && o[98] == 10.9 && o[99] == 11.0 && o[151] == 63.0);
    assert_true(o[152] == 128 && o[153] == 256 && o[154] == 512 && o[155] == 1024);
    for (size_t i = 1; i < FL_DP_DEFAULT_ORDERS_COUNT; i++)
        assert_true(o[i] > o[i - 1]);
    assert_true(o[42] == 5.3); /* built from integers: the nearest double to 5.3 */
}

/* ---- sampled Gaussian ---- */

static void test_q1_is_plain_gaussian(void **state) {
    (void)state;
    const double orders[] = {1.5, 2, 3.7, 10, 63, 1024};
    const double sig[] = {0.3, 1, 7.5, 100};
    double rdp[6];
    for (size_t s = 0; s < 4; s++) {
        assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, orders, 6, 1.0, sig[s], NULL, 0), FL_OK);
        for (size_t i = 0; i < 6; i++)
            assert_true(rel_err(rdp[i], orders[i] / (2 * sig[s] * sig[s])) < 1e-15);
    }
    /* q -> 1 from below approaches the same curve through the series. */
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, orders, 5, 1.0 - 1e-9, 1.0, NULL, 0), FL_OK);
    for (size_t i = 0; i < 5; i++)
        assert_true(rel_err(rdp[i], orders[i] / 2.0) < 1e-6);
}

static void test_q0_and_no_noise(void **state) {
    (void)state;
    const double orders[] = {1.5, 2, 32};
    double rdp[3];
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, orders, 3, 0.0, 1.0, NULL, 0), FL_OK);
    assert_true(rdp[0] == 0 && rdp[1] == 0 && rdp[2] == 0);
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, orders, 3, 0.1, 0.0, NULL, 0), FL_OK);
    assert_true(isinf(rdp[0]) && isinf(rdp[2]));
}

/* Integer sum and the fractional series agree next to integers. */
static void test_int_frac_continuity(void **state) {
    (void)state;
    const double qs[] = {1e-5, 1e-3, 0.05, 0.5, 0.9};
    const double sig[] = {0.3, 0.7, 1.0, 3.0, 100.0};
    const unsigned long al[] = {2, 3, 8, 32};
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < 4; c++) {
                double li = fl__dp_log_a_int(qs[a], sig[b], al[c]);
                double lf = fl__dp_log_a_frac(qs[a], sig[b], (double)al[c] + 1e-9, NULL);
                if (!(rel_err(lf, li) < 1e-5 || fabs(lf - li) < 1e-12))
                    fail_msg("q=%g s=%g a=%lu: int %.12g frac %.12g", qs[a], sig[b], al[c], li, lf);
            }
}

/* log A_alpha by trapezoid quadrature of E_{z~N(0,s^2)}[((1-q) + q e^{(2z-1)/(2s^2)})^alpha],
 * in log space: an independent check of the fractional-order series (signs included). */
static double log_a_quadrature(double q, double s, double alpha) {
    double lo = -40.0 * s - 1.0, hi = alpha + 40.0 * s + 1.0, h = s / 400.0;
    struct fl__dp_lse acc;
    fl__dp_lse_init(&acc);
    long n = (long)ceil((hi - lo) / h);
    for (long k = 0; k <= n; k++) {
        double z = lo + (double)k * h;
        double inner = fl__dp_log_add(log1p(-q), log(q) + (2 * z - 1) / (2 * s * s));
        double t = -z * z / (2 * s * s) - log(s * sqrt(2 * M_PI)) + alpha * inner + log(h);
        if (k == 0 || k == n)
            t += log(0.5);
        fl__dp_lse_add(&acc, t);
    }
    return fl__dp_lse_value(&acc);
}

static void test_fractional_vs_quadrature(void **state) {
    (void)state;
    /* Includes large-epsilon settings where summing magnitudes would over-estimate. */
    const double cases[][3] = {
        {0.1, 1.1, 2.1},  {0.1, 1.1, 3.6},   {0.01, 0.5, 2.5}, {0.1, 0.5, 3.5},
        {0.001, 2, 37.5}, {0.5, 0.8, 1.5},   {0.1, 4, 10.3},   {0.3, 0.3, 1.1},
        {0.9, 0.6, 5.5},  {1e-5, 30, 200.5}, {0.02, 1, 7.25},  {0.2, 0.4, 1.9},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double q = cases[i][0], s = cases[i][1], a = cases[i][2];
        long terms = 0;
        double series = fl__dp_log_a_frac(q, s, a, &terms);
        double quad = log_a_quadrature(q, s, a);
        if (!(fabs(series - quad) <= 1e-9 + 1e-8 * fabs(quad)))
            fail_msg("q=%g s=%g a=%g: series %.15g quadrature %.15g (%ld terms)", q, s, a, series,
                     quad, terms);
        /* Integer orders too. */
        unsigned long ai = (unsigned long)ceil(a);
        double li = fl__dp_log_a_int(q, s, ai), qi = log_a_quadrature(q, s, (double)ai);
        if (!(fabs(li - qi) <= 1e-9 + 1e-8 * fabs(qi)))
            fail_msg("q=%g s=%g a=%lu: sum %.15g quadrature %.15g", q, s, ai, li, qi);
    }
}

static void test_log_erfc(void **state) {
    (void)state;
    /* Continuous across the switch to the asymptotic series, and right at small x. */
    assert_true(fabs(fl__dp_log_erfc(20.0 - 1e-12) - fl__dp_log_erfc(20.0)) < 1e-9);
    assert_true(fabs(fl__dp_log_erfc(1.0) - log(erfc(1.0))) < 1e-15);
    assert_true(fabs(fl__dp_log_erfc(-3.0) - log(erfc(-3.0))) < 1e-15);
    assert_true(isfinite(fl__dp_log_erfc(1e6)) && fl__dp_log_erfc(1e6) < -1e11);
}

/* The required range: q in [1e-5, 1], sigma in [0.3, 100], up to 1e6 steps stays finite,
 * non-negative and monotone. */
static void test_range_sweep(void **state) {
    (void)state;
    double orders[FL_DP_DEFAULT_ORDERS_COUNT], rdp[FL_DP_DEFAULT_ORDERS_COUNT];
    fl_dp_default_orders(orders, FL_DP_DEFAULT_ORDERS_COUNT);
    const double qs[] = {1e-5, 1e-3, 0.1, 0.7, 1.0};
    const double sig[] = {0.3, 0.6, 2.0, 10.0, 100.0};
    for (size_t a = 0; a < 5; a++) {
        double prev_eps = INFINITY;
        for (size_t b = 0; b < 5; b++) {
            fl_dp_event ev;
            fl_dp_event_gaussian(&ev, qs[a], sig[b], 1000000);
            assert_int_equal(fl_dp_rdp_event(rdp, orders, FL_DP_DEFAULT_ORDERS_COUNT, &ev, NULL, 0),
                             FL_OK);
            for (size_t i = 0; i < FL_DP_DEFAULT_ORDERS_COUNT; i++) {
                assert_true(rdp[i] >= 0.0 && !isnan(rdp[i]));
                /* RDP grows with the order; the fractional series works at an absolute
                 * precision of about 1e-15 per step, visible only for tiny curves. */
                if (i > 0)
                    assert_true(rdp[i] >= rdp[i - 1] * (1 - 1e-9) - 1e-15 * 1e6);
            }
            double eps, order;
            assert_int_equal(fl_dp_rdp_to_epsilon(&eps, &order, orders, rdp,
                                                  FL_DP_DEFAULT_ORDERS_COUNT, 1e-6,
                                                  FL_DP_CONVERSION_IMPROVED, NULL, 0),
                             FL_OK);
            assert_true(eps <= prev_eps); /* more noise, less epsilon */
            prev_eps = eps;
        }
    }
}

/* ---- conversion ---- */

static void test_conversion(void **state) {
    (void)state;
    double orders[FL_DP_DEFAULT_ORDERS_COUNT], rdp[FL_DP_DEFAULT_ORDERS_COUNT];
    fl_dp_default_orders(orders, FL_DP_DEFAULT_ORDERS_COUNT);
    assert_int_equal(
        fl_dp_rdp_sampled_gaussian(rdp, orders, FL_DP_DEFAULT_ORDERS_COUNT, 0.01, 1.0, NULL, 0),
        FL_OK);
    for (size_t i = 0; i < FL_DP_DEFAULT_ORDERS_COUNT; i++)
        rdp[i] *= 1000;
    double e_imp, e_cls, o_imp, o_cls, d, od;
    fl_dp_rdp_to_epsilon(&e_imp, &o_imp, orders, rdp, FL_DP_DEFAULT_ORDERS_COUNT, 1e-5,
                         FL_DP_CONVERSION_IMPROVED, NULL, 0);
    fl_dp_rdp_to_epsilon(&e_cls, &o_cls, orders, rdp, FL_DP_DEFAULT_ORDERS_COUNT, 1e-5,
                         FL_DP_CONVERSION_CLASSIC, NULL, 0);
    assert_true(e_imp < e_cls);
    assert_true(rel_err(e_imp, 2.101366525) < 1e-5); /* dp_vectors.csv row */
    /* delta(epsilon(delta)) returns delta at the same optimal order. */
    fl_dp_rdp_to_delta(&d, &od, orders, rdp, FL_DP_DEFAULT_ORDERS_COUNT, e_imp,
                       FL_DP_CONVERSION_IMPROVED, NULL, 0);
    assert_true(rel_err(d, 1e-5) < 1e-9 && od == o_imp);
    fl_dp_rdp_to_delta(&d, &od, orders, rdp, FL_DP_DEFAULT_ORDERS_COUNT, e_cls,
                       FL_DP_CONVERSION_CLASSIC, NULL, 0);
    assert_true(rel_err(d, 1e-5) < 1e-9 && od == o_cls);
    /* Zero curve: epsilon 0; delta >= 1 is trivial. */
    double zero[3] = {0, 0, 0};
    fl_dp_rdp_to_epsilon(&e_imp, NULL, orders, zero, 3, 1e-5, FL_DP_CONVERSION_IMPROVED, NULL, 0);
    assert_true(e_imp == 0.0);
    fl_dp_rdp_to_epsilon(&e_imp, &o_imp, orders, rdp, 3, 1.0, FL_DP_CONVERSION_IMPROVED, NULL, 0);
    assert_true(e_imp == 0.0);
    /* Infinite curve: infinite epsilon, delta 1. */
    double inf[2] = {INFINITY, INFINITY};
    fl_dp_rdp_to_epsilon(&e_imp, NULL, orders, inf, 2, 1e-5, FL_DP_CONVERSION_IMPROVED, NULL, 0);
    assert_true(isinf(e_imp));
    fl_dp_rdp_to_delta(&d, NULL, orders, inf, 2, 3.0, FL_DP_CONVERSION_IMPROVED, NULL, 0);
    assert_true(d == 1.0);
}

static void test_bad_arguments(void **state) {
    (void)state;
    char msg[256];
    double rdp[2], e;
    const double good[] = {2, 3}, bad[] = {2, 1.0}, nanv[] = {NAN, 3};
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, bad, 2, 0.1, 1, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "orders[1]"));
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, nanv, 2, 0.1, 1, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, good, 2, 1.5, 1, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.q"));
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, good, 2, 0.1, -1, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "noise_multiplier"));
    assert_int_equal(fl_dp_rdp_sampled_gaussian(rdp, good, 0, 0.1, 1, NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_sampled_gaussian(NULL, good, 2, 0.1, 1, NULL, 0), FL_ERR_MISUSE);
    rdp[0] = rdp[1] = 1;
    assert_int_equal(fl_dp_rdp_to_epsilon(&e, NULL, good, rdp, 2, 0.0, FL_DP_CONVERSION_IMPROVED,
                                          msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "delta"));
    assert_int_equal(
        fl_dp_rdp_to_epsilon(&e, NULL, good, rdp, 2, 1e-5, (fl_dp_conversion)7, msg, sizeof msg),
        FL_ERR_MISUSE);
    assert_int_equal(
        fl_dp_rdp_to_delta(&e, NULL, good, rdp, 2, -1, FL_DP_CONVERSION_CLASSIC, msg, sizeof msg),
        FL_ERR_MISUSE);
    fl_dp_event ev;
    fl_dp_event_distributed_discrete_gaussian(&ev, 0.3, 10, 10, 1, 0, 1, 1);
    assert_int_equal(fl_dp_rdp_event(rdp, good, 2, &ev, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "sigma"));
    fl_dp_event_discrete_gaussian(&ev, 2, 0, 1, 1);
    assert_int_equal(fl_dp_rdp_event(rdp, good, 2, &ev, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "l2_sensitivity"));
    ev.kind = (fl_dp_event_kind)99;
    assert_int_equal(fl_dp_rdp_event(rdp, good, 2, &ev, msg, sizeof msg), FL_ERR_MISUSE);
}

/* ---- discrete mechanisms ---- */

static void test_discrete_gaussian(void **state) {
    (void)state;
    double orders[FL_DP_DEFAULT_ORDERS_COUNT], dg[FL_DP_DEFAULT_ORDERS_COUNT];
    double ddg[FL_DP_DEFAULT_ORDERS_COUNT], g[FL_DP_DEFAULT_ORDERS_COUNT];
    const size_t n = FL_DP_DEFAULT_ORDERS_COUNT;
    fl_dp_default_orders(orders, n);
    fl_dp_event ev;

    /* Unsampled discrete Gaussian: exactly alpha D^2 / (2 sigma^2) (CKS 2020). */
    fl_dp_event_discrete_gaussian(&ev, 20.0, 30.0, 1.0, 3);
    assert_int_equal(fl_dp_rdp_event(dg, orders, n, &ev, NULL, 0), FL_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(rel_err(dg[i], 3 * orders[i] * 900.0 / 800.0) < 1e-14);

    /* One share (n = 1): tau = 0, the discrete Gaussian bound. */
    fl_dp_event_distributed_discrete_gaussian(&ev, 20.0, 1, 1000, 30.0, 0, 1.0, 3);
    assert_int_equal(fl_dp_rdp_event(ddg, orders, n, &ev, NULL, 0), FL_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(rel_err(ddg[i], dg[i]) < 1e-14);

    /* Many shares with sigma large enough that tau vanishes: like a Gaussian with noise
     * multiplier sqrt(n) sigma / D; with small sigma the tau term makes it strictly worse. */
    fl_dp_event_distributed_discrete_gaussian(&ev, 4.0, 1000, 100000, 100.0, 0, 1.0, 1);
    assert_int_equal(fl_dp_rdp_event(ddg, orders, n, &ev, NULL, 0), FL_OK);
    double z = sqrt(1000.0) * 4.0 / 100.0;
    assert_int_equal(fl_dp_rdp_sampled_gaussian(g, orders, n, 1.0, z, NULL, 0), FL_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(ddg[i] >= g[i] && rel_err(ddg[i], g[i]) < 1e-9);
    fl_dp_event_distributed_discrete_gaussian(&ev, 0.5, 1000, 100000, 100.0 * 0.125, 0, 1.0, 1);
    assert_int_equal(fl_dp_rdp_event(ddg, orders, n, &ev, NULL, 0), FL_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(ddg[i] > g[i] * 1.01);

    /* Sampled: the Zhu-Wang bound is never below the exact sampled Gaussian of the same
     * scale, never above the unsampled bound, and within a small factor at small q. */
    for (double q = 1e-3; q < 0.5; q *= 10) {
        fl_dp_event_discrete_gaussian(&ev, 2.0, 2.0, q, 1); /* scale 1 */
        assert_int_equal(fl_dp_rdp_event(dg, orders, n, &ev, NULL, 0), FL_OK);
        assert_int_equal(fl_dp_rdp_sampled_gaussian(g, orders, n, q, 1.0, NULL, 0), FL_OK);
        for (size_t i = 0; i < n; i++) {
            assert_true(dg[i] >= g[i] * (1 - 1e-12));
            assert_true(dg[i] <= orders[i] / 2.0 * (1 + 1e-12));
            if (orders[i] <= 8 && orders[i] == floor(orders[i]))
                assert_true(dg[i] <= 3.5 * g[i]);
        }
    }
}

/* ---- reference vectors ---- */

/* Orders named in a published_ row's note. */
static size_t note_orders(const char *note, double *o) {
    size_t k = 0;
    if (strstr(note, "orders 1.1..10.9,12..63")) {
        for (int t = 11; t <= 109; t++)
            o[k++] = t / 10.0;
        for (int a = 12; a <= 63; a++)
            o[k++] = a;
    } else if (strstr(note, "orders 2..32")) {
        for (int a = 2; a <= 32; a++)
            o[k++] = a;
    }
    return k;
}

/* Splits one CSV record (quoted last field) into 7 fields in place. */
static int split_csv(char *line, char **f) {
    int n = 0;
    char *p = line;
    while (n < 7) {
        if (*p == '"') {
            f[n++] = ++p;
            p = strchr(p, '"');
            if (!p)
                return -1;
            *p++ = '\0';
            if (*p == ',')
                p++;
        } else {
            f[n++] = p;
            p += strcspn(p, ",\r\n");
            if (*p == ',')
                *p++ = '\0';
            else
                *p = '\0';
        }
    }
    return n;
}

static void test_reference_vectors(void **state) {
    (void)state;
    const char *path = FL_SOURCE_DIR "/tests/vectors/dp/dp_vectors.csv";
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char line[1024];
    int rows = 0, published = 0;
    double worst = 0.0;
    assert_non_null(fgets(line, sizeof line, fp)); /* header */
    while (fgets(line, sizeof line, fp)) {
        char *f[7] = {0}; /* -O3 cannot see that a failed split_csv check returns */
        if (line[0] == '\n' || line[0] == '#')
            continue;
        assert_int_equal(split_csv(line, f), 7);
        double q = strtod(f[1], NULL), s = strtod(f[2], NULL), delta = strtod(f[4], NULL);
        double want = strtod(f[5], NULL);
        unsigned long long steps = strtoull(f[3], NULL, 10);
        fl_dp_accountant_config cfg;
        fl_dp_accountant_config_init(&cfg);
        double orders[256];
        if (!strncmp(f[0], "published_", 10)) {
            cfg.orders = orders;
            cfg.n_orders = note_orders(f[6], orders);
            assert_true(cfg.n_orders > 0);
            /* The TF Privacy rows (named *_classic) use the classic conversion; Opacus'
             * get_privacy_spent uses the improved one (0.336 at order 23 is only reproduced
             * with it; classic would give 0.523). */
            if (strstr(f[0], "classic"))
                cfg.conversion = FL_DP_CONVERSION_CLASSIC;
            published++;
        } else {
            assert_string_equal(f[0], "dp_accounting_rdp");
        }
        fl_dp_accountant *acc;
        assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, NULL, 0), FL_OK);
        fl_dp_event ev;
        const char *comp = strstr(f[6], "composes ");
        if (comp) {
            /* "composes (q,s,T)+(q,s,T)": every listed event, in order. */
            const char *p = comp + 9;
            while (*p == '(') {
                double eq, es;
                unsigned long long et;
                int used = 0;
                assert_int_equal(sscanf(p, "(%lf,%lf,%llu)%n", &eq, &es, &et, &used), 3);
                fl_dp_event_gaussian(&ev, eq, es, et);
                assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
                p += used;
                if (*p == '+')
                    p++;
            }
        } else {
            fl_dp_event_gaussian(&ev, q, s, steps);
            assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
        }
        double eps, order;
        assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, &order, delta), FL_OK);
        double r = rel_err(eps, want);
        if (r > worst)
            worst = r;
        if (!(r <= 0.01)) {
            fl_dp_accountant_destroy(acc);
            fail_msg("%s q=%g sigma=%g steps=%llu delta=%g: epsilon %.9g, reference %.9g (%.3g%%)",
                     f[0], q, s, steps, delta, eps, want, 100 * r);
        }
        /* Where we agree closely the optimal order must be the one in the note. */
        const char *opt = strstr(f[6], "opt order ");
        opt = opt ? opt + 10 : (strstr(f[6], "opt ") ? strstr(f[6], "opt ") + 4 : NULL);
        if (opt && r < 1e-6)
            assert_true(fabs(strtod(opt, NULL) - order) < 1e-9);
        fl_dp_accountant_destroy(acc);
        rows++;
    }
    fclose(fp);
    assert_int_equal(rows, 67);
    assert_int_equal(published, 5);
    print_message("dp_vectors.csv: %d rows, worst relative difference %.3g%%\n", rows, 100 * worst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_orders),
        cmocka_unit_test(test_q1_is_plain_gaussian),
        cmocka_unit_test(test_q0_and_no_noise),
        cmocka_unit_test(test_int_frac_continuity),
        cmocka_unit_test(test_fractional_vs_quadrature),
        cmocka_unit_test(test_log_erfc),
        cmocka_unit_test(test_range_sweep),
        cmocka_unit_test(test_conversion),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_discrete_gaussian),
        cmocka_unit_test(test_reference_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
