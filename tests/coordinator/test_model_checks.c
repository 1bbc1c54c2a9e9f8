/* Round parameters from the population's model (aggregate.c, docs/coordinator.md "Rounds"):
 * a round (or a FedBuff buffer) cannot form (check-ins get retry no_round_forming, nothing
 * is stored) when an update tensor named in update.tensors is missing or not F32, when the
 * model has no F32 tensor at all, or when central DP noise cannot be sized for the configured
 * granularity;
 * without update.tensors every F32 tensor is trained and the others (here an I32 tensor)
 * and the model's metadata pass through the aggregation unchanged. */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/tensor.h"

static const int32_t IVALS[3] = {7, -8, 9};

static bool g_nan_model; /* the next model_mixed has a NaN in "w" */

/* A model with "w" (D floats, unless no_f32) and "i" (3 int32), metadata "owner": "t". */
static uint8_t *model_mixed(size_t *len, bool no_f32) {
    float w[D];
    for (int j = 0; j < D; j++)
        w[j] = base_w(j);
    if (g_nan_model)
        w[3] = NAN;
    fl_safetensors_writer *wr = NULL;
    assert_int_equal(fl_safetensors_writer_create(&wr, NULL), FL_OK);
    uint64_t sw[1] = {D}, si[1] = {3};
    if (!no_f32)
        assert_int_equal(fl_safetensors_writer_add(wr, "w", FL_DTYPE_F32, 1, sw, w, sizeof(w)),
                         FL_OK);
    assert_int_equal(fl_safetensors_writer_add(wr, "i", FL_DTYPE_I32, 1, si, IVALS,
                                               sizeof(IVALS)), FL_OK);
    assert_int_equal(fl_safetensors_writer_set_metadata(wr, "owner", "t"), FL_OK);
    assert_int_equal(fl_safetensors_writer_size(wr, len), FL_OK);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    assert_int_equal(fl_safetensors_writer_serialize(wr, buf, *len), FL_OK);
    fl_safetensors_writer_destroy(wr);
    return buf;
}

/* Creates population name (plain unless extra has "secagg"; target and min_participants
 * `target`) with the extra members, uploads the model and starts it; enrols two devices
 * into c. */
static void population(struct fx *f, const char *name, int target, const char *extra,
                       bool no_f32, struct tc *c) {
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],\"selection\":{\"target\":%d,"
             "\"over_selection\":1.0,\"min_participants\":%d,\"require\":[],\"jitter_s\":0,"
             "\"min_retry_s\":1,\"max_retry_s\":60}%s%s%s}",
             name, target, target,
             strstr(extra, "\"secagg\"") ? "" : ",\"secagg\":{\"enabled\":false}",
             *extra ? "," : "", extra);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201)
        fprintf(stderr, "%s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    size_t mlen;
    uint8_t *m = model_mixed(&mlen, no_f32);
    pop_model_start(f, name, m, mlen);
    free(m);
    snprintf(body, sizeof(body), "{\"population\":\"%s\",\"region\":\"EU\"}", name);
    for (int i = 0; i < 2; i++) {
        r = http_json(f, "POST", "/v1/enroll", etok, body);
        assert_int_equal(r.status, 201);
        j = body_json(&r);
        c[i].tok = strdup(json_string_value(json_object_get(j, "client_token")));
        json_decref(j);
        resp_free(&r);
    }
    free(etok);
}

static void test_round_cannot_form(void **state) {
    struct fx *f = *state;
    static const struct {
        const char *name, *extra;
        bool no_f32;
    } cases[] = {
        {"missing", "\"update\":{\"tensors\":[\"nope\"]}", false},
        {"notname", "\"update\":{\"tensors\":[5]}", false},
        {"notf32", "\"update\":{\"tensors\":[\"i\"]}", false},
        {"nof32", "", true},
        {"fbmissing", "\"strategy\":{\"name\":\"fedbuff\"},\"update\":{\"tensors\":[\"nope\"]}",
         false},
        {"noise", "\"privacy\":{\"mode\":\"central\",\"clip_norm\":1e9,\"granularity\":1e-9,"
                  "\"noise_multiplier\":1e6}",
         false},
    };
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true}}";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tc c[2];
        memset(c, 0, sizeof(c));
        population(f, cases[i].name, 2, cases[i].extra, cases[i].no_f32, c);
        struct resp r = http_json(f, "POST", "/v1/checkin", c[0].tok, ck);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        if (strcmp(json_string_value(json_object_get(j, "status")), "retry") != 0)
            fprintf(stderr, "%s: %s\n", cases[i].name, r.body);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
        assert_string_equal(json_string_value(json_object_get(j, "reason")),
                            "no_round_forming");
        assert_true(json_integer_value(json_object_get(j, "retry_after_s")) >= 1);
        json_decref(j);
        resp_free(&r);
        clients_free(c, 2);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 0);
}

static void test_other_tensors_pass_through(void **state) {
    struct fx *f = *state;
    struct tc c[2];
    memset(c, 0, sizeof(c));
    population(f, "mixed", 2, "", false, c);
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    fetch_tasks(f, c, 2, rid);
    assert_int_equal(c[0].task.dim, D); /* "w" only */
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[16 + 4 * 1024];
    for (int i = 0; i < 2; i++) {
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        struct resp r =
            http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
    int64_t v = json_integer_value(json_object_get(st, "new_model_version"));
    json_decref(st);
    snprintf(path, sizeof(path), "/v1/models/mixed/%lld", (long long)v);
    struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    fl_safetensors *sf = NULL;
    assert_int_equal(fl_safetensors_create(&sf, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(sf, r.body, r.len), FL_OK);
    fl_tensor_view tv;
    assert_int_equal(fl_safetensors_find(sf, &tv, "i"), FL_OK);
    assert_int_equal(tv.dtype, FL_DTYPE_I32);
    assert_memory_equal(tv.data, IVALS, sizeof(IVALS));
    assert_int_equal(fl_safetensors_find(sf, &tv, "w"), FL_OK);
    bool moved = false;
    for (int j = 0; j < D; j++)
        moved |= ((const float *)tv.data)[j] != base_w(j);
    assert_true(moved);
    bool owner = false;
    for (size_t k = 0; k < fl_safetensors_metadata_count(sf); k++) {
        const char *key, *val;
        fl_safetensors_metadata_at(sf, &key, &val, k);
        owner |= strcmp(key, "owner") == 0 && strcmp(val, "t") == 0;
    }
    assert_true(owner);
    fl_safetensors_destroy(sf);
    resp_free(&r);
    clients_free(c, 2);
}


/* Example weights are summed modulo 2^modulus_bits like the coordinates: with 8 bits, two
 * devices of weight 128 sum to 0 and the round cannot be averaged; it is abandoned with that
 * reason and no model is made. */
static void test_weights_sum_to_zero(void **state) {
    struct fx *f = *state;
    struct tc c[2];
    memset(c, 0, sizeof(c));
    population(f, "wz", 2,
               "\"update\":{\"weighting\":\"examples\",\"weight_cap\":255},"
               "\"privacy\":{\"mode\":\"none\",\"modulus_bits\":8}",
               false, c);
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    c[0].weight = c[1].weight = 128;
    fetch_tasks(f, c, 2, rid);
    assert_int_equal(c[0].task.bits, 8);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[16 + 4 * 1024];
    for (int i = 0; i < 2; i++) {
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        struct resp r =
            http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    assert_non_null(strstr(json_string_value(json_object_get(st, "reason")), "sum to zero"));
    json_decref(st);
    assert_int_equal(db_int(f, "SELECT count(*) FROM models"), 1);
    clients_free(c, 2);
}


/* Secure rounds sum the weight coordinates mod 2^bits unseen, so a population whose
 * cap x weight_cap reaches 2^bits forms no round (a wrap would be a silently wrong
 * average); one below the boundary forms. 16 bits, cap 3 (the secure minimum): weight_cap
 * 21845 forms (3 x 21845 = 65535), 21846 does not. */
static void test_secagg_weight_wrap(void **state) {
    struct fx *f = *state;
    const char *ck = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,"
                     "\"idle\":true}}";
    for (int over = 0; over <= 1; over++) {
        char extra[256];
        snprintf(extra, sizeof(extra),
                 "\"secagg\":{\"enabled\":true},\"update\":{\"weighting\":\"examples\","
                 "\"weight_cap\":%d},\"privacy\":{\"mode\":\"none\",\"modulus_bits\":16}",
                 over ? 21846 : 21845);
        struct tc c[2];
        memset(c, 0, sizeof(c));
        population(f, over ? "wrap" : "wrapok", 3, extra, false, c);
        struct resp r = http_json(f, "POST", "/v1/checkin", c[0].tok, ck);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        const char *st = json_string_value(json_object_get(j, "status"));
        if (over) {
            assert_string_equal(st, "retry");
            assert_string_equal(json_string_value(json_object_get(j, "reason")),
                                "no_round_forming");
        } else {
            if (strcmp(st, "retry") == 0)
                fprintf(stderr, "wrapok: %s\n", r.body);
            assert_string_not_equal(st, "retry");
        }
        json_decref(j);
        resp_free(&r);
        clients_free(c, 2);
        assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 1);
    }
}

/* A base model with a NaN weight: the aggregation refuses to make a non-finite model and
 * the round is abandoned with that reason. */
static void test_non_finite_model(void **state) {
    struct fx *f = *state;
    struct tc c[2];
    memset(c, 0, sizeof(c));
    g_nan_model = true;
    population(f, "nan", 2, "", false, c);
    g_nan_model = false;
    int64_t rid = 0;
    checkin_all(f, c, 2, &rid);
    fetch_tasks(f, c, 2, rid);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    uint8_t body[16 + 4 * 1024];
    for (int i = 0; i < 2; i++) {
        size_t bl = plain_update_body(body, rid, c[i].words, c[i].task.vec_len, 4);
        struct resp r =
            http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    json_t *st = round_status(f, &c[0], rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    assert_non_null(strstr(json_string_value(json_object_get(st, "reason")), "not finite"));
    json_decref(st);
    clients_free(c, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_cannot_form, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_other_tensors_pass_through, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_weights_sum_to_zero, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_secagg_weight_wrap, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_non_finite_model, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
