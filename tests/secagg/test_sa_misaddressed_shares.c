/* A malicious client that encrypts a share correctly (right pair key, nonce and associated
 * data) but names another sender or receiver inside the plaintext. The test plays client 4
 * itself with keys it holds, so the ciphertexts authenticate; the receiver must still
 * refuse the share when it opens it (FL_ERR_CRYPTO, sticky, before its masked input exists),
 * and the round must complete with the clients that were not affected. */
#include "sa_rig.h"

#define F 4 /* the forged client */

struct forged {
    uint8_t c_pk[32], c_sk[32], s_pk[32], s_sk[32], b[32];
};

/* SHARES of the forged client for the KEYS message `keys`; the share for `victim` carries
 * (from, to) = (bad_from, bad_to) in its plaintext. */
static uint8_t *forge_shares(struct rig *R, const struct forged *f, const uint8_t *keys,
                             size_t keys_len, uint32_t victim, uint32_t bad_from,
                             uint32_t bad_to, size_t *out_len) {
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    const uint8_t *body = keys + RIG_H;
    uint32_t t = fl__get_u32le(body + 8), count = fl__get_u32le(body + 52);
    assert_int_equal(keys_len, RIG_H + 56 + (size_t)count * 68);
    uint32_t xs[RIG_MAX_N];
    struct fl__sa_share ss[RIG_MAX_N], bs[RIG_MAX_N];
    for (uint32_t i = 0; i < count; i++)
        xs[i] = fl__get_u32le(body + 56 + i * 68) + 1;
    xs[count] = F + 1;
    assert_int_equal(fl__sa_shamir_split(ss, xs, count + 1, t, f->s_sk, cr), 0);
    assert_int_equal(fl__sa_shamir_split(bs, xs, count + 1, t, f->b, cr), 0);
    *out_len = RIG_H + 32 + 4 + (size_t)count * (4 + 90);
    uint8_t *m = calloc(1, *out_len);
    assert_non_null(m);
    fl__sa_put_header(m, FL_SECAGG_MSG_SHARES, R->round_id, F, (uint32_t)(*out_len - RIG_H));
    uint8_t *o = m + RIG_H;
    assert_int_equal(fl__sa_commit_b(o, cr, R->round_id, F, f->b), 0);
    fl__put_u32le(o + 32, count);
    o += 36;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t w = xs[i] - 1;
        const uint8_t *w_cpk = body + 56 + i * 68 + 4;
        uint8_t key[32], nonce[12] = {0}, ad[19], pt[8 + 66];
        assert_int_equal(fl__sa_derive_pair_key(key, cr, "enc", f->c_sk, w_cpk, R->round_id, F,
                                                w, NULL),
                         0);
        fl__put_u32le(nonce, F);
        fl__put_u32le(nonce + 4, w);
        ad[0] = 0xF1;
        ad[1] = 0x5A;
        ad[2] = 1;
        fl__put_u64le(ad + 3, R->round_id);
        fl__put_u32le(ad + 11, F);
        fl__put_u32le(ad + 15, w);
        fl__put_u32le(pt, w == victim ? bad_from : F);
        fl__put_u32le(pt + 4, w == victim ? bad_to : w);
        memcpy(pt + 8, ss[i].y, 33);
        memcpy(pt + 41, bs[i].y, 33);
        fl__put_u32le(o, w);
        assert_int_equal(cr->aead_seal(o + 4, pt, sizeof(pt), ad, sizeof(ad), nonce, key), 0);
        o += 94;
    }
    return m;
}

/* Runs the round with client 4 forged; returns nothing, checks everything. */
static void forged_round(uint32_t victim, uint32_t bad_from, uint32_t bad_to) {
    const struct fl__sa_crypto *cr = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    struct rig R;
    struct forged f;
    rig_init(&R, 5, 6, 4, 3, 32, 0);
    assert_int_equal(cr->x25519_keypair(f.c_pk, f.c_sk), 0);
    assert_int_equal(cr->x25519_keypair(f.s_pk, f.s_sk), 0);
    assert_int_equal(cr->random(f.b, 32), 0);
    rig_start(&R);
    /* Client 4's advertisement: the forger's keys. */
    uint8_t adv[RIG_H + 64];
    fl__sa_put_header(adv, FL_SECAGG_MSG_ADVERTISE, R.round_id, F, 64);
    memcpy(adv + RIG_H, f.c_pk, 32);
    memcpy(adv + RIG_H + 32, f.s_pk, 32);
    rig_set_reply(&R, F, adv, sizeof(adv));
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL & ~(1u << F));
    size_t kl, sl;
    uint8_t *keys = rig_outgoing(&R, F, &kl);
    uint8_t *sh = forge_shares(&R, &f, keys, kl, victim, bad_from, bad_to, &sl);
    rig_set_reply(&R, F, sh, sl);
    free(keys);
    free(sh);
    rig_send_all(&R, 0); /* the server cannot tell: it never sees plaintexts */
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    /* Every honest client opens the share from client 4; only the victim's is wrong. */
    for (uint32_t i = 0; i < F; i++) {
        const uint8_t *m, *r;
        size_t ml, rl;
        assert_int_equal(fl_secagg_server_outgoing(R.srv, i, &m, &ml), FL_OK);
        fl_status st = fl_secagg_client_handle(R.cl[i], m, ml, &r, &rl);
        if (i == victim) {
            assert_int_equal(st, FL_ERR_CRYPTO);
            assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[i]),
                                   "the share from client 4 does not open"));
            assert_int_equal(fl_secagg_client_phase(R.cl[i]), FL_SECAGG_PHASE_FAILED);
        } else {
            assert_int_equal(st, FL_OK);
            rig_set_reply(&R, i, r, rl);
        }
    }
    /* The forger sends no masked input; the round completes without it and the victim. */
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_clients_handle(&R, RIG_ALL & ~(1u << F) & ~(1u << victim));
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x0F & ~(1u << victim));
    rig_free(&R);
}

static void test_share_names_another_sender(void **state) {
    (void)state;
    forged_round(0, 3, 0);
}

static void test_share_names_another_receiver(void **state) {
    (void)state;
    forged_round(2, F, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_names_another_sender),
        cmocka_unit_test(test_share_names_another_receiver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
