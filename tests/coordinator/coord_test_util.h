#ifndef FL_COORD_TEST_UTIL_H
#define FL_COORD_TEST_UTIL_H
/* Shared fixture for the coordinator's round tests: an in-process coordinator on an
 * ephemeral 127.0.0.1 port with a temporary SQLite file, an injected clock the test moves,
 * a thread that calls fl_coord_tick() like the executable does, and libcurl helpers. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>

#include "fl_test.h"
#include "flotilla/coordinator.h"

#define ADMIN_TOKEN "fla_test-admin-token-0123456789abcdef"

struct fx {
    char dir[64];
    char db[128];
    fl_coord *co;
    unsigned port;
    _Atomic int64_t now_ms;  /* injected clock */
    pthread_t ticker;
    atomic_bool stop_ticker;
    bool ticking;
};

static int64_t fx_clock(void *user) {
    return atomic_load(&((struct fx *)user)->now_ms);
}

static void fx_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (level >= FL_LOG_WARN || getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  [coordinator] %s\n", msg);
}

static void *fx_tick_main(void *arg) {
    struct fx *f = arg;
    while (!atomic_load(&f->stop_ticker)) {
        fl_coord_tick(f->co);
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void fx_start(struct fx *f) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = 2;
    cfg.db_path = f->db;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.clock = fx_clock;
    cfg.clock_user = f;
    cfg.logger.fn = fx_log;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    char err[256];
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_non_null(f->co);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
    atomic_store(&f->stop_ticker, false);
    assert_int_equal(pthread_create(&f->ticker, NULL, fx_tick_main, f), 0);
    f->ticking = true;
}

static void fx_stop(struct fx *f) {
    if (f->ticking) {
        atomic_store(&f->stop_ticker, true);
        pthread_join(f->ticker, NULL);
        f->ticking = false;
    }
    fl_coord_destroy(f->co);
    f->co = NULL;
}

static int fx_setup(void **state) {
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/fl-coord-round-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof(f->db), "%s/coord.db", f->dir);
    atomic_store(&f->now_ms, 1767225600000);
    fx_start(f);
    *state = f;
    return 0;
}

static int fx_teardown(void **state) {
    struct fx *f = *state;
    fx_stop(f);
    char p[256];
    snprintf(p, sizeof(p), "%s-wal", f->db);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", f->db);
    unlink(p);
    unlink(f->db);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Moves the injected clock and runs the timers once. */
static void fx_advance(struct fx *f, int64_t ms) {
    atomic_fetch_add(&f->now_ms, ms);
    fl_coord_tick(f->co);
}

/* ---- HTTP ---- */

struct resp {
    long status;
    char *body;
    size_t len;
    char headers[4096];
    size_t hlen;
};

static size_t fx_on_body(char *p, size_t sz, size_t n, void *u) {
    struct resp *r = u;
    char *nb = realloc(r->body, r->len + sz * n + 1);
    if (!nb)
        return 0;
    memcpy(nb + r->len, p, sz * n);
    r->body = nb;
    r->len += sz * n;
    r->body[r->len] = '\0';
    return sz * n;
}

static size_t fx_on_header(char *p, size_t sz, size_t n, void *u) {
    struct resp *r = u;
    size_t k = sz * n;
    if (r->hlen + k < sizeof(r->headers)) {
        memcpy(r->headers + r->hlen, p, k);
        r->hlen += k;
        r->headers[r->hlen] = '\0';
    }
    return k;
}

/* Value of header name (case-insensitive) in buf (n bytes), or NULL. */
static const char *header_in(const struct resp *r, const char *name, char *buf, size_t n) {
    size_t nl = strlen(name);
    for (const char *line = r->headers; line && *line;) {
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r\n");
            snprintf(buf, n, "%.*s", (int)k, v);
            return buf;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return NULL;
}

static void resp_free(struct resp *r) {
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* One request; pid (may be NULL) goes in Idempotency-Key. Thread-safe (own handle). */
static struct resp http_req(struct fx *f, const char *method, const char *path,
                            const char *token, const char *content_type, const void *body,
                            size_t len, const char *pid) {
    struct resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[512], auth[512], ct[128], key[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", f->port, path);
    struct curl_slist *h = NULL;
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    if (content_type) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        h = curl_slist_append(h, ct);
    }
    if (pid) {
        snprintf(key, sizeof(key), "Idempotency-Key: %s", pid);
        h = curl_slist_append(h, key);
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fx_on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, fx_on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fprintf(stderr, "curl %s %s: %s\n", method, path, curl_easy_strerror(rc));
    assert_int_equal(rc, CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

static struct resp http_json(struct fx *f, const char *method, const char *path,
                             const char *token, const char *json) {
    return http_req(f, method, path, token, "application/json", json, json ? strlen(json) : 0,
                    NULL);
}

static json_t *body_json(const struct resp *r) {
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    if (!j)
        fprintf(stderr, "not JSON (%ld): %.200s\n", r->status, r->body ? r->body : "");
    assert_non_null(j);
    return j;
}

/* Asserts an error body with status and code. */
static void assert_error(const struct resp *r, long status, const char *code) {
    if (r->status != status)
        fprintf(stderr, "expected %ld got %ld: %s\n", status, r->status, r->body ? r->body : "");
    assert_int_equal(r->status, status);
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    assert_int_equal(json_integer_value(json_object_get(e, "status")), status);
    if (strcmp(json_string_value(json_object_get(e, "code")), code) != 0)
        fprintf(stderr, "expected code %s: %s\n", code, r->body);
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    json_decref(j);
}

/* ---- database ---- */

/* First column of the first row of a query on the database, as an integer. */
static int64_t db_int(struct fx *f, const char *q) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, q, -1, &s, NULL), SQLITE_OK);
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

#endif /* FL_COORD_TEST_UTIL_H */
