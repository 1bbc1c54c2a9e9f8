/* The server-side norm bound of plain rounds (docs/protocol.md section 5.1): in `none` and
 * `central` rounds the coordinator decodes every update and clips one whose centred
 * integer vector is longer than the bound B (the l2_bound of fl_dp_central_info for the
 * population's clip) before folding it in. A device that boosts its update x100 instead of
 * clipping then moves the average by at most B * gamma / n (= clip/n up to the lattice
 * rounding slack, here 1.0005 x clip/n); honest updates at the bound are never touched.
 * Checked on the round's exact integer sum (test-only debug hook, as in test_round.c), the
 * published model, and flotilla_updates_clipped_total in /metrics. */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/dp.h"

/* Encodes delta (D floats) as a device would with clip `clip` (section 5.1, weight 1). */
static void encode_delta(struct tc *c, const float *delta, double clip) {
    const struct task *t = &c->task;
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_os(&rng, NULL), FL_OK);
    fl_dp_central_params p;
    fl_dp_central_params_init(&p);
    p.clip = clip;
    p.granularity = t->gran;
    p.beta = t->beta;
    int64_t q[D];
    assert_int_equal(fl_dp_central_encode(rng, q, delta, D, &p, NULL, NULL), FL_OK);
    uint64_t mask = t->bits >= 64 ? ~0ull : (1ull << t->bits) - 1;
    memset(c->words, 0, sizeof(c->words));
    for (int j = 0; j < D; j++)
        c->words[j] = (uint64_t)q[j] & mask;
    c->words[t->vec_len - 1] = 1;
    memcpy(c->delta, delta, sizeof(c->delta));
    fl_dp_rng_destroy(rng);
}

/* The round header of a plain update body: "FLUP" || u32le 1 || u64le round id. */
static void round_header(uint8_t *out, int64_t rid) {
    memcpy(out, "FLUP\x01\0\0\0", 8);
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)rid >> (8 * b));
}

/* POST .../update with c's words (section 5.2 layout). */
static long post_update(struct fx *f, struct tc *c, int64_t rid) {
    size_t L = c->task.vec_len, wb = c->task.bits <= 32 ? 4 : 8;
    uint8_t body[16 + 8 * 1024];
    round_header(body, rid);
    for (size_t j = 0; j < L; j++)
        for (size_t b = 0; b < wb; b++)
            body[16 + j * wb + b] = (uint8_t)(c->words[j] >> (8 * b));
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    struct resp r = http_req(f, "POST", path, c->tok, "application/octet-stream", body,
                             16 + L * wb, c->pid);
    long st = r.status;
    if (st != 202)
        fprintf(stderr, "update: %ld %s\n", st, r.body ? r.body : "");
    resp_free(&r);
    return st;
}

/* flotilla_updates_clipped_total from /metrics. */
static long clipped_total(struct fx *f) {
    return (long)metric_value(f, "flotilla_updates_clipped_total");
}

static int64_t centred(uint64_t x, uint32_t bits) {
    uint64_t mod = 1ull << bits;
    x &= mod - 1;
    return x >= mod / 2 ? -(int64_t)(mod - x) : (int64_t)x;
}

/* One plain round of n devices: devices 0..n-2 honest with deltas of norm exactly clip
 * (at the bound), device n-1 sends `boost` x clip in the same direction, unclipped. */
static void boosted_round(struct fx *f, const char *name, const char *mode, double boost) {
    enum { N = 8 };
    struct sum_hook h = {0};
    fl__coord_debug_hook_set(f->co, sum_hook_capture, &h);
    struct popcfg pc = {.name = name, .target = N, .min = N, .secagg = false, .mode = mode,
                        .budget = 1e6};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    long clipped0 = clipped_total(f);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    int64_t rid;
    checkin_all(f, c, N, &rid);
    for (int i = 0; i < N; i++) {
        char path[128];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
        struct resp r = http_req(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid);
        assert_int_equal(r.status, 200);
        parse_task(&r, &c[i].task);
        resp_free(&r);
    }
    const double clip = c[0].task.clip, gamma = c[0].task.gran;
    const uint32_t bits = c[0].task.bits;
    assert_true(clip > 0 && gamma > 0);
    for (int i = 0; i < N; i++) {
        float d[D];
        double n2 = 0;
        for (int j = 0; j < D; j++) {
            d[j] = (float)(((i * 5 + j * 3) % 7) - 3 + (j == 0 ? 0.5 : 0.0));
            n2 += (double)d[j] * d[j];
        }
        double target = i == N - 1 ? boost * clip : clip;
        for (int j = 0; j < D; j++)
            d[j] = (float)(d[j] * target / sqrt(n2));
        /* The attacker skips clipping: it encodes with its own, larger clip. */
        encode_delta(&c[i], d, i == N - 1 ? target * 1.01 : clip);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(post_update(f, &c[i], rid), 202);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.count, N);
    /* The attacker's contribution to the exact sum: sum minus the honest words. */
    fl_dp_central_params cp;
    fl_dp_central_info info;
    fl_dp_central_params_init(&cp);
    cp.clip = clip;
    cp.granularity = gamma;
    cp.beta = c[0].task.beta;
    assert_int_equal(fl_dp_central_info_get(&info, &cp, D), FL_OK);
    double a2 = 0, raw2 = 0;
    for (int j = 0; j < D; j++) {
        uint64_t honest = 0;
        for (int i = 0; i < N - 1; i++)
            honest += c[i].words[j];
        int64_t a = centred(h.sum[j] - honest, bits);
        int64_t raw = centred(c[N - 1].words[j], bits);
        a2 += (double)a * (double)a;
        raw2 += (double)raw * (double)raw;
        /* Clipping scales toward zero: same sign, no larger magnitude. */
        assert_true(a == 0 || (a > 0) == (raw > 0));
        assert_true(llabs(a) <= llabs(raw));
    }
    double influence = sqrt(a2) * gamma / N, unclipped = sqrt(raw2) * gamma / N;
    fprintf(stderr, "%s: x%.0f device moves the average by %.4f x clip/n (unclipped: %.1f x)\n",
            mode, boost, influence / (clip / N), unclipped / (clip / N));
    assert_true(a2 <= floor(info.l2_bound * info.l2_bound + 0.5)); /* within the bound */
    assert_true(influence <= info.l2_bound * gamma / N);
    assert_true(influence <= 1.001 * clip / N);                  /* clip/n, lattice slack */
    assert_true(unclipped > 0.9 * boost * clip / N);              /* it did try */
    /* Exactly one update was clipped: the honest ones at the bound were not. */
    assert_int_equal(clipped_total(f) - clipped0, 1);
    /* Without DP the published average is (honest + clipped attacker) / n exactly. */
    if (strcmp(mode, "none") == 0)
        for (int j = 0; j < D; j++) {
            double expect = (double)centred(h.sum[j], bits) * gamma / N;
            assert_float_equal(h.delta[j], expect, 1e-6);
        }
    clients_free(c, N);
}

static void test_norm_plain_boosted(void **state) {
    boosted_round(*state, "nb", "none", 100.0);
}

static void test_norm_central_boosted(void **state) {
    boosted_round(*state, "cb", "central", 100.0);
}

/* FedBuff (buffer of K = 2, no DP): an honest device sends a zero delta, the other one x100
 * the clip. The step applied to the model is the clipped update / K: at most B gamma / 2,
 * where unclipped it would be 50 x clip. */
static void test_norm_fedbuff_boosted(void **state) {
    struct fx *f = *state;
    enum { N = 2 };
    struct popcfg pc = {.name = "fbn", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .strategy_extra = "\"buffer_size\":2"};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    long clipped0 = clipped_total(f);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    const char *ok = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                     "\"unmetered\":true,\"idle\":true},\"capabilities\":{\"secagg\":false}}";
    for (int i = 0; i < N; i++) {
        c[i].tok = tok[i];
        struct resp r = http_json(f, "POST", "/v1/checkin", c[i].tok, ok);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "status")), "selected");
        snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        int64_t rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
        resp_free(&r);
        char path[128];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
        r = http_req(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid);
        assert_int_equal(r.status, 200);
        parse_task(&r, &c[i].task);
        resp_free(&r);
    }
    const double clip = c[0].task.clip, gamma = c[0].task.gran;
    float zero[D] = {0}, big[D];
    for (int j = 0; j < D; j++)
        big[j] = (float)(100.0 * clip / sqrt((double)D));
    encode_delta(&c[0], zero, clip);
    encode_delta(&c[1], big, 101.0 * clip);
    float w1[D], b[2];
    fetch_model(f, &c[0], "fbn", 1, w1, b);
    for (int i = 0; i < N; i++)
        assert_int_equal(post_update(f, &c[i], c[i].task.rid), 202);
    float w2[D];
    fetch_model(f, &c[0], "fbn", 2, w2, b);
    double moved2 = 0;
    for (int j = 0; j < D; j++)
        moved2 += ((double)w2[j] - w1[j]) * ((double)w2[j] - w1[j]);
    fl_dp_central_params cp;
    fl_dp_central_info info;
    fl_dp_central_params_init(&cp);
    cp.clip = clip;
    cp.granularity = gamma;
    cp.beta = c[0].task.beta;
    assert_int_equal(fl_dp_central_info_get(&info, &cp, D), FL_OK);
    fprintf(stderr, "fedbuff: x100 device moved the model by %.4f x clip/K\n",
            sqrt(moved2) / (clip / N));
    assert_true(sqrt(moved2) <= info.l2_bound * gamma / N * 1.0001);
    assert_true(sqrt(moved2) > 0.9 * clip / N); /* clipped, not dropped */
    assert_int_equal(clipped_total(f) - clipped0, 1);
    clients_free(c, N);
}

/* A bad update is still refused before its norm is looked at, and changes nothing. */
static void test_norm_refusal_unchanged(void **state) {
    struct fx *f = *state;
    enum { N = 2 };
    struct popcfg pc = {.name = "nr", .target = N, .min = N, .secagg = false, .mode = "none"};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    c[0].words[c[0].task.vec_len - 1] = 2; /* weight 2 with uniform weighting */
    size_t L = c[0].task.vec_len;
    uint8_t body[16 + 4 * 1024];
    round_header(body, rid);
    for (size_t j = 0; j < L; j++)
        for (int b = 0; b < 4; b++)
            body[16 + 4 * j + b] = (uint8_t)(c[0].words[j] >> (8 * b));
    char path[128];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    struct resp r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", body,
                             16 + L * 4, c[0].pid);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    assert_int_equal(clipped_total(f), 0);
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_norm_plain_boosted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_norm_central_boosted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_norm_fedbuff_boosted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_norm_refusal_unchanged, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
