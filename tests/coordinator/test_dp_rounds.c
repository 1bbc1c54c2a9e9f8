/* Central DP on plain (not secure-aggregated) rounds and the privacy budget over several
 * rounds (aggregate.c budget check and ledger, docs/coordinator.md "Rounds"): each round
 * adds a ledger entry and the epsilon spent (/metrics) grows; the budget may be lowered to
 * the spent epsilon but not below it (409); once the next round would overspend, check-ins
 * get retry budget_exhausted, the population shows budget_exhausted, and the refusal is
 * logged once per streak as a budget_refused audit entry naming the next round number; a
 * ledger the accountant cannot read stops rounds from forming. */
#include <math.h>

#include <sqlite3.h>

#include "coord_testkit.h"

enum { N = 3 };

static double epsilon_spent(struct fx *f) {
    return metric_value(f, "flotilla_privacy_epsilon_spent{population=\"dp\"}");
}

static void run_round(struct fx *f, struct tc *c) {
    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    assert_int_equal(c[0].task.mode, 1);
    post_updates(f, c, N, rid);
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v = json_integer_value(json_object_get(st, "new_model_version"));
    json_decref(st);
    float w[D], b[2];
    fetch_model(f, &c[0], "dp", v, w, b);
    for (int j = 0; j < D; j++)
        assert_true(isfinite(w[j]));
    fx_advance(f, 61 * 1000);
}

static void test_budget_over_rounds(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "dp", .target = N, .min = N, .secagg = false, .mode = "central",
                        .budget = 50, .bits = 32};
    char *tok[N + 1];
    setup_population(f, &pc, tok, N + 1);
    struct tc c[N + 1];
    memset(c, 0, sizeof(c));
    for (int i = 0; i <= N; i++)
        c[i].tok = tok[i];
    assert_true(epsilon_spent(f) == 0.0);
    run_round(f, c);
    double e1 = epsilon_spent(f);
    assert_true(e1 > 0);
    run_round(f, c);
    double e2 = epsilon_spent(f);
    assert_true(e2 > e1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 2);
    /* Below the spent epsilon: 409; down to (just above) it: accepted. */
    char body[128];
    snprintf(body, sizeof(body), "{\"privacy\":{\"epsilon_budget\":%.17g}}", e2 * 0.5);
    struct resp r = http_json(f, "PATCH", "/v1/admin/populations/dp", ADMIN_TOKEN, body);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
    snprintf(body, sizeof(body), "{\"privacy\":{\"epsilon_budget\":%.17g}}", e2 * 1.0000001);
    r = http_json(f, "PATCH", "/v1/admin/populations/dp", ADMIN_TOKEN, body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* The next round would overspend: refused, logged once. */
    int64_t refusals =
        db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'budget_refused'");
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true}}";
    for (int i = 0; i < 2; i++) {
        r = http_json(f, "POST", "/v1/checkin", c[i].tok, ck);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
        assert_string_equal(json_string_value(json_object_get(j, "reason")), "budget_exhausted");
        json_decref(j);
        resp_free(&r);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'budget_refused'"),
                     refusals + 1);
    /* A minute later the budget is checked again: still refused, not logged again. */
    fx_advance(f, 61 * 1000);
    r = http_json(f, "POST", "/v1/checkin", c[2].tok, ck);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "budget_exhausted");
    json_decref(j);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'budget_refused'"),
                     refusals + 1);
    r = http_json(f, "GET", "/v1/admin/populations/dp", ADMIN_TOKEN, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "budget_exhausted");
    json_decref(j);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 2);
    assert_true(fabs(epsilon_spent(f) - e2) < 1e-9 * e2);
    clients_free(c, N + 1);
}


/* The budget lowered while a round runs, below what the round will have spent: the round's
 * commit (model, ledger entry, audit entry in one transaction) is refused by the audit
 * rules and rolled back, and the round says why. The reason is taken before the rollback:
 * it used to read "commit failed: success". */
static void test_budget_lowered_mid_round(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "dp", .target = N, .min = N, .secagg = false, .mode = "central",
                        .budget = 50, .bits = 32};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    run_round(f, c);
    double e1 = epsilon_spent(f);
    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    char body[128];
    /* Above the spent epsilon (/metrics prints 6 digits), below the round's. */
    snprintf(body, sizeof(body), "{\"privacy\":{\"epsilon_budget\":%.17g}}", e1 * 1.0001);
    struct resp r = http_json(f, "PATCH", "/v1/admin/populations/dp", ADMIN_TOKEN, body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    post_updates(f, c, N, rid);
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    const char *why = json_string_value(json_object_get(st, "reason"));
    assert_non_null(why);
    assert_non_null(strstr(why, "commit failed: "));
    assert_null(strstr(why, "success"));
    assert_non_null(strstr(why, "budget"));
    json_decref(st);
    /* Nothing of the round was kept: one ledger entry, one model version after the base. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    assert_true(fabs(epsilon_spent(f) - e1) < 1e-9 * e1);
    clients_free(c, N);
}

/* A ledger entry the accountant cannot read (its parameters damaged in the database): the
 * budget cannot be checked, so no round forms (retry no_round_forming) and nothing is
 * stored. */
static void test_unreadable_ledger(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "dp", .target = N, .min = N, .secagg = false, .mode = "central",
                        .budget = 50, .bits = 32};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    run_round(f, c);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    /* The ledger is append-only; damage it the way only a broken disk or tool could. */
    assert_int_equal(sqlite3_exec(db,
                                  "DROP TRIGGER privacy_ledger_append_only_update;"
                                  "UPDATE privacy_ledger SET params_json = '{\"dim\":-1}'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", c[0].tok, ck);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "no_round_forming");
    json_decref(j);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 1);
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_budget_over_rounds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_budget_lowered_mid_round, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unreadable_ledger, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
