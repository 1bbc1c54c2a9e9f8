/* secagg crypto backend on mbedTLS 2.28 alone (embedded profile): CTR-DRBG, X25519 over
 * mbedtls_ecp (Curve25519), HKDF, SHA-256, ChaCha20-Poly1305 and an AES-128-CTR PRG.
 *
 * Every deterministic output matches the sodium-openssl backend byte for byte (checked by
 * tests/secagg/test_crypto_kat.c and test_crypto_cross.c).
 *
 * Ed25519: mbedTLS 2.28 has no EdDSA, so ed25519_mbedtls.c computes it with mbedTLS's own
 * short-Weierstrass ECP arithmetic on Wei25519, the curve isomorphic to edwards25519 (the
 * three table entries below). Keys and signatures are byte-identical to libsodium's, and
 * verification makes libsodium's accept/reject decision (test_ed25519_mbedtls.c).
 *
 * Randomness: one process-wide CTR-DRBG (AES-256) seeded from mbedtls_entropy on first use
 * (pthread_once). mbedtls_ctr_drbg_random locks the context's mutex (MBEDTLS_THREADING_C),
 * so random() is thread-safe. Prediction resistance is on: every request reseeds from the
 * OS entropy source, so a forked child never replays the parent's DRBG stream. */

#include <pthread.h>
#include <string.h>

#include <mbedtls/aes.h>
#include <mbedtls/chachapoly.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/hkdf.h>
#include <mbedtls/md.h>
#include <mbedtls/sha256.h>

#include "crypto.h"
#include "ed25519_mbedtls.h"
#include "flotilla/common.h"

#if !defined(MBEDTLS_THREADING_C)
#error "the mbedtls secagg backend needs an mbedTLS built with MBEDTLS_THREADING_C"
#endif

static const uint8_t fl__sa_mbed_empty[1] = {0};

/* ---- randomness: lazily seeded, process-wide CTR-DRBG ---- */

static pthread_once_t fl__sa_mbed_once = PTHREAD_ONCE_INIT;
static mbedtls_entropy_context fl__sa_mbed_entropy;
static mbedtls_ctr_drbg_context fl__sa_mbed_drbg;
static int fl__sa_mbed_drbg_ok; /* 1 once seeded; written only inside pthread_once */

static void mbed_drbg_init(void) {
    static const char pers[] = "flotilla-secagg-mbedtls";
    mbedtls_entropy_init(&fl__sa_mbed_entropy);
    mbedtls_ctr_drbg_init(&fl__sa_mbed_drbg);
    if (mbedtls_ctr_drbg_seed(&fl__sa_mbed_drbg, mbedtls_entropy_func, &fl__sa_mbed_entropy,
                              (const unsigned char *)pers, sizeof(pers) - 1) != 0)
        return;
    mbedtls_ctr_drbg_set_prediction_resistance(&fl__sa_mbed_drbg, MBEDTLS_CTR_DRBG_PR_ON);
    fl__sa_mbed_drbg_ok = 1;
}

/* mbedTLS f_rng signature over the shared DRBG (also the blinding source of
 * ed25519_mbedtls.c, hence not static; declared in ed25519_mbedtls.h). */
int fl__sa_mbed_rng(void *unused, unsigned char *out, size_t n) {
    (void)unused;
    if (pthread_once(&fl__sa_mbed_once, mbed_drbg_init) != 0 || !fl__sa_mbed_drbg_ok)
        return -1;
    while (n > 0) {
        size_t take = n < MBEDTLS_CTR_DRBG_MAX_REQUEST ? n : MBEDTLS_CTR_DRBG_MAX_REQUEST;
        if (mbedtls_ctr_drbg_random(&fl__sa_mbed_drbg, out, take) != 0)
            return -1;
        out += take;
        n -= take;
    }
    return 0;
}

static int mbed_random(uint8_t *out, size_t n) {
    if (n == 0)
        return 0;
    if (!out)
        return -1;
    if (fl__sa_mbed_rng(NULL, out, n) != 0) {
        fl_memzero(out, n);
        return -1;
    }
    return 0;
}

/* ---- X25519 (RFC 7748) over mbedtls_ecp ----
 * mbedTLS keeps Curve25519 scalars and u-coordinates as MPIs; RFC 7748 byte strings are
 * little-endian, so they go through mbedtls_mpi_read_binary_le / point_{read,write}_binary
 * (little-endian for Montgomery curves; read_binary also masks the top bit of u as RFC 7748
 * section 5 requires). mbedtls_ecp_mul insists on a clamped scalar, so we clamp a copy. */

static void mbed_x25519_clamp(uint8_t k[32]) {
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
}

/* out = X25519(sk, u); u == NULL means the base point 9. */
static int mbed_x25519(uint8_t out[32], const uint8_t sk[32], const uint8_t *u) {
    mbedtls_ecp_group grp;
    mbedtls_ecp_point q, r;
    mbedtls_mpi d;
    uint8_t k[32];
    size_t olen = 0;
    int rc = -1;

    mbedtls_ecp_group_init(&grp);
    mbedtls_ecp_point_init(&q);
    mbedtls_ecp_point_init(&r);
    mbedtls_mpi_init(&d);
    memcpy(k, sk, 32);
    mbed_x25519_clamp(k);

    if (mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_CURVE25519) != 0)
        goto out_free;
    if (mbedtls_mpi_read_binary_le(&d, k, sizeof(k)) != 0)
        goto out_free;
    if (u) {
        if (mbedtls_ecp_point_read_binary(&grp, &q, u, 32) != 0)
            goto out_free;
    } else if (mbedtls_ecp_copy(&q, &grp.G) != 0) {
        goto out_free;
    }
    /* mbedtls_ecp_mul rejects the known low-order u values and fails when the result is
     * the point at infinity; the output check below covers any remaining all-zero case. */
    if (mbedtls_ecp_mul(&grp, &r, &d, &q, fl__sa_mbed_rng, NULL) != 0)
        goto out_free;
    if (mbedtls_ecp_point_write_binary(&grp, &r, MBEDTLS_ECP_PF_UNCOMPRESSED, &olen, out, 32) !=
            0 ||
        olen != 32)
        goto out_free;
    {
        uint8_t acc = 0;
        for (size_t i = 0; i < 32; i++)
            acc |= out[i];
        if (acc == 0)
            goto out_free;
    }
    rc = 0;
out_free:
    if (rc != 0)
        fl_memzero(out, 32);
    fl_memzero(k, sizeof(k));
    mbedtls_mpi_free(&d); /* mbedtls_mpi_free zeroizes the limbs */
    mbedtls_ecp_point_free(&q);
    mbedtls_ecp_point_free(&r);
    mbedtls_ecp_group_free(&grp);
    return rc;
}

static int mbed_x25519_public(uint8_t pk[32], const uint8_t sk[32]) {
    if (!pk || !sk)
        return -1;
    return mbed_x25519(pk, sk, NULL);
}

static int mbed_x25519_keypair(uint8_t pk[32], uint8_t sk[32]) {
    if (!pk || !sk)
        return -1;
    if (mbed_random(sk, 32) != 0)
        return -1;
    mbed_x25519_clamp(sk);
    if (mbed_x25519(pk, sk, NULL) != 0) {
        fl_memzero(sk, 32);
        return -1;
    }
    return 0;
}

static int mbed_x25519_shared(uint8_t out[32], const uint8_t sk[32], const uint8_t peer_pk[32]) {
    if (!out || !sk || !peer_pk)
        return -1;
    return mbed_x25519(out, sk, peer_pk);
}

/* ---- HKDF-SHA256, SHA-256 ---- */

static int mbed_hkdf_sha256(uint8_t *out, size_t out_len, const uint8_t *salt, size_t salt_len,
                            const uint8_t *ikm, size_t ikm_len, const uint8_t *info,
                            size_t info_len) {
    if ((!out && out_len) || (!salt && salt_len) || (!ikm && ikm_len) || (!info && info_len))
        return -1;
    if (out_len > 255u * FL__SA_SHA256_BYTES)
        return -1;
    if (out_len == 0)
        return 0;
    /* A NULL salt makes mbedtls_hkdf use HashLen zero bytes, which equals the empty salt. */
    int rc = mbedtls_hkdf(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), salt_len ? salt : NULL,
                          salt_len, ikm ? ikm : fl__sa_mbed_empty, ikm_len,
                          info ? info : fl__sa_mbed_empty, info_len, out, out_len);
    if (rc != 0) {
        fl_memzero(out, out_len);
        return -1;
    }
    return 0;
}

static int mbed_sha256(uint8_t out[32], const uint8_t *msg, size_t len) {
    if (!out || (!msg && len))
        return -1;
    return mbedtls_sha256_ret(msg ? msg : fl__sa_mbed_empty, len, out, 0) == 0 ? 0 : -1;
}

/* ---- ChaCha20-Poly1305 IETF (RFC 8439) ---- */

static int mbed_aead_seal(uint8_t *out, const uint8_t *msg, size_t len, const uint8_t *ad,
                          size_t ad_len, const uint8_t nonce[12], const uint8_t key[32]) {
    mbedtls_chachapoly_context ctx;
    int rc = -1;
    if (!out || (!msg && len) || (!ad && ad_len) || !nonce || !key)
        return -1;
    if (len > SIZE_MAX - FL__SA_AEAD_TAG_BYTES || (uint64_t)len > 274877906880ull)
        return -1; /* RFC 8439: at most 2^32 - 1 blocks of 64 bytes */
    mbedtls_chachapoly_init(&ctx);
    if (mbedtls_chachapoly_setkey(&ctx, key) != 0)
        goto out_free;
    if (mbedtls_chachapoly_encrypt_and_tag(&ctx, len, nonce, ad ? ad : fl__sa_mbed_empty, ad_len,
                                           msg ? msg : fl__sa_mbed_empty, out, out + len) != 0)
        goto out_free;
    rc = 0;
out_free:
    mbedtls_chachapoly_free(&ctx); /* zeroizes the key schedule */
    return rc;
}

/* crypto.h requires the tag to be checked before any plaintext reaches out, but
 * mbedtls_chachapoly_auth_decrypt decrypts into out first and wipes it on a mismatch. So
 * open runs two passes: (1) recompute the tag through the streaming API, decrypting into a
 * small stack scratch that is wiped, and compare it in constant time; (2) only if it
 * matches, auth_decrypt into out (which verifies again). On failure out is zeroed, as the
 * sodium backend does. Costs one extra ChaCha20 pass; open is not on the hot path. */
#define FL__SA_MBED_OPEN_SCRATCH 256

static int mbed_aead_open(uint8_t *out, const uint8_t *ct, size_t ct_len, const uint8_t *ad,
                          size_t ad_len, const uint8_t nonce[12], const uint8_t key[32]) {
    mbedtls_chachapoly_context ctx;
    uint8_t scratch[FL__SA_MBED_OPEN_SCRATCH];
    uint8_t tag[FL__SA_AEAD_TAG_BYTES];
    uint8_t sink[1];
    int rc = -1;
    if (!ct || (!ad && ad_len) || !nonce || !key || ct_len < FL__SA_AEAD_TAG_BYTES)
        return -1;
    size_t len = ct_len - FL__SA_AEAD_TAG_BYTES;
    if (!out && len)
        return -1;
    mbedtls_chachapoly_init(&ctx);
    if (mbedtls_chachapoly_setkey(&ctx, key) != 0 ||
        mbedtls_chachapoly_starts(&ctx, nonce, MBEDTLS_CHACHAPOLY_DECRYPT) != 0 ||
        mbedtls_chachapoly_update_aad(&ctx, ad ? ad : fl__sa_mbed_empty, ad_len) != 0)
        goto out_free;
    for (size_t off = 0; off < len; off += sizeof(scratch)) {
        size_t take = len - off < sizeof(scratch) ? len - off : sizeof(scratch);
        if (mbedtls_chachapoly_update(&ctx, take, ct + off, scratch) != 0)
            goto out_free;
    }
    if (mbedtls_chachapoly_finish(&ctx, tag) != 0)
        goto out_free;
    if (fl_memeq_ct(tag, ct + len, sizeof(tag)) != 0)
        goto out_free;
    if (mbedtls_chachapoly_auth_decrypt(&ctx, len, nonce, ad ? ad : fl__sa_mbed_empty, ad_len,
                                        ct + len, ct, out ? out : sink) != 0)
        goto out_free;
    rc = 0;
out_free:
    if (rc != 0 && out)
        fl_memzero(out, len);
    fl_memzero(scratch, sizeof(scratch));
    fl_memzero(tag, sizeof(tag));
    mbedtls_chachapoly_free(&ctx); /* zeroizes the key schedule */
    return rc;
}

/* ---- mask PRG: AES-128-CTR keystream ----
 * mbedtls_aes_crypt_ctr over a zero source. It increments the full 128-bit counter block
 * big-endian, like OpenSSL, and encrypts through AES-NI when the CPU has it
 * (mbedtls_aes_crypt_ecb dispatches to mbedtls_aesni_crypt_ecb). */

#define FL__SA_MBED_PRG_CHUNK 4096
static const uint8_t fl__sa_mbed_zeros[FL__SA_MBED_PRG_CHUNK];

static int mbed_prg(uint8_t *out, size_t n, const uint8_t seed[32]) {
    mbedtls_aes_context aes;
    uint8_t ctr[16], block[16];
    size_t off = 0;
    int rc = -1;
    if (!seed || (!out && n))
        return -1;
    if (n == 0)
        return 0;
    mbedtls_aes_init(&aes);
    memcpy(ctr, seed + 16, 16);
    if (mbedtls_aes_setkey_enc(&aes, seed, 128) != 0)
        goto out_free;
    for (size_t done = 0; done < n;) {
        size_t take = n - done < FL__SA_MBED_PRG_CHUNK ? n - done : FL__SA_MBED_PRG_CHUNK;
        if (mbedtls_aes_crypt_ctr(&aes, take, &off, ctr, block, fl__sa_mbed_zeros, out + done) !=
            0)
            goto out_free;
        done += take;
    }
    rc = 0;
out_free:
    if (rc != 0)
        fl_memzero(out, n);
    fl_memzero(ctr, sizeof(ctr));
    fl_memzero(block, sizeof(block));
    mbedtls_aes_free(&aes); /* zeroizes the round keys */
    return rc;
}

/* Streaming form (crypto.h prg_open/prg_next/prg_close): the AES context, the counter
 * block, the unused keystream of the current block and its offset, all in the caller's
 * memory; mbedtls_aes_crypt_ctr carries a partial block across calls through them. The
 * context must not move while open (mbedtls_aes_context points into itself). */
struct mbed_prg_stream {
    mbedtls_aes_context aes; /* AES-128 round keys */
    uint8_t ctr[16];         /* next counter block (big-endian) */
    uint8_t block[16];       /* keystream of the current block */
    size_t off;              /* bytes of block already used, 0..15 */
};
_Static_assert(sizeof(struct mbed_prg_stream) <= FL__SA_PRG_STREAM_MAX,
               "mbedTLS PRG stream context exceeds FL__SA_PRG_STREAM_MAX");

static void mbed_prg_close(void *ctx) {
    struct mbed_prg_stream *st = ctx;
    if (!st)
        return;
    mbedtls_aes_free(&st->aes); /* zeroizes the round keys */
    fl_memzero(st, sizeof(*st));
}

static int mbed_prg_open(void *ctx, const uint8_t seed[32]) {
    struct mbed_prg_stream *st = ctx;
    if (!st)
        return -1;
    memset(st, 0, sizeof(*st));
    mbedtls_aes_init(&st->aes);
    if (!seed || mbedtls_aes_setkey_enc(&st->aes, seed, 128) != 0) {
        mbed_prg_close(st);
        return -1;
    }
    memcpy(st->ctr, seed + 16, 16);
    return 0;
}

static int mbed_prg_next(void *ctx, uint8_t *out, size_t n) {
    struct mbed_prg_stream *st = ctx;
    if (!st || (!out && n))
        return -1;
    for (size_t done = 0; done < n;) {
        size_t take = n - done < FL__SA_MBED_PRG_CHUNK ? n - done : FL__SA_MBED_PRG_CHUNK;
        if (mbedtls_aes_crypt_ctr(&st->aes, take, &st->off, st->ctr, st->block,
                                  fl__sa_mbed_zeros, out + done) != 0) {
            fl_memzero(out, n);
            return -1;
        }
        done += take;
    }
    return 0;
}

/* ---- table ---- */

const struct fl__sa_crypto fl__sa_crypto_mbedtls = {
    .name = "mbedtls",
    .random = mbed_random,
    .x25519_keypair = mbed_x25519_keypair,
    .x25519_public = mbed_x25519_public,
    .x25519_shared = mbed_x25519_shared,
    .hkdf_sha256 = mbed_hkdf_sha256,
    .sha256 = mbed_sha256,
    .aead_seal = mbed_aead_seal,
    .aead_open = mbed_aead_open,
    .ed25519_keypair = fl__sa_mbed_ed25519_keypair,
    .ed25519_sign = fl__sa_mbed_ed25519_sign,
    .ed25519_verify = fl__sa_mbed_ed25519_verify,
    .prg = mbed_prg,
    .prg_stream_size = sizeof(struct mbed_prg_stream),
    .prg_open = mbed_prg_open,
    .prg_next = mbed_prg_next,
    .prg_close = mbed_prg_close,
};
