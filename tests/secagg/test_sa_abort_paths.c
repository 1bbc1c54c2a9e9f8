/* Where a round stops, and why: the server's reconstructibility checks after the masked
 * input and after the consistency check on a sparse graph (a survivor whose neighbours all
 * dropped; a dropped client with a single surviving neighbour), unmask shares that do not
 * rebuild the secret they claim (FL_ERR_PROTOCOL, sticky), and clients whose neighbour
 * advertised a key no agreement can use (they fail stickily with FL_ERR_CRYPTO before any
 * share or masked input leaves them). */
#include "sa_rig.h"

/* Client at ring position p of the round's graph (k = 2: neighbours are p - 1 and p + 1). */
static uint32_t at_pos(const struct rig *R, int p) {
    struct fl__sa_graph g;
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    assert_int_equal(fl__sa_graph_init(&g, R->n, R->cfg.degree, R->gseed, cr, NULL), FL_OK);
    assert_non_null(g.perm);
    uint32_t c = g.perm[((p % (int)R->n) + (int)R->n) % (int)R->n];
    fl__sa_graph_free(&g, NULL);
    return c;
}

/* Runs a ring round (n = 10, k = 2, t = 2) in which the clients in `no_masked` never send
 * their masked input; returns the code of the advance that closes the masked-input phase. */
static fl_status ring_drop_masked(struct rig *R, uint32_t no_masked) {
    rig_init(R, 10, 5, 2, 2, 32, 0);
    rig_start(R);
    rig_send_all(R, 0);
    rig_step(R, RIG_ALL);
    rig_send_all(R, 0);
    rig_step(R, RIG_ALL);
    rig_send_all(R, no_masked);
    return fl_secagg_server_advance(R->srv);
}

static void test_sparse_survivor_isolated(void **state) {
    (void)state;
    struct rig R;
    /* A control: one client drops, its two neighbours carry its shares. */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    uint32_t lone = 1u << at_pos(&R, 3);
    rig_free(&R);
    assert_int_equal(ring_drop_masked(&R, lone), FL_OK);
    rig_clients_handle(&R, RIG_ALL & ~lone);
    rig_send_all(&R, lone);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x3FF & ~lone);
    rig_free(&R);
    /* Both neighbours of the client at position 3 drop: its self mask b would have one
     * holder (itself), t = 2. The server aborts before asking anyone for shares. */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    uint32_t both = 1u << at_pos(&R, 2) | 1u << at_pos(&R, 4);
    rig_free(&R);
    assert_int_equal(ring_drop_masked(&R, both), FL_ERR_ABORTED);
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv),
                           "too few survivors after masked input: 1, need at least 2"));
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_FAILED);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_ERR_ABORTED); /* sticky */
    rig_free(&R);
}

static void test_sparse_dropped_single_holder(void **state) {
    (void)state;
    struct rig R;
    /* Positions 3 and 4 drop together: each keeps one surviving neighbour, which alone
     * cannot rebuild the dropped client's masking key (t = 2). */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    uint32_t pair = 1u << at_pos(&R, 3) | 1u << at_pos(&R, 4);
    rig_free(&R);
    assert_int_equal(ring_drop_masked(&R, pair), FL_ERR_ABORTED);
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv),
                           "too few survivors after masked input: 1, need at least 2"));
    rig_free(&R);
}

/* k = 4: the five ring positions around client 0 drop, so client 0 (checked first) has no
 * surviving neighbour and nothing to rebuild, while the next ones each keep a single
 * holder: the round aborts on those. */
static void test_sparse_dropped_island(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 12, 3, 4, 2, 32, 0);
    struct fl__sa_graph g;
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    assert_int_equal(fl__sa_graph_init(&g, 12, 4, R.gseed, cr, NULL), FL_OK);
    uint32_t island = 0;
    for (int d = -2; d <= 2; d++)
        island |= 1u << g.perm[(g.pos[0] + 12 + d) % 12];
    fl__sa_graph_free(&g, NULL);
    rig_start(&R);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, island);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_ERR_ABORTED);
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv),
                           "too few survivors after masked input: 1, need at least 2"));
    rig_free(&R);
}

/* Active ring: the neighbours of position 3 send their masked inputs but never sign, so
 * the client at 3 sees no neighbour signature and is not asked to unmask; then its self
 * mask has no holder left. */
static void test_sparse_consistency_abort(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 10, 3, 2, 2, 32, 1);
    uint32_t quiet = 1u << at_pos(&R, 2) | 1u << at_pos(&R, 4);
    rig_start(&R);
    for (int ph = 0; ph < 3; ph++) {
        rig_send_all(&R, 0);
        rig_step(&R, RIG_ALL);
    }
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_CONSISTENCY);
    rig_send_all(&R, quiet);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_ERR_ABORTED);
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv), "after consistency check"));
    rig_free(&R);
}

/* ---- unmask shares that rebuild something else ---- */

/* Every holder's share of client `victim`'s masking key replaced by the constant y: the
 * polynomial through them is the constant, so the server rebuilds y itself. */
static fl_status forged_s_shares(const uint8_t y[33], char *errmsg, size_t errlen) {
    struct rig R;
    rig_init(&R, 5, 6, 4, 3, 32, 0);
    const uint32_t victim = 4;
    rig_start(&R);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 1u << victim); /* the victim drops before its masked input */
    rig_step(&R, RIG_ALL & ~(1u << victim));
    int forged = 0;
    for (uint32_t i = 0; i < 5; i++) {
        if (i == victim)
            continue;
        uint8_t *m = R.reply[i];
        uint32_t cnt = fl__get_u32le(m + RIG_H);
        for (uint32_t e = 0; e < cnt; e++) {
            uint8_t *ent = m + RIG_H + 4 + e * 38;
            if (fl__get_u32le(ent) != victim)
                continue;
            assert_int_equal(ent[4], FL__SA_KIND_S);
            memcpy(ent + 5, y, 33);
            forged++;
        }
    }
    assert_int_equal(forged, 4);
    rig_send_all(&R, 1u << victim);
    fl_status st = fl_secagg_server_advance(R.srv);
    snprintf(errmsg, errlen, "%s", fl_secagg_server_errmsg(R.srv));
    if (st != FL_OK) {
        assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_FAILED);
        assert_int_equal(fl_secagg_server_result(R.srv, NULL, NULL, NULL), FL_ERR_STATE);
    }
    rig_free(&R);
    return st;
}

static void test_forged_unmask_shares(void **state) {
    (void)state;
    char msg[256];
    uint8_t y[33] = {0};
    /* 2^256: a field element that is no 32-byte secret. */
    y[0] = 1;
    assert_int_equal(forged_s_shares(y, msg, sizeof(msg)), FL_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "client 4: shares do not combine"));
    /* 5: a secret, but not the key behind client 4's advertised public key. */
    memset(y, 0, sizeof(y));
    y[32] = 5;
    assert_int_equal(forged_s_shares(y, msg, sizeof(msg)), FL_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "client 4: rebuilt masking key does not match"));
}

/* ---- unusable advertised keys ---- */

/* Client 4's advertisement reaches the server with one of its keys replaced by the
 * all-zero point (small order: every X25519 agreement with it is zero and refused). The
 * other clients find out when they first use that key: each fails stickily, and the round
 * cannot continue. Returns the server's code at the first failing advance. */
static fl_status zero_key_round(size_t key_off, fl_secagg_phase fail_phase, const char *why) {
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    rig_start(&R);
    memset(R.reply[4] + RIG_H + key_off, 0, 32);
    rig_send_all(&R, 0);
    fl_status st = FL_OK;
    int failures = 0;
    while (st == FL_OK && fl_secagg_server_phase(R.srv) != FL_SECAGG_PHASE_DONE) {
        st = fl_secagg_server_advance(R.srv);
        if (st != FL_OK)
            break;
        for (uint32_t i = 0; i < 5; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            if (fl_secagg_server_outgoing(R.srv, i, &m, &ml) != FL_OK)
                continue;
            fl_secagg_phase before = fl_secagg_client_phase(R.cl[i]);
            fl_status cs = fl_secagg_client_handle(R.cl[i], m, ml, &r, &rl);
            if (cs == FL_OK) {
                assert_int_equal(fl_secagg_server_receive(R.srv, i, r, rl), FL_OK);
                continue;
            }
            assert_true(i != 4);
            assert_int_equal(cs, FL_ERR_CRYPTO);
            assert_int_equal(before, fail_phase);
            assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[i]), why));
            assert_int_equal(fl_secagg_client_phase(R.cl[i]), FL_SECAGG_PHASE_FAILED);
            failures++;
        }
    }
    assert_int_equal(failures, 4); /* every neighbour of client 4 */
    rig_free(&R);
    return st;
}

static void test_zero_keys(void **state) {
    (void)state;
    /* c_pk: no share-encryption key with client 4 (KEYS). */
    assert_int_equal(zero_key_round(0, FL_SECAGG_PHASE_SHARE_KEYS, "share encryption failed"),
                     FL_ERR_ABORTED);
    /* s_pk: no pairwise mask with client 4 (CIPHERTEXTS, before the masked input exists). */
    assert_int_equal(zero_key_round(32, FL_SECAGG_PHASE_MASKED_INPUT, "pairwise mask failed"),
                     FL_ERR_ABORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_survivor_isolated),
        cmocka_unit_test(test_sparse_dropped_single_holder),
        cmocka_unit_test(test_sparse_dropped_island),
        cmocka_unit_test(test_sparse_consistency_abort),
        cmocka_unit_test(test_forged_unmask_shares),
        cmocka_unit_test(test_zero_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
