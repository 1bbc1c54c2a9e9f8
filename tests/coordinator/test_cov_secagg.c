/* Secure rounds whose unmasking cannot finish, on the threaded unmask path
 * (secagg.unmask_threads > 1: fl_secagg_server_unmask_begin/run/next instead of
 * fl_secagg_server_advance). When too few devices answer the unmask phase, the secagg server
 * refuses to begin unmasking (fewer shares than the threshold for some client): the round
 * must end abandoned with the secure aggregation's reason, commit no model, answer the
 * survivors' result polls with that outcome, and never count a threaded unmasking. A round
 * with exactly the threshold of unmask answers still completes on the same path. A device
 * that missed a phase gets 410 for the results it can no longer have. Runs the coordinator
 * in-process (coord_testkit.c). */
#include "coord_testkit.h"

uint64_t fl__coord_debug_unmask_threaded(fl_coord *co);

/* Restarts the fixture's coordinator with n unmask threads. */
static void restart_threads(struct fx *f, unsigned n) {
    fx_stop(f);
    f->unmask_threads = n;
    fx_start(f);
}

/* Sets up population name (n devices, neighbours 9, threshold fraction 0.5: degree 9,
 * threshold 5), checks every device in and fetches the tasks. */
static int64_t secure_round(struct fx *f, const char *name, struct tc *c, int n,
                            const int *drop) {
    struct popcfg pc = {.name = name, .target = n, .min = 3, .secagg = true, .neighbors = 9,
                        .mode = "none"};
    char *tok[NMAX];
    setup_population(f, &pc, tok, n);
    memset(c, 0, sizeof(*c) * (size_t)n);
    for (int i = 0; i < n; i++) {
        c[i].tok = tok[i];
        c[i].drop = drop[i];
    }
    int64_t rid;
    checkin_all(f, c, n, &rid);
    fetch_tasks(f, c, n, rid);
    assert_true(c[0].task.secagg);
    assert_int_equal(c[0].task.t, 5);
    return rid;
}

/* Six of ten devices vanish after the masked phase: four unmask answers for a threshold of
 * five. The threaded unmasking never begins; the round is abandoned. */
static void test_threaded_unmask_too_few(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    restart_threads(f, 4);
    int drop[N] = {0};
    for (int i = 4; i < N; i++)
        drop[i] = DROP_UNMASK;
    struct tc c[N];
    int64_t rid = secure_round(f, "tu", c, N, drop);
    int64_t versions = db_int(f, "SELECT count(*) FROM models");
    json_t *o = run_secagg(f, c, N, rid);
    /* The survivors' unmask result polls answer the round's outcome: abandoned. */
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "abandoned");
    assert_true(json_is_null(json_object_get(o, "new_model_version")));
    json_decref(o);
    assert_int_equal(fl__coord_debug_unmask_threaded(f->co), 0);
    json_t *j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    const char *why = json_string_value(json_object_get(j, "reason"));
    assert_non_null(why);
    if (!strstr(why, "secure aggregation failed in phase unmask"))
        fprintf(stderr, "reason: %s\n", why);
    assert_non_null(strstr(why, "secure aggregation failed in phase unmask"));
    assert_non_null(strstr(why, "(4 posted)"));
    assert_true(json_is_null(json_object_get(j, "new_model_version")));
    json_t *pc = json_object_get(j, "phase_counts");
    assert_int_equal(json_integer_value(json_object_get(pc, "masked")), N);
    assert_int_equal(json_integer_value(json_object_get(pc, "unmask")), 4);
    json_decref(j);
    assert_int_equal(db_int(f, "SELECT count(*) FROM models"), versions);
    /* A survivor's status names the abandonment. */
    j = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    json_decref(j);
    clients_free(c, N);
}

/* Five unmask answers (the threshold): the threaded unmasking runs and the round completes
 * with the ten masked inputs. */
static void test_threaded_unmask_at_threshold(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    restart_threads(f, 2);
    int drop[N] = {0};
    for (int i = 5; i < N; i++)
        drop[i] = DROP_UNMASK;
    struct tc c[N];
    int64_t rid = secure_round(f, "tt", c, N, drop);
    json_t *o = run_secagg(f, c, N, rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N);
    json_decref(o);
    assert_int_equal(fl__coord_debug_unmask_threaded(f->co), 1);
    json_t *j = admin_round(f, rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
    assert_true(json_integer_value(json_object_get(j, "new_model_version")) >= 2);
    json_decref(j);
    clients_free(c, N);
}

/* A device that missed the advertise phase polls the next phase's result while the round
 * goes on without it: 410 round_closed at once (wait=0 or not), while the others get their
 * advertise results. */
static void test_dropped_device_polls(void **state) {
    struct fx *f = *state;
    enum { N = 5 };
    int drop[N] = {0};
    struct popcfg pc = {.name = "dp", .target = N, .min = 3, .secagg = true, .neighbors = 4,
                        .mode = "none"};
    char *tok[NMAX];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++) {
        c[i].tok = tok[i];
        c[i].drop = drop[i];
    }
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    const uint8_t *out[N];
    size_t out_len[N];
    secagg_clients_start(c, N, rid, out, out_len);
    for (int i = 0; i < N - 1; i++) {
        struct resp r = post_phase(f, &c[i], rid, "advertise", out[i], out_len[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    fx_advance(f, c[0].task.dl[0] + 1 - atomic_load(&f->now_ms));
    for (int i = 0; i < N - 1; i++) {
        struct resp r = get_result(f, &c[i], rid, "advertise", 0);
        assert_int_equal(r.status, 200);
        resp_free(&r);
    }
    static const int waits[] = {0, 5};
    for (int w = 0; w < 2; w++) {
        struct resp r = get_result(f, &c[N - 1], rid, "share", waits[w]);
        assert_error(&r, 410, "round_closed");
        resp_free(&r);
        r = get_result(f, &c[N - 1], rid, "advertise", waits[w]);
        assert_error(&r, 410, "round_closed");
        resp_free(&r);
    }
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "share");
    json_decref(st);
    secagg_clients_free(c, N);
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_threaded_unmask_too_few, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_threaded_unmask_at_threshold, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_dropped_device_polls, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
