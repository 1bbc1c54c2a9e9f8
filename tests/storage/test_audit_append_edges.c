/* The store side of the audit log at its edges: every field of the round description the
 * coordinator passes is checked (FL_ERR_MISUSE naming it), optional fields take effect
 * (task config hash, regions given twice, several ledger entries, a round with no base
 * model), an entry too long for the log is refused, proof arguments out of range, a clock
 * before 1970, and a database damaged behind the triggers (missing or short tree hashes,
 * an entry that is not JSON, a gap in the entries, a damaged checkpoint row) is reported
 * as FL_ERR_CORRUPT, never trusted. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "test_audit_util.h"

/* A finished (abandoned) round not yet logged, for the info checks. */
static int64_t abandoned_round(struct audit_fx *f) {
    int64_t rid = 0;
    STORE_OK(f->st, fl_store_round_create(f->st, &rid, f->pop, 0, f->model, NULL));
    STORE_OK(f->st, fl_store_round_abandon(f->st, rid, "test"));
    return rid;
}

#define EXPECT(f, call, code, word)                                                                \
    do {                                                                                           \
        fl_status r_ = (call);                                                                     \
        if (r_ != (code) || !strstr(fl_store_errmsg((f)->st), (word)))                             \
            fail_msg("%s -> %s (%s), want %s mentioning \"%s\"", #call, fl_status_name(r_),        \
                     fl_store_errmsg((f)->st), fl_status_name(code), (word));                      \
    } while (0)

static void test_round_info_checked(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    int64_t rid = abandoned_round(&f);
    fl_store_audit_round_info in;
    fl_store_audit_region two[2] = {{"EU", 1}, {"UK", 1}};
    static const fl_store_audit_region spaced[1] = {{"E U", 1}};
    static const fl_store_audit_region zero[1] = {{"EU", 0}};
    static const fl_store_audit_region huge[1] = {{"EU", INT64_MAX}};
    int64_t before = 0, after = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &before));
#define INFO_RESET()                                                                               \
    do {                                                                                           \
        fl_store_audit_round_info_init(&in);                                                       \
        in.round_id = rid;                                                                         \
    } while (0)
    INFO_RESET();
    in.dropped_by_phase[FL_STORE_AUDIT_PHASE_UNMASK] = -1;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "dropped_by_phase[4]");
    INFO_RESET();
    in.dropped_by_phase[0] = INT64_MAX;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "dropped_by_phase[0]");
    const int64_t sa[][3] = {{0, 1, 1}, {2, 1, 2}, {1, 2, 1}, {1, 1, INT64_MAX}};
    for (int i = 0; i < 4; i++) {
        INFO_RESET();
        in.secagg_enabled = 1;
        in.secagg_t = sa[i][0];
        in.secagg_k = sa[i][1];
        in.secagg_n = sa[i][2];
        EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "secagg");
    }
    INFO_RESET();
    in.epsilon_total = NAN;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "epsilon_total");
    INFO_RESET();
    in.epsilon_total = -1;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "epsilon_total");
    INFO_RESET();
    in.delta = 1.0;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "delta");
    INFO_RESET();
    in.delta = -0.1;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "delta");
    INFO_RESET();
    in.n_regions = 2; /* regions NULL */
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "regions");
    INFO_RESET();
    in.regions = two;
    in.n_regions = 1001;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "regions");
    const fl_store_audit_region *bad[] = {spaced, zero, huge};
    for (int i = 0; i < 3; i++) {
        INFO_RESET();
        in.regions = bad[i];
        in.n_regions = 1;
        EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "regions[0]");
    }
    two[0].region = NULL;
    INFO_RESET();
    in.regions = two;
    in.n_regions = 2;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "regions[0]");
    INFO_RESET();
    in.coordinator_version = "";
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "coordinator_version");
    INFO_RESET();
    in.coordinator_version = "v 1";
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_MISUSE, "coordinator_version");
    INFO_RESET();
    in.round_id = 9999;
    EXPECT(&f, fl_store_audit_append_round(f.st, NULL, &in), FL_ERR_NOT_FOUND, "9999");
    STORE_OK(f.st, fl_store_audit_size(f.st, &after));
    assert_int_equal(after, before);
    /* Config terms and retention are checked too. */
    EXPECT(&f, fl_store_audit_append_config(f.st, NULL, f.pop, "{}", 1e-12, 0, "[]"),
           FL_ERR_MISUSE, "epsilon");
    EXPECT(&f, fl_store_audit_append_config(f.st, NULL, f.pop, "{}", 1, 1.0, "[]"), FL_ERR_MISUSE,
           "delta");
    EXPECT(&f, fl_store_audit_append_config(f.st, NULL, f.pop, "{}", 1, NAN, "[]"), FL_ERR_MISUSE,
           "delta");
    EXPECT(&f, fl_store_retention_sweep(f.st, NULL, f.now + 1), FL_ERR_MISUSE, "retention_ms");
    audit_fx_teardown(&f);
}

static void test_optional_fields(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    fl_store *st = f.st;
    /* A completed round with two ledger entries (steps add up), regions given with a
     * repeated name (counts add up) and the task config hash given by the caller. */
    int64_t rid = 0, seq = -1;
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_round_create(st, &rid, f.pop, 0, f.model, "{}"));
    STORE_OK(st, fl_store_round_start(st, rid));
    fl_store_round_counts counts = {4, 4, 4, 0};
    STORE_OK(st, fl_store_round_set_counts(st, rid, &counts));
    float w[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, f.pop, f.model, w, sizeof(w), NULL));
    STORE_OK(st, fl_store_round_complete(st, rid, ref.version));
    for (int i = 0; i < 2; i++) {
        fl_store_ledger_entry le = {0};
        le.population_id = f.pop;
        le.round_id = rid;
        le.mechanism = "gaussian";
        le.sampling_rate = 0.25;
        le.noise_multiplier = 2;
        le.clip_norm = 0.5;
        le.steps = 3;
        STORE_OK(st, fl_store_ledger_append(st, NULL, &le));
    }
    fl_store_audit_round_info in;
    fl_store_audit_round_info_init(&in);
    in.round_id = rid;
    uint8_t task[32];
    memset(task, 0xab, sizeof(task));
    in.task_config_sha256 = task;
    fl_store_audit_region reg[3] = {{"EU", 1}, {"UK", 2}, {"EU", 1}};
    in.regions = reg;
    in.n_regions = 3;
    in.epsilon_total = 1.0;
    in.coordinator_version = "coord-2.0";
    STORE_OK(st, fl_store_audit_append_round(st, &seq, &in));
    STORE_OK(st, fl_store_commit(st));
    fl_store_audit_entry *e = NULL;
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq));
    assert_non_null(strstr(e->json, "\"regions\":{\"EU\":2,\"UK\":2}"));
    assert_non_null(strstr(e->json, "\"steps\":6"));
    assert_non_null(strstr(e->json, "\"task_config_sha256\":\"abababab"));
    assert_non_null(strstr(e->json, "\"coordinator\":\"coord-2.0\""));
    fl_store_free(st, e);

    /* Steps of several ledger entries saturate instead of overflowing. */
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_round_create(st, &rid, f.pop, 0, ref.version, "{}"));
    STORE_OK(st, fl_store_round_start(st, rid));
    fl_store_round_counts three = {4, 3, 3, 0};
    STORE_OK(st, fl_store_round_set_counts(st, rid, &three));
    w[0] = 100;
    fl_store_model_ref ref2;
    STORE_OK(st, fl_store_model_put(st, &ref2, f.pop, ref.version, w, sizeof(w), NULL));
    STORE_OK(st, fl_store_round_complete(st, rid, ref2.version));
    for (int i = 0; i < 2; i++) {
        fl_store_ledger_entry le = {0};
        le.population_id = f.pop;
        le.round_id = rid;
        le.mechanism = "gaussian";
        le.sampling_rate = 0.25;
        le.clip_norm = 0.5;
        le.steps = INT64_MAX - 1;
        STORE_OK(st, fl_store_ledger_append(st, NULL, &le));
    }
    fl_store_audit_round_info_init(&in);
    in.round_id = rid;
    in.epsilon_total = 1.5;
    in.regions = reg + 1; /* UK 2, EU 1 */
    in.n_regions = 2;
    STORE_OK(st, fl_store_audit_append_round(st, &seq, &in));
    STORE_OK(st, fl_store_commit(st));
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq));
    assert_non_null(strstr(e->json, "\"steps\":9223372036854775807"));
    fl_store_free(st, e);

    /* A new population with no model: a round with no base model logs model_in null. */
    int64_t p2 = 0;
    STORE_OK(st, fl_store_population_create(st, &p2, "fresh", "{}", 1, 0, "[]"));
    STORE_OK(st, fl_store_round_create(st, &rid, p2, 0, 0, NULL));
    STORE_OK(st, fl_store_round_abandon(st, rid, "no model yet"));
    fl_store_audit_round_info_init(&in);
    in.round_id = rid;
    STORE_OK(st, fl_store_audit_append_round(st, &seq, &in));
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq));
    assert_non_null(strstr(e->json, "\"model_in\":null"));
    assert_non_null(strstr(e->json, "\"population\":\"fresh\""));
    fl_store_free(st, e);
    /* The population_created entry was added first, automatically. */
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq - 1));
    assert_non_null(strstr(e->json, "\"type\":\"population_created\""));
    fl_store_free(st, e);

    /* A model of another population cannot be registered for this one. */
    EXPECT(&f, fl_store_audit_append_model(st, NULL, p2, f.model), FL_ERR_MISUSE, "population");
    /* An entry longer than 64 KiB (1000 allowed regions of 64 characters) is refused. */
    size_t cap = 1000 * 70 + 16, at = 0;
    char *regions = malloc(cap);
    regions[at++] = '[';
    for (int i = 0; i < 1000; i++)
        at += (size_t)snprintf(regions + at, cap - at, "%s\"%064d\"", i ? "," : "", i);
    regions[at++] = ']';
    regions[at] = '\0';
    EXPECT(&f, fl_store_audit_append_config(st, NULL, f.pop, "{}", 8, 1e-6, regions),
           FL_ERR_TOO_LARGE, "64 KiB");
    free(regions);
    audit_fx_teardown(&f);
}

static void test_proof_arguments(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 2);
    uint8_t proof[8][32], root[32], leaf[32];
    size_t n = 0;
    memset(root, 0, 32);
    memset(leaf, 0, 32);
    assert_int_equal(fl_store_audit_inclusion_proof(f.st, proof, 8, &n, -1, 2), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_consistency_proof(f.st, proof, 8, &n, -1, 2), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_consistency_proof(f.st, proof, 8, &n, 1, 3), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_root(f.st, root, 3), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_root(f.st, root, -1), FL_ERR_RANGE);
    /* The store-free verifiers refuse impossible arguments. */
    assert_int_equal(fl_store_audit_verify_inclusion(NULL, 0, 1, proof, 0, root), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_inclusion(leaf, 0, 1, proof, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_inclusion(leaf, 0, 1, NULL, 1, root), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_inclusion(leaf, -1, 1, proof, 0, root), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_inclusion(leaf, 0, -1, proof, 0, root), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_consistency(1, 2, proof, 0, NULL, root), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_consistency(1, 2, proof, 0, root, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_consistency(1, 2, NULL, 1, root, root), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_consistency(-1, 2, proof, 0, root, root),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_consistency(1, -2, proof, 0, root, root),
                     FL_ERR_MISUSE);
    /* Leaf hash of nothing: SHA-256(0x00); NULL out is a no-op. */
    uint8_t want[32];
    const uint8_t zero = 0;
    crypto_hash_sha256(want, &zero, 1);
    fl_store_audit_leaf_hash(leaf, NULL, 5);
    assert_memory_equal(leaf, want, 32);
    fl_store_audit_leaf_hash(NULL, "x", 1);
    audit_fx_teardown(&f);
}

/* A clock before 1970 is logged as time 0, not as a negative time the rules refuse. */
static int64_t clock_before_1970(void *user) {
    (void)user;
    return -5000;
}

static void test_clock_before_1970(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "clock.db");
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.clock = clock_before_1970;
    fl_store *st = NULL;
    STORE_OK(st, fl_store_open(&st, t.path, &cfg));
    int64_t pop = 0, seq = -1;
    STORE_OK(st, fl_store_population_create(st, &pop, "p", "{}", 1, 0, "[]"));
    STORE_OK(st, fl_store_audit_append_population(st, &seq, pop));
    fl_store_audit_entry *e = NULL;
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq));
    assert_non_null(strstr(e->json, "\"time\":0,"));
    fl_store_free(st, e);
    /* Retention needs a clock after the retention period. */
    assert_int_equal(fl_store_retention_sweep(st, NULL, 1000), FL_ERR_MISUSE);
    fl_store_close(st);
    store_tdir_rm(&t);
}

/* Raw SQL on the store's file, dropping the append-only triggers first. */
static void tamper(const char *path, const char *sql) {
    sqlite3 *db = store_raw_open(path);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("tamper: %s", err ? err : "?");
    sqlite3_close(db);
}

static void test_damage_detected(void **state) {
    (void)state;
    uint8_t root[32];
    uint8_t proof[8][32];
    size_t n = 0;
    /* A tree hash that is missing (the schema's CHECK keeps them 32 bytes). */
    struct audit_fx f;
    audit_fx_setup(&f, 2);
    tamper(f.t.path, "DROP TRIGGER audit_tree_append_only_delete;"
                     "DELETE FROM audit_tree WHERE level = 1 AND idx = 0;");
    EXPECT(&f, fl_store_audit_root(f.st, root, 2), FL_ERR_CORRUPT, "audit tree");
    tamper(f.t.path, "DELETE FROM audit_tree WHERE level = 0 AND idx = 0;");
    EXPECT(&f, fl_store_audit_inclusion_proof(f.st, proof, 8, &n, 1, 2), FL_ERR_CORRUPT,
           "audit tree");
    audit_fx_teardown(&f);

    /* An entry that is not JSON: the next append that reads it refuses to go on. */
    audit_fx_setup(&f, 2);
    tamper(f.t.path, "DROP TRIGGER audit_entries_append_only_update;"
                     "UPDATE audit_entries SET data = CAST('not json' AS BLOB) WHERE seq = 0;");
    EXPECT(&f, fl_store_audit_append_config(f.st, NULL, f.pop, "{}", 8, 1e-6, "[]"),
           FL_ERR_CORRUPT, "audit entry 0");
    audit_fx_teardown(&f);

    /* A gap in the entries: export refuses. */
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "DROP TRIGGER audit_entries_append_only_delete;"
                     "DELETE FROM audit_entries WHERE seq = 1;");
    uint8_t *buf = NULL;
    size_t len = 0;
    EXPECT(&f, fl_store_audit_export(f.st, &buf, &len), FL_ERR_CORRUPT, "audit");
    assert_null(buf);
    audit_fx_teardown(&f);

    /* The last entry gone: fewer entries than the checkpoint covers. */
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "DROP TRIGGER audit_entries_append_only_delete;"
                     "DELETE FROM audit_entries WHERE seq = 1;");
    EXPECT(&f, fl_store_audit_export(f.st, &buf, &len), FL_ERR_CORRUPT,
           "audit log has 1 entries, checkpoint 2");
    audit_fx_teardown(&f);

    /* A checkpoint root that the tree does not give, with nothing appended since. */
    audit_fx_setup(&f, 2);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    tamper(f.t.path, "DROP TRIGGER audit_checkpoints_append_only_update;"
                     "UPDATE audit_checkpoints SET root = zeroblob(32);");
    EXPECT(&f, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk), FL_ERR_CORRUPT,
           "no longer matches the latest checkpoint");
    audit_fx_teardown(&f);

    /* A damaged checkpoint row: its root, its origin. */
    const char *damage[] = {
        "UPDATE audit_checkpoints SET root = zeroblob(32);",
        "UPDATE audit_checkpoints SET origin = 'bad origin';",
    };
    for (int i = 0; i < 2; i++) {
        audit_fx_setup(&f, 2);
        STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
        char sql[256];
        snprintf(sql, sizeof(sql), "DROP TRIGGER audit_checkpoints_append_only_update;%s",
                 damage[i]);
        tamper(f.t.path, sql);
        if (i == 0) {
            /* The stored tree no longer gives the signed root: signing again is refused. */
            STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
            EXPECT(&f, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk),
                   FL_ERR_CORRUPT, "");
        } else {
            EXPECT(&f, fl_store_audit_export(f.st, &buf, &len), FL_ERR_CORRUPT, "origin");
        }
        audit_fx_teardown(&f);
    }
}

/* export_file when it cannot finish: a FIFO is written but not fsync-able, and is left
 * in place (only a regular file is removed after a failure); a file size limit makes the
 * write itself fail; a failure before any byte removes the regular file it created. */
static void test_export_file_failures(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    char fifo[400], file[400];
    snprintf(fifo, sizeof(fifo), "%s/bundle.fifo", f.t.dir);
    snprintf(file, sizeof(file), "%s/bundle.jsonl", f.t.dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* a reader, so that opening to write works */
    assert_true(rd >= 0);
    struct stat sb;
    /* No checkpoint yet: nothing to export; the FIFO stays, the regular file goes. */
    EXPECT(&f, fl_store_audit_export_file(f.st, fifo), FL_ERR_NOT_FOUND, "checkpoint");
    assert_int_equal(stat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    EXPECT(&f, fl_store_audit_export_file(f.st, file), FL_ERR_NOT_FOUND, "checkpoint");
    assert_int_equal(stat(file, &sb), -1);
    /* With a checkpoint: the bytes go through the FIFO, fsync of a FIFO fails. */
    for (int i = 0; i < 12; i++)
        STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    EXPECT(&f, fl_store_audit_export_file(f.st, fifo), FL_ERR_IO, "writing");
    assert_int_equal(stat(fifo, &sb), 0);
    char head[16] = {0};
    assert_true(read(rd, head, 15) == 15);
    assert_memory_equal(head, "{\"checkpoints\":", 15);
    close(rd);
    /* A file size limit below the bundle's size: the write fails, the file is removed. */
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_free(f.st, buf);
    assert_true(len > 8192); /* more than stdio buffers */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    fl_status r = fl_store_audit_export_file(f.st, file);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    if (r != FL_ERR_IO)
        fail_msg("export under a 1 KiB file size limit: %s (%s)", fl_status_name(r),
                 fl_store_errmsg(f.st));
    assert_non_null(strstr(fl_store_errmsg(f.st), "writing the bundle failed"));
    assert_int_equal(stat(file, &sb), -1);
    /* And with the limit gone it works. */
    STORE_OK(f.st, fl_store_audit_export_file(f.st, file));
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal((size_t)sb.st_size, len);
    audit_fx_teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_info_checked), cmocka_unit_test(test_optional_fields),
        cmocka_unit_test(test_proof_arguments),    cmocka_unit_test(test_clock_before_1970),
        cmocka_unit_test(test_damage_detected),    cmocka_unit_test(test_export_file_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
