/* Round entries of rounds with zero-knowledge norm proofs (secagg.norm_proof, added in 0.3):
 *   1. what fl_store_audit_append_round writes with and without proofs (rounds without
 *      keep the 0.2 bytes), and that the log then verifies offline;
 *   2. that a caller built against the 0.2 struct (older struct_size) still appends, and
 *      nothing past its struct is read;
 *   3. each bad norm-proof field refused on append, naming the field;
 *   4. the verifier's rules (fl__store_audit_check) on forged norm_proof objects. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "audit_internal.h"
#include "test_audit_forge.h"
#include "test_audit_util.h"

/* What the edit hook does to a round's info. */
struct edit {
    int secagg;      /* secagg_enabled to set */
    int enabled;     /* norm_proof_enabled */
    uint32_t bits;   /* norm_bits */
    uint64_t bound2; /* norm_bound2 */
    uint32_t dim;    /* norm_dim */
    uint32_t wmax;   /* norm_weight_max */
    size_t size;     /* struct_size to set, 0 = leave */
    int heap;        /* 1: append a heap copy of exactly size bytes (ASan sees any overread) */
    void *copy;      /* that copy, freed by the test */
};

static const fl_store_audit_round_info *apply_edit(fl_store_audit_round_info *info, void *user) {
    struct edit *ed = user;
    info->secagg_enabled = ed->secagg;
    info->norm_proof_enabled = ed->enabled;
    info->norm_bits = ed->bits;
    info->norm_bound2 = ed->bound2;
    info->norm_dim = ed->dim;
    info->norm_weight_max = ed->wmax;
    if (ed->size)
        info->struct_size = ed->size;
    if (!ed->heap)
        return info;
    free(ed->copy);
    ed->copy = malloc(ed->size);
    assert_non_null(ed->copy);
    memcpy(ed->copy, info, ed->size);
    return ed->copy;
}

/* The 0.2 layout of fl_store_audit_round_info, as an old caller was compiled with it. */
struct round_info_v02 {
    size_t struct_size;
    int64_t round_id;
    const uint8_t *task_config_sha256;
    int64_t dropped_by_phase[FL_STORE_AUDIT_PHASES];
    int secagg_enabled;
    int64_t secagg_n, secagg_k, secagg_t;
    double epsilon_total;
    double delta;
    const fl_store_audit_region *regions;
    size_t n_regions;
    const char *coordinator_version;
};
_Static_assert(sizeof(struct round_info_v02) ==
                   offsetof(fl_store_audit_round_info, norm_proof_enabled),
               "the 0.3 fields start where the 0.2 struct ended");

static char *entry_text(struct audit_fx *f, int64_t seq) {
    fl_store_audit_entry *ae = NULL;
    STORE_OK(f->st, fl_store_audit_entry_get(f->st, &ae, seq));
    char *s = strdup(ae->json);
    fl_store_free(f->st, ae);
    return s;
}

static void expect_in(const char *text, const char *want) {
    if (!strstr(text, want))
        fail_msg("entry %s lacks %s", text, want);
}

/* ---- 1 and 2: entries written ---- */

static void test_entries_written(void **state) {
    (void)state;
    struct audit_fx f;
    struct edit ed = {1, 0, 0, 0, 0, 0, 0, 0, NULL};
    audit_fx_setup(&f, 4);
    f.edit = apply_edit;
    f.edit_user = &ed;
    int64_t seq[7];
    /* 2: no proofs; 3: proofs; 4, 5: the extreme values accepted */
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[0]));
    ed = (struct edit){1, 1, 17, 123456789012ULL, 1000, 64, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[1]));
    ed = (struct edit){1, 1, 2, (uint64_t)INT64_MAX, 1, 1, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[2]));
    ed = (struct edit){1, 1, 32, 1, UINT32_MAX, UINT32_MAX, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[3]));
    /* 0.2 callers: a heap struct of exactly the old size, and one whose bytes past the old
     * size hold junk the store must not read. */
    ed = (struct edit){1, 0, 0, 0, 0, 0, sizeof(struct round_info_v02), 1, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[4]));
    free(ed.copy);
    ed = (struct edit){1, 1, 99, 0, 0, 7, sizeof(struct round_info_v02), 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[5]));
    /* no secagg, no proofs: secagg null as in 0.2 */
    ed = (struct edit){0, 0, 0, 0, 0, 0, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[6]));

    const char *want[7] = {
        "\"secagg\":{\"k\":3,\"n\":4,\"t\":2}",
        "\"secagg\":{\"k\":3,\"n\":4,\"norm_proof\":{\"bits\":17,\"bound2\":123456789012,"
        "\"dim\":1000,\"weight_max\":64},\"t\":2}",
        "\"secagg\":{\"k\":3,\"n\":4,\"norm_proof\":{\"bits\":2,\"bound2\":9223372036854775807,"
        "\"dim\":1,\"weight_max\":1},\"t\":2}",
        "\"secagg\":{\"k\":3,\"n\":4,\"norm_proof\":{\"bits\":32,\"bound2\":1,"
        "\"dim\":4294967295,\"weight_max\":4294967295},\"t\":2}",
        "\"secagg\":{\"k\":3,\"n\":4,\"t\":2}",
        "\"secagg\":{\"k\":3,\"n\":4,\"t\":2}",
        "\"secagg\":null",
    };
    for (int i = 0; i < 7; i++) {
        char *s = entry_text(&f, seq[i]);
        expect_in(s, want[i]);
        /* only the proof rounds mention it */
        assert_int_equal(strstr(s, "norm_proof") != NULL, i >= 1 && i <= 3);
        free(s);
    }

    /* The whole log verifies offline, norm proofs included. */
    char vkey[256];
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    STORE_OK(f.st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    if (fl_store_audit_bundle_verify(b, vkey, &v) != FL_OK)
        fail_msg("bundle: %s", v.message);
    assert_int_equal(v.entries, 9);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

/* ---- 3: refused on append ---- */

static void test_append_refused(void **state) {
    (void)state;
    struct audit_fx f;
    struct edit ed;
    audit_fx_setup(&f, 3);
    f.edit = apply_edit;
    f.edit_user = &ed;
    const size_t full = sizeof(fl_store_audit_round_info);
    struct {
        struct edit ed;
        const char *why;
    } cases[] = {
        {{0, 1, 17, 100, 10, 1, 0, 0, NULL}, "norm_proof_enabled needs secagg_enabled"},
        {{1, 1, 1, 100, 10, 1, 0, 0, NULL}, "info->norm_bits: 1 not in 2..32"},
        {{1, 1, 33, 100, 10, 1, 0, 0, NULL}, "info->norm_bits: 33 not in 2..32"},
        {{1, 1, 17, 0, 10, 1, 0, 0, NULL}, "info->norm_bound2: 0 not in"},
        {{1, 1, 17, (uint64_t)INT64_MAX + 1, 10, 1, 0, 0, NULL},
         "info->norm_bound2: 9223372036854775808 not in"},
        {{1, 1, 17, UINT64_MAX, 10, 1, 0, 0, NULL}, "info->norm_bound2: 18446744073709551615"},
        {{1, 1, 17, 100, 0, 1, 0, 0, NULL}, "info->norm_dim must be >= 1"},
        {{1, 1, 17, 100, 10, 0, 0, 0, NULL}, "info->norm_weight_max must be >= 1"},
        /* values without the flag: each alone */
        {{1, 0, 17, 0, 0, 0, 0, 0, NULL}, "set without norm_proof_enabled"},
        {{1, 0, 0, 100, 0, 0, 0, 0, NULL}, "set without norm_proof_enabled"},
        {{1, 0, 0, 0, 10, 0, 0, 0, NULL}, "set without norm_proof_enabled"},
        {{1, 0, 0, 0, 0, 1, 0, 0, NULL}, "set without norm_proof_enabled"},
        /* sizes other than 0.2's and 0.3's */
        {{1, 0, 0, 0, 0, 0, sizeof(struct round_info_v02) - 8, 0, NULL}, "struct_size"},
        {{1, 0, 0, 0, 0, 0, full + 8, 0, NULL}, "struct_size"},
    };
    int64_t n0 = 0, n1 = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &n0));
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        ed = cases[k].ed;
        fl_status r = audit_fx_round(&f, 0, 0.5, NULL);
        if (r != FL_ERR_MISUSE || !strstr(f.msg, cases[k].why))
            fail_msg("case %zu: %s (%s), want MISUSE mentioning \"%s\"", k, fl_status_name(r),
                     f.msg, cases[k].why);
    }
    STORE_OK(f.st, fl_store_audit_size(f.st, &n1));
    assert_int_equal(n1, n0); /* nothing appended */
    /* and a good one still goes in after all that */
    ed = (struct edit){1, 1, 17, 100, 10, 1, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, NULL));
    audit_fx_teardown(&f);
}

/* ---- 4: the verifier's rules ---- */

struct vlog {
    struct audit_fx f;
    json_t *e[8];                      /* entries 0..n-1 */
    struct fl__store_audit_pop before; /* population state before the proof round */
    int n;
};

enum { V_PLAIN = 2, V_PROOF = 3, V_NOSECAGG = 4 };

/* created, model, round without proofs, round with proofs, round without secagg. */
static void vlog_make(struct vlog *l) {
    memset(l, 0, sizeof(*l));
    struct edit ed = {1, 0, 0, 0, 0, 0, 0, 0, NULL};
    audit_fx_setup(&l->f, 4);
    l->f.edit = apply_edit;
    l->f.edit_user = &ed;
    STORE_OK(l->f.st, audit_fx_round(&l->f, 0, 0.5, NULL));
    ed = (struct edit){1, 1, 17, 123456789012ULL, 1000, 64, 0, 0, NULL};
    STORE_OK(l->f.st, audit_fx_round(&l->f, 0, 0.5, NULL));
    ed = (struct edit){0, 0, 0, 0, 0, 0, 0, 0, NULL};
    STORE_OK(l->f.st, audit_fx_round(&l->f, 0, 0.5, NULL));
    l->f.edit = NULL;
    l->n = 5;
    fl__store_audit_pop_init(&l->before);
    for (int i = 0; i < l->n; i++) {
        fl_store_audit_entry *ae = NULL;
        char why[256];
        STORE_OK(l->f.st, fl_store_audit_entry_get(l->f.st, &ae, i));
        if (fl__store_audit_parse(ae->json, ae->size, &l->e[i], why, sizeof(why)) != FL_OK)
            fail_msg("parse: %s", why);
        fl_store_free(l->f.st, ae);
        if (i < V_PROOF)
            assert_int_equal(fl__store_audit_apply(l->e[i], &l->before), FL_OK);
    }
}

static void vlog_free(struct vlog *l) {
    for (int i = 0; i < l->n; i++)
        json_decref(l->e[i]);
    fl__store_audit_pop_free(&l->before);
    audit_fx_teardown(&l->f);
}

/* Checks m (a doctored copy of entry V_PROOF, or of another round moved to its place with
 * round/seq fixed) as entry V_PROOF; want NULL = must pass, else the refusal names it. */
static void expect(const struct vlog *l, json_t *m, const char *want) {
    audit_rule_expect(m, V_PROOF, &l->before, want);
}

static json_t *proof_copy(const struct vlog *l) {
    return json_deep_copy(l->e[V_PROOF]);
}

static json_t *np_of(json_t *m) {
    json_t *np = json_object_get(json_object_get(m, "secagg"), "norm_proof");
    assert_non_null(np);
    return np;
}

/* Entry i (another round) dressed as entry V_PROOF: same seq, round, model and privacy
 * totals, so only its secagg differs. */
static json_t *as_proof_entry(const struct vlog *l, int i) {
    json_t *m = proof_copy(l);
    json_object_set(m, "secagg", json_object_get(l->e[i], "secagg"));
    return m;
}

static void test_verifier_rules(void **state) {
    (void)state;
    struct vlog l;
    vlog_make(&l);
    char why[256];
    int budget = 0;
    /* Every honest entry passes, in place. */
    for (int i = V_PLAIN; i < l.n; i++) {
        struct fl__store_audit_pop p;
        fl__store_audit_pop_init(&p);
        for (int j = 0; j < i; j++)
            assert_int_equal(fl__store_audit_apply(l.e[j], &p), FL_OK);
        if (fl__store_audit_check(l.e[i], i, &p, why, sizeof(why), &budget) != 0)
            fail_msg("entry %d: %s", i, why);
        fl__store_audit_pop_free(&p);
    }
    expect(&l, proof_copy(&l), NULL);
    /* Without proofs ({k, n, t}) or without secagg (null) the same round passes too. */
    expect(&l, as_proof_entry(&l, V_PLAIN), NULL);
    expect(&l, as_proof_entry(&l, V_NOSECAGG), NULL);

    /* The norm_proof object's fields: each missing, unknown, retyped, out of range. */
    static const char *const keys[] = {"bits", "bound2", "dim", "weight_max"};
    for (int k = 0; k < 4; k++) {
        json_t *m = proof_copy(&l);
        json_object_del(np_of(m), keys[k]);
        char want[80];
        snprintf(want, sizeof(want), "secagg.norm_proof lacks field \"%s\"", keys[k]);
        expect(&l, m, want);
        m = proof_copy(&l);
        json_object_set_new(np_of(m), keys[k], json_string("7"));
        snprintf(want, sizeof(want), "secagg.norm_proof: \"%s\" is not an integer", keys[k]);
        expect(&l, m, want);
        m = proof_copy(&l);
        json_object_set_new(np_of(m), keys[k], json_null());
        expect(&l, m, want);
    }
    json_t *m = proof_copy(&l);
    json_object_set_new(np_of(m), "modulus_bits", json_integer(32));
    expect(&l, m, "secagg.norm_proof has unknown field \"modulus_bits\"");
    struct {
        const char *key;
        json_int_t v;
        const char *want;
    } range[] = {
        {"bits", 1, "secagg.norm_proof: \"bits\" = 1 is out of range [2, 32]"},
        {"bits", 33, "secagg.norm_proof: \"bits\" = 33 is out of range [2, 32]"},
        {"bits", -17, "\"bits\" = -17 is out of range"},
        {"bound2", 0, "secagg.norm_proof: \"bound2\" = 0 is out of range"},
        {"bound2", -1, "secagg.norm_proof: \"bound2\" = -1 is out of range"},
        {"dim", 0, "secagg.norm_proof: \"dim\" = 0 is out of range [1, 4294967295]"},
        {"dim", (json_int_t)UINT32_MAX + 1, "\"dim\" = 4294967296 is out of range"},
        {"weight_max", 0, "secagg.norm_proof: \"weight_max\" = 0 is out of range"},
        {"weight_max", (json_int_t)UINT32_MAX + 1, "\"weight_max\" = 4294967296 is out of"},
    };
    for (size_t k = 0; k < sizeof(range) / sizeof(range[0]); k++) {
        m = proof_copy(&l);
        json_object_set_new(np_of(m), range[k].key, json_integer(range[k].v));
        expect(&l, m, range[k].want);
    }
    /* The extremes pass. */
    m = proof_copy(&l);
    json_object_set_new(np_of(m), "bits", json_integer(32));
    json_object_set_new(np_of(m), "bound2", json_integer(INT64_MAX));
    json_object_set_new(np_of(m), "dim", json_integer(UINT32_MAX));
    json_object_set_new(np_of(m), "weight_max", json_integer(1));
    expect(&l, m, NULL);

    /* norm_proof that is not an object. */
    json_t *not_obj[] = {json_null(), json_integer(1), json_array(), json_string("17")};
    for (int k = 0; k < 4; k++) {
        m = proof_copy(&l);
        json_object_set_new(json_object_get(m, "secagg"), "norm_proof", not_obj[k]);
        expect(&l, m, "secagg.norm_proof is not an object");
    }
    /* The secagg object around it: a field missing, an unknown one besides norm_proof. */
    m = proof_copy(&l);
    json_object_del(json_object_get(m, "secagg"), "t");
    expect(&l, m, "secagg lacks field \"t\"");
    m = proof_copy(&l);
    json_object_set_new(json_object_get(m, "secagg"), "norm", json_integer(1));
    expect(&l, m, "secagg has unknown field \"norm\"");
    /* the secagg rules still apply beside a norm proof */
    m = proof_copy(&l);
    json_object_set_new(json_object_get(m, "secagg"), "t", json_integer(9));
    expect(&l, m, "t <= k <= n");
    /* A norm proof outside secagg (in the entry, or beside a null secagg) is refused. */
    m = proof_copy(&l);
    json_object_set(m, "norm_proof", np_of(m));
    expect(&l, m, "round entry has unknown field \"norm_proof\"");
    m = as_proof_entry(&l, V_NOSECAGG);
    json_object_set(m, "norm_proof", np_of(l.e[V_PROOF]));
    expect(&l, m, "round entry has unknown field \"norm_proof\"");
    /* norm_proof in a plain round's place moved to the entry's dp object */
    m = proof_copy(&l);
    json_object_set(json_object_get(m, "dp"), "norm_proof", np_of(l.e[V_PROOF]));
    expect(&l, m, "dp has unknown field \"norm_proof\"");
    vlog_free(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_written),
        cmocka_unit_test(test_append_refused),
        cmocka_unit_test(test_verifier_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
