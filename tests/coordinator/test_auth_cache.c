/* The client token cache (auth.c, docs/coordinator.md "Client tokens"): the first request
 * of a client is checked against storage (a miss) and later ones are served from memory (a
 * hit); the table grows past its first 1024 slots (three quarters full) and keeps every
 * entry; a cached client id with another secret is refused; ids that are not hex, and the
 * all-zero id, never authenticate. Counted in flotilla_auth_cache_total{result}. */
#include "coord_testkit.h"

enum { CLIENTS = 800 }; /* > 3/4 of 1024: one growth */


static void test_cache_grows(void **state) {
    struct fx *f = *state;
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                              "{\"name\":\"ac\",\"allowed_regions\":[\"*\"]}");
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    r = http_req(f, "POST", "/v1/admin/populations/ac/models", ADMIN_TOKEN,
                 "application/octet-stream", model, mlen, NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    free(model);
    char **tok = calloc(CLIENTS, sizeof(*tok));
    assert_non_null(tok);
    const char *eb = "{\"population\":\"ac\",\"region\":\"EU\"}";
    for (int i = 0; i < CLIENTS; i++) {
        r = http_json(f, "POST", "/v1/enroll", etok, eb);
        assert_int_equal(r.status, 201);
        j = body_json(&r);
        tok[i] = strdup(json_string_value(json_object_get(j, "client_token")));
        json_decref(j);
        resp_free(&r);
    }
    const char *hit = "flotilla_auth_cache_total{result=\"hit\"}";
    const char *miss = "flotilla_auth_cache_total{result=\"miss\"}";
    double h0 = metric_value(f, hit), m0 = metric_value(f, miss);
    /* Every client once (a miss each, the table grows on the way), then again (hits). */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < CLIENTS; i++) {
            r = http_req(f, "GET", "/v1/models/ac/1", tok[i], NULL, NULL, 0, NULL);
            assert_int_equal(r.status, 200);
            resp_free(&r);
        }
    assert_true(metric_value(f, miss) - m0 == CLIENTS);
    assert_true(metric_value(f, hit) - h0 == CLIENTS);
    /* A cached id with another secret. */
    char bad[128];
    snprintf(bad, sizeof(bad), "%s", tok[0]);
    size_t n = strlen(bad);
    bad[n - 1] = bad[n - 1] == 'A' ? 'B' : 'A';
    r = http_req(f, "GET", "/v1/models/ac/1", bad, NULL, NULL, 0, NULL);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    /* A non-hex id and the all-zero id, in the token's exact shape. */
    memcpy(bad + 4, "zzzzzzzzzzzzzzzz", 16);
    r = http_req(f, "GET", "/v1/models/ac/1", bad, NULL, NULL, 0, NULL);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    memcpy(bad + 4, "0000000000000000", 16);
    r = http_req(f, "GET", "/v1/models/ac/1", bad, NULL, NULL, 0, NULL);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    for (int i = 0; i < CLIENTS; i++)
        free(tok[i]);
    free(tok);
    free(etok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cache_grows, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
