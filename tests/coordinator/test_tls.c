/* HTTPS: a self-signed certificate and key made with the openssl CLI in a temp directory,
 * the coordinator started in-process with them (tls_cert_pem / tls_key_pem), and libcurl
 * talking to it over https on 127.0.0.1 with the certificate pinned (CURLOPT_CAINFO, and
 * CURLOPT_PINNEDPUBLICKEY with its public key): admin setup, enrollment and check-in work;
 * plain http to the TLS port gets no HTTP answer; a client that does not trust the
 * certificate (system CAs only) or pins another key is refused by libcurl. Exits 77
 * (skipped) without the openssl CLI or when libmicrohttpd was built without TLS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "coord_testkit.h"

#define SKIP 77

struct tls_env {
    char dir[64], cert[128], key[128], pub[128], other_pub[128], db[128];
    char *cert_pem, *key_pem;
    fl_coord *co;
    unsigned port;
};

static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, fp) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(fp);
    return s;
}

/* Makes a P-256 self-signed certificate for 127.0.0.1 (and a second, unrelated public key
 * for the wrong-pin case). Returns false when the openssl CLI is missing or fails. */
static bool make_cert(struct tls_env *e) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout key.pem -out cert.pem -days 1 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1 && "
             "openssl pkey -in key.pem -pubout -out pub.pem >/dev/null 2>&1 && "
             "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 "
             "-out other.pem >/dev/null 2>&1 && "
             "openssl pkey -in other.pem -pubout -out other_pub.pem >/dev/null 2>&1",
             e->dir);
    if (system(cmd) != 0)
        return false;
    e->cert_pem = slurp(e->cert);
    e->key_pem = slurp(e->key);
    return e->cert_pem && e->key_pem;
}

static void env_free(struct tls_env *e) {
    fl_coord_destroy(e->co);
    if (e->key_pem) {
        sodium_memzero(e->key_pem, strlen(e->key_pem));
        free(e->key_pem);
    }
    free(e->cert_pem);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", e->dir);
}

struct buf {
    char *p;
    size_t len;
};

static size_t sink(char *p, size_t sz, size_t n, void *u) {
    struct buf *b = u;
    char *nb = realloc(b->p, b->len + sz * n + 1);
    if (!nb)
        return 0;
    memcpy(nb + b->len, p, sz * n);
    b->p = nb;
    b->len += sz * n;
    b->p[b->len] = 0;
    return sz * n;
}

enum trust { TRUST_CA, TRUST_PIN, TRUST_SYSTEM, TRUST_WRONG_PIN };

/* One request to scheme://127.0.0.1:port/path. Returns the curl code; *status and *body
 * (malloc'ed, may be NULL) receive the answer. */
static CURLcode req(struct tls_env *e, const char *scheme, enum trust trust, const char *method,
                    const char *path, const char *token, const char *ctype, const void *body,
                    size_t len, long *status, char **out) {
    CURL *h = curl_easy_init();
    assert_non_null(h);
    char url[256], auth[300], ct[96];
    snprintf(url, sizeof(url), "%s://127.0.0.1:%u%s", scheme, e->port, path);
    struct curl_slist *hd = NULL;
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hd = curl_slist_append(hd, auth);
    }
    if (ctype) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
        hd = curl_slist_append(hd, ct);
    }
    hd = curl_slist_append(hd, "Expect:");
    struct buf b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, fl_test_scaled(10));
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (trust == TRUST_CA || trust == TRUST_PIN)
        curl_easy_setopt(h, CURLOPT_CAINFO, e->cert);
    if (trust == TRUST_PIN) /* the key itself, on top of the chain */
        curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, e->pub);
    if (trust == TRUST_WRONG_PIN) {
        curl_easy_setopt(h, CURLOPT_CAINFO, e->cert);
        curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, e->other_pub);
    }
    CURLcode rc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    if (out)
        *out = b.p;
    else
        free(b.p);
    return rc;
}

static const char *json_str(const char *body, const char *key, char *out, size_t n) {
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":\"", key);
    const char *p = body ? strstr(body, k) : NULL;
    if (!p)
        return NULL;
    p += strlen(k);
    snprintf(out, n, "%.*s", (int)strcspn(p, "\""), p);
    return out;
}

static void test_https_enroll_checkin(void **st) {
    (void)st;
    struct tls_env e;
    memset(&e, 0, sizeof(e));
    snprintf(e.dir, sizeof(e.dir), "/tmp/fl-coord-tls-XXXXXX");
    assert_non_null(mkdtemp(e.dir));
    snprintf(e.cert, sizeof(e.cert), "%s/cert.pem", e.dir);
    snprintf(e.key, sizeof(e.key), "%s/key.pem", e.dir);
    snprintf(e.pub, sizeof(e.pub), "%s/pub.pem", e.dir);
    snprintf(e.other_pub, sizeof(e.other_pub), "%s/other_pub.pem", e.dir);
    snprintf(e.db, sizeof(e.db), "%s/coord.db", e.dir);
    if (!make_cert(&e)) {
        fprintf(stderr, "openssl CLI missing or failed: skipped\n");
        env_free(&e);
        exit(SKIP);
    }
    fl_coord_config cc;
    fl_coord_config_init(&cc);
    cc.port = 0;
    cc.db_path = e.db;
    cc.has_admin_token = 1;
    crypto_hash_sha256(cc.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cc.tls_cert_pem = e.cert_pem;
    cc.tls_key_pem = e.key_pem;
    char err[256] = "";
    fl_status rc = fl_coord_create(&e.co, &cc, err, sizeof(err));
    if (rc != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_int_equal(rc, FL_OK);
    rc = fl_coord_start(e.co);
    if (rc == FL_ERR_UNSUPPORTED) {
        fprintf(stderr, "libmicrohttpd without TLS: skipped\n");
        env_free(&e);
        exit(SKIP);
    }
    assert_int_equal(rc, FL_OK);
    e.port = fl_coord_port(e.co);

    /* Admin setup over https, the certificate as the only trusted CA. */
    long status;
    char *body = NULL, etok[256], ctok[256];
    const char *pop =
        "{\"name\":\"tls\",\"allowed_regions\":[\"*\"],"
        "\"selection\":{\"target\":1,\"over_selection\":1.0,\"min_participants\":1,"
        "\"require\":[],\"forming_s\":60,\"jitter_s\":0,\"min_retry_s\":1,\"max_retry_s\":60},"
        "\"deadlines_s\":{\"advertise\":30,\"share\":30,\"masked\":60,\"unmask\":30},"
        "\"update\":{\"tensors\":[\"w\"],\"weighting\":\"uniform\",\"weight_cap\":50},"
        "\"strategy\":{\"name\":\"fedavg\"},\"secagg\":{\"enabled\":false},"
        "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0}}";
    assert_int_equal(req(&e, "https", TRUST_CA, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                         "application/json", pop, strlen(pop), &status, &body),
                     CURLE_OK);
    assert_int_equal(status, 201);
    assert_non_null(json_str(body, "enrollment_token", etok, sizeof(etok)));
    free(body);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    assert_int_equal(req(&e, "https", TRUST_CA, "POST", "/v1/admin/populations/tls/models",
                         ADMIN_TOKEN, "application/octet-stream", model, mlen, &status, NULL),
                     CURLE_OK);
    assert_int_equal(status, 201);
    free(model);
    assert_int_equal(req(&e, "https", TRUST_CA, "POST", "/v1/admin/populations/tls/start",
                         ADMIN_TOKEN, "application/json", NULL, 0, &status, NULL),
                     CURLE_OK);
    assert_int_equal(status, 200);

    /* Device side with the public key pinned too: enrollment, then check-in (selected). */
    const char *en = "{\"population\":\"tls\",\"region\":\"EU\"}";
    assert_int_equal(req(&e, "https", TRUST_PIN, "POST", "/v1/enroll", etok, "application/json", en,
                         strlen(en), &status, &body),
                     CURLE_OK);
    assert_int_equal(status, 201);
    assert_non_null(json_str(body, "client_token", ctok, sizeof(ctok)));
    free(body);
    const char *ci = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true},\"capabilities\":{\"secagg\":true}}";
    assert_int_equal(req(&e, "https", TRUST_PIN, "POST", "/v1/checkin", ctok, "application/json",
                         ci, strlen(ci), &status, &body),
                     CURLE_OK);
    assert_int_equal(status, 200);
    char st_[32];
    assert_non_null(json_str(body, "status", st_, sizeof(st_)));
    assert_string_equal(st_, "selected");
    free(body);

    /* Plain http to the TLS port: no HTTP answer. */
    CURLcode prc = req(&e, "http", TRUST_CA, "GET", "/readyz", NULL, NULL, NULL, 0, &status, NULL);
    assert_true(prc != CURLE_OK || (status != 200 && status != 503));
    assert_true(status != 200);
    /* A client that trusts only the system CAs, or pins another key, refuses the server. */
    prc = req(&e, "https", TRUST_SYSTEM, "GET", "/readyz", NULL, NULL, NULL, 0, &status, NULL);
    assert_true(prc == CURLE_PEER_FAILED_VERIFICATION || prc == CURLE_SSL_CACERT_BADFILE ||
                prc == CURLE_SSL_CONNECT_ERROR);
    prc = req(&e, "https", TRUST_WRONG_PIN, "GET", "/readyz", NULL, NULL, NULL, 0, &status, NULL);
    assert_int_equal(prc, CURLE_SSL_PINNEDPUBKEYNOTMATCH);
    /* And the right one still works after the failures. */
    assert_int_equal(
        req(&e, "https", TRUST_PIN, "GET", "/readyz", NULL, NULL, NULL, 0, &status, NULL),
        CURLE_OK);
    assert_int_equal(status, 200);
    env_free(&e);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_https_enroll_checkin)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
