/* Data sets: IDX loading (gzip and plain), malformed files, in-memory sets, the seeded
 * per-epoch shuffle and the chunking helpers used for DP and TP splits. */
#include "fl_test.h"

#include <stdio.h>
#include <string.h>

#include "dc_internal.h"
#include "dc_test_util.h"

static void test_fashion_mnist(void **state) {
    if (!dc_have_fashion())
        skip();
    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_open_idx(&ds, DC_TRAIN_IMAGES, DC_TRAIN_LABELS, 500, NULL),
                     FL_OK);
    assert_int_equal(fl_dc_dataset_count(ds), 500);
    assert_int_equal(fl_dc_dataset_dim(ds), 784);
    assert_int_equal(fl_dc_dataset_classes(ds), 10);
    float mx = 0.0f;
    for (size_t i = 0; i < 500 * 784; i++) {
        assert_true(ds->x[i] >= 0.0f && ds->x[i] <= 1.0f);
        mx = ds->x[i] > mx ? ds->x[i] : mx;
    }
    assert_true(mx == 1.0f);
    fl_dc_dataset_close(ds);
}

static void test_plain_idx_and_errors(void **state) {
    char img[] = "/tmp/fl_dc_idx_img_XXXXXX", lab[] = "/tmp/fl_dc_idx_lab_XXXXXX";
    int fi = mkstemp(img), fl = mkstemp(lab);
    assert_true(fi >= 0 && fl >= 0);
    close(fi);
    close(fl);
    uint8_t ib[16 + 3 * 4], lb[8 + 3];
    dc_put_be32(ib, 0x803);
    dc_put_be32(ib + 4, 3);
    dc_put_be32(ib + 8, 2);
    dc_put_be32(ib + 12, 2);
    for (int i = 0; i < 12; i++)
        ib[16 + i] = (uint8_t)(i * 20);
    dc_put_be32(lb, 0x801);
    dc_put_be32(lb + 4, 3);
    lb[8] = 0;
    lb[9] = 4;
    lb[10] = 2;
    dc_write_file_ok(img, ib, sizeof(ib));
    dc_write_file_ok(lab, lb, sizeof(lb));
    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_open_idx(&ds, img, lab, 0, NULL), FL_OK);
    assert_int_equal(fl_dc_dataset_count(ds), 3);
    assert_int_equal(fl_dc_dataset_dim(ds), 4);
    assert_int_equal(fl_dc_dataset_classes(ds), 5);
    assert_true(fabsf(ds->x[5] - 100.0f / 255.0f) < 1e-7f);
    fl_dc_dataset_close(ds);

    /* truncated pixels */
    dc_write_file_ok(img, ib, sizeof(ib) - 1);
    assert_int_equal(fl_dc_dataset_open_idx(&ds, img, lab, 0, NULL), FL_ERR_FORMAT);
    assert_null(ds);
    assert_non_null(strstr(fl_dc_last_error(), "sizes"));
    /* wrong magic */
    dc_put_be32(ib, 0x801);
    dc_write_file_ok(img, ib, sizeof(ib));
    assert_int_equal(fl_dc_dataset_open_idx(&ds, img, lab, 0, NULL), FL_ERR_FORMAT);
    /* missing file */
    assert_int_equal(fl_dc_dataset_open_idx(&ds, "/nonexistent/x", lab, 0, NULL), FL_ERR_IO);
    assert_int_equal(fl_dc_dataset_open_idx(NULL, img, lab, 0, NULL), FL_ERR_MISUSE);
    unlink(img);
    unlink(lab);
}

static void test_from_memory(void **state) {
    float x[6] = {0, 1, 2, 3, 4, 5};
    int32_t y[3] = {0, 1, 1};
    fl_dc_dataset *ds = NULL;
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 3, 2, y, 2, NULL), FL_OK);
    assert_int_equal(fl_dc_dataset_classes(ds), 2);
    fl_dc_dataset_close(ds);
    y[2] = 2;
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 3, 2, y, 2, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dc_dataset_from_memory(&ds, x, 0, 2, y, 2, NULL), FL_ERR_MISUSE);
    fl_dc_dataset_close(NULL);

    /* OOM walk: every allocation failure is NOMEM and leaks nothing */
    y[2] = 1;
    for (long k = 1;; k++) {
        struct fl_test_counting c = {.fail_at = k};
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_status rc = fl_dc_dataset_from_memory(&ds, x, 3, 2, y, 2, &a);
        if (rc == FL_OK) {
            fl_dc_dataset_close(ds);
            assert_int_equal(c.live, 0);
            break;
        }
        assert_int_equal(rc, FL_ERR_NOMEM);
        assert_int_equal(c.live, 0);
    }
}

static void test_permutation(void **state) {
    uint32_t p[257], q[257];
    int seen[257];
    fl__dc_permutation(p, 257, 42, 0);
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < 257; i++)
        seen[p[i]]++;
    for (int i = 0; i < 257; i++)
        assert_int_equal(seen[i], 1);
    fl__dc_permutation(q, 257, 42, 0);
    assert_memory_equal(p, q, sizeof(p));
    fl__dc_permutation(q, 257, 42, 1);
    assert_memory_not_equal(p, q, sizeof(p));
    fl__dc_permutation(q, 257, 43, 0);
    assert_memory_not_equal(p, q, sizeof(p));
}

static void test_chunks(void **state) {
    for (size_t n = 0; n < 40; n++) {
        for (size_t parts = 1; parts < 7; parts++) {
            size_t total = 0;
            for (size_t i = 0; i < parts; i++) {
                assert_int_equal(fl__dc_chunk_start(n, parts, i), total);
                size_t l = fl__dc_chunk_len(n, parts, i);
                assert_true(l == n / parts || l == n / parts + 1);
                total += l;
            }
            assert_int_equal(total, n);
            assert_int_equal(fl__dc_chunk_start(n, parts, parts), n);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_plain_idx_and_errors),
        cmocka_unit_test(test_from_memory),
        cmocka_unit_test(test_permutation),
        cmocka_unit_test(test_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
