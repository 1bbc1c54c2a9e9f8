#ifndef FLOTILLA_DP_CHACHA_H
#define FLOTILLA_DP_CHACHA_H

/* The only place dp meets a crypto library: the ChaCha20-IETF keystream (RFC 8439) behind
 * fl_dp_rng and the rotation signs, and OS randomness for the OS-backed fl_dp_rng.
 * chacha_sodium.c implements it on libsodium (the normal build); chacha_mbedtls.c on
 * mbedTLS (the client SDK's embedded profile, built with FL_CRYPTO_MBEDTLS_ONLY). The two
 * give the same keystream byte for byte, so a server and its devices agree on rotation
 * signs whichever profile each runs (tests/client-sdk/test_crypto_profiles.c).
 * All three return 0 on success and -1 on failure (no detail). */

#include <stddef.h>
#include <stdint.h>

#define FL__DP_CHACHA_KEY_BYTES 32
#define FL__DP_CHACHA_NONCE_BYTES 12

/* One-time library initialisation; idempotent and thread-safe. */
int fl__dp_crypto_init(void);

/* Writes n bytes of the ChaCha20-IETF keystream of (key, nonce) starting at 64-byte block
 * `block` (the 32-bit initial counter). The caller keeps block + n / 64 below 2^32. */
int fl__dp_chacha20_keystream(uint8_t *out, size_t n, const uint8_t nonce[12], uint32_t block,
                              const uint8_t key[32]);

/* Fills out with n bytes from the operating system's CSPRNG (n <= 256). */
int fl__dp_os_random(uint8_t *out, size_t n);

#endif /* FLOTILLA_DP_CHACHA_H */
