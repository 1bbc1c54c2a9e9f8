#ifndef FLOTILLA_SECAGG_ED25519_MBEDTLS_H
#define FLOTILLA_SECAGG_ED25519_MBEDTLS_H

/* Ed25519 (RFC 8032) for the mbedTLS backend, computed with mbedTLS's own short-Weierstrass
 * ECP code on Wei25519, the short-Weierstrass curve that is isomorphic to edwards25519.
 * See ed25519_mbedtls.c for the construction and docs/secagg.md for the tests.
 *
 * The three operations have the contracts of the ed25519_* entries of struct fl__sa_crypto
 * (crypto.h): 0 on success, -1 on any failure, no further detail. They are thread-safe
 * (the curve is built once, under pthread_once, and only read afterwards). */

#include <stddef.h>
#include <stdint.h>

#if defined(FL_HAVE_MBEDTLS_BUILD)
#include <mbedtls/ecp.h>

int fl__sa_mbed_ed25519_keypair(uint8_t pk[32], uint8_t sk[64], const uint8_t seed[32]);
int fl__sa_mbed_ed25519_sign(uint8_t sig[64], const uint8_t *msg, size_t len, const uint8_t sk[64]);
int fl__sa_mbed_ed25519_verify(const uint8_t sig[64], const uint8_t *msg, size_t len,
                               const uint8_t pk[32]);

/* The process-wide Wei25519 group (N = L, G = the image of the Ed25519 base point, comb
 * table for G precomputed), or NULL if building it failed. Read-only for callers: tests use
 * it to check the curve constants with mbedTLS's own arithmetic. */
const mbedtls_ecp_group *fl__sa_mbed_ed25519_group(void);

/* The mbedTLS f_rng over the backend's process-wide CTR-DRBG (crypto_mbedtls.c). */
int fl__sa_mbed_rng(void *unused, unsigned char *out, size_t n);
#endif

#endif /* FLOTILLA_SECAGG_ED25519_MBEDTLS_H */
