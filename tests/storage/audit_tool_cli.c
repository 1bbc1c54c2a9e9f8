/* flotilla-audit, run as a program (posix_spawn) on bundles this test writes through the
 * store: a log with every entry type (including a refusal, a configuration change, a round
 * without secure aggregation and a round abandoned before it started), a population name
 * that needs HTML and CSV escaping, a bundle with a forged checkpoint, a file that is not a
 * bundle; and every usage and I/O error the tool reports. Checks exit codes (0 verified,
 * 1 failed verification, 2 usage or I/O error) and what is printed.
 * usage: test_audit_tool_cli PATH/TO/flotilla-audit */
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_audit_util.h"

extern char **environ;

static const char *tool;
static char dir[256];

/* Runs tool with args (NULL-terminated); stdout and stderr go to dir/out and dir/err.
 * Returns the exit status. */
static int run(const char *const *args) {
    char outp[300], errp[300];
    snprintf(outp, sizeof(outp), "%s/out", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    const char *argv[32];
    int n = 0;
    argv[n++] = tool;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    /* posix_spawn rather than fork + exec: a coverage build wraps fork and exec to dump
     * profile counters, and a child's dump loses the parent's counts. */
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC,
                                                      0600),
                     0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC,
                                                      0600),
                     0);
    fflush(NULL);
    pid_t pid = 0;
    int err = posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (err != 0)
        fail_msg("cannot run %s: %s", tool, strerror(err));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Contents of dir/name (malloc'ed, NUL-terminated). */
static char *slurp(const char *name) {
    char p[300];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    size_t n = 0;
    char *b = (char *)audit_read_file(p, &n);
    b[n] = '\0';
    return b;
}

#define EXPECT_IN(name, text)                                                                      \
    do {                                                                                           \
        char *s_ = slurp(name);                                                                    \
        if (!strstr(s_, (text)))                                                                   \
            fail_msg("%s lacks \"%s\":\n%.2000s", (name), (text), s_);                             \
        free(s_);                                                                                  \
    } while (0)

#define RUN(code, ...)                                                                             \
    do {                                                                                           \
        const char *a_[] = {__VA_ARGS__, NULL};                                                    \
        int rc_ = run(a_);                                                                         \
        if (rc_ != (code)) {                                                                       \
            char *e_ = slurp("err");                                                               \
            fail_msg("flotilla-audit %s ...: exit %d, want %d; stderr: %.1000s", a_[0], rc_,       \
                     (code), e_);                                                                  \
        }                                                                                          \
    } while (0)

static char path_all[300], path_forged[300], path_junk[300], path_odd[300], path_rule[300],
    vkey[256], vkey_other[256];

/* The fingerprint the first round logs: 32 bytes of 0xab, 64 hex digits "abab...". */
static const uint8_t authority_fp[32] = {
    0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
    0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab};
#define AUTHORITY_FP_HEX                                                                           \
    "abababababababababababababababababababababababababababababababab"

/* The first round's norm proofs and active mode (shown by show, export and report). */
static const fl_store_audit_round_info *with_norm_proof(fl_store_audit_round_info *info,
                                                        void *user) {
    (void)user;
    info->secagg_active = 1;
    info->authority_key_sha256 = authority_fp;
    info->norm_proof_enabled = 1;
    info->norm_bits = 17;
    info->norm_bound2 = 65536;
    info->norm_dim = 1000;
    info->norm_weight_max = 64;
    return info;
}

/* A log with every entry type, exported to dir/all.jsonl. */
static void make_bundles(void) {
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    fl_store *st = f.st;
    /* A second population whose name needs escaping in HTML and CSV, any region. */
    int64_t odd = 0;
    STORE_OK(st, fl_store_population_create(st, &odd, "r&d <eu>, \"q\"", "{}", 2.0, 1e-6, "[]"));
    STORE_OK(st, fl_store_audit_append_population(st, NULL, odd));
    f.edit = with_norm_proof;
    STORE_OK(st, audit_fx_round(&f, 1, 0.5, NULL));
    f.edit = NULL;
    /* A completed round without secure aggregation or DP. */
    int64_t rid = 0;
    fl_store_model_ref ref;
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_round_create(st, &rid, f.pop, 0, f.model, NULL));
    STORE_OK(st, fl_store_round_start(st, rid));
    fl_store_round_counts counts = {2, 2, 2, 0};
    STORE_OK(st, fl_store_round_set_counts(st, rid, &counts));
    STORE_OK(st, fl_store_model_put(st, &ref, f.pop, f.model, w, sizeof(w), NULL));
    STORE_OK(st, fl_store_round_complete(st, rid, ref.version));
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.epsilon_total = f.eps_total;
    fl_store_audit_region reg[1] = {{"UK", 2}};
    info.regions = reg;
    info.n_regions = 1;
    STORE_OK(st, fl_store_audit_append_round(st, NULL, &info));
    STORE_OK(st, fl_store_commit(st));
    f.model = ref.version;
    /* A round abandoned before it started: no start time, nobody selected. */
    STORE_OK(st, fl_store_round_create(st, &rid, f.pop, 0, f.model, NULL));
    STORE_OK(st, fl_store_round_abandon(st, rid, "no clients"));
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.epsilon_total = f.eps_total;
    STORE_OK(st, fl_store_audit_append_round(st, NULL, &info));
    STORE_OK(st, fl_store_audit_append_config(st, NULL, f.pop, "{\"v\":2}", 8.0, 1e-6,
                                              "[\"EU\",\"UK\"]"));
    STORE_OK(st, fl_store_audit_append_refusal(st, NULL, f.pop, 4, 9.0, 1e-7));
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, f.sk));
    uint8_t key[32];
    memset(key, 2, sizeof(key));
    STORE_OK(st, fl_store_client_erase(st, NULL, "c001", key));
    /* Revocation entries (c002 stays enrolled: the sweep below does not touch it). */
    STORE_OK(st, fl_store_client_revoke(st, NULL, NULL, "c002", f.now, key));
    STORE_OK(st, fl_store_client_reinstate(st, NULL, "c002", key));
    f.now += 1000;
    STORE_OK(st, fl_store_retention_sweep(st, NULL, 86400000));
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, f.sk));
    STORE_OK(st, fl_store_audit_export_file(st, path_all));
    STORE_OK(st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    uint8_t pk2[32];
    memset(pk2, 0x42, sizeof(pk2));
    STORE_OK(st, fl_store_audit_vkey(vkey_other, sizeof(vkey_other), AUDIT_ORIGIN, pk2));
    audit_fx_teardown(&f);

    /* The same bundle with the last checkpoint's signature changed. */
    size_t n = 0;
    uint8_t *b = audit_read_file(path_all, &n);
    assert_true(n > 100 && b[n - 1] == '\n');
    size_t i = n - 6; /* inside the base64 signature, before "\n\"}\n" */
    while (b[i] == '\\' || b[i] == 'n' || b[i] == '"' || b[i] == '}')
        i--;
    b[i] = b[i] == 'A' ? 'B' : 'A';
    FILE *fp = fopen(path_forged, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, n, fp), n);
    fclose(fp);
    free(b);
    fp = fopen(path_junk, "wb");
    assert_non_null(fp);
    fputs("this is not an audit bundle\n", fp);
    fclose(fp);

    /* A valid header over entries that are not entries: opens, fails verification, and
     * show/export/report still list what is there. */
    b = audit_read_file(path_all, &n);
    char *nl = memchr(b, '\n', n);
    assert_non_null(nl);
    json_t *h = json_loadb((const char *)b, (size_t)(nl - (char *)b), 0, NULL);
    assert_non_null(h);
    json_object_set_new(h, "entries", json_integer(4));
    json_object_set_new(h, "checkpoints", json_integer(1));
    char *ht = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    fp = fopen(path_odd, "wb");
    assert_non_null(fp);
    /* ... and a round of a population that was never created (shown, but no report
     * section: those follow population_created entries). */
    fprintf(fp,
            "%s\n[1]\n{\"type\":\"mystery\"}\n{\"seq\":2}\n{\"outcome\":\"completed\","
            "\"population\":\"ghost\",\"population_id\":7,\"round\":1,\"seq\":3,"
            "\"type\":\"round\"}\n{\"checkpoint\":\"x\"}\n",
            ht);
    fclose(fp);
    free(ht);

    /* The honest bundle with entry 1 (a short model_registered entry) claiming format
     * version 2: refused by the rules at that entry. */
    char *line2 = memchr(nl + 1, '\n', n - (size_t)(nl + 1 - (char *)b)) + 1;
    char *v1 = strstr(line2, "\"v\":1}");
    assert_non_null(v1);
    v1[4] = '2';
    fp = fopen(path_rule, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, n, fp), n);
    fclose(fp);
    free(b);
}

static int setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/fl_audit_cli_XXXXXX", base && base[0] ? base : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(path_all, sizeof(path_all), "%s/all.jsonl", dir);
    snprintf(path_forged, sizeof(path_forged), "%s/forged.jsonl", dir);
    snprintf(path_junk, sizeof(path_junk), "%s/junk.jsonl", dir);
    snprintf(path_odd, sizeof(path_odd), "%s/odd.jsonl", dir);
    snprintf(path_rule, sizeof(path_rule), "%s/rule.jsonl", dir);
    make_bundles();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    struct store_tdir t;
    snprintf(t.dir, sizeof(t.dir), "%s", dir);
    if (!getenv("FL_KEEP_TMP"))
        store_tdir_rm(&t);
    return 0;
}

static void test_usage_errors(void **state) {
    (void)state;
    const char *none[] = {NULL};
    assert_int_equal(run(none), 2);
    EXPECT_IN("err", "usage:");
    RUN(0, "--help");
    EXPECT_IN("out", "flotilla-audit verify BUNDLE");
    RUN(2, "verify");
    EXPECT_IN("err", "usage:");
    RUN(2, "frobnicate", path_all);
    EXPECT_IN("err", "unknown command frobnicate");
    RUN(2, "verify", path_all, "--colour", "red");
    EXPECT_IN("err", "unknown option --colour");
    RUN(2, "verify", path_all, "--key");
    EXPECT_IN("err", "--key needs a value");
    RUN(2, "show", path_all, "--round", "two");
    EXPECT_IN("err", "--round is not a number: two");
    RUN(2, "show", path_all, "--seq", "1-x");
    EXPECT_IN("err", "--seq is not a number: x");
    RUN(2, "show", path_all, "--from", "");
    EXPECT_IN("err", "--from is not a number");
    RUN(2, "demo", path_all, "--rounds", "0");
    EXPECT_IN("err", "--rounds must be 1..100000");
    RUN(2, "demo", path_all, "--rounds", "100001");
    EXPECT_IN("err", "--rounds must be 1..100000");
    RUN(2, "export", path_all, "--key", vkey);
    EXPECT_IN("err", "export needs --format jsonl or csv");
    RUN(2, "export", path_all, "--format", "xml", "--key", vkey);
    EXPECT_IN("err", "export needs --format jsonl or csv");
}

static void test_io_errors(void **state) {
    (void)state;
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/missing.jsonl", dir);
    RUN(2, "verify", missing);
    EXPECT_IN("err", "cannot open");
    RUN(2, "verify", dir); /* a directory opens but cannot be read */
    EXPECT_IN("err", "cannot read");
    RUN(2, "report", path_all, "-o", "/nonexistent-dir/report.html");
    EXPECT_IN("err", "cannot create /nonexistent-dir/report.html");
    if (access("/dev/full", W_OK) == 0) {
        RUN(2, "export", path_all, "--format", "jsonl", "--output", "/dev/full");
        EXPECT_IN("err", "writing /dev/full failed");
    }
    char out[300];
    snprintf(out, sizeof(out), "/nonexistent-dir/demo.jsonl");
    RUN(2, "demo", out, "--rounds", "1");
    EXPECT_IN("err", "fl_store_audit_export_file");
}

static void test_verify(void **state) {
    (void)state;
    RUN(0, "verify", path_all);
    EXPECT_IN("out", "VERIFIED");
    EXPECT_IN("out", "note: no --key given");
    RUN(0, "verify", path_all, "--key", vkey);
    EXPECT_IN("out", "root: ");
    RUN(1, "verify", path_forged, "--key", vkey);
    EXPECT_IN("out", "FAILED");
    EXPECT_IN("out", "first offending checkpoint: 1");
    RUN(1, "verify", path_junk);
    EXPECT_IN("out", "FAILED: line 1: header: not JSON");
    /* A bundle signed by another key than the trusted one: refused at its header. */
    RUN(1, "verify", path_all, "--key", vkey_other);
    EXPECT_IN("out", "at bundle line 1");
}

static void test_show(void **state) {
    (void)state;
    RUN(0, "show", path_all, "--key", vkey);
    EXPECT_IN("out", "population_created  population \"r&d <eu>, \"q\"\"");
    EXPECT_IN("out", "current model is now version");
    EXPECT_IN("out", "secure aggregation: off");
    EXPECT_IN("out", "norm proofs: squared L2 norm of the first 1000 coordinates <= 65536 "
                     "(lattice units^2), coordinates in 17 bits, weight in 1..64");
    EXPECT_IN("out", "secagg mode: active (dropouts checked by the devices), device authority key "
                     "SHA-256 " AUTHORITY_FP_HEX "\n");
    EXPECT_IN("out", "regions: (none)");
    EXPECT_IN("out", ": abandoned, - .. ");
    EXPECT_IN("out", "budget epsilon 8, delta 1e-06; allowed regions [\"EU\",\"UK\"]");
    EXPECT_IN("out", "budget_refused");
    EXPECT_IN("out", "erasure");
    EXPECT_IN("out", "retention");
    EXPECT_IN("out", "client_revoked  population \"keyboard\"");
    EXPECT_IN("out", " revoked (excluded from rounds) at 2023-11-14 ");
    EXPECT_IN("out", "client_reinstated  population \"keyboard\"");
    EXPECT_IN("out", " reinstated (may take part in rounds again)");
    EXPECT_IN("out", "12 of 12 entries shown; bundle VERIFIED");
    RUN(0, "show", path_all, "--seq", "3-4", "--key", vkey);
    EXPECT_IN("out", "2 of 12 entries shown");
    RUN(0, "show", path_all, "--seq", "5", "--key", vkey);
    EXPECT_IN("out", "1 of 12 entries shown");
    RUN(0, "show", path_all, "--from", "2", "--to", "4", "--key", vkey);
    EXPECT_IN("out", "3 of 12 entries shown"); /* rounds 2, 3 and the refused round 4 */
    RUN(0, "show", path_all, "--population", "r&d <eu>, \"q\"", "--key", vkey);
    EXPECT_IN("out", "1 of 12 entries shown");
    /* An unverified bundle is still shown, with a warning, and exits 1. */
    RUN(1, "show", path_forged, "--round", "1");
    EXPECT_IN("err", "WARNING: the bundle does not verify");
    EXPECT_IN("out", "bundle NOT VERIFIED");
}

static void test_export_and_report(void **state) {
    (void)state;
    char csv[300], html[300];
    snprintf(csv, sizeof(csv), "%s/all.csv", dir);
    snprintf(html, sizeof(html), "%s/all.html", dir);
    RUN(0, "export", path_all, "--format", "csv", "-o", csv, "--key", vkey);
    EXPECT_IN("all.csv", ",\"r&d <eu>, \"\"q\"\"\",");
    EXPECT_IN("all.csv", "requested epsilon total 9");
    EXPECT_IN("all.csv", ",\"norm proof: bits 17, bound2 65536, dim 1000, weight_max 64\"\r\n");
    EXPECT_IN("all.csv", "secagg_t,secagg_mode,dp_mechanism,");
    EXPECT_IN("all.csv", ",4,3,1,active:" AUTHORITY_FP_HEX ",ddgauss,");
    EXPECT_IN("all.csv", "deleted ");
    EXPECT_IN("all.csv", ",client_revoked,keyboard,");
    EXPECT_IN("all.csv", " revoked at 2023-11-14 ");
    EXPECT_IN("all.csv", ",client_reinstated,keyboard,");
    RUN(0, "report", path_all, "-o", html, "--key", vkey);
    EXPECT_IN("all.html", "r&amp;d &lt;eu&gt;, &quot;q&quot;");
    EXPECT_IN("all.html", "class=\"verdict ok\"");
    EXPECT_IN("all.html", "budget epsilon 8, config sha256 <code>");
    EXPECT_IN("all.html", "No rounds with region counts.");
    EXPECT_IN("all.html", "<td>4/3/1, norm&sup2; &le; 65536 (17 bits)</td>");
    EXPECT_IN("all.html", "<th class=\"l\">secagg mode</th>");
    EXPECT_IN("all.html", "<td class=\"l\">active, authority key SHA-256 <code>" AUTHORITY_FP_HEX
                          "</code></td>");
    EXPECT_IN("all.html", "<td>off</td><td class=\"l\">&ndash;</td>");
    EXPECT_IN("all.html", "client revoked</td><td class=\"l\">keyboard: client <code>");
    EXPECT_IN("all.html", "</code> excluded from rounds from 2023-11-14 ");
    EXPECT_IN("all.html", "client reinstated</td>");
    RUN(1, "report", path_junk, "-o", html);
    EXPECT_IN("all.html", "class=\"verdict bad\"");
    RUN(1, "report", path_odd, "-o", html);
    EXPECT_IN("all.html", "class=\"verdict bad\"");
    RUN(1, "export", path_odd, "--format", "csv", "-o", csv);
    EXPECT_IN("all.csv", "mystery");
}

static void test_odd_entries(void **state) {
    (void)state;
    RUN(1, "show", path_odd);
    EXPECT_IN("out", "#0  (unreadable entry)");
    EXPECT_IN("out", "#1  -  mystery");
    EXPECT_IN("out", "#3  -  round  population \"ghost\" (id 7)");
    EXPECT_IN("out", "4 of 4 entries shown; bundle NOT VERIFIED");
    RUN(1, "verify", path_rule, "--key", vkey);
    EXPECT_IN("out", "first offending entry: #1 (bundle line 3)");
    EXPECT_IN("out", "  entry: {\"model\":");
}

/* The demo: a log long enough for a budget refusal, a bundle over 64 KiB (read in more
 * than one piece), another seed, a client revocation and reinstatement. */
static void test_demo(void **state) {
    (void)state;
    char out[300];
    snprintf(out, sizeof(out), "%s/demo.jsonl", dir);
    RUN(0, "demo", out, "--rounds", "200", "--seed", "3");
    EXPECT_IN("out", "verifier key: demo.flotilla.example/audit+");
    struct stat sb;
    assert_int_equal(stat(out, &sb), 0);
    assert_true(sb.st_size > 65536);
    RUN(0, "show", out, "--round", "9", "--population", "health-ru");
    EXPECT_IN("out", "refused");
    /* The client revoked a third of the way through (in a refused round's turn: both
     * populations are out of budget by then) and reinstated later, in a verified log. */
    RUN(0, "show", out, "--population", "keyboard-eu");
    EXPECT_IN("out", "client_revoked  population \"keyboard-eu\"");
    EXPECT_IN("out", "revoked (excluded from rounds) at");
    EXPECT_IN("out", "client_reinstated  population \"keyboard-eu\"");
    EXPECT_IN("out", "bundle VERIFIED");
}

/* A round with revealed pairwise seeds (secagg.revealed_seeds): show and report say so. */
static const fl_store_audit_round_info *with_reveal(fl_store_audit_round_info *info,
                                                    void *user) {
    (void)user;
    info->secagg_reveal_seeds = 1;
    return info;
}

static void test_revealed_seeds_shown(void **state) {
    (void)state;
    char path[300], html[300], vk[256];
    snprintf(path, sizeof(path), "%s/reveal.jsonl", dir);
    snprintf(html, sizeof(html), "%s/reveal.html", dir);
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    f.edit = with_reveal;
    STORE_OK(f.st, audit_fx_round(&f, 1, 0.5, NULL));
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    STORE_OK(f.st, fl_store_audit_export_file(f.st, path));
    STORE_OK(f.st, fl_store_audit_vkey(vk, sizeof(vk), AUDIT_ORIGIN, f.pk));
    audit_fx_teardown(&f);
    RUN(0, "show", path, "--key", vk);
    EXPECT_IN("out", "secagg mode: semi-honest\n      revealed pairwise seeds: the survivors "
                     "revealed the mask seeds they shared with devices that left before "
                     "masking\n");
    RUN(0, "report", path, "-o", html, "--key", vk);
    EXPECT_IN("reveal.html", "<td class=\"l\">semi-honest, revealed seeds</td>");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/flotilla-audit\n", argv[0]);
        return 2;
    }
    tool = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_verify),       cmocka_unit_test(test_show),
        cmocka_unit_test(test_export_and_report), cmocka_unit_test(test_odd_entries),
        cmocka_unit_test(test_demo),         cmocka_unit_test(test_revealed_seeds_shown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
