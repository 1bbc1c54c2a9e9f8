/* Allocation failures inside the coordinator (house style 25: the OOM walk). The coordinator
 * is created with a failing allocator (fl_coord_config.allocator; the coordinator's own
 * memory, storage's and the safetensors/dp calls go through it) and every request of a
 * scripted session is walked: the k-th allocation from the request's start fails, for
 * k = 1, 2, ... until the request completes without a failure. Each failed attempt must
 * answer the request's normal status or a 5xx (never a 4xx that would blame the client, never
 * a crash), and a 5xx must leave the database unchanged (except when the reply itself could
 * not be built after the change committed). A second walk fails the k-th
 * allocation of the aggregation (armed before the last update of a round, FedAdam so the
 * optimiser state is built too): the round must then end abandoned without a model, or
 * completed with the exact model. After destroy, every block the allocator handed out has
 * been returned. Checked under ASan in CI. */
#include <math.h>
#include <sodium.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"

/* ---- a thread-safe failing allocator ---- */

struct oom {
    pthread_mutex_t mu;
    long calls;   /* allocations asked for */
    long fail_at; /* this call fails (0 = none) */
    long fired;   /* failures handed out since the last arm */
    long live;    /* blocks not returned */
};

static struct oom g_oom = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *oom_alloc(void *u, size_t n) {
    struct oom *o = u;
    pthread_mutex_lock(&o->mu);
    o->calls++;
    bool fail = o->fail_at > 0 && o->calls == o->fail_at;
    if (fail)
        o->fired++;
    pthread_mutex_unlock(&o->mu);
    if (fail)
        return NULL;
    size_t *p = malloc(n + 2 * sizeof(size_t));
    if (!p)
        return NULL;
    p[0] = n;
    pthread_mutex_lock(&o->mu);
    o->live++;
    pthread_mutex_unlock(&o->mu);
    return p + 2;
}

static void oom_free(void *u, void *ptr, size_t n) {
    struct oom *o = u;
    (void)n;
    if (!ptr)
        return;
    free((size_t *)ptr - 2);
    pthread_mutex_lock(&o->mu);
    o->live--;
    pthread_mutex_unlock(&o->mu);
}

static void arm(long k) {
    pthread_mutex_lock(&g_oom.mu);
    g_oom.fail_at = g_oom.calls + k;
    g_oom.fired = 0;
    pthread_mutex_unlock(&g_oom.mu);
}

static long disarm(void) {
    pthread_mutex_lock(&g_oom.mu);
    g_oom.fail_at = 0;
    long fired = g_oom.fired;
    pthread_mutex_unlock(&g_oom.mu);
    return fired;
}

/* ---- fixture: the in-process coordinator on the failing allocator, ticked by the test ---- */

static fl_allocator g_alloc = {sizeof(fl_allocator), oom_alloc, NULL, oom_free, &g_oom};

static int64_t clock_of(void *user) {
    return atomic_load(&((struct fx *)user)->now_ms);
}

static void oom_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  [coordinator %d] %s\n", (int)level, msg);
}

static void start(struct fx *f) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = 1;
    cfg.db_path = f->db;
    cfg.allocator = &g_alloc;
    cfg.logger.fn = oom_log;
    cfg.logger.min_level = FL_LOG_INFO;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.clock = clock_of;
    cfg.clock_user = f;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 5, sizeof(cfg.signing_seed));
    char err[256];
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_non_null(f->co);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
}

static int setup(void **state) {
    struct fx *f = fx_new();
    start(f);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fx *f = *state;
    disarm();
    fl_coord_destroy(f->co);
    f->co = NULL;
    pthread_mutex_lock(&g_oom.mu);
    long live = g_oom.live;
    pthread_mutex_unlock(&g_oom.mu);
    if (live != 0)
        fprintf(stderr, "%ld block(s) of the coordinator's allocator not returned\n", live);
    assert_int_equal(live, 0);
    fx_free(f);
    return 0;
}

/* ---- the request walk ---- */

static void fingerprint(struct fx *f, char *out, size_t n) {
    snprintf(out, n, "%lld/%lld/%lld/%lld/%lld/%lld/%lld",
             (long long)db_int(f, "SELECT count(*) FROM populations"),
             (long long)db_int(f, "SELECT count(*) FROM clients"),
             (long long)db_int(f, "SELECT count(*) FROM models"),
             (long long)db_int(f, "SELECT count(*) FROM rounds"),
             (long long)db_int(f, "SELECT count(*) FROM tags"),
             (long long)db_int(f, "SELECT coalesce(sum(state),0) FROM populations"),
             (long long)db_int(f, "SELECT coalesce(sum(length(config_json)),0) FROM populations"));
}

/* One request like http_req, but a connection the server drops (out of memory when it
 * accepted it) comes back as status 0 instead of failing the test. */
static struct resp req_soft(struct fx *f, const char *method, const char *path,
                            const char *token, const char *ct, const void *body, size_t len,
                            const char *pid) {
    struct resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct curl_slist *h = http_prepare(f, c, method, path, token, ct, body, len, pid, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, fl_test_scaled(30));
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    else
        r.status = 0;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

/* Another status that counts as success in a walk (0: none): 200 for a message posted again
 * after an attempt that got through despite its failure (an idempotent replay). */
static long g_want_alt;

typedef struct resp (*send_fn)(struct fx *f, void *arg, long attempt);
typedef void (*prepare_fn)(struct fx *f, void *arg);

/* Walks one request: fails its k-th allocation for k = 1, 2, ... until an attempt runs with
 * no failure; returns that last answer (its normal status, want). A failure may be absorbed
 * (the request succeeds anyway, e.g. a connection without its watchdog record); otherwise
 * the answer is a 5xx, or no answer at all when the connection itself could not be taken,
 * and the database is unchanged. send makes attempt-specific requests where a repeat would
 * not be the same request (names, fresh clients). */
static struct resp walk_prep(struct fx *f, const char *what, prepare_fn prepare, send_fn send,
                             void *arg, long want) {
    char before[256], after[256];
    for (long k = 1;; k++) {
        assert_true(k < 3000);
        if (prepare)
            prepare(f, arg);
        fingerprint(f, before, sizeof(before));
        arm(k);
        struct resp r = send(f, arg, k);
        long fired = disarm();
        if (!fired) {
            if (getenv("FL_TEST_VERBOSE"))
                fprintf(stderr, "%s: %ld allocation(s) walked\n", what, k - 1);
            if (r.status != want && !(g_want_alt && r.status == g_want_alt))
                fprintf(stderr, "%s: %ld (want %ld) %s\n", what, r.status, want,
                        r.body ? r.body : "");
            assert_true(r.status == want || (g_want_alt && r.status == g_want_alt));
            return r;
        }
        if (g_want_alt && r.status == g_want_alt) {
            resp_free(&r);
            continue;
        }
        if (r.status != want && r.status < 500 && r.status != 0)
            fprintf(stderr, "%s, allocation %ld failed: %ld %s\n", what, k, r.status,
                    r.body ? r.body : "");
        /* 0: the connection was dropped as it was accepted. */
        assert_true(r.status == want || r.status >= 500 || r.status == 0);
        /* The one 5xx allowed after a change committed: the reply itself could not be
         * built (the HTTP layer's fixed 500 "out of memory"; a retry then sees the change). */
        bool reply_lost = r.status == 500 && r.body &&
                          strstr(r.body, "\"message\":\"out of memory\"}") != NULL;
        if (r.status != want && !reply_lost) {
            fingerprint(f, after, sizeof(after));
            if (strcmp(before, after) != 0)
                fprintf(stderr, "%s, allocation %ld: %s -> %s (%ld %s)\n", what, k, before, after,
                        r.status, r.body ? r.body : "");
            assert_string_equal(before, after);
        }
        resp_free(&r);
    }
}

static struct resp walk(struct fx *f, const char *what, send_fn send, void *arg, long want) {
    return walk_prep(f, what, NULL, send, arg, want);
}

struct call {
    const char *method, *path, *token, *ct;
    const void *body;
    size_t len;
    const char *pid;
};

static struct resp send_call(struct fx *f, void *arg, long attempt) {
    struct call *c = arg;
    (void)attempt;
    return req_soft(f, c->method, c->path, c->token, c->ct, c->body, c->len, c->pid);
}

static struct resp walk_call(struct fx *f, const char *method, const char *path,
                             const char *token, const char *ct, const void *body, size_t len,
                             const char *pid, long want) {
    struct call c = {method, path, token, ct, body, len, pid};
    char what[256];
    snprintf(what, sizeof(what), "%s %s", method, path);
    return walk(f, what, send_call, &c, want);
}

static char *json_str(struct resp *r, const char *key) {
    json_t *j = body_json(r);
    char *s = strdup(json_string_value(json_object_get(j, key)));
    json_decref(j);
    return s;
}

#define POPF                                                                                     \
    "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],\"selection\":{\"target\":3,"                  \
    "\"over_selection\":1.0,\"min_participants\":3,\"require\":[],\"forming_s\":60,"             \
    "\"jitter_s\":0,\"min_retry_s\":1,\"max_retry_s\":60},\"update\":{\"tensors\":[\"w\"]},"    \
    "\"strategy\":{\"name\":\"fedadam\",\"server_lr\":0.1},\"secagg\":{\"enabled\":false},"      \
    "\"privacy\":{\"mode\":\"none\",\"modulus_bits\":32}}"

/* Population creation under a fresh name per attempt ("om" for the last one). */
static struct resp send_create(struct fx *f, void *arg, long attempt) {
    (void)arg;
    char name[32], body[1024];
    snprintf(name, sizeof(name), "om%ld", attempt);
    snprintf(body, sizeof(body), POPF, name);
    return req_soft(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, "application/json", body,
                    strlen(body), NULL);
}

/* Erasure of a client enrolled (without failures) before each attempt. */
struct erase_arg {
    const char *etok, *pop;
    char path[96];
};

static void prepare_erase(struct fx *f, void *arg) {
    struct erase_arg *e = arg;
    char body[128];
    snprintf(body, sizeof(body), "{\"population\":\"%s\",\"region\":\"EU\"}", e->pop);
    struct resp r = http_json(f, "POST", "/v1/enroll", e->etok, body);
    assert_int_equal(r.status, 201);
    char *tok = json_str(&r, "client_token");
    resp_free(&r);
    snprintf(e->path, sizeof(e->path), "/v1/admin/clients/%.16s/erase", tok + 4);
    free(tok);
}

static struct resp send_erase(struct fx *f, void *arg, long attempt) {
    struct erase_arg *e = arg;
    (void)attempt;
    return req_soft(f, "POST", e->path, ADMIN_TOKEN, "application/json", NULL, 0, NULL);
}

static void after_pace(struct fx *f, void *arg) {
    (void)arg;
    atomic_fetch_add(&f->now_ms, 61 * 1000);
}

static const char *const CHECKIN = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                                   "\"unmetered\":true,\"idle\":true}}";

/* Every request of a population's life, each walked. */
static void test_request_walk(void **state) {
    struct fx *f = *state;
    struct resp r = walk(f, "create", send_create, NULL, 201);
    char *etok = json_str(&r, "enrollment_token");
    json_t *j = body_json(&r);
    char pop[32];
    snprintf(pop, sizeof(pop), "%s",
             json_string_value(json_object_get(json_object_get(j, "population"), "name")));
    json_decref(j);
    resp_free(&r);
    char base[96], path[160];
    snprintf(base, sizeof(base), "/v1/admin/populations/%s", pop);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    snprintf(path, sizeof(path), "%s/models", base);
    r = walk_call(f, "POST", path, ADMIN_TOKEN, "application/octet-stream", model, mlen, NULL,
                  201);
    json_t *mj = body_json(&r);
    int64_t mv = json_integer_value(json_object_get(mj, "version"));
    json_decref(mj);
    resp_free(&r);
    free(model);
    snprintf(path, sizeof(path), "%s/start", base);
    r = walk_call(f, "POST", path, ADMIN_TOKEN, "application/json", NULL, 0, NULL, 200);
    resp_free(&r);
    const char *pj = "{\"deadlines_s\":{\"share\":40},\"selection\":{\"max_retry_s\":50}}";
    r = walk_call(f, "PATCH", base, ADMIN_TOKEN, "application/json", pj, strlen(pj), NULL, 200);
    resp_free(&r);
    snprintf(path, sizeof(path), "%s/enrollment-token", base);
    r = walk_call(f, "POST", path, ADMIN_TOKEN, "application/json", NULL, 0, NULL, 200);
    free(etok);
    etok = json_str(&r, "enrollment_token");
    resp_free(&r);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    char eb[128];
    snprintf(eb, sizeof(eb), "{\"population\":\"%s\",\"region\":\"EU\"}", pop);
    for (int i = 0; i < 3; i++) {
        r = walk_call(f, "POST", "/v1/enroll", etok, "application/json", eb, strlen(eb), NULL,
                      201);
        c[i].tok = json_str(&r, "client_token");
        resp_free(&r);
    }
    /* Reads. */
    const char *reads[] = {"/v1/admin/populations", base, NULL, "/metrics",
                           "/v1/audit/checkpoint", "/v1/audit/proof/inclusion?index=0&size=2",
                           "/v1/audit/proof/consistency?first=1&second=2",
                           "/v1/admin/audit/bundle"};
    char rounds[160];
    snprintf(rounds, sizeof(rounds), "%s/rounds", base);
    reads[2] = rounds;
    for (int i = 0; i < 8; i++) {
        r = walk_call(f, "GET", reads[i], ADMIN_TOKEN, NULL, NULL, 0, NULL, 200);
        resp_free(&r);
    }
    snprintf(path, sizeof(path), "/v1/models/%s/%lld", pop, (long long)mv);
    r = walk_call(f, "GET", path, c[0].tok, NULL, NULL, 0, NULL, 200);
    resp_free(&r);
    /* A second version; the first is then read back from storage, not the cache. */
    {
        size_t l2;
        uint8_t *m2 = make_model(&l2);
        m2[l2 - 1] ^= 0x01; /* another weight: another version */
        char up[160];
        snprintf(up, sizeof(up), "%s/models", base);
        struct resp u = http_req(f, "POST", up, ADMIN_TOKEN, "application/octet-stream", m2, l2,
                                 NULL);
        assert_int_equal(u.status, 201);
        resp_free(&u);
        free(m2);
        r = walk_call(f, "GET", path, c[0].tok, NULL, NULL, 0, NULL, 200);
        resp_free(&r);
    }
    /* Check-ins: the first creates the round, the third starts it. A refused attempt may
     * be a retry answer that paces the device: each attempt comes after its pace. */
    int64_t rid = 0;
    for (int i = 0; i < 3; i++) {
        struct call cc = {"POST", "/v1/checkin", c[i].tok, "application/json", CHECKIN,
                          strlen(CHECKIN), NULL};
        r = walk_prep(f, "POST /v1/checkin", after_pace, send_call, &cc, 200);
        j = body_json(&r);
        const char *st = json_string_value(json_object_get(j, "status"));
        if (strcmp(st, "selected") == 0) {
            snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                     json_string_value(json_object_get(j, "participation_id")));
            rid = json_integer_value(json_object_get(j, "round_id"));
        }
        json_decref(j);
        resp_free(&r);
    }
    if (rid > 0) {
        snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
        r = walk_call(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL, 200);
        j = body_json(&r);
        bool running = strcmp(json_string_value(json_object_get(j, "state")), "running") == 0;
        json_decref(j);
        resp_free(&r);
        if (running && c[2].pid[0]) {
            snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
            for (int i = 0; i < 3; i++) {
                r = walk_call(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, 200);
                parse_task(&r, &c[i].task);
                resp_free(&r);
            }
            snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=0", (long long)rid);
            r = walk_call(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid, 200);
            resp_free(&r);
        }
    }
    struct erase_arg ea = {etok, pop, ""};
    r = walk_prep(f, "erase", prepare_erase, send_erase, &ea, 200);
    resp_free(&r);
    snprintf(path, sizeof(path), "%s/stop", base);
    r = walk_call(f, "POST", path, ADMIN_TOKEN, "application/json", NULL, 0, NULL, 200);
    resp_free(&r);
    clients_free(c, 3);
    free(etok);
}

/* ---- the aggregation walk ---- */

static void aggregation_walk(struct fx *f, const struct popcfg *pcp) {
    struct popcfg pc = *pcp;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    int64_t version = 1;
    int abandoned = 0;
    for (long k = 1;; k++) {
        assert_true(k < 2000);
        atomic_fetch_add(&f->now_ms, 61 * 1000); /* past any pacing */
        fl_coord_tick(f->co);
        int64_t rid = 0;
        checkin_all(f, c, 3, &rid);
        fetch_tasks(f, c, 3, rid);
        char path[96];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
        uint8_t body[16 + 1024 * 4];
        struct resp r;
        for (int i = 0; i < 3; i++) {
            size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
            if (i == 2)
                arm(k);
            r = req_soft(f, "POST", path, c[i].tok, "application/octet-stream", body, bl,
                         c[i].pid);
            if (i < 2)
                assert_int_equal(r.status, 202);
            else
                assert_true(r.status == 202 || r.status >= 500 || r.status == 0);
            resp_free(&r);
        }
        long fired = disarm();
        fl_coord_tick(f->co);
        json_t *st = round_status(f, &c[0], rid);
        const char *s = json_string_value(json_object_get(st, "state"));
        if (strcmp(s, "completed") == 0) {
            int64_t nv = json_integer_value(json_object_get(st, "new_model_version"));
            assert_true(nv > version);
            version = nv;
            float w[D], b[2];
            fetch_model(f, &c[0], pc.name, version, w, b);
            for (int j = 0; j < D; j++)
                assert_true(isfinite(w[j]));
            assert_true(b[0] == 3.0f && b[1] == -4.0f);
        } else {
            /* Refused at an allocation: abandoned, no model made. The refused update's
             * answer may also have been a 5xx (the round then ends at its deadline). */
            if (strcmp(s, "abandoned") != 0) {
                atomic_fetch_add(&f->now_ms, c[0].task.dl[2] + 1 - atomic_load(&f->now_ms));
                fl_coord_tick(f->co);
                json_decref(st);
                st = round_status(f, &c[0], rid);
                s = json_string_value(json_object_get(st, "state"));
            }
            if (strcmp(s, "abandoned") != 0 && strcmp(s, "completed") != 0)
                fprintf(stderr, "allocation %ld: round %s\n", k, s);
            assert_true(strcmp(s, "abandoned") == 0 || strcmp(s, "completed") == 0);
            if (strcmp(s, "abandoned") == 0) {
                assert_true(json_is_null(json_object_get(st, "new_model_version")));
                abandoned++;
            } else {
                version = json_integer_value(json_object_get(st, "new_model_version"));
            }
        }
        json_decref(st);
        if (!fired) {
            if (getenv("FL_TEST_VERBOSE"))
                fprintf(stderr, "aggregation: %ld allocation(s) walked\n", k - 1);
            break;
        }
    }
    assert_true(abandoned > 0); /* some allocation of the aggregation was hit */
    clients_free(c, 3);
}


static void test_aggregation_walk(void **state) {
    struct popcfg pc = {.name = "ag", .target = 3, .min = 3, .secagg = false, .mode = "none",
                        .strategy = "fedadam", .bits = 32,
                        .strategy_extra = "\"server_lr\":0.1"};
    aggregation_walk(*state, &pc);
}

/* The same with central DP: the noise, the ledger entry and the epsilon refresh. */
static void test_dp_aggregation_walk(void **state) {
    struct popcfg pc = {.name = "dpag", .target = 3, .min = 3, .secagg = false,
                        .mode = "central", .budget = 1e6, .bits = 32};
    aggregation_walk(*state, &pc);
}

/* FedBuff: the k-th allocation from the update that fills the buffer (K = 2) fails; the
 * buffer is applied or abandoned, and a later buffer still makes the next version. */
static void test_fedbuff_walk(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fbw", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":2"};
    char *tok[2];
    setup_population(f, &pc, tok, 2);
    struct tc c[2];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 2; i++)
        c[i].tok = tok[i];
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true},\"capabilities\":{\"secagg\":false}}";
    long k;
    for (k = 1; k < 2000; k++) {
        atomic_fetch_add(&f->now_ms, 61 * 1000);
        fl_coord_tick(f->co);
        bool ok = true;
        for (int i = 0, tries = 0; i < 2 && ok; tries++) {
            struct resp r = http_json(f, "POST", "/v1/checkin", c[i].tok, ck);
            assert_int_equal(r.status, 200);
            json_t *j = body_json(&r);
            ok = strcmp(json_string_value(json_object_get(j, "status")), "selected") == 0;
            if (!ok && tries < 3) {
                /* A buffer that could not open or apply: the next check-in retries. */
                if (getenv("FL_TEST_VERBOSE"))
                    fprintf(stderr, "fedbuff allocation %ld: %s\n", k, r.body);
                json_decref(j);
                resp_free(&r);
                atomic_fetch_add(&f->now_ms, 61 * 1000);
                fl_coord_tick(f->co);
                ok = true;
                continue;
            }
            if (!ok)
                fprintf(stderr, "fedbuff allocation %ld: %s\n", k, r.body);
            if (ok) {
                snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                         json_string_value(json_object_get(j, "participation_id")));
                int64_t rid = json_integer_value(json_object_get(j, "round_id"));
                char path[96];
                snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
                struct resp t = http_req(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid);
                assert_int_equal(t.status, 200);
                parse_task(&t, &c[i].task);
                resp_free(&t);
                encode(&c[i], i);
            }
            json_decref(j);
            resp_free(&r);
            i++;
            tries = -1;
        }
        assert_true(ok);
        long fired = 0;
        for (int i = 0; i < 2; i++) {
            uint8_t body[16 + 4 * 1024];
            size_t bl = plain_update_body(body, c[i].task.rid, c[i].words, c[i].task.vec_len, 4);
            char path[96];
            snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c[i].task.rid);
            if (i == 1)
                arm(k);
            struct resp r = req_soft(f, "POST", path, c[i].tok, "application/octet-stream",
                                     body, bl, c[i].pid);
            if (i == 1)
                fired = disarm();
            assert_true(r.status == 202 || r.status >= 500 || r.status == 0 ||
                        (fired && r.status == 410));
            if (r.status >= 500 || r.status == 0) {
                /* Refused for memory: the device posts again, as after any 503. */
                resp_free(&r);
                r = req_soft(f, "POST", path, c[i].tok, "application/octet-stream", body, bl,
                             c[i].pid);
                assert_true(r.status == 202 || r.status == 200);
            }
            resp_free(&r);
        }
        struct resp r = http_json(f, "GET", "/v1/admin/populations/fbw", ADMIN_TOKEN, NULL);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        if (!fired)
            break;
    }
    assert_true(k < 2000);
    /* With no failure the buffer was applied: the version moved past 1. */
    struct resp r = http_json(f, "GET", "/v1/admin/populations/fbw", ADMIN_TOKEN, NULL);
    json_t *j = body_json(&r);
    assert_true(json_integer_value(json_object_get(j, "model_version")) > 1);
    json_decref(j);
    resp_free(&r);
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "fedbuff: %ld allocation(s) walked\n", k - 1);
    clients_free(c, 2);
}

/* fl_coord_create on a database with populations, rounds, an optimiser state and a privacy
 * ledger: the k-th allocation fails for k = 1, 2, ... until create succeeds without one;
 * each failed create returns an error and leaves no block behind. */
static void test_create_walk(void **state) {
    struct fx *f = *state;
    struct popcfg pa = {.name = "cw", .target = 3, .min = 3, .secagg = false, .mode = "none",
                        .strategy = "fedadam", .bits = 32};
    struct popcfg pb = {.name = "cwdp", .target = 3, .min = 3, .secagg = false,
                        .mode = "central", .budget = 1e6, .bits = 32};
    const struct popcfg *pcs[2] = {&pa, &pb};
    for (int p = 0; p < 2; p++) {
        char *tok[3];
        setup_population(f, pcs[p], tok, 3);
        struct tc c[3];
        memset(c, 0, sizeof(c));
        for (int i = 0; i < 3; i++)
            c[i].tok = tok[i];
        atomic_fetch_add(&f->now_ms, 61 * 1000);
        int64_t rid = 0;
        checkin_all(f, c, 3, &rid);
        fetch_tasks(f, c, 3, rid);
        char path[96];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
        for (int i = 0; i < 3; i++) {
            uint8_t body[16 + 4 * 1024];
            size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
            struct resp r = http_req(f, "POST", path, c[i].tok, "application/octet-stream",
                                     body, bl, c[i].pid);
            assert_int_equal(r.status, 202);
            resp_free(&r);
        }
        clients_free(c, 3);
    }
    fl_coord_destroy(f->co);
    f->co = NULL;
    pthread_mutex_lock(&g_oom.mu);
    assert_int_equal(g_oom.live, 0);
    pthread_mutex_unlock(&g_oom.mu);
    long k;
    int failed = 0;
    for (k = 1; k < 5000; k++) {
        arm(k);
        fl_coord_config cfg;
        fl_coord_config_init(&cfg);
        cfg.port = 0;
        cfg.db_path = f->db;
        cfg.allocator = &g_alloc;
        cfg.clock = clock_of;
        cfg.clock_user = f;
        cfg.has_signing_key = 1;
        memset(cfg.signing_seed, 5, sizeof(cfg.signing_seed));
        fl_coord *co = NULL;
        char err[256];
        fl_status rc = fl_coord_create(&co, &cfg, err, sizeof(err));
        long fired = disarm();
        if (rc != FL_OK) {
            assert_true(fired > 0);
            assert_null(co);
            failed++;
        }
        fl_coord_destroy(co);
        pthread_mutex_lock(&g_oom.mu);
        long live = g_oom.live;
        pthread_mutex_unlock(&g_oom.mu);
        if (live != 0)
            fprintf(stderr, "create, allocation %ld: %ld block(s) left (%s)\n", k, live,
                    rc == FL_OK ? "created" : err);
        assert_int_equal(live, 0);
        if (!fired)
            break;
    }
    assert_true(k < 5000);
    assert_true(failed > 0);
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "create: %ld allocation(s) walked, %d refused\n", k - 1, failed);
    start(f); /* the teardown's */
}

/* The requests of a secure-aggregation round, walked: its check-ins (the round starts with
 * the secagg server), the per-device signed tasks, the phase results (copied out under the
 * lock) and the status. */
static void test_secagg_request_walk(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "sw", .target = 3, .min = 3, .secagg = true, .mode = "central",
                        .budget = 1e6, .bits = 32};
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    /* Every refused check-in moves the clock past its pace: long deadlines. */
    struct resp pr = http_json(f, "PATCH", "/v1/admin/populations/sw", ADMIN_TOKEN,
                               "{\"deadlines_s\":{\"advertise\":86400,\"share\":86400},"
                               "\"selection\":{\"forming_s\":86400}}");
    assert_int_equal(pr.status, 200);
    resp_free(&pr);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    int64_t rid = 0;
    for (int i = 0; i < 3; i++) {
        struct call cc = {"POST", "/v1/checkin", c[i].tok, "application/json", CHECKIN,
                          strlen(CHECKIN), NULL};
        struct resp r = walk_prep(f, "secagg check-in", after_pace, send_call, &cc, 200);
        json_t *j = body_json(&r);
        if (strcmp(json_string_value(json_object_get(j, "status")), "selected") == 0) {
            snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                     json_string_value(json_object_get(j, "participation_id")));
            rid = json_integer_value(json_object_get(j, "round_id"));
        }
        json_decref(j);
        resp_free(&r);
    }
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    json_t *j = body_json(&r);
    bool running = strcmp(json_string_value(json_object_get(j, "state")), "running") == 0;
    json_decref(j);
    resp_free(&r);
    if (running && c[0].pid[0] && c[1].pid[0] && c[2].pid[0]) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
        for (int i = 0; i < 3; i++) {
            r = walk_call(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, 200);
            parse_task(&r, &c[i].task);
            resp_free(&r);
            encode(&c[i], i);
        }
        const uint8_t *out[3];
        size_t ol[3];
        secagg_clients_start(c, 3, rid, out, ol);
        for (int i = 0; i < 3; i++) {
            r = post_phase(f, &c[i], rid, "advertise", out[i], ol[i]);
            assert_int_equal(r.status, 202);
            resp_free(&r);
        }
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise/result?wait=0",
                 (long long)rid);
        for (int i = 0; i < 3; i++) {
            r = walk_call(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, 200);
            resp_free(&r);
        }
        secagg_clients_free(c, 3);
    }
    clients_free(c, 3);
}

/* Writes inside rounds, walked: stopping a population with a forming round (its selection
 * recorded with the abandonment), plain updates and secagg messages that do not close their
 * phase, and FedBuff check-ins. */
static void test_round_writes_walk(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "rw", .target = 3, .min = 2, .secagg = false, .mode = "none",
                        .bits = 32};
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    struct resp r = walk_call(f, "POST", "/v1/admin/populations/rw/stop", ADMIN_TOKEN,
                              "application/json", NULL, 0, NULL, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/rw/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    atomic_fetch_add(&f->now_ms, 61 * 1000);
    checkin_all(f, c, 3, &rid);
    fetch_tasks(f, c, 3, rid);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    g_want_alt = 200;
    for (int i = 0; i < 2; i++) {
        uint8_t body[16 + 4 * 1024];
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        r = walk_call(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid,
                      202);
        resp_free(&r);
    }
    g_want_alt = 0;
    clients_free(c, 3);

    struct popcfg ps = {.name = "rws", .target = 3, .min = 3, .secagg = true, .mode = "none",
                        .bits = 32};
    setup_population(f, &ps, tok, 3);
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    atomic_fetch_add(&f->now_ms, 61 * 1000);
    checkin_all(f, c, 3, &rid);
    fetch_tasks(f, c, 3, rid);
    const uint8_t *out[3];
    size_t ol[3];
    secagg_clients_start(c, 3, rid, out, ol);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise", (long long)rid);
    g_want_alt = 200;
    for (int i = 0; i < 2; i++) {
        r = walk_call(f, "POST", path, c[i].tok, "application/octet-stream", out[i], ol[i],
                      c[i].pid, 202);
        resp_free(&r);
    }
    g_want_alt = 0;
    secagg_clients_free(c, 3);
    clients_free(c, 3);

    struct popcfg pf = {.name = "rwf", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":3"};
    setup_population(f, &pf, tok, 3);
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true},\"capabilities\":{\"secagg\":false}}";
    for (int i = 0; i < 3; i++) {
        struct call cc = {"POST", "/v1/checkin", tok[i], "application/json", ck, strlen(ck),
                          NULL};
        r = walk_prep(f, "fedbuff check-in", after_pace, send_call, &cc, 200);
        resp_free(&r);
        free(tok[i]);
    }
}

/* A round's start walked: the k-th allocation from the check-in that fills the round fails
 * (plain: the accumulator; secagg: the server state machine). The round then runs or is
 * abandoned with a reason; either way the next round forms normally. */
static void start_walk(struct fx *f, const struct popcfg *pcp) {
    struct popcfg pc = *pcp;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/stop", pc.name);
    char start_path[128];
    snprintf(start_path, sizeof(start_path), "/v1/admin/populations/%s/start", pc.name);
    long k;
    int abandoned = 0;
    for (k = 1; k < 1000; k++) {
        atomic_fetch_add(&f->now_ms, 61 * 1000);
        fl_coord_tick(f->co);
        int64_t rid = 0;
        checkin_all(f, c, 2, &rid);
        arm(k);
        struct resp r = req_soft(f, "POST", "/v1/checkin", c[2].tok, "application/json",
                                 CHECKIN, strlen(CHECKIN), NULL);
        long fired = disarm();
        assert_true(r.status == 200 || r.status >= 500 || r.status == 0);
        resp_free(&r);
        snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
        r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
        json_t *j = body_json(&r);
        const char *st = json_string_value(json_object_get(j, "state"));
        assert_true(strcmp(st, "running") == 0 || strcmp(st, "abandoned") == 0 ||
                    strcmp(st, "forming") == 0);
        abandoned += strcmp(st, "abandoned") == 0;
        json_decref(j);
        resp_free(&r);
        /* End it (stop abandons a forming or running round) and start again. */
        snprintf(path, sizeof(path), "/v1/admin/populations/%s/stop", pc.name);
        r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        r = http_json(f, "POST", start_path, ADMIN_TOKEN, NULL);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        if (!fired)
            break;
    }
    assert_true(k < 1000);
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "%s start: %ld allocation(s) walked, %d abandoned\n", pc.name, k - 1,
                abandoned);
    clients_free(c, 3);
}

static void test_start_walk(void **state) {
    struct popcfg plain = {.name = "stp", .target = 3, .min = 3, .secagg = false,
                           .mode = "none", .bits = 32};
    struct popcfg sec = {.name = "sts", .target = 3, .min = 3, .secagg = true, .mode = "none",
                         .bits = 32};
    start_walk(*state, &plain);
    start_walk(*state, &sec);
}

/* ---- the secure aggregation walk ---- */

/* Devices of the secagg walk: one more than the secure minimum of 3 (min_participants), so
 * a device whose post failed for memory drops out and the round goes on with the rest. */
enum { SA_N = 4 };

/* One secagg round of SA_N devices (population "sa"); the k-th allocation from the last post
 * of phase `phase` on fails (k 0: none). Returns whether a failure fired; *state_out gets
 * the round's final state. */
static bool secagg_round(struct fx *f, struct tc *c, int phase, long k, char *state_out,
                         size_t n) {
    static const char *const names[4] = {"advertise", "share", "masked", "unmask"};
    atomic_fetch_add(&f->now_ms, 61 * 1000);
    fl_coord_tick(f->co);
    int64_t rid = 0;
    checkin_all(f, c, SA_N, &rid);
    fetch_tasks(f, c, SA_N, rid);
    const uint8_t *out[SA_N];
    size_t ol[SA_N];
    secagg_clients_start(c, SA_N, rid, out, ol);
    long fired = 0;
    bool alive = true;
    for (int ph = 0; ph < 4 && alive; ph++) {
        for (int i = 0; i < SA_N && alive; i++) {
            if (ph == phase && i == SA_N - 1 && k > 0)
                arm(k);
            char path[128];
            snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s", (long long)rid, names[ph]);
            struct resp r = req_soft(f, "POST", path, c[i].tok, "application/octet-stream",
                                     out[i], ol[i], c[i].pid);
            if (ph == phase && i == SA_N - 1 && k > 0)
                fired += disarm();
            if (r.status != 202 && r.status != 200)
                alive = r.status >= 500 || r.status == 0 ? alive : false;
            resp_free(&r);
        }
        if (ph == 3 || !alive)
            break;
        /* A close refused for memory is retried by the tick. */
        fl_coord_tick(f->co);
        for (int i = 0; i < SA_N && alive; i++) {
            struct resp r = get_result(f, &c[i], rid, names[ph], 0);
            if (r.status == 204) {
                resp_free(&r);
                atomic_fetch_add(&f->now_ms, 1000);
                fl_coord_tick(f->co);
                r = get_result(f, &c[i], rid, names[ph], 0);
            }
            if (r.status != 200) {
                alive = false;
            } else if (fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len, &out[i],
                                               &ol[i]) != FL_OK) {
                alive = false;
            }
            resp_free(&r);
        }
    }
    /* Whatever happened, the round ends by its deadlines. */
    for (int t = 0; t < 6; t++) {
        json_t *st = round_status(f, &c[0], rid);
        const char *s = json_string_value(json_object_get(st, "state"));
        snprintf(state_out, n, "%s", s);
        json_decref(st);
        if (strcmp(state_out, "completed") == 0 || strcmp(state_out, "abandoned") == 0)
            break;
        atomic_fetch_add(&f->now_ms, 700 * 1000);
        fl_coord_tick(f->co);
    }
    secagg_clients_free(c, SA_N);
    return fired > 0;
}

static void test_secagg_walk(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "sa", .target = SA_N, .min = 3, .secagg = true, .mode = "none",
                        .bits = 32};
    struct tc c[SA_N];
    setup_devices(f, &pc, c, SA_N);
    char st[32];
    assert_false(secagg_round(f, c, 0, 0, st, sizeof(st)));
    assert_string_equal(st, "completed");
    for (int phase = 0; phase < 4; phase++) {
        int abandoned = 0;
        long k;
        for (k = 1; k < 400; k++) {
            bool fired = secagg_round(f, c, phase, k, st, sizeof(st));
            if (strcmp(st, "completed") != 0 && strcmp(st, "abandoned") != 0)
                fprintf(stderr, "phase %d allocation %ld: %s\n", phase, k, st);
            assert_true(strcmp(st, "completed") == 0 || strcmp(st, "abandoned") == 0);
            abandoned += strcmp(st, "abandoned") == 0;
            if (!fired)
                break;
        }
        assert_true(k < 400);
        if (getenv("FL_TEST_VERBOSE"))
            fprintf(stderr, "secagg phase %d: %ld allocation(s) walked, %d abandoned\n", phase,
                    k - 1, abandoned);
    }
    clients_free(c, SA_N);
}

/* Two ctests share this executable (each well under 30 s under ASan): without arguments the
 * request walks, with "rounds" the walks of whole rounds' aggregations. */
int main(int argc, char **argv) {
    const struct CMUnitTest requests[] = {
        cmocka_unit_test_setup_teardown(test_request_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secagg_request_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_writes_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_walk, setup, teardown),
    };
    const struct CMUnitTest rounds[] = {
        cmocka_unit_test_setup_teardown(test_aggregation_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secagg_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dp_aggregation_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fedbuff_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_walk, setup, teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = argc > 1 && strcmp(argv[1], "rounds") == 0
                 ? cmocka_run_group_tests_name("oom rounds", rounds, NULL, NULL)
                 : cmocka_run_group_tests_name("oom requests", requests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
