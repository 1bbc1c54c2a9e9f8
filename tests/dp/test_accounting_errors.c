/* Accounting API contracts at the edges: every public call of the accountant, the RDP and
 * conversion functions, the ledger helpers and the budget check rejects bad arguments with
 * FL_ERR_MISUSE / FL_ERR_FORMAT and a message naming the problem, NULL handles are harmless,
 * and the boundary values (delta = 1, q = 0, count = 0, a huge target epsilon) give the
 * documented results. */

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

/* ---- accountant handle ---- */

static void test_accountant_null_and_delta_edges(void **state) {
    (void)state;
    double eps = -1, order = -1, delta = -1;
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, 0.01, 1.1, 100);

    /* NULL handles: every entry point answers FL_ERR_MISUSE (or does nothing). */
    assert_int_equal(fl_dp_accountant_epsilon(NULL, &eps, NULL, 1e-5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_delta(NULL, &delta, NULL, 1.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_epsilon_if(NULL, &eps, NULL, &ev, 1e-5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_budget_check(NULL, NULL, NULL, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_accountant_errmsg(NULL), fl_status_str(FL_ERR_MISUSE));
    fl_dp_accountant_reset(NULL);
    fl_dp_accountant_destroy(NULL);
    fl_dp_accountant_config_init(NULL);
    const double *o = (const double *)&eps, *r = (const double *)&eps;
    size_t n = 7;
    fl_dp_accountant_curve(NULL, &o, &r, &n);
    assert_null(o);
    assert_null(r);
    assert_int_equal(n, 0);

    fl_dp_accountant *acc = NULL;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    /* Any output of the curve view may be NULL. */
    fl_dp_accountant_curve(acc, NULL, NULL, NULL);
    fl_dp_accountant_curve(acc, NULL, NULL, &n);
    assert_int_equal(n, FL_DP_DEFAULT_ORDERS_COUNT);

    /* delta above 1 and NaN are refused with the value named. */
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, 1.5), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "delta = 1.5"));
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, NAN), FL_ERR_MISUSE);
    /* delta = 1 is allowed and trivial: epsilon 0, order 0. */
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, &order, 1.0), FL_OK);
    assert_true(eps == 0.0 && order == 0.0);

    /* fl_dp_accountant_delta: NULL output, negative, NaN and infinite epsilon. */
    assert_int_equal(fl_dp_accountant_delta(acc, NULL, NULL, 1.0), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "delta_out is NULL"));
    assert_int_equal(fl_dp_accountant_delta(acc, &delta, NULL, NAN), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_delta(acc, &delta, NULL, INFINITY), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "must be finite and >= 0"));
    assert_int_equal(fl_dp_accountant_delta(acc, &delta, &order, 1.0), FL_OK);
    assert_true(delta > 0 && delta < 1 && order > 1);

    /* epsilon_if: NULL output and a bad delta are checked before the event. */
    assert_int_equal(fl_dp_accountant_epsilon_if(acc, NULL, NULL, &ev, 1e-5), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "epsilon_out is NULL"));
    assert_int_equal(fl_dp_accountant_epsilon_if(acc, &eps, NULL, NULL, 0.0), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "delta = 0"));
    fl_dp_accountant_destroy(acc);
}

/* An event with q = 0 contributes nothing (its curve is 0, never 0 * inf). */
static void test_accountant_zero_probability(void **state) {
    (void)state;
    fl_dp_accountant *acc = NULL;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, 0.0, 0.0, 1000); /* no noise, but nobody is sampled */
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    const double *rdp;
    size_t n;
    fl_dp_accountant_curve(acc, NULL, &rdp, &n);
    for (size_t i = 0; i < n; i++)
        assert_true(rdp[i] == 0.0);
    double eps;
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, 1e-6), FL_OK);
    assert_true(eps == 0.0);
    /* The same event through the stateless call, with count 0 and with count 3. */
    double orders[3] = {2, 8.5, 64}, out[3];
    fl_dp_event_gaussian(&ev, 0.5, 1.0, 0);
    assert_int_equal(fl_dp_rdp_event(out, orders, 3, &ev, NULL, 0), FL_OK);
    assert_true(out[0] == 0.0 && out[1] == 0.0 && out[2] == 0.0);
    fl_dp_event_discrete_gaussian(&ev, 2.0, 1.0, 0.0, 3);
    assert_int_equal(fl_dp_rdp_event(out, orders, 3, &ev, NULL, 0), FL_OK);
    assert_true(out[0] == 0.0 && out[1] == 0.0 && out[2] == 0.0);
    fl_dp_accountant_destroy(acc);
}

static void test_noise_multiplier_arguments(void **state) {
    (void)state;
    char msg[256];
    double z = 0, e = 0;
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(NULL, NULL, 0.1, 10, 1.0, 1e-5, 0, NULL,
                                                        NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_string_equal(msg, "z_out is NULL");
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 1.5, 10, 1.0, 1e-5, 0, NULL,
                                                        NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "q = 1.5"));
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 10, INFINITY, 1e-5, 0,
                                                        NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "target epsilon = inf"));
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 10, 1.0, 1.0, 0, NULL,
                                                        NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "delta = 1"));
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 10, 1.0, 1e-5, 0.5, NULL,
                                                        NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "rel_tol = 0.5"));
    /* A bad accountant config is reported as the accountant's own error. */
    fl_dp_accountant_config cfg;
    fl_dp_accountant_config_init(&cfg);
    cfg.conversion = (fl_dp_conversion)7;
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 10, 1.0, 1e-5, 0, &cfg,
                                                        NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "cfg.conversion = 7"));
    /* A target so loose that even the smallest multiplier meets it: the answer is the lower
     * end of the search range, 1e-3, and its epsilon is within the target. One full-batch
     * step at z = 1e-3 costs about alpha / (2 z^2) = 5e5 alpha. */
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, &e, 1.0, 1, 1e9, 1e-5, 0, NULL, NULL,
                                                        msg, sizeof msg),
                     FL_OK);
    assert_true(z == 1e-3);
    assert_true(e > 5e5 && e <= 1e9);
}

/* ---- stateless RDP and conversion ---- */

static void test_rdp_and_conversion_arguments(void **state) {
    (void)state;
    double orders[2] = {2.0, 32.0}, rdp[2] = {0.5, 4.0}, out[2], eps, delta, order;
    char msg[128];
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, 0.1, 1.0, 1);

    /* NULL orders with a count, zero orders. */
    assert_int_equal(fl_dp_rdp_event(out, NULL, 2, &ev, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "need at least one order"));
    assert_int_equal(fl_dp_rdp_sampled_gaussian(out, orders, 0, 0.1, 1.0, msg, sizeof msg),
                     FL_ERR_MISUSE);
    /* A zero-length message buffer is never written. */
    snprintf(msg, sizeof msg, "untouched");
    assert_int_equal(fl_dp_rdp_event(NULL, orders, 2, &ev, msg, 0), FL_ERR_MISUSE);
    assert_string_equal(msg, "untouched");

    /* Event fields, one at a time: struct_size, q, noise multiplier. */
    fl_dp_event bad = ev;
    bad.struct_size = 8;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "struct_size"));
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, NULL, msg, sizeof msg), FL_ERR_MISUSE);
    bad = ev;
    bad.q = NAN;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.q"));
    bad.q = -0.5;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    bad = ev;
    bad.noise_multiplier = INFINITY;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.noise_multiplier = inf"));

    /* Conversions: NULL outputs / curves, unknown conversion, delta and epsilon ranges. */
    assert_int_equal(fl_dp_rdp_to_epsilon(NULL, NULL, orders, rdp, 2, 1e-5,
                                          FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, NULL, orders, NULL, 2, 1e-5,
                                          FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "must not be NULL"));
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, NULL, orders, rdp, 2, 1e-5, (fl_dp_conversion)9,
                                          msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "conversion = 9: unknown"));
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, NULL, orders, rdp, 2, 2.0,
                                          FL_DP_CONVERSION_CLASSIC, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "delta = 2"));
    assert_int_equal(fl_dp_rdp_to_delta(NULL, NULL, orders, rdp, 2, 1.0,
                                        FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_to_delta(&delta, NULL, orders, NULL, 2, 1.0,
                                        FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_to_delta(&delta, NULL, NULL, rdp, 2, 1.0,
                                        FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_to_delta(&delta, NULL, orders, rdp, 2, 1.0, (fl_dp_conversion)-1,
                                        msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "unknown"));
    assert_int_equal(fl_dp_rdp_to_delta(&delta, NULL, orders, rdp, 2, NAN,
                                        FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rdp_to_delta(&delta, NULL, orders, rdp, 2, INFINITY,
                                        FL_DP_CONVERSION_IMPROVED, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "epsilon = inf"));

    /* The optional order output may be NULL; the result equals the one with it. */
    double eps2, delta2;
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, &order, orders, rdp, 2, 1e-5,
                                          FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps2, NULL, orders, rdp, 2, 1e-5,
                                          FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    assert_true(eps == eps2 && order == 32.0);
    assert_int_equal(fl_dp_rdp_to_delta(&delta, &order, orders, rdp, 2, 5.0,
                                        FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    assert_int_equal(fl_dp_rdp_to_delta(&delta2, NULL, orders, rdp, 2, 5.0,
                                        FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    assert_true(delta == delta2 && delta > 0 && delta < 1);
}

/* Curve entries that are negative, NaN or +inf, and orders at or below 1.01, are handled as
 * documented: negative counts as 0, NaN and +inf give no bound at that order, and the improved
 * conversion's main formula is not used at orders <= 1.01. */
static void test_conversion_odd_curves(void **state) {
    (void)state;
    double orders[4] = {1.005, 2.0, 3.0, 4.0};
    double eps, delta, order;
    /* Only order 2 is usable: order 1.005 is skipped by the improved formula (r large enough
     * that the KL shortcut does not apply), 3 is NaN, 4 is +inf. */
    double rdp[4] = {5.0, 1.0, NAN, INFINITY};
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, &order, orders, rdp, 4, 1e-5,
                                          FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    double want = 1.0 + log1p(-0.5) - (log(1e-5) + log(2.0));
    assert_true(fabs(eps - want) < 1e-12 && order == 2.0);
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, &order, orders, rdp, 4, 1e-5,
                                          FL_DP_CONVERSION_CLASSIC, NULL, 0),
                     FL_OK);
    assert_true(order == 2.0 && fabs(eps - (1.0 - log(1e-5))) < 1e-12);
    /* Delta at epsilon 2: order 1.005 uses only the KL bound, NaN / inf are skipped. */
    assert_int_equal(fl_dp_rdp_to_delta(&delta, &order, orders, rdp, 4, 2.0,
                                        FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    double ld2 = fmin(0.5 * log1p(-exp(-1.0)), (1.0) * (1.0 - 2.0 + log1p(-0.5)) - log(2.0));
    double ld1 = 0.5 * log1p(-exp(-5.0));
    assert_true(fabs(delta - exp(fmin(ld1, ld2))) < 1e-12);
    /* A negative entry counts as 0 RDP: epsilon 0 at any delta, delta 0 at any epsilon. */
    double neg[1] = {-0.25}, o1[1] = {2.0};
    assert_int_equal(
        fl_dp_rdp_to_epsilon(&eps, &order, o1, neg, 1, 1e-5, FL_DP_CONVERSION_IMPROVED, NULL, 0),
        FL_OK);
    assert_true(eps == 0.0);
    assert_int_equal(
        fl_dp_rdp_to_delta(&delta, &order, o1, neg, 1, 0.5, FL_DP_CONVERSION_IMPROVED, NULL, 0),
        FL_OK);
    assert_true(delta == 0.0);
    /* Every order unusable: epsilon +inf, delta 1. */
    double inf2[2] = {INFINITY, NAN};
    assert_int_equal(fl_dp_rdp_to_epsilon(&eps, &order, orders + 1, inf2, 2, 1e-5,
                                          FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    assert_true(isinf(eps) && order == 0.0);
    assert_int_equal(fl_dp_rdp_to_delta(&delta, &order, orders + 1, inf2, 2, 1.0,
                                        FL_DP_CONVERSION_IMPROVED, NULL, 0),
                     FL_OK);
    assert_true(delta == 1.0);
}

/* Event validation of the discrete kinds, field by field, with the field named. */
static void test_discrete_event_fields(void **state) {
    (void)state;
    double orders[2] = {2.0, 10.0}, out[2];
    char msg[200];
    fl_dp_event ev, bad;
    fl_dp_event_distributed_discrete_gaussian(&ev, 2.0, 10, 64, 8.0, 0.0, 1.0, 1);
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &ev, msg, sizeof msg), FL_OK);

    bad = ev;
    bad.n_clients = 0;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "n_clients"));
    bad = ev;
    bad.dim = 0;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.dim"));
    bad = ev;
    bad.sigma = INFINITY;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "sigma >= 0.5"));
    bad = ev;
    bad.l1_sensitivity = -1.0;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.l1_sensitivity = -1"));
    bad.l1_sensitivity = INFINITY;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    bad = ev;
    bad.l2_sensitivity = 0.0;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.l2_sensitivity = 0"));
    bad.l2_sensitivity = INFINITY;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);

    fl_dp_event_discrete_gaussian(&ev, 3.0, 1.0, 1.0, 1);
    bad = ev;
    bad.sigma = INFINITY;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.sigma = inf"));
    bad = ev;
    bad.kind = (fl_dp_event_kind)42;
    assert_int_equal(fl_dp_rdp_event(out, orders, 2, &bad, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "event.kind = 42"));

    /* A given l1 sensitivity is used as is: a smaller l1 never gives a larger bound. With
     * d = 64 and l2 = 8 the derived l1 is min(8 * 8, 64) = 64. */
    double derived[2], given[2];
    fl_dp_event_distributed_discrete_gaussian(&ev, 0.6, 10, 64, 8.0, 0.0, 1.0, 1);
    assert_int_equal(fl_dp_rdp_event(derived, orders, 2, &ev, NULL, 0), FL_OK);
    ev.l1_sensitivity = 64.0;
    assert_int_equal(fl_dp_rdp_event(given, orders, 2, &ev, NULL, 0), FL_OK);
    assert_true(given[0] == derived[0] && given[1] == derived[1]);
    ev.l1_sensitivity = 8.0;
    assert_int_equal(fl_dp_rdp_event(given, orders, 2, &ev, NULL, 0), FL_OK);
    assert_true(given[0] <= derived[0] && given[1] <= derived[1]);

    /* Filling helpers ignore a NULL event. */
    fl_dp_event_gaussian(NULL, 1, 1, 1);
    fl_dp_event_discrete_gaussian(NULL, 1, 1, 1, 1);
    fl_dp_event_distributed_discrete_gaussian(NULL, 1, 1, 1, 1, 1, 1, 1);
}

/* The accountant's one-event cache must not confuse events that differ in one field. */
static void test_accountant_cache_distinguishes_events(void **state) {
    (void)state;
    double orders[3] = {2.0, 8.0, 32.0};
    fl_dp_accountant_config cfg;
    fl_dp_accountant_config_init(&cfg);
    cfg.orders = orders;
    cfg.n_orders = 3;
    fl_dp_event base;
    /* d large against l1, so the middle term of the bound (which uses l1) is the minimum. */
    fl_dp_event_distributed_discrete_gaussian(&base, 1.0, 4, 1024, 6.0, 0.0, 1.0, 1);
    fl_dp_event variants[7];
    for (int i = 0; i < 7; i++)
        variants[i] = base;
    variants[1].kind = FL_DP_EVENT_DISCRETE_GAUSSIAN;
    variants[2].q = 0.5;
    variants[3].l2_sensitivity = 7.0;
    variants[4].l1_sensitivity = 10.0;
    variants[5].dim = 2048;
    variants[6].n_clients = 5;
    for (int i = 1; i < 7; i++) {
        /* Composing base then variant i must equal the sum of their separate curves. */
        fl_dp_accountant *acc = NULL;
        assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, NULL, 0), FL_OK);
        assert_int_equal(fl_dp_accountant_compose(acc, &base), FL_OK);
        assert_int_equal(fl_dp_accountant_compose(acc, &variants[i]), FL_OK);
        double a[3], b[3];
        assert_int_equal(fl_dp_rdp_event(a, orders, 3, &base, NULL, 0), FL_OK);
        assert_int_equal(fl_dp_rdp_event(b, orders, 3, &variants[i], NULL, 0), FL_OK);
        const double *rdp;
        fl_dp_accountant_curve(acc, NULL, &rdp, NULL);
        for (int k = 0; k < 3; k++)
            assert_true(fabs(rdp[k] - (a[k] + b[k])) <= 1e-12 * (a[k] + b[k]));
        /* Each variant changes the bound, so a confused cache would be seen. */
        assert_true(a[0] != b[0] || a[1] != b[1] || a[2] != b[2]);
        fl_dp_accountant_destroy(acc);
    }
    /* A discrete Gaussian with a different sigma is a different event, too. */
    fl_dp_event x, y;
    fl_dp_event_discrete_gaussian(&x, 2.0, 1.0, 1.0, 1);
    fl_dp_event_discrete_gaussian(&y, 3.0, 1.0, 1.0, 1);
    fl_dp_accountant *acc = NULL;
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, NULL, 0), FL_OK);
    assert_int_equal(fl_dp_accountant_compose(acc, &x), FL_OK);
    assert_int_equal(fl_dp_accountant_compose(acc, &y), FL_OK);
    const double *rdp;
    fl_dp_accountant_curve(acc, NULL, &rdp, NULL);
    /* alpha / (2 sigma^2) per event at l2 = 1. */
    assert_true(fabs(rdp[0] - (2.0 / 8.0 + 2.0 / 18.0)) < 1e-12);
    fl_dp_accountant_destroy(acc);
}

/* ---- ledger entries and params_json ---- */

static void test_ledger_params_json_errors(void **state) {
    (void)state;
    fl_dp_ledger_entry e;
    char msg[200];
    fl_dp_ledger_entry_init(NULL, FL_DP_MECH_GAUSSIAN);
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_DISCRETE_GAUSSIAN);
    assert_int_equal(fl_dp_ledger_entry_parse_params(NULL, "{}", msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_string_equal(msg, "entry is NULL");
    /* Not an object. */
    assert_int_equal(fl_dp_ledger_entry_parse_params(&e, "[1, 2]", msg, sizeof msg),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(msg, "expected a JSON object"));
    /* Each key must be a number (or null = absent). */
    static const char *const bad_values[] = {
        "{\"sigma\": \"1\"}",
        "{\"l2_sensitivity\": true}",
        "{\"l1_sensitivity\": [1]}",
        "{\"dim\": {}}",
    };
    static const char *const keys[] = {"sigma", "l2_sensitivity", "l1_sensitivity", "dim"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fl_dp_ledger_entry_parse_params(&e, bad_values[i], msg, sizeof msg),
                         FL_ERR_FORMAT);
        char want[64];
        snprintf(want, sizeof want, "\"%s\" must be a finite number", keys[i]);
        assert_non_null(strstr(msg, want));
    }
    /* dim must be a non-negative integer of at most 2^53. */
    static const char *const bad_dims[] = {"{\"dim\": -1}", "{\"dim\": 2.5}",
                                           "{\"dim\": 1e16}"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fl_dp_ledger_entry_parse_params(&e, bad_dims[i], msg, sizeof msg),
                         FL_ERR_FORMAT);
        assert_non_null(strstr(msg, "\"dim\" must be a non-negative integer"));
    }
    /* null members leave the fields as they were; other keys are ignored. */
    e.sigma = 4.0;
    e.dim = 9;
    assert_int_equal(fl_dp_ledger_entry_parse_params(
                         &e, "{\"sigma\": null, \"dim\": null, \"l2_sensitivity\": 3, \"x\": 1}",
                         msg, sizeof msg),
                     FL_OK);
    assert_true(e.sigma == 4.0 && e.dim == 9 && e.l2_sensitivity == 3.0);
    assert_int_equal(fl_dp_ledger_entry_parse_params(&e, "{\"dim\": 9007199254740992}", msg,
                                                     sizeof msg),
                     FL_OK);
    assert_true(e.dim == ((uint64_t)1 << 53));

    /* format_params: bad buffers, a NULL mechanism formats the discrete fields. */
    char buf[128];
    assert_int_equal(fl_dp_ledger_entry_format_params(NULL, 10, &e), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_ledger_entry_format_params(buf, 0, &e), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_ledger_entry_format_params(buf, sizeof buf, NULL), FL_ERR_MISUSE);
    fl_dp_ledger_entry_init(&e, NULL);
    e.sigma = 2.5;
    e.dim = 7;
    assert_int_equal(fl_dp_ledger_entry_format_params(buf, sizeof buf, &e), FL_OK);
    assert_non_null(strstr(buf, "\"sigma\":2.5"));
    assert_non_null(strstr(buf, "\"dim\":7"));
}

/* Allocation failure inside Jansson (the JSON helpers use its allocator) is FL_ERR_NOMEM. */
static long json_budget;
static void *json_limited_malloc(size_t n) {
    if (json_budget-- <= 0)
        return NULL;
    return malloc(n);
}

static void test_format_params_json_oom(void **state) {
    (void)state;
    fl_dp_ledger_entry e;
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN);
    e.sigma = 3.0;
    e.l2_sensitivity = 100.0;
    e.dim = 1024;
    char buf[256], want[256];
    assert_int_equal(fl_dp_ledger_entry_format_params(want, sizeof want, &e), FL_OK);
    json_set_alloc_funcs(json_limited_malloc, free);
    int saw_nomem = 0, saw_ok = 0;
    for (long budget = 0; budget < 200 && !saw_ok; budget++) {
        json_budget = budget;
        fl_status st = fl_dp_ledger_entry_format_params(buf, sizeof buf, &e);
        if (st == FL_OK) {
            assert_string_equal(buf, want);
            saw_ok = 1;
        } else {
            assert_int_equal(st, FL_ERR_NOMEM);
            saw_nomem = 1;
        }
    }
    json_set_alloc_funcs(malloc, free);
    assert_true(saw_nomem && saw_ok);
}

static void test_ledger_entry_to_event(void **state) {
    (void)state;
    fl_dp_ledger_entry e;
    fl_dp_event ev;
    char msg[200];
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_GAUSSIAN);
    e.noise_multiplier = 1.0;
    assert_int_equal(fl_dp_ledger_entry_to_event(NULL, &e, msg, sizeof msg), FL_ERR_MISUSE);
    assert_string_equal(msg, "ev is NULL");
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, NULL, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "NULL or struct_size"));
    fl_dp_ledger_entry small = e;
    small.struct_size = 4;
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &small, msg, sizeof msg), FL_ERR_MISUSE);
    small = e;
    small.mechanism = NULL;
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &small, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "mechanism is NULL"));
    /* The short aliases map to the same events as the full names. */
    fl_dp_event full;
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_DISCRETE_GAUSSIAN);
    e.sigma = 5.0;
    e.l2_sensitivity = 2.0;
    e.q = 0.25;
    e.steps = 3;
    assert_int_equal(fl_dp_ledger_entry_to_event(&full, &e, NULL, 0), FL_OK);
    e.mechanism = "dgauss";
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &e, NULL, 0), FL_OK);
    assert_memory_equal(&ev, &full, sizeof ev);
    assert_int_equal(ev.kind, FL_DP_EVENT_DISCRETE_GAUSSIAN);
    assert_true(ev.count == 3 && ev.q == 0.25);
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN);
    e.sigma = 2.0;
    e.l2_sensitivity = 10.0;
    e.participants = 20;
    e.dim = 128;
    assert_int_equal(fl_dp_ledger_entry_to_event(&full, &e, NULL, 0), FL_OK);
    e.mechanism = "ddgauss";
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &e, NULL, 0), FL_OK);
    assert_memory_equal(&ev, &full, sizeof ev);
    assert_true(ev.kind == FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN && ev.n_clients == 20 &&
                ev.dim == 128);
    /* A valid name with an invalid field is refused by the event check. */
    e.participants = 0;
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &e, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "n_clients"));
}

/* ---- budget checks ---- */

static void test_budget_arguments(void **state) {
    (void)state;
    char msg[300];
    fl_dp_ledger_entry round;
    fl_dp_ledger_entry_init(&round, FL_DP_MECH_GAUSSIAN);
    round.q = 0.01;
    round.noise_multiplier = 1.0;
    fl_dp_budget ok = {8.0, 1e-5};
    fl_dp_budget bads[] = {{INFINITY, 1e-5}, {-1.0, 1e-5}, {8.0, 1.0}, {8.0, 0.0}};
    const char *want[] = {"budget.epsilon = inf", "budget.epsilon = -1", "budget.delta = 1",
                          "budget.delta = 0"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(
            fl_dp_budget_check(NULL, &bads[i], NULL, 0, &round, NULL, NULL, msg, sizeof msg),
            FL_ERR_MISUSE);
        assert_non_null(strstr(msg, want[i]));
    }
    assert_int_equal(fl_dp_budget_check(NULL, NULL, NULL, 0, &round, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_string_equal(msg, "budget is NULL");
    assert_int_equal(fl_dp_budget_check(NULL, &ok, NULL, 3, &round, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "ledger is NULL with n_ledger = 3"));
    /* A bad accountant config, and a ledger entry that is not valid, each named. */
    fl_dp_accountant_config cfg;
    fl_dp_accountant_config_init(&cfg);
    cfg.struct_size = 1;
    assert_int_equal(fl_dp_budget_check(NULL, &ok, NULL, 0, &round, &cfg, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "cfg.struct_size"));
    fl_dp_ledger_entry ledger[2] = {round, round};
    ledger[1].mechanism = "laplace";
    assert_int_equal(fl_dp_budget_check(NULL, &ok, ledger, 2, &round, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "ledger[1]: ledger entry: unknown mechanism \"laplace\""));
    /* The proposed round is checked too, with its own prefix. */
    fl_dp_ledger_entry prop = round;
    prop.q = 2.0;
    assert_int_equal(fl_dp_budget_check(NULL, &ok, ledger, 1, &prop, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "proposed round: event.q = 2"));

    /* The handle variant: a bad budget is reported on the handle, nothing is composed. */
    fl_dp_accountant *acc = NULL;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    fl_dp_budget_report rep;
    memset(&rep, 0x55, sizeof rep);
    fl_dp_budget_report untouched = rep;
    assert_int_equal(fl_dp_accountant_budget_check(acc, &rep, &bads[2], &round), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "budget.delta = 1"));
    assert_memory_equal(&rep, &untouched, sizeof rep);
    /* A fitting round without a report. */
    assert_int_equal(fl_dp_accountant_budget_check(acc, NULL, &ok, &round), FL_OK);
    fl_dp_accountant_destroy(acc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accountant_null_and_delta_edges),
        cmocka_unit_test(test_accountant_zero_probability),
        cmocka_unit_test(test_noise_multiplier_arguments),
        cmocka_unit_test(test_rdp_and_conversion_arguments),
        cmocka_unit_test(test_conversion_odd_curves),
        cmocka_unit_test(test_discrete_event_fields),
        cmocka_unit_test(test_accountant_cache_distinguishes_events),
        cmocka_unit_test(test_ledger_params_json_errors),
        cmocka_unit_test(test_format_params_json_oom),
        cmocka_unit_test(test_ledger_entry_to_event),
        cmocka_unit_test(test_budget_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
