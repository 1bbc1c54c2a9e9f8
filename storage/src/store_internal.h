#ifndef FLOTILLA_STORE_INTERNAL_H
#define FLOTILLA_STORE_INTERNAL_H

/* Storage internals shared by the files of this component (fl__store_ prefix). */

#include <sqlite3.h>

#include "fl_internal.h"
#include "flotilla/storage.h"

/* ---- cached statements ----
 * Every statement the store runs is a static SQL text below, prepared once per handle
 * (lazily) and reused; user data only ever reaches SQLite through bind calls. */
enum fl__store_stmt_id {
    FL__STORE_BEGIN_WRITE,
    FL__STORE_BEGIN_READ,
    FL__STORE_COMMIT,
    FL__STORE_ROLLBACK,
    FL__STORE_SAVEPOINT,
    FL__STORE_RELEASE,
    FL__STORE_ROLLBACK_TO,
    FL__STORE_JSON_VALID,
    FL__STORE_JSON_TYPE,
    FL__STORE_JSON_STRING_ARRAY,
    FL__STORE_POP_INSERT,
    FL__STORE_POP_GET,
    FL__STORE_POP_FIND,
    FL__STORE_POP_STATE_GET,
    FL__STORE_POP_STATE_SET,
    FL__STORE_POP_CONFIG_SET,
    FL__STORE_POP_LIST,
    FL__STORE_POP_CLIENT_COUNT,
    FL__STORE_CLIENT_INSERT,
    FL__STORE_CLIENT_GET,
    FL__STORE_CLIENT_HASH,
    FL__STORE_CLIENT_TOUCH,
    FL__STORE_IDENTITY_INSERT,
    FL__STORE_IDENTITY_GET,
    FL__STORE_IDENTITY_DEVICE_OWNER,
    FL__STORE_MODEL_FIND_SHA,
    FL__STORE_MODEL_INSERT,
    FL__STORE_MODEL_GET,
    FL__STORE_MODEL_EXISTS,
    FL__STORE_MODEL_LINEAGE,
    FL__STORE_MODEL_ALL,
    FL__STORE_TAG_UPSERT,
    FL__STORE_TAG_GET,
    FL__STORE_TAG_DELETE,
    FL__STORE_ROUND_NEXT,
    FL__STORE_ROUND_INSERT,
    FL__STORE_ROUND_GET,
    FL__STORE_ROUND_FIND,
    FL__STORE_ROUND_LATEST,
    FL__STORE_ROUND_UNFINISHED,
    FL__STORE_ROUND_STATE,
    FL__STORE_ROUND_START,
    FL__STORE_ROUND_COUNTS,
    FL__STORE_ROUND_COMPLETE,
    FL__STORE_ROUND_ABANDON,
    FL__STORE_PART_UPSERT,
    FL__STORE_PART_LIST,
    FL__STORE_PART_GET,
    FL__STORE_LEDGER_INSERT,
    FL__STORE_LEDGER_LIST,
    FL__STORE_STMT_COUNT
};

/* The handle. A failed open leaves db NULL and the reason in err. */
struct fl_store {
    sqlite3 *db;                              /* NULL after a failed open */
    fl_allocator alloc;                       /* copy of the caller's allocator */
    fl_logger logger;                         /* copy of the caller's logger */
    fl_store_clock_fn clock;                  /* NULL = CLOCK_REALTIME */
    void *clock_user;                         /* passed to clock */
    size_t max_model_bytes;                   /* put limit, bytes */
    int in_txn;                               /* 1 between fl_store_begin and commit/rollback */
    int op_own;                               /* 1 if the running op began the transaction */
    sqlite3_stmt *stmt[FL__STORE_STMT_COUNT]; /* lazily prepared, NULL until first use */
    struct fl__err err;                       /* last failure detail */
    fl_store_wal_stats wal;                   /* kept by the WAL hook */
};

/* ---- errors ---- */

/* Maps a SQLite result code (extended or primary) to an fl_status. */
fl_status fl__store_map_rc(int rc);
/* Records a SQLite failure: code from rc, message "<what>: <sqlite errmsg>". */
fl_status fl__store_sqlerr(fl_store *st, int rc, const char *what);
/* Common entry check: st non-NULL (FL_ERR_MISUSE) and opened (FL_ERR_STATE); clears err. */
fl_status fl__store_enter(fl_store *st, const char *fn);

/* ---- statements and operations ---- */

/* Returns the cached statement id, preparing it on first use; NULL on failure (err set). */
sqlite3_stmt *fl__store_stmt(fl_store *st, enum fl__store_stmt_id id);
/* Resets a statement and clears its bindings after use. */
void fl__store_done(sqlite3_stmt *s);
/* Runs a cached statement that returns no rows, then resets it. */
fl_status fl__store_exec(fl_store *st, enum fl__store_stmt_id id, const char *what);

/* Every API call that touches the database runs between op_begin and op_end: outside a
 * caller transaction they are BEGIN [IMMEDIATE] / COMMIT, inside one a savepoint, so a
 * failing call undoes only its own writes. op_end returns rc, or the commit failure. */
fl_status fl__store_op_begin(fl_store *st, int write);
fl_status fl__store_op_end(fl_store *st, fl_status rc);

/* Current time in Unix ms from the configured clock. */
int64_t fl__store_now(const fl_store *st);

/* ---- argument checks (each returns FL_OK or records FL_ERR_MISUSE naming what) ---- */

/* name: 1..max bytes; kind 0 = any byte >= 0x20, 1 = printable ASCII 0x21..0x7e,
 * 2 = tag alphabet [A-Za-z0-9._:/-]. */
fl_status fl__store_check_name(fl_store *st, const char *s, size_t max, int kind, const char *what);
/* json: NULL -> *json_out = dflt; else at most FL_STORE_JSON_MAX bytes (FL_ERR_TOO_LARGE)
 * of valid JSON (FL_ERR_FORMAT); string_array also requires a JSON array of strings. */
fl_status fl__store_check_json(fl_store *st, const char *json, const char *dflt, int string_array,
                               const char **json_out, const char *what);

/* ---- result blocks ----
 * A result is one allocation: a hidden header, then the fixed part (an array of public
 * structs), then the variable part (strings, blobs). Building takes two passes over the
 * same rows: measure (base NULL, only sizes add up) then fill. */
struct fl__store_pack {
    uint8_t *base; /* start of the variable part; NULL while measuring */
    size_t used;   /* bytes of the variable part used (fill) or needed (measure) */
    size_t cap;    /* bytes available in the variable part (fill only) */
    int overflow;  /* set when a fill would pass cap or a size overflows */
    int nomem;     /* set when SQLite could not produce a column value (out of memory) */
};

/* Copies text column col (NULL stays NULL) into the pack; returns the copy (NULL while
 * measuring). */
const char *fl__store_pack_text(struct fl__store_pack *p, sqlite3_stmt *s, int col);
/* Copies blob column col, 16-byte aligned; returns the copy (NULL while measuring). */
const uint8_t *fl__store_pack_blob(struct fl__store_pack *p, sqlite3_stmt *s, int col);
/* Allocates a block for n fixed structs of size each plus var bytes; *fixed_out gets the
 * fixed part and pack is set up for filling. NULL on overflow or OOM (err set). */
void *fl__store_block_alloc(fl_store *st, size_t n, size_t size, size_t var,
                            struct fl__store_pack *pack);

/* Decodes the current row of s into elem (measuring when p->base is NULL). */
typedef void (*fl__store_decode_fn)(sqlite3_stmt *s, void *elem, struct fl__store_pack *p);

/* How fl__store_collect reads rows. */
enum fl__store_rows {
    FL__STORE_ROWS_LIST,   /* all rows, two passes: the caller holds a transaction */
    FL__STORE_ROWS_ONE,    /* at most one row, one pass */
    FL__STORE_ROWS_CURRENT /* exactly the row the caller already stepped to */
};

/* Collects rows of the bound statement s into one result block of elem_size structs.
 * Leaves *out NULL and *count 0 when there are no rows. Always resets s and clears its
 * bindings. */
fl_status fl__store_collect(fl_store *st, sqlite3_stmt *s, fl__store_decode_fn decode,
                            size_t elem_size, enum fl__store_rows mode, void **out, size_t *count,
                            const char *what);

/* Existence checks inside an op: FL_OK, or FL_ERR_NOT_FOUND naming what. */
fl_status fl__store_model_exists(fl_store *st, int64_t version, const char *what);
fl_status fl__store_population_exists(fl_store *st, int64_t id);

/* ---- hashing ---- */
/* SHA-256 of model bytes: OpenSSL (SHA-NI where the CPU has it, about 6x libsodium's
 * portable code on big models). Fails only when OpenSSL cannot allocate its context:
 * FL_ERR_NOMEM, recorded in st->err. */
fl_status fl__store_sha256_model(fl_store *st, uint8_t out[32], const void *data, size_t len);
/* SHA-256 of a client token (small secrets): libsodium, cannot fail. */
void fl__store_sha256_token(uint8_t out[32], const void *data, size_t len);
void fl__store_hex(char out[FL_STORE_SHA256_HEX_BYTES], const uint8_t hash[32]);

/* ---- schema ---- */

/* Refuses foreign or newer databases without writing anything (run before WAL is
 * switched on, which would modify the file). */
fl_status fl__store_schema_precheck(fl_store *st);
/* Re-checks the version and applies pending migrations, each in its own write
 * transaction. */
fl_status fl__store_migrate(fl_store *st);

#endif /* FLOTILLA_STORE_INTERNAL_H */
