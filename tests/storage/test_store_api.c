/* Store handle: sizes, configuration validation, open/close, failed handles, pragmas,
 * transactions, locking between handles, logging and the clock hook. */
#include "store_internal.h" /* st->db, to roll a transaction back behind the API */
#include "test_store_util.h"

static void test_sizes_match_getters(void **state) {
    (void)state;
    assert_int_equal(fl_store_sha256_hex_bytes(), FL_STORE_SHA256_HEX_BYTES);
    assert_int_equal(fl_store_schema_version(), FL_STORE_SCHEMA_VERSION);
    assert_int_equal(fl_store_name_max(), FL_STORE_NAME_MAX);
    assert_int_equal(fl_store_json_max(), FL_STORE_JSON_MAX);
    assert_int_equal(fl_store_token_min_bytes(), FL_STORE_TOKEN_MIN_BYTES);
    assert_int_equal(FL_STORE_SHA256_HEX_BYTES, 65);
}

static void test_config_defaults(void **state) {
    (void)state;
    fl_store_config cfg;
    memset(&cfg, 0xAB, sizeof(cfg));
    fl_store_config_init(&cfg);
    assert_int_equal(cfg.struct_size, sizeof(cfg));
    assert_null(cfg.allocator);
    assert_null(cfg.logger.fn);
    assert_int_equal(cfg.busy_timeout_ms, 5000);
    assert_int_equal(cfg.create_if_missing, 1);
    assert_int_equal(cfg.max_model_bytes, (size_t)512 * 1024 * 1024);
    assert_null(cfg.clock);
    fl_store_config_init(NULL); /* no-op */
}

/* Opens with cfg and expects code, with the message naming field. */
static void expect_open_fail(const char *path, const fl_store_config *cfg, fl_status code,
                             const char *field) {
    fl_store *st = NULL;
    assert_int_equal(fl_store_open(&st, path, cfg), code);
    assert_non_null(st); /* a failed handle carries the reason */
    if (field && !strstr(fl_store_errmsg(st), field))
        fail_msg("errmsg '%s' does not name '%s'", fl_store_errmsg(st), field);
    /* Every other call on a failed handle is refused without crashing. */
    assert_int_equal(fl_store_begin(st), FL_ERR_STATE);
    fl_store_model_ref ref;
    assert_int_equal(fl_store_model_put(st, &ref, 0, 0, "x", 1, NULL), FL_ERR_STATE);
    assert_int_equal(fl_store_check(st), FL_ERR_STATE);
    assert_int_equal(fl_store_in_transaction(st), 0);
    fl_store_close(st);
}

static void test_open_validates_config(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "cfg.db");
    fl_store_config cfg;

    assert_int_equal(fl_store_open(NULL, t.path, NULL), FL_ERR_MISUSE);
    expect_open_fail(NULL, NULL, FL_ERR_MISUSE, "path");
    expect_open_fail("", NULL, FL_ERR_MISUSE, "path");

    fl_store_config_init(&cfg);
    cfg.struct_size = 8;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->struct_size");

    fl_allocator bad = {sizeof(fl_allocator), NULL, NULL, NULL, NULL};
    fl_store_config_init(&cfg);
    cfg.allocator = &bad;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->allocator");

    fl_store_config_init(&cfg);
    cfg.busy_timeout_ms = -1;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->busy_timeout_ms");

    fl_store_config_init(&cfg);
    cfg.create_if_missing = 7;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->create_if_missing");

    fl_store_config_init(&cfg);
    cfg.max_model_bytes = 0;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->max_model_bytes");
    cfg.max_model_bytes = (size_t)2000000000;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->max_model_bytes");

    fl_store_config_init(&cfg);
    cfg.logger.min_level = (fl_log_level)9;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->logger.min_level");

    fl_store_config_init(&cfg);
    cfg.clock_user = &cfg;
    expect_open_fail(t.path, &cfg, FL_ERR_MISUSE, "cfg->clock");

    /* Nothing was created by the refused opens. */
    assert_int_equal(access(t.path, F_OK), -1);

    fl_store_config_init(&cfg);
    cfg.create_if_missing = 0;
    expect_open_fail(t.path, &cfg, FL_ERR_NOT_FOUND, "no store");
    store_tdir_rm(&t);

    /* NULL-safe helpers. */
    fl_store_close(NULL);
    fl_store_free(NULL, NULL);
    fl_store_interrupt(NULL);
    assert_non_null(fl_store_errmsg(NULL));
    assert_int_equal(fl_store_begin(NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_in_transaction(NULL), 0);
}

static void test_open_sets_pragmas(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "pragmas.db");
    fl_store *st = store_open_ok(t.path, NULL);
    sqlite3 *raw = store_raw_open(t.path);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(raw, "PRAGMA application_id"), 0x464C4F54);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE type = "
                                        "'trigger' AND name LIKE 'models_immutable%'"),
                     3);
    sqlite3_close(raw);
    /* Foreign keys are enforced: a tag cannot point at a missing version. */
    assert_int_equal(fl_store_tag_set(st, "production", 42), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_check(st), FL_OK);
    fl_store_close(st);

    /* Reopening an up-to-date store changes nothing and works. */
    st = store_open_ok(t.path, NULL);
    fl_store_close(st);
    store_tdir_rm(&t);
}

static void test_open_refuses_foreign_files(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "foreign.db");
    /* Not SQLite at all. */
    FILE *f = fopen(t.path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 64; i++)
        fputs("this is not a database, just some text\n", f);
    fclose(f);
    expect_open_fail(t.path, NULL, FL_ERR_FORMAT, NULL);
    unlink(t.path);

    /* SQLite, but somebody else's: refused and left as it was (not switched to WAL). */
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(sqlite3_exec(raw, "CREATE TABLE theirs (x); INSERT INTO theirs VALUES (1);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(raw);
    expect_open_fail(t.path, NULL, FL_ERR_FORMAT, "not a Flotilla store");
    raw = store_raw_open(t.path);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "delete");
    sqlite3_finalize(s);
    sqlite3_close(raw);
    store_tdir_rm(&t);
}

static void test_memory_store(void **state) {
    (void)state;
    fl_store *st = store_open_ok(":memory:", NULL);
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, 0, 0, "abc", 3, NULL));
    assert_int_equal(ref.version, 1);
    /* SHA-256("abc"), FIPS 180-2 appendix B.1. */
    assert_string_equal(ref.sha256_hex,
                        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    fl_store_close(st);
}

static void test_transactions(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "txn.db");
    fl_store *st = store_open_ok(t.path, NULL);
    int64_t pop = 0;

    assert_int_equal(fl_store_commit(st), FL_ERR_STATE);
    assert_int_equal(fl_store_rollback(st), FL_ERR_STATE);

    /* Rolled back: nothing stays. */
    STORE_OK(st, fl_store_begin(st));
    assert_int_equal(fl_store_in_transaction(st), 1);
    assert_int_equal(fl_store_begin(st), FL_ERR_STATE);
    STORE_OK(st, fl_store_population_create(st, &pop, "gone", NULL, 1.0, 1e-6, NULL));
    STORE_OK(st, fl_store_rollback(st));
    assert_int_equal(fl_store_in_transaction(st), 0);
    fl_store_population *p = NULL;
    assert_int_equal(fl_store_population_find(st, &p, "gone"), FL_ERR_NOT_FOUND);
    assert_null(p);

    /* A failing call inside a transaction undoes only itself. */
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_population_create(st, &pop, "kept", NULL, 1.0, 1e-6, NULL));
    assert_int_equal(fl_store_population_create(st, NULL, "kept", NULL, 2.0, 0, NULL),
                     FL_ERR_EXISTS);
    assert_non_null(strstr(fl_store_errmsg(st), "already exists"));
    fl_store_model_ref ref;
    assert_int_equal(fl_store_model_put(st, &ref, pop, 99, "m", 1, NULL), FL_ERR_NOT_FOUND);
    STORE_OK(st, fl_store_model_put(st, &ref, pop, 0, "m", 1, "{\"a\":1}"));
    STORE_OK(st, fl_store_commit(st));
    STORE_OK(st, fl_store_population_find(st, &p, "kept"));
    assert_int_equal(p->id, pop);
    assert_true(p->epsilon == 1.0);
    fl_store_free(st, p);
    fl_store_model *m = NULL;
    STORE_OK(st, fl_store_model_get(st, &m, ref.version));
    assert_int_equal(m->size, 1);
    fl_store_free(st, m);

    /* Closing with an open transaction rolls it back. */
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_population_create(st, NULL, "dropped-at-close", NULL, 1, 0, NULL));
    fl_store_close(st);
    st = store_open_ok(t.path, NULL);
    assert_int_equal(fl_store_population_find(st, &p, "dropped-at-close"), FL_ERR_NOT_FOUND);
    STORE_OK(st, fl_store_population_find(st, &p, "kept"));
    fl_store_free(st, p);
    fl_store_close(st);
    store_tdir_rm(&t);
}

/* When SQLite itself rolls the caller's transaction back (I/O error, disk full), later
 * calls must not silently commit on their own: they and the commit say FL_ERR_ABORTED. */
static void test_transaction_lost_by_sqlite(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "lost.db");
    fl_store *st = store_open_ok(t.path, NULL);
    int64_t pop = 0;
    STORE_OK(st, fl_store_population_create(st, &pop, "p", NULL, 1, 0, NULL));
    STORE_OK(st, fl_store_begin(st));
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, pop, 0, "part one", 8, NULL));
    assert_int_equal(sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(fl_store_model_put(st, &ref, pop, 0, "part two", 8, NULL), FL_ERR_ABORTED);
    assert_int_equal(fl_store_round_create(st, NULL, pop, 0, 0, NULL), FL_ERR_ABORTED);
    assert_int_equal(fl_store_in_transaction(st), 1);
    assert_int_equal(fl_store_commit(st), FL_ERR_ABORTED);
    assert_int_equal(fl_store_in_transaction(st), 0);
    fl_store_round *rd = NULL;
    assert_int_equal(fl_store_round_find(st, &rd, pop, 0), FL_ERR_NOT_FOUND);
    fl_store_model *m = NULL;
    assert_int_equal(fl_store_model_get(st, &m, 1), FL_ERR_NOT_FOUND);
    /* The same with rollback as the way out. */
    STORE_OK(st, fl_store_begin(st));
    assert_int_equal(sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(fl_store_tag_set(st, "x", 1), FL_ERR_ABORTED);
    STORE_OK(st, fl_store_rollback(st));
    STORE_OK(st, fl_store_model_put(st, &ref, pop, 0, "after", 5, NULL));
    fl_store_close(st);
    store_tdir_rm(&t);
}

static void test_two_handles_lock(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "lock.db");
    fl_store *a = store_open_ok(t.path, NULL);
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.busy_timeout_ms = 0;
    fl_store *b = NULL;
    STORE_OK(b, fl_store_open(&b, t.path, &cfg));

    STORE_OK(a, fl_store_begin(a));
    STORE_OK(a, fl_store_population_create(a, NULL, "a", NULL, 1, 0, NULL));
    /* b cannot write while a holds the write lock, and cannot see a's uncommitted row. */
    assert_int_equal(fl_store_population_create(b, NULL, "b", NULL, 1, 0, NULL), FL_ERR_BUSY);
    assert_int_equal(fl_store_begin(b), FL_ERR_BUSY);
    fl_store_population *p = NULL;
    assert_int_equal(fl_store_population_find(b, &p, "a"), FL_ERR_NOT_FOUND);
    STORE_OK(a, fl_store_commit(a));
    STORE_OK(b, fl_store_population_find(b, &p, "a"));
    fl_store_free(b, p);
    STORE_OK(b, fl_store_population_create(b, NULL, "b", NULL, 1, 0, NULL));
    fl_store_close(a);
    fl_store_close(b);
    store_tdir_rm(&t);
}

struct log_capture {
    int count;
    char last[256];
};

static void capture_log(void *user, fl_log_level level, const char *msg) {
    struct log_capture *c = user;
    (void)level;
    c->count++;
    snprintf(c->last, sizeof(c->last), "%s", msg);
}

static int64_t fake_clock(void *user) {
    int64_t *now = user;
    return *now;
}

static void test_logger_and_clock(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "log.db");
    struct log_capture cap = {0};
    int64_t now = 1700000000000;
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.logger.fn = capture_log;
    cfg.logger.user = &cap;
    cfg.logger.min_level = FL_LOG_INFO;
    cfg.clock = fake_clock;
    cfg.clock_user = &now;
    fl_store *st = NULL;
    STORE_OK(st, fl_store_open(&st, t.path, &cfg));
    assert_true(cap.count >= 3); /* two migrations + opened */
    assert_non_null(strstr(cap.last, "opened"));

    int64_t pop = 0;
    STORE_OK(st, fl_store_population_create(st, &pop, "p", NULL, 1, 0, NULL));
    fl_store_population *p = NULL;
    STORE_OK(st, fl_store_population_get(st, &p, pop));
    assert_int_equal(p->created_at, 1700000000000);
    fl_store_free(st, p);

    /* Interrupt with nothing running has no effect on the next call. */
    fl_store_interrupt(st);
    now += 5;
    STORE_OK(st, fl_store_population_create(st, &pop, "q", NULL, 1, 0, NULL));
    STORE_OK(st, fl_store_population_get(st, &p, pop));
    assert_int_equal(p->created_at, 1700000000005);
    fl_store_free(st, p);
    fl_store_close(st);
    store_tdir_rm(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_match_getters),
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_open_validates_config),
        cmocka_unit_test(test_open_sets_pragmas),
        cmocka_unit_test(test_open_refuses_foreign_files),
        cmocka_unit_test(test_memory_store),
        cmocka_unit_test(test_transactions),
        cmocka_unit_test(test_transaction_lost_by_sqlite),
        cmocka_unit_test(test_two_handles_lock),
        cmocka_unit_test(test_logger_and_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
