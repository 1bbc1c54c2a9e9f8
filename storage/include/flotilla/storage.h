#ifndef FLOTILLA_STORAGE_H
#define FLOTILLA_STORAGE_H

/* Flotilla storage: the coordinator's SQLite store and model registry.
 *
 * One fl_store handle wraps one SQLite database file (WAL mode, foreign keys on,
 * synchronous=FULL). It holds populations (FL tasks), enrolled clients, immutable
 * content-addressed model versions with movable tags, rounds and their participants,
 * and an append-only privacy ledger read by the DP accountant.
 *
 * Atomicity: every call that writes is one transaction on its own. To group several
 * writes (a round's new model version + round record + ledger entry), wrap them in
 * fl_store_begin() / fl_store_commit(); inside such a transaction a failing call undoes
 * only its own writes (it runs in a savepoint) and the caller decides whether to commit
 * or roll back the rest.
 *
 * Threads: a handle is used by one thread at a time (no internal locking), except
 * fl_store_interrupt(), which is safe from any thread while the handle is open. Several
 * handles, in one process or many, may open the same file; writers take turns and wait
 * up to the configured busy timeout before returning FL_ERR_BUSY.
 *
 * Results: get/list calls return one heap block per call (struct, strings and bytes
 * packed together) allocated with the store's allocator. Release it with
 * fl_store_free() before closing the store. Strings in results are NUL-terminated UTF-8.
 *
 * Times are Unix milliseconds (UTC) from the configured clock. IDs are positive int64;
 * 0 means "none" wherever an ID is optional. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sizes and limits ---- */

/* Bytes of a lowercase hex SHA-256 digest including the terminating NUL. */
#define FL_STORE_SHA256_HEX_BYTES 65
/* Schema version this library creates and upgrades to (PRAGMA user_version). */
#define FL_STORE_SCHEMA_VERSION 6
/* Longest name accepted for populations, tags and client IDs, in bytes. */
#define FL_STORE_NAME_MAX 128
/* Longest JSON text accepted in any *_json argument, in bytes. */
#define FL_STORE_JSON_MAX (1024 * 1024)
/* Shortest client auth token accepted, in bytes (tokens must be random, not passwords). */
#define FL_STORE_TOKEN_MIN_BYTES 16

/* Run-time getters for the macros above (same values; for bindings). Thread-safe. */
FL_API size_t fl_store_sha256_hex_bytes(void);
FL_API int fl_store_schema_version(void);
FL_API size_t fl_store_name_max(void);
FL_API size_t fl_store_json_max(void);
FL_API size_t fl_store_token_min_bytes(void);

/* Sizes of a client's device identity (fl_store_client_identity, schema version 5): the
 * device id its certificate binds, its Ed25519 verification key, and the certificate (the
 * device authority's Ed25519 signature). */
#define FL_STORE_DEVICE_ID_BYTES 32
#define FL_STORE_VERIFY_KEY_BYTES 32
#define FL_STORE_CERT_BYTES 64
FL_API size_t fl_store_device_id_bytes(void);
FL_API size_t fl_store_verify_key_bytes(void);
FL_API size_t fl_store_cert_bytes(void);

/* Size of a participation hash (fl_store_participant_set_v2, schema version 6): the caller's
 * digest of the id it gave a participant for one round, stored instead of the id. */
#define FL_STORE_PARTICIPATION_HASH_BYTES 32
FL_API size_t fl_store_participation_hash_bytes(void);

/* ---- handle and configuration ---- */

typedef struct fl_store fl_store;

/* Clock hook: returns the current time in Unix milliseconds. */
typedef int64_t (*fl_store_clock_fn)(void *user);

/* Open-time configuration. Fill with fl_store_config_init(), then change fields.
 * Validated by fl_store_open(); a bad field gives FL_ERR_MISUSE naming it. */
typedef struct fl_store_config {
    size_t struct_size;            /* sizeof(fl_store_config); set by fl_store_config_init */
    const fl_allocator *allocator; /* NULL = libc; copied at open. Covers the store's own
                                    * allocations (handle, results); SQLite's page cache
                                    * and parser use SQLite's process-wide allocator. */
    fl_logger logger;              /* copied at open; default: off */
    int busy_timeout_ms;           /* wait this long for a lock before FL_ERR_BUSY; 0..600000,
                                    * default 5000 */
    int create_if_missing;         /* 1 (default): create the file; 0: FL_ERR_NOT_FOUND if absent */
    size_t max_model_bytes;        /* largest model accepted by fl_store_model_put, in bytes;
                                    * 1..1000000000, default 512 MiB */
    fl_store_clock_fn clock;       /* NULL (default) = CLOCK_REALTIME */
    void *clock_user;              /* passed to clock */
} fl_store_config;

/* Fills cfg with the defaults documented on each field. cfg NULL is a no-op.
 * Thread-safe. */
FL_API void fl_store_config_init(fl_store_config *cfg);

/* Opens (creating if allowed) the database at path and brings its schema up to
 * FL_STORE_SCHEMA_VERSION, one migration per transaction.
 *   out   receives the handle. On failure *out is still set to a failed handle (so
 *         fl_store_errmsg() can say why) unless the handle itself could not be allocated
 *         or out is NULL; a failed handle accepts only fl_store_errmsg() and
 *         fl_store_close() (other calls return FL_ERR_STATE). Close it either way.
 *   path  file name (UTF-8); ":memory:" opens a private, non-durable in-memory store
 *         (tests only: no WAL, nothing survives close). Not retained after the call.
 *   cfg   configuration, or NULL for defaults. Not retained; its allocator struct is copied.
 * Returns FL_OK; FL_ERR_MISUSE (bad argument or config field, named in the message);
 * FL_ERR_NOT_FOUND (missing file and create_if_missing = 0); FL_ERR_UNSUPPORTED (the
 * database was written by a newer Flotilla: its schema version is above
 * FL_STORE_SCHEMA_VERSION); FL_ERR_FORMAT (not a SQLite file, or a SQLite file that is not
 * a Flotilla store); FL_ERR_BUSY (another process held the write lock during an upgrade
 * past the busy timeout); FL_ERR_IO; FL_ERR_CORRUPT; FL_ERR_NOMEM. Thread-safe for
 * distinct handles. */
FL_API fl_status fl_store_open(fl_store **out, const char *path, const fl_store_config *cfg);

/* Closes the store, rolling back a transaction left open by fl_store_begin(). Results
 * not yet released with fl_store_free() must be released before this call. NULL is a
 * no-op. */
FL_API void fl_store_close(fl_store *st);

/* Detail of the last failure on st: never NULL, owned by st, valid until the next call
 * on st. For NULL st returns a static string. */
FL_API const char *fl_store_errmsg(const fl_store *st);

/* Releases a result block returned by any fl_store_*_get/find/list/lineage call.
 * st must be the store that returned it and still be open. obj NULL is a no-op. */
FL_API void fl_store_free(fl_store *st, void *obj);

/* Asks a running call on st to stop as soon as possible; it then returns
 * FL_ERR_CANCELLED and its writes are undone. Safe from any thread while st is open;
 * no effect if nothing is running. st NULL is a no-op. */
FL_API void fl_store_interrupt(fl_store *st);

/* Full consistency check: SQLite's PRAGMA integrity_check, PRAGMA foreign_key_check,
 * and the SHA-256 of every stored model version. Can take a while on a big store.
 * Returns FL_OK; FL_ERR_CORRUPT (the first problem is in fl_store_errmsg); FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_MISUSE / FL_ERR_STATE (bad or failed handle). */
FL_API fl_status fl_store_check(fl_store *st);

/* WAL and checkpoint state of a handle. The store checkpoints by itself after a commit
 * once the WAL holds 1000 frames; a checkpoint that fails for a full disk or an I/O error
 * loses nothing (the frames stay in the WAL, the next one retries) and does not fail the
 * commit, so these counters are how an operator sees a disk filling up (a failed fsync
 * poisons the handle instead: writes are refused). */
typedef struct fl_store_wal_stats {
    int64_t wal_frames;            /* frames in the WAL at the last commit (SQLite's count) */
    uint64_t checkpoints;          /* automatic checkpoints tried by this handle */
    uint64_t checkpoint_failures;  /* of those, failed (full disk, I/O error; busy not counted) */
    int last_checkpoint_failed;    /* 1 if the latest one failed */
} fl_store_wal_stats;

/* Fills out with st's WAL state. Reads only what the handle recorded (no I/O); not
 * thread-safe with other calls on st. Returns FL_OK; FL_ERR_MISUSE (NULL argument). */
FL_API fl_status fl_store_wal_stats_get(const fl_store *st, fl_store_wal_stats *out);

/* ---- transactions ----
 * Transactions do not nest. Inside one, each API call is a savepoint: on failure only
 * that call's writes are undone. A store error that forces SQLite to roll back the whole
 * transaction (disk full, I/O error) makes every later call return FL_ERR_ABORTED, and
 * fl_store_commit() too, until fl_store_commit() or fl_store_rollback() ends it: nothing
 * of the group is written. */

/* Starts a write transaction (takes the database write lock, waiting up to the busy
 * timeout). Returns FL_OK; FL_ERR_STATE (one is already open on st); FL_ERR_BUSY;
 * FL_ERR_IO; FL_ERR_MISUSE. */
FL_API fl_status fl_store_begin(fl_store *st);

/* Makes every write since fl_store_begin() durable (fsync'ed) and visible at once.
 * Returns FL_OK; FL_ERR_STATE (no transaction open); FL_ERR_BUSY (the transaction stays
 * open: retry or roll back); FL_ERR_ABORTED (SQLite already rolled it back after an
 * earlier error: nothing was written); FL_ERR_IO (nothing was written); FL_ERR_MISUSE. */
FL_API fl_status fl_store_commit(fl_store *st);

/* Undoes every write since fl_store_begin(). Returns FL_OK; FL_ERR_STATE (no transaction
 * open); FL_ERR_IO; FL_ERR_MISUSE. */
FL_API fl_status fl_store_rollback(fl_store *st);

/* 1 if a transaction started by fl_store_begin() is open on st, else 0 (also for NULL). */
FL_API int fl_store_in_transaction(const fl_store *st);

/* ---- populations (FL tasks) ---- */

typedef enum fl_store_population_state {
    FL_STORE_POPULATION_ACTIVE = 0, /* accepting clients and rounds */
    FL_STORE_POPULATION_PAUSED = 1, /* temporarily not running rounds */
    FL_STORE_POPULATION_CLOSED = 2  /* finished; terminal */
} fl_store_population_state;

typedef struct fl_store_population {
    int64_t id;                       /* positive, assigned by the store */
    const char *name;                 /* unique, 1..FL_STORE_NAME_MAX bytes */
    const char *config_json;          /* task configuration, a JSON value */
    double epsilon;                   /* total privacy budget epsilon (> 0) */
    double delta;                     /* total privacy budget delta, in [0, 1) */
    const char *allowed_regions_json; /* JSON array of region strings; [] = any region */
    int64_t created_at;               /* Unix ms */
    fl_store_population_state state;  /* lifecycle state */
} fl_store_population;

/* Creates a population in state ACTIVE.
 *   id_out                receives its ID (may be NULL).
 *   name                  unique name, 1..FL_STORE_NAME_MAX bytes, no control characters.
 *   config_json           JSON text, or NULL for "{}".
 *   epsilon, delta        the population's total privacy budget: finite epsilon > 0,
 *                         0 <= delta < 1.
 *   allowed_regions_json  JSON array of strings, or NULL for "[]".
 * Returns FL_OK; FL_ERR_EXISTS (name taken); FL_ERR_FORMAT (invalid JSON or regions not
 * an array of strings); FL_ERR_TOO_LARGE (JSON over FL_STORE_JSON_MAX); FL_ERR_MISUSE;
 * FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE (failed handle). */
FL_API fl_status fl_store_population_create(fl_store *st, int64_t *id_out, const char *name,
                                            const char *config_json, double epsilon, double delta,
                                            const char *allowed_regions_json);

/* Reads population id into *out (release with fl_store_free). Returns FL_OK;
 * FL_ERR_NOT_FOUND; FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_population_get(fl_store *st, fl_store_population **out, int64_t id);

/* Like fl_store_population_get, by unique name. */
FL_API fl_status fl_store_population_find(fl_store *st, fl_store_population **out,
                                          const char *name);

/* Moves population id to state. CLOSED is terminal: leaving it gives FL_ERR_STATE.
 * Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_STATE; FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO. */
FL_API fl_status fl_store_population_set_state(fl_store *st, int64_t id,
                                               fl_store_population_state state);

/* Replaces the settings of population id: its configuration, total privacy budget and
 * allowed regions, as one write (inside fl_store_begin() a savepoint, so it commits or rolls
 * back with the caller's group: pair it with fl_store_audit_append_config() so the log and
 * the row never disagree). Name, creation time and state are kept. The store does not judge
 * the change (a budget may go up or down here): the caller enforces its policy.
 *   config_json           JSON text, or NULL for "{}".
 *   epsilon, delta        finite epsilon > 0, 0 <= delta < 1.
 *   allowed_regions_json  JSON array of strings, or NULL for "[]".
 * Returns FL_OK; FL_ERR_NOT_FOUND (no population id); FL_ERR_STATE (population CLOSED, or
 * failed handle); FL_ERR_FORMAT (invalid JSON, regions not an array of strings);
 * FL_ERR_TOO_LARGE (JSON over FL_STORE_JSON_MAX); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO;
 * FL_ERR_NOMEM. */
FL_API fl_status fl_store_population_update_config(fl_store *st, int64_t id,
                                                   const char *config_json, double epsilon,
                                                   double delta,
                                                   const char *allowed_regions_json);

/* Lists every population (any state) in id order into an array of *count entries (release
 * with fl_store_free; *out is NULL when *count is 0). Returns FL_OK (also for none);
 * FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_population_list(fl_store *st, fl_store_population **out,
                                          size_t *count);

/* Number of clients enrolled in population id (erased and swept clients are gone) into
 * *count. Returns FL_OK; FL_ERR_NOT_FOUND (no population id); FL_ERR_MISUSE; FL_ERR_BUSY;
 * FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_population_client_count(fl_store *st, int64_t id, int64_t *count);

/* ---- clients ----
 * Clients are pseudonymous: the coordinator picks an opaque ID and a random auth token.
 * Only SHA-256(token) is stored; the token itself never touches the disk. */

typedef struct fl_store_client {
    const char *client_id; /* pseudonymous ID, 1..FL_STORE_NAME_MAX printable ASCII bytes */
    const char *region;    /* region code, e.g. "eu-west" */
    int64_t population_id; /* population the client is enrolled in */
    int64_t enrolled_at;   /* Unix ms */
    int64_t last_seen;     /* Unix ms of the last fl_store_client_touch (or enrolment) */
    /* Added in schema version 4 (client revocation). No struct_size: the store allocates
     * this struct (fl_store_client_get), so code built against the older layout reads a
     * prefix of it and is unaffected. */
    int64_t revoked_at;    /* Unix ms given to fl_store_client_revoke; 0 = active */
} fl_store_client;

/* Enrols a client.
 *   client_id      1..FL_STORE_NAME_MAX printable ASCII bytes (0x21..0x7e).
 *   token, len     the client's secret, at least FL_STORE_TOKEN_MIN_BYTES random bytes;
 *                  hashed, not kept. The caller should wipe its copy.
 *   region         1..64 printable ASCII bytes.
 *   population_id  an existing population.
 * Returns FL_OK; FL_ERR_EXISTS (ID taken); FL_ERR_NOT_FOUND (no such population);
 * FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_client_enroll(fl_store *st, const char *client_id, const void *token,
                                        size_t token_len, const char *region,
                                        int64_t population_id);

/* Reads a client's record into *out (release with fl_store_free), including whether it is
 * revoked (revoked_at). Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_MISUSE; FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_client_get(fl_store *st, fl_store_client **out, const char *client_id);

/* Checks token against the stored hash (constant-time compare). Writes nothing. Does not
 * look at revocation: a revoked client with its right token still gets FL_OK here; read
 * revoked_at with fl_store_client_get to refuse it. Returns FL_OK; FL_ERR_AUTH for an
 * unknown ID or a wrong token alike (no oracle); FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_client_authenticate(fl_store *st, const char *client_id,
                                              const void *token, size_t token_len);

/* Sets the client's last_seen to now. Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_MISUSE;
 * FL_ERR_BUSY; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_client_touch(fl_store *st, const char *client_id);

/* ---- client identities (schema version 5) ----
 * A client's device identity for secure aggregation in active mode: the device id, the
 * device's Ed25519 verification key and the device authority's certificate over both. The
 * store keeps the bytes and enforces one client per device and population; it does not
 * check the certificate (the coordinator does, before the put). Public data, not secrets.
 * The identity lives as long as the client's row: fl_store_client_erase and the retention
 * sweep delete it with the client (same transaction); revocation keeps it. */

typedef struct fl_store_client_identity {
    uint8_t device_id[FL_STORE_DEVICE_ID_BYTES];   /* device id the certificate binds */
    uint8_t verify_key[FL_STORE_VERIFY_KEY_BYTES]; /* device's Ed25519 verification key */
    uint8_t cert[FL_STORE_CERT_BYTES];             /* authority's signature (v2 certificate) */
} fl_store_client_identity;

/* Records client_id's identity (once; identities are not replaced). Inside fl_store_begin()
 * it joins the caller's transaction, so enrollment writes the client and its identity
 * atomically. Returns FL_OK; FL_ERR_EXISTS (the client already has an identity, or the device
 * id is registered to another client of the same population; the message says which);
 * FL_ERR_NOT_FOUND (no such client); FL_ERR_MISUSE (NULL, bad client_id); FL_ERR_BUSY;
 * FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_client_identity_put(fl_store *st, const char *client_id,
                                              const fl_store_client_identity *id);

/* Reads client_id's identity into the caller's *out. Returns FL_OK; FL_ERR_NOT_FOUND (no such
 * client, or a client without an identity; *out is then zeroed); FL_ERR_MISUSE; FL_ERR_BUSY;
 * FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_client_identity_get(fl_store *st, fl_store_client_identity *out,
                                              const char *client_id);


/* ---- model registry ----
 * Versions are immutable and content-addressed: each holds the exact bytes, their SHA-256,
 * an optional parent version and population, and metadata JSON. No call updates or
 * deletes a version, and SQLite triggers refuse it even for raw SQL. */

typedef struct fl_store_model {
    int64_t version;                            /* positive, increasing in put order */
    int64_t parent;                             /* parent version, 0 = none */
    int64_t population_id;                      /* owning population, 0 = none */
    char sha256_hex[FL_STORE_SHA256_HEX_BYTES]; /* SHA-256 of the bytes, lowercase hex */
    const char *metadata_json;                  /* JSON text */
    int64_t created_at;                         /* Unix ms */
    size_t size;                                /* length of the model in bytes */
    const uint8_t *bytes; /* the model (16-byte aligned); NULL in lineage listings */
} fl_store_model;

/* What fl_store_model_put stored (or found). */
typedef struct fl_store_model_ref {
    int64_t version;                            /* version number of the bytes */
    char sha256_hex[FL_STORE_SHA256_HEX_BYTES]; /* SHA-256 of the bytes, lowercase hex */
    int existed; /* 1: the same bytes were already stored in this population and that
                  * version was returned unchanged; 0: a new version was written */
} fl_store_model_ref;

/* Stores a model version.
 *   out            receives the version and hash (required).
 *   population_id  owning population, or 0 for none.
 *   parent         parent version (any population), or 0 for none.
 *   bytes, len     the model, 1..max_model_bytes bytes; copied into the database.
 *   metadata_json  JSON text, or NULL for "{}".
 * Identical bytes: if the same population (or "none") already holds a version with the
 * same SHA-256, nothing is written and that version is returned with out->existed = 1;
 * the parent and metadata of this call are ignored (the first put wins). This makes a
 * put safe to retry after a crash or timeout.
 * Returns FL_OK; FL_ERR_NOT_FOUND (parent or population missing); FL_ERR_TOO_LARGE;
 * FL_ERR_FORMAT (metadata not JSON); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM;
 * FL_ERR_STATE. */
FL_API fl_status fl_store_model_put(fl_store *st, fl_store_model_ref *out, int64_t population_id,
                                    int64_t parent, const void *bytes, size_t len,
                                    const char *metadata_json);

/* Reads a version with its bytes into *out (release with fl_store_free), after checking
 * that the bytes still hash to the stored SHA-256. Returns FL_OK; FL_ERR_NOT_FOUND;
 * FL_ERR_CORRUPT (hash mismatch: nothing is returned); FL_ERR_MISUSE; FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_model_get(fl_store *st, fl_store_model **out, int64_t version);

/* Walks parents from version to the root.
 *   out, count  receive an array of *count entries (release the array with fl_store_free):
 *               out[0] is version itself, out[i + 1] the parent of out[i]. bytes is NULL.
 *   max         at most this many entries; 0 = the whole chain.
 * Returns FL_OK; FL_ERR_NOT_FOUND (no such version); FL_ERR_MISUSE; FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_model_lineage(fl_store *st, fl_store_model **out, size_t *count,
                                        int64_t version, size_t max);

/* Points tag (created or moved) at version. Tags are global names of
 * 1..FL_STORE_NAME_MAX bytes from [A-Za-z0-9._:/-], e.g. "production" or "mnist/prod".
 * Returns FL_OK; FL_ERR_NOT_FOUND (no such version); FL_ERR_MISUSE; FL_ERR_BUSY;
 * FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_tag_set(fl_store *st, const char *tag, int64_t version);

/* Reads the version tag points at into *version_out. Returns FL_OK; FL_ERR_NOT_FOUND;
 * FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_tag_resolve(fl_store *st, int64_t *version_out, const char *tag);

/* Removes tag (the version it pointed at is untouched). Returns FL_OK; FL_ERR_NOT_FOUND;
 * FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_tag_delete(fl_store *st, const char *tag);

/* ---- rounds ---- */

typedef enum fl_store_round_state {
    FL_STORE_ROUND_OPEN = 0,      /* created, taking check-ins */
    FL_STORE_ROUND_RUNNING = 1,   /* participants selected, training or aggregating */
    FL_STORE_ROUND_COMPLETED = 2, /* result model recorded; terminal */
    FL_STORE_ROUND_ABANDONED = 3  /* given up, reason recorded; terminal */
} fl_store_round_state;

typedef struct fl_store_round_counts {
    int64_t checked_in; /* clients that checked in */
    int64_t selected;   /* clients selected to train */
    int64_t completed;  /* clients whose update was aggregated */
    int64_t dropped;    /* selected clients that dropped out */
} fl_store_round_counts;

typedef struct fl_store_round {
    int64_t id;                   /* positive, assigned by the store */
    int64_t population_id;        /* owning population */
    int64_t round_number;         /* 1, 2, ... per population */
    fl_store_round_state state;   /* lifecycle state */
    const char *config_json;      /* round configuration, JSON text */
    int64_t base_version;         /* model the round starts from, 0 = none */
    int64_t result_version;       /* model it produced, 0 unless COMPLETED */
    int64_t created_at;           /* Unix ms */
    int64_t started_at;           /* Unix ms of OPEN -> RUNNING, 0 if not yet */
    int64_t ended_at;             /* Unix ms of completion or abandonment, 0 if not yet */
    fl_store_round_counts counts; /* as last set by fl_store_round_set_counts */
    const char *abandon_reason;   /* NULL unless ABANDONED */
} fl_store_round;

/* Creates a round in state OPEN.
 *   round_id_out   receives its ID (may be NULL).
 *   population_id  an existing population that is not CLOSED.
 *   round_number   >= 1, unique in the population; 0 = one more than the highest so far.
 *   base_version   model version the round trains from, or 0.
 *   config_json    JSON text, or NULL for "{}".
 * Returns FL_OK; FL_ERR_EXISTS (number taken); FL_ERR_NOT_FOUND (population or base
 * version missing); FL_ERR_STATE (population CLOSED, or failed handle); FL_ERR_FORMAT;
 * FL_ERR_TOO_LARGE; FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO. */
FL_API fl_status fl_store_round_create(fl_store *st, int64_t *round_id_out, int64_t population_id,
                                       int64_t round_number, int64_t base_version,
                                       const char *config_json);

/* OPEN -> RUNNING, recording started_at. Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_STATE
 * (not OPEN); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO. */
FL_API fl_status fl_store_round_start(fl_store *st, int64_t round_id);

/* Replaces the round's participation counts (all >= 0) while it is OPEN or RUNNING.
 * Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_STATE (terminal round); FL_ERR_MISUSE;
 * FL_ERR_BUSY; FL_ERR_IO. */
FL_API fl_status fl_store_round_set_counts(fl_store *st, int64_t round_id,
                                           const fl_store_round_counts *counts);

/* OPEN or RUNNING -> COMPLETED with result_version (an existing model version), recording
 * ended_at. Returns FL_OK; FL_ERR_NOT_FOUND (round or version); FL_ERR_STATE (terminal
 * round); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO. */
FL_API fl_status fl_store_round_complete(fl_store *st, int64_t round_id, int64_t result_version);

/* OPEN or RUNNING -> ABANDONED with reason (1..1024 bytes of text), recording ended_at.
 * Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_STATE; FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO. */
FL_API fl_status fl_store_round_abandon(fl_store *st, int64_t round_id, const char *reason);

/* Reads round round_id into *out (release with fl_store_free). Returns FL_OK;
 * FL_ERR_NOT_FOUND; FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_round_get(fl_store *st, fl_store_round **out, int64_t round_id);

/* Like fl_store_round_get, by population and round number; round_number 0 = the
 * population's highest-numbered round. */
FL_API fl_status fl_store_round_find(fl_store *st, fl_store_round **out, int64_t population_id,
                                     int64_t round_number);

/* Lists population_id's rounds that are OPEN or RUNNING (not ended), oldest first, into an
 * array of *count entries (release with fl_store_free; *out is NULL when *count is 0). A
 * coordinator calls it at start-up: such rounds belonged to a process that is gone. Returns
 * FL_OK (also for none); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM. */
FL_API fl_status fl_store_round_list_unfinished(fl_store *st, fl_store_round **out,
                                                size_t *count, int64_t population_id);

/* ---- round participants ---- */

typedef enum fl_store_participant_state {
    FL_STORE_PARTICIPANT_CHECKED_IN = 0, /* checked in, not (yet) selected */
    FL_STORE_PARTICIPANT_SELECTED = 1,   /* selected to train */
    FL_STORE_PARTICIPANT_COMPLETED = 2,  /* update received and used */
    FL_STORE_PARTICIPANT_DROPPED = 3     /* dropped out after selection */
} fl_store_participant_state;

typedef struct fl_store_participant {
    int64_t round_id;                 /* the round */
    const char *client_id;            /* the client's pseudonymous ID */
    fl_store_participant_state state; /* latest state */
    int64_t updated_at;               /* Unix ms of the last change */
} fl_store_participant;

/* Records (inserts or updates) client_id's state in round_id, which must be OPEN or
 * RUNNING. Returns FL_OK; FL_ERR_NOT_FOUND (round or client); FL_ERR_STATE (terminal
 * round); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM. */
FL_API fl_status fl_store_participant_set(fl_store *st, int64_t round_id, const char *client_id,
                                          fl_store_participant_state state);

/* fl_store_participant_set that also records the participation hash (schema version 6).
 *   participation_hash  FL_STORE_PARTICIPATION_HASH_BYTES bytes the caller derived from the
 *                       participation id it gave client_id for this round (opaque to the
 *                       store; the coordinator's derivation is in docs/protocol.md 6), or
 *                       NULL: a new row gets none, an existing row keeps its hash. A hash
 *                       replaces the row's (a new participation). Copied; not kept.
 * fl_store_participant_set(...) is fl_store_participant_set_v2(..., NULL). Same thread rule
 * and returns as fl_store_participant_set. */
FL_API fl_status fl_store_participant_set_v2(
    fl_store *st, int64_t round_id, const char *client_id, fl_store_participant_state state,
    const uint8_t participation_hash[FL_STORE_PARTICIPATION_HASH_BYTES]);

/* Lists round_id's participants ordered by client_id into an array of *count entries
 * (release with fl_store_free; *out is NULL when *count is 0). Returns FL_OK (also for an
 * unknown round: zero entries); FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_participant_list(fl_store *st, fl_store_participant **out, size_t *count,
                                           int64_t round_id);

/* Reads client_id's participation in round_id into *out (release with fl_store_free; on
 * failure *out is NULL, or untouched when st is NULL or failed): one row by its key,
 * without listing the round, for a coordinator that answers a device's poll of a round it
 * no longer holds in memory.
 *   out        receives the row; its client_id lives in the same allocation.
 *   round_id   > 0.
 *   client_id  1..FL_STORE_NAME_MAX bytes.
 * Reads only; any thread rule of the handle applies (one thread at a time). Returns FL_OK;
 * FL_ERR_NOT_FOUND (no such round, or client_id not recorded in it); FL_ERR_MISUSE;
 * FL_ERR_IO; FL_ERR_BUSY; FL_ERR_NOMEM; FL_ERR_STATE (failed handle). */
FL_API fl_status fl_store_participant_get(fl_store *st, fl_store_participant **out,
                                          int64_t round_id, const char *client_id);

/* fl_store_participant_get that also reads the row's participation hash (schema version 6),
 * for a caller that checks a presented participation id against it (fl_store_participant
 * itself does not grow: fl_store_participant_list returns arrays of it).
 *   hash      receives FL_STORE_PARTICIPATION_HASH_BYTES bytes: the stored hash, or zeros.
 *   has_hash  receives 1 when the row has a hash, 0 when it was written without one
 *             (fl_store_participant_set, or before schema version 6).
 * On failure *out is NULL, hash zeroed and *has_hash 0, except that nothing is touched when
 * st is NULL or failed or an output pointer is NULL (FL_ERR_MISUSE).
 * Same thread rule and returns as fl_store_participant_get. */
FL_API fl_status fl_store_participant_get_v2(fl_store *st, fl_store_participant **out,
                                             uint8_t hash[FL_STORE_PARTICIPATION_HASH_BYTES],
                                             int *has_hash, int64_t round_id,
                                             const char *client_id);

/* ---- privacy ledger ----
 * Append-only record of every DP release, one entry per round (or per mechanism use). The
 * DP accountant replays a population's entries to compute its cumulative epsilon; the
 * coordinator appends inside the transaction that completes the round. */

typedef struct fl_store_ledger_entry {
    int64_t id;              /* assigned by the store, increasing in append order */
    int64_t population_id;   /* population charged */
    int64_t round_id;        /* round of the release (same population), 0 = none */
    const char *mechanism;   /* e.g. "gaussian", "ddgauss", "skellam"; 1..64 bytes ASCII */
    double sampling_rate;    /* q, probability a client takes part, in (0, 1] */
    double noise_multiplier; /* noise stddev / clip_norm, >= 0 */
    double clip_norm;        /* L2 clipping bound, > 0 */
    int64_t steps;           /* compositions in this entry, >= 1 */
    int64_t participants;    /* clients whose updates were aggregated, >= 0 */
    const char *params_json; /* mechanism-specific parameters, JSON text */
    int64_t created_at;      /* Unix ms */
} fl_store_ledger_entry;

/* Appends one entry. id and created_at in entry are ignored (assigned by the store);
 * params_json NULL means "{}".
 *   id_out  receives the new entry's ID (may be NULL).
 * Returns FL_OK; FL_ERR_NOT_FOUND (population or round missing); FL_ERR_MISUSE (a field
 * out of range, or round of another population); FL_ERR_FORMAT; FL_ERR_TOO_LARGE;
 * FL_ERR_BUSY; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_ledger_append(fl_store *st, int64_t *id_out,
                                        const fl_store_ledger_entry *entry);

/* Lists population_id's entries in append order into an array of *count entries (release
 * with fl_store_free; *out is NULL when *count is 0). Returns FL_OK (also for no entries);
 * FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_ledger_list(fl_store *st, fl_store_ledger_entry **out, size_t *count,
                                      int64_t population_id);

/* ==== audit log ====================================================================
 * Tamper-evident round logs (docs/audit.md, docs/auditor-guide.md). Every round, population
 * creation, configuration change, registered model, budget refusal, client erasure and
 * retention sweep appends one entry: canonical JSON (sorted keys, no whitespace, ASCII,
 * integers and strings only) that never holds raw updates, examples or direct identifiers
 * (client ids appear only as keyed pseudonyms). Entries are the leaves of an RFC 9162
 * Merkle tree; signed checkpoints (C2SP signed-note "checkpoint" format, Ed25519) commit to
 * the tree, and inclusion and consistency proofs show what a checkpoint contains and that
 * the log only grew. The log tables are append-only: no call updates or deletes them, and
 * SQLite triggers refuse UPDATE and DELETE even for raw SQL.
 *
 * Fixed-point units in entries: epsilon, clip norm, noise multiplier and sampling rate are
 * integers in units of 1e-9 (suffix _e9), delta in units of 1e-18 (_e18). Spent epsilon
 * and delta are rounded up, budgets down, so the log never understates a spend.
 *
 * Appends run in the caller's transaction when one is open (the coordinator commits the
 * model version, round record, ledger entry and audit entry together) and check the same
 * rules the offline verifier checks; an entry that would break them is refused. An entry's
 * time is the store clock's but never before the previous entry's (a clock stepping back
 * repeats the last time), so times in the log never decrease; the verifier checks that. */

/* Bytes of a Merkle tree hash (SHA-256). */
#define FL_STORE_AUDIT_HASH_BYTES 32
/* Bytes of the Ed25519 public key that signs checkpoints. */
#define FL_STORE_AUDIT_PUBLIC_KEY_BYTES 32
/* Bytes of the Ed25519 secret key (libsodium layout: seed || public key). */
#define FL_STORE_AUDIT_SECRET_KEY_BYTES 64
/* Bytes of the HMAC-SHA256 key that turns client ids into pseudonyms. */
#define FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES 32
/* Bytes of a pseudonym: 64 lowercase hex digits + NUL. */
#define FL_STORE_AUDIT_PSEUDONYM_BYTES 65
/* Longest proof (hashes) for any tree the log can hold; size proof buffers with it. */
#define FL_STORE_AUDIT_PROOF_MAX 64
/* Longest canonical entry, in bytes. */
#define FL_STORE_AUDIT_ENTRY_MAX 65536
/* Longest checkpoint origin (log name), in bytes. */
#define FL_STORE_AUDIT_ORIGIN_MAX 128
/* Secure aggregation phases with a dropout count in round entries. */
#define FL_STORE_AUDIT_PHASES 5

/* Run-time getters for the macros above (same values). Thread-safe. */
FL_API size_t fl_store_audit_hash_bytes(void);
FL_API size_t fl_store_audit_public_key_bytes(void);
FL_API size_t fl_store_audit_secret_key_bytes(void);
FL_API size_t fl_store_audit_pseudonym_key_bytes(void);
FL_API size_t fl_store_audit_pseudonym_bytes(void);
FL_API size_t fl_store_audit_proof_max(void);
FL_API size_t fl_store_audit_entry_max(void);
FL_API size_t fl_store_audit_origin_max(void);
FL_API size_t fl_store_audit_phases(void);

/* Index of each phase in fl_store_audit_round_info.dropped_by_phase. */
typedef enum fl_store_audit_phase {
    FL_STORE_AUDIT_PHASE_ADVERTISE = 0,   /* advertise keys */
    FL_STORE_AUDIT_PHASE_SHARE = 1,       /* share keys */
    FL_STORE_AUDIT_PHASE_MASKED = 2,      /* masked input (training happens before it) */
    FL_STORE_AUDIT_PHASE_CONSISTENCY = 3, /* consistency check */
    FL_STORE_AUDIT_PHASE_UNMASK = 4       /* unmasking */
} fl_store_audit_phase;

/* Number of a round's selected clients from one region. */
typedef struct fl_store_audit_region {
    const char *region; /* region code, 1..64 printable ASCII bytes */
    int64_t count;      /* clients, >= 1 */
} fl_store_audit_region;

/* What the coordinator tells the log about a finished round; the rest (population, round
 * number, outcome, models in and out with their SHA-256, counts, times, DP mechanism from
 * the round's privacy-ledger entries, budget) is read from the store. Fill with
 * fl_store_audit_round_info_init(), then set fields. */
typedef struct fl_store_audit_round_info {
    size_t struct_size;                 /* sizeof(fl_store_audit_round_info) */
    int64_t round_id;                   /* a COMPLETED or ABANDONED round */
    const uint8_t *task_config_sha256;  /* 32 bytes: SHA-256 of the task config the clients
                                         * got; NULL = SHA-256 of the round's config_json */
    int64_t dropped_by_phase[FL_STORE_AUDIT_PHASES]; /* dropouts per phase (>= 0); they must
                                         * add up to the round's dropped count */
    int secagg_enabled;                 /* 1 if the round used secure aggregation */
    int64_t secagg_n;                   /* clients in the secagg session (<= selected) */
    int64_t secagg_k;                   /* neighbourhood size (t <= k <= n) */
    int64_t secagg_t;                   /* reconstruction threshold (>= 1) */
    double epsilon_total;               /* the accountant's cumulative epsilon for the
                                         * population after this round (>= the previous
                                         * round's); the round's spend is the increase */
    double delta;                       /* delta at which epsilon is stated, in [0, 1) */
    const fl_store_audit_region *regions; /* selected clients per region; NULL = counted from
                                         * the round's participants (clients table) */
    size_t n_regions;                   /* entries in regions */
    const char *coordinator_version;    /* 1..64 printable ASCII; NULL = fl_version_string() */
    /* Added in 0.3: the round's zero-knowledge norm proofs (docs/secagg.md "Norm proofs"),
     * logged as secagg.norm_proof so an auditor sees the bound the server enforced. A
     * struct_size of offsetof(fl_store_audit_round_info, norm_proof_enabled) is still
     * accepted and means no proofs. Only with secagg_enabled; when norm_proof_enabled is 0
     * the four values below must be 0. */
    int norm_proof_enabled;             /* 1 if every masked input carried a norm proof */
    uint32_t norm_bits;                 /* m: each coordinate proven in m bits, 2..32 */
    uint64_t norm_bound2;               /* bound on a device's sum of squares over the first
                                         * norm_dim coordinates (lattice units^2),
                                         * 1..INT64_MAX */
    uint32_t norm_dim;                  /* coordinates in the L2 bound, >= 1 */
    uint32_t norm_weight_max;           /* the weight coordinate is proven in 1..this, >= 1 */
    /* Added after 0.3: active-adversary secure aggregation (docs/protocol.md 5.6), logged
     * as secagg.active (1) and secagg.authority_key_sha256 so an auditor sees which rounds
     * were protected against a coordinator lying about dropouts, and under which device
     * authority. The log names the authority by the SHA-256 of its key, as it names models
     * and configs by their SHA-256: no entry carries a raw key (the bundle's verifier key
     * is in its header, not in entries), and the fingerprint is enough to compare with the
     * key the operator publishes. A struct_size of offsetof(fl_store_audit_round_info,
     * secagg_active) (0.3) is still accepted and means semi-honest. Only with
     * secagg_enabled; when secagg_active is 0, authority_key_sha256 must be NULL. */
    int secagg_active;                  /* 1 if the round ran secagg in active mode */
    const uint8_t *authority_key_sha256; /* 32 bytes: SHA-256 of the device authority's
                                         * 32-byte Ed25519 verification key; required
                                         * when secagg_active */
    /* Added after 0.4: revealed pairwise seeds (docs/secagg.md "Revealed pairwise seeds",
     * protocol 1.4), logged as secagg.revealed_seeds (1): the survivors revealed the mask
     * seeds they shared with devices that left before masking, instead of the coordinator
     * deriving them from rebuilt keys. A struct_size of offsetof(fl_store_audit_round_info,
     * secagg_reveal_seeds) is still accepted and means 0. Only with secagg_enabled and
     * without norm_proof_enabled (a revealed seed cannot be checked). */
    int secagg_reveal_seeds;            /* 1 if the round ran with revealed pairwise seeds */
} fl_store_audit_round_info;

/* Fills info with defaults: no secagg, no norm proofs, semi-honest, no dropouts, epsilon_total
 * 0, delta 0, regions from participants, task config hash from the store. NULL is a no-op.
 * Thread-safe. */
FL_API void fl_store_audit_round_info_init(fl_store_audit_round_info *info);

/* Appends a "population_created" entry for population_id (name, budget, allowed regions
 * and the SHA-256 of its config, from the store). Other appends for a population add this
 * entry first when the log does not have it yet.
 *   seq_out  receives the entry's index (leaf number, from 0); may be NULL.
 * Returns FL_OK; FL_ERR_EXISTS (already logged); FL_ERR_NOT_FOUND; FL_ERR_MISUSE;
 * FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE (failed handle). */
FL_API fl_status fl_store_audit_append_population(fl_store *st, int64_t *seq_out,
                                                  int64_t population_id);

/* Appends a "config_changed" entry: the population's task configuration and privacy terms
 * as they apply from now on. Later entries are checked against these terms.
 *   config_json           the new configuration (only its SHA-256 is logged); NULL = "{}".
 *   epsilon, delta        the population's total budget: finite epsilon > 0, 0 <= delta < 1.
 *   allowed_regions_json  JSON array of region strings, [] = any; NULL = "[]".
 * Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_FORMAT; FL_ERR_TOO_LARGE; FL_ERR_MISUSE;
 * FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_append_config(fl_store *st, int64_t *seq_out,
                                              int64_t population_id, const char *config_json,
                                              double epsilon, double delta,
                                              const char *allowed_regions_json);

/* Appends a "model_registered" entry: model version (of population_id, with its SHA-256)
 * becomes the population's current model, e.g. after an admin upload. The next round must
 * start from it. Returns FL_OK; FL_ERR_NOT_FOUND (population or version); FL_ERR_MISUSE
 * (version of another population); FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_append_model(fl_store *st, int64_t *seq_out,
                                             int64_t population_id, int64_t version);

/* Appends a "round" entry for a COMPLETED or ABANDONED round (call it in the transaction
 * that completes the round). Refused when the entry would break a log rule: counts that do
 * not add up, a secagg threshold above the survivors, an epsilon total that decreases or
 * exceeds the budget (FL_ERR_BUDGET), a model in that is not the population's current
 * model, a region outside the allowed ones. Returns FL_OK; FL_ERR_BUDGET; FL_ERR_STATE
 * (round not terminal, or failed handle); FL_ERR_EXISTS (round already logged);
 * FL_ERR_NOT_FOUND; FL_ERR_MISUSE (a field, or a rule, named in the message); FL_ERR_BUSY;
 * FL_ERR_IO; FL_ERR_NOMEM. */
FL_API fl_status fl_store_audit_append_round(fl_store *st, int64_t *seq_out,
                                             const fl_store_audit_round_info *info);

/* Appends a "budget_refused" entry: round round_number of population_id was not started
 * because its accountant total would have been epsilon_requested (> the budget) at delta.
 * Returns FL_OK; FL_ERR_MISUSE (epsilon_requested within the budget: not a refusal, or a
 * round number not above the last logged round); FL_ERR_NOT_FOUND; FL_ERR_BUSY; FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_append_refusal(fl_store *st, int64_t *seq_out,
                                               int64_t population_id, int64_t round_number,
                                               double epsilon_requested, double delta);

/* Pseudonym of client_id under key: lowercase hex HMAC-SHA256(key, client_id), written to
 * out (FL_STORE_AUDIT_PSEUDONYM_BYTES). Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_store_audit_pseudonym(char out[FL_STORE_AUDIT_PSEUDONYM_BYTES],
                                          const uint8_t key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES],
                                          const char *client_id);

/* Erasure request (GDPR art. 17): deletes client_id's registry row (token hash, region,
 * times), its device identity (fl_store_client_identity_put) and its round participations,
 * and appends an "erasure" entry naming the client only by its pseudonym under
 * pseudonym_key, all in one transaction. The key stays with the caller; wipe it after use.
 * Returns FL_OK; FL_ERR_NOT_FOUND (no such client);
 * FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status
fl_store_client_erase(fl_store *st, int64_t *seq_out, const char *client_id,
                      const uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]);

/* Revokes client_id: blocks it while keeping its row, token hash and participations (unlike
 * fl_store_client_erase), and, in the same transaction, appends a "client_revoked" audit
 * entry naming the client only by its pseudonym under pseudonym_key (the key
 * fl_store_client_erase takes), with the revocation time. The store only records it; the
 * caller (the coordinator's auth path) refuses a client whose fl_store_client.revoked_at is
 * not 0. Only a change is logged: revoking a revoked client keeps the first time and logs
 * nothing. The entry's time is the store clock, or revoked_at if that is later, and never
 * before the previous entry's. The key stays with the caller.
 *   revoked_at_out  receives the revocation time in effect; may be NULL. 0 on failure.
 *   seq_out         receives the index of the entry logged, -1 when nothing was logged
 *                   (already revoked, or failure); may be NULL.
 *   client_id       an enrolled client.
 *   revoked_at      Unix ms, > 0, from the caller's clock.
 * Returns FL_OK; FL_ERR_NOT_FOUND (no such client); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status
fl_store_client_revoke(fl_store *st, int64_t *revoked_at_out, int64_t *seq_out,
                       const char *client_id, int64_t revoked_at,
                       const uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]);

/* Reinstates client_id (clears its revocation, so its token works again) and, in the same
 * transaction, appends a "client_reinstated" entry naming it by its pseudonym under
 * pseudonym_key. Reinstating an active client changes nothing and logs nothing.
 *   seq_out  receives the index of the entry logged, -1 when nothing was logged; may be
 *            NULL.
 * Returns FL_OK; FL_ERR_NOT_FOUND (no such client); FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO;
 * FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status
fl_store_client_reinstate(fl_store *st, int64_t *seq_out, const char *client_id,
                          const uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]);

/* What a retention sweep deleted. */
typedef struct fl_store_retention_result {
    int64_t cutoff;                 /* Unix ms: data older than this was expired */
    int64_t clients_deleted;        /* client rows (with their token hashes) */
    int64_t participations_deleted; /* round participation rows */
    int64_t seq;                    /* index of the "retention" entry logged */
} fl_store_retention_result;

/* Retention sweep: with cutoff = now - retention_ms, deletes clients last seen before the
 * cutoff (with all their participations) and participations in finished rounds last
 * updated before it, then appends a "retention" entry with the counts; one transaction.
 * now is the store clock, or the last audit entry's time if the clock is behind it (the
 * entry's time, which never decreases; out->cutoff is the cutoff used).
 * The log keeps only pseudonymous aggregates, so nothing in it expires.
 *   out           receives what was done; may be NULL.
 *   retention_ms  > 0.
 * Returns FL_OK; FL_ERR_MISUSE; FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_retention_sweep(fl_store *st, fl_store_retention_result *out,
                                          int64_t retention_ms);

/* One log entry. */
typedef struct fl_store_audit_entry {
    int64_t seq;                                  /* leaf index, from 0 */
    uint8_t leaf_hash[FL_STORE_AUDIT_HASH_BYTES]; /* SHA-256(0x00 || json) */
    size_t size;                                  /* bytes of json, without the NUL */
    const char *json;                             /* canonical entry, NUL-terminated */
} fl_store_audit_entry;

/* Number of entries in the log (the tree size) into *size. Returns FL_OK; FL_ERR_MISUSE;
 * FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_size(fl_store *st, int64_t *size);

/* Reads entry seq into *out (release with fl_store_free). Returns FL_OK; FL_ERR_NOT_FOUND;
 * FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_entry_get(fl_store *st, fl_store_audit_entry **out, int64_t seq);

/* Root hash of the tree made of the first size entries (0 <= size <= the log size; 0 is
 * the empty tree). Returns FL_OK; FL_ERR_RANGE; FL_ERR_CORRUPT (a stored hash is
 * missing); FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_root(fl_store *st, uint8_t root[FL_STORE_AUDIT_HASH_BYTES],
                                     int64_t size);

/* Inclusion proof (RFC 9162 2.1.3) for entry index in the tree of size entries: the audit
 * path, leaf side first, into proof[0..*count). proof holds cap hashes
 * (FL_STORE_AUDIT_PROOF_MAX is always enough). O(log n) reads.
 * Returns FL_OK; FL_ERR_RANGE (index >= size, size above the log size, or cap too small);
 * FL_ERR_CORRUPT; FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_inclusion_proof(fl_store *st, uint8_t (*proof)[32], size_t cap,
                                                size_t *count, int64_t index, int64_t size);

/* Consistency proof (RFC 9162 2.1.4) that the tree of size m is a prefix of the tree of
 * size n (0 <= m <= n <= the log size); empty when m is 0 or m == n. Same buffer rules and
 * returns as fl_store_audit_inclusion_proof. */
FL_API fl_status fl_store_audit_consistency_proof(fl_store *st, uint8_t (*proof)[32], size_t cap,
                                                  size_t *count, int64_t m, int64_t n);

/* Checks an inclusion proof without any store. Returns FL_OK, FL_ERR_CRYPTO (the proof
 * does not show it) or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_store_audit_verify_inclusion(const uint8_t leaf_hash[32], int64_t index,
                                                 int64_t size, const uint8_t (*proof)[32],
                                                 size_t count, const uint8_t root[32]);

/* Checks a consistency proof between (m, root1) and (n, root2) without any store.
 * Returns FL_OK, FL_ERR_CRYPTO or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_store_audit_verify_consistency(int64_t m, int64_t n,
                                                   const uint8_t (*proof)[32], size_t count,
                                                   const uint8_t root1[32],
                                                   const uint8_t root2[32]);

/* Leaf hash of an entry's bytes, SHA-256(0x00 || bytes). Thread-safe. */
FL_API void fl_store_audit_leaf_hash(uint8_t out[FL_STORE_AUDIT_HASH_BYTES], const void *entry,
                                     size_t len);

/* A signed checkpoint of the log. */
typedef struct fl_store_audit_checkpoint {
    int64_t tree_size;                       /* entries covered */
    uint8_t root[FL_STORE_AUDIT_HASH_BYTES]; /* root hash of those entries */
    int64_t created_at;                      /* Unix ms */
    const char *note;                        /* the signed note (C2SP checkpoint), text */
} fl_store_audit_checkpoint;

/* Signs a checkpoint of the whole log as it is now and stores it. The note is
 *   <origin>\n<tree size>\n<base64 root>\n\n— <origin> <base64(key id || signature)>\n
 * (key id: first 4 bytes of SHA-256(origin || 0x0A || 0x01 || public key)). When the log has
 * not grown since the latest checkpoint, that one is returned and nothing is written.
 * Before signing, the new tree is checked to be consistent with the latest checkpoint.
 *   out         receives the checkpoint (release with fl_store_free); may be NULL.
 *   origin      the log's name, e.g. "flotilla.example.org/audit": 1..FL_STORE_AUDIT_ORIGIN_MAX
 *               printable ASCII bytes without '+'; the same for every checkpoint of a log.
 *   secret_key  Ed25519 secret key (libsodium layout); not retained. Every checkpoint of a
 *               log is signed by the same key.
 * Returns FL_OK; FL_ERR_STATE (empty log, or failed handle); FL_ERR_MISUSE (bad origin, or a
 * key or origin different from the earlier checkpoints'); FL_ERR_CORRUPT (the stored tree
 * no longer matches the latest checkpoint); FL_ERR_BUSY; FL_ERR_IO; FL_ERR_NOMEM. */
FL_API fl_status
fl_store_audit_checkpoint_sign(fl_store *st, fl_store_audit_checkpoint **out, const char *origin,
                               const uint8_t secret_key[FL_STORE_AUDIT_SECRET_KEY_BYTES]);

/* Reads the latest checkpoint into *out (release with fl_store_free). Returns FL_OK;
 * FL_ERR_NOT_FOUND (none yet); FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_checkpoint_latest(fl_store *st, fl_store_audit_checkpoint **out);

/* Writes the verifier key of (origin, public key) in the signed-note format
 * "<origin>+<8 hex key id>+<base64(0x01 || public key)>" into out (cap bytes, NUL
 * included; 256 is always enough). Returns FL_OK; FL_ERR_RANGE (cap too small);
 * FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_store_audit_vkey(char *out, size_t cap, const char *origin,
                                     const uint8_t public_key[FL_STORE_AUDIT_PUBLIC_KEY_BYTES]);

/* Verifies a checkpoint note against a verifier key (from fl_store_audit_vkey): the note's
 * origin must be the key's name and its only signature line valid. On success writes the
 * tree size and root (either may be NULL). Returns FL_OK; FL_ERR_FORMAT (malformed note or
 * key); FL_ERR_CRYPTO (wrong key or bad signature); FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_store_audit_checkpoint_verify(const char *note, size_t len, const char *vkey,
                                                  int64_t *tree_size,
                                                  uint8_t root[FL_STORE_AUDIT_HASH_BYTES]);

/* Writes the audit bundle (header line, the entries covered by the latest checkpoint, every
 * checkpoint; JSON Lines, docs/audit.md) into one buffer *out of *len bytes (release with
 * fl_store_free). Entries after the latest checkpoint are left out: sign a checkpoint
 * first. Returns FL_OK; FL_ERR_NOT_FOUND (no checkpoint yet); FL_ERR_TOO_LARGE;
 * FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_audit_export(fl_store *st, uint8_t **out, size_t *len);

/* Like fl_store_audit_export, streamed to a new file at path (replaced if it exists).
 * Returns FL_ERR_IO also when the file cannot be written. */
FL_API fl_status fl_store_audit_export_file(fl_store *st, const char *path);

/* ---- offline bundle verification ----
 * Needs no store: this is what flotilla-audit runs on the auditor's machine. */

/* Outcome of fl_store_audit_bundle_verify. */
typedef struct fl_store_audit_verdict {
    int ok;                /* 1: every check passed */
    int64_t entries;       /* entries in the bundle */
    int64_t checkpoints;   /* checkpoints in the bundle */
    int64_t bad_entry;     /* index of the first offending entry, -1 if none */
    int64_t bad_checkpoint;/* index of the first offending checkpoint, -1 if none */
    int64_t bad_line;      /* 1-based bundle line of the first problem, 0 if none */
    uint8_t root[FL_STORE_AUDIT_HASH_BYTES]; /* verified root of the last checkpoint */
    char message[512];     /* the verdict in words ("verified: ..." or the first problem) */
} fl_store_audit_verdict;

typedef struct fl_store_audit_bundle fl_store_audit_bundle;

/* Opens a bundle held in memory: splits it into lines and reads the header line.
 *   out    receives the handle; on failure a failed handle (for its errmsg) unless NULL.
 *   bytes  the bundle; not copied: it must stay valid and unchanged until close.
 *   alloc  allocator (NULL = libc); copied.
 * Returns FL_OK; FL_ERR_FORMAT (not a bundle: message says where); FL_ERR_TOO_LARGE;
 * FL_ERR_NOMEM; FL_ERR_MISUSE. One thread at a time per handle. */
FL_API fl_status fl_store_audit_bundle_open(fl_store_audit_bundle **out, const void *bytes,
                                            size_t len, const fl_allocator *alloc);

/* Verifies everything: every line canonical, the header, every checkpoint's signature
 * under the bundle's key (which must equal trusted_vkey when that is not NULL), checkpoint
 * sizes increasing with the last covering all entries, the Merkle root recomputed from the
 * entry bytes at every checkpoint, RFC 9162 consistency between successive checkpoints, and
 * each entry's rules (docs/audit.md). Fills *verdict either way. Returns FL_OK when the
 * bundle verifies; FL_ERR_CRYPTO (a signature, root or proof fails); FL_ERR_FORMAT
 * (malformed line or entry); FL_ERR_CORRUPT (an entry breaks a rule); FL_ERR_NOMEM;
 * FL_ERR_MISUSE. */
FL_API fl_status fl_store_audit_bundle_verify(fl_store_audit_bundle *b, const char *trusted_vkey,
                                              fl_store_audit_verdict *verdict);

/* Number of entries / checkpoints the header announces (0 for a failed handle). */
FL_API size_t fl_store_audit_bundle_entry_count(const fl_store_audit_bundle *b);
FL_API size_t fl_store_audit_bundle_checkpoint_count(const fl_store_audit_bundle *b);

/* Bytes of entry i (a line without its newline; not NUL-terminated) and its length;
 * NULL when i is out of range. Points into the caller's bundle bytes. */
FL_API const char *fl_store_audit_bundle_entry(const fl_store_audit_bundle *b, size_t i,
                                               size_t *len);

/* Line of checkpoint i ({"checkpoint": note}) and its length; NULL when out of range. */
FL_API const char *fl_store_audit_bundle_checkpoint(const fl_store_audit_bundle *b, size_t i,
                                                    size_t *len);

/* The header's origin and verifier key, NUL-terminated, owned by b ("" for a failed
 * handle). */
FL_API const char *fl_store_audit_bundle_origin(const fl_store_audit_bundle *b);
FL_API const char *fl_store_audit_bundle_vkey(const fl_store_audit_bundle *b);

/* Detail of the last failure on b; never NULL. */
FL_API const char *fl_store_audit_bundle_errmsg(const fl_store_audit_bundle *b);

/* Closes b. NULL is a no-op. */
FL_API void fl_store_audit_bundle_close(fl_store_audit_bundle *b);

/* ==== end of audit log ============================================================== */

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_STORAGE_H */
