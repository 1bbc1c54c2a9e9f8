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
 *    with an error naming the 408, and goes back to idle (no hang, no sticky failure). */
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
    bool pending;             /* the request in flight is answered here */
    int hits;                 /* requests answered 408 */
    int matched;              /* matching requests (answered 408 or forwarded) */
    char keys[T408_KEYS][64]; /* Idempotency-Key of the first T408_KEYS matches */
};

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
    struct t408 *t = ctx;
    if (!t->pending)
        return t->inner.recv(t->inner.ctx, resp);
    t->pending = false;
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

static void dev_log(void *u, fl_log_level lv, const char *msg) {
    (void)lv;
    if (getenv("FL_TEST_LOG"))
        fprintf(stderr, "  [dev %d] %s\n", ((struct sdev *)u)->k, msg);
}

/* Like sdev_open (sdk_fixture.c), with t in front of the fault transport. */
static void dev_open(struct sdev *d, struct t408 *t, struct sfx *f, int k, const char *pop,
                     const char *etok) {
    memset(d, 0, sizeof(*d));
    d->k = k;
    d->max_rounds = 1;
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = SFX_IN;
    sc.clock = sfx_clock;
    sc.clock_user = f;
    assert_int_equal(fl_client_store_open(&d->store, &sc, NULL, 0), FL_OK);
    for (int i = 0; i < 20; i++) {
        float x[SFX_IN];
        int32_t y;
        sfx_example(x, &y, k, i);
        assert_int_equal(fl_client_store_add(d->store, x, SFX_IN, y), FL_OK);
    }
    fl_client_curl_config tc;
    fl_client_curl_config_init(&tc);
    tc.base_url = f->base_url;
    char err[256] = "";
    assert_int_equal(fl_client_curl_create(&d->curl, &tc, err, sizeof(err)), FL_OK);
    fl_client_transport curl;
    assert_int_equal(fl_client_curl_transport(d->curl, &curl), FL_OK);
    assert_int_equal(sim_ft_create(&d->ft, &curl, sfx_clock, f), FL_OK);
    sim_ft_transport(d->ft, &t->inner);
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    cfg.logger.fn = dev_log;
    cfg.logger.user = d;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.population = pop;
    cfg.region = "EU";
    memcpy(cfg.coordinator_key, f->pk, 32);
    cfg.has_coordinator_key = 1;
    cfg.enrollment_token = etok;
    cfg.transport.struct_size = sizeof(cfg.transport);
    cfg.transport.send = t408_send;
    cfg.transport.recv = t408_recv;
    cfg.transport.cancel = t408_cancel;
    cfg.transport.ctx = t;
    cfg.store = d->store;
    cfg.clock = sfx_clock;
    cfg.clock_user = f;
    cfg.seed = (uint64_t)k + 1;
    cfg.backoff_initial_ms = 200;
    cfg.backoff_max_ms = 2000;
    cfg.long_poll_s = 0; /* stepped: results are answered at once */
    if (fl_client_create(&d->c, &cfg, err, sizeof(err)) != FL_OK)
        fail_msg("fl_client_create: %s", err);
    fl_client_eligibility e = {sizeof(e), 1, 1, 1, 80};
    assert_int_equal(fl_client_set_eligibility(d->c, &e), FL_OK);
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

static void world_open(struct world *w, int n, bool secagg, int dl_s) {
    memset(w, 0, sizeof(*w));
    w->f = sfx_start(false);
    w->n = n;
    size_t mlen;
    uint8_t *model = sfx_model(&mlen);
    char json[4096], etok[256];
    pop_json(json, sizeof(json), n, secagg, dl_s);
    sfx_population(w->f, json, model, mlen, etok, sizeof(etok));
    free(model);
    for (int i = 0; i < n; i++)
        dev_open(&w->d[i], &w->t[i], w->f, i, "pop", etok);
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
        w.t[0] = (struct t408){w.t[0].inner, "POST", post, 1, false, 0, 0, {{0}}};
        w.t[1] = (struct t408){w.t[1].inner, "GET", "/task", 1, false, 0, 0, {{0}}};
        w.t[2] = (struct t408){w.t[2].inner, "POST", "/v1/checkin", 1, false, 0, 0, {{0}}};
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
    w.t[0] = (struct t408){w.t[0].inner, "POST", "/update", -1, false, 0, 0, {{0}}};
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

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_408_once_then_success),
        cmocka_unit_test(test_408_forever_ends_the_round),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
