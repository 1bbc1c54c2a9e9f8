/* Where a round stops, and why: the server's reconstructibility checks after the masked
 * input and after the consistency check on a sparse graph (a survivor whose neighbours all
 * dropped; a dropped client with a single surviving neighbour), unmask shares that do not
 * rebuild the secret they claim (FL_ERR_PROTOCOL, sticky), and small-order X25519 keys: the
 * server refuses such an advertisement (the client counts as dropped and the round completes
 * without it), and a client to which a server relays one fails stickily with FL_ERR_CRYPTO
 * before any share or masked input leaves it. */
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

/* ---- small-order advertised keys ---- */

/* The seven small-order u values of secagg/tools/x25519_small_order.py (little-endian, bit
 * 255 clear); with bit 255 set or clear, 14 encodings (test_sa_x25519_check.c checks the
 * list itself). */
static const char *const small_hex[7] = {
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
};
#define SMALL_ENCODINGS 14

/* Encoding e (0..13): value e / 2, bit 255 set when e is odd. */
static void small_encoding(uint8_t out[32], int e) {
    for (int i = 0; i < 32; i++) {
        unsigned v;
        assert_int_equal(sscanf(small_hex[e / 2] + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    if (e & 1)
        out[31] |= 0x80;
}

/* Moves the rig's server and clients to backend b (rig_init makes them on sodium); 0 if b
 * is not built. */
static int rig_on_backend(struct rig *R, fl_secagg_backend b) {
    fl_secagg_config c = R->cfg;
    c.backend = b;
    if (fl_secagg_config_resolve(&c, NULL, 0) != FL_OK) {
        assert_false(fl_build_has("mbedtls")); /* only a backend that was not built */
        return 0;
    }
    R->cfg = c;
    fl_secagg_server_destroy(R->srv);
    assert_int_equal(fl_secagg_server_create(&R->srv, &R->cfg, R->round_id, R->gseed, NULL),
                     FL_OK);
    for (uint32_t i = 0; i < R->n; i++) {
        fl_secagg_client_destroy(R->cl[i]);
        assert_int_equal(fl_secagg_client_create(&R->cl[i], &R->cfg, R->round_id, i,
                                                 R->cfg.active ? &R->ids[i] : NULL, NULL),
                         FL_OK);
    }
    return 1;
}

/* Re-signs client i's pending ADVERTISE after its keys were changed (active mode), so that
 * only the key check can refuse it. */
static void resign_advertise(struct rig *R, uint32_t i) {
    const struct fl__sa_crypto *cr = fl__sa_backend(R->cfg.backend);
    uint8_t *b = R->reply[i] + RIG_H, stmt[FL__SA_STMT_BYTES];
    size_t sl = fl__sa_adv_statement(stmt, sizeof(stmt), R->round_id, i, b, b + 32,
                                     R->cfg.context);
    assert_true(sl > 0);
    assert_int_equal(cr->ed25519_sign(b + 160, stmt, sl, R->ids[i].signing_key), 0);
}

/* Client 4 advertises encoding e in place of its c_pk (key_off 0) or s_pk (32). The server
 * refuses it with no state change; client 4 then counts as dropped at ADVERTISE, and the
 * round (complete graph, n = 5, t = 3) completes with the exact sum of the other four. */
static void small_key_round(fl_secagg_backend b, int active, size_t key_off, int e) {
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, active);
    if (!rig_on_backend(&R, b)) {
        rig_free(&R);
        return;
    }
    rig_start(&R);
    small_encoding(R.reply[4] + RIG_H + key_off, e);
    if (active)
        resign_advertise(&R, 4);
    rig_send_all(&R, 1u << 4);
    assert_int_equal(fl_secagg_server_pending(R.srv), 1);
    assert_int_equal(rig_send(&R, 4), FL_ERR_CRYPTO);
    char want[96];
    snprintf(want, sizeof(want), "ADVERTISE: %s is a small-order X25519 point",
             key_off ? "s_pk" : "c_pk");
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv), want));
    assert_int_equal(fl_secagg_server_pending(R.srv), 1);
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_ADVERTISE);
    /* The deadline passes: client 4 is not in U1 and gets no KEYS. */
    rig_step(&R, RIG_ALL & ~(1u << 4));
    size_t ml;
    const uint8_t *m;
    assert_int_equal(fl_secagg_server_outgoing(R.srv, 4, &m, &ml), FL_ERR_NOT_FOUND);
    for (int ph = 0; ph < (active ? 3 : 2); ph++) {
        rig_send_all(&R, 1u << 4);
        rig_step(&R, RIG_ALL & ~(1u << 4));
    }
    rig_send_all(&R, 1u << 4);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0xF);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_not_equal(fl_secagg_client_phase(R.cl[i]), FL_SECAGG_PHASE_FAILED);
    rig_free(&R);
}

static void test_small_order_keys_refused(void **state) {
    (void)state;
    const fl_secagg_backend backends[2] = {FL_SECAGG_BACKEND_SODIUM, FL_SECAGG_BACKEND_MBEDTLS};
    for (int b = 0; b < 2; b++)
        for (size_t key_off = 0; key_off <= 32; key_off += 32)
            for (int e = 0; e < SMALL_ENCODINGS; e++)
                small_key_round(backends[b], 0, key_off, e);
    /* Active mode: a small-order key under a valid signature is refused all the same. */
    for (int b = 0; b < 2; b++) {
        small_key_round(backends[b], 1, 0, 0);
        small_key_round(backends[b], 1, 32, 9);
    }
}

/* A server that relays a small-order key anyway (the check skipped, or malicious): the client
 * fails stickily with FL_ERR_CRYPTO naming the peer, and sends nothing. */
static void relayed_small_key(fl_secagg_backend b, size_t key_off, int e) {
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    if (!rig_on_backend(&R, b)) {
        rig_free(&R);
        return;
    }
    rig_start(&R);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    size_t len;
    uint8_t *keys = rig_outgoing(&R, 0, &len);
    /* KEYS body: n, k, t (u32), b, active, 2 pad, d (u32), seed[32], count, entries. */
    size_t off = RIG_H + 12 + 4 + 4 + 32;
    uint32_t count = fl__get_u32le(keys + off);
    assert_int_equal(count, 4);
    off += 4;
    int found = 0;
    for (uint32_t j = 0; j < count; j++) {
        uint8_t *ent = keys + off + (size_t)j * (4 + FL__SA_ADV_BASE_BYTES);
        if (fl__get_u32le(ent) == 4) {
            small_encoding(ent + 4 + key_off, e);
            found = 1;
        }
    }
    assert_true(found);
    const uint8_t *r = NULL;
    size_t rl = 0;
    assert_int_equal(fl_secagg_client_handle(R.cl[0], keys, len, &r, &rl), FL_ERR_CRYPTO);
    char want[96];
    snprintf(want, sizeof(want), "KEYS: client 4's %s is a small-order X25519 point",
             key_off ? "s_pk" : "c_pk");
    assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[0]), want));
    assert_int_equal(fl_secagg_client_phase(R.cl[0]), FL_SECAGG_PHASE_FAILED);
    /* Sticky: the honest KEYS message is refused too. */
    const uint8_t *honest;
    size_t hl;
    assert_int_equal(fl_secagg_server_outgoing(R.srv, 0, &honest, &hl), FL_OK);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], honest, hl, &r, &rl), FL_ERR_CRYPTO);
    /* The other clients, given the honest keys, go on. */
    for (uint32_t i = 1; i < 5; i++) {
        assert_int_equal(fl_secagg_server_outgoing(R.srv, i, &honest, &hl), FL_OK);
        assert_int_equal(fl_secagg_client_handle(R.cl[i], honest, hl, &r, &rl), FL_OK);
    }
    free(keys);
    rig_free(&R);
}

static void test_small_order_keys_relayed(void **state) {
    (void)state;
    const fl_secagg_backend backends[2] = {FL_SECAGG_BACKEND_SODIUM, FL_SECAGG_BACKEND_MBEDTLS};
    for (int b = 0; b < 2; b++)
        for (size_t key_off = 0; key_off <= 32; key_off += 32)
            for (int e = 0; e < SMALL_ENCODINGS; e++)
                relayed_small_key(backends[b], key_off, e);
}

/* fl_secagg_server_would_advance foresees each advance of a ring round (n = 10, k = 2,
 * t = 2) without changing anything: the phase, the error message and the advance that
 * follows are as without it. */
static fl_status foresee(struct rig *R) {
    fl_secagg_phase ph = fl_secagg_server_phase(R->srv);
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", fl_secagg_server_errmsg(R->srv));
    fl_status w = fl_secagg_server_would_advance(R->srv);
    assert_int_equal(fl_secagg_server_would_advance(R->srv), w);
    assert_int_equal(fl_secagg_server_phase(R->srv), ph);
    assert_string_equal(fl_secagg_server_errmsg(R->srv), msg);
    fl_status a = fl_secagg_server_advance(R->srv);
    assert_int_equal(a, w);
    return w;
}

/* In phase UNMASK: client a's answer alone leaves secrets short of t shares (foreseen
 * as an abort); with every answer the round completes, as foreseen. Frees the rig. */
static void unmask_one_then_all(struct rig *R, uint32_t a) {
    assert_int_equal(rig_send(R, a), FL_OK);
    assert_int_equal(fl_secagg_server_would_advance(R->srv), FL_ERR_ABORTED);
    rig_set_reply(R, a, NULL, 0);
    rig_send_all(R, 0);
    assert_int_equal(foresee(R), FL_OK);
    rig_check_sum(R, 0x3FF);
    rig_free(R);
}

static void test_would_advance(void **state) {
    (void)state;
    struct rig R;
    assert_int_equal(fl_secagg_server_would_advance(NULL), FL_ERR_MISUSE);
    /* A whole round: every answer FL_OK, then FL_ERR_STATE once done. */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    rig_start(&R);
    for (int k = 0; k < 4; k++) {
        rig_send_all(&R, 0);
        assert_int_equal(foresee(&R), FL_OK);
        rig_clients_handle(&R, RIG_ALL);
    }
    rig_check_sum(&R, 0x3FF);
    assert_int_equal(fl_secagg_server_would_advance(R.srv), FL_ERR_STATE);
    rig_free(&R);
    /* Advertise: two clients that are not neighbours are not enough (each needs one of
     * its two neighbours); adding one's neighbour makes the phase closable. */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    uint32_t a = at_pos(&R, 0), b = at_pos(&R, 5), c = at_pos(&R, 1);
    rig_start(&R);
    assert_int_equal(rig_send(&R, a), FL_OK);
    assert_int_equal(rig_send(&R, b), FL_OK);
    assert_int_equal(fl_secagg_server_would_advance(R.srv), FL_ERR_ABORTED);
    assert_int_equal(rig_send(&R, c), FL_OK);
    assert_int_equal(fl_secagg_server_would_advance(R.srv), FL_OK);
    rig_free(&R);
    /* Masked input: both neighbours of the client at position 3 silent, as in
     * test_sparse_survivor_isolated: foreseen, and the advance aborts. */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    uint32_t both = 1u << at_pos(&R, 2) | 1u << at_pos(&R, 4);
    rig_start(&R);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, both);
    assert_int_equal(foresee(&R), FL_ERR_ABORTED);
    assert_int_equal(fl_secagg_server_would_advance(R.srv), FL_ERR_STATE); /* failed */
    rig_free(&R);
    /* Unmask: a single answer leaves secrets with one share of t = 2; all answers do. */
    rig_init(&R, 10, 5, 2, 2, 32, 0);
    rig_start(&R);
    for (int k = 0; k < 3; k++) {
        rig_send_all(&R, 0);
        rig_step(&R, RIG_ALL);
    }
    unmask_one_then_all(&R, a);
    /* Active mode (the consistency phase too): every step foreseen; at unmasking one
     * answer is too few, all answers do. */
    rig_init(&R, 10, 5, 2, 2, 32, 1);
    rig_start(&R);
    for (int k = 0; k < 4; k++) {
        rig_send_all(&R, 0);
        assert_int_equal(foresee(&R), FL_OK);
        rig_clients_handle(&R, RIG_ALL);
    }
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_UNMASK);
    unmask_one_then_all(&R, a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_survivor_isolated),
        cmocka_unit_test(test_sparse_dropped_single_holder),
        cmocka_unit_test(test_sparse_dropped_island),
        cmocka_unit_test(test_sparse_consistency_abort),
        cmocka_unit_test(test_forged_unmask_shares),
        cmocka_unit_test(test_small_order_keys_refused),
        cmocka_unit_test(test_small_order_keys_relayed),
        cmocka_unit_test(test_would_advance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
