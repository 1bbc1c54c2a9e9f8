/* libFuzzer target for the audit log's Merkle proof verifiers (RFC 9162 inclusion and
 * consistency proofs, fl_store_audit_verify_inclusion / _consistency), the part of the
 * offline verifier an auditor feeds with proofs fetched from the network.
 *
 * Input: byte 0 is the mode, bytes 1..8 and 9..16 are two little-endian 64-bit numbers a and
 * b, the rest is a sequence of 32-byte hashes (at most 80 are used).
 *   mode & 1   0: inclusion proof, 1: consistency proof
 *   mode & 2   0: raw: a and b are the index/size (or m/n) as given, negative and huge ones
 *                 included; the first hash is the leaf hash (inclusion) or old root, the
 *                 second the (new) root, the rest the proof. Only the sanitizers and the
 *                 return codes are checked.
 *              1: real tree: a deterministic in-memory tree of 300 leaves; n = b % 300 + 1 and
 *                 index = a % n (or m = a % (n + 1)). The proof tried is the genuine proof
 *                 XOR the input hashes (an all-zero input is the genuine proof), with as
 *                 many hashes as the input has. Oracle: it verifies if and only if it is
 *                 the genuine proof, byte for byte and of the same length.
 *   mode & 4   (real tree) one byte of the expected root is flipped: nothing verifies. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "flotilla/storage.h"
#include "merkle_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

#define TREE_LEAVES 300
#define MAX_HASHES 80

static struct fl__store_merkle_mem g_tree;
static uint8_t g_leaf[TREE_LEAVES][32];
static int g_ready;

static void setup(void) {
    fl__store_merkle_mem_init(&g_tree, NULL);
    for (int i = 0; i < TREE_LEAVES; i++) {
        char entry[64];
        int len = snprintf(entry, sizeof(entry), "{\"seq\":%d,\"type\":\"fuzz\"}", i);
        fl_store_audit_leaf_hash(g_leaf[i], entry, (size_t)len);
        CHECK(fl__store_merkle_mem_append(&g_tree, g_leaf[i]) == FL_OK);
    }
    g_ready = 1;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void fuzz_raw(int consistency, uint64_t a, uint64_t b, const uint8_t (*h)[32],
                     size_t nh) {
    if (nh < 2)
        return;
    const uint8_t(*proof)[32] = nh > 2 ? h + 2 : NULL;
    size_t count = nh - 2;
    fl_status r;
    if (!consistency) {
        r = fl_store_audit_verify_inclusion(h[0], (int64_t)a, (int64_t)b, proof, count, h[1]);
        (void)fl__store_merkle_verify_inclusion(h[0], a, b, proof, count, h[1]);
    } else {
        r = fl_store_audit_verify_consistency((int64_t)a, (int64_t)b, proof, count, h[0], h[1]);
        (void)fl__store_merkle_verify_consistency(a, b, proof, count, h[0], h[1]);
    }
    CHECK(r == FL_OK || r == FL_ERR_CRYPTO || r == FL_ERR_MISUSE);
    CHECK((r == FL_ERR_MISUSE) == ((int64_t)a < 0 || (int64_t)b < 0));
    if (r == FL_OK && !consistency)
        CHECK((int64_t)a < (int64_t)b);
    if (r == FL_OK && consistency)
        CHECK((int64_t)a <= (int64_t)b);
}

static void fuzz_tree(int consistency, int flip, uint64_t a, uint64_t b,
                      const uint8_t (*h)[32], size_t nh) {
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&g_tree);
    uint64_t n = b % TREE_LEAVES + 1;
    uint64_t m = consistency ? a % (n + 1) : a % n; /* m: old size, or the leaf index */
    uint8_t genuine[FL__MERKLE_MAX_PROOF][32];
    size_t gcount = 0;
    fl_status r;
    if (!consistency)
        r = fl__store_merkle_inclusion(&src, m, n, genuine, FL__MERKLE_MAX_PROOF, &gcount);
    else
        r = fl__store_merkle_consistency(&src, m, n, genuine, FL__MERKLE_MAX_PROOF, &gcount);
    CHECK(r == FL_OK);
    uint8_t root_old[32], root[32];
    CHECK(fl__store_merkle_root(&src, m, root_old) == FL_OK);
    CHECK(fl__store_merkle_root(&src, n, root) == FL_OK);
    uint8_t proof[MAX_HASHES][32];
    int same = nh == gcount;
    for (size_t i = 0; i < nh; i++) {
        for (int j = 0; j < 32; j++) {
            proof[i][j] = (uint8_t)(h[i][j] ^ (i < gcount ? genuine[i][j] : 0));
            if (h[i][j] != 0)
                same = 0;
        }
    }
    if (flip) {
        root[(a >> 32) % 32] ^= (uint8_t)(1u << ((a >> 40) % 8));
        same = 0;
    }
    const uint8_t(*pp)[32] = nh ? (const uint8_t(*)[32])proof : NULL;
    if (!consistency) {
        r = fl_store_audit_verify_inclusion(g_leaf[m], (int64_t)m, (int64_t)n, pp, nh, root);
        /* The genuine proof always verifies against the true root. */
        if (!flip)
            CHECK(fl_store_audit_verify_inclusion(g_leaf[m], (int64_t)m, (int64_t)n,
                                                  (const uint8_t(*)[32])genuine, gcount,
                                                  root) == FL_OK);
    } else {
        r = fl_store_audit_verify_consistency((int64_t)m, (int64_t)n, pp, nh, root_old, root);
        if (!flip)
            CHECK(fl_store_audit_verify_consistency((int64_t)m, (int64_t)n,
                                                    (const uint8_t(*)[32])genuine, gcount,
                                                    root_old, root) == FL_OK);
    }
    CHECK(r == FL_OK || r == FL_ERR_CRYPTO);
    if (consistency && m == 0 && !flip) {
        /* Size 0 is a prefix of anything: only the empty proof is asked for. */
        CHECK((r == FL_OK) == (nh == 0));
        return;
    }
    if (consistency && m == 0)
        return; /* the empty tree's proof ignores the new root, flipped or not */
    CHECK((r == FL_OK) == same);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 17)
        return 0;
    if (!g_ready)
        setup();
    int mode = data[0];
    uint64_t a = le64(data + 1), b = le64(data + 9);
    size_t nh = (size - 17) / 32;
    if (nh > MAX_HASHES)
        nh = MAX_HASHES;
    const uint8_t(*h)[32] = (const uint8_t(*)[32])(data + 17);
    if (mode & 2)
        fuzz_tree(mode & 1, (mode & 4) != 0, a, b, h, nh);
    else
        fuzz_raw(mode & 1, a, b, h, nh);
    return 0;
}
