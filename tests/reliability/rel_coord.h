#ifndef FL_TEST_REL_COORD_H
#define FL_TEST_REL_COORD_H
/* Helpers of the coordinator-level reliability tests (docs/reliability.md), on top of the
 * coordinator test kit (tests/coordinator/coord_testkit.h, compiled into these tests):
 *
 * - an in-process coordinator with chosen limits (the test kit's fixture fixes them);
 * - a libcurl request that reports transport failures instead of asserting (the peer may
 *   have been killed on purpose), on a reusable keep-alive handle;
 * - raw-socket HTTP to 127.0.0.1, for requests libcurl refuses to send (duplicate
 *   Content-Length, garbage request lines, truncated chunked bodies);
 * - SQLite checks on the coordinator's database (integrity_check, single values).
 *
 * Every loop is bounded in count and time; every socket goes to 127.0.0.1 only. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "coord_testkit.h"

/* ---- profile ---- */

/* 1 with FL_RELIABILITY_PROFILE=long (the figures), else 0 (CI). */
int rel_long(void);
/* An integer from the environment, or dflt. */
long rel_envl(const char *name, long dflt);
/* FL_RELIABILITY_SEED, else the clock (printed by each test). */
uint64_t rel_seed0(void);
uint64_t rel_next(uint64_t *s);
double rel_mono_s(void);
void rel_sleep_ms(long ms);

/* ---- in-process coordinator with chosen limits ---- */

/* Starts an in-process coordinator for f (from fx_new()) with lim (NULL = defaults),
 * `threads` HTTP threads and a long-poll cap of max_long_poll_s (0 = the default), on the
 * real clock (deadlines run in wall time), with its own ticker thread. */
void rel_inproc_start(struct fx *f, const fl_coord_limits *lim, unsigned threads,
                      unsigned max_long_poll_s);
/* Stops the ticker and destroys the coordinator (fx_free still removes the files). */
void rel_inproc_stop(struct fx *f);

/* ---- the real executable with chosen settings ---- */

/* As the test kit's fx_proc_start (same database, admin token, signing key, 2 threads),
 * with extra top-level config fields (e.g. "\"limits\":{\"per_ip_connections\":0}"), or
 * NULL. fx_free stops it. */
void rel_proc_start(struct fx *f, const char *exe, const char *extra_json);

/* Starts exe on the config an earlier fx_proc_start / rel_proc_start wrote (f->conf), with
 * the test's environment, appending to f->log; for executables that may die while starting
 * (power cuts). Returns 0 once it listens and /readyz answers 200 (f->child, f->port set),
 * or the wait status of a child that exited first (f->child = 0). */
int rel_proc_try_start(struct fx *f, const char *exe);

/* A plain (not secure-aggregation) update body of device c (docs/protocol.md 5.2):
 * "FLUP" || u32le 1 || u64le round id, then the words as u32le (b <= 32). out holds
 * 16 + 4 x vec_len bytes; returns the length. */
size_t rel_plain_body(const struct tc *c, uint8_t *out);

/* ---- HTTP that tolerates a dead peer ---- */

/* One request on the reusable handle h (keep-alive). Returns the CURLcode; on CURLE_OK
 * r->status holds the HTTP status. r is filled as http_req fills it (free with resp_free).
 * timeout_ms bounds the whole request. Every wait of these helpers (timeouts, waits for a
 * port) is times FL_TEST_TIME_SCALE (fl_test_time.h). */
CURLcode rel_http(struct fx *f, CURL *h, const char *method, const char *path, const char *token,
                  const char *content_type, const void *body, size_t len, const char *pid,
                  long timeout_ms, struct resp *r);

/* ---- raw sockets ---- */

/* Connects to 127.0.0.1:port (blocking, with a 2 s connect timeout). fd or -1. */
int rel_connect(unsigned port);
/* Sends all of buf (MSG_NOSIGNAL); 0, or -1 when the peer closed or failed. */
int rel_send_all(int fd, const void *buf, size_t len);
/* Reads until the peer closes, cap bytes arrive, or timeout_ms passes. Returns the bytes
 * read (NUL-terminated in buf); *closed says whether the peer closed (EOF or reset). */
size_t rel_recv_until(int fd, char *buf, size_t cap, int timeout_ms, bool *closed);
/* Status of the first response in buf ("HTTP/1.x NNN"), or 0 when there is none. */
int rel_status_of(const char *buf);
/* Sends req on a fresh connection and reads the answer (timeout_ms). Returns the status of
 * the first response, 0 when the connection closed without one, -1 when it could not
 * connect, -2 when nothing came back within the timeout and the connection stayed open. */
int rel_raw(unsigned port, const void *req, size_t len, int timeout_ms, char *out, size_t cap);
/* GET /healthz on a fresh connection: its status (200 when healthy), or <= 0. */
int rel_healthz(unsigned port);

/* ---- database ---- */

/* PRAGMA integrity_check and foreign_key_check on path (read-only): true when both pass;
 * otherwise the first problem goes to why. */
bool rel_db_ok(const char *path, char *why, size_t why_len);
/* First column of the first row of q as int64 (-1 when no row), on an open handle. */
struct sqlite3;
int64_t rel_q(struct sqlite3 *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct sqlite3 *rel_db_open(const char *path);
void rel_db_close(struct sqlite3 *db);

/* ---- metrics ---- */

/* Value of the sample `name` (exact text before the space, labels included) in the
 * Prometheus text at /metrics, or NAN. */
double rel_metric(struct fx *f, const char *name);

#endif
