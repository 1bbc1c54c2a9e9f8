/* Request validation of the device and admin endpoints (docs/protocol.md, docs/openapi.yaml):
 * every malformed field of an enrolment, a check-in, a population config (creation and
 * PATCH), a model upload, the round/model/task paths and the admin query parameters gets its
 * documented 4xx with the error code and the field it names, and changes nothing in storage;
 * the check-in outcomes that depend on the device's facts (eligibility, examples, secagg
 * capability) and on the population (stopped, round full, budget) answer the documented
 * retry reasons. Runs the coordinator in-process (coord_testkit.c). */
#include <sqlite3.h>

#include "coord_testkit.h"

/* ---- helpers ---- */

#define POP_BASE "\"allowed_regions\":[\"EU\",\"US\"]"

/* Creates population name with the extra top-level JSON members (may be ""); returns the
 * enrollment token (malloc'ed). */
static char *create_pop(struct fx *f, const char *name, const char *extra) {
    char body[2048];
    snprintf(body, sizeof(body), "{\"name\":\"%s\"," POP_BASE "%s%s}", name, *extra ? "," : "",
             extra);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201)
        fprintf(stderr, "create %s: %s\n", name, r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *tok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    return tok;
}

static void upload_and_start(struct fx *f, const char *name) {
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    pop_model_start(f, name, model, mlen);
    free(model);
}

static char *enroll(struct fx *f, const char *etok, const char *pop) {
    char body[256];
    snprintf(body, sizeof(body), "{\"population\":\"%s\",\"region\":\"EU\"}", pop);
    struct resp r = http_json(f, "POST", "/v1/enroll", etok, body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *tok = strdup(json_string_value(json_object_get(j, "client_token")));
    json_decref(j);
    resp_free(&r);
    return tok;
}

/* Asserts an error answer: status, code and (when field is not NULL) the field named. */
static void expect_error(struct resp *r, long status, const char *code, const char *field,
                         const char *what) {
    if (r->status != status)
        fprintf(stderr, "%s: expected %ld, got %ld: %s\n", what, status, r->status,
                r->body ? r->body : "");
    assert_error(r, status, code);
    if (field) {
        json_t *j = body_json(r);
        const char *got =
            json_string_value(json_object_get(json_object_get(j, "error"), "field"));
        if (!got || strcmp(got, field) != 0)
            fprintf(stderr, "%s: expected field %s: %s\n", what, field, r->body);
        assert_non_null(got);
        assert_string_equal(got, field);
        json_decref(j);
    }
}

/* Row counts of the tables a refused request must not touch. */
static void fingerprint(struct fx *f, char *out, size_t n) {
    snprintf(out, n, "%lld/%lld/%lld/%lld/%lld",
             (long long)db_int(f, "SELECT count(*) FROM populations"),
             (long long)db_int(f, "SELECT count(*) FROM clients"),
             (long long)db_int(f, "SELECT count(*) FROM models"),
             (long long)db_int(f, "SELECT count(*) FROM rounds"),
             (long long)db_int(f, "SELECT count(*) FROM audit_entries"));
}

static json_t *status_of(struct resp *r, const char *want_status, const char *want_reason) {
    assert_int_equal(r->status, 200);
    json_t *j = body_json(r);
    const char *st = json_string_value(json_object_get(j, "status"));
    if (strcmp(st, want_status) != 0 ||
        (want_reason && strcmp(json_string_value(json_object_get(j, "reason")), want_reason)))
        fprintf(stderr, "expected %s/%s: %s\n", want_status, want_reason ? want_reason : "",
                r->body);
    assert_string_equal(st, want_status);
    if (want_reason)
        assert_string_equal(json_string_value(json_object_get(j, "reason")), want_reason);
    return j;
}

/* ---- enrolment ---- */

static void test_enroll_fields(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "en", "");
    static const struct {
        const char *body;
        long status;
        const char *code, *field;
    } cases[] = {
        {"{\"population\":\"en\",\"region\":\"EU\",\"platform\":5}", 400, "invalid_field",
         "platform"},
        {"{\"population\":\"en\",\"region\":\"EU\",\"platform\":"
         "\"123456789012345678901234567890123\"}", 400, "invalid_field", "platform"},
        {"{\"population\":\"en\",\"region\":\"EU\",\"sdk_version\":[]}", 400, "invalid_field",
         "sdk_version"},
        {"{\"region\":\"EU\"}", 400, "missing_field", "population"},
        {"{}", 400, "missing_field", "population"},
        {"{\"population\":7,\"region\":\"EU\"}", 400, "invalid_field", "population"},
        {"{\"population\":\"a b\",\"region\":\"EU\"}", 400, "invalid_field", "population"},
        {"{\"population\":\"\",\"region\":\"EU\"}", 400, "invalid_field", "population"},
        {"{\"population\":\"en\",\"region\":\"E.U\"}", 400, "invalid_field", "region"},
        {"{\"population\":\"en\",\"region\":\"123456789012345678901234567890123\"}", 400,
         "invalid_field", "region"},
        {"{\"population\":\"en\",\"region\":\"AS\"}", 403, "region_not_allowed", "region"},
    };
    char before[128], after[128];
    fingerprint(f, before, sizeof(before));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct resp r = http_json(f, "POST", "/v1/enroll", etok, cases[i].body);
        expect_error(&r, cases[i].status, cases[i].code, cases[i].field, cases[i].body);
        resp_free(&r);
    }
    fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);
    /* Every optional field at its limit is accepted. */
    struct resp r = http_json(f, "POST", "/v1/enroll", etok,
                              "{\"population\":\"en\",\"region\":\"US\",\"platform\":"
                              "\"12345678901234567890123456789012\",\"sdk_version\":\"1.0\"}");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    free(etok);
}

/* ---- check-in ---- */

static void test_checkin_fields(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "ck", "");
    upload_and_start(f, "ck");
    char *tok = enroll(f, etok, "ck");
#define ELIG "\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true"
    static const struct {
        const char *body, *code, *field;
    } cases[] = {
        {"{" ELIG "}}", "missing_field", "region"},
        {"{\"region\":5," ELIG "}}", "invalid_field", "region"},
        {"{\"region\":\"\"," ELIG "}}", "invalid_field", "region"},
        {"{\"region\":\"EU\"}", "missing_field", "eligibility"},
        {"{\"region\":\"EU\",\"eligibility\":[]}", "invalid_field", "eligibility"},
        {"{\"region\":\"EU\",\"eligibility\":{\"unmetered\":true,\"idle\":true}}",
         "missing_field", "eligibility.charging"},
        {"{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":1,\"idle\":true}}",
         "invalid_field", "eligibility.unmetered"},
        {"{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":"
         "\"yes\"}}", "invalid_field", "eligibility.idle"},
        {"{\"region\":\"EU\"," ELIG ",\"battery_pct\":101}}", "invalid_field",
         "eligibility.battery_pct"},
        {"{\"region\":\"EU\"," ELIG ",\"battery_pct\":-1}}", "invalid_field",
         "eligibility.battery_pct"},
        {"{\"region\":\"EU\"," ELIG ",\"battery_pct\":50.5}}", "invalid_field",
         "eligibility.battery_pct"},
        {"{\"region\":\"EU\"," ELIG ",\"examples\":-3}}", "invalid_field",
         "eligibility.examples"},
        {"{\"region\":\"EU\"," ELIG ",\"examples\":\"9\"}}", "invalid_field",
         "eligibility.examples"},
        {"{\"region\":\"EU\"," ELIG "},\"sdk_version\":false}", "invalid_field", "sdk_version"},
        {"{\"region\":\"EU\"," ELIG "},\"capabilities\":true}", "invalid_field",
         "capabilities"},
        {"{\"region\":\"EU\"," ELIG "},\"capabilities\":{\"secagg\":\"on\"}}", "invalid_field",
         "capabilities.secagg"},
        {"{\"region\":\"EU\"," ELIG "},\"capabilities\":{\"max_model_bytes\":-1}}",
         "invalid_field", "capabilities.max_model_bytes"},
        {"{\"region\":\"EU\"," ELIG "},\"capabilities\":{\"max_model_bytes\":2.5}}",
         "invalid_field", "capabilities.max_model_bytes"},
    };
    char before[128], after[128];
    fingerprint(f, before, sizeof(before));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct resp r = http_json(f, "POST", "/v1/checkin", tok, cases[i].body);
        expect_error(&r, 400, cases[i].code, cases[i].field, cases[i].body);
        resp_free(&r);
    }
    /* Not a client token, or an unknown one. */
    struct resp r = http_json(f, "POST", "/v1/checkin", etok, "{}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", "flc_0000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                  "{}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", "flc_zzzzzzzzzzzzzzzz.AAAA", "{}");
    assert_error(&r, 401, "unauthorized");
    resp_free(&r);
    fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);
    free(tok);
    free(etok);
#undef ELIG
}

/* The device's facts against the population's rules: each refusal is a retry with its
 * reason (a fresh device each time: a retry answer paces the device). */
static void test_checkin_outcomes(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "out",
                            "\"selection\":{\"target\":3,\"over_selection\":1.0,"
                            "\"min_participants\":3,\"min_examples\":10,\"require\":"
                            "[\"charging\",\"unmetered\",\"idle\"],\"jitter_s\":5,"
                            "\"min_retry_s\":2,\"max_retry_s\":40},"
                            "\"secagg\":{\"enabled\":true}");
    char *tok[9];
    for (int i = 0; i < 9; i++)
        tok[i] = enroll(f, etok, "out");
    const char *full = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                       "\"idle\":true,\"examples\":50,\"battery_pct\":80},"
                       "\"capabilities\":{\"secagg\":true,\"max_model_bytes\":1000000}}";
    /* No model, not started: population_stopped, Retry-After within [min, max] retry. */
    struct resp r = http_json(f, "POST", "/v1/checkin", tok[0], full);
    json_t *j = status_of(&r, "retry", "population_stopped");
    int64_t ra = json_integer_value(json_object_get(j, "retry_after_s"));
    assert_true(ra >= 2 && ra <= 40);
    json_decref(j);
    resp_free(&r);
    /* Checking in again at once (before 90% of the wait): 429. */
    r = http_json(f, "POST", "/v1/checkin", tok[0], full);
    assert_error(&r, 429, "rate_limited");
    resp_free(&r);
    upload_and_start(f, "out");
    static const struct {
        const char *body, *reason;
    } refusals[] = {
        {"{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":false,"
         "\"examples\":50}}", "not_eligible"},
        {"{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true,"
         "\"examples\":9}}", "not_eligible"},
        {"{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true}}",
         "not_eligible"}, /* examples not given while min_examples is set */
        {"{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true,"
         "\"examples\":10},\"capabilities\":{\"secagg\":false}}", "secagg_required"},
    };
    for (int i = 0; i < 4; i++) {
        r = http_json(f, "POST", "/v1/checkin", tok[1 + i], refusals[i].body);
        json_decref(status_of(&r, "retry", refusals[i].reason));
        resp_free(&r);
    }
    /* A region the population does not take: 403, the check-in counted as rejected. */
    r = http_json(f, "POST", "/v1/checkin", tok[5],
                  "{\"region\":\"AS\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                  "\"idle\":true,\"examples\":50}}");
    expect_error(&r, 403, "region_not_allowed", "region", "region");
    resp_free(&r);
    /* Three selected (the round starts, cap 3), the fourth finds it full. */
    for (int i = 5; i < 8; i++) {
        r = http_json(f, "POST", "/v1/checkin", tok[i], full);
        json_decref(status_of(&r, "selected", NULL));
        resp_free(&r);
    }
    r = http_json(f, "POST", "/v1/checkin", tok[8], full);
    json_decref(status_of(&r, "retry", "round_full"));
    resp_free(&r);
    /* A selected device that checks in again gets its participation back. */
    r = http_json(f, "POST", "/v1/checkin", tok[5], full);
    json_decref(status_of(&r, "selected", NULL));
    resp_free(&r);
    for (int i = 0; i < 9; i++)
        free(tok[i]);
    free(etok);
}

/* ---- population config (creation) ---- */

static void test_population_config_fields(void **state) {
    struct fx *f = *state;
    static const struct {
        const char *extra; /* top-level members after name and allowed_regions */
        const char *code, *field;
    } cases[] = {
        {"\"data_schema\":[]", "invalid_field", "data_schema"},
        {"\"selection\":3", "invalid_field", "selection"},
        {"\"selection\":{\"target\":100001}", "invalid_field", "selection.target"},
        {"\"selection\":{\"target\":\"5\"}", "invalid_field", "selection.target"},
        {"\"selection\":{\"over_selection\":0.5}", "invalid_field", "selection.over_selection"},
        {"\"selection\":{\"over_selection\":3.5}", "invalid_field", "selection.over_selection"},
        {"\"selection\":{\"over_selection\":\"x\"}", "invalid_field", "selection.over_selection"},
        {"\"selection\":{\"target\":5,\"min_participants\":6}", "invalid_field",
         "selection.min_participants"},
        {"\"selection\":{\"min_examples\":-1}", "invalid_field", "selection.min_examples"},
        {"\"selection\":{\"forming_s\":0}", "invalid_field", "selection.forming_s"},
        {"\"selection\":{\"jitter_s\":86401}", "invalid_field", "selection.jitter_s"},
        {"\"selection\":{\"min_retry_s\":0}", "invalid_field", "selection.min_retry_s"},
        {"\"selection\":{\"max_retry_s\":0}", "invalid_field", "selection.max_retry_s"},
        {"\"selection\":{\"round_interval_s\":-1}", "invalid_field",
         "selection.round_interval_s"},
        {"\"selection\":{\"min_retry_s\":50,\"max_retry_s\":40}", "invalid_field",
         "selection.min_retry_s"},
        {"\"selection\":{\"require\":\"charging\"}", "invalid_field", "selection.require"},
        {"\"selection\":{\"require\":[\"sunny\"]}", "invalid_field", "selection.require"},
        {"\"selection\":{\"require\":[1]}", "invalid_field", "selection.require"},
        {"\"enrollment\":true", "invalid_field", "enrollment"},
        {"\"enrollment\":{\"max_per_minute\":-1}", "invalid_field", "enrollment.max_per_minute"},
        {"\"enrollment\":{\"max_clients\":1000000001}", "invalid_field",
         "enrollment.max_clients"},
        {"\"deadlines_s\":[]", "invalid_field", "deadlines_s"},
        {"\"deadlines_s\":{\"advertise\":0}", "invalid_field", "deadlines_s.advertise"},
        {"\"deadlines_s\":{\"unmask\":86401}", "invalid_field", "deadlines_s.unmask"},
        {"\"training\":null", "invalid_field", "training"},
        {"\"training\":{\"epochs\":0}", "invalid_field", "training.epochs"},
        {"\"training\":{\"batch_size\":65537}", "invalid_field", "training.batch_size"},
        {"\"training\":{\"learning_rate\":0}", "invalid_field", "training.learning_rate"},
        {"\"training\":{\"learning_rate\":1e7}", "invalid_field", "training.learning_rate"},
        {"\"training\":{\"max_examples\":0}", "invalid_field", "training.max_examples"},
        {"\"update\":1", "invalid_field", "update"},
        {"\"update\":{\"weighting\":\"votes\"}", "invalid_field", "update.weighting"},
        {"\"update\":{\"weighting\":3}", "invalid_field", "update.weighting"},
        {"\"update\":{\"weight_cap\":0}", "invalid_field", "update.weight_cap"},
        {"\"update\":{\"tensors\":\"w\"}", "invalid_field", "update.tensors"},
        {"\"strategy\":\"fedavg\"", "invalid_field", "strategy"},
        {"\"strategy\":{\"name\":\"fedsgd\"}", "invalid_field", "strategy.name"},
        {"\"strategy\":{\"server_lr\":0}", "invalid_field", "strategy.server_lr"},
        {"\"strategy\":{\"name\":\"fedavgm\",\"momentum\":1.5}", "invalid_field",
         "strategy.momentum"},
        {"\"strategy\":{\"name\":\"fedprox\",\"proximal_mu\":-1}", "invalid_field",
         "strategy.proximal_mu"},
        {"\"strategy\":{\"name\":\"fedadam\",\"beta1\":2}", "invalid_field", "strategy.beta1"},
        {"\"strategy\":{\"name\":\"fedyogi\",\"beta2\":-0.1}", "invalid_field",
         "strategy.beta2"},
        {"\"strategy\":{\"name\":\"fedadagrad\",\"tau\":0}", "invalid_field", "strategy.tau"},
        {"\"strategy\":{\"name\":\"fedbuff\",\"buffer_size\":0}", "invalid_field",
         "strategy.buffer_size"},
        {"\"strategy\":{\"name\":\"fedbuff\",\"max_concurrency\":0}", "invalid_field",
         "strategy.max_concurrency"},
        {"\"strategy\":{\"name\":\"fedbuff\",\"staleness_alpha\":101}", "invalid_field",
         "strategy.staleness_alpha"},
        {"\"strategy\":{\"name\":\"fedbuff\",\"max_staleness\":-1}", "invalid_field",
         "strategy.max_staleness"},
        {"\"strategy\":{\"name\":\"fedbuff\"},\"secagg\":{\"enabled\":false},"
         "\"privacy\":{\"mode\":\"distributed\"}", "invalid_field", "privacy.mode"},
        {"\"secagg\":[]", "invalid_field", "secagg"},
        {"\"secagg\":{\"enabled\":\"yes\"}", "invalid_field", "enabled"},
        {"\"secagg\":{\"neighbors\":65536}", "invalid_field", "secagg.neighbors"},
        {"\"secagg\":{\"threshold_fraction\":0.4}", "invalid_field",
         "secagg.threshold_fraction"},
        {"\"secagg\":{\"consistency_check\":1}", "invalid_field", "consistency_check"},
        /* active mode needs the device authority's key (test_secagg_active.c) */
        {"\"secagg\":{\"consistency_check\":true}", "invalid_field", "secagg.authority_key"},
        {"\"secagg\":{\"enabled\":false,\"consistency_check\":true}", "invalid_field",
         "secagg.consistency_check"},
        {"\"privacy\":false", "invalid_field", "privacy"},
        {"\"privacy\":{\"mode\":\"local\"}", "invalid_field", "privacy.mode"},
        {"\"privacy\":{\"modulus_bits\":33}", "invalid_field", "privacy.modulus_bits"},
        {"\"secagg\":{\"enabled\":false},\"privacy\":{\"modulus_bits\":63}", "invalid_field",
         "privacy.modulus_bits"},
        {"\"privacy\":{\"modulus_bits\":7}", "invalid_field", "privacy.modulus_bits"},
        {"\"privacy\":{\"rotation\":\"dct\"}", "invalid_field", "privacy.rotation"},
        {"\"privacy\":{\"rotation\":\"hadamard\"}", "invalid_field", "privacy.rotation"},
        {"\"privacy\":{\"mode\":\"distributed\",\"rotation\":\"none\"}", "invalid_field",
         "privacy.rotation"},
        {"\"privacy\":{\"clip_norm\":0}", "invalid_field", "privacy.clip_norm"},
        {"\"privacy\":{\"granularity\":-1}", "invalid_field", "privacy.granularity"},
        {"\"privacy\":{\"mode\":\"central\",\"noise_multiplier\":0}", "invalid_field",
         "privacy.noise_multiplier"},
        {"\"privacy\":{\"mode\":\"central\",\"epsilon_budget\":0}", "invalid_field",
         "privacy.epsilon_budget"},
        {"\"privacy\":{\"mode\":\"central\",\"delta\":0}", "invalid_field", "privacy.delta"},
        {"\"privacy\":{\"mode\":\"central\",\"delta\":1}", "invalid_field", "privacy.delta"},
        {"\"privacy\":{\"mode\":\"central\",\"population_size\":0}", "invalid_field",
         "privacy.population_size"},
        {"\"privacy\":{\"mode\":\"central\"},\"update\":{\"weighting\":\"examples\"}",
         "invalid_field", "update.weighting"},
    };
    char before[128], after[128], body[1024];
    fingerprint(f, before, sizeof(before));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(body, sizeof(body), "{\"name\":\"cfg\"," POP_BASE ",%s}", cases[i].extra);
        struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
        expect_error(&r, 400, cases[i].code, cases[i].field, cases[i].extra);
        resp_free(&r);
    }
    /* The name and regions themselves. */
    static const struct {
        const char *body, *code, *field;
    } top[] = {
        {"{\"allowed_regions\":[\"EU\"]}", "missing_field", "name"},
        {"{\"name\":5,\"allowed_regions\":[\"EU\"]}", "invalid_field", "name"},
        {"{\"name\":\"x\"}", "missing_field", "allowed_regions"},
        {"{\"name\":\"x\",\"allowed_regions\":[]}", "invalid_field", "allowed_regions"},
        {"{\"name\":\"x\",\"allowed_regions\":\"EU\"}", "invalid_field", "allowed_regions"},
        {"{\"name\":\"x\",\"allowed_regions\":[\"EU\",3]}", "invalid_field", "allowed_regions"},
        {"{\"name\":\"x\",\"allowed_regions\":[\"E U\"]}", "invalid_field", "allowed_regions"},
    };
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++) {
        struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, top[i].body);
        expect_error(&r, 400, top[i].code, top[i].field, top[i].body);
        resp_free(&r);
    }
    fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);
    /* Valid non-default strategies and modes are stored with their defaults filled in. */
    static const char *const ok[] = {
        "\"strategy\":{\"name\":\"fedavgm\"}",
        "\"strategy\":{\"name\":\"fedprox\",\"proximal_mu\":0.5}",
        "\"strategy\":{\"name\":\"fedadam\"}",
        "\"strategy\":{\"name\":\"fedyogi\"}",
        "\"strategy\":{\"name\":\"fedadagrad\"}",
        "\"strategy\":{\"name\":\"fedbuff\"}",
        ("\"privacy\":{\"mode\":\"distributed\"},\"selection\":{\"require\":[\"idle\"]},"
         "\"data_schema\":{\"x\":\"f32\"}"),
        "\"privacy\":{\"mode\":\"central\",\"rotation\":\"none\"}",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "ok%zu", i);
        free(create_pop(f, name, ok[i]));
    }
    struct resp r = http_req(f, "GET", "/v1/admin/populations/ok2", ADMIN_TOKEN, NULL, NULL, 0,
                             NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"beta2\""));
    assert_non_null(strstr(r.body, "\"tau\""));
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/ok6", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"hadamard\""));
    resp_free(&r);
}

/* ---- admin: PATCH, models, rounds ---- */

static void test_admin_patch_fields(void **state) {
    struct fx *f = *state;
    free(create_pop(f, "pa", ""));
    free(create_pop(f, "pdp", "\"privacy\":{\"mode\":\"central\",\"epsilon_budget\":4}"));
    static const struct {
        const char *pop, *body;
        long status;
        const char *code, *field;
    } cases[] = {
        {"pa", "{}", 400, "invalid_field", NULL},
        {"pa", "{\"name\":\"other\"}", 400, "invalid_field", "name"},
        {"pa", "{\"strategy\":{\"name\":\"fedadam\"}}", 400, "invalid_field", "strategy"},
        {"pa", "{\"selection\":7}", 400, "invalid_field", "selection"},
        {"pa", "{\"selection\":{\"cap\":3}}", 400, "invalid_field", "selection.cap"},
        {"pa", "{\"deadlines_s\":{\"consistency\":5,\"later\":1}}", 400, "invalid_field",
         "deadlines_s.later"},
        {"pa", "{\"enrollment\":{\"max_total\":1}}", 400, "invalid_field",
         "enrollment.max_total"},
        {"pa", "{\"privacy\":{\"mode\":\"none\"}}", 400, "invalid_field", "privacy.mode"},
        {"pa", "{\"privacy\":{\"epsilon_budget\":1}}", 400, "invalid_field",
         "privacy.epsilon_budget"},
        {"pdp", "{\"privacy\":{\"epsilon_budget\":5}}", 400, "invalid_field",
         "privacy.epsilon_budget"},
        {"pdp", "{\"privacy\":{\"epsilon_budget\":\"2\"}}", 400, "invalid_field",
         "privacy.epsilon_budget"},
        {"pa", "{\"selection\":{\"target\":0}}", 400, "invalid_field", "selection.target"},
        {"pa", "{\"allowed_regions\":[]}", 400, "invalid_field", "allowed_regions"},
        {"pa", "{\"enrollment\":{\"max_clients\":-2}}", 400, "invalid_field",
         "enrollment.max_clients"},
        {"nope", "{\"selection\":{\"target\":3}}", 404, "not_found", "population"},
    };
    char before[128], after[128], path[96];
    fingerprint(f, before, sizeof(before));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(path, sizeof(path), "/v1/admin/populations/%s", cases[i].pop);
        struct resp r = http_json(f, "PATCH", path, ADMIN_TOKEN, cases[i].body);
        expect_error(&r, cases[i].status, cases[i].code, cases[i].field, cases[i].body);
        resp_free(&r);
    }
    fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);
    /* Accepted: lower budget, every mutable group, regions "*" (any). */
    struct resp r = http_json(f, "PATCH", "/v1/admin/populations/pdp", ADMIN_TOKEN,
                              "{\"privacy\":{\"epsilon_budget\":3},\"allowed_regions\":[\"*\"],"
                              "\"selection\":{\"target\":7,\"min_participants\":5},"
                              "\"deadlines_s\":{\"share\":9},"
                              "\"enrollment\":{\"max_per_minute\":5,\"max_clients\":10}}");
    if (r.status != 200)
        fprintf(stderr, "patch: %s\n", r.body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/pdp", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"epsilon_budget\":3"));
    assert_non_null(strstr(r.body, "\"share\":9"));
    assert_non_null(strstr(r.body, "\"min_participants\":5"));
    resp_free(&r);
    /* The audit log took one config_changed entry. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries"),
                     strtoll(strrchr(before, '/') + 1, NULL, 10) + 1);
}

static void test_admin_models_and_rounds(void **state) {
    struct fx *f = *state;
    free(create_pop(f, "mr", ""));
    char before[128], after[128];
    fingerprint(f, before, sizeof(before));
    /* Not safetensors: too short, header length beyond the body, header not an object. */
    uint8_t bad1[9] = {0};
    uint8_t bad2[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    uint8_t bad3[16] = {3, 0, 0, 0, 0, 0, 0, 0, '[', '1', ']'};
    uint8_t bad4[16] = {1, 0, 0, 0, 0, 0, 0, 0, '{'};
    const uint8_t *bads[] = {bad1, bad2, bad3, bad4};
    size_t lens[] = {sizeof(bad1), sizeof(bad2), 11, 9 + 2};
    for (int i = 0; i < 4; i++) {
        struct resp r = http_req(f, "POST", "/v1/admin/populations/mr/models", ADMIN_TOKEN,
                                 "application/octet-stream", bads[i], lens[i], NULL);
        expect_error(&r, 400, "invalid_message", NULL, "model");
        resp_free(&r);
    }
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    struct resp r = http_req(f, "POST", "/v1/admin/populations/mr/models", ADMIN_TOKEN,
                             "text/plain", model, mlen, NULL);
    assert_int_equal(r.status / 100, 4); /* 415: models are application/octet-stream */
    assert_int_equal(r.status, 415);
    resp_free(&r);
    /* Round and list parameters. */
    static const struct {
        const char *path;
        long status;
        const char *code, *field;
    } cases[] = {
        {"/v1/admin/rounds/abc", 400, "invalid_parameter", "round_id"},
        {"/v1/admin/rounds/0", 400, "invalid_parameter", "round_id"},
        {"/v1/admin/rounds/-4", 400, "invalid_parameter", "round_id"},
        {"/v1/admin/rounds/12345678901234567890", 400, "invalid_parameter", "round_id"},
        {"/v1/admin/rounds/999", 404, "not_found", "round_id"},
        {"/v1/admin/populations/mr/rounds?limit=0", 400, "invalid_parameter", "limit"},
        {"/v1/admin/populations/mr/rounds?limit=1001", 400, "invalid_parameter", "limit"},
        {"/v1/admin/populations/mr/rounds?limit=ten", 400, "invalid_parameter", "limit"},
        {"/v1/admin/populations/mr/rounds?limit=", 400, "invalid_parameter", "limit"},
        {"/v1/admin/populations/zz/rounds", 404, "not_found", "population"},
        {"/v1/admin/populations/zz", 404, "not_found", "population"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = http_req(f, "GET", cases[i].path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
        expect_error(&r, cases[i].status, cases[i].code, cases[i].field, cases[i].path);
        resp_free(&r);
    }
    fingerprint(f, after, sizeof(after));
    assert_string_equal(before, after);
    /* Without a Content-Type a model upload is taken as octet-stream. */
    struct resp ru;
    memset(&ru, 0, sizeof(ru));
    CURL *cu = curl_easy_init();
    struct curl_slist *hl = http_prepare(f, cu, "POST", "/v1/admin/populations/mr/models",
                                         ADMIN_TOKEN, NULL, model, mlen, NULL, &ru);
    hl = curl_slist_append(hl, "Content-Type:");
    curl_easy_setopt(cu, CURLOPT_HTTPHEADER, hl);
    assert_int_equal(curl_easy_perform(cu), CURLE_OK);
    curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &ru.status);
    assert_int_equal(ru.status, 201);
    curl_slist_free_all(hl);
    curl_easy_cleanup(cu);
    resp_free(&ru);
    /* No rounds yet: an empty list; limit 1000 accepted. */
    r = http_req(f, "GET", "/v1/admin/populations/mr/rounds?limit=1000", ADMIN_TOKEN, NULL, NULL,
                 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "rounds")), 0);
    json_decref(j);
    resp_free(&r);
    free(model);
}

/* Rounds listed with limits, and one round's record in each state it passes through. */
static void test_admin_round_listing(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "ls", .target = 2, .min = 2, .secagg = false, .mode = "none"};
    struct tc c[2];
    memset(c, 0, sizeof(c));
    char *toks[2];
    setup_population(f, &pc, toks, 2);
    for (int i = 0; i < 2; i++)
        c[i].tok = toks[i];
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    assert_int_equal(json_integer_value(json_object_get(j, "selected")), 2);
    assert_true(json_is_object(json_object_get(j, "phase_counts")));
    json_decref(j);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/ls", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "round_state")), "running");
    assert_int_equal(json_integer_value(json_object_get(j, "round_selected")), 2);
    json_decref(j);
    resp_free(&r);
    /* Stopping abandons it; the record says why. */
    r = http_json(f, "POST", "/v1/admin/populations/ls/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "stopped by admin");
    assert_true(json_is_integer(json_object_get(j, "ended_unix_ms")));
    json_decref(j);
    resp_free(&r);
    /* A second round after restarting; the list holds both, newest first; limit 1 one. */
    r = http_json(f, "POST", "/v1/admin/populations/ls/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/ls/start", ADMIN_TOKEN, NULL); /* again */
    assert_int_equal(r.status, 200);
    resp_free(&r);
    fx_advance(f, 61 * 1000); /* past the retry steering */
    int64_t rid2 = 0;
    checkin_all(f, c, 2, &rid2);
    assert_true(rid2 > rid);
    /* The previous round, while another is current: its live figures still come along. */
    r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "abandoned");
    assert_true(json_is_object(json_object_get(j, "dropped_by_phase")));
    json_decref(j);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/ls/rounds", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    j = body_json(&r);
    json_t *list = json_object_get(j, "rounds");
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "round_id")),
                     rid2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "state")),
                        "abandoned");
    json_decref(j);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/admin/populations/ls/rounds?limit=1", ADMIN_TOKEN, NULL, NULL, 0,
                 NULL);
    j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "rounds")), 1);
    json_decref(j);
    resp_free(&r);
    clients_free(c, 2);
}

/* ---- device paths: task and model ---- */

static void test_task_and_model_paths(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "tm", .target = 2, .min = 2, .secagg = false, .mode = "none"};
    struct tc c[3];
    memset(c, 0, sizeof(c));
    char *toks[3];
    setup_population(f, &pc, toks, 3);
    for (int i = 0; i < 3; i++)
        c[i].tok = toks[i];
    /* One device selected: the round forms; its task is not ready yet (425, Retry-After). */
    int64_t rid = 0;
    checkin_all(f, c, 1, &rid);
    char path[128], hb[32];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    expect_error(&r, 425, "phase_not_open", NULL, "task while forming");
    assert_non_null(header_in(&r, "Retry-After", hb, sizeof(hb)));
    resp_free(&r);
    /* Without the Idempotency-Key (participation id), or with another's. */
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, NULL);
    expect_error(&r, 400, "missing_field", "Idempotency-Key", "no key");
    resp_free(&r);
    checkin_all(f, c + 1, 1, &rid); /* fills the round: it starts */
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[1].pid);
    assert_int_equal(r.status / 100, 4);
    resp_free(&r);
    r = http_req(f, "GET", path, c[2].tok, NULL, NULL, 0, c[0].pid); /* not selected */
    assert_int_equal(r.status / 100, 4);
    resp_free(&r);
    static const char *const bad_ids[] = {"/v1/rounds/x/task", "/v1/rounds/0/task",
                                          "/v1/rounds/-1/task"};
    for (int i = 0; i < 3; i++) {
        r = http_req(f, "GET", bad_ids[i], c[0].tok, NULL, NULL, 0, c[0].pid);
        expect_error(&r, 400, "invalid_parameter", "round_id", bad_ids[i]);
        resp_free(&r);
    }
    r = http_req(f, "GET", "/v1/rounds/987654/task", c[0].tok, NULL, NULL, 0, c[0].pid);
    expect_error(&r, 410, "round_closed", NULL, "unknown round");
    resp_free(&r);
    /* The plain task is built and signed once: both devices get the same bytes. */
    struct resp t0 = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
    struct resp t1 = http_req(f, "GET", path, c[1].tok, NULL, NULL, 0, c[1].pid);
    assert_int_equal(t0.status, 200);
    assert_int_equal(t1.status, 200);
    assert_int_equal(t0.len, t1.len);
    assert_memory_equal(t0.body, t1.body, t0.len);
    char s0[128], s1[128];
    assert_non_null(header_in(&t0, "Flotilla-Signature", s0, sizeof(s0)));
    assert_non_null(header_in(&t1, "Flotilla-Signature", s1, sizeof(s1)));
    assert_string_equal(s0, s1);
    resp_free(&t0);
    resp_free(&t1);
    /* Models: another population's name, a bad version, an unknown one; then 200 and 304. */
    static const char *const nf[] = {"/v1/models/other/1", "/v1/models/tm/v1",
                                     "/v1/models/tm/0", "/v1/models/tm/99"};
    for (int i = 0; i < 4; i++) {
        r = http_req(f, "GET", nf[i], c[0].tok, NULL, NULL, 0, NULL);
        expect_error(&r, 404, "not_found", NULL, nf[i]);
        resp_free(&r);
    }
    r = http_req(f, "GET", "/v1/models/tm/1", c[0].tok, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    char etag[96];
    assert_non_null(header_in(&r, "ETag", etag, sizeof(etag)));
    resp_free(&r);
    CURL *cu = curl_easy_init();
    struct resp r2;
    memset(&r2, 0, sizeof(r2));
    struct curl_slist *h =
        http_prepare(f, cu, "GET", "/v1/models/tm/1", c[0].tok, NULL, NULL, 0, NULL, &r2);
    char inm[160];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", etag);
    h = curl_slist_append(h, inm);
    curl_easy_setopt(cu, CURLOPT_HTTPHEADER, h);
    assert_int_equal(curl_easy_perform(cu), CURLE_OK);
    curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &r2.status);
    assert_int_equal(r2.status, 304);
    assert_int_equal(r2.len, 0);
    curl_slist_free_all(h);
    curl_easy_cleanup(cu);
    resp_free(&r2);
    /* A stale ETag gets the body. */
    cu = curl_easy_init();
    memset(&r2, 0, sizeof(r2));
    h = http_prepare(f, cu, "GET", "/v1/models/tm/1", c[0].tok, NULL, NULL, 0, NULL, &r2);
    h = curl_slist_append(h, "If-None-Match: \"00\"");
    curl_easy_setopt(cu, CURLOPT_HTTPHEADER, h);
    assert_int_equal(curl_easy_perform(cu), CURLE_OK);
    curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &r2.status);
    assert_int_equal(r2.status, 200);
    assert_true(r2.len > 0);
    curl_slist_free_all(h);
    curl_easy_cleanup(cu);
    resp_free(&r2);
    clients_free(c, 3);
}


/* Names and regions in every accepted form; more populations than the first table holds
 * (and all of them back after a restart); a population's round interval steers check-ins. */
static void test_names_and_intervals(void **state) {
    struct fx *f = *state;
    free(create_pop(f, "Aa.Z_z-9", "\"data_schema\":{\"x\":\"f32[4]\"}"));
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                              "{\"name\":\"rg\",\"allowed_regions\":[\"E-U_1\",\"zz\",\"*\"]}");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    for (int i = 0; i < 9; i++) { /* 11 populations: the table grows past 8 */
        char name[16];
        snprintf(name, sizeof(name), "many%d", i);
        free(create_pop(f, name,
                        "\"selection\":{\"target\":1},\"secagg\":{\"enabled\":false}"));
    }
    fx_stop(f);
    fx_start(f);
    r = http_req(f, "GET", "/v1/admin/populations", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    json_t *j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "populations")), 11);
    json_decref(j);
    resp_free(&r);
    /* target 1 (secagg off; a secure population needs 3): min_participants defaults to 1. */
    r = http_req(f, "GET", "/v1/admin/populations/many0", ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_non_null(strstr(r.body, "\"min_participants\":1"));
    resp_free(&r);
    /* A round interval: after a round ends, the next forms round_interval_s later. */
    char *etok = create_pop(f, "iv", "\"selection\":{\"target\":1,\"over_selection\":1.0,"
                                     "\"min_participants\":1,\"round_interval_s\":300,"
                                     "\"require\":[],\"jitter_s\":0,\"min_retry_s\":1,"
                                     "\"max_retry_s\":3600},\"secagg\":{\"enabled\":false}");
    upload_and_start(f, "iv");
    char *tok = enroll(f, etok, "iv");
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":false,"
                     "\"unmetered\":false,\"idle\":false}}";
    r = http_json(f, "POST", "/v1/checkin", tok, ck);
    json_decref(status_of(&r, "selected", NULL));
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/iv/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/admin/populations/iv/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/checkin", tok, ck);
    j = status_of(&r, "retry", "no_round_forming");
    int64_t ra = json_integer_value(json_object_get(j, "retry_after_s"));
    assert_true(ra >= 290 && ra <= 300);
    json_decref(j);
    resp_free(&r);
    free(tok);
    free(etok);
}


/* A model version of another population is not served under this one's name. */
static void test_foreign_model(void **state) {
    struct fx *f = *state;
    char *ea = create_pop(f, "pa", "");
    upload_and_start(f, "pa");
    free(create_pop(f, "pb", ""));
    upload_and_start(f, "pb"); /* its model is version 2 */
    char *tok = enroll(f, ea, "pa");
    struct resp r = http_req(f, "GET", "/v1/admin/populations/pb", ADMIN_TOKEN, NULL, NULL, 0,
                             NULL);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "model_version")), 2);
    json_decref(j);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/models/pa/1", tok, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http_req(f, "GET", "/v1/models/pa/2", tok, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    r = http_req(f, "GET", "/v1/models/pb/2", tok, NULL, NULL, 0, NULL);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    free(tok);
    free(ea);
}


/* The enrolment bucket when the clock goes back: no refill from the jump; it refills again
 * as time moves forward, up to max_per_minute. */
static void test_enroll_bucket_clock(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "eb", "\"enrollment\":{\"max_per_minute\":2}");
    const char *eb = "{\"population\":\"eb\",\"region\":\"EU\"}";
    for (int i = 0; i < 2; i++) {
        struct resp r = http_json(f, "POST", "/v1/enroll", etok, eb);
        assert_int_equal(r.status, 201);
        resp_free(&r);
    }
    struct resp r = http_json(f, "POST", "/v1/enroll", etok, eb);
    char hv[16];
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "30");
    assert_error(&r, 429, "rate_limited");
    resp_free(&r);
    atomic_fetch_sub(&f->now_ms, 10 * 60 * 1000); /* the clock jumps back 10 minutes */
    r = http_json(f, "POST", "/v1/enroll", etok, eb);
    assert_error(&r, 429, "rate_limited");
    resp_free(&r);
    fx_advance(f, 29 * 1000); /* +29 s: 0.97 of a token */
    r = http_json(f, "POST", "/v1/enroll", etok, eb);
    assert_non_null(header_in(&r, "Retry-After", hv, sizeof(hv)));
    assert_string_equal(hv, "1");
    assert_error(&r, 429, "rate_limited");
    resp_free(&r);
    fx_advance(f, 3600 * 1000); /* an hour: the bucket holds 2, not 120 */
    for (int i = 0; i < 3; i++) {
        r = http_json(f, "POST", "/v1/enroll", etok, eb);
        assert_int_equal(r.status, i < 2 ? 201 : 429);
        resp_free(&r);
    }
    free(etok);
}


/* Over-selection admits ceil(target x over_selection) devices (3 x 1.3: 4), stored with
 * the round. */
static void test_over_selection_cap(void **state) {
    struct fx *f = *state;
    char *etok = create_pop(f, "ov", "\"selection\":{\"target\":3,\"over_selection\":1.3,"
                                     "\"min_participants\":2,\"require\":[]},"
                                     "\"secagg\":{\"enabled\":false}");
    upload_and_start(f, "ov");
    char *tok = enroll(f, etok, "ov");
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":false,"
                     "\"unmetered\":false,\"idle\":false}}";
    struct resp r = http_json(f, "POST", "/v1/checkin", tok, ck);
    json_decref(status_of(&r, "selected", NULL));
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds WHERE config_json LIKE '%\"cap\":4%'"),
                     1);
    free(tok);
    free(etok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_enroll_fields, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_checkin_fields, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_checkin_outcomes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_population_config_fields, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_admin_patch_fields, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_admin_models_and_rounds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_admin_round_listing, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_task_and_model_paths, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_names_and_intervals, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_model, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_enroll_bucket_clock, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_over_selection_cap, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
