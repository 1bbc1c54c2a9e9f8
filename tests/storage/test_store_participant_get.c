/* fl_store_participant_get (storage/src/tables.c): one client's participation in one round,
 * read by its key. The coordinator answers a device's status poll of a round it no longer
 * holds in memory (after a restart, or older than the finished rounds it keeps) from the
 * round record and this row (docs/protocol.md 5.3).
 *
 * Checks: the row and its latest state for a recorded client, also once the round is
 * terminal; FL_ERR_NOT_FOUND with *out NULL for an unrecorded client, an unknown round and
 * a client recorded only in another round; argument refusals (FL_ERR_MISUSE with *out
 * NULL); the store's allocator failing at each allocation (FL_ERR_NOMEM, nothing handed
 * out, nothing leaked, the handle still works).
 *
 * The participation hash (schema version 6, fl_store_participant_set_v2 and
 * fl_store_participant_get_v2): none on rows written by fl_store_participant_set, recorded
 * by set_v2, kept by a later state change without one, replaced by a new one, kept across a
 * reopen; refusals and not-found zero it; a damaged stored length is FL_ERR_CORRUPT; the
 * same allocation-failure walk for get_v2. */
#include "test_store_util.h"

struct fixture {
    struct store_tdir dir;
    struct fl_test_counting count;
    fl_allocator alloc;
    fl_store *st;
    int64_t pop, r1, r2, version;
};

static const char token[] = "0123456789abcdef";

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    store_tdir_make(&f->dir, "part.db");
    f->alloc = fl_test_counting_allocator(&f->count);
    f->st = store_open_ok(f->dir.path, &f->alloc);
    fl_store *st = f->st;
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_population_create(st, &f->pop, "p", "{}", 1, 0, "[\"eu\"]"));
    const char *ids[] = {"dev-a", "dev-b", "dev-c", "dev-d"};
    for (int i = 0; i < 4; i++)
        STORE_OK(st, fl_store_client_enroll(st, ids[i], token, 16, "eu", f->pop));
    STORE_OK(st, fl_store_model_put(st, &ref, f->pop, 0, "v1", 2, NULL));
    f->version = ref.version;
    /* Round 1: a, b, c selected; a and b complete, c drops; the round completes. */
    STORE_OK(st, fl_store_round_create(st, &f->r1, f->pop, 0, f->version, NULL));
    for (int i = 0; i < 3; i++)
        STORE_OK(st, fl_store_participant_set(st, f->r1, ids[i], FL_STORE_PARTICIPANT_SELECTED));
    STORE_OK(st, fl_store_round_start(st, f->r1));
    STORE_OK(st, fl_store_participant_set(st, f->r1, "dev-a", FL_STORE_PARTICIPANT_COMPLETED));
    STORE_OK(st, fl_store_participant_set(st, f->r1, "dev-b", FL_STORE_PARTICIPANT_COMPLETED));
    STORE_OK(st, fl_store_participant_set(st, f->r1, "dev-c", FL_STORE_PARTICIPANT_DROPPED));
    STORE_OK(st, fl_store_round_complete(st, f->r1, f->version));
    /* Round 2: d only, still open. */
    STORE_OK(st, fl_store_round_create(st, &f->r2, f->pop, 0, f->version, NULL));
    STORE_OK(st, fl_store_participant_set(st, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED));
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    fl_store_close(f->st);
    assert_int_equal(f->count.live, 0);
    store_tdir_rm(&f->dir);
    free(f);
    return 0;
}

static void test_found(void **state) {
    struct fixture *f = *state;
    static const struct {
        const char *id;
        fl_store_participant_state state;
    } want[] = {{"dev-a", FL_STORE_PARTICIPANT_COMPLETED},
                {"dev-b", FL_STORE_PARTICIPANT_COMPLETED},
                {"dev-c", FL_STORE_PARTICIPANT_DROPPED}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        fl_store_participant *p = NULL;
        STORE_OK(f->st, fl_store_participant_get(f->st, &p, f->r1, want[i].id));
        assert_non_null(p);
        assert_int_equal(p->round_id, f->r1);
        assert_string_equal(p->client_id, want[i].id);
        assert_int_equal(p->state, want[i].state);
        assert_true(p->updated_at > 0);
        fl_store_free(f->st, p);
    }
    fl_store_participant *p = NULL;
    STORE_OK(f->st, fl_store_participant_get(f->st, &p, f->r2, "dev-d"));
    assert_int_equal(p->state, FL_STORE_PARTICIPANT_SELECTED);
    fl_store_free(f->st, p);
}

static void test_not_found(void **state) {
    struct fixture *f = *state;
    fl_store_participant *p = (fl_store_participant *)f; /* must be reset to NULL */
    /* Recorded only in round 2. */
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r1, "dev-d"), FL_ERR_NOT_FOUND);
    assert_null(p);
    assert_non_null(strstr(fl_store_errmsg(f->st), "not recorded"));
    p = (fl_store_participant *)f;
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r2, "dev-a"), FL_ERR_NOT_FOUND);
    assert_null(p);
    /* No such client, no such round. */
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r1, "nobody"), FL_ERR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r2 + 100, "dev-a"),
                     FL_ERR_NOT_FOUND);
    assert_null(p);
}

static void test_misuse(void **state) {
    struct fixture *f = *state;
    fl_store_participant *p = (fl_store_participant *)f;
    assert_int_equal(fl_store_participant_get(NULL, &p, f->r1, "dev-a"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_get(f->st, NULL, f->r1, "dev-a"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_get(f->st, &p, 0, "dev-a"), FL_ERR_MISUSE);
    assert_null(p);
    p = (fl_store_participant *)f;
    assert_int_equal(fl_store_participant_get(f->st, &p, -3, "dev-a"), FL_ERR_MISUSE);
    assert_null(p);
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r1, ""), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_get(f->st, &p, f->r1, "has space"), FL_ERR_MISUSE);
    assert_null(p);
    assert_non_null(strstr(fl_store_errmsg(f->st), "client_id"));
    /* The handle still answers. */
    STORE_OK(f->st, fl_store_participant_get(f->st, &p, f->r1, "dev-a"));
    fl_store_free(f->st, p);
}

/* A participation hash that differs per seed in its first and last byte. */
static void hash_of(uint8_t h[FL_STORE_PARTICIPATION_HASH_BYTES], int seed) {
    memset(h, seed, FL_STORE_PARTICIPATION_HASH_BYTES);
    h[FL_STORE_PARTICIPATION_HASH_BYTES - 1] = (uint8_t)~seed;
}

/* Reads (round_id, client_id) with get_v2, asserting FL_OK, the state, and the hash (want
 * NULL: none, and zeros handed back). */
static void assert_hash(struct fixture *f, int64_t round_id, const char *client_id,
                        fl_store_participant_state state, const uint8_t *want) {
    uint8_t h[FL_STORE_PARTICIPATION_HASH_BYTES], zero[FL_STORE_PARTICIPATION_HASH_BYTES] = {0};
    int has = -1;
    memset(h, 0xee, sizeof(h));
    fl_store_participant *p = NULL;
    STORE_OK(f->st, fl_store_participant_get_v2(f->st, &p, h, &has, round_id, client_id));
    assert_string_equal(p->client_id, client_id);
    assert_int_equal(p->round_id, round_id);
    assert_int_equal(p->state, state);
    assert_int_equal(has, want != NULL);
    assert_memory_equal(h, want ? want : zero, sizeof(h));
    fl_store_free(f->st, p);
}

static void test_hash_round_trip(void **state) {
    struct fixture *f = *state;
    fl_store *st = f->st;
    uint8_t h1[FL_STORE_PARTICIPATION_HASH_BYTES], h2[FL_STORE_PARTICIPATION_HASH_BYTES];
    hash_of(h1, 1);
    hash_of(h2, 2);
    assert_int_equal(fl_store_participation_hash_bytes(), FL_STORE_PARTICIPATION_HASH_BYTES);
    /* Rows written by fl_store_participant_set have none. */
    assert_hash(f, f->r1, "dev-a", FL_STORE_PARTICIPANT_COMPLETED, NULL);
    assert_hash(f, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, NULL);
    /* A new row gets the hash; an existing row without one gets it too. */
    STORE_OK(st,
             fl_store_participant_set_v2(st, f->r2, "dev-a", FL_STORE_PARTICIPANT_SELECTED, h1));
    assert_hash(f, f->r2, "dev-a", FL_STORE_PARTICIPANT_SELECTED, h1);
    STORE_OK(st,
             fl_store_participant_set_v2(st, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h2));
    assert_hash(f, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h2);
    /* A state change without a hash (either call) keeps it. */
    STORE_OK(st, fl_store_participant_set(st, f->r2, "dev-a", FL_STORE_PARTICIPANT_COMPLETED));
    assert_hash(f, f->r2, "dev-a", FL_STORE_PARTICIPANT_COMPLETED, h1);
    STORE_OK(st,
             fl_store_participant_set_v2(st, f->r2, "dev-a", FL_STORE_PARTICIPANT_DROPPED, NULL));
    assert_hash(f, f->r2, "dev-a", FL_STORE_PARTICIPANT_DROPPED, h1);
    /* A new participation replaces it. */
    STORE_OK(st,
             fl_store_participant_set_v2(st, f->r2, "dev-a", FL_STORE_PARTICIPANT_SELECTED, h2));
    assert_hash(f, f->r2, "dev-a", FL_STORE_PARTICIPANT_SELECTED, h2);
    /* A terminal round refuses and keeps its row as it was. */
    assert_int_equal(
        fl_store_participant_set_v2(st, f->r1, "dev-a", FL_STORE_PARTICIPANT_COMPLETED, h1),
        FL_ERR_STATE);
    assert_hash(f, f->r1, "dev-a", FL_STORE_PARTICIPANT_COMPLETED, NULL);
    /* An unknown client is refused as by fl_store_participant_set. */
    assert_int_equal(
        fl_store_participant_set_v2(st, f->r2, "ghost", FL_STORE_PARTICIPANT_SELECTED, h1),
        FL_ERR_NOT_FOUND);
    /* The list is unchanged by it, and the hash is on disk and survives a reopen. */
    fl_store_participant *list = NULL;
    size_t n = 0;
    STORE_OK(st, fl_store_participant_list(st, &list, &n, f->r2));
    assert_int_equal(n, 2);
    assert_string_equal(list[1].client_id, "dev-d");
    fl_store_free(st, list);
    sqlite3 *raw = store_raw_open(f->dir.path);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM round_participants WHERE "
                                        "length(participation_hash) = 32"),
                     2);
    sqlite3_close(raw);
    fl_store_close(f->st);
    f->st = store_open_ok(f->dir.path, &f->alloc);
    assert_hash(f, f->r2, "dev-a", FL_STORE_PARTICIPANT_SELECTED, h2);
    assert_hash(f, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h2);
}

static void test_hash_refusals(void **state) {
    struct fixture *f = *state;
    fl_store *st = f->st;
    uint8_t h[FL_STORE_PARTICIPATION_HASH_BYTES], zero[FL_STORE_PARTICIPATION_HASH_BYTES] = {0};
    int has = 7;
    fl_store_participant *p = (fl_store_participant *)f;
    /* A NULL handle or output touches nothing. */
    memset(h, 0xee, sizeof(h));
    assert_int_equal(fl_store_participant_get_v2(NULL, &p, h, &has, f->r1, "dev-a"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_get_v2(st, NULL, h, &has, f->r1, "dev-a"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_get_v2(st, &p, NULL, &has, f->r1, "dev-a"),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(st), "hash"));
    assert_int_equal(fl_store_participant_get_v2(st, &p, h, NULL, f->r1, "dev-a"), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(st), "has_hash"));
    assert_ptr_equal(p, (fl_store_participant *)f);
    assert_int_equal(has, 7);
    assert_int_equal(h[0], 0xee);
    /* Bad arguments and a missing row: *out NULL, hash zeroed. */
    assert_int_equal(fl_store_participant_get_v2(st, &p, h, &has, 0, "dev-a"), FL_ERR_MISUSE);
    assert_null(p);
    assert_int_equal(has, 0);
    assert_memory_equal(h, zero, sizeof(h));
    assert_int_equal(fl_store_participant_get_v2(st, &p, h, &has, f->r1, "has space"),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(st), "client_id"));
    hash_of(h, 3);
    STORE_OK(st, fl_store_participant_set_v2(st, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h));
    has = 7;
    p = (fl_store_participant *)f;
    assert_int_equal(fl_store_participant_get_v2(st, &p, h, &has, f->r1, "dev-d"),
                     FL_ERR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(has, 0);
    assert_memory_equal(h, zero, sizeof(h));
    /* set_v2 checks its arguments as fl_store_participant_set does. */
    assert_int_equal(fl_store_participant_set_v2(st, 0, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h),
                     FL_ERR_MISUSE);
    assert_int_equal(
        fl_store_participant_set_v2(st, f->r2, "dev-d", (fl_store_participant_state)9, h),
        FL_ERR_MISUSE);
    assert_int_equal(
        fl_store_participant_set_v2(NULL, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h),
        FL_ERR_MISUSE);
    hash_of(h, 3);
    assert_hash(f, f->r2, "dev-d", FL_STORE_PARTICIPANT_SELECTED, h);
}

/* A stored hash of another length (the CHECK constraint bypassed, as damage would) is
 * FL_ERR_CORRUPT, not a hash read short or long. */
static void test_hash_damaged(void **state) {
    struct fixture *f = *state;
    sqlite3 *raw = store_raw_open(f->dir.path);
    char *err = NULL;
    int rc = sqlite3_exec(raw,
                          "PRAGMA ignore_check_constraints = ON; UPDATE round_participants "
                          "SET participation_hash = x'0102' WHERE client_id = 'dev-d'",
                          NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("%s", err ? err : "?");
    sqlite3_close(raw);
    uint8_t h[FL_STORE_PARTICIPATION_HASH_BYTES];
    int has = 7;
    fl_store_participant *p = (fl_store_participant *)f;
    assert_int_equal(fl_store_participant_get_v2(f->st, &p, h, &has, f->r2, "dev-d"),
                     FL_ERR_CORRUPT);
    assert_null(p);
    assert_int_equal(has, 0);
    assert_non_null(strstr(fl_store_errmsg(f->st), "participation hash"));
    /* fl_store_participant_get does not read the column. */
    STORE_OK(f->st, fl_store_participant_get(f->st, &p, f->r2, "dev-d"));
    fl_store_free(f->st, p);
    /* Through the API the constraint holds. */
    raw = store_raw_open(f->dir.path);
    assert_int_not_equal(sqlite3_exec(raw,
                                      "UPDATE round_participants SET participation_hash = "
                                      "zeroblob(31) WHERE client_id = 'dev-d'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    sqlite3_close(raw);
}

/* Each allocation of the store's allocator fails in turn: FL_ERR_NOMEM, *out NULL, nothing
 * leaked, until the call succeeds. */
static void test_oom_walk(void **state) {
    struct fixture *f = *state;
    int done = 0;
    for (long k = 1; k < 50 && !done; k++) {
        long live = f->count.live;
        fl_store_participant *p = (fl_store_participant *)f;
        f->count.fail_at = f->count.calls + k;
        fl_status r = fl_store_participant_get(f->st, &p, f->r1, "dev-c");
        f->count.fail_at = 0;
        if (r == FL_OK) {
            assert_string_equal(p->client_id, "dev-c");
            fl_store_free(f->st, p);
            done = 1;
        } else {
            assert_int_equal(r, FL_ERR_NOMEM);
            assert_null(p);
        }
        assert_int_equal(f->count.live, live);
    }
    assert_true(done);
    assert_int_equal(fl_store_check(f->st), FL_OK);
}

/* The same walk for get_v2 on a row with a hash: the hash is handed back only with the row. */
static void test_oom_walk_v2(void **state) {
    struct fixture *f = *state;
    uint8_t want[FL_STORE_PARTICIPATION_HASH_BYTES], h[FL_STORE_PARTICIPATION_HASH_BYTES];
    hash_of(want, 5);
    STORE_OK(f->st, fl_store_participant_set_v2(f->st, f->r2, "dev-d",
                                                FL_STORE_PARTICIPANT_SELECTED, want));
    int done = 0;
    for (long k = 1; k < 50 && !done; k++) {
        long live = f->count.live;
        fl_store_participant *p = (fl_store_participant *)f;
        int has = 7;
        f->count.fail_at = f->count.calls + k;
        fl_status r = fl_store_participant_get_v2(f->st, &p, h, &has, f->r2, "dev-d");
        f->count.fail_at = 0;
        if (r == FL_OK) {
            assert_string_equal(p->client_id, "dev-d");
            assert_int_equal(has, 1);
            assert_memory_equal(h, want, sizeof(h));
            fl_store_free(f->st, p);
            done = 1;
        } else {
            assert_int_equal(r, FL_ERR_NOMEM);
            assert_null(p);
            assert_int_equal(has, 0);
        }
        assert_int_equal(f->count.live, live);
    }
    assert_true(done);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_walk_v2, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
