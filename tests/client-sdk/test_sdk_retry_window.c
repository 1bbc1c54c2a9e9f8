/* The client's backoff and retry_timeout_ms window over several exchanges, on a frozen clock
 * (nothing sleeps): a scripted coordinator in memory answers every request from a default
 * plan (select for round 7, a signed plain task and model, accept the upload, "completed")
 * that each test bends with an answer function. Checked here:
 *  - a give-up after retry_timeout_ms starts the next exchange's backoff over (it used to
 *    keep the grown backoff, so once that passed the bound every later exchange was given
 *    up after one try), after waiting the grown delay itself;
 *  - a backoff that would overshoot the window is cut so that the last try starts at the
 *    window's end, never earlier than a Retry-After and never closer than
 *    backoff_initial_ms / 2 to the try before;
 *  - a 425 (phase not open yet) is an answer: the backoff and the window start over;
 *  - so is a round status "not over yet", and a malformed one is retried after the backoff
 *    (it used to be polled again at once). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "fl_test.h"
#include "flotilla/client.h"

#define POP "pop"
#define CTOK "flc_window-client-token-00000000"
#define PID "0123456789abcdef0123456789abcdef"
#define T0 1767225600000LL
#define DIM_IN 4
#define DIM_OUT 3
#define UPD_DIM (DIM_IN * DIM_OUT + DIM_OUT)
#define MAX_TRIES 512

/* ---- the scripted coordinator ---- */

enum kind { K_CHECKIN, K_TASK, K_MODEL, K_UPLOAD, K_STATUS, K_OTHER, K_N };

struct srv;

/* Bends the answer to the nth (0-based) request of kind k: returns the status to send, or 0
 * for the default plan; may set *body and *retry_after. */
typedef int (*answer_fn)(struct srv *s, enum kind k, int nth, const char **body,
                         const char **retry_after);

struct srv {
    uint8_t sk[64], pk[32];
    int64_t now;                   /* the frozen clock (Unix ms) */
    answer_fn answer;              /* NULL = the default plan */
    int64_t at[K_N][MAX_TRIES];    /* when each request of a kind was sent */
    int n[K_N];                    /* requests of each kind */
    enum kind cur;
    uint8_t *model;
    size_t model_len;
    char model_fields[200];        /* extra fields of the task's "model" object */
};

static int64_t srv_clock(void *u) {
    return ((struct srv *)u)->now;
}

static enum kind kind_of(const char *method, const char *path) {
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
    s->cur = kind_of(req->method, req->path);
    assert_true(s->n[s->cur] < MAX_TRIES);
    s->at[s->cur][s->n[s->cur]++] = s->now;
    return FL_OK;
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

/* The signature headers of docs/protocol.md 4.1 over (context, id, body). */
static void sign_headers(struct srv *s, fl_client_response *resp, const char *context,
                         uint64_t id, const uint8_t *body, size_t len) {
    uint8_t h[32], msg[64], sig[64];
    char hex[65], b64[120], kid[FL_CLIENT_KEY_ID_CHARS + 1];
    crypto_hash_sha256(h, body, len);
    size_t cl = strlen(context);
    memcpy(msg, context, cl);
    msg[cl] = 0;
    for (int i = 0; i < 8; i++)
        msg[cl + 1 + i] = (uint8_t)(id >> (8 * i));
    memcpy(msg + cl + 9, h, 32);
    crypto_sign_detached(sig, NULL, msg, cl + 41, s->sk);
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    sodium_bin2base64(b64, sizeof(b64), sig, 64, sodium_base64_VARIANT_ORIGINAL);
    fl_client_key_id(kid, s->pk);
    assert_int_equal(fl_client_response_add_header(resp, "Flotilla-Content-SHA256", 23, hex, 64),
                     FL_OK);
    assert_int_equal(fl_client_response_add_header(resp, "Flotilla-Signature", 18, b64,
                                                   strlen(b64)),
                     FL_OK);
    assert_int_equal(fl_client_response_add_header(resp, "Flotilla-Key-Id", 15, kid, strlen(kid)),
                     FL_OK);
}

static fl_status s_recv(void *ctx, fl_client_response *resp) {
    struct srv *s = ctx;
    int status = 200;
    char buf[4096];
    const uint8_t *body = (const uint8_t *)buf;
    size_t len = 0;
    const char *sctx = NULL;
    uint64_t sid = 0;
    switch (s->cur) {
    case K_CHECKIN:
        len = (size_t)snprintf(buf, sizeof(buf), "{\"status\":\"selected\",\"round_id\":7,"
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
    const char *obody = NULL, *retry_after = NULL;
    int ost = s->answer ? s->answer(s, s->cur, s->n[s->cur] - 1, &obody, &retry_after) : 0;
    if (ost) {
        status = ost;
        sctx = NULL;
        body = (const uint8_t *)(obody ? obody : "");
        len = strlen((const char *)body);
    }
    assert_int_equal(fl_client_response_set_status(resp, status), FL_OK);
    if (retry_after)
        assert_int_equal(fl_client_response_add_header(resp, "Retry-After", 11, retry_after,
                                                       strlen(retry_after)),
                         FL_OK);
    if (sctx)
        sign_headers(s, resp, sctx, sid, body, len);
    if (len)
        assert_int_equal(fl_client_response_append(resp, body, len), FL_OK);
    return FL_OK;
}

static void srv_init(struct srv *s, answer_fn answer) {
    memset(s, 0, sizeof(*s));
    assert_true(sodium_init() >= 0);
    uint8_t seed[32];
    memset(seed, 3, sizeof(seed));
    crypto_sign_seed_keypair(s->pk, s->sk, seed);
    s->now = T0;
    s->answer = answer;
    uint32_t sizes[2] = {DIM_IN, DIM_OUT};
    assert_int_equal(fl_client_model_init(NULL, 0, &s->model_len, sizes, 2, 9, NULL),
                     FL_ERR_TOO_LARGE);
    s->model = malloc(s->model_len);
    assert_non_null(s->model);
    assert_int_equal(fl_client_model_init(s->model, s->model_len, &s->model_len, sizes, 2, 9,
                                          NULL),
                     FL_OK);
    uint8_t h[32];
    char hex[65];
    crypto_hash_sha256(h, s->model, s->model_len);
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    snprintf(s->model_fields, sizeof(s->model_fields), ",\"bytes\":%zu,\"sha256\":\"%s\"",
             s->model_len, hex);
}

/* ---- the device ---- */

struct dev {
    fl_client_store *store;
    fl_client *c;
};

/* A device with a client token (no enrollment) and the given backoff and bound. */
static void dev_open(struct dev *d, struct srv *s, uint32_t initial_ms, uint32_t max_ms,
                     uint64_t retry_timeout_ms, uint32_t long_poll_s) {
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = DIM_IN;
    assert_int_equal(fl_client_store_open(&d->store, &sc, NULL, 0), FL_OK);
    for (int i = 0; i < 8; i++) {
        float x[DIM_IN] = {0.1f * (float)i, 1.0f - 0.1f * (float)i, (float)(i % 3), 0.5f};
        assert_int_equal(fl_client_store_add(d->store, x, DIM_IN, i % DIM_OUT), FL_OK);
    }
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    cfg.population = POP;
    cfg.region = "EU";
    memcpy(cfg.coordinator_key, s->pk, 32);
    cfg.has_coordinator_key = 1;
    cfg.client_token = CTOK;
    cfg.transport.struct_size = sizeof(cfg.transport);
    cfg.transport.send = s_send;
    cfg.transport.recv = s_recv;
    cfg.transport.ctx = s;
    cfg.store = d->store;
    cfg.clock = srv_clock;
    cfg.clock_user = s;
    cfg.seed = 5;
    cfg.backoff_initial_ms = initial_ms;
    cfg.backoff_max_ms = max_ms;
    cfg.retry_timeout_ms = retry_timeout_ms;
    cfg.long_poll_s = long_poll_s;
    char err[256] = "";
    fl_status rc = fl_client_create(&d->c, &cfg, err, sizeof(err));
    if (rc != FL_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_int_equal(rc, FL_OK);
}

static void dev_close(struct dev *d, struct srv *s) {
    fl_client_destroy(d->c);
    fl_client_store_close(d->store);
    free(s->model);
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
static void step(struct dev *d, struct srv *s) {
    int64_t due = stats(d).next_action_ms;
    if (due > s->now)
        s->now = due;
    fl_status rc = fl_client_step(d->c, NULL);
    if (rc != FL_OK)
        fprintf(stderr, "step: %s (%s)\n", fl_client_status_name(rc), fl_client_errmsg(d->c));
    assert_int_equal(rc, FL_OK);
}

/* Steps until the client has given up `giveups` exchanges after retry_timeout_ms; each
 * give-up's index in the kind's tries is recorded in end[] (end[g] = tries up to and
 * including the g-th give-up's last try). */
static void step_until_giveups(struct dev *d, struct srv *s, enum kind k, int giveups,
                               int *end) {
    int g = 0;
    for (int i = 0; i < 4 * MAX_TRIES && g < giveups; i++) {
        step(d, s);
        fl_client_stats cs = stats(d);
        if (cs.retry_timeouts > (uint64_t)g) {
            assert_int_equal(cs.retry_timeouts, (uint64_t)g + 1);
            assert_int_equal(cs.last_error, FL_ERR_TIMEOUT);
            assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
            end[g++] = s->n[k];
        }
    }
    assert_int_equal(g, giveups);
}

static int always_503(struct srv *s, enum kind k, int nth, const char **body,
                      const char **retry_after) {
    (void)s;
    (void)nth;
    (void)retry_after;
    if (k != K_CHECKIN)
        return 0;
    *body = "{\"error\":{\"code\":\"unavailable\"}}";
    return 503;
}

/* ---- a give-up starts the next exchange's backoff over ---- */

/* Check-ins answered 503 for ever, backoff 1 s doubling to 1 h, bound 5 min (the defaults
 * but for the bound's clock): every exchange retries with growing backoff for the whole
 * window, its last try at the window's end; between two exchanges the device waits the
 * grown delay; the next exchange's first retry comes after about backoff_initial_ms again.
 * Before the fix the second and later exchanges made one try each. */
static void test_giveup_restarts_backoff(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s, always_503);
    dev_open(&d, &s, 1000, 3600000, 300000, 30);
    enum { G = 4 };
    int end[G];
    step_until_giveups(&d, &s, K_CHECKIN, G, end);
    const int64_t *at = s.at[K_CHECKIN];
    int begin = 0;
    for (int g = 0; g < G; g++) {
        int tries = end[g] - begin;
        int64_t since = at[begin], max_gap = 0;
        fprintf(stderr, "exchange %d: %d tries over %lld ms\n", g, tries,
                (long long)(at[end[g] - 1] - since));
        /* 1, 2, 4, ... 128 s (jittered to [d/2, d]) fit in 5 min: 9 tries at least. */
        assert_true(tries >= 9);
        /* The first retry after about backoff_initial_ms: [d/2, d]. */
        assert_true(at[begin + 1] - since >= 500 && at[begin + 1] - since <= 1000);
        for (int i = begin + 1; i < end[g]; i++) {
            int64_t gap = at[i] - at[i - 1];
            assert_true(gap >= 500);
            max_gap = gap > max_gap ? gap : max_gap;
        }
        /* The last try exactly at the window's end (the overshooting backoff is cut). */
        assert_int_equal(at[end[g] - 1], since + 300000);
        /* The give-up waits the grown (uncut) delay: longer than any gap before. */
        if (g + 1 < G)
            assert_true(at[end[g]] - at[end[g] - 1] > max_gap);
        begin = end[g];
    }
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.checkins, (uint64_t)s.n[K_CHECKIN]);
    assert_int_equal(cs.transient_errors, (uint64_t)s.n[K_CHECKIN]);
    assert_int_equal(cs.retry_timeouts, G);
    assert_int_equal(cs.rounds_failed, 0);
    assert_non_null(strstr(fl_client_errmsg(d.c), "check-in failed: HTTP 503"));
    assert_non_null(strstr(fl_client_errmsg(d.c), "retry_timeout_ms 300000"));
    dev_close(&d, &s);
}

/* ---- when the overshooting backoff is not cut ---- */

static int retry_after_6(struct srv *s, enum kind k, int nth, const char **body,
                         const char **retry_after) {
    (void)s;
    (void)nth;
    (void)body;
    if (k != K_CHECKIN)
        return 0;
    *retry_after = "6";
    return 503;
}

/* The cut never goes below the server's Retry-After nor brings two tries closer than
 * backoff_initial_ms / 2. */
static void test_cut_limits(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    int end[3];
    /* Retry-After 6 s, bound 10 s, backoff 4 s: tries at 0 and 6 s; then 6 s more would
     * overshoot by 2 s and the server asked for them: given up, no try at 10 s. */
    srv_init(&s, retry_after_6);
    dev_open(&d, &s, 4000, 3600000, 10000, 30);
    step_until_giveups(&d, &s, K_CHECKIN, 2, end);
    assert_int_equal(end[0], 2);
    assert_int_equal(s.at[K_CHECKIN][1] - s.at[K_CHECKIN][0], 6000);
    /* the next exchange the same (the backoff started over) */
    assert_int_equal(end[1], 4);
    assert_int_equal(s.at[K_CHECKIN][3] - s.at[K_CHECKIN][2], 6000);
    assert_true(s.at[K_CHECKIN][2] - s.at[K_CHECKIN][1] >= 6000);
    dev_close(&d, &s);
    /* Backoff 20 s, bound 10 s: the first retry ([10, 20] s) is cut to the window's end, 10 s
     * after the first try (= backoff_initial_ms / 2). */
    srv_init(&s, always_503);
    dev_open(&d, &s, 20000, 3600000, 10000, 30);
    step_until_giveups(&d, &s, K_CHECKIN, 2, end);
    assert_int_equal(end[0], 2);
    assert_int_equal(s.at[K_CHECKIN][1] - s.at[K_CHECKIN][0], 10000);
    assert_int_equal(end[1], 4);
    assert_int_equal(s.at[K_CHECKIN][3] - s.at[K_CHECKIN][2], 10000);
    dev_close(&d, &s);
    /* Backoff 30 s, bound 10 s: a try 10 s after the last would be closer than 15 s: one try
     * per exchange, as configured. */
    srv_init(&s, always_503);
    dev_open(&d, &s, 30000, 3600000, 10000, 30);
    step_until_giveups(&d, &s, K_CHECKIN, 3, end);
    assert_int_equal(end[0], 1);
    assert_int_equal(end[1], 2);
    assert_int_equal(end[2], 3);
    assert_true(s.at[K_CHECKIN][1] - s.at[K_CHECKIN][0] >= 15000);
    dev_close(&d, &s);
}

/* ---- 425 is an answer ---- */

/* Task downloads: 408 four times, then 425 (Retry-After 5 s), then 408 for ever. */
static int task_408_425_408(struct srv *s, enum kind k, int nth, const char **body,
                            const char **retry_after) {
    (void)s;
    if (k != K_TASK)
        return 0;
    if (nth == 4) {
        *body = "{\"error\":{\"code\":\"phase_not_open\"}}";
        *retry_after = "5";
        return 425;
    }
    *body = "{\"error\":{\"code\":\"request_timeout\"}}";
    return 408;
}

/* A 425 proves the server reachable and answering with a plan ("come back at
 * Retry-After"): the backoff and the retry window start over, as after any answer. Before
 * the fix the next 408 kept the old window (counted from the first 408) and the grown
 * backoff. */
static void test_425_restarts_window(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    int end[1];
    srv_init(&s, task_408_425_408);
    dev_open(&d, &s, 1000, 3600000, 60000, 30);
    step_until_giveups(&d, &s, K_TASK, 1, end);
    const int64_t *at = s.at[K_TASK];
    assert_true(end[0] >= 8);
    assert_int_equal(at[5] - at[4], 5000); /* Retry-After of the 425 */
    /* The 408 after the 425 starts a new window: first retry within [0.5, 1] s, the last
     * try at that window's end. */
    assert_true(at[6] - at[5] >= 500 && at[6] - at[5] <= 1000);
    assert_int_equal(at[end[0] - 1], at[5] + 60000);
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.transient_errors, (uint64_t)end[0] - 1); /* the 425 is not one */
    assert_int_equal(cs.retry_timeouts, 1);
    assert_int_equal(cs.rounds_failed, 1); /* the round whose task never came */
    assert_int_equal(cs.last_error, FL_ERR_TIMEOUT);
    assert_non_null(strstr(fl_client_errmsg(d.c), "task download: HTTP 408"));
    dev_close(&d, &s);
}

/* ---- the round status ---- */

/* Round status polls: 503 three times, "open", 503, malformed, 503, then completed. */
static int status_script(struct srv *s, enum kind k, int nth, const char **body,
                         const char **retry_after) {
    (void)s;
    (void)retry_after;
    if (k != K_STATUS)
        return 0;
    switch (nth) {
    case 3: *body = "{\"state\":\"open\"}"; return 200;
    case 5: *body = "[]"; return 200;
    case 0: case 1: case 2: case 4: case 6: return 503;
    default: return 0;
    }
}

/* A status "not over yet" is an answer: the backoff of the next failure starts over. A
 * malformed status is a failure: polled again after the backoff, not at once (long polls
 * on, so "not over yet" is polled again at once). */
static void test_status_answers(void **st) {
    (void)st;
    struct srv s;
    struct dev d;
    srv_init(&s, status_script);
    dev_open(&d, &s, 1000, 3600000, 300000, 30);
    for (int i = 0; i < 40 && stats(&d).rounds_completed == 0; i++)
        step(&d, &s);
    fl_client_stats cs = stats(&d);
    assert_int_equal(cs.rounds_completed, 1);
    assert_int_equal(cs.uploads, 1);
    assert_int_equal(s.n[K_STATUS], 8);
    const int64_t *at = s.at[K_STATUS];
    assert_true(at[3] - at[2] >= 2000); /* the third failure: [2, 4] s */
    assert_int_equal(at[4], at[3]);     /* "open" with long polls: at once */
    assert_true(at[5] - at[4] >= 500 && at[5] - at[4] <= 1000); /* 503: started over */
    assert_true(at[6] - at[5] >= 1000); /* malformed: the second failure, [1, 2] s */
    assert_true(at[7] - at[6] >= 2000); /* 503: the third, [2, 4] s */
    assert_int_equal(cs.transient_errors, 6);
    dev_close(&d, &s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_giveup_restarts_backoff),
        cmocka_unit_test(test_cut_limits),
        cmocka_unit_test(test_425_restarts_window),
        cmocka_unit_test(test_status_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
