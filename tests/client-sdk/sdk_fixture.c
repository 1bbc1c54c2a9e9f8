/* Shared code of the SDK's round tests (see sdk_fixture.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "fl_test_time.h"
#include "flotilla/secagg.h"
#include "sdk_fixture.h"

/* ---- coordinator ---- */

static int64_t real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sfx_clock(void *user) {
    struct sfx *f = user;
    if (f->real_clock)
        return real_ms() + atomic_load(&f->offset_ms);
    return atomic_load(&f->now_ms);
}

void sfx_advance(struct sfx *f, int64_t ms) {
    if (f->real_clock)
        atomic_fetch_add(&f->offset_ms, ms);
    else
        atomic_fetch_add(&f->now_ms, ms);
    fl_coord_tick(f->co);
}

static void coord_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (level >= FL_LOG_WARN && getenv("FL_TEST_LOG"))
        fprintf(stderr, "  [coordinator] %s\n", msg);
    else if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  [coordinator] %s\n", msg);
}

static void on_sum(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                   uint32_t count, const float *delta, size_t dim) {
    struct sfx *f = user;
    pthread_mutex_lock(&f->lock);
    struct sfx_sum *h = &f->sum;
    h->calls++;
    h->round_id = round_id;
    h->vec_len = vec_len < SFX_MAX_VEC ? vec_len : SFX_MAX_VEC;
    memcpy(h->sum, sum, h->vec_len * sizeof(uint64_t));
    h->count = count;
    h->dim = dim < SFX_MAX_VEC ? dim : SFX_MAX_VEC;
    memcpy(h->delta, delta, h->dim * sizeof(float));
    pthread_mutex_unlock(&f->lock);
}

static void *tick_main(void *arg) {
    struct sfx *f = arg;
    while (!atomic_load(&f->stop)) {
        fl_coord_tick(f->co);
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

struct sfx *sfx_start(bool real_clock) {
    struct sfx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/fl-sdk-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof(f->db), "%s/coord.db", f->dir);
    f->real_clock = real_clock;
    atomic_store(&f->now_ms, 1767225600000);
    pthread_mutex_init(&f->lock, NULL);
    fl_coord_config cc;
    fl_coord_config_init(&cc);
    cc.port = 0;
    cc.threads = 4;
    cc.db_path = f->db;
    cc.has_admin_token = 1;
    crypto_hash_sha256(cc.admin_token_sha256, (const uint8_t *)SFX_ADMIN, strlen(SFX_ADMIN));
    cc.clock = sfx_clock;
    cc.clock_user = f;
    cc.logger.fn = coord_log;
    cc.logger.min_level = FL_LOG_DEBUG;
    cc.limits.per_ip_connections = 0;
    char err[256];
    if (fl_coord_create(&f->co, &cc, err, sizeof(err)) != FL_OK)
        fprintf(stderr, "coordinator: %s\n", err);
    assert_non_null(f->co);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
    snprintf(f->base_url, sizeof(f->base_url), "http://127.0.0.1:%u", f->port);
    char kid[FL_COORD_KEY_ID_BYTES];
    fl_coord_public_key(f->co, f->pk, kid);
    fl__coord_debug_hook_set(f->co, on_sum, f);
    atomic_store(&f->stop, false);
    assert_int_equal(pthread_create(&f->ticker, NULL, tick_main, f), 0);
    return f;
}

void sfx_stop(struct sfx *f) {
    if (!f)
        return;
    atomic_store(&f->stop, true);
    pthread_join(f->ticker, NULL);
    fl_coord_destroy(f->co);
    static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
    char p[200];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s%s", f->db, tails[i]);
        unlink(p);
    }
    rmdir(f->dir);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

/* ---- HTTP helpers ---- */

struct buf {
    uint8_t *p;
    size_t len;
};

static size_t sink(char *p, size_t sz, size_t n, void *u) {
    struct buf *b = u;
    uint8_t *nb = realloc(b->p, b->len + sz * n + 1);
    if (!nb)
        return 0;
    memcpy(nb + b->len, p, sz * n);
    b->p = nb;
    b->len += sz * n;
    b->p[b->len] = 0;
    return sz * n;
}

static long http(struct sfx *f, const char *method, const char *path, const char *token,
                 const char *ctype, const void *body, size_t len, struct buf *out) {
    CURL *e = curl_easy_init();
    assert_non_null(e);
    char url[512], auth[300], ct[96];
    snprintf(url, sizeof(url), "%s%s", f->base_url, path);
    struct curl_slist *h = NULL;
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    h = curl_slist_append(h, auth);
    if (ctype) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
        h = curl_slist_append(h, ct);
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_TIMEOUT, fl_test_scaled(60));
    CURLcode rc = curl_easy_perform(e);
    if (rc != CURLE_OK)
        fprintf(stderr, "curl %s %s: %s\n", method, path, curl_easy_strerror(rc));
    assert_int_equal(rc, CURLE_OK);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return code;
}

long sfx_admin(struct sfx *f, const char *method, const char *path, const char *ctype,
               const void *body, size_t len, char *out, size_t cap) {
    struct buf b = {0};
    long code = http(f, method, path, SFX_ADMIN, ctype, body, len, &b);
    if (out && cap) {
        snprintf(out, cap, "%s", b.p ? (const char *)b.p : "");
    }
    free(b.p);
    return code;
}

long sfx_get(struct sfx *f, const char *path, const char *token, uint8_t **body, size_t *len) {
    struct buf b = {0};
    long code = http(f, "GET", path, token, NULL, NULL, 0, &b);
    *body = b.p;
    *len = b.len;
    return code;
}

void sfx_population(struct sfx *f, const char *json, const uint8_t *model, size_t mlen,
                    char *etok, size_t cap) {
    char out[16384], path[160], name[80];
    long code = sfx_admin(f, "POST", "/v1/admin/populations", "application/json", json,
                          strlen(json), out, sizeof(out));
    if (code != 201)
        fprintf(stderr, "create population: %ld %s\n", code, out);
    assert_int_equal(code, 201);
    const char *et = strstr(out, "\"enrollment_token\":\"");
    assert_non_null(et);
    snprintf(etok, cap, "%.*s", (int)strcspn(et + 20, "\""), et + 20);
    const char *nm = strstr(json, "\"name\":\"");
    assert_non_null(nm);
    snprintf(name, sizeof(name), "%.*s", (int)strcspn(nm + 8, "\""), nm + 8);
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/models", name);
    code = sfx_admin(f, "POST", path, "application/octet-stream", model, mlen, out, sizeof(out));
    if (code != 201)
        fprintf(stderr, "upload model: %ld %s\n", code, out);
    assert_int_equal(code, 201);
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/start", name);
    assert_int_equal(sfx_admin(f, "POST", path, "application/json", NULL, 0, out, sizeof(out)),
                     200);
}

/* ---- model and data ---- */

uint8_t *sfx_model(size_t *len) {
    uint32_t s[] = {SFX_IN, SFX_HID, SFX_CLASSES};
    assert_int_equal(fl_client_model_init(NULL, 0, len, s, 3, 5, NULL), FL_ERR_TOO_LARGE);
    uint8_t *m = malloc(*len);
    assert_non_null(m);
    assert_int_equal(fl_client_model_init(m, *len, len, s, 3, 5, NULL), FL_OK);
    return m;
}

void sfx_example(float *x, int32_t *y, int k, int i) {
    *y = (i + k) % SFX_CLASSES;
    for (int j = 0; j < SFX_IN; j++)
        x[j] = 0.000123456f * (float)(k * 1000 + i * 37 + j + 1) +
               (j % SFX_CLASSES == *y ? 1.5f : 0.f);
}

/* ---- devices ---- */

static void dev_log(void *u, fl_log_level lv, const char *msg) {
    if (lv == FL_LOG_WARN && strstr(msg, "OPENBLAS_CORETYPE="))
        ((struct sdev *)u)->blas_warnings++;
    if (getenv("FL_TEST_LOG"))
        fprintf(stderr, "  [dev %d] %s\n", ((struct sdev *)u)->k, msg);
}

static void on_update(void *user, int64_t round_id, const float *delta, size_t d,
                      const void *words, size_t len, size_t wb) {
    struct sdev *dv = user;
    struct sfx_update *u = &dv->up;
    u->calls++;
    u->round_id = round_id;
    u->d = d < SFX_MAX_VEC ? d : SFX_MAX_VEC;
    u->len = len < SFX_MAX_VEC ? len : SFX_MAX_VEC;
    u->wb = wb;
    if (delta)
        memcpy(u->delta, delta, u->d * sizeof(float));
    for (size_t i = 0; i < u->len; i++)
        u->words[i] = wb == 4 ? ((const uint32_t *)words)[i] : ((const uint64_t *)words)[i];
}

fl_status sdev_open(struct sdev *d, struct sfx *f, int k, const struct sdev_opts *o) {
    return sdev_open_identity(d, f, k, o, NULL);
}

fl_status sdev_open_identity(struct sdev *d, struct sfx *f, int k, const struct sdev_opts *o,
                             const struct sdev_identity *identity) {
    memset(d, 0, sizeof(*d));
    d->k = k;
    d->max_rounds = 1;
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = SFX_IN;
    sc.allocator = o->alloc;
    sc.clock = sfx_clock;
    sc.clock_user = f;
    fl_status rc = fl_client_store_open(&d->store, &sc, NULL, 0);
    for (int i = 0; i < o->n_examples && rc == FL_OK; i++) {
        float x[SFX_IN];
        int32_t y;
        sfx_example(x, &y, k, i);
        rc = fl_client_store_add(d->store, x, SFX_IN, y);
    }
    if (rc != FL_OK)
        return rc;
    fl_client_curl_config tc;
    fl_client_curl_config_init(&tc);
    tc.base_url = f->base_url;
    tc.allocator = o->alloc;
    char err[256];
    rc = fl_client_curl_create(&d->curl, &tc, err, sizeof(err));
    if (rc != FL_OK)
        return rc;
    fl_client_transport inner;
    assert_int_equal(fl_client_curl_transport(d->curl, &inner), FL_OK);
    assert_int_equal(sim_ft_create(&d->ft, &inner, sfx_clock, f), FL_OK);
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    cfg.allocator = o->alloc;
    cfg.logger.fn = dev_log;
    cfg.logger.user = d;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.population = o->population;
    cfg.region = "EU";
    memcpy(cfg.coordinator_key, o->pinned ? o->pinned : f->pk, 32);
    cfg.has_coordinator_key = 1;
    cfg.enrollment_token = o->etok;
    cfg.client_token = o->client_token;
    sim_ft_transport(d->ft, &cfg.transport);
    cfg.store = d->store;
    cfg.clock = sfx_clock;
    cfg.clock_user = f;
    cfg.seed = (uint64_t)k + 1;
    cfg.backoff_initial_ms = 200;
    cfg.backoff_max_ms = 2000;
    cfg.long_poll_s = o->long_poll_s;
    if (o->retry_timeout_none)
        cfg.retry_timeout_ms = 0;
    else if (o->retry_timeout_ms > 0)
        cfg.retry_timeout_ms = (uint64_t)o->retry_timeout_ms;
    if (o->wrap)
        o->wrap(&cfg.transport, o->wrap_user);
    if (identity) {
        cfg.has_secagg_identity = 1;
        memcpy(cfg.secagg_signing_key, identity->signing_key, 64);
        memcpy(cfg.secagg_device_id, identity->device_id, 32);
        memcpy(cfg.secagg_cert, identity->cert, 64);
        memcpy(cfg.secagg_authority_key, identity->authority_key, 32);
    }
    rc = fl_client_create(&d->c, &cfg, err, sizeof(err));
    if (rc != FL_OK && rc != FL_ERR_NOMEM)
        fprintf(stderr, "device %d: %s\n", k, err);
    if (rc != FL_OK)
        return rc;
    fl__client_debug_update_hook_set(d->c, on_update, d);
    fl_client_eligibility e = {sizeof(e), 1, 1, 1, 80};
    assert_int_equal(fl_client_set_eligibility(d->c, &e), FL_OK);
    return FL_OK;
}

void sdev_close(struct sdev *d) {
    fl_client_destroy(d->c);
    sim_ft_destroy(d->ft);
    fl_client_curl_destroy(d->curl);
    fl_client_store_close(d->store);
    memset(d, 0, sizeof(*d));
}

void sdev_stats(const struct sdev *d, fl_client_stats *cs) {
    memset(cs, 0, sizeof(*cs));
    cs->struct_size = sizeof(*cs);
    assert_int_equal(fl_client_stats_get(d->c, cs), FL_OK);
}

int sdev_drive(struct sfx *f, struct sdev *d, int n, bool (*done)(void *), void *user,
               int max_passes, int64_t step_ms) {
    int pass;
    for (pass = 0; pass < max_passes; pass++) {
        if (done && done(user))
            break;
        int64_t earliest = INT64_MAX;
        for (int i = 0; i < n; i++) {
            if (d[i].off || !d[i].c)
                continue;
            if (d[i].max_rounds) {
                fl_client_stats cs;
                sdev_stats(&d[i], &cs);
                if (cs.rounds_completed + cs.rounds_failed >= (uint64_t)d[i].max_rounds)
                    continue;
            }
            int64_t next = 0;
            fl_status rc = fl_client_step(d[i].c, &next);
            if (rc != FL_OK)
                fprintf(stderr, "device %d step: %s (%s)\n", d[i].k, fl_status_name(rc),
                        fl_client_errmsg(d[i].c));
            assert_int_equal(rc, FL_OK);
            earliest = next < earliest ? next : earliest;
        }
        if (!f->real_clock) {
            int64_t now = atomic_load(&f->now_ms);
            int64_t to = earliest > now + step_ms ? earliest : now + step_ms;
            if (earliest == INT64_MAX)
                to = now + step_ms;
            sfx_advance(f, to - now);
        }
    }
    return pass;
}

bool sfx_aggregated(void *user) {
    struct sfx *f = user;
    pthread_mutex_lock(&f->lock);
    bool r = f->sum.calls > 0;
    pthread_mutex_unlock(&f->lock);
    return r;
}

bool sdev_all_idle(const struct sdev *d, int n) {
    for (int i = 0; i < n; i++) {
        if (d[i].off)
            continue;
        fl_client_stats cs;
        sdev_stats(&d[i], &cs);
        if (cs.state != FL_CLIENT_STATE_IDLE || cs.rounds_completed + cs.rounds_failed == 0)
            return false;
    }
    return true;
}

/* sdev_round_vanish's done(): aggregated and every device idle again. */
struct sdev_set {
    struct sfx *f;
    struct sdev *d;
    int n;
};

static bool sdev_set_idle(void *u) {
    struct sdev_set *s = u;
    return sfx_aggregated(s->f) && sdev_all_idle(s->d, s->n);
}

void sdev_round_vanish(struct sfx *f, struct sdev *d, int n, const char *vanish_phase,
                       bool *in) {
    for (int i = 0; i < n; i++)
        in[i] = true;
    if (vanish_phase) {
        sim_ft_rule r = {"POST", vanish_phase, 0, -1, SIM_FT_DROP_REQUEST};
        assert_int_equal(sim_ft_add_rule(d[n - 1].ft, &r), FL_OK);
        in[n - 1] = false;
    }
    int passes = sdev_drive(f, d, n, sfx_aggregated, f, 800, 200);
    if (passes >= 800)
        for (int i = 0; i < n; i++)
            fprintf(stderr, "device %d: %s\n", i, fl_client_errmsg(d[i].c));
    assert_true(passes < 800);
    if (vanish_phase)
        d[n - 1].off = true;
    struct sdev_set s = {f, d, n};
    assert_true(sdev_drive(f, d, n, sdev_set_idle, &s, 400, 200) < 400);
}

void sfx_check_sum(struct sfx *f, const struct sdev *d, int n, const bool *in,
                   bool uniform_weights) {
    pthread_mutex_lock(&f->lock);
    struct sfx_sum h = f->sum;
    pthread_mutex_unlock(&f->lock);
    assert_int_equal(h.calls, 1);
    static uint64_t expect[SFX_MAX_VEC];
    memset(expect, 0, sizeof(expect));
    uint32_t count = 0;
    size_t L = 0;
    for (int i = 0; i < n; i++) {
        if (!in[i])
            continue;
        const struct sfx_update *u = &d[i].up;
        assert_int_equal(u->calls, 1);
        assert_int_equal(u->round_id, h.round_id);
        L = u->len;
        count++;
        for (size_t j = 0; j < L; j++)
            expect[j] = (expect[j] + u->words[j]) & 0xffffffffull;
    }
    assert_true(L > 1);
    assert_int_equal(h.count, count);
    assert_int_equal(h.vec_len, L);
    assert_memory_equal(h.sum, expect, L * sizeof(uint64_t)); /* bit for bit */
    if (uniform_weights)
        assert_int_equal(h.sum[L - 1], count);
}

/* ---- secagg's active mode ---- */

void sfx_active_pop_json(char *out, size_t cap, const char *name, int target, int min,
                         const uint8_t auth_vk[32], int dl, const char *extra) {
    char hex[65];
    sodium_bin2hex(hex, sizeof(hex), auth_vk, 32);
    snprintf(out, cap,
             "{\"name\":\"%s\",\"allowed_regions\":[\"EU\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":1,"
             "\"max_retry_s\":60},"
             "\"deadlines_s\":{\"advertise\":%d,\"share\":%d,\"masked\":%d,\"consistency\":%d,"
             "\"unmask\":%d},"
             "\"training\":{\"epochs\":2,\"batch_size\":8,\"learning_rate\":0.1,"
             "\"max_examples\":100},"
             "\"update\":{\"tensors\":[\"fc1.weight\",\"fc1.bias\",\"fc2.weight\",\"fc2.bias\"],"
             "\"weighting\":\"uniform\"},"
             "\"strategy\":{\"name\":\"fedavg\"},"
             "\"secagg\":{\"enabled\":true,\"threshold_fraction\":0.5,"
             "\"consistency_check\":true,\"authority_key\":\"%s\"%s},"
             "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0}}",
             name, target, min, dl, dl, dl, dl, dl, hex, extra ? extra : "");
}

void sdev_identity_make(struct sdev_identity *id, const uint8_t auth_sk[64],
                        const uint8_t pinned[32], const char *device_id) {
    uint8_t vk[32];
    memset(id, 0, sizeof(*id));
    assert_int_equal(fl_client_identity_keygen(vk, id->signing_key), FL_OK);
    snprintf((char *)id->device_id, sizeof(id->device_id), "%s", device_id);
    assert_int_equal(fl_secagg_cert_issue_device(id->cert, auth_sk, id->device_id, vk,
                                                 FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
    memcpy(id->authority_key, pinned, 32);
}
