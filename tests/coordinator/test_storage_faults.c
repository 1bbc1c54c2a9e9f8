/* Storage failures inside the in-process coordinator: its SQLite database is opened through
 * the reliability tests' fault-injecting VFS (tests/reliability/fault_vfs.c), whose byte
 * budget plays a full disk, and a second SQLite connection that holds the write lock plays a
 * busy database. Checked:
 *
 *   - every admin and device write that a full disk refuses answers 503 storage_unavailable
 *     with Retry-After: 5 (docs/protocol.md, errors), changes nothing, leaves reads (health,
 *     populations, models, audit checkpoint) answering, and works at once when space is back;
 *   - a busy database answers 503 unavailable with a short Retry-After;
 *   - a round whose abandonment the full disk refuses is retried (every second by the tick,
 *     and before the next round forms: a check-in meanwhile gets 503), and written once space
 *     is back, in order, before the next round;
 *   - a round whose start (OPEN -> RUNNING) or aggregation commit the full disk refuses is
 *     abandoned with that reason and no model version is stored.
 *
 * No ticker thread: the test moves the injected clock and ticks itself, so only one thread
 * touches the (single-threaded) fault VFS at a time. */
#include <time.h>
#include <sodium.h>
#include <sqlite3.h>

#include "coord_testkit.h"
#include "fault_vfs.h"
#include "flotilla/tensor.h"

/* ---- fixture ---- */

static int64_t clock_of(void *user) {
    return atomic_load(&((struct fx *)user)->now_ms);
}

static void log_quiet(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  [coordinator %d] %s\n", (int)level, msg);
}

static unsigned g_retention_days; /* of the next setup */
static unsigned g_busy_ms;        /* database_busy_timeout_ms of the next setup (0: default) */

static void start_on_fault_vfs(struct fx *f) {
    char uri[256];
    fault_vfs_uri(uri, sizeof(uri), f->db);
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = 1;
    cfg.db_path = uri;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.clock = clock_of;
    cfg.clock_user = f;
    cfg.logger.fn = log_quiet;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 9, sizeof(cfg.signing_seed));
    cfg.retention_days = g_retention_days;
    if (g_busy_ms)
        cfg.db_busy_timeout_ms = g_busy_ms;
    char err[256];
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_non_null(f->co);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
}

static int setup(void **state) {
    if (!fault_vfs_uri_supported()) {
        fprintf(stderr, "SQLite without URI file names: skipped\n");
        return -1;
    }
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    fault_vfs_reset();
    struct fx *f = fx_new();
    start_on_fault_vfs(f);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fault_vfs_set_budget(-1);
    fx_free(*state);
    fault_vfs_reset();
    return 0;
}

/* A full disk: the WAL is checkpointed and truncated (so the next commit has to grow a
 * file), then no file may grow. */
static void disk_full(struct fx *f) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 0); /* not blocked by a reader */
    sqlite3_finalize(s);
    sqlite3_close(db);
    fault_vfs_set_budget(fault_vfs_usage());
}

static void disk_free(void) { fault_vfs_set_budget(-1); }

/* ---- helpers ---- */

static char *create_pop(struct fx *f, const char *name) {
    char body[512];
    snprintf(body, sizeof(body),
             "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],\"selection\":{\"target\":3,"
             "\"over_selection\":1.0,\"min_participants\":3,\"require\":[],\"forming_s\":60,"
             "\"jitter_s\":0,\"min_retry_s\":1,\"max_retry_s\":60},"
             "\"update\":{\"tensors\":[\"w\"]},\"secagg\":{\"enabled\":false},"
             "\"privacy\":{\"mode\":\"none\",\"modulus_bits\":32}}",
             name);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201)
        fprintf(stderr, "create %s: %ld %s\n", name, r.status, r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *tok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    return tok;
}

static struct resp upload(struct fx *f, const char *name) {
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/models", name);
    struct resp r =
        http_req(f, "POST", path, ADMIN_TOKEN, "application/octet-stream", model, mlen, NULL);
    free(model);
    return r;
}

static struct resp admin_post(struct fx *f, const char *name, const char *what) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/%s", name, what);
    return http_json(f, "POST", path, ADMIN_TOKEN, NULL);
}

static struct resp enroll_req(struct fx *f, const char *etok, const char *pop) {
    char body[128];
    snprintf(body, sizeof(body), "{\"population\":\"%s\",\"region\":\"EU\"}", pop);
    return http_json(f, "POST", "/v1/enroll", etok, body);
}

static char *enroll(struct fx *f, const char *etok, const char *pop) {
    struct resp r = enroll_req(f, etok, pop);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *tok = strdup(json_string_value(json_object_get(j, "client_token")));
    json_decref(j);
    resp_free(&r);
    return tok;
}

static const char *const CHECKIN = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                                   "\"unmetered\":true,\"idle\":true}}";

/* 503 with the code and Retry-After seconds. */
static void expect_503(struct resp *r, const char *code, const char *retry, const char *what) {
    if (r->status != 503)
        fprintf(stderr, "%s: expected 503, got %ld %s\n", what, r->status, r->body);
    assert_error(r, 503, code);
    char b[16];
    assert_non_null(header_in(r, "Retry-After", b, sizeof(b)));
    assert_string_equal(b, retry);
    resp_free(r);
}

static void fingerprint(struct fx *f, char *out, size_t n) {
    snprintf(out, n, "%lld/%lld/%lld/%lld/%lld/%lld",
             (long long)db_int(f, "SELECT count(*) FROM populations"),
             (long long)db_int(f, "SELECT count(*) FROM clients"),
             (long long)db_int(f, "SELECT count(*) FROM models"),
             (long long)db_int(f, "SELECT count(*) FROM rounds"),
             (long long)db_int(f, "SELECT count(*) FROM audit_entries"),
             (long long)db_int(f, "SELECT coalesce(sum(length(config_json)),0) FROM populations"));
}

static const char *pop_state(struct fx *f, const char *name, char *buf, size_t n) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(buf, n, "%s", json_string_value(json_object_get(j, "state")));
    json_decref(j);
    resp_free(&r);
    return buf;
}

/* ---- tests ---- */

/* Every write endpoint on a full disk: 503 storage_unavailable, nothing changed; reads keep
 * working; each write succeeds as soon as the space is back. */
static void test_full_disk_refuses_writes(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "a");
    struct resp r = upload(f, "a");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = admin_post(f, "a", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char *ctok = enroll(f, etok, "a");
    char cid[17];
    snprintf(cid, sizeof(cid), "%s", ctok + 4);
    char before[256], after[256], st[32];
    fingerprint(f, before, sizeof(before));

    disk_full(f);
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"b\",\"allowed_regions\":[\"EU\"]}");
    expect_503(&r, "storage_unavailable", "5", "create");
    /* Counted as 503, not in the 500 bucket (an operator tells overload from a fault). */
    assert_true(metric_value(f, "flotilla_http_requests_total{route=\"admin_populations\","
                                "code=\"503\"}") == 1);
    r = upload(f, "a");
    expect_503(&r, "storage_unavailable", "5", "upload");
    r = admin_post(f, "a", "stop");
    expect_503(&r, "storage_unavailable", "5", "stop");
    assert_string_equal(pop_state(f, "a", st, sizeof(st)), "running");
    r = http_json(f, "PATCH", "/v1/admin/populations/a", ADMIN_TOKEN,
                  "{\"selection\":{\"max_retry_s\":30}}");
    expect_503(&r, "storage_unavailable", "5", "patch");
    r = admin_post(f, "a", "enrollment-token");
    expect_503(&r, "storage_unavailable", "5", "rotate");
    r = enroll_req(f, etok, "a");
    expect_503(&r, "storage_unavailable", "5", "enroll");
    /* A check-in that has to create the round. */
    r = http_json(f, "POST", "/v1/checkin", ctok, CHECKIN);
    expect_503(&r, "storage_unavailable", "5", "checkin");
    /* Reads still answer. */
    static const char *const reads[] = {"/healthz", "/readyz", "/v1/audit/checkpoint",
                                        "/v1/admin/populations", "/v1/admin/populations/a"};
    for (int i = 0; i < 5; i++) {
        r = http_req(f, "GET", reads[i], ADMIN_TOKEN, NULL, NULL, 0, NULL);
        if (r.status != 200)
            fprintf(stderr, "%s: %ld\n", reads[i], r.status);
        assert_int_equal(r.status, 200);
        resp_free(&r);
    }
    r = http_req(f, "GET", "/v1/models/a/1", ctok, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_true(fault_vfs_fired() > 0);
    disk_free();
    fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);

    /* Space is back: the old enrollment token still works (the rotation did not happen),
     * and every refused write now succeeds. */
    char *ctok2 = enroll(f, etok, "a");
    r = http_json(f, "PATCH", "/v1/admin/populations/a", ADMIN_TOKEN,
                  "{\"selection\":{\"max_retry_s\":30}}");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = admin_post(f, "a", "enrollment-token");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = upload(f, "a");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    fx_advance(f, 61 * 1000); /* past the pace of the refused check-in */
    r = http_json(f, "POST", "/v1/checkin", ctok, CHECKIN);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
    json_decref(j);
    resp_free(&r);
    r = admin_post(f, "a", "stop");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_string_equal(pop_state(f, "a", st, sizeof(st)), "stopped");
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"b\",\"allowed_regions\":[\"EU\"]}");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    free(ctok2);
    free(ctok);
    free(etok);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A database locked by another writer past the busy timeout (database_busy_timeout_ms,
 * 400 ms in these runs): 503 unavailable. The request waited the configured time, not the
 * 5 s default. */
static void test_busy_database(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "busy");
    char *ctok = enroll(f, etok, "busy");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    double t0 = mono_s();
    struct resp r = enroll_req(f, etok, "busy");
    double waited = mono_s() - t0;
    expect_503(&r, "unavailable", "2", "enroll while locked");
    if (waited < 0.35 || waited > 4.5)
        fail_msg("the locked enrolment waited %.2f s, not about the 0.4 s configured", waited);
    /* The admin erasure (audit endpoint) answers the same way, with its own Retry-After. */
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%.16s/erase", ctok + 4);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    expect_503(&r, "unavailable", "1", "erase while locked");
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* Erased: its token no longer authenticates; erasing again finds nothing. */
    r = http_json(f, "POST", "/v1/checkin", ctok, CHECKIN);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    free(ctok);
    free(etok);
}

/* A forming round abandoned at its deadline while the disk is full: the abandonment is kept
 * pending, retried by the tick every second and before a new round forms (503 meanwhile),
 * and written once space is back, before the next round. */
static void test_abandon_retried_after_full_disk(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "ab");
    struct resp r = upload(f, "ab");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = admin_post(f, "ab", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char *tok[3];
    for (int i = 0; i < 3; i++)
        tok[i] = enroll(f, etok, "ab");
    int64_t rid = 0;
    for (int i = 0; i < 2; i++) { /* two of the three needed */
        r = http_json(f, "POST", "/v1/checkin", tok[i], CHECKIN);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
        rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
        resp_free(&r);
    }
    disk_full(f);
    fx_advance(f, 61 * 1000); /* forming deadline: extended once (nothing written) */
    json_t *j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "forming");
    json_decref(j);
    fx_advance(f, 61 * 1000); /* again: abandoned in memory, the write refused */
    fx_advance(f, 1500);      /* the tick's retry is refused too */
    fx_advance(f, 200);       /* within the second: no retry yet */
    j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "forming"); /* stored */
    json_decref(j);
    /* A check-in now would open a round before the abandonment is written: refused. */
    r = http_json(f, "POST", "/v1/checkin", tok[2], CHECKIN);
    expect_503(&r, "storage_unavailable", "5", "checkin with abandonment pending");
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 1);
    disk_free();
    fx_advance(f, 61 * 1000); /* the tick writes it */
    j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "too few clients"));
    json_decref(j);
    /* The next round forms now, after the abandoned one. */
    r = http_json(f, "POST", "/v1/checkin", tok[2], CHECKIN);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
    assert_true(json_integer_value(json_object_get(j, "round_id")) > rid);
    json_decref(j);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
    free(etok);
}

/* The round fills while the disk is full: its start (OPEN -> RUNNING) is refused, so the
 * check-in that filled it is answered 503 storage_unavailable (not "selected" into a round
 * that is gone), the round is abandoned ("storage error at round start") once it can be
 * written, no model is made. */
static void test_round_start_refused(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "rs");
    struct resp r = upload(f, "rs");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = admin_post(f, "rs", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = enroll(f, etok, "rs");
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    disk_full(f);
    r = http_json(f, "POST", "/v1/checkin", c[2].tok, CHECKIN); /* fills it: start refused */
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "\"storage_unavailable\""));
    assert_non_null(strstr(r.headers, "Retry-After: 5"));
    resp_free(&r);
    disk_free();
    fx_advance(f, 2000);
    json_t *j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(j, "reason")),
                        "storage error at round start");
    json_decref(j);
    assert_int_equal(db_int(f, "SELECT count(*) FROM models"), 1);
    clients_free(c, 3);
    free(etok);
}

/* The last update arrives while the disk is full: the aggregation's commit is refused, the
 * round is abandoned with the storage error, and nothing of it is stored. */
static void test_aggregation_commit_refused(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "ag");
    struct resp r = upload(f, "ag");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = admin_post(f, "ag", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = enroll(f, etok, "ag");
    int64_t rid = 0;
    checkin_all(f, c, 3, &rid);
    fetch_tasks(f, c, 3, rid);
    size_t L = c[0].task.vec_len;
    uint8_t body[16 + 1024 * 4];
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    for (int i = 0; i < 3; i++) {
        if (i == 2)
            disk_full(f);
        size_t bl = plain_update_body(body, rid, c[i].words, L, 4);
        r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        if (r.status != 202)
            fprintf(stderr, "update %d: %ld %s\n", i, r.status, r.body);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    disk_free();
    fx_advance(f, 2000); /* the pending abandonment is written */
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    json_decref(st);
    json_t *j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_true(json_is_null(json_object_get(j, "new_model_version")));
    json_decref(j);
    assert_int_equal(db_int(f, "SELECT count(*) FROM models"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);
    clients_free(c, 3);
    free(etok);
}


/* The retention sweep on a full disk: refused (logged), nothing deleted; the next sweep, an
 * hour later with space back, deletes the client not seen for longer than the retention and
 * logs a retention entry. */
static int setup_retention(void **state) {
    g_retention_days = 1;
    int rc = setup(state);
    g_retention_days = 0;
    return rc;
}

static void test_retention_sweep_refused(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "rt");
    char *ctok = enroll(f, etok, "rt");
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 1);
    atomic_fetch_add(&f->now_ms, 2 * 86400 * 1000LL); /* two days unseen */
    disk_full(f);
    fl_coord_tick(f->co); /* the first sweep: refused */
    disk_free();
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'retention'"),
                     0);
    fx_advance(f, 1000); /* not yet the next sweep */
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 1);
    fx_advance(f, 3600 * 1000); /* the hourly sweep */
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'retention'"),
                     1);
    /* The deleted client's token no longer authenticates (the cache was cleared). */
    struct resp r = http_json(f, "POST", "/v1/checkin", ctok, CHECKIN);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    free(ctok);
    free(etok);
}


/* A failed fsync: the store refuses every later write on its handle (committed data may not
 * be on disk), so each write endpoint answers 503 storage_unavailable at once while reads
 * keep working; after a restart (a fresh handle) writes work again. */
static void test_failed_fsync_refuses_writes(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "fs");
    struct resp r = upload(f, "fs");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    char *ctok = enroll(f, etok, "fs");
    char *ctok2 = enroll(f, etok, "fs");
    r = admin_post(f, "fs", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    fault_vfs_fail_sync_at(1);
    r = http_json(f, "PATCH", "/v1/admin/populations/fs", ADMIN_TOKEN,
                  "{\"selection\":{\"max_retry_s\":30}}");
    expect_503(&r, "storage_unavailable", "5", "patch with a failing fsync");
    assert_true(fault_vfs_fired() > 0);
    /* Every write is refused now, without waiting. */
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"other\",\"allowed_regions\":[\"EU\"]}");
    expect_503(&r, "storage_unavailable", "5", "create");
    r = upload(f, "fs");
    expect_503(&r, "storage_unavailable", "5", "upload");
    r = admin_post(f, "fs", "stop");
    expect_503(&r, "storage_unavailable", "5", "stop");
    r = http_json(f, "POST", "/v1/checkin", ctok2, CHECKIN); /* would create a round */
    expect_503(&r, "storage_unavailable", "5", "checkin");
    r = http_json(f, "PATCH", "/v1/admin/populations/fs", ADMIN_TOKEN,
                  "{\"selection\":{\"max_retry_s\":30}}");
    expect_503(&r, "storage_unavailable", "5", "patch");
    r = admin_post(f, "fs", "enrollment-token");
    expect_503(&r, "storage_unavailable", "5", "rotate");
    r = enroll_req(f, etok, "fs");
    expect_503(&r, "storage_unavailable", "5", "enroll");
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%.16s/erase", ctok + 4);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status / 100, 5);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/fs", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* A fresh handle writes again. */
    fx_stop(f);
    fault_vfs_reset();
    start_on_fault_vfs(f);
    r = admin_post(f, "fs", "stop");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    free(ctok2);
    free(ctok);
    free(etok);
}


/* Holds the database's write lock from a second connection (a busy database). */
static sqlite3 *lock_db(struct fx *f) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    return db;
}

static void unlock_db(sqlite3 *db) {
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* A busy database where a check-in must first write: the pending abandonment of a round
 * (refused earlier by a full disk), or a FedBuff population's first buffer. Both answer 503
 * unavailable with Retry-After 2 and work once the lock is gone. */
static void test_busy_before_round(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "bp");
    struct resp r = upload(f, "bp");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = admin_post(f, "bp", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char *tok[3];
    for (int i = 0; i < 3; i++)
        tok[i] = enroll(f, etok, "bp");
    r = http_json(f, "POST", "/v1/checkin", tok[0], CHECKIN);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    disk_full(f);
    fx_advance(f, 61 * 1000); /* forming deadline: extended */
    fx_advance(f, 61 * 1000); /* abandoned; the write refused: pending */
    disk_free();
    sqlite3 *db = lock_db(f);
    r = http_json(f, "POST", "/v1/checkin", tok[1], CHECKIN);
    expect_503(&r, "unavailable", "2", "checkin with the abandonment pending, database busy");
    unlock_db(db);
    r = http_json(f, "POST", "/v1/checkin", tok[2], CHECKIN);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
    json_decref(j);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
    free(etok);

    /* FedBuff: the first check-in opens the first buffer. */
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"fb\",\"allowed_regions\":[\"*\"],\"strategy\":{\"name\":"
                  "\"fedbuff\"},\"secagg\":{\"enabled\":false},\"selection\":{\"require\":[]}}");
    assert_int_equal(r.status, 201);
    j = body_json(&r);
    etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    r = upload(f, "fb");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = admin_post(f, "fb", "start");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char *ft = enroll(f, etok, "fb");
    r = http_req(f, "GET", "/v1/models/fb/2", ft, NULL, NULL, 0, NULL); /* token cached */
    resp_free(&r);
    db = lock_db(f);
    r = http_json(f, "POST", "/v1/checkin", ft,
                  "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                  "\"idle\":true},\"capabilities\":{\"secagg\":false}}");
    expect_503(&r, "unavailable", "2", "FedBuff check-in, database busy");
    unlock_db(db);
    free(ft);
    free(etok);
}

/* Three ctests share this executable (the busy-database cases each wait out the store's
 * busy timeout): without arguments the others, "busy" and "busy2" the busy ones. */
/* The test model (make_model's "w" and "b") plus a "pad" tensor of pad_floats floats: a
 * model upload of that many more bytes, to fill the WAL. */
static struct resp upload_padded(struct fx *f, const char *name, size_t pad_floats) {
    float w[D], b[2] = {3.0f, -4.0f};
    for (int j = 0; j < D; j++)
        w[j] = base_w(j);
    float *pad = calloc(pad_floats, sizeof(float));
    assert_non_null(pad);
    for (size_t i = 0; i < pad_floats; i++)
        pad[i] = (float)(i % 977); /* not all zero */
    fl_safetensors_writer *wr = NULL;
    assert_int_equal(fl_safetensors_writer_create(&wr, NULL), FL_OK);
    uint64_t sw[1] = {D}, sb[1] = {2}, sp[1] = {pad_floats};
    assert_int_equal(fl_safetensors_writer_add(wr, "w", FL_DTYPE_F32, 1, sw, w, sizeof(w)), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(wr, "b", FL_DTYPE_F32, 1, sb, b, sizeof(b)), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(wr, "pad", FL_DTYPE_F32, 1, sp, pad,
                                               pad_floats * sizeof(float)),
                     FL_OK);
    size_t len = 0;
    assert_int_equal(fl_safetensors_writer_size(wr, &len), FL_OK);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    assert_int_equal(fl_safetensors_writer_serialize(wr, buf, len), FL_OK);
    fl_safetensors_writer_destroy(wr);
    free(pad);
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/models", name);
    struct resp r =
        http_req(f, "POST", path, ADMIN_TOKEN, "application/octet-stream", buf, len, NULL);
    free(buf);
    return r;
}

/* The value of the metric line "name value" in r's body (-1 if absent). */
static double metric_of(const struct resp *r, const char *name) {
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = r->body ? strstr(r->body, key) : NULL;
    return p ? atof(p + strlen(key)) : -1;
}

static struct resp metrics(struct fx *f) {
    struct resp r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    return r;
}

/* The disk fills up while the WAL still has room: an 8 MB model upload grows the WAL (its
 * checkpoint succeeds), then no file may grow and a 5 MB upload is written over the WAL in
 * place and acknowledged (201), but its checkpoint cannot grow the database file. /metrics
 * shows it (flotilla_storage_checkpoint_failing 1, a failure counted, the WAL past 1000
 * frames), reads still answer, and once space is back the next commit's checkpoint folds
 * the WAL back (failing 0 again). */
static void test_checkpoint_failing_metrics(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "ck");
    free(etok);
    struct resp r = upload_padded(f, "ck", 2 * 1000 * 1000);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = metrics(f);
    assert_true(metric_of(&r, "flotilla_storage_checkpoints_total") >= 1);
    assert_int_equal((int)metric_of(&r, "flotilla_storage_checkpoint_failures_total"), 0);
    assert_int_equal((int)metric_of(&r, "flotilla_storage_checkpoint_failing"), 0);
    resp_free(&r);
    fault_vfs_set_budget(fault_vfs_usage()); /* no file may grow; the WAL keeps its room */
    r = upload_padded(f, "ck", 1250 * 1000);
    if (r.status != 201)
        fprintf(stderr, "upload over the WAL in place: %ld %s\n", r.status, r.body);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = metrics(f);
    assert_int_equal((int)metric_of(&r, "flotilla_storage_checkpoint_failing"), 1);
    assert_true(metric_of(&r, "flotilla_storage_checkpoint_failures_total") >= 1);
    assert_true(metric_of(&r, "flotilla_storage_wal_frames") >= 1000);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/ck", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200); /* reads answer */
    resp_free(&r);
    disk_free();
    r = upload(f, "ck"); /* a small commit: the WAL is still past 1000 frames */
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = metrics(f);
    assert_int_equal((int)metric_of(&r, "flotilla_storage_checkpoint_failing"), 0);
    resp_free(&r);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk_refuses_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandon_retried_after_full_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_start_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_failing_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aggregation_commit_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_sweep_refused, setup_retention,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_fsync_refuses_writes, setup, teardown),
    };
    const struct CMUnitTest busy[] = {
        cmocka_unit_test_setup_teardown(test_busy_database, setup, teardown),
    };
    const struct CMUnitTest busy2[] = {
        cmocka_unit_test_setup_teardown(test_busy_before_round, setup, teardown),
    };
    const char *group = argc > 1 ? argv[1] : "";
    if (strcmp(group, "busy") == 0 || strcmp(group, "busy2") == 0)
        g_busy_ms = 400; /* the busy cases wait it out several times */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = strcmp(group, "busy") == 0    ? cmocka_run_group_tests_name("busy", busy, NULL, NULL)
             : strcmp(group, "busy2") == 0 ? cmocka_run_group_tests_name("busy2", busy2, NULL,
                                                                         NULL)
                                           : cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
