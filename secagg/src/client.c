/* secagg client state machine: advertise keys, share keys, masked input, consistency
 * check (active mode), unmasking. See docs/secagg.md for the protocol and wire format. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secagg_internal.h"

_Static_assert(FL__SA_MASK_RANGE_SCRATCH <= 4 * FL__SA_MASK_CHUNK,
               "the client's mask scratch holds what fl__sa_mask_apply_blocked draws");

/* ---- state ---- */

#define PEER_U1 1u /* advertised keys were delivered to us (KEYS) */
#define PEER_U2 2u /* its encrypted shares were delivered to us (CIPHERTEXTS) */

struct fl__sa_peer {
    uint32_t index;                      /* client index of this neighbour */
    uint8_t flags;                       /* PEER_* */
    uint8_t c_pk[32];                    /* encryption public key */
    uint8_t s_pk[32];                    /* masking public key */
    uint8_t vk[32];                      /* signing verification key (active mode) */
    uint8_t ct[FL__SA_SHARE_CT_BYTES];   /* its shares for us, encrypted */
    uint8_t key[32];                     /* share-encryption key of the pair (secret; derived
                                            once in KEYS, reused at unmasking, then wiped) */
};

struct fl_secagg_client {
    fl_allocator alloc;                  /* caller's allocator (copied) */
    fl_secagg_config cfg;                /* resolved configuration */
    const struct fl__sa_crypto *crypto;  /* backend table */
    struct fl__err err;                  /* last error detail */
    uint64_t round_id;                   /* round this client belongs to */
    uint32_t index;                      /* our client index, 0..n-1 */
    fl_secagg_phase phase;               /* phase whose server message we wait for */
    fl_status fail_code;                 /* returned again once FAILED (sticky) */
    int started;                         /* start() done */
    int has_input;                       /* set_input() done */
    fl_secagg_identity id;               /* active mode: signing key + certificate */
    uint8_t vk[32];                      /* our verification key (from id) */
    uint8_t c_pk[32], c_sk[32];          /* encryption key pair (X25519) */
    uint8_t s_pk[32], s_sk[32];          /* masking key pair (X25519) */
    uint8_t b_seed[32];                  /* self-mask seed b_u */
    uint8_t self_b_y[FL__SA_SHARE_Y_BYTES]; /* our own share of b_u (x = index + 1) */
    struct fl__sa_graph graph;           /* communication graph (after KEYS) */
    int has_graph;
    struct fl__sa_peer *peers;           /* (k) neighbours by slot (after KEYS) */
    uint32_t *input;                     /* (d + limbs) input vector mod 2^b */
    uint8_t *proof;                      /* norm mode: proof for the input */
    uint8_t *u3;                         /* survivor bitmap we signed (active mode) */
    size_t u3_len;                       /* bytes of u3 */
    struct fl__sa_buf out;               /* last outgoing message */
    uint8_t *scratch;                    /* 4 * FL__SA_MASK_CHUNK bytes for mask expansion */
};

/* Marks the client failed for good and returns code. */
static fl_status client_fail(fl_secagg_client *c, fl_status code, const char *what) {
    fl__err_set(&c->err, code, "%s", what);
    c->fail_code = code;
    c->phase = FL_SECAGG_PHASE_FAILED;
    /* Secrets are useless from here on. */
    fl_memzero(c->c_sk, sizeof(c->c_sk));
    fl_memzero(c->s_sk, sizeof(c->s_sk));
    fl_memzero(c->b_seed, sizeof(c->b_seed));
    fl_memzero(c->self_b_y, sizeof(c->self_b_y));
    if (c->peers)
        fl_memzero(c->peers, (size_t)c->cfg.degree * sizeof(struct fl__sa_peer));
    fl__log(&c->cfg.logger, FL_LOG_WARN, "secagg client %u failed: %s", c->index, what);
    return code;
}

/* ---- lifecycle ---- */

fl_status fl_secagg_client_create(fl_secagg_client **out, const fl_secagg_config *cfg,
                                  uint64_t round_id, uint32_t index,
                                  const fl_secagg_identity *id, const fl_allocator *alloc) {
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    fl_allocator a;
    fl_status st = fl__allocator_copy(&a, alloc);
    if (st != FL_OK)
        return st;
    fl_secagg_config c;
    st = fl__sa_config_check(&c, cfg, NULL);
    if (st != FL_OK)
        return st;
    if (index >= c.num_clients)
        return FL_ERR_MISUSE;
    /* The identity grew at the end (device_id): an older caller's struct means v1. */
    if (c.active && (!id || (id->struct_size != sizeof(fl_secagg_identity) &&
                             id->struct_size != offsetof(fl_secagg_identity, device_id))))
        return FL_ERR_MISUSE;
    if (c.active && c.device_certs) {
        /* No handle exists yet to hold a message: the reason goes to the logger. */
        uint8_t any = 0;
        if (id->struct_size == sizeof(fl_secagg_identity))
            for (size_t i = 0; i < FL_SECAGG_DEVICE_ID_BYTES; i++)
                any |= id->device_id[i];
        if (!any) {
            fl__log(&c.logger, FL_LOG_ERROR,
                    "secagg client %u: config.device_certs needs identity.device_id (set, "
                    "not all zero, struct_size = sizeof(fl_secagg_identity))",
                    index);
            return FL_ERR_MISUSE;
        }
    }
    fl_secagg_client *cli = fl__calloc(&a, 1, sizeof(*cli));
    if (!cli)
        return FL_ERR_NOMEM;
    cli->alloc = a;
    cli->cfg = c;
    cli->crypto = fl__sa_backend(c.backend);
    cli->round_id = round_id;
    cli->index = index;
    cli->phase = FL_SECAGG_PHASE_ADVERTISE;
    cli->scratch = fl__alloc(&a, FL__SA_MASK_CHUNK * 4);
    if (!cli->scratch) {
        fl__free(&a, cli, sizeof(*cli));
        return FL_ERR_NOMEM;
    }
    if (c.active) {
        memcpy(&cli->id, id, id->struct_size); /* device_id stays zero for an older struct */
        cli->id.struct_size = sizeof(cli->id);
        memcpy(cli->vk, id->signing_key + 32, 32);
    }
    fl__err_clear(&cli->err);
    *out = cli;
    return FL_OK;
}

void fl_secagg_client_destroy(fl_secagg_client *c) {
    if (!c)
        return;
    fl_allocator a = c->alloc;
    if (c->input) {
        fl_memzero(c->input, fl__sa_vec_len(&c->cfg) * sizeof(uint32_t));
        fl__free(&a, c->input, fl__sa_vec_len(&c->cfg) * sizeof(uint32_t));
    }
    fl__free(&a, c->proof, fl__sa_norm_proof_bytes(&c->cfg));
    if (c->peers) {
        fl_memzero(c->peers, (size_t)c->cfg.degree * sizeof(struct fl__sa_peer));
        fl__free(&a, c->peers, (size_t)c->cfg.degree * sizeof(struct fl__sa_peer));
    }
    fl__free(&a, c->u3, c->u3_len);
    fl__free(&a, c->scratch, FL__SA_MASK_CHUNK * 4);
    fl__sa_buf_free(&c->out, &a);
    fl__sa_graph_free(&c->graph, &a);
    fl_memzero(c, sizeof(*c)); /* keys, seeds, identity */
    fl__free(&a, c, sizeof(*c));
}

fl_secagg_phase fl_secagg_client_phase(const fl_secagg_client *c) {
    return c ? c->phase : FL_SECAGG_PHASE_FAILED;
}

const char *fl_secagg_client_errmsg(const fl_secagg_client *c) {
    return c ? fl__err_msg(&c->err) : "NULL client";
}

fl_status fl_secagg_client_set_input(fl_secagg_client *c, const uint32_t *x, size_t dim) {
    if (!c)
        return FL_ERR_MISUSE;
    if (!x || dim != c->cfg.dim)
        return fl__err_set(&c->err, FL_ERR_MISUSE, "set_input: %zu values, expected %u", dim,
                           c->cfg.dim);
    if (c->phase != FL_SECAGG_PHASE_ADVERTISE && c->phase != FL_SECAGG_PHASE_SHARE_KEYS &&
        c->phase != FL_SECAGG_PHASE_MASKED_INPUT)
        return fl__err_set(&c->err, FL_ERR_MISUSE, "set_input: input already used");
    uint32_t mask = fl__sa_bitmask(c->cfg.bits);
    for (size_t i = 0; i < dim; i++)
        if (x[i] & ~mask)
            return fl__err_set(&c->err, FL_ERR_RANGE, "set_input: x[%zu] = %u >= 2^%u", i,
                               x[i], c->cfg.bits);
    size_t vl = fl__sa_vec_len(&c->cfg), pb = fl__sa_norm_proof_bytes(&c->cfg);
    if (!c->input) {
        c->input = fl__alloc_array(&c->alloc, vl, sizeof(uint32_t));
        if (!c->input)
            return fl__err_set(&c->err, FL_ERR_NOMEM, "set_input: out of memory");
    }
    if (pb && !c->proof) {
        c->proof = fl__alloc(&c->alloc, pb);
        if (!c->proof)
            return fl__err_set(&c->err, FL_ERR_NOMEM, "set_input: out of memory");
    }
    c->has_input = 0;
    memcpy(c->input, x, dim * sizeof(uint32_t));
    if (pb) {
        /* The proof is made now: it depends on the input, the round and our index only. */
        fl_status st = fl__sa_norm_prove(c->proof, c->input + dim, &c->cfg, c->round_id,
                                         c->index, x, &c->alloc, &c->err);
        if (st != FL_OK) {
            fl_memzero(c->input, vl * sizeof(uint32_t));
            return st;
        }
    }
    c->has_input = 1;
    return FL_OK;
}

/* ---- round 0: advertise keys ---- */

fl_status fl_secagg_client_start(fl_secagg_client *c, const uint8_t **out, size_t *out_len) {
    if (!c || !out || !out_len)
        return FL_ERR_MISUSE;
    if (c->phase == FL_SECAGG_PHASE_FAILED)
        return c->fail_code;
    if (c->started)
        return fl__err_set(&c->err, FL_ERR_STATE, "start: already started");
    const struct fl__sa_crypto *cr = c->crypto;
    size_t body = fl__sa_adv_bytes(&c->cfg);
    size_t len = FL_SECAGG_HEADER_BYTES + body;
    if (fl__sa_buf_reserve(&c->out, &c->alloc, len) != 0)
        return fl__err_set(&c->err, FL_ERR_NOMEM, "start: out of memory");
    if (cr->x25519_keypair(c->c_pk, c->c_sk) != 0 || cr->x25519_keypair(c->s_pk, c->s_sk) != 0)
        return client_fail(c, FL_ERR_CRYPTO, "start: key generation failed");
    uint8_t *p = c->out.p;
    fl__sa_put_header(p, FL_SECAGG_MSG_ADVERTISE, c->round_id, c->index, (uint32_t)body);
    p += FL_SECAGG_HEADER_BYTES;
    memcpy(p, c->c_pk, 32);
    memcpy(p + 32, c->s_pk, 32);
    if (c->cfg.active) {
        uint8_t stmt[FL__SA_STMT_BYTES];
        size_t sl = fl__sa_adv_statement(stmt, sizeof(stmt), c->round_id, c->index, c->c_pk,
                                         c->s_pk, c->cfg.context);
        memcpy(p + 64, c->vk, 32);
        memcpy(p + 96, c->id.cert, 64);
        if (cr->ed25519_sign(p + 160, stmt, sl, c->id.signing_key) != 0)
            return client_fail(c, FL_ERR_CRYPTO, "start: signing failed");
        if (c->cfg.device_certs)
            memcpy(p + FL__SA_ADV_DEVICE_OFF, c->id.device_id, FL_SECAGG_DEVICE_ID_BYTES);
    }
    c->out.len = len;
    c->started = 1;
    c->phase = FL_SECAGG_PHASE_SHARE_KEYS;
    fl__err_clear(&c->err);
    *out = c->out.p;
    *out_len = c->out.len;
    return FL_OK;
}

/* ---- round 1: KEYS -> SHARES ---- */

/* Verifies a neighbour's certificate (over its index, or over the device id it carries in
 * device-certificate mode) and advertisement signature (active mode). */
static int verify_adv(const fl_secagg_client *c, uint32_t idx, const uint8_t *adv) {
    const struct fl__sa_crypto *cr = c->crypto;
    uint8_t stmt[FL__SA_STMT_BYTES];
    const uint8_t *vk = adv + 64, *cert = adv + 96, *sig = adv + 160;
    size_t sl = c->cfg.device_certs
                    ? fl__sa_cert_statement_device(stmt, sizeof(stmt),
                                                   adv + FL__SA_ADV_DEVICE_OFF, vk)
                    : fl__sa_cert_statement(stmt, sizeof(stmt), idx, vk);
    if (cr->ed25519_verify(cert, stmt, sl, c->cfg.verify_key) != 0)
        return -1;
    sl = fl__sa_adv_statement(stmt, sizeof(stmt), c->round_id, idx, adv, adv + 32,
                              c->cfg.context);
    return cr->ed25519_verify(sig, stmt, sl, vk);
}

/* Bytes of the share ciphertexts' associated data: 19, plus the context when it is set. */
#define SHARE_AD_MAX (19 + FL_SECAGG_CONTEXT_BYTES)

/* AEAD nonce and associated data (magic || version || round || from || to [|| context]) for
 * the share ciphertext from -> to; returns the associated data's length. */
static size_t share_nonce_ad(const fl_secagg_client *c, uint8_t nonce[12],
                             uint8_t ad[SHARE_AD_MAX], uint32_t from, uint32_t to) {
    fl__put_u32le(nonce, from);
    fl__put_u32le(nonce + 4, to);
    memset(nonce + 8, 0, 4);
    ad[0] = FL__SA_MAGIC0;
    ad[1] = FL__SA_MAGIC1;
    ad[2] = FL__SA_VERSION;
    fl__put_u64le(ad + 3, c->round_id);
    fl__put_u32le(ad + 11, from);
    fl__put_u32le(ad + 15, to);
    if (!fl__sa_has_context(&c->cfg))
        return 19;
    memcpy(ad + 19, c->cfg.context, FL_SECAGG_CONTEXT_BYTES);
    return SHARE_AD_MAX;
}

static int cmp_device_id(const void *a, const void *b) {
    return memcmp(*(const uint8_t *const *)a, *(const uint8_t *const *)b,
                  FL_SECAGG_DEVICE_ID_BYTES);
}

/* Device-certificate mode: 0 if the count device ids in ids (pointers into the message)
 * are pairwise distinct, else -1. Sorts ids. Each id was certified for its neighbour's key,
 * so a repeat means one device holds two indices of the round (a Sybil the server or the
 * coordinator let in). */
static int device_ids_distinct(const uint8_t **ids, uint32_t count) {
    if (count < 2)
        return 0;
    qsort(ids, count, sizeof(*ids), cmp_device_id);
    for (uint32_t i = 1; i < count; i++)
        if (memcmp(ids[i - 1], ids[i], FL_SECAGG_DEVICE_ID_BYTES) == 0)
            return -1;
    return 0;
}

static fl_status handle_keys(fl_secagg_client *c, const uint8_t *msg, size_t len) {
    const fl_secagg_config *cfg = &c->cfg;
    const struct fl__sa_crypto *cr = c->crypto;
    struct fl__sa_reader r;
    fl_status st = fl__sa_open_msg(&r, &c->err, msg, len, FL_SECAGG_MSG_KEYS, c->round_id,
                                   c->index, fl__sa_msg_limit(cfg, FL_SECAGG_MSG_KEYS));
    if (st != FL_OK)
        return st;
    uint32_t n, k, t, d, count;
    uint8_t b, active;
    const uint8_t *pad, *seed;
    if (fl__sa_read_u32(&r, &n) || fl__sa_read_u32(&r, &k) || fl__sa_read_u32(&r, &t) ||
        fl__sa_read_u8(&r, &b) || fl__sa_read_u8(&r, &active) ||
        fl__sa_read_bytes(&r, &pad, 2) || fl__sa_read_u32(&r, &d) ||
        fl__sa_read_bytes(&r, &seed, 32) || fl__sa_read_u32(&r, &count))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "KEYS: truncated");
    size_t adv = fl__sa_adv_bytes(cfg);
    if (pad[0] & ~FL__SA_KEYS_FLAG_SEEDS || pad[1])
        return fl__err_set(&c->err, FL_ERR_FORMAT, "KEYS: unknown flags or nonzero padding");
    if (count > cfg->degree || r.left != (size_t)count * (4 + adv))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "KEYS: %u entries do not fit %zu bytes",
                           count, r.left);
    if (n != cfg->num_clients || k != cfg->degree || t != cfg->threshold || b != cfg->bits ||
        active != fl__sa_mode_byte(cfg) || pad[0] != fl__sa_keys_flags(cfg) ||
        d != cfg->dim)
        return client_fail(c, FL_ERR_PROTOCOL, "KEYS: round parameters differ from config");

    /* Graph and neighbour table, built aside and committed only on success. */
    struct fl__sa_graph g;
    st = fl__sa_graph_init(&g, n, k, seed, cr, &c->alloc);
    if (st != FL_OK)
        return st == FL_ERR_NOMEM ? fl__err_set(&c->err, st, "KEYS: out of memory")
                                  : client_fail(c, st, "KEYS: graph derivation failed");
    size_t peers_bytes = (size_t)k * sizeof(struct fl__sa_peer);
    struct fl__sa_peer *peers = fl__calloc(&c->alloc, k, sizeof(struct fl__sa_peer));
    struct fl__sa_share *ss = fl__calloc(&c->alloc, (size_t)count + 1, sizeof(*ss));
    struct fl__sa_share *bs = fl__calloc(&c->alloc, (size_t)count + 1, sizeof(*bs));
    uint32_t *xs = fl__calloc(&c->alloc, (size_t)count + 1, sizeof(uint32_t));
    const uint8_t **dev = NULL; /* (count) device ids (pointers into msg) */
    if (cfg->device_certs && count > 0)
        dev = fl__alloc_array(&c->alloc, count, sizeof(*dev));
    size_t out_len = FL_SECAGG_HEADER_BYTES + FL__SA_COMMIT_BYTES + 4 +
                     (size_t)count * (4 + FL__SA_SHARE_CT_BYTES);
    uint8_t pt[FL__SA_SHARE_PT_BYTES];
    if (!peers || !ss || !bs || !xs || (cfg->device_certs && count > 0 && !dev) ||
        fl__sa_buf_reserve(&c->out, &c->alloc, out_len) != 0) {
        st = fl__err_set(&c->err, FL_ERR_NOMEM, "KEYS: out of memory");
        goto out;
    }
    int32_t prev = -1;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t idx;
        const uint8_t *e;
        fl__sa_read_u32(&r, &idx);
        fl__sa_read_bytes(&r, &e, adv);
        int32_t slot = fl__sa_graph_slot(&g, c->index, idx);
        if (slot <= prev) {
            st = client_fail(c, FL_ERR_PROTOCOL,
                             "KEYS: neighbour list not a sorted subset of the graph");
            goto out;
        }
        if (cfg->active && verify_adv(c, idx, e) != 0) {
            st = client_fail(c, FL_ERR_CRYPTO, "KEYS: bad neighbour signature");
            goto out;
        }
        if (cfg->device_certs) {
            /* A neighbour certified as this device: someone else holds a key certified for
             * our id, and the round would count this device twice. */
            if (memcmp(e + FL__SA_ADV_DEVICE_OFF, c->id.device_id,
                       FL_SECAGG_DEVICE_ID_BYTES) == 0) {
                char m[96];
                snprintf(m, sizeof(m), "KEYS: client %u advertises this client's device id",
                         idx);
                st = client_fail(c, FL_ERR_PROTOCOL, m);
                goto out;
            }
            dev[i] = e + FL__SA_ADV_DEVICE_OFF;
        }
        /* The server refuses these; relaying one anyway is a server attack (or bug). No
         * share or mask may depend on it, and this client cannot leave the peer out on its
         * own (the server expects a share for every neighbour it listed, and the peers' views
         * of U1 would differ), so it fails here, before anything leaves it. */
        if (fl__sa_x25519_is_small_order(e) || fl__sa_x25519_is_small_order(e + 32)) {
            char m[128];
            snprintf(m, sizeof(m), "KEYS: client %u's %s is a small-order X25519 point", idx,
                     fl__sa_x25519_is_small_order(e) ? "c_pk" : "s_pk");
            st = client_fail(c, FL_ERR_CRYPTO, m);
            goto out;
        }
        prev = slot;
        struct fl__sa_peer *p = &peers[slot];
        p->index = idx;
        p->flags = PEER_U1;
        memcpy(p->c_pk, e, 32);
        memcpy(p->s_pk, e + 32, 32);
        if (cfg->active)
            memcpy(p->vk, e + 64, 32);
        xs[i] = idx + 1;
    }
    if (cfg->device_certs && device_ids_distinct(dev, count) != 0) {
        st = client_fail(c, FL_ERR_PROTOCOL, "KEYS: two neighbours advertise one device id");
        goto out;
    }
    if (count + 1 < t) {
        st = client_fail(c, FL_ERR_ABORTED, "KEYS: fewer than t neighbours left");
        goto out;
    }
    /* Shares of s_sk and b_u for the neighbours and ourselves (x = index + 1, last). */
    xs[count] = c->index + 1;
    if (cr->random(c->b_seed, 32) != 0 ||
        fl__sa_shamir_split(ss, xs, (size_t)count + 1, t, c->s_sk, cr) != 0 ||
        fl__sa_shamir_split(bs, xs, (size_t)count + 1, t, c->b_seed, cr) != 0) {
        st = client_fail(c, FL_ERR_CRYPTO, "KEYS: secret sharing failed");
        goto out;
    }
    uint8_t *o = c->out.p;
    fl__sa_put_header(o, FL_SECAGG_MSG_SHARES, c->round_id, c->index,
                      (uint32_t)(out_len - FL_SECAGG_HEADER_BYTES));
    o += FL_SECAGG_HEADER_BYTES;
    if (fl__sa_commit_b(o, cr, c->round_id, c->index, c->b_seed) != 0) {
        st = client_fail(c, FL_ERR_CRYPTO, "KEYS: commitment failed");
        goto out;
    }
    o += FL__SA_COMMIT_BYTES;
    fl__put_u32le(o, count);
    o += 4;
    uint32_t i = 0;
    for (uint32_t s = 0; s < k; s++) {
        struct fl__sa_peer *p = &peers[s];
        if (!(p->flags & PEER_U1))
            continue;
        uint8_t nonce[12], ad[SHARE_AD_MAX];
        size_t adl = share_nonce_ad(c, nonce, ad, c->index, p->index);
        fl__put_u32le(pt, c->index);
        fl__put_u32le(pt + 4, p->index);
        memcpy(pt + 8, ss[i].y, FL__SA_SHARE_Y_BYTES);
        memcpy(pt + 8 + FL__SA_SHARE_Y_BYTES, bs[i].y, FL__SA_SHARE_Y_BYTES);
        fl__put_u32le(o, p->index);
        if (fl__sa_derive_pair_key(p->key, cr, "enc", c->c_sk, p->c_pk, c->round_id, c->index,
                                   p->index, c->cfg.context) != 0 ||
            cr->aead_seal(o + 4, pt, sizeof(pt), ad, adl, nonce, p->key) != 0) {
            fl_memzero(c->out.p, out_len);
            st = client_fail(c, FL_ERR_CRYPTO, "KEYS: share encryption failed");
            goto out;
        }
        o += 4 + FL__SA_SHARE_CT_BYTES;
        i++;
    }
    memcpy(c->self_b_y, bs[count].y, FL__SA_SHARE_Y_BYTES);
    /* Commit. */
    c->graph = g;
    c->has_graph = 1;
    g.perm = g.pos = NULL;
    c->peers = peers;
    peers = NULL;
    c->out.len = out_len;
    c->phase = FL_SECAGG_PHASE_MASKED_INPUT;
    st = FL_OK;
out:
    fl_memzero(pt, sizeof(pt));
    if (ss) {
        fl_memzero(ss, ((size_t)count + 1) * sizeof(*ss));
        fl__free(&c->alloc, ss, ((size_t)count + 1) * sizeof(*ss));
    }
    if (bs) {
        fl_memzero(bs, ((size_t)count + 1) * sizeof(*bs));
        fl__free(&c->alloc, bs, ((size_t)count + 1) * sizeof(*bs));
    }
    fl__free(&c->alloc, xs, ((size_t)count + 1) * sizeof(uint32_t));
    if (dev)
        fl__free(&c->alloc, dev, (size_t)count * sizeof(*dev));
    if (peers)
        fl_memzero(peers, peers_bytes);
    fl__free(&c->alloc, peers, peers_bytes);
    fl__sa_graph_free(&g, &c->alloc);
    return st;
}

/* ---- round 2: CIPHERTEXTS -> MASKED_INPUT ---- */

static fl_status handle_ciphertexts(fl_secagg_client *c, const uint8_t *msg, size_t len) {
    const fl_secagg_config *cfg = &c->cfg;
    const struct fl__sa_crypto *cr = c->crypto;
    struct fl__sa_reader r;
    fl_status st = fl__sa_open_msg(&r, &c->err, msg, len, FL_SECAGG_MSG_CIPHERTEXTS,
                                   c->round_id, c->index,
                                   fl__sa_msg_limit(cfg, FL_SECAGG_MSG_CIPHERTEXTS));
    if (st != FL_OK)
        return st;
    uint32_t count;
    if (fl__sa_read_u32(&r, &count))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "CIPHERTEXTS: truncated");
    if (count > cfg->degree || r.left != (size_t)count * (4 + FL__SA_SHARE_CT_BYTES))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "CIPHERTEXTS: %u entries do not fit",
                           count);
    if (!c->has_input)
        return fl__err_set(&c->err, FL_ERR_MISUSE, "CIPHERTEXTS: input not set");
    /* Validate the sender list before touching state. */
    struct fl__sa_reader scan = r;
    int32_t prev = -1;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t idx;
        const uint8_t *ct;
        fl__sa_read_u32(&scan, &idx);
        fl__sa_read_bytes(&scan, &ct, FL__SA_SHARE_CT_BYTES);
        int32_t slot = fl__sa_graph_slot(&c->graph, c->index, idx);
        if (slot <= prev || !(c->peers[slot].flags & PEER_U1))
            return client_fail(c, FL_ERR_PROTOCOL,
                               "CIPHERTEXTS: sender list not a sorted subset of our neighbours");
        prev = slot;
    }
    if (count + 1 < cfg->threshold)
        return client_fail(c, FL_ERR_ABORTED, "CIPHERTEXTS: fewer than t neighbours left");
    /* Open every share now, not only when unmasking: a share that does not open was sealed
     * under another context (a neighbour that was given another model: the server
     * equivocated) or was tampered with. Either way this client's masked input must not
     * leave it, so it fails here, before the masked input exists. */
    scan = r;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t idx;
        const uint8_t *ct;
        fl__sa_read_u32(&scan, &idx);
        fl__sa_read_bytes(&scan, &ct, FL__SA_SHARE_CT_BYTES);
        const struct fl__sa_peer *p = &c->peers[fl__sa_graph_slot(&c->graph, c->index, idx)];
        uint8_t nonce[12], ad[SHARE_AD_MAX], pt[FL__SA_SHARE_PT_BYTES];
        size_t adl = share_nonce_ad(c, nonce, ad, idx, c->index);
        int bad = cr->aead_open(pt, ct, FL__SA_SHARE_CT_BYTES, ad, adl, nonce, p->key) != 0 ||
                  fl__get_u32le(pt) != idx || fl__get_u32le(pt + 4) != c->index;
        fl_memzero(pt, sizeof(pt));
        if (bad) {
            char m[160];
            snprintf(m, sizeof(m), "CIPHERTEXTS: the share from client %u does not open "
                     "(another context, e.g. another model, or tampered)", idx);
            return client_fail(c, FL_ERR_CRYPTO, m);
        }
    }

    size_t d = fl__sa_vec_len(cfg), eb = fl__sa_elem_bytes(cfg->bits);
    size_t pb = fl__sa_norm_proof_bytes(cfg);
    size_t out_len = FL_SECAGG_HEADER_BYTES + d * eb + pb;
    uint32_t *acc = fl__alloc_array(&c->alloc, d, sizeof(uint32_t));
    /* The self-mask seed first, then one pairwise seed per sender. */
    size_t nseeds = (size_t)count + 1;
    uint8_t(*seeds)[32] = fl__alloc_array(&c->alloc, nseeds, 32);
    int *signs = fl__alloc_array(&c->alloc, nseeds, sizeof(int));
    if (!acc || !seeds || !signs || fl__sa_buf_reserve(&c->out, &c->alloc, out_len) != 0) {
        st = fl__err_set(&c->err, FL_ERR_NOMEM, "CIPHERTEXTS: out of memory");
        goto out;
    }
    /* y = x + PRG(b_u) + sum_v sign(u, v) PRG(s_uv), mod 2^b. Every seed is derived before
     * any mask is drawn, so that the masks go over the vector a block at a time (all of
     * them on a block while it is in cache, fl__sa_mask_apply_blocked) instead of once per
     * mask over all of it. */
    memcpy(seeds[0], c->b_seed, 32);
    signs[0] = +1;
    scan = r;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t idx;
        const uint8_t *ct;
        fl__sa_read_u32(&scan, &idx);
        fl__sa_read_bytes(&scan, &ct, FL__SA_SHARE_CT_BYTES);
        const struct fl__sa_peer *p = &c->peers[fl__sa_graph_slot(&c->graph, c->index, idx)];
        signs[i + 1] = c->index < idx ? +1 : -1;
        if (fl__sa_derive_pair_key(seeds[i + 1], cr, "mask", c->s_sk, p->s_pk, c->round_id,
                                   c->index, idx, NULL) != 0) {
            st = client_fail(c, FL_ERR_CRYPTO, "MASKED_INPUT: pairwise mask failed");
            goto out;
        }
    }
    memcpy(acc, c->input, d * sizeof(uint32_t));
    if (fl__sa_mask_apply_blocked(acc, 0, d, (const uint8_t(*)[32])seeds, signs, nseeds, cr,
                                  c->scratch, NULL, NULL) != 0) {
        st = client_fail(c, FL_ERR_CRYPTO, "MASKED_INPUT: mask expansion failed");
        goto out;
    }
    uint8_t *o = c->out.p;
    fl__sa_put_header(o, FL_SECAGG_MSG_MASKED_INPUT, c->round_id, c->index,
                      (uint32_t)(d * eb + pb));
    o += FL_SECAGG_HEADER_BYTES;
    uint32_t mask = fl__sa_bitmask(cfg->bits);
    if (eb == 4) {
        for (size_t i = 0; i < d; i++)
            fl__put_u32le(o + 4 * i, acc[i] & mask);
    } else {
        for (size_t i = 0; i < d; i++) {
            uint32_t v = acc[i] & mask;
            for (size_t j = 0; j < eb; j++)
                o[eb * i + j] = (uint8_t)(v >> (8 * j));
        }
    }
    if (pb)
        memcpy(o + d * eb, c->proof, pb);
    /* Commit: remember who shared with us and their ciphertexts. */
    for (uint32_t i = 0; i < count; i++) {
        uint32_t idx;
        const uint8_t *ct;
        fl__sa_read_u32(&r, &idx);
        fl__sa_read_bytes(&r, &ct, FL__SA_SHARE_CT_BYTES);
        struct fl__sa_peer *p = &c->peers[fl__sa_graph_slot(&c->graph, c->index, idx)];
        p->flags |= PEER_U2;
        memcpy(p->ct, ct, FL__SA_SHARE_CT_BYTES);
    }
    c->out.len = out_len;
    c->phase = cfg->active ? FL_SECAGG_PHASE_CONSISTENCY : FL_SECAGG_PHASE_UNMASK;
    /* The input is spent: only the masked form leaves the device. */
    fl_memzero(c->input, d * sizeof(uint32_t));
    fl__free(&c->alloc, c->input, d * sizeof(uint32_t));
    c->input = NULL;
    c->has_input = 0;
    st = FL_OK;
out:
    /* Keystream (not wiped by the mask calls on success), seeds and the masked vector. */
    fl_memzero(c->scratch, FL__SA_MASK_RANGE_SCRATCH);
    fl_memzero(seeds, nseeds * 32);
    fl_memzero(acc, d * sizeof(uint32_t));
    fl__free(&c->alloc, seeds, nseeds * 32);
    fl__free(&c->alloc, signs, nseeds * sizeof(int));
    fl__free(&c->alloc, acc, d * sizeof(uint32_t));
    return st;
}

/* ---- survivor bitmaps ---- */

/* Reads n and the bitmap; FL_OK, FL_ERR_FORMAT (trailing bits set / short). */
static fl_status read_bitmap(fl_secagg_client *c, struct fl__sa_reader *r, const char *what,
                             const uint8_t **bm) {
    uint32_t n;
    size_t bl = fl__sa_bitmap_bytes(c->cfg.num_clients);
    if (fl__sa_read_u32(r, &n) || fl__sa_read_bytes(r, bm, bl))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "%s: truncated", what);
    if (n != c->cfg.num_clients)
        return fl__err_set(&c->err, FL_ERR_FORMAT, "%s: bitmap for %u clients", what, n);
    if ((c->cfg.num_clients & 7) && ((*bm)[bl - 1] >> (c->cfg.num_clients & 7)))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "%s: padding bits set", what);
    return FL_OK;
}

/* Checks the survivor set: we are in it and it leaves at least t holders around us. */
static fl_status check_survivors(fl_secagg_client *c, const uint8_t *bm, const char *what) {
    if (!fl__sa_bit_get(bm, c->index))
        return client_fail(c, FL_ERR_PROTOCOL, "survivor set claims this client dropped");
    uint32_t alive = 1;
    for (uint32_t s = 0; s < c->cfg.degree; s++)
        if ((c->peers[s].flags & PEER_U2) && fl__sa_bit_get(bm, c->peers[s].index))
            alive++;
    if (alive < c->cfg.threshold) {
        char m[128];
        snprintf(m, sizeof(m), "%s: %u survivors around us, t = %u", what, alive,
                 c->cfg.threshold);
        return client_fail(c, FL_ERR_ABORTED, m);
    }
    return FL_OK;
}

/* ---- round 3 (active): CONSISTENCY_REQ -> CONSISTENCY_SIG ---- */

static fl_status handle_consistency(fl_secagg_client *c, const uint8_t *msg, size_t len) {
    struct fl__sa_reader r;
    fl_status st = fl__sa_open_msg(&r, &c->err, msg, len, FL_SECAGG_MSG_CONSISTENCY_REQ,
                                   c->round_id, c->index,
                                   fl__sa_msg_limit(&c->cfg, FL_SECAGG_MSG_CONSISTENCY_REQ));
    if (st != FL_OK)
        return st;
    const uint8_t *bm;
    if ((st = read_bitmap(c, &r, "CONSISTENCY_REQ", &bm)) != FL_OK)
        return st;
    if (r.left != 0)
        return fl__err_set(&c->err, FL_ERR_FORMAT, "CONSISTENCY_REQ: trailing bytes");
    size_t bl = fl__sa_bitmap_bytes(c->cfg.num_clients);
    size_t sl = 0;
    uint8_t *u3 = fl__alloc(&c->alloc, bl);
    uint8_t *stmt = fl__sa_u3_statement(&sl, &c->alloc, c->round_id, c->cfg.num_clients, bm, bl);
    size_t out_len = FL_SECAGG_HEADER_BYTES + FL__SA_SIG_BYTES;
    if (!u3 || !stmt || fl__sa_buf_reserve(&c->out, &c->alloc, out_len) != 0) {
        st = fl__err_set(&c->err, FL_ERR_NOMEM, "CONSISTENCY_REQ: out of memory");
        goto out;
    }
    if ((st = check_survivors(c, bm, "CONSISTENCY_REQ")) != FL_OK)
        goto out;
    fl__sa_put_header(c->out.p, FL_SECAGG_MSG_CONSISTENCY_SIG, c->round_id, c->index,
                      FL__SA_SIG_BYTES);
    if (c->crypto->ed25519_sign(c->out.p + FL_SECAGG_HEADER_BYTES, stmt, sl,
                                c->id.signing_key) != 0) {
        st = client_fail(c, FL_ERR_CRYPTO, "CONSISTENCY_REQ: signing failed");
        goto out;
    }
    memcpy(u3, bm, bl);
    c->u3 = u3;
    c->u3_len = bl;
    u3 = NULL;
    c->out.len = out_len;
    c->phase = FL_SECAGG_PHASE_UNMASK;
out:
    fl__free(&c->alloc, u3, bl);
    fl__free(&c->alloc, stmt, sl);
    return st;
}

/* ---- round 4: UNMASK_REQ -> UNMASK_SHARES ---- */

static fl_status handle_unmask(fl_secagg_client *c, const uint8_t *msg, size_t len) {
    const fl_secagg_config *cfg = &c->cfg;
    const struct fl__sa_crypto *cr = c->crypto;
    struct fl__sa_reader r;
    fl_status st = fl__sa_open_msg(&r, &c->err, msg, len, FL_SECAGG_MSG_UNMASK_REQ, c->round_id,
                                   c->index, fl__sa_msg_limit(cfg, FL_SECAGG_MSG_UNMASK_REQ));
    if (st != FL_OK)
        return st;
    const uint8_t *bm;
    uint32_t count;
    if ((st = read_bitmap(c, &r, "UNMASK_REQ", &bm)) != FL_OK)
        return st;
    if (fl__sa_read_u32(&r, &count))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "UNMASK_REQ: truncated");
    if ((!cfg->active && count != 0) || count > cfg->degree ||
        r.left != (size_t)count * (4 + FL__SA_SIG_BYTES))
        return fl__err_set(&c->err, FL_ERR_FORMAT, "UNMASK_REQ: %u signatures do not fit",
                           count);
    size_t k = cfg->degree;
    size_t out_len = fl__sa_msg_limit(cfg, FL_SECAGG_MSG_UNMASK_SHARES);
    if (fl__sa_buf_reserve(&c->out, &c->alloc, out_len) != 0)
        return fl__err_set(&c->err, FL_ERR_NOMEM, "UNMASK_REQ: out of memory");

    if (cfg->active) {
        /* The consistency check: the set must be the one we signed, and at least t - 1
         * neighbours must have signed that same set. */
        if (!c->u3 || memcmp(c->u3, bm, c->u3_len) != 0)
            return client_fail(c, FL_ERR_PROTOCOL,
                               "UNMASK_REQ: survivor set differs from the one signed");
        size_t sl = 0;
        uint8_t *stmt =
            fl__sa_u3_statement(&sl, &c->alloc, c->round_id, cfg->num_clients, bm, c->u3_len);
        if (!stmt)
            return fl__err_set(&c->err, FL_ERR_NOMEM, "UNMASK_REQ: out of memory");
        int32_t prev = -1;
        uint32_t valid = 1; /* our own signature */
        st = FL_OK;
        for (uint32_t i = 0; i < count && st == FL_OK; i++) {
            uint32_t idx;
            const uint8_t *sig;
            fl__sa_read_u32(&r, &idx);
            fl__sa_read_bytes(&r, &sig, FL__SA_SIG_BYTES);
            int32_t slot = fl__sa_graph_slot(&c->graph, c->index, idx);
            if (slot <= prev || !(c->peers[slot].flags & PEER_U1) || !fl__sa_bit_get(bm, idx))
                st = client_fail(c, FL_ERR_PROTOCOL, "UNMASK_REQ: bad signer list");
            else if (cr->ed25519_verify(sig, stmt, sl, c->peers[slot].vk) != 0)
                st = client_fail(c, FL_ERR_CRYPTO, "UNMASK_REQ: bad consistency signature");
            else
                valid++;
            prev = slot;
        }
        fl__free(&c->alloc, stmt, sl);
        if (st != FL_OK)
            return st;
        if (valid < cfg->threshold)
            return client_fail(c, FL_ERR_ABORTED,
                               "UNMASK_REQ: fewer than t consistency signatures");
    }
    if ((st = check_survivors(c, bm, "UNMASK_REQ")) != FL_OK)
        return st;

    /* Reveal exactly one share per neighbour that shared with us: b_v if v survived, s_v if
     * it dropped. This is the only place shares leave the client, once per round. */
    uint8_t *o = c->out.p + FL_SECAGG_HEADER_BYTES + 4;
    uint8_t pt[FL__SA_SHARE_PT_BYTES];
    uint32_t m = 0;
    st = FL_OK;
    for (uint32_t s = 0; s < k; s++) {
        const struct fl__sa_peer *p = &c->peers[s];
        if (!(p->flags & PEER_U2))
            continue;
        uint8_t nonce[12], ad[SHARE_AD_MAX];
        size_t adl = share_nonce_ad(c, nonce, ad, p->index, c->index);
        if (cr->aead_open(pt, p->ct, FL__SA_SHARE_CT_BYTES, ad, adl, nonce, p->key) != 0) {
            st = client_fail(c, FL_ERR_CRYPTO, "UNMASK_REQ: share ciphertext does not open");
            break;
        }
        if (fl__get_u32le(pt) != p->index || fl__get_u32le(pt + 4) != c->index) {
            st = client_fail(c, FL_ERR_PROTOCOL, "UNMASK_REQ: share addressed elsewhere");
            break;
        }
        int alive = fl__sa_bit_get(bm, p->index);
        fl__put_u32le(o, p->index);
        o[4] = alive ? FL__SA_KIND_B : FL__SA_KIND_S;
        memcpy(o + 5, pt + 8 + (alive ? FL__SA_SHARE_Y_BYTES : 0), FL__SA_SHARE_Y_BYTES);
        o += 4 + 1 + FL__SA_SHARE_Y_BYTES;
        m++;
    }
    fl_memzero(pt, sizeof(pt));
    if (st != FL_OK) {
        fl_memzero(c->out.p, c->out.cap);
        return st;
    }
    fl__put_u32le(o, c->index);
    o[4] = FL__SA_KIND_B;
    memcpy(o + 5, c->self_b_y, FL__SA_SHARE_Y_BYTES);
    o += 4 + 1 + FL__SA_SHARE_Y_BYTES;
    m++;
    if (cfg->reveal_pair_seeds) {
        /* The seed of the mask we added with each neighbour whose s share we just revealed
         * (the same derivation as in MASKED_INPUT): the server could compute it from the
         * rebuilt key, so this tells it nothing new and spares it the agreement. */
        uint8_t *cnt = o;
        uint32_t ns = 0;
        o += 4;
        for (uint32_t s = 0; s < k; s++) {
            const struct fl__sa_peer *p = &c->peers[s];
            if (!(p->flags & PEER_U2) || fl__sa_bit_get(bm, p->index))
                continue;
            fl__put_u32le(o, p->index);
            if (fl__sa_derive_pair_key(o + 4, cr, "mask", c->s_sk, p->s_pk, c->round_id,
                                       c->index, p->index, NULL) != 0) {
                fl_memzero(c->out.p, c->out.cap);
                return client_fail(c, FL_ERR_CRYPTO, "UNMASK_REQ: pairwise seed failed");
            }
            o += 4 + FL__SA_PAIR_SEED_BYTES;
            ns++;
        }
        fl__put_u32le(cnt, ns);
    }
    size_t body = (size_t)(o - c->out.p) - FL_SECAGG_HEADER_BYTES;
    fl__sa_put_header(c->out.p, FL_SECAGG_MSG_UNMASK_SHARES, c->round_id, c->index,
                      (uint32_t)body);
    fl__put_u32le(c->out.p + FL_SECAGG_HEADER_BYTES, m);
    c->out.len = FL_SECAGG_HEADER_BYTES + body;
    c->phase = FL_SECAGG_PHASE_DONE;
    /* Nothing secret is needed any more. */
    fl_memzero(c->c_sk, sizeof(c->c_sk));
    fl_memzero(c->s_sk, sizeof(c->s_sk));
    fl_memzero(c->b_seed, sizeof(c->b_seed));
    fl_memzero(c->self_b_y, sizeof(c->self_b_y));
    for (uint32_t s2 = 0; s2 < k; s2++)
        fl_memzero(c->peers[s2].key, sizeof(c->peers[s2].key));
    return FL_OK;
}

/* ---- dispatch ---- */

fl_status fl_secagg_client_handle(fl_secagg_client *c, const uint8_t *msg, size_t len,
                                  const uint8_t **out, size_t *out_len) {
    if (!c || !out || !out_len || (!msg && len))
        return FL_ERR_MISUSE;
    fl_status st;
    switch (c->phase) {
    case FL_SECAGG_PHASE_FAILED:
        return c->fail_code;
    case FL_SECAGG_PHASE_ADVERTISE:
        return fl__err_set(&c->err, FL_ERR_STATE, "handle: call start() first");
    case FL_SECAGG_PHASE_DONE:
        return fl__err_set(&c->err, FL_ERR_STATE, "handle: round already done");
    case FL_SECAGG_PHASE_SHARE_KEYS:
        st = handle_keys(c, msg, len);
        break;
    case FL_SECAGG_PHASE_MASKED_INPUT:
        st = handle_ciphertexts(c, msg, len);
        break;
    case FL_SECAGG_PHASE_CONSISTENCY:
        st = handle_consistency(c, msg, len);
        break;
    case FL_SECAGG_PHASE_UNMASK:
        st = handle_unmask(c, msg, len);
        break;
    default:
        return FL_ERR_INTERNAL;
    }
    if (st == FL_OK) {
        fl__err_clear(&c->err);
        *out = c->out.p;
        *out_len = c->out.len;
    }
    return st;
}
