/* Distributed discrete Gaussian: padded sizes, encode -> sum mod 2^b -> decode round trip,
 * the summed noise of n clients has the intended variance, parameter choice bounds the wrap
 * probability (and a simulated round does not wrap), info figures, misuse and OOM. */

#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES] = {tag, 0xdd};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), NULL), FL_OK);
    return r;
}

static const uint8_t rot_seed[FL_DP_SEED_BYTES] = {0x42, 0x17};

/* Runs n clients through encode, sums mod 2^b, decodes into out; plain gets the sum of the
 * clipped updates. upd(i, c) gives coordinate i of client c. */
static void round_trip(fl_dp_rng *r, const fl_dp_distributed_params *p, size_t n,
                       double (*upd)(size_t, size_t), float *out, double *plain) {
    size_t dp = fl_dp_distributed_padded_dim(p->dim);
    uint64_t *enc = malloc(dp * sizeof(uint64_t)), *sum = calloc(dp, sizeof(uint64_t));
    float *u = malloc(p->dim * sizeof(float));
    const uint64_t mask = ((uint64_t)1 << p->modulus_bits) - 1;
    memset(plain, 0, p->dim * sizeof(double));
    for (size_t c = 0; c < n; c++) {
        for (size_t i = 0; i < p->dim; i++)
            u[i] = (float)upd(i, c);
        double pre;
        assert_int_equal(fl_dp_distributed_encode(r, enc, dp, u, p, rot_seed, &pre, NULL), FL_OK);
        double f = fmin(1.0, p->clip / pre);
        for (size_t i = 0; i < dp; i++) {
            assert_true(enc[i] <= mask);
            sum[i] = (sum[i] + enc[i]) & mask;
        }
        for (size_t i = 0; i < p->dim; i++)
            plain[i] += u[i] * f;
    }
    assert_int_equal(fl_dp_distributed_decode(out, sum, dp, p, rot_seed, NULL), FL_OK);
    free(enc);
    free(sum);
    free(u);
}

static double upd_mixed(size_t i, size_t c) {
    /* Norms from ~0.3 to ~3 (some clipped), mixed signs, one spiky client. */
    if (c == 3)
        return i == 7 ? 5.0 : 0.0;
    return sin((double)(i * (c + 1)) * 0.7) * 0.02 * (double)(c + 1);
}

static double upd_zero(size_t i, size_t c) {
    (void)i;
    (void)c;
    return 0.0;
}

static void test_padded_dim(void **state) {
    (void)state;
    assert_int_equal(fl_dp_distributed_padded_dim(0), 0);
    assert_int_equal(fl_dp_distributed_padded_dim(1), 1);
    assert_int_equal(fl_dp_distributed_padded_dim(1000), 1024);
    assert_int_equal(fl_dp_distributed_padded_dim(1024), 1024);
    assert_int_equal(fl_dp_distributed_padded_dim(1025), 2048);
    assert_int_equal(fl_dp_distributed_padded_dim(SIZE_MAX), 0);
}

/* No wrap, negligible noise: the decoded sum equals the plain sum up to the rounding error
 * (each client moves each rotated coordinate by < 1 lattice step, unbiased). */
static void test_round_trip_no_noise(void **state) {
    (void)state;
    fl_dp_rng *r = seeded(1);
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 1000;
    p.clip = 1.0;
    p.granularity = 1e-4;
    p.modulus_bits = 32;
    p.sigma2_num = 1; /* sigma^2 = 2^-40: P(nonzero) ~ exp(-2^39) */
    p.sigma2_den = FL_DP_SIGMA2_MAX;
    const size_t n = 10;
    float out[1000];
    double plain[1000];
    round_trip(r, &p, n, upd_mixed, out, plain);
    double err2 = 0;
    for (size_t i = 0; i < p.dim; i++)
        err2 += (out[i] - plain[i]) * (out[i] - plain[i]);
    /* Rounding error: n independent vectors of norm <= sqrt(d')/2 each (mean zero), so the
     * squared error is about n d' / 4 lattice units^2 (float output adds ~1e-7 relative). */
    double rms = sqrt(err2 / (double)p.dim) / p.granularity;
    print_message("round trip rms error %.3f lattice steps (n=%zu)\n", rms, n);
    assert_true(rms < 0.6 * sqrt((double)n));
    /* Granularity decides precision: with gamma = 1e-6 the error shrinks accordingly. */
    p.granularity = 1e-6;
    round_trip(r, &p, n, upd_mixed, out, plain);
    double mx = 0;
    for (size_t i = 0; i < p.dim; i++)
        mx = fmax(mx, fabs(out[i] - plain[i]));
    assert_true(mx < 1e-4);
    fl_dp_rng_destroy(r);
}

/* n clients with per-client variance 100/16 (n_min = 16): the decoded sum of zero updates is
 * pure noise of variance 100 (in lattice units; the inverse rotation is orthogonal). */
static void test_noise_sum_variance(void **state) {
    (void)state;
    fl_dp_rng *r = seeded(2);
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 4096;
    p.granularity = 1.0;
    p.clip = 1.0;
    p.modulus_bits = 20;
    p.n_min = 16;
    p.sigma2_num = 100;
    p.sigma2_den = 16;
    float *out = malloc(p.dim * sizeof(float));
    double *plain = malloc(p.dim * sizeof(double));
    round_trip(r, &p, 16, upd_zero, out, plain);
    double m = 0, v = 0;
    for (size_t i = 0; i < p.dim; i++)
        m += out[i];
    m /= (double)p.dim;
    for (size_t i = 0; i < p.dim; i++)
        v += (out[i] - m) * (out[i] - m);
    v /= (double)(p.dim - 1);
    print_message("summed noise: mean %.3f var %.2f (want 0, 100)\n", m, v);
    assert_true(fabs(m) < 5 * sqrt(100.0 / (double)p.dim));
    assert_true(fabs(v - 100) < 5 * 100 * sqrt(2.0 / (double)p.dim));
    fl_dp_distributed_info info;
    assert_int_equal(fl_dp_distributed_info_get(&info, &p, 16), FL_OK);
    assert_true(fabs(info.total_variance - 100) < 1e-9);
    assert_true(fabs(info.client_variance - 6.25) < 1e-12);
    assert_int_equal(fl_dp_distributed_info_get(&info, &p, 15), FL_ERR_MISUSE);
    free(out);
    free(plain);
    fl_dp_rng_destroy(r);
}

/* Parameter choice for a realistic round; the bound holds and a simulated round with the
 * maximum number of clients, all at the clip norm, decodes without wrap-around. */
static void test_choose_and_no_wrap(void **state) {
    (void)state;
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 3000;
    p.clip = 1.0;
    p.modulus_bits = 16;
    p.n_min = 40;
    assert_int_equal(fl_dp_distributed_choose(&p, 1.0, 50, 1e-6), FL_OK);
    fl_dp_distributed_info info;
    assert_int_equal(fl_dp_distributed_info_get(&info, &p, 50), FL_OK);
    print_message("choose: gamma %.4g sigma_c^2 %llu/%llu l2 %.1f z %.3f rho %.4f wrap %.2g\n",
                  p.granularity, (unsigned long long)p.sigma2_num, (unsigned long long)p.sigma2_den,
                  info.l2_bound, info.noise_multiplier, info.rho, info.modular_wrap_bound);
    assert_true(info.modular_wrap_bound <= 1e-6);
    assert_true(info.dim_padded == 4096);
    /* Total noise >= (z c / gamma)^2 with n_min survivors. */
    double want = (1.0 / p.granularity) * (1.0 / p.granularity);
    assert_true(p.n_min * info.client_variance >= want * (1 - 1e-12));
    assert_true(info.noise_multiplier > 0.5);
    assert_true(info.rho > 0 && info.rho < 2);
    fl_dp_rng *r = seeded(3);
    float *out = malloc(p.dim * sizeof(float));
    double *plain = malloc(p.dim * sizeof(double));
    round_trip(r, &p, 50, upd_mixed, out, plain);
    /* Without wrap the error is noise: per coordinate std sqrt(total var) gamma. A wrap would
     * add 2^16 gamma somewhere. */
    double sd = sqrt(50 * info.client_variance) * p.granularity, mx = 0;
    for (size_t i = 0; i < p.dim; i++)
        mx = fmax(mx, fabs(out[i] - plain[i]));
    print_message("max error %.4g (noise sd %.4g, wrap would be %.4g)\n", mx, sd,
                  65536 * p.granularity);
    assert_true(mx < 7 * sd);
    free(out);
    free(plain);
    fl_dp_rng_destroy(r);
    /* Too few bits for 10^4 clients: no granularity works. */
    fl_dp_distributed_params_init(&p);
    p.dim = 1000;
    p.modulus_bits = 8;
    p.n_min = 10000;
    assert_int_equal(fl_dp_distributed_choose(&p, 1.0, 10000, 1e-9), FL_ERR_RANGE);
}

static void test_info_figures(void **state) {
    (void)state;
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 100; /* d' = 128 */
    p.clip = 1.0;
    p.granularity = 0.01;
    p.n_min = 2;
    p.sigma2_num = 5000;
    p.sigma2_den = 1;
    fl_dp_distributed_info info;
    assert_int_equal(fl_dp_distributed_info_get(&info, &p, 4), FL_OK);
    double cs = 100, d = 128;
    double l2sq = floor(fmin(cs * cs + d / 4 + sqrt(2 * 0.5) * (cs + sqrt(d) / 2),
                             (cs + sqrt(d)) * (cs + sqrt(d))));
    assert_true(fabs(info.l2_bound - sqrt(l2sq)) < 1e-9);
    assert_true(fabs(info.l1_bound - fmin(l2sq, sqrt(d) * sqrt(l2sq))) < 1e-6);
    double tau = 0;
    for (int k = 1; k < 4; k++)
        tau += 10 * exp(-2 * 3.14159265358979 * 3.14159265358979 * 5000 * k / (k + 1.0));
    assert_true(fabs(info.tau - tau) <= 1e-300 + 1e-12 * tau);
    double eps = fmin(sqrt(l2sq / 20000 + tau * d / 2), sqrt(l2sq) / sqrt(20000) + tau * sqrt(d));
    assert_true(fabs(info.rho - eps * eps / 2) < 1e-12);
}

static void test_misuse_and_oom(void **state) {
    (void)state;
    fl_dp_rng *r = seeded(4);
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 5;
    float u[5] = {1, 2, 3, 4, 5};
    uint64_t enc[8];
    float out[5];
    assert_int_equal(fl_dp_distributed_encode(r, enc, 5, u, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE); /* out_len must be d' = 8 */
    assert_int_equal(fl_dp_distributed_encode(r, enc, 8, u, &p, NULL, NULL, NULL), FL_ERR_MISUSE);
    p.modulus_bits = 63;
    assert_int_equal(fl_dp_distributed_encode(r, enc, 8, u, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    p.modulus_bits = 20;
    u[2] = NAN;
    assert_int_equal(fl_dp_distributed_encode(r, enc, 8, u, &p, rot_seed, NULL, NULL),
                     FL_ERR_RANGE);
    u[2] = 3;
    assert_int_equal(fl_dp_distributed_encode(r, enc, 8, u, &p, rot_seed, NULL, NULL), FL_OK);
    enc[0] = (uint64_t)1 << 20; /* not a word of Z_{2^20} */
    assert_int_equal(fl_dp_distributed_decode(out, enc, 8, &p, rot_seed, NULL), FL_ERR_MISUSE);
    enc[0] = 0;
    assert_int_equal(fl_dp_distributed_decode(out, enc, 7, &p, rot_seed, NULL), FL_ERR_MISUSE);
    for (long k = 1;; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_status st = fl_dp_distributed_encode(r, enc, 8, u, &p, rot_seed, NULL, &a);
        assert_int_equal(c.live, 0);
        if (st == FL_OK)
            break;
        assert_int_equal(st, FL_ERR_NOMEM);
    }
    for (long k = 1;; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_status st = fl_dp_distributed_decode(out, enc, 8, &p, rot_seed, &a);
        assert_int_equal(c.live, 0);
        if (st == FL_OK)
            break;
        assert_int_equal(st, FL_ERR_NOMEM);
    }
    fl_dp_rng_destroy(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_padded_dim),         cmocka_unit_test(test_round_trip_no_noise),
        cmocka_unit_test(test_noise_sum_variance), cmocka_unit_test(test_choose_and_no_wrap),
        cmocka_unit_test(test_info_figures),       cmocka_unit_test(test_misuse_and_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
