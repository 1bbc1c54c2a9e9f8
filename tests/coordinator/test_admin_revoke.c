/* Blocking a client without erasing it (docs/protocol.md section 10): after POST
 * /v1/admin/clients/{id}/revoke every request with the client's token gets 401
 * token_revoked, whether the token was in the auth cache or not; other clients are
 * unaffected; the client's row stays; revoking twice keeps the first time; reinstate makes
 * the token work again; the state is in storage, so it survives a restart. Only the admin
 * may call either; unknown ids are 404, malformed ones 400. A revoked participant of a
 * running round can send nothing more to it. */
#include "coord_testkit.h"
#include "flotilla/storage.h"

#define CHECKIN_BODY                                                                               \
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true}}"

static const struct popcfg pc = {.name = "rv", .target = 3, .min = 3, .secagg = false,
                                 .mode = "none"};

/* The client id inside a client token "flc_<16 hex>.<secret>". */
static void client_id_of(char out[17], const char *tok) {
    memcpy(out, tok + 4, 16);
    out[16] = '\0';
}

static struct resp checkin(struct fx *f, const char *tok) {
    return http_json(f, "POST", "/v1/checkin", tok, CHECKIN_BODY);
}

/* A check-in that authenticated: 200 (selected or told to retry). */
static void checkin_ok(struct fx *f, const char *tok) {
    struct resp r = checkin(f, tok);
    if (r.status != 200)
        fail_msg("check-in: %ld %s", r.status, r.body ? r.body : "");
    resp_free(&r);
}

static void checkin_revoked(struct fx *f, const char *tok) {
    struct resp r = checkin(f, tok);
    assert_error(&r, 401, "token_revoked");
    resp_free(&r);
}

/* POST /v1/admin/clients/{cid}/{action} with token; returns the response. */
static struct resp admin_client(struct fx *f, const char *cid, const char *action,
                                const char *token) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/%s", cid, action);
    return http_req(f, "POST", path, token, NULL, NULL, 0, NULL);
}

/* audit_index of the last revoke_ok / reinstate_ok answer, -1 for null. */
static int64_t last_audit_index;

static int64_t audit_index(const json_t *j) {
    json_t *ai = json_object_get(j, "audit_index");
    assert_true(json_is_null(ai) || json_is_integer(ai));
    return json_is_integer(ai) ? (int64_t)json_integer_value(ai) : -1;
}

/* Revokes cid as the admin, checks the 200 body and returns its revoked_at. */
static int64_t revoke_ok(struct fx *f, const char *cid) {
    struct resp r = admin_client(f, cid, "revoke", ADMIN_TOKEN);
    if (r.status != 200)
        fail_msg("revoke: %ld %s", r.status, r.body ? r.body : "");
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "revoked");
    assert_string_equal(json_string_value(json_object_get(j, "client_id")), cid);
    assert_true(json_is_integer(json_object_get(j, "revoked_at")));
    int64_t at = json_integer_value(json_object_get(j, "revoked_at"));
    last_audit_index = audit_index(j);
    json_decref(j);
    resp_free(&r);
    return at;
}

static void reinstate_ok(struct fx *f, const char *cid) {
    struct resp r = admin_client(f, cid, "reinstate", ADMIN_TOKEN);
    if (r.status != 200)
        fail_msg("reinstate: %ld %s", r.status, r.body ? r.body : "");
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "active");
    assert_string_equal(json_string_value(json_object_get(j, "client_id")), cid);
    assert_true(json_is_null(json_object_get(j, "revoked_at")));
    last_audit_index = audit_index(j);
    json_decref(j);
    resp_free(&r);
}

static int64_t db_revoked_at(struct fx *f, const char *cid) {
    char q[128];
    snprintf(q, sizeof(q), "SELECT ifnull(revoked_at, 0) FROM clients WHERE client_id = '%s'",
             cid);
    return db_int(f, q);
}

static void test_revoke_cached_and_reinstate(void **state) {
    struct fx *f = *state;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    char cid[17], cid1[17];
    client_id_of(cid, tok[0]);
    client_id_of(cid1, tok[1]);
    /* Both check in fine; their tokens are now in the auth cache. */
    checkin_ok(f, tok[0]);
    checkin_ok(f, tok[1]);

    double hits0 = metric_value(f, "flotilla_auth_cache_total{result=\"hit\"}");
    double refused0 = metric_value(f, "flotilla_auth_revoked_total");
    int64_t at = revoke_ok(f, cid);
    assert_int_equal(at, atomic_load(&f->now_ms));
    assert_int_equal(db_revoked_at(f, cid), at);
    /* Refused from the cache (a hit), on every device endpoint. */
    checkin_revoked(f, tok[0]);
    assert_true(metric_value(f, "flotilla_auth_cache_total{result=\"hit\"}") - hits0 == 1);
    struct resp r = http_req(f, "GET", "/v1/models/rv/1", tok[0], NULL, NULL, 0, NULL);
    assert_error(&r, 401, "token_revoked");
    resp_free(&r);
    assert_true(metric_value(f, "flotilla_auth_revoked_total") - refused0 == 2);
    /* A wrong secret for the revoked id is the plain 401: no oracle. */
    char bad[160];
    snprintf(bad, sizeof(bad), "%s", tok[0]);
    size_t n = strlen(bad);
    bad[n - 1] = bad[n - 1] == 'A' ? 'B' : 'A';
    r = checkin(f, bad);
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    /* Another client is unaffected, and the revoked one keeps its row. */
    r = http_req(f, "GET", "/v1/models/rv/1", tok[1], NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(db_revoked_at(f, cid1), 0);
    /* Idempotent: a second revoke later keeps the first time. */
    fx_advance(f, 5000);
    assert_int_equal(revoke_ok(f, cid), at);
    assert_int_equal(db_revoked_at(f, cid), at);
    checkin_revoked(f, tok[0]);

    /* Reinstated: the token works again (past any pacing it was given before). */
    reinstate_ok(f, cid);
    assert_int_equal(db_revoked_at(f, cid), 0);
    fx_advance(f, 120000);
    checkin_ok(f, tok[0]);
    reinstate_ok(f, cid); /* already active */
    checkin_ok(f, tok[1]);
    /* Counted per route. */
    assert_true(metric_value(f, "flotilla_http_requests_total{route=\"admin_client_revoke\","
                                "code=\"200\"}") == 2);
    assert_true(metric_value(f, "flotilla_http_requests_total{route=\"admin_client_reinstate\","
                                "code=\"200\"}") == 2);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

/* A client revoked before it made any request (not cached) is refused on its first one, and
 * the refusal is remembered (the next request is a cache hit, still refused). */
static void test_revoke_uncached(void **state) {
    struct fx *f = *state;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    char cid[17];
    client_id_of(cid, tok[2]);
    revoke_ok(f, cid);
    double miss0 = metric_value(f, "flotilla_auth_cache_total{result=\"miss\"}");
    checkin_revoked(f, tok[2]);
    assert_true(metric_value(f, "flotilla_auth_cache_total{result=\"miss\"}") - miss0 == 1);
    double hits0 = metric_value(f, "flotilla_auth_cache_total{result=\"hit\"}");
    checkin_revoked(f, tok[2]);
    assert_true(metric_value(f, "flotilla_auth_cache_total{result=\"hit\"}") - hits0 == 1);
    /* Reinstating flips the cached mark too. */
    reinstate_ok(f, cid);
    checkin_ok(f, tok[2]);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

static void test_admin_only_and_bad_ids(void **state) {
    struct fx *f = *state;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    char cid[17];
    client_id_of(cid, tok[0]);
    const char *actions[] = {"revoke", "reinstate"};
    for (int i = 0; i < 2; i++) {
        /* No token, a client token (its own id), a wrong admin token: 401 as for erase. */
        struct resp r = admin_client(f, cid, actions[i], NULL);
        assert_error(&r, 401, "unauthorized");
        resp_free(&r);
        r = admin_client(f, cid, actions[i], tok[0]);
        assert_error(&r, 401, "unauthorized");
        resp_free(&r);
        r = admin_client(f, cid, actions[i], "fla_not-the-admin-token-0123456789");
        assert_error(&r, 401, "unauthorized");
        resp_free(&r);
        /* Unknown client, malformed ids. */
        r = admin_client(f, "0123456789abcdef", actions[i], ADMIN_TOKEN);
        assert_error(&r, 404, "not_found");
        resp_free(&r);
        r = admin_client(f, "0123456789ABCDEF", actions[i], ADMIN_TOKEN);
        assert_error(&r, 400, "invalid_parameter");
        resp_free(&r);
        r = admin_client(f, "abc", actions[i], ADMIN_TOKEN);
        assert_error(&r, 400, "invalid_parameter");
        resp_free(&r);
        char path[128];
        snprintf(path, sizeof(path), "/v1/admin/clients/%s/%s", cid, actions[i]);
        r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
        assert_error(&r, 405, "method_not_allowed");
        resp_free(&r);
    }
    /* None of that revoked anything. */
    assert_int_equal(db_revoked_at(f, cid), 0);
    checkin_ok(f, tok[0]);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

static void test_revocation_survives_restart(void **state) {
    struct fx *f = *state;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    char cid[17];
    client_id_of(cid, tok[1]);
    checkin_ok(f, tok[1]);
    int64_t at = revoke_ok(f, cid);
    fx_stop(f);
    fx_start(f);
    checkin_revoked(f, tok[1]);
    checkin_ok(f, tok[0]);
    /* Still the first time after the restart. */
    assert_int_equal(revoke_ok(f, cid), at);
    reinstate_ok(f, cid);
    fx_stop(f);
    fx_start(f);
    fx_advance(f, 120000);
    checkin_ok(f, tok[1]);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

/* A selected device revoked while its round runs can send nothing more: its task, status
 * and update requests are refused, while the other participants carry on. */
static void test_revoked_in_round(void **state) {
    struct fx *f = *state;
    struct tc c[3];
    setup_devices(f, &pc, c, 3);
    int64_t rid = 0;
    checkin_all(f, c, 3, &rid);
    char cid[17], path[128];
    client_id_of(cid, c[0].tok);
    revoke_ok(f, cid);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_error(&r, 401, "token_revoked");
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)rid);
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_error(&r, 401, "token_revoked");
    resp_free(&r);
    uint8_t body[64];
    size_t n = plain_update_body(body, rid, c[0].words, 1, 4);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", body, n, c[0].pid);
    assert_error(&r, 401, "token_revoked");
    resp_free(&r);
    fetch_tasks(f, c + 1, 2, rid); /* the others are unaffected */
    clients_free(c, 3);
}

/* Revoke and reinstate are audit-log events: one client_revoked and one client_reinstated
 * entry under the client's pseudonym (the one its erasure entry uses), none for the
 * repeated calls that change nothing; the exported bundle verifies with the trusted key. */
static void test_revocation_audited(void **state) {
    struct fx *f = *state;
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    char cid[17];
    client_id_of(cid, tok[0]);
    fx_advance(f, 1000);
    int64_t at = revoke_ok(f, cid);
    int64_t first = last_audit_index;
    assert_true(first >= 0);
    fx_advance(f, 1000);
    assert_int_equal(revoke_ok(f, cid), at); /* no change: not logged */
    assert_int_equal(last_audit_index, -1);
    reinstate_ok(f, cid);
    assert_int_equal(last_audit_index, first + 1);
    reinstate_ok(f, cid); /* no change: not logged */
    assert_int_equal(last_audit_index, -1);
    /* Erasure names the pseudonym; the revocation entries must use the same one. */
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    struct resp r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    char nym[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    snprintf(nym, sizeof(nym), "%s", json_string_value(json_object_get(j, "pseudonym")));
    assert_int_equal(strlen(nym), 64);
    json_decref(j);
    resp_free(&r);

    fl_store_audit_bundle *b = audit_bundle_verified(f, &r);
    int revoked = 0, reinstated = 0, erased = 0;
    for (size_t i = 0; i < fl_store_audit_bundle_entry_count(b); i++) {
        size_t n = 0;
        const char *p = fl_store_audit_bundle_entry(b, i, &n);
        json_t *e = json_loadb(p, n, 0, NULL);
        assert_non_null(e);
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *client = json_string_value(json_object_get(e, "client"));
        for (size_t k = 0; k + 16 <= n; k++) /* never the raw id */
            assert_false(memcmp(p + k, cid, 16) == 0);
        if (client && strcmp(client, nym) == 0) {
            if (strcmp(type, "client_revoked") == 0) {
                revoked++;
                assert_int_equal(json_integer_value(json_object_get(e, "revoked_at")), at);
                assert_string_equal(json_string_value(json_object_get(e, "population")), "rv");
            }
            reinstated += strcmp(type, "client_reinstated") == 0;
            erased += strcmp(type, "erasure") == 0;
        }
        json_decref(e);
    }
    assert_int_equal(revoked, 1);
    assert_int_equal(reinstated, 1);
    assert_int_equal(erased, 1);
    fl_store_audit_bundle_close(b);
    resp_free(&r);
    for (int i = 0; i < 3; i++)
        free(tok[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_revoke_cached_and_reinstate, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revoke_uncached, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_admin_only_and_bad_ids, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revocation_survives_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revoked_in_round, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revocation_audited, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
