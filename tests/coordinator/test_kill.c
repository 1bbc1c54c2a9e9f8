/* kill -9 in the middle of rounds, with the real executable: `flotilla-coordinator serve`
 * runs as a child process on an ephemeral 127.0.0.1 port with a temporary database. Two
 * secagg populations get a round in flight (one with central DP half-way through the
 * masked inputs, one without DP in the share phase); the coordinator is SIGKILLed and
 * started again on the same database. Both rounds must be abandoned with a reason; no
 * model version, participant outcome or privacy-ledger entry may exist for them; devices
 * of the dead rounds get 410; and the next round of each population completes, the plain
 * one with exactly the expected model. */
#include <signal.h>
#include <sys/wait.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

enum { N = 5 };

static int setup(void **state) {
    *state = fx_new();
    return 0;
}

static int teardown(void **state) {
    fx_free(*state);
    return 0;
}

static void assert_round_row(struct fx *f, int64_t rid, int state, const char *reason) {
    char q[256];
    snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), state);
    if (reason) {
        snprintf(q, sizeof(q), "SELECT abandon_reason = '%s' FROM rounds WHERE id = %lld",
                 reason, (long long)rid);
        assert_int_equal(db_int(f, q), 1);
    }
}

/* Nothing of round rid reached the database beyond its row and its selections. */
static void assert_nothing_committed(struct fx *f, int64_t rid, const char *pop) {
    char q[256];
    snprintf(q, sizeof(q), "SELECT count(*) FROM privacy_ledger WHERE round_id = %lld",
             (long long)rid);
    assert_int_equal(db_int(f, q), 0);
    snprintf(q, sizeof(q), "SELECT coalesce(result_version, 0) FROM rounds WHERE id = %lld",
             (long long)rid);
    assert_int_equal(db_int(f, q), 0);
    /* The population still has exactly its uploaded model, and its tag points at it. */
    snprintf(q, sizeof(q), "SELECT count(*) FROM models m JOIN populations p ON "
             "m.population_id = p.id WHERE p.name = '%s'", pop);
    assert_int_equal(db_int(f, q), 1);
    snprintf(q, sizeof(q), "SELECT count(*) FROM round_participants WHERE round_id = %lld "
             "AND state = 2", (long long)rid);
    assert_int_equal(db_int(f, q), 0);
}

static void test_sigkill_mid_round(void **state) {
    struct fx *f = *state;
    fx_proc_start(f, FL_COORD_EXE);

    /* Population "px": secagg, no DP: the next round's model is checked exactly. */
    struct popcfg pcx = {.name = "px", .target = N, .min = 4, .secagg = true, .neighbors = 4,
                         .mode = "none"};
    /* Population "pd": secagg with central DP: one ledger entry per completed round. */
    struct popcfg pcd = {.name = "pd", .target = N, .min = 4, .secagg = true, .neighbors = 4,
                         .mode = "central", .budget = 1000.0};
    char *tx[N], *td[N];
    setup_population(f, &pcx, tx, N);
    setup_population(f, &pcd, td, N);
    struct tc cx[N], cd[N];
    memset(cx, 0, sizeof(cx));
    memset(cd, 0, sizeof(cd));
    for (int i = 0; i < N; i++) {
        cx[i].tok = tx[i];
        cd[i].tok = td[i];
    }

    /* pd: a round in the masked phase with 2 of 5 masked inputs folded. */
    int64_t rd;
    checkin_all(f, cd, N, &rd);
    fetch_tasks(f, cd, N, rd);
    const uint8_t *od[N];
    size_t odl[N];
    secagg_clients_start(cd, N, rd, od, odl);
    secagg_phase_all(f, cd, N, rd, "advertise", od, odl);
    secagg_phase_all(f, cd, N, rd, "share", od, odl);
    for (int i = 0; i < 2; i++) {
        struct resp r = post_phase(f, &cd[i], rd, "masked", od[i], odl[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    /* px: a round in the share phase (advertise done, 3 of 5 shares in). */
    int64_t rx;
    checkin_all(f, cx, N, &rx);
    fetch_tasks(f, cx, N, rx);
    const uint8_t *ox[N];
    size_t oxl[N];
    secagg_clients_start(cx, N, rx, ox, oxl);
    secagg_phase_all(f, cx, N, rx, "advertise", ox, oxl);
    for (int i = 0; i < 3; i++) {
        struct resp r = post_phase(f, &cx[i], rx, "share", ox[i], oxl[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    assert_round_row(f, rx, 1 /* RUNNING */, NULL);
    assert_round_row(f, rd, 1, NULL);

    /* kill -9: no graceful stop, no chance to write anything. */
    int st = fx_proc_signal(f, SIGKILL);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    assert_round_row(f, rx, 1, NULL); /* still as the dead process left it */
    assert_nothing_committed(f, rx, "px");
    assert_nothing_committed(f, rd, "pd");
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);

    /* Restart on the same database. */
    fx_proc_start(f, FL_COORD_EXE);
    assert_round_row(f, rx, 3 /* ABANDONED */, "coordinator restarted");
    assert_round_row(f, rd, 3, "coordinator restarted");
    assert_nothing_committed(f, rx, "px");
    assert_nothing_committed(f, rd, "pd");
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rx);
    struct resp r = http_json(f, "GET", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "coordinator restarted");
    assert_true(json_is_null(json_object_get(j, "new_model_version")));
    json_decref(j);
    resp_free(&r);
    /* The dead rounds' devices are told to stop: their posts and polls are 410. */
    r = post_phase(f, &cx[4], rx, "share", ox[4], oxl[4]);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    r = post_phase(f, &cd[3], rd, "masked", od[3], odl[3]);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    r = get_result(f, &cd[0], rd, "masked", 0);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    secagg_clients_free(cx, N);
    secagg_clients_free(cd, N);
    /* Population state survived: both still running with their model version 1/2. */
    r = http_json(f, "GET", "/v1/admin/populations/px", ADMIN_TOKEN, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    int64_t vx = json_integer_value(json_object_get(j, "model_version"));
    json_decref(j);
    resp_free(&r);

    /* The next round of px completes with exactly base + mean of the devices' vectors. */
    int64_t rx2;
    checkin_all(f, cx, N, &rx2);
    assert_true(rx2 > rx);
    fetch_tasks(f, cx, N, rx2);
    assert_int_equal(cx[0].task.model_version, vx);
    json_t *o = run_secagg(f, cx, N, rx2);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N);
    int64_t vnew = json_integer_value(json_object_get(o, "new_model_version"));
    json_decref(o);
    float base[D], expect[D], w[D], b[2];
    for (int j2 = 0; j2 < D; j2++)
        base[j2] = base_w(j2);
    expected_fedavg(cx, N, base, expect);
    fetch_model(f, &cx[0], "px", vnew, w, b);
    assert_memory_equal(w, expect, sizeof(w));
    assert_float_equal(b[0], 3.0f, 0);
    assert_float_equal(b[1], -4.0f, 0);

    /* The next round of pd completes and holds the only ledger entry. */
    int64_t rd2;
    checkin_all(f, cd, N, &rd2);
    fetch_tasks(f, cd, N, rd2);
    o = run_secagg(f, cd, N, rd2);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    json_decref(o);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    char q[160];
    snprintf(q, sizeof(q), "SELECT count(*) FROM privacy_ledger WHERE round_id = %lld",
             (long long)rd2);
    assert_int_equal(db_int(f, q), 1);

    /* SIGTERM stops it gracefully (exit status 0). */
    st = fx_proc_signal(f, SIGTERM);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    clients_free(cx, N);
    clients_free(cd, N);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigkill_mid_round, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
