/* A device's round outcome after a coordinator restart (docs/protocol.md 5.3): the finished
 * rounds kept in memory are gone, and the status poll falls back to storage
 * (coordinator/src/api.c fl__coord_status_stored: the round record and the caller's
 * participant row, fl_store_participant_get).
 *
 * Round 1 completes with devices A, B, C; round 2 is running with D, E, F when the
 * coordinator stops (abandoned "coordinator shutting down"). After the restart on the same
 * database: A's status poll of round 1 answers 200 with state completed, 3 participants and
 * the model version it produced; D's poll of round 1 gets 403 not_a_participant; D's poll
 * of round 2 answers abandoned with the reason and its 3 selected; a round that does not
 * exist stays 410; A's late update to round 1 and phase-result reads of a round not in
 * memory keep their 410. Then round 3 has only A when the coordinator stops while it is
 * still forming: after another restart A reads it abandoned (its selection was recorded
 * with the abandonment), and B, not recorded in a round that never started, keeps the 410
 * (after a crash the selection of a forming round is not stored, so such a caller cannot
 * be told apart from a participant). Before the fallback every one of these polls after a
 * restart got 410 "round N is not open".
 *
 * The Idempotency-Key is checked against the participation hash storage keeps for each
 * participant row (schema version 6): after a restart the key of that selection answers,
 * and any other key (a well-formed one never handed out, another round's key of the same
 * client, another client's, the right one in capitals or cut short) gets 403
 * not_a_participant, for rows written at round start, completion, drop and the abandonment
 * of a forming round alike; a row without a hash (written before the migration, simulated
 * by nulling the column) answers on the client id alone; erasure deletes the hash with the
 * row. */
#include <ctype.h>

#include <sodium.h>

#include "coord_testkit.h"

enum { N = 6, T = 3 };

/* GET /v1/rounds/{rid}/status with c's token and key as the Idempotency-Key (NULL: none). */
static struct resp status_key(struct fx *f, struct tc *c, int64_t rid, const char *key) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)rid);
    return http_req(f, "GET", path, c->tok, NULL, NULL, 0, key);
}

static struct resp status_of(struct fx *f, struct tc *c, int64_t rid) {
    return status_key(f, c, rid, c->pid);
}

/* Asserts 403 not_a_participant for c's poll of round rid with key. */
static void assert_key_refused(struct fx *f, struct tc *c, int64_t rid, const char *key) {
    struct resp r = status_key(f, c, rid, key);
    if (r.status != 403)
        fprintf(stderr, "round %lld, key %s: %ld %s\n", (long long)rid, key, r.status,
                r.body ? r.body : "");
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
}

/* Asserts 200 for c's poll of round rid with key. */
static void assert_key_answers(struct fx *f, struct tc *c, int64_t rid, const char *key) {
    struct resp r = status_key(f, c, rid, key);
    if (r.status != 200)
        fprintf(stderr, "round %lld, key %s: %ld %s\n", (long long)rid, key, r.status,
                r.body ? r.body : "");
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* Rows of round rid whose participation hash is the documented one of key
 * (docs/protocol.md 6): SHA-256("flotilla/participation-id/v1" NUL || key). */
static int64_t rows_with_hash_of(struct fx *f, int64_t rid, const char *key) {
    static const char label[] = "flotilla/participation-id/v1";
    uint8_t in[sizeof(label) + 32], h[32];
    char hex[65], q[256];
    assert_int_equal(strlen(key), 32);
    memcpy(in, label, sizeof(label));
    memcpy(in + sizeof(label), key, 32);
    crypto_hash_sha256(h, in, sizeof(in));
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM round_participants WHERE round_id = %lld AND "
             "participation_hash = x'%s'",
             (long long)rid, hex);
    return db_int(f, q);
}

/* Asserts a 200 outcome with state, participants, new_model_version (0: null) and reason
 * (NULL: null). */
static void assert_outcome(struct fx *f, struct tc *c, int64_t rid, const char *state,
                           int64_t participants, int64_t version, const char *reason) {
    struct resp r = status_of(f, c, rid);
    if (r.status != 200)
        fprintf(stderr, "status of round %lld: %ld %s\n", (long long)rid, r.status,
                r.body ? r.body : "");
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "round_id")), rid);
    assert_string_equal(json_string_value(json_object_get(j, "state")), state);
    assert_int_equal(json_integer_value(json_object_get(j, "participants")), participants);
    json_t *v = json_object_get(j, "new_model_version");
    if (version)
        assert_int_equal(json_integer_value(v), version);
    else
        assert_true(json_is_null(v));
    json_t *why = json_object_get(j, "reason");
    if (reason)
        assert_string_equal(json_string_value(why), reason);
    else
        assert_true(json_is_null(why));
    assert_int_equal(json_object_size(j), 5);
    json_decref(j);
    resp_free(&r);
}

static void test_outcome_after_restart(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {
        .name = "hrs", .target = T, .min = 2, .secagg = false, .mode = "none", .bits = 32};
    struct tc c[N]; /* A, B, C = c[0..3); D, E, F = c[3..6) */
    setup_devices(f, &pc, c, N);
    /* Round 1: A, B, C post; it completes. */
    int64_t r1 = 0;
    checkin_all(f, c, T, &r1);
    fetch_tasks(f, c, T, r1);
    post_updates(f, c, T, r1);
    json_t *st = round_status(f, &c[0], r1);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v1 = json_integer_value(json_object_get(st, "new_model_version"));
    assert_true(v1 > 0);
    assert_int_equal(json_integer_value(json_object_get(st, "participants")), T);
    json_decref(st);
    fx_advance(f, 61 * 1000);
    /* Round 2: D, E, F are training when the coordinator stops. */
    int64_t r2 = 0;
    checkin_all(f, c + T, T, &r2);
    fetch_tasks(f, c + T, T, r2);
    assert_true(r2 > r1);
    fx_stop(f);
    fx_start(f);
    /* From storage: the outcome for participants, 403 for others. */
    for (int i = 0; i < T; i++)
        assert_outcome(f, &c[i], r1, "completed", T, v1, NULL);
    struct resp r = status_of(f, &c[T], r1);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    assert_outcome(f, &c[T], r2, "abandoned", T, 0, "coordinator shutting down");
    r = status_of(f, &c[0], r2);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    /* ?wait= on an ended round answers at once, as for a kept one. */
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=30", (long long)r1);
    r = http_req(f, "GET", path, c[1].tok, NULL, NULL, 0, c[1].pid);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* The Idempotency-Key is still required. */
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)r1);
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, NULL);
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    /* No such round: 410 as before. */
    r = status_of(f, &c[0], r2 + 1000);
    assert_error(&r, 410, "round_closed");
    assert_non_null(strstr(r.body, "is not open"));
    resp_free(&r);
    /* Late posts and phase results of a round only in storage keep their 410. */
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)r1);
    uint8_t body[16 + 4 * 1024];
    size_t bl = plain_update_body(body, r1, c[0].words, c[0].task.vec_len, 4);
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", body, bl, c[0].pid);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/unmask/result", (long long)r1);
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    /* Round 3: only A, still forming when the coordinator stops. */
    fx_advance(f, 61 * 1000);
    int64_t r3 = 0;
    checkin_all(f, c, 1, &r3);
    assert_true(r3 > r2);
    fx_stop(f);
    fx_start(f);
    assert_outcome(f, &c[0], r3, "abandoned", 1, 0, "coordinator shutting down");
    r = status_of(f, &c[1], r3); /* never started, B not recorded: as before */
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    /* The older rounds still answer after a second restart. */
    assert_outcome(f, &c[2], r1, "completed", T, v1, NULL);
    assert_outcome(f, &c[5], r2, "abandoned", T, 0, "coordinator shutting down");
    clients_free(c, N);
}

/* A dropped participant reads the outcome from storage too: round 1 closes at its update
 * deadline with 2 of 3, and after a restart the silent device gets completed with 2
 * participants (the completed count), as the kept round told it before the restart. */
static void test_dropped_after_restart(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {
        .name = "hrd", .target = T, .min = 2, .secagg = false, .mode = "none", .bits = 32};
    struct tc c[T];
    setup_devices(f, &pc, c, T);
    int64_t r1 = 0;
    checkin_all(f, c, T, &r1);
    fetch_tasks(f, c, T, r1);
    post_updates(f, c, 2, r1);
    atomic_store(&f->now_ms, c[0].task.dl[2]);
    fx_advance(f, 1000); /* the update deadline: closes with 2 of 3 */
    json_t *st = round_status(f, &c[2], r1);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v1 = json_integer_value(json_object_get(st, "new_model_version"));
    assert_int_equal(json_integer_value(json_object_get(st, "participants")), 2);
    json_decref(st);
    fx_stop(f);
    fx_start(f);
    for (int i = 0; i < T; i++)
        assert_outcome(f, &c[i], r1, "completed", 2, v1, NULL);
    /* The dropped device's row (written at completion) checks its key too. */
    assert_key_refused(f, &c[2], r1, c[0].pid);
    clients_free(c, T);
}

/* Keys after a restart: round 1 completes with A, B, C; round 2 with the same three is
 * running when the coordinator stops; round 3 has only A, still forming, at the next stop.
 * Each device's key of each round answers that round only. */
static void test_key_checked_after_restart(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {
        .name = "hrk", .target = T, .min = 2, .secagg = false, .mode = "none", .bits = 32};
    struct tc c[T];
    char k1[T][40], k2[T][40];
    setup_devices(f, &pc, c, T);
    int64_t r1 = 0, r2 = 0, r3 = 0;
    checkin_all(f, c, T, &r1);
    fetch_tasks(f, c, T, r1);
    post_updates(f, c, T, r1);
    json_t *st = round_status(f, &c[0], r1);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    for (int i = 0; i < T; i++)
        memcpy(k1[i], c[i].pid, sizeof(k1[i]));
    fx_advance(f, 61 * 1000);
    checkin_all(f, c, T, &r2);
    fetch_tasks(f, c, T, r2);
    for (int i = 0; i < T; i++) {
        memcpy(k2[i], c[i].pid, sizeof(k2[i]));
        assert_string_not_equal(k1[i], k2[i]);
    }
    fx_stop(f);
    /* Every row carries the hash of its own key, none the plain key. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM round_participants WHERE "
                               "participation_hash IS NULL"),
                     0);
    for (int i = 0; i < T; i++) {
        assert_int_equal(rows_with_hash_of(f, r1, k1[i]), 1);
        assert_int_equal(rows_with_hash_of(f, r2, k2[i]), 1);
        assert_int_equal(rows_with_hash_of(f, r1, k2[i]), 0);
    }
    fx_start(f);
    /* The key of the selection answers... */
    assert_key_answers(f, &c[0], r1, k1[0]);
    assert_key_answers(f, &c[0], r2, k2[0]);
    /* ...another round's key of the same client does not, nor one never handed out,
     * another client's, or the right one in capitals or cut short... */
    assert_key_refused(f, &c[0], r1, k2[0]);
    assert_key_refused(f, &c[0], r2, k1[0]);
    assert_key_refused(f, &c[0], r1, "0123456789abcdef0123456789abcdef");
    assert_key_refused(f, &c[0], r1, k1[1]);
    char upper[40], cut[40];
    snprintf(upper, sizeof(upper), "%s", k1[0]);
    for (size_t i = 0; upper[i]; i++)
        upper[i] = (char)toupper((unsigned char)upper[i]);
    assert_string_not_equal(upper, k1[0]);
    assert_key_refused(f, &c[0], r1, upper);
    snprintf(cut, sizeof(cut), "%.31s", k1[0]);
    assert_key_refused(f, &c[0], r1, cut);
    /* ...and a missing key is still 400. */
    struct resp r = status_key(f, &c[0], r1, NULL);
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    for (int i = 1; i < T; i++) {
        assert_key_answers(f, &c[i], r1, k1[i]);
        assert_key_refused(f, &c[i], r1, k2[i]);
    }
    /* Round 3: A alone, forming at the stop (recorded with the abandonment). */
    fx_advance(f, 61 * 1000);
    checkin_all(f, c, 1, &r3);
    fx_stop(f);
    assert_int_equal(rows_with_hash_of(f, r3, c[0].pid), 1);
    fx_start(f);
    assert_key_answers(f, &c[0], r3, c[0].pid);
    assert_key_refused(f, &c[0], r3, k1[0]);
    assert_key_refused(f, &c[0], r1, c[0].pid);
    clients_free(c, T);
}

/* Rows without a hash (written before schema version 6; here the column is nulled for
 * round 1) answer on the client id alone, any key; round 2's rows still check theirs. The
 * client's erasure deletes its rows, hashes included. */
static void test_key_rows_without_hash(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {
        .name = "hrn", .target = T, .min = 2, .secagg = false, .mode = "none", .bits = 32};
    struct tc c[T];
    char k1[40];
    setup_devices(f, &pc, c, T);
    int64_t r1 = 0, r2 = 0;
    checkin_all(f, c, T, &r1);
    fetch_tasks(f, c, T, r1);
    post_updates(f, c, T, r1);
    memcpy(k1, c[0].pid, sizeof(k1));
    fx_advance(f, 61 * 1000);
    checkin_all(f, c, T, &r2);
    fetch_tasks(f, c, T, r2);
    fx_stop(f);
    char q[160];
    snprintf(q, sizeof(q),
             "UPDATE round_participants SET participation_hash = NULL WHERE "
             "round_id = %lld",
             (long long)r1);
    db_exec(f, q);
    fx_start(f);
    assert_key_answers(f, &c[0], r1, k1);
    assert_key_answers(f, &c[0], r1, c[0].pid); /* round 2's key */
    assert_key_answers(f, &c[0], r1, "0123456789abcdef0123456789abcdef");
    assert_key_answers(f, &c[0], r1, "x"); /* any value, as before the migration */
    struct resp r = status_key(f, &c[0], r1, NULL);
    assert_error(&r, 400, "missing_field");
    resp_free(&r);
    r = status_of(f, &c[0], 999999); /* no such round: still 410 */
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    assert_key_refused(f, &c[0], r2, k1);
    assert_key_answers(f, &c[0], r2, c[0].pid);
    /* Erasure takes A's rows with their hashes; B's stay. */
    char cid[17], path[96];
    memcpy(cid, c[0].tok + 4, 16);
    cid[16] = '\0';
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(rows_with_hash_of(f, r2, c[0].pid), 0);
    assert_int_equal(rows_with_hash_of(f, r2, c[1].pid), 1);
    snprintf(q, sizeof(q), "SELECT count(*) FROM round_participants WHERE client_id = '%s'", cid);
    assert_int_equal(db_int(f, q), 0);
    clients_free(c, T);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_outcome_after_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_dropped_after_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_key_checked_after_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_key_rows_without_hash, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
