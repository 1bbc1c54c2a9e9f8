/* The on-device example store: one SQLite table of examples with retention limits.
 *
 * Schema (version 1):
 *   fl_store_meta(key TEXT PRIMARY KEY, value TEXT)   -- "schema" = 1, "feature_dim" = n
 *   fl_examples(id INTEGER PRIMARY KEY AUTOINCREMENT, created_ms INTEGER, label INTEGER,
 *               size INTEGER, data BLOB)              -- label -1 = raw example
 * secure_delete is on, so pruned examples are overwritten in the file, not just unlinked. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "client_internal.h"

#define STORE_SCHEMA 1
#define RAW_MAX_BYTES (16u * 1024 * 1024)
#define FEATURE_DIM_MAX 1048576u

struct fl_client_store {
    fl_allocator alloc;          /* caller's allocator (copied) */
    struct fl__err err;          /* last error */
    sqlite3 *db;                 /* connection */
    sqlite3_stmt *ins;           /* INSERT example */
    sqlite3_stmt *get;           /* SELECT one example by id */
    uint32_t feature_dim;        /* floats per dense example, 0 = raw only */
    int64_t max_age_ms;          /* retention: age limit, 0 = none */
    uint64_t max_bytes;          /* retention: payload bytes, 0 = none */
    uint64_t max_examples;       /* retention: count, 0 = none */
    fl_client_clock_fn clock;    /* time source */
    void *clock_user;
};

static fl_status sql_status(int rc) {
    switch (rc & 0xff) {
    case SQLITE_OK: case SQLITE_ROW: case SQLITE_DONE: return FL_OK;
    case SQLITE_NOMEM: return FL_ERR_NOMEM;
    case SQLITE_BUSY: case SQLITE_LOCKED: return FL_ERR_BUSY;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return FL_ERR_FORMAT;
    default: return FL_ERR_IO;
    }
}

static fl_status sql_fail(fl_client_store *st, int rc, const char *what) {
    return fl__err_set(&st->err, sql_status(rc), "%s: %s", what,
                       st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
}

static int exec(fl_client_store *st, const char *sql) {
    return sqlite3_exec(st->db, sql, NULL, NULL, NULL);
}

/* Reads or records the feature dimension the store was created with. */
static fl_status check_meta(fl_client_store *st) {
    sqlite3_stmt *s = NULL;
    fl_status rc = FL_OK;
    int r = sqlite3_prepare_v2(st->db, "SELECT value FROM fl_store_meta WHERE key = ?1", -1, &s,
                               NULL);
    if (r != SQLITE_OK)
        return sql_fail(st, r, "prepare");
    const char *keys[2] = {"schema", "feature_dim"};
    long want[2] = {STORE_SCHEMA, (long)st->feature_dim};
    for (int i = 0; i < 2 && rc == FL_OK; i++) {
        sqlite3_reset(s);
        sqlite3_bind_text(s, 1, keys[i], -1, SQLITE_STATIC);
        r = sqlite3_step(s);
        if (r == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(s, 0);
            char *end = NULL;
            long got = v ? strtol(v, &end, 10) : -1;
            if (!v || *end != '\0' || got != want[i])
                rc = fl__err_set(&st->err, FL_ERR_FORMAT,
                                 "store %s is %s, this handle expects %ld", keys[i],
                                 v ? v : "(null)", want[i]);
        } else if (r == SQLITE_DONE) {
            char val[24];
            snprintf(val, sizeof(val), "%ld", want[i]);
            sqlite3_stmt *w = NULL;
            r = sqlite3_prepare_v2(st->db, "INSERT INTO fl_store_meta(key, value) VALUES (?1, ?2)",
                                   -1, &w, NULL);
            if (r == SQLITE_OK) {
                sqlite3_bind_text(w, 1, keys[i], -1, SQLITE_STATIC);
                sqlite3_bind_text(w, 2, val, -1, SQLITE_TRANSIENT);
                r = sqlite3_step(w);
            }
            sqlite3_finalize(w);
            if (r != SQLITE_DONE)
                rc = sql_fail(st, r, "write store metadata");
        } else {
            rc = sql_fail(st, r, "read store metadata");
        }
    }
    sqlite3_finalize(s);
    return rc;
}

void fl_client_store_config_init(fl_client_store_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
}

static void copy_msg(char *out, size_t len, const char *msg) {
    if (out && len)
        snprintf(out, len, "%s", msg);
}

fl_status fl_client_store_open(fl_client_store **out, const fl_client_store_config *cfg,
                               char *errmsg_out, size_t errmsg_len) {
    fl_allocator a;
    const char *why = NULL;
    if (out)
        *out = NULL;
    if (!out || !cfg)
        why = "out and cfg must not be NULL";
    else if (cfg->struct_size < sizeof(*cfg))
        why = "cfg.struct_size: call fl_client_store_config_init first";
    else if (!cfg->path || !*cfg->path)
        why = "cfg.path is required";
    else if (cfg->feature_dim > FEATURE_DIM_MAX)
        why = "cfg.feature_dim must be at most 1048576";
    else if (cfg->max_age_ms < 0)
        why = "cfg.max_age_ms must be >= 0";
    else if (fl__allocator_copy(&a, cfg->allocator) != FL_OK)
        why = "cfg.allocator: struct_size, alloc and free are required";
    if (why) {
        copy_msg(errmsg_out, errmsg_len, why);
        return FL_ERR_MISUSE;
    }
    fl_client_store *st = fl__calloc(&a, 1, sizeof(*st));
    if (!st) {
        copy_msg(errmsg_out, errmsg_len, "out of memory");
        return FL_ERR_NOMEM;
    }
    st->alloc = a;
    st->feature_dim = cfg->feature_dim;
    st->max_age_ms = cfg->max_age_ms;
    st->max_bytes = cfg->max_bytes;
    st->max_examples = cfg->max_examples;
    st->clock = cfg->clock ? cfg->clock : fl__client_now_real;
    st->clock_user = cfg->clock_user;
    fl_status rc;
    int r = sqlite3_open_v2(cfg->path, &st->db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (r != SQLITE_OK) {
        rc = sql_fail(st, r, "open");
        if ((r & 0xff) == SQLITE_CANTOPEN)
            rc = FL_ERR_IO;
        goto out_fail;
    }
    sqlite3_busy_timeout(st->db, 2000);
    sqlite3_extended_result_codes(st->db, 1);
    if (strcmp(cfg->path, ":memory:") != 0)
        exec(st, "PRAGMA journal_mode=WAL");
    r = exec(st, "PRAGMA secure_delete=ON;"
                 "PRAGMA synchronous=NORMAL;"
                 "BEGIN IMMEDIATE;"
                 "CREATE TABLE IF NOT EXISTS fl_store_meta(key TEXT PRIMARY KEY, value TEXT);"
                 "CREATE TABLE IF NOT EXISTS fl_examples(id INTEGER PRIMARY KEY AUTOINCREMENT,"
                 " created_ms INTEGER NOT NULL, label INTEGER NOT NULL, size INTEGER NOT NULL,"
                 " data BLOB NOT NULL);"
                 "CREATE INDEX IF NOT EXISTS fl_examples_created ON fl_examples(created_ms);");
    if (r != SQLITE_OK) {
        rc = sql_fail(st, r, "create schema");
        exec(st, "ROLLBACK");
        goto out_fail;
    }
    rc = check_meta(st);
    if (rc != FL_OK) {
        exec(st, "ROLLBACK");
        goto out_fail;
    }
    r = exec(st, "COMMIT");
    if (r != SQLITE_OK) {
        rc = sql_fail(st, r, "commit schema");
        exec(st, "ROLLBACK");
        goto out_fail;
    }
    r = sqlite3_prepare_v3(st->db, "INSERT INTO fl_examples(created_ms, label, size, data)"
                                   " VALUES (?1, ?2, ?3, ?4)", -1, SQLITE_PREPARE_PERSISTENT,
                           &st->ins, NULL);
    if (r == SQLITE_OK)
        r = sqlite3_prepare_v3(st->db, "SELECT label, data FROM fl_examples WHERE id = ?1", -1,
                               SQLITE_PREPARE_PERSISTENT, &st->get, NULL);
    if (r != SQLITE_OK) {
        rc = sql_fail(st, r, "prepare");
        goto out_fail;
    }
    rc = fl_client_store_prune(st, NULL);
    if (rc != FL_OK)
        goto out_fail;
    fl__err_clear(&st->err);
    *out = st;
    return FL_OK;
out_fail:
    copy_msg(errmsg_out, errmsg_len, fl__err_msg(&st->err));
    fl_client_store_close(st);
    return rc;
}

void fl_client_store_close(fl_client_store *st) {
    if (!st)
        return;
    sqlite3_finalize(st->ins);
    sqlite3_finalize(st->get);
    sqlite3_close_v2(st->db);
    fl_allocator a = st->alloc;
    fl__free(&a, st, sizeof(*st));
}

const char *fl_client_store_errmsg(const fl_client_store *st) {
    return st ? fl__err_msg(&st->err) : "no store handle";
}

/* Inserts one example (payload len bytes) and applies retention, in one transaction. */
static fl_status insert(fl_client_store *st, int32_t label, const void *data, size_t len) {
    if (st->max_bytes && len > st->max_bytes)
        return fl__err_set(&st->err, FL_ERR_TOO_LARGE,
                           "example of %zu bytes exceeds max_bytes %llu", len,
                           (unsigned long long)st->max_bytes);
    int r = exec(st, "BEGIN IMMEDIATE");
    if (r != SQLITE_OK)
        return sql_fail(st, r, "begin");
    sqlite3_reset(st->ins);
    sqlite3_bind_int64(st->ins, 1, st->clock(st->clock_user));
    sqlite3_bind_int(st->ins, 2, label);
    sqlite3_bind_int64(st->ins, 3, (sqlite3_int64)len);
    sqlite3_bind_blob64(st->ins, 4, data, len, SQLITE_STATIC);
    r = sqlite3_step(st->ins);
    sqlite3_clear_bindings(st->ins);
    fl_status rc = FL_OK;
    if (r != SQLITE_DONE)
        rc = sql_fail(st, r, "insert example");
    if (rc == FL_OK)
        rc = fl_client_store_prune(st, NULL);
    if (rc == FL_OK) {
        r = exec(st, "COMMIT");
        if (r != SQLITE_OK)
            rc = sql_fail(st, r, "commit");
    }
    if (rc != FL_OK)
        exec(st, "ROLLBACK");
    return rc;
}

fl_status fl_client_store_add(fl_client_store *st, const float *features, size_t n,
                              int32_t label) {
    if (!st)
        return FL_ERR_MISUSE;
    fl__err_clear(&st->err);
    if (!features)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "features must not be NULL");
    if (st->feature_dim == 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "store was opened with feature_dim 0 (raw examples only)");
    if (n != st->feature_dim)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "n is %zu, the store's feature_dim is %u", n,
                           st->feature_dim);
    if (label < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "label must be >= 0");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(features[i]))
            return fl__err_set(&st->err, FL_ERR_RANGE, "feature %zu is not finite", i);
    return insert(st, label, features, n * sizeof(float));
}

fl_status fl_client_store_add_raw(fl_client_store *st, const void *data, size_t len) {
    if (!st)
        return FL_ERR_MISUSE;
    fl__err_clear(&st->err);
    if (!data || len == 0 || len > RAW_MAX_BYTES)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "data must be 1 byte to 16 MiB");
    return insert(st, -1, data, len);
}

/* Runs one statement with up to two int64 parameters, adding the changes to *removed. */
static fl_status delete_where(fl_client_store *st, const char *sql, int64_t p1, uint64_t *removed) {
    sqlite3_stmt *s = NULL;
    int r = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (r == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, p1);
        r = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    if (r != SQLITE_DONE)
        return sql_fail(st, r, "retention");
    *removed += (uint64_t)sqlite3_changes(st->db);
    return FL_OK;
}

fl_status fl_client_store_prune(fl_client_store *st, uint64_t *removed) {
    if (!st)
        return FL_ERR_MISUSE;
    uint64_t gone = 0;
    fl_status rc = FL_OK;
    if (st->max_age_ms > 0) {
        int64_t cutoff = st->clock(st->clock_user) - st->max_age_ms;
        rc = delete_where(st, "DELETE FROM fl_examples WHERE created_ms < ?1", cutoff, &gone);
    }
    uint64_t count = 0, bytes = 0;
    if (rc == FL_OK && (st->max_examples || st->max_bytes))
        rc = fl_client_store_stats(st, &count, &bytes);
    if (rc == FL_OK && st->max_examples && count > st->max_examples) {
        rc = delete_where(st,
                          "DELETE FROM fl_examples WHERE id IN (SELECT id FROM fl_examples"
                          " ORDER BY id LIMIT ?1)",
                          (int64_t)(count - st->max_examples), &gone);
        if (rc == FL_OK)
            rc = fl_client_store_stats(st, &count, &bytes);
    }
    if (rc == FL_OK && st->max_bytes && bytes > st->max_bytes) {
        /* Oldest first until the rest fits: find the last id to delete. */
        sqlite3_stmt *s = NULL;
        int r = sqlite3_prepare_v2(st->db, "SELECT id, size FROM fl_examples ORDER BY id", -1, &s,
                                   NULL);
        int64_t last = -1;
        while (r == SQLITE_OK && bytes > st->max_bytes && (r = sqlite3_step(s)) == SQLITE_ROW) {
            last = sqlite3_column_int64(s, 0);
            bytes -= (uint64_t)sqlite3_column_int64(s, 1);
            r = SQLITE_OK;
        }
        sqlite3_finalize(s);
        if (r != SQLITE_OK && r != SQLITE_DONE && r != SQLITE_ROW)
            rc = sql_fail(st, r, "retention scan");
        else if (last >= 0)
            rc = delete_where(st, "DELETE FROM fl_examples WHERE id <= ?1", last, &gone);
    }
    if (removed)
        *removed = gone;
    return rc;
}

fl_status fl_client_store_stats(fl_client_store *st, uint64_t *count, uint64_t *bytes) {
    if (!st)
        return FL_ERR_MISUSE;
    sqlite3_stmt *s = NULL;
    int r = sqlite3_prepare_v2(st->db, "SELECT count(*), coalesce(sum(size), 0) FROM fl_examples",
                               -1, &s, NULL);
    if (r == SQLITE_OK)
        r = sqlite3_step(s);
    fl_status rc = FL_OK;
    if (r == SQLITE_ROW) {
        if (count)
            *count = (uint64_t)sqlite3_column_int64(s, 0);
        if (bytes)
            *bytes = (uint64_t)sqlite3_column_int64(s, 1);
    } else {
        rc = sql_fail(st, r, "stats");
    }
    sqlite3_finalize(s);
    return rc;
}

fl_status fl_client_store_clear(fl_client_store *st) {
    if (!st)
        return FL_ERR_MISUSE;
    int r = exec(st, "DELETE FROM fl_examples");
    return r == SQLITE_OK ? FL_OK : sql_fail(st, r, "clear");
}

fl_status fl_client_store_ids(fl_client_store *st, int64_t *ids, size_t cap, size_t *n,
                              int64_t after) {
    if (!st)
        return FL_ERR_MISUSE;
    fl__err_clear(&st->err);
    if (!ids || !n || cap == 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "ids, n must not be NULL and cap > 0");
    *n = 0;
    sqlite3_stmt *s = NULL;
    int r = sqlite3_prepare_v2(st->db, "SELECT id FROM fl_examples WHERE id > ?1 ORDER BY id"
                                       " LIMIT ?2", -1, &s, NULL);
    if (r == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, after);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)(cap > INT64_MAX ? INT64_MAX : cap));
        while ((r = sqlite3_step(s)) == SQLITE_ROW)
            ids[(*n)++] = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    return r == SQLITE_DONE ? FL_OK : sql_fail(st, r, "list ids");
}

fl_status fl_client_store_get(fl_client_store *st, int64_t id, float *features, size_t cap,
                              int32_t *label, void *raw, size_t raw_cap, size_t *raw_len) {
    if (!st)
        return FL_ERR_MISUSE;
    fl__err_clear(&st->err);
    sqlite3_reset(st->get);
    sqlite3_bind_int64(st->get, 1, id);
    int r = sqlite3_step(st->get);
    fl_status rc = FL_OK;
    if (r == SQLITE_DONE) {
        rc = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no example %lld", (long long)id);
        goto out;
    }
    if (r != SQLITE_ROW) {
        rc = sql_fail(st, r, "read example");
        goto out;
    }
    int32_t lab = sqlite3_column_int(st->get, 0);
    const void *blob = sqlite3_column_blob(st->get, 1);
    size_t len = (size_t)sqlite3_column_bytes(st->get, 1);
    if (label)
        *label = lab;
    if (lab >= 0 && features) {
        if (cap < st->feature_dim || len != (size_t)st->feature_dim * sizeof(float)) {
            rc = fl__err_set(&st->err, cap < st->feature_dim ? FL_ERR_MISUSE : FL_ERR_CORRUPT,
                             "features buffer or stored example has the wrong size");
            goto out;
        }
        memcpy(features, blob, len);
    }
    if (raw_len)
        *raw_len = len;
    if (raw) {
        if (raw_cap < len) {
            rc = fl__err_set(&st->err, FL_ERR_TOO_LARGE, "example %lld has %zu bytes",
                             (long long)id, len);
            goto out;
        }
        if (len)
            memcpy(raw, blob, len);
    }
out:
    sqlite3_reset(st->get);
    return rc;
}

/* ---- internals for the trainer ---- */

uint32_t fl__client_store_feature_dim(const fl_client_store *st) {
    return st->feature_dim;
}

fl_status fl__client_store_dense_ids(fl_client_store *st, int64_t **ids, size_t *n,
                                     size_t *alloc_n, const fl_allocator *a) {
    *ids = NULL;
    *n = 0;
    *alloc_n = 0;
    sqlite3_stmt *s = NULL;
    size_t count = 0, cap = 0;
    int64_t *v = NULL;
    int r = sqlite3_prepare_v2(st->db, "SELECT count(*) FROM fl_examples WHERE label >= 0", -1,
                               &s, NULL);
    if (r == SQLITE_OK && (r = sqlite3_step(s)) == SQLITE_ROW)
        cap = (size_t)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (r != SQLITE_ROW)
        return sql_fail(st, r, "count examples");
    v = fl__alloc_array(a, cap ? cap : 1, sizeof(*v));
    if (!v)
        return fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory for %zu example ids", cap);
    r = sqlite3_prepare_v2(st->db, "SELECT id FROM fl_examples WHERE label >= 0 ORDER BY id", -1,
                           &s, NULL);
    while (r == SQLITE_OK && count < cap && (r = sqlite3_step(s)) == SQLITE_ROW) {
        v[count++] = sqlite3_column_int64(s, 0);
        r = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (r != SQLITE_OK && r != SQLITE_DONE) {
        fl__free(a, v, (cap ? cap : 1) * sizeof(*v));
        return sql_fail(st, r, "list examples");
    }
    *ids = v;
    *n = count; /* rows may vanish between the statements: count <= cap */
    *alloc_n = cap ? cap : 1;
    return FL_OK;
}

fl_status fl__client_store_read_dense(fl_client_store *st, int64_t id, float *x, int32_t *y) {
    int32_t lab = -1;
    fl_status rc = fl_client_store_get(st, id, x, st->feature_dim, &lab, NULL, 0, NULL);
    if (rc == FL_OK && lab < 0)
        rc = fl__err_set(&st->err, FL_ERR_CORRUPT, "example %lld is not dense", (long long)id);
    if (rc == FL_OK)
        *y = lab;
    return rc;
}
