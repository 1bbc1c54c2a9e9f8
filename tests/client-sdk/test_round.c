/* Whole rounds of real SDK clients against the REAL coordinator, in-process on 127.0.0.1,
 * over the libcurl transport (wrapped by the fault transport of examples/flotilla-sim for
 * capture and fault injection): secure aggregation on and off, no DP, central DP and
 * distributed DP, examples weighting, the task of a forming round (425), lost requests and
 * lost responses (idempotent retries), a device that vanishes mid-round (dropped, 410 when
 * it comes back), tampered / unsigned / foreign-key bodies, pace steering, real long polls
 * with devices on threads, and a captured-traffic check that no example bytes leave the
 * device.
 *
 * Exactness: the coordinator's test hook hands over the round's unmasked SUM (never one
 * device's update) and the SDK's test hook each device's own integer vector; the sum must
 * equal the sum of the vectors of the devices that survived, modulo 2^b, bit for bit, and
 * the new model version must equal base + FedAvg of that sum (exactly without DP; within
 * the noise with DP). Each device's vector must also decode to its clipped (weighted) delta
 * within one quantization step. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <sodium.h>

#include "flotilla/tensor.h"
#include "sdk_fixture.h"

/* client-sdk/src/blas_advice.c (internal; in the static SDK this test links). */
int fl__client_blas_advice(char *buf, size_t len);

/* ---- population configs ---- */

enum {
    SA_NORM_PROOF = 1, /* secagg.norm_proof */
    SA_REVEAL = 2      /* secagg.reveal_pair_seeds */
};

struct popspec {
    const char *name;
    int target, min;
    bool secagg;
    const char *mode;        /* none, central, distributed */
    const char *weighting;   /* uniform, examples */
    double noise;            /* noise_multiplier */
    int dl_s;                /* every phase deadline, seconds */
    int min_retry_s, max_retry_s;
    int sa_opts;             /* SA_NORM_PROOF | SA_REVEAL (0 or false: neither) */
};

static void pop_json(char *out, size_t cap, const struct popspec *s) {
    char priv[256] = "";
    if (strcmp(s->mode, "none") != 0)
        snprintf(priv, sizeof(priv),
                 ",\"noise_multiplier\":%g,\"epsilon_budget\":1000,\"delta\":1e-5,"
                 "\"population_size\":1000", s->noise);
    int dl = s->dl_s ? s->dl_s : 30;
    snprintf(out, cap,
             "{\"name\":\"%s\",\"allowed_regions\":[\"EU\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":%d,"
             "\"max_retry_s\":%d},"
             "\"deadlines_s\":{\"advertise\":%d,\"share\":%d,\"masked\":%d,\"unmask\":%d},"
             "\"training\":{\"epochs\":2,\"batch_size\":8,\"learning_rate\":0.1,"
             "\"max_examples\":100},"
             "\"update\":{\"tensors\":[\"fc1.weight\",\"fc1.bias\",\"fc2.weight\",\"fc2.bias\"],"
             "\"weighting\":\"%s\",\"weight_cap\":22},"
             "\"strategy\":{\"name\":\"fedavg\"},"
             "\"secagg\":{\"enabled\":%s,\"threshold_fraction\":0.5%s%s},"
             "\"privacy\":{\"mode\":\"%s\",\"clip_norm\":1.0%s}}",
             s->name, s->target, s->min, s->min_retry_s ? s->min_retry_s : 1,
             s->max_retry_s ? s->max_retry_s : 60, dl, dl, dl, dl,
             s->weighting ? s->weighting : "uniform", s->secagg ? "true" : "false",
             s->sa_opts & SA_NORM_PROOF ? ",\"norm_proof\":true" : "",
             s->sa_opts & SA_REVEAL ? ",\"reveal_pair_seeds\":true" : "", s->mode, priv);
}

struct world {
    struct sfx *f;
    uint8_t *model;
    size_t mlen;
    char etok[256];
    struct sdev d[SFX_MAX_DEV];
    int n;
};

static void world_open(struct world *w, const struct popspec *s, int n, const int *examples,
                       uint32_t long_poll_s, bool real_clock) {
    memset(w, 0, sizeof(*w));
    w->f = sfx_start(real_clock);
    w->model = sfx_model(&w->mlen);
    char json[4096];
    pop_json(json, sizeof(json), s);
    sfx_population(w->f, json, w->model, w->mlen, w->etok, sizeof(w->etok));
    w->n = n;
    for (int i = 0; i < n; i++) {
        struct sdev_opts o = {.population = s->name,
                              .etok = w->etok,
                              .n_examples = examples ? examples[i] : 20,
                              .long_poll_s = long_poll_s};
        assert_int_equal(sdev_open(&w->d[i], w->f, i, &o), FL_OK);
    }
}

static void world_close(struct world *w) {
    for (int i = 0; i < w->n; i++)
        sdev_close(&w->d[i]);
    sfx_stop(w->f);
    free(w->model);
}

/* Flattened update tensors (fc1.weight, fc1.bias, fc2.weight, fc2.bias) of a model. */
static size_t flat_params(const uint8_t *m, size_t len, float *out) {
    static const char *const names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, m, len), FL_OK);
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        fl_tensor_view v;
        assert_int_equal(fl_safetensors_find(st, &v, names[i]), FL_OK);
        memcpy(out + off, v.data, v.nbytes);
        off += v.nbytes / sizeof(float);
    }
    fl_safetensors_destroy(st);
    return off;
}

/* Downloads model version v of pop with device 0's token and flattens it. */
static size_t fetch_version(struct world *w, const char *pop, int64_t v, float *out) {
    char tok[256], path[128];
    assert_int_equal(fl_client_token(w->d[0].c, tok, sizeof(tok)), FL_OK);
    snprintf(path, sizeof(path), "/v1/models/%s/%lld", pop, (long long)v);
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(sfx_get(w->f, path, tok, &body, &len), 200);
    size_t n = flat_params(body, len, out);
    free(body);
    return n;
}

static int64_t centred(uint64_t x, uint32_t bits) {
    uint64_t mod = (uint64_t)1 << bits, half = mod >> 1;
    return x >= half ? -(int64_t)(mod - x) : (int64_t)x;
}

/* Checks the round: the coordinator's sum equals the sum of the vectors of the devices in
 * `in` exactly; each of those vectors decodes to its delta within a step (none/central);
 * the new model is base + the hook's delta; without DP that delta is exactly the FedAvg
 * of the sum, with DP it is within tol of the mean clipped delta. */
static void check_round(struct world *w, const char *pop, const bool *in, const char *mode,
                        bool examples_weighting, double tol) {
    struct sfx *f = w->f;
    pthread_mutex_lock(&f->lock);
    struct sfx_sum h = f->sum;
    pthread_mutex_unlock(&f->lock);
    assert_int_equal(h.calls, 1);
    uint32_t bits = 32;
    uint64_t mask = 0xffffffffull;
    uint64_t expect[SFX_MAX_VEC] = {0};
    double mean[SFX_MAX_VEC] = {0};
    uint32_t count = 0;
    double wsum = 0;
    size_t L = 0, d = 0;
    for (int i = 0; i < w->n; i++) {
        if (!in[i])
            continue;
        const struct sfx_update *u = &w->d[i].up;
        assert_int_equal(u->calls, 1);
        assert_int_equal(u->round_id, h.round_id);
        L = u->len;
        d = u->d;
        count++;
        double wt = (double)u->words[L - 1];
        wsum += wt;
        for (size_t j = 0; j < L; j++)
            expect[j] = (expect[j] + u->words[j]) & mask;
        if (strcmp(mode, "distributed") != 0) {
            /* The vector is the weighted clipped delta on the lattice (one step). */
            double gamma = 1.0 / 1024;
            double n2 = 0;
            for (size_t j = 0; j < d; j++) {
                double q = (double)centred(u->words[j], bits) * gamma;
                assert_true(fabs(q - u->delta[j]) <= gamma * 1.0001);
                mean[j] += u->delta[j];
                n2 += (double)u->delta[j] * u->delta[j];
            }
            assert_true(sqrt(n2) <= wt * 1.0 * (1 + 1e-5)); /* clipped to w * C */
        } else {
            for (size_t j = 0; j < d; j++)
                mean[j] += u->delta[j];
        }
    }
    assert_int_equal(h.count, count);
    assert_int_equal(h.vec_len, L);
    assert_memory_equal(h.sum, expect, L * sizeof(uint64_t)); /* bit for bit */
    assert_int_equal(h.dim, d);
    float base[SFX_MAX_VEC], neu[SFX_MAX_VEC];
    size_t nb = flat_params(w->model, w->mlen, base);
    assert_int_equal(nb, d);
    assert_int_equal(fetch_version(w, pop, 2, neu), d);
    double denom = examples_weighting ? (double)h.sum[L - 1] : (double)count;
    if (examples_weighting)
        assert_int_equal((uint64_t)wsum, h.sum[L - 1]);
    for (size_t j = 0; j < d; j++) {
        assert_true(neu[j] == (float)(base[j] + 1.0 * (double)h.delta[j]));
        if (strcmp(mode, "none") == 0) {
            float want = (float)((double)centred(h.sum[j], bits) * (1.0 / 1024) / denom);
            assert_true(h.delta[j] == want);
        } else if (strcmp(mode, "central") == 0) {
            assert_true(fabs(h.delta[j] - mean[j] / denom) <= tol);
        }
    }
    if (strcmp(mode, "distributed") == 0) {
        /* The devices' raw deltas, clipped as the encoder does, averaged; then compared. */
        double avg[SFX_MAX_VEC] = {0};
        for (int i = 0; i < w->n; i++) {
            if (!in[i])
                continue;
            const struct sfx_update *u = &w->d[i].up;
            double n2 = 0;
            for (size_t j = 0; j < d; j++)
                n2 += (double)u->delta[j] * u->delta[j];
            double s = sqrt(n2) > 1.0 ? 1.0 / sqrt(n2) : 1.0;
            for (size_t j = 0; j < d; j++)
                avg[j] += u->delta[j] * s / count;
        }
        for (size_t j = 0; j < d; j++)
            assert_true(fabs(h.delta[j] - avg[j]) <= tol);
    }
}

static void assert_all_completed(struct world *w, const bool *in) {
    for (int i = 0; i < w->n; i++) {
        fl_client_stats cs;
        sdev_stats(&w->d[i], &cs);
        if (in && !in[i])
            continue;
        if (cs.rounds_completed != 1)
            fprintf(stderr, "device %d: completed %llu failed %llu: %s\n", i,
                    (unsigned long long)cs.rounds_completed, (unsigned long long)cs.rounds_failed,
                    fl_client_errmsg(w->d[i].c));
        assert_int_equal(cs.rounds_completed, 1);
        assert_int_equal(cs.uploads, 1);
        assert_int_equal(cs.rounds_failed, 0);
    }
}

/* Every device back to idle (its round over, outcome read). */
static bool all_idle(void *u) {
    struct world *w = u;
    return sfx_aggregated(w->f) && sdev_all_idle(w->d, w->n);
}

static void run_basic_norm(const char *mode, bool secagg, bool examples, double noise,
                           double tol, bool norm) {
    struct popspec s = {"pop", 4, 3, secagg, mode, examples ? "examples" : "uniform", noise,
                        30, 0, 0, norm ? SA_NORM_PROOF : 0};
    int ex[4] = {20, 21, 22, 23};
    struct world w;
    world_open(&w, &s, 4, ex, 0, false);
    int passes = sdev_drive(w.f, w.d, 4, all_idle, &w, 400, 200);
    if (passes >= 400)
        for (int i = 0; i < 4; i++)
            fprintf(stderr, "device %d: %s\n", i, fl_client_errmsg(w.d[i].c));
    assert_true(passes < 400);
    bool in[4] = {true, true, true, true};
    check_round(&w, "pop", in, mode, examples, tol);
    assert_all_completed(&w, NULL);
    /* The OpenBLAS kernel check warns once per client, exactly where it applies here. */
    int blas_advice = fl__client_blas_advice(NULL, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(w.d[i].blas_warnings, blas_advice);
    if (examples) /* weights are min(examples, weight_cap = 22) */
        for (int i = 0; i < 4; i++)
            assert_int_equal(w.d[i].up.words[w.d[i].up.len - 1], ex[i] < 22 ? ex[i] : 22);
    world_close(&w);
}

static void run_basic(const char *mode, bool secagg, bool examples, double noise, double tol) {
    run_basic_norm(mode, secagg, examples, noise, tol, false);
}

/* ---- tests ---- */

static void test_secagg_round_exact(void **st) {
    (void)st;
    run_basic("none", true, false, 0, 0);
}

/* Norm proofs (secagg.norm_proof): every device proves its masked update's norm and its
 * weight's range; the sum is still bit for bit the plain sum of the devices' words (uniform
 * and examples weighting, central DP). */
static void test_secagg_norm_proof_round(void **st) {
    (void)st;
    run_basic_norm("none", true, false, 0, 0, true);
    run_basic_norm("none", true, true, 0, 0, true);
    run_basic_norm("central", true, false, 0.1, 8 * 0.1 / 4 + 1.0 / 1024, true);
}

static void test_plain_round_examples_weighting(void **st) {
    (void)st;
    run_basic("none", false, true, 0, 0);
}

static void test_secagg_examples_weighting(void **st) {
    (void)st;
    run_basic("none", true, true, 0, 0);
}

/* Central DP: noise std on the average is z * C / n = 0.1 / 4 per coordinate. */
static void test_central_dp_round(void **st) {
    (void)st;
    run_basic("central", true, false, 0.1, 8 * 0.1 / 4 + 1.0 / 1024);
}

/* Distributed DP (rotation, per-device discrete Gaussian share, fl_dp_distributed_encode). */
static void test_distributed_dp_round(void **st) {
    (void)st;
    run_basic("distributed", true, false, 0.1, 8 * 0.1 / 4 + 0.05);
}

static bool captured(const uint8_t *buf, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, s, n) == 0)
            return true;
    return false;
}

struct cap {
    uint8_t *buf;
    size_t len, cap;
};

static void on_cap(void *u, enum sim_ft_dir dir, const void *data, size_t n) {
    (void)dir;
    struct cap *c = u;
    if (c->len + n > c->cap) {
        c->cap = (c->len + n) * 2 + 4096;
        c->buf = realloc(c->buf, c->cap);
        assert_non_null(c->buf);
    }
    memcpy(c->buf + c->len, data, n);
    c->len += n;
}

/* The first device is selected into a round that is still forming: its task request is
 * answered 425 phase_not_open; it retries when told and completes the round. */
static void test_task_of_forming_round(void **st) {
    (void)st;
    struct popspec s = {"pop", 3, 3, true, "none", NULL, 0, 30, 0, 0, false};
    struct world w;
    world_open(&w, &s, 3, NULL, 0, false);
    struct cap c0 = {0};
    sim_ft_set_capture(w.d[0].ft, on_cap, &c0);
    w.d[2].off = true; /* the third device arrives later */
    sdev_drive(w.f, w.d, 3, NULL, NULL, 3, 200); /* enroll, check in, task: 425 */
    assert_true(captured(c0.buf, c0.len, "phase_not_open"));
    fl_client_stats cs;
    sdev_stats(&w.d[0], &cs);
    assert_int_equal(cs.state, FL_CLIENT_STATE_TASK);
    w.d[2].off = false;
    assert_true(sdev_drive(w.f, w.d, 3, all_idle, &w, 400, 200) < 400);
    bool in[3] = {true, true, true};
    check_round(&w, "pop", in, "none", false, 0);
    assert_all_completed(&w, NULL);
    free(c0.buf);
    world_close(&w);
}

/* Lost requests and lost responses everywhere in a round: the devices retry with backoff,
 * the Idempotency-Key makes every retry safe (replays answer 200, nothing counts twice),
 * and the round completes with every device in the sum. */
static void test_resume_after_network_failures(void **st) {
    (void)st;
    for (int secagg = 1; secagg >= 0; secagg--) {
        struct popspec s = {"pop", 3, 3, secagg, "none", NULL, 0, 30, 0, 0, false};
        struct world w;
        world_open(&w, &s, 3, NULL, 0, false);
        sim_ft_rule rules[] = {
            {"POST", "/v1/checkin", 0, 1, SIM_FT_DROP_RESPONSE},
            {"GET", "/task", 0, 1, SIM_FT_DROP_RESPONSE},
            {"GET", "/v1/models/", 0, 1, SIM_FT_DROP_REQUEST},
            {"POST", "/secagg/advertise", 0, 1, SIM_FT_DROP_RESPONSE},
            {"GET", "/secagg/advertise/result", 0, 1, SIM_FT_DROP_RESPONSE},
            {"POST", "/secagg/share", 0, 2, SIM_FT_DROP_REQUEST},
            {"POST", "/secagg/masked", 0, 1, SIM_FT_DROP_RESPONSE},
            {"GET", "/secagg/masked/result", 0, 1, SIM_FT_DROP_RESPONSE},
            {"POST", "/secagg/unmask", 0, 1, SIM_FT_DROP_RESPONSE},
            {"POST", "/update", 0, 1, SIM_FT_DROP_RESPONSE},
            {"GET", "/status", 0, 1, SIM_FT_DROP_RESPONSE},
        };
        for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++)
            assert_int_equal(sim_ft_add_rule(w.d[r % 2].ft, &rules[r]), FL_OK);
        assert_true(sdev_drive(w.f, w.d, 3, all_idle, &w, 600, 200) < 600);
        bool in[3] = {true, true, true};
        check_round(&w, "pop", in, "none", false, 0);
        assert_all_completed(&w, NULL);
        for (int i = 0; i < 2; i++) {
            fl_client_stats cs;
            sdev_stats(&w.d[i], &cs);
            sim_ft_stats fs;
            sim_ft_get_stats(w.d[i].ft, &fs);
            assert_true(fs.faults >= 2);
            assert_true(cs.transient_errors >= fs.faults);
        }
        world_close(&w);
    }
}

/* A device vanishes (no network) just before it would post in phase `phase`: the phase
 * closes at its deadline without it, the round completes without it (secagg recovers its
 * masks), and when it is back the server answers 410 and it gives up cleanly. */
static enum sim_ft_action vanish_at(void *user, const fl_client_request *req, int64_t *delay,
                                    int64_t *offline) {
    const char *phase = user;
    (void)delay;
    if (strcmp(req->method, "POST") == 0 && strstr(req->path, phase))
        *offline = INT64_MAX; /* until the test brings it back */
    return SIM_FT_PASS;
}

static void vanish(const char *phase, bool secagg, int sa_opts) {
    struct popspec s = {"pop", 4, 3, secagg, "none", NULL, 0, 10, 0, 0, sa_opts};
    struct world w;
    world_open(&w, &s, 4, NULL, 0, false);
    sim_ft_set_decide(w.d[3].ft, vanish_at, (void *)phase);
    int passes = sdev_drive(w.f, w.d, 4, sfx_aggregated, w.f, 800, 200);
    assert_true(passes < 800);
    w.d[3].off = true; /* let the others read the outcome */
    assert_true(sdev_drive(w.f, w.d, 4, all_idle, &w, 200, 200) < 200);
    bool in[4] = {true, true, true, false};
    check_round(&w, "pop", in, "none", false, 0);
    assert_all_completed(&w, in);
    /* Back online: its next request is refused (410) and it gives the round up. */
    w.d[3].off = false;
    sim_ft_set_decide(w.d[3].ft, NULL, NULL);
    sim_ft_set_offline_until(w.d[3].ft, 0);
    for (int i = 0; i < 40; i++) {
        fl_client_stats cs;
        sdev_stats(&w.d[3], &cs);
        if (cs.rounds_failed)
            break;
        sdev_drive(w.f, &w.d[3], 1, NULL, NULL, 1, 500);
    }
    fl_client_stats cs;
    sdev_stats(&w.d[3], &cs);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.rounds_completed, 0);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    world_close(&w);
}

static void test_vanished_before_advertise(void **st) {
    (void)st;
    vanish("/secagg/advertise", true, 0);
}

static void test_vanished_before_masked(void **st) {
    (void)st;
    vanish("/secagg/masked", true, 0);
}

/* The same with secagg.reveal_pair_seeds: the survivors' unmask answers carry the seeds
 * they shared with the vanished device, and the round is as exact. */
static void test_vanished_before_masked_reveal(void **st) {
    (void)st;
    vanish("/secagg/masked", true, SA_REVEAL);
}

static void test_vanished_before_plain_update(void **st) {
    (void)st;
    vanish("/update", false, 0);
}

/* Tampered, unsigned or foreign-key bodies end the round before anything derived from
 * training is sent; a key-id mismatch at enrollment is a sticky failure. */
static void refusal(int mode) {
    struct popspec s = {"pop", 1, 1, false, "none", NULL, 0, 30, 0, 0, false};
    struct world w;
    world_open(&w, &s, 1, NULL, 0, false);
    struct cap cap = {0};
    sim_ft_set_capture(w.d[0].ft, on_cap, &cap);
    if (mode == 0) {
        sim_ft_rule r = {"GET", "/task", 0, -1, SIM_FT_TAMPER_BODY};
        sim_ft_add_rule(w.d[0].ft, &r);
    } else if (mode == 1) {
        sim_ft_rule r = {"GET", "/v1/models/", 0, -1, SIM_FT_STRIP_SIGNATURE};
        sim_ft_add_rule(w.d[0].ft, &r);
    } else if (mode == 2) {
        sim_ft_rule r = {"GET", "/v1/models/", 0, -1, SIM_FT_TAMPER_BODY};
        sim_ft_add_rule(w.d[0].ft, &r);
    } else {
        /* Enrolled with the right key, then the app pins another one: the signed task is
         * from a key that is not pinned. */
        sdev_drive(w.f, w.d, 1, NULL, NULL, 1, 0);
        char tok[256];
        assert_int_equal(fl_client_token(w.d[0].c, tok, sizeof(tok)), FL_OK);
        sdev_close(&w.d[0]);
        uint8_t other[32];
        memset(other, 0x42, sizeof(other));
        struct sdev_opts o = {.population = "pop",
                              .client_token = tok,
                              .n_examples = 20,
                              .pinned = other};
        assert_int_equal(sdev_open(&w.d[0], w.f, 0, &o), FL_OK);
        sim_ft_set_capture(w.d[0].ft, on_cap, &cap);
    }
    for (int i = 0; i < 10; i++) {
        sdev_drive(w.f, w.d, 1, NULL, NULL, 1, 0);
        fl_client_stats cs;
        sdev_stats(&w.d[0], &cs);
        if (cs.rounds_failed)
            break;
    }
    fl_client_stats cs;
    sdev_stats(&w.d[0], &cs);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.uploads, 0);
    assert_int_equal(cs.last_error, FL_ERR_CRYPTO);
    assert_int_equal(w.d[0].up.calls, 0); /* nothing was even trained */
    assert_false(captured(cap.buf, cap.len, "/update"));
    assert_false(captured(cap.buf, cap.len, "/secagg/"));
    free(cap.buf);
    world_close(&w);
}

static void test_refuses_tampered_task(void **st) {
    (void)st;
    refusal(0);
}

static void test_refuses_unsigned_model(void **st) {
    (void)st;
    refusal(1);
}

static void test_refuses_tampered_model(void **st) {
    (void)st;
    refusal(2);
}

static void test_refuses_foreign_key(void **st) {
    (void)st;
    refusal(3);
}

static void test_enrollment_key_mismatch_is_sticky(void **st) {
    (void)st;
    struct sfx *f = sfx_start(false);
    size_t mlen;
    uint8_t *m = sfx_model(&mlen);
    char json[4096], etok[256];
    struct popspec s = {"pop", 1, 1, false, "none", NULL, 0, 30, 0, 0, false};
    pop_json(json, sizeof(json), &s);
    sfx_population(f, json, m, mlen, etok, sizeof(etok));
    uint8_t other[32];
    memset(other, 0x42, sizeof(other));
    struct sdev d;
    struct sdev_opts o = {.population = "pop", .etok = etok, .n_examples = 5, .pinned = other};
    assert_int_equal(sdev_open(&d, f, 0, &o), FL_OK);
    int64_t next;
    assert_int_equal(fl_client_step(d.c, &next), FL_ERR_CRYPTO);
    assert_int_equal(fl_client_step(d.c, &next), FL_ERR_CRYPTO); /* sticky */
    fl_client_stats cs;
    sdev_stats(&d, &cs);
    assert_int_equal(cs.state, FL_CLIENT_STATE_FAILED);
    sdev_close(&d);
    free(m);
    sfx_stop(f);
}

/* A device that is not selected waits exactly the retry_after_s it was given and sends
 * nothing before; then it checks in without a 429. */
static void test_pace_steering(void **st) {
    (void)st;
    struct popspec s = {"pop", 1, 1, false, "none", NULL, 0, 30, 40, 90, false};
    struct world w;
    world_open(&w, &s, 2, NULL, 0, false);
    struct cap cb = {0};
    sim_ft_set_capture(w.d[1].ft, on_cap, &cb);
    int64_t n0, n1;
    fl_client_step(w.d[0].c, &n0); /* enroll */
    fl_client_step(w.d[0].c, &n0); /* check in: selected, the round starts */
    fl_client_step(w.d[1].c, &n1); /* enroll */
    int64_t t0 = sfx_clock(w.f);
    assert_int_equal(fl_client_step(w.d[1].c, &n1), FL_OK); /* check in: retry */
    const char *ra = NULL;
    for (size_t i = 0; i + 16 <= cb.len && !ra; i++)
        if (memcmp(cb.buf + i, "\"retry_after_s\":", 16) == 0)
            ra = (const char *)cb.buf + i + 16;
    assert_non_null(ra);
    long secs = strtol(ra, NULL, 10);
    assert_true(secs >= 40 && secs <= 90);
    assert_int_equal(n1, t0 + secs * 1000);
    fl_client_stats cs;
    sdev_stats(&w.d[1], &cs);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    sim_ft_stats before, after;
    sim_ft_get_stats(w.d[1].ft, &before);
    sfx_advance(w.f, secs * 1000 - 1);
    fl_client_step(w.d[1].c, &n1);
    sim_ft_get_stats(w.d[1].ft, &after);
    assert_int_equal(before.requests, after.requests);
    sfx_advance(w.f, 1);
    fl_client_step(w.d[1].c, &n1);
    sim_ft_get_stats(w.d[1].ft, &after);
    assert_int_equal(after.requests, before.requests + 1);
    assert_false(captured(cb.buf, cb.len, "rate_limited"));
    free(cb.buf);
    world_close(&w);
}

/* Devices on their own threads with real long polls (?wait=S, parked in the server):
 * they wait for each phase instead of polling, and the round completes in real time. */
struct thr {
    struct sdev *d;
    fl_status rc;
};

static void *dev_thread(void *arg) {
    struct thr *t = arg;
    for (int i = 0; i < 10; i++) {
        t->rc = fl_client_run(t->d->c, 20000);
        fl_client_stats cs;
        sdev_stats(t->d, &cs);
        if (cs.rounds_completed + cs.rounds_failed > 0 || (t->rc != FL_OK && t->rc != FL_ERR_AGAIN))
            break;
    }
    return NULL;
}

static void test_long_polls_on_threads(void **st) {
    (void)st;
    for (int secagg = 1; secagg >= 0; secagg--) {
        struct popspec s = {"pop", 3, 3, secagg, "none", NULL, 0, 30, 0, 0, false};
        struct world w;
        world_open(&w, &s, 3, NULL, 10, true);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pthread_t th[3];
        struct thr a[3];
        for (int i = 0; i < 3; i++) {
            a[i].d = &w.d[i];
            assert_int_equal(pthread_create(&th[i], NULL, dev_thread, &a[i]), 0);
        }
        for (int i = 0; i < 3; i++)
            pthread_join(th[i], NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        bool in[3] = {true, true, true};
        check_round(&w, "pop", in, "none", false, 0);
        assert_all_completed(&w, NULL);
        for (int i = 0; i < 3; i++) {
            sim_ft_stats fs;
            sim_ft_get_stats(w.d[i].ft, &fs);
            /* enroll, check-in, task (maybe 425 + retry), model, 4 x (post + result) or
             * update + status: long polls, not busy polling */
            assert_true(fs.requests <= 20);
        }
        assert_true(secs < 20);
        world_close(&w);
    }
}

/* ---- no example bytes on the wire ---- */

static void test_no_example_bytes_on_the_wire(void **st) {
    (void)st;
    for (int secagg = 0; secagg < 2; secagg++) {
        struct popspec s = {"pop", 3, 3, secagg, "none", NULL, 0, 30, 0, 0, false};
        int ex[3] = {25, 25, 25};
        struct world w;
        world_open(&w, &s, 3, ex, 0, false);
        struct cap cap = {0};
        for (int i = 0; i < 3; i++)
            sim_ft_set_capture(w.d[i].ft, on_cap, &cap);
        assert_true(sdev_drive(w.f, w.d, 3, all_idle, &w, 400, 200) < 400);
        assert_all_completed(&w, NULL);
        assert_true(cap.len > 5000);
        /* No 8-byte window of any example's features appears anywhere, in either direction. */
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 25; i++) {
                float x[SFX_IN];
                int32_t y;
                sfx_example(x, &y, k, i);
                for (int off = 0; off + 2 <= SFX_IN; off++)
                    assert_null(memmem(cap.buf, cap.len, x + off, 8));
            }
        free(cap.buf);
        world_close(&w);
    }
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secagg_round_exact),
        cmocka_unit_test(test_secagg_norm_proof_round),
        cmocka_unit_test(test_plain_round_examples_weighting),
        cmocka_unit_test(test_secagg_examples_weighting),
        cmocka_unit_test(test_central_dp_round),
        cmocka_unit_test(test_distributed_dp_round),
        cmocka_unit_test(test_task_of_forming_round),
        cmocka_unit_test(test_resume_after_network_failures),
        cmocka_unit_test(test_vanished_before_advertise),
        cmocka_unit_test(test_vanished_before_masked),
        cmocka_unit_test(test_vanished_before_masked_reveal),
        cmocka_unit_test(test_vanished_before_plain_update),
        cmocka_unit_test(test_refuses_tampered_task),
        cmocka_unit_test(test_refuses_unsigned_model),
        cmocka_unit_test(test_refuses_tampered_model),
        cmocka_unit_test(test_refuses_foreign_key),
        cmocka_unit_test(test_enrollment_key_mismatch_is_sticky),
        cmocka_unit_test(test_pace_steering),
        cmocka_unit_test(test_long_polls_on_threads),
        cmocka_unit_test(test_no_example_bytes_on_the_wire),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
