/* Whole rounds over HTTP against the in-process coordinator: N devices simulated with the
 * secagg CLIENT state machine and the dp encoders (the real SDK is separate), talking to
 * 127.0.0.1 through libcurl. A test-only hook exposes the round's unmasked SUM (never an
 * individual update), which must equal the plain sum of the devices' vectors exactly; the new
 * model must equal base + averaged delta (exactly without DP, within the noise with DP).
 * Dropouts are injected in every phase; replays, malformed messages, long polls, the budget
 * refusal and restarts are checked. */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/dp.h"
#include "flotilla/secagg.h"
#include "flotilla/tensor.h"

/* Test-only (coord_internal.h): how many secure rounds began their unmasking on more
 * than one thread. */
uint64_t fl__coord_debug_unmask_threaded(fl_coord *co);

/* Checks the hook's sum against the plain sum of the survivors' vectors, the model against
 * base + delta, and the delta against the true mean within tol. */
static void check_aggregate(struct fx *f, struct sum_hook *h, struct tc *c, int n, int64_t rid,
                            int64_t version, const char *pop, double tol) {
    assert_int_equal(h->calls, 1);
    assert_int_equal(h->round_id, rid);
    size_t L = c[0].task.vec_len;
    uint64_t mask = c[0].task.bits >= 64 ? ~0ull : (1ull << c[0].task.bits) - 1;
    uint64_t expect[1024] = {0};
    uint32_t count = 0;
    double mean[D] = {0}, wsum = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].drop != DROP_NONE && c[i].drop != DROP_UNMASK)
            continue;
        count++;
        double w = c[i].weight > 0 ? c[i].weight : 1;
        wsum += w;
        for (size_t j = 0; j < L; j++)
            expect[j] = (expect[j] + c[i].words[j]) & mask;
        for (int j = 0; j < D; j++)
            mean[j] += w * c[i].delta[j];
    }
    assert_int_equal(h->count, count);
    assert_int_equal(h->vec_len, L);
    assert_memory_equal(h->sum, expect, L * sizeof(uint64_t)); /* exact */
    float w[D], b[2];
    fetch_model(f, &c[0], pop, version, w, b);
    for (int j = 0; j < D; j++) {
        assert_float_equal(w[j], base_w(j) + h->delta[j], 1e-6);
        double m = mean[j] / wsum;
        if (fabs(h->delta[j] - m) > tol)
            fprintf(stderr, "coordinate %d: delta %g, mean %g, tol %g\n", j, h->delta[j], m, tol);
        assert_true(fabs(h->delta[j] - m) <= tol);
    }
    assert_float_equal(b[0], 3.0f, 0);
    assert_float_equal(b[1], -4.0f, 0);
}

/* A plain update body (docs/protocol.md section 5.2): the round header "FLUP" || u32le 1 ||
 * u64le round id, then L little-endian words of wb bytes. Returns its length. */
static size_t plain_body(uint8_t *out, int64_t rid, const uint64_t *words, size_t L, size_t wb) {
    memcpy(out, "FLUP", 4);
    for (int b = 0; b < 4; b++)
        out[4 + b] = (uint8_t)(1u >> (8 * b));
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)rid >> (8 * b));
    for (size_t j = 0; j < L; j++)
        for (size_t b = 0; b < wb; b++)
            out[16 + j * wb + b] = (uint8_t)(words[j] >> (8 * b));
    return 16 + L * wb;
}

/* A device waiting for a phase result in another thread. */
struct poll_arg {
    struct fx *f;
    struct tc *c;
    int64_t rid;
    const char *phase;
    int wait;
    long status;
    double secs;
};

static void *poller(void *arg) {
    struct poll_arg *pa = arg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct resp r = get_result(pa->f, pa->c, pa->rid, pa->phase, pa->wait);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pa->status = r.status;
    pa->secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    resp_free(&r);
    return NULL;
}

/* ---- tests ---- */

/* A secagg round with no DP and no dropouts, plus the refusals around it. */
static void test_secagg_round_exact(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "sa", .target = N, .min = 5, .secagg = true, .neighbors = 9,
                        .mode = "none"};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    assert_true(c[0].task.secagg);
    assert_int_equal(c[0].task.n, N);

    /* Refusals before the first valid message: nothing changes. */
    struct resp r = post_phase(f, &c[0], rid, "advertise", (const uint8_t *)"hello", 5);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    r = post_phase(f, &c[0], rid, "share", (const uint8_t *)"hello", 5);
    assert_error(&r, 425, "phase_not_open");
    resp_free(&r);
    r = post_phase(f, &c[0], rid, "bogus", (const uint8_t *)"hello", 5);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise", (long long)rid);
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", "x", 1, NULL);
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", "x", 1, c[1].pid);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    r = http_req(f, "POST", path, c[0].tok, "text/plain", "x", 1, c[0].pid);
    assert_error(&r, 415, "unsupported_media_type");
    resp_free(&r);
    char big[5000];
    memset(big, 1, sizeof(big));
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", big, sizeof(big),
                 c[0].pid);
    assert_error(&r, 413, "body_too_large");
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", "x", 1, c[0].pid);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    r = get_result(f, &c[0], rid, "advertise", 0);
    assert_int_equal(r.status, 204);
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise/result?wait=99",
             (long long)rid);
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_error(&r, 400, "invalid_parameter");
    resp_free(&r);

    /* A message addressed to another round or from another index is refused (400). */
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = N;
    cfg.dim = (uint32_t)c[0].task.vec_len;
    cfg.degree = c[0].task.k;
    cfg.threshold = c[0].task.t;
    fl_secagg_client *other = NULL;
    const uint8_t *om;
    size_t ol;
    assert_int_equal(fl_secagg_client_create(&other, &cfg, (uint64_t)rid + 1000, c[0].task.index,
                                             NULL, NULL), FL_OK);
    assert_int_equal(fl_secagg_client_start(other, &om, &ol), FL_OK);
    r = post_phase(f, &c[0], rid, "advertise", om, ol);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    fl_secagg_client_destroy(other);
    assert_int_equal(fl_secagg_client_create(&other, &cfg, (uint64_t)rid, c[0].task.index, NULL,
                                             NULL), FL_OK);
    assert_int_equal(fl_secagg_client_start(other, &om, &ol), FL_OK);
    uint8_t other_adv[512];
    memcpy(other_adv, om, ol);
    size_t other_len = ol;
    fl_secagg_client_destroy(other);

    h.calls = 0;
    json_t *outcome = run_secagg(f, c, N, rid);
    assert_non_null(outcome);
    assert_string_equal(json_string_value(json_object_get(outcome, "state")), "completed");
    int64_t version = json_integer_value(json_object_get(outcome, "new_model_version"));
    assert_true(version > 1);
    assert_int_equal(json_integer_value(json_object_get(outcome, "participants")), N);
    json_decref(outcome);
    /* Without DP the only error is the randomised rounding: at most gamma per coordinate. */
    check_aggregate(f, &h, c, N, rid, version, "sa", c[0].task.gran * 1.0001);

    /* After the round: a replay of a conflicting advertise is 409, posts are 410. */
    r = post_phase(f, &c[0], rid, "advertise", other_adv, other_len);
    assert_error(&r, 409, "already_submitted");
    resp_free(&r);
    r = post_phase(f, &c[0], rid, "share", (const uint8_t *)"x", 1);
    assert_int_equal(r.status, 409); /* share was accepted already */
    resp_free(&r);
    r = get_result(f, &c[1], rid, "unmask", 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    json_t *st = round_status(f, &c[2], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM round_participants WHERE state = 2"), N);
    char q[128];
    snprintf(q, sizeof(q), "SELECT result_version FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), version);
    clients_free(c, N);
}

/* Replays: the same bytes answer 200 with Idempotent-Replayed and count once. */
static void test_secagg_replay_and_long_poll(void **state) {
    struct fx *f = *state;
    enum { N = 6 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "rp", .target = N, .min = 4, .secagg = true, .neighbors = 5,
                        .mode = "none"};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    fl_secagg_client *sa[N];
    const uint8_t *out[N];
    size_t ol[N];
    for (int i = 0; i < N; i++) {
        fl_secagg_config cfg;
        fl_secagg_config_init(&cfg);
        cfg.num_clients = N;
        cfg.dim = (uint32_t)c[i].task.vec_len;
        cfg.degree = c[i].task.k;
        cfg.threshold = c[i].task.t;
        assert_int_equal(fl_secagg_client_create(&sa[i], &cfg, (uint64_t)rid, c[i].task.index,
                                                 NULL, NULL), FL_OK);
        uint32_t x[1024];
        for (size_t j = 0; j < c[i].task.vec_len; j++)
            x[j] = (uint32_t)c[i].words[j];
        assert_int_equal(fl_secagg_client_set_input(sa[i], x, c[i].task.vec_len), FL_OK);
        assert_int_equal(fl_secagg_client_start(sa[i], &out[i], &ol[i]), FL_OK);
    }
    /* Client 0 advertises twice (a retry after a lost answer). */
    struct resp r = post_phase(f, &c[0], rid, "advertise", out[0], ol[0]);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    r = post_phase(f, &c[0], rid, "advertise", out[0], ol[0]);
    assert_int_equal(r.status, 200);
    char hv[64];
    assert_non_null(header_in(&r, "Idempotent-Replayed", hv, sizeof(hv)));
    assert_string_equal(hv, "true");
    resp_free(&r);
    /* A poll with wait=1 that nothing answers ends with 204 and Retry-After: 0. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = get_result(f, &c[0], rid, "advertise", 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(r.status, 204);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "0");
    resp_free(&r);
    double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(el >= 0.9 && el < 5.0);
    for (int i = 1; i < N; i++) {
        r = post_phase(f, &c[i], rid, "advertise", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    /* All advertised: the phase closed at once (no deadline wait). */
    for (int i = 0; i < N; i++) {
        r = get_result(f, &c[i], rid, "advertise", 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(sa[i], (const uint8_t *)r.body, r.len, &out[i],
                                                 &ol[i]), FL_OK);
        resp_free(&r);
    }
    for (int i = 0; i < N; i++) {
        r = post_phase(f, &c[i], rid, "share", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    for (int i = 0; i < N; i++) {
        r = get_result(f, &c[i], rid, "share", 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(sa[i], (const uint8_t *)r.body, r.len, &out[i],
                                                 &ol[i]), FL_OK);
        resp_free(&r);
    }
    /* Masked inputs: replay of the first counts once. */
    for (int i = 0; i < N - 1; i++) {
        r = post_phase(f, &c[i], rid, "masked", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    r = post_phase(f, &c[0], rid, "masked", out[0], ol[0]);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* A truncated masked input from the last client is refused and does not drop it. */
    r = post_phase(f, &c[N - 1], rid, "masked", out[N - 1], ol[N - 1] - 3);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    /* A long poll parked now is woken by the last post (well before its 20 s). */
    struct poll_arg pa = {f, &c[0], rid, "masked", 20, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, poller, &pa), 0);
    struct timespec nap = {0, 300 * 1000000L};
    nanosleep(&nap, NULL);
    r = post_phase(f, &c[N - 1], rid, "masked", out[N - 1], ol[N - 1]);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    pthread_join(th, NULL);
    assert_int_equal(pa.status, 200);
    assert_true(pa.secs < 10.0);
    for (int i = 0; i < N; i++) {
        r = get_result(f, &c[i], rid, "masked", 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(sa[i], (const uint8_t *)r.body, r.len, &out[i],
                                                 &ol[i]), FL_OK);
        resp_free(&r);
    }
    for (int i = 0; i < N; i++) {
        r = post_phase(f, &c[i], rid, "unmask", out[i], ol[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    r = get_result(f, &c[0], rid, "unmask", 0);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
    int64_t version = json_integer_value(json_object_get(j, "new_model_version"));
    json_decref(j);
    resp_free(&r);
    check_aggregate(f, &h, c, N, rid, version, "rp", c[0].task.gran * 1.0001);
    for (int i = 0; i < N; i++)
        fl_secagg_client_destroy(sa[i]);
    clients_free(c, N);
}

/* Drives one secagg round of n clients with the given drop points; returns the outcome. */
static json_t *secagg_round(struct fx *f, const struct popcfg *pc, struct tc *c, int n,
                            const int *drop, int64_t *rid_out) {
    char *tok[NMAX];
    setup_population(f, pc, tok, n);
    memset(c, 0, sizeof(*c) * (size_t)n);
    for (int i = 0; i < n; i++) {
        c[i].tok = tok[i];
        c[i].drop = drop ? drop[i] : DROP_NONE;
    }
    int64_t rid;
    checkin_all(f, c, n, &rid);
    fetch_tasks(f, c, n, rid);
    *rid_out = rid;
    return run_secagg(f, c, n, rid);
}

/* One client drops in each phase (advertise, share, masked, unmask); the sum holds exactly
 * the clients that sent a masked input. */
static void test_secagg_dropouts_every_phase(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "dr", .target = N, .min = 5, .secagg = true, .neighbors = 9,
                        .mode = "none"};
    int drop[N] = {0};
    drop[1] = DROP_ADVERTISE;
    drop[3] = DROP_SHARE;
    drop[5] = DROP_MASKED;
    drop[7] = DROP_UNMASK;
    struct tc c[N];
    int64_t rid;
    json_t *o = secagg_round(f, &pc, c, N, drop, &rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), 7);
    int64_t version = json_integer_value(json_object_get(o, "new_model_version"));
    json_decref(o);
    check_aggregate(f, &h, c, N, rid, version, "dr", c[0].task.gran * 1.0001);
    /* The dropped client's late post is refused (410) and changes nothing. */
    struct resp r = post_phase(f, &c[1], rid, "share", (const uint8_t *)"x", 1);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM round_participants WHERE state = 3"), 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM round_participants WHERE state = 2"), 7);
    clients_free(c, N);
}

/* secagg.reveal_pair_seeds (protocol 1.4): the task says so, every device's secagg client
 * runs with it, and a round with dropouts in every phase (two before masking, one after) is
 * exact. Populations that may not use it are refused. */
static void test_secagg_reveal_seeds(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "rv", .target = N, .min = 5, .secagg = true, .neighbors = 6,
                        .mode = "none"};
    struct popsel sel = {.reveal_seeds = true};
    struct tc c[N];
    setup_devices_sel(f, &pc, &sel, c, N);
    c[1].drop = DROP_ADVERTISE;
    c[3].drop = DROP_MASKED;
    c[6].drop = DROP_MASKED;
    c[8].drop = DROP_UNMASK;
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    for (int i = 0; i < N; i++)
        assert_true(c[i].task.reveal_seeds);
    json_t *o = run_secagg(f, c, N, rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), 7);
    int64_t version = json_integer_value(json_object_get(o, "new_model_version"));
    json_decref(o);
    check_aggregate(f, &h, c, N, rid, version, "rv", c[0].task.gran * 1.0001);
    /* The audit log says so (secagg.revealed_seeds), and the bundle verifies. */
    json_t *e = audit_round_find(f, "rv", rid, NULL);
    json_t *sa = json_object_get(e, "secagg");
    assert_true(json_is_integer(json_object_get(sa, "revealed_seeds")));
    assert_int_equal(json_integer_value(json_object_get(sa, "revealed_seeds")), 1);
    json_decref(e);
    clients_free(c, N);
    /* Refused: without secagg, with norm proofs, not a boolean (active mode may: below). */
    static const char *const bad[] = {
        "\"secagg\":{\"enabled\":false,\"reveal_pair_seeds\":true}",
        "\"secagg\":{\"enabled\":true,\"norm_proof\":true,\"reveal_pair_seeds\":true}",
        "\"secagg\":{\"enabled\":true,\"reveal_pair_seeds\":1}"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"name\":\"rv%zu\",\"allowed_regions\":[\"*\"],"
                 "\"update\":{\"tensors\":[\"w\"]},%s}", k, bad[k]);
        struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
        if (r.status != 400 || !strstr(r.body, "secagg.reveal_pair_seeds"))
            fail_msg("case %zu: %ld %s", k, r.status, r.body);
        resp_free(&r);
    }
}

/* The same round with secagg.unmask_threads = 3: the coordinator finishes the unmasking on
 * three threads (fl_secagg_server_unmask_*) and the aggregate is exact. */
static void test_secagg_unmask_threads(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    fx_stop(f);
    f->unmask_threads = 3;
    fx_start(f);
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "ut", .target = N, .min = 5, .secagg = true, .neighbors = 6,
                        .mode = "none"};
    int drop[N] = {0};
    drop[2] = DROP_SHARE;
    drop[4] = DROP_MASKED;
    drop[8] = DROP_MASKED;
    drop[9] = DROP_UNMASK;
    struct tc c[N];
    int64_t rid;
    assert_int_equal(fl__coord_debug_unmask_threaded(f->co), 0);
    json_t *o = secagg_round(f, &pc, c, N, drop, &rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), 7);
    int64_t version = json_integer_value(json_object_get(o, "new_model_version"));
    json_decref(o);
    assert_int_equal(fl__coord_debug_unmask_threaded(f->co), 1);
    check_aggregate(f, &h, c, N, rid, version, "ut", c[0].task.gran * 1.0001);
    clients_free(c, N);
}

/* Too many drop at the masked phase: the round is abandoned with a reason, pollers get 410,
 * nothing is committed. */
static void test_secagg_too_few_survivors(void **state) {
    struct fx *f = *state;
    enum { N = 8 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "few", .target = N, .min = 5, .secagg = true, .neighbors = 7,
                        .mode = "none"};
    int drop[N] = {0, DROP_MASKED, DROP_MASKED, DROP_MASKED, DROP_MASKED, 0, 0, 0};
    struct tc c[N];
    int64_t rid;
    json_t *o = secagg_round(f, &pc, c, N, drop, &rid);
    assert_null(o); /* nobody reached the unmask phase */
    assert_int_equal(h.calls, 0);
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(st, "reason")),
                        "too few survivors in phase masked: 4 < 5");
    json_decref(st);
    struct resp r = get_result(f, &c[0], rid, "masked", 5);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    char q[128];
    snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM models"), 1);
    clients_free(c, N);
}

/* Central DP: the server adds discrete Gaussian noise to the sum; one ledger entry commits
 * with the model. */
static void test_secagg_central_dp(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "cdp", .target = N, .min = 5, .secagg = true, .neighbors = 9,
                        .mode = "central", .strategy = "fedadam", .budget = 50.0};
    struct tc c[N];
    int64_t rid;
    json_t *o = secagg_round(f, &pc, c, N, NULL, &rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    json_decref(o);
    assert_int_equal(h.calls, 1);
    /* The unmasked sum is exact (noise is added after); the delta is within the noise:
     * sigma = z * l2 / count in model units, z = 1, l2 ~ clip. Fedadam: w moves by about
     * server_lr per step, so compare the delta only. */
    size_t L = c[0].task.vec_len;
    uint64_t expect[1024] = {0};
    for (int i = 0; i < N; i++)
        for (size_t j = 0; j < L; j++)
            expect[j] = (expect[j] + c[i].words[j]) & 0xffffffffu;
    assert_memory_equal(h.sum, expect, L * sizeof(uint64_t));
    for (int j = 0; j < D; j++) {
        double mean = 0;
        for (int i = 0; i < N; i++)
            mean += c[i].delta[j] / N;
        assert_true(fabs(h.delta[j] - mean) < 6.0 * 1.05 / N);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    char q[160];
    snprintf(q, sizeof(q), "SELECT participants FROM privacy_ledger WHERE round_id = %lld",
             (long long)rid);
    assert_int_equal(db_int(f, q), N);
    /* Optimiser state is in the registry (not downloadable by devices). */
    assert_int_equal(db_int(f, "SELECT count(*) FROM tags WHERE name = 'population/cdp/optimizer'"),
                     1);
    clients_free(c, N);
}

/* Distributed DP: devices noise and rotate; the server only decodes. */
static void test_secagg_distributed_dp(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "ddp", .target = N, .min = 6, .secagg = true, .neighbors = 9,
                        .mode = "distributed", .budget = 50.0};
    int drop[N] = {0};
    drop[4] = DROP_MASKED; /* 9 survive >= min 6 */
    struct tc c[N];
    int64_t rid;
    json_t *o = secagg_round(f, &pc, c, N, drop, &rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    int64_t version = json_integer_value(json_object_get(o, "new_model_version"));
    json_decref(o);
    assert_int_equal(c[0].task.mode, 2);
    assert_int_equal(c[0].task.vec_len, 33); /* 24 padded to 32, plus the weight */
    /* Exact sum; the delta within the total noise z * C / survivors (plus rounding). */
    check_aggregate(f, &h, c, N, rid, version, "ddp", 6.0 * 1.0 / 9 + 0.01);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger WHERE "
                               "mechanism = 'distributed_discrete_gaussian'"), 1);
    clients_free(c, N);
}

/* Plain rounds (secagg off): /update, replays, conflicts, malformed bodies, weighting. */
static void test_plain_round(void **state) {
    struct fx *f = *state;
    enum { N = 5 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "pl", .target = N, .min = 3, .secagg = false, .mode = "none",
                        .weighting = "examples", .bits = 40};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++) {
        c[i].tok = tok[i];
        c[i].weight = 3 + i;
        c[i].drop = i == 4 ? DROP_MASKED : DROP_NONE;
    }
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    assert_false(c[0].task.secagg);
    size_t L = c[0].task.vec_len;
    assert_int_equal(L, D + 1);
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[8 * 1024 + 16];
    const size_t H = 16, BL = H + L * 8; /* round header, then u64 words for 40 bits */
    for (int i = 0; i < N - 1; i++) {
        plain_body(body, rid, c[i].words, L, 8);
        struct resp r;
        if (i == 0) {
            r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, BL - 8,
                         c[i].pid);
            assert_error(&r, 400, "invalid_message"); /* short */
            resp_free(&r);
            uint8_t bad[8 * 1024 + 16];
            memcpy(bad, body, BL);
            bad[H + 3 * 8 + 6] = 0xff; /* coordinate >= 2^40 */
            r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", bad, BL,
                         c[i].pid);
            assert_error(&r, 400, "invalid_message");
            resp_free(&r);
            memcpy(bad, body, BL);
            bad[H + (L - 1) * 8] = 99; /* weight above weight_cap 50 */
            r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", bad, BL,
                         c[i].pid);
            assert_error(&r, 400, "invalid_message");
            resp_free(&r);
            /* Round binding: the same update naming another round, or without the header
             * (protocol 1.0 bodies), is refused and changes nothing. */
            plain_body(bad, rid - 1, c[i].words, L, 8);
            r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", bad, BL,
                         c[i].pid);
            assert_error(&r, 400, "invalid_message");
            assert_non_null(strstr(r.body, "names round"));
            resp_free(&r);
            r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", bad + H, L * 8,
                         c[i].pid);
            assert_error(&r, 400, "invalid_message");
            resp_free(&r);
            snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/advertise", (long long)rid);
            r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, 8,
                         c[i].pid);
            assert_error(&r, 404, "not_found");
            resp_free(&r);
            snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
        }
        r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, BL,
                     c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
        /* Retry: same bytes are 200 and count once; different bytes are 409. */
        r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, BL,
                     c[i].pid);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        body[H] ^= 1;
        r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, BL,
                     c[i].pid);
        assert_error(&r, 409, "already_submitted");
        resp_free(&r);
    }
    assert_int_equal(h.calls, 0);
    /* Client 4 never sends: the round closes at the deadline with 4 of 5. A status poll
     * parked before the deadline is answered when the round ends. */
    fx_advance(f, c[0].task.dl[2] + 1 - atomic_load(&f->now_ms));
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t version = json_integer_value(json_object_get(st, "new_model_version"));
    json_decref(st);
    check_aggregate(f, &h, c, N, rid, version, "pl", c[0].task.gran * 1.0001);
    clients_free(c, N);
}

/* A DP population whose budget cannot afford a round: refused, logged, nothing stored. */
static void test_budget_refused(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    struct popcfg pc = {.name = "bud", .target = N, .min = 3, .secagg = true, .mode = "central",
                        .budget = 0.01};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", tok[0], ok);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "budget_exhausted");
    json_decref(j);
    resp_free(&r);
    r = http_json(f, "GET", "/v1/admin/populations/bud", ADMIN_TOKEN, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "budget_exhausted");
    json_decref(j);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);
    for (int i = 0; i < N; i++)
        free(tok[i]);
}

/* After a restart the ledger keeps exactly one entry per completed round, an in-flight
 * round is abandoned without a ledger entry, and the optimiser state is reloaded. */
static void test_restart_keeps_ledger(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "rs", .target = N, .min = 3, .secagg = true, .neighbors = 3,
                        .mode = "central", .strategy = "fedadagrad", .budget = 1000.0};
    struct tc c[N];
    int64_t rid;
    json_t *o = secagg_round(f, &pc, c, N, NULL, &rid);
    assert_non_null(o);
    json_decref(o);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    /* A second round forms and runs, then the process stops mid-round. */
    atomic_fetch_add(&f->now_ms, 120 * 1000);
    int64_t rid2;
    checkin_all(f, c, N, &rid2);
    assert_true(rid2 > rid);
    fx_stop(f);
    fx_start(f);
    char q[128];
    snprintf(q, sizeof(q), "SELECT abandon_reason = 'coordinator shutting down' FROM rounds "
             "WHERE id = %lld", (long long)rid2);
    assert_int_equal(db_int(f, q), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    /* A third round completes after the restart: two entries, no double count. */
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    atomic_fetch_add(&f->now_ms, 120 * 1000);
    int64_t rid3;
    checkin_all(f, c, N, &rid3);
    fetch_tasks(f, c, N, rid3);
    o = run_secagg(f, c, N, rid3);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    json_decref(o);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 2);
    snprintf(q, sizeof(q), "SELECT count(*) FROM privacy_ledger WHERE round_id = %lld",
             (long long)rid2);
    assert_int_equal(db_int(f, q), 0);
    clients_free(c, N);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_secagg_round_exact, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_replay_and_long_poll, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_dropouts_every_phase, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_unmask_threads, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_reveal_seeds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_too_few_survivors, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_central_dp, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_distributed_dp, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_plain_round, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_budget_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart_keeps_ledger, fx_setup, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
