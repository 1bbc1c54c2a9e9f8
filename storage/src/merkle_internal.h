#ifndef FLOTILLA_MERKLE_INTERNAL_H
#define FLOTILLA_MERKLE_INTERNAL_H

/* The audit log's Merkle tree, as specified by RFC 9162 section 2.1 (same tree as RFC 6962):
 *
 *   leaf hash  MTH({d}) = SHA-256(0x00 || d)
 *   node hash  MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])), k the largest power
 *              of two smaller than n
 *   empty tree MTH({}) = SHA-256("")
 *
 * Proof generation reads hashes of complete, aligned subtrees from a source: node (level,
 * idx) is MTH(D[idx * 2^level : (idx + 1) * 2^level]). The store keeps those in SQLite
 * (audit_tree), the offline verifier in memory (struct fl__store_merkle_mem). Every subtree
 * the RFC's recursions need is either such a node or splits into O(log n) of them, so an
 * inclusion or consistency proof costs O(log^2 n) lookups at worst and usually O(log n).
 * SHA-256 is libsodium's. Internal to the storage component (fl__store_merkle_ prefix). */

#include <stddef.h>
#include <stdint.h>

#include "fl_internal.h"

#define FL__MERKLE_HASH_BYTES 32
/* Longest inclusion or consistency proof for any tree of up to 2^63 leaves. */
#define FL__MERKLE_MAX_PROOF 64

/* Leaf hash of len bytes at data (data may be NULL when len is 0). */
void fl__store_merkle_leaf(uint8_t out[32], const void *data, size_t len);
/* Interior node hash of two children. out may alias left or right. */
void fl__store_merkle_node(uint8_t out[32], const uint8_t left[32], const uint8_t right[32]);
/* Root of the empty tree, SHA-256 of no bytes. */
void fl__store_merkle_empty(uint8_t out[32]);

/* Source of complete subtree hashes. get returns FL_OK and the hash, or an error (which the
 * proof functions pass through unchanged). */
struct fl__store_merkle_src {
    fl_status (*get)(void *ctx, unsigned level, uint64_t idx, uint8_t out[32]);
    void *ctx;
};

/* MTH(D[begin:end]) for begin < end. */
fl_status fl__store_merkle_range(const struct fl__store_merkle_src *src, uint64_t begin,
                                 uint64_t end, uint8_t out[32]);
/* Root of the first size leaves (size 0: the empty tree). */
fl_status fl__store_merkle_root(const struct fl__store_merkle_src *src, uint64_t size,
                                uint8_t out[32]);
/* RFC 9162 2.1.3.1 PATH(index, D[size]) into out[0..*count), leaf side first; needs
 * index < size. FL_ERR_RANGE if index >= size or cap is too small. */
fl_status fl__store_merkle_inclusion(const struct fl__store_merkle_src *src, uint64_t index,
                                     uint64_t size, uint8_t (*out)[32], size_t cap, size_t *count);
/* RFC 9162 2.1.4.1 PROOF(m, D[n]) into out[0..*count); empty when m == 0 or m == n.
 * FL_ERR_RANGE if m > n or cap is too small. */
fl_status fl__store_merkle_consistency(const struct fl__store_merkle_src *src, uint64_t m,
                                       uint64_t n, uint8_t (*out)[32], size_t cap, size_t *count);

/* RFC 9162 2.1.3.2: 0 if proof shows that leaf_hash is leaf index of the tree of size
 * leaves whose root is root, -1 otherwise. */
int fl__store_merkle_verify_inclusion(const uint8_t leaf_hash[32], uint64_t index, uint64_t size,
                                      const uint8_t (*proof)[32], size_t count,
                                      const uint8_t root[32]);
/* RFC 9162 2.1.4.2: 0 if proof shows that the tree of size m with root1 is a prefix of the
 * tree of size n with root2, -1 otherwise. m == 0 is consistent with anything (empty proof);
 * m == n needs an empty proof and equal roots. */
int fl__store_merkle_verify_consistency(uint64_t m, uint64_t n, const uint8_t (*proof)[32],
                                        size_t count, const uint8_t root1[32],
                                        const uint8_t root2[32]);

/* ---- in-memory tree ----
 * Keeps every complete subtree hash (about 2 hashes per leaf), so it is a source for the
 * proof functions above. Used by the offline bundle verifier and by tests. */
struct fl__store_merkle_mem {
    const fl_allocator *alloc; /* allocator for the level arrays (not owned) */
    uint64_t size;             /* leaves appended */
    uint8_t *level[64];        /* level[l]: (size >> l) hashes of 32 bytes */
    size_t cap[64];            /* capacity of level[l], in hashes */
};

void fl__store_merkle_mem_init(struct fl__store_merkle_mem *t, const fl_allocator *alloc);
void fl__store_merkle_mem_free(struct fl__store_merkle_mem *t);
/* Appends one leaf hash (not data). FL_ERR_NOMEM leaves the tree unchanged. */
fl_status fl__store_merkle_mem_append(struct fl__store_merkle_mem *t, const uint8_t leaf[32]);
/* The tree as a proof source. */
struct fl__store_merkle_src fl__store_merkle_mem_src(struct fl__store_merkle_mem *t);

#endif /* FLOTILLA_MERKLE_INTERNAL_H */
