/* Cross-backend agreement: with the same inputs the sodium-openssl and mbedtls backends
 * produce the same PRG stream, X25519 keys and shared secrets, HKDF and SHA-256 outputs,
 * and AEAD ciphertexts that the other backend opens. Skipped when mbedTLS is not built. */

#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "crypto.h"

struct pair {
    const struct fl__sa_crypto *a; /* sodium-openssl */
    const struct fl__sa_crypto *b; /* mbedtls */
};

static int setup(void **state) {
    static struct pair p;
    p.a = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    p.b = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    if (!p.a)
        return -1;
    *state = &p;
    return 0;
}

#define NEED_BOTH(p)                                                                     \
    do {                                                                                 \
        if (!(p)->b) {                                                                   \
            print_message("mbedtls backend not built: skipped\n");                      \
            skip();                                                                      \
        }                                                                                \
    } while (0)

static void test_prg_same_stream(void **state) {
    struct pair *p = *state;
    NEED_BOTH(p);
    static const size_t sizes[] = {1, 15, 16, 31, 4095, 4096, 4097, 16384, 65537, 1u << 20};
    uint8_t seed[32];
    uint8_t *x = malloc(1u << 20), *y = malloc(1u << 20);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        assert_int_equal(p->a->random(seed, sizeof(seed)), 0);
        if (i == 0)
            memset(seed + 16, 0xff, 16); /* counter wrap on the first size */
        memset(x, 1, sizes[i]);
        memset(y, 2, sizes[i]);
        assert_int_equal(p->a->prg(x, sizes[i], seed), 0);
        assert_int_equal(p->b->prg(y, sizes[i], seed), 0);
        assert_memory_equal(x, y, sizes[i]);
    }
    free(x);
    free(y);
}

/* Within the sodium backend: OpenSSL's and libgcrypt's AES-CTR give the same keystream,
 * across 64- and 128-bit counter carries and every chunk boundary, and prg() equals both. */
static void test_prg_impls_same_stream(void **state) {
    struct pair *p = *state;
#if !defined(FL_HAVE_GCRYPT)
    print_message("libgcrypt not built: skipped\n");
    skip();
#endif
    static const size_t sizes[] = {1, 16, 17, 255, 16383, 16384, 16385, 65536, 100003, 1u << 20};
    static const uint8_t carries[][16] = {
        {0},                                                              /* random */
        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,                  /* 2^128 wrap */
         0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0},
        {0x12, 0x34, 0, 0, 0, 0, 0, 0x07,                                 /* 2^64 carry */
         0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe},
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfd},     /* 2^32 carry */
    };
    uint8_t seed[32];
    uint8_t *x = malloc(1u << 20), *y = malloc(1u << 20), *z = malloc(1u << 20);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    for (size_t c = 0; c < sizeof(carries) / sizeof(carries[0]); c++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            assert_int_equal(p->a->random(seed, sizeof(seed)), 0);
            if (c > 0)
                memcpy(seed + 16, carries[c], 16);
            memset(x, 1, sizes[i]);
            memset(y, 2, sizes[i]);
            memset(z, 3, sizes[i]);
            assert_int_equal(fl__sa_prg_openssl(x, sizes[i], seed), 0);
            assert_int_equal(fl__sa_prg_gcrypt(y, sizes[i], seed), 0);
            assert_int_equal(p->a->prg(z, sizes[i], seed), 0);
            assert_memory_equal(x, y, sizes[i]);
            assert_memory_equal(x, z, sizes[i]);
        }
    }
    /* Argument checks are the same on both. */
    assert_int_equal(fl__sa_prg_gcrypt(NULL, 5, seed), -1);
    assert_int_equal(fl__sa_prg_gcrypt(x, 5, NULL), -1);
    assert_int_equal(fl__sa_prg_gcrypt(NULL, 0, seed), 0);
    print_message("prg() runs on %s\n", fl__sa_prg_impl());
    free(x);
    free(y);
    free(z);
}

static void test_x25519_agree(void **state) {
    struct pair *p = *state;
    NEED_BOTH(p);
    for (int i = 0; i < 8; i++) {
        uint8_t apk[32], ask[32], bpk[32], bsk[32], pk2[32];
        uint8_t s[4][32];
        /* One key pair from each backend's generator. */
        assert_int_equal(p->a->x25519_keypair(apk, ask), 0);
        assert_int_equal(p->b->x25519_keypair(bpk, bsk), 0);
        assert_int_equal(p->b->x25519_public(pk2, ask), 0);
        assert_memory_equal(pk2, apk, 32);
        assert_int_equal(p->a->x25519_public(pk2, bsk), 0);
        assert_memory_equal(pk2, bpk, 32);
        assert_int_equal(p->a->x25519_shared(s[0], ask, bpk), 0);
        assert_int_equal(p->a->x25519_shared(s[1], bsk, apk), 0);
        assert_int_equal(p->b->x25519_shared(s[2], ask, bpk), 0);
        assert_int_equal(p->b->x25519_shared(s[3], bsk, apk), 0);
        for (int j = 1; j < 4; j++)
            assert_memory_equal(s[0], s[j], 32);
        /* Unclamped random secret keys (as raw 32 random bytes) agree too. */
        assert_int_equal(p->a->random(ask, 32), 0);
        assert_int_equal(p->a->x25519_public(apk, ask), 0);
        assert_int_equal(p->b->x25519_public(pk2, ask), 0);
        assert_memory_equal(apk, pk2, 32);
    }
}

static void test_aead_interop(void **state) {
    struct pair *p = *state;
    NEED_BOTH(p);
    static const size_t lens[] = {0, 1, 63, 64, 65, 1000, 70000};
    uint8_t key[32], nonce[12], ad[29];
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t n = lens[i];
        uint8_t *msg = malloc(n + 1), *c1 = malloc(n + 16), *c2 = malloc(n + 16);
        uint8_t *pt = malloc(n + 1);
        assert_true(msg && c1 && c2 && pt);
        assert_int_equal(p->a->random(key, 32), 0);
        assert_int_equal(p->a->random(nonce, 12), 0);
        assert_int_equal(p->a->random(ad, sizeof(ad)), 0);
        assert_int_equal(p->a->random(msg, n + 1), 0);
        size_t al = i % 2 ? sizeof(ad) : 0;
        assert_int_equal(p->a->aead_seal(c1, msg, n, al ? ad : NULL, al, nonce, key), 0);
        assert_int_equal(p->b->aead_seal(c2, msg, n, al ? ad : NULL, al, nonce, key), 0);
        assert_memory_equal(c1, c2, n + 16);
        assert_int_equal(p->b->aead_open(pt, c1, n + 16, al ? ad : NULL, al, nonce, key), 0);
        assert_memory_equal(pt, msg, n);
        assert_int_equal(p->a->aead_open(pt, c2, n + 16, al ? ad : NULL, al, nonce, key), 0);
        assert_memory_equal(pt, msg, n);
        c1[n] ^= 0x10; /* tag */
        assert_int_equal(p->b->aead_open(pt, c1, n + 16, al ? ad : NULL, al, nonce, key), -1);
        assert_int_equal(p->a->aead_open(pt, c1, n + 16, al ? ad : NULL, al, nonce, key), -1);
        free(msg);
        free(c1);
        free(c2);
        free(pt);
    }
}

static void test_hkdf_sha256_agree(void **state) {
    struct pair *p = *state;
    NEED_BOTH(p);
    uint8_t ikm[77], salt[40], info[50], o1[300], o2[300], h1[32], h2[32];
    static const size_t outl[] = {1, 16, 32, 33, 64, 100, 300};
    for (size_t i = 0; i < sizeof(outl) / sizeof(outl[0]); i++) {
        size_t il = 1 + i * 11, sl = i * 5, nl = i * 7;
        assert_int_equal(p->a->random(ikm, sizeof(ikm)), 0);
        assert_int_equal(p->a->random(salt, sizeof(salt)), 0);
        assert_int_equal(p->a->random(info, sizeof(info)), 0);
        assert_int_equal(p->a->hkdf_sha256(o1, outl[i], sl ? salt : NULL, sl, ikm, il,
                                           nl ? info : NULL, nl), 0);
        assert_int_equal(p->b->hkdf_sha256(o2, outl[i], sl ? salt : NULL, sl, ikm, il,
                                           nl ? info : NULL, nl), 0);
        assert_memory_equal(o1, o2, outl[i]);
        assert_int_equal(p->a->sha256(h1, ikm, il), 0);
        assert_int_equal(p->b->sha256(h2, ikm, il), 0);
        assert_memory_equal(h1, h2, 32);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prg_same_stream),
        cmocka_unit_test(test_prg_impls_same_stream),
        cmocka_unit_test(test_x25519_agree),
        cmocka_unit_test(test_aead_interop),
        cmocka_unit_test(test_hkdf_sha256_agree),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
