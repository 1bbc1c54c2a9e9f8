#ifndef FLOTILLA_COORD_INTERNAL_H
#define FLOTILLA_COORD_INTERNAL_H

/* Internals of the coordinator shared across its files (fl__coord_ prefix). */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "fl_internal.h"
#include "flotilla/coordinator.h"
#include "flotilla/secagg.h"
#include "flotilla/storage.h"

struct fl_secagg_server;
struct MHD_Connection;
struct fl__coord_auth_cache;

#define FL__COORD_NAME_MAX 64         /* population names */
#define FL__COORD_REGION_MAX 32       /* region strings */
#define FL__COORD_CLIENT_ID_CHARS 16  /* hex client ids */
#define FL__COORD_PID_CHARS 32        /* hex participation ids */
#define FL__COORD_SECRET_CHARS 43     /* base64url of 32 random bytes */
#define FL__COORD_BODY_TAG_BYTES 16   /* fl__coord_body_tag */

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
    FL__R_SECAGG_POST,      /* POST /v1/rounds/{id}/secagg/{phase} */
    FL__R_SECAGG_RESULT,    /* GET /v1/rounds/{id}/secagg/{phase}/result */
    FL__R_UPDATE,           /* POST /v1/rounds/{id}/update */
    FL__R_STATUS,           /* GET /v1/rounds/{id}/status */
    FL__R_AUDIT_CHECKPOINT, /* GET /v1/audit/checkpoint */
    FL__R_AUDIT_INCLUSION,  /* GET /v1/audit/proof/inclusion */
    FL__R_AUDIT_CONSISTENCY,/* GET /v1/audit/proof/consistency */
    FL__R_ADMIN_AUDIT_BUNDLE, /* GET /v1/admin/audit/bundle */
    FL__R_ADMIN_CLIENT_ERASE, /* POST /v1/admin/clients/{id}/erase */
    FL__R_ADMIN_POP_TOKEN,  /* POST /v1/admin/populations/{name}/enrollment-token */
    FL__R_ADMIN_CLIENT_REVOKE,    /* POST /v1/admin/clients/{id}/revoke */
    FL__R_ADMIN_CLIENT_REINSTATE, /* POST /v1/admin/clients/{id}/reinstate */
    FL__R_COUNT
};

/* Status codes tracked per route in flotilla_http_requests_total. */
#define FL__COORD_CODES 20

enum fl__coord_checkin_outcome {
    FL__CHK_SELECTED = 0,
    FL__CHK_RETRY,
    FL__CHK_REJECTED,
    FL__CHK_COUNT
};

/* Buckets of the round-duration histogram (bounds in metrics.c, +Inf implied). */
#define FL__COORD_DUR_BUCKETS 10

struct fl__coord_metrics {
    atomic_uint_fast64_t http[FL__R_COUNT][FL__COORD_CODES];
    atomic_uint_fast64_t checkins[FL__CHK_COUNT];
    atomic_uint_fast64_t enrollments;
    atomic_uint_fast64_t rounds_started;
    atomic_uint_fast64_t rounds_completed;
    atomic_uint_fast64_t rounds_abandoned;
    atomic_uint_fast64_t phases_closed[3]; /* by reason: all posted, deadline, target */
    atomic_uint_fast64_t bytes_in;
    atomic_uint_fast64_t rate_limited;     /* check-ins answered 429 */
    atomic_uint_fast64_t auth_cache_hits;  /* client auths served from memory */
    atomic_uint_fast64_t auth_cache_misses;/* client auths that read SQLite */
    atomic_uint_fast64_t long_polls_parked;/* result requests suspended */
    atomic_uint_fast64_t updates_accepted; /* plain updates and masked inputs folded */
    atomic_uint_fast64_t rounds_refused_budget; /* rounds not started: privacy budget */
    atomic_uint_fast64_t bytes_out;        /* response body bytes queued */
    atomic_uint_fast64_t update_bytes;     /* bytes of accepted masked inputs / updates */
    atomic_uint_fast64_t model_bytes_out;  /* model download body bytes */
    /* round durations (first selection to the end), by outcome: histogram buckets */
    atomic_uint_fast64_t dur_bucket[2][FL__COORD_DUR_BUCKETS];
    atomic_uint_fast64_t dur_count[2];
    atomic_uint_fast64_t dur_sum_ms[2];
    atomic_uint_fast64_t agg_count;        /* aggregations run (decode + strategy + commit) */
    atomic_uint_fast64_t agg_sum_us;       /* their total wall time, microseconds */
    atomic_uint_fast64_t stale_rejected;   /* buffered updates refused as too stale */
    atomic_uint_fast64_t updates_clipped;  /* plain updates scaled down to the norm bound */
    atomic_uint_fast64_t norm_proofs_refused; /* secagg masked inputs whose norm proof failed */
    atomic_uint_fast64_t auth_revoked;     /* client requests refused: the client is revoked */
};

extern const double fl__coord_dur_bounds[FL__COORD_DUR_BUCKETS];
/* Records a finished round's duration (outcome 0 completed, 1 abandoned). */
void fl__coord_metrics_round_done(struct fl__coord_metrics *m, int outcome, int64_t ms);

const char *fl__coord_route_name(enum fl__coord_route r);
/* Counts one answered request. */
void fl__coord_metrics_http(struct fl__coord_metrics *m, enum fl__coord_route r, int status);
/* Renders the Prometheus text format into a NUL-terminated string from the instance
 * allocator; *size receives the bytes allocated (what fl__free needs). */
char *fl__coord_metrics_render(fl_coord *co, size_t *size);

/* ---- populations and rounds (in memory, mirrored in storage) ---- */

enum fl__coord_eligibility { FL__ELIG_CHARGING = 1, FL__ELIG_UNMETERED = 2, FL__ELIG_IDLE = 4 };

struct fl__coord_selection {
    int64_t target;            /* clients wanted per round */
    double over_selection;     /* factor, 1.0..3.0 */
    int64_t min_participants;  /* fewest to proceed */
    unsigned require;          /* FL__ELIG_* mask */
    int64_t min_examples;      /* eligibility floor */
    int64_t forming_s, jitter_s, min_retry_s, max_retry_s, round_interval_s;
    int64_t target_grace_s;    /* a phase closes this long after target posts; -1 = off */
};

/* Protocol phases of a round (docs/protocol.md section 5). Plain rounds use only
 * FL__PH_MASKED (the /update post). */
enum fl__coord_phase {
    FL__PH_ADVERTISE = 0,
    FL__PH_SHARE = 1,
    FL__PH_MASKED = 2,
    FL__PH_CONSISTENCY = 3,
    FL__PH_UNMASK = 4,
    FL__PH_COUNT = 5,
    FL__PH_DONE = 5             /* every phase closed: aggregating or finished */
};

extern const char *const fl__coord_phase_names[FL__PH_COUNT];

struct fl__coord_participant {
    char client_id[FL__COORD_CLIENT_ID_CHARS + 1];
    char pid[FL__COORD_PID_CHARS + 1]; /* participation id (Idempotency-Key) */
    uint32_t index;                    /* secagg index 0..n-1 */
    uint8_t posted;                    /* bit k: a message of phase k was accepted */
    int8_t dropped_at;                 /* phase it missed (-1 = alive) */
    uint8_t hash[FL__PH_COUNT][FL__COORD_BODY_TAG_BYTES]; /* tag of the accepted message
                                          per phase (fl__coord_body_tag) */
    uint8_t *result[FL__PH_COUNT];     /* server message for it after phase k closed */
    uint32_t result_len[FL__PH_COUNT];
    int64_t sel_rid;                   /* round id the device was given at selection (a
                                          buffered participation outlives its buffer) */
    int64_t base_version;              /* model version the device trains from */
    int64_t deadline;                  /* buffered: Unix ms by which its update must arrive */
    uint8_t device_id[32];             /* active rounds: the device id registered to the
                                          client (its enrollment's secagg_identity) */
    bool evicted;                      /* active rounds: dropped by the coordinator while the
                                          secagg server still expected its advertisement
                                          (no identity, or one naming another device) */
};

/* Finished synchronous rounds each population keeps in memory (p->last and p->older):
 * their outcome answers status polls and their participants' late posts get 410 "has
 * ended" instead of "not open". Each costs its participant table (~320 B per selected
 * client; 2 MB at 6,500), nothing of size d. */
#define FL__COORD_ROUNDS_KEPT 4

enum fl__coord_round_state {
    FL__ROUND_FORMING = 0,
    FL__ROUND_RUNNING = 1,
    FL__ROUND_COMPLETED = 2,
    FL__ROUND_ABANDONED = 3
};

enum fl__coord_dp_mode { FL__DP_NONE = 0, FL__DP_CENTRAL = 1, FL__DP_DISTRIBUTED = 2 };

/* Everything a round's devices and its aggregation need to agree on, fixed when the round
 * is created (docs/protocol.md sections 4.2, 5.1 and 9). */
struct fl__coord_round_params {
    bool secagg;                /* secure aggregation on */
    bool active;                /* secagg in active mode with device certificates
                                   (secagg.consistency_check): adds the consistency phase */
    bool reveal_seeds;          /* secagg.reveal_pair_seeds: unmask answers carry the seeds
                                   shared with dropped neighbours (docs/secagg.md) */
    enum fl__coord_dp_mode dp;  /* privacy mode */
    bool weight_examples;       /* weighting "examples" (else uniform) */
    int64_t weight_cap;         /* largest device weight */
    uint32_t bits;              /* b: coordinates are mod 2^b */
    size_t dim;                 /* d: floats in the flattened update tensors */
    size_t dim_coded;           /* d' (padded, distributed) or d: coded coordinates */
    size_t vec_len;             /* dim_coded + 1 (trailing weight coordinate) */
    double clip;                /* L2 clip C, model units */
    double granularity;         /* gamma */
    double beta;                /* conditional rounding bias */
    double noise_multiplier;    /* z (DP modes) */
    uint64_t sigma2_num, sigma2_den; /* central: variance on the sum; distributed: per
                                        client; lattice units^2 */
    uint32_t n_min;             /* distributed: fewest survivors the noise is sized for */
    double l2_bound;            /* sensitivity on the lattice (DP modes) */
    double q;                   /* sampling rate target / population_size */
    uint8_t rotation_seed[32];  /* distributed: public Hadamard seed */
    uint8_t quant_seed[32];     /* public quantizer seed (sent, unused by v1 encoders) */
    uint32_t degree, threshold; /* secagg k and t once the round runs */
    uint32_t norm_bits;         /* secagg norm proofs (0 = off): bits per coordinate m */
    uint64_t norm_bound2;       /* bound on a device's squared norm (lattice units^2) */
    uint32_t norm_weight_max;   /* its weight coordinate is proven in 1..this */
    bool buffered;              /* FedBuff buffer (docs/protocol.md section 5.4) */
    uint32_t buffer_k;          /* buffered: contributions per model update (K) */
    uint32_t max_inflight;      /* buffered: devices training at once (max_concurrency) */
    int64_t max_staleness;      /* buffered: largest accepted version lag */
    double staleness_alpha;     /* buffered: weight 1 / (1 + staleness)^alpha */
    char **tensors;             /* update tensor names, in order */
    size_t n_tensors;
    size_t tensors_cap;         /* entries allocated in tensors */
};

struct fl__coord_round {
    int64_t id;                 /* storage round id */
    int64_t number;             /* round number in the population */
    enum fl__coord_round_state state;
    int64_t created_at;         /* Unix ms the round began forming */
    int64_t forming_deadline;   /* Unix ms */
    int64_t started_at;         /* Unix ms, once RUNNING */
    int64_t run_deadline;       /* Unix ms, once RUNNING: the unmask deadline */
    int64_t phase_deadline[FL__PH_COUNT]; /* Unix ms, once RUNNING */
    int64_t goal;               /* selection.target when the round started */
    int64_t goal_grace_ms;      /* selection.target_grace_s then, in ms; -1 = off */
    int64_t goal_close_at[FL__PH_COUNT]; /* Unix ms: the phase may close at this time
                                   (its goal met, plus the grace); 0 = goal not met yet */
    int phase;                  /* enum fl__coord_phase open now (FL__PH_DONE at the end) */
    size_t cap;                 /* ceil(target * over_selection) */
    size_t n;                   /* participants so far */
    struct fl__coord_participant *parts; /* cap entries */
    uint32_t *pidx;             /* synchronous rounds: open-addressing index client id ->
                                   1 + position in parts (0 = empty), pidx_mask + 1 slots */
    size_t pidx_mask;
    uint8_t session_id[32];     /* secagg session id / graph seed */
    int64_t base_version;       /* model version the round trains from */
    struct fl__coord_round_params rp;
    struct fl_secagg_server *sa;/* secagg server state machine (secagg rounds, running) */
    fl_secagg_config sa_cfg;    /* its resolved config, while sa is set (norm proofs are
                                   checked against a copy of it outside the lock) */
    uint64_t *acc;              /* plain rounds: (vec_len) running sum mod 2^b */
    uint32_t received;          /* plain rounds: updates folded into acc */
    double *bnum;               /* buffered: (dim) staleness-weighted sum of decoded
                                   contributions, lattice units */
    double bwsum;               /* buffered: sum of the contributions' weight coordinates */
    struct fl__coord_blob *task;/* plain synchronous rounds: the signed task body, the same
                                   for every participant (built on the first fetch) */
    bool aggregating;           /* decode and strategy run without the lock (synchronous
                                   rounds): the round must not be retired meanwhile */
    uint32_t survivors;         /* clients in the final sum */
    int64_t new_version;        /* model version produced (COMPLETED) */
    bool extended;              /* its forming window was extended once (too few clients) */
    char reason[256];           /* why it was abandoned */
};

struct fl__coord_pop {
    int64_t id;                              /* storage id */
    char name[FL__COORD_NAME_MAX + 1];
    json_t *config;                          /* normalised config (no secrets) */
    uint8_t enroll_hash[32];                 /* SHA-256 of the enrollment token */
    char **regions;                          /* allowed regions; NULL with any_region */
    size_t n_regions;
    size_t regions_cap;                      /* entries allocated in regions */
    bool any_region;
    bool buffered;                           /* FedBuff without secagg: asynchronous */
    bool active;                             /* secagg.consistency_check: active-adversary
                                                SecAgg with device certificates */
    uint8_t authority_key[32];               /* active: secagg.authority_key, the device
                                                authority's Ed25519 verification key */
    bool running;                            /* admin started it */
    int64_t model_version;                   /* current version, 0 = none */
    struct fl__coord_blob *model_blob;       /* signed bytes of a model version (normally
                                                the current one; cache.c), or NULL */
    struct fl__coord_selection sel;
    int64_t deadlines_s[5];                  /* advertise share masked consistency unmask */
    struct fl__coord_round *round;           /* forming or running round, or NULL */
    int64_t next_round_at;                   /* Unix ms when the next round may form */
    uint64_t clients;                        /* enrolled through this process (gauge) */
    struct fl__coord_round *last;            /* the last finished round (results stay
                                                fetchable until the next one ends) */
    struct fl__coord_round *older[FL__COORD_ROUNDS_KEPT - 1]; /* synchronous rounds that
                                                finished before last, newest first (NULL =
                                                none): a device slower than a whole later
                                                round still reads its round's outcome; phase
                                                results and the task body are freed */
    bool budget_exhausted;                   /* the last budget check refused a round */
    char round_error[400];                   /* why the last round could not start as
                                                configured ("" = it could, or none tried) */
    int64_t round_error_at;                  /* Unix ms of that refusal */
    bool audit_off;                          /* created before the audit log with a budget
                                                it cannot state (epsilon DBL_MAX): its
                                                rounds are not logged */
    int64_t rounds_completed;                /* completed rounds seen by this process */
    /* server optimiser state (fedavgm/fedadam/fedyogi/fedadagrad), (dim) floats each */
    float *opt_m, *opt_v;
    size_t opt_dim;
    int64_t opt_version;                     /* model version the state belongs to */
    /* metrics (lock held) */
    uint64_t dropouts[FL__PH_COUNT];         /* clients dropped, by the phase they missed */
    uint64_t rounds_done[2];                 /* rounds completed / abandoned (this process) */
    double epsilon_spent;                    /* epsilon of the ledger at the budget's delta */
    /* enrolment limits (config "enrollment"; docs/protocol.md section 2) */
    int64_t enroll_per_minute;               /* max_per_minute: bucket size and refill per
                                                minute; 0 = no limit */
    int64_t enroll_max_clients;              /* max_clients enrolled at once; 0 = no limit */
    double enroll_tokens;                    /* enrolments the bucket allows now */
    int64_t enroll_refill_at;                /* Unix ms the bucket was last refilled; 0 =
                                                never (full) */
    double epsilon_budget;                   /* 0 without DP */
    /* an abandonment that could not be written (e.g. disk full): retried from the ticker */
    bool abandon_pending;
    int64_t abandon_retry_at;                /* Unix ms of the next try */
    char abandon_reason[128];
};

/* ---- the handle ---- */

/* Test-only hook (never set in production): called with the decoded plain sum of a round
 * (vec_len words mod 2^b, after unmasking; never an individual update) and the averaged
 * delta (dim floats) before the strategy is applied. Called from the aggregating thread,
 * with the coordinator lock released for synchronous rounds. */
typedef void (*fl__coord_debug_sum_fn)(void *user, int64_t round_id, const uint64_t *sum,
                                       size_t vec_len, uint32_t count, const float *delta,
                                       size_t dim);
void fl__coord_debug_hook_set(fl_coord *co, fl__coord_debug_sum_fn fn, void *user);
/* Test-only hook (never set in production): called when a secure round's last advance (the
 * unmasking) is about to run, with the coordinator lock released. */
typedef void (*fl__coord_debug_unmask_fn)(void *user, int64_t round_id);
void fl__coord_debug_unmask_hook_set(fl_coord *co, fl__coord_debug_unmask_fn fn, void *user);
/* Test-only: how many secure rounds began their unmasking on more than one thread. */
uint64_t fl__coord_debug_unmask_threaded(fl_coord *co);
/* Test-only: participant slots of the kept finished rounds (p->last, p->older) whose
 * client id is client_id ("" = erased slots); *with_data (may be NULL): how many of them
 * still hold a participation id, a message hash or a phase result. */
size_t fl__coord_debug_kept_slots(fl_coord *co, const char *client_id, size_t *with_data);
/* Test-only hook (never set in production): an equivocating coordinator. Called (lock
 * held) when the task of secagg participant client_index of round_id is built; a return
 * value > 0 is the model version that participant's task names instead of the round's
 * base version (which is what honest coordinators always send). */
typedef int64_t (*fl__coord_debug_task_model_fn)(void *user, int64_t round_id,
                                                  uint32_t client_index, int64_t base_version);
void fl__coord_debug_task_model_set(fl_coord *co, fl__coord_debug_task_model_fn fn,
                                    void *user);

/* A parked long poll (docs/protocol.md section 5): one suspended HTTP connection. */
struct fl__coord_waiter {
    struct fl__coord_waiter *prev, *next;
    struct MHD_Connection *conn;
    int64_t round_id;
    int phase;                  /* enum fl__coord_phase; -1 = round status */
    int64_t deadline_mono;      /* monotonic ms when the poll answers 204 */
    bool linked;
    bool draining;              /* resumed by fl_coord_stop; counted in co->draining */
};

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
    unsigned request_deadline_s;  /* per-request deadline, seconds; 0 = none (http.c) */
    unsigned request_min_body_rate; /* bytes/s a body's deadline allowance assumes */
    unsigned unmask_threads;        /* threads finishing a secure round's unmasking */
    unsigned drain_s;               /* fl_coord_stop: how long in-flight requests may finish */
    uint64_t unmask_threaded;       /* unmaskings begun on more than one thread (lock) */
    struct fl__coord_http_watch *watch; /* request deadlines, half-closed clients (http.c) */
    unsigned max_long_poll_s;
    fl_coord_clock_fn clock;
    void *clock_user;

    struct MHD_Daemon *daemon;
    int quiesced_fd;                /* listening socket taken back at stop (-1: none) */
    atomic_bool ready;
    atomic_bool stopped;
    atomic_int draining;        /* polls resumed at stop whose answer is not sent yet */
    atomic_int inflight;        /* requests whose headers arrived and that are not completed */
    int64_t started_at;

    pthread_mutex_t lock;         /* guards everything below and the store */
    fl_store *store;
    struct fl__coord_pop **pops;
    size_t n_pops, cap_pops;

    struct fl__coord_metrics metrics;

    struct fl__coord_waiter *waiters;  /* parked long polls (lock held) */
    size_t n_waiters;
    struct fl__coord_auth_cache *auth; /* client token cache (own lock) */
    struct evp_mac_st *body_mac;       /* OpenSSL Poly1305 (NULL: libsodium's) */
    uint8_t body_mac_key[32];          /* random per process: tags of posted bodies */
    fl__coord_debug_sum_fn debug_sum;  /* test hook: the round's unmasked sum */
    void *debug_user;
    fl__coord_debug_unmask_fn debug_unmask; /* test hook: the unlocked unmasking */
    void *debug_unmask_user;
    fl__coord_debug_task_model_fn debug_task_model; /* test hook: equivocation */
    void *debug_task_model_user;

    /* audit log (audit.c) */
    char audit_origin[FL_STORE_AUDIT_ORIGIN_MAX + 1]; /* checkpoint origin (log name) */
    uint8_t pseudonym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES]; /* HMAC key for erasures */
    int64_t retention_ms;              /* retention sweep age; 0 = no sweeps */
    int64_t next_sweep_at;             /* Unix ms of the next sweep */
};

/* Default of fl_coord_config.secagg_unmask_threads: online CPUs, 1..8. */
unsigned fl__coord_default_unmask_threads(void);
int64_t fl__coord_now(const fl_coord *co);
/* The configured allocator for public library calls (NULL = libc: the internal copy of
 * "no allocator" is all zero, which public APIs reject). */
static inline const fl_allocator *fl__coord_pub_alloc(const fl_coord *co) {
    return co->alloc.alloc ? &co->alloc : NULL;
}
/* The allocator of the coordinator's own memory, for the fl__ helpers (co NULL = libc: the
 * fuzz entry points run without a coordinator). Every block goes back through fl__free
 * with the size it was asked for, as fl_allocator promises the application. */
static inline const fl_allocator *fl__coord_alloc(const fl_coord *co) {
    return co ? &co->alloc : NULL;
}
/* Monotonic milliseconds (long-poll timeouts; not the configurable clock). */
int64_t fl__coord_mono_ms(void);
/* Monotonic microseconds (durations for metrics). */
int64_t fl__coord_mono_us(void);
void fl__coord_lock(fl_coord *co);
void fl__coord_unlock(fl_coord *co);
struct fl__coord_pop *fl__coord_pop_find(fl_coord *co, const char *name);
struct fl__coord_pop *fl__coord_pop_by_id(fl_coord *co, int64_t id);
void fl__coord_pop_free(fl_coord *co, struct fl__coord_pop *p);
void fl__coord_round_free(fl_coord *co, struct fl__coord_round *r);
/* Abandons p's current round in storage and memory (lock held): wakes its pollers, and
 * keeps it as p->last so devices can read the outcome. */
void fl__coord_round_abandon(fl_coord *co, struct fl__coord_pop *p, const char *reason);
/* Abandons, each with its audit entry in one transaction, the population's stored rounds
 * that are still OPEN or RUNNING other than its live one: at start-up (reason NULL,
 * "coordinator restarted"; a failure is set on co->err) and when an abandonment could not
 * be written (reason given; retried by the ticker). */
fl_status fl__coord_abandon_unfinished(fl_coord *co, struct fl__coord_pop *p,
                                       const char *reason);
/* Moves p's current round to p->last (terminal state set by the caller), and the previous
 * p->last into p->older (trimmed; the oldest of FL__COORD_ROUNDS_KEPT is freed; a FedBuff
 * buffer is freed instead). Lock held. */
void fl__coord_round_retire(fl_coord *co, struct fl__coord_pop *p);

/* ---- HTTP layer ---- */

/* An immutable, reference-counted byte body shared between the coordinator's caches
 * (signed task bodies, the current model version) and the responses that send it, so a
 * download is queued without copying and without the coordinator lock held while it is
 * sent. */
struct fl__coord_blob {
    atomic_uint_fast32_t refs;     /* owners: caches and queued responses */
    size_t len;                    /* bytes in data */
    int64_t id;                    /* what it is: model version or round id */
    char sha_hex[65];              /* SHA-256 of data, lowercase hex */
    char sig_b64[96];              /* Flotilla-Signature over it (empty: unsigned) */
    uint8_t *data;                 /* the bytes (instance allocator; owned) */
    const fl_allocator *alloc;     /* the coordinator's allocator: frees data and the blob */
    size_t size;                   /* bytes allocated for data (len, or more) */
};

/* Wraps data (len bytes, 1 when len is 0, from co's allocator; ownership taken even on
 * failure) in a blob with one reference. */
struct fl__coord_blob *fl__coord_blob_wrap(fl_coord *co, uint8_t *data, size_t len);
struct fl__coord_blob *fl__coord_blob_ref(struct fl__coord_blob *b);
/* Drops a reference; frees the blob with the last one. NULL is a no-op. */
void fl__coord_blob_unref(struct fl__coord_blob *b);

/* Longest signed message (docs/protocol.md section 4.1): context, 0x00, u64le, SHA-256. */
#define FL__COORD_SIGNED_MAX 64

/* Builds the signed message for a body whose SHA-256 is known (cache.c). */
void fl__coord_signed_message_h(uint8_t out[FL__COORD_SIGNED_MAX], size_t *written,
                                const char *context, uint64_t id, const uint8_t sha256[32]);
/* Signs b (its id is the round id or model version) under context and records the
 * signature and SHA-256 hex in it. */
void fl__coord_blob_sign(fl_coord *co, struct fl__coord_blob *b, const char *context,
                         const uint8_t sha256[32]);

/* An answer being built by a handler. */
struct fl__coord_reply {
    int status;
    json_t *json;                  /* body as JSON (owned), or */
    const uint8_t *bytes;          /* a byte body (copied when queued), or */
    struct fl__coord_blob *blob;   /* a shared body (one reference owned; not copied) */
    size_t len;
    char *bytes_owned;             /* freed after queueing when set (instance allocator) */
    size_t owned_size;             /* bytes allocated for bytes_owned */
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
    bool body_tagged;              /* body_tag holds fl__coord_body_tag(body), computed while
                                      it arrived (update and secagg posts) */
    uint8_t body_tag[FL__COORD_BODY_TAG_BYTES];
    bool park;                     /* set by a handler that suspended the connection */
    int64_t wait_until;            /* monotonic ms end of a long poll; 0 = first call */
    struct fl__coord_waiter waiter;/* linked into co->waiters while parked */
};

/* Sets an error reply {"error":{status,code,message[,field][,retry_after_s]}}. Returns
 * status so handlers can `return fl__coord_error(...)`. */
int fl__coord_error(struct fl__coord_reply *rep, int status, const char *code,
                    const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 503 unavailable "out of memory" with Retry-After: 1 (a condition of the service, not a bug:
 * nothing was changed and the request can be repeated). Returns 503. */
int fl__coord_oom(struct fl__coord_reply *rep);
/* Sets a JSON reply (takes ownership of body). */
int fl__coord_json(struct fl__coord_reply *rep, int status, json_t *body);

/* Parses the body as a JSON object; on failure sets a 400 malformed_json reply and returns
 * NULL. */
json_t *fl__coord_parse_body(const struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* Sets a 200 reply that sends b (takes a new reference) with its signature headers. */
/* Releases what rep owns and resets it to an empty reply (no Retry-After). */
void fl__coord_reply_clear(fl_coord *co, struct fl__coord_reply *rep);
void fl__coord_reply_blob(struct fl__coord_reply *rep, struct fl__coord_blob *b,
                          const char *content_type);

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
int fl__coord_h_secagg_post(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_secagg_result(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_update(struct fl__coord_req *rq, struct fl__coord_reply *rep);
int fl__coord_h_status(struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* ---- client authentication (auth.c) ---- */

struct fl__coord_client_auth {
    char client_id[FL__COORD_CLIENT_ID_CHARS + 1];
    int64_t population_id;
};

/* Checks a client bearer token "flc_<16 hex>.<43 chars>": from the in-memory cache, or
 * against storage on a miss (taking the coordinator lock for it). Must be called WITHOUT
 * the coordinator lock. On failure sets a 401/503 reply and returns false; a revoked
 * client with its right token gets 401 token_revoked. */
bool fl__coord_auth_client(struct fl__coord_req *rq, struct fl__coord_reply *rep,
                           struct fl__coord_client_auth *out);
/* Check-in pacing (docs/protocol.md section 8): false (and a 429 reply) when the client
 * comes back earlier than 90% of the retry_after_s it was last given. */
bool fl__coord_pace_check(fl_coord *co, const char *client_id, int64_t now,
                          struct fl__coord_reply *rep);
/* Records the retry_after_s given to client_id at now (0 clears). */
void fl__coord_pace_set(fl_coord *co, const char *client_id, int64_t now, int retry_s);
fl_status fl__coord_auth_cache_create(fl_coord *co);
void fl__coord_auth_cache_destroy(fl_coord *co);
/* Forgets every cached client (after an erasure or a retention sweep deleted some), so the
 * next request of a deleted client is checked against storage (401). */
void fl__coord_auth_cache_clear(fl_coord *co);
/* Sets the revoked mark of client_id's cache entry, if it has one (after storage committed
 * the change). Call with the coordinator lock held: a cache miss reads storage and fills
 * its entry under that lock too, so it cannot put back a stale state. */
void fl__coord_auth_cache_set_revoked(fl_coord *co, const char *client_id, bool revoked);
/* POST /v1/admin/clients/{id}/revoke and .../reinstate (api.c). */
int fl__coord_h_client_revoke(struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* ---- rounds (round.c) ---- */

/* floor(B^2 + 1/2), B the l2_bound of fl_dp_central_info for clip = w * clip_norm: the norm
 * bound an honest device's encoder meets (docs/protocol.md section 5.1: ||q||^2 <= floor(B^2)
 * after conditional rounding), for plain updates and norm proofs alike; -1 on bad params. */
double fl__coord_norm_bound2(const struct fl__coord_round_params *rp, uint64_t w);

/* Body cap of a secagg post / update for round rid (takes the lock). */
size_t fl__coord_round_body_cap(fl_coord *co, const char *rid_text, const char *phase);
/* Fills r->rp for a new round of p from its config and model (lock held). Sets a reason
 * in why (why_len bytes) and returns an error when the round cannot be run. */
fl_status fl__coord_round_params_init(fl_coord *co, struct fl__coord_pop *p,
                                      struct fl__coord_round *r, char *why, size_t why_len);
/* Creates a forming round for p (lock held; api.c): parameters, budget check, storage
 * row. why says why a round cannot be created (logged). */
fl_status fl__coord_round_create(fl_coord *co, struct fl__coord_pop *p, int64_t now, char *why,
                                 size_t why_len);
/* Buffered populations (buffer.c): opens the next buffer (lock held), moving the in-flight
 * participations of prev (may be NULL) into it. */
fl_status fl__coord_buffer_open(fl_coord *co, struct fl__coord_pop *p, int64_t now,
                                struct fl__coord_round *prev);
/* Buffered: validates an update and folds it with its staleness weight; commits the buffer
 * when it holds K contributions. Returns the HTTP status (202 or an error set in rep). */
int fl__coord_buffer_fold(fl_coord *co, struct fl__coord_pop *p, struct fl__coord_round *r,
                          struct fl__coord_participant *pt, const uint8_t *b, size_t len,
                          struct fl__coord_reply *rep);
/* Bytes of the round header ("FLUP" || u32le 1 || u64le round id) before the words of a
 * plain update body (section 5.2). */
#define FL__COORD_UPDATE_HEADER_BYTES 16
/* Checks a plain update body (section 5.2): length, every word < 2^b, the weight in range,
 * and measures its norm against the bound (section 5.1). Returns 202 (w receives the
 * weight, scale 1.0 or the factor < 1 that clips it to the bound) or the error status set
 * in rep. */
int fl__coord_plain_validate(const struct fl__coord_round_params *rp, const uint8_t *b,
                             size_t len, struct fl__coord_reply *rep, uint64_t *w,
                             double *scale);
/* Centred value of coordinate i (< dim) of a validated plain update, clipped by scale. */
int64_t fl__coord_plain_value(const struct fl__coord_round_params *rp, const uint8_t *b,
                              size_t i, double scale);
/* FedBuff: sum[i] += the weighted value of coordinate i of a validated plain update, for
 * i < dim: v = fl__coord_plain_value(.., scale), then f v, or with trunc_weighted (central
 * DP) trunc(f v) when f < 1 (v when f = 1). */
void fl__coord_plain_accumulate(const struct fl__coord_round_params *rp, const uint8_t *b,
                                double scale, double f, bool trunc_weighted, double *sum);
/* Buffered: drops participations whose update deadline passed (lock held). */
void fl__coord_buffer_tick(fl_coord *co, struct fl__coord_pop *p, int64_t now);
/* Buffered: removes dropped participations that sent nothing, freeing their slots. */
void fl__coord_buffer_compact(struct fl__coord_round *r);
/* Starts a forming round (lock held): secagg server or accumulator, phase deadlines.
 * FL_OK: running. Otherwise the round was abandoned (p->round is NULL) and the code says
 * why: FL_ERR_STATE when secure aggregation cannot run with these clients, FL_ERR_NOMEM,
 * or the storage's code when its start could not be written. */
fl_status fl__coord_round_run(fl_coord *co, struct fl__coord_pop *p, int64_t now);
/* Phase deadlines and early closes (lock held). */
void fl__coord_round_tick(fl_coord *co, struct fl__coord_pop *p, int64_t now);
/* Wakes pollers of round_id waiting for phase (or any phase when phase < 0). Lock held. */
void fl__coord_waiters_wake(fl_coord *co, int64_t round_id, int phase);
/* Answers timed-out polls (lock held). */
void fl__coord_waiters_expire(fl_coord *co, int64_t now_mono);
/* The participant of r with client_id, or NULL: O(1) through r->pidx in synchronous
 * rounds, a scan in buffered ones. */
struct fl__coord_participant *fl__coord_round_find(const struct fl__coord_round *r,
                                                   const char *client_id);
/* Appends a participant slot for client_id to r (r->n < r->cap) and indexes it. */
struct fl__coord_participant *fl__coord_round_add(struct fl__coord_round *r,
                                                  const char *client_id);
/* Allocates r->pidx for r->cap participants (synchronous rounds). */
fl_status fl__coord_round_index_init(fl_coord *co, struct fl__coord_round *r);
/* Finds the round of p with id rid: the current one or one of the finished ones kept
 * (p->last, p->older). */
struct fl__coord_round *fl__coord_round_lookup(struct fl__coord_pop *p, int64_t rid);
/* Erasure: removes client_id from the finished rounds kept in memory (p->last, p->older)
 * of every population: its id, participation id, message hashes, device id and phase
 * results are wiped; what it posted stays in the rounds' counts. Lock held. */
void fl__coord_rounds_forget_client(fl_coord *co, const char *client_id);
/* The participant of round_id that the request's Idempotency-Key names (lock held). */
struct fl__coord_participant *fl__coord_participant_of(struct fl__coord_req *rq,
                                                      struct fl__coord_reply *rep,
                                                      const struct fl__coord_client_auth *ca,
                                                      int64_t rid,
                                                      struct fl__coord_pop **pop_out,
                                                      struct fl__coord_round **round_out);
/* The status poll of round rid when it is not in memory (after a restart, or older than
 * the finished rounds kept; docs/protocol.md 5.3), answered from storage (api.c). Called
 * with the lock held and rep holding fl__coord_participant_of's 410; key is the request's
 * Idempotency-Key. A terminal round of the caller's synchronous population that records
 * the caller as selected, completed or dropped replaces it with 200 and the outcome, if
 * key matches the row's participation hash (rows without one: any key); a started round
 * without the caller, or a key that does not match, 403 not_a_participant; a storage
 * failure, 503 (or 500). Anything else (no such round, another population's, not ended, a
 * FedBuff population's, an unrecorded caller of a round that never started or ended before
 * the retention window) leaves the 410. Returns rep->status. */
int fl__coord_status_stored(fl_coord *co, struct fl__coord_reply *rep,
                            const struct fl__coord_client_auth *ca, int64_t rid,
                            const char *key);

/* ---- signed body caches (cache.c) ---- */

/* A new reference to the signed bytes of p's model version (lock held): from the cache,
 * else read from storage (and cached when it is the current version). Returns FL_OK;
 * FL_ERR_NOT_FOUND (no such version of p); storage's codes; FL_ERR_NOMEM. */
fl_status fl__coord_model_blob(fl_coord *co, struct fl__coord_pop *p, int64_t version,
                               struct fl__coord_blob **out);
/* Caches bytes (malloc'ed, ownership taken) as p's model version with that SHA-256 hex,
 * signed; replaces the previous entry. Lock held. */
void fl__coord_model_cache_set(fl_coord *co, struct fl__coord_pop *p, uint8_t *bytes,
                               size_t len, int64_t version, const char *sha256_hex);

/* ---- aggregation and commit (aggregate.c) ---- */

/* Budget check for a new round of p (lock held). FL_OK: allowed; FL_ERR_BUDGET: refused,
 * why says so; other codes: storage/dp failure. */
fl_status fl__coord_budget_check(fl_coord *co, struct fl__coord_pop *p,
                                 const struct fl__coord_round *r, char *why, size_t why_len);
/* Decodes the final sum (vec_len words mod 2^b of count clients), adds central noise,
 * applies the strategy and commits model + round + ledger in one transaction. Sets the
 * round COMPLETED (or ABANDONED with a reason) and retires it. Called with the lock held;
 * for synchronous rounds it releases the lock around decode, strategy and serialisation
 * (r->phase is FL__PH_DONE and r->aggregating set, so requests see "aggregating" and
 * nothing retires the round), and takes it again to commit. sum must stay valid (the
 * round's accumulator or the caller's buffer). */
void fl__coord_round_aggregate(fl_coord *co, struct fl__coord_pop *p, const uint64_t *sum,
                               uint32_t count);
/* Recomputes p->epsilon_spent from the population's ledger (startup, after DP commits). */
void fl__coord_epsilon_refresh(fl_coord *co, struct fl__coord_pop *p);
/* Loads the population's optimiser state from the registry (startup). */
void fl__coord_opt_load(fl_coord *co, struct fl__coord_pop *p);
/* Frees a round's parameters. */
void fl__coord_round_params_free(fl_coord *co, struct fl__coord_round_params *rp);

/* Starts/stops the MHD daemon (http.c). */
fl_status fl__coord_http_start(fl_coord *co);
/* Stops accepting connections (the listening socket is closed; requests in flight go on). */
void fl__coord_http_quiesce(fl_coord *co);
void fl__coord_http_stop(fl_coord *co);
/* Connections closed before their request was complete so far: a request past its
 * deadline (answered 408 first where possible), a client that sent EOF before its request
 * was complete (0 and 0 without a running daemon). */
void fl__coord_http_closed(const fl_coord *co, uint64_t *deadline, uint64_t *eof);

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
/* Starts p's forming round once it is full (lock held); FL_OK when nothing was started,
 * else what fl__coord_round_run returned. */
fl_status fl__coord_round_maybe_start(fl_coord *co, struct fl__coord_pop *p, int64_t now);

/* Fuzzing entry points: run a body validator on raw bytes and return the HTTP status
 * (200 = valid). */
int fl__coord_fuzz_checkin(const uint8_t *b, size_t n);
int fl__coord_fuzz_population(const uint8_t *b, size_t n);

/* ---- audit log (audit.c) ---- */

/* Sets the origin, pseudonym key and retention from cfg (seed: the signing seed, for the
 * derived pseudonym key). Returns FL_OK or FL_ERR_MISUSE (bad origin; message in errmsg). */
fl_status fl__coord_audit_setup(fl_coord *co, const fl_coord_config *cfg, const uint8_t seed[32],
                                char *errmsg, size_t errmsg_len);
/* Signs a checkpoint of the log as it is now (lock held, no transaction open). Failures are
 * logged. */
void fl__coord_audit_checkpoint(fl_coord *co);
/* Appends the "round" entry of p's round r (COMPLETED with count clients in the sum, or
 * ABANDONED) in the caller's transaction (lock held). */
fl_status fl__coord_audit_round(fl_coord *co, struct fl__coord_pop *p,
                                const struct fl__coord_round *r, uint32_t count);
/* Records an ending round's counts (selected, dropped by phase) before it is abandoned, as
 * its audit entry will state them (in the caller's transaction). */
fl_status fl__coord_audit_abandon_counts(fl_coord *co, const struct fl__coord_round *r);
/* Abandons a round whose in-memory state is gone (a previous process left it open:
 * reason NULL = "coordinator restarted", dropped count cleared; or an abandonment this
 * process could not write, retried with its reason) and appends its "round" entry, in the
 * caller's transaction: counts as stored, no secagg figures. */
fl_status fl__coord_audit_restart_abandon(fl_coord *co, struct fl__coord_pop *p,
                                          int64_t round_id, const char *reason);
/* Epsilon of p's ledger at delta through dp's RDP accountant (0 without entries). */
fl_status fl__coord_ledger_epsilon(fl_coord *co, const struct fl__coord_pop *p, double delta,
                                   double *eps);
/* Retention sweep when due (lock held). */
void fl__coord_audit_tick(fl_coord *co, int64_t now);
/* Handlers of the audit endpoints. */
int fl__coord_h_audit(struct fl__coord_req *rq, struct fl__coord_reply *rep);

/* ---- utilities (util.c) ---- */

void fl__coord_sha256(uint8_t out[32], const void *data, size_t len);
/* The participation hash storage records for participation id pid (docs/protocol.md 6):
 * SHA-256("flotilla/participation-id/v1" NUL || the 32 hex characters of pid). Returns out,
 * or NULL (out untouched) when pid is NULL or not FL__COORD_PID_CHARS long (a tombstone's
 * empty id, a malformed key): a NULL hash is stored as none, and matches no stored one. */
const uint8_t *fl__coord_pid_hash(uint8_t out[32], const char *pid);
/* Tag of a posted body (update or secagg message) for idempotent retries: Poly1305 under
 * the process's random key co->body_mac_key, through OpenSSL (mac; its AVX-512 code is ~7x
 * SHA-256 with SHA-NI here) or libsodium (mac NULL), which give the same tag. Equal tags
 * mean equal bodies except with probability ~2^-85 for 4 MB bodies, as long as the tags
 * stay in the process (they are never sent or stored: a universal hash, not a MAC the
 * device could test its guesses against). */
void fl__coord_poly1305(const struct evp_mac_st *mac, const uint8_t key[32],
                        uint8_t out[FL__COORD_BODY_TAG_BYTES], const void *data, size_t len);
void fl__coord_body_tag(const fl_coord *co, uint8_t out[FL__COORD_BODY_TAG_BYTES],
                        const void *data, size_t len);
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
/* j as JSON text (NUL-terminated) from the instance allocator, or NULL. Not json_dumps:
 * Jansson 2.14 ignores an allocation failure while it writes an object key, so under memory
 * pressure json_dumps can return JSON with a key missing; json_dumpb into a buffer of the
 * measured size allocates nothing while it writes. Free with fl__coord_text_free. */
char *fl__coord_json_dumps(fl_coord *co, const json_t *j, size_t flags);
void fl__coord_text_free(fl_coord *co, char *s);

#endif /* FLOTILLA_COORD_INTERNAL_H */
