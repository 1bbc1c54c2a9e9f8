/* Allocation-failure walks over the audit log.
 *
 * Every audit entry point (appends of each entry type, erasure, retention, reads, proofs,
 * checkpoints, export, offline bundle verification) is run with each allocation it makes
 * failing in turn, from each of the three allocators it uses:
 *   1. the store's allocator (fl_test counting allocator);
 *   2. SQLite's allocator (hooked process-wide here, in the test only);
 *   3. Jansson's allocator (json_set_alloc_funcs, process-wide, test only), which builds,
 *      parses and encodes every entry.
 * A refused allocation must give FL_ERR_NOMEM (never another code, a crash or a leak), must
 * leave no transaction open and nothing half-written: after all the walks the log still
 * checkpoints, exports and verifies offline, and the store passes its integrity check. */
#include <jansson.h>

#include "audit_internal.h"
#include "sqlite_fail_hook.h"
#include "test_audit_util.h"

/* ---- process-wide allocation hooks (test only) ---- */

static long json_countdown;   /* as sqlite_countdown, for Jansson */
static long json_failures;

static int countdown_hit(long *countdown, long *failures) {
    if (*countdown > 0 && --*countdown == 0) {
        ++*failures;
        return 1;
    }
    return 0;
}
static void *json_hook_malloc(size_t n) {
    return countdown_hit(&json_countdown, &json_failures) ? NULL : malloc(n);
}
static void json_hook_free(void *p) {
    free(p);
}

static void install_hooks(void) {
    install_sqlite_hook();
    json_set_alloc_funcs(json_hook_malloc, json_hook_free);
}

/* ---- the world: one population with four clients, a few rounds, a checkpoint ---- */

struct world {
    struct audit_fx f; /* f.st uses the counting allocator below */
    struct fl_test_counting count;
    fl_allocator alloc;
    int64_t round_no; /* last round number logged */
    int models;       /* models made so far (each gets distinct bytes) */
    char bundle_path[400];
    uint8_t *bundle; /* latest export, for the offline walks */
    size_t bundle_len;
};

/* One coordinator-style round commit; returns the first failure (rolled back). Even
 * rounds complete with regions counted from the participants, odd ones are abandoned
 * with the regions given by the caller (round 3 also with norm proofs). */
static fl_status world_round(struct world *w, int i) {
    fl_store *st = w->f.st;
    int64_t rid = 0, version = 0;
    int completed = i % 2 == 0;
    w->f.now += 60000;
    fl_status r = fl_store_begin(st);
    if (r != FL_OK)
        return r;
    r = fl_store_round_create(st, &rid, w->f.pop, w->round_no + 1, w->f.model, "{\"lr\":1}");
    if (r == FL_OK)
        r = fl_store_round_start(st, rid);
    for (int c = 0; c < 4 && r == FL_OK; c++) {
        char id[16];
        snprintf(id, sizeof(id), "c%03d", c);
        r = fl_store_participant_set(st, rid, id, FL_STORE_PARTICIPANT_COMPLETED);
    }
    fl_store_round_counts counts = {4, 4, completed ? 4 : 0, 0};
    if (r == FL_OK)
        r = fl_store_round_set_counts(st, rid, &counts);
    if (r == FL_OK && completed) {
        float wt[16];
        audit_fx_weights(wt, 16, 0);
        wt[0] = (float)(++w->models); /* a new model every time */
        fl_store_model_ref ref;
        r = fl_store_model_put(st, &ref, w->f.pop, w->f.model, wt, sizeof(wt), NULL);
        version = ref.version;
        if (r == FL_OK)
            r = fl_store_round_complete(st, rid, version);
        fl_store_ledger_entry le = {0};
        le.population_id = w->f.pop;
        le.round_id = rid;
        le.mechanism = "gaussian";
        le.sampling_rate = 0.5;
        le.noise_multiplier = 1.0;
        le.clip_norm = 1.0;
        le.steps = 2;
        le.participants = 4;
        if (r == FL_OK)
            r = fl_store_ledger_append(st, NULL, &le);
    } else if (r == FL_OK) {
        r = fl_store_round_abandon(st, rid, "too few clients");
    }
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.epsilon_total = w->f.eps_total + (completed ? 0.01 : 0);
    info.delta = 1e-8;
    static const fl_store_audit_region regions[2] = {{"EU", 2}, {"UK", 2}};
    if (!completed) {
        info.regions = regions;
        info.n_regions = 2;
        info.secagg_enabled = 1;
        info.secagg_n = 4;
        info.secagg_k = 3;
        info.secagg_t = 2;
        if (i == 3) {
            info.norm_proof_enabled = 1;
            info.norm_bits = 17;
            info.norm_bound2 = 65536;
            info.norm_dim = 16;
            info.norm_weight_max = 1;
        }
    }
    int64_t seq = -1;
    if (r == FL_OK)
        r = fl_store_audit_append_round(st, &seq, &info);
    if (r == FL_OK)
        r = fl_store_commit(st);
    if (r != FL_OK) {
        snprintf(w->f.msg, sizeof(w->f.msg), "%s", fl_store_errmsg(st));
        if (fl_store_in_transaction(st))
            assert_int_equal(fl_store_rollback(st), FL_OK);
        return r;
    }
    assert_true(seq > 0);
    w->round_no++;
    if (completed) {
        w->f.model = version;
        w->f.eps_total += 0.01;
    }
    return FL_OK;
}

static void world_export(struct world *w) {
    free(w->bundle);
    uint8_t *b = NULL;
    STORE_OK(w->f.st, fl_store_audit_export(w->f.st, &b, &w->bundle_len));
    w->bundle = malloc(w->bundle_len);
    assert_non_null(w->bundle);
    memcpy(w->bundle, b, w->bundle_len);
    fl_store_free(w->f.st, b);
}

static void world_make(struct world *w) {
    memset(w, 0, sizeof(*w));
    struct audit_fx *f = &w->f;
    assert_int_equal(sodium_init() >= 0, 1);
    store_tdir_make(&f->t, "audit_oom.db");
    snprintf(w->bundle_path, sizeof(w->bundle_path), "%s/bundle.jsonl", f->t.dir);
    f->now = 1700000000000;
    w->alloc = fl_test_counting_allocator(&w->count);
    /* In memory: the walks commit thousands of times, and fsync is not what they test. */
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.allocator = &w->alloc;
    cfg.clock = audit_fx_clock;
    cfg.clock_user = f;
    STORE_OK(f->st, fl_store_open(&f->st, ":memory:", &cfg));
    unsigned char seed[32];
    memset(seed, 9, sizeof(seed));
    crypto_sign_seed_keypair(f->pk, f->sk, seed);
    fl_store *st = f->st;
    STORE_OK(st, fl_store_population_create(st, &f->pop, "kb", "{\"t\":1}", 8.0, 1e-6,
                                            "[\"EU\",\"UK\"]"));
    for (int i = 0; i < 4; i++) {
        char id[16];
        uint8_t tok[16];
        snprintf(id, sizeof(id), "c%03d", i);
        memset(tok, i + 1, sizeof(tok));
        STORE_OK(st, fl_store_client_enroll(st, id, tok, sizeof(tok), i % 2 ? "EU" : "UK", f->pop));
    }
    float wt[16];
    audit_fx_weights(wt, 16, 0);
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, f->pop, 0, wt, sizeof(wt), NULL));
    f->model = ref.version;
    STORE_OK(st, fl_store_audit_append_population(st, NULL, f->pop));
    STORE_OK(st, fl_store_audit_append_model(st, NULL, f->pop, f->model));
    /* Three checkpoints, so that an export has a first, a middle and a last one to write. */
    for (int i = 0; i < 4; i++) {
        STORE_OK(st, world_round(w, i));
        if (i % 2 == 1)
            STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, f->sk));
    }
    STORE_OK(st, fl_store_audit_append_config(st, NULL, f->pop, "{\"v\":-1}", 8.0, 1e-6,
                                              "[\"EU\",\"UK\"]"));
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, f->sk));
    world_export(w);
}

/* The log is whole: a new checkpoint extends the old ones, the export verifies offline
 * against the trusted key, and SQLite finds nothing wrong. */
static void world_check(struct world *w) {
    fl_store *st = w->f.st;
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, w->f.sk));
    world_export(w);
    char vkey[256];
    STORE_OK(st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, w->f.pk));
    fl_store_audit_bundle *b = NULL;
    assert_int_equal(fl_store_audit_bundle_open(&b, w->bundle, w->bundle_len, NULL), FL_OK);
    fl_store_audit_verdict v;
    fl_status r = fl_store_audit_bundle_verify(b, vkey, &v);
    if (r != FL_OK)
        fail_msg("bundle after the walk: %s", v.message);
    assert_true(v.ok);
    fl_store_audit_bundle_close(b);
    STORE_OK(st, fl_store_check(st));
}

static void world_free(struct world *w) {
    fl_store_close(w->f.st);
    assert_int_equal(w->count.live, 0);
    free(w->bundle);
    store_tdir_rm(&w->f.t);
}

/* ---- operations under test; each may be called again after any failure ---- */

typedef fl_status (*op_fn)(struct world *w, int i);

static fl_status op_population(struct world *w, int i) {
    char name[32];
    int64_t id = 0, seq = -1;
    snprintf(name, sizeof(name), "pop-%d", i);
    fl_status r = fl_store_population_create(w->f.st, &id, name, "{\"x\":[1]}", 2.0, 1e-7,
                                             "[\"EU\"]");
    if (r == FL_OK)
        r = fl_store_audit_append_population(w->f.st, &seq, id);
    if (r == FL_OK)
        assert_true(seq > 0);
    return r;
}
static fl_status op_config(struct world *w, int i) {
    char cfg[32];
    snprintf(cfg, sizeof(cfg), "{\"v\":%d}", i);
    return fl_store_audit_append_config(w->f.st, NULL, w->f.pop, cfg, 8.0, 1e-6,
                                        "[\"EU\",\"UK\"]");
}
static fl_status op_model(struct world *w, int i) {
    float wt[16];
    audit_fx_weights(wt, 16, 0);
    wt[0] = (float)(++w->models);
    fl_store_model_ref ref;
    fl_status r = fl_store_model_put(w->f.st, &ref, w->f.pop, w->f.model, wt, sizeof(wt), NULL);
    if (r == FL_OK)
        r = fl_store_audit_append_model(w->f.st, NULL, w->f.pop, ref.version);
    if (r == FL_OK)
        w->f.model = ref.version;
    return r;
}
static fl_status op_round_completed(struct world *w, int i) {
    (void)i;
    return world_round(w, 0);
}
static fl_status op_round_abandoned(struct world *w, int i) {
    (void)i;
    return world_round(w, 1);
}
static fl_status op_round_norm_proof(struct world *w, int i) {
    (void)i;
    return world_round(w, 3);
}
static fl_status op_refusal(struct world *w, int i) {
    (void)i;
    fl_status r = fl_store_audit_append_refusal(w->f.st, NULL, w->f.pop, w->round_no + 1, 100.0,
                                                1e-8);
    if (r == FL_OK)
        w->round_no++;
    return r;
}
static fl_status op_erase(struct world *w, int i) {
    char id[32];
    uint8_t key[32];
    memset(key, 3, sizeof(key));
    snprintf(id, sizeof(id), "gone-%d", i);
    fl_status r = fl_store_client_enroll(w->f.st, id, "0123456789abcdef", 16, "EU", w->f.pop);
    int64_t seq = -1;
    if (r == FL_OK)
        r = fl_store_client_erase(w->f.st, &seq, id, key);
    if (r == FL_OK)
        assert_true(seq > 0);
    return r;
}
static fl_status op_revoke(struct world *w, int i) {
    char id[32];
    uint8_t key[32];
    memset(key, 3, sizeof(key));
    snprintf(id, sizeof(id), "blk-%d", i);
    fl_status r = fl_store_client_enroll(w->f.st, id, "0123456789abcdef", 16, "EU", w->f.pop);
    int64_t seq = -1, at = 0;
    if (r == FL_OK)
        r = fl_store_client_revoke(w->f.st, &at, &seq, id, w->f.now, key);
    if (r == FL_OK) {
        assert_true(seq > 0);
        assert_int_equal(at, w->f.now);
        seq = -1;
        r = fl_store_client_reinstate(w->f.st, &seq, id, key);
    }
    if (r == FL_OK)
        assert_true(seq > 0);
    return r;
}
static fl_status op_retention(struct world *w, int i) {
    (void)i;
    fl_store_retention_result res;
    w->f.now += 1000;
    return fl_store_retention_sweep(w->f.st, &res, 365LL * 24 * 3600 * 1000);
}
static fl_status op_entry_get(struct world *w, int i) {
    fl_store_audit_entry *e = NULL;
    fl_status r = fl_store_audit_entry_get(w->f.st, &e, i % 5);
    if (r == FL_OK) {
        assert_int_equal(e->seq, i % 5);
        assert_int_equal(strlen(e->json), e->size);
    } else {
        assert_null(e);
    }
    fl_store_free(w->f.st, e);
    return r;
}
static fl_status op_root(struct world *w, int i) {
    (void)i;
    int64_t n = 0;
    uint8_t root[32];
    fl_status r = fl_store_audit_size(w->f.st, &n);
    if (r == FL_OK)
        r = fl_store_audit_root(w->f.st, root, n);
    return r;
}
static fl_status op_proofs(struct world *w, int i) {
    (void)i;
    int64_t n = 0;
    uint8_t proof[FL_STORE_AUDIT_PROOF_MAX][32];
    size_t np = 0;
    fl_status r = fl_store_audit_size(w->f.st, &n);
    if (r == FL_OK)
        r = fl_store_audit_inclusion_proof(w->f.st, proof, FL_STORE_AUDIT_PROOF_MAX, &np, 1, n);
    if (r == FL_OK)
        r = fl_store_audit_consistency_proof(w->f.st, proof, FL_STORE_AUDIT_PROOF_MAX, &np, 3, n);
    return r;
}
static fl_status op_checkpoint(struct world *w, int i) {
    /* A new entry first, so that there is something new to sign. */
    fl_status r = op_config(w, i);
    fl_store_audit_checkpoint *cp = NULL;
    if (r == FL_OK)
        r = fl_store_audit_checkpoint_sign(w->f.st, &cp, AUDIT_ORIGIN, w->f.sk);
    if (r == FL_OK)
        assert_non_null(cp->note);
    else
        assert_null(cp);
    fl_store_free(w->f.st, cp);
    return r;
}
static fl_status op_checkpoint_latest(struct world *w, int i) {
    (void)i;
    fl_store_audit_checkpoint *cp = NULL;
    fl_status r = fl_store_audit_checkpoint_latest(w->f.st, &cp);
    if (r == FL_OK)
        assert_true(cp->tree_size > 0);
    else
        assert_null(cp);
    fl_store_free(w->f.st, cp);
    return r;
}
static fl_status op_export(struct world *w, int i) {
    (void)i;
    uint8_t *b = NULL;
    size_t n = 0;
    fl_status r = fl_store_audit_export(w->f.st, &b, &n);
    if (r == FL_OK)
        assert_memory_equal(b, "{\"checkpoints\":", 15);
    else
        assert_null(b);
    fl_store_free(w->f.st, b);
    return r;
}
static fl_status op_export_file(struct world *w, int i) {
    (void)i;
    fl_status r = fl_store_audit_export_file(w->f.st, w->bundle_path);
    if (r != FL_OK)
        assert_int_equal(access(w->bundle_path, F_OK), -1); /* no partial file left behind */
    return r;
}
/* Offline: open and verify the last export, allocating through the counting allocator. */
static fl_status op_bundle_verify(struct world *w, int i) {
    (void)i;
    fl_store_audit_bundle *b = NULL;
    fl_status r = fl_store_audit_bundle_open(&b, w->bundle, w->bundle_len, &w->alloc);
    fl_store_audit_verdict v;
    if (r == FL_OK)
        r = fl_store_audit_bundle_verify(b, NULL, &v);
    if (r == FL_OK)
        assert_true(v.ok);
    fl_store_audit_bundle_close(b);
    return r;
}

/* json_first: the Jansson walk runs the op before all the others (see walk). */
static const struct {
    const char *name;
    op_fn fn;
    int json_first;
} ops[] = {
    {"append_population", op_population, 0},
    {"append_config", op_config, 0},
    {"append_model", op_model, 0},
    {"append_round (completed)", op_round_completed, 0},
    {"append_round (abandoned)", op_round_abandoned, 0},
    {"append_round (norm proof)", op_round_norm_proof, 0},
    {"append_refusal", op_refusal, 0},
    {"client_erase", op_erase, 0},
    {"client_revoke+reinstate", op_revoke, 0},
    {"retention_sweep", op_retention, 0},
    {"entry_get", op_entry_get, 0},
    {"root", op_root, 0},
    {"proofs", op_proofs, 0},
    {"checkpoint_sign", op_checkpoint, 0},
    {"checkpoint_latest", op_checkpoint_latest, 0},
    {"export", op_export, 1},
    {"export_file", op_export_file, 1},
    {"bundle_open+verify", op_bundle_verify, 0},
};
#define N_OPS (sizeof(ops) / sizeof(ops[0]))

enum walk_kind { WALK_STORE, WALK_SQLITE, WALK_JSON };

/* Runs ops[o] with the k-th allocation of the walked allocator failing, for k = 1, 2, ...
 * until the op makes fewer allocations than k and succeeds. */
static long walk_op(struct world *w, size_t o, enum walk_kind kind, int *seq) {
    int done = 0;
    long injected_total = 0;
    for (long k = 1; k < 20000 && !done; k++) {
        long live = w->count.live;
        long before_sql = sqlite_failures, before_json = json_failures;
        long before_calls = w->count.calls;
        if (kind == WALK_STORE)
            w->count.fail_at = w->count.calls + k;
        else if (kind == WALK_SQLITE)
            sqlite_countdown = k;
        else
            json_countdown = k;
        fl_status r = ops[o].fn(w, (*seq)++);
        int injected = kind == WALK_STORE    ? w->count.calls - before_calls >= k
                       : kind == WALK_SQLITE ? sqlite_failures != before_sql
                                             : json_failures != before_json;
        w->count.fail_at = 0;
        sqlite_countdown = 0;
        json_countdown = 0;
        injected_total += injected;
        assert_int_equal(w->count.live, live);
        assert_int_equal(fl_store_in_transaction(w->f.st), 0);
        /* Jansson reports some of its own allocation failures while parsing as syntax
         * errors, which the store can only pass on as a damaged entry or line. */
        int parse_misreport = kind == WALK_JSON && (r == FL_ERR_CORRUPT || r == FL_ERR_FORMAT);
        if (injected && r != FL_OK && r != FL_ERR_NOMEM && !parse_misreport)
            fail_msg("%s, allocation %ld refused: %s (%s), want FL_ERR_NOMEM", ops[o].name, k,
                     fl_status_name(r), fl_store_errmsg(w->f.st));
        if (!injected) {
            if (r != FL_OK)
                fail_msg("%s with no injected failure: %s (%s)", ops[o].name, fl_status_name(r),
                         fl_store_errmsg(w->f.st));
            done = 1;
        }
    }
    if (!done)
        fail_msg("%s never ran clean", ops[o].name);
    /* After the failures the same call still works. */
    fl_status r = ops[o].fn(w, (*seq)++);
    if (r != FL_OK)
        fail_msg("%s after the walk: %s (%s)", ops[o].name, fl_status_name(r),
                 fl_store_errmsg(w->f.st));
    return injected_total;
}

/* Walks every op in table order, except in the Jansson walk: there the json_first ops
 * (export, export_file) come first, on world_make's log. Why: Jansson failures that the store
 * rides out (a parse it misreported as a syntax error is parsed again, see
 * fl__store_audit_parse) leave the call successful, so the appends of the Jansson walk commit
 * an entry for about every third refused allocation: the table's end sees ~3100 entries and
 * ~250 checkpoints. Export's Jansson allocations are the bundle header and one line per
 * checkpoint, the same sites over and over, while every try copies the whole log: walked
 * there, export and export_file took ~8300 tries over a 1.1 MB log (~18 s of the test's 21 s,
 * most of its ~55 s under ASan). On world_make's log (three checkpoints: first, middle and
 * last line) they reach the same sites in a few hundred tries. The store and SQLite walks
 * still export the grown log, and world_check exports and verifies it after every walk. */
static void walk(enum walk_kind kind) {
    struct world w;
    world_make(&w);
    int seq = 0;
    long refused = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t o = 0; o < N_OPS; o++) {
            int first = kind == WALK_JSON && ops[o].json_first;
            if (first == (pass == 0))
                refused += walk_op(&w, o, kind, &seq);
        }
    }
    print_message("%ld allocations refused\n", refused);
    assert_true(refused > 30);
    world_check(&w);
    world_free(&w);
}

static void test_store_allocator_walk(void **state) {
    (void)state;
    walk(WALK_STORE);
}
static void test_sqlite_allocator_walk(void **state) {
    (void)state;
    walk(WALK_SQLITE);
}
static void test_json_allocator_walk(void **state) {
    (void)state;
    walk(WALK_JSON);
}

/* Reading an entry back when Jansson cannot even start its parser is out of memory, not a
 * damaged entry. */
static void test_parse_nomem(void **state) {
    (void)state;
    const char *e = "{\"seq\":0,\"type\":\"x\",\"v\":1}";
    json_t *v = NULL;
    char why[200];
    json_countdown = 1;
    fl_status r = fl__store_audit_parse(e, strlen(e), &v, why, sizeof(why));
    json_countdown = 0;
    assert_int_equal(r, FL_ERR_NOMEM);
    assert_null(v);
    assert_non_null(strstr(why, "out of memory"));
    assert_int_equal(fl__store_audit_parse(e, strlen(e), &v, why, sizeof(why)), FL_OK);
    json_decref(v);
}

/* With no argument: the store allocator walk; "sqlite" or "json": that walk (ctest runs
 * each as its own test, see audit_oom.cmake, so that each stays short under ASan). */
int main(int argc, char **argv) {
    install_hooks();
    const char *which = argc > 1 ? argv[1] : "store";
    const struct CMUnitTest store[] = {cmocka_unit_test(test_store_allocator_walk)};
    const struct CMUnitTest sqlite[] = {cmocka_unit_test(test_sqlite_allocator_walk)};
    const struct CMUnitTest json[] = {cmocka_unit_test(test_parse_nomem),
                                      cmocka_unit_test(test_json_allocator_walk)};
    if (strcmp(which, "store") == 0)
        return cmocka_run_group_tests(store, NULL, NULL);
    if (strcmp(which, "sqlite") == 0)
        return cmocka_run_group_tests(sqlite, NULL, NULL);
    if (strcmp(which, "json") == 0)
        return cmocka_run_group_tests(json, NULL, NULL);
    fprintf(stderr, "usage: %s [store|sqlite|json]\n", argv[0]);
    return 2;
}
