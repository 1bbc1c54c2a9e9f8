/* The OpenBLAS kernel check (client-sdk/src/blas_advice.c): which core types draw the
 * warning, what it recommends, and that this process's answer follows the environment's
 * OPENBLAS_CORETYPE (ctest runs this program with Prescott and with Haswell). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client_internal.h"

static void test_decision(void **st) {
    (void)st;
    char buf[256];
    /* Pre-AVX2 kernels on an AVX-512 CPU: SkylakeX; on an AVX2 + FMA one: Haswell. */
    assert_int_equal(fl__client_blas_advice_for("Prescott", 1, 1, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "OPENBLAS_CORETYPE=SkylakeX"));
    assert_non_null(strstr(buf, "Prescott"));
    assert_int_equal(fl__client_blas_advice_for("Sandybridge", 1, 0, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "OPENBLAS_CORETYPE=Haswell"));
    assert_int_equal(fl__client_blas_advice_for("Core2", 1, 0, NULL, 0), 1);
    /* AVX2 kernels or newer: nothing to say (Haswell on an AVX-512 CPU is close enough). */
    static const char *const fine[] = {"Haswell",  "SkylakeX", "Cooperlake", "Zen",
                                       "prescott", "",         "Prescott2"};
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
        assert_int_equal(fl__client_blas_advice_for(fine[i], 1, 1, buf, sizeof(buf)), 0);
    /* A CPU without AVX2 + FMA: the old kernels are the right ones. */
    assert_int_equal(fl__client_blas_advice_for("Prescott", 0, 0, buf, sizeof(buf)), 0);
    assert_int_equal(fl__client_blas_advice_for(NULL, 1, 1, buf, sizeof(buf)), 0);
    /* A short buffer is cut, not overrun. */
    char small[8];
    memset(small, 'x', sizeof(small));
    assert_int_equal(fl__client_blas_advice_for("Prescott", 1, 1, small, sizeof(small)), 1);
    assert_int_equal(small[7], '\0');
}

/* This process: with CBLAS on an x86 CPU that has AVX2 + FMA, the answer is 1 exactly when
 * the environment forced a pre-AVX2 core type (FL_TEST_BLAS_EXPECT says which run this is). */
static void test_this_process(void **st) {
    (void)st;
    const char *expect = getenv("FL_TEST_BLAS_EXPECT");
    char buf[256];
    int got = fl__client_blas_advice(buf, sizeof(buf));
    if (!fl__client_kernels_blas()) {
        assert_int_equal(got, 0);
        skip();
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        assert_int_equal(got, 0);
        skip();
    }
#else
    assert_int_equal(got, 0);
    skip();
#endif
    if (!expect)
        skip(); /* OpenBLAS's own detection: either answer is right */
    assert_int_equal(got, strcmp(expect, "advice") == 0);
    if (got)
        assert_non_null(strstr(buf, "OPENBLAS_CORETYPE="));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decision),
        cmocka_unit_test(test_this_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
