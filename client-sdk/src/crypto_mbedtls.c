/* The SDK's own crypto primitives on mbedTLS alone (the embedded profile,
 * FL_CRYPTO_MBEDTLS_ONLY): SHA-256 and base64 from mbedTLS, Ed25519 verification and
 * randomness from secagg's mbedTLS backend (which owns the Ed25519 code and the CTR-DRBG).
 * Same behaviour as crypto_sodium.c on every input (tests/client-sdk/test_crypto_profiles.c). */

#include <string.h>

#include <mbedtls/base64.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>

#include "client_internal.h"
#include "crypto.h" /* secagg's backend tables */

/* Accepts exactly the canonical padded encoding of n bytes, as libsodium's
 * sodium_base642bin(ORIGINAL, no ignore set) does: mbedtls_base64_decode also skips spaces
 * and line breaks and ignores the unused bits of the last character, so the result is
 * encoded again and must reproduce the input. */
bool fl__client_unbase64(uint8_t *out, size_t n, const char *s) {
    char again[256];
    size_t slen = strlen(s), got = 0, elen = 0;
    if (slen != 4 * ((n + 2) / 3) || slen >= sizeof(again))
        return false;
    if (mbedtls_base64_decode(out, n, &got, (const unsigned char *)s, slen) != 0 || got != n)
        goto out_bad;
    if (mbedtls_base64_encode((unsigned char *)again, sizeof(again), &elen, out, n) != 0 ||
        elen != slen || memcmp(again, s, slen) != 0)
        goto out_bad;
    return true;
out_bad:
    fl_memzero(out, n);
    return false;
}

void fl__client_sha256(uint8_t out[32], const void *data, size_t len) {
    /* Only bad arguments make these fail; the SDK passes none. */
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    (void)mbedtls_sha256(data, len, out, 0);
#else
    (void)mbedtls_sha256_ret(data, len, out, 0);
#endif
}

/* mbedTLS has no EdDSA of its own; secagg's mbedTLS backend carries the verifier. While a
 * backend lacks it the table entry is NULL and every signed body is refused with
 * FL_ERR_UNSUPPORTED (the client names the reason), never accepted. */
int fl__client_ed25519_verify(const uint8_t sig[64], const uint8_t *msg, size_t len,
                              const uint8_t pk[32]) {
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    if (!cr || !cr->ed25519_verify)
        return FL_ERR_UNSUPPORTED;
    return cr->ed25519_verify(sig, msg, len, pk) == 0 ? FL_OK : FL_ERR_CRYPTO;
}

/* The backend's process-wide CTR-DRBG, seeded from mbedTLS's entropy sources and reseeded on
 * every request (prediction resistance). The SDK draws only the backoff-jitter seed here
 * (when the app gives none); on the impossible failure the bytes are zero. */
void fl__client_random(void *out, size_t n) {
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    if (!cr || cr->random(out, n) != 0)
        fl_memzero(out, n);
}
