/* FedBuff with central DP (docs/protocol.md section 5.4, docs/dp.md "FedBuff") over HTTP
 * against the in-process coordinator: every flush of K updates is charged to the privacy
 * ledger as one discrete-Gaussian step with sampling rate 1 (no amplification), and the
 * epsilon spent equals the dp accountant's figure for that many unsampled Gaussian steps; a
 * device has at most one update in a buffer; a flush that would overspend the budget (at
 * the buffer's opening, or at its flush after the budget was lowered) is refused and applies
 * nothing; and the noise is really added, with the spread that noise_multiplier x clip / K
 * predicts. */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/dp.h"
#include "flotilla/tensor.h"

enum { NDEV = 8, K = 3 };

#define Z 1.0      /* noise_multiplier setup_population sends */
#define DELTA 1e-5 /* privacy.delta setup_population sends */

static const char *const CHECKIN = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                                   "\"unmetered\":true,\"idle\":true},"
                                   "\"capabilities\":{\"secagg\":false}}";

/* The round header of a plain update body (docs/protocol.md section 5.2). */
static void round_header(uint8_t *out, int64_t rid) {
    memcpy(out, "FLUP\x01\0\0\0", 8);
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)rid >> (8 * b));
}

/* Posts words[0..L) (4-byte words) as the update of participation pid in round rid. */
static struct resp post_words(struct fx *f, const char *tok, const char *pid, int64_t rid,
                              const uint64_t *words, size_t L) {
    size_t len = 16 + 4 * L;
    uint8_t *body = malloc(len);
    assert_non_null(body);
    round_header(body, rid);
    for (size_t j = 0; j < L; j++)
        for (int b = 0; b < 4; b++)
            body[16 + j * 4 + b] = (uint8_t)(words[j] >> (8 * b));
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    struct resp r = http_req(f, "POST", path, tok, "application/octet-stream", body, len, pid);
    free(body);
    return r;
}

static void post_update(struct fx *f, struct tc *c, long want, const char *code) {
    struct resp r = post_words(f, c->tok, c->pid, c->task.rid, c->words, c->task.vec_len);
    if (code)
        assert_error(&r, want, code);
    else if (r.status != want)
        fprintf(stderr, "update: %ld %s\n", r.status, r.body);
    assert_int_equal(r.status, want);
    resp_free(&r);
}

/* Checks in; returns the answer (json_decref it). A device told to come back later (pace
 * steering, 429) moves the clock by what it was told first. */
static json_t *checkin_json(struct fx *f, const char *tok) {
    struct resp r = http_json(f, "POST", "/v1/checkin", tok, CHECKIN);
    if (r.status == 429) {
        char ra[16];
        assert_non_null(header_in(&r, "Retry-After", ra, sizeof(ra)));
        fx_advance(f, (strtol(ra, NULL, 10) + 1) * 1000);
        resp_free(&r);
        r = http_json(f, "POST", "/v1/checkin", tok, CHECKIN);
    }
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

/* Asserts that the check-in of tok is answered retry with reason. */
static void assert_retry(struct fx *f, const char *tok, const char *reason) {
    json_t *j = checkin_json(f, tok);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "retry");
    assert_string_equal(json_string_value(json_object_get(j, "reason")), reason);
    json_decref(j);
}

/* Checks device i in, asserting it is selected; fetches its task (a buffered central-DP
 * participation) and encodes its update. */
static void select_one(struct fx *f, struct tc *c, int i) {
    json_t *j = checkin_json(f, c->tok);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
    snprintf(c->pid, sizeof(c->pid), "%s",
             json_string_value(json_object_get(j, "participation_id")));
    int64_t rid = json_integer_value(json_object_get(j, "round_id"));
    json_decref(j);
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    struct resp t = http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
    assert_int_equal(t.status, 200);
    parse_task(&t, &c->task);
    resp_free(&t);
    assert_int_equal(c->task.rid, rid);
    assert_string_equal(c->task.kind, "buffered");
    assert_int_equal(c->task.mode, 1); /* central */
    encode(c, i);
}

static json_t *population(struct fx *f, const char *name) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_json(f, "GET", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

static int64_t current_version(struct fx *f, const char *name) {
    json_t *j = population(f, name);
    int64_t v = json_integer_value(json_object_get(j, "model_version"));
    json_decref(j);
    return v;
}

static double epsilon_spent(struct fx *f, const char *name) {
    char series[128];
    snprintf(series, sizeof(series), "flotilla_privacy_epsilon_spent{population=\"%s\"}", name);
    return metric_value(f, series);
}

/* The accountant's epsilon at DELTA for n unsampled (q = 1) Gaussian steps with noise
 * multiplier Z, computed here from the dp library, independently of the coordinator. */
static double epsilon_q1(uint64_t n) {
    fl_dp_accountant *acc = NULL;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    fl_dp_event ev;
    fl_dp_event_gaussian(&ev, 1.0, Z, n);
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    double eps = 0;
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, DELTA), FL_OK);
    fl_dp_accountant_destroy(acc);
    return eps;
}

static void assert_rel_close(double got, double want, double rel) {
    if (!(fabs(got - want) <= rel * fabs(want)))
        fail_msg("%.9g is not within %g (relative) of %.9g", got, rel, want);
}

static struct tc *devices(struct fx *f, const char *name, double budget, int n) {
    struct popcfg pc = {.name = name,
                        .target = 10,
                        .min = 1,
                        .secagg = false,
                        .mode = "central",
                        .strategy = "fedbuff",
                        .budget = budget,
                        .bits = 32,
                        .strategy_extra = "\"buffer_size\":3,\"max_concurrency\":6,"
                                          "\"max_staleness\":5,\"staleness_alpha\":0.5"};
    struct tc *c = calloc((size_t)n, sizeof(*c));
    assert_non_null(c);
    setup_devices(f, &pc, c, n);
    return c;
}

/* Several flushes: each one adds a ledger entry with q = 1, the epsilon spent after n flushes
 * is the accountant's for n unsampled Gaussian steps (and more than a sampled round would
 * claim), the model moves, and the audit log verifies. */
static void test_flushes_charged_q1(void **state) {
    struct fx *f = *state;
    struct tc *c = devices(f, "fbdp", 1000, NDEV);
    float v1[D], vn[D], b[2];
    assert_int_equal(current_version(f, "fbdp"), 1);
    assert_true(epsilon_spent(f, "fbdp") == 0.0);

    /* Flush 1 from devices 0-2 on version 1; device 3 also trains on version 1. */
    for (int i = 0; i < 4; i++)
        select_one(f, &c[i], i);
    for (int i = 0; i < K; i++)
        post_update(f, &c[i], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 2);
    double e1 = epsilon_spent(f, "fbdp");
    assert_rel_close(e1, epsilon_q1(1), 1e-4);

    /* Flush 2: device 3 (staleness 1, weight 1/sqrt(2)) and devices 4, 5 on version 2. */
    select_one(f, &c[4], 4);
    select_one(f, &c[5], 5);
    assert_int_equal(c[4].task.model_version, 2);
    post_update(f, &c[3], 202, NULL);
    post_update(f, &c[4], 202, NULL);
    post_update(f, &c[5], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 3);
    double e2 = epsilon_spent(f, "fbdp");
    assert_true(e2 > e1);
    assert_rel_close(e2, epsilon_q1(2), 1e-4);

    /* Flush 3 from devices 0-2 again, on version 3. */
    for (int i = 0; i < K; i++)
        select_one(f, &c[i], i);
    for (int i = 0; i < K; i++)
        post_update(f, &c[i], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 4);
    double e3 = epsilon_spent(f, "fbdp");
    assert_true(e3 > e2);
    assert_rel_close(e3, epsilon_q1(3), 1e-4);
    /* What amplification by sampling at q = target / population_size (10 / 1000) would have
     * claimed is far less: the ledger does not claim it. */
    {
        fl_dp_accountant *acc = NULL;
        assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
        fl_dp_event ev;
        fl_dp_event_gaussian(&ev, 10.0 / 1000.0, Z, 3);
        assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
        double sampled = 0;
        assert_int_equal(fl_dp_accountant_epsilon(acc, &sampled, NULL, DELTA), FL_OK);
        fl_dp_accountant_destroy(acc);
        assert_true(e3 > 2 * sampled);
    }

    /* The ledger: three discrete-Gaussian entries, unsampled, K participants each, with the
     * population's noise multiplier; one per completed buffer. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger WHERE sampling_rate = 1.0 "
                               "AND mechanism = 'discrete_gaussian' AND steps = 1 AND "
                               "participants = 3 AND noise_multiplier = 1.0"),
                     3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds WHERE state = 2"), 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger l JOIN rounds r ON "
                               "r.id = l.round_id WHERE r.state = 2"),
                     3);

    /* The model moved, and stayed finite. */
    for (int j = 0; j < D; j++)
        v1[j] = base_w(j);
    fetch_model(f, &c[0], "fbdp", 4, vn, b);
    int moved = 0;
    for (int j = 0; j < D; j++) {
        assert_true(isfinite(vn[j]));
        moved += vn[j] != v1[j];
    }
    assert_true(moved > D / 2);

    /* The audit log verifies, with a round entry per flush. */
    struct resp r;
    fl_store_audit_bundle *bundle = audit_bundle_verified(f, &r);
    fl_store_audit_bundle_close(bundle);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'round'"), 3);
    clients_free(c, NDEV);
    free(c);
}

/* One update per device per buffer: a second body on the same participation is refused
 * (409) and not counted, the device cannot take a second participation in the buffer, and
 * the buffer flushes only when K different devices are in it. */
static void test_one_update_per_buffer(void **state) {
    struct fx *f = *state;
    struct tc *c = devices(f, "fbdp", 1000, 4);
    select_one(f, &c[0], 0);
    post_update(f, &c[0], 202, NULL);
    /* The same bytes again: an idempotent replay (200), not a second update. */
    post_update(f, &c[0], 200, NULL);
    /* Other bytes: refused, naming the rule. */
    c[0].words[0] ^= 1;
    struct resp r = post_words(f, c[0].tok, c[0].pid, c[0].task.rid, c[0].words, c[0].task.vec_len);
    assert_error(&r, 409, "already_submitted");
    assert_non_null(strstr(r.body, "one update per device per buffer"));
    resp_free(&r);
    c[0].words[0] ^= 1;
    /* No second participation in this buffer. */
    assert_retry(f, c[0].tok, "round_full");
    /* Two more different devices: only then does the buffer flush. */
    select_one(f, &c[1], 1);
    post_update(f, &c[1], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 0);
    select_one(f, &c[2], 2);
    post_update(f, &c[2], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 2);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    assert_int_equal(db_int(f, "SELECT participants FROM privacy_ledger"), 3);
    /* The buffer it went into is applied: device 0 may contribute to the next one. */
    select_one(f, &c[0], 0);
    assert_int_equal(c[0].task.model_version, 2);
    post_update(f, &c[0], 202, NULL);
    clients_free(c, 4);
    free(c);
}

/* The budget is checked when a buffer opens: with room for two flushes only, the third
 * buffer never opens. Check-ins get retry budget_exhausted, the population says why, a
 * device still training from before cannot post into anything, and nothing more is applied
 * or charged. */
static void test_budget_at_open(void **state) {
    struct fx *f = *state;
    double e2 = epsilon_q1(2), e3 = epsilon_q1(3);
    struct tc *c = devices(f, "fbdp", (e2 + e3) / 2, NDEV);
    for (int i = 0; i < K; i++)
        select_one(f, &c[i], i);
    for (int i = 0; i < K; i++)
        post_update(f, &c[i], 202, NULL);
    /* Device 6 is selected into buffer 2 but does not post before it is applied. */
    for (int i = 3; i < 7; i++)
        select_one(f, &c[i], i);
    for (int i = 3; i < 6; i++)
        post_update(f, &c[i], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 3);
    assert_rel_close(epsilon_spent(f, "fbdp"), e2, 1e-4);
    int64_t refusals =
        db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'budget_refused'");
    assert_true(refusals >= 1);
    /* The third buffer would overspend: not opened. */
    assert_retry(f, c[7].tok, "budget_exhausted");
    assert_retry(f, c[0].tok, "budget_exhausted");
    json_t *j = population(f, "fbdp");
    assert_string_equal(json_string_value(json_object_get(j, "state")), "budget_exhausted");
    assert_true(json_is_null(json_object_get(j, "current_round")));
    const char *why =
        json_string_value(json_object_get(json_object_get(j, "round_error"), "message"));
    assert_non_null(why);
    assert_non_null(strstr(why, "privacy budget exhausted"));
    json_decref(j);
    /* Device 6's participation had no buffer to move into. */
    post_update(f, &c[6], 410, "round_closed");
    assert_int_equal(current_version(f, "fbdp"), 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 2);
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds"), 2);
    assert_rel_close(epsilon_spent(f, "fbdp"), e2, 1e-4);
    /* Logged once for the streak. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'budget_refused'"),
                     refusals);
    struct resp r;
    fl_store_audit_bundle *bundle = audit_bundle_verified(f, &r);
    fl_store_audit_bundle_close(bundle);
    resp_free(&r);
    clients_free(c, NDEV);
    free(c);
}

/* The budget is checked again right before a flush: lowered (PATCH) to what is spent while
 * a buffer fills, the K-th update finds the flush over budget. The buffer is abandoned:
 * no model version, no ledger entry, its contributors read "abandoned" with the reason, and
 * the population shows budget_exhausted with it. */
static void test_budget_at_flush(void **state) {
    struct fx *f = *state;
    struct tc *c = devices(f, "fbdp", 1000, NDEV);
    for (int i = 0; i < K; i++)
        select_one(f, &c[i], i);
    for (int i = 0; i < K; i++)
        post_update(f, &c[i], 202, NULL);
    double e1 = epsilon_spent(f, "fbdp");
    assert_rel_close(e1, epsilon_q1(1), 1e-4);
    for (int i = 3; i < 6; i++)
        select_one(f, &c[i], i);
    post_update(f, &c[3], 202, NULL);
    post_update(f, &c[4], 202, NULL);
    char body[128];
    snprintf(body, sizeof(body), "{\"privacy\":{\"epsilon_budget\":%.17g}}", e1 * 1.0000001);
    struct resp r = http_json(f, "PATCH", "/v1/admin/populations/fbdp", ADMIN_TOKEN, body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    double refused = metric_value(f, "flotilla_rounds_refused_budget_total");
    /* The K-th update is accepted into the buffer, which is then not applied. */
    post_update(f, &c[5], 202, NULL);
    assert_int_equal(current_version(f, "fbdp"), 2);
    assert_int_equal(db_int(f, "SELECT count(*) FROM privacy_ledger"), 1);
    assert_rel_close(epsilon_spent(f, "fbdp"), e1, 1e-4);
    assert_true(metric_value(f, "flotilla_rounds_refused_budget_total") == refused + 1);
    json_t *st = round_status(f, &c[5], c[5].task.rid);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "abandoned");
    assert_non_null(
        strstr(json_string_value(json_object_get(st, "reason")), "privacy budget exhausted"));
    json_decref(st);
    json_t *j = population(f, "fbdp");
    assert_string_equal(json_string_value(json_object_get(j, "state")), "budget_exhausted");
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(j, "round_error"), "message")),
               "privacy budget exhausted"));
    json_decref(j);
    assert_retry(f, c[6].tok, "budget_exhausted");
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds WHERE state = 2"), 1);
    fl_store_audit_bundle *bundle = audit_bundle_verified(f, &r);
    fl_store_audit_bundle_close(bundle);
    resp_free(&r);
    clients_free(c, NDEV);
    free(c);
}

/* ---- the noise ---- */

enum { DN = 4096, KN = 4 };
#define ZN 2.0   /* noise multiplier of the noise test */
#define CLIP 0.5 /* its clip norm */

/* A model whose update tensor "w" is DN zeros (plus "b", not updated). */
static uint8_t *zero_model(size_t *len) {
    static float w[DN];
    float b[2] = {1.0f, 2.0f};
    return model_wb(w, DN, b, len);
}

/* KN devices post all-zero updates of a DN-coordinate model: without noise the step would
 * be exactly zero. With it, each coordinate of the applied delta is N_Z(0, (ZN B)^2) x
 * granularity / KN, B ~ CLIP / granularity, i.e. about ZN x CLIP / KN in model units: the
 * delta's norm over sqrt(DN) must be near that (its relative spread at DN = 4096 is about
 * 1%; the test allows 15%) and its mean near zero. */
static void test_noise_added(void **state) {
    struct fx *f = *state;
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"name\":\"fbn\",\"allowed_regions\":[\"*\"],"
             "\"selection\":{\"target\":10,\"over_selection\":1.0,\"min_participants\":1,"
             "\"require\":[],\"forming_s\":60,\"jitter_s\":0,\"min_retry_s\":1},"
             "\"deadlines_s\":{\"masked\":60},"
             "\"update\":{\"tensors\":[\"w\"],\"weighting\":\"uniform\"},"
             "\"strategy\":{\"name\":\"fedbuff\",\"buffer_size\":%d,\"max_concurrency\":%d},"
             "\"secagg\":{\"enabled\":false},"
             "\"privacy\":{\"mode\":\"central\",\"clip_norm\":%g,\"noise_multiplier\":%g,"
             "\"delta\":1e-5,\"population_size\":1000,\"epsilon_budget\":1000}}",
             KN, KN, CLIP, ZN);
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
    if (r.status != 201)
        fprintf(stderr, "%s\n", r.body);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    size_t mlen;
    uint8_t *model = zero_model(&mlen);
    r = http_req(f, "POST", "/v1/admin/populations/fbn/models", ADMIN_TOKEN,
                 "application/octet-stream", model, mlen, NULL);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    free(model);
    r = http_json(f, "POST", "/v1/admin/populations/fbn/start", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    static uint64_t words[DN + 1];
    memset(words, 0, sizeof(words));
    words[DN] = 1; /* the weight coordinate */
    char *tok[KN];
    double gran = 0;
    for (int i = 0; i < KN; i++) {
        r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"fbn\",\"region\":\"EU\"}");
        assert_int_equal(r.status, 201);
        j = body_json(&r);
        tok[i] = strdup(json_string_value(json_object_get(j, "client_token")));
        json_decref(j);
        resp_free(&r);
        j = checkin_json(f, tok[i]);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
        char pid[40];
        snprintf(pid, sizeof(pid), "%s", json_string_value(json_object_get(j, "participation_id")));
        int64_t rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
        char path[96];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
        struct resp t = http_req(f, "GET", path, tok[i], NULL, NULL, 0, pid);
        assert_int_equal(t.status, 200);
        struct task task;
        parse_task(&t, &task);
        resp_free(&t);
        assert_int_equal(task.mode, 1);
        assert_int_equal(task.vec_len, DN + 1);
        assert_true(task.clip == CLIP);
        gran = task.gran;
        r = post_words(f, tok[i], pid, rid, words, DN + 1);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    assert_int_equal(current_version(f, "fbn"), 2);

    r = http_req(f, "GET", "/v1/models/fbn/2", tok[0], NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, r.body, r.len), FL_OK);
    fl_tensor_view tv;
    assert_int_equal(fl_safetensors_find(st, &tv, "w"), FL_OK);
    assert_int_equal(tv.nbytes, DN * sizeof(float));
    const float *w = tv.data;
    double sum = 0, sum2 = 0;
    int nonzero = 0;
    for (int i = 0; i < DN; i++) {
        assert_true(isfinite(w[i]));
        sum += w[i];
        sum2 += (double)w[i] * w[i];
        nonzero += w[i] != 0.0f;
        /* Every coordinate sits on the lattice gamma / KN (the noisy integer sum / KN). */
        double units = w[i] * KN / gran;
        assert_true(fabs(units - nearbyint(units)) < 1e-3);
    }
    fl_safetensors_destroy(st);
    resp_free(&r);
    double sigma = ZN * CLIP / KN; /* model units, per coordinate */
    double rms = sqrt(sum2 / DN), mean = sum / DN;
    fprintf(stderr, "noise: rms %.5f, expected %.5f (ratio %.4f), mean %.2e\n", rms, sigma,
            rms / sigma, mean);
    assert_true(nonzero > DN * 9 / 10);
    assert_true(rms > 0.85 * sigma && rms < 1.15 * sigma);
    assert_true(fabs(mean) < 0.1 * sigma); /* its standard deviation is sigma / 64 */
    for (int i = 0; i < KN; i++)
        free(tok[i]);
    free(etok);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_flushes_charged_q1, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_one_update_per_buffer, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_budget_at_open, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_budget_at_flush, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_noise_added, fx_setup, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
