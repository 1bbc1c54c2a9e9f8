/* The streaming mask PRG (crypto.h prg_open/prg_next/prg_close) on every built backend and,
 * in the sodium backend, on both implementations (OpenSSL EVP, libgcrypt): the keystream
 * drawn in pieces of any size equals one prg() call, across 2^32, 2^64 and 2^128 counter
 * carries; the implementations agree with each other; prg_close wipes the context; and the
 * fused mask removal (fl__sa_mask_apply_range) that draws L1-sized chunks from it gives the
 * same accumulator as the whole-length keystream, for ranges that start and end inside a
 * chunk, through the stream and through the prg() fallback, and fails cleanly (-1, no
 * keystream or key schedule left in scratch) when the stream fails; the same for the
 * single-mask fl__sa_mask_apply (the client's). */

#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "secagg_internal.h"

/* ---- tables under test ---- */

#define MAX_TABLES 4
static struct fl__sa_crypto tables[MAX_TABLES];
static size_t ntables;

static int setup(void **state) {
    (void)state;
    const struct fl__sa_crypto *so = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    const struct fl__sa_crypto *mb = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    if (!so || !so->prg_open)
        return -1;
    ntables = 0;
    tables[ntables++] = *so; /* prg_open picks as prg does */
    tables[ntables] = *so;
    tables[ntables].name = "stream/openssl";
    tables[ntables++].prg_open = fl__sa_prg_open_openssl;
#if defined(FL_HAVE_GCRYPT)
    tables[ntables] = *so;
    tables[ntables].name = "stream/libgcrypt";
    tables[ntables++].prg_open = fl__sa_prg_open_gcrypt;
#endif
    if (mb) {
        if (!mb->prg_open)
            return -1;
        tables[ntables++] = *mb;
    }
    return 0;
}

/* Counter halves of the seed: random, and placed so a carry crosses 2^128 (wrap), 2^64
 * and 2^32 within the first few blocks (as test_crypto_cross.c). */
static const uint8_t carries[][16] = {
    {0},
    {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
     0xf0},
    {0x12, 0x34, 0, 0, 0, 0, 0, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfd},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};
#define NCARRIES (sizeof(carries) / sizeof(carries[0]))

static void make_seed(uint8_t seed[32], size_t c, size_t salt) {
    assert_int_equal(tables[0].random(seed, 32), 0);
    seed[0] ^= (uint8_t)salt;
    if (c > 0)
        memcpy(seed + 16, carries[c], 16);
}

/* Split patterns (piece sizes, repeated until the total); 0 ends a pattern. */
static const size_t patterns[][8] = {
    {1, 0},
    {15, 0},
    {16, 0},
    {17, 0},
    {4095, 0},
    {8192, 0},
    {1, 15, 16, 17, 4095, 8192, 3, 0},
    {7, 8193, 31, 65536, 0},
    {100003, 0},
};
#define NPATTERNS (sizeof(patterns) / sizeof(patterns[0]))
#define TOTAL 150011 /* odd, > 2^17: every pattern wraps several times */

/* Draws TOTAL bytes from t's stream in pattern p's pieces (pattern index NPATTERNS: a
 * pseudo-random mix of 0..300 and some large pieces). */
static void draw(uint8_t *out, const struct fl__sa_crypto *t, const uint8_t seed[32], size_t p) {
    _Alignas(16) uint8_t ctx[FL__SA_PRG_STREAM_MAX];
    uint32_t lcg = 12345u + (uint32_t)p;
    assert_true(t->prg_stream_size > 0 && t->prg_stream_size <= FL__SA_PRG_STREAM_MAX);
    assert_int_equal(t->prg_open(ctx, seed), 0);
    for (size_t done = 0, k = 0; done < TOTAL; k++) {
        size_t take;
        if (p < NPATTERNS) {
            if (!patterns[p][k])
                k = 0;
            take = patterns[p][k];
        } else {
            lcg = lcg * 1103515245u + 12345u;
            take = (lcg >> 8) % 301; /* includes 0-byte pieces */
            if ((lcg >> 4) % 17 == 0)
                take += 20000;
        }
        if (take > TOTAL - done)
            take = TOTAL - done;
        assert_int_equal(t->prg_next(ctx, out + done, take), 0);
        done += take;
    }
    t->prg_close(ctx);
}

/* Every table: stream in every pattern == the table's prg() == OpenSSL's prg. */
static void test_stream_equals_prg(void **state) {
    (void)state;
    uint8_t *ref = malloc(TOTAL), *ref2 = malloc(TOTAL), *got = malloc(TOTAL);
    assert_true(ref && ref2 && got);
    for (size_t c = 0; c < NCARRIES; c++) {
        for (size_t p = 0; p <= NPATTERNS; p++) {
            uint8_t seed[32];
            make_seed(seed, c, p);
            assert_int_equal(fl__sa_prg_openssl(ref, TOTAL, seed), 0);
            for (size_t i = 0; i < ntables; i++) {
                const struct fl__sa_crypto *t = &tables[i];
                assert_int_equal(t->prg(ref2, TOTAL, seed), 0);
                assert_memory_equal(ref2, ref, TOTAL);
                memset(got, 0xA5, TOTAL);
                draw(got, t, seed, p);
                if (memcmp(got, ref, TOTAL) != 0)
                    fail_msg("%s: stream differs from prg (carry %zu, pattern %zu)", t->name,
                             c, p);
            }
        }
    }
    free(ref);
    free(ref2);
    free(got);
}

/* The implementations agree with each other directly (same pattern, same seed), many
 * seeds: OpenSSL vs libgcrypt, and both vs mbedTLS where built. */
static void test_stream_impls_agree(void **state) {
    (void)state;
    if (ntables < 2)
        skip();
    uint8_t *a = malloc(TOTAL), *b = malloc(TOTAL);
    assert_true(a && b);
    for (size_t s = 0; s < 24; s++) {
        uint8_t seed[32];
        make_seed(seed, s % NCARRIES, s);
        size_t p = s % (NPATTERNS + 1);
        draw(a, &tables[1], seed, p); /* OpenSSL */
        for (size_t i = 2; i < ntables; i++) {
            draw(b, &tables[i], seed, (p + i) % (NPATTERNS + 1));
            if (memcmp(a, b, TOTAL) != 0)
                fail_msg("%s and %s differ (seed %zu)", tables[1].name, tables[i].name, s);
        }
    }
    free(a);
    free(b);
}

/* prg_close leaves every context byte the backend owns zero (the mbedTLS context holds the
 * round keys, counter and buffered keystream itself; the sodium one holds only the
 * libraries' handles, which EVP_CIPHER_CTX_free / gcry_cipher_close wipe); a failed open
 * leaves it zero too; argument checks. */
static void test_stream_close_wipes(void **state) {
    (void)state;
    for (size_t i = 0; i < ntables; i++) {
        const struct fl__sa_crypto *t = &tables[i];
        _Alignas(16) uint8_t ctx[FL__SA_PRG_STREAM_MAX];
        uint8_t seed[32], out[37];
        make_seed(seed, 0, i);
        memset(ctx, 0xA5, sizeof(ctx));
        assert_int_equal(t->prg_open(ctx, seed), 0);
        assert_int_equal(t->prg_next(ctx, out, sizeof(out)), 0);
        assert_int_equal(t->prg_next(ctx, out, 0), 0);
        assert_int_equal(t->prg_next(ctx, NULL, 0), 0);
        assert_int_equal(t->prg_next(ctx, NULL, 5), -1);
        size_t nz = 0;
        for (size_t b = 0; b < t->prg_stream_size; b++)
            nz += ctx[b] != 0;
        assert_true(nz > 0); /* open: something is there */
        t->prg_close(ctx);
        for (size_t b = 0; b < t->prg_stream_size; b++)
            if (ctx[b])
                fail_msg("%s: context byte %zu not wiped by prg_close", t->name, b);
        /* A failed open: ctx wiped, close harmless. */
        memset(ctx, 0xA5, sizeof(ctx));
        assert_int_equal(t->prg_open(ctx, NULL), -1);
        for (size_t b = 0; b < t->prg_stream_size; b++)
            if (ctx[b])
                fail_msg("%s: context byte %zu not wiped by a failed open", t->name, b);
        t->prg_close(ctx);
        t->prg_close(NULL);
        assert_int_equal(t->prg_open(NULL, seed), -1);
    }
#if !defined(FL_HAVE_GCRYPT)
    _Alignas(16) uint8_t ctx[FL__SA_PRG_STREAM_MAX];
    uint8_t seed[32] = {0};
    assert_int_equal(fl__sa_prg_open_gcrypt(ctx, seed), -1);
#endif
}

/* ---- fused mask removal over the stream ---- */

static uint32_t word_le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

enum { D = 5 * FL__SA_MASK_STREAM_CHUNK + 37 };

/* ref[i] for lo <= i < hi: init + sum_j sign_j PRG(seed_j)[i] (whole-length keystream). */
static void reference(uint32_t *ref, const uint8_t (*seeds)[32], const int *signs, size_t m,
                      size_t lo, size_t hi) {
    uint8_t *ks = malloc((size_t)D * 4);
    assert_non_null(ks);
    for (size_t i = 0; i < D; i++)
        ref[i] = (uint32_t)(i * 2654435761u);
    for (size_t j = 0; j < m; j++) {
        assert_int_equal(fl__sa_prg_openssl(ks, (size_t)D * 4, seeds[j]), 0);
        for (size_t i = lo; i < hi; i++)
            ref[i] += signs[j] > 0 ? word_le(ks + 4 * i) : 0u - word_le(ks + 4 * i);
    }
    free(ks);
}

static void test_mask_range_mid_chunk(void **state) {
    (void)state;
    const size_t C = FL__SA_MASK_STREAM_CHUNK;
    const size_t ranges[][2] = {
        {0, D},          {4, C - 1},     {C - 4, C + 4},         {3 * C - 4, 5 * C + 7},
        {C + 100, C + 101}, {8, 3 * C}, {4 * C + 12, D},        {0, 1},
    };
    uint8_t seeds[FL__SA_MASK_FUSE][32];
    int signs[FL__SA_MASK_FUSE] = {+1, -1, -1, +1};
    uint32_t *ref = malloc((size_t)D * 4), *got = malloc((size_t)D * 4);
    uint8_t *scratch = aligned_alloc(64, FL__SA_MASK_RANGE_SCRATCH);
    assert_true(ref && got && scratch);
    memset(scratch, 0, FL__SA_MASK_RANGE_SCRATCH); /* so every context byte left is the PRG's */
    for (size_t j = 0; j < FL__SA_MASK_FUSE; j++)
        make_seed(seeds[j], (j + 1) % NCARRIES, j); /* carries inside the vector */
    /* Every table, and the sodium table without its stream (the prg() fallback). */
    struct fl__sa_crypto fallback = tables[0];
    fallback.name = "prg-fallback";
    fallback.prg_stream_size = 0;
    fallback.prg_open = NULL;
    fallback.prg_next = NULL;
    fallback.prg_close = NULL;
    for (size_t ti = 0; ti <= ntables; ti++) {
        const struct fl__sa_crypto *t = ti < ntables ? &tables[ti] : &fallback;
        for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
            size_t lo = ranges[r][0], hi = ranges[r][1];
            for (size_t m = 1; m <= FL__SA_MASK_FUSE; m++) {
                reference(ref, (const uint8_t(*)[32])seeds, signs, m, lo, hi);
                for (size_t i = 0; i < D; i++)
                    got[i] = (uint32_t)(i * 2654435761u);
                assert_int_equal(fl__sa_mask_apply_range(got, lo, hi,
                                                         (const uint8_t(*)[32])seeds, signs,
                                                         m, t, scratch),
                                 0);
                if (memcmp(got, ref, (size_t)D * 4) != 0)
                    fail_msg("%s: range [%zu, %zu) with %zu masks differs", t->name, lo, hi, m);
                /* The stream contexts are wiped on success. */
                const uint8_t *ctx = scratch + (size_t)FL__SA_MASK_FUSE * 4 * C;
                for (size_t b = 0; b < (size_t)FL__SA_MASK_FUSE * FL__SA_PRG_STREAM_MAX; b++)
                    if (t->prg_open && ctx[b])
                        fail_msg("%s: stream context byte %zu left in scratch", t->name, b);
            }
        }
        /* Disjoint ranges applied one after another (as the threaded unmask does) add up
         * to the whole vector. */
        reference(ref, (const uint8_t(*)[32])seeds, signs, FL__SA_MASK_FUSE, 0, D);
        for (size_t i = 0; i < D; i++)
            got[i] = (uint32_t)(i * 2654435761u);
        static const size_t cuts[] = {0, 4, 1000, C, C + 4, 3 * C - 8, 3 * C + 400, D};
        for (size_t k = 0; k + 1 < sizeof(cuts) / sizeof(cuts[0]); k++)
            assert_int_equal(fl__sa_mask_apply_range(got, cuts[k], cuts[k + 1],
                                                     (const uint8_t(*)[32])seeds, signs,
                                                     FL__SA_MASK_FUSE, t, scratch),
                             0);
        assert_memory_equal(got, ref, (size_t)D * 4);
        /* The single-mask path (client) over the whole vector, each sign. */
        uint8_t *one = malloc((size_t)FL__SA_MASK_CHUNK * 4);
        assert_non_null(one);
        for (size_t j = 0; j < 2; j++) {
            reference(ref, (const uint8_t(*)[32])seeds + j, signs + j, 1, 0, D);
            for (size_t i = 0; i < D; i++)
                got[i] = (uint32_t)(i * 2654435761u);
            assert_int_equal(fl__sa_mask_apply(got, D, seeds[j], signs[j], t, one), 0);
            if (memcmp(got, ref, (size_t)D * 4) != 0)
                fail_msg("%s: fl__sa_mask_apply differs (sign %d)", t->name, signs[j]);
        }
        free(one);
    }
    free(ref);
    free(got);
    free(scratch);
}

/* ---- a stream that fails on demand ---- */

static const struct fl__sa_crypto *real;
static long open_calls, open_fail_at, next_calls, next_fail_at;

static int faulty_open(void *ctx, const uint8_t seed[32]) {
    if (++open_calls == open_fail_at) {
        memset(ctx, 0, real->prg_stream_size); /* as a failed open leaves it */
        return -1;
    }
    return real->prg_open(ctx, seed);
}

static int faulty_next(void *ctx, uint8_t *out, size_t n) {
    if (++next_calls == next_fail_at) {
        memset(out, 0, n); /* crypto.h: a failing prg_next wipes out */
        return -1;
    }
    return real->prg_next(ctx, out, n);
}

static void test_mask_range_stream_faults(void **state) {
    (void)state;
    uint8_t seeds[FL__SA_MASK_FUSE][32];
    int signs[FL__SA_MASK_FUSE] = {+1, -1, +1, +1};
    uint32_t *acc = calloc(D, 4);
    uint8_t *scratch = aligned_alloc(64, FL__SA_MASK_RANGE_SCRATCH);
    assert_true(acc && scratch);
    for (size_t j = 0; j < FL__SA_MASK_FUSE; j++)
        make_seed(seeds[j], 0, 40 + j);
    for (size_t ti = 0; ti < ntables; ti++) {
        real = &tables[ti];
        struct fl__sa_crypto faulty = *real;
        faulty.name = "faulty-stream";
        faulty.prg_open = faulty_open;
        faulty.prg_next = faulty_next;
        /* Each open of the 4 sources, and next calls in the first, a middle and the last
         * chunk (6 chunks of 4 sources: 24 calls). */
        static const long opens[] = {1, 2, 4}, nexts[] = {1, 3, 4, 5, 13, 22, 24};
        for (size_t k = 0; k < 3 + 7; k++) {
            open_calls = next_calls = 0;
            open_fail_at = k < 3 ? opens[k] : 0;
            next_fail_at = k < 3 ? 0 : nexts[k - 3];
            memset(scratch, 0, FL__SA_MASK_RANGE_SCRATCH);
            assert_int_equal(fl__sa_mask_apply_range(acc, 4, D, (const uint8_t(*)[32])seeds,
                                                     signs, FL__SA_MASK_FUSE, &faulty, scratch),
                             -1);
            for (size_t b = 0; b < FL__SA_MASK_RANGE_SCRATCH; b++)
                if (scratch[b])
                    fail_msg("%s: scratch byte %zu not wiped after failure %zu", real->name, b,
                             k);
        }
        /* The client's single-mask path (fl__sa_mask_apply) through the same stream: a
         * failing open or next returns -1 and leaves its scratch (context included) zero. */
        uint8_t *one = malloc((size_t)FL__SA_MASK_CHUNK * 4);
        assert_non_null(one);
        for (long k = 0; k < 4; k++) {
            open_calls = next_calls = 0;
            open_fail_at = k == 0 ? 1 : 0;
            next_fail_at = k == 0 ? 0 : (long[]){1, 2, 6}[k - 1]; /* 6 chunks of D */
            memset(one, 0, (size_t)FL__SA_MASK_CHUNK * 4);
            assert_int_equal(fl__sa_mask_apply(acc, D, seeds[0], -1, &faulty, one), -1);
            for (size_t b = 0; b < (size_t)FL__SA_MASK_CHUNK * 4; b++)
                if (one[b])
                    fail_msg("%s: single-mask scratch byte %zu not wiped (fault %ld)",
                             real->name, b, k);
        }
        open_calls = next_calls = 0;
        open_fail_at = next_fail_at = 0;
        memset(one, 0, (size_t)FL__SA_MASK_CHUNK * 4);
        assert_int_equal(fl__sa_mask_apply(acc, D, seeds[0], -1, &faulty, one), 0);
        assert_int_equal(next_calls, 6);
        for (size_t b = 0; b < (size_t)FL__SA_MASK_CHUNK * 4; b++)
            if (one[b])
                fail_msg("%s: single-mask scratch byte %zu left after success", real->name, b);
        free(one);
        /* The whole run with no fault makes exactly 24 next calls, so the last one above
         * was the last chunk's. */
        open_calls = next_calls = 0;
        open_fail_at = next_fail_at = 0;
        assert_int_equal(fl__sa_mask_apply_range(acc, 4, D, (const uint8_t(*)[32])seeds, signs,
                                                 FL__SA_MASK_FUSE, &faulty, scratch),
                         0);
        assert_int_equal(next_calls, 24);
        assert_int_equal(open_calls, 4);
    }
    free(acc);
    free(scratch);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_prg),
        cmocka_unit_test(test_stream_impls_agree),
        cmocka_unit_test(test_stream_close_wipes),
        cmocka_unit_test(test_mask_range_mid_chunk),
        cmocka_unit_test(test_mask_range_stream_faults),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
