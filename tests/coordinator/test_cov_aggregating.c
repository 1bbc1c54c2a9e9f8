/* Requests that arrive while a synchronous round aggregates. The model step (decode,
 * strategy, serialisation) and a secure round's unmasking run without the coordinator lock;
 * the coordinator's debug hooks are called in those windows, and this test issues requests
 * from inside them:
 *
 * - the round's status reads "aggregating";
 * - a secure round's unmask result poll (wait=0) answers 204: the phase is over but the
 *   outcome is not known yet, so it is neither served from the cache nor refused 410;
 * - stopping the population answers 200 but does not abandon the aggregating round: it
 *   completes with a new model version and the population is stopped afterwards.
 * Runs the coordinator in-process (coord_testkit.c). */
#include "coord_testkit.h"

struct probe {
    struct fx *f;
    struct tc *dev;        /* a participant */
    struct tc *late;       /* one that missed the unmask phase (unmask hook) */
    const char *pop;
    bool secagg;
    int calls;
    char state[32];        /* status "state" seen inside */
    long unmask_status;    /* unmask result poll status seen inside (secagg) */
    long stop_status;      /* POST .../stop status seen inside */
    long late_status;      /* its late unmask post, seen inside (unmask hook) */
};

/* The requests made from inside a window: status, the unmask result poll (secure rounds),
 * the late device's unmask post (when there is one) and stopping the population. */
static void probe_inside(struct probe *pr, int64_t round_id) {
    json_t *st = round_status(pr->f, pr->dev, round_id);
    snprintf(pr->state, sizeof(pr->state), "%s",
             json_string_value(json_object_get(st, "state")));
    json_decref(st);
    struct resp r;
    if (pr->secagg) {
        r = get_result(pr->f, pr->dev, round_id, "unmask", 0);
        pr->unmask_status = r.status;
        resp_free(&r);
    }
    if (pr->late) {
        r = post_phase(pr->f, pr->late, round_id, "unmask", (const uint8_t *)"x", 1);
        pr->late_status = r.status;
        resp_free(&r);
    }
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/stop", pr->pop);
    r = http_json(pr->f, "POST", path, ADMIN_TOKEN, NULL);
    pr->stop_status = r.status;
    resp_free(&r);
}

static void on_sum(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                   uint32_t count, const float *delta, size_t dim) {
    struct probe *pr = user;
    (void)sum;
    (void)vec_len;
    (void)count;
    (void)delta;
    (void)dim;
    if (++pr->calls == 1)
        probe_inside(pr, round_id);
}

/* The unmasking itself (the secure round's last advance) runs without the lock too. */
static void on_unmask(void *user, int64_t round_id) {
    struct probe *pr = user;
    if (++pr->calls == 1)
        probe_inside(pr, round_id);
}

static void check_after(struct fx *f, const char *pop, int64_t rid) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
    assert_true(json_integer_value(json_object_get(j, "new_model_version")) > 1);
    json_decref(j);
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", pop);
    r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "stopped");
    assert_true(json_is_null(json_object_get(j, "current_round")));
    json_decref(j);
    resp_free(&r);
}

static void test_plain_round_aggregating(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct popcfg pc = {.name = "pa", .target = N, .min = N, .secagg = false, .mode = "none",
                        .bits = 32};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    struct probe pr = {.f = f, .dev = &c[0], .pop = "pa", .secagg = false};
    fl__coord_debug_hook_set(f->co, on_sum, &pr);
    for (int i = 0; i < N; i++) {
        uint8_t body[16 + 4 * 1024];
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        char path[96];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
        struct resp r =
            http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    assert_int_equal(pr.calls, 1);
    assert_string_equal(pr.state, "aggregating");
    assert_int_equal(pr.stop_status, 200);
    fl__coord_debug_hook_set(f->co, NULL, NULL);
    json_t *st = round_status(f, &c[1], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    check_after(f, "pa", rid);
    clients_free(c, N);
}

/* A secure round of five devices with the probe in one window: the model step (on_sum) or
 * the unmasking (on_unmask, with the last device missing the unmask phase: its late post is
 * refused 410 without reaching the secagg server, and its masked input still counts). */
static void secagg_window(struct fx *f, const char *pop, bool unmask) {
    enum { N = 5 };
    struct popcfg pc = {.name = pop, .target = N, .min = 3, .secagg = true, .neighbors = 4,
                        .mode = "none"};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    if (unmask)
        c[N - 1].drop = DROP_UNMASK;
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    struct probe pr = {.f = f, .dev = &c[0], .late = unmask ? &c[N - 1] : NULL, .pop = pop,
                       .secagg = true};
    if (unmask)
        fl__coord_debug_unmask_hook_set(f->co, on_unmask, &pr);
    else
        fl__coord_debug_hook_set(f->co, on_sum, &pr);
    json_t *o = run_secagg(f, c, N, rid);
    fl__coord_debug_unmask_hook_set(f->co, NULL, NULL);
    fl__coord_debug_hook_set(f->co, NULL, NULL);
    assert_int_equal(pr.calls, 1);
    assert_string_equal(pr.state, "aggregating");
    assert_int_equal(pr.unmask_status, 204);
    if (unmask)
        assert_int_equal(pr.late_status, 410);
    assert_int_equal(pr.stop_status, 200);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N);
    json_decref(o);
    check_after(f, pop, rid);
    clients_free(c, N);
}

static void test_secagg_round_aggregating(void **state) {
    secagg_window(*state, "sa", false);
}

static void test_secagg_unmask_unlocked(void **state) {
    secagg_window(*state, "su", true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_round_aggregating, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_round_aggregating, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_unmask_unlocked, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
