/* Error and edge paths of the client SDK (session 11 coverage work), against a scripted
 * coordinator in memory: a transport of the test's own answers every request from a
 * default plan (enroll, select for round 7, a signed plain task and model, accept the
 * upload, report "completed") that each test bends with overrides: malformed bodies,
 * unexpected statuses, signature header faults, oversized bodies, transport failures,
 * non-blocking answers and interrupts. The coordinator's key is made here, so the bodies
 * are signed exactly as docs/protocol.md 4.1 says and only the intended fault differs.
 * Also: config and argument checks, the standalone response API, the worker, training
 * interrupted and resumed, and a single allocation failure at every point of a round. */
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#ifdef FL_TEST_HAVE_CURL
#include <curl/curl.h>
#endif

#include "fl_test.h"
#include "flotilla/client.h"

#define POP "pop"
#define ETOK "flp_edges-enrollment-token-0000"
#define CTOK "flc_edges-client-token-000000000"
#define PID "0123456789abcdef0123456789abcdef"
#define T0 1767225600000LL
#define DIM_IN 4
#define DIM_OUT 3
#define UPD_DIM (DIM_IN * DIM_OUT + DIM_OUT)

/* ---- the scripted coordinator ---- */

enum kind { K_ENROLL, K_CHECKIN, K_TASK, K_MODEL, K_UPLOAD, K_STATUS, K_OTHER, K_N };

enum flag {
    F_NOSIG = 1 << 0,     /* no signature headers */
    F_BADHEX = 1 << 1,    /* Flotilla-Content-SHA256 is not hex */
    F_BADKID = 1 << 2,    /* another key id */
    F_BADB64 = 1 << 3,    /* signature header not base64 */
    F_OTHERKEY = 1 << 4,  /* signed by another key */
    F_LONGHDR = 1 << 5,   /* a signature header too long for the SDK's slot */
    F_CTRLHDR = 1 << 6,   /* a control character in the signature header */
    F_NOSTATUS = 1 << 7,  /* recv returns FL_OK without a status */
    F_FLOOD = 1 << 8,     /* the body grows until the SDK's limit refuses it */
};

struct ovr {
    int kind;
    int skip;                /* matching requests let through first */
    int count;               /* times applied (-1 = for ever) */
    int status;              /* 0 = the default status */
    const char *body;        /* NULL = the default body */
    unsigned flags;
    const char *retry_after; /* Retry-After header value, or NULL */
    fl_status rc;            /* recv returns this (FL_OK = deliver the answer) */
};

struct srv {
    uint8_t sk[64], pk[32], sk2[64], pk2[32];
    int64_t now;
    fl_client *c;            /* for interrupts from inside callbacks */
    /* what the SDK sent */
    int sends, recvs, cancels, by_kind[K_N];
    char path[512], method[8], idem[80], last_idem[K_N][80];
    /* behaviour */
    struct ovr ovr[16];
    int n_ovr, seen[16];
    int recv_again;          /* recv answers FL_ERR_AGAIN this many times first */
    fl_status send_rc;       /* send returns this once (FL_OK = accept) */
    const char *checkin;     /* check-in body, NULL = selected for round 7 */
    char model_fields[200];  /* extra fields of the task's "model" object */
    uint8_t *model;
    size_t model_len;
    sem_t served;            /* posted after each answer (the worker test) */
    int pending;             /* a request was accepted by send */
    enum kind cur;
    int arm_interrupt;       /* the store's clock interrupts the client at its next read */
};

static int64_t srv_clock(void *u) {
    return ((struct srv *)u)->now;
}

/* The store's clock: read when training prunes the store, so an armed interrupt lands in
 * the middle of the built-in trainer's run (before its first batch). */
static int64_t store_clock(void *u) {
    struct srv *s = u;
    if (s->arm_interrupt && s->c) {
        s->arm_interrupt = 0;
        fl_client_interrupt(s->c);
    }
    return s->now;
}

static enum kind kind_of(const char *method, const char *path) {
    if (strcmp(path, "/v1/enroll") == 0)
        return K_ENROLL;
    if (strcmp(path, "/v1/checkin") == 0)
        return K_CHECKIN;
    if (strstr(path, "/task"))
        return K_TASK;
    if (strncmp(path, "/v1/models/", 11) == 0)
        return K_MODEL;
    if (strcmp(method, "POST") == 0 && strstr(path, "/update"))
        return K_UPLOAD;
    if (strstr(path, "/status"))
        return K_STATUS;
    return K_OTHER;
}

static fl_status s_send(void *ctx, const fl_client_request *req) {
    struct srv *s = ctx;
    assert_int_equal(req->struct_size, sizeof(*req));
    s->sends++;
    if (s->send_rc != FL_OK) {
        fl_status rc = s->send_rc;
        s->send_rc = FL_OK;
        return rc;
    }
    snprintf(s->path, sizeof(s->path), "%s", req->path);
    snprintf(s->method, sizeof(s->method), "%s", req->method);
    s->idem[0] = '\0';
    for (size_t i = 0; i < req->n_headers; i++)
        if (strncmp(req->headers[i], "Idempotency-Key: ", 17) == 0)
            snprintf(s->idem, sizeof(s->idem), "%s", req->headers[i] + 17);
    s->cur = kind_of(req->method, req->path);
    s->by_kind[s->cur]++;
    snprintf(s->last_idem[s->cur], sizeof(s->last_idem[s->cur]), "%s", s->idem);
    s->pending = 1;
    return FL_OK;
}

static void s_cancel(void *ctx) {
    struct srv *s = ctx;
    s->cancels++;
    s->pending = 0;
}

static void hex_of(char *out, const uint8_t *p, size_t n) {
    sodium_bin2hex(out, 2 * n + 1, p, n);
}

static size_t task_body(struct srv *s, char *out, size_t cap) {
    int64_t dl = s->now + 600000;
    int n = snprintf(
        out, cap,
        "{\"deadlines\":{\"advertise_unix_ms\":%lld,\"consistency_unix_ms\":%lld,"
        "\"masked_unix_ms\":%lld,\"share_unix_ms\":%lld,\"unmask_unix_ms\":%lld},"
        "\"dp\":{\"clip_norm\":1.0,\"clip_kind\":\"flat\",\"granularity\":0.0009765625,"
        "\"mode\":\"none\",\"modulus_bits\":32},"
        "\"kind\":\"sync\",\"model\":{\"url\":\"/v1/models/pop/1\",\"version\":1%s},"
        "\"population\":\"pop\",\"protocol\":\"flotilla/v1\",\"round_id\":7,"
        "\"secagg\":{\"enabled\":false},"
        "\"training\":{\"batch_size\":4,\"epochs\":1,\"learning_rate\":0.05},"
        "\"update\":{\"dim\":%d,\"length\":%d,\"tensors\":[\"fc1.weight\",\"fc1.bias\"],"
        "\"weighting\":\"uniform\"}}",
        (long long)dl, (long long)dl, (long long)dl, (long long)dl, (long long)dl,
        s->model_fields, UPD_DIM, UPD_DIM + 1);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* Adds the signature headers of docs/protocol.md 4.1 (context, id, body), bent by flags. */
static fl_status sign_headers(struct srv *s, fl_client_response *resp, const char *context,
                              uint64_t id, const uint8_t *body, size_t len, unsigned flags) {
    uint8_t h[32], msg[64], sig[64];
    char hex[65], b64[120], kid[FL_CLIENT_KEY_ID_CHARS + 1];
    crypto_hash_sha256(h, body, len);
    size_t cl = strlen(context);
    memcpy(msg, context, cl);
    msg[cl] = 0;
    for (int i = 0; i < 8; i++)
        msg[cl + 1 + i] = (uint8_t)(id >> (8 * i));
    memcpy(msg + cl + 9, h, 32);
    crypto_sign_detached(sig, NULL, msg, cl + 41, flags & F_OTHERKEY ? s->sk2 : s->sk);
    hex_of(hex, h, 32);
    if (flags & F_BADHEX)
        hex[0] = 'z';
    sodium_bin2base64(b64, sizeof(b64), sig, 64, sodium_base64_VARIANT_ORIGINAL);
    if (flags & F_BADB64)
        b64[3] = '*';
    fl_client_key_id(kid, flags & F_BADKID ? s->pk2 : s->pk);
    fl_status rc = fl_client_response_add_header(resp, "flotilla-content-sha256", 23, hex, 64);
    if (rc != FL_OK)
        return rc;
    if (flags & F_LONGHDR) {
        char big[300];
        memset(big, 'A', sizeof(big));
        rc = fl_client_response_add_header(resp, "Flotilla-Signature", 18, big, sizeof(big));
    } else if (flags & F_CTRLHDR) {
        b64[5] = '\x01';
        rc = fl_client_response_add_header(resp, "Flotilla-Signature", 18, b64, strlen(b64));
    } else {
        rc = fl_client_response_add_header(resp, "Flotilla-Signature", 18, b64, strlen(b64));
    }
    if (rc == FL_OK)
        rc = fl_client_response_add_header(resp, "FLOTILLA-KEY-ID", 15, kid, strlen(kid));
    return rc;
}

static fl_status s_recv(void *ctx, fl_client_response *resp) {
    struct srv *s = ctx;
    assert_true(s->pending);
    if (s->recv_again > 0) {
        s->recv_again--;
        return FL_ERR_AGAIN;
    }
    s->pending = 0;
    s->recvs++;
    /* the default plan */
    int status = 200;
    char buf[4096], kid[FL_CLIENT_KEY_ID_CHARS + 1];
    const uint8_t *body = (const uint8_t *)buf;
    size_t len = 0;
    const char *sctx = NULL;
    uint64_t sid = 0;
    switch (s->cur) {
    case K_ENROLL:
        fl_client_key_id(kid, s->pk);
        status = 201;
        len = (size_t)snprintf(buf, sizeof(buf),
                               "{\"client_token\":\"" CTOK "\",\"coordinator_key_id\":\"%s\","
                               "\"population\":\"" POP "\",\"protocol\":\"flotilla/v1\"}",
                               kid);
        break;
    case K_CHECKIN:
        len = (size_t)snprintf(buf, sizeof(buf), "%s",
                               s->checkin ? s->checkin
                                          : "{\"status\":\"selected\",\"round_id\":7,"
                                            "\"participation_id\":\"" PID "\","
                                            "\"task_url\":\"/v1/rounds/7/task\"}");
        break;
    case K_TASK:
        len = task_body(s, buf, sizeof(buf));
        sctx = "flotilla/v1/task";
        sid = 7;
        break;
    case K_MODEL:
        body = s->model;
        len = s->model_len;
        sctx = "flotilla/v1/model";
        sid = 1;
        break;
    case K_UPLOAD:
        status = 202;
        len = (size_t)snprintf(buf, sizeof(buf), "{}");
        break;
    case K_STATUS:
        len = (size_t)snprintf(buf, sizeof(buf), "{\"state\":\"completed\"}");
        break;
    default:
        status = 404;
        break;
    }
    /* the first override that matches */
    unsigned flags = 0;
    const char *retry_after = NULL;
    for (int i = 0; i < s->n_ovr; i++) {
        struct ovr *o = &s->ovr[i];
        if (o->kind != (int)s->cur || o->count == 0)
            continue;
        if (s->seen[i]++ < o->skip)
            continue;
        if (o->count > 0)
            o->count--;
        if (o->rc != FL_OK)
            return o->rc;
        if (o->status)
            status = o->status;
        if (o->body) {
            body = (const uint8_t *)o->body;
            len = strlen(o->body);
        }
        flags = o->flags;
        retry_after = o->retry_after;
        break;
    }
    if (flags & F_NOSTATUS)
        return FL_OK;
    fl_status rc = fl_client_response_set_status(resp, status);
    if (rc == FL_OK && retry_after)
        rc = fl_client_response_add_header(resp, "Retry-After", 11, retry_after,
                                           strlen(retry_after));
    if (rc == FL_OK && sctx && !(flags & F_NOSIG))
        rc = sign_headers(s, resp, sctx, sid, body, len, flags);
    if (rc == FL_OK && (flags & F_FLOOD)) {
        static const uint8_t chunk[8192];
        while ((rc = fl_client_response_append(resp, chunk, sizeof(chunk))) == FL_OK)
            ;
        return rc; /* FL_ERR_TOO_LARGE, as the transport contract says */
    }
    if (rc == FL_OK && len)
        rc = fl_client_response_append(resp, body, len);
    if (rc != FL_OK)
        return rc; /* FL_ERR_NOMEM from the SDK's allocator (the OOM walk) */
    sem_post(&s->served);
    return FL_OK;
}

static void srv_init(struct srv *s) {
    memset(s, 0, sizeof(*s));
    assert_true(sodium_init() >= 0);
    uint8_t seed[32];
    memset(seed, 3, sizeof(seed));
    crypto_sign_seed_keypair(s->pk, s->sk, seed);
    memset(seed, 4, sizeof(seed));
    crypto_sign_seed_keypair(s->pk2, s->sk2, seed);
    s->now = T0;
    uint32_t sizes[2] = {DIM_IN, DIM_OUT};
    assert_int_equal(fl_client_model_init(NULL, 0, &s->model_len, sizes, 2, 9, NULL),
                     FL_ERR_TOO_LARGE);
    s->model = malloc(s->model_len);
    assert_non_null(s->model);
    assert_int_equal(fl_client_model_init(s->model, s->model_len, &s->model_len, sizes, 2, 9,
                                          NULL),
                     FL_OK);
    /* The task names the model's size and hash by default. */
    uint8_t h[32];
    char hex[65];
    crypto_hash_sha256(h, s->model, s->model_len);
    hex_of(hex, h, 32);
    snprintf(s->model_fields, sizeof(s->model_fields), ",\"bytes\":%zu,\"sha256\":\"%s\"",
             s->model_len, hex);
    assert_int_equal(sem_init(&s->served, 0, 0), 0);
}

static void srv_free(struct srv *s) {
    free(s->model);
    sem_destroy(&s->served);
}

/* Serves text as the (signed) model instead of the real one. */
static void srv_set_model(struct srv *s, const char *text) {
    free(s->model);
    s->model_len = strlen(text);
    s->model = malloc(s->model_len);
    assert_non_null(s->model);
    memcpy(s->model, text, s->model_len);
}

static void srv_add(struct srv *s, struct ovr o) {
    assert_true(s->n_ovr < 16);
    s->ovr[s->n_ovr++] = o;
}

/* ---- devices ---- */

struct dev {
    fl_client_store *store;
    fl_client *c;
};

static fl_status custom_train(void *user, fl_client_tensor *t, size_t n,
                              const fl_client_train_params *p, fl_client_store *st,
                              uint64_t *used);

struct train_ctl {
    int calls;
    fl_status fail;          /* returned on the first call (FL_OK = train) */
    struct srv *s;           /* with FL_ERR_CANCELLED: interrupt the client first */
};

static void store_open(struct dev *d, struct srv *s, const fl_allocator *alloc) {
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = DIM_IN;
    sc.max_age_ms = 86400000; /* so that training reads the store's clock */
    sc.clock = store_clock;
    sc.clock_user = s;
    sc.allocator = alloc;
    assert_int_equal(fl_client_store_open(&d->store, &sc, NULL, 0), FL_OK);
    for (int i = 0; i < 8; i++) {
        float x[DIM_IN] = {0.1f * (float)i, 1.0f - 0.1f * (float)i, (float)(i % 3), 0.5f};
        assert_int_equal(fl_client_store_add(d->store, x, DIM_IN, i % DIM_OUT), FL_OK);
    }
}

static void cfg_fill(fl_client_config *cfg, struct dev *d, struct srv *s) {
    fl_client_config_init(cfg);
    cfg->population = POP;
    cfg->region = "EU";
    memcpy(cfg->coordinator_key, s->pk, 32);
    cfg->has_coordinator_key = 1;
    cfg->enrollment_token = ETOK;
    cfg->transport.struct_size = sizeof(cfg->transport);
    cfg->transport.send = s_send;
    cfg->transport.recv = s_recv;
    cfg->transport.cancel = s_cancel;
    cfg->transport.ctx = s;
    cfg->store = d->store;
    cfg->clock = srv_clock;
    cfg->clock_user = s;
    cfg->seed = 5;
    cfg->backoff_initial_ms = 100;
    cfg->backoff_max_ms = 1000;
    cfg->long_poll_s = 0;
}

static void dev_open_cfg(struct dev *d, struct srv *s, const fl_client_config *cfg) {
    char err[256] = "";
    fl_status rc = fl_client_create(&d->c, cfg, err, sizeof(err));
    if (rc != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_int_equal(rc, FL_OK);
    s->c = d->c;
}

static void dev_open(struct dev *d, struct srv *s) {
    fl_client_config cfg;
    store_open(d, s, NULL);
    cfg_fill(&cfg, d, s);
    dev_open_cfg(d, s, &cfg);
}

static void dev_close(struct dev *d) {
    fl_client_destroy(d->c);
    fl_client_store_close(d->store);
    memset(d, 0, sizeof(*d));
}

static fl_client_stats stats(const struct dev *d) {
    fl_client_stats cs;
    memset(&cs, 0, sizeof(cs));
    cs.struct_size = sizeof(cs);
    assert_int_equal(fl_client_stats_get(d->c, &cs), FL_OK);
    return cs;
}

/* One step at the client's due time (the frozen clock jumps there first). */
static fl_status step(struct dev *d, struct srv *s) {
    fl_client_stats cs = stats(d);
    if (cs.next_action_ms > s->now)
        s->now = cs.next_action_ms;
    return fl_client_step(d->c, NULL);
}

/* Steps until the client is in state st or n steps pass; asserts it got there. */
static void step_until(struct dev *d, struct srv *s, fl_client_state st, int n) {
    for (int i = 0; i < n && stats(d).state != st; i++)
        assert_int_equal(step(d, s), FL_OK);
    assert_int_equal(stats(d).state, st);
}

static bool msg_has(const struct dev *d, const char *what) {
    const char *m = fl_client_errmsg(d->c);
    if (!strstr(m, what)) {
        fprintf(stderr, "errmsg \"%s\" lacks \"%s\"\n", m, what);
        return false;
    }
    return true;
}

/* ---- config and argument checks ---- */

static void expect_create_misuse(fl_client_config *cfg, const char *field) {
    fl_client *c = (fl_client *)1;
    char err[256] = "";
    assert_int_equal(fl_client_create(&c, cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_null(c);
    if (!strstr(err, field))
        fprintf(stderr, "create error \"%s\" lacks \"%s\"\n", err, field);
    assert_non_null(strstr(err, field));
}

static void *bad_alloc(void *u, size_t n) {
    (void)u;
    (void)n;
    return NULL;
}

static void plain_free(void *u, void *p, size_t n) {
    (void)u;
    (void)n;
    free(p);
}

static void test_config_fields(void **st) {
    (void)st;
    struct srv s;
    struct dev d = {0};
    srv_init(&s);
    store_open(&d, &s, NULL);
    fl_client_config cfg;
#define BAD(stmt, field)                                                                       \
    do {                                                                                       \
        cfg_fill(&cfg, &d, &s);                                                                \
        stmt;                                                                                  \
        expect_create_misuse(&cfg, field);                                                     \
    } while (0)
    BAD(cfg.struct_size = 12, "cfg.struct_size");
    BAD(cfg.population = "", "cfg.population");
    BAD(cfg.population = "a b", "cfg.population");
    BAD(cfg.region = NULL, "cfg.region");
    BAD(cfg.region = "E.U", "cfg.region");
    BAD(cfg.platform = "0123456789012345678901234567890123", "cfg.platform");
    BAD(cfg.platform = "linux/arm", "cfg.platform");
    BAD(cfg.has_coordinator_key = 0, "cfg.coordinator_key");
    BAD(cfg.client_token = "short", "cfg.client_token");
    BAD(cfg.enrollment_token = "flp_has a space in it, 123456", "cfg.enrollment_token");
    BAD(cfg.enrollment_token = NULL, "cfg.client_token or cfg.enrollment_token");
    BAD(cfg.transport.recv = NULL, "cfg.transport");
    BAD(cfg.transport.struct_size = 8, "cfg.transport");
    BAD(cfg.store = NULL, "cfg.store");
    BAD(cfg.momentum = 1.0, "cfg.momentum");
    BAD(cfg.momentum = -0.1, "cfg.momentum");
    BAD(cfg.weight_decay = -1, "cfg.weight_decay");
    BAD(cfg.weight_decay = 1e7, "cfg.weight_decay");
    BAD(cfg.max_model_bytes = 63, "cfg.max_model_bytes");
    BAD(cfg.max_model_bytes = ((uint64_t)1 << 40) + 1, "cfg.max_model_bytes");
    BAD(cfg.backoff_initial_ms = 0, "cfg.backoff_initial_ms");
    BAD(cfg.backoff_max_ms = 10, "cfg.backoff_initial_ms");
    BAD(cfg.request_timeout_ms = 99, "cfg.request_timeout_ms");
    BAD(cfg.long_poll_s = 61, "cfg.long_poll_s");
    BAD(cfg.secagg_backend = -1, "cfg.secagg_backend");
    BAD(cfg.secagg_backend = 99, "cfg.secagg_backend");
    fl_allocator half = {sizeof(half), bad_alloc, NULL, NULL, NULL};
    BAD(cfg.allocator = &half, "cfg.allocator");
#undef BAD
    /* NULL arguments: the message, and no crash without a buffer. */
    fl_client *c = (fl_client *)1;
    char err[128] = "";
    assert_int_equal(fl_client_create(&c, NULL, err, sizeof(err)), FL_ERR_MISUSE);
    assert_null(c);
    assert_non_null(strstr(err, "must not be NULL"));
    assert_int_equal(fl_client_create(NULL, &cfg, NULL, 0), FL_ERR_MISUSE);
    /* An allocator that fails at once: FL_ERR_NOMEM with a message, no handle. */
    cfg_fill(&cfg, &d, &s);
    fl_allocator none = {sizeof(none), bad_alloc, NULL, plain_free, NULL};
    cfg.allocator = &none;
    c = (fl_client *)1;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_NOMEM);
    assert_null(c);
    assert_string_equal(err, "out of memory");
    /* The default platform is used when none is given. */
    cfg_fill(&cfg, &d, &s);
    cfg.platform = NULL;
    dev_open_cfg(&d, &s, &cfg);
    assert_int_equal(step(&d, &s), FL_OK); /* the enrollment */
    assert_string_equal(s.path, "/v1/enroll");
    fl_client_destroy(d.c);
    fl_client_store_close(d.store);
    srv_free(&s);
}

static void test_handle_arguments(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    /* NULL handles */
    assert_string_equal(fl_client_errmsg(NULL), "no client handle");
    assert_int_equal(fl_client_step(NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_run(NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_worker_start(NULL), FL_ERR_MISUSE);
    fl_client_worker_stop(NULL);
    fl_client_worker_stop(d.c); /* none running: no-op */
    fl_client_interrupt(NULL);
    fl_client_destroy(NULL);
    /* eligibility */
    assert_int_equal(fl_client_set_eligibility(NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_set_eligibility(d.c, NULL), FL_ERR_MISUSE);
    assert_true(msg_has(&d, "struct_size"));
    fl_client_eligibility e = {sizeof(e) - 1, 1, 1, 1, 50};
    assert_int_equal(fl_client_set_eligibility(d.c, &e), FL_ERR_MISUSE);
    e.struct_size = sizeof(e);
    e.battery_pct = 101;
    assert_int_equal(fl_client_set_eligibility(d.c, &e), FL_ERR_MISUSE);
    assert_true(msg_has(&d, "battery_pct"));
    e.battery_pct = -2;
    assert_int_equal(fl_client_set_eligibility(d.c, &e), FL_ERR_MISUSE);
    e.battery_pct = -1; /* not reported: no battery_pct field at check-in */
    e.charging = 7;     /* normalised to true */
    assert_int_equal(fl_client_set_eligibility(d.c, &e), FL_OK);
    /* stats: a size that is neither the old nor the current one */
    fl_client_stats cs;
    memset(&cs, 0, sizeof(cs));
    cs.struct_size = 8;
    assert_int_equal(fl_client_stats_get(d.c, &cs), FL_ERR_MISUSE);
    assert_int_equal(fl_client_stats_get(d.c, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_stats_get(NULL, &cs), FL_ERR_MISUSE);
    /* token: not enrolled yet, then too small a buffer, NULLs */
    char tok[FL_CLIENT_TOKEN_MAX_CHARS + 1];
    assert_int_equal(fl_client_token(d.c, tok, sizeof(tok)), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_client_token(d.c, NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_token(NULL, tok, sizeof(tok)), FL_ERR_MISUSE);
    assert_int_equal(step(&d, &s), FL_OK); /* enrolled */
    assert_int_equal(fl_client_token(d.c, tok, strlen(CTOK)), FL_ERR_TOO_LARGE);
    assert_int_equal(fl_client_token(d.c, tok, strlen(CTOK) + 1), FL_OK);
    assert_string_equal(tok, CTOK);
    /* The check-in carries the normalised eligibility and no battery. */
    s.checkin = "{\"status\":\"retry\",\"retry_after_s\":60}";
    assert_int_equal(step(&d, &s), FL_OK);
    assert_string_equal(s.path, "/v1/checkin");
    assert_int_equal(stats(&d).next_action_ms, s.now + 60000);
    dev_close(&d);
    srv_free(&s);
}

/* ---- the standalone response API (wrapping transports) ---- */

static void test_response_api(void **st) {
    (void)st;
    fl_client_response *r = NULL;
    assert_int_equal(fl_client_response_create(NULL, 10, NULL), FL_ERR_MISUSE);
    fl_allocator half = {sizeof(half), bad_alloc, NULL, NULL, NULL};
    assert_int_equal(fl_client_response_create(&r, 10, &half), FL_ERR_MISUSE);
    assert_null(r);
    fl_allocator none = {sizeof(none), bad_alloc, NULL, plain_free, NULL};
    assert_int_equal(fl_client_response_create(&r, 10, &none), FL_ERR_NOMEM);
    assert_null(r);
    /* NULL-safe getters */
    size_t len = 99;
    assert_int_equal(fl_client_response_status(NULL), 0);
    assert_int_equal(fl_client_response_limit(NULL), 0);
    assert_null(fl_client_response_body(NULL, &len));
    assert_int_equal(len, 0);
    fl_client_response_reset(NULL, 5);
    fl_client_response_destroy(NULL);
    assert_int_equal(fl_client_response_create(&r, 10, NULL), FL_OK);
    assert_null(fl_client_response_body(r, NULL)); /* empty */
    /* status range */
    assert_int_equal(fl_client_response_set_status(r, 99), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_set_status(r, 600), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_set_status(NULL, 200), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_status(r), 0);
    /* headers: arguments, size, blanks trimmed, unknown names dropped, case ignored */
    assert_int_equal(fl_client_response_add_header(r, NULL, 0, "x", 1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_add_header(r, "Retry-After", 11, NULL, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_add_header(NULL, "Retry-After", 11, "1", 1),
                     FL_ERR_MISUSE);
    static char big[1025];
    memset(big, '1', sizeof(big));
    assert_int_equal(fl_client_response_add_header(r, "Retry-After", 11, big, sizeof(big)),
                     FL_ERR_TOO_LARGE);
    assert_int_equal(fl_client_response_add_header(r, "X-Other", 7, "v", 1), FL_OK);
    assert_int_equal(fl_client_response_add_header(r, "Retry-Aftex", 11, "v", 1), FL_OK);
    assert_int_equal(fl_client_response_add_header(r, "rEtRy-AfTeR", 11, " \t 42 \r\n", 8),
                     FL_OK);
    assert_int_equal(fl_client_response_add_header(r, "Content-Type", 12, "text/plain", 10),
                     FL_OK);
    const char *name = NULL, *value = NULL;
    assert_int_equal(fl_client_response_header_at(r, 0, &name, &value), FL_OK);
    assert_string_equal(name, "Retry-After");
    assert_string_equal(value, "42");
    assert_int_equal(fl_client_response_header_at(r, 1, &name, &value), FL_OK);
    assert_string_equal(name, "Content-Type");
    assert_string_equal(value, "text/plain");
    assert_int_equal(fl_client_response_header_at(r, 2, &name, &value), FL_ERR_NOT_FOUND);
    assert_null(name);
    assert_null(value);
    assert_int_equal(fl_client_response_header_at(r, 0, NULL, &value), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_header_at(NULL, 0, &name, &value), FL_ERR_MISUSE);
    /* A kept header with a control character or over its slot is dropped. */
    assert_int_equal(fl_client_response_add_header(r, "Retry-After", 11, "4\x01" "2", 3), FL_OK);
    assert_int_equal(fl_client_response_header_at(r, 0, &name, &value), FL_OK);
    assert_string_equal(name, "Content-Type");
    /* body: arguments, the limit, empty appends */
    assert_int_equal(fl_client_response_append(r, NULL, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_append(NULL, "a", 1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_append(r, NULL, 0), FL_OK);
    assert_int_equal(fl_client_response_append(r, "0123456789", 10), FL_OK);
    assert_int_equal(fl_client_response_append(r, "x", 1), FL_ERR_TOO_LARGE);
    assert_int_equal(fl_client_response_append(r, big, 11), FL_ERR_TOO_LARGE);
    const uint8_t *b = fl_client_response_body(r, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(b, "0123456789", 10);
    /* reset empties everything and sets the new limit */
    fl_client_response_reset(r, 3);
    assert_int_equal(fl_client_response_limit(r), 3);
    assert_null(fl_client_response_body(r, &len));
    assert_int_equal(fl_client_response_header_at(r, 0, &name, &value), FL_ERR_NOT_FOUND);
    fl_client_response_destroy(r);
}

/* ---- enrollment answers ---- */

static void test_enroll_answers(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    /* malformed 201: retried (not sticky), nothing kept */
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 0, "{\"client_token\":1}", 0, NULL, FL_OK});
    /* 408 and a 500 with an error code: retried, each with its code and message */
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 408, "", 0, NULL, FL_OK});
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 500, "{\"error\":{\"code\":\"internal\"}}", 0, NULL,
                             FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_true(msg_has(&d, "enrollment answer is malformed"));
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_ENROLL);
    assert_int_equal(cs.last_error, FL_ERR_PROTOCOL);
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).last_error, FL_ERR_TIMEOUT);
    assert_true(msg_has(&d, "(408)"));
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).last_error, FL_ERR_IO);
    assert_true(msg_has(&d, "HTTP 500 internal"));
    assert_int_equal(stats(&d).transient_errors, 3);
    char tok[FL_CLIENT_TOKEN_MAX_CHARS + 1];
    assert_int_equal(fl_client_token(d.c, tok, sizeof(tok)), FL_ERR_NOT_FOUND);
    /* a 201 for another population: sticky, the step returns the code */
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 201,
                             "{\"client_token\":\"" CTOK "\",\"coordinator_key_id\":\"x\","
                             "\"population\":\"other\",\"protocol\":\"flotilla/v1\"}",
                             0, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_ERR_CRYPTO); /* key id checked first */
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_FAILED);
    assert_int_equal(step(&d, &s), FL_ERR_CRYPTO); /* sticky, nothing sent */
    assert_int_equal(s.by_kind[K_ENROLL], 4);
    dev_close(&d);
    srv_free(&s);

    /* right key id, another population: sticky FL_ERR_PROTOCOL */
    srv_init(&s);
    dev_open(&d, &s);
    char body[400], kid[FL_CLIENT_KEY_ID_CHARS + 1];
    fl_client_key_id(kid, s.pk);
    snprintf(body, sizeof(body),
             "{\"client_token\":\"" CTOK "\",\"coordinator_key_id\":\"%s\","
             "\"population\":\"other\",\"protocol\":\"flotilla/v1\"}", kid);
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 0, body, 0, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_ERR_PROTOCOL);
    assert_true(msg_has(&d, "another population or protocol"));
    assert_int_equal(fl_client_token(d.c, tok, sizeof(tok)), FL_ERR_NOT_FOUND);
    dev_close(&d);
    srv_free(&s);

    /* 400 with a field and a message holding a control character: sticky FL_ERR_AUTH,
     * the reason in printable ASCII */
    srv_init(&s);
    dev_open(&d, &s);
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 400,
                             "{\"error\":{\"code\":\"invalid_field\",\"field\":\"region\","
                             "\"message\":\"not\\u0007here\"}}",
                             0, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_ERR_AUTH);
    assert_true(msg_has(&d, "enrollment refused: invalid_field: region: not?here"));
    dev_close(&d);
    srv_free(&s);
}

/* ---- check-in answers ---- */

static void test_checkin_answers(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    assert_int_equal(step(&d, &s), FL_OK); /* enrolled */
    /* 200 that is not JSON; selections with a short participation id and a foreign
     * task_url: retried, never selected */
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0, "selected", 0, NULL, FL_OK});
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0,
                             "{\"status\":\"selected\",\"round_id\":7,\"participation_id\":\"ab\","
                             "\"task_url\":\"/v1/rounds/7/task\"}",
                             0, NULL, FL_OK});
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0,
                             "{\"status\":\"selected\",\"round_id\":7,\"participation_id\":\""
                             PID "\",\"task_url\":\"https://evil.example/task\"}",
                             0, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_true(msg_has(&d, "check-in answer is malformed"));
    assert_int_equal(step(&d, &s), FL_OK);
    assert_true(msg_has(&d, "check-in selection is malformed"));
    assert_int_equal(step(&d, &s), FL_OK);
    assert_true(msg_has(&d, "check-in selection is malformed"));
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.selected, 0);
    assert_int_equal(cs.round_id, 0);
    assert_int_equal(cs.transient_errors, 3);
    assert_int_equal(cs.state, FL_CLIENT_STATE_CHECKIN);
    /* "retry" without retry_after_s: the Retry-After header decides; a negative field also
     * falls back to it; an unreadable header to backoff_initial_ms */
    s.checkin = "{\"status\":\"retry\"}";
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0, NULL, 0, "7", FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).next_action_ms, s.now + 7000);
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_IDLE);
    s.checkin = "{\"status\":\"retry\",\"retry_after_s\":-5}";
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0, NULL, 0, "3", FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).next_action_ms, s.now + 3000);
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0, NULL, 0, "soon", FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).next_action_ms, s.now + 100);
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 0, NULL, 0, "99999999", FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).next_action_ms, s.now + 100);
    /* 429: pace steering, never before the server's Retry-After */
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 429, "", 0, "30", FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    cs = stats(&d);
    assert_int_equal(cs.last_error, FL_ERR_AGAIN);
    assert_true(cs.next_action_ms >= s.now + 30000);
    /* a 403 that is not the region: retried as a protocol error */
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 403, "{\"error\":{\"code\":\"forbidden\"}}", 0,
                             NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).last_error, FL_ERR_PROTOCOL);
    assert_true(msg_has(&d, "check-in failed: HTTP 403 forbidden"));
    /* the region refused: sticky FL_ERR_STATE naming the region */
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 403,
                             "{\"error\":{\"code\":\"region_not_allowed\"}}", 0, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_ERR_STATE);
    assert_true(msg_has(&d, "region EU is not allowed"));
    dev_close(&d);
    srv_free(&s);
}

/* ---- task answers ---- */

/* Runs a device to the task download with override o on it; returns the device. */
static void to_task(struct dev *d, struct srv *s, struct ovr o) {
    srv_add(s, o);
    dev_open(d, s);
    step_until(d, s, FL_CLIENT_STATE_TASK, 4);
    assert_int_equal(step(d, s), FL_OK); /* the task download */
}

/* The round was given up at the task: last_error code, errmsg what, no model fetched. */
static void expect_task_refused(struct dev *d, struct srv *s, fl_status code, const char *what) {
    fl_client_stats cs = stats(d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.last_error, code);
    assert_true(msg_has(d, what));
    assert_int_equal(s->by_kind[K_MODEL], 0);
}

static void test_task_signature_faults(void **st) {
    (void)st;
    static const struct {
        unsigned flags;
        const char *what;
    } cases[] = {
        {F_NOSIG, "without signature headers"},
        {F_LONGHDR, "without signature headers"},
        {F_CTRLHDR, "without signature headers"},
        {F_BADHEX, "does not match its SHA-256 header"},
        {F_BADKID, "pinned key is"},
        {F_BADB64, "not base64 of 64 bytes"},
        {F_OTHERKEY, "signature does not verify"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct srv s;
        struct dev d;
        srv_init(&s);
        to_task(&d, &s, (struct ovr){K_TASK, 0, 1, 0, NULL, cases[i].flags, NULL, FL_OK});
        expect_task_refused(&d, &s, FL_ERR_CRYPTO, cases[i].what);
        assert_string_equal(s.last_idem[K_TASK], PID); /* the round's Idempotency-Key */
        /* Not sticky: the next check-in gets the round back and completes it. */
        step_until(&d, &s, FL_CLIENT_STATE_OUTCOME, 10);
        assert_int_equal(step(&d, &s), FL_OK);
        assert_int_equal(stats(&d).rounds_completed, 1);
        dev_close(&d);
        srv_free(&s);
    }
}

static void test_task_statuses(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    /* 425 with retry_after_s in the error body and no header: fetched again then */
    srv_init(&s);
    to_task(&d, &s, (struct ovr){K_TASK, 0, 1, 425,
                                 "{\"error\":{\"code\":\"too_early\",\"retry_after_s\":9}}", 0,
                                 NULL, FL_OK});
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_TASK);
    assert_int_equal(cs.next_action_ms, s.now + 9000);
    assert_int_equal(cs.transient_errors, 0);
    dev_close(&d);
    srv_free(&s);
    /* 425 with nothing: one second */
    srv_init(&s);
    to_task(&d, &s, (struct ovr){K_TASK, 0, 1, 425, "", 0, NULL, FL_OK});
    assert_int_equal(stats(&d).next_action_ms, s.now + 1000);
    dev_close(&d);
    srv_free(&s);
    /* 410: the round is over for this device */
    srv_init(&s);
    to_task(&d, &s, (struct ovr){K_TASK, 0, 1, 410, "{\"error\":{\"code\":\"round_closed\"}}", 0,
                                 NULL, FL_OK});
    expect_task_refused(&d, &s, FL_ERR_ABORTED, "task download: HTTP 410 round_closed");
    dev_close(&d);
    srv_free(&s);
    /* 404: given up as a protocol error */
    srv_init(&s);
    to_task(&d, &s, (struct ovr){K_TASK, 0, 1, 404, "", 0, NULL, FL_OK});
    expect_task_refused(&d, &s, FL_ERR_PROTOCOL, "task download: HTTP 404");
    dev_close(&d);
    srv_free(&s);
    /* 408 without an error code: retried with the default code in the message */
    srv_init(&s);
    to_task(&d, &s, (struct ovr){K_TASK, 0, 1, 408, "", 0, NULL, FL_OK});
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_TASK);
    assert_true(msg_has(&d, "task download: HTTP 408 request_timeout"));
    dev_close(&d);
    srv_free(&s);
    /* 401: the token is refused, sticky */
    srv_init(&s);
    srv_add(&s, (struct ovr){K_TASK, 0, 1, 401, "", 0, NULL, FL_OK});
    dev_open(&d, &s);
    step_until(&d, &s, FL_CLIENT_STATE_TASK, 4);
    assert_int_equal(step(&d, &s), FL_ERR_AUTH);
    assert_true(msg_has(&d, "task download: token refused"));
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_FAILED);
    dev_close(&d);
    srv_free(&s);
}

static void test_task_model_limits(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    /* a task whose model is larger than max_model_bytes: no download */
    srv_init(&s);
    snprintf(s.model_fields, sizeof(s.model_fields), ",\"bytes\":%llu",
             (unsigned long long)(64u << 20) + 1);
    to_task(&d, &s, (struct ovr){K_OTHER, 0, 0, 0, NULL, 0, NULL, FL_OK});
    expect_task_refused(&d, &s, FL_ERR_TOO_LARGE, "over max_model_bytes");
    dev_close(&d);
    srv_free(&s);
    /* a task that does not parse (signed, so it reaches the parser) */
    srv_init(&s);
    snprintf(s.model_fields, sizeof(s.model_fields), ",\"bytes\":\"many\"");
    to_task(&d, &s, (struct ovr){K_OTHER, 0, 0, 0, NULL, 0, NULL, FL_OK});
    expect_task_refused(&d, &s, FL_ERR_FORMAT, "model.bytes");
    dev_close(&d);
    srv_free(&s);
}

/* ---- model answers ---- */

static void to_model(struct dev *d, struct srv *s) {
    dev_open(d, s);
    step_until(d, s, FL_CLIENT_STATE_MODEL, 5);
    assert_int_equal(step(d, s), FL_OK); /* the model download */
}

static void expect_model_refused(struct dev *d, struct srv *s, fl_status code, const char *what) {
    fl_client_stats cs = stats(d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.last_error, code);
    assert_true(msg_has(d, what));
    assert_int_equal(s->by_kind[K_UPLOAD], 0);
}

static void test_model_faults(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    /* a validly signed model that is not the one the task names */
    srv_init(&s);
    s.model[s.model_len - 1] ^= 1;
    to_model(&d, &s);
    expect_model_refused(&d, &s, FL_ERR_CRYPTO, "model SHA-256 differs from the task's");
    assert_int_equal(stats(&d).model_version, 0); /* nothing taken from it */
    dev_close(&d);
    srv_free(&s);
    /* shorter than the task's model.bytes (no hash in the task) */
    srv_init(&s);
    snprintf(s.model_fields, sizeof(s.model_fields), ",\"bytes\":%zu", s.model_len + 8);
    to_model(&d, &s);
    expect_model_refused(&d, &s, FL_ERR_FORMAT, "model size differs from the task's");
    assert_int_equal(stats(&d).model_version, 0);
    dev_close(&d);
    srv_free(&s);
    /* a body over the request's limit (model.bytes): the round is given up, not retried */
    srv_init(&s);
    srv_add(&s, (struct ovr){K_MODEL, 0, 1, 0, NULL, F_FLOOD, NULL, FL_OK});
    to_model(&d, &s);
    expect_model_refused(&d, &s, FL_ERR_TOO_LARGE, "response over its size limit");
    assert_int_equal(s.by_kind[K_MODEL], 1);
    dev_close(&d);
    srv_free(&s);
    /* a model signed for the task but not one the trainer reads */
    srv_init(&s);
    srv_set_model(&s, "not a safetensors image at all.");
    snprintf(s.model_fields, sizeof(s.model_fields), ",\"bytes\":%zu", s.model_len);
    to_model(&d, &s);
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_TRAIN);
    assert_int_equal(step(&d, &s), FL_OK); /* training refuses it */
    expect_model_refused(&d, &s, FL_ERR_FORMAT, "built-in trainer");
    dev_close(&d);
    srv_free(&s);
}

/* ---- transport behaviour ---- */

static void test_transport_faults(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    /* send fails: retried after a backoff, nothing received */
    s.send_rc = FL_ERR_IO;
    assert_int_equal(step(&d, &s), FL_OK);
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.transient_errors, 1);
    assert_int_equal(cs.last_error, FL_ERR_IO);
    assert_true(cs.next_action_ms > s.now);
    assert_true(msg_has(&d, "transport send failed"));
    assert_int_equal(s.recvs, 0);
    /* send cannot start now: FL_ERR_AGAIN, no error counted, sent again next time */
    s.send_rc = FL_ERR_AGAIN;
    assert_int_equal(step(&d, &s), FL_ERR_AGAIN);
    assert_int_equal(stats(&d).transient_errors, 1);
    /* recv without a status: a protocol error, retried */
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 0, NULL, F_NOSTATUS, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_true(msg_has(&d, "POST /v1/enroll: no status"));
    assert_int_equal(stats(&d).last_error, FL_ERR_PROTOCOL);
    /* recv fails with a timeout: retried with that code */
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 0, NULL, 0, NULL, FL_ERR_TIMEOUT});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).last_error, FL_ERR_TIMEOUT);
    /* an enrollment answer over 256 KiB outside a round: retried, not fatal */
    srv_add(&s, (struct ovr){K_ENROLL, 0, 1, 201, NULL, F_FLOOD, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).last_error, FL_ERR_TOO_LARGE);
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_ENROLL);
    /* a non-blocking transport: recv answers FL_ERR_AGAIN twice; the request is sent once
     * and the step's next time is "now" while it is in flight */
    int sends = s.sends;
    s.recv_again = 2;
    fl_client_stats before = stats(&d);
    s.now = before.next_action_ms;
    int64_t next = -1;
    assert_int_equal(fl_client_step(d.c, &next), FL_ERR_AGAIN);
    assert_int_equal(next, s.now);
    assert_int_equal(fl_client_step(d.c, &next), FL_ERR_AGAIN);
    assert_int_equal(fl_client_step(d.c, &next), FL_OK);
    assert_int_equal(s.sends, sends + 1);
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_CHECKIN); /* enrolled */
    dev_close(&d);
    srv_free(&s);
}

/* An interrupt while a request is in flight cancels it at the transport; the next step
 * sends the same request again (same path, same Idempotency-Key) and the round goes on. */
static void test_interrupt_in_flight(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    step_until(&d, &s, FL_CLIENT_STATE_TASK, 4);
    s.recv_again = 1;
    assert_int_equal(step(&d, &s), FL_ERR_AGAIN);
    assert_int_equal(s.by_kind[K_TASK], 1);
    fl_client_interrupt(d.c);
    assert_int_equal(fl_client_step(d.c, NULL), FL_ERR_CANCELLED);
    assert_int_equal(s.cancels, 1);
    assert_true(msg_has(&d, "interrupted"));
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_TASK);
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(s.by_kind[K_TASK], 2);
    assert_string_equal(s.last_idem[K_TASK], PID);
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_MODEL);
    /* the interrupt is delivered once: later steps run normally */
    step_until(&d, &s, FL_CLIENT_STATE_OUTCOME, 6);
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).rounds_completed, 1);
    /* destroy with a request in flight cancels it */
    s.recv_again = 1;
    assert_int_equal(step(&d, &s), FL_ERR_AGAIN);
    dev_close(&d);
    assert_int_equal(s.cancels, 2);
    srv_free(&s);
}

/* The built-in trainer interrupted between batches: the step returns FL_ERR_CANCELLED, the
 * client stays in TRAIN, and the next step trains again from the verified model and
 * completes the round (docs: "the round continues on the next step"). */
static void test_interrupt_builtin_training(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    step_until(&d, &s, FL_CLIENT_STATE_TRAIN, 6);
    s.arm_interrupt = 1;
    assert_int_equal(step(&d, &s), FL_ERR_CANCELLED);
    assert_int_equal(s.arm_interrupt, 0); /* it fired inside the training */
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_TRAIN);
    assert_int_equal(cs.rounds_failed, 0);
    assert_true(msg_has(&d, "interrupted"));
    assert_int_equal(step(&d, &s), FL_OK);
    cs = stats(&d);
    if (cs.state != FL_CLIENT_STATE_UPLOAD)
        fprintf(stderr, "after the resumed training: %s\n", fl_client_errmsg(d.c));
    assert_int_equal(cs.state, FL_CLIENT_STATE_UPLOAD);
    assert_int_equal(cs.examples_trained, 8);
    step_until(&d, &s, FL_CLIENT_STATE_OUTCOME, 2);
    assert_int_equal(step(&d, &s), FL_OK);
    cs = stats(&d);
    assert_int_equal(cs.rounds_completed, 1);
    assert_int_equal(cs.rounds_failed, 0);
    assert_int_equal(s.by_kind[K_MODEL], 1); /* trained again without a second download */
    dev_close(&d);
    srv_free(&s);
}

/* ---- custom trainers ---- */

static fl_status custom_train(void *user, fl_client_tensor *t, size_t n,
                              const fl_client_train_params *p, fl_client_store *st,
                              uint64_t *used) {
    struct train_ctl *ctl = user;
    (void)p;
    (void)st;
    if (ctl->calls++ == 0 && ctl->fail != FL_OK) {
        if (ctl->fail == FL_ERR_CANCELLED)
            fl_client_interrupt(ctl->s->c);
        return ctl->fail;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < t[i].numel; k++)
            t[i].data[k] += 0.001f;
    *used = 5;
    return FL_OK;
}

static void custom_open(struct dev *d, struct srv *s, struct train_ctl *ctl) {
    fl_client_config cfg;
    store_open(d, s, NULL);
    cfg_fill(&cfg, d, s);
    cfg.train_fn = custom_train;
    cfg.train_user = ctl;
    dev_open_cfg(d, s, &cfg);
}

static void test_custom_trainer(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    /* the app's trainer fails: the round is given up with its code, nothing uploaded */
    srv_init(&s);
    struct train_ctl ctl = {0, FL_ERR_IO, &s};
    custom_open(&d, &s, &ctl);
    step_until(&d, &s, FL_CLIENT_STATE_TRAIN, 6);
    assert_int_equal(step(&d, &s), FL_OK);
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.last_error, FL_ERR_IO);
    assert_true(msg_has(&d, "the app's trainer failed (FL_ERR_IO)"));
    assert_int_equal(s.by_kind[K_UPLOAD], 0);
    dev_close(&d);
    srv_free(&s);
    /* it interrupts the client and returns FL_ERR_CANCELLED: trained again next step */
    srv_init(&s);
    ctl = (struct train_ctl){0, FL_ERR_CANCELLED, &s};
    custom_open(&d, &s, &ctl);
    step_until(&d, &s, FL_CLIENT_STATE_TRAIN, 6);
    assert_int_equal(step(&d, &s), FL_ERR_CANCELLED);
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_TRAIN);
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(ctl.calls, 2);
    cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_UPLOAD);
    assert_int_equal(cs.examples_trained, 5);
    step_until(&d, &s, FL_CLIENT_STATE_OUTCOME, 2);
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).rounds_completed, 1);
    dev_close(&d);
    srv_free(&s);
    /* a model the custom path cannot parse */
    srv_init(&s);
    srv_set_model(&s, "not a safetensors image either");
    snprintf(s.model_fields, sizeof(s.model_fields), ",\"bytes\":%zu", s.model_len);
    ctl = (struct train_ctl){0, FL_OK, &s};
    custom_open(&d, &s, &ctl);
    step_until(&d, &s, FL_CLIENT_STATE_TRAIN, 6);
    assert_int_equal(step(&d, &s), FL_OK);
    assert_int_equal(stats(&d).rounds_failed, 1);
    assert_true(msg_has(&d, "model: "));
    assert_int_equal(ctl.calls, 0);
    dev_close(&d);
    srv_free(&s);
}

/* ---- upload and outcome ---- */

static void test_upload_and_outcome(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    /* 413 at the upload: given up; a replayed 200 is accepted like a 202 */
    srv_init(&s);
    srv_add(&s, (struct ovr){K_UPLOAD, 0, 1, 413, "{\"error\":{\"code\":\"body_too_large\"}}", 0,
                             NULL, FL_OK});
    dev_open(&d, &s);
    step_until(&d, &s, FL_CLIENT_STATE_UPLOAD, 7);
    assert_int_equal(step(&d, &s), FL_OK);
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.uploads, 0);
    assert_int_equal(cs.last_error, FL_ERR_PROTOCOL);
    assert_true(msg_has(&d, "update upload: HTTP 413 body_too_large"));
    srv_add(&s, (struct ovr){K_UPLOAD, 0, 1, 200, "{}", 0, NULL, FL_OK});
    step_until(&d, &s, FL_CLIENT_STATE_OUTCOME, 8);
    assert_int_equal(stats(&d).uploads, 1);
    /* the outcome: malformed (retried), still open (polled again after the initial
     * backoff without long polls), aborted */
    srv_add(&s, (struct ovr){K_STATUS, 0, 1, 0, "[]", 0, NULL, FL_OK});
    srv_add(&s, (struct ovr){K_STATUS, 0, 1, 0, "{\"state\":\"open\"}", 0, NULL, FL_OK});
    srv_add(&s, (struct ovr){K_STATUS, 0, 1, 0, "{\"state\":\"aborted\"}", 0, NULL, FL_OK});
    assert_int_equal(step(&d, &s), FL_OK);
    assert_true(msg_has(&d, "round outcome is malformed"));
    assert_int_equal(stats(&d).state, FL_CLIENT_STATE_OUTCOME);
    assert_int_equal(step(&d, &s), FL_OK);
    cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_OUTCOME);
    assert_int_equal(cs.next_action_ms, s.now + 100);
    assert_int_equal(step(&d, &s), FL_OK);
    cs = stats(&d);
    assert_int_equal(cs.rounds_failed, 2);
    assert_int_equal(cs.rounds_completed, 0);
    assert_int_equal(cs.last_error, FL_ERR_ABORTED);
    assert_true(msg_has(&d, "round aborted"));
    dev_close(&d);
    srv_free(&s);
    /* the upload keeps failing with 503 until the round's deadlines pass: given up */
    srv_init(&s);
    srv_add(&s, (struct ovr){K_UPLOAD, 0, -1, 503, "", 0, "300", FL_OK});
    dev_open(&d, &s);
    step_until(&d, &s, FL_CLIENT_STATE_UPLOAD, 7);
    int tries = 0;
    while (stats(&d).state == FL_CLIENT_STATE_UPLOAD && tries < 20) {
        assert_int_equal(step(&d, &s), FL_OK);
        tries++;
    }
    cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    assert_int_equal(cs.rounds_failed, 1);
    assert_true(tries >= 2 && tries < 20);
    assert_true(msg_has(&d, "the round's deadlines passed while retrying"));
    dev_close(&d);
    srv_free(&s);
}

/* ---- fl_client_run and the worker ---- */

static void test_run_loop(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    dev_open(&d, &s);
    /* a pending interrupt ends run at once, delivered once */
    fl_client_interrupt(d.c);
    assert_int_equal(fl_client_run(d.c, 0), FL_ERR_CANCELLED);
    assert_int_equal(s.sends, 0);
    /* a whole round under run, with a non-blocking answer in the middle */
    s.recv_again = 1;
    assert_int_equal(fl_client_run(d.c, 0), FL_OK);
    assert_int_equal(stats(&d).rounds_completed, 1);
    /* told to come back in an hour: run returns FL_ERR_AGAIN (nothing wrong) */
    s.checkin = "{\"status\":\"retry\",\"retry_after_s\":3600}";
    assert_int_equal(fl_client_run(d.c, 1000), FL_ERR_AGAIN);
    assert_int_equal(stats(&d).last_error, FL_OK);
    /* a sticky failure is returned by run */
    srv_add(&s, (struct ovr){K_CHECKIN, 0, 1, 401, "", 0, NULL, FL_OK});
    s.now += 3600000;
    assert_int_equal(fl_client_run(d.c, 1000), FL_ERR_AUTH);
    assert_true(msg_has(&d, "enroll again"));
    dev_close(&d);
    srv_free(&s);
}

static void test_worker(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s);
    fl_client_config cfg;
    store_open(&d, &s, NULL);
    cfg_fill(&cfg, &d, &s);
    cfg.client_token = CTOK;
    cfg.enrollment_token = NULL;
    dev_open_cfg(&d, &s, &cfg);
    /* The worker checks in, is refused (sticky), and ends by itself. */
    srv_add(&s, (struct ovr){K_CHECKIN, 0, -1, 401, "", 0, NULL, FL_OK});
    assert_int_equal(fl_client_worker_start(d.c), FL_OK);
    assert_int_equal(fl_client_worker_start(d.c), FL_ERR_STATE);
    sem_wait(&s.served); /* the 401 was answered */
    fl_client_worker_stop(d.c);
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.state, FL_CLIENT_STATE_FAILED);
    assert_int_equal(cs.checkins, 1);
    assert_int_equal(cs.last_error, FL_ERR_AUTH);
    fl_client_worker_stop(d.c); /* joined already: no-op */
    dev_close(&d);
    srv_free(&s);
}

/* ---- one allocation failure anywhere in a round ---- */

struct fail_alloc {
    long calls, fail_at;     /* the fail_at-th call fails (1-based; 0 = none) */
    long live;               /* bytes outstanding */
};

static void *fa_alloc(void *u, size_t n) {
    struct fail_alloc *f = u;
    if (++f->calls == f->fail_at)
        return NULL;
    void *p = malloc(n);
    if (p)
        f->live += (long)n;
    return p;
}

static void *fa_realloc(void *u, void *p, size_t old, size_t n) {
    struct fail_alloc *f = u;
    if (++f->calls == f->fail_at)
        return NULL;
    void *q = realloc(p, n);
    if (q)
        f->live += (long)n - (long)old;
    return q;
}

static void fa_free(void *u, void *p, size_t n) {
    struct fail_alloc *f = u;
    if (p)
        f->live -= (long)n;
    free(p);
}

/* For every n, the n-th allocation of the client fails once: the client never crashes or
 * leaks, and a round still completes (the failed exchange is retried, or the round is given
 * up and the next check-in gets it back). Run with the built-in and a custom trainer. */
static void oom_walk(bool custom) {
    long total = 0;
    for (long n = 1;; n++) {
        struct srv s;
        struct dev d;
        struct fail_alloc fa = {0, n, 0};
        fl_allocator al = {sizeof(al), fa_alloc, fa_realloc, fa_free, &fa};
        struct train_ctl ctl = {0, FL_OK, NULL};
        srv_init(&s);
        ctl.s = &s;
        store_open(&d, &s, NULL);
        fl_client_config cfg;
        cfg_fill(&cfg, &d, &s);
        cfg.allocator = &al;
        if (custom) {
            cfg.train_fn = custom_train;
            cfg.train_user = &ctl;
        }
        fl_status rc = fl_client_create(&d.c, &cfg, NULL, 0);
        if (rc == FL_OK) {
            s.c = d.c;
            int i;
            for (i = 0; i < 60 && stats(&d).rounds_completed == 0; i++) {
                fl_status sr = step(&d, &s);
                assert_true(sr == FL_OK);
            }
            if (stats(&d).rounds_completed != 1)
                fprintf(stderr, "fail_at %ld: %s\n", n, fl_client_errmsg(d.c));
            assert_int_equal(stats(&d).rounds_completed, 1);
            fl_client_destroy(d.c);
        } else {
            assert_int_equal(rc, FL_ERR_NOMEM);
        }
        fl_client_store_close(d.store);
        srv_free(&s);
        assert_int_equal(fa.live, 0);
        if (fa.calls < n) { /* the failure was never reached: every point was walked */
            total = n - 1;
            break;
        }
    }
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "oom walk (%s): %ld allocation points\n", custom ? "custom" : "built-in",
                total);
    assert_true(total > 10);
}

static void test_oom_walk_builtin(void **st) {
    (void)st;
    oom_walk(false);
}

static void test_oom_walk_custom(void **st) {
    (void)st;
    oom_walk(true);
}

/* ---- the example store's limits and lookups ---- */

static void test_store_limits(void **st) {
    (void)st;
    struct srv s;
    srv_init(&s);
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = 2;
    sc.max_bytes = 40; /* payload bytes: five dense examples of 8 bytes */
    sc.clock = srv_clock;
    sc.clock_user = &s;
    fl_client_store *store = NULL;
    assert_int_equal(fl_client_store_open(&store, &sc, NULL, 0), FL_OK);
    /* raw examples: bad arguments (checked before the data is read) */
    uint8_t raw[32] = {1, 2, 3};
    assert_int_equal(fl_client_store_add_raw(NULL, raw, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add_raw(store, NULL, 3), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_client_store_errmsg(store), "1 byte to 16 MiB"));
    assert_int_equal(fl_client_store_add_raw(store, raw, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add_raw(store, raw, ((size_t)16 << 20) + 1), FL_ERR_MISUSE);
    /* max_bytes keeps the newest examples that fit, oldest out first */
    for (int i = 0; i < 4; i++) {
        float x[2] = {(float)i, 1.0f};
        assert_int_equal(fl_client_store_add(store, x, 2, i), FL_OK);
    }
    assert_int_equal(fl_client_store_add_raw(store, raw, 20), FL_OK); /* 52 bytes > 40 */
    uint64_t count = 0, bytes = 0;
    assert_int_equal(fl_client_store_stats(store, &count, &bytes), FL_OK);
    assert_int_equal(count, 3);
    assert_int_equal(bytes, 36);
    int64_t ids[8];
    size_t n = 0;
    assert_int_equal(fl_client_store_ids(store, ids, 8, &n, 0), FL_OK);
    assert_int_equal(n, 3);
    assert_int_equal(fl_client_store_ids(store, NULL, 8, &n, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_ids(store, ids, 0, &n, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_ids(store, ids, 8, NULL, 0), FL_ERR_MISUSE);
    /* get: the survivors are examples 2, 3 (dense) and the raw one */
    float f[2];
    int32_t lab = 99;
    size_t rl = 0;
    assert_int_equal(fl_client_store_get(store, ids[0], f, 2, &lab, NULL, 0, NULL), FL_OK);
    assert_int_equal(lab, 2);
    assert_true(f[0] == 2.0f && f[1] == 1.0f);
    assert_int_equal(fl_client_store_get(store, ids[0], f, 1, &lab, NULL, 0, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_client_store_errmsg(store), "wrong size"));
    assert_int_equal(fl_client_store_get(store, ids[2], f, 2, &lab, raw, 4, &rl),
                     FL_ERR_TOO_LARGE);
    assert_int_equal(rl, 20);
    assert_int_equal(lab, -1); /* raw: no label, features untouched */
    assert_int_equal(fl_client_store_get(store, ids[2], NULL, 0, NULL, raw, sizeof(raw), &rl),
                     FL_OK);
    assert_int_equal(rl, 20);
    assert_int_equal(raw[1], 2);
    assert_int_equal(fl_client_store_get(store, 424242, f, 2, &lab, NULL, 0, NULL),
                     FL_ERR_NOT_FOUND);
    assert_non_null(strstr(fl_client_store_errmsg(store), "no example 424242"));
    assert_int_equal(fl_client_store_get(NULL, ids[0], f, 2, &lab, NULL, 0, NULL),
                     FL_ERR_MISUSE);
    /* prune on demand with nothing over the limits removes nothing */
    uint64_t removed = 7;
    assert_int_equal(fl_client_store_prune(store, &removed), FL_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(fl_client_store_prune(NULL, &removed), FL_ERR_MISUSE);
    fl_client_store_close(store);
    srv_free(&s);
}

/* ---- the libcurl transport's checks ---- */

#ifdef FL_TEST_HAVE_CURL

static void expect_curl_misuse(const char *url, const char *what) {
    fl_client_curl_config tc;
    fl_client_curl_config_init(&tc);
    tc.base_url = url;
    fl_client_curl *t = (fl_client_curl *)1;
    char err[256] = "";
    assert_int_equal(fl_client_curl_create(&t, &tc, err, sizeof(err)), FL_ERR_MISUSE);
    assert_null(t);
    if (!strstr(err, what))
        fprintf(stderr, "curl create(%s): \"%s\" lacks \"%s\"\n", url ? url : "NULL", err, what);
    assert_non_null(strstr(err, what));
}

struct count_alloc {
    long calls, fail_at;
};

static void *ca_alloc(void *u, size_t n) {
    struct count_alloc *f = u;
    return ++f->calls == f->fail_at ? NULL : malloc(n);
}

static void test_curl_transport(void **st) {
    (void)st;
    expect_curl_misuse(NULL, "cfg.base_url");
    expect_curl_misuse("https://", "cfg.base_url");                 /* too short */
    expect_curl_misuse("https://coordinator.example/", "cfg.base_url"); /* trailing slash */
    expect_curl_misuse("https://coordinator .example", "cfg.base_url");
    expect_curl_misuse("http://coordinator.example", "cfg.base_url"); /* http off loopback */
    expect_curl_misuse("http://127.0.0.1.evil.example", "cfg.base_url");
    expect_curl_misuse("http://localhostile", "cfg.base_url");
    fl_client_curl_config tc;
    fl_client_curl_config_init(&tc);
    fl_client_curl *t = NULL;
    char err[256] = "";
    assert_int_equal(fl_client_curl_create(NULL, &tc, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "out and cfg"));
    tc.struct_size = 4;
    assert_int_equal(fl_client_curl_create(&t, &tc, NULL, 0), FL_ERR_MISUSE);
    fl_client_curl_config_init(&tc);
    tc.base_url = "http://[::1]:8443";
    fl_allocator half = {sizeof(half), bad_alloc, NULL, NULL, NULL};
    tc.allocator = &half;
    assert_int_equal(fl_client_curl_create(&t, &tc, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "cfg.allocator"));
    /* every allocation of create failing in turn: FL_ERR_NOMEM, nothing left behind */
    tc.pinned_public_key = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    tc.ca_file = "/nonexistent/ca.pem";
    for (long k = 1; k <= 4; k++) {
        struct count_alloc ca = {0, k};
        fl_allocator al = {sizeof(al), ca_alloc, NULL, plain_free, &ca};
        tc.allocator = &al;
        assert_int_equal(fl_client_curl_create(&t, &tc, err, sizeof(err)), FL_ERR_NOMEM);
        assert_null(t);
        assert_string_equal(err, "out of memory");
    }
    tc.allocator = NULL;
    /* a refused connection is FL_ERR_IO (retried by the client); port 1 on loopback */
    tc.base_url = "http://127.0.0.1:1";
    tc.connect_timeout_ms = 0; /* the default */
    assert_int_equal(fl_client_curl_create(&t, &tc, err, sizeof(err)), FL_OK);
    fl_client_transport tp;
    assert_int_equal(fl_client_curl_transport(NULL, &tp), FL_ERR_MISUSE);
    assert_int_equal(fl_client_curl_transport(t, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_curl_transport(t, &tp), FL_OK);
    fl_client_response *r = NULL;
    assert_int_equal(fl_client_response_create(&r, 1024, NULL), FL_OK);
    assert_int_equal(tp.recv(tp.ctx, r), FL_ERR_MISUSE); /* nothing sent */
    fl_client_request req = {sizeof(req), "GET", "no-slash", NULL, 0, NULL, 0, 1000};
    assert_int_equal(tp.send(tp.ctx, &req), FL_ERR_MISUSE);
    assert_int_equal(tp.send(tp.ctx, NULL), FL_ERR_MISUSE);
    const char *hdr[] = {"X-Test: 1"};
    req.path = "/v1/checkin";
    req.method = "POST";
    req.headers = hdr;
    req.n_headers = 1;
    assert_int_equal(tp.send(tp.ctx, &req), FL_OK);
    assert_int_equal(tp.recv(tp.ctx, r), FL_ERR_IO);
    assert_int_equal(fl_client_response_status(r), 0);
    /* a URL over the transport's 1 KiB buffer is refused before any I/O */
    static char longpath[1100];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[0] = '/';
    req.path = longpath;
    assert_int_equal(tp.send(tp.ctx, &req), FL_OK);
    assert_int_equal(tp.recv(tp.ctx, r), FL_ERR_MISUSE);
    /* cancel forgets the request */
    req.path = "/v1/checkin";
    assert_int_equal(tp.send(tp.ctx, &req), FL_OK);
    tp.cancel(tp.ctx);
    assert_int_equal(tp.recv(tp.ctx, r), FL_ERR_MISUSE);
    fl_client_response_destroy(r);
    fl_client_curl_destroy(t);
    fl_client_curl_destroy(NULL);
}
#endif

int main(void) {
#ifdef FL_TEST_HAVE_CURL
    curl_global_init(CURL_GLOBAL_DEFAULT);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_fields),
        cmocka_unit_test(test_handle_arguments),
        cmocka_unit_test(test_response_api),
        cmocka_unit_test(test_enroll_answers),
        cmocka_unit_test(test_checkin_answers),
        cmocka_unit_test(test_task_signature_faults),
        cmocka_unit_test(test_task_statuses),
        cmocka_unit_test(test_task_model_limits),
        cmocka_unit_test(test_model_faults),
        cmocka_unit_test(test_transport_faults),
        cmocka_unit_test(test_interrupt_in_flight),
        cmocka_unit_test(test_interrupt_builtin_training),
        cmocka_unit_test(test_custom_trainer),
        cmocka_unit_test(test_upload_and_outcome),
        cmocka_unit_test(test_run_loop),
        cmocka_unit_test(test_worker),
        cmocka_unit_test(test_oom_walk_builtin),
        cmocka_unit_test(test_oom_walk_custom),
        cmocka_unit_test(test_store_limits),
#ifdef FL_TEST_HAVE_CURL
        cmocka_unit_test(test_curl_transport),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
