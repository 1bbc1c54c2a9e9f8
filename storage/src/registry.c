/* Model registry: immutable, content-addressed model versions, lineage and tags. */

#include <string.h>

#include "store_internal.h"

/* Columns of MODEL_COLS: version, parent, population_id, sha256, metadata_json,
 * created_at, size [, bytes]. */
static void decode_model_common(sqlite3_stmt *s, fl_store_model *m, struct fl__store_pack *p) {
    m->version = sqlite3_column_int64(s, 0);
    m->parent = sqlite3_column_int64(s, 1);        /* NULL reads as 0 */
    m->population_id = sqlite3_column_int64(s, 2); /* NULL reads as 0 */
    if (p->base) {
        const void *h = sqlite3_column_blob(s, 3);
        if (h && sqlite3_column_bytes(s, 3) == 32)
            fl__store_hex(m->sha256_hex, h);
    }
    m->metadata_json = fl__store_pack_text(p, s, 4);
    m->created_at = sqlite3_column_int64(s, 5);
    m->size = (size_t)sqlite3_column_int64(s, 6);
}

static void decode_model_info(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    decode_model_common(s, elem, p);
}

static void decode_model_full(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_model *m = elem;
    decode_model_common(s, m, p);
    m->bytes = fl__store_pack_blob(p, s, 7);
}

fl_status fl__store_model_exists(fl_store *st, int64_t version, const char *what) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_MODEL_EXISTS);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, version);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_DONE)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "%s %lld does not exist", what,
                        (long long)version);
    else if (rc != SQLITE_ROW)
        r = fl__store_sqlerr(st, rc, what);
    fl__store_done(s);
    return r;
}

fl_status fl__store_population_exists(fl_store *st, int64_t id) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_STATE_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_DONE)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "population %lld does not exist",
                        (long long)id);
    else if (rc != SQLITE_ROW)
        r = fl__store_sqlerr(st, rc, "looking up the population");
    fl__store_done(s);
    return r;
}

/* Inside an op: returns the version holding hash in the population, 0 if none. */
static fl_status find_by_hash(fl_store *st, int64_t population_id, const uint8_t hash[32],
                              int64_t *version) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_MODEL_FIND_SHA);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, population_id);
    sqlite3_bind_blob(s, 2, hash, 32, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    *version = 0;
    if (rc == SQLITE_ROW)
        *version = sqlite3_column_int64(s, 0);
    else if (rc != SQLITE_DONE)
        r = fl__store_sqlerr(st, rc, "looking up the model hash");
    fl__store_done(s);
    return r;
}

static fl_status insert_model(fl_store *st, int64_t *version, int64_t population_id, int64_t parent,
                              const uint8_t hash[32], const void *bytes, size_t len,
                              const char *metadata) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_MODEL_INSERT);
    if (!s)
        return st->err.code;
    if (parent > 0)
        sqlite3_bind_int64(s, 1, parent);
    if (population_id > 0)
        sqlite3_bind_int64(s, 2, population_id);
    sqlite3_bind_blob(s, 3, hash, 32, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, metadata, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, fl__store_now(st));
    sqlite3_bind_int64(s, 6, (sqlite3_int64)len);
    int rc = sqlite3_bind_blob64(s, 7, bytes, (sqlite3_uint64)len, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_DONE) {
        *version = sqlite3_last_insert_rowid(st->db);
    } else {
        r = fl__store_sqlerr(st, rc, "storing the model");
    }
    fl__store_done(s);
    return r;
}

fl_status fl_store_model_put(fl_store *st, fl_store_model_ref *out, int64_t population_id,
                             int64_t parent, const void *bytes, size_t len,
                             const char *metadata_json) {
    fl_status r = fl__store_enter(st, "model_put");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    memset(out, 0, sizeof(*out));
    if (!bytes || len == 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "bytes is NULL or len is 0");
    if (len > st->max_model_bytes)
        return fl__err_set(&st->err, FL_ERR_TOO_LARGE,
                           "model of %zu bytes is over max_model_bytes (%zu)", len,
                           st->max_model_bytes);
    if (population_id < 0 || parent < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "population_id and parent must be >= 0");
    const char *metadata;
    r = fl__store_check_json(st, metadata_json, "{}", 0, &metadata, "metadata_json");
    if (r != FL_OK)
        return r;

    /* Hash before taking the write lock: it is the slow part for big models. */
    uint8_t hash[32];
    r = fl__store_sha256_model(st, hash, bytes, len);
    if (r != FL_OK)
        return r;

    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int64_t version = 0;
    r = find_by_hash(st, population_id, hash, &version);
    if (r == FL_OK && version > 0) {
        out->existed = 1;
    } else if (r == FL_OK) {
        if (population_id > 0)
            r = fl__store_population_exists(st, population_id);
        if (r == FL_OK && parent > 0)
            r = fl__store_model_exists(st, parent, "parent version");
        if (r == FL_OK)
            r = insert_model(st, &version, population_id, parent, hash, bytes, len, metadata);
    }
    r = fl__store_op_end(st, r);
    if (r != FL_OK)
        return r;
    out->version = version;
    fl__store_hex(out->sha256_hex, hash);
    fl__log(&st->logger, FL_LOG_DEBUG, "storage: model %s as version %lld (%zu bytes)",
            out->existed ? "found" : "stored", (long long)version, len);
    return FL_OK;
}

fl_status fl_store_model_get(fl_store *st, fl_store_model **out, int64_t version) {
    fl_status r = fl__store_enter(st, "model_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    if (version <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "version must be > 0");
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_MODEL_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, version);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "model version %lld does not exist",
                        (long long)version);
        goto out_reset;
    }
    if (rc != SQLITE_ROW) {
        r = fl__store_sqlerr(st, rc, "reading the model");
        goto out_reset;
    }
    /* Verify before output: the bytes must still hash to the recorded SHA-256. */
    const void *want = sqlite3_column_blob(s, 3);
    int want_len = sqlite3_column_bytes(s, 3);
    const void *bytes = sqlite3_column_blob(s, 7);
    int len = sqlite3_column_bytes(s, 7);
    if ((!want && want_len > 0) || (!bytes && len > 0)) {
        r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory reading model %lld",
                        (long long)version);
        goto out_reset;
    }
    uint8_t got[32];
    r = fl__store_sha256_model(st, got, bytes, (size_t)len);
    if (r != FL_OK)
        goto out_reset;
    if (want_len != 32 || memcmp(got, want, 32) != 0 ||
        sqlite3_column_int64(s, 6) != (sqlite3_int64)len) {
        r = fl__err_set(&st->err, FL_ERR_CORRUPT,
                        "model version %lld failed its SHA-256 check: stored bytes are corrupt",
                        (long long)version);
        fl__log(&st->logger, FL_LOG_ERROR, "storage: %s", st->err.msg);
        goto out_reset;
    }
    size_t n = 0;
    return fl__store_collect(st, s, decode_model_full, sizeof(fl_store_model),
                             FL__STORE_ROWS_CURRENT, (void **)out, &n, "reading the model");
out_reset:
    fl__store_done(s);
    return r;
}

fl_status fl_store_model_lineage(fl_store *st, fl_store_model **out, size_t *count, int64_t version,
                                 size_t max) {
    fl_status r = fl__store_enter(st, "model_lineage");
    if (r != FL_OK)
        return r;
    if (!out || !count)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out or count is NULL");
    *out = NULL;
    *count = 0;
    if (version <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "version must be > 0");
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_MODEL_LINEAGE);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_int64(s, 1, version);
        sqlite3_bind_int64(s, 2, max == 0 || max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max);
        r = fl__store_collect(st, s, decode_model_info, sizeof(fl_store_model), FL__STORE_ROWS_LIST,
                              (void **)out, count, "walking the lineage");
        if (r == FL_OK && *count == 0)
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "model version %lld does not exist",
                            (long long)version);
    }
    r = fl__store_op_end(st, r);
    if (r != FL_OK) {
        fl_store_free(st, *out);
        *out = NULL;
        *count = 0;
    }
    return r;
}

/* ---- tags ---- */

fl_status fl_store_tag_set(fl_store *st, const char *tag, int64_t version) {
    fl_status r = fl__store_enter(st, "tag_set");
    if (r != FL_OK)
        return r;
    r = fl__store_check_name(st, tag, FL_STORE_NAME_MAX, 2, "tag");
    if (r != FL_OK)
        return r;
    if (version <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "version must be > 0");
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = fl__store_model_exists(st, version, "model version");
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_TAG_UPSERT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_text(s, 1, tag, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 2, version);
            sqlite3_bind_int64(s, 3, fl__store_now(st));
            int rc = sqlite3_step(s);
            if (rc != SQLITE_DONE)
                r = fl__store_sqlerr(st, rc, "setting the tag");
            fl__store_done(s);
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_tag_resolve(fl_store *st, int64_t *version_out, const char *tag) {
    fl_status r = fl__store_enter(st, "tag_resolve");
    if (r != FL_OK)
        return r;
    if (!version_out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "version_out is NULL");
    *version_out = 0;
    r = fl__store_check_name(st, tag, FL_STORE_NAME_MAX, 2, "tag");
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_TAG_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_text(s, 1, tag, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *version_out = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no tag '%s'", tag);
    else
        r = fl__store_sqlerr(st, rc, "resolving the tag");
    fl__store_done(s);
    return r;
}

fl_status fl_store_tag_delete(fl_store *st, const char *tag) {
    fl_status r = fl__store_enter(st, "tag_delete");
    if (r != FL_OK)
        return r;
    r = fl__store_check_name(st, tag, FL_STORE_NAME_MAX, 2, "tag");
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_TAG_DELETE);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_text(s, 1, tag, -1, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        if (rc != SQLITE_DONE)
            r = fl__store_sqlerr(st, rc, "deleting the tag");
        else if (sqlite3_changes(st->db) == 0)
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no tag '%s'", tag);
        fl__store_done(s);
    }
    return fl__store_op_end(st, r);
}
