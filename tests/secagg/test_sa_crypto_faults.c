/* Failure paths behind the internal crypto table. The graph, mask and Shamir code takes
 * the table as an argument, so these tests hand it the real libsodium/OpenSSL table with
 * one primitive wrapped to fail on a chosen call (or, for the graph's rejection sampler,
 * to start with words that are always rejected): each failure must come back as the
 * documented code, with secrets wiped and nothing leaked. Also: the backends' argument
 * checks that test_crypto_api.c does not reach, the sparse graph's non-neighbour
 * answer, and AES-CTR mask chunks across a wrap of the 128-bit counter. */
#include <string.h>

#include "fl_test.h"
#include "secagg_internal.h"

/* ---- a table that fails on demand ---- */

static const struct fl__sa_crypto *real;
static long prg_calls, prg_fail_at;       /* fail the prg call number prg_fail_at (1-based) */
static size_t prg_ones;                   /* bytes of 0xFF written over the start of each
                                             prg output (rejected by the graph sampler) */
static int sha_fail, random_fail;
static long random_calls, random_fail_at; /* fail the random call number random_fail_at */

static int faulty_prg(uint8_t *out, size_t n, const uint8_t seed[32]) {
    if (++prg_calls == prg_fail_at)
        return -1;
    int rc = real->prg(out, n, seed);
    if (rc == 0 && prg_ones)
        memset(out, 0xFF, prg_ones < n ? prg_ones : n);
    return rc;
}
static int faulty_sha256(uint8_t out[32], const uint8_t *msg, size_t len) {
    return sha_fail ? -1 : real->sha256(out, msg, len);
}
static int faulty_random(uint8_t *out, size_t n) {
    if (++random_calls == random_fail_at)
        return -1;
    return random_fail ? -1 : real->random(out, n);
}

static struct fl__sa_crypto faulty;

static int setup(void **state) {
    (void)state;
    real = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    if (!real)
        return -1;
    faulty = *real;
    faulty.name = "faulty";
    faulty.prg = faulty_prg;
    faulty.sha256 = faulty_sha256;
    faulty.random = faulty_random;
    /* No streaming PRG: the fused mask removal takes its prg() fallback, whose failures
     * these tests count (test_prg_stream.c injects failures into the stream). */
    faulty.prg_stream_size = 0;
    faulty.prg_open = NULL;
    faulty.prg_next = NULL;
    faulty.prg_close = NULL;
    return 0;
}

static void reset_faults(void) {
    prg_calls = prg_fail_at = 0;
    prg_ones = 0;
    sha_fail = random_fail = 0;
    random_calls = random_fail_at = 0;
}

/* Checks that g is H(k, n) over a permutation: k distinct neighbours per client, each
 * relation symmetric, slots consistent, and exactly k clients with a slot. */
static void check_graph(const struct fl__sa_graph *g) {
    uint8_t *seen = calloc(g->n, 1);
    assert_non_null(seen);
    for (uint32_t i = 0; i < g->n; i++) {
        assert_true(g->perm[i] < g->n);
        assert_int_equal(seen[g->perm[i]]++, 0);
        assert_int_equal(g->pos[g->perm[i]], i);
    }
    for (uint32_t u = 0; u < g->n; u++) {
        uint32_t with_slot = 0;
        for (uint32_t v = 0; v < g->n; v++) {
            int32_t s = fl__sa_graph_slot(g, u, v);
            if (s < 0)
                continue;
            with_slot++;
            assert_int_equal(fl__sa_graph_neighbor(g, u, (uint32_t)s), v);
            assert_true(fl__sa_graph_slot(g, v, u) >= 0);
        }
        assert_int_equal(with_slot, g->k);
        assert_int_equal(fl__sa_graph_slot(g, u, g->n), -1);
        assert_int_equal(fl__sa_graph_slot(g, g->n, u), -1);
    }
    free(seen);
}

/* ---- graph ---- */

static void test_graph_faults(void **state) {
    (void)state;
    const uint32_t n = 40, k = 6;
    uint8_t seed[32] = {7, 7, 7};
    struct fl__sa_graph g, ref;
    reset_faults();
    assert_int_equal(fl__sa_graph_init(&ref, n, k, seed, real, NULL), FL_OK);
    check_graph(&ref);
    /* The wrapped table, no fault: the same graph. */
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, NULL), FL_OK);
    assert_memory_equal(g.perm, ref.perm, n * sizeof(uint32_t));
    fl__sa_graph_free(&g, NULL);
    /* Hash or PRG failure: FL_ERR_CRYPTO, nothing left allocated. */
    struct fl_test_counting cnt = {0};
    fl_allocator ca = fl_test_counting_allocator(&cnt);
    sha_fail = 1;
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, &ca), FL_ERR_CRYPTO);
    assert_null(g.perm);
    assert_null(g.pos);
    assert_int_equal(cnt.live, 0);
    reset_faults();
    prg_fail_at = 1;
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, &ca), FL_ERR_CRYPTO);
    assert_int_equal(cnt.live, 0);
    /* Each of the three allocations failing: FL_ERR_NOMEM. */
    reset_faults();
    for (long f = 1; f <= 3; f++) {
        memset(&cnt, 0, sizeof(cnt));
        cnt.fail_at = f;
        assert_int_equal(fl__sa_graph_init(&g, n, k, seed, real, &ca), FL_ERR_NOMEM);
        assert_int_equal(cnt.live, 0);
    }
    /* The complete graph needs no permutation and allocates nothing. */
    memset(&cnt, 0, sizeof(cnt));
    cnt.fail_at = 1;
    assert_int_equal(fl__sa_graph_init(&g, 7, 6, seed, &faulty, &ca), FL_OK);
    assert_true(g.complete);
    assert_int_equal(fl__sa_graph_slot(&g, 3, 3), -1);
    assert_int_equal(fl__sa_graph_slot(&g, 3, 7), -1);
    fl__sa_graph_free(&g, &ca);
    fl__sa_graph_free(NULL, NULL);
    fl__sa_graph_free(&ref, NULL);
}

/* The first buffer of PRG words (8 (n + 64) bytes) is all rejected: the sampler regrows
 * the stream and still builds a valid graph; the growth's allocation or PRG call failing
 * gives FL_ERR_NOMEM or FL_ERR_CRYPTO respectively. */
static void test_graph_stream_growth(void **state) {
    (void)state;
    const uint32_t n = 40, k = 6;
    uint8_t seed[32] = {1, 2, 3};
    struct fl__sa_graph g;
    struct fl_test_counting cnt = {0};
    fl_allocator ca = fl_test_counting_allocator(&cnt);
    reset_faults();
    prg_ones = 8 * ((size_t)n + 64);
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, &ca), FL_OK);
    assert_int_equal(prg_calls, 2); /* the first buffer and one regrowth */
    check_graph(&g);
    fl__sa_graph_free(&g, &ca);
    assert_int_equal(cnt.live, 0);
    /* Two rounds of growth. */
    reset_faults();
    prg_ones = 2 * 8 * ((size_t)n + 64);
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, &ca), FL_OK);
    assert_int_equal(prg_calls, 3);
    check_graph(&g);
    fl__sa_graph_free(&g, &ca);
    /* The regrowth's PRG call fails. */
    reset_faults();
    prg_ones = 8 * ((size_t)n + 64);
    prg_fail_at = 2;
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, &ca), FL_ERR_CRYPTO);
    assert_null(g.perm);
    assert_int_equal(cnt.live, 0);
    /* The regrowth's allocation (the fourth) fails. */
    reset_faults();
    prg_ones = 8 * ((size_t)n + 64);
    memset(&cnt, 0, sizeof(cnt));
    cnt.fail_at = 4;
    assert_int_equal(fl__sa_graph_init(&g, n, k, seed, &faulty, &ca), FL_ERR_NOMEM);
    assert_int_equal(cnt.live, 0);
    reset_faults();
}

/* ---- masks ---- */

static void test_mask_faults(void **state) {
    (void)state;
    enum { D = FL__SA_MASK_CHUNK + 100 };
    uint32_t *acc = calloc(D, sizeof(uint32_t)), *ref = calloc(D, sizeof(uint32_t));
    uint8_t *scratch = malloc((size_t)FL__SA_MASK_FUSE * 4 * FL__SA_MASK_CHUNK);
    assert_true(acc && ref && scratch);
    uint8_t seeds[4][32];
    int signs[4] = {1, -1, 1, 1};
    for (int j = 0; j < 4; j++)
        memset(seeds[j], 0x30 + j, 32);
    /* Reference: the real table. */
    reset_faults();
    assert_int_equal(fl__sa_mask_apply(ref, D, seeds[0], +1, real, scratch), 0);
    /* The second chunk's PRG call fails: -1, and the scratch holds no keystream. */
    prg_fail_at = 2;
    assert_int_equal(fl__sa_mask_apply(acc, D, seeds[0], +1, &faulty, scratch), -1);
    for (size_t i = 0; i < (size_t)FL__SA_MASK_CHUNK * 4; i++)
        if (scratch[i])
            fail_msg("scratch byte %zu not wiped", i);
    /* The fused form: a failure on any source's chunk is reported. */
    for (long f = 1; f <= 8; f++) {
        reset_faults();
        prg_fail_at = f;
        assert_int_equal(fl__sa_mask_apply_many(acc, D, (const uint8_t(*)[32])seeds, signs, 4,
                                                &faulty, scratch),
                         -1);
    }
    reset_faults();
    assert_int_equal(fl__sa_mask_apply_many(acc, D, (const uint8_t(*)[32])seeds, signs, 5,
                                            real, scratch),
                     -1); /* more sources than FL__SA_MASK_FUSE */
    assert_int_equal(fl__sa_mask_apply_many(acc, D, (const uint8_t(*)[32])seeds, signs, 0,
                                            real, scratch),
                     0);
    free(acc);
    free(ref);
    free(scratch);
}

/* Mask chunks advance the 128-bit counter half of the seed by 4096 blocks each; from an
 * all-ones counter the carry runs through all 16 bytes and wraps, exactly as one long
 * AES-CTR call does. */
static void test_mask_counter_wrap(void **state) {
    (void)state;
    enum { D = 2 * FL__SA_MASK_CHUNK + 3 };
    uint8_t seed[32];
    memset(seed, 0x5C, 16);
    memset(seed + 16, 0xFF, 16);
    uint8_t *ks = malloc((size_t)D * 4), *scratch = malloc((size_t)FL__SA_MASK_CHUNK * 4);
    uint32_t *acc = calloc(D, sizeof(uint32_t));
    assert_true(ks && scratch && acc);
    assert_int_equal(real->prg(ks, (size_t)D * 4, seed), 0);
    assert_int_equal(fl__sa_mask_apply(acc, D, seed, +1, real, scratch), 0);
    for (size_t i = 0; i < D; i++)
        if (acc[i] != fl__get_u32le(ks + 4 * i))
            fail_msg("element %zu differs from the long keystream", i);
    assert_int_equal(fl__sa_mask_apply(acc, D, seed, -1, real, scratch), 0);
    for (size_t i = 0; i < D; i++)
        assert_int_equal(acc[i], 0);
    free(ks);
    free(scratch);
    free(acc);
}

static void test_pair_key_faults(void **state) {
    (void)state;
    uint8_t sk[32], pk[32], peer_sk[32], peer_pk[32], out[32], zero[32] = {0};
    assert_int_equal(real->x25519_keypair(pk, sk), 0);
    assert_int_equal(real->x25519_keypair(peer_pk, peer_sk), 0);
    /* Labels are at most 16 bytes. */
    assert_int_equal(fl__sa_derive_pair_key(out, real, "seventeen-bytes!!", sk, peer_pk, 1, 0, 1,
                                            NULL),
                     -1);
    assert_int_equal(fl__sa_derive_pair_key(out, real, "sixteen-bytes-ok", sk, peer_pk, 1, 0, 1,
                                            NULL),
                     0);
    /* A small-order peer key: no agreement, out wiped. */
    memset(out, 0xAA, sizeof(out));
    assert_int_equal(fl__sa_derive_pair_key(out, real, "mask", sk, zero, 1, 0, 1, NULL), -1);
    assert_memory_equal(out, zero, 32);
    /* Both ends agree; a context changes the key; order of u, v does not. */
    uint8_t a[32], b[32], ctx[FL_SECAGG_CONTEXT_BYTES];
    memset(ctx, 9, sizeof(ctx));
    assert_int_equal(fl__sa_derive_pair_key(a, real, "enc", sk, peer_pk, 5, 2, 3, NULL), 0);
    assert_int_equal(fl__sa_derive_pair_key(b, real, "enc", peer_sk, pk, 5, 3, 2, NULL), 0);
    assert_memory_equal(a, b, 32);
    assert_int_equal(fl__sa_derive_pair_key(b, real, "enc", peer_sk, pk, 5, 3, 2, ctx), 0);
    assert_memory_not_equal(a, b, 32);
}

/* ---- Shamir with a failing random source ---- */

static void test_shamir_random_faults(void **state) {
    (void)state;
    struct fl__sa_share sh[4];
    uint32_t xs[4] = {1, 2, 3, 4};
    uint8_t secret[32] = {1};
    reset_faults();
    random_fail = 1;
    assert_int_equal(fl__sa_shamir_split(sh, xs, 4, 3, secret, &faulty), -1);
    for (int i = 0; i < 4; i++) {
        uint8_t zero[FL__SA_SHARE_Y_BYTES] = {0};
        assert_memory_equal(sh[i].y, zero, sizeof(zero)); /* nothing of the secret left */
    }
    random_fail = 0;
    /* t = 20: 19 coefficients, drawn in two calls (16, then 3); the second one failing
     * must wipe what the first 16 coefficients already wrote. */
    {
        struct fl__sa_share big[24];
        uint32_t bx[24];
        for (uint32_t i = 0; i < 24; i++)
            bx[i] = 3 * i + 1;
        reset_faults();
        assert_int_equal(fl__sa_shamir_split(big, bx, 24, 20, secret, &faulty), 0);
        assert_int_equal(random_calls, 2);
        reset_faults();
        random_fail_at = 2;
        assert_int_equal(fl__sa_shamir_split(big, bx, 24, 20, secret, &faulty), -1);
        assert_int_equal(random_calls, 2);
        for (int i = 0; i < 24; i++) {
            uint8_t zero[FL__SA_SHARE_Y_BYTES] = {0};
            assert_memory_equal(big[i].y, zero, sizeof(zero));
        }
        reset_faults();
    }
    struct fl__sa_crypto no_random = *real;
    no_random.random = NULL;
    assert_int_equal(fl__sa_shamir_split(sh, xs, 4, 3, secret, &no_random), -1);
    assert_int_equal(fl__sa_shamir_split(sh, xs, 4, 3, secret, &faulty), 0);
    /* Combining: a job without an output slot is skipped (rc -1); a small scratch falls
     * back to the stack window; both give the secret back. */
    uint8_t out1[32], out2[32];
    struct fl__sa_combine_job jobs[3] = {
        {out1, sh, 3, 0}, {NULL, sh, 3, 0}, {out2, sh + 1, 3, 0}};
    uint8_t small[FL__SA_SHAMIR_SCRATCH_PER_SHARE];
    fl__sa_shamir_combine_many(jobs, 3, small, sizeof(small));
    assert_int_equal(jobs[0].rc, 0);
    assert_int_equal(jobs[1].rc, -1);
    assert_int_equal(jobs[2].rc, 0);
    assert_memory_equal(out1, secret, 32);
    assert_memory_equal(out2, secret, 32);
}

/* ---- backends: argument checks test_crypto_api.c does not reach ---- */

/* The contract of crypto.h at its edges, for one backend (Ed25519: sodium only here; the
 * mbedTLS Ed25519 code has its own tests). */
static void check_arguments(const struct fl__sa_crypto *c) {
    uint8_t key[32] = {3}, nonce[12] = {0}, msg[8] = {1, 2, 3}, ct[24], out[32];
    uint8_t salt[4] = {1, 2, 3, 4};
    /* HKDF: a salt pointer with zero length is the empty salt; a NULL info with zero
     * length is the empty info; NULL out with zero length is nothing to do. */
    uint8_t a[32], b[32];
    assert_int_equal(c->hkdf_sha256(a, 32, salt, 0, key, 32, NULL, 0), 0);
    assert_int_equal(c->hkdf_sha256(b, 32, NULL, 0, key, 32, salt, 0), 0);
    assert_memory_equal(a, b, 32);
    assert_int_equal(c->hkdf_sha256(NULL, 0, salt, 4, key, 32, salt, 4), 0);
    assert_int_equal(c->hkdf_sha256(a, 32, salt, 4, NULL, 1, NULL, 0), -1);
    assert_int_equal(c->hkdf_sha256(a, 255 * 32 + 1, salt, 4, key, 32, NULL, 0), -1);
    /* SHA-256 of the empty message, from NULL or not. */
    assert_int_equal(c->sha256(a, NULL, 0), 0);
    assert_int_equal(c->sha256(b, msg, 0), 0);
    assert_memory_equal(a, b, 32);
    /* AEAD: an impossible length is refused before anything is read; open needs nonce and
     * key; NULL associated data with zero length is the empty AD. */
    assert_int_equal(c->aead_seal(ct, msg, SIZE_MAX, NULL, 0, nonce, key), -1);
    assert_int_equal(c->aead_seal(ct, msg, 8, NULL, 0, nonce, key), 0);
    assert_int_equal(c->aead_open(out, ct, 24, NULL, 0, NULL, key), -1);
    assert_int_equal(c->aead_open(out, ct, 24, NULL, 0, nonce, NULL), -1);
    assert_int_equal(c->aead_open(out, ct, 24, salt, 0, nonce, key), 0);
    assert_memory_equal(out, msg, 8);
    /* Open without an output buffer: only an empty message, and a bad tag still fails. */
    uint8_t tag_only[16];
    assert_int_equal(c->aead_seal(tag_only, NULL, 0, NULL, 0, nonce, key), 0);
    assert_int_equal(c->aead_open(NULL, tag_only, 16, NULL, 0, nonce, key), 0);
    tag_only[3] ^= 1;
    assert_int_equal(c->aead_open(NULL, tag_only, 16, NULL, 0, nonce, key), -1);
    /* Ed25519 over the empty message, with NULL or a pointer. */
    if (c == real) {
        uint8_t seed[32] = {5}, vk[32], sk[64], sig[64];
        assert_int_equal(c->ed25519_keypair(vk, sk, seed), 0);
        assert_int_equal(c->ed25519_sign(sig, NULL, 0, sk), 0);
        assert_int_equal(c->ed25519_verify(sig, msg, 0, vk), 0);
        assert_int_equal(c->ed25519_verify(sig, NULL, 0, vk), 0);
        sig[0] ^= 1;
        assert_int_equal(c->ed25519_verify(sig, NULL, 0, vk), -1);
    }
    /* X25519: a small-order peer key gives no shared secret, and out is wiped. */
    uint8_t sk2[32], pk2[32], zero[32] = {0};
    assert_int_equal(c->x25519_keypair(pk2, sk2), 0);
    memset(out, 0xEE, sizeof(out));
    assert_int_equal(c->x25519_shared(out, sk2, zero), -1);
    assert_memory_equal(out, zero, 32);
    assert_int_equal(c->x25519_public(out, sk2), 0);
    assert_memory_equal(out, pk2, 32);
}

static void test_backend_arguments(void **state) {
    (void)state;
    check_arguments(real);
    const struct fl__sa_crypto *m = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    if (m)
        check_arguments(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_faults),      cmocka_unit_test(test_graph_stream_growth),
        cmocka_unit_test(test_mask_faults),       cmocka_unit_test(test_mask_counter_wrap),
        cmocka_unit_test(test_pair_key_faults),   cmocka_unit_test(test_shamir_random_faults),
        cmocka_unit_test(test_backend_arguments),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
