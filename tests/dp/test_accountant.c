/* The composing accountant handle: incremental composition, what-if queries, delta queries,
 * configuration checks, noise calibration and allocation-failure walks. */
#include "fl_test.h"

#include <math.h>
#include <string.h>

#include "flotilla/dp.h"

static double rel_err(double got, double want) {
    return fabs(got - want) / fmax(fabs(want), 1e-300);
}

static void test_create_defaults(void **state) {
    (void)state;
    fl_dp_accountant *acc = NULL;
    const double *orders, *rdp;
    size_t n;
    double eps, order, delta;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    fl_dp_accountant_curve(acc, &orders, &rdp, &n);
    assert_int_equal(n, FL_DP_DEFAULT_ORDERS_COUNT);
    assert_true(orders[0] == 1.1 && orders[n - 1] == 1024 && rdp[0] == 0.0);
    /* Nothing composed: epsilon 0 and delta 0. */
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, &order, 1e-5), FL_OK);
    assert_true(eps == 0.0);
    assert_int_equal(fl_dp_accountant_delta(acc, &delta, &order, 1.0), FL_OK);
    assert_true(delta == 0.0);
    fl_dp_accountant_destroy(acc);
    fl_dp_accountant_destroy(NULL);
}

/* 10^4 rounds composed one at a time equal one event with count 10^4. */
static void test_incremental_equals_batch(void **state) {
    (void)state;
    fl_dp_accountant *a, *b;
    fl_dp_event ev;
    double ea, eb, oa, ob;
    assert_int_equal(fl_dp_accountant_create(&a, NULL, NULL, NULL, 0), FL_OK);
    assert_int_equal(fl_dp_accountant_create(&b, NULL, NULL, NULL, 0), FL_OK);
    fl_dp_event_gaussian(&ev, 0.01, 1.1, 1);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(fl_dp_accountant_compose(a, &ev), FL_OK);
    fl_dp_event_gaussian(&ev, 0.01, 1.1, 10000);
    assert_int_equal(fl_dp_accountant_compose(b, &ev), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(a, &ea, &oa, 1e-5), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(b, &eb, &ob, 1e-5), FL_OK);
    assert_true(rel_err(ea, eb) < 1e-9 && oa == ob);
    assert_true(rel_err(ea, 5.63201067) < 0.01); /* dp_vectors.csv */
    fl_dp_accountant_destroy(a);
    fl_dp_accountant_destroy(b);
}

/* Mixed events: alternating mechanisms must not reuse a stale cached curve. */
static void test_mixed_events(void **state) {
    (void)state;
    fl_dp_accountant *a, *b;
    fl_dp_event g1, g2, dg;
    double ea, eb;
    fl_dp_event_gaussian(&g1, 0.01, 1.0, 1);
    fl_dp_event_gaussian(&g2, 0.02, 1.0, 1);
    fl_dp_event_distributed_discrete_gaussian(&dg, 3.0, 100, 1000, 50.0, 0, 0.01, 1);
    assert_int_equal(fl_dp_accountant_create(&a, NULL, NULL, NULL, 0), FL_OK);
    assert_int_equal(fl_dp_accountant_create(&b, NULL, NULL, NULL, 0), FL_OK);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(fl_dp_accountant_compose(a, &g1), FL_OK);
        assert_int_equal(fl_dp_accountant_compose(a, &g2), FL_OK);
        assert_int_equal(fl_dp_accountant_compose(a, &dg), FL_OK);
    }
    g1.count = g2.count = dg.count = 50;
    assert_int_equal(fl_dp_accountant_compose(b, &dg), FL_OK);
    assert_int_equal(fl_dp_accountant_compose(b, &g2), FL_OK);
    assert_int_equal(fl_dp_accountant_compose(b, &g1), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(a, &ea, NULL, 1e-6), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(b, &eb, NULL, 1e-6), FL_OK);
    assert_true(rel_err(ea, eb) < 1e-9 && ea > 0.0);
    fl_dp_accountant_destroy(a);
    fl_dp_accountant_destroy(b);
}

static void test_epsilon_if_and_reset(void **state) {
    (void)state;
    fl_dp_accountant *acc;
    fl_dp_event ev;
    double before, after, again, direct, o1, o2;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    fl_dp_event_gaussian(&ev, 0.1, 2.0, 99);
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(acc, &before, NULL, 1e-6), FL_OK);
    ev.count = 1;
    assert_int_equal(fl_dp_accountant_epsilon_if(acc, &after, &o1, &ev, 1e-6), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(acc, &again, NULL, 1e-6), FL_OK);
    assert_true(again == before && after > before); /* not composed */
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon(acc, &direct, &o2, 1e-6), FL_OK);
    assert_true(direct == after && o1 == o2);
    assert_true(rel_err(direct, 2.914173762) < 0.01); /* dp_vectors.csv: 100 steps */
    /* delta at that epsilon is back to 1e-6. */
    double d;
    assert_int_equal(fl_dp_accountant_delta(acc, &d, NULL, direct), FL_OK);
    assert_true(rel_err(d, 1e-6) < 1e-8);
    /* count 0 is a no-op. */
    ev.count = 0;
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    assert_int_equal(fl_dp_accountant_epsilon_if(acc, &again, NULL, &ev, 1e-6), FL_OK);
    assert_true(again == direct);
    fl_dp_accountant_reset(acc);
    assert_int_equal(fl_dp_accountant_epsilon(acc, &again, NULL, 1e-6), FL_OK);
    assert_true(again == 0.0);
    fl_dp_accountant_destroy(acc);
}

static void test_config(void **state) {
    (void)state;
    fl_dp_accountant_config cfg;
    fl_dp_accountant *acc = (fl_dp_accountant *)&cfg; /* must be reset to NULL on failure */
    char msg[256];
    const double bad[] = {2.0, 0.5};
    const double mine[] = {2, 4, 8, 16, 32, 64};
    fl_dp_accountant_config_init(&cfg);
    cfg.orders = bad;
    cfg.n_orders = 2;
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, msg, sizeof msg), FL_ERR_MISUSE);
    assert_null(acc);
    assert_non_null(strstr(msg, "orders[1]"));
    cfg.orders = mine;
    cfg.n_orders = 0;
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, msg, sizeof msg), FL_ERR_MISUSE);
    cfg.n_orders = 6;
    cfg.conversion = (fl_dp_conversion)3;
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "cfg.conversion"));
    cfg.conversion = FL_DP_CONVERSION_CLASSIC;
    cfg.struct_size = 4;
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, msg, sizeof msg), FL_ERR_MISUSE);
    cfg.struct_size = sizeof(cfg);
    fl_allocator broken = {sizeof(fl_allocator), NULL, NULL, NULL, NULL};
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, &broken, msg, sizeof msg), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_create(NULL, &cfg, NULL, msg, sizeof msg), FL_ERR_MISUSE);

    /* Custom orders and the classic conversion are used as given. */
    assert_int_equal(fl_dp_accountant_create(&acc, &cfg, NULL, msg, sizeof msg), FL_OK);
    const double *o;
    size_t n;
    fl_dp_accountant_curve(acc, &o, NULL, &n);
    assert_int_equal(n, 6);
    assert_true(o[5] == 64);
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, 1.0, 2.0, 1); /* rdp = a/8 */
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    double eps, order, want = INFINITY, want_order = 0;
    for (size_t i = 0; i < 6; i++) {
        double e = mine[i] / 8.0 + log(1e5) / (mine[i] - 1.0);
        if (e < want) {
            want = e;
            want_order = mine[i];
        }
    }
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, &order, 1e-5), FL_OK);
    assert_true(rel_err(eps, want) < 1e-14 && order == want_order);

    /* Bad queries and events set the handle's message and change nothing. */
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, 0.0), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "delta"));
    assert_int_equal(fl_dp_accountant_delta(acc, &eps, NULL, -1.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_epsilon(acc, NULL, NULL, 1e-5), FL_ERR_MISUSE);
    fl_dp_event_gaussian(&ev, 2.0, 1.0, 1);
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_accountant_errmsg(acc), "event.q"));
    assert_int_equal(fl_dp_accountant_epsilon_if(acc, &eps, NULL, &ev, 1e-5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, 1e-5), FL_OK);
    assert_true(rel_err(eps, want) < 1e-14);
    assert_int_equal(fl_dp_accountant_compose(NULL, &ev), FL_ERR_MISUSE);
    assert_non_null(fl_dp_accountant_errmsg(NULL));
    fl_dp_accountant_destroy(acc);
}

/* The calibrated noise meets the target; a noise multiplier below it by more than the
 * tolerance does not. */
static void test_noise_calibration(void **state) {
    (void)state;
    const double cases[][4] = {
        /* q, steps, epsilon, delta */
        {0.01, 10000, 5.63201067, 1e-5},
        {0.004266666666666667, 14040, 2.516462445, 1e-5},
        {1.0, 1, 1.0, 1e-5},
        {1e-3, 1000000, 3.0, 1e-6},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double z, eps, below;
        char msg[256];
        uint64_t steps = (uint64_t)cases[i][1];
        assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, &eps, cases[i][0], steps,
                                                            cases[i][2], cases[i][3], 1e-6, NULL,
                                                            NULL, msg, sizeof msg),
                         FL_OK);
        assert_true(eps <= cases[i][2]);
        fl_dp_accountant *acc;
        fl_dp_event ev;
        assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
        fl_dp_event_gaussian(&ev, cases[i][0], z * (1 - 2e-6), steps);
        assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
        assert_int_equal(fl_dp_accountant_epsilon(acc, &below, NULL, cases[i][3]), FL_OK);
        assert_true(below > cases[i][2]);
        fl_dp_accountant_destroy(acc);
    }
    /* The dp_vectors.csv settings come back near their sigma. */
    double z;
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.01, 10000, 5.63201067, 1e-5, 0,
                                                        NULL, NULL, NULL, 0),
                     FL_OK);
    assert_true(rel_err(z, 1.1) < 1e-3);
    char msg[256];
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 1.0, 1000000, 1e-3, 1e-9, 0, NULL,
                                                        NULL, msg, sizeof msg),
                     FL_ERR_RANGE);
    assert_non_null(strstr(msg, "target"));
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.0, 10, 1, 1e-5, 0, NULL, NULL,
                                                        msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 0, 1, 1e-5, 0, NULL, NULL,
                                                        msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 10, 1, 1.0, 0, NULL, NULL,
                                                        msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.1, 10, 1, 1e-5, 0.7, NULL, NULL,
                                                        msg, sizeof msg),
                     FL_ERR_MISUSE);
}

/* Every allocation failure is reported as FL_ERR_NOMEM and leaks nothing. */
static void test_oom_walk(void **state) {
    (void)state;
    int saw_ok = 0;
    for (long k = 1; k < 10 && !saw_ok; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_dp_accountant *acc = NULL;
        fl_status rc = fl_dp_accountant_create(&acc, NULL, &a, NULL, 0);
        if (rc == FL_OK) {
            saw_ok = 1;
            fl_dp_accountant_destroy(acc);
        } else {
            assert_int_equal(rc, FL_ERR_NOMEM);
            assert_null(acc);
        }
        assert_int_equal(c.live, 0);
    }
    assert_true(saw_ok);
    saw_ok = 0;
    for (long k = 1; k < 10 && !saw_ok; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        double z;
        fl_status rc = fl_dp_noise_multiplier_for_epsilon(&z, NULL, 0.5, 10, 2.0, 1e-5, 1e-3, NULL,
                                                          &a, NULL, 0);
        if (rc == FL_OK)
            saw_ok = 1;
        else
            assert_int_equal(rc, FL_ERR_NOMEM);
        assert_int_equal(c.live, 0);
    }
    assert_true(saw_ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_defaults), cmocka_unit_test(test_incremental_equals_batch),
        cmocka_unit_test(test_mixed_events),    cmocka_unit_test(test_epsilon_if_and_reset),
        cmocka_unit_test(test_config),          cmocka_unit_test(test_noise_calibration),
        cmocka_unit_test(test_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
