/* Unit tests for dtype helpers, tensor size arithmetic, and size macro/getter pairs. */
#include <string.h>

#include "fl_test.h"
#include "flotilla/tensor.h"

static void test_dtype_table(void **state) {
    (void)state;
    static const struct {
        fl_dtype dt;
        const char *name;
        size_t size;
    } want[] = {
        {FL_DTYPE_BOOL, "BOOL", 1},       {FL_DTYPE_U8, "U8", 1},
        {FL_DTYPE_I8, "I8", 1},           {FL_DTYPE_U16, "U16", 2},
        {FL_DTYPE_I16, "I16", 2},         {FL_DTYPE_F16, "F16", 2},
        {FL_DTYPE_BF16, "BF16", 2},       {FL_DTYPE_U32, "U32", 4},
        {FL_DTYPE_I32, "I32", 4},         {FL_DTYPE_F32, "F32", 4},
        {FL_DTYPE_U64, "U64", 8},         {FL_DTYPE_I64, "I64", 8},
        {FL_DTYPE_F64, "F64", 8},         {FL_DTYPE_C64, "C64", 8},
        {FL_DTYPE_F8_E4M3, "F8_E4M3", 1}, {FL_DTYPE_F8_E5M2, "F8_E5M2", 1},
        {FL_DTYPE_F8_E4M3FNUZ, "F8_E4M3FNUZ", 1},
        {FL_DTYPE_F8_E5M2FNUZ, "F8_E5M2FNUZ", 1},
        {FL_DTYPE_F8_E8M0, "F8_E8M0", 1},
    };
    assert_int_equal(sizeof(want) / sizeof(want[0]), FL_DTYPE_COUNT - 1);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_string_equal(fl_dtype_name(want[i].dt), want[i].name);
        assert_int_equal(fl_dtype_size(want[i].dt), want[i].size);
        assert_int_equal(fl_dtype_from_name(want[i].name), want[i].dt);
    }
    /* Every value below FL_DTYPE_COUNT except INVALID is named and sized. */
    for (int d = 1; d < FL_DTYPE_COUNT; d++) {
        assert_non_null(fl_dtype_name((fl_dtype)d));
        assert_true(fl_dtype_size((fl_dtype)d) > 0);
    }
    assert_null(fl_dtype_name(FL_DTYPE_INVALID));
    assert_int_equal(fl_dtype_size(FL_DTYPE_INVALID), 0);
    assert_null(fl_dtype_name((fl_dtype)FL_DTYPE_COUNT));
    assert_int_equal(fl_dtype_size((fl_dtype)-1), 0);
    assert_int_equal(fl_dtype_from_name("f32"), FL_DTYPE_INVALID);
    assert_int_equal(fl_dtype_from_name("F4"), FL_DTYPE_INVALID);
    assert_int_equal(fl_dtype_from_name(""), FL_DTYPE_INVALID);
    assert_int_equal(fl_dtype_from_name(NULL), FL_DTYPE_INVALID);
}

static void test_nbytes(void **state) {
    (void)state;
    size_t n = 99;
    const uint64_t s23[] = {2, 3};
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_F32, 2, s23), FL_OK);
    assert_int_equal(n, 24);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_BF16, 0, NULL), FL_OK); /* scalar */
    assert_int_equal(n, 2);
    const uint64_t zero[] = {UINT64_MAX / 2, 0, UINT64_MAX / 2};
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_F64, 3, zero), FL_OK);
    assert_int_equal(n, 0);
    const uint64_t big[] = {(uint64_t)1 << 40, (uint64_t)1 << 40};
    n = 7;
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_U8, 2, big), FL_ERR_RANGE);
    assert_int_equal(n, 7);
    const uint64_t edge[] = {SIZE_MAX / 8 + 1};
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_I64, 1, edge), FL_ERR_RANGE);
    const uint64_t fits[] = {SIZE_MAX / 8};
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_I64, 1, fits), FL_OK);
    assert_int_equal(n, (SIZE_MAX / 8) * 8);
    assert_int_equal(fl_tensor_nbytes(NULL, FL_DTYPE_F32, 2, s23), FL_ERR_MISUSE);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_INVALID, 2, s23), FL_ERR_MISUSE);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_F32, 1, NULL), FL_ERR_MISUSE);
    uint64_t many[FL_TENSOR_MAX_NDIM + 1];
    for (size_t i = 0; i <= FL_TENSOR_MAX_NDIM; i++)
        many[i] = 1;
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_U8, FL_TENSOR_MAX_NDIM, many), FL_OK);
    assert_int_equal(n, 1);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_U8, FL_TENSOR_MAX_NDIM + 1, many),
                     FL_ERR_MISUSE);
}

/* Style rule 3: every size macro equals its run-time getter. */
static void test_size_macros_match_getters(void **state) {
    (void)state;
    assert_int_equal(fl_tensor_max_ndim(), FL_TENSOR_MAX_NDIM);
    assert_int_equal(fl_safetensors_max_header_bytes(), FL_SAFETENSORS_MAX_HEADER_BYTES);
    assert_int_equal(FL_SAFETENSORS_MAX_HEADER_BYTES, 100000000u);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_nbytes),
        cmocka_unit_test(test_size_macros_match_getters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
