/* Tampering, replay, reordering, a lying server, and cross-backend interoperation. */
#include "test_sa_harness.h"

#define H FL_SECAGG_HEADER_BYTES

/* ---- tampered ciphertexts ---- */

struct tamper_ct {
    uint32_t victim;
    int hits;
};

static void flip_ct_to_victim(void *u, int to_server, uint32_t client, fl_secagg_msg_type t,
                              uint8_t *m, size_t *len, size_t cap) {
    struct tamper_ct *tc = u;
    (void)cap;
    if (!to_server && t == FL_SECAGG_MSG_CIPHERTEXTS && client == tc->victim && *len > H + 40) {
        m[H + 4 + 4 + 20] ^= 0x01; /* inside the first ciphertext */
        tc->hits++;
    }
}

static void test_tampered_share_ciphertext(void **state) {
    (void)state;
    struct sa_opts o;
    struct sa_result r;
    struct tamper_ct tc = {0, 0};
    sa_opts_init(&o, 5, 20, 4, 3);
    o.tamper = flip_ct_to_victim;
    o.tamper_user = &tc;
    sa_run(&o, &r);
    assert_int_equal(tc.hits, 1);
    /* The victim opens its shares on arrival and fails on the bad tag before its masked
     * input exists (it is not in the sum); the others carry the round. */
    assert_int_equal(r.client_failures, 1);
    assert_int_equal(r.client_fail_code, FL_ERR_CRYPTO);
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, 4);
}

/* ---- contexts (server equivocation) ----
 * Each client binds its context (in the coordinator: a hash of the session and of the
 * model it verified) into its share encryption and pairwise keys. A server that gives
 * some clients another model cannot make them aggregate together: every client with a
 * neighbour of the other context fails before sending its masked input. */

static void set_ctx(uint8_t ctx[FL_SECAGG_CONTEXT_BYTES], uint8_t v) {
    memset(ctx, 0, FL_SECAGG_CONTEXT_BYTES);
    ctx[0] = v;
    ctx[31] = (uint8_t)(v * 7 + 1);
}

/* Same non-zero context everywhere: a normal round, with dropouts, on both backends. */
static void test_context_same_round_ok(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++) {
        struct sa_opts o;
        struct sa_result r;
        uint8_t drop[6] = {0, SA_DROP_MASKED, 0, 0, SA_DROP_UNMASK, 0};
        sa_opts_init(&o, 6, 33, 5, 3);
        set_ctx(o.cfg.context, 9);
        o.drop = drop;
        if (b) {
            o.client_backend = FL_SECAGG_BACKEND_MBEDTLS; /* server on sodium: cross-backend */
            fl_secagg_config probe = o.cfg;
            probe.backend = FL_SECAGG_BACKEND_MBEDTLS;
            if (fl_secagg_config_resolve(&probe, NULL, 0) == FL_ERR_UNSUPPORTED)
                continue; /* mbedTLS backend not built */
        }
        sa_run(&o, &r);
        assert_int_equal(r.st, FL_OK);
        assert_int_equal(r.client_failures, 0);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, 5);
    }
}

/* Two contexts in one round (complete graph): every client has a neighbour of the other
 * context, so every client fails (FL_ERR_CRYPTO) before its masked input exists, and the
 * server aborts with too few masked inputs: nothing is summed. */
static void test_context_split_aborts(void **state) {
    (void)state;
    enum { N = 6 };
    struct sa_opts o;
    struct sa_result r;
    uint8_t ctx[N][FL_SECAGG_CONTEXT_BYTES];
    for (int i = 0; i < N; i++)
        set_ctx(ctx[i], i < 2 ? 2 : 1); /* clients 0 and 1 were given another model */
    sa_opts_init(&o, N, 16, N - 1, 3);
    set_ctx(o.cfg.context, 1);
    o.client_context = (const uint8_t(*)[FL_SECAGG_CONTEXT_BYTES])ctx;
    sa_run(&o, &r);
    assert_int_equal(r.client_failures, N);
    assert_int_equal(r.client_fail_code, FL_ERR_CRYPTO);
    assert_int_equal(r.st, FL_ERR_ABORTED);
    assert_int_equal(r.failed_at, FL_SECAGG_PHASE_MASKED_INPUT);
    /* A zero context on one side and a context on the other do not mix either. */
    memset(ctx[0], 0, FL_SECAGG_CONTEXT_BYTES);
    memset(ctx[1], 0, FL_SECAGG_CONTEXT_BYTES);
    sa_run(&o, &r);
    assert_int_equal(r.client_failures, N);
    assert_int_equal(r.st, FL_ERR_ABORTED);
}

/* Active mode: the context is also in the signed advertisement, so the server (holding the
 * honest context) already refuses the advertisement of a client on another model. */
static void test_context_active_advertisement(void **state) {
    (void)state;
    enum { N = 5 };
    uint8_t ctx[N][FL_SECAGG_CONTEXT_BYTES];
    for (int i = 0; i < N; i++)
        set_ctx(ctx[i], i == 3 ? 4 : 3);
    struct sa_opts o;
    struct sa_result r;
    sa_opts_init(&o, N, 8, N - 1, 4);
    o.cfg.active = 1;
    set_ctx(o.cfg.context, 3);
    o.client_context = (const uint8_t(*)[FL_SECAGG_CONTEXT_BYTES])ctx;
    sa_run(&o, &r);
    /* Client 3 never got into U1: the others complete without it. */
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, N - 1);
}

/* A holder sends garbage shares: reconstruction does not match the commitment or the
 * advertised key, the server fails with FL_ERR_PROTOCOL (sticky). */
static void corrupt_unmask_shares(void *u, int to_server, uint32_t client, fl_secagg_msg_type t,
                                  uint8_t *m, size_t *len, size_t cap) {
    (void)u;
    (void)cap;
    if (to_server && t == FL_SECAGG_MSG_UNMASK_SHARES && client == 1) {
        uint32_t cnt = m[H] | (uint32_t)m[H + 1] << 8;
        for (uint32_t i = 0; i < cnt; i++)
            m[H + 4 + i * 38 + 5 + 32] ^= 0x5A; /* last byte of each y */
        (void)len;
    }
}

static void test_bad_shares_detected(void **state) {
    (void)state;
    struct sa_opts o;
    struct sa_result r;
    sa_opts_init(&o, 4, 8, 3, 4); /* t = k + 1 holders: every share is used */
    o.cfg.threshold = 3;
    o.tamper = corrupt_unmask_shares;
    sa_run(&o, &r);
    assert_int_equal(r.st, FL_ERR_PROTOCOL);
    assert_non_null(strstr(r.errmsg, "does not"));
}

/* ---- replayed, reordered, misaddressed messages (manual stepping) ---- */

static void test_replay_and_reorder(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = 3;
    cfg.dim = 4;
    cfg.degree = 2;
    cfg.threshold = 2;
    const uint64_t rid = 77;
    fl_secagg_server *srv;
    fl_secagg_client *c[3];
    uint8_t *adv[3];
    size_t advl[3];
    assert_int_equal(fl_secagg_server_create(&srv, &cfg, rid, NULL, NULL), FL_OK);
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t x[4] = {i, i + 1, i + 2, i + 3};
        const uint8_t *m;
        assert_int_equal(fl_secagg_client_create(&c[i], &cfg, rid, i, NULL, NULL), FL_OK);
        assert_int_equal(fl_secagg_client_set_input(c[i], x, 4), FL_OK);
        assert_int_equal(fl_secagg_client_start(c[i], &m, &advl[i]), FL_OK);
        adv[i] = malloc(advl[i]);
        memcpy(adv[i], m, advl[i]);
        assert_int_equal(fl_secagg_client_start(c[i], &m, &advl[i]), FL_ERR_STATE);
    }
    /* Sender spoofing: client 1's advertisement delivered as client 0's. */
    assert_int_equal(fl_secagg_server_receive(srv, 0, adv[1], advl[1]), FL_ERR_PROTOCOL);
    assert_int_equal(fl_secagg_server_receive(srv, 0, adv[0], advl[0]), FL_OK);
    /* Duplicate in the same phase. */
    assert_int_equal(fl_secagg_server_receive(srv, 0, adv[0], advl[0]), FL_ERR_EXISTS);
    assert_non_null(strstr(fl_secagg_server_errmsg(srv), "duplicate"));
    /* Wrong round id. */
    uint8_t *bad = malloc(advl[1]);
    memcpy(bad, adv[1], advl[1]);
    bad[4] ^= 1;
    assert_int_equal(fl_secagg_server_receive(srv, 1, bad, advl[1]), FL_ERR_STATE);
    assert_non_null(strstr(fl_secagg_server_errmsg(srv), "round"));
    /* Truncated and oversized. */
    assert_int_equal(fl_secagg_server_receive(srv, 1, adv[1], advl[1] - 1), FL_ERR_FORMAT);
    assert_int_equal(fl_secagg_server_receive(srv, 1, adv[1], 10), FL_ERR_FORMAT);
    free(bad);
    assert_int_equal(fl_secagg_server_receive(srv, 1, adv[1], advl[1]), FL_OK);
    assert_int_equal(fl_secagg_server_pending(srv), 1);
    assert_int_equal(fl_secagg_server_receive(srv, 2, adv[2], advl[2]), FL_OK);
    assert_int_equal(fl_secagg_server_pending(srv), 0);
    assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
    /* A replayed advertisement in the share-keys phase is out of phase. */
    assert_int_equal(fl_secagg_server_receive(srv, 2, adv[2], advl[2]), FL_ERR_STATE);
    assert_non_null(strstr(fl_secagg_server_errmsg(srv), "out of phase"));

    const uint8_t *keys[3];
    size_t keysl[3];
    uint8_t *shares[3];
    size_t sharesl[3];
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(fl_secagg_server_outgoing(srv, i, &keys[i], &keysl[i]), FL_OK);
    /* KEYS addressed to client 1 handed to client 0: rejected, no state change. */
    const uint8_t *r;
    size_t rl;
    assert_int_equal(fl_secagg_client_handle(c[0], keys[1], keysl[1], &r, &rl), FL_ERR_PROTOCOL);
    assert_int_equal(fl_secagg_client_phase(c[0]), FL_SECAGG_PHASE_SHARE_KEYS);
    /* Truncated KEYS: rejected, no state change. */
    assert_int_equal(fl_secagg_client_handle(c[0], keys[0], keysl[0] - 3, &r, &rl),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_secagg_client_phase(c[0]), FL_SECAGG_PHASE_SHARE_KEYS);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(fl_secagg_client_handle(c[i], keys[i], keysl[i], &r, &rl), FL_OK);
        shares[i] = malloc(rl);
        memcpy(shares[i], r, rl);
        sharesl[i] = rl;
    }
    /* KEYS replayed to a client that moved on: out of phase. */
    assert_int_equal(fl_secagg_client_handle(c[0], keys[0], keysl[0], &r, &rl), FL_ERR_STATE);
    assert_int_equal(fl_secagg_client_phase(c[0]), FL_SECAGG_PHASE_MASKED_INPUT);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(fl_secagg_server_receive(srv, i, shares[i], sharesl[i]), FL_OK);
    assert_int_equal(fl_secagg_server_receive(srv, 1, shares[1], sharesl[1]), FL_ERR_EXISTS);
    assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
    /* Reordered: a SHARES message now is out of phase. */
    assert_int_equal(fl_secagg_server_receive(srv, 0, shares[0], sharesl[0]), FL_ERR_STATE);
    uint8_t *masked[3];
    size_t maskedl[3];
    for (uint32_t i = 0; i < 3; i++) {
        const uint8_t *m;
        size_t ml;
        assert_int_equal(fl_secagg_server_outgoing(srv, i, &m, &ml), FL_OK);
        assert_int_equal(fl_secagg_client_handle(c[i], m, ml, &r, &rl), FL_OK);
        masked[i] = malloc(rl);
        memcpy(masked[i], r, rl);
        maskedl[i] = rl;
    }
    /* Replay of a masked input must not be folded twice. */
    assert_int_equal(fl_secagg_server_receive(srv, 0, masked[0], maskedl[0]), FL_OK);
    assert_int_equal(fl_secagg_server_receive(srv, 0, masked[0], maskedl[0]), FL_ERR_EXISTS);
    /* A masked input with a trailing byte is malformed and not folded. */
    uint8_t *longer = malloc(maskedl[1] + 1);
    memcpy(longer, masked[1], maskedl[1]);
    longer[maskedl[1]] = 0;
    assert_int_equal(fl_secagg_server_receive(srv, 1, longer, maskedl[1] + 1), FL_ERR_FORMAT);
    free(longer);
    assert_int_equal(fl_secagg_server_receive(srv, 1, masked[1], maskedl[1]), FL_OK);
    assert_int_equal(fl_secagg_server_receive(srv, 2, masked[2], maskedl[2]), FL_OK);
    assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_UNMASK);
    for (uint32_t i = 0; i < 3; i++) {
        const uint8_t *m;
        size_t ml;
        assert_int_equal(fl_secagg_server_outgoing(srv, i, &m, &ml), FL_OK);
        assert_int_equal(fl_secagg_client_handle(c[i], m, ml, &r, &rl), FL_OK);
        assert_int_equal(fl_secagg_client_phase(c[i]), FL_SECAGG_PHASE_DONE);
        uint8_t *ans = malloc(rl);
        size_t ansl = rl;
        memcpy(ans, r, rl);
        /* The same request again: the client is done and reveals nothing more. */
        assert_int_equal(fl_secagg_client_handle(c[i], m, ml, &r, &rl), FL_ERR_STATE);
        assert_int_equal(fl_secagg_server_receive(srv, i, ans, ansl), FL_OK);
        assert_int_equal(fl_secagg_server_receive(srv, i, ans, ansl), FL_ERR_EXISTS);
        free(ans);
    }
    const uint32_t *sum;
    uint32_t count;
    assert_int_equal(fl_secagg_server_result(srv, &sum, NULL, NULL), FL_ERR_STATE);
    assert_int_equal(fl_secagg_server_advance(srv), FL_OK);
    assert_int_equal(fl_secagg_server_result(srv, &sum, NULL, &count), FL_OK);
    assert_int_equal(count, 3);
    for (uint32_t j = 0; j < 4; j++)
        assert_int_equal(sum[j], 3 * j + 3);
    assert_int_equal(fl_secagg_server_advance(srv), FL_ERR_STATE);
    for (int i = 0; i < 3; i++)
        free(adv[i]), free(shares[i]), free(masked[i]);
    for (int i = 0; i < 3; i++)
        fl_secagg_client_destroy(c[i]);
    fl_secagg_server_destroy(srv);
}

/* ---- a server that lies about dropouts ---- */

static void test_lying_server_caught_in_active_mode(void **state) {
    (void)state;
    struct sa_opts o;
    sa_lie_opts_init(&o);
    sa_check_lies_caught(&o, 60);
}

/* Semi-honest mode has no consistency round: the client believes the server (documented). */
static void test_lie_not_detected_in_passive_mode(void **state) {
    (void)state;
    struct sa_opts o;
    struct sa_result r;
    struct sa_lie l = {0, 1, 0, 0};
    sa_opts_init(&o, 6, 12, 5, 3);
    o.tamper = sa_lie_about_dropout;
    o.tamper_user = &l;
    sa_run(&o, &r);
    assert_int_equal(l.hits, 1);
    assert_int_equal(r.client_failures, 0);
    /* The server got an s-share instead of a b-share from the victim: wrong kind. */
    assert_int_equal(r.st, FL_OK);
}

/* A client told it dropped itself refuses. */
static void test_client_refuses_own_dropout(void **state) {
    (void)state;
    struct sa_opts o;
    struct sa_result r;
    struct sa_lie l = {2, 2, 0, 0};
    sa_opts_init(&o, 5, 4, 4, 3);
    o.tamper = sa_lie_about_dropout;
    o.tamper_user = &l;
    sa_run(&o, &r);
    assert_int_equal(r.client_failures, 1);
    assert_int_equal(r.client_fail_code, FL_ERR_PROTOCOL);
    assert_int_equal(r.st, FL_OK);
    assert_true(r.sum_ok);
}

/* ---- cross-backend ---- */

static void test_cross_backend(void **state) {
    (void)state;
    if (!fl_build_has("mbedtls")) {
        fl_secagg_config cfg;
        fl_secagg_config_init(&cfg);
        cfg.num_clients = 3;
        cfg.dim = 1;
        cfg.backend = FL_SECAGG_BACKEND_MBEDTLS;
        if (fl_secagg_config_resolve(&cfg, NULL, 0) == FL_ERR_UNSUPPORTED)
            skip();
    }
    for (int dir = 0; dir < 2; dir++) {
        struct sa_opts o;
        struct sa_result r;
        uint8_t drop[10] = {0, SA_DROP_MASKED, 0, SA_DROP_UNMASK, 0, 0, SA_DROP_SHARES, 0, 0, 0};
        sa_opts_init(&o, 10, 1000, 6, 3);
        o.client_backend = dir ? FL_SECAGG_BACKEND_SODIUM : FL_SECAGG_BACKEND_MBEDTLS;
        o.server_backend = dir ? FL_SECAGG_BACKEND_MBEDTLS : FL_SECAGG_BACKEND_SODIUM;
        o.drop = drop;
        o.seed = 900 + (uint64_t)dir;
        sa_run(&o, &r);
        if (r.st != FL_OK)
            fail_msg("dir %d: %s (%s)", dir, fl_status_name(r.st), r.errmsg);
        assert_int_equal(r.client_failures, 0);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, 8);
    }
}

/* ---- sticky failure ---- */

static void test_abort_is_sticky(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = 4;
    cfg.dim = 2;
    cfg.degree = 3;
    cfg.threshold = 3;
    fl_secagg_server *srv;
    assert_int_equal(fl_secagg_server_create(&srv, &cfg, 5, NULL, NULL), FL_OK);
    assert_int_equal(fl_secagg_server_advance(srv), FL_ERR_ABORTED);
    assert_non_null(strstr(fl_secagg_server_errmsg(srv), "too few survivors"));
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_FAILED);
    assert_int_equal(fl_secagg_server_advance(srv), FL_ERR_ABORTED);
    uint8_t junk[40] = {0};
    assert_int_equal(fl_secagg_server_receive(srv, 0, junk, sizeof(junk)), FL_ERR_ABORTED);
    fl_secagg_server_destroy(srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tampered_share_ciphertext),
        cmocka_unit_test(test_context_same_round_ok),
        cmocka_unit_test(test_context_split_aborts),
        cmocka_unit_test(test_context_active_advertisement),
        cmocka_unit_test(test_bad_shares_detected),
        cmocka_unit_test(test_replay_and_reorder),
        cmocka_unit_test(test_lying_server_caught_in_active_mode),
        cmocka_unit_test(test_lie_not_detected_in_passive_mode),
        cmocka_unit_test(test_client_refuses_own_dropout),
        cmocka_unit_test(test_cross_backend),
        cmocka_unit_test(test_abort_is_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
