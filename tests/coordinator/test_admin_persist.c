/* Population settings changed by PATCH /v1/admin/populations/{name} survive a restart of
 * the coordinator on the same database: the change is written to the population's storage
 * row together with its config_changed audit entry, and the coordinator loads every
 * population through the storage listing. */
#include "coord_testkit.h"

static json_t *get_config(struct fx *f, const char *name) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *cfg = json_incref(json_object_get(j, "config"));
    json_decref(j);
    resp_free(&r);
    assert_non_null(cfg);
    return cfg;
}

static int64_t sel_int(json_t *cfg, const char *key) {
    return json_integer_value(json_object_get(json_object_get(cfg, "selection"), key));
}

static long patch(struct fx *f, const char *name, const char *json) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_json(f, "PATCH", path, ADMIN_TOKEN, json);
    long st = r.status;
    if (st != 200 || getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "PATCH %s -> %ld %s\n", json, st, r.body ? r.body : "");
    resp_free(&r);
    return st;
}

static void restart(struct fx *f) {
    fx_stop(f);
    fx_start(f);
}

static void test_patch_survives_restart(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "keep", .target = 4, .min = 3, .secagg = false, .mode = "central",
                        .budget = 10.0};
    struct popcfg other = {.name = "other", .target = 2, .min = 2, .secagg = false, .mode = "none"};
    char *tok[1], *tok2[1];
    setup_population(f, &pc, tok, 1);
    setup_population(f, &other, tok2, 1);
    assert_int_equal(patch(f, "keep",
                           "{\"selection\":{\"target\":6,\"min_participants\":5,"
                           "\"max_retry_s\":90},\"deadlines_s\":{\"masked\":75},"
                           "\"allowed_regions\":[\"EU\",\"US\"],"
                           "\"privacy\":{\"epsilon_budget\":7.5}}"),
                     200);
    /* A refused change after it (min_participants above the target) writes nothing. */
    assert_int_equal(patch(f, "keep", "{\"selection\":{\"min_participants\":9}}"), 400);
    restart(f);

    json_t *cfg = get_config(f, "keep");
    assert_int_equal(sel_int(cfg, "target"), 6);
    assert_int_equal(sel_int(cfg, "min_participants"), 5);
    assert_int_equal(sel_int(cfg, "max_retry_s"), 90);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(cfg, "deadlines_s"), "masked")), 75);
    json_t *regs = json_object_get(cfg, "allowed_regions");
    assert_int_equal(json_array_size(regs), 2);
    assert_string_equal(json_string_value(json_array_get(regs, 1)), "US");
    assert_true(json_number_value(
                    json_object_get(json_object_get(cfg, "privacy"), "epsilon_budget")) == 7.5);
    /* No secrets in the admin view after the reload either. */
    assert_null(json_object_get(cfg, "enrollment_token_sha256"));
    json_decref(cfg);
    /* The storage row holds the new budget and regions (the audit log and the row agree). */
    assert_int_equal(db_int(f, "SELECT CAST(epsilon * 10 AS INTEGER) FROM populations "
                               "WHERE name = 'keep'"),
                     75);
    assert_int_equal(db_int(f, "SELECT json_array_length(allowed_regions_json) FROM populations "
                               "WHERE name = 'keep'"),
                     2);
    /* The untouched population is unchanged, and both still run. */
    cfg = get_config(f, "other");
    assert_int_equal(sel_int(cfg, "target"), 2);
    json_decref(cfg);

    /* A second change on the reloaded population and another restart: still applied, and
     * the region restriction is enforced (enrolment token hash kept across the reload). */
    assert_int_equal(patch(f, "keep", "{\"allowed_regions\":[\"US\"]}"), 200);
    restart(f);
    cfg = get_config(f, "keep");
    assert_int_equal(json_array_size(json_object_get(cfg, "allowed_regions")), 1);
    assert_int_equal(sel_int(cfg, "target"), 6);
    json_decref(cfg);
    const char *eu = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", tok[0], eu);
    assert_int_not_equal(r.status, 500);
    assert_null(r.body ? strstr(r.body, "\"selected\"") : NULL);
    resp_free(&r);
    /* Two config_changed entries (and the start's) for "keep" in the audit log. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE population_id = "
                               "(SELECT id FROM populations WHERE name = 'keep') AND "
                               "type = 'config_changed'"),
                     3);
    free(tok[0]);
    free(tok2[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_patch_survives_restart, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
