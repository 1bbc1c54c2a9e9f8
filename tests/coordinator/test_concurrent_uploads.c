/* Many large plain updates arriving at once still aggregate exactly (coordinator/src/http.c
 * streams each body into its own buffer and hashes it chunk by chunk; round.c folds it under
 * the coordinator lock).
 *
 * A population of NMAX devices gets a model whose update tensor "w" has DIM = 65536
 * coordinates, so every update body is 256 KiB and arrives in many chunks. The devices post
 * at once, one thread and one connection each, released together by a barrier; each then
 * posts the same bytes again (200, Idempotent-Replayed) and every other device a body that
 * differs in one word (409 already_submitted), racing the other devices' first posts and the
 * round's aggregation. Then the sum the coordinator decoded (the test hook, first 1024 words)
 * must equal the exact sum of the devices' words modulo 2^32, with every device counted
 * once, and every one of the DIM coordinates of the new model must be the FedAvg of the
 * devices' updates (coord_testkit's expected_fedavg arithmetic): a lost, doubled, torn or
 * cross-wired body changes coordinates by at least granularity / NMAX. No timing is asserted.
 */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/tensor.h"

enum { N = NMAX, DIM = 65536, L = DIM + 1 };

#define GRAN 0.0009765625 /* 2^-10: the population's granularity */

/* Device i's word for coordinate k: magnitudes 1..999, every other one negative (centred,
 * below 2^32), so the sum exercises the wrap; the last word is the weight 1. */
static uint64_t word_of(int i, size_t k) {
    if (k == DIM)
        return 1;
    uint64_t m = 1 + (k * 7 + (size_t)i * 131 + (k >> 3) * 13) % 999;
    return ((k + (size_t)i) & 1) ? ((uint64_t)1 << 32) - m : m;
}

static float base_of(size_t k) {
    return 0.001f * (float)(k % 97) - 0.03f;
}

/* Model version with "w" (DIM floats, base_of) and "b" (2 floats); malloc'ed. */
static uint8_t *big_model(size_t *len) {
    float *w = malloc(DIM * sizeof(float)), b[2] = {3.0f, -4.0f};
    assert_non_null(w);
    for (size_t k = 0; k < DIM; k++)
        w[k] = base_of(k);
    uint8_t *buf = model_wb(w, DIM, b, len);
    free(w);
    return buf;
}

/* One device's thread: its posts and what they were answered (no cmocka asserts here: they
 * would jump out of another thread; the main thread checks the answers). */
struct uploader {
    struct fx *f;
    struct tc *c;
    pthread_barrier_t *go;
    char path[96];
    const uint8_t *body, *other; /* its update, and one word changed (or NULL) */
    size_t len;
    long first, replay, conflict; /* statuses; -1 = transport error */
    bool replayed;                /* the replay carried Idempotent-Replayed: true */
};

static long post(struct uploader *u, const uint8_t *body, struct resp *r) {
    memset(r, 0, sizeof(*r));
    CURL *h = curl_easy_init();
    if (!h)
        return -1;
    struct curl_slist *hl = http_prepare(u->f, h, "POST", u->path, u->c->tok,
                                         "application/octet-stream", body, u->len, u->c->pid, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, fl_test_scaled(60));
    long st = -1;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return st;
}

static void *upload_main(void *arg) {
    struct uploader *u = arg;
    struct resp r;
    pthread_barrier_wait(u->go);
    u->first = post(u, u->body, &r);
    resp_free(&r);
    u->replay = post(u, u->body, &r);
    char v[16];
    u->replayed = header_in(&r, "Idempotent-Replayed", v, sizeof(v)) && strcmp(v, "true") == 0;
    resp_free(&r);
    if (u->other) {
        u->conflict = post(u, u->other, &r);
        resp_free(&r);
    }
    return NULL;
}

static void test_concurrent_large_uploads_exact(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "conc", .target = N, .min = N, .mode = "none", .bits = 32};
    /* The clip norm is above every update's norm (at most 999 sqrt(DIM) granules), so no
     * update is clipped and the model is the plain mean. */
    struct popsel sel = {.granularity = GRAN, .clip_norm = 999.0 * 256.0 * GRAN * 1.01 + 1.0};
    struct tc *c = calloc(N, sizeof(*c));
    assert_non_null(c);
    setup_devices_sel(f, &pc, &sel, c, N);
    size_t mlen;
    uint8_t *model = big_model(&mlen);
    struct resp r = http_req(f, "POST", "/v1/admin/populations/conc/models", ADMIN_TOKEN,
                             "application/octet-stream", model, mlen, NULL);
    if (r.status != 201)
        fprintf(stderr, "model upload: %ld %s\n", r.status, r.body ? r.body : "");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    free(model);

    int64_t rid = 0;
    checkin_all(f, c, N, &rid);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
    for (int i = 0; i < N; i++) {
        r = http_req(f, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid);
        assert_int_equal(r.status, 200);
        parse_task(&r, &c[i].task);
        resp_free(&r);
        assert_int_equal(c[i].task.vec_len, L);
        assert_int_equal(c[i].task.dim, DIM);
        assert_true(fabs(c[i].task.gran - GRAN) < 1e-12);
    }

    struct sum_hook *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    fl__coord_debug_hook_set(f->co, sum_hook_capture, h);
    /* Bodies: (N, 16 + 4 L) and each one's conflicting twin. */
    size_t blen = 16 + 4 * (size_t)L;
    uint8_t *bodies = malloc(2 * N * blen);
    uint64_t *words = malloc(L * sizeof(uint64_t));
    assert_non_null(bodies);
    assert_non_null(words);
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; k < L; k++)
            words[k] = word_of(i, k);
        uint8_t *b = bodies + (size_t)i * blen, *o = bodies + (size_t)(N + i) * blen;
        assert_int_equal(plain_update_body(b, rid, words, L, 4), blen);
        memcpy(o, b, blen);
        o[16 + 4 * (size_t)(i * 1000)] ^= 1; /* one word differs */
    }
    free(words);

    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, N), 0);
    struct uploader u[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        u[i] = (struct uploader){.f = f,
                                 .c = &c[i],
                                 .go = &go,
                                 .len = blen,
                                 .body = bodies + (size_t)i * blen,
                                 .other = (i % 2) ? bodies + (size_t)(N + i) * blen : NULL,
                                 .first = -1,
                                 .replay = -1,
                                 .conflict = -1};
        snprintf(u[i].path, sizeof(u[i].path), "/v1/rounds/%lld/update", (long long)rid);
        assert_int_equal(pthread_create(&th[i], NULL, upload_main, &u[i]), 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < N; i++) {
        if (u[i].first != 202 || u[i].replay != 200 || !u[i].replayed ||
            (u[i].other && u[i].conflict != 409))
            fprintf(stderr, "device %d: first %ld, replay %ld (replayed %d), conflict %ld\n", i,
                    u[i].first, u[i].replay, (int)u[i].replayed, u[i].conflict);
        assert_int_equal(u[i].first, 202);
        assert_int_equal(u[i].replay, 200);
        assert_true(u[i].replayed);
        if (u[i].other)
            assert_int_equal(u[i].conflict, 409);
    }
    free(bodies);

    /* The outcome (the last post may still be aggregating when the others return). */
    snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=20", (long long)rid);
    json_t *st = NULL;
    for (int tries = 0; tries < 10; tries++) {
        r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
        assert_int_equal(r.status, 200);
        st = body_json(&r);
        resp_free(&r);
        if (strcmp(json_string_value(json_object_get(st, "state")), "completed") == 0)
            break;
        json_decref(st);
        st = NULL;
    }
    assert_non_null(st);
    int64_t version = json_integer_value(json_object_get(st, "new_model_version"));
    assert_int_equal(json_integer_value(json_object_get(st, "participants")), N);
    json_decref(st);

    /* The decoded sum: exact, every device once. */
    assert_int_equal(h->calls, 1);
    assert_int_equal(h->round_id, rid);
    assert_int_equal(h->count, N);
    assert_int_equal(h->vec_len, 1024);
    uint64_t mask = 0xffffffffu;
    for (size_t k = 0; k < 1024; k++) {
        uint64_t e = 0;
        for (int i = 0; i < N; i++)
            e = (e + word_of(i, k)) & mask;
        assert_int_equal(h->sum[k], e);
    }
    fl__coord_debug_hook_set(f->co, NULL, NULL);

    /* The new model, every coordinate: base + the centred sum x gamma / N (aggregate.c's
     * arithmetic, as expected_fedavg). */
    snprintf(path, sizeof(path), "/v1/models/conc/%lld", (long long)version);
    r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    fl_safetensors *sf = NULL;
    assert_int_equal(fl_safetensors_create(&sf, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(sf, r.body, r.len), FL_OK);
    fl_tensor_view tv;
    assert_int_equal(fl_safetensors_find(sf, &tv, "w"), FL_OK);
    assert_int_equal(tv.nbytes, DIM * sizeof(float));
    const uint8_t *wb = tv.data;
    size_t bad = 0;
    for (size_t k = 0; k < DIM; k++) {
        uint64_t s = 0;
        for (int i = 0; i < N; i++)
            s = (s + word_of(i, k)) & mask;
        int64_t z = s >= 0x80000000u ? -(int64_t)(0x100000000ull - s) : (int64_t)s;
        float d = (float)((double)z * GRAN / (double)N);
        float want = (float)(base_of(k) + 1.0 * (double)d), got;
        memcpy(&got, wb + k * sizeof(float), sizeof(float));
        if (fabsf(got - want) > 1e-6f && bad++ < 5)
            fprintf(stderr, "w[%zu] = %.9g, want %.9g\n", k, (double)got, (double)want);
    }
    assert_int_equal(bad, 0);
    fl_safetensors_destroy(sf);
    resp_free(&r);
    free(h);
    clients_free(c, N);
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_large_uploads_exact, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
