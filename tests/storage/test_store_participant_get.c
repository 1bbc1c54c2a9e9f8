/* fl_store_participant_get (storage/src/tables.c): one client's participation in one round,
 * read by its key. The coordinator answers a device's status poll of a round it no longer
 * holds in memory (after a restart, or older than the finished rounds it keeps) from the
 * round record and this row (docs/protocol.md 5.3).
 *
 * Checks: the row and its latest state for a recorded client, also once the round is
 * terminal; FL_ERR_NOT_FOUND with *out NULL for an unrecorded client, an unknown round and
 * a client recorded only in another round; argument refusals (FL_ERR_MISUSE with *out
 * NULL); the store's allocator failing at each allocation (FL_ERR_NOMEM, nothing handed
 * out, nothing leaked, the handle still works). */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_walk, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
