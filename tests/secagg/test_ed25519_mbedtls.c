/* Ed25519 on the mbedTLS backend (secagg/src/ed25519_mbedtls.c) against libsodium:
 *   - the Wei25519 group: G on the curve, [L]G = O (mbedTLS's own arithmetic);
 *   - (1,000 random seeds and messages: test_ed25519_random.c, a separate ctest;)
 *   - the eight small-order points as A and as R, x = 0 with the sign bit set, S >= L:
 *     both backends reject (ed25519_edge.txt, run by test_crypto_kat, has the forged cases
 *     that a laxer verifier would accept, and mixed-order keys);
 *   - 300 honest signatures mutated (random key, R or S; small y as key or R): the two
 *     backends make the same decision on every one;
 *   - argument checks, in-place use, concurrent first use from several threads;
 *   - active-mode (signed) SecAgg rounds with mbedTLS clients and a sodium server, and the
 *     reverse, including a server that corrupts a forwarded signature.
 * Skipped when the mbedTLS backend is not built. */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "fl_test.h"
#include "test_sa_harness.h"
#if defined(FL_HAVE_MBEDTLS_BUILD)
#include "ed25519_mbedtls.h"
#endif

struct pair {
    const struct fl__sa_crypto *s; /* sodium-openssl (reference) */
    const struct fl__sa_crypto *m; /* mbedtls */
};

static struct pair P;

static int setup(void **state) {
    (void)state;
    P.s = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    P.m = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    return P.s ? 0 : -1;
}

#define NEED_MBEDTLS()                                                                             \
    do {                                                                                           \
        if (!P.m) {                                                                                \
            print_message("mbedtls backend not built: skipped\n");                                 \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Deterministic test randomness (splitmix64), so a failure can be replayed. */
static uint64_t rng_state = 0x8032;

static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(sa_rng_next(&rng_state) >> 24);
}

/* ---- the curve ---- */

static void test_group(void **state) {
    (void)state;
    NEED_MBEDTLS();
#if defined(FL_HAVE_MBEDTLS_BUILD)
    const mbedtls_ecp_group *g = fl__sa_mbed_ed25519_group();
    assert_non_null(g);
    mbedtls_ecp_group grp; /* a private copy: muladd takes a non-const group */
    mbedtls_ecp_point r, neg_g;
    mbedtls_mpi m, one, p;
    mbedtls_ecp_group_init(&grp);
    mbedtls_ecp_point_init(&r);
    mbedtls_ecp_point_init(&neg_g);
    mbedtls_mpi_init(&m);
    mbedtls_mpi_init(&one);
    mbedtls_mpi_init(&p);
    /* (mbedtls_ecp_group_copy reloads a built-in curve by id; this one has none.) */
    assert_int_equal(mbedtls_mpi_copy(&grp.P, &g->P), 0);
    assert_int_equal(mbedtls_mpi_copy(&grp.A, &g->A), 0);
    assert_int_equal(mbedtls_mpi_copy(&grp.B, &g->B), 0);
    assert_int_equal(mbedtls_mpi_copy(&grp.N, &g->N), 0);
    assert_int_equal(mbedtls_ecp_copy(&grp.G, &g->G), 0);
    grp.pbits = g->pbits;
    grp.nbits = g->nbits;
    grp.modp = g->modp;
    /* p = 2^255 - 19; L = 2^252 + 27742317777372353535851937790883648493 (253 bits). */
    assert_int_equal(mbedtls_mpi_lset(&p, 1), 0);
    assert_int_equal(mbedtls_mpi_shift_l(&p, 255), 0);
    assert_int_equal(mbedtls_mpi_sub_int(&p, &p, 19), 0);
    assert_int_equal(mbedtls_mpi_cmp_mpi(&p, &grp.P), 0);
    assert_int_equal(mbedtls_mpi_read_string(&m, 10, "27742317777372353535851937790883648493"), 0);
    assert_int_equal(mbedtls_mpi_set_bit(&m, 252, 1), 0);
    assert_int_equal(mbedtls_mpi_cmp_mpi(&m, &grp.N), 0);
    assert_int_equal(grp.nbits, 253);
    assert_int_equal(grp.pbits, 255);
    /* G is on Y^2 = X^3 + a X + b (mbedTLS checks the equation itself). */
    assert_int_equal(mbedtls_ecp_check_pubkey(&grp, &grp.G), 0);
    /* [L]G = O, computed as [L-1]G + G (mbedtls_ecp_mul takes scalars below N only). */
    assert_int_equal(mbedtls_mpi_sub_int(&m, &grp.N, 1), 0);
    assert_int_equal(mbedtls_mpi_lset(&one, 1), 0);
    assert_int_equal(mbedtls_ecp_muladd(&grp, &r, &m, &grp.G, &one, &grp.G), 0);
    assert_int_equal(mbedtls_ecp_is_zero(&r), 1);
    /* and [L-1]G = -G, so G's order is exactly L (L is prime and G != O). */
    assert_int_equal(mbedtls_ecp_muladd(&grp, &r, &m, &grp.G, &m, &grp.G), 0); /* [2L-2]G */
    assert_int_equal(mbedtls_ecp_copy(&neg_g, &grp.G), 0);
    assert_int_equal(mbedtls_mpi_sub_mpi(&neg_g.Y, &grp.P, &neg_g.Y), 0);
    assert_int_equal(mbedtls_mpi_lset(&m, 2), 0);
    assert_int_equal(mbedtls_ecp_muladd(&grp, &neg_g, &m, &neg_g, &m, &neg_g), 0); /* [-4]G */
    /* [2L-2]G = [-2]G, and 2 * [-2]G = [-4]G: compare [-2]G + [-2]G with [-4]G. */
    assert_int_equal(mbedtls_mpi_lset(&one, 1), 0);
    assert_int_equal(mbedtls_ecp_muladd(&grp, &r, &one, &r, &one, &r), 0);
    assert_int_equal(mbedtls_ecp_point_cmp(&r, &neg_g), 0);
    /* The comb table for G exists before any caller runs (thread-safety precondition). */
    assert_non_null(g->T);
    mbedtls_ecp_group_free(&grp);
    mbedtls_ecp_point_free(&r);
    mbedtls_ecp_point_free(&neg_g);
    mbedtls_mpi_free(&m);
    mbedtls_mpi_free(&one);
    mbedtls_mpi_free(&p);
#endif
}

/* ---- libsodium's rejections ---- */

/* The eight points of order dividing 8 on edwards25519, encoded (printed by
 * secagg/tools/wei25519_constants.py as [i]T8 for a point T8 of order 8). */
static const char *const small_order_hex[8] = {
    "0100000000000000000000000000000000000000000000000000000000000000", /* identity */
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", /* order 8 */
    "0000000000000000000000000000000000000000000000000000000000000080", /* order 4 */
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", /* order 8 */
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", /* order 2 */
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", /* order 8 */
    "0000000000000000000000000000000000000000000000000000000000000000", /* order 4 */
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", /* order 8 */
};

static void unhex(uint8_t *out, const char *hex, size_t n) {
    assert_int_equal(strlen(hex), 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* Both backends reject (sig, msg, pk); with a message for the record. */
static void both_reject(const uint8_t sig[64], const uint8_t *msg, size_t len, const uint8_t pk[32],
                        const char *what) {
    int s = P.s->ed25519_verify(sig, msg, len, pk), m = P.m->ed25519_verify(sig, msg, len, pk);
    if (s != -1 || m != -1)
        fail_msg("%s: sodium %d, mbedtls %d (both must reject)", what, s, m);
}

static void test_small_order_and_encodings(void **state) {
    (void)state;
    NEED_MBEDTLS();
    uint8_t seed[32], pk[32], sk[64], sig[64], bad[64], pt[32];
    const uint8_t msg[] = "small order";
    fill(seed, sizeof(seed));
    assert_int_equal(P.m->ed25519_keypair(pk, sk, seed), 0);
    assert_int_equal(P.m->ed25519_sign(sig, msg, sizeof(msg), sk), 0);
    for (int i = 0; i < 8; i++) {
        unhex(pt, small_order_hex[i], 32);
        /* Every [i]T8 really is small-order: libsodium's own checker confirms. */
        both_reject(sig, msg, sizeof(msg), pt, "small-order A");
        memcpy(bad, sig, 64);
        memcpy(bad, pt, 32);
        both_reject(bad, msg, sizeof(msg), pk, "small-order R");
        /* The other sign bit: for x != 0 another small-order point, for x = 0 an encoding
         * that RFC 8032 decoding refuses. */
        pt[31] ^= 0x80;
        both_reject(sig, msg, sizeof(msg), pt, "small-order A, sign flipped");
        memcpy(bad, pt, 32);
        both_reject(bad, msg, sizeof(msg), pk, "small-order R, sign flipped");
    }
    /* Non-canonical y: y = p + 2 .. 2^255 - 1 (all with sign 0 and 1). */
    for (int d = 0; d <= 18; d++) {
        memset(pt, 0xff, 32);
        pt[31] = 0x7f;
        pt[0] = (uint8_t)(0xed + d); /* p + d; 0xed + 18 = 0xff */
        both_reject(sig, msg, sizeof(msg), pt, "non-canonical A");
        memcpy(bad, sig, 64);
        memcpy(bad, pt, 32);
        both_reject(bad, msg, sizeof(msg), pk, "non-canonical R");
        pt[31] |= 0x80;
        both_reject(sig, msg, sizeof(msg), pt, "non-canonical A, sign set");
    }
    /* S >= L: S + L (same point multiple), L itself, and all ones. */
    static const uint8_t l_le[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58,
                                     0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
                                     0,    0,    0,    0,    0,    0,    0,    0,
                                     0,    0,    0,    0,    0,    0,    0,    0x10};
    memcpy(bad, sig, 64);
    unsigned carry = 0;
    for (int i = 0; i < 32; i++) {
        unsigned v = bad[32 + i] + l_le[i] + carry;
        bad[32 + i] = (uint8_t)v;
        carry = v >> 8;
    }
    assert_int_equal(carry, 0);
    both_reject(bad, msg, sizeof(msg), pk, "S + L");
    memcpy(bad + 32, l_le, 32);
    both_reject(bad, msg, sizeof(msg), pk, "S = L");
    memset(bad + 32, 0xff, 32);
    both_reject(bad, msg, sizeof(msg), pk, "S = 2^256 - 1");
    /* A point not on the curve (y = 2 has no x on edwards25519). */
    memset(pt, 0, 32);
    pt[0] = 2;
    both_reject(sig, msg, sizeof(msg), pt, "A off the curve");
    /* And the honest signature still verifies on both. */
    assert_int_equal(P.s->ed25519_verify(sig, msg, sizeof(msg), pk), 0);
    assert_int_equal(P.m->ed25519_verify(sig, msg, sizeof(msg), pk), 0);
}

/* ---- differential: random and near-edge inputs, same decision ---- */

#define DIFF_CASES 300

/* Honest triples mutated one way per case: random key or R bytes, a random S below 2^253
 * (sometimes >= L), a key or R with a small y (0..40, either sign: hits the identity, the
 * points of order 2 and 4 and off-curve values), or left honest. Whatever the decision, the
 * two backends must make the same one; honest ones must verify. */
static void test_differential(void **state) {
    (void)state;
    NEED_MBEDTLS();
    enum { KEYS = 4 };
    uint8_t pks[KEYS][32], sks[KEYS][64], seed[32], msg[48], pk[32], sig[64];
    unsigned accepted = 0;
    for (int i = 0; i < KEYS; i++) {
        fill(seed, sizeof(seed));
        assert_int_equal(P.m->ed25519_keypair(pks[i], sks[i], seed), 0);
    }
    for (int i = 0; i < DIFF_CASES; i++) {
        int key = i % KEYS, kind = (i / KEYS) % 6;
        fill(msg, sizeof(msg));
        memcpy(pk, pks[key], 32);
        assert_int_equal(P.s->ed25519_sign(sig, msg, sizeof(msg), sks[key]), 0);
        uint8_t *target = kind == 3 ? pk : sig;
        switch (kind) {
        case 0:
            fill(pk, 32);
            break;
        case 1:
            fill(sig, 32);
            break;
        case 2:
            fill(sig + 32, 32);
            sig[63] &= 0x1f;
            break;
        case 3:
        case 4:
            memset(target, 0, 32);
            fill(target, 1);
            target[0] %= 41;
            if (i & 1)
                target[31] |= 0x80;
            break;
        default:
            break;
        }
        int rs = P.s->ed25519_verify(sig, msg, sizeof(msg), pk);
        int rm = P.m->ed25519_verify(sig, msg, sizeof(msg), pk);
        if (rs != rm)
            fail_msg("case %d (kind %d): sodium %d, mbedtls %d", i, kind, rs, rm);
        if (kind == 5)
            assert_int_equal(rs, 0);
        accepted += rs == 0;
    }
    print_message("%d cases, %u accepted by both, the rest rejected by both\n", DIFF_CASES,
                  accepted);
}

/* ---- arguments, aliasing ---- */

static void test_arguments_and_aliasing(void **state) {
    (void)state;
    NEED_MBEDTLS();
    uint8_t seed[32], pk[32], sk[64], sk2[64], sig[64], buf[64];
    fill(seed, sizeof(seed));
    assert_int_equal(P.m->ed25519_keypair(NULL, sk, seed), -1);
    assert_int_equal(P.m->ed25519_keypair(pk, NULL, seed), -1);
    assert_int_equal(P.m->ed25519_keypair(pk, sk, NULL), -1);
    assert_int_equal(P.m->ed25519_keypair(pk, sk, seed), 0);
    /* The seed may live in sk itself. */
    memcpy(sk2, seed, 32);
    assert_int_equal(P.m->ed25519_keypair(pk, sk2, sk2), 0);
    assert_memory_equal(sk2, sk, 64);
    assert_int_equal(P.m->ed25519_sign(NULL, buf, 1, sk), -1);
    assert_int_equal(P.m->ed25519_sign(sig, NULL, 1, sk), -1);
    assert_int_equal(P.m->ed25519_sign(sig, buf, 1, NULL), -1);
    assert_int_equal(P.m->ed25519_verify(NULL, buf, 1, pk), -1);
    assert_int_equal(P.m->ed25519_verify(sig, NULL, 1, pk), -1);
    assert_int_equal(P.m->ed25519_verify(sig, buf, 1, NULL), -1);
    /* Empty message as NULL, 0. */
    assert_int_equal(P.m->ed25519_sign(sig, NULL, 0, sk), 0);
    assert_int_equal(P.m->ed25519_verify(sig, NULL, 0, pk), 0);
    assert_int_equal(P.s->ed25519_verify(sig, NULL, 0, pk), 0);
    /* Signing a message held in the signature buffer (in place). */
    fill(buf, sizeof(buf));
    memcpy(sk2, buf, 64);
    assert_int_equal(P.s->ed25519_sign(sig, sk2, 64, sk), 0);
    assert_int_equal(P.m->ed25519_sign(buf, buf, 64, sk), 0);
    assert_memory_equal(buf, sig, 64);
}

/* ---- concurrent first use ---- */

#define THREADS 4
#define THREAD_ITERS 6

struct thread_job {
    int id;
    int failures;
};

static void *thread_main(void *arg) {
    struct thread_job *j = arg;
    for (int i = 0; i < THREAD_ITERS; i++) {
        uint8_t seed[32], pk[32], sk[64], sig[64], sig2[64], msg[40];
        for (int b = 0; b < 32; b++)
            seed[b] = (uint8_t)(j->id * 31 + i * 7 + b);
        memset(msg, j->id + i, sizeof(msg));
        if (P.m->ed25519_keypair(pk, sk, seed) != 0 ||
            P.m->ed25519_sign(sig, msg, sizeof(msg), sk) != 0 ||
            P.s->ed25519_sign(sig2, msg, sizeof(msg), sk) != 0 || memcmp(sig, sig2, 64) != 0 ||
            P.m->ed25519_verify(sig, msg, sizeof(msg), pk) != 0)
            j->failures++;
        sig[5] ^= 1;
        if (P.m->ed25519_verify(sig, msg, sizeof(msg), pk) != -1)
            j->failures++;
    }
    return NULL;
}

/* Run first in the group so the threads race on the one-time curve construction. */
static void test_threads_first_use(void **state) {
    (void)state;
    NEED_MBEDTLS();
    pthread_t th[THREADS];
    struct thread_job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i].id = i;
        jobs[i].failures = 0;
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].failures, 0);
    }
}

/* ---- active-mode rounds across backends ---- */

static void corrupt_forwarded_signature(void *u, int to_server, uint32_t client,
                                        fl_secagg_msg_type t, uint8_t *m, size_t *len, size_t cap) {
    int *hits = u;
    (void)cap;
    if (!to_server && client == 0 && t == FL_SECAGG_MSG_UNMASK_REQ) {
        m[*len - 1] ^= 0x80; /* last byte of the last forwarded signature */
        (*hits)++;
    }
}

static void test_active_rounds_cross_backend(void **state) {
    (void)state;
    NEED_MBEDTLS();
    /* Active mode is accepted on the mbedTLS backend, and its keys/certs interoperate. */
    fl_secagg_config c;
    fl_secagg_config_init(&c);
    c.num_clients = 3;
    c.dim = 1;
    c.active = 1;
    c.backend = FL_SECAGG_BACKEND_MBEDTLS;
    assert_int_equal(fl_secagg_config_resolve(&c, NULL, 0), FL_OK);
    uint8_t avk[32], ask[64], vk[32], sk[64], cert[64], cert2[64];
    assert_int_equal(fl_secagg_signing_keygen(avk, ask, FL_SECAGG_BACKEND_MBEDTLS), FL_OK);
    assert_int_equal(fl_secagg_signing_keygen(vk, sk, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    assert_int_equal(fl_secagg_cert_issue(cert, ask, 7, vk, FL_SECAGG_BACKEND_MBEDTLS), FL_OK);
    assert_int_equal(fl_secagg_cert_issue(cert2, ask, 7, vk, FL_SECAGG_BACKEND_SODIUM), FL_OK);
    assert_memory_equal(cert, cert2, 64);

    for (int dir = 0; dir < 2; dir++) {
        struct sa_opts o;
        struct sa_result r;
        uint8_t drop[8] = {0, 0, SA_DROP_MASKED, 0, 0, SA_DROP_UNMASK, 0, 0};
        sa_opts_init(&o, 8, 40, 7, 4);
        o.cfg.active = 1;
        o.drop = drop;
        o.seed = 300 + (uint64_t)dir;
        o.client_backend = dir ? FL_SECAGG_BACKEND_SODIUM : FL_SECAGG_BACKEND_MBEDTLS;
        o.server_backend = dir ? FL_SECAGG_BACKEND_MBEDTLS : FL_SECAGG_BACKEND_SODIUM;
        sa_run(&o, &r);
        if (r.st != FL_OK)
            fail_msg("dir %d: %s (%s)", dir, fl_status_str(r.st), r.errmsg);
        assert_int_equal(r.client_failures, 0);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, 7); /* client 2 dropped before its masked input */
        assert_int_equal(r.expect_count, 7);

        /* A server forwarding a corrupted neighbour signature is caught by the client's
         * verifier on either backend. */
        int hits = 0;
        sa_opts_init(&o, 6, 12, 5, 3);
        o.cfg.active = 1;
        o.seed = 310 + (uint64_t)dir;
        o.tamper = corrupt_forwarded_signature;
        o.tamper_user = &hits;
        o.client_backend = dir ? FL_SECAGG_BACKEND_SODIUM : FL_SECAGG_BACKEND_MBEDTLS;
        o.server_backend = dir ? FL_SECAGG_BACKEND_MBEDTLS : FL_SECAGG_BACKEND_SODIUM;
        sa_run(&o, &r);
        assert_int_equal(hits, 1);
        assert_int_equal(r.client_failures, 1);
        assert_int_equal(r.client_fail_code, FL_ERR_CRYPTO);
        assert_int_equal(r.st, FL_OK);
        assert_true(r.sum_ok);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_first_use),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_small_order_and_encodings),
        cmocka_unit_test(test_differential),
        cmocka_unit_test(test_arguments_and_aliasing),
        cmocka_unit_test(test_active_rounds_cross_backend),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
