/* The HTTP layer's routing and request forms (http.c, docs/protocol.md section 2): unknown
 * paths in every subtree answer 404 not_found, HEAD is GET without a body, methods outside
 * a route's Allow list 405; bearer tokens are taken only in the documented form; JSON bodies
 * need application/json (parameters allowed) and a JSON object; a chunked body is refused
 * (411, or 413 where the endpoint takes no body); the listen address is an IPv4 or IPv6
 * literal, a taken port fails the start with a message, and a coordinator without an admin
 * token answers every admin call 401. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "coord_testkit.h"

/* One request with an extra raw header line (may be NULL) instead of the token helper. */
static struct resp req_hdr2(struct fx *f, const char *method, const char *path,
                            const char *extra_header, const char *extra2,
                            const char *content_type, const char *body, size_t len) {
    struct resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct curl_slist *h =
        http_prepare(f, c, method, path, NULL, content_type, body, len, NULL, &r);
    if (extra_header)
        h = curl_slist_append(h, extra_header);
    if (extra2)
        h = curl_slist_append(h, extra2);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, fl_test_scaled(30));
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

static struct resp req_hdr(struct fx *f, const char *method, const char *path,
                           const char *extra_header, const char *content_type,
                           const char *body, size_t len) {
    return req_hdr2(f, method, path, extra_header, NULL, content_type, body, len);
}

/* Sends raw bytes on a fresh connection and reads the answer until the server closes it
 * (every raw request here says Connection: close). Returns the status code of the answer. */
static long raw(unsigned port, const char *text, char *out, size_t cap) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {10, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t n = strlen(text);
    assert_int_equal(send(s, text, n, 0), (ssize_t)n);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = recv(s, out + got, cap - 1 - got, 0)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(s);
    long status = 0;
    if (strncmp(out, "HTTP/1.", 7) == 0)
        status = strtol(out + 9, NULL, 10);
    return status;
}

/* ---- routing ---- */

static void test_unknown_paths(void **state) {
    struct fx *f = *state;
    static const char *const paths[] = {
        "/",
        "/v2/healthz",
        "/v1",
        "/v1/nothing",
        "/v1//checkin",
        "/v1/a/b/c/d/e/f/g/h/i",
        "/v1/rounds/1/other",
        "/v1/rounds/1/secagg/advertise/other",
        "/v1/rounds/1/status/more",
        "/v1/models/p",
        "/v1/audit/other",
        "/v1/audit/proof/other",
        "/v1/audit/checkpoint/more",
        "/v1/admin/audit/other",
        "/v1/admin/clients/abc/forget",
        "/v1/admin/other",
        "/v1/admin/populations/p/other",
        "/v1/admin/rounds/1/more",
        "/v1/admin/populations/p/rounds/1",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        struct resp r = http_req(f, "GET", paths[i], ADMIN_TOKEN, NULL, NULL, 0, NULL);
        if (r.status != 404)
            fprintf(stderr, "%s: %ld %s\n", paths[i], r.status, r.body ? r.body : "");
        assert_error(&r, 404, "not_found");
        resp_free(&r);
    }
    /* A path longer than the router takes. */
    char longp[3000];
    snprintf(longp, sizeof(longp), "/v1/models/");
    memset(longp + 11, 'x', sizeof(longp) - 12);
    longp[sizeof(longp) - 1] = '\0';
    struct resp r = http_req(f, "GET", longp, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status / 100, 4);
    resp_free(&r);
    /* Longer than the router's 512-byte path buffer, well within the connection's memory. */
    char mid[700];
    snprintf(mid, sizeof(mid), "/v1/models/");
    memset(mid + 11, 'y', sizeof(mid) - 12);
    mid[sizeof(mid) - 1] = '\0';
    r = http_req(f, "GET", mid, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
}

static void test_methods(void **state) {
    struct fx *f = *state;
    /* HEAD: the headers of GET, no body. */
    struct resp r = req_hdr(f, "HEAD", "/healthz", NULL, NULL, NULL, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    resp_free(&r);
    char allow[64];
    static const struct {
        const char *method, *path, *allow;
    } cases[] = {
        {"DELETE", "/v1/checkin", "POST"},
        {"GET", "/v1/enroll", "POST"},
        {"PUT", "/v1/admin/populations/p", "GET, PATCH"},
        {"GET", "/v1/admin/populations/p/start", "POST"},
        {"POST", "/healthz", "GET"},
        {"POST", "/v1/audit/checkpoint", "GET"},
        {"PATCH", "/v1/admin/populations/p/enrollment-token", "POST"},
        {"POSTX", "/v1/rounds/1/update", "POST"},
        {"GE", "/healthz", "GET"},
        {"ET", "/healthz", "GET"},
        {"ATCH", "/v1/admin/populations/p", "GET, PATCH"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = http_req(f, cases[i].method, cases[i].path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
        if (r.status != 405)
            fprintf(stderr, "%s %s: %ld\n", cases[i].method, cases[i].path, r.status);
        assert_error(&r, 405, "method_not_allowed");
        assert_non_null(header_in(&r, "Allow", allow, sizeof(allow)));
        assert_string_equal(allow, cases[i].allow);
        resp_free(&r);
    }
}

/* ---- bearer tokens ---- */

static void test_bearer_forms(void **state) {
    struct fx *f = *state;
    char hdr[512];
    snprintf(hdr, sizeof(hdr), "Authorization: Bearer    %s", ADMIN_TOKEN); /* extra spaces */
    struct resp r = req_hdr(f, "GET", "/v1/admin/populations", hdr, NULL, NULL, 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char longtok[260];
    memset(longtok, 'a', 201);
    longtok[201] = '\0';
    const char *bad[] = {"Authorization: Basic Zm9vOmJhcg==",
                         "Authorization: Bearer short-token",
                         "Authorization: bearer fla_test-admin-token-0123456789abcdef",
                         "Authorization: Bearer fla_test-admin-token-0123456789abcde!",
                         "Authorization: Bearer fla_test-admin-token/0123456789abcdef",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        r = req_hdr(f, "GET", "/v1/admin/populations", bad[i], NULL, NULL, 0);
        assert_error(&r, 401, "unauthorized");
        resp_free(&r);
    }
    snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", longtok);
    r = req_hdr(f, "GET", "/v1/admin/populations", hdr, NULL, NULL, 0);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    /* A well-formed admin-looking token that is not the admin's. */
    r = req_hdr(f, "GET", "/v1/admin/populations",
                "Authorization: Bearer fla_test-admin-token-0123456789abcdeX", NULL, NULL, 0);
    assert_error(&r, 401, "unauthorized");
    char v[64];
    assert_non_null(header_in(&r, "WWW-Authenticate", v, sizeof(v)));
    resp_free(&r);
}

/* ---- JSON bodies ---- */

static void test_json_bodies(void **state) {
    struct fx *f = *state;
    static const char *pop = "{\"name\":\"js\",\"allowed_regions\":[\"EU\"]}";
    /* Media type parameters are fine; another type is 415. */
    struct resp r = http_req(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                             "text/json", pop, strlen(pop), NULL);
    assert_error(&r, 415, "unsupported_media_type");
    resp_free(&r);
    static const struct {
        const char *body;
        size_t len;
    } bad[] = {
        {"[]", 2},
        {"\"name\"", 6},
        {"{\"name\":\"a\",\"name\":\"b\",\"allowed_regions\":[\"EU\"]}", 49},
        {"{\"name\":\"a\0b\"}", 14},
        {"{", 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = http_req(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "application/json",
                     bad[i].body, bad[i].len, NULL);
        assert_error(&r, 400, "malformed_json");
        resp_free(&r);
    }
    /* No body at all on a JSON endpoint. */
    r = http_req(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "application/json", NULL, 0,
                 NULL);
    assert_error(&r, 400, "malformed_json");
    resp_free(&r);
    r = http_req(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                 "application/json; charset=utf-8", pop, strlen(pop), NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    /* Without a Content-Type the body is still read as JSON. */
    char auth[128];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", ADMIN_TOKEN);
    r = req_hdr2(f, "PATCH", "/v1/admin/populations/js", auth, "Content-Type:", NULL,
                 "{\"deadlines_s\":{\"share\":31}}", 28);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* ---- framing on raw connections ---- */

static void test_chunked_bodies(void **state) {
    struct fx *f = *state;
    char out[4096], req[512];
    snprintf(req, sizeof(req),
             "POST /v1/checkin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Authorization: Bearer flc_0123456789abcdef.xxxxxxxxxxxxxxxx\r\n"
             "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
             "2\r\n{}\r\n0\r\n\r\n");
    assert_int_equal(raw(f->port, req, out, sizeof(out)), 411);
    assert_non_null(strstr(out, "length_required"));
    snprintf(req, sizeof(req),
             "POST /v1/admin/populations/p/stop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_int_equal(raw(f->port, req, out, sizeof(out)), 411);
    /* An endpoint that takes no body: 413. */
    snprintf(req, sizeof(req),
             "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_int_equal(raw(f->port, req, out, sizeof(out)), 413);
    assert_non_null(strstr(out, "body_too_large"));
    /* HTTP/1.0 needs no Host. */
    snprintf(req, sizeof(req), "GET /healthz HTTP/1.0\r\nConnection: close\r\n\r\n");
    assert_int_equal(raw(f->port, req, out, sizeof(out)), 200);
}

/* ---- listening ---- */

static fl_coord *make(const char *listen, unsigned port, bool admin, const char *db) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.listen_address = listen;
    cfg.port = port;
    cfg.threads = 1;
    cfg.db_path = db;
    cfg.request_deadline_s = 0; /* no watchdog deadlines */
    if (admin) {
        cfg.has_admin_token = 1;
        crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN,
                           strlen(ADMIN_TOKEN));
    }
    fl_coord *co = NULL;
    char err[256];
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    return co;
}

static void test_listen_addresses(void **state) {
    (void)state;
    /* Not an IP literal: FL_ERR_MISUSE at start, with the address in the message. */
    fl_coord *co = make("localhost", 0, true, ":memory:");
    assert_int_equal(fl_coord_start(co), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_coord_errmsg(co), "localhost"));
    fl_coord_destroy(co);
    /* A port another socket holds: FL_ERR_IO. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s, 1), 0);
    socklen_t al = sizeof(a);
    getsockname(s, (struct sockaddr *)&a, &al);
    co = make("127.0.0.1", ntohs(a.sin_port), true, ":memory:");
    assert_int_equal(fl_coord_start(co), FL_ERR_IO);
    assert_non_null(strstr(fl_coord_errmsg(co), "could not start"));
    fl_coord_destroy(co);
    close(s);
    /* IPv6 loopback, no admin token, no request deadline: health answers, admin is 401. */
    co = make("::1", 0, false, ":memory:");
    assert_int_equal(fl_coord_start(co), FL_OK);
    struct fx f6;
    memset(&f6, 0, sizeof(f6));
    f6.port = fl_coord_port(co);
    assert_true(f6.port > 0);
    char url[96];
    snprintf(url, sizeof(url), "http://[::1]:%u/healthz", f6.port);
    CURL *c = curl_easy_init();
    struct resp r;
    memset(&r, 0, sizeof(r));
    struct curl_slist *h = http_prepare(&f6, c, "GET", "/healthz", NULL, NULL, NULL, 0, NULL, &r);
    curl_easy_setopt(c, CURLOPT_URL, url);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    assert_int_equal(r.status, 200);
    curl_slist_free_all(h);
    resp_free(&r);
    snprintf(url, sizeof(url), "http://[::1]:%u/v1/admin/populations", f6.port);
    h = http_prepare(&f6, c, "GET", "/", ADMIN_TOKEN, NULL, NULL, 0, NULL, &r);
    curl_easy_setopt(c, CURLOPT_URL, url);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    assert_error(&r, 401, "unauthorized");
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    resp_free(&r);
    fl_coord_destroy(co); /* stops it */
}

/* Appends "/seg" to path (cap bytes; the paths here are short). */
static void add_seg(char *path, size_t cap, const char *seg) {
    size_t n = strlen(path), l = strlen(seg);
    assert_true(n + 1 + l + 1 <= cap);
    path[n] = '/';
    memcpy(path + n + 1, seg, l + 1);
}

/* Every route with one of its fixed segments changed (or one segment more or less) is not
 * found: the router matches whole paths, not prefixes. Parameters ({id}, {name}, {phase})
 * are the handlers' to judge. */
static void test_route_mutations(void **state) {
    struct fx *f = *state;
    static const char *const routes[] = {
        "/healthz", "/readyz", "/metrics", "/v1/enroll", "/v1/checkin", "/v1/rounds/1/task",
        "/v1/rounds/1/update", "/v1/rounds/1/status", "/v1/rounds/1/secagg/advertise",
        "/v1/rounds/1/secagg/advertise/result", "/v1/models/p/1", "/v1/audit/checkpoint",
        "/v1/audit/proof/inclusion", "/v1/audit/proof/consistency", "/v1/admin/audit/bundle",
        "/v1/admin/clients/00/erase", "/v1/admin/populations", "/v1/admin/populations/p",
        "/v1/admin/populations/p/start", "/v1/admin/populations/p/stop",
        "/v1/admin/populations/p/models", "/v1/admin/populations/p/rounds",
        "/v1/admin/populations/p/enrollment-token", "/v1/admin/rounds/1"};
    /* Positions of parameters in each route (segment index from 0), -1 terminated. */
    static const int params[][3] = {
        {-1}, {-1}, {-1}, {-1}, {-1}, {2, -1}, {2, -1}, {2, -1}, {2, 4, -1}, {2, 4, -1},
        {2, 3, -1}, {-1}, {-1}, {-1}, {-1}, {3, -1}, {-1}, {3, -1}, {3, -1}, {3, -1}, {3, -1},
        {3, -1}, {3, -1}, {3, -1}};
    size_t tried = 0;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        char segs[8][48];
        int n = 0;
        const char *q = routes[i] + 1;
        while (*q && n < 8) {
            size_t l = strcspn(q, "/");
            snprintf(segs[n++], sizeof(segs[0]), "%.*s", (int)l, q);
            q += l + (q[l] == '/');
        }
        for (int k = 0; k <= n; k++) {
            bool param = false;
            for (int j = 0; k < n && params[i][j] >= 0; j++)
                param |= params[i][j] == k;
            if (param)
                continue;
            /* k < n: segment k replaced; k == n: one more segment; both: one less too. */
            char path[256] = "";
            for (int m = 0; m < n; m++)
                add_seg(path, sizeof(path), m == k ? "zz" : segs[m]);
            if (k == n)
                add_seg(path, sizeof(path), "zz");
            struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
            if (r.status != 404)
                fprintf(stderr, "%s: %ld\n", path, r.status);
            assert_error(&r, 404, "not_found");
            resp_free(&r);
            tried++;
            if (k == n && n > 1) { /* the last segment dropped */
                path[0] = '\0';
                for (int m = 0; m < n - 1; m++)
                    add_seg(path, sizeof(path), segs[m]);
                bool is_route = false;
                for (size_t o = 0; o < sizeof(routes) / sizeof(routes[0]); o++)
                    is_route |= strcmp(routes[o], path) == 0;
                if (is_route || strcmp(path, "/v1/admin/populations/p") == 0)
                    continue;
                r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
                if (r.status != 404)
                    fprintf(stderr, "%s: %ld\n", path, r.status);
                assert_error(&r, 404, "not_found");
                resp_free(&r);
            }
        }
    }
    assert_true(tried > 50);
}

/* Content-Length values that are not a plain decimal number: 400, connection closed. */
static void test_content_length_forms(void **state) {
    struct fx *f = *state;
    static const char *const values[] = {"-1", "12abc", "", " ", "0x10"};
    char out[4096], req[512];
    for (int i = 0; i < 5; i++) {
        snprintf(req, sizeof(req),
                 "POST /v1/checkin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 "Content-Type: application/json\r\nContent-Length: %s\r\n\r\n{}",
                 values[i]);
        long st = raw(f->port, req, out, sizeof(out));
        if (st != 400)
            fprintf(stderr, "Content-Length '%s': %ld\n", values[i], st);
        assert_int_equal(st, 400);
    }
    /* A request target that is not a path. */
    snprintf(req, sizeof(req), "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_int_equal(raw(f->port, req, out, sizeof(out)) / 100, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unknown_paths, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_methods, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bearer_forms, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_json_bodies, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_chunked_bodies, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_route_mutations, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_content_length_forms, fx_setup, fx_teardown),
        cmocka_unit_test(test_listen_addresses),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
