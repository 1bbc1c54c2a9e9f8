/* Signed checkpoints: the C2SP signed-note format with an Ed25519 key, carrying a C2SP
 * tlog checkpoint body (origin, tree size, base64 root hash).
 *
 *   note     = text "\n" signature-line
 *   text     = origin "\n" decimal-size "\n" base64(root) "\n"
 *   sigline  = U+2014 " " key-name " " base64(key-id[4] || ed25519-signature[64]) "\n"
 *   key-id   = SHA-256(key-name || 0x0A || 0x01 || public-key)[0:4]
 *   vkey     = key-name "+" hex(key-id) "+" base64(0x01 || public-key)
 *
 * The key name is the origin. The signature covers text, final newline included. Parsing
 * is strict (exactly this shape, one signature line, canonical base64, no leading zeros) so
 * every byte of a note matters: a changed byte either breaks the shape or the signature. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "audit_internal.h"

#define EM_DASH "\xE2\x80\x94"
#define ROOT_B64_LEN 44 /* base64 of 32 bytes, with padding */
#define SIG_B64_LEN 92  /* base64 of 4 + 64 bytes */
#define KEY_B64_LEN 44  /* base64 of 1 + 32 bytes */

int fl__store_audit_origin_ok(const char *origin) {
    if (!origin)
        return 0;
    size_t n = strnlen(origin, FL_STORE_AUDIT_ORIGIN_MAX + 1);
    if (n == 0 || n > FL_STORE_AUDIT_ORIGIN_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)origin[i];
        if (c < 0x21 || c > 0x7e || c == '+')
            return 0;
    }
    return 1;
}

static void key_id(uint8_t id[4], const char *name, const uint8_t pk[32]) {
    crypto_hash_sha256_state h;
    uint8_t full[32];
    static const uint8_t sep[2] = {0x0A, 0x01};
    crypto_hash_sha256_init(&h);
    crypto_hash_sha256_update(&h, (const uint8_t *)name, strlen(name));
    crypto_hash_sha256_update(&h, sep, 2);
    crypto_hash_sha256_update(&h, pk, 32);
    crypto_hash_sha256_final(&h, full);
    memcpy(id, full, 4);
}

/* Decodes exactly blen bytes from n base64 characters at s, refusing any text that is not
 * the canonical encoding of the result. 0 on success. */
static int b64_strict(uint8_t *out, size_t blen, const char *s, size_t n) {
    char again[128];
    size_t got = 0;
    if (n != sodium_base64_ENCODED_LEN(blen, sodium_base64_VARIANT_ORIGINAL) - 1)
        return -1;
    /* unreachable: callers decode at most 68 bytes (92 characters) */
    if (n >= sizeof(again)) // GCOVR_EXCL_BR_LINE
        return -1;
    if (sodium_base642bin(out, blen, s, n, NULL, &got, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        got != blen)
        return -1;
    sodium_bin2base64(again, sizeof(again), out, blen, sodium_base64_VARIANT_ORIGINAL);
    /* A guard for libsodium: its decoder already refuses text that does not re-encode the
     * same (wrong padding, nonzero unused bits), so this never differs. */
    int same = memcmp(again, s, n) == 0;
    return same ? 0 : -1; // GCOVR_EXCL_BR_LINE as just said
}

fl_status fl__store_audit_note_sign(const fl_allocator *alloc, const char *origin, int64_t size,
                                    const uint8_t root[32], const uint8_t sk[64], char **out,
                                    size_t *len) {
    uint8_t pk[32], blob[68];
    char root64[ROOT_B64_LEN + 1], sig64[SIG_B64_LEN + 1];
    *out = NULL;
    *len = 0;
    crypto_sign_ed25519_sk_to_pk(pk, sk);
    sodium_bin2base64(root64, sizeof(root64), root, 32, sodium_base64_VARIANT_ORIGINAL);
    size_t olen = strlen(origin);
    size_t cap = olen * 2 + 64 + ROOT_B64_LEN + SIG_B64_LEN;
    char *buf = fl__alloc(alloc, cap);
    if (!buf)
        return FL_ERR_NOMEM;
    int tl = snprintf(buf, cap, "%s\n%" PRId64 "\n%s\n", origin, size, root64);
    /* unreachable: cap holds both lines (origin twice, 20 digits, both base64 strings) */
    if (tl < 0 || (size_t)tl >= cap) { // GCOVR_EXCL_BR_LINE
        fl__free(alloc, buf, cap);
        return FL_ERR_INTERNAL;
    }
    key_id(blob, origin, pk);
    crypto_sign_detached(blob + 4, NULL, (const uint8_t *)buf, (size_t)tl, sk);
    sodium_bin2base64(sig64, sizeof(sig64), blob, sizeof(blob), sodium_base64_VARIANT_ORIGINAL);
    int nl = snprintf(buf + tl, cap - (size_t)tl, "\n" EM_DASH " %s %s\n", origin, sig64);
    if (nl < 0 || (size_t)nl >= cap - (size_t)tl) { // GCOVR_EXCL_BR_LINE as above
        fl__free(alloc, buf, cap);
        return FL_ERR_INTERNAL;
    }
    /* Shrink to the exact size so the caller frees len + 1 bytes. */
    size_t total = (size_t)tl + (size_t)nl;
    char *exact = fl__alloc(alloc, total + 1);
    if (!exact) {
        fl__free(alloc, buf, cap);
        return FL_ERR_NOMEM;
    }
    memcpy(exact, buf, total + 1);
    fl__free(alloc, buf, cap);
    *out = exact;
    *len = total;
    return FL_OK;
}

/* Finds the next '\n' in [p, end); returns its position or NULL. */
static const char *eol(const char *p, const char *end) {
    return memchr(p, '\n', (size_t)(end - p));
}

fl_status fl__store_audit_note_verify(const char *note, size_t len, const char *origin,
                                      const uint8_t pk[32], int64_t *size_out, uint8_t root_out[32],
                                      char *why, size_t why_len) {
    const char *p = note, *end = note + len, *nl;
    size_t olen = strlen(origin);
    uint8_t root[32], blob[68], id[4];
    int64_t size = 0;
    /* Line 1: origin. */
    nl = eol(p, end);
    if (!nl || (size_t)(nl - p) != olen || memcmp(p, origin, olen) != 0) {
        snprintf(why, why_len, "checkpoint origin is not \"%s\"", origin);
        return FL_ERR_FORMAT;
    }
    p = nl + 1;
    /* Line 2: tree size, decimal without leading zeros. */
    nl = eol(p, end);
    size_t dl = nl ? (size_t)(nl - p) : 0;
    if (!nl || dl == 0 || dl > 18 || (p[0] == '0' && dl > 1)) {
        snprintf(why, why_len, "checkpoint tree size is malformed");
        return FL_ERR_FORMAT;
    }
    for (size_t i = 0; i < dl; i++) {
        if (p[i] < '0' || p[i] > '9') {
            snprintf(why, why_len, "checkpoint tree size is malformed");
            return FL_ERR_FORMAT;
        }
        size = size * 10 + (p[i] - '0');
    }
    p = nl + 1;
    /* Line 3: root hash. */
    nl = eol(p, end);
    if (!nl || b64_strict(root, 32, p, (size_t)(nl - p)) != 0) {
        snprintf(why, why_len, "checkpoint root hash is malformed");
        return FL_ERR_FORMAT;
    }
    p = nl + 1;
    size_t text_len = (size_t)(p - note);
    /* Blank line, then exactly one signature line ending the note. */
    size_t want = 1 + 3 + 1 + olen + 1 + SIG_B64_LEN + 1;
    if ((size_t)(end - p) != want || p[0] != '\n' || memcmp(p + 1, EM_DASH " ", 4) != 0 ||
        memcmp(p + 5, origin, olen) != 0 || p[5 + olen] != ' ' || end[-1] != '\n' ||
        b64_strict(blob, sizeof(blob), p + 6 + olen, SIG_B64_LEN) != 0) {
        snprintf(why, why_len, "checkpoint signature line is malformed");
        return FL_ERR_FORMAT;
    }
    key_id(id, origin, pk);
    if (memcmp(id, blob, 4) != 0) {
        snprintf(why, why_len, "checkpoint is signed by another key (key id differs)");
        return FL_ERR_CRYPTO;
    }
    if (crypto_sign_verify_detached(blob + 4, (const uint8_t *)note, text_len, pk) != 0) {
        snprintf(why, why_len, "checkpoint signature does not verify");
        return FL_ERR_CRYPTO;
    }
    if (size_out)
        *size_out = size;
    if (root_out)
        memcpy(root_out, root, 32);
    return FL_OK;
}

fl_status fl__store_audit_vkey_parse(const char *vkey, char *name, size_t cap, uint8_t pk[32]) {
    if (!vkey)
        return FL_ERR_FORMAT;
    size_t n = strnlen(vkey, 512);
    const char *plus1 = memchr(vkey, '+', n);
    if (!plus1)
        return FL_ERR_FORMAT;
    size_t nl = (size_t)(plus1 - vkey);
    if (nl == 0 || nl >= cap || n != nl + 1 + 8 + 1 + KEY_B64_LEN || plus1[9] != '+')
        return FL_ERR_FORMAT;
    memcpy(name, vkey, nl);
    name[nl] = '\0';
    if (!fl__store_audit_origin_ok(name))
        return FL_ERR_FORMAT;
    uint8_t key[33], id[4];
    if (b64_strict(key, 33, plus1 + 10, KEY_B64_LEN) != 0 || key[0] != 0x01)
        return FL_ERR_FORMAT;
    memcpy(pk, key + 1, 32);
    key_id(id, name, pk);
    char hex[9];
    fl__store_audit_hex(hex, id, 4);
    if (memcmp(hex, plus1 + 1, 8) != 0)
        return FL_ERR_FORMAT;
    return FL_OK;
}

/* ---- public ---- */

fl_status fl_store_audit_vkey(char *out, size_t cap, const char *origin,
                              const uint8_t public_key[FL_STORE_AUDIT_PUBLIC_KEY_BYTES]) {
    if (!out || !public_key || !fl__store_audit_origin_ok(origin))
        return FL_ERR_MISUSE;
    uint8_t key[33], id[4];
    char hex[9], b64[KEY_B64_LEN + 1];
    key[0] = 0x01;
    memcpy(key + 1, public_key, 32);
    key_id(id, origin, public_key);
    fl__store_audit_hex(hex, id, 4);
    sodium_bin2base64(b64, sizeof(b64), key, sizeof(key), sodium_base64_VARIANT_ORIGINAL);
    int n = snprintf(out, cap, "%s+%s+%s", origin, hex, b64);
    /* n < 0 is unreachable: snprintf of plain strings does not fail */
    if (n < 0 || (size_t)n >= cap) { // GCOVR_EXCL_BR_LINE
        if (cap)
            out[0] = '\0';
        return FL_ERR_RANGE;
    }
    return FL_OK;
}

fl_status fl_store_audit_checkpoint_verify(const char *note, size_t len, const char *vkey,
                                           int64_t *tree_size,
                                           uint8_t root[FL_STORE_AUDIT_HASH_BYTES]) {
    char name[FL_STORE_AUDIT_ORIGIN_MAX + 1], why[128];
    uint8_t pk[32];
    if (!note || !vkey)
        return FL_ERR_MISUSE;
    if (fl__store_audit_vkey_parse(vkey, name, sizeof(name), pk) != FL_OK)
        return FL_ERR_FORMAT;
    return fl__store_audit_note_verify(note, len, name, pk, tree_size, root, why, sizeof(why));
}
