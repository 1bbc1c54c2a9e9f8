/* Audit log integration (docs/coordinator.md "Audit log"): a completed round commits its
 * "round" entry with the model and ledger; the admin bundle verifies offline with
 * storage's verifier under the coordinator's key; inclusion and consistency proofs from the
 * public endpoints verify against signed checkpoints; a budget refusal is logged; an
 * erasure is logged under the pseudonym and the client's data is gone; the retention sweep
 * runs on the timer. The task's model object carries sha256 and bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "coord_testkit.h"
#include "flotilla/storage.h"

static void unb64(uint8_t out[32], const char *s) {
    size_t n = 0;
    assert_int_equal(
        sodium_base642bin(out, 32, s, strlen(s), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL),
        0);
    assert_int_equal(n, 32);
}

/* Fetches the bundle and verifies it with the trusted key (and with the auditor's tool when
 * it is built); returns its text. */
static char *bundle_verified(struct fx *f) {
    struct resp r;
    fl_store_audit_bundle_close(audit_bundle_verified(f, &r));
#ifdef FL_AUDIT_EXE
    /* The auditor's tool agrees (exit 0 = verified). */
    char vkey[256], file[200], cmd[800];
    audit_vkey_expected(f, vkey, sizeof(vkey));
    snprintf(file, sizeof(file), "%s/bundle.jsonl", f->dir);
    FILE *fp = fopen(file, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(r.body, 1, r.len, fp), r.len);
    fclose(fp);
    snprintf(cmd, sizeof(cmd), "'%s' verify '%s' --key '%s' > /dev/null", FL_AUDIT_EXE, file, vkey);
    assert_int_equal(system(cmd), 0);
    unlink(file);
#endif
    char *text = malloc(r.len + 1);
    memcpy(text, r.body, r.len);
    text[r.len] = '\0';
    resp_free(&r);
    return text;
}

/* Checks every entry's inclusion proof at the latest checkpoint, and consistency proofs
 * from every earlier checkpoint (sizes taken from the bundle's notes). */
static void proofs_verify(struct fx *f, const char *bundle) {
    char vkey[256];
    audit_vkey_expected(f, vkey, sizeof(vkey));
    struct resp r = http_req(f, "GET", "/v1/audit/checkpoint", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *cp = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(cp, "verifier_key")), vkey);
    const char *note = json_string_value(json_object_get(cp, "note"));
    int64_t size = 0;
    uint8_t root[32], root_b[32];
    assert_int_equal(fl_store_audit_checkpoint_verify(note, strlen(note), vkey, &size, root),
                     FL_OK);
    assert_int_equal(size, json_integer_value(json_object_get(cp, "tree_size")));
    unb64(root_b, json_string_value(json_object_get(cp, "root")));
    assert_memory_equal(root, root_b, 32);
    json_decref(cp);
    resp_free(&r);
    char path[160];
    for (int64_t i = 0; i < size; i++) {
        snprintf(path, sizeof(path), "/v1/audit/proof/inclusion?index=%lld&size=%lld", (long long)i,
                 (long long)size);
        r = http_req(f, "GET", path, NULL, NULL, NULL, 0, NULL);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        const char *entry = json_string_value(json_object_get(j, "entry"));
        assert_non_null(strstr(bundle, entry));
        uint8_t leaf[32], leaf_b[32], proof[64][32];
        fl_store_audit_leaf_hash(leaf, entry, strlen(entry));
        unb64(leaf_b, json_string_value(json_object_get(j, "leaf_hash")));
        assert_memory_equal(leaf, leaf_b, 32);
        json_t *pa = json_object_get(j, "proof");
        size_t n = json_array_size(pa);
        for (size_t k = 0; k < n; k++)
            unb64(proof[k], json_string_value(json_array_get(pa, k)));
        assert_int_equal(
            fl_store_audit_verify_inclusion(leaf, i, size, (const uint8_t(*)[32])proof, n, root),
            FL_OK);
        if (n > 0) { /* a flipped proof byte is refused */
            proof[0][0] ^= 1;
            assert_int_not_equal(fl_store_audit_verify_inclusion(
                                     leaf, i, size, (const uint8_t(*)[32])proof, n, root),
                                 FL_OK);
        }
        json_decref(j);
        resp_free(&r);
    }
    /* Earlier checkpoints from the bundle; each must be consistent with the latest. */
    const char *line = bundle;
    int checked = 0;
    while ((line = strstr(line, "{\"checkpoint\":")) != NULL) {
        const char *end = strchr(line, '\n');
        json_t *l = json_loadb(line, (size_t)(end - line), 0, NULL);
        assert_non_null(l);
        const char *cn = json_string_value(json_object_get(l, "checkpoint"));
        int64_t m = 0;
        uint8_t r1[32], proof[64][32];
        assert_int_equal(fl_store_audit_checkpoint_verify(cn, strlen(cn), vkey, &m, r1), FL_OK);
        json_decref(l);
        line = end;
        if (m >= size)
            continue;
        snprintf(path, sizeof(path), "/v1/audit/proof/consistency?first=%lld&second=%lld",
                 (long long)m, (long long)size);
        r = http_req(f, "GET", path, NULL, NULL, NULL, 0, NULL);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        json_t *pa = json_object_get(j, "proof");
        size_t n = json_array_size(pa);
        for (size_t k = 0; k < n; k++)
            unb64(proof[k], json_string_value(json_array_get(pa, k)));
        assert_int_equal(
            fl_store_audit_verify_consistency(m, size, (const uint8_t(*)[32])proof, n, r1, root),
            FL_OK);
        json_decref(j);
        resp_free(&r);
        checked++;
    }
    assert_true(checked >= 1);
    r = http_req(f, "GET", "/v1/audit/proof/inclusion?index=5&size=2", NULL, NULL, NULL, 0, NULL);
    assert_error(&r, 400, "invalid_parameter");
    resp_free(&r);
    r = http_req(f, "GET", "/v1/audit/proof/consistency?first=1", NULL, NULL, NULL, 0, NULL);
    assert_error(&r, 400, "invalid_parameter");
    resp_free(&r);
}

/* A secagg round with central DP and a dropout completes: its entry is in the log with the
 * round's figures, the bundle verifies and the proofs check. */
static void test_round_logged_and_verified(void **state) {
    struct fx *f = *state;
    enum { N = 6 };
    struct resp r = http_req(f, "GET", "/v1/audit/checkpoint", NULL, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    struct popcfg pc = {.name = "au", .target = N, .min = 4, .secagg = true, .mode = "central",
                        .budget = 50.0};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++) {
        c[i].tok = tok[i];
        c[i].drop = i == N - 1 ? DROP_MASKED : DROP_NONE;
    }
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    /* The task names the model's SHA-256 and size. */
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    assert_int_equal(r.status, 200);
    json_t *t = body_json(&r);
    json_t *mo = json_object_get(t, "model");
    assert_int_equal(strlen(json_string_value(json_object_get(mo, "sha256"))), 64);
    size_t mlen = 0;
    free(make_model(&mlen));
    assert_int_equal(json_integer_value(json_object_get(mo, "bytes")), (json_int_t)mlen);
    json_decref(t);
    resp_free(&r);
    json_t *out = run_secagg(f, c, N, rid);
    assert_non_null(out);
    json_decref(out);
    /* Admin round info: participants and per-phase counts. */
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    json_t *ri = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(ri, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(ri, "participants")), N);
    assert_int_equal(json_integer_value(json_object_get(ri, "completed")), N - 1);
    json_t *pcnt = json_object_get(ri, "phase_counts");
    assert_int_equal(json_integer_value(json_object_get(pcnt, "advertise")), N);
    assert_int_equal(json_integer_value(json_object_get(pcnt, "masked")), N - 1);
    json_decref(ri);
    resp_free(&r);

    char *bundle = bundle_verified(f);
    assert_non_null(strstr(bundle, "\"type\":\"population_created\""));
    assert_non_null(strstr(bundle, "\"type\":\"model_registered\""));
    const char *re = strstr(bundle, "\"type\":\"round\"");
    assert_non_null(re);
    const char *ls = re;
    while (ls > bundle && ls[-1] != '\n')
        ls--;
    json_t *e = json_loadb(ls, (size_t)(strchr(ls, '\n') - ls), 0, NULL);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "outcome")), "completed");
    json_t *counts = json_object_get(e, "counts");
    assert_int_equal(json_integer_value(json_object_get(counts, "selected")), N);
    assert_int_equal(json_integer_value(json_object_get(counts, "completed")), N - 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(e, "dropped_by_phase"), "masked")), 1);
    json_t *sa = json_object_get(e, "secagg");
    assert_int_equal(json_integer_value(json_object_get(sa, "n")), N);
    assert_true(json_integer_value(json_object_get(sa, "t")) >= 1);
    json_t *pv = json_object_get(e, "privacy");
    assert_true(json_integer_value(json_object_get(pv, "epsilon_spent_e9")) > 0);
    assert_int_equal(json_integer_value(json_object_get(pv, "epsilon_spent_e9")),
                     json_integer_value(json_object_get(pv, "epsilon_total_e9")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "regions"), "EU")), N);
    assert_string_not_equal(json_string_value(json_object_get(e, "coordinator")), "");
    assert_true(json_is_object(json_object_get(e, "model_out")));
    json_decref(e);
    proofs_verify(f, bundle);
    free(bundle);
    /* Admin-only bundle. */
    r = http_req(f, "GET", "/v1/admin/audit/bundle", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    clients_free(c, N);
}

/* A refused round appears as a budget_refused entry. */
static void test_refusal_logged(void **state) {
    struct fx *f = *state;
    enum { N = 4 };
    struct popcfg pc = {.name = "bud", .target = N, .min = 3, .secagg = true, .mode = "central",
                        .budget = 0.01};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", tok[0], ok);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "budget_exhausted");
    json_decref(j);
    resp_free(&r);
    char *bundle = bundle_verified(f);
    const char *e = strstr(bundle, "\"type\":\"budget_refused\"");
    assert_non_null(e);
    assert_null(strstr(e + 1, "\"type\":\"budget_refused\"")); /* once per streak */
    free(bundle);
    for (int i = 0; i < N; i++)
        free(tok[i]);
}

/* Counts the lines of the bundle with "type":"<type>". */
static int count_type(const char *bundle, const char *type) {
    char k[64];
    snprintf(k, sizeof(k), "\"type\":\"%s\"", type);
    int n = 0;
    for (const char *p = bundle; (p = strstr(p, k)) != NULL; p++)
        n++;
    return n;
}

static long patch(struct fx *f, const char *json) {
    struct resp r = http_json(f, "PATCH", "/v1/admin/populations/cfg", ADMIN_TOKEN, json);
    long st = r.status;
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "PATCH %s -> %ld %s\n", json, st, r.body ? r.body : "");
    resp_free(&r);
    return st;
}

/* Configuration changes: PATCH validates like creation and applies all or nothing; start,
 * stop and every accepted change append a config_changed entry (none for a refused one);
 * the budget can only go down; the bundle verifies with the new terms in it. */
static void test_config_changes_logged(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "cfg", .target = 4, .min = 3, .secagg = true, .mode = "central",
                        .budget = 10.0};
    char *tok[1];
    setup_population(f, &pc, tok, 1); /* created (paused), model, started */
    /* Accepted: selection, deadlines and regions in one change. */
    assert_int_equal(patch(f, "{\"selection\":{\"target\":6,\"min_participants\":4},"
                              "\"deadlines_s\":{\"masked\":90},"
                              "\"allowed_regions\":[\"EU\",\"US\"]}"),
                     200);
    struct resp r =
        http_req(f, "GET", "/v1/admin/populations/cfg", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *cfg = json_object_get(j, "config");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(cfg, "selection"), "target")), 6);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(cfg, "deadlines_s"), "masked")), 90);
    assert_int_equal(json_array_size(json_object_get(cfg, "allowed_regions")), 2);
    json_decref(j);
    resp_free(&r);
    /* Refused, nothing applied or logged: immutable fields, bad values (validated like a
     * creation), a budget increase, no-op bodies, a region outside the new list. */
    assert_int_equal(patch(f, "{\"name\":\"other\"}"), 400);
    assert_int_equal(patch(f, "{\"strategy\":{\"name\":\"fedadam\"}}"), 400);
    assert_int_equal(patch(f, "{\"privacy\":{\"noise_multiplier\":0.1}}"), 400);
    assert_int_equal(patch(f, "{\"selection\":{\"min_participants\":10}}"), 400); /* > target */
    assert_int_equal(patch(f, "{\"selection\":{\"target\":0}}"), 400);
    assert_int_equal(patch(f, "{\"deadlines_s\":{\"share\":0}}"), 400);
    assert_int_equal(patch(f, "{\"allowed_regions\":[]}"), 400);
    assert_int_equal(patch(f, "{\"privacy\":{\"epsilon_budget\":20}}"), 400);
    assert_int_equal(patch(f, "{}"), 400);
    assert_int_equal(patch(f, "[1]"), 400);
    r = http_json(f, "PUT", "/v1/admin/populations/cfg", ADMIN_TOKEN, "{}");
    assert_int_equal(r.status, 405);
    resp_free(&r);
    r = http_json(f, "PATCH", "/v1/admin/populations/cfg", NULL, "{\"selection\":{}}");
    assert_int_equal(r.status, 401);
    resp_free(&r);
    r = http_json(f, "PATCH", "/v1/admin/populations/nope", ADMIN_TOKEN,
                  "{\"selection\":{\"target\":5}}");
    assert_int_equal(r.status, 404);
    resp_free(&r);
    /* The refused min_participants left the population as it was. */
    r = http_req(f, "GET", "/v1/admin/populations/cfg", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    cfg = json_object_get(j, "config");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(cfg, "selection"), "min_participants")),
        4);
    json_decref(j);
    resp_free(&r);
    /* Accepted: the budget lowered. A device from a region no longer allowed is refused. */
    assert_int_equal(patch(f, "{\"privacy\":{\"epsilon_budget\":5}}"), 200);
    assert_int_equal(patch(f, "{\"allowed_regions\":[\"US\"]}"), 200);
    const char *eu = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true}}";
    r = http_json(f, "POST", "/v1/checkin", tok[0], eu);
    assert_int_not_equal(r.status, 500);
    assert_null(r.body ? strstr(r.body, "\"selected\"") : NULL);
    resp_free(&r);
    /* Stop and start again: two more entries. */
    r = http_json(f, "POST", "/v1/admin/populations/cfg/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/cfg/stop", ADMIN_TOKEN, NULL); /* no-op */
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/cfg/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    char *bundle = bundle_verified(f);
    /* start, 3 changes, stop, start */
    assert_int_equal(count_type(bundle, "population_created"), 1);
    assert_int_equal(count_type(bundle, "config_changed"), 6);
    /* The last one states the lowered budget and the new region list. */
    const char *last = bundle, *p = bundle;
    while ((p = strstr(p, "\"type\":\"config_changed\"")) != NULL)
        last = p++;
    const char *ls = last;
    while (ls > bundle && ls[-1] != '\n')
        ls--;
    json_t *e = json_loadb(ls, strcspn(ls, "\n"), 0, NULL);
    assert_non_null(e);
    json_t *ent = json_object_get(e, "entry") ? json_object_get(e, "entry") : e;
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "%.*s\n", (int)strcspn(ls, "\n"), ls);
    char *txt = json_dumps(ent, JSON_COMPACT);
    assert_non_null(strstr(txt, "\"epsilon_e9\":5000000000"));
    assert_non_null(strstr(txt, "\"allowed_regions\":[\"US\"]"));
    free(txt);
    json_decref(e);
    free(bundle);
    free(tok[0]);
}

/* Erasure: logged under the pseudonym (derived key), the client's rows and token gone. */
static void test_erasure(void **state) {
    struct fx *f = *state;
    enum { N = 2 };
    struct popcfg pc = {.name = "er", .target = N, .min = 2, .secagg = false, .mode = "none"};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    char cid[17];
    memcpy(cid, tok[0] + 4, 16);
    cid[16] = '\0';
    /* The client is in the forming round after a check-in: erase later. */
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", tok[0], ok);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%s/erase", cid);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/er/stop", ADMIN_TOKEN, NULL);
    resp_free(&r);
    r = http_json(f, "POST", path, NULL, NULL);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    /* Derived key: HMAC-SHA256(signing seed, "flotilla/v1/audit-pseudonym-key"). */
    uint8_t seed[32], key[32];
    memset(seed, 7, sizeof(seed));
    static const char label[] = "flotilla/v1/audit-pseudonym-key";
    crypto_auth_hmacsha256(key, (const uint8_t *)label, sizeof(label) - 1, seed);
    char pseudo[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    assert_int_equal(fl_store_audit_pseudonym(pseudo, key, cid), FL_OK);
    assert_string_equal(json_string_value(json_object_get(j, "pseudonym")), pseudo);
    json_decref(j);
    resp_free(&r);
    char q[128];
    snprintf(q, sizeof(q), "SELECT count(*) FROM clients WHERE client_id = '%s'", cid);
    assert_int_equal(db_int(f, q), 0);
    snprintf(q, sizeof(q), "SELECT count(*) FROM round_participants WHERE client_id = '%s'", cid);
    assert_int_equal(db_int(f, q), 0);
    r = http_json(f, "POST", "/v1/checkin", tok[0], ok);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    char *bundle = bundle_verified(f);
    assert_non_null(strstr(bundle, "\"type\":\"erasure\""));
    assert_non_null(strstr(bundle, pseudo));
    assert_null(strstr(bundle, cid));
    free(bundle);
    for (int i = 0; i < N; i++)
        free(tok[i]);
}

static int64_t test_clock(void *user) {
    return atomic_load(&((struct fx *)user)->now_ms);
}

/* Retention: a client not seen for longer than retention_days is deleted by the timer. */
static void test_retention_sweep(void **state) {
    struct fx *f = *state;
    enum { N = 1 };
    struct popcfg pc = {.name = "rt", .target = 2, .min = 2, .secagg = false, .mode = "none"};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    fx_stop(f);
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.db_path = f->db;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.clock = test_clock;
    cfg.clock_user = f;
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    cfg.retention_days = 1;
    char err[256];
    assert_int_equal(fl_coord_create(&f->co, &cfg, err, sizeof(err)), FL_OK);
    assert_int_equal(fl_coord_start(f->co), FL_OK);
    f->port = fl_coord_port(f->co);
    fl_coord_tick(f->co); /* first sweep: nothing old yet */
    atomic_fetch_add(&f->now_ms, 2 * 86400 * 1000LL);
    fl_coord_tick(f->co);
    assert_int_equal(db_int(f, "SELECT count(*) FROM clients"), 0);
    char *bundle = bundle_verified(f);
    const char *e = strstr(bundle, "\"type\":\"retention\"");
    assert_non_null(e);
    assert_non_null(strstr(bundle, "\"deleted\":{\"clients\":1"));
    free(bundle);
    free(tok[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_logged_and_verified, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_refusal_logged, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_erasure, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_config_changes_logged, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_retention_sweep, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
