/* Active mode with device-bound (v2) certificates (cfg.device_certs = 1): the authority
 * signs ("flotilla-secagg-cert-v2" || device_id || vk) once per device, and the device id
 * travels in the ADVERTISE and in KEYS. Checked here: exact sums on the complete and a
 * sparse graph with dropouts on both backends and mixed; certificates for another device,
 * of the other kind, or a tampered device id refused with FL_ERR_CRYPTO by the server
 * (ADVERTISE) and by the client (KEYS); one device id twice among a client's neighbours, or
 * its own, refused with FL_ERR_PROTOCOL; fl_secagg_server_device_id; a server lying about
 * dropouts still caught; v1 and v2 peers refusing each other's messages; and a
 * known-answer test of the statement and of its Ed25519 signature on both backends. */
#include <stddef.h>

#include "sa_rig.h"
#include "test_sa_harness.h"

static const struct fl__sa_crypto *SOD, *MBED; /* MBED NULL when mbedTLS is not built */

static int setup(void **state) {
    (void)state;
    SOD = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    MBED = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    return SOD ? 0 : -1;
}

/* Backends to run the rig tests on: sodium, and mbedTLS when built. */
static int nbackends(void) {
    return MBED ? 2 : 1;
}
static fl_secagg_backend backend_at(int i) {
    return i ? FL_SECAGG_BACKEND_MBEDTLS : FL_SECAGG_BACKEND_SODIUM;
}

/* ---- a rig with chosen certificates ---- */

enum {
    CERT_OK = 0,    /* v2 over its own device id (v1 over its index in v1 mode) */
    CERT_OTHER_DEV, /* v2 over another device id; the identity carries its own */
    CERT_V1,        /* v1 (index) certificate */
    CERT_V2,        /* v2 certificate (presented in a v1-mode round) */
    CERT_DUP0       /* a second key certified for client 0's device id */
};

/* rig_init for active mode with device_certs as given, every party on backend be, and client
 * i's certificate of kind[i] (NULL = all CERT_OK). The round id, graph seed and inputs are
 * those of rig_init(active = 1), so a v1 and a v2 rig of the same shape can swap messages. */
static void rig_init_dev(struct rig *R, uint32_t n, uint32_t k, uint32_t t, fl_secagg_backend be,
                         int device_certs, const int *kind) {
    const uint32_t d = 4;
    assert_true(n <= RIG_MAX_N);
    memset(R, 0, sizeof(*R));
    fl_secagg_config_init(&R->cfg);
    R->cfg.num_clients = n;
    R->cfg.dim = d;
    R->cfg.degree = k;
    R->cfg.threshold = t;
    R->cfg.bits = 32;
    R->cfg.active = 1;
    R->cfg.device_certs = device_certs;
    R->cfg.backend = be;
    R->n = n;
    R->d = d;
    R->round_id = 0xABC0000000000000ull + n * 1000 + k * 10 + 1;
    assert_int_equal(fl_secagg_signing_keygen(R->authority_vk, R->authority_sk, be), FL_OK);
    memcpy(R->cfg.verify_key, R->authority_vk, 32);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t vk[32], other[FL_SECAGG_DEVICE_ID_BYTES];
        fl_secagg_identity *id = &R->ids[i];
        id->struct_size = sizeof(*id);
        sa_device_id(id->device_id, i);
        assert_int_equal(fl_secagg_signing_keygen(vk, id->signing_key, be), FL_OK);
        int kd = kind ? kind[i] : CERT_OK;
        if (kd == CERT_OK)
            kd = device_certs ? CERT_V2 : CERT_V1;
        switch (kd) {
        case CERT_V1:
            assert_int_equal(fl_secagg_cert_issue(id->cert, R->authority_sk, i, vk, be), FL_OK);
            break;
        case CERT_V2:
            assert_int_equal(
                fl_secagg_cert_issue_device(id->cert, R->authority_sk, id->device_id, vk, be),
                FL_OK);
            break;
        case CERT_OTHER_DEV:
            sa_device_id(other, i + 100);
            assert_int_equal(fl_secagg_cert_issue_device(id->cert, R->authority_sk, other, vk, be),
                             FL_OK);
            break;
        case CERT_DUP0:
            sa_device_id(id->device_id, 0);
            assert_int_equal(
                fl_secagg_cert_issue_device(id->cert, R->authority_sk, id->device_id, vk, be),
                FL_OK);
            break;
        }
    }
    assert_int_equal(fl_secagg_config_resolve(&R->cfg, NULL, 0), FL_OK);
    for (int i = 0; i < 32; i++)
        R->gseed[i] = (uint8_t)(i * 37 + n);
    assert_int_equal(fl_secagg_server_create(&R->srv, &R->cfg, R->round_id, R->gseed, NULL), FL_OK);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(
            fl_secagg_client_create(&R->cl[i], &R->cfg, R->round_id, i, &R->ids[i], NULL), FL_OK);
        for (uint32_t j = 0; j < d; j++)
            R->x[i][j] = i * 1009u + j * 7919u + 13u;
    }
}

/* Runs the rest of the round (every pending reply accepted) and checks the sum. */
static void rig_finish(struct rig *R, uint32_t in_sum) {
    for (;;) {
        rig_send_all(R, 0);
        rig_step(R, RIG_ALL);
        if (fl_secagg_server_phase(R->srv) == FL_SECAGG_PHASE_DONE)
            break;
    }
    rig_check_sum(R, in_sum);
}

/* Offset of entry j's advertisement in a KEYS message (header included). */
static size_t keys_entry(uint32_t j, size_t adv) {
    return RIG_H + 56 + (size_t)j * (4 + adv) + 4;
}

static void expect_client_fails(struct rig *R, uint32_t i, const uint8_t *m, size_t ml,
                                fl_status want, const char *msg_part) {
    const uint8_t *r;
    size_t rl;
    assert_int_equal(fl_secagg_client_handle(R->cl[i], m, ml, &r, &rl), want);
    assert_int_equal(fl_secagg_client_phase(R->cl[i]), FL_SECAGG_PHASE_FAILED);
    if (!strstr(fl_secagg_client_errmsg(R->cl[i]), msg_part))
        fail_msg("client %u: '%s' lacks '%s'", i, fl_secagg_client_errmsg(R->cl[i]), msg_part);
    /* Sticky: the honest message is refused too. */
    const uint8_t *h;
    size_t hl;
    assert_int_equal(fl_secagg_server_outgoing(R->srv, i, &h, &hl), FL_OK);
    assert_int_equal(fl_secagg_client_handle(R->cl[i], h, hl, &r, &rl), want);
}

/* ---- known answers ---- */

static void unhex(uint8_t *out, const char *hex, size_t n) {
    assert_int_equal(strlen(hex), 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* Authority = RFC 8032 section 7.1 TEST 1 key, client key = TEST 2's public key, device id =
 * 00 01 .. 1f. The statement is written from the spec; the signatures were computed with
 * Python's `cryptography` (OpenSSL's Ed25519), an implementation apart from both backends. */
static void test_kat(void **state) {
    (void)state;
    uint8_t ask[64], avk[32], vk[32], did[32], stmt[FL__SA_STMT_BYTES], want[87];
    unhex(ask, "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", 32);
    unhex(avk, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", 32);
    memcpy(ask + 32, avk, 32);
    unhex(vk, "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", 32);
    for (int i = 0; i < 32; i++)
        did[i] = (uint8_t)i;
    /* "flotilla-secagg-cert-v2" (23 bytes, no NUL) || device_id (32) || vk (32) */
    memcpy(want, "flotilla-secagg-cert-v2", 23);
    memcpy(want + 23, did, 32);
    memcpy(want + 55, vk, 32);
    uint8_t want_hex[87];
    unhex(want_hex,
          "666c6f74696c6c612d7365636167672d636572742d7632000102030405060708090a0b0c0d0e0f1011"
          "12131415161718191a1b1c1d1e1f3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55"
          "f12af4660c",
          87);
    assert_memory_equal(want, want_hex, 87);
    assert_int_equal(fl__sa_cert_statement_device(stmt, sizeof(stmt), did, vk), 87);
    assert_memory_equal(stmt, want, 87);
    assert_int_equal(fl__sa_cert_statement_device(stmt, 86, did, vk), 0);

    uint8_t sig2[64], sig1[64];
    unhex(sig2,
          "5ceeb7bd4a5610245bdc6c7e935ca4e9352a8745b842a2ec7942e58934e6d9423e4fc9bcf3dec9c2c53"
          "110a920a3cad16a1eedc4c500467c860405048a0f980b",
          64);
    /* The v1 certificate of the same key for client index 7 is unchanged. */
    unhex(sig1,
          "1ae9453aa6e22bd915f0ab926e627f6c5f00ca4bc6f9c02048ff8d0fecf273c8564f30322c2396adf74"
          "abceb848ba317923c04ceab7ce077681557d55807c300",
          64);
    for (int b = 0; b < nbackends(); b++) {
        const struct fl__sa_crypto *cr = b ? MBED : SOD;
        uint8_t cert[64];
        assert_int_equal(fl_secagg_cert_issue_device(cert, ask, did, vk, backend_at(b)), FL_OK);
        assert_memory_equal(cert, sig2, 64);
        assert_int_equal(fl_secagg_cert_issue(cert, ask, 7, vk, backend_at(b)), FL_OK);
        assert_memory_equal(cert, sig1, 64);
        /* Each backend verifies the signature, and refuses it over a flipped statement
         * (another device id) and over the v1 statement. */
        assert_int_equal(cr->ed25519_verify(sig2, want, 87, avk), 0);
        stmt[23 + 5] ^= 1;
        assert_int_not_equal(cr->ed25519_verify(sig2, stmt, 87, avk), 0);
        stmt[23 + 5] ^= 1;
        size_t l1 = fl__sa_cert_statement(stmt, sizeof(stmt), 7, vk);
        assert_int_not_equal(cr->ed25519_verify(sig2, stmt, l1, avk), 0);
        assert_int_equal(cr->ed25519_verify(sig1, stmt, l1, avk), 0);
        fl__sa_cert_statement_device(stmt, sizeof(stmt), did, vk);
    }
}

/* ---- configuration and arguments ---- */

struct logcap {
    char last[256];
};
static void log_cb(void *user, fl_log_level level, const char *msg) {
    (void)level;
    snprintf(((struct logcap *)user)->last, sizeof(((struct logcap *)user)->last), "%s", msg);
}

static void test_config_and_args(void **state) {
    (void)state;
    assert_int_equal(fl_secagg_device_id_bytes(), FL_SECAGG_DEVICE_ID_BYTES);
    assert_int_equal(FL_SECAGG_DEVICE_ID_BYTES, 32);
    fl_secagg_config c;
    char msg[160];
    fl_secagg_config_init(&c);
    assert_int_equal(c.device_certs, 0);
    c.num_clients = 10;
    c.dim = 1;
    c.degree = 9;
    c.device_certs = 1;
    assert_int_equal(fl_secagg_config_resolve(&c, msg, sizeof(msg)), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "config.device_certs"));
    assert_non_null(strstr(msg, "active"));
    c.active = 1;
    c.device_certs = 2;
    assert_int_equal(fl_secagg_config_resolve(&c, msg, sizeof(msg)), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "config.device_certs"));
    c.device_certs = 1;
    assert_int_equal(fl_secagg_config_resolve(&c, msg, sizeof(msg)), FL_OK);
    /* The KEYS limit grows by 32 bytes per neighbour (KEYS is the largest message here). */
    fl_secagg_config v1 = c;
    v1.device_certs = 0;
    assert_int_equal(fl_secagg_max_message_bytes(&c) - fl_secagg_max_message_bytes(&v1),
                     9 * FL_SECAGG_DEVICE_ID_BYTES);

    /* A caller built before device_certs: the field is not read (means 0), nor written. */
    struct {
        fl_secagg_config c;
        int guard;
    } old;
    memset(&old, 0, sizeof(old));
    fl_secagg_config_init(&old.c);
    old.c.struct_size = offsetof(fl_secagg_config, device_certs);
    old.c.num_clients = 10;
    old.c.dim = 1;
    old.c.degree = 9;
    old.c.active = 1;
    old.c.device_certs = 7; /* beyond the caller's struct: ignored (7 would be refused) */
    old.guard = 0x5A5A;
    assert_int_equal(fl_secagg_config_resolve(&old.c, msg, sizeof(msg)), FL_OK);
    assert_int_equal(old.c.device_certs, 7);
    assert_int_equal(old.c.struct_size, offsetof(fl_secagg_config, device_certs));
    assert_int_equal(old.guard, 0x5A5A);
    /* Read as 0: the v1 sizes. */
    assert_int_equal(fl_secagg_max_message_bytes(&old.c), fl_secagg_max_message_bytes(&v1));
    fl_secagg_server *srv = NULL;
    assert_int_equal(fl_secagg_server_create(&srv, &old.c, 1, NULL, NULL), FL_OK);
    uint8_t out[32];
    assert_int_equal(fl_secagg_server_device_id(srv, 0, out), FL_ERR_MISUSE); /* not v2 */
    fl_secagg_server_destroy(srv);

    /* Client create: v2 needs a set device id in an identity that has the field. */
    uint8_t avk[32], ask[64], vk[32];
    assert_int_equal(fl_secagg_signing_keygen(avk, ask, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    memcpy(c.verify_key, avk, 32);
    struct logcap lc = {{0}};
    c.logger.fn = log_cb;
    c.logger.user = &lc;
    c.logger.min_level = FL_LOG_DEBUG;
    fl_secagg_identity id;
    memset(&id, 0, sizeof(id));
    id.struct_size = sizeof(id);
    assert_int_equal(fl_secagg_signing_keygen(vk, id.signing_key, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    fl_secagg_client *cl = NULL;
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, &id, NULL), FL_ERR_MISUSE);
    assert_null(cl);
    assert_non_null(strstr(lc.last, "device_id"));
    sa_device_id(id.device_id, 0);
    assert_int_equal(
        fl_secagg_cert_issue_device(id.cert, ask, id.device_id, vk, FL_SECAGG_BACKEND_SODIUM),
        FL_OK);
    id.struct_size = offsetof(fl_secagg_identity, device_id); /* an older caller's identity */
    lc.last[0] = 0;
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, &id, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(lc.last, "device_id"));
    id.struct_size = sizeof(id) + 1;
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, &id, NULL), FL_ERR_MISUSE);
    id.struct_size = sizeof(id);
    assert_int_equal(fl_secagg_client_create(&cl, &c, 1, 0, &id, NULL), FL_OK);
    fl_secagg_client_destroy(cl);
    /* In v1 mode the older identity is fine (its device id is never read). */
    id.struct_size = offsetof(fl_secagg_identity, device_id);
    assert_int_equal(fl_secagg_client_create(&cl, &v1, 1, 0, &id, NULL), FL_OK);
    fl_secagg_client_destroy(cl);

    /* fl_secagg_cert_issue_device arguments. */
    uint8_t cert[64], zero[32] = {0};
    const fl_secagg_backend nope = (fl_secagg_backend)99;
    assert_int_equal(fl_secagg_cert_issue_device(NULL, ask, id.device_id, vk, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue_device(cert, NULL, id.device_id, vk, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue_device(cert, ask, NULL, vk, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue_device(cert, ask, id.device_id, NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue_device(cert, ask, zero, vk, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_cert_issue_device(cert, ask, id.device_id, vk, nope),
                     FL_ERR_UNSUPPORTED);
}

/* ---- whole rounds ---- */

static void run_round(uint32_t n, uint32_t k, uint32_t t, const uint32_t *drops, size_t ndrops,
                      fl_secagg_backend cb, fl_secagg_backend sb, uint64_t seed) {
    struct sa_opts o;
    struct sa_result r;
    uint8_t drop[64] = {0};
    sa_opts_init(&o, n, 24, k, t);
    o.cfg.active = 1;
    o.cfg.device_certs = 1;
    for (size_t i = 0; i < ndrops; i++)
        drop[drops[i]] = SA_DROP_MASKED;
    o.drop = drop;
    o.seed = seed;
    o.client_backend = cb;
    o.server_backend = sb;
    sa_run(&o, &r);
    if (r.st != FL_OK)
        fail_msg("n=%u k=%u backends %d/%d: %s (%s)", n, k, (int)cb, (int)sb, fl_status_name(r.st),
                 r.errmsg);
    assert_int_equal(r.client_failures, 0);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, n - ndrops);
    assert_int_equal(r.expect_count, n - ndrops);
}

static void test_rounds_exact(void **state) {
    (void)state;
    static const uint32_t d10[] = {3, 7}, d40[] = {5, 17, 33};
    for (int cb = 0; cb < nbackends(); cb++)
        for (int sb = 0; sb < nbackends(); sb++) {
            uint64_t seed = 900 + (uint64_t)(cb * 2 + sb) * 10;
            run_round(10, 9, 6, d10, 2, backend_at(cb), backend_at(sb), seed);
            run_round(40, 10, 6, d40, 3, backend_at(cb), backend_at(sb), seed + 1);
        }
}

/* ---- certificates refused by the server (ADVERTISE) ---- */

static void server_refuses(int device_certs, uint32_t bad, int kind, fl_secagg_backend be) {
    int kinds[4] = {CERT_OK, CERT_OK, CERT_OK, CERT_OK};
    kinds[bad] = kind;
    struct rig R;
    rig_init_dev(&R, 4, 3, 2, be, device_certs, kinds);
    rig_start(&R);
    uint32_t pending = fl_secagg_server_pending(R.srv);
    assert_int_equal(rig_send(&R, bad), FL_ERR_CRYPTO);
    assert_non_null(strstr(fl_secagg_server_errmsg(R.srv), "bad certificate"));
    assert_int_equal(fl_secagg_server_pending(R.srv), pending);
    if (device_certs) {
        uint8_t out[32];
        assert_int_equal(fl_secagg_server_device_id(R.srv, bad, out), FL_ERR_STATE);
    }
    rig_set_reply(&R, bad, NULL, 0);
    /* The round completes without it (its neighbours verified the others). */
    rig_finish(&R, 0xFu & ~(1u << bad));
    rig_free(&R);
}

static void test_server_refuses_certs(void **state) {
    (void)state;
    for (int b = 0; b < nbackends(); b++) {
        server_refuses(1, 1, CERT_OTHER_DEV, backend_at(b)); /* another device's certificate */
        server_refuses(1, 2, CERT_V1, backend_at(b));        /* v1 certificate in v2 mode */
        server_refuses(0, 3, CERT_V2, backend_at(b));        /* v2 certificate in v1 mode */

        /* A device id changed on the wire: the certificate no longer matches. */
        struct rig R;
        rig_init_dev(&R, 4, 3, 2, backend_at(b), 1, NULL);
        rig_start(&R);
        uint8_t *m = rig_dup(R.reply[0], R.reply_len[0], 0);
        m[RIG_H + FL__SA_ADV_DEVICE_OFF + 9] ^= 0x04;
        assert_int_equal(fl_secagg_server_receive(R.srv, 0, m, R.reply_len[0]), FL_ERR_CRYPTO);
        assert_non_null(strstr(fl_secagg_server_errmsg(R.srv), "bad certificate"));
        free(m);
        rig_finish(&R, 0xF); /* the honest ADVERTISE is still accepted */
        rig_free(&R);
    }
}

/* ---- certificates refused by the client (KEYS) ---- */

static void test_client_refuses_certs(void **state) {
    (void)state;
    const size_t adv2 = FL__SA_ADV_DEVICE_BYTES, adv1 = FL__SA_ADV_ACTIVE_BYTES;
    for (int b = 0; b < nbackends(); b++) {
        fl_secagg_backend be = backend_at(b);
        struct rig R;
        rig_init_dev(&R, 4, 3, 2, be, 1, NULL);
        rig_start(&R);
        rig_send_all(&R, 0);
        assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
        size_t ml;
        /* Client 0: a neighbour's device id tampered with. */
        uint8_t *m = rig_outgoing(&R, 0, &ml);
        m[keys_entry(1, adv2) + FL__SA_ADV_DEVICE_OFF] ^= 0x80;
        expect_client_fails(&R, 0, m, ml, FL_ERR_CRYPTO, "bad neighbour signature");
        free(m);
        /* Client 1: a neighbour's v2 certificate replaced by a v1 one (same key, its index). */
        m = rig_outgoing(&R, 1, &ml);
        uint8_t *e = m + keys_entry(0, adv2);
        uint32_t idx = fl__get_u32le(e - 4);
        assert_int_equal(fl_secagg_cert_issue(e + 96, R.authority_sk, idx, e + 64, be), FL_OK);
        expect_client_fails(&R, 1, m, ml, FL_ERR_CRYPTO, "bad neighbour signature");
        free(m);
        /* Client 2: a neighbour's certificate for another device id (its own id kept). */
        m = rig_outgoing(&R, 2, &ml);
        e = m + keys_entry(2, adv2);
        uint8_t other[32];
        memcpy(other, e + FL__SA_ADV_DEVICE_OFF, 32);
        other[31] ^= 1;
        assert_int_equal(fl_secagg_cert_issue_device(e + 96, R.authority_sk, other, e + 64, be),
                         FL_OK);
        expect_client_fails(&R, 2, m, ml, FL_ERR_CRYPTO, "bad neighbour signature");
        free(m);
        /* Client 3 got the honest message: it goes on. */
        rig_clients_handle(&R, 1u << 3);
        assert_int_equal(fl_secagg_client_phase(R.cl[3]), FL_SECAGG_PHASE_MASKED_INPUT);
        rig_free(&R);

        /* v1 mode: a neighbour's v1 certificate replaced by its v2 one. */
        rig_init_dev(&R, 4, 3, 2, be, 0, NULL);
        rig_start(&R);
        rig_send_all(&R, 0);
        assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
        m = rig_outgoing(&R, 0, &ml);
        e = m + keys_entry(1, adv1);
        idx = fl__get_u32le(e - 4);
        sa_device_id(other, idx);
        assert_int_equal(fl_secagg_cert_issue_device(e + 96, R.authority_sk, other, e + 64, be),
                         FL_OK);
        expect_client_fails(&R, 0, m, ml, FL_ERR_CRYPTO, "bad neighbour signature");
        free(m);
        rig_free(&R);
    }
}

/* ---- one device twice ---- */

/* The authority certified a second key for client 0's device and that key holds index 3
 * (or a server let such a Sybil in: the server does not compare device ids, the
 * coordinator does with fl_secagg_server_device_id). Every certificate verifies; each
 * client refuses KEYS: 0 and 3 see their own id at a neighbour, 1, 2 and 4 see one id
 * twice. */
static void test_duplicate_device_ids(void **state) {
    (void)state;
    for (int b = 0; b < nbackends(); b++) {
        int kinds[5] = {CERT_OK, CERT_OK, CERT_OK, CERT_DUP0, CERT_OK};
        struct rig R;
        rig_init_dev(&R, 5, 4, 3, backend_at(b), 1, kinds);
        rig_start(&R);
        rig_send_all(&R, 0);
        uint8_t d0[32], d3[32];
        assert_int_equal(fl_secagg_server_device_id(R.srv, 0, d0), FL_OK);
        assert_int_equal(fl_secagg_server_device_id(R.srv, 3, d3), FL_OK);
        assert_memory_equal(d0, d3, 32);
        assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
        for (uint32_t i = 0; i < 5; i++) {
            size_t ml;
            uint8_t *m = rig_outgoing(&R, i, &ml);
            expect_client_fails(&R, i, m, ml, FL_ERR_PROTOCOL,
                                i == 0 || i == 3 ? "advertises this client's device id"
                                                 : "two neighbours advertise one device id");
            free(m);
        }
        rig_free(&R);

        /* Sparse graph (k = 2 of n = 6): only the clients with both in their neighbourhood
         * refuse; whoever has one of them goes on. */
        int kinds6[6] = {CERT_OK, CERT_OK, CERT_OK, CERT_DUP0, CERT_OK, CERT_OK};
        rig_init_dev(&R, 6, 2, 2, backend_at(b), 1, kinds6);
        rig_start(&R);
        rig_send_all(&R, 0);
        assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
        uint32_t refused = 0;
        for (uint32_t i = 0; i < 6; i++) {
            int has0 = 0, has3 = 0;
            const uint8_t *m, *r;
            size_t ml, rl;
            assert_int_equal(fl_secagg_server_outgoing(R.srv, i, &m, &ml), FL_OK);
            /* Which device ids does the message carry? */
            uint32_t cnt = fl__get_u32le(m + RIG_H + 52);
            for (uint32_t j = 0; j < cnt; j++) {
                uint32_t v = fl__get_u32le(m + keys_entry(j, FL__SA_ADV_DEVICE_BYTES) - 4);
                has0 |= v == 0;
                has3 |= v == 3;
            }
            int want_refuse = (has0 && has3) || (i == 0 && has3) || (i == 3 && has0);
            fl_status st = fl_secagg_client_handle(R.cl[i], m, ml, &r, &rl);
            assert_int_equal(st, want_refuse ? FL_ERR_PROTOCOL : FL_OK);
            refused += want_refuse;
        }
        assert_true(refused < 6);
        rig_free(&R);
    }
}

/* ---- fl_secagg_server_device_id ---- */

static void test_server_device_id(void **state) {
    (void)state;
    struct rig R;
    rig_init_dev(&R, 4, 3, 2, FL_SECAGG_BACKEND_SODIUM, 1, NULL);
    uint8_t out[32], want[32];
    assert_int_equal(fl_secagg_server_device_id(R.srv, 0, out), FL_ERR_STATE); /* before */
    assert_int_equal(fl_secagg_server_device_id(R.srv, 4, out), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_device_id(R.srv, UINT32_MAX, out), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_device_id(R.srv, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_device_id(NULL, 0, out), FL_ERR_MISUSE);
    rig_start(&R);
    assert_int_equal(fl_secagg_server_device_id(R.srv, 2, out), FL_ERR_STATE); /* not sent */
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(rig_send(&R, i), FL_OK);
        rig_set_reply(&R, i, NULL, 0);
        for (uint32_t j = 0; j < 4; j++) {
            fl_status st = fl_secagg_server_device_id(R.srv, j, out);
            assert_int_equal(st, j <= i ? FL_OK : FL_ERR_STATE);
            if (st == FL_OK) {
                sa_device_id(want, j);
                assert_memory_equal(out, want, 32);
            }
        }
    }
    rig_finish(&R, 0xF);
    /* Still there once the round is done. */
    assert_int_equal(fl_secagg_server_device_id(R.srv, 3, out), FL_OK);
    sa_device_id(want, 3);
    assert_memory_equal(out, want, 32);
    rig_free(&R);
}

/* ---- v1 and v2 peers do not misparse each other ---- */

static void test_v1_v2_refuse_each_other(void **state) {
    (void)state;
    struct rig V1, V2;
    rig_init_dev(&V1, 4, 3, 2, FL_SECAGG_BACKEND_SODIUM, 0, NULL);
    rig_init_dev(&V2, 4, 3, 2, FL_SECAGG_BACKEND_SODIUM, 1, NULL);
    assert_true(V1.round_id == V2.round_id);
    rig_start(&V1);
    rig_start(&V2);
    assert_int_equal(V1.reply_len[0] + FL_SECAGG_DEVICE_ID_BYTES, V2.reply_len[0]);
    /* v2 ADVERTISE at a v1 server: over its limit; v1 ADVERTISE at a v2 server: too short. */
    assert_int_equal(fl_secagg_server_receive(V1.srv, 0, V2.reply[0], V2.reply_len[0]),
                     FL_ERR_TOO_LARGE);
    assert_int_equal(fl_secagg_server_receive(V2.srv, 0, V1.reply[0], V1.reply_len[0]),
                     FL_ERR_FORMAT);
    /* Client 3 does not advertise, so each KEYS lists 2 neighbours and fits both limits. */
    rig_send_all(&V1, 1u << 3);
    rig_send_all(&V2, 1u << 3);
    assert_int_equal(fl_secagg_server_advance(V1.srv), FL_OK);
    assert_int_equal(fl_secagg_server_advance(V2.srv), FL_OK);
    size_t l1, l2;
    uint8_t *k1 = rig_outgoing(&V1, 0, &l1), *k2 = rig_outgoing(&V2, 0, &l2);
    assert_int_equal(k1[RIG_H + 13], 1);
    assert_int_equal(k2[RIG_H + 13], FL__SA_MODE_DEVICE);
    const uint8_t *r;
    size_t rl;
    /* Length mismatch: FL_ERR_FORMAT, no state change, either way. */
    assert_int_equal(fl_secagg_client_handle(V1.cl[0], k2, l2, &r, &rl), FL_ERR_FORMAT);
    assert_int_equal(fl_secagg_client_phase(V1.cl[0]), FL_SECAGG_PHASE_SHARE_KEYS);
    assert_int_equal(fl_secagg_client_handle(V2.cl[0], k1, l1, &r, &rl), FL_ERR_FORMAT);
    assert_int_equal(fl_secagg_client_phase(V2.cl[0]), FL_SECAGG_PHASE_SHARE_KEYS);
    /* The mode byte alone: a v1 KEYS claiming mode 2 fails a v1 client (sticky), and a v2
     * KEYS claiming mode 1 fails a v2 client. */
    free(k1);
    free(k2);
    k1 = rig_outgoing(&V1, 1, &l1);
    k2 = rig_outgoing(&V2, 1, &l2);
    k1[RIG_H + 13] = FL__SA_MODE_DEVICE;
    expect_client_fails(&V1, 1, k1, l1, FL_ERR_PROTOCOL, "round parameters differ");
    k2[RIG_H + 13] = 1;
    expect_client_fails(&V2, 1, k2, l2, FL_ERR_PROTOCOL, "round parameters differ");
    free(k1);
    free(k2);
    /* Client 0 of each still takes its own KEYS. */
    rig_clients_handle(&V1, 1u << 0);
    rig_clients_handle(&V2, 1u << 0);
    rig_free(&V1);
    rig_free(&V2);
}

/* ---- a server that lies about dropouts (as test_sa_attacks.c) ---- */

static void test_lying_server_caught(void **state) {
    (void)state;
    for (int b = 0; b < nbackends(); b++) {
        struct sa_opts o;
        sa_lie_opts_init(&o);
        o.cfg.device_certs = 1;
        o.client_backend = backend_at(b);
        o.server_backend = backend_at(b);
        sa_check_lies_caught(&o, 960);
    }
}

/* fl_secagg_cert_check_device, the enrollment-time check: FL_OK for the certificate
 * fl_secagg_cert_issue_device made, on every backend and across backends (one issues, the
 * other checks); FL_ERR_CRYPTO for another device id, another client key, another
 * authority, a v1 certificate over the same key, or one flipped bit; FL_ERR_MISUSE on NULL
 * or an all-zero device id. */
static void test_cert_check_device(void **state) {
    (void)state;
    for (int b = 0; b < nbackends(); b++)
        for (int v = 0; v < nbackends(); v++) {
            fl_secagg_backend be = backend_at(b), ve = backend_at(v);
            uint8_t avk[32], ask[64], avk2[32], ask2[64], vk[32], sk[64], vk2[32], sk2[64];
            uint8_t did[32], did2[32], cert[64], bad[64], zero[32] = {0};
            assert_int_equal(fl_secagg_signing_keygen(avk, ask, be), FL_OK);
            assert_int_equal(fl_secagg_signing_keygen(avk2, ask2, be), FL_OK);
            assert_int_equal(fl_secagg_signing_keygen(vk, sk, be), FL_OK);
            assert_int_equal(fl_secagg_signing_keygen(vk2, sk2, be), FL_OK);
            for (int i = 0; i < 32; i++) {
                did[i] = (uint8_t)(i + 1);
                did2[i] = (uint8_t)(i + 2);
            }
            assert_int_equal(fl_secagg_cert_issue_device(cert, ask, did, vk, be), FL_OK);
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, did, vk, ve), FL_OK);
            /* wrong device id, wrong client key, wrong authority */
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, did2, vk, ve), FL_ERR_CRYPTO);
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, did, vk2, ve), FL_ERR_CRYPTO);
            assert_int_equal(fl_secagg_cert_check_device(cert, avk2, did, vk, ve), FL_ERR_CRYPTO);
            /* a certificate by another authority over the same statement */
            assert_int_equal(fl_secagg_cert_issue_device(bad, ask2, did, vk, be), FL_OK);
            assert_int_equal(fl_secagg_cert_check_device(bad, avk, did, vk, ve), FL_ERR_CRYPTO);
            /* a v1 certificate over the same key is not a device certificate */
            assert_int_equal(fl_secagg_cert_issue(bad, ask, 0, vk, be), FL_OK);
            assert_int_equal(fl_secagg_cert_check_device(bad, avk, did, vk, ve), FL_ERR_CRYPTO);
            /* any flipped bit */
            for (int i = 0; i < 64; i += 9) {
                memcpy(bad, cert, 64);
                bad[i] ^= (uint8_t)(1u << (i % 8));
                assert_int_equal(fl_secagg_cert_check_device(bad, avk, did, vk, ve),
                                 FL_ERR_CRYPTO);
            }
            assert_int_equal(fl_secagg_cert_check_device(NULL, avk, did, vk, ve), FL_ERR_MISUSE);
            assert_int_equal(fl_secagg_cert_check_device(cert, NULL, did, vk, ve), FL_ERR_MISUSE);
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, NULL, vk, ve), FL_ERR_MISUSE);
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, did, NULL, ve), FL_ERR_MISUSE);
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, zero, vk, ve), FL_ERR_MISUSE);
            /* the good certificate still verifies: nothing above changed state */
            assert_int_equal(fl_secagg_cert_check_device(cert, avk, did, vk, ve), FL_OK);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kat),
        cmocka_unit_test(test_config_and_args),
        cmocka_unit_test(test_rounds_exact),
        cmocka_unit_test(test_server_refuses_certs),
        cmocka_unit_test(test_client_refuses_certs),
        cmocka_unit_test(test_duplicate_device_ids),
        cmocka_unit_test(test_server_device_id),
        cmocka_unit_test(test_v1_v2_refuse_each_other),
        cmocka_unit_test(test_lying_server_caught),
        cmocka_unit_test(test_cert_check_device),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
