/* Server strategies (docs/coordinator.md "Rounds"; aggregate.c): FedAvgM, FedAdagrad,
 * FedAdam, FedYogi and FedProx, each over three plain rounds of three devices. The test hook
 * hands over each round's averaged delta; the new model downloaded by a device must equal
 * the strategy's update of the previous model computed here from that delta and the
 * optimiser state of the previous round (which this test keeps itself), and the untouched
 * tensor "b" must stay as uploaded. Between rounds two and three the coordinator restarts,
 * so the third round's state is the one read back from storage (tag
 * population/<name>/optimizer). FedProx runs FedAvg on the server and hands proximal_mu to
 * the devices in the task. */
#include <math.h>

#include <sqlite3.h>

#include "coord_testkit.h"

enum { N = 3, ROUNDS = 3 };

struct hook {
    int calls;
    float delta[D];
};

static void on_sum(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                   uint32_t count, const float *delta, size_t dim) {
    struct hook *h = user;
    (void)round_id;
    (void)sum;
    (void)vec_len;
    assert_int_equal(count, N);
    assert_int_equal(dim, D);
    h->calls++;
    memcpy(h->delta, delta, sizeof(h->delta));
}

struct strat {
    const char *name;
    const char *extra;           /* strategy fields */
    double lr, tau, b1, b2, mom; /* as configured (or the defaults) */
};

/* The reference update of one coordinate (the formulas of docs/coordinator.md / Reddi et
 * al. 2021), with the state kept in float between rounds like the stored state. */
static float step(const struct strat *s, float w, float d, float *m, float *v, bool first) {
    double di = d;
    double mi = first ? 0.0 : *m, vi = first ? s->tau * s->tau : *v;
    double out;
    if (strcmp(s->name, "fedavgm") == 0) {
        mi = s->mom * mi + di;
        out = w + s->lr * mi;
    } else if (strcmp(s->name, "fedadagrad") == 0) {
        vi += di * di;
        out = w + s->lr * di / (sqrt(vi) + s->tau);
    } else if (strcmp(s->name, "fedadam") == 0 || strcmp(s->name, "fedyogi") == 0) {
        mi = s->b1 * mi + (1 - s->b1) * di;
        if (strcmp(s->name, "fedadam") == 0) {
            vi = s->b2 * vi + (1 - s->b2) * di * di;
        } else {
            double dd = di * di;
            double sg = vi - dd > 0 ? 1.0 : vi - dd < 0 ? -1.0 : 0.0;
            vi = vi - (1 - s->b2) * dd * sg;
        }
        out = w + s->lr * mi / (sqrt(vi) + s->tau);
    } else { /* fedavg / fedprox */
        out = w + s->lr * di;
    }
    *m = (float)mi;
    *v = (float)vi;
    return (float)out;
}

static void run_strategy(struct fx *f, const struct strat *s) {
    struct hook h = {0};
    fl__coord_debug_hook_set(f->co, on_sum, &h);
    struct popcfg pc = {.name = s->name, .target = N, .min = N, .secagg = false,
                        .mode = "none", .strategy = s->name, .bits = 32,
                        .strategy_extra = s->extra};
    char *tok[N];
    setup_population(f, &pc, tok, N);
    struct tc c[N];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    float w[D], b[2], m[D] = {0}, v[D] = {0};
    for (int j = 0; j < D; j++)
        w[j] = base_w(j);
    int64_t version = 1;
    for (int round = 0; round < ROUNDS; round++) {
        if (round == 2) { /* restart: the third round's state comes from storage */
            fx_stop(f);
            fx_start(f);
            fl__coord_debug_hook_set(f->co, on_sum, &h);
        }
        fx_advance(f, 61 * 1000);
        int64_t rid = 0;
        checkin_all(f, c, N, &rid);
        fetch_tasks(f, c, N, rid);
        assert_int_equal(c[0].task.model_version, version);
        if (strcmp(s->name, "fedprox") == 0) {
            char path[96];
            snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
            struct resp r = http_req(f, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid);
            json_t *j = body_json(&r);
            json_t *tr = json_object_get(j, "training");
            assert_true(fabs(json_number_value(json_object_get(tr, "proximal_mu")) - 0.25) <
                        1e-12);
            json_decref(j);
            resp_free(&r);
        }
        h.calls = 0;
        post_updates(f, c, N, rid);
        json_t *st = round_status(f, &c[0], rid);
        if (strcmp(json_string_value(json_object_get(st, "state")), "completed") != 0)
            fprintf(stderr, "%s round %d: %s\n", s->name, round,
                    json_dumps(st, JSON_COMPACT));
        assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
        int64_t nv = json_integer_value(json_object_get(st, "new_model_version"));
        json_decref(st);
        assert_int_equal(h.calls, 1);
        assert_true(nv > version);
        version = nv;
        float want[D];
        for (int j = 0; j < D; j++)
            want[j] = step(s, w[j], h.delta[j], &m[j], &v[j], round == 0);
        fetch_model(f, &c[0], s->name, version, w, b);
        for (int j = 0; j < D; j++) {
            double tol = 1e-6 * fmax(1.0, fabs(want[j]));
            if (fabs(w[j] - want[j]) > tol)
                fprintf(stderr, "%s round %d coord %d: %.9g want %.9g (delta %.9g)\n", s->name,
                        round, j, w[j], want[j], h.delta[j]);
            assert_true(fabs(w[j] - want[j]) <= tol);
            w[j] = want[j];
        }
        assert_true(b[0] == 3.0f && b[1] == -4.0f);
    }
    /* The optimiser state is a registry entry owned by no population (stateful ones). */
    char q[160];
    snprintf(q, sizeof(q), "SELECT count(*) FROM tags WHERE name = 'population/%s/optimizer'",
             s->name);
    bool stateful = strcmp(s->name, "fedprox") != 0;
    assert_int_equal(db_int(f, q), stateful ? 1 : 0);
    clients_free(c, N);
}

static void test_fedavgm(void **state) {
    struct strat s = {"fedavgm", "\"server_lr\":0.5,\"momentum\":0.8", 0.5, 1e-3, 0.9, 0.99,
                      0.8};
    run_strategy(*state, &s);
}

static void test_fedadagrad(void **state) {
    struct strat s = {"fedadagrad", "\"server_lr\":0.1,\"tau\":0.01", 0.1, 0.01, 0.9, 0.99, 0.9};
    run_strategy(*state, &s);
}

static void test_fedadam(void **state) {
    struct strat s = {"fedadam", "\"server_lr\":0.05,\"beta1\":0.8,\"beta2\":0.95", 0.05, 1e-3,
                      0.8, 0.95, 0.9};
    run_strategy(*state, &s);
}

static void test_fedyogi(void **state) {
    struct strat s = {"fedyogi", "\"server_lr\":0.05,\"tau\":0.001", 0.05, 1e-3, 0.9, 0.99, 0.9};
    run_strategy(*state, &s);
}

static void test_fedprox(void **state) {
    struct strat s = {"fedprox", "\"proximal_mu\":0.25", 1.0, 1e-3, 0.9, 0.99, 0.9};
    run_strategy(*state, &s);
}


/* An optimiser state that does not fit (its tag pointing at a blob without "m"/"v", as a
 * damaged registry could): after a restart it is ignored and the next FedAdam round starts
 * from fresh moments. */
static void test_unusable_state_ignored(void **state) {
    struct fx *f = *state;
    struct strat s = {"fedadam", "\"server_lr\":0.05", 0.05, 1e-3, 0.9, 0.99, 0.9};
    struct hook h = {0};
    fl__coord_debug_hook_set(f->co, on_sum, &h);
    struct popcfg pc = {.name = s.name, .target = N, .min = N, .secagg = false, .mode = "none",
                        .strategy = s.name, .bits = 32, .strategy_extra = s.extra};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    float w[D], b[2], m[D], v[D];
    for (int j = 0; j < D; j++)
        w[j] = base_w(j);
    int64_t version = 1;
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            fx_stop(f);
            sqlite3 *db;
            assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
            assert_int_equal(
                sqlite3_exec(db,
                             "UPDATE tags SET version = (SELECT version FROM tags WHERE name = "
                             "'population/fedadam') WHERE name = 'population/fedadam/optimizer'",
                             NULL, NULL, NULL),
                SQLITE_OK);
            sqlite3_close(db);
            fx_start(f);
            fl__coord_debug_hook_set(f->co, on_sum, &h);
        }
        fx_advance(f, 61 * 1000);
        int64_t rid = 0;
        checkin_all(f, c, N, &rid);
        fetch_tasks(f, c, N, rid);
        h.calls = 0;
        post_updates(f, c, N, rid);
        json_t *st = round_status(f, &c[0], rid);
        assert_string_equal(json_string_value(json_object_get(st, "state")), "completed");
        version = json_integer_value(json_object_get(st, "new_model_version"));
        json_decref(st);
        float want[D];
        for (int j = 0; j < D; j++) /* fresh moments both times */
            want[j] = step(&s, w[j], h.delta[j], &m[j], &v[j], true);
        fetch_model(f, &c[0], s.name, version, w, b);
        for (int j = 0; j < D; j++) {
            assert_true(fabs(w[j] - want[j]) <= 1e-6 * fmax(1.0, fabs(want[j])));
            w[j] = want[j];
        }
    }
    clients_free(c, N);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fedavgm, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedadagrad, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedadam, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedyogi, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fedprox, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unusable_state_ignored, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
