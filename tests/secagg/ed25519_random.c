/* Ed25519, mbedTLS backend against libsodium on 1,000 random seeds and messages (lengths
 * 0..300): byte-identical public keys, secret keys and signatures (Ed25519 is deterministic),
 * each backend verifies the other's signature, and one flipped bit (rotating over the
 * signature, the message and the public key) is rejected by both. The edge cases are in
 * test_ed25519_mbedtls.c and ed25519_edge.txt. Skipped when mbedTLS is not built.
 *
 * Usage: test_ed25519_random [PART PARTS]. Case i draws its randomness from a stream seeded
 * by i, and PART of PARTS runs cases i with i * PARTS / 1000 == PART; ctest runs the 1,000
 * cases as four parts (ed25519.cmake) so that each stays short under ASan. No arguments:
 * all 1,000. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "fl_test.h"
#include "test_sa_harness.h"

static const struct fl__sa_crypto *S, *M; /* sodium-openssl (reference), mbedtls */

/* Deterministic test randomness (splitmix64), reseeded per case so a case can be replayed
 * alone. */
static uint64_t rng_state;
static unsigned part = 0, parts = 1;

static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(sa_rng_next(&rng_state) >> 24);
}

static size_t below(size_t n) {
    return (size_t)(sa_rng_next(&rng_state) % n);
}

#define RANDOM_CASES 1000
#define MAX_MSG 300

static void test_random_equivalence(void **state) {
    (void)state;
    S = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    M = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    assert_non_null(S);
    if (!M) {
        print_message("mbedtls backend not built: skipped\n");
        skip();
    }
    uint8_t seed[32], pk_s[32], pk_m[32], sk_s[64], sk_m[64], sig_s[64], sig_m[64];
    uint8_t msg[MAX_MSG], bad[MAX_MSG > 64 ? MAX_MSG : 64];
    size_t flips[3] = {0, 0, 0};
    unsigned ran = 0;
    for (int i = 0; i < RANDOM_CASES; i++) {
        if ((unsigned)i * parts / RANDOM_CASES != part)
            continue;
        ran++;
        rng_state = 0x25519u + 0x9E3779B97F4A7C15ull * (uint64_t)i;
        size_t len = i < 8 ? (size_t)i : below(MAX_MSG + 1);
        fill(seed, sizeof(seed));
        fill(msg, len);
        assert_int_equal(S->ed25519_keypair(pk_s, sk_s, seed), 0);
        assert_int_equal(M->ed25519_keypair(pk_m, sk_m, seed), 0);
        assert_memory_equal(pk_s, pk_m, 32);
        assert_memory_equal(sk_s, sk_m, 64);
        const uint8_t *mp = len ? msg : NULL;
        assert_int_equal(S->ed25519_sign(sig_s, mp, len, sk_s), 0);
        assert_int_equal(M->ed25519_sign(sig_m, mp, len, sk_m), 0);
        assert_memory_equal(sig_s, sig_m, 64); /* deterministic: byte-identical */
        /* Each verifies the other's (equal bytes, so one call per backend). */
        assert_int_equal(S->ed25519_verify(sig_m, mp, len, pk_m), 0);
        assert_int_equal(M->ed25519_verify(sig_s, mp, len, pk_s), 0);
        /* One flipped bit, rotating over signature, message and key: both reject. */
        int where = i % 3;
        if (where == 1 && len == 0)
            where = 0;
        flips[where]++;
        if (where == 0) {
            memcpy(bad, sig_s, 64);
            bad[below(64)] ^= (uint8_t)(1u << below(8));
            assert_int_equal(S->ed25519_verify(bad, mp, len, pk_s), -1);
            assert_int_equal(M->ed25519_verify(bad, mp, len, pk_s), -1);
        } else if (where == 1) {
            memcpy(bad, msg, len);
            bad[below(len)] ^= (uint8_t)(1u << below(8));
            assert_int_equal(S->ed25519_verify(sig_s, bad, len, pk_s), -1);
            assert_int_equal(M->ed25519_verify(sig_s, bad, len, pk_s), -1);
        } else {
            memcpy(bad, pk_s, 32);
            bad[below(32)] ^= (uint8_t)(1u << below(8));
            assert_int_equal(S->ed25519_verify(sig_s, mp, len, bad), -1);
            assert_int_equal(M->ed25519_verify(sig_s, mp, len, bad), -1);
        }
    }
    print_message("part %u of %u: %u of %d cases; flipped bits in sig/msg/pk: %zu/%zu/%zu\n", part,
                  parts, ran, RANDOM_CASES, flips[0], flips[1], flips[2]);
    assert_true(ran > 0);
}

int main(int argc, char **argv) {
    if (argc == 3) {
        char *e1 = NULL, *e2 = NULL;
        unsigned long p = strtoul(argv[1], &e1, 10), n = strtoul(argv[2], &e2, 10);
        if (*e1 || *e2 || n < 1 || n > RANDOM_CASES || p >= n) {
            fprintf(stderr, "usage: %s [PART PARTS] (0 <= PART < PARTS <= %d)\n", argv[0],
                    RANDOM_CASES);
            return 2;
        }
        part = (unsigned)p;
        parts = (unsigned)n;
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [PART PARTS]\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_equivalence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
