/* Central DP: lattice maps, encode (clip + conditional rounding within the enforced bound),
 * noise variance on the integer sum, round trip, info, misuse and OOM. */

#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES] = {tag, 0xce};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), NULL), FL_OK);
    return r;
}

static void test_lattice(void **state) {
    (void)state;
    float x[5] = {0.0f, 0.25f, -0.35f, 1.0f, 0.15f};
    int64_t q[5];
    assert_int_equal(fl_dp_lattice_encode(q, x, 5, 0.1), FL_OK);
    for (int i = 0; i < 5; i++)
        assert_true(fabs((double)q[i] - (double)x[i] / 0.1) <= 0.5);
    float y[5];
    assert_int_equal(fl_dp_lattice_decode(y, q, 5, 0.1), FL_OK);
    for (int i = 0; i < 5; i++)
        assert_true(fabs(y[i] - x[i]) <= 0.05 + 1e-6);
    float bad[2] = {1, NAN};
    assert_int_equal(fl_dp_lattice_encode(q, bad, 2, 0.1), FL_ERR_RANGE);
    float big[1] = {1e30f};
    assert_int_equal(fl_dp_lattice_encode(q, big, 1, 1e-3), FL_ERR_RANGE);
    assert_int_equal(fl_dp_lattice_encode(q, x, 5, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_decode(y, q, 5, NAN), FL_ERR_MISUSE);
}

static void test_encode_bound(void **state) {
    (void)state;
    fl_dp_rng *r = seeded(1);
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    p.clip = 1.0;
    p.granularity = 0.01;
    const size_t d = 500;
    fl_dp_central_info info;
    assert_int_equal(fl_dp_central_info_get(&info, &p, d), FL_OK);
    double cs = 100, want = fmin(cs * cs + d / 4.0 + sqrt(2 * 0.5) * (cs + sqrt((double)d) / 2),
                                 (cs + sqrt((double)d)) * (cs + sqrt((double)d)));
    assert_true(fabs(info.l2_bound - sqrt(floor(want))) < 1e-9);
    float u[500];
    int64_t q[500];
    for (int t = 0; t < 20; t++) {
        for (size_t i = 0; i < d; i++)
            u[i] = (float)sin((double)(i * 7 + t)) * (float)(t + 1);
        double pre;
        assert_int_equal(fl_dp_central_encode(r, q, u, d, &p, &pre, NULL), FL_OK);
        double ss = 0, f = fmin(1.0, p.clip / pre) / p.granularity;
        for (size_t i = 0; i < d; i++) {
            ss += (double)q[i] * (double)q[i];
            assert_true(fabs((double)q[i] - u[i] * f) < 1.0 + 1e-9); /* floor or ceil */
        }
        assert_true(ss <= info.l2_bound * info.l2_bound + 1e-6);
    }
    fl_dp_rng_destroy(r);
}

/* Noise on the integer sum has the configured variance (5 standard errors), and the round
 * trip sum -> noise -> decode stays within the expected error. */
static void test_noise_and_round_trip(void **state) {
    (void)state;
    fl_dp_rng *r = seeded(2);
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    p.clip = 1.0;
    p.granularity = 1e-3;
    p.sigma2_num = 400;
    p.sigma2_den = 1;
    const size_t d = 20000, clients = 10;
    int64_t *sum = calloc(d, sizeof(int64_t)), *q = malloc(d * sizeof(int64_t));
    float *u = malloc(d * sizeof(float)), *plain = calloc(d, sizeof(float));
    float *out = malloc(d * sizeof(float));
    for (size_t c = 0; c < clients; c++) {
        for (size_t i = 0; i < d; i++)
            u[i] = (float)(cos((double)(i + 31 * c)) * 0.004);
        double pre;
        assert_int_equal(fl_dp_central_encode(r, q, u, d, &p, &pre, NULL), FL_OK);
        double f = fmin(1.0, p.clip / pre);
        for (size_t i = 0; i < d; i++) {
            sum[i] += q[i];
            plain[i] += (float)(u[i] * f);
        }
    }
    int64_t *noised = malloc(d * sizeof(int64_t));
    memcpy(noised, sum, d * sizeof(int64_t));
    assert_int_equal(fl_dp_central_noise(r, noised, d, &p), FL_OK);
    double m = 0, v = 0;
    for (size_t i = 0; i < d; i++)
        m += (double)(noised[i] - sum[i]);
    m /= (double)d;
    for (size_t i = 0; i < d; i++)
        v += ((double)(noised[i] - sum[i]) - m) * ((double)(noised[i] - sum[i]) - m);
    v /= (double)(d - 1);
    assert_true(fabs(m) < 5 * sqrt(400.0 / d));
    assert_true(fabs(v - 400) < 5 * 400 * sqrt(2.0 / d));
    /* Decode: error per coordinate = (noise + rounding) * gamma. */
    assert_int_equal(fl_dp_lattice_decode(out, noised, d, p.granularity), FL_OK);
    double err = 0;
    for (size_t i = 0; i < d; i++)
        err += (out[i] - plain[i]) * (double)(out[i] - plain[i]);
    err = sqrt(err / (double)d) / p.granularity; /* rms error, lattice units */
    assert_true(err < sqrt(400 + clients / 4.0) * 1.1);
    free(sum);
    free(q);
    free(u);
    free(plain);
    free(out);
    free(noised);
    fl_dp_rng_destroy(r);
}

static void test_misuse_and_oom(void **state) {
    (void)state;
    fl_dp_rng *r = seeded(3);
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    float u[4] = {1, 2, 3, 4};
    int64_t q[4];
    fl_dp_central_info info;
    p.granularity = 0;
    assert_int_equal(fl_dp_central_info_get(&info, &p, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode(r, q, u, 4, &p, NULL, NULL), FL_ERR_MISUSE);
    fl_dp_central_params_init(&p);
    p.beta = 1.0;
    assert_int_equal(fl_dp_central_noise(r, q, 4, &p), FL_ERR_MISUSE);
    fl_dp_central_params_init(&p);
    p.struct_size = 4;
    assert_int_equal(fl_dp_central_info_get(&info, &p, 4), FL_ERR_MISUSE);
    fl_dp_central_params_init(&p);
    float bad[4] = {1, INFINITY, 0, 0};
    assert_int_equal(fl_dp_central_encode(r, q, bad, 4, &p, NULL, NULL), FL_ERR_RANGE);
    assert_int_equal(fl_dp_central_encode(NULL, q, u, 4, &p, NULL, NULL), FL_ERR_MISUSE);
    /* beta = 0: deterministic bound (c/gamma + sqrt(d))^2, always met at the first try. */
    p.beta = 0;
    assert_int_equal(fl_dp_central_encode(r, q, u, 4, &p, NULL, NULL), FL_OK);
    fl_dp_central_params_init(&p);
    for (long k = 1;; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_status st = fl_dp_central_encode(r, q, u, 4, &p, NULL, &a);
        assert_int_equal(c.live, 0);
        if (st == FL_OK)
            break;
        assert_int_equal(st, FL_ERR_NOMEM);
    }
    fl_dp_rng_destroy(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lattice),
        cmocka_unit_test(test_encode_bound),
        cmocka_unit_test(test_noise_and_round_trip),
        cmocka_unit_test(test_misuse_and_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
