/* A random source that fails, and one whose bits are chosen by the test, through every sampler
 * and mechanism.
 *
 * Failure: the source delivers k good refills (a ChaCha20 stream) and then fails with
 * FL_ERR_IO. Whatever the operation was doing when the refill failed (rounding, a coin of the
 * CKS20 sampler, a table proposal, a comparison), it must return FL_ERR_IO, name the source
 * failure in fl_dp_rng_errmsg, keep returning it (sticky), and leave no partly noised vector
 * behind where the API promises a wipe. k is swept so that the failure lands in every stage.
 *
 * Chosen bits: all-zero bits make every Bernoulli(exp(-1)) coin succeed, so the proposal of the
 * CKS20 samplers grows until the documented FL_ERR_RANGE ("probability below 2^-1000") is
 * returned instead of a wrong sample; all-one bits do the same for the table sampler's tail. */

#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"
#include "sampler_table.h"

/* ---- sources ---- */

struct src {
    long good;         /* refills served before failing (< 0: never fail) */
    long fills;        /* refills served so far */
    fl_dp_rng *inner;  /* stream for the good refills; NULL: `byte` repeated */
    uint8_t byte;      /* constant byte when inner is NULL */
    long switch_at;    /* refills after which `byte` becomes `byte2` (< 0: never) */
    uint8_t byte2;
    const uint64_t *head; /* words placed in the first refill (may be NULL) */
    size_t nhead;
    size_t head_at;       /* ... from this word on */
};

static fl_status src_fill(void *user, uint8_t *buf, size_t n) {
    struct src *s = user;
    if (s->good >= 0 && s->fills >= s->good)
        return FL_ERR_IO;
    if (s->inner)
        assert_int_equal(fl_dp_rng_bytes(s->inner, buf, n), FL_OK);
    else
        memset(buf, s->switch_at >= 0 && s->fills >= s->switch_at ? s->byte2 : s->byte, n);
    if (s->fills == 0 && s->head)
        memcpy(buf + 8 * s->head_at, s->head, s->nhead * sizeof(uint64_t));
    s->fills++;
    return FL_OK;
}

static fl_dp_rng *failing_rng(struct src *s, long good, uint8_t tag) {
    memset(s, 0, sizeof(*s));
    s->good = good;
    uint8_t seed[FL_DP_SEED_BYTES];
    memset(seed, 0x6b, sizeof(seed));
    seed[0] = tag;
    assert_int_equal(fl_dp_rng_create_chacha20(&s->inner, seed, sizeof(seed), NULL), FL_OK);
    fl_dp_rng_source so = {sizeof(so), src_fill, s};
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create(&rng, &so, NULL), FL_OK);
    return rng;
}

static fl_dp_rng *constant_rng(struct src *s, uint8_t byte, long good) {
    memset(s, 0, sizeof(*s));
    s->good = good;
    s->byte = byte;
    s->switch_at = -1;
    fl_dp_rng_source so = {sizeof(so), src_fill, s};
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create(&rng, &so, NULL), FL_OK);
    return rng;
}

static void free_src(struct src *s, fl_dp_rng *rng) {
    fl_dp_rng_destroy(rng);
    fl_dp_rng_destroy(s->inner);
}

static int all_zero(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* ---- operations under test: each returns its status and checks its own wipe promise ---- */

/* Set while the rng is still healthy: a call that fails then must wipe what it promised to.
 * (On an rng that had already failed the encoders return before writing anything.) */
static int check_wipe;

static const uint8_t rot_seed[FL_DP_SEED_BYTES] = {1, 2, 3, 4};

enum op {
    OP_GAUSS_SMALL,   /* CKS20, sigma^2 = 1/1 */
    OP_GAUSS_TINY,    /* CKS20, sigma^2 = 1/2^40 */
    OP_GAUSS_HUGE,    /* CKS20, sigma^2 = 2^40 (128-bit coin denominators) */
    OP_GAUSS_TABLE,   /* table sampler, W = 1 */
    OP_GAUSS_TABLE_W, /* table sampler, W > 1 */
    OP_GAUSS_ADD,     /* CKS20, add */
    OP_GAUSS_ADD_TABLE,
    OP_LAPLACE,       /* scale 1 */
    OP_LAPLACE_FRAC,  /* scale 2^40 / 3 */
    OP_UNIFORM,       /* small and large bounds with rejection */
    OP_CENTRAL,
    OP_CENTRAL_INTO,
    OP_CENTRAL_NOISE,
    OP_DIST,
    OP_DIST_INPLACE,
    OP_ADAPTIVE,
    OP_COUNT
};

static fl_status run_op(enum op op, fl_dp_rng *rng) {
    static int64_t v[2048];
    static float upd[1000];
    static uint64_t w[1024];
    static double buf[1024];
    fl_status st = FL_OK;
    for (int i = 0; i < 1000; i++)
        upd[i] = (float)((i % 7) - 3) * 0.01f;
    switch (op) {
    case OP_GAUSS_SMALL: return fl_dp_discrete_gaussian(rng, v, 500, 1, 1);
    case OP_GAUSS_TINY: return fl_dp_discrete_gaussian(rng, v, 500, 1, (uint64_t)1 << 40);
    case OP_GAUSS_HUGE: return fl_dp_discrete_gaussian(rng, v, 500, (uint64_t)1 << 40, 1);
    case OP_GAUSS_TABLE: return fl_dp_discrete_gaussian(rng, v, 2048, 3, 1);
    case OP_GAUSS_TABLE_W: return fl_dp_discrete_gaussian(rng, v, 2048, 1000000, 1);
    case OP_GAUSS_ADD:
        memset(v, 0, 600 * sizeof(int64_t));
        return fl_dp_discrete_gaussian_add(rng, v, 600, 7, 2);
    case OP_GAUSS_ADD_TABLE:
        memset(v, 0, sizeof(v));
        return fl_dp_discrete_gaussian_add(rng, v, 2048, 7, 2);
    case OP_LAPLACE: return fl_dp_discrete_laplace(rng, v, 700, 1, 1);
    case OP_LAPLACE_FRAC: return fl_dp_discrete_laplace(rng, v, 700, (uint64_t)1 << 40, 3);
    case OP_UNIFORM:
        for (int i = 0; i < 600 && st == FL_OK; i++) {
            uint64_t x;
            st = fl_dp_rng_uniform(rng, &x, i & 1 ? 3 : ((uint64_t)1 << 63) + 1);
            if (st == FL_OK)
                assert_true(x < (i & 1 ? 3 : ((uint64_t)1 << 63) + 1));
        }
        return st;
    case OP_CENTRAL: {
        fl_dp_central_params p;
        fl_dp_central_params_init(&p);
        p.granularity = 1e-4;
        return fl_dp_central_encode(rng, v, upd, 1000, &p, NULL, NULL);
    }
    case OP_CENTRAL_INTO: {
        fl_dp_central_params p;
        fl_dp_central_params_init(&p);
        p.granularity = 1e-4;
        memset(w, 0xa5, sizeof(w));
        st = fl_dp_central_encode_into(rng, w, 1000, 8, 40, upd, 1000, &p, NULL);
        if (st != FL_OK && check_wipe)
            assert_true(all_zero(w, 1000 * sizeof(uint64_t)));
        return st;
    }
    case OP_CENTRAL_NOISE: {
        fl_dp_central_params p;
        fl_dp_central_params_init(&p);
        p.sigma2_num = 50;
        memset(v, 0, sizeof(v));
        st = fl_dp_central_noise(rng, v, 100, &p);
        if (st == FL_OK)
            st = fl_dp_central_noise(rng, v, 2048, &p);
        return st;
    }
    case OP_DIST:
    case OP_DIST_INPLACE: {
        fl_dp_distributed_params p;
        fl_dp_distributed_params_init(&p);
        p.dim = 1000;
        p.granularity = 1e-3;
        p.modulus_bits = 32;
        p.sigma2_num = 9;
        if (op == OP_DIST) {
            memset(w, 0xa5, sizeof(w));
            st = fl_dp_distributed_encode(rng, w, 1024, upd, &p, rot_seed, NULL, NULL);
            if (st != FL_OK && check_wipe)
                assert_true(all_zero(w, sizeof(w)));
        } else {
            for (int i = 0; i < 1000; i++)
                buf[i] = upd[i];
            st = fl_dp_distributed_encode_inplace(rng, buf, 1024, 4, &p, rot_seed, NULL, NULL);
            if (st != FL_OK && check_wipe)
                assert_true(all_zero(buf, sizeof(buf)));
        }
        return st;
    }
    case OP_ADAPTIVE: {
        fl_dp_adaptive_clip_config c;
        fl_dp_adaptive_clip_config_init(&c);
        c.bit_sigma2_num = 400;
        fl_dp_adaptive_clip s;
        assert_int_equal(fl_dp_adaptive_clip_init(&s, &c), FL_OK);
        for (int i = 0; i < 300 && st == FL_OK; i++) {
            fl_dp_adaptive_clip before = s;
            int64_t noised = -7;
            st = fl_dp_adaptive_clip_update(&s, rng, 40, 100, &noised);
            if (st != FL_OK) {
                /* State unchanged, nothing released. */
                assert_memory_equal(&s, &before, sizeof(s));
                assert_true(noised == -7);
            }
        }
        return st;
    }
    case OP_COUNT: break;
    }
    return FL_ERR_INTERNAL;
}

/* Each operation, with the source failing after 0, 1, ... refills: the first error is the
 * source's, it is sticky, and the message names it. Operations are repeated until the source
 * runs out, so every k also exercises the state right after a successful call. */
static void test_failure_everywhere(void **state) {
    (void)state;
    for (int op = 0; op < OP_COUNT; op++) {
        for (long good = 0; good < 12; good++) {
            struct src s;
            fl_dp_rng *rng = failing_rng(&s, good, (uint8_t)(op * 16 + good));
            fl_status st = FL_OK;
            int calls = 0;
            check_wipe = 1;
            while (st == FL_OK && calls < 10000) {
                st = run_op((enum op)op, rng);
                calls++;
            }
            if (st != FL_ERR_IO)
                print_message("op %d good %ld: %s\n", op, good, fl_dp_rng_errmsg(rng));
            assert_int_equal(st, FL_ERR_IO);
            assert_non_null(strstr(fl_dp_rng_errmsg(rng), "random source failed"));
            /* Sticky: the next call fails the same way without reading further. */
            long fills = s.fills;
            check_wipe = 0;
            assert_int_equal(run_op((enum op)op, rng), FL_ERR_IO);
            assert_int_equal(s.fills, fills);
            uint8_t b[16];
            assert_int_equal(fl_dp_rng_bytes(rng, b, sizeof b), FL_ERR_IO);
            free_src(&s, rng);
        }
    }
}

/* ---- chosen bits: proposals beyond the supported range ---- */

/* Zero bits: U = 0 < exp(-1) for every coin, so V counts one success per zero byte. After
 * 2049 refills of zeros (just over 2^23 bytes) the bits turn to ones and V stops past the
 * 128-bit-safe bound (for sigma^2 = 2^-40 or a Laplace scale of 2^40: X > 2^23), which must be
 * reported as FL_ERR_RANGE, not returned as a sample. */
static fl_dp_rng *long_run_rng(struct src *s) {
    fl_dp_rng *rng = constant_rng(s, 0x00, -1);
    s->switch_at = 2049;
    s->byte2 = 0xff;
    return rng;
}

static void test_cks20_proposal_overflow(void **state) {
    (void)state;
    struct src s;
    int64_t v[4] = {11, 12, 13, 14};
    fl_dp_rng *rng = long_run_rng(&s);
    assert_int_equal(fl_dp_discrete_gaussian(rng, v, 4, 1, (uint64_t)1 << 40), FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_discrete_gaussian: proposal overflow");
    fl_dp_rng_destroy(rng);

    rng = long_run_rng(&s);
    assert_int_equal(fl_dp_discrete_gaussian_add(rng, v, 4, 1, (uint64_t)1 << 40), FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_discrete_gaussian_add: proposal overflow");
    assert_true(v[0] == 11 && v[3] == 14); /* nothing added */
    fl_dp_rng_destroy(rng);

    /* Discrete Laplace with scale 2^40: U = 0 is always kept and V grows past 2^23. */
    rng = long_run_rng(&s);
    assert_int_equal(fl_dp_discrete_laplace(rng, v, 4, (uint64_t)1 << 40, 1), FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_discrete_laplace: overflow");
    fl_dp_rng_destroy(rng);

    /* The mechanisms report it too, and wipe: an all-zero update rounds to 0 on any bits. */
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = 4;
    p.sigma2_num = 1;
    p.sigma2_den = (uint64_t)1 << 40;
    float zero[4] = {0, 0, 0, 0};
    uint64_t enc[4] = {5, 5, 5, 5};
    rng = long_run_rng(&s);
    assert_int_equal(fl_dp_distributed_encode(rng, enc, 4, zero, &p, rot_seed, NULL, NULL),
                     FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_distributed_encode: sampler overflow");
    assert_true(all_zero(enc, sizeof enc));
    fl_dp_rng_destroy(rng);
    double buf[4] = {0, 0, 0, 0};
    rng = long_run_rng(&s);
    assert_int_equal(fl_dp_distributed_encode_inplace(rng, buf, 4, 8, &p, rot_seed, NULL, NULL),
                     FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng),
                        "fl_dp_distributed_encode_inplace: sampler overflow");
    assert_true(all_zero(buf, sizeof buf));
    fl_dp_rng_destroy(rng);
}

/* Stream words that make the first table proposal (W = 1 layout: column, 8-bit alias coin,
 * ...) select the tail bin of t; returns how many (0 if no column leads there). A tail column
 * with a threshold below 2^24 is reached through a tie of the coin's top 8 bits (0) and its
 * remaining 24 bits (0, from the next word). */
static size_t tail_proposal(const struct fl__dp_sampler_table *t, uint64_t head[2]) {
    for (uint32_t c = 0; c < (1u << t->kbits); c++) {
        uint64_t thr = t->col[c] & ((((uint64_t)1) << 33) - 1), alias = t->col[c] >> 33;
        uint64_t th = thr >> 24;
        if (c == t->nbody && th > 0) {
            head[0] = c; /* coin 0 < th: own bin */
            return 1;
        }
        if (alias == t->nbody && th < 255) {
            head[0] = c | (uint64_t)255 << t->kbits; /* coin 255 >= th: alias */
            return 1;
        }
    }
    uint64_t thr = t->col[t->nbody] & ((((uint64_t)1) << 33) - 1);
    if (thr == 0)
        return 0;
    head[0] = t->nbody; /* coin's top bits 0 == th: tie */
    head[1] = 0;        /* its other 24 bits 0 < thr */
    return 2;
}

/* All-one bits after a tail proposal: the geometric part G reaches 1024, beyond the supported
 * range, and the table sampler answers FL_ERR_RANGE (the public call with its message). */
static void test_table_tail_overflow(void **state) {
    (void)state;
    static struct fl__dp_sampler_table t;
    assert_int_equal(fl__dp_table_build(&t, 3, 1), FL_OK); /* what the rng will cache */
    assert_int_equal(t.wbits, 0);
    /* The proposal's word(s), then all ones (G reaches 1024). */
    uint64_t head[2];
    size_t nh = tail_proposal(&t, head);
    assert_true(nh > 0);
    struct src s;
    static int64_t v[1024];
    fl_dp_rng *rng = constant_rng(&s, 0xff, -1);
    s.head = head;
    s.nhead = nh;
    assert_int_equal(fl_dp_discrete_gaussian(rng, v, 1024, 3, 1), FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_discrete_gaussian: proposal overflow");
    fl_dp_rng_destroy(rng);
    for (int i = 0; i < 1024; i++)
        v[i] = 100;
    rng = constant_rng(&s, 0xff, -1);
    s.head = head;
    s.nhead = nh;
    assert_int_equal(fl_dp_discrete_gaussian_add(rng, v, 1024, 3, 1), FL_ERR_RANGE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_discrete_gaussian_add: proposal overflow");
    fl_dp_rng_destroy(rng);

    /* A table whose body is a single magnitude (R = 1) has tail blocks of 2^40 for
     * sigma^2 = 2^40: G = 8 already puts m = R + 2^40 G + J at 2^43, the other limit. */
    assert_int_equal(fl__dp_table_build_shape(&t, (uint64_t)1 << 40, 1, 1e-9), FL_OK);
    assert_true(t.nbody == 1 && t.r == 1 && t.tbits == 40);
    uint64_t head2[3];
    nh = tail_proposal(&t, head2);
    assert_int_equal(nh, 1);
    head2[1] = 0xff; /* G = 8 */
    rng = constant_rng(&s, 0x00, -1);
    s.head = head2;
    s.nhead = 2;
    size_t bad = 0;
    assert_int_equal(fl__dp_table_sample(rng, &t, v, 4, 0, &bad), FL_ERR_RANGE);
    assert_int_equal(bad, 4);
    fl_dp_rng_destroy(rng);
}

/* The table sampler on a source that fails in the middle of a tail proposal (the proposal is
 * the last word of the first refill, the tail's geometric part needs the next refill), and on
 * an rng that has already failed: the failure code, *bad = n, nothing else. */
static void test_table_failure_in_tail(void **state) {
    (void)state;
    static struct fl__dp_sampler_table t;
    assert_int_equal(fl__dp_table_build_shape(&t, (uint64_t)1 << 40, 1, 1e-9), FL_OK);
    uint64_t head[2];
    assert_int_equal(tail_proposal(&t, head), 1);
    struct src s;
    fl_dp_rng *rng = constant_rng(&s, 0x00, 1);
    s.head = head;
    s.nhead = 1;
    s.head_at = FL_DP_RNG_BUFFER_BYTES / 8 - 1;
    static uint8_t skip[FL_DP_RNG_BUFFER_BYTES - 8];
    assert_int_equal(fl_dp_rng_bytes(rng, skip, sizeof skip), FL_OK);
    int64_t v[4] = {1, 2, 3, 4};
    size_t bad = 0;
    assert_int_equal(fl__dp_table_sample(rng, &t, v, 4, 1, &bad), FL_ERR_IO);
    assert_int_equal(bad, 4);
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4);
    bad = 0;
    assert_int_equal(fl__dp_table_sample(rng, &t, v, 4, 0, &bad), FL_ERR_IO);
    assert_int_equal(bad, 4);
    assert_int_equal(s.fills, 1);
    fl_dp_rng_destroy(rng);
}

/* The rng's own argument checks not covered by test_rng. */
static void test_rng_arguments(void **state) {
    (void)state;
    struct src s;
    fl_dp_rng *rng = constant_rng(&s, 0x11, -1);
    uint8_t b[4] = {0};
    assert_int_equal(fl_dp_rng_bytes(rng, NULL, 4), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_rng_bytes: out is NULL");
    assert_int_equal(fl_dp_rng_bytes(rng, NULL, 0), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(rng, b, sizeof b), FL_OK);
    assert_true(b[0] == 0x11 && b[3] == 0x11);
    uint64_t u = 0;
    assert_int_equal(fl_dp_rng_uniform(NULL, &u, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rng_uniform(rng, NULL, 3), FL_ERR_MISUSE);
    assert_string_equal(fl_dp_rng_errmsg(rng), "fl_dp_rng_uniform: out is NULL");
    fl_dp_rng_destroy(rng);

    uint8_t seed[FL_DP_SEED_BYTES] = {0};
    assert_int_equal(fl_dp_rng_create_chacha20(NULL, seed, sizeof seed, NULL), FL_ERR_MISUSE);
    /* A caller source with an allocator that is invalid, or that fails. */
    fl_dp_rng_source so = {sizeof(so), src_fill, &s};
    fl_allocator broken = {sizeof(fl_allocator), NULL, NULL, NULL, NULL};
    rng = (fl_dp_rng *)&s; /* must be reset to NULL on failure */
    assert_int_equal(fl_dp_rng_create(&rng, &so, &broken), FL_ERR_MISUSE);
    assert_null(rng);
    struct fl_test_counting c = {0};
    c.fail_at = 1;
    fl_allocator a = fl_test_counting_allocator(&c);
    assert_int_equal(fl_dp_rng_create(&rng, &so, &a), FL_ERR_NOMEM);
    assert_null(rng);
    assert_int_equal(c.live, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failure_everywhere),
        cmocka_unit_test(test_cks20_proposal_overflow),
        cmocka_unit_test(test_table_tail_overflow),
        cmocka_unit_test(test_table_failure_in_tail),
        cmocka_unit_test(test_rng_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
