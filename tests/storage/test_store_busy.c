/* Another process holds the database's write lock: every call that writes returns
 * FL_ERR_BUSY once the busy timeout (0 here: at once) runs out, changes nothing, leaves no
 * transaction open, and works once the lock is released; calls that only read keep working
 * meanwhile (WAL). The lock is held by a raw SQLite connection, as another coordinator
 * process would hold it. */
#include "test_audit_util.h"

struct fx {
    struct audit_fx f; /* the store under test (busy timeout 0) with an audit log */
    sqlite3 *other;    /* the other writer */
    int64_t rid;       /* a finished round not yet in the log */
    int64_t open_rid;  /* a round still open */
    int64_t unlogged;  /* a population not yet in the log */
    int n;             /* counter for unique names */
};

static void fx_make(struct fx *x) {
    memset(x, 0, sizeof(*x));
    audit_fx_setup(&x->f, 3);
    fl_store *st = x->f.st;
    STORE_OK(st, audit_fx_round(&x->f, 0, 0.1, NULL));
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, x->f.sk));
    /* Reopen with no busy wait. */
    fl_store_close(st);
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.busy_timeout_ms = 0;
    cfg.clock = audit_fx_clock;
    cfg.clock_user = &x->f;
    x->f.st = NULL;
    STORE_OK(x->f.st, fl_store_open(&x->f.st, x->f.t.path, &cfg));
    x->other = store_raw_open(x->f.t.path);
    sqlite3_busy_timeout(x->other, 0);
}

static void lock(struct fx *x) {
    assert_int_equal(sqlite3_exec(x->other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
}
static void unlock(struct fx *x) {
    assert_int_equal(sqlite3_exec(x->other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
}

static void fx_free(struct fx *x) {
    sqlite3_close(x->other);
    audit_fx_teardown(&x->f);
}

typedef fl_status (*op_fn)(struct fx *x);

static fl_status w_population_create(struct fx *x) {
    char name[32];
    snprintf(name, sizeof(name), "busy-%d", ++x->n);
    return fl_store_population_create(x->f.st, NULL, name, "{}", 1, 0, "[]");
}
static fl_status w_population_state(struct fx *x) {
    return fl_store_population_set_state(x->f.st, x->f.pop, FL_STORE_POPULATION_ACTIVE);
}
static fl_status w_population_update(struct fx *x) {
    return fl_store_population_update_config(x->f.st, x->f.pop, "{\"task\":\"next-word\"}", 8.0,
                                             1e-6, "[\"EU\",\"UK\"]");
}
static fl_status w_client_enroll(struct fx *x) {
    char id[32];
    snprintf(id, sizeof(id), "busy-client-%d", ++x->n);
    return fl_store_client_enroll(x->f.st, id, "0123456789abcdef", 16, "EU", x->f.pop);
}
static fl_status w_client_touch(struct fx *x) {
    return fl_store_client_touch(x->f.st, "c000");
}
static fl_status w_model_put(struct fx *x) {
    char b[32];
    snprintf(b, sizeof(b), "busy model %d", ++x->n);
    fl_store_model_ref ref;
    return fl_store_model_put(x->f.st, &ref, x->f.pop, 0, b, strlen(b), NULL);
}
static fl_status w_tag_set(struct fx *x) {
    return fl_store_tag_set(x->f.st, "prod", x->f.model);
}
static fl_status w_tag_delete(struct fx *x) {
    fl_status r = fl_store_tag_delete(x->f.st, "prod");
    if (r == FL_OK) /* set again for the next round of this walk */
        STORE_OK(x->f.st, fl_store_tag_set(x->f.st, "prod", x->f.model));
    return r;
}
static fl_status w_round_create(struct fx *x) {
    return fl_store_round_create(x->f.st, NULL, x->f.pop, 0, 0, NULL);
}
static fl_status w_participant(struct fx *x) {
    return fl_store_participant_set(x->f.st, x->open_rid, "c001", FL_STORE_PARTICIPANT_SELECTED);
}
static fl_status w_ledger(struct fx *x) {
    fl_store_ledger_entry e = {0};
    e.population_id = x->f.pop;
    e.mechanism = "gaussian";
    e.sampling_rate = 0.5;
    e.clip_norm = 1;
    e.steps = 1;
    return fl_store_ledger_append(x->f.st, NULL, &e);
}
static fl_status w_audit_population(struct fx *x) {
    return fl_store_audit_append_population(x->f.st, NULL, x->unlogged);
}
static fl_status w_audit_config(struct fx *x) {
    return fl_store_audit_append_config(x->f.st, NULL, x->f.pop, "{\"task\":\"next-word\"}", 8.0,
                                        1e-6, "[\"EU\",\"UK\"]");
}
static fl_status w_audit_model(struct fx *x) {
    return fl_store_audit_append_model(x->f.st, NULL, x->f.pop, x->f.model);
}
static fl_status w_audit_refusal(struct fx *x) {
    return fl_store_audit_append_refusal(x->f.st, NULL, x->f.pop, x->f.round_no + 1, 100, 0);
}
static fl_status w_audit_round(struct fx *x) {
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = x->rid;
    info.epsilon_total = x->f.eps_total;
    return fl_store_audit_append_round(x->f.st, NULL, &info);
}
static fl_status w_erase(struct fx *x) {
    uint8_t key[32] = {0};
    return fl_store_client_erase(x->f.st, NULL, "c002", key);
}
static fl_status w_retention(struct fx *x) {
    return fl_store_retention_sweep(x->f.st, NULL, 1000);
}
static fl_status w_checkpoint(struct fx *x) {
    return fl_store_audit_checkpoint_sign(x->f.st, NULL, AUDIT_ORIGIN, x->f.sk);
}
static fl_status w_begin(struct fx *x) {
    fl_status r = fl_store_begin(x->f.st);
    if (r == FL_OK)
        r = fl_store_rollback(x->f.st);
    return r;
}

static const struct {
    const char *name;
    op_fn fn;
} writes[] = {
    {"population_create", w_population_create},
    {"population_set_state", w_population_state},
    {"population_update_config", w_population_update},
    {"client_enroll", w_client_enroll},
    {"client_touch", w_client_touch},
    {"model_put", w_model_put},
    {"tag_set", w_tag_set},
    {"tag_delete", w_tag_delete},
    {"round_create", w_round_create},
    {"participant_set", w_participant},
    {"ledger_append", w_ledger},
    {"audit_append_population", w_audit_population},
    {"audit_append_config", w_audit_config},
    {"audit_append_model", w_audit_model},
    {"audit_append_refusal", w_audit_refusal},
    {"audit_append_round", w_audit_round},
    {"client_erase", w_erase},
    {"retention_sweep", w_retention},
    {"audit_checkpoint_sign", w_checkpoint},
    {"begin", w_begin},
};

static void test_writes_busy_then_work(void **state) {
    (void)state;
    struct fx x;
    fx_make(&x);
    fl_store *st = x.f.st;
    /* A finished round, logged by w_audit_round, and an open one. */
    STORE_OK(st, fl_store_round_create(st, &x.open_rid, x.f.pop, 0, x.f.model, NULL));
    STORE_OK(st, fl_store_round_create(st, &x.rid, x.f.pop, 0, x.f.model, NULL));
    STORE_OK(st, fl_store_round_abandon(st, x.rid, "test"));
    x.f.round_no += 2;
    STORE_OK(st, fl_store_population_create(st, &x.unlogged, "unlogged", "{}", 1, 0, "[]"));
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
        int64_t before = 0, after = 0;
        STORE_OK(st, fl_store_audit_size(st, &before));
        lock(&x);
        fl_status r = writes[i].fn(&x);
        if (r != FL_ERR_BUSY)
            fail_msg("%s under another writer's lock: %s (%s), want FL_ERR_BUSY", writes[i].name,
                     fl_status_name(r), fl_store_errmsg(st));
        assert_int_equal(fl_store_in_transaction(st), 0);
        /* Reads go on meanwhile. */
        STORE_OK(st, fl_store_audit_size(st, &after));
        unlock(&x);
        assert_int_equal(after, before);
        r = writes[i].fn(&x);
        if (r != FL_OK)
            fail_msg("%s after the lock was released: %s (%s)", writes[i].name,
                     fl_status_name(r), fl_store_errmsg(st));
    }
    STORE_OK(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, x.f.sk));
    STORE_OK(st, fl_store_check(st));
    fx_free(&x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_busy_then_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
