/* The client: configuration, the protocol state machine of docs/protocol.md (enroll,
 * check-in, task, model, local training, secure aggregation or plain upload, outcome),
 * scheduling (pace steering, backoff with jitter, resumption) and the response sink the
 * transport fills. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_round.h"
#include "flotilla/secagg.h"

#define UA_MAX 96
#define HDR_MAX 6
#define HDR_LEN 320
#define RESP_HDR_MAX 128

/* The device identity's sizes are the secagg library's (client.h cannot include secagg.h). */
_Static_assert(FL_CLIENT_SIGNING_KEY_BYTES == FL_SECAGG_SIGNING_KEY_BYTES, "signing key size");
_Static_assert(FL_CLIENT_DEVICE_ID_BYTES == FL_SECAGG_DEVICE_ID_BYTES, "device id size");
_Static_assert(FL_CLIENT_CERT_BYTES == FL_SECAGG_CERT_BYTES, "certificate size");
_Static_assert(FL_CLIENT_PUBLIC_KEY_BYTES == FL_SECAGG_VERIFY_KEY_BYTES, "verify key size");

/* ---- response sink ---- */

struct fl_client_response {
    const fl_allocator *alloc;   /* the client's allocator, or &own for a standalone one */
    fl_allocator own;            /* allocator of a standalone response (response_create) */
    int status;                  /* HTTP status, 0 = none yet */
    uint8_t *body;               /* received body, cap bytes allocated */
    size_t len, cap;             /* bytes used / allocated */
    size_t limit;                /* largest body accepted for this request */
    char retry_after[16];        /* Retry-After (seconds) */
    char sha256[72];             /* Flotilla-Content-SHA256 */
    char signature[100];         /* Flotilla-Signature */
    char key_id[24];             /* Flotilla-Key-Id */
    char content_type[RESP_HDR_MAX]; /* Content-Type */
    int bad_header;              /* a kept header did not fit */
};

fl_status fl_client_response_set_status(fl_client_response *r, int status) {
    if (!r || status < 100 || status > 599)
        return FL_ERR_MISUSE;
    r->status = status;
    return FL_OK;
}

static int hname_eq(const char *a, size_t n, const char *b) {
    if (strlen(b) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (char)(y - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return 1;
}

fl_status fl_client_response_add_header(fl_client_response *r, const char *name, size_t name_len,
                                        const char *value, size_t value_len) {
    if (!r || !name || (!value && value_len))
        return FL_ERR_MISUSE;
    if (value_len > 1024)
        return FL_ERR_TOO_LARGE;
    /* Trim surrounding blanks of the value. */
    while (value_len && (value[0] == ' ' || value[0] == '\t'))
        value++, value_len--;
    while (value_len && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t' ||
                         value[value_len - 1] == '\r' || value[value_len - 1] == '\n'))
        value_len--;
    char *dst = NULL;
    size_t cap = 0;
    if (hname_eq(name, name_len, "retry-after"))
        dst = r->retry_after, cap = sizeof(r->retry_after);
    else if (hname_eq(name, name_len, "flotilla-content-sha256"))
        dst = r->sha256, cap = sizeof(r->sha256);
    else if (hname_eq(name, name_len, "flotilla-signature"))
        dst = r->signature, cap = sizeof(r->signature);
    else if (hname_eq(name, name_len, "flotilla-key-id"))
        dst = r->key_id, cap = sizeof(r->key_id);
    else if (hname_eq(name, name_len, "content-type"))
        dst = r->content_type, cap = sizeof(r->content_type);
    if (!dst)
        return FL_OK;
    if (value_len >= cap) {
        r->bad_header = 1;
        dst[0] = '\0';
        return FL_OK;
    }
    for (size_t i = 0; i < value_len; i++)
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f) {
            r->bad_header = 1;
            dst[0] = '\0';
            return FL_OK;
        }
    memcpy(dst, value, value_len);
    dst[value_len] = '\0';
    return FL_OK;
}

fl_status fl_client_response_append(fl_client_response *r, const void *data, size_t len) {
    if (!r || (!data && len))
        return FL_ERR_MISUSE;
    if (len == 0)
        return FL_OK;
    if (len > r->limit || r->len > r->limit - len)
        return FL_ERR_TOO_LARGE;
    if (r->len + len > r->cap) {
        size_t nc = r->cap ? r->cap : 4096;
        while (nc < r->len + len)
            nc = nc > r->limit / 2 ? r->limit : nc * 2;
        uint8_t *nb = fl__realloc(r->alloc, r->body, r->cap, nc);
        if (!nb)
            return FL_ERR_NOMEM;
        r->body = nb;
        r->cap = nc;
    }
    memcpy(r->body + r->len, data, len);
    r->len += len;
    return FL_OK;
}

static void resp_reset(fl_client_response *r, size_t limit) {
    if (r->body)
        fl__free(r->alloc, r->body, r->cap);
    int standalone = r->alloc == &r->own;
    const fl_allocator *a = r->alloc;
    fl_allocator own = r->own;
    memset(r, 0, sizeof(*r));
    r->own = own;
    r->alloc = standalone ? &r->own : a;
    r->limit = limit;
}

/* Standalone responses for wrapping transports: the wrapper lets the inner transport fill
 * its own response, looks at it (or changes it) and replays it into the SDK's. */

fl_status fl_client_response_create(fl_client_response **out, size_t limit,
                                    const fl_allocator *alloc) {
    fl_allocator a;
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    fl_client_response *r = fl__calloc(&a, 1, sizeof(*r));
    if (!r)
        return FL_ERR_NOMEM;
    r->own = a;
    r->alloc = &r->own;
    r->limit = limit;
    *out = r;
    return FL_OK;
}

void fl_client_response_destroy(fl_client_response *r) {
    if (!r)
        return;
    if (r->body) {
        fl_memzero(r->body, r->len);
        fl__free(r->alloc, r->body, r->cap);
    }
    fl_allocator a = r->own;
    fl__free(&a, r, sizeof(*r));
}

static void resp_reset(fl_client_response *r, size_t limit);

void fl_client_response_reset(fl_client_response *r, size_t limit) {
    if (r)
        resp_reset(r, limit);
}

int fl_client_response_status(const fl_client_response *r) {
    return r ? r->status : 0;
}

size_t fl_client_response_limit(const fl_client_response *r) {
    return r ? r->limit : 0;
}

const uint8_t *fl_client_response_body(const fl_client_response *r, size_t *len) {
    if (len)
        *len = r ? r->len : 0;
    return r && r->len ? r->body : NULL;
}

/* The kept headers in a fixed order with their canonical names. */
static const char *resp_header_slot(const fl_client_response *r, size_t k, const char **name) {
    switch (k) {
    case 0: *name = "Retry-After"; return r->retry_after;
    case 1: *name = "Flotilla-Content-SHA256"; return r->sha256;
    case 2: *name = "Flotilla-Signature"; return r->signature;
    case 3: *name = "Flotilla-Key-Id"; return r->key_id;
    case 4: *name = "Content-Type"; return r->content_type;
    default: *name = NULL; return NULL;
    }
}

fl_status fl_client_response_header_at(const fl_client_response *r, size_t i, const char **name,
                                       const char **value) {
    if (!r || !name || !value)
        return FL_ERR_MISUSE;
    for (size_t k = 0;; k++) {
        const char *v = resp_header_slot(r, k, name);
        if (!v)
            break;
        if (v[0] && i-- == 0) {
            *value = v;
            return FL_OK;
        }
    }
    *name = *value = NULL;
    return FL_ERR_NOT_FOUND;
}

/* ---- the client ---- */

enum sa_step { SA_POST = 0, SA_RESULT = 1 };
static const char *const sa_phase_names[5] = {"advertise", "share", "masked", "consistency",
                                              "unmask"};

struct round {
    int active;                          /* selected and not finished */
    int64_t id;                          /* round id */
    char pid[33];                        /* participation id (Idempotency-Key) */
    char task_url[FL__CLIENT_URL_MAX + 1];
    char model_url[FL__CLIENT_URL_MAX + 1];
    int has_task;                        /* task parsed */
    struct fl__client_task task;         /* signed task config */
    uint8_t sa_session[32];              /* secagg.session_id of the task */
    uint8_t model_sha[32];               /* SHA-256 of the model downloaded and verified */
    uint8_t *model;                      /* verified model bytes (model_cap allocated) */
    size_t model_len, model_cap;
    uint8_t *post;                       /* body to post (plain update), post_cap allocated */
    size_t post_len, post_cap;
    const uint8_t *sa_out;               /* secagg message to post (owned by sa) */
    size_t sa_out_len;
    fl_secagg_client *sa;                /* secagg client state */
    int sa_phase;                        /* index into sa_phase_names */
    int sa_step;                         /* enum sa_step */
    size_t sa_limit;                     /* largest secagg message */
};

struct fl_client {
    fl_allocator alloc;                  /* caller's allocator (copied) */
    fl_logger logger;                    /* optional log callback */
    struct fl__err err;                  /* last error */
    char population[65], region[33], platform[33];
    uint8_t coord_key[FL_CLIENT_PUBLIC_KEY_BYTES]; /* pinned Ed25519 key */
    char key_id[FL_CLIENT_KEY_ID_CHARS + 1];
    char token[FL_CLIENT_TOKEN_MAX_CHARS + 1];     /* client token ("" = not enrolled) */
    char enroll_token[FL_CLIENT_TOKEN_MAX_CHARS + 1];
    char user_agent[UA_MAX];
    fl_client_transport tp;              /* borrowed transport */
    fl_client_store *store;              /* borrowed example store */
    fl_client_train_fn train_fn;         /* custom trainer or NULL */
    void *train_user;
    double momentum, weight_decay;       /* built-in trainer */
    int blas_advised;                    /* the OpenBLAS kernel check ran (once per client) */
    uint64_t max_model_bytes;
    uint32_t backoff_initial_ms, backoff_max_ms, request_timeout_ms, long_poll_s;
    uint64_t retry_timeout_ms;           /* cfg.retry_timeout_ms (0 = no limit) */
    int secagg_backend;
    int has_identity;                    /* the device identity below is set */
    uint8_t sa_signing_key[FL_CLIENT_SIGNING_KEY_BYTES]; /* secret; wiped at destroy */
    uint8_t sa_device_id[FL_CLIENT_DEVICE_ID_BYTES];     /* bound by sa_cert */
    uint8_t sa_cert[FL_CLIENT_CERT_BYTES];               /* v2 certificate */
    uint8_t sa_authority[FL_CLIENT_PUBLIC_KEY_BYTES];    /* pinned device-authority key */
    fl_client_clock_fn clock;
    void *clock_user;
    struct fl__client_rng rng;           /* jitter and shuffling */
    fl_client_eligibility elig;          /* facts for check-in */
    atomic_int interrupt;                /* set by fl_client_interrupt */
    /* scheduling */
    fl_client_state state;
    fl_status sticky;                    /* code returned once FAILED */
    int64_t next_ms;                     /* do not act before */
    uint32_t failures;                   /* consecutive transient failures */
    int64_t attempt_ms;                  /* when the request in flight was started */
    int retrying;                        /* an exchange is being retried: retry_since_ms */
    int64_t retry_since_ms;              /* start of its first failed try (retry_timeout_ms) */
    int round_ended;                     /* a round ended since fl_client_run began */
    int retry_gave_up;                   /* an exchange was given up after retry_timeout_ms
                                            since fl_client_run began */
    /* the request in flight */
    int sent;                            /* send() accepted, waiting in recv() */
    fl_client_request req;
    char path[FL__CLIENT_URL_MAX + 64];
    char hdr[HDR_MAX][HDR_LEN];
    const char *hdrp[HDR_MAX];
    char json[4096];                     /* JSON request bodies */
    fl_client_response resp;
    struct round r;
    /* statistics (read by other threads under the lock while a worker runs) */
    pthread_mutex_t lock;
    fl_client_stats stats;
    pthread_t worker;
    int worker_running;
    atomic_int worker_stop;
    fl__client_update_observer obs;      /* test hook on the update vector, or NULL */
    void *obs_user;
};

void fl__client_debug_update_hook_set(fl_client *c, fl__client_update_observer fn, void *user) {
    if (c) {
        c->obs = fn;
        c->obs_user = user;
    }
}

static void log_msg(fl_client *c, fl_log_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void log_msg(fl_client *c, fl_log_level lv, const char *fmt, ...) {
    if (!c->logger.fn || lv < c->logger.min_level)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    c->logger.fn(c->logger.user, lv, buf);
}

static bool chars_ok(const char *s, size_t max, const char *extra) {
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr(extra, ch)))
            return false;
    }
    return true;
}

static bool token_ok(const char *s) {
    size_t n = strlen(s);
    return n >= 20 && n <= FL_CLIENT_TOKEN_MAX_CHARS &&
           chars_ok(s, FL_CLIENT_TOKEN_MAX_CHARS, "_.-");
}

void fl_client_config_init(fl_client_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->platform = "linux";
    cfg->momentum = 0.9;
    cfg->max_model_bytes = 64u << 20;
    cfg->backoff_initial_ms = 1000;
    cfg->backoff_max_ms = 3600000;
    cfg->request_timeout_ms = 30000;
    cfg->long_poll_s = 30;
    cfg->retry_timeout_ms = 300000;
}

/* The config before the device identity was appended (an older app's struct): its sizeof
 * ended right after clock_user (no tail padding), where has_secagg_identity now begins. */
#define CONFIG_V0_SIZE offsetof(fl_client_config, has_secagg_identity)
_Static_assert(CONFIG_V0_SIZE == offsetof(fl_client_config, clock_user) + sizeof(void *),
               "the older fl_client_config ends at clock_user");
/* The config with the identity and before retry_timeout_ms: its sizeof (tail padding after
 * secagg_authority_key included) is where the 64-bit retry_timeout_ms now begins, because a
 * uint64_t is as aligned as the struct itself (it already holds uint64_t fields). */
#define CONFIG_V1_SIZE offsetof(fl_client_config, retry_timeout_ms)
_Static_assert(_Alignof(uint64_t) == _Alignof(fl_client_config),
               "retry_timeout_ms starts where the older struct's sizeof ended");
_Static_assert(CONFIG_V1_SIZE >= offsetof(fl_client_config, secagg_authority_key) +
                                     FL_CLIENT_PUBLIC_KEY_BYTES,
               "retry_timeout_ms follows the identity");
/* The stats before retry_timeouts (the same reasoning). */
#define STATS_V0_SIZE offsetof(fl_client_stats, retry_timeouts)
_Static_assert(_Alignof(uint64_t) == _Alignof(fl_client_stats),
               "retry_timeouts starts where the older struct's sizeof ended");

/* 1 if cfg carries the identity fields (struct_size of this header) and sets them. */
static int config_has_identity(const fl_client_config *cfg) {
    return cfg->struct_size >= CONFIG_V1_SIZE && cfg->has_secagg_identity;
}

/* cfg.retry_timeout_ms, or 0 (no limit: the behaviour before the field) for an older
 * struct. */
static uint64_t config_retry_timeout(const fl_client_config *cfg) {
    return cfg->struct_size >= sizeof(*cfg) ? cfg->retry_timeout_ms : 0;
}

/* The v2 device certificate must verify under the pinned authority key for the device id
 * and the signing key's verification key (its last 32 bytes, as the secagg library reads
 * it): a device that would only be refused by its neighbours or the coordinator later is
 * refused here, with the reason. */
static const char *check_identity(const fl_client_config *cfg) {
    static const char label[] = "flotilla-secagg-cert-v2";
    uint8_t stmt[sizeof(label) - 1 + FL_CLIENT_DEVICE_ID_BYTES + FL_CLIENT_PUBLIC_KEY_BYTES];
    uint8_t any_id = 0, any_auth = 0;
    if (cfg->has_secagg_identity != 1)
        return "cfg.has_secagg_identity must be 0 or 1";
    for (size_t i = 0; i < FL_CLIENT_DEVICE_ID_BYTES; i++)
        any_id |= cfg->secagg_device_id[i];
    for (size_t i = 0; i < FL_CLIENT_PUBLIC_KEY_BYTES; i++)
        any_auth |= cfg->secagg_authority_key[i];
    if (!any_id)
        return "cfg.secagg_device_id must not be all zero";
    if (!any_auth)
        return "cfg.secagg_authority_key: the device authority's key is required with an "
               "identity";
    memcpy(stmt, label, sizeof(label) - 1);
    memcpy(stmt + sizeof(label) - 1, cfg->secagg_device_id, FL_CLIENT_DEVICE_ID_BYTES);
    memcpy(stmt + sizeof(label) - 1 + FL_CLIENT_DEVICE_ID_BYTES, cfg->secagg_signing_key + 32,
           FL_CLIENT_PUBLIC_KEY_BYTES);
    int vr = fl__client_ed25519_verify(cfg->secagg_cert, stmt, sizeof(stmt),
                                       cfg->secagg_authority_key);
    if (vr == FL_ERR_UNSUPPORTED)
        return "cfg.secagg_cert cannot be checked: this build has no Ed25519 verifier";
    if (vr != FL_OK)
        return "cfg.secagg_cert does not verify under cfg.secagg_authority_key for "
               "cfg.secagg_device_id and the signing key";
    return NULL;
}

static const char *check_config(const fl_client_config *cfg) {
    if (cfg->struct_size != CONFIG_V0_SIZE && cfg->struct_size != CONFIG_V1_SIZE &&
        cfg->struct_size < sizeof(*cfg))
        return "cfg.struct_size: call fl_client_config_init first";
    if (!cfg->population || !chars_ok(cfg->population, 64, "_.-"))
        return "cfg.population: 1-64 chars [A-Za-z0-9_.-] required";
    if (!cfg->region || !chars_ok(cfg->region, 32, "_-"))
        return "cfg.region: 1-32 chars [A-Za-z0-9_-] required";
    if (cfg->platform && (strlen(cfg->platform) > 32 || !chars_ok(cfg->platform, 32, "_.- ")))
        return "cfg.platform: at most 32 chars [A-Za-z0-9_.- ]";
    if (!cfg->has_coordinator_key)
        return "cfg.coordinator_key: a pinned coordinator public key is required";
    if (cfg->client_token && !token_ok(cfg->client_token))
        return "cfg.client_token: 20-200 chars [A-Za-z0-9_.-]";
    if (cfg->enrollment_token && !token_ok(cfg->enrollment_token))
        return "cfg.enrollment_token: 20-200 chars [A-Za-z0-9_.-]";
    if (!cfg->client_token && !cfg->enrollment_token)
        return "cfg.client_token or cfg.enrollment_token is required";
    if (cfg->transport.struct_size < sizeof(cfg->transport) || !cfg->transport.send ||
        !cfg->transport.recv)
        return "cfg.transport: struct_size, send and recv are required";
    if (!cfg->store)
        return "cfg.store is required";
    if (!(cfg->momentum >= 0 && cfg->momentum < 1))
        return "cfg.momentum must be in [0, 1)";
    if (!(cfg->weight_decay >= 0 && cfg->weight_decay < 1e6))
        return "cfg.weight_decay must be >= 0";
    if (cfg->max_model_bytes < 64 || cfg->max_model_bytes > ((uint64_t)1 << 40))
        return "cfg.max_model_bytes must be 64 B..1 TiB";
    if (cfg->backoff_initial_ms < 1 || cfg->backoff_max_ms < cfg->backoff_initial_ms)
        return "cfg.backoff_initial_ms >= 1 and <= cfg.backoff_max_ms";
    if (cfg->request_timeout_ms < 100)
        return "cfg.request_timeout_ms must be >= 100";
    if (cfg->long_poll_s > 60)
        return "cfg.long_poll_s must be 0..60";
    if (cfg->secagg_backend < 0 || cfg->secagg_backend > FL_SECAGG_BACKEND_MBEDTLS)
        return "cfg.secagg_backend: an fl_secagg_backend value";
    if (config_retry_timeout(cfg) > ((uint64_t)1 << 40))
        return "cfg.retry_timeout_ms must be at most 2^40 (0 = no limit)";
    if (config_has_identity(cfg))
        return check_identity(cfg);
    return NULL;
}

fl_status fl_client_identity_keygen(uint8_t *verify_key, uint8_t *signing_key) {
    if (!verify_key || !signing_key)
        return FL_ERR_MISUSE;
    return fl_secagg_signing_keygen(verify_key, signing_key, FL_SECAGG_BACKEND_DEFAULT);
}

fl_status fl_client_create(fl_client **out, const fl_client_config *cfg, char *errmsg_out,
                           size_t errmsg_len) {
    const char *why = NULL;
    fl_allocator a;
    if (out)
        *out = NULL;
    if (!out || !cfg)
        why = "out and cfg must not be NULL";
    else if ((why = check_config(cfg)) == NULL && fl__allocator_copy(&a, cfg->allocator) != FL_OK)
        why = "cfg.allocator: struct_size, alloc and free are required";
    if (why) {
        if (errmsg_out && errmsg_len)
            snprintf(errmsg_out, errmsg_len, "%s", why);
        return FL_ERR_MISUSE;
    }
    fl_client *c = fl__calloc(&a, 1, sizeof(*c));
    if (!c) {
        if (errmsg_out && errmsg_len)
            snprintf(errmsg_out, errmsg_len, "out of memory");
        return FL_ERR_NOMEM;
    }
    c->alloc = a;
    c->logger = cfg->logger;
    snprintf(c->population, sizeof(c->population), "%s", cfg->population);
    snprintf(c->region, sizeof(c->region), "%s", cfg->region);
    snprintf(c->platform, sizeof(c->platform), "%s", cfg->platform ? cfg->platform : "linux");
    memcpy(c->coord_key, cfg->coordinator_key, sizeof(c->coord_key));
    fl_client_key_id(c->key_id, c->coord_key);
    if (cfg->client_token)
        snprintf(c->token, sizeof(c->token), "%s", cfg->client_token);
    if (cfg->enrollment_token)
        snprintf(c->enroll_token, sizeof(c->enroll_token), "%s", cfg->enrollment_token);
    snprintf(c->user_agent, sizeof(c->user_agent), "User-Agent: flotilla-sdk/%s (%s)",
             FL_VERSION_STRING, c->platform);
    c->tp = cfg->transport;
    c->store = cfg->store;
    c->train_fn = cfg->train_fn;
    c->train_user = cfg->train_user;
    c->momentum = cfg->momentum;
    c->weight_decay = cfg->weight_decay;
    c->max_model_bytes = cfg->max_model_bytes;
    c->backoff_initial_ms = cfg->backoff_initial_ms;
    c->backoff_max_ms = cfg->backoff_max_ms;
    c->request_timeout_ms = cfg->request_timeout_ms;
    c->long_poll_s = cfg->long_poll_s;
    c->retry_timeout_ms = config_retry_timeout(cfg);
    c->secagg_backend = cfg->secagg_backend;
    if (config_has_identity(cfg)) {
        c->has_identity = 1;
        memcpy(c->sa_signing_key, cfg->secagg_signing_key, sizeof(c->sa_signing_key));
        memcpy(c->sa_device_id, cfg->secagg_device_id, sizeof(c->sa_device_id));
        memcpy(c->sa_cert, cfg->secagg_cert, sizeof(c->sa_cert));
        memcpy(c->sa_authority, cfg->secagg_authority_key, sizeof(c->sa_authority));
    }
    c->clock = cfg->clock ? cfg->clock : fl__client_now_real;
    c->clock_user = cfg->clock_user;
    uint64_t seed = cfg->seed;
    if (seed == 0)
        fl__client_random(&seed, sizeof(seed));
    fl__client_rng_seed(&c->rng, seed);
    c->elig.struct_size = sizeof(c->elig);
    c->elig.battery_pct = -1;
    atomic_init(&c->interrupt, 0);
    atomic_init(&c->worker_stop, 0);
    c->resp.alloc = &c->alloc;
    c->state = FL_CLIENT_STATE_IDLE;
    c->stats.struct_size = sizeof(c->stats);
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        fl__free(&a, c, sizeof(*c));
        if (errmsg_out && errmsg_len)
            snprintf(errmsg_out, errmsg_len, "mutex init failed");
        return FL_ERR_NOMEM;
    }
    *out = c;
    return FL_OK;
}

static void round_free(fl_client *c) {
    struct round *r = &c->r;
    if (r->has_task)
        fl__client_task_free(&r->task, &c->alloc);
    if (r->model)
        fl__free(&c->alloc, r->model, r->model_cap);
    if (r->post) {
        fl_memzero(r->post, r->post_len);
        fl__free(&c->alloc, r->post, r->post_cap);
    }
    fl_secagg_client_destroy(r->sa);
    fl_memzero(r, sizeof(*r));
}

void fl_client_destroy(fl_client *c) {
    if (!c)
        return;
    fl_client_worker_stop(c);
    if (c->sent && c->tp.cancel)
        c->tp.cancel(c->tp.ctx);
    round_free(c);
    resp_reset(&c->resp, 0);
    pthread_mutex_destroy(&c->lock);
    fl_allocator a = c->alloc;
    /* Everything, the identity's signing key and the token included. */
    fl_memzero(c, sizeof(*c));
    fl__free(&a, c, sizeof(*c));
}

const char *fl_client_errmsg(const fl_client *c) {
    return c ? fl__err_msg(&c->err) : "no client handle";
}

fl_status fl_client_set_eligibility(fl_client *c, const fl_client_eligibility *e) {
    if (!c)
        return FL_ERR_MISUSE;
    if (!e || e->struct_size < sizeof(*e))
        return fl__err_set(&c->err, FL_ERR_MISUSE, "e: struct_size must be sizeof(*e)");
    if (e->battery_pct < -1 || e->battery_pct > 100)
        return fl__err_set(&c->err, FL_ERR_MISUSE, "e->battery_pct must be -1..100");
    c->elig = *e;
    c->elig.charging = !!e->charging;
    c->elig.unmetered = !!e->unmetered;
    c->elig.idle = !!e->idle;
    return FL_OK;
}

fl_status fl_client_stats_get(const fl_client *c, fl_client_stats *out) {
    if (!c || !out || (out->struct_size != STATS_V0_SIZE && out->struct_size < sizeof(*out)))
        return FL_ERR_MISUSE;
    /* An older caller's struct ends before retry_timeouts: only its bytes are written. */
    size_t n = out->struct_size < sizeof(*out) ? out->struct_size : sizeof(*out);
    size_t size = out->struct_size;
    pthread_mutex_lock((pthread_mutex_t *)&c->lock);
    memcpy(out, &c->stats, n);
    pthread_mutex_unlock((pthread_mutex_t *)&c->lock);
    out->struct_size = size;
    return FL_OK;
}

fl_status fl_client_token(const fl_client *c, char *buf, size_t len) {
    if (!c || !buf)
        return FL_ERR_MISUSE;
    if (!c->token[0])
        return FL_ERR_NOT_FOUND;
    size_t n = strlen(c->token);
    if (len < n + 1)
        return FL_ERR_TOO_LARGE;
    memcpy(buf, c->token, n + 1);
    return FL_OK;
}

void fl_client_interrupt(fl_client *c) {
    if (c)
        atomic_store(&c->interrupt, 1);
}

static int take_interrupt(fl_client *c) {
    return atomic_exchange(&c->interrupt, 0);
}

static int peek_interrupt(void *u) {
    return atomic_load(&((fl_client *)u)->interrupt);
}

/* ---- scheduling ---- */

static void set_state(fl_client *c, fl_client_state s) {
    c->state = s;
    pthread_mutex_lock(&c->lock);
    c->stats.state = s;
    c->stats.next_action_ms = c->next_ms;
    pthread_mutex_unlock(&c->lock);
}

#define STAT_ADD(c, field, v)                                                                  \
    do {                                                                                       \
        pthread_mutex_lock(&(c)->lock);                                                        \
        (c)->stats.field += (v);                                                               \
        pthread_mutex_unlock(&(c)->lock);                                                      \
    } while (0)

#define STAT_SET(c, field, v)                                                                  \
    do {                                                                                       \
        pthread_mutex_lock(&(c)->lock);                                                        \
        (c)->stats.field = (v);                                                                \
        pthread_mutex_unlock(&(c)->lock);                                                      \
    } while (0)

/* Exponential backoff with jitter, uniform in [delay/2, delay]: delay doubles per consecutive
 * failure from backoff_initial_ms up to backoff_max_ms; a server Retry-After is a floor. */
static int64_t backoff_ms(fl_client *c, int64_t retry_after_ms) {
    uint64_t d = c->backoff_initial_ms;
    for (uint32_t i = 1; i < c->failures && d < c->backoff_max_ms; i++)
        d *= 2;
    if (d > c->backoff_max_ms)
        d = c->backoff_max_ms;
    int64_t j = (int64_t)(d / 2 + fl__client_rng_below(&c->rng, d / 2 + 1));
    return j > retry_after_ms ? j : retry_after_ms;
}

static int64_t retry_after_header_ms(const fl_client_response *r) {
    if (!r->retry_after[0])
        return 0;
    char *end;
    long v = strtol(r->retry_after, &end, 10);
    if (*end != '\0' || v < 0 || v > 86400 * 7)
        return 0;
    return (int64_t)v * 1000;
}

/* Ends the current round (if any) and schedules the next check-in after delay_ms. */
static void round_end(fl_client *c, int64_t now, int64_t delay_ms, int completed, const char *why) {
    if (c->r.active) {
        if (completed)
            STAT_ADD(c, rounds_completed, 1);
        else
            STAT_ADD(c, rounds_failed, 1);
        log_msg(c, completed ? FL_LOG_INFO : FL_LOG_WARN, "round %lld %s%s%s",
                (long long)c->r.id, completed ? "completed" : "given up",
                why ? ": " : "", why ? why : "");
        c->round_ended = 1;
    }
    round_free(c);
    /* The next exchange is a new one: its backoff starts over and so does its
     * retry_timeout_ms window. The delay (computed by the caller from the failures so far)
     * is still waited first. Were the failures kept, a backoff grown past retry_timeout_ms
     * would give every later exchange up after a single try. */
    c->failures = 0;
    c->retrying = 0;
    c->next_ms = now + delay_ms;
    set_state(c, FL_CLIENT_STATE_IDLE);
}

/* The exchange succeeded (or the server answered with a plan): the backoff starts over, and
 * so does the retry_timeout_ms window. */
static void exchange_ok(fl_client *c) {
    c->failures = 0;
    c->retrying = 0;
}

/* A transient failure (network, closed connection, 408, 5xx, 429): retry the same step
 * after a backoff. The retry rebuilds the same request (same body, same Idempotency-Key:
 * the round's participation_id), so a request the server did apply is answered as a replay
 * (docs/protocol.md section 6). Inside a round, give up once the next try would come after
 * the round's last deadline; the error then says what kept failing. An exchange that no
 * round deadline bounds (enrollment, check-in, the task download, whose answer brings the
 * deadlines) has a window of retry_timeout_ms from the start of its first failed try. A
 * backoff that would overshoot the window is cut so that the last try starts at the
 * window's end, unless the server's Retry-After asks for later or the cut gap would be
 * shorter than backoff_initial_ms / 2 (the shortest the backoff itself waits: no two tries
 * in a burst). Otherwise the exchange is given up: FL_ERR_TIMEOUT, a selected round given
 * up, the client idle and checking in again after the uncut backoff (round_end then starts
 * the backoff over for the next exchange), and fl_client_run returns the error. */
static void transient(fl_client *c, int64_t now, fl_status code, const char *what) {
    c->failures++;
    STAT_ADD(c, transient_errors, 1);
    STAT_SET(c, last_error, code);
    fl__err_set(&c->err, code, "%s", what);
    int64_t ra = retry_after_header_ms(&c->resp);
    int64_t delay = backoff_ms(c, ra);
    int64_t last = 0;
    if (c->r.active && c->r.has_task)
        for (int k = 0; k < 5; k++)
            last = c->r.task.deadlines[k] > last ? c->r.task.deadlines[k] : last;
    if (last && now + delay > last) {
        char why[FL__ERRMSG_MAX];
        snprintf(why, sizeof(why), "%.200s; the round's deadlines passed while retrying", what);
        fl__err_set(&c->err, code, "%s", why);
        round_end(c, now, delay, 0, why);
        return;
    }
    if (!last && c->retry_timeout_ms) {
        if (!c->retrying) {
            c->retrying = 1;
            c->retry_since_ms = c->attempt_ms;
        }
        int64_t left = c->retry_since_ms + (int64_t)c->retry_timeout_ms - now;
        if (delay > left && ra <= left && left > 0 && 2 * left >= c->backoff_initial_ms)
            delay = left; /* the last try at the window's end rather than none */
        if (delay > left) {
            /* The app asked for a bound: report it instead of retrying on (the code is
             * FL_ERR_TIMEOUT whatever failed; the message keeps the cause). */
            char why[FL__ERRMSG_MAX];
            snprintf(why, sizeof(why),
                     "%.150s; gave up after retrying for %lld ms (retry_timeout_ms %llu)", what,
                     (long long)(now - c->retry_since_ms),
                     (unsigned long long)c->retry_timeout_ms);
            fl__err_set(&c->err, FL_ERR_TIMEOUT, "%s", why);
            STAT_SET(c, last_error, FL_ERR_TIMEOUT);
            STAT_ADD(c, retry_timeouts, 1);
            log_msg(c, FL_LOG_WARN, "%s", why);
            c->retry_gave_up = 1;
            /* A round given up, or the check-in / enrollment abandoned: idle either way,
             * next try after this (uncut) backoff; round_end starts the next exchange's
             * backoff and window over. */
            round_end(c, now, delay, 0, why);
            return;
        }
    }
    log_msg(c, FL_LOG_WARN, "%s; retrying in %lld ms", what, (long long)delay);
    c->next_ms = now + delay;
    set_state(c, c->state);
}

static void fail_sticky(fl_client *c, fl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_sticky(fl_client *c, fl_status code, const char *fmt, ...) {
    char m[FL__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    fl__err_set(&c->err, code, "%s", m);
    c->sticky = code;
    STAT_SET(c, last_error, code);
    log_msg(c, FL_LOG_ERROR, "%s", fl__err_msg(&c->err));
    round_free(c);
    set_state(c, FL_CLIENT_STATE_FAILED);
}

/* ---- requests ---- */

static void req_begin(fl_client *c, const char *method, const char *bearer, uint32_t timeout_ms) {
    memset(&c->req, 0, sizeof(c->req));
    c->req.struct_size = sizeof(c->req);
    c->req.method = method;
    c->req.path = c->path;
    c->req.timeout_ms = timeout_ms;
    c->req.headers = c->hdrp;
    c->req.n_headers = 0;
    snprintf(c->hdr[0], HDR_LEN, "%s", c->user_agent);
    snprintf(c->hdr[1], HDR_LEN, "Authorization: Bearer %s", bearer);
    snprintf(c->hdr[2], HDR_LEN, "Accept: application/json, application/octet-stream");
    for (int i = 0; i < 3; i++)
        c->hdrp[c->req.n_headers++] = c->hdr[i];
}

static void req_header(fl_client *c, const char *line) {
    size_t i = c->req.n_headers;
    snprintf(c->hdr[i], HDR_LEN, "%s", line);
    c->hdrp[i] = c->hdr[i];
    c->req.n_headers++;
}

static void req_idem(fl_client *c) {
    char h[64];
    snprintf(h, sizeof(h), "Idempotency-Key: %s", c->r.pid);
    req_header(c, h);
}

static void req_body(fl_client *c, const char *ctype, const uint8_t *body, size_t len) {
    char h[96];
    snprintf(h, sizeof(h), "Content-Type: %s", ctype);
    req_header(c, h);
    c->req.body = body;
    c->req.body_len = len;
}

/* Builds the request for the current state; returns the response size limit. */
static fl_status build_request(fl_client *c, size_t *limit) {
    struct round *r = &c->r;
    struct fl__client_jw w;
    *limit = FL_CLIENT_MAX_JSON_BYTES;
    switch (c->state) {
    case FL_CLIENT_STATE_ENROLL:
        snprintf(c->path, sizeof(c->path), "/v1/enroll");
        req_begin(c, "POST", c->enroll_token, c->request_timeout_ms);
        fl__client_jw_init(&w, c->json, sizeof(c->json));
        fl__client_jw_raw(&w, "{\"population\":");
        fl__client_jw_str(&w, c->population);
        fl__client_jw_raw(&w, ",\"region\":");
        fl__client_jw_str(&w, c->region);
        fl__client_jw_raw(&w, ",\"platform\":");
        fl__client_jw_str(&w, c->platform);
        if (c->has_identity) {
            /* Public parts only: the coordinator checks the certificate under the
             * population's authority key and binds the device id to this client. */
            char hex[2 * FL_CLIENT_CERT_BYTES + 1];
            fl__client_hex(hex, c->sa_device_id, sizeof(c->sa_device_id));
            fl__client_jw_raw(&w, ",\"secagg_identity\":{\"device_id\":");
            fl__client_jw_str(&w, hex);
            fl__client_hex(hex, c->sa_signing_key + 32, FL_CLIENT_PUBLIC_KEY_BYTES);
            fl__client_jw_raw(&w, ",\"verify_key\":");
            fl__client_jw_str(&w, hex);
            fl__client_hex(hex, c->sa_cert, sizeof(c->sa_cert));
            fl__client_jw_raw(&w, ",\"cert\":");
            fl__client_jw_str(&w, hex);
            fl__client_jw_raw(&w, "}");
        }
        fl__client_jw_raw(&w, ",\"sdk_version\":\"" FL_VERSION_STRING "\"}");
        req_body(c, "application/json", (const uint8_t *)c->json, w.len);
        return fl__client_jw_ok(&w) ? FL_OK : FL_ERR_INTERNAL;
    case FL_CLIENT_STATE_CHECKIN: {
        uint64_t count = 0;
        fl_client_store_stats(c->store, &count, NULL);
        snprintf(c->path, sizeof(c->path), "/v1/checkin");
        req_begin(c, "POST", c->token, c->request_timeout_ms);
        fl__client_jw_init(&w, c->json, sizeof(c->json));
        fl__client_jw_raw(&w, "{\"region\":");
        fl__client_jw_str(&w, c->region);
        fl__client_jw_raw(&w, ",\"eligibility\":{\"charging\":");
        fl__client_jw_raw(&w, c->elig.charging ? "true" : "false");
        fl__client_jw_raw(&w, ",\"unmetered\":");
        fl__client_jw_raw(&w, c->elig.unmetered ? "true" : "false");
        fl__client_jw_raw(&w, ",\"idle\":");
        fl__client_jw_raw(&w, c->elig.idle ? "true" : "false");
        if (c->elig.battery_pct >= 0) {
            fl__client_jw_raw(&w, ",\"battery_pct\":");
            fl__client_jw_int(&w, c->elig.battery_pct);
        }
        fl__client_jw_raw(&w, ",\"examples\":");
        fl__client_jw_int(&w, (int64_t)(count > (1ull << 53) ? (1ull << 53) : count));
        fl__client_jw_raw(&w, "},\"sdk_version\":\"" FL_VERSION_STRING "\","
                              "\"capabilities\":{\"secagg\":true,\"max_model_bytes\":");
        fl__client_jw_int(&w, (int64_t)c->max_model_bytes);
        fl__client_jw_raw(&w, "}}");
        req_body(c, "application/json", (const uint8_t *)c->json, w.len);
        return fl__client_jw_ok(&w) ? FL_OK : FL_ERR_INTERNAL;
    }
    case FL_CLIENT_STATE_TASK:
        snprintf(c->path, sizeof(c->path), "%s", r->task_url);
        req_begin(c, "GET", c->token, c->request_timeout_ms);
        req_idem(c);
        return FL_OK;
    case FL_CLIENT_STATE_MODEL:
        snprintf(c->path, sizeof(c->path), "%s", r->task.model_url);
        req_begin(c, "GET", c->token, c->request_timeout_ms);
        req_idem(c);
        *limit = (size_t)(r->task.model_bytes ? (uint64_t)r->task.model_bytes : c->max_model_bytes);
        return FL_OK;
    case FL_CLIENT_STATE_UPLOAD:
        snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/update", (long long)r->id);
        req_begin(c, "POST", c->token, c->request_timeout_ms);
        req_idem(c);
        req_body(c, "application/octet-stream", r->post, r->post_len);
        return FL_OK;
    case FL_CLIENT_STATE_OUTCOME:
        /* Long-polled: parked until the round ends or long_poll_s pass (5.3). */
        snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/status?wait=%u", (long long)r->id,
                 c->long_poll_s);
        req_begin(c, "GET", c->token, c->long_poll_s * 1000u + c->request_timeout_ms);
        req_idem(c);
        return FL_OK;
    case FL_CLIENT_STATE_SECAGG:
        if (r->sa_step == SA_POST) {
            snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/secagg/%s", (long long)r->id,
                     sa_phase_names[r->sa_phase]);
            req_begin(c, "POST", c->token, c->request_timeout_ms);
            req_idem(c);
            req_body(c, "application/octet-stream", r->sa_out, r->sa_out_len);
        } else {
            snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/secagg/%s/result?wait=%u",
                     (long long)r->id, sa_phase_names[r->sa_phase], c->long_poll_s);
            req_begin(c, "GET", c->token, c->long_poll_s * 1000u + c->request_timeout_ms);
            req_idem(c);
            *limit = r->sa_phase == 4 ? FL_CLIENT_MAX_JSON_BYTES : r->sa_limit;
        }
        return FL_OK;
    default:
        return FL_ERR_INTERNAL;
    }
}

/* ---- response handling ---- */

struct jdoc {
    struct fl__client_json j;
    struct fl__client_jtok tok[256];
};

static fl_status parse_json(fl_client *c, struct jdoc *d) {
    return fl__client_json_parse(&d->j, (const char *)c->resp.body, c->resp.len, d->tok, 256);
}

/* Error code of an error body ("" if none). */
static void error_code(fl_client *c, char *code, size_t cap) {
    struct jdoc d;
    code[0] = '\0';
    if (parse_json(c, &d) == FL_OK)
        fl__client_json_str(&d.j, fl__client_json_get(&d.j, fl__client_json_get(&d.j, 0, "error"),
                                                     "code"), code, cap);
}

/* The error body's "field" and "message" as "field: message" ("" if none), cut to cap and
 * to printable ASCII (it goes into errmsg and the log). */
static void error_message(fl_client *c, char *out, size_t cap) {
    struct jdoc d;
    char field[64] = "", msg[160] = "";
    out[0] = '\0';
    if (parse_json(c, &d) != FL_OK)
        return;
    long e = fl__client_json_get(&d.j, 0, "error");
    fl__client_json_str(&d.j, fl__client_json_get(&d.j, e, "field"), field, sizeof(field));
    fl__client_json_str(&d.j, fl__client_json_get(&d.j, e, "message"), msg, sizeof(msg));
    snprintf(out, cap, "%s%s%s", field, field[0] && msg[0] ? ": " : "", msg);
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            *p = '?';
}

/* Verifies the signature headers of a signed body (docs/protocol.md 4.1). Once computed,
 * the body's SHA-256 also goes to body_sha (NULL: not wanted). */
static fl_status verify_signed(fl_client *c, const char *context, uint64_t id,
                               uint8_t body_sha[32]) {
    fl_client_response *rp = &c->resp;
    uint8_t h[32], want[32], sig[64];
    if (!rp->sha256[0] || !rp->signature[0] || !rp->key_id[0] || rp->bad_header)
        return fl__err_set(&c->err, FL_ERR_CRYPTO, "%s body arrived without signature headers",
                           context);
    fl__client_sha256(h, rp->body, rp->len);
    if (body_sha)
        memcpy(body_sha, h, 32);
    if (!fl__client_unhex(want, 32, rp->sha256) || fl_memeq_ct(h, want, 32) != 0)
        return fl__err_set(&c->err, FL_ERR_CRYPTO, "%s body does not match its SHA-256 header",
                           context);
    if (strcmp(rp->key_id, c->key_id) != 0)
        return fl__err_set(&c->err, FL_ERR_CRYPTO, "%s signed by key %s, pinned key is %s",
                           context, rp->key_id, c->key_id);
    if (!fl__client_unbase64(sig, 64, rp->signature))
        return fl__err_set(&c->err, FL_ERR_CRYPTO, "%s signature header is not base64 of 64 "
                           "bytes", context);
    uint8_t msg[64];
    size_t cl = strlen(context);
    memcpy(msg, context, cl);
    msg[cl] = 0;
    fl__put_u64le(msg + cl + 1, id);
    memcpy(msg + cl + 9, h, 32);
    int vr = fl__client_ed25519_verify(sig, msg, cl + 41, c->coord_key);
    if (vr == FL_ERR_UNSUPPORTED)
        return fl__err_set(&c->err, FL_ERR_UNSUPPORTED, "%s signature cannot be checked: this "
                           "build has no Ed25519 verifier", context);
    if (vr != FL_OK)
        return fl__err_set(&c->err, FL_ERR_CRYPTO, "%s signature does not verify", context);
    return FL_OK;
}

static bool url_ok(const char *u) {
    return strncmp(u, "/v1/", 4) == 0 && chars_ok(u, FL__CLIENT_URL_MAX, "/_.-");
}

static void on_enroll(fl_client *c, int64_t now) {
    struct jdoc d;
    char code[48];
    int st = c->resp.status;
    if (st == 201) {
        char tok[FL_CLIENT_TOKEN_MAX_CHARS + 2], kid[24], pop[80], proto[24];
        if (parse_json(c, &d) != FL_OK ||
            !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "client_token"), tok,
                                 sizeof(tok)) ||
            !token_ok(tok) ||
            !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "coordinator_key_id"), kid,
                                 sizeof(kid)) ||
            !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "population"), pop,
                                 sizeof(pop)) ||
            !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "protocol"), proto,
                                 sizeof(proto))) {
            transient(c, now, FL_ERR_PROTOCOL, "enrollment answer is malformed");
            return;
        }
        if (strcmp(kid, c->key_id) != 0) {
            fail_sticky(c, FL_ERR_CRYPTO, "coordinator key id %s does not match the pinned key",
                        kid);
            return;
        }
        if (strcmp(pop, c->population) != 0 || strcmp(proto, "flotilla/v1") != 0) {
            fail_sticky(c, FL_ERR_PROTOCOL, "enrollment answer is for another %s",
                        "population or protocol");
            return;
        }
        size_t tl = strlen(tok); /* token_ok(): at most FL_CLIENT_TOKEN_MAX_CHARS */
        if (tl >= sizeof(c->token))
            tl = sizeof(c->token) - 1;
        memcpy(c->token, tok, tl);
        c->token[tl] = '\0';
        fl_memzero(tok, sizeof(tok));
        exchange_ok(c);
        c->next_ms = now;
        log_msg(c, FL_LOG_INFO, "enrolled in %s", c->population);
        set_state(c, FL_CLIENT_STATE_CHECKIN);
        return;
    }
    error_code(c, code, sizeof(code));
    if (st == 401 || st == 403 || st == 400 || st == 404 || st == 409) {
        /* The server's message says why (e.g. which field, or that the device identity's
         * certificate does not verify under the population's authority key); a device id
         * already enrolled (409 conflict) cannot enroll again as a new client. */
        char msg[200];
        error_message(c, msg, sizeof(msg));
        fail_sticky(c, st == 403 || st == 409 ? FL_ERR_STATE : FL_ERR_AUTH,
                    "enrollment refused: %s%s%s", code[0] ? code : "unexpected status",
                    msg[0] ? ": " : "", msg);
    } else if (st == 408) /* cut by the server's request deadline: nothing was enrolled */
        transient(c, now, FL_ERR_TIMEOUT, "enrollment timed out on the server (408)");
    else {
        char what[128];
        snprintf(what, sizeof(what), "enrollment failed (server busy or unavailable): HTTP %d%s%s",
                 st, code[0] ? " " : "", code);
        transient(c, now, FL_ERR_IO, what);
    }
}

static void on_checkin(fl_client *c, int64_t now) {
    struct jdoc d;
    char code[48], status[16];
    int st = c->resp.status;
    STAT_ADD(c, checkins, 1);
    if (st == 200) {
        if (parse_json(c, &d) != FL_OK ||
            !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "status"), status,
                                 sizeof(status))) {
            transient(c, now, FL_ERR_PROTOCOL, "check-in answer is malformed");
            return;
        }
        if (strcmp(status, "selected") == 0) {
            struct round *r = &c->r;
            int64_t rid;
            round_free(c);
            if (!fl__client_json_int(&d.j, fl__client_json_get(&d.j, 0, "round_id"), &rid) ||
                rid < 1 ||
                !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "participation_id"),
                                     r->pid, sizeof(r->pid)) ||
                strlen(r->pid) != 32 || !chars_ok(r->pid, 32, "") ||
                !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "task_url"), r->task_url,
                                     sizeof(r->task_url)) ||
                !url_ok(r->task_url)) {
                round_free(c);
                transient(c, now, FL_ERR_PROTOCOL, "check-in selection is malformed");
                return;
            }
            r->active = 1;
            r->id = rid;
            exchange_ok(c);
            c->next_ms = now;
            STAT_ADD(c, selected, 1);
            STAT_SET(c, round_id, rid);
            log_msg(c, FL_LOG_INFO, "selected for round %lld", (long long)rid);
            set_state(c, FL_CLIENT_STATE_TASK);
            return;
        }
        /* "retry" (and anything unknown, as the protocol asks). */
        int64_t ra = 0;
        if (!fl__client_json_int(&d.j, fl__client_json_get(&d.j, 0, "retry_after_s"), &ra) ||
            ra < 0)
            ra = retry_after_header_ms(&c->resp) / 1000;
        exchange_ok(c);
        c->next_ms = now + (ra > 0 ? ra * 1000 : c->backoff_initial_ms);
        set_state(c, FL_CLIENT_STATE_IDLE);
        return;
    }
    error_code(c, code, sizeof(code));
    if (st == 401) {
        fail_sticky(c, FL_ERR_AUTH, "check-in refused (%s): enroll again", code[0] ? code : "401");
    } else if (st == 403 && strcmp(code, "region_not_allowed") == 0) {
        fail_sticky(c, FL_ERR_STATE, "region %s is not allowed by the population", c->region);
    } else if (st == 429) {
        /* Pace steering: never earlier than the server says. */
        transient(c, now, FL_ERR_AGAIN, "checked in too early (429)");
    } else if (st == 408) {
        /* Cut by the server's request deadline before it was whole: not applied. */
        transient(c, now, FL_ERR_TIMEOUT, "check-in timed out on the server (408)");
    } else {
        char what[96];
        snprintf(what, sizeof(what), "check-in failed: HTTP %d%s%s", st, code[0] ? " " : "",
                 code);
        transient(c, now, st >= 500 ? FL_ERR_IO : FL_ERR_PROTOCOL, what);
    }
}

/* Round-level answers shared by the round endpoints. Returns 1 if handled (round given up
 * or retried). */
static int round_error(fl_client *c, int64_t now, const char *what) {
    int st = c->resp.status;
    char code[48];
    char why[160];
    error_code(c, code, sizeof(code));
    if (st == 425) {
        /* Phase not open yet (e.g. the task of a round still forming): come back when the
         * server says (Retry-After, else the error body's retry_after_s, else 1 s). */
        int64_t ra = retry_after_header_ms(&c->resp);
        if (ra <= 0) {
            struct jdoc d;
            int64_t v;
            if (parse_json(c, &d) == FL_OK &&
                fl__client_json_int(&d.j, fl__client_json_get(&d.j, fl__client_json_get(
                                                                  &d.j, 0, "error"),
                                                              "retry_after_s"), &v) &&
                v > 0 && v < 86400)
                ra = v * 1000;
        }
        /* A valid plan, not a failure: the server is reachable and answering, so the
         * backoff and the retry_timeout_ms window start over as after any other answer. */
        exchange_ok(c);
        c->next_ms = now + (ra > 0 ? ra : 1000);
        set_state(c, c->state);
        return 1;
    }
    if (st == 429 || st >= 500) {
        transient(c, now, FL_ERR_IO, what);
        return 1;
    }
    if (st == 408) {
        /* The server's request deadline (docs/protocol.md section 7) cut this request before
         * it had arrived whole, so nothing of it was applied: like a closed connection, it
         * is sent again (same bytes, same Idempotency-Key) after a backoff, while the
         * round's deadlines allow. */
        snprintf(why, sizeof(why), "%s: HTTP 408 %s", what, code[0] ? code : "request_timeout");
        transient(c, now, FL_ERR_TIMEOUT, why);
        return 1;
    }
    if (st == 401) {
        fail_sticky(c, FL_ERR_AUTH, "%s: token refused", what);
        return 1;
    }
    snprintf(why, sizeof(why), "%s: HTTP %d %s", what, st, code);
    fl__err_set(&c->err, st == 410 ? FL_ERR_ABORTED : FL_ERR_PROTOCOL, "%s", why);
    STAT_SET(c, last_error, st == 410 ? FL_ERR_ABORTED : FL_ERR_PROTOCOL);
    round_end(c, now, backoff_ms(c, retry_after_header_ms(&c->resp)), 0, why);
    return 1;
}

/* secagg.session_id of the task body in c->resp (already parsed once and validated by
 * fl__client_task_parse, which does not keep it). */
static fl_status task_session_id(fl_client *c, uint8_t out[32]) {
    enum { TOKENS = 4096 };
    struct fl__client_jtok *tok = fl__alloc_array(&c->alloc, TOKENS, sizeof(*tok));
    if (!tok)
        return fl__err_set(&c->err, FL_ERR_NOMEM, "task: out of memory");
    struct fl__client_json j;
    char b64[64];
    fl_status rc = fl__client_json_parse(&j, (const char *)c->resp.body, c->resp.len, tok,
                                         TOKENS);
    if (rc == FL_OK &&
        !(fl__client_json_str(&j, fl__client_json_get(&j, fl__client_json_get(&j, 0, "secagg"),
                                                      "session_id"),
                              b64, sizeof(b64)) &&
          fl__client_unbase64(out, 32, b64)))
        rc = FL_ERR_FORMAT;
    if (rc != FL_OK && rc != FL_ERR_NOMEM)
        rc = fl__err_set(&c->err, rc, "task field secagg.session_id");
    fl__free(&c->alloc, tok, TOKENS * sizeof(*tok));
    return rc;
}

/* The secagg context of docs/protocol.md 5.5: SHA-256("flotilla/v1/secagg-context" || 0x00
 * || session_id || SHA-256(model)) over the model this device downloaded and verified. Two
 * devices given different models by an equivocating coordinator get different contexts,
 * cannot open each other's secagg shares, and so never aggregate together. */
static void secagg_context(uint8_t out[FL_SECAGG_CONTEXT_BYTES], const struct round *r) {
    static const char label[] = "flotilla/v1/secagg-context";
    uint8_t m[sizeof(label) + 64];
    memcpy(m, label, sizeof(label)); /* with its terminating 0x00 */
    memcpy(m + sizeof(label), r->sa_session, 32);
    memcpy(m + sizeof(label) + 32, r->model_sha, 32);
    fl__client_sha256(out, m, sizeof(m));
}

static void on_task(fl_client *c, int64_t now) {
    struct round *r = &c->r;
    if (c->resp.status != 200) {
        round_error(c, now, "task download");
        return;
    }
    fl_status rc = verify_signed(c, "flotilla/v1/task", (uint64_t)r->id, NULL);
    if (rc == FL_OK)
        rc = fl__client_task_parse(&r->task, (const char *)c->resp.body, c->resp.len, r->id,
                                   c->population, &c->alloc, &c->err);
    if (rc == FL_OK) {
        r->has_task = 1; /* freed with the round from here on */
        if (r->task.secagg)
            rc = task_session_id(c, r->sa_session);
    }
    if (rc == FL_OK && r->task.secagg && r->task.sa_active && !c->has_identity)
        /* Active mode signs every advertisement with a certified device key: without one
         * the device cannot take part. Refused before the model is fetched; nothing of
         * this round is sent. */
        rc = fl__err_set(&c->err, FL_ERR_STATE,
                         "the population requires a device identity (secagg active mode)");
    if (rc != FL_OK) {
        STAT_SET(c, last_error, rc);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    r->has_task = 1;
    if (r->task.model_bytes && (uint64_t)r->task.model_bytes > c->max_model_bytes) {
        fl__err_set(&c->err, FL_ERR_TOO_LARGE, "model of %lld bytes over max_model_bytes",
                    (long long)r->task.model_bytes);
        STAT_SET(c, last_error, FL_ERR_TOO_LARGE);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    exchange_ok(c);
    c->next_ms = now;
    set_state(c, FL_CLIENT_STATE_MODEL);
}

static void on_model(fl_client *c, int64_t now) {
    struct round *r = &c->r;
    if (c->resp.status != 200) {
        round_error(c, now, "model download");
        return;
    }
    /* The hash of what was verified also goes into the secagg context (5.5): taken from the
     * signature check instead of hashing the model twice. */
    fl_status rc = verify_signed(c, "flotilla/v1/model", (uint64_t)r->task.model_version,
                                 r->model_sha);
    if (rc == FL_OK && (r->task.has_model_sha256 || r->task.secagg)) {
        if (r->task.has_model_sha256 && fl_memeq_ct(r->model_sha, r->task.model_sha256, 32))
            rc = fl__err_set(&c->err, FL_ERR_CRYPTO, "model SHA-256 differs from the task's");
    }
    if (rc == FL_OK && r->task.model_bytes && (size_t)r->task.model_bytes != c->resp.len)
        rc = fl__err_set(&c->err, FL_ERR_FORMAT, "model size differs from the task's");
    if (rc != FL_OK) {
        STAT_SET(c, last_error, rc);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    /* Take the body over: it is the verified global model. */
    r->model = c->resp.body;
    r->model_len = c->resp.len;
    r->model_cap = c->resp.cap;
    c->resp.body = NULL;
    c->resp.cap = c->resp.len = 0;
    STAT_SET(c, model_version, r->task.model_version);
    exchange_ok(c);
    c->next_ms = now;
    set_state(c, FL_CLIENT_STATE_TRAIN);
}

/* ---- local training and the update ---- */

struct builtin_src {
    fl_client *c;
    fl_client_trainer *tr;
};

static fl_status builtin_get(void *user, const char *name, float *trained, float *global,
                             size_t *numel) {
    struct builtin_src *s = user;
    size_t n;
    const struct fl__client_layer *L = fl__client_trainer_layers(s->tr, &n);
    for (size_t l = 0; l < n; l++) {
        int is_w = strcmp(L[l].wname, name) == 0, is_b = strcmp(L[l].bname, name) == 0;
        if (!is_w && !is_b)
            continue;
        size_t off = is_w ? L[l].w_off : L[l].b_off;
        size_t cnt = is_w ? (size_t)L[l].out * L[l].in : L[l].out;
        *numel = cnt;
        if (trained)
            memcpy(trained, fl__client_trainer_params_ptr(s->tr) + off, cnt * sizeof(float));
        if (global)
            memcpy(global, fl__client_trainer_global_ptr(s->tr) + off, cnt * sizeof(float));
        return FL_OK;
    }
    return FL_ERR_NOT_FOUND;
}

static void builtin_release(void *user) {
    struct builtin_src *s = user;
    fl_client_trainer_destroy(s->tr);
    s->tr = NULL;
}

struct custom_src {
    fl_client *c;
    fl_client_tensor *t;     /* (n) trained copies */
    size_t n;
    fl_safetensors *global;  /* the downloaded model */
};

static fl_status custom_get(void *user, const char *name, float *trained, float *global,
                            size_t *numel) {
    struct custom_src *s = user;
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->t[i].name, name) != 0)
            continue;
        *numel = s->t[i].numel;
        if (trained)
            memcpy(trained, s->t[i].data, s->t[i].numel * sizeof(float));
        if (global) {
            fl_tensor_view v;
            fl_safetensors_find(s->global, &v, name);
            memcpy(global, v.data, v.nbytes);
        }
        return FL_OK;
    }
    return FL_ERR_NOT_FOUND;
}

/* Runs the app's trainer on F32 copies of every model tensor, then builds the update. */
static fl_status train_custom(fl_client *c, const fl_client_train_params *p, void **vec,
                              size_t *vlen, size_t *wb, uint64_t *used) {
    struct round *r = &c->r;
    fl_safetensors *st = NULL;
    fl_client_tensor *t = NULL;
    float *arena = NULL;
    size_t n = 0, total = 0;
    fl_status rc = fl_safetensors_create(&st, fl__client_ext_alloc(&c->alloc));
    if (rc == FL_OK && (rc = fl_safetensors_parse(st, r->model, r->model_len)) != FL_OK)
        fl__err_set(&c->err, rc, "model: %s", fl_safetensors_errmsg(st));
    if (rc != FL_OK)
        goto out;
    size_t count = fl_safetensors_count(st);
    if (count > FL_CLIENT_MAX_TENSORS) {
        rc = fl__err_set(&c->err, FL_ERR_TOO_LARGE, "model has %zu tensors", count);
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        fl_tensor_view v;
        fl_safetensors_at(st, &v, i);
        if (v.dtype == FL_DTYPE_F32)
            n++, total += v.nbytes / sizeof(float);
    }
    t = fl__calloc(&c->alloc, n ? n : 1, sizeof(*t));
    arena = fl__alloc_array(&c->alloc, total ? total : 1, sizeof(float));
    if (!t || !arena) {
        rc = fl__err_set(&c->err, FL_ERR_NOMEM, "out of memory for the model copies");
        goto out;
    }
    size_t off = 0, k = 0;
    for (size_t i = 0; i < count; i++) {
        fl_tensor_view v;
        fl_safetensors_at(st, &v, i);
        if (v.dtype != FL_DTYPE_F32)
            continue;
        t[k].name = v.name;
        t[k].ndim = v.ndim;
        t[k].shape = v.shape;
        t[k].data = arena + off;
        t[k].numel = v.nbytes / sizeof(float);
        memcpy(t[k].data, v.data, v.nbytes);
        off += t[k].numel;
        k++;
    }
    *used = 0;
    rc = c->train_fn(c->train_user, t, n, p, c->store, used);
    if (rc != FL_OK) {
        fl__err_set(&c->err, rc, "the app's trainer failed (%s)", fl_status_name(rc));
        goto out;
    }
    struct custom_src cs = {c, t, n, st};
    struct fl__client_update_src src = {custom_get, NULL, &cs};
    rc = fl__client_update_build(vec, vlen, wb, &r->task, &src, *used, c->obs, c->obs_user,
                                 &c->alloc, &c->err);
out:
    if (arena)
        fl__free(&c->alloc, arena, (total ? total : 1) * sizeof(float));
    if (t)
        fl__free(&c->alloc, t, (n ? n : 1) * sizeof(*t));
    fl_safetensors_destroy(st);
    return rc;
}

/* Training was interrupted after the downloaded model bytes were freed (for the memory
 * peak): the round goes on (fl_client_step's contract), so the global model is put back as a
 * safetensors image of the trainer's copy of it, the verified values, for the next step to
 * train from again. The work arenas go first so that this stays under the training peak. */
static fl_status model_restore(fl_client *c, fl_client_trainer *tr) {
    struct round *r = &c->r;
    size_t len = 0;
    fl__client_trainer_release_work(tr);
    fl_status rc = fl_client_trainer_set_params(tr, fl__client_trainer_global_ptr(tr),
                                                fl_client_trainer_num_params(tr));
    if (rc == FL_OK && fl_client_trainer_save(tr, NULL, 0, &len) != FL_ERR_TOO_LARGE)
        rc = FL_ERR_NOMEM; /* the size query fails only when the writer cannot allocate */
    if (rc == FL_OK && (r->model = fl__alloc(&c->alloc, len)) == NULL)
        rc = FL_ERR_NOMEM;
    if (rc == FL_OK) {
        r->model_cap = r->model_len = len;
        rc = fl_client_trainer_save(tr, r->model, len, &len);
    }
    return rc;
}

static fl_status train_builtin(fl_client *c, const fl_client_train_params *p, void **vec,
                               size_t *vlen, size_t *wb, uint64_t *used, double *loss) {
    struct round *r = &c->r;
    fl_client_trainer *tr = NULL;
    if (!c->blas_advised) {
        char adv[256];
        c->blas_advised = 1;
        if (fl__client_blas_advice(adv, sizeof(adv)))
            log_msg(c, FL_LOG_WARN, "%s", adv);
    }
    fl_status rc = fl_client_trainer_create(&tr, r->model, r->model_len,
                                            fl__client_ext_alloc(&c->alloc));
    if (rc != FL_OK) {
        fl__err_set(&c->err, rc, "built-in trainer: %s",
                    tr ? fl_client_trainer_errmsg(tr) : fl_status_str(rc));
        if (rc == FL_ERR_FORMAT || rc == FL_ERR_UNSUPPORTED) {
            /* Re-run to get the message (create frees the handle on failure). */
            fl_safetensors *st = NULL;
            size_t nl, np;
            struct fl__client_layer ly[FL_CLIENT_MAX_LAYERS];
            if (fl_safetensors_create(&st, fl__client_ext_alloc(&c->alloc)) == FL_OK &&
                fl_safetensors_parse(st, r->model, r->model_len) == FL_OK)
                fl__client_net_from_safetensors(st, ly, &nl, &np, &c->err);
            fl_safetensors_destroy(st);
        }
        return rc;
    }
    /* The trainer holds its own copy: the downloaded bytes can go (memory peak). */
    fl__free(&c->alloc, r->model, r->model_cap);
    r->model = NULL;
    r->model_cap = r->model_len = 0;
    rc = fl__client_trainer_train_store_cb(tr, c->store, p, used, loss, peek_interrupt, c);
    if (rc == FL_ERR_CANCELLED && (rc = model_restore(c, tr)) == FL_OK)
        rc = FL_ERR_CANCELLED;
    if (rc != FL_OK) {
        fl__err_set(&c->err, rc, "training: %s", fl_client_trainer_errmsg(tr));
        fl_client_trainer_destroy(tr);
        return rc;
    }
    fl__client_trainer_release_work(tr);
    struct builtin_src bs = {c, tr};
    struct fl__client_update_src src = {builtin_get, builtin_release, &bs};
    rc = fl__client_update_build(vec, vlen, wb, &r->task, &src, *used, c->obs, c->obs_user,
                                 &c->alloc, &c->err);
    fl_client_trainer_destroy(bs.tr);
    return rc;
}

static void do_train(fl_client *c, int64_t now) {
    struct round *r = &c->r;
    fl_client_train_params p = r->task.train;
    p.momentum = c->momentum;
    p.weight_decay = c->weight_decay;
    p.seed = fl__client_rng_next(&c->rng);
    void *vec = NULL;
    size_t vlen = 0, wb = 4;
    uint64_t used = 0;
    double loss = 0;
    fl_status rc = c->train_fn ? train_custom(c, &p, &vec, &vlen, &wb, &used)
                               : train_builtin(c, &p, &vec, &vlen, &wb, &used, &loss);
    if (rc == FL_ERR_CANCELLED) {
        /* The round goes on: training restarts on the next step if time allows. */
        return;
    }
    if (rc != FL_OK) {
        STAT_SET(c, last_error, rc);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    if (r->model) {
        fl__free(&c->alloc, r->model, r->model_cap);
        r->model = NULL;
        r->model_cap = r->model_len = 0;
    }
    pthread_mutex_lock(&c->lock);
    c->stats.examples_trained = used;
    c->stats.train_loss = loss;
    pthread_mutex_unlock(&c->lock);
    if (!r->task.secagg) {
        /* Plain upload (section 5.2): the round header "FLUP" || u32le 1 || u64le round id,
         * which binds the body to this round, then little-endian words. The vector grows
         * in place by the header (no second copy of the update at the peak; a plain
         * update is sent to the server in the clear, so a moved block left unwiped by
         * realloc holds nothing the server does not see). */
        size_t len = 16 + vlen * wb;
        uint8_t *post = fl__realloc(&c->alloc, vec, vlen * wb, len);
        if (!post) {
            fl_memzero(vec, vlen * wb);
            fl__free(&c->alloc, vec, vlen * wb);
            fl__err_set(&c->err, FL_ERR_NOMEM, "update: out of memory");
            STAT_SET(c, last_error, FL_ERR_NOMEM);
            round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
            return;
        }
        /* Back to front: word i moves to 16 + i * wb, past where it was read from. */
        if (wb == 4)
            for (size_t i = vlen; i-- > 0;) {
                uint32_t v;
                memcpy(&v, post + 4 * i, 4);
                fl__put_u32le(post + 16 + 4 * i, v);
            }
        else
            for (size_t i = vlen; i-- > 0;) {
                uint64_t v;
                memcpy(&v, post + 8 * i, 8);
                fl__put_u64le(post + 16 + 8 * i, v);
            }
        memcpy(post, "FLUP", 4);
        fl__put_u32le(post + 4, 1);
        fl__put_u64le(post + 8, (uint64_t)r->id);
        r->post = post;
        r->post_cap = r->post_len = len;
        c->next_ms = now;
        set_state(c, FL_CLIENT_STATE_UPLOAD);
        return;
    }
    fl_secagg_config sc;
    fl_secagg_config_init(&sc);
    sc.num_clients = r->task.sa_clients;
    sc.dim = (uint32_t)vlen;
    sc.bits = r->task.modulus_bits;
    sc.degree = r->task.sa_neighbors;
    sc.threshold = r->task.sa_threshold;
    sc.norm_bits = r->task.sa_norm_bits;
    sc.norm_dim = r->task.sa_norm_dim;
    sc.norm_bound2 = r->task.sa_norm_bound2;
    sc.norm_tail_max = r->task.sa_norm_weight_max;
    sc.reveal_pair_seeds = r->task.sa_reveal_seeds;
    sc.backend = (fl_secagg_backend)c->secagg_backend;
    secagg_context(sc.context, r);
    /* Active mode (on_task refused it without an identity): the advertisement is signed
     * with the device key, and every neighbour's certificate is checked against the
     * authority key the app pinned, never one the coordinator could supply. */
    fl_secagg_identity id;
    memset(&id, 0, sizeof(id));
    if (r->task.sa_active) {
        sc.active = 1;
        sc.device_certs = 1;
        memcpy(sc.verify_key, c->sa_authority, sizeof(sc.verify_key));
        id.struct_size = sizeof(id);
        memcpy(id.signing_key, c->sa_signing_key, sizeof(id.signing_key));
        memcpy(id.cert, c->sa_cert, sizeof(id.cert));
        memcpy(id.device_id, c->sa_device_id, sizeof(id.device_id));
    }
    char em[160] = "";
    rc = fl_secagg_config_resolve(&sc, em, sizeof(em));
    if (rc == FL_OK)
        rc = fl_secagg_client_create(&r->sa, &sc, (uint64_t)r->id, r->task.sa_index,
                                     r->task.sa_active ? &id : NULL,
                                     fl__client_ext_alloc(&c->alloc));
    else
        fl__err_set(&c->err, rc, "secagg parameters: %s", em);
    if (rc != FL_OK && !r->sa && !em[0])
        fl__err_set(&c->err, rc, "secagg client: %s", fl_status_str(rc));
    fl_memzero(&id, sizeof(id)); /* the secagg client keeps its own copy */
    if (rc == FL_OK)
        rc = fl_secagg_client_set_input(r->sa, vec, vlen);
    fl_memzero(vec, vlen * wb);
    fl__free(&c->alloc, vec, vlen * wb);
    if (rc == FL_OK)
        rc = fl_secagg_client_start(r->sa, &r->sa_out, &r->sa_out_len);
    if (rc != FL_OK) {
        if (r->sa)
            fl__err_set(&c->err, rc, "secagg: %s", fl_secagg_client_errmsg(r->sa));
        STAT_SET(c, last_error, rc);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    r->sa_limit = fl_secagg_max_message_bytes(&sc);
    r->sa_phase = 0;
    r->sa_step = SA_POST;
    c->next_ms = now;
    set_state(c, FL_CLIENT_STATE_SECAGG);
}

/* Round outcome JSON (section 5.3). Returns 1 when the round is over, 0 when it is not
 * over yet (the caller schedules the next poll), -1 when the body is malformed (handled as
 * a transient failure: retried after the backoff, or the round given up; the caller must
 * not reschedule). */
static int on_outcome_json(fl_client *c, int64_t now) {
    struct jdoc d;
    char state[24];
    if (parse_json(c, &d) != FL_OK ||
        !fl__client_json_str(&d.j, fl__client_json_get(&d.j, 0, "state"), state, sizeof(state))) {
        transient(c, now, FL_ERR_PROTOCOL, "round outcome is malformed");
        return -1;
    }
    if (strcmp(state, "completed") == 0) {
        round_end(c, now, 0, 1, NULL);
        return 1;
    }
    if (strcmp(state, "aborted") == 0 || strcmp(state, "abandoned") == 0) {
        fl__err_set(&c->err, FL_ERR_ABORTED, "round %s", state);
        STAT_SET(c, last_error, FL_ERR_ABORTED);
        round_end(c, now, backoff_ms(c, 0), 0, state);
        return 1;
    }
    return 0;
}

static void on_upload(fl_client *c, int64_t now) {
    int st = c->resp.status;
    if (st == 202 || st == 200) {
        STAT_ADD(c, uploads, 1);
        fl_memzero(c->r.post, c->r.post_len);
        exchange_ok(c);
        c->next_ms = now;
        set_state(c, FL_CLIENT_STATE_OUTCOME);
        return;
    }
    round_error(c, now, "update upload");
}

static void on_outcome(fl_client *c, int64_t now) {
    if (c->resp.status != 200) {
        round_error(c, now, "round status");
        return;
    }
    if (on_outcome_json(c, now) == 0) {
        /* Not over yet: a long poll that timed out is renewed at once; without long polls
         * (long_poll_s 0) the device polls again after backoff_initial_ms. An answer all
         * the same: the backoff starts over. */
        exchange_ok(c);
        c->next_ms = now + (c->long_poll_s ? 0 : c->backoff_initial_ms);
        set_state(c, c->state);
    }
}

static void on_secagg(fl_client *c, int64_t now) {
    struct round *r = &c->r;
    int st = c->resp.status;
    if (r->sa_step == SA_POST) {
        if (st == 202 || st == 200) {
            if (r->sa_phase == 2)
                STAT_ADD(c, uploads, 1);
            r->sa_step = SA_RESULT;
            exchange_ok(c);
            c->next_ms = now;
            set_state(c, c->state);
            return;
        }
        round_error(c, now, "secagg post");
        return;
    }
    if (st == 204) {
        /* Long poll timed out: poll again at once (Retry-After: 0); an answer, so the
         * backoff starts over. */
        exchange_ok(c);
        c->next_ms = now + retry_after_header_ms(&c->resp);
        set_state(c, c->state);
        return;
    }
    if (st != 200) {
        round_error(c, now, "secagg result");
        return;
    }
    if (r->sa_phase == 4) {
        if (on_outcome_json(c, now) == 0) {
            exchange_ok(c);
            c->next_ms = now + (c->long_poll_s ? 0 : c->backoff_initial_ms);
            set_state(c, c->state);
        }
        return;
    }
    fl_secagg_msg_type type;
    fl_status rc = fl_secagg_message_peek(&type, NULL, NULL, c->resp.body, c->resp.len);
    if (rc == FL_OK)
        rc = fl_secagg_client_handle(r->sa, c->resp.body, c->resp.len, &r->sa_out,
                                     &r->sa_out_len);
    if (rc != FL_OK) {
        fl__err_set(&c->err, rc, "secagg: %s", fl_secagg_client_errmsg(r->sa));
        STAT_SET(c, last_error, rc);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    switch (type) {
    case FL_SECAGG_MSG_KEYS: r->sa_phase = 1; break;
    case FL_SECAGG_MSG_CIPHERTEXTS: r->sa_phase = 2; break;
    case FL_SECAGG_MSG_CONSISTENCY_REQ: r->sa_phase = 3; break;
    case FL_SECAGG_MSG_UNMASK_REQ: r->sa_phase = 4; break;
    default:
        fl__err_set(&c->err, FL_ERR_PROTOCOL, "unexpected secagg message type %d", (int)type);
        STAT_SET(c, last_error, FL_ERR_PROTOCOL);
        round_end(c, now, backoff_ms(c, 0), 0, fl__err_msg(&c->err));
        return;
    }
    r->sa_step = SA_POST;
    exchange_ok(c);
    c->next_ms = now;
    set_state(c, c->state);
}

/* ---- the step ---- */

fl_status fl_client_step(fl_client *c, int64_t *next_ms) {
    if (!c)
        return FL_ERR_MISUSE;
    int64_t now = c->clock(c->clock_user);
    fl_status rc = FL_OK;
    if (take_interrupt(c)) {
        if (c->sent && c->tp.cancel)
            c->tp.cancel(c->tp.ctx);
        c->sent = 0;
        rc = fl__err_set(&c->err, FL_ERR_CANCELLED, "interrupted");
        goto out;
    }
    if (c->state == FL_CLIENT_STATE_FAILED) {
        rc = c->sticky;
        goto out;
    }
    if (!c->sent) {
        if (now < c->next_ms)
            goto out;
        if (c->state == FL_CLIENT_STATE_IDLE)
            set_state(c, c->token[0] ? FL_CLIENT_STATE_CHECKIN : FL_CLIENT_STATE_ENROLL);
        if (c->state == FL_CLIENT_STATE_TRAIN) {
            do_train(c, now);
            if (c->state == FL_CLIENT_STATE_TRAIN && take_interrupt(c))
                rc = fl__err_set(&c->err, FL_ERR_CANCELLED, "interrupted during training");
            goto out;
        }
        size_t limit;
        if (build_request(c, &limit) != FL_OK) {
            rc = fl__err_set(&c->err, FL_ERR_INTERNAL, "could not build the request");
            STAT_SET(c, last_error, rc);
            goto out;
        }
        resp_reset(&c->resp, limit);
        c->attempt_ms = now;
        rc = c->tp.send(c->tp.ctx, &c->req);
        if (rc == FL_ERR_AGAIN)
            goto out;
        if (rc != FL_OK) {
            transient(c, now, rc, "transport send failed");
            rc = FL_OK;
            goto out;
        }
        STAT_ADD(c, bytes_sent, c->req.body_len);
        c->sent = 1;
    }
    rc = c->tp.recv(c->tp.ctx, &c->resp);
    if (rc == FL_ERR_AGAIN)
        goto out;
    c->sent = 0;
    now = c->clock(c->clock_user);
    STAT_ADD(c, bytes_received, c->resp.len);
    if (rc != FL_OK || c->resp.status == 0) {
        char what[320];
        snprintf(what, sizeof(what), "%s %.200s: %s", c->req.method, c->path,
                 rc == FL_ERR_TOO_LARGE ? "response over its size limit"
                                        : rc == FL_OK ? "no status" : fl_status_str(rc));
        if (rc == FL_ERR_TOO_LARGE && c->r.active) {
            fl__err_set(&c->err, rc, "%s", what);
            STAT_SET(c, last_error, rc);
            round_end(c, now, backoff_ms(c, 0), 0, what);
        } else {
            transient(c, now, rc == FL_OK ? FL_ERR_PROTOCOL : rc, what);
        }
        rc = FL_OK;
        goto out;
    }
    switch (c->state) {
    case FL_CLIENT_STATE_ENROLL: on_enroll(c, now); break;
    case FL_CLIENT_STATE_CHECKIN: on_checkin(c, now); break;
    case FL_CLIENT_STATE_TASK: on_task(c, now); break;
    case FL_CLIENT_STATE_MODEL: on_model(c, now); break;
    case FL_CLIENT_STATE_UPLOAD: on_upload(c, now); break;
    case FL_CLIENT_STATE_OUTCOME: on_outcome(c, now); break;
    case FL_CLIENT_STATE_SECAGG: on_secagg(c, now); break;
    default: break;
    }
    if (c->resp.body && c->resp.len)
        fl_memzero(c->resp.body, c->resp.len);
    resp_reset(&c->resp, 0);
    rc = c->state == FL_CLIENT_STATE_FAILED ? c->sticky : FL_OK;
out:
    pthread_mutex_lock(&c->lock);
    c->stats.next_action_ms = c->next_ms;
    c->stats.state = c->state;
    pthread_mutex_unlock(&c->lock);
    if (next_ms)
        *next_ms = c->sent ? now : c->next_ms;
    return rc;
}

fl_status fl_client_run(fl_client *c, uint32_t max_wait_ms) {
    if (!c)
        return FL_ERR_MISUSE;
    c->round_ended = 0;
    c->retry_gave_up = 0;
    for (;;) {
        int64_t next = 0;
        fl_status rc = fl_client_step(c, &next);
        if (rc == FL_ERR_AGAIN) {
            fl__client_sleep_ms(1); /* a non-blocking transport under a blocking loop */
            continue;
        }
        if (rc != FL_OK)
            return rc;
        if (c->retry_gave_up) /* before round_ended: a task download given up ends both */
            return FL_ERR_TIMEOUT;
        if (c->round_ended)
            return FL_OK;
        int64_t now = c->clock(c->clock_user);
        if (next > now) {
            if (next - now > (int64_t)max_wait_ms)
                return FL_ERR_AGAIN;
            /* Sleep in slices so that an interrupt is noticed within 50 ms. */
            while (next > now && !atomic_load(&c->interrupt)) {
                fl__client_sleep_ms(next - now < 50 ? next - now : 50);
                now = c->clock(c->clock_user);
            }
        }
    }
}

/* ---- optional worker ---- */

static void *worker_main(void *arg) {
    fl_client *c = arg;
    while (!atomic_load(&c->worker_stop)) {
        fl_status rc = fl_client_run(c, 1000);
        if (rc != FL_OK && rc != FL_ERR_AGAIN && rc != FL_ERR_CANCELLED && rc != FL_ERR_TIMEOUT)
            break; /* sticky failure: nothing more to do */
    }
    return NULL;
}

fl_status fl_client_worker_start(fl_client *c) {
    if (!c)
        return FL_ERR_MISUSE;
    /* The running worker owns c->err (it may be writing it now): answer without a message. */
    if (c->worker_running)
        return FL_ERR_STATE;
    atomic_store(&c->worker_stop, 0);
    if (pthread_create(&c->worker, NULL, worker_main, c) != 0)
        return fl__err_set(&c->err, FL_ERR_NOMEM, "could not start the worker thread");
    c->worker_running = 1;
    return FL_OK;
}

void fl_client_worker_stop(fl_client *c) {
    if (!c || !c->worker_running)
        return;
    atomic_store(&c->worker_stop, 1);
    fl_client_interrupt(c);
    pthread_join(c->worker, NULL);
    c->worker_running = 0;
    atomic_store(&c->interrupt, 0);
}
