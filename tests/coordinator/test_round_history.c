/* Finished rounds kept in memory (coordinator/src/round.c keep_finished, docs/protocol.md
 * 5.3): a device slower than whole later rounds still reads its round's outcome.
 *
 * Round 1 selects three devices; two post their updates and the third is silent until the
 * update deadline closes the round with two. Three more rounds then run with other devices.
 * The slow device's late update gets 410 round_closed ("has ended"), and its status poll
 * and the admin view of round 1 still answer from memory: 200 with the outcome (completed,
 * 2 participants, the model version it produced) and the per-phase counts. One round later
 * round 1 is past FL__COORD_ROUNDS_KEPT (4 finished rounds): its status poll is answered
 * from storage (api.c fl__coord_status_stored) with the same outcome, a device of another
 * round still gets 403, and the late update gets 410 "is not open". Before the kept rounds,
 * only the current and the last round answered: the poll after three later rounds got 410
 * "round 1 is not open"; before the storage fallback, so did the poll past the kept ones.
 * (After a restart: test_round_history_restart.c.)
 *
 * The same for secure rounds: the unmask result of a kept round is its outcome, an earlier
 * phase's result is gone, and one round past the kept ones the unmask result gets 410 while
 * the status poll still answers from storage. */
#include "coord_testkit.h"

/* Test-only (coord_internal.h): kept rounds' participant slots naming client_id. */
size_t fl__coord_debug_kept_slots(fl_coord *co, const char *client_id, size_t *with_data);

/* N devices, T per round; KEPT is FL__COORD_ROUNDS_KEPT (coord_internal.h): finished rounds
 * kept per population, the last one included. */
enum { N = 6, T = 3, KEPT = 4 };

/* The round of devices c[0..T): every one posts its update; the round completes at once. */
static int64_t run_round(struct fx *f, struct tc *c) {
    int64_t rid = 0;
    checkin_all(f, c, T, &rid);
    fetch_tasks(f, c, T, rid);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[16 + 4 * 1024];
    for (int i = 0; i < T; i++) {
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        struct resp r =
            http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    fx_advance(f, 61 * 1000); /* past the devices' retry_after_s */
    return rid;
}

static struct resp status_of(struct fx *f, struct tc *c, int64_t rid) {
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)rid);
    return http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
}

static void test_slow_device_reads_old_outcome(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {
        .name = "hist", .target = T, .min = 2, .secagg = false, .mode = "none", .bits = 32};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    /* Round 1: c[0], c[1] post; c[2] trains too long. */
    int64_t r1 = 0;
    checkin_all(f, c, T, &r1);
    fetch_tasks(f, c, T, r1);
    char upath[96];
    snprintf(upath, sizeof(upath), "/v1/rounds/%lld/update", (long long)r1);
    uint8_t body[16 + 4 * 1024];
    size_t bl;
    for (int i = 0; i < 2; i++) {
        bl = plain_update_body(body, r1, c[i].words, c[i].task.vec_len, 4);
        struct resp r =
            http_req(f, "POST", upath, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    atomic_store(&f->now_ms, c[0].task.dl[2]);
    fx_advance(f, 1000); /* the update deadline: closes with 2 of 3 */
    json_t *st = round_status(f, &c[0], r1);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v1 = json_integer_value(json_object_get(st, "new_model_version"));
    assert_true(v1 > 0);
    json_decref(st);
    fx_advance(f, 61 * 1000);
    /* KEPT - 1 later rounds (c[3..6)): round 1 is now the oldest of the KEPT kept. */
    int64_t later[KEPT];
    char pid0[sizeof(c[T].pid)]; /* c[T]'s participation in later[0] */
    for (int k = 0; k < KEPT - 1; k++) {
        later[k] = run_round(f, c + T);
        assert_true(later[k] > r1);
        if (k == 0)
            memcpy(pid0, c[T].pid, sizeof(pid0));
    }
    /* The slow device's update: the round has ended (not "is not open"). */
    bl = plain_update_body(body, r1, c[2].words, c[2].task.vec_len, 4);
    struct resp r =
        http_req(f, "POST", upath, c[2].tok, "application/octet-stream", body, bl, c[2].pid);
    assert_error(&r, 410, "round_closed");
    assert_non_null(strstr(r.body, "has ended"));
    resp_free(&r);
    /* Its status poll and a peer's: the outcome of round 1. */
    for (int i = 0; i < 3; i += 2) {
        r = status_of(f, &c[i], r1);
        if (r.status != 200)
            fprintf(stderr, "status of round %lld: %ld %s\n", (long long)r1, r.status,
                    r.body ? r.body : "");
        assert_int_equal(r.status, 200);
        st = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
        assert_int_equal(json_integer_value(json_object_get(st, "round_id")), r1);
        assert_int_equal(json_integer_value(json_object_get(st, "participants")), 2);
        assert_int_equal(json_integer_value(json_object_get(st, "new_model_version")), v1);
        json_decref(st);
        resp_free(&r);
    }
    /* Still only participants: a device of another round is refused. */
    r = status_of(f, &c[3], r1);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    /* The admin view still has round 1's live counts: two updates, one dropped. */
    json_t *ar = admin_round(f, r1);
    json_t *pcnt = json_object_get(ar, "phase_counts");
    assert_non_null(pcnt);
    assert_int_equal(json_integer_value(json_object_get(pcnt, "masked")), 2);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(ar, "dropped_by_phase"), "masked")), 1);
    json_decref(ar);
    /* One more later round: round 1 is no longer kept; its outcome comes from storage. */
    later[KEPT - 1] = run_round(f, c + T);
    for (int i = 0; i < 3; i += 2) {
        r = status_of(f, &c[i], r1);
        assert_int_equal(r.status, 200);
        st = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
        assert_int_equal(json_integer_value(json_object_get(st, "round_id")), r1);
        assert_int_equal(json_integer_value(json_object_get(st, "participants")), 2);
        assert_int_equal(json_integer_value(json_object_get(st, "new_model_version")), v1);
        assert_true(json_is_null(json_object_get(st, "reason")));
        json_decref(st);
        resp_free(&r);
    }
    r = status_of(f, &c[3], r1);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    /* The late update: the round is no longer held, as before the storage fallback. */
    r = http_req(f, "POST", upath, c[2].tok, "application/octet-stream", body, bl, c[2].pid);
    assert_error(&r, 410, "round_closed");
    assert_non_null(strstr(r.body, "is not open"));
    resp_free(&r);
    ar = admin_round(f, r1);
    assert_true(json_is_null(json_object_get(ar, "phase_counts")));
    json_decref(ar);
    /* The oldest of the later rounds is still kept (asked with that participation's key). */
    memcpy(c[T].pid, pid0, sizeof(pid0));
    st = round_status(f, &c[T], later[0]);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    clients_free(c, N);
}

/* A secure population of S-device rounds (complete graph), and one of its rounds run by
 * devices g[0..S) to completion; the clock then moves past their retry_after_s. */
enum { S = 4 };

static void secure_devices(struct fx *f, const char *name, struct tc *c, int n) {
    struct popcfg pc = {.name = name,
                        .target = S,
                        .min = 3,
                        .secagg = true,
                        .neighbors = 0,
                        .mode = "none",
                        .bits = 32};
    setup_devices(f, &pc, c, n);
}

static int64_t secure_round(struct fx *f, struct tc *g) {
    int64_t rid = 0;
    checkin_all(f, g, S, &rid);
    fetch_tasks(f, g, S, rid);
    json_t *o = run_secagg(f, g, S, rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    json_decref(o);
    fx_advance(f, 61 * 1000);
    return rid;
}

/* Secure rounds: the unmask result of a kept round is its outcome, as for the current one
 * (its secagg state and phase results were freed when it was retired). */
static void test_secagg_outcome_kept(void **state) {
    struct fx *f = *state;
    struct tc c[2 * S];
    secure_devices(f, "hsa", c, 2 * S);
    int64_t rid[KEPT + 1];
    char pid0[sizeof(c[0].pid)];
    for (int k = 0; k <= KEPT; k++) {
        rid[k] = secure_round(f, k == 0 ? c : c + S); /* round 1: c[0..S); later: c[S..2S) */
        if (k == 0)
            memcpy(pid0, c[0].pid, sizeof(pid0));
        if (k == KEPT - 1) {
            /* Round 1 is the oldest kept: its unmask result is still the outcome. */
            struct resp r = get_result(f, &c[0], rid[0], "unmask", 0);
            assert_int_equal(r.status, 200);
            json_t *j = body_json(&r);
            assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
            assert_int_equal(json_integer_value(json_object_get(j, "participants")), S);
            json_decref(j);
            resp_free(&r);
            /* An earlier phase's result is gone (freed when the round was retired). */
            r = get_result(f, &c[0], rid[0], "masked", 0);
            assert_error(&r, 410, "round_closed");
            resp_free(&r);
        }
    }
    /* KEPT later rounds: round 1 is no longer kept. */
    assert_memory_equal(c[0].pid, pid0, sizeof(pid0));
    struct resp r = get_result(f, &c[0], rid[0], "unmask", 0);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    /* The status poll still answers, from storage. */
    json_t *o = round_status(f, &c[0], rid[0]);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), S);
    assert_true(json_integer_value(json_object_get(o, "new_model_version")) > 0);
    json_decref(o);
    clients_free(c, 2 * S);
}

/* Kept rounds lose an erased client: once round 1 has ended and is kept, erasing one of
 * its devices wipes that device's id, participation id, hashes and phase results from the
 * kept round (coordinator/src/round.c fl__coord_rounds_forget_client), while the round's
 * counts and the other devices' view of it stay as they were. */
static void test_erase_leaves_kept_rounds(void **state) {
    struct fx *f = *state;
    struct tc c[2 * S];
    secure_devices(f, "her", c, 2 * S);
    int64_t rid[2];
    for (int k = 0; k < 2; k++)
        rid[k] = secure_round(f, c + k * S); /* round 1: c[0..S); round 2: c[S..2S) */
    char cid[17];
    memcpy(cid, c[0].tok + 4, 16);
    cid[16] = '\0';
    size_t data = 0;
    assert_int_equal(fl__coord_debug_kept_slots(f->co, cid, &data), 1);
    assert_int_equal(data, 1);
    assert_int_equal(fl__coord_debug_kept_slots(f->co, "", NULL), 0);
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    struct resp r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* No kept round names it; its slot in round 1 holds nothing of what it sent. */
    assert_int_equal(fl__coord_debug_kept_slots(f->co, cid, NULL), 0);
    assert_int_equal(fl__coord_debug_kept_slots(f->co, "", &data), 1);
    assert_int_equal(data, 0);
    /* The others still read round 1's outcome, and its counts are unchanged. */
    for (int i = 1; i < S; i++) {
        r = get_result(f, &c[i], rid[0], "unmask", 0);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_int_equal(json_integer_value(json_object_get(j, "participants")), S);
        json_decref(j);
        resp_free(&r);
    }
    json_t *ar = admin_round(f, rid[0]);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(ar, "phase_counts"), "masked")), S);
    json_decref(ar);
    clients_free(c, 2 * S);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slow_device_reads_old_outcome, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_outcome_kept, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_erase_leaves_kept_rounds, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
