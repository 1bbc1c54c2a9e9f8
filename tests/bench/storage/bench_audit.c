/* Audit log benchmark: append throughput (bulk entries and real round entries), checkpoint
 * signing, inclusion and consistency proof times from the store, bundle export, and offline
 * verification throughput, with references measured in the same run over the same bytes:
 * SHA-256 alone (libsodium, as the Merkle tree), Jansson parsing alone, and a plain SQLite
 * insert of the same entry bytes with the same WAL + synchronous=FULL settings.
 *
 *   bench_audit [--entries N] [--batch B] [--rounds R] [--proofs K] [--dir DIR] [--json]
 *
 * Defaults: 1000000 entries appended in transactions of 1000, 200 round entries, 1000
 * proofs, in $TMPDIR. The bulk entries are budget refusals (the smallest entry that runs the
 * full append path: rules, canonical encoding, leaf and subtree hashes). */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <sqlite3.h>

#include "flotilla/storage.h"

#include "bench_util.h"

#define CHECK(st, call)                                                                            \
    do {                                                                                           \
        fl_status r_ = (call);                                                                     \
        if (r_ != FL_OK) {                                                                         \
            fprintf(stderr, "bench_audit: %s: %s (%s)\n", #call, fl_store_errmsg(st),              \
                    fl_status_name(r_));                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void rm_db(const char *path) {
    char p[1100];
    const char *sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s%s", path, sfx[i]);
        unlink(p);
    }
}

/* Parses a positive count option; exits on junk. */
static long long count_arg(const char *opt, const char *v) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || !end || *end || x < 1) {
        fprintf(stderr, "bench_audit: %s needs a positive integer, got '%s'\n", opt, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    long long entries = 1000000, batch = 1000, rounds = 200, proofs = 1000;
    const char *dir = bench_tmpdir();
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "usage: bench_audit [--entries N] [--batch B] [--rounds R] "
                            "[--proofs K] [--dir DIR] [--json]\n");
            return 2;
        }
        if (strcmp(argv[i], "--entries") == 0)
            entries = count_arg(argv[i], v);
        else if (strcmp(argv[i], "--batch") == 0)
            batch = count_arg(argv[i], v);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = count_arg(argv[i], v);
        else if (strcmp(argv[i], "--proofs") == 0)
            proofs = count_arg(argv[i], v);
        else if (strcmp(argv[i], "--dir") == 0)
            dir = v;
        else {
            fprintf(stderr, "bench_audit: unknown option %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (entries < 1 || batch < 1 || rounds < 1 || proofs < 1) {
        fprintf(stderr, "bench_audit: counts must be >= 1\n");
        return 2;
    }
    if (sodium_init() < 0)
        return 1;
    char path[1024], rawpath[1024];
    snprintf(path, sizeof(path), "%s/bench_audit_%d.db", dir, (int)getpid());
    snprintf(rawpath, sizeof(rawpath), "%s/bench_audit_raw_%d.db", dir, (int)getpid());
    rm_db(path);
    rm_db(rawpath);

    fl_store *st = NULL;
    if (fl_store_open(&st, path, NULL) != FL_OK) {
        fprintf(stderr, "bench_audit: open %s: %s\n", path, fl_store_errmsg(st));
        return 1;
    }
    uint8_t pk[32], sk[64];
    crypto_sign_keypair(pk, sk);
    int64_t pop = 0, pop2 = 0;
    CHECK(st, fl_store_population_create(st, &pop, "bulk", NULL, 8.0, 1e-6, "[\"EU\"]"));
    CHECK(st, fl_store_population_create(st, &pop2, "rounds", NULL, 1e6, 1e-6, "[\"EU\"]"));

    /* 1. Round entries, each in a coordinator-style transaction; only the audit call is
     *    timed. */
    float w[256];
    for (int i = 0; i < 256; i++)
        w[i] = (float)i;
    fl_store_model_ref ref;
    CHECK(st, fl_store_model_put(st, &ref, pop2, 0, w, sizeof(w), NULL));
    int64_t model = ref.version;
    CHECK(st, fl_store_audit_append_model(st, NULL, pop2, model));
    double t_round = 0;
    for (long long r = 0; r < rounds; r++) {
        int64_t rid = 0;
        CHECK(st, fl_store_begin(st));
        CHECK(st, fl_store_round_create(st, &rid, pop2, 0, model, NULL));
        CHECK(st, fl_store_round_start(st, rid));
        fl_store_round_counts counts = {120, 100, 97, 3};
        CHECK(st, fl_store_round_set_counts(st, rid, &counts));
        w[0] = (float)r + 1;
        CHECK(st, fl_store_model_put(st, &ref, pop2, model, w, sizeof(w), NULL));
        CHECK(st, fl_store_round_complete(st, rid, ref.version));
        fl_store_ledger_entry le = {0};
        le.population_id = pop2;
        le.round_id = rid;
        le.mechanism = "ddgauss";
        le.sampling_rate = 0.001;
        le.noise_multiplier = 1.1;
        le.clip_norm = 1;
        le.steps = 1;
        le.participants = 97;
        CHECK(st, fl_store_ledger_append(st, NULL, &le));
        fl_store_audit_round_info info;
        fl_store_audit_round_info_init(&info);
        fl_store_audit_region reg = {"EU", 100};
        info.round_id = rid;
        info.dropped_by_phase[FL_STORE_AUDIT_PHASE_MASKED] = 3;
        info.secagg_enabled = 1;
        info.secagg_n = 100;
        info.secagg_k = 40;
        info.secagg_t = 27;
        info.epsilon_total = 0.01 * (double)(r + 1);
        info.delta = 1e-7;
        info.regions = &reg;
        info.n_regions = 1;
        double t0 = bench_wall_s();
        CHECK(st, fl_store_audit_append_round(st, NULL, &info));
        t_round += bench_wall_s() - t0;
        CHECK(st, fl_store_commit(st));
        model = ref.version;
    }

    /* 2. Bulk appends in transactions of batch entries. */
    double t0 = bench_wall_s();
    for (long long i = 0; i < entries; i++) {
        if (i % batch == 0)
            CHECK(st, fl_store_begin(st));
        CHECK(st, fl_store_audit_append_refusal(st, NULL, pop, i + 1, 9.0, 1e-7));
        if (i % batch == batch - 1 || i == entries - 1)
            CHECK(st, fl_store_commit(st));
    }
    double t_append = bench_wall_s() - t0;

    /* 3. Checkpoint over everything. */
    t0 = bench_wall_s();
    fl_store_audit_checkpoint *cp = NULL;
    CHECK(st, fl_store_audit_checkpoint_sign(st, &cp, "bench.flotilla/audit", sk));
    double t_cp = bench_wall_s() - t0;
    int64_t size = cp->tree_size;
    uint8_t root[32];
    memcpy(root, cp->root, 32);
    fl_store_free(st, cp);

    /* 4. Proofs at the full size: generation from the store, and verification. */
    double *tp = calloc((size_t)proofs, sizeof(double));
    double t_incl_verify = 0, t_cons = 0;
    uint8_t proof[FL_STORE_AUDIT_PROOF_MAX][32];
    size_t np = 0, max_np = 0;
    srand(1);
    for (long long k = 0; k < proofs; k++) {
        int64_t idx = (int64_t)(((uint64_t)rand() << 31 | (uint64_t)rand()) % (uint64_t)size);
        fl_store_audit_entry *e = NULL;
        CHECK(st, fl_store_audit_entry_get(st, &e, idx));
        t0 = bench_wall_s();
        CHECK(st,
              fl_store_audit_inclusion_proof(st, proof, FL_STORE_AUDIT_PROOF_MAX, &np, idx, size));
        tp[k] = bench_wall_s() - t0;
        if (np > max_np)
            max_np = np;
        t0 = bench_wall_s();
        if (fl_store_audit_verify_inclusion(e->leaf_hash, idx, size, proof, np, root) != FL_OK) {
            fprintf(stderr, "bench_audit: inclusion proof %lld does not verify\n", (long long)idx);
            return 1;
        }
        t_incl_verify += bench_wall_s() - t0;
        fl_store_free(st, e);
        int64_t m = 1 + (int64_t)((uint64_t)rand() % (uint64_t)size);
        t0 = bench_wall_s();
        CHECK(st,
              fl_store_audit_consistency_proof(st, proof, FL_STORE_AUDIT_PROOF_MAX, &np, m, size));
        t_cons += bench_wall_s() - t0;
    }
    qsort(tp, (size_t)proofs, sizeof(double), bench_cmp_double);
    double incl_sum = 0;
    for (long long k = 0; k < proofs; k++)
        incl_sum += tp[k];
    double incl_p50_us = tp[proofs / 2] * 1e6, incl_p99_us = tp[(proofs * 99) / 100] * 1e6;
    free(tp);

    /* 5. Export and offline verification. */
    uint8_t *bundle = NULL;
    size_t blen = 0;
    t0 = bench_wall_s();
    CHECK(st, fl_store_audit_export(st, &bundle, &blen));
    double t_export = bench_wall_s() - t0;
    uint8_t *copy = malloc(blen);
    memcpy(copy, bundle, blen);
    fl_store_free(st, bundle);
    fl_store_close(st);
    t0 = bench_wall_s();
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    if (fl_store_audit_bundle_open(&b, copy, blen, NULL) != FL_OK ||
        fl_store_audit_bundle_verify(b, NULL, &v) != FL_OK) {
        fprintf(stderr, "bench_audit: bundle does not verify: %s\n", v.message);
        return 1;
    }
    double t_verify = bench_wall_s() - t0;

    /* 6. References over the same entry bytes. */
    size_t ne = fl_store_audit_bundle_entry_count(b), entry_bytes = 0;
    uint8_t h[32];
    t0 = bench_wall_s();
    for (size_t i = 0; i < ne; i++) {
        size_t el = 0;
        const char *p = fl_store_audit_bundle_entry(b, i, &el);
        crypto_hash_sha256(h, (const uint8_t *)p, el);
        entry_bytes += el;
    }
    double t_sha = bench_wall_s() - t0;
    t0 = bench_wall_s();
    for (size_t i = 0; i < ne; i++) {
        size_t el = 0;
        const char *p = fl_store_audit_bundle_entry(b, i, &el);
        json_t *j = json_loadb(p, el, 0, NULL);
        json_decref(j);
    }
    double t_json = bench_wall_s() - t0;
    sqlite3 *raw = NULL;
    sqlite3_stmt *ins = NULL;
    if (sqlite3_open(rawpath, &raw) != SQLITE_OK ||
        sqlite3_exec(raw,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE t (seq INTEGER PRIMARY KEY, data BLOB NOT NULL)",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(raw, "INSERT INTO t VALUES (?1, ?2)", -1, &ins, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_audit: raw sqlite: %s\n", sqlite3_errmsg(raw));
        return 1;
    }
    t0 = bench_wall_s();
    for (size_t i = 0; i < ne; i++) {
        if (i % (size_t)batch == 0)
            sqlite3_exec(raw, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        size_t el = 0;
        const char *p = fl_store_audit_bundle_entry(b, i, &el);
        sqlite3_bind_int64(ins, 1, (int64_t)i);
        sqlite3_bind_blob(ins, 2, p, (int)el, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            fprintf(stderr, "bench_audit: raw insert: %s\n", sqlite3_errmsg(raw));
            return 1;
        }
        sqlite3_reset(ins);
        if (i % (size_t)batch == (size_t)batch - 1 || i == ne - 1)
            sqlite3_exec(raw, "COMMIT", NULL, NULL, NULL);
    }
    double t_raw = bench_wall_s() - t0;
    sqlite3_finalize(ins);
    sqlite3_close(raw);
    fl_store_audit_bundle_close(b);
    free(copy);
    rm_db(path);
    rm_db(rawpath);

    double mb = (double)entry_bytes / 1e6;
    double incl_mean_us = incl_sum / (double)proofs * 1e6;
    if (json) {
        printf("{\"entries\":%lld,\"batch\":%lld,\"round_entries\":%lld,\"tree_size\":%" PRId64
               ",\"entry_bytes\":%zu,\"bundle_bytes\":%zu,"
               "\"append_per_s\":%.0f,\"append_us\":%.2f,\"round_append_us\":%.2f,"
               "\"checkpoint_ms\":%.3f,\"inclusion_proof_us\":%.2f,\"inclusion_verify_us\":%.2f,"
               "\"inclusion_proof_p99_us\":%.2f,\"consistency_proof_us\":%.2f,\"max_proof_hashes\":"
               "%zu,\"export_s\":%.3f,"
               "\"verify_s\":%.3f,\"verify_per_s\":%.0f,\"verify_mb_s\":%.1f,"
               "\"ref_sha256_mb_s\":%.1f,\"ref_json_parse_s\":%.3f,\"ref_sqlite_insert_per_s\":%."
               "0f}\n",
               entries, batch, rounds, size, entry_bytes, blen, (double)entries / t_append,
               t_append / (double)entries * 1e6, t_round / (double)rounds * 1e6, t_cp * 1e3,
               incl_mean_us, t_incl_verify / (double)proofs * 1e6, incl_p99_us,
               t_cons / (double)proofs * 1e6, max_np, t_export, t_verify, (double)ne / t_verify,
               (double)blen / 1e6 / t_verify, mb / t_sha, t_json, (double)ne / t_raw);
    } else {
        printf("audit log benchmark: %" PRId64 " entries (%lld bulk in transactions of %lld, %lld "
               "round entries), %.1f MB of entries, bundle %.1f MB\n",
               size, entries, batch, rounds, mb, (double)blen / 1e6);
        printf("  append (bulk)           %10.0f entries/s  %8.2f us/entry\n",
               (double)entries / t_append, t_append / (double)entries * 1e6);
        printf("  append (round entry)    %10.2f us/entry (inside the round's transaction)\n",
               t_round / (double)rounds * 1e6);
        printf("  checkpoint sign         %10.3f ms\n", t_cp * 1e3);
        printf("  inclusion proof         %10.2f us mean, %.2f us p50, %.2f us p99 (%zu hashes "
               "max); verify %.2f us\n",
               incl_mean_us, incl_p50_us, incl_p99_us, max_np,
               t_incl_verify / (double)proofs * 1e6);
        printf("  consistency proof       %10.2f us mean\n", t_cons / (double)proofs * 1e6);
        printf("  export bundle           %10.3f s\n", t_export);
        printf("  verify bundle (offline) %10.3f s: %.0f entries/s, %.1f MB/s\n", t_verify,
               (double)ne / t_verify, (double)blen / 1e6 / t_verify);
        printf("  ref: SHA-256 of entries %10.1f MB/s (%.3f s)\n", mb / t_sha, t_sha);
        printf("  ref: Jansson parse      %10.3f s\n", t_json);
        printf("  ref: raw SQLite insert  %10.0f entries/s (same bytes, WAL, FULL, same batches)\n",
               (double)ne / t_raw);
    }
    return 0;
}
