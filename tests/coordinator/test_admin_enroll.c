/* Enrolment limits per enrollment token (population config "enrollment"): a bucket of
 * max_per_minute enrolments refilled at that rate (429 rate_limited with retry_after_s when
 * empty) and a cap on enrolled clients (403 enrollment_closed), each checked at limit-1,
 * limit and limit+1 on the injected clock; refusals enrol nobody; both limits can be
 * changed by PATCH and survive a restart, as does a rotated enrollment token. */
#include "coord_testkit.h"

static const char *POP =
    "{\"name\":\"lim\",\"allowed_regions\":[\"*\"],"
    "\"selection\":{\"target\":3,\"min_participants\":3,\"require\":[]},"
    "\"update\":{\"tensors\":[\"w\"]},"
    "\"enrollment\":{\"max_per_minute\":3,\"max_clients\":5},"
    "\"privacy\":{\"mode\":\"none\"}}";

static char *create(struct fx *f) {
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, POP);
    if (r.status != 201)
        fprintf(stderr, "%s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    json_t *en = json_object_get(json_object_get(json_object_get(j, "population"), "config"),
                                 "enrollment");
    assert_int_equal(json_integer_value(json_object_get(en, "max_per_minute")), 3);
    assert_int_equal(json_integer_value(json_object_get(en, "max_clients")), 5);
    char *tok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    return tok;
}

/* One enrolment; returns the status and, for 429, the retry_after_s of body and header. */
static long enroll(struct fx *f, const char *etok, int *retry_after) {
    struct resp r = http_json(f, "POST", "/v1/enroll", etok,
                              "{\"population\":\"lim\",\"region\":\"EU\"}");
    long st = r.status;
    if (st == 429) {
        assert_error(&r, 429, "rate_limited");
        json_t *j = body_json(&r);
        int body_ra = (int)json_integer_value(
            json_object_get(json_object_get(j, "error"), "retry_after_s"));
        json_decref(j);
        char h[32];
        assert_non_null(header_in(&r, "Retry-After", h, sizeof(h)));
        assert_int_equal(strtol(h, NULL, 10), body_ra);
        *retry_after = body_ra;
    } else if (st == 403) {
        assert_error(&r, 403, "enrollment_closed");
    } else if (st != 201) {
        fprintf(stderr, "enroll: %ld %s\n", st, r.body ? r.body : "");
    }
    resp_free(&r);
    return st;
}

static int64_t clients(struct fx *f) {
    return db_int(f, "SELECT count(*) FROM clients");
}

static long patch(struct fx *f, const char *json) {
    struct resp r = http_json(f, "PATCH", "/v1/admin/populations/lim", ADMIN_TOKEN, json);
    long st = r.status;
    resp_free(&r);
    return st;
}

static void test_enrollment_limits(void **state) {
    struct fx *f = *state;
    char *etok = create(f);
    int ra = -1;
    /* Rate: 3 a minute. limit-1 and limit pass, limit+1 is 429 with the wait for one more
     * (60 s / 3 = 20 s). */
    assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(enroll(f, etok, &ra), 201); /* limit - 1 */
    assert_int_equal(enroll(f, etok, &ra), 201); /* limit */
    assert_int_equal(enroll(f, etok, &ra), 429); /* limit + 1 */
    assert_int_equal(ra, 20);
    assert_int_equal(clients(f), 3);
    fx_advance(f, 19000);
    assert_int_equal(enroll(f, etok, &ra), 429);
    assert_int_equal(ra, 1);
    assert_int_equal(clients(f), 3);
    fx_advance(f, 1000);
    assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(enroll(f, etok, &ra), 429);
    assert_int_equal(clients(f), 4);
    /* Total: 5 clients. After a full minute the bucket allows 3, but only one more client
     * fits: limit (5) passes, limit+1 is 403. */
    fx_advance(f, 60000);
    assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(clients(f), 5);
    assert_int_equal(enroll(f, etok, &ra), 403);
    assert_int_equal(enroll(f, etok, &ra), 403);
    assert_int_equal(clients(f), 5);
    /* A wrong token or region is still refused first (401/403 region), nothing enrolled. */
    struct resp r = http_json(f, "POST", "/v1/enroll", "flp_not-the-token-0123456789abcdef",
                              "{\"population\":\"lim\",\"region\":\"EU\"}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);

    /* PATCH: bad values refused; raising the cap lets one more in (limit+1 of the old cap
     * is limit of the new one); 0 lifts the rate limit. */
    assert_int_equal(patch(f, "{\"enrollment\":{\"max_clients\":-1}}"), 400);
    assert_int_equal(patch(f, "{\"enrollment\":{\"max_per_minute\":1000001}}"), 400);
    assert_int_equal(patch(f, "{\"enrollment\":{\"other\":1}}"), 400);
    assert_int_equal(patch(f, "{\"enrollment\":{\"max_clients\":6}}"), 200);
    assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(enroll(f, etok, &ra), 403);
    assert_int_equal(patch(f, "{\"enrollment\":{\"max_clients\":0,\"max_per_minute\":0}}"), 200);
    for (int i = 0; i < 5; i++)
        assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(clients(f), 11);

    /* Rotation: the old enrollment token stops working, the new one (shown once) enrols; an
     * unauthenticated or GET request changes nothing. */
    r = http_json(f, "POST", "/v1/admin/populations/lim/enrollment-token", NULL, NULL);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/lim/enrollment-token", ADMIN_TOKEN, NULL, NULL,
                 0, NULL);
    assert_error(&r, 405, "method_not_allowed");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/nope/enrollment-token", ADMIN_TOKEN, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    int64_t changes = db_int(f, "SELECT count(*) FROM audit_entries WHERE type = "
                                "'config_changed'");
    r = http_json(f, "POST", "/v1/admin/populations/lim/enrollment-token", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    char *etok2 = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(strncmp(etok2, "flp_", 4), 0);
    assert_string_not_equal(etok2, etok);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = "
                               "'config_changed'"),
                     changes + 1);
    r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"lim\",\"region\":\"EU\"}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    assert_int_equal(clients(f), 11);
    free(etok);
    etok = etok2;

    /* The limits and the new token are persisted: after a restart a 2-a-minute bucket (full
     * again) applies to the new token. */
    assert_int_equal(patch(f, "{\"enrollment\":{\"max_per_minute\":2}}"), 200);
    fx_stop(f);
    fx_start(f);
    assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(enroll(f, etok, &ra), 201);
    assert_int_equal(enroll(f, etok, &ra), 429);
    assert_int_equal(ra, 30);
    assert_int_equal(clients(f), 13);
    free(etok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_enrollment_limits, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
