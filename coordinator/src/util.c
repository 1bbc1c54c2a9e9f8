/* Small helpers: hashing, encodings, randomness, validation, file reading. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "coord_internal.h"

void fl__coord_sha256(uint8_t out[32], const void *data, size_t len) {
    crypto_hash_sha256(out, data, len);
}

/* The label keeps this digest apart from every other SHA-256 the coordinator takes (tokens,
 * messages); the id is hashed as the 32 hex characters it is handed out and sent back as,
 * so a key matches here exactly when it matches the in-memory compare (round.c). */
_Static_assert(FL_STORE_PARTICIPATION_HASH_BYTES == 32, "participation hash is a SHA-256");

const uint8_t *fl__coord_pid_hash(uint8_t out[32], const char *pid) {
    static const char label[] = "flotilla/participation-id/v1"; /* + its NUL */
    uint8_t in[sizeof(label) + FL__COORD_PID_CHARS];
    if (!pid || strnlen(pid, FL__COORD_PID_CHARS + 1) != FL__COORD_PID_CHARS)
        return NULL;
    memcpy(in, label, sizeof(label));
    memcpy(in + sizeof(label), pid, FL__COORD_PID_CHARS);
    crypto_hash_sha256(out, in, sizeof(in));
    return out;
}

void fl__coord_poly1305(const struct evp_mac_st *mac, const uint8_t key[32],
                        uint8_t out[FL__COORD_BODY_TAG_BYTES], const void *data, size_t len) {
    _Static_assert(FL__COORD_BODY_TAG_BYTES == crypto_onetimeauth_BYTES, "tag size");
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new((EVP_MAC *)mac) : NULL;
    size_t n = 0;
    int ok = ctx && EVP_MAC_init(ctx, key, 32, NULL) == 1 &&
             (len == 0 || EVP_MAC_update(ctx, data, len) == 1) &&
             EVP_MAC_final(ctx, out, &n, FL__COORD_BODY_TAG_BYTES) == 1 &&
             n == FL__COORD_BODY_TAG_BYTES;
    EVP_MAC_CTX_free(ctx); /* wipes its key */
    if (!ok)
        crypto_onetimeauth(out, data, len, key);
}

void fl__coord_body_tag(const fl_coord *co, uint8_t out[FL__COORD_BODY_TAG_BYTES],
                        const void *data, size_t len) {
    fl__coord_poly1305(co->body_mac, co->body_mac_key, out, data, len);
}

/* ---- shared bodies ---- */

struct fl__coord_blob *fl__coord_blob_wrap(fl_coord *co, uint8_t *data, size_t len) {
    struct fl__coord_blob *b = fl__calloc(fl__coord_alloc(co), 1, sizeof(*b));
    if (!b) {
        fl__free(fl__coord_alloc(co), data, len);
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->data = data;
    b->len = len;
    b->size = len;
    b->alloc = fl__coord_alloc(co);
    return b;
}

struct fl__coord_blob *fl__coord_blob_ref(struct fl__coord_blob *b) {
    if (b)
        atomic_fetch_add(&b->refs, 1);
    return b;
}

void fl__coord_blob_unref(struct fl__coord_blob *b) {
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    const fl_allocator *a = b->alloc;
    fl__free(a, b->data, b->size);
    fl__free(a, b, sizeof(*b));
}

void fl__coord_hex(char *out, const uint8_t *in, size_t n) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool fl__coord_unhex(uint8_t *out, size_t n, const char *hex) {
    if (!hex || strlen(hex) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

void fl__coord_b64url(char *out, const uint8_t *in, size_t n) {
    sodium_bin2base64(out, sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_URLSAFE_NO_PADDING),
                      in, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

void fl__coord_b64(char *out, size_t out_len, const uint8_t *in, size_t n) {
    sodium_bin2base64(out, out_len, in, n, sodium_base64_VARIANT_ORIGINAL);
}

void fl__coord_random(void *out, size_t n) {
    randombytes_buf(out, n);
}

uint32_t fl__coord_random_below(uint32_t n) {
    return n ? randombytes_uniform(n) : 0;
}

bool fl__coord_valid_name(const char *s, size_t max, bool dot) {
    if (!s)
        return false;
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || (dot && c == '.');
        if (!ok)
            return false;
    }
    return true;
}

bool fl__coord_parse_id(const char *s, int64_t *out) {
    if (!s || !*s)
        return false;
    int64_t v = 0;
    size_t n = 0;
    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 18)
            return false;
        v = v * 10 + (s[n] - '0');
    }
    if (v <= 0)
        return false;
    *out = v;
    return true;
}

char *fl__coord_json_dumps(fl_coord *co, const json_t *j, size_t flags) {
    size_t n = j ? json_dumpb(j, NULL, 0, flags) : 0;
    if (n == 0)
        return NULL;
    char *s = fl__alloc(fl__coord_alloc(co), n + 1);
    if (!s)
        return NULL;
    if (json_dumpb(j, s, n, flags) != n) {
        fl__free(fl__coord_alloc(co), s, n + 1);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

void fl__coord_text_free(fl_coord *co, char *s) {
    if (s)
        fl__free(fl__coord_alloc(co), s, strlen(s) + 1);
}

fl_status fl__coord_read_file(char **out, size_t *len, const char *path, size_t max) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return FL_ERR_IO;
    fl_status rc = FL_OK;
    char *buf = malloc(max + 1);
    if (!buf) {
        rc = FL_ERR_NOMEM;
        goto out_close;
    }
    size_t got = fread(buf, 1, max + 1, f);
    if (ferror(f)) {
        rc = FL_ERR_IO;
        goto out_free;
    }
    if (got > max) {
        rc = FL_ERR_TOO_LARGE;
        goto out_free;
    }
    buf[got] = '\0';
    *out = buf;
    if (len)
        *len = got;
    goto out_close;
out_free:
    free(buf);
out_close:
    fclose(f);
    return rc;
}
