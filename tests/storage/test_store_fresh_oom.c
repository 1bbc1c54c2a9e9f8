/* SQLite allocation sqlite_failures on a handle that has not prepared its statements yet.
 *
 * The handle prepares each statement on its first use and keeps it, so the allocation
 * walks in test_store_oom (which run on a handle that has already used every statement)
 * never see a statement fail to prepare. Here the handle's statement cache is emptied
 * (through store_internal.h) before every call, so that the call prepares each statement
 * again, and the call runs once for each of SQLite's allocations failing in turn (hooked
 * process-wide, in the test only):
 * the call must return FL_ERR_NOMEM with nothing handed out, leave no transaction open and
 * leak nothing; and the same call must then work. At the end the
 * database passes the integrity check. Store calls and audit log calls alike. */
#include <sodium.h>

#include "sqlite_fail_hook.h"
#include "store_internal.h"
#include "test_store_util.h"


/* ---- the database the calls run on ---- */

struct world {
    struct store_tdir dir;
    struct fl_test_counting count;
    fl_allocator alloc;
    fl_store *st; /* the handle of the current walk */
    int64_t pop, v1, v2, round_id;
    int n; /* a counter for unique names and bytes */
    uint8_t pk[32], sk[64]; /* checkpoint key */
};

static void world_make(struct world *w) {
    memset(w, 0, sizeof(*w));
    store_tdir_make(&w->dir, "fresh.db");
    w->alloc = fl_test_counting_allocator(&w->count);
    fl_store *st = store_open_ok(w->dir.path, &w->alloc);
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_population_create(st, &w->pop, "p", "{\"a\":1}", 1, 0, "[\"eu\"]"));
    STORE_OK(st, fl_store_client_enroll(st, "client-1", "0123456789abcdef", 16, "eu", w->pop));
    STORE_OK(st, fl_store_model_put(st, &ref, w->pop, 0, "version one", 11, "{\"m\":1}"));
    w->v1 = ref.version;
    STORE_OK(st, fl_store_model_put(st, &ref, w->pop, w->v1, "version two", 11, NULL));
    w->v2 = ref.version;
    STORE_OK(st, fl_store_tag_set(st, "prod", w->v2));
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
    /* An audit log with a checkpoint. */
    uint8_t seed[32];
    memset(seed, 4, sizeof(seed));
    assert_true(sodium_init() >= 0);
    crypto_sign_seed_keypair(w->pk, w->sk, seed);
    STORE_OK(st, fl_store_audit_append_population(st, NULL, w->pop));
    STORE_OK(st, fl_store_audit_append_model(st, NULL, w->pop, w->v1));
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, "fresh.test/log", w->sk));
    fl_store_close(st);
}

/* ---- the calls; each may be repeated after any failure ---- */

typedef fl_status (*op_fn)(struct world *w);

static fl_status op_population_get(struct world *w) {
    fl_store_population *p = NULL;
    fl_status r = fl_store_population_get(w->st, &p, w->pop);
    if (r == FL_OK)
        assert_string_equal(p->name, "p");
    else
        assert_null(p);
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_population_find(struct world *w) {
    fl_store_population *p = NULL;
    fl_status r = fl_store_population_find(w->st, &p, "p");
    if (r != FL_OK)
        assert_null(p);
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_population_list(struct world *w) {
    fl_store_population *p = NULL;
    size_t n = 0;
    fl_status r = fl_store_population_list(w->st, &p, &n);
    if (r == FL_OK)
        assert_true(n >= 1);
    else
        assert_null(p);
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_population_count(struct world *w) {
    int64_t n = -1;
    fl_status r = fl_store_population_client_count(w->st, w->pop, &n);
    if (r == FL_OK)
        assert_true(n >= 1);
    return r;
}
static fl_status op_population_state(struct world *w) {
    w->n++;
    return fl_store_population_set_state(w->st, w->pop,
                                         w->n % 2 ? FL_STORE_POPULATION_PAUSED
                                                  : FL_STORE_POPULATION_ACTIVE);
}
static fl_status op_population_update(struct world *w) {
    char cfg[32];
    snprintf(cfg, sizeof(cfg), "{\"a\":%d}", ++w->n);
    return fl_store_population_update_config(w->st, w->pop, cfg, 1, 0, "[\"eu\"]");
}
static fl_status op_population_create(struct world *w) {
    char name[32];
    snprintf(name, sizeof(name), "pop-%d", ++w->n);
    return fl_store_population_create(w->st, NULL, name, "{}", 1, 0, "[]");
}
static fl_status op_client_enroll(struct world *w) {
    char id[32];
    snprintf(id, sizeof(id), "c-%d", ++w->n);
    return fl_store_client_enroll(w->st, id, "0123456789abcdef", 16, "eu", w->pop);
}
static fl_status op_client_get(struct world *w) {
    fl_store_client *c = NULL;
    fl_status r = fl_store_client_get(w->st, &c, "client-1");
    if (r != FL_OK)
        assert_null(c);
    fl_store_free(w->st, c);
    return r;
}
static fl_status op_client_auth(struct world *w) {
    return fl_store_client_authenticate(w->st, "client-1", "0123456789abcdef", 16);
}
static fl_status op_client_touch(struct world *w) {
    return fl_store_client_touch(w->st, "client-1");
}
static fl_status op_model_put(struct world *w) {
    char b[32];
    snprintf(b, sizeof(b), "model %d", ++w->n);
    fl_store_model_ref ref;
    return fl_store_model_put(w->st, &ref, w->pop, w->v2, b, strlen(b), "{}");
}
static fl_status op_model_get(struct world *w) {
    fl_store_model *m = NULL;
    fl_status r = fl_store_model_get(w->st, &m, w->v2);
    if (r == FL_OK)
        assert_memory_equal(m->bytes, "version two", 11);
    else
        assert_null(m);
    fl_store_free(w->st, m);
    return r;
}
static fl_status op_model_lineage(struct world *w) {
    fl_store_model *m = NULL;
    size_t n = 0;
    fl_status r = fl_store_model_lineage(w->st, &m, &n, w->v2, 0);
    if (r == FL_OK)
        assert_int_equal(n, 2);
    else
        assert_null(m);
    fl_store_free(w->st, m);
    return r;
}
static fl_status op_tag_resolve(struct world *w) {
    int64_t v = 0;
    fl_status r = fl_store_tag_resolve(w->st, &v, "prod");
    if (r == FL_OK)
        assert_int_equal(v, w->v2);
    return r;
}
static fl_status op_tag_set_delete(struct world *w) {
    fl_status r = fl_store_tag_set(w->st, "canary", w->v1);
    if (r == FL_OK)
        r = fl_store_tag_delete(w->st, "canary");
    return r;
}
static fl_status op_round_lifecycle(struct world *w) {
    int64_t rid = 0;
    fl_store_model_ref ref;
    char b[32];
    snprintf(b, sizeof(b), "result %d", ++w->n);
    fl_store_round_counts c = {1, 1, 1, 0};
    fl_status r = fl_store_round_create(w->st, &rid, w->pop, 0, w->v1, "{\"lr\":1}");
    if (r == FL_OK)
        r = fl_store_round_start(w->st, rid);
    if (r == FL_OK)
        r = fl_store_participant_set(w->st, rid, "client-1", FL_STORE_PARTICIPANT_COMPLETED);
    if (r == FL_OK)
        r = fl_store_round_set_counts(w->st, rid, &c);
    if (r == FL_OK)
        r = fl_store_model_put(w->st, &ref, w->pop, w->v1, b, strlen(b), NULL);
    if (r == FL_OK)
        r = fl_store_round_complete(w->st, rid, ref.version);
    return r;
}
static fl_status op_round_abandon(struct world *w) {
    int64_t rid = 0;
    fl_status r = fl_store_round_create(w->st, &rid, w->pop, 0, 0, NULL);
    if (r == FL_OK)
        r = fl_store_round_abandon(w->st, rid, "no quorum");
    return r;
}
static fl_status op_round_get(struct world *w) {
    fl_store_round *rd = NULL;
    fl_status r = fl_store_round_get(w->st, &rd, w->round_id);
    if (r != FL_OK)
        assert_null(rd);
    fl_store_free(w->st, rd);
    return r;
}
static fl_status op_round_find(struct world *w) {
    fl_store_round *rd = NULL;
    fl_status r = fl_store_round_find(w->st, &rd, w->pop, 1);
    fl_store_free(w->st, rd);
    return r;
}
static fl_status op_round_unfinished(struct world *w) {
    fl_store_round *rd = NULL;
    size_t n = 0;
    fl_status r = fl_store_round_list_unfinished(w->st, &rd, &n, w->pop);
    if (r != FL_OK)
        assert_null(rd);
    fl_store_free(w->st, rd);
    return r;
}
static fl_status op_participants(struct world *w) {
    fl_store_participant *p = NULL;
    size_t n = 0;
    fl_status r = fl_store_participant_list(w->st, &p, &n, w->round_id);
    if (r == FL_OK)
        assert_int_equal(n, 1);
    else
        assert_null(p);
    fl_store_free(w->st, p);
    return r;
}
static fl_status op_ledger_append(struct world *w) {
    fl_store_ledger_entry e = {0};
    e.population_id = w->pop;
    e.mechanism = "gaussian";
    e.sampling_rate = 0.5;
    e.clip_norm = 1;
    e.steps = ++w->n;
    return fl_store_ledger_append(w->st, NULL, &e);
}
static fl_status op_ledger_list(struct world *w) {
    fl_store_ledger_entry *e = NULL;
    size_t n = 0;
    fl_status r = fl_store_ledger_list(w->st, &e, &n, w->pop);
    if (r != FL_OK)
        assert_null(e);
    fl_store_free(w->st, e);
    return r;
}
static fl_status op_txn(struct world *w) {
    fl_status r = fl_store_begin(w->st);
    if (r == FL_OK)
        r = op_ledger_append(w);
    if (r == FL_OK)
        r = fl_store_commit(w->st);
    if (r != FL_OK && fl_store_in_transaction(w->st))
        assert_int_equal(fl_store_rollback(w->st), FL_OK);
    return r;
}
static fl_status op_check(struct world *w) {
    return fl_store_check(w->st);
}

static fl_status op_audit_size(struct world *w) {
    int64_t n = 0;
    fl_status r = fl_store_audit_size(w->st, &n);
    if (r == FL_OK)
        assert_true(n >= 2);
    return r;
}
static fl_status op_audit_entry(struct world *w) {
    fl_store_audit_entry *e = NULL;
    fl_status r = fl_store_audit_entry_get(w->st, &e, 1);
    if (r != FL_OK)
        assert_null(e);
    fl_store_free(w->st, e);
    return r;
}
static fl_status op_audit_root(struct world *w) {
    uint8_t root[32];
    return fl_store_audit_root(w->st, root, 2);
}
static fl_status op_audit_proofs(struct world *w) {
    uint8_t proof[8][32];
    size_t n = 0;
    fl_status r = fl_store_audit_inclusion_proof(w->st, proof, 8, &n, 0, 2);
    if (r == FL_OK)
        r = fl_store_audit_consistency_proof(w->st, proof, 8, &n, 1, 2);
    return r;
}
static fl_status op_audit_latest(struct world *w) {
    fl_store_audit_checkpoint *cp = NULL;
    fl_status r = fl_store_audit_checkpoint_latest(w->st, &cp);
    if (r != FL_OK)
        assert_null(cp);
    fl_store_free(w->st, cp);
    return r;
}
static fl_status op_audit_export(struct world *w) {
    uint8_t *b = NULL;
    size_t n = 0;
    fl_status r = fl_store_audit_export(w->st, &b, &n);
    if (r != FL_OK)
        assert_null(b);
    fl_store_free(w->st, b);
    return r;
}
static fl_status op_audit_config(struct world *w) {
    char cfg[32];
    snprintf(cfg, sizeof(cfg), "{\"c\":%d}", ++w->n);
    return fl_store_audit_append_config(w->st, NULL, w->pop, cfg, 1, 0, "[\"eu\"]");
}
static fl_status op_audit_refusal(struct world *w) {
    return fl_store_audit_append_refusal(w->st, NULL, w->pop, 1000, 5, 0);
}
static fl_status op_audit_erase(struct world *w) {
    char id[32];
    uint8_t key[32] = {0};
    snprintf(id, sizeof(id), "erased-%d", ++w->n);
    fl_status r = fl_store_client_enroll(w->st, id, "0123456789abcdef", 16, "eu", w->pop);
    if (r == FL_OK)
        r = fl_store_client_erase(w->st, NULL, id, key);
    return r;
}
static fl_status op_audit_retention(struct world *w) {
    return fl_store_retention_sweep(w->st, NULL, 365LL * 86400000);
}
static fl_status op_audit_checkpoint(struct world *w) {
    fl_status r = op_audit_config(w);
    if (r == FL_OK)
        r = fl_store_audit_checkpoint_sign(w->st, NULL, "fresh.test/log", w->sk);
    return r;
}

static const struct {
    const char *name;
    op_fn fn;
    int group; /* the walk it is in: 0 store calls, 1 audit log calls, 2 fl_store_check */
} ops[] = {
    {"audit_size", op_audit_size, 1},
    {"audit_entry_get", op_audit_entry, 1},
    {"audit_root", op_audit_root, 1},
    {"audit proofs", op_audit_proofs, 1},
    {"audit_checkpoint_latest", op_audit_latest, 1},
    {"audit_export", op_audit_export, 1},
    {"audit_append_config", op_audit_config, 1},
    {"audit_append_refusal", op_audit_refusal, 1},
    {"client_enroll+erase", op_audit_erase, 1},
    {"retention_sweep", op_audit_retention, 1},
    {"audit config+checkpoint_sign", op_audit_checkpoint, 1},
    {"population_get", op_population_get, 0},
    {"population_find", op_population_find, 0},
    {"population_list", op_population_list, 0},
    {"population_client_count", op_population_count, 0},
    {"population_set_state", op_population_state, 0},
    {"population_update_config", op_population_update, 0},
    {"population_create", op_population_create, 0},
    {"client_enroll", op_client_enroll, 0},
    {"client_get", op_client_get, 0},
    {"client_authenticate", op_client_auth, 0},
    {"client_touch", op_client_touch, 0},
    {"model_put", op_model_put, 0},
    {"model_get", op_model_get, 0},
    {"model_lineage", op_model_lineage, 0},
    {"tag_resolve", op_tag_resolve, 0},
    {"tag_set+delete", op_tag_set_delete, 0},
    {"round create..complete", op_round_lifecycle, 0},
    {"round create+abandon", op_round_abandon, 0},
    {"round_get", op_round_get, 0},
    {"round_find", op_round_find, 0},
    {"round_list_unfinished", op_round_unfinished, 0},
    {"participant_list", op_participants, 0},
    {"ledger_append", op_ledger_append, 0},
    {"ledger_list", op_ledger_list, 0},
    {"begin+append+commit", op_txn, 0},
    {"check", op_check, 2},
};

/* Finalizes every statement the handle has prepared, as if it had just been opened. */
static void forget_statements(fl_store *st) {
    for (int i = 0; i < FL__STORE_STMT_COUNT; i++) {
        sqlite3_finalize(st->stmt[i]);
        st->stmt[i] = NULL;
    }
}

static int walk_group; /* which calls test_fresh_handle_walk runs (ops[].group) */

static void test_fresh_handle_walk(void **state) {
    (void)state;
    struct world w;
    world_make(&w);
    long refused = 0;
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        if (ops[o].group != walk_group)
            continue;
        int done = 0;
        w.st = store_open_ok(w.dir.path, &w.alloc);
        for (long k = 1; k < 5000 && !done; k++) {
            forget_statements(w.st);
            long live = w.count.live, before = sqlite_failures;
            sqlite_countdown = k;
            fl_status r = ops[o].fn(&w);
            int injected = sqlite_failures != before;
            sqlite_countdown = 0;
            refused += injected;
            assert_int_equal(w.count.live, live);
            assert_int_equal(fl_store_in_transaction(w.st), 0);
            if (injected && r != FL_OK && r != FL_ERR_NOMEM)
                fail_msg("%s, SQLite allocation %ld refused: %s (%s), want FL_ERR_NOMEM",
                         ops[o].name, k, fl_status_name(r), fl_store_errmsg(w.st));
            if (!injected) {
                if (r != FL_OK)
                    fail_msg("%s with no injected failure: %s (%s)", ops[o].name,
                             fl_status_name(r), fl_store_errmsg(w.st));
                done = 1;
            }
        }
        fl_store_close(w.st);
        w.st = NULL;
        if (!done)
            fail_msg("%s never ran clean", ops[o].name);
        if (getenv("FL_TEST_VERBOSE"))
            print_message("%s: %ld allocations\n", ops[o].name, sqlite_failures);
    }
    assert_true(refused > 100);
    assert_int_equal(w.count.live, 0);
    fl_store *st = store_open_ok(w.dir.path, NULL);
    STORE_OK(st, fl_store_check(st));
    fl_store_close(st);
    store_tdir_rm(&w.dir);
}

/* With no argument: the store calls; "audit": the audit log calls; "check": fl_store_check
 * (more ctests, see fresh_oom.cmake, so that each stays short under ASan). */
int main(int argc, char **argv) {
    /* Thousands of short-lived commits: on a RAM disk when there is one, since fsync is
     * not what this test is about. */
    if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
        setenv("TMPDIR", "/dev/shm", 1);
    const char *which = argc > 1 ? argv[1] : "store";
    walk_group = strcmp(which, "audit") == 0 ? 1 : strcmp(which, "check") == 0 ? 2 : 0;
    if (walk_group == 0 && strcmp(which, "store") != 0) {
        fprintf(stderr, "usage: %s [store|audit|check]\n", argv[0]);
        return 2;
    }
    install_sqlite_hook();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_handle_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
