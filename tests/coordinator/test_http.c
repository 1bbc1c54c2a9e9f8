/* End-to-end HTTP tests of the coordinator: the service runs in-process on an ephemeral
 * 127.0.0.1 port with a temporary SQLite file; requests go through libcurl. Every refused
 * request is checked to leave the database unchanged. */
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>

#include "fl_test.h"
#include "fl_test_time.h"
#include "flotilla/coordinator.h"

#define ADMIN_TOKEN "fla_test-admin-token-0123456789abcdef"

/* ---- fixture ---- */

struct fx {
    char dir[64];
    char db[128];
    fl_coord *co;
    unsigned port;
    int64_t now_ms;      /* injected clock */
};

static int64_t fake_clock(void *user) {
    return ((struct fx *)user)->now_ms;
}

static void test_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (level >= FL_LOG_WARN || getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  [coordinator] %s\n", msg);
}

/* Deadline settings of the next setup (0 = defaults); test_request_deadline sets them. */
static unsigned g_deadline_s, g_body_rate;
/* shutdown_drain_s of the next setup (0 = the default, 5 s); test_stop_drain_bound sets it. */
static unsigned g_drain_s;

static int setup(void **state) {
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/fl-coord-test-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof(f->db), "%s/coord.db", f->dir);
    f->now_ms = 1767225600000;
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = 2;
    cfg.db_path = f->db;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.clock = fake_clock;
    cfg.clock_user = f;
    cfg.logger.fn = test_log;
    cfg.logger.min_level = FL_LOG_DEBUG;
    if (g_deadline_s) {
        cfg.request_deadline_s = g_deadline_s;
        /* The idle timeout (default 30 s) scaled like the deadline: the keep-alive case
         * idles past the deadline, not past this. */
        cfg.limits.connection_timeout_s = (unsigned)fl_test_scaled(30);
    }
    if (g_body_rate)
        cfg.request_min_body_rate = g_body_rate;
    if (g_drain_s)
        cfg.shutdown_drain_s = g_drain_s;
    char err[256];
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK) {
        fprintf(stderr, "create: %s\n", err);
        return -1;
    }
    if (fl_coord_start(f->co) != FL_OK) {
        fprintf(stderr, "start: %s\n", fl_coord_errmsg(f->co));
        return -1;
    }
    f->port = fl_coord_port(f->co);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fx *f = *state;
    fl_coord_destroy(f->co);
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

/* ---- HTTP helper ---- */

struct resp {
    long status;
    char *body;
    size_t len;
    char headers[4096];
    size_t hlen;
};

static size_t on_body(char *p, size_t sz, size_t n, void *u) {
    struct resp *r = u;
    char *nb = realloc(r->body, r->len + sz * n + 1);
    assert_non_null(nb);
    memcpy(nb + r->len, p, sz * n);
    r->body = nb;
    r->len += sz * n;
    r->body[r->len] = '\0';
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *u) {
    struct resp *r = u;
    size_t k = sz * n;
    if (r->hlen + k < sizeof(r->headers)) {
        memcpy(r->headers + r->hlen, p, k);
        r->hlen += k;
        r->headers[r->hlen] = '\0';
    }
    return k;
}

/* Returns the value of header name (case-insensitive) in a static buffer, or NULL. */
static const char *header(const struct resp *r, const char *name) {
    static char val[512];
    size_t n = strlen(name);
    for (const char *line = r->headers; line && *line;) {
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r\n");
            snprintf(val, sizeof(val), "%.*s", (int)k, v);
            return val;
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

static struct resp http(struct fx *f, const char *method, const char *path, const char *token,
                        const char *content_type, const void *body, size_t len,
                        const char *extra_header) {
    struct resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[512], auth[512], ct[128];
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
    if (extra_header)
        h = curl_slist_append(h, extra_header);
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
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, fl_test_scaled(10));
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
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
    return http(f, method, path, token, "application/json", json, json ? strlen(json) : 0, NULL);
}

/* Asserts an error body {"error":{"status":s,"code":code,...}}. */
static void assert_error(const struct resp *r, long status, const char *code) {
    if (r->status != status)
        fprintf(stderr, "expected %ld got %ld: %s\n", status, r->status, r->body ? r->body : "");
    assert_int_equal(r->status, status);
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    assert_int_equal(json_integer_value(json_object_get(e, "status")), status);
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_non_null(json_string_value(json_object_get(e, "message")));
    const char *ct = header(r, "Content-Type");
    assert_non_null(ct);
    assert_string_equal(ct, "application/json");
    json_decref(j);
}

static json_t *body_json(const struct resp *r) {
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    assert_non_null(j);
    return j;
}

/* ---- database fingerprint: refused requests must not change it ---- */

static void db_fingerprint(struct fx *f, char *out, size_t n) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *q =
        "SELECT (SELECT count(*) FROM populations) || '/' ||"
        " (SELECT coalesce(group_concat(state), '') FROM populations) || '/' ||"
        " (SELECT count(*) FROM clients) || '/' || (SELECT count(*) FROM models) || '/' ||"
        " (SELECT count(*) FROM rounds) || '/' ||"
        " (SELECT coalesce(group_concat(state), '') FROM rounds) || '/' ||"
        " (SELECT count(*) FROM round_participants) || '/' || (SELECT count(*) FROM tags)";
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, q, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    snprintf(out, n, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
}

/* ---- helpers that set up state through the API ---- */

static const char *POP_JSON =
    "{\"name\":\"kb-en\",\"allowed_regions\":[\"EU\",\"UK\"],"
    "\"selection\":{\"target\":3,\"over_selection\":1.2,\"min_participants\":3,"
    "\"require\":[\"charging\"],\"forming_s\":60,\"jitter_s\":0,\"min_retry_s\":30,"
    "\"max_retry_s\":600},"
    "\"update\":{\"tensors\":[\"w\"]},"
    "\"strategy\":{\"name\":\"fedadam\"},"
    "\"privacy\":{\"mode\":\"central\",\"noise_multiplier\":1.1,\"epsilon_budget\":8,"
    "\"delta\":1e-6}}";

/* Creates the population; returns its enrollment token (malloc'ed). */
static char *create_population(struct fx *f) {
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, POP_JSON);
    if (r.status != 201)
        fprintf(stderr, "%s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    const char *tok = json_string_value(json_object_get(j, "enrollment_token"));
    assert_non_null(tok);
    assert_true(strncmp(tok, "flp_", 4) == 0);
    char *out = strdup(tok);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "population"), "state")), "stopped");
    json_decref(j);
    resp_free(&r);
    return out;
}

static char *enroll(struct fx *f, const char *etok, const char *region) {
    char body[256];
    snprintf(body, sizeof(body),
             "{\"population\":\"kb-en\",\"region\":\"%s\",\"platform\":\"linux\"}", region);
    struct resp r = http_json(f, "POST", "/v1/enroll", etok, body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    const char *tok = json_string_value(json_object_get(j, "client_token"));
    assert_non_null(tok);
    assert_true(strncmp(tok, "flc_", 4) == 0);
    char *out = strdup(tok);
    json_decref(j);
    resp_free(&r);
    return out;
}

/* A minimal safetensors file: one F32 tensor "w" of 4 elements. */
static size_t make_model(uint8_t *buf) {
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    uint64_t n = strlen(hdr);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, hdr, n);
    float w[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    memcpy(buf + 8 + n, w, sizeof(w));
    return 8 + n + sizeof(w);
}

static void upload_model_and_start(struct fx *f) {
    uint8_t model[256];
    size_t n = make_model(model);
    struct resp r = http(f, "POST", "/v1/admin/populations/kb-en/models", ADMIN_TOKEN,
                         "application/octet-stream", model, n, NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/kb-en/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* ---- raw sockets (requests libcurl will not send) ---- */

/* A TCP connection to the coordinator's port, or -1 when connect() fails. */
static int tcp_connect(struct fx *f) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)f->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_connect(struct fx *f) {
    int fd = tcp_connect(f);
    assert_true(fd >= 0);
    return fd;
}

static void raw_send(int fd, const char *s) {
    size_t n = strlen(s), off = 0;
    while (off < n) {
        ssize_t k = send(fd, s + off, n - off, MSG_NOSIGNAL);
        assert_true(k > 0);
        off += (size_t)k;
    }
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads into out (NUL-terminated) until the server closes the connection or wait_ms (times
 * FL_TEST_TIME_SCALE, like every wait here) pass without it; returns true when it closed (EOF
 * or reset). */
static bool raw_read_all(int fd, char *out, size_t cap, int wait_ms) {
    size_t got = 0;
    out[0] = '\0';
    double end = mono_s() + fl_test_scaled(wait_ms) / 1000.0;
    for (;;) {
        int left = (int)((end - mono_s()) * 1000);
        if (left <= 0)
            return false;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0)
            continue;
        char buf[2048];
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0)
            return true;
        size_t c = (size_t)k < cap - 1 - got ? (size_t)k : cap - 1 - got;
        memcpy(out + got, buf, c);
        got += c;
        out[got] = '\0';
    }
}

/* True when out holds a whole answer: the header block and Content-Length body bytes. */
static bool answer_complete(const char *out) {
    const char *end = strstr(out, "\r\n\r\n");
    const char *cl = strstr(out, "Content-Length: ");
    if (!end || !cl || cl > end)
        return false;
    return strlen(end + 4) >= (size_t)atol(cl + 16);
}

/* Reads one answer into out; returns false when the server closed before a whole one. */
static bool raw_read_answer(int fd, char *out, size_t cap, int wait_ms) {
    size_t got = 0;
    out[0] = '\0';
    double end = mono_s() + fl_test_scaled(wait_ms) / 1000.0;
    while (!answer_complete(out)) {
        int left = (int)((end - mono_s()) * 1000);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return false;
        ssize_t k = recv(fd, out + got, cap - 1 - got, 0);
        if (k <= 0)
            return false;
        got += (size_t)k;
        out[got] = '\0';
    }
    return true;
}

/* One raw request on a fresh connection: the answer's status (0 = none) and whether the
 * server closed the connection within wait_ms. */
static int raw_request(struct fx *f, const char *req, bool half_close, int wait_ms,
                       bool *closed, char *out, size_t cap) {
    int fd = raw_connect(f);
    raw_send(fd, req);
    if (half_close)
        shutdown(fd, SHUT_WR);
    *closed = raw_read_all(fd, out, cap, wait_ms);
    close(fd);
    int st = 0;
    if (strncmp(out, "HTTP/1.", 7) == 0)
        st = (int)strtol(out + 9, NULL, 10);
    return st;
}

/* RFC 9112 strictness: HTTP/1.1 without Host, and whitespace between a header name and its
 * colon, are refused with a JSON 400 and the connection is closed (so bytes after such a
 * header, e.g. the body of "Content-Length : 5", are never read as a request). */
static void test_http_strictness(void **state) {
    struct fx *f = *state;
    char out[4096];
    bool closed;
    /* Control: the same requests, well formed, are served. */
    assert_int_equal(raw_request(f, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", true, 5000,
                                 &closed, out, sizeof(out)),
                     200);
    assert_int_equal(raw_request(f, "GET /healthz HTTP/1.0\r\n\r\n", false, 5000, &closed, out,
                                 sizeof(out)),
                     200);
    assert_true(closed); /* HTTP/1.0: no Host needed, closed after the answer */
    assert_int_equal(raw_request(f, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: 1\r\n\r\n",
                                 true, 5000, &closed, out, sizeof(out)),
                     200);
    /* HTTP/1.1 without Host. */
    assert_int_equal(
        raw_request(f, "GET /healthz HTTP/1.1\r\n\r\n", false, 5000, &closed, out, sizeof(out)),
        400);
    assert_true(closed);
    assert_non_null(strstr(out, "\"code\":\"invalid_parameter\""));
    assert_non_null(strstr(out, "\"field\":\"Host\""));
    assert_non_null(strstr(out, "application/json"));
    /* Whitespace before the colon: space, tab, on framing and ordinary headers. */
    static const char *const spaced[] = {
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nabcde",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length\t: 5\r\n\r\nabcde",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Foo : 1\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(spaced) / sizeof(spaced[0]); i++) {
        int st = raw_request(f, spaced[i], false, 5000, &closed, out, sizeof(out));
        if (st != 400 || !closed)
            fprintf(stderr, "case %zu: %d closed=%d: %.300s\n", i, st, closed, out);
        assert_int_equal(st, 400);
        assert_true(closed);
        assert_non_null(strstr(out, "whitespace in the header name"));
        /* Exactly one answer: "abcde" was not taken for a second request. */
        assert_null(strstr(strstr(out, "HTTP/1.1 400") + 1, "HTTP/1."));
    }
    /* A request answered after the client half-closed its side is closed at once (before,
     * MHD kept such a connection until the idle timeout, 30 s here). */
    double t0 = mono_s();
    assert_int_equal(raw_request(f, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", true, 5000,
                                 &closed, out, sizeof(out)),
                     200);
    assert_true(closed);
    assert_true(mono_s() - t0 < fl_test_scaled_s(5.0));
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Sends req in pieces of step bytes, gap_s apart; stops early when the server closes. Returns
 * the status of the answer (0: none) and sets *closed and *elapsed (seconds from connect to
 * the close or the answer). */
static int raw_trickle(struct fx *f, const char *req, size_t step, double gap_s, bool *closed,
                       double *elapsed) {
    int fd = raw_connect(f);
    double t0 = mono_s();
    size_t n = strlen(req);
    char out[4096] = "";
    *closed = false;
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        if (send(fd, req + off, k, MSG_NOSIGNAL) != (ssize_t)k) {
            *closed = true;
            break;
        }
        if (off + k < n) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, (int)(gap_s * 1000)) > 0) {
                *closed = true; /* the server closed (or answered early) mid-request */
                break;
            }
        }
    }
    if (*closed)
        (void)raw_read_all(fd, out, sizeof(out), 3000); /* an early answer, if any */
    else
        *closed = !raw_read_answer(fd, out, sizeof(out), 15000) && !out[0];
    *elapsed = mono_s() - t0;
    close(fd);
    return strncmp(out, "HTTP/1.", 7) == 0 ? (int)strtol(out + 9, NULL, 10) : 0;
}

/* Request deadline 2 s (idle timeout 30 s): requests that arrive within it are served (also
 * in slow pieces, and a body within its allowance at the minimum body rate); a silent
 * connection and trickled headers (the request line or header block still arriving, when
 * libmicrohttpd may be writing an error answer of its own) are closed at the deadline (well
 * before the idle timeout), with no answer (test_request_deadline_408 has the bodies that
 * are answered 408); a half-closed incomplete request is closed at once; a
 * kept-alive connection may idle past the deadline between requests. The deadline, the gaps
 * and the bounds checked are times FL_TEST_TIME_SCALE (S), except the slow body's: its
 * allowance at the minimum body rate (1024 B/s, the least allowed) does not grow with S, so
 * it completes 0.5 s past the deadline whatever S is. */
static void test_request_deadline(void **state) {
    struct fx *f = *state;
    const long S = fl_test_time_scale();
    const char *get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    bool closed;
    double el;
    /* Within the deadline: 3 pieces 0.3 s apart. */
    assert_int_equal(raw_trickle(f, get, 14, 0.3 * S, &closed, &el), 200);
    /* Silent connection: closed at the deadline. */
    int fd = raw_connect(f);
    double t0 = mono_s();
    char out[4096];
    assert_true(raw_read_all(fd, out, sizeof(out), 15000));
    el = mono_s() - t0;
    close(fd);
    assert_string_equal(out, "");
    if (el < 1.5 * S || el > 12 * S)
        fprintf(stderr, "silent connection closed after %.2f s\n", el);
    assert_true(el >= 1.5 * S && el < 12 * S);
    /* Headers trickled one byte per 0.25 s (~9 s for the request): closed, unanswered. */
    assert_int_equal(raw_trickle(f, get, 1, 0.25 * S, &closed, &el), 0);
    assert_true(closed);
    assert_true(el >= 1.5 * S && el < 12 * S);
    /* A request of 39 of its 40 body bytes (never complete) trickled 4 bytes per 0.5 s: its
     * headers are still arriving at the deadline. */
    const char *post = "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       "\r\nContent-Length: 40\r\n\r\n"
                       "{\"population\":\"kb-en\",\"region\":\"EU\"   }";
    assert_int_equal(raw_trickle(f, post, 4, 0.5 * S, &closed, &el), 0);
    assert_true(closed);
    assert_true(el >= 1.5 * S && el < 12 * S);
    /* A 2500-byte body sent 500 bytes (headers first) each 0.5 s: complete at ~2.5 s, past
     * the 2 s deadline but within 2 s + 2500 / 1024 s (the minimum body rate's allowance):
     * answered (401: no enrollment token). With S: 2S + 0.5 s, within 2S + 2.44 s. */
    char big[2900];
    int hl = snprintf(big, sizeof(big),
                      "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      "\r\nContent-Length: 2500\r\n\r\n");
    memset(big + hl, ' ', 2500);
    big[hl + 2500] = '\0';
    memcpy(big + hl, "{}", 2);
    int st = raw_trickle(f, big, 500, (2.0 * S + 0.5) / 5, &closed, &el);
    if (st != 401)
        fprintf(stderr, "slow 2500-byte body: status %d after %.2f s\n", st, el);
    assert_int_equal(st, 401);
    /* Incomplete request, then EOF: closed at once (every time: MHD alone sometimes waited
     * for the idle timeout). */
    for (int i = 0; i < 3; i++) {
        t0 = mono_s();
        assert_int_equal(raw_request(f, "GET /healthz HTTP/1.1\r\nHost: x", true, 15000, &closed,
                                     out, sizeof(out)),
                         0);
        assert_true(closed);
        assert_true(mono_s() - t0 < 1.9 * S); /* before the 2 s deadline could close it */
        assert_int_equal(raw_request(f, post, true, 15000, &closed, out, sizeof(out)), 0);
        assert_true(closed);
    }
    /* /metrics counts the closes: the silent connection, the trickled headers and the
     * trickled body past their deadline (3), and the early EOFs that the watchdog shut
     * (0-6 of them: libmicrohttpd closes the others itself first). */
    struct resp mr = http(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(mr.status, 200);
    const char *dl =
        strstr(mr.body, "\nflotilla_http_connections_closed_total{reason=\"deadline\"} ");
    const char *eo = strstr(mr.body, "\nflotilla_http_connections_closed_total{reason=\"eof\"} ");
    assert_non_null(dl);
    assert_non_null(eo);
    long n_deadline = strtol(strchr(dl, '}') + 2, NULL, 10);
    long n_eof = strtol(strchr(eo, '}') + 2, NULL, 10);
    fprintf(stderr, "closed: deadline %ld, eof %ld\n", n_deadline, n_eof);
    assert_true(n_deadline >= 3);
    assert_true(n_eof >= 0);
    resp_free(&mr);
    /* Keep-alive: a second request after 2.2 s of idling (past the deadline) is served. */
    fd = raw_connect(f);
    raw_send(fd, get);
    struct pollfd p = {fd, POLLIN, 0};
    assert_true(poll(&p, 1, (int)fl_test_scaled(5000)) == 1);
    assert_true(recv(fd, out, sizeof(out) - 1, 0) > 0);
    sleep_s(2.2 * S);
    raw_send(fd, get);
    assert_true(raw_read_answer(fd, out, sizeof(out), 5000));
    assert_int_equal(strncmp(out, "HTTP/1.1 200", 12), 0);
    close(fd);
}

/* Sends head at once, then body one byte every gap_s seconds (gap_s 0: all of it at once,
 * then nothing), stopping when the server answers or closes; reads what comes until the
 * close. Returns the status of the first answer (0: none), the bytes in out, whether the
 * server closed, and the seconds from connect to the close. */
static int raw_slow_body(struct fx *f, const char *head, const char *body, double gap_s,
                         char *out, size_t cap, bool *closed, double *elapsed) {
    int fd = raw_connect(f);
    double t0 = mono_s();
    raw_send(fd, head);
    if (gap_s <= 0) {
        raw_send(fd, body);
    } else {
        for (size_t i = 0; body[i]; i++) {
            if (send(fd, body + i, 1, MSG_NOSIGNAL) != 1)
                break;
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, (int)(gap_s * 1000)) > 0)
                break; /* answered or closed */
        }
    }
    *closed = raw_read_all(fd, out, cap, 15000);
    *elapsed = mono_s() - t0;
    close(fd);
    return strncmp(out, "HTTP/1.", 7) == 0 ? (int)strtol(out + 9, NULL, 10) : 0;
}

static long closed_deadline_count(struct fx *f) {
    struct resp mr = http(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(mr.status, 200);
    const char *dl =
        strstr(mr.body, "\nflotilla_http_connections_closed_total{reason=\"deadline\"} ");
    assert_non_null(dl);
    long n = strtol(strchr(dl, '}') + 2, NULL, 10);
    resp_free(&mr);
    return n;
}

/* Checks a 408 answer: status line, Connection: close, the JSON error body. */
static void assert_408(const char *out) {
    assert_int_equal(strncmp(out, "HTTP/1.1 408 ", 13), 0);
    const char *end = strstr(out, "\r\n\r\n");
    assert_non_null(end);
    assert_non_null(strstr(out, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(out, "\r\nContent-Type: application/json\r\n"));
    json_error_t je;
    json_t *j = json_loads(end + 4, 0, &je);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "status")), 408);
    assert_string_equal(json_string_value(json_object_get(e, "code")), "request_timeout");
    json_decref(j);
}

/* Request deadline 2 s (times S): a plain-HTTP request whose headers arrived but whose body
 * misses the deadline is answered 408 (JSON error body, Connection: close) and closed, both
 * when the body stalls (the watchdog answers) and when it trickles (the watchdog or the
 * handler at the next chunk, whichever comes first); each counts once as a deadline close
 * in /metrics. A body announced with Expect: 100-continue that stalls is closed without an
 * answer: the watchdog cannot know whether libmicrohttpd is writing its 100 Continue. */
static void test_request_deadline_408(void **state) {
    struct fx *f = *state;
    const long S = fl_test_time_scale();
    const char *head = "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       "\r\nContent-Length: 40\r\n\r\n";
    char out[4096];
    bool closed;
    double el;
    long before = closed_deadline_count(f);
    /* Stalled: 10 of 40 body bytes, then nothing. */
    int st = raw_slow_body(f, head, "{\"populat", 0, out, sizeof(out), &closed, &el);
    if (st != 408)
        fprintf(stderr, "stalled body: %d after %.2f s: %.300s\n", st, el, out);
    assert_int_equal(st, 408);
    assert_408(out);
    assert_true(closed);
    assert_true(el >= 1.5 * S && el < 12 * S);
    /* Trickled: one byte per 0.3 s (39 bytes would take ~12 s). */
    st = raw_slow_body(f, head, "{\"population\":\"kb-en\",\"region\":\"EU\"   ", 0.3 * S, out,
                       sizeof(out), &closed, &el);
    if (st != 408)
        fprintf(stderr, "trickled body: %d after %.2f s: %.300s\n", st, el, out);
    assert_int_equal(st, 408);
    assert_408(out);
    assert_true(closed);
    assert_true(el >= 1.5 * S && el < 12 * S);
    /* Each counted once. */
    assert_int_equal(closed_deadline_count(f) - before, 2);
    /* Expect: 100-continue, 10 bytes after the 100 Continue, then nothing: closed only. */
    int fd = raw_connect(f);
    raw_send(fd, "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Expect: 100-continue\r\nContent-Length: 40\r\n\r\n");
    struct pollfd p = {fd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, (int)fl_test_scaled(1000)), 1);
    ssize_t k = recv(fd, out, sizeof(out) - 1, 0);
    assert_true(k > 0);
    out[k] = '\0';
    assert_int_equal(strncmp(out, "HTTP/1.1 100 Continue\r\n\r\n", 25), 0);
    raw_send(fd, "{\"populat");
    double t0 = mono_s();
    assert_true(raw_read_all(fd, out, sizeof(out), 15000));
    el = mono_s() - t0;
    close(fd);
    assert_string_equal(out, "");
    assert_true(el < 12 * S);
    assert_int_equal(closed_deadline_count(f) - before, 3);
}

static int setup_deadline(void **state) {
    g_deadline_s = (unsigned)fl_test_scaled(2);
    g_body_rate = 1024;
    int rc = setup(state);
    g_deadline_s = 0;
    g_body_rate = 0;
    return rc;
}

/* ---- graceful stop ---- */

struct stopper {
    fl_coord *co;
    pthread_t th;
    double ended;      /* mono_s() when fl_coord_stop returned */
    atomic_bool done;
};

static void *stop_main(void *arg) {
    struct stopper *s = arg;
    fl_coord_stop(s->co);
    s->ended = mono_s();
    atomic_store(&s->done, true);
    return NULL;
}

/* True if a TCP connection to the coordinator's port is refused. */
static bool connect_refused(struct fx *f) {
    int fd = tcp_connect(f);
    if (fd >= 0)
        close(fd);
    return fd < 0;
}

/* Waits (up to 5 s times S) until /metrics counts n requests in flight besides the scrape. */
static void wait_in_flight(struct fx *f, int n) {
    char want[96];
    snprintf(want, sizeof(want), "\nflotilla_http_requests_in_flight %d\n", n + 1);
    double end = mono_s() + fl_test_scaled(5000) / 1000.0;
    for (;;) {
        struct resp r = http(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
        bool ok = r.status == 200 && r.body && strstr(r.body, want);
        resp_free(&r);
        if (ok)
            return;
        assert_true(mono_s() < end);
        sleep_s(0.02);
    }
}

/* A request whose body is still arriving when the coordinator stops is let finish and
 * answered 503 (Retry-After 5, Connection: close) instead of being cut off; meanwhile new
 * connections are refused, and stop returns once that answer is sent, well before the drain
 * limit (5 s). A kept-alive idle connection holds nothing up and is closed. */
static void test_stop_drains_requests(void **state) {
    struct fx *f = *state;
    const long S = fl_test_time_scale();
    const char *body1 = "{\"population\":", *body2 = "\"kb-en\",\"region\":\"EU\"}";
    char head[256], out[4096];
    snprintf(head, sizeof(head),
             "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body1) + strlen(body2), body1);
    int idle = raw_connect(f);
    raw_send(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_true(raw_read_answer(idle, out, sizeof(out), 5000));
    assert_int_equal(strncmp(out, "HTTP/1.1 200", 12), 0);
    int fd = raw_connect(f);
    raw_send(fd, head);
    wait_in_flight(f, 1); /* the headers are in: the request is in flight */
    struct stopper st = {.co = f->co};
    atomic_init(&st.done, false);
    double t0 = mono_s();
    assert_int_equal(pthread_create(&st.th, NULL, stop_main, &st), 0);
    sleep_s(0.5 * S);
    /* Everything is read before asserting: a failed assertion must not leave the stopping
     * thread running into the teardown. */
    bool waited = !atomic_load(&st.done), refused = connect_refused(f);
    raw_send(fd, body2);
    bool answered = raw_read_answer(fd, out, sizeof(out), 5000);
    size_t got = strlen(out);
    bool closed = raw_read_all(fd, out + got, sizeof(out) - got, 5000);
    close(fd);
    char rest[512];
    bool idle_closed = raw_read_all(idle, rest, sizeof(rest), 2000);
    close(idle);
    assert_int_equal(pthread_join(st.th, NULL), 0);
    assert_true(waited); /* stop was waiting for our request */
    assert_true(refused);
    assert_true(answered);
    assert_int_equal(strncmp(out, "HTTP/1.1 503", 12), 0);
    assert_non_null(strstr(out, "Retry-After: 5\r\n"));
    assert_non_null(strstr(out, "Connection: close\r\n"));
    assert_non_null(strstr(out, "\"unavailable\""));
    assert_non_null(strstr(out, "shutting down"));
    assert_true(closed);
    assert_true(st.ended - t0 >= 0.5 * S);
    assert_true(st.ended - t0 < 4.5 * S); /* returned with the answer, not at the 5 s limit */
    assert_true(idle_closed);
    assert_string_equal(rest, "");
}

/* A request that never completes holds the stop for shutdown_drain_s (here 1 s) only; then
 * its connection is closed unanswered. */
static void test_stop_drain_bound(void **state) {
    struct fx *f = *state;
    const long S = fl_test_time_scale();
    int fd = raw_connect(f);
    raw_send(fd, "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 "\r\nContent-Length: 40\r\n\r\n{\"population\":");
    wait_in_flight(f, 1);
    double t0 = mono_s();
    fl_coord_stop(f->co);
    double took = mono_s() - t0;
    if (took < 0.9 * S || took > 3.0 * S)
        fprintf(stderr, "stop took %.2f s with drain %ld s\n", took, S);
    assert_true(took >= 0.9 * S && took < 3.0 * S);
    char out[512];
    assert_true(raw_read_all(fd, out, sizeof(out), 2000));
    assert_string_equal(out, "");
    close(fd);
}

/* The request deadline (default 10 s) would close an unfinished request by itself; scaled
 * waits (valgrind) can pass it, so the stop tests set it well above their waits. */
static int setup_stop(void **state) {
    g_deadline_s = (unsigned)fl_test_scaled(30);
    if (!g_drain_s)
        g_drain_s = (unsigned)fl_test_scaled(5); /* the default, 5 s, times S */
    int rc = setup(state);
    g_deadline_s = 0;
    g_drain_s = 0;
    return rc;
}

static int setup_drain(void **state) {
    g_drain_s = (unsigned)fl_test_scaled(1);
    int rc = setup_stop(state);
    g_drain_s = 0;
    return rc;
}

/* ---- tests ---- */

static void test_ops_endpoints(void **state) {
    struct fx *f = *state;
    struct resp r = http(f, "GET", "/healthz", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http(f, "GET", "/readyz", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http(f, "GET", "/nope", NULL, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    r = http(f, "POST", "/healthz", NULL, NULL, NULL, 0, NULL);
    assert_error(&r, 405, "method_not_allowed");
    assert_string_equal(header(&r, "Allow"), "GET");
    resp_free(&r);

    r = http(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    assert_true(strncmp(header(&r, "Content-Type"), "text/plain; version=0.0.4", 25) == 0);
    /* Prometheus text format: comments, or `name{label="v",...} value`. */
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\""
                             "(,[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\")*\\})? [-+0-9.eE]+$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    int samples = 0;
    char *save = NULL;
    for (char *line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            assert_true(strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0);
            continue;
        }
        if (regexec(&re, line, 0, NULL, 0) != 0)
            fprintf(stderr, "bad metrics line: %s\n", line);
        assert_int_equal(regexec(&re, line, 0, NULL, 0), 0);
        samples++;
    }
    regfree(&re);
    assert_true(samples > 5);
    resp_free(&r);
    r = http(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_non_null(
        strstr(r.body, "flotilla_http_requests_total{route=\"healthz\",code=\"200\"} 1"));
    assert_non_null(
        strstr(r.body, "flotilla_http_requests_total{route=\"healthz\",code=\"405\"} 1"));
    resp_free(&r);
}

static void test_admin_refusals_change_nothing(void **state) {
    struct fx *f = *state;
    char before[256], after[256];
    db_fingerprint(f, before, sizeof(before));
    struct resp r = http_json(f, "POST", "/v1/admin/populations", NULL, POP_JSON);
    assert_error(&r, 401, "unauthorized");
    assert_non_null(header(&r, "WWW-Authenticate"));
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", "fla_wrong-token-xxxxxxxxxxxxxxxx", POP_JSON);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "{\"name\": ");
    assert_error(&r, 400, "malformed_json");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "[1,2]");
    assert_error(&r, 400, "malformed_json");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"bad name!\",\"allowed_regions\":[\"EU\"]}");
    assert_error(&r, 400, "invalid_field");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"p\",\"allowed_regions\":[\"EU\"],\"selection\":{\"target\":0}}");
    assert_error(&r, 400, "invalid_field");
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "field")),
                        "selection.target");
    json_decref(j);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"p\",\"allowed_regions\":[\"EU\"],"
                  "\"privacy\":{\"mode\":\"distributed\"},\"secagg\":{\"enabled\":false}}");
    assert_error(&r, 400, "invalid_field");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"p\",\"allowed_regions\":[\"EU\"],\"strategy\":{\"name\":\"sgd\"}}");
    assert_error(&r, 400, "invalid_field");
    resp_free(&r);
    size_t big = 70 * 1024;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    r = http(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "application/json", huge, big, NULL);
    assert_error(&r, 413, "body_too_large");
    resp_free(&r);
    free(huge);
    r = http_json(f, "PUT", "/v1/admin/populations", ADMIN_TOKEN, POP_JSON);
    assert_error(&r, 405, "method_not_allowed");
    assert_string_equal(header(&r, "Allow"), "GET, POST");
    resp_free(&r);
    r = http(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "text/plain", POP_JSON,
             strlen(POP_JSON), NULL);
    assert_error(&r, 415, "unsupported_media_type");
    resp_free(&r);
    r = http(f, "POST", "/v1/admin/populations/kb-en/start", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    db_fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);

    char *etok = create_population(f);
    free(etok);
    db_fingerprint(f, before, sizeof(before));
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, POP_JSON);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
    r = http(f, "POST", "/v1/admin/populations/kb-en/start", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_error(&r, 409, "conflict"); /* no model yet */
    resp_free(&r);
    r = http(f, "POST", "/v1/admin/populations/kb-en/models", ADMIN_TOKEN,
             "application/octet-stream", "not a model", 11, NULL);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    db_fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);

    r = http(f, "GET", "/v1/admin/populations", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "populations")), 1);
    json_decref(j);
    resp_free(&r);
}

static void test_enrollment(void **state) {
    struct fx *f = *state;
    char *etok = create_population(f);
    char before[256], after[256];
    db_fingerprint(f, before, sizeof(before));
    struct resp r = http_json(f, "POST", "/v1/enroll", NULL,
                              "{\"population\":\"kb-en\",\"region\":\"EU\"}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", "flp_wrongwrongwrongwrongwrongwrong",
                  "{\"population\":\"kb-en\",\"region\":\"EU\"}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"other\",\"region\":\"EU\"}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"kb-en\",\"region\":\"RU\"}");
    assert_error(&r, 403, "region_not_allowed");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"kb-en\"}");
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"kb-en\",\"region\":7}");
    assert_error(&r, 400, "invalid_field");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", etok, "not json");
    assert_error(&r, 400, "malformed_json");
    resp_free(&r);
    char big[5000];
    memset(big, 'x', sizeof(big));
    r = http(f, "POST", "/v1/enroll", etok, "application/json", big, sizeof(big), NULL);
    assert_error(&r, 413, "body_too_large");
    resp_free(&r);
    r = http_json(f, "GET", "/v1/enroll", etok, NULL);
    assert_error(&r, 405, "method_not_allowed");
    resp_free(&r);
    db_fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);

    char *ctok = enroll(f, etok, "EU");
    db_fingerprint(f, after, sizeof(after));
    assert_string_not_equal(before, after);
    /* The token is stored only as a hash. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT * FROM clients", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    for (int i = 0; i < sqlite3_column_count(s); i++) {
        const unsigned char *t = sqlite3_column_text(s, i);
        if (t)
            assert_null(strstr((const char *)t, ctok + 22));
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    free(ctok);
    free(etok);
}

static void test_checkin_selection(void **state) {
    struct fx *f = *state;
    char *etok = create_population(f);
    char *c[5];
    for (int i = 0; i < 5; i++)
        c[i] = enroll(f, etok, "EU");
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":false}}";
    char before[256], after[256];

    /* Stopped population: retry. */
    struct resp r = http_json(f, "POST", "/v1/checkin", c[0], ok);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "population_stopped");
    assert_non_null(header(&r, "Retry-After"));
    json_decref(j);
    resp_free(&r);

    /* Checking in again before retry_after_s (less 10%) is 429 and changes nothing. */
    r = http_json(f, "POST", "/v1/checkin", c[0], ok);
    assert_error(&r, 429, "rate_limited");
    assert_non_null(header(&r, "Retry-After"));
    resp_free(&r);
    f->now_ms += 601 * 1000; /* max_retry_s */

    upload_model_and_start(f);
    db_fingerprint(f, before, sizeof(before));
    r = http_json(f, "POST", "/v1/checkin", NULL, ok);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    char forged[128];
    snprintf(forged, sizeof(forged), "%.21sAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", c[0]);
    r = http_json(f, "POST", "/v1/checkin", forged, ok);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", etok, ok); /* enrollment token is not a client token */
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", c[0],
                  "{\"region\":\"RU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                  "\"idle\":true}}");
    assert_error(&r, 403, "region_not_allowed");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", c[0], "{\"region\":\"EU\"}");
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", c[0],
                  "{\"region\":\"EU\",\"eligibility\":{\"charging\":1,\"unmetered\":true,"
                  "\"idle\":true}}");
    assert_error(&r, 400, "invalid_field");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", c[0], "{\"region\":");
    assert_error(&r, 400, "malformed_json");
    resp_free(&r);
    char big[9000];
    memset(big, ' ', sizeof(big));
    r = http(f, "POST", "/v1/checkin", c[0], "application/json", big, sizeof(big), NULL);
    assert_error(&r, 413, "body_too_large");
    resp_free(&r);
    /* Not eligible: not charging. */
    r = http_json(f, "POST", "/v1/checkin", c[0],
                  "{\"region\":\"EU\",\"eligibility\":{\"charging\":false,\"unmetered\":true,"
                  "\"idle\":true}}");
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "not_eligible");
    json_decref(j);
    resp_free(&r);
    db_fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);
    f->now_ms += 601 * 1000; /* past the not_eligible retry_after_s */

    /* target 3 x 1.2 = 3.6, rounded up: 4 selected; the 5th gets round_full. */
    char pid0[64] = "";
    int64_t round_id = 0;
    for (int i = 0; i < 4; i++) {
        r = http_json(f, "POST", "/v1/checkin", c[i], ok);
        assert_int_equal(r.status, 200);
        j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
        const char *pid = json_string_value(json_object_get(j, "participation_id"));
        assert_int_equal(strlen(pid), 32);
        if (i == 0)
            snprintf(pid0, sizeof(pid0), "%s", pid);
        round_id = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
        resp_free(&r);
    }
    /* Check-in again: same participation id (idempotent). */
    r = http_json(f, "POST", "/v1/checkin", c[0], ok);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "participation_id")), pid0);
    json_decref(j);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", c[4], ok);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "round_full");
    assert_true(json_integer_value(json_object_get(j, "retry_after_s")) >= 30);
    json_decref(j);
    resp_free(&r);

    /* Task download: signed; verify like a device would. */
    char path[128], key[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)round_id);
    r = http(f, "GET", path, c[0], NULL, NULL, 0, NULL);
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    r = http(f, "GET", path, c[4], NULL, NULL, 0,
             "Idempotency-Key: 00000000000000000000000000000000");
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    snprintf(key, sizeof(key), "Idempotency-Key: %s", pid0);
    r = http(f, "GET", path, c[0], NULL, NULL, 0, key);
    assert_int_equal(r.status, 200);
    uint8_t pk[32], sig[64], msg[64];
    char kid[FL_COORD_KEY_ID_BYTES];
    fl_coord_public_key(f->co, pk, kid);
    assert_string_equal(header(&r, "Flotilla-Key-Id"), kid);
    size_t siglen = 0, mlen = 0;
    assert_int_equal(sodium_base642bin(sig, sizeof(sig), header(&r, "Flotilla-Signature"),
                                       88, NULL, &siglen, NULL, sodium_base64_VARIANT_ORIGINAL),
                     0);
    assert_int_equal(siglen, 64);
    assert_int_equal(fl_coord_signed_message(msg, sizeof(msg), &mlen, "flotilla/v1/task",
                                             (uint64_t)round_id, r.body, r.len),
                     FL_OK);
    assert_int_equal(mlen, 57);
    assert_int_equal(crypto_sign_verify_detached(sig, msg, mlen, pk), 0);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "protocol")), "flotilla/v1");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "secagg"),
                                                        "client_index")), 0);
    const char *model_url = json_string_value(json_object_get(json_object_get(j, "model"), "url"));
    char murl[128];
    snprintf(murl, sizeof(murl), "%s", model_url);
    json_decref(j);
    resp_free(&r);

    /* Model download: signed, and matches what was uploaded. */
    r = http(f, "GET", murl, c[0], NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    uint8_t model[256];
    size_t mn = make_model(model);
    assert_int_equal(r.len, mn);
    assert_memory_equal(r.body, model, mn);
    assert_int_equal(sodium_base642bin(sig, sizeof(sig), header(&r, "Flotilla-Signature"),
                                       88, NULL, &siglen, NULL, sodium_base64_VARIANT_ORIGINAL),
                     0);
    int64_t version = atoll(strrchr(murl, '/') + 1);
    fl_coord_signed_message(msg, sizeof(msg), &mlen, "flotilla/v1/model", (uint64_t)version,
                            r.body, r.len);
    assert_int_equal(crypto_sign_verify_detached(sig, msg, mlen, pk), 0);
    char etag[128];
    snprintf(etag, sizeof(etag), "If-None-Match: %s", header(&r, "ETag"));
    resp_free(&r);
    r = http(f, "GET", murl, c[0], NULL, NULL, 0, etag);
    assert_int_equal(r.status, 304);
    resp_free(&r);

    /* Round is running (cap reached); the admin API shows it. */
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)round_id);
    r = http(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    json_decref(j);
    resp_free(&r);

    /* Stop aborts the open round with a reason. */
    r = http(f, "POST", "/v1/admin/populations/kb-en/stop", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "stopped by admin");
    json_decref(j);
    resp_free(&r);
    for (int i = 0; i < 5; i++)
        free(c[i]);
    free(etok);
}

static void test_forming_deadline_and_restart(void **state) {
    struct fx *f = *state;
    char *etok = create_population(f);
    char *c = enroll(f, etok, "UK");
    upload_model_and_start(f);
    const char *ok = "{\"region\":\"UK\",\"eligibility\":{\"charging\":true,\"unmetered\":false,"
                     "\"idle\":false}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", c, ok);
    json_t *j = body_json(&r);
    if (strcmp(json_string_value(json_object_get(j, "status")), "selected") != 0)
        fprintf(stderr, "%s\n", r.body);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
    int64_t rid = json_integer_value(json_object_get(j, "round_id"));
    json_decref(j);
    resp_free(&r);
    /* Forming window passes with 1 < min_participants (3): the window is extended once,
     * then the round is abandoned. */
    f->now_ms += 61 * 1000;
    fl_coord_tick(f->co);
    char path[64];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    r = http(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "forming");
    assert_true(json_is_object(json_object_get(j, "phase_counts")));
    assert_int_equal(json_integer_value(json_object_get(j, "participants")), 1);
    json_decref(j);
    resp_free(&r);
    f->now_ms += 61 * 1000;
    fl_coord_tick(f->co);
    r = http(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "too few clients"));
    json_decref(j);
    resp_free(&r);

    /* A new round forms; then the coordinator "crashes" (the HTTP server is torn down
     * without the graceful path is not possible in-process, so reopen the store under a new
     * coordinator while the old one's round is still open in the database). */
    r = http_json(f, "POST", "/v1/checkin", c, ok);
    j = body_json(&r);
    int64_t rid2 = json_integer_value(json_object_get(j, "round_id"));
    assert_true(rid2 > rid);
    json_decref(j);
    resp_free(&r);
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.db_path = f->db;
    fl_coord *co2 = NULL;
    char err[256];
    assert_int_equal(fl_coord_create(&co2, &cfg, err, sizeof(err)), FL_OK);
    fl_coord_destroy(co2);
    r = http(f, "GET", "/v1/admin/populations/kb-en/rounds?limit=5", ADMIN_TOKEN, NULL, NULL, 0,
             NULL);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    json_t *rounds = json_object_get(j, "rounds");
    assert_int_equal(json_array_size(rounds), 2);
    json_t *newest = json_array_get(rounds, 0);
    assert_int_equal(json_integer_value(json_object_get(newest, "round_id")), rid2);
    assert_string_equal(json_string_value(json_object_get(newest, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(newest, "reason")),
                        "coordinator restarted");
    json_decref(j);
    resp_free(&r);
    r = http(f, "GET", "/v1/admin/populations/kb-en/rounds?limit=0", ADMIN_TOKEN, NULL, NULL, 0,
             NULL);
    assert_error(&r, 400, "invalid_parameter");
    resp_free(&r);
    free(c);
    free(etok);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ops_endpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_http_strictness, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_deadline, setup_deadline, teardown),
        cmocka_unit_test_setup_teardown(test_request_deadline_408, setup_deadline, teardown),
        cmocka_unit_test_setup_teardown(test_stop_drains_requests, setup_stop, teardown),
        cmocka_unit_test_setup_teardown(test_stop_drain_bound, setup_drain, teardown),
        cmocka_unit_test_setup_teardown(test_admin_refusals_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enrollment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkin_selection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forming_deadline_and_restart, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
