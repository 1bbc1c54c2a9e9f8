/* Parameters, configuration, graph, sizes, wire header and quantization helpers. */
#include <math.h>
#include <stddef.h>

#include "test_sa_harness.h"
#include "secagg_internal.h"

/* Reference (k, t_upper) for 40 bits of security and 20 of correctness, as tabulated by
 * the tests of Google's federated compute platform graph parameter finder; copied from
 * /work/shared/reference/secagg_graph_params.csv (see its README). */
static const struct {
    uint32_t n;
    double adv, drop;
    int malicious;
    uint32_t k, t_upper;
} ref[] = {
    {100, 0.05, 0.05, 0, 12, 6},      {1000, 0.05, 0.05, 0, 30, 17},
    {10000, 0.05, 0.05, 0, 34, 20},   {100000, 0.05, 0.05, 0, 36, 21},
    {1000000, 0.05, 0.05, 0, 38, 22}, {100, 0.05, 0.05, 1, 16, 11},
    {1000, 0.05, 0.05, 1, 52, 37},    {10000, 0.05, 0.05, 1, 62, 44},
    {100000, 0.05, 0.05, 1, 68, 48},  {1000000, 0.05, 0.05, 1, 74, 52},
    {100, 0.05, 0.33, 0, 28, 6},      {1000, 0.05, 0.33, 0, 72, 24},
    {10000, 0.05, 0.33, 0, 86, 29},   {100, 0.33, 0.33, 0, 68, 34},
    {1000, 0.33, 0.33, 0, 286, 150},  {10000, 0.33, 0.33, 0, 422, 221},
    {10, 0.05, 0.05, 0, 2, 2},
};

static void test_derive_matches_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(ref) / sizeof(ref[0]); i++) {
        uint32_t k = 0, t = 0;
        assert_int_equal(fl_secagg_params_derive(&k, &t, ref[i].n, ref[i].adv, ref[i].drop,
                                                 ref[i].malicious), FL_OK);
        /* Stated tolerance: k exact (it is), t <= t_upper. */
        if (k != ref[i].k || t > ref[i].t_upper || t < 2)
            fail_msg("n=%u adv=%.2f drop=%.2f mal=%d: got k=%u t=%u, ref k=%u t<=%u",
                     ref[i].n, ref[i].adv, ref[i].drop, ref[i].malicious, k, t, ref[i].k,
                     ref[i].t_upper);
    }
}

static void test_derive_edges(void **state) {
    (void)state;
    uint32_t k, t;
    assert_int_equal(fl_secagg_params_derive(&k, &t, 2, 0.05, 0.05, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_params_derive(&k, &t, 100, 1.0, 0.05, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_params_derive(&k, &t, 100, 0.05, NAN, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_params_derive(NULL, &t, 100, 0.05, 0.05, 0), FL_ERR_MISUSE);
    /* Small n falls back to the complete graph. */
    assert_int_equal(fl_secagg_params_derive(&k, &t, 3, 0.05, 0.05, 0), FL_OK);
    assert_int_equal(k, 2);
    assert_int_equal(t, 2);
    assert_int_equal(fl_secagg_params_derive(&k, &t, 5, 0.0, 0.0, 1), FL_OK);
    assert_int_equal(k, 2);
    /* Infeasible: too many dropouts for any threshold. */
    assert_int_equal(fl_secagg_params_derive(&k, &t, 4, 0.5, 0.9, 1), FL_ERR_RANGE);
}

static void test_sizes(void **state) {
    (void)state;
    assert_int_equal(fl_secagg_seed_bytes(), FL_SECAGG_SEED_BYTES);
    assert_int_equal(fl_secagg_verify_key_bytes(), FL_SECAGG_VERIFY_KEY_BYTES);
    assert_int_equal(fl_secagg_signing_key_bytes(), FL_SECAGG_SIGNING_KEY_BYTES);
    assert_int_equal(fl_secagg_cert_bytes(), FL_SECAGG_CERT_BYTES);
    assert_int_equal(fl_secagg_header_bytes(), FL_SECAGG_HEADER_BYTES);
    assert_int_equal(fl_secagg_max_bits(), FL_SECAGG_MAX_BITS);
    assert_int_equal(fl_secagg_max_clients(), FL_SECAGG_MAX_CLIENTS);
    assert_int_equal(fl_secagg_max_dim(), FL_SECAGG_MAX_DIM);
    assert_int_equal(fl_secagg_max_edges(), FL_SECAGG_MAX_EDGES);
    assert_int_equal(fl_secagg_context_bytes(), FL_SECAGG_CONTEXT_BYTES);
    assert_int_equal(FL__SA_SHARE_CT_BYTES, 90);
    assert_int_equal(FL_SECAGG_SEED_BYTES, FL__SA_SEED_BYTES);
    assert_int_equal(FL_SECAGG_VERIFY_KEY_BYTES, FL__SA_ED25519_PK_BYTES);
    assert_int_equal(FL_SECAGG_SIGNING_KEY_BYTES, FL__SA_ED25519_SK_BYTES);
    assert_int_equal(FL_SECAGG_CERT_BYTES, FL__SA_ED25519_SIG_BYTES);
}

static void expect_misuse(fl_secagg_config c, const char *field) {
    char msg[256];
    fl_status st = fl_secagg_config_resolve(&c, msg, sizeof(msg));
    if (st != FL_ERR_MISUSE || !strstr(msg, field))
        fail_msg("field %s: %s (%s)", field, fl_status_name(st), msg);
}

static void test_config(void **state) {
    (void)state;
    fl_secagg_config c;
    fl_secagg_config_init(&c);
    fl_secagg_config_init(NULL);
    assert_int_equal(c.struct_size, sizeof(c));
    assert_int_equal(c.bits, 32);
    assert_int_equal(c.degree, 0);
    assert_true(c.adversarial_rate == 0.05 && c.dropout_rate == 0.05);
    expect_misuse(c, "num_clients");
    c.num_clients = 100;
    expect_misuse(c, "dim");
    c.dim = 10;
    fl_secagg_config ok = c;
    assert_int_equal(fl_secagg_config_resolve(&ok, NULL, 0), FL_OK);
    assert_int_equal(ok.degree, 12);
    assert_int_equal(ok.threshold, 6);
    fl_secagg_config b = c;
    b.bits = 33;
    expect_misuse(b, "bits");
    b = c;
    b.degree = 7;
    expect_misuse(b, "degree");
    b = c;
    b.degree = 100;
    expect_misuse(b, "degree");
    b = c;
    b.degree = 10;
    b.threshold = 11;
    expect_misuse(b, "threshold");
    b = c;
    b.degree = 10;
    b.threshold = 1;
    expect_misuse(b, "threshold");
    b = c;
    b.dropout_rate = -0.1;
    expect_misuse(b, "dropout_rate");
    b = c;
    b.adversarial_rate = 1.5;
    expect_misuse(b, "adversarial_rate");
    b = c;
    b.struct_size = 8;
    expect_misuse(b, "struct_size");
    b = c;
    b.active = 2;
    expect_misuse(b, "active");
    b = c;
    b.backend = (fl_secagg_backend)9;
    expect_misuse(b, "backend");
    b = c;
    b.num_clients = 3000;
    b.degree = 2999;
    expect_misuse(b, "degree"); /* n * k over the edge limit */
    /* k overridden, t derived. */
    b = c;
    b.degree = 20;
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_true(b.threshold >= 2 && b.threshold <= 20);
    b = c;
    b.degree = 99;
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_int_equal(b.threshold, 6); /* A + 1 with A = 5 */
    assert_true(fl_secagg_max_message_bytes(&ok) >= FL_SECAGG_HEADER_BYTES + 40);
    fl_secagg_config bad = c;
    bad.num_clients = 1;
    assert_int_equal(fl_secagg_max_message_bytes(&bad), 0);
    /* Creating handles with a bad config fails cleanly. */
    fl_secagg_server *s = (fl_secagg_server *)&bad;
    assert_int_equal(fl_secagg_server_create(&s, &bad, 1, NULL, NULL), FL_ERR_MISUSE);
    assert_null(s);
    fl_secagg_client *cl = (fl_secagg_client *)&bad;
    assert_int_equal(fl_secagg_client_create(&cl, &bad, 1, 0, NULL, NULL), FL_ERR_MISUSE);
    assert_null(cl);
    assert_int_equal(fl_secagg_client_create(&cl, &ok, 1, 100, NULL, NULL), FL_ERR_MISUSE);
    ok.active = 1;
    assert_int_equal(fl_secagg_client_create(&cl, &ok, 1, 0, NULL, NULL), FL_ERR_MISUSE);
    fl_secagg_server_destroy(NULL);
    fl_secagg_client_destroy(NULL);
}

/* A caller built against the header before `context` passes the older struct size: it is
 * accepted (all-zero context) and resolve writes back no more than that many bytes. */
static void test_config_old_size(void **state) {
    (void)state;
    union {
        fl_secagg_config c;
        uint8_t raw[sizeof(fl_secagg_config)];
    } u;
    fl_secagg_config_init(&u.c);
    u.c.num_clients = 100;
    u.c.dim = 10;
    size_t old = offsetof(fl_secagg_config, context);
    u.c.struct_size = old;
    memset(u.raw + old, 0xA5, sizeof(u.raw) - old); /* must be ignored and left alone */
    assert_int_equal(fl_secagg_config_resolve(&u.c, NULL, 0), FL_OK);
    assert_int_equal(u.c.struct_size, old);
    assert_int_equal(u.c.degree, 12);
    for (size_t i = old; i < sizeof(u.raw); i++)
        assert_int_equal(u.raw[i], 0xA5);
    fl_secagg_client *cl = NULL;
    assert_int_equal(fl_secagg_client_create(&cl, &u.c, 1, 0, NULL, NULL), FL_OK);
    fl_secagg_client_destroy(cl);
    u.c.struct_size = old + 1;
    assert_int_equal(fl_secagg_config_resolve(&u.c, NULL, 0), FL_ERR_MISUSE);
}

static void test_graph(void **state) {
    (void)state;
    const struct fl__sa_crypto *so = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    const struct fl__sa_crypto *mb = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    uint8_t seed[32] = {9};
    static const uint32_t ns[] = {5, 10, 101, 1000};
    static const uint32_t ks[] = {2, 4, 12, 30};
    for (size_t c = 0; c < 4; c++) {
        struct fl__sa_graph g, h;
        uint32_t n = ns[c], k = ks[c];
        assert_int_equal(fl__sa_graph_init(&g, n, k, seed, so, NULL), FL_OK);
        for (uint32_t u = 0; u < n; u++) {
            uint32_t deg = 0;
            for (uint32_t j = 0; j < k; j++) {
                uint32_t v = fl__sa_graph_neighbor(&g, u, j);
                assert_true(v < n && v != u);
                assert_int_equal(fl__sa_graph_slot(&g, u, v), (int32_t)j);
                assert_true(fl__sa_graph_slot(&g, v, u) >= 0); /* symmetric */
                assert_int_equal(fl__sa_graph_mirror_slot(&g, u, j, v),
                                 (uint32_t)fl__sa_graph_slot(&g, v, u));
                deg++;
            }
            assert_int_equal(deg, k);
            assert_int_equal(fl__sa_graph_slot(&g, u, u), -1);
        }
        /* Same seed, other backend: the same graph (permutation from the PRG bytes). */
        if (mb) {
            assert_int_equal(fl__sa_graph_init(&h, n, k, seed, mb, NULL), FL_OK);
            assert_memory_equal(g.perm, h.perm, n * sizeof(uint32_t));
            fl__sa_graph_free(&h, NULL);
        }
        /* Another seed: another permutation. */
        uint8_t seed2[32] = {10};
        assert_int_equal(fl__sa_graph_init(&h, n, k, seed2, so, NULL), FL_OK);
        if (n > 5)
            assert_memory_not_equal(g.perm, h.perm, n * sizeof(uint32_t));
        fl__sa_graph_free(&h, NULL);
        fl__sa_graph_free(&g, NULL);
    }
    /* Complete graph. */
    struct fl__sa_graph g;
    assert_int_equal(fl__sa_graph_init(&g, 6, 5, seed, so, NULL), FL_OK);
    for (uint32_t u = 0; u < 6; u++)
        for (uint32_t j = 0; j < 5; j++) {
            uint32_t v = fl__sa_graph_neighbor(&g, u, j);
            assert_int_equal(fl__sa_graph_slot(&g, u, v), (int32_t)j);
            assert_int_equal(fl__sa_graph_mirror_slot(&g, u, j, v),
                             (uint32_t)fl__sa_graph_slot(&g, v, u));
        }
    fl__sa_graph_free(&g, NULL);
}

static void test_peek(void **state) {
    (void)state;
    uint8_t m[FL_SECAGG_HEADER_BYTES + 4];
    fl__sa_put_header(m, FL_SECAGG_MSG_KEYS, 0x0102030405060708ull, 77, 4);
    fl_secagg_msg_type t;
    uint64_t r;
    uint32_t c;
    assert_int_equal(fl_secagg_message_peek(&t, &r, &c, m, sizeof(m)), FL_OK);
    assert_int_equal(t, FL_SECAGG_MSG_KEYS);
    assert_true(r == 0x0102030405060708ull);
    assert_int_equal(c, 77);
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, m, 5), FL_ERR_FORMAT);
    m[2] = 9;
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, m, sizeof(m)), FL_ERR_FORMAT);
    m[2] = FL__SA_VERSION;
    m[3] = 0;
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, m, sizeof(m)), FL_ERR_FORMAT);
}

static void test_quantization(void **state) {
    (void)state;
    fl_secagg_quant q;
    assert_int_equal(fl_secagg_headroom_bits(1), 0);
    assert_int_equal(fl_secagg_headroom_bits(2), 1);
    assert_int_equal(fl_secagg_headroom_bits(1000), 10);
    assert_int_equal(fl_secagg_headroom_bits(1024), 10);
    assert_int_equal(fl_secagg_quant_init(&q, 0.0f, 32, 10), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, 1.0f, 33, 10), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, 1.0f, 3, 10), FL_ERR_RANGE);
    assert_int_equal(fl_secagg_quant_init(&q, 1.0f, 16, 100), FL_OK);
    assert_int_equal(q.levels, 655);
    enum { D = 4000, N = 100 };
    float *in = malloc(D * sizeof(float)), *out = malloc(D * sizeof(float));
    uint32_t *qv = malloc(D * sizeof(uint32_t)), *sum = calloc(D, sizeof(uint32_t));
    double *exact = calloc(D, sizeof(double));
    uint64_t rs = 5;
    for (int c = 0; c < N; c++) {
        for (int j = 0; j < D; j++) {
            in[j] = (float)((double)(sa_rng_next(&rs) % 2001) / 1000.0 - 1.0) * 1.2f;
            double e = in[j] < -1 ? -1 : in[j] > 1 ? 1 : in[j];
            exact[j] += e;
        }
        assert_int_equal(fl_secagg_quantize(qv, in, D, &q, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
        for (int j = 0; j < D; j++) {
            assert_true(qv[j] <= q.levels);
            sum[j] += qv[j];
        }
    }
    for (int j = 0; j < D; j++)
        assert_true(sum[j] <= 0xFFFFu); /* no wrap in 16 bits */
    assert_int_equal(fl_secagg_dequantize_sum(out, sum, D, N, &q), FL_OK);
    /* Unbiased rounding: the mean error over all coordinates is tiny, each error is at
     * most N steps. */
    double step = 2.0 / q.levels, mean_err = 0;
    for (int j = 0; j < D; j++) {
        double e = out[j] - exact[j];
        assert_true(fabs(e) <= N * step + 1e-3);
        mean_err += e;
    }
    mean_err /= D;
    assert_true(fabs(mean_err) < 0.05);
    in[7] = NAN;
    assert_int_equal(fl_secagg_quantize(qv, in, D, &q, FL_SECAGG_BACKEND_DEFAULT), FL_ERR_RANGE);
    assert_int_equal(qv[0], 0);
    in[7] = INFINITY;
    assert_int_equal(fl_secagg_quantize(qv, in, D, &q, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
    assert_int_equal(qv[7], q.levels);
    assert_int_equal(fl_secagg_dequantize_sum(out, sum, D, N + 1, &q), FL_ERR_MISUSE);
    free(in), free(out), free(qv), free(sum), free(exact);
}

/* Both backends have Ed25519, so on every backend that is built keys, certificates and
 * active-mode configs work (sodium is always built); only a backend that is not built is
 * FL_ERR_UNSUPPORTED. */
static void test_identity_helpers(void **state) {
    (void)state;
    uint8_t vk[32], sk[64], cert[64], cert2[64];
    assert_int_equal(fl_secagg_signing_keygen(NULL, sk, FL_SECAGG_BACKEND_DEFAULT),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_signing_keygen(vk, sk, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
    assert_int_equal(fl_secagg_cert_issue(cert, sk, 3, vk, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
    const fl_secagg_backend backends[2] = {FL_SECAGG_BACKEND_SODIUM, FL_SECAGG_BACKEND_MBEDTLS};
    for (int i = 0; i < 2; i++) {
        fl_secagg_backend b = backends[i];
        int built = b == FL_SECAGG_BACKEND_SODIUM || fl_build_has("mbedtls");
        fl_status want = built ? FL_OK : FL_ERR_UNSUPPORTED;
        assert_int_equal(fl_secagg_signing_keygen(vk, sk, b), want);
        assert_int_equal(fl_secagg_cert_issue(cert2, sk, 3, vk, b), want);
        fl_secagg_config c;
        fl_secagg_config_init(&c);
        c.num_clients = 3;
        c.dim = 1;
        c.active = 1;
        c.backend = b;
        char msg[128] = "";
        assert_int_equal(fl_secagg_config_resolve(&c, msg, sizeof(msg)), want);
        if (!built)
            assert_non_null(strstr(msg, "config.backend"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derive_matches_reference),
        cmocka_unit_test(test_derive_edges),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_config_old_size),
        cmocka_unit_test(test_graph),
        cmocka_unit_test(test_peek),
        cmocka_unit_test(test_quantization),
        cmocka_unit_test(test_identity_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
