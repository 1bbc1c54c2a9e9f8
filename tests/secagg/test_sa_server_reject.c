/* The server's message checks, phase by phase: every malformed, truncated, oversized,
 * duplicated, out-of-phase, wrong-round or misdirected client message gets the documented
 * code (docs/secagg.md "Wire format": header FORMAT, round/phase STATE, size TOO_LARGE,
 * sender PROTOCOL, duplicate EXISTS, then the body), and changes nothing: after each
 * rejection the honest message is still accepted and the round ends with the exact sum. */
#include "sa_rig.h"

/* Feeds a modified copy of client i's pending reply as if sent by `from`; returns the code. */
static fl_status send_edited(struct rig *R, uint32_t i, uint32_t from, size_t len,
                             void (*edit)(uint8_t *m, size_t *len, void *u), void *u) {
    uint8_t *m = rig_dup(R->reply[i], R->reply_len[i], 256);
    if (edit)
        edit(m, &len, u);
    fl_status st = fl_secagg_server_receive(R->srv, from, m, len);
    free(m);
    return st;
}

static void expect_reject(struct rig *R, uint32_t i, uint32_t from, size_t len,
                          void (*edit)(uint8_t *m, size_t *len, void *u), void *u,
                          fl_status want, const char *msg_part) {
    uint32_t pending = fl_secagg_server_pending(R->srv);
    fl_secagg_phase ph = fl_secagg_server_phase(R->srv);
    fl_status st = send_edited(R, i, from, len, edit, u);
    if (st != want || (msg_part && !strstr(fl_secagg_server_errmsg(R->srv), msg_part)))
        fail_msg("want %s '%s', got %s '%s'", fl_status_name(want), msg_part ? msg_part : "",
                 fl_status_name(st), fl_secagg_server_errmsg(R->srv));
    /* A rejected message changes no state. */
    assert_int_equal(fl_secagg_server_pending(R->srv), pending);
    assert_int_equal(fl_secagg_server_phase(R->srv), ph);
}

/* ---- edits ---- */

static void fix_len(uint8_t *m, size_t *len, void *u) {
    (void)u;
    rig_fix_len(m, *len);
}

static void set_round(uint8_t *m, size_t *len, void *u) {
    (void)len;
    fl__put_u64le(m + 4, fl__get_u64le(m + 4) + *(uint64_t *)u);
}

static void set_client(uint8_t *m, size_t *len, void *u) {
    (void)len;
    fl__put_u32le(m + 12, *(uint32_t *)u);
}

static void set_type(uint8_t *m, size_t *len, void *u) {
    (void)len;
    m[3] = *(uint8_t *)u;
}

/* Writes v (u32, or its low byte for put_u8_at) at body offset off. */
struct put32 {
    size_t off;
    uint32_t v;
};
static void put_u32_at(uint8_t *m, size_t *len, void *u) {
    (void)len;
    struct put32 *p = u;
    fl__put_u32le(m + RIG_H + p->off, p->v);
}

static void put_u8_at(uint8_t *m, size_t *len, void *u) {
    (void)len;
    struct put32 *p = u;
    m[RIG_H + p->off] = (uint8_t)p->v;
}

/* Swaps two fixed-size entries of a list starting at body offset off. */
struct swap {
    size_t off, size;
};
static void swap_first_two(uint8_t *m, size_t *len, void *u) {
    (void)len;
    struct swap *s = u;
    uint8_t tmp[256];
    uint8_t *a = m + RIG_H + s->off, *b = a + s->size;
    memcpy(tmp, a, s->size);
    memcpy(a, b, s->size);
    memcpy(b, tmp, s->size);
}

static void append_byte(uint8_t *m, size_t *len, void *u) {
    (void)u;
    m[*len] = 0;
    (*len)++;
    rig_fix_len(m, *len);
}

/* ---- the semi-honest round, every phase ---- */

/* n = 5 on the complete graph, t = 3; client 4 never advertises, so it is outside every
 * set and its (forged) messages must be refused at each phase. */
static void test_reject_each_phase(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 5, 8, 4, 3, 32, 0);
    rig_start(&R);
    const size_t adv_len = R.reply_len[0];

    /* -- advertise -- */
    uint64_t plus1 = 1;
    uint32_t idx = 1, big = 5;
    uint8_t t_shares = FL_SECAGG_MSG_SHARES, t_bad = 0;
    assert_int_equal(fl_secagg_server_receive(NULL, 0, R.reply[0], adv_len), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_receive(R.srv, 0, NULL, 0), FL_ERR_MISUSE);
    expect_reject(&R, 0, 5, adv_len, NULL, NULL, FL_ERR_PROTOCOL, "unknown client");
    expect_reject(&R, 0, 0, adv_len, set_round, &plus1, FL_ERR_STATE, NULL);
    expect_reject(&R, 0, 0, adv_len, set_type, &t_shares, FL_ERR_STATE, NULL);
    expect_reject(&R, 0, 0, adv_len, set_type, &t_bad, FL_ERR_FORMAT, NULL);
    expect_reject(&R, 0, 0, adv_len, set_client, &idx, FL_ERR_PROTOCOL, NULL);
    expect_reject(&R, 0, 0, adv_len, set_client, &big, FL_ERR_PROTOCOL, NULL);
    expect_reject(&R, 0, 0, adv_len - 1, NULL, NULL, FL_ERR_FORMAT, NULL);  /* length field */
    expect_reject(&R, 0, 0, adv_len - 1, fix_len, NULL, FL_ERR_FORMAT, "ADVERTISE: body");
    expect_reject(&R, 0, 0, adv_len, append_byte, NULL, FL_ERR_TOO_LARGE, NULL);
    expect_reject(&R, 0, 0, 10, NULL, NULL, FL_ERR_FORMAT, NULL);           /* short header */
    assert_int_equal(fl_secagg_server_pending(R.srv), 5);
    assert_int_equal(rig_send(&R, 0), FL_OK);
    expect_reject(&R, 0, 0, adv_len, NULL, NULL, FL_ERR_EXISTS, "duplicate");
    rig_set_reply(&R, 0, NULL, 0);
    uint8_t *late_adv = rig_dup(R.reply[4], R.reply_len[4], 0);
    rig_send_all(&R, 1u << 4);
    rig_set_reply(&R, 4, NULL, 0);
    assert_int_equal(fl_secagg_server_pending(R.srv), 1);
    /* Nothing to send before the first advance. */
    const uint8_t *om;
    size_t ol;
    assert_int_equal(fl_secagg_server_outgoing(R.srv, 0, &om, &ol), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_secagg_server_result(R.srv, NULL, NULL, NULL), FL_ERR_STATE);

    /* -- share keys: client 4 dropped, U1 = {0..3} -- */
    rig_step(&R, 0x0F);
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_SHARE_KEYS);
    assert_int_equal(fl_secagg_server_pending(R.srv), 4);
    assert_int_equal(fl_secagg_server_outgoing(R.srv, 4, &om, &ol), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_secagg_server_receive(R.srv, 4, late_adv, adv_len), FL_ERR_STATE);
    free(late_adv);
    size_t sh_len = R.reply_len[0]; /* commit 32, count 3, 3 x (u32, ct 90) */
    assert_int_equal(sh_len, RIG_H + 36 + 3 * 94);
    /* Client 4 is not in U1: a SHARES message from it is refused. */
    {
        uint8_t *m = rig_dup(R.reply[0], sh_len, 0);
        fl__put_u32le(m + 12, 4);
        assert_int_equal(fl_secagg_server_receive(R.srv, 4, m, sh_len), FL_ERR_PROTOCOL);
        assert_non_null(strstr(fl_secagg_server_errmsg(R.srv), "not part of this phase"));
        free(m);
    }
    expect_reject(&R, 0, 0, RIG_H + 20, fix_len, NULL, FL_ERR_FORMAT, "SHARES: truncated");
    expect_reject(&R, 0, 0, RIG_H + 34, fix_len, NULL, FL_ERR_FORMAT, "SHARES: truncated");
    struct put32 cnt2 = {32, 2}, cnt4 = {32, 4};
    expect_reject(&R, 0, 0, sh_len, put_u32_at, &cnt2, FL_ERR_FORMAT, "entries, expected 3");
    expect_reject(&R, 0, 0, sh_len, put_u32_at, &cnt4, FL_ERR_FORMAT, "entries, expected 3");
    expect_reject(&R, 0, 0, sh_len - 1, fix_len, NULL, FL_ERR_FORMAT, "entries");
    struct swap sw = {36, 94};
    expect_reject(&R, 0, 0, sh_len, swap_first_two, &sw, FL_ERR_PROTOCOL, "receiver list");
    struct put32 to4 = {36 + 2 * 94, 4}, to_self = {36, 0};
    expect_reject(&R, 0, 0, sh_len, put_u32_at, &to4, FL_ERR_PROTOCOL, "receiver list");
    expect_reject(&R, 0, 0, sh_len, put_u32_at, &to_self, FL_ERR_PROTOCOL, "receiver list");
    /* An advertisement in the share phase, and a message of a later phase. */
    uint8_t t_masked = FL_SECAGG_MSG_MASKED_INPUT;
    expect_reject(&R, 0, 0, sh_len, set_type, &t_masked, FL_ERR_STATE, NULL);
    assert_int_equal(rig_send(&R, 0), FL_OK);
    expect_reject(&R, 0, 0, sh_len, NULL, NULL, FL_ERR_EXISTS, NULL);
    rig_set_reply(&R, 0, NULL, 0);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_pending(R.srv), 0);

    /* -- masked input -- */
    rig_step(&R, 0x0F);
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_MASKED_INPUT);
    size_t mi_len = R.reply_len[1];
    assert_int_equal(mi_len, RIG_H + 8 * 4);
    expect_reject(&R, 1, 1, mi_len - 4, fix_len, NULL, FL_ERR_FORMAT, "MASKED_INPUT");
    expect_reject(&R, 1, 1, mi_len, append_byte, NULL, FL_ERR_TOO_LARGE, NULL);
    {
        uint8_t *m = rig_dup(R.reply[1], mi_len, 0);
        fl__put_u32le(m + 12, 4);
        assert_int_equal(fl_secagg_server_receive(R.srv, 4, m, mi_len), FL_ERR_PROTOCOL);
        free(m);
    }
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_UNMASK);
    rig_clients_handle(&R, 0x0F);

    /* -- unmask -- */
    size_t um_len = R.reply_len[2]; /* count 4 (3 peers + self), 4 x (u32, kind, y 33) */
    assert_int_equal(um_len, RIG_H + 4 + 4 * 38);
    expect_reject(&R, 2, 2, RIG_H + 2, fix_len, NULL, FL_ERR_FORMAT, "UNMASK_SHARES: truncated");
    struct put32 c3 = {0, 3};
    expect_reject(&R, 2, 2, um_len, put_u32_at, &c3, FL_ERR_FORMAT, "entries, expected 4");
    expect_reject(&R, 2, 2, um_len - 1, fix_len, NULL, FL_ERR_FORMAT, "entries, expected 4");
    struct swap sw2 = {4, 38};
    expect_reject(&R, 2, 2, um_len, swap_first_two, &sw2, FL_ERR_PROTOCOL, "U2 neighbours");
    struct put32 v4 = {4 + 2 * 38, 4};
    expect_reject(&R, 2, 2, um_len, put_u32_at, &v4, FL_ERR_PROTOCOL, "U2 neighbours");
    struct put32 kind_s = {4 + 4, FL__SA_KIND_S};
    expect_reject(&R, 2, 2, um_len, put_u8_at, &kind_s, FL_ERR_PROTOCOL, "wrong share kind");
    struct put32 y_big = {4 + 5, 2};
    expect_reject(&R, 2, 2, um_len, put_u8_at, &y_big, FL_ERR_FORMAT, "out of field");
    uint8_t t_unmask_req = FL_SECAGG_MSG_UNMASK_REQ;
    expect_reject(&R, 2, 2, um_len, set_type, &t_unmask_req, FL_ERR_STATE, NULL);
    assert_int_equal(rig_send(&R, 2), FL_OK);
    expect_reject(&R, 2, 2, um_len, NULL, NULL, FL_ERR_EXISTS, NULL);
    rig_set_reply(&R, 2, NULL, 0);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_result(R.srv, NULL, NULL, NULL), FL_ERR_STATE);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_DONE);
    rig_check_sum(&R, 0x0F);

    /* -- done: nothing more is accepted, nothing is sent -- */
    uint8_t dummy[RIG_H + 4] = {0};
    fl__sa_put_header(dummy, FL_SECAGG_MSG_UNMASK_SHARES, R.round_id, 0, 4);
    assert_int_equal(fl_secagg_server_receive(R.srv, 0, dummy, sizeof(dummy)), FL_ERR_STATE);
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv), "already done"));
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_ERR_STATE);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(fl_secagg_server_outgoing(R.srv, i, &om, &ol), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_secagg_server_pending(R.srv), 0);
    rig_free(&R);
}

/* ---- active mode: consistency signatures ---- */

static void flip_sig(uint8_t *m, size_t *len, void *u) {
    (void)len;
    (void)u;
    m[RIG_H + 7] ^= 0x20;
}

/* n = 5, k = 4, t = 3; client 4 sends its masked input but never signs, so it is not asked
 * to unmask and its UNMASK_SHARES (forged from another's) is refused. */
static void test_reject_consistency_phase(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 1);
    rig_start(&R);
    /* A bad certificate or advertisement signature is refused (the client may resend). */
    struct put32 cert_bit = {96 + 3, 0}, sig_bit = {160 + 3, 0};
    cert_bit.v = R.reply[0][RIG_H + 99] ^ 1u;
    sig_bit.v = R.reply[0][RIG_H + 163] ^ 1u;
    size_t adv_len = R.reply_len[0];
    expect_reject(&R, 0, 0, adv_len, put_u8_at, &cert_bit, FL_ERR_CRYPTO, "certificate");
    expect_reject(&R, 0, 0, adv_len, put_u8_at, &sig_bit, FL_ERR_CRYPTO, "bad signature");
    expect_reject(&R, 0, 0, RIG_H + 64, fix_len, NULL, FL_ERR_FORMAT, "ADVERTISE: body");
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL); /* consistency requests answered */
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_CONSISTENCY);
    size_t sig_len = R.reply_len[0];
    assert_int_equal(sig_len, RIG_H + 64);
    expect_reject(&R, 0, 0, sig_len - 1, fix_len, NULL, FL_ERR_FORMAT, "CONSISTENCY_SIG: body");
    expect_reject(&R, 0, 0, sig_len, flip_sig, NULL, FL_ERR_CRYPTO, "bad signature");
    /* Client 1's signature presented as client 0's. */
    {
        uint8_t *m = rig_dup(R.reply[1], sig_len, 0);
        fl__put_u32le(m + 12, 0);
        assert_int_equal(fl_secagg_server_receive(R.srv, 0, m, sig_len), FL_ERR_CRYPTO);
        free(m);
    }
    rig_send_all(&R, 1u << 4);
    assert_int_equal(fl_secagg_server_pending(R.srv), 1);
    rig_step(&R, 0x0F);
    assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_UNMASK);
    /* Client 4 was not asked: its late signature is out of phase, and forged shares from it
     * are refused. */
    assert_int_equal(rig_send(&R, 4), FL_ERR_STATE);
    {
        uint8_t *m = rig_dup(R.reply[0], R.reply_len[0], 0);
        fl__put_u32le(m + 12, 4);
        assert_int_equal(fl_secagg_server_receive(R.srv, 4, m, R.reply_len[0]),
                         FL_ERR_PROTOCOL);
        free(m);
    }
    rig_send_all(&R, 1u << 4);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x1F); /* client 4 masked its input: it is in the sum */
    rig_free(&R);
}

/* Narrow values: with b = 12 each element takes 2 bytes and the top 4 bits must be zero. */
static void test_reject_masked_value_range(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 4, 3, 3, 2, 12, 0);
    rig_start(&R);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    size_t len = R.reply_len[3];
    assert_int_equal(len, RIG_H + 3 * 2);
    struct put32 hi = {2 * 2 + 1, R.reply[3][RIG_H + 5] | 0x10u};
    expect_reject(&R, 3, 3, len, put_u8_at, &hi, FL_ERR_FORMAT, "value >= 2^12");
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x0F);
    rig_free(&R);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reject_each_phase),
        cmocka_unit_test(test_reject_consistency_phase),
        cmocka_unit_test(test_reject_masked_value_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
