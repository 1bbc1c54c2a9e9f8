/* Shamir sharing properties (exact values against Python are in test_crypto_kat.c):
 * any t of n reconstruct, t-1 do not, tampering yields a wrong secret or an error,
 * argument validation, randomness failure, and backend independence. */

#include <string.h>

#include "fl_test.h"
#include "crypto.h"

static const struct fl__sa_crypto *sodium(void) {
    const struct fl__sa_crypto *c = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    assert_non_null(c);
    return c;
}

/* Calls fn on every k-subset of {0..n-1} (n <= 16) through a bitmask walk. */
static void for_each_subset(size_t n, size_t k, const struct fl__sa_share *all,
                            const uint8_t secret[32], int expect_match) {
    struct fl__sa_share pick[16];
    uint8_t out[32];
    size_t tried = 0;
    for (unsigned mask = 0; mask < (1u << n); mask++) {
        if ((size_t)__builtin_popcount(mask) != k)
            continue;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (mask & (1u << i))
                pick[m++] = all[i];
        int rc = fl__sa_shamir_combine(out, pick, m);
        if (expect_match) {
            assert_int_equal(rc, 0);
            assert_memory_equal(out, secret, 32);
        } else {
            assert_true(rc == -1 || memcmp(out, secret, 32) != 0);
        }
        tried++;
    }
    assert_true(tried > 0);
}

static void test_any_t_of_n(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = sodium();
    static const size_t cfg[][2] = {{1, 1}, {3, 1}, {3, 2}, {5, 3}, {6, 6}, {8, 5}, {10, 4}};
    struct fl__sa_share sh[16];
    uint32_t xs[16];
    uint8_t secret[32];
    for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
        size_t n = cfg[k][0], t = cfg[k][1];
        for (size_t i = 0; i < n; i++)
            xs[i] = (uint32_t)(i * 1000003u + 17u);
        assert_int_equal(c->random(secret, 32), 0);
        assert_int_equal(fl__sa_shamir_split(sh, xs, n, t, secret, c), 0);
        for_each_subset(n, t, sh, secret, 1);
        if (t < n)
            for_each_subset(n, t + 1, sh, secret, 1);
        if (t >= 2)
            for_each_subset(n, t - 1, sh, secret, 0);
    }
}

static void test_order_does_not_matter(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = sodium();
    struct fl__sa_share sh[5], rev[5];
    uint32_t xs[5] = {9, 3, 0xffffffffu, 1, 77};
    uint8_t secret[32], out[32];
    memset(secret, 0xff, sizeof(secret)); /* largest secret */
    assert_int_equal(fl__sa_shamir_split(sh, xs, 5, 5, secret, c), 0);
    for (size_t i = 0; i < 5; i++)
        rev[i] = sh[4 - i];
    assert_int_equal(fl__sa_shamir_combine(out, rev, 5), 0);
    assert_memory_equal(out, secret, 32);
}

/* A flipped bit in one share: combine must not return the secret. It almost always returns
 * a wrong secret (rc 0): the range check only fires when the wrong value lands in
 * [2^256, p), probability ~2^-248, or when the tampered y is >= p. */
static void test_tampered_share(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = sodium();
    struct fl__sa_share sh[4];
    uint32_t xs[4] = {1, 2, 3, 4};
    uint8_t secret[32], out[32];
    int wrong = 0, rejected = 0;
    for (int trial = 0; trial < 264; trial++) {
        assert_int_equal(c->random(secret, 32), 0);
        assert_int_equal(fl__sa_shamir_split(sh, xs, 4, 3, secret, c), 0);
        int bit = trial % 264;
        sh[trial % 3].y[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = fl__sa_shamir_combine(out, sh, 3);
        if (rc == -1)
            rejected++;
        else if (memcmp(out, secret, 32) != 0)
            wrong++;
        else
            fail_msg("tampered share reconstructed the secret (bit %d)", bit);
    }
    assert_int_equal(wrong + rejected, 264);
    print_message("tampered shares: %d wrong secrets, %d rejected (y >= p)\n", wrong, rejected);
}

static void test_bad_arguments(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = sodium();
    struct fl__sa_share sh[3];
    uint32_t xs[3] = {1, 2, 3}, dup[3] = {1, 2, 1}, zero[3] = {1, 0, 3};
    uint8_t secret[32] = {1}, out[32];
    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 0, secret, c), -1);
    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 4, secret, c), -1);
    assert_int_equal(fl__sa_shamir_split(sh, xs, 0, 0, secret, c), -1);
    assert_int_equal(fl__sa_shamir_split(NULL, xs, 3, 2, secret, c), -1);
    assert_int_equal(fl__sa_shamir_split(sh, NULL, 3, 2, secret, c), -1);
    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 2, NULL, c), -1);
    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 2, secret, NULL), -1);
    assert_int_equal(fl__sa_shamir_split(sh, dup, 3, 2, secret, c), -1);
    assert_int_equal(fl__sa_shamir_split(sh, zero, 3, 2, secret, c), -1);

    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 2, secret, c), 0);
    assert_int_equal(fl__sa_shamir_combine(out, sh, 0), -1);
    assert_int_equal(fl__sa_shamir_combine(NULL, sh, 2), -1);
    assert_int_equal(fl__sa_shamir_combine(out, NULL, 2), -1);
    sh[1].x = sh[0].x;
    assert_int_equal(fl__sa_shamir_combine(out, sh, 2), -1);
    sh[1].x = 0;
    assert_int_equal(fl__sa_shamir_combine(out, sh, 2), -1);
    /* y >= p: top byte above 1. */
    sh[1].x = 2;
    sh[1].y[0] = 2;
    memset(out, 0x55, sizeof(out));
    assert_int_equal(fl__sa_shamir_combine(out, sh, 2), -1);
    for (size_t i = 0; i < 32; i++)
        assert_int_equal(out[i], 0); /* wiped on failure */
}

static int failing_random(uint8_t *out, size_t n) {
    (void)out;
    (void)n;
    return -1;
}

static void test_random_failure_wipes(void **state) {
    (void)state;
    struct fl__sa_crypto bad = *sodium();
    bad.random = failing_random;
    struct fl__sa_share sh[3];
    uint32_t xs[3] = {1, 2, 3};
    uint8_t secret[32];
    memset(secret, 0xA5, sizeof(secret));
    memset(sh, 0x5A, sizeof(sh));
    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 2, secret, &bad), -1);
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < FL__SA_SHARE_Y_BYTES; j++)
            assert_int_equal(sh[i].y[j], 0);
    /* t = 1 draws no randomness: every share is the secret itself. */
    assert_int_equal(fl__sa_shamir_split(sh, xs, 3, 1, secret, &bad), 0);
    assert_int_equal(sh[2].y[0], 0);
    assert_memory_equal(sh[2].y + 1, secret, 32);
}

/* Shares made with either backend's randomness combine the same way (combine is pure). */
static void test_backends(void **state) {
    (void)state;
    enum fl__sa_backend_id ids[2] = {FL__SA_BACKEND_SODIUM, FL__SA_BACKEND_MBEDTLS};
    struct fl__sa_share sh[40];
    uint32_t xs[40];
    uint8_t secret[32], out[32];
    for (size_t i = 0; i < 40; i++)
        xs[i] = (uint32_t)(i + 1);
    for (size_t b = 0; b < 2; b++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(ids[b]);
        if (!c)
            continue;
        assert_int_equal(c->random(secret, 32), 0);
        assert_int_equal(fl__sa_shamir_split(sh, xs, 40, 27, secret, c), 0);
        assert_int_equal(fl__sa_shamir_combine(out, sh + 13, 27), 0);
        assert_memory_equal(out, secret, 32);
        int rc = fl__sa_shamir_combine(out, sh + 14, 26); /* t - 1 shares */
        assert_true(rc == -1 || memcmp(out, secret, 32) != 0);
    }
}

/* Garbage shares (random x and y, any k) never crash or trip the sanitizers, and the result
 * is always 0 or -1 with out wiped on -1: combine is fed by the network. */
static void test_garbage_shares(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = sodium();
    struct fl__sa_share sh[8];
    uint8_t out[32];
    int ok = 0, bad = 0;
    for (int trial = 0; trial < 2000; trial++) {
        size_t k = 1 + (size_t)(trial % 8);
        assert_int_equal(c->random((uint8_t *)sh, sizeof(sh)), 0);
        if (trial % 2) { /* small distinct x, y below p most of the time */
            for (size_t i = 0; i < k; i++) {
                sh[i].x = (uint32_t)(i + 1);
                sh[i].y[0] &= 1;
            }
        }
        int rc = fl__sa_shamir_combine(out, sh, k);
        assert_true(rc == 0 || rc == -1);
        if (rc == 0) {
            ok++;
        } else {
            bad++;
            for (size_t i = 0; i < 32; i++)
                assert_int_equal(out[i], 0);
        }
    }
    assert_true(ok > 0 && bad > 0);
}

/* combine_many: every job gives what combine gives alone, whatever the inversion window
 * (stack window, windows smaller than a job, windows spanning several jobs) and with
 * invalid jobs (duplicate x, k = 0, NULL shares, y >= p) mixed in. */
static void test_combine_many(void **state) {
    (void)state;
    const struct fl__sa_crypto *c = sodium();
    enum { JOBS = 12, MAXK = 70 };
    static struct fl__sa_share sh[JOBS][MAXK];
    static uint8_t secrets[JOBS][32], out[JOBS][32], one[32];
    static uint8_t scratch[200 * FL__SA_SHAMIR_SCRATCH_PER_SHARE];
    static const size_t ks[JOBS] = {1, 17, 2, 64, 33, 65, 3, 70, 5, 31, 32, 9};
    struct fl__sa_combine_job jobs[JOBS];
    uint32_t xs[MAXK];
    for (size_t j = 0; j < JOBS; j++) {
        for (size_t i = 0; i < ks[j]; i++)
            xs[i] = (uint32_t)(j * 977u + i * 131u + 1u + (j == 3 ? 0xFFFF0000u : 0u));
        assert_int_equal(c->random(secrets[j], 32), 0);
        assert_int_equal(fl__sa_shamir_split(sh[j], xs, ks[j], ks[j], secrets[j], c), 0);
    }
    /* Window sizes in shares: stack default, 33 (< the largest job), 200. */
    static const size_t scr[] = {0, 33 * FL__SA_SHAMIR_SCRATCH_PER_SHARE, sizeof(scratch)};
    for (size_t w = 0; w < 3; w++) {
        for (size_t j = 0; j < JOBS; j++)
            jobs[j] = (struct fl__sa_combine_job){out[j], sh[j], ks[j], 7};
        memset(out, 0x77, sizeof(out));
        fl__sa_shamir_combine_many(jobs, JOBS, scr[w] ? scratch : NULL, scr[w]);
        for (size_t j = 0; j < JOBS; j++) {
            assert_int_equal(jobs[j].rc, 0);
            assert_memory_equal(out[j], secrets[j], 32);
            assert_int_equal(fl__sa_shamir_combine(one, sh[j], ks[j]), 0);
            assert_memory_equal(one, secrets[j], 32);
        }
    }
    /* Bad jobs fail alone (output wiped); the others still reconstruct. */
    struct fl__sa_share dup[3] = {sh[1][0], sh[1][1], sh[1][0]};
    struct fl__sa_share big[2] = {sh[2][0], sh[2][1]};
    big[1].y[0] = 2; /* y >= p */
    for (size_t w = 0; w < 3; w++) {
        for (size_t j = 0; j < JOBS; j++)
            jobs[j] = (struct fl__sa_combine_job){out[j], sh[j], ks[j], 7};
        jobs[1].shares = dup;
        jobs[1].k = 3;
        jobs[2].shares = big;
        jobs[4].k = 0;
        jobs[6].shares = NULL;
        memset(out, 0x77, sizeof(out));
        fl__sa_shamir_combine_many(jobs, JOBS, scr[w] ? scratch : NULL, scr[w]);
        for (size_t j = 0; j < JOBS; j++) {
            if (j == 1 || j == 2 || j == 4 || j == 6) {
                assert_int_equal(jobs[j].rc, -1);
                for (size_t i = 0; i < 32; i++)
                    assert_int_equal(out[j][i], 0);
            } else {
                assert_int_equal(jobs[j].rc, 0);
                assert_memory_equal(out[j], secrets[j], 32);
            }
        }
    }
    fl__sa_shamir_combine_many(jobs, 0, NULL, 0); /* no jobs: nothing to do */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_t_of_n),        cmocka_unit_test(test_order_does_not_matter),
        cmocka_unit_test(test_tampered_share),    cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_random_failure_wipes), cmocka_unit_test(test_backends),
        cmocka_unit_test(test_garbage_shares),    cmocka_unit_test(test_combine_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
