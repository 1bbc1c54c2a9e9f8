/* The device identity of secure aggregation's active-adversary mode, on the device side:
 * fl_client_identity_keygen, the identity fields of fl_client_config (checked at create:
 * the v2 certificate must verify under the pinned authority key for the device id and the
 * signing key's verification key; an older struct_size means no identity), what enrollment
 * sends (the public parts in hex, never the signing key) and how the task's
 * secagg.consistency_check / device_certs are parsed (and the other mode field of the
 * task's secagg, reveal_pair_seeds, which combines with them). Built twice, like
 * test_crypto_profiles.c: client_test_identity on the normal objects (libsodium) and
 * client_test_identity_embedded on the embedded profile's (mbedTLS alone,
 * FL_TEST_EMBEDDED), so both profiles make keys and check certificates. Rounds through the
 * real coordinator are in test_active_round.c. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_round.h" /* client-sdk/src: fl__client_task_parse, fl__client_hex */
#include "fl_test.h"
#include "flotilla/client.h"
#include "flotilla/secagg.h"

/* ---- an identity issued by a test authority ---- */

struct ident {
    uint8_t auth_vk[32], auth_sk[64]; /* the device authority */
    uint8_t vk[32], sk[64];           /* the device key */
    uint8_t device_id[32];
    uint8_t cert[64];
};

static void ident_make(struct ident *id, uint8_t dev_byte) {
    assert_int_equal(fl_secagg_signing_keygen(id->auth_vk, id->auth_sk, FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
    assert_int_equal(fl_client_identity_keygen(id->vk, id->sk), FL_OK);
    memset(id->device_id, dev_byte, sizeof(id->device_id));
    assert_int_equal(fl_secagg_cert_issue_device(id->cert, id->auth_sk, id->device_id, id->vk,
                                                 FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
}

/* ---- a transport that records the first request and fails it (no server at all) ---- */

struct rec_tp {
    int calls;
    char path[256];
    char *body; /* NUL-terminated copy */
    size_t len;
};

static fl_status rec_send(void *ctx, const fl_client_request *req) {
    struct rec_tp *t = ctx;
    if (t->calls++ == 0) {
        snprintf(t->path, sizeof(t->path), "%s", req->path);
        t->body = malloc(req->body_len + 1);
        assert_non_null(t->body);
        memcpy(t->body, req->body, req->body_len);
        t->body[req->body_len] = '\0';
        t->len = req->body_len;
    }
    return FL_ERR_IO; /* network down: the SDK backs off */
}

static fl_status rec_recv(void *ctx, fl_client_response *resp) {
    (void)ctx;
    (void)resp;
    return FL_ERR_IO;
}

static fl_client_store *mem_store(void) {
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = 4;
    fl_client_store *st = NULL;
    assert_int_equal(fl_client_store_open(&st, &sc, NULL, 0), FL_OK);
    return st;
}

static void base_config(fl_client_config *cfg, fl_client_store *st, struct rec_tp *tp) {
    fl_client_config_init(cfg);
    cfg->population = "pop";
    cfg->region = "EU";
    memset(cfg->coordinator_key, 7, sizeof(cfg->coordinator_key));
    cfg->has_coordinator_key = 1;
    cfg->enrollment_token = "flp_0123456789abcdefghijklmnop";
    cfg->transport.struct_size = sizeof(cfg->transport);
    cfg->transport.send = rec_send;
    cfg->transport.recv = rec_recv;
    cfg->transport.ctx = tp;
    cfg->store = st;
    cfg->seed = 1;
}

static void set_identity(fl_client_config *cfg, const struct ident *id) {
    cfg->has_secagg_identity = 1;
    memcpy(cfg->secagg_signing_key, id->sk, sizeof(id->sk));
    memcpy(cfg->secagg_device_id, id->device_id, sizeof(id->device_id));
    memcpy(cfg->secagg_cert, id->cert, sizeof(id->cert));
    memcpy(cfg->secagg_authority_key, id->auth_vk, sizeof(id->auth_vk));
}

/* Creates a client from cfg; returns the status and copies the reason into why. */
static fl_status try_create(const fl_client_config *cfg, char *why, size_t cap) {
    fl_client *c = NULL;
    why[0] = '\0';
    fl_status rc = fl_client_create(&c, cfg, why, cap);
    if (rc == FL_OK)
        assert_non_null(c);
    else
        assert_null(c);
    fl_client_destroy(c);
    return rc;
}

/* ---- tests ---- */

static void test_sizes(void **st) {
    (void)st;
    assert_int_equal(fl_client_signing_key_bytes(), FL_CLIENT_SIGNING_KEY_BYTES);
    assert_int_equal(fl_client_device_id_bytes(), FL_CLIENT_DEVICE_ID_BYTES);
    assert_int_equal(fl_client_cert_bytes(), FL_CLIENT_CERT_BYTES);
    assert_int_equal(FL_CLIENT_SIGNING_KEY_BYTES, fl_secagg_signing_key_bytes());
    assert_int_equal(FL_CLIENT_DEVICE_ID_BYTES, fl_secagg_device_id_bytes());
    assert_int_equal(FL_CLIENT_CERT_BYTES, fl_secagg_cert_bytes());
    assert_int_equal(FL_CLIENT_PUBLIC_KEY_BYTES, fl_secagg_verify_key_bytes());
}

/* Fresh key pairs: the verification key is the signing key's second half (the layout the
 * secagg library reads), two pairs differ, and the authority's certificate over one
 * verifies (the SDK's create check accepts it). */
static void test_keygen(void **st) {
    (void)st;
    uint8_t vk1[32], sk1[64], vk2[32], sk2[64];
    assert_int_equal(fl_client_identity_keygen(NULL, sk1), FL_ERR_MISUSE);
    assert_int_equal(fl_client_identity_keygen(vk1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_client_identity_keygen(vk1, sk1), FL_OK);
    assert_int_equal(fl_client_identity_keygen(vk2, sk2), FL_OK);
    assert_memory_equal(sk1 + 32, vk1, 32);
    assert_memory_equal(sk2 + 32, vk2, 32);
    assert_memory_not_equal(vk1, vk2, 32);
    assert_memory_not_equal(sk1, sk2, 32);
    uint8_t zero[32] = {0};
    assert_memory_not_equal(sk1, zero, 32);
}

/* The identity is checked once, at create, with a message naming the field. */
static void test_create_checks_identity(void **st) {
    (void)st;
    fl_client_store *store = mem_store();
    struct rec_tp tp = {0};
    struct ident id, other;
    ident_make(&id, 0x11);
    ident_make(&other, 0x22);
    fl_client_config cfg;
    char why[256];

    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_OK);

    /* Each public part changed: the certificate no longer verifies. */
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    cfg.secagg_cert[5] ^= 1;
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.secagg_cert does not verify"));
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    cfg.secagg_device_id[31] ^= 1;
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.secagg_cert does not verify"));
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    memcpy(cfg.secagg_authority_key, other.auth_vk, 32); /* another authority */
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.secagg_cert does not verify"));
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    memcpy(cfg.secagg_signing_key, other.sk, 64); /* another device's key */
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.secagg_cert does not verify"));

    /* Missing parts. */
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    memset(cfg.secagg_device_id, 0, 32);
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.secagg_device_id"));
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    memset(cfg.secagg_authority_key, 0, 32);
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.secagg_authority_key"));
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    cfg.has_secagg_identity = 2;
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.has_secagg_identity"));

    /* The fields are ignored without has_secagg_identity. */
    base_config(&cfg, store, &tp);
    set_identity(&cfg, &id);
    cfg.has_secagg_identity = 0;
    cfg.secagg_cert[0] ^= 1;
    assert_int_equal(try_create(&cfg, why, sizeof(why)), FL_OK);

    /* An app built against the header before the identity was appended: its struct ends at
     * clock_user, and whatever follows in memory is not read. Any other short size is
     * refused. */
    size_t old = offsetof(fl_client_config, has_secagg_identity);
    uint8_t *buf = malloc(sizeof(fl_client_config));
    assert_non_null(buf);
    base_config(&cfg, store, &tp);
    cfg.struct_size = old;
    memcpy(buf, &cfg, old);
    memset(buf + old, 0xA5, sizeof(fl_client_config) - old); /* has_secagg_identity != 0 */
    assert_int_equal(try_create((const fl_client_config *)buf, why, sizeof(why)), FL_OK);
    ((fl_client_config *)buf)->struct_size = old + 4;
    assert_int_equal(try_create((const fl_client_config *)buf, why, sizeof(why)), FL_ERR_MISUSE);
    assert_non_null(strstr(why, "cfg.struct_size"));
    ((fl_client_config *)buf)->struct_size = old - 8;
    assert_int_equal(try_create((const fl_client_config *)buf, why, sizeof(why)), FL_ERR_MISUSE);
    free(buf);
    fl_client_store_close(store);
}

static void hex(char *out, const uint8_t *in, size_t n) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Enrollment carries the identity's public parts, in hex, and never the signing key; a
 * client without an identity sends no secagg_identity. */
static void test_enrollment_body(void **st) {
    (void)st;
    fl_client_store *store = mem_store();
    struct ident id;
    ident_make(&id, 0x5c);
    for (int with = 0; with < 2; with++) {
        struct rec_tp tp = {0};
        fl_client_config cfg;
        base_config(&cfg, store, &tp);
        if (with)
            set_identity(&cfg, &id);
        fl_client *c = NULL;
        char why[256];
        assert_int_equal(fl_client_create(&c, &cfg, why, sizeof(why)), FL_OK);
        int64_t next;
        assert_int_equal(fl_client_step(c, &next), FL_OK); /* the enrollment, lost */
        assert_int_equal(tp.calls, 1);
        assert_string_equal(tp.path, "/v1/enroll");
        char want[512], h1[65], h2[65], h3[129], hs[129];
        hex(h1, id.device_id, 32);
        hex(h2, id.vk, 32);
        hex(h3, id.cert, 64);
        hex(hs, id.sk, 32); /* the secret half */
        snprintf(want, sizeof(want),
                 "\"secagg_identity\":{\"device_id\":\"%s\",\"verify_key\":\"%s\","
                 "\"cert\":\"%s\"}",
                 h1, h2, h3);
        if (with) {
            assert_non_null(strstr(tp.body, want));
            assert_null(strstr(tp.body, hs));
        } else {
            assert_null(strstr(tp.body, "secagg_identity"));
        }
        assert_non_null(strstr(tp.body, "\"population\":\"pop\""));
        fl_client_stats cs = {.struct_size = sizeof(cs)};
        assert_int_equal(fl_client_stats_get(c, &cs), FL_OK);
        assert_int_equal(cs.state, FL_CLIENT_STATE_ENROLL); /* retried later */
        fl_client_destroy(c);
        free(tp.body);
    }
    fl_client_store_close(store);
}

/* ---- the task's secagg fields ---- */

static size_t task_json(char *buf, size_t cap, const char *extra) {
    int n = snprintf(
        buf, cap,
        "{\"deadlines\":{\"advertise_unix_ms\":1767225630000,"
        "\"consistency_unix_ms\":1767225720000,\"masked_unix_ms\":1767225690000,"
        "\"share_unix_ms\":1767225660000,\"unmask_unix_ms\":1767225750000},"
        "\"dp\":{\"clip_norm\":1.0,\"clip_kind\":\"flat\",\"granularity\":0.0009765625,"
        "\"mode\":\"none\",\"modulus_bits\":32},"
        "\"kind\":\"sync\",\"model\":{\"url\":\"/v1/models/pop/1\",\"version\":1},"
        "\"population\":\"pop\",\"protocol\":\"flotilla/v1\",\"round_id\":17,"
        "\"secagg\":{\"client_index\":1,\"enabled\":true,\"modulus_bits\":32,\"neighbors\":2,"
        "\"num_clients\":3,"
        "\"session_id\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\",\"threshold\":2,"
        "\"vector_length\":11%s},"
        "\"training\":{\"batch_size\":8,\"epochs\":1,\"learning_rate\":0.05},"
        "\"update\":{\"dim\":10,\"length\":11,\"tensors\":[\"dense.weight\"],"
        "\"weighting\":\"uniform\"}}",
        extra);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static fl_status parse_mode(const char *extra, int *active, int *reveal, char *why,
                            size_t cap) {
    char body[2048];
    size_t len = task_json(body, sizeof(body), extra);
    struct fl__client_task t;
    struct fl__err err = {0};
    memset(&t, 0, sizeof(t));
    fl_status rc = fl__client_task_parse(&t, body, len, 17, "pop", NULL, &err);
    snprintf(why, cap, "%s", fl__err_msg(&err));
    if (rc == FL_OK) {
        *active = t.sa_active;
        *reveal = t.sa_reveal_seeds;
        fl__client_task_free(&t, NULL);
    }
    return rc;
}

static fl_status parse(const char *extra, int *active, char *why, size_t cap) {
    int reveal;
    return parse_mode(extra, active, &reveal, why, cap);
}

/* secagg.reveal_pair_seeds (protocol 1.4): a boolean, with or without the active mode, never
 * with norm proofs (the secagg library would refuse that config; the task is refused first). */
static void test_task_reveal_field(void **st) {
    (void)st;
    int active = -1, reveal = -1;
    char why[256];
    assert_int_equal(parse_mode("", &active, &reveal, why, sizeof(why)), FL_OK);
    assert_int_equal(reveal, 0);
    assert_int_equal(parse_mode(",\"reveal_pair_seeds\":true", &active, &reveal, why,
                                sizeof(why)), FL_OK);
    assert_int_equal(reveal, 1);
    assert_int_equal(active, 0);
    assert_int_equal(
        parse_mode(",\"consistency_check\":true,\"device_certs\":true,\"reveal_pair_seeds\":true",
                   &active, &reveal, why, sizeof(why)),
        FL_OK);
    assert_int_equal(reveal, 1);
    assert_int_equal(active, 1);
    static const char *const bad[] = {
        ",\"reveal_pair_seeds\":1",
        ",\"reveal_pair_seeds\":\"true\"",
        ",\"norm_proof\":{\"bits\":8,\"dim\":10,\"bound2\":100},\"reveal_pair_seeds\":true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse_mode(bad[i], &active, &reveal, why, sizeof(why)), FL_ERR_FORMAT);
        assert_non_null(strstr(why, "secagg.reveal_pair_seeds"));
    }
}

static void test_task_active_fields(void **st) {
    (void)st;
    int active = -1;
    char why[256];
    assert_int_equal(parse("", &active, why, sizeof(why)), FL_OK);
    assert_int_equal(active, 0);
    assert_int_equal(
        parse(",\"consistency_check\":false,\"device_certs\":false", &active, why, sizeof(why)),
        FL_OK);
    assert_int_equal(active, 0);
    assert_int_equal(
        parse(",\"consistency_check\":true,\"device_certs\":true", &active, why, sizeof(why)),
        FL_OK);
    assert_int_equal(active, 1);
    /* v1 certificates (no device_certs) are not run by the SDK, nor device_certs alone. */
    assert_int_equal(parse(",\"consistency_check\":true", &active, why, sizeof(why)),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(why, "secagg.device_certs"));
    assert_int_equal(parse(",\"device_certs\":true", &active, why, sizeof(why)), FL_ERR_FORMAT);
    assert_int_equal(
        parse(",\"consistency_check\":1,\"device_certs\":true", &active, why, sizeof(why)),
        FL_ERR_FORMAT);
    assert_non_null(strstr(why, "secagg.consistency_check"));
    assert_int_equal(
        parse(",\"consistency_check\":true,\"device_certs\":\"yes\"", &active, why, sizeof(why)),
        FL_ERR_FORMAT);
    assert_non_null(strstr(why, "secagg.device_certs"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_keygen),
        cmocka_unit_test(test_create_checks_identity),
        cmocka_unit_test(test_enrollment_body),
        cmocka_unit_test(test_task_active_fields),
        cmocka_unit_test(test_task_reveal_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
