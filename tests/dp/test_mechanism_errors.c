/* Mechanism API contracts at the edges: central and distributed DP, adaptive clipping, the
 * lattice maps, clipping, the samplers' argument checks and fl_dp_variance_to_rational's
 * rounding. Every bad argument gives the documented code (FL_ERR_MISUSE / FL_ERR_RANGE) and,
 * where the call has an rng, a message on it; boundary parameter choices give the documented
 * figures. */

#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES];
    memset(seed, 0x3c, sizeof(seed));
    seed[0] = tag;
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&rng, seed, sizeof(seed), NULL), FL_OK);
    return rng;
}

static const uint8_t rot_seed[FL_DP_SEED_BYTES] = {9, 8, 7};

/* An allocator the library must refuse (no alloc function). */
static const fl_allocator bad_alloc = {sizeof(fl_allocator), NULL, NULL, NULL, NULL};

/* ---- central DP ---- */

static void test_central_params(void **state) {
    (void)state;
    fl_dp_central_params_init(NULL);
    fl_dp_central_params p, bad;
    fl_dp_central_params_init(&p);
    fl_dp_central_info info;
    assert_int_equal(fl_dp_central_info_get(&info, &p, 100), FL_OK);
    assert_int_equal(fl_dp_central_info_get(NULL, &p, 100), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_info_get(&info, NULL, 100), FL_ERR_MISUSE);
    /* Each field out of range on its own. */
    for (int f = 0; f < 12; f++) {
        bad = p;
        switch (f) {
        case 0: bad.struct_size = 8; break;
        case 1: bad.clip = INFINITY; break;
        case 2: bad.clip = 0; break;
        case 3: bad.granularity = NAN; break;
        case 4: bad.granularity = -1e-3; break;
        case 5: bad.beta = -0.1; break;
        case 6: bad.beta = 1.0; break;
        case 7: bad.sigma2_num = 0; break;
        case 8: bad.sigma2_den = FL_DP_SIGMA2_MAX + 1; break;
        /* clip / granularity at 2^61 and beyond: no room for noise in int64. */
        case 9: bad.clip = 1.0; bad.granularity = 0x1p-61; break;
        /* clip / granularity just below 2^61 but Delta^2 >= 2^120. */
        case 10: bad.clip = 1.0; bad.granularity = 1.0 / (0x1p60 * 1.9); break;
        case 11: bad.clip = INFINITY; bad.granularity = INFINITY; break;
        }
        assert_int_equal(fl_dp_central_info_get(&info, &bad, 100), FL_ERR_MISUSE);
    }
    /* A clip far below one lattice step with beta near 1: Delta^2 = floor(c^2/gamma^2 + 1/4 +
     * ...) = 0, so every rounded update must be 0 and the noise multiplier is infinite. */
    bad = p;
    bad.clip = 1e-9;
    bad.granularity = 1.0;
    bad.beta = 0.999;
    assert_int_equal(fl_dp_central_info_get(&info, &bad, 1), FL_OK);
    assert_true(info.l2_bound == 0.0 && isinf(info.noise_multiplier));
    fl_dp_rng *rng = seeded(1);
    float u[1] = {1e-9f};
    int64_t q[1] = {5};
    assert_int_equal(fl_dp_central_encode(rng, q, u, 1, &bad, NULL, NULL), FL_OK);
    assert_int_equal(q[0], 0);
    fl_dp_rng_destroy(rng);
}

static void test_central_calls(void **state) {
    (void)state;
    fl_dp_central_params p, bad;
    fl_dp_central_params_init(&p);
    bad = p;
    bad.beta = 2.0;
    fl_dp_rng *rng = seeded(2);
    float u[4] = {0.1f, -0.2f, 0.3f, 0.0f};
    int64_t q[4];
    uint64_t w8[4];
    double norm = -1;

    /* encode */
    assert_int_equal(fl_dp_central_encode(NULL, q, u, 4, &p, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode(rng, NULL, u, 4, &p, NULL, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_central_encode: NULL vector");
    assert_int_equal(fl_dp_central_encode(rng, q, NULL, 4, &p, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode(rng, q, u, 4, &bad, NULL, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_central_encode: invalid params");
    assert_int_equal(fl_dp_central_encode(rng, q, u, 4, &p, NULL, &bad_alloc), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_central_encode: bad allocator");
    /* Zero coordinates with NULL vectors is a valid empty update. */
    assert_int_equal(fl_dp_central_encode(rng, NULL, NULL, 0, &p, &norm, NULL), FL_OK);
    assert_true(norm == 0.0);

    /* encode_into */
    assert_int_equal(fl_dp_central_encode_into(NULL, w8, 4, 8, 64, u, 4, &p, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(rng, NULL, 4, 8, 64, u, 4, &p, NULL),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_central_encode_into: NULL vector");
    assert_int_equal(fl_dp_central_encode_into(rng, w8, 4, 8, 64, NULL, 4, &p, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(rng, w8, 3, 8, 64, u, 4, &p, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "out_len 3 != dim 4"));
    assert_int_equal(fl_dp_central_encode_into(rng, w8, 4, 2, 16, u, 4, &p, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(rng, w8, 4, 8, 0, u, 4, &p, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_encode_into(rng, w8, 4, 4, 33, u, 4, &p, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "word_bytes must be 4 or 8"));
    assert_int_equal(fl_dp_central_encode_into(rng, w8, 4, 8, 64, u, 4, &bad, NULL),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_central_encode_into: invalid params");
    assert_int_equal(fl_dp_central_encode_into(rng, NULL, 0, 8, 64, NULL, 0, &p, &norm), FL_OK);
    /* The full 64-bit modulus equals fl_dp_central_encode's output bit for bit. */
    fl_dp_rng *a = seeded(3), *b = seeded(3);
    assert_int_equal(fl_dp_central_encode(a, q, u, 4, &p, NULL, NULL), FL_OK);
    assert_int_equal(fl_dp_central_encode_into(b, w8, 4, 8, 64, u, 4, &p, NULL), FL_OK);
    for (int i = 0; i < 4; i++)
        assert_true(w8[i] == (uint64_t)q[i]);
    fl_dp_rng_destroy(a);
    fl_dp_rng_destroy(b);

    /* noise */
    int64_t sum[3] = {10, 20, 30};
    assert_int_equal(fl_dp_central_noise(NULL, sum, 3, &p), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_central_noise(rng, NULL, 3, &p), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_central_noise: invalid arguments");
    assert_int_equal(fl_dp_central_noise(rng, sum, 3, &bad), FL_ERR_MISUSE);
    assert_int_equal(sum[0], 10);
    assert_int_equal(fl_dp_central_noise(rng, NULL, 0, &p), FL_OK);
    fl_dp_rng_destroy(rng);
}

/* ---- distributed DP ---- */

static void dist_params(fl_dp_distributed_params *p) {
    fl_dp_distributed_params_init(p);
    p->dim = 5;
    p->clip = 1.0;
    p->granularity = 0.01;
    p->modulus_bits = 24;
    p->sigma2_num = 4;
    p->sigma2_den = 1;
}

static void test_distributed_params(void **state) {
    (void)state;
    fl_dp_distributed_params_init(NULL);
    fl_dp_distributed_params p, bad;
    dist_params(&p);
    fl_dp_distributed_info info;
    assert_int_equal(fl_dp_distributed_info_get(&info, &p, 3), FL_OK);
    assert_int_equal(fl_dp_distributed_info_get(NULL, &p, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_info_get(&info, NULL, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_info_get(&info, &p, 0), FL_ERR_MISUSE); /* < n_min */
    float out[5];
    uint64_t sum[8] = {0};
    for (int f = 0; f < 17; f++) {
        bad = p;
        int shape = 1; /* fields that decode checks too */
        switch (f) {
        case 0: bad.struct_size = 4; break;
        case 1: bad.dim = 0; break;
        case 2: bad.dim = ((size_t)1 << 40) + 1; break;
        case 3: bad.clip = INFINITY; break;
        case 4: bad.clip = -1; break;
        case 5: bad.beta = -0.5; break;
        case 6: bad.beta = 1.0; break;
        case 7: bad.modulus_bits = 1; break;
        case 8: bad.modulus_bits = 63; break;
        case 9: bad.n_min = 0; break;
        case 10: bad.granularity = INFINITY; break;
        case 11: bad.granularity = 0; break;
        case 12: bad.sigma2_num = 0; shape = 0; break;
        case 13: bad.sigma2_den = 0; shape = 0; break;
        case 14: bad.granularity = 0x1p-62; shape = 0; break; /* clip / gamma >= 2^61 */
        case 15: bad.granularity = 1.0 / (0x1p60 * 1.9); shape = 0; break; /* Delta^2 >= 2^120 */
        case 16: bad.sigma2_num = FL_DP_SIGMA2_MAX + 1; shape = 0; break;
        }
        assert_int_equal(fl_dp_distributed_info_get(&info, &bad, 3), FL_ERR_MISUSE);
        if (shape)
            assert_int_equal(fl_dp_distributed_decode(out, sum, 8, &bad, rot_seed, NULL),
                             FL_ERR_MISUSE);
    }
    /* Delta^2 below 1: l2 bound 0, infinite noise multiplier. */
    bad = p;
    bad.dim = 1;
    bad.clip = 1e-9;
    bad.granularity = 1.0;
    bad.beta = 0.999;
    assert_int_equal(fl_dp_distributed_info_get(&info, &bad, 1), FL_OK);
    assert_true(info.l2_bound == 0.0 && isinf(info.noise_multiplier) && info.dim_padded == 1);
}

/* tau sums the n - 1 terms exp(-2 pi^2 sc2 k/(k+1)) up to k = 2^20 and bounds the rest. The
 * terms shrink with k, so the bound must be the first remaining term (k = 2^20 + 1), not the
 * limit exp(-2 pi^2 sc2), which would under-state tau and so the privacy loss. */
static void test_distributed_tau_many_clients(void **state) {
    (void)state;
    fl_dp_distributed_params p;
    dist_params(&p);
    p.sigma2_num = 1;
    p.sigma2_den = 16; /* sc2 = 1/16: terms about 0.29 */
    fl_dp_distributed_info small, big;
    const uint32_t kmax = (uint32_t)1 << 20;
    assert_int_equal(fl_dp_distributed_info_get(&small, &p, kmax + 1), FL_OK);
    assert_int_equal(fl_dp_distributed_info_get(&big, &p, kmax + 1001), FL_OK);
    const double c = -2 * M_PI * M_PI / 16.0;
    double exact = 0; /* 10 sum of the 1000 terms k = kmax + 1 .. kmax + 1000 */
    for (uint32_t k = kmax + 1; k <= kmax + 1000; k++)
        exact += 10 * exp(c * (double)k / (double)(k + 1));
    double extra = big.tau - small.tau;
    assert_true(extra >= exact);                /* an upper bound */
    assert_true(extra - exact < 1e-6 * exact); /* and a tight one */
    /* The first 2^20 terms lie between the limit term and the k = 1 term. */
    assert_true(small.tau > 10 * (double)kmax * exp(c) &&
                small.tau < 10 * (double)kmax * exp(c / 2));
}

static void test_distributed_choose_edges(void **state) {
    (void)state;
    fl_dp_distributed_params p, bad;
    dist_params(&p);
    assert_int_equal(fl_dp_distributed_choose(&p, 1.0, 10, 1e-9), FL_OK);
    dist_params(&p);
    for (int f = 0; f < 9; f++) {
        bad = p;
        double z = 1.0, w = 1e-9;
        uint32_t n = 10;
        switch (f) {
        case 0: z = INFINITY; break;
        case 1: z = 0.0; break;
        case 2: z = NAN; break;
        case 3: bad.n_min = 11; break; /* n_max < n_min */
        case 4: w = 0.0; break;
        case 5: w = 1.0; break;
        case 6: w = NAN; break;
        case 7: bad.modulus_bits = 70; break;
        case 8: bad.struct_size = 0; break;
        }
        assert_int_equal(fl_dp_distributed_choose(&bad, z, n, w), FL_ERR_MISUSE);
        /* Nothing is filled in on failure. */
        assert_true(bad.granularity == p.granularity && bad.sigma2_num == p.sigma2_num);
    }
    /* A noise multiplier so small that the per-client variance is below 2^-20: it is rounded
     * up to the smallest representable 1/2^20. */
    dist_params(&p);
    p.dim = 1;
    p.modulus_bits = 20;
    assert_int_equal(fl_dp_distributed_choose(&p, 1e-9, 1, 1e-6), FL_OK);
    assert_true(p.sigma2_num == 1 && p.sigma2_den == ((uint64_t)1 << 20));
    /* A tiny multiplier with many bits: the grid would need c / gamma >= 2^61. */
    dist_params(&p);
    p.dim = (size_t)1 << 20;
    p.modulus_bits = 62;
    fl_dp_distributed_params before = p;
    assert_int_equal(fl_dp_distributed_choose(&p, 1e-13, 1, 1e-6), FL_ERR_RANGE);
    assert_true(p.granularity == before.granularity);
}

static void test_distributed_calls(void **state) {
    (void)state;
    fl_dp_distributed_params p, bad;
    dist_params(&p);
    bad = p;
    bad.n_min = 0;
    fl_dp_rng *rng = seeded(4);
    float u[5] = {0.1f, 0.2f, -0.3f, 0.4f, 0.0f};
    uint64_t enc[8];
    double buf[8];

    /* encode */
    assert_int_equal(fl_dp_distributed_encode(NULL, enc, 8, u, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode(rng, enc, 8, u, &bad, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_distributed_encode: invalid params");
    assert_int_equal(fl_dp_distributed_encode(rng, NULL, 8, u, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode(rng, enc, 8, NULL, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode(rng, enc, 8, u, &p, NULL, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode(rng, enc, 5, u, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "out_len != 8"));
    assert_int_equal(fl_dp_distributed_encode(rng, enc, 8, u, &p, rot_seed, NULL, &bad_alloc),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_distributed_encode: bad allocator");

    /* encode_inplace */
    for (int i = 0; i < 5; i++)
        buf[i] = u[i];
    assert_int_equal(fl_dp_distributed_encode_inplace(NULL, buf, 8, 8, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, buf, 8, 8, &bad, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_distributed_encode_inplace: invalid params");
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, NULL, 8, 8, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, buf, 8, 8, &p, NULL, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, buf, 7, 8, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "buf_len < 8"));
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, buf, 8, 2, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    p.modulus_bits = 40;
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, buf, 8, 4, &p, rot_seed, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "modulus_bits <= 32"));
    p.modulus_bits = 24;
    assert_int_equal(
        fl_dp_distributed_encode_inplace(rng, buf, 8, 8, &p, rot_seed, NULL, &bad_alloc),
        FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_distributed_encode_inplace: bad allocator");
    /* Nothing above touched the update. */
    for (int i = 0; i < 5; i++)
        assert_true(buf[i] == (double)u[i]);

    /* decode */
    float out[5];
    uint64_t sum[8] = {0};
    assert_int_equal(fl_dp_distributed_decode(NULL, sum, 8, &p, rot_seed, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_decode(out, NULL, 8, &p, rot_seed, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_decode(out, sum, 8, &p, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_decode(out, sum, 8, &p, rot_seed, &bad_alloc),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_distributed_decode(out, sum, 8, &p, rot_seed, NULL), FL_OK);
    for (int i = 0; i < 5; i++)
        assert_true(out[i] == 0.0f);
    fl_dp_rng_destroy(rng);
}

/* ---- adaptive clipping ---- */

static void test_adaptive_clip_arguments(void **state) {
    (void)state;
    fl_dp_adaptive_clip_config_init(NULL);
    fl_dp_adaptive_clip_config c, bad;
    fl_dp_adaptive_clip_config_init(&c);
    fl_dp_adaptive_clip st;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &c), FL_OK);
    assert_int_equal(fl_dp_adaptive_clip_init(NULL, &c), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_init(&st, NULL), FL_ERR_MISUSE);
    for (int f = 0; f < 17; f++) {
        bad = c;
        switch (f) {
        case 0: bad.struct_size = 1; break;
        case 1: bad.initial_clip = INFINITY; break;
        case 2: bad.initial_clip = 0; break;
        case 3: bad.target_quantile = 0; break;
        case 4: bad.target_quantile = 1; break;
        case 5: bad.learning_rate = INFINITY; break;
        case 6: bad.learning_rate = 0; break;
        case 7: bad.min_clip = INFINITY; break;
        case 8: bad.min_clip = -1; break;
        case 9: bad.max_clip = INFINITY; break;
        case 10: bad.max_clip = -1; break;
        case 11: bad.min_clip = 2; bad.max_clip = 1; break;
        case 12: bad.bit_sigma2_num = 0; break;
        case 13: bad.bit_sigma2_den = FL_DP_SIGMA2_MAX + 1; break;
        case 14: bad.target_quantile = NAN; break;
        case 15: bad.min_clip = NAN; break;
        case 16: bad.max_clip = NAN; break;
        }
        memset(&st, 0x77, sizeof st);
        assert_int_equal(fl_dp_adaptive_clip_init(&st, &bad), FL_ERR_MISUSE);
    }
    /* min_clip with max_clip 0 (no upper bound) is valid and holds C up. */
    bad = c;
    bad.min_clip = 0.09;
    bad.learning_rate = 5.0;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &bad), FL_OK);
    assert_int_equal(fl_dp_adaptive_clip_update_noised(&st, 10, 10), FL_OK); /* all unclipped */
    assert_true(st.clip == 0.09);

    fl_dp_rng *rng = seeded(5);
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &c), FL_OK);
    assert_int_equal(fl_dp_adaptive_clip_update(NULL, rng, 1, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update(&st, NULL, 1, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update(&st, rng, 1, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update(&st, rng, 3, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update(&st, rng, 1, ((uint64_t)1 << 62) + 1, NULL),
                     FL_ERR_MISUSE);
    /* A state whose noise variance was changed to an invalid one after init. */
    fl_dp_adaptive_clip broken = st;
    broken.cfg.bit_sigma2_den = 0;
    assert_int_equal(fl_dp_adaptive_clip_update(&broken, rng, 1, 2, NULL), FL_ERR_MISUSE);
    assert_true(broken.rounds == 0 && broken.clip == c.initial_clip);
    /* Without the optional output the update still happens. */
    assert_int_equal(fl_dp_adaptive_clip_update(&st, rng, 1, 2, NULL), FL_OK);
    assert_int_equal(st.rounds, 1);
    assert_int_equal(fl_dp_adaptive_clip_update_noised(NULL, 1, 2), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_noised(&st, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(st.rounds, 1);

    double zd = -1;
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(NULL, 1.0, 10.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, INFINITY, 10.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 0.0, 10.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 1.0, INFINITY), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 1.0, -1.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 1.0, 0.5), FL_ERR_MISUSE);
    assert_true(zd == -1);
    fl_dp_rng_destroy(rng);
}

/* ---- lattice, clipping, rotation ---- */

static void test_lattice_clip_rotation_arguments(void **state) {
    (void)state;
    float x[3] = {1.0f, -2.0f, 0.5f}, y[3];
    int64_t q[3];
    assert_int_equal(fl_dp_lattice_encode(NULL, x, 3, 0.5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_encode(q, NULL, 3, 0.5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_encode(NULL, NULL, 0, 0.5), FL_OK);
    assert_int_equal(fl_dp_lattice_encode(q, x, 3, INFINITY), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_encode(q, x, 3, 0.0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_encode(q, x, 3, 0.5), FL_OK);
    assert_true(q[0] == 2 && q[1] == -4 && q[2] == 1);
    assert_int_equal(fl_dp_lattice_decode(NULL, q, 3, 0.5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_decode(y, NULL, 3, 0.5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_decode(NULL, NULL, 0, 0.5), FL_OK);
    assert_int_equal(fl_dp_lattice_decode(y, q, 3, NAN), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_decode(y, q, 3, -0.5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_lattice_decode(y, q, 3, 0.5), FL_OK);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0.5f);

    double norm = -1;
    assert_int_equal(fl_dp_l2_norm(NULL, x, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_l2_norm(&norm, NULL, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_l2_norm(&norm, NULL, 0), FL_OK);
    assert_true(norm == 0.0);
    size_t sizes[2] = {1, 2};
    double clips[2] = {1.0, 1.0};
    assert_int_equal(fl_dp_clip_l2_layers(NULL, 3, sizes, clips, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2_layers(x, 3, NULL, clips, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2_layers(x, 3, sizes, NULL, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_clip_l2_layers(NULL, 0, NULL, NULL, 0, NULL), FL_OK);
    assert_true(x[0] == 1.0f && x[1] == -2.0f);
    assert_true(fl_dp_clip_layers_total(NULL, 2) == 0.0);

    double v[4] = {1, 2, 3, 4};
    uint8_t seed[FL_DP_SEED_BYTES] = {1};
    assert_int_equal(fl_dp_rotation_forward(v, 3, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_forward(NULL, 4, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_forward(v, 4, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_inverse(v, 0, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_inverse(NULL, 4, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_inverse(v, 4, NULL), FL_ERR_MISUSE);
    /* A power of two above the 2^40 limit is refused before x is read. */
    assert_int_equal(fl_dp_rotation_forward(v, (size_t)1 << 41, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_inverse(v, (size_t)1 << 41, seed), FL_ERR_MISUSE);
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4);
}

/* ---- samplers and the variance helper ---- */

static void test_sampler_arguments(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(6);
    int64_t v[4] = {0, 0, 0, 0};
    assert_int_equal(fl_dp_discrete_gaussian(rng, v, 4, 1, FL_DP_SIGMA2_MAX + 1), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "outside [1, 2^40]"));
    assert_int_equal(fl_dp_discrete_gaussian_add(NULL, v, 4, 1, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_gaussian_add(rng, NULL, 4, 1, 1), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_discrete_gaussian_add: vec is NULL");
    assert_int_equal(fl_dp_discrete_gaussian_add(rng, NULL, 0, 1, 1), FL_OK);
    assert_int_equal(fl_dp_discrete_gaussian_add(rng, v, 4, 0, 1), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "out of range"));
    assert_true(v[0] == 0 && v[3] == 0);

    /* Adding to a value at the int64 limit overflows for any non-zero sample: reported with the
     * element's index, the elements before it noised, the rest unchanged (CKS20 path, n < 1024). */
    int64_t w[8];
    for (int i = 0; i < 8; i++)
        w[i] = INT64_MAX;
    w[0] = 0;
    fl_status st = FL_OK;
    for (int tries = 0; tries < 64 && st == FL_OK; tries++) {
        w[1] = INT64_MAX;
        st = fl_dp_discrete_gaussian_add(rng, w, 2, 100, 1);
    }
    assert_int_equal(st, FL_ERR_RANGE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "element 1 overflows int64"));
    assert_true(w[1] == INT64_MAX);
    st = FL_OK;
    for (int tries = 0; tries < 64 && st == FL_OK; tries++) {
        w[1] = INT64_MIN;
        st = fl_dp_discrete_gaussian_add(rng, w, 2, 100, 1);
    }
    assert_int_equal(st, FL_ERR_RANGE);
    assert_true(w[1] == INT64_MIN);
    fl_dp_rng_destroy(rng);
}

static void test_sampler_add_overflow_table(void **state) {
    (void)state;
    /* The same through the table sampler (n >= 1024): the index of the first overflow. */
    fl_dp_rng *rng = seeded(7);
    enum { N = 2048 };
    static int64_t w[N];
    for (int i = 0; i < N; i++)
        w[i] = 0;
    w[1500] = INT64_MAX;
    fl_status st = FL_OK;
    for (int tries = 0; tries < 64 && st == FL_OK; tries++) {
        w[1500] = INT64_MAX;
        st = fl_dp_discrete_gaussian_add(rng, w, N, 100, 1);
    }
    assert_int_equal(st, FL_ERR_RANGE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "element 1500 overflows int64"));
    assert_true(w[1500] == INT64_MAX);
    st = FL_OK;
    for (int tries = 0; tries < 64 && st == FL_OK; tries++) {
        w[1500] = INT64_MIN;
        st = fl_dp_discrete_gaussian_add(rng, w, N, 100, 1);
    }
    assert_int_equal(st, FL_ERR_RANGE);
    assert_true(w[1500] == INT64_MIN);
    fl_dp_rng_destroy(rng);
}

static void test_variance_to_rational_rounding(void **state) {
    (void)state;
    uint64_t num = 0, den = 0;
    assert_int_equal(fl_dp_variance_to_rational(NULL, &den, 1.0, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&num, NULL, 1.0, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, 1.0, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, 1.0, ((uint64_t)1 << 20) + 1),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, INFINITY, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, 0.0, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, 0x1p40 + 1, 1), FL_ERR_MISUSE);
    /* 5.0 / 3.0 as a double lies above 5/3, but x * 3 rounds to exactly 5.0: the smallest
     * num / 3 >= x is 6 / 3 = 2, found by the exact (fma) remainder check. */
    double x = 5.0 / 3.0;
    assert_true(x * 3.0 == 5.0 && fma(x, 3.0, -5.0) > 0);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, x, 3), FL_OK);
    assert_true(num == 2 && den == 1);
    /* The same effect at the top of the range: x * 3 rounds to 2^40 but x > 2^40 / 3, so num
     * would be 2^40 + 1: refused rather than rounded down. */
    double y = nextafter(0x1p40 / 3.0, INFINITY);
    if (y * 3.0 != 0x1p40)
        y = nextafter(y, INFINITY);
    assert_true(y * 3.0 == 0x1p40 && fma(y, 3.0, -0x1p40) > 0);
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, y, 3), FL_ERR_MISUSE);
    /* Exactly representable values are kept, reduced. */
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, 2.5, 4), FL_OK);
    assert_true(num == 5 && den == 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_central_params),
        cmocka_unit_test(test_central_calls),
        cmocka_unit_test(test_distributed_params),
        cmocka_unit_test(test_distributed_tau_many_clients),
        cmocka_unit_test(test_distributed_choose_edges),
        cmocka_unit_test(test_distributed_calls),
        cmocka_unit_test(test_adaptive_clip_arguments),
        cmocka_unit_test(test_lattice_clip_rotation_arguments),
        cmocka_unit_test(test_sampler_arguments),
        cmocka_unit_test(test_sampler_add_overflow_table),
        cmocka_unit_test(test_variance_to_rational_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
