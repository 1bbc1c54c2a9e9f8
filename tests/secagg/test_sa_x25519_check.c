/* fl__sa_x25519_is_small_order (secagg/src/x25519_check.c): the X25519 public keys the server
 * refuses at ADVERTISE and the client refuses in KEYS. Checks the function against the
 * list below (derived by secagg/tools/x25519_small_order.py; ctest also reruns the script
 * against the C table), against both crypto backends (each of these keys gives an X25519
 * agreement they refuse, real keys do not), against the small-order records of
 * tests/vectors/secagg/x25519.txt (computed independently with the Python cryptography
 * package), and on near misses: every one-bit change of a listed key that is not itself
 * listed is accepted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "secagg_internal.h"

/* The seven values, little-endian with bit 255 clear; each is refused with bit 255 clear or
 * set (X25519 ignores that bit), so 14 encodings in all. */
static const char *const small_hex[7] = {
    "0000000000000000000000000000000000000000000000000000000000000000", /* 0: order 2 */
    "0100000000000000000000000000000000000000000000000000000000000000", /* 1: order 4 */
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800", /* order 8 */
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157", /* order 8 */
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", /* p - 1: order 4 */
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", /* p = 0 */
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", /* p + 1 = 1 */
};

static void unhex(uint8_t *out, size_t n, const char *hex) {
    assert_int_equal(strlen(hex), 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* Encoding e (0..13): value e / 2, bit 255 set when e is odd. */
static void encoding(uint8_t out[32], int e) {
    unhex(out, 32, small_hex[e / 2]);
    if (e & 1)
        out[31] |= 0x80;
}

/* 1 if pk is listed above (bit 255 ignored): the reference the function must match. */
static int listed(const uint8_t pk[32]) {
    uint8_t u[32], s[32];
    memcpy(u, pk, 32);
    u[31] &= 0x7f;
    for (int i = 0; i < 7; i++) {
        unhex(s, 32, small_hex[i]);
        if (memcmp(u, s, 32) == 0)
            return 1;
    }
    return 0;
}

static void test_every_encoding_refused(void **state) {
    (void)state;
    uint8_t pk[32];
    for (int e = 0; e < 14; e++) {
        encoding(pk, e);
        assert_int_equal(fl__sa_x25519_is_small_order(pk), 1);
    }
}

/* Both backends refuse an agreement with each listed key (they fail on the all-zero secret),
 * so the list names keys that really cannot be used, and they accept real keys. */
static void test_backends_refuse_the_same_keys(void **state) {
    (void)state;
    const enum fl__sa_backend_id ids[2] = {FL__SA_BACKEND_SODIUM, FL__SA_BACKEND_MBEDTLS};
    int tested = 0;
    for (int b = 0; b < 2; b++) {
        const struct fl__sa_crypto *cr = fl__sa_crypto_get(ids[b]);
        if (!cr) {
            assert_true(b == 1 && !fl_build_has("mbedtls"));
            continue;
        }
        tested++;
        for (int trial = 0; trial < 3; trial++) {
            uint8_t sk[32], pk[32], sk2[32], pk2[32], out[32], peer[32];
            assert_int_equal(cr->x25519_keypair(pk, sk), 0);
            assert_int_equal(cr->x25519_keypair(pk2, sk2), 0);
            assert_int_equal(fl__sa_x25519_is_small_order(pk), 0);
            assert_int_equal(cr->x25519_shared(out, sk, pk2), 0); /* control */
            for (int e = 0; e < 14; e++) {
                encoding(peer, e);
                if (cr->x25519_shared(out, sk, peer) == 0)
                    fail_msg("%s accepted small-order encoding %d", cr->name, e);
            }
        }
    }
    assert_true(tested >= 1);
}

/* Every X25519 record of the vector file: result = fail exactly for the refused keys. */
static void test_vector_file_agrees(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/vectors/secagg/x25519.txt", FL_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char line[512];
    uint8_t u[32];
    int have_u = 0, fails = 0, oks = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "alg = ", 6) == 0) {
            have_u = 0;
        } else if (strncmp(line, "u = ", 4) == 0) {
            unhex(u, 32, line + 4);
            have_u = 1;
        } else if (have_u && strcmp(line, "result = fail") == 0) {
            assert_int_equal(fl__sa_x25519_is_small_order(u), 1);
            fails++;
            have_u = 0;
        } else if (have_u && strncmp(line, "out = ", 6) == 0) {
            assert_int_equal(fl__sa_x25519_is_small_order(u), 0);
            oks++;
            have_u = 0;
        }
    }
    fclose(f);
    assert_int_equal(fails, 7); /* one record per value */
    assert_true(oks >= 4);
}

/* One-bit changes of each listed key, and a few neighbours of the listed values (2, 9, p - 2,
 * p + 2, 2^255 - 1): refused exactly when listed. */
static void test_near_misses(void **state) {
    (void)state;
    uint8_t pk[32];
    int accepted = 0;
    for (int e = 0; e < 14; e++) {
        for (int bit = 0; bit < 256; bit++) {
            encoding(pk, e);
            pk[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            assert_int_equal(fl__sa_x25519_is_small_order(pk), listed(pk));
            accepted += !listed(pk);
        }
    }
    assert_true(accepted > 14 * 250);
    static const char *const others[] = {
        "0200000000000000000000000000000000000000000000000000000000000000",
        "0900000000000000000000000000000000000000000000000000000000000000",
        "ebffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "efffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        unhex(pk, 32, others[i]);
        assert_int_equal(fl__sa_x25519_is_small_order(pk), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_encoding_refused),
        cmocka_unit_test(test_backends_refuse_the_same_keys),
        cmocka_unit_test(test_vector_file_agrees),
        cmocka_unit_test(test_near_misses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
