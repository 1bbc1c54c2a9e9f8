/* Edge cases of the datacenter library on one process: the single communicator and the
 * collective front ends (after an abort too), every configuration check with its message,
 * data sets from memory and IDX files that are short, mismatched, gzip-corrupt or large
 * enough to grow the read buffer (with an allocation-failure walk), trainer calls with bad
 * arguments and after a sticky failure, model files and checkpoints that are refused
 * (paths, `latest`, shards with the wrong metadata, step or tensors), and allocation
 * failures in checkpoint and model calls, which must leave the trainer usable. */
#include "fl_test.h"
#include "fl_test_strict.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dc_internal.h"
#include "dc_test_util.h"
#include "flotilla/tensor.h"
#include "trainer.h"

/* ---- helpers ---- */

/* A tiny problem: N examples of D features in [0,1), C classes. */
enum { N = 10, D = 6, H = 4, C = 3 };

static fl_dc_dataset *tiny_data(void) {
    float x[N * D];
    int32_t y[N];
    uint64_t s = 11;
    for (int i = 0; i < N * D; i++)
        x[i] = (float)(fl__dc_splitmix64(&s) >> 40) / 16777216.0f;
    for (int i = 0; i < N; i++)
        y[i] = i % C;
    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, N, D, y, C, NULL), FL_OK);
    return ds;
}

static void tiny_cfg(fl_dc_config *cfg) {
    fl_dc_config_init(cfg);
    cfg->backend = FL_DC_BACKEND_CPU;
    cfg->n_layers = 2;
    cfg->sizes[0] = D;
    cfg->sizes[1] = H;
    cfg->sizes[2] = C;
    cfg->global_batch = 4;
    cfg->bucket_bytes = 16;
}

static fl_dc_comm *open_single(const fl_allocator *a) {
    fl_dc_comm *c = NULL;
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, a), FL_OK);
    return c;
}

static void make_tmpdir(char *dir) {
    assert_non_null(mkdtemp(dir));
}

/* ---- communicator ---- */

static void *last_error_thread(void *arg) {
    snprintf(arg, 64, "%s", fl_dc_last_error());
    return NULL;
}

static void test_comm_single(void **state) {
    fl_dc_comm *c = NULL;
    /* a thread that never failed a call has no error */
    char first[64];
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, last_error_thread, first), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_string_equal(first, "no error");

    assert_int_equal(fl_dc_comm_open(NULL, FL_DC_COMM_SINGLE, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "out is NULL");
    c = (fl_dc_comm *)first;
    assert_int_equal(fl_dc_comm_open(&c, (fl_dc_comm_kind)7, NULL), FL_ERR_MISUSE);
    assert_null(c);
    assert_string_equal(fl_dc_last_error(), "unknown communicator kind 7");
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_MPI, NULL), FL_ERR_UNSUPPORTED);
#ifdef FL_DC_WITH_MPI
    assert_string_equal(fl_dc_last_error(), "MPI is not initialised");
#else
    assert_string_equal(fl_dc_last_error(), "built without MPI");
#endif
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_NCCL, NULL), FL_ERR_UNSUPPORTED);
    assert_null(c);
    fl_allocator bad = {0};
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, &bad), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "bad allocator struct");
    struct fl_test_strict s = {.fail_at = 1, .any_size = 1};
    fl_allocator a = fl_test_strict_allocator(&s, 0);
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, &a), FL_ERR_NOMEM);
    assert_string_equal(fl_dc_last_error(), "out of memory for a communicator");
    /* without MPI initialised, AUTO is the single backend */
    assert_int_equal(fl_dc_comm_open(&c, FL_DC_COMM_AUTO, &a), FL_OK);
    assert_int_equal(fl_dc_comm_kind_of(c), FL_DC_COMM_SINGLE);
    assert_int_equal(fl_dc_comm_size(c), 1);
    assert_int_equal(fl_dc_comm_rank(NULL), -1);
    assert_int_equal(fl_dc_comm_size(NULL), 0);
    assert_int_equal(fl_dc_comm_kind_of(NULL), FL_DC_COMM_SINGLE);
    assert_string_equal(fl_dc_comm_errmsg(NULL), "NULL communicator");
    assert_string_equal(fl_dc_comm_errmsg(c), "success");
    fl_dc_comm_abort(NULL);

    /* the collectives of one rank are copies, in place or not */
    float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
    assert_int_equal(fl__dc_allreduce(c, buf, 8), FL_OK);
    assert_true(buf[7] == 8.0f);
    assert_int_equal(fl__dc_reduce_scatter(c, out, buf, 4), FL_OK);
    assert_memory_equal(out, buf, 4 * sizeof(float));
    assert_int_equal(fl__dc_reduce_scatter(c, buf, buf, 8), FL_OK);
    assert_int_equal(fl__dc_allgather(c, out + 4, buf + 4, 4), FL_OK);
    assert_memory_equal(out + 4, buf + 4, 4 * sizeof(float));
    assert_int_equal(fl__dc_allgather(c, buf, buf, 8), FL_OK);
    int v = 42, got = 0;
    assert_int_equal(fl__dc_bcast(c, &v, sizeof(v), 0), FL_OK);
    assert_int_equal(fl__dc_host_allgather(c, &got, &v, sizeof(v)), FL_OK);
    assert_int_equal(got, 42);
    assert_int_equal(fl__dc_host_allgather(c, &got, &got, sizeof(got)), FL_OK);
    assert_int_equal(fl__dc_wait(c), FL_OK);
    assert_int_equal(fl__dc_sync(c), FL_OK);
    assert_true(c->busy_s >= 0.0);
    int bad_rank = 5;
    assert_int_equal(fl__dc_agree(c, FL_OK, NULL), FL_OK);
    assert_int_equal(fl__dc_agree(c, FL_ERR_IO, &bad_rank), FL_ERR_IO);
    assert_int_equal(bad_rank, 0);
    fl_dc_comm *sub = NULL;
    c->world_rank = 3;
    assert_int_equal(c->ops->split(c, 0, 0, &sub), FL_OK);
    assert_int_equal(sub->world_rank, 3);
    assert_int_equal(sub->size, 1);
    fl_dc_comm_close(sub);

    /* after an abort every front end refuses, naming the rank, and agree fails itself */
    fl_dc_comm_abort(c);
    const char *want = "rank 3: communicator already failed";
    assert_int_equal(fl__dc_allreduce(c, buf, 8), FL_ERR_ABORTED);
    assert_string_equal(fl_dc_comm_errmsg(c), want);
    assert_int_equal(fl__dc_reduce_scatter(c, out, buf, 4), FL_ERR_ABORTED);
    assert_int_equal(fl__dc_allgather(c, out, buf, 4), FL_ERR_ABORTED);
    assert_int_equal(fl__dc_bcast(c, &v, sizeof(v), 0), FL_ERR_ABORTED);
    assert_int_equal(fl__dc_host_allgather(c, &got, &v, sizeof(v)), FL_ERR_ABORTED);
    assert_int_equal(fl__dc_wait(c), FL_ERR_ABORTED);
    assert_int_equal(fl__dc_sync(c), FL_ERR_ABORTED);
    assert_int_equal(fl__dc_agree(c, FL_OK, &bad_rank), FL_ERR_ABORTED);
    assert_int_equal(bad_rank, -1);
    fl_dc_comm_close(c);
    fl_dc_comm_close(NULL);
    assert_int_equal(s.live, 0);
    assert_int_equal(s.bad_frees, 0);
}

/* ---- data sets ---- */

static void test_dataset_from_memory_checks(void **state) {
    float x[4] = {0};
    int32_t y[2] = {0, 1};
    fl_dc_dataset *ds = (fl_dc_dataset *)x;
    assert_int_equal(fl_dc_dataset_from_memory(&ds, NULL, 2, 2, y, 2, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "NULL argument or zero size");
    assert_null(ds); /* set on every failure, as open_idx does */
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 2, 2, NULL, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 2, 0, y, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 2, 2, y, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_dataset_from_memory(NULL, x, 2, 2, y, 2, NULL), FL_ERR_MISUSE);
    fl_allocator bad = {0};
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 2, 2, y, 2, &bad), FL_ERR_MISUSE);
    assert_null(ds);
    assert_string_equal(fl_dc_last_error(), "bad allocator struct");
    y[1] = -1;
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 2, 2, y, 2, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "label 1 out of range");
    y[1] = 1;
    /* n * dim past SIZE_MAX: refused before anything is read from x */
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 2, SIZE_MAX / 2 + 1, y, 2, NULL),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "n * dim overflows");
    assert_int_equal(fl_dc_dataset_count(NULL), 0);
    assert_int_equal(fl_dc_dataset_dim(NULL), 0);
    assert_int_equal(fl_dc_dataset_classes(NULL), 0);
}

/* Writes an IDX pair: n images of rows x cols (pixel i = i % 251) and n labels (i % 7).
 * img_extra / lab_extra add (or, negative, remove) bytes at the end. */
static void write_idx(const char *img, const char *lab, uint32_t n, uint32_t rows,
                      uint32_t cols, uint32_t lab_n, long img_extra, long lab_extra) {
    size_t il = (size_t)((long)(16 + (size_t)n * rows * cols) + img_extra);
    size_t ll = (size_t)((long)(8 + (size_t)lab_n) + lab_extra);
    uint8_t *ib = calloc(il + 16, 1), *lb = calloc(ll + 8, 1);
    assert_true(ib && lb);
    dc_put_be32(ib, 0x803);
    dc_put_be32(ib + 4, n);
    dc_put_be32(ib + 8, rows);
    dc_put_be32(ib + 12, cols);
    for (size_t i = 16; i < il; i++)
        ib[i] = (uint8_t)((i - 16) % 251);
    dc_put_be32(lb, 0x801);
    dc_put_be32(lb + 4, lab_n);
    for (size_t i = 8; i < ll; i++)
        lb[i] = (uint8_t)((i - 8) % 7);
    dc_write_file_ok(img, ib, il);
    dc_write_file_ok(lab, lb, ll);
    free(ib);
    free(lb);
}

static void expect_idx(const char *img, const char *lab, size_t limit, fl_status want,
                       const char *msg) {
    fl_dc_dataset *ds = NULL;
    fl_status rc = fl_dc_dataset_open_idx(&ds, img, lab, limit, NULL);
    if (rc != want || (msg && !strstr(fl_dc_last_error(), msg)))
        fail_msg("got %s '%s', want %s '%s'", fl_status_name(rc), fl_dc_last_error(),
                 fl_status_name(want), msg ? msg : "");
    if (rc != FL_OK)
        assert_null(ds);
    fl_dc_dataset_close(ds);
}

static void test_idx_errors(void **state) {
    char dir[] = "/tmp/fl_dc_edges_XXXXXX";
    make_tmpdir(dir);
    char img[128], lab[128], gz[128];
    snprintf(img, sizeof(img), "%s/img", dir);
    snprintf(lab, sizeof(lab), "%s/lab", dir);
    snprintf(gz, sizeof(gz), "%s/img.gz", dir);

    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_open_idx(&ds, NULL, lab, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_dataset_open_idx(&ds, img, NULL, 0, NULL), FL_ERR_MISUSE);
    fl_allocator bad = {0};
    assert_int_equal(fl_dc_dataset_open_idx(&ds, img, lab, 0, &bad), FL_ERR_MISUSE);

    write_idx(img, lab, 3, 2, 2, 3, 0, 0);
    expect_idx(img, lab, 10, FL_OK, NULL); /* a limit above n keeps all */
    assert_int_equal(fl_dc_dataset_open_idx(&ds, img, lab, 2, NULL), FL_OK);
    assert_int_equal(fl_dc_dataset_count(ds), 2);
    assert_int_equal(fl_dc_dataset_classes(ds), 2); /* labels 0, 1 */
    fl_dc_dataset_close(ds);
    char missing[140];
    snprintf(missing, sizeof(missing), "%s/none", dir);
    expect_idx(img, missing, 0, FL_ERR_IO, "cannot open");
    /* short files, wrong label magic, counts that disagree, empty images */
    dc_write_file_ok(img, "\0\0\x08\x03", 4);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "not an IDX3 u8 image file");
    dc_write_file_ok(img, "", 0);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "not an IDX3 u8 image file");
    write_idx(img, lab, 3, 2, 2, 3, 0, -5);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "not an IDX1 u8 label file");
    write_idx(img, lab, 3, 2, 2, 3, 0, 0);
    dc_write_file_ok(lab, "\0\0\x08\x03\0\0\0\x03xyz", 11);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "not an IDX1 u8 label file");
    write_idx(img, lab, 3, 2, 2, 4, 0, 0);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "IDX sizes do not match (3 images of 2x2)");
    write_idx(img, lab, 3, 0, 2, 3, 0, 0);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "IDX sizes do not match (3 images of 0x2)");
    write_idx(img, lab, 0, 2, 2, 0, 0, 0);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "IDX sizes do not match (0 images");
    write_idx(img, lab, 3, 2, 2, 3, 0, -1);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "IDX sizes do not match");
    /* dimensions whose product would be huge do not wrap past the size check */
    write_idx(img, lab, 1, 65536, 65536, 1, -((long)65536 * 65536) + 4, 0);
    expect_idx(img, lab, 0, FL_ERR_FORMAT, "IDX sizes do not match (1 images of 65536x65536)");

    /* gzip: the same content compressed loads the same; corrupt data is an I/O error */
    write_idx(img, lab, 3, 2, 2, 3, 0, 0);
    uint8_t raw[28];
    FILE *f = fopen(img, "rb");
    assert_non_null(f);
    assert_int_equal(fread(raw, 1, sizeof(raw), f), sizeof(raw));
    fclose(f);
    gzFile g = gzopen(gz, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, raw, sizeof(raw)), (int)sizeof(raw));
    assert_int_equal(gzclose(g), Z_OK);
    fl_dc_dataset *a = NULL, *b = NULL;
    assert_int_equal(fl_dc_dataset_open_idx(&a, img, lab, 0, NULL), FL_OK);
    assert_int_equal(fl_dc_dataset_open_idx(&b, gz, lab, 0, NULL), FL_OK);
    assert_memory_equal(a->x, b->x, 3 * 4 * sizeof(float));
    fl_dc_dataset_close(a);
    fl_dc_dataset_close(b);
    static const uint8_t corrupt[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    dc_write_file_ok(gz, corrupt, sizeof(corrupt));
    expect_idx(gz, lab, 0, FL_ERR_IO, "reading");
    dc_rm_tree(dir);
}

/* An image file over 1 MiB makes the reader grow its buffer; every allocation of the load
 * fails in turn: NOMEM, nothing leaked, every free given its size. */
static void test_idx_large_oom(void **state) {
    char dir[] = "/tmp/fl_dc_edges_XXXXXX";
    make_tmpdir(dir);
    char img[128], lab[128];
    snprintf(img, sizeof(img), "%s/img", dir);
    snprintf(lab, sizeof(lab), "%s/lab", dir);
    write_idx(img, lab, 1400, 28, 28, 1400, 0, 0); /* 1,097,616 bytes */
    int done = 0;
    long nomem = 0;
    for (long k = 1; k < 64 && !done; k++) {
        struct fl_test_strict s = {.fail_at = k, .any_size = 1};
        fl_allocator a = fl_test_strict_allocator(&s, 0);
        fl_dc_dataset *ds = NULL;
        fl_status rc = fl_dc_dataset_open_idx(&ds, img, lab, 0, &a);
        if (s.calls < k) {
            assert_int_equal(rc, FL_OK);
            assert_int_equal(fl_dc_dataset_count(ds), 1400);
            assert_int_equal(fl_dc_dataset_classes(ds), 7);
            assert_true(ds->x[1399 * 784 + 783] ==
                        (float)((1399 * 784 + 783) % 251) * (1.0f / 255.0f));
            done = 1;
        } else {
            assert_int_equal(rc, FL_ERR_NOMEM);
            assert_null(ds);
            assert_non_null(strstr(fl_dc_last_error(), "no memory"));
            nomem++;
        }
        fl_dc_dataset_close(ds);
        assert_int_equal(s.live, 0);
        assert_int_equal(s.bad_frees, 0);
    }
    assert_true(done);
    assert_true(nomem >= 6);
    dc_rm_tree(dir);
}

/* ---- configuration ---- */

static void expect_cfg(fl_dc_comm *c, const fl_dc_config *cfg, fl_status want, const char *msg) {
    int dummy = 0;
    fl_dc_trainer *tr = (fl_dc_trainer *)&dummy;
    fl_status rc = fl_dc_trainer_create(&tr, cfg, c, NULL);
    if (rc != want || !strstr(fl_dc_last_error(), msg))
        fail_msg("got %s '%s', want %s '%s'", fl_status_name(rc), fl_dc_last_error(),
                 fl_status_name(want), msg);
    assert_null(tr);
}

static void test_config_checks(void **state) {
    fl_dc_comm *c = open_single(NULL);
    fl_dc_config cfg;
    fl_dc_trainer *tr = NULL;
    fl_dc_config_init(NULL); /* no-op */
    tiny_cfg(&cfg);
    assert_int_equal(fl_dc_trainer_create(NULL, &cfg, c, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_create(&tr, NULL, c, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, NULL, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "NULL argument");
    fl_allocator bad = {0};
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, &bad), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_last_error(), "bad allocator struct");

#define CASE(field, value, msg)                                                            \
    do {                                                                                   \
        tiny_cfg(&cfg);                                                                    \
        cfg.field = value;                                                                 \
        expect_cfg(c, &cfg, FL_ERR_MISUSE, msg);                                           \
    } while (0)
    CASE(n_layers, FL_DC_MAX_LAYERS + 1, "config.n_layers must be 1..16");
    CASE(sizes[1], 0, "config.sizes[1] must be 1..2^24");
    CASE(sizes[2], (1 << 24) + 1, "config.sizes[2] must be 1..2^24");
    CASE(dp, 0, "config.dp and config.tp must be >= 1");
    CASE(tp, -1, "config.dp and config.tp must be >= 1");
    CASE(tp, 3, "config.dp * config.tp = 3 but the communicator has 1 ranks");
    /* a product past INT_MAX is reported, not computed in int */
    tiny_cfg(&cfg);
    cfg.dp = 65536;
    cfg.tp = 65536;
    expect_cfg(c, &cfg, FL_ERR_MISUSE, "config.dp * config.tp = 4294967296 but");
    CASE(zero_stage, -1, "config.zero_stage must be 0 or 1");
    CASE(backend, (fl_dc_backend)3, "config.backend is unknown");
    CASE(backend, (fl_dc_backend)-1, "config.backend is unknown");
    CASE(math, (fl_dc_math)3, "config.math is unknown");
    CASE(math, (fl_dc_math)-1, "config.math is unknown");
    CASE(optim, (fl_dc_optim)2, "config.optim is unknown");
    CASE(lr, -1e-3f, "config.lr must be a positive number");
    CASE(lr, INFINITY, "config.lr must be a positive number");
    CASE(lr, NAN, "config.lr must be a positive number");
    CASE(beta1, 1.0f, "config.beta1 and config.beta2 must be in [0, 1)");
    CASE(beta1, NAN, "config.beta1 and config.beta2 must be in [0, 1)");
    CASE(beta2, -0.1f, "config.beta1 and config.beta2 must be in [0, 1)");
    CASE(beta2, 1.0f, "config.beta1 and config.beta2 must be in [0, 1)");
    CASE(eps, 0.0f, "config.eps must be > 0");
    CASE(weight_decay, -1.0f, "config.weight_decay must be >= 0");
    CASE(momentum, 1.0f, "config.momentum in [0, 1)");
    CASE(momentum, -0.5f, "config.momentum in [0, 1)");
    CASE(global_batch, 0, "config.global_batch must be at least config.dp");
    CASE(global_batch, (1 << 24) + 1, "config.global_batch must be at least config.dp");
    CASE(bucket_bytes, 3, "config.bucket_bytes must be at least 4");
    CASE(comm_timeout_s, 0.0, "config.comm_timeout_s must be > 0");
    CASE(comm_timeout_s, NAN, "config.comm_timeout_s must be > 0");
    tiny_cfg(&cfg);
    cfg.global_batch = 1 << 24;
    cfg.sizes[1] = 1 << 8;
    expect_cfg(c, &cfg, FL_ERR_MISUSE, "exceeds 2^31 elements");
#undef CASE
#ifndef FL_DC_WITH_CUDA
    tiny_cfg(&cfg);
    cfg.backend = FL_DC_BACKEND_CUDA;
    expect_cfg(c, &cfg, FL_ERR_UNSUPPORTED, "CUDA backend asked for but this build has no CUDA");
    /* AUTO on a single communicator without CUDA is the CPU */
    tiny_cfg(&cfg);
    cfg.backend = FL_DC_BACKEND_AUTO;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_backend(tr), FL_DC_BACKEND_CPU);
    fl_dc_trainer_destroy(tr);
#endif
    /* the limits themselves are accepted: one layer of width 1, batch 2^24 / widest 128 */
    tiny_cfg(&cfg);
    cfg.n_layers = 1;
    cfg.sizes[0] = 1;
    cfg.sizes[1] = 1;
    cfg.global_batch = 1;
    cfg.bucket_bytes = 4;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_param_count(tr), 2);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
}

/* Layouts of uneven TP splits, odd layer counts and tp equal to a layer's width: every
 * weight and bias of the full model is held by exactly the ranks it should be, and the
 * buckets tile the arena in dp*4 multiples. */
static void test_layout_edges(void **state) {
    static const int shapes[][6] = {
        /* n_layers, sizes... */
        {1, 7, 5},          /* softmax regression: replicated */
        {3, 5, 3, 7, 2},    /* COL, ROW, REP */
        {4, 9, 5, 4, 3, 2}, /* two pairs */
    };
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        fl_dc_config cfg;
        fl_dc_config_init(&cfg);
        cfg.n_layers = shapes[sh][0];
        for (int i = 0; i <= cfg.n_layers; i++)
            cfg.sizes[i] = shapes[sh][i + 1];
        for (int tp = 1; tp <= 5; tp++) {
            for (int dp = 1; dp <= 3; dp += 2) {
                cfg.tp = tp;
                cfg.dp = dp;
                /* many small buckets; at tp = dp = 1 less than one float (a bucket per tensor) */
                cfg.bucket_bytes = 4 * (size_t)(tp + dp) - 6;
                size_t full = fl__dc_full_offset(&cfg, cfg.n_layers, false);
                int *held = calloc(full, sizeof(int));
                for (int r = 0; r < tp; r++) {
                    struct fl__dc_layer L[FL_DC_MAX_LAYERS];
                    struct fl__dc_bucket B[2 * FL_DC_MAX_LAYERS];
                    int nb = 0;
                    size_t len = 0, end = 0;
                    fl__dc_layout(&cfg, r, L, B, &nb, &len);
                    for (int b = 0; b < nb; b++) {
                        assert_int_equal(B[b].off, end);
                        assert_int_equal(B[b].padded % (size_t)(4 * dp), 0);
                        assert_true(B[b].padded >= B[b].len);
                        end = B[b].off + B[b].padded;
                    }
                    assert_int_equal(end, len);
                    for (int i = 0; i < cfg.n_layers; i++) {
                        const struct fl__dc_layer *l = &L[i];
                        int want = tp == 1 ? FL__DC_REP
                                   : i % 2 ? FL__DC_ROW
                                   : i + 1 < cfg.n_layers ? FL__DC_COL
                                                          : FL__DC_REP;
                        assert_int_equal(l->split, want);
                        size_t W = fl__dc_full_offset(&cfg, i, false);
                        size_t Bo = fl__dc_full_offset(&cfg, i, true);
                        for (int o = 0; o < l->out_l; o++)
                            for (int k = 0; k < l->in_l; k++)
                                held[W + (size_t)(o + l->out_off) * (size_t)l->in +
                                     (size_t)(k + l->in_off)]++;
                        int boff = l->split == FL__DC_COL ? l->out_off : 0;
                        for (int o = 0; o < l->b_len; o++)
                            held[Bo + (size_t)(boff + o)]++;
                    }
                }
                /* each weight once per rank holding it: split tensors once over all ranks,
                 * replicated ones (and ROW biases) once per rank */
                for (int i = 0; i < cfg.n_layers; i++) {
                    struct fl__dc_layer L[FL_DC_MAX_LAYERS];
                    struct fl__dc_bucket B[2 * FL_DC_MAX_LAYERS];
                    int nb;
                    size_t len;
                    fl__dc_layout(&cfg, 0, L, B, &nb, &len);
                    size_t W = fl__dc_full_offset(&cfg, i, false);
                    size_t Bo = fl__dc_full_offset(&cfg, i, true);
                    size_t E = fl__dc_full_offset(&cfg, i + 1, false);
                    int wmul = L[i].split == FL__DC_REP ? tp : 1;
                    int bmul = L[i].split == FL__DC_COL ? 1 : tp;
                    for (size_t k = W; k < Bo; k++)
                        if (held[k] != wmul)
                            fail_msg("shape %zu tp %d layer %d weight %zu held %d times", sh, tp,
                                     i, k - W, held[k]);
                    for (size_t k = Bo; k < E; k++)
                        assert_int_equal(held[k], bmul);
                }
                free(held);
            }
        }
    }
}

/* ---- trainer: bad arguments and a sticky failure ---- */

static void test_trainer_arguments(void **state) {
    fl_dc_dataset *ds = tiny_data();
    fl_dc_comm *c = open_single(NULL);
    fl_dc_config cfg;
    tiny_cfg(&cfg);
    fl_dc_trainer *tr = NULL;
    float p[64];
    double loss = 0, acc = 0;
    assert_string_equal(fl_dc_trainer_errmsg(NULL), "NULL trainer");
    assert_int_equal(fl_dc_trainer_backend(NULL), FL_DC_BACKEND_AUTO);
    assert_int_equal(fl_dc_trainer_step_count(NULL), 0);
    assert_int_equal(fl_dc_trainer_param_count(NULL), 0);
    assert_int_equal(fl_dc_trainer_step(NULL, ds, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_evaluate(NULL, ds, 0, &loss, &acc), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_params_get(NULL, p, 64), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_params_set(NULL, p, 64), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_model_save(NULL, "/tmp/x"), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_model_load(NULL, p, 8), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_checkpoint_save(NULL, "/tmp/x"), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_checkpoint_load(NULL, "/tmp/x"), FL_ERR_MISUSE);

    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    size_t n = fl_dc_trainer_param_count(tr);
    assert_int_equal(n, (size_t)(H * D + H + C * H + C));
    assert_int_equal(fl_dc_trainer_model_save(tr, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "path is NULL");
    assert_int_equal(fl_dc_trainer_model_load(tr, NULL, 10), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "buf is NULL");
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_checkpoint_load(tr, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "dir is NULL");
    assert_int_equal(fl_dc_trainer_params_set(tr, p, n - 1), FL_ERR_MISUSE);
    char want[96];
    snprintf(want, sizeof(want), "input holds %zu floats, the model has %zu", n - 1, n);
    assert_string_equal(fl_dc_trainer_errmsg(tr), want);
    assert_int_equal(fl_dc_trainer_params_set(tr, NULL, n), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_params_get(tr, NULL, n), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_step(tr, NULL, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "data set is NULL");
    assert_int_equal(fl_dc_trainer_evaluate(tr, NULL, 0, NULL, NULL), FL_ERR_MISUSE);
    /* more classes than the model has outputs */
    float x[2 * D] = {0};
    int32_t y[2] = {0, 3};
    fl_dc_dataset *wide = NULL;
    assert_int_equal(fl_dc_dataset_from_memory(&wide, x, 2, D, y, 4, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_step(tr, wide, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_trainer_errmsg(tr),
                        "data set has 6 features and 4 classes; the model takes 6 and 3");
    fl_dc_dataset_close(wide);

    /* evaluate: n = 0 and n > count both mean all; chunks of max_rows (4) with a short
     * last one give the same mean as the whole set */
    double l_all, a_all, l_big, a_big, l3;
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, &l_all, &a_all), FL_OK);
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 1000, &l_big, &a_big), FL_OK);
    assert_true(l_all == l_big && a_all == a_big);
    assert_true(a_all >= 0.0 && a_all <= 1.0 && l_all > 0.0);
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 3, &l3, NULL), FL_OK);
    assert_true(l3 != l_all);
    /* step stats: a struct that is too small is left alone; a full one is filled */
    fl_dc_step_stats small = {.struct_size = sizeof(small) - 1, .step = 77};
    assert_int_equal(fl_dc_trainer_step(tr, ds, &small), FL_OK);
    assert_int_equal(small.step, 77);
    fl_dc_step_stats st = {.struct_size = sizeof(st)};
    assert_int_equal(fl_dc_trainer_step(tr, ds, &st), FL_OK);
    assert_int_equal(st.step, 2);
    assert_true(st.loss > 0.0 && st.comm_s >= 0.0 && st.compute_s >= 0.0);
    assert_int_equal(fl_dc_trainer_step_count(tr), 2);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
}

/* An allocation failure inside a step is sticky: every later call that needs the model
 * returns it, argument checks still come first, and destroy frees everything. */
static void test_trainer_sticky(void **state) {
    fl_dc_dataset *ds = tiny_data();
    struct fl_test_strict s = {.any_size = 1};
    fl_allocator a = fl_test_strict_allocator(&s, 0);
    fl_dc_comm *c = open_single(&a);
    fl_dc_config cfg;
    tiny_cfg(&cfg);
    fl_dc_trainer *tr = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, &a), FL_OK);
    size_t n = fl_dc_trainer_param_count(tr);
    float *p = calloc(n, sizeof(float));
    s.fail_at = s.calls + 1; /* the step's shuffle table */
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_ERR_NOMEM);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "no memory for the shuffle of 10 examples");
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, NULL, NULL), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_params_get(tr, p, n), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_params_set(tr, p, n), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_model_save(tr, "/tmp/fl_dc_never"), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_model_load(tr, p, n), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, "/tmp/fl_dc_never"), FL_ERR_NOMEM);
    assert_int_equal(fl_dc_trainer_checkpoint_load(tr, "/tmp/fl_dc_never"), FL_ERR_NOMEM);
    assert_int_equal(access("/tmp/fl_dc_never", F_OK), -1);
    assert_int_equal(fl_dc_trainer_params_get(tr, p, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_trainer_step_count(tr), 0);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    assert_int_equal(s.live, 0);
    assert_int_equal(s.bad_frees, 0);
    free(p);
    fl_dc_dataset_close(ds);
}

/* ---- checkpoints ---- */

/* Copies the shard at path, changing one metadata value (value NULL: drops the key) or
 * replacing tensor `tensor` by a wrong one (F64 of the same length when wrong_dtype, else F32
 * one float short). */
static void rewrite_shard(const char *path, const char *key, const char *value,
                          const char *tensor, int wrong_dtype) {
    fl_safetensors *st = NULL;
    fl_safetensors_writer *w = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_load(st, path), FL_OK);
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    double *d64 = NULL;
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        fl_tensor_view v;
        assert_int_equal(fl_safetensors_at(st, &v, i), FL_OK);
        if (tensor && strcmp(v.name, tensor) == 0) {
            uint64_t len = v.shape[0];
            if (wrong_dtype) {
                d64 = calloc(len, sizeof(double));
                assert_int_equal(fl_safetensors_writer_add(w, v.name, FL_DTYPE_F64, 1, &len, d64,
                                                           len * sizeof(double)),
                                 FL_OK);
            } else {
                len--;
                assert_int_equal(fl_safetensors_writer_add(w, v.name, FL_DTYPE_F32, 1, &len,
                                                           v.data, len * sizeof(float)),
                                 FL_OK);
            }
            continue;
        }
        assert_int_equal(
            fl_safetensors_writer_add(w, v.name, v.dtype, v.ndim, v.shape, v.data, v.nbytes),
            FL_OK);
    }
    for (size_t i = 0; i < fl_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        assert_int_equal(fl_safetensors_metadata_at(st, &k, &v, i), FL_OK);
        if (key && strcmp(k, key) == 0) {
            if (!value)
                continue;
            v = value;
        }
        assert_int_equal(fl_safetensors_writer_set_metadata(w, k, v), FL_OK);
    }
    assert_int_equal(fl_safetensors_writer_write_file(w, path), FL_OK);
    fl_safetensors_writer_destroy(w);
    fl_safetensors_destroy(st);
    free(d64);
}

static void copy_file(const char *from, const char *to) {
    FILE *f = fopen(from, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(len > 0 && len < sizeof(buf));
    dc_write_file_ok(to, buf, len);
}

/* Loads must fail with want and a message containing msg, and leave the trainer usable
 * with its step count unchanged. */
static void expect_load(fl_dc_trainer *tr, const fl_dc_dataset *ds, const char *dir,
                        fl_status want, const char *msg) {
    uint64_t before = fl_dc_trainer_step_count(tr);
    fl_status rc = fl_dc_trainer_checkpoint_load(tr, dir);
    if (rc != want || !strstr(fl_dc_trainer_errmsg(tr), msg))
        fail_msg("load: got %s '%s', want %s '%s'", fl_status_name(rc),
                 fl_dc_trainer_errmsg(tr), fl_status_name(want), msg);
    assert_int_equal(fl_dc_trainer_step_count(tr), before);
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK);
}

static void test_checkpoint_refusals(void **state) {
    fl_dc_dataset *ds = tiny_data();
    fl_dc_comm *c = open_single(NULL);
    fl_dc_config cfg;
    tiny_cfg(&cfg);
    cfg.optim = FL_DC_OPTIM_SGD;
    cfg.momentum = 0.5f;
    char dir[] = "/tmp/fl_dc_edges_XXXXXX";
    make_tmpdir(dir);
    char ck[128], path[256], good[256], latest[256];
    snprintf(ck, sizeof(ck), "%s/ck", dir);
    snprintf(path, sizeof(path), "%s/step-00000002/rank-00000.safetensors", ck);
    snprintf(good, sizeof(good), "%s/good.safetensors", dir);
    snprintf(latest, sizeof(latest), "%s/latest", ck);
    fl_dc_trainer *tr = NULL, *other = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK);
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, ck), FL_OK);
    copy_file(path, good);
    /* the SGD checkpoint loads back (momentum state included) */
    expect_load(tr, ds, "/nonexistent-dir", FL_ERR_NOT_FOUND, "no checkpoint in");
    assert_int_equal(fl_dc_trainer_checkpoint_load(tr, ck), FL_OK);
    assert_int_equal(fl_dc_trainer_step_count(tr), 2);

    /* jobs that differ in grid, model, optimiser or batch refuse it, naming the field */
    fl_dc_config o = cfg;
    o.zero_stage = 1;
    assert_int_equal(fl_dc_trainer_create(&other, &o, c, NULL), FL_OK);
    expect_load(other, ds, ck, FL_ERR_FORMAT,
                "flotilla.dc.grid is 'dp=1,tp=1,zero=0,rank=0', this job has "
                "'dp=1,tp=1,zero=1,rank=0'");
    fl_dc_trainer_destroy(other);
    o = cfg;
    o.sizes[1] = H + 1;
    assert_int_equal(fl_dc_trainer_create(&other, &o, c, NULL), FL_OK);
    expect_load(other, ds, ck, FL_ERR_FORMAT, "flotilla.arch is '6-4-3', this job has '6-5-3'");
    fl_dc_trainer_destroy(other);
    o = cfg;
    o.optim = FL_DC_OPTIM_ADAMW;
    assert_int_equal(fl_dc_trainer_create(&other, &o, c, NULL), FL_OK);
    expect_load(other, ds, ck, FL_ERR_FORMAT, "flotilla.dc.optim is 'sgd', this job has 'adamw'");
    fl_dc_trainer_destroy(other);
    o = cfg;
    o.global_batch = 5;
    assert_int_equal(fl_dc_trainer_create(&other, &o, c, NULL), FL_OK);
    expect_load(other, ds, ck, FL_ERR_FORMAT, "flotilla.dc.global_batch is '4'");
    fl_dc_trainer_destroy(other);

    /* the step must be a plain decimal number */
    static const char *bad_steps[] = {"", "5x", "-1", " 7", "+3", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad_steps) / sizeof(bad_steps[0]); i++) {
        copy_file(good, path);
        rewrite_shard(path, "flotilla.dc.step", bad_steps[i], NULL, 0);
        expect_load(tr, ds, ck, FL_ERR_FORMAT, "bad flotilla.dc.step");
    }
    copy_file(good, path);
    rewrite_shard(path, "flotilla.dc.step", NULL, NULL, 0);
    expect_load(tr, ds, ck, FL_ERR_FORMAT, "bad flotilla.dc.step");
    copy_file(good, path);
    rewrite_shard(path, "flotilla.dc.seed", NULL, NULL, 0);
    expect_load(tr, ds, ck, FL_ERR_FORMAT, "flotilla.dc.seed is '(missing)'");
    /* tensors of the wrong type or length, or missing */
    copy_file(good, path);
    rewrite_shard(path, NULL, NULL, "opt.v", 1);
    expect_load(tr, ds, ck, FL_ERR_FORMAT, "tensor opt.v missing or not F32");
    copy_file(good, path);
    rewrite_shard(path, NULL, NULL, "params", 0);
    expect_load(tr, ds, ck, FL_ERR_FORMAT, "tensor params missing or not F32");
    /* a truncated shard is corrupt; a missing one an I/O error */
    copy_file(good, path);
    assert_int_equal(truncate(path, 100), 0);
    expect_load(tr, ds, ck, FL_ERR_CORRUPT, "rank 0:");
    unlink(path);
    expect_load(tr, ds, ck, FL_ERR_IO, "rank-00000.safetensors");
    copy_file(good, path);

    /* `latest` that is empty or names no step directory */
    dc_write_file_ok(latest, "", 0);
    expect_load(tr, ds, ck, FL_ERR_CORRUPT, "is empty");
    dc_write_file_ok(latest, "checkpoint-2\n", 13);
    expect_load(tr, ds, ck, FL_ERR_CORRUPT, "names no step directory");
    dc_write_file_ok(latest, "step-/../../etc\n", 16);
    expect_load(tr, ds, ck, FL_ERR_CORRUPT, "names no step directory");
    dc_write_file_ok(latest, "step-00000002\r\n", 15);
    assert_int_equal(fl_dc_trainer_checkpoint_load(tr, ck), FL_OK);
    assert_int_equal(fl_dc_trainer_step_count(tr), 2);

    /* paths too long for the layout are misuse, on save and on load; a directory whose
     * `latest` can be read but whose shard path would not fit is refused the same way */
    char *longdir = malloc(4200);
    memset(longdir, 'd', 4199);
    longdir[0] = '/';
    longdir[4199] = '\0';
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, longdir), FL_ERR_MISUSE);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "checkpoint path too long");
    assert_int_equal(fl_dc_trainer_checkpoint_load(tr, longdir), FL_ERR_MISUSE);
    size_t ll = (size_t)snprintf(longdir, 4200, "%s", dir);
    while (ll + 241 < 3900) {
        longdir[ll++] = '/';
        memset(longdir + ll, 'a', 240);
        ll += 240;
        longdir[ll] = '\0';
        assert_int_equal(mkdir(longdir, 0755), 0);
    }
    char lname[300];
    memset(lname, '0', sizeof(lname));
    memcpy(lname, "step-", 5);
    lname[240] = '\n';
    assert_true(strlen(longdir) + 7 < 4096);
    snprintf(longdir + ll, 4200 - ll, "/latest");
    dc_write_file_ok(longdir, lname, 241);
    longdir[ll] = '\0';
    expect_load(tr, ds, longdir, FL_ERR_MISUSE, "checkpoint path too long");
    free(longdir);

    /* save: a parent that does not exist, a directory in the way of latest.tmp, a
     * directory where latest goes; each leaves the old checkpoint in place and the trainer
     * usable */
    char nodir[200];
    snprintf(nodir, sizeof(nodir), "%s/no/such", dir);
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, nodir), FL_ERR_IO);
    assert_non_null(strstr(fl_dc_trainer_errmsg(tr), "cannot create directory"));
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK); /* step 3 */
    char tmpd[300];
    snprintf(tmpd, sizeof(tmpd), "%s.tmp", latest);
    assert_int_equal(mkdir(tmpd, 0755), 0);
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, ck), FL_ERR_IO);
    assert_non_null(strstr(fl_dc_trainer_errmsg(tr), "cannot create"));
    assert_int_equal(rmdir(tmpd), 0);
    assert_int_equal(fl_dc_trainer_checkpoint_load(tr, ck), FL_OK); /* latest: still step 2 */
    assert_int_equal(fl_dc_trainer_step_count(tr), 2);
    assert_int_equal(unlink(latest), 0);
    assert_int_equal(mkdir(latest, 0755), 0);
    char inside[300];
    snprintf(inside, sizeof(inside), "%s/x", latest);
    dc_write_file_ok(inside, "x", 1);
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, ck), FL_ERR_IO);
    assert_non_null(strstr(fl_dc_trainer_errmsg(tr), "cannot write"));
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK);

    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
    dc_rm_tree(dir);
}

/* A world communicator that failed makes every checkpoint and model save fail with
 * ABORTED at its agreement, and the trainer stays failed. */
static void test_checkpoint_aborted_world(void **state) {
    fl_dc_dataset *ds = tiny_data();
    fl_dc_comm *c = open_single(NULL);
    fl_dc_config cfg;
    tiny_cfg(&cfg);
    fl_dc_trainer *tr = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    char dir[] = "/tmp/fl_dc_edges_XXXXXX";
    make_tmpdir(dir);
    fl_dc_comm_abort(c);
    assert_int_equal(fl_dc_trainer_checkpoint_save(tr, dir), FL_ERR_ABORTED);
    assert_string_equal(fl_dc_trainer_errmsg(tr), "rank 0: communicator already failed");
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_ERR_ABORTED);
    fl_dc_trainer_destroy(tr);
    /* a failed TP communicator fails the step and evaluation */
    fl_dc_comm_close(c);
    c = open_single(NULL);
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    fl_dc_comm_abort(tr->tp_comm);
    assert_int_equal(fl_dc_trainer_evaluate(tr, ds, 0, NULL, NULL), FL_ERR_ABORTED);
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_ERR_ABORTED);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
    dc_rm_tree(dir);
}

/* Every allocation of checkpoint save and load, model save and load fails in turn: the
 * call returns NOMEM, frees what it took, and the trainer goes on (a step succeeds). */
static void test_save_load_oom(void **state) {
    fl_dc_dataset *ds = tiny_data();
    struct fl_test_strict s = {.any_size = 1};
    fl_allocator a = fl_test_strict_allocator(&s, 0);
    fl_dc_comm *c = open_single(&a);
    fl_dc_config cfg;
    tiny_cfg(&cfg);
    cfg.zero_stage = 1;
    fl_dc_trainer *tr = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, &a), FL_OK);
    assert_int_equal(fl_dc_trainer_step(tr, ds, NULL), FL_OK);
    char dir[] = "/tmp/fl_dc_edges_XXXXXX";
    make_tmpdir(dir);
    char ck[128], model[128];
    snprintf(ck, sizeof(ck), "%s/ck", dir);
    snprintf(model, sizeof(model), "%s/model.safetensors", dir);
    assert_int_equal(fl_dc_trainer_model_save(tr, model), FL_OK);
    static uint8_t img[1 << 14];
    FILE *f = fopen(model, "rb");
    assert_non_null(f);
    size_t img_len = fread(img, 1, sizeof(img), f);
    fclose(f);
    assert_true(img_len > 0 && img_len < sizeof(img));

    for (int which = 0; which < 4; which++) {
        int done = 0;
        long nomem = 0;
        for (long k = 1; k < 200 && !done; k++) {
            long live = s.live;
            s.fail_at = s.calls + k;
            fl_status rc = FL_OK;
            switch (which) {
            case 0: rc = fl_dc_trainer_checkpoint_save(tr, ck); break;
            case 1: rc = fl_dc_trainer_checkpoint_load(tr, ck); break;
            case 2: rc = fl_dc_trainer_model_save(tr, model); break;
            default: rc = fl_dc_trainer_model_load(tr, img, img_len); break;
            }
            int failed_alloc = s.calls >= s.fail_at;
            s.fail_at = 0;
            if (!failed_alloc) {
                assert_int_equal(rc, FL_OK);
                done = 1;
            } else {
                if (rc != FL_ERR_NOMEM)
                    fail_msg("call %d, allocation %ld: %s '%s'", which, k, fl_status_name(rc),
                             fl_dc_trainer_errmsg(tr));
                nomem++;
            }
            assert_int_equal(s.live, live);
            if (fl_dc_trainer_step(tr, ds, NULL) != FL_OK)
                fail_msg("call %d, allocation %ld: the trainer is failed after NOMEM: '%s'",
                         which, k, fl_dc_trainer_errmsg(tr));
        }
        assert_true(done);
        assert_true(nomem >= 2);
    }
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    assert_int_equal(s.live, 0);
    assert_int_equal(s.bad_frees, 0);
    fl_dc_dataset_close(ds);
    dc_rm_tree(dir);
}

/* Model files with a missing, mistyped or misshapen tensor are refused, naming it. */
static void test_model_load_refusals(void **state) {
    fl_dc_comm *c = open_single(NULL);
    fl_dc_config cfg;
    tiny_cfg(&cfg);
    fl_dc_trainer *tr = NULL;
    assert_int_equal(fl_dc_trainer_create(&tr, &cfg, c, NULL), FL_OK);
    size_t n = fl_dc_trainer_param_count(tr);
    float *full = calloc(n, sizeof(float)), *back = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        full[i] = (float)i / 8.0f;
    /* builds a model file of this shape; variant selects one fault */
    for (int variant = 0; variant < 5; variant++) {
        fl_safetensors_writer *w = NULL;
        assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
        for (int i = 0; i < 2; i++) {
            uint64_t shape[2] = {(uint64_t)cfg.sizes[i + 1], (uint64_t)cfg.sizes[i]};
            char name[32];
            const float *wp = full + fl__dc_full_offset(&cfg, i, false);
            const float *bp = full + fl__dc_full_offset(&cfg, i, true);
            snprintf(name, sizeof(name), "layers.%d.weight", i);
            if (variant == 1 && i == 1) /* transposed */
                assert_int_equal(fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 2,
                                                           (uint64_t[]){shape[1], shape[0]},
                                                           wp, shape[0] * shape[1] * 4),
                                 FL_OK);
            else if (variant == 2 && i == 0) /* one dimension */
                assert_int_equal(fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 1,
                                                           (uint64_t[]){shape[0] * shape[1]},
                                                           wp, shape[0] * shape[1] * 4),
                                 FL_OK);
            else
                assert_int_equal(fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 2, shape, wp,
                                                           shape[0] * shape[1] * 4),
                                 FL_OK);
            snprintf(name, sizeof(name), "layers.%d.bias", i);
            if (variant == 3 && i == 1) /* I32 bias */
                assert_int_equal(fl_safetensors_writer_add(w, name, FL_DTYPE_I32, 1, shape, bp,
                                                           shape[0] * 4),
                                 FL_OK);
            else if (variant != 4 || i != 0) /* variant 4: layers.0.bias missing */
                assert_int_equal(fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 1, shape, bp,
                                                           shape[0] * 4),
                                 FL_OK);
        }
        size_t len = 0;
        assert_int_equal(fl_safetensors_writer_size(w, &len), FL_OK);
        uint8_t *img = malloc(len);
        assert_int_equal(fl_safetensors_writer_serialize(w, img, len), FL_OK);
        fl_safetensors_writer_destroy(w);
        fl_status rc = fl_dc_trainer_model_load(tr, img, len);
        static const char *const named[] = {NULL, "layers.1.weight", "layers.0.weight",
                                            "layers.1.bias", "layers.0.bias"};
        if (variant == 0) {
            assert_int_equal(rc, FL_OK);
            assert_int_equal(fl_dc_trainer_params_get(tr, back, n), FL_OK);
            assert_memory_equal(back, full, n * sizeof(float));
        } else {
            assert_int_equal(rc, FL_ERR_FORMAT);
            char want[128];
            snprintf(want, sizeof(want), "model: tensor %s missing or not F32", named[variant]);
            assert_non_null(strstr(fl_dc_trainer_errmsg(tr), want));
        }
        free(img);
    }
    assert_int_equal(fl_dc_trainer_model_load(tr, "garbage!", 8), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_dc_trainer_errmsg(tr), "model: header"));
    free(full);
    free(back);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comm_single),
        cmocka_unit_test(test_dataset_from_memory_checks),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_idx_large_oom),
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_layout_edges),
        cmocka_unit_test(test_trainer_arguments),
        cmocka_unit_test(test_trainer_sticky),
        cmocka_unit_test(test_checkpoint_refusals),
        cmocka_unit_test(test_checkpoint_aborted_world),
        cmocka_unit_test(test_save_load_oom),
        cmocka_unit_test(test_model_load_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
