/* secagg server state machine. Streams: each masked input is folded into one d-length
 * accumulator on arrival and never stored; at the end the self masks of survivors and the
 * pairwise masks between dropped clients and their surviving neighbours are regenerated
 * (each expanded once) and removed. Memory is O(d + n k). See docs/secagg.md. */

#include <stdio.h>
#include <string.h>

#include "secagg_internal.h"

/* ---- state ---- */

#define C_ADV 0x01u    /* advertisement received */
#define C_U1 0x02u     /* in U1: keys distributed */
#define C_SHARES 0x04u /* SHARES received */
#define C_U2 0x08u     /* in U2: ciphertexts delivered, expected to mask */
#define C_U3 0x10u     /* masked input received and folded */
#define C_SIGNED 0x20u /* consistency signature received (active) */
#define C_ASKED 0x40u  /* UNMASK_REQ sent */
#define C_UNMASK 0x80u /* UNMASK_SHARES received */

#define SH_SLOT (1 + FL__SA_SHARE_Y_BYTES) /* have-flag + y */
#define SCRATCH_BYTES ((size_t)FL__SA_MASK_FUSE * 4 * FL__SA_MASK_CHUNK)

struct fl__sa_srv_client {
    uint8_t c_pk[32];                   /* encryption public key */
    uint8_t s_pk[32];                   /* masking public key */
    uint8_t commit[FL__SA_COMMIT_BYTES];/* commitment to b_u */
    uint8_t *ct;                        /* (k, CT) shares it sent, by its receiver slot */
    uint8_t *sh;                        /* (k + 1, SH_SLOT) shares of its secrets received at
                                           unmasking, by holder slot (self = k) */
};

struct fl_secagg_server {
    fl_allocator alloc;                 /* caller's allocator (copied) */
    fl_secagg_config cfg;               /* resolved configuration */
    const struct fl__sa_crypto *crypto; /* backend table */
    struct fl__err err;                 /* last error detail */
    uint64_t round_id;                  /* this round */
    uint8_t seed[32];                   /* public graph seed */
    struct fl__sa_graph graph;          /* communication graph */
    fl_secagg_phase phase;              /* current phase */
    fl_status fail_code;                /* sticky code once FAILED */
    uint32_t n, k, t;                   /* clients, degree, threshold */
    struct fl__sa_srv_client *cl;       /* (n) per-client state */
    uint8_t *flags;                     /* (n) C_* per client; apart from cl so that the
                                           neighbour scans (count_nbrs, prune) stay in cache */
    uint8_t *adv_active;                /* (n, 160) vk || cert || sig (active mode) */
    uint8_t *u3sig;                     /* (n, 64) consistency signatures (active mode) */
    uint8_t *u3;                        /* survivor bitmap (after masked input) */
    uint8_t *u3_stmt;                   /* signed survivor statement (active mode) */
    size_t u3_stmt_len;                 /* bytes of u3_stmt */
    struct fl__sa_buf *outq;            /* (n) outgoing messages of the current phase */
    uint32_t pending;                   /* expected messages not yet received */
    uint32_t *acc;                      /* (d) accumulator mod 2^32, reduced at the end */
    uint32_t count;                     /* inputs in the sum */
    uint8_t *scratch;                   /* SCRATCH_BYTES: FL__SA_MASK_FUSE expansion chunks */
};

static fl_status server_fail(fl_secagg_server *s, fl_status code, const char *msg) {
    fl__err_set(&s->err, code, "%s", msg);
    s->fail_code = code;
    s->phase = FL_SECAGG_PHASE_FAILED;
    fl__log(&s->cfg.logger, FL_LOG_ERROR, "secagg round %llu failed: %s",
            (unsigned long long)s->round_id, msg);
    return code;
}

static size_t ct_bytes(const fl_secagg_server *s) { return (size_t)s->k * FL__SA_SHARE_CT_BYTES; }
static size_t sh_bytes(const fl_secagg_server *s) { return ((size_t)s->k + 1) * SH_SLOT; }
static size_t bm_bytes(const fl_secagg_server *s) { return fl__sa_bitmap_bytes(s->n); }

static void free_outq(fl_secagg_server *s) {
    for (uint32_t i = 0; s->outq && i < s->n; i++)
        fl__sa_buf_free(&s->outq[i], &s->alloc);
}

/* Empties the outgoing queue but keeps the buffers: the next phase's messages reuse them
 * (fl__sa_buf_reserve), sparing n allocations (and fresh-page faults) per phase. The
 * messages are public (keys, ciphertexts, bitmaps), so nothing needs wiping. */
static void reset_outq(fl_secagg_server *s) {
    for (uint32_t i = 0; i < s->n; i++)
        s->outq[i].len = 0;
}

static void free_ct(fl_secagg_server *s) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->cl[i].ct) {
            fl__free(&s->alloc, s->cl[i].ct, ct_bytes(s));
            s->cl[i].ct = NULL;
        }
}

static void free_sh(fl_secagg_server *s) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->cl[i].sh) {
            fl_memzero(s->cl[i].sh, sh_bytes(s));
            fl__free(&s->alloc, s->cl[i].sh, sh_bytes(s));
            s->cl[i].sh = NULL;
        }
}

/* Neighbours of u whose flags contain all bits of `want`. */
static uint32_t count_nbrs(const fl_secagg_server *s, uint32_t u, uint8_t want) {
    uint32_t c = 0;
    for (uint32_t j = 0; j < s->k; j++)
        if ((s->flags[fl__sa_graph_neighbor(&s->graph, u, j)] & want) == want)
            c++;
    return c;
}

/* ---- lifecycle ---- */

fl_status fl_secagg_server_create(fl_secagg_server **out, const fl_secagg_config *cfg,
                                  uint64_t round_id, const uint8_t *graph_seed,
                                  const fl_allocator *alloc) {
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    fl_allocator a;
    fl_status st = fl__allocator_copy(&a, alloc);
    if (st != FL_OK)
        return st;
    fl_secagg_config c;
    if ((st = fl__sa_config_check(&c, cfg, NULL)) != FL_OK)
        return st;
    fl_secagg_server *s = fl__calloc(&a, 1, sizeof(*s));
    if (!s)
        return FL_ERR_NOMEM;
    s->alloc = a;
    s->cfg = c;
    s->crypto = fl__sa_backend(c.backend);
    s->round_id = round_id;
    s->n = c.num_clients;
    s->k = c.degree;
    s->t = c.threshold;
    s->phase = FL_SECAGG_PHASE_ADVERTISE;
    fl__err_clear(&s->err);
    st = FL_ERR_NOMEM;
    if (graph_seed)
        memcpy(s->seed, graph_seed, 32);
    else if (s->crypto->random(s->seed, 32) != 0) {
        st = FL_ERR_CRYPTO;
        goto out_fail;
    }
    s->cl = fl__calloc(&a, s->n, sizeof(*s->cl));
    s->flags = fl__calloc(&a, s->n, 1);
    s->outq = fl__calloc(&a, s->n, sizeof(*s->outq));
    s->acc = fl__calloc(&a, c.dim, sizeof(uint32_t));
    s->scratch = fl__alloc(&a, SCRATCH_BYTES);
    if (!s->cl || !s->flags || !s->outq || !s->acc || !s->scratch)
        goto out_fail;
    if (c.active) {
        s->adv_active = fl__calloc(&a, s->n, 160);
        s->u3sig = fl__calloc(&a, s->n, FL__SA_SIG_BYTES);
        if (!s->adv_active || !s->u3sig)
            goto out_fail;
    }
    if ((st = fl__sa_graph_init(&s->graph, s->n, s->k, s->seed, s->crypto, &a)) != FL_OK)
        goto out_fail;
    s->pending = s->n;
    *out = s;
    return FL_OK;
out_fail:
    fl_secagg_server_destroy(s);
    return st;
}

void fl_secagg_server_destroy(fl_secagg_server *s) {
    if (!s)
        return;
    fl_allocator a = s->alloc;
    if (s->cl) {
        free_ct(s);
        free_sh(s);
        fl__free(&a, s->cl, (size_t)s->n * sizeof(*s->cl));
    }
    fl__free(&a, s->flags, s->n);
    if (s->outq) {
        free_outq(s);
        fl__free(&a, s->outq, (size_t)s->n * sizeof(*s->outq));
    }
    fl__free(&a, s->adv_active, (size_t)s->n * 160);
    fl__free(&a, s->u3sig, (size_t)s->n * FL__SA_SIG_BYTES);
    fl__free(&a, s->u3, bm_bytes(s));
    fl__free(&a, s->u3_stmt, s->u3_stmt_len);
    if (s->acc) {
        fl_memzero(s->acc, (size_t)s->cfg.dim * sizeof(uint32_t));
        fl__free(&a, s->acc, (size_t)s->cfg.dim * sizeof(uint32_t));
    }
    fl__free(&a, s->scratch, SCRATCH_BYTES);
    fl__sa_graph_free(&s->graph, &a);
    fl_memzero(s, sizeof(*s));
    fl__free(&a, s, sizeof(*s));
}

fl_secagg_phase fl_secagg_server_phase(const fl_secagg_server *s) {
    return s ? s->phase : FL_SECAGG_PHASE_FAILED;
}

uint32_t fl_secagg_server_pending(const fl_secagg_server *s) { return s ? s->pending : 0; }

const char *fl_secagg_server_errmsg(const fl_secagg_server *s) {
    return s ? fl__err_msg(&s->err) : "NULL server";
}

void fl_secagg_server_params(const fl_secagg_server *s, uint32_t *degree, uint32_t *threshold) {
    if (!s)
        return;
    if (degree)
        *degree = s->k;
    if (threshold)
        *threshold = s->t;
}

fl_status fl_secagg_server_outgoing(const fl_secagg_server *s, uint32_t to, const uint8_t **msg,
                                    size_t *len) {
    if (!s || !msg || !len || to >= s->n)
        return FL_ERR_MISUSE;
    if (!s->outq[to].p || s->outq[to].len == 0)
        return FL_ERR_NOT_FOUND;
    *msg = s->outq[to].p;
    *len = s->outq[to].len;
    return FL_OK;
}

fl_status fl_secagg_server_result(const fl_secagg_server *s, const uint32_t **sum, size_t *dim,
                                  uint32_t *count) {
    if (!s)
        return FL_ERR_MISUSE;
    if (s->phase != FL_SECAGG_PHASE_DONE)
        return FL_ERR_STATE;
    if (sum)
        *sum = s->acc;
    if (dim)
        *dim = s->cfg.dim;
    if (count)
        *count = s->count;
    return FL_OK;
}

/* ---- receiving ---- */

static fl_status recv_advertise(fl_secagg_server *s, uint32_t from, struct fl__sa_reader *r) {
    size_t adv = s->cfg.active ? FL__SA_ADV_ACTIVE_BYTES : FL__SA_ADV_BASE_BYTES;
    const uint8_t *p;
    if (r->left != adv)
        return fl__err_set(&s->err, FL_ERR_FORMAT, "ADVERTISE: body of %zu bytes, expected %zu",
                           r->left, adv);
    fl__sa_read_bytes(r, &p, adv); /* cannot fail: exactly adv bytes are left */
    /* A small-order key would make every agreement with this client the zero secret, which
     * its neighbours refuse: one such client could stop the round. Refused here, the client
     * simply is not in U1 (dropped at advertise) unless it sends usable keys. */
    if (fl__sa_x25519_is_small_order(p) || fl__sa_x25519_is_small_order(p + 32))
        return fl__err_set(&s->err, FL_ERR_CRYPTO,
                           "ADVERTISE: %s is a small-order X25519 point (no agreement possible)",
                           fl__sa_x25519_is_small_order(p) ? "c_pk" : "s_pk");
    if (s->cfg.active) {
        const struct fl__sa_crypto *cr = s->crypto;
        uint8_t stmt[FL__SA_STMT_BYTES];
        size_t sl = fl__sa_cert_statement(stmt, sizeof(stmt), from, p + 64);
        if (cr->ed25519_verify(p + 96, stmt, sl, s->cfg.verify_key) != 0)
            return fl__err_set(&s->err, FL_ERR_CRYPTO, "ADVERTISE: bad certificate");
        sl = fl__sa_adv_statement(stmt, sizeof(stmt), s->round_id, from, p, p + 32,
                                  s->cfg.context);
        if (cr->ed25519_verify(p + 160, stmt, sl, p + 64) != 0)
            return fl__err_set(&s->err, FL_ERR_CRYPTO, "ADVERTISE: bad signature");
        memcpy(s->adv_active + (size_t)from * 160, p + 64, 160);
    }
    memcpy(s->cl[from].c_pk, p, 32);
    memcpy(s->cl[from].s_pk, p + 32, 32);
    s->flags[from] |= C_ADV;
    return FL_OK;
}

static fl_status recv_shares(fl_secagg_server *s, uint32_t from, struct fl__sa_reader *r) {
    const uint8_t *commit;
    uint32_t count;
    if (fl__sa_read_bytes(r, &commit, FL__SA_COMMIT_BYTES) || fl__sa_read_u32(r, &count))
        return fl__err_set(&s->err, FL_ERR_FORMAT, "SHARES: truncated");
    uint32_t expect = count_nbrs(s, from, C_U1);
    if (count != expect || r->left != (size_t)count * (4 + FL__SA_SHARE_CT_BYTES))
        return fl__err_set(&s->err, FL_ERR_FORMAT, "SHARES: %u entries, expected %u", count,
                           expect);
    struct fl__sa_reader scan = *r;
    int32_t prev = -1;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t to;
        const uint8_t *ct;
        fl__sa_read_u32(&scan, &to);
        fl__sa_read_bytes(&scan, &ct, FL__SA_SHARE_CT_BYTES);
        int32_t slot = fl__sa_graph_slot(&s->graph, from, to);
        if (slot <= prev || !(s->flags[to] & C_U1))
            return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                               "SHARES: receiver list is not the sender's neighbours in U1");
        prev = slot;
    }
    uint8_t *store = fl__alloc(&s->alloc, ct_bytes(s));
    if (!store)
        return fl__err_set(&s->err, FL_ERR_NOMEM, "SHARES: out of memory");
    memset(store, 0, ct_bytes(s));
    for (uint32_t i = 0; i < count; i++) {
        uint32_t to;
        const uint8_t *ct;
        fl__sa_read_u32(r, &to);
        fl__sa_read_bytes(r, &ct, FL__SA_SHARE_CT_BYTES);
        memcpy(store + (size_t)fl__sa_graph_slot(&s->graph, from, to) * FL__SA_SHARE_CT_BYTES,
               ct, FL__SA_SHARE_CT_BYTES);
    }
    memcpy(s->cl[from].commit, commit, FL__SA_COMMIT_BYTES);
    s->cl[from].ct = store;
    s->flags[from] |= C_SHARES;
    return FL_OK;
}

/* Folds a masked input into the accumulator. The whole body is checked first so a bad
 * message leaves the sum untouched. */
static fl_status recv_masked(fl_secagg_server *s, uint32_t from, struct fl__sa_reader *r) {
    size_t d = s->cfg.dim, eb = fl__sa_elem_bytes(s->cfg.bits);
    if (r->left != d * eb)
        return fl__err_set(&s->err, FL_ERR_FORMAT, "MASKED_INPUT: %zu bytes, expected %zu",
                           r->left, d * eb);
    const uint8_t *p = r->p;
    uint32_t *acc = s->acc;
    if (s->cfg.bits % 8) {
        uint8_t top = (uint8_t)~((1u << (s->cfg.bits % 8)) - 1u);
        uint8_t bad = 0;
        for (size_t i = 0; i < d; i++)
            bad |= p[eb * i + eb - 1] & top;
        if (bad)
            return fl__err_set(&s->err, FL_ERR_FORMAT, "MASKED_INPUT: value >= 2^%u",
                               s->cfg.bits);
    }
    if (eb == 4) {
        fl__sa_add_u32le(acc, p, d);
    } else {
        for (size_t i = 0; i < d; i++) {
            uint32_t v = 0;
            for (size_t j = 0; j < eb; j++)
                v |= (uint32_t)p[eb * i + j] << (8 * j);
            acc[i] += v;
        }
    }
    s->flags[from] |= C_U3;
    return FL_OK;
}

static fl_status recv_consistency(fl_secagg_server *s, uint32_t from, struct fl__sa_reader *r) {
    const uint8_t *sig;
    if (r->left != FL__SA_SIG_BYTES)
        return fl__err_set(&s->err, FL_ERR_FORMAT, "CONSISTENCY_SIG: body of %zu bytes",
                           r->left);
    fl__sa_read_bytes(r, &sig, FL__SA_SIG_BYTES); /* cannot fail: the length was checked */
    const uint8_t *vk = s->adv_active + (size_t)from * 160;
    if (s->crypto->ed25519_verify(sig, s->u3_stmt, s->u3_stmt_len, vk) != 0)
        return fl__err_set(&s->err, FL_ERR_CRYPTO, "CONSISTENCY_SIG: bad signature");
    memcpy(s->u3sig + (size_t)from * FL__SA_SIG_BYTES, sig, FL__SA_SIG_BYTES);
    s->flags[from] |= C_SIGNED;
    return FL_OK;
}

/* Holder `from` reveals, for each neighbour v that shared with it, b_v's share if v is in
 * U3 and s_v's share otherwise, plus its own b share last. */
static fl_status recv_unmask(fl_secagg_server *s, uint32_t from, struct fl__sa_reader *r) {
    uint32_t count;
    if (fl__sa_read_u32(r, &count))
        return fl__err_set(&s->err, FL_ERR_FORMAT, "UNMASK_SHARES: truncated");
    uint32_t expect = count_nbrs(s, from, C_U2) + 1;
    const size_t es = 4 + 1 + FL__SA_SHARE_Y_BYTES;
    if (count != expect || r->left != (size_t)count * es)
        return fl__err_set(&s->err, FL_ERR_FORMAT, "UNMASK_SHARES: %u entries, expected %u",
                           count, expect);
    struct fl__sa_reader scan = *r;
    int32_t prev = -1;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t v;
        uint8_t kind;
        const uint8_t *y;
        fl__sa_read_u32(&scan, &v);
        fl__sa_read_u8(&scan, &kind);
        fl__sa_read_bytes(&scan, &y, FL__SA_SHARE_Y_BYTES);
        int32_t slot = v == from ? (int32_t)s->k : fl__sa_graph_slot(&s->graph, from, v);
        if (slot <= prev || (v != from && !(s->flags[v] & C_U2)))
            return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                               "UNMASK_SHARES: entries are not the holder's U2 neighbours");
        uint8_t want = (s->flags[v] & C_U3) ? FL__SA_KIND_B : FL__SA_KIND_S;
        if (kind != want)
            return fl__err_set(&s->err, FL_ERR_PROTOCOL, "UNMASK_SHARES: wrong share kind");
        if (y[0] > 1)
            return fl__err_set(&s->err, FL_ERR_FORMAT, "UNMASK_SHARES: share out of field");
        prev = slot;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t v;
        uint8_t kind;
        const uint8_t *y;
        fl__sa_read_u32(r, &v);
        fl__sa_read_u8(r, &kind);
        fl__sa_read_bytes(r, &y, FL__SA_SHARE_Y_BYTES);
        if (!s->cl[v].sh)
            continue; /* nothing to reconstruct for v (no survivor depends on it) */
        int32_t hs = v == from ? (int32_t)s->k : fl__sa_graph_slot(&s->graph, v, from);
        uint8_t *slot = s->cl[v].sh + (size_t)hs * SH_SLOT;
        slot[0] = 1;
        memcpy(slot + 1, y, FL__SA_SHARE_Y_BYTES);
    }
    s->flags[from] |= C_UNMASK;
    return FL_OK;
}

fl_status fl_secagg_server_receive(fl_secagg_server *s, uint32_t from, const uint8_t *msg,
                                   size_t len) {
    if (!s)
        return FL_ERR_MISUSE;
    if (s->phase == FL_SECAGG_PHASE_FAILED)
        return s->fail_code;
    if (s->phase == FL_SECAGG_PHASE_DONE)
        return fl__err_set(&s->err, FL_ERR_STATE, "receive: round already done");
    if (from >= s->n)
        return fl__err_set(&s->err, FL_ERR_PROTOCOL, "receive: unknown client %u", from);
    static const fl_secagg_msg_type expect_type[] = {
        FL_SECAGG_MSG_ADVERTISE, FL_SECAGG_MSG_SHARES, FL_SECAGG_MSG_MASKED_INPUT,
        FL_SECAGG_MSG_CONSISTENCY_SIG, FL_SECAGG_MSG_UNMASK_SHARES};
    /* Client must be in the set of the phase; `done` marks a duplicate. */
    static const uint8_t need[] = {0, C_U1, C_U2, C_U3, C_ASKED};
    static const uint8_t done[] = {C_ADV, C_SHARES, C_U3, C_SIGNED, C_UNMASK};
    int ph = (int)s->phase;
    fl_secagg_msg_type type = expect_type[ph];
    struct fl__sa_reader r;
    fl_status st = fl__sa_open_msg(&r, &s->err, msg, len, type, s->round_id, from,
                                   fl__sa_msg_limit(&s->cfg, type));
    if (st != FL_OK)
        return st;
    uint8_t f = s->flags[from];
    if ((f & need[ph]) != need[ph])
        return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                           "receive: client %u is not part of this phase", from);
    if (f & done[ph])
        return fl__err_set(&s->err, FL_ERR_EXISTS,
                           "receive: duplicate message from client %u", from);
    switch (s->phase) {
    case FL_SECAGG_PHASE_ADVERTISE:
        st = recv_advertise(s, from, &r);
        break;
    case FL_SECAGG_PHASE_SHARE_KEYS:
        st = recv_shares(s, from, &r);
        break;
    case FL_SECAGG_PHASE_MASKED_INPUT:
        st = recv_masked(s, from, &r);
        break;
    case FL_SECAGG_PHASE_CONSISTENCY:
        st = recv_consistency(s, from, &r);
        break;
    case FL_SECAGG_PHASE_UNMASK:
        st = recv_unmask(s, from, &r);
        break;
    default:
        return FL_ERR_INTERNAL;
    }
    if (st == FL_OK) {
        if (s->pending)
            s->pending--;
        fl__err_clear(&s->err);
    }
    return st;
}

/* ---- phase transitions ---- */

/* Removes from `have` (setting clear) every client with fewer than t - 1 neighbours in the
 * set, until none is left: such a client could not split its secrets t ways. */
static uint32_t prune(fl_secagg_server *s, uint8_t have) {
    int changed = 1;
    while (changed) {
        changed = 0;
        for (uint32_t u = 0; u < s->n; u++)
            if ((s->flags[u] & have) && count_nbrs(s, u, have) + 1 < s->t) {
                s->flags[u] &= (uint8_t)~have;
                changed = 1;
            }
    }
    uint32_t m = 0;
    for (uint32_t u = 0; u < s->n; u++)
        if (s->flags[u] & have)
            m++;
    return m;
}

static fl_status abort_few(fl_secagg_server *s, const char *what, uint32_t have, uint32_t need) {
    char m[160];
    snprintf(m, sizeof(m), "too few survivors %s: %u, need at least %u (t = %u)", what, have,
             need, s->t);
    return server_fail(s, FL_ERR_ABORTED, m);
}

static fl_status build_keys(fl_secagg_server *s) {
    size_t adv = s->cfg.active ? FL__SA_ADV_ACTIVE_BYTES : FL__SA_ADV_BASE_BYTES;
    for (uint32_t u = 0; u < s->n; u++) {
        if (!(s->flags[u] & C_U1))
            continue;
        uint32_t cnt = count_nbrs(s, u, C_U1);
        size_t body = 56 + (size_t)cnt * (4 + adv);
        struct fl__sa_buf *b = &s->outq[u];
        if (fl__sa_buf_reserve(b, &s->alloc, FL_SECAGG_HEADER_BYTES + body) != 0)
            return FL_ERR_NOMEM;
        uint8_t *p = b->p;
        fl__sa_put_header(p, FL_SECAGG_MSG_KEYS, s->round_id, u, (uint32_t)body);
        p += FL_SECAGG_HEADER_BYTES;
        fl__put_u32le(p, s->n);
        fl__put_u32le(p + 4, s->k);
        fl__put_u32le(p + 8, s->t);
        p[12] = (uint8_t)s->cfg.bits;
        p[13] = (uint8_t)s->cfg.active;
        p[14] = p[15] = 0;
        fl__put_u32le(p + 16, s->cfg.dim);
        memcpy(p + 20, s->seed, 32);
        fl__put_u32le(p + 52, cnt);
        p += 56;
        for (uint32_t j = 0; j < s->k; j++) {
            uint32_t v = fl__sa_graph_neighbor(&s->graph, u, j);
            if (!(s->flags[v] & C_U1))
                continue;
            fl__put_u32le(p, v);
            memcpy(p + 4, s->cl[v].c_pk, 32);
            memcpy(p + 36, s->cl[v].s_pk, 32);
            if (s->cfg.active)
                memcpy(p + 68, s->adv_active + (size_t)v * 160, 160);
            p += 4 + adv;
        }
        b->len = FL_SECAGG_HEADER_BYTES + body;
    }
    return FL_OK;
}

static fl_status build_ciphertexts(fl_secagg_server *s) {
    for (uint32_t w = 0; w < s->n; w++) {
        if (!(s->flags[w] & C_U2))
            continue;
        uint32_t cnt = count_nbrs(s, w, C_U2);
        size_t body = 4 + (size_t)cnt * (4 + FL__SA_SHARE_CT_BYTES);
        struct fl__sa_buf *b = &s->outq[w];
        if (fl__sa_buf_reserve(b, &s->alloc, FL_SECAGG_HEADER_BYTES + body) != 0)
            return FL_ERR_NOMEM;
        uint8_t *p = b->p;
        fl__sa_put_header(p, FL_SECAGG_MSG_CIPHERTEXTS, s->round_id, w, (uint32_t)body);
        p += FL_SECAGG_HEADER_BYTES;
        fl__put_u32le(p, cnt);
        p += 4;
        for (uint32_t j = 0; j < s->k; j++) {
            uint32_t u = fl__sa_graph_neighbor(&s->graph, w, j);
            if (!(s->flags[u] & C_U2))
                continue;
            int32_t slot = fl__sa_graph_slot(&s->graph, u, w);
            fl__put_u32le(p, u);
            memcpy(p + 4, s->cl[u].ct + (size_t)slot * FL__SA_SHARE_CT_BYTES,
                   FL__SA_SHARE_CT_BYTES);
            p += 4 + FL__SA_SHARE_CT_BYTES;
        }
        b->len = FL_SECAGG_HEADER_BYTES + body;
    }
    return FL_OK;
}

/* CONSISTENCY_REQ or UNMASK_REQ to every client with flag `to`. */
static fl_status build_bitmap_msgs(fl_secagg_server *s, fl_secagg_msg_type type, uint8_t to) {
    size_t bl = bm_bytes(s);
    for (uint32_t u = 0; u < s->n; u++) {
        if (!(s->flags[u] & to))
            continue;
        uint32_t cnt = 0;
        if (type == FL_SECAGG_MSG_UNMASK_REQ && s->cfg.active)
            cnt = count_nbrs(s, u, C_SIGNED);
        size_t body = 4 + bl + (type == FL_SECAGG_MSG_UNMASK_REQ
                                    ? 4 + (size_t)cnt * (4 + FL__SA_SIG_BYTES) : 0);
        struct fl__sa_buf *b = &s->outq[u];
        if (fl__sa_buf_reserve(b, &s->alloc, FL_SECAGG_HEADER_BYTES + body) != 0)
            return FL_ERR_NOMEM;
        uint8_t *p = b->p;
        fl__sa_put_header(p, type, s->round_id, u, (uint32_t)body);
        p += FL_SECAGG_HEADER_BYTES;
        fl__put_u32le(p, s->n);
        memcpy(p + 4, s->u3, bl);
        p += 4 + bl;
        if (type == FL_SECAGG_MSG_UNMASK_REQ) {
            fl__put_u32le(p, cnt);
            p += 4;
            for (uint32_t j = 0; cnt && j < s->k; j++) {
                uint32_t v = fl__sa_graph_neighbor(&s->graph, u, j);
                if (!(s->flags[v] & C_SIGNED))
                    continue;
                fl__put_u32le(p, v);
                memcpy(p + 4, s->u3sig + (size_t)v * FL__SA_SIG_BYTES, FL__SA_SIG_BYTES);
                p += 4 + FL__SA_SIG_BYTES;
            }
        }
        b->len = FL_SECAGG_HEADER_BYTES + body;
    }
    return FL_OK;
}

/* Checks that every secret the server must rebuild has >= t potential holders among the
 * clients flagged `holder`: b_v of each v in U3 (neighbours + v itself), s_v of each v in
 * U2 \ U3 that has a neighbour in U3 (neighbours only). */
static fl_status check_reconstructible(fl_secagg_server *s, uint8_t holder, const char *when) {
    for (uint32_t v = 0; v < s->n; v++) {
        uint8_t f = s->flags[v];
        if (!(f & C_U2))
            continue;
        uint32_t h = count_nbrs(s, v, holder);
        if (f & C_U3) {
            h += (f & holder) ? 1 : 0;
            if (h < s->t)
                return abort_few(s, when, h, s->t);
        } else if (count_nbrs(s, v, C_U3) > 0 && h < s->t) {
            return abort_few(s, when, h, s->t);
        }
    }
    return FL_OK;
}

/* Allocates the unmask share tables of every client whose secret will be rebuilt. */
static fl_status alloc_share_tables(fl_secagg_server *s) {
    for (uint32_t v = 0; v < s->n; v++) {
        uint8_t f = s->flags[v];
        if (!(f & C_U2) || s->cl[v].sh)
            continue;
        if (!(f & C_U3) && count_nbrs(s, v, C_U3) == 0)
            continue;
        s->cl[v].sh = fl__calloc(&s->alloc, (size_t)s->k + 1, SH_SLOT);
        if (!s->cl[v].sh)
            return FL_ERR_NOMEM;
    }
    return FL_OK;
}

static uint32_t count_flag(const fl_secagg_server *s, uint8_t f) {
    uint32_t m = 0;
    for (uint32_t u = 0; u < s->n; u++)
        if ((s->flags[u] & f) == f)
            m++;
    return m;
}

/* ---- unmasking ----
 * Secrets are rebuilt in groups: the first t shares of each of up to UM_GROUP_SHARES / t
 * clients go through one fl__sa_shamir_combine_many call, which shares its field inversions
 * across the group (one per UM_WINDOW shares), then each rebuilt secret is checked and its
 * masks removed. The work buffers are allocated once per unmask, before the accumulator
 * is touched, so FL_ERR_NOMEM leaves the round as it was. */

#define UM_GROUP_SHARES 2048u /* shares per combine_many call */
#define UM_WINDOW 1024u       /* shares per field inversion */

struct um_work {
    size_t group;                 /* clients per group */
    struct fl__sa_combine_job *jobs; /* (group) */
    struct fl__sa_share *shares;  /* (group, t) */
    uint8_t *secrets;             /* (group, 32) */
    uint32_t *who;                /* (group) client of each job */
    void *scratch;                /* UM_WINDOW * FL__SA_SHAMIR_SCRATCH_PER_SHARE bytes */
    uint8_t seeds[FL__SA_MASK_FUSE][32]; /* masks waiting to be removed together */
    int signs[FL__SA_MASK_FUSE];  /* their signs in the sum (-1: subtract) */
    size_t queued;                /* masks in seeds */
    size_t bytes;                 /* size of the single allocation */
    void *block;                  /* the allocation */
};

static size_t um_align(size_t x) { return (x + 15u) & ~(size_t)15u; }

static fl_status um_alloc(fl_secagg_server *s, struct um_work *w) {
    size_t t = s->t;
    w->group = UM_GROUP_SHARES / t ? UM_GROUP_SHARES / t : 1;
    size_t g = w->group;
    size_t o_jobs = 0;
    size_t o_sh = um_align(o_jobs + g * sizeof(*w->jobs));
    size_t o_sec = um_align(o_sh + g * t * sizeof(*w->shares));
    size_t o_who = um_align(o_sec + g * 32);
    size_t o_scr = um_align(o_who + g * sizeof(*w->who));
    w->bytes = o_scr + (size_t)UM_WINDOW * FL__SA_SHAMIR_SCRATCH_PER_SHARE;
    w->block = fl__alloc(&s->alloc, w->bytes);
    if (!w->block)
        return fl__err_set(&s->err, FL_ERR_NOMEM, "unmask: out of memory");
    uint8_t *p = w->block;
    w->jobs = (struct fl__sa_combine_job *)(void *)(p + o_jobs);
    w->shares = (struct fl__sa_share *)(void *)(p + o_sh);
    w->secrets = p + o_sec;
    w->who = (uint32_t *)(void *)(p + o_who);
    w->scratch = p + o_scr;
    return FL_OK;
}

static void um_free(fl_secagg_server *s, struct um_work *w) {
    if (!w->block)
        return;
    fl_memzero(w->block, w->bytes);
    fl__free(&s->alloc, w->block, w->bytes);
    w->block = NULL;
}

/* Checks a rebuilt secret of v. kind B: b_v against v's commitment; kind S: s_v against
 * v's advertised public key. */
static fl_status um_check(fl_secagg_server *s, uint32_t v, int kind, const uint8_t secret[32]) {
    uint8_t check[32];
    int bad;
    if (kind == FL__SA_KIND_B)
        bad = fl__sa_commit_b(check, s->crypto, s->round_id, v, secret) != 0 ||
              fl_memeq_ct(check, s->cl[v].commit, 32) != 0;
    else
        bad = s->crypto->x25519_public(check, secret) != 0 ||
              fl_memeq_ct(check, s->cl[v].s_pk, 32) != 0;
    fl_memzero(check, sizeof(check));
    if (!bad)
        return FL_OK;
    char m[128];
    snprintf(m, sizeof(m), "client %u: rebuilt %s does not match", v,
             kind == FL__SA_KIND_B ? "self-mask seed" : "masking key");
    return server_fail(s, FL_ERR_PROTOCOL, m);
}

/* Removes the queued masks in one pass over the accumulator per chunk. */
static fl_status um_flush(fl_secagg_server *s, struct um_work *w) {
    int rc = fl__sa_mask_apply_many(s->acc, s->cfg.dim, (const uint8_t(*)[32])w->seeds,
                                    w->signs, w->queued, s->crypto, s->scratch);
    fl_memzero(w->seeds, sizeof(w->seeds));
    w->queued = 0;
    return rc == 0 ? FL_OK : server_fail(s, FL_ERR_CRYPTO, "mask removal failed");
}

/* Queues sign * PRG(seed) for removal; flushes when FL__SA_MASK_FUSE are waiting. */
static fl_status um_queue(fl_secagg_server *s, struct um_work *w, const uint8_t seed[32],
                          int sign) {
    memcpy(w->seeds[w->queued], seed, 32);
    w->signs[w->queued] = sign;
    return ++w->queued == FL__SA_MASK_FUSE ? um_flush(s, w) : FL_OK;
}

/* Removes v's masks with its rebuilt secret: -PRG(b_v) if v is in U3; otherwise, for each
 * surviving neighbour w, the pairwise mask w added for v, -sign(w, v) PRG(s_wv). */
static fl_status um_remove(fl_secagg_server *s, struct um_work *uw, uint32_t v,
                           const uint8_t secret[32]) {
    if (s->flags[v] & C_U3)
        return um_queue(s, uw, secret, -1);
    uint8_t seed[32];
    fl_status st = FL_OK;
    for (uint32_t j = 0; j < s->k && st == FL_OK; j++) {
        uint32_t w = fl__sa_graph_neighbor(&s->graph, v, j);
        if (!(s->flags[w] & C_U3))
            continue;
        int sign_w = w < v ? +1 : -1; /* what w added */
        if (fl__sa_derive_pair_key(seed, s->crypto, "mask", secret, s->cl[w].s_pk,
                                   s->round_id, v, w, NULL) != 0)
            st = server_fail(s, FL_ERR_CRYPTO, "pairwise mask removal failed");
        else
            st = um_queue(s, uw, seed, -sign_w);
    }
    fl_memzero(seed, sizeof(seed));
    return st;
}

/* Rebuilds, checks and removes the masks of one group of jobs. */
static fl_status um_group(fl_secagg_server *s, struct um_work *w, size_t m) {
    fl__sa_shamir_combine_many(w->jobs, m, w->scratch,
                               (size_t)UM_WINDOW * FL__SA_SHAMIR_SCRATCH_PER_SHARE);
    for (size_t i = 0; i < m; i++) {
        uint32_t v = w->who[i];
        int kind = (s->flags[v] & C_U3) ? FL__SA_KIND_B : FL__SA_KIND_S;
        fl_status st;
        if (w->jobs[i].rc != 0) {
            char msg[128];
            snprintf(msg, sizeof(msg), "client %u: shares do not combine", v);
            return server_fail(s, FL_ERR_PROTOCOL, msg);
        }
        if ((st = um_check(s, v, kind, w->jobs[i].secret)) != FL_OK ||
            (st = um_remove(s, w, v, w->jobs[i].secret)) != FL_OK)
            return st;
    }
    return FL_OK;
}

/* Removes the masks: -PRG(b_v) for every v in U3; for every v in U2 \ U3, the pairwise mask
 * each surviving neighbour w added for v, -sign(w, v) PRG(s_wv). */
static fl_status unmask(fl_secagg_server *s) {
    /* Check share counts first, so an abort costs no mask expansion. */
    for (uint32_t v = 0; v < s->n; v++) {
        if (!s->cl[v].sh)
            continue;
        uint32_t have = 0;
        for (uint32_t j = 0; j <= s->k; j++)
            have += s->cl[v].sh[(size_t)j * SH_SLOT];
        if (have < s->t)
            return abort_few(s, "at unmasking (shares for one client)", have, s->t);
    }
    struct um_work w = {0};
    fl_status st = um_alloc(s, &w);
    if (st != FL_OK)
        return st;
    size_t m = 0;
    for (uint32_t v = 0; v < s->n && st == FL_OK; v++) {
        if (!s->cl[v].sh)
            continue;
        /* The first t shares in holder-slot order (self last). */
        struct fl__sa_share *sh = w.shares + m * s->t;
        size_t have = 0;
        for (uint32_t j = 0; j <= s->k && have < s->t; j++) {
            const uint8_t *slot = s->cl[v].sh + (size_t)j * SH_SLOT;
            if (!slot[0])
                continue;
            sh[have].x = (j == s->k ? v : fl__sa_graph_neighbor(&s->graph, v, j)) + 1;
            memcpy(sh[have].y, slot + 1, FL__SA_SHARE_Y_BYTES);
            have++;
        }
        w.jobs[m].secret = w.secrets + m * 32;
        w.jobs[m].shares = sh;
        w.jobs[m].k = have;
        w.who[m] = v;
        if (++m == w.group) {
            st = um_group(s, &w, m);
            m = 0;
        }
    }
    if (st == FL_OK && m)
        st = um_group(s, &w, m);
    if (st == FL_OK && w.queued)
        st = um_flush(s, &w);
    um_free(s, &w);
    fl_memzero(w.seeds, sizeof(w.seeds)); /* left queued by a failure */
    fl_memzero(s->scratch, SCRATCH_BYTES); /* keystream of the last masks */
    if (st != FL_OK)
        return st;
    uint32_t mask = fl__sa_bitmask(s->cfg.bits);
    for (size_t i = 0; i < s->cfg.dim; i++)
        s->acc[i] &= mask;
    s->count = count_flag(s, C_U3);
    return FL_OK;
}

fl_status fl_secagg_server_advance(fl_secagg_server *s) {
    if (!s)
        return FL_ERR_MISUSE;
    if (s->phase == FL_SECAGG_PHASE_FAILED)
        return s->fail_code;
    if (s->phase == FL_SECAGG_PHASE_DONE)
        return fl__err_set(&s->err, FL_ERR_STATE, "advance: round already done");
    fl_status st = FL_OK;
    fl_secagg_phase next = s->phase;
    uint32_t m;
    if (s->phase == FL_SECAGG_PHASE_UNMASK)
        free_outq(s); /* no phase after this one sends anything */
    else
        reset_outq(s);
    switch (s->phase) {
    case FL_SECAGG_PHASE_ADVERTISE:
        for (uint32_t u = 0; u < s->n; u++)
            if (s->flags[u] & C_ADV)
                s->flags[u] |= C_U1;
        m = prune(s, C_U1);
        if (m < s->t)
            return abort_few(s, "after advertise keys", m, s->t);
        if ((st = build_keys(s)) != FL_OK)
            goto out_nomem;
        next = FL_SECAGG_PHASE_SHARE_KEYS;
        break;
    case FL_SECAGG_PHASE_SHARE_KEYS:
        for (uint32_t u = 0; u < s->n; u++)
            if ((s->flags[u] & (C_U1 | C_SHARES)) == (C_U1 | C_SHARES))
                s->flags[u] |= C_U2;
            else
                s->flags[u] &= (uint8_t)~C_U2;
        m = prune(s, C_U2);
        if (m < s->t)
            return abort_few(s, "after share keys", m, s->t);
        if ((st = build_ciphertexts(s)) != FL_OK)
            goto out_nomem;
        free_ct(s);
        next = FL_SECAGG_PHASE_MASKED_INPUT;
        break;
    case FL_SECAGG_PHASE_MASKED_INPUT: {
        m = count_flag(s, C_U3);
        if (m < s->t)
            return abort_few(s, "after masked input", m, s->t);
        if ((st = check_reconstructible(s, C_U3, "after masked input")) != FL_OK)
            return st;
        if (!s->u3) {
            s->u3 = fl__calloc(&s->alloc, 1, bm_bytes(s));
            if (!s->u3)
                goto out_nomem;
        }
        for (uint32_t u = 0; u < s->n; u++)
            if (s->flags[u] & C_U3)
                fl__sa_bit_set(s->u3, u);
        if (s->cfg.active) {
            if (!s->u3_stmt) {
                s->u3_stmt = fl__sa_u3_statement(&s->u3_stmt_len, &s->alloc, s->round_id, s->n,
                                                 s->u3, bm_bytes(s));
                if (!s->u3_stmt)
                    goto out_nomem;
            }
            if ((st = build_bitmap_msgs(s, FL_SECAGG_MSG_CONSISTENCY_REQ, C_U3)) != FL_OK)
                goto out_nomem;
            next = FL_SECAGG_PHASE_CONSISTENCY;
        } else {
            for (uint32_t u = 0; u < s->n; u++)
                if (s->flags[u] & C_U3)
                    s->flags[u] |= C_ASKED;
            if (alloc_share_tables(s) != FL_OK ||
                build_bitmap_msgs(s, FL_SECAGG_MSG_UNMASK_REQ, C_ASKED) != FL_OK)
                goto out_nomem;
            next = FL_SECAGG_PHASE_UNMASK;
        }
        break;
    }
    case FL_SECAGG_PHASE_CONSISTENCY:
        /* Ask only signers that will see >= t - 1 neighbour signatures. */
        for (uint32_t u = 0; u < s->n; u++)
            if ((s->flags[u] & C_SIGNED) && count_nbrs(s, u, C_SIGNED) + 1 >= s->t)
                s->flags[u] |= C_ASKED;
            else
                s->flags[u] &= (uint8_t)~C_ASKED;
        m = count_flag(s, C_ASKED);
        if (m < s->t)
            return abort_few(s, "after consistency check", m, s->t);
        if ((st = check_reconstructible(s, C_ASKED, "after consistency check")) != FL_OK)
            return st;
        if (alloc_share_tables(s) != FL_OK ||
            build_bitmap_msgs(s, FL_SECAGG_MSG_UNMASK_REQ, C_ASKED) != FL_OK)
            goto out_nomem;
        next = FL_SECAGG_PHASE_UNMASK;
        break;
    case FL_SECAGG_PHASE_UNMASK:
        if ((st = unmask(s)) != FL_OK)
            return st;
        free_sh(s);
        next = FL_SECAGG_PHASE_DONE;
        break;
    default:
        return FL_ERR_INTERNAL;
    }
    s->phase = next;
    s->pending = 0;
    for (uint32_t u = 0; u < s->n; u++)
        if (s->outq[u].len)
            s->pending++;
    fl__err_clear(&s->err);
    fl__log(&s->cfg.logger, FL_LOG_INFO, "secagg round %llu: phase %d, %u clients",
            (unsigned long long)s->round_id, (int)next, s->pending);
    return FL_OK;
out_nomem:
    free_outq(s);
    return fl__err_set(&s->err, FL_ERR_NOMEM, "advance: out of memory");
}
