/* Audit entry times never decrease.
 *
 * The store: an entry's time is the time given (the store clock, a revocation's revoked_at
 * when the caller's clock is ahead, a retention sweep's now) but never before the previous
 * entry's, so a clock stepping back (NTP) or a caller's clock ahead of the store's cannot
 * make the log go back in time, across populations, entry types and a reopen; where the
 * clock is ahead of the log the time given is kept.
 * The verifier: a bundle re-signed with the real key whose entry times decrease (within a
 * population, across populations, a retention entry) is refused at that entry with a
 * message naming it; equal times are fine. */
#include <stdio.h>
#include <string.h>

#include "test_audit_forge.h"

static const uint8_t nym_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES] = {0x17, 2, 3};

static int64_t log_size(fl_store *st) {
    int64_t n = 0;
    STORE_OK(st, fl_store_audit_size(st, &n));
    return n;
}

/* time field of entry seq. */
static int64_t entry_time(fl_store *st, int64_t seq) {
    fl_store_audit_entry *e = NULL;
    STORE_OK(st, fl_store_audit_entry_get(st, &e, seq));
    json_t *j = json_loads(e->json, 0, NULL);
    assert_non_null(j);
    int64_t t = (int64_t)json_integer_value(json_object_get(j, "time"));
    json_decref(j);
    fl_store_free(st, e);
    return t;
}

/* Exports the log (after signing a checkpoint) and verifies it; fails the test if it does
 * not verify or if an entry's time is below the one before. */
static void verify_log(struct audit_fx *f) {
    fl_store *st = f->st;
    char vkey[256];
    uint8_t *buf = NULL;
    size_t len = 0;
    fl_store_audit_verdict v;
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, f->sk));
    STORE_OK(st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f->pk));
    STORE_OK(st, fl_store_audit_export(st, &buf, &len));
    if (audit_bundle_check(buf, len, vkey, &v) != FL_OK)
        fail_msg("exported bundle: %s", v.message);
    fl_store_free(st, buf);
    for (int64_t i = 1; i < log_size(st); i++)
        if (entry_time(st, i) < entry_time(st, i - 1))
            fail_msg("entry %lld's time is before entry %lld's", (long long)i, (long long)i - 1);
}

static void test_store_time_never_decreases(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 4);
    fl_store *st = f.st;
    STORE_OK(st, audit_fx_round(&f, 0, 0.5, NULL));

    /* A caller's clock ahead of the store's: the revocation's entry has the caller's time,
     * and the next entry, on the store clock, may not go back before it. */
    int64_t seq = 0, ahead = f.now + 120000;
    STORE_OK(st, fl_store_client_revoke(st, NULL, &seq, "c001", ahead, nym_key));
    assert_int_equal(entry_time(st, seq), ahead);
    STORE_OK(st, fl_store_client_reinstate(st, &seq, "c001", nym_key));
    assert_true(f.now < ahead);
    assert_int_equal(entry_time(st, seq), ahead);

    /* The store clock steps back an hour (NTP): a round, a configuration change and a
     * revocation written meanwhile carry the last entry's time, not the clock's. */
    int64_t last = entry_time(st, log_size(st) - 1);
    f.now = last - 3600000;
    STORE_OK(st, audit_fx_round(&f, 1, 0.5, &seq));
    assert_true(f.now < last);
    assert_int_equal(entry_time(st, seq), last);
    STORE_OK(st, fl_store_audit_append_config(st, &seq, f.pop, "{\"task\":\"next-word-2\"}", 8.0,
                                              1e-6, "[\"EU\",\"UK\"]"));
    assert_int_equal(entry_time(st, seq), last);
    STORE_OK(st, fl_store_client_revoke(st, NULL, &seq, "c002", f.now, nym_key));
    assert_int_equal(entry_time(st, seq), last);

    /* Another population's entries follow the same clock: the rule is log-wide. */
    int64_t pop2 = 0;
    STORE_OK(st, fl_store_population_create(st, &pop2, "health", "{}", 4.0, 1e-6, "[]"));
    STORE_OK(st, fl_store_audit_append_population(st, &seq, pop2));
    assert_int_equal(entry_time(st, seq), last);

    /* A retention sweep takes the log's time too, and derives its cutoff from it (the
     * verifier requires cutoff = time - retention_ms). */
    fl_store_retention_result rr;
    STORE_OK(st, fl_store_retention_sweep(st, &rr, 86400000));
    assert_int_equal(entry_time(st, rr.seq), last);
    assert_int_equal(rr.cutoff, last - 86400000);

    /* After a reopen the last time comes from the database. */
    fl_store_close(st);
    st = f.st = audit_fx_open(&f, NULL);
    STORE_OK(st, fl_store_client_reinstate(st, &seq, "c002", nym_key));
    assert_int_equal(entry_time(st, seq), last);

    /* Once the clock is past the log again, entries have the clock's time. */
    f.now = last + 5000;
    STORE_OK(st, fl_store_client_revoke(st, NULL, &seq, "c003", f.now - 10, nym_key));
    assert_int_equal(entry_time(st, seq), f.now);
    STORE_OK(st, audit_fx_round(&f, 0, 0.5, &seq));
    assert_int_equal(entry_time(st, seq), f.now);
    verify_log(&f);
    audit_fx_teardown(&f);
}

/* Entry text with its time (and, for a retention entry, its cutoff) set to t; canonical. */
static char *with_time(const char *text, int64_t t) {
    json_t *e = json_loads(text, 0, NULL);
    assert_non_null(e);
    json_t *keep = json_object_get(e, "retention_ms");
    if (keep)
        json_object_set_new(e, "cutoff", json_integer(t - json_integer_value(keep)));
    json_object_set_new(e, "time", json_integer(t));
    char *out = json_dumps(e, FL__AUDIT_JSON_FLAGS);
    json_decref(e);
    return out;
}

static int64_t text_time(const char *text) {
    json_t *e = json_loads(text, 0, NULL);
    assert_non_null(e);
    int64_t t = (int64_t)json_integer_value(json_object_get(e, "time"));
    json_decref(e);
    return t;
}

static void test_verifier_refuses_decreasing_time(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 3);
    fl_store *st = f.st;
    /* 0 population_created, 1 model_registered, 2 round, 3 population_created (health),
     * 4 round, 5 retention, 6 revoked c001; the clock moves on between them. */
    STORE_OK(st, audit_fx_round(&f, 0, 0.5, NULL));
    f.now += 1000;
    int64_t pop2 = 0;
    STORE_OK(st, fl_store_population_create(st, &pop2, "health", "{}", 4.0, 1e-6, "[]"));
    STORE_OK(st, fl_store_audit_append_population(st, NULL, pop2));
    STORE_OK(st, audit_fx_round(&f, 1, 0.5, NULL));
    f.now += 1000;
    STORE_OK(st, fl_store_retention_sweep(st, NULL, 86400000));
    f.now += 1000;
    /* revoked a minute before it was logged, so moving the entry's time back a little keeps
     * revoked_at <= time */
    STORE_OK(st, fl_store_client_revoke(st, NULL, NULL, "c001", f.now - 60000, nym_key));
    enum { N = 7 };
    assert_int_equal(log_size(st), N);
    char vkey[256];
    STORE_OK(st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f.pk));
    char *e[N];
    for (int i = 0; i < N; i++) {
        fl_store_audit_entry *x = NULL;
        STORE_OK(st, fl_store_audit_entry_get(st, &x, i));
        e[i] = strdup(x->json);
        fl_store_free(st, x);
        if (i > 0)
            assert_true(text_time(e[i]) >= text_time(e[i - 1]));
    }
    size_t len = 0;
    fl_store_audit_verdict v;
    uint8_t *b = audit_bundle_resign(&f, e, N, &len);
    if (audit_bundle_check(b, len, vkey, &v) != FL_OK)
        fail_msg("re-signed honest bundle: %s", v.message);
    free(b);

    /* Each case: entry k's time set to the previous entry's time + delta. */
    struct {
        int entry;
        int64_t delta;
    } cases[] = {
        {1, -1},       /* within a population */
        {2, -60000},   /* a round a minute before the model it starts from */
        {3, -1},       /* across populations: health's first entry before keyboard's round */
        {4, -1000},    /* a round of one population before another's creation */
        {5, -1},       /* a retention entry (cutoff moved with it) */
        {6, -1},       /* a revocation */
        {6, 0},        /* equal times are in order */
        {2, -1700000}, /* far back, still a valid time */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int i = cases[k].entry;
        int64_t prev = text_time(e[i - 1]), t = prev + cases[k].delta;
        char *orig = e[i];
        char *mod = with_time(orig, t);
        e[i] = mod;
        b = audit_bundle_resign(&f, e, N, &len);
        fl_status r = audit_bundle_check(b, len, vkey, &v);
        if (cases[k].delta >= 0) {
            if (r != FL_OK)
                fail_msg("case %zu (equal times) refused: %s", k, v.message);
        } else {
            char want[200];
            snprintf(want, sizeof(want),
                     "FAILED: entry %d: time %lld is before the previous entry's time %lld "
                     "(entry times never decrease)",
                     i, (long long)t, (long long)prev);
            assert_int_equal(r, FL_ERR_CORRUPT);
            assert_int_equal(v.ok, 0);
            if (v.bad_entry != i || v.bad_line != i + 2)
                fail_msg("case %zu: bad entry %lld line %lld, want %d (%s)", k,
                         (long long)v.bad_entry, (long long)v.bad_line, i, v.message);
            if (strcmp(v.message, want) != 0)
                fail_msg("case %zu: message '%s', want '%s'", k, v.message, want);
        }
        free(b);
        free(mod);
        e[i] = orig;
    }
    /* The first offending entry is named: a later decrease is not reported first. */
    char *m1 = with_time(e[2], text_time(e[1]) - 5), *m2 = with_time(e[5], text_time(e[4]) - 1);
    char *o1 = e[2], *o2 = e[5];
    e[2] = m1;
    e[5] = m2;
    b = audit_bundle_resign(&f, e, N, &len);
    assert_int_equal(audit_bundle_check(b, len, vkey, &v), FL_ERR_CORRUPT);
    assert_int_equal(v.bad_entry, 2);
    free(b);
    e[2] = o1;
    e[5] = o2;
    free(m1);
    free(m2);
    for (int i = 0; i < N; i++)
        free(e[i]);
    audit_fx_teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_time_never_decreases),
        cmocka_unit_test(test_verifier_refuses_decreasing_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
