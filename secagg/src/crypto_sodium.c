/* secagg crypto backend: libsodium for X25519, SHA-256, HMAC (HKDF), ChaCha20-Poly1305 and
 * Ed25519; OpenSSL EVP for the AES-128-CTR mask PRG (AES-NI, multi-block pipelining), or
 * libgcrypt's AES-128-CTR where the CPU has VAES (same keystream, about twice as fast).
 *
 * Every function follows crypto.h: 0 on success, -1 on failure with no further detail.
 * sodium_init() must have run before use; fl__sa_crypto_get() does it. */

#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>
#if defined(FL_HAVE_GCRYPT)
#include <gcrypt.h>
#endif

#include "crypto.h"
#include "flotilla/common.h"

/* ---- randomness ---- */

static int sodium_random(uint8_t *out, size_t n) {
    if (n == 0)
        return 0;
    if (!out)
        return -1;
    randombytes_buf(out, n);
    return 0;
}

/* ---- X25519 (RFC 7748) ---- */

/* Clamps a scalar as RFC 7748 section 5 decodeScalar25519 does. */
static void sodium_x25519_clamp(uint8_t sk[32]) {
    sk[0] &= 248;
    sk[31] &= 127;
    sk[31] |= 64;
}

static int sodium_x25519_public(uint8_t pk[32], const uint8_t sk[32]) {
    if (!pk || !sk)
        return -1;
    /* crypto_scalarmult_base clamps internally and rejects nothing for the base point. */
    return crypto_scalarmult_base(pk, sk) == 0 ? 0 : -1;
}

static int sodium_x25519_keypair(uint8_t pk[32], uint8_t sk[32]) {
    if (!pk || !sk)
        return -1;
    randombytes_buf(sk, 32);
    sodium_x25519_clamp(sk);
    if (crypto_scalarmult_base(pk, sk) != 0) {
        fl_memzero(sk, 32);
        return -1;
    }
    return 0;
}

static int sodium_x25519_shared(uint8_t out[32], const uint8_t sk[32], const uint8_t peer_pk[32]) {
    if (!out || !sk || !peer_pk)
        return -1;
    /* libsodium returns -1 on an all-zero result (small-order peer key); check again in
     * constant time so the contract does not depend on that detail. */
    int rc = crypto_scalarmult(out, sk, peer_pk);
    if (rc != 0 || sodium_is_zero(out, 32)) {
        fl_memzero(out, 32);
        return -1;
    }
    return 0;
}

/* ---- HKDF-SHA256 (RFC 5869), composed from libsodium's HMAC-SHA256 ---- */

static int sodium_hkdf_sha256(uint8_t *out, size_t out_len, const uint8_t *salt, size_t salt_len,
                              const uint8_t *ikm, size_t ikm_len, const uint8_t *info,
                              size_t info_len) {
    static const uint8_t empty[1] = {0};
    uint8_t prk[crypto_auth_hmacsha256_BYTES];
    uint8_t t[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    int rc = -1;

    if ((!out && out_len) || (!salt && salt_len) || (!ikm && ikm_len) || (!info && info_len))
        return -1;
    /* RFC 5869 2.3: L <= 255 * HashLen. */
    if (out_len > 255u * sizeof(t))
        return -1;
    if (out_len == 0)
        return 0;

    /* Extract: PRK = HMAC(salt, IKM). An empty salt is HMAC with an empty key, which RFC
     * 2104 zero-pads to the block size: the same as the RFC's HashLen zero bytes. */
    if (crypto_auth_hmacsha256_init(&st, salt ? salt : empty, salt_len) != 0 ||
        crypto_auth_hmacsha256_update(&st, ikm ? ikm : empty, ikm_len) != 0 ||
        crypto_auth_hmacsha256_final(&st, prk) != 0)
        goto out_wipe;

    /* Expand: T(i) = HMAC(PRK, T(i-1) || info || i), i = 1..ceil(L/HashLen). */
    size_t done = 0;
    for (unsigned i = 1; done < out_len; i++) {
        uint8_t ctr = (uint8_t)i;
        if (crypto_auth_hmacsha256_init(&st, prk, sizeof(prk)) != 0)
            goto out_wipe;
        if (i > 1 && crypto_auth_hmacsha256_update(&st, t, sizeof(t)) != 0)
            goto out_wipe;
        if (crypto_auth_hmacsha256_update(&st, info ? info : empty, info_len) != 0 ||
            crypto_auth_hmacsha256_update(&st, &ctr, 1) != 0 ||
            crypto_auth_hmacsha256_final(&st, t) != 0)
            goto out_wipe;
        size_t take = out_len - done < sizeof(t) ? out_len - done : sizeof(t);
        memcpy(out + done, t, take);
        done += take;
    }
    rc = 0;
out_wipe:
    if (rc != 0)
        fl_memzero(out, out_len);
    fl_memzero(prk, sizeof(prk));
    fl_memzero(t, sizeof(t));
    fl_memzero(&st, sizeof(st));
    return rc;
}

static int sodium_sha256(uint8_t out[32], const uint8_t *msg, size_t len) {
    static const uint8_t empty[1] = {0};
    if (!out || (!msg && len))
        return -1;
    return crypto_hash_sha256(out, msg ? msg : empty, (unsigned long long)len) == 0 ? 0 : -1;
}

/* ---- ChaCha20-Poly1305 IETF (RFC 8439) ---- */

static int sodium_aead_seal(uint8_t *out, const uint8_t *msg, size_t len, const uint8_t *ad,
                            size_t ad_len, const uint8_t nonce[12], const uint8_t key[32]) {
    if (!out || (!msg && len) || (!ad && ad_len) || !nonce || !key)
        return -1;
    if (len > crypto_aead_chacha20poly1305_ietf_MESSAGEBYTES_MAX)
        return -1;
    static const uint8_t empty[1] = {0};
    unsigned long long clen = 0;
    if (crypto_aead_chacha20poly1305_ietf_encrypt(out, &clen, msg ? msg : empty, len,
                                                  ad ? ad : empty, ad_len, NULL, nonce,
                                                  key) != 0)
        return -1;
    return clen == (unsigned long long)len + FL__SA_AEAD_TAG_BYTES ? 0 : -1;
}

/* libsodium checks the tag (constant time) before decrypting and zeroes out on failure. */
static int sodium_aead_open(uint8_t *out, const uint8_t *ct, size_t ct_len, const uint8_t *ad,
                            size_t ad_len, const uint8_t nonce[12], const uint8_t key[32]) {
    uint8_t sink[1];
    if (!ct || (!ad && ad_len) || !nonce || !key || ct_len < FL__SA_AEAD_TAG_BYTES)
        return -1;
    if (!out && ct_len > FL__SA_AEAD_TAG_BYTES)
        return -1;
    unsigned long long mlen = 0;
    /* A NULL m would make libsodium only verify; always pass a buffer so it decrypts. */
    if (crypto_aead_chacha20poly1305_ietf_decrypt(out ? out : sink, &mlen, NULL, ct, ct_len,
                                                  ad ? ad : sink, ad_len, nonce, key) != 0)
        return -1;
    return 0;
}

/* ---- Ed25519 (RFC 8032) ---- */

static int sodium_ed25519_keypair(uint8_t pk[32], uint8_t sk[64], const uint8_t seed[32]) {
    if (!pk || !sk || !seed)
        return -1;
    return crypto_sign_ed25519_seed_keypair(pk, sk, seed) == 0 ? 0 : -1;
}

static int sodium_ed25519_sign(uint8_t sig[64], const uint8_t *msg, size_t len,
                               const uint8_t sk[64]) {
    static const uint8_t empty[1] = {0};
    if (!sig || !sk || (!msg && len))
        return -1;
    return crypto_sign_ed25519_detached(sig, NULL, msg ? msg : empty, len, sk) == 0 ? 0 : -1;
}

static int sodium_ed25519_verify(const uint8_t sig[64], const uint8_t *msg, size_t len,
                                 const uint8_t pk[32]) {
    static const uint8_t empty[1] = {0};
    if (!sig || !pk || (!msg && len))
        return -1;
    return crypto_sign_ed25519_verify_detached(sig, msg ? msg : empty, len, pk) == 0 ? 0 : -1;
}

/* ---- mask PRG: AES-128-CTR keystream, OpenSSL EVP or libgcrypt ---- */

/* Zero plaintext fed in chunks: CTR over zeros is the keystream itself. 16 KiB keeps the
 * source in L1/L2 and amortises the per-call overhead. */
#define FL__SA_PRG_CHUNK 16384
static const uint8_t fl__sa_prg_zeros[FL__SA_PRG_CHUNK];

/* OpenSSL 3 looks the algorithm up in the provider on every EVP_EncryptInit_ex given the
 * legacy EVP_aes_128_ctr() handle; fetching it once (thread-safe, pthread_once) removes
 * about 1 us per prg() call, which dominates small masks. The fetched handle lives for the
 * process, like OpenSSL's own method store. */
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
static pthread_once_t fl__sa_prg_once = PTHREAD_ONCE_INIT;
static EVP_CIPHER *fl__sa_prg_cipher;

static void sodium_prg_fetch(void) {
    fl__sa_prg_cipher = EVP_CIPHER_fetch(NULL, "AES-128-CTR", NULL);
}

static const EVP_CIPHER *sodium_prg_cipher(void) {
    if (pthread_once(&fl__sa_prg_once, sodium_prg_fetch) == 0 && fl__sa_prg_cipher)
        return fl__sa_prg_cipher;
    return EVP_aes_128_ctr();
}
#else
static const EVP_CIPHER *sodium_prg_cipher(void) {
    return EVP_aes_128_ctr();
}
#endif

int fl__sa_prg_openssl(uint8_t *out, size_t n, const uint8_t seed[32]) {
    int rc = -1;
    if (!seed || (!out && n))
        return -1;
    if (n == 0)
        return 0;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return -1;
    /* key = seed[0..16), IV = seed[16..32): OpenSSL's CTR increments all 128 bits
     * big-endian, as crypto.h specifies. */
    if (EVP_EncryptInit_ex(ctx, sodium_prg_cipher(), NULL, seed, seed + 16) != 1)
        goto out_free;
    size_t done = 0;
    while (done < n) {
        size_t take = n - done < FL__SA_PRG_CHUNK ? n - done : FL__SA_PRG_CHUNK;
        int outl = 0;
        if (EVP_EncryptUpdate(ctx, out + done, &outl, fl__sa_prg_zeros, (int)take) != 1 ||
            outl != (int)take)
            goto out_free;
        done += take;
    }
    rc = 0;
out_free:
    if (rc != 0)
        fl_memzero(out, n);
    EVP_CIPHER_CTX_free(ctx); /* EVP_CIPHER_CTX_free cleanses the expanded key */
    return rc;
}

#if defined(FL_HAVE_GCRYPT)
/* libgcrypt 1.10 runs AES-CTR 16 blocks at a time with VAES/AVX2 where the CPU has VAES;
 * OpenSSL 3.0 has no VAES path for CTR (8 blocks with AES-NI), so there libgcrypt is about
 * twice as fast (bench_prg). Elsewhere both use AES-NI and OpenSSL stays the PRG.
 * gcry_check_version is the initialisation libgcrypt asks of a library that uses it. */
static pthread_once_t fl__sa_gcry_once = PTHREAD_ONCE_INIT;
static int fl__sa_gcry_ready; /* 1: usable; set once under fl__sa_gcry_once */
static int fl__sa_gcry_vaes;  /* 1: libgcrypt reports VAES */

static void sodium_gcry_init(void) {
    if (!gcry_check_version("1.8.0"))
        return;
    fl__sa_gcry_ready = 1;
    char *hw = gcry_get_config(0, "hwflist");
    fl__sa_gcry_vaes = hw && strstr(hw, "vaes") != NULL;
    gcry_free(hw);
}

static int sodium_gcry_ready(void) {
    return pthread_once(&fl__sa_gcry_once, sodium_gcry_init) == 0 && fl__sa_gcry_ready;
}

int fl__sa_prg_gcrypt(uint8_t *out, size_t n, const uint8_t seed[32]) {
    if (!seed || (!out && n))
        return -1;
    if (n == 0)
        return 0;
    if (!sodium_gcry_ready())
        return -1;
    gcry_cipher_hd_t h;
    if (gcry_cipher_open(&h, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_CTR, 0) != 0)
        return -1;
    int rc = -1;
    /* libgcrypt's CTR increments the whole 16-byte counter big-endian, as OpenSSL's. */
    if (gcry_cipher_setkey(h, seed, 16) != 0 || gcry_cipher_setctr(h, seed + 16, 16) != 0)
        goto out;
    for (size_t done = 0; done < n;) {
        size_t take = n - done < FL__SA_PRG_CHUNK ? n - done : FL__SA_PRG_CHUNK;
        if (gcry_cipher_encrypt(h, out + done, take, fl__sa_prg_zeros, take) != 0)
            goto out;
        done += take;
    }
    rc = 0;
out:
    if (rc != 0)
        fl_memzero(out, n);
    gcry_cipher_close(h); /* wipes the handle, key schedule included */
    return rc;
}

/* libgcrypt is the PRG only where it was measured faster: with VAES. */
static int sodium_gcry_preferred(void) { return sodium_gcry_ready() && fl__sa_gcry_vaes; }

const char *fl__sa_prg_impl(void) { return sodium_gcry_preferred() ? "libgcrypt" : "openssl"; }

static int sodium_prg(uint8_t *out, size_t n, const uint8_t seed[32]) {
    /* Same keystream either way, so a failing libgcrypt call may fall back. */
    if (sodium_gcry_preferred() && fl__sa_prg_gcrypt(out, n, seed) == 0)
        return 0;
    return fl__sa_prg_openssl(out, n, seed);
}
#else
int fl__sa_prg_gcrypt(uint8_t *out, size_t n, const uint8_t seed[32]) {
    (void)out, (void)n, (void)seed;
    return -1;
}

const char *fl__sa_prg_impl(void) { return "openssl"; }

static int sodium_prg(uint8_t *out, size_t n, const uint8_t seed[32]) {
    return fl__sa_prg_openssl(out, n, seed);
}
#endif

/* ---- mask PRG, streaming form (crypto.h prg_open/prg_next/prg_close) ----
 * The context holds the library's cipher handle: one of the two is set while open. Both
 * libraries keep the CTR position across calls, partial blocks included (OpenSSL's `num`,
 * libgcrypt's unused keystream), so prg_next only feeds zeros. The handles are allocated
 * by the libraries (EVP_CIPHER_CTX_new, gcry_cipher_open): their cipher state is opaque.
 * No secret lives in the context itself, only the handle pointers. */

struct sodium_prg_stream {
    EVP_CIPHER_CTX *evp; /* OpenSSL AES-128-CTR, or NULL */
#if defined(FL_HAVE_GCRYPT)
    gcry_cipher_hd_t gh; /* libgcrypt AES-128-CTR, or NULL */
#endif
};
_Static_assert(sizeof(struct sodium_prg_stream) <= FL__SA_PRG_STREAM_MAX,
               "sodium PRG stream context exceeds FL__SA_PRG_STREAM_MAX");

static void sodium_prg_close(void *ctx) {
    struct sodium_prg_stream *st = ctx;
    if (!st)
        return;
    if (st->evp)
        EVP_CIPHER_CTX_free(st->evp); /* cleanses the expanded key */
#if defined(FL_HAVE_GCRYPT)
    if (st->gh)
        gcry_cipher_close(st->gh); /* wipes the handle, key schedule included */
#endif
    fl_memzero(st, sizeof(*st));
}

int fl__sa_prg_open_openssl(void *ctx, const uint8_t seed[32]) {
    struct sodium_prg_stream *st = ctx;
    if (!st)
        return -1;
    memset(st, 0, sizeof(*st));
    if (!seed)
        return -1;
    st->evp = EVP_CIPHER_CTX_new();
    if (!st->evp)
        return -1;
    if (EVP_EncryptInit_ex(st->evp, sodium_prg_cipher(), NULL, seed, seed + 16) != 1) {
        sodium_prg_close(st);
        return -1;
    }
    return 0;
}

#if defined(FL_HAVE_GCRYPT)
int fl__sa_prg_open_gcrypt(void *ctx, const uint8_t seed[32]) {
    struct sodium_prg_stream *st = ctx;
    if (!st)
        return -1;
    memset(st, 0, sizeof(*st));
    if (!seed || !sodium_gcry_ready())
        return -1;
    if (gcry_cipher_open(&st->gh, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_CTR, 0) != 0) {
        st->gh = NULL;
        return -1;
    }
    if (gcry_cipher_setkey(st->gh, seed, 16) != 0 ||
        gcry_cipher_setctr(st->gh, seed + 16, 16) != 0) {
        sodium_prg_close(st);
        return -1;
    }
    return 0;
}

/* As prg: libgcrypt where it is preferred, and OpenSSL if that fails to open (same
 * keystream). A failure later, in prg_next, is not retried: the position is not kept. */
static int sodium_prg_open(void *ctx, const uint8_t seed[32]) {
    if (sodium_gcry_preferred() && fl__sa_prg_open_gcrypt(ctx, seed) == 0)
        return 0;
    return fl__sa_prg_open_openssl(ctx, seed);
}
#else
int fl__sa_prg_open_gcrypt(void *ctx, const uint8_t seed[32]) {
    (void)seed;
    if (ctx)
        memset(ctx, 0, sizeof(struct sodium_prg_stream));
    return -1;
}

static int sodium_prg_open(void *ctx, const uint8_t seed[32]) {
    return fl__sa_prg_open_openssl(ctx, seed);
}
#endif

static int sodium_prg_next(void *ctx, uint8_t *out, size_t n) {
    struct sodium_prg_stream *st = ctx;
    if (!st || (!out && n))
        return -1;
    for (size_t done = 0; done < n;) {
        size_t take = n - done < FL__SA_PRG_CHUNK ? n - done : FL__SA_PRG_CHUNK;
        int ok = 0;
        if (st->evp) {
            int outl = 0;
            ok = EVP_EncryptUpdate(st->evp, out + done, &outl, fl__sa_prg_zeros, (int)take) == 1 &&
                 outl == (int)take;
        }
#if defined(FL_HAVE_GCRYPT)
        else if (st->gh) {
            ok = gcry_cipher_encrypt(st->gh, out + done, take, fl__sa_prg_zeros, take) == 0;
        }
#endif
        if (!ok) {
            fl_memzero(out, n);
            return -1;
        }
        done += take;
    }
    return 0;
}

/* ---- table ---- */

const struct fl__sa_crypto fl__sa_crypto_sodium = {
    .name = "sodium-openssl",
    .random = sodium_random,
    .x25519_keypair = sodium_x25519_keypair,
    .x25519_public = sodium_x25519_public,
    .x25519_shared = sodium_x25519_shared,
    .hkdf_sha256 = sodium_hkdf_sha256,
    .sha256 = sodium_sha256,
    .aead_seal = sodium_aead_seal,
    .aead_open = sodium_aead_open,
    .ed25519_keypair = sodium_ed25519_keypair,
    .ed25519_sign = sodium_ed25519_sign,
    .ed25519_verify = sodium_ed25519_verify,
    .prg = sodium_prg,
    .prg_stream_size = sizeof(struct sodium_prg_stream),
    .prg_open = sodium_prg_open,
    .prg_next = sodium_prg_next,
    .prg_close = sodium_prg_close,
};
