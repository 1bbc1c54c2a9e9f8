/* Active mode with v2 device certificates AND norm proofs in one round (docs/secagg.md
 * "Active mode", "Norm proofs"): the signed advertisements, the consistency phase and the
 * proofs carried by MASKED_INPUT compose. Exact sums at n = 5 (complete graph) and n = 10
 * (sparse), on each backend and mixed; dropouts after the shares, after the masked input and
 * after the signature; a client whose input is over the bound (a proof made for a looser
 * bound) has its masked input refused, signs nothing and the round completes with the
 * others; a client that masks a boosted vector under an honest proof fails the round at the
 * link check; a server lying about dropouts is caught by the consistency phase as without
 * proofs; the ticket path (fl_secagg_norm_check off the server's lock); the message limits
 * of the combination.
 *
 * Built twice (active_norm.cmake): on the normal secagg objects, and with
 * FL_TEST_EMBEDDED on the client SDK's embedded profile (mbedTLS only, no libsodium),
 * where norm proofs are not available: there the combination must be refused cleanly with
 * FL_ERR_UNSUPPORTED naming config.norm_bits, while active mode alone still resolves. */
#include "test_sa_harness.h"

#define N5 5
#define N10 10
#define D 6   /* coordinates; the first ND are bounded, the last is a weight */
#define M 8   /* bits per bounded coordinate */
#define ND 5
#define B2 2000u /* squared L2 bound: |z| <= 20 on 5 coordinates */

/* Fills the common config: active mode, device certificates, norm proofs. */
static void an_cfg(fl_secagg_config *cfg, uint32_t n, uint32_t k, uint32_t t) {
    cfg->num_clients = n;
    cfg->dim = D;
    cfg->degree = k;
    cfg->threshold = t;
    cfg->active = 1;
    cfg->device_certs = 1;
    cfg->norm_bits = M;
    cfg->norm_dim = ND;
    cfg->norm_bound2 = B2;
}

#if !defined(FL_TEST_EMBEDDED)

static uint32_t word(int64_t z) { return (uint32_t)z; } /* centred -> mod 2^32 */

/* Inputs with |z| <= 20 on the ND bounded coordinates (sum z^2 <= B2) and a weight of
 * 1..100 (in m bits, unbounded by the norm). */
static void honest_inputs(uint32_t *x, uint32_t n, uint64_t seed) {
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < ND; j++)
            x[i * D + j] = word((int64_t)(sa_rng_next(&seed) % 41) - 20);
        x[i * D + ND] = 1 + (uint32_t)(sa_rng_next(&seed) % 100);
    }
}

static void an_opts(struct sa_opts *o, uint32_t n, uint32_t k, uint32_t t, uint64_t seed) {
    sa_opts_init(o, n, D, k, t);
    an_cfg(&o->cfg, n, k, t);
    o->seed = seed;
}

/* Whether the mbedTLS backend is built (the normal objects carry both). */
static int have_mbedtls(void) {
    fl_secagg_config c;
    fl_secagg_config_init(&c);
    c.num_clients = 3;
    c.dim = 1;
    c.backend = FL_SECAGG_BACKEND_MBEDTLS;
    return fl_secagg_config_resolve(&c, NULL, 0) == FL_OK;
}

/* Backend pairs (clients, server): both sodium, both mbedTLS, and mixed both ways. */
static const fl_secagg_backend PAIRS[4][2] = {
    {FL_SECAGG_BACKEND_SODIUM, FL_SECAGG_BACKEND_SODIUM},
    {FL_SECAGG_BACKEND_MBEDTLS, FL_SECAGG_BACKEND_MBEDTLS},
    {FL_SECAGG_BACKEND_MBEDTLS, FL_SECAGG_BACKEND_SODIUM},
    {FL_SECAGG_BACKEND_SODIUM, FL_SECAGG_BACKEND_MBEDTLS},
};

static int npairs(void) {
    return have_mbedtls() ? 4 : 1;
}

/* ---- honest rounds ---- */

/* n = 5 on the complete graph and n = 10 on a sparse one (k = 6, t = 4), with and without
 * tickets, on every backend pair: every input in the sum, exactly. */
static void test_rounds_exact(void **state) {
    (void)state;
    static const uint32_t shape[2][3] = {{N5, N5 - 1, 0}, {N10, 6, 4}};
    for (int p = 0; p < npairs(); p++)
        for (int s = 0; s < 2; s++)
            for (int tickets = 0; tickets < 2; tickets++) {
                uint32_t n = shape[s][0];
                struct sa_opts o;
                an_opts(&o, n, shape[s][1], shape[s][2], 100 + (uint64_t)(p * 4 + s * 2 + tickets));
                o.client_backend = PAIRS[p][0];
                o.server_backend = PAIRS[p][1];
                o.use_tickets = tickets;
                uint32_t x[N10 * D];
                honest_inputs(x, n, 7 + (uint64_t)s);
                /* One client right at the bound and at the range limits. */
                x[0] = word(-20), x[1] = word(20), x[2] = word(20), x[3] = word(20);
                x[4] = word(20), x[5] = 127;
                o.inputs = x;
                struct sa_result r;
                sa_run(&o, &r);
                if (r.st != FL_OK)
                    fail_msg("pair %d n %u tickets %d: %s (%s)", p, n, tickets,
                             fl_status_name(r.st), r.errmsg);
                assert_int_equal(r.client_failures, 0);
                assert_true(r.sum_ok);
                assert_int_equal(r.count, n);
            }
}

/* Dropouts at every point after the shares: one never sends its masked input (it is not in
 * the sum; its masks are removed through its masking key), one sends it and never signs,
 * one signs and never unmasks (both in the sum: their self masks are rebuilt). */
static void test_dropouts(void **state) {
    (void)state;
    for (int p = 0; p < npairs(); p += 3) /* sodium, and sodium clients on mbedTLS */
        for (int tickets = 0; tickets < 2; tickets++) {
            struct sa_opts o;
            an_opts(&o, N10, 6, 4, 200 + (uint64_t)(p * 2 + tickets));
            o.client_backend = PAIRS[p][0];
            o.server_backend = PAIRS[p][1];
            o.use_tickets = tickets;
            uint32_t x[N10 * D];
            honest_inputs(x, N10, 11);
            uint8_t drop[N10] = {0};
            drop[1] = SA_DROP_MASKED;
            drop[4] = SA_DROP_CONSISTENCY;
            drop[8] = SA_DROP_UNMASK;
            o.inputs = x;
            o.drop = drop;
            struct sa_result r;
            sa_run(&o, &r);
            if (r.st != FL_OK)
                fail_msg("pair %d tickets %d: %s (%s)", p, tickets, fl_status_name(r.st),
                         r.errmsg);
            assert_int_equal(r.client_failures, 0);
            assert_true(r.sum_ok);
            assert_int_equal(r.count, N10 - 1);
            assert_int_equal(r.expect_count, N10 - 1);
        }
    /* A dropout after the advertisement, on the complete graph at n = 5. */
    struct sa_opts o;
    an_opts(&o, N5, N5 - 1, 3, 230);
    uint32_t x[N5 * D];
    honest_inputs(x, N5, 13);
    uint8_t drop[N5] = {0, 0, SA_DROP_SHARES, 0, 0};
    o.inputs = x;
    o.drop = drop;
    struct sa_result r;
    sa_run(&o, &r);
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, N5 - 1);
}

/* ---- a client over the bound ---- */

struct refuse {
    fl_secagg_config cfg; /* the server's config (its bound) */
    uint32_t victim;
    int hits;
    fl_status check; /* fl_secagg_norm_check of the victim's masked input */
    int consistency_to_victim; /* CONSISTENCY_REQ or UNMASK_REQ sent to the victim */
};

/* Watches the victim's MASKED_INPUT (checked here against the server's bound, as a
 * coordinator would off its lock) and any later server message to it. */
static void watch_victim(void *u, int to_server, uint32_t client, fl_secagg_msg_type t,
                         uint8_t *m, size_t *len, size_t cap) {
    struct refuse *v = u;
    (void)cap;
    if (client != v->victim)
        return;
    if (to_server && t == FL_SECAGG_MSG_MASKED_INPUT) {
        uint64_t rid = 0;
        for (int i = 0; i < 8; i++)
            rid |= (uint64_t)m[4 + i] << (8 * i);
        fl_secagg_norm_ticket tk;
        char em[200];
        v->check = fl_secagg_norm_check(&tk, &v->cfg, rid, client, m, *len, NULL, em, sizeof(em));
        assert_int_equal(tk.valid, 0u);
        v->hits++;
    }
    if (!to_server &&
        (t == FL_SECAGG_MSG_CONSISTENCY_REQ || t == FL_SECAGG_MSG_UNMASK_REQ))
        v->consistency_to_victim++;
}

/* Client 0 holds a x-boosted input and a proof made for a looser bound: (a) the same proof
 * size (bound2 2047, same bit length: the statement differs), (b) a 10^4 looser bound with 7
 * more bits per coordinate (a longer message than the round allows). Its masked input is
 * refused (the proof does not verify, or the message is over the limit), it is not in the
 * survivor set, is asked for no signature, and the round completes with the other four,
 * exactly, through the consistency phase. */
static void test_over_bound_refused(void **state) {
    (void)state;
    for (int variant = 0; variant < 2; variant++)
        for (int tickets = 0; tickets < 2; tickets++) {
            struct sa_opts o;
            an_opts(&o, N5, N5 - 1, 0, 300 + (uint64_t)(variant * 2 + tickets));
            /* The identities are made here: client 0's own config must pin the authority. */
            struct sa_identities I = {0};
            sa_make_device_identities(&I, N5, FL_SECAGG_BACKEND_SODIUM);
            o.ids = I.ids;
            o.ids_authority_vk = I.authority_vk;
            memcpy(o.cfg.verify_key, I.authority_vk, 32);
            fl_secagg_config loose = o.cfg;
            uint32_t x[N5 * D];
            honest_inputs(x, N5, 17);
            if (variant == 0) {
                loose.norm_bound2 = 2047;
                /* 4 * 400 + 21^2 = 2041: over B2, within 2047. */
                x[0] = word(20), x[1] = word(20), x[2] = word(-20), x[3] = word(20);
                x[4] = word(21);
            } else {
                loose.norm_bits = M + 7;
                loose.norm_bound2 = (uint64_t)B2 * 10000;
                for (uint32_t j = 0; j < ND; j++) /* a x100 boost of an honest update */
                    x[j] = word((int64_t)(int32_t)x[j] * 100);
            }
            o.client_cfg = &loose;
            o.use_tickets = tickets;
            o.inputs = x;
            struct refuse v = {.victim = 0};
            v.cfg = o.cfg;
            o.tamper = watch_victim;
            o.tamper_user = &v;
            struct sa_result r;
            sa_run(&o, &r);
            assert_int_equal(v.hits, 1);
            if (variant == 0)
                assert_int_equal(v.check, FL_ERR_CRYPTO);
            else
                assert_int_equal(v.check, FL_ERR_TOO_LARGE);
            assert_int_equal(v.consistency_to_victim, 0);
            if (r.st != FL_OK)
                fail_msg("variant %d tickets %d: %s (%s)", variant, tickets,
                         fl_status_name(r.st), r.errmsg);
            assert_int_equal(r.client_failures, 0);
            assert_true(r.sum_ok); /* the sum of the other four */
            assert_int_equal(r.count, N5 - 1);
            assert_int_equal(r.expect_count, N5 - 1);
            free(I.ids);
        }
    /* The honest prover refuses such an input under the round's own bound. */
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    an_cfg(&cfg, N5, N5 - 1, 0);
    struct sa_identities I = {0};
    sa_make_device_identities(&I, N5, FL_SECAGG_BACKEND_SODIUM);
    memcpy(cfg.verify_key, I.authority_vk, 32);
    fl_secagg_client *c = NULL;
    assert_int_equal(fl_secagg_client_create(&c, &cfg, 1, 0, &I.ids[0], NULL), FL_OK);
    uint32_t y[D] = {word(20), word(20), word(-20), word(20), word(21), 1};
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_ERR_RANGE);
    y[4] = word(20);
    assert_int_equal(fl_secagg_client_set_input(c, y, D), FL_OK);
    fl_secagg_client_destroy(c);
    free(I.ids);
}

/* Client 0 proves its honest input and masks a boosted one: every proof verifies, every
 * survivor signs the same set, and the server's link check after unmasking fails the round
 * (no sum). */
struct boost {
    uint32_t victim;
    int hits;
};

static void boost_masked(void *u, int to_server, uint32_t client, fl_secagg_msg_type t,
                         uint8_t *m, size_t *len, size_t cap) {
    struct boost *b = u;
    (void)len, (void)cap;
    if (!to_server || t != FL_SECAGG_MSG_MASKED_INPUT || client != b->victim)
        return;
    uint8_t *w = m + FL_SECAGG_HEADER_BYTES; /* +100 on the first (masked) coordinate */
    uint32_t v = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 |
                 (uint32_t)w[3] << 24;
    v += 100;
    for (int i = 0; i < 4; i++)
        w[i] = (uint8_t)(v >> (8 * i));
    b->hits++;
}

static void test_masked_boost_fails_round(void **state) {
    (void)state;
    struct sa_opts o;
    an_opts(&o, N5, N5 - 1, 0, 400);
    uint32_t x[N5 * D];
    honest_inputs(x, N5, 19);
    o.inputs = x;
    struct boost b = {0, 0};
    o.tamper = boost_masked;
    o.tamper_user = &b;
    struct sa_result r;
    sa_run(&o, &r);
    assert_int_equal(b.hits, 1);
    assert_int_equal(r.client_failures, 0);
    assert_int_equal(r.st, FL_ERR_PROTOCOL);
    assert_int_equal(r.failed_at, FL_SECAGG_PHASE_UNMASK);
    assert_non_null(strstr(r.errmsg, "not the sum of the proven inputs"));
}

/* ---- a server lying about dropouts ---- */

/* The victim refuses to unmask (mode 0: the set differs from the one it signed; mode 2: a
 * forwarded signature does not verify over its set), or its signature over the forged set
 * does not verify at the server (mode 1); the honest part of the round still sums exactly,
 * with every proof checked. */
static void test_lying_server_caught(void **state) {
    (void)state;
    for (int p = 0; p < npairs(); p += 3)
        for (int mode = 0; mode < 3; mode++) {
            struct sa_opts o;
            struct sa_result r;
            struct sa_lie l = {0, 1, mode, 0};
            an_opts(&o, 6, 5, 3, 500 + (uint64_t)(p * 3 + mode));
            o.client_backend = PAIRS[p][0];
            o.server_backend = PAIRS[p][1];
            uint32_t x[6 * D];
            honest_inputs(x, 6, 23);
            o.inputs = x;
            o.use_tickets = mode == 1;
            o.tamper = sa_lie_about_dropout;
            o.tamper_user = &l;
            sa_run(&o, &r);
            sa_check_lie_caught(&l, &r, 6);
        }
}

/* ---- tickets and limits ---- */

/* fl_secagg_norm_check with the active config: a ticket for a real masked input is valid
 * and accepted by fl_secagg_server_receive_checked; a ticket for another client, another
 * round or other bytes is not trusted (the proof is checked again, or the message refused
 * by its header). Driven step by step, with the consistency phase after. */
static void test_ticket_path(void **state) {
    (void)state;
    const uint32_t n = N5;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    an_cfg(&cfg, n, n - 1, 0);
    struct sa_identities I = {0};
    sa_make_device_identities(&I, n, FL_SECAGG_BACKEND_SODIUM);
    memcpy(cfg.verify_key, I.authority_vk, 32);
    assert_int_equal(fl_secagg_config_resolve(&cfg, NULL, 0), FL_OK);
    const uint64_t rid = 0x5A5A0001;
    uint8_t gseed[32] = {7};
    fl_secagg_server *srv = NULL;
    fl_secagg_client *cl[N5] = {0};
    assert_int_equal(fl_secagg_server_create(&srv, &cfg, rid, gseed, NULL), FL_OK);
    uint32_t x[N5 * D];
    honest_inputs(x, n, 29);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *m;
        size_t ml;
        assert_int_equal(fl_secagg_client_create(&cl[i], &cfg, rid, i, &I.ids[i], NULL), FL_OK);
        assert_int_equal(fl_secagg_client_set_input(cl[i], x + i * D, D), FL_OK);
        assert_int_equal(fl_secagg_client_start(cl[i], &m, &ml), FL_OK);
        assert_int_equal(fl_secagg_server_receive(srv, i, m, ml), FL_OK);
    }
    /* KEYS -> SHARES, CIPHERTEXTS -> MASKED_INPUT. */
    uint8_t *masked[N5] = {0};
    size_t masked_len[N5] = {0};
    for (int step = 0; step < 2; step++) {
        assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            assert_int_equal(fl_secagg_server_outgoing(srv, i, &m, &ml), FL_OK);
            assert_int_equal(fl_secagg_client_handle(cl[i], m, ml, &r, &rl), FL_OK);
            if (step == 0) {
                assert_int_equal(fl_secagg_server_receive(srv, i, r, rl), FL_OK);
            } else {
                masked[i] = malloc(rl);
                assert_non_null(masked[i]);
                memcpy(masked[i], r, rl);
                masked_len[i] = rl;
            }
        }
    }
    assert_true(masked_len[0] <= fl_secagg_max_message_bytes(&cfg));
    fl_secagg_norm_ticket tk[N5];
    char em[200];
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(fl_secagg_norm_check(&tk[i], &cfg, rid, i, masked[i], masked_len[i],
                                              NULL, em, sizeof(em)),
                         FL_OK);
        assert_int_equal(tk[i].valid, 1u);
    }
    /* Client 0's message checked as client 1's, or for another round: refused. */
    fl_secagg_norm_ticket bad;
    assert_int_equal(fl_secagg_norm_check(&bad, &cfg, rid, 1, masked[0], masked_len[0], NULL,
                                          em, sizeof(em)),
                     FL_ERR_PROTOCOL); /* the header names client 0 */
    assert_int_equal(fl_secagg_norm_check(&bad, &cfg, rid + 1, 0, masked[0], masked_len[0], NULL,
                                          em, sizeof(em)),
                     FL_ERR_STATE);
    /* Client 1's ticket handed with client 0's message: not trusted, the proof is checked
     * again (and holds). Client 2's message altered in a proof byte, with its ticket: the
     * digest no longer matches, the proof is checked and refused; the honest bytes follow. */
    assert_int_equal(fl_secagg_server_receive_checked(srv, 0, masked[0], masked_len[0], &tk[1]),
                     FL_OK);
    masked[2][masked_len[2] - 40] ^= 0x10;
    fl_status st = fl_secagg_server_receive_checked(srv, 2, masked[2], masked_len[2], &tk[2]);
    assert_true(st == FL_ERR_CRYPTO || st == FL_ERR_FORMAT);
    masked[2][masked_len[2] - 40] ^= 0x10;
    for (uint32_t i = 1; i < n; i++)
        assert_int_equal(
            fl_secagg_server_receive_checked(srv, i, masked[i], masked_len[i], &tk[i]), FL_OK);
    /* CONSISTENCY_REQ -> CONSISTENCY_SIG, UNMASK_REQ -> UNMASK_SHARES. */
    for (int step = 0; step < 2; step++) {
        assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
        assert_int_equal(fl_secagg_server_phase(srv),
                         step == 0 ? FL_SECAGG_PHASE_CONSISTENCY : FL_SECAGG_PHASE_UNMASK);
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            assert_int_equal(fl_secagg_server_outgoing(srv, i, &m, &ml), FL_OK);
            assert_int_equal(fl_secagg_client_handle(cl[i], m, ml, &r, &rl), FL_OK);
            assert_int_equal(fl_secagg_server_receive(srv, i, r, rl), FL_OK);
        }
    }
    assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
    const uint32_t *sum;
    size_t dim;
    uint32_t count;
    assert_int_equal(fl_secagg_server_result(srv, &sum, &dim, &count), FL_OK);
    assert_int_equal(count, n);
    assert_int_equal(dim, D);
    for (uint32_t j = 0; j < D; j++) {
        uint32_t e = 0;
        for (uint32_t i = 0; i < n; i++)
            e += x[i * D + j];
        assert_int_equal(sum[j], e);
    }
    for (uint32_t i = 0; i < n; i++) {
        fl_secagg_client_destroy(cl[i]);
        free(masked[i]);
    }
    fl_secagg_server_destroy(srv);
    free(I.ids);
}

/* fl_secagg_max_message_bytes of the combination is the larger of its parts' (active mode
 * grows ADVERTISE, KEYS and UNMASK_REQ; norm proofs grow MASKED_INPUT), for a small and a
 * large neighbourhood. */
static void test_limits(void **state) {
    (void)state;
    static const uint32_t shape[2][2] = {{N5, N5 - 1}, {1000, 40}};
    for (int s = 0; s < 2; s++) {
        fl_secagg_config both, act, norm;
        fl_secagg_config_init(&both);
        an_cfg(&both, shape[s][0], shape[s][1], 0);
        act = both;
        act.norm_bits = 0, act.norm_dim = 0, act.norm_bound2 = 0;
        norm = both;
        norm.active = 0, norm.device_certs = 0;
        size_t lb = fl_secagg_max_message_bytes(&both);
        size_t la = fl_secagg_max_message_bytes(&act), ln = fl_secagg_max_message_bytes(&norm);
        assert_true(la > 0 && ln > 0);
        assert_int_equal(lb, la > ln ? la : ln);
    }
}

#else /* FL_TEST_EMBEDDED */

/* The embedded profile (mbedTLS only) has no norm proofs: the combination is refused at
 * resolve, at create and by the ticket check with FL_ERR_UNSUPPORTED and a message naming
 * config.norm_bits; active mode with device certificates alone works there. */
static void test_embedded_refuses(void **state) {
    (void)state;
    uint8_t avk[32], ask[64];
    assert_int_equal(fl_secagg_signing_keygen(avk, ask, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
    fl_secagg_identity id;
    memset(&id, 0, sizeof(id));
    id.struct_size = sizeof(id);
    uint8_t vk[32];
    for (int j = 0; j < FL_SECAGG_DEVICE_ID_BYTES; j++)
        id.device_id[j] = (uint8_t)(j + 1);
    assert_int_equal(fl_secagg_signing_keygen(vk, id.signing_key, FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
    assert_int_equal(
        fl_secagg_cert_issue_device(id.cert, ask, id.device_id, vk, FL_SECAGG_BACKEND_DEFAULT),
        FL_OK);
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    an_cfg(&cfg, N5, N5 - 1, 0);
    memcpy(cfg.verify_key, avk, 32);
    fl_secagg_config c = cfg;
    char em[200];
    assert_int_equal(fl_secagg_config_resolve(&c, em, sizeof(em)), FL_ERR_UNSUPPORTED);
    assert_non_null(strstr(em, "config.norm_bits"));
    assert_int_equal(fl_secagg_max_message_bytes(&cfg), 0);
    fl_secagg_client *cl = NULL;
    assert_int_equal(fl_secagg_client_create(&cl, &cfg, 1, 0, &id, NULL), FL_ERR_UNSUPPORTED);
    assert_null(cl);
    uint8_t gseed[32] = {0};
    fl_secagg_server *srv = NULL;
    assert_int_equal(fl_secagg_server_create(&srv, &cfg, 1, gseed, NULL), FL_ERR_UNSUPPORTED);
    assert_null(srv);
    fl_secagg_norm_ticket tk;
    uint8_t msg[64] = {0};
    assert_int_equal(
        fl_secagg_norm_check(&tk, &cfg, 1, 0, msg, sizeof(msg), NULL, em, sizeof(em)),
        FL_ERR_UNSUPPORTED);
    assert_int_equal(tk.valid, 0u);
    /* Without the proofs the same active config resolves and a client starts. */
    cfg.norm_bits = 0, cfg.norm_dim = 0, cfg.norm_bound2 = 0;
    c = cfg;
    assert_int_equal(fl_secagg_config_resolve(&c, em, sizeof(em)), FL_OK);
    assert_int_equal(fl_secagg_client_create(&cl, &cfg, 1, 0, &id, NULL), FL_OK);
    const uint8_t *m;
    size_t ml;
    assert_int_equal(fl_secagg_client_start(cl, &m, &ml), FL_OK);
    fl_secagg_client_destroy(cl);
}

#endif

int main(void) {
    const struct CMUnitTest tests[] = {
#if !defined(FL_TEST_EMBEDDED)
        cmocka_unit_test(test_rounds_exact),
        cmocka_unit_test(test_dropouts),
        cmocka_unit_test(test_over_bound_refused),
        cmocka_unit_test(test_masked_boost_fails_round),
        cmocka_unit_test(test_lying_server_caught),
        cmocka_unit_test(test_ticket_path),
        cmocka_unit_test(test_limits),
#else
        cmocka_unit_test(test_embedded_refuses),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
