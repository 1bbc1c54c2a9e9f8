/* Error answers of the audit endpoints (docs/protocol.md section 13, docs/coordinator.md
 * "Audit log"): before anything is logged the checkpoint and the admin bundle answer 404;
 * proof queries take index/size and first/second as integers in range (400
 * invalid_parameter naming the parameter otherwise); erasure refuses malformed and unknown
 * client ids (404) and clients in a forming round (409 with Retry-After), and the admin
 * audit endpoints need the admin token. Valid queries are checked against the log's size. */
#include "coord_testkit.h"

static void expect(struct resp *r, long status, const char *code, const char *field,
                   const char *what) {
    if (r->status != status)
        fprintf(stderr, "%s: expected %ld got %ld: %s\n", what, status, r->status,
                r->body ? r->body : "");
    assert_error(r, status, code);
    if (field) {
        json_t *j = body_json(r);
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(j, "error"), "field")), field);
        json_decref(j);
    }
    resp_free(r);
}

static void test_empty_log(void **state) {
    struct fx *f = *state;
    struct resp r = http_req(f, "GET", "/v1/audit/checkpoint", NULL, NULL, NULL, 0, NULL);
    expect(&r, 404, "not_found", NULL, "checkpoint of an empty log");
    r = http_req(f, "GET", "/v1/admin/audit/bundle", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    expect(&r, 404, "not_found", NULL, "bundle of an empty log");
    r = http_req(f, "GET", "/v1/audit/proof/inclusion?index=0&size=1", NULL, NULL, NULL, 0,
                 NULL);
    expect(&r, 400, "invalid_parameter", "index", "inclusion in an empty log");
    r = http_req(f, "GET", "/v1/admin/audit/bundle", NULL, NULL, NULL, 0, NULL);
    expect(&r, 401, "unauthorized", NULL, "bundle without the admin token");
    r = http_json(f, "POST", "/v1/admin/clients/0123456789abcdef/erase", NULL, NULL);
    expect(&r, 401, "unauthorized", NULL, "erase without the admin token");
}

static void test_proof_parameters(void **state) {
    struct fx *f = *state;
    /* Three entries: two populations created, one model uploaded. */
    struct popcfg pc = {.name = "au", .target = 3, .min = 3, .secagg = false, .mode = "none"};
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    struct resp r = http_req(f, "GET", "/v1/audit/checkpoint", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    int64_t size = json_integer_value(json_object_get(j, "tree_size"));
    assert_true(size >= 2);
    assert_non_null(strstr(json_string_value(json_object_get(j, "verifier_key")), "+"));
    json_decref(j);
    resp_free(&r);
    static const struct {
        const char *query, *field;
    } bad[] = {
        {"/v1/audit/proof/inclusion", "index"},
        {"/v1/audit/proof/inclusion?size=2", "index"},
        {"/v1/audit/proof/inclusion?index=x&size=2", "index"},
        {"/v1/audit/proof/inclusion?index=-1&size=2", "index"},
        {"/v1/audit/proof/inclusion?index=0", "size"},
        {"/v1/audit/proof/inclusion?index=0&size=0", "size"},
        {"/v1/audit/proof/inclusion?index=0&size=abc", "size"},
        {"/v1/audit/proof/inclusion?index=&size=2", "index"},
        {"/v1/audit/proof/inclusion?index=2&size=2", "index"},      /* index >= size */
        {"/v1/audit/proof/inclusion?index=0&size=999999", "index"}, /* size > log size */
        {"/v1/audit/proof/consistency", "first"},
        {"/v1/audit/proof/consistency?first=1", "second"},
        {"/v1/audit/proof/consistency?first=z&second=2", "first"},
        {"/v1/audit/proof/consistency?first=1&second=0", "second"},
        {"/v1/audit/proof/consistency?first=2&second=1", "first"},     /* first > second */
        {"/v1/audit/proof/consistency?first=1&second=999999", "first"}, /* beyond the log */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = http_req(f, "GET", bad[i].query, NULL, NULL, NULL, 0, NULL);
        expect(&r, 400, "invalid_parameter", bad[i].field, bad[i].query);
    }
    /* In range: the proofs have the expected shape. */
    char q[128];
    snprintf(q, sizeof(q), "/v1/audit/proof/inclusion?index=%lld&size=%lld",
             (long long)(size - 1), (long long)size);
    r = http_req(f, "GET", q, NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "index")), size - 1);
    assert_non_null(strstr(json_string_value(json_object_get(j, "entry")), "\"type\""));
    assert_true(json_array_size(json_object_get(j, "proof")) >= 1);
    json_decref(j);
    resp_free(&r);
    snprintf(q, sizeof(q), "/v1/audit/proof/consistency?first=0&second=%lld", (long long)size);
    r = http_req(f, "GET", q, NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "proof")), 0); /* from the empty tree */
    json_decref(j);
    resp_free(&r);
    snprintf(q, sizeof(q), "/v1/audit/proof/consistency?first=%lld&second=%lld",
             (long long)size, (long long)size);
    r = http_req(f, "GET", q, NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

static void test_erase_refusals(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "er", .target = 3, .min = 3, .secagg = false, .mode = "none"};
    struct tc c[3];
    memset(c, 0, sizeof(c));
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    static const char *const bad_ids[] = {"/v1/admin/clients/not_hex!/erase",
                                          "/v1/admin/clients/0123456789abcdef0/erase",
                                          "/v1/admin/clients/0000000000000000/erase"};
    for (int i = 0; i < 3; i++) {
        struct resp r = http_json(f, "POST", bad_ids[i], ADMIN_TOKEN, NULL);
        expect(&r, 404, "not_found", "client_id", bad_ids[i]);
    }
    /* A client selected into the forming round cannot be erased until the round ends. */
    int64_t rid = 0;
    checkin_all(f, c, 1, &rid);
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%.16s/erase", c[0].tok + 4);
    struct resp r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    char hv[16];
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "30");
    expect(&r, 409, "conflict", "client_id", "erase in a round");
    /* Another, not selected, is erased: the answer names its pseudonym and audit index. */
    snprintf(path, sizeof(path), "/v1/admin/clients/%.16s/erase", c[1].tok + 4);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "erased");
    assert_true(json_integer_value(json_object_get(j, "audit_index")) >= 0);
    assert_true(strlen(json_string_value(json_object_get(j, "pseudonym"))) > 0);
    json_decref(j);
    resp_free(&r);
    clients_free(c, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_log, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_proof_parameters, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_erase_refusals, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
