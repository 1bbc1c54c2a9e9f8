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
#define FL_STORE_SCHEMA_VERSION 2
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

/* ---- clients ----
 * Clients are pseudonymous: the coordinator picks an opaque ID and a random auth token.
 * Only SHA-256(token) is stored; the token itself never touches the disk. */

typedef struct fl_store_client {
    const char *client_id; /* pseudonymous ID, 1..FL_STORE_NAME_MAX printable ASCII bytes */
    const char *region;    /* region code, e.g. "eu-west" */
    int64_t population_id; /* population the client is enrolled in */
    int64_t enrolled_at;   /* Unix ms */
    int64_t last_seen;     /* Unix ms of the last fl_store_client_touch (or enrolment) */
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

/* Reads a client's record into *out (release with fl_store_free). Returns FL_OK;
 * FL_ERR_NOT_FOUND; FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_client_get(fl_store *st, fl_store_client **out, const char *client_id);

/* Checks token against the stored hash (constant-time compare). Writes nothing.
 * Returns FL_OK; FL_ERR_AUTH for an unknown ID or a wrong token alike (no oracle);
 * FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_client_authenticate(fl_store *st, const char *client_id,
                                              const void *token, size_t token_len);

/* Sets the client's last_seen to now. Returns FL_OK; FL_ERR_NOT_FOUND; FL_ERR_MISUSE;
 * FL_ERR_BUSY; FL_ERR_IO; FL_ERR_STATE. */
FL_API fl_status fl_store_client_touch(fl_store *st, const char *client_id);

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

/* Lists round_id's participants ordered by client_id into an array of *count entries
 * (release with fl_store_free; *out is NULL when *count is 0). Returns FL_OK (also for an
 * unknown round: zero entries); FL_ERR_MISUSE; FL_ERR_IO; FL_ERR_NOMEM; FL_ERR_STATE. */
FL_API fl_status fl_store_participant_list(fl_store *st, fl_store_participant **out, size_t *count,
                                           int64_t round_id);

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

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_STORAGE_H */
