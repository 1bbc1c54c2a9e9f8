/* Contract tests for each crypto backend (crypto.h): table shape, argument validation,
 * zero lengths, in-place AEAD, failure wiping, PRG prefix property, key clamping,
 * Ed25519 round trip, and thread-safe randomness. */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "crypto.h"

static const enum fl__sa_backend_id all_ids[] = {FL__SA_BACKEND_SODIUM, FL__SA_BACKEND_MBEDTLS};
#define N_IDS (sizeof(all_ids) / sizeof(all_ids[0]))

static int is_zero(const uint8_t *p, size_t n) {
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

static void test_tables(void **state) {
    (void)state;
    const struct fl__sa_crypto *s = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    assert_non_null(s);
    assert_string_equal(s->name, "sodium-openssl");
    assert_ptr_equal(fl__sa_crypto_get(FL__SA_BACKEND_SODIUM), s); /* idempotent init */
    assert_null(fl__sa_crypto_get((enum fl__sa_backend_id)7));
    assert_non_null(s->ed25519_keypair);
    assert_non_null(s->ed25519_sign);
    assert_non_null(s->ed25519_verify);
    const struct fl__sa_crypto *m = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    if (fl_build_has("mbedtls"))
        assert_non_null(m); /* built with mbedTLS: the backend must be there */
    if (m) {
        assert_string_equal(m->name, "mbedtls");
        /* Ed25519 on mbedTLS's Weierstrass arithmetic (ed25519_mbedtls.c). */
        assert_non_null(m->ed25519_keypair);
        assert_non_null(m->ed25519_sign);
        assert_non_null(m->ed25519_verify);
    }
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        assert_non_null(c->random);
        assert_non_null(c->x25519_keypair);
        assert_non_null(c->x25519_public);
        assert_non_null(c->x25519_shared);
        assert_non_null(c->hkdf_sha256);
        assert_non_null(c->sha256);
        assert_non_null(c->aead_seal);
        assert_non_null(c->aead_open);
        assert_non_null(c->prg);
    }
}

static void check_null_args(const struct fl__sa_crypto *c) {
    uint8_t b32[32] = {9}, b64[64] = {0}, out[64];
    uint8_t nonce[12] = {0};
    assert_int_equal(c->random(NULL, 1), -1);
    assert_int_equal(c->random(NULL, 0), 0);
    assert_int_equal(c->x25519_keypair(NULL, b32), -1);
    assert_int_equal(c->x25519_keypair(out, NULL), -1);
    assert_int_equal(c->x25519_public(NULL, b32), -1);
    assert_int_equal(c->x25519_public(out, NULL), -1);
    assert_int_equal(c->x25519_shared(NULL, b32, b32), -1);
    assert_int_equal(c->x25519_shared(out, NULL, b32), -1);
    assert_int_equal(c->x25519_shared(out, b32, NULL), -1);
    assert_int_equal(c->hkdf_sha256(NULL, 32, NULL, 0, b32, 32, NULL, 0), -1);
    assert_int_equal(c->hkdf_sha256(out, 32, NULL, 5, b32, 32, NULL, 0), -1);
    assert_int_equal(c->hkdf_sha256(out, 32, NULL, 0, NULL, 32, NULL, 0), -1);
    assert_int_equal(c->hkdf_sha256(out, 32, NULL, 0, b32, 32, NULL, 3), -1);
    assert_int_equal(c->hkdf_sha256(out, 0, NULL, 0, NULL, 0, NULL, 0), 0);
    assert_int_equal(c->hkdf_sha256(out, 32, NULL, 0, NULL, 0, NULL, 0), 0); /* empty IKM ok */
    assert_int_equal(c->sha256(NULL, b32, 32), -1);
    assert_int_equal(c->sha256(out, NULL, 1), -1);
    assert_int_equal(c->sha256(out, NULL, 0), 0);
    assert_int_equal(c->aead_seal(NULL, b32, 32, NULL, 0, nonce, b32), -1);
    assert_int_equal(c->aead_seal(out, NULL, 32, NULL, 0, nonce, b32), -1);
    assert_int_equal(c->aead_seal(out, b32, 32, NULL, 1, nonce, b32), -1);
    assert_int_equal(c->aead_seal(out, b32, 32, NULL, 0, NULL, b32), -1);
    assert_int_equal(c->aead_seal(out, b32, 32, NULL, 0, nonce, NULL), -1);
    assert_int_equal(c->aead_seal(out, NULL, 0, NULL, 0, nonce, b32), 0);
    assert_int_equal(c->aead_open(NULL, out, 16, NULL, 0, nonce, b32), 0); /* empty msg */
    assert_int_equal(c->aead_open(NULL, b64, 48, NULL, 0, nonce, b32), -1);
    assert_int_equal(c->aead_open(out, NULL, 16, NULL, 0, nonce, b32), -1);
    assert_int_equal(c->aead_open(out, b64, 15, NULL, 0, nonce, b32), -1);
    assert_int_equal(c->aead_open(out, b64, 16, NULL, 2, nonce, b32), -1);
    assert_int_equal(c->prg(NULL, 5, b32), -1);
    assert_int_equal(c->prg(out, 5, NULL), -1);
    assert_int_equal(c->prg(NULL, 0, b32), 0);
    if (c->ed25519_sign) {
        assert_int_equal(c->ed25519_keypair(NULL, b64, b32), -1);
        assert_int_equal(c->ed25519_keypair(out, NULL, b32), -1);
        assert_int_equal(c->ed25519_keypair(out, b64, NULL), -1);
        assert_int_equal(c->ed25519_sign(NULL, b32, 1, b64), -1);
        assert_int_equal(c->ed25519_sign(out, NULL, 1, b64), -1);
        assert_int_equal(c->ed25519_sign(out, b32, 1, NULL), -1);
        assert_int_equal(c->ed25519_verify(NULL, b32, 1, b32), -1);
        assert_int_equal(c->ed25519_verify(b64, NULL, 1, b32), -1);
        assert_int_equal(c->ed25519_verify(b64, b32, 1, NULL), -1);
    }
}

static void test_null_and_empty(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (c)
            check_null_args(c);
    }
}

static void test_random(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        uint8_t a[32], b[32];
        size_t big = 5000; /* above mbedTLS's 1024-byte DRBG request limit */
        uint8_t *buf = calloc(1, big);
        assert_non_null(buf);
        assert_int_equal(c->random(a, 32), 0);
        assert_int_equal(c->random(b, 32), 0);
        assert_memory_not_equal(a, b, 32);
        assert_int_equal(c->random(buf, big), 0);
        assert_false(is_zero(buf + big - 64, 64)); /* the tail was filled too */
        free(buf);
    }
}

static void test_x25519_keys(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        uint8_t pk[32], sk[32], pk2[32], s1[32], s2[32], zero[32] = {0};
        assert_int_equal(c->x25519_keypair(pk, sk), 0);
        /* stored secret is clamped (RFC 7748 decodeScalar25519) */
        assert_int_equal(sk[0] & 7, 0);
        assert_int_equal(sk[31] & 0x80, 0);
        assert_int_equal(sk[31] & 0x40, 0x40);
        assert_int_equal(c->x25519_public(pk2, sk), 0);
        assert_memory_equal(pk, pk2, 32);
        uint8_t pkb[32], skb[32];
        assert_int_equal(c->x25519_keypair(pkb, skb), 0);
        assert_int_equal(c->x25519_shared(s1, sk, pkb), 0);
        assert_int_equal(c->x25519_shared(s2, skb, pk), 0);
        assert_memory_equal(s1, s2, 32);
        memset(s1, 0x77, sizeof(s1));
        assert_int_equal(c->x25519_shared(s1, sk, zero), -1);
        assert_true(is_zero(s1, 32)); /* no partial output on failure */
    }
}

static void test_aead_in_place_and_wipe(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        uint8_t key[32], nonce[12], msg[100], buf[116], ref[116];
        assert_int_equal(c->random(key, 32), 0);
        assert_int_equal(c->random(nonce, 12), 0);
        assert_int_equal(c->random(msg, sizeof(msg)), 0);
        assert_int_equal(c->aead_seal(ref, msg, 100, (const uint8_t *)"ad", 2, nonce, key), 0);
        memcpy(buf, msg, 100);
        assert_int_equal(c->aead_seal(buf, buf, 100, (const uint8_t *)"ad", 2, nonce, key), 0);
        assert_memory_equal(buf, ref, 116);
        assert_int_equal(c->aead_open(buf, buf, 116, (const uint8_t *)"ad", 2, nonce, key), 0);
        assert_memory_equal(buf, msg, 100);
        /* Wrong key: out is zeroed, not left with unauthenticated plaintext. */
        uint8_t out[100];
        memset(out, 0xEE, sizeof(out));
        key[0] ^= 1;
        assert_int_equal(c->aead_open(out, ref, 116, (const uint8_t *)"ad", 2, nonce, key), -1);
        assert_true(is_zero(out, sizeof(out)));
    }
}

static void test_prg_properties(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        uint8_t seed[32], seed2[32];
        size_t n = 50000;
        uint8_t *a = malloc(n), *b = malloc(n);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(c->random(seed, 32), 0);
        memcpy(seed2, seed, 32);
        seed2[31] ^= 1; /* different IV */
        assert_int_equal(c->prg(a, n, seed), 0);
        for (size_t k = 1; k < n; k = k * 3 + 1) { /* prg(k) is a prefix of prg(n) */
            memset(b, 0, n);
            assert_int_equal(c->prg(b, k, seed), 0);
            assert_memory_equal(a, b, k);
        }
        assert_int_equal(c->prg(b, n, seed2), 0);
        assert_memory_not_equal(a, b, 64);
        free(a);
        free(b);
    }
}

static void test_hkdf_limits(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        uint8_t *out = malloc(255 * 32 + 1), ikm[32] = {1};
        assert_non_null(out);
        assert_int_equal(c->hkdf_sha256(out, 255 * 32, NULL, 0, ikm, 32, NULL, 0), 0);
        assert_int_equal(c->hkdf_sha256(out, 255 * 32 + 1, NULL, 0, ikm, 32, NULL, 0), -1);
        free(out);
    }
}

static void test_ed25519_roundtrip(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    uint8_t seed[32], pk[32], sk[64], sig[64], msg[77];
    assert_int_equal(c->random(seed, 32), 0);
    assert_int_equal(c->random(msg, sizeof(msg)), 0);
    assert_int_equal(c->ed25519_keypair(pk, sk, seed), 0);
    assert_memory_equal(sk, seed, 32);
    assert_memory_equal(sk + 32, pk, 32);
    assert_int_equal(c->ed25519_sign(sig, msg, sizeof(msg), sk), 0);
    assert_int_equal(c->ed25519_verify(sig, msg, sizeof(msg), pk), 0);
    msg[5] ^= 1;
    assert_int_equal(c->ed25519_verify(sig, msg, sizeof(msg), pk), -1);
    assert_int_equal(c->ed25519_sign(sig, NULL, 0, sk), 0);
    assert_int_equal(c->ed25519_verify(sig, NULL, 0, pk), 0);
}

/* ---- thread safety of the lazily seeded randomness ---- */

struct rnd_job {
    const struct fl__sa_crypto *c;
    int failures;
    uint8_t first[32];
};

static void *rnd_worker(void *arg) {
    struct rnd_job *j = arg;
    uint8_t buf[2000];
    for (int i = 0; i < 50; i++) {
        if (j->c->random(buf, sizeof(buf)) != 0)
            j->failures++;
        if (i == 0)
            memcpy(j->first, buf, 32);
        uint8_t pk[32], sk[32];
        if (j->c->x25519_keypair(pk, sk) != 0)
            j->failures++;
    }
    return NULL;
}

static void test_random_threads(void **state) {
    (void)state;
    for (size_t i = 0; i < N_IDS; i++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(all_ids[i]);
        if (!c)
            continue;
        pthread_t th[4];
        struct rnd_job jobs[4];
        memset(jobs, 0, sizeof(jobs));
        for (int k = 0; k < 4; k++) {
            jobs[k].c = c;
            assert_int_equal(pthread_create(&th[k], NULL, rnd_worker, &jobs[k]), 0);
        }
        for (int k = 0; k < 4; k++) {
            assert_int_equal(pthread_join(th[k], NULL), 0);
            assert_int_equal(jobs[k].failures, 0);
        }
        for (int k = 1; k < 4; k++)
            assert_memory_not_equal(jobs[0].first, jobs[k].first, 32);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),          cmocka_unit_test(test_null_and_empty),
        cmocka_unit_test(test_random),          cmocka_unit_test(test_x25519_keys),
        cmocka_unit_test(test_aead_in_place_and_wipe), cmocka_unit_test(test_prg_properties),
        cmocka_unit_test(test_hkdf_limits),     cmocka_unit_test(test_ed25519_roundtrip),
        cmocka_unit_test(test_random_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
