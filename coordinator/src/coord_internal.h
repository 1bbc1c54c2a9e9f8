#ifndef FLOTILLA_COORD_INTERNAL_H
#define FLOTILLA_COORD_INTERNAL_H

/* Internals of the coordinator shared across its files (fl__coord_ prefix). */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "fl_internal.h"
#include "flotilla/coordinator.h"
#include "flotilla/storage.h"

#define FL__COORD_NAME_MAX 64         /* population names */
#define FL__COORD_REGION_MAX 32       /* region strings */
#define FL__COORD_CLIENT_ID_CHARS 16  /* hex client ids */
#define FL__COORD_PID_CHARS 32        /* hex participation ids */
#define FL__COORD_SECRET_CHARS 43     /* base64url of 32 random bytes */

/* ---- metrics ---- */

enum fl__coord_route {
    FL__R_NOT_FOUND = 0,
    FL__R_HEALTHZ,
    FL__R_READYZ,
    FL__R_METRICS,
    FL__R_ENROLL,
    FL__R_CHECKIN,
    FL__R_TASK,
    FL__R_MODEL,
    FL__R_ADMIN_POPS,       /* /v1/admin/populations */
    FL__R_ADMIN_POP,        /* /v1/admin/populations/{name} */
    FL__R_ADMIN_POP_START,
    FL__R_ADMIN_POP_STOP,
    FL__R_ADMIN_POP_MODELS,
    FL__R_ADMIN_POP_ROUNDS,
    FL__R_ADMIN_ROUND,
    FL__R_COUNT
};

/* Status codes tracked per route in flotilla_http_requests_total. */
#define FL__COORD_CODES 18

enum fl__coord_checkin_outcome {
    FL__CHK_SELECTED = 0,
    FL__CHK_RETRY,
    FL__CHK_REJECTED,
    FL__CHK_COUNT
};

struct fl__coord_metrics {
    atomic_uint_fast64_t http[FL__R_COUNT][FL__COORD_CODES];
    atomic_uint_fast64_t checkins[FL__CHK_COUNT];
    atomic_uint_fast64_t enrollments;
    atomic_uint_fast64_t rounds_started;
    atomic_uint_fast64_t rounds_completed;
    atomic_uint_fast64_t rounds_abandoned;
    atomic_uint_fast64_t bytes_in;
};

const char *fl__coord_route_name(enum fl__coord_route r);
/* Counts one answered request. */
void fl__coord_metrics_http(struct fl__coord_metrics *m, enum fl__coord_route r, int status);
/* Renders the Prometheus text format into a malloc'ed NUL-terminated string. */
char *fl__coord_metrics_render(fl_coord *co);

/* ---- populations and rounds (in memory, mirrored in storage) ---- */

enum fl__coord_eligibility { FL__ELIG_CHARGING = 1, FL__ELIG_UNMETERED = 2, FL__ELIG_IDLE = 4 };

struct fl__coord_selection {
    int64_t target;            /* clients wanted per round */
    double over_selection;     /* factor, 1.0..3.0 */
    int64_t min_participants;  /* fewest to proceed */
    unsigned require;          /* FL__ELIG_* mask */
    int64_t min_examples;      /* eligibility floor */
    int64_t forming_s, jitter_s, min_retry_s, max_retry_s, round_interval_s;
};

struct fl__coord_participant {
    char client_id[FL__COORD_CLIENT_ID_CHARS + 1];
    char pid[FL__COORD_PID_CHARS + 1]; /* participation id (Idempotency-Key) */
    uint32_t index;                    /* secagg index 0..n-1 */
};

enum fl__coord_round_state {
    FL__ROUND_FORMING = 0,
    FL__ROUND_RUNNING = 1
};

struct fl__coord_round {
    int64_t id;                 /* storage round id */
    enum fl__coord_round_state state;
    int64_t forming_deadline;   /* Unix ms */
    int64_t run_deadline;       /* Unix ms, once RUNNING */
    size_t cap;                 /* ceil(target * over_selection) */
    size_t n;                   /* participants so far */
    struct fl__coord_participant *parts; /* cap entries */
    uint8_t session_id[32];     /* secagg session id / graph seed */
    int64_t base_version;       /* model version the round trains from */
};

struct fl__coord_pop {
    int64_t id;                              /* storage id */
    char name[FL__COORD_NAME_MAX + 1];
    json_t *config;                          /* normalised config (no secrets) */
    uint8_t enroll_hash[32];                 /* SHA-256 of the enrollment token */
    char **regions;                          /* allowed regions; NULL with any_region */
    size_t n_regions;
    bool any_region;
    bool running;                            /* admin started it */
    int64_t model_version;                   /* current version, 0 = none */
    struct fl__coord_selection sel;
    int64_t deadlines_s[5];                  /* advertise share masked consistency unmask */
    struct fl__coord_round *round;           /* forming or running round, or NULL */
    int64_t next_round_at;                   /* Unix ms when the next round may form */
    uint64_t clients;                        /* enrolled through this process (gauge) */
};

/* ---- the handle ---- */

struct fl_coord {
    fl_allocator alloc;
    fl_logger logger;
    struct fl__err err;
    char *listen_address;
    unsigned port_cfg, port;
    unsigned threads;
    char *db_path;
    uint8_t admin_hash[32];
    bool has_admin;
    uint8_t sign_sk[64];          /* Ed25519 secret key (seed || pk) */
    uint8_t sign_pk[32];
    char key_id[FL_COORD_KEY_ID_BYTES];
    char *tls_cert, *tls_key;
    fl_coord_limits limits;
    unsigned max_long_poll_s;
    fl_coord_clock_fn clock;
    void *clock_user;

    struct MHD_Daemon *daemon;
    atomic_bool ready;
    atomic_bool stopped;
    int64_t started_at;

    pthread_mutex_t lock;         /* guards everything below and the store */
    fl_store *store;
    struct fl__coord_pop **pops;
    size_t n_pops, cap_pops;

    struct fl__coord_metrics metrics;
};

int64_t fl__coord_now(const fl_coord *co);
void fl__coord_lock(fl_coord *co);
void fl__coord_unlock(fl_coord *co);
struct fl__coord_pop *fl__coord_pop_find(fl_coord *co, const char *name);
struct fl__coord_pop *fl__coord_pop_by_id(fl_coord *co, int64_t id);
void fl__coord_pop_free(fl_coord *co, struct fl__coord_pop *p);
void fl__coord_round_free(fl_coord *co, struct fl__coord_round *r);
/* Abandons p's current round in storage and memory (lock held). */
void fl__coord_round_abandon(fl_coord *co, struct fl__coord_pop *p, const char *reason);

/* ---- HTTP layer ---- */

/* An answer being built by a handler. */
struct fl__coord_reply {
    int status;
    json_t *json;                  /* body as JSON (owned), or */
    const uint8_t *bytes;          /* a byte body (copied when queued) */
    size_t len;
    char *bytes_owned;             /* freed after queueing when set */
    const char *content_type;      /* for byte bodies */
    int retry_after_s;             /* >= 0: Retry-After header */
    const char *allow;             /* Allow header for 405 */
    bool www_auth;                 /* WWW-Authenticate for 401 */
    bool replayed;                 /* Idempotent-Replayed: true */
    char sig_b64[96];              /* Flotilla-Signature when non-empty */
    char sha_hex[65];              /* Flotilla-Content-SHA256 when non-empty */
    char etag[72];                 /* ETag when non-empty */
};

/* One incoming request, as handlers see it. */
struct fl__coord_req {
    fl_coord *co;
    struct MHD_Connection *conn;
    enum fl__coord_route route;
    const char *method;
    const char *seg[8];            /* path segments (pointers into path_buf) */
    size_t nseg;
    char path_buf[512];
    const uint8_t *body;
    size_t body_len;
};

/* Sets an error reply {"error":{status,code,message[,field][,retry_after_s]}}. Returns
 * status so handlers can `return fl__coord_error(...)`. */
int fl__coord_error(struct fl__coord_reply *rep, int status, const char *code,
                    const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Sets a JSON reply (takes ownership of body). */
int fl__coord_json(struct fl__coord_reply *rep, int status, json_t *body);

/* Parses the body as a JSON object; on failure sets a 400 malformed_json reply and returns
 * NULL. */
json_t *fl__coord_parse_body(const struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* Bearer token of the request, or NULL. */
const char *fl__coord_bearer(const struct fl__coord_req *rq);
/* Checks the admin token; on failure sets the 401 reply and returns false. */
bool fl__coord_auth_admin(const struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* Handlers (return the HTTP status they set). */
int fl__coord_h_enroll(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_checkin(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_task(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_model(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_admin(struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* Starts/stops the MHD daemon (http.c). */
fl_status fl__coord_http_start(fl_coord *co);
void fl__coord_http_stop(fl_coord *co);

/* ---- populations (pop.c) ---- */

/* Validates an admin population config and fills p (name, regions, selection, deadlines,
 * normalised config). On a bad field sets a 400 reply and returns false. */
bool fl__coord_pop_parse(fl_coord *co, struct fl__coord_pop *p, json_t *cfg,
                         struct fl__coord_reply *rep);
/* Rebuilds a population from its storage record (startup). */
fl_status fl__coord_pop_load(fl_coord *co, const fl_store_population *sp);
/* Loads every population from storage and abandons rounds left open. */
fl_status fl__coord_pops_load_all(fl_coord *co);
json_t *fl__coord_pop_state_json(fl_coord *co, const struct fl__coord_pop *p);
bool fl__coord_region_allowed(const struct fl__coord_pop *p, const char *region);
void fl__coord_tick_pops(fl_coord *co, int64_t now);
/* Starts p's forming round once it is full (lock held). */
void fl__coord_round_maybe_start(fl_coord *co, struct fl__coord_pop *p, int64_t now);

/* ---- utilities (util.c) ---- */

void fl__coord_sha256(uint8_t out[32], const void *data, size_t len);
void fl__coord_hex(char *out, const uint8_t *in, size_t n);          /* out: 2n+1 */
bool fl__coord_unhex(uint8_t *out, size_t n, const char *hex);        /* exactly 2n chars */
void fl__coord_b64url(char *out, const uint8_t *in, size_t n);        /* unpadded */
void fl__coord_b64(char *out, size_t out_len, const uint8_t *in, size_t n); /* padded */
void fl__coord_random(void *out, size_t n);
uint32_t fl__coord_random_below(uint32_t n);
/* 1 if s is 1..max chars, each in [A-Za-z0-9_-] (plus '.' when dot). */
bool fl__coord_valid_name(const char *s, size_t max, bool dot);
/* Parses a decimal id of 1..18 digits. */
bool fl__coord_parse_id(const char *s, int64_t *out);
/* Reads a whole file (at most max bytes) into a malloc'ed NUL-terminated buffer. */
fl_status fl__coord_read_file(char **out, size_t *len, const char *path, size_t max);

#endif /* FLOTILLA_COORD_INTERNAL_H */
