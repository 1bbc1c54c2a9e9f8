/* A database file damaged on disk (a page overwritten while the store was closed): reading
 * the damaged model reports FL_ERR_CORRUPT (SQLite's corruption error or the model's
 * SHA-256 check, whichever notices first) and never returns the bytes; fl_store_check
 * reports FL_ERR_CORRUPT; undamaged data still reads. Plus the open-time check of the busy
 * timeout's upper bound. */
#include <fcntl.h>
#include <sys/stat.h>

#include "test_store_util.h"

#define MODEL_BYTES (512 * 1024)

static void test_damaged_page(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "damaged.db");
    fl_store *st = store_open_ok(t.path, NULL);
    int64_t pop = 0;
    STORE_OK(st, fl_store_population_create(st, &pop, "p", "{}", 1, 0, "[]"));
    uint8_t *big = malloc(MODEL_BYTES);
    assert_non_null(big);
    for (size_t i = 0; i < MODEL_BYTES; i++)
        big[i] = (uint8_t)(i * 31 + 7);
    fl_store_model_ref small_ref, big_ref;
    STORE_OK(st, fl_store_model_put(st, &small_ref, pop, 0, "small", 5, NULL));
    STORE_OK(st, fl_store_model_put(st, &big_ref, pop, 0, big, MODEL_BYTES, NULL));
    fl_store_close(st); /* checkpoints the WAL into the database file */

    /* Overwrite one page in the middle of the file: the big model's overflow pages are
     * most of it. */
    struct stat sb;
    assert_int_equal(stat(t.path, &sb), 0);
    assert_true(sb.st_size > MODEL_BYTES);
    int fd = open(t.path, O_WRONLY);
    assert_true(fd >= 0);
    uint8_t junk[4096];
    memset(junk, 0xff, sizeof(junk));
    off_t at = (sb.st_size / 2) & ~(off_t)4095;
    assert_int_equal(pwrite(fd, junk, sizeof(junk), at), (ssize_t)sizeof(junk));
    close(fd);

    st = store_open_ok(t.path, NULL);
    fl_store_model *m = NULL;
    fl_status r = fl_store_model_get(st, &m, big_ref.version);
    if (r != FL_ERR_CORRUPT)
        fail_msg("reading the damaged model: %s (%s)", fl_status_name(r), fl_store_errmsg(st));
    assert_null(m);
    assert_int_equal(fl_store_check(st), FL_ERR_CORRUPT);
    STORE_OK(st, fl_store_model_get(st, &m, small_ref.version));
    assert_memory_equal(m->bytes, "small", 5);
    fl_store_free(st, m);
    fl_store_close(st);
    free(big);
    store_tdir_rm(&t);
}

static void test_busy_timeout_bound(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "cfg.db");
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.busy_timeout_ms = 600001;
    fl_store *st = NULL;
    assert_int_equal(fl_store_open(&st, t.path, &cfg), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(st), "busy_timeout_ms"));
    fl_store_close(st);
    cfg.busy_timeout_ms = 600000;
    STORE_OK(st, fl_store_open(&st, t.path, &cfg));
    fl_store_close(st);
    store_tdir_rm(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_damaged_page),
        cmocka_unit_test(test_busy_timeout_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
