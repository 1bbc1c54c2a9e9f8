/* Shared code of the active-adversary secure aggregation tests. See coord_active_kit.h. */
#include "coord_active_kit.h"

void hex_encode(char *out, const uint8_t *in, size_t n) {
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", in[i]);
}

void authority_make(struct authority *a) {
    assert_int_equal(fl_secagg_signing_keygen(a->vk, a->sk, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
    hex_encode(a->vk_hex, a->vk, sizeof(a->vk));
}

/* ---- devices ---- */

void identity_make(fl_secagg_identity *id, uint8_t vk[32], const struct authority *a,
                   uint8_t seed) {
    memset(id, 0, sizeof(*id));
    id->struct_size = sizeof(*id);
    assert_int_equal(fl_secagg_signing_keygen(vk, id->signing_key, FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
    for (int i = 0; i < FL_SECAGG_DEVICE_ID_BYTES; i++)
        id->device_id[i] = (uint8_t)(seed * 31 + i + 1);
    assert_int_equal(
        fl_secagg_cert_issue_device(id->cert, a->sk, id->device_id, vk, FL_SECAGG_BACKEND_DEFAULT),
        FL_OK);
}

void identity_json(char *out, size_t n, const uint8_t *device_id, const uint8_t *vk,
                   const uint8_t *cert) {
    char d[65], k[65], c[129];
    hex_encode(d, device_id, 32);
    hex_encode(k, vk, 32);
    hex_encode(c, cert, 64);
    snprintf(out, n, "{\"device_id\":\"%s\",\"verify_key\":\"%s\",\"cert\":\"%s\"}", d, k, c);
}

void device_make(fl_secagg_identity *id, char *ident, size_t n, const struct authority *a,
                 uint8_t seed) {
    uint8_t vk[FL_SECAGG_VERIFY_KEY_BYTES];
    identity_make(id, vk, a, seed);
    identity_json(ident, n, id->device_id, vk, id->cert);
}

/* ---- populations and enrollment ---- */

struct resp secagg_pop_create(struct fx *f, const char *name, int target, int min,
                              const char *secagg, const char *strategy, char **etok) {
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":60,\"jitter_s\":0,\"min_retry_s\":1,"
             "\"max_retry_s\":60},"
             "\"deadlines_s\":{\"advertise\":30,\"share\":30,\"masked\":60,\"consistency\":30,"
             "\"unmask\":30},"
             "\"update\":{\"tensors\":[\"w\"],\"weighting\":\"uniform\",\"weight_cap\":50},"
             "\"strategy\":{\"name\":\"%s\"},"
             "\"secagg\":{%s},"
             "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0,\"modulus_bits\":32}}",
             name, target, min, strategy ? strategy : "fedavg", secagg);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201 || !etok)
        return r;
    json_t *j = body_json(&r);
    *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    pop_model_start(f, name, model, mlen);
    free(model);
    return r;
}

char *active_pop(struct fx *f, const char *name, int target, int min, const struct authority *a,
                 const char *extra) {
    char sa[512], *etok = NULL;
    snprintf(sa, sizeof(sa),
             "\"enabled\":true,\"neighbors\":0,\"threshold_fraction\":0.5,"
             "\"consistency_check\":true,\"authority_key\":\"%s\"%s",
             a->vk_hex, extra ? extra : "");
    struct resp r = secagg_pop_create(f, name, target, min, sa, NULL, &etok);
    if (r.status != 201)
        fprintf(stderr, "population %s: %ld %s\n", name, r.status, r.body);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    return etok;
}

struct resp enroll_ident(struct fx *f, const char *etok, const char *pop, const char *ident) {
    char body[1024];
    snprintf(body, sizeof(body), "{\"population\":\"%s\",\"region\":\"EU\"%s%s}", pop,
             ident ? ",\"secagg_identity\":" : "", ident ? ident : "");
    return http_json(f, "POST", "/v1/enroll", etok, body);
}

char *enroll_ident_ok(struct fx *f, const char *etok, const char *pop, const char *ident,
                      char *cid, size_t cid_len) {
    struct resp r = enroll_ident(f, etok, pop, ident);
    if (r.status != 201)
        fprintf(stderr, "enroll: %ld %s\n", r.status, r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *tok = strdup(json_string_value(json_object_get(j, "client_token")));
    if (cid)
        snprintf(cid, cid_len, "%s", json_string_value(json_object_get(j, "client_id")));
    json_decref(j);
    resp_free(&r);
    return tok;
}

void enroll_devices(struct fx *f, const char *etok, const char *pop, const struct authority *a,
                    int seed0, struct tc *c, fl_secagg_identity *id, int n, char (*cid)[32]) {
    memset(c, 0, sizeof(*c) * (size_t)n);
    for (int i = 0; i < n; i++) {
        char ident[512];
        device_make(&id[i], ident, sizeof(ident), a, (uint8_t)(seed0 + i));
        c[i].tok = enroll_ident_ok(f, etok, pop, ident, cid ? cid[i] : NULL, cid ? 32 : 0);
    }
}

json_t *task_json(struct fx *f, const struct tc *c, int64_t rid) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    struct resp r = http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

int64_t active_round_start(struct fx *f, const char *name, const struct authority *a,
                           const char *extra, int seed0, struct tc *c, fl_secagg_identity *id,
                           int n, json_t **task) {
    char *etok = active_pop(f, name, n, 3, a, extra);
    enroll_devices(f, etok, name, a, seed0, c, id, n, NULL);
    free(etok);
    int64_t rid;
    checkin_all(f, c, n, &rid);
    fetch_tasks(f, c, n, rid);
    *task = task_json(f, &c[0], rid);
    return rid;
}

/* ---- active secagg clients ---- */

const char *const active_phases[5] = {"advertise", "share", "masked", "consistency", "unmask"};

void active_config(fl_secagg_config *cfg, const struct task *t, const struct authority *a) {
    fl_secagg_config_init(cfg);
    cfg->num_clients = t->n;
    cfg->dim = (uint32_t)t->vec_len;
    cfg->bits = t->bits;
    cfg->degree = t->k;
    cfg->threshold = t->t;
    cfg->active = 1;
    cfg->device_certs = 1;
    cfg->reveal_pair_seeds = t->reveal_seeds;
    memcpy(cfg->verify_key, a->vk, sizeof(cfg->verify_key));
    task_secagg_context(t, cfg->context); /* signed into the advertisement */
}

void active_client_start(struct tc *c, const fl_secagg_config *cfg, const fl_secagg_identity *id,
                         int64_t rid, const uint32_t *x, const uint8_t **out, size_t *out_len) {
    assert_int_equal(fl_secagg_client_create(&c->sa, cfg, (uint64_t)rid, c->task.index, id, NULL),
                     FL_OK);
    uint32_t own[1024];
    if (!x) {
        for (size_t j = 0; j < c->task.vec_len; j++)
            own[j] = (uint32_t)c->words[j];
        x = own;
    }
    assert_int_equal(fl_secagg_client_set_input(c->sa, x, c->task.vec_len), FL_OK);
    assert_int_equal(fl_secagg_client_start(c->sa, out, out_len), FL_OK);
}

void active_client(struct tc *c, const fl_secagg_identity *id, const struct authority *a,
                   int64_t rid, const uint8_t **out, size_t *out_len) {
    fl_secagg_config cfg;
    active_config(&cfg, &c->task, a);
    active_client_start(c, &cfg, id, rid, NULL, out, out_len);
}

void advertise_other_refused(struct fx *f, struct tc *c, int64_t rid, const uint8_t *msg,
                             size_t len, const fl_secagg_identity *own,
                             const struct authority *a) {
    struct resp r = post_phase(f, c, rid, "advertise", msg, len);
    assert_error(&r, 400, "invalid_message");
    assert_non_null(strstr(r.body, "the advertisement names another device"));
    resp_free(&r);
    fl_secagg_client_destroy(c->sa);
    c->sa = NULL;
    const uint8_t *own_msg;
    size_t own_len;
    active_client(c, own, a, rid, &own_msg, &own_len);
    r = post_phase(f, c, rid, "advertise", own_msg, own_len);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
}

void active_results(struct fx *f, struct tc *c, int n, int64_t rid, int ph, const bool *alive,
                    const uint8_t **out, size_t *out_len, json_t **outcome) {
    for (int i = 0; i < n; i++) {
        if (!alive[i])
            continue;
        struct resp r = get_result(f, &c[i], rid, active_phases[ph], 10);
        if (ph == 4) {
            if (r.status == 200 && !*outcome)
                *outcome = body_json(&r);
            resp_free(&r);
            continue;
        }
        if (r.status != 200)
            fprintf(stderr, "result %s device %d: %ld %s\n", active_phases[ph], i, r.status,
                    r.body ? r.body : "");
        assert_int_equal(r.status, 200);
        fl_status st = fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len, &out[i],
                                               &out_len[i]);
        if (st != FL_OK)
            fprintf(stderr, "device %d handle %s: %s\n", i, active_phases[ph],
                    fl_secagg_client_errmsg(c[i].sa));
        assert_int_equal(st, FL_OK);
        resp_free(&r);
    }
}

void check_exact_sum(const struct sum_hook *h, const struct tc *c, const bool *in, int n) {
    size_t L = c[0].task.vec_len;
    uint64_t mask = c[0].task.bits == 64 ? ~0ull : ((uint64_t)1 << c[0].task.bits) - 1;
    uint64_t expect[1024] = {0};
    uint32_t count = 0;
    for (int i = 0; i < n; i++) {
        if (!in[i])
            continue;
        count++;
        for (size_t j = 0; j < L; j++)
            expect[j] = (expect[j] + c[i].words[j]) & mask;
    }
    assert_int_equal(h->calls, 1);
    assert_int_equal(h->count, count);
    assert_int_equal(h->vec_len, L);
    assert_memory_equal(h->sum, expect, L * sizeof(uint64_t));
}
