/* Active-adversary secure aggregation (secagg.consistency_check with the device authority's
 * key) and norm proofs (secagg.norm_proof) in one population (docs/protocol.md "Device
 * identities", 5.1; docs/secagg.md "Active mode", "Norm proofs"): the population is
 * accepted and shows both; devices with v2 identities run the five phases with proofs in
 * their masked inputs, and the sum is exactly that of their quantized updates (the audit
 * entry records the mode and the bound); a device whose update is over the bound (a x30
 * boost with a proof for a looser bound) is refused at the masked phase (400), signs
 * nothing, and the round completes through the consistency phase with the others exactly;
 * a device that masks a boosted vector under an honest proof has the round abandoned at the
 * link check. Devices are the library's secagg clients with their own identities
 * (coord_testkit.c's stand-ins do the rest). The time the coordinator takes per masked
 * input with its proof is printed (docs/secagg.md "Norm proofs" records it). */
#include <time.h>

#include "coord_active_kit.h"

enum { N = 5 };
enum { HONEST = 0, OVER_BOUND = 1, MASKED_BOOST = 2 };

/* Creates population `name` (target N, min 3) with consistency_check, authority a and norm
 * proofs; enrols N devices with identities id[], checks them in and fetches their tasks,
 * which must carry active mode, device certificates and the norm bound; returns the round
 * id. */
static int64_t start_round(struct fx *f, const char *name, const struct authority *a,
                           struct tc *c, fl_secagg_identity *id) {
    json_t *j;
    int64_t rid = active_round_start(f, name, a, ",\"norm_proof\":true", 40, c, id, N, &j);
    json_t *sa = json_object_get(j, "secagg");
    assert_true(json_is_true(json_object_get(sa, "consistency_check")));
    assert_true(json_is_true(json_object_get(sa, "device_certs")));
    assert_true(json_is_object(json_object_get(sa, "norm_proof")));
    json_decref(j);
    assert_true(c[0].task.norm_bits >= 2);
    assert_int_equal(c[0].task.norm_dim, D);
    assert_true(c[0].task.norm_bound2 > 0);
    return rid;
}

static int64_t centred(uint64_t x, uint32_t bits) {
    uint64_t mod = 1ull << bits;
    x &= mod - 1;
    return x >= mod / 2 ? -(int64_t)(mod - x) : (int64_t)x;
}

/* Device i's secagg client in active mode with norm proofs (the task's bound; `loose`: a
 * 10^4 x looser one, for a forger) and its ADVERTISE. The input is the device's encoded
 * update, its model coordinates multiplied by boost. */
static void device_start(struct tc *c, const fl_secagg_identity *id, const struct authority *a,
                         int64_t rid, int boost, bool loose, const uint8_t **out,
                         size_t *out_len) {
    const struct task *t = &c->task;
    fl_secagg_config cfg;
    active_config(&cfg, t, a);
    cfg.norm_bits = t->norm_bits;
    cfg.norm_dim = t->norm_dim;
    cfg.norm_bound2 = loose ? t->norm_bound2 * 10000 : t->norm_bound2;
    cfg.norm_tail_max = t->norm_weight_max;
    uint32_t x[1024];
    for (size_t j = 0; j < t->vec_len; j++)
        x[j] = (uint32_t)c->words[j];
    for (size_t j = 0; boost != 1 && j < t->dim; j++)
        x[j] = (uint32_t)(centred(c->words[j], t->bits) * boost);
    active_client_start(c, &cfg, id, rid, x, out, out_len);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs one round of N devices with device 0 attacking as `attack`; returns the outcome JSON
 * the first device reads from the unmask result (NULL if the round did not complete) and the
 * round's status JSON in *status (caller frees both). alive[] ends as the devices in the sum
 * (with an abandoned round: those that posted their masked input). */
static json_t *attacked_round(struct fx *f, const char *name, int attack, struct tc *c,
                              struct sum_hook *h, bool *alive, json_t **status) {
    struct authority a;
    authority_make(&a);
    fl_secagg_identity id[N];
    memset(h, 0, sizeof(*h));
    fl__coord_debug_hook_set(f->co, sum_hook_capture, h);
    int64_t rid = start_round(f, name, &a, c, id);
    const uint8_t *out[N];
    size_t out_len[N];
    for (int i = 0; i < N; i++) {
        alive[i] = true;
        device_start(&c[i], &id[i], &a, rid, i == 0 && attack == OVER_BOUND ? 30 : 1,
                     i == 0 && attack == OVER_BOUND, &out[i], &out_len[i]);
    }
    fprintf(stderr, "%s: n %u k %u t %u, m %u, dim %u, B^2 %llu\n", name, c[0].task.n,
            c[0].task.k, c[0].task.t, c[0].task.norm_bits, c[0].task.norm_dim,
            (unsigned long long)c[0].task.norm_bound2);
    double refused0 = metric_value(f, "flotilla_norm_proofs_refused_total");
    json_t *outcome = NULL;
    for (int ph = 0; ph < 5; ph++) {
        bool skipped = false;
        double t_masked = 0;
        int n_masked = 0;
        for (int i = 0; i < N; i++) {
            if (!alive[i])
                continue;
            uint8_t *msg = malloc(out_len[i]);
            assert_non_null(msg);
            memcpy(msg, out[i], out_len[i]);
            if (ph == 2 && attack == MASKED_BOOST && i == 0) /* masked x + 99 x */
                for (size_t j = 0; j < c[0].task.dim; j++) {
                    uint8_t *w = msg + FL_SECAGG_HEADER_BYTES + 4 * j;
                    uint32_t v = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 |
                                 (uint32_t)w[3] << 24;
                    v += (uint32_t)(centred(c[0].words[j], c[0].task.bits) * 99);
                    for (int b = 0; b < 4; b++)
                        w[b] = (uint8_t)(v >> (8 * b));
                }
            double t0 = now_s();
            struct resp r = post_phase(f, &c[i], rid, active_phases[ph], msg, out_len[i]);
            double dt = now_s() - t0;
            free(msg);
            if (ph == 2 && attack == OVER_BOUND && i == 0) {
                assert_int_equal(r.status, 400);
                assert_non_null(strstr(r.body, "masked message rejected"));
                alive[i] = false;
                skipped = true;
                resp_free(&r);
                continue;
            }
            if (r.status != 202)
                fprintf(stderr, "post %s device %d: %ld %s\n", active_phases[ph], i, r.status,
                        r.body);
            assert_int_equal(r.status, 202);
            resp_free(&r);
            if (ph == 2) {
                t_masked += dt;
                n_masked++;
                if (i == 1)
                    fprintf(stderr, "%s: masked input with proof %zu bytes\n", name, out_len[i]);
            }
        }
        if (ph == 2)
            fprintf(stderr, "%s: coordinator time per masked input with proof (POST, proof "
                    "checked): %.1f ms over %d\n", name, 1e3 * t_masked / n_masked, n_masked);
        if (skipped) /* the phase closes at its deadline */
            fx_advance(f, c[1].task.dl[ph] + 1 - atomic_load(&f->now_ms));
        active_results(f, c, N, rid, ph, alive, out, out_len, &outcome);
    }
    assert_true(metric_value(f, "flotilla_norm_proofs_refused_total") ==
                refused0 + (attack == OVER_BOUND));
    fl__coord_debug_hook_set(f->co, NULL, NULL);
    *status = round_status(f, &c[1], rid);
    secagg_clients_free(c, N);
    fl_memzero(id, sizeof(id));
    return outcome;
}

/* The round's audit entry (the bundle verifies offline) logs the mode and the bound:
 * secagg {active, authority_key_sha256, k, n, norm_proof, t}. */
static void check_audit(struct fx *f, const char *name, const struct task *t) {
    json_t *e = audit_round_find(f, name, 0, NULL);
    json_t *sa = json_object_get(e, "secagg");
    assert_int_equal(json_object_size(sa), 6);
    assert_int_equal(json_integer_value(json_object_get(sa, "active")), 1);
    assert_non_null(json_object_get(sa, "authority_key_sha256"));
    json_t *np = json_object_get(sa, "norm_proof");
    assert_int_equal(json_integer_value(json_object_get(np, "bits")), t->norm_bits);
    assert_int_equal(json_integer_value(json_object_get(np, "bound2")), t->norm_bound2);
    json_decref(e);
}

/* ---- tests ---- */

/* The population is accepted, shows both settings, and keeps them against PATCH. */
static void test_population(void **state) {
    struct fx *f = *state;
    struct authority a;
    authority_make(&a);
    char *etok = active_pop(f, "both", N, 3, &a, ",\"norm_proof\":true");
    free(etok);
    struct resp r = http_json(f, "GET", "/v1/admin/populations/both", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *s = json_object_get(json_object_get(j, "config"), "secagg");
    if (!s)
        s = json_object_get(j, "secagg");
    assert_non_null(s);
    assert_true(json_is_true(json_object_get(s, "consistency_check")));
    assert_true(json_is_true(json_object_get(s, "norm_proof")));
    assert_string_equal(json_string_value(json_object_get(s, "authority_key")), a.vk_hex);
    json_decref(j);
    resp_free(&r);
}

static void test_honest_round_exact(void **state) {
    struct fx *f = *state;
    struct tc c[N];
    struct sum_hook h;
    bool in[N];
    json_t *st = NULL;
    json_t *o = attacked_round(f, "an-honest", HONEST, c, &h, in, &st);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N);
    json_decref(o);
    json_decref(st);
    check_exact_sum(&h, c, in, N);
    check_audit(f, "an-honest", &c[0].task);
    clients_free(c, N);
}

static void test_over_bound_dropped(void **state) {
    struct fx *f = *state;
    struct tc c[N];
    struct sum_hook h;
    bool in[N];
    json_t *st = NULL;
    json_t *o = attacked_round(f, "an-over", OVER_BOUND, c, &h, in, &st);
    assert_false(in[0]);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(o, "participants")), N - 1);
    json_decref(o);
    json_decref(st);
    check_exact_sum(&h, c, in, N); /* the honest four exactly: device 0 moved nothing */
    clients_free(c, N);
}

static void test_masked_boost_abandons(void **state) {
    struct fx *f = *state;
    struct tc c[N];
    struct sum_hook h;
    bool in[N];
    json_t *st = NULL;
    json_t *o = attacked_round(f, "an-boost", MASKED_BOOST, c, &h, in, &st);
    json_decref(o);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    const char *why = json_string_value(json_object_get(st, "reason"));
    assert_non_null(why);
    assert_non_null(strstr(why, "not the sum of the proven inputs"));
    json_decref(st);
    assert_int_equal(h.calls, 0); /* nothing aggregated */
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_population, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_honest_round_exact, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_over_bound_dropped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_masked_boost_abandons, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
