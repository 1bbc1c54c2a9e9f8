/* Request deadlines over HTTPS (docs/protocol.md section 7): a request whose body stalls or
 * trickles past its deadline is closed without an answer, as over TLS the deadline's
 * watchdog owns no TLS session and libmicrohttpd cannot answer in the middle of a body. The
 * check is that nothing was written into the TLS stream outside it: the client, speaking
 * TLS through libcurl (CURLOPT_CONNECT_ONLY, curl_easy_send / curl_easy_recv), sees the
 * connection end with no application data and no TLS record error, which a 408 written to
 * the raw socket would cause; and the close counts in /metrics as a deadline close.
 * Skipped (cmocka skip) without the openssl CLI or a TLS-capable libmicrohttpd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "coord_testkit.h"
#include "fl_test_time.h"

struct env {
    char dir[64], cert[128], key[128], db[128];
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
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, fp) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(fp);
    return s;
}

static void env_free(struct env *e) {
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

/* A P-256 self-signed certificate for 127.0.0.1 and the coordinator on it, with a 2 s
 * request deadline (times FL_TEST_TIME_SCALE). False when the openssl CLI or TLS in
 * libmicrohttpd is missing. */
static bool env_start(struct env *e) {
    memset(e, 0, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/fl-coord-tls-dl-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->cert, sizeof(e->cert), "%s/cert.pem", e->dir);
    snprintf(e->key, sizeof(e->key), "%s/key.pem", e->dir);
    snprintf(e->db, sizeof(e->db), "%s/coord.db", e->dir);
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout key.pem -out cert.pem -days 1 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
             e->dir);
    if (system(cmd) != 0 || !(e->cert_pem = slurp(e->cert)) || !(e->key_pem = slurp(e->key)))
        return false;
    fl_coord_config cc;
    fl_coord_config_init(&cc);
    cc.port = 0;
    cc.threads = 2;
    cc.db_path = e->db;
    cc.has_admin_token = 1;
    crypto_hash_sha256(cc.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cc.tls_cert_pem = e->cert_pem;
    cc.tls_key_pem = e->key_pem;
    cc.request_deadline_s = (unsigned)fl_test_scaled(2);
    cc.request_min_body_rate = 1024;
    cc.limits.connection_timeout_s = (unsigned)fl_test_scaled(30);
    char err[256] = "";
    if (fl_coord_create(&e->co, &cc, err, sizeof(err)) != FL_OK)
        fail_msg("create: %s", err);
    fl_status rc = fl_coord_start(e->co);
    if (rc == FL_ERR_UNSUPPORTED)
        return false;
    assert_int_equal(rc, FL_OK);
    e->port = fl_coord_port(e->co);
    return true;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A TLS connection to the coordinator with libcurl doing the handshake only. */
static CURL *tls_connect(struct env *e) {
    CURL *h = curl_easy_init();
    assert_non_null(h);
    char url[128];
    snprintf(url, sizeof(url), "https://127.0.0.1:%u/", e->port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(h, CURLOPT_CAINFO, e->cert);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK)
        fail_msg("TLS connect: %s", curl_easy_strerror(rc));
    return h;
}

static void tls_send(CURL *h, const char *s) {
    size_t n = strlen(s), off = 0;
    double end = mono_s() + fl_test_scaled(5);
    while (off < n) {
        size_t k = 0;
        CURLcode rc = curl_easy_send(h, s + off, n - off, &k);
        if (rc == CURLE_AGAIN && mono_s() < end) {
            sleep_s(0.01);
            continue;
        }
        assert_int_equal(rc, CURLE_OK);
        off += k;
    }
}

/* Reads until the connection ends (or 15 s pass: a failure). Returns the curl code of the
 * end (CURLE_OK = a clean end of stream) and the application bytes received in *got. */
static CURLcode tls_read_to_end(CURL *h, size_t *got) {
    char buf[4096];
    *got = 0;
    double end = mono_s() + fl_test_scaled(15);
    for (;;) {
        size_t k = 0;
        CURLcode rc = curl_easy_recv(h, buf, sizeof(buf), &k);
        if (rc == CURLE_AGAIN) {
            if (mono_s() > end)
                fail_msg("the connection was not closed within 15 s");
            sleep_s(0.01);
            continue;
        }
        if (rc != CURLE_OK || k == 0)
            return rc;
        *got += k;
    }
}

struct text {
    char p[1 << 16];
    size_t len;
};

static size_t text_sink(char *p, size_t sz, size_t n, void *u) {
    struct text *t = u;
    size_t k = sz * n;
    if (k > sizeof(t->p) - 1 - t->len)
        return 0;
    memcpy(t->p + t->len, p, k);
    t->len += k;
    t->p[t->len] = '\0';
    return k;
}

static long closed_deadline_count(struct env *e) {
    char url[128];
    snprintf(url, sizeof(url), "https://127.0.0.1:%u/metrics", e->port);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct text *b = calloc(1, sizeof(*b));
    assert_non_null(b);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, e->cert);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, text_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
    const char *dl = strstr(b->p, "\nflotilla_http_connections_closed_total{reason=\"deadline\"} ");
    assert_non_null(dl);
    long n = strtol(strchr(dl, '}') + 2, NULL, 10);
    free(b);
    return n;
}

static void test_tls_deadline_closes_unanswered(void **st) {
    (void)st;
    struct env e;
    if (!env_start(&e)) {
        env_free(&e);
        skip();
    }
    const long S = fl_test_time_scale();
    const char *head = "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       "\r\nContent-Length: 40\r\n\r\n";
    long before = closed_deadline_count(&e);
    /* Stalled body: 10 of 40 bytes, then nothing (the watchdog's case). */
    CURL *h = tls_connect(&e);
    double t0 = mono_s();
    tls_send(h, head);
    tls_send(h, "{\"populat");
    size_t got = 0;
    CURLcode rc = tls_read_to_end(h, &got);
    double el = mono_s() - t0;
    curl_easy_cleanup(h);
    if (rc != CURLE_OK || got)
        fprintf(stderr, "stalled body over TLS: %s, %zu bytes\n", curl_easy_strerror(rc), got);
    assert_int_equal(rc, CURLE_OK);
    assert_int_equal(got, 0);
    assert_true(el >= 1.5 * S && el < 12 * S);
    /* Trickled body: one byte per 0.3 s until the server ends the connection (the watchdog
     * or the access handler at a late chunk, whichever comes first). */
    h = tls_connect(&e);
    t0 = mono_s();
    tls_send(h, head);
    const char *body = "{\"population\":\"kb-en\",\"region\":\"EU\"   ";
    got = 0;
    rc = CURLE_OK;
    for (size_t i = 0; body[i] && mono_s() - t0 < 12 * S; i++) {
        size_t k = 0;
        if (curl_easy_send(h, body + i, 1, &k) != CURLE_OK)
            break; /* closed */
        sleep_s(0.3 * S);
    }
    rc = tls_read_to_end(h, &got);
    el = mono_s() - t0;
    curl_easy_cleanup(h);
    if (rc != CURLE_OK || got)
        fprintf(stderr, "trickled body over TLS: %s, %zu bytes\n", curl_easy_strerror(rc), got);
    assert_int_equal(rc, CURLE_OK);
    assert_int_equal(got, 0);
    assert_true(el < 12 * S);
    assert_int_equal(closed_deadline_count(&e) - before, 2);
    env_free(&e);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_deadline_closes_unanswered),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
