/* selection.target_grace_s: once selection.target participants have posted in a phase, the
 * phase closes that many seconds later instead of waiting for its deadline (over-selected
 * devices that are slow or gone no longer hold every round up to its deadlines). A plain
 * round and a secure one, on the injected clock, far from any deadline; the setting is
 * PATCHed, validated, and off by default; /metrics counts phases by what closed them. Runs
 * the coordinator in-process (coord_testkit.c). */
#include <time.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"

static void patch(struct fx *f, const char *name, const char *json, long want) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_json(f, "PATCH", path, ADMIN_TOKEN, json);
    if (r.status != want)
        fail_msg("PATCH %s: %ld %s", json, r.status, r.body ? r.body : "");
    resp_free(&r);
}

/* The round's state as device c sees it, once it is no longer `from` (up to ~5 s: the
 * aggregation after the last phase runs off the lock). */
static char *state_after(struct fx *f, struct tc *c, int64_t rid, const char *from) {
    char *s = NULL;
    for (int i = 0; i < 500; i++) {
        json_t *st = round_status(f, c, rid);
        free(s);
        s = strdup(json_string_value(json_object_get(st, "state")));
        json_decref(st);
        if (strcmp(s, from) != 0)
            break;
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
    }
    return s;
}

/* Population pc with the selection change `sel` PATCHed in, its n devices checked in (all
 * selected) with their tasks; returns the round. */
static int64_t start_round(struct fx *f, const struct popcfg *pc, const char *sel,
                           struct tc *c, int n) {
    setup_devices(f, pc, c, n);
    char body[160];
    snprintf(body, sizeof(body), "{\"selection\":%s}", sel);
    patch(f, pc->name, body, 200);
    int64_t rid;
    checkin_all(f, c, n, &rid);
    fetch_tasks(f, c, n, rid);
    return rid;
}

static int64_t plain_round(struct fx *f, const char *name, int target, int min,
                           const char *sel, struct tc *c, int n) {
    struct popcfg pc = {.name = name, .target = target, .min = min, .mode = "none"};
    return start_round(f, &pc, sel, c, n);
}

/* Asserts the round's state as device c sees it. */
static void assert_state(struct fx *f, struct tc *c, int64_t rid, const char *want) {
    json_t *st = round_status(f, c, rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), want);
    json_decref(st);
}

/* Posts the advertisements of devices lo..hi-1. */
static void advertise(struct fx *f, struct tc *c, int lo, int hi, int64_t rid,
                      const uint8_t **out, const size_t *out_len) {
    for (int i = lo; i < hi; i++) {
        struct resp r = post_phase(f, &c[i], rid, "advertise", out[i], out_len[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
}

static double closed(struct fx *f, const char *why) {
    char series[96];
    snprintf(series, sizeof(series), "flotilla_phases_closed_total{reason=\"%s\"}", why);
    return metric_value(f, series);
}

/* Plain round: target 4 of 6 selected. Three updates and a long wait do nothing; the
 * fourth starts the 2 s grace, and the round completes with four at its end. */
static void test_plain_round_closes_after_target(void **state) {
    struct fx *f = *state;
    enum { N = 6 };
    struct tc c[N];
    /* ceil(4 x 1.5) = 6 selected */
    int64_t rid = plain_round(f, "tg", 4, 3, "{\"over_selection\":1.5,\"target_grace_s\":2}", c,
                              N);
    double by_target = closed(f, "target"), by_deadline = closed(f, "deadline");
    post_updates(f, c, 3, rid);
    fx_advance(f, 20000);
    assert_state(f, &c[0], rid, "masked");
    post_updates(f, &c[3], 1, rid);
    fx_advance(f, 1999);
    assert_state(f, &c[0], rid, "masked");
    fx_advance(f, 1);
    char *s = state_after(f, &c[0], rid, "masked");
    assert_string_equal(s, "completed");
    free(s);
    char q[128];
    snprintf(q, sizeof(q), "SELECT completed FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), 4);
    assert_true(closed(f, "target") == by_target + 1);
    assert_true(closed(f, "deadline") == by_deadline);
    /* A late update is refused: the round is over. */
    uint8_t body[16 + 8 * 1024];
    size_t bl = plain_update_body(body, rid, c[4].words, c[4].task.vec_len, 4);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    struct resp r = http_req(f, "POST", path, c[4].tok, "application/octet-stream", body, bl,
                             c[4].pid);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    clients_free(c, N);
}

/* Secure round: target 4 of 6 selected, one device never advertises. Five advertisements
 * meet the target; the phase closes 1 s later (its deadline is 30 s away), and the other
 * phases close as the five post. The sum holds the five. */
static void test_secure_round_closes_after_target(void **state) {
    struct fx *f = *state;
    enum { N = 6, M = 5 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = "tgs", .target = 4, .min = 3, .secagg = true, .neighbors = 5,
                        .mode = "none"};
    struct tc c[N];
    int64_t rid = start_round(f, &pc, "{\"over_selection\":1.5,\"target_grace_s\":1}", c, N);
    c[M].drop = DROP_ADVERTISE;
    const uint8_t *out[N];
    size_t out_len[N];
    secagg_clients_start(c, N, rid, out, out_len);
    double by_target = closed(f, "target"), by_all = closed(f, "all_posted");
    advertise(f, c, 0, M, rid, out, out_len);
    fx_advance(f, 999);
    assert_state(f, &c[0], rid, "advertise");
    fx_advance(f, 1);
    for (int i = 0; i < M; i++) {
        struct resp r = get_result(f, &c[i], rid, "advertise", 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                 &out[i], &out_len[i]), FL_OK);
        resp_free(&r);
    }
    secagg_phase_all(f, c, M, rid, "share", out, out_len);
    secagg_phase_all(f, c, M, rid, "masked", out, out_len);
    json_t *o = secagg_unmask_all(f, c, M, rid, out, out_len);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), M);
    json_decref(o);
    /* The unmasked sum is exactly that of the five devices' vectors. */
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.count, M);
    size_t L = c[0].task.vec_len;
    uint64_t mask = c[0].task.bits >= 64 ? ~0ull : (1ull << c[0].task.bits) - 1;
    uint64_t expect[1024] = {0};
    for (int i = 0; i < M; i++)
        for (size_t j = 0; j < L; j++)
            expect[j] = (expect[j] + c[i].words[j]) & mask;
    assert_int_equal(h.vec_len, L);
    assert_memory_equal(h.sum, expect, L * sizeof(uint64_t));
    assert_true(closed(f, "target") == by_target + 1);
    assert_true(closed(f, "all_posted") == by_all + 3);
    secagg_clients_free(c, N);
    clients_free(c, N);
}

/* A secure round whose close would abort is not closed early. Complete graph of 9 (k = 8,
 * threshold 4): three advertisements meet the target of 3, but each of the three would
 * have 2 neighbours in U1 and needs 3, so fl_secagg_server_would_advance says the advance
 * aborts and the phase stays open past its grace. A fourth advertisement makes it viable,
 * and the phase closes at the next tick. */
static void test_secure_round_waits_when_close_would_abort(void **state) {
    struct fx *f = *state;
    enum { N = 9 };
    struct popcfg pc = {.name = "tgw", .target = 3, .min = 3, .secagg = true, .neighbors = 8,
                        .mode = "none"};
    struct tc c[N];
    int64_t rid = start_round(f, &pc, "{\"over_selection\":3.0,\"target_grace_s\":1}", c, N);
    assert_int_equal(c[0].task.k, 8);
    assert_int_equal(c[0].task.t, 4);
    const uint8_t *out[N];
    size_t out_len[N];
    secagg_clients_start(c, N, rid, out, out_len);
    double by_target = closed(f, "target");
    advertise(f, c, 0, 3, rid, out, out_len);
    fx_advance(f, 5000);
    assert_state(f, &c[0], rid, "advertise");
    assert_true(closed(f, "target") == by_target);
    advertise(f, c, 3, 4, rid, out, out_len);
    fx_advance(f, 100);
    assert_state(f, &c[0], rid, "share");
    assert_true(closed(f, "target") == by_target + 1);
    secagg_clients_free(c, N);
    clients_free(c, N);
}

/* Off by default (the phase waits for its deadline); null turns it off again; bad values
 * are refused naming the field. */
static void test_target_grace_config(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct tc c[N];
    int64_t rid = plain_round(f, "tgc", 2, 2, "{\"over_selection\":1.5}", c, N);
    post_updates(f, c, 2, rid);
    fx_advance(f, 59000); /* the masked deadline is 60 s */
    assert_state(f, &c[0], rid, "masked");
    patch(f, "tgc", "{\"selection\":{\"target_grace_s\":0}}", 200);
    patch(f, "tgc", "{\"selection\":{\"target_grace_s\":null}}", 200);
    static const char *const bad[] = {"-1", "86401", "1.5", "\"2\"", "true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"selection\":{\"target_grace_s\":%s}}", bad[i]);
        char path[64];
        snprintf(path, sizeof(path), "/v1/admin/populations/%s", "tgc");
        struct resp r = http_json(f, "PATCH", path, ADMIN_TOKEN, body);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.body, "selection.target_grace_s"));
        resp_free(&r);
    }
    fx_advance(f, 1001);
    char *s = state_after(f, &c[0], rid, "masked");
    assert_string_equal(s, "completed");
    free(s);
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_round_closes_after_target, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_secure_round_closes_after_target, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_secure_round_waits_when_close_would_abort,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_target_grace_config, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
