/* The offline verifier on exported bundles: a good bundle verifies; changing any single
 * byte anywhere (every position, several replacement values) makes it fail; rule breaks
 * inside correctly signed bundles are reported with the first offending entry; malformed
 * bundles are refused with a message. */
#include <stdio.h>
#include <string.h>

#include "test_audit_forge.h"

/* A small bundle: 2 rounds, a refusal, an erasure, two checkpoints. */
static uint8_t *small_bundle(struct audit_fx *f, size_t *len, char vkey[256]) {
    audit_fx_setup(f, 3);
    STORE_OK(f->st, audit_fx_round(f, 1, 4.0, NULL));
    STORE_OK(f->st, fl_store_audit_checkpoint_sign(f->st, NULL, AUDIT_ORIGIN, f->sk));
    STORE_OK(f->st, fl_store_audit_append_refusal(f->st, NULL, f->pop, 2, 9.0, 1e-7));
    uint8_t key[32] = {1};
    STORE_OK(f->st, fl_store_client_erase(f->st, NULL, "c002", key));
    STORE_OK(f->st, fl_store_audit_checkpoint_sign(f->st, NULL, AUDIT_ORIGIN, f->sk));
    STORE_OK(f->st, fl_store_audit_vkey(vkey, 256, AUDIT_ORIGIN, f->pk));
    uint8_t *buf = NULL;
    STORE_OK(f->st, fl_store_audit_export(f->st, &buf, len));
    uint8_t *copy = malloc(*len);
    memcpy(copy, buf, *len);
    fl_store_free(f->st, buf);
    return copy;
}

static void test_every_byte(void **state) {
    (void)state;
    struct audit_fx f;
    char vkey[256];
    size_t len = 0;
    uint8_t *buf = small_bundle(&f, &len, vkey);
    fl_store_audit_verdict v;
    assert_int_equal(audit_bundle_check(buf, len, vkey, &v), FL_OK);
    assert_int_equal(audit_bundle_check(buf, len, NULL, &v), FL_OK);
    /* For each position: flip the low bit, flip the high bit, and swap in a character
     * that is plausible in context (a digit for a digit, a letter for a letter). */
    size_t tried = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t orig = buf[i];
        uint8_t alts[3] = {(uint8_t)(orig ^ 0x01), (uint8_t)(orig ^ 0x80),
                           (uint8_t)(orig >= '0' && orig <= '9'   ? '0' + (orig - '0' + 1) % 10
                                     : orig >= 'a' && orig <= 'z' ? 'a' + (orig - 'a' + 1) % 26
                                     : orig >= 'A' && orig <= 'Z' ? 'A' + (orig - 'A' + 1) % 26
                                                                  : orig ^ 0x02)};
        for (int k = 0; k < 3; k++) {
            buf[i] = alts[k];
            fl_status r = audit_bundle_check(buf, len, NULL, &v);
            if (r == FL_OK)
                fail_msg("byte %zu changed 0x%02x -> 0x%02x still verifies", i, orig, alts[k]);
            tried++;
        }
        buf[i] = orig;
    }
    assert_int_equal(tried, len * 3);
    /* Truncation at every line boundary, and a dropped or duplicated line. */
    for (size_t i = 0; i + 1 < len; i++)
        if (buf[i] == '\n')
            assert_int_not_equal(audit_bundle_check(buf, i + 1, NULL, &v), FL_OK);
    assert_int_equal(audit_bundle_check(buf, len, vkey, &v), FL_OK);
    free(buf);
    audit_fx_teardown(&f);
}

/* A malloc'ed copy of s with the first `from` replaced by `to` (which must occur). */
static char *replace_first(const char *s, const char *from, const char *to) {
    const char *hit = strstr(s, from);
    assert_non_null(hit);
    size_t fl_ = strlen(from), tl = strlen(to);
    char *mod = malloc(strlen(s) + tl + 1);
    assert_non_null(mod);
    memcpy(mod, s, (size_t)(hit - s));
    memcpy(mod + (hit - s), to, tl);
    memcpy(mod + (hit - s) + tl, hit + fl_, strlen(hit + fl_) + 1);
    return mod;
}

static void test_rule_breaks_named(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    for (int i = 0; i < 6; i++)
        STORE_OK(f.st, audit_fx_round(&f, i % 2, 1.0, NULL));
    char *e[8];
    for (int i = 0; i < 8; i++) {
        fl_store_audit_entry *x = NULL;
        STORE_OK(f.st, fl_store_audit_entry_get(f.st, &x, i));
        e[i] = strdup(x->json);
        fl_store_free(f.st, x);
    }
    size_t len = 0;
    fl_store_audit_verdict v;
    uint8_t *b = audit_bundle_resign(&f, e, 8, &len);
    assert_int_equal(audit_bundle_check(b, len, NULL, &v), FL_OK);
    free(b);

    struct {
        int entry;
        const char *from, *to, *why;
    } cases[] = {
        /* Total over the budget in the last round (and the running totals adjusted). */
        {7, "\"epsilon_total_e9\":6000000000", "\"epsilon_total_e9\":9000000000", "previous"},
        {7, "\"epsilon_spent_e9\":1000000000,\"epsilon_total_e9\":6000000000",
         "\"epsilon_spent_e9\":4000000000,\"epsilon_total_e9\":9000000000", "over budget"},
        {3, "\"completed\":2", "\"completed\":3", "counts"},
        {5, "\"EU\":2", "\"AU\":2", "allowed"},
        {6, "\"version\":", "\"version\":1", "lineage"},
        {3, "\"seq\":3", "\"seq\":4", "position"},
        {2, "\"type\":\"round\"", "\"type\":\"rounds\"", "unknown"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *orig = e[cases[k].entry];
        char *mod = replace_first(orig, cases[k].from, cases[k].to);
        e[cases[k].entry] = mod;
        b = audit_bundle_resign(&f, e, 8, &len);
        fl_status r = audit_bundle_check(b, len, NULL, &v);
        if (r == FL_OK)
            fail_msg("case %zu verified", k);
        assert_int_equal(v.ok, 0);
        assert_int_equal(v.bad_entry, cases[k].entry);
        assert_int_equal(v.bad_line, cases[k].entry + 2);
        if (!strstr(v.message, cases[k].why))
            fail_msg("case %zu: message '%s' lacks '%s'", k, v.message, cases[k].why);
        free(b);
        free(mod);
        e[cases[k].entry] = orig;
    }
    for (int i = 0; i < 8; i++)
        free(e[i]);
    audit_fx_teardown(&f);
}

/* Rounds 2, 4 and 6 with norm proofs (the fixture's edit hook). */
static const fl_store_audit_round_info *norm_every_other(fl_store_audit_round_info *info,
                                                         void *user) {
    int *i = user;
    if (++*i % 2 == 0) {
        info->norm_proof_enabled = 1;
        info->norm_bits = 17;
        info->norm_bound2 = 65536;
        info->norm_dim = 100;
        info->norm_weight_max = 5;
    }
    return info;
}

/* A signed bundle whose norm_proof objects were doctored: the verifier names the entry and
 * the field; an honest one (with and without proofs) verifies. */
static void test_norm_proof_forged(void **state) {
    (void)state;
    struct audit_fx f;
    int count = 0;
    audit_fx_setup(&f, 3);
    f.edit = norm_every_other;
    f.edit_user = &count;
    for (int i = 0; i < 6; i++)
        STORE_OK(f.st, audit_fx_round(&f, 0, 1.0, NULL));
    char *e[8];
    for (int i = 0; i < 8; i++) {
        fl_store_audit_entry *x = NULL;
        STORE_OK(f.st, fl_store_audit_entry_get(f.st, &x, i));
        e[i] = strdup(x->json);
        fl_store_free(f.st, x);
        /* entries 3, 5, 7 are rounds 2, 4, 6 */
        assert_int_equal(strstr(e[i], "\"norm_proof\":{\"bits\":17,\"bound2\":65536,\"dim\":100,"
                                      "\"weight_max\":5}") != NULL,
                         i >= 3 && i % 2 == 1);
    }
    size_t len = 0;
    fl_store_audit_verdict v;
    uint8_t *b = audit_bundle_resign(&f, e, 8, &len);
    if (audit_bundle_check(b, len, NULL, &v) != FL_OK)
        fail_msg("honest: %s", v.message);
    free(b);
    struct {
        int entry;
        const char *from, *to, *why;
    } cases[] = {
        {3, "\"bound2\":65536", "\"bound2\":0",
         "secagg.norm_proof: \"bound2\" = 0 is out of range"},
        {5, "\"bits\":17", "\"bits\":40", "secagg.norm_proof: \"bits\" = 40 is out of range"},
        {7, "\"dim\":100,", "", "secagg.norm_proof lacks field \"dim\""},
        {7, "\"weight_max\":5}", "\"weight_max\":5,\"zeta\":1}",
         "secagg.norm_proof has unknown field \"zeta\""},
        {3, "{\"bits\":17,\"bound2\":65536,\"dim\":100,\"weight_max\":5}", "null",
         "secagg.norm_proof is not an object"},
        /* a proof object slipped into a plain round's secagg, with a bad range */
        {4, "\"n\":3,\"t\"",
         "\"n\":3,\"norm_proof\":{\"bits\":1,\"bound2\":1,\"dim\":1,"
         "\"weight_max\":1},\"t\"",
         "secagg.norm_proof: \"bits\" = 1 is out of range"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *orig = e[cases[k].entry];
        char *mod = replace_first(orig, cases[k].from, cases[k].to);
        e[cases[k].entry] = mod;
        b = audit_bundle_resign(&f, e, 8, &len);
        if (audit_bundle_check(b, len, NULL, &v) == FL_OK)
            fail_msg("case %zu verified", k);
        assert_int_equal(v.bad_entry, cases[k].entry);
        if (!strstr(v.message, cases[k].why))
            fail_msg("case %zu: message '%s' lacks '%s'", k, v.message, cases[k].why);
        free(b);
        free(mod);
        e[cases[k].entry] = orig;
    }
    for (int i = 0; i < 8; i++)
        free(e[i]);
    audit_fx_teardown(&f);
}

static void test_malformed(void **state) {
    (void)state;
    fl_store_audit_verdict v;
    const char *bad[] = {
        "",
        "\n",
        "{}\n",
        "not json\n",
        "{\"checkpoints\":0,\"entries\":0,\"format\":\"flotilla-audit-bundle/1\","
        "\"origin\":\"x\",\"public_key\":\"x\"}\n",
        "{\"checkpoints\":1,\"entries\":1,\"format\":\"flotilla-audit-bundle/2\","
        "\"origin\":\"x\",\"public_key\":\"x\"}\n{}\n{}\n",
        "{\"checkpoints\": 1}\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_store_audit_bundle *b = NULL;
        fl_status r = fl_store_audit_bundle_open(&b, bad[i], strlen(bad[i]), NULL);
        assert_int_not_equal(r, FL_OK);
        assert_non_null(fl_store_audit_bundle_errmsg(b));
        assert_int_equal(fl_store_audit_bundle_entry_count(b), 0);
        assert_int_not_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
        assert_int_equal(v.ok, 0);
        fl_store_audit_bundle_close(b);
    }
    assert_int_equal(fl_store_audit_bundle_open(NULL, "x", 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_bundle_verify(NULL, NULL, &v), FL_ERR_MISUSE);
    fl_store_audit_bundle_close(NULL);
    /* Verifier keys: strict parsing. */
    uint8_t pk[32] = {0};
    char vkey[256];
    assert_int_equal(fl_store_audit_vkey(vkey, sizeof(vkey), "log.example", pk), FL_OK);
    assert_int_equal(fl_store_audit_vkey(vkey, 10, "log.example", pk), FL_ERR_RANGE);
    assert_int_equal(fl_store_audit_checkpoint_verify("x\n", 2, vkey, NULL, NULL), FL_ERR_FORMAT);
    assert_int_equal(fl_store_audit_checkpoint_verify("x\n", 2, "bad", NULL, NULL), FL_ERR_FORMAT);
}

/* A bundle of one population with many entries verifies in a bounded time and memory. */
static void test_oom_verify(void **state) {
    (void)state;
    struct audit_fx f;
    char vkey[256];
    size_t len = 0;
    uint8_t *buf = small_bundle(&f, &len, vkey);
    struct fl_test_counting cnt = {0};
    fl_allocator a = fl_test_counting_allocator(&cnt);
    int done = 0;
    for (long k = 1; !done && k < 100; k++) {
        cnt.calls = 0;
        cnt.fail_at = k;
        fl_store_audit_bundle *b = NULL;
        fl_store_audit_verdict v;
        fl_status r = fl_store_audit_bundle_open(&b, buf, len, &a);
        if (r == FL_OK)
            r = fl_store_audit_bundle_verify(b, vkey, &v);
        fl_store_audit_bundle_close(b);
        cnt.fail_at = 0;
        if (r == FL_OK)
            done = 1;
        else
            assert_int_equal(r, FL_ERR_NOMEM);
        assert_int_equal(cnt.live, 0);
    }
    assert_true(done);
    free(buf);
    audit_fx_teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_byte),
        cmocka_unit_test(test_rule_breaks_named),
        cmocka_unit_test(test_norm_proof_forged),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_oom_verify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
