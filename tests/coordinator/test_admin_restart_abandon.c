/* A round left open by a killed coordinator is abandoned at the next start together with its
 * "round" audit entry, both or neither. The real executable is SIGKILLed with a forming
 * round; the audit log is then made to refuse appends (a trigger added to the database file:
 * a real SQLite failure inside the store's transaction, no stand-in). The next start must
 * fail with a clear message and write nothing: the round stays open, no entry. With the
 * trigger gone, the start abandons the round and logs it, exactly once. */
#include <signal.h>

#include <sodium.h>

#include "coord_testkit.h"

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

static int setup(void **state) {
    *state = fx_new();
    return 0;
}

static int teardown(void **state) {
    fx_free(*state);
    return 0;
}

/* fl_coord_create on the fixture's database (as fx_start does, without starting). */
static fl_status create_on_db(struct fx *f, fl_coord **co, char *err, size_t n) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.port = 0;
    cfg.threads = 1;
    cfg.db_path = f->db;
    cfg.has_admin_token = 1;
    crypto_hash_sha256(cfg.admin_token_sha256, (const uint8_t *)ADMIN_TOKEN, strlen(ADMIN_TOKEN));
    cfg.has_signing_key = 1;
    memset(cfg.signing_seed, 7, sizeof(cfg.signing_seed));
    return fl_coord_create(co, &cfg, err, n);
}

static void test_restart_abandon_is_atomic(void **state) {
    struct fx *f = *state;
    fx_proc_start(f, FL_COORD_EXE);
    struct popcfg pc = {.name = "ra", .target = 2, .min = 2, .secagg = false, .mode = "none"};
    char *tok[1];
    setup_population(f, &pc, tok, 1);
    struct tc dev;
    memset(&dev, 0, sizeof(dev));
    dev.tok = tok[0];
    int64_t rid = 0;
    checkin_all(f, &dev, 1, &rid); /* a forming round with one client */
    fx_proc_signal(f, SIGKILL);

    char q[256];
    snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), 0); /* OPEN */
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM audit_entries WHERE type = 'round' AND "
             "(CAST(data AS TEXT) LIKE '%%\"round_id\":%lld,%%' OR "
             "CAST(data AS TEXT) LIKE '%%\"round_id\":%lld}%%')",
             (long long)rid, (long long)rid);
    int64_t entries0 = db_int(f, "SELECT count(*) FROM audit_entries");
    assert_int_equal(db_int(f, q), 0);

    /* The audit log refuses every append. */
    db_exec(f, "CREATE TRIGGER fl_test_refuse_audit BEFORE INSERT ON audit_entries "
               "BEGIN SELECT RAISE(ABORT, 'injected audit failure'); END;");
    fl_coord *co = NULL;
    char err[512] = "";
    assert_int_not_equal(create_on_db(f, &co, err, sizeof(err)), FL_OK);
    assert_null(co);
    if (getenv("FL_TEST_VERBOSE"))
        fprintf(stderr, "refused start: %s\n", err);
    assert_non_null(strstr(err, "could not be abandoned"));
    assert_non_null(strstr(err, "injected audit failure"));
    /* Neither half was written. */
    snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries"), entries0);

    /* Storage repaired: the start abandons the round and logs it once. */
    db_exec(f, "DROP TRIGGER fl_test_refuse_audit");
    fx_start(f);
    snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
    assert_int_equal(db_int(f, q), 3); /* ABANDONED */
    snprintf(q, sizeof(q),
             "SELECT abandon_reason = 'coordinator restarted' FROM rounds WHERE id = %lld",
             (long long)rid);
    assert_int_equal(db_int(f, q), 1);
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM audit_entries WHERE type = 'round' AND "
             "(CAST(data AS TEXT) LIKE '%%\"round_id\":%lld,%%' OR "
             "CAST(data AS TEXT) LIKE '%%\"round_id\":%lld}%%')",
             (long long)rid, (long long)rid);
    assert_int_equal(db_int(f, q), 1);
    /* Every ended round has its entry (the property the sweep checks). */
    assert_int_equal(db_int(f, "SELECT count(*) FROM rounds WHERE state IN (2, 3)"),
                     db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'round'"));
    free(tok[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_restart_abandon_is_atomic, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
