/* HTTP 408 Request Timeout is a transient failure for the SDK (docs/protocol.md section 7):
 * real SDK clients against the REAL coordinator, in-process on 127.0.0.1 over the libcurl
 * transport (wrapped by examples/flotilla-sim's fault transport as in test_round.c), with
 * one more wrapper in front that answers chosen requests 408 itself, as the coordinator
 * does for a request cut by its deadline: that request never reaches the server.
 *
 *  - 408 once on a check-in, a task download and an upload (plain) or masked post (secure
 *    aggregation): each device retries with backoff, with the same Idempotency-Key, and the
 *    round completes with every device counted once;
 *  - 408 on every upload: the device gives the round up once its deadlines have passed,
 *    with an error naming the 408, and goes back to idle (no hang, no sticky failure);
 *  - 503, 408 or a closed connection on every check-in or task download, which no round
 *    deadline bounds (the deadlines come with the task): fl_client_config.retry_timeout_ms
 *    bounds the retrying; fl_client_run returns FL_ERR_TIMEOUT within it (the stepped API
 *    counts it in stats retry_timeouts), nothing is lost (examples, token), a later call
 *    completes a round once the server answers; 0 = no limit; the config checks. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "sdk_fixture.h"

/* ---- the 408 transport ---- */

#define T408_KEYS 8

/* Answers requests matching (method, path_contains) 408 without forwarding them, count
 * times (-1 = for ever); everything else goes to inner. */
struct t408 {
    fl_client_transport inner;
    const char *method, *path_contains;
    int count;
    bool pending;              /* the request in flight is answered here */
    int hits;                  /* requests answered 408 */
    int matched;               /* matching requests (answered 408 or forwarded) */
    char keys[T408_KEYS][64];  /* Idempotency-Key of the first T408_KEYS matches */
    int status;                /* the answer: 0 = 408, 503, or -1 = the connection closes
                                  without an answer (FL_ERR_IO) */
    struct sfx *f;             /* clock of first_ms/last_ms, or NULL */
    int64_t first_ms, last_ms; /* when the first and the last answered request was sent */
};

/* Resets t to answer (method, path_contains) count times (-1 = for ever) with status (0 =
 * 408, 503 or -1 = closed), timing the answered requests on f's clock (NULL = not timed);
 * the inner transport is kept. */
static void t408_set(struct t408 *t, const char *method, const char *path_contains, int count,
                     int status, struct sfx *f) {
    fl_client_transport inner = t->inner;
    memset(t, 0, sizeof(*t));
    t->inner = inner;
    t->method = method;
    t->path_contains = path_contains;
    t->count = count;
    t->status = status;
    t->f = f;
}

static bool t408_match(const struct t408 *t, const fl_client_request *req) {
    return t->method && strcmp(req->method, t->method) == 0 &&
           strstr(req->path, t->path_contains) != NULL;
}

static fl_status t408_send(void *ctx, const fl_client_request *req) {
    struct t408 *t = ctx;
    if (t408_match(t, req)) {
        if (t->matched < T408_KEYS) {
            char *k = t->keys[t->matched];
            k[0] = '\0';
            for (size_t i = 0; i < req->n_headers; i++)
                if (strncmp(req->headers[i], "Idempotency-Key: ", 17) == 0)
                    snprintf(k, sizeof(t->keys[0]), "%s", req->headers[i] + 17);
        }
        t->matched++;
        if (t->count != 0) {
            if (t->count > 0)
                t->count--;
            if (t->f) {
                t->last_ms = sfx_clock(t->f);
                if (t->hits == 0)
                    t->first_ms = t->last_ms;
            }
            t->hits++;
            t->pending = true;
            return FL_OK;
        }
    }
    return t->inner.send(t->inner.ctx, req);
}

static fl_status t408_recv(void *ctx, fl_client_response *resp) {
    static const char body[] = "{\"error\":{\"status\":408,\"code\":\"request_timeout\","
                               "\"message\":\"the request did not arrive within its "
                               "deadline\"}}";
    static const char body503[] = "{\"error\":{\"status\":503,\"code\":\"unavailable\","
                                  "\"message\":\"shutting down\"}}";
    struct t408 *t = ctx;
    if (!t->pending)
        return t->inner.recv(t->inner.ctx, resp);
    t->pending = false;
    if (t->status < 0)
        return FL_ERR_IO; /* closed without an answer */
    if (t->status == 503) {
        assert_int_equal(fl_client_response_set_status(resp, 503), FL_OK);
        assert_int_equal(
            fl_client_response_add_header(resp, "Content-Type", 12, "application/json", 16),
            FL_OK);
        assert_int_equal(fl_client_response_append(resp, body503, sizeof(body503) - 1), FL_OK);
        return FL_OK;
    }
    assert_int_equal(fl_client_response_set_status(resp, 408), FL_OK);
    assert_int_equal(
        fl_client_response_add_header(resp, "Content-Type", 12, "application/json", 16), FL_OK);
    assert_int_equal(fl_client_response_add_header(resp, "Connection", 10, "close", 5), FL_OK);
    assert_int_equal(fl_client_response_append(resp, body, sizeof(body) - 1), FL_OK);
    return FL_OK;
}

static void t408_cancel(void *ctx) {
    struct t408 *t = ctx;
    if (t->pending)
        t->pending = false;
    else if (t->inner.cancel)
        t->inner.cancel(t->inner.ctx);
}

/* ---- devices ---- */

/* Puts t (struct t408) in front of the device's fault transport (sdev_opts.wrap). */
static void t408_wrap(fl_client_transport *tr, void *user) {
    struct t408 *t = user;
    t->inner = *tr;
    tr->struct_size = sizeof(*tr);
    tr->send = t408_send;
    tr->recv = t408_recv;
    tr->cancel = t408_cancel;
    tr->ctx = t;
}

/* sdev_open (sdk_fixture.c) with 20 examples, stepped (no long polls: results are
 * answered at once) and t in front of the fault transport. retry_ms is
 * cfg.retry_timeout_ms, or -1 for the default. */
static void dev_open(struct sdev *d, struct t408 *t, struct sfx *f, int k, const char *pop,
                     const char *etok, int64_t retry_ms) {
    struct sdev_opts o = {.population = pop,
                          .etok = etok,
                          .n_examples = 20,
                          .retry_timeout_ms = retry_ms > 0 ? retry_ms : 0,
                          .retry_timeout_none = retry_ms == 0,
                          .wrap = t408_wrap,
                          .wrap_user = t};
    assert_int_equal(sdev_open(d, f, k, &o), FL_OK);
}

static void pop_json(char *out, size_t cap, int n, bool secagg, int dl_s) {
    snprintf(out, cap,
             "{\"name\":\"pop\",\"allowed_regions\":[\"EU\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":1,"
             "\"max_retry_s\":60},"
             "\"deadlines_s\":{\"advertise\":%d,\"share\":%d,\"masked\":%d,\"unmask\":%d},"
             "\"training\":{\"epochs\":1,\"batch_size\":8,\"learning_rate\":0.1,"
             "\"max_examples\":100},"
             "\"update\":{\"tensors\":[\"fc1.weight\",\"fc1.bias\",\"fc2.weight\",\"fc2.bias\"],"
             "\"weighting\":\"uniform\",\"weight_cap\":22},"
             "\"strategy\":{\"name\":\"fedavg\"},"
             "\"secagg\":{\"enabled\":%s,\"threshold_fraction\":0.5},"
             "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0}}",
             n, n, dl_s, dl_s, dl_s, dl_s, secagg ? "true" : "false");
}

struct world {
    struct sfx *f;
    int n;
    struct sdev d[4];
    struct t408 t[4];
};

/* n devices on a population of target n; real_clock: the coordinator and devices on the
 * real clock (for fl_client_run, which sleeps), else a frozen one moved by sdev_drive. */
static void world_open_opts(struct world *w, int n, bool secagg, int dl_s, bool real_clock,
                            int64_t retry_ms) {
    memset(w, 0, sizeof(*w));
    w->f = sfx_start(real_clock);
    w->n = n;
    size_t mlen;
    uint8_t *model = sfx_model(&mlen);
    char json[4096], etok[256];
    pop_json(json, sizeof(json), n, secagg, dl_s);
    sfx_population(w->f, json, model, mlen, etok, sizeof(etok));
    free(model);
    for (int i = 0; i < n; i++)
        dev_open(&w->d[i], &w->t[i], w->f, i, "pop", etok, retry_ms);
}

static void world_open(struct world *w, int n, bool secagg, int dl_s) {
    world_open_opts(w, n, secagg, dl_s, false, -1);
}

static void world_close(struct world *w) {
    for (int i = 0; i < w->n; i++)
        sdev_close(&w->d[i]);
    sfx_stop(w->f);
}

/* Every device has ended one round (completed or given up) and is idle again. */
static bool all_ended(void *u) {
    struct world *w = u;
    for (int i = 0; i < w->n; i++) {
        fl_client_stats cs;
        sdev_stats(&w->d[i], &cs);
        if (cs.state != FL_CLIENT_STATE_IDLE || cs.rounds_completed + cs.rounds_failed == 0)
            return false;
    }
    return true;
}

static int sum_count(struct sfx *f, int *calls) {
    pthread_mutex_lock(&f->lock);
    int n = (int)f->sum.count;
    *calls = f->sum.calls;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* ---- tests ---- */

/* One 408 on a check-in, a task download and the upload (or the masked post): each is
 * retried after a backoff with the same Idempotency-Key, and the round completes with all
 * three devices in the sum, each once. */
static void test_408_once_then_success(void **st) {
    (void)st;
    for (int secagg = 0; secagg <= 1; secagg++) {
        struct world w;
        world_open(&w, 3, secagg, 30);
        const char *post = secagg ? "/secagg/masked" : "/update";
        t408_set(&w.t[0], "POST", post, 1, 0, NULL);
        t408_set(&w.t[1], "GET", "/task", 1, 0, NULL);
        t408_set(&w.t[2], "POST", "/v1/checkin", 1, 0, NULL);
        int passes = sdev_drive(w.f, w.d, 3, all_ended, &w, 600, 200);
        assert_true(passes < 600);
        int calls = 0;
        assert_int_equal(sum_count(w.f, &calls), 3);
        assert_int_equal(calls, 1);
        for (int i = 0; i < 3; i++) {
            fl_client_stats cs;
            sdev_stats(&w.d[i], &cs);
            if (cs.rounds_completed != 1)
                fprintf(stderr, "device %d (secagg %d): %s\n", i, secagg,
                        fl_client_errmsg(w.d[i].c));
            assert_int_equal(cs.rounds_completed, 1);
            assert_int_equal(cs.rounds_failed, 0);
            assert_int_equal(cs.uploads, 1);
            assert_true(cs.transient_errors >= 1);
            /* Answered 408 once, then sent again and answered by the server. */
            assert_int_equal(w.t[i].hits, 1);
            assert_true(w.t[i].matched >= 2);
        }
        /* Round requests: the retry carries the first try's Idempotency-Key (the
         * participation_id), so the server would take a replay as the same message. */
        for (int i = 0; i < 2; i++) {
            assert_int_equal(strlen(w.t[i].keys[0]), 32);
            assert_string_equal(w.t[i].keys[0], w.t[i].keys[1]);
        }
        world_close(&w);
    }
}

/* 408 on every upload: the device retries with growing backoff while the round's deadlines
 * allow, then gives the round up with an error that names the 408, and is idle again (not
 * failed for good). The server never got the update: no aggregate. */
static void test_408_forever_ends_the_round(void **st) {
    (void)st;
    struct world w;
    world_open(&w, 1, false, 10);
    t408_set(&w.t[0], "POST", "/update", -1, 0, NULL);
    int passes = sdev_drive(w.f, w.d, 1, all_ended, &w, 2000, 200);
    assert_true(passes < 2000);
    fl_client_stats cs;
    sdev_stats(&w.d[0], &cs);
    assert_int_equal(cs.rounds_completed, 0);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.uploads, 0);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    assert_int_equal(cs.last_error, FL_ERR_TIMEOUT);
    const char *msg = fl_client_errmsg(w.d[0].c);
    fprintf(stderr, "given up after %d tries: %s\n", w.t[0].hits, msg);
    assert_non_null(strstr(msg, "408"));
    assert_non_null(strstr(msg, "deadlines passed"));
    /* Backoff 200 ms doubling to 2 s within a 10 s phase deadline: a few tries, not one
     * and not a tight loop. */
    assert_true(w.t[0].hits >= 3);
    assert_true(w.t[0].hits <= 40);
    assert_int_equal(cs.transient_errors, (uint64_t)w.t[0].hits);
    for (int i = 1; i < T408_KEYS && i < w.t[0].hits; i++)
        assert_string_equal(w.t[0].keys[i], w.t[0].keys[0]);
    /* The next step is not an error: the client is not failed for good. */
    int64_t next = 0;
    assert_int_equal(fl_client_step(w.d[0].c, &next), FL_OK);
    int calls = 0;
    sum_count(w.f, &calls);
    assert_int_equal(calls, 0);
    world_close(&w);
}

/* ---- retry_timeout_ms: the exchanges no round deadline bounds ---- */

static uint64_t stored_examples(const struct sdev *d) {
    uint64_t count = 0;
    assert_int_equal(fl_client_store_stats(d->store, &count, NULL), FL_OK);
    return count;
}

/* Checks the state after a give-up: FL_ERR_TIMEOUT counted once, the message names what
 * kept failing and the bound, idle (not failed), the examples and the token kept. */
static void expect_gave_up(const struct sdev *d, const char *cause, uint64_t rounds_failed) {
    fl_client_stats cs;
    sdev_stats(d, &cs);
    const char *msg = fl_client_errmsg(d->c);
    fprintf(stderr, "device %d gave up: %s\n", d->k, msg);
    assert_int_equal(cs.last_error, FL_ERR_TIMEOUT);
    assert_int_equal(cs.retry_timeouts, 1);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    assert_int_equal(cs.rounds_failed, rounds_failed);
    assert_int_equal(cs.rounds_completed, 0);
    assert_int_equal(cs.uploads, 0);
    assert_non_null(strstr(msg, cause));
    assert_non_null(strstr(msg, "gave up after retrying"));
    assert_non_null(strstr(msg, "retry_timeout_ms"));
    assert_int_equal(stored_examples(d), 20);
    char tok[FL_CLIENT_TOKEN_MAX_CHARS + 1];
    assert_int_equal(fl_client_token(d->c, tok, sizeof(tok)), FL_OK);
}

/* fl_client_run against a coordinator on the real clock: check-ins answered 503 for ever,
 * then (second pass) task downloads answered 408 for ever. Each time the call returns
 * FL_ERR_TIMEOUT within retry_timeout_ms of the first failed try, after a few retries;
 * once the server answers again, the next call completes a round. */
static void test_retry_timeout_run_returns_timeout(void **st) {
    (void)st;
    enum { LIMIT_MS = 3000 };
    for (int pass = 0; pass < 2; pass++) {
        struct world w;
        world_open_opts(&w, 1, false, 30, true, LIMIT_MS);
        struct t408 *t = &w.t[0];
        struct sdev *d = &w.d[0];
        t408_set(t, pass ? "GET" : "POST", pass ? "/task" : "/v1/checkin", -1,
                 pass ? 408 : 503, w.f);
        fl_status rc = fl_client_run(d->c, 60000);
        int64_t end = sfx_clock(w.f);
        assert_int_equal(rc, FL_ERR_TIMEOUT);
        fprintf(stderr, "pass %d: %d tries in %lld ms\n", pass, t->hits,
                (long long)(end - t->first_ms));
        /* Within the bound (plus the last answer's own time), after some retries (backoff
         * 200 ms doubling to 2 s: at least 4 tries fit in 3 s). */
        assert_true(t->last_ms - t->first_ms <= LIMIT_MS + 100); /* woken a little late */
        assert_true(end - t->first_ms <= LIMIT_MS + 500);
        assert_true(t->hits >= 3);
        expect_gave_up(d, pass ? "task download: HTTP 408" : "check-in failed: HTTP 503",
                       pass ? 1 : 0);
        fl_client_stats cs;
        sdev_stats(d, &cs);
        assert_int_equal(cs.transient_errors, (uint64_t)t->hits);
        assert_int_equal(cs.selected, (uint64_t)pass);
        /* Not sticky: the server answers again and the next call runs a whole round (the
         * task download's device checks in again and gets the same round). */
        t->count = 0;
        rc = fl_client_run(d->c, 60000);
        if (rc != FL_OK)
            fprintf(stderr, "second run: %s (%s)\n", fl_status_name(rc), fl_client_errmsg(d->c));
        assert_int_equal(rc, FL_OK);
        sdev_stats(d, &cs);
        assert_int_equal(cs.rounds_completed, 1);
        assert_int_equal(cs.uploads, 1);
        assert_int_equal(cs.retry_timeouts, 1);
        assert_int_equal(stored_examples(d), 20);
        int calls = 0;
        assert_int_equal(sum_count(w.f, &calls), 1);
        assert_int_equal(calls, 1);
        world_close(&w);
    }
}

static bool gave_up_or_completed(void *u) {
    struct world *w = u;
    fl_client_stats cs;
    sdev_stats(&w->d[0], &cs);
    return cs.retry_timeouts > 0 || cs.rounds_completed > 0;
}

/* The stepped API on the frozen clock, connections closed without an answer on every
 * check-in: with the default bound (5 min) the device gives up between 5 min less one
 * backoff and 5 min after its first try, with every step returning FL_OK and the give-up
 * counted in stats; it then checks in again and completes a round once the server answers.
 * With retry_timeout_ms = 0 it retries for ever (20 min here), as before the field. */
static void test_retry_timeout_stepped_default_and_no_limit(void **st) {
    (void)st;
    struct world w;
    world_open_opts(&w, 1, false, 30, false, -1);
    struct t408 *t = &w.t[0];
    t408_set(t, "POST", "/v1/checkin", -1, -1, w.f);
    int passes = sdev_drive(w.f, w.d, 1, gave_up_or_completed, &w, 5000, 200);
    assert_true(passes < 5000);
    expect_gave_up(&w.d[0], "/v1/checkin", 0);
    fprintf(stderr, "default bound: %d tries over %lld ms\n", t->hits,
            (long long)(t->last_ms - t->first_ms));
    assert_true(t->last_ms - t->first_ms <= 300000);
    assert_true(t->last_ms - t->first_ms > 300000 - 2000);
    /* The server answers again: the client checks in and completes a round. */
    t->count = 0;
    passes = sdev_drive(w.f, w.d, 1, all_ended, &w, 2000, 200);
    assert_true(passes < 2000);
    fl_client_stats cs;
    sdev_stats(&w.d[0], &cs);
    assert_int_equal(cs.rounds_completed, 1);
    assert_int_equal(cs.retry_timeouts, 1);
    assert_int_equal(stored_examples(&w.d[0]), 20);
    world_close(&w);

    world_open_opts(&w, 1, false, 30, false, 0);
    t = &w.t[0];
    t408_set(t, "POST", "/v1/checkin", -1, -1, w.f);
    int64_t start = sfx_clock(w.f);
    while (sfx_clock(w.f) - start < 20 * 60000)
        sdev_drive(w.f, w.d, 1, NULL, NULL, 50, 200);
    sdev_stats(&w.d[0], &cs);
    assert_int_equal(cs.retry_timeouts, 0);
    assert_int_equal(cs.last_error, FL_ERR_IO);
    assert_int_equal(cs.state, FL_CLIENT_STATE_CHECKIN);
    assert_true(t->hits >= 600); /* backoff capped at 2 s: still trying every 1-2 s */
    assert_int_equal(cs.transient_errors, (uint64_t)t->hits);
    world_close(&w);
}

static fl_status io_send(void *ctx, const fl_client_request *req) {
    (void)ctx;
    (void)req;
    return FL_ERR_IO;
}

static fl_status io_recv(void *ctx, fl_client_response *resp) {
    (void)ctx;
    (void)resp;
    return FL_ERR_IO;
}

static int64_t jump_clock(void *user) {
    return *(int64_t *)user;
}

/* Steps c n times on the clock *now, jumping it to each next try; a transport that always
 * fails. Returns the client's stats. */
static fl_client_stats step_jumping(fl_client *c, int64_t *now, int n) {
    for (int i = 0; i < n; i++) {
        int64_t next = 0;
        assert_int_equal(fl_client_step(c, &next), FL_OK);
        *now = next > *now ? next : *now;
    }
    fl_client_stats cs;
    memset(&cs, 0, sizeof(cs));
    cs.struct_size = sizeof(cs);
    assert_int_equal(fl_client_stats_get(c, &cs), FL_OK);
    return cs;
}

/* The field's default, its check, and the older struct sizes: one ending before
 * retry_timeout_ms (the identity release) is accepted and means no limit; a stats struct
 * ending before retry_timeouts is filled up to there. */
static void test_retry_timeout_config(void **st) {
    (void)st;
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    assert_int_equal(cfg.retry_timeout_ms, 300000);
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = 4;
    fl_client_store *store = NULL;
    assert_int_equal(fl_client_store_open(&store, &sc, NULL, 0), FL_OK);
    cfg.population = "pop";
    cfg.region = "EU";
    memset(cfg.coordinator_key, 7, sizeof(cfg.coordinator_key));
    cfg.has_coordinator_key = 1;
    cfg.enrollment_token = "flp_0123456789abcdefghijklmnop";
    cfg.transport.struct_size = sizeof(cfg.transport);
    cfg.transport.send = io_send;
    cfg.transport.recv = io_recv;
    cfg.store = store;
    int64_t now = 1767225600000;
    cfg.clock = jump_clock;
    cfg.clock_user = &now;
    char why[256];
    fl_client *c = NULL;
    /* The default gives up: the backoff (1 s doubling to 1 h) passes 5 min within ten
     * tries, the last cut to the window's end (test_sdk_retry_window.c checks the rest). */
    assert_int_equal(fl_client_create(&c, &cfg, why, sizeof(why)), FL_OK);
    fl_client_stats cs = step_jumping(c, &now, 40);
    assert_true(cs.retry_timeouts >= 1);
    assert_int_equal(cs.last_error, FL_ERR_TIMEOUT);
    assert_non_null(strstr(fl_client_errmsg(c), "transport send failed"));
    fl_client_destroy(c);
    cfg.retry_timeout_ms = ((uint64_t)1 << 40) + 1;
    assert_int_equal(fl_client_create(&c, &cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.retry_timeout_ms"));
    cfg.retry_timeout_ms = (uint64_t)1 << 40;
    assert_int_equal(fl_client_create(&c, &cfg, why, sizeof(why)), FL_OK);
    fl_client_destroy(c);

    /* An app built before the field: whatever follows its struct in memory is not read
     * (here a retry_timeout_ms that would be refused). Sizes in between are refused. */
    size_t old = offsetof(fl_client_config, retry_timeout_ms);
    assert_true(old < sizeof(fl_client_config));
    uint8_t *buf = malloc(sizeof(fl_client_config));
    assert_non_null(buf);
    cfg.struct_size = old;
    memcpy(buf, &cfg, old);
    memset(buf + old, 0xA5, sizeof(fl_client_config) - old);
    assert_int_equal(fl_client_create(&c, (const fl_client_config *)buf, why, sizeof(why)),
                     FL_OK);
    /* ...and means no limit: a transport that always fails is retried on, never given up,
     * long after the default bound (the test clock jumps to each next try: days). */
    int64_t t0 = now;
    cs = step_jumping(c, &now, 200);
    assert_int_equal(cs.retry_timeouts, 0);
    assert_int_equal(cs.transient_errors, 200);
    assert_true(now - t0 > 24 * 3600000LL);
    /* The older stats struct: filled up to last_error, the bytes after it untouched. */
    uint8_t sbuf[sizeof(fl_client_stats)];
    memset(sbuf, 0x5A, sizeof(sbuf));
    ((fl_client_stats *)sbuf)->struct_size = offsetof(fl_client_stats, retry_timeouts);
    assert_int_equal(fl_client_stats_get(c, (fl_client_stats *)sbuf), FL_OK);
    assert_int_equal(((fl_client_stats *)sbuf)->struct_size,
                     offsetof(fl_client_stats, retry_timeouts));
    assert_int_equal(((fl_client_stats *)sbuf)->last_error, FL_ERR_IO);
    for (size_t i = offsetof(fl_client_stats, retry_timeouts); i < sizeof(sbuf); i++)
        assert_int_equal(sbuf[i], 0x5A);
    ((fl_client_stats *)sbuf)->struct_size = offsetof(fl_client_stats, retry_timeouts) + 4;
    assert_int_equal(fl_client_stats_get(c, (fl_client_stats *)sbuf), FL_ERR_MISUSE);
    fl_client_destroy(c);
    ((fl_client_config *)buf)->struct_size = old + 4;
    assert_int_equal(fl_client_create(&c, (const fl_client_config *)buf, why, sizeof(why)),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.struct_size"));
    free(buf);
    fl_client_store_close(store);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_408_once_then_success),
        cmocka_unit_test(test_408_forever_ends_the_round),
        cmocka_unit_test(test_retry_timeout_config),
        cmocka_unit_test(test_retry_timeout_stepped_default_and_no_limit),
        cmocka_unit_test(test_retry_timeout_run_returns_timeout),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
