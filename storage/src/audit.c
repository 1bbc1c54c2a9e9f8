/* The audit log inside the store: appending entries (with the RFC 9162 tree kept as
 * complete-subtree hashes in audit_tree), erasure and retention, proofs, signed
 * checkpoints and bundle export. Entry schema and rules: audit_rules.c; notes:
 * audit_note.c; offline verification: audit_bundle.c. Design: docs/audit.md. */

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "audit_internal.h"
#include "merkle_internal.h"
#include "store_internal.h"

/* ---- sizes ---- */

size_t fl_store_audit_hash_bytes(void) {
    return FL_STORE_AUDIT_HASH_BYTES;
}
size_t fl_store_audit_public_key_bytes(void) {
    return FL_STORE_AUDIT_PUBLIC_KEY_BYTES;
}
size_t fl_store_audit_secret_key_bytes(void) {
    return FL_STORE_AUDIT_SECRET_KEY_BYTES;
}
size_t fl_store_audit_pseudonym_key_bytes(void) {
    return FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES;
}
size_t fl_store_audit_pseudonym_bytes(void) {
    return FL_STORE_AUDIT_PSEUDONYM_BYTES;
}
size_t fl_store_audit_proof_max(void) {
    return FL_STORE_AUDIT_PROOF_MAX;
}
size_t fl_store_audit_entry_max(void) {
    return FL_STORE_AUDIT_ENTRY_MAX;
}
size_t fl_store_audit_origin_max(void) {
    return FL_STORE_AUDIT_ORIGIN_MAX;
}
size_t fl_store_audit_phases(void) {
    return FL_STORE_AUDIT_PHASES;
}

/* ---- per-call statements ---- */

sqlite3_stmt *fl__store_audit_stmt(struct fl__store_audit_stmts *c,
                                   enum fl__store_audit_stmt_id id) {
    /* defensive: ids are enum constants below the count */
    if (!FL_ALWAYS((unsigned)id < FL__AUDIT_STMT_COUNT)) // GCOVR_EXCL_BR_LINE
        return NULL;
    if (!c->s[id]) {
        int rc = sqlite3_prepare_v3(c->st->db, fl__store_audit_sql(id), -1, 0, &c->s[id], NULL);
        if (rc != SQLITE_OK) {
            fl__store_sqlerr(c->st, rc, "preparing an audit statement");
            sqlite3_finalize(c->s[id]);
            c->s[id] = NULL;
            return NULL;
        }
    }
    return c->s[id];
}

void fl__store_audit_stmts_done(struct fl__store_audit_stmts *c) {
    for (int i = 0; i < FL__AUDIT_STMT_COUNT; i++) {
        sqlite3_finalize(c->s[i]);
        c->s[i] = NULL;
    }
}

/* The bytes of column col as sqlite3_column_blob gives them (NULL for an empty value),
 * telling an empty value from a failed allocation: an entry that a damaged row holds as
 * a number is converted to text on reading, which can run out of memory; SQLite then
 * returns NULL and sets SQLITE_NOMEM (its documented test). FL_ERR_NOMEM in that case. */
static fl_status column_data(sqlite3_stmt *s, int col, const void **p, size_t *n) {
    *p = sqlite3_column_blob(s, col);
    *n = (size_t)sqlite3_column_bytes(s, col);
    return *p || sqlite3_errcode(sqlite3_db_handle(s)) != SQLITE_NOMEM ? FL_OK : FL_ERR_NOMEM;
}

/* Steps a write statement to completion and resets it. */
static fl_status step_done(fl_store *st, sqlite3_stmt *s, const char *what) {
    int rc = sqlite3_step(s);
    fl_status r = rc == SQLITE_DONE ? FL_OK : fl__store_sqlerr(st, rc, what);
    fl__store_done(s);
    return r;
}

#define STMT(c, id, s)                                                                             \
    do {                                                                                           \
        (s) = fl__store_audit_stmt((c), (id));                                                     \
        if (!(s))                                                                                  \
            return (c)->st->err.code;                                                              \
    } while (0)

/* ---- the tree in SQLite ---- */

struct db_src {
    struct fl__store_audit_stmts *c;
};

static fl_status db_get(void *ctx, unsigned level, uint64_t idx, uint8_t out[32]) {
    struct fl__store_audit_stmts *c = ctx;
    sqlite3_stmt *s;
    STMT(c, FL__AUDIT_NODE_GET, s);
    sqlite3_bind_int64(s, 1, level);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_ROW && sqlite3_column_bytes(s, 0) == 32)
        memcpy(out, sqlite3_column_blob(s, 0), 32);
    else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        r = fl__err_set(&c->st->err, FL_ERR_CORRUPT,
                        "audit tree node (level %u, index %" PRIu64 ") is missing", level, idx);
    else
        r = fl__store_sqlerr(c->st, rc, "reading the audit tree");
    fl__store_done(s);
    return r;
}

static struct fl__store_merkle_src db_source(struct fl__store_audit_stmts *c) {
    struct fl__store_merkle_src src = {db_get, c};
    return src;
}

static fl_status log_size(struct fl__store_audit_stmts *c, int64_t *size) {
    sqlite3_stmt *s;
    STMT(c, FL__AUDIT_SIZE, s);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_ROW)
        *size = sqlite3_column_int64(s, 0);
    else
        r = fl__store_sqlerr(c->st, rc, "reading the audit log size");
    fl__store_done(s);
    return r;
}

/* The time of the log's last entry into *t (0 for an empty log). */
static fl_status last_time(struct fl__store_audit_stmts *c, int64_t *t) {
    sqlite3_stmt *s;
    STMT(c, FL__AUDIT_LAST_TIME, s);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    *t = 0;
    if (rc == SQLITE_ROW)
        *t = sqlite3_column_int64(s, 0);
    else if (rc != SQLITE_DONE)
        r = fl__store_sqlerr(c->st, rc, "reading the audit log's last time");
    fl__store_done(s);
    return r;
}

/* The time a new entry gets: the time given (the store clock, or a time the caller derived
 * values from), but never before the last entry's. Why: the verifier refuses a log whose
 * entry times decrease, so that an auditor can rely on times being in log order; yet the
 * store clock (a wall clock) can step back (NTP, a restored VM), and a revocation takes
 * the caller's revoked_at when the caller's clock is ahead, so the next entry on the store
 * clock could be earlier. Taking the maximum keeps the log ordered whatever the clocks do:
 * an entry written during a step back carries the previous entry's time. */
static fl_status entry_time(struct fl__store_audit_stmts *c, int64_t given, int64_t *t) {
    int64_t prev = 0;
    fl_status r = last_time(c, &prev);
    *t = given > prev ? given : prev;
    return r;
}

static fl_status node_put(struct fl__store_audit_stmts *c, unsigned level, int64_t idx,
                          const uint8_t h[32]) {
    sqlite3_stmt *s;
    STMT(c, FL__AUDIT_NODE_INSERT, s);
    sqlite3_bind_int64(s, 1, level);
    sqlite3_bind_int64(s, 2, idx);
    sqlite3_bind_blob(s, 3, h, 32, SQLITE_STATIC);
    return step_done(c->st, s, "writing the audit tree");
}

/* ---- population state from the log ---- */

/* Reads the row of statement s (bound by the caller) into a parsed entry; *e stays NULL
 * when there is no row. */
static fl_status latest_row(struct fl__store_audit_stmts *c, sqlite3_stmt *s, json_t **e,
                            int64_t *seq) {
    char why[160];
    fl_status r = FL_OK;
    *e = NULL;
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const void *data = NULL;
        size_t n = 0;
        *seq = sqlite3_column_int64(s, 0);
        /* An empty value (a damaged row) parses as a 0-byte line. */
        fl_status pr = column_data(s, 1, &data, &n);
        if (pr == FL_OK)
            pr = fl__store_audit_parse(data, n, e, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "out of memory");
        if (pr != FL_OK)
            r = fl__err_set(&c->st->err, pr == FL_ERR_NOMEM ? FL_ERR_NOMEM : FL_ERR_CORRUPT,
                            "audit entry %lld: %s", (long long)*seq, why);
    } else if (rc != SQLITE_DONE) {
        r = fl__store_sqlerr(c->st, rc, "reading the audit log");
    }
    fl__store_done(s);
    return r;
}

/* Rebuilds what the log says about population id. Each part of the state is set by one
 * kind of entry (terms: population_created / config_changed; epsilon total: round /
 * budget_refused; last round: round; current model: completed round / model_registered),
 * so replaying the latest entry of each kind, oldest first, gives the same state as
 * replaying them all: a handful of indexed reads instead of a scan. */
static fl_status load_pop(struct fl__store_audit_stmts *c, int64_t id,
                          struct fl__store_audit_pop *pop) {
    static const char *const types[] = {"population_created", "config_changed", "round",
                                        "budget_refused", "model_registered"};
    enum { N = 6 };
    json_t *e[N] = {NULL};
    int64_t seq[N] = {0};
    sqlite3_stmt *s;
    fl_status r = FL_OK;
    fl__store_audit_pop_init(pop);
    STMT(c, FL__AUDIT_ENTRY_POP_LATEST, s);
    for (int i = 0; i < 5 && r == FL_OK; i++) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, types[i], -1, SQLITE_STATIC);
        r = latest_row(c, s, &e[i], &seq[i]);
    }
    /* The latest round was abandoned: the current model comes from an earlier one. */
    const char *outcome = e[2] ? json_string_value(json_object_get(e[2], "outcome")) : NULL;
    if (r == FL_OK && e[2] && (!outcome || strcmp(outcome, "completed") != 0)) {
        s = fl__store_audit_stmt(c, FL__AUDIT_ENTRY_POP_COMPLETED);
        if (!s) {
            r = c->st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, id);
            r = latest_row(c, s, &e[5], &seq[5]);
        }
    }
    /* Replay oldest first (n <= 6: selection order). */
    for (int done = 0; r == FL_OK && done < N; done++) {
        int k = -1;
        for (int i = 0; i < N; i++)
            if (e[i] && (k < 0 || seq[i] < seq[k]))
                k = i;
        if (k < 0)
            break;
        r = fl__store_audit_apply(e[k], pop);
        json_decref(e[k]);
        e[k] = NULL;
        pop->seen = 1;
    }
    for (int i = 0; i < N; i++)
        json_decref(e[i]);
    if (pop->seen)
        pop->id = id;
    return r;
}

/* ---- appending ---- */

/* Appends entry e (fields of its type already set; seq, v and time are added here) after
 * checking it against pop (NULL: the population has no entry yet, or a global entry),
 * then updates pop. Runs inside the caller's op. */
static fl_status append_entry(struct fl__store_audit_stmts *c, json_t *e,
                              struct fl__store_audit_pop *pop, int64_t *seq_out) {
    fl_store *st = c->st;
    int64_t seq = 0;
    char *bytes = NULL;
    size_t len = 0;
    char why[256];
    int budget = 0;
    fl_status r = log_size(c, &seq);
    if (r != FL_OK)
        return r;
    /* A caller that derived values from the time (retention) sets it itself, taken from
     * entry_time already; the clamp below then changes nothing. */
    json_t *t = json_object_get(e, "time");
    int64_t now = t ? (int64_t)json_integer_value(t) : fl__store_now(st);
    if (now < 0)
        now = 0;
    r = entry_time(c, now, &now);
    if (r != FL_OK)
        return r;
    if (json_object_set_new(e, "seq", json_integer(seq)) ||
        json_object_set_new(e, "v", json_integer(1)) ||
        json_object_set_new(e, "time", json_integer(now)))
        return fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    const struct fl__store_audit_pop *state = pop && pop->seen ? pop : NULL;
    if (fl__store_audit_check(e, seq, state, why, sizeof(why), &budget) != 0)
        return fl__err_set(&st->err, budget ? FL_ERR_BUDGET : FL_ERR_MISUSE,
                           "audit entry refused: %s", why);
    r = fl__store_audit_dump(&st->alloc, e, FL_STORE_AUDIT_ENTRY_MAX, &bytes, &len);
    if (r != FL_OK)
        return fl__err_set(&st->err, r, "%s",
                           r == FL_ERR_TOO_LARGE ? "audit entry is longer than 64 KiB"
                                                 : "out of memory encoding an audit entry");
    uint8_t h[32];
    fl__store_merkle_leaf(h, bytes, len);
    sqlite3_stmt *s = fl__store_audit_stmt(c, FL__AUDIT_ENTRY_INSERT);
    if (!s) {
        r = st->err.code;
        goto out_free;
    }
    int64_t pid = fl__store_audit_entry_pop(e);
    sqlite3_bind_int64(s, 1, seq);
    sqlite3_bind_text(s, 2, json_string_value(json_object_get(e, "type")), -1, SQLITE_STATIC);
    if (pid > 0)
        sqlite3_bind_int64(s, 3, pid);
    sqlite3_bind_int64(s, 4, now);
    sqlite3_bind_blob(s, 5, bytes, (int)len, SQLITE_STATIC);
    r = step_done(st, s, "appending to the audit log");
    /* Leaf, then every subtree this leaf completes: node (l, j) with j odd closes its
     * parent (l + 1, j / 2). */
    if (r == FL_OK)
        r = node_put(c, 0, seq, h);
    uint64_t j = (uint64_t)seq;
    unsigned level = 0;
    while (r == FL_OK && (j & 1)) {
        uint8_t left[32];
        r = db_get(c, level, j - 1, left);
        if (r == FL_OK) {
            fl__store_merkle_node(h, left, h);
            j >>= 1;
            level++;
            r = node_put(c, level, (int64_t)j, h);
        }
    }
    if (r == FL_OK && pop)
        r = fl__store_audit_apply(e, pop);
    /* pop is only passed for entries of a population (every type but retention) */
    if (r == FL_OK && pop)
        pop->seen = 1;
    if (r == FL_OK && seq_out)
        *seq_out = seq;
out_free:
    fl__free(&st->alloc, bytes, len + 1);
    return r;
}

static json_t *new_entry(const char *type) {
    json_t *e = json_object();
    if (e && json_object_set_new(e, "type", json_string(type)) != 0) {
        json_decref(e);
        return NULL;
    }
    return e;
}

/* Sets key to a new value, taking the reference (released on failure too); nonzero on
 * failure (value NULL or out of memory). */
static int put(json_t *o, const char *key, json_t *v) {
    return !v || json_object_set_new(o, key, v) != 0;
}

/* Sets key to v (not NULL), adding a reference: the caller still releases its own. */
static int put_ref(json_t *o, const char *key, json_t *v) {
    return json_object_set(o, key, v) != 0;
}

static json_t *int_object(const char *const *keys, const int64_t *vals, size_t n) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++)
        if (put(o, keys[i], json_integer(vals[i]))) {
            json_decref(o);
            return NULL;
        }
    return o;
}

static json_t *hex_string(const uint8_t *h) {
    char hex[65];
    fl__store_audit_hex(hex, h, 32);
    return json_string(hex);
}

static json_t *sha_string(const void *data, size_t len) {
    uint8_t h[32];
    crypto_hash_sha256(h, data, len);
    return hex_string(h);
}

/* Reads population id's row. Copies name; returns the other columns through the statement,
 * which the caller resets. */
static fl_status pop_row(struct fl__store_audit_stmts *c, int64_t id, sqlite3_stmt **out) {
    sqlite3_stmt *s;
    STMT(c, FL__AUDIT_POP_GET, s);
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *out = s;
        return FL_OK;
    }
    fl__store_done(s);
    if (rc == SQLITE_DONE)
        return fl__err_set(&c->st->err, FL_ERR_NOT_FOUND, "population %lld does not exist",
                           (long long)id);
    return fl__store_sqlerr(c->st, rc, "reading a population");
}

/* Fills the fields shared by population_created and config_changed. */
static int set_terms(json_t *e, const char *name, int64_t id, const char *config, int64_t eps_e9,
                     int64_t delta_e18, const char *regions_json) {
    static const char *const kb[] = {"epsilon_e9", "delta_e18"};
    int64_t bv[2] = {eps_e9, delta_e18};
    return put(e, "allowed_regions", json_loads(regions_json, JSON_REJECT_DUPLICATES, NULL)) ||
           put(e, "budget", int_object(kb, bv, 2)) || put(e, "population", json_string(name)) ||
           put(e, "population_id", json_integer(id)) ||
           put(e, "config_sha256", sha_string(config, strlen(config)));
}

/* Appends population_created for id from the populations table. */
static fl_status log_created(struct fl__store_audit_stmts *c, int64_t id,
                             struct fl__store_audit_pop *pop, int64_t *seq_out) {
    fl_store *st = c->st;
    sqlite3_stmt *s = NULL;
    fl_status r = pop_row(c, id, &s);
    if (r != FL_OK)
        return r;
    json_t *e = new_entry("population_created");
    int64_t eps = fl__store_audit_fixed_floor(sqlite3_column_double(s, 2), 1e9);
    int64_t delta = fl__store_audit_fixed_floor(sqlite3_column_double(s, 3), 1e18);
    const char *name = (const char *)sqlite3_column_text(s, 0);
    const char *config = (const char *)sqlite3_column_text(s, 1);
    const char *regions = (const char *)sqlite3_column_text(s, 4);
    if (!e || !name || !config || !regions ||
        set_terms(e, name, id, config, eps < 1 ? 1 : eps, delta, regions))
        r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    fl__store_done(s);
    if (r == FL_OK)
        r = append_entry(c, e, pop, seq_out);
    json_decref(e);
    return r;
}

/* Loads population id's state and logs its creation first when the log lacks it. */
static fl_status pop_ready(struct fl__store_audit_stmts *c, int64_t id,
                           struct fl__store_audit_pop *pop) {
    fl_status r = load_pop(c, id, pop);
    if (r == FL_OK && !pop->seen)
        r = log_created(c, id, pop, NULL);
    return r;
}

fl_status fl_store_audit_append_population(fl_store *st, int64_t *seq_out, int64_t population_id) {
    fl_status r = fl__store_enter(st, "audit_append_population");
    if (r != FL_OK)
        return r;
    if (population_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "population_id must be positive");
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = load_pop(&c, population_id, &pop);
    if (r == FL_OK && pop.seen)
        r = fl__err_set(&st->err, FL_ERR_EXISTS, "population %lld is already in the audit log",
                        (long long)population_id);
    if (r == FL_OK)
        r = log_created(&c, population_id, &pop, seq_out);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

fl_status fl_store_audit_append_config(fl_store *st, int64_t *seq_out, int64_t population_id,
                                       const char *config_json, double epsilon, double delta,
                                       const char *allowed_regions_json) {
    fl_status r = fl__store_enter(st, "audit_append_config");
    if (r != FL_OK)
        return r;
    const char *config, *regions;
    if (population_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "population_id must be positive");
    int64_t eps = fl__store_audit_fixed_floor(epsilon, 1e9);
    int64_t d = fl__store_audit_fixed_floor(delta, 1e18);
    if (eps < 1 || d < 0 || !(delta < 1))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "epsilon must be finite and >= 1e-9, delta in [0, 1)");
    r = fl__store_check_json(st, config_json, "{}", 0, &config, "config_json");
    if (r == FL_OK)
        r = fl__store_check_json(st, allowed_regions_json, "[]", 1, &regions,
                                 "allowed_regions_json");
    if (r != FL_OK)
        return r;
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    json_t *e = NULL;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = pop_ready(&c, population_id, &pop);
    if (r == FL_OK) {
        e = new_entry("config_changed");
        if (!e || set_terms(e, pop.name, population_id, config, eps, d, regions))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    if (r == FL_OK)
        r = append_entry(&c, e, &pop, seq_out);
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

/* {"sha256": ..., "version": v} for model version v, checking its population. */
static fl_status model_ref(struct fl__store_audit_stmts *c, int64_t version, int64_t pop_id,
                           json_t **out) {
    sqlite3_stmt *s;
    *out = NULL;
    STMT(c, FL__AUDIT_MODEL_GET, s);
    sqlite3_bind_int64(s, 1, version);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_DONE) {
        r = fl__err_set(&c->st->err, FL_ERR_NOT_FOUND, "model version %lld does not exist",
                        (long long)version);
    } else if (rc != SQLITE_ROW) {
        r = fl__store_sqlerr(c->st, rc, "reading a model version");
    } else if (sqlite3_column_int64(s, 0) != pop_id) {
        r = fl__err_set(&c->st->err, FL_ERR_MISUSE,
                        "model version %lld does not belong to population %lld", (long long)version,
                        (long long)pop_id);
    } else if (sqlite3_column_bytes(s, 1) != 32) {
        r = fl__err_set(&c->st->err, FL_ERR_CORRUPT, "model version %lld has no SHA-256",
                        (long long)version);
    } else {
        json_t *m = json_object();
        if (!m || put(m, "version", json_integer(version)) ||
            put(m, "sha256", hex_string(sqlite3_column_blob(s, 1)))) {
            json_decref(m);
            r = fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
        } else {
            *out = m;
        }
    }
    fl__store_done(s);
    return r;
}

fl_status fl_store_audit_append_model(fl_store *st, int64_t *seq_out, int64_t population_id,
                                      int64_t version) {
    fl_status r = fl__store_enter(st, "audit_append_model");
    if (r != FL_OK)
        return r;
    if (population_id <= 0 || version <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "population_id and version must be positive");
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    json_t *e = NULL, *m = NULL;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = pop_ready(&c, population_id, &pop);
    if (r == FL_OK)
        r = model_ref(&c, version, population_id, &m);
    if (r == FL_OK) {
        e = new_entry("model_registered");
        if (!e || put(e, "population", json_string(pop.name)) ||
            put(e, "population_id", json_integer(population_id)) || put_ref(e, "model", m))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    if (r == FL_OK)
        r = append_entry(&c, e, &pop, seq_out);
    json_decref(m);
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

void fl_store_audit_round_info_init(fl_store_audit_round_info *info) {
    if (!info)
        return;
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
}

static int printable(const char *s, size_t max) {
    size_t n = s ? strnlen(s, max + 1) : 0;
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

/* Copies the caller's info into *out (a struct of this version: fields added after the
 * caller's struct_size are zero) and checks it. */
static fl_status check_round_info(fl_store *st, const fl_store_audit_round_info *info,
                                  fl_store_audit_round_info *out) {
    if (!info)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "info is NULL");
    /* 0.2 callers end before the norm-proof fields, 0.3 callers before the active-mode
     * ones, 0.4 callers before revealed seeds: read no further than they wrote. */
    if (info->struct_size != sizeof(*info) &&
        info->struct_size != offsetof(fl_store_audit_round_info, norm_proof_enabled) &&
        info->struct_size != offsetof(fl_store_audit_round_info, secagg_active) &&
        info->struct_size != offsetof(fl_store_audit_round_info, secagg_reveal_seeds))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "info->struct_size is not "
                           "sizeof(fl_store_audit_round_info)");
    memset(out, 0, sizeof(*out));
    memcpy(out, info, info->struct_size);
    const fl_store_audit_round_info *in = out;
    if (in->round_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "info->round_id must be positive");
    for (int i = 0; i < FL_STORE_AUDIT_PHASES; i++)
        if (in->dropped_by_phase[i] < 0 || in->dropped_by_phase[i] > INT64_MAX / 8)
            return fl__err_set(&st->err, FL_ERR_MISUSE, "info->dropped_by_phase[%d] out of range",
                               i);
    if (in->secagg_enabled && (in->secagg_t < 1 || in->secagg_k < in->secagg_t ||
                               in->secagg_n < in->secagg_k || in->secagg_n > INT64_MAX / 8))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "info->secagg_n/k/t must satisfy 1 <= t <= k <= n");
    if (in->norm_proof_enabled) {
        /* The same ranges the verifier applies to secagg.norm_proof (audit_rules.c). */
        if (!in->secagg_enabled)
            return fl__err_set(&st->err, FL_ERR_MISUSE,
                               "info->norm_proof_enabled needs secagg_enabled (norm proofs are "
                               "part of secure aggregation)");
        if (in->norm_bits < 2 || in->norm_bits > 32)
            return fl__err_set(&st->err, FL_ERR_MISUSE, "info->norm_bits: %u not in 2..32",
                               in->norm_bits);
        if (in->norm_bound2 < 1 || in->norm_bound2 > (uint64_t)INT64_MAX)
            return fl__err_set(&st->err, FL_ERR_MISUSE,
                               "info->norm_bound2: %llu not in 1..2^63-1 (a log integer)",
                               (unsigned long long)in->norm_bound2);
        if (in->norm_dim < 1)
            return fl__err_set(&st->err, FL_ERR_MISUSE, "info->norm_dim must be >= 1");
        if (in->norm_weight_max < 1)
            return fl__err_set(&st->err, FL_ERR_MISUSE, "info->norm_weight_max must be >= 1");
    } else if (in->norm_bits || in->norm_bound2 || in->norm_dim || in->norm_weight_max) {
        /* Values without the flag would be dropped from the log silently. */
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "info->norm_bits/norm_bound2/norm_dim/norm_weight_max: set without "
                           "norm_proof_enabled");
    }
    if (in->secagg_active) {
        if (in->secagg_active != 1 || !in->secagg_enabled)
            return fl__err_set(&st->err, FL_ERR_MISUSE,
                               "info->secagg_active must be 0 or 1, and 1 only with "
                               "secagg_enabled (active mode is a secure aggregation mode)");
        if (!in->authority_key_sha256)
            return fl__err_set(&st->err, FL_ERR_MISUSE,
                               "info->authority_key_sha256 is NULL (secagg_active needs the "
                               "device authority's key fingerprint)");
    } else if (in->authority_key_sha256) {
        /* A fingerprint without the flag would be dropped from the log silently. */
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "info->authority_key_sha256: set without secagg_active");
    }
    if (in->secagg_reveal_seeds &&
        (in->secagg_reveal_seeds != 1 || !in->secagg_enabled || in->norm_proof_enabled)) {
        /* The coordinator never runs that combination; the verifier refuses it too. */
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "info->secagg_reveal_seeds must be 0 or 1, and 1 only with "
                           "secagg_enabled and without norm_proof_enabled");
    }
    if (fl__store_audit_fixed_ceil(in->epsilon_total, 1e9) < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "info->epsilon_total must be finite and >= 0");
    if (fl__store_audit_fixed_ceil(in->delta, 1e18) < 0 || !(in->delta < 1))
        return fl__err_set(&st->err, FL_ERR_MISUSE, "info->delta must be in [0, 1)");
    if (in->n_regions > 1000 || (in->n_regions && !in->regions))
        return fl__err_set(&st->err, FL_ERR_MISUSE, "info->regions: at most 1000, not NULL");
    for (size_t i = 0; i < in->n_regions; i++)
        if (!printable(in->regions[i].region, 64) || in->regions[i].count < 1 ||
            in->regions[i].count > INT64_MAX / 8)
            return fl__err_set(&st->err, FL_ERR_MISUSE,
                               "info->regions[%zu]: region 1..64 printable ASCII, count >= 1", i);
    if (in->coordinator_version && !printable(in->coordinator_version, 64))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "info->coordinator_version must be 1..64 printable ASCII");
    return FL_OK;
}

/* Round row fields the entry needs. */
struct round_row {
    int64_t pop, number, state, base, result, started, ended;
    int64_t counts[4]; /* checked_in, selected, completed, dropped */
    uint8_t config_sha[32];
};

static fl_status read_round(struct fl__store_audit_stmts *c, int64_t id, struct round_row *rr) {
    sqlite3_stmt *s;
    STMT(c, FL__AUDIT_ROUND_GET, s);
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_ROW) {
        rr->pop = sqlite3_column_int64(s, 0);
        rr->number = sqlite3_column_int64(s, 1);
        rr->state = sqlite3_column_int64(s, 2);
        const char *cfg = (const char *)sqlite3_column_text(s, 3);
        if (!cfg)
            r = fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory reading a round");
        else
            crypto_hash_sha256(rr->config_sha, (const uint8_t *)cfg,
                               (size_t)sqlite3_column_bytes(s, 3));
        rr->base = sqlite3_column_int64(s, 4);
        rr->result = sqlite3_column_int64(s, 5);
        rr->started = sqlite3_column_int64(s, 6);
        rr->ended = sqlite3_column_int64(s, 7);
        for (int i = 0; i < 4; i++)
            rr->counts[i] = sqlite3_column_int64(s, 8 + i);
    } else if (rc == SQLITE_DONE) {
        r = fl__err_set(&c->st->err, FL_ERR_NOT_FOUND, "round %lld does not exist", (long long)id);
    } else {
        r = fl__store_sqlerr(c->st, rc, "reading a round");
    }
    fl__store_done(s);
    return r;
}

/* The dp object from the round's privacy-ledger entries (first entry's mechanism and
 * parameters, steps summed), or mechanism "none". */
static fl_status read_dp(struct fl__store_audit_stmts *c, int64_t round_id, json_t **out) {
    sqlite3_stmt *s;
    *out = NULL;
    STMT(c, FL__AUDIT_LEDGER_ROUND, s);
    sqlite3_bind_int64(s, 1, round_id);
    char mech[65] = "none";
    int64_t clip = 0, noise = 0, q = 0, steps = 0;
    int rc, rows = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (rows++ == 0) {
            /* mechanism is NOT NULL: no text means SQLite ran out of memory converting it */
            const char *m = (const char *)sqlite3_column_text(s, 0);
            if (!m) {
                fl__store_done(s);
                return fl__err_set(&c->st->err, FL_ERR_NOMEM,
                                   "out of memory reading the privacy ledger");
            }
            snprintf(mech, sizeof(mech), "%s", m);
            q = fl__store_audit_fixed_round(sqlite3_column_double(s, 1), 1e9);
            noise = fl__store_audit_fixed_round(sqlite3_column_double(s, 2), 1e9);
            clip = fl__store_audit_fixed_round(sqlite3_column_double(s, 3), 1e9);
        }
        int64_t st = sqlite3_column_int64(s, 4);
        steps = steps > INT64_MAX - st ? INT64_MAX : steps + st;
    }
    fl__store_done(s);
    if (rc != SQLITE_DONE)
        return fl__store_sqlerr(c->st, rc, "reading the privacy ledger");
    if (!printable(mech, 64))
        snprintf(mech, sizeof(mech), "unknown");
    json_t *dp = json_object();
    if (!dp || put(dp, "mechanism", json_string(mech)) ||
        put(dp, "clip_norm_e9", json_integer(clip < 0 ? 0 : clip)) ||
        put(dp, "noise_multiplier_e9", json_integer(noise < 0 ? 0 : noise)) ||
        put(dp, "sampling_rate_e9", json_integer(q < 0 ? 0 : q)) ||
        put(dp, "steps", json_integer(steps))) {
        json_decref(dp);
        return fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    *out = dp;
    return FL_OK;
}

/* Region counts: the caller's, or the round's participants (selected, completed or
 * dropped) grouped by the region of their client row. */
static fl_status read_regions(struct fl__store_audit_stmts *c, const fl_store_audit_round_info *in,
                              json_t **out) {
    json_t *o = json_object();
    fl_status r = FL_OK;
    *out = NULL;
    if (!o)
        return fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    if (in->regions) {
        for (size_t i = 0; i < in->n_regions && r == FL_OK; i++) {
            json_t *prev = json_object_get(o, in->regions[i].region);
            int64_t n = in->regions[i].count + (prev ? (int64_t)json_integer_value(prev) : 0);
            if (put(o, in->regions[i].region, json_integer(n)))
                r = fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
        }
    } else {
        sqlite3_stmt *s = fl__store_audit_stmt(c, FL__AUDIT_REGIONS);
        if (!s) {
            json_decref(o);
            return c->st->err.code;
        }
        sqlite3_bind_int64(s, 1, in->round_id);
        int rc;
        while (r == FL_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
            /* Never NULL in practice: region is NOT NULL TEXT, and GROUP BY hands it over
             * already terminated, so reading it as text allocates nothing (even a blob). */
            const char *region = (const char *)sqlite3_column_text(s, 0);
            if (!region) // GCOVR_EXCL_BR_LINE
                r = fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory reading a region");
            else if (put(o, region, json_integer(sqlite3_column_int64(s, 1))))
                r = fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
        }
        if (r == FL_OK && rc != SQLITE_DONE)
            r = fl__store_sqlerr(c->st, rc, "reading round participants");
        fl__store_done(s);
    }
    if (r == FL_OK)
        *out = o;
    else
        json_decref(o);
    return r;
}

/* The round's secagg object: {n, k, t}, with norm_proof {bits, bound2, dim, weight_max}
 * when its inputs carried norm proofs (only then: other entries keep their 0.2 bytes), with
 * active (the integer 1: the format has no booleans) and authority_key_sha256 in active
 * mode (only then: semi-honest entries keep their 0.3 bytes), with revealed_seeds (1) when
 * the survivors revealed pairwise seeds (only then), or null without secure aggregation.
 * NULL when out of memory. */
static json_t *secagg_object(const fl_store_audit_round_info *in) {
    static const char *const ks[] = {"n", "k", "t"};
    static const char *const kn[] = {"bits", "bound2", "dim", "weight_max"};
    if (!in->secagg_enabled)
        return json_null();
    int64_t sv[3] = {in->secagg_n, in->secagg_k, in->secagg_t};
    int64_t nv[4] = {in->norm_bits, (int64_t)in->norm_bound2, in->norm_dim, in->norm_weight_max};
    json_t *o = int_object(ks, sv, 3);
    if (o && ((in->norm_proof_enabled && put(o, "norm_proof", int_object(kn, nv, 4))) ||
              (in->secagg_active &&
               (put(o, "active", json_integer(1)) ||
                put(o, "authority_key_sha256", hex_string(in->authority_key_sha256)))) ||
              (in->secagg_reveal_seeds && put(o, "revealed_seeds", json_integer(1))))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Builds the round entry (everything but seq, v, time). */
static fl_status build_round(struct fl__store_audit_stmts *c, const fl_store_audit_round_info *in,
                             const struct round_row *rr, const struct fl__store_audit_pop *pop,
                             json_t *e) {
    fl_store *st = c->st;
    json_t *model_in = NULL, *model_out = NULL, *dp = NULL, *regions = NULL;
    fl_status r = FL_OK;
    if (rr->base > 0)
        r = model_ref(c, rr->base, rr->pop, &model_in);
    if (r == FL_OK && rr->state == FL_STORE_ROUND_COMPLETED && rr->result > 0)
        r = model_ref(c, rr->result, rr->pop, &model_out);
    if (r == FL_OK)
        r = read_dp(c, in->round_id, &dp);
    if (r == FL_OK)
        r = read_regions(c, in, &regions);
    if (r != FL_OK)
        goto out;
    int64_t total = fl__store_audit_fixed_ceil(in->epsilon_total, 1e9);
    int64_t spent = total - pop->eps_total_e9;
    if (spent < 0) {
        r = fl__err_set(&st->err, FL_ERR_MISUSE,
                        "info->epsilon_total is below the population's logged total");
        goto out;
    }
    static const char *const kc[] = {"checked_in", "selected", "completed", "dropped"};
    static const char *const kd[] = {"advertise", "share", "masked", "consistency", "unmask"};
    static const char *const kp[] = {"epsilon_spent_e9", "epsilon_total_e9", "delta_e18",
                                     "budget_epsilon_e9", "budget_delta_e18"};
    int64_t pv[5] = {spent, total, fl__store_audit_fixed_ceil(in->delta, 1e18), pop->budget_eps_e9,
                     pop->budget_delta_e18};
    char sha[65];
    fl__store_audit_hex(sha, in->task_config_sha256 ? in->task_config_sha256 : rr->config_sha, 32);
    const char *outcome = rr->state == FL_STORE_ROUND_COMPLETED ? "completed" : "abandoned";
    /* json_null() is a static singleton: no allocation, no reference to release */
    json_t *in_ref = model_in ? model_in : json_null();
    json_t *out_ref = model_out ? model_out : json_null();
    int bad =
        put(e, "population", json_string(pop->name)) ||
        put(e, "population_id", json_integer(rr->pop)) ||
        put(e, "round", json_integer(rr->number)) ||
        put(e, "round_id", json_integer(in->round_id)) || put(e, "outcome", json_string(outcome)) ||
        put_ref(e, "model_in", in_ref) || put_ref(e, "model_out", out_ref) ||
        put(e, "task_config_sha256", json_string(sha)) ||
        put(e, "counts", int_object(kc, rr->counts, 4)) ||
        put(e, "dropped_by_phase", int_object(kd, in->dropped_by_phase, 5)) ||
        put(e, "secagg", secagg_object(in)) || put_ref(e, "dp", dp) ||
        put(e, "privacy", int_object(kp, pv, 5)) || put_ref(e, "regions", regions) ||
        put(e, "started_at", json_integer(rr->started)) ||
        put(e, "ended_at", json_integer(rr->ended)) ||
        put(e, "coordinator",
            json_string(in->coordinator_version ? in->coordinator_version : fl_version_string()));
    if (bad)
        r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
out:
    json_decref(model_in);
    json_decref(model_out);
    json_decref(dp);
    json_decref(regions);
    return r;
}

fl_status fl_store_audit_append_round(fl_store *st, int64_t *seq_out,
                                      const fl_store_audit_round_info *info) {
    fl_status r = fl__store_enter(st, "audit_append_round");
    if (r != FL_OK)
        return r;
    fl_store_audit_round_info in; /* info at this version's size */
    r = check_round_info(st, info, &in);
    if (r != FL_OK)
        return r;
    info = &in;
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    struct round_row rr;
    fl__store_audit_pop_init(&pop);
    json_t *e = NULL;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = read_round(&c, info->round_id, &rr);
    if (r == FL_OK && rr.state != FL_STORE_ROUND_COMPLETED && rr.state != FL_STORE_ROUND_ABANDONED)
        r = fl__err_set(&st->err, FL_ERR_STATE, "round %lld is not completed or abandoned",
                        (long long)info->round_id);
    if (r == FL_OK)
        r = pop_ready(&c, rr.pop, &pop);
    if (r == FL_OK && rr.number <= pop.last_round)
        r = fl__err_set(&st->err, FL_ERR_EXISTS,
                        "round %lld of population %lld is already logged (last logged: %lld)",
                        (long long)rr.number, (long long)rr.pop, (long long)pop.last_round);
    if (r == FL_OK) {
        e = new_entry("round");
        r = e ? build_round(&c, info, &rr, &pop, e)
              : fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    if (r == FL_OK)
        r = append_entry(&c, e, &pop, seq_out);
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

fl_status fl_store_audit_append_refusal(fl_store *st, int64_t *seq_out, int64_t population_id,
                                        int64_t round_number, double epsilon_requested,
                                        double delta) {
    fl_status r = fl__store_enter(st, "audit_append_refusal");
    if (r != FL_OK)
        return r;
    int64_t req = fl__store_audit_fixed_ceil(epsilon_requested, 1e9);
    int64_t d = fl__store_audit_fixed_ceil(delta, 1e18);
    if (population_id <= 0 || round_number <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "population_id and round_number must be positive");
    if (req < 0 || d < 0 || !(delta < 1))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "epsilon_requested must be finite and >= 0, delta in [0, 1)");
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    json_t *e = NULL;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = pop_ready(&c, population_id, &pop);
    if (r == FL_OK) {
        static const char *const kp[] = {"epsilon_total_e9", "epsilon_requested_e9", "delta_e18",
                                         "budget_epsilon_e9", "budget_delta_e18"};
        int64_t pv[5] = {pop.eps_total_e9, req, d, pop.budget_eps_e9, pop.budget_delta_e18};
        e = new_entry("budget_refused");
        if (!e || put(e, "population", json_string(pop.name)) ||
            put(e, "population_id", json_integer(population_id)) ||
            put(e, "round", json_integer(round_number)) || put(e, "privacy", int_object(kp, pv, 5)))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    if (r == FL_OK)
        r = append_entry(&c, e, &pop, seq_out);
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

/* ---- erasure and retention ---- */

fl_status fl_store_audit_pseudonym(char out[FL_STORE_AUDIT_PSEUDONYM_BYTES],
                                   const uint8_t key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES],
                                   const char *client_id) {
    if (!out || !key || !client_id || !printable(client_id, FL_STORE_NAME_MAX))
        return FL_ERR_MISUSE;
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256(mac, (const uint8_t *)client_id, strlen(client_id), key);
    fl__store_audit_hex(out, mac, 32);
    fl_memzero(mac, sizeof(mac));
    return FL_OK;
}

/* Runs a DELETE with one int64 or text parameter; adds the rows it removed to *count. */
static fl_status delete_rows(struct fl__store_audit_stmts *c, enum fl__store_audit_stmt_id id,
                             const char *text, int64_t num, int64_t *count) {
    sqlite3_stmt *s;
    STMT(c, id, s);
    if (text)
        sqlite3_bind_text(s, 1, text, -1, SQLITE_STATIC);
    else
        sqlite3_bind_int64(s, 1, num);
    fl_status r = step_done(c->st, s, "deleting personal data");
    if (r == FL_OK)
        *count += sqlite3_changes(c->st->db);
    return r;
}

static json_t *deleted_object(int64_t clients, int64_t parts) {
    static const char *const k[] = {"clients", "participations"};
    int64_t v[2] = {clients, parts};
    return int_object(k, v, 2);
}

fl_status fl_store_client_erase(fl_store *st, int64_t *seq_out, const char *client_id,
                                const uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]) {
    fl_status r = fl__store_enter(st, "client_erase");
    if (r != FL_OK)
        return r;
    if (!pseudonym_key)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "pseudonym_key is NULL");
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    char nym[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    /* cannot fail: client_id passed the same check (1..NAME_MAX bytes 0x21..0x7e) above */
    (void)fl_store_audit_pseudonym(nym, pseudonym_key, client_id);
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    json_t *e = NULL;
    int64_t pid = 0, clients = 0, parts = 0;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_audit_stmt(&c, FL__AUDIT_CLIENT_GET);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
            pid = sqlite3_column_int64(s, 0);
        else if (rc == SQLITE_DONE)
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no such client");
        else
            r = fl__store_sqlerr(st, rc, "reading a client");
        fl__store_done(s);
    }
    if (r == FL_OK)
        r = pop_ready(&c, pid, &pop);
    if (r == FL_OK)
        r = delete_rows(&c, FL__AUDIT_CLIENT_PARTS_DELETE, client_id, 0, &parts);
    if (r == FL_OK)
        r = delete_rows(&c, FL__AUDIT_CLIENT_DELETE, client_id, 0, &clients);
    if (r == FL_OK) {
        e = new_entry("erasure");
        if (!e || put(e, "population", json_string(pop.name)) ||
            put(e, "population_id", json_integer(pid)) || put(e, "client", json_string(nym)) ||
            put(e, "deleted", deleted_object(clients, parts)))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    if (r == FL_OK)
        r = append_entry(&c, e, &pop, seq_out);
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    fl_memzero(nym, sizeof(nym));
    return fl__store_op_end(st, r);
}

/* ---- revocation ---- */

/* Revokes (revoke: at the time at, Unix ms) or reinstates client_id and, only when that
 * changes the client's state, appends a client_revoked / client_reinstated entry naming it
 * by its pseudonym under key, all in one op. Revoking a revoked client keeps the first time
 * (returned through *at_out) and reinstating an active one changes nothing: neither logs,
 * and *seq_out is then -1. */
static fl_status client_block(fl_store *st, const char *what, int revoke, int64_t *at_out,
                              int64_t *seq_out, const char *client_id, int64_t at,
                              const uint8_t *key) {
    fl_status r = fl__store_enter(st, what);
    if (r != FL_OK)
        return r;
    if (at_out)
        *at_out = 0;
    if (seq_out)
        *seq_out = -1;
    if (!key)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "pseudonym_key is NULL");
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r == FL_OK && revoke && at <= 0)
        r = fl__err_set(&st->err, FL_ERR_MISUSE, "revoked_at must be > 0");
    if (r != FL_OK)
        return r;
    char nym[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    /* cannot fail: client_id passed the same check (1..NAME_MAX bytes 0x21..0x7e) above */
    (void)fl_store_audit_pseudonym(nym, key, client_id);
    struct fl__store_audit_stmts c = {st, {0}};
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    json_t *e = NULL;
    int64_t pid = 0, current = 0;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_audit_stmt(&c, FL__AUDIT_CLIENT_STATE);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            pid = sqlite3_column_int64(s, 0);
            current = sqlite3_column_int64(s, 1); /* 0 = active */
        } else if (rc == SQLITE_DONE) {
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "client '%s' is not enrolled", client_id);
        } else {
            r = fl__store_sqlerr(st, rc, "reading a client");
        }
        fl__store_done(s);
    }
    /* No change, nothing to log: the first revocation time stays in effect. */
    if (r == FL_OK && (revoke ? current != 0 : current == 0)) {
        if (at_out)
            *at_out = current;
        goto out;
    }
    if (r == FL_OK)
        r = pop_ready(&c, pid, &pop);
    if (r == FL_OK && !(s = fl__store_audit_stmt(&c, FL__AUDIT_CLIENT_SET_REVOKED)))
        r = st->err.code;
    if (r == FL_OK) {
        sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
        if (revoke)
            sqlite3_bind_int64(s, 2, at);
        else
            sqlite3_bind_null(s, 2);
        r = step_done(st, s, revoke ? "revoking the client" : "reinstating the client");
    }
    if (r == FL_OK) {
        e = new_entry(revoke ? "client_revoked" : "client_reinstated");
        /* The entry's time is the store clock, but never before the revocation it records
         * (a caller's clock slightly ahead): the verifier requires revoked_at <= time.
         * append_entry then keeps it at or after the last entry's time. */
        int64_t now = fl__store_now(st);
        if (!e || put(e, "population", json_string(pop.name)) ||
            put(e, "population_id", json_integer(pid)) || put(e, "client", json_string(nym)) ||
            (revoke && put(e, "revoked_at", json_integer(at))) ||
            (revoke && at > now && put(e, "time", json_integer(at))))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    if (r == FL_OK)
        r = append_entry(&c, e, &pop, seq_out);
    if (r == FL_OK && at_out && revoke)
        *at_out = at;
out:
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    fl__store_audit_stmts_done(&c);
    fl_memzero(nym, sizeof(nym));
    r = fl__store_op_end(st, r);
    if (r != FL_OK) {
        if (at_out)
            *at_out = 0;
        if (seq_out)
            *seq_out = -1;
    }
    return r;
}

fl_status fl_store_client_revoke(fl_store *st, int64_t *revoked_at_out, int64_t *seq_out,
                                 const char *client_id, int64_t revoked_at,
                                 const uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]) {
    return client_block(st, "client_revoke", 1, revoked_at_out, seq_out, client_id, revoked_at,
                        pseudonym_key);
}

fl_status
fl_store_client_reinstate(fl_store *st, int64_t *seq_out, const char *client_id,
                          const uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]) {
    return client_block(st, "client_reinstate", 0, NULL, seq_out, client_id, 0, pseudonym_key);
}

fl_status fl_store_retention_sweep(fl_store *st, fl_store_retention_result *out,
                                   int64_t retention_ms) {
    fl_status r = fl__store_enter(st, "retention_sweep");
    if (r != FL_OK)
        return r;
    if (out)
        memset(out, 0, sizeof(*out));
    int64_t now = fl__store_now(st);
    if (retention_ms <= 0 || now < 0 || retention_ms > now)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "retention_ms must be in 1..now");
    int64_t cutoff = now - retention_ms, clients = 0, parts = 0, seq = 0;
    struct fl__store_audit_stmts c = {st, {0}};
    json_t *e = NULL;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    /* The entry's time, and so the cutoff, never go before the last entry's (entry_time):
     * after a clock step back the sweep expires against the log's time, which only makes
     * the cutoff later. */
    r = entry_time(&c, now, &now);
    cutoff = now - retention_ms;
    if (r == FL_OK)
        r = delete_rows(&c, FL__AUDIT_EXPIRED_CLIENT_PARTS_DELETE, NULL, cutoff, &parts);
    if (r == FL_OK)
        r = delete_rows(&c, FL__AUDIT_EXPIRED_PARTS_DELETE, NULL, cutoff, &parts);
    if (r == FL_OK)
        r = delete_rows(&c, FL__AUDIT_EXPIRED_CLIENTS_DELETE, NULL, cutoff, &clients);
    if (r == FL_OK) {
        e = new_entry("retention");
        if (!e || put(e, "time", json_integer(now)) || put(e, "cutoff", json_integer(cutoff)) ||
            put(e, "retention_ms", json_integer(retention_ms)) ||
            put(e, "deleted", deleted_object(clients, parts)))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory building an audit entry");
    }
    /* The entry carries the now the cutoff came from (set above). */
    if (r == FL_OK)
        r = append_entry(&c, e, NULL, &seq);
    json_decref(e);
    fl__store_audit_stmts_done(&c);
    r = fl__store_op_end(st, r);
    if (r == FL_OK && out) {
        out->cutoff = cutoff;
        out->clients_deleted = clients;
        out->participations_deleted = parts;
        out->seq = seq;
    }
    return r;
}

/* ---- reading, roots and proofs ---- */

fl_status fl_store_audit_size(fl_store *st, int64_t *size) {
    fl_status r = fl__store_enter(st, "audit_size");
    if (r != FL_OK)
        return r;
    if (!size)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "size is NULL");
    *size = 0;
    struct fl__store_audit_stmts c = {st, {0}};
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    r = log_size(&c, size);
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

static void decode_entry(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_audit_entry *e = elem;
    const void *data = NULL;
    size_t n = 0;
    if (column_data(s, 0, &data, &n) != FL_OK) {
        p->nomem = 1;
        return;
    }
    e->size = n;
    fl__store_merkle_leaf(e->leaf_hash, data, n);
    e->json = fl__store_pack_text(p, s, 0);
}

fl_status fl_store_audit_entry_get(fl_store *st, fl_store_audit_entry **out, int64_t seq) {
    fl_status r = fl__store_enter(st, "audit_entry_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    if (seq < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "seq must be >= 0");
    struct fl__store_audit_stmts c = {st, {0}};
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_audit_stmt(&c, FL__AUDIT_ENTRY_GET);
    size_t n = 0;
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_int64(s, 1, seq);
        r = fl__store_collect(st, s, decode_entry, sizeof(fl_store_audit_entry), FL__STORE_ROWS_ONE,
                              (void **)out, &n, "reading an audit entry");
        if (r == FL_OK && n == 0)
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "audit entry %lld does not exist",
                            (long long)seq);
        if (r == FL_OK)
            (*out)->seq = seq;
    }
    fl__store_audit_stmts_done(&c);
    r = fl__store_op_end(st, r);
    if (r != FL_OK && *out) {
        fl_store_free(st, *out);
        *out = NULL;
    }
    return r;
}

/* Checks 0 <= m <= n <= log size (inside an op). */
static fl_status check_sizes(struct fl__store_audit_stmts *c, int64_t m, int64_t n) {
    int64_t size = 0;
    fl_status r = log_size(c, &size);
    if (r == FL_OK && (m < 0 || m > n || n > size))
        r = fl__err_set(&c->st->err, FL_ERR_RANGE,
                        "sizes %lld, %lld are not within the log's %lld entries", (long long)m,
                        (long long)n, (long long)size);
    return r;
}

fl_status fl_store_audit_root(fl_store *st, uint8_t root[FL_STORE_AUDIT_HASH_BYTES], int64_t size) {
    fl_status r = fl__store_enter(st, "audit_root");
    if (r != FL_OK)
        return r;
    if (!root)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "root is NULL");
    struct fl__store_audit_stmts c = {st, {0}};
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    r = check_sizes(&c, 0, size);
    if (r == FL_OK) {
        struct fl__store_merkle_src src = db_source(&c);
        r = fl__store_merkle_root(&src, (uint64_t)size, root);
    }
    fl__store_audit_stmts_done(&c);
    return fl__store_op_end(st, r);
}

/* Shared body of the two proof calls. */
static fl_status proof_call(fl_store *st, int consistency, uint8_t (*proof)[32], size_t cap,
                            size_t *count, int64_t a, int64_t b) {
    fl_status r =
        fl__store_enter(st, consistency ? "audit_consistency_proof" : "audit_inclusion_proof");
    if (r != FL_OK)
        return r;
    if (!proof || !count)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "proof or count is NULL");
    *count = 0;
    if (!consistency && (a < 0 || a >= b))
        return fl__err_set(&st->err, FL_ERR_RANGE, "index %lld is not below size %lld",
                           (long long)a, (long long)b);
    struct fl__store_audit_stmts c = {st, {0}};
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    r = check_sizes(&c, consistency ? a : 0, b);
    if (r == FL_OK) {
        struct fl__store_merkle_src src = db_source(&c);
        r = consistency
                ? fl__store_merkle_consistency(&src, (uint64_t)a, (uint64_t)b, proof, cap, count)
                : fl__store_merkle_inclusion(&src, (uint64_t)a, (uint64_t)b, proof, cap, count);
        if (r == FL_ERR_RANGE)
            fl__err_set(&st->err, r, "proof buffer of %zu hashes is too small", cap);
    }
    fl__store_audit_stmts_done(&c);
    r = fl__store_op_end(st, r);
    if (r != FL_OK)
        *count = 0;
    return r;
}

fl_status fl_store_audit_inclusion_proof(fl_store *st, uint8_t (*proof)[32], size_t cap,
                                         size_t *count, int64_t index, int64_t size) {
    return proof_call(st, 0, proof, cap, count, index, size);
}

fl_status fl_store_audit_consistency_proof(fl_store *st, uint8_t (*proof)[32], size_t cap,
                                           size_t *count, int64_t m, int64_t n) {
    return proof_call(st, 1, proof, cap, count, m, n);
}

fl_status fl_store_audit_verify_inclusion(const uint8_t leaf_hash[32], int64_t index, int64_t size,
                                          const uint8_t (*proof)[32], size_t count,
                                          const uint8_t root[32]) {
    if (!leaf_hash || !root || (count && !proof) || index < 0 || size < 0)
        return FL_ERR_MISUSE;
    return fl__store_merkle_verify_inclusion(leaf_hash, (uint64_t)index, (uint64_t)size, proof,
                                             count, root) == 0
               ? FL_OK
               : FL_ERR_CRYPTO;
}

fl_status fl_store_audit_verify_consistency(int64_t m, int64_t n, const uint8_t (*proof)[32],
                                            size_t count, const uint8_t root1[32],
                                            const uint8_t root2[32]) {
    if (!root1 || !root2 || (count && !proof) || m < 0 || n < 0)
        return FL_ERR_MISUSE;
    return fl__store_merkle_verify_consistency((uint64_t)m, (uint64_t)n, proof, count, root1,
                                               root2) == 0
               ? FL_OK
               : FL_ERR_CRYPTO;
}

void fl_store_audit_leaf_hash(uint8_t out[FL_STORE_AUDIT_HASH_BYTES], const void *entry,
                              size_t len) {
    if (out)
        fl__store_merkle_leaf(out, entry, entry ? len : 0);
}

/* ---- checkpoints ---- */

static void decode_checkpoint(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_audit_checkpoint *cp = elem;
    cp->tree_size = sqlite3_column_int64(s, 0);
    if (sqlite3_column_bytes(s, 1) == 32)
        memcpy(cp->root, sqlite3_column_blob(s, 1), 32);
    cp->created_at = sqlite3_column_int64(s, 2);
    cp->note = fl__store_pack_text(p, s, 3);
}

/* Reads the latest checkpoint into a result block (*out NULL when there is none). */
static fl_status latest(struct fl__store_audit_stmts *c, fl_store_audit_checkpoint **out) {
    sqlite3_stmt *s;
    size_t n = 0;
    *out = NULL;
    STMT(c, FL__AUDIT_CP_LATEST, s);
    return fl__store_collect(c->st, s, decode_checkpoint, sizeof(fl_store_audit_checkpoint),
                             FL__STORE_ROWS_ONE, (void **)out, &n, "reading checkpoints");
}

/* Origin and public key of the latest checkpoint; found = 0 when there is none. */
static fl_status latest_signer(struct fl__store_audit_stmts *c, char *origin, size_t cap,
                               uint8_t pk[32], int *found) {
    sqlite3_stmt *s;
    *found = 0;
    STMT(c, FL__AUDIT_CP_LATEST, s);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_ROW) {
        /* origin is NOT NULL: no text means SQLite ran out of memory converting it */
        const char *o = (const char *)sqlite3_column_text(s, 4);
        if (!o) {
            r = fl__err_set(&c->st->err, FL_ERR_NOMEM, "out of memory reading checkpoints");
        } else if (sqlite3_column_bytes(s, 5) != 32) {
            r = fl__err_set(&c->st->err, FL_ERR_CORRUPT, "latest checkpoint row is damaged");
        } else {
            snprintf(origin, cap, "%s", o);
            memcpy(pk, sqlite3_column_blob(s, 5), 32);
            *found = 1;
        }
    } else if (rc != SQLITE_DONE) {
        r = fl__store_sqlerr(c->st, rc, "reading checkpoints");
    }
    fl__store_done(s);
    return r;
}

fl_status
fl_store_audit_checkpoint_sign(fl_store *st, fl_store_audit_checkpoint **out, const char *origin,
                               const uint8_t secret_key[FL_STORE_AUDIT_SECRET_KEY_BYTES]) {
    fl_status r = fl__store_enter(st, "audit_checkpoint_sign");
    if (r != FL_OK)
        return r;
    if (out)
        *out = NULL;
    if (!secret_key)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "secret_key is NULL");
    if (!fl__store_audit_origin_ok(origin))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "origin must be 1..%d printable ASCII bytes without '+'",
                           FL_STORE_AUDIT_ORIGIN_MAX);
    struct fl__store_audit_stmts c = {st, {0}};
    fl_store_audit_checkpoint *prev = NULL;
    char *note = NULL, prev_origin[FL_STORE_AUDIT_ORIGIN_MAX + 1];
    size_t note_len = 0;
    uint8_t pk[32], prev_pk[32], root[32];
    int have_prev = 0;
    int64_t size = 0;
    crypto_sign_ed25519_sk_to_pk(pk, secret_key);
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = log_size(&c, &size);
    if (r == FL_OK && size == 0)
        r = fl__err_set(&st->err, FL_ERR_STATE, "the audit log is empty: nothing to checkpoint");
    if (r == FL_OK)
        r = latest_signer(&c, prev_origin, sizeof(prev_origin), prev_pk, &have_prev);
    if (r == FL_OK && have_prev &&
        (strcmp(prev_origin, origin) != 0 || memcmp(prev_pk, pk, 32) != 0))
        r = fl__err_set(&st->err, FL_ERR_MISUSE,
                        "origin or key differs from the log's earlier checkpoints (\"%s\")",
                        prev_origin);
    if (r == FL_OK)
        r = latest(&c, &prev);
    if (r == FL_OK) {
        struct fl__store_merkle_src src = db_source(&c);
        r = fl__store_merkle_root(&src, (uint64_t)size, root);
        /* The stored tree must still extend the last signed one: prove it to ourselves. */
        if (r == FL_OK && prev && prev->tree_size < size) {
            uint8_t proof[FL_STORE_AUDIT_PROOF_MAX][32];
            size_t n = 0;
            r = fl__store_merkle_consistency(&src, (uint64_t)prev->tree_size, (uint64_t)size, proof,
                                             FL_STORE_AUDIT_PROOF_MAX, &n);
            if (r == FL_OK &&
                fl__store_merkle_verify_consistency((uint64_t)prev->tree_size, (uint64_t)size,
                                                    proof, n, prev->root, root) != 0)
                r = fl__err_set(&st->err, FL_ERR_CORRUPT,
                                "the audit tree is not consistent with checkpoint %lld",
                                (long long)prev->tree_size);
        }
    }
    if (r == FL_OK && prev && prev->tree_size == size) {
        if (memcmp(prev->root, root, 32) != 0)
            r = fl__err_set(&st->err, FL_ERR_CORRUPT,
                            "the audit tree no longer matches the latest checkpoint");
        else if (out) {
            *out = prev;
            prev = NULL;
        }
        goto out_end;
    }
    if (r == FL_OK) {
        r = fl__store_audit_note_sign(&st->alloc, origin, size, root, secret_key, &note, &note_len);
        if (r != FL_OK)
            fl__err_set(&st->err, r, "signing a checkpoint failed");
    }
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_audit_stmt(&c, FL__AUDIT_CP_INSERT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, size);
            sqlite3_bind_blob(s, 2, root, 32, SQLITE_STATIC);
            sqlite3_bind_text(s, 3, origin, -1, SQLITE_STATIC);
            sqlite3_bind_blob(s, 4, pk, 32, SQLITE_STATIC);
            sqlite3_bind_text(s, 5, note, (int)note_len, SQLITE_STATIC);
            sqlite3_bind_int64(s, 6, fl__store_now(st));
            r = step_done(st, s, "storing a checkpoint");
        }
    }
    if (r == FL_OK && out)
        r = latest(&c, out);
out_end:
    if (prev)
        fl_store_free(st, prev);
    if (note)
        fl__free(&st->alloc, note, note_len + 1);
    fl__store_audit_stmts_done(&c);
    r = fl__store_op_end(st, r);
    if (r != FL_OK && out && *out) {
        fl_store_free(st, *out);
        *out = NULL;
    }
    return r;
}

fl_status fl_store_audit_checkpoint_latest(fl_store *st, fl_store_audit_checkpoint **out) {
    fl_status r = fl__store_enter(st, "audit_checkpoint_latest");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    struct fl__store_audit_stmts c = {st, {0}};
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    r = latest(&c, out);
    if (r == FL_OK && !*out)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no checkpoint has been signed yet");
    fl__store_audit_stmts_done(&c);
    r = fl__store_op_end(st, r);
    if (r != FL_OK && *out) {
        fl_store_free(st, *out);
        *out = NULL;
    }
    return r;
}

/* ---- export ---- */

/* Where export output goes: counted only (buf NULL, file NULL), a buffer, or a file. */
struct sink {
    uint8_t *buf; /* fill target, or NULL */
    size_t cap;   /* bytes at buf */
    FILE *file;   /* stream target, or NULL */
    size_t len;   /* bytes written or counted */
    int failed;   /* overflow or write error */
};

static void sink_put(struct sink *k, const void *p, size_t n) {
    if (k->failed)
        return;
    /* unreachable: lengths of data held in memory, whose sum cannot reach SIZE_MAX */
    if (n > SIZE_MAX - k->len) { // GCOVR_EXCL_BR_LINE
        k->failed = 1;
        return;
    }
    if (k->buf) {
        /* unreachable: the second pass writes what the first counted, in one transaction */
        if (k->len + n > k->cap) { // GCOVR_EXCL_BR_LINE
            k->failed = 1;
            return;
        }
        memcpy(k->buf + k->len, p, n);
    } else if (k->file && fwrite(p, 1, n, k->file) != n) {
        k->failed = 1;
        return;
    }
    k->len += n;
}

/* Writes one canonical JSON line. */
static fl_status sink_json(fl_store *st, struct sink *k, const json_t *v) {
    char *text = NULL;
    size_t n = 0;
    fl_status r = fl__store_audit_dump(&st->alloc, v, (size_t)FL_STORE_JSON_MAX, &text, &n);
    if (r != FL_OK)
        return fl__err_set(&st->err, r, "encoding a bundle line failed");
    sink_put(k, text, n);
    sink_put(k, "\n", 1);
    fl__free(&st->alloc, text, n + 1);
    return FL_OK;
}

/* One pass over the bundle, inside a read op. */
static fl_status export_pass(struct fl__store_audit_stmts *c, struct sink *k) {
    fl_store *st = c->st;
    char origin[FL_STORE_AUDIT_ORIGIN_MAX + 1], vkey[256];
    uint8_t pk[32];
    int found = 0;
    int64_t size = 0, ncp = 0;
    fl_status r = latest_signer(c, origin, sizeof(origin), pk, &found);
    if (r != FL_OK)
        return r;
    if (!found)
        return fl__err_set(&st->err, FL_ERR_NOT_FOUND,
                           "no checkpoint yet: sign one before exporting");
    fl_store_audit_checkpoint *cp = NULL;
    r = latest(c, &cp);
    if (r != FL_OK)
        return r;
    /* latest_signer found that row in this read transaction: cp is not NULL */
    size = cp->tree_size;
    fl_store_free(st, cp);
    sqlite3_stmt *s, *s_cps;
    STMT(c, FL__AUDIT_CP_ALL, s_cps); /* counted now, written after the entries */
    int rc;
    while ((rc = sqlite3_step(s_cps)) == SQLITE_ROW)
        ncp++;
    fl__store_done(s_cps);
    if (rc != SQLITE_DONE)
        return fl__store_sqlerr(st, rc, "reading checkpoints");
    if (fl_store_audit_vkey(vkey, sizeof(vkey), origin, pk) != FL_OK)
        return fl__err_set(&st->err, FL_ERR_CORRUPT, "stored checkpoint origin is invalid");

    json_t *h = json_object();
    if (!h || put(h, "format", json_string("flotilla-audit-bundle/1")) ||
        put(h, "origin", json_string(origin)) || put(h, "public_key", json_string(vkey)) ||
        put(h, "entries", json_integer(size)) || put(h, "checkpoints", json_integer(ncp))) {
        json_decref(h);
        return fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory writing the bundle header");
    }
    r = sink_json(st, k, h);
    json_decref(h);
    if (r != FL_OK)
        return r;

    STMT(c, FL__AUDIT_ENTRY_RANGE, s);
    sqlite3_bind_int64(s, 1, size);
    int64_t want = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *data = NULL;
        size_t n = 0;
        r = FL_OK;
        if (sqlite3_column_int64(s, 0) != want)
            r = fl__err_set(&st->err, FL_ERR_CORRUPT, "audit entries are not contiguous at %lld",
                            (long long)want);
        else if (column_data(s, 1, &data, &n) != FL_OK)
            r = fl__err_set(&st->err, FL_ERR_NOMEM,
                            "audit entry %lld could not be read: out of memory", (long long)want);
        else if (!data) /* damaged: an empty line would break the bundle's shape */
            r = fl__err_set(&st->err, FL_ERR_CORRUPT, "audit entry %lld is empty", (long long)want);
        if (r != FL_OK) {
            fl__store_done(s);
            return r;
        }
        want++;
        sink_put(k, data, n);
        sink_put(k, "\n", 1);
    }
    fl__store_done(s);
    if (rc != SQLITE_DONE)
        return fl__store_sqlerr(st, rc, "reading audit entries");
    if (want != size)
        return fl__err_set(&st->err, FL_ERR_CORRUPT, "audit log has %lld entries, checkpoint %lld",
                           (long long)want, (long long)size);

    s = s_cps;
    while (r == FL_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        /* note is NOT NULL: no text means SQLite ran out of memory converting it */
        const char *note = (const char *)sqlite3_column_text(s, 0);
        json_t *line = json_object();
        if (!note || !line || put(line, "checkpoint", json_string(note)))
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory writing checkpoints");
        else
            r = sink_json(st, k, line);
        json_decref(line);
    }
    if (r == FL_OK && rc != SQLITE_DONE)
        r = fl__store_sqlerr(st, rc, "reading checkpoints");
    fl__store_done(s);
    /* a failed buffer sink (k->file NULL) is unreachable, as in sink_write */
    if (r == FL_OK && k->failed)
        // GCOVR_EXCL_BR_START
        r = fl__err_set(&st->err, k->file ? FL_ERR_IO : FL_ERR_INTERNAL,
                        k->file ? "writing the bundle failed: %s" : "bundle changed size%s",
                        k->file ? strerror(errno) : "");
    // GCOVR_EXCL_BR_STOP
    return r;
}

fl_status fl_store_audit_export(fl_store *st, uint8_t **out, size_t *len) {
    fl_status r = fl__store_enter(st, "audit_export");
    if (r != FL_OK)
        return r;
    if (!out || !len)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out or len is NULL");
    *out = NULL;
    *len = 0;
    struct fl__store_audit_stmts c = {st, {0}};
    struct sink count = {0};
    uint8_t *block = NULL;
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    /* Two passes in one read transaction (one snapshot): measure, then fill. */
    r = export_pass(&c, &count);
    if (r == FL_OK) {
        struct fl__store_pack pack;
        block = fl__store_block_alloc(st, 1, 1, count.len, &pack);
        if (!block) {
            r = st->err.code;
        } else {
            struct sink fill = {pack.base, count.len, NULL, 0, 0};
            r = export_pass(&c, &fill);
            /* unreachable: both passes run in one read transaction */
            if (r == FL_OK && fill.len != count.len) // GCOVR_EXCL_BR_LINE
                r = fl__err_set(&st->err, FL_ERR_INTERNAL, "bundle changed size between passes");
            if (r == FL_OK) {
                /* The bundle bytes start at the variable part, 16 bytes into the block. */
                memmove(block, pack.base, count.len);
            }
        }
    }
    fl__store_audit_stmts_done(&c);
    r = fl__store_op_end(st, r);
    if (r == FL_OK) {
        *out = block;
        *len = count.len;
    } else if (block) {
        fl_store_free(st, block);
    }
    return r;
}

fl_status fl_store_audit_export_file(fl_store *st, const char *path) {
    fl_status r = fl__store_enter(st, "audit_export_file");
    if (r != FL_OK)
        return r;
    if (!path || !path[0])
        return fl__err_set(&st->err, FL_ERR_MISUSE, "path is NULL or empty");
    FILE *f = fopen(path, "wb");
    if (!f)
        return fl__err_set(&st->err, FL_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    /* On failure the partial file is removed, but never something that is not a regular
     * file (a FIFO, or /dev/null when the caller runs as root). */
    struct stat sb;
    /* fstat of a descriptor just opened does not fail */
    int regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode); // GCOVR_EXCL_BR_LINE
    struct fl__store_audit_stmts c = {st, {0}};
    struct sink k = {NULL, 0, f, 0, 0};
    r = fl__store_op_begin(st, 0);
    if (r == FL_OK) {
        r = export_pass(&c, &k);
        fl__store_audit_stmts_done(&c);
        r = fl__store_op_end(st, r);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        if (r == FL_OK)
            r = fl__err_set(&st->err, FL_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    }
    /* untestable: fclose after a successful fflush and fsync has nothing left to write */
    if (fclose(f) != 0 && r == FL_OK) // GCOVR_EXCL_BR_LINE
        r = fl__err_set(&st->err, FL_ERR_IO, "closing %s failed: %s", path, strerror(errno));
    if (r != FL_OK && regular)
        remove(path);
    return r;
}
