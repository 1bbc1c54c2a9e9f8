/* Example store: dense and raw examples, retention by age, bytes and count, reopen with a
 * different feature_dim, bad arguments, allocation failures; plus bad arguments of the
 * client API, the size getters, and training from the store. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fl_test.h"
#include "flotilla/client.h"

static int64_t g_now = 1000000;
static int64_t clock_fn(void *u) {
    (void)u;
    return g_now;
}

static fl_client_store *open_store(const char *path, uint32_t dim, int64_t age, uint64_t bytes,
                                   uint64_t count) {
    fl_client_store_config c;
    fl_client_store_config_init(&c);
    c.path = path;
    c.feature_dim = dim;
    c.max_age_ms = age;
    c.max_bytes = bytes;
    c.max_examples = count;
    c.clock = clock_fn;
    fl_client_store *st = NULL;
    char err[128];
    assert_int_equal(fl_client_store_open(&st, &c, err, sizeof(err)), FL_OK);
    return st;
}

static void test_retention(void **s) {
    (void)s;
    float x[4] = {1, 2, 3, 4};
    uint64_t n, b, removed;
    /* age */
    fl_client_store *st = open_store(":memory:", 4, 10000, 0, 0);
    for (int i = 0; i < 5; i++) {
        g_now += 3000;
        assert_int_equal(fl_client_store_add(st, x, 4, i), FL_OK);
    }
    assert_int_equal(fl_client_store_stats(st, &n, &b), FL_OK);
    assert_int_equal(n, 4); /* the first is 12 s old by the fifth insert */
    assert_int_equal(b, 4 * 16);
    g_now += 20000;
    assert_int_equal(fl_client_store_prune(st, &removed), FL_OK);
    assert_int_equal(removed, 4);
    fl_client_store_close(st);
    /* bytes: 16 bytes per dense example, cap 50 -> 3 newest kept */
    st = open_store(":memory:", 4, 0, 50, 0);
    for (int i = 0; i < 6; i++) {
        x[0] = (float)i;
        assert_int_equal(fl_client_store_add(st, x, 4, i), FL_OK);
    }
    assert_int_equal(fl_client_store_stats(st, &n, &b), FL_OK);
    assert_int_equal(n, 3);
    assert_true(b <= 50);
    int64_t ids[8];
    size_t k;
    assert_int_equal(fl_client_store_ids(st, ids, 8, &k, 0), FL_OK);
    assert_int_equal(k, 3);
    float got[4];
    int32_t lab;
    assert_int_equal(fl_client_store_get(st, ids[0], got, 4, &lab, NULL, 0, NULL), FL_OK);
    assert_int_equal(lab, 3); /* oldest kept is the 4th inserted */
    assert_true(got[0] == 3.0f);
    /* one example over the byte cap is refused */
    assert_int_equal(fl_client_store_add_raw(st, "0123456789012345678901234567890123456789"
                                                 "0123456789012345678901234567890123456789",
                                             80),
                     FL_ERR_TOO_LARGE);
    fl_client_store_close(st);
    /* count + raw examples */
    st = open_store(":memory:", 0, 0, 0, 2);
    assert_int_equal(fl_client_store_add(st, x, 4, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add_raw(st, "abc", 3), FL_OK);
    assert_int_equal(fl_client_store_add_raw(st, "defg", 4), FL_OK);
    assert_int_equal(fl_client_store_add_raw(st, "hijkl", 5), FL_OK);
    assert_int_equal(fl_client_store_stats(st, &n, &b), FL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(b, 9);
    assert_int_equal(fl_client_store_ids(st, ids, 8, &k, 0), FL_OK);
    char raw[8];
    size_t rl;
    assert_int_equal(fl_client_store_get(st, ids[0], NULL, 0, &lab, raw, 2, &rl),
                     FL_ERR_TOO_LARGE);
    assert_int_equal(rl, 4);
    assert_int_equal(fl_client_store_get(st, ids[0], NULL, 0, &lab, raw, 8, &rl), FL_OK);
    assert_int_equal(lab, -1);
    assert_memory_equal(raw, "defg", 4);
    assert_int_equal(fl_client_store_get(st, 9999, NULL, 0, NULL, NULL, 0, NULL),
                     FL_ERR_NOT_FOUND);
    assert_int_equal(fl_client_store_clear(st), FL_OK);
    assert_int_equal(fl_client_store_stats(st, &n, NULL), FL_OK);
    assert_int_equal(n, 0);
    fl_client_store_close(st);
}

static void test_file_reopen(void **s) {
    (void)s;
    char dir[] = "/tmp/fl-store-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/ex.db", dir);
    fl_client_store *st = open_store(path, 3, 0, 0, 0);
    float x[3] = {1, 2, 3};
    assert_int_equal(fl_client_store_add(st, x, 3, 1), FL_OK);
    fl_client_store_close(st);
    st = open_store(path, 3, 0, 0, 0);
    uint64_t n;
    fl_client_store_stats(st, &n, NULL);
    assert_int_equal(n, 1);
    fl_client_store_close(st);
    fl_client_store_config c;
    fl_client_store_config_init(&c);
    c.path = path;
    c.feature_dim = 4;
    char err[160];
    assert_int_equal(fl_client_store_open(&st, &c, err, sizeof(err)), FL_ERR_FORMAT);
    assert_null(st);
    assert_non_null(strstr(err, "feature_dim"));
    char p2[160];
    snprintf(p2, sizeof(p2), "%s-wal", path);
    unlink(p2);
    snprintf(p2, sizeof(p2), "%s-shm", path);
    unlink(p2);
    unlink(path);
    rmdir(dir);
}

static void test_store_bad_args(void **s) {
    (void)s;
    fl_client_store *st = NULL;
    fl_client_store_config c;
    fl_client_store_config_init(NULL);
    fl_client_store_config_init(&c);
    char err[160];
    assert_int_equal(fl_client_store_open(NULL, &c, err, sizeof(err)), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_open(&st, NULL, err, sizeof(err)), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_open(&st, &c, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "path"));
    c.path = ":memory:";
    c.feature_dim = 2000000;
    assert_int_equal(fl_client_store_open(&st, &c, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "feature_dim"));
    c.feature_dim = 2;
    c.max_age_ms = -1;
    assert_int_equal(fl_client_store_open(&st, &c, err, sizeof(err)), FL_ERR_MISUSE);
    c.max_age_ms = 0;
    c.struct_size = 3;
    assert_int_equal(fl_client_store_open(&st, &c, NULL, 0), FL_ERR_MISUSE);
    c.struct_size = sizeof(c);
    c.path = "/nonexistent-dir/x/y.db";
    assert_int_equal(fl_client_store_open(&st, &c, err, sizeof(err)), FL_ERR_IO);
    c.path = ":memory:";
    assert_int_equal(fl_client_store_open(&st, &c, NULL, 0), FL_OK);
    float x[2] = {1, 2}, nan[2] = {1, 0.0f / 0.0f};
    assert_int_equal(fl_client_store_add(st, NULL, 2, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add(st, x, 3, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add(st, x, 2, -1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add(st, nan, 2, 0), FL_ERR_RANGE);
    assert_non_null(strstr(fl_client_store_errmsg(st), "finite"));
    assert_int_equal(fl_client_store_add_raw(st, NULL, 2), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add_raw(st, x, 0), FL_ERR_MISUSE);
    int64_t ids[2];
    size_t n;
    assert_int_equal(fl_client_store_ids(st, NULL, 2, &n, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_ids(st, ids, 0, &n, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add(NULL, x, 2, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_add_raw(NULL, x, 2), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_prune(NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_stats(NULL, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_clear(NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_ids(NULL, ids, 2, &n, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_store_get(NULL, 1, NULL, 0, NULL, NULL, 0, NULL), FL_ERR_MISUSE);
    assert_non_null(fl_client_store_errmsg(NULL));
    fl_client_store_close(NULL);
    fl_client_store_close(st);
}

static void test_store_oom(void **s) {
    (void)s;
    for (long fail = 1; fail < 10; fail++) {
        struct fl_test_counting cnt = {0};
        cnt.fail_at = fail;
        fl_allocator a = fl_test_counting_allocator(&cnt);
        fl_client_store_config c;
        fl_client_store_config_init(&c);
        c.path = ":memory:";
        c.feature_dim = 2;
        c.allocator = &a;
        fl_client_store *st = NULL;
        fl_status rc = fl_client_store_open(&st, &c, NULL, 0);
        assert_true(rc == FL_OK || rc == FL_ERR_NOMEM);
        fl_client_store_close(st);
        assert_int_equal(cnt.live, 0);
    }
}

static fl_status dummy_send(void *ctx, const fl_client_request *r) {
    (void)ctx;
    (void)r;
    return FL_ERR_IO;
}
static fl_status dummy_recv(void *ctx, fl_client_response *r) {
    (void)ctx;
    (void)r;
    return FL_ERR_IO;
}

static void test_client_bad_args(void **s) {
    (void)s;
    fl_client_store *st = open_store(":memory:", 2, 0, 0, 0);
    fl_client_config cfg;
    fl_client_config_init(NULL);
    fl_client_config_init(&cfg);
    fl_client *c = NULL;
    char err[200];
    struct {
        const char *field;
        void (*set)(fl_client_config *);
    } cases[] = {{"population", NULL}};
    (void)cases;
    assert_int_equal(fl_client_create(NULL, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_int_equal(fl_client_create(&c, NULL, err, sizeof(err)), FL_ERR_MISUSE);
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "population"));
    cfg.population = "bad name!";
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "population"));
    cfg.population = "kb-en";
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "region"));
    cfg.region = "EU";
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "coordinator_key"));
    cfg.has_coordinator_key = 1;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "token"));
    cfg.enrollment_token = "short";
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "enrollment_token"));
    cfg.enrollment_token = "flp_0123456789abcdefghijklmnop";
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "transport"));
    cfg.transport.struct_size = sizeof(cfg.transport);
    cfg.transport.send = dummy_send;
    cfg.transport.recv = dummy_recv;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "store"));
    cfg.store = st;
    cfg.long_poll_s = 61;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "long_poll_s"));
    cfg.long_poll_s = 30;
    cfg.momentum = 1.5;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    cfg.momentum = 0.9;
    cfg.backoff_initial_ms = 0;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    cfg.backoff_initial_ms = 10;
    assert_int_equal(fl_client_create(&c, &cfg, err, sizeof(err)), FL_OK);
    fl_client_eligibility e = {sizeof(e), 1, 1, 1, 101};
    assert_int_equal(fl_client_set_eligibility(c, &e), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_client_errmsg(c), "battery"));
    assert_int_equal(fl_client_set_eligibility(c, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_set_eligibility(NULL, &e), FL_ERR_MISUSE);
    fl_client_stats cs = {0};
    assert_int_equal(fl_client_stats_get(c, &cs), FL_ERR_MISUSE);
    assert_int_equal(fl_client_stats_get(NULL, &cs), FL_ERR_MISUSE);
    char tok[300];
    assert_int_equal(fl_client_token(c, tok, sizeof(tok)), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_client_token(NULL, tok, sizeof(tok)), FL_ERR_MISUSE);
    assert_int_equal(fl_client_step(NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_run(NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_client_worker_start(NULL), FL_ERR_MISUSE);
    /* A failing transport: the step reports progress and schedules a backoff. */
    int64_t next = 0;
    assert_int_equal(fl_client_step(c, &next), FL_OK);
    cs.struct_size = sizeof(cs);
    assert_int_equal(fl_client_stats_get(c, &cs), FL_OK);
    assert_int_equal(cs.transient_errors, 1);
    assert_true(next > g_now - 1);
    /* Interrupt is delivered once. */
    fl_client_interrupt(c);
    fl_client_interrupt(NULL);
    assert_int_equal(fl_client_step(c, &next), FL_ERR_CANCELLED);
    assert_int_equal(fl_client_run(c, 0), FL_ERR_AGAIN);
    /* Worker starts and stops. */
    assert_int_equal(fl_client_worker_start(c), FL_OK);
    assert_int_equal(fl_client_worker_start(c), FL_ERR_STATE);
    fl_client_worker_stop(c);
    fl_client_worker_stop(NULL);
    assert_non_null(fl_client_errmsg(NULL));
    fl_client_destroy(c);
    fl_client_destroy(NULL);
    /* Response sink and transport helpers. */
    assert_int_equal(fl_client_response_set_status(NULL, 200), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_append(NULL, "x", 1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_response_add_header(NULL, "a", 1, "b", 1), FL_ERR_MISUSE);
    fl_client_curl_config cc;
    fl_client_curl_config_init(NULL);
    fl_client_curl_config_init(&cc);
    fl_client_curl *t = NULL;
    assert_int_equal(fl_client_curl_create(&t, &cc, err, sizeof(err)), FL_ERR_MISUSE);
    cc.base_url = "http://example.org";
    assert_int_equal(fl_client_curl_create(&t, &cc, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "loopback") ? err : strstr(err, "127.0.0.1"));
    cc.base_url = "https://example.org/";
    assert_int_equal(fl_client_curl_create(&t, &cc, err, sizeof(err)), FL_ERR_MISUSE);
    cc.base_url = "https://example.org";
    assert_int_equal(fl_client_curl_create(&t, &cc, err, sizeof(err)), FL_OK);
    fl_client_transport tp;
    assert_int_equal(fl_client_curl_transport(t, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_curl_transport(t, &tp), FL_OK);
    fl_client_curl_destroy(t);
    fl_client_curl_destroy(NULL);
    assert_int_equal(fl_client_key_id(NULL, NULL), FL_ERR_MISUSE);
    fl_client_store_close(st);
}

static void test_sizes_and_key_id(void **s) {
    (void)s;
    assert_int_equal(fl_client_public_key_bytes(), FL_CLIENT_PUBLIC_KEY_BYTES);
    assert_int_equal(fl_client_key_id_chars(), FL_CLIENT_KEY_ID_CHARS);
    assert_int_equal(fl_client_token_max_chars(), FL_CLIENT_TOKEN_MAX_CHARS);
    assert_int_equal(fl_client_max_layers(), FL_CLIENT_MAX_LAYERS);
    assert_int_equal(fl_client_max_tensors(), FL_CLIENT_MAX_TENSORS);
    assert_int_equal(fl_client_max_json_bytes(), FL_CLIENT_MAX_JSON_BYTES);
    uint8_t pk[32] = {0};
    char id[17];
    assert_int_equal(fl_client_key_id(id, pk), FL_OK);
    /* SHA-256 of 32 zero bytes starts 66687aadf862bd77 */
    assert_string_equal(id, "66687aadf862bd77");
}

/* Training reads batches from the store. */
static void test_train_from_store(void **s) {
    (void)s;
    fl_client_store *st = open_store(":memory:", 4, 0, 0, 0);
    for (int i = 0; i < 60; i++) {
        float x[4] = {0.1f * (float)(i % 7), 0, 0, 0};
        x[1 + i % 3] = 1.0f;
        assert_int_equal(fl_client_store_add(st, x, 4, i % 3), FL_OK);
    }
    uint32_t sizes[] = {4, 3};
    size_t len;
    fl_client_model_init(NULL, 0, &len, sizes, 2, 3, NULL);
    uint8_t m[1024];
    assert_int_equal(fl_client_model_init(m, sizeof(m), &len, sizes, 2, 3, NULL), FL_OK);
    fl_client_trainer *tr = NULL;
    assert_int_equal(fl_client_trainer_create(&tr, m, len, NULL), FL_OK);
    fl_client_train_params p;
    fl_client_train_params_init(&p);
    p.epochs = 20;
    p.batch_size = 8;
    p.learning_rate = 0.1;
    p.max_examples = 45;
    uint64_t used;
    double loss;
    assert_int_equal(fl_client_trainer_train_store(tr, st, &p, &used, &loss), FL_OK);
    assert_int_equal(used, 45);
    assert_true(loss < 0.3);
    fl_client_trainer_destroy(tr);
    fl_client_store_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retention),        cmocka_unit_test(test_file_reopen),
        cmocka_unit_test(test_store_bad_args),   cmocka_unit_test(test_store_oom),
        cmocka_unit_test(test_client_bad_args),  cmocka_unit_test(test_sizes_and_key_id),
        cmocka_unit_test(test_train_from_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
