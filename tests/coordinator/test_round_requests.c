/* Device requests against forming, running and finished rounds (docs/protocol.md sections
 * 5-7): each refused update, secagg message, result poll or status poll answers its
 * documented status and code and changes nothing:
 *
 *   - posts to a round that is still forming or to a phase not yet open: 425 phase_not_open
 *     with Retry-After; to a closed phase or by a dropped client: 410 round_closed;
 *   - empty, unbound or foreign messages: 400 invalid_message; wrong media type: 415; bad
 *     round ids and ?wait= values: 400 invalid_parameter; unknown phases and the
 *     consistency phase (not offered): 404;
 *   - results: 204 with Retry-After: 0 when the phase is open and wait=0, 410 once a
 *     phase's result is gone, the outcome from the unmask result after the round ended;
 *   - status words while a round runs (the open secagg phase, "masked" for plain rounds).
 *
 * The ticker thread is stopped: the test moves the clock past deadlines and posts before it
 * ticks, to see the deadline checks of the request path itself. */
#include <time.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"

static void stop_ticker(struct fx *f) {
    if (f->ticking) {
        atomic_store(&f->stop_ticker, true);
        pthread_join(f->ticker, NULL);
        f->ticking = false;
    }
}

static int setup(void **state) {
    fx_setup(state);
    stop_ticker(*state);
    return 0;
}

static void expect(struct resp *r, long status, const char *code, const char *field,
                   const char *what) {
    if (r->status != status)
        fprintf(stderr, "%s: expected %ld got %ld: %s\n", what, status, r->status,
                r->body ? r->body : "");
    assert_error(r, status, code);
    if (field) {
        json_t *j = body_json(r);
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(j, "error"), "field")), field);
        json_decref(j);
    }
    resp_free(r);
}

static struct resp post_to(struct fx *f, struct tc *c, const char *path, const char *ct,
                           const void *body, size_t len) {
    return http_req(f, "POST", path, c->tok, ct, body, len, c->pid);
}

static struct resp get_as(struct fx *f, struct tc *c, const char *path) {
    return http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
}

static const char *state_word(struct fx *f, struct tc *c, int64_t rid, char *buf, size_t n) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=0", (long long)rid);
    struct resp r = get_as(f, c, path);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(buf, n, "%s", json_string_value(json_object_get(j, "state")));
    json_decref(j);
    resp_free(&r);
    return buf;
}

/* Plain rounds: forming, running, past the deadline before the tick, finished. */
static void test_plain_update_refusals(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct popcfg pc = {.name = "pu", .target = N, .min = 2, .secagg = false, .mode = "none",
                        .bits = 32};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    int64_t rid = 0;
    checkin_all(f, c, 1, &rid);
    char path[96], word[32], hv[16];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[16 + 1024 * 4];
    uint64_t zeros[D + 1] = {0};
    zeros[D] = 1;
    size_t bl = plain_update_body(body, rid, zeros, D + 1, 4);
    /* Forming: 425 with Retry-After (the forming window left, at most 60 s). */
    struct resp r = post_to(f, &c[0], path, "application/octet-stream", body, bl);
    assert_int_equal(r.status, 425);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_true(strtol(hv, NULL, 10) >= 1 && strtol(hv, NULL, 10) <= 60);
    expect(&r, 425, "phase_not_open", NULL, "update while forming");
    /* Half the window later: the rest of it; at its very end: 1. */
    int64_t formed_at = atomic_load(&f->now_ms);
    atomic_store(&f->now_ms, formed_at + 30 * 1000);
    r = post_to(f, &c[0], path, "application/octet-stream", body, bl);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "30");
    expect(&r, 425, "phase_not_open", NULL, "update while forming (30 s left)");
    atomic_store(&f->now_ms, formed_at + 59 * 1000 + 500);
    r = post_to(f, &c[0], path, "application/octet-stream", body, bl);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "1");
    expect(&r, 425, "phase_not_open", NULL, "update while forming (0.5 s left)");
    atomic_store(&f->now_ms, formed_at);
    assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "forming");
    checkin_all(f, c + 1, N - 1, &rid); /* full: the round starts */
    fetch_tasks(f, c, N, rid);
    assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "masked");
    /* Bad requests. */
    r = post_to(f, &c[0], "/v1/rounds/x/update", "application/octet-stream", body, bl);
    expect(&r, 400, "invalid_parameter", "round_id", "bad id");
    r = post_to(f, &c[0], path, "text/plain", body, bl);
    expect(&r, 415, "unsupported_media_type", NULL, "media type");
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", body, bl, NULL);
    expect(&r, 400, "missing_field", "Idempotency-Key", "no key");
    r = post_to(f, &c[0], path, "application/octet-stream", NULL, 0);
    expect(&r, 400, "invalid_message", NULL, "empty");
    uint8_t v2[16 + 1024 * 4];
    memcpy(v2, body, bl);
    v2[4] = 2; /* header version 2 */
    r = post_to(f, &c[0], path, "application/octet-stream", v2, bl);
    expect(&r, 400, "invalid_message", NULL, "header version");
    memcpy(v2, body, bl);
    memset(v2 + bl - 4, 0, 4); /* weight 0 */
    r = post_to(f, &c[0], path, "application/octet-stream", v2, bl);
    expect(&r, 400, "invalid_message", NULL, "weight 0");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/masked", (long long)rid);
    r = post_to(f, &c[0], path, "application/octet-stream", body, bl);
    expect(&r, 404, "not_found", NULL, "secagg post on a plain round");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/masked/result?wait=0", (long long)rid);
    r = get_as(f, &c[0], path);
    expect(&r, 404, "not_found", "phase", "secagg result on a plain round");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    /* Two post; the update deadline passes before the tick: the third is refused as late. */
    for (int i = 0; i < 2; i++) {
        bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        r = post_to(f, &c[i], path, "application/octet-stream", body, bl);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    atomic_store(&f->now_ms, c[0].task.dl[2]);
    bl = plain_update_body(body, rid, c[2].words, c[2].task.vec_len, 4);
    r = post_to(f, &c[2], path, "application/octet-stream", body, bl);
    expect(&r, 410, "round_closed", NULL, "late update");
    fl_coord_tick(f->co); /* closes with 2 of 3 (min 2): completed */
    assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "completed");
    /* After the end: the dropped device and a finished round both answer 410. */
    r = post_to(f, &c[2], path, "application/octet-stream", body, bl);
    expect(&r, 410, "round_closed", NULL, "dropped device");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=xx", (long long)rid);
    r = get_as(f, &c[0], path);
    expect(&r, 400, "invalid_parameter", "wait", "status wait");
    r = get_as(f, &c[0], "/v1/rounds/0/status");
    expect(&r, 400, "invalid_parameter", "round_id", "status id");
    r = get_as(f, &c[0], "/v1/rounds/4242/status");
    expect(&r, 410, "round_closed", NULL, "status of an unknown round");
    clients_free(c, N);
}

/* Secure aggregation: phase order, message checks, results and their lifetimes. */
static void test_secagg_message_refusals(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    struct popcfg pc = {.name = "sm", .target = N, .min = 3, .secagg = true, .neighbors = 0,
                        .mode = "none", .bits = 32};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    const uint8_t *out[N];
    size_t ol[N];
    secagg_clients_start(c, N, rid, out, ol);
    char path[128], word[32], hv[16];
    assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "advertise");
    /* Route and header checks. */
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/bogus", (long long)rid);
    struct resp r = post_to(f, &c[0], path, "application/octet-stream", out[0], ol[0]);
    expect(&r, 404, "not_found", "phase", "unknown phase");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/consistency", (long long)rid);
    r = post_to(f, &c[0], path, "application/octet-stream", out[0], ol[0]);
    expect(&r, 404, "not_found", "phase", "consistency phase");
    r = post_to(f, &c[0], "/v1/rounds/abc/secagg/advertise", "application/octet-stream", out[0],
                ol[0]);
    expect(&r, 400, "invalid_parameter", "round_id", "bad id");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise", (long long)rid);
    r = post_to(f, &c[0], path, "application/json", out[0], ol[0]);
    expect(&r, 415, "unsupported_media_type", "Content-Type", "media type");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    r = post_to(f, &c[0], path, "application/octet-stream", out[0], ol[0]);
    expect(&r, 404, "not_found", NULL, "plain update on a secagg round");
    /* A later phase before it opens: 425 with Retry-After (1-5 s). */
    r = post_phase(f, &c[0], rid, "share", out[0], ol[0]);
    assert_int_equal(r.status, 425);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_true(strtol(hv, NULL, 10) >= 1 && strtol(hv, NULL, 10) <= 5);
    expect(&r, 425, "phase_not_open", NULL, "share early");
    /* Bad messages: empty, garbage, another client's, truncated. */
    r = post_phase(f, &c[0], rid, "advertise", NULL, 0);
    expect(&r, 400, "invalid_message", NULL, "empty");
    r = post_phase(f, &c[0], rid, "advertise", (const uint8_t *)"garbage!", 8);
    expect(&r, 400, "invalid_message", NULL, "garbage");
    r = post_phase(f, &c[1], rid, "advertise", out[0], ol[0]);
    expect(&r, 400, "invalid_message", NULL, "another client's message");
    r = post_phase(f, &c[0], rid, "advertise", out[0], ol[0] - 7);
    expect(&r, 400, "invalid_message", NULL, "truncated");
    {
        /* A well-formed advertise of this client for another round. */
        fl_secagg_config cfg;
        fl_secagg_config_init(&cfg);
        cfg.num_clients = c[0].task.n;
        cfg.dim = (uint32_t)c[0].task.vec_len;
        cfg.bits = c[0].task.bits;
        cfg.degree = c[0].task.k;
        cfg.threshold = c[0].task.t;
        fl_secagg_client *other = NULL;
        assert_int_equal(fl_secagg_client_create(&other, &cfg, (uint64_t)rid + 1000,
                                                 c[0].task.index, NULL, NULL), FL_OK);
        uint32_t x[1024] = {0};
        x[c[0].task.vec_len - 1] = 1;
        assert_int_equal(fl_secagg_client_set_input(other, x, c[0].task.vec_len), FL_OK);
        const uint8_t *m;
        size_t ml;
        assert_int_equal(fl_secagg_client_start(other, &m, &ml), FL_OK);
        r = post_phase(f, &c[0], rid, "advertise", m, ml);
        expect(&r, 400, "invalid_message", NULL, "another round's message");
        fl_secagg_client_destroy(other);
    }
    /* Results: ?wait= checked; open phase and wait=0: 204, Retry-After 0. */
    static const char *const waits[] = {"abc", "61", "", "6x", "123"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise/result?wait=%s",
                 (long long)rid, waits[i]);
        r = get_as(f, &c[0], path);
        expect(&r, 400, "invalid_parameter", "wait", waits[i]);
    }
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/unknown/result", (long long)rid);
    r = get_as(f, &c[0], path);
    expect(&r, 404, "not_found", "phase", "unknown phase result");
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/consistency/result", (long long)rid);
    r = get_as(f, &c[0], path);
    expect(&r, 404, "not_found", "phase", "consistency result");
    r = get_as(f, &c[0], "/v1/rounds/-2/secagg/advertise/result");
    expect(&r, 400, "invalid_parameter", "round_id", "result id");
    r = get_result(f, &c[0], rid, "advertise", 0);
    assert_int_equal(r.status, 204);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "0");
    resp_free(&r);
    /* Three advertise; device 3 is late: the deadline passes before the tick. */
    for (int i = 0; i < 3; i++) {
        r = post_phase(f, &c[i], rid, "advertise", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    atomic_store(&f->now_ms, c[0].task.dl[0]);
    r = post_phase(f, &c[3], rid, "advertise", out[3], ol[3]);
    expect(&r, 410, "round_closed", NULL, "late advertise");
    fl_coord_tick(f->co); /* advertise closes with 3; device 3 is dropped */
    assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "share");
    r = post_phase(f, &c[3], rid, "advertise", out[3], ol[3]);
    expect(&r, 410, "round_closed", NULL, "dropped device posts");
    r = get_result(f, &c[3], rid, "advertise", 0);
    expect(&r, 410, "round_closed", NULL, "dropped device's result");
    r = get_result(f, &c[3], rid, "share", 0);
    expect(&r, 410, "round_closed", NULL, "dropped device's later result");
    /* Masked before share closes: Retry-After is the time left, at most 5 s, at least 1. */
    atomic_store(&f->now_ms, c[0].task.dl[1] - 3000);
    r = post_phase(f, &c[0], rid, "masked", out[0], ol[0]);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "3");
    expect(&r, 425, "phase_not_open", NULL, "masked early (3 s)");
    atomic_store(&f->now_ms, c[0].task.dl[1] - 500);
    r = post_phase(f, &c[0], rid, "masked", out[0], ol[0]);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "1");
    expect(&r, 425, "phase_not_open", NULL, "masked early");
    /* The others go on: share, masked, unmask. */
    for (int i = 0; i < 3; i++) {
        r = get_result(f, &c[i], rid, "advertise", 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                 &out[i], &ol[i]), FL_OK);
        resp_free(&r);
    }
    static const char *const phases[] = {"share", "masked", "unmask"};
    for (int ph = 0; ph < 3; ph++) {
        for (int i = 0; i < 3; i++) {
            r = post_phase(f, &c[i], rid, phases[ph], out[i], ol[i]);
            if (r.status != 202)
                fprintf(stderr, "%s %d: %ld %s\n", phases[ph], i, r.status, r.body);
            assert_int_equal(r.status, 202);
            resp_free(&r);
        }
        if (ph == 2)
            break;
        for (int i = 0; i < 3; i++) {
            r = get_result(f, &c[i], rid, phases[ph], 0);
            assert_int_equal(r.status, 200);
            assert_int_equal(fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                     &out[i], &ol[i]), FL_OK);
            resp_free(&r);
        }
        if (ph == 1) {
            /* The advertise results were freed when the share phase closed: 410. */
            r = get_result(f, &c[0], rid, "advertise", 0);
            expect(&r, 410, "round_closed", NULL, "advertise result after share");
        }
    }
    /* The round completed: the unmask result is its outcome; a repeated post is a replay. */
    r = get_result(f, &c[0], rid, "unmask", 0);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(j, "participants")), 3);
    json_decref(j);
    resp_free(&r);
    r = post_phase(f, &c[0], rid, "unmask", out[0], ol[0]);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = post_phase(f, &c[1], rid, "unmask", (const uint8_t *)"other", 5);
    expect(&r, 409, "already_submitted", NULL, "different unmask after the end");
    r = get_result(f, &c[0], rid, "share", 0);
    expect(&r, 410, "round_closed", NULL, "share result after the end");
    secagg_clients_free(c, N);
    clients_free(c, N);
}

/* A secagg round abandoned at a phase deadline: results and posts after it answer 410 with
 * the reason. */
static void test_secagg_abandoned_answers(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    struct popcfg pc = {.name = "sx", .target = N, .min = 4, .secagg = true, .neighbors = 0,
                        .mode = "none", .bits = 32};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    const uint8_t *out[N];
    size_t ol[N];
    secagg_clients_start(c, N, rid, out, ol);
    for (int i = 0; i < 3; i++) {
        struct resp r = post_phase(f, &c[i], rid, "advertise", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    fx_advance(f, c[0].task.dl[0] + 1 - atomic_load(&f->now_ms)); /* 3 < min 4: abandoned */
    char word[32];
    assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "abandoned");
    struct resp r = get_result(f, &c[0], rid, "advertise", 0);
    assert_int_equal(r.status, 410);
    assert_non_null(strstr(r.body, "too few survivors"));
    expect(&r, 410, "round_closed", NULL, "result after abandonment");
    r = post_phase(f, &c[0], rid, "share", out[0], ol[0]);
    expect(&r, 410, "round_closed", NULL, "post after abandonment");
    r = get_result(f, &c[0], rid, "unmask", 0);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "advertise"));
    json_decref(j);
    resp_free(&r);
    secagg_clients_free(c, N);
    clients_free(c, N);
}


/* ---- long polls ---- */

struct poller {
    struct fx *f;
    struct tc *c;
    char path[128];
    long status;
    pthread_t th;
};

static void *poll_main(void *arg) {
    struct poller *pl = arg;
    struct resp r = http_req(pl->f, "GET", pl->path, pl->c->tok, NULL, NULL, 0, pl->c->pid);
    pl->status = r.status;
    resp_free(&r);
    return NULL;
}

static void poll_start(struct poller *pl, struct fx *f, struct tc *c, const char *path) {
    pl->f = f;
    pl->c = c;
    snprintf(pl->path, sizeof(pl->path), "%s", path);
    pl->status = -1;
    assert_int_equal(pthread_create(&pl->th, NULL, poll_main, pl), 0);
    struct timespec ts = {0, 200 * 1000000L}; /* let it park (order only matters for */
    nanosleep(&ts, NULL);                     /* which list links get exercised) */
}

/* Waits (up to 10 s) until the coordinator reports n long polls parked. */
static void wait_waiting(struct fx *f, unsigned n) {
    char want[64];
    snprintf(want, sizeof(want), "\nflotilla_long_polls_waiting %u\n", n);
    for (int i = 0; i < 1000; i++) {
        struct resp r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
        bool seen = r.status == 200 && r.body && strstr(r.body, want);
        resp_free(&r);
        if (seen)
            return;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fail_msg("the poll was never parked");
}

/* Several parked polls at once: result polls of the open phase and a status poll. Closing
 * the phase answers exactly the result polls (200); a poll whose wait ends first gets 204;
 * the status poll is answered when the round ends. */
static void test_parked_polls(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct popcfg pc = {.name = "lp", .target = N, .min = 3, .secagg = true, .neighbors = 0,
                        .mode = "none", .bits = 32};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    const uint8_t *out[N];
    size_t ol[N];
    secagg_clients_start(c, N, rid, out, ol);
    char res[128], st[128], shortp[128];
    snprintf(res, sizeof(res), "/v1/rounds/%lld/secagg/advertise/result?wait=20", (long long)rid);
    snprintf(st, sizeof(st), "/v1/rounds/%lld/status?wait=20", (long long)rid);
    snprintf(shortp, sizeof(shortp), "/v1/rounds/%lld/secagg/advertise/result?wait=1",
             (long long)rid);
    char later_ph[128];
    snprintf(later_ph, sizeof(later_ph), "/v1/rounds/%lld/secagg/share/result?wait=20",
             (long long)rid);
    struct poller pl[5];
    poll_start(&pl[4], f, &c[2], later_ph); /* a later phase's result: not woken by advertise */
    poll_start(&pl[0], f, &c[0], res);
    poll_start(&pl[1], f, &c[1], st);
    poll_start(&pl[2], f, &c[2], res);
    poll_start(&pl[3], f, &c[1], shortp);
    wait_waiting(f, 5);
    /* The short poll's second passes; the tick answers it (204) and no other. */
    struct timespec ts = {1, 300 * 1000000L};
    nanosleep(&ts, NULL);
    fl_coord_tick(f->co);
    pthread_join(pl[3].th, NULL);
    assert_int_equal(pl[3].status, 204);
    for (int i = 0; i < N; i++) {
        struct resp r = post_phase(f, &c[i], rid, "advertise", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    pthread_join(pl[0].th, NULL);
    pthread_join(pl[2].th, NULL);
    assert_int_equal(pl[0].status, 200);
    assert_int_equal(pl[2].status, 200);
    /* The status poll is still parked: stopping the population ends the round. */
    struct resp r = http_json(f, "POST", "/v1/admin/populations/lp/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    pthread_join(pl[1].th, NULL);
    assert_int_equal(pl[1].status, 200);
    pthread_join(pl[4].th, NULL);
    assert_int_equal(pl[4].status, 410); /* the round ended before its share phase closed */
    secagg_clients_free(c, N);
    clients_free(c, N);
}


/* Every round endpoint needs the client's token; ?wait= takes one or two digits; a message
 * without a Content-Type is taken as octet-stream. */
static void test_round_endpoint_forms(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct popcfg pc = {.name = "fm", .target = N, .min = 3, .secagg = true, .neighbors = 0,
                        .mode = "none", .bits = 32};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    char path[128];
    static const char *const ends[][2] = {
        {"GET", "task"},
        {"POST", "update"},
        {"POST", "secagg/advertise"},
        {"GET", "secagg/advertise/result"},
        {"GET", "status"},
    };
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/%s", (long long)rid, ends[i][1]);
        bool get = strcmp(ends[i][0], "GET") == 0;
        struct resp r = http_req(f, ends[i][0], path, NULL, get ? NULL : "application/octet-stream",
                                 get ? NULL : "x", get ? 0 : 1, c[0].pid);
        expect(&r, 401, "unauthorized", NULL, path);
    }
    static const char *const waits[] = {"a", "-", "9-"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=%s", (long long)rid, waits[i]);
        struct resp r = get_as(f, &c[0], path);
        expect(&r, 400, "invalid_parameter", "wait", waits[i]);
    }
    /* No Content-Type at all: read as a secagg message. */
    const uint8_t *out[N];
    size_t ol[N];
    secagg_clients_start(c, N, rid, out, ol);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise", (long long)rid);
    struct resp r;
    memset(&r, 0, sizeof(r));
    CURL *cu = curl_easy_init();
    struct curl_slist *h = http_prepare(f, cu, "POST", path, c[0].tok, NULL, out[0], ol[0],
                                        c[0].pid, &r);
    h = curl_slist_append(h, "Content-Type:");
    curl_easy_setopt(cu, CURLOPT_HTTPHEADER, h);
    assert_int_equal(curl_easy_perform(cu), CURLE_OK);
    curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &r.status);
    assert_int_equal(r.status, 202);
    curl_slist_free_all(h);
    curl_easy_cleanup(cu);
    resp_free(&r);
    secagg_clients_free(c, N);
    clients_free(c, N);
}

/* A secure-aggregation round cannot run with one client (the secagg server needs 3): such a
 * population is refused at creation (400 naming selection.target), so no device is ever
 * selected into a round that could only be abandoned at its start, and no round is stored.
 * The whole rule is in test_secure_min.c. */
static void test_secagg_single_client(void **state) {
    struct fx *f = *state;
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                              "{\"name\":\"one\",\"allowed_regions\":[\"*\"],"
                              "\"selection\":{\"target\":1,\"require\":[]},"
                              "\"update\":{\"tensors\":[\"w\"]},"
                              "\"secagg\":{\"enabled\":true},\"privacy\":{\"mode\":\"none\"}}");
    assert_error(&r, 400, "invalid_field");
    json_t *j = body_json(&r);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "field")), "selection.target");
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "at least 3"));
    json_decref(j);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/one", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 404);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 0);
}

/* Configured secagg neighbourhoods that do not fit the round (odd, too large, too small)
 * are adjusted or derived: the round runs, and every task names the same k and t. */
static void test_secagg_neighbors(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    static const int ks[] = {1, 7, 2};
    for (int q = 0; q < 3; q++) {
        char name[16];
        snprintf(name, sizeof(name), "nb%d", q);
        struct popcfg pc = {.name = name, .target = N, .min = 3, .secagg = true,
                            .neighbors = ks[q], .mode = "none", .bits = 32};
        struct tc c[N];
        setup_devices(f, &pc, c, N);
        int64_t rid = 0;
        checkin_all(f, c, N, &rid);
        char word[32];
        assert_string_equal(state_word(f, &c[0], rid, word, sizeof(word)), "advertise");
        fetch_tasks(f, c, N, rid);
        for (int i = 0; i < N; i++) {
            assert_true(c[i].task.k >= 2 && c[i].task.k <= N - 1);
            assert_true(c[i].task.t >= 1 && c[i].task.t <= c[i].task.k);
            assert_int_equal(c[i].task.k, c[0].task.k);
            assert_int_equal(c[i].task.t, c[0].task.t);
        }
        clients_free(c, N);
    }
}


/* A round that ends "before" it began (the clock went back meanwhile) is counted with
 * duration 0 in flotilla_round_duration_seconds, not a negative one. */
static void test_duration_clock_back(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "cb", .target = 3, .min = 3, .secagg = false, .mode = "none",
                        .bits = 32};
    struct tc c[1];
    setup_devices(f, &pc, c, 1);
    int64_t rid = 0;
    checkin_all(f, c, 1, &rid);
    atomic_fetch_sub(&f->now_ms, 3600 * 1000LL);
    struct resp r = http_json(f, "POST", "/v1/admin/populations/cb/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "flotilla_round_duration_seconds_bucket{outcome=\"abandoned\","
                                   "le=\"1\"} 1\n"));
    assert_non_null(strstr(r.body, "flotilla_round_duration_seconds_sum{outcome=\"abandoned\"} "
                                   "0.000\n"));
    resp_free(&r);
    clients_free(c, 1);
}

/* A result asked while the round still forms: no result yet (204). A coordinator that
 * stops answers its parked polls at once (before its HTTP server goes) instead of leaving
 * them hanging. */
static void test_stop_answers_polls(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "st", .target = 3, .min = 3, .secagg = true, .mode = "none",
                        .bits = 32};
    struct tc c[2];
    setup_devices(f, &pc, c, 2);
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    struct resp r = get_result(f, &c[0], rid, "advertise", 0);
    assert_int_equal(r.status, 204);
    resp_free(&r);
    char st[128];
    snprintf(st, sizeof(st), "/v1/rounds/%lld/status?wait=20", (long long)rid);
    struct poller pl;
    poll_start(&pl, f, &c[1], st);
    /* Stop only once the poll is parked: a request still in flight when the daemon goes is
     * closed unanswered, which is not what this test is about. */
    wait_waiting(f, 1);
    fl_coord_stop(f->co);
    pthread_join(pl.th, NULL);
    assert_true(pl.status == 200 || pl.status == 503);
    clients_free(c, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_update_refusals, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_message_refusals, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_abandoned_answers, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_parked_polls, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_round_endpoint_forms, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_single_client, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_neighbors, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_duration_clock_back, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stop_answers_polls, setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
