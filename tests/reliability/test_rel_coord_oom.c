/* Allocation and I/O failure walks inside the running coordinator (docs/reliability.md,
 * "Allocation and I/O failures in the coordinator").
 *
 * An in-process coordinator (one HTTP thread, an injected clock the test moves, a ticker
 * thread that pauses while a fault is armed) runs on a counting allocator that also serves
 * its store, and Jansson's allocation hooks and SQLite's allocator (sqlite3_config; off with
 * FL_REL_OOM_NO_SQLITE) point at the same counter (process-global, test only). For each
 * top-level operation the test replays a whole round up to that operation, arms a fault at
 * the N-th event counted from there, sends the request, disarms, and checks:
 *
 *  - the answer is the operation's success or a clean 500/503 with a JSON error body
 *    (never a dropped connection, a hang or a 4xx);
 *  - /healthz answers 200; integrity_check and foreign_key_check pass;
 *  - the same request, repeated unarmed, succeeds (or its round has ended, abandoned with
 *    a reason);
 *  - when the round ends: a completed round has its model version, its participants, its
 *    ledger entry (the plain population runs central DP) and one audit `round` entry; an
 *    abandoned one has none of these but its audit entry; the tag is the last completed
 *    version; every round the test saw completed is still there;
 *  - every block of the instance allocator goes back with the size it was asked for, and
 *    none is left once the coordinator is destroyed (LeakSanitizer covers the rest).
 *
 * N runs from 1 until the armed operation runs to its end without reaching the fault.
 * Modes: `alloc` (the N-th allocation fails), and with --io the fault VFS (fault_vfs.c, the
 * database given as a `file:...?vfs=flfault` URI): `write` (the N-th xWrite fails) and
 * `fsync` (the N-th xSync fails). After a failed fsync the store acknowledges nothing until
 * it is reopened: the test checks that an enrolment (a write) is refused with 503, restarts
 * the coordinator in-process on the same files, and checks that every round acknowledged
 * before is intact and that the service runs rounds again.
 *
 * CI profile: one unarmed calibration run counts each operation's events, then about
 * FL_REL_OOM_POINTS (4 for allocations, 3 for I/O) evenly spaced N from a random offset
 * (FL_RELIABILITY_SEED replays it); FL_RELIABILITY_PROFILE=long walks every N (the figures).
 * Operations: FL_REL_OOM_OPS, a comma-separated list of names (default all). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <sodium.h>
#include <sqlite3.h>

#include "fault_vfs.h"
#include "rel_coord.h"
#include "flotilla/secagg.h"

/* ---- counting allocator ---- */

/* One counter for the instance allocator (coordinator and store) and Jansson. Blocks of
 * the instance allocator carry their size in a header, so a free with another size (the
 * fl_allocator contract) or a block freed by libc (ASan reports it) shows up. */
#define HDR 16
static struct {
    atomic_long count;    /* allocations so far */
    atomic_long fail_at;  /* the allocation that fails (0: none) */
    atomic_long live;     /* instance-allocator blocks not yet freed */
    atomic_long bad_size; /* frees or reallocs that named another size */
} A;

static bool take(void) {
    long c = atomic_fetch_add(&A.count, 1) + 1;
    long f = atomic_load(&A.fail_at);
    return !(f > 0 && c == f);
}

static void size_check(const uint8_t *p, size_t n) {
    size_t was;
    memcpy(&was, p, sizeof(was));
    if (was != n) {
        if (atomic_fetch_add(&A.bad_size, 1) < 5)
            fprintf(stderr, "allocator: block of %zu bytes freed as %zu\n", was, n);
    }
}

static void *ca_alloc(void *user, size_t n) {
    (void)user;
    if (!take())
        return NULL;
    uint8_t *p = malloc(n + HDR);
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof(n));
    atomic_fetch_add(&A.live, 1);
    return p + HDR;
}

static void ca_free(void *user, void *q, size_t n) {
    (void)user;
    if (!q)
        return;
    uint8_t *p = (uint8_t *)q - HDR;
    size_check(p, n);
    atomic_fetch_sub(&A.live, 1);
    free(p);
}

static void *ca_realloc(void *user, void *q, size_t old, size_t n) {
    (void)user;
    if (!take())
        return NULL;
    if (!q)
        return ca_alloc(NULL, n);
    uint8_t *p = (uint8_t *)q - HDR;
    size_check(p, old);
    uint8_t *np = realloc(p, n + HDR);
    if (!np)
        return NULL;
    memcpy(np, &n, sizeof(n));
    return np + HDR;
}

/* SQLite's own allocations count too (installed with sqlite3_config before SQLite
 * initialises): a failure inside SQLite reaches the store as SQLITE_NOMEM. Blocks carry
 * their size for xSize. */
static void *sq_malloc(int n) {
    if (n <= 0 || !take())
        return NULL;
    uint8_t *p = malloc((size_t)n + HDR);
    if (!p)
        return NULL;
    size_t sz = (size_t)n;
    memcpy(p, &sz, sizeof(sz));
    return p + HDR;
}

static void sq_free(void *q) {
    if (q)
        free((uint8_t *)q - HDR);
}

static void *sq_realloc(void *q, int n) {
    if (!q)
        return sq_malloc(n);
    if (n <= 0 || !take())
        return NULL;
    uint8_t *np = realloc((uint8_t *)q - HDR, (size_t)n + HDR);
    if (!np)
        return NULL;
    size_t sz = (size_t)n;
    memcpy(np, &sz, sizeof(sz));
    return np + HDR;
}

static int sq_size(void *q) {
    size_t n;
    memcpy(&n, (uint8_t *)q - HDR, sizeof(n));
    return (int)n;
}

static int sq_roundup(int n) { return (n + 7) & ~7; }
static int sq_init(void *u) { (void)u; return SQLITE_OK; }
static void sq_shutdown(void *u) { (void)u; }

static const sqlite3_mem_methods sq_methods = {sq_malloc, sq_free, sq_realloc, sq_size,
                                               sq_roundup, sq_init, sq_shutdown, NULL};

/* OpenSSL's too (CRYPTO_set_mem_functions, before OpenSSL allocates anything; off with
 * FL_REL_OOM_NO_OPENSSL): the coordinator hashes bodies and models with EVP. */
static void *os_malloc(size_t n, const char *file, int line) {
    (void)file;
    (void)line;
    return take() ? malloc(n) : NULL;
}

static void *os_realloc(void *p, size_t n, const char *file, int line) {
    (void)file;
    (void)line;
    return take() ? realloc(p, n) : NULL;
}

static void os_free(void *p, const char *file, int line) {
    (void)file;
    (void)line;
    free(p);
}

static void *j_malloc(size_t n) { return take() ? malloc(n) : NULL; }
static void j_free(void *p) { free(p); }

static const fl_allocator counting = {sizeof(fl_allocator), ca_alloc, ca_realloc, ca_free,
                                      NULL};

/* ---- the fault ---- */

enum mode { M_ALLOC = 0, M_WRITE = 1, M_SYNC = 2 };
static const char *const mode_name[3] = {"alloc", "write", "fsync"};

static long fired_before, events_base, last_events;

/* The ticker thread ticks the coordinator (parked long polls expire, a phase whose closing
 * failed is closed again, refused abandonments are retried: what the service's ticker does)
 * but never while a fault is armed, so that the N-th event is the request's. */
static pthread_mutex_t tick_mu = PTHREAD_MUTEX_INITIALIZER;
static bool tick_armed, tick_stop;
static fl_coord *tick_co;

static void *ticker_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&tick_mu);
        bool stop = tick_stop;
        if (!stop && !tick_armed && tick_co)
            fl_coord_tick(tick_co);
        pthread_mutex_unlock(&tick_mu);
        if (stop)
            return NULL;
        rel_sleep_ms(20);
    }
}

static void tick_set(bool armed) {
    pthread_mutex_lock(&tick_mu);
    tick_armed = armed;
    pthread_mutex_unlock(&tick_mu);
}

static void tick_co_set(fl_coord *co) {
    pthread_mutex_lock(&tick_mu);
    tick_co = co;
    pthread_mutex_unlock(&tick_mu);
}

/* Events of the mode so far: allocations, xWrite calls or xSync calls. */
static long events(enum mode m) {
    return m == M_ALLOC ? atomic_load(&A.count)
                        : m == M_WRITE ? fault_vfs_write_count() : fault_vfs_sync_count();
}

static void arm(enum mode m, long n) {
    tick_set(true);
    events_base = events(m);
    if (m == M_ALLOC) {
        atomic_store(&A.fail_at, atomic_load(&A.count) + n);
        return;
    }
    fired_before = fault_vfs_fired();
    if (m == M_WRITE)
        fault_vfs_fail_write_at(n);
    else
        fault_vfs_fail_sync_at(n);
}

/* Disarms; true when the fault fired. */
static bool disarm(enum mode m) {
    last_events = events(m) - events_base;
    if (m == M_ALLOC) {
        long f = atomic_exchange(&A.fail_at, 0);
        tick_set(false);
        return atomic_load(&A.count) >= f;
    }
    fault_vfs_fail_write_at(0);
    fault_vfs_fail_sync_at(0);
    bool fired = fault_vfs_fired() > fired_before;
    tick_set(false);
    return fired;
}

/* ---- the coordinator under test ---- */

#define NPLAIN 2 /* devices of the plain population */
#define NSA 3    /* devices of the secure-aggregation population */

struct w {
    struct fx *f;
    enum mode mode;
    char uri[256];
    struct tc pd[NPLAIN], sd[NSA];
    char *spare;      /* a client of population "er", in the template: each try erases it */
    char er_token[128];
    int64_t pa_id, sa_id;
    int64_t acked_pa, acked_sa;   /* completed rounds the devices were told about */
    int64_t last_version[2];      /* pa, sa: the tag must point here */
    int64_t tmpl_version[2];      /* pa, sa: the tags in the template */
    char tmpl[160];               /* the database after set-up, copied before every try */
    long bad;                     /* findings: unclean answers, hangs, dropped connections */
    long retried;                 /* check-ins told to retry (round creation refused) */
    long found_after_reopen;      /* rounds whose commit fsync failed, whole after the reopen */
    long restarts;
};

static int64_t w_clock(void *user) { return atomic_load(&((struct fx *)user)->now_ms); }

static void w_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (getenv("FL_TEST_VERBOSE") || (level >= FL_LOG_ERROR && getenv("FL_REL_OOM_LOG")))
        fprintf(stderr, "  [coordinator] %s\n", msg);
}

static void w_start(struct w *w) {
    struct fx *f = w->f;
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.allocator = &counting;
    cfg.port = 0;
    cfg.threads = 1; /* one thread: the N-th allocation is the request's */
    cfg.db_path = w->mode == M_ALLOC ? f->db : w->uri;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.clock = w_clock;
    cfg.clock_user = f;
    cfg.logger.fn = w_log;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    char err[256];
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_non_null(f->co);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
    tick_co_set(f->co);
}

static void w_stop(struct w *w) {
    tick_co_set(NULL);
    fl_coord_stop(w->f->co);
    fl_coord_destroy(w->f->co);
    w->f->co = NULL;
    /* Everything the coordinator and its store took from the instance allocator is back. */
    if (atomic_load(&A.live) != 0)
        fprintf(stderr, "allocator: %ld block(s) left after destroy\n", atomic_load(&A.live));
    assert_int_equal(atomic_load(&A.live), 0);
}

static void w_tick(struct w *w, int64_t ms) {
    atomic_fetch_add(&w->f->now_ms, ms);
    fl_coord_tick(w->f->co);
}

/* ---- requests ---- */

/* One request on a fresh connection (the connection's own allocations are walked too).
 * Returns the status, or -1 when no answer came (transport error: a finding). */
static long req(struct w *w, const char *method, const char *path, const char *token,
                const char *ctype, const void *body, size_t len, const char *pid, struct resp *r) {
    memset(r, 0, sizeof(*r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct curl_slist *h = http_prepare(w->f, c, method, path, token, ctype, body, len, pid, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    CURLcode rc = curl_easy_perform(c);
    long st = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    else
        fprintf(stderr, "  %s %s: no answer (%s)\n", method, path, curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    r->status = st;
    return st;
}

/* A clean failure: 500 or 503 with {"error":{"status":S,"code":"..."}} and S the status. */
static bool clean_error(const struct resp *r) {
    if (r->status != 500 && r->status != 503)
        return false;
    json_t *j = r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    bool ok = e && json_integer_value(json_object_get(e, "status")) == r->status &&
              json_is_string(json_object_get(e, "code"));
    json_decref(j);
    return ok;
}

static const char *code_of(const struct resp *r, char *buf, size_t n) {
    json_t *j = r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    snprintf(buf, n, "%s", c ? c : "-");
    json_decref(j);
    return buf;
}

/* ---- the database ---- */

/* Checks the whole database: integrity, and for each population every ended round whole
 * (completed: its model version, participants, ledger entry when DP, audit entry; abandoned:
 * none of these but its audit entry). Returns the number of rounds not ended. */
static int64_t check_db(struct w *w, bool strict) {
    char why[256];
    if (!rel_db_ok(w->f->db, why, sizeof(why))) {
        fprintf(stderr, "database check: %s\n", why);
        fail();
    }
    sqlite3 *db = rel_db_open(w->f->db);
    assert_non_null(db);
    const int64_t pids[2] = {w->pa_id, w->sa_id};
    const int64_t acked[2] = {w->acked_pa, w->acked_sa};
    int64_t open = 0;
    for (int k = 0; k < 2; k++) {
        long long pid = (long long)pids[k];
        if (pid <= 0)
            continue;
        int dp = k == 0; /* pa runs central DP: one ledger entry per completed round */
        open += rel_q(db, "SELECT count(*) FROM rounds WHERE population_id = %lld AND "
                          "state NOT IN (2, 3)", pid);
        int64_t nc = rel_q(db, "SELECT count(*) FROM rounds WHERE population_id = %lld AND "
                               "state = 2", pid);
        if (strict && nc != acked[k]) {
            fprintf(stderr, "population %d: %lld completed rounds, %lld acknowledged\n", k,
                    (long long)nc, (long long)acked[k]);
            fail();
        }
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND r.state = 2 AND ("
                  " r.result_version IS NULL"
                  " OR (SELECT count(*) FROM models m WHERE m.version = r.result_version AND"
                  "     m.parent = r.base_version AND"
                  "     json_extract(m.metadata_json, '$.round_id') = r.id) != 1"
                  " OR (SELECT count(*) FROM models m WHERE"
                  "     json_extract(m.metadata_json, '$.round_id') = r.id) != 1"
                  " OR (SELECT count(*) FROM round_participants q WHERE q.round_id = r.id AND"
                  "     q.state = 2) != r.completed OR r.completed < 1"
                  " OR (SELECT count(*) FROM privacy_ledger l WHERE l.round_id = r.id) != %d)",
                  pid, dp),
            0);
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND r.state = 3 AND ("
                  " r.result_version IS NOT NULL OR r.abandon_reason IS NULL"
                  " OR (SELECT count(*) FROM models m WHERE"
                  "     json_extract(m.metadata_json, '$.round_id') = r.id) != 0"
                  " OR (SELECT count(*) FROM round_participants q WHERE q.round_id = r.id AND"
                  "     q.state = 2) != 0"
                  " OR (SELECT count(*) FROM privacy_ledger l WHERE l.round_id = r.id) != 0)",
                  pid),
            0);
        /* One audit entry per ended round, "completed" for the completed ones. */
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND"
                  " r.state IN (2, 3) AND (SELECT count(*) FROM audit_entries a WHERE"
                  " a.type = 'round' AND json_extract(CAST(a.data AS TEXT), '$.round_id') = r.id)"
                  " != 1",
                  pid),
            0);
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND r.state = 2"
                  " AND (SELECT json_extract(CAST(a.data AS TEXT), '$.outcome') FROM"
                  " audit_entries a WHERE a.type = 'round' AND"
                  " json_extract(CAST(a.data AS TEXT), '$.round_id') = r.id) != 'completed'",
                  pid),
            0);
        /* No stray version: the upload plus one per completed round; the tag is the last. */
        assert_int_equal(rel_q(db, "SELECT count(*) FROM models WHERE population_id = %lld",
                               pid),
                         1 + nc);
        assert_int_equal(rel_q(db, "SELECT count(*) FROM privacy_ledger WHERE population_id = "
                                   "%lld", pid),
                         dp ? nc : 0);
        if (strict)
            assert_int_equal(rel_q(db, "SELECT version FROM tags WHERE name = 'population/%s'",
                                   k == 0 ? "pa" : "sa"),
                             w->last_version[k]);
        else /* the tag moves with the round's commit, in its transaction */
            assert_int_equal(rel_q(db, "SELECT version FROM tags WHERE name = 'population/%s'",
                                   k == 0 ? "pa" : "sa"),
                             rel_q(db, "SELECT coalesce(max(result_version), min(m.version))"
                                       " FROM models m LEFT JOIN rounds r ON r.id ="
                                       " json_extract(m.metadata_json, '$.round_id') AND"
                                       " r.state = 2 WHERE m.population_id = %lld", pid));
    }
    rel_db_close(db);
    return open;
}

/* Rounds whose abandonment a fault refused are retried by the ticker (every second): give it
 * a few ticks, then everything must have ended. */
static void settle(struct w *w) {
    for (int i = 0; i < 5 && check_db(w, false) > 0; i++)
        w_tick(w, 1500);
    assert_int_equal(check_db(w, false), 0);
}

/* Completed rounds of population k and its last result version, from the database. */
static int64_t completed_of(struct w *w, int k, int64_t *last) {
    char q[160];
    snprintf(q, sizeof(q), "SELECT count(*) FROM rounds WHERE population_id = %lld AND state = 2",
             (long long)(k == 0 ? w->pa_id : w->sa_id));
    int64_t nc = db_int(w->f, q);
    snprintf(q, sizeof(q), "SELECT version FROM tags WHERE name = 'population/%s'",
             k == 0 ? "pa" : "sa");
    *last = db_int(w->f, q);
    return nc;
}

/* ---- set-up ---- */

static const char *const CHECKIN = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                                   "\"unmetered\":true,\"idle\":true},"
                                   "\"capabilities\":{\"secagg\":true}}";

static int64_t pop_id(struct w *w, const char *name) {
    char q[128];
    snprintf(q, sizeof(q), "SELECT id FROM populations WHERE name = '%s'", name);
    return db_int(w->f, q);
}

static void w_setup(struct w *w) {
    char *tok[NSA];
    struct popcfg pa = {.name = "pa", .target = NPLAIN, .min = NPLAIN, .secagg = false,
                        .mode = "central", .budget = 1e5};
    setup_population(w->f, &pa, tok, NPLAIN);
    for (int i = 0; i < NPLAIN; i++)
        w->pd[i].tok = tok[i];
    struct popcfg sa = {.name = "sa", .target = NSA, .min = NSA, .secagg = true, .neighbors = 2,
                        .mode = "none"};
    setup_population(w->f, &sa, tok, NSA);
    for (int i = 0; i < NSA; i++)
        w->sd[i].tok = tok[i];
    w->pa_id = pop_id(w, "pa");
    w->sa_id = pop_id(w, "sa");
    w->last_version[0] = db_int(w->f, "SELECT version FROM tags WHERE name = 'population/pa'");
    w->last_version[1] = db_int(w->f, "SELECT version FROM tags WHERE name = 'population/sa'");
    /* Population "er" only holds clients to erase: it never forms a round. */
    struct resp r = http_json(w->f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                              "{\"name\":\"er\",\"allowed_regions\":[\"*\"],"
                              "\"selection\":{\"target\":100,\"over_selection\":1.0,"
                              "\"min_participants\":100,\"require\":[],\"forming_s\":60,"
                              "\"jitter_s\":0,\"min_retry_s\":1,\"max_retry_s\":60},"
                              "\"deadlines_s\":{\"advertise\":30,\"share\":30,\"masked\":60,"
                              "\"unmask\":30},"
                              "\"update\":{\"tensors\":[\"w\"],\"weighting\":\"uniform\","
                              "\"weight_cap\":50},\"strategy\":{\"name\":\"fedavg\"},"
                              "\"secagg\":{\"enabled\":false,\"neighbors\":0,"
                              "\"threshold_fraction\":0.5},"
                              "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0,"
                              "\"modulus_bits\":32}}");
    if (r.status != 201)
        fprintf(stderr, "er: %s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    snprintf(w->er_token, sizeof(w->er_token), "%s",
             json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
}

/* Enrols the client of "er" (unarmed); its token goes to w->spare. */
static void spare_enrol(struct w *w) {
    struct resp r;
    static const char body[] = "{\"population\":\"er\",\"region\":\"EU\"}";
    long st = req(w, "POST", "/v1/enroll", w->er_token, "application/json", body,
                  sizeof(body) - 1, NULL, &r);
    if (st != 201)
        fprintf(stderr, "enrol: %ld %s\n", st, r.body ? r.body : "");
    assert_int_equal(st, 201);
    json_t *j = body_json(&r);
    w->spare = strdup(json_string_value(json_object_get(j, "client_token")));
    assert_non_null(w->spare);
    json_decref(j);
    resp_free(&r);
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    assert_int_equal(ferror(in), 0);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void unlink_side_files(const char *db) {
    char p[200];
    snprintf(p, sizeof(p), "%s-wal", db);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", db);
    unlink(p);
}

/* Every try starts from the same database (the walk's operation must not grow from one N
 * to the next: round creation, for one, reads the whole privacy ledger) and a coordinator
 * created on it; destroying the previous one checks that it left no block behind. */
static void w_reset(struct w *w) {
    if (w->f->co)
        w_stop(w);
    unlink_side_files(w->f->db);
    copy_file(w->tmpl, w->f->db);
    w_start(w);
    w->acked_pa = w->acked_sa = 0;
    w->last_version[0] = w->tmpl_version[0];
    w->last_version[1] = w->tmpl_version[1];
}

/* Called once after w_setup: stops the coordinator (a clean close folds the WAL into the
 * database file) and keeps the file as the template. */
static void w_template(struct w *w) {
    spare_enrol(w);
    w_stop(w);
    snprintf(w->tmpl, sizeof(w->tmpl), "%s/template.db", w->f->dir);
    char p[200];
    snprintf(p, sizeof(p), "%s-wal", w->f->db);
    assert_int_equal(access(p, F_OK), -1); /* no WAL left: the file alone is the state */
    copy_file(w->f->db, w->tmpl);
    w->tmpl_version[0] = w->last_version[0];
    w->tmpl_version[1] = w->last_version[1];
}

/* ---- operations ---- */

/* Steps of one plain round (pa) and one secure-aggregation round (sa), in order. A walk
 * arms one of them; the steps before it run unarmed, and so do the ones after it. */
enum step {
    P_CHECKIN0, P_CHECKIN1, P_TASK0, P_TASK1, P_MODEL0, P_UPDATE0, P_UPDATE1, P_END,
    S_CHECKIN = 0, S_TASK = NSA, S_POST = 2 * NSA, /* 4 phases x (NSA posts + NSA results) */
    S_END = 2 * NSA + 4 * 2 * NSA
};

struct op {
    const char *name;
    int kind;  /* 0 plain round, 1 secagg round, 2 erasure, 3 audit bundle */
    int step;  /* the armed step of the round */
};

static const struct op ops[] = {
    {"checkin", 0, P_CHECKIN0},         /* a check-in joining a forming round */
    {"select", 0, P_CHECKIN1},          /* the check-in that fills and starts the round */
    {"task", 0, P_TASK0},               /* the first task download (builds the task) */
    {"model", 0, P_MODEL0},             /* model download */
    {"accept", 0, P_UPDATE0},           /* plain update accepted */
    {"complete", 0, P_UPDATE1},         /* the update that completes the round: aggregate,
                                           commit, ledger, audit entry, checkpoint */
    {"sa_advertise", 1, S_POST + 0 * 2 * NSA},
    {"sa_share", 1, S_POST + 1 * 2 * NSA},
    {"sa_masked", 1, S_POST + 2 * 2 * NSA},
    {"sa_result", 1, S_POST + 2 * 2 * NSA + NSA}, /* a phase result (long poll) */
    {"sa_complete", 1, S_POST + 3 * 2 * NSA + NSA - 1}, /* the last unmask post: aggregate,
                                                           commit, audit, checkpoint */
    {"erase", 2, 0},
    {"bundle", 3, 0},
};
#define N_OPS (sizeof(ops) / sizeof(ops[0]))

static const char *const phase_names[4] = {"advertise", "share", "masked", "unmask"};

struct round_ctx {
    int64_t rid;
    const uint8_t *out[NSA];
    size_t out_len[NSA];
    bool sa_started;
};

/* Runs step s of a plain round; *ok is the success status. */
static long plain_step(struct w *w, struct round_ctx *rc, int s, struct resp *r, long *ok) {
    char path[160];
    uint8_t body[16 + 4 * 1024];
    struct tc *c;
    switch (s) {
    case P_CHECKIN0:
    case P_CHECKIN1:
        *ok = 200;
        c = &w->pd[s - P_CHECKIN0];
        return req(w, "POST", "/v1/checkin", c->tok, "application/json", CHECKIN,
                   strlen(CHECKIN), NULL, r);
    case P_TASK0:
    case P_TASK1:
        *ok = 200;
        c = &w->pd[s - P_TASK0];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rc->rid);
        return req(w, "GET", path, c->tok, NULL, NULL, 0, c->pid, r);
    case P_MODEL0:
        *ok = 200;
        c = &w->pd[0];
        snprintf(path, sizeof(path), "/v1/models/pa/%lld", (long long)c->task.model_version);
        return req(w, "GET", path, c->tok, NULL, NULL, 0, NULL, r);
    case P_UPDATE0:
    case P_UPDATE1: {
        *ok = 202;
        c = &w->pd[s - P_UPDATE0];
        size_t n = rel_plain_body(c, body);
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rc->rid);
        return req(w, "POST", path, c->tok, "application/octet-stream", body, n, c->pid, r);
    }
    default:
        fail();
        return -1;
    }
}

/* What a successful step leaves for the next ones. */
static void plain_after(struct w *w, struct round_ctx *rc, int s, struct resp *r) {
    if (s == P_CHECKIN0 || s == P_CHECKIN1) {
        json_t *j = body_json(r);
        const char *st = json_string_value(json_object_get(j, "status"));
        if (!st || strcmp(st, "selected") != 0)
            fprintf(stderr, "check-in: %s\n", r->body);
        assert_string_equal(st, "selected");
        struct tc *c = &w->pd[s - P_CHECKIN0];
        snprintf(c->pid, sizeof(c->pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        rc->rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
    } else if (s == P_TASK0 || s == P_TASK1) {
        struct tc *c = &w->pd[s - P_TASK0];
        parse_task(r, &c->task);
        assert_int_equal(c->task.rid, rc->rid);
        encode(c, s - P_TASK0);
    } else if (s == P_MODEL0) {
        char sig[128];
        assert_non_null(header_in(r, "Flotilla-Signature", sig, sizeof(sig)));
    }
}

static long sa_step(struct w *w, struct round_ctx *rc, int s, struct resp *r, long *ok) {
    char path[160];
    if (s < S_TASK) {
        *ok = 200;
        return req(w, "POST", "/v1/checkin", w->sd[s].tok, "application/json", CHECKIN,
                   strlen(CHECKIN), NULL, r);
    }
    if (s < S_POST) {
        struct tc *c = &w->sd[s - S_TASK];
        *ok = 200;
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rc->rid);
        return req(w, "GET", path, c->tok, NULL, NULL, 0, c->pid, r);
    }
    int q = s - S_POST, ph = q / (2 * NSA), k = q % (2 * NSA);
    if (k < NSA) {
        struct tc *c = &w->sd[k];
        *ok = 202;
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s", (long long)rc->rid,
                 phase_names[ph]);
        return req(w, "POST", path, c->tok, "application/octet-stream", rc->out[k],
                   rc->out_len[k], c->pid, r);
    }
    struct tc *c = &w->sd[k - NSA];
    *ok = 200;
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s/result?wait=10", (long long)rc->rid,
             phase_names[ph]);
    return req(w, "GET", path, c->tok, NULL, NULL, 0, c->pid, r);
}

static void sa_after(struct w *w, struct round_ctx *rc, int s, struct resp *r) {
    if (s < S_TASK) {
        json_t *j = body_json(r);
        const char *st = json_string_value(json_object_get(j, "status"));
        if (!st || strcmp(st, "selected") != 0)
            fprintf(stderr, "check-in: %s\n", r->body);
        assert_string_equal(st, "selected");
        snprintf(w->sd[s].pid, sizeof(w->sd[s].pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        rc->rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
        return;
    }
    if (s < S_POST) {
        struct tc *c = &w->sd[s - S_TASK];
        parse_task(r, &c->task);
        assert_int_equal(c->task.rid, rc->rid);
        encode(c, s - S_TASK);
        if (s == S_POST - 1) {
            secagg_clients_start(w->sd, NSA, rc->rid, rc->out, rc->out_len);
            rc->sa_started = true;
        }
        return;
    }
    int q = s - S_POST, ph = q / (2 * NSA), k = q % (2 * NSA);
    if (k >= NSA && ph < 3) {
        int i = k - NSA;
        fl_status st = fl_secagg_client_handle(w->sd[i].sa, (const uint8_t *)r->body, r->len,
                                               &rc->out[i], &rc->out_len[i]);
        if (st != FL_OK)
            fprintf(stderr, "device %d %s: %s\n", i, phase_names[ph],
                    fl_secagg_client_errmsg(w->sd[i].sa));
        assert_int_equal(st, FL_OK);
    }
}

/* A message accepted before (the earlier answer was lost to the fault) is answered 200
 * with Idempotent-Replayed: the same acceptance as the 202. */
static long replayed_ok(const struct resp *r, long st, long ok) {
    char v[16];
    if (ok == 202 && st == 200 && header_in(r, "Idempotent-Replayed", v, sizeof(v)) &&
        strcmp(v, "true") == 0)
        return 202;
    return st;
}

static bool is_checkin(int kind, int s) {
    return kind == 0 ? (s == P_CHECKIN0 || s == P_CHECKIN1) : s < S_TASK;
}

/* State of round rid in the database: 2 completed, 3 abandoned, else still open. */
static int64_t round_state(struct w *w, int64_t rid) {
    char q[128];
    snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
    return db_int(w->f, q);
}

/* Whether the round's status, asked by its first device, says "completed". */
static bool told_completed(struct w *w, int kind, const struct round_ctx *rc) {
    struct tc *c = kind == 0 ? &w->pd[0] : &w->sd[0];
    if (!rc->rid || !c->pid[0])
        return false;
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)rc->rid);
    struct resp r;
    long st = req(w, "GET", path, c->tok, NULL, NULL, 0, c->pid, &r);
    json_t *j = st == 200 && r.body ? json_loadb(r.body, r.len, 0, NULL) : NULL;
    const char *s = json_string_value(json_object_get(j, "state"));
    bool done = s && strcmp(s, "completed") == 0;
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "  round %lld after the failed fsync: %ld %s\n", (long long)rc->rid, st,
                s ? s : "-");
    json_decref(j);
    resp_free(&r);
    return done;
}

/* After a failed fsync: the store must acknowledge no write until it is reopened. An
 * enrolment (it writes a client row) must be refused, and leave no row. */
static void check_poisoned(struct w *w) {
    int64_t before = db_int(w->f, "SELECT count(*) FROM clients");
    struct resp r;
    static const char body[] = "{\"population\":\"er\",\"region\":\"EU\"}";
    long st = req(w, "POST", "/v1/enroll", w->er_token, "application/json", body,
                  sizeof(body) - 1, NULL, &r);
    char code[64];
    if (st != 503 || strcmp(code_of(&r, code, sizeof(code)), "storage_unavailable") != 0) {
        fprintf(stderr, "after a failed fsync an enrolment was answered %ld %s\n", st,
                r.body ? r.body : "");
        w->bad++;
    }
    resp_free(&r);
    assert_int_equal(db_int(w->f, "SELECT count(*) FROM clients"), before);
}

static bool run_round(struct w *w, int kind, int armed, long n, const char *what, bool reset);

/* Reopens: the coordinator is destroyed and created again on the same files (the restart
 * abandons a round in flight). Everything acknowledged before must be there (check_db), and
 * the reopened service must run a round to its commit. */
static void restart(struct w *w) {
    if (w->sd[0].sa)
        secagg_clients_free(w->sd, NSA);
    w_stop(w);
    w_start(w);
    w->restarts++;
    settle(w);
    /* Nothing acknowledged is lost. A commit whose fsync failed was not acknowledged, but
     * its WAL frames may have been written whole: recovery then finds that round (whole). */
    for (int k = 0; k < 2; k++) {
        int64_t last, nc = completed_of(w, k, &last);
        int64_t *acked = k == 0 ? &w->acked_pa : &w->acked_sa;
        if (nc != *acked && nc != *acked + 1) {
            fprintf(stderr, "after the restart population %d has %lld completed rounds, %lld "
                    "acknowledged\n", k, (long long)nc, (long long)*acked);
            fail();
        }
        if (nc == *acked + 1) {
            w->found_after_reopen++;
            if (getenv("FL_TEST_VERBOSE"))
                fprintf(stderr, "  after the reopen: a round not acknowledged is committed\n");
        }
        *acked = nc;
        w->last_version[k] = last;
    }
    check_db(w, true);
    run_round(w, 0, -1, 0, "after the restart", false);
}

/* The armed request came back: success, or a clean 5xx; then the service is healthy and
 * the database whole. Returns true when the request succeeded. */
static bool judge(struct w *w, const char *what, long n, long st, long ok, struct resp *r,
                  bool fired) {
    char code[64];
    if (st == ok) {
        if (getenv("FL_TEST_VERBOSE"))
            fprintf(stderr, "  %s N=%ld: %ld (fired %d)\n", what, n, st, fired);
    } else if (clean_error(r)) {
        code_of(r, code, sizeof(code));
        if (getenv("FL_TEST_VERBOSE"))
            fprintf(stderr, "  %s N=%ld: %ld %s\n", what, n, st, code_of(r, code, sizeof(code)));
        if (w->mode != M_ALLOC && (st != 503 || strcmp(code, "storage_unavailable") != 0)) {
            fprintf(stderr, "%s %s N=%ld: %ld %s, not 503 storage_unavailable: %s\n",
                    mode_name[w->mode], what, n, st, code, r->body);
            w->bad++;
        }
        /* Out of memory is the service's condition: 503 with a Retry-After. The one 500 left
         * is the HTTP layer's fixed body for a reply that could not be built at all. */
        if (w->mode == M_ALLOC && st != 503 &&
            !(st == 500 && r->body && strstr(r->body, "\"message\":\"out of memory\"}"))) {
            fprintf(stderr, "alloc %s N=%ld: %ld %s, not 503: %s\n", what, n, st, code,
                    r->body);
            w->bad++;
        }
    } else {
        fprintf(stderr, "%s %s N=%ld: answered %ld (want %ld or a clean 500/503): %.300s\n",
                mode_name[w->mode], what, n, st, ok, r->body ? r->body : "");
        w->bad++;
    }
    if (!fired && st != ok) {
        fprintf(stderr, "%s %s N=%ld: failed (%ld) without the fault firing\n",
                mode_name[w->mode], what, n, st);
        w->bad++;
    }
    assert_int_equal(rel_healthz(w->f->port), 200);
    check_db(w, false);
    return st == ok;
}

/* One round with step `armed` armed at n (armed < 0: none). Returns whether the fault fired;
 * *restarted says the coordinator was reopened (failed fsync). */
static bool run_round(struct w *w, int kind, int armed, long n, const char *what, bool reset) {
    struct round_ctx rc;
    memset(&rc, 0, sizeof(rc));
    if (reset)
        w_reset(w);
    w_tick(w, 120 * 1000); /* check-in intervals and round spacing pass */
    int end = kind == 0 ? P_END : S_END;
    bool fired = false, gone = false;
    for (int s = 0; s < end && !gone; s++) {
        struct resp r;
        long ok, st;
        bool is_armed = s == armed;
        if (is_armed)
            arm(w->mode, n);
        st = kind == 0 ? plain_step(w, &rc, s, &r, &ok) : sa_step(w, &rc, s, &r, &ok);
        st = replayed_ok(&r, st, ok);
        if (is_armed) {
            fired = disarm(w->mode);
            bool good = judge(w, what, n, st, ok, &r, fired);
            if (fired && w->mode == M_SYNC) {
                check_poisoned(w);
                resp_free(&r);
                /* What a device hears now is acknowledged: a round reported completed must
                 * be in the database after the reopen (restart counts it). */
                if (told_completed(w, kind, &rc)) {
                    if (kind == 0)
                        w->acked_pa++;
                    else
                        w->acked_sa++;
                }
                restart(w); /* the round in flight is abandoned ("coordinator restarted") */
                return fired;
            }
            if (!good && rc.rid && round_state(w, rc.rid) == 3) {
                /* The fault abandoned the round (e.g. the check-in that filled it failed at
                 * the round's start and was not answered "selected"): replaying would only
                 * form the next round with this device alone. */
                gone = true;
                resp_free(&r);
                break;
            }
            bool later = good && is_checkin(kind, s) && r.body && strstr(r.body, "\"retry\"");
            if (later) {
                /* A round that could not be created (logged "round not started") is tried
                 * again after the population's back-off: the device was told to retry. */
                w_tick(w, 61 * 1000);
                w->retried++;
            }
            if (!good || later) {
                /* The same request again, unarmed. */
                resp_free(&r);
                st = kind == 0 ? plain_step(w, &rc, s, &r, &ok) : sa_step(w, &rc, s, &r, &ok);
                st = replayed_ok(&r, st, ok);
            }
        }
        if (st != ok) {
            /* Only an ended round excuses a failure here: a commit the fault refused
             * abandons the round (410 or the outcome says so). */
            int64_t state = rc.rid ? round_state(w, rc.rid) : -1;
            if (state == 3 || (rc.rid && (st == 410 || st == 404))) {
                gone = true;
                resp_free(&r);
                break;
            }
            fprintf(stderr, "%s %s N=%ld: step %d answered %ld (want %ld): %.300s\n",
                    mode_name[w->mode], what, n, s, st, ok, r.body ? r.body : "");
            fail();
        }
        if (kind == 0)
            plain_after(w, &rc, s, &r);
        else
            sa_after(w, &rc, s, &r);
        resp_free(&r);
    }
    if (rc.sa_started)
        secagg_clients_free(w->sd, NSA);
    /* The round has ended: completed (the devices' last answers said so) or abandoned. */
    settle(w);
    int64_t state = round_state(w, rc.rid);
    if (state != 2 && state != 3)
        fprintf(stderr, "round %lld in state %lld\n", (long long)rc.rid, (long long)state);
    assert_true(state == 2 || state == 3);
    if (state == 2) {
        if (kind == 0)
            w->acked_pa++;
        else
            w->acked_sa++;
        char q[128];
        snprintf(q, sizeof(q), "SELECT result_version FROM rounds WHERE id = %lld",
                 (long long)rc.rid);
        w->last_version[kind] = db_int(w->f, q);
    }
    /* The round was abandoned only where the fault could explain it. */
    if (state == 3 && !fired) {
        fprintf(stderr, "%s %s N=%ld: round %lld abandoned without a fault\n", mode_name[w->mode],
                what, n, (long long)rc.rid);
        fail();
    }
    check_db(w, true);
    return fired;
}

/* Erasure of the template's client of "er" (each try starts from the template). */
static bool run_erase(struct w *w, long n) {
    w_reset(w);
    const char *tok = w->spare;
    char cid[17], path[96], q[160];
    memcpy(cid, tok + 4, 16);
    cid[16] = '\0';
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    snprintf(q, sizeof(q), "SELECT count(*) FROM clients WHERE client_id = '%s'", cid);
    int64_t erasures = db_int(w->f, "SELECT count(*) FROM audit_entries WHERE type = 'erasure'");
    struct resp r;
    arm(w->mode, n);
    long st = req(w, "POST", path, ADMIN_TOKEN, "application/json", NULL, 0, NULL, &r);
    bool fired = disarm(w->mode);
    bool good = judge(w, "erase", n, st, 200, &r, fired);
    resp_free(&r);
    for (int pass = 0; pass < 2; pass++) {
        /* Both or neither: the client row gone and its erasure entry logged (before and,
         * after a failed fsync, after the restart). */
        int64_t gone = db_int(w->f, q) == 0;
        int64_t logged =
            db_int(w->f, "SELECT count(*) FROM audit_entries WHERE type = 'erasure'") - erasures;
        if (gone != logged || (good && !gone)) {
            fprintf(stderr, "erase N=%ld: answered %ld, row gone %lld, erasure entries +%lld\n",
                    n, st, (long long)gone, (long long)logged);
            fail();
        }
        if (pass == 1 || !fired || w->mode != M_SYNC)
            break;
        check_poisoned(w);
        restart(w);
    }
    if (db_int(w->f, q) != 0) {
        st = req(w, "POST", path, ADMIN_TOKEN, "application/json", NULL, 0, NULL, &r);
        if (st != 200)
            fprintf(stderr, "erase retry: %ld %s\n", st, r.body ? r.body : "");
        assert_int_equal(st, 200);
        resp_free(&r);
        assert_int_equal(db_int(w->f, q), 0);
    }
    return fired;
}

static bool run_bundle(struct w *w, long n) {
    w_reset(w);
    struct resp r;
    arm(w->mode, n);
    long st = req(w, "GET", "/v1/admin/audit/bundle", ADMIN_TOKEN, NULL, NULL, 0, NULL, &r);
    bool fired = disarm(w->mode);
    bool good = judge(w, "bundle", n, st, 200, &r, fired);
    resp_free(&r);
    if (fired && w->mode == M_SYNC) {
        check_poisoned(w);
        restart(w);
    }
    if (!good) {
        st = req(w, "GET", "/v1/admin/audit/bundle", ADMIN_TOKEN, NULL, NULL, 0, NULL, &r);
        assert_int_equal(st, 200);
        resp_free(&r);
    }
    return fired;
}

static bool run_op(struct w *w, const struct op *o, long n) {
    switch (o->kind) {
    case 0:
    case 1:
        return run_round(w, o->kind, o->step, n, o->name, true);
    case 2:
        return run_erase(w, n);
    default:
        return run_bundle(w, n);
    }
}

static bool op_selected(const char *name) {
    const char *sel = getenv("FL_REL_OOM_OPS");
    if (!sel || !*sel)
        return true;
    size_t n = strlen(name);
    for (const char *p = sel; p && *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && strncmp(p, name, n) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/* ---- the walks ---- */

static void walk(enum mode first, enum mode last) {
    uint64_t seed = rel_seed0();
    fprintf(stderr, "seed %llu\n", (unsigned long long)seed);
    json_set_alloc_funcs(j_malloc, j_free);
    struct w *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->f = fx_new();
    w->mode = first;
    if (first != M_ALLOC) {
        if (!fault_vfs_uri_supported()) {
            fprintf(stderr, "SQLite without URI file names: I/O walk skipped\n");
            fx_free(w->f);
            free(w);
            skip();
        }
        assert_int_equal(fault_vfs_register(), SQLITE_OK);
        fault_vfs_uri(w->uri, sizeof(w->uri), w->f->db);
    }
    pthread_t ticker;
    tick_stop = false;
    assert_int_equal(pthread_create(&ticker, NULL, ticker_main, NULL), 0);
    w_start(w);
    w_setup(w);
    w_template(w);
    /* CI: about `points` failure points per operation, spread evenly over its events (a
     * calibration run counts them) from a random offset; long: every N. */
    long points_ci = rel_envl("FL_REL_OOM_POINTS", first == M_ALLOC ? 4 : 3);
    long cap = rel_envl("FL_REL_OOM_MAX_N", 100000);
    double t0 = rel_mono_s();
    for (enum mode m = first; m <= last; m++) {
        w->mode = m;
        for (size_t i = 0; i < N_OPS; i++) {
            if (!op_selected(ops[i].name))
                continue;
            double t1 = rel_mono_s();
            long stride = 1;
            if (!rel_long()) {
                assert_false(run_op(w, &ops[i], 1L << 40)); /* calibration: never fires */
                stride = points_ci > 0 ? last_events / points_ci : 1;
                stride = stride < 1 ? 1 : stride;
                if (last_events == 0) { /* e.g. no write in a download: nothing to walk */
                    fprintf(stderr, "%-6s %-12s    0 failure point(s): no %s in it\n",
                            mode_name[m], ops[i].name, mode_name[m]);
                    continue;
                }
            }
            long points = 0, n = 1 + (long)(rel_next(&seed) % (uint64_t)stride);
            long restarts0 = w->restarts;
            /* N until the operation runs to its end without reaching the fault. */
            while (n <= cap && run_op(w, &ops[i], n)) {
                points++;
                n += stride;
            }
            assert_true(n <= cap);
            fprintf(stderr,
                    "%-6s %-12s %4ld failure point(s) walked (stride %ld, N up to %ld), "
                    "%ld restart(s), %.1f s\n",
                    mode_name[m], ops[i].name, points, stride, n - 1,
                    w->restarts - restarts0, rel_mono_s() - t1);
        }
    }
    fprintf(stderr,
            "%s walks: %.1f s, %ld allocations counted, %ld unclean answer(s), %ld check-in(s) "
            "told to retry, %ld unacknowledged round(s) found committed after a reopen\n",
            first == M_ALLOC ? "allocation" : "I/O", rel_mono_s() - t0, atomic_load(&A.count),
            w->bad, w->retried, w->found_after_reopen);
    w_stop(w);
    pthread_mutex_lock(&tick_mu);
    tick_stop = true;
    pthread_mutex_unlock(&tick_mu);
    pthread_join(ticker, NULL);
    assert_int_equal(atomic_load(&A.bad_size), 0);
    clients_free(w->pd, NPLAIN);
    clients_free(w->sd, NSA);
    free(w->spare);
    unlink(w->tmpl);
    fx_free(w->f);
    long bad = w->bad;
    free(w);
    if (first != M_ALLOC)
        fault_vfs_reset();
    assert_int_equal(bad, 0);
}

static void test_alloc_walk(void **state) {
    (void)state;
    walk(M_ALLOC, M_ALLOC);
}

static void test_io_walk(void **state) {
    (void)state;
    walk(M_WRITE, M_SYNC);
}

int main(int argc, char **argv) {
    /* Before anything initialises SQLite (the fault VFS registration would). */
    if (!getenv("FL_REL_OOM_NO_SQLITE") && sqlite3_config(SQLITE_CONFIG_MALLOC, &sq_methods)) {
        fprintf(stderr, "sqlite3_config(SQLITE_CONFIG_MALLOC) refused\n");
        return 1;
    }
    if (!getenv("FL_REL_OOM_NO_OPENSSL") && !CRYPTO_set_mem_functions(os_malloc, os_realloc,
                                                                      os_free)) {
        fprintf(stderr, "CRYPTO_set_mem_functions refused\n");
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    bool io = argc > 1 && strcmp(argv[1], "--io") == 0;
    const struct CMUnitTest alloc_tests[] = {cmocka_unit_test(test_alloc_walk)};
    const struct CMUnitTest io_tests[] = {cmocka_unit_test(test_io_walk)};
    int rc = io ? cmocka_run_group_tests(io_tests, NULL, NULL)
                : cmocka_run_group_tests(alloc_tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
