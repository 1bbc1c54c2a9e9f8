/* Tags of posted bodies (coordinator/src/util.c, fl__coord_body_tag): the coordinator tells
 * an idempotent retry (same bytes) from a conflicting one (409) by a Poly1305 tag under a
 * per-process random key, computed through OpenSSL while the body arrives or through
 * libsodium when OpenSSL's MAC is missing. Both must give the RFC 8439 tag, the same tag for
 * every length (block and chunk edges included), and a different tag for any one-bit
 * change. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "fl_test.h"

enum { TAG = 16 };

/* Internal (coordinator/src/coord_internal.h), linked from the static library. */
void fl__coord_poly1305(const EVP_MAC *mac, const uint8_t key[32], uint8_t out[TAG],
                        const void *data, size_t len);

static EVP_MAC *fetch(void) {
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "POLY1305", NULL);
    assert_non_null(mac);
    return mac;
}

/* RFC 8439 section 2.5.2. */
static void test_rfc8439_vector(void **state) {
    (void)state;
    static const uint8_t key[32] = {
        0x85, 0xd6, 0xbe, 0x78, 0x57, 0x55, 0x6d, 0x33, 0x7f, 0x44, 0x52,
        0xfe, 0x42, 0xd5, 0x06, 0xa8, 0x01, 0x03, 0x80, 0x8a, 0xfb, 0x0d,
        0xb2, 0xfd, 0x4a, 0xbf, 0xf6, 0xaf, 0x41, 0x49, 0xf5, 0x1b};
    static const uint8_t want[TAG] = {0xa8, 0x06, 0x1d, 0xc1, 0x30, 0x51, 0x36, 0xc6,
                                      0xc2, 0x2b, 0x8b, 0xaf, 0x0c, 0x01, 0x27, 0xa9};
    static const char msg[] = "Cryptographic Forum Research Group";
    EVP_MAC *mac = fetch();
    uint8_t a[TAG], b[TAG];
    fl__coord_poly1305(mac, key, a, msg, sizeof(msg) - 1);
    fl__coord_poly1305(NULL, key, b, msg, sizeof(msg) - 1);
    assert_memory_equal(a, want, TAG);
    assert_memory_equal(b, want, TAG);
    EVP_MAC_free(mac);
}

/* OpenSSL and libsodium agree at every length around the 16-byte blocks and at sizes of
 * real bodies; one flipped bit anywhere changes the tag. */
static void test_backends_agree(void **state) {
    (void)state;
    assert_true(sodium_init() >= 0);
    EVP_MAC *mac = fetch();
    uint8_t key[32];
    randombytes_buf(key, sizeof(key));
    enum { MAX = (1 << 20) + 37 };
    uint8_t *buf = malloc(MAX);
    assert_non_null(buf);
    randombytes_buf(buf, MAX);
    static const size_t lens[] = {0, 1, 15, 16, 17, 31, 32, 33, 255, 256, 4096, 400016, MAX};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        uint8_t a[TAG], b[TAG], c[TAG];
        fl__coord_poly1305(mac, key, a, buf, lens[i]);
        fl__coord_poly1305(NULL, key, b, buf, lens[i]);
        assert_memory_equal(a, b, TAG);
        if (lens[i] == 0)
            continue;
        size_t at[3] = {0, lens[i] / 2, lens[i] - 1};
        for (int j = 0; j < 3; j++) {
            buf[at[j]] ^= 0x01;
            fl__coord_poly1305(mac, key, c, buf, lens[i]);
            buf[at[j]] ^= 0x01;
            assert_memory_not_equal(a, c, TAG);
        }
    }
    /* Another key, another tag. */
    uint8_t a[TAG], b[TAG];
    fl__coord_poly1305(mac, key, a, buf, 4096);
    key[0] ^= 0x80;
    fl__coord_poly1305(mac, key, b, buf, 4096);
    assert_memory_not_equal(a, b, TAG);
    free(buf);
    EVP_MAC_free(mac);
}

/* The streamed tag (EVP_MAC_update per chunk as the body arrives, http.c) is the one-shot
 * tag (round.c's fallback) for chunk sizes that cut the 16-byte blocks anywhere. */
static void test_streamed_equals_oneshot(void **state) {
    (void)state;
    EVP_MAC *mac = fetch();
    uint8_t key[32];
    randombytes_buf(key, sizeof(key));
    enum { LEN = 100003 };
    uint8_t *buf = malloc(LEN);
    assert_non_null(buf);
    randombytes_buf(buf, LEN);
    uint8_t want[TAG];
    fl__coord_poly1305(NULL, key, want, buf, LEN);
    static const size_t chunks[] = {1, 7, 16, 17, 1000, 16384, 65536};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
        assert_non_null(ctx);
        assert_int_equal(EVP_MAC_init(ctx, key, sizeof(key), NULL), 1);
        for (size_t off = 0; off < LEN; off += chunks[i]) {
            size_t n = LEN - off < chunks[i] ? LEN - off : chunks[i];
            assert_int_equal(EVP_MAC_update(ctx, buf + off, n), 1);
        }
        uint8_t got[TAG];
        size_t tl = 0;
        assert_int_equal(EVP_MAC_final(ctx, got, &tl, sizeof(got)), 1);
        assert_int_equal(tl, TAG);
        assert_memory_equal(got, want, TAG);
        EVP_MAC_CTX_free(ctx);
    }
    free(buf);
    EVP_MAC_free(mac);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc8439_vector),
        cmocka_unit_test(test_backends_agree),
        cmocka_unit_test(test_streamed_equals_oneshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
