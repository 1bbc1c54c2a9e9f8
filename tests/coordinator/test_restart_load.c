/* Loading populations at start-up (pop.c, docs/coordinator.md "Storage use"): a stored
 * population whose config is not a JSON object, lacks its enrollment token hash or no longer
 * passes validation stops fl_coord_create with FL_ERR_CORRUPT and a message naming the
 * population; a closed population is not loaded; a population stored with the old
 * "unlimited" budget (which the audit log cannot state) is loaded with its rounds and
 * changes kept out of the log (warned), and works otherwise. The database is edited with
 * SQL between two runs of the in-process coordinator. */
#include <sodium.h>
#include <sqlite3.h>

#include "coord_testkit.h"

static void sql(struct fx *f, const char *q) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *err = NULL;
    int rc = sqlite3_exec(db, q, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fprintf(stderr, "%s: %s\n", q, err);
    sqlite3_free(err);
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_close(db);
}

/* Creates a coordinator on f's database without starting it; returns the status and the
 * message. */
static fl_status create_only(struct fx *f, fl_coord **out, char *err, size_t n) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = 1;
    cfg.db_path = f->db;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    return fl_coord_create(out, &cfg, err, n);
}

static char g_client[128]; /* the population's one client token */

static int setup(void **state) {
    fx_setup(state);
    struct fx *f = *state;
    struct popcfg pc = {.name = "ld", .target = 3, .min = 3, .secagg = false, .mode = "none"};
    char *tok[1];
    setup_population(f, &pc, tok, 1);
    snprintf(g_client, sizeof(g_client), "%s", tok[0]);
    free(tok[0]);
    fx_stop(f);
    return 0;
}

static void test_corrupt_configs(void **state) {
    struct fx *f = *state;
    sql(f, "CREATE TABLE saved AS SELECT config_json FROM populations WHERE name = 'ld'");
    static const struct {
        const char *update, *msg;
    } cases[] = {
        {"UPDATE populations SET config_json = 'not json' WHERE name = 'ld'",
         "config is not JSON"},
        {"UPDATE populations SET config_json = '[1,2]' WHERE name = 'ld'", "config is not JSON"},
        {"UPDATE populations SET config_json = json_remove((SELECT config_json FROM saved),"
         " '$.enrollment_token_sha256') WHERE name = 'ld'",
         "no enrollment token hash"},
        {"UPDATE populations SET config_json = json_set((SELECT config_json FROM saved),"
         " '$.enrollment_token_sha256', 'xyz') WHERE name = 'ld'",
         "no enrollment token hash"},
        {"UPDATE populations SET config_json = json_set((SELECT config_json FROM saved),"
         " '$.selection.target', 0) WHERE name = 'ld'",
         "stored config invalid"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sql(f, cases[i].update);
        fl_coord *co = NULL;
        char err[256] = "";
        fl_status rc = create_only(f, &co, err, sizeof(err));
        if (rc != FL_ERR_CORRUPT || !strstr(err, cases[i].msg))
            fprintf(stderr, "case %zu: %d %s\n", i, (int)rc, err);
        assert_int_equal(rc, FL_ERR_CORRUPT);
        assert_null(co);
        assert_non_null(strstr(err, "population ld"));
        assert_non_null(strstr(err, cases[i].msg));
    }
    /* Put back: it loads again. */
    sql(f, "UPDATE populations SET config_json = (SELECT config_json FROM saved)");
    fl_coord *co = NULL;
    char err[256];
    assert_int_equal(create_only(f, &co, err, sizeof(err)), FL_OK);
    fl_coord_destroy(co);
}

static void test_closed_not_loaded(void **state) {
    struct fx *f = *state;
    sql(f, "UPDATE populations SET state = 2 WHERE name = 'ld'");
    fx_start(f);
    /* Its clients' tokens still authenticate, but the population is gone for them. */
    struct resp r0 = http_json(f, "POST", "/v1/checkin", g_client,
                               "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                               "\"unmetered\":true,\"idle\":true}}");
    assert_error(&r0, 401, "token_revoked");
    resp_free(&r0);
    r0 = http_req(f, "GET", "/v1/models/ld/1", g_client, NULL, NULL, 0, NULL);
    assert_error(&r0, 404, "not_found");
    resp_free(&r0);
    struct resp r = http_req(f, "GET", "/v1/admin/populations", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "populations")), 0);
    json_decref(j);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/ld", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
}

static void test_unlimited_budget_not_logged(void **state) {
    struct fx *f = *state;
    sql(f, "UPDATE populations SET epsilon = 1e300 WHERE name = 'ld'");
    int64_t entries = db_int(f, "SELECT count(*) FROM audit_entries");
    fx_start(f);
    /* Uploads, starts and stops, settings and token changes all work, unlogged. */
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    struct resp r = http_req(f, "POST", "/v1/admin/populations/ld/models", ADMIN_TOKEN,
                             "application/octet-stream", model, mlen, NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    free(model);
    r = http_json(f, "POST", "/v1/admin/populations/ld/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "PATCH", "/v1/admin/populations/ld", ADMIN_TOKEN,
                  "{\"deadlines_s\":{\"masked\":90}}");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/ld/enrollment-token", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/ld/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries"), entries);
    r = http_req(f, "GET", "/v1/admin/populations/ld", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    json_decref(j);
    resp_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_corrupt_configs, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_closed_not_loaded, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unlimited_budget_not_logged, setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
