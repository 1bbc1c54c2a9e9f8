/* Mask expansion: fl__sa_mask_apply and fl__sa_mask_apply_many (1..4 masks per pass, mixed
 * signs) equal the sum of whole-length PRG keystreams read as little-endian words, across
 * chunk boundaries (FL__SA_MASK_CHUNK elements), on every built backend; and
 * fl__sa_mask_apply_blocked (any number of masks, the range cut in FL__SA_MASK_BLOCK
 * blocks) equals one fl__sa_mask_apply per mask, and stops when asked. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_test.h"
#include "secagg_internal.h"

static uint32_t word_le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_backend(const struct fl__sa_crypto *c) {
    static const size_t dims[] = {1, 7, FL__SA_MASK_CHUNK - 1, FL__SA_MASK_CHUNK,
                                  FL__SA_MASK_CHUNK + 1, 2 * FL__SA_MASK_CHUNK + 3};
    const size_t maxd = 2 * FL__SA_MASK_CHUNK + 3;
    uint8_t seeds[FL__SA_MASK_FUSE][32];
    int signs[FL__SA_MASK_FUSE] = {-1, +1, -1, -1};
    uint8_t *ks = malloc(4 * maxd);
    uint32_t *ref = malloc(4 * maxd), *got = malloc(4 * maxd), *one = malloc(4 * maxd);
    uint8_t *scratch = malloc((size_t)FL__SA_MASK_FUSE * 4 * FL__SA_MASK_CHUNK);
    assert_non_null(ks);
    assert_non_null(ref);
    assert_non_null(got);
    assert_non_null(one);
    assert_non_null(scratch);
    for (size_t j = 0; j < FL__SA_MASK_FUSE; j++) {
        assert_int_equal(c->random(seeds[j], 32), 0);
        seeds[j][31] = 0xFF; /* counter near a byte carry: the chunk offsets must carry */
        seeds[j][30] = 0xFF;
    }
    for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
        size_t d = dims[di];
        for (size_t m = 1; m <= FL__SA_MASK_FUSE; m++) {
            for (size_t i = 0; i < d; i++)
                ref[i] = got[i] = one[i] = (uint32_t)(i * 2654435761u);
            for (size_t j = 0; j < m; j++) {
                assert_int_equal(c->prg(ks, 4 * d, seeds[j]), 0);
                for (size_t i = 0; i < d; i++)
                    ref[i] += signs[j] > 0 ? word_le(ks + 4 * i) : 0u - word_le(ks + 4 * i);
                assert_int_equal(fl__sa_mask_apply(one, d, seeds[j], signs[j], c, scratch), 0);
            }
            assert_int_equal(
                fl__sa_mask_apply_many(got, d, (const uint8_t(*)[32])seeds, signs, m, c, scratch),
                0);
            assert_memory_equal(got, ref, 4 * d);
            assert_memory_equal(one, ref, 4 * d);
        }
    }
    assert_int_equal(fl__sa_mask_apply_many(got, 5, (const uint8_t(*)[32])seeds, signs, 0, c,
                                            scratch), 0);
    assert_int_equal(fl__sa_mask_apply_many(got, 5, (const uint8_t(*)[32])seeds, signs,
                                            FL__SA_MASK_FUSE + 1, c, scratch), -1);
    free(ks);
    free(ref);
    free(got);
    free(one);
    free(scratch);
}

struct stop_after {
    int calls, limit;
};

static int stop_after(const void *arg) {
    struct stop_after *s = (struct stop_after *)(uintptr_t)arg;
    return ++s->calls > s->limit;
}

/* The client and the server's masks jobs go through the blocked path: it must equal one
 * single-mask pass per seed over the same range, for mask counts that leave a partial last
 * group and ranges that start inside a block and cross two block boundaries. */
static void check_blocked(const struct fl__sa_crypto *c) {
    const size_t d = 2 * FL__SA_MASK_BLOCK + 1003;
    enum { MAXM = 9 };
    uint8_t seeds[MAXM][32];
    int signs[MAXM];
    uint32_t *ref = malloc(4 * d), *got = malloc(4 * d), *part = malloc(4 * d);
    uint8_t *scratch = malloc((size_t)FL__SA_MASK_FUSE * 4 * FL__SA_MASK_CHUNK);
    assert_non_null(ref);
    assert_non_null(got);
    assert_non_null(part);
    assert_non_null(scratch);
    for (size_t j = 0; j < MAXM; j++) {
        assert_int_equal(c->random(seeds[j], 32), 0);
        signs[j] = (j % 3) ? -1 : +1;
    }
    static const size_t ms[] = {1, 4, 5, MAXM};
    for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
        size_t m = ms[mi];
        for (size_t i = 0; i < d; i++)
            ref[i] = got[i] = part[i] = (uint32_t)(i * 40503u + 7);
        for (size_t j = 0; j < m; j++)
            assert_int_equal(fl__sa_mask_apply(ref, d, seeds[j], signs[j], c, scratch), 0);
        assert_int_equal(fl__sa_mask_apply_blocked(got, 0, d, (const uint8_t(*)[32])seeds, signs,
                                                   m, c, scratch, NULL, NULL),
                         0);
        assert_memory_equal(got, ref, 4 * d);
        /* Two ranges, split inside the first block, add up to the whole. */
        size_t cut = FL__SA_MASK_BLOCK / 2 + 4;
        assert_int_equal(fl__sa_mask_apply_blocked(part, 0, cut, (const uint8_t(*)[32])seeds,
                                                   signs, m, c, scratch, NULL, NULL),
                         0);
        assert_int_equal(fl__sa_mask_apply_blocked(part, cut, d, (const uint8_t(*)[32])seeds,
                                                   signs, m, c, scratch, NULL, NULL),
                         0);
        assert_memory_equal(part, ref, 4 * d);
    }
    /* A stop after the first group of the first block: that group alone on that block. */
    for (size_t i = 0; i < d; i++)
        ref[i] = got[i] = 0;
    assert_int_equal(fl__sa_mask_apply_range(ref, 0, FL__SA_MASK_BLOCK,
                                             (const uint8_t(*)[32])seeds, signs,
                                             FL__SA_MASK_FUSE, c, scratch),
                     0);
    struct stop_after st = {0, 1};
    assert_int_equal(fl__sa_mask_apply_blocked(got, 0, d, (const uint8_t(*)[32])seeds, signs,
                                               MAXM, c, scratch, stop_after, &st),
                     0);
    assert_int_equal(st.calls, 2);
    assert_memory_equal(got, ref, 4 * d);
    /* lo must start an AES block. */
    assert_int_equal(fl__sa_mask_apply_blocked(got, 2, d, (const uint8_t(*)[32])seeds, signs, 1,
                                               c, scratch, NULL, NULL),
                     -1);
    free(ref);
    free(got);
    free(part);
    free(scratch);
}

static void test_mask_apply(void **state) {
    (void)state;
    enum fl__sa_backend_id ids[2] = {FL__SA_BACKEND_SODIUM, FL__SA_BACKEND_MBEDTLS};
    for (size_t b = 0; b < 2; b++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(ids[b]);
        if (c) {
            check_backend(c);
            check_blocked(c);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
