/* Bad arguments to every public secagg entry point (NULL handles and outputs, bad
 * allocators, out-of-range fields, unknown backends) get the documented fl_status and,
 * where the call has a handle or an errmsg buffer, a message naming the problem; and the
 * wire helpers behind the parsers (header checks, bounded readers, output buffers, size
 * limits) honour their contracts at the edges. */
#include <math.h>

#include "sa_rig.h"

static void *never_alloc(void *u, size_t n) {
    (void)u;
    (void)n;
    return NULL;
}
static void never_free(void *u, void *p, size_t n) {
    (void)u;
    (void)p;
    (void)n;
}

static fl_secagg_config small_cfg(void) {
    fl_secagg_config c;
    fl_secagg_config_init(&c);
    c.num_clients = 4;
    c.dim = 3;
    c.degree = 3;
    c.threshold = 2;
    c.backend = FL_SECAGG_BACKEND_SODIUM;
    return c;
}

/* ---- client ---- */

static void test_client_args(void **state) {
    (void)state;
    fl_secagg_config c = small_cfg();
    fl_secagg_client *cl = (fl_secagg_client *)&c;
    assert_int_equal(fl_secagg_client_create(NULL, &c, 1, 0, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_create(&cl, NULL, 1, 0, NULL, NULL), FL_ERR_MISUSE);
    assert_null(cl);
    /* An allocator must be complete and of a known size. */
    fl_allocator half = {sizeof(fl_allocator), never_alloc, NULL, NULL, NULL};
    fl_allocator old = {4, never_alloc, NULL, never_free, NULL};
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, NULL, &half), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, NULL, &old), FL_ERR_MISUSE);
    /* One that has no memory at all. */
    fl_allocator none = {sizeof(fl_allocator), never_alloc, NULL, never_free, NULL};
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, NULL, &none), FL_ERR_NOMEM);
    assert_null(cl);
    /* Active mode needs an identity of the current layout. */
    c.active = 1;
    fl_secagg_identity id;
    memset(&id, 0, sizeof(id));
    id.struct_size = sizeof(id) - 1;
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, &id, NULL), FL_ERR_MISUSE);
    id.struct_size = sizeof(id);
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, &id, NULL), FL_OK);
    fl_secagg_client_destroy(cl);
    /* NULL handles. */
    const uint8_t *o;
    size_t ol;
    uint32_t x[3] = {1, 2, 3};
    assert_int_equal(fl_secagg_client_phase(NULL), FL_SECAGG_PHASE_FAILED);
    assert_string_equal(fl_secagg_client_errmsg(NULL), "NULL client");
    assert_int_equal(fl_secagg_client_set_input(NULL, x, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_start(NULL, &o, &ol), FL_ERR_MISUSE);
    c.active = 0;
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 3, NULL, NULL), FL_OK);
    assert_int_equal(fl_secagg_client_start(cl, NULL, &ol), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_start(cl, &o, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_phase(cl), FL_SECAGG_PHASE_ADVERTISE); /* unchanged */
    assert_int_equal(fl_secagg_client_start(cl, &o, &ol), FL_OK);
    assert_int_equal(ol, FL_SECAGG_HEADER_BYTES + 64);
    fl_secagg_msg_type t;
    uint64_t rid;
    uint32_t who;
    assert_int_equal(fl_secagg_message_peek(&t, &rid, &who, o, ol), FL_OK);
    assert_int_equal(t, FL_SECAGG_MSG_ADVERTISE);
    assert_true(rid == 1);
    assert_int_equal(who, 3);
    fl_secagg_client_destroy(cl);
}

/* ---- server ---- */

static void test_server_args(void **state) {
    (void)state;
    fl_secagg_config c = small_cfg();
    fl_secagg_server *s = (fl_secagg_server *)&c;
    assert_int_equal(fl_secagg_server_create(NULL, &c, 1, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_create(&s, NULL, 1, NULL, NULL), FL_ERR_MISUSE);
    assert_null(s);
    fl_allocator half = {sizeof(fl_allocator), NULL, NULL, never_free, NULL};
    assert_int_equal(fl_secagg_server_create(&s, &c, 1, NULL, &half), FL_ERR_MISUSE);
    fl_allocator none = {sizeof(fl_allocator), never_alloc, NULL, never_free, NULL};
    assert_int_equal(fl_secagg_server_create(&s, &c, 1, NULL, &none), FL_ERR_NOMEM);
    assert_null(s);
    /* NULL handle: harmless answers. */
    uint32_t k = 77, th = 77, count = 5;
    const uint8_t *m;
    size_t ml, dim = 9;
    const uint32_t *sum;
    assert_int_equal(fl_secagg_server_phase(NULL), FL_SECAGG_PHASE_FAILED);
    assert_int_equal(fl_secagg_server_pending(NULL), 0);
    assert_string_equal(fl_secagg_server_errmsg(NULL), "NULL server");
    fl_secagg_server_params(NULL, &k, &th);
    assert_int_equal(k, 77);
    assert_int_equal(th, 77);
    assert_int_equal(fl_secagg_server_advance(NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_outgoing(NULL, 0, &m, &ml), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_result(NULL, &sum, &dim, &count), FL_ERR_MISUSE);
    /* A live server: parameters, and outgoing() argument checks. */
    uint8_t seed[32] = {1};
    assert_int_equal(fl_secagg_server_create(&s, &c, 1, seed, NULL), FL_OK);
    fl_secagg_server_params(s, &k, &th);
    assert_int_equal(k, 3);
    assert_int_equal(th, 2);
    fl_secagg_server_params(s, NULL, NULL);
    assert_int_equal(fl_secagg_server_pending(s), 4);
    assert_int_equal(fl_secagg_server_outgoing(s, 0, NULL, &ml), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_outgoing(s, 0, &m, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_outgoing(s, 4, &m, &ml), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_result(s, &sum, &dim, &count), FL_ERR_STATE);
    assert_int_equal(dim, 9); /* untouched on failure */
    /* Too few advertisements: the first advance aborts, stickily, saying how many. */
    assert_int_equal(fl_secagg_server_advance(s), FL_ERR_ABORTED);
    assert_non_null(strstr(fl_secagg_server_errmsg(s), "after advertise keys: 0, need at least 2"));
    assert_int_equal(fl_secagg_server_phase(s), FL_SECAGG_PHASE_FAILED);
    assert_int_equal(fl_secagg_server_advance(s), FL_ERR_ABORTED);
    uint8_t msg[FL_SECAGG_HEADER_BYTES + 64] = {0};
    assert_int_equal(fl_secagg_server_receive(s, 0, msg, sizeof(msg)), FL_ERR_ABORTED);
    fl_secagg_server_destroy(s);
}

/* The result with any output omitted (each may be NULL). */
static void test_server_result_outputs(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 4, 2, 3, 2, 32, 0);
    rig_start(&R);
    for (int ph = 0; ph < 3; ph++) {
        rig_send_all(&R, 0);
        rig_step(&R, RIG_ALL);
    }
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    const uint32_t *sum = NULL;
    size_t dim = 0;
    uint32_t count = 0;
    assert_int_equal(fl_secagg_server_result(R.srv, NULL, NULL, NULL), FL_OK);
    assert_int_equal(fl_secagg_server_result(R.srv, &sum, NULL, NULL), FL_OK);
    assert_non_null(sum);
    assert_int_equal(fl_secagg_server_result(R.srv, NULL, &dim, NULL), FL_OK);
    assert_int_equal(dim, 2);
    assert_int_equal(fl_secagg_server_result(R.srv, NULL, NULL, &count), FL_OK);
    assert_int_equal(count, 4);
    rig_check_sum(&R, 0x0F);
    rig_free(&R);
}

/* ---- configuration ---- */

static void expect_field(fl_secagg_config c, fl_status want, const char *field) {
    char msg[256];
    memset(msg, 'x', sizeof(msg));
    fl_status st = fl_secagg_config_resolve(&c, msg, sizeof(msg));
    if (st != want || !strstr(msg, field))
        fail_msg("%s: want %s, got %s (%s)", field, fl_status_name(want), fl_status_name(st),
                 msg);
}

static void test_config_fields(void **state) {
    (void)state;
    char msg[64];
    assert_int_equal(fl_secagg_config_resolve(NULL, msg, sizeof(msg)), FL_ERR_MISUSE);
    assert_string_equal(msg, "config: NULL");
    assert_int_equal(fl_secagg_max_message_bytes(NULL), 0);
    /* errmsg_len 0: nothing is written. */
    fl_secagg_config c;
    fl_secagg_config_init(&c);
    memset(msg, 'q', sizeof(msg));
    assert_int_equal(fl_secagg_config_resolve(&c, msg, 0), FL_ERR_MISUSE);
    assert_int_equal(msg[0], 'q');
    /* Success clears the message. */
    c = small_cfg();
    assert_int_equal(fl_secagg_config_resolve(&c, msg, sizeof(msg)), FL_OK);
    assert_string_equal(msg, "");
    /* Each range, at both ends. */
    fl_secagg_config b = small_cfg();
    b.num_clients = 2;
    expect_field(b, FL_ERR_MISUSE, "config.num_clients: 2 not in 3..65536");
    b.num_clients = FL_SECAGG_MAX_CLIENTS + 1;
    expect_field(b, FL_ERR_MISUSE, "config.num_clients");
    b = small_cfg();
    b.dim = 0;
    expect_field(b, FL_ERR_MISUSE, "config.dim");
    b.dim = FL_SECAGG_MAX_DIM + 1;
    expect_field(b, FL_ERR_MISUSE, "config.dim");
    b = small_cfg();
    b.bits = 0;
    expect_field(b, FL_ERR_MISUSE, "config.bits: 0");
    b = small_cfg();
    b.adversarial_rate = NAN;
    expect_field(b, FL_ERR_MISUSE, "config.adversarial_rate");
    b = small_cfg();
    b.dropout_rate = 1.0;
    expect_field(b, FL_ERR_MISUSE, "config.dropout_rate");
    b = small_cfg();
    b.degree = 0;
    b.dropout_rate = 0.9; /* no threshold survives 90% dropouts */
    expect_field(b, FL_ERR_MISUSE, "config.degree: no (k, t) satisfies the rates for n = 4");
    b = small_cfg();
    b.degree = 1;
    expect_field(b, FL_ERR_MISUSE, "config.degree: 1");
    b = small_cfg();
    b.num_clients = 10;
    b.degree = 0;
    b.threshold = 0;
    b.active = 1;
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_true(b.threshold >= 2 && b.threshold <= b.degree);
    /* degree derived, threshold kept as given. */
    b = small_cfg();
    b.num_clients = 100;
    b.degree = 0;
    b.threshold = 4;
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_int_equal(b.degree, 12);
    assert_int_equal(b.threshold, 4);
    /* Complete graph given, threshold derived above k: clamped to k. */
    b = small_cfg();
    b.num_clients = 3;
    b.degree = 2;
    b.threshold = 0;
    b.adversarial_rate = 0.7; /* A = 2: t = A + 1 = 3 > k */
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_int_equal(b.threshold, 2);
    /* Sparse k given, threshold derived: the security bound alone, at least 2; in active
     * mode the semi-malicious bound 2t > k + corrupt neighbours. */
    uint32_t k, t;
    b = small_cfg();
    b.num_clients = 10;
    b.degree = 4;
    b.threshold = 0;
    b.adversarial_rate = 0.0;
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_int_equal(b.threshold, 2);
    b = small_cfg();
    b.num_clients = 100;
    b.degree = 20;
    b.threshold = 0;
    b.active = 1;
    assert_int_equal(fl_secagg_config_resolve(&b, NULL, 0), FL_OK);
    assert_true(2 * b.threshold > b.degree && b.threshold <= b.degree);
    /* No adversary and no dropouts: the smallest graph, t = 2. */
    assert_int_equal(fl_secagg_params_derive(&k, &t, 100, 0.0, 0.0, 0), FL_OK);
    assert_true(k >= 2 && k % 2 == 0 && k < 99);
    assert_int_equal(t, 2);
    /* Derivation arguments. */
    assert_int_equal(fl_secagg_params_derive(&k, NULL, 100, 0.05, 0.05, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_params_derive(&k, &t, 1000001, 0.05, 0.05, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_params_derive(&k, &t, 100, -0.01, 0.05, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_params_derive(&k, &t, 100, 0.05, INFINITY, 0), FL_ERR_MISUSE);
    /* Size limits per type; an unknown type has none. */
    c = small_cfg();
    assert_int_equal(fl_secagg_config_resolve(&c, NULL, 0), FL_OK);
    assert_int_equal(fl__sa_msg_limit(&c, FL_SECAGG_MSG_ADVERTISE), FL_SECAGG_HEADER_BYTES + 64);
    assert_int_equal(fl__sa_msg_limit(&c, FL_SECAGG_MSG_CONSISTENCY_SIG),
                     FL_SECAGG_HEADER_BYTES + 64);
    assert_int_equal(fl__sa_msg_limit(&c, (fl_secagg_msg_type)0), 0);
    assert_int_equal(fl__sa_msg_limit(&c, (fl_secagg_msg_type)10), 0);
    size_t best = 0;
    for (int ty = 1; ty <= 9; ty++)
        if (fl__sa_msg_limit(&c, (fl_secagg_msg_type)ty) > best)
            best = fl__sa_msg_limit(&c, (fl_secagg_msg_type)ty);
    assert_int_equal(fl_secagg_max_message_bytes(&c), best);
}

/* ---- identities ---- */

static void test_identity_args(void **state) {
    (void)state;
    uint8_t vk[32], sk[64], cert[64];
    const fl_secagg_backend nope = (fl_secagg_backend)99;
    assert_null(fl__sa_backend(nope));
    assert_int_equal(fl_secagg_signing_keygen(vk, NULL, FL_SECAGG_BACKEND_SODIUM), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_signing_keygen(vk, sk, nope), FL_ERR_UNSUPPORTED);
    assert_int_equal(fl_secagg_signing_keygen(vk, sk, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    assert_int_equal(fl_secagg_cert_issue(NULL, sk, 1, vk, FL_SECAGG_BACKEND_SODIUM),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue(cert, NULL, 1, vk, FL_SECAGG_BACKEND_SODIUM),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue(cert, sk, 1, NULL, FL_SECAGG_BACKEND_SODIUM),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue(cert, sk, 1, vk, nope), FL_ERR_UNSUPPORTED);
    /* The certificate verifies over the documented statement, and only for that index. */
    assert_int_equal(fl_secagg_cert_issue(cert, sk, 1, vk, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    uint8_t stmt[64];
    size_t sl = fl__sa_cert_statement(stmt, sizeof(stmt), 1, vk);
    assert_int_equal(sl, 23 + 4 + 32);
    assert_int_equal(cr->ed25519_verify(cert, stmt, sl, vk), 0);
    sl = fl__sa_cert_statement(stmt, sizeof(stmt), 2, vk);
    assert_int_equal(cr->ed25519_verify(cert, stmt, sl, vk), -1);
    /* Statement builders refuse a buffer that is too small. */
    assert_int_equal(fl__sa_cert_statement(stmt, 58, 1, vk), 0);
    uint8_t big[FL__SA_STMT_BYTES], ctx[FL_SECAGG_CONTEXT_BYTES];
    memset(ctx, 3, sizeof(ctx));
    assert_int_equal(fl__sa_adv_statement(big, sizeof(big), 1, 2, vk, vk, NULL), 22 + 76);
    assert_int_equal(fl__sa_adv_statement(big, sizeof(big), 1, 2, vk, vk, ctx), 22 + 76 + 32);
    assert_int_equal(fl__sa_adv_statement(big, 22 + 76, 1, 2, vk, vk, ctx), 0);
    assert_int_equal(fl__sa_adv_statement(big, 22 + 75, 1, 2, vk, vk, NULL), 0);
}

/* ---- quantization ---- */

static void test_quant_args(void **state) {
    (void)state;
    fl_secagg_quant q;
    assert_int_equal(fl_secagg_headroom_bits(0), 0);
    assert_int_equal(fl_secagg_headroom_bits(3), 2);
    assert_int_equal(fl_secagg_headroom_bits(UINT32_MAX), 32);
    assert_int_equal(fl_secagg_quant_init(NULL, 1.0f, 16, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, NAN, 16, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, INFINITY, 16, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, -1.0f, 16, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, 1.0f, 0, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, 1.0f, 16, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quant_init(&q, 1.0f, 32, 1), FL_OK);
    assert_int_equal(q.levels, UINT32_MAX);
    assert_int_equal(fl_secagg_quant_init(&q, 2.0f, 8, 5), FL_OK);
    assert_int_equal(q.levels, 51);
    float in[3] = {-2.0f, 0.0f, 2.0f}, outf[3];
    uint32_t out[3] = {7, 7, 7};
    /* Buffers: NULL only with dim 0. */
    assert_int_equal(fl_secagg_quantize(NULL, in, 3, &q, FL_SECAGG_BACKEND_SODIUM), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quantize(out, NULL, 3, &q, FL_SECAGG_BACKEND_SODIUM), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quantize(NULL, NULL, 0, &q, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    assert_int_equal(fl_secagg_quantize(out, in, 3, NULL, FL_SECAGG_BACKEND_SODIUM), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_quantize(out, in, 3, &q, (fl_secagg_backend)99),
                     FL_ERR_UNSUPPORTED);
    /* A quantizer whose fields were not made by quant_init is refused. */
    fl_secagg_quant bad[7];
    for (int i = 0; i < 7; i++)
        bad[i] = q;
    bad[0].clip = NAN;
    bad[1].clip = 0.0f;
    bad[2].bits = 0;
    bad[3].bits = 33;
    bad[4].max_summands = 0;
    bad[5].levels = 0;
    bad[6].levels = 52; /* 52 * 5 > 255: the sum could wrap */
    for (int i = 0; i < 7; i++) {
        assert_int_equal(fl_secagg_quantize(out, in, 3, &bad[i], FL_SECAGG_BACKEND_SODIUM),
                         FL_ERR_MISUSE);
        assert_int_equal(fl_secagg_dequantize_sum(outf, out, 3, 1, &bad[i]), FL_ERR_MISUSE);
    }
    assert_int_equal(out[0], 7); /* untouched by refused calls */
    /* The ends of the range map exactly to 0 and levels. */
    assert_int_equal(fl_secagg_quantize(out, in, 3, &q, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[2], 51);
    assert_true(out[1] == 25 || out[1] == 26);
    assert_int_equal(fl_secagg_dequantize_sum(NULL, out, 3, 1, &q), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_dequantize_sum(outf, NULL, 3, 1, &q), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_dequantize_sum(NULL, NULL, 0, 1, &q), FL_OK);
    assert_int_equal(fl_secagg_dequantize_sum(outf, out, 3, 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_dequantize_sum(outf, out, 3, 6, &q), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_dequantize_sum(outf, out, 3, 1, &q), FL_OK);
    assert_true(fabsf(outf[0] + 2.0f) < 1e-5f && fabsf(outf[2] - 2.0f) < 1e-5f);
}

/* ---- wire helpers ---- */

static void test_wire_helpers(void **state) {
    (void)state;
    /* peek: NULL and bad headers. */
    uint8_t m[FL_SECAGG_HEADER_BYTES + 8];
    fl__sa_put_header(m, FL_SECAGG_MSG_SHARES, 42, 7, 8);
    memset(m + FL_SECAGG_HEADER_BYTES, 0, 8);
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, NULL, sizeof(m)), FL_ERR_FORMAT);
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, m, sizeof(m)), FL_OK);
    m[1] ^= 1;
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, m, sizeof(m)), FL_ERR_FORMAT);
    m[1] ^= 1;
    m[3] = 10;
    assert_int_equal(fl_secagg_message_peek(NULL, NULL, NULL, m, sizeof(m)), FL_ERR_FORMAT);
    m[3] = FL_SECAGG_MSG_SHARES;
    /* open_msg: each header check in its documented order, and "any client". */
    struct fl__sa_reader r;
    struct fl__err err;
    fl__err_clear(&err);
    assert_int_equal(fl__sa_open_msg(&r, &err, NULL, 0, FL_SECAGG_MSG_SHARES, 42, 7, 100),
                     FL_ERR_MISUSE);
    assert_int_equal(fl__sa_open_msg(&r, &err, m, sizeof(m), FL_SECAGG_MSG_SHARES, 42, UINT32_MAX,
                                     100),
                     FL_OK);
    assert_int_equal(r.left, 8);
    assert_int_equal(fl__sa_open_msg(&r, &err, m, sizeof(m), FL_SECAGG_MSG_SHARES, 42, 8, 100),
                     FL_ERR_PROTOCOL);
    assert_int_equal(fl__sa_open_msg(&r, &err, m, sizeof(m), FL_SECAGG_MSG_SHARES, 42, 7,
                                     sizeof(m) - 1),
                     FL_ERR_TOO_LARGE);
    m[2] = 2;
    assert_int_equal(fl__sa_open_msg(&r, &err, m, sizeof(m), FL_SECAGG_MSG_SHARES, 42, 7, 100),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(fl__err_msg(&err), "unsupported version 2"));
    m[2] = FL__SA_VERSION;
    m[0] = 0;
    assert_int_equal(fl__sa_open_msg(&r, &err, m, sizeof(m), FL_SECAGG_MSG_SHARES, 42, 7, 100),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(fl__err_msg(&err), "bad magic"));
    /* Bounded readers stop at the end and consume nothing then. */
    uint8_t body[5] = {1, 2, 3, 4, 5};
    struct fl__sa_reader rd = {body, 5};
    uint32_t v32;
    uint8_t v8;
    const uint8_t *p;
    assert_int_equal(fl__sa_read_u32(&rd, &v32), 0);
    assert_int_equal(v32, 0x04030201u);
    assert_int_equal(fl__sa_read_u32(&rd, &v32), -1);
    assert_int_equal(fl__sa_read_bytes(&rd, &p, 2), -1);
    assert_int_equal(rd.left, 1);
    assert_int_equal(fl__sa_read_u8(&rd, &v8), 0);
    assert_int_equal(v8, 5);
    assert_int_equal(fl__sa_read_u8(&rd, &v8), -1);
    assert_int_equal(fl__sa_read_bytes(&rd, &p, 0), 0);
    /* Output buffers: reuse when it fits; a much larger old buffer is replaced, down to one
     * byte for a zero-byte reservation; free is idempotent. */
    struct fl__sa_buf b = {0};
    assert_int_equal(fl__sa_buf_reserve(&b, NULL, 0), 0);
    assert_null(b.p);
    assert_int_equal(fl__sa_buf_reserve(&b, NULL, 200000), 0);
    assert_int_equal(fl__sa_buf_reserve(&b, NULL, 0), 0);
    assert_non_null(b.p);
    assert_int_equal(b.cap, 1);
    assert_int_equal(fl__sa_buf_reserve(&b, NULL, 200000), 0);
    uint8_t *keep = b.p;
    assert_int_equal(fl__sa_buf_reserve(&b, NULL, 100000), 0);
    assert_ptr_equal(b.p, keep);
    assert_int_equal(fl__sa_buf_reserve(&b, NULL, 1000), 0);
    assert_int_equal(b.cap, 1000);
    struct fl_test_counting cnt = {0};
    cnt.fail_at = 1;
    fl_allocator fa = fl_test_counting_allocator(&cnt);
    keep = b.p;
    assert_int_equal(fl__sa_buf_reserve(&b, &fa, 5000), -1);
    assert_ptr_equal(b.p, keep); /* the old buffer is kept */
    fl__sa_buf_free(&b, NULL);
    assert_null(b.p);
    fl__sa_buf_free(&b, NULL);
    fl__sa_buf_free(NULL, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_args),     cmocka_unit_test(test_server_args),
        cmocka_unit_test(test_server_result_outputs), cmocka_unit_test(test_config_fields),
        cmocka_unit_test(test_identity_args),   cmocka_unit_test(test_quant_args),
        cmocka_unit_test(test_wire_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
