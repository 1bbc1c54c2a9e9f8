/* Client revocation (schema version 4): revoke keeps the row and reports the time through
 * fl_store_client_get, revoking twice keeps the first time, reinstate clears it, unknown
 * clients and bad arguments are refused, the state survives a reopen, and erasure still
 * deletes a revoked client. */
#include "test_store_revoked.h"

static const char token[] = "0123456789abcdef-token";
/* Revocations are audit-logged under the client's pseudonym with this key. */
static const uint8_t key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES] = {7, 7, 7};

struct fixture {
    struct store_tdir dir;
    fl_store *st;
    int64_t pop;
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    store_tdir_make(&f->dir, "revoke.db");
    f->st = store_open_ok(f->dir.path, NULL);
    STORE_OK(f->st, fl_store_population_create(f->st, &f->pop, "kb", NULL, 8.0, 1e-6, NULL));
    STORE_OK(f->st, fl_store_client_enroll(f->st, "dev-1", token, sizeof(token) - 1, "eu", f->pop));
    STORE_OK(f->st, fl_store_client_enroll(f->st, "dev-2", token, sizeof(token) - 1, "eu", f->pop));
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    fl_store_close(f->st);
    store_tdir_rm(&f->dir);
    free(f);
    return 0;
}

static void test_revoke_and_reinstate(void **state) {
    struct fixture *f = *state;
    assert_int_equal(revoked_at(f->st, "dev-1"), 0);
    int64_t at = -1;
    STORE_OK(f->st, fl_store_client_revoke(f->st, &at, NULL, "dev-1", 1750000000123, key));
    assert_int_equal(at, 1750000000123);
    assert_int_equal(revoked_at(f->st, "dev-1"), 1750000000123);
    /* Only that client, and its record is kept: token still matches, same population. */
    assert_int_equal(revoked_at(f->st, "dev-2"), 0);
    STORE_OK(f->st, fl_store_client_authenticate(f->st, "dev-1", token, sizeof(token) - 1));
    int64_t n = 0;
    STORE_OK(f->st, fl_store_population_client_count(f->st, f->pop, &n));
    assert_int_equal(n, 2);

    /* Idempotent: the first time stays, and NULL out is allowed. */
    STORE_OK(f->st, fl_store_client_revoke(f->st, &at, NULL, "dev-1", 1750000009999, key));
    assert_int_equal(at, 1750000000123);
    STORE_OK(f->st, fl_store_client_revoke(f->st, NULL, NULL, "dev-1", 1750000009999, key));
    assert_int_equal(revoked_at(f->st, "dev-1"), 1750000000123);

    STORE_OK(f->st, fl_store_client_reinstate(f->st, NULL, "dev-1", key));
    assert_int_equal(revoked_at(f->st, "dev-1"), 0);
    STORE_OK(f->st, fl_store_client_reinstate(f->st, NULL, "dev-1", key)); /* already active */
    assert_int_equal(revoked_at(f->st, "dev-1"), 0);
    /* A new revocation after reinstatement records the new time. */
    STORE_OK(f->st, fl_store_client_revoke(f->st, &at, NULL, "dev-1", 1750000020000, key));
    assert_int_equal(at, 1750000020000);

    /* Durable: a reopened store still reports it. */
    fl_store_close(f->st);
    f->st = store_open_ok(f->dir.path, NULL);
    assert_int_equal(revoked_at(f->st, "dev-1"), 1750000020000);
    assert_int_equal(revoked_at(f->st, "dev-2"), 0);
    assert_int_equal(fl_store_check(f->st), FL_OK);
}

static void test_unknown_and_bad_arguments(void **state) {
    struct fixture *f = *state;
    int64_t at = -1;
    assert_int_equal(fl_store_client_revoke(f->st, &at, NULL, "nobody", 1, key), FL_ERR_NOT_FOUND);
    assert_non_null(strstr(fl_store_errmsg(f->st), "nobody"));
    assert_int_equal(at, 0);
    assert_int_equal(fl_store_client_reinstate(f->st, NULL, "nobody", key), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_revoke(f->st, &at, NULL, "dev-1", 0, key), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f->st), "revoked_at"));
    assert_int_equal(fl_store_client_revoke(f->st, &at, NULL, "dev-1", -5, key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_revoke(f->st, &at, NULL, NULL, 1, key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_revoke(f->st, &at, NULL, "", 1, key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_reinstate(f->st, NULL, NULL, key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_revoke(NULL, &at, NULL, "dev-1", 1, key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_reinstate(NULL, NULL, "dev-1", key), FL_ERR_MISUSE);
    /* Nothing was written by the refused calls. */
    assert_int_equal(revoked_at(f->st, "dev-1"), 0);
}

/* Inside the caller's transaction a revocation rolls back with it (it is one savepoint). */
static void test_revoke_rolls_back_with_transaction(void **state) {
    struct fixture *f = *state;
    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_client_revoke(f->st, NULL, NULL, "dev-2", 42, key));
    assert_int_equal(revoked_at(f->st, "dev-2"), 42);
    STORE_OK(f->st, fl_store_rollback(f->st));
    assert_int_equal(revoked_at(f->st, "dev-2"), 0);
}

/* Erasure deletes a revoked client like any other (the column goes with the row). */
static void test_erase_revoked_client(void **state) {
    struct fixture *f = *state;
    STORE_OK(f->st, fl_store_client_revoke(f->st, NULL, NULL, "dev-2", 7, key));
    STORE_OK(f->st, fl_store_client_erase(f->st, NULL, "dev-2", key));
    fl_store_client *c = NULL;
    assert_int_equal(fl_store_client_get(f->st, &c, "dev-2"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_revoke(f->st, NULL, NULL, "dev-2", 8, key), FL_ERR_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_revoke_and_reinstate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_and_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoke_rolls_back_with_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_erase_revoked_client, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
