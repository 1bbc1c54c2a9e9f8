/* The audit log over a damaged database and under SQLite allocation failures while a
 * column is read.
 *
 * Damaged rows (written behind the append-only triggers and the CHECK constraints): each
 * is reported as corruption naming what is damaged, or, where the store can go on, gives
 * a log whose damage the offline verifier pinpoints.
 *
 * Column conversions: a text column holding a blob (or an entry holding an integer) makes
 * SQLite allocate while the audit code reads the column, an allocation the plain walks of
 * test_audit_oom never reach. Every allocation of such a call is failed in turn: each must
 * give FL_ERR_NOMEM with a message saying what was being read, never a wrong entry.
 *
 * Plus the rule combinations, argument checks and file-system failures the other audit
 * tests leave out (each named in its test). */
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "audit_internal.h"
#include "merkle_internal.h"
#include "sqlite_fail_hook.h"
#include "test_audit_util.h"

#define EXPECT(f, call, code, word)                                                                \
    do {                                                                                           \
        fl_status r_ = (call);                                                                     \
        if (r_ != (code) || !strstr(fl_store_errmsg((f)->st), (word)))                             \
            fail_msg("%s -> %s (%s), want %s mentioning \"%s\"", #call, fl_status_name(r_),        \
                     fl_store_errmsg((f)->st), fl_status_name(code), (word));                      \
    } while (0)

/* Raw SQL on the store's file: triggers off, CHECK constraints ignored. */
static void tamper(const char *path, const char *sql) {
    sqlite3 *db = store_raw_open(path);
    char *err = NULL;
    int rc = sqlite3_exec(db, "PRAGMA ignore_check_constraints = ON;", NULL, NULL, &err);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("tamper: %s", err ? err : "?");
    sqlite3_close(db);
}

/* SQLite 3.40 converts a blob read as text without allocating unless the value is at least
 * 30 bytes long and 6 mod 8 (its buffer is then one rounding step too short for the
 * terminator), so the values held as blobs below have such lengths: 30 or 38 bytes. */
#define ROUND_CONFIG "{\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}"
#define MECH30 "ddgauss-mmmmmmmmmmmmmmmmmmmmmm"
#define REGION30 "region-rrrrrrrrrrrrrrrrrrrrrrr"
#define POP_NAME30 "second-nnnnnnnnnnnnnnnnnnnnnnn"
#define POP_CONFIG38 "{\"a\":1,\"pad\":\"pppppppppppppppppppppp\"}"
#define POP_REGIONS38 "[\"EU\",\"qqqqqqqqqqqqqqqqqqqqqqqqqqqqq\"]"
#define ORIGIN30 "flotilla.test/audit-origin-30c"
#define ORIGIN21 "flotilla.test/audit21" /* its note (size 10): 190 bytes */

/* Everything of a coordinator round but its audit entry, committed; info is filled for
 * fl_store_audit_append_round (regions from the participants). */
static int64_t round_prepare(struct audit_fx *f, fl_store_audit_round_info *info) {
    fl_store *st = f->st;
    int64_t rid = 0;
    int n = f->n_clients;
    f->now += 60000;
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_round_create(st, &rid, f->pop, 0, f->model, ROUND_CONFIG));
    STORE_OK(st, fl_store_round_start(st, rid));
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof(id), "c%03d", i);
        STORE_OK(st, fl_store_participant_set(st, rid, id, FL_STORE_PARTICIPANT_COMPLETED));
    }
    fl_store_round_counts counts = {n, n, n, 0};
    STORE_OK(st, fl_store_round_set_counts(st, rid, &counts));
    float w[64];
    audit_fx_weights(w, 64, (int)f->round_no + 1);
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, f->pop, f->model, w, sizeof(w), NULL));
    STORE_OK(st, fl_store_round_complete(st, rid, ref.version));
    fl_store_ledger_entry le = {0};
    le.population_id = f->pop;
    le.round_id = rid;
    le.mechanism = "ddgauss";
    le.sampling_rate = 0.01;
    le.noise_multiplier = 1.1;
    le.clip_norm = 1.0;
    le.steps = 1;
    le.participants = n;
    STORE_OK(st, fl_store_ledger_append(st, NULL, &le));
    STORE_OK(st, fl_store_commit(st));
    fl_store_audit_round_info_init(info);
    info->round_id = rid;
    info->epsilon_total = f->eps_total + 0.5;
    info->delta = 1e-7;
    info->coordinator_version = "test-1.0";
    return rid;
}

/* The JSON of entry seq. */
static char *entry_json(struct audit_fx *f, int64_t seq) {
    fl_store_audit_entry *e = NULL;
    STORE_OK(f->st, fl_store_audit_entry_get(f->st, &e, seq));
    char *s = strdup(e->json);
    assert_non_null(s);
    fl_store_free(f->st, e);
    return s;
}

static int64_t log_size(struct audit_fx *f) {
    int64_t n = -1;
    STORE_OK(f->st, fl_store_audit_size(f->st, &n));
    return n;
}

/* ---- damaged rows ---- */

static void test_damaged_rows(void **state) {
    (void)state;
    struct audit_fx f;
    uint8_t root[32];

    /* A tree hash of 31 bytes is as good as missing. */
    audit_fx_setup(&f, 2);
    tamper(f.t.path, "DROP TRIGGER audit_tree_append_only_update;"
                     "UPDATE audit_tree SET hash = zeroblob(31) WHERE level = 0 AND idx = 0;");
    EXPECT(&f, fl_store_audit_root(f.st, root, 1), FL_ERR_CORRUPT,
           "audit tree node (level 0, index 0) is missing");
    audit_fx_teardown(&f);

    /* An empty entry (seq 1, the model_registered the next append replays): corrupt for
     * the append and for export; entry_get returns it as it is, hashed as 0 bytes. */
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "DROP TRIGGER audit_entries_append_only_update;"
                     "UPDATE audit_entries SET data = x'' WHERE seq = 1;");
    EXPECT(&f, fl_store_audit_append_config(f.st, NULL, f.pop, "{}", 8, 1e-6, "[]"), FL_ERR_CORRUPT,
           "audit entry 1: line of 0 bytes");
    uint8_t *buf = NULL;
    size_t len = 0;
    EXPECT(&f, fl_store_audit_export(f.st, &buf, &len), FL_ERR_CORRUPT, "audit entry 1 is empty");
    assert_null(buf);
    fl_store_audit_entry *e = NULL;
    STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, 1));
    uint8_t empty[32];
    fl_store_audit_leaf_hash(empty, "", 0);
    assert_int_equal(e->size, 0);
    assert_memory_equal(e->leaf_hash, empty, 32);
    fl_store_free(f.st, e);
    audit_fx_teardown(&f);

    /* A model whose SHA-256 is damaged cannot be logged. */
    audit_fx_setup(&f, 2);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "DROP TRIGGER models_immutable_update;"
             "UPDATE models SET sha256 = zeroblob(31) WHERE version = %lld;",
             (long long)f.model);
    tamper(f.t.path, sql);
    char want[64];
    snprintf(want, sizeof(want), "model version %lld has no SHA-256", (long long)f.model);
    EXPECT(&f, fl_store_audit_append_model(f.st, NULL, f.pop, f.model), FL_ERR_CORRUPT, want);
    assert_int_equal(log_size(&f), 2);
    audit_fx_teardown(&f);

    /* A checkpoint root of 31 bytes does not match the tree; a public key of 31 bytes
     * leaves no key to export under. */
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "DROP TRIGGER audit_checkpoints_append_only_update;"
                     "UPDATE audit_checkpoints SET root = zeroblob(31);");
    EXPECT(&f, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk), FL_ERR_CORRUPT,
           "no longer matches the latest checkpoint");
    audit_fx_teardown(&f);
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "DROP TRIGGER audit_checkpoints_append_only_update;"
                     "UPDATE audit_checkpoints SET public_key = zeroblob(31);");
    EXPECT(&f, fl_store_audit_export(f.st, &buf, &len), FL_ERR_CORRUPT,
           "latest checkpoint row is damaged");
    audit_fx_teardown(&f);
}

/* Damaged round inputs: a ledger mechanism that is not printable is logged as "unknown";
 * a completed round whose result model is gone is refused (no model out), nothing logged. */
static void test_damaged_round_inputs(void **state) {
    (void)state;
    struct audit_fx f;
    fl_store_audit_round_info info;
    int64_t seq = -1;
    audit_fx_setup(&f, 3);
    round_prepare(&f, &info);
    tamper(f.t.path, "DROP TRIGGER privacy_ledger_append_only_update;"
                     "UPDATE privacy_ledger SET mechanism = 'dd gauss';");
    STORE_OK(f.st, fl_store_audit_append_round(f.st, &seq, &info));
    char *j = entry_json(&f, seq);
    assert_non_null(strstr(j, "\"mechanism\":\"unknown\""));
    free(j);
    audit_fx_teardown(&f);

    audit_fx_setup(&f, 3);
    int64_t rid = round_prepare(&f, &info);
    char sql[128];
    snprintf(sql, sizeof(sql), "UPDATE rounds SET result_version = NULL WHERE id = %lld;",
             (long long)rid);
    tamper(f.t.path, sql);
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE,
           "a completed round has no model out");
    assert_int_equal(log_size(&f), 2);
    audit_fx_teardown(&f);
}

/* The latest round entry replaced by a canonical object with no outcome, privacy or model:
 * the store replays it as a round that released nothing (the appends go on), and the
 * offline verifier names that entry. */
static void test_damaged_latest_round(void **state) {
    (void)state;
    struct audit_fx f;
    int64_t seq = -1;
    audit_fx_setup(&f, 3);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq));
    assert_int_equal(seq, 2);
    tamper(f.t.path, "DROP TRIGGER audit_entries_append_only_update;"
                     "UPDATE audit_entries SET data = CAST('{\"round\":7,\"type\":\"round\"}' AS "
                     "BLOB) WHERE seq = 2;");
    /* Round 7 is now the last logged one; the refused round must come after it, and the
     * total it carries is the replayed one (0: the damaged entry has no privacy). */
    EXPECT(&f, fl_store_audit_append_refusal(f.st, NULL, f.pop, 3, 9.0, 1e-7), FL_ERR_MISUSE,
           "does not come after round 7");
    STORE_OK(f.st, fl_store_audit_append_refusal(f.st, &seq, f.pop, 8, 9.0, 1e-7));
    char *j = entry_json(&f, seq);
    assert_non_null(strstr(j, "\"epsilon_total_e9\":0}"));
    free(j);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    STORE_OK(f.st, fl_store_audit_bundle_open(&b, buf, len, NULL));
    assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_ERR_CORRUPT);
    assert_int_equal(v.ok, 0);
    assert_int_equal(v.bad_entry, 2);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

/* ---- SQLite allocation failures while converting a column ---- */

struct conv_walk {
    struct audit_fx *f;
    const char *want[3]; /* messages the refusals must show, each at least once */
    long seen[3];
    fl_status final; /* what the call returns once nothing fails */
    const char *final_word;
};

typedef fl_status (*conv_fn)(struct audit_fx *f, void *ctx);

/* Runs fn with SQLite's k-th allocation failing, k = 1, 2, ... until a run injects no
 * failure. Each call runs in a transaction that is rolled back, so every run starts from
 * the same state. (The tampering drops triggers before the store's last use of the
 * schema: a schema change seen inside the walk would make every run reload it first,
 * and the failures would all land in that reload.) */
static void conv_walk_run(struct conv_walk *w, conv_fn fn, void *ctx) {
    fl_store *st = w->f->st;
    int done = 0;
    for (long k = 1; k < 20000 && !done; k++) {
        STORE_OK(st, fl_store_begin(st));
        long before = sqlite_failures;
        sqlite_countdown = k;
        fl_status r = fn(w->f, ctx);
        sqlite_countdown = 0;
        int injected = sqlite_failures != before;
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", fl_store_errmsg(st));
        (void)fl_store_rollback(st);
        assert_int_equal(fl_store_in_transaction(st), 0);
        if (!injected) {
            if (r != w->final || !strstr(msg, w->final_word))
                fail_msg("no failure injected: %s (%s), want %s", fl_status_name(r), msg,
                         fl_status_name(w->final));
            done = 1;
            break;
        }
        if (r == w->final && strstr(msg, w->final_word))
            continue; /* SQLite got round the failure */
        if (r != FL_ERR_NOMEM)
            fail_msg("allocation %ld refused: %s (%s), want FL_ERR_NOMEM", k, fl_status_name(r),
                     msg);
        if (getenv("CONV_WALK_DEBUG"))
            print_message("k=%ld: %s\n", k, msg);
        for (int i = 0; i < 3; i++)
            if (w->want[i] && strstr(msg, w->want[i]))
                w->seen[i]++;
    }
    assert_true(done);
    for (int i = 0; i < 3; i++)
        if (w->want[i] && w->seen[i] == 0)
            fail_msg("no refusal said \"%s\"", w->want[i]);
}

static fl_status call_append_population(struct audit_fx *f, void *ctx) {
    return fl_store_audit_append_population(f->st, NULL, *(int64_t *)ctx);
}

static fl_status call_append_round(struct audit_fx *f, void *ctx) {
    int64_t seq = -1;
    fl_status r = fl_store_audit_append_round(f->st, &seq, ctx);
    if (r == FL_OK) {
        /* never a guessed value in the entry (read back with nothing failing) */
        long left = sqlite_countdown;
        sqlite_countdown = 0;
        char *j = entry_json(f, seq);
        sqlite_countdown = left;
        assert_non_null(strstr(j, "\"mechanism\":\"" MECH30 "\""));
        assert_non_null(strstr(j, "\"regions\":{\"" REGION30 "\":3}"));
        free(j);
    }
    return r;
}

static fl_status call_export(struct audit_fx *f, void *ctx) {
    (void)ctx;
    uint8_t *buf = NULL;
    size_t len = 0;
    fl_status r = fl_store_audit_export(f->st, &buf, &len);
    if (r == FL_OK) {
        fl_store_audit_bundle *b = NULL;
        fl_store_audit_verdict v;
        STORE_OK(f->st, fl_store_audit_bundle_open(&b, buf, len, NULL));
        assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
        fl_store_audit_bundle_close(b);
    } else {
        assert_null(buf);
    }
    fl_store_free(f->st, buf);
    return r;
}

/* Export of a log whose entry 0 is damaged: the verifier names that entry. */
static fl_status call_export_damaged(struct audit_fx *f, void *ctx) {
    (void)ctx;
    uint8_t *buf = NULL;
    size_t len = 0;
    fl_status r = fl_store_audit_export(f->st, &buf, &len);
    if (r == FL_OK) {
        fl_store_audit_bundle *b = NULL;
        fl_store_audit_verdict v;
        STORE_OK(f->st, fl_store_audit_bundle_open(&b, buf, len, NULL));
        assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_ERR_FORMAT); /* not JSON */
        assert_int_equal(v.ok, 0);
        assert_int_equal(v.bad_entry, 0);
        fl_store_audit_bundle_close(b);
    }
    fl_store_free(f->st, buf);
    return r;
}

static fl_status call_entry_get(struct audit_fx *f, void *ctx) {
    fl_store_audit_entry *e = NULL;
    fl_status r = fl_store_audit_entry_get(f->st, &e, *(int64_t *)ctx);
    if (r == FL_OK) {
        assert_string_equal(e->json, "12345");
        assert_int_equal(e->size, 5);
    } else {
        assert_null(e);
    }
    fl_store_free(f->st, e);
    return r;
}

static fl_status call_append_config(struct audit_fx *f, void *ctx) {
    (void)ctx;
    return fl_store_audit_append_config(f->st, NULL, f->pop, "{}", 8, 1e-6, "[]");
}

static fl_status call_export_file(struct audit_fx *f, void *ctx) {
    const char *path = ctx;
    fl_status r = fl_store_audit_export_file(f->st, path);
    struct stat sb;
    if (r != FL_OK)
        assert_int_equal(stat(path, &sb), -1); /* nothing half-written left */
    return r;
}

static void test_nomem_converting_columns(void **state) {
    (void)state;
    struct audit_fx f;

    /* A population's name, config and regions held as blobs, logged for the first time. */
    audit_fx_setup(&f, 2);
    int64_t p2 = 0;
    STORE_OK(f.st, fl_store_population_create(f.st, &p2, POP_NAME30, POP_CONFIG38, 4.0, 1e-6,
                                              POP_REGIONS38));
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE populations SET name = CAST(name AS BLOB), config_json = "
             "CAST(config_json AS BLOB), allowed_regions_json = CAST(allowed_regions_json AS "
             "BLOB) WHERE id = %lld;",
             (long long)p2);
    tamper(f.t.path, sql);
    struct conv_walk w = {&f, {"out of memory building an audit entry"}, {0}, FL_OK, ""};
    conv_walk_run(&w, call_append_population, &p2);
    audit_fx_teardown(&f);

    /* A round's config, its ledger mechanism and its clients' regions held as blobs (the
     * regions come through GROUP BY, which copies them: no allocation left to fail). */
    audit_fx_setup(&f, 3);
    fl_store_audit_round_info info;
    tamper(f.t.path, "DROP TRIGGER privacy_ledger_append_only_update;");
    STORE_OK(f.st, fl_store_audit_append_config(f.st, NULL, f.pop, "{}", 8, 1e-6, "[]"));
    round_prepare(&f, &info);
    tamper(f.t.path, "UPDATE privacy_ledger SET mechanism = CAST('" MECH30 "' AS BLOB);"
                     "UPDATE rounds SET config_json = CAST(config_json AS BLOB);"
                     "UPDATE clients SET region = CAST('" REGION30 "' AS BLOB);");
    struct conv_walk wr = {
        &f,
        {"out of memory reading a round", "out of memory reading the privacy ledger"},
        {0},
        FL_OK,
        ""};
    conv_walk_run(&wr, call_append_round, &info);
    audit_fx_teardown(&f);

    /* A checkpoint's origin and note held as blobs: export, to memory and to a file. */
    static const char *const origins[] = {ORIGIN30, ORIGIN21};
    static const char *const said[] = {"out of memory reading checkpoints",
                                       "out of memory writing checkpoints"};
    for (int i = 0; i < 2; i++) {
        audit_fx_setup(&f, 2);
        tamper(f.t.path, "DROP TRIGGER audit_checkpoints_append_only_update;");
        for (int k = 0; i == 1 && k < 8; k++) /* 10 entries: a note of 190 bytes */
            STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
        STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, origins[i], f.sk));
        tamper(f.t.path, "UPDATE audit_checkpoints SET origin = CAST(origin AS BLOB), "
                         "note = CAST(note AS BLOB);");
        struct conv_walk we = {&f, {said[i]}, {0}, FL_OK, ""};
        conv_walk_run(&we, call_export, NULL);
        char path[400];
        snprintf(path, sizeof(path), "%s/bundle.jsonl", f.t.dir);
        struct conv_walk wf = {&f, {NULL}, {0}, FL_OK, ""};
        conv_walk_run(&wf, call_export_file, path);
        audit_fx_teardown(&f);
    }

    /* An entry held as an integer (the first one: the first row read into its register,
     * which has no buffer yet to convert into): read back as its text, refused by the
     * append that replays it, exported as it is; under allocation failure each says "out
     * of memory", never a wrong entry. */
    audit_fx_setup(&f, 2);
    tamper(f.t.path, "DROP TRIGGER audit_entries_append_only_update;");
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "UPDATE audit_entries SET data = 12345 WHERE seq = 0;");
    int64_t zero = 0;
    struct conv_walk wg = {&f, {"out of memory"}, {0}, FL_OK, ""};
    conv_walk_run(&wg, call_entry_get, &zero);
    struct conv_walk wc = {
        &f, {"audit entry 0: out of memory"}, {0}, FL_ERR_CORRUPT, "audit entry 0: not JSON"};
    conv_walk_run(&wc, call_append_config, NULL);
    struct conv_walk wx = {&f, {"audit entry 0 could not be read: out of memory"}, {0}, FL_OK, ""};
    conv_walk_run(&wx, call_export_damaged, NULL);
    audit_fx_teardown(&f);
}

/* ---- rule combinations, argument checks, file-system failures ---- */

/* Rules: a round whose end time is unknown (0) and one with no model in while the
 * population has no model yet are accepted; a NULL entry is not an object. */
static void test_rule_combinations(void **state) {
    (void)state;
    struct audit_fx f;
    int64_t seq = -1;
    audit_fx_setup(&f, 3);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq));
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    for (int64_t i = 0; i < seq; i++) {
        char *j = entry_json(&f, i);
        json_t *e = json_loads(j, 0, NULL);
        assert_non_null(e);
        assert_int_equal(fl__store_audit_apply(e, &pop), FL_OK);
        json_decref(e);
        free(j);
    }
    char *j = entry_json(&f, seq);
    json_t *e = json_loads(j, 0, NULL);
    free(j);
    assert_non_null(e);
    char why[256];
    int budget = 0;
    assert_int_equal(fl__store_audit_check(e, seq, &pop, why, sizeof(why), &budget), 0);
    /* ended_at unknown */
    json_t *copy = json_deep_copy(e);
    assert_int_equal(json_object_set_new(copy, "ended_at", json_integer(0)), 0);
    if (fl__store_audit_check(copy, seq, &pop, why, sizeof(why), &budget) != 0)
        fail_msg("ended_at 0 refused: %s", why);
    json_decref(copy);
    /* no model in, none known yet: the round's model out is the first */
    copy = json_deep_copy(e);
    assert_int_equal(json_object_set_new(copy, "model_in", json_null()), 0);
    struct fl__store_audit_pop no_model = pop;
    no_model.has_model = 0;
    if (fl__store_audit_check(copy, seq, &no_model, why, sizeof(why), &budget) != 0)
        fail_msg("model_in null refused: %s", why);
    /* ... but not once a model is known */
    assert_int_equal(fl__store_audit_check(copy, seq, &pop, why, sizeof(why), &budget), -1);
    assert_non_null(strstr(why, "lineage: model in"));
    json_decref(copy);
    assert_int_equal(fl__store_audit_check(NULL, seq, &pop, why, sizeof(why), &budget), -1);
    assert_string_equal(why, "not an object");
    json_decref(e);
    fl__store_audit_pop_free(&pop);
    audit_fx_teardown(&f);
}

/* A coordinator version longer than 64 bytes or with a byte above 0x7e is refused. */
static void test_coordinator_version_checked(void **state) {
    (void)state;
    struct audit_fx f;
    fl_store_audit_round_info info;
    audit_fx_setup(&f, 3);
    round_prepare(&f, &info);
    char long_version[66];
    memset(long_version, 'v', 65);
    long_version[65] = '\0';
    const char *bad[] = {long_version, "flotilla/1.0\xc3\xa9"};
    for (int i = 0; i < 2; i++) {
        info.coordinator_version = bad[i];
        EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE,
               "coordinator_version");
    }
    long_version[64] = '\0'; /* 64 bytes: fine */
    info.coordinator_version = long_version;
    STORE_OK(f.st, fl_store_audit_append_round(f.st, NULL, &info));
    audit_fx_teardown(&f);
}

/* export_file to a device whose writes fail when flushed (/dev/full): FL_ERR_IO naming
 * the path, and the device is left alone (only a regular file is removed). */
static void test_export_to_full_device(void **state) {
    (void)state;
    struct stat sb;
    if (stat("/dev/full", &sb) != 0 || !S_ISCHR(sb.st_mode))
        skip();
    struct audit_fx f;
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    EXPECT(&f, fl_store_audit_export_file(f.st, "/dev/full"), FL_ERR_IO, "writing /dev/full");
    assert_int_equal(stat("/dev/full", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));
    audit_fx_teardown(&f);
}

/* Signing whose commit cannot be written (a file size limit below one WAL frame): the
 * call fails, hands back no checkpoint and signs nothing; with the limit gone it works. */
static void test_checkpoint_commit_fails(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 2);
    fl_store_audit_checkpoint *cp = NULL;
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    fl_status r = fl_store_audit_checkpoint_sign(f.st, &cp, AUDIT_ORIGIN, f.sk);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    if (r == FL_OK)
        fail_msg("signing under a 1 KiB file size limit succeeded");
    assert_null(cp);
    assert_int_equal(fl_store_in_transaction(f.st), 0);
    EXPECT(&f, fl_store_audit_checkpoint_latest(f.st, &cp), FL_ERR_NOT_FOUND, "no checkpoint");
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, &cp, AUDIT_ORIGIN, f.sk));
    assert_int_equal(cp->tree_size, 2);
    fl_store_free(f.st, cp);
    audit_fx_teardown(&f);
}

/* Offline pieces: a bundle given as (NULL, 0) is an empty bundle; a root whose base64
 * decodes to 31 bytes is malformed; the hash of an unaligned power-of-two range is
 * MTH of those leaves. */
static void test_offline_edges(void **state) {
    (void)state;
    fl_store_audit_bundle *b = NULL;
    assert_int_equal(fl_store_audit_bundle_open(&b, NULL, 0, NULL), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_store_audit_bundle_errmsg(b), "empty"));
    fl_store_audit_bundle_close(b);

    uint8_t pk[32], sk[64], seed[32], root[32];
    memset(seed, 3, sizeof(seed));
    crypto_sign_seed_keypair(pk, sk, seed);
    memset(root, 0, sizeof(root));
    char vkey[256], *note = NULL;
    size_t len = 0;
    assert_int_equal(fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, pk), FL_OK);
    assert_int_equal(fl__store_audit_note_sign(NULL, AUDIT_ORIGIN, 5, root, sk, &note, &len),
                     FL_OK);
    assert_int_equal(fl_store_audit_checkpoint_verify(note, len, vkey, NULL, NULL), FL_OK);
    /* line 3 is 44 base64 characters of 32 zero bytes: "AAA...A=" */
    char *line3 = strchr(strchr(note, '\n') + 1, '\n') + 1;
    assert_memory_equal(line3 + 42, "A=\n", 3);
    line3[42] = '='; /* "...AA==": 31 bytes */
    assert_int_equal(fl_store_audit_checkpoint_verify(note, len, vkey, NULL, NULL), FL_ERR_FORMAT);
    fl__free(NULL, note, len + 1);

    struct fl__store_merkle_mem t;
    fl__store_merkle_mem_init(&t, NULL);
    uint8_t leaf[4][32], want[32], got[32];
    for (int i = 0; i < 4; i++) {
        fl_store_audit_leaf_hash(leaf[i], &i, sizeof(i));
        assert_int_equal(fl__store_merkle_mem_append(&t, leaf[i]), FL_OK);
    }
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    fl__store_merkle_node(want, leaf[1], leaf[2]);
    assert_int_equal(fl__store_merkle_range(&src, 1, 3, got), FL_OK);
    assert_memory_equal(got, want, 32);
    fl__store_merkle_mem_free(&t);
}

int main(void) {
    install_sqlite_hook();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_damaged_rows),
        cmocka_unit_test(test_damaged_round_inputs),
        cmocka_unit_test(test_damaged_latest_round),
        cmocka_unit_test(test_nomem_converting_columns),
        cmocka_unit_test(test_rule_combinations),
        cmocka_unit_test(test_coordinator_version_checked),
        cmocka_unit_test(test_export_to_full_device),
        cmocka_unit_test(test_checkpoint_commit_fails),
        cmocka_unit_test(test_offline_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
