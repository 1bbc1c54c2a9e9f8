/* The SDK's own crypto primitives on libsodium (the normal build): SHA-256 (OpenSSL's for
 * long inputs), strict base64, Ed25519 verification of the coordinator's signatures and OS
 * randomness. The embedded
 * profile swaps this file for crypto_mbedtls.c; both behave the same on every input
 * (tests/client-sdk/test_crypto_profiles.c). */

#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "client_internal.h"

bool fl__client_unbase64(uint8_t *out, size_t n, const char *s) {
    size_t got = 0;
    const char *end = NULL;
    size_t slen = strlen(s);
    if (slen != 4 * ((n + 2) / 3))
        return false;
    if (sodium_base642bin(out, n, s, slen, NULL, &got, &end, sodium_base64_VARIANT_ORIGINAL) != 0)
        return false;
    return got == n && end == s + slen;
}

/* Task and model bodies are checked against their SHA-256 on every round (a model of d
 * floats is 4d bytes). OpenSSL's SHA-256, already linked for the secagg backend, uses the
 * CPU's SHA instructions: 4 MB in 2.4 ms here against 12 ms for libsodium's portable code.
 * libsodium stays for short inputs (OpenSSL's per-call setup) and if OpenSSL fails; both
 * give the same digest (tests/client-sdk/test_crypto_profiles.c runs both paths). */
#define FL__CLIENT_SHA256_EVP_MIN 1024

void fl__client_sha256(uint8_t out[32], const void *data, size_t len) {
    unsigned int n = 0;
    if (len >= FL__CLIENT_SHA256_EVP_MIN &&
        EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32)
        return;
    crypto_hash_sha256(out, data, len);
}

int fl__client_ed25519_verify(const uint8_t sig[64], const uint8_t *msg, size_t len,
                              const uint8_t pk[32]) {
    return crypto_sign_verify_detached(sig, msg, len, pk) == 0 ? FL_OK : FL_ERR_CRYPTO;
}

void fl__client_random(void *out, size_t n) {
    /* sodium_init is idempotent and thread-safe; randombytes_buf works without it too but
     * the call makes the choice of source explicit. */
    if (sodium_init() < 0) {
        /* Cannot happen on a supported platform; fall through to randombytes, which aborts
         * inside libsodium only if the OS has no randomness at all. */
    }
    randombytes_buf(out, n);
}
