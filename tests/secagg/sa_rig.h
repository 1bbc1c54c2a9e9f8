#ifndef FL_TEST_SA_RIG_H
#define FL_TEST_SA_RIG_H
/* Phase-by-phase secagg round for the rejection tests: unlike test_sa_harness.h's sa_run,
 * which drives a whole round, the rig stops after each step so a test can feed a crafted,
 * truncated, duplicated or misdirected message to the server or a client and check the
 * answer, then carry on with the honest messages (a rejected message changes no state). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/secagg.h"
#include "secagg_internal.h"

#define RIG_MAX_N 16
#define RIG_MAX_D 64
#define RIG_H FL_SECAGG_HEADER_BYTES

struct rig {
    fl_secagg_config cfg;                 /* resolved shared config */
    uint32_t n, d;                        /* clients, dimension */
    uint64_t round_id;
    uint8_t gseed[32];                    /* public graph seed */
    fl_secagg_server *srv;
    fl_secagg_client *cl[RIG_MAX_N];
    uint32_t x[RIG_MAX_N][RIG_MAX_D];     /* inputs */
    uint8_t authority_vk[32], authority_sk[64];
    fl_secagg_identity ids[RIG_MAX_N];    /* active mode */
    uint8_t *reply[RIG_MAX_N];            /* last reply of each client (copied), or NULL */
    size_t reply_len[RIG_MAX_N];
};

/* A copy of a message with room to grow; freed by the caller. */
static inline uint8_t *rig_dup(const uint8_t *m, size_t len, size_t extra) {
    uint8_t *p = malloc(len + extra + 1);
    assert_non_null(p);
    memcpy(p, m, len);
    memset(p + len, 0, extra + 1);
    return p;
}

/* Rewrites the header's body length (bytes 16..19, LE) to match a message of `len` bytes. */
static inline void rig_fix_len(uint8_t *m, size_t len) {
    fl__put_u32le(m + 16, (uint32_t)(len - RIG_H));
}

/* reveal: config.reveal_pair_seeds of every party. */
static inline void rig_init_seeds(struct rig *R, uint32_t n, uint32_t d, uint32_t k,
                                  uint32_t t, uint32_t bits, int active, int reveal) {
    assert_true(n <= RIG_MAX_N && d <= RIG_MAX_D);
    memset(R, 0, sizeof(*R));
    fl_secagg_config_init(&R->cfg);
    R->cfg.num_clients = n;
    R->cfg.dim = d;
    R->cfg.degree = k;
    R->cfg.threshold = t;
    R->cfg.bits = bits;
    R->cfg.active = active;
    R->cfg.reveal_pair_seeds = reveal;
    R->cfg.backend = FL_SECAGG_BACKEND_SODIUM;
    R->n = n;
    R->d = d;
    R->round_id = 0xABC0000000000000ull + n * 1000 + k * 10 + (uint64_t)active;
    if (active) {
        assert_int_equal(fl_secagg_signing_keygen(R->authority_vk, R->authority_sk,
                                                  FL_SECAGG_BACKEND_SODIUM), FL_OK);
        memcpy(R->cfg.verify_key, R->authority_vk, 32);
        for (uint32_t i = 0; i < n; i++) {
            uint8_t vk[32];
            R->ids[i].struct_size = sizeof(fl_secagg_identity);
            assert_int_equal(fl_secagg_signing_keygen(vk, R->ids[i].signing_key,
                                                      FL_SECAGG_BACKEND_SODIUM), FL_OK);
            assert_int_equal(fl_secagg_cert_issue(R->ids[i].cert, R->authority_sk, i, vk,
                                                  FL_SECAGG_BACKEND_SODIUM), FL_OK);
        }
    }
    assert_int_equal(fl_secagg_config_resolve(&R->cfg, NULL, 0), FL_OK);
    for (int i = 0; i < 32; i++)
        R->gseed[i] = (uint8_t)(i * 37 + n);
    assert_int_equal(fl_secagg_server_create(&R->srv, &R->cfg, R->round_id, R->gseed, NULL),
                     FL_OK);
    uint32_t mask = bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1u;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(fl_secagg_client_create(&R->cl[i], &R->cfg, R->round_id, i,
                                                 active ? &R->ids[i] : NULL, NULL),
                         FL_OK);
        for (uint32_t j = 0; j < d; j++)
            R->x[i][j] = (i * 1009u + j * 7919u + 13u) & mask;
    }
}

static inline void rig_init(struct rig *R, uint32_t n, uint32_t d, uint32_t k, uint32_t t,
                            uint32_t bits, int active) {
    rig_init_seeds(R, n, d, k, t, bits, active, 0);
}

static inline void rig_set_reply(struct rig *R, uint32_t i, const uint8_t *m, size_t len) {
    free(R->reply[i]);
    R->reply[i] = m ? rig_dup(m, len, 0) : NULL;
    R->reply_len[i] = m ? len : 0;
}

/* Sets every input and collects every ADVERTISE (not delivered yet). */
static inline void rig_start(struct rig *R) {
    for (uint32_t i = 0; i < R->n; i++) {
        const uint8_t *m;
        size_t ml;
        assert_int_equal(fl_secagg_client_set_input(R->cl[i], R->x[i], R->d), FL_OK);
        assert_int_equal(fl_secagg_client_start(R->cl[i], &m, &ml), FL_OK);
        rig_set_reply(R, i, m, ml);
    }
}

/* Delivers client i's pending reply to the server; returns the server's answer. */
static inline fl_status rig_send(struct rig *R, uint32_t i) {
    assert_non_null(R->reply[i]);
    return fl_secagg_server_receive(R->srv, i, R->reply[i], R->reply_len[i]);
}

/* Delivers every pending reply (each must be accepted), except clients in `skip` (a
 * bitmask of indices), whose replies are kept. */
static inline void rig_send_all(struct rig *R, uint32_t skip) {
    for (uint32_t i = 0; i < R->n; i++)
        if (R->reply[i] && !(skip >> i & 1)) {
            assert_int_equal(rig_send(R, i), FL_OK);
            rig_set_reply(R, i, NULL, 0);
        }
}

/* Server's outgoing message for client i (a copy with 64 spare bytes; caller frees). */
static inline uint8_t *rig_outgoing(struct rig *R, uint32_t i, size_t *len) {
    const uint8_t *m;
    assert_int_equal(fl_secagg_server_outgoing(R->srv, i, &m, len), FL_OK);
    return rig_dup(m, *len, 64);
}

/* Hands each client in `who` (bitmask) its server message and keeps its reply. */
static inline void rig_clients_handle(struct rig *R, uint32_t who) {
    for (uint32_t i = 0; i < R->n; i++) {
        if (!(who >> i & 1))
            continue;
        const uint8_t *m, *r;
        size_t ml, rl;
        if (fl_secagg_server_outgoing(R->srv, i, &m, &ml) != FL_OK)
            continue;
        fl_status st = fl_secagg_client_handle(R->cl[i], m, ml, &r, &rl);
        if (st != FL_OK)
            fail_msg("client %u: %s (%s)", i, fl_status_name(st),
                     fl_secagg_client_errmsg(R->cl[i]));
        rig_set_reply(R, i, r, rl);
    }
}

#define RIG_ALL 0xFFFFFFFFu

/* Advances the server (must succeed), then lets the clients in `who` answer. */
static inline void rig_step(struct rig *R, uint32_t who) {
    fl_status st = fl_secagg_server_advance(R->srv);
    if (st != FL_OK)
        fail_msg("advance: %s (%s)", fl_status_name(st), fl_secagg_server_errmsg(R->srv));
    rig_clients_handle(R, who);
}

/* Checks the final sum against the inputs of the clients in `in_sum` (bitmask). */
static inline void rig_check_sum(struct rig *R, uint32_t in_sum) {
    const uint32_t *sum;
    size_t dim;
    uint32_t count, want = 0;
    assert_int_equal(fl_secagg_server_result(R->srv, &sum, &dim, &count), FL_OK);
    assert_int_equal(dim, R->d);
    uint32_t mask = fl__sa_bitmask(R->cfg.bits);
    for (uint32_t i = 0; i < R->n; i++)
        want += in_sum >> i & 1;
    assert_int_equal(count, want);
    for (uint32_t j = 0; j < R->d; j++) {
        uint32_t e = 0;
        for (uint32_t i = 0; i < R->n; i++)
            if (in_sum >> i & 1)
                e += R->x[i][j];
        assert_int_equal(sum[j], e & mask);
    }
}

static inline void rig_free(struct rig *R) {
    for (uint32_t i = 0; i < R->n; i++) {
        fl_secagg_client_destroy(R->cl[i]);
        free(R->reply[i]);
    }
    fl_secagg_server_destroy(R->srv);
    memset(R, 0, sizeof(*R));
}

#endif
