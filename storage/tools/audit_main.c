/* flotilla-audit: verify, inspect and report on a Flotilla audit bundle, offline.
 *
 *   flotilla-audit verify BUNDLE [--key VKEY]
 *   flotilla-audit show   BUNDLE [--round N | --from N --to M] [--population NAME]
 *                                [--seq A[-B]] [--key VKEY]
 *   flotilla-audit export BUNDLE --format jsonl|csv [-o FILE] [--key VKEY]
 *   flotilla-audit report BUNDLE [-o FILE.html] [--key VKEY]
 *   flotilla-audit demo   OUT.jsonl [--rounds N] [--seed S]
 *
 * Exit status: 0 verified (or the command succeeded on a verified bundle), 1 the bundle
 * failed verification (show/export/report still produce their output, marked as such),
 * 2 usage or I/O error. See docs/auditor-guide.md. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "audit_tool.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage:\n"
            "  flotilla-audit verify BUNDLE [--key VKEY]\n"
            "  flotilla-audit show   BUNDLE [--round N | --from N --to M] [--population NAME]\n"
            "                               [--seq A[-B]] [--key VKEY]\n"
            "  flotilla-audit export BUNDLE --format jsonl|csv [-o FILE] [--key VKEY]\n"
            "  flotilla-audit report BUNDLE [-o FILE.html] [--key VKEY]\n"
            "  flotilla-audit demo   OUT.jsonl [--rounds N] [--seed S]\n"
            "VKEY is the log's verifier key (<origin>+<key id>+<base64 key>), obtained from the\n"
            "operator out of band; without it the key inside the bundle is used and printed.\n");
}

/* ---- loading ---- */

int tool_oom;

void tool_nomem(void) {
    tool_oom = 1;
}

/* Compares a dump, chunk by chunk, with the entry's bytes. */
struct cmp_state {
    const char *p; /* entry bytes */
    size_t len;    /* their length */
    size_t at;     /* bytes matched so far */
};

static int cmp_chunk(const char *buf, size_t size, void *data) {
    struct cmp_state *cs = data;
    /* unreachable in tests: differs only after Jansson misread a verified entry, which
     * happens inside json_loadb, where the allocation-failure walk cannot inject */
    if (size > cs->len - cs->at || memcmp(cs->p + cs->at, buf, size) != 0) // GCOVR_EXCL_BR_LINE
        return -1;
    cs->at += size;
    return 0;
}

/* Parses one entry: the object, or NULL. In a verified bundle every entry is a canonical
 * JSON object, so the parse is checked by dumping it again: Jansson 2.14 under memory
 * pressure can drop a character of a key it reads, or a key it writes, without an error. */
static json_t *parse_once(const struct tool_bundle *tb, const char *p, size_t len) {
    json_t *e = json_loadb(p, len, 0, NULL);
    if (!e || !json_is_object(e)) { // GCOVR_EXCL_BR_LINE the macro's NULL test: e is not NULL
        json_decref(e);
        return NULL;
    }
    struct cmp_state cs = {p, len, 0};
    size_t flags = JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII;
    /* cs.at != len alone is unreachable in tests, as in cmp_chunk */
    if (tb->status == FL_OK &&
        (json_dump_callback(e, cmp_chunk, &cs, flags) != 0 || cs.at != len)) { // GCOVR_EXCL_BR_LINE
        json_decref(e);
        return NULL;
    }
    return e;
}

/* Appends one entry of the bundle to tb->entries: the object, or JSON null when it is not
 * one (after a second try: a failure may have been memory). In a verified bundle a second
 * failure can only be memory. Returns -1 out of memory. */
static int parse_entry(struct tool_bundle *tb, const char *p, size_t len) {
    json_t *e = parse_once(tb, p, len);
    if (!e)
        e = parse_once(tb, p, len);
    /* untestable: needs two failed allocations in a row, the walk fails one */
    if (!e && tb->status == FL_OK) // GCOVR_EXCL_BR_LINE
        return -1;
    return json_array_append_new(tb->entries, e ? e : json_null());
}

int tool_bundle_load(struct tool_bundle *tb, const char *path, const char *trusted_vkey,
                     int parse) {
    memset(tb, 0, sizeof(*tb));
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "flotilla-audit: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "flotilla-audit: cannot read %s%s\n", path, buf ? "" : ": out of memory");
        free(buf);
        return -1;
    }
    tb->path = strdup(path);
    tb->bytes = buf;
    tb->len = len;
    uint8_t h[32];
    crypto_hash_sha256(h, buf, len);
    sodium_bin2hex(tb->sha256, sizeof(tb->sha256), h, 32);
    tb->entries = json_array();
    if (!tb->path || !tb->entries)
        goto nomem;
    tb->status = fl_store_audit_bundle_open(&tb->b, buf, len, NULL);
    if (tb->status == FL_OK) {
        tb->status = fl_store_audit_bundle_verify(tb->b, trusted_vkey, &tb->verdict);
        size_t ne = parse ? fl_store_audit_bundle_entry_count(tb->b) : 0;
        for (size_t i = 0; i < ne && tb->status != FL_ERR_NOMEM; i++) {
            size_t el = 0;
            const char *p = fl_store_audit_bundle_entry(tb->b, i, &el);
            if (parse_entry(tb, p, el) != 0)
                goto nomem;
        }
    } else {
        memset(&tb->verdict, 0, sizeof(tb->verdict));
        tb->verdict.bad_entry = tb->verdict.bad_checkpoint = -1;
        snprintf(tb->verdict.message, sizeof(tb->verdict.message), "FAILED: %s",
                 fl_store_audit_bundle_errmsg(tb->b));
    }
    /* Running out of memory says nothing about the bundle: an error, not a verdict. */
    if (tb->status == FL_ERR_NOMEM)
        goto nomem;
    return 0;
nomem:
    fprintf(stderr, "flotilla-audit: out of memory reading %s\n", path);
    tool_bundle_free(tb);
    return -1;
}

void tool_bundle_free(struct tool_bundle *tb) {
    fl_store_audit_bundle_close(tb->b);
    json_decref(tb->entries);
    free(tb->bytes);
    free(tb->path);
    memset(tb, 0, sizeof(*tb));
}

/* ---- formatting ---- */

void tool_fmt_time(char out[32], long long ms) {
    if (ms <= 0) {
        snprintf(out, 32, "-");
        return;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%d %H:%M:%SZ", &tm);
}

void tool_fmt_e9(char out[40], long long v) {
    snprintf(out, 40, "%s%lld.%09lld", v < 0 ? "-" : "", llabs(v) / 1000000000LL,
             llabs(v) % 1000000000LL);
    char *dot = strchr(out, '.');
    char *end = out + strlen(out) - 1;
    while (end > dot && *end == '0')
        *end-- = '\0';
    if (end == dot)
        *end = '\0';
}

void tool_fmt_e18(char out[40], long long v) {
    snprintf(out, 40, "%.6g", (double)v * 1e-18);
}

long long tool_int(const json_t *o, const char *path) {
    char key[64];
    const char *p = path;
    while (o && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        /* unreachable: every path is a literal under 64 bytes */
        if (n >= sizeof(key)) // GCOVR_EXCL_BR_LINE
            return 0;
        memcpy(key, p, n);
        key[n] = '\0';
        o = json_object_get(o, key);
        p += n + (dot ? 1 : 0);
    }
    return json_is_integer(o) ? (long long)json_integer_value(o) : 0;
}

const char *tool_str(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void print_verdict(const struct tool_bundle *tb, FILE *f) {
    fprintf(f, "%s\n", tb->verdict.message);
    if (tb->status == FL_OK) {
        char hex[65];
        sodium_bin2hex(hex, sizeof(hex), tb->verdict.root, 32);
        fprintf(f, "  log:  %s\n  key:  %s\n  root: %s (tree size %" PRId64 ")\n",
                fl_store_audit_bundle_origin(tb->b), fl_store_audit_bundle_vkey(tb->b), hex,
                tb->verdict.entries);
    } else {
        if (tb->verdict.bad_entry >= 0)
            fprintf(f, "  first offending entry: #%" PRId64 " (bundle line %" PRId64 ")\n",
                    tb->verdict.bad_entry, tb->verdict.bad_line);
        else if (tb->verdict.bad_checkpoint >= 0)
            fprintf(f, "  first offending checkpoint: %" PRId64 " (bundle line %" PRId64 ")\n",
                    tb->verdict.bad_checkpoint, tb->verdict.bad_line);
        else if (tb->verdict.bad_line > 0)
            fprintf(f, "  at bundle line %" PRId64 "\n", tb->verdict.bad_line);
        /* unreachable: b is NULL only when open failed, which sets no bad entry, and a bad
         * entry's index is always one of the bundle's entries */
        if (tb->verdict.bad_entry >= 0 && tb->b) { // GCOVR_EXCL_BR_LINE
            size_t el = 0;
            const char *p = fl_store_audit_bundle_entry(tb->b, (size_t)tb->verdict.bad_entry, &el);
            if (p) // GCOVR_EXCL_BR_LINE
                fprintf(f, "  entry: %.*s%s\n", (int)(el > 400 ? 400 : el), p,
                        el > 400 ? "..." : "");
        }
    }
}

/* ---- demo ---- */

static int64_t demo_now;
static int64_t demo_clock(void *user) {
    (void)user;
    return demo_now;
}

#define DEMO_CHECK(call)                                                                           \
    do {                                                                                           \
        fl_status r_ = (call);                                                                     \
        if (r_ != FL_OK) {                                                                         \
            fprintf(stderr, "flotilla-audit demo: %s: %s (%s)\n", #call, fl_status_str(r_),        \
                    fl_store_errmsg(st));                                                          \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* The client of keyboard-eu the demo revokes and later reinstates. */
#define DEMO_REVOKED "e-client-011"

/* After round r (run or refused): revokes DEMO_REVOKED once r reaches rounds / 3 and
 * reinstates it once r reaches 2 * rounds / 3, through the store's audited calls, so that
 * every demo log, whatever --rounds, has a client_revoked and a later client_reinstated
 * entry (both after the first round when rounds < 3). *state: 0 not yet revoked, 1 revoked
 * (the round loop leaves the client out), 2 reinstated. 0, or 2 after printing the call
 * that failed. */
static int demo_revocation(fl_store *st, int r, int rounds, int *state, const uint8_t *nymkey) {
    int rc = 2;
    if (*state == 0 && r >= rounds / 3) {
        DEMO_CHECK(fl_store_client_revoke(st, NULL, NULL, DEMO_REVOKED, demo_now, nymkey));
        *state = 1;
    }
    if (*state == 1 && r >= 2 * rounds / 3) {
        demo_now += 60000; /* a minute later */
        DEMO_CHECK(fl_store_client_reinstate(st, NULL, DEMO_REVOKED, nymkey));
        *state = 2;
    }
    rc = 0;
out:
    return rc;
}

/* Builds a synthetic log (two populations, rounds with dropouts, a budget refusal, an
 * erasure, a client revoked and reinstated, a retention sweep) in a temporary store and
 * exports its bundle to out. */
static int demo(const char *out, int rounds, unsigned seed) {
    char dir[] = "/tmp/flotilla-audit-demo-XXXXXX", db[256];
    if (!mkdtemp(dir)) { // GCOVR_EXCL_BR_LINE untestable: needs an unwritable /tmp (runs as root)
        fprintf(stderr, "flotilla-audit demo: mkdtemp: %s\n", strerror(errno));
        return 2;
    }
    snprintf(db, sizeof(db), "%s/demo.db", dir);
    int rc = 2;
    fl_store *st = NULL;
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.clock = demo_clock;
    demo_now = 1767225600000LL; /* 2026-01-01 */
    srand(seed);
    uint8_t pk[32], sk[64], seedb[32], nymkey[32];
    memset(seedb, (int)(seed & 0xff), sizeof(seedb));
    crypto_sign_seed_keypair(pk, sk, seedb);
    memset(nymkey, 0x5a, sizeof(nymkey));
    const char *origin = "demo.flotilla.example/audit";
    fl_status ro = fl_store_open(&st, db, &cfg);
    if (ro != FL_OK) {
        fprintf(stderr, "flotilla-audit demo: cannot open a store in %s: %s (%s)\n", dir,
                fl_status_str(ro), fl_store_errmsg(st));
        goto out;
    }
    int64_t pops[2];
    const char *names[2] = {"keyboard-eu", "health-ru"};
    const char *regions[2] = {"[\"EU-west\",\"EU-north\",\"UK\"]", "[\"RU\"]"};
    double budgets[2] = {8.0, 4.0};
    int64_t model[2];
    double eps[2] = {0, 0};
    int nclients[2] = {40, 24}, erased = 0, revoked = 0;
    for (int p = 0; p < 2; p++) {
        DEMO_CHECK(fl_store_population_create(st, &pops[p], names[p], "{\"demo\":true}", budgets[p],
                                              1e-6, regions[p]));
        DEMO_CHECK(fl_store_audit_append_population(st, NULL, pops[p]));
        for (int i = 0; i < nclients[p]; i++) {
            char id[32];
            uint8_t tok[16];
            snprintf(id, sizeof(id), "%c-client-%03d", p ? 'r' : 'e', i);
            memset(tok, i + 1, sizeof(tok));
            const char *reg = p ? "RU" : (i % 5 == 0 ? "UK" : i % 2 ? "EU-west" : "EU-north");
            DEMO_CHECK(fl_store_client_enroll(st, id, tok, sizeof(tok), reg, pops[p]));
        }
        float w[32];
        for (int i = 0; i < 32; i++)
            w[i] = (float)(i + p);
        fl_store_model_ref ref;
        DEMO_CHECK(fl_store_model_put(st, &ref, pops[p], 0, w, sizeof(w), NULL));
        model[p] = ref.version;
        DEMO_CHECK(fl_store_audit_append_model(st, NULL, pops[p], model[p]));
    }
    for (int r = 0; r < rounds; r++) {
        int p = r % 3 == 2 ? 1 : 0;
        double step = p ? 0.45 : 0.3;
        demo_now += 3600000;
        fl_store_round *last = NULL;
        int64_t next = 1;
        if (fl_store_round_find(st, &last, pops[p], 0) == FL_OK) {
            next = last->round_number + 1;
            fl_store_free(st, last);
        }
        if (eps[p] + step > budgets[p]) {
            DEMO_CHECK(fl_store_audit_append_refusal(st, NULL, pops[p], next, eps[p] + step, 1e-7));
            if (demo_revocation(st, r, rounds, &revoked, nymkey) != 0)
                goto out;
            continue;
        }
        int n = nclients[p] * 3 / 4, dropped = rand() % 5;
        int64_t rid = 0;
        DEMO_CHECK(fl_store_begin(st));
        DEMO_CHECK(fl_store_round_create(st, &rid, pops[p], 0, model[p], "{\"lr\":0.05}"));
        DEMO_CHECK(fl_store_round_start(st, rid));
        for (int i = 0, k = 0; i < n; k++) {
            char id[32];
            int idx = (k + r) % nclients[p];
            if (p == 0 && erased && idx == 7)
                continue; /* erased: no longer enrolled */
            if (p == 0 && revoked == 1 && idx == 11)
                continue; /* DEMO_REVOKED while revoked: refused at check-in */
            snprintf(id, sizeof(id), "%c-client-%03d", p ? 'r' : 'e', idx);
            DEMO_CHECK(fl_store_participant_set(st, rid, id,
                                                i < dropped ? FL_STORE_PARTICIPANT_DROPPED
                                                            : FL_STORE_PARTICIPANT_COMPLETED));
            i++;
        }
        fl_store_round_counts counts = {n + rand() % 10, n, n - dropped, dropped};
        DEMO_CHECK(fl_store_round_set_counts(st, rid, &counts));
        float w[32];
        for (int i = 0; i < 32; i++)
            w[i] = (float)(i + 1) * (1.0f + 0.01f * (float)(r + 1)) + 100.0f * (float)p;
        fl_store_model_ref ref;
        DEMO_CHECK(fl_store_model_put(st, &ref, pops[p], model[p], w, sizeof(w), NULL));
        demo_now += 600000;
        DEMO_CHECK(fl_store_round_complete(st, rid, ref.version));
        fl_store_ledger_entry le = {0};
        le.population_id = pops[p];
        le.round_id = rid;
        le.mechanism = p ? "gaussian" : "ddgauss";
        le.sampling_rate = (double)n / 100000.0;
        le.noise_multiplier = p ? 1.3 : 1.1;
        le.clip_norm = 1.0;
        le.steps = 1;
        le.participants = n - dropped;
        DEMO_CHECK(fl_store_ledger_append(st, NULL, &le));
        fl_store_audit_round_info info;
        fl_store_audit_round_info_init(&info);
        info.round_id = rid;
        info.dropped_by_phase[FL_STORE_AUDIT_PHASE_MASKED] = dropped - dropped / 2;
        info.dropped_by_phase[FL_STORE_AUDIT_PHASE_UNMASK] = dropped / 2;
        info.secagg_enabled = 1;
        info.secagg_n = n;
        info.secagg_k = n - 1;
        info.secagg_t = (n * 2) / 3 < n - dropped ? (n * 2) / 3 : n - dropped;
        info.epsilon_total = eps[p] + step;
        info.delta = 1e-7;
        info.coordinator_version = "flotilla-coordinator/0.1.0";
        DEMO_CHECK(fl_store_audit_append_round(st, NULL, &info));
        DEMO_CHECK(fl_store_commit(st));
        eps[p] += step;
        model[p] = ref.version;
        if (r == rounds / 2) {
            DEMO_CHECK(fl_store_client_erase(st, NULL, "e-client-007", nymkey));
            erased = 1;
        }
        if (demo_revocation(st, r, rounds, &revoked, nymkey) != 0)
            goto out;
        if (r % 5 == 4)
            DEMO_CHECK(fl_store_audit_checkpoint_sign(st, NULL, origin, sk));
    }
    demo_now += 86400000LL * 40;
    DEMO_CHECK(fl_store_retention_sweep(st, NULL, 86400000LL * 30));
    DEMO_CHECK(fl_store_audit_checkpoint_sign(st, NULL, origin, sk));
    DEMO_CHECK(fl_store_audit_export_file(st, out));
    char vkey[256];
    /* unreachable: fl_store_audit_vkey allocates nothing and its arguments are valid */
    DEMO_CHECK(fl_store_audit_vkey(vkey, sizeof(vkey), origin, pk)); // GCOVR_EXCL_BR_LINE
    printf("wrote %s\nverifier key: %s\n", out, vkey);
    rc = 0;
out:
    if (rc != 0 && st)
        (void)fl_store_rollback(st);
    fl_store_close(st);
    const char *sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char p2[300];
        snprintf(p2, sizeof(p2), "%s%s", db, sfx[i]);
        unlink(p2);
    }
    rmdir(dir);
    return rc;
}

/* ---- main ---- */

static long long parse_ll(const char *s, const char *what) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s) {
        fprintf(stderr, "flotilla-audit: %s is not a number: %s\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    if (sodium_init() < 0) { // GCOVR_EXCL_BR_LINE untestable: fails only without an RNG
        fprintf(stderr, "flotilla-audit: libsodium failed to initialise\n");
        return 2;
    }
    if (argc < 3) {
        usage(argc == 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
        return argc == 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    const char *cmd = argv[1], *path = argv[2], *key = NULL, *outp = NULL, *format = NULL,
               *population = NULL;
    long long from = 0, to = -1, seq_from = 0, seq_to = -1, rounds = 30, seed = 1;
    for (int i = 3; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "flotilla-audit: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--key") == 0)
            key = v;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0)
            outp = v;
        else if (strcmp(a, "--format") == 0)
            format = v;
        else if (strcmp(a, "--population") == 0)
            population = v;
        else if (strcmp(a, "--round") == 0)
            from = to = parse_ll(v, "--round");
        else if (strcmp(a, "--from") == 0)
            from = parse_ll(v, "--from");
        else if (strcmp(a, "--to") == 0)
            to = parse_ll(v, "--to");
        else if (strcmp(a, "--rounds") == 0)
            rounds = parse_ll(v, "--rounds");
        else if (strcmp(a, "--seed") == 0)
            seed = parse_ll(v, "--seed");
        else if (strcmp(a, "--seq") == 0) {
            const char *dash = strchr(v, '-');
            if (dash) {
                char first[32];
                snprintf(first, sizeof(first), "%.*s", (int)(dash - v), v);
                seq_from = parse_ll(first, "--seq");
                seq_to = parse_ll(dash + 1, "--seq");
            } else {
                seq_from = seq_to = parse_ll(v, "--seq");
            }
        } else {
            fprintf(stderr, "flotilla-audit: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (strcmp(cmd, "demo") == 0) {
        if (rounds < 1 || rounds > 100000) {
            fprintf(stderr, "flotilla-audit: --rounds must be 1..100000\n");
            return 2;
        }
        return demo(path, (int)rounds, (unsigned)seed);
    }
    if (strcmp(cmd, "verify") && strcmp(cmd, "show") && strcmp(cmd, "export") &&
        strcmp(cmd, "report")) {
        fprintf(stderr, "flotilla-audit: unknown command %s\n", cmd);
        usage(stderr);
        return 2;
    }
    struct tool_bundle tb;
    if (tool_bundle_load(&tb, path, key, strcmp(cmd, "verify") != 0) != 0)
        return 2;
    int verified = tb.status == FL_OK;
    int rc = verified ? 0 : 1;
    FILE *out = stdout;
    if (outp && !(out = fopen(outp, "wb"))) {
        fprintf(stderr, "flotilla-audit: cannot create %s: %s\n", outp, strerror(errno));
        tool_bundle_free(&tb);
        return 2;
    }
    if (strcmp(cmd, "verify") == 0) {
        print_verdict(&tb, out);
        if (!key && verified)
            fprintf(out, "  note: no --key given; compare the key above with the one the "
                         "operator published\n");
    } else {
        if (!verified) {
            fprintf(stderr, "flotilla-audit: WARNING: the bundle does not verify; what follows "
                            "is unauthenticated\n");
            print_verdict(&tb, stderr);
        }
        int r2;
        if (strcmp(cmd, "show") == 0)
            r2 = tool_show(&tb, out, from, to, population, seq_from, seq_to);
        else if (strcmp(cmd, "export") == 0) {
            if (!format || (strcmp(format, "jsonl") && strcmp(format, "csv"))) {
                fprintf(stderr, "flotilla-audit: export needs --format jsonl or csv\n");
                r2 = 2;
            } else {
                r2 = tool_export(&tb, out, strcmp(format, "csv") == 0);
            }
        } else {
            r2 = tool_report(&tb, out);
        }
        if (r2)
            rc = r2;
    }
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "flotilla-audit: writing %s failed\n", outp);
        rc = 2;
    }
    if (tool_oom) {
        /* A partial file must not pass for the real thing; stdout got a marked ending. */
        if (outp)
            unlink(outp);
        fprintf(stderr, "flotilla-audit: out of memory: the output is incomplete%s\n",
                outp ? " and was removed" : "");
        rc = 2;
    }
    tool_bundle_free(&tb);
    return rc;
}
