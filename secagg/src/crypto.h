#ifndef FLOTILLA_SECAGG_CRYPTO_H
#define FLOTILLA_SECAGG_CRYPTO_H

/* Internal crypto interface of secagg: the protocol code calls only these, and each
 * backend (libsodium+OpenSSL, mbedTLS) fills one table. Backends must agree byte for
 * byte on every deterministic output (KAT vectors in tests/vectors/secagg/ check it).
 * All functions return 0 on success, -1 on failure (no detail: no oracle). */

#include <stddef.h>
#include <stdint.h>

#define FL__SA_X25519_BYTES 32    /* X25519 public and secret keys, shared secret */
#define FL__SA_ED25519_PK_BYTES 32
#define FL__SA_ED25519_SK_BYTES 64 /* seed || public key, libsodium layout */
#define FL__SA_ED25519_SIG_BYTES 64
#define FL__SA_AEAD_KEY_BYTES 32  /* ChaCha20-Poly1305 IETF */
#define FL__SA_AEAD_NONCE_BYTES 12
#define FL__SA_AEAD_TAG_BYTES 16
#define FL__SA_SHA256_BYTES 32
#define FL__SA_SEED_BYTES 32      /* PRG seed (mask seeds, self-mask b_u) */

enum fl__sa_backend_id {
    FL__SA_BACKEND_SODIUM = 0,    /* libsodium + OpenSSL (AES-CTR PRG via EVP or libgcrypt) */
    FL__SA_BACKEND_MBEDTLS = 1    /* mbedTLS 2.28 alone */
};

struct fl__sa_crypto {
    const char *name; /* "sodium-openssl" or "mbedtls" */

    /* Fills out with n cryptographically secure random bytes. */
    int (*random)(uint8_t *out, size_t n);

    /* X25519 key pair from 32 bytes of secret randomness (clamped as RFC 7748). */
    int (*x25519_keypair)(uint8_t pk[32], uint8_t sk[32]);
    int (*x25519_public)(uint8_t pk[32], const uint8_t sk[32]);
    /* Shared secret; fails on an all-zero result (small-order peer key). */
    int (*x25519_shared)(uint8_t out[32], const uint8_t sk[32], const uint8_t peer_pk[32]);

    /* HKDF-SHA256 (RFC 5869): extract with salt, expand with info to out_len bytes. */
    int (*hkdf_sha256)(uint8_t *out, size_t out_len, const uint8_t *salt, size_t salt_len,
                       const uint8_t *ikm, size_t ikm_len, const uint8_t *info, size_t info_len);

    int (*sha256)(uint8_t out[32], const uint8_t *msg, size_t len);

    /* ChaCha20-Poly1305 IETF (RFC 8439). seal writes len + 16 bytes (ct || tag). open
     * verifies before writing any plaintext; fails on a bad tag. */
    int (*aead_seal)(uint8_t *out, const uint8_t *msg, size_t len, const uint8_t *ad,
                     size_t ad_len, const uint8_t nonce[12], const uint8_t key[32]);
    int (*aead_open)(uint8_t *out, const uint8_t *ct, size_t ct_len, const uint8_t *ad,
                     size_t ad_len, const uint8_t nonce[12], const uint8_t key[32]);

    /* Ed25519 (RFC 8032). keypair from a 32-byte seed; sk = seed || pk. Both backends have
     * it (mbedTLS via Wei25519, ed25519_mbedtls.c) and must agree byte for byte and on every
     * verify decision (tests/vectors/secagg/ed25519_edge.txt). */
    int (*ed25519_keypair)(uint8_t pk[32], uint8_t sk[64], const uint8_t seed[32]);
    int (*ed25519_sign)(uint8_t sig[64], const uint8_t *msg, size_t len, const uint8_t sk[64]);
    int (*ed25519_verify)(const uint8_t sig[64], const uint8_t *msg, size_t len,
                          const uint8_t pk[32]);

    /* Mask expansion PRG: AES-128-CTR keyed with the first 16 bytes of seed, IV = the
     * next 16 bytes (big-endian counter), over an all-zero plaintext: writes n bytes of
     * keystream starting at byte offset 0. Must be fast (the client's hot loop). */
    int (*prg)(uint8_t *out, size_t n, const uint8_t seed[32]);

    /* Optional streaming form of prg (all four members 0/NULL in a table without it): the
     * key schedule is set up once per seed and kept in caller memory, so the keystream can
     * be drawn in small (L1-sized) pieces without paying the cipher setup per piece.
     * ctx points to prg_stream_size (<= FL__SA_PRG_STREAM_MAX) bytes aligned as malloc's,
     * owned by the caller and never moved while open; a backend whose library keeps its
     * cipher state behind an opaque handle (OpenSSL EVP, libgcrypt) allocates that handle
     * in prg_open, which the library's own API forces.
     *  - prg_open: starts the keystream of prg(., ., seed) at byte 0. On failure it leaves
     *    ctx wiped and releases what it took (prg_close on it is then a harmless no-op).
     *  - prg_next: writes the next n bytes of that keystream, continuing exactly where the
     *    previous call stopped (also in the middle of an AES block): the concatenation of
     *    all prg_next outputs equals prg(out, total, seed). On failure it wipes out[0..n)
     *    and returns -1; the stream is then spent (only prg_close may follow).
     *  - prg_close: releases the stream and wipes ctx (key schedule, counter, buffered
     *    keystream); must follow every prg_open, successful or not.
     * One thread at a time per ctx; distinct ctx may be used from different threads. */
    size_t prg_stream_size;
    int (*prg_open)(void *ctx, const uint8_t seed[32]);
    int (*prg_next)(void *ctx, uint8_t *out, size_t n);
    void (*prg_close)(void *ctx);
};

/* Upper bound on any backend's prg_stream_size, so callers can size scratch statically
 * (each backend checks its own size against it at compile time). */
#define FL__SA_PRG_STREAM_MAX 512

/* Returns the table for a backend, or NULL if it was not built. */
const struct fl__sa_crypto *fl__sa_crypto_get(enum fl__sa_backend_id id);

/* ---- additions (crypto layer owner) ----
 * Backend tables, defined by crypto_sodium.c / crypto_mbedtls.c. Use fl__sa_crypto_get(),
 * which also performs the one-time library init (sodium_init); these are declared here only
 * so the definitions have a prototype. fl__sa_crypto_mbedtls exists only in builds with
 * FL_HAVE_MBEDTLS_BUILD.
 *
 * Behaviour notes common to both backends (tested):
 *  - every function accepts NULL for a zero-length buffer and rejects NULL otherwise;
 *  - x25519_keypair stores the clamped secret key; x25519_public/shared accept any
 *    32 bytes (clamped internally) and mask the top bit of the peer's u-coordinate;
 *  - hkdf_sha256 fails if out_len > 255 * 32 (RFC 5869);
 *  - aead_open zeroes out (ct_len - 16 bytes) on failure; seal/open may run in place
 *    (out == msg / out == ct);
 *  - prg accepts any n; prg(n) is a prefix of prg(m) for n <= m. */
extern const struct fl__sa_crypto fl__sa_crypto_sodium;
extern const struct fl__sa_crypto fl__sa_crypto_mbedtls;

/* The sodium backend's two implementations of prg (same contract, same keystream; defined
 * only in builds with that backend). prg uses libgcrypt's where libgcrypt was built in and
 * reports VAES, OpenSSL's otherwise; fl__sa_prg_impl names the one in use ("libgcrypt" or
 * "openssl"). fl__sa_prg_gcrypt fails in builds without libgcrypt. For tests and
 * bench_prg. */
int fl__sa_prg_openssl(uint8_t *out, size_t n, const uint8_t seed[32]);
int fl__sa_prg_gcrypt(uint8_t *out, size_t n, const uint8_t seed[32]);
const char *fl__sa_prg_impl(void);
/* The same two implementations of the sodium table's prg_open (its prg_next and prg_close
 * serve both): prg_open picks as prg does. fl__sa_prg_open_gcrypt fails (ctx wiped) in
 * builds without libgcrypt. For tests and bench_prg. */
int fl__sa_prg_open_openssl(void *ctx, const uint8_t seed[32]);
int fl__sa_prg_open_gcrypt(void *ctx, const uint8_t seed[32]);

/* ---- Shamir secret sharing over the prime field p = 2^256 + 297 ----
 * Secrets are 32 bytes (an integer < 2^256 < p, big-endian); a share is (x, y) with x a
 * nonzero 32-bit index and y a 33-byte big-endian field element. Shares are made with
 * coefficients from crypto->random, so backends differ only in randomness;
 * reconstruction is deterministic and identical across backends. */
#define FL__SA_SHARE_Y_BYTES 33

struct fl__sa_share {
    uint32_t x;
    uint8_t y[FL__SA_SHARE_Y_BYTES];
};

/* Splits secret into n shares with threshold t (1 <= t <= n), at x = xs[i]. */
int fl__sa_shamir_split(struct fl__sa_share *out, const uint32_t *xs, size_t n, size_t t,
                        const uint8_t secret[32], const struct fl__sa_crypto *crypto);
/* Reconstructs from exactly the k >= t given shares (distinct nonzero x). Fails if the
 * result does not fit in 32 bytes (a sign of wrong or tampered shares). */
int fl__sa_shamir_combine(uint8_t secret[32], const struct fl__sa_share *shares, size_t k);

/* One reconstruction of fl__sa_shamir_combine_many. */
struct fl__sa_combine_job {
    uint8_t *secret;                   /* out: 32 bytes; wiped when rc is -1 */
    const struct fl__sa_share *shares; /* the k shares to combine (distinct nonzero x) */
    size_t k;                          /* number of shares */
    int rc;                            /* out: 0, or -1 as fl__sa_shamir_combine */
};

/* Scratch bytes per share: combine_many needs 120 bytes per job of its window, so a
 * scratch sized by shares always holds at least as many jobs as shares / 1.5. */
#define FL__SA_SHAMIR_SCRATCH_PER_SHARE 80

/* Runs m reconstructions with the result of fl__sa_shamir_combine for each job, sharing
 * the field inversions: each job's sum is kept as one fraction whose denominator (public,
 * from x only) is inverted together with those of the other jobs of its window (up to 256
 * jobs that fit in scratch_len / 120 bytes; a small stack window if scratch is NULL or
 * smaller), one inversion per window. Constant time in the y values. Never allocates; the
 * part of scratch it used (secret-dependent numerators among it) is wiped before return. */
void fl__sa_shamir_combine_many(struct fl__sa_combine_job *jobs, size_t m, void *scratch,
                                size_t scratch_len);

#endif /* FLOTILLA_SECAGG_CRYPTO_H */
