/* The client SDK's two crypto profiles give the same answers. This file is built twice:
 * client_test_crypto_profiles_sodium links the normal objects (libsodium + OpenSSL) and
 * client_test_crypto_profiles_embedded the embedded profile's (mbedTLS alone,
 * FL_TEST_EMBEDDED). Both check every record of tests/vectors/client-sdk/crypto_profiles.txt
 * (RFC 8439 ChaCha20 block vectors, FIPS 180-2 SHA-256, strict base64, and the exact streams
 * behind fl_dp_rng_create_chacha20 and the distributed-DP rotation signs, computed
 * independently by gen_profile_vectors.py) and the RFC 8032 Ed25519 records of
 * tests/vectors/secagg/ed25519.txt through the SDK's verifier. A device on either library
 * therefore expands the same rotation signs and seeded streams as a coordinator on libsodium.
 * The randomness helpers (OS-seeded) are checked for distinct, non-constant output, and each
 * profile's own choices (default secagg backend, no libcurl in the embedded one). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chacha.h"          /* dp/src: fl__dp_chacha20_keystream, fl__dp_os_random */
#include "client_internal.h" /* client-sdk/src: fl__client_sha256, _unbase64, ... */
#include "crypto.h"          /* secagg/src: backend tables */
#include "fl_test.h"
#include "flotilla/client.h"
#include "flotilla/dp.h"
#include "secagg_internal.h" /* fl__sa_backend */

/* ---- vector files: records of `key = value` lines separated by blank lines ---- */

#define MAX_KEYS 12
#define MAX_VAL 40000

struct rec {
    int n;
    char key[MAX_KEYS][24];
    char *val[MAX_KEYS]; /* malloc'ed, trailing blanks removed */
};

static void rec_clear(struct rec *r) {
    for (int i = 0; i < r->n; i++)
        free(r->val[i]);
    memset(r, 0, sizeof(*r));
}

static const char *get(const struct rec *r, const char *key) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->key[i], key) == 0)
            return r->val[i];
    return NULL;
}

static const char *need(const struct rec *r, const char *key) {
    const char *v = get(r, key);
    if (!v)
        fail_msg("record %s lacks '%s'", get(r, "name") ? get(r, "name") : "?", key);
    return v;
}

/* Reads the next record; false at the end of the file. */
static bool next_rec(FILE *f, struct rec *r) {
    static char line[MAX_VAL];
    rec_clear(r);
    while (fgets(line, sizeof(line), f)) {
        size_t l = strlen(line);
        while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' '))
            line[--l] = '\0';
        if (line[0] == '#')
            continue;
        if (l == 0) {
            if (r->n > 0)
                return true;
            continue;
        }
        char *eq = strstr(line, " =");
        assert_non_null(eq);
        assert_true(r->n < MAX_KEYS);
        *eq = '\0';
        size_t kl = strlen(line);
        assert_true(kl < sizeof(r->key[0]));
        memcpy(r->key[r->n], line, kl + 1);
        const char *v = eq + 2;
        while (*v == ' ')
            v++;
        r->val[r->n] = strdup(v);
        assert_non_null(r->val[r->n]);
        r->n++;
    }
    return r->n > 0;
}

static FILE *open_vectors(const char *rel) {
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/vectors/%s", FL_SOURCE_DIR, rel);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    return f;
}

/* Decodes a hex value into a malloc'ed buffer (at least 1 byte); *n receives the length. */
static uint8_t *unhex(const char *s, size_t *n) {
    size_t l = strlen(s);
    assert_int_equal(l % 2, 0);
    uint8_t *b = malloc(l / 2 + 1);
    assert_non_null(b);
    for (size_t i = 0; i < l / 2; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        b[i] = (uint8_t)v;
    }
    *n = l / 2;
    return b;
}

static unsigned long num(const struct rec *r, const char *key) {
    return strtoul(need(r, key), NULL, 10);
}

/* ---- one check per record kind ---- */

static void check_chacha20(const struct rec *r) {
    size_t kl, nl, ol;
    uint8_t *key = unhex(need(r, "key"), &kl), *nonce = unhex(need(r, "nonce"), &nl);
    uint8_t *want = unhex(need(r, "out"), &ol);
    assert_int_equal(kl, 32);
    assert_int_equal(nl, 12);
    uint8_t *got = malloc(ol + 1);
    assert_non_null(got);
    memset(got, 0xa5, ol);
    assert_int_equal(fl__dp_chacha20_keystream(got, ol, nonce, (uint32_t)num(r, "block"), key), 0);
    assert_memory_equal(got, want, ol);
    free(got);
    free(key);
    free(nonce);
    free(want);
}

static void check_sha256(const struct rec *r) {
    size_t ml, ol;
    uint8_t *msg = unhex(need(r, "msg"), &ml), *want = unhex(need(r, "out"), &ol);
    uint8_t got[32];
    fl__client_sha256(got, msg, ml);
    assert_memory_equal(got, want, 32);
    free(msg);
    free(want);
}

static void check_base64(const struct rec *r) {
    size_t tl;
    uint8_t *text = unhex(need(r, "text"), &tl);
    text[tl] = '\0';
    size_t n = num(r, "n");
    uint8_t out[128];
    assert_true(n <= sizeof(out));
    bool ok = fl__client_unbase64(out, n, (const char *)text);
    if (strcmp(need(r, "result"), "ok") == 0) {
        size_t ol;
        uint8_t *want = unhex(need(r, "out"), &ol);
        if (!ok)
            fail_msg("%s: refused", need(r, "name"));
        assert_int_equal(ol, n);
        assert_memory_equal(out, want, n);
        free(want);
    } else if (ok) {
        fail_msg("%s: accepted", need(r, "name"));
    }
    free(text);
}

static void check_dp_rng(const struct rec *r) {
    size_t sl, wl;
    uint8_t *seed = unhex(need(r, "seed"), &sl), *want = unhex(need(r, "out_sha256"), &wl);
    size_t total = num(r, "len"), chunk = num(r, "chunk");
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&rng, seed, sl, NULL), FL_OK);
    for (size_t off = 0; off < total; off += chunk) {
        size_t k = total - off < chunk ? total - off : chunk;
        assert_int_equal(fl_dp_rng_bytes(rng, buf + off, k), FL_OK);
    }
    fl_dp_rng_destroy(rng);
    uint8_t got[32];
    fl__client_sha256(got, buf, total);
    assert_memory_equal(got, want, 32);
    free(buf);
    free(seed);
    free(want);
}

/* D H (sqrt(n) e_0) = D * ones for n a power of 4, so the inverse rotation of that vector
 * is exactly the sign vector; the forward rotation of e_0 is sign_0 / sqrt(n) everywhere. */
static void check_rotation(const struct rec *r) {
    size_t sl, bl;
    uint8_t *seed = unhex(need(r, "seed"), &sl), *bits = unhex(need(r, "signs"), &bl);
    size_t n = num(r, "n");
    assert_int_equal(bl, n / 8);
    double *x = calloc(n, sizeof(double));
    assert_non_null(x);
    x[0] = sqrt((double)n);
    assert_int_equal(fl_dp_rotation_inverse(x, n, seed), FL_OK);
    for (size_t i = 0; i < n; i++) {
        double want = (bits[i >> 3] >> (i & 7)) & 1 ? -1.0 : 1.0;
        if (x[i] != want)
            fail_msg("%s: sign %zu is %g, want %g", need(r, "name"), i, x[i], want);
    }
    memset(x, 0, n * sizeof(double));
    x[0] = 1.0;
    assert_int_equal(fl_dp_rotation_forward(x, n, seed), FL_OK);
    double s0 = (bits[0] & 1 ? -1.0 : 1.0) / sqrt((double)n);
    for (size_t i = 0; i < n; i++)
        assert_true(x[i] == s0);
    free(x);
    free(seed);
    free(bits);
}

static void test_vectors(void **st) {
    (void)st;
    FILE *f = open_vectors("client-sdk/crypto_profiles.txt");
    struct rec r = {0};
    int counts[5] = {0};
    while (next_rec(f, &r)) {
        const char *alg = need(&r, "alg");
        if (strcmp(alg, "chacha20") == 0)
            check_chacha20(&r), counts[0]++;
        else if (strcmp(alg, "sha256") == 0)
            check_sha256(&r), counts[1]++;
        else if (strcmp(alg, "base64") == 0)
            check_base64(&r), counts[2]++;
        else if (strcmp(alg, "dp_rng") == 0)
            check_dp_rng(&r), counts[3]++;
        else if (strcmp(alg, "rotation") == 0)
            check_rotation(&r), counts[4]++;
        else
            fail_msg("unknown alg %s", alg);
    }
    rec_clear(&r);
    fclose(f);
    /* Every kind ran: an emptied or truncated file must not pass. */
    assert_true(counts[0] >= 8 && counts[1] >= 3 && counts[2] >= 19 && counts[3] >= 2 &&
                counts[4] >= 1);
}

/* RFC 8032 section 7.1 TEST 1-3 must verify; the generated (flipped) records must not. */
static void test_ed25519_verify(void **st) {
    (void)st;
    FILE *f = open_vectors("secagg/ed25519.txt");
    struct rec r = {0};
    int good = 0, bad = 0;
#ifdef FL_TEST_EMBEDDED
    /* The verifier is secagg's mbedTLS backend's (ed25519_mbedtls.c). */
    const struct fl__sa_crypto *mb = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    assert_non_null(mb);
    assert_non_null(mb->ed25519_verify);
#endif
    while (next_rec(f, &r)) {
        size_t pl, ml, sl;
        uint8_t *pk = unhex(need(&r, "pk"), &pl), *msg = unhex(need(&r, "msg"), &ml);
        uint8_t *sig = unhex(need(&r, "sig"), &sl);
        assert_int_equal(pl, 32);
        assert_int_equal(sl, 64);
        int rc = fl__client_ed25519_verify(sig, msg, ml, pk);
        bool expect_ok = strncmp(need(&r, "name"), "rfc8032", 7) == 0;
        if (rc != (expect_ok ? FL_OK : FL_ERR_CRYPTO))
            fail_msg("%s: verify gave %s", need(&r, "name"), fl_status_name((fl_status)rc));
        expect_ok ? good++ : bad++;
        free(pk);
        free(msg);
        free(sig);
    }
    rec_clear(&r);
    fclose(f);
    assert_true(good >= 5 && bad >= 2);
}

/* OS-seeded helpers: no known answer, but every draw is fresh and not constant. */
static void test_randomness(void **st) {
    (void)st;
    uint8_t a[64], b[64], zero[64] = {0};
    fl__client_random(a, sizeof(a));
    fl__client_random(b, sizeof(b));
    assert_memory_not_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, zero, sizeof(a));
    assert_int_equal(fl__dp_os_random(a, 32), 0);
    assert_int_equal(fl__dp_os_random(b, 32), 0);
    assert_memory_not_equal(a, b, 32);
    assert_int_not_equal(fl__dp_os_random(a, 257), 0); /* over the documented bound */
    /* Two OS-backed dp rngs, across a refill (4096-byte buffers) and a rekey. */
    fl_dp_rng *r1 = NULL, *r2 = NULL;
    assert_int_equal(fl_dp_rng_create_os(&r1, NULL), FL_OK);
    assert_int_equal(fl_dp_rng_create_os(&r2, NULL), FL_OK);
    uint8_t *x = malloc(10000), *y = malloc(10000);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(fl_dp_rng_bytes(r1, x, 10000), FL_OK);
    assert_int_equal(fl_dp_rng_bytes(r2, y, 10000), FL_OK);
    assert_memory_not_equal(x, y, 10000);
    assert_memory_not_equal(x, x + 4096, 4096);
    /* Byte frequencies of 10,000 bytes: a stuck or zeroed stream fails this at once. */
    int hist[256] = {0};
    for (int i = 0; i < 10000; i++)
        hist[x[i]]++;
    for (int i = 0; i < 256; i++)
        assert_true(hist[i] > 5 && hist[i] < 90);
    free(x);
    free(y);
    fl_dp_rng_destroy(r1);
    fl_dp_rng_destroy(r2);
}

/* What differs between the profiles, by design. */
static void test_profile_choices(void **st) {
    (void)st;
    const struct fl__sa_crypto *def = fl__sa_backend(FL_SECAGG_BACKEND_DEFAULT);
    assert_non_null(def);
    fl_client_curl_config cc;
    fl_client_curl_config_init(&cc);
    cc.base_url = "http://127.0.0.1:9";
    fl_client_curl *t = NULL;
    char err[256] = "";
    fl_status rc = fl_client_curl_create(&t, &cc, err, sizeof(err));
#ifdef FL_TEST_EMBEDDED
    /* mbedTLS is the secagg default and the only backend; no libcurl transport. */
    assert_string_equal(def->name, "mbedtls");
    assert_null(fl__sa_crypto_get(FL__SA_BACKEND_SODIUM));
    assert_null(fl__sa_backend(FL_SECAGG_BACKEND_SODIUM));
    assert_int_equal(rc, FL_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(err, "fl_client_config.transport"));
    /* Argument errors still come first, as in the normal build. */
    cc.base_url = "ftp://x";
    assert_int_equal(fl_client_curl_create(&t, &cc, err, sizeof(err)), FL_ERR_MISUSE);
#elif defined(FL_TEST_HAVE_CURL)
    assert_non_null(fl__sa_crypto_get(FL__SA_BACKEND_SODIUM));
    assert_int_equal(rc, FL_OK);
    fl_client_curl_destroy(t);
#else
    assert_non_null(fl__sa_crypto_get(FL__SA_BACKEND_SODIUM));
    assert_int_equal(rc, FL_ERR_UNSUPPORTED);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_ed25519_verify),
        cmocka_unit_test(test_randomness),
        cmocka_unit_test(test_profile_choices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
