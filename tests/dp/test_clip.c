/* L2 clipping: flat and per-layer, zero vector, NaN/Inf rejected with the input untouched. */

#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static double norm(const float *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return sqrt(s);
}

static void test_flat(void **state) {
    (void)state;
    float v[4] = {3, 4, 0, 0};
    double pre = 0;
    assert_int_equal(fl_dp_clip_l2(v, 4, 1.0, &pre), FL_OK);
    assert_true(fabs(pre - 5.0) < 1e-12);
    assert_true(norm(v, 4) <= 1.0);
    assert_true(norm(v, 4) > 1.0 - 1e-6);
    assert_true(fabs(v[0] / v[1] - 0.75) < 1e-6); /* direction kept */
    /* Under the bound: unchanged. */
    float u[3] = {0.1f, -0.2f, 0.3f}, u0[3];
    memcpy(u0, u, sizeof(u));
    assert_int_equal(fl_dp_clip_l2(u, 3, 10.0, NULL), FL_OK);
    assert_memory_equal(u, u0, sizeof(u));
    /* Many random-ish vectors: never above the clip after float rounding. */
    float big[1000];
    for (int t = 0; t < 50; t++) {
        for (int i = 0; i < 1000; i++)
            big[i] = (float)sin(i * 0.37 + t) * (float)(t + 1) * 1000.0f;
        assert_int_equal(fl_dp_clip_l2(big, 1000, 0.731, NULL), FL_OK);
        assert_true(norm(big, 1000) <= 0.731);
    }
    double n2;
    assert_int_equal(fl_dp_l2_norm(&n2, v, 4), FL_OK);
    assert_true(n2 <= 1.0);
}

static void test_zero_and_empty(void **state) {
    (void)state;
    float z[5] = {0};
    double pre = -1;
    assert_int_equal(fl_dp_clip_l2(z, 5, 1.0, &pre), FL_OK);
    assert_true(pre == 0.0);
    for (int i = 0; i < 5; i++)
        assert_true(z[i] == 0.0f && !signbit(z[i]));
    assert_int_equal(fl_dp_clip_l2(NULL, 0, 1.0, &pre), FL_OK);
    assert_true(pre == 0.0);
}

static void test_nonfinite(void **state) {
    (void)state;
    float bad[4][3] = {{1, NAN, 2}, {INFINITY, 1, 1}, {1, 1, -INFINITY}, {1e30f, 1e30f, NAN}};
    for (int k = 0; k < 4; k++) {
        float v[3], v0[3];
        memcpy(v, bad[k], sizeof(v));
        memcpy(v0, bad[k], sizeof(v));
        double pre = 42;
        assert_int_equal(fl_dp_clip_l2(v, 3, 1.0, &pre), FL_ERR_RANGE);
        assert_memory_equal(v, v0, sizeof(v));
        assert_true(pre == 42);
        assert_int_equal(fl_dp_l2_norm(&pre, v, 3), FL_ERR_RANGE);
    }
    /* Large but finite floats are fine (no overflow in double). */
    float huge[2] = {3e38f, 3e38f};
    assert_int_equal(fl_dp_clip_l2(huge, 2, 1.0, NULL), FL_OK);
    assert_true(norm(huge, 2) <= 1.0);
}

static void test_misuse(void **state) {
    (void)state;
    float v[2] = {1, 1};
    assert_int_equal(fl_dp_clip_l2(v, 2, 0.0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2(v, 2, -1.0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2(v, 2, NAN, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2(v, 2, INFINITY, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2(NULL, 2, 1.0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_l2_norm(NULL, v, 2), FL_ERR_MISUSE);
}

static void test_layers(void **state) {
    (void)state;
    /* Layer 0: (3,4) -> clip 1; layer 1: (0.1) under clip 2; layer 2: zeros. */
    float v[6] = {3, 4, 0.1f, 0, 0, 0};
    size_t sizes[3] = {2, 1, 3};
    double clips[3] = {1.0, 2.0, 0.5}, norms[3];
    assert_int_equal(fl_dp_clip_l2_layers(v, 6, sizes, clips, 3, norms), FL_OK);
    assert_true(fabs(norms[0] - 5) < 1e-12 && fabs(norms[1] - 0.1) < 1e-7 && norms[2] == 0);
    assert_true(norm(v, 2) <= 1.0 && norm(v, 2) > 0.999);
    assert_true(v[2] == 0.1f);
    assert_true(fabs(fl_dp_clip_layers_total(clips, 3) - sqrt(1 + 4 + 0.25)) < 1e-12);
    assert_true(norm(v, 6) <= fl_dp_clip_layers_total(clips, 3));
    /* Sizes must sum to n. */
    assert_int_equal(fl_dp_clip_l2_layers(v, 5, sizes, clips, 3, NULL), FL_ERR_MISUSE);
    size_t huge[2] = {SIZE_MAX, 2};
    assert_int_equal(fl_dp_clip_l2_layers(v, 1, huge, clips, 2, NULL), FL_ERR_MISUSE);
    double badc[3] = {1, 0, 1};
    assert_int_equal(fl_dp_clip_l2_layers(v, 6, sizes, badc, 3, NULL), FL_ERR_MISUSE);
    assert_true(fl_dp_clip_layers_total(badc, 3) == 0);
    /* A NaN in the last layer: nothing is modified, including earlier layers. */
    float w[6] = {3, 4, 5, 6, 7, NAN}, w0[6];
    memcpy(w0, w, sizeof(w));
    assert_int_equal(fl_dp_clip_l2_layers(w, 6, sizes, clips, 3, norms), FL_ERR_RANGE);
    assert_memory_equal(w, w0, 5 * sizeof(float));
    assert_true(isnan(w[5]));
    assert_int_equal(fl_dp_clip_l2_layers(NULL, 0, NULL, NULL, 0, NULL), FL_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat),      cmocka_unit_test(test_zero_and_empty),
        cmocka_unit_test(test_nonfinite), cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
