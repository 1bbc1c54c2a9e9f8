/* The client's checks on server messages, phase by phase: a message that does not parse
 * (FL_ERR_FORMAT, FL_ERR_TOO_LARGE), belongs to another round or phase (FL_ERR_STATE) or
 * to another client (FL_ERR_PROTOCOL) is refused with no state change, and the client then
 * accepts the honest message; a well-formed message that breaks the protocol (parameters,
 * neighbour lists, too few neighbours or signatures, a survivor set that drops us) fails
 * the client for good (sticky), after which every call returns the same code. */
#include "sa_rig.h"

/* Brings a round to `phase` on the server with its messages ready and not yet handled. */
static void advance_to(struct rig *R, fl_secagg_phase phase, uint32_t skip_send) {
    for (;;) {
        rig_send_all(R, skip_send);
        assert_int_equal(fl_secagg_server_advance(R->srv), FL_OK);
        if (fl_secagg_server_phase(R->srv) == phase)
            return;
        rig_clients_handle(R, RIG_ALL & ~skip_send);
    }
}

/* Hands client i a copy of its server message cut or grown to len (body length fixed),
 * after `edit`; returns the client's code. */
static fl_status feed(struct rig *R, uint32_t i, size_t len, void (*edit)(uint8_t *m, void *u),
                      void *u) {
    size_t ml;
    uint8_t *m = rig_outgoing(R, i, &ml);
    if (len == 0)
        len = ml;
    if (edit)
        edit(m, u);
    rig_fix_len(m, len);
    const uint8_t *r;
    size_t rl;
    fl_status st = fl_secagg_client_handle(R->cl[i], m, len, &r, &rl);
    free(m);
    return st;
}

/* A non-sticky refusal: the code, the message, and the phase unchanged. */
static void expect_refused(struct rig *R, uint32_t i, size_t len,
                           void (*edit)(uint8_t *m, void *u), void *u, fl_status want,
                           const char *part) {
    fl_secagg_phase ph = fl_secagg_client_phase(R->cl[i]);
    fl_status st = feed(R, i, len, edit, u);
    const char *em = fl_secagg_client_errmsg(R->cl[i]);
    if (st != want || (part && !strstr(em, part)))
        fail_msg("want %s '%s', got %s '%s'", fl_status_name(want), part ? part : "",
                 fl_status_name(st), em);
    assert_int_equal(fl_secagg_client_phase(R->cl[i]), ph);
}

/* A sticky failure: the code and message, the phase FAILED, and every later call gives the
 * same code. */
static void expect_failed(struct rig *R, uint32_t i, size_t len, void (*edit)(uint8_t *m, void *u),
                          void *u, fl_status want, const char *part) {
    fl_status st = feed(R, i, len, edit, u);
    const char *em = fl_secagg_client_errmsg(R->cl[i]);
    if (st != want || (part && !strstr(em, part)))
        fail_msg("want %s '%s', got %s '%s'", fl_status_name(want), part ? part : "",
                 fl_status_name(st), em);
    assert_int_equal(fl_secagg_client_phase(R->cl[i]), FL_SECAGG_PHASE_FAILED);
    assert_int_equal(feed(R, i, 0, NULL, NULL), want); /* the honest message: too late */
    const uint8_t *o;
    size_t ol;
    assert_int_equal(fl_secagg_client_start(R->cl[i], &o, &ol), want);
    assert_int_equal(fl_secagg_client_set_input(R->cl[i], R->x[i], R->d), FL_ERR_MISUSE);
}

/* ---- edits (body offsets) ---- */

struct at {
    size_t off;
    uint32_t v;
};
static void put32(uint8_t *m, void *u) {
    struct at *a = u;
    fl__put_u32le(m + RIG_H + a->off, a->v);
}
static void put8(uint8_t *m, void *u) {
    struct at *a = u;
    m[RIG_H + a->off] = (uint8_t)a->v;
}
static void xor8(uint8_t *m, void *u) {
    struct at *a = u;
    m[RIG_H + a->off] ^= (uint8_t)a->v;
}
static void hdr_round(uint8_t *m, void *u) {
    (void)u;
    fl__put_u64le(m + 4, fl__get_u64le(m + 4) ^ 1u);
}
static void hdr_client(uint8_t *m, void *u) {
    fl__put_u32le(m + 12, *(uint32_t *)u);
}
static void hdr_type(uint8_t *m, void *u) {
    m[3] = *(uint8_t *)u;
}
struct swap {
    size_t off, size;
};
static void swap2(uint8_t *m, void *u) {
    struct swap *s = u;
    uint8_t tmp[256];
    uint8_t *a = m + RIG_H + s->off, *b = a + s->size;
    memcpy(tmp, a, s->size);
    memcpy(a, b, s->size);
    memcpy(b, tmp, s->size);
}

#define KEYS_ENTRY (4 + 64) /* semi-honest: index, c_pk, s_pk */
#define CT_ENTRY (4 + 90)

/* ---- KEYS ---- */

static void test_keys_refused(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    /* Before start() there is nothing to answer. */
    uint8_t junk[RIG_H] = {0};
    const uint8_t *o;
    size_t ol;
    assert_int_equal(fl_secagg_client_handle(R.cl[0], junk, sizeof(junk), &o, &ol),
                     FL_ERR_STATE);
    assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[0]), "start() first"));
    rig_start(&R);
    assert_int_equal(fl_secagg_client_start(R.cl[0], &o, &ol), FL_ERR_STATE); /* twice */
    /* The input may still be replaced after start(), before KEYS. */
    assert_int_equal(fl_secagg_client_phase(R.cl[0]), FL_SECAGG_PHASE_SHARE_KEYS);
    assert_int_equal(fl_secagg_client_set_input(R.cl[0], R.x[0], R.d), FL_OK);
    advance_to(&R, FL_SECAGG_PHASE_SHARE_KEYS, 0);
    size_t kl;
    free(rig_outgoing(&R, 0, &kl));
    assert_int_equal(kl, RIG_H + 56 + 4 * KEYS_ENTRY);
    /* Argument checks. */
    assert_int_equal(fl_secagg_client_handle(NULL, junk, 1, &o, &ol), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], NULL, 1, &o, &ol), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], junk, 1, NULL, &ol), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], junk, 1, &o, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], NULL, 0, &o, &ol), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], junk, 5, &o, &ol), FL_ERR_FORMAT);
    /* Header: round, type, recipient, size. */
    uint32_t one = 1;
    uint8_t t_ct = FL_SECAGG_MSG_CIPHERTEXTS;
    expect_refused(&R, 0, 0, hdr_round, NULL, FL_ERR_STATE, "round");
    expect_refused(&R, 0, 0, hdr_type, &t_ct, FL_ERR_STATE, "out of phase");
    expect_refused(&R, 0, 0, hdr_client, &one, FL_ERR_PROTOCOL, "client 1");
    expect_refused(&R, 0, kl + 1, NULL, NULL, FL_ERR_TOO_LARGE, "exceeds limit");
    /* Truncated anywhere in the fixed part: each field read fails in turn. */
    static const size_t cuts[] = {0, 3, 4, 11, 12, 13, 14, 15, 16, 19, 20, 51, 52, 55};
    for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++)
        expect_refused(&R, 0, RIG_H + cuts[c], NULL, NULL, FL_ERR_FORMAT, "KEYS: truncated");
    struct at pad = {14, 2}, pad2 = {15, 7}, cnt5 = {52, 5}, cnt3 = {52, 3};
    expect_refused(&R, 0, 0, put8, &pad, FL_ERR_FORMAT, "padding");
    expect_refused(&R, 0, 0, put8, &pad2, FL_ERR_FORMAT, "padding");
    expect_refused(&R, 0, 0, put32, &cnt5, FL_ERR_FORMAT, "do not fit");
    expect_refused(&R, 0, 0, put32, &cnt3, FL_ERR_FORMAT, "do not fit");
    expect_refused(&R, 0, kl - 1, NULL, NULL, FL_ERR_FORMAT, "do not fit");
    /* The honest message still works after all of that. */
    rig_clients_handle(&R, RIG_ALL);
    /* A second KEYS (replayed) is now out of phase. */
    expect_refused(&R, 0, 0, NULL, NULL, FL_ERR_STATE, "out of phase");
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x1F);
    /* The client is done: further messages are refused, its phase stays DONE. */
    assert_int_equal(fl_secagg_client_phase(R.cl[0]), FL_SECAGG_PHASE_DONE);
    assert_int_equal(fl_secagg_client_handle(R.cl[0], junk, sizeof(junk), &o, &ol),
                     FL_ERR_STATE);
    assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[0]), "already done"));
    assert_int_equal(fl_secagg_client_set_input(R.cl[0], R.x[0], R.d), FL_ERR_MISUSE);
    rig_free(&R);
}

/* Sticky failures on KEYS, each in a fresh round. */
static void keys_sticky(void (*edit)(uint8_t *m, void *u), void *u, size_t cut, fl_status want,
                        const char *part) {
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    rig_start(&R);
    advance_to(&R, FL_SECAGG_PHASE_SHARE_KEYS, 0);
    expect_failed(&R, 0, cut, edit, u, want, part);
    rig_free(&R);
}

static void test_keys_sticky(void **state) {
    (void)state;
    struct at n6 = {0, 6}, k2 = {4, 2}, t2 = {8, 2}, b16 = {12, 16}, act = {13, 1}, d5 = {16, 5};
    keys_sticky(put32, &n6, 0, FL_ERR_PROTOCOL, "parameters differ");
    keys_sticky(put32, &k2, 0, FL_ERR_PROTOCOL, "parameters differ");
    keys_sticky(put32, &t2, 0, FL_ERR_PROTOCOL, "parameters differ");
    keys_sticky(put8, &b16, 0, FL_ERR_PROTOCOL, "parameters differ");
    keys_sticky(put8, &act, 0, FL_ERR_PROTOCOL, "parameters differ");
    keys_sticky(put32, &d5, 0, FL_ERR_PROTOCOL, "parameters differ");
    /* Neighbour lists: out of order, ourselves, an index outside the round. */
    struct swap sw = {56, KEYS_ENTRY};
    struct at self = {56, 0}, far = {56 + KEYS_ENTRY, 77};
    keys_sticky(swap2, &sw, 0, FL_ERR_PROTOCOL, "sorted subset");
    keys_sticky(put32, &self, 0, FL_ERR_PROTOCOL, "sorted subset");
    keys_sticky(put32, &far, 0, FL_ERR_PROTOCOL, "sorted subset");
    /* One neighbour left: with t = 3 the client cannot split its secrets. */
    struct at one = {52, 1};
    keys_sticky(put32, &one, RIG_H + 56 + KEYS_ENTRY, FL_ERR_ABORTED, "fewer than t");
}

/* ---- CIPHERTEXTS ---- */

/* Client 3 has no input when CIPHERTEXTS arrives: refused (not sticky); it may set the
 * input in that phase and answer. */
static void test_ciphertexts_refused(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    for (uint32_t i = 0; i < 5; i++) {
        const uint8_t *m;
        size_t ml;
        if (i != 3)
            assert_int_equal(fl_secagg_client_set_input(R.cl[i], R.x[i], R.d), FL_OK);
        assert_int_equal(fl_secagg_client_start(R.cl[i], &m, &ml), FL_OK);
        rig_set_reply(&R, i, m, ml);
    }
    advance_to(&R, FL_SECAGG_PHASE_MASKED_INPUT, 0);
    size_t cl;
    free(rig_outgoing(&R, 3, &cl));
    assert_int_equal(cl, RIG_H + 4 + 4 * CT_ENTRY);
    expect_refused(&R, 3, 0, NULL, NULL, FL_ERR_MISUSE, "input not set");
    expect_refused(&R, 3, RIG_H + 3, NULL, NULL, FL_ERR_FORMAT, "CIPHERTEXTS: truncated");
    struct at c5 = {0, 5}, c3 = {0, 3};
    expect_refused(&R, 3, 0, put32, &c5, FL_ERR_FORMAT, "do not fit");
    expect_refused(&R, 3, 0, put32, &c3, FL_ERR_FORMAT, "do not fit");
    expect_refused(&R, 3, cl + 1, NULL, NULL, FL_ERR_TOO_LARGE, NULL);
    /* Input: wrong length, out of range, then right. */
    uint32_t big[4] = {0, 0, 0, 0};
    assert_int_equal(fl_secagg_client_set_input(R.cl[3], big, 3), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_set_input(R.cl[3], NULL, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_set_input(NULL, big, 4), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_client_phase(R.cl[3]), FL_SECAGG_PHASE_MASKED_INPUT);
    assert_int_equal(fl_secagg_client_set_input(R.cl[3], R.x[3], R.d), FL_OK);
    rig_clients_handle(&R, RIG_ALL);
    /* The input is spent: it cannot be replaced any more. */
    assert_int_equal(fl_secagg_client_set_input(R.cl[3], R.x[3], R.d), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[3]), "already used"));
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x1F);
    rig_free(&R);
}

/* Inputs are values of Z_{2^b}: a larger one is refused before anything is kept. */
static void test_input_range(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 4, 3, 3, 2, 10, 0);
    uint32_t x[3] = {1, 1023, 1024};
    assert_int_equal(fl_secagg_client_set_input(R.cl[0], x, 3), FL_ERR_RANGE);
    assert_non_null(strstr(fl_secagg_client_errmsg(R.cl[0]), "x[2] = 1024"));
    x[2] = 5;
    assert_int_equal(fl_secagg_client_set_input(R.cl[0], x, 3), FL_OK);
    /* Setting it again before use replaces it. */
    assert_int_equal(fl_secagg_client_set_input(R.cl[0], R.x[0], 3), FL_OK);
    rig_start(&R);
    advance_to(&R, FL_SECAGG_PHASE_UNMASK, 0);
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x0F);
    rig_free(&R);
}

/* Client 4 never advertises: the others' CIPHERTEXTS may only name 1..3. */
static void ct_sticky(void (*edit)(uint8_t *m, void *u), void *u, size_t cut, fl_status want,
                      const char *part) {
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    rig_start(&R);
    advance_to(&R, FL_SECAGG_PHASE_MASKED_INPUT, 1u << 4);
    expect_failed(&R, 0, cut, edit, u, want, part);
    rig_free(&R);
}

static void test_ciphertexts_sticky(void **state) {
    (void)state;
    struct at from4 = {4 + 2 * CT_ENTRY, 4}, self = {4, 0};
    struct swap sw = {4, CT_ENTRY};
    ct_sticky(put32, &from4, 0, FL_ERR_PROTOCOL, "sorted subset of our neighbours");
    ct_sticky(put32, &self, 0, FL_ERR_PROTOCOL, "sorted subset of our neighbours");
    ct_sticky(swap2, &sw, 0, FL_ERR_PROTOCOL, "sorted subset of our neighbours");
    struct at one = {0, 1};
    ct_sticky(put32, &one, RIG_H + 4 + CT_ENTRY, FL_ERR_ABORTED, "fewer than t");
    /* A ciphertext from the right sender that does not open. */
    struct at flip = {4 + 4 + 10, 0x55};
    ct_sticky(xor8, &flip, 0, FL_ERR_CRYPTO, "does not open");
}

/* ---- CONSISTENCY_REQ and UNMASK_REQ (active mode) ---- */

/* Bitmap messages: n = 5 (one byte, bits 5..7 are padding), offsets: n u32 at 0, bitmap
 * at 4, then (UNMASK_REQ) the signature count at 5 and the signatures at 9. */
static void test_bitmap_refused(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 1);
    rig_start(&R);
    advance_to(&R, FL_SECAGG_PHASE_CONSISTENCY, 0);
    size_t ql;
    free(rig_outgoing(&R, 0, &ql));
    assert_int_equal(ql, RIG_H + 5);
    struct at n4 = {0, 4}, pad = {4, 0x3F};
    expect_refused(&R, 0, RIG_H + 2, NULL, NULL, FL_ERR_FORMAT, "CONSISTENCY_REQ: truncated");
    expect_refused(&R, 0, RIG_H + 4, NULL, NULL, FL_ERR_FORMAT, "CONSISTENCY_REQ: truncated");
    expect_refused(&R, 0, 0, put32, &n4, FL_ERR_FORMAT, "bitmap for 4 clients");
    expect_refused(&R, 0, 0, put8, &pad, FL_ERR_FORMAT, "padding bits");
    expect_refused(&R, 0, ql + 1, NULL, NULL, FL_ERR_TOO_LARGE, NULL);
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    size_t ul;
    free(rig_outgoing(&R, 0, &ul));
    assert_int_equal(ul, RIG_H + 9 + 4 * (4 + 64));
    expect_refused(&R, 0, RIG_H + 7, NULL, NULL, FL_ERR_FORMAT, "UNMASK_REQ: truncated");
    expect_refused(&R, 0, RIG_H + 3, NULL, NULL, FL_ERR_FORMAT, "UNMASK_REQ: truncated");
    struct at c5 = {5, 5}, c3 = {5, 3};
    expect_refused(&R, 0, 0, put32, &c5, FL_ERR_FORMAT, "do not fit");
    expect_refused(&R, 0, 0, put32, &c3, FL_ERR_FORMAT, "do not fit");
    expect_refused(&R, 0, 0, put8, &pad, FL_ERR_FORMAT, "padding bits");
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x1F);
    rig_free(&R);
}

/* Sticky failures at the consistency or unmask request of client 0, each in a fresh
 * active round (semi-honest when active == 0). */
static void bitmap_sticky(int active, fl_secagg_phase at, void (*edit)(uint8_t *m, void *u),
                          void *u, size_t cut, fl_status want, const char *part) {
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, active);
    rig_start(&R);
    advance_to(&R, at, 0);
    expect_failed(&R, 0, cut, edit, u, want, part);
    rig_free(&R);
}

static void test_bitmap_sticky(void **state) {
    (void)state;
    /* Survivor sets: without us; with one neighbour only (t = 3 needs two). */
    struct at no_self = {4, 0x1E}, lonely = {4, 0x03};
    bitmap_sticky(1, FL_SECAGG_PHASE_CONSISTENCY, put8, &no_self, 0, FL_ERR_PROTOCOL,
                  "claims this client dropped");
    bitmap_sticky(1, FL_SECAGG_PHASE_CONSISTENCY, put8, &lonely, 0, FL_ERR_ABORTED,
                  "CONSISTENCY_REQ: 2 survivors around us, t = 3");
    bitmap_sticky(0, FL_SECAGG_PHASE_UNMASK, put8, &lonely, 0, FL_ERR_ABORTED,
                  "UNMASK_REQ: 2 survivors around us, t = 3");
    /* Active unmask request: the set must be the one signed, the signer list sorted and
     * within the set and our neighbours, each signature valid, and at least t - 1 of them. */
    bitmap_sticky(1, FL_SECAGG_PHASE_UNMASK, put8, &lonely, 0, FL_ERR_PROTOCOL,
                  "differs from the one signed");
    struct at none = {5, 0}, one = {5, 1}, signer_self = {9, 0}, sig_bit = {9 + 4 + 5, 0x04};
    struct swap sw = {9, 68};
    bitmap_sticky(1, FL_SECAGG_PHASE_UNMASK, put32, &none, RIG_H + 9, FL_ERR_ABORTED,
                  "fewer than t consistency signatures");
    bitmap_sticky(1, FL_SECAGG_PHASE_UNMASK, put32, &one, RIG_H + 9 + 68, FL_ERR_ABORTED,
                  "fewer than t consistency signatures");
    bitmap_sticky(1, FL_SECAGG_PHASE_UNMASK, put32, &signer_self, 0, FL_ERR_PROTOCOL,
                  "bad signer list");
    bitmap_sticky(1, FL_SECAGG_PHASE_UNMASK, swap2, &sw, 0, FL_ERR_PROTOCOL, "bad signer list");
    bitmap_sticky(1, FL_SECAGG_PHASE_UNMASK, xor8, &sig_bit, 0, FL_ERR_CRYPTO,
                  "bad consistency signature");
    /* A signer outside the survivor set: client 4 masks nothing (drops), yet the request
     * names it. */
    {
        struct rig R;
        rig_init(&R, 5, 4, 4, 3, 32, 1);
        rig_start(&R);
        advance_to(&R, FL_SECAGG_PHASE_MASKED_INPUT, 0);
        rig_clients_handle(&R, 0x0F);
        rig_send_all(&R, 0);
        assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
        rig_clients_handle(&R, 0x0F);
        rig_send_all(&R, 0);
        assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
        assert_int_equal(fl_secagg_server_phase(R.srv), FL_SECAGG_PHASE_UNMASK);
        struct at to4 = {9 + 2 * 68, 4};
        expect_failed(&R, 0, 0, put32, &to4, FL_ERR_PROTOCOL, "bad signer list");
        rig_free(&R);
    }
    /* A signer that never advertised (not a neighbour in U1 for us). */
    {
        struct rig R;
        rig_init(&R, 5, 4, 4, 3, 32, 1);
        rig_start(&R);
        advance_to(&R, FL_SECAGG_PHASE_UNMASK, 1u << 4);
        struct at to4 = {9 + 2 * 68, 4};
        expect_failed(&R, 0, 0, put32, &to4, FL_ERR_PROTOCOL, "bad signer list");
        rig_free(&R);
    }
    /* Semi-honest: signatures are not expected at all. */
    struct at one_sig = {5, 1};
    struct rig R;
    rig_init(&R, 5, 4, 4, 3, 32, 0);
    rig_start(&R);
    advance_to(&R, FL_SECAGG_PHASE_UNMASK, 0);
    expect_refused(&R, 0, 0, put32, &one_sig, FL_ERR_FORMAT, "signatures do not fit");
    rig_free(&R);
}

/* n = 8: the bitmap's last byte has no padding bits; every bit is a client. */
static void test_bitmap_whole_byte(void **state) {
    (void)state;
    struct rig R;
    rig_init(&R, 8, 3, 7, 3, 32, 1);
    rig_start(&R);
    advance_to(&R, FL_SECAGG_PHASE_CONSISTENCY, 0);
    size_t ql;
    free(rig_outgoing(&R, 0, &ql));
    assert_int_equal(ql, RIG_H + 4 + 1);
    rig_clients_handle(&R, RIG_ALL);
    advance_to(&R, FL_SECAGG_PHASE_UNMASK, 0);
    rig_clients_handle(&R, RIG_ALL);
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0xFF);
    rig_free(&R);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_refused),       cmocka_unit_test(test_keys_sticky),
        cmocka_unit_test(test_ciphertexts_refused), cmocka_unit_test(test_input_range),
        cmocka_unit_test(test_ciphertexts_sticky), cmocka_unit_test(test_bitmap_refused),
        cmocka_unit_test(test_bitmap_sticky),      cmocka_unit_test(test_bitmap_whole_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
