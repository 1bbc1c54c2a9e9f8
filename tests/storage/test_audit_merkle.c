/* RFC 9162 Merkle tree: our proof generator reproduces the Certificate Transparency test
 * vectors (tests/vectors/audit/merkle_rfc9162.txt) and our verifier accepts them and
 * rejects systematic corruptions; then an exhaustive cross-check against a naive MTH for
 * every (index, size) and (m, n) up to 70 leaves. */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "fl_test.h"
#include "merkle_internal.h"

#define MAXV 64

struct vec_proof {
    uint64_t a, b; /* index and size, or m and n */
    size_t n;      /* hashes */
    uint8_t h[8][32];
};

static struct {
    uint8_t leaf[16][32];
    size_t leaf_len[16];
    size_t n_leaves;
    uint8_t root[16][32]; /* root[s] for size s */
    uint8_t empty[32];
    struct vec_proof incl[MAXV], cons[MAXV];
    size_t n_incl, n_cons;
} V;

static int unhex(uint8_t *out, size_t cap, const char *s, size_t n) {
    if (n % 2 || n / 2 > cap)
        return -1;
    size_t bin = 0;
    return sodium_hex2bin(out, cap, s, n, NULL, &bin, NULL) == 0 ? (int)bin : -1;
}

static void parse_proof(struct vec_proof *p, const char *list) {
    p->n = 0;
    if (strcmp(list, "-") == 0)
        return;
    const char *s = list;
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        assert_int_equal(unhex(p->h[p->n++], 32, s, n), 32);
        s += n + (comma ? 1 : 0);
    }
}

static void load_vectors(void) {
    char path[512], line[2048];
    snprintf(path, sizeof(path), "%s/tests/vectors/audit/merkle_rfc9162.txt", FL_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    memset(&V, 0, sizeof(V));
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char kind[32], a[1024], b[64], c[1024];
        unsigned long long x, y;
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (sscanf(line, "leaf %1023s", a) == 1) {
            uint8_t data[64];
            int n = strcmp(a, "-") == 0 ? 0 : unhex(data, sizeof(data), a, strlen(a));
            assert_true(n >= 0);
            V.leaf_len[V.n_leaves] = (size_t)n;
            fl__store_merkle_leaf(V.leaf[V.n_leaves++], data, (size_t)n);
        } else if (sscanf(line, "root %llu %1023s", &x, a) == 2) {
            assert_int_equal(unhex(V.root[x], 32, a, strlen(a)), 32);
        } else if (sscanf(line, "empty %1023s", a) == 1) {
            assert_int_equal(unhex(V.empty, 32, a, strlen(a)), 32);
        } else if (sscanf(line, "%31s %llu %llu %1023s", kind, &x, &y, c) == 4) {
            struct vec_proof *p =
                strcmp(kind, "inclusion") == 0 ? &V.incl[V.n_incl++] : &V.cons[V.n_cons++];
            assert_true(strcmp(kind, "inclusion") == 0 || strcmp(kind, "consistency") == 0);
            p->a = x;
            p->b = y;
            parse_proof(p, c);
        } else {
            fail_msg("bad vector line: %s", line);
        }
        (void)b;
    }
    fclose(f);
    assert_int_equal(V.n_leaves, 8);
    assert_int_equal(V.n_incl, 5);
    assert_int_equal(V.n_cons, 5);
}

static void build(struct fl__store_merkle_mem *t, size_t n) {
    fl__store_merkle_mem_init(t, NULL);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(fl__store_merkle_mem_append(t, V.leaf[i]), FL_OK);
}

static void test_roots(void **state) {
    (void)state;
    load_vectors();
    uint8_t r[32];
    fl__store_merkle_empty(r);
    assert_memory_equal(r, V.empty, 32);
    struct fl__store_merkle_mem t;
    build(&t, 8);
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    assert_int_equal(fl__store_merkle_root(&src, 0, r), FL_OK);
    assert_memory_equal(r, V.empty, 32);
    for (uint64_t s = 1; s <= 8; s++) {
        assert_int_equal(fl__store_merkle_root(&src, s, r), FL_OK);
        assert_memory_equal(r, V.root[s], 32);
    }
    fl__store_merkle_mem_free(&t);
}

/* Verifies p and checks that the usual corruptions are all rejected. */
static void inclusion_probes(const struct vec_proof *p, const uint8_t leaf[32],
                             const uint8_t root[32]) {
    uint8_t(*h)[32] = (uint8_t(*)[32])p->h;
    uint8_t big[10][32], junk[32];
    memset(junk, 0xab, 32);
    assert_int_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b, h, p->n, root), 0);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a - 1, p->b, h, p->n, root), 0);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a + 1, p->b, h, p->n, root), 0);
    if (p->b > 1)
        assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a ^ 2, p->b, h, p->n, root),
                             0);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b * 2, h, p->n, root), 0);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b / 2, h, p->n, root), 0);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(junk, p->a, p->b, h, p->n, root), 0);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b, h, p->n, V.empty), 0);
    /* Trailing and leading extra hashes. */
    memcpy(big, h, p->n * 32);
    memcpy(big[p->n], root, 32);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b, big, p->n + 1, root),
                         0);
    memcpy(big[0], root, 32);
    memcpy(big[1], h, p->n * 32);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b, big, p->n + 1, root),
                         0);
    for (size_t i = 0; i < p->n; i++) {
        memcpy(big, h, p->n * 32);
        big[i][0] ^= 8;
        assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b, big, p->n, root),
                             0);
    }
    if (p->n > 0)
        assert_int_not_equal(fl__store_merkle_verify_inclusion(leaf, p->a, p->b, h, p->n - 1, root),
                             0);
}

static void test_inclusion_vectors(void **state) {
    (void)state;
    load_vectors();
    struct fl__store_merkle_mem t;
    build(&t, 8);
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    for (size_t k = 0; k < V.n_incl; k++) {
        const struct vec_proof *p = &V.incl[k];
        uint8_t got[FL__MERKLE_MAX_PROOF][32];
        size_t n = 0;
        assert_int_equal(fl__store_merkle_inclusion(&src, p->a, p->b, got, 64, &n), FL_OK);
        assert_int_equal(n, p->n);
        assert_memory_equal(got, p->h, n * 32);
        inclusion_probes(p, V.leaf[p->a], V.root[p->b]);
    }
    /* Index outside the tree, and a proof buffer too small. */
    uint8_t got[2][32];
    size_t n = 9;
    assert_int_equal(fl__store_merkle_inclusion(&src, 8, 8, got, 2, &n), FL_ERR_RANGE);
    assert_int_equal(fl__store_merkle_inclusion(&src, 0, 8, got, 2, &n), FL_ERR_RANGE);
    assert_int_not_equal(fl__store_merkle_verify_inclusion(V.leaf[0], 0, 0, got, 0, V.empty), 0);
    fl__store_merkle_mem_free(&t);
}

static void test_consistency_vectors(void **state) {
    (void)state;
    load_vectors();
    struct fl__store_merkle_mem t;
    build(&t, 8);
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    for (size_t k = 0; k < V.n_cons; k++) {
        const struct vec_proof *p = &V.cons[k];
        uint8_t(*h)[32] = (uint8_t(*)[32])p->h;
        const uint8_t *r1 = V.root[p->a], *r2 = V.root[p->b];
        uint8_t got[FL__MERKLE_MAX_PROOF][32], big[10][32];
        size_t n = 0;
        assert_int_equal(fl__store_merkle_consistency(&src, p->a, p->b, got, 64, &n), FL_OK);
        assert_int_equal(n, p->n);
        assert_memory_equal(got, p->h, n * 32);
        assert_int_equal(fl__store_merkle_verify_consistency(p->a, p->b, h, p->n, r1, r2), 0);
        if (p->n == 0)
            continue;
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a - 1, p->b, h, p->n, r1, r2),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a + 1, p->b, h, p->n, r1, r2),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a ^ 2, p->b, h, p->n, r1, r2),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b * 2, h, p->n, r1, r2),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b / 2, h, p->n, r1, r2),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, h, p->n, V.empty, r2),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, h, p->n, r1, V.empty),
                             0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, h, p->n, r2, r1), 0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, h, 0, r1, r2), 0);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, h, p->n - 1, r1, r2),
                             0);
        memcpy(big, h, p->n * 32);
        memcpy(big[p->n], r1, 32);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, big, p->n + 1, r1, r2),
                             0);
        memcpy(big[0], r2, 32);
        memcpy(big[1], h, p->n * 32);
        assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, big, p->n + 1, r1, r2),
                             0);
        for (size_t i = 0; i < p->n; i++) {
            memcpy(big, h, p->n * 32);
            big[i][0] ^= 16;
            assert_int_not_equal(fl__store_merkle_verify_consistency(p->a, p->b, big, p->n, r1, r2),
                                 0);
        }
    }
    /* Trivial cases (as in the CT tests): size 0 is consistent with anything, equal sizes
     * need equal roots and an empty proof, and time does not run backwards. */
    uint8_t one[1][32];
    memset(one, 0, sizeof(one));
    assert_int_equal(fl__store_merkle_verify_consistency(0, 0, NULL, 0, V.root[1], V.root[1]), 0);
    assert_int_equal(fl__store_merkle_verify_consistency(0, 1, NULL, 0, V.root[1], V.root[2]), 0);
    assert_int_equal(fl__store_merkle_verify_consistency(1, 1, NULL, 0, V.root[2], V.root[2]), 0);
    assert_int_not_equal(fl__store_merkle_verify_consistency(1, 1, NULL, 0, V.root[1], V.root[2]),
                         0);
    assert_int_not_equal(fl__store_merkle_verify_consistency(1, 0, NULL, 0, V.root[1], V.root[2]),
                         0);
    assert_int_not_equal(fl__store_merkle_verify_consistency(2, 1, NULL, 0, V.root[1], V.root[2]),
                         0);
    assert_int_not_equal(fl__store_merkle_verify_consistency(1, 2, NULL, 0, V.root[1], V.root[2]),
                         0);
    assert_int_not_equal(fl__store_merkle_verify_consistency(0, 1, one, 1, V.empty, V.empty), 0);
    assert_int_not_equal(fl__store_merkle_verify_consistency(1, 1, one, 1, V.empty, V.empty), 0);
    fl__store_merkle_mem_free(&t);
}

/* Naive MTH straight from the RFC's definition, over leaf hashes. */
static void naive_mth(uint8_t out[32], uint8_t (*leaves)[32], size_t n) {
    if (n == 1) {
        memcpy(out, leaves[0], 32);
        return;
    }
    size_t k = 1;
    while (k * 2 < n)
        k *= 2;
    uint8_t l[32], r[32];
    naive_mth(l, leaves, k);
    naive_mth(r, leaves + k, n - k);
    fl__store_merkle_node(out, l, r);
}

static void test_exhaustive_small_trees(void **state) {
    (void)state;
    enum { N = 70 };
    static uint8_t leaves[N][32];
    uint8_t roots[N + 1][32];
    struct fl__store_merkle_mem t;
    fl__store_merkle_mem_init(&t, NULL);
    for (size_t i = 0; i < N; i++) {
        uint8_t data[8];
        memcpy(data, &i, sizeof(data) < sizeof(i) ? sizeof(data) : sizeof(i));
        fl__store_merkle_leaf(leaves[i], data, (size_t)(i % 9));
        assert_int_equal(fl__store_merkle_mem_append(&t, leaves[i]), FL_OK);
        naive_mth(roots[i + 1], leaves, i + 1);
    }
    fl__store_merkle_empty(roots[0]);
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    for (uint64_t n = 0; n <= N; n++) {
        uint8_t r[32], proof[FL__MERKLE_MAX_PROOF][32];
        size_t np = 0;
        assert_int_equal(fl__store_merkle_root(&src, n, r), FL_OK);
        assert_memory_equal(r, roots[n], 32);
        for (uint64_t i = 0; i < n; i++) {
            assert_int_equal(fl__store_merkle_inclusion(&src, i, n, proof, 64, &np), FL_OK);
            assert_int_equal(
                fl__store_merkle_verify_inclusion(leaves[i], i, n, proof, np, roots[n]), 0);
            if (n > 1)
                assert_int_not_equal(fl__store_merkle_verify_inclusion(leaves[i], (i + 1) % n, n,
                                                                       proof, np, roots[n]),
                                     0);
        }
        for (uint64_t m = 0; m <= n; m++) {
            assert_int_equal(fl__store_merkle_consistency(&src, m, n, proof, 64, &np), FL_OK);
            assert_int_equal(
                fl__store_merkle_verify_consistency(m, n, proof, np, roots[m], roots[n]), 0);
            if (m > 0 && m < n)
                assert_int_not_equal(
                    fl__store_merkle_verify_consistency(m, n, proof, np, roots[m - 1], roots[n]),
                    0);
        }
    }
    fl__store_merkle_mem_free(&t);
}

static void test_mem_tree_oom(void **state) {
    (void)state;
    struct fl_test_counting cnt = {0};
    fl_allocator a = fl_test_counting_allocator(&cnt);
    struct fl__store_merkle_mem t;
    fl__store_merkle_mem_init(&t, &a);
    uint8_t leaf[32] = {1};
    for (int i = 0; i < 200; i++)
        assert_int_equal(fl__store_merkle_mem_append(&t, leaf), FL_OK);
    cnt.fail_at = cnt.calls + 1;
    /* The next growth fails and leaves the tree as it was. */
    fl_status r = FL_OK;
    int i = 0;
    while (r == FL_OK && i++ < 10000)
        r = fl__store_merkle_mem_append(&t, leaf);
    assert_int_equal(r, FL_ERR_NOMEM);
    uint64_t size = t.size;
    cnt.fail_at = 0;
    assert_int_equal(fl__store_merkle_mem_append(&t, leaf), FL_OK);
    assert_int_equal(t.size, size + 1);
    fl__store_merkle_mem_free(&t);
    assert_int_equal(cnt.live, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roots),
        cmocka_unit_test(test_inclusion_vectors),
        cmocka_unit_test(test_consistency_vectors),
        cmocka_unit_test(test_exhaustive_small_trees),
        cmocka_unit_test(test_mem_tree_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
