/* Store handle: configuration, open/close, errors, transactions, result blocks and the
 * small helpers shared by the table files. */

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "store_internal.h"

#define FL__STORE_BLOCK_MAGIC UINT64_C(0x464C53544F524531) /* "FLSTORE1" */
#define FL__STORE_MAX_MODEL_LIMIT ((size_t)1000000000)     /* SQLite's default SQLITE_MAX_LENGTH */
#define FL__STORE_DEFAULT_MAX_MODEL ((size_t)512 * 1024 * 1024)

/* Hidden header in front of every result block; 16 bytes keeps the payload 16-aligned. */
struct fl__store_block_hdr {
    uint64_t magic; /* FL__STORE_BLOCK_MAGIC while live */
    uint64_t total; /* bytes allocated, header included */
};

/* ---- sizes ---- */

size_t fl_store_sha256_hex_bytes(void) {
    return FL_STORE_SHA256_HEX_BYTES;
}
int fl_store_schema_version(void) {
    return FL_STORE_SCHEMA_VERSION;
}
size_t fl_store_name_max(void) {
    return FL_STORE_NAME_MAX;
}
size_t fl_store_json_max(void) {
    return FL_STORE_JSON_MAX;
}
size_t fl_store_token_min_bytes(void) {
    return FL_STORE_TOKEN_MIN_BYTES;
}
size_t fl_store_device_id_bytes(void) {
    return FL_STORE_DEVICE_ID_BYTES;
}
size_t fl_store_verify_key_bytes(void) {
    return FL_STORE_VERIFY_KEY_BYTES;
}
size_t fl_store_cert_bytes(void) {
    return FL_STORE_CERT_BYTES;
}
size_t fl_store_participation_hash_bytes(void) {
    return FL_STORE_PARTICIPATION_HASH_BYTES;
}

/* ---- errors ---- */

fl_status fl__store_map_rc(int rc) {
    switch (rc) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return FL_OK;
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_TRIGGER: /* the immutability triggers */
        return FL_ERR_EXISTS;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
        return FL_ERR_NOT_FOUND;
    case SQLITE_TOOBIG:
        return FL_ERR_TOO_LARGE;
    case SQLITE_NOTADB:
        return FL_ERR_FORMAT;
    case SQLITE_IOERR_NOMEM:
        return FL_ERR_NOMEM;
    default:
        break;
    }
    switch (rc & 0xff) {
    case SQLITE_NOMEM:
        return FL_ERR_NOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return FL_ERR_BUSY;
    case SQLITE_CONSTRAINT:
        return FL_ERR_FORMAT; /* CHECK / NOT NULL: a value the schema refuses */
    case SQLITE_CORRUPT:
        return FL_ERR_CORRUPT;
    case SQLITE_INTERRUPT:
        return FL_ERR_CANCELLED;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
    case SQLITE_INTERNAL:
        return FL_ERR_INTERNAL;
    default:
        return FL_ERR_IO; /* IOERR, FULL, CANTOPEN, READONLY, PERM, PROTOCOL, ... */
    }
}

/* 1 if writes on st were refused after a failed fsync (see poison below). */
static int store_poisoned(fl_store *st) {
    sqlite3_stmt *s = NULL;
    int on = 0;
    if (sqlite3_prepare_v2(st->db, "PRAGMA query_only", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        on = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return on;
}

/* After a failed fsync nothing more is acknowledged on this handle. The kernel may have
 * dropped the dirty pages whose write-back failed and reported the error once, so a later
 * fsync can succeed without the data (PostgreSQL's "fsyncgate"): a commit acknowledged
 * after that could rest on writes that never reached the disk. The connection is switched
 * to query_only, which SQLite keeps until the connection closes: reads keep working, every
 * write (BEGIN IMMEDIATE included) fails with SQLITE_READONLY, reported below as FL_ERR_IO.
 * Closing and reopening (which re-reads the files and recovers the WAL) clears it. Write
 * errors and a full disk are not sticky: nothing was acknowledged, SQLite rolled back, and
 * the handle must work again once space is freed. */
static void poison(fl_store *st) {
    if (sqlite3_exec(st->db, "PRAGMA query_only=1", NULL, NULL, NULL) != SQLITE_OK)
        fl__log(&st->logger, FL_LOG_ERROR,
                "storage: could not make the handle read-only after a failed fsync");
    fl__log(&st->logger, FL_LOG_ERROR,
            "storage: fsync failed; this handle refuses writes until it is closed and reopened");
}

fl_status fl__store_sqlerr(fl_store *st, int rc, const char *what) {
    fl_status code = fl__store_map_rc(rc);
    if (code == FL_OK)
        code = FL_ERR_INTERNAL;
    if (st->db && (rc == SQLITE_IOERR_FSYNC || rc == SQLITE_IOERR_DIR_FSYNC)) {
        fl__err_set(&st->err, code,
                    "%s: fsync failed (%s): the data may not be on disk; this handle refuses "
                    "writes until it is closed and reopened",
                    what, sqlite3_errmsg(st->db));
        poison(st);
        return code;
    }
    if (st->db && (rc & 0xff) == SQLITE_READONLY && store_poisoned(st)) {
        fl__err_set(&st->err, code,
                    "%s: refused: an earlier fsync failed on this handle, so committed data "
                    "may not be on disk; close and reopen the store",
                    what);
        return code;
    }
    fl__err_set(&st->err, code, "%s: %s", what, st->db ? sqlite3_errmsg(st->db) : "no database");
    if (code == FL_ERR_CORRUPT || code == FL_ERR_INTERNAL || code == FL_ERR_IO)
        fl__log(&st->logger, FL_LOG_ERROR, "storage: %s", st->err.msg);
    return code;
}

fl_status fl__store_enter(fl_store *st, const char *fn) {
    if (!st)
        return FL_ERR_MISUSE;
    if (!st->db)
        return FL_ERR_STATE; /* failed handle: keep the open failure's message */
    fl__err_clear(&st->err);
    (void)fn;
    return FL_OK;
}

const char *fl_store_errmsg(const fl_store *st) {
    if (!st)
        return "store handle is NULL";
    return fl__err_msg(&st->err);
}

/* ---- statements and operations ---- */

void fl__store_done(sqlite3_stmt *s) {
    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
}

fl_status fl__store_exec(fl_store *st, enum fl__store_stmt_id id, const char *what) {
    sqlite3_stmt *s = fl__store_stmt(st, id);
    if (!s)
        return st->err.code;
    int rc = sqlite3_step(s);
    fl_status r = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? FL_OK : fl__store_sqlerr(st, rc, what);
    fl__store_done(s);
    return r;
}

fl_status fl__store_op_begin(fl_store *st, int write) {
    if (st->in_txn && sqlite3_get_autocommit(st->db))
        /* SQLite already rolled the caller's transaction back (I/O error, disk full). Running
         * this call on its own would commit it alone and split the caller's group. */
        return fl__err_set(&st->err, FL_ERR_ABORTED,
                           "the transaction was rolled back by an earlier error; call "
                           "fl_store_rollback");
    if (sqlite3_get_autocommit(st->db)) {
        st->op_own = 1;
        return fl__store_exec(st, write ? FL__STORE_BEGIN_WRITE : FL__STORE_BEGIN_READ,
                              "starting a transaction");
    }
    st->op_own = 0;
    return fl__store_exec(st, FL__STORE_SAVEPOINT, "starting a savepoint");
}

fl_status fl__store_op_end(fl_store *st, fl_status rc) {
    if (rc == FL_OK) {
        fl_status c = fl__store_exec(st, st->op_own ? FL__STORE_COMMIT : FL__STORE_RELEASE,
                                     st->op_own ? "commit failed" : "releasing a savepoint");
        if (c == FL_OK)
            return FL_OK;
        rc = c;
    }
    /* Undo this op's writes. SQLite may already have rolled the whole transaction back
     * (I/O error, disk full, interrupt); then there is nothing left to undo. Keep the
     * original error message: the undo's own failure would only hide it. */
    struct fl__err saved = st->err;
    if (!sqlite3_get_autocommit(st->db)) {
        if (st->op_own) {
            (void)fl__store_exec(st, FL__STORE_ROLLBACK, "rollback");
        } else {
            (void)fl__store_exec(st, FL__STORE_ROLLBACK_TO, "rollback to savepoint");
            (void)fl__store_exec(st, FL__STORE_RELEASE, "releasing a savepoint");
        }
    }
    st->err = saved;
    return rc;
}

int64_t fl__store_now(const fl_store *st) {
    if (st->clock)
        return st->clock(st->clock_user);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- argument checks ---- */

fl_status fl__store_check_name(fl_store *st, const char *s, size_t max, int kind,
                               const char *what) {
    if (!s)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "%s is NULL", what);
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > max)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "%s must be 1..%zu bytes", what, max);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int ok;
        if (kind == 0)
            ok = c >= 0x20 && c != 0x7f;
        else if (kind == 1)
            ok = c >= 0x21 && c <= 0x7e;
        else
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
        if (!ok)
            return fl__err_set(&st->err, FL_ERR_MISUSE, "%s has a character not allowed (0x%02x)",
                               what, c);
    }
    return FL_OK;
}

/* json_valid() answers 0 both for malformed text and when its parser runs out of memory
 * (SQLite 3.40); json_type() tells them apart by raising SQLITE_ERROR or SQLITE_NOMEM. */
static fl_status json_confirm_invalid(fl_store *st, const char *json, int n, const char *what) {
    sqlite3_stmt *s = fl__store_stmt(st, FL__STORE_JSON_TYPE);
    if (!s)
        return st->err.code;
    sqlite3_bind_text(s, 1, json, n, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    fl_status r;
    if (rc == SQLITE_ROW)
        r = FL_OK; /* valid after all */
    else if ((rc & 0xff) == SQLITE_ERROR)
        r = fl__err_set(&st->err, FL_ERR_FORMAT, "%s is not valid JSON", what);
    else
        r = fl__store_sqlerr(st, rc, "checking JSON");
    fl__store_done(s);
    return r;
}

fl_status fl__store_check_json(fl_store *st, const char *json, const char *dflt, int string_array,
                               const char **json_out, const char *what) {
    if (!json) {
        *json_out = dflt;
        return FL_OK;
    }
    size_t n = strnlen(json, (size_t)FL_STORE_JSON_MAX + 1);
    if (n > (size_t)FL_STORE_JSON_MAX)
        return fl__err_set(&st->err, FL_ERR_TOO_LARGE, "%s is longer than %d bytes", what,
                           FL_STORE_JSON_MAX);
    for (int pass = 0; pass < (string_array ? 2 : 1); pass++) {
        sqlite3_stmt *s =
            fl__store_stmt(st, pass == 0 ? FL__STORE_JSON_VALID : FL__STORE_JSON_STRING_ARRAY);
        if (!s)
            return st->err.code;
        sqlite3_bind_text(s, 1, json, (int)n, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        fl_status r = FL_OK;
        if (rc != SQLITE_ROW)
            r = fl__store_sqlerr(st, rc, "checking JSON");
        else if (sqlite3_column_type(s, 0) == SQLITE_NULL)
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory checking %s", what);
        else if (sqlite3_column_int(s, 0) != 1)
            r = FL_ERR_FORMAT;
        fl__store_done(s);
        if (r == FL_ERR_FORMAT) {
            r = json_confirm_invalid(st, json, (int)n, what);
            if (r == FL_OK && pass == 1)
                r = fl__err_set(&st->err, FL_ERR_FORMAT, "%s is not a JSON array of strings", what);
        }
        if (r != FL_OK)
            return r;
    }
    *json_out = json;
    return FL_OK;
}

/* ---- result blocks ---- */

static size_t round16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Reserves n bytes (aligned to align) in the pack; returns the offset or SIZE_MAX. */
static size_t pack_reserve(struct fl__store_pack *p, size_t n, size_t align) {
    size_t at = align > 1 ? ((p->used + align - 1) & ~(align - 1)) : p->used;
    if (at < p->used || n > SIZE_MAX - at) {
        p->overflow = 1;
        return SIZE_MAX;
    }
    if (p->base && at + n > p->cap) {
        p->overflow = 1;
        return SIZE_MAX;
    }
    p->used = at + n;
    return at;
}

const char *fl__store_pack_text(struct fl__store_pack *p, sqlite3_stmt *s, int col) {
    if (sqlite3_column_type(s, col) == SQLITE_NULL)
        return NULL;
    const unsigned char *t = sqlite3_column_text(s, col);
    if (!t) {
        p->nomem = 1;
        return NULL;
    }
    size_t n = (size_t)sqlite3_column_bytes(s, col);
    size_t at = pack_reserve(p, n + 1, 1);
    if (at == SIZE_MAX || !p->base)
        return NULL;
    memcpy(p->base + at, t, n);
    p->base[at + n] = '\0';
    return (const char *)(p->base + at);
}

const uint8_t *fl__store_pack_blob(struct fl__store_pack *p, sqlite3_stmt *s, int col) {
    size_t n = (size_t)sqlite3_column_bytes(s, col);
    if (n == 0)
        return NULL;
    const void *b = sqlite3_column_blob(s, col);
    if (!b) {
        p->nomem = 1;
        return NULL;
    }
    size_t at = pack_reserve(p, n, 16);
    if (at == SIZE_MAX || !p->base)
        return NULL;
    memcpy(p->base + at, b, n);
    return p->base + at;
}

void *fl__store_block_alloc(fl_store *st, size_t n, size_t size, size_t var,
                            struct fl__store_pack *pack) {
    size_t hdr = sizeof(struct fl__store_block_hdr);
    if (fl__mul_overflows(n, size) || n * size > SIZE_MAX - 64 ||
        round16(n * size) > SIZE_MAX - hdr - var) {
        fl__err_set(&st->err, FL_ERR_TOO_LARGE, "result too large for memory");
        return NULL;
    }
    size_t fixed = round16(n * size);
    size_t total = hdr + fixed + var;
    uint8_t *mem = fl__alloc(&st->alloc, total);
    if (!mem) {
        fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory allocating a %zu-byte result", total);
        return NULL;
    }
    struct fl__store_block_hdr h = {FL__STORE_BLOCK_MAGIC, (uint64_t)total};
    memcpy(mem, &h, sizeof(h));
    memset(mem + hdr, 0, fixed);
    memset(pack, 0, sizeof(*pack));
    pack->base = mem + hdr + fixed;
    pack->cap = var;
    return mem + hdr;
}

void fl_store_free(fl_store *st, void *obj) {
    if (!st || !obj)
        return;
    uint8_t *mem = (uint8_t *)obj - sizeof(struct fl__store_block_hdr);
    struct fl__store_block_hdr h;
    memcpy(&h, mem, sizeof(h));
    if (!FL_ALWAYS(h.magic == FL__STORE_BLOCK_MAGIC))
        return; /* not ours, or freed twice: leaking beats corrupting the heap */
    h.magic = 0;
    memcpy(mem, &h, sizeof(h));
    fl__free(&st->alloc, mem, (size_t)h.total);
}

/* Scratch for the measuring pass: any public result struct fits. */
union fl__store_any_result {
    fl_store_population pop;
    fl_store_client client;
    fl_store_model model;
    fl_store_round round;
    fl_store_participant part;
    fl_store_ledger_entry ledger;
};

fl_status fl__store_collect(fl_store *st, sqlite3_stmt *s, fl__store_decode_fn decode,
                            size_t elem_size, enum fl__store_rows mode, void **out, size_t *count,
                            const char *what) {
    union fl__store_any_result dummy;
    struct fl__store_pack measure = {0};
    size_t n = 0;
    int rc;
    fl_status r = FL_OK;
    *out = NULL;
    *count = 0;
    if (!FL_ALWAYS(elem_size <= sizeof(dummy))) {
        fl__store_done(s);
        return fl__err_set(&st->err, FL_ERR_INTERNAL, "%s: result struct too big", what);
    }
    int single = mode != FL__STORE_ROWS_LIST;
    /* Pass 1: count rows and measure their variable parts. */
    rc = mode == FL__STORE_ROWS_CURRENT ? SQLITE_ROW : sqlite3_step(s);
    while (rc == SQLITE_ROW) {
        memset(&dummy, 0, sizeof(dummy));
        decode(s, &dummy, &measure);
        n++;
        if (single)
            break;
        rc = sqlite3_step(s);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        r = fl__store_sqlerr(st, rc, what);
        goto out_reset;
    }
    if (measure.nomem) {
        r = fl__err_set(&st->err, FL_ERR_NOMEM, "%s: out of memory reading a row", what);
        goto out_reset;
    }
    if (measure.overflow) {
        r = fl__err_set(&st->err, FL_ERR_TOO_LARGE, "%s: result too large for memory", what);
        goto out_reset;
    }
    if (n == 0)
        goto out_reset;

    struct fl__store_pack fill;
    uint8_t *block = fl__store_block_alloc(st, n, elem_size, measure.used, &fill);
    if (!block) {
        r = st->err.code;
        goto out_reset;
    }
    /* Pass 2: fill. A single row is still the current one; a list is read again. */
    size_t i = 0;
    if (single) {
        decode(s, block, &fill);
        i = 1;
    } else {
        sqlite3_reset(s);
        while (i < n && (rc = sqlite3_step(s)) == SQLITE_ROW)
            decode(s, block + i++ * elem_size, &fill);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            r = fl__store_sqlerr(st, rc, what);
    }
    if (r == FL_OK && (i != n || fill.overflow || fill.nomem))
        r = fl__err_set(&st->err, fill.nomem ? FL_ERR_NOMEM : FL_ERR_INTERNAL,
                        "%s: rows changed between passes", what);
    if (r != FL_OK) {
        fl_store_free(st, block);
        goto out_reset;
    }
    *out = block;
    *count = n;
out_reset:
    fl__store_done(s);
    return r;
}

/* ---- hashing ---- */

fl_status fl__store_sha256_model(fl_store *st, uint8_t out[32], const void *data, size_t len) {
    unsigned int n = 0;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return fl__err_set(&st->err, FL_ERR_NOMEM, "SHA-256 failed: OpenSSL is out of memory");
    return FL_OK;
}

void fl__store_sha256_token(uint8_t out[32], const void *data, size_t len) {
    crypto_hash_sha256(out, data, (unsigned long long)len);
}

void fl__store_hex(char out[FL_STORE_SHA256_HEX_BYTES], const uint8_t hash[32]) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = digits[hash[i] >> 4];
        out[2 * i + 1] = digits[hash[i] & 15];
    }
    out[64] = '\0';
}

/* ---- configuration and open/close ---- */

void fl_store_config_init(fl_store_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->allocator = NULL;
    cfg->logger.fn = NULL;
    cfg->logger.user = NULL;
    cfg->logger.min_level = FL_LOG_INFO;
    cfg->busy_timeout_ms = 5000;
    cfg->create_if_missing = 1;
    cfg->max_model_bytes = FL__STORE_DEFAULT_MAX_MODEL;
    cfg->clock = NULL;
    cfg->clock_user = NULL;
}

/* Validates cfg field by field (everything but the allocator, checked before the handle
 * exists); the message names the first bad field. */
static fl_status check_config(fl_store *st, const fl_store_config *cfg) {
    if (cfg->logger.min_level < FL_LOG_DEBUG || cfg->logger.min_level > FL_LOG_ERROR)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "cfg->logger.min_level is not a log level");
    if (cfg->busy_timeout_ms < 0 || cfg->busy_timeout_ms > 600000)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "cfg->busy_timeout_ms must be 0..600000");
    if (cfg->create_if_missing != 0 && cfg->create_if_missing != 1)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "cfg->create_if_missing must be 0 or 1");
    if (cfg->max_model_bytes == 0 || cfg->max_model_bytes > FL__STORE_MAX_MODEL_LIMIT)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "cfg->max_model_bytes must be 1..%zu",
                           FL__STORE_MAX_MODEL_LIMIT);
    if (!cfg->clock && cfg->clock_user)
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "cfg->clock_user is set but cfg->clock is NULL");
    return FL_OK;
}

/* Runs a pragma to the end and copies the text of its first row (at most cap-1 bytes)
 * into buf. It must run to SQLITE_DONE: a pragma that changes the file reports its row
 * first and a failure to write the change only on the next step (journal_mode=WAL on a
 * new file: an I/O error there leaves the file in rollback-journal mode). */
static fl_status pragma_text(fl_store *st, const char *sql, char *buf, size_t cap) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    int got = 0;
    buf[0] = '\0';
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        rc = sqlite3_step(s);
        if (rc != SQLITE_ROW || got)
            continue;
        got = 1;
        const unsigned char *t = sqlite3_column_text(s, 0);
        if (t) {
            size_t n = strnlen((const char *)t, cap - 1);
            memcpy(buf, t, n);
            buf[n] = '\0';
        } else if (sqlite3_errcode(st->db) == SQLITE_NOMEM) {
            rc = SQLITE_NOMEM;
        }
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? FL_OK : fl__store_sqlerr(st, rc, sql);
}

/* WAL pages after which a commit checkpoints (SQLite's default autocheckpoint). */
#define FL__STORE_CHECKPOINT_FRAMES 1000

/* Replaces SQLite's autocheckpoint so that a failure inside it is seen. SQLite runs the
 * hook after a commit is durable and drops the hook's checkpoint errors, so without it a
 * failed fsync of the database file during a checkpoint would go unnoticed and the handle
 * would keep acknowledging commits. A failed checkpoint loses nothing (the frames stay in
 * the WAL and the next checkpoint copies them again), so the commit still succeeds; a
 * failed fsync makes the handle refuse writes like any other (see poison). */
static int wal_hook(void *user, sqlite3 *db, const char *name, int frames) {
    fl_store *st = user;
    st->wal.wal_frames = frames;
    if (frames < FL__STORE_CHECKPOINT_FRAMES)
        return SQLITE_OK;
    int rc = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    st->wal.checkpoints++;
    bool failed = rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY;
    st->wal.last_checkpoint_failed = failed;
    if (failed)
        st->wal.checkpoint_failures++;
    if (rc == SQLITE_IOERR_FSYNC || rc == SQLITE_IOERR_DIR_FSYNC)
        poison(st);
    else if (failed)
        fl__log(&st->logger, FL_LOG_WARN, "storage: checkpoint failed: %s", sqlite3_errstr(rc));
    return SQLITE_OK;
}

fl_status fl_store_wal_stats_get(const fl_store *st, fl_store_wal_stats *out) {
    if (!st || !out)
        return FL_ERR_MISUSE;
    *out = st->wal;
    return FL_OK;
}

/* Connection settings every handle runs with: extended codes, busy timeout, defensive
 * mode, foreign keys, WAL, synchronous=FULL. */
static fl_status configure_db(fl_store *st, const char *path, const fl_store_config *cfg) {
    char buf[32];
    int on = 0;
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, cfg->busy_timeout_ms);
    if (sqlite3_db_config(st->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL) != SQLITE_OK ||
        sqlite3_db_config(st->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL) != SQLITE_OK ||
        sqlite3_db_config(st->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 1, &on) != SQLITE_OK || !on)
        return fl__err_set(&st->err, FL_ERR_UNSUPPORTED,
                           "SQLite refused defensive/trigger settings");
    on = 0;
    if (sqlite3_db_config(st->db, SQLITE_DBCONFIG_ENABLE_FKEY, 1, &on) != SQLITE_OK || !on)
        return fl__err_set(&st->err, FL_ERR_UNSUPPORTED,
                           "this SQLite build cannot enforce foreign keys");
    if ((size_t)sqlite3_limit(st->db, SQLITE_LIMIT_LENGTH, -1) < cfg->max_model_bytes)
        return fl__err_set(&st->err, FL_ERR_MISUSE,
                           "cfg->max_model_bytes is above this SQLite's length limit (%d)",
                           sqlite3_limit(st->db, SQLITE_LIMIT_LENGTH, -1));

    /* Refuse a foreign or newer file before WAL mode touches its header. */
    fl_status r = fl__store_schema_precheck(st);
    if (r != FL_OK)
        return r;

    /* Switching a fresh file to WAL needs it to itself for a moment, and SQLite does not
     * call the busy handler for that: retry here, within the same busy timeout. */
    struct timespec t0, now, pause = {0, 2 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        r = pragma_text(st, "PRAGMA journal_mode=WAL", buf, sizeof(buf));
        if (r != FL_ERR_BUSY)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t waited_ms =
            (int64_t)(now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (waited_ms >= cfg->busy_timeout_ms)
            break;
        nanosleep(&pause, NULL);
    }
    if (r != FL_OK)
        return r;
    int memory = strcmp(path, ":memory:") == 0;
    if (strcmp(buf, "wal") != 0 && !(memory && strcmp(buf, "memory") == 0))
        return fl__err_set(&st->err, FL_ERR_IO, "could not switch to WAL mode (journal_mode=%s)",
                           buf);
    r = pragma_text(st, "PRAGMA synchronous=FULL", buf, sizeof(buf));
    if (r == FL_OK)
        r = pragma_text(st, "PRAGMA synchronous", buf, sizeof(buf));
    if (r != FL_OK)
        return r;
    if (strcmp(buf, "2") != 0)
        return fl__err_set(&st->err, FL_ERR_IO, "could not set synchronous=FULL (got %s)", buf);
    sqlite3_wal_hook(st->db, wal_hook, st);
    return FL_OK;
}

fl_status fl_store_open(fl_store **out, const char *path, const fl_store_config *cfg) {
    fl_store_config defaults;
    fl_allocator alloc;
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (!cfg) {
        fl_store_config_init(&defaults);
        cfg = &defaults;
    }
    /* A bad allocator cannot allocate the handle that reports it: such a failed handle
     * comes from libc instead (and fl_store_close frees it there). */
    const char *bad = NULL;
    if (cfg->struct_size < sizeof(fl_store_config))
        bad = "cfg->struct_size is smaller than sizeof(fl_store_config); use fl_store_config_init";
    else if (fl__allocator_copy(&alloc, cfg->allocator) != FL_OK)
        bad = "cfg->allocator needs struct_size >= sizeof(fl_allocator), alloc and free";
    if (bad)
        memset(&alloc, 0, sizeof(alloc));
    fl_store *st = fl__calloc(&alloc, 1, sizeof(*st));
    if (!st)
        return FL_ERR_NOMEM;
    st->alloc = alloc;
    *out = st;
    if (bad)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "%s", bad);

    fl_status r = check_config(st, cfg);
    if (r != FL_OK)
        return r;
    if (!path || !path[0])
        return fl__err_set(&st->err, FL_ERR_MISUSE, "path is NULL or empty");
    st->logger = cfg->logger;
    st->clock = cfg->clock;
    st->clock_user = cfg->clock_user;
    st->max_model_bytes = cfg->max_model_bytes;

    if (sodium_init() < 0)
        return fl__err_set(&st->err, FL_ERR_INTERNAL, "libsodium failed to initialise");

    if (!cfg->create_if_missing && strcmp(path, ":memory:") != 0) {
        struct stat sb;
        if (stat(path, &sb) != 0 && errno == ENOENT)
            return fl__err_set(&st->err, FL_ERR_NOT_FOUND, "no store at '%s'", path);
    }
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE |
                (cfg->create_if_missing ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        fl_status code = fl__store_map_rc(rc);
        fl__err_set(&st->err, code, "cannot open '%s': %s", path,
                    db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close_v2(db);
        return code;
    }
    st->db = db;
    r = configure_db(st, path, cfg);
    if (r == FL_OK)
        r = fl__store_migrate(st);
    if (r != FL_OK) {
        /* Keep the message, drop the connection: the handle is now a failed one. */
        for (int i = 0; i < FL__STORE_STMT_COUNT; i++) {
            sqlite3_finalize(st->stmt[i]);
            st->stmt[i] = NULL;
        }
        sqlite3_close_v2(st->db);
        st->db = NULL;
        if (r == FL_ERR_CORRUPT || r == FL_ERR_UNSUPPORTED || r == FL_ERR_FORMAT)
            fl__log(&st->logger, FL_LOG_ERROR, "storage: open '%s' failed: %s", path, st->err.msg);
        return r;
    }
    fl__log(&st->logger, FL_LOG_INFO, "storage: opened '%s' (schema v%d)", path,
            FL_STORE_SCHEMA_VERSION);
    return FL_OK;
}

void fl_store_close(fl_store *st) {
    if (!st)
        return;
    for (int i = 0; i < FL__STORE_STMT_COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    if (st->db)
        sqlite3_close_v2(st->db); /* rolls back an open transaction */
    fl_allocator a = st->alloc;
    fl__free(&a, st, sizeof(*st));
}

void fl_store_interrupt(fl_store *st) {
    if (st && st->db)
        sqlite3_interrupt(st->db);
}

/* ---- transactions ---- */

fl_status fl_store_begin(fl_store *st) {
    fl_status r = fl__store_enter(st, "begin");
    if (r != FL_OK)
        return r;
    if (st->in_txn || !sqlite3_get_autocommit(st->db))
        return fl__err_set(&st->err, FL_ERR_STATE, "a transaction is already open");
    r = fl__store_exec(st, FL__STORE_BEGIN_WRITE, "begin");
    if (r == FL_OK)
        st->in_txn = 1;
    return r;
}

fl_status fl_store_commit(fl_store *st) {
    fl_status r = fl__store_enter(st, "commit");
    if (r != FL_OK)
        return r;
    if (!st->in_txn)
        return fl__err_set(&st->err, FL_ERR_STATE, "no transaction is open");
    if (sqlite3_get_autocommit(st->db)) {
        st->in_txn = 0;
        return fl__err_set(&st->err, FL_ERR_ABORTED,
                           "the transaction was rolled back by an earlier error; nothing was "
                           "written");
    }
    r = fl__store_exec(st, FL__STORE_COMMIT, "commit");
    if (r == FL_OK || sqlite3_get_autocommit(st->db))
        st->in_txn = 0;
    return r;
}

fl_status fl_store_rollback(fl_store *st) {
    fl_status r = fl__store_enter(st, "rollback");
    if (r != FL_OK)
        return r;
    if (!st->in_txn)
        return fl__err_set(&st->err, FL_ERR_STATE, "no transaction is open");
    st->in_txn = 0;
    if (sqlite3_get_autocommit(st->db))
        return FL_OK; /* SQLite already rolled it back */
    return fl__store_exec(st, FL__STORE_ROLLBACK, "rollback");
}

int fl_store_in_transaction(const fl_store *st) {
    return st && st->db && st->in_txn ? 1 : 0;
}

/* ---- consistency check ---- */

/* 1 if an integrity_check report says a page could not be read for lack of memory
 * ("... unable to get the page. error code=7", SQLITE_NOMEM): not damage in the file. */
static int integrity_nomem(const char *t) {
    for (const char *p = t; (p = strstr(p, "error code=7")) != NULL;) {
        p += strlen("error code=7");
        if (*p < '0' || *p > '9')
            return 1;
    }
    return 0;
}

fl_status fl_store_check(fl_store *st) {
    fl_status r = fl__store_enter(st, "check");
    if (r != FL_OK)
        return r;
    r = fl__store_op_begin(st, 0);
    if (r != FL_OK)
        return r;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA integrity_check", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        if (!t)
            r = fl__err_set(&st->err, FL_ERR_NOMEM, "integrity_check: out of memory");
        else if (strcmp(t, "ok") != 0)
            r = fl__err_set(&st->err, integrity_nomem(t) ? FL_ERR_NOMEM : FL_ERR_CORRUPT,
                            "integrity_check: %s", t);
        rc = SQLITE_OK;
    }
    if (r == FL_OK && rc != SQLITE_OK && rc != SQLITE_DONE)
        r = fl__store_sqlerr(st, rc, "integrity_check");
    sqlite3_finalize(s);
    s = NULL;
    if (r == FL_OK) {
        rc = sqlite3_prepare_v2(st->db, "PRAGMA foreign_key_check", -1, &s, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
            const char *t = (const char *)sqlite3_column_text(s, 0);
            r = fl__err_set(&st->err, FL_ERR_CORRUPT, "foreign_key_check: dangling reference in %s",
                            t ? t : "(null)");
            rc = SQLITE_OK;
        }
        if (r == FL_OK && rc != SQLITE_OK && rc != SQLITE_DONE)
            r = fl__store_sqlerr(st, rc, "foreign_key_check");
        sqlite3_finalize(s);
    }
    if (r == FL_OK) {
        s = fl__store_stmt(st, FL__STORE_MODEL_ALL);
        if (!s)
            r = st->err.code;
        while (r == FL_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
            int64_t version = sqlite3_column_int64(s, 0);
            const void *want = sqlite3_column_blob(s, 1);
            int want_len = sqlite3_column_bytes(s, 1);
            int64_t size = sqlite3_column_int64(s, 2);
            const void *bytes = sqlite3_column_blob(s, 3);
            int len = sqlite3_column_bytes(s, 3);
            uint8_t got[32];
            if (!bytes && len > 0) {
                r = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory reading version %lld",
                                (long long)version);
                break;
            }
            r = fl__store_sha256_model(st, got, bytes, (size_t)len);
            if (r != FL_OK)
                break;
            if (want_len != 32 || (int64_t)len != size || memcmp(got, want, 32) != 0) {
                r = fl__err_set(&st->err, FL_ERR_CORRUPT,
                                "model version %lld does not match its SHA-256",
                                (long long)version);
                fl__log(&st->logger, FL_LOG_ERROR, "storage: %s", st->err.msg);
            }
        }
        if (r == FL_OK && rc != SQLITE_DONE)
            r = fl__store_sqlerr(st, rc, "reading model versions");
        fl__store_done(s);
    }
    return fl__store_op_end(st, r);
}
