/* Round entries of active-mode secure aggregation rounds (secagg.active and
 * secagg.authority_key_sha256, added after 0.3; docs/audit.md, docs/protocol.md 5.6), and
 * of rounds with revealed pairwise seeds (secagg.revealed_seeds, added after 0.4:
 * test_revealed_seeds, written, refused and verified the same ways):
 *   1. what fl_store_audit_append_round writes in active mode (with and without norm
 *      proofs) and that semi-honest rounds keep their 0.3 bytes; a caller built against the
 *      0.3 struct (older struct_size) still appends, and nothing past its struct is read;
 *      the log verifies offline;
 *   2. bad active-mode fields refused on append, naming the field;
 *   3. the verifier's rules (fl__store_audit_check) on forged secagg objects;
 *   4. bundles re-signed with the real key: an honest active entry verifies, malformed ones
 *      are refused at that entry with the rule's message. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "audit_internal.h"
#include "test_audit_forge.h"
#include "test_audit_util.h"

/* The fingerprint the tests log: SHA-256 of a made-up 32-byte authority key. */
static uint8_t fp_bin[32];
static char fp_hex[65];

static void fp_make(void) {
    uint8_t key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(0xa0 + i);
    crypto_hash_sha256(fp_bin, key, sizeof(key));
    for (int i = 0; i < 32; i++)
        snprintf(fp_hex + 2 * i, 3, "%02x", fp_bin[i]);
}

/* secagg_reveal_seeds the edit hook sets (test_revealed_seeds). */
static int g_reveal;

/* What the edit hook does to a round's info. */
struct edit {
    int secagg;        /* secagg_enabled to set */
    int active;        /* secagg_active */
    const uint8_t *fp; /* authority_key_sha256 */
    int proofs;        /* 1: also norm proofs (bits 17, bound2 100, dim 10, weight_max 1) */
    size_t size;       /* struct_size to set, 0 = leave */
    int heap;          /* 1: append a heap copy of exactly size bytes (ASan sees any overread) */
    void *copy;        /* that copy, freed by the test */
};

static const fl_store_audit_round_info *apply_edit(fl_store_audit_round_info *info, void *user) {
    struct edit *ed = user;
    info->secagg_enabled = ed->secagg;
    info->secagg_active = ed->active;
    info->authority_key_sha256 = ed->fp;
    info->secagg_reveal_seeds = g_reveal;
    if (ed->proofs) {
        info->norm_proof_enabled = 1;
        info->norm_bits = 17;
        info->norm_bound2 = 100;
        info->norm_dim = 10;
        info->norm_weight_max = 1;
    }
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

/* A fixture with n_clients clients whose rounds' entries apply_edit rewrites as *ed says. */
static void edit_fx_setup(struct audit_fx *f, int n_clients, struct edit *ed) {
    audit_fx_setup(f, n_clients);
    f->edit = apply_edit;
    f->edit_user = ed;
}

static const size_t size_v03 = offsetof(fl_store_audit_round_info, secagg_active);

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

/* Signs a checkpoint and verifies the store's export offline; returns the entry count. */
static int64_t export_verified(struct audit_fx *f) {
    char vkey[256];
    STORE_OK(f->st, fl_store_audit_checkpoint_sign(f->st, NULL, AUDIT_ORIGIN, f->sk));
    STORE_OK(f->st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f->pk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f->st, fl_store_audit_export(f->st, &buf, &len));
    fl_store_audit_verdict v;
    if (audit_bundle_check(buf, len, vkey, &v) != FL_OK)
        fail_msg("bundle: %s", v.message);
    fl_store_free(f->st, buf);
    return v.entries;
}

/* ---- 1: entries written ---- */

static void test_entries_written(void **state) {
    (void)state;
    struct audit_fx f;
    struct edit ed = {1, 0, NULL, 0, 0, 0, NULL};
    edit_fx_setup(&f, 4, &ed);
    int64_t seq[6];
    /* 2: semi-honest; 3: active; 4: active with norm proofs */
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[0]));
    ed = (struct edit){1, 1, fp_bin, 0, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[1]));
    ed = (struct edit){1, 1, fp_bin, 1, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[2]));
    /* 0.3 callers: a heap struct of exactly the old size, and one whose bytes past the old
     * size hold an active flag and a bad pointer the store must not read. */
    ed = (struct edit){1, 0, NULL, 1, size_v03, 1, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[3]));
    free(ed.copy);
    ed = (struct edit){1, 7, (const uint8_t *)(uintptr_t)1, 0, size_v03, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[4]));
    /* no secagg: null as before */
    ed = (struct edit){0, 0, NULL, 0, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[5]));

    char want[6][256];
    snprintf(want[0], sizeof(want[0]), "\"secagg\":{\"k\":3,\"n\":4,\"t\":2}");
    snprintf(want[1], sizeof(want[1]),
             "\"secagg\":{\"active\":1,\"authority_key_sha256\":\"%s\",\"k\":3,\"n\":4,\"t\":2}",
             fp_hex);
    snprintf(want[2], sizeof(want[2]),
             "\"secagg\":{\"active\":1,\"authority_key_sha256\":\"%s\",\"k\":3,\"n\":4,"
             "\"norm_proof\":{\"bits\":17,\"bound2\":100,\"dim\":10,\"weight_max\":1},\"t\":2}",
             fp_hex);
    snprintf(want[3], sizeof(want[3]),
             "\"secagg\":{\"k\":3,\"n\":4,\"norm_proof\":{\"bits\":17,\"bound2\":100,\"dim\":10,"
             "\"weight_max\":1},\"t\":2}");
    snprintf(want[4], sizeof(want[4]), "\"secagg\":{\"k\":3,\"n\":4,\"t\":2}");
    snprintf(want[5], sizeof(want[5]), "\"secagg\":null");
    for (int i = 0; i < 6; i++) {
        char *s = entry_text(&f, seq[i]);
        expect_in(s, want[i]);
        /* only the active rounds mention it */
        assert_int_equal(strstr(s, "active") != NULL, i == 1 || i == 2);
        assert_int_equal(strstr(s, "authority_key_sha256") != NULL, i == 1 || i == 2);
        free(s);
    }
    /* The whole log verifies offline, active entries included. */
    assert_int_equal(export_verified(&f), 8);
    audit_fx_teardown(&f);
}

/* ---- 2: refused on append ---- */

static void test_append_refused(void **state) {
    (void)state;
    struct audit_fx f;
    struct edit ed;
    edit_fx_setup(&f, 3, &ed);
    const size_t full = sizeof(fl_store_audit_round_info);
    struct {
        struct edit ed;
        const char *why;
    } cases[] = {
        {{0, 1, fp_bin, 0, 0, 0, NULL}, "info->secagg_active must be 0 or 1, and 1 only with"},
        {{1, 2, fp_bin, 0, 0, 0, NULL}, "info->secagg_active must be 0 or 1"},
        {{1, -1, fp_bin, 0, 0, 0, NULL}, "info->secagg_active must be 0 or 1"},
        {{1, 1, NULL, 0, 0, 0, NULL}, "info->authority_key_sha256 is NULL"},
        {{1, 0, fp_bin, 0, 0, 0, NULL}, "info->authority_key_sha256: set without secagg_active"},
        {{0, 0, fp_bin, 0, 0, 0, NULL}, "info->authority_key_sha256: set without secagg_active"},
        /* sizes other than 0.2's, 0.3's and this one's */
        {{1, 0, NULL, 0, size_v03 + 4, 0, NULL}, "struct_size"},
        {{1, 0, NULL, 0, offsetof(fl_store_audit_round_info, secagg_reveal_seeds) - 4, 0,
          NULL},
         "struct_size"},
        {{1, 0, NULL, 0, full + 8, 0, NULL}, "struct_size"},
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
    ed = (struct edit){1, 1, fp_bin, 0, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, NULL));
    audit_fx_teardown(&f);
}

/* ---- 3: the verifier's rules ---- */

struct vlog {
    struct audit_fx f;
    json_t *e[8];                      /* entries 0..n-1 */
    char *text[8];                     /* their lines */
    struct fl__store_audit_pop before; /* population state before the active round */
    int n;
};

enum { V_PLAIN = 2, V_ACTIVE = 3, V_NOSECAGG = 4 };

/* created, model, semi-honest round, active round, round without secagg. */
static void vlog_make(struct vlog *l) {
    memset(l, 0, sizeof(*l));
    struct edit ed = {1, 0, NULL, 0, 0, 0, NULL};
    edit_fx_setup(&l->f, 4, &ed);
    STORE_OK(l->f.st, audit_fx_round(&l->f, 0, 0.5, NULL));
    ed = (struct edit){1, 1, fp_bin, 0, 0, 0, NULL};
    STORE_OK(l->f.st, audit_fx_round(&l->f, 0, 0.5, NULL));
    ed = (struct edit){0, 0, NULL, 0, 0, 0, NULL};
    STORE_OK(l->f.st, audit_fx_round(&l->f, 0, 0.5, NULL));
    l->f.edit = NULL;
    l->n = 5;
    fl__store_audit_pop_init(&l->before);
    for (int i = 0; i < l->n; i++) {
        char why[256];
        l->text[i] = entry_text(&l->f, i);
        if (fl__store_audit_parse(l->text[i], strlen(l->text[i]), &l->e[i], why, sizeof(why)) !=
            FL_OK)
            fail_msg("parse: %s", why);
        if (i < V_ACTIVE)
            assert_int_equal(fl__store_audit_apply(l->e[i], &l->before), FL_OK);
    }
}

static void vlog_free(struct vlog *l) {
    for (int i = 0; i < l->n; i++) {
        json_decref(l->e[i]);
        free(l->text[i]);
    }
    fl__store_audit_pop_free(&l->before);
    audit_fx_teardown(&l->f);
}

/* Checks m (a doctored copy of entry V_ACTIVE) as entry V_ACTIVE; want NULL = must pass,
 * else the refusal names it. */
static void expect(const struct vlog *l, json_t *m, const char *want) {
    audit_rule_expect(m, V_ACTIVE, &l->before, want);
}

static json_t *active_copy(const struct vlog *l) {
    return json_deep_copy(l->e[V_ACTIVE]);
}

static json_t *sa_of(json_t *m) {
    json_t *sa = json_object_get(m, "secagg");
    assert_non_null(sa);
    return sa;
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
    expect(&l, active_copy(&l), NULL);
    /* Without both fields the same round passes as semi-honest. */
    json_t *m = active_copy(&l);
    json_object_del(sa_of(m), "active");
    json_object_del(sa_of(m), "authority_key_sha256");
    expect(&l, m, NULL);

    /* Both or neither. */
    m = active_copy(&l);
    json_object_del(sa_of(m), "authority_key_sha256");
    expect(&l, m, "secagg: \"active\" without \"authority_key_sha256\"");
    m = active_copy(&l);
    json_object_del(sa_of(m), "active");
    expect(&l, m, "secagg: \"authority_key_sha256\" without \"active\"");

    /* active: only the integer 1. */
    json_t *bad_active[] = {json_integer(0), json_integer(2),  json_integer(-1),
                            json_null(),     json_string("1"), json_object()};
    for (size_t k = 0; k < sizeof(bad_active) / sizeof(bad_active[0]); k++) {
        m = active_copy(&l);
        json_object_set_new(sa_of(m), "active", bad_active[k]);
        expect(&l, m, "secagg.active is not the integer 1");
    }

    /* authority_key_sha256: 64 lowercase hex digits. */
    char upper[65], short_fp[64], long_fp[66], nonhex[65];
    for (int i = 0; i < 64; i++)
        upper[i] = (char)(fp_hex[i] >= 'a' ? fp_hex[i] - 'a' + 'A' : fp_hex[i]);
    upper[64] = '\0';
    memcpy(short_fp, fp_hex, 63);
    short_fp[63] = '\0';
    snprintf(long_fp, sizeof(long_fp), "%s0", fp_hex);
    memcpy(nonhex, fp_hex, 65);
    nonhex[10] = 'g';
    struct {
        json_t *v;
        const char *want;
    } bad_fp[] = {
        {json_string(upper), "secagg.authority_key_sha256: \"authority_key_sha256\" is not 64 "
                             "lowercase hex digits"},
        {json_string(nonhex), "is not 64 lowercase hex digits"},
        {json_string(short_fp),
         "secagg.authority_key_sha256: \"authority_key_sha256\" is not 64 hex digits"},
        {json_string(long_fp), "secagg.authority_key_sha256: \"authority_key_sha256\" is not 64"},
        {json_string(""), "secagg.authority_key_sha256: "},
        {json_integer(7), "secagg.authority_key_sha256: "},
        {json_null(), "secagg.authority_key_sha256: "},
    };
    for (size_t k = 0; k < sizeof(bad_fp) / sizeof(bad_fp[0]); k++) {
        m = active_copy(&l);
        json_object_set_new(sa_of(m), "authority_key_sha256", bad_fp[k].v);
        expect(&l, m, bad_fp[k].want);
    }
    /* Another key's fingerprint is well formed: the log names the authority, it does not
     * pin one (an auditor compares it with the published key). */
    m = active_copy(&l);
    json_object_set_new(sa_of(m), "authority_key_sha256",
                        json_string("00000000000000000000000000000000000000000000000000000000"
                                    "00000000"));
    expect(&l, m, NULL);

    /* The fields belong in secagg: elsewhere they are unknown fields. */
    m = active_copy(&l);
    json_object_set_new(m, "active", json_integer(1));
    expect(&l, m, "round entry has unknown field \"active\"");
    m = active_copy(&l);
    json_object_set_new(json_object_get(m, "dp"), "authority_key_sha256", json_string(fp_hex));
    expect(&l, m, "dp has unknown field \"authority_key_sha256\"");
    /* other unknown fields beside them are still refused, and the secagg rules still apply */
    m = active_copy(&l);
    json_object_set_new(sa_of(m), "authority_key", json_string(fp_hex));
    expect(&l, m, "secagg has unknown field \"authority_key\"");
    m = active_copy(&l);
    json_object_del(sa_of(m), "n");
    expect(&l, m, "secagg lacks field \"n\"");
    m = active_copy(&l);
    json_object_set_new(sa_of(m), "t", json_integer(9));
    expect(&l, m, "t <= k <= n");
    vlog_free(&l);
}

/* ---- 4: re-signed bundles ---- */

/* Replaces the first occurrence of from in entry line i (a malloc'ed copy list). */
static void line_edit(char **lines, int i, const char *from, const char *to) {
    char *p = strstr(lines[i], from);
    if (!p)
        fail_msg("line %d lacks %s", i, from);
    size_t n = strlen(lines[i]) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%.*s%s%s", (int)(p - lines[i]), lines[i], to, p + strlen(from));
    free(lines[i]);
    lines[i] = s;
}

static void test_resigned_bundles(void **state) {
    (void)state;
    struct vlog l;
    vlog_make(&l);
    char vkey[256];
    STORE_OK(l.f.st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, l.f.pk));
    char fp_active[128];
    snprintf(fp_active, sizeof(fp_active), "\"active\":1,\"authority_key_sha256\":\"%s\",", fp_hex);
    char upper_fp[128];
    snprintf(upper_fp, sizeof(upper_fp), "\"active\":1,\"authority_key_sha256\":\"%.60sABCD\",",
             fp_hex);
    struct {
        const char *from, *to; /* edit of the active entry's line, NULL = none */
        const char *want;      /* NULL = verifies */
    } cases[] = {
        {NULL, NULL, NULL},
        {fp_active, "", NULL}, /* the same round as semi-honest is a valid statement too */
        {"\"active\":1,", "\"active\":0,", "secagg.active is not the integer 1"},
        {"\"active\":1,", "\"active\":true,", "not an object of strings, integers and null"},
        {"\"active\":1,", "", "secagg: \"authority_key_sha256\" without \"active\""},
        {fp_active, "\"active\":1,", "secagg: \"active\" without \"authority_key_sha256\""},
        {fp_active, upper_fp,
         "secagg.authority_key_sha256: \"authority_key_sha256\" is not 64 "
         "lowercase hex digits"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *lines[8];
        for (int i = 0; i < l.n; i++)
            lines[i] = strdup(l.text[i]);
        if (cases[k].from)
            line_edit(lines, V_ACTIVE, cases[k].from, cases[k].to);
        size_t len = 0;
        uint8_t *b = audit_bundle_resign(&l.f, lines, (size_t)l.n, &len);
        fl_store_audit_verdict v;
        memset(&v, 0, sizeof(v));
        fl_status r = audit_bundle_check(b, len, vkey, &v);
        if (!cases[k].want && r != FL_OK)
            fail_msg("case %zu refused: %s", k, v.message);
        if (cases[k].want) {
            if (r == FL_OK || !strstr(v.message, cases[k].want))
                fail_msg("case %zu: %s, want \"%s\"", k, v.message, cases[k].want);
            assert_false(v.ok);
            assert_int_equal(v.bad_entry, V_ACTIVE);
        }
        free(b);
        for (int i = 0; i < l.n; i++)
            free(lines[i]);
    }
    vlog_free(&l);
}

/* ---- 5: revealed pairwise seeds ---- */

static void test_revealed_seeds(void **state) {
    (void)state;
    struct audit_fx f;
    struct edit ed = {1, 0, NULL, 0, 0, 0, NULL};
    edit_fx_setup(&f, 4, &ed);
    int64_t seq[4];
    /* written: semi-honest and active rounds with the flag, a 0.4 caller's struct (its
     * bytes past the old size hold a flag the store must not read), and a round without */
    g_reveal = 1;
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[0]));
    ed = (struct edit){1, 1, fp_bin, 0, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[1]));
    ed = (struct edit){1, 0, NULL, 0, offsetof(fl_store_audit_round_info, secagg_reveal_seeds),
                       1, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[2]));
    free(ed.copy);
    g_reveal = 0;
    ed = (struct edit){1, 0, NULL, 0, 0, 0, NULL};
    STORE_OK(f.st, audit_fx_round(&f, 0, 0.5, &seq[3]));
    for (int i = 0; i < 4; i++) {
        char *s = entry_text(&f, seq[i]);
        if (i < 2)
            expect_in(s, "\"revealed_seeds\":1");
        assert_int_equal(strstr(s, "revealed_seeds") != NULL, i < 2);
        free(s);
    }
    /* refused on append, naming the field; nothing appended */
    const struct {
        struct edit ed;
        int reveal;
    } bad[] = {{{0, 0, NULL, 0, 0, 0, NULL}, 1}, /* without secagg */
               {{1, 0, NULL, 0, 0, 0, NULL}, 2},
               {{1, 0, NULL, 0, 0, 0, NULL}, -1},
               {{1, 0, NULL, 1, 0, 0, NULL}, 1}}; /* with norm proofs */
    int64_t n0 = 0, n1 = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &n0));
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        ed = bad[k].ed;
        g_reveal = bad[k].reveal;
        fl_status r = audit_fx_round(&f, 0, 0.5, NULL);
        if (r != FL_ERR_MISUSE || !strstr(f.msg, "info->secagg_reveal_seeds must be 0 or 1"))
            fail_msg("case %zu: %s (%s)", k, fl_status_name(r), f.msg);
    }
    g_reveal = 0;
    STORE_OK(f.st, fl_store_audit_size(f.st, &n1));
    assert_int_equal(n1, n0);
    /* the whole log verifies offline */
    assert_int_equal(export_verified(&f), 6); /* created, model and the four rounds */
    audit_fx_teardown(&f);

    /* the verifier: only the integer 1, never with norm_proof; with active it is fine */
    struct vlog l;
    vlog_make(&l);
    json_t *m = active_copy(&l);
    json_object_set_new(sa_of(m), "revealed_seeds", json_integer(1));
    expect(&l, m, NULL);
    json_t *bad_v[] = {json_integer(0), json_integer(2), json_true(), json_string("1"),
                       json_null()};
    for (size_t k = 0; k < sizeof(bad_v) / sizeof(bad_v[0]); k++) {
        m = active_copy(&l);
        json_object_set_new(sa_of(m), "revealed_seeds", bad_v[k]);
        expect(&l, m, "secagg.revealed_seeds is not the integer 1");
    }
    m = active_copy(&l);
    json_object_set_new(sa_of(m), "revealed_seeds", json_integer(1));
    json_object_set_new(sa_of(m), "norm_proof",
                        json_pack("{s:i, s:i, s:i, s:i}", "bits", 17, "bound2", 100, "dim", 10,
                                  "weight_max", 1));
    expect(&l, m, "secagg: revealed_seeds with norm_proof");
    vlog_free(&l);
}

int main(void) {
    fp_make();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_written),
        cmocka_unit_test(test_append_refused),
        cmocka_unit_test(test_verifier_rules),
        cmocka_unit_test(test_resigned_bundles),
        cmocka_unit_test(test_revealed_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
