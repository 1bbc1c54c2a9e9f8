/* One device, one seat: in active-adversary secure aggregation (secagg.consistency_check,
 * docs/protocol.md 5.6) no device id sits in two seats of one round. The coordinator has
 * no check of its own for it at seating because it cannot happen by construction
 * (docs/coordinator.md, "One device, one seat"): a round's seats are its participants, one
 * per client (a client that checks in again gets its seat back); the seats' device ids are
 * read at the round's start from storage's client_identities, keyed by client and UNIQUE
 * (population_id, device_id); a round takes the clients of one population; and a client in a
 * forming or running round cannot be erased (which would free its device id for a new
 * client). Each link is checked here through the API (and the constraints against the live
 * database), and so is the last line of defence at ADVERTISE: a seat advertising the device
 * of another, already advertised seat is refused (400) and dropped, and the survivors'
 * secagg clients accept the server's key list, which they refuse when it names a device
 * twice. */
#include <sqlite3.h>

#include "coord_active_kit.h"

/* POST /v1/checkin as tok: the participation id (into pid) of a "selected" answer, and the
 * round id. */
static int64_t checkin_selected(struct fx *f, const char *tok, char *pid, size_t pid_len) {
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true},\"capabilities\":{\"secagg\":true}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", tok, ok);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    if (strcmp(json_string_value(json_object_get(j, "status")), "selected") != 0)
        fprintf(stderr, "check-in: %s\n", r.body);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
    snprintf(pid, pid_len, "%s", json_string_value(json_object_get(j, "participation_id")));
    int64_t rid = json_integer_value(json_object_get(j, "round_id"));
    json_decref(j);
    resp_free(&r);
    return rid;
}

/* POST /admin/clients/{cid}/erase, asserting 409 conflict (the client is seated). */
static void erase_refused(struct fx *f, const char *cid) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    struct resp r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
}

/* ---- one client per device and population ---- */

/* Enrollment cannot give one device id a second client in a population: again with a new
 * key and a valid certificate, and again after the enrollment token was rotated, is 409; the
 * database itself refuses a second identity row with that device id in the population, and a
 * second identity for one client. The same device may enroll in another population, whose
 * rounds are separate. */
static void test_one_client_per_device(void **state) {
    struct fx *f = *state;
    struct authority a;
    authority_make(&a);
    char *etok = active_pop(f, "seats", 3, 3, &a, NULL);
    fl_secagg_identity d, d_again, e;
    char ident_d[512], ident_d_again[512], ident_e[512];
    device_make(&d, ident_d, sizeof(ident_d), &a, 1);
    device_make(&d_again, ident_d_again, sizeof(ident_d_again), &a, 1); /* same id, new key */
    device_make(&e, ident_e, sizeof(ident_e), &a, 2);
    assert_memory_equal(d.device_id, d_again.device_id, FL_SECAGG_DEVICE_ID_BYTES);
    char cid_d[32], cid_e[32];
    char *tok_d = enroll_ident_ok(f, etok, "seats", ident_d, cid_d, sizeof(cid_d));
    char *tok_e = enroll_ident_ok(f, etok, "seats", ident_e, cid_e, sizeof(cid_e));

    struct resp r = enroll_ident(f, etok, "seats", ident_d_again);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/seats/enrollment-token", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    char *etok2 = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    r = enroll_ident(f, etok2, "seats", ident_d_again);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 2);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 2);

    /* The constraints behind it, on the live database: e's row cannot take d's device id,
     * and d cannot get a second identity row. */
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE client_identities SET device_id = (SELECT device_id FROM "
             "client_identities WHERE client_id = '%s') WHERE client_id = '%s'",
             cid_d, cid_e);
    assert_int_equal(db_exec_rc(f, sql), SQLITE_CONSTRAINT);
    snprintf(sql, sizeof(sql),
             "INSERT INTO client_identities (client_id, population_id, device_id, verify_key, "
             "cert) SELECT client_id, population_id, randomblob(32), verify_key, cert FROM "
             "client_identities WHERE client_id = '%s'",
             cid_d);
    assert_int_equal(db_exec_rc(f, sql), SQLITE_CONSTRAINT);
    assert_int_equal(db_int(f, "SELECT count(DISTINCT device_id) FROM client_identities"), 2);

    /* Another population: the same device is another client there. */
    char *etok_o = active_pop(f, "other", 3, 3, &a, NULL);
    char *tok_o = enroll_ident_ok(f, etok_o, "other", ident_d_again, NULL, 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 3);
    assert_int_equal(db_int(f, "SELECT max(c) FROM (SELECT count(*) AS c FROM client_identities "
                               "GROUP BY population_id, device_id)"),
                     1);
    free(tok_d);
    free(tok_e);
    free(tok_o);
    free(etok);
    free(etok2);
    free(etok_o);
    fl_memzero(&d, sizeof(d));
    fl_memzero(&d_again, sizeof(d_again));
    fl_memzero(&e, sizeof(e));
}

/* ---- one seat per client, one device per seat ---- */

/* A client that checks in again, while the round forms and once it runs, gets its own seat
 * back (the same participation id and index); the started round has one seat per client and
 * as many distinct device ids as seats; a seated client cannot be erased (409), so its
 * device id cannot be freed for another client during the round. */
static void test_one_seat_per_client(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct authority a;
    authority_make(&a);
    char *etok = active_pop(f, "once", N, 3, &a, NULL);
    struct tc c[N];
    fl_secagg_identity id[N];
    char cid[N][32];
    enroll_devices(f, etok, "once", &a, 40, c, id, N, cid);
    /* Device 0 twice while the round forms: one seat. */
    char pid_again[40];
    int64_t rid = checkin_selected(f, c[0].tok, c[0].pid, sizeof(c[0].pid));
    assert_int_equal(checkin_selected(f, c[0].tok, pid_again, sizeof(pid_again)), rid);
    assert_string_equal(pid_again, c[0].pid);
    /* Erasing a seated client is refused while the round forms... */
    erase_refused(f, cid[0]);
    /* ... the others fill it (target N, over-selection 1: it starts) ... */
    for (int i = 1; i < N; i++)
        assert_int_equal(checkin_selected(f, c[i].tok, c[i].pid, sizeof(c[i].pid)), rid);
    fetch_tasks(f, c, N, rid);
    /* ... and device 0 again once it runs: still its seat. */
    assert_int_equal(checkin_selected(f, c[0].tok, pid_again, sizeof(pid_again)), rid);
    assert_string_equal(pid_again, c[0].pid);
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_int_equal(r.status, 200);
    struct task t;
    parse_task(&r, &t);
    resp_free(&r);
    assert_int_equal(t.index, c[0].task.index);
    assert_int_equal(t.n, N);
    /* N seats with distinct indices, N clients, N distinct device ids. */
    bool seen[N] = {false};
    for (int i = 0; i < N; i++) {
        assert_int_equal(c[i].task.n, N);
        assert_true(c[i].task.index < N);
        assert_false(seen[c[i].task.index]);
        seen[c[i].task.index] = true;
    }
    char q[256];
    snprintf(q, sizeof(q), "SELECT count(*) FROM round_participants WHERE round_id = %lld",
             (long long)rid);
    assert_int_equal(db_int(f, q), N);
    snprintf(q, sizeof(q),
             "SELECT count(DISTINCT i.device_id) FROM round_participants p JOIN "
             "client_identities i ON i.client_id = p.client_id WHERE p.round_id = %lld",
             (long long)rid);
    assert_int_equal(db_int(f, q), N);
    /* ... and while it runs. */
    erase_refused(f, cid[0]);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), N);
    clients_free(c, N);
    free(etok);
    fl_memzero(id, sizeof(id));
}

/* The last line of defence: seat 0 advertises its own device (202); seat 1 then advertises
 * seat 0's device (its key and certificate, which verify): refused with 400 before the secagg
 * server seats it, and dropped (its own advertisement afterwards is 410). The phase closes
 * with the others, and every survivor's secagg client accepts the server's key list (it
 * refuses one naming a device twice or its own): one device, one seat. */
static void test_second_seat_refused(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    struct authority a;
    authority_make(&a);
    char *etok = active_pop(f, "twice", N, 3, &a, NULL);
    struct tc c[N];
    fl_secagg_identity id[N];
    enroll_devices(f, etok, "twice", &a, 70, c, id, N, NULL);
    free(etok);
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    const uint8_t *out[N];
    size_t out_len[N];
    for (int i = 0; i < N; i++)
        active_client(&c[i], i == 1 ? &id[0] : &id[i], &a, rid, &out[i], &out_len[i]);
    struct resp r = post_phase(f, &c[0], rid, "advertise", out[0], out_len[0]);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    advertise_other_refused(f, &c[1], rid, out[1], out_len[1], &id[1], &a);
    for (int i = 2; i < N; i++) {
        r = post_phase(f, &c[i], rid, "advertise", out[i], out_len[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    /* Every live seat posted: the phase is closed, and its key list is accepted. */
    for (int i = 0; i < N; i++) {
        if (i == 1)
            continue;
        r = get_result(f, &c[i], rid, "advertise", 10);
        assert_int_equal(r.status, 200);
        const uint8_t *msg;
        size_t msg_len;
        fl_status st =
            fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len, &msg, &msg_len);
        if (st != FL_OK)
            fprintf(stderr, "device %d: %s\n", i, fl_secagg_client_errmsg(c[i].sa));
        assert_int_equal(st, FL_OK);
        resp_free(&r);
    }
    json_t *j = admin_round(f, rid);
    json_t *pc = json_object_get(j, "phase_counts");
    assert_int_equal(json_integer_value(json_object_get(pc, "advertise")), N - 1);
    json_decref(j);
    secagg_clients_free(c, N);
    clients_free(c, N);
    fl_memzero(id, sizeof(id));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_client_per_device, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_one_seat_per_client, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_second_seat_refused, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
