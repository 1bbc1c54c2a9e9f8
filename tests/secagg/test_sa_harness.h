#ifndef FL_TEST_SA_HARNESS_H
#define FL_TEST_SA_HARNESS_H
/* In-process secagg round driver for the tests: n clients and one server exchange byte
 * buffers; options inject dropouts per phase, tamper with messages and pick backends. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/secagg.h"

/* Drop points: the client stops before sending the message of that step. */
enum {
    SA_DROP_NEVER = 0,
    SA_DROP_ADVERTISE = 1,   /* never advertises */
    SA_DROP_SHARES = 2,      /* advertises, never sends shares */
    SA_DROP_MASKED = 3,      /* sends shares, never sends its masked input */
    SA_DROP_CONSISTENCY = 4, /* sends masked input, never signs (active) */
    SA_DROP_UNMASK = 5       /* sends masked input (and signature), never unmasks */
};

/* Replaces the server's final advance (phase UNMASK -> DONE) when set in sa_opts, e.g. to
 * run it through fl_secagg_server_unmask_begin/run/next; returns what advance would. */
typedef fl_status (*sa_finish_fn)(void *user, fl_secagg_server *srv);

/* Called on every message before delivery; may edit msg in place (len up to cap). */
typedef void (*sa_tamper_fn)(void *user, int to_server, uint32_t client, fl_secagg_msg_type type,
                             uint8_t *msg, size_t *len, size_t cap);

struct sa_opts {
    fl_secagg_config cfg;        /* shared config (num_clients, dim, ... set) */
    fl_secagg_backend client_backend; /* backend of the clients */
    fl_secagg_backend server_backend; /* backend of the server */
    const uint8_t *drop;         /* (n) SA_DROP_* per client, NULL = none */
    sa_tamper_fn tamper;         /* optional */
    void *tamper_user;
    uint64_t seed;               /* input generator seed */
    const fl_allocator *alloc;   /* NULL = libc */
    const uint8_t (*client_context)[FL_SECAGG_CONTEXT_BYTES]; /* (n) each client's context
                                    (the server keeps cfg.context), NULL = cfg.context */
    sa_finish_fn finish;         /* final advance, NULL = fl_secagg_server_advance */
    void *finish_user;
    const uint32_t *inputs;      /* (n * d) the clients' inputs, NULL = random mod 2^b */
    int use_tickets;             /* masked inputs go through fl_secagg_norm_check and
                                    fl_secagg_server_receive_checked */
    const fl_secagg_config *server_cfg; /* set by sa_run for use_tickets */
    const fl_secagg_config *client_cfg; /* client 0's config, NULL = cfg */
    const fl_secagg_config *ticket_cfg; /* config the tickets are made with, NULL = the
                                    server's */
    const fl_secagg_identity *ids; /* (n) active mode: the clients' identities, certified
                                    by ids_authority_vk; NULL = made by sa_run (v2 device
                                    certificates when cfg.device_certs) */
    const uint8_t *ids_authority_vk; /* (32) the authority key pinned with ids */
};

struct sa_result {
    fl_status st;                /* FL_OK or the first server advance error */
    fl_secagg_phase failed_at;   /* server phase whose advance failed */
    int sum_ok;                  /* the sum equals the plain sum of U3's inputs */
    uint32_t count;              /* clients in the sum */
    uint32_t expect_count;       /* clients whose masked input the server accepted */
    uint32_t client_failures;    /* clients that failed (sticky) */
    fl_status client_fail_code;  /* code of the first failed client */
    char errmsg[256];            /* server errmsg on failure */
};

static inline uint64_t sa_rng_next(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct sa_identities {
    uint8_t authority_vk[32];
    uint8_t authority_sk[64];
    fl_secagg_identity *ids;     /* (n) */
};

static inline void sa_make_identities(struct sa_identities *I, uint32_t n) {
    assert_int_equal(fl_secagg_signing_keygen(I->authority_vk, I->authority_sk,
                                              FL_SECAGG_BACKEND_SODIUM), FL_OK);
    I->ids = calloc(n, sizeof(*I->ids));
    assert_non_null(I->ids);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t vk[32];
        I->ids[i].struct_size = sizeof(fl_secagg_identity);
        assert_int_equal(fl_secagg_signing_keygen(vk, I->ids[i].signing_key,
                                                  FL_SECAGG_BACKEND_SODIUM), FL_OK);
        assert_int_equal(fl_secagg_cert_issue(I->ids[i].cert, I->authority_sk, i, vk,
                                              FL_SECAGG_BACKEND_SODIUM), FL_OK);
    }
}

/* Device id of client i in the tests' device-certificate rounds: never all zero. */
static inline void sa_device_id(uint8_t id[FL_SECAGG_DEVICE_ID_BYTES], uint32_t i) {
    for (uint32_t j = 0; j < FL_SECAGG_DEVICE_ID_BYTES; j++)
        id[j] = (uint8_t)(0xD0 + j * 29u + i * 7u);
    for (uint32_t j = 0; j < 4; j++) /* the index, little endian */
        id[j] = (uint8_t)(i >> (8 * j));
    id[4] = 0xDE;
}

/* As sa_make_identities, with v2 certificates over the device ids sa_device_id(i). */
static inline void sa_make_device_identities(struct sa_identities *I, uint32_t n,
                                             fl_secagg_backend backend) {
    assert_int_equal(fl_secagg_signing_keygen(I->authority_vk, I->authority_sk, backend),
                     FL_OK);
    I->ids = calloc(n, sizeof(*I->ids));
    assert_non_null(I->ids);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t vk[32];
        I->ids[i].struct_size = sizeof(fl_secagg_identity);
        sa_device_id(I->ids[i].device_id, i);
        assert_int_equal(fl_secagg_signing_keygen(vk, I->ids[i].signing_key, backend), FL_OK);
        assert_int_equal(fl_secagg_cert_issue_device(I->ids[i].cert, I->authority_sk,
                                                     I->ids[i].device_id, vk, backend),
                         FL_OK);
    }
}

/* Delivers one message (copied so tamper can edit it). */
static inline fl_status sa_deliver_to_server(fl_secagg_server *srv, const struct sa_opts *o,
                                      uint32_t from, const uint8_t *msg, size_t len) {
    size_t cap = len + 64;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    memcpy(buf, msg, len);
    if (o->tamper) {
        fl_secagg_msg_type t = (fl_secagg_msg_type)buf[3];
        o->tamper(o->tamper_user, 1, from, t, buf, &len, cap);
    }
    fl_status st;
    if (o->use_tickets && len > 3 && buf[3] == FL_SECAGG_MSG_MASKED_INPUT) {
        fl_secagg_norm_ticket t;
        uint64_t rid = 0;
        for (int i = 0; i < 8; i++)
            rid |= (uint64_t)buf[4 + i] << (8 * i);
        (void)fl_secagg_norm_check(&t, o->ticket_cfg ? o->ticket_cfg : o->server_cfg, rid, from,
                                   buf, len, o->alloc, NULL, 0);
        st = fl_secagg_server_receive_checked(srv, from, buf, len, &t);
    } else {
        st = fl_secagg_server_receive(srv, from, buf, len);
    }
    free(buf);
    return st;
}

/* Runs a full round; returns the outcome in *res. */
static inline void sa_run(const struct sa_opts *o, struct sa_result *res) {
    memset(res, 0, sizeof(*res));
    fl_secagg_config cfg = o->cfg;
    uint32_t n = cfg.num_clients, d = cfg.dim;
    uint64_t round_id = 0x1234567800000000ull + o->seed;
    uint64_t rs = o->seed * 7919 + 1;
    uint32_t bm = cfg.bits >= 32 ? 0xFFFFFFFFu : ((1u << cfg.bits) - 1u);
    struct sa_identities I = {0};
    if (cfg.active && o->ids) {
        memcpy(cfg.verify_key, o->ids_authority_vk, 32);
    } else if (cfg.active) {
        if (cfg.device_certs)
            sa_make_device_identities(&I, n, o->client_backend);
        else
            sa_make_identities(&I, n);
        memcpy(cfg.verify_key, I.authority_vk, 32);
    }
    fl_secagg_config scfg = cfg, ccfg = cfg;
    scfg.backend = o->server_backend;
    ccfg.backend = o->client_backend;
    struct sa_opts oc = *o; /* the deliveries need the server's config for tickets */
    oc.server_cfg = &scfg;
    o = &oc;
    fl_secagg_server *srv = NULL;
    uint8_t gseed[32];
    for (int i = 0; i < 32; i++)
        gseed[i] = (uint8_t)sa_rng_next(&rs);
    assert_int_equal(fl_secagg_server_create(&srv, &scfg, round_id, gseed, o->alloc), FL_OK);
    fl_secagg_client **cl = calloc(n, sizeof(*cl));
    uint32_t *x = malloc((size_t)n * d * sizeof(uint32_t));
    uint8_t *failed = calloc(n, 1), *in_sum = calloc(n, 1);
    assert_true(cl && x && failed && in_sum);
    for (uint32_t i = 0; i < n; i++) {
        if (o->client_context)
            memcpy(ccfg.context, o->client_context[i], FL_SECAGG_CONTEXT_BYTES);
        fl_secagg_config c0 = o->client_cfg && i == 0 ? *o->client_cfg : ccfg;
        c0.backend = ccfg.backend;
        assert_int_equal(fl_secagg_client_create(&cl[i], &c0, round_id, i,
                                                 !cfg.active ? NULL
                                                 : o->ids    ? &o->ids[i]
                                                             : &I.ids[i],
                                                 o->alloc),
                         FL_OK);
        for (uint32_t j = 0; j < d; j++)
            x[(size_t)i * d + j] =
                o->inputs ? o->inputs[(size_t)i * d + j] : (uint32_t)sa_rng_next(&rs) & bm;
        assert_int_equal(fl_secagg_client_set_input(cl[i], x + (size_t)i * d, d), FL_OK);
    }
    /* Step 1: advertise. */
    for (uint32_t i = 0; i < n; i++) {
        if (o->drop && o->drop[i] == SA_DROP_ADVERTISE)
            continue;
        const uint8_t *m;
        size_t ml;
        assert_int_equal(fl_secagg_client_start(cl[i], &m, &ml), FL_OK);
        fl_status st = sa_deliver_to_server(srv, o, i, m, ml);
        (void)st;
    }
    /* Steps 2..: server advance, deliver to clients, replies back. */
    for (;;) {
        fl_secagg_phase before = fl_secagg_server_phase(srv);
        fl_status st = before == FL_SECAGG_PHASE_UNMASK && o->finish
                           ? o->finish(o->finish_user, srv)
                           : fl_secagg_server_advance(srv);
        if (st != FL_OK) {
            res->st = st;
            res->failed_at = before;
            snprintf(res->errmsg, sizeof(res->errmsg), "%s", fl_secagg_server_errmsg(srv));
            break;
        }
        fl_secagg_phase ph = fl_secagg_server_phase(srv);
        if (ph == FL_SECAGG_PHASE_DONE)
            break;
        /* The step whose reply the clients send in phase ph. */
        int step = ph == FL_SECAGG_PHASE_SHARE_KEYS     ? SA_DROP_SHARES
                   : ph == FL_SECAGG_PHASE_MASKED_INPUT ? SA_DROP_MASKED
                   : ph == FL_SECAGG_PHASE_CONSISTENCY  ? SA_DROP_CONSISTENCY
                                                        : SA_DROP_UNMASK;
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *m;
            size_t ml;
            if (failed[i] || fl_secagg_server_outgoing(srv, i, &m, &ml) != FL_OK)
                continue;
            if (o->drop && o->drop[i] && o->drop[i] <= step)
                continue;
            size_t cap = ml + 64;
            uint8_t *buf = malloc(cap);
            assert_non_null(buf);
            memcpy(buf, m, ml);
            if (o->tamper)
                o->tamper(o->tamper_user, 0, i, (fl_secagg_msg_type)buf[3], buf, &ml, cap);
            const uint8_t *r;
            size_t rl;
            fl_status cs = fl_secagg_client_handle(cl[i], buf, ml, &r, &rl);
            free(buf);
            if (cs != FL_OK) {
                if (fl_secagg_client_phase(cl[i]) == FL_SECAGG_PHASE_FAILED) {
                    failed[i] = 1;
                    if (!res->client_failures++)
                        res->client_fail_code = cs;
                }
                continue;
            }
            fl_status ss = sa_deliver_to_server(srv, o, i, r, rl);
            if (ss == FL_OK && step == SA_DROP_MASKED)
                in_sum[i] = 1;
        }
    }
    if (res->st == FL_OK) {
        const uint32_t *sum;
        size_t dim;
        assert_int_equal(fl_secagg_server_result(srv, &sum, &dim, &res->count), FL_OK);
        assert_int_equal(dim, d);
        res->sum_ok = 1;
        for (uint32_t i = 0; i < n; i++)
            res->expect_count += in_sum[i];
        for (uint32_t j = 0; j < d; j++) {
            uint32_t e = 0;
            for (uint32_t i = 0; i < n; i++)
                if (in_sum[i])
                    e += x[(size_t)i * d + j];
            if ((e & bm) != sum[j]) {
                res->sum_ok = 0;
                break;
            }
        }
    }
    for (uint32_t i = 0; i < n; i++)
        fl_secagg_client_destroy(cl[i]);
    fl_secagg_server_destroy(srv);
    free(cl);
    free(x);
    free(failed);
    free(in_sum);
    free(I.ids);
}

static inline void sa_opts_init(struct sa_opts *o, uint32_t n, uint32_t d, uint32_t k, uint32_t t) {
    memset(o, 0, sizeof(*o));
    fl_secagg_config_init(&o->cfg);
    o->cfg.num_clients = n;
    o->cfg.dim = d;
    o->cfg.degree = k;
    o->cfg.threshold = t;
    o->client_backend = FL_SECAGG_BACKEND_SODIUM;
    o->server_backend = FL_SECAGG_BACKEND_SODIUM;
    o->seed = 1;
}

/* ---- a server lying about dropouts (active mode) ---- */

/* What sa_lie_about_dropout does to the server's messages to one client. */
struct sa_lie {
    uint32_t victim;  /* client lied to */
    uint32_t claimed; /* client claimed dropped */
    int mode;         /* 0: forged set in UNMASK_REQ; 1: forged set in CONSISTENCY_REQ;
                         2: a forwarded neighbour signature is corrupted */
    int hits;         /* messages changed */
};

/* sa_tamper_fn (user: struct sa_lie): clears the claimed client's bit in the survivor set
 * the server sends the victim (modes 0 and 1), or flips the last byte of the last forwarded
 * signature in its UNMASK_REQ (mode 2). */
static inline void sa_lie_about_dropout(void *u, int to_server, uint32_t client,
                                        fl_secagg_msg_type t, uint8_t *m, size_t *len,
                                        size_t cap) {
    struct sa_lie *l = u;
    (void)cap;
    if (to_server || client != l->victim)
        return;
    if ((t == FL_SECAGG_MSG_UNMASK_REQ && l->mode == 0) ||
        (t == FL_SECAGG_MSG_CONSISTENCY_REQ && l->mode == 1)) {
        m[FL_SECAGG_HEADER_BYTES + 4 + l->claimed / 8] &= (uint8_t)~(1u << (l->claimed % 8));
        l->hits++;
    }
    if (t == FL_SECAGG_MSG_UNMASK_REQ && l->mode == 2) {
        m[*len - 1] ^= 0x80; /* last byte of the last signature */
        l->hits++;
    }
}

/* Asserts that an active round of n clients under l's lie caught it: one message changed;
 * the victim refuses to unmask (mode 0: the set differs from the one it signed, it reveals
 * nothing; mode 2: forwarded signatures must verify over its set), or (mode 1) it signed a
 * different set, whose signature does not verify at the server, so it is excluded from
 * unmasking (and its neighbours would reject a forged set the same way); the honest part of
 * the round still sums correctly, with all n. */
static inline void sa_check_lie_caught(const struct sa_lie *l, const struct sa_result *r,
                                       uint32_t n) {
    assert_int_equal(l->hits, 1);
    if (l->mode == 0) {
        assert_int_equal(r->client_failures, 1);
        assert_int_equal(r->client_fail_code, FL_ERR_PROTOCOL);
    } else if (l->mode == 2) {
        assert_int_equal(r->client_failures, 1);
        assert_int_equal(r->client_fail_code, FL_ERR_CRYPTO);
    } else {
        assert_int_equal(r->client_failures, 0);
    }
    assert_int_equal(r->st, FL_OK);
    assert_true(r->sum_ok);
    assert_int_equal(r->count, n);
}

/* The options of the lying-server rounds: active, 6 clients, k = 5, t = 3, d = 12. */
static inline void sa_lie_opts_init(struct sa_opts *o) {
    sa_opts_init(o, 6, 12, 5, 3);
    o->cfg.active = 1;
}

/* Each lie of sa_lie_about_dropout (modes 0-2), told to client 0 about client 1 in the
 * round of base (sa_lie_opts_init, then the caller's choices), must be caught. */
static inline void sa_check_lies_caught(const struct sa_opts *base, uint64_t seed0) {
    for (int mode = 0; mode < 3; mode++) {
        struct sa_opts o = *base;
        struct sa_result r;
        struct sa_lie l = {0, 1, mode, 0};
        o.tamper = sa_lie_about_dropout;
        o.tamper_user = &l;
        o.seed = seed0 + (uint64_t)mode;
        sa_run(&o, &r);
        sa_check_lie_caught(&l, &r, 6);
    }
}

#endif
