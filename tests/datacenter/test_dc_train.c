/* The trainer on one process (single communicator, CPU backend): configuration checks,
 * backprop against finite differences, loss falling on Fashion-MNIST, model files,
 * checkpoint resume bit-equality, and an allocation-failure walk of create. */
#include "fl_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dc_internal.h"
#include "dc_test_util.h"

static fl_dc_comm *open_single(void) {
    fl_dc_comm *c = NULL;
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, NULL), FL_OK);
    assert_int_equal(fl_dc_comm_size(c), 1);
    assert_int_equal(fl_dc_comm_rank(c), 0);
    return c;
}

static void small_cfg(fl_dc_config *cfg) {
    fl_dc_config_init(cfg);
    cfg->backend = FL_DC_BACKEND_CPU;
    cfg->n_layers = 2;
    cfg->sizes[0] = 784;
    cfg->sizes[1] = 32;
    cfg->sizes[2] = 10;
    cfg->global_batch = 32;
    cfg->bucket_bytes = 8192;
}

static fl_dc_dataset *fashion(size_t n) {
    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_open_idx(&ds, DC_TRAIN_IMAGES, DC_TRAIN_LABELS, n, NULL),
                     FL_OK);
    return ds;
}

static void test_config(void **state) {
    fl_dc_comm *c = open_single();
    fl_dc_config cfg;
    fl_dc_trainer *tr = NULL;
    fl_dc_config_init(&cfg);
    assert_int_equal(cfg.sizes[1], 128);
    assert_int_equal(fl_dc_max_layers(), FL_DC_MAX_LAYERS);
    cfg.dp = 2;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_ERR_MISUSE);
    assert_null(tr);
    assert_non_null(strstr(fl_dc_last_error(), "config.dp"));
    fl_dc_config_init(&cfg);
    cfg.zero_stage = 2;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dc_last_error(), "zero_stage"));
    fl_dc_config_init(&cfg);
    cfg.lr = 0.0f;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dc_last_error(), "config.lr"));
    fl_dc_config_init(&cfg);
    cfg.n_layers = 0;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_ERR_MISUSE);
    fl_dc_config_init(&cfg);
    cfg.struct_size = 8;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_ERR_MISUSE);
    fl_dc_config_init(&cfg);
    cfg.backend = FL_DC_BACKEND_CPU;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_backend(tr), FL_DC_BACKEND_CPU);
    assert_int_equal(fl_dc_trainer_param_count(tr), 784 * 128 + 128 + 128 * 10 + 10);
    /* a data set of the wrong shape is refused and does not fail the trainer */
    float x[4] = {0};
    int32_t y[2] = {0, 1};
    fl_dc_dataset *bad = NULL;
    assert_int_equal(fl_dc_dataset_from_memory(&bad, x, 2, 2, y, 2, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_step(tr, bad, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dc_trainer_errmsg(tr), "features"));
    fl_dc_dataset_close(bad);
    fl_dc_trainer_destroy(tr);
    fl_dc_trainer_destroy(NULL);
    fl_dc_comm_close(c);
    fl_dc_comm_close(NULL);
}

/* One SGD step on the whole (tiny) data set moves the weights by -lr * gradient; compare
 * that gradient with central differences of the evaluated loss. */
static void test_gradient_fd(void **state) {
    enum { N = 6, D = 5, H = 4, C = 3 };
    float x[N * D];
    int32_t y[N];
    uint64_t s = 7;
    for (int i = 0; i < N * D; i++)
        x[i] = (float)(fl__dc_splitmix64(&s) >> 40) / 16777216.0f;
    for (int i = 0; i < N; i++)
        y[i] = i % C;
    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, N, D, y, C, NULL), FL_OK);
    fl_dc_comm *c = open_single();
    fl_dc_config cfg;
    fl_dc_config_init(&cfg);
    cfg.backend = FL_DC_BACKEND_CPU;
    cfg.sizes[0] = D;
    cfg.sizes[1] = H;
    cfg.sizes[2] = C;
    cfg.optim = FL_DC_OPTIM_SGD;
    cfg.lr = 1e-2f;
    cfg.global_batch = N;
    fl_dc_trainer *tr = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    size_t n = fl_dc_trainer_param_count(tr);
    float *p0 = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float));
    float *pp = malloc(n * sizeof(float));
    assert_int_equal(fl_dc_trainer_params_get(tr, p0, n), FL_OK);
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_params_get(tr, p1, n), FL_OK);
    const float h = 1e-2f;
    for (size_t k = 0; k < n; k++) {
        double g = ((double)p0[k] - (double)p1[k]) / cfg.lr, lp, lm;
        memcpy(pp, p0, n * sizeof(float));
        pp[k] = p0[k] + h;
        assert_int_equal(fl_dc_trainer_params_set(tr, pp, n), FL_OK);
        assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, &lp, NULL), FL_OK);
        pp[k] = p0[k] - h;
        assert_int_equal(fl_dc_trainer_params_set(tr, pp, n), FL_OK);
        assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, &lm, NULL), FL_OK);
        double fd = (lp - lm) / (2.0 * h);
        if (fabs(g - fd) > 2e-3)
            fail_msg("param %zu: backprop %.6f, finite difference %.6f", k, g, fd);
    }
    free(p0);
    free(p1);
    free(pp);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
}

static void test_loss_falls(void **state) {
    if (!dc_have_fashion())
        skip();
    fl_dc_dataset *ds = fashion(512);
    fl_dc_comm *c = open_single();
    fl_dc_config cfg;
    small_cfg(&cfg);
    cfg.sizes[1] = 64;
    cfg.lr = 3e-3f;
    fl_dc_trainer *tr = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    double first = 0, last = 0, acc0 = 0, acc1 = 0, l0 = 0, l1 = 0;
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, &l0, &acc0), FL_OK);
    for (int s = 0; s < 48; s++) {
        fl_dc_step_stats st = {.struct_size = sizeof(st)};
        assert_int_equal(fl_dc_trainer_step(tr, ds, &st), FL_OK);
        assert_int_equal(st.step, (uint64_t)s + 1);
        assert_true(st.samples_per_s > 0.0 && st.step_s >= st.compute_s);
        if (s < 6)
            first += st.loss / 6;
        if (s >= 42)
            last += st.loss / 6;
    }
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, &l1, &acc1), FL_OK);
    print_message("loss %.3f -> %.3f (batches), %.3f -> %.3f (eval), accuracy %.3f -> %.3f\n",
                  first, last, l0, l1, acc0, acc1);
    assert_true(last < 0.6 * first);
    assert_true(l1 < 0.6 * l0);
    assert_true(acc1 > 0.6);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
}

static void run_steps(fl_dc_trainer *tr, fl_dc_dataset *ds, int n) {
    for (int i = 0; i < n; i++)
        assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK);
}

/* 8 uninterrupted steps == 5 steps, checkpoint, a fresh trainer resuming, 3 more steps,
 * bit for bit (weights, optimiser moments and data position all restored). The batch
 * stream crosses an epoch boundary (100 examples, 32 per step). */
static void test_checkpoint_resume(void **state) {
    if (!dc_have_fashion())
        skip();
    fl_dc_dataset *ds = fashion(100);
    fl_dc_comm *c = open_single();
    fl_dc_config cfg;
    small_cfg(&cfg);
    cfg.zero_stage = 1;
    char dir[] = "/tmp/fl_dc_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_dc_trainer *a = NULL, *b = NULL;
    assert_int_equal(fl_dc_trainer_create(&a, &cfg, c, NULL), FL_OK);
    size_t n = fl_dc_trainer_param_count(a);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
    assert_int_equal(fl_dc_trainer_checkpoint_load(a, dir), FL_ERR_NOT_FOUND);
    run_steps(a, ds, 5);
    assert_int_equal(fl_dc_trainer_checkpoint_save(a, dir), FL_OK);
    run_steps(a, ds, 3);
    assert_int_equal(fl_dc_trainer_params_get(a, pa, n), FL_OK);
    fl_dc_trainer_destroy(a);

    cfg.seed = 999; /* a different job refuses the checkpoint */
    assert_int_equal(fl_dc_trainer_create(&b, &cfg, c, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_checkpoint_load(b, dir), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_dc_trainer_errmsg(b), "seed"));
    fl_dc_trainer_destroy(b);
    cfg.seed = 1234;

    assert_int_equal(fl_dc_trainer_create(&b, &cfg, c, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_checkpoint_load(b, dir), FL_OK);
    assert_int_equal(fl_dc_trainer_step_count(b), 5);
    run_steps(b, ds, 3);
    assert_int_equal(fl_dc_trainer_params_get(b, pb, n), FL_OK);
    assert_memory_equal(pa, pb, n * sizeof(float));

    /* a torn shard (crash mid-write of a later checkpoint is invisible: latest still names
     * step 5); a corrupt shard that latest names is refused */
    char path[256];
    snprintf(path, sizeof(path), "%s/step-00000005/rank-00000.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fputs("garbage!", f);
    fclose(f);
    fl_status rc = fl_dc_trainer_checkpoint_load(b, dir);
    assert_true(rc == FL_ERR_CORRUPT || rc == FL_ERR_FORMAT);
    /* training goes on after a refused checkpoint */
    run_steps(b, ds, 1);
    fl_dc_trainer_destroy(b);
    free(pa);
    free(pb);
    dc_rm_tree(dir);
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
}

static void test_model_file(void **state) {
    fl_dc_comm *c = open_single();
    fl_dc_config cfg;
    small_cfg(&cfg);
    fl_dc_trainer *a = NULL, *b = NULL;
    assert_int_equal(fl_dc_trainer_create(&a, &cfg, c, NULL), FL_OK);
    char path[] = "/tmp/fl_dc_model_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(fl_dc_trainer_model_save(a, path), FL_OK);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(len > 0 && len < sizeof(buf));
    cfg.seed = 77;
    assert_int_equal(fl_dc_trainer_create(&b, &cfg, c, NULL), FL_OK);
    size_t n = fl_dc_trainer_param_count(a);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
    assert_int_equal(fl_dc_trainer_params_get(a, pa, n), FL_OK);
    assert_int_equal(fl_dc_trainer_params_get(b, pb, n), FL_OK);
    assert_memory_not_equal(pa, pb, n * sizeof(float));
    assert_int_equal(fl_dc_trainer_model_load(b, buf, len), FL_OK);
    assert_int_equal(fl_dc_trainer_params_get(b, pb, n), FL_OK);
    assert_memory_equal(pa, pb, n * sizeof(float));
    fl_dc_trainer_destroy(b);
    /* a model of another architecture is refused, naming the tensor */
    cfg.sizes[1] = 16;
    assert_int_equal(fl_dc_trainer_create(&b, &cfg, c, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_model_load(b, buf, len), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_dc_trainer_errmsg(b), "layers.0.weight"));
    assert_int_equal(fl_dc_trainer_model_load(b, buf, 5), FL_ERR_FORMAT);
    assert_int_equal(fl_dc_trainer_params_get(b, pb, 3), FL_ERR_MISUSE);
    unlink(path);
    free(pa);
    free(pb);
    fl_dc_trainer_destroy(a);
    fl_dc_trainer_destroy(b);
    fl_dc_comm_close(c);
}

static void test_create_oom(void **state) {
    fl_dc_config cfg;
    small_cfg(&cfg);
    cfg.sizes[0] = 20;
    for (long k = 1;; k++) {
        struct fl_test_counting cnt = {.fail_at = k};
        fl_allocator a = fl_test_counting_allocator(&cnt);
        fl_dc_comm *c = NULL;
        fl_dc_trainer *tr = NULL;
        fl_status rc = fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, &a);
        if (rc == FL_OK)
            rc = fl_dc_trainer_create(&tr, &cfg, c, &a);
        fl_dc_trainer_destroy(tr);
        fl_dc_comm_close(c);
        assert_int_equal(cnt.live, 0);
        if (rc == FL_OK)
            break;
        assert_int_equal(rc, FL_ERR_NOMEM);
        assert_true(k < 1000);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_loss_falls),    cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_model_file),    cmocka_unit_test(test_create_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
