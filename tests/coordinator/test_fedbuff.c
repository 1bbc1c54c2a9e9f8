/* Asynchronous buffered aggregation (FedBuff, docs/protocol.md section 5.4) over HTTP
 * against the in-process coordinator: devices check in at any time and get the current
 * model version; each update is weighted by 1/sqrt(1 + staleness) into a buffer of K = 3;
 * every third update commits a new model version (exactly the expected weights), devices
 * still training carry over to the next buffer, too-stale updates get 410 stale_update,
 * replays are idempotent, expired participations free their slot, and the
 * max_concurrency limit answers retry. */
#include <math.h>

#include "coord_testkit.h"

enum { NDEV = 8, K = 3 };

/* The round header of a plain update body (docs/protocol.md section 5.2). */
static void round_header(uint8_t *out, int64_t rid) {
    memcpy(out, "FLUP\x01\0\0\0", 8);
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)rid >> (8 * b));
}

static void post_update(struct fx *f, struct tc *c, long want, const char *code) {
    uint8_t body[16 + 4 * 1024];
    size_t L = c->task.vec_len;
    round_header(body, c->task.rid);
    for (size_t j = 0; j < L; j++)
        for (int b = 0; b < 4; b++)
            body[16 + j * 4 + b] = (uint8_t)(c->words[j] >> (8 * b));
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c->task.rid);
    struct resp r = http_req(f, "POST", path, c->tok, "application/octet-stream", body,
                             16 + L * 4, c->pid);
    if (code)
        assert_error(&r, want, code);
    else if (r.status != want)
        fprintf(stderr, "update: %ld %s\n", r.status, r.body);
    assert_int_equal(r.status, want);
    resp_free(&r);
}

/* Checks device i in; returns true when selected (task fetched and update encoded). */
static bool checkin_one(struct fx *f, struct tc *c, int i) {
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true},\"capabilities\":{\"secagg\":false}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", c->tok, ok);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    bool sel = strcmp(json_string_value(json_object_get(j, "status")), "selected") == 0;
    if (sel) {
        snprintf(c->pid, sizeof(c->pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        int64_t rid = json_integer_value(json_object_get(j, "round_id"));
        char path[128];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
        struct resp t = http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
        assert_int_equal(t.status, 200);
        parse_task(&t, &c->task);
        resp_free(&t);
        assert_int_equal(c->task.rid, rid);
        assert_string_equal(c->task.kind, "buffered");
        assert_false(c->task.secagg);
        encode(c, i);
    } else {
        assert_string_equal(json_string_value(json_object_get(j, "reason")), "round_full");
        /* Pace steering: it may come back after retry_after_s (the test moves the clock). */
        fx_advance(f, (json_integer_value(json_object_get(j, "retry_after_s")) + 1) * 1000);
    }
    json_decref(j);
    resp_free(&r);
    return sel;
}

/* The server's arithmetic for one buffer: contributions in arrival order, each with the
 * staleness it had, then w + 1.0 * delta in float. */
static void expected_step(const float *base, struct tc **order, const int64_t *stale, int n,
                          float *out) {
    double num[D] = {0};
    uint64_t mod = (uint64_t)1 << order[0]->task.bits, half = mod >> 1;
    for (int i = 0; i < n; i++) {
        double fw = 1.0 / pow(1.0 + (double)stale[i], 0.5);
        for (int j = 0; j < D; j++) {
            uint64_t x = order[i]->words[j];
            int64_t z = x >= half ? -(int64_t)(mod - x) : (int64_t)x;
            num[j] += fw * (double)z;
        }
    }
    for (int j = 0; j < D; j++) {
        float d = (float)(num[j] * order[0]->task.gran / (double)n);
        out[j] = (float)(base[j] + 1.0 * (double)d);
    }
}

static int64_t current_version(struct fx *f, const char *pop) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", pop);
    struct resp r = http_json(f, "GET", path, ADMIN_TOKEN, NULL);
    json_t *j = body_json(&r);
    int64_t v = json_integer_value(json_object_get(j, "model_version"));
    json_decref(j);
    resp_free(&r);
    return v;
}

static void test_fedbuff_async(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fb", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .strategy_extra =
                            "\"buffer_size\":3,\"max_concurrency\":4,\"max_staleness\":1,"
                            "\"staleness_alpha\":0.5"};
    char *tok[NDEV];
    setup_population(f, &pc, tok, NDEV);
    struct tc c[NDEV];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < NDEV; i++)
        c[i].tok = tok[i];
    float v1[D], v2[D], v3[D], w[D], b[2], expect[D];
    for (int j = 0; j < D; j++)
        v1[j] = base_w(j);
    assert_int_equal(current_version(f, "fb"), 1);

    /* Four devices train on version 1; a fifth is over max_concurrency. */
    for (int i = 0; i < 4; i++) {
        assert_true(checkin_one(f, &c[i], i));
        assert_int_equal(c[i].task.model_version, 1);
    }
    assert_false(checkin_one(f, &c[4], 4));
    /* A re-check-in of a training device returns the same participation. */
    char pid0[40];
    snprintf(pid0, sizeof(pid0), "%s", c[0].pid);
    assert_true(checkin_one(f, &c[0], 0));
    assert_string_equal(c[0].pid, pid0);

    /* Malformed: short body and a weight other than 1 are 400 and change nothing. */
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c[0].task.rid);
    struct resp r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", "abcd", 4,
                             c[0].pid);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    uint64_t wsave = c[0].words[D];
    c[0].words[D] = 2;
    post_update(f, &c[0], 400, "invalid_message");
    c[0].words[D] = wsave;

    /* Three updates (staleness 0) make version 2; nothing before the third. */
    post_update(f, &c[0], 202, NULL);
    post_update(f, &c[1], 202, NULL);
    assert_int_equal(current_version(f, "fb"), 1);
    post_update(f, &c[2], 202, NULL);
    assert_int_equal(current_version(f, "fb"), 2);
    struct tc *o1[K] = {&c[0], &c[1], &c[2]};
    int64_t s0[K] = {0, 0, 0};
    expected_step(v1, o1, s0, K, expect);
    fetch_model(f, &c[0], "fb", 2, v2, b);
    assert_memory_equal(v2, expect, sizeof(v2));
    assert_float_equal(b[0], 3.0f, 0);
    /* The contributor's status names the version its buffer produced. */
    json_t *st = round_status(f, &c[1], c[1].task.rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(st, "new_model_version")), 2);
    json_decref(st);
    /* Replays after the commit: same bytes 200 + Idempotent-Replayed, others 409. */
    char path2[128];
    snprintf(path2, sizeof(path2), "/v1/rounds/%lld/update", (long long)c[2].task.rid);
    {
        uint8_t body[16 + 4 * (D + 1)];
        round_header(body, c[2].task.rid);
        for (size_t j = 0; j < D + 1; j++)
            for (int k = 0; k < 4; k++)
                body[16 + j * 4 + k] = (uint8_t)(c[2].words[j] >> (8 * k));
        r = http_req(f, "POST", path2, c[2].tok, "application/octet-stream", body, sizeof(body),
                     c[2].pid);
        assert_int_equal(r.status, 200);
        char hv[16];
        assert_non_null(header_in(&r, "Idempotent-Replayed", hv, sizeof(hv)));
        resp_free(&r);
        body[0] ^= 1;
        r = http_req(f, "POST", path2, c[2].tok, "application/octet-stream", body, sizeof(body),
                     c[2].pid);
        assert_error(&r, 409, "already_submitted");
        resp_free(&r);
    }

    /* Device 3 still trains on version 1 (carried into the new buffer); devices 4, 5 and
     * 0 (again) start on version 2. */
    assert_true(checkin_one(f, &c[4], 4));
    assert_true(checkin_one(f, &c[5], 5));
    assert_true(checkin_one(f, &c[0], 0));
    assert_int_equal(c[4].task.model_version, 2);
    assert_int_equal(c[0].task.model_version, 2);
    assert_false(checkin_one(f, &c[6], 6)); /* 4 training: 3, 4, 5, 0 */
    /* Version 3 = v2 + (z3 / sqrt(2) + z4 + z5) * gamma / 3. */
    post_update(f, &c[3], 202, NULL);
    post_update(f, &c[4], 202, NULL);
    post_update(f, &c[5], 202, NULL);
    assert_int_equal(current_version(f, "fb"), 3);
    struct tc *o2[K] = {&c[3], &c[4], &c[5]};
    int64_t s2[K] = {1, 0, 0};
    expected_step(v2, o2, s2, K, expect);
    fetch_model(f, &c[0], "fb", 3, v3, b);
    assert_memory_equal(v3, expect, sizeof(v3));

    /* Version 4 from devices on version 3, then device 0's update (version 2, staleness 2
     * > max_staleness 1) is refused with 410 stale_update and changes nothing. */
    assert_true(checkin_one(f, &c[6], 6));
    assert_true(checkin_one(f, &c[7], 7));
    assert_true(checkin_one(f, &c[1], 1));
    post_update(f, &c[6], 202, NULL);
    post_update(f, &c[7], 202, NULL);
    post_update(f, &c[1], 202, NULL);
    assert_int_equal(current_version(f, "fb"), 4);
    post_update(f, &c[0], 410, "stale_update");
    assert_int_equal(current_version(f, "fb"), 4);
    r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_non_null(strstr(r.body, "flotilla_updates_stale_rejected_total 1\n"));
    resp_free(&r);

    /* A participation that misses its deadline frees its slot; its late update is 410. */
    assert_true(checkin_one(f, &c[2], 2));
    fx_advance(f, 61 * 1000);
    post_update(f, &c[2], 410, "round_closed");

    /* Storage: three buffers completed with versions 2..4, no ledger, and the model
     * lineage is linear. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds WHERE state = 2"), 3);
    assert_int_equal(db_int(f, "SELECT max(result_version) FROM rounds"), 4);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM round_participants WHERE state = 2"), 9);
    (void)w;
    clients_free(c, NDEV);
}

/* Configuration refusals for the asynchronous mode. */
static void test_fedbuff_config(void **state) {
    struct fx *f = *state;
    const char *bad[] = {
        /* distributed DP needs secure aggregation (central DP: test_fedbuff_dp.c) */
        "{\"name\":\"x\",\"allowed_regions\":[\"*\"],\"secagg\":{\"enabled\":false},"
        "\"strategy\":{\"name\":\"fedbuff\"},\"privacy\":{\"mode\":\"distributed\"}}",
        "{\"name\":\"x\",\"allowed_regions\":[\"*\"],\"secagg\":{\"enabled\":false},"
        "\"strategy\":{\"name\":\"fedbuff\",\"buffer_size\":0}}",
        "{\"name\":\"x\",\"allowed_regions\":[\"*\"],\"secagg\":{\"enabled\":false},"
        "\"strategy\":{\"name\":\"fedbuff\",\"max_staleness\":-1}}",
        "{\"name\":\"x\",\"allowed_regions\":[\"*\"],\"secagg\":{\"enabled\":false},"
        "\"strategy\":{\"name\":\"fedbuff\",\"max_concurrency\":100001}}",
        NULL};
    for (int i = 0; bad[i]; i++) {
        struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, bad[i]);
        assert_error(&r, 400, "invalid_field");
        resp_free(&r);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM populations"), 0);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fedbuff_async, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedbuff_config, fx_setup, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
