/* Dropouts at every phase: up to n - t clients the round still yields the exact sum of the
 * clients whose masked input arrived; one more and the server aborts cleanly. */
#include "test_sa_harness.h"

static void run_drops(uint32_t n, uint32_t k, uint32_t t, int active, int phase, uint32_t drops,
                      int expect_ok, uint64_t seed) {
    struct sa_opts o;
    struct sa_result r;
    uint8_t *drop = calloc(n, 1);
    assert_non_null(drop);
    /* Drop a spread of clients (every other one first). */
    for (uint32_t i = 0, c = 0; c < drops; i = (i + 2) % n) {
        if (!drop[i]) {
            drop[i] = (uint8_t)phase;
            c++;
        } else {
            i++;
        }
    }
    sa_opts_init(&o, n, 24, k, t);
    o.cfg.active = active;
    o.drop = drop;
    o.seed = seed;
    sa_run(&o, &r);
    if (expect_ok) {
        if (r.st != FL_OK)
            fail_msg("phase %d drops %u: %s (%s)", phase, drops, fl_status_name(r.st), r.errmsg);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, r.expect_count);
        uint32_t want = phase <= SA_DROP_MASKED ? n - drops : n;
        assert_int_equal(r.count, want);
    } else {
        assert_int_equal(r.st, FL_ERR_ABORTED);
        assert_non_null(strstr(r.errmsg, "too few survivors"));
    }
    free(drop);
}

static void test_full_graph_each_phase(void **state) {
    (void)state;
    const uint32_t n = 10, k = 9, t = 5;
    int phases[] = {SA_DROP_ADVERTISE, SA_DROP_SHARES, SA_DROP_MASKED, SA_DROP_UNMASK};
    for (size_t p = 0; p < 4; p++) {
        run_drops(n, k, t, 0, phases[p], 1, 1, 100 + p);
        run_drops(n, k, t, 0, phases[p], n - t, 1, 110 + p);
        run_drops(n, k, t, 0, phases[p], n - t + 1, 0, 120 + p);
    }
}

static void test_active_each_phase(void **state) {
    (void)state;
    const uint32_t n = 10, k = 9, t = 5;
    int phases[] = {SA_DROP_ADVERTISE, SA_DROP_SHARES, SA_DROP_MASKED, SA_DROP_CONSISTENCY,
                    SA_DROP_UNMASK};
    for (size_t p = 0; p < 5; p++) {
        run_drops(n, k, t, 1, phases[p], n - t, 1, 200 + p);
        run_drops(n, k, t, 1, phases[p], n - t + 1, 0, 210 + p);
    }
}

static void test_n100_full_graph(void **state) {
    (void)state;
    run_drops(100, 99, 51, 0, SA_DROP_MASKED, 49, 1, 300);
    run_drops(100, 99, 51, 0, SA_DROP_MASKED, 50, 0, 301);
    run_drops(100, 99, 51, 0, SA_DROP_UNMASK, 49, 1, 302);
}

/* Mixed dropouts on the sparse graph: random clients leave at random phases. */
static void test_sparse_mixed(void **state) {
    (void)state;
    uint64_t rs = 42;
    for (int trial = 0; trial < 4; trial++) {
        const uint32_t n = 100;
        uint8_t drop[100] = {0};
        for (uint32_t c = 0; c < 10; c++)
            drop[sa_rng_next(&rs) % n] = (uint8_t)(1 + sa_rng_next(&rs) % 5);
        for (uint32_t i = 0; i < n; i++)
            if (drop[i] == SA_DROP_CONSISTENCY)
                drop[i] = SA_DROP_UNMASK;
        struct sa_opts o;
        struct sa_result r;
        sa_opts_init(&o, n, 40, 0, 0); /* derived k = 12, t = 6 */
        o.drop = drop;
        o.seed = 400 + (uint64_t)trial;
        sa_run(&o, &r);
        if (r.st != FL_OK)
            fail_msg("trial %d: %s (%s)", trial, fl_status_name(r.st), r.errmsg);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, r.expect_count);
    }
}

/* A sparse graph where one client's neighbourhood is wiped out: the server drops it from
 * the round (pruning) instead of failing, and the sum covers the others. */
static void test_sparse_pruning(void **state) {
    (void)state;
    const uint32_t n = 20, k = 4, t = 3;
    /* Drop every client at advertise except a block; some clients end with < t - 1
     * neighbours and must be pruned. */
    uint8_t drop[20] = {0};
    for (uint32_t i = 0; i < n; i += 3)
        drop[i] = SA_DROP_ADVERTISE;
    struct sa_opts o;
    struct sa_result r;
    sa_opts_init(&o, n, 8, k, t);
    o.drop = drop;
    o.seed = 500;
    sa_run(&o, &r);
    if (r.st == FL_OK) {
        assert_true(r.sum_ok);
        assert_int_equal(r.count, r.expect_count);
    } else {
        assert_int_equal(r.st, FL_ERR_ABORTED);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_graph_each_phase),
        cmocka_unit_test(test_active_each_phase),
        cmocka_unit_test(test_n100_full_graph),
        cmocka_unit_test(test_sparse_mixed),
        cmocka_unit_test(test_sparse_pruning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
