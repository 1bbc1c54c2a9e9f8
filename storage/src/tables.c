/* Populations, clients, rounds, round participants and the privacy ledger. */

#include <math.h>
#include <string.h>

#include "store_internal.h"

#define FL__STORE_REGION_MAX 64
#define FL__STORE_MECHANISM_MAX 64
#define FL__STORE_REASON_MAX 1024

/* Steps a write statement that returns no rows and resets it. */
static fl_status step_write(fl_store *st, sqlite3_stmt *s, const char *what) {
    int rc = sqlite3_step(s);
    fl_status r = rc == SQLITE_DONE ? FL_OK : fl__store_sqlerr(st, rc, what);
    fl__store_done(s);
    return r;
}

/* ==== populations ==== */

static void decode_population(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_population *pop = elem;
    pop->id = sqlite3_column_int64(s, 0);
    pop->name = fl__store_pack_text(p, s, 1);
    pop->config_json = fl__store_pack_text(p, s, 2);
    pop->epsilon = sqlite3_column_double(s, 3);
    pop->delta = sqlite3_column_double(s, 4);
    pop->allowed_regions_json = fl__store_pack_text(p, s, 5);
    pop->created_at = sqlite3_column_int64(s, 6);
    pop->state = (fl_store_population_state)sqlite3_column_int(s, 7);
}

/* Checks a population's settings and normalises the JSON defaults (NULL = "{}" / "[]"). */
static fl_status check_population_settings(fl_store *st, const char *config_json, double epsilon,
                                           double delta, const char *allowed_regions_json,
                                           const char **config, const char **regions) {
    if (!(isfinite(epsilon) && epsilon > 0))
        return fl__err_set(&st->err, FL_ERR_MISUSE, "epsilon must be finite and > 0");
    if (!(isfinite(delta) && delta >= 0 && delta < 1))
        return fl__err_set(&st->err, FL_ERR_MISUSE, "delta must be in [0, 1)");
    fl_status r = fl__store_check_json(st, config_json, "{}", 0, config, "config_json");
    if (r == FL_OK)
        r = fl__store_check_json(st, allowed_regions_json, "[]", 1, regions,
                                 "allowed_regions_json");
    return r;
}

fl_status fl_store_population_create(fl_store *st, int64_t *id_out, const char *name,
                                     const char *config_json, double epsilon, double delta,
                                     const char *allowed_regions_json) {
    fl_status r = fl__store_enter(st, "population_create");
    if (r != FL_OK)
        return r;
    if (id_out)
        *id_out = 0;
    const char *config, *regions;
    r = fl__store_check_name(st, name, FL_STORE_NAME_MAX, 0, "name");
    if (r == FL_OK)
        r = check_population_settings(st, config_json, epsilon, delta, allowed_regions_json,
                                      &config, &regions);
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_INSERT);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, config, -1, SQLITE_STATIC);
        sqlite3_bind_double(s, 3, epsilon);
        sqlite3_bind_double(s, 4, delta);
        sqlite3_bind_text(s, 5, regions, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 6, fl__store_now(st));
        r = step_write(st, s, "creating the population");
        if (r == FL_ERR_EXISTS)
            fl__err_set(&st->err, r, "a population named '%s' already exists", name);
        else if (r == FL_OK && id_out)
            *id_out = sqlite3_last_insert_rowid(st->db);
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_population_get(fl_store *st, fl_store_population **out, int64_t id) {
    fl_status r = fl__store_enter(st, "population_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    if (id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "id must be > 0");
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, id);
    size_t n;
    r = fl__store_collect(st, s, decode_population, sizeof(fl_store_population), FL__STORE_ROWS_ONE,
                          (void **)out, &n, "reading the population");
    if (r == FL_OK && n == 0)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "population %lld does not exist",
                        (long long)id);
    return r;
}

fl_status fl_store_population_find(fl_store *st, fl_store_population **out, const char *name) {
    fl_status r = fl__store_enter(st, "population_find");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    r = fl__store_check_name(st, name, FL_STORE_NAME_MAX, 0, "name");
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_FIND);
    if (!s)
        return st->err.code;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    size_t n;
    r = fl__store_collect(st, s, decode_population, sizeof(fl_store_population), FL__STORE_ROWS_ONE,
                          (void **)out, &n, "reading the population");
    if (r == FL_OK && n == 0)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no population named '%s'", name);
    return r;
}

/* Reads a population's state inside an op. */
static fl_status population_state(fl_store *st, int64_t id, int *state) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_STATE_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_ROW)
        *state = sqlite3_column_int(s, 0);
    else if (rc == SQLITE_DONE)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "population %lld does not exist",
                        (long long)id);
    else
        r = fl__store_sqlerr(st, rc, "reading the population");
    fl__store_done(s);
    return r;
}

fl_status fl_store_population_set_state(fl_store *st, int64_t id, fl_store_population_state state) {
    fl_status r = fl__store_enter(st, "population_set_state");
    if (r != FL_OK)
        return r;
    if (id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "id must be > 0");
    if ((int)state < FL_STORE_POPULATION_ACTIVE || (int)state > FL_STORE_POPULATION_CLOSED)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "state %d is not a population state",
                           (int)state);
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int cur = 0;
    r = population_state(st, id, &cur);
    if (r == FL_OK && cur == FL_STORE_POPULATION_CLOSED && (int)state != cur)
        r = fl__err_set(&st->err, FL_ERR_STATE, "population %lld is closed", (long long)id);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_STATE_SET);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_int(s, 2, (int)state);
            r = step_write(st, s, "updating the population");
        }
    }
    return fl__store_op_end(st, r);
}

/* Replaces a population's settings (config, budget, regions) in one write; the row keeps
 * its id, name, creation time and state. */
fl_status fl_store_population_update_config(fl_store *st, int64_t id, const char *config_json,
                                            double epsilon, double delta,
                                            const char *allowed_regions_json) {
    fl_status r = fl__store_enter(st, "population_update_config");
    if (r != FL_OK)
        return r;
    const char *config, *regions;
    if (id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "id must be > 0");
    r = check_population_settings(st, config_json, epsilon, delta, allowed_regions_json, &config,
                                  &regions);
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int cur = 0;
    r = population_state(st, id, &cur);
    if (r == FL_OK && cur == FL_STORE_POPULATION_CLOSED)
        r = fl__err_set(&st->err, FL_ERR_STATE, "population %lld is closed", (long long)id);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_POP_CONFIG_SET);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_text(s, 2, config, -1, SQLITE_STATIC);
            sqlite3_bind_double(s, 3, epsilon);
            sqlite3_bind_double(s, 4, delta);
            sqlite3_bind_text(s, 5, regions, -1, SQLITE_STATIC);
            r = step_write(st, s, "updating the population's settings");
        }
    }
    return fl__store_op_end(st, r);
}

/* The body of every fl_store_*_list call: argument checks, one read transaction, all rows
 * of stmt (bound to key when key_name is given) decoded into a fresh array; *out is NULL
 * and *count 0 on failure. */
static fl_status list_rows(fl_store *st, const char *op, enum fl__store_stmt_id stmt,
                           const char *key_name, int64_t key, fl__store_decode_fn decode,
                           size_t elem_size, void **out, size_t *count, const char *what) {
    fl_status r = fl__store_enter(st, op);
    if (r != FL_OK)
        return r;
    if (!out || !count)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out or count is NULL");
    *out = NULL;
    *count = 0;
    if (key_name && key <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "%s must be > 0", key_name);
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, stmt);
    if (!s) {
        r = st->err.code;
    } else {
        if (key_name)
            sqlite3_bind_int64(s, 1, key);
        r = fl__store_collect(st, s, decode, elem_size, FL__STORE_ROWS_LIST, out, count, what);
    }
    r = fl__store_op_end(st, r);
    if (r != FL_OK) {
        fl_store_free(st, *out);
        *out = NULL;
        *count = 0;
    }
    return r;
}

fl_status fl_store_population_list(fl_store *st, fl_store_population **out, size_t *count) {
    return list_rows(st, "population_list", FL__STORE_POP_LIST, NULL, 0, decode_population,
                     sizeof(fl_store_population), (void **)out, count, "listing the populations");
}

fl_status fl_store_population_client_count(fl_store *st, int64_t id, int64_t *count) {
    fl_status r = fl__store_enter(st, "population_client_count");
    if (r != FL_OK)
        return r;
    if (!count)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "count is NULL");
    *count = 0;
    if (id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "id must be > 0");
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    r = fl__store_population_exists(st, id);
    sqlite3_stmt *s = r == FL_OK ? fl__store_stmt(st, FL__STORE_POP_CLIENT_COUNT) : NULL;
    if (r == FL_OK && !s)
        r = st->err.code;
    if (s) {
        sqlite3_bind_int64(s, 1, id);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
            *count = sqlite3_column_int64(s, 0);
        else
            r = fl__store_sqlerr(st, rc, "counting the population's clients");
        fl__store_done(s);
    }
    return fl__store_op_end(st, r);
}

/* ==== clients ==== */

static void decode_client(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_client *c = elem;
    c->client_id = fl__store_pack_text(p, s, 0);
    c->region = fl__store_pack_text(p, s, 1);
    c->population_id = sqlite3_column_int64(s, 2);
    c->enrolled_at = sqlite3_column_int64(s, 3);
    c->last_seen = sqlite3_column_int64(s, 4);
    c->revoked_at = sqlite3_column_int64(s, 5); /* NULL (active) reads as 0 */
}

static fl_status check_token(fl_store *st, const void *token, size_t len) {
    if (!token || len < FL_STORE_TOKEN_MIN_BYTES)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "token must be at least %d bytes",
                           FL_STORE_TOKEN_MIN_BYTES);
    return FL_OK;
}

fl_status fl_store_client_enroll(fl_store *st, const char *client_id, const void *token,
                                 size_t token_len, const char *region, int64_t population_id) {
    fl_status r = fl__store_enter(st, "client_enroll");
    if (r != FL_OK)
        return r;
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r == FL_OK)
        r = check_token(st, token, token_len);
    if (r == FL_OK)
        r = fl__store_check_name(st, region, FL__STORE_REGION_MAX, 1, "region");
    if (r == FL_OK && population_id <= 0)
        r = fl__err_set(&st->err, FL_ERR_MISUSE, "population_id must be > 0");
    if (r != FL_OK)
        return r;
    uint8_t hash[32];
    fl__store_sha256_token(hash, token, token_len);
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        goto out_wipe;
    r = fl__store_population_exists(st, population_id);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_CLIENT_INSERT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
            sqlite3_bind_blob(s, 2, hash, 32, SQLITE_STATIC);
            sqlite3_bind_text(s, 3, region, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 4, population_id);
            sqlite3_bind_int64(s, 5, fl__store_now(st));
            r = step_write(st, s, "enrolling the client");
            if (r == FL_ERR_EXISTS)
                fl__err_set(&st->err, r, "client '%s' is already enrolled", client_id);
        }
    }
    r = fl__store_op_end(st, r);
out_wipe:
    fl_memzero(hash, sizeof(hash));
    return r;
}

fl_status fl_store_client_get(fl_store *st, fl_store_client **out, const char *client_id) {
    fl_status r = fl__store_enter(st, "client_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_CLIENT_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
    size_t n;
    r = fl__store_collect(st, s, decode_client, sizeof(fl_store_client), FL__STORE_ROWS_ONE,
                          (void **)out, &n, "reading the client");
    if (r == FL_OK && n == 0)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "client '%s' is not enrolled", client_id);
    return r;
}

fl_status fl_store_client_authenticate(fl_store *st, const char *client_id, const void *token,
                                       size_t token_len) {
    fl_status r = fl__store_enter(st, "client_authenticate");
    if (r != FL_OK)
        return r;
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    if (!token && token_len > 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "token is NULL");
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_CLIENT_HASH);
    if (!s)
        return st->err.code;
    uint8_t got[32], want[32];
    /* Hash even when the ID is unknown so both failures cost about the same. */
    fl__store_sha256_token(got, token ? token : "", token_len);
    memset(want, 0, sizeof(want));
    sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    int found = 0;
    if (rc == SQLITE_ROW) {
        const void *h = sqlite3_column_blob(s, 0);
        if (h && sqlite3_column_bytes(s, 0) == 32) {
            memcpy(want, h, 32);
            found = 1;
        }
    } else if (rc != SQLITE_DONE) {
        r = fl__store_sqlerr(st, rc, "reading the client");
    }
    fl__store_done(s);
    if (r == FL_OK) {
        int same = fl_memeq_ct(got, want, 32) == 0;
        if (!(found & same & (token_len >= FL_STORE_TOKEN_MIN_BYTES)))
            r = fl__err_set(&st->err, FL_ERR_AUTH, "authentication failed");
    }
    fl_memzero(got, sizeof(got));
    fl_memzero(want, sizeof(want));
    return r;
}

fl_status fl_store_client_touch(fl_store *st, const char *client_id) {
    fl_status r = fl__store_enter(st, "client_touch");
    if (r != FL_OK)
        return r;
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_CLIENT_TOUCH);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, fl__store_now(st));
        r = step_write(st, s, "updating the client");
        if (r == FL_OK && sqlite3_changes(st->db) == 0)
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "client '%s' is not enrolled", client_id);
    }
    return fl__store_op_end(st, r);
}

/* ==== client identities ==== */

/* 1 if device_id is registered to a client of client_id's population other than client_id,
 * 0 if not, or a negative status (err set). Runs inside the caller's op. */
static int device_taken(fl_store *st, const char *client_id, const uint8_t *device_id) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_IDENTITY_DEVICE_OWNER);
    if (!s)
        return -1;
    sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, device_id, FL_STORE_DEVICE_ID_BYTES, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    if (r < 0)
        fl__store_sqlerr(st, rc, "reading the device identities");
    fl__store_done(s);
    return r;
}

fl_status fl_store_client_identity_put(fl_store *st, const char *client_id,
                                       const fl_store_client_identity *id) {
    fl_status r = fl__store_enter(st, "client_identity_put");
    if (r != FL_OK)
        return r;
    if (!id)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "id is NULL");
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_IDENTITY_INSERT);
    if (!s) {
        r = st->err.code;
    } else {
        sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
        sqlite3_bind_blob(s, 2, id->device_id, FL_STORE_DEVICE_ID_BYTES, SQLITE_STATIC);
        sqlite3_bind_blob(s, 3, id->verify_key, FL_STORE_VERIFY_KEY_BYTES, SQLITE_STATIC);
        sqlite3_bind_blob(s, 4, id->cert, FL_STORE_CERT_BYTES, SQLITE_STATIC);
        r = step_write(st, s, "recording the client's identity");
        if (r == FL_OK && sqlite3_changes(st->db) == 0)
            r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "client '%s' is not enrolled", client_id);
        if (r == FL_ERR_EXISTS) {
            /* Two constraints can refuse it; say which. */
            int taken = device_taken(st, client_id, id->device_id);
            if (taken < 0)
                r = st->err.code;
            else if (taken)
                fl__err_set(&st->err, r, "the device is already enrolled in the population");
            else
                fl__err_set(&st->err, r, "client '%s' already has an identity", client_id);
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_client_identity_get(fl_store *st, fl_store_client_identity *out,
                                       const char *client_id) {
    fl_status r = fl__store_enter(st, "client_identity_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    memset(out, 0, sizeof(*out));
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_IDENTITY_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_text(s, 1, client_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        /* The CHECK constraints fix the lengths; check them anyway before copying. */
        const void *d = sqlite3_column_blob(s, 0), *k = sqlite3_column_blob(s, 1),
                   *c = sqlite3_column_blob(s, 2);
        if (d && k && c && sqlite3_column_bytes(s, 0) == FL_STORE_DEVICE_ID_BYTES &&
            sqlite3_column_bytes(s, 1) == FL_STORE_VERIFY_KEY_BYTES &&
            sqlite3_column_bytes(s, 2) == FL_STORE_CERT_BYTES) {
            memcpy(out->device_id, d, FL_STORE_DEVICE_ID_BYTES);
            memcpy(out->verify_key, k, FL_STORE_VERIFY_KEY_BYTES);
            memcpy(out->cert, c, FL_STORE_CERT_BYTES);
        } else {
            r = fl__err_set(&st->err, FL_ERR_CORRUPT, "client identity row has bad lengths");
        }
    } else if (rc == SQLITE_DONE) {
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "client '%s' has no identity", client_id);
    } else {
        r = fl__store_sqlerr(st, rc, "reading the client's identity");
    }
    fl__store_done(s);
    return r;
}

/* ==== rounds ==== */

static void decode_round(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_round *rd = elem;
    rd->id = sqlite3_column_int64(s, 0);
    rd->population_id = sqlite3_column_int64(s, 1);
    rd->round_number = sqlite3_column_int64(s, 2);
    rd->state = (fl_store_round_state)sqlite3_column_int(s, 3);
    rd->config_json = fl__store_pack_text(p, s, 4);
    rd->base_version = sqlite3_column_int64(s, 5);
    rd->result_version = sqlite3_column_int64(s, 6);
    rd->created_at = sqlite3_column_int64(s, 7);
    rd->started_at = sqlite3_column_int64(s, 8);
    rd->ended_at = sqlite3_column_int64(s, 9);
    rd->counts.checked_in = sqlite3_column_int64(s, 10);
    rd->counts.selected = sqlite3_column_int64(s, 11);
    rd->counts.completed = sqlite3_column_int64(s, 12);
    rd->counts.dropped = sqlite3_column_int64(s, 13);
    rd->abandon_reason = fl__store_pack_text(p, s, 14);
}

fl_status fl_store_round_create(fl_store *st, int64_t *round_id_out, int64_t population_id,
                                int64_t round_number, int64_t base_version,
                                const char *config_json) {
    fl_status r = fl__store_enter(st, "round_create");
    if (r != FL_OK)
        return r;
    if (round_id_out)
        *round_id_out = 0;
    if (population_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "population_id must be > 0");
    if (round_number < 0 || base_version < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_number and base_version must be >= 0");
    const char *config;
    r = fl__store_check_json(st, config_json, "{}", 0, &config, "config_json");
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int pstate = 0;
    r = population_state(st, population_id, &pstate);
    if (r == FL_OK && pstate == FL_STORE_POPULATION_CLOSED)
        r = fl__err_set(&st->err, FL_ERR_STATE, "population %lld is closed",
                        (long long)population_id);
    if (r == FL_OK && base_version > 0)
        r = fl__store_model_exists(st, base_version, "base model version");
    if (r == FL_OK && round_number == 0) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_NEXT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, population_id);
            int rc = sqlite3_step(s);
            if (rc == SQLITE_ROW)
                round_number = sqlite3_column_int64(s, 0);
            else
                r = fl__store_sqlerr(st, rc, "numbering the round");
            fl__store_done(s);
        }
    }
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_INSERT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, population_id);
            sqlite3_bind_int64(s, 2, round_number);
            sqlite3_bind_text(s, 3, config, -1, SQLITE_STATIC);
            if (base_version > 0)
                sqlite3_bind_int64(s, 4, base_version);
            sqlite3_bind_int64(s, 5, fl__store_now(st));
            r = step_write(st, s, "creating the round");
            if (r == FL_ERR_EXISTS)
                fl__err_set(&st->err, r, "round %lld of population %lld already exists",
                            (long long)round_number, (long long)population_id);
            else if (r == FL_OK && round_id_out)
                *round_id_out = sqlite3_last_insert_rowid(st->db);
        }
    }
    return fl__store_op_end(st, r);
}

/* Reads a round's state and population inside an op; FL_ERR_NOT_FOUND if absent. With
 * need_live, a terminal round gives FL_ERR_STATE. */
static fl_status round_state(fl_store *st, int64_t round_id, int need_live, int *state,
                             int64_t *population_id) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_STATE);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, round_id);
    int rc = sqlite3_step(s);
    fl_status r = FL_OK;
    if (rc == SQLITE_ROW) {
        *state = sqlite3_column_int(s, 0);
        if (population_id)
            *population_id = sqlite3_column_int64(s, 1);
    } else if (rc == SQLITE_DONE) {
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "round %lld does not exist",
                        (long long)round_id);
    } else {
        r = fl__store_sqlerr(st, rc, "reading the round");
    }
    fl__store_done(s);
    if (r == FL_OK && need_live &&
        (*state == FL_STORE_ROUND_COMPLETED || *state == FL_STORE_ROUND_ABANDONED))
        r = fl__err_set(&st->err, FL_ERR_STATE, "round %lld is already %s", (long long)round_id,
                        *state == FL_STORE_ROUND_COMPLETED ? "completed" : "abandoned");
    return r;
}

fl_status fl_store_round_start(fl_store *st, int64_t round_id) {
    fl_status r = fl__store_enter(st, "round_start");
    if (r != FL_OK)
        return r;
    if (round_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id must be > 0");
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int state = 0;
    r = round_state(st, round_id, 1, &state, NULL);
    if (r == FL_OK && state != FL_STORE_ROUND_OPEN)
        r = fl__err_set(&st->err, FL_ERR_STATE, "round %lld is not open", (long long)round_id);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_START);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, round_id);
            sqlite3_bind_int64(s, 2, fl__store_now(st));
            r = step_write(st, s, "starting the round");
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_round_set_counts(fl_store *st, int64_t round_id,
                                    const fl_store_round_counts *counts) {
    fl_status r = fl__store_enter(st, "round_set_counts");
    if (r != FL_OK)
        return r;
    if (round_id <= 0 || !counts)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id must be > 0 and counts non-NULL");
    if (counts->checked_in < 0 || counts->selected < 0 || counts->completed < 0 ||
        counts->dropped < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "counts must be >= 0");
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int state = 0;
    r = round_state(st, round_id, 1, &state, NULL);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_COUNTS);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, round_id);
            sqlite3_bind_int64(s, 2, counts->checked_in);
            sqlite3_bind_int64(s, 3, counts->selected);
            sqlite3_bind_int64(s, 4, counts->completed);
            sqlite3_bind_int64(s, 5, counts->dropped);
            r = step_write(st, s, "updating the round counts");
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_round_complete(fl_store *st, int64_t round_id, int64_t result_version) {
    fl_status r = fl__store_enter(st, "round_complete");
    if (r != FL_OK)
        return r;
    if (round_id <= 0 || result_version <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id and result_version must be > 0");
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int state = 0;
    r = round_state(st, round_id, 1, &state, NULL);
    if (r == FL_OK)
        r = fl__store_model_exists(st, result_version, "result model version");
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_COMPLETE);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, round_id);
            sqlite3_bind_int64(s, 2, result_version);
            sqlite3_bind_int64(s, 3, fl__store_now(st));
            r = step_write(st, s, "completing the round");
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_round_abandon(fl_store *st, int64_t round_id, const char *reason) {
    fl_status r = fl__store_enter(st, "round_abandon");
    if (r != FL_OK)
        return r;
    if (round_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id must be > 0");
    if (!reason || !reason[0] || strnlen(reason, FL__STORE_REASON_MAX + 1) > FL__STORE_REASON_MAX)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "reason must be 1..%d bytes",
                           FL__STORE_REASON_MAX);
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int state = 0;
    r = round_state(st, round_id, 1, &state, NULL);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_ABANDON);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, round_id);
            sqlite3_bind_text(s, 2, reason, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 3, fl__store_now(st));
            r = step_write(st, s, "abandoning the round");
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_round_get(fl_store *st, fl_store_round **out, int64_t round_id) {
    fl_status r = fl__store_enter(st, "round_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    if (round_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id must be > 0");
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_ROUND_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, round_id);
    size_t n;
    r = fl__store_collect(st, s, decode_round, sizeof(fl_store_round), FL__STORE_ROWS_ONE,
                          (void **)out, &n, "reading the round");
    if (r == FL_OK && n == 0)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "round %lld does not exist",
                        (long long)round_id);
    return r;
}

fl_status fl_store_round_find(fl_store *st, fl_store_round **out, int64_t population_id,
                              int64_t round_number) {
    fl_status r = fl__store_enter(st, "round_find");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    if (population_id <= 0 || round_number < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "population_id must be > 0 and round_number >= 0");
    sqlite3_stmt *s =
        fl__store_stmt(st, round_number == 0 ? FL__STORE_ROUND_LATEST : FL__STORE_ROUND_FIND);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, population_id);
    if (round_number > 0)
        sqlite3_bind_int64(s, 2, round_number);
    size_t n;
    r = fl__store_collect(st, s, decode_round, sizeof(fl_store_round), FL__STORE_ROWS_ONE,
                          (void **)out, &n, "reading the round");
    if (r == FL_OK && n == 0)
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "population %lld has no round %lld",
                        (long long)population_id, (long long)round_number);
    return r;
}

fl_status fl_store_round_list_unfinished(fl_store *st, fl_store_round **out, size_t *count,
                                         int64_t population_id) {
    return list_rows(st, "round_list_unfinished", FL__STORE_ROUND_UNFINISHED, "population_id",
                     population_id, decode_round, sizeof(fl_store_round), (void **)out, count,
                     "listing the unfinished rounds");
}

/* ==== round participants ==== */

static void decode_participant(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_participant *pt = elem;
    pt->round_id = sqlite3_column_int64(s, 0);
    pt->client_id = fl__store_pack_text(p, s, 1);
    pt->state = (fl_store_participant_state)sqlite3_column_int(s, 2);
    pt->updated_at = sqlite3_column_int64(s, 3);
}

fl_status fl_store_participant_set(fl_store *st, int64_t round_id, const char *client_id,
                                   fl_store_participant_state state) {
    return fl_store_participant_set_v2(st, round_id, client_id, state, NULL);
}

fl_status
fl_store_participant_set_v2(fl_store *st, int64_t round_id, const char *client_id,
                            fl_store_participant_state state,
                            const uint8_t participation_hash[FL_STORE_PARTICIPATION_HASH_BYTES]) {
    fl_status r = fl__store_enter(st, "participant_set");
    if (r != FL_OK)
        return r;
    if (round_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id must be > 0");
    r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    if ((int)state < FL_STORE_PARTICIPANT_CHECKED_IN || (int)state > FL_STORE_PARTICIPANT_DROPPED)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "state %d is not a participant state",
                           (int)state);
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    int rstate = 0;
    r = round_state(st, round_id, 1, &rstate, NULL);
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_PART_UPSERT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, round_id);
            sqlite3_bind_text(s, 2, client_id, -1, SQLITE_STATIC);
            sqlite3_bind_int(s, 3, (int)state);
            sqlite3_bind_int64(s, 4, fl__store_now(st));
            if (participation_hash)
                sqlite3_bind_blob(s, 5, participation_hash, FL_STORE_PARTICIPATION_HASH_BYTES,
                                  SQLITE_STATIC);
            else
                sqlite3_bind_null(s, 5);
            r = step_write(st, s, "recording the participant");
            if (r == FL_ERR_NOT_FOUND)
                fl__err_set(&st->err, r, "client '%s' is not enrolled", client_id);
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_participant_list(fl_store *st, fl_store_participant **out, size_t *count,
                                    int64_t round_id) {
    return list_rows(st, "participant_list", FL__STORE_PART_LIST, "round_id", round_id,
                     decode_participant, sizeof(fl_store_participant), (void **)out, count,
                     "listing participants");
}

/* One primary-key lookup (round_id, client_id): a single statement, so no transaction of
 * its own, as fl_store_round_get. The hash is read from the row the statement stands on
 * before the row is packed, so both come from one snapshot. hash and has_hash are NULL
 * for fl_store_participant_get. */
static fl_status participant_get(fl_store *st, fl_store_participant **out,
                                 uint8_t hash[FL_STORE_PARTICIPATION_HASH_BYTES], int *has_hash,
                                 int64_t round_id, const char *client_id) {
    *out = NULL;
    if (hash) {
        memset(hash, 0, FL_STORE_PARTICIPATION_HASH_BYTES);
        *has_hash = 0;
    }
    if (round_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "round_id must be > 0");
    fl_status r = fl__store_check_name(st, client_id, FL_STORE_NAME_MAX, 1, "client_id");
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_PART_GET);
    if (!s)
        return st->err.code;
    sqlite3_bind_int64(s, 1, round_id);
    sqlite3_bind_text(s, 2, client_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        r = fl__err_set(&st->err, FL_ERR_NOT_FOUND, "client '%s' is not recorded in round %lld",
                        client_id, (long long)round_id);
        goto out_reset;
    }
    if (rc != SQLITE_ROW) {
        r = fl__store_sqlerr(st, rc, "reading the participant");
        goto out_reset;
    }
    uint8_t got[FL_STORE_PARTICIPATION_HASH_BYTES];
    int have = hash && sqlite3_column_type(s, 4) != SQLITE_NULL; /* v1: not looked at */
    if (have) {
        const void *b = sqlite3_column_blob(s, 4);
        int len = sqlite3_column_bytes(s, 4);
        if (!b && len > 0) {
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory reading the participant");
            goto out_reset;
        }
        /* The CHECK constraint keeps other lengths out; a file that has one anyway is
         * damaged, and a guess either way would be wrong. */
        if (len != FL_STORE_PARTICIPATION_HASH_BYTES) {
            r = fl__err_set(&st->err, FL_ERR_CORRUPT,
                            "participation hash of client '%s' in round %lld has %d bytes, "
                            "not %d",
                            client_id, (long long)round_id, len, FL_STORE_PARTICIPATION_HASH_BYTES);
            goto out_reset;
        }
        memcpy(got, b, sizeof(got));
    }
    size_t n = 0;
    r = fl__store_collect(st, s, decode_participant, sizeof(fl_store_participant),
                          FL__STORE_ROWS_CURRENT, (void **)out, &n, "reading the participant");
    if (r == FL_OK && have) {
        memcpy(hash, got, sizeof(got));
        *has_hash = 1;
    }
    return r;
out_reset:
    fl__store_done(s);
    return r;
}

fl_status fl_store_participant_get(fl_store *st, fl_store_participant **out, int64_t round_id,
                                   const char *client_id) {
    fl_status r = fl__store_enter(st, "participant_get");
    if (r != FL_OK)
        return r;
    if (!out)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "out is NULL");
    return participant_get(st, out, NULL, NULL, round_id, client_id);
}

fl_status fl_store_participant_get_v2(fl_store *st, fl_store_participant **out,
                                      uint8_t hash[FL_STORE_PARTICIPATION_HASH_BYTES],
                                      int *has_hash, int64_t round_id, const char *client_id) {
    fl_status r = fl__store_enter(st, "participant_get_v2");
    if (r != FL_OK)
        return r;
    if (!out || !hash || !has_hash)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "%s is NULL",
                           !out    ? "out"
                           : !hash ? "hash"
                                   : "has_hash");
    return participant_get(st, out, hash, has_hash, round_id, client_id);
}

/* ==== privacy ledger ==== */

static void decode_ledger(sqlite3_stmt *s, void *elem, struct fl__store_pack *p) {
    fl_store_ledger_entry *e = elem;
    e->id = sqlite3_column_int64(s, 0);
    e->population_id = sqlite3_column_int64(s, 1);
    e->round_id = sqlite3_column_int64(s, 2);
    e->mechanism = fl__store_pack_text(p, s, 3);
    e->sampling_rate = sqlite3_column_double(s, 4);
    e->noise_multiplier = sqlite3_column_double(s, 5);
    e->clip_norm = sqlite3_column_double(s, 6);
    e->steps = sqlite3_column_int64(s, 7);
    e->participants = sqlite3_column_int64(s, 8);
    e->params_json = fl__store_pack_text(p, s, 9);
    e->created_at = sqlite3_column_int64(s, 10);
}

/* Range checks for an entry's numeric fields; the message names the first bad one. */
static fl_status check_ledger_entry(fl_store *st, const fl_store_ledger_entry *e) {
    if (e->population_id <= 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry->population_id must be > 0");
    if (e->round_id < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry->round_id must be >= 0");
    if (!(isfinite(e->sampling_rate) && e->sampling_rate > 0 && e->sampling_rate <= 1))
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry->sampling_rate must be in (0, 1]");
    if (!(isfinite(e->noise_multiplier) && e->noise_multiplier >= 0))
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "entry->noise_multiplier must be finite and >= 0");
    if (!(isfinite(e->clip_norm) && e->clip_norm > 0))
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry->clip_norm must be finite and > 0");
    if (e->steps < 1)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry->steps must be >= 1");
    if (e->participants < 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry->participants must be >= 0");
    return fl__store_check_name(st, e->mechanism, FL__STORE_MECHANISM_MAX, 1, "entry->mechanism");
}

fl_status fl_store_ledger_append(fl_store *st, int64_t *id_out,
                                 const fl_store_ledger_entry *entry) {
    fl_status r = fl__store_enter(st, "ledger_append");
    if (r != FL_OK)
        return r;
    if (id_out)
        *id_out = 0;
    if (!entry)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "entry is NULL");
    r = check_ledger_entry(st, entry);
    if (r != FL_OK)
        return r;
    const char *params;
    r = fl__store_check_json(st, entry->params_json, "{}", 0, &params, "entry->params_json");
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 1);
    if (r != FL_OK)
        return r;
    r = fl__store_population_exists(st, entry->population_id);
    if (r == FL_OK && entry->round_id > 0) {
        int state = 0;
        int64_t pop = 0;
        r = round_state(st, entry->round_id, 0, &state, &pop);
        if (r == FL_OK && pop != entry->population_id)
            r = fl__err_set(
                &st->err, FL_ERR_MISUSE, "round %lld belongs to population %lld, not %lld",
                (long long)entry->round_id, (long long)pop, (long long)entry->population_id);
    }
    if (r == FL_OK) {
        sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_LEDGER_INSERT);
        if (!s) {
            r = st->err.code;
        } else {
            sqlite3_bind_int64(s, 1, entry->population_id);
            if (entry->round_id > 0)
                sqlite3_bind_int64(s, 2, entry->round_id);
            sqlite3_bind_text(s, 3, entry->mechanism, -1, SQLITE_STATIC);
            sqlite3_bind_double(s, 4, entry->sampling_rate);
            sqlite3_bind_double(s, 5, entry->noise_multiplier);
            sqlite3_bind_double(s, 6, entry->clip_norm);
            sqlite3_bind_int64(s, 7, entry->steps);
            sqlite3_bind_int64(s, 8, entry->participants);
            sqlite3_bind_text(s, 9, params, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 10, fl__store_now(st));
            r = step_write(st, s, "appending to the privacy ledger");
            if (r == FL_OK && id_out)
                *id_out = sqlite3_last_insert_rowid(st->db);
        }
    }
    return fl__store_op_end(st, r);
}

fl_status fl_store_ledger_list(fl_store *st, fl_store_ledger_entry **out, size_t *count,
                               int64_t population_id) {
    return list_rows(st, "ledger_list", FL__STORE_LEDGER_LIST, "population_id", population_id,
                     decode_ledger, sizeof(fl_store_ledger_entry), (void **)out, count,
                     "listing the privacy ledger");
}
