/* A population whose stored privacy budget the audit log cannot state (epsilon >= 9e9, as
 * databases written before the finite no-DP budget of 1e9 hold): after a restart the
 * coordinator loads it with its audit logging off. It keeps working (model uploads,
 * configuration changes, stops and starts, complete rounds with a new model version), and
 * none of that appends to the audit log, while a normal population next to it still logs
 * its own round. A round such a population left unfinished is abandoned at load, unlogged.
 * Runs the coordinator in-process (coord_testkit.c) and edits its database between two runs
 * with SQLite directly. */
#include "coord_testkit.h"

static int64_t audit_count(struct fx *f) {
    return db_int(f, "SELECT count(*) FROM audit_entries");
}

/* Two devices check in, fetch the task and post their updates; returns the new version. */
static int64_t plain_round(struct fx *f, char **tok) {
    struct tc c[2];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 2; i++)
        c[i].tok = strdup(tok[i]);
    int64_t rid;
    checkin_all(f, c, 2, &rid);
    fetch_tasks(f, c, 2, rid);
    post_updates(f, c, 2, rid);
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v = json_integer_value(json_object_get(st, "new_model_version"));
    json_decref(st);
    clients_free(c, 2);
    return v;
}

static void test_legacy_budget_not_logged(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "legacy", .target = 2, .min = 2, .secagg = false,
                        .mode = "none", .bits = 32};
    char *tok[2], *tok2[2];
    setup_population(f, &pc, tok, 2);
    struct popcfg pc2 = pc;
    pc2.name = "fresh";
    setup_population(f, &pc2, tok2, 2);
    fx_stop(f);
    db_exec(f, "UPDATE populations SET epsilon = 1e300 WHERE name = 'legacy'");
    fx_start(f);

    /* Loaded and still running. */
    struct resp r = http_req(f, "GET", "/v1/admin/populations/legacy", ADMIN_TOKEN, NULL, NULL,
                             0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    json_decref(j);
    resp_free(&r);

    int64_t before = audit_count(f);
    assert_true(before > 0); /* both creations and the fresh one's changes were logged */

    /* A model upload: stored and tagged, not logged. */
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    model[mlen - 4] ^= 1; /* another model: the last float's lowest mantissa bit */
    r = http_req(f, "POST", "/v1/admin/populations/legacy/models", ADMIN_TOKEN,
                 "application/octet-stream", model, mlen, NULL);
    assert_int_equal(r.status, 201);
    j = body_json(&r);
    /* Version numbers are the store's, shared by the populations: "fresh" holds 2. */
    int64_t v_up = json_integer_value(json_object_get(j, "version"));
    assert_true(v_up > 2);
    json_decref(j);
    resp_free(&r);
    free(model);
    assert_int_equal(audit_count(f), before);

    /* A configuration change, a stop and a start: applied, not logged. */
    r = http_json(f, "PATCH", "/v1/admin/populations/legacy", ADMIN_TOKEN,
                  "{\"selection\":{\"max_retry_s\":120}}");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/legacy/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/legacy/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/legacy", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(j, "config"), "selection"),
                         "max_retry_s")),
                     120);
    json_decref(j);
    resp_free(&r);
    assert_int_equal(audit_count(f), before);

    /* A complete round: a new model version, no audit entry. */
    int64_t v_round = plain_round(f, tok);
    assert_true(v_round > v_up);
    assert_int_equal(audit_count(f), before);

    /* The other population's round is logged as usual. */
    assert_true(plain_round(f, tok2) > v_round);
    assert_true(audit_count(f) > before);
    for (int i = 0; i < 2; i++) {
        free(tok[i]);
        free(tok2[i]);
    }
}

/* A round of such a population left unfinished by a previous process (here: reopened in the
 * database, as a crash leaves it) is abandoned at load with "coordinator restarted", and that
 * abandonment is not logged either. */
static void test_legacy_unfinished_round(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "crash", .target = 3, .min = 3, .secagg = false,
                        .mode = "none", .bits = 32};
    struct tc c[1];
    setup_devices(f, &pc, c, 1);
    int64_t rid;
    checkin_all(f, c, 1, &rid); /* 1 of 3: forming */
    fx_stop(f);                 /* a clean stop abandons it */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE populations SET epsilon = 1e300 WHERE name = 'crash';"
             "UPDATE rounds SET state = 0, ended_at = NULL, abandon_reason = NULL "
             "WHERE id = %lld", (long long)rid);
    db_exec(f, sql);
    int64_t before = audit_count(f);
    fx_start(f);
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "coordinator restarted");
    json_decref(j);
    resp_free(&r);
    assert_int_equal(audit_count(f), before);
    clients_free(c, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_legacy_budget_not_logged, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_legacy_unfinished_round, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
