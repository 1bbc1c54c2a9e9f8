/* Full secagg rounds in memory: the unmasked sum equals the plain sum of the inputs. */
#include "test_sa_harness.h"

static void run_ok(uint32_t n, uint32_t d, uint32_t k, uint32_t t, uint32_t bits, int active,
                   uint64_t seed) {
    struct sa_opts o;
    struct sa_result r;
    sa_opts_init(&o, n, d, k, t);
    o.cfg.bits = bits;
    o.cfg.active = active;
    o.seed = seed;
    sa_run(&o, &r);
    if (r.st != FL_OK)
        fail_msg("n=%u k=%u t=%u: %s (%s)", n, k, t, fl_status_name(r.st), r.errmsg);
    assert_int_equal(r.client_failures, 0);
    assert_int_equal(r.count, n);
    assert_int_equal(r.expect_count, n);
    assert_true(r.sum_ok);
}

static void test_n3_full(void **state) {
    (void)state;
    run_ok(3, 17, 2, 2, 32, 0, 1);
    run_ok(3, 1, 0, 0, 32, 0, 2); /* derived: complete graph */
}

static void test_n10_full_and_sparse(void **state) {
    (void)state;
    run_ok(10, 100, 9, 5, 32, 0, 3);
    run_ok(10, 100, 4, 3, 32, 0, 4);
    run_ok(10, 100, 0, 0, 32, 0, 5); /* derived k = 2, t = 2 */
}

static void test_n100_sparse(void **state) {
    (void)state;
    run_ok(100, 64, 0, 0, 32, 0, 6); /* derived k = 12, t = 6 */
    run_ok(100, 64, 20, 11, 32, 0, 7);
}

static void test_n100_full(void **state) {
    (void)state;
    run_ok(100, 16, 99, 51, 32, 0, 8);
}

static void test_bit_widths(void **state) {
    (void)state;
    static const uint32_t widths[] = {1, 7, 8, 13, 16, 20, 24, 31};
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++)
        run_ok(5, 33, 4, 3, 32 == widths[i] ? 32 : widths[i], 0, 10 + i);
}

static void test_active_mode(void **state) {
    (void)state;
    run_ok(3, 10, 2, 2, 32, 1, 20);
    run_ok(10, 40, 0, 0, 32, 1, 21);
    run_ok(10, 40, 9, 6, 24, 1, 22);
}

static void test_large_dim_crosses_chunks(void **state) {
    (void)state;
    run_ok(4, 16384 * 2 + 5, 3, 2, 32, 0, 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_n3_full),
        cmocka_unit_test(test_n10_full_and_sparse),
        cmocka_unit_test(test_n100_sparse),
        cmocka_unit_test(test_n100_full),
        cmocka_unit_test(test_bit_widths),
        cmocka_unit_test(test_active_mode),
        cmocka_unit_test(test_large_dim_crosses_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
