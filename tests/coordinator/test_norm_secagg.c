/* The norm bound in secure-aggregation rounds (secagg.norm_proof; docs/protocol.md 5.1,
 * docs/secagg.md "Norm proofs"). The server never sees an update, so each device proves in
 * zero knowledge that the vector it masks is within the bound the server clips plain updates
 * to. A device that boosts its update x100:
 *  - with a proof made for a looser bound (x30: the coordinate range of the proof caps the
 *    boost before the norm does): its masked input is refused (400), it counts as
 *    dropped, and the model is exactly the average of the honest devices;
 *  - with an honest proof but the boosted vector masked: the unmasked sum does not match the
 *    proven commitments, and the round is abandoned with that reason (no model change).
 * Either way it moves the aggregate by less than an honest device can (clip/n). The audit
 * log's round entry records the bound each round enforced (secagg.norm_proof), and a secagg
 * round without proofs has none. */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"
#include "flotilla/storage.h"

enum { N = 4 };
enum { HONEST = 0, FORGED = 1, MASKED_BOOST = 2, FORGED_WIDE = 3, FORGED_WEIGHT = 4 };

static int64_t centred(uint64_t x, uint32_t bits) {
    uint64_t mod = 1ull << bits;
    x &= mod - 1;
    return x >= mod / 2 ? -(int64_t)(mod - x) : (int64_t)x;
}

/* Device 0 of a FORGED round: a x`boost` input with a proof for a 10^4 x looser bound and
 * `wider` more bits per coordinate (x30 still fits the round's m; x100 needs 7 more bits and
 * so a longer proof than the round's). */
static void forge_client(struct tc *c, int64_t rid, int boost, uint32_t wider,
                         uint32_t weight, const uint8_t **out, size_t *out_len) {
    struct task *t = &c->task;
    fl_secagg_client_destroy(c->sa);
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = t->n;
    cfg.dim = (uint32_t)t->vec_len;
    cfg.bits = t->bits;
    cfg.degree = t->k;
    cfg.threshold = t->t;
    cfg.norm_bits = t->norm_bits + wider;
    cfg.norm_dim = t->norm_dim;
    cfg.norm_bound2 = t->norm_bound2 * 10000;
    cfg.norm_tail_max = weight ? weight : t->norm_weight_max;
    assert_int_equal(fl_secagg_client_create(&c->sa, &cfg, (uint64_t)rid, t->index, NULL, NULL),
                     FL_OK);
    uint32_t x[1024];
    for (size_t j = 0; j < t->vec_len; j++)
        x[j] = (uint32_t)c->words[j];
    for (size_t j = 0; j < t->dim; j++)
        x[j] = (uint32_t)(centred(c->words[j], t->bits) * boost);
    if (weight) /* claims `weight` examples, with a proof for that weight range */
        x[t->vec_len - 1] = weight;
    assert_int_equal(fl_secagg_client_set_input(c->sa, x, t->vec_len), FL_OK);
    assert_int_equal(fl_secagg_client_start(c->sa, out, out_len), FL_OK);
}

/* A secagg round of N devices with norm proofs, device 0 attacking as `attack`. Returns the
 * round's final status JSON (caller frees); *rid_out receives the round. */
static json_t *attacked_round(struct fx *f, const char *name, const char *mode, int attack,
                              struct tc *c, struct sum_hook *h, int64_t *rid_out) {
    fl__coord_debug_hook_set(f->co, sum_hook_capture, h);
    struct popcfg pc = {.name = name, .target = N, .min = 3, .secagg = true, .mode = mode,
                        .weighting = attack == FORGED_WEIGHT ? "examples" : NULL, .budget = 1e6};
    struct popsel sel = {.norm_proof = true};
    setup_devices_sel(f, &pc, &sel, c, N);
    int64_t rid;
    checkin_all(f, c, N, &rid);
    *rid_out = rid;
    fetch_tasks(f, c, N, rid);
    /* The task carries the bound: the model's coordinates, the clip's l2 bound. */
    assert_true(c[0].task.norm_bits >= 2);
    assert_int_equal(c[0].task.norm_dim, D);
    assert_true(c[0].task.norm_bound2 > 0);
    /* The weight is proven in 1..weight_cap (50 in the testkit), exactly 1 with uniform. */
    assert_int_equal(c[0].task.norm_weight_max, attack == FORGED_WEIGHT ? 50 : 1);
    fprintf(stderr, "norm proofs: m %u, dim %u, B^2 %llu\n", c[0].task.norm_bits,
            c[0].task.norm_dim, (unsigned long long)c[0].task.norm_bound2);
    const uint8_t *out[N];
    size_t out_len[N];
    secagg_clients_start(c, N, rid, out, out_len);
    if (attack == FORGED)
        forge_client(&c[0], rid, 30, 0, 0, &out[0], &out_len[0]);
    if (attack == FORGED_WIDE)
        forge_client(&c[0], rid, 100, 7, 0, &out[0], &out_len[0]);
    if (attack == FORGED_WEIGHT)
        forge_client(&c[0], rid, 1, 0, c[0].task.norm_weight_max * 100, &out[0], &out_len[0]);
    secagg_phase_all(f, c, N, rid, "advertise", out, out_len);
    secagg_phase_all(f, c, N, rid, "share", out, out_len);
    double refused0 = metric_value(f, "flotilla_norm_proofs_refused_total");
    for (int i = 0; i < N; i++) {
        uint8_t *msg = malloc(out_len[i]);
        assert_non_null(msg);
        memcpy(msg, out[i], out_len[i]);
        if (attack == MASKED_BOOST && i == 0) /* masked x + 99 x = masked 100 x */
            for (size_t j = 0; j < c[0].task.dim; j++) {
                uint8_t *w = msg + FL_SECAGG_HEADER_BYTES + 4 * j;
                uint32_t v = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 |
                             (uint32_t)w[3] << 24;
                v += (uint32_t)(centred(c[0].words[j], c[0].task.bits) * 99);
                for (int b = 0; b < 4; b++)
                    w[b] = (uint8_t)(v >> (8 * b));
            }
        struct resp r = post_phase(f, &c[i], rid, "masked", msg, out_len[i]);
        if (attack == HONEST && i == 1 && r.status == 202) {
            /* A replay is answered from the record, without a second verification. */
            struct resp again = post_phase(f, &c[i], rid, "masked", msg, out_len[i]);
            assert_int_equal(again.status, 200);
            resp_free(&again);
        }
        free(msg);
        if ((attack == FORGED || attack == FORGED_WEIGHT) && i == 0) {
            assert_int_equal(r.status, 400);
            assert_non_null(strstr(r.body, "masked message rejected"));
            c[0].drop = DROP_MASKED;
        } else if (attack == FORGED_WIDE && i == 0) {
            assert_int_equal(r.status, 413); /* refused before the body is read */
            assert_non_null(strstr(r.body, "body_too_large"));
            c[0].drop = DROP_MASKED;
        } else {
            assert_int_equal(r.status, 202);
        }
        resp_free(&r);
    }
    assert_true(metric_value(f, "flotilla_norm_proofs_refused_total") ==
                refused0 + (attack == FORGED || attack == FORGED_WEIGHT)); /* not a 413 */
    if (c[0].drop) /* the phase closes at its deadline */
        fx_advance(f, c[1].task.dl[2] + 1 - atomic_load(&f->now_ms));
    for (int i = 0; i < N; i++) {
        if (c[i].drop)
            continue;
        struct resp r = get_result(f, &c[i], rid, "masked", 10);
        assert_int_equal(r.status, 200);
        assert_int_equal(fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                 &out[i], &out_len[i]), FL_OK);
        resp_free(&r);
    }
    for (int i = 0; i < N; i++) {
        if (c[i].drop)
            continue;
        struct resp r = post_phase(f, &c[i], rid, "unmask", out[i], out_len[i]);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    for (int i = 0; i < N; i++) {
        if (c[i].drop)
            continue;
        struct resp r = get_result(f, &c[i], rid, "unmask", 10);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        break;
    }
    secagg_clients_free(c, N);
    return round_status(f, &c[1], rid);
}

/* The "round" entry of population `name` in the admin bundle (which must verify offline),
 * as the auditor reads it; the caller frees it. */
static json_t *audit_round_entry(struct fx *f, const char *name) {
    struct resp r = http_req(f, "GET", "/v1/admin/audit/bundle", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, r.body, r.len, NULL), FL_OK);
    if (fl_store_audit_bundle_verify(b, NULL, &v) != FL_OK)
        fail_msg("bundle: %s", v.message);
    json_t *found = NULL;
    for (size_t i = 0; i < fl_store_audit_bundle_entry_count(b); i++) {
        size_t len = 0;
        const char *line = fl_store_audit_bundle_entry(b, i, &len);
        json_t *e = json_loadb(line, len, 0, NULL);
        assert_non_null(e);
        if (strcmp(json_string_value(json_object_get(e, "type")), "round") == 0 &&
            strcmp(json_string_value(json_object_get(e, "population")), name) == 0) {
            assert_null(found); /* one round per population here */
            found = e;
        } else {
            json_decref(e);
        }
    }
    fl_store_audit_bundle_close(b);
    resp_free(&r);
    if (!found)
        fail_msg("no round entry for population %s", name);
    return found;
}

/* The entry's secagg.norm_proof is exactly the bound the task gave the devices. */
static void check_audit_bound(struct fx *f, const char *name, const struct task *t) {
    json_t *e = audit_round_entry(f, name);
    json_t *sa = json_object_get(e, "secagg");
    assert_int_equal(json_object_size(sa), 4); /* k, n, norm_proof, t */
    json_t *np = json_object_get(sa, "norm_proof");
    assert_int_equal(json_object_size(np), 4);
    assert_int_equal(json_integer_value(json_object_get(np, "bits")), t->norm_bits);
    assert_int_equal(json_integer_value(json_object_get(np, "bound2")), t->norm_bound2);
    assert_int_equal(json_integer_value(json_object_get(np, "dim")), t->norm_dim);
    assert_int_equal(json_integer_value(json_object_get(np, "weight_max")), t->norm_weight_max);
    assert_int_equal(json_integer_value(json_object_get(sa, "n")), t->n);
    json_decref(e);
}

static void check_model(struct fx *f, struct tc *c, const char *name, int64_t version) {
    float w[D], b[2], want[D], base[D];
    for (int j = 0; j < D; j++)
        base[j] = base_w(j);
    fetch_model(f, &c[1], name, version, w, b);
    expected_fedavg(c, N, base, want);
    for (int j = 0; j < D; j++)
        assert_true(w[j] == want[j]);
}

static void test_honest(void **state) {
    struct fx *f = *state;
    struct tc c[N];
    struct sum_hook h = {0};
    int64_t rid;
    json_t *st = attacked_round(f, "honest", "none", HONEST, c, &h, &rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t version = json_integer_value(json_object_get(st, "new_model_version"));
    json_decref(st);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.count, N);
    check_model(f, c, "honest", version);
    check_audit_bound(f, "honest", &c[0].task);
    clients_free(c, N);
}

static void test_forged_proof_dropped(void **state) {
    struct fx *f = *state;
    for (int wide = 0; wide < 2; wide++) {
        const char *name = wide ? "forged100" : "forged30";
        struct tc c[N];
        struct sum_hook h = {0};
        int64_t rid;
        json_t *st = attacked_round(f, name, "none", wide ? FORGED_WIDE : FORGED, c, &h, &rid);
        assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
        int64_t version = json_integer_value(json_object_get(st, "new_model_version"));
        json_decref(st);
        assert_int_equal(h.calls, 1);
        assert_int_equal(h.count, N - 1);
        check_model(f, c, name, version); /* the honest three exactly: device 0 moved nothing */
        clients_free(c, N);
    }
}

/* Examples weighting: a device claiming 100 x weight_cap examples (which would shrink every
 * other device's share of the average) with a proof for that range is refused. */
static void test_forged_weight_dropped(void **state) {
    struct fx *f = *state;
    struct tc c[N];
    struct sum_hook h = {0};
    int64_t rid;
    json_t *st = attacked_round(f, "fweight", "none", FORGED_WEIGHT, c, &h, &rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    json_decref(st);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.count, N - 1);
    /* the logged weight range is the round's (1..weight_cap), not the forger's */
    check_audit_bound(f, "fweight", &c[1].task);
    clients_free(c, N);
}

static void test_boosted_mask_abandons(void **state) {
    struct fx *f = *state;
    for (int central = 0; central < 2; central++) {
        const char *name = central ? "boostc" : "boost";
        struct tc c[N];
        struct sum_hook h = {0};
        int64_t rid;
        json_t *st =
            attacked_round(f, name, central ? "central" : "none", MASKED_BOOST, c, &h, &rid);
        assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
        const char *why = json_string_value(json_object_get(st, "reason"));
        assert_non_null(why);
        assert_non_null(strstr(why, "not the sum of the proven inputs"));
        json_decref(st);
        assert_int_equal(h.calls, 0); /* nothing aggregated, no model version */
        char q[160];
        snprintf(q, sizeof(q), "SELECT count(*) FROM rounds WHERE id = %lld AND "
                 "result_version IS NOT NULL", (long long)rid);
        assert_int_equal(db_int(f, q), 0);
        if (central) /* an abandoned round spends no privacy budget */
            assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);
        /* the abandoned round's entry still says which bound was enforced */
        check_audit_bound(f, name, &c[1].task);
        clients_free(c, N);
    }
}

/* A secagg round without norm proofs: its audit entry's secagg is {k, n, t} as before. */
static void test_plain_secagg_audit(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "plain", .target = N, .min = 3, .secagg = true, .mode = "none",
                        .budget = 1e6};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    assert_int_equal(c[0].task.norm_bits, 0);
    json_t *out = run_secagg(f, c, N, rid);
    assert_non_null(out);
    json_decref(out);
    json_t *e = audit_round_entry(f, "plain");
    assert_string_equal(json_string_value(json_object_get(e, "outcome")), "completed");
    json_t *sa = json_object_get(e, "secagg");
    assert_int_equal(json_object_size(sa), 3);
    assert_null(json_object_get(sa, "norm_proof"));
    assert_int_equal(json_integer_value(json_object_get(sa, "n")), N);
    json_decref(e);
    clients_free(c, N);
}

/* Configuration: refused with distributed DP, without secure aggregation, or not a boolean. */
static void test_config_refusals(void **state) {
    struct fx *f = *state;
    static const char *const bodies[] = {
        "{\"name\":\"d1\",\"allowed_regions\":[\"*\"],"
        "\"secagg\":{\"enabled\":true,\"norm_proof\":true},\"privacy\":{\"mode\":\"distributed\"}}",
        "{\"name\":\"d2\",\"allowed_regions\":[\"*\"],"
        "\"secagg\":{\"enabled\":false,\"norm_proof\":true}}",
        "{\"name\":\"d3\",\"allowed_regions\":[\"*\"],"
        "\"secagg\":{\"enabled\":true,\"norm_proof\":1}}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, bodies[i]);
        if (r.status != 400 || !strstr(r.body, "secagg.norm_proof"))
            fprintf(stderr, "body %zu: %ld %s\n", i, r.status, r.body);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.body, "secagg.norm_proof"));
        resp_free(&r);
    }
}

/* A population whose norm proofs cannot work as configured starts no round: its devices
 * are told to retry (no_round_forming) and GET on the population says why (round_error).
 * Two guards of the round start: a bound too large to prove (clip 1e9 at granularity 1e-9,
 * B^2 = 1e36), and a bound that needs more bits than the modulus has (modulus_bits 12). */
static void test_unprovable_bound_refused(void **state) {
    struct fx *f = *state;
    static const struct {
        const char *name;
        double clip, gran;
        int bits;
        const char *why;
    } cases[] = {
        {"nb-huge", 1e9, 1e-9, 32, "no norm bound"},
        {"nb-bits", 1.0, 1.0 / 1024, 12, "norm proofs need"},
    };
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":"
                     "true,\"idle\":true},\"capabilities\":{\"secagg\":true}}";
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct popcfg pc = {.name = cases[k].name, .target = N, .min = 3, .secagg = true,
                            .mode = "none", .budget = 1e6, .bits = cases[k].bits};
        struct popsel sel = {.norm_proof = true, .clip_norm = cases[k].clip,
                             .granularity = cases[k].gran};
        struct tc c[N];
        setup_devices_sel(f, &pc, &sel, c, N);
        char path[128];
        snprintf(path, sizeof(path), "/v1/admin/populations/%s", cases[k].name);
        struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_true(json_is_null(json_object_get(j, "round_error"))); /* nothing tried yet */
        json_decref(j);
        resp_free(&r);
        r = http_json(f, "POST", "/v1/checkin", c[0].tok, ok);
        assert_int_equal(r.status, 200);
        j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
        assert_string_equal(json_string_value(json_object_get(j, "reason")), "no_round_forming");
        json_decref(j);
        resp_free(&r);
        r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
        assert_int_equal(r.status, 200);
        j = body_json(&r);
        json_t *re = json_object_get(j, "round_error");
        const char *msg = json_string_value(json_object_get(re, "message"));
        if (!msg || !strstr(msg, cases[k].why))
            fprintf(stderr, "%s: %s\n", cases[k].name, r.body);
        assert_non_null(msg);
        assert_non_null(strstr(msg, cases[k].why));
        assert_true(json_integer_value(json_object_get(re, "at_unix_ms")) > 0);
        assert_true(json_is_null(json_object_get(j, "current_round")));
        json_decref(j);
        resp_free(&r);
        clients_free(c, N);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_honest, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_forged_proof_dropped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_forged_weight_dropped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_boosted_mask_abandons, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_plain_secagg_audit, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_config_refusals, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unprovable_bound_refused, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
