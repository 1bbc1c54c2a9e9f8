/* The enrolment rate limit (enrollment.max_per_minute, a token bucket refilled continuously)
 * under the injected clock: a burst of max_per_minute enrolments is taken, the next one is
 * refused 429 rate_limited with a Retry-After of at least one second, refusals while the
 * bucket refills in small steps keep that floor (down to the last step, where what is left
 * to wait is a rounding error of the refill sum), and once a minute's refill has accrued an
 * enrolment goes through again. Runs the coordinator in-process (coord_testkit.c). */
#include "coord_testkit.h"

enum { PER_MINUTE = 60 };

static char *create_pop(struct fx *f) {
    char body[512];
    snprintf(body, sizeof(body),
             "{\"name\":\"rl\",\"allowed_regions\":[\"*\"],"
             "\"enrollment\":{\"max_per_minute\":%d}}", PER_MINUTE);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201)
        fprintf(stderr, "create: %s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    return etok;
}

/* One enrolment; returns its status and, for a 429, the Retry-After seconds in *retry. */
static long enroll(struct fx *f, const char *etok, long *retry) {
    struct resp r =
        http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"rl\",\"region\":\"EU\"}");
    long st = r.status;
    *retry = -1;
    if (st == 429) {
        assert_error(&r, 429, "rate_limited");
        char ra[32];
        assert_non_null(header_in(&r, "Retry-After", ra, sizeof(ra)));
        *retry = strtol(ra, NULL, 10);
    }
    resp_free(&r);
    return st;
}

static void test_enroll_rate_limit_refill(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f);
    long retry;
    for (int i = 0; i < PER_MINUTE; i++)
        assert_int_equal(enroll(f, etok, &retry), 201);
    assert_int_equal(enroll(f, etok, &retry), 429);
    assert_int_equal(retry, 1); /* one token takes 1 s at 60 a minute */
    /* Ten steps of 100 ms: 0.1 token each. Each refusal still says at least 1 s. */
    int accepted = 0;
    for (int step = 0; step < 10; step++) {
        atomic_fetch_add(&f->now_ms, 100);
        long st = enroll(f, etok, &retry);
        assert_true(st == 429 || (st == 201 && step == 9));
        if (st == 429)
            assert_int_equal(retry, 1);
        accepted += st == 201;
    }
    /* A minute's refill (and a millisecond) after the burst, one more goes through. */
    if (!accepted) {
        atomic_fetch_add(&f->now_ms, 1);
        assert_int_equal(enroll(f, etok, &retry), 201);
    }
    /* ... and the bucket is empty again. */
    assert_int_equal(enroll(f, etok, &retry), 429);
    assert_true(retry >= 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), PER_MINUTE + 1);
    free(etok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_enroll_rate_limit_refill, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
