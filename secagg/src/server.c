/* secagg server state machine. Streams: each masked input is folded into one d-length
 * accumulator on arrival and never stored; at the end the self masks of survivors and the
 * pairwise masks between dropped clients and their surviving neighbours are regenerated
 * (each expanded once) and removed. Memory is O(d + n k). See docs/secagg.md. */

#include <stdatomic.h>
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
#define PS_SLOT (1 + FL__SA_PAIR_SEED_BYTES) /* have-flag + revealed pairwise seed */
#define SCRATCH_BYTES FL__SA_MASK_RANGE_SCRATCH /* mask batch area */

struct um_work;
static void um_release(fl_secagg_server *s);

struct fl__sa_srv_client {
    uint8_t c_pk[32];                   /* encryption public key */
    uint8_t s_pk[32];                   /* masking public key */
    uint8_t commit[FL__SA_COMMIT_BYTES];/* commitment to b_u */
    uint8_t *sh;                        /* (k + 1, SH_SLOT) shares of its secrets received at
                                           unmasking, by holder slot (self = k) */
    uint8_t *ps;                        /* reveal_pair_seeds, a client that dropped before
                                           masking: (k, PS_SLOT) the pairwise seeds its
                                           surviving neighbours revealed, by neighbour slot */
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
    uint8_t *adv_active;                /* (n, act) vk || cert || sig [|| device_id] (active
                                           mode; act = adv_active_bytes: 160, or 192 with
                                           device certificates) */
    uint8_t *u3sig;                     /* (n, 64) consistency signatures (active mode) */
    uint8_t *u3;                        /* survivor bitmap (after masked input) */
    uint8_t *u3_stmt;                   /* signed survivor statement (active mode) */
    size_t u3_stmt_len;                 /* bytes of u3_stmt */
    struct fl__sa_buf *outq;            /* (n) outgoing messages of the current phase */
    struct fl__sa_buf *ctq;             /* (n) share phase: each recipient's CIPHERTEXTS
                                           message, filled in place as SHARES arrive
                                           (header | count | k entries in the recipient's
                                           slot order, CTQ_NONE = not sent); compacted and
                                           swapped into outq by the phase's advance */
    uint32_t pending;                   /* expected messages not yet received */
    uint32_t *acc;                      /* (d + limbs) accumulator mod 2^32, reduced at the
                                           end */
    uint8_t vsum[32];                   /* norm mode: sum of the commitments of the inputs
                                           in acc (ristretto255; zero = identity) */
    uint32_t count;                     /* inputs in the sum */
    struct um_work *um;                 /* final advance in progress (unmask_begin until
                                           DONE or failure), else NULL */
    uint64_t um_secrets, um_agree, um_masks; /* that advance's work, set when it begins
                                           (fl__sa_server_unmask_work) */
};

static fl_status server_fail(fl_secagg_server *s, fl_status code, const char *msg) {
    fl__err_set(&s->err, code, "%s", msg);
    s->fail_code = code;
    s->phase = FL_SECAGG_PHASE_FAILED;
    fl__log(&s->cfg.logger, FL_LOG_ERROR, "secagg round %llu failed: %s",
            (unsigned long long)s->round_id, msg);
    return code;
}

/* Bytes per client of adv_active: the advertisement after c_pk || s_pk. */
static size_t adv_active_bytes(const fl_secagg_server *s) {
    return fl__sa_adv_bytes(&s->cfg) - FL__SA_ADV_BASE_BYTES;
}

#define CT_ENTRY (4 + FL__SA_SHARE_CT_BYTES) /* sender index + share ciphertext */
#define CTQ_NONE UINT32_MAX                   /* ctq entry whose sender has not sent */
static size_t ctq_bytes(const fl_secagg_server *s) {
    return FL_SECAGG_HEADER_BYTES + 4 + (size_t)s->k * CT_ENTRY;
}
static size_t sh_bytes(const fl_secagg_server *s) { return ((size_t)s->k + 1) * SH_SLOT; }
static size_t ps_bytes(const fl_secagg_server *s) { return (size_t)s->k * PS_SLOT; }
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

/* Frees the share phase's message buffers. They hold public bytes (ciphertexts, or the
 * KEYS messages swapped out of outq), so they are not wiped. */
static void free_ctq(fl_secagg_server *s) {
    for (uint32_t i = 0; s->ctq && i < s->n; i++)
        if (s->ctq[i].p) {
            fl__free(&s->alloc, s->ctq[i].p, s->ctq[i].cap);
            s->ctq[i] = (struct fl__sa_buf){0};
        }
}

/* Gives recipient w its ctq buffer with every entry marked CTQ_NONE (once per round: len
 * != 0 marks it ready). 0, or -1 (out of memory; nothing else changed). */
static int ctq_ready(fl_secagg_server *s, uint32_t w) {
    struct fl__sa_buf *b = &s->ctq[w];
    if (b->len)
        return 0;
    if (fl__sa_buf_reserve(b, &s->alloc, ctq_bytes(s)) != 0)
        return -1;
    uint8_t *e = b->p + FL_SECAGG_HEADER_BYTES + 4;
    for (uint32_t j = 0; j < s->k; j++, e += CT_ENTRY)
        fl__put_u32le(e, CTQ_NONE);
    b->len = ctq_bytes(s);
    return 0;
}

static void free_sh(fl_secagg_server *s) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->cl[i].sh) {
            fl_memzero(s->cl[i].sh, sh_bytes(s));
            fl__free(&s->alloc, s->cl[i].sh, sh_bytes(s));
            s->cl[i].sh = NULL;
        }
    for (uint32_t i = 0; i < s->n; i++)
        if (s->cl[i].ps) {
            fl_memzero(s->cl[i].ps, ps_bytes(s));
            fl__free(&s->alloc, s->cl[i].ps, ps_bytes(s));
            s->cl[i].ps = NULL;
        }
}

/* Neighbours of u whose flags (in `flags`: the server's, or a trial copy) contain all
 * bits of `want`. */
static uint32_t count_nbrs_in(const fl_secagg_server *s, const uint8_t *flags, uint32_t u,
                              uint8_t want) {
    uint32_t c = 0;
    for (uint32_t j = 0; j < s->k; j++)
        if ((flags[fl__sa_graph_neighbor(&s->graph, u, j)] & want) == want)
            c++;
    return c;
}

static uint32_t count_nbrs(const fl_secagg_server *s, uint32_t u, uint8_t want) {
    return count_nbrs_in(s, s->flags, u, want);
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
    s->ctq = fl__calloc(&a, s->n, sizeof(*s->ctq));
    s->acc = fl__calloc(&a, fl__sa_vec_len(&c), sizeof(uint32_t));
    if (!s->cl || !s->flags || !s->outq || !s->ctq || !s->acc)
        goto out_fail;
    if (c.active) {
        s->adv_active = fl__calloc(&a, s->n, adv_active_bytes(s));
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
        free_sh(s);
        fl__free(&a, s->cl, (size_t)s->n * sizeof(*s->cl));
    }
    fl__free(&a, s->flags, s->n);
    if (s->outq) {
        free_outq(s);
        fl__free(&a, s->outq, (size_t)s->n * sizeof(*s->outq));
    }
    if (s->ctq) {
        free_ctq(s);
        fl__free(&a, s->ctq, (size_t)s->n * sizeof(*s->ctq));
    }
    if (s->adv_active)
        fl__free(&a, s->adv_active, (size_t)s->n * adv_active_bytes(s));
    fl__free(&a, s->u3sig, (size_t)s->n * FL__SA_SIG_BYTES);
    fl__free(&a, s->u3, bm_bytes(s));
    fl__free(&a, s->u3_stmt, s->u3_stmt_len);
    if (s->acc) {
        fl_memzero(s->acc, fl__sa_vec_len(&s->cfg) * sizeof(uint32_t));
        fl__free(&a, s->acc, fl__sa_vec_len(&s->cfg) * sizeof(uint32_t));
    }
    um_release(s);
    fl__sa_graph_free(&s->graph, &a);
    fl_memzero(s, sizeof(*s));
    fl__free(&a, s, sizeof(*s));
}

void fl__sa_server_set_crypto(fl_secagg_server *s, const struct fl__sa_crypto *crypto) {
    if (s && crypto)
        s->crypto = crypto;
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

fl_status fl_secagg_server_device_id(const fl_secagg_server *s, uint32_t index,
                                    uint8_t out[FL_SECAGG_DEVICE_ID_BYTES]) {
    if (!s || !out || index >= s->n || !s->cfg.active || !s->cfg.device_certs)
        return FL_ERR_MISUSE;
    /* C_ADV is set only after the certificate over this id verified (recv_advertise). */
    if (!(s->flags[index] & C_ADV))
        return FL_ERR_STATE;
    memcpy(out,
           s->adv_active + (size_t)index * adv_active_bytes(s) +
               (FL__SA_ADV_DEVICE_OFF - FL__SA_ADV_BASE_BYTES),
           FL_SECAGG_DEVICE_ID_BYTES);
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
    size_t adv = fl__sa_adv_bytes(&s->cfg);
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
        /* v2: the certificate binds the device id carried after the signature. */
        size_t sl = s->cfg.device_certs
                        ? fl__sa_cert_statement_device(stmt, sizeof(stmt),
                                                       p + FL__SA_ADV_DEVICE_OFF, p + 64)
                        : fl__sa_cert_statement(stmt, sizeof(stmt), from, p + 64);
        if (cr->ed25519_verify(p + 96, stmt, sl, s->cfg.verify_key) != 0)
            return fl__err_set(&s->err, FL_ERR_CRYPTO, "ADVERTISE: bad certificate");
        sl = fl__sa_adv_statement(stmt, sizeof(stmt), s->round_id, from, p, p + 32,
                                  s->cfg.context);
        if (cr->ed25519_verify(p + 160, stmt, sl, p + 64) != 0)
            return fl__err_set(&s->err, FL_ERR_CRYPTO, "ADVERTISE: bad signature");
        memcpy(s->adv_active + (size_t)from * adv_active_bytes(s), p + 64,
               adv_active_bytes(s));
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
    /* The body's length is checked above: walk its fixed-size entries directly. */
    const uint8_t *e = r->p;
    int32_t prev = -1;
    for (uint32_t i = 0; i < count; i++, e += CT_ENTRY) {
        uint32_t to = fl__get_u32le(e);
        int32_t slot = fl__sa_graph_slot(&s->graph, from, to);
        if (slot <= prev || !(s->flags[to] & C_U1))
            return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                               "SHARES: receiver list is not the sender's neighbours in U1");
        prev = slot;
    }
    /* Every receiver's buffer first, so that running out of memory writes no entry. */
    e = r->p;
    for (uint32_t i = 0; i < count; i++, e += CT_ENTRY)
        if (ctq_ready(s, fl__get_u32le(e)) != 0)
            return fl__err_set(&s->err, FL_ERR_NOMEM, "SHARES: out of memory");
    /* Each ciphertext goes straight to its place in the receiver's message. */
    e = r->p;
    for (uint32_t i = 0; i < count; i++, e += CT_ENTRY) {
        uint32_t to = fl__get_u32le(e);
        uint32_t j = (uint32_t)fl__sa_graph_slot(&s->graph, from, to);
        uint8_t *dst = s->ctq[to].p + FL_SECAGG_HEADER_BYTES + 4 +
                       (size_t)fl__sa_graph_mirror_slot(&s->graph, from, j, to) * CT_ENTRY;
        fl__put_u32le(dst, from);
        memcpy(dst + 4, e + 4, FL__SA_SHARE_CT_BYTES);
    }
    r->p = e;
    r->left = 0;
    memcpy(s->cl[from].commit, commit, FL__SA_COMMIT_BYTES);
    s->flags[from] |= C_SHARES;
    return FL_OK;
}

/* Folds a masked input into the accumulator. The whole body is checked first so a bad
 * message leaves the sum untouched. */
static fl_status recv_masked(fl_secagg_server *s, uint32_t from, struct fl__sa_reader *r,
                             int proof_checked) {
    size_t d = fl__sa_vec_len(&s->cfg), eb = fl__sa_elem_bytes(s->cfg.bits);
    size_t pb = fl__sa_norm_proof_bytes(&s->cfg);
    if (r->left != d * eb + pb)
        return fl__err_set(&s->err, FL_ERR_FORMAT, "MASKED_INPUT: %zu bytes, expected %zu",
                           r->left, d * eb + pb);
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
    if (pb) {
        const uint8_t *proof = p + d * eb;
        fl_status st = proof_checked ? FL_OK
                                     : fl__sa_norm_verify(&s->cfg, s->round_id, from, proof,
                                                          pb, &s->alloc, &s->err);
        if (st == FL_OK) {
            uint8_t v[32];
            memcpy(v, s->vsum, 32);
            if (fl__sa_norm_fold(v, proof) != 0)
                st = fl__err_set(&s->err, FL_ERR_CRYPTO, "MASKED_INPUT: bad commitment");
            else
                memcpy(s->vsum, v, 32);
        }
        if (st != FL_OK)
            return st;
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
    const uint8_t *vk = s->adv_active + (size_t)from * adv_active_bytes(s);
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
    const size_t es = 4 + 1 + FL__SA_SHARE_Y_BYTES, ss = 4 + FL__SA_PAIR_SEED_BYTES;
    int seeds = s->cfg.reveal_pair_seeds;
    if (count != expect || r->left < (size_t)count * es + (seeds ? 4 : 0) ||
        (!seeds && r->left != (size_t)count * es))
        return fl__err_set(&s->err, FL_ERR_FORMAT, "UNMASK_SHARES: %u entries, expected %u",
                           count, expect);
    /* With revealed seeds: one (peer, seed) per s share, in the same order, after them. */
    const uint8_t *se = seeds ? r->p + (size_t)count * es + 4 : NULL;
    uint32_t nseed = seeds ? fl__get_u32le(se - 4) : 0;
    if (seeds && (nseed > count || r->left - (size_t)count * es - 4 != (size_t)nseed * ss))
        return fl__err_set(&s->err, FL_ERR_FORMAT, "UNMASK_SHARES: %u seeds do not fit", nseed);
    /* The body's length is checked above: walk its fixed-size entries directly. */
    const uint8_t *e = r->p;
    int32_t prev = -1;
    uint32_t ns = 0;
    for (uint32_t i = 0; i < count; i++, e += es) {
        uint32_t v = fl__get_u32le(e);
        uint8_t kind = e[4];
        const uint8_t *y = e + 5;
        int32_t slot = v == from ? (int32_t)s->k : fl__sa_graph_slot(&s->graph, from, v);
        if (slot <= prev || (v != from && !(s->flags[v] & C_U2)))
            return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                               "UNMASK_SHARES: entries are not the holder's U2 neighbours");
        uint8_t want = (s->flags[v] & C_U3) ? FL__SA_KIND_B : FL__SA_KIND_S;
        if (kind != want)
            return fl__err_set(&s->err, FL_ERR_PROTOCOL, "UNMASK_SHARES: wrong share kind");
        if (y[0] > 1)
            return fl__err_set(&s->err, FL_ERR_FORMAT, "UNMASK_SHARES: share out of field");
        if (seeds && kind == FL__SA_KIND_S &&
            (ns >= nseed || fl__get_u32le(se + (size_t)ns++ * ss) != v))
            return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                               "UNMASK_SHARES: seeds do not match the s shares");
        prev = slot;
    }
    if (ns != nseed)
        return fl__err_set(&s->err, FL_ERR_PROTOCOL,
                           "UNMASK_SHARES: seeds do not match the s shares");
    for (uint32_t i = 0; i < nseed; i++) {
        uint32_t v = fl__get_u32le(se + (size_t)i * ss);
        if (!s->cl[v].ps)
            continue; /* no survivor's mask with v to remove */
        uint8_t *slot = s->cl[v].ps + (size_t)fl__sa_graph_slot(&s->graph, v, from) * PS_SLOT;
        slot[0] = 1;
        memcpy(slot + 1, se + (size_t)i * ss + 4, FL__SA_PAIR_SEED_BYTES);
    }
    e = r->p;
    for (uint32_t i = 0; i < count; i++, e += es) {
        uint32_t v = fl__get_u32le(e);
        if (!s->cl[v].sh)
            continue; /* nothing to reconstruct for v (no survivor depends on it) */
        int32_t hs = v == from ? (int32_t)s->k : fl__sa_graph_slot(&s->graph, v, from);
        uint8_t *slot = s->cl[v].sh + (size_t)hs * SH_SLOT;
        slot[0] = 1;
        memcpy(slot + 1, e + 5, FL__SA_SHARE_Y_BYTES);
    }
    r->p = e;
    r->left = 0;
    s->flags[from] |= C_UNMASK;
    return FL_OK;
}

static fl_status receive(fl_secagg_server *s, uint32_t from, const uint8_t *msg, size_t len,
                         int proof_checked) {
    if (!s)
        return FL_ERR_MISUSE;
    if (s->phase == FL_SECAGG_PHASE_FAILED)
        return s->fail_code;
    if (s->phase == FL_SECAGG_PHASE_DONE)
        return fl__err_set(&s->err, FL_ERR_STATE, "receive: round already done");
    if (s->um)
        return fl__err_set(&s->err, FL_ERR_STATE, "receive: unmasking has begun");
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
        st = recv_masked(s, from, &r, proof_checked);
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

fl_status fl_secagg_server_receive(fl_secagg_server *s, uint32_t from, const uint8_t *msg,
                                   size_t len) {
    return receive(s, from, msg, len, 0);
}

/* The digest a ticket names: SHA-256 over a domain tag, the config's norm parameters, the
 * round, the sender and SHA-256 of the whole message; a ticket made under another bound (or
 * for other bytes) does not match. */
static int ticket_digest(uint8_t out[32], const struct fl__sa_crypto *cr,
                         const fl_secagg_config *c, uint64_t round_id, uint32_t from,
                         const uint8_t *msg, size_t len) {
    static const char tag[] = "flotilla-secagg-norm-ticket-v1";
    uint8_t buf[sizeof(tag) - 1 + 4 * 7 + 8 + 8 + 32];
    size_t o = sizeof(tag) - 1;
    memcpy(buf, tag, o);
    const uint32_t v[7] = {c->num_clients, c->bits, c->dim, c->norm_bits, c->norm_dim,
                           c->norm_tail_max, from};
    for (int i = 0; i < 7; i++, o += 4)
        fl__put_u32le(buf + o, v[i]);
    fl__put_u64le(buf + o, c->norm_bound2);
    fl__put_u64le(buf + o + 8, round_id);
    o += 16;
    if (cr->sha256(buf + o, msg, len) != 0)
        return -1;
    return cr->sha256(out, buf, o + 32);
}

fl_status fl_secagg_norm_check(fl_secagg_norm_ticket *ticket, const fl_secagg_config *cfg,
                               uint64_t round_id, uint32_t from, const uint8_t *msg,
                               size_t len, const fl_allocator *alloc, char *errmsg,
                               size_t errmsg_len) {
    struct fl__err err;
    fl__err_clear(&err);
    fl_secagg_config c;
    fl_status st = !ticket || !msg ? fl__err_set(&err, FL_ERR_MISUSE, "norm_check: NULL")
                                   : fl__sa_config_check(&c, cfg, &err);
    if (ticket)
        memset(ticket, 0, sizeof(*ticket));
    const struct fl__sa_crypto *cr = st == FL_OK ? fl__sa_backend(c.backend) : NULL;
    if (st == FL_OK && !fl__sa_norm_proof_bytes(&c))
        st = fl__err_set(&err, FL_ERR_MISUSE, "norm_check: the config has no norm proofs");
    if (st == FL_OK && from >= c.num_clients)
        st = fl__err_set(&err, FL_ERR_PROTOCOL, "norm_check: unknown client %u", from);
    struct fl__sa_reader r;
    if (st == FL_OK)
        st = fl__sa_open_msg(&r, &err, msg, len, FL_SECAGG_MSG_MASKED_INPUT, round_id, from,
                             fl__sa_msg_limit(&c, FL_SECAGG_MSG_MASKED_INPUT));
    size_t words = st == FL_OK ? fl__sa_vec_len(&c) * fl__sa_elem_bytes(c.bits) : 0;
    size_t pb = st == FL_OK ? fl__sa_norm_proof_bytes(&c) : 0;
    if (st == FL_OK && r.left != words + pb)
        st = fl__err_set(&err, FL_ERR_FORMAT, "MASKED_INPUT: %zu bytes, expected %zu", r.left,
                         words + pb);
    if (st == FL_OK)
        st = fl__sa_norm_verify(&c, round_id, from, r.p + words, pb, alloc, &err);
    if (st == FL_OK && ticket_digest(ticket->digest, cr, &c, round_id, from, msg, len) != 0)
        st = fl__err_set(&err, FL_ERR_CRYPTO, "norm_check: hash failed");
    if (st == FL_OK) {
        ticket->round_id = round_id;
        ticket->client = from;
        ticket->valid = 1;
    }
    if (errmsg && errmsg_len > 0)
        snprintf(errmsg, errmsg_len, "%s", st == FL_OK ? "" : fl__err_msg(&err));
    return st;
}

fl_status fl_secagg_server_receive_checked(fl_secagg_server *s, uint32_t from,
                                           const uint8_t *msg, size_t len,
                                           const fl_secagg_norm_ticket *ticket) {
    if (!s || !msg || !ticket)
        return FL_ERR_MISUSE;
    uint8_t dig[32];
    /* A ticket for other bytes (or none) means the proof is checked here, as receive does. */
    int ok = ticket->valid == 1 && ticket->round_id == s->round_id && ticket->client == from &&
             ticket_digest(dig, s->crypto, &s->cfg, s->round_id, from, msg, len) == 0 &&
             memcmp(dig, ticket->digest, 32) == 0;
    return receive(s, from, msg, len, ok);
}

/* ---- phase transitions ---- */

/* Removes from `have` (setting clear) every client with fewer than t - 1 neighbours in the
 * set, until none is left: such a client could not split its secrets t ways. */
/* Clears `have` from every client with fewer than t - 1 neighbours that have it, until
 * none is left; returns how many keep it. */
static uint32_t prune_in(const fl_secagg_server *s, uint8_t *flags, uint8_t have) {
    int changed = 1;
    while (changed) {
        changed = 0;
        for (uint32_t u = 0; u < s->n; u++)
            if ((flags[u] & have) && count_nbrs_in(s, flags, u, have) + 1 < s->t) {
                flags[u] &= (uint8_t)~have;
                changed = 1;
            }
    }
    uint32_t m = 0;
    for (uint32_t u = 0; u < s->n; u++)
        if (flags[u] & have)
            m++;
    return m;
}

static uint32_t prune(fl_secagg_server *s, uint8_t have) { return prune_in(s, s->flags, have); }

static fl_status abort_few(fl_secagg_server *s, const char *what, uint32_t have, uint32_t need) {
    char m[160];
    snprintf(m, sizeof(m), "too few survivors %s: %u, need at least %u (t = %u)", what, have,
             need, s->t);
    return server_fail(s, FL_ERR_ABORTED, m);
}

static fl_status build_keys(fl_secagg_server *s) {
    size_t adv = fl__sa_adv_bytes(&s->cfg), act = adv_active_bytes(s);
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
        p[13] = fl__sa_mode_byte(&s->cfg);
        p[14] = fl__sa_keys_flags(&s->cfg);
        p[15] = 0;
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
                memcpy(p + 68, s->adv_active + (size_t)v * act, act);
            p += 4 + adv;
        }
        b->len = FL_SECAGG_HEADER_BYTES + body;
    }
    return FL_OK;
}

/* Turns each U2 recipient's ctq buffer into its CIPHERTEXTS message: the entries of U2
 * senders, in slot order, moved to the front (nothing moves when no neighbour dropped),
 * then swaps it into outq. Buffers are readied first, so nothing fails once the
 * compaction begins. */
static fl_status build_ciphertexts(fl_secagg_server *s) {
    for (uint32_t w = 0; w < s->n; w++)
        if ((s->flags[w] & C_U2) && ctq_ready(s, w) != 0)
            return FL_ERR_NOMEM;
    for (uint32_t w = 0; w < s->n; w++) {
        if (!(s->flags[w] & C_U2))
            continue;
        struct fl__sa_buf *b = &s->ctq[w];
        uint8_t *base = b->p + FL_SECAGG_HEADER_BYTES + 4, *out = base;
        const uint8_t *e = base;
        for (uint32_t j = 0; j < s->k; j++, e += CT_ENTRY) {
            uint32_t u = fl__get_u32le(e);
            if (u == CTQ_NONE || !(s->flags[u] & C_U2))
                continue;
            if (out != e)
                memmove(out, e, CT_ENTRY);
            out += CT_ENTRY;
        }
        uint32_t cnt = (uint32_t)((size_t)(out - base) / CT_ENTRY);
        size_t body = 4 + (size_t)cnt * CT_ENTRY;
        fl__sa_put_header(b->p, FL_SECAGG_MSG_CIPHERTEXTS, s->round_id, w, (uint32_t)body);
        fl__put_u32le(b->p + FL_SECAGG_HEADER_BYTES, cnt);
        b->len = FL_SECAGG_HEADER_BYTES + body;
        struct fl__sa_buf keys = s->outq[w];
        s->outq[w] = *b;
        *b = keys;
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
static int reconstructible_in(const fl_secagg_server *s, const uint8_t *flags, uint8_t holder,
                              uint32_t *have) {
    for (uint32_t v = 0; v < s->n; v++) {
        uint8_t f = flags[v];
        if (!(f & C_U2))
            continue;
        uint32_t h = count_nbrs_in(s, flags, v, holder);
        if (f & C_U3) {
            h += (f & holder) ? 1 : 0;
            if (h < s->t)
                return *have = h, -1;
        } else if (count_nbrs_in(s, flags, v, C_U3) > 0 && h < s->t) {
            return *have = h, -1;
        }
    }
    return 0;
}

static fl_status check_reconstructible(fl_secagg_server *s, uint8_t holder, const char *when) {
    uint32_t h;
    return reconstructible_in(s, s->flags, holder, &h) != 0 ? abort_few(s, when, h, s->t)
                                                             : FL_OK;
}

/* Allocates the unmask share tables of every client whose secret will be rebuilt. */
static fl_status alloc_share_tables(fl_secagg_server *s) {
    for (uint32_t v = 0; v < s->n; v++) {
        uint8_t f = s->flags[v];
        if (!(f & C_U2))
            continue;
        if (!(f & C_U3) && count_nbrs(s, v, C_U3) == 0)
            continue;
        if (!s->cl[v].sh && !(s->cl[v].sh = fl__calloc(&s->alloc, (size_t)s->k + 1, SH_SLOT)))
            return FL_ERR_NOMEM;
        if (s->cfg.reveal_pair_seeds && !(f & C_U3) && !s->cl[v].ps &&
            !(s->cl[v].ps = fl__calloc(&s->alloc, s->k, PS_SLOT)))
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
 * The final advance runs as two batches of independent jobs: one after the other in
 * fl_secagg_server_advance, or on the caller's threads through unmask_begin/run/next.
 *  1. Secrets: each job takes a run of the clients whose secret is rebuilt (ascending,
 *     balanced by estimated cost), rebuilds them in groups (the first t shares of up to
 *     UM_GROUP_SHARES / t clients per fl__sa_shamir_combine_many call, which shares its
 *     field inversions, one per UM_WINDOW shares), checks each secret, and writes the mask
 *     seeds into its own slots of one seed table: b_v for a survivor v; for a dropped v,
 *     the pairwise seed s_vw with every surviving neighbour w (one X25519 agreement each).
 *  2. Masks: each job removes every seed's mask from its own slice of the accumulator
 *     (FL__SA_MASK_FUSE masks per pass) and reduces the slice mod 2^b.
 * Jobs write no shared memory: each has its own work area, seed slots, result slot, state
 * byte and slice. Everything is allocated at begin, before the accumulator is touched, so
 * FL_ERR_NOMEM leaves the round as it was. A failing job records its code and message; the
 * batch's end fails the round with the lowest-numbered failed job's, which is the failure
 * of the lowest failing client, as in one serial pass. The seed table holds one seed per
 * (dropped client, surviving neighbour) pair plus one per survivor: O(n k) like the rest
 * of the server's state. */

#define UM_GROUP_SHARES 2048u /* shares per combine_many call */
#define UM_WINDOW 1024u       /* shares per field inversion */
#define UM_MAX_JOBS 64u       /* most jobs per batch (each has a ~256 KiB work area) */
#define UM_MIN_SLICE 1024u    /* elements: smallest slice of the mask batch */
#define UM_KA_WEIGHT 8u       /* cost of one pairwise seed (X25519 + HKDF), in rebuilt
                                 secrets (~40 us vs ~5 us), for balancing the first batch */
#define UM_NO_FAILURE SIZE_MAX

enum { UM_SECRETS = 1, UM_MASKS = 2 };
enum { JOB_IDLE = 0, JOB_RUNNING = 1, JOB_DONE = 2 };

struct um_result {
    fl_status code; /* FL_OK or the job's failure */
    char msg[128];  /* its detail, as fl_secagg_server_errmsg will show it */
};

struct um_work {
    int stage;                   /* UM_SECRETS or UM_MASKS */
    size_t njobs;                /* jobs in the current batch */
    size_t nareas;               /* work areas = most jobs of a batch */
    size_t area_bytes;           /* bytes per work area */
    size_t group;                /* clients per combine_many call */
    size_t o_sh, o_sec, o_who, o_scr; /* offsets in a work area (secrets batch) */
    size_t a_bytes;              /* bytes of a work area the secrets batch uses */
    uint8_t *areas;              /* (nareas, area_bytes) */
    uint32_t ntodo;              /* clients whose secret is rebuilt */
    uint32_t *todo;              /* (ntodo) those clients, ascending */
    uint32_t *first;             /* (ntodo + 1) first seed slot of each; [ntodo] = seeds */
    uint32_t *range;             /* (nareas + 1) secrets batch: job j takes todo
                                    indices range[j] .. range[j + 1] - 1 */
    uint8_t (*seeds)[32];        /* (first[ntodo]) mask seeds */
    int *signs;                  /* (first[ntodo]) sign of each mask's removal */
    atomic_uchar *state;         /* (nareas) JOB_* of each job of the batch */
    struct um_result *res;       /* (nareas) outcome of each job of the batch */
    uint8_t (*link)[32];         /* (nareas) norm proofs: each mask job's part of the link
                                    check's sum over its slice */
    atomic_size_t failed;        /* lowest failed job of the batch, or UM_NO_FAILURE */
    size_t bytes;                /* of this allocation (the struct is at its start) */
};

static size_t um_align(size_t x) { return (x + 63u) & ~(size_t)63u; }

/* Wipes (seeds, secrets, keystream) and frees the unmask work. */
static void um_release(fl_secagg_server *s) {
    struct um_work *w = s->um;
    if (!w)
        return;
    size_t bytes = w->bytes;
    fl_memzero(w, bytes);
    fl__free(&s->alloc, w, bytes);
    s->um = NULL;
}

/* Records job j's failure and lowers `failed` to j if it is the lowest so far. */
static void um_job_fail(struct um_work *w, size_t j, fl_status code, const char *msg) {
    w->res[j].code = code;
    snprintf(w->res[j].msg, sizeof(w->res[j].msg), "%s", msg);
    size_t cur = atomic_load_explicit(&w->failed, memory_order_relaxed);
    while (j < cur && !atomic_compare_exchange_weak_explicit(&w->failed, &cur, j,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

/* Checks a rebuilt secret of v. kind B: b_v against v's commitment; kind S: s_v against
 * v's advertised public key. 0, or -1 with the message in m. */
static int um_check(const fl_secagg_server *s, uint32_t v, int kind, const uint8_t secret[32],
                    char *m, size_t mlen) {
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
        return 0;
    snprintf(m, mlen, "client %u: rebuilt %s does not match", v,
             kind == FL__SA_KIND_B ? "self-mask seed" : "masking key");
    return -1;
}

/* Unmask shares of v's secret received so far (v's share table allocated). */
static uint32_t shares_held(const fl_secagg_server *s, uint32_t v) {
    uint32_t have = 0;
    for (uint32_t j = 0; j <= s->k; j++)
        have += s->cl[v].sh[(size_t)j * SH_SLOT];
    return have;
}

/* Pairwise seeds of dropped v that no surviving neighbour revealed: the agreements a
 * rebuilt s_v must make (all of them without reveal_pair_seeds). */
static uint32_t um_missing(const fl_secagg_server *s, uint32_t v) {
    uint32_t m = 0;
    for (uint32_t j = 0; j < s->k; j++)
        if ((s->flags[fl__sa_graph_neighbor(&s->graph, v, j)] & C_U3) &&
            !(s->cl[v].ps && s->cl[v].ps[(size_t)j * PS_SLOT]))
            m++;
    return m;
}

/* Writes the seeds of todo[i] (secret rebuilt and checked) into its slots: b_v to remove
 * if v is in U3; otherwise, for each surviving neighbour w, the pairwise seed s_vw, whose
 * mask w added with sign(w, v) = +1 if w < v, else -1: the one w revealed, else derived
 * from the rebuilt s_v. 0 or -1 (agreement failed). */
static int um_seeds(const fl_secagg_server *s, struct um_work *w, uint32_t i,
                    const uint8_t secret[32]) {
    uint32_t v = w->todo[i], o = w->first[i];
    if (s->flags[v] & C_U3) {
        memcpy(w->seeds[o], secret, 32);
        w->signs[o] = -1;
        return 0;
    }
    for (uint32_t j = 0; j < s->k; j++) {
        uint32_t u = fl__sa_graph_neighbor(&s->graph, v, j);
        if (!(s->flags[u] & C_U3))
            continue;
        const uint8_t *ps = s->cl[v].ps ? s->cl[v].ps + (size_t)j * PS_SLOT : NULL;
        if (ps && ps[0])
            memcpy(w->seeds[o], ps + 1, 32);
        else if (fl__sa_derive_pair_key(w->seeds[o], s->crypto, "mask", secret, s->cl[u].s_pk,
                                        s->round_id, v, u, NULL) != 0)
            return -1;
        w->signs[o] = u < v ? -1 : +1;
        o++;
    }
    return 0;
}

/* Secrets batch, job j: rebuilds, checks and turns into seeds the secrets of todo indices
 * range[j] .. range[j + 1] - 1. Stops early once a lower-numbered job has failed (its
 * failure is the one reported). */
static void um_secrets_job(const fl_secagg_server *s, struct um_work *w, size_t j) {
    uint8_t *area = w->areas + j * w->area_bytes;
    struct fl__sa_combine_job *jobs = (struct fl__sa_combine_job *)(void *)area;
    struct fl__sa_share *shares = (struct fl__sa_share *)(void *)(area + w->o_sh);
    uint8_t *secrets = area + w->o_sec;
    uint32_t *who = (uint32_t *)(void *)(area + w->o_who);
    void *scratch = area + w->o_scr;
    char m[128];
    uint32_t i = w->range[j], end = w->range[j + 1];
    while (i < end && atomic_load_explicit(&w->failed, memory_order_relaxed) > j) {
        size_t g = 0;
        for (; i < end && g < w->group; i++, g++) {
            uint32_t v = w->todo[i];
            /* The first t shares in holder-slot order (self last). */
            struct fl__sa_share *sh = shares + g * s->t;
            size_t have = 0;
            for (uint32_t h = 0; h <= s->k && have < s->t; h++) {
                const uint8_t *slot = s->cl[v].sh + (size_t)h * SH_SLOT;
                if (!slot[0])
                    continue;
                sh[have].x = (h == s->k ? v : fl__sa_graph_neighbor(&s->graph, v, h)) + 1;
                memcpy(sh[have].y, slot + 1, FL__SA_SHARE_Y_BYTES);
                have++;
            }
            jobs[g].secret = secrets + g * 32;
            jobs[g].shares = sh;
            jobs[g].k = have;
            who[g] = i;
        }
        fl__sa_shamir_combine_many(jobs, g, scratch,
                                   (size_t)UM_WINDOW * FL__SA_SHAMIR_SCRATCH_PER_SHARE);
        for (size_t q = 0; q < g; q++) {
            uint32_t v = w->todo[who[q]];
            int kind = (s->flags[v] & C_U3) ? FL__SA_KIND_B : FL__SA_KIND_S;
            if (jobs[q].rc != 0) {
                snprintf(m, sizeof(m), "client %u: shares do not combine", v);
                um_job_fail(w, j, FL_ERR_PROTOCOL, m);
                goto out;
            }
            if (um_check(s, v, kind, jobs[q].secret, m, sizeof(m)) != 0) {
                um_job_fail(w, j, FL_ERR_PROTOCOL, m);
                goto out;
            }
            if (um_seeds(s, w, who[q], jobs[q].secret) != 0) {
                um_job_fail(w, j, FL_ERR_CRYPTO, "pairwise mask removal failed");
                goto out;
            }
        }
    }
out:
    fl_memzero(area, w->a_bytes); /* shares and secrets */
}

/* Slice [*lo, *hi) of the accumulator for job j of nj: boundaries are multiples of 16
 * elements (whole AES blocks, and no cache line shared by two jobs). */
static void um_slice(size_t d, size_t nj, size_t j, size_t *lo, size_t *hi) {
    *lo = j == 0 ? 0 : (size_t)(((uint64_t)d * j / nj) & ~(uint64_t)15);
    *hi = j + 1 == nj ? d : (size_t)(((uint64_t)d * (j + 1) / nj) & ~(uint64_t)15);
}

/* Stop test of a masks job: once any job has failed, the round fails anyway. */
static int um_some_failed(const void *arg) {
    const struct um_work *w = arg;
    return atomic_load_explicit(&w->failed, memory_order_relaxed) != UM_NO_FAILURE;
}

/* Masks batch, job j: removes every seed's mask from its slice and reduces it mod 2^b. */
static void um_masks_job(fl_secagg_server *s, struct um_work *w, size_t j) {
    uint8_t *scratch = w->areas + j * w->area_bytes;
    size_t lo, hi, ns = w->first[w->ntodo];
    um_slice(fl__sa_vec_len(&s->cfg), w->njobs, j, &lo, &hi);
    int rc = fl__sa_mask_apply_blocked(s->acc, lo, hi, (const uint8_t(*)[32])w->seeds, w->signs,
                                       ns, s->crypto, scratch, um_some_failed, w);
    fl_memzero(scratch, SCRATCH_BYTES); /* keystream */
    if (rc != 0) {
        um_job_fail(w, j, FL_ERR_CRYPTO, "mask removal failed");
        return;
    }
    uint32_t mask = fl__sa_bitmask(s->cfg.bits);
    for (size_t i = lo; i < hi; i++)
        s->acc[i] &= mask;
    /* Norm proofs: the slice's part of the link check, while the slice is in cache. */
    if (fl__sa_norm_proof_bytes(&s->cfg) &&
        fl__sa_norm_link_part(w->link[j], &s->cfg, s->acc, lo, hi) != 0)
        um_job_fail(w, j, FL_ERR_CRYPTO, "norm link: a group operation failed");
}

/* Opens batch `stage` with nj jobs. */
static void um_open_batch(struct um_work *w, int stage, size_t nj) {
    w->stage = stage;
    w->njobs = nj;
    for (size_t j = 0; j < w->nareas; j++) {
        atomic_init(&w->state[j], JOB_IDLE);
        w->res[j].code = FL_OK;
        w->res[j].msg[0] = '\0';
    }
    atomic_init(&w->failed, UM_NO_FAILURE);
}

/* Checks the share counts, allocates the work and opens the secrets batch. */
static fl_status um_begin(fl_secagg_server *s, uint32_t max_jobs) {
    /* Check share counts first, so an abort costs no work. A dropped client whose every
     * surviving neighbour revealed its pairwise seed needs no rebuilt secret: its seeds are
     * `direct`, copied into the head of the seed table here. */
    uint32_t ntodo = 0;
    size_t nseeds = 0, ndirect = 0;
    for (uint32_t v = 0; v < s->n; v++) {
        if (!s->cl[v].sh)
            continue;
        if (!(s->flags[v] & C_U3) && um_missing(s, v) == 0) {
            ndirect += count_nbrs(s, v, C_U3);
            continue;
        }
        uint32_t have = shares_held(s, v);
        if (have < s->t)
            return abort_few(s, "at unmasking (shares for one client)", have, s->t);
        ntodo++;
        nseeds += (s->flags[v] & C_U3) ? 1 : count_nbrs(s, v, C_U3);
    }
    nseeds += ndirect;
    size_t na = max_jobs < UM_MAX_JOBS ? max_jobs : UM_MAX_JOBS;
    size_t t = s->t, g = UM_GROUP_SHARES / t ? UM_GROUP_SHARES / t : 1;
    /* One work area: the secrets batch's buffers, or the masks batch's scratch. */
    size_t o_sh = um_align(g * sizeof(struct fl__sa_combine_job));
    size_t o_sec = um_align(o_sh + g * t * sizeof(struct fl__sa_share));
    size_t o_who = um_align(o_sec + g * 32);
    size_t o_scr = um_align(o_who + g * sizeof(uint32_t));
    size_t a_bytes = um_align(o_scr + (size_t)UM_WINDOW * FL__SA_SHAMIR_SCRATCH_PER_SHARE);
    size_t area = a_bytes > SCRATCH_BYTES ? a_bytes : um_align(SCRATCH_BYTES);
    /* The allocation: struct | areas | todo | first | range | seeds | signs | state | res. */
    size_t o_areas = um_align(sizeof(struct um_work));
    size_t o_todo = o_areas + na * area;
    size_t o_first = um_align(o_todo + (size_t)ntodo * sizeof(uint32_t));
    size_t o_range = um_align(o_first + ((size_t)ntodo + 1) * sizeof(uint32_t));
    size_t o_seeds = um_align(o_range + (na + 1) * sizeof(uint32_t));
    size_t o_signs = um_align(o_seeds + nseeds * 32);
    size_t o_state = um_align(o_signs + nseeds * sizeof(int));
    size_t o_res = um_align(o_state + na * sizeof(atomic_uchar));
    size_t o_link = um_align(o_res + na * sizeof(struct um_result));
    size_t bytes = o_link + na * 32;
    uint8_t *p = fl__alloc(&s->alloc, bytes);
    if (!p)
        return fl__err_set(&s->err, FL_ERR_NOMEM, "unmask: out of memory");
    memset(p, 0, o_areas);
    struct um_work *w = (struct um_work *)(void *)p;
    w->bytes = bytes;
    w->nareas = na;
    w->area_bytes = area;
    w->group = g;
    w->o_sh = o_sh;
    w->o_sec = o_sec;
    w->o_who = o_who;
    w->o_scr = o_scr;
    w->a_bytes = a_bytes;
    w->areas = p + o_areas;
    w->ntodo = ntodo;
    w->todo = (uint32_t *)(void *)(p + o_todo);
    w->first = (uint32_t *)(void *)(p + o_first);
    w->range = (uint32_t *)(void *)(p + o_range);
    w->seeds = (uint8_t(*)[32])(void *)(p + o_seeds);
    w->signs = (int *)(void *)(p + o_signs);
    w->state = (atomic_uchar *)(void *)(p + o_state);
    w->res = (struct um_result *)(void *)(p + o_res);
    w->link = (uint8_t(*)[32])(void *)(p + o_link);
    /* Direct seeds, then the clients, their seed slots and cost weights (a rebuilt
     * secret = 1). */
    uint32_t i = 0, o = 0;
    uint64_t total = 0, agree = 0;
    for (uint32_t v = 0; v < s->n; v++) {
        if (!s->cl[v].sh || (s->flags[v] & C_U3) || um_missing(s, v) != 0)
            continue;
        for (uint32_t j = 0; j < s->k; j++) {
            uint32_t u = fl__sa_graph_neighbor(&s->graph, v, j);
            if (!(s->flags[u] & C_U3))
                continue;
            memcpy(w->seeds[o], s->cl[v].ps + (size_t)j * PS_SLOT + 1, 32);
            w->signs[o++] = u < v ? -1 : +1;
        }
    }
    for (uint32_t v = 0; v < s->n; v++) {
        if (!s->cl[v].sh)
            continue;
        int alive = (s->flags[v] & C_U3) != 0;
        uint32_t miss = alive ? 0 : um_missing(s, v);
        if (!alive && miss == 0)
            continue;
        uint32_t c = alive ? 1 : count_nbrs(s, v, C_U3);
        w->todo[i] = v;
        w->first[i++] = o;
        o += c;
        total += 1 + (uint64_t)UM_KA_WEIGHT * miss;
        agree += miss;
    }
    w->first[ntodo] = o;
    s->um_secrets = ntodo;
    s->um_agree = agree;
    s->um_masks = o;
    /* Job j starts at the first client whose preceding weight reaches total * j / nj. */
    size_t nj = ntodo == 0 ? 1 : (ntodo < na ? ntodo : na);
    uint64_t cum = 0;
    size_t j = 1;
    w->range[0] = 0;
    for (i = 0; i < ntodo; i++) {
        while (j < nj && cum * nj >= total * j)
            w->range[j++] = i;
        uint32_t v = w->todo[i];
        cum += 1 + ((s->flags[v] & C_U3) ? 0 : (uint64_t)UM_KA_WEIGHT * um_missing(s, v));
    }
    while (j <= nj)
        w->range[j++] = ntodo;
    um_open_batch(w, UM_SECRETS, nj);
    s->um = w;
    return FL_OK;
}

fl_status fl_secagg_server_unmask_begin(fl_secagg_server *s, uint32_t max_jobs,
                                        size_t *njobs) {
    if (njobs)
        *njobs = 0;
    if (!s)
        return FL_ERR_MISUSE;
    if (!njobs)
        return fl__err_set(&s->err, FL_ERR_MISUSE, "unmask_begin: njobs is NULL");
    if (s->phase == FL_SECAGG_PHASE_FAILED)
        return s->fail_code;
    if (s->um)
        return fl__err_set(&s->err, FL_ERR_MISUSE, "unmask_begin: unmasking already begun");
    if (s->phase == FL_SECAGG_PHASE_DONE)
        return fl__err_set(&s->err, FL_ERR_STATE, "unmask_begin: round already done");
    if (s->phase != FL_SECAGG_PHASE_UNMASK)
        return fl__err_set(&s->err, FL_ERR_STATE,
                           "unmask_begin: server is in phase %d, unmasking needs phase %d",
                           (int)s->phase, (int)FL_SECAGG_PHASE_UNMASK);
    if (max_jobs == 0)
        return fl__err_set(&s->err, FL_ERR_MISUSE, "unmask_begin: max_jobs is 0");
    fl_status st = um_begin(s, max_jobs);
    if (st != FL_OK)
        return st;
    free_outq(s); /* no phase after this one sends anything */
    *njobs = s->um->njobs;
    fl__err_clear(&s->err);
    return FL_OK;
}

fl_status fl_secagg_server_unmask_run(fl_secagg_server *s, size_t job) {
    if (!s || !s->um)
        return FL_ERR_MISUSE;
    struct um_work *w = s->um;
    unsigned char idle = JOB_IDLE;
    if (job >= w->njobs ||
        !atomic_compare_exchange_strong_explicit(&w->state[job], &idle, JOB_RUNNING,
                                                 memory_order_acquire, memory_order_relaxed))
        return FL_ERR_MISUSE;
    if (w->stage == UM_SECRETS)
        um_secrets_job(s, w, job);
    else
        um_masks_job(s, w, job);
    fl_status st = w->res[job].code;
    atomic_store_explicit(&w->state[job], JOB_DONE, memory_order_release);
    return st;
}

fl_status fl_secagg_server_unmask_next(fl_secagg_server *s, size_t *njobs) {
    if (!s)
        return FL_ERR_MISUSE;
    if (!njobs)
        return fl__err_set(&s->err, FL_ERR_MISUSE, "unmask_next: njobs is NULL");
    if (s->phase == FL_SECAGG_PHASE_FAILED) {
        *njobs = 0;
        return s->fail_code;
    }
    struct um_work *w = s->um;
    if (!w)
        return fl__err_set(&s->err, FL_ERR_MISUSE,
                           "unmask_next: no unmasking in progress (unmask_begin first)");
    for (size_t j = 0; j < w->njobs; j++)
        if (atomic_load_explicit(&w->state[j], memory_order_acquire) != JOB_DONE)
            return fl__err_set(&s->err, FL_ERR_MISUSE,
                               "unmask_next: job %zu of %zu has not finished", j, w->njobs);
    size_t f = atomic_load_explicit(&w->failed, memory_order_relaxed);
    if (f != UM_NO_FAILURE) {
        struct um_result r = w->res[f];
        um_release(s);
        *njobs = 0;
        server_fail(s, r.code, r.msg);
        fl_memzero(&r, sizeof(r));
        return s->fail_code;
    }
    if (w->stage == UM_SECRETS) {
        size_t nb = fl__sa_vec_len(&s->cfg) / UM_MIN_SLICE;
        nb = nb < 1 ? 1 : nb > w->nareas ? w->nareas : nb;
        um_open_batch(w, UM_MASKS, nb);
        *njobs = nb;
        fl__err_clear(&s->err);
        return FL_OK;
    }
    if (fl__sa_norm_proof_bytes(&s->cfg)) {
        /* The mask jobs' parts of the link sum, then the check itself. */
        uint8_t part[32];
        memset(part, 0, sizeof(part));
        int bad = 0;
        for (size_t j = 0; j < w->njobs; j++)
            bad |= fl__sa_norm_fold(part, w->link[j]);
        fl_status st = bad ? fl__err_set(&s->err, FL_ERR_CRYPTO,
                                         "norm link: a group operation failed")
                           : fl__sa_norm_link_check(&s->cfg, s->acc, part, s->vsum, &s->err);
        if (st != FL_OK) {
            char m[FL__ERRMSG_MAX];
            snprintf(m, sizeof(m), "%s", fl__err_msg(&s->err));
            um_release(s);
            free_sh(s);
            *njobs = 0;
            return server_fail(s, st, m);
        }
    }
    um_release(s);
    free_sh(s);
    s->count = count_flag(s, C_U3);
    s->phase = FL_SECAGG_PHASE_DONE;
    s->pending = 0;
    *njobs = 0;
    fl__err_clear(&s->err);
    fl__log(&s->cfg.logger, FL_LOG_INFO, "secagg round %llu: phase %d, %u clients",
            (unsigned long long)s->round_id, (int)s->phase, s->pending);
    return FL_OK;
}

/* The final advance on the calling thread: the same jobs, one after the other. */
static fl_status unmask_serial(fl_secagg_server *s) {
    size_t nj;
    fl_status st = fl_secagg_server_unmask_begin(s, 1, &nj);
    while (st == FL_OK && nj > 0) {
        for (size_t j = 0; j < nj; j++)
            (void)fl_secagg_server_unmask_run(s, j); /* failures surface at next */
        st = fl_secagg_server_unmask_next(s, &nj);
    }
    return st;
}

/* The survivor checks of fl_secagg_server_advance on a copy of the flags. */
fl_status fl_secagg_server_would_advance(const fl_secagg_server *s) {
    if (!s)
        return FL_ERR_MISUSE;
    if (s->phase == FL_SECAGG_PHASE_FAILED || s->phase == FL_SECAGG_PHASE_DONE || s->um)
        return FL_ERR_STATE;
    if (s->phase == FL_SECAGG_PHASE_UNMASK) {
        for (uint32_t v = 0; v < s->n; v++) {
            if (!s->cl[v].sh || (!(s->flags[v] & C_U3) && um_missing(s, v) == 0))
                continue;
            if (shares_held(s, v) < s->t)
                return FL_ERR_ABORTED;
        }
        return FL_OK;
    }
    uint8_t *f = fl__alloc(&s->alloc, s->n);
    if (!f)
        return FL_ERR_NOMEM;
    memcpy(f, s->flags, s->n);
    uint32_t m = 0, h;
    int ok = 1;
    switch (s->phase) {
    case FL_SECAGG_PHASE_ADVERTISE:
        for (uint32_t u = 0; u < s->n; u++)
            f[u] = (f[u] & C_ADV) ? (uint8_t)(f[u] | C_U1) : f[u];
        m = prune_in(s, f, C_U1);
        break;
    case FL_SECAGG_PHASE_SHARE_KEYS:
        for (uint32_t u = 0; u < s->n; u++)
            f[u] = (f[u] & (C_U1 | C_SHARES)) == (C_U1 | C_SHARES) ? (uint8_t)(f[u] | C_U2)
                                                                 : (uint8_t)(f[u] & ~C_U2);
        m = prune_in(s, f, C_U2);
        break;
    case FL_SECAGG_PHASE_MASKED_INPUT:
        for (uint32_t u = 0; u < s->n; u++)
            m += (f[u] & C_U3) != 0;
        ok = reconstructible_in(s, f, C_U3, &h) == 0;
        break;
    case FL_SECAGG_PHASE_CONSISTENCY:
        for (uint32_t u = 0; u < s->n; u++) {
            int ask = (f[u] & C_SIGNED) && count_nbrs_in(s, s->flags, u, C_SIGNED) + 1 >= s->t;
            f[u] = ask ? (uint8_t)(f[u] | C_ASKED) : (uint8_t)(f[u] & ~C_ASKED);
            m += ask != 0;
        }
        ok = reconstructible_in(s, f, C_ASKED, &h) == 0;
        break;
    default:
        ok = 0;
        break;
    }
    fl__free(&s->alloc, f, s->n);
    return ok && m >= s->t ? FL_OK : FL_ERR_ABORTED;
}

fl_status fl_secagg_server_advance(fl_secagg_server *s) {
    if (!s)
        return FL_ERR_MISUSE;
    if (s->phase == FL_SECAGG_PHASE_FAILED)
        return s->fail_code;
    if (s->phase == FL_SECAGG_PHASE_DONE)
        return fl__err_set(&s->err, FL_ERR_STATE, "advance: round already done");
    if (s->um)
        return fl__err_set(&s->err, FL_ERR_MISUSE,
                           "advance: unmasking was begun with unmask_begin; finish it with "
                           "unmask_run and unmask_next");
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
        free_ctq(s); /* the senders' entries for recipients not in U2, and the KEYS buffers */
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
        return unmask_serial(s); /* sets DONE and logs */
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

void fl__sa_server_unmask_work(const fl_secagg_server *srv, uint64_t *secrets,
                               uint64_t *agreements, uint64_t *masks) {
    *secrets = srv->um_secrets;
    *agreements = srv->um_agree;
    *masks = srv->um_masks;
}
