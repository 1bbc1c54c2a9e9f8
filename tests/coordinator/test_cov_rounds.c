/* Round edges that no other test reaches (docs/protocol.md sections 4 and 5):
 *
 * - the retry floor: a device refused because the round is full gets the population's
 *   selection.min_retry_s when the running round would end sooner than that;
 * - a participant fetching the task of a round that has ended (the round is the
 *   population's last one, no longer its current one) gets 410 round_closed;
 * - a FedBuff update posted after its participation's deadline, before any timer dropped
 *   the participation, gets 410 round_closed and is not folded;
 * - an update far over the norm bound, in 8-byte words (modulus_bits 48), is clipped.
 * Runs the coordinator in-process (coord_testkit.c); tests that must see a state before the
 * timers act stop the fixture's ticker thread and run the timers themselves. */
#include <math.h>

#include "coord_testkit.h"

static const char CHECKIN[] = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                              "\"unmetered\":true,\"idle\":true},"
                              "\"capabilities\":{\"secagg\":false}}";

/* The fixture without its ticker: timers run only when the test calls fl_coord_tick. */
static void stop_ticker(struct fx *f) {
    if (!f->ticking)
        return;
    atomic_store(&f->stop_ticker, true);
    pthread_join(f->ticker, NULL);
    f->ticking = false;
}

/* A plain population name (target 2, no over-selection, min 2, no secagg, no DP) with the
 * given retry bounds: created, its model uploaded, started, n devices enrolled. */
static void plain_population(struct fx *f, const char *name, int min_retry, int max_retry,
                             char **tok, int n) {
    struct popcfg pc = {.name = name, .target = 2, .min = 2, .secagg = false, .mode = "none",
                        .bits = 32};
    struct popsel sel = {.min_retry_s = min_retry, .max_retry_s = max_retry};
    setup_population_sel(f, &pc, &sel, tok, n);
}

static void post_update(struct fx *f, struct tc *c, long want, const char *code) {
    uint8_t body[16 + 8 * 1024];
    size_t bl = plain_update_body(body, c->task.rid, c->words, c->task.vec_len, 4);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c->task.rid);
    struct resp r =
        http_req(f, "POST", path, c->tok, "application/octet-stream", body, bl, c->pid);
    if (r.status != want)
        fprintf(stderr, "update: %ld %s\n", r.status, r.body ? r.body : "");
    if (code)
        assert_error(&r, want, code);
    else
        assert_int_equal(r.status, want);
    resp_free(&r);
}

/* ---- tests ---- */

/* Round full while it runs: the retry hint is the time the round has left (here about 2
 * minutes), raised to min_retry_s = 1000; with min_retry_s = 1 it is that time itself. */
static void test_round_full_retry_floor(void **state) {
    struct fx *f = *state;
    char *tok[3];
    plain_population(f, "rf", 1000, 5000, tok, 3);
    struct tc c[2];
    memset(c, 0, sizeof(c));
    c[0].tok = tok[0];
    c[1].tok = tok[1];
    int64_t rid;
    checkin_all(f, c, 2, &rid);
    struct resp r = http_json(f, "POST", "/v1/checkin", tok[2], CHECKIN);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "round_full");
    assert_int_equal(json_integer_value(json_object_get(j, "retry_after_s")), 1000);
    char ra[32];
    assert_non_null(header_in(&r, "Retry-After", ra, sizeof(ra)));
    assert_string_equal(ra, "1000");
    json_decref(j);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        free(tok[i]);

    plain_population(f, "rg", 1, 5000, tok, 3);
    memset(c, 0, sizeof(c));
    c[0].tok = tok[0];
    c[1].tok = tok[1];
    checkin_all(f, c, 2, &rid);
    r = http_json(f, "POST", "/v1/checkin", tok[2], CHECKIN);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "round_full");
    int64_t left = json_integer_value(json_object_get(j, "retry_after_s"));
    /* The round's whole run is at most the sum of its deadlines (150 s) from now. */
    assert_true(left > 1 && left <= 150);
    json_decref(j);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

/* A participant of a completed round asks for its task again: 410 round_closed. */
static void test_task_of_ended_round(void **state) {
    struct fx *f = *state;
    char *tok[2];
    plain_population(f, "te", 1, 60, tok, 2);
    struct tc c[2];
    memset(c, 0, sizeof(c));
    c[0].tok = tok[0];
    c[1].tok = tok[1];
    int64_t rid;
    checkin_all(f, c, 2, &rid);
    fetch_tasks(f, c, 2, rid);
    post_update(f, &c[0], 202, NULL);
    post_update(f, &c[1], 202, NULL);
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_error(&r, 410, "round_closed");
    assert_non_null(strstr(r.body, "has ended"));
    resp_free(&r);
    /* The admin view lists it completed with a new model version. */
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(j, "new_model_version")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "participants")), 2);
    json_decref(j);
    resp_free(&r);
    clients_free(c, 2);
}

/* FedBuff: a participation's update deadline (deadlines_s.masked = 60 s) passes with no
 * timer run in between; the late update is refused and the buffer holds nothing. A fresh
 * check-in then gets a new participation whose update is accepted. */
static void test_fedbuff_update_after_deadline(void **state) {
    struct fx *f = *state;
    stop_ticker(f);
    struct popcfg pc = {.name = "fd", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":2"};
    struct tc c[1];
    setup_devices(f, &pc, c, 1);
    int64_t rid;
    checkin_all(f, c, 1, &rid);
    fetch_tasks(f, c, 1, rid);
    assert_string_equal(c[0].task.kind, "buffered");
    char first_pid[40];
    snprintf(first_pid, sizeof(first_pid), "%s", c[0].pid);
    atomic_fetch_add(&f->now_ms, 61 * 1000); /* no tick: the participation is not dropped */
    post_update(f, &c[0], 410, "round_closed");
    /* Nothing was folded: the model is still version 1 and the buffer empty. */
    assert_int_equal(db_int(f, "SELECT max(version) FROM models"), 1);
    fl_coord_tick(f->co);
    /* Checked in again: a new participation in the same buffer, and its update counts. */
    checkin_all(f, c, 1, &rid);
    assert_string_not_equal(c[0].pid, first_pid);
    fetch_tasks(f, c, 1, rid);
    post_update(f, &c[0], 202, NULL);
    clients_free(c, 1);
}

/* A plain round with 48-bit words (8 bytes each on the wire): an update far over the norm
 * bound (clip_norm 1.0) is accepted and clipped, and the model moves by at most the bound. */
static void test_clipped_update_wide_words(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "cw", .target = 1, .min = 1, .secagg = false, .mode = "none",
                        .bits = 48};
    char *tok[1];
    setup_population(f, &pc, tok, 1);
    struct tc c[1];
    memset(c, 0, sizeof(c));
    c[0].tok = tok[0];
    int64_t rid;
    checkin_all(f, c, 1, &rid);
    fetch_tasks(f, c, 1, rid);
    assert_int_equal(c[0].task.bits, 48);
    assert_true(c[0].task.vec_len > D);
    /* Coordinate 0 at 2^40 granules (far over the bound), the others 0, weight 1. */
    memset(c[0].words, 0, sizeof(c[0].words));
    c[0].words[0] = (uint64_t)1 << 40;
    c[0].words[c[0].task.vec_len - 1] = 1;
    uint8_t body[16 + 8 * 1024];
    size_t bl = plain_update_body(body, rid, c[0].words, c[0].task.vec_len, 8);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    struct resp r =
        http_req(f, "POST", path, c[0].tok, "application/octet-stream", body, bl, c[0].pid);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v = json_integer_value(json_object_get(st, "new_model_version"));
    json_decref(st);
    float w[D], b[2];
    fetch_model(f, &c[0], "cw", v, w, b);
    double n2 = 0;
    for (int j = 0; j < D; j++) {
        double d = (double)w[j] - (double)base_w(j);
        n2 += d * d;
        if (j > 0)
            assert_true(fabs(d) < 1e-6);
    }
    assert_true(w[0] > base_w(0));            /* moved the way the update pointed */
    assert_true(sqrt(n2) <= 1.0 * (1 + 1e-5)); /* by at most clip_norm */
    clients_free(c, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_full_retry_floor, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_task_of_ended_round, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedbuff_update_after_deadline, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_clipped_update_wide_words, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
