/* The streaming mask PRG (crypto.h prg_open/prg_next/prg_close) on every built backend and,
 * in the sodium backend, on both implementations (OpenSSL EVP, libgcrypt): the keystream
 * drawn in pieces of any size equals one prg() call, across 2^32, 2^64 and 2^128 counter
 * carries; the implementations agree with each other; prg_close wipes the context; a
 * failed open leaves it wiped. (The mask code does not use the stream: docs/secagg.md,
 * "Mask removal in L1 chunks".) */

#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "crypto.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_prg),
        cmocka_unit_test(test_stream_impls_agree),
        cmocka_unit_test(test_stream_close_wipes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
