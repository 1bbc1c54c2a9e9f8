#include <string.h>

#include "fl_test.h"
#include "fl_internal.h"

static void test_every_status_has_string(void **state) {
    (void)state;
    for (int c = 0; c < FL_STATUS_COUNT; c++) {
        assert_non_null(fl_status_str((fl_status)c));
        assert_string_not_equal(fl_status_str((fl_status)c), "unknown status");
        assert_string_not_equal(fl_status_name((fl_status)c), "FL_ERR_UNKNOWN");
    }
    assert_string_equal(fl_status_str((fl_status)9999), "unknown status");
    assert_string_equal(fl_status_name(FL_ERR_FORMAT), "FL_ERR_FORMAT");
}

static void test_version(void **state) {
    (void)state;
    assert_int_equal(fl_version_number(), FL_VERSION_NUMBER);
    assert_string_equal(fl_version_string(), FL_VERSION_STRING);
    assert_true(FL_VERSION_AT_LEAST(0, 0, 1));
    assert_false(FL_VERSION_AT_LEAST(99, 0, 0));
    assert_int_equal(fl_build_has("no-such-feature"), 0);
    assert_int_equal(fl_build_has(NULL), 0);
}

static void test_memzero_and_ct(void **state) {
    (void)state;
    unsigned char a[32], b[32];
    memset(a, 0xAB, sizeof(a));
    fl_memzero(a, sizeof(a));
    for (size_t i = 0; i < sizeof(a); i++)
        assert_int_equal(a[i], 0);
    memset(b, 0, sizeof(b));
    assert_int_equal(fl_memeq_ct(a, b, 32), 0);
    b[31] = 1;
    assert_int_equal(fl_memeq_ct(a, b, 32), -1);
    b[31] = 0x80;
    assert_int_equal(fl_memeq_ct(a, b, 32), -1);
    fl_memzero(NULL, 5);
}

static void test_alloc_funnel(void **state) {
    (void)state;
    struct fl_test_counting c = {0};
    fl_allocator a = fl_test_counting_allocator(&c);
    void *p = fl__alloc_array(&a, 10, 8);
    assert_non_null(p);
    assert_int_equal(c.live, 1);
    assert_null(fl__alloc_array(&a, SIZE_MAX / 2, 4));
    p = fl__realloc(&a, p, 80, 160);
    assert_non_null(p);
    fl__free(&a, p, 160);
    assert_int_equal(c.live, 0);
    c.fail_at = c.calls + 1;
    assert_null(fl__alloc(&a, 4));
    fl_allocator bad = {0};
    fl_allocator out;
    assert_int_equal(fl__allocator_copy(&out, &bad), FL_ERR_MISUSE);
    assert_int_equal(fl__allocator_copy(&out, NULL), FL_OK);
}

static void test_err(void **state) {
    (void)state;
    struct fl__err e;
    fl__err_clear(&e);
    assert_string_equal(fl__err_msg(&e), "success");
    assert_int_equal(fl__err_set(&e, FL_ERR_FORMAT, "bad %s", "thing"), FL_ERR_FORMAT);
    assert_string_equal(fl__err_msg(&e), "bad thing");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_status_has_string),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_memzero_and_ct),
        cmocka_unit_test(test_alloc_funnel),
        cmocka_unit_test(test_err),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
