#ifndef FL_SDK_FIXTURE_H
#define FL_SDK_FIXTURE_H
/* Shared code of the SDK's round tests: the REAL coordinator (fl_coord) started in-process
 * on 127.0.0.1:0 with a temporary SQLite database, an injected clock and a ticker thread;
 * admin calls over libcurl; and devices = real SDK clients on the libcurl transport, each
 * wrapped by examples/flotilla-sim's fault transport (capture, lost requests/responses,
 * tampering, offline). Nothing stands in for a component: faults happen on the wire. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fl_test.h"
#include "flotilla/client.h"
#include "flotilla/coordinator.h"
#include "sim_transport.h"

#define SFX_ADMIN "fla_client-sdk-test-admin-token-0123456789"
#define SFX_MAX_DEV 16
#define SFX_MAX_VEC 4096

/* Test-only hooks (internal, reached through the static libraries). */
typedef void (*sfx_sum_fn)(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                           uint32_t count, const float *delta, size_t dim);
void fl__coord_debug_hook_set(fl_coord *co, sfx_sum_fn fn, void *user);
typedef void (*sfx_update_fn)(void *user, int64_t round_id, const float *delta, size_t d,
                              const void *words, size_t len, size_t word_bytes);
void fl__client_debug_update_hook_set(fl_client *c, sfx_update_fn fn, void *user);

/* What the coordinator's hook saw for the last aggregated round. */
struct sfx_sum {
    int calls;
    int64_t round_id;
    uint64_t sum[SFX_MAX_VEC];
    size_t vec_len;
    uint32_t count;
    float delta[SFX_MAX_VEC];
    size_t dim;
};

struct sfx {
    char dir[64], db[128], base_url[64];
    fl_coord *co;
    unsigned port;
    uint8_t pk[32];            /* the coordinator's public key (pinned by devices) */
    bool real_clock;           /* clock = CLOCK_REALTIME + offset, else a frozen value */
    _Atomic int64_t now_ms;    /* injected clock (frozen mode) */
    _Atomic int64_t offset_ms; /* added to real time (real-clock mode) */
    pthread_t ticker;
    atomic_bool stop;
    pthread_mutex_t lock;      /* guards sum */
    struct sfx_sum sum;
};

/* Starts the coordinator (threads 4, per-IP limit off). */
struct sfx *sfx_start(bool real_clock);
void sfx_stop(struct sfx *f);
int64_t sfx_clock(void *user);      /* the shared clock (user = struct sfx *) */
void sfx_advance(struct sfx *f, int64_t ms);

/* Admin call over libcurl; returns the HTTP status and the body in out (cap bytes). */
long sfx_admin(struct sfx *f, const char *method, const char *path, const char *ctype,
               const void *body, size_t len, char *out, size_t cap);
/* Creates a population from JSON, uploads model, starts it; etok receives the enrollment
 * token (cap bytes). */
void sfx_population(struct sfx *f, const char *json, const uint8_t *model, size_t mlen,
                    char *etok, size_t cap);
/* GET a device endpoint with a client token (model downloads); status, body malloc'ed. */
long sfx_get(struct sfx *f, const char *path, const char *token, uint8_t **body, size_t *len);

/* The MLP the tests train: IN -> HID -> CLASSES (fc1, fc2), malloc'ed safetensors. */
#define SFX_IN 12
#define SFX_HID 8
#define SFX_CLASSES 3
uint8_t *sfx_model(size_t *len);
/* Example i of device k: distinctive features (for the capture test) and a label. */
void sfx_example(float *x, int32_t *y, int k, int i);

/* Everything one device saw of its own update (the SDK's update observer). */
struct sfx_update {
    int calls;
    int64_t round_id;
    size_t d, len, wb;
    float delta[SFX_MAX_VEC];
    uint64_t words[SFX_MAX_VEC];
};

struct sdev {
    int k;
    fl_client_store *store;
    fl_client_curl *curl;
    sim_ft *ft;
    fl_client *c;
    bool off;                  /* the driver does not step it (vanished) */
    int max_rounds;            /* the driver stops stepping it after this many rounds ended
                                  (completed or given up); 0 = no limit */
    struct sfx_update up;
    int blas_warnings;         /* WARN lines naming OPENBLAS_CORETYPE */
};

/* A device identity for secagg's active mode (fl_client_config.secagg_*). */
struct sdev_identity {
    uint8_t signing_key[64];   /* the device's Ed25519 key (fl_client_identity_keygen) */
    uint8_t device_id[32];
    uint8_t cert[64];          /* the authority's v2 certificate */
    uint8_t authority_key[32]; /* the authority's verification key, pinned */
};

struct sdev_opts {
    const char *population;
    const char *etok;          /* enrollment token */
    const char *client_token;  /* instead of enrolling */
    int n_examples;
    uint32_t long_poll_s;      /* 0 = answers at once (stepped tests) */
    const fl_allocator *alloc; /* NULL = libc */
    const uint8_t *pinned;     /* NULL = the coordinator's key */
    int64_t retry_timeout_ms;  /* fl_client_config.retry_timeout_ms; 0 = the SDK's default
                                  (retry_timeout_none for 0 itself) */
    bool retry_timeout_none;   /* retry_timeout_ms = 0: no limit */
    /* Called with the client's transport (the fault wrapper) before the client is
     * created, to put a transport of the test's own in front of it; NULL = none. */
    void (*wrap)(fl_client_transport *t, void *user);
    void *wrap_user;
};

/* Opens a device: store with n_examples examples, curl transport, fault wrapper, client.
 * Returns the client's create status (FL_OK, or FL_ERR_NOMEM in OOM walks). */
fl_status sdev_open(struct sdev *d, struct sfx *f, int k, const struct sdev_opts *o);
/* The same with a device identity (NULL = none) in the client's config. */
fl_status sdev_open_identity(struct sdev *d, struct sfx *f, int k, const struct sdev_opts *o,
                             const struct sdev_identity *identity);
void sdev_close(struct sdev *d);
void sdev_stats(const struct sdev *d, fl_client_stats *cs);

/* Steps every device that is not off, round robin, one step each per pass; between passes
 * the frozen clock moves to the earliest due time, at least step_ms. Stops when done(user)
 * is true or after max_passes. Returns the passes used. */
int sdev_drive(struct sfx *f, struct sdev *d, int n, bool (*done)(void *), void *user,
               int max_passes, int64_t step_ms);
/* done() helpers: the coordinator aggregated a round / every device went back to idle
 * after a round ended. */
bool sfx_aggregated(void *f);
/* Whether every device of d[0..n) that is not off is idle with a round ended (completed or
 * failed); a done() helper over it adds sfx_aggregated. */
bool sdev_all_idle(const struct sdev *d, int n);
/* Drives one round of d[0..n) to its end. With vanish_phase, the last device loses the
 * network for good before it POSTs to a path containing it (e.g. "/secagg/masked").
 * in[i] (n) receives whether device i must be in the sum. Drives until the coordinator
 * aggregated (asserting within 800 passes; each device's errmsg is printed if not), then,
 * with the vanished device off so the others read the outcome, until sfx_aggregated and
 * sdev_all_idle (asserting within 400 passes). */
void sdev_round_vanish(struct sfx *f, struct sdev *d, int n, const char *vanish_phase,
                       bool *in);
/* Asserts that the coordinator aggregated one round whose sum is, bit for bit and mod 2^32,
 * the sum of the words each device in (in[i]) of d[0..n) saw of its own update in that
 * round, with their count and vec_len; with uniform_weights, also that the last word (the
 * weights' sum) is that count. */
void sfx_check_sum(struct sfx *f, const struct sdev *d, int n, const bool *in,
                   bool uniform_weights);

/* ---- secagg's active mode ---- */

/* A population of the MLP in active mode (JSON into out, cap bytes): target and min, every
 * phase deadline dl seconds, secagg.consistency_check with authority key auth_vk (extra:
 * more secagg fields after it, e.g. ",\"norm_proof\":true", or NULL). */
void sfx_active_pop_json(char *out, size_t cap, const char *name, int target, int min,
                         const uint8_t auth_vk[32], int dl, const char *extra);
/* A device identity: a fresh key pair, device id `device_id` (a string, zero padded),
 * certified by the authority with signing key auth_sk; the app pins `pinned`. */
void sdev_identity_make(struct sdev_identity *id, const uint8_t auth_sk[64],
                        const uint8_t pinned[32], const char *device_id);

#endif /* FL_SDK_FIXTURE_H */
