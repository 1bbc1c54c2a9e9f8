/* The entry schema and rules the verifier applies (fl__store_audit_check), driven from a
 * real log: an honest store writes one entry of every type, each is checked against the
 * replayed state of its population, and then
 *   1. every field of every entry, at every depth, is removed, retyped, emptied or given a
 *      control character, and an unknown field is added to every object: each such entry
 *      must be refused (the schema is exact);
 *   2. each rule of docs/audit.md is broken on purpose in an otherwise valid entry, and the
 *      refusal must name that rule.
 * These are the ways a forged or damaged bundle can differ from what the store wrote. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "audit_internal.h"
#include "test_audit_util.h"

#define MAX_ENTRIES 32

struct log {
    struct audit_fx f;
    json_t *e[MAX_ENTRIES];                      /* parsed entries */
    struct fl__store_audit_pop before[MAX_ENTRIES]; /* state of the entry's population before it */
    int has_pop[MAX_ENTRIES];                    /* 0: no state (first entry, or global) */
    int n;
};

static json_t *parse_ok(const char *p, size_t n) {
    json_t *e = NULL;
    char why[200];
    if (fl__store_audit_parse(p, n, &e, why, sizeof(why)) != FL_OK)
        fail_msg("parse: %s", why);
    return e;
}

static void pop_copy(struct fl__store_audit_pop *dst, const struct fl__store_audit_pop *src) {
    *dst = *src;
    if (src->allowed)
        json_incref(src->allowed);
}

/* Builds a log with every entry type and replays it, keeping each entry's prior state. */
static void log_make(struct log *l) {
    memset(l, 0, sizeof(*l));
    struct audit_fx *f = &l->f;
    audit_fx_setup(f, 4); /* population_created, model_registered */
    fl_store *st = f->st;
    STORE_OK(st, audit_fx_round(f, 1, 0.5, NULL)); /* round, completed, secagg */
    /* An abandoned round with no DP: regions given by the coordinator. */
    int64_t rid = 0;
    STORE_OK(st, fl_store_round_create(st, &rid, f->pop, 0, f->model, NULL));
    STORE_OK(st, fl_store_round_start(st, rid));
    fl_store_round_counts counts = {3, 2, 0, 2};
    STORE_OK(st, fl_store_round_set_counts(st, rid, &counts));
    STORE_OK(st, fl_store_round_abandon(st, rid, "timeout"));
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.dropped_by_phase[FL_STORE_AUDIT_PHASE_SHARE] = 2;
    info.epsilon_total = f->eps_total;
    fl_store_audit_region reg[1] = {{"EU", 2}};
    info.regions = reg;
    info.n_regions = 1;
    STORE_OK(st, fl_store_audit_append_round(st, NULL, &info));
    f->round_no++;
    STORE_OK(st, fl_store_audit_append_config(st, NULL, f->pop, "{\"v\":2}", 8.0, 1e-6,
                                              "[\"EU\",\"UK\",\"US\"]"));
    STORE_OK(st, fl_store_audit_append_refusal(st, NULL, f->pop, f->round_no + 1, 9.5, 1e-7));
    uint8_t key[32];
    memset(key, 1, sizeof(key));
    STORE_OK(st, fl_store_client_erase(st, NULL, "c003", key));
    f->now += 1000;
    STORE_OK(st, fl_store_retention_sweep(st, NULL, 3600 * 1000));
    int64_t n = 0;
    STORE_OK(st, fl_store_audit_size(st, &n));
    assert_true(n == 8 && n <= MAX_ENTRIES);
    struct fl__store_audit_pop pops[4];
    int64_t ids[4] = {0};
    int npops = 0;
    for (int64_t i = 0; i < n; i++) {
        fl_store_audit_entry *ae = NULL;
        STORE_OK(st, fl_store_audit_entry_get(st, &ae, i));
        json_t *e = parse_ok(ae->json, ae->size);
        fl_store_free(st, ae);
        int64_t pid = fl__store_audit_entry_pop(e);
        int k = -1;
        for (int j = 0; j < npops; j++)
            if (ids[j] == pid)
                k = j;
        l->e[i] = e;
        if (k >= 0) {
            pop_copy(&l->before[i], &pops[k]);
            l->has_pop[i] = 1;
        }
        const char *type = json_string_value(json_object_get(e, "type"));
        if (pid > 0 && k < 0 && strcmp(type, "population_created") == 0) {
            k = npops++;
            ids[k] = pid;
            fl__store_audit_pop_init(&pops[k]);
        }
        if (k >= 0)
            assert_int_equal(fl__store_audit_apply(e, &pops[k]), FL_OK);
    }
    for (int j = 0; j < npops; j++)
        fl__store_audit_pop_free(&pops[j]);
    l->n = (int)n;
}

static void log_free(struct log *l) {
    for (int i = 0; i < l->n; i++) {
        json_decref(l->e[i]);
        fl__store_audit_pop_free(&l->before[i]);
    }
    audit_fx_teardown(&l->f);
}

/* Checks entry e as entry i of the log; returns 0 or -1, the reason in why. */
static int check_as(const struct log *l, int i, const json_t *e, char *why, size_t cap,
                    int *budget) {
    return fl__store_audit_check(e, i, l->has_pop[i] ? &l->before[i] : NULL, why, cap, budget);
}

static void test_honest_log_passes(void **state) {
    (void)state;
    struct log l;
    log_make(&l);
    const char *types[] = {"population_created", "model_registered", "round", "round",
                           "config_changed",     "budget_refused",   "erasure", "retention"};
    for (int i = 0; i < l.n; i++) {
        char why[256];
        int budget = 1;
        assert_string_equal(json_string_value(json_object_get(l.e[i], "type")), types[i]);
        if (check_as(&l, i, l.e[i], why, sizeof(why), &budget) != 0)
            fail_msg("entry %d: %s", i, why);
        assert_int_equal(budget, 0);
        /* At another position it is refused: seq is the leaf index. */
        assert_int_equal(fl__store_audit_check(l.e[i], i + 1, NULL, why, sizeof(why), &budget),
                         -1);
    }
    log_free(&l);
}

/* ---- 1. schema mutations ---- */

struct mut_stats {
    int tried, refused;
};

/* Checks one mutated copy; it must be refused. */
static void expect_refused(const struct log *l, int i, json_t *m, const char *what,
                           const char *path, struct mut_stats *ms) {
    char why[256];
    int budget = 0;
    ms->tried++;
    if (check_as(l, i, m, why, sizeof(why), &budget) == 0) {
        char *s = json_dumps(m, FL__AUDIT_JSON_FLAGS);
        fail_msg("entry %d: %s at %s was accepted: %s", i, what, path, s ? s : "?");
    }
    assert_true(why[0] != '\0');
    ms->refused++;
}

/* Applies every mutation to every field of object o (a part of the copy m of entry i). */
static void mutate_object(const struct log *l, int i, json_t *m, json_t *o, const char *path,
                          struct mut_stats *ms) {
    /* An unknown field. */
    json_object_set_new(o, "zz_unknown", json_integer(1));
    expect_refused(l, i, m, "an unknown field", path, ms);
    json_object_del(o, "zz_unknown");

    /* The keys first: a key removed and set again moves to the end of the object. */
    char keys[32][64];
    size_t nk = 0;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        assert_true(nk < 32);
        snprintf(keys[nk++], sizeof(keys[0]), "%s", key);
    }
    for (size_t ki = 0; ki < nk; ki++) {
        const char *k = keys[ki];
        char sub[256];
        snprintf(sub, sizeof(sub), "%s.%s", path, k);
        json_t *orig = json_incref(json_object_get(o, k));
        /* Removed. */
        json_object_del(o, k);
        expect_refused(l, i, m, "a missing field", sub, ms);
        /* Wrong type: a string for anything else, an integer for a string, an object or an
         * array; an array for an integer. */
        if (json_is_string(orig)) {
            json_object_set_new(o, k, json_integer(7));
            expect_refused(l, i, m, "an integer for a string", sub, ms);
            json_object_set_new(o, k, json_string(""));
            expect_refused(l, i, m, "an empty string", sub, ms);
            json_object_set_new(o, k, json_string("a\x01z"));
            expect_refused(l, i, m, "a control character", sub, ms);
        } else {
            json_object_set_new(o, k, json_string("7"));
            expect_refused(l, i, m, "a string", sub, ms);
        }
        if (json_is_integer(orig)) {
            json_object_set_new(o, k, json_array());
            expect_refused(l, i, m, "an array for an integer", sub, ms);
            if (strcmp(k, "cutoff") != 0) { /* a cutoff may be negative (before 1970) */
                json_object_set_new(o, k, json_integer(-1));
                expect_refused(l, i, m, "a negative integer", sub, ms);
            }
        }
        /* null: only a round's model_in, model_out and secagg may be null. */
        if (!json_is_null(orig) && strcmp(k, "model_in") != 0 && strcmp(k, "model_out") != 0 &&
            strcmp(k, "secagg") != 0) {
            json_object_set_new(o, k, json_null());
            expect_refused(l, i, m, "null", sub, ms);
        }
        if (json_is_object(orig) || json_is_array(orig)) {
            json_object_set_new(o, k, json_integer(1));
            expect_refused(l, i, m, "an integer for an object or array", sub, ms);
        }
        json_object_set(o, k, orig);
        /* Inside. The "regions" object has free keys (region names): covered by rules. */
        if (json_is_object(orig) && strcmp(k, "regions") != 0)
            mutate_object(l, i, m, orig, sub, ms);
        if (json_is_array(orig) && json_array_size(orig) > 0) {
            json_t *x = json_incref(json_array_get(orig, 0));
            json_array_set_new(orig, 0, json_integer(1));
            expect_refused(l, i, m, "a non-string region", sub, ms);
            json_array_set_new(orig, 0, json_string("E U"));
            expect_refused(l, i, m, "a region with a space", sub, ms);
            json_array_set_new(orig, 0, x);
        }
        json_decref(orig);
    }
}

static void test_schema_mutations_refused(void **state) {
    (void)state;
    struct log l;
    log_make(&l);
    struct mut_stats ms = {0, 0};
    for (int i = 0; i < l.n; i++) {
        json_t *m = json_deep_copy(l.e[i]);
        mutate_object(&l, i, m, m, "entry", &ms);
        /* Untouched after all that: the copy is restored field by field. */
        char why[256];
        int budget = 0;
        assert_true(json_equal(m, l.e[i]));
        assert_int_equal(check_as(&l, i, m, why, sizeof(why), &budget), 0);
        json_decref(m);
    }
    assert_int_equal(ms.refused, ms.tried);
    assert_true(ms.tried > 400);
    /* Not an object at all. */
    char why[256];
    int budget = 0;
    json_t *a = json_array();
    assert_int_equal(fl__store_audit_check(a, 0, NULL, why, sizeof(why), &budget), -1);
    assert_non_null(strstr(why, "not an object"));
    json_decref(a);
    log_free(&l);
}

/* ---- 2. rules ---- */

/* Sets the integer at a dotted path ("privacy.epsilon_total_e9") in e. */
static void set_int(json_t *e, const char *path, json_int_t v) {
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *o = e;
    char *dot;
    char *p = buf;
    while ((dot = strchr(p, '.')) != NULL) {
        *dot = '\0';
        o = json_object_get(o, p);
        assert_non_null(o);
        p = dot + 1;
    }
    assert_int_equal(json_object_set_new(o, p, json_integer(v)), 0);
}

static void set_str(json_t *e, const char *key, const char *v) {
    assert_int_equal(json_object_set_new(e, key, json_string(v)), 0);
}

/* Entry i with edit applied must be refused with a reason containing want (and the
 * budget flag as given). */
static void expect_rule(const struct log *l, int i, json_t *m, const char *want,
                        int want_budget) {
    char why[256];
    int budget = 0;
    if (check_as(l, i, m, why, sizeof(why), &budget) == 0)
        fail_msg("entry %d: accepted, want \"%s\"", i, want);
    if (!strstr(why, want))
        fail_msg("entry %d: refused with \"%s\", want \"%s\"", i, why, want);
    assert_int_equal(budget, want_budget);
    json_decref(m);
}

static json_t *copy(const struct log *l, int i) {
    return json_deep_copy(l->e[i]);
}

enum { E_CREATED = 0, E_MODEL = 1, E_ROUND = 2, E_ABANDONED = 3, E_CONFIG = 4, E_REFUSED = 5,
       E_ERASURE = 6, E_RETENTION = 7 };

static void test_rules_refused(void **state) {
    (void)state;
    struct log l;
    log_make(&l);
    json_t *m;
    char why[256];
    int budget = 0;

    /* Common fields. */
    m = copy(&l, E_MODEL);
    set_int(m, "v", 2);
    expect_rule(&l, E_MODEL, m, "\"v\"", 0);
    m = copy(&l, E_MODEL);
    set_str(m, "type", "coffee_break");
    expect_rule(&l, E_MODEL, m, "unknown entry type", 0);

    /* Population references. */
    m = copy(&l, E_CREATED);
    assert_int_equal(fl__store_audit_check(m, E_CREATED, &l.before[E_ROUND], why, sizeof(why),
                                           &budget),
                     -1);
    assert_non_null(strstr(why, "already created"));
    json_decref(m);
    m = copy(&l, E_MODEL);
    assert_int_equal(fl__store_audit_check(m, E_MODEL, NULL, why, sizeof(why), &budget), -1);
    assert_non_null(strstr(why, "no population_created entry"));
    json_decref(m);
    m = copy(&l, E_MODEL);
    set_str(m, "population", "someone-else");
    expect_rule(&l, E_MODEL, m, "is named", 0);

    /* Rounds: outcome, order, times. */
    m = copy(&l, E_ROUND);
    set_str(m, "outcome", "postponed");
    expect_rule(&l, E_ROUND, m, "neither completed nor abandoned", 0);
    m = copy(&l, E_ABANDONED);
    set_int(m, "round", 1); /* round 1 is already logged */
    expect_rule(&l, E_ABANDONED, m, "does not come after", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "ended_at", 1);
    expect_rule(&l, E_ROUND, m, "ended before it started", 0);

    /* Counts. */
    m = copy(&l, E_ROUND);
    set_int(m, "counts.checked_in", 1);
    expect_rule(&l, E_ROUND, m, "selected 4 > checked in 1", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "counts.completed", 2);
    expect_rule(&l, E_ROUND, m, "!= selected", 0);
    m = copy(&l, E_ABANDONED);
    set_int(m, "counts.completed", 1);
    expect_rule(&l, E_ABANDONED, m, "> selected", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "dropped_by_phase.unmask", 1);
    expect_rule(&l, E_ROUND, m, "dropouts per phase add up to 2", 0);

    /* Secure aggregation. */
    m = copy(&l, E_ROUND);
    set_int(m, "secagg.t", 4);
    expect_rule(&l, E_ROUND, m, "t <= k <= n", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "secagg.k", 4);
    set_int(m, "secagg.n", 5);
    expect_rule(&l, E_ROUND, m, "> selected", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "secagg.t", 3);
    set_int(m, "secagg.k", 3);
    set_int(m, "secagg.n", 3);
    set_int(m, "counts.completed", 2);
    set_int(m, "counts.dropped", 2);
    set_int(m, "dropped_by_phase.masked", 2);
    expect_rule(&l, E_ROUND, m, "survivors < threshold", 0);

    /* Differential privacy parameters. */
    m = copy(&l, E_ROUND);
    set_str(json_object_get(m, "dp"), "mechanism", "none");
    expect_rule(&l, E_ROUND, m, "mechanism none with parameters", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "dp.steps", 0);
    expect_rule(&l, E_ROUND, m, "needs clip_norm > 0", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "dp.clip_norm_e9", 0);
    expect_rule(&l, E_ROUND, m, "needs clip_norm > 0", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "dp.sampling_rate_e9", 0);
    expect_rule(&l, E_ROUND, m, "needs clip_norm > 0", 0);
    /* mechanism none with all parameters 0 is fine, but then nothing may be spent */
    m = copy(&l, E_ROUND);
    set_str(json_object_get(m, "dp"), "mechanism", "none");
    set_int(m, "dp.clip_norm_e9", 0);
    set_int(m, "dp.noise_multiplier_e9", 0);
    set_int(m, "dp.sampling_rate_e9", 0);
    set_int(m, "dp.steps", 0);
    expect_rule(&l, E_ROUND, m, "epsilon spent without a DP mechanism", 0);

    /* Privacy accounting and the budget. */
    m = copy(&l, E_ROUND);
    set_int(m, "privacy.budget_epsilon_e9", 9000000000);
    expect_rule(&l, E_ROUND, m, "is not the population's", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "privacy.budget_delta_e18", 1);
    expect_rule(&l, E_ROUND, m, "is not the population's", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "privacy.epsilon_total_e9", 400000000);
    expect_rule(&l, E_ROUND, m, "!= previous total", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "privacy.epsilon_spent_e9", INT64_MAX);
    set_int(m, "privacy.epsilon_total_e9", INT64_MAX);
    {
        /* a previous total that would overflow with this spend */
        struct fl__store_audit_pop p;
        pop_copy(&p, &l.before[E_ROUND]);
        p.eps_total_e9 = 2;
        assert_int_equal(fl__store_audit_check(m, E_ROUND, &p, why, sizeof(why), &budget), -1);
        assert_non_null(strstr(why, "!= previous total"));
        fl__store_audit_pop_free(&p);
        json_decref(m);
    }
    m = copy(&l, E_ROUND);
    set_int(m, "privacy.epsilon_spent_e9", 9000000000);
    set_int(m, "privacy.epsilon_total_e9", 9000000000);
    expect_rule(&l, E_ROUND, m, "over the budget", 1);
    m = copy(&l, E_ROUND);
    set_int(m, "privacy.delta_e18", 2000000000000);
    expect_rule(&l, E_ROUND, m, "delta 2000000000000e-18 is over the budget", 1);
    m = copy(&l, E_ABANDONED);
    set_str(json_object_get(m, "dp"), "mechanism", "gaussian");
    set_int(m, "dp.clip_norm_e9", 1000000000);
    set_int(m, "dp.sampling_rate_e9", 1000);
    set_int(m, "dp.steps", 1);
    set_int(m, "privacy.epsilon_spent_e9", 1);
    set_int(m, "privacy.epsilon_total_e9", 500000001);
    expect_rule(&l, E_ABANDONED, m, "abandoned round released nothing", 0);

    /* Model lineage. */
    m = copy(&l, E_ROUND);
    set_int(m, "model_in.version", 99);
    expect_rule(&l, E_ROUND, m, "model in is not the population's current model", 0);
    m = copy(&l, E_ROUND);
    json_object_set_new(m, "model_in", json_null());
    expect_rule(&l, E_ROUND, m, "model in is not the population's current model", 0);
    m = copy(&l, E_ROUND);
    json_object_set_new(m, "model_out", json_null());
    expect_rule(&l, E_ROUND, m, "a completed round has no model out", 0);
    m = copy(&l, E_ROUND);
    json_object_set(m, "model_out", json_object_get(m, "model_in"));
    expect_rule(&l, E_ROUND, m, "model out is model in", 0);
    m = copy(&l, E_ABANDONED);
    json_object_set(m, "model_out", json_object_get(l.e[E_ROUND], "model_out"));
    expect_rule(&l, E_ABANDONED, m, "an abandoned round has a model out", 0);
    {
        /* No current model known yet: any model in is accepted. */
        struct fl__store_audit_pop p;
        pop_copy(&p, &l.before[E_ROUND]);
        p.has_model = 0;
        m = copy(&l, E_ROUND);
        set_int(m, "model_in.version", 99);
        assert_int_equal(fl__store_audit_check(m, E_ROUND, &p, why, sizeof(why), &budget), 0);
        /* ... and then model out may not repeat it */
        set_int(m, "model_out.version", 99);
        assert_int_equal(fl__store_audit_check(m, E_ROUND, &p, why, sizeof(why), &budget), -1);
        assert_non_null(strstr(why, "model out is model in"));
        json_decref(m);
        fl__store_audit_pop_free(&p);
    }

    /* Regions. */
    m = copy(&l, E_ROUND);
    json_object_set_new(m, "regions", json_array());
    expect_rule(&l, E_ROUND, m, "\"regions\" is not an object", 0);
    m = copy(&l, E_ROUND);
    json_object_set_new(json_object_get(m, "regions"), "E U", json_integer(1));
    expect_rule(&l, E_ROUND, m, "bad region name", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "regions.EU", 0);
    expect_rule(&l, E_ROUND, m, "is not a positive integer", 0);
    m = copy(&l, E_ROUND);
    json_object_set_new(json_object_get(m, "regions"), "EU", json_string("3"));
    expect_rule(&l, E_ROUND, m, "is not a positive integer", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "regions.EU", INT64_MAX);
    expect_rule(&l, E_ROUND, m, "is not a positive integer", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "regions.EU", INT64_MAX / 8);
    expect_rule(&l, E_ROUND, m, "counts too large", 0);
    m = copy(&l, E_ROUND);
    set_int(m, "regions.UK", 1);
    set_int(m, "regions.EU", 1);
    expect_rule(&l, E_ROUND, m, "counts add up to 2, not to selected 4", 0);
    m = copy(&l, E_ROUND);
    json_object_set_new(json_object_get(m, "regions"), "US", json_integer(1));
    set_int(m, "regions.UK", 1);
    expect_rule(&l, E_ROUND, m, "\"US\" is not an allowed region", 0);
    {
        /* [] and "*" allow any region. */
        struct fl__store_audit_pop p;
        pop_copy(&p, &l.before[E_ROUND]);
        m = copy(&l, E_ROUND);
        json_object_set_new(json_object_get(m, "regions"), "US", json_integer(1));
        set_int(m, "regions.UK", 1); /* still 4 selected */
        json_decref(p.allowed);
        p.allowed = json_array();
        assert_int_equal(fl__store_audit_check(m, E_ROUND, &p, why, sizeof(why), &budget), 0);
        json_array_append_new(p.allowed, json_integer(5)); /* ignored: not a name */
        json_array_append_new(p.allowed, json_string("*"));
        assert_int_equal(fl__store_audit_check(m, E_ROUND, &p, why, sizeof(why), &budget), 0);
        json_decref(p.allowed);
        p.allowed = NULL;
        assert_int_equal(fl__store_audit_check(m, E_ROUND, &p, why, sizeof(why), &budget), 0);
        json_decref(m);
        fl__store_audit_pop_free(&p);
    }

    /* Refusals. */
    m = copy(&l, E_REFUSED);
    set_int(m, "round", 2);
    expect_rule(&l, E_REFUSED, m, "refused round 2 does not come after round 2", 0);
    m = copy(&l, E_REFUSED);
    set_int(m, "privacy.budget_epsilon_e9", 1);
    expect_rule(&l, E_REFUSED, m, "budget is not the population's", 0);
    m = copy(&l, E_REFUSED);
    set_int(m, "privacy.budget_delta_e18", 0);
    expect_rule(&l, E_REFUSED, m, "budget is not the population's", 0);
    m = copy(&l, E_REFUSED);
    set_int(m, "privacy.epsilon_total_e9", 1);
    expect_rule(&l, E_REFUSED, m, "is not the population's 0.5", 0);
    m = copy(&l, E_REFUSED);
    set_int(m, "privacy.epsilon_requested_e9", 8000000000);
    expect_rule(&l, E_REFUSED, m, "a refusal within the budget", 0);
    {
        /* Over the delta budget alone is a real refusal. */
        m = copy(&l, E_REFUSED);
        set_int(m, "privacy.epsilon_requested_e9", 1000000000);
        assert_int_equal(check_as(&l, E_REFUSED, m, why, sizeof(why), &budget), -1);
        set_int(m, "privacy.delta_e18", 1000000000001);
        assert_int_equal(check_as(&l, E_REFUSED, m, why, sizeof(why), &budget), 0);
        json_decref(m);
    }

    /* Erasure: the pseudonym is 64 lowercase hex digits. */
    m = copy(&l, E_ERASURE);
    set_str(m, "client", "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789");
    expect_rule(&l, E_ERASURE, m, "lowercase hex", 0);
    m = copy(&l, E_ERASURE);
    set_str(m, "client", "ghij");
    expect_rule(&l, E_ERASURE, m, "64 hex digits", 0);

    /* Retention: cutoff = time - retention_ms, and retention_ms <= time. */
    m = copy(&l, E_RETENTION);
    set_int(m, "cutoff", 5);
    expect_rule(&l, E_RETENTION, m, "cutoff is not time - retention_ms", 0);
    m = copy(&l, E_RETENTION);
    set_int(m, "retention_ms", INT64_MAX);
    expect_rule(&l, E_RETENTION, m, "cutoff is not time - retention_ms", 0);

    /* Terms: a budget epsilon of 0 and a delta of 1 are out of range. */
    m = copy(&l, E_CONFIG);
    set_int(m, "budget.epsilon_e9", 0);
    expect_rule(&l, E_CONFIG, m, "out of range", 0);
    m = copy(&l, E_CONFIG);
    set_int(m, "budget.delta_e18", 1000000000000000000);
    expect_rule(&l, E_CONFIG, m, "out of range", 0);
    log_free(&l);
}

/* Text fields: population names may hold UTF-8 (as the store accepts them), region
 * names and the coordinator version only printable ASCII; lengths are bounded. */
static void test_text_fields(void **state) {
    (void)state;
    struct log l;
    log_make(&l);
    char why[256];
    int budget = 0;
    json_t *m = copy(&l, E_CREATED);
    set_str(m, "population", "caf\xc3\xa9 clavier");
    assert_int_equal(check_as(&l, E_CREATED, m, why, sizeof(why), &budget), 0);
    set_str(m, "population", "del\x7f");
    expect_rule(&l, E_CREATED, m, "printable", 0);
    m = copy(&l, E_ROUND);
    set_str(m, "coordinator", "caf\xc3\xa9");
    expect_rule(&l, E_ROUND, m, "\"coordinator\" is not 1..64 printable", 0);
    m = copy(&l, E_ROUND);
    char longv[80];
    memset(longv, 'v', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    set_str(m, "coordinator", longv);
    expect_rule(&l, E_ROUND, m, "\"coordinator\" is not 1..64 printable", 0);
    m = copy(&l, E_ROUND);
    json_object_set_new(m, "coordinator", json_stringn("a\0b", 3));
    expect_rule(&l, E_ROUND, m, "\"coordinator\" is not 1..64 printable", 0);
    m = copy(&l, E_CONFIG);
    json_t *many = json_array();
    for (int i = 0; i < 1001; i++)
        json_array_append_new(many, json_string("EU"));
    json_object_set_new(m, "allowed_regions", many);
    expect_rule(&l, E_CONFIG, m, "at most 1000 regions", 0);
    m = copy(&l, E_ROUND);
    json_t *regs = json_object();
    for (int i = 0; i < 1001; i++) {
        char k[16];
        snprintf(k, sizeof(k), "R%d", i);
        json_object_set_new(regs, k, json_integer(1));
    }
    json_object_set_new(m, "regions", regs);
    expect_rule(&l, E_ROUND, m, "at most 1000 regions", 0);
    log_free(&l);
}

/* The canonical-JSON reader the verifier and the store share. */
static void test_parse_canonical(void **state) {
    (void)state;
    json_t *v = NULL;
    char why[200];
    struct {
        const char *text;
        const char *want;
    } bad[] = {
        {"[1]", "not an object"},
        {"{\"a\":true}", "not an object of strings, integers and null"},
        {"{\"a\":[1.5]}", "not an object of strings, integers and null"},
        {"{\"a\":[[[[[[[[[[1]]]]]]]]]]}", "not an object of strings, integers and null"},
        {"{\"a\":1} ", "not canonical"},           /* trailing space */
        {"{\"b\":1,\"a\":2}", "not canonical"},     /* keys out of order */
        {"{\"a\":\"\xc3\xa9\"}", "not canonical"}, /* raw UTF-8: the dump escapes it (longer) */
        {"{\"a\":", "not JSON"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_status r = fl__store_audit_parse(bad[i].text, strlen(bad[i].text), &v, why, sizeof(why));
        if (r != FL_ERR_FORMAT || !strstr(why, bad[i].want))
            fail_msg("%s: %s \"%s\", want \"%s\"", bad[i].text, fl_status_name(r), why,
                     bad[i].want);
        assert_null(v);
    }
    /* Eight levels below the entry are fine (the tenth above is not). */
    const char *deep = "{\"a\":[[[[[[[1]]]]]]]}";
    assert_int_equal(fl__store_audit_parse(deep, strlen(deep), &v, why, sizeof(why)), FL_OK);
    json_decref(v);
    /* Empty, NUL inside, and longer than two maximal entries. */
    assert_int_equal(fl__store_audit_parse("{}", 0, &v, why, sizeof(why)), FL_ERR_FORMAT);
    assert_int_equal(fl__store_audit_parse("{\"a\":\"\0\"}", 9, &v, why, sizeof(why)),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(why, "NUL"));
    assert_int_equal(fl__store_audit_parse("{}", 2 * FL_STORE_AUDIT_ENTRY_MAX + 1, &v, why,
                                           sizeof(why)),
                     FL_ERR_FORMAT);
    /* Fixed point: out of range, negative and non-finite values are refused. */
    assert_int_equal(fl__store_audit_fixed_ceil(0.25, 1e9), 250000000);
    assert_int_equal(fl__store_audit_fixed_floor(0.9999999999, 1e9), 999999999);
    assert_int_equal(fl__store_audit_fixed_round(1.1, 1e9), 1100000000);
    assert_int_equal(fl__store_audit_fixed_ceil(1e10, 1e9), -1);
    assert_int_equal(fl__store_audit_fixed_ceil(-1, 1e9), -1);
    assert_int_equal(fl__store_audit_fixed_floor(NAN, 1e9), -1);
    assert_int_equal(fl__store_audit_fixed_round(INFINITY, 1e9), -1);
    /* An entry's population, and applying entries that change nothing. */
    json_t *e = json_pack("{s:s}", "population_id", "1");
    assert_int_equal(fl__store_audit_entry_pop(e), 0);
    struct fl__store_audit_pop p;
    fl__store_audit_pop_init(&p);
    assert_int_equal(fl__store_audit_apply(e, &p), FL_OK); /* no type */
    json_object_set_new(e, "type", json_string("round"));
    assert_int_equal(fl__store_audit_apply(e, NULL), FL_OK); /* no population */
    json_object_set_new(e, "type", json_string("erasure"));
    assert_int_equal(fl__store_audit_apply(e, &p), FL_OK);
    assert_int_equal(p.seen, 0);
    assert_int_equal(p.last_round, 0);
    json_decref(e);
    fl__store_audit_pop_free(&p);
    fl__store_audit_pop_free(NULL);
}

static void test_more_rules(void **state) {
    (void)state;
    struct log l;
    log_make(&l);
    json_t *m;
    /* Rounds and refusals must name their population as it was created. */
    m = copy(&l, E_ROUND);
    set_str(m, "population", "other");
    expect_rule(&l, E_ROUND, m, "is named \"keyboard\"", 0);
    m = copy(&l, E_REFUSED);
    set_str(m, "population", "other");
    expect_rule(&l, E_REFUSED, m, "is named \"keyboard\"", 0);
    /* A model_registered entry's model is never null. */
    m = copy(&l, E_MODEL);
    json_object_set_new(m, "model", json_null());
    expect_rule(&l, E_MODEL, m, "model is not an object", 0);
    /* Mechanism none: each parameter alone is refused. */
    const char *params[] = {"dp.noise_multiplier_e9", "dp.sampling_rate_e9", "dp.steps"};
    for (int i = 0; i < 3; i++) {
        m = copy(&l, E_ABANDONED); /* an abandoned round without DP */
        set_int(m, params[i], 1);
        expect_rule(&l, E_ABANDONED, m, "mechanism none with parameters", 0);
    }
    /* Region counts must be integers. */
    m = copy(&l, E_ABANDONED);
    json_object_set_new(json_object_get(m, "regions"), "EU", json_null());
    expect_rule(&l, E_ABANDONED, m, "is not a positive integer", 0);
    log_free(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honest_log_passes),
        cmocka_unit_test(test_schema_mutations_refused),
        cmocka_unit_test(test_rules_refused),
        cmocka_unit_test(test_text_fields),
        cmocka_unit_test(test_parse_canonical),
        cmocka_unit_test(test_more_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
