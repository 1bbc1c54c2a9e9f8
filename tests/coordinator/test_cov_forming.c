/* Population views and round lookups at the edges (docs/openapi.yaml, docs/protocol.md):
 *
 * - while a round forms, the admin population view names it: current_round, round_state
 *   "forming" and the devices selected so far;
 * - a FedBuff participant asking about a round id its population never handed out (above
 *   the open buffer's) gets 410 round_closed, for the task and for the status.
 * Runs the coordinator in-process (coord_testkit.c). */
#include "coord_testkit.h"

static json_t *pop_view(struct fx *f, const char *name) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

static void test_population_view_forming(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fm", .target = 3, .min = 3, .secagg = false, .mode = "none",
                        .bits = 32};
    char *tok[2];
    setup_population(f, &pc, tok, 2);
    json_t *j = pop_view(f, "fm");
    assert_true(json_is_null(json_object_get(j, "current_round")));
    assert_null(json_object_get(j, "round_state"));
    json_decref(j);
    struct tc c[2];
    memset(c, 0, sizeof(c));
    c[0].tok = tok[0];
    c[1].tok = tok[1];
    int64_t rid;
    checkin_all(f, c, 2, &rid); /* 2 of 3: the round keeps forming (60 s, clock held) */
    j = pop_view(f, "fm");
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    assert_int_equal(json_integer_value(json_object_get(j, "current_round")), rid);
    assert_string_equal(json_string_value(json_object_get(j, "round_state")), "forming");
    assert_int_equal(json_integer_value(json_object_get(j, "round_selected")), 2);
    json_decref(j);
    clients_free(c, 2);
}

static void test_fedbuff_unknown_round(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fu", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":2"};
    char *tok[1];
    setup_population(f, &pc, tok, 1);
    struct tc c[1];
    memset(c, 0, sizeof(c));
    c[0].tok = tok[0];
    int64_t rid;
    checkin_all(f, c, 1, &rid);
    static const char *const what[] = {"task", "status"};
    for (int i = 0; i < 2; i++) {
        char path[96];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/%s", (long long)(rid + 1000), what[i]);
        struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
        assert_error(&r, 410, "round_closed");
        assert_non_null(strstr(r.body, "is not open"));
        resp_free(&r);
    }
    /* Its own participation is still served. */
    fetch_tasks(f, c, 1, rid);
    assert_string_equal(c[0].task.kind, "buffered");
    clients_free(c, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_population_view_forming, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedbuff_unknown_round, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
