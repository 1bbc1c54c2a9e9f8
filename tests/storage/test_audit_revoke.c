/* Audited client revocation (fl_store_client_revoke / fl_store_client_reinstate):
 * each state change appends one client_revoked / client_reinstated entry naming the client
 * only by its pseudonym, in the same transaction; no change logs nothing; a rolled back
 * caller transaction leaves no entry; the exported bundle verifies; and entries doctored
 * by someone holding the signing key (missing or extra field, bad pseudonym, revoked_at
 * out of range) are refused by the offline verifier at that entry. */
#include <stdio.h>
#include <string.h>

#include "test_audit_forge.h"
#include "test_store_revoked.h"

static const uint8_t nym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES] = {0x42, 1, 2, 3};

static int64_t log_size(fl_store *st) {
    int64_t n = 0;
    STORE_OK(st, fl_store_audit_size(st, &n));
    return n;
}

/* Entry seq, parsed (a new reference). */
static json_t *entry(fl_store *st, int64_t seq) {
    fl_store_audit_entry *e = NULL;
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq));
    json_t *j = json_loads(e->json, 0, NULL);
    assert_non_null(j);
    fl_store_free(st, e);
    return j;
}

static void test_revoke_logs_once(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    fl_store *st = f.st;
    char nym[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    STORE_OK(st, fl_store_audit_pseudonym(nym, nym_key, "c001"));
    int64_t before = log_size(st), seq = -2, at = 0;
    f.now += 5000;
    STORE_OK(st, fl_store_client_revoke(st, &at, &seq, "c001", f.now - 10, nym_key));
    assert_int_equal(seq, before);
    assert_int_equal(at, f.now - 10);
    assert_int_equal(revoked_at(st, "c001"), f.now - 10);
    assert_int_equal(log_size(st), before + 1);
    json_t *e = entry(st, seq);
    assert_string_equal(json_string_value(json_object_get(e, "type")), "client_revoked");
    assert_string_equal(json_string_value(json_object_get(e, "client")), nym);
    assert_int_equal(json_integer_value(json_object_get(e, "revoked_at")), f.now - 10);
    assert_int_equal(json_integer_value(json_object_get(e, "time")), f.now);
    assert_string_equal(json_string_value(json_object_get(e, "population")), "keyboard");
    assert_int_equal(json_integer_value(json_object_get(e, "population_id")), f.pop);
    assert_int_equal(json_object_size(e), 8);
    json_decref(e);

    /* Revoking again: the first time stays, nothing is logged. */
    f.now += 5000;
    seq = -2;
    STORE_OK(st, fl_store_client_revoke(st, &at, &seq, "c001", f.now, nym_key));
    assert_int_equal(seq, -1);
    assert_int_equal(at, f.now - 5010);
    assert_int_equal(log_size(st), before + 1);

    /* Reinstating logs client_reinstated; reinstating an active client logs nothing. */
    STORE_OK(st, fl_store_client_reinstate(st, &seq, "c001", nym_key));
    assert_int_equal(seq, before + 1);
    assert_int_equal(revoked_at(st, "c001"), 0);
    e = entry(st, seq);
    assert_string_equal(json_string_value(json_object_get(e, "type")), "client_reinstated");
    assert_string_equal(json_string_value(json_object_get(e, "client")), nym);
    assert_null(json_object_get(e, "revoked_at"));
    assert_int_equal(json_object_size(e), 7);
    json_decref(e);
    seq = -2;
    STORE_OK(st, fl_store_client_reinstate(st, &seq, "c001", nym_key));
    assert_int_equal(seq, -1);
    STORE_OK(st, fl_store_client_reinstate(st, NULL, "c002", nym_key)); /* never revoked */
    assert_int_equal(log_size(st), before + 2);

    /* The raw id is nowhere in the log. */
    for (int64_t i = 0; i < log_size(st); i++) {
        fl_store_audit_entry *x = NULL;
        STORE_OK(st, fl_store_audit_entry_get(st, &x, i));
        assert_null(strstr(x->json, "c001"));
        fl_store_free(st, x);
    }

    /* A caller's clock ahead of the store's: the entry's time is revoked_at, never before. */
    STORE_OK(st, fl_store_client_revoke(st, &at, &seq, "c002", f.now + 777, nym_key));
    e = entry(st, seq);
    assert_int_equal(json_integer_value(json_object_get(e, "time")), f.now + 777);
    json_decref(e);
    STORE_OK(st, fl_store_client_reinstate(st, NULL, "c002", nym_key));
    assert_int_equal(log_size(st), before + 4);
    audit_fx_teardown(&f);
}

static void test_rollback_and_misuse(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    fl_store *st = f.st;
    int64_t before = log_size(st), seq = 0, at = 0;
    /* Inside a caller's transaction that rolls back: no revocation, no entry. */
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_client_revoke(st, &at, &seq, "c000", f.now, nym_key));
    assert_int_equal(seq, before);
    STORE_OK(st, fl_store_rollback(st));
    assert_int_equal(revoked_at(st, "c000"), 0);
    assert_int_equal(log_size(st), before);
    /* ... and the same for a reinstatement. */
    STORE_OK(st, fl_store_client_revoke(st, NULL, NULL, "c000", f.now, nym_key));
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_client_reinstate(st, &seq, "c000", nym_key));
    assert_int_equal(seq, before + 1);
    STORE_OK(st, fl_store_rollback(st));
    assert_int_equal(revoked_at(st, "c000"), f.now);
    assert_int_equal(log_size(st), before + 1);

    /* Refusals change and log nothing. */
    seq = 5;
    at = 5;
    assert_int_equal(fl_store_client_revoke(st, &at, &seq, "c001", f.now, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(seq, -1);
    assert_int_equal(at, 0);
    assert_int_equal(fl_store_client_revoke(st, NULL, NULL, "c001", 0, nym_key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_revoke(st, NULL, NULL, "", f.now, nym_key), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_reinstate(st, NULL, "c001", NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_revoke(st, NULL, &seq, "nobody", f.now, nym_key),
                     FL_ERR_NOT_FOUND);
    assert_int_equal(seq, -1);
    assert_int_equal(fl_store_client_reinstate(st, &seq, "nobody", nym_key), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_revoke(NULL, NULL, NULL, "c001", f.now, nym_key),
                     FL_ERR_MISUSE);
    assert_int_equal(revoked_at(st, "c001"), 0);
    audit_fx_teardown(&f);
}

/* Entry text with key set to v (NULL: removed), canonical. */
static char *doctor(const char *text, const char *key, json_t *v) {
    json_t *e = json_loads(text, 0, NULL);
    assert_non_null(e);
    if (v)
        json_object_set_new(e, key, v);
    else
        assert_int_equal(json_object_del(e, key), 0);
    char *out = json_dumps(e, FL__AUDIT_JSON_FLAGS);
    json_decref(e);
    return out;
}

static void test_bundle_and_forgeries(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    fl_store *st = f.st;
    /* 0 population_created, 1 model_registered, 2 round, 3 revoked c001, 4 reinstated c001,
     * 5 revoked c002, 6 round, 7 reinstated c002. */
    STORE_OK(st, audit_fx_round(&f, 0, 0.5, NULL));
    f.now += 1000;
    STORE_OK(st, fl_store_client_revoke(st, NULL, NULL, "c001", f.now, nym_key));
    STORE_OK(st, fl_store_client_reinstate(st, NULL, "c001", nym_key));
    STORE_OK(st, fl_store_client_revoke(st, NULL, NULL, "c002", f.now, nym_key));
    STORE_OK(st, audit_fx_round(&f, 1, 0.5, NULL));
    STORE_OK(st, fl_store_client_reinstate(st, NULL, "c002", nym_key));
    assert_int_equal(log_size(st), 8);
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, f.sk));
    char vkey[256];
    STORE_OK(st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(st, fl_store_audit_export(st, &buf, &len));
    fl_store_audit_verdict v;
    if (audit_bundle_check(buf, len, vkey, &v) != FL_OK)
        fail_msg("exported bundle: %s", v.message);
    assert_int_equal(v.entries, 8);
    fl_store_free(st, buf);

    char *e[8];
    for (int i = 0; i < 8; i++) {
        fl_store_audit_entry *x = NULL;
        STORE_OK(st, fl_store_audit_entry_get(st, &x, i));
        e[i] = strdup(x->json);
        fl_store_free(st, x);
    }
    uint8_t *b = audit_bundle_resign(&f, e, 8, &len);
    if (audit_bundle_check(b, len, vkey, &v) != FL_OK)
        fail_msg("re-signed honest bundle: %s", v.message);
    free(b);
    json_t *tj = json_loads(e[3], 0, NULL);
    int64_t time3 = (int64_t)json_integer_value(json_object_get(tj, "time"));
    json_decref(tj);

    struct {
        int entry;
        const char *key;
        json_t *value; /* NULL: the key is removed */
        const char *why;
    } cases[] = {
        {3, "revoked_at", NULL, "lacks field \"revoked_at\""},
        {3, "client", NULL, "lacks field \"client\""},
        {3, "note", json_string("x"), "unknown field \"note\""},
        {3, "client", json_string("c001"), "64 hex"},
        {3, "client",
         json_string("ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"),
         "lowercase hex"},
        {3, "revoked_at", json_integer(time3 + 1), "after the entry's time"},
        {3, "revoked_at", json_integer(0), "out of range"},
        {3, "revoked_at", json_string("1"), "not an integer"},
        {3, "population", json_string("other"), "is named"},
        {3, "population_id", json_integer(9), "no population_created"},
        {4, "revoked_at", json_integer(time3), "unknown field \"revoked_at\""},
        {4, "client", NULL, "lacks field \"client\""},
        {7, "client", json_string(""), "64 hex"},
        {4, "type", json_string("client_unrevoked"), "unknown entry type"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *orig = e[cases[k].entry];
        char *mod = doctor(orig, cases[k].key, cases[k].value);
        e[cases[k].entry] = mod;
        b = audit_bundle_resign(&f, e, 8, &len);
        fl_status r = audit_bundle_check(b, len, vkey, &v);
        if (r == FL_OK)
            fail_msg("case %zu (%s) verified", k, cases[k].why);
        assert_int_equal(v.ok, 0);
        if (v.bad_entry != cases[k].entry)
            fail_msg("case %zu: bad entry %lld, want %d (%s)", k, (long long)v.bad_entry,
                     cases[k].entry, v.message);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_revoke_logs_once),
        cmocka_unit_test(test_rollback_and_misuse),
        cmocka_unit_test(test_bundle_and_forgeries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
