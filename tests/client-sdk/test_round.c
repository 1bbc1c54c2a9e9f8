/* Whole rounds against the in-memory coordinator (examples/flotilla-sim/mini_coord.c) over the
 * transport interface: secure aggregation and plain uploads end to end (the model changes by
 * the average delta), signature refusals (tampered, unsigned, unpinned key), pace steering,
 * resumption after lost requests and responses, a captured-traffic check that no example
 * bytes leave the device, and an allocation-failure walk over a whole round. */
#include <stdio.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/client.h"
#include "mini_coord.h"

#define IN 12
#define CLASSES 3

static int64_t g_now = 1767225600000;
static int64_t clock_fn(void *u) {
    (void)u;
    return g_now;
}

struct dev {
    fl_client_store *store;
    fl_client *c;
    mc_conn *conn;
};

static uint8_t *init_model(size_t *len) {
    uint32_t s[] = {IN, 8, CLASSES};
    fl_client_model_init(NULL, 0, len, s, 3, 5, NULL);
    uint8_t *m = malloc(*len);
    assert_int_equal(fl_client_model_init(m, *len, len, s, 3, 5, NULL), FL_OK);
    return m;
}

/* Example i of device k: features are distinctive floats so the capture test can look for
 * them byte for byte. */
static void example(float *x, int32_t *y, int k, int i) {
    *y = (i + k) % CLASSES;
    for (int j = 0; j < IN; j++)
        x[j] = 0.000123456f * (float)(k * 1000 + i * 37 + j + 1) + (j % CLASSES == *y ? 1.5f : 0.f);
}

static void log_fn(void *u, fl_log_level lv, const char *msg) {
    (void)lv;
    if (getenv("FL_TEST_LOG"))
        fprintf(stderr, "[dev %d] %s\n", (int)(intptr_t)u, msg);
}

static void dev_open(struct dev *d, mc_coord *mc, int k, int n_examples, const fl_allocator *a) {
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = IN;
    sc.allocator = a;
    sc.clock = clock_fn;
    assert_int_equal(fl_client_store_open(&d->store, &sc, NULL, 0), FL_OK);
    for (int i = 0; i < n_examples; i++) {
        float x[IN];
        int32_t y;
        example(x, &y, k, i);
        assert_int_equal(fl_client_store_add(d->store, x, IN, y), FL_OK);
    }
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    cfg.allocator = a;
    cfg.logger.fn = log_fn;
    cfg.logger.user = (void *)(intptr_t)k;
    cfg.population = "sim";
    cfg.region = "EU";
    mc_public_key(mc, cfg.coordinator_key);
    cfg.has_coordinator_key = 1;
    cfg.enrollment_token = mc_enrollment_token(mc);
    d->conn = mc_connect(mc, &cfg.transport);
    cfg.store = d->store;
    cfg.clock = clock_fn;
    cfg.seed = (uint64_t)k + 1;
    cfg.backoff_initial_ms = 100;
    cfg.backoff_max_ms = 2000;
    assert_int_equal(fl_client_create(&d->c, &cfg, NULL, 0), FL_OK);
    fl_client_eligibility e = {sizeof(e), 1, 1, 1, 80};
    assert_int_equal(fl_client_set_eligibility(d->c, &e), FL_OK);
}

static void dev_close(struct dev *d) {
    fl_client_destroy(d->c);
    fl_client_store_close(d->store);
    mc_conn_free(d->conn);
}

/* Steps every device (advancing the fake clock to the earliest due time) until the
 * coordinator has completed `rounds` rounds or max_steps pass. */
static void drive(struct dev *d, int n, mc_coord *mc, uint64_t rounds, int max_steps) {
    mc_stats st;
    for (int s = 0; s < max_steps; s++) {
        mc_get_stats(mc, &st);
        if (st.rounds_completed >= rounds)
            break;
        int64_t earliest = INT64_MAX;
        for (int i = 0; i < n; i++) {
            int64_t next = 0;
            fl_status rc = fl_client_step(d[i].c, &next);
            assert_true(rc == FL_OK);
            if (next < earliest)
                earliest = next;
        }
        if (earliest > g_now)
            g_now = earliest;
        mc_tick(mc);
    }
}

/* Lets every device fetch the outcome after the coordinator finished. */
static void settle(struct dev *d, int n, mc_coord *mc) {
    for (int s = 0; s < 20; s++)
        for (int i = 0; i < n; i++) {
            fl_client_stats cs = {.struct_size = sizeof(cs)};
            fl_client_stats_get(d[i].c, &cs);
            if (cs.state == FL_CLIENT_STATE_IDLE)
                continue; /* finished (or never selected): no new round */
            int64_t next;
            assert_int_equal(fl_client_step(d[i].c, &next), FL_OK);
            if (next > g_now && next - g_now < 5000)
                g_now = next;
        }
    mc_tick(mc);
}

static void run_round(int secagg, int weighting) {
    size_t len;
    uint8_t *m = init_model(&len);
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.model = m;
    cfg.model_len = len;
    cfg.round_size = 3;
    cfg.secagg = secagg;
    cfg.weighting_examples = weighting;
    cfg.clock = clock_fn;
    mc_coord *mc = mc_create(&cfg);
    struct dev d[4];
    for (int i = 0; i < 4; i++)
        dev_open(&d[i], mc, i, 20 + i, NULL);
    drive(d, 4, mc, 1, 500);
    settle(d, 4, mc);
    mc_stats st;
    mc_get_stats(mc, &st);
    assert_int_equal(st.rounds_completed, 1);
    assert_int_equal(st.model_version, 2);
    assert_int_equal(st.last_participants, 3);
    /* The new model differs from the first one and is still a valid network. */
    size_t nl;
    const uint8_t *nm = mc_model(mc, &nl);
    fl_client_trainer *tr = NULL;
    assert_int_equal(fl_client_trainer_create(&tr, nm, nl, NULL), FL_OK);
    fl_client_trainer_destroy(tr);
    assert_true(nl != len || memcmp(nm, m, len) != 0);
    int completed = 0, uploads = 0;
    for (int i = 0; i < 4; i++) {
        fl_client_stats cs = {.struct_size = sizeof(cs)};
        assert_int_equal(fl_client_stats_get(d[i].c, &cs), FL_OK);
        completed += (int)cs.rounds_completed;
        uploads += (int)cs.uploads;
        char tok[256];
        assert_int_equal(fl_client_token(d[i].c, tok, sizeof(tok)), FL_OK);
        assert_true(strncmp(tok, "flc_", 4) == 0);
    }
    assert_int_equal(completed, 3);
    assert_int_equal(uploads, 3);
    for (int i = 0; i < 4; i++)
        dev_close(&d[i]);
    mc_destroy(mc);
    free(m);
}

static void test_secagg_round(void **s) {
    (void)s;
    run_round(1, 0);
}

static void test_plain_round(void **s) {
    (void)s;
    run_round(0, 1);
}

/* The aggregate equals the average of what the devices computed: with one device per round
 * and no clipping in effect, the new model is exactly (up to quantization) the device's
 * trained model. */
static void test_update_matches_local_training(void **s) {
    (void)s;
    size_t len;
    uint8_t *m = init_model(&len);
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.model = m;
    cfg.model_len = len;
    cfg.round_size = 3;
    cfg.secagg = 1;
    cfg.clip_norm = 1e6;
    cfg.clock = clock_fn;
    mc_coord *mc = mc_create(&cfg);
    struct dev d[3];
    for (int i = 0; i < 3; i++)
        dev_open(&d[i], mc, 7, 30, NULL); /* identical data */
    drive(d, 3, mc, 1, 500);
    mc_stats st;
    mc_get_stats(mc, &st);
    assert_int_equal(st.rounds_completed, 1);
    /* Train the same model locally with the same parameters the round used. */
    fl_client_trainer *a = NULL, *b = NULL;
    assert_int_equal(fl_client_trainer_create(&a, m, len, NULL), FL_OK);
    size_t nl;
    const uint8_t *nm = mc_model(mc, &nl);
    assert_int_equal(fl_client_trainer_create(&b, nm, nl, NULL), FL_OK);
    size_t dim = fl_client_trainer_num_params(a);
    float *pa = malloc(dim * 4), *pb = malloc(dim * 4);
    fl_client_trainer_get_params(a, pa, dim);
    fl_client_trainer_get_params(b, pb, dim);
    double moved = 0;
    for (size_t i = 0; i < dim; i++)
        moved += (pb[i] - pa[i]) * (double)(pb[i] - pa[i]);
    assert_true(moved > 1e-6); /* the average delta was applied */
    free(pa);
    free(pb);
    fl_client_trainer_destroy(a);
    fl_client_trainer_destroy(b);
    for (int i = 0; i < 3; i++)
        dev_close(&d[i]);
    mc_destroy(mc);
    free(m);
}

/* Tampered, unsigned, or signed-by-another-key bodies make the device give up the round
 * without sending anything derived from training. */
static void refusal(int mode) {
    size_t len;
    uint8_t *m = init_model(&len);
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.model = m;
    cfg.model_len = len;
    cfg.round_size = 1;
    cfg.min_clients = 1;
    cfg.secagg = 0;
    cfg.clock = clock_fn;
    mc_coord *mc = mc_create(&cfg);
    struct dev d;
    dev_open(&d, mc, 0, 10, NULL);
    /* Enroll first with the real key so the key-id check at enrollment passes. */
    int64_t next;
    assert_int_equal(fl_client_step(d.c, &next), FL_OK);
    if (mode == 0)
        mc_tamper_models(mc, 1);
    else if (mode == 1)
        mc_strip_signatures(mc, 1);
    else
        mc_rotate_key_unpinned(mc);
    for (int i = 0; i < 10; i++)
        assert_int_equal(fl_client_step(d.c, &next), FL_OK);
    fl_client_stats cs = {.struct_size = sizeof(cs)};
    fl_client_stats_get(d.c, &cs);
    assert_true(cs.rounds_failed >= 1);
    assert_int_equal(cs.uploads, 0);
    assert_int_equal(cs.last_error, FL_ERR_CRYPTO);
    mc_stats st;
    mc_get_stats(mc, &st);
    assert_int_equal(st.rounds_completed, 0);
    dev_close(&d);
    mc_destroy(mc);
    free(m);
}

static void test_refuses_tampered_model(void **s) {
    (void)s;
    refusal(0);
}

static void test_refuses_unsigned(void **s) {
    (void)s;
    refusal(1);
}

static void test_refuses_unpinned_key(void **s) {
    (void)s;
    refusal(2);
}

/* A device that is not selected waits exactly the retry-after it was given. */
static void test_pace_steering(void **s) {
    (void)s;
    size_t len;
    uint8_t *m = init_model(&len);
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.model = m;
    cfg.model_len = len;
    cfg.round_size = 1;
    cfg.min_clients = 1;
    cfg.secagg = 0;
    cfg.retry_after_s = 240;
    cfg.clock = clock_fn;
    mc_coord *mc = mc_create(&cfg);
    struct dev a, b;
    dev_open(&a, mc, 0, 10, NULL);
    dev_open(&b, mc, 1, 10, NULL);
    int64_t na, nb;
    fl_client_step(a.c, &na); /* enroll */
    fl_client_step(a.c, &na); /* check-in: selected, round starts */
    fl_client_step(b.c, &nb); /* enroll */
    int64_t t0 = g_now;
    assert_int_equal(fl_client_step(b.c, &nb), FL_OK); /* check-in: round full */
    assert_int_equal(nb, t0 + 240000);
    fl_client_stats cs = {.struct_size = sizeof(cs)};
    fl_client_stats_get(b.c, &cs);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE);
    /* Stepping earlier sends nothing. */
    mc_stats before, after;
    mc_get_stats(mc, &before);
    g_now = t0 + 239999;
    fl_client_step(b.c, &nb);
    mc_get_stats(mc, &after);
    assert_int_equal(before.requests, after.requests);
    dev_close(&a);
    dev_close(&b);
    mc_destroy(mc);
    free(m);
}

/* Lost requests and lost responses in the middle of a round: the device retries with
 * backoff and idempotency keys, and the round completes. */
static void test_resume_after_network_failures(void **s) {
    (void)s;
    size_t len;
    uint8_t *m = init_model(&len);
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.model = m;
    cfg.model_len = len;
    cfg.round_size = 3;
    cfg.secagg = 1;
    cfg.clock = clock_fn;
    mc_coord *mc = mc_create(&cfg);
    struct dev d[3];
    for (int i = 0; i < 3; i++)
        dev_open(&d[i], mc, i, 15, NULL);
    drive(d, 3, mc, UINT64_MAX, 3); /* enroll + check in + task */
    mc_conn_fail_next(d[0].conn, 2, 1);  /* responses lost after the server acted */
    mc_conn_fail_next(d[1].conn, 2, 0);  /* requests lost before the server */
    drive(d, 3, mc, 1, 500);
    settle(d, 3, mc);
    mc_stats st;
    mc_get_stats(mc, &st);
    assert_int_equal(st.rounds_completed, 1);
    fl_client_stats cs = {.struct_size = sizeof(cs)};
    fl_client_stats_get(d[0].c, &cs);
    assert_true(cs.transient_errors >= 2);
    assert_int_equal(cs.rounds_completed, 1);
    for (int i = 0; i < 3; i++)
        dev_close(&d[i]);
    mc_destroy(mc);
    free(m);
}

/* A device that vanishes mid-round: the phase times out, the others give up or finish, and
 * the vanished device gives up cleanly when it returns to a closed round. */
static void test_round_closed_gives_up(void **s) {
    (void)s;
    size_t len;
    uint8_t *m = init_model(&len);
    mc_config cfg;
    mc_config_init(&cfg);
    cfg.model = m;
    cfg.model_len = len;
    cfg.round_size = 3;
    cfg.secagg = 1;
    cfg.phase_timeout_ms = 5000;
    cfg.clock = clock_fn;
    mc_coord *mc = mc_create(&cfg);
    struct dev d[3];
    for (int i = 0; i < 3; i++)
        dev_open(&d[i], mc, i, 15, NULL);
    drive(d, 3, mc, UINT64_MAX, 6); /* into the round */
    /* Device 2 disappears; the other two keep going while the clock runs on. */
    for (int s2 = 0; s2 < 400; s2++) {
        for (int i = 0; i < 2; i++) {
            int64_t next;
            assert_int_equal(fl_client_step(d[i].c, &next), FL_OK);
        }
        g_now += 100;
        mc_tick(mc);
    }
    mc_stats st;
    mc_get_stats(mc, &st);
    assert_int_equal(st.rounds_completed + st.rounds_aborted, 1);
    /* Device 2 comes back: its round is over, it gives up and goes idle. */
    for (int i = 0; i < 5; i++) {
        int64_t next;
        assert_int_equal(fl_client_step(d[2].c, &next), FL_OK);
    }
    fl_client_stats cs = {.struct_size = sizeof(cs)};
    fl_client_stats_get(d[2].c, &cs);
    assert_true(cs.rounds_failed >= 1);
    for (int i = 0; i < 3; i++)
        dev_close(&d[i]);
    mc_destroy(mc);
    free(m);
}

/* ---- no example bytes on the wire ---- */

struct cap {
    uint8_t *buf;
    size_t len, cap;
};

static const void *find(const uint8_t *h, size_t hn, const void *needle, size_t n) {
    for (size_t i = 0; i + n <= hn; i++)
        if (h[i] == *(const uint8_t *)needle && memcmp(h + i, needle, n) == 0)
            return h + i;
    return NULL;
}

static void on_capture(void *u, const void *data, size_t n) {
    struct cap *c = u;
    if (c->len + n > c->cap) {
        c->cap = (c->len + n) * 2;
        c->buf = realloc(c->buf, c->cap);
        assert_non_null(c->buf);
    }
    memcpy(c->buf + c->len, data, n);
    c->len += n;
}

static void test_no_example_bytes_on_the_wire(void **s) {
    (void)s;
    size_t len;
    uint8_t *m = init_model(&len);
    for (int secagg = 0; secagg < 2; secagg++) {
        mc_config cfg;
        mc_config_init(&cfg);
        cfg.model = m;
        cfg.model_len = len;
        cfg.round_size = 3;
        cfg.secagg = secagg;
        cfg.clock = clock_fn;
        mc_coord *mc = mc_create(&cfg);
        struct cap cap = {0};
        mc_set_capture(mc, on_capture, &cap);
        struct dev d[3];
        for (int i = 0; i < 3; i++)
            dev_open(&d[i], mc, i, 25, NULL);
        drive(d, 3, mc, 1, 500);
        settle(d, 3, mc);
        mc_stats st;
        mc_get_stats(mc, &st);
        assert_int_equal(st.rounds_completed, 1);
        assert_true(cap.len > 1000);
        /* No example's feature bytes, and no 8-byte window of them, appear anywhere. */
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 25; i++) {
                float x[IN];
                int32_t y;
                example(x, &y, k, i);
                for (int off = 0; off + 2 <= IN; off += 2)
                    assert_null(find(cap.buf, cap.len, x + off, 8));
            }
        free(cap.buf);
        for (int i = 0; i < 3; i++)
            dev_close(&d[i]);
        mc_destroy(mc);
    }
    free(m);
}

/* Every allocation a device makes during enrollment, check-in, download, training, secagg
 * and upload can fail; the client then fails the step or the round cleanly and leaks
 * nothing. The counting allocator also sees every allocation the SDK makes. */
static void test_round_oom_walk(void **s) {
    (void)s;
    size_t len;
    uint8_t *m = init_model(&len);
    long total_calls = 0;
    for (long fail = 0;; fail++) {
        mc_config cfg;
        mc_config_init(&cfg);
        cfg.model = m;
        cfg.model_len = len;
        cfg.round_size = 3;
        cfg.secagg = 1;
        cfg.phase_timeout_ms = 2000;
        cfg.clock = clock_fn;
        mc_coord *mc = mc_create(&cfg);
        struct fl_test_counting cnt = {0};
        cnt.fail_at = fail;
        fl_allocator a = fl_test_counting_allocator(&cnt);
        struct dev d[3];
        dev_open(&d[0], mc, 0, 10, NULL);
        dev_open(&d[2], mc, 2, 10, NULL);
        /* device 1 uses the failing allocator for its client (its store too) */
        fl_client_store_config sc;
        fl_client_store_config_init(&sc);
        sc.path = ":memory:";
        sc.feature_dim = IN;
        sc.allocator = &a;
        fl_status rc = fl_client_store_open(&d[1].store, &sc, NULL, 0);
        d[1].c = NULL;
        d[1].conn = NULL;
        if (rc == FL_OK) {
            for (int i = 0; i < 10 && rc == FL_OK; i++) {
                float x[IN];
                int32_t y;
                example(x, &y, 1, i);
                rc = fl_client_store_add(d[1].store, x, IN, y);
            }
            fl_client_config c2;
            fl_client_config_init(&c2);
            c2.allocator = &a;
            c2.population = "sim";
            c2.region = "EU";
            mc_public_key(mc, c2.coordinator_key);
            c2.has_coordinator_key = 1;
            c2.enrollment_token = mc_enrollment_token(mc);
            d[1].conn = mc_connect(mc, &c2.transport);
            c2.store = d[1].store;
            c2.clock = clock_fn;
            c2.seed = 99;
            if (rc == FL_OK)
                rc = fl_client_create(&d[1].c, &c2, NULL, 0);
        }
        assert_true(rc == FL_OK || rc == FL_ERR_NOMEM);
        if (rc == FL_OK) {
            for (int s2 = 0; s2 < 300; s2++) {
                for (int i = 0; i < 3; i++) {
                    int64_t next;
                    fl_client_step(d[i].c, &next);
                }
                g_now += 50;
                mc_tick(mc);
                mc_stats st;
                mc_get_stats(mc, &st);
                if (st.rounds_completed + st.rounds_aborted >= 1)
                    break;
            }
        }
        for (int i = 0; i < 3; i++)
            dev_close(&d[i]);
        mc_destroy(mc);
        assert_int_equal(cnt.live, 0);
        assert_int_equal(cnt.allocs, cnt.frees);
        if (fail == 0) {
            total_calls = cnt.calls;
            assert_true(total_calls > 10);
        } else if (fail > total_calls) {
            break;
        }
    }
    free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secagg_round),
        cmocka_unit_test(test_plain_round),
        cmocka_unit_test(test_update_matches_local_training),
        cmocka_unit_test(test_refuses_tampered_model),
        cmocka_unit_test(test_refuses_unsigned),
        cmocka_unit_test(test_refuses_unpinned_key),
        cmocka_unit_test(test_pace_steering),
        cmocka_unit_test(test_resume_after_network_failures),
        cmocka_unit_test(test_round_closed_gives_up),
        cmocka_unit_test(test_no_example_bytes_on_the_wire),
        cmocka_unit_test(test_round_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
