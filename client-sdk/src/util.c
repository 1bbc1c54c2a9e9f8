/* Small utilities of the client SDK: clock, deterministic PRNG, a non-allocating JSON
 * reader and writer, hex. The crypto primitives (SHA-256, base64, Ed25519 verification,
 * randomness) are in crypto_sodium.c or, in the embedded profile, crypto_mbedtls.c. */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"

/* ---- time ---- */

int64_t fl__client_now_real(void *unused) {
    (void)unused;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void fl__client_sleep_ms(int64_t ms) {
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- PRNG ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fl__client_rng_seed(struct fl__client_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t fl__client_rng_next(struct fl__client_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t fl__client_rng_below(struct fl__client_rng *r, uint64_t n) {
    /* Rejection on the top of the range keeps every residue equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = fl__client_rng_next(r);
    } while (x >= limit);
    return x % n;
}

double fl__client_rng_unit(struct fl__client_rng *r) {
    return (double)(fl__client_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- JSON reader ---- */

struct jp {
    struct fl__client_json *j;
    size_t pos;
    int depth;
    fl_status err;
};

static void skip_ws(struct jp *p) {
    const char *s = p->j->text;
    while (p->pos < p->j->len &&
           (s[p->pos] == ' ' || s[p->pos] == '\t' || s[p->pos] == '\n' || s[p->pos] == '\r'))
        p->pos++;
}

static long new_tok(struct jp *p, int kind, size_t start) {
    if (p->j->ntok >= p->j->cap) {
        p->err = FL_ERR_TOO_LARGE;
        return -1;
    }
    struct fl__client_jtok *t = &p->j->tok[p->j->ntok];
    t->kind = (uint8_t)kind;
    t->start = (uint32_t)start;
    t->end = (uint32_t)start;
    t->count = 0;
    t->next = 0;
    return (long)p->j->ntok++;
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

/* Validates UTF-8 of s[0..n) (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static bool utf8_ok(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            c = (c << 6) | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

static long parse_value(struct jp *p);

static long parse_string(struct jp *p) {
    const char *s = p->j->text;
    size_t start = ++p->pos; /* after the quote */
    long t = new_tok(p, FL__J_STRING, start);
    if (t < 0)
        return -1;
    while (p->pos < p->j->len) {
        unsigned char c = (unsigned char)s[p->pos];
        if (c == '"') {
            if (!utf8_ok((const unsigned char *)s + start, p->pos - start))
                break;
            p->j->tok[t].end = (uint32_t)p->pos;
            p->j->tok[t].next = (uint32_t)p->j->ntok;
            p->pos++;
            return t;
        }
        if (c < 0x20)
            break;
        if (c == '\\') {
            p->pos++;
            if (p->pos >= p->j->len)
                break;
            char e = s[p->pos];
            if (e == 'u') {
                if (p->pos + 4 >= p->j->len)
                    break;
                for (int k = 1; k <= 4; k++)
                    if (hexval(s[p->pos + k]) < 0)
                        goto bad;
                p->pos += 4;
            } else if (!strchr("\"\\/bfnrt", e) || e == '\0') {
                break;
            }
        }
        p->pos++;
    }
bad:
    p->err = FL_ERR_FORMAT;
    return -1;
}

static long parse_number(struct jp *p) {
    const char *s = p->j->text;
    size_t n = p->j->len, i = p->pos;
    long t = new_tok(p, FL__J_NUMBER, i);
    if (t < 0)
        return -1;
    if (i < n && s[i] == '-')
        i++;
    if (i < n && s[i] == '0') {
        i++;
    } else if (i < n && s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        goto bad;
    }
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            goto bad;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            goto bad;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i - p->pos > 64)
        goto bad;
    p->j->tok[t].end = (uint32_t)i;
    p->j->tok[t].next = (uint32_t)p->j->ntok;
    p->pos = i;
    return t;
bad:
    p->err = FL_ERR_FORMAT;
    return -1;
}

static long parse_container(struct jp *p, bool object) {
    if (++p->depth > FL__CLIENT_JSON_MAX_DEPTH) {
        p->err = FL_ERR_FORMAT;
        return -1;
    }
    long t = new_tok(p, object ? FL__J_OBJECT : FL__J_ARRAY, p->pos);
    if (t < 0)
        return -1;
    p->pos++;
    skip_ws(p);
    char close = object ? '}' : ']';
    const char *s = p->j->text;
    if (p->pos < p->j->len && s[p->pos] == close) {
        p->pos++;
        goto done;
    }
    for (;;) {
        skip_ws(p);
        if (object) {
            if (p->pos >= p->j->len || s[p->pos] != '"')
                goto bad;
            if (parse_string(p) < 0)
                return -1;
            skip_ws(p);
            if (p->pos >= p->j->len || s[p->pos] != ':')
                goto bad;
            p->pos++;
        }
        if (parse_value(p) < 0)
            return -1;
        p->j->tok[t].count++;
        skip_ws(p);
        if (p->pos >= p->j->len)
            goto bad;
        if (s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (s[p->pos] == close) {
            p->pos++;
            break;
        }
        goto bad;
    }
done:
    p->j->tok[t].end = (uint32_t)p->pos;
    p->j->tok[t].next = (uint32_t)p->j->ntok;
    p->depth--;
    return t;
bad:
    p->err = FL_ERR_FORMAT;
    return -1;
}

static long parse_literal(struct jp *p, const char *lit, int kind) {
    size_t n = strlen(lit);
    if (p->j->len - p->pos < n || memcmp(p->j->text + p->pos, lit, n) != 0) {
        p->err = FL_ERR_FORMAT;
        return -1;
    }
    long t = new_tok(p, kind, p->pos);
    if (t < 0)
        return -1;
    p->pos += n;
    p->j->tok[t].end = (uint32_t)p->pos;
    p->j->tok[t].next = (uint32_t)p->j->ntok;
    return t;
}

static long parse_value(struct jp *p) {
    skip_ws(p);
    if (p->pos >= p->j->len) {
        p->err = FL_ERR_FORMAT;
        return -1;
    }
    char c = p->j->text[p->pos];
    switch (c) {
    case '{': return parse_container(p, true);
    case '[': return parse_container(p, false);
    case '"': return parse_string(p);
    case 't': return parse_literal(p, "true", FL__J_TRUE);
    case 'f': return parse_literal(p, "false", FL__J_FALSE);
    case 'n': return parse_literal(p, "null", FL__J_NULL);
    default: return parse_number(p);
    }
}

fl_status fl__client_json_parse(struct fl__client_json *j, const char *text, size_t len,
                                struct fl__client_jtok *tok, size_t cap) {
    memset(j, 0, sizeof(*j));
    if (len >= UINT32_MAX)
        return FL_ERR_TOO_LARGE;
    j->text = text;
    j->len = len;
    j->tok = tok;
    j->cap = cap;
    struct jp p = {j, 0, 0, FL_OK};
    skip_ws(&p);
    if (p.pos >= len || text[p.pos] != '{')
        return FL_ERR_FORMAT;
    if (parse_value(&p) < 0)
        return p.err ? p.err : FL_ERR_FORMAT;
    skip_ws(&p);
    if (p.pos != len)
        return FL_ERR_FORMAT;
    return FL_OK;
}

int fl__client_json_kind(const struct fl__client_json *j, long t) {
    if (t < 0 || (size_t)t >= j->ntok)
        return 0;
    return j->tok[t].kind;
}

/* Unescapes the string token t into buf; returns the length or -1. */
static long unescape(const struct fl__client_json *j, long t, char *buf, size_t cap) {
    const char *s = j->text;
    size_t o = 0;
    for (size_t i = j->tok[t].start; i < j->tok[t].end; i++) {
        unsigned cp;
        if (s[i] != '\\') {
            cp = (unsigned char)s[i];
            if (o + 1 >= cap)
                return -1;
            buf[o++] = (char)cp;
            continue;
        }
        char e = s[++i];
        switch (e) {
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            cp = 0;
            for (int k = 1; k <= 4; k++)
                cp = cp * 16 + (unsigned)hexval(s[i + k]);
            i += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                /* High surrogate: a low one must follow. */
                if (i + 6 >= j->tok[t].end || s[i + 1] != '\\' || s[i + 2] != 'u')
                    return -1;
                unsigned lo = 0;
                for (int k = 3; k <= 6; k++)
                    lo = lo * 16 + (unsigned)hexval(s[i + k]);
                if (lo < 0xdc00 || lo > 0xdfff)
                    return -1;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return -1;
            }
            break;
        default: cp = (unsigned char)e; break;
        }
        if (cp == 0)
            return -1;
        char enc[4];
        size_t n;
        if (cp < 0x80) {
            enc[0] = (char)cp, n = 1;
        } else if (cp < 0x800) {
            enc[0] = (char)(0xc0 | (cp >> 6)), enc[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
        } else if (cp < 0x10000) {
            enc[0] = (char)(0xe0 | (cp >> 12)), enc[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
            enc[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
        } else {
            enc[0] = (char)(0xf0 | (cp >> 18)), enc[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
            enc[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), enc[3] = (char)(0x80 | (cp & 0x3f));
            n = 4;
        }
        if (o + n >= cap)
            return -1;
        memcpy(buf + o, enc, n);
        o += n;
    }
    if (o >= cap)
        return -1;
    buf[o] = '\0';
    return (long)o;
}

long fl__client_json_get(const struct fl__client_json *j, long obj, const char *key) {
    if (fl__client_json_kind(j, obj) != FL__J_OBJECT)
        return -1;
    size_t klen = strlen(key);
    long k = obj + 1;
    long found = -1;
    for (uint32_t m = 0; m < j->tok[obj].count; m++) {
        long v = k + 1;
        char tmp[128];
        long n = unescape(j, k, tmp, sizeof(tmp));
        /* The last duplicate wins, as in most parsers; the SDK's inputs are signed anyway. */
        if (n >= 0 && (size_t)n == klen && memcmp(tmp, key, klen) == 0)
            found = v;
        k = (long)j->tok[v].next;
    }
    return found;
}

long fl__client_json_at(const struct fl__client_json *j, long arr, size_t i) {
    if (fl__client_json_kind(j, arr) != FL__J_ARRAY || i >= j->tok[arr].count)
        return -1;
    long t = arr + 1;
    for (size_t k = 0; k < i; k++)
        t = (long)j->tok[t].next;
    return t;
}

bool fl__client_json_str(const struct fl__client_json *j, long t, char *buf, size_t cap) {
    if (fl__client_json_kind(j, t) != FL__J_STRING || cap == 0)
        return false;
    return unescape(j, t, buf, cap) >= 0;
}

bool fl__client_json_num(const struct fl__client_json *j, long t, double *out) {
    if (fl__client_json_kind(j, t) != FL__J_NUMBER)
        return false;
    char tmp[72];
    size_t n = j->tok[t].end - j->tok[t].start;
    if (n >= sizeof(tmp))
        return false;
    memcpy(tmp, j->text + j->tok[t].start, n);
    tmp[n] = '\0';
    char *end;
    double v = strtod(tmp, &end);
    if (*end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool fl__client_json_int(const struct fl__client_json *j, long t, int64_t *out) {
    if (fl__client_json_kind(j, t) != FL__J_NUMBER)
        return false;
    const char *s = j->text + j->tok[t].start;
    size_t n = j->tok[t].end - j->tok[t].start;
    size_t i = 0;
    bool neg = false;
    if (s[0] == '-')
        neg = true, i = 1;
    if (i == n)
        return false;
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false; /* fraction or exponent: not an integer on the wire */
        v = v * 10 + (s[i] - '0');
        if (v > (INT64_C(1) << 53) - 1)
            return false;
    }
    *out = neg ? -v : v;
    return true;
}

bool fl__client_json_bool(const struct fl__client_json *j, long t, bool *out) {
    int k = fl__client_json_kind(j, t);
    if (k != FL__J_TRUE && k != FL__J_FALSE)
        return false;
    *out = k == FL__J_TRUE;
    return true;
}

/* ---- JSON writer ---- */

void fl__client_jw_init(struct fl__client_jw *w, char *buf, size_t cap) {
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = cap == 0;
    if (cap)
        buf[0] = '\0';
}

static void jw_put(struct fl__client_jw *w, const char *s, size_t n) {
    if (w->overflow || w->len + n + 1 > w->cap) {
        w->overflow = true;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

void fl__client_jw_raw(struct fl__client_jw *w, const char *s) {
    jw_put(w, s, strlen(s));
}

void fl__client_jw_str(struct fl__client_jw *w, const char *s) {
    jw_put(w, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            jw_put(w, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof(e), "\\u%04x", c);
            jw_put(w, e, 6);
        } else {
            jw_put(w, (const char *)&c, 1);
        }
    }
    jw_put(w, "\"", 1);
}

void fl__client_jw_int(struct fl__client_jw *w, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)v);
    jw_put(w, tmp, (size_t)n);
}

bool fl__client_jw_ok(const struct fl__client_jw *w) {
    return !w->overflow;
}

/* ---- bytes ---- */

void fl__client_hex(char *out, const uint8_t *in, size_t n) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
}

bool fl__client_unhex(uint8_t *out, size_t n, const char *s) {
    if (strlen(s) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

fl_status fl_client_key_id(char *out, const uint8_t *pk) {
    if (!out || !pk)
        return FL_ERR_MISUSE;
    uint8_t h[32];
    fl__client_sha256(h, pk, FL_CLIENT_PUBLIC_KEY_BYTES);
    fl__client_hex(out, h, 8);
    return FL_OK;
}

size_t fl_client_public_key_bytes(void) {
    return FL_CLIENT_PUBLIC_KEY_BYTES;
}
size_t fl_client_key_id_chars(void) {
    return FL_CLIENT_KEY_ID_CHARS;
}
size_t fl_client_token_max_chars(void) {
    return FL_CLIENT_TOKEN_MAX_CHARS;
}
size_t fl_client_max_layers(void) {
    return FL_CLIENT_MAX_LAYERS;
}
size_t fl_client_max_tensors(void) {
    return FL_CLIENT_MAX_TENSORS;
}
size_t fl_client_max_json_bytes(void) {
    return FL_CLIENT_MAX_JSON_BYTES;
}
size_t fl_client_signing_key_bytes(void) {
    return FL_CLIENT_SIGNING_KEY_BYTES;
}
size_t fl_client_device_id_bytes(void) {
    return FL_CLIENT_DEVICE_ID_BYTES;
}
size_t fl_client_cert_bytes(void) {
    return FL_CLIENT_CERT_BYTES;
}

/* ---- version, status names, trainer creation with its reason ---- */

int fl_client_version_number(void) {
    return fl_version_number();
}

const char *fl_client_version_string(void) {
    return fl_version_string();
}

const char *fl_client_status_name(fl_status code) {
    return fl_status_name(code);
}

const char *fl_client_status_str(fl_status code) {
    return fl_status_str(code);
}

/* The failed trainer is freed inside fl_client_trainer_create with its message, so the reason
 * is found again here the way the trainer finds it: the safetensors parse, then the network
 * shape check (fl__client_net_from_safetensors, which writes the message naming the
 * tensor). Only failures cost the second parse. */
fl_status fl_client_trainer_create_v2(fl_client_trainer **out, const void *model,
                                      size_t model_len, const fl_allocator *alloc,
                                      char *errmsg_out, size_t errmsg_len) {
    if (errmsg_out && errmsg_len > 0)
        errmsg_out[0] = 0;
    fl_status rc = fl_client_trainer_create(out, model, model_len, alloc);
    if (rc == FL_OK || !errmsg_out || errmsg_len == 0)
        return rc;
    struct fl__err err = {0};
    fl_allocator a;
    if (!out || !model || model_len == 0) {
        fl__err_set(&err, rc, "fl_client_trainer_create: %s is NULL or empty",
                    !out ? "out" : "model");
    } else if (fl__allocator_copy(&a, alloc) != FL_OK) {
        fl__err_set(&err, rc, "fl_client_trainer_create: incomplete allocator");
    } else if (rc == FL_ERR_NOMEM) {
        fl__err_set(&err, rc, "out of memory creating the trainer");
    } else {
        fl_safetensors *st = NULL;
        struct fl__client_layer ly[FL_CLIENT_MAX_LAYERS];
        size_t nl = 0, np = 0;
        fl_status r2 = fl_safetensors_create(&st, fl__client_ext_alloc(&a));
        if (r2 == FL_OK) {
            r2 = fl_safetensors_parse(st, model, model_len);
            if (r2 != FL_OK)
                fl__err_set(&err, r2, "model: %s", fl_safetensors_errmsg(st));
            else
                r2 = fl__client_net_from_safetensors(st, ly, &nl, &np, &err);
        }
        fl_safetensors_destroy(st);
        if (r2 == FL_OK || !err.msg[0])
            fl__err_set(&err, rc, "trainer creation failed: %s", fl_status_str(rc));
    }
    snprintf(errmsg_out, errmsg_len, "%s", fl__err_msg(&err));
    return rc;
}
