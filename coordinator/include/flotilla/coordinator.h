#ifndef FLOTILLA_COORDINATOR_H
#define FLOTILLA_COORDINATOR_H

/* Flotilla coordinator: the service core behind `flotilla-coordinator`.
 *
 * One fl_coord handle owns one HTTP server (libmicrohttpd, epoll, internal thread pool),
 * one storage handle (SQLite, via flotilla/storage.h) and the in-memory state of the
 * populations and their rounds. The wire protocol it serves is docs/protocol.md.
 *
 * Threads: fl_coord_start() starts the HTTP server's thread pool (asked for, so allowed by
 * the house rules). Requests run on those threads and serialise on one internal lock
 * around storage and round state. fl_coord_tick() and fl_coord_stop() may be called from
 * any one other thread (the executable's main loop); every other call on a handle is for
 * one thread at a time.
 *
 * Times are Unix milliseconds from the configured clock. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sizes ---- */

/* Bytes of a SHA-256 digest (admin token hash). */
#define FL_COORD_SHA256_BYTES 32
/* Bytes of the Ed25519 seed the signing key is derived from. */
#define FL_COORD_SEED_BYTES 32
/* Bytes of the Ed25519 public key. */
#define FL_COORD_PUBLIC_KEY_BYTES 32
/* Characters of a key id (hex of the first 8 bytes of SHA-256(public key)) plus NUL. */
#define FL_COORD_KEY_ID_BYTES 17

/* Run-time getters for the macros above (same values). Thread-safe. */
FL_API size_t fl_coord_sha256_bytes(void);
FL_API size_t fl_coord_seed_bytes(void);
FL_API size_t fl_coord_public_key_bytes(void);
FL_API size_t fl_coord_key_id_bytes(void);

/* ---- configuration ---- */

typedef struct fl_coord fl_coord;

/* Clock hook: current time in Unix milliseconds. */
typedef int64_t (*fl_coord_clock_fn)(void *user);

/* Per-endpoint body caps and connection limits (docs/protocol.md section 7). */
typedef struct fl_coord_limits {
    size_t enroll_bytes;         /* POST /v1/enroll body cap; 64..1 MiB, default 4 KiB */
    size_t checkin_bytes;        /* POST /v1/checkin body cap; 64..1 MiB, default 8 KiB */
    size_t admin_json_bytes;     /* admin JSON body cap; 1 KiB..16 MiB, default 64 KiB */
    size_t model_bytes;          /* admin model upload cap; 1..1 GB, default 256 MiB */
    unsigned connection_timeout_s; /* idle connection timeout; 1..3600, default 30 */
    unsigned per_ip_connections; /* concurrent connections per IP; 0 = no limit, default 64 */
    unsigned max_connections;    /* concurrent connections in all; 16..1000000, default 10000 */
    size_t connection_memory;    /* per-connection memory for headers; 8 KiB..1 MiB,
                                    default 32 KiB */
} fl_coord_limits;

typedef struct fl_coord_config {
    size_t struct_size;            /* sizeof(fl_coord_config); set by config_init */
    const fl_allocator *allocator; /* NULL = libc; copied at create */
    fl_logger logger;              /* copied at create; default off */
    const char *listen_address;    /* IPv4 or IPv6 literal; default "127.0.0.1"; copied */
    unsigned port;                 /* TCP port, 0 = ephemeral (read it with fl_coord_port);
                                      default 8080 */
    unsigned threads;              /* HTTP thread pool size, 1..256, default 4 */
    const char *db_path;           /* SQLite path (or ":memory:" for tests); required; copied */
    uint8_t admin_token_sha256[FL_COORD_SHA256_BYTES]; /* SHA-256 of the admin token */
    int has_admin_token;           /* 0 (default) = admin API disabled (every call 401) */
    uint8_t signing_seed[FL_COORD_SEED_BYTES]; /* Ed25519 seed of the coordinator key */
    int has_signing_key;           /* 0 (default) = a fresh key per process (tests only) */
    const char *tls_cert_pem;      /* PEM certificate chain (contents); NULL = plain HTTP */
    const char *tls_key_pem;       /* PEM private key (contents); required with the cert */
    fl_coord_limits limits;        /* body caps and connection limits */
    unsigned max_long_poll_s;      /* cap on ?wait=, 0..60, default 30 */
    fl_coord_clock_fn clock;       /* NULL (default) = CLOCK_REALTIME */
    void *clock_user;              /* passed to clock */
    /* audit log (docs/audit.md, docs/coordinator.md "Audit log") */
    const char *audit_origin;      /* checkpoint origin (log name), 1..128 printable ASCII
                                      without '+' and spaces; NULL (default) =
                                      "flotilla-coordinator/<key id>"; copied */
    uint8_t pseudonym_key[32];     /* HMAC-SHA256 key for client pseudonyms in erasures */
    int has_pseudonym_key;         /* 0 (default) = derived from the signing seed */
    unsigned retention_days;       /* retention sweep: clients not seen and participations
                                      older than this many days are deleted (hourly);
                                      0 (default) = no sweeps; at most 36500 */
    /* request deadline (docs/protocol.md section 7; "limits" in the config file) */
    unsigned request_deadline_s;   /* seconds in which a request (line, headers, body) must
                                      arrive, counted from the connection's opening or, on a
                                      kept-alive connection, from its request line; else the
                                      connection is closed. 0 = none; 0..3600, default 10 */
    unsigned request_min_body_rate;/* bytes/s: a body of B bytes adds B / rate seconds to the
                                      deadline (slow uplinks); 1024..1000000000, default
                                      16384 */
    /* secure aggregation ("secagg" in the config file) */
    unsigned secagg_unmask_threads;/* threads that finish a secure round's unmasking
                                      (fl_secagg_server_unmask_*: started for it and joined
                                      before the round is aggregated); 1 = on the thread
                                      that closes the phase; 1..64, default the number of
                                      online CPUs, at most 8 */
    /* graceful stop (fl_coord_stop) */
    unsigned shutdown_drain_s;     /* seconds that requests already being received when the
                                      coordinator stops are given to finish (each is answered
                                      503, Retry-After 5; new connections are refused at
                                      once); then the rest are closed. 0..300, default 5 */
    /* storage ("database_busy_timeout_ms" in the config file) */
    unsigned db_busy_timeout_ms;   /* how long a request waits for the database's write lock
                                      (another process holds it, e.g. a backup or an admin's
                                      sqlite3 shell) before it is answered 503 unavailable
                                      (Retry-After 2); 0..600000, default 5000 */
} fl_coord_config;

/* Fills cfg with the documented defaults. NULL is a no-op. Thread-safe. */
FL_API void fl_coord_config_init(fl_coord_config *cfg);

/* A loaded configuration file: owns the strings a filled fl_coord_config points to. */
typedef struct fl_coord_config_doc fl_coord_config_doc;

/* Reads the JSON configuration file at path (format: docs/coordinator.md and
 * examples/coordinator.conf.json) into cfg, which must have been filled by
 * fl_coord_config_init(). Files the document names (admin_token_file, signing_key_file,
 * tls.cert_file, tls.key_file) are read too; relative paths are relative to the
 * configuration file's directory.
 *   out      receives the document that owns cfg's strings (free it after fl_coord_destroy
 *            or after the coordinator was created: create copies everything).
 *   errmsg   receives a message naming the bad field on failure (may be NULL).
 * Returns FL_OK; FL_ERR_IO (a file could not be read); FL_ERR_FORMAT (not JSON, unknown or
 * mistyped field, bad value); FL_ERR_MISUSE; FL_ERR_NOMEM. On failure *out is NULL. */
FL_API fl_status fl_coord_config_load(fl_coord_config_doc **out, fl_coord_config *cfg,
                                      const char *path, char *errmsg, size_t errmsg_len);

/* Frees a configuration document, wiping the secrets it read. NULL is a no-op. */
FL_API void fl_coord_config_doc_free(fl_coord_config_doc *doc);

/* ---- lifecycle ---- */

/* Validates cfg, opens the store, loads populations and marks rounds left open by a
 * previous process abandoned ("coordinator restarted"). Does not listen yet.
 *   out  receives the handle; on failure *out is NULL and errmsg (if non-NULL) says why.
 * Returns FL_OK; FL_ERR_MISUSE (a config field, named); storage's codes (FL_ERR_IO,
 * FL_ERR_FORMAT, FL_ERR_BUSY, FL_ERR_CORRUPT, FL_ERR_UNSUPPORTED); FL_ERR_NOMEM. */
FL_API fl_status fl_coord_create(fl_coord **out, const fl_coord_config *cfg, char *errmsg,
                                 size_t errmsg_len);

/* Binds and starts serving HTTP. Returns FL_OK; FL_ERR_STATE (already started or
 * stopped); FL_ERR_IO (bind failed or the HTTP server could not start);
 * FL_ERR_UNSUPPORTED (TLS asked for but libmicrohttpd lacks it). */
FL_API fl_status fl_coord_start(fl_coord *co);

/* The TCP port actually bound (useful with port 0), or 0 before start. */
FL_API unsigned fl_coord_port(const fl_coord *co);

/* Runs timers: phase and forming deadlines, round starts and aborts. Call it regularly
 * (the executable calls it every 100 ms); returns the number of milliseconds until the
 * next deadline (at most 1000). Safe while requests are served. */
FL_API int64_t fl_coord_tick(fl_coord *co);

/* Graceful stop: readiness turns false, the server stops accepting connections, answers
 * parked long polls (up to 2 s) and requests in flight (503, up to cfg.shutdown_drain_s;
 * unfinished ones are then closed), and open rounds are abandoned with reason "coordinator
 * shutting down". Blocks for at most max(2, shutdown_drain_s) seconds plus the final
 * writes. Idempotent. Call it from the owner's thread, not from the logger callback (which
 * runs on the HTTP threads): the request that logged is in flight, so the stop would wait
 * the whole shutdown_drain_s for it, and a line logged under the coordinator's internal
 * lock would deadlock it. */
FL_API void fl_coord_stop(fl_coord *co);

/* Stops (if needed) and frees everything. NULL is a no-op. */
FL_API void fl_coord_destroy(fl_coord *co);

/* Detail of the last failure on co (never NULL; valid until the next call on co). */
FL_API const char *fl_coord_errmsg(const fl_coord *co);

/* The coordinator's Ed25519 public key and its key id (docs/protocol.md section 4.1). */
FL_API void fl_coord_public_key(const fl_coord *co,
                                uint8_t pk[FL_COORD_PUBLIC_KEY_BYTES],
                                char key_id[FL_COORD_KEY_ID_BYTES]);

/* ---- signatures (docs/protocol.md section 4.1) ---- */

/* Builds the message the coordinator signs for a body: context ("flotilla/v1/task" or
 * "flotilla/v1/model"), a 0x00 byte, u64le(id), SHA-256(body).
 *   out, out_len  buffer of at least 64 bytes; *written receives the length used.
 * Returns FL_OK or FL_ERR_MISUSE (unknown context, short buffer). Thread-safe. */
FL_API fl_status fl_coord_signed_message(uint8_t *out, size_t out_len, size_t *written,
                                         const char *context, uint64_t id,
                                         const void *body, size_t body_len);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_COORDINATOR_H */
