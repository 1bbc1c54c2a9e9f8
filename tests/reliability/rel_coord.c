/* Helpers of the coordinator-level reliability tests; see rel_coord.h. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <sodium.h>
#include <sqlite3.h>

#include "fl_test_time.h"
#include "rel_coord.h"

/* ---- profile ---- */

int rel_long(void) {
    const char *p = getenv("FL_RELIABILITY_PROFILE");
    return p && strcmp(p, "long") == 0;
}

long rel_envl(const char *name, long dflt) {
    const char *v = getenv(name);
    if (!v || !v[0])
        return dflt;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end && *end == '\0' ? n : dflt;
}

uint64_t rel_seed0(void) {
    const char *v = getenv("FL_RELIABILITY_SEED");
    if (v && v[0])
        return strtoull(v, NULL, 10);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
}

uint64_t rel_next(uint64_t *s) {
    if (*s == 0)
        *s = 0x2545F4914F6CDD1Dull;
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

double rel_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void rel_sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- in-process coordinator ---- */

static void rel_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (level >= FL_LOG_ERROR || getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  [coordinator] %s\n", msg);
}

static void *rel_tick_main(void *arg) {
    struct fx *f = arg;
    while (!atomic_load(&f->stop_ticker)) {
        fl_coord_tick(f->co);
        rel_sleep_ms(10);
    }
    return NULL;
}

void rel_inproc_start(struct fx *f, const fl_coord_limits *lim, unsigned threads,
                      unsigned max_long_poll_s) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = threads;
    cfg.db_path = f->db;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.logger.fn = rel_log;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    if (lim)
        cfg.limits = *lim;
    if (max_long_poll_s)
        cfg.max_long_poll_s = max_long_poll_s;
    char err[256];
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_non_null(f->co);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
    /* The test kit's own ticker is not used (ticking stays false): fx_free only destroys. */
    atomic_store(&f->stop_ticker, false);
    assert_int_equal(pthread_create(&f->ticker, NULL, rel_tick_main, f), 0);
}

void rel_inproc_stop(struct fx *f) {
    if (!f->co)
        return;
    atomic_store(&f->stop_ticker, true);
    pthread_join(f->ticker, NULL);
    fl_coord_stop(f->co);
    fl_coord_destroy(f->co);
    f->co = NULL;
}

/* ---- the real executable ---- */

extern char **environ;

void rel_proc_start(struct fx *f, const char *exe, const char *extra_json) {
    char path[256], hex[65];
    uint8_t h[32];
    snprintf(path, sizeof(path), "%s/signing.key", f->dir);
    FILE *kf = fopen(path, "w");
    assert_non_null(kf);
    fprintf(kf, "%s\n", "0707070707070707070707070707070707070707070707070707070707070707");
    fclose(kf);
    chmod(path, 0600);
    crypto_hash_sha256(h, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    snprintf(f->conf, sizeof(f->conf), "%s/coordinator.conf.json", f->dir);
    FILE *cf = fopen(f->conf, "w");
    assert_non_null(cf);
    fprintf(cf,
            "{\"listen\":\"127.0.0.1\",\"port\":0,\"threads\":2,\"database\":\"%s\","
            "\"admin_token_sha256\":\"%s\",\"signing_key_file\":\"signing.key\","
            "\"log_level\":\"info\"%s%s}\n",
            f->db, hex, extra_json ? "," : "", extra_json ? extra_json : "");
    fclose(cf);
    snprintf(f->log, sizeof(f->log), "%s/serve.log", f->dir);
    unlink(f->log);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, f->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)exe, "serve", "--config", f->conf, NULL};
    int rc = posix_spawn(&f->child, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    f->port = 0;
    for (long i = 0; i < fl_test_scaled(400) && !f->port; i++) {
        int st;
        if (waitpid(f->child, &st, WNOHANG) == f->child) {
            fprintf(stderr, "flotilla-coordinator exited early (status %d); log %s\n", st, f->log);
            f->child = 0;
            fail();
        }
        FILE *lf = fopen(f->log, "r");
        char line[1024];
        while (lf && !f->port && fgets(line, sizeof(line), lf)) {
            const char *p = strstr(line, "listening on 127.0.0.1:");
            if (p)
                f->port = (unsigned)strtoul(p + strlen("listening on 127.0.0.1:"), NULL, 10);
        }
        if (lf)
            fclose(lf);
        if (!f->port)
            rel_sleep_ms(50);
    }
    assert_true(f->port > 0);
    struct resp r = http_req(f, "GET", "/readyz", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

int rel_proc_try_start(struct fx *f, const char *exe) {
    assert_true(f->conf[0] && f->log[0] && f->child == 0);
    /* A marker line, so that only this start's "listening" line counts. */
    FILE *lf = fopen(f->log, "a");
    assert_non_null(lf);
    fprintf(lf, "---- rel_proc_try_start ----\n");
    fclose(lf);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, f->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)exe, "serve", "--config", f->conf, NULL};
    int rc = posix_spawn(&f->child, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    f->port = 0;
    for (long i = 0; i < fl_test_scaled(600); i++) {
        int st;
        if (waitpid(f->child, &st, WNOHANG) == f->child) {
            f->child = 0;
            return st;
        }
        /* The last marker's section of the log only. */
        FILE *rf = fopen(f->log, "r");
        char line[1024];
        unsigned port = 0;
        while (rf && fgets(line, sizeof(line), rf)) {
            if (strncmp(line, "---- rel_proc_try_start", 23) == 0)
                port = 0;
            const char *p = strstr(line, "listening on 127.0.0.1:");
            if (p)
                port = (unsigned)strtoul(p + strlen("listening on 127.0.0.1:"), NULL, 10);
        }
        if (rf)
            fclose(rf);
        if (port) {
            f->port = port;
            break;
        }
        rel_sleep_ms(20);
    }
    assert_true(f->port > 0);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct resp r;
    CURLcode cc = rel_http(f, c, "GET", "/readyz", NULL, NULL, NULL, 0, NULL, 10000, &r);
    curl_easy_cleanup(c);
    long status = cc == CURLE_OK ? r.status : 0;
    resp_free(&r);
    if (status == 200)
        return 0;
    /* Not ready: it died meanwhile (a cut) or something is wrong (the caller's assert). */
    int st = fx_proc_signal(f, SIGKILL);
    return st;
}

size_t rel_plain_body(const struct tc *c, uint8_t *out) {
    memcpy(out, "FLUP\x01\0\0\0", 8);
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)c->task.rid >> (8 * b));
    for (size_t j = 0; j < c->task.vec_len; j++) {
        uint32_t w = (uint32_t)c->words[j];
        memcpy(out + 16 + 4 * j, &w, 4);
    }
    return 16 + 4 * c->task.vec_len;
}

/* ---- HTTP ---- */

CURLcode rel_http(struct fx *f, CURL *c, const char *method, const char *path, const char *token,
                  const char *content_type, const void *body, size_t len, const char *pid,
                  long timeout_ms, struct resp *r) {
    memset(r, 0, sizeof(*r));
    curl_easy_reset(c); /* options only: the connection cache stays */
    struct curl_slist *h =
        http_prepare(f, c, method, path, token, content_type, body, len, pid, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, fl_test_scaled(timeout_ms));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, fl_test_scaled(2000));
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(h);
    return rc;
}

/* ---- raw sockets ---- */

int rel_connect(unsigned port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd p = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof(err);
        rc = poll(&p, 1, (int)fl_test_scaled(2000)) == 1 &&
                     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0
                 ? 0
                 : -1;
    }
    if (rc != 0) {
        close(fd);
        return -1;
    }
    /* Back to blocking for sends; reads poll with their own timeout. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct timeval tv = {fl_test_scaled(5), 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

int rel_send_all(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

size_t rel_recv_until(int fd, char *buf, size_t cap, int timeout_ms, bool *closed) {
    size_t got = 0;
    *closed = false;
    double end = rel_mono_s() + fl_test_scaled(timeout_ms) / 1000.0;
    while (got + 1 < cap) {
        int left = (int)((end - rel_mono_s()) * 1000.0);
        if (left <= 0)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *closed = true;
            break;
        }
        got += (size_t)n;
        buf[got] = '\0';
        /* A complete response without a body framing problem is enough for the callers:
         * stop once the headers and a Content-Length body are in. */
        const char *eoh = strstr(buf, "\r\n\r\n");
        if (eoh) {
            const char *cl = strstr(buf, "Content-Length: ");
            if (!cl)
                cl = strstr(buf, "content-length: ");
            if (cl && cl < eoh) {
                size_t want = (size_t)strtoul(cl + 16, NULL, 10);
                if ((size_t)(buf + got - (eoh + 4)) >= want)
                    break;
            }
        }
    }
    buf[got] = '\0';
    return got;
}

int rel_status_of(const char *buf) {
    if (strncmp(buf, "HTTP/1.", 7) != 0 || !buf[7] || buf[8] != ' ')
        return 0;
    return (int)strtol(buf + 9, NULL, 10);
}

int rel_raw(unsigned port, const void *req, size_t len, int timeout_ms, char *out, size_t cap) {
    char local[8192];
    if (!out) {
        out = local;
        cap = sizeof(local);
    }
    out[0] = '\0';
    int fd = rel_connect(port);
    if (fd < 0)
        return -1;
    (void)rel_send_all(fd, req, len); /* the server may answer and close before all is sent */
    bool closed = false;
    size_t got = rel_recv_until(fd, out, cap, timeout_ms, &closed);
    close(fd);
    if (got == 0)
        return closed ? 0 : -2;
    int st = rel_status_of(out);
    return st ? st : 0;
}

int rel_healthz(unsigned port) {
    static const char req[] =
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    return rel_raw(port, req, sizeof(req) - 1, 5000, NULL, 0);
}

/* ---- database ---- */

sqlite3 *rel_db_open(const char *path) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "open %s: %s\n", path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    return db;
}

void rel_db_close(sqlite3 *db) {
    sqlite3_close(db);
}

int64_t rel_q(sqlite3 *db, const char *fmt, ...) {
    char q[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof(q), fmt, ap);
    va_end(ap);
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, q, -1, &s, NULL);
    if (rc != SQLITE_OK)
        fprintf(stderr, "rel_q(%s): %s\n", q, sqlite3_errmsg(db));
    assert_int_equal(rc, SQLITE_OK);
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    return v;
}

bool rel_db_ok(const char *path, char *why, size_t why_len) {
    sqlite3 *db = rel_db_open(path);
    if (!db) {
        snprintf(why, why_len, "cannot open");
        return false;
    }
    bool ok = true;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL) != SQLITE_OK) {
        snprintf(why, why_len, "integrity_check: %s", sqlite3_errmsg(db));
        ok = false;
    } else {
        int rc = sqlite3_step(s);
        const char *t = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
        if (!t || strcmp(t, "ok") != 0) {
            snprintf(why, why_len, "integrity_check: %s", t ? t : sqlite3_errmsg(db));
            ok = false;
        }
    }
    sqlite3_finalize(s);
    s = NULL;
    if (ok && sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
        snprintf(why, why_len, "foreign_key_check: table %s",
                 (const char *)sqlite3_column_text(s, 0));
        ok = false;
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return ok;
}

/* ---- metrics ---- */

double rel_metric(struct fx *f, const char *name) {
    struct resp r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    double v = NAN;
    size_t nl = strlen(name);
    for (const char *line = r.body; line && *line;) {
        if (strncmp(line, name, nl) == 0 && line[nl] == ' ') {
            v = strtod(line + nl + 1, NULL);
            break;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    resp_free(&r);
    return v;
}
