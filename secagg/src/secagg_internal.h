#ifndef FLOTILLA_SECAGG_INTERNAL_H
#define FLOTILLA_SECAGG_INTERNAL_H

/* Internals shared by the secagg protocol files (fl__sa_ prefix, never exported). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto.h"
#include "fl_internal.h"
#include "flotilla/secagg.h"

/* ---- wire constants ---- */

#define FL__SA_MAGIC0 0xF1
#define FL__SA_MAGIC1 0x5A
#define FL__SA_VERSION 1
#define FL__SA_KEY_BYTES 32                      /* X25519 keys */
#define FL__SA_ADV_BASE_BYTES 64                 /* c_pk || s_pk */
#define FL__SA_ADV_ACTIVE_BYTES (64 + 32 + 64 + 64) /* + vk || cert || sig */
/* Device-certificate mode: the active advertisement + device_id, appended so that the v1
 * fields keep their offsets (c_pk 0, s_pk 32, vk 64, cert 96, sig 160, device_id 224). */
#define FL__SA_ADV_DEVICE_BYTES (FL__SA_ADV_ACTIVE_BYTES + FL_SECAGG_DEVICE_ID_BYTES)
#define FL__SA_ADV_DEVICE_OFF FL__SA_ADV_ACTIVE_BYTES
/* KEYS mode byte (body offset 13): 0 semi-honest, 1 active (v1 certificates), 2 active with
 * device certificates. A v1 parser refuses 2 (length or parameter mismatch). */
#define FL__SA_MODE_DEVICE 2
#define FL__SA_SHARE_PT_BYTES (4 + 4 + 2 * FL__SA_SHARE_Y_BYTES) /* from || to || ys || yb */
#define FL__SA_SHARE_CT_BYTES (FL__SA_SHARE_PT_BYTES + FL__SA_AEAD_TAG_BYTES)
#define FL__SA_COMMIT_BYTES 32                   /* SHA-256 commitment to b_u */
#define FL__SA_SIG_BYTES 64

/* Share kinds in UNMASK_SHARES. */
#define FL__SA_KIND_B 0 /* share of the self-mask seed b_u (peer survived) */
#define FL__SA_KIND_S 1 /* share of the masking secret key s_u (peer dropped) */
#define FL__SA_PAIR_SEED_BYTES 32 /* a revealed pairwise mask seed (UNMASK_SHARES) */
#define FL__SA_KEYS_FLAG_SEEDS 0x01u /* KEYS flags byte: reveal_pair_seeds */

/* Chunk of mask expansion, in elements (16 Ki x 4 bytes = 64 KiB stays in L2). */
#define FL__SA_MASK_CHUNK 16384

/* ---- params.c ---- */

/* Backend table for a public backend choice (DEFAULT = the build's choice), or NULL. */
const struct fl__sa_crypto *fl__sa_backend(fl_secagg_backend b);

/* Copies and validates *in into *out, resolving k and t; errors name the field. */
fl_status fl__sa_config_check(fl_secagg_config *out, const fl_secagg_config *in,
                              struct fl__err *err);

/* Bytes per element of a masked vector on the wire: ceil(b / 8). */
static inline size_t fl__sa_elem_bytes(uint32_t bits) { return (bits + 7u) / 8u; }

/* Mask reducing uint32 arithmetic (mod 2^32) to Z_{2^b}. */
static inline uint32_t fl__sa_bitmask(uint32_t bits) {
    return bits >= 32 ? 0xFFFFFFFFu : ((1u << bits) - 1u);
}

/* Bytes of one advertisement (ADVERTISE body, KEYS entry after the index) for a resolved
 * config: 64 semi-honest, 224 active, 256 active with device certificates. */
static inline size_t fl__sa_adv_bytes(const fl_secagg_config *cfg) {
    return !cfg->active ? FL__SA_ADV_BASE_BYTES
                        : cfg->device_certs ? FL__SA_ADV_DEVICE_BYTES : FL__SA_ADV_ACTIVE_BYTES;
}

/* The KEYS mode byte for a resolved config (FL__SA_MODE_DEVICE or cfg->active). */
static inline uint8_t fl__sa_mode_byte(const fl_secagg_config *cfg) {
    return cfg->active && cfg->device_certs ? FL__SA_MODE_DEVICE : (uint8_t)cfg->active;
}

/* The KEYS flags byte (the first byte after the mode byte) for a resolved config. */
static inline uint8_t fl__sa_keys_flags(const fl_secagg_config *cfg) {
    return cfg->reveal_pair_seeds ? FL__SA_KEYS_FLAG_SEEDS : 0;
}

/* Per-type size limit of a whole message (header included) for a resolved config. */
size_t fl__sa_msg_limit(const fl_secagg_config *cfg, fl_secagg_msg_type type);

/* ---- graph.c: Harary graph H(k, n) over a seeded permutation, or the complete graph ----
 * Client u's neighbours are numbered by slot 0..k-1. For the Harary graph slot j stands for
 * ring offset -(k/2)..-1, +1..+(k/2) (in that order) from u's ring position; for the
 * complete graph slot j is client j if j < u, else client j + 1. Messages list neighbours
 * in slot order, which makes duplicates detectable and encodings canonical. */
struct fl__sa_graph {
    uint32_t n;      /* clients */
    uint32_t k;      /* degree */
    int complete;    /* 1: k = n - 1, no permutation */
    uint32_t *perm;  /* (n) ring position -> client; NULL when complete */
    uint32_t *pos;   /* (n) client -> ring position; NULL when complete */
};

fl_status fl__sa_graph_init(struct fl__sa_graph *g, uint32_t n, uint32_t k,
                            const uint8_t seed[32], const struct fl__sa_crypto *crypto,
                            const fl_allocator *a);
void fl__sa_graph_free(struct fl__sa_graph *g, const fl_allocator *a);
/* The lookups below are inline: the server calls them ~10^5 times a round (every
 * neighbour of every client in each phase), where a call into graph.c cost more than
 * the lookup. */

/* Slot of v in u's neighbour list, or -1 if v is not a neighbour of u (or v == u). */
static inline int32_t fl__sa_graph_slot(const struct fl__sa_graph *g, uint32_t u, uint32_t v) {
    if (u >= g->n || v >= g->n || u == v)
        return -1;
    if (g->complete)
        return (int32_t)(v < u ? v : v - 1);
    uint32_t h = g->k / 2;
    /* Signed ring offset from u to v in (-n/2, n/2]. */
    uint32_t d = g->pos[v] + g->n - g->pos[u]; /* 1..2n-1; no division: hot path */
    if (d >= g->n)
        d -= g->n;
    if (d <= h)
        return (int32_t)(h + d - 1);         /* +1..+h -> slots h..k-1 */
    if (g->n - d <= h)
        return (int32_t)(h - (g->n - d));    /* -h..-1 -> slots 0..h-1 */
    return -1;
}

/* Neighbour of u at slot (slot < k). */
static inline uint32_t fl__sa_graph_neighbor(const struct fl__sa_graph *g, uint32_t u,
                                             uint32_t slot) {
    if (g->complete)
        return slot < u ? slot : slot + 1;
    uint32_t h = g->k / 2;
    uint32_t p = g->pos[u];
    uint32_t q = slot < h ? p + g->n - (h - slot) : p + (slot - h) + 1; /* < 2n */
    if (q >= g->n)
        q -= g->n;
    return g->perm[q];
}

/* Slot of u in the list of v = fl__sa_graph_neighbor(g, u, slot): fl__sa_graph_slot(g, v,
 * u) without the search. On the ring, offset +d from u is offset -d from v, and slots
 * j and k-1-j stand for opposite offsets (k is even). */
static inline uint32_t fl__sa_graph_mirror_slot(const struct fl__sa_graph *g, uint32_t u,
                                                uint32_t slot, uint32_t v) {
    if (g->complete)
        return u < v ? u : u - 1;
    return g->k - 1 - slot;
}

/* ---- mask.c: key derivation and mask expansion ---- */

/* HKDF-SHA256 of an X25519 agreement into a 32-byte key for the pair {u, v} of a round;
 * label is "mask" (pairwise mask seed) or "enc" (share encryption key). A non-zero context
 * (FL_SECAGG_CONTEXT_BYTES; NULL or all zero = none) is appended to the HKDF info. */
int fl__sa_derive_pair_key(uint8_t out[32], const struct fl__sa_crypto *crypto,
                           const char *label, const uint8_t sk[32], const uint8_t peer_pk[32],
                           uint64_t round_id, uint32_t u, uint32_t v, const uint8_t *context);

/* 1 if the config carries a context (any non-zero byte), else 0. */
int fl__sa_has_context(const fl_secagg_config *cfg);

/* acc[i] += sign * PRG(seed)[i] (mod 2^32) for i < dim; the PRG's 4-byte little-endian
 * words are the mask elements. Expands through scratch (4 * FL__SA_MASK_CHUNK bytes,
 * aligned as malloc's): in FL__SA_MASK_STREAM_CHUNK pieces through the table's streaming
 * PRG (its context at the end of those pieces in scratch), or in FL__SA_MASK_CHUNK pieces
 * with prg() in a table without it. What it wrote is wiped before returning. 0 or -1. */
int fl__sa_mask_apply(uint32_t *acc, size_t dim, const uint8_t seed[32], int sign,
                      const struct fl__sa_crypto *crypto, uint8_t *scratch);

/* Masks applied per pass over acc by fl__sa_mask_apply_many. */
#define FL__SA_MASK_FUSE 4

/* Chunk of the fused mask removal, in elements: FL__SA_MASK_FUSE keystream chunks plus the
 * accumulator's chunk stay in L1d (4 x 8 KiB + 8 KiB of a 48 KiB L1d). Drawn through the
 * table's streaming PRG (crypto.h prg_open/prg_next), which keeps the key schedule across
 * chunks; a table without it falls back to one prg() call per chunk. Measured in
 * docs/secagg.md ("Mask removal in L1 chunks"). */
#ifndef FL__SA_MASK_STREAM_CHUNK
#define FL__SA_MASK_STREAM_CHUNK 2048
#endif
_Static_assert(FL__SA_MASK_STREAM_CHUNK % 4 == 0, "mask chunks are whole AES blocks");

/* Scratch bytes of fl__sa_mask_apply_many / _range: the keystream chunks, then one PRG
 * stream context per source. */
#define FL__SA_MASK_RANGE_SCRATCH                                                             \
    ((size_t)FL__SA_MASK_FUSE * (4 * FL__SA_MASK_STREAM_CHUNK + FL__SA_PRG_STREAM_MAX))

/* acc[i] += sum_j signs[j] * PRG(seeds[j])[i] (mod 2^32) for j < m <= FL__SA_MASK_FUSE:
 * fl__sa_mask_apply for m masks with one pass over acc per chunk instead of m. scratch has
 * FL__SA_MASK_RANGE_SCRATCH bytes, aligned as malloc's. On success its keystream part is NOT
 * wiped (it is rewritten by the next call; the caller wipes it when it is done) and the
 * stream contexts are; on failure all of it that was written is wiped. 0 or -1. */
int fl__sa_mask_apply_many(uint32_t *acc, size_t dim, const uint8_t (*seeds)[32],
                           const int *signs, size_t m, const struct fl__sa_crypto *crypto,
                           uint8_t *scratch);

/* Adds `blocks` to the 128-bit big-endian counter in iv (the second half of a PRG seed):
 * the seed whose keystream starts `blocks` AES blocks further on. */
void fl__sa_ctr_add(uint8_t iv[16], uint64_t blocks);

/* fl__sa_mask_apply_many restricted to the elements lo <= i < hi of acc (acc is the whole
 * vector, indexed from 0): the keystream of each mask is taken from element lo on, so that
 * disjoint ranges applied by different threads add up to one fl__sa_mask_apply_many over
 * the union. lo must be a multiple of 4 (one AES block = 4 elements); -1 otherwise. Same
 * scratch rule as fl__sa_mask_apply_many. 0 or -1. */
int fl__sa_mask_apply_range(uint32_t *acc, size_t lo, size_t hi, const uint8_t (*seeds)[32],
                            const int *signs, size_t m, const struct fl__sa_crypto *crypto,
                            uint8_t *scratch);

/* Block of fl__sa_mask_apply_blocked, in elements (256 KiB of accumulator: in L2 on current
 * x86 and Arm cores, so the groups of masks after the first find it there and not in L3 or
 * DRAM). A multiple of 16. */
#ifndef FL__SA_MASK_BLOCK
#define FL__SA_MASK_BLOCK 65536
#endif
_Static_assert(FL__SA_MASK_BLOCK % 16 == 0, "mask blocks are whole AES blocks");

/* Any number m of masks on elements lo <= i < hi of acc: for each FL__SA_MASK_BLOCK block
 * of the range, fl__sa_mask_apply_range for each group of FL__SA_MASK_FUSE seeds. Each
 * accumulator block is read from memory once instead of once per group. stop (may be NULL)
 * is asked before each group; when it returns non-zero the call returns 0 at once with the
 * range partly masked (the caller abandons the sum). Scratch as fl__sa_mask_apply_range.
 * 0 or -1. */
int fl__sa_mask_apply_blocked(uint32_t *acc, size_t lo, size_t hi, const uint8_t (*seeds)[32],
                              const int *signs, size_t m, const struct fl__sa_crypto *crypto,
                              uint8_t *scratch, int (*stop)(const void *), const void *arg);

/* SHA-256 commitment to the self-mask seed: H("flotilla-secagg-b-v1" || round || u || b). */
int fl__sa_commit_b(uint8_t out[32], const struct fl__sa_crypto *crypto, uint64_t round_id,
                    uint32_t u, const uint8_t b[32]);

/* Signed statements (active mode). Fill buf (size given) and return the length used (0 if
 * cap is too small). The advertisement statement ends with the context when it is set
 * (context NULL or all zero = none). */
#define FL__SA_STMT_BYTES 160
size_t fl__sa_adv_statement(uint8_t *buf, size_t cap, uint64_t round_id, uint32_t u,
                            const uint8_t c_pk[32], const uint8_t s_pk[32],
                            const uint8_t *context);
size_t fl__sa_cert_statement(uint8_t *buf, size_t cap, uint32_t u, const uint8_t vk[32]);
/* Device certificate (v2): "flotilla-secagg-cert-v2" || device_id || vk (87 bytes). */
size_t fl__sa_cert_statement_device(uint8_t *buf, size_t cap,
                                    const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
                                    const uint8_t vk[32]);
/* The survivor-set statement: "flotilla-secagg-u3-v1" || round || n || bitmap. Allocated
 * with a; *out_len set. NULL on failure. */
uint8_t *fl__sa_u3_statement(size_t *out_len, const fl_allocator *a, uint64_t round_id,
                             uint32_t n, const uint8_t *bitmap, size_t bitmap_len);

/* ---- normproof.c: norm-bounded inputs (docs/secagg.md "Norm proofs") ----
 * With norm_bits set, a client's masked vector carries fl__sa_norm_limbs() extra words (the
 * limbs of its commitment randomness) after the d inputs, and its MASKED_INPUT message
 * carries a proof of fl__sa_norm_proof_bytes() after the masked words. */

#define FL__SA_NORM_MAX_BITS (1u << 20) /* d * norm_bits + bound bits: 128 MiB of proof */

/* Validates the norm fields of an otherwise checked config. */
fl_status fl__sa_norm_config_check(const fl_secagg_config *c, struct fl__err *err);
size_t fl__sa_norm_limbs(const fl_secagg_config *c);       /* 0 when off */
size_t fl__sa_vec_len(const fl_secagg_config *c);          /* d + limbs: masked words */
size_t fl__sa_norm_proof_bytes(const fl_secagg_config *c); /* 0 when off */
/* Proves that x (d words < 2^b) meets the config's bounds for (round, index); writes the
 * proof (fl__sa_norm_proof_bytes) and the limbs to append to the input. FL_ERR_RANGE if x
 * does not meet them; FL_ERR_NOMEM; FL_ERR_CRYPTO. Secrets are wiped. */
fl_status fl__sa_norm_prove(uint8_t *proof, uint32_t *limbs, const fl_secagg_config *c,
                            uint64_t round_id, uint32_t index, const uint32_t *x,
                            const fl_allocator *a, struct fl__err *err);
/* FL_OK if the proof of client index verifies; FL_ERR_FORMAT (length, encodings),
 * FL_ERR_CRYPTO (does not verify), FL_ERR_NOMEM. */
fl_status fl__sa_norm_verify(const fl_secagg_config *c, uint64_t round_id, uint32_t index,
                             const uint8_t *proof, size_t len, const fl_allocator *a,
                             struct fl__err *err);
/* acc += the proof's commitment V (acc starts as 32 zero bytes, the identity). 0 or -1. */
int fl__sa_norm_fold(uint8_t acc[32], const uint8_t *proof);
/* Checks the unmasked sum (fl__sa_vec_len words) against the folded commitments, in two
 * steps for parallel callers: out = the part of prod_j G_j^{s_j} over lo <= j < hi (and
 * j < d; 0 or -1), then the check with the parts folded together: FL_OK or FL_ERR_PROTOCOL
 * (FL_ERR_CRYPTO if a group operation fails). */
int fl__sa_norm_link_part(uint8_t out[32], const fl_secagg_config *c, const uint32_t *sum,
                          size_t lo, size_t hi);
fl_status fl__sa_norm_link_check(const fl_secagg_config *c, const uint32_t *sum,
                                 const uint8_t part[32], const uint8_t vsum[32],
                                 struct fl__err *err);

/* ---- server.c ---- */

/* Replaces the server's crypto table (fault-injection tests wrap the real one). The table
 * must outlive the handle; secrets made with the old table stay valid only if the new one
 * computes the same functions. */
void fl__sa_server_set_crypto(fl_secagg_server *srv, const struct fl__sa_crypto *crypto);

/* ---- x25519_check.c ---- */

/* 1 if pk (an X25519 public key as on the wire) is a point of small order on curve25519 or
 * its twist in any encoding X25519 accepts (bit 255 ignored, u and u + p), so that every
 * agreement with it gives the all-zero secret; else 0. Public data: not constant time. */
int fl__sa_x25519_is_small_order(const uint8_t pk[32]);

/* ---- msg.c: wire helpers ----
 * Header: magic(2) version(1) type(1) round_id(8, LE) client(4, LE) body_len(4, LE). */

struct fl__sa_reader {
    const uint8_t *p; /* next unread byte */
    size_t left;      /* bytes left */
};

void fl__sa_put_header(uint8_t *p, fl_secagg_msg_type type, uint64_t round_id,
                       uint32_t client, uint32_t body_len);

/* Parses and checks the header of msg against the expected type, round and client, and
 * the size limit; on success r covers the body. Returns FL_OK or FL_ERR_FORMAT /
 * FL_ERR_TOO_LARGE / FL_ERR_STATE / FL_ERR_PROTOCOL with a message in err. expect_client
 * UINT32_MAX skips the client check. */
fl_status fl__sa_open_msg(struct fl__sa_reader *r, struct fl__err *err, const uint8_t *msg,
                          size_t len, fl_secagg_msg_type expect_type, uint64_t round_id,
                          uint32_t expect_client, size_t limit);

/* Bounds-checked reads; return 0 on success, -1 if fewer bytes are left. */
int fl__sa_read_u32(struct fl__sa_reader *r, uint32_t *v);
int fl__sa_read_u8(struct fl__sa_reader *r, uint8_t *v);
int fl__sa_read_bytes(struct fl__sa_reader *r, const uint8_t **p, size_t n);

/* A growable byte buffer for outgoing messages (owned by a handle). */
struct fl__sa_buf {
    uint8_t *p;   /* data */
    size_t len;   /* bytes used */
    size_t cap;   /* bytes allocated */
};
/* Ensures cap >= n for a fresh message; the previous contents are discarded (wiped if the
 * buffer is replaced). 0 or -1 on NOMEM (the old buffer is kept). */
int fl__sa_buf_reserve(struct fl__sa_buf *b, const fl_allocator *a, size_t n);
/* Wipes and frees. */
void fl__sa_buf_free(struct fl__sa_buf *b, const fl_allocator *a);

/* acc[i] += (or -=) the i-th little-endian u32 of p, for i < n. Vectorizable: restrict
 * pointers, memcpy loads on little-endian hosts. */
void fl__sa_add_u32le(uint32_t *restrict acc, const uint8_t *restrict p, size_t n);
void fl__sa_sub_u32le(uint32_t *restrict acc, const uint8_t *restrict p, size_t n);

/* Bitmap helpers (bit i of byte i / 8, LSB first). */
static inline int fl__sa_bit_get(const uint8_t *bm, uint32_t i) {
    return (bm[i >> 3] >> (i & 7)) & 1;
}
static inline void fl__sa_bit_set(uint8_t *bm, uint32_t i) {
    bm[i >> 3] |= (uint8_t)(1u << (i & 7));
}
static inline size_t fl__sa_bitmap_bytes(uint32_t n) { return ((size_t)n + 7u) / 8u; }

/* The work of srv's final advance, set when it begins (0 before): secrets rebuilt, pairwise
 * seeds derived (one X25519 agreement and HKDF each) and masks expanded over the sum (self
 * masks plus those pairwise seeds). For bench_secagg's primitive floor. */
void fl__sa_server_unmask_work(const fl_secagg_server *srv, uint64_t *secrets,
                               uint64_t *agreements, uint64_t *masks);

#endif /* FLOTILLA_SECAGG_INTERNAL_H */
