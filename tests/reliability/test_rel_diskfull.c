/* Disk full. The fault VFS refuses, with SQLITE_FULL (what the unix VFS reports for
 * ENOSPC), any write that would grow the store's files past a byte budget. Checked:
 *
 *   - writes are refused inside the call (no retry loop, no wait) with FL_ERR_IO (or
 *     FL_ERR_ABORTED for the commit of a group SQLite already rolled back) and a message
 *     saying the disk is full; a group is refused whole;
 *   - reads keep working on the same handle, and fl_store_check passes;
 *   - once space is freed (budget raised) the very same handle writes again, without
 *     reopening: a full disk is not sticky, unlike a failed fsync;
 *   - after reopening, everything acknowledged is there and nothing refused is;
 *   - a fresh store that cannot be created for lack of space fails cleanly and can be
 *     created once space is freed. */
#include "rel_util.h"

#define MODEL 16384

static fl_store *open_with_pop(const char *path, int64_t *pop) {
    fl_store *st = store_open_ok(path, NULL);
    STORE_OK(st, fl_store_population_create(st, pop, "full", NULL, 10.0, 1e-6, NULL));
    fl_store_close(st);
    fl_store *fst = NULL;
    fl_status r = rel_open_fault(&fst, path, NULL);
    if (r != FL_OK)
        fail_msg("open through the fault VFS: %s", fl_store_errmsg(fst));
    return fst;
}

static void assert_disk_full(fl_store *st, fl_status r, const char *what, double took) {
    if (r != FL_ERR_IO && r != FL_ERR_ABORTED)
        fail_msg("%s on a full disk returned %s (%s), not FL_ERR_IO", what, fl_status_name(r),
                 fl_store_errmsg(st));
    if (!strstr(fl_store_errmsg(st), "full"))
        fail_msg("%s on a full disk: the message does not say so: '%s'", what, fl_store_errmsg(st));
    if (took > 2.0)
        fail_msg("%s took %.1f s to fail on a full disk", what, took);
}

/* A round commit group; returns the commit result (rolled back on any failure). */
static fl_status group(fl_store *st, int64_t pop, uint32_t life, int64_t *version) {
    uint8_t buf[REL_MODEL_MAX];
    char j1[96], j2[96], j3[96];
    fl_store_model_ref ref;
    int64_t rid = 0;
    fl_status r = fl_store_begin(st);
    if (r != FL_OK)
        return r;
    r = fl_store_model_put(st, &ref, pop, 0, buf, rel_model_bytes(buf, life, 0),
                           rel_json(j1, sizeof(j1), "group", life, 0));
    if (r == FL_OK)
        r = fl_store_round_create(st, &rid, pop, 0, 0, rel_json(j2, sizeof(j2), "group", life, 0));
    if (r == FL_OK)
        r = fl_store_round_complete(st, rid, ref.version);
    if (r == FL_OK) {
        fl_store_ledger_entry e = rel_ledger_entry(pop, rid, life, 0, j3, sizeof(j3));
        r = fl_store_ledger_append(st, NULL, &e);
    }
    if (r == FL_OK)
        r = fl_store_commit(st);
    if (r != FL_OK && fl_store_in_transaction(st))
        (void)fl_store_rollback(st);
    if (r == FL_OK)
        *version = ref.version;
    return r;
}

static void test_disk_full_same_handle(void **state) {
    (void)state;
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    struct store_tdir t;
    store_tdir_make(&t, "full.db");
    int64_t pop = 0;
    fl_store *st = open_with_pop(t.path, &pop);
    fault_vfs_reset();

    /* Leave room for a handful of 16 KiB models, then fill it. */
    int64_t budget = fault_vfs_usage() + 6 * MODEL;
    fault_vfs_set_budget(budget);
    static uint8_t buf[MODEL];
    int64_t versions[64];
    int stored = 0;
    fl_status r = FL_OK;
    double took = 0;
    for (uint32_t i = 0; i < 64; i++) {
        memset(buf, (int)i + 1, sizeof(buf));
        fl_store_model_ref ref;
        double t0 = rel_now_s();
        r = fl_store_model_put(st, &ref, pop, 0, buf, sizeof(buf), NULL);
        took = rel_now_s() - t0;
        if (r != FL_OK)
            break;
        versions[stored++] = ref.version;
    }
    assert_true(stored >= 1);
    assert_true(stored < 64);
    assert_disk_full(st, r, "model put", took);
    assert_true(fault_vfs_fired() > 0);
    assert_true(fault_vfs_usage() <= budget);
    print_message("disk full: %d puts of %d bytes fitted in a %lld-byte budget; put %d refused "
                  "in %.3f ms: %s\n",
                  stored, MODEL, (long long)budget, stored + 1, took * 1e3, fl_store_errmsg(st));

    /* Every other kind of write is refused too, the group whole. */
    int64_t v = 0;
    double t0 = rel_now_s();
    r = group(st, pop, 500, &v);
    assert_disk_full(st, r, "group commit", rel_now_s() - t0);
    assert_int_equal(fl_store_in_transaction(st), 0);

    /* Reads work on the same handle. */
    for (int i = 0; i < stored; i++) {
        fl_store_model *m = NULL;
        STORE_OK(st, fl_store_model_get(st, &m, versions[i]));
        assert_int_equal(m->size, MODEL);
        assert_int_equal(m->bytes[0], (uint8_t)(i + 1));
        fl_store_free(st, m);
    }
    fl_store_population *p = NULL;
    STORE_OK(st, fl_store_population_get(st, &p, pop));
    fl_store_free(st, p);
    STORE_OK(st, fl_store_check(st));

    /* Free space: the same handle writes again, without reopening. */
    fault_vfs_set_budget(budget + 64 * MODEL);
    memset(buf, stored + 1, sizeof(buf));
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, pop, 0, buf, sizeof(buf), NULL));
    versions[stored++] = ref.version;
    STORE_OK(st, group(st, pop, 501, &v));
    STORE_OK(st, fl_store_tag_set(st, "after-full", v));
    fault_vfs_set_budget(-1);
    fl_store_close(st);

    /* Reopen normally: the acknowledged writes are there, the refused group is not. */
    st = store_open_ok(t.path, NULL);
    STORE_OK(st, fl_store_check(st));
    for (int i = 0; i < stored; i++) {
        fl_store_model *m = NULL;
        STORE_OK(st, fl_store_model_get(st, &m, versions[i]));
        assert_int_equal(m->bytes[MODEL - 1], (uint8_t)(i + 1));
        fl_store_free(st, m);
    }
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM rounds"), 1);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM privacy_ledger"), 1);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM models WHERE "
                                        "json_extract(metadata_json, '$.life') = 500"),
                     0);
    sqlite3_close(raw);
    int64_t tagged = 0;
    STORE_OK(st, fl_store_tag_resolve(st, &tagged, "after-full"));
    assert_int_equal(tagged, v);
    fl_store_close(st);
    fault_vfs_reset();
    store_tdir_rm(&t);
}

/* Every budget from 0 up: each single-call write and the group either succeed or are
 * refused cleanly, and the handle recovers once the budget is lifted. */
static void test_disk_full_every_budget(void **state) {
    (void)state;
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    struct store_tdir t;
    store_tdir_make(&t, "every.db");
    int64_t pop = 0;
    fl_store *st = open_with_pop(t.path, &pop);
    fl_store_close(st);
    char work[400];
    snprintf(work, sizeof(work), "%s/work.db", t.dir);
    long refused = 0, accepted = 0;
    /* Budgets 4 KiB apart from nothing spare until the group fits twice. */
    for (int64_t extra = 0; extra <= 1024 * 1024 && accepted < 2; extra += 4096) {
        rel_remove_db(work);
        assert_int_equal(rel_copy_file(t.path, work), 0);
        fl_store *fst = NULL;
        if (rel_open_fault(&fst, work, NULL) != FL_OK)
            fail_msg("open: %s", fl_store_errmsg(fst));
        fault_vfs_reset();
        fault_vfs_set_budget(fault_vfs_usage() + extra);
        int64_t v = 0;
        double t0 = rel_now_s();
        fl_status r = group(fst, pop, 2, &v);
        if (r != FL_OK) {
            assert_disk_full(fst, r, "group commit", rel_now_s() - t0);
            refused++;
            fault_vfs_set_budget(-1);
            STORE_OK(fst, group(fst, pop, 2, &v)); /* same handle */
        } else {
            accepted++;
        }
        fault_vfs_reset();
        fl_store_close(fst);
        fl_store *chk = store_open_ok(work, NULL);
        STORE_OK(chk, fl_store_check(chk));
        fl_store_close(chk);
        sqlite3 *raw = store_raw_open(work);
        assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM rounds"), 1);
        assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM privacy_ledger"), 1);
        sqlite3_close(raw);
    }
    print_message("disk full: group commit under budgets growing by 4 KiB: %ld refused cleanly "
                  "and retried on the same handle, then %ld accepted\n",
                  refused, accepted);
    assert_true(refused > 0 && accepted > 0);
    rel_remove_db(work);
    store_tdir_rm(&t);
}

static void test_disk_full_at_create(void **state) {
    (void)state;
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    struct store_tdir t;
    store_tdir_make(&t, "new.db");
    fault_vfs_reset();
    fault_vfs_set_budget(8192);
    fl_store *st = NULL;
    double t0 = rel_now_s();
    fl_status r = rel_open_fault(&st, t.path, NULL);
    assert_disk_full(st, r, "creating a store", rel_now_s() - t0);
    fl_store_close(st);
    fault_vfs_set_budget(-1);
    st = NULL;
    r = rel_open_fault(&st, t.path, NULL);
    if (r != FL_OK)
        fail_msg("creating the store once space is free: %s", fl_store_errmsg(st));
    STORE_OK(st, fl_store_check(st));
    fl_store_close(st);
    fault_vfs_reset();
    rel_remove_db(t.path);
    store_tdir_rm(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_full_same_handle),
        cmocka_unit_test(test_disk_full_every_budget),
        cmocka_unit_test(test_disk_full_at_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
