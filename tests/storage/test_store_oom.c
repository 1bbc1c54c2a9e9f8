/* Allocation-failure walks.
 *
 * 1. The store's allocator (fl_test counting allocator): every entry point that allocates
 *    through it must return FL_ERR_NOMEM, hand out nothing and leak nothing, for every
 *    allocation it makes, and the handle must keep working afterwards.
 * 2. SQLite's own allocator (hooked process-wide here, in the test only): failing each of
 *    SQLite's allocations in turn inside the main calls must give an error (never a
 *    crash or a leak) and leave the store consistent and usable. */
#include "sqlite_fail_hook.h"
#include "test_store_util.h"


/* ---- fixtures ---- */

struct world {
    struct store_tdir dir;
    struct fl_test_counting count;
    fl_allocator alloc;
    fl_store *st;
    int64_t pop, round_id, v1, v2;
};

static void world_make(struct world *w) {
    memset(w, 0, sizeof(*w));
    store_tdir_make(&w->dir, "oom.db");
    w->alloc = fl_test_counting_allocator(&w->count);
    w->st = store_open_ok(w->dir.path, &w->alloc);
    fl_store *st = w->st;
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_population_create(st, &w->pop, "p", "{\"a\":[1,2]}", 1, 0, "[\"eu\"]"));
    STORE_OK(st, fl_store_client_enroll(st, "client-1", "0123456789abcdef", 16, "eu", w->pop));
    STORE_OK(st, fl_store_model_put(st, &ref, w->pop, 0, "version one", 11, "{\"m\":1}"));
    w->v1 = ref.version;
    STORE_OK(st, fl_store_model_put(st, &ref, w->pop, w->v1, "version two", 11, NULL));
    w->v2 = ref.version;
    STORE_OK(st, fl_store_round_create(st, &w->round_id, w->pop, 0, w->v1, NULL));
    STORE_OK(st,
             fl_store_participant_set(st, w->round_id, "client-1", FL_STORE_PARTICIPANT_SELECTED));
    fl_store_ledger_entry e = {0};
    e.population_id = w->pop;
    e.round_id = w->round_id;
    e.mechanism = "gaussian";
    e.sampling_rate = 0.1;
    e.noise_multiplier = 1;
    e.clip_norm = 1;
    e.steps = 1;
    e.participants = 1;
    STORE_OK(st, fl_store_ledger_append(st, NULL, &e));
}

static void world_free(struct world *w) {
    fl_store_close(w->st);
    assert_int_equal(w->count.live, 0);
    store_tdir_rm(&w->dir);
}

/* Calls one entry point; frees what it returned. Returns its status. */
typedef fl_status (*op_fn)(struct world *w, int i);

static fl_status op_model_get(struct world *w, int i) {
    (void)i;
    fl_store_model *m = NULL;
    fl_status r = fl_store_model_get(w->st, &m, w->v2);
    if (r != FL_OK)
        assert_null(m);
    else
        assert_memory_equal(m->bytes, "version two", 11);
    fl_store_free(w->st, m);
    return r;
}
static fl_status op_lineage(struct world *w, int i) {
    (void)i;
    fl_store_model *m = NULL;
    size_t n = 9;
    fl_status r = fl_store_model_lineage(w->st, &m, &n, w->v2, 0);
    if (r != FL_OK) {
        assert_null(m);
        assert_int_equal(n, 0);
    } else {
        assert_int_equal(n, 2);
    }
    fl_store_free(w->st, m);
    return r;
}
static fl_status op_population_get(struct world *w, int i) {
    (void)i;
    fl_store_population *p = NULL;
    fl_status r = fl_store_population_get(w->st, &p, w->pop);
    if (r != FL_OK)
        assert_null(p);
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_population_find(struct world *w, int i) {
    (void)i;
    fl_store_population *p = NULL;
    fl_status r = fl_store_population_find(w->st, &p, "p");
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_client_get(struct world *w, int i) {
    (void)i;
    fl_store_client *c = NULL;
    fl_status r = fl_store_client_get(w->st, &c, "client-1");
    if (r != FL_OK)
        assert_null(c);
    fl_store_free(w->st, c);
    return r;
}
static fl_status op_round_get(struct world *w, int i) {
    (void)i;
    fl_store_round *rd = NULL;
    fl_status r = fl_store_round_get(w->st, &rd, w->round_id);
    fl_store_free(w->st, rd);
    return r;
}
static fl_status op_round_find(struct world *w, int i) {
    (void)i;
    fl_store_round *rd = NULL;
    fl_status r = fl_store_round_find(w->st, &rd, w->pop, 0);
    fl_store_free(w->st, rd);
    return r;
}
static fl_status op_participants(struct world *w, int i) {
    (void)i;
    fl_store_participant *p = NULL;
    size_t n = 0;
    fl_status r = fl_store_participant_list(w->st, &p, &n, w->round_id);
    if (r != FL_OK)
        assert_null(p);
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_ledger(struct world *w, int i) {
    (void)i;
    fl_store_ledger_entry *e = NULL;
    size_t n = 0;
    fl_status r = fl_store_ledger_list(w->st, &e, &n, w->pop);
    if (r != FL_OK)
        assert_null(e);
    else
        assert_int_equal(n, 1);
    fl_store_free(w->st, e);
    return r;
}
static fl_status op_model_put(struct world *w, int i) {
    char bytes[32];
    snprintf(bytes, sizeof(bytes), "oom put %d", i);
    fl_store_model_ref ref;
    return fl_store_model_put(w->st, &ref, w->pop, w->v2, bytes, strlen(bytes), "{\"x\":1}");
}
static fl_status op_population_create(struct world *w, int i) {
    char name[32];
    snprintf(name, sizeof(name), "pop-%d", i);
    return fl_store_population_create(w->st, NULL, name, "{}", 1, 0, "[\"eu\"]");
}
static fl_status op_client_enroll(struct world *w, int i) {
    char id[32];
    snprintf(id, sizeof(id), "oom-client-%d", i);
    return fl_store_client_enroll(w->st, id, "0123456789abcdef", 16, "eu", w->pop);
}
/* Enrollment with a device identity, as the coordinator does it: client and identity in one
 * transaction, then read back. A fresh client and device id per call. */
static fl_status op_enroll_identity(struct world *w, int i) {
    char id[32];
    snprintf(id, sizeof(id), "oom-ident-%d", i);
    fl_store_client_identity ci, got;
    memset(&ci, 0, sizeof(ci));
    memcpy(ci.device_id, &i, sizeof(i));
    ci.device_id[31] = 1;
    fl_status r = fl_store_begin(w->st);
    if (r != FL_OK)
        return r;
    r = fl_store_client_enroll(w->st, id, "0123456789abcdef", 16, "eu", w->pop);
    if (r == FL_OK)
        r = fl_store_client_identity_put(w->st, id, &ci);
    if (r == FL_OK)
        r = fl_store_commit(w->st);
    if (r != FL_OK && fl_store_in_transaction(w->st))
        fl_store_rollback(w->st);
    if (r == FL_OK)
        r = fl_store_client_identity_get(w->st, &got, id);
    if (r == FL_OK)
        assert_memory_equal(&got, &ci, sizeof(ci));
    return r;
}
static fl_status op_round_create(struct world *w, int i) {
    (void)i;
    return fl_store_round_create(w->st, NULL, w->pop, 0, 0, "{}");
}
static fl_status op_tag(struct world *w, int i) {
    return fl_store_tag_set(w->st, "production", i % 2 ? w->v1 : w->v2);
}
static fl_status op_ledger_append(struct world *w, int i) {
    fl_store_ledger_entry e = {0};
    e.population_id = w->pop;
    e.mechanism = "gaussian";
    e.sampling_rate = 0.5;
    e.clip_norm = 1;
    e.steps = i + 1;
    return fl_store_ledger_append(w->st, NULL, &e);
}
static fl_status op_txn_group(struct world *w, int i) {
    fl_status r = fl_store_begin(w->st);
    if (r != FL_OK)
        return r;
    char bytes[32];
    snprintf(bytes, sizeof(bytes), "grouped %d", i);
    fl_store_model_ref ref;
    r = fl_store_model_put(w->st, &ref, w->pop, 0, bytes, strlen(bytes), NULL);
    if (r == FL_OK)
        r = op_ledger_append(w, i);
    if (r == FL_OK)
        r = fl_store_commit(w->st);
    if (r != FL_OK && fl_store_in_transaction(w->st))
        fl_store_rollback(w->st);
    return r;
}
static fl_status op_open(struct world *w, int i) {
    (void)i;
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.allocator = &w->alloc;
    fl_store *st = NULL;
    fl_status r = fl_store_open(&st, w->dir.path, &cfg);
    if (r != FL_OK && r != FL_ERR_NOMEM)
        print_message("open: %s\n", fl_store_errmsg(st));
    if (r == FL_OK) {
        fl_store_model *m = NULL;
        r = fl_store_model_get(st, &m, w->v1);
        fl_store_free(st, m);
    }
    fl_store_close(st);
    return r;
}
static fl_status op_check(struct world *w, int i) {
    (void)i;
    return fl_store_check(w->st);
}

static const struct {
    const char *name;
    op_fn fn;
} ops[] = {
    {"model_get", op_model_get},
    {"model_lineage", op_lineage},
    {"population_get", op_population_get},
    {"population_find", op_population_find},
    {"client_get", op_client_get},
    {"round_get", op_round_get},
    {"round_find", op_round_find},
    {"participant_list", op_participants},
    {"ledger_list", op_ledger},
    {"model_put", op_model_put},
    {"population_create", op_population_create},
    {"client_enroll", op_client_enroll},
    {"begin+enroll+identity_put+commit+get", op_enroll_identity},
    {"round_create", op_round_create},
    {"tag_set", op_tag},
    {"ledger_append", op_ledger_append},
    {"begin+put+append+commit", op_txn_group},
    {"check", op_check},
    {"open+get+close", op_open},
};

static void test_open_oom_walk(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "open.db");
    struct fl_test_counting c = {0};
    fl_allocator a = fl_test_counting_allocator(&c);
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.allocator = &a;
    int ok = 0;
    for (long k = 1; k < 100 && !ok; k++) {
        memset(&c, 0, sizeof(c));
        c.fail_at = k;
        fl_store *st = NULL;
        fl_status r = fl_store_open(&st, t.path, &cfg);
        if (r == FL_OK) {
            ok = 1;
        } else {
            assert_int_equal(r, FL_ERR_NOMEM);
            assert_null(st); /* the handle itself could not be allocated */
        }
        fl_store_close(st);
        assert_int_equal(c.live, 0);
    }
    assert_true(ok);
    store_tdir_rm(&t);
}

/* Walk 1: the store's allocator. */
static void test_store_allocator_walk(void **state) {
    (void)state;
    struct world w;
    world_make(&w);
    int seq = 0;
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        int done = 0;
        for (long k = 1; k < 50 && !done; k++) {
            long live = w.count.live;
            w.count.fail_at = w.count.calls + k;
            fl_status r = ops[o].fn(&w, seq++);
            w.count.fail_at = 0;
            if (r == FL_OK) {
                done = 1;
            } else if (r != FL_ERR_NOMEM) {
                fail_msg("%s, allocation %ld: %s (%s)", ops[o].name, k, fl_status_name(r),
                         fl_store_errmsg(w.st));
            }
            assert_int_equal(w.count.live, live);
        }
        if (!done)
            fail_msg("%s never succeeded", ops[o].name);
    }
    assert_int_equal(fl_store_check(w.st), FL_OK);
    world_free(&w);
}

/* Walk 2: SQLite's allocator. */
static void test_sqlite_allocator_walk(void **state) {
    (void)state;
    struct world w;
    world_make(&w);
    int seq = 1000;
    long refused = 0;
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        int done = 0;
        for (long k = 1; k < 5000 && !done; k++) {
            long live = w.count.live;
            long before = sqlite_failures;
            sqlite_countdown = k;
            fl_status r = ops[o].fn(&w, seq++);
            int injected = sqlite_failures != before;
            sqlite_countdown = 0;
            refused += injected;
            assert_int_equal(w.count.live, live);
            assert_int_equal(fl_store_in_transaction(w.st), 0);
            if (injected && r != FL_OK && r != FL_ERR_NOMEM)
                fail_msg("%s, SQLite allocation %ld refused: %s (%s), want FL_ERR_NOMEM",
                         ops[o].name, k, fl_status_name(r), fl_store_errmsg(w.st));
            if (!injected) {
                /* The call made fewer than k allocations: it ran clean to the end. */
                if (r != FL_OK)
                    fail_msg("%s with no injected failure: %s (%s)", ops[o].name, fl_status_name(r),
                             fl_store_errmsg(w.st));
                done = 1;
            }
        }
        if (!done)
            fail_msg("%s never ran clean", ops[o].name);
        /* After every failure the store is consistent and still works. */
        assert_int_equal(ops[o].fn(&w, seq++), FL_OK);
    }
    assert_true(refused > 50);
    assert_int_equal(fl_store_check(w.st), FL_OK);
    world_free(&w);
}

int main(void) {
    install_sqlite_hook();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_oom_walk),
        cmocka_unit_test(test_store_allocator_walk),
        cmocka_unit_test(test_sqlite_allocator_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
