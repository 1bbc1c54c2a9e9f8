/* Built-in trainer: gradients against central finite differences (softmax regression and
 * a 2-hidden-layer MLP, with weight decay and the FedProx term), determinism under a seed,
 * learning on a separable problem, save/load, bad arguments and an allocation-failure walk. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/client.h"

static uint8_t *make_model(const uint32_t *sizes, size_t n, uint64_t seed, size_t *len) {
    assert_int_equal(fl_client_model_init(NULL, 0, len, sizes, n, seed, NULL), FL_ERR_TOO_LARGE);
    uint8_t *m = malloc(*len);
    assert_non_null(m);
    assert_int_equal(fl_client_model_init(m, *len, len, sizes, n, seed, NULL), FL_OK);
    return m;
}

static void make_data(float *x, int32_t *y, size_t n, size_t in, size_t classes, uint64_t s) {
    for (size_t i = 0; i < n; i++) {
        y[i] = (int32_t)(i % classes);
        for (size_t j = 0; j < in; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
            /* class-dependent mean makes the problem learnable */
            x[i * in + j] = (float)(u + (j % classes == (size_t)y[i] ? 0.8 : 0.0));
        }
    }
}

static void grad_check(const uint32_t *sizes, size_t nl, double wd, double mu) {
    size_t len;
    uint8_t *m = make_model(sizes, nl, 7, &len);
    fl_client_trainer *tr = NULL;
    assert_int_equal(fl_client_trainer_create(&tr, m, len, NULL), FL_OK);
    size_t d = fl_client_trainer_num_params(tr), in = sizes[0], C = sizes[nl - 1];
    size_t n = 13;
    float *x = malloc(n * in * sizeof(float)), *g = malloc(d * sizeof(float));
    float *w = malloc(d * sizeof(float));
    int32_t *y = malloc(n * sizeof(int32_t));
    make_data(x, y, n, in, C, 3);
    fl_client_train_params p;
    fl_client_train_params_init(&p);
    p.weight_decay = wd;
    p.proximal_mu = mu;
    /* Move away from the global reference so the proximal term has a gradient. */
    assert_int_equal(fl_client_trainer_get_params(tr, w, d), FL_OK);
    for (size_t i = 0; i < d; i++)
        w[i] += 0.01f * (float)((i * 7919) % 13) - 0.06f;
    assert_int_equal(fl_client_trainer_set_params(tr, w, d), FL_OK);
    double loss;
    assert_int_equal(fl_client_trainer_gradient(tr, g, d, &loss, x, y, n, &p), FL_OK);
    size_t checked = 0, bad = 0;
    for (size_t i = 0; i < d; i += (d > 200 ? 7 : 1)) {
        const float eps = 2e-3f;
        float w0 = w[i];
        double lp, lm;
        float *tmp = malloc(d * sizeof(float));
        w[i] = w0 + eps;
        assert_int_equal(fl_client_trainer_set_params(tr, w, d), FL_OK);
        assert_int_equal(fl_client_trainer_gradient(tr, tmp, d, &lp, x, y, n, &p), FL_OK);
        w[i] = w0 - eps;
        assert_int_equal(fl_client_trainer_set_params(tr, w, d), FL_OK);
        assert_int_equal(fl_client_trainer_gradient(tr, tmp, d, &lm, x, y, n, &p), FL_OK);
        w[i] = w0;
        free(tmp);
        double fd = (lp - lm) / (2.0 * eps);
        double err = fabs(fd - g[i]);
        if (err > 2e-3 + 3e-2 * (fabs(fd) + fabs(g[i]))) {
            bad++;
            fprintf(stderr, "param %zu: analytic %g, numeric %g\n", i, g[i], fd);
        }
        checked++;
    }
    assert_int_equal(fl_client_trainer_set_params(tr, w, d), FL_OK);
    /* A ReLU kink may flip one coordinate; more than that is a bug. */
    assert_true(bad <= 1);
    assert_true(checked > 20);
    fl_client_trainer_destroy(tr);
    free(m);
    free(x);
    free(g);
    free(w);
    free(y);
}

static void test_gradients_softmax(void **state) {
    (void)state;
    uint32_t s[] = {6, 4};
    grad_check(s, 2, 0.0, 0.0);
    grad_check(s, 2, 0.1, 0.5);
}

static void test_gradients_mlp(void **state) {
    (void)state;
    uint32_t s[] = {8, 9, 7, 3};
    grad_check(s, 4, 0.0, 0.0);
    grad_check(s, 4, 0.01, 0.3);
}

static void train_once(float *out, size_t d, uint64_t seed, double *loss) {
    uint32_t s[] = {10, 16, 3};
    size_t len;
    uint8_t *m = make_model(s, 3, 11, &len);
    fl_client_trainer *tr = NULL;
    assert_int_equal(fl_client_trainer_create(&tr, m, len, NULL), FL_OK);
    assert_int_equal(fl_client_trainer_num_params(tr), d);
    size_t n = 300;
    float *x = malloc(n * 10 * sizeof(float));
    int32_t *y = malloc(n * sizeof(int32_t));
    make_data(x, y, n, 10, 3, 5);
    fl_client_train_params p;
    fl_client_train_params_init(&p);
    p.epochs = 5;
    p.batch_size = 16;
    p.learning_rate = 0.05;
    p.seed = seed;
    assert_int_equal(fl_client_trainer_train(tr, x, y, n, &p, loss), FL_OK);
    assert_int_equal(fl_client_trainer_get_params(tr, out, d), FL_OK);
    double acc;
    assert_int_equal(fl_client_trainer_evaluate(tr, x, y, n, NULL, &acc), FL_OK);
    assert_true(acc > 0.9);
    fl_client_trainer_destroy(tr);
    free(m);
    free(x);
    free(y);
}

static void test_deterministic_and_learns(void **state) {
    (void)state;
    size_t d = 10 * 16 + 16 + 16 * 3 + 3;
    float *a = malloc(d * 4), *b = malloc(d * 4), *c = malloc(d * 4);
    double la, lb, lc;
    train_once(a, d, 42, &la);
    train_once(b, d, 42, &lb);
    train_once(c, d, 43, &lc);
    assert_memory_equal(a, b, d * 4);
    assert_true(la == lb);
    assert_memory_not_equal(a, c, d * 4);
    assert_true(la < 0.5);
    free(a);
    free(b);
    free(c);
}

static void test_save_roundtrip(void **state) {
    (void)state;
    uint32_t s[] = {5, 4, 3};
    size_t len, len2;
    uint8_t *m = make_model(s, 3, 1, &len);
    fl_client_trainer *tr = NULL, *tr2 = NULL;
    assert_int_equal(fl_client_trainer_create(&tr, m, len, NULL), FL_OK);
    assert_int_equal(fl_client_trainer_num_inputs(tr), 5);
    assert_int_equal(fl_client_trainer_num_classes(tr), 3);
    assert_int_equal(fl_client_trainer_save(tr, NULL, 0, &len2), FL_ERR_TOO_LARGE);
    uint8_t *m2 = malloc(len2);
    assert_int_equal(fl_client_trainer_save(tr, m2, len2, &len2), FL_OK);
    assert_int_equal(fl_client_trainer_create(&tr2, m2, len2, NULL), FL_OK);
    float a[100], b[100];
    size_t d = fl_client_trainer_num_params(tr);
    assert_true(d < 100);
    fl_client_trainer_get_params(tr, a, d);
    fl_client_trainer_get_params(tr2, b, d);
    assert_memory_equal(a, b, d * 4);
    fl_client_trainer_destroy(tr);
    fl_client_trainer_destroy(tr2);
    free(m);
    free(m2);
}

static void test_bad_args(void **state) {
    (void)state;
    uint32_t s[] = {5, 3};
    size_t len;
    uint8_t *m = make_model(s, 2, 1, &len);
    fl_client_trainer *tr = NULL;
    assert_int_equal(fl_client_trainer_create(NULL, m, len, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_create(&tr, NULL, len, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_create(&tr, m, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_create(&tr, "garbage-not-safetensors", 23, NULL),
                     FL_ERR_FORMAT);
    assert_null(tr);
    fl_allocator bad = {1, NULL, NULL, NULL, NULL};
    assert_int_equal(fl_client_trainer_create(&tr, m, len, &bad), FL_ERR_MISUSE);
    uint32_t one[] = {5, 1};
    assert_int_equal(fl_client_model_init(NULL, 0, &len, one, 2, 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_model_init(NULL, 0, &len, s, 1, 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_model_init(NULL, 0, NULL, s, 2, 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_create(&tr, m, len, NULL), FL_OK);
    float x[10] = {0};
    int32_t y[2] = {0, 3}, yok[2] = {0, 2};
    fl_client_train_params p;
    fl_client_train_params_init(&p);
    assert_int_equal(fl_client_trainer_train(tr, x, y, 2, &p, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_client_trainer_errmsg(tr), "label"));
    assert_int_equal(fl_client_trainer_train(tr, NULL, yok, 2, &p, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_train(tr, x, yok, 0, &p, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_train(tr, x, yok, 2, NULL, NULL), FL_ERR_MISUSE);
    p.momentum = 1.0;
    assert_int_equal(fl_client_trainer_train(tr, x, yok, 2, &p, NULL), FL_ERR_MISUSE);
    p.momentum = 0.5;
    p.batch_size = 0;
    assert_int_equal(fl_client_trainer_train(tr, x, yok, 2, &p, NULL), FL_ERR_MISUSE);
    p.batch_size = 2;
    p.learning_rate = NAN;
    assert_int_equal(fl_client_trainer_train(tr, x, yok, 2, &p, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_train_store(tr, NULL, &p, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_train_store(NULL, NULL, &p, NULL, NULL), FL_ERR_MISUSE);
    float g[18];
    assert_int_equal(fl_client_trainer_gradient(tr, g, 17, NULL, x, yok, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_evaluate(tr, x, y, 2, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_get_params(tr, g, 17), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_set_params(tr, g, 17), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_save(tr, NULL, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_trainer_num_params(NULL), 0);
    assert_non_null(fl_client_trainer_errmsg(NULL));
    fl_client_trainer_destroy(NULL);
    fl_client_trainer_destroy(tr);
    /* A model that is not a dense chain is refused with the tensor named. */
    const char *hdr = "{\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    uint8_t buf[256];
    uint64_t hl = strlen(hdr);
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, 0, 4);
    assert_int_equal(fl_client_trainer_create(&tr, buf, 8 + hl + 4, NULL), FL_ERR_FORMAT);
    free(m);
}

/* Every allocation of create + train + save can fail cleanly, and nothing leaks. */
static void test_oom_walk(void **state) {
    (void)state;
    uint32_t s[] = {6, 5, 3};
    size_t len;
    uint8_t *m = make_model(s, 3, 1, &len);
    float x[6 * 8];
    int32_t y[8];
    make_data(x, y, 8, 6, 3, 9);
    fl_client_train_params p;
    fl_client_train_params_init(&p);
    p.batch_size = 4;
    int ok = 0;
    for (long fail = 1; fail < 200 && !ok; fail++) {
        struct fl_test_counting cnt = {0};
        cnt.fail_at = fail;
        fl_allocator a = fl_test_counting_allocator(&cnt);
        fl_client_trainer *tr = NULL;
        fl_status rc = fl_client_trainer_create(&tr, m, len, &a);
        if (rc == FL_OK)
            rc = fl_client_trainer_train(tr, x, y, 8, &p, NULL);
        size_t need = 0;
        uint8_t out[2048];
        if (rc == FL_OK)
            rc = fl_client_trainer_save(tr, out, sizeof(out), &need);
        fl_client_trainer_destroy(tr);
        assert_true(rc == FL_OK || rc == FL_ERR_NOMEM);
        assert_int_equal(cnt.live, 0);
        ok = rc == FL_OK && cnt.calls < fail;
    }
    assert_true(ok);
    free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_softmax), cmocka_unit_test(test_gradients_mlp),
        cmocka_unit_test(test_deterministic_and_learns), cmocka_unit_test(test_save_roundtrip),
        cmocka_unit_test(test_bad_args), cmocka_unit_test(test_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
