/* The audit log inside the store: appends from coordinator-style round commits, the rules
 * enforced at append time, proofs against stored roots, signed checkpoints across
 * restarts, append-only triggers, erasure and retention, atomicity, export. */
#include <stdio.h>
#include <string.h>

#include "merkle_internal.h"
#include "test_audit_util.h"

static void test_sizes(void **state) {
    (void)state;
    assert_int_equal(fl_store_audit_hash_bytes(), FL_STORE_AUDIT_HASH_BYTES);
    assert_int_equal(fl_store_audit_public_key_bytes(), FL_STORE_AUDIT_PUBLIC_KEY_BYTES);
    assert_int_equal(fl_store_audit_secret_key_bytes(), FL_STORE_AUDIT_SECRET_KEY_BYTES);
    assert_int_equal(fl_store_audit_pseudonym_key_bytes(), FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES);
    assert_int_equal(fl_store_audit_pseudonym_bytes(), FL_STORE_AUDIT_PSEUDONYM_BYTES);
    assert_int_equal(fl_store_audit_proof_max(), FL_STORE_AUDIT_PROOF_MAX);
    assert_int_equal(fl_store_audit_entry_max(), FL_STORE_AUDIT_ENTRY_MAX);
    assert_int_equal(fl_store_audit_origin_max(), FL_STORE_AUDIT_ORIGIN_MAX);
    assert_int_equal(fl_store_audit_phases(), FL_STORE_AUDIT_PHASES);
    assert_int_equal(FL_STORE_AUDIT_PUBLIC_KEY_BYTES, crypto_sign_PUBLICKEYBYTES);
    assert_int_equal(FL_STORE_AUDIT_SECRET_KEY_BYTES, crypto_sign_SECRETKEYBYTES);
    assert_int_equal(FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES, crypto_auth_hmacsha256_KEYBYTES);
}

static void test_misuse(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    uint8_t proof[4][32];
    size_t n = 0;
    int64_t size = 0;
    assert_int_equal(fl_store_audit_size(NULL, &size), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_size(f.st, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, NULL), FL_ERR_MISUSE);
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f.st), "round_id"));
    info.round_id = 1;
    info.struct_size = 8;
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f.st), "struct_size"));
    assert_int_equal(fl_store_audit_inclusion_proof(f.st, proof, 4, &n, 5, 2), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_inclusion_proof(f.st, proof, 4, &n, 0, 99), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_consistency_proof(f.st, proof, 4, &n, 2, 1), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_checkpoint_sign(f.st, NULL, "bad origin", f.sk), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_checkpoint_sign(f.st, NULL, "a+b", f.sk), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_append_population(f.st, NULL, f.pop), FL_ERR_EXISTS);
    assert_int_equal(fl_store_audit_append_population(f.st, NULL, 99), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_audit_append_config(f.st, NULL, f.pop, NULL, -1, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_append_config(f.st, NULL, f.pop, "{", 1, 0, NULL),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_store_audit_append_model(f.st, NULL, f.pop, 999), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_retention_sweep(f.st, NULL, 0), FL_ERR_MISUSE);
    uint8_t key[32] = {0};
    assert_int_equal(fl_store_client_erase(f.st, NULL, "c000", NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_erase(f.st, NULL, "nobody", key), FL_ERR_NOT_FOUND);
    fl_store_audit_checkpoint *cp = NULL;
    assert_int_equal(fl_store_audit_checkpoint_latest(f.st, &cp), FL_ERR_NOT_FOUND);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(fl_store_audit_export(f.st, &buf, &len), FL_ERR_NOT_FOUND);
    /* Nothing was logged by the failures: population + model entries only. */
    STORE_OK(f.st, fl_store_audit_size(f.st, &size));
    assert_int_equal(size, 2);
    audit_fx_teardown(&f);
}

/* Root of the first n entries recomputed from their bytes. */
static void root_from_bytes(fl_store *st, int64_t n, uint8_t out[32]) {
    struct fl__store_merkle_mem t;
    fl__store_merkle_mem_init(&t, NULL);
    for (int64_t i = 0; i < n; i++) {
        fl_store_audit_entry *e = NULL;
        STORE_OK(st, fl_store_audit_entry_get(st, &e, i));
        uint8_t leaf[32];
        fl_store_audit_leaf_hash(leaf, e->json, e->size);
        assert_memory_equal(leaf, e->leaf_hash, 32);
        assert_int_equal(strlen(e->json), e->size);
        assert_int_equal(fl__store_merkle_mem_append(&t, leaf), FL_OK);
        fl_store_free(st, e);
    }
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    assert_int_equal(fl__store_merkle_root(&src, (uint64_t)n, out), FL_OK);
    fl__store_merkle_mem_free(&t);
}

static void test_rounds_and_proofs(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 6);
    char vkey[256];
    STORE_OK(f.st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    int64_t seq = -1, cp_sizes[3];
    int ncp = 0;
    for (int r = 0; r < 12; r++) {
        STORE_OK(f.st, audit_fx_round(&f, r % 3, 0.25, &seq));
        assert_int_equal(seq, r + 2);
        if (r == 2 || r == 6 || r == 11) {
            fl_store_audit_checkpoint *cp = NULL;
            STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, &cp, AUDIT_ORIGIN, f.sk));
            int64_t size = 0;
            uint8_t root[32], want[32];
            STORE_OK(f.st, fl_store_audit_checkpoint_verify(cp->note, strlen(cp->note), vkey, &size,
                                                            root));
            assert_int_equal(size, cp->tree_size);
            assert_int_equal(size, seq + 1);
            assert_memory_equal(root, cp->root, 32);
            root_from_bytes(f.st, size, want);
            assert_memory_equal(root, want, 32);
            cp_sizes[ncp++] = size;
            fl_store_free(f.st, cp);
        }
    }
    int64_t total = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &total));
    assert_int_equal(total, 14);
    /* Every inclusion proof and every consistency proof at every size verifies. */
    uint8_t roots[15][32];
    for (int64_t n = 0; n <= total; n++)
        STORE_OK(f.st, fl_store_audit_root(f.st, roots[n], n));
    uint8_t proof[FL_STORE_AUDIT_PROOF_MAX][32];
    size_t np = 0;
    for (int64_t n = 1; n <= total; n++) {
        for (int64_t i = 0; i < n; i++) {
            fl_store_audit_entry *e = NULL;
            STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, i));
            STORE_OK(f.st, fl_store_audit_inclusion_proof(f.st, proof, FL_STORE_AUDIT_PROOF_MAX,
                                                          &np, i, n));
            assert_int_equal(
                fl_store_audit_verify_inclusion(e->leaf_hash, i, n, proof, np, roots[n]), FL_OK);
            if (n > 1)
                assert_int_equal(fl_store_audit_verify_inclusion(e->leaf_hash, (i + 1) % n, n,
                                                                 proof, np, roots[n]),
                                 FL_ERR_CRYPTO);
            fl_store_free(f.st, e);
        }
        for (int64_t m = 0; m <= n; m++) {
            STORE_OK(f.st, fl_store_audit_consistency_proof(f.st, proof, FL_STORE_AUDIT_PROOF_MAX,
                                                            &np, m, n));
            assert_int_equal(fl_store_audit_verify_consistency(m, n, proof, np, roots[m], roots[n]),
                             FL_OK);
        }
    }
    /* A proof buffer that is too small is refused, not overrun. */
    assert_int_equal(fl_store_audit_inclusion_proof(f.st, proof, 1, &np, 0, total), FL_ERR_RANGE);
    assert_int_equal(np, 0);
    (void)cp_sizes;

    /* The round entry says what the round did. */
    fl_store_audit_entry *e = NULL;
    STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, 3));
    assert_non_null(strstr(e->json, "\"type\":\"round\""));
    assert_non_null(strstr(e->json, "\"counts\":{\"checked_in\":8,\"completed\":5,\"dropped\":1,"
                                    "\"selected\":6}"));
    assert_non_null(strstr(e->json, "\"regions\":{\"EU\":4,\"UK\":2}"));
    assert_non_null(strstr(e->json, "\"epsilon_spent_e9\":250000000"));
    assert_non_null(strstr(e->json, "\"epsilon_total_e9\":500000000"));
    assert_non_null(strstr(e->json, "\"mechanism\":\"ddgauss\""));
    assert_non_null(strstr(e->json, "\"secagg\":{\"k\":5,\"n\":6,\"t\":2}"));
    assert_null(strstr(e->json, "c00")); /* no client ids */
    fl_store_free(f.st, e);
    audit_fx_teardown(&f);
}

static void test_rules_at_append(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    int64_t before = 0, after = 0;
    STORE_OK(f.st, audit_fx_round(&f, 0, 3.0, NULL));
    STORE_OK(f.st, audit_fx_round(&f, 1, 3.0, NULL));
    STORE_OK(f.st, fl_store_audit_size(f.st, &before));
    /* 6 + 3 > 8: over budget, refused, and the whole round commit rolled back. */
    assert_int_equal(audit_fx_round(&f, 0, 3.0, NULL), FL_ERR_BUDGET);
    assert_non_null(strstr(f.msg, "budget"));
    STORE_OK(f.st, fl_store_audit_size(f.st, &after));
    assert_int_equal(after, before);
    fl_store_round *rd = NULL;
    assert_int_equal(fl_store_round_find(f.st, &rd, f.pop, 3), FL_ERR_NOT_FOUND);

    /* Rules on a finished round the coordinator describes wrongly. */
    int64_t rid = 0;
    STORE_OK(f.st, fl_store_round_create(f.st, &rid, f.pop, 0, f.model, NULL));
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.epsilon_total = f.eps_total;
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_STATE);
    STORE_OK(f.st, fl_store_round_start(f.st, rid));
    fl_store_round_counts counts = {4, 4, 3, 1};
    STORE_OK(f.st, fl_store_round_set_counts(f.st, rid, &counts));
    float w[64];
    audit_fx_weights(w, 64, 99);
    fl_store_model_ref ref;
    STORE_OK(f.st, fl_store_model_put(f.st, &ref, f.pop, f.model, w, sizeof(w), NULL));
    STORE_OK(f.st, fl_store_round_complete(f.st, rid, ref.version));
    fl_store_audit_region reg[2] = {{"EU", 3}, {"UK", 1}};
    info.regions = reg;
    info.n_regions = 2;
    /* dropped is 1 but no phase says so. */
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f.st), "per phase"));
    info.dropped_by_phase[FL_STORE_AUDIT_PHASE_SHARE] = 1;
    /* A region outside the population's. */
    fl_store_audit_region bad[2] = {{"EU", 3}, {"US", 1}};
    info.regions = bad;
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f.st), "US"));
    info.regions = reg;
    /* Regions that do not add up to selected. */
    info.n_regions = 1;
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    info.n_regions = 2;
    /* Epsilon going down. */
    info.epsilon_total = f.eps_total - 1;
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    info.epsilon_total = f.eps_total + 0.5;
    /* Secagg threshold above the survivors. */
    info.secagg_enabled = 1;
    info.secagg_n = 4;
    info.secagg_k = 4;
    info.secagg_t = 4;
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f.st), "threshold"));
    info.secagg_t = 3;
    /* No ledger entry for this round: a spend without a DP mechanism. */
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f.st), "mechanism"));
    info.epsilon_total = f.eps_total;
    STORE_OK(f.st, fl_store_audit_append_round(f.st, NULL, &info));
    /* Logged once only. */
    assert_int_equal(fl_store_audit_append_round(f.st, NULL, &info), FL_ERR_EXISTS);
    STORE_OK(f.st, fl_store_audit_size(f.st, &after));
    assert_int_equal(after, before + 1);

    /* An abandoned round is logged with no model out and no spend. */
    STORE_OK(f.st, fl_store_round_create(f.st, &rid, f.pop, 0, ref.version, NULL));
    STORE_OK(f.st, fl_store_round_abandon(f.st, rid, "too few clients"));
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.epsilon_total = f.eps_total;
    STORE_OK(f.st, fl_store_audit_append_round(f.st, NULL, &info));
    fl_store_audit_entry *e = NULL;
    STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, after));
    assert_non_null(strstr(e->json, "\"outcome\":\"abandoned\""));
    assert_non_null(strstr(e->json, "\"model_out\":null"));
    fl_store_free(f.st, e);
    audit_fx_teardown(&f);
}

static void test_refusals_and_config(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    STORE_OK(f.st, audit_fx_round(&f, 0, 7.5, NULL));
    /* Within the budget is not a refusal. */
    assert_int_equal(fl_store_audit_append_refusal(f.st, NULL, f.pop, 2, 7.9, 1e-7), FL_ERR_MISUSE);
    int64_t seq = 0;
    STORE_OK(f.st, fl_store_audit_append_refusal(f.st, &seq, f.pop, 2, 8.4, 1e-7));
    fl_store_audit_entry *e = NULL;
    STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, seq));
    assert_non_null(strstr(e->json, "\"type\":\"budget_refused\""));
    assert_non_null(strstr(e->json, "\"epsilon_requested_e9\":8400000000"));
    fl_store_free(f.st, e);
    /* A new budget (config change) lets the next round run. */
    STORE_OK(f.st, fl_store_audit_append_config(f.st, NULL, f.pop, "{\"v\":2}", 10.0, 1e-6,
                                                "[\"EU\",\"UK\"]"));
    STORE_OK(f.st, audit_fx_round(&f, 0, 1.0, NULL));
    /* Budget terms shrink below the spend: the next round with a spend is refused. */
    STORE_OK(f.st, fl_store_audit_append_config(f.st, NULL, f.pop, NULL, 8.0, 1e-6, NULL));
    assert_int_equal(audit_fx_round(&f, 0, 0.1, NULL), FL_ERR_BUDGET);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
    assert_int_equal(v.ok, 1);
    assert_int_equal(v.entries, 7);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

static void test_checkpoints_across_restarts(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    char vkey[256];
    STORE_OK(f.st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    for (int i = 0; i < 5; i++)
        STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    fl_store_audit_checkpoint *a = NULL, *b = NULL, *again = NULL;
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, &a, AUDIT_ORIGIN, f.sk));
    /* No growth: the same checkpoint comes back, nothing new is stored. */
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, &again, AUDIT_ORIGIN, f.sk));
    assert_int_equal(again->tree_size, a->tree_size);
    assert_string_equal(again->note, a->note);
    fl_store_free(f.st, again);
    char note_a[1024];
    snprintf(note_a, sizeof(note_a), "%s", a->note);
    fl_store_free(f.st, a);

    fl_store_close(f.st);
    f.st = audit_fx_open(&f, NULL);
    /* The round counter and epsilon total come back from the log itself. */
    for (int i = 0; i < 4; i++)
        STORE_OK(f.st, audit_fx_round(&f, 1, 0.1, NULL));
    /* Another key or origin for the same log is refused. */
    uint8_t pk2[32], sk2[64];
    crypto_sign_keypair(pk2, sk2);
    assert_int_equal(fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, sk2), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_checkpoint_sign(f.st, NULL, "other.log", f.sk), FL_ERR_MISUSE);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, &b, AUDIT_ORIGIN, f.sk));
    STORE_OK(f.st, fl_store_audit_checkpoint_latest(f.st, &again));
    assert_string_equal(again->note, b->note);
    fl_store_free(f.st, again);

    /* What an outside verifier does: check both notes, ask for a consistency proof. */
    int64_t m = 0, n = 0;
    uint8_t r1[32], r2[32], proof[FL_STORE_AUDIT_PROOF_MAX][32];
    size_t np = 0;
    STORE_OK(f.st, fl_store_audit_checkpoint_verify(note_a, strlen(note_a), vkey, &m, r1));
    STORE_OK(f.st, fl_store_audit_checkpoint_verify(b->note, strlen(b->note), vkey, &n, r2));
    assert_int_equal(m, 7);
    assert_int_equal(n, 11);
    STORE_OK(f.st,
             fl_store_audit_consistency_proof(f.st, proof, FL_STORE_AUDIT_PROOF_MAX, &np, m, n));
    assert_int_equal(fl_store_audit_verify_consistency(m, n, proof, np, r1, r2), FL_OK);
    assert_int_equal(fl_store_audit_verify_consistency(m, n, proof, np, r2, r1), FL_ERR_CRYPTO);
    /* A note under another key, or a changed note, does not verify. */
    char vkey2[256];
    STORE_OK(f.st, fl_store_audit_vkey(vkey2, sizeof(vkey2), AUDIT_ORIGIN, pk2));
    assert_int_equal(fl_store_audit_checkpoint_verify(b->note, strlen(b->note), vkey2, NULL, NULL),
                     FL_ERR_CRYPTO);
    note_a[strlen(AUDIT_ORIGIN) + 1] = '8'; /* tree size 7 -> 8 */
    assert_int_equal(fl_store_audit_checkpoint_verify(note_a, strlen(note_a), vkey, NULL, NULL),
                     FL_ERR_CRYPTO);
    fl_store_free(f.st, b);
    audit_fx_teardown(&f);
}

static void test_append_only(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    sqlite3 *raw = store_raw_open(f.t.path);
    const char *sql[] = {
        "UPDATE audit_entries SET data = 'x' WHERE seq = 0",
        "DELETE FROM audit_entries WHERE seq = 0",
        ("INSERT OR REPLACE INTO audit_entries (seq, type, created_at, data) "
         "VALUES (0, 'x', 0, 'xx')"),
        "UPDATE audit_tree SET hash = zeroblob(32)",
        "DELETE FROM audit_tree",
        "INSERT OR REPLACE INTO audit_tree VALUES (0, 0, zeroblob(32))",
        "UPDATE audit_checkpoints SET note = ''",
        "DELETE FROM audit_checkpoints",
    };
    for (size_t i = 0; i < sizeof(sql) / sizeof(sql[0]); i++) {
        char *err = NULL;
        assert_int_not_equal(sqlite3_exec(raw, sql[i], NULL, NULL, &err), SQLITE_OK);
        assert_non_null(strstr(err, "append-only"));
        sqlite3_free(err);
    }
    /* Someone who drops the triggers and rewrites an entry is caught at the next
     * checkpoint and by the offline verifier. */
    assert_int_equal(sqlite3_exec(raw,
                                  "DROP TRIGGER audit_entries_append_only_update;"
                                  "UPDATE audit_entries SET data = replace(data, 'keyboard', "
                                  "'keyb0ard') WHERE seq = 0;"
                                  "DROP TRIGGER audit_tree_append_only_update;"
                                  "UPDATE audit_tree SET hash = zeroblob(32) WHERE level = 1 "
                                  "AND idx = 0;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(raw);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    assert_int_equal(fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk),
                     FL_ERR_CORRUPT);
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    assert_int_not_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
    assert_int_equal(v.ok, 0);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

/* Whether any audit entry's bytes contain s. */
static int log_contains(fl_store *st, const char *s) {
    int64_t n = 0;
    int found = 0;
    STORE_OK(st, fl_store_audit_size(st, &n));
    for (int64_t i = 0; i < n; i++) {
        fl_store_audit_entry *e = NULL;
        STORE_OK(st, fl_store_audit_entry_get(st, &e, i));
        found |= strstr(e->json, s) != NULL;
        fl_store_free(st, e);
    }
    return found;
}

static void test_erasure(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    STORE_OK(f.st, audit_fx_round(&f, 1, 0.1, NULL));
    uint8_t key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES];
    memset(key, 0x42, sizeof(key));
    int64_t seq = 0, before = 0, after = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &before));
    STORE_OK(f.st, fl_store_client_erase(f.st, &seq, "c002", key));
    assert_int_equal(seq, before);
    fl_store_client *c = NULL;
    assert_int_equal(fl_store_client_get(f.st, &c, "c002"), FL_ERR_NOT_FOUND);
    fl_store_round *rd = NULL;
    STORE_OK(f.st, fl_store_round_find(f.st, &rd, f.pop, 0));
    fl_store_participant *parts = NULL;
    size_t np = 0;
    STORE_OK(f.st, fl_store_participant_list(f.st, &parts, &np, rd->id));
    assert_int_equal(np, 3);
    for (size_t i = 0; i < np; i++)
        assert_string_not_equal(parts[i].client_id, "c002");
    fl_store_free(f.st, parts);
    fl_store_free(f.st, rd);
    char nym[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    STORE_OK(f.st, fl_store_audit_pseudonym(nym, key, "c002"));
    uint8_t mac[32];
    crypto_auth_hmacsha256(mac, (const uint8_t *)"c002", 4, key);
    char hex[65];
    sodium_bin2hex(hex, sizeof(hex), mac, 32);
    assert_string_equal(nym, hex);
    assert_true(log_contains(f.st, nym));
    assert_true(log_contains(f.st, "\"participations\":1"));
    assert_false(log_contains(f.st, "c002"));
    /* Erasing again: nothing left, nothing logged. */
    assert_int_equal(fl_store_client_erase(f.st, NULL, "c002", key), FL_ERR_NOT_FOUND);
    STORE_OK(f.st, fl_store_audit_size(f.st, &after));
    assert_int_equal(after, before + 1);
    /* Inside a caller transaction that rolls back, the client stays and nothing is logged. */
    STORE_OK(f.st, fl_store_begin(f.st));
    STORE_OK(f.st, fl_store_client_erase(f.st, NULL, "c001", key));
    STORE_OK(f.st, fl_store_rollback(f.st));
    STORE_OK(f.st, fl_store_client_get(f.st, &c, "c001"));
    fl_store_free(f.st, c);
    STORE_OK(f.st, fl_store_audit_size(f.st, &after));
    assert_int_equal(after, before + 1);
    audit_fx_teardown(&f);
}

static void test_retention(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 5);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    /* 40 days later, c000 and c001 come back; the others do not. */
    int64_t day = 86400000;
    f.now += 40 * day;
    STORE_OK(f.st, fl_store_client_touch(f.st, "c000"));
    STORE_OK(f.st, fl_store_client_touch(f.st, "c001"));
    f.now += day;
    fl_store_retention_result res;
    STORE_OK(f.st, fl_store_retention_sweep(f.st, &res, 30 * day));
    assert_int_equal(res.cutoff, f.now - 30 * day);
    assert_int_equal(res.clients_deleted, 3);
    /* 3 participations of expired clients + 2 expired ones of the others. */
    assert_int_equal(res.participations_deleted, 5);
    fl_store_client *c = NULL;
    assert_int_equal(fl_store_client_get(f.st, &c, "c004"), FL_ERR_NOT_FOUND);
    STORE_OK(f.st, fl_store_client_get(f.st, &c, "c000"));
    fl_store_free(f.st, c);
    fl_store_audit_entry *e = NULL;
    STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, res.seq));
    assert_non_null(strstr(e->json, "\"type\":\"retention\""));
    assert_non_null(strstr(e->json, "\"deleted\":{\"clients\":3,\"participations\":5}"));
    fl_store_free(f.st, e);
    /* The log still verifies; the round entry (aggregates only) is untouched. */
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

static void test_export_round_trip(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    for (int i = 0; i < 6; i++) {
        STORE_OK(f.st, audit_fx_round(&f, i % 2, 0.3, NULL));
        if (i % 2)
            STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    }
    /* An entry after the last checkpoint is not exported. */
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.3, NULL));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    char path[400];
    snprintf(path, sizeof(path), "%s/bundle.jsonl", f.t.dir);
    STORE_OK(f.st, fl_store_audit_export_file(f.st, path));
    size_t flen = 0;
    uint8_t *fbuf = audit_read_file(path, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(fbuf, buf, len);
    free(fbuf);
    remove(path);

    char vkey[256];
    STORE_OK(f.st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    assert_int_equal(fl_store_audit_bundle_verify(b, vkey, &v), FL_OK);
    assert_int_equal(v.ok, 1);
    assert_int_equal(v.entries, 8);
    assert_int_equal(v.checkpoints, 3);
    assert_string_equal(fl_store_audit_bundle_origin(b), AUDIT_ORIGIN);
    assert_string_equal(fl_store_audit_bundle_vkey(b), vkey);
    /* Import: the entries are byte for byte the stored ones, and reassembling the parts
     * gives the same bundle. */
    size_t cap = len + 1, at = 0;
    char *again = malloc(cap);
    at += (size_t)snprintf(again, cap, "%.*s\n", (int)(strchr((char *)buf, '\n') - (char *)buf),
                           (char *)buf);
    for (size_t i = 0; i < fl_store_audit_bundle_entry_count(b); i++) {
        size_t el = 0;
        const char *ep = fl_store_audit_bundle_entry(b, i, &el);
        fl_store_audit_entry *e = NULL;
        STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, (int64_t)i));
        assert_int_equal(el, e->size);
        assert_memory_equal(ep, e->json, el);
        fl_store_free(f.st, e);
        memcpy(again + at, ep, el);
        at += el;
        again[at++] = '\n';
    }
    for (size_t i = 0; i < fl_store_audit_bundle_checkpoint_count(b); i++) {
        size_t cl = 0;
        const char *cpl = fl_store_audit_bundle_checkpoint(b, i, &cl);
        memcpy(again + at, cpl, cl);
        at += cl;
        again[at++] = '\n';
    }
    assert_int_equal(at, len);
    assert_memory_equal(again, buf, len);
    assert_null(fl_store_audit_bundle_entry(b, 99, NULL));
    free(again);
    fl_store_audit_bundle_close(b);

    /* Another trusted key: refused. */
    uint8_t pk2[32], sk2[64];
    crypto_sign_keypair(pk2, sk2);
    char vkey2[256];
    STORE_OK(f.st, fl_store_audit_vkey(vkey2, sizeof(vkey2), AUDIT_ORIGIN, pk2));
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    assert_int_equal(fl_store_audit_bundle_verify(b, vkey2, &v), FL_ERR_CRYPTO);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

static void test_oom_walk(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.1, NULL));
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    fl_store_close(f.st);
    struct fl_test_counting cnt = {0};
    fl_allocator a = fl_test_counting_allocator(&cnt);
    f.st = audit_fx_open(&f, &a);
    /* Export, checkpoint and entry reads: fail each allocation in turn. */
    for (int op = 0; op < 3; op++) {
        int done = 0;
        for (long k = 1; !done && k < 200; k++) {
            cnt.calls = 0;
            cnt.fail_at = k;
            long live = cnt.live;
            fl_status r;
            uint8_t *buf = NULL;
            size_t len = 0;
            fl_store_audit_checkpoint *cp = NULL;
            fl_store_audit_entry *e = NULL;
            if (op == 0)
                r = fl_store_audit_export(f.st, &buf, &len);
            else if (op == 1)
                r = fl_store_audit_checkpoint_latest(f.st, &cp);
            else
                r = fl_store_audit_entry_get(f.st, &e, 1);
            cnt.fail_at = 0;
            if (r == FL_OK) {
                done = 1;
                fl_store_free(f.st, buf);
                fl_store_free(f.st, cp);
                fl_store_free(f.st, e);
            } else {
                assert_int_equal(r, FL_ERR_NOMEM);
            }
            assert_int_equal(cnt.live, live);
        }
        assert_true(done);
    }
    /* Appends: a failed append leaves the log as it was. */
    int64_t size0 = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &size0));
    int done = 0;
    for (long k = 1; !done && k < 200; k++) {
        cnt.calls = 0;
        cnt.fail_at = k;
        fl_status r = fl_store_audit_append_refusal(f.st, NULL, f.pop, 2, 9.0, 0);
        cnt.fail_at = 0;
        int64_t size = 0;
        STORE_OK(f.st, fl_store_audit_size(f.st, &size));
        if (r == FL_OK) {
            done = 1;
            assert_int_equal(size, size0 + 1);
        } else {
            assert_int_equal(r, FL_ERR_NOMEM);
            assert_int_equal(size, size0);
        }
    }
    assert_true(done);
    fl_store_close(f.st);
    f.st = NULL;
    assert_int_equal(cnt.live, 0);
    store_tdir_rm(&f.t);
}

/* Population names are UTF-8 text: they reach the log escaped, and the bundle verifies. */
static void test_utf8_population(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 2);
    int64_t pop = 0, seq = 0;
    STORE_OK(f.st, fl_store_population_create(f.st, &pop, "clavier-\xc3\xa9t\xc3\xa9 \"q\"", NULL,
                                              1.0, 0, NULL));
    STORE_OK(f.st, fl_store_audit_append_population(f.st, &seq, pop));
    fl_store_audit_entry *e = NULL;
    STORE_OK(f.st, fl_store_audit_entry_get(f.st, &e, seq));
    assert_non_null(strstr(e->json, "\"population\":\"clavier-\\u00E9t\\u00E9 \\\"q\\\"\""));
    fl_store_free(f.st, e);
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_rounds_and_proofs),
        cmocka_unit_test(test_rules_at_append),
        cmocka_unit_test(test_refusals_and_config),
        cmocka_unit_test(test_checkpoints_across_restarts),
        cmocka_unit_test(test_append_only),
        cmocka_unit_test(test_erasure),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_oom_walk),
        cmocka_unit_test(test_utf8_population),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
