/* Secure aggregation in active-adversary mode with device certificates
 * (secagg.consistency_check, docs/protocol.md "Device identities"): population rules for
 * consistency_check and authority_key; enrollment with a device identity (good, a certificate
 * that does not verify, one for another device or by another authority, a device id already
 * enrolled, a missing or malformed identity, revocation keeping the device, erasure freeing
 * it, a population without the check ignoring the field); a complete active round with a
 * dropout in the masked phase and the consistency phase, whose sum is exact; an ADVERTISE
 * naming another enrolled device refused and its sender dropped while the round completes
 * without it; and a restart keeping all of it. Devices are the library's secagg clients with
 * their own identities (coord_testkit.c's stand-ins do the rest). */
#include <sodium.h>

#include "coord_active_kit.h"

/* Asserts r is error status/code naming field. */
static void assert_field_error(struct resp *r, long status, const char *code, const char *field) {
    assert_error(r, status, code);
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "field")), field);
    json_decref(j);
    resp_free(r);
}

/* ---- population rules ---- */

static void test_population_rules(void **state) {
    struct fx *f = *state;
    struct authority a;
    authority_make(&a);
    char sa[512];
    struct resp r;
    /* consistency_check without a key, with a short, a non-hex or an all-zero key */
    const char *bad_keys[] = {
        "", ",\"authority_key\":\"abcd\"", ",\"authority_key\":7",
        ",\"authority_key\":\"zz00000000000000000000000000000000000000000000000000000000000000\"",
        ",\"authority_key\":\"0000000000000000000000000000000000000000000000000000000000000000\""};
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
        snprintf(sa, sizeof(sa), "\"enabled\":true,\"consistency_check\":true%s", bad_keys[i]);
        r = secagg_pop_create(f, "bad", 3, 3, sa, NULL, NULL);
        assert_field_error(&r, 400, "invalid_field", "secagg.authority_key");
    }
    /* a key without the check */
    snprintf(sa, sizeof(sa), "\"enabled\":true,\"authority_key\":\"%s\"", a.vk_hex);
    r = secagg_pop_create(f, "bad", 3, 3, sa, NULL, NULL);
    assert_field_error(&r, 400, "invalid_field", "secagg.authority_key");
    /* what the check cannot be combined with: secagg off, FedBuff (norm proofs combine:
     * test_secagg_active_norm.c) */
    snprintf(sa, sizeof(sa),
             "\"enabled\":false,\"consistency_check\":true,\"authority_key\":\"%s\"", a.vk_hex);
    r = secagg_pop_create(f, "bad", 3, 3, sa, NULL, NULL);
    assert_field_error(&r, 400, "invalid_field", "secagg.consistency_check");
    snprintf(sa, sizeof(sa), "\"enabled\":true,\"consistency_check\":true,\"authority_key\":\"%s\"",
             a.vk_hex);
    r = secagg_pop_create(f, "bad", 3, 3, sa, "fedbuff", NULL);
    assert_field_error(&r, 400, "invalid_field", "secagg.consistency_check");
    assert_int_equal(db_int(f, "SELECT count(*) FROM populations"), 0);

    /* Accepted with an uppercase key, shown normalised to lowercase. */
    char upper[65];
    for (int i = 0; i < 64; i++)
        upper[i] = (char)(a.vk_hex[i] >= 'a' ? a.vk_hex[i] - 32 : a.vk_hex[i]);
    upper[64] = '\0';
    snprintf(sa, sizeof(sa), "\"enabled\":true,\"consistency_check\":true,\"authority_key\":\"%s\"",
             upper);
    r = secagg_pop_create(f, "act", 3, 3, sa, NULL, NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    r = http_json(f, "GET", "/v1/admin/populations/act", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *s = json_object_get(json_object_get(j, "config"), "secagg");
    if (!s)
        s = json_object_get(j, "secagg");
    assert_non_null(s);
    assert_true(json_is_true(json_object_get(s, "consistency_check")));
    assert_string_equal(json_string_value(json_object_get(s, "authority_key")), a.vk_hex);
    json_decref(j);
    resp_free(&r);
    /* Not changeable by PATCH. */
    snprintf(sa, sizeof(sa), "{\"secagg\":{\"authority_key\":\"%s\"}}", a.vk_hex);
    r = http_json(f, "PATCH", "/v1/admin/populations/act", ADMIN_TOKEN, sa);
    assert_error(&r, 400, "invalid_field");
    resp_free(&r);
}

/* ---- enrollment ---- */

static void test_enrollment(void **state) {
    struct fx *f = *state;
    struct authority a, other;
    authority_make(&a);
    authority_make(&other);
    char *etok = active_pop(f, "en", 3, 3, &a, NULL);
    fl_secagg_identity d0, d1;
    uint8_t vk0[32], vk1[32];
    identity_make(&d0, vk0, &a, 1);
    identity_make(&d1, vk1, &a, 2);
    char ident[512], cid[32];

    /* Missing, malformed, or not verifying: 400 and nothing enrolled. */
    struct resp r = enroll_ident(f, etok, "en", NULL);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    r = enroll_ident(f, etok, "en", "\"x\"");
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    identity_json(ident, sizeof(ident), d0.device_id, vk0, d0.cert);
    size_t il = strlen(ident); /* ...<hex>"}: drop the cert's last two hex characters */
    ident[il - 4] = '"';
    ident[il - 3] = '}';
    ident[il - 2] = '\0';
    r = enroll_ident(f, etok, "en", ident);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    uint8_t bad[64];
    memcpy(bad, d0.cert, 64);
    bad[5] ^= 1;
    identity_json(ident, sizeof(ident), d0.device_id, vk0, bad);
    r = enroll_ident(f, etok, "en", ident);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    identity_json(ident, sizeof(ident), d1.device_id, vk0, d0.cert); /* another device's id */
    r = enroll_ident(f, etok, "en", ident);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    uint8_t by_other[64];
    assert_int_equal(fl_secagg_cert_issue_device(by_other, other.sk, d0.device_id, vk0,
                                                 FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
    identity_json(ident, sizeof(ident), d0.device_id, vk0, by_other);
    r = enroll_ident(f, etok, "en", ident);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 0);

    /* Good: enrolled, identity stored. */
    identity_json(ident, sizeof(ident), d0.device_id, vk0, d0.cert);
    char *tok0 = enroll_ident_ok(f, etok, "en", ident, cid, sizeof(cid));
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 1);

    /* The same device again, even with a fresh key and a valid certificate: 409, and no
     * client is left behind. */
    uint8_t vk0b[32], sk0b[64], cert0b[64];
    assert_int_equal(fl_secagg_signing_keygen(vk0b, sk0b, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
    assert_int_equal(
        fl_secagg_cert_issue_device(cert0b, a.sk, d0.device_id, vk0b, FL_SECAGG_BACKEND_DEFAULT),
        FL_OK);
    char ident_b[512];
    identity_json(ident_b, sizeof(ident_b), d0.device_id, vk0b, cert0b);
    r = enroll_ident(f, etok, "en", ident_b);
    assert_field_error(&r, 409, "conflict", "secagg_identity");
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 1);

    /* Revoked: the device stays registered and cannot come back as a new client. */
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/revoke", cid);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = enroll_ident(f, etok, "en", ident_b);
    assert_field_error(&r, 409, "conflict", "secagg_identity");
    /* Erased: the identity goes with the client; the device may enroll again. */
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_true(r.status == 200 || r.status == 204);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 0);
    char *tok0b = enroll_ident_ok(f, etok, "en", ident_b, NULL, 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 1);

    /* A population without the check ignores the field, even a malformed one. */
    char sa[128], *etok2 = NULL;
    snprintf(sa, sizeof(sa), "\"enabled\":true");
    r = secagg_pop_create(f, "plain", 3, 3, sa, NULL, &etok2);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    char *tok_p = enroll_ident_ok(f, etok2, "plain", "\"not an identity\"", NULL, 0);
    char *tok_q = enroll_ident_ok(f, etok2, "plain", ident, NULL, 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 1);
    free(tok0);
    free(tok0b);
    free(tok_p);
    free(tok_q);
    free(etok);
    free(etok2);
    fl_memzero(&d0, sizeof(d0));
    fl_memzero(&d1, sizeof(d1));
    fl_memzero(sk0b, sizeof(sk0b));
}

/* ---- rounds ---- */

/* n devices enrolled in an active population (target n, min 3) with their identities; the
 * devices check in and fetch their tasks, which must carry the active-mode fields. id[i] is
 * device i's identity; the round id is returned. */
static int64_t active_round_extra(struct fx *f, const char *name, const struct authority *a,
                                  const char *extra, struct tc *c, fl_secagg_identity *id,
                                  int n) {
    json_t *j;
    int64_t rid = active_round_start(f, name, a, extra, 10, c, id, n, &j);
    /* The task says active mode and device certificates, and carries no authority key. */
    json_t *sa = json_object_get(j, "secagg");
    assert_true(json_is_true(json_object_get(sa, "enabled")));
    assert_true(json_is_true(json_object_get(sa, "consistency_check")));
    assert_true(json_is_true(json_object_get(sa, "device_certs")));
    assert_null(json_object_get(sa, "authority_key"));
    assert_true(
        json_integer_value(
            json_object_get(json_object_get(j, "deadlines"), "consistency_unix_ms")) >
        json_integer_value(json_object_get(json_object_get(j, "deadlines"), "masked_unix_ms")));
    json_decref(j);
    assert_true(c[0].task.secagg);
    return rid;
}

static int64_t active_round(struct fx *f, const char *name, const struct authority *a, struct tc *c,
                            fl_secagg_identity *id, int n) {
    return active_round_extra(f, name, a, NULL, c, id, n);
}

/* Runs the five phases for the alive devices (alive[i]); a device with c[i].drop ==
 * DROP_MASKED posts nothing from the masked phase on (the phase then closes at its deadline).
 * Returns the outcome JSON the first device reads from the unmask result. */
static json_t *run_active(struct fx *f, struct tc *c, int n, int64_t rid, bool *alive,
                          const uint8_t **out, size_t *out_len) {
    json_t *outcome = NULL;
    for (int ph = 0; ph < 5; ph++) {
        bool skipped = false;
        for (int i = 0; i < n; i++) {
            if (!alive[i])
                continue;
            if (ph == 2 && c[i].drop == DROP_MASKED) {
                alive[i] = false;
                skipped = true;
                continue;
            }
            struct resp r = post_phase(f, &c[i], rid, active_phases[ph], out[i], out_len[i]);
            if (r.status != 202)
                fprintf(stderr, "post %s device %d: %ld %s\n", active_phases[ph], i, r.status,
                        r.body);
            assert_int_equal(r.status, 202);
            resp_free(&r);
        }
        if (skipped)
            fx_advance(f, c[0].task.dl[ph] + 1 - atomic_load(&f->now_ms));
        active_results(f, c, n, rid, ph, alive, out, out_len, &outcome);
    }
    return outcome;
}

/* The audit log records the mode (docs/audit.md, protocol 5.6): the bundle verifies, and
 * round rid's entry has secagg.active 1 and the SHA-256 of authority a's verification key
 * (never the key itself), beside n, k and t; with reveal also revealed_seeds 1. */
static void check_audit_active(struct fx *f, int64_t rid, const struct authority *a,
                               bool reveal) {
    uint8_t fp[32];
    char fp_hex[65];
    crypto_hash_sha256(fp, a->vk, sizeof(a->vk));
    hex_encode(fp_hex, fp, sizeof(fp));
    json_t *e = audit_round_find(f, NULL, rid, a->vk_hex); /* the raw key is nowhere */
    json_t *sa = json_object_get(e, "secagg");
    assert_true(json_is_object(sa));
    assert_true(json_is_integer(json_object_get(sa, "active")));
    assert_int_equal(json_integer_value(json_object_get(sa, "active")), 1);
    assert_string_equal(json_string_value(json_object_get(sa, "authority_key_sha256")), fp_hex);
    /* active, fingerprint, n, k, t (and revealed_seeds) */
    assert_int_equal(json_object_size(sa), reveal ? 6 : 5);
    assert_int_equal(json_integer_value(json_object_get(sa, "revealed_seeds")), reveal);
    assert_true(json_integer_value(json_object_get(sa, "t")) >= 1);
    json_decref(e);
}

/* reveal: the population also sets secagg.reveal_pair_seeds (protocol 1.4): the task says
 * so, the devices reveal the seeds they shared with the one that left before masking, and
 * the sum is as exact. */
static void active_round_with_dropout(struct fx *f, bool reveal) {
    enum { N = 6 };
    struct authority a;
    authority_make(&a);
    struct tc c[N];
    fl_secagg_identity id[N];
    struct sum_hook h;
    memset(&h, 0, sizeof(h));
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    int64_t rid = active_round_extra(f, reveal ? "arv" : "ar", &a,
                                     reveal ? ",\"reveal_pair_seeds\":true" : NULL, c, id, N);
    for (int i = 0; i < N; i++)
        assert_true(c[i].task.reveal_seeds == reveal);
    c[4].drop = DROP_MASKED;
    const uint8_t *out[N];
    size_t out_len[N];
    bool alive[N];
    for (int i = 0; i < N; i++) {
        alive[i] = true;
        active_client(&c[i], &id[i], &a, rid, &out[i], &out_len[i]);
    }
    json_t *o = run_active(f, c, N, rid, alive, out, out_len);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N - 1);
    json_decref(o);
    check_exact_sum(&h, c, alive, N);
    /* The round record counts the consistency phase: every survivor posted it. */
    json_t *j = admin_round(f, rid);
    json_t *pc = json_object_get(j, "phase_counts");
    assert_int_equal(json_integer_value(json_object_get(pc, "consistency")), N - 1);
    assert_int_equal(json_integer_value(json_object_get(pc, "masked")), N - 1);
    json_decref(j);
    check_audit_active(f, rid, &a, reveal);
    fl__coord_debug_hook_set(f->co, NULL, NULL);
    secagg_clients_free(c, N);
    clients_free(c, N);
    fl_memzero(id, sizeof(id));
}

static void test_active_round_with_dropout(void **state) {
    active_round_with_dropout(*state, false);
}

static void test_active_round_reveal_seeds(void **state) {
    active_round_with_dropout(*state, true);
}

/* Device 1 advertises with device 0's identity (its key and certificate, which verify):
 * refused with 400 before the server seats it, dropped, and the round completes with the
 * other devices, without waiting for the advertise deadline. */
static void test_advertise_other_device(void **state) {
    struct fx *f = *state;
    enum { N = 5 };
    struct authority a;
    authority_make(&a);
    struct tc c[N];
    fl_secagg_identity id[N];
    struct sum_hook h;
    memset(&h, 0, sizeof(h));
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    int64_t rid = active_round(f, "ao", &a, c, id, N);
    const uint8_t *out[N];
    size_t out_len[N];
    bool alive[N];
    for (int i = 0; i < N; i++) {
        alive[i] = true;
        active_client(&c[i], i == 1 ? &id[0] : &id[i], &a, rid, &out[i], &out_len[i]);
    }
    int64_t t0 = atomic_load(&f->now_ms);
    /* Refused, and dropped: its next try, even with its own identity, is refused. */
    advertise_other_refused(f, &c[1], rid, out[1], out_len[1], &id[1], &a);
    alive[1] = false;
    json_t *o = run_active(f, c, N, rid, alive, out, out_len);
    assert_int_equal(atomic_load(&f->now_ms), t0); /* no deadline was waited for */
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N - 1);
    json_decref(o);
    check_exact_sum(&h, c, alive, N);
    json_t *j = admin_round(f, rid);
    json_t *pc = json_object_get(j, "phase_counts");
    assert_int_equal(json_integer_value(json_object_get(pc, "advertise")), N - 1);
    json_decref(j);
    fl__coord_debug_hook_set(f->co, NULL, NULL);
    secagg_clients_free(c, N);
    clients_free(c, N);
    fl_memzero(id, sizeof(id));
}

/* A restarted coordinator reloads the population's active mode and authority key from
 * storage: enrollment still requires an identity, checks it under the same key, and the
 * registered devices stay registered. */
static void test_restart_keeps_active(void **state) {
    struct fx *f = *state;
    struct authority a;
    authority_make(&a);
    char *etok = active_pop(f, "rs", 3, 3, &a, NULL);
    fl_secagg_identity d0, d1;
    uint8_t vk0[32], vk1[32];
    identity_make(&d0, vk0, &a, 1);
    identity_make(&d1, vk1, &a, 2);
    char ident0[512], ident1[512];
    identity_json(ident0, sizeof(ident0), d0.device_id, vk0, d0.cert);
    identity_json(ident1, sizeof(ident1), d1.device_id, vk1, d1.cert);
    char *tok0 = enroll_ident_ok(f, etok, "rs", ident0, NULL, 0);
    fx_stop(f);
    fx_start(f);
    struct resp r = enroll_ident(f, etok, "rs", NULL);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    uint8_t bad[64];
    memcpy(bad, d1.cert, 64);
    bad[0] ^= 0x80;
    char ident_bad[512];
    identity_json(ident_bad, sizeof(ident_bad), d1.device_id, vk1, bad);
    r = enroll_ident(f, etok, "rs", ident_bad);
    assert_field_error(&r, 400, "invalid_field", "secagg_identity");
    r = enroll_ident(f, etok, "rs", ident0);
    assert_field_error(&r, 409, "conflict", "secagg_identity");
    char *tok1 = enroll_ident_ok(f, etok, "rs", ident1, NULL, 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM client_identities"), 2);
    free(tok0);
    free(tok1);
    free(etok);
    fl_memzero(&d0, sizeof(d0));
    fl_memzero(&d1, sizeof(d1));
}

/* A semi-honest round has no consistency phase: its endpoints answer 404. */
static void test_no_consistency_without_check(void **state) {
    struct fx *f = *state;
    enum { N = 3 };
    struct popcfg pc = {.name = "sh", .target = N, .min = 3, .secagg = true, .mode = "none"};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    struct resp r = post_phase(f, &c[0], rid, "consistency", (const uint8_t *)"x", 1);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    r = get_result(f, &c[0], rid, "consistency", 0);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_population_rules, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_enrollment, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_active_round_with_dropout, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_active_round_reveal_seeds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_advertise_other_device, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart_keeps_active, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_no_consistency_without_check, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
