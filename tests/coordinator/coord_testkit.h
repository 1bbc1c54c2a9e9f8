#ifndef FL_COORD_TESTKIT_H
#define FL_COORD_TESTKIT_H
/* Shared code of the coordinator tests (coord_testkit.c, linked into every test here):
 *
 * - a fixture that runs the coordinator in-process on an ephemeral 127.0.0.1 port with a
 *   temporary SQLite file, an injected clock the test moves and a ticker thread, or as the
 *   real `flotilla-coordinator serve` executable in a child process (for kill -9 tests);
 * - libcurl helpers;
 * - stand-in devices: the secagg CLIENT state machine and the dp encoders play the SDK's
 *   part of docs/protocol.md (enrol, check in, fetch the signed task, encode, mask, post
 *   every phase, poll the results). */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <jansson.h>

#include "fl_test.h"
#include "fl_test_time.h" /* FL_TEST_TIME_SCALE: every wait of these helpers */
#include "flotilla/coordinator.h"
#include "flotilla/storage.h" /* the audit bundle verifier */

#define ADMIN_TOKEN "fla_test-admin-token-0123456789abcdef"

#define D 24          /* floats in the update tensor "w" of the test model */
#define NMAX 16       /* most devices in one test round */

/* ---- fixture ---- */

struct fx {
    char dir[64];
    char db[128];
    fl_coord *co;             /* in-process coordinator, or NULL with a child process */
    unsigned port;
    _Atomic int64_t now_ms;   /* injected clock (in-process only) */
    pthread_t ticker;
    atomic_bool stop_ticker;
    bool ticking;
    pid_t child;              /* flotilla-coordinator serve, or 0 */
    char log[160];            /* the child's stderr */
    char conf[160];           /* the child's config file */
    unsigned unmask_threads;  /* fx_start: config secagg_unmask_threads (0 = default) */
};

/* In-process coordinator: fx_setup/fx_teardown are cmocka setup/teardown functions. */
int fx_setup(void **state);
int fx_teardown(void **state);
void fx_start(struct fx *f);
/* The coordinator config every fixture starts from: defaults, an ephemeral port, 2 threads,
 * the fixture's database and the test admin token. */
void fx_config_init(struct fx *f, fl_coord_config *cfg);
void fx_stop(struct fx *f);
/* Moves the injected clock and runs the timers once. */
void fx_advance(struct fx *f, int64_t ms);

/* Child process: writes a config (port 0, the fixture's database, the test admin token, a
 * fixed signing key file) and starts `exe serve --config`; waits until it logged its port
 * and /readyz answers 200. */
void fx_proc_start(struct fx *f, const char *exe);
/* Sends sig to the child and reaps it; returns the wait status. */
int fx_proc_signal(struct fx *f, int sig);
/* A temp directory and database path only (no coordinator). */
struct fx *fx_new(void);
/* Removes the temp files; stops what is still running. */
void fx_free(struct fx *f);

/* ---- HTTP ---- */

struct resp {
    long status;
    char *body;
    size_t len;
    char headers[4096];
    size_t hlen;
};

/* One request; pid (may be NULL) goes in Idempotency-Key. Thread-safe (own handle). */
/* Sets every option of one request on c (URL, auth/content-type/idempotency headers, body,
 * response capture into r, no proxy, no signals) and returns the header list, which the caller
 * frees after curl_easy_perform. */
struct curl_slist *http_prepare(struct fx *f, CURL *c, const char *method, const char *path,
                                const char *token, const char *content_type, const void *body,
                                size_t len, const char *pid, struct resp *r);
struct resp http_req(struct fx *f, const char *method, const char *path, const char *token,
                     const char *content_type, const void *body, size_t len, const char *pid);
struct resp http_json(struct fx *f, const char *method, const char *path, const char *token,
                      const char *json);
/* Value of header name (case-insensitive) copied into buf (n bytes), or NULL. */
const char *header_in(const struct resp *r, const char *name, char *buf, size_t n);
void resp_free(struct resp *r);
json_t *body_json(const struct resp *r);
/* GET /v1/admin/rounds/{rid} (asserting 200): the round's JSON (json_decref it). */
json_t *admin_round(struct fx *f, int64_t rid);
/* Asserts an error body with status and code. */
void assert_error(const struct resp *r, long status, const char *code);

/* First column of the first row of a query on the fixture's database (-1: no row). */
int64_t db_int(struct fx *f, const char *q);
/* Runs sql on the fixture's database over a second connection (read-write, 5 s busy timeout,
 * as an operator's tool would); returns SQLite's primary result code (a failure also prints
 * the statement and SQLite's message). */
int db_exec_rc(struct fx *f, const char *sql);
/* db_exec_rc, asserting SQLITE_OK. */
void db_exec(struct fx *f, const char *sql);
/* Value of one series in GET /metrics: its name with labels, e.g.
 * "flotilla_auth_cache_total{result=\"hit\"}" (asserts that it is there). */
double metric_value(struct fx *f, const char *series);

/* ---- audit log ---- */

/* The verifier key (fl_store_audit_vkey text) the in-process coordinator must sign its audit
 * log under: origin "flotilla-coordinator/<key id>" and its public key; into vkey (n bytes). */
void audit_vkey_expected(struct fx *f, char *vkey, size_t n);
/* GET /v1/admin/audit/bundle with the admin token into *r (asserting 200), and verifies the
 * bundle in memory with storage's offline verifier under audit_vkey_expected (asserting
 * FL_OK and a good verdict; the failure names the verdict's message). Returns the open bundle
 * for the caller's own checks (fl_store_audit_bundle_close it); the caller frees *r. */
fl_store_audit_bundle *audit_bundle_verified(struct fx *f, struct resp *r);
/* The entry of the one round of population pop (NULL: any) with id rid (0: any) in the
 * verified audit bundle (audit_bundle_verified), asserting there is exactly one (json_decref
 * it). With never (NULL: none), also asserts that no entry holds that text anywhere. */
json_t *audit_round_find(struct fx *f, const char *pop, int64_t rid, const char *never);

/* ---- the coordinator's aggregate hook ---- */

/* Test-only hook of the coordinator (coord_internal.h, linked from the static library): fn
 * gets each round's decoded plain sum (vec_len words), its device count and the averaged
 * delta (dim floats), on the aggregating thread. NULL fn removes it. */
typedef void (*debug_sum_fn)(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                             uint32_t count, const float *delta, size_t dim);
void fl__coord_debug_hook_set(fl_coord *co, debug_sum_fn fn, void *user);
/* Test-only hook: fn runs when a secure round's unmasking is about to start, with the
 * coordinator lock released. NULL fn removes it. */
typedef void (*debug_unmask_fn)(void *user, int64_t round_id);
void fl__coord_debug_unmask_hook_set(fl_coord *co, debug_unmask_fn fn, void *user);

/* What sum_hook_capture keeps of the last aggregate. */
struct sum_hook {
    int calls;               /* aggregates seen */
    int64_t round_id;        /* the last one's round */
    uint64_t sum[1024];      /* its unmasked sum, the first vec_len words */
    size_t vec_len;          /* words kept in sum (at most 1024) */
    uint32_t count;          /* devices in the sum */
    float delta[D];          /* the decoded model delta, the first D floats */
};
/* debug_sum_fn recording into the struct sum_hook at user. */
void sum_hook_capture(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                      uint32_t count, const float *delta, size_t dim);

/* ---- stand-in devices ---- */

enum { DROP_NONE = 0, DROP_ADVERTISE = 1, DROP_SHARE = 2, DROP_MASKED = 3, DROP_UNMASK = 5 };

/* A population as setup_population creates it. Fill it with designated initialisers
 * ({.name = "x", .target = 3, ...}): a field left out is 0/NULL (the default), so fields can
 * be added at the end without touching the tests. */
struct popcfg {
    const char *name;
    int target, min;
    bool secagg;
    int neighbors;
    const char *mode;        /* none, central, distributed */
    const char *weighting;   /* uniform, examples */
    const char *strategy;
    double budget;
    int bits;
    const char *strategy_extra; /* more "strategy" fields, e.g. "\"buffer_size\":3", or NULL */
};

/* Base value of coordinate j of the test model's tensor "w". */
float base_w(int j);
/* Model: "w" (D floats, the update tensor) and "b" (2 floats, not updated); malloc'ed. */
uint8_t *make_model(size_t *len);
/* Safetensors bytes of a model with "w" (n floats) and "b" (2 floats); malloc'ed. */
uint8_t *model_wb(const float *w, size_t n, const float b[2], size_t *len);
/* Uploads model (len bytes) as population name's model (asserting 201) and starts the
 * population (asserting 200). */
void pop_model_start(struct fx *f, const char *name, const uint8_t *model, size_t len);
/* Creates the population, uploads the model, starts it and enrols n devices (tokens are
 * strdup'ed into tokens). */
void setup_population(struct fx *f, const struct popcfg *pc, char **tokens, int n);

/* Selection fields setup_population leaves at its defaults (a struct of its own, passed to
 * the _sel variants; it dates from when popcfg was still filled positionally). 0 = not
 * given: the default is sent. */
struct popsel {
    int min_retry_s;         /* selection.min_retry_s, s (default 1) */
    int max_retry_s;         /* selection.max_retry_s, s (default 60) */
    bool norm_proof;         /* secagg.norm_proof (default false) */
    bool reveal_seeds;       /* secagg.reveal_pair_seeds (default false) */
    double clip_norm;        /* privacy.clip_norm (0: 1.0) */
    double granularity;      /* privacy.granularity (0: the coordinator's default) */
    double dropout_rate;     /* secagg.dropout_rate (0: not sent) */
};

/* setup_population with the selection fields of sel (NULL: all defaults, the same request
 * as setup_population). */
void setup_population_sel(struct fx *f, const struct popcfg *pc, const struct popsel *sel,
                          char **tokens, int n);

/* What a device reads from the signed task. */
struct task {
    int64_t rid;
    bool secagg;
    uint32_t index, n, k, t, bits;
    size_t vec_len, dim;
    int mode;                /* 0 none, 1 central, 2 distributed */
    double clip, gran, beta;
    uint64_t s2n, s2d;
    uint32_t nmin;
    uint8_t rot_seed[32];
    int64_t dl[5];           /* phase deadlines, Unix ms */
    int64_t model_version;   /* model.version */
    char kind[16];           /* sync or buffered */
    uint32_t norm_bits, norm_dim; /* secagg.norm_proof (0: none) */
    uint64_t norm_bound2;
    uint32_t norm_weight_max;
    bool reveal_seeds;       /* secagg.reveal_pair_seeds */
    uint8_t session_id[32];  /* secagg.session_id */
    uint8_t model_sha[32];   /* model.sha256 */
};

void parse_task(const struct resp *r, struct task *t);

/* The secagg context a device derives from its task (docs/protocol.md 5.5). */
void task_secagg_context(const struct task *t, uint8_t out[32]);

/* One stand-in device. */
struct tc {
    char *tok;
    char pid[40];
    struct task task;
    struct fl_secagg_client *sa;
    uint64_t words[1024];    /* the device's encoded vector (vec_len) */
    float delta[D];          /* its true update */
    int drop;
    int weight;
};

/* setup_population, then c[0..n) zeroed and given the n enrolment tokens (c[i].tok; freed
 * with the devices, e.g. clients_free). */
void setup_devices(struct fx *f, const struct popcfg *pc, struct tc *c, int n);
/* The same with the selection extras of setup_population_sel (sel may be NULL). */
void setup_devices_sel(struct fx *f, const struct popcfg *pc, const struct popsel *sel,
                       struct tc *c, int n);
/* Device-side encoding of docs/protocol.md section 5.1 of device i's fixed delta. */
void encode(struct tc *c, int i);
/* Checks in n devices, asserting each is selected; *rid receives the round. */
void checkin_all(struct fx *f, struct tc *c, int n, int64_t *rid);
/* Fetches and parses every device's task and encodes its update. */
void fetch_tasks(struct fx *f, struct tc *c, int n, int64_t rid);
struct resp post_phase(struct fx *f, struct tc *c, int64_t rid, const char *phase,
                       const uint8_t *msg, size_t len);
struct resp get_result(struct fx *f, struct tc *c, int64_t rid, const char *phase, int wait);
/* Creates each device's secagg client and its advertise message (out/out_len). */
void secagg_clients_start(struct tc *c, int n, int64_t rid, const uint8_t **out,
                          size_t *out_len);
/* Posts phase `phase` for every device, then fetches and handles every result. */
void secagg_phase_all(struct fx *f, struct tc *c, int n, int64_t rid, const char *phase,
                      const uint8_t **out, size_t *out_len);
/* Posts the unmask message of each of c[0..n) (asserting 202) and returns the round's
 * outcome as device 0 reads it (asserting 200; the caller frees it). */
json_t *secagg_unmask_all(struct fx *f, struct tc *c, int n, int64_t rid, const uint8_t **out,
                          size_t *out_len);
void secagg_clients_free(struct tc *c, int n);
/* Runs the secagg phases for c[0..n) with their drop points. Returns the round's outcome
 * JSON (caller frees) as read by the first device that finishes, or NULL. */
json_t *run_secagg(struct fx *f, struct tc *c, int n, int64_t rid);
/* GET /v1/rounds/{rid}/status as device c. */
json_t *round_status(struct fx *f, struct tc *c, int64_t rid);
/* Downloads model version v of pop (signature header required); "w" (D) and "b" (2). */
void fetch_model(struct fx *f, struct tc *c, const char *pop, int64_t v, float *w, float *b);
/* The exact model the coordinator must produce from the plain sum of the devices that are
 * in the sum (drop NONE or UNMASK) with FedAvg, server_lr 1, no DP, uniform weighting. */
void expected_fedavg(const struct tc *c, int n, const float *base, float *w_out);
void clients_free(struct tc *c, int n);

/* ---- added helpers ---- */

/* Body of POST /v1/rounds/{rid}/update (docs/protocol.md 5.1): the "FLUP" header (version
 * 1, round id), then the L words of wb bytes each, little-endian. Returns its length. */
size_t plain_update_body(uint8_t *out, int64_t rid, const uint64_t *words, size_t L, size_t wb);
/* Posts the encoded update of each of c[0..n) (c[i].words, c[i].task.vec_len words of 4
 * bytes) to round rid as that device, asserting 202 (a refusal prints its body first). */
void post_updates(struct fx *f, struct tc *c, int n, int64_t rid);

#endif /* FL_COORD_TESTKIT_H */
