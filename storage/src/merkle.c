/* RFC 9162 Merkle tree: hashing, proof generation over a subtree source, proof
 * verification, and an in-memory tree. See merkle_internal.h for the definitions. */

#include <string.h>

#include <sodium.h>

#include "merkle_internal.h"

/* ---- hashing ---- */

void fl__store_merkle_leaf(uint8_t out[32], const void *data, size_t len) {
    static const uint8_t prefix = 0x00;
    crypto_hash_sha256_state h;
    crypto_hash_sha256_init(&h);
    crypto_hash_sha256_update(&h, &prefix, 1);
    if (len)
        crypto_hash_sha256_update(&h, data, len);
    crypto_hash_sha256_final(&h, out);
}

void fl__store_merkle_node(uint8_t out[32], const uint8_t left[32], const uint8_t right[32]) {
    uint8_t buf[65];
    buf[0] = 0x01;
    memcpy(buf + 1, left, 32);
    memcpy(buf + 33, right, 32);
    crypto_hash_sha256(out, buf, sizeof(buf));
}

void fl__store_merkle_empty(uint8_t out[32]) {
    crypto_hash_sha256(out, NULL, 0);
}

/* Largest power of two strictly smaller than n (n >= 2). */
static uint64_t split_point(uint64_t n) {
    uint64_t k = 1;
    while (k < n - k) /* k * 2 < n without overflow */
        k <<= 1;
    return k;
}

static int is_pow2(uint64_t n) {
    return n && (n & (n - 1)) == 0; // GCOVR_EXCL_BR_LINE callers pass n >= 1
}

static unsigned log2_pow2(uint64_t n) {
    unsigned l = 0;
    while (n > 1) {
        n >>= 1;
        l++;
    }
    return l;
}

/* ---- subtree hashes and proofs ---- */

fl_status fl__store_merkle_range(const struct fl__store_merkle_src *src, uint64_t begin,
                                 uint64_t end, uint8_t out[32]) {
    if (!FL_ALWAYS(begin < end)) // GCOVR_EXCL_BR_LINE defensive: callers split non-empty ranges
        return FL_ERR_INTERNAL;
    uint64_t n = end - begin;
    if (is_pow2(n) && (begin & (n - 1)) == 0) {
        unsigned level = log2_pow2(n);
        return src->get(src->ctx, level, begin >> level, out);
    }
    /* Either not a power of two or not aligned: split as MTH does. Recursion depth is at
     * most 64 (the size halves or the range becomes aligned). */
    uint64_t k = split_point(n);
    uint8_t left[32], right[32];
    fl_status r = fl__store_merkle_range(src, begin, begin + k, left);
    if (r == FL_OK)
        r = fl__store_merkle_range(src, begin + k, end, right);
    if (r == FL_OK)
        fl__store_merkle_node(out, left, right);
    return r;
}

fl_status fl__store_merkle_root(const struct fl__store_merkle_src *src, uint64_t size,
                                uint8_t out[32]) {
    if (size == 0) {
        fl__store_merkle_empty(out);
        return FL_OK;
    }
    return fl__store_merkle_range(src, 0, size, out);
}

/* Appends one hash to a proof under construction. */
static fl_status proof_push(uint8_t (*out)[32], size_t cap, size_t *count, const uint8_t h[32]) {
    if (*count >= cap)
        return FL_ERR_RANGE;
    memcpy(out[*count], h, 32);
    (*count)++;
    return FL_OK;
}

/* PATH(m, D[begin:end]) of RFC 9162 2.1.3.1, with m relative to begin. */
static fl_status path(const struct fl__store_merkle_src *src, uint64_t m, uint64_t begin,
                      uint64_t end, uint8_t (*out)[32], size_t cap, size_t *count) {
    uint64_t n = end - begin;
    if (n <= 1)
        return FL_OK;
    uint64_t k = split_point(n);
    uint8_t sib[32];
    fl_status r;
    if (m < k) {
        r = path(src, m, begin, begin + k, out, cap, count);
        if (r == FL_OK)
            r = fl__store_merkle_range(src, begin + k, end, sib);
    } else {
        r = path(src, m - k, begin + k, end, out, cap, count);
        if (r == FL_OK)
            r = fl__store_merkle_range(src, begin, begin + k, sib);
    }
    return r == FL_OK ? proof_push(out, cap, count, sib) : r;
}

fl_status fl__store_merkle_inclusion(const struct fl__store_merkle_src *src, uint64_t index,
                                     uint64_t size, uint8_t (*out)[32], size_t cap, size_t *count) {
    *count = 0;
    if (index >= size)
        return FL_ERR_RANGE;
    return path(src, index, 0, size, out, cap, count);
}

/* SUBPROOF(m, D[begin:end], b) of RFC 9162 2.1.4.1, with m relative to begin. */
static fl_status subproof(const struct fl__store_merkle_src *src, uint64_t m, uint64_t begin,
                          uint64_t end, int b, uint8_t (*out)[32], size_t cap, size_t *count) {
    uint64_t n = end - begin;
    uint8_t h[32];
    fl_status r;
    if (m == n) {
        if (b)
            return FL_OK;
        r = fl__store_merkle_range(src, begin, end, h);
        return r == FL_OK ? proof_push(out, cap, count, h) : r;
    }
    uint64_t k = split_point(n);
    if (m <= k) {
        r = subproof(src, m, begin, begin + k, b, out, cap, count);
        if (r == FL_OK)
            r = fl__store_merkle_range(src, begin + k, end, h);
    } else {
        r = subproof(src, m - k, begin + k, end, 0, out, cap, count);
        if (r == FL_OK)
            r = fl__store_merkle_range(src, begin, begin + k, h);
    }
    return r == FL_OK ? proof_push(out, cap, count, h) : r;
}

fl_status fl__store_merkle_consistency(const struct fl__store_merkle_src *src, uint64_t m,
                                       uint64_t n, uint8_t (*out)[32], size_t cap, size_t *count) {
    *count = 0;
    if (m > n)
        return FL_ERR_RANGE;
    if (m == 0 || m == n)
        return FL_OK;
    return subproof(src, m, 0, n, 1, out, cap, count);
}

/* ---- verification (RFC 9162 2.1.3.2 and 2.1.4.2) ---- */

int fl__store_merkle_verify_inclusion(const uint8_t leaf_hash[32], uint64_t index, uint64_t size,
                                      const uint8_t (*proof)[32], size_t count,
                                      const uint8_t root[32]) {
    if (index >= size)
        return -1;
    uint64_t fn = index, sn = size - 1;
    uint8_t r[32];
    memcpy(r, leaf_hash, 32);
    for (size_t i = 0; i < count; i++) {
        if (sn == 0)
            return -1;
        if ((fn & 1) || fn == sn) {
            fl__store_merkle_node(r, proof[i], r);
            /* fn != 0 always holds (RFC 9162's guard): fn is odd or equals sn != 0 here,
             * and a nonzero number shifted right turns odd before it reaches 0 */
            while (!(fn & 1) && fn != 0) { // GCOVR_EXCL_BR_LINE
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            fl__store_merkle_node(r, r, proof[i]);
        }
        fn >>= 1;
        sn >>= 1;
    }
    if (sn != 0)
        return -1;
    return fl_memeq_ct(r, root, 32) == 0 ? 0 : -1;
}

int fl__store_merkle_verify_consistency(uint64_t m, uint64_t n, const uint8_t (*proof)[32],
                                        size_t count, const uint8_t root1[32],
                                        const uint8_t root2[32]) {
    if (m > n)
        return -1;
    if (m == n)
        return count == 0 && fl_memeq_ct(root1, root2, 32) == 0 ? 0 : -1;
    if (m == 0)
        return count == 0 ? 0 : -1;
    if (count == 0)
        return -1;
    /* When m is a power of two, the old root is itself the first node of the path. */
    const uint8_t *first = proof[0];
    size_t next = 1;
    if (is_pow2(m)) {
        first = root1;
        next = 0;
    }
    uint64_t fn = m - 1, sn = n - 1;
    while (fn & 1) {
        fn >>= 1;
        sn >>= 1;
    }
    uint8_t fr[32], sr[32];
    memcpy(fr, first, 32);
    memcpy(sr, first, 32);
    for (size_t i = next; i < count; i++) {
        if (sn == 0)
            return -1;
        if ((fn & 1) || fn == sn) {
            fl__store_merkle_node(fr, proof[i], fr);
            fl__store_merkle_node(sr, proof[i], sr);
            /* fn != 0 always holds (RFC 9162's guard): fn is odd or equals sn != 0 here,
             * and a nonzero number shifted right turns odd before it reaches 0 */
            while (!(fn & 1) && fn != 0) { // GCOVR_EXCL_BR_LINE
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            fl__store_merkle_node(sr, sr, proof[i]);
        }
        fn >>= 1;
        sn >>= 1;
    }
    if (sn != 0)
        return -1;
    int ok1 = fl_memeq_ct(fr, root1, 32) == 0;
    int ok2 = fl_memeq_ct(sr, root2, 32) == 0;
    return ok1 && ok2 ? 0 : -1;
}

/* ---- in-memory tree ---- */

void fl__store_merkle_mem_init(struct fl__store_merkle_mem *t, const fl_allocator *alloc) {
    memset(t, 0, sizeof(*t));
    t->alloc = alloc;
}

void fl__store_merkle_mem_free(struct fl__store_merkle_mem *t) {
    if (!t)
        return;
    for (int l = 0; l < 64; l++)
        fl__free(t->alloc, t->level[l], t->cap[l] * 32);
    memset(t->level, 0, sizeof(t->level));
    memset(t->cap, 0, sizeof(t->cap));
    t->size = 0;
}

/* Makes room for one more hash at level l (holding have hashes). */
static fl_status level_reserve(struct fl__store_merkle_mem *t, unsigned l, uint64_t have) {
    if (have < t->cap[l])
        return FL_OK;
    size_t ncap = t->cap[l] ? t->cap[l] * 2 : 64;
    /* unreachable: doubling a capacity that fits in memory cannot overflow */
    if (ncap <= t->cap[l] || fl__mul_overflows(ncap, 32)) // GCOVR_EXCL_BR_LINE
        return FL_ERR_NOMEM;
    uint8_t *p = fl__realloc(t->alloc, t->level[l], t->cap[l] * 32, ncap * 32);
    if (!p)
        return FL_ERR_NOMEM;
    t->level[l] = p;
    t->cap[l] = ncap;
    return FL_OK;
}

fl_status fl__store_merkle_mem_append(struct fl__store_merkle_mem *t, const uint8_t leaf[32]) {
    uint64_t i = t->size;
    if (i == UINT64_MAX >> 1)
        return FL_ERR_RANGE;
    /* Reserve every slot first so a failure leaves the tree unchanged. */
    unsigned l = 0;
    for (uint64_t j = i;; j >>= 1, l++) {
        if (level_reserve(t, l, j) != FL_OK)
            return FL_ERR_NOMEM;
        if (!(j & 1))
            break;
    }
    memcpy(t->level[0] + i * 32, leaf, 32);
    uint64_t j = i;
    l = 0;
    while (j & 1) {
        /* Node j at level l just became the right child of a complete parent. */
        fl__store_merkle_node(t->level[l + 1] + (j >> 1) * 32, t->level[l] + (j - 1) * 32,
                              t->level[l] + j * 32);
        j >>= 1;
        l++;
    }
    t->size = i + 1;
    return FL_OK;
}

static fl_status mem_get(void *ctx, unsigned level, uint64_t idx, uint8_t out[32]) {
    struct fl__store_merkle_mem *t = ctx;
    if (level >= 64 || idx >= (t->size >> level))
        return FL_ERR_INTERNAL;
    memcpy(out, t->level[level] + idx * 32, 32);
    return FL_OK;
}

struct fl__store_merkle_src fl__store_merkle_mem_src(struct fl__store_merkle_mem *t) {
    struct fl__store_merkle_src s = {mem_get, t};
    return s;
}
