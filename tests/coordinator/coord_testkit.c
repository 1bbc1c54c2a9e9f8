/* Shared code of the coordinator tests: fixtures (in-process and child process), libcurl
 * helpers and stand-in devices. See coord_testkit.h. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>
#include <sqlite3.h>

#include "coord_testkit.h"
#include "flotilla/dp.h"
#include "flotilla/secagg.h"
#include "flotilla/tensor.h"

extern char **environ;

/* ---- in-process fixture ---- */

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

void fx_config_init(struct fx *f, fl_coord_config *cfg) {
    fl_coord_config_init(cfg);
    cfg->port = 0;
    cfg->threads = 2;
    cfg->db_path = f->db;
    cfg->has_admin_token = 1;
    crypto_hash_sha256(cfg->admin_token_sha256, (const uint8_t *)ADMIN_TOKEN,
                       strlen(ADMIN_TOKEN));
}

void fx_start(struct fx *f) {
    fl_coord_config cfg;
    fx_config_init(f, &cfg);
    cfg.clock = fx_clock;
    cfg.clock_user = f;
    cfg.logger.fn = fx_log;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    if (f->unmask_threads)
        cfg.secagg_unmask_threads = f->unmask_threads;
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

void fx_stop(struct fx *f) {
    if (f->ticking) {
        atomic_store(&f->stop_ticker, true);
        pthread_join(f->ticker, NULL);
        f->ticking = false;
    }
    fl_coord_destroy(f->co);
    f->co = NULL;
}

struct fx *fx_new(void) {
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/fl-coord-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof(f->db), "%s/coord.db", f->dir);
    atomic_store(&f->now_ms, 1767225600000);
    return f;
}

void fx_free(struct fx *f) {
    if (!f)
        return;
    if (f->co)
        fx_stop(f);
    if (f->child > 0)
        fx_proc_signal(f, SIGKILL);
    char p[256];
    static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s%s", f->db, tails[i]);
        unlink(p);
    }
    if (f->log[0])
        unlink(f->log);
    if (f->conf[0])
        unlink(f->conf);
    snprintf(p, sizeof(p), "%s/signing.key", f->dir);
    unlink(p);
    rmdir(f->dir);
    free(f);
}

int fx_setup(void **state) {
    struct fx *f = fx_new();
    fx_start(f);
    *state = f;
    return 0;
}

int fx_teardown(void **state) {
    fx_free(*state);
    return 0;
}

void fx_advance(struct fx *f, int64_t ms) {
    atomic_fetch_add(&f->now_ms, ms);
    if (f->co)
        fl_coord_tick(f->co);
}

/* ---- child-process fixture ---- */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Port from the child's "listening on 127.0.0.1:<port> (" log line, or 0. */
static unsigned log_port(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    char line[1024];
    unsigned port = 0;
    while (!port && fgets(line, sizeof(line), fp)) {
        const char *s = strstr(line, "listening on 127.0.0.1:");
        if (s)
            port = (unsigned)strtoul(s + strlen("listening on 127.0.0.1:"), NULL, 10);
    }
    fclose(fp);
    return port;
}

void fx_proc_start(struct fx *f, const char *exe) {
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
            "\"log_level\":\"%s\"}\n",
            f->db, hex, getenv("FL_TEST_VERBOSE") ? "debug" : "info");
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
    if (rc != 0)
        fprintf(stderr, "spawn %s: %s\n", exe, strerror(rc));
    assert_int_equal(rc, 0);
    /* Up to 20 s (ASan start-up on a loaded machine), times FL_TEST_TIME_SCALE. */
    f->port = 0;
    for (long i = 0; i < fl_test_scaled(400) && !f->port; i++) {
        int st;
        if (waitpid(f->child, &st, WNOHANG) == f->child) {
            fprintf(stderr, "flotilla-coordinator exited early (status %d); log %s:\n", st,
                    f->log);
            /* The log may live in a private mount (reliability tests): show its end here. */
            FILE *lf = fopen(f->log, "r");
            if (lf) {
                char line[512];
                long sz = fseek(lf, 0, SEEK_END) == 0 ? ftell(lf) : 0;
                if (sz > 2048)
                    fseek(lf, sz - 2048, SEEK_SET);
                else
                    rewind(lf);
                while (fgets(line, sizeof(line), lf))
                    fputs(line, stderr);
                fclose(lf);
            }
            f->child = 0;
            fail();
        }
        f->port = log_port(f->log);
        if (!f->port)
            sleep_ms(50);
    }
    assert_true(f->port > 0);
    struct resp r = http_req(f, "GET", "/readyz", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

int fx_proc_signal(struct fx *f, int sig) {
    int st = -1;
    if (f->child <= 0)
        return st;
    kill(f->child, sig);
    while (waitpid(f->child, &st, 0) < 0 && errno == EINTR)
        ;
    f->child = 0;
    return st;
}

/* ---- HTTP ---- */

static size_t on_body(char *p, size_t sz, size_t n, void *u) {
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

const char *header_in(const struct resp *r, const char *name, char *buf, size_t n) {
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

void resp_free(struct resp *r) {
    free(r->body);
    memset(r, 0, sizeof(*r));
}

struct curl_slist *http_prepare(struct fx *f, CURL *c, const char *method, const char *path,
                                const char *token, const char *content_type, const void *body,
                                size_t len, const char *pid, struct resp *r) {
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
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    return h;
}

struct resp http_req(struct fx *f, const char *method, const char *path, const char *token,
                     const char *content_type, const void *body, size_t len, const char *pid) {
    struct resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct curl_slist *h =
        http_prepare(f, c, method, path, token, content_type, body, len, pid, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, fl_test_scaled(30));
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fprintf(stderr, "curl %s %s: %s\n", method, path, curl_easy_strerror(rc));
    assert_int_equal(rc, CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

struct resp http_json(struct fx *f, const char *method, const char *path, const char *token,
                      const char *json) {
    return http_req(f, method, path, token, "application/json", json, json ? strlen(json) : 0,
                    NULL);
}

json_t *body_json(const struct resp *r) {
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    if (!j)
        fprintf(stderr, "not JSON (%ld): %.200s\n", r->status, r->body ? r->body : "");
    assert_non_null(j);
    return j;
}

void assert_error(const struct resp *r, long status, const char *code) {
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

int64_t db_int(struct fx *f, const char *q) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, q, -1, &s, NULL);
    if (rc != SQLITE_OK)
        fprintf(stderr, "db_int(%s): %s\n", q, sqlite3_errmsg(db));
    assert_int_equal(rc, SQLITE_OK);
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

int db_exec_rc(struct fx *f, const char *sql) {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        fprintf(stderr, "db_exec(%s): %s\n", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
    return rc & 0xff;
}

void db_exec(struct fx *f, const char *sql) {
    assert_int_equal(db_exec_rc(f, sql), SQLITE_OK);
}

double metric_value(struct fx *f, const char *series) {
    struct resp r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    char key[256];
    snprintf(key, sizeof(key), "\n%s ", series);
    const char *p = strstr(r.body, key);
    if (!p)
        fail_msg("no series %s in /metrics", series);
    double v = strtod(p + strlen(key), NULL);
    resp_free(&r);
    return v;
}

/* ---- audit log ---- */

void audit_vkey_expected(struct fx *f, char *vkey, size_t n) {
    uint8_t pk[32];
    char kid[FL_COORD_KEY_ID_BYTES], origin[128];
    fl_coord_public_key(f->co, pk, kid);
    snprintf(origin, sizeof(origin), "flotilla-coordinator/%s", kid);
    assert_int_equal(fl_store_audit_vkey(vkey, n, origin, pk), FL_OK);
}

fl_store_audit_bundle *audit_bundle_verified(struct fx *f, struct resp *r) {
    *r = http_req(f, "GET", "/v1/admin/audit/bundle", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r->status, 200);
    char vkey[256];
    audit_vkey_expected(f, vkey, sizeof(vkey));
    fl_store_audit_bundle *b = NULL;
    assert_int_equal(fl_store_audit_bundle_open(&b, r->body, r->len, NULL), FL_OK);
    fl_store_audit_verdict v;
    fl_status rc = fl_store_audit_bundle_verify(b, vkey, &v);
    if (rc != FL_OK)
        fail_msg("bundle: %s", v.message);
    assert_true(v.ok);
    return b;
}

json_t *audit_round_find(struct fx *f, const char *pop, int64_t rid, const char *never) {
    struct resp r;
    fl_store_audit_bundle *b = audit_bundle_verified(f, &r);
    size_t never_len = never ? strlen(never) : 0;
    json_t *found = NULL;
    int count = 0;
    for (size_t i = 0; i < fl_store_audit_bundle_entry_count(b); i++) {
        size_t n = 0;
        const char *p = fl_store_audit_bundle_entry(b, i, &n);
        json_t *e = json_loadb(p, n, 0, NULL);
        assert_non_null(e);
        for (size_t k = 0; never && k + never_len <= n; k++)
            assert_false(memcmp(p + k, never, never_len) == 0);
        if (strcmp(json_string_value(json_object_get(e, "type")), "round") == 0 &&
            (!pop || strcmp(json_string_value(json_object_get(e, "population")), pop) == 0) &&
            (!rid || json_integer_value(json_object_get(e, "round_id")) == rid)) {
            count++;
            if (!found) {
                found = e;
                continue;
            }
        }
        json_decref(e);
    }
    assert_int_equal(count, 1);
    fl_store_audit_bundle_close(b);
    resp_free(&r);
    return found;
}

/* ---- the coordinator's aggregate hook ---- */

void sum_hook_capture(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                      uint32_t count, const float *delta, size_t dim) {
    struct sum_hook *h = user;
    h->calls++;
    h->round_id = round_id;
    h->vec_len = vec_len < 1024 ? vec_len : 1024;
    memcpy(h->sum, sum, h->vec_len * sizeof(uint64_t));
    h->count = count;
    memcpy(h->delta, delta, (dim < D ? dim : D) * sizeof(float));
}

/* ---- population, model ---- */

float base_w(int j) { return 0.25f * (float)(j % 7) - 0.5f; }

uint8_t *model_wb(const float *w, size_t n, const float b[2], size_t *len) {
    fl_safetensors_writer *wr = NULL;
    assert_int_equal(fl_safetensors_writer_create(&wr, NULL), FL_OK);
    uint64_t sw[1] = {n}, sb[1] = {2};
    assert_int_equal(fl_safetensors_writer_add(wr, "w", FL_DTYPE_F32, 1, sw, w, n * sizeof(float)),
                     FL_OK);
    assert_int_equal(fl_safetensors_writer_add(wr, "b", FL_DTYPE_F32, 1, sb, b, 2 * sizeof(float)),
                     FL_OK);
    assert_int_equal(fl_safetensors_writer_size(wr, len), FL_OK);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    assert_int_equal(fl_safetensors_writer_serialize(wr, buf, *len), FL_OK);
    fl_safetensors_writer_destroy(wr);
    return buf;
}

uint8_t *make_model(size_t *len) {
    float w[D], b[2] = {3.0f, -4.0f};
    for (int j = 0; j < D; j++)
        w[j] = base_w(j);
    return model_wb(w, D, b, len);
}

json_t *admin_round(struct fx *f, int64_t rid) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

void setup_population(struct fx *f, const struct popcfg *pc, char **tokens, int n) {
    setup_population_sel(f, pc, NULL, tokens, n);
}

void setup_devices(struct fx *f, const struct popcfg *pc, struct tc *c, int n) {
    setup_devices_sel(f, pc, NULL, c, n);
}

void setup_devices_sel(struct fx *f, const struct popcfg *pc, const struct popsel *sel,
                       struct tc *c, int n) {
    char **tok = calloc((size_t)n, sizeof(*tok));
    assert_non_null(tok);
    setup_population_sel(f, pc, sel, tok, n);
    memset(c, 0, (size_t)n * sizeof(*c));
    for (int i = 0; i < n; i++)
        c[i].tok = tok[i];
    free(tok);
}

void pop_model_start(struct fx *f, const char *name, const uint8_t *model, size_t len) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/models", name);
    struct resp r =
        http_req(f, "POST", path, ADMIN_TOKEN, "application/octet-stream", model, len, NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/start", name);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

void setup_population_sel(struct fx *f, const struct popcfg *pc, const struct popsel *sel,
                          char **tokens, int n) {
    char body[2048], priv[256] = "", gran[64] = "", drop[64] = "";
    int min_retry = sel && sel->min_retry_s ? sel->min_retry_s : 1;
    if (sel && sel->dropout_rate > 0)
        snprintf(drop, sizeof(drop), ",\"dropout_rate\":%.17g", sel->dropout_rate);
    double clip = sel && sel->clip_norm > 0 ? sel->clip_norm : 1.0;
    if (sel && sel->granularity > 0)
        snprintf(gran, sizeof(gran), ",\"granularity\":%.17g", sel->granularity);
    int max_retry = sel && sel->max_retry_s ? sel->max_retry_s : 60;
    bool dp = strcmp(pc->mode, "none") != 0;
    if (dp)
        snprintf(priv, sizeof(priv),
                 ",\"noise_multiplier\":1.0,\"delta\":1e-5,\"population_size\":1000,"
                 "\"epsilon_budget\":%g", pc->budget > 0 ? pc->budget : 1e9);
    snprintf(body, sizeof(body),
             "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":60,\"jitter_s\":0,\"min_retry_s\":%d,"
             "\"max_retry_s\":%d},"
             "\"deadlines_s\":{\"advertise\":30,\"share\":30,\"masked\":60,\"unmask\":30},"
             "\"update\":{\"tensors\":[\"w\"],\"weighting\":\"%s\",\"weight_cap\":50},"
             "\"strategy\":{\"name\":\"%s\"%s%s},"
             "\"secagg\":{\"enabled\":%s,\"neighbors\":%d,\"threshold_fraction\":0.5%s%s%s},"
             "\"privacy\":{\"mode\":\"%s\",\"clip_norm\":%.17g%s,\"modulus_bits\":%d%s}}",
             pc->name, pc->target, pc->min, min_retry, max_retry,
             pc->weighting ? pc->weighting : "uniform",
             pc->strategy ? pc->strategy : "fedavg", pc->strategy_extra ? "," : "",
             pc->strategy_extra ? pc->strategy_extra : "", pc->secagg ? "true" : "false",
             pc->neighbors, sel && sel->norm_proof ? ",\"norm_proof\":true" : "",
             sel && sel->reveal_seeds ? ",\"reveal_pair_seeds\":true" : "", drop, pc->mode,
             clip, gran, pc->bits ? pc->bits : 32, priv);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201)
        fprintf(stderr, "%s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    pop_model_start(f, pc->name, model, mlen);
    free(model);
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof(body), "{\"population\":\"%s\",\"region\":\"EU\"}", pc->name);
        r = http_json(f, "POST", "/v1/enroll", etok, body);
        assert_int_equal(r.status, 201);
        j = body_json(&r);
        tokens[i] = strdup(json_string_value(json_object_get(j, "client_token")));
        json_decref(j);
        resp_free(&r);
    }
    free(etok);
}

/* ---- devices ---- */

void parse_task(const struct resp *r, struct task *t) {
    json_t *j = body_json(r);
    json_t *up = json_object_get(j, "update"), *dp = json_object_get(j, "dp"),
           *sa = json_object_get(j, "secagg");
    memset(t, 0, sizeof(*t));
    t->rid = json_integer_value(json_object_get(j, "round_id"));
    t->model_version = json_integer_value(json_object_get(json_object_get(j, "model"), "version"));
    const char *kind = json_string_value(json_object_get(j, "kind"));
    snprintf(t->kind, sizeof(t->kind), "%s", kind ? kind : "");
    t->vec_len = (size_t)json_integer_value(json_object_get(up, "length"));
    t->dim = (size_t)json_integer_value(json_object_get(up, "dim"));
    const char *mode = json_string_value(json_object_get(dp, "mode"));
    t->mode = strcmp(mode, "central") == 0 ? 1 : strcmp(mode, "distributed") == 0 ? 2 : 0;
    t->clip = json_number_value(json_object_get(dp, "clip_norm"));
    t->gran = json_number_value(json_object_get(dp, "granularity"));
    t->beta = json_number_value(json_object_get(dp, "beta"));
    t->bits = (uint32_t)json_integer_value(json_object_get(dp, "modulus_bits"));
    if (t->mode == 2) {
        t->s2n = (uint64_t)json_integer_value(json_object_get(dp, "client_variance_num"));
        t->s2d = (uint64_t)json_integer_value(json_object_get(dp, "client_variance_den"));
        t->nmin = (uint32_t)json_integer_value(json_object_get(dp, "min_survivors"));
        size_t sl = 0;
        const char *seed =
            json_string_value(json_object_get(json_object_get(dp, "rotation"), "seed"));
        assert_int_equal(sodium_base642bin(t->rot_seed, 32, seed, strlen(seed), NULL, &sl, NULL,
                                           sodium_base64_VARIANT_ORIGINAL), 0);
        assert_int_equal(sl, 32);
    }
    static const char *dln[5] = {"advertise_unix_ms", "share_unix_ms", "masked_unix_ms",
                                 "consistency_unix_ms", "unmask_unix_ms"};
    for (int k = 0; k < 5; k++)
        t->dl[k] = json_integer_value(json_object_get(json_object_get(j, "deadlines"), dln[k]));
    t->secagg = json_is_true(json_object_get(sa, "enabled"));
    if (t->secagg) {
        t->index = (uint32_t)json_integer_value(json_object_get(sa, "client_index"));
        t->n = (uint32_t)json_integer_value(json_object_get(sa, "num_clients"));
        t->k = (uint32_t)json_integer_value(json_object_get(sa, "neighbors"));
        t->t = (uint32_t)json_integer_value(json_object_get(sa, "threshold"));
        assert_int_equal(json_integer_value(json_object_get(sa, "vector_length")), t->vec_len);
        json_t *np = json_object_get(sa, "norm_proof");
        t->norm_bits = (uint32_t)json_integer_value(json_object_get(np, "bits"));
        t->norm_dim = (uint32_t)json_integer_value(json_object_get(np, "dim"));
        t->norm_bound2 = (uint64_t)json_integer_value(json_object_get(np, "bound2"));
        t->norm_weight_max = (uint32_t)json_integer_value(json_object_get(np, "weight_max"));
        t->reveal_seeds = json_is_true(json_object_get(sa, "reveal_pair_seeds"));
        const char *sid = json_string_value(json_object_get(sa, "session_id"));
        size_t sl = 0;
        assert_non_null(sid);
        assert_int_equal(sodium_base642bin(t->session_id, 32, sid, strlen(sid), NULL, &sl, NULL,
                                           sodium_base64_VARIANT_ORIGINAL), 0);
        assert_int_equal(sl, 32);
    }
    const char *msha = json_string_value(json_object_get(json_object_get(j, "model"), "sha256"));
    if (msha) {
        size_t bl = 0;
        assert_int_equal(sodium_hex2bin(t->model_sha, 32, msha, strlen(msha), NULL, &bl, NULL), 0);
        assert_int_equal(bl, 32);
    }
    json_decref(j);
}

void task_secagg_context(const struct task *t, uint8_t out[32]) {
    static const char label[] = "flotilla/v1/secagg-context";
    uint8_t m[sizeof(label) + 64];
    memcpy(m, label, sizeof(label)); /* with its 0x00 */
    memcpy(m + sizeof(label), t->session_id, 32);
    memcpy(m + sizeof(label) + 32, t->model_sha, 32);
    crypto_hash_sha256(out, m, sizeof(m));
}

void encode(struct tc *c, int i) {
    struct task *t = &c->task;
    assert_int_equal(t->dim, D);
    for (int j = 0; j < D; j++)
        c->delta[j] = 0.01f * (float)(((i * 7 + j * 3) % 11) - 5);
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_os(&rng, NULL), FL_OK);
    uint64_t mask = t->bits >= 64 ? ~0ull : (1ull << t->bits) - 1;
    memset(c->words, 0, sizeof(c->words));
    if (t->mode == 2) {
        fl_dp_distributed_params p;
        fl_dp_distributed_params_init(&p);
        p.dim = D;
        p.clip = t->clip;
        p.granularity = t->gran;
        p.beta = t->beta;
        p.modulus_bits = t->bits;
        p.n_min = t->nmin;
        p.sigma2_num = t->s2n;
        p.sigma2_den = t->s2d;
        size_t dp = fl_dp_distributed_padded_dim(D);
        assert_int_equal(dp + 1, t->vec_len);
        assert_int_equal(fl_dp_distributed_encode(rng, c->words, dp, c->delta, &p, t->rot_seed,
                                                  NULL, NULL), FL_OK);
    } else {
        float scaled[D];
        double w = c->weight > 0 ? c->weight : 1;
        for (int j = 0; j < D; j++)
            scaled[j] = (float)(c->delta[j] * w);
        fl_dp_central_params p;
        fl_dp_central_params_init(&p);
        p.clip = t->clip * w;
        p.granularity = t->gran;
        p.beta = t->beta;
        int64_t q[D];
        assert_int_equal(fl_dp_central_encode(rng, q, scaled, D, &p, NULL, NULL), FL_OK);
        for (int j = 0; j < D; j++)
            c->words[j] = (uint64_t)q[j] & mask;
    }
    c->words[t->vec_len - 1] = c->weight > 0 ? (uint64_t)c->weight : 1;
    fl_dp_rng_destroy(rng);
}

void checkin_all(struct fx *f, struct tc *c, int n, int64_t *rid) {
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true},\"capabilities\":{\"secagg\":true}}";
    for (int i = 0; i < n; i++) {
        struct resp r = http_json(f, "POST", "/v1/checkin", c[i].tok, ok);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        if (strcmp(json_string_value(json_object_get(j, "status")), "selected") != 0)
            fprintf(stderr, "check-in: %s\n", r.body);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
        snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        *rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
        resp_free(&r);
    }
}

void fetch_tasks(struct fx *f, struct tc *c, int n, int64_t rid) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    for (int i = 0; i < n; i++) {
        struct resp r = http_req(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid);
        if (r.status != 200)
            fprintf(stderr, "task: %ld %s\n", r.status, r.body ? r.body : "");
        assert_int_equal(r.status, 200);
        parse_task(&r, &c[i].task);
        resp_free(&r);
        assert_int_equal(c[i].task.rid, rid);
        encode(&c[i], i);
    }
}

struct resp post_phase(struct fx *f, struct tc *c, int64_t rid, const char *phase,
                       const uint8_t *msg, size_t len) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s", (long long)rid, phase);
    return http_req(f, "POST", path, c->tok, "application/octet-stream", msg, len, c->pid);
}

struct resp get_result(struct fx *f, struct tc *c, int64_t rid, const char *phase, int wait) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s/result?wait=%d", (long long)rid,
             phase, wait);
    return http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
}

void secagg_clients_start(struct tc *c, int n, int64_t rid, const uint8_t **out,
                          size_t *out_len) {
    for (int i = 0; i < n; i++) {
        fl_secagg_config cfg;
        fl_secagg_config_init(&cfg);
        cfg.num_clients = c[i].task.n;
        cfg.dim = (uint32_t)c[i].task.vec_len;
        cfg.bits = c[i].task.bits;
        cfg.degree = c[i].task.k;
        cfg.threshold = c[i].task.t;
        cfg.norm_bits = c[i].task.norm_bits;
        cfg.norm_dim = c[i].task.norm_dim;
        cfg.norm_bound2 = c[i].task.norm_bound2;
        cfg.norm_tail_max = c[i].task.norm_weight_max;
        cfg.reveal_pair_seeds = c[i].task.reveal_seeds;
        assert_int_equal(fl_secagg_client_create(&c[i].sa, &cfg, (uint64_t)rid, c[i].task.index,
                                                 NULL, NULL), FL_OK);
        uint32_t x[1024];
        for (size_t j = 0; j < c[i].task.vec_len; j++)
            x[j] = (uint32_t)c[i].words[j];
        assert_int_equal(fl_secagg_client_set_input(c[i].sa, x, c[i].task.vec_len), FL_OK);
        assert_int_equal(fl_secagg_client_start(c[i].sa, &out[i], &out_len[i]), FL_OK);
    }
}

void secagg_phase_all(struct fx *f, struct tc *c, int n, int64_t rid, const char *phase,
                      const uint8_t **out, size_t *out_len) {
    for (int i = 0; i < n; i++) {
        struct resp r = post_phase(f, &c[i], rid, phase, out[i], out_len[i]);
        if (r.status != 202)
            fprintf(stderr, "post %s device %d: %ld %s\n", phase, i, r.status, r.body);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    for (int i = 0; i < n; i++) {
        struct resp r = get_result(f, &c[i], rid, phase, 10);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                 &out[i], &out_len[i]), FL_OK);
        resp_free(&r);
    }
}

json_t *secagg_unmask_all(struct fx *f, struct tc *c, int n, int64_t rid, const uint8_t **out,
                          size_t *out_len) {
    for (int i = 0; i < n; i++) {
        struct resp r = post_phase(f, &c[i], rid, "unmask", out[i], out_len[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    struct resp r = get_result(f, &c[0], rid, "unmask", 10);
    assert_int_equal(r.status, 200);
    json_t *o = body_json(&r);
    resp_free(&r);
    return o;
}

void secagg_clients_free(struct tc *c, int n) {
    for (int i = 0; i < n; i++) {
        fl_secagg_client_destroy(c[i].sa);
        c[i].sa = NULL;
    }
}

json_t *run_secagg(struct fx *f, struct tc *c, int n, int64_t rid) {
    static const char *phases[4] = {"advertise", "share", "masked", "unmask"};
    static const int drops[4] = {DROP_ADVERTISE, DROP_SHARE, DROP_MASKED, DROP_UNMASK};
    const uint8_t *out[NMAX];
    size_t out_len[NMAX];
    bool alive[NMAX];
    secagg_clients_start(c, n, rid, out, out_len);
    for (int i = 0; i < n; i++)
        alive[i] = true;
    json_t *outcome = NULL;
    for (int ph = 0; ph < 4; ph++) {
        bool skipped = false;
        for (int i = 0; i < n; i++) {
            if (!alive[i])
                continue;
            if (c[i].drop == drops[ph]) {
                alive[i] = false;
                skipped = true;
                continue;
            }
            struct resp r = post_phase(f, &c[i], rid, phases[ph], out[i], out_len[i]);
            if (r.status != 202)
                fprintf(stderr, "post %s client %d: %ld %s\n", phases[ph], i, r.status, r.body);
            assert_int_equal(r.status, 202);
            resp_free(&r);
        }
        if (skipped) { /* the phase closes at its deadline */
            static const int dlk[4] = {0, 1, 2, 4};
            int64_t to = c[0].task.dl[dlk[ph]] + 1;
            fx_advance(f, to - atomic_load(&f->now_ms));
        }
        for (int i = 0; i < n; i++) {
            if (!alive[i])
                continue;
            struct resp r = get_result(f, &c[i], rid, phases[ph], 10);
            if (ph == 3) {
                if (r.status == 200 && !outcome)
                    outcome = body_json(&r);
                resp_free(&r);
                continue;
            }
            if (r.status == 410) { /* the round failed: the outcome says why */
                resp_free(&r);
                alive[i] = false;
                continue;
            }
            assert_int_equal(r.status, 200);
            fl_status st = fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                   &out[i], &out_len[i]);
            if (st != FL_OK)
                fprintf(stderr, "client %d handle %s: %s\n", i, phases[ph],
                        fl_secagg_client_errmsg(c[i].sa));
            assert_int_equal(st, FL_OK);
            resp_free(&r);
        }
    }
    secagg_clients_free(c, n);
    return outcome;
}

json_t *round_status(struct fx *f, struct tc *c, int64_t rid) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)rid);
    struct resp r = http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

void fetch_model(struct fx *f, struct tc *c, const char *pop, int64_t v, float *w, float *b) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/models/%s/%lld", pop, (long long)v);
    struct resp r = http_req(f, "GET", path, c->tok, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    char sigb[128];
    assert_non_null(header_in(&r, "Flotilla-Signature", sigb, sizeof(sigb)));
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, r.body, r.len), FL_OK);
    fl_tensor_view tv;
    assert_int_equal(fl_safetensors_find(st, &tv, "w"), FL_OK);
    memcpy(w, tv.data, D * sizeof(float));
    assert_int_equal(fl_safetensors_find(st, &tv, "b"), FL_OK);
    memcpy(b, tv.data, 2 * sizeof(float));
    fl_safetensors_destroy(st);
    resp_free(&r);
}

void expected_fedavg(const struct tc *c, int n, const float *base, float *w_out) {
    uint64_t mod = (uint64_t)1 << c[0].task.bits, half = mod >> 1;
    uint64_t sum[D] = {0};
    uint32_t count = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].drop != DROP_NONE && c[i].drop != DROP_UNMASK)
            continue;
        count++;
        for (int j = 0; j < D; j++)
            sum[j] = (sum[j] + c[i].words[j]) & (mod - 1);
    }
    assert_true(count > 0);
    /* The coordinator's arithmetic, step by step (aggregate.c): centred lift, times gamma
     * over the count in double, rounded to float; then w + 1.0 * delta rounded to float. */
    for (int j = 0; j < D; j++) {
        int64_t z = sum[j] >= half ? -(int64_t)(mod - sum[j]) : (int64_t)sum[j];
        float d = (float)((double)z * c[0].task.gran / (double)count);
        w_out[j] = (float)(base[j] + 1.0 * (double)d);
    }
}

void clients_free(struct tc *c, int n) {
    for (int i = 0; i < n; i++) {
        free(c[i].tok);
        c[i].tok = NULL;
    }
}

/* ---- added helpers ---- */

size_t plain_update_body(uint8_t *out, int64_t rid, const uint64_t *words, size_t L, size_t wb) {
    memcpy(out, "FLUP", 4);
    for (int b = 0; b < 4; b++)
        out[4 + b] = (uint8_t)(1u >> (8 * b));
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)rid >> (8 * b));
    for (size_t j = 0; j < L; j++)
        for (size_t b = 0; b < wb; b++)
            out[16 + j * wb + b] = (uint8_t)(words[j] >> (8 * b));
    return 16 + L * wb;
}

void post_updates(struct fx *f, struct tc *c, int n, int64_t rid) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[16 + 4 * 1024];
    for (int i = 0; i < n; i++) {
        assert_true(c[i].task.vec_len <= 1024);
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        struct resp r =
            http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        if (r.status != 202)
            fprintf(stderr, "update %d: %ld %s\n", i, r.status, r.body ? r.body : "");
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
}
