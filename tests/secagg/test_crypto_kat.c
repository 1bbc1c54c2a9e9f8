/* Generic known-answer runner for the secagg crypto layer: reads every data file in
 * tests/vectors/secagg/ (format: see gen_vectors.py there) and checks each record on every
 * backend that was built. Shamir records run split() with a random stub that replays the
 * record's `rand` bytes, so the field arithmetic is checked against Python integers. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "crypto.h"

/* ---- data file reader ---- */

#define KAT_MAX_FIELDS 16

struct kat_field {
    char *key;
    char *val;
};

struct kat_rec {
    struct kat_field f[KAT_MAX_FIELDS];
    int n;
};

struct kat_file {
    char *text;            /* whole file, NUL-separated in place */
    struct kat_rec *recs;  /* records in file order */
    size_t count;
};

static char *kat_trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static void kat_load(struct kat_file *kf, const char *fname) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/vectors/secagg/%s", FL_SOURCE_DIR, fname);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    kf->text = malloc((size_t)len + 1);
    assert_non_null(kf->text);
    assert_int_equal(fread(kf->text, 1, (size_t)len, f), (size_t)len);
    kf->text[len] = '\0';
    fclose(f);

    kf->recs = NULL;
    kf->count = 0;
    int in_rec = 0;
    char *line = kf->text;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *l = kat_trim(line);
        if (*l == '#') {
            /* comment */
        } else if (*l == '\0') {
            in_rec = 0;
        } else {
            char *eq = strchr(l, '=');
            if (!eq)
                fail_msg("%s: bad line '%s'", fname, l);
            *eq = '\0';
            if (!in_rec) {
                kf->recs = realloc(kf->recs, (kf->count + 1) * sizeof(*kf->recs));
                assert_non_null(kf->recs);
                memset(&kf->recs[kf->count], 0, sizeof(*kf->recs));
                kf->count++;
                in_rec = 1;
            }
            struct kat_rec *r = &kf->recs[kf->count - 1];
            assert_true(r->n < KAT_MAX_FIELDS);
            r->f[r->n].key = kat_trim(l);
            r->f[r->n].val = kat_trim(eq + 1);
            r->n++;
        }
        line = nl ? nl + 1 : NULL;
    }
}

static void kat_free(struct kat_file *kf) {
    free(kf->recs);
    free(kf->text);
}

static const char *kat_get(const struct kat_rec *r, const char *key) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->f[i].key, key) == 0)
            return r->f[i].val;
    return NULL;
}

static const char *kat_str(const struct kat_rec *r, const char *key) {
    const char *v = kat_get(r, key);
    if (!v)
        fail_msg("record %s lacks field %s", kat_get(r, "name"), key);
    return v;
}

static size_t kat_num(const struct kat_rec *r, const char *key) {
    char *end = NULL;
    const char *v = kat_str(r, key);
    unsigned long long n = strtoull(v, &end, 10);
    assert_true(end != v && *end == '\0');
    return (size_t)n;
}

static int kat_hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes a hex field into a malloc'd buffer (at least 1 byte so it is never NULL). */
static uint8_t *kat_hex(const struct kat_rec *r, const char *key, size_t *len) {
    const char *v = kat_str(r, key);
    size_t n = strlen(v);
    assert_int_equal(n % 2, 0);
    uint8_t *b = malloc(n / 2 + 1);
    assert_non_null(b);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = kat_hexval(v[2 * i]), lo = kat_hexval(v[2 * i + 1]);
        assert_true(hi >= 0 && lo >= 0);
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    *len = n / 2;
    return b;
}

static int kat_expect_fail(const struct kat_rec *r) {
    const char *v = kat_get(r, "result");
    return v && strcmp(v, "fail") == 0;
}

#define KAT_CHECK(cond, r, be)                                                           \
    do {                                                                                 \
        if (!(cond))                                                                     \
            fail_msg("%s [%s]: check failed: %s", kat_get((r), "name"), (be)->name, #cond); \
    } while (0)

/* ---- per-algorithm checks ---- */

static void kat_x25519(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t kl, ul, ol;
    uint8_t *k = kat_hex(r, "scalar", &kl), *u = kat_hex(r, "u", &ul);
    uint8_t out[32];
    assert_int_equal(kl, 32);
    assert_int_equal(ul, 32);
    int rc = c->x25519_shared(out, k, u);
    if (kat_expect_fail(r)) {
        KAT_CHECK(rc == -1, r, c);
    } else {
        uint8_t *want = kat_hex(r, "out", &ol);
        KAT_CHECK(rc == 0, r, c);
        KAT_CHECK(ol == 32 && memcmp(out, want, 32) == 0, r, c);
        free(want);
    }
    free(k);
    free(u);
}

static void kat_x25519_iter(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t kl, ul, ol;
    uint8_t *k = kat_hex(r, "scalar", &kl), *u = kat_hex(r, "u", &ul);
    uint8_t *want = kat_hex(r, "out", &ol);
    size_t iters = kat_num(r, "iterations");
    uint8_t next[32];
    for (size_t i = 0; i < iters; i++) {
        KAT_CHECK(c->x25519_shared(next, k, u) == 0, r, c);
        memcpy(u, k, 32);
        memcpy(k, next, 32);
    }
    KAT_CHECK(memcmp(k, want, 32) == 0, r, c);
    free(k);
    free(u);
    free(want);
}

static void kat_x25519_dh(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t l;
    uint8_t *ask = kat_hex(r, "alice_sk", &l), *apk = kat_hex(r, "alice_pk", &l);
    uint8_t *bsk = kat_hex(r, "bob_sk", &l), *bpk = kat_hex(r, "bob_pk", &l);
    uint8_t *shared = kat_hex(r, "shared", &l);
    uint8_t pk[32], s1[32], s2[32];
    KAT_CHECK(c->x25519_public(pk, ask) == 0 && memcmp(pk, apk, 32) == 0, r, c);
    KAT_CHECK(c->x25519_public(pk, bsk) == 0 && memcmp(pk, bpk, 32) == 0, r, c);
    KAT_CHECK(c->x25519_shared(s1, ask, bpk) == 0 && memcmp(s1, shared, 32) == 0, r, c);
    KAT_CHECK(c->x25519_shared(s2, bsk, apk) == 0 && memcmp(s2, shared, 32) == 0, r, c);
    free(ask);
    free(apk);
    free(bsk);
    free(bpk);
    free(shared);
}

static void kat_sha256(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t ml, ol;
    uint8_t *msg = kat_hex(r, "msg", &ml), *want = kat_hex(r, "out", &ol);
    size_t rep = kat_get(r, "repeat") ? kat_num(r, "repeat") : 1;
    uint8_t *full = malloc(ml * rep + 1);
    assert_non_null(full);
    for (size_t i = 0; i < rep; i++)
        memcpy(full + i * ml, msg, ml);
    uint8_t out[32];
    KAT_CHECK(c->sha256(out, (ml * rep) != 0 ? full : NULL, ml * rep) == 0, r, c);
    KAT_CHECK(ol == 32 && memcmp(out, want, 32) == 0, r, c);
    free(full);
    free(msg);
    free(want);
}

static void kat_hkdf(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t il, sl, nl, ol;
    uint8_t *ikm = kat_hex(r, "ikm", &il), *salt = kat_hex(r, "salt", &sl);
    uint8_t *info = kat_hex(r, "info", &nl);
    size_t len = kat_num(r, "len");
    uint8_t *out = malloc(len + 1);
    assert_non_null(out);
    int rc = c->hkdf_sha256(out, len, sl ? salt : NULL, sl, ikm, il, nl ? info : NULL, nl);
    if (kat_expect_fail(r)) {
        KAT_CHECK(rc == -1, r, c);
    } else {
        KAT_CHECK(rc == 0, r, c);
        if (kat_get(r, "okm_sha256")) {
            uint8_t *want = kat_hex(r, "okm_sha256", &ol), d[32];
            KAT_CHECK(c->sha256(d, out, len) == 0 && memcmp(d, want, 32) == 0, r, c);
            free(want);
        } else {
            uint8_t *want = kat_hex(r, "okm", &ol);
            KAT_CHECK(ol == len && memcmp(out, want, len) == 0, r, c);
            free(want);
        }
    }
    free(out);
    free(ikm);
    free(salt);
    free(info);
}

static void kat_aead(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t kl, nl, al, ml, cl;
    uint8_t *key = kat_hex(r, "key", &kl), *nonce = kat_hex(r, "nonce", &nl);
    uint8_t *ad = kat_hex(r, "ad", &al), *ct = kat_hex(r, "ct", &cl);
    assert_int_equal(kl, 32);
    assert_int_equal(nl, 12);
    const uint8_t *adp = al ? ad : NULL;
    if (strcmp(kat_str(r, "alg"), "aead") == 0) {
        uint8_t *msg = kat_hex(r, "msg", &ml);
        uint8_t *out = malloc(ml + 16);
        uint8_t *pt = malloc(ml + 1);
        assert_non_null(out);
        assert_non_null(pt);
        KAT_CHECK(cl == ml + 16, r, c);
        KAT_CHECK(c->aead_seal(out, ml ? msg : NULL, ml, adp, al, nonce, key) == 0, r, c);
        KAT_CHECK(memcmp(out, ct, cl) == 0, r, c);
        KAT_CHECK(c->aead_open(ml ? pt : NULL, ct, cl, adp, al, nonce, key) == 0, r, c);
        KAT_CHECK(memcmp(pt, msg, ml) == 0, r, c);
        free(out);
        free(pt);
        free(msg);
    } else {
        uint8_t *pt = malloc(cl + 1);
        assert_non_null(pt);
        memset(pt, 0xAA, cl + 1);
        KAT_CHECK(c->aead_open(pt, ct, cl, adp, al, nonce, key) == -1, r, c);
        /* Nothing unverified is left behind: out is zeroed on failure. */
        for (size_t i = 0; cl > 16 && i < cl - 16; i++)
            KAT_CHECK(pt[i] == 0, r, c);
        free(pt);
    }
    free(key);
    free(nonce);
    free(ad);
    free(ct);
}

static void kat_ed25519(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t l, ml;
    uint8_t *pk = kat_hex(r, "pk", &l), *msg = kat_hex(r, "msg", &ml), *sig = kat_hex(r, "sig", &l);
    if (strcmp(kat_str(r, "alg"), "ed25519") == 0) {
        uint8_t *seed = kat_hex(r, "seed", &l);
        uint8_t gpk[32], sk[64], gsig[64];
        KAT_CHECK(c->ed25519_keypair(gpk, sk, seed) == 0, r, c);
        KAT_CHECK(memcmp(gpk, pk, 32) == 0, r, c);
        KAT_CHECK(memcmp(sk, seed, 32) == 0 && memcmp(sk + 32, pk, 32) == 0, r, c);
        KAT_CHECK(c->ed25519_sign(gsig, ml ? msg : NULL, ml, sk) == 0, r, c);
        KAT_CHECK(memcmp(gsig, sig, 64) == 0, r, c);
        KAT_CHECK(c->ed25519_verify(sig, ml ? msg : NULL, ml, pk) == 0, r, c);
        free(seed);
    } else {
        /* result = ok must verify, result = fail must not (ed25519_edge.txt: libsodium's
         * decision on edge cases, which every backend must make). */
        int want = kat_expect_fail(r) ? -1 : 0;
        KAT_CHECK(c->ed25519_verify(sig, ml ? msg : NULL, ml, pk) == want, r, c);
    }
    free(pk);
    free(msg);
    free(sig);
}

static void kat_prg(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    size_t sl, ol;
    uint8_t *seed = kat_hex(r, "seed", &sl);
    assert_int_equal(sl, 32);
    if (kat_get(r, "out_sha256")) {
        size_t len = kat_num(r, "len");
        uint8_t *want = kat_hex(r, "out_sha256", &ol), d[32];
        uint8_t *out = malloc(len);
        assert_non_null(out);
        KAT_CHECK(c->prg(out, len, seed) == 0, r, c);
        KAT_CHECK(c->sha256(d, out, len) == 0 && memcmp(d, want, 32) == 0, r, c);
        free(out);
        free(want);
    } else {
        uint8_t *want = kat_hex(r, "out", &ol);
        uint8_t *out = malloc(ol + 1);
        assert_non_null(out);
        KAT_CHECK(c->prg(ol ? out : NULL, ol, seed) == 0, r, c);
        KAT_CHECK(memcmp(out, want, ol) == 0, r, c);
        free(out);
        free(want);
    }
    free(seed);
}

/* ---- Shamir with a replaying random stub ---- */

static const uint8_t *stub_buf;
static size_t stub_len, stub_pos;

static int stub_random(uint8_t *out, size_t n) {
    if (n > stub_len - stub_pos)
        return -1;
    memcpy(out, stub_buf + stub_pos, n);
    stub_pos += n;
    return 0;
}

static size_t kat_xs(const struct kat_rec *r, uint32_t *xs, size_t max) {
    const char *v = kat_str(r, "xs");
    size_t n = 0;
    while (*v) {
        char *end = NULL;
        unsigned long x = strtoul(v, &end, 10);
        assert_true(end != v && n < max);
        xs[n++] = (uint32_t)x;
        v = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Loads xs/ys of a record into shares; returns the count. */
static size_t kat_shares(const struct kat_rec *r, struct fl__sa_share *sh, size_t max) {
    uint32_t xs[64];
    size_t n = kat_xs(r, xs, 64), yl;
    assert_true(n <= max);
    uint8_t *ys = kat_hex(r, "ys", &yl);
    assert_int_equal(yl, n * FL__SA_SHARE_Y_BYTES);
    for (size_t i = 0; i < n; i++) {
        sh[i].x = xs[i];
        memcpy(sh[i].y, ys + i * FL__SA_SHARE_Y_BYTES, FL__SA_SHARE_Y_BYTES);
    }
    free(ys);
    return n;
}

static void kat_shamir(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    struct fl__sa_crypto stub = *c;
    struct fl__sa_share want[64], got[64];
    uint32_t xs[64];
    uint8_t out[32];
    size_t sl, rl;
    uint8_t *secret = kat_hex(r, "secret", &sl);
    uint8_t *rand = kat_hex(r, "rand", &rl);
    size_t n = kat_shares(r, want, 64), t = kat_num(r, "t");
    for (size_t i = 0; i < n; i++)
        xs[i] = want[i].x;

    stub.random = stub_random;
    stub_buf = rand;
    stub_len = rl;
    stub_pos = 0;
    KAT_CHECK(fl__sa_shamir_split(got, xs, n, t, secret, &stub) == 0, r, c);
    KAT_CHECK(stub_pos == rl, r, c); /* consumed exactly the recorded randomness */
    for (size_t i = 0; i < n; i++) {
        KAT_CHECK(got[i].x == want[i].x, r, c);
        KAT_CHECK(memcmp(got[i].y, want[i].y, FL__SA_SHARE_Y_BYTES) == 0, r, c);
    }
    /* Any t reconstruct: first t, last t, all n. */
    KAT_CHECK(fl__sa_shamir_combine(out, want, t) == 0 && memcmp(out, secret, 32) == 0, r, c);
    KAT_CHECK(fl__sa_shamir_combine(out, want + (n - t), t) == 0 && memcmp(out, secret, 32) == 0,
              r, c);
    KAT_CHECK(fl__sa_shamir_combine(out, want, n) == 0 && memcmp(out, secret, 32) == 0, r, c);
    if (t >= 2 && !kat_get(r, "degenerate")) {
        /* t-1 shares: fails the range check or gives another value. */
        int rc = fl__sa_shamir_combine(out, want, t - 1);
        KAT_CHECK(rc == -1 || memcmp(out, secret, 32) != 0, r, c);
    }
    free(secret);
    free(rand);
}

static void kat_shamir_combine(const struct fl__sa_crypto *c, const struct kat_rec *r) {
    struct fl__sa_share sh[64];
    uint8_t out[32];
    size_t n = kat_shares(r, sh, 64);
    int rc = fl__sa_shamir_combine(out, sh, n);
    if (kat_expect_fail(r)) {
        KAT_CHECK(rc == -1, r, c);
    } else {
        size_t sl;
        uint8_t *secret = kat_hex(r, "secret", &sl);
        KAT_CHECK(rc == 0 && memcmp(out, secret, 32) == 0, r, c);
        free(secret);
    }
}

/* ---- driver ---- */

struct kat_alg {
    const char *alg;
    void (*run)(const struct fl__sa_crypto *c, const struct kat_rec *r);
    int needs_ed25519;
};

static const struct kat_alg kat_algs[] = {
    {"x25519", kat_x25519, 0},
    {"x25519_iter", kat_x25519_iter, 0},
    {"x25519_dh", kat_x25519_dh, 0},
    {"sha256", kat_sha256, 0},
    {"hkdf_sha256", kat_hkdf, 0},
    {"aead", kat_aead, 0},
    {"aead_open", kat_aead, 0},
    {"ed25519", kat_ed25519, 1},
    {"ed25519_verify", kat_ed25519, 1},
    {"prg", kat_prg, 0},
    {"shamir", kat_shamir, 0},
    {"shamir_combine", kat_shamir_combine, 0},
};

/* Runs every record of fname on every built backend; returns records run per backend. */
static void kat_run_file(const char *fname, size_t min_records) {
    enum fl__sa_backend_id ids[] = {FL__SA_BACKEND_SODIUM, FL__SA_BACKEND_MBEDTLS};
    struct kat_file kf;
    kat_load(&kf, fname);
    assert_true(kf.count >= min_records);
    for (size_t b = 0; b < sizeof(ids) / sizeof(ids[0]); b++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(ids[b]);
        if (!c) {
            assert_int_equal(ids[b], FL__SA_BACKEND_MBEDTLS); /* sodium is always built */
            continue;
        }
        size_t ran = 0;
        for (size_t i = 0; i < kf.count; i++) {
            const char *alg = kat_str(&kf.recs[i], "alg");
            size_t a;
            for (a = 0; a < sizeof(kat_algs) / sizeof(kat_algs[0]); a++)
                if (strcmp(kat_algs[a].alg, alg) == 0)
                    break;
            if (a == sizeof(kat_algs) / sizeof(kat_algs[0]))
                fail_msg("%s: unknown alg %s", fname, alg);
            if (kat_algs[a].needs_ed25519) {
                /* Both backends implement Ed25519 (mbedtls: ed25519_mbedtls.c). */
                assert_non_null(c->ed25519_keypair);
                assert_non_null(c->ed25519_sign);
                assert_non_null(c->ed25519_verify);
            }
            kat_algs[a].run(c, &kf.recs[i]);
            ran++;
        }
        print_message("%s: %zu of %zu records on %s\n", fname, ran, kf.count, c->name);
        assert_int_equal(ran, kf.count); /* every built backend runs every record */
    }
    kat_free(&kf);
}

static void test_kat_x25519(void **s) { (void)s; kat_run_file("x25519.txt", 13); }
static void test_kat_sha256(void **s) { (void)s; kat_run_file("sha256.txt", 10); }
static void test_kat_hkdf(void **s) { (void)s; kat_run_file("hkdf_sha256.txt", 9); }
static void test_kat_aead(void **s) { (void)s; kat_run_file("chacha20poly1305.txt", 10); }
static void test_kat_ed25519(void **s) { (void)s; kat_run_file("ed25519.txt", 7); }
static void test_kat_ed25519_edge(void **s) { (void)s; kat_run_file("ed25519_edge.txt", 49); }
static void test_kat_prg(void **s) { (void)s; kat_run_file("prg_aes128ctr.txt", 12); }
/* The sodium backend's prg picks OpenSSL's or libgcrypt's AES-CTR by CPU; each must pass
 * the vectors on its own, whichever this machine picks. */
static void test_kat_prg_impls(void **s) {
    (void)s;
    const struct fl__sa_crypto *base = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    assert_non_null(base);
    struct fl__sa_crypto t[2] = {*base, *base};
    t[0].prg = fl__sa_prg_openssl;
    t[0].name = "prg-impl/openssl";
    t[1].prg = fl__sa_prg_gcrypt;
    t[1].name = "prg-impl/libgcrypt";
    size_t impls = 1;
#if defined(FL_HAVE_GCRYPT)
    impls = 2;
#else
    uint8_t seed[32] = {0}, out[16];
    assert_int_equal(fl__sa_prg_gcrypt(out, sizeof(out), seed), -1);
    assert_string_equal(fl__sa_prg_impl(), "openssl");
#endif
    struct kat_file kf;
    kat_load(&kf, "prg_aes128ctr.txt");
    assert_true(kf.count >= 12);
    for (size_t k = 0; k < impls; k++) {
        for (size_t i = 0; i < kf.count; i++)
            kat_prg(&t[k], &kf.recs[i]);
        print_message("prg_aes128ctr.txt: %zu records on %s\n", kf.count, t[k].name);
    }
    print_message("the sodium backend's prg runs on %s\n", fl__sa_prg_impl());
    kat_free(&kf);
}

static void test_kat_shamir(void **s) { (void)s; kat_run_file("shamir.txt", 17); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kat_x25519),  cmocka_unit_test(test_kat_sha256),
        cmocka_unit_test(test_kat_hkdf),    cmocka_unit_test(test_kat_aead),
        cmocka_unit_test(test_kat_ed25519), cmocka_unit_test(test_kat_ed25519_edge),
        cmocka_unit_test(test_kat_prg),
        cmocka_unit_test(test_kat_prg_impls),
        cmocka_unit_test(test_kat_shamir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
