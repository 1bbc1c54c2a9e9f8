/* The memory-lean encoders against the stored-vector ones: fl_dp_central_encode_into must
 * write, for the same seed, exactly the words fl_dp_central_encode's int64 output reduces to,
 * and fl_dp_distributed_encode_inplace exactly the words fl_dp_distributed_encode writes, and
 * both must leave their rng in the same state (same draws). Also: misuse, non-finite input
 * (buffers untouched), a rounding that never meets the bound (FL_ERR_AGAIN, buffers wiped),
 * a failing random source, the tail of the in-place buffer wiped, and an OOM walk. */

#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES] = {tag, 0x5e, 0xed};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), NULL), FL_OK);
    return r;
}

/* Both rngs must be at the same point of their streams: their next words agree. */
static void assert_same_state(fl_dp_rng *a, fl_dp_rng *b) {
    uint8_t x[16], y[16];
    assert_int_equal(fl_dp_rng_bytes(a, x, sizeof(x)), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(b, y, sizeof(y)), FL_OK);
    assert_memory_equal(x, y, sizeof(x));
}

/* A deterministic update: mixed signs and magnitudes, scale s (model units). */
static void fill_update(float *u, size_t n, double s, unsigned salt) {
    for (size_t i = 0; i < n; i++)
        u[i] = (float)(s * sin(0.37 * (double)(i + 1) * (double)(salt + 1)) *
                       (1.0 + (double)((i * 7 + salt) % 5)));
}

static uint64_t word_at(const void *v, size_t wb, size_t i) {
    if (wb == 4) {
        uint32_t w;
        memcpy(&w, (const unsigned char *)v + 4 * i, 4);
        return w;
    }
    uint64_t w;
    memcpy(&w, (const unsigned char *)v + 8 * i, 8);
    return w;
}

/* ---- central ---- */

static void central_case(size_t dim, double scale, double clip, double gran, size_t wb,
                         uint32_t bits, uint8_t tag) {
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    p.clip = clip;
    p.granularity = gran;
    float *u = malloc((dim ? dim : 1) * sizeof(float));
    int64_t *ref = malloc((dim ? dim : 1) * sizeof(int64_t));
    void *out = malloc((dim ? dim : 1) * wb);
    assert_non_null(u);
    assert_non_null(ref);
    assert_non_null(out);
    fill_update(u, dim, scale, tag);
    fl_dp_rng *ra = seeded(tag), *rb = seeded(tag);
    double na = -1, nb = -2;
    assert_int_equal(fl_dp_central_encode(ra, ref, u, dim, &p, &na, NULL), FL_OK);
    assert_int_equal(fl_dp_central_encode_into(rb, out, dim, wb, bits, u, dim, &p, &nb), FL_OK);
    assert_true(na == nb);
    uint64_t mask = bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
    size_t diff = 0;
    for (size_t i = 0; i < dim; i++)
        diff += word_at(out, wb, i) != ((uint64_t)ref[i] & mask);
    assert_int_equal(diff, 0);
    assert_same_state(ra, rb);
    fl_dp_rng_destroy(ra);
    fl_dp_rng_destroy(rb);
    free(u);
    free(ref);
    free(out);
}

static void test_central_bit_identical(void **state) {
    (void)state;
    /* int64 output itself (8-byte words, b = 64), the SDK's 32-bit words, a small modulus;
     * clipped and unclipped updates; coarse and fine lattices. */
    central_case(1000, 0.01, 1.0, 1e-3, 8, 64, 1);
    central_case(1000, 0.5, 1.0, 1e-3, 8, 64, 2);   /* norm > clip: clipped */
    central_case(4097, 0.02, 2.0, 1.0 / 1024, 4, 32, 3);
    central_case(777, 0.3, 0.5, 1e-4, 4, 20, 4);
    central_case(1, 3.0, 1.0, 1e-2, 8, 40, 5);
    central_case(0, 1.0, 1.0, 1e-3, 4, 32, 6);
    /* Many seeds at a size where rounding is redrawn now and then (beta near 1). */
    for (uint8_t s = 10; s < 40; s++)
        central_case(64, 0.2, 1.0, 1e-2, 4, 32, s);
}

/* The rounding is redrawn often with beta = 0.999 (the bound is tight), which exercises
 * the attempt loop: the two must still agree. */
static void test_central_redraws(void **state) {
    (void)state;
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    p.beta = 0.999;
    p.granularity = 0.05;
    float u[256];
    int64_t ref[256];
    uint32_t out[256];
    for (uint8_t s = 0; s < 20; s++) {
        fill_update(u, 256, 0.1, s);
        fl_dp_rng *ra = seeded(100 + s), *rb = seeded(100 + s);
        fl_status sa = fl_dp_central_encode(ra, ref, u, 256, &p, NULL, NULL);
        fl_status sb = fl_dp_central_encode_into(rb, out, 256, 4, 32, u, 256, &p, NULL);
        assert_int_equal(sa, sb);
        if (sa == FL_OK)
            for (size_t i = 0; i < 256; i++)
                assert_int_equal(out[i], (uint32_t)ref[i]);
        assert_same_state(ra, rb);
        fl_dp_rng_destroy(ra);
        fl_dp_rng_destroy(rb);
    }
}

/* A source of zeros: every uniform is 0, so rounding always goes up. */
static fl_status zero_fill(void *user, uint8_t *buf, size_t n) {
    (void)user;
    memset(buf, 0, n);
    return FL_OK;
}

static fl_status failing_fill(void *user, uint8_t *buf, size_t n) {
    (void)buf;
    (void)n;
    int *calls = user;
    return ++*calls > 1 ? FL_ERR_IO : FL_OK;
}

static fl_dp_rng *from_source(fl_dp_rng_fill_fn fn, void *user) {
    fl_dp_rng_source src = {sizeof(src), fn, user};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create(&r, &src, NULL), FL_OK);
    return r;
}

static void test_central_errors(void **state) {
    (void)state;
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    fl_dp_rng *r = seeded(7);
    float u[64];
    uint32_t out[64];
    fill_update(u, 64, 0.01, 1);
    assert_int_equal(fl_dp_central_encode_into(NULL, out, 64, 4, 32, u, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(r, NULL, 64, 4, 32, u, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 32, NULL, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(r, out, 63, 4, 32, u, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(r), "out_len"));
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 2, 16, u, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 33, u, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 0, u, 64, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 32, u, 64, NULL, NULL),
                     FL_ERR_MISUSE);
    fl_dp_central_params bad = p;
    bad.granularity = 0;
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 32, u, 64, &bad, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(r), "invalid params"));
    /* Non-finite input and out-of-range values: out untouched. */
    memset(out, 0xab, sizeof(out));
    u[5] = NAN;
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 32, u, 64, &p, NULL),
                     FL_ERR_RANGE);
    u[5] = INFINITY;
    assert_int_equal(fl_dp_central_encode_into(r, out, 64, 4, 32, u, 64, &p, NULL),
                     FL_ERR_RANGE);
    assert_non_null(strstr(fl_dp_rng_errmsg(r), "non-finite"));
    u[5] = 0.0f;
    for (size_t i = 0; i < 64; i++)
        assert_int_equal(out[i], 0xabababab);
    fl_dp_rng_destroy(r);

    /* Always rounding up overshoots a tight bound: every attempt fails, out is wiped, and
     * the stored-vector encoder agrees that it fails. */
    for (size_t i = 0; i < 64; i++)
        u[i] = 0.005f; /* norm 0.04, clipped to 0.03: x = 0.375 steps each, cs = 3 */
    p.granularity = 0.01;
    p.clip = 0.03;
    p.beta = 0.999999; /* bound ~ cs^2 + d/4 = 25 < ||ceil(x)||^2 = 64 */
    fl_dp_rng *z = from_source(zero_fill, NULL);
    memset(out, 0xab, sizeof(out));
    assert_int_equal(fl_dp_central_encode_into(z, out, 64, 4, 32, u, 64, &p, NULL),
                     FL_ERR_AGAIN);
    for (size_t i = 0; i < 64; i++)
        assert_int_equal(out[i], 0);
    assert_non_null(strstr(fl_dp_rng_errmsg(z), "conditional rounding"));
    int64_t ref[64];
    assert_int_equal(fl_dp_central_encode(z, ref, u, 64, &p, NULL, NULL), FL_ERR_AGAIN);
    fl_dp_rng_destroy(z);

    /* A source that fails on its second refill: the error is the source's, out is wiped. */
    int calls = 0;
    fl_dp_rng *f = from_source(failing_fill, &calls);
    float big[2048];
    uint32_t o2[2048];
    fill_update(big, 2048, 1e-4, 2);
    fl_dp_central_params_init(&p);
    memset(o2, 0xab, sizeof(o2));
    assert_int_equal(fl_dp_central_encode_into(f, o2, 2048, 4, 32, big, 2048, &p, NULL),
                     FL_ERR_IO);
    for (size_t i = 0; i < 2048; i++)
        assert_int_equal(o2[i], 0);
    fl_dp_rng_destroy(f);
}

/* ---- distributed ---- */

static void dist_case(size_t dim, double scale, size_t wb, uint32_t bits, size_t extra,
                      uint8_t tag) {
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = dim;
    p.clip = 1.0;
    p.modulus_bits = bits;
    p.n_min = 2;
    assert_int_equal(fl_dp_distributed_choose(&p, 1.0, 10, 1e-9), FL_OK);
    size_t dp = fl_dp_distributed_padded_dim(dim), len = dp + extra;
    const uint8_t rot[FL_DP_SEED_BYTES] = {tag, 0x42};
    float *u = malloc(dim * sizeof(float));
    uint64_t *ref = malloc(dp * sizeof(uint64_t));
    double *buf = malloc(len * sizeof(double));
    assert_non_null(u);
    assert_non_null(ref);
    assert_non_null(buf);
    fill_update(u, dim, scale, tag);
    for (size_t i = 0; i < dim; i++)
        buf[i] = (double)u[i];
    for (size_t i = dim; i < len; i++)
        buf[i] = 12345.0; /* ignored */
    fl_dp_rng *ra = seeded(tag), *rb = seeded(tag);
    double na = -1, nb = -2;
    assert_int_equal(fl_dp_distributed_encode(ra, ref, dp, u, &p, rot, &na, NULL), FL_OK);
    assert_int_equal(fl_dp_distributed_encode_inplace(rb, buf, len, wb, &p, rot, &nb, NULL),
                     FL_OK);
    assert_true(na == nb);
    size_t diff = 0;
    for (size_t i = 0; i < dp; i++)
        diff += word_at(buf, wb, i) != ref[i];
    assert_int_equal(diff, 0);
    /* Everything after the words is wiped. */
    const unsigned char *b = (const unsigned char *)buf;
    for (size_t k = dp * wb; k < len * sizeof(double); k++)
        assert_int_equal(b[k], 0);
    assert_same_state(ra, rb);
    fl_dp_rng_destroy(ra);
    fl_dp_rng_destroy(rb);
    free(u);
    free(ref);
    free(buf);
}

static void test_distributed_bit_identical(void **state) {
    (void)state;
    dist_case(1000, 0.01, 8, 20, 0, 1);
    dist_case(1000, 0.2, 4, 20, 0, 2);   /* clipped */
    dist_case(1024, 0.02, 4, 32, 1, 3);  /* d = d', one spare double (the SDK's layout) */
    dist_case(3000, 0.01, 8, 40, 1, 4);  /* b > 32: 8-byte words only */
    dist_case(5, 0.3, 4, 16, 3, 5);
    dist_case(1, 2.0, 8, 24, 0, 6);
    for (uint8_t s = 10; s < 30; s++)
        dist_case(100, 0.05, 4, 20, 0, s);
}

static void test_distributed_errors(void **state) {
    (void)state;
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 100;
    const uint8_t rot[FL_DP_SEED_BYTES] = {1};
    fl_dp_rng *r = seeded(9);
    double buf[128];
    for (size_t i = 0; i < 128; i++)
        buf[i] = 0.001 * (double)i;
    assert_int_equal(fl_dp_distributed_encode_inplace(NULL, buf, 128, 4, &p, rot, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode_inplace(r, NULL, 128, 4, &p, rot, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 4, &p, NULL, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 127, 4, &p, rot, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(r), "buf_len"));
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 2, &p, rot, NULL, NULL),
                     FL_ERR_MISUSE);
    p.modulus_bits = 40;
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 4, &p, rot, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(r), "modulus_bits"));
    p.modulus_bits = 20;
    fl_dp_distributed_params bad = p;
    bad.granularity = -1;
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 4, &bad, rot, NULL, NULL),
                     FL_ERR_MISUSE);
    /* Non-finite update: buf untouched. */
    buf[3] = INFINITY;
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 4, &p, rot, NULL, NULL),
                     FL_ERR_RANGE);
    assert_true(isinf(buf[3]) && buf[4] == 0.004 && buf[127] == 0.127);
    buf[3] = 0.003;
    fl_dp_rng_destroy(r);

    /* OOM on the bitmap: FL_ERR_NOMEM, buf untouched, nothing leaked. */
    struct fl_test_counting c = {0};
    c.fail_at = 1;
    fl_allocator a = fl_test_counting_allocator(&c);
    r = seeded(10);
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 4, &p, rot, NULL, &a),
                     FL_ERR_NOMEM);
    assert_true(buf[5] == 0.005 && buf[127] == 0.127);
    assert_int_equal(c.live, 0);
    /* With the allocator working: one allocation, freed. */
    c.fail_at = 0;
    assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, 128, 4, &p, rot, NULL, &a), FL_OK);
    assert_int_equal(c.allocs, 1);
    assert_int_equal(c.live, 0);
    fl_dp_rng_destroy(r);

    /* Always rounding up overshoots the bound: the update (norm ~0.07) is clipped to 0.01,
     * so cs = 10 and the rotated x[i] are about +-0.3; ceil(x) is 1 for every positive one,
     * ||q||^2 ~ 512 > floor(cs^2 + d'/4 + eps) = 356. FL_ERR_AGAIN from both encoders (the
     * zero source never reaches the noise, whose sampler would not terminate on it), buf
     * wiped. */
    p.dim = 1024;
    p.clip = 0.01;
    p.granularity = 1e-3;
    p.beta = 0.999999;
    double *big = malloc(1024 * sizeof(double));
    float *fu = malloc(1024 * sizeof(float));
    uint64_t *ref = malloc(1024 * sizeof(uint64_t));
    fill_update(fu, 1024, 0.001, 3);
    for (size_t i = 0; i < 1024; i++)
        big[i] = (double)fu[i];
    fl_dp_rng *z = from_source(zero_fill, NULL);
    assert_int_equal(fl_dp_distributed_encode_inplace(z, big, 1024, 4, &p, rot, NULL, NULL),
                     FL_ERR_AGAIN);
    for (size_t i = 0; i < 1024; i++)
        assert_true(big[i] == 0.0);
    assert_int_equal(fl_dp_distributed_encode(z, ref, 1024, fu, &p, rot, NULL, NULL),
                     FL_ERR_AGAIN);
    fl_dp_rng_destroy(z);

    /* A source failing on its second refill (mid-rounding): its error, buf wiped. */
    int calls = 0;
    fl_dp_rng *f = from_source(failing_fill, &calls);
    fl_dp_distributed_params_init(&p);
    p.dim = 1024;
    for (size_t i = 0; i < 1024; i++)
        big[i] = (double)fu[i];
    assert_int_equal(fl_dp_distributed_encode_inplace(f, big, 1024, 8, &p, rot, NULL, NULL),
                     FL_ERR_IO);
    for (size_t i = 0; i < 1024; i++)
        assert_true(big[i] == 0.0);
    fl_dp_rng_destroy(f);
    free(big);
    free(fu);
    free(ref);
}

/* The in-place words decode like the stored ones: three clients, sum mod 2^b, decode, and the
 * result is the plain sum of the clipped updates within the noise. */
static void test_distributed_round_trip(void **state) {
    (void)state;
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 300;
    p.clip = 1.0;
    p.granularity = 1e-4;
    p.modulus_bits = 32;
    p.sigma2_num = 1;
    p.sigma2_den = 1;
    const uint8_t rot[FL_DP_SEED_BYTES] = {0x77};
    size_t dp = fl_dp_distributed_padded_dim(p.dim);
    uint64_t *sum = calloc(dp, sizeof(uint64_t));
    double *buf = malloc(dp * sizeof(double)), *plain = calloc(p.dim, sizeof(double));
    float *u = malloc(p.dim * sizeof(float)), *out = malloc(p.dim * sizeof(float));
    for (unsigned c = 0; c < 3; c++) {
        fill_update(u, p.dim, 0.01, c);
        for (size_t i = 0; i < p.dim; i++) {
            buf[i] = (double)u[i];
            plain[i] += u[i];
        }
        fl_dp_rng *r = seeded((uint8_t)(50 + c));
        double norm;
        assert_int_equal(fl_dp_distributed_encode_inplace(r, buf, dp, 4, &p, rot, &norm, NULL),
                         FL_OK);
        assert_true(norm < 1.0); /* not clipped: plain is the exact clipped sum */
        const uint32_t *w = (const uint32_t *)buf;
        for (size_t i = 0; i < dp; i++)
            sum[i] = (sum[i] + w[i]) & 0xffffffffu;
        fl_dp_rng_destroy(r);
    }
    assert_int_equal(fl_dp_distributed_decode(out, sum, dp, &p, rot, NULL), FL_OK);
    /* Per coordinate: 3 rounding errors (< 1 step) and 3 unit-variance noises, times gamma:
     * well under 20 steps = 2e-3. */
    for (size_t i = 0; i < p.dim; i++)
        assert_true(fabs((double)out[i] - plain[i]) < 2e-3);
    free(sum);
    free(buf);
    free(plain);
    free(u);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_central_bit_identical),
        cmocka_unit_test(test_central_redraws),
        cmocka_unit_test(test_central_errors),
        cmocka_unit_test(test_distributed_bit_identical),
        cmocka_unit_test(test_distributed_errors),
        cmocka_unit_test(test_distributed_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
