/* Client device identities (schema version 5, secure aggregation in active mode): put and
 * get round-trip the bytes; one identity per client; one client per device and population
 * (the same device id is free in another population); unknown clients and bad arguments
 * refused; a put inside fl_store_begin() rolls back with the enrollment; revocation keeps the
 * identity (a revoked device cannot come back as a new client); erasure and the retention
 * sweep delete it with the client; the sizes match their getters. */
#include "test_store_util.h"

static const char token[] = "0123456789abcdef-token";
static const uint8_t key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES] = {5, 5, 5};

struct fixture {
    struct store_tdir dir;
    fl_store *st;
    int64_t pop, pop2;
    int64_t now; /* the store clock, Unix ms */
};

static int64_t fixture_clock(void *user) {
    return ((struct fixture *)user)->now;
}

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    f->now = 1750000000000;
    store_tdir_make(&f->dir, "identity.db");
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.clock = fixture_clock;
    cfg.clock_user = f;
    STORE_OK(f->st, fl_store_open(&f->st, f->dir.path, &cfg));
    STORE_OK(f->st, fl_store_population_create(f->st, &f->pop, "kb", NULL, 8.0, 1e-6, NULL));
    STORE_OK(f->st, fl_store_population_create(f->st, &f->pop2, "kb2", NULL, 8.0, 1e-6, NULL));
    const char *ids[] = {"dev-1", "dev-2", "dev-3"};
    for (int i = 0; i < 3; i++)
        STORE_OK(f->st,
                 fl_store_client_enroll(f->st, ids[i], token, sizeof(token) - 1, "eu", f->pop));
    STORE_OK(f->st,
             fl_store_client_enroll(f->st, "other-1", token, sizeof(token) - 1, "eu", f->pop2));
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

/* An identity whose bytes all derive from seed (device id, key and certificate differ). */
static fl_store_client_identity make_id(uint8_t seed) {
    fl_store_client_identity id;
    for (int i = 0; i < FL_STORE_DEVICE_ID_BYTES; i++)
        id.device_id[i] = (uint8_t)(seed + i);
    for (int i = 0; i < FL_STORE_VERIFY_KEY_BYTES; i++)
        id.verify_key[i] = (uint8_t)(seed * 3 + i + 1);
    for (int i = 0; i < FL_STORE_CERT_BYTES; i++)
        id.cert[i] = (uint8_t)(seed * 7 + i + 2);
    return id;
}

static int64_t identity_rows(struct fixture *f) {
    sqlite3 *raw = store_raw_open(f->dir.path);
    int64_t n = store_raw_int(raw, "SELECT count(*) FROM client_identities");
    sqlite3_close(raw);
    return n;
}

static void test_sizes(void **state) {
    (void)state;
    assert_int_equal(fl_store_device_id_bytes(), FL_STORE_DEVICE_ID_BYTES);
    assert_int_equal(fl_store_verify_key_bytes(), FL_STORE_VERIFY_KEY_BYTES);
    assert_int_equal(fl_store_cert_bytes(), FL_STORE_CERT_BYTES);
    assert_true(fl_store_schema_version() >= 5); /* identities arrived with version 5 */
}

static void test_put_get(void **state) {
    struct fixture *f = *state;
    fl_store_client_identity a = make_id(1), got;
    memset(&got, 0xee, sizeof(got));
    assert_int_equal(fl_store_client_identity_get(f->st, &got, "dev-1"), FL_ERR_NOT_FOUND);
    assert_non_null(strstr(fl_store_errmsg(f->st), "no identity"));
    fl_store_client_identity zero;
    memset(&zero, 0, sizeof(zero));
    assert_memory_equal(&got, &zero, sizeof(got)); /* zeroed on failure */
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-1", &a));
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-1"));
    assert_memory_equal(&got, &a, sizeof(a));
    /* The population column is the client's. */
    sqlite3 *raw = store_raw_open(f->dir.path);
    assert_int_equal(store_raw_int(raw, "SELECT population_id FROM client_identities "
                                        "WHERE client_id = 'dev-1'"),
                     f->pop);
    sqlite3_close(raw);
    /* Durable across a reopen. */
    fl_store_close(f->st);
    f->st = store_open_ok(f->dir.path, NULL);
    memset(&got, 0, sizeof(got));
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-1"));
    assert_memory_equal(&got, &a, sizeof(a));
    assert_int_equal(fl_store_check(f->st), FL_OK);
}

static void test_uniqueness(void **state) {
    struct fixture *f = *state;
    fl_store_client_identity a = make_id(1), b = make_id(2), got;
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-1", &a));
    /* A second identity for the same client is refused, the first one kept. */
    assert_int_equal(fl_store_client_identity_put(f->st, "dev-1", &b), FL_ERR_EXISTS);
    assert_non_null(strstr(fl_store_errmsg(f->st), "already has an identity"));
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-1"));
    assert_memory_equal(&got, &a, sizeof(a));
    /* The same device for another client of the population is refused, even with another
     * key and certificate... */
    fl_store_client_identity same_dev = b;
    memcpy(same_dev.device_id, a.device_id, FL_STORE_DEVICE_ID_BYTES);
    assert_int_equal(fl_store_client_identity_put(f->st, "dev-2", &same_dev), FL_ERR_EXISTS);
    assert_non_null(strstr(fl_store_errmsg(f->st), "device is already enrolled"));
    assert_int_equal(fl_store_client_identity_get(f->st, &got, "dev-2"), FL_ERR_NOT_FOUND);
    /* ...but free in another population. */
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "other-1", &same_dev));
    /* Another device is fine. */
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-2", &b));
    assert_int_equal(identity_rows(f), 3);
}

static void test_misuse(void **state) {
    struct fixture *f = *state;
    fl_store_client_identity a = make_id(1), got;
    assert_int_equal(fl_store_client_identity_put(f->st, "nobody", &a), FL_ERR_NOT_FOUND);
    assert_non_null(strstr(fl_store_errmsg(f->st), "nobody"));
    assert_int_equal(fl_store_client_identity_get(f->st, &got, "nobody"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_identity_put(f->st, "dev-1", NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_identity_put(f->st, NULL, &a), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_identity_put(f->st, "bad id", &a), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_identity_put(NULL, "dev-1", &a), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_identity_get(f->st, NULL, "dev-1"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_identity_get(f->st, &got, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_identity_get(NULL, &got, "dev-1"), FL_ERR_MISUSE);
    assert_int_equal(identity_rows(f), 0);
}

/* Enrollment and identity in one transaction: a refused identity rolls back the client too,
 * an accepted one commits both. */
static void test_in_transaction(void **state) {
    struct fixture *f = *state;
    fl_store_client_identity a = make_id(1);
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-1", &a));
    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_client_enroll(f->st, "dev-9", token, sizeof(token) - 1, "eu", f->pop));
    assert_int_equal(fl_store_client_identity_put(f->st, "dev-9", &a), FL_ERR_EXISTS);
    STORE_OK(f->st, fl_store_rollback(f->st));
    fl_store_client *c = NULL;
    assert_int_equal(fl_store_client_get(f->st, &c, "dev-9"), FL_ERR_NOT_FOUND);

    fl_store_client_identity b = make_id(9), got;
    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_client_enroll(f->st, "dev-9", token, sizeof(token) - 1, "eu", f->pop));
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-9", &b));
    STORE_OK(f->st, fl_store_commit(f->st));
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-9"));
    assert_memory_equal(&got, &b, sizeof(b));
}

static void test_revoke_keeps_erase_deletes(void **state) {
    struct fixture *f = *state;
    fl_store_client_identity a = make_id(1), b = make_id(2), got;
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-1", &a));
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-2", &b));
    /* Revoked: the identity stays, and its device cannot enroll as another client. */
    STORE_OK(f->st, fl_store_client_revoke(f->st, NULL, NULL, "dev-1", f->now, key));
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-1"));
    assert_memory_equal(&got, &a, sizeof(a));
    assert_int_equal(fl_store_client_identity_put(f->st, "dev-3", &a), FL_ERR_EXISTS);
    /* Erased: the identity goes with the client, in the erasure's transaction; the device
     * is then free to enroll again. The other client's identity is untouched. */
    STORE_OK(f->st, fl_store_client_erase(f->st, NULL, "dev-1", key));
    assert_int_equal(fl_store_client_identity_get(f->st, &got, "dev-1"), FL_ERR_NOT_FOUND);
    assert_int_equal(identity_rows(f), 1);
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-2"));
    assert_memory_equal(&got, &b, sizeof(b));
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-3", &a));
    assert_int_equal(fl_store_check(f->st), FL_OK);
}

static void test_retention_deletes(void **state) {
    struct fixture *f = *state;
    fl_store_client_identity a = make_id(1), b = make_id(2), got;
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-1", &a));
    STORE_OK(f->st, fl_store_client_identity_put(f->st, "dev-2", &b));
    /* dev-2 is seen later; a sweep expires dev-1 (and dev-3, other-1) only. */
    f->now += 10 * 86400000LL;
    STORE_OK(f->st, fl_store_client_touch(f->st, "dev-2"));
    f->now += 1000;
    fl_store_retention_result res;
    STORE_OK(f->st, fl_store_retention_sweep(f->st, &res, 86400000LL));
    assert_int_equal(res.clients_deleted, 3);
    assert_int_equal(fl_store_client_identity_get(f->st, &got, "dev-1"), FL_ERR_NOT_FOUND);
    STORE_OK(f->st, fl_store_client_identity_get(f->st, &got, "dev-2"));
    assert_memory_equal(&got, &b, sizeof(b));
    assert_int_equal(identity_rows(f), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test_setup_teardown(test_put_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uniqueness, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoke_keeps_erase_deletes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_deletes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
