/* Norm proofs: honest rounds verify and sum exactly; a client cannot prove an input over
 * the bound; a forged or altered proof is refused (the client counts as dropped); a client
 * that masks another vector than the one it proved fails the round at the link check. */

#include "test_sa_harness.h"

#include "../../secagg/src/secagg_internal.h"

#define N 5
#define D 6
#define M 8
#define ND 5
#define B2 2000u

static uint32_t word(int64_t z) { return (uint32_t)z; } /* centred -> mod 2^32 */

/* Inputs with |z| < 2^(M-1) and sum_{j<ND} z^2 <= B2; the last one stands for a weight. */
static void honest_inputs(uint32_t *x, uint32_t n, uint64_t seed) {
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < ND; j++) {
            int64_t z = (int64_t)(sa_rng_next(&seed) % 41) - 20; /* |z| <= 20: 5*400 = B2 */
            x[i * D + j] = word(z);
        }
        x[i * D + ND] = 1 + (uint32_t)(sa_rng_next(&seed) % 100);
    }
}

/* The config of the single-proof tests: N clients, D inputs, the first ND bounded. */
static void norm_cfg(fl_secagg_config *cfg) {
    fl_secagg_config_init(cfg);
    cfg->num_clients = N;
    cfg->dim = D;
    cfg->norm_bits = M;
    cfg->norm_dim = ND;
    cfg->norm_bound2 = B2;
}

static void norm_opts(struct sa_opts *o, uint32_t n) {
    sa_opts_init(o, n, D, n - 1, 0);
    o->cfg.norm_bits = M;
    o->cfg.norm_dim = ND;
    o->cfg.norm_bound2 = B2;
}

static void test_honest_round(void **state) {
    (void)state;
    for (int tickets = 0; tickets < 2; tickets++) {
        struct sa_opts o;
        norm_opts(&o, N);
        uint32_t x[N * D];
        honest_inputs(x, N, 7 + (uint64_t)tickets);
        /* One client right at the bound and the range limits. */
        x[0] = word(-20), x[1] = word(20), x[2] = word(20), x[3] = word(20), x[4] = word(20);
        x[5] = 127;
        o.inputs = x;
        o.use_tickets = tickets;
        struct sa_result r;
        sa_run(&o, &r);
        assert_int_equal(r.st, FL_OK);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, N);
    }
}

/* A weight coordinate proven to lie in [1, tail_max]. */
static void test_tail_range(void **state) {
    (void)state;
    struct sa_opts o;
    norm_opts(&o, N);
    o.cfg.norm_tail_max = 100;
    uint32_t x[N * D];
    honest_inputs(x, N, 17);
    x[ND] = 1;
    x[D + ND] = 100;
    o.inputs = x;
    struct sa_result r;
    sa_run(&o, &r);
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, N);
    /* The prover refuses a weight outside the range. */
    fl_secagg_client *c = NULL;
    assert_int_equal(fl_secagg_client_create(&c, &o.cfg, 1, 0, NULL, NULL), FL_OK);
    uint32_t y[D] = {word(1), word(2), word(3), word(4), word(5), 0};
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_ERR_RANGE);
    y[ND] = 101;
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_ERR_RANGE);
    y[ND] = word(-5);
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_ERR_RANGE);
    y[ND] = 100;
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_OK);
    fl_secagg_client_destroy(c);
}

/* A ticket made under another config (a looser weight range with the same proof size) is
 * not trusted: the server checks the proof itself and refuses it. */
static void test_ticket_other_config(void **state) {
    (void)state;
    struct sa_opts o;
    norm_opts(&o, N);
    o.cfg.norm_tail_max = 100;
    fl_secagg_config loose = o.cfg;
    loose.norm_tail_max = 120; /* 7 bits per side either way */
    uint32_t x[N * D];
    honest_inputs(x, N, 23);
    x[ND] = 110;
    o.inputs = x;
    o.use_tickets = 1;
    o.client_cfg = &loose;
    o.ticket_cfg = &loose;
    struct sa_result r;
    sa_run(&o, &r);
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, N - 1); /* client 0's masked input was refused */
}

static void test_sparse_with_dropouts(void **state) {
    (void)state;
    const uint32_t n = 10;
    struct sa_opts o;
    norm_opts(&o, n);
    o.cfg.degree = 6;
    o.cfg.threshold = 4;
    uint32_t x[10 * D];
    honest_inputs(x, n, 11);
    uint8_t drop[10] = {0};
    drop[1] = SA_DROP_MASKED; /* never sends its input (nor its proof) */
    drop[4] = SA_DROP_UNMASK; /* sends both, then vanishes */
    o.inputs = x;
    o.drop = drop;
    struct sa_result r;
    sa_run(&o, &r);
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, n - 1);
}

/* An honest client's device refuses to prove what it may not send. */
static void test_prover_refuses(void **state) {
    (void)state;
    fl_secagg_config cfg;
    norm_cfg(&cfg);
    fl_secagg_client *c = NULL;
    assert_int_equal(fl_secagg_client_create(&c, &cfg, 1, 0, NULL, NULL), FL_OK);
    uint32_t x[D] = {word(20), word(20), word(20), word(20), word(21), 1};
    assert_int_equal(fl_secagg_client_set_input(c, x, D), FL_ERR_RANGE); /* 2041 > B2 */
    assert_non_null(strstr(fl_secagg_client_errmsg(c), "exceeds the bound"));
    x[4] = word(20);
    x[5] = 128; /* the unbounded coordinate must still fit in m bits */
    assert_int_equal(fl_secagg_client_set_input(c, x, D), FL_ERR_RANGE);
    x[5] = word(-128);
    assert_int_equal(fl_secagg_client_set_input(c, x, D), FL_OK);
    /* A x100 boost of an honest input. */
    uint32_t y[D] = {word(2), word(-3), word(1), word(0), word(4), 1};
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_OK);
    for (int j = 0; j < ND; j++)
        y[j] = word((int32_t)y[j] * 100);
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_ERR_RANGE);
    fl_secagg_client_destroy(c);
}

/* Config validation. */
static void test_config(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = 1000;
    cfg.dim = 10;
    char em[200];
    cfg.norm_bits = 23; /* 32 - ceil(log2 1000) = 22 */
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_ERR_MISUSE);
    assert_non_null(strstr(em, "norm_bits"));
    cfg.norm_bits = 22;
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_OK);
    cfg.norm_bits = 1;
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_ERR_MISUSE);
    cfg.norm_bits = 8;
    cfg.norm_dim = 11;
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_ERR_MISUSE);
    assert_non_null(strstr(em, "norm_dim"));
    cfg.norm_bits = 0;
    cfg.norm_dim = 3;
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_ERR_MISUSE);
    cfg.norm_dim = 0;
    cfg.norm_bits = 16;
    cfg.dim = 70000; /* 70000 * 16 proven bits is over the limit */
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_ERR_MISUSE);
    /* tail_max * n must stay below 2^(b-1). */
    cfg.dim = 10;
    cfg.norm_tail_max = 2147484; /* x 1000 clients > 2^31 */
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_ERR_MISUSE);
    assert_non_null(strstr(em, "norm_tail_max"));
    cfg.norm_tail_max = 2147483;
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_OK);
    cfg.norm_tail_max = 0;
    /* The message limit grows by the limbs and the proof. */
    cfg.dim = 10;
    size_t with = fl_secagg_max_message_bytes(&cfg);
    cfg.norm_bits = 0;
    size_t without = fl_secagg_max_message_bytes(&cfg);
    assert_true(with > without + 10 * 16 * 96);
    /* The pre-0.3 struct size still works and means no proofs. */
    cfg.struct_size = offsetof(fl_secagg_config, norm_bits);
    assert_int_equal(fl_secagg_config_resolve(&cfg, em, sizeof(em)), FL_OK);
}

/* ---- the proof itself, through the internal prover ---- */

struct pf {
    fl_secagg_config cfg;
    uint8_t *proof;
    size_t len;
    uint32_t limbs[64];
};

static void make_proof(struct pf *p, const fl_secagg_config *cfg, const uint32_t *x) {
    p->cfg = *cfg;
    assert_int_equal(fl_secagg_config_resolve(&p->cfg, NULL, 0), FL_OK);
    p->len = fl__sa_norm_proof_bytes(&p->cfg);
    p->proof = malloc(p->len);
    assert_non_null(p->proof);
    assert_true(fl__sa_norm_limbs(&p->cfg) <= 64);
    assert_int_equal(fl__sa_norm_prove(p->proof, p->limbs, &p->cfg, 9, 2, x, NULL, NULL), FL_OK);
}

static fl_status verify(const struct pf *p, const fl_secagg_config *cfg, uint64_t rid,
                        uint32_t idx, const uint8_t *proof) {
    fl_secagg_config c = *cfg;
    assert_int_equal(fl_secagg_config_resolve(&c, NULL, 0), FL_OK);
    return fl__sa_norm_verify(&c, rid, idx, proof, p->len, NULL, NULL);
}

static void test_proof_tamper(void **state) {
    (void)state;
    fl_secagg_config cfg;
    norm_cfg(&cfg);
    uint32_t x[D] = {word(-7), word(3), word(0), word(19), word(-1), 40};
    struct pf p;
    make_proof(&p, &cfg, x);
    assert_int_equal(verify(&p, &cfg, 9, 2, p.proof), FL_OK);
    /* Bound to the round, the client and every public parameter. */
    assert_int_equal(verify(&p, &cfg, 10, 2, p.proof), FL_ERR_CRYPTO);
    assert_int_equal(verify(&p, &cfg, 9, 3, p.proof), FL_ERR_CRYPTO);
    fl_secagg_config other = cfg;
    other.norm_dim = ND - 1;
    assert_int_equal(verify(&p, &other, 9, 2, p.proof), FL_ERR_CRYPTO);
    /* A proof with a weight range for another tail_max. */
    fl_secagg_config tail = cfg;
    tail.norm_tail_max = 64;
    struct pf pt;
    make_proof(&pt, &tail, x);
    assert_int_equal(verify(&pt, &tail, 9, 2, pt.proof), FL_OK);
    tail.norm_tail_max = 40; /* same proof size, another statement */
    assert_int_equal(verify(&pt, &tail, 9, 2, pt.proof), FL_ERR_CRYPTO);
    free(pt.proof);
    /* A flipped bit anywhere is refused: at parse (encodings) or at verification. */
    uint8_t *t = malloc(p.len);
    assert_non_null(t);
    size_t step = p.len / 97 + 1;
    for (size_t i = 0; i < p.len; i += step) {
        memcpy(t, p.proof, p.len);
        t[i] ^= 0x01;
        fl_status st = verify(&p, &cfg, 9, 2, t);
        assert_true(st == FL_ERR_CRYPTO || st == FL_ERR_FORMAT);
    }
    /* A scalar that is not reduced (e + l encodes the same value) is a format error. */
    memcpy(t, p.proof, p.len);
    size_t off_e = 2 * 32 + ((size_t)D * M + 11) * 32; /* K = 11 bits for 2000 */
    static const uint8_t L[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58,
                                  0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
                                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10};
    unsigned carry = 0;
    for (int i = 0; i < 32; i++) {
        unsigned s = t[off_e + i] + L[i] + carry;
        t[off_e + i] = (uint8_t)s;
        carry = s >> 8;
    }
    assert_int_equal(verify(&p, &cfg, 9, 2, t), FL_ERR_FORMAT);
    /* Wrong length. */
    assert_int_equal(fl__sa_norm_verify(&p.cfg, 9, 2, p.proof, p.len - 1, NULL, NULL),
                     FL_ERR_FORMAT);
    free(t);
    free(p.proof);
}

/* A x100 client that forges its proof with a 10^4-times looser bound: the server, which
 * checks against its own bound, refuses it. */
static void test_looser_bound_refused(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = N;
    cfg.dim = D;
    cfg.norm_bits = 16;
    cfg.norm_dim = ND;
    cfg.norm_bound2 = B2;
    fl_secagg_config loose = cfg;
    loose.norm_bound2 = (uint64_t)B2 * 10000;
    uint32_t x[D] = {word(-700), word(300), word(0), word(1900), word(-100), 1};
    struct pf p;
    make_proof(&p, &loose, x);
    assert_int_equal(verify(&p, &loose, 9, 2, p.proof), FL_OK);
    /* Same proof size only if K matches; the bound changes the statement either way. */
    if (fl__sa_norm_proof_bytes(&p.cfg) == p.len) {
        fl_secagg_config c = cfg;
        assert_int_equal(fl_secagg_config_resolve(&c, NULL, 0), FL_OK);
        fl_status st = fl__sa_norm_verify(&c, 9, 2, p.proof, p.len, NULL, NULL);
        assert_true(st == FL_ERR_CRYPTO || st == FL_ERR_FORMAT);
    } else {
        fl_secagg_config c = cfg;
        assert_int_equal(fl_secagg_config_resolve(&c, NULL, 0), FL_OK);
        assert_int_equal(fl__sa_norm_verify(&c, 9, 2, p.proof, p.len, NULL, NULL),
                         FL_ERR_FORMAT);
    }
    free(p.proof);
}

/* ---- rounds with a misbehaving client ---- */

struct tamper_ctx {
    uint32_t victim;
    int where; /* 0: a proof byte, 1: a masked word, 2: a limb word */
    int hits;
    size_t limbs;
};

static size_t limbs_of(const fl_secagg_config *cfg) {
    fl_secagg_config c = *cfg;
    assert_int_equal(fl_secagg_config_resolve(&c, NULL, 0), FL_OK);
    return fl__sa_norm_limbs(&c);
}

static void tamper_masked(void *user, int to_server, uint32_t client, fl_secagg_msg_type type,
                          uint8_t *msg, size_t *len, size_t cap) {
    (void)cap;
    struct tamper_ctx *t = user;
    if (!to_server || type != FL_SECAGG_MSG_MASKED_INPUT || client != t->victim)
        return;
    size_t words_end = FL_SECAGG_HEADER_BYTES + (D + t->limbs) * 4;
    assert_true(*len > words_end);
    if (t->where == 0)
        msg[words_end + 100] ^= 0x40;
    else if (t->where == 1) /* +100 on the first input: a boosted update, masked */
        fl__put_u32le(msg + FL_SECAGG_HEADER_BYTES,
                      fl__get_u32le(msg + FL_SECAGG_HEADER_BYTES) + 100);
    else
        fl__put_u32le(msg + FL_SECAGG_HEADER_BYTES + D * 4,
                      fl__get_u32le(msg + FL_SECAGG_HEADER_BYTES + D * 4) + 1);
    t->hits++;
}

static void test_bad_proof_drops_client(void **state) {
    (void)state;
    for (int tickets = 0; tickets < 2; tickets++) {
        struct sa_opts o;
        norm_opts(&o, N);
        uint32_t x[N * D];
        honest_inputs(x, N, 21);
        struct tamper_ctx t = {.victim = 3, .where = 0, .limbs = limbs_of(&o.cfg)};
        o.inputs = x;
        o.tamper = tamper_masked;
        o.tamper_user = &t;
        o.use_tickets = tickets;
        struct sa_result r;
        sa_run(&o, &r);
        assert_int_equal(t.hits, 1);
        assert_int_equal(r.st, FL_OK);
        assert_true(r.sum_ok); /* the sum of the other four */
        assert_int_equal(r.count, N - 1);
    }
}

static void test_inconsistent_masked_input_fails_round(void **state) {
    (void)state;
    for (int where = 1; where <= 2; where++) {
        struct sa_opts o;
        norm_opts(&o, N);
        uint32_t x[N * D];
        honest_inputs(x, N, 31);
        struct tamper_ctx t = {.victim = 0, .where = where, .limbs = limbs_of(&o.cfg)};
        o.inputs = x;
        o.tamper = tamper_masked;
        o.tamper_user = &t;
        o.use_tickets = where == 2;
        struct sa_result r;
        sa_run(&o, &r);
        assert_int_equal(t.hits, 1);
        assert_int_equal(r.st, FL_ERR_PROTOCOL);
        assert_int_equal(r.failed_at, FL_SECAGG_PHASE_UNMASK);
        assert_non_null(strstr(r.errmsg, "not the sum of the proven inputs"));
    }
}

/* The link check cut into parts (as the server's mask jobs compute it) equals the whole. */
static void test_link_parts(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = N;
    cfg.dim = 40;
    cfg.norm_bits = M;
    assert_int_equal(fl_secagg_config_resolve(&cfg, NULL, 0), FL_OK);
    size_t vl = fl__sa_vec_len(&cfg);
    uint32_t sum[64];
    uint64_t seed = 5;
    for (size_t j = 0; j < vl; j++)
        sum[j] = (uint32_t)sa_rng_next(&seed);
    uint8_t whole[32], a[32], b[32], c[32], acc[32] = {0};
    assert_int_equal(fl__sa_norm_link_part(whole, &cfg, sum, 0, vl), 0);
    assert_int_equal(fl__sa_norm_link_part(a, &cfg, sum, 0, 16), 0);
    assert_int_equal(fl__sa_norm_link_part(b, &cfg, sum, 16, 32), 0);
    assert_int_equal(fl__sa_norm_link_part(c, &cfg, sum, 32, vl), 0); /* limbs ignored */
    assert_int_equal(fl__sa_norm_fold(acc, a), 0);
    assert_int_equal(fl__sa_norm_fold(acc, b), 0);
    assert_int_equal(fl__sa_norm_fold(acc, c), 0);
    assert_memory_equal(acc, whole, 32);
    /* And the check accepts exactly the commitment sum it should. */
    uint8_t vsum[32];
    memcpy(vsum, whole, 32);
    fl_status st = fl__sa_norm_link_check(&cfg, sum, whole, vsum, NULL);
    /* vsum lacks H^R, so it fails unless R = 0 mod l. */
    assert_int_equal(st, FL_ERR_PROTOCOL);
    for (size_t k = cfg.dim; k < vl; k++)
        sum[k] = 0; /* R = 0 */
    assert_int_equal(fl__sa_norm_link_check(&cfg, sum, whole, vsum, NULL), FL_OK);
}

/* The ticket API: checked off the server, and a ticket for other bytes is not trusted. */
static void test_ticket(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = N;
    cfg.dim = D;
    fl_secagg_norm_ticket tk;
    char em[200];
    uint8_t msg[64] = {0};
    assert_int_equal(fl_secagg_norm_check(&tk, &cfg, 1, 0, msg, sizeof(msg), NULL, em, sizeof(em)),
                     FL_ERR_MISUSE); /* no norm proofs in this config */
    assert_int_equal(tk.valid, 0u);
    assert_int_equal(fl_secagg_norm_check(NULL, &cfg, 1, 0, msg, sizeof(msg), NULL, NULL, 0),
                     FL_ERR_MISUSE);
    cfg.norm_bits = M;
    assert_int_equal(fl_secagg_norm_check(&tk, &cfg, 1, 0, msg, sizeof(msg), NULL, em, sizeof(em)),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_secagg_norm_check(&tk, &cfg, 1, 9, msg, sizeof(msg), NULL, em, sizeof(em)),
                     FL_ERR_PROTOCOL);
    assert_int_equal(fl_secagg_server_receive_checked(NULL, 0, msg, 1, &tk), FL_ERR_MISUSE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honest_round),
        cmocka_unit_test(test_tail_range),
        cmocka_unit_test(test_ticket_other_config),
        cmocka_unit_test(test_sparse_with_dropouts),
        cmocka_unit_test(test_prover_refuses),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_proof_tamper),
        cmocka_unit_test(test_looser_bound_refused),
        cmocka_unit_test(test_bad_proof_drops_client),
        cmocka_unit_test(test_inconsistent_masked_input_fails_round),
        cmocka_unit_test(test_link_parts),
        cmocka_unit_test(test_ticket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
