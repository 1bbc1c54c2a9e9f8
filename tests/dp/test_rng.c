/* fl_dp_rng: the ChaCha20 stream is the documented keystream, seeds reproduce, uniform
 * integers are unbiased, a failing source is sticky, and creation survives OOM. */

#include <math.h>
#include <sodium.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static void test_sizes(void **state) {
    (void)state;
    assert_int_equal(fl_dp_seed_bytes(), FL_DP_SEED_BYTES);
    assert_int_equal(fl_dp_rng_buffer_bytes(), FL_DP_RNG_BUFFER_BYTES);
    assert_int_equal(FL_DP_RNG_BUFFER_BYTES % 64, 0); /* whole ChaCha20 blocks */
    assert_int_equal(FL_DP_SEED_BYTES, crypto_stream_chacha20_ietf_KEYBYTES);
}

/* The stream is refill i = ChaCha20-IETF(key = seed, nonce = i LE), 4096 bytes each. */
static void test_chacha20_stream(void **state) {
    (void)state;
    uint8_t seed[FL_DP_SEED_BYTES];
    for (int i = 0; i < FL_DP_SEED_BYTES; i++)
        seed[i] = (uint8_t)(3 * i + 1);
    static uint8_t want[2 * FL_DP_RNG_BUFFER_BYTES], got[2 * FL_DP_RNG_BUFFER_BYTES];
    uint8_t nonce[crypto_stream_chacha20_IETF_NONCEBYTES] = {0};
    assert_int_equal(sodium_init() >= 0, 1);
    crypto_stream_chacha20_ietf(want, FL_DP_RNG_BUFFER_BYTES, nonce, seed);
    nonce[0] = 1;
    crypto_stream_chacha20_ietf(want + FL_DP_RNG_BUFFER_BYTES, FL_DP_RNG_BUFFER_BYTES, nonce, seed);
    fl_dp_rng *a = NULL, *b = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&a, seed, sizeof(seed), NULL), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(a, got, 16), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(a, got + 16, sizeof(got) - 16), FL_OK);
    assert_memory_equal(got, want, sizeof(got));
    /* Each call starts on an 8-byte boundary of the stream: 3 bytes, then the next word. */
    fl_dp_rng_destroy(a);
    assert_int_equal(fl_dp_rng_create_chacha20(&a, seed, sizeof(seed), NULL), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(a, got, 3), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(a, got + 3, 8), FL_OK);
    assert_memory_equal(got, want, 3);
    assert_memory_equal(got + 3, want + 8, 8);
    /* Same seed, same samples. */
    fl_dp_rng_destroy(a);
    assert_int_equal(fl_dp_rng_create_chacha20(&a, seed, sizeof(seed), NULL), FL_OK);
    assert_int_equal(fl_dp_rng_create_chacha20(&b, seed, sizeof(seed), NULL), FL_OK);
    int64_t xa[100], xb[100];
    assert_int_equal(fl_dp_discrete_gaussian(a, xa, 100, 50, 1), FL_OK);
    assert_int_equal(fl_dp_discrete_gaussian(b, xb, 100, 50, 1), FL_OK);
    assert_memory_equal(xa, xb, sizeof(xa));
    fl_dp_rng_destroy(b);
    seed[0] ^= 1;
    assert_int_equal(fl_dp_rng_create_chacha20(&b, seed, sizeof(seed), NULL), FL_OK);
    assert_int_equal(fl_dp_discrete_gaussian(b, xb, 100, 50, 1), FL_OK);
    assert_memory_not_equal(xa, xb, sizeof(xa));
    fl_dp_rng_destroy(a);
    fl_dp_rng_destroy(b);
}

static void test_os(void **state) {
    (void)state;
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_os(&r, NULL), FL_OK);
    uint8_t buf[64] = {0}, zero[64] = {0};
    assert_int_equal(fl_dp_rng_bytes(r, buf, sizeof(buf)), FL_OK);
    assert_memory_not_equal(buf, zero, sizeof(buf));
    int64_t x[16];
    assert_int_equal(fl_dp_discrete_gaussian(r, x, 16, 4, 1), FL_OK);
    /* Across OS reseeds (every 1 MiB): 1.5 MiB of output with a flat byte histogram
     * (chi-square with 255 degrees of freedom, upper 1e-6 quantile 384). */
    static uint8_t big[3 << 19];
    assert_int_equal(fl_dp_rng_bytes(r, big, sizeof(big)), FL_OK);
    double h[256] = {0}, e = (double)sizeof(big) / 256, chi = 0;
    for (size_t i = 0; i < sizeof(big); i++)
        h[big[i]]++;
    for (int i = 0; i < 256; i++)
        chi += (h[i] - e) * (h[i] - e) / e;
    assert_true(chi < 384);
    fl_dp_rng_destroy(r);
    fl_dp_rng_destroy(NULL);
}

/* Uniform in [0, 3) and [0, 2^63 + 1): chi-square / halves at the 1e-6 level (fixed seed). */
static void test_uniform(void **state) {
    (void)state;
    uint8_t seed[FL_DP_SEED_BYTES] = {9};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), NULL), FL_OK);
    uint64_t v;
    long c[3] = {0};
    const long n = 300000;
    for (long i = 0; i < n; i++) {
        assert_int_equal(fl_dp_rng_uniform(r, &v, 3), FL_OK);
        assert_true(v < 3);
        c[v]++;
    }
    double chi = 0;
    for (int i = 0; i < 3; i++)
        chi += (c[i] - n / 3.0) * (c[i] - n / 3.0) / (n / 3.0);
    assert_true(chi < 27.6); /* chi-square(2) upper 1e-6 quantile */
    /* bound = 2^63 + 1: half the 64-bit words are rejected; results must stay below it and
     * the top half [2^62, 2^63] must get about half. */
    const uint64_t big = ((uint64_t)1 << 63) + 1;
    long top = 0;
    for (long i = 0; i < 100000; i++) {
        assert_int_equal(fl_dp_rng_uniform(r, &v, big), FL_OK);
        assert_true(v < big);
        top += v >= ((uint64_t)1 << 62);
    }
    assert_true(fabs(top / 100000.0 - 0.5) < 5 * 0.5 / sqrt(100000.0));
    assert_int_equal(fl_dp_rng_uniform(r, &v, 1), FL_OK);
    assert_int_equal(v, 0);
    assert_int_equal(fl_dp_rng_uniform(r, &v, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_uniform(r, NULL, 5), FL_ERR_MISUSE);
    fl_dp_rng_destroy(r);
}

struct failing_src {
    int calls, fail_after;
    fl_status code;
};

static fl_status failing_fill(void *user, uint8_t *buf, size_t n) {
    struct failing_src *f = user;
    if (f->calls++ >= f->fail_after)
        return f->code;
    memset(buf, 0xa5, n); /* not random, but fine for the mechanics */
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(buf[i] ^ (i * 131 + (size_t)f->calls * 7));
    return FL_OK;
}

static void test_failing_source_sticky(void **state) {
    (void)state;
    struct failing_src f = {0, 2, FL_ERR_IO};
    fl_dp_rng_source src = {sizeof(src), failing_fill, &f};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create(&r, &src, NULL), FL_OK);
    int64_t x[4096];
    fl_status st = FL_OK;
    for (int i = 0; i < 100 && st == FL_OK; i++)
        st = fl_dp_discrete_gaussian(r, x, 4096, 100, 1);
    assert_int_equal(st, FL_ERR_IO);
    assert_non_null(strstr(fl_dp_rng_errmsg(r), "random source failed"));
    /* Sticky, even though the source would now... still fail; and no more fill calls. */
    int calls = f.calls;
    assert_int_equal(fl_dp_discrete_gaussian(r, x, 10, 100, 1), FL_ERR_IO);
    assert_int_equal(fl_dp_discrete_laplace(r, x, 10, 3, 1), FL_ERR_IO);
    uint8_t b[8];
    assert_int_equal(fl_dp_rng_bytes(r, b, 8), FL_ERR_IO);
    uint64_t v;
    assert_int_equal(fl_dp_rng_uniform(r, &v, 10), FL_ERR_IO);
    assert_int_equal(f.calls, calls);
    fl_dp_rng_destroy(r);

    /* A callback returning an unknown code is reported as FL_ERR_INTERNAL. */
    struct failing_src g = {0, 0, (fl_status)999};
    fl_dp_rng_source src2 = {sizeof(src2), failing_fill, &g};
    assert_int_equal(fl_dp_rng_create(&r, &src2, NULL), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(r, b, 8), FL_ERR_INTERNAL);
    fl_dp_rng_destroy(r);
}

static void test_misuse(void **state) {
    (void)state;
    fl_dp_rng *r = (fl_dp_rng *)1;
    uint8_t seed[FL_DP_SEED_BYTES] = {0};
    assert_int_equal(fl_dp_rng_create(NULL, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_create(&r, NULL, NULL), FL_ERR_MISUSE);
    assert_null(r);
    fl_dp_rng_source bad = {sizeof(bad) - 1, failing_fill, NULL};
    assert_int_equal(fl_dp_rng_create(&r, &bad, NULL), FL_ERR_MISUSE);
    fl_dp_rng_source nofill = {sizeof(nofill), NULL, NULL};
    assert_int_equal(fl_dp_rng_create(&r, &nofill, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, 16, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_create_chacha20(&r, NULL, 32, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_create_os(NULL, NULL), FL_ERR_MISUSE);
    fl_allocator badalloc = {0};
    assert_int_equal(fl_dp_rng_create_os(&r, &badalloc), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_bytes(NULL, seed, 1), FL_ERR_MISUSE);
    assert_non_null(fl_dp_rng_errmsg(NULL));
}

static void test_oom(void **state) {
    (void)state;
    uint8_t seed[FL_DP_SEED_BYTES] = {1};
    for (long k = 1;; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_dp_rng *r = NULL;
        fl_status st = fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), &a);
        if (st == FL_OK) {
            int64_t x[8];
            assert_int_equal(fl_dp_discrete_gaussian(r, x, 8, 9, 1), FL_OK);
            /* A batch allocates the sampler's table on the handle; when that fails it falls
             * back to the per-sample sampler and still succeeds. */
            int64_t *y = malloc(2048 * sizeof(int64_t));
            assert_non_null(y);
            assert_int_equal(fl_dp_discrete_gaussian(r, y, 2048, 9, 1), FL_OK);
            free(y);
            fl_dp_rng_destroy(r);
            assert_int_equal(c.live, 0);
            break;
        }
        assert_int_equal(st, FL_ERR_NOMEM);
        assert_null(r);
        assert_int_equal(c.live, 0);
    }
    /* With the table allocated, destroy frees it. */
    struct fl_test_counting c = {0};
    fl_allocator a = fl_test_counting_allocator(&c);
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), &a), FL_OK);
    int64_t *y = malloc(2048 * sizeof(int64_t));
    assert_non_null(y);
    assert_int_equal(fl_dp_discrete_gaussian(r, y, 2048, 9, 1), FL_OK);
    assert_int_equal(c.live, 2);
    fl_dp_rng_destroy(r);
    assert_int_equal(c.live, 0);
    free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_chacha20_stream),
        cmocka_unit_test(test_os),
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_failing_source_sticky),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
