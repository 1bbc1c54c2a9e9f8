/* Populations, clients, rounds, participants and the privacy ledger: round trips, state
 * machines, bad arguments, and a round's writes grouped in one transaction. */
#include <math.h>

#include "test_store_util.h"

struct fixture {
    struct store_tdir dir;
    fl_store *st;
    int64_t now; /* fake clock, Unix ms */
    int64_t pop; /* a population created by setup */
};

static int64_t fixture_clock(void *user) {
    struct fixture *f = user;
    return f->now;
}

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    store_tdir_make(&f->dir, "tables.db");
    f->now = 1750000000000;
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.clock = fixture_clock;
    cfg.clock_user = f;
    STORE_OK(f->st, fl_store_open(&f->st, f->dir.path, &cfg));
    STORE_OK(f->st, fl_store_population_create(f->st, &f->pop, "keyboard", "{\"lr\":0.1}", 8.0,
                                               1e-6, "[\"eu\"]"));
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    fl_store_close(f->st);
    store_tdir_rm(&f->dir);
    free(f);
    return 0;
}

static const uint8_t token_a[FL_STORE_TOKEN_MIN_BYTES] = "0123456789abcdef";
static const uint8_t token_b[FL_STORE_TOKEN_MIN_BYTES] = "0123456789abcdeF";

static void test_populations(void **state) {
    struct fixture *f = *state;
    fl_store_population *p = NULL;
    STORE_OK(f->st, fl_store_population_get(f->st, &p, f->pop));
    assert_string_equal(p->name, "keyboard");
    assert_string_equal(p->config_json, "{\"lr\":0.1}");
    assert_true(p->epsilon == 8.0);
    assert_true(p->delta == 1e-6);
    assert_string_equal(p->allowed_regions_json, "[\"eu\"]");
    assert_int_equal(p->created_at, f->now);
    assert_int_equal(p->state, FL_STORE_POPULATION_ACTIVE);
    fl_store_free(f->st, p);

    int64_t id = 0;
    STORE_OK(f->st, fl_store_population_create(f->st, &id, "défaut ünïcode", NULL, 0.5, 0, NULL));
    STORE_OK(f->st, fl_store_population_find(f->st, &p, "défaut ünïcode"));
    assert_int_equal(p->id, id);
    assert_string_equal(p->config_json, "{}");
    assert_string_equal(p->allowed_regions_json, "[]");
    fl_store_free(f->st, p);

    /* State machine: CLOSED is terminal. */
    STORE_OK(f->st, fl_store_population_set_state(f->st, id, FL_STORE_POPULATION_PAUSED));
    STORE_OK(f->st, fl_store_population_set_state(f->st, id, FL_STORE_POPULATION_ACTIVE));
    STORE_OK(f->st, fl_store_population_set_state(f->st, id, FL_STORE_POPULATION_CLOSED));
    assert_int_equal(fl_store_population_set_state(f->st, id, FL_STORE_POPULATION_ACTIVE),
                     FL_ERR_STATE);
    STORE_OK(f->st, fl_store_population_get(f->st, &p, id));
    assert_int_equal(p->state, FL_STORE_POPULATION_CLOSED);
    fl_store_free(f->st, p);
    assert_int_equal(fl_store_round_create(f->st, NULL, id, 0, 0, NULL), FL_ERR_STATE);

    /* Bad arguments. */
    assert_int_equal(fl_store_population_create(f->st, &id, "keyboard", NULL, 1, 0, NULL),
                     FL_ERR_EXISTS);
    assert_int_equal(fl_store_population_create(f->st, &id, "", NULL, 1, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_create(f->st, &id, NULL, NULL, 1, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_create(f->st, &id, "tab\there", NULL, 1, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, 0, 0, NULL), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f->st), "epsilon"));
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, NAN, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, INFINITY, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, 1, 1.0, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f->st), "delta"));
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, 1, -0.1, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_create(f->st, &id, "x", "{", 1, 0, NULL), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_store_errmsg(f->st), "config_json"));
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, 1, 0, "{\"eu\":1}"),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, 1, 0, "[\"eu\", 3]"),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_store_population_create(f->st, &id, "x", NULL, 1, 0, "[oops"),
                     FL_ERR_FORMAT);
    assert_int_equal(id, 0);
    assert_int_equal(fl_store_population_get(f->st, &p, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_get(f->st, NULL, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_get(f->st, &p, 4242), FL_ERR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(fl_store_population_find(f->st, &p, "nobody"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_population_set_state(f->st, 4242, FL_STORE_POPULATION_PAUSED),
                     FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_population_set_state(f->st, f->pop, (fl_store_population_state)7),
                     FL_ERR_MISUSE);
}

static void test_clients(void **state) {
    struct fixture *f = *state;
    STORE_OK(f->st, fl_store_client_enroll(f->st, "c-1", token_a, sizeof(token_a), "eu", f->pop));
    fl_store_client *c = NULL;
    STORE_OK(f->st, fl_store_client_get(f->st, &c, "c-1"));
    assert_string_equal(c->client_id, "c-1");
    assert_string_equal(c->region, "eu");
    assert_int_equal(c->population_id, f->pop);
    assert_int_equal(c->enrolled_at, f->now);
    assert_int_equal(c->last_seen, f->now);
    fl_store_free(f->st, c);

    STORE_OK(f->st, fl_store_client_authenticate(f->st, "c-1", token_a, sizeof(token_a)));
    assert_int_equal(fl_store_client_authenticate(f->st, "c-1", token_b, sizeof(token_b)),
                     FL_ERR_AUTH);
    assert_int_equal(fl_store_client_authenticate(f->st, "c-1", token_a, sizeof(token_a) - 1),
                     FL_ERR_AUTH);
    assert_int_equal(fl_store_client_authenticate(f->st, "nobody", token_a, sizeof(token_a)),
                     FL_ERR_AUTH);
    /* Same message for both failures: no oracle. */
    assert_string_equal(fl_store_errmsg(f->st), "authentication failed");

    f->now += 60000;
    STORE_OK(f->st, fl_store_client_touch(f->st, "c-1"));
    STORE_OK(f->st, fl_store_client_get(f->st, &c, "c-1"));
    assert_int_equal(c->last_seen, f->now);
    assert_int_equal(c->enrolled_at, f->now - 60000);
    fl_store_free(f->st, c);

    /* The token itself is not on disk; its SHA-256 is. */
    sqlite3 *raw = store_raw_open(f->dir.path);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM clients WHERE "
                                        "instr(token_sha256, CAST('0123456789abcdef' AS BLOB))"),
                     0);
    assert_int_equal(store_raw_int(raw, "SELECT length(token_sha256) FROM clients"), 32);
    sqlite3_close(raw);

    assert_int_equal(fl_store_client_enroll(f->st, "c-1", token_b, sizeof(token_b), "eu", f->pop),
                     FL_ERR_EXISTS);
    assert_int_equal(fl_store_client_enroll(f->st, "c-2", token_b, sizeof(token_b), "eu", 999),
                     FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_enroll(f->st, "c 2", token_b, sizeof(token_b), "eu", f->pop),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_enroll(f->st, "c-2", token_b, 15, "eu", f->pop),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_enroll(f->st, "c-2", NULL, 16, "eu", f->pop), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_enroll(f->st, "c-2", token_b, 16, "", f->pop), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_enroll(f->st, "c-2", token_b, 16, "eu", 0), FL_ERR_MISUSE);
    assert_int_equal(fl_store_client_get(f->st, &c, "c-2"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_touch(f->st, "c-2"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_client_authenticate(f->st, "c-1", NULL, 16), FL_ERR_MISUSE);
}

static void test_rounds(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref base;
    STORE_OK(f->st, fl_store_model_put(f->st, &base, f->pop, 0, "w0", 2, NULL));
    int64_t r1 = 0, r2 = 0, r5 = 0;
    STORE_OK(f->st, fl_store_round_create(f->st, &r1, f->pop, 0, base.version, "{\"k\":100}"));
    STORE_OK(f->st, fl_store_round_create(f->st, &r2, f->pop, 0, 0, NULL));
    STORE_OK(f->st, fl_store_round_create(f->st, &r5, f->pop, 5, 0, NULL));
    assert_int_equal(fl_store_round_create(f->st, NULL, f->pop, 5, 0, NULL), FL_ERR_EXISTS);

    fl_store_round *rd = NULL;
    STORE_OK(f->st, fl_store_round_get(f->st, &rd, r1));
    assert_int_equal(rd->round_number, 1);
    assert_int_equal(rd->population_id, f->pop);
    assert_int_equal(rd->state, FL_STORE_ROUND_OPEN);
    assert_string_equal(rd->config_json, "{\"k\":100}");
    assert_int_equal(rd->base_version, base.version);
    assert_int_equal(rd->result_version, 0);
    assert_int_equal(rd->created_at, f->now);
    assert_int_equal(rd->started_at, 0);
    assert_int_equal(rd->ended_at, 0);
    assert_null(rd->abandon_reason);
    fl_store_free(f->st, rd);
    STORE_OK(f->st, fl_store_round_find(f->st, &rd, f->pop, 2));
    assert_int_equal(rd->id, r2);
    fl_store_free(f->st, rd);
    STORE_OK(f->st, fl_store_round_find(f->st, &rd, f->pop, 0)); /* latest */
    assert_int_equal(rd->id, r5);
    assert_int_equal(rd->round_number, 5);
    fl_store_free(f->st, rd);
    /* Next automatic number follows the highest. */
    int64_t r6 = 0;
    STORE_OK(f->st, fl_store_round_create(f->st, &r6, f->pop, 0, 0, NULL));
    STORE_OK(f->st, fl_store_round_get(f->st, &rd, r6));
    assert_int_equal(rd->round_number, 6);
    fl_store_free(f->st, rd);

    /* Lifecycle: OPEN -> RUNNING -> COMPLETED. */
    f->now += 10;
    STORE_OK(f->st, fl_store_round_start(f->st, r1));
    assert_int_equal(fl_store_round_start(f->st, r1), FL_ERR_STATE);
    fl_store_round_counts counts = {100, 50, 45, 5};
    STORE_OK(f->st, fl_store_round_set_counts(f->st, r1, &counts));
    fl_store_model_ref w1;
    STORE_OK(f->st, fl_store_model_put(f->st, &w1, f->pop, base.version, "w1", 2, NULL));
    assert_int_equal(fl_store_round_complete(f->st, r1, 9999), FL_ERR_NOT_FOUND);
    f->now += 10;
    STORE_OK(f->st, fl_store_round_complete(f->st, r1, w1.version));
    STORE_OK(f->st, fl_store_round_get(f->st, &rd, r1));
    assert_int_equal(rd->state, FL_STORE_ROUND_COMPLETED);
    assert_int_equal(rd->result_version, w1.version);
    assert_int_equal(rd->started_at, rd->created_at + 10);
    assert_int_equal(rd->ended_at, rd->created_at + 20);
    assert_int_equal(rd->counts.checked_in, 100);
    assert_int_equal(rd->counts.selected, 50);
    assert_int_equal(rd->counts.completed, 45);
    assert_int_equal(rd->counts.dropped, 5);
    fl_store_free(f->st, rd);
    /* Terminal. */
    assert_int_equal(fl_store_round_complete(f->st, r1, w1.version), FL_ERR_STATE);
    assert_int_equal(fl_store_round_abandon(f->st, r1, "late"), FL_ERR_STATE);
    assert_int_equal(fl_store_round_set_counts(f->st, r1, &counts), FL_ERR_STATE);

    /* OPEN -> ABANDONED with a reason. */
    STORE_OK(f->st, fl_store_round_abandon(f->st, r2, "too few clients: 3 < 10"));
    STORE_OK(f->st, fl_store_round_get(f->st, &rd, r2));
    assert_int_equal(rd->state, FL_STORE_ROUND_ABANDONED);
    assert_string_equal(rd->abandon_reason, "too few clients: 3 < 10");
    fl_store_free(f->st, rd);
    assert_int_equal(fl_store_round_start(f->st, r2), FL_ERR_STATE);

    /* Bad arguments. */
    assert_int_equal(fl_store_round_create(f->st, NULL, 0, 0, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_create(f->st, NULL, 999, 0, 0, NULL), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_round_create(f->st, NULL, f->pop, -1, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_create(f->st, NULL, f->pop, 0, 999, NULL), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_round_create(f->st, NULL, f->pop, 0, 0, "nope"), FL_ERR_FORMAT);
    assert_int_equal(fl_store_round_abandon(f->st, r5, ""), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_abandon(f->st, r5, NULL), FL_ERR_MISUSE);
    fl_store_round_counts neg = {1, -1, 0, 0};
    assert_int_equal(fl_store_round_set_counts(f->st, r5, &neg), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_set_counts(f->st, r5, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_get(f->st, &rd, 999), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_round_find(f->st, &rd, f->pop, 77), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_round_find(f->st, &rd, 0, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_start(f->st, 999), FL_ERR_NOT_FOUND);

    /* Unfinished rounds (OPEN or RUNNING), oldest first: r5 (open) and r6 (running). */
    STORE_OK(f->st, fl_store_round_start(f->st, r6));
    size_t n = 0;
    STORE_OK(f->st, fl_store_round_list_unfinished(f->st, &rd, &n, f->pop));
    assert_int_equal(n, 2);
    assert_int_equal(rd[0].id, r5);
    assert_int_equal(rd[0].state, FL_STORE_ROUND_OPEN);
    assert_int_equal(rd[1].id, r6);
    assert_int_equal(rd[1].state, FL_STORE_ROUND_RUNNING);
    fl_store_free(f->st, rd);
    STORE_OK(f->st, fl_store_round_abandon(f->st, r5, "gone"));
    STORE_OK(f->st, fl_store_round_abandon(f->st, r6, "gone"));
    STORE_OK(f->st, fl_store_round_list_unfinished(f->st, &rd, &n, f->pop));
    assert_int_equal(n, 0);
    assert_null(rd);
    assert_int_equal(fl_store_round_list_unfinished(f->st, &rd, NULL, f->pop), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_list_unfinished(f->st, NULL, &n, f->pop), FL_ERR_MISUSE);
    assert_int_equal(fl_store_round_list_unfinished(f->st, &rd, &n, 0), FL_ERR_MISUSE);
}

static void test_participants(void **state) {
    struct fixture *f = *state;
    const char *ids[] = {"c-b", "c-a", "c-c"};
    for (int i = 0; i < 3; i++)
        STORE_OK(f->st, fl_store_client_enroll(f->st, ids[i], token_a, 16, "eu", f->pop));
    int64_t rid = 0;
    STORE_OK(f->st, fl_store_round_create(f->st, &rid, f->pop, 0, 0, NULL));
    fl_store_participant *list = NULL;
    size_t n = 99;
    STORE_OK(f->st, fl_store_participant_list(f->st, &list, &n, rid));
    assert_int_equal(n, 0);
    assert_null(list);
    for (int i = 0; i < 3; i++)
        STORE_OK(f->st,
                 fl_store_participant_set(f->st, rid, ids[i], FL_STORE_PARTICIPANT_CHECKED_IN));
    f->now += 1;
    STORE_OK(f->st, fl_store_participant_set(f->st, rid, "c-a", FL_STORE_PARTICIPANT_SELECTED));
    STORE_OK(f->st, fl_store_participant_set(f->st, rid, "c-c", FL_STORE_PARTICIPANT_DROPPED));
    STORE_OK(f->st, fl_store_participant_list(f->st, &list, &n, rid));
    assert_int_equal(n, 3);
    assert_string_equal(list[0].client_id, "c-a");
    assert_int_equal(list[0].state, FL_STORE_PARTICIPANT_SELECTED);
    assert_int_equal(list[0].updated_at, f->now);
    assert_string_equal(list[1].client_id, "c-b");
    assert_int_equal(list[1].state, FL_STORE_PARTICIPANT_CHECKED_IN);
    assert_int_equal(list[1].updated_at, f->now - 1);
    assert_string_equal(list[2].client_id, "c-c");
    assert_int_equal(list[2].state, FL_STORE_PARTICIPANT_DROPPED);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(list[i].round_id, rid);
    fl_store_free(f->st, list);

    assert_int_equal(fl_store_participant_set(f->st, rid, "ghost", FL_STORE_PARTICIPANT_SELECTED),
                     FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_participant_set(f->st, 999, "c-a", FL_STORE_PARTICIPANT_SELECTED),
                     FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_participant_set(f->st, rid, "c-a", (fl_store_participant_state)9),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_list(f->st, NULL, &n, rid), FL_ERR_MISUSE);
    assert_int_equal(fl_store_participant_list(f->st, &list, &n, 0), FL_ERR_MISUSE);
    STORE_OK(f->st, fl_store_round_abandon(f->st, rid, "test"));
    assert_int_equal(fl_store_participant_set(f->st, rid, "c-a", FL_STORE_PARTICIPANT_COMPLETED),
                     FL_ERR_STATE);
}

static fl_store_ledger_entry sample_entry(int64_t pop, int64_t round_id) {
    fl_store_ledger_entry e;
    memset(&e, 0, sizeof(e));
    e.population_id = pop;
    e.round_id = round_id;
    e.mechanism = "gaussian";
    e.sampling_rate = 0.01;
    e.noise_multiplier = 1.1;
    e.clip_norm = 1.0;
    e.steps = 1;
    e.participants = 100;
    e.params_json = "{\"discrete\":false}";
    return e;
}

static void test_ledger(void **state) {
    struct fixture *f = *state;
    fl_store_ledger_entry *list = NULL;
    size_t n = 7;
    STORE_OK(f->st, fl_store_ledger_list(f->st, &list, &n, f->pop));
    assert_int_equal(n, 0);
    assert_null(list);

    int64_t rid = 0, id1 = 0, id2 = 0;
    STORE_OK(f->st, fl_store_round_create(f->st, &rid, f->pop, 0, 0, NULL));
    fl_store_ledger_entry e = sample_entry(f->pop, rid);
    STORE_OK(f->st, fl_store_ledger_append(f->st, &id1, &e));
    e = sample_entry(f->pop, 0);
    e.mechanism = "ddgauss";
    e.sampling_rate = 1.0;
    e.noise_multiplier = 0;
    e.steps = 20;
    e.participants = 0;
    e.params_json = NULL;
    f->now += 5;
    STORE_OK(f->st, fl_store_ledger_append(f->st, &id2, &e));
    assert_true(id2 > id1);

    /* Another population's entries stay apart. */
    int64_t other = 0;
    STORE_OK(f->st, fl_store_population_create(f->st, &other, "other", NULL, 1, 0, NULL));
    e = sample_entry(other, 0);
    STORE_OK(f->st, fl_store_ledger_append(f->st, NULL, &e));

    STORE_OK(f->st, fl_store_ledger_list(f->st, &list, &n, f->pop));
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, id1);
    assert_int_equal(list[0].population_id, f->pop);
    assert_int_equal(list[0].round_id, rid);
    assert_string_equal(list[0].mechanism, "gaussian");
    assert_true(list[0].sampling_rate == 0.01);
    assert_true(list[0].noise_multiplier == 1.1);
    assert_true(list[0].clip_norm == 1.0);
    assert_int_equal(list[0].steps, 1);
    assert_int_equal(list[0].participants, 100);
    assert_string_equal(list[0].params_json, "{\"discrete\":false}");
    assert_int_equal(list[0].created_at, f->now - 5);
    assert_int_equal(list[1].id, id2);
    assert_int_equal(list[1].round_id, 0);
    assert_string_equal(list[1].mechanism, "ddgauss");
    assert_int_equal(list[1].steps, 20);
    assert_string_equal(list[1].params_json, "{}");
    assert_int_equal(list[1].created_at, f->now);
    fl_store_free(f->st, list);

    /* Range checks, each naming its field. */
    struct {
        const char *field;
        fl_store_ledger_entry e;
    } bad[10];
    for (int i = 0; i < 10; i++)
        bad[i].e = sample_entry(f->pop, 0);
    bad[0].field = "sampling_rate", bad[0].e.sampling_rate = 0;
    bad[1].field = "sampling_rate", bad[1].e.sampling_rate = 1.5;
    bad[2].field = "noise_multiplier", bad[2].e.noise_multiplier = -1;
    bad[3].field = "clip_norm", bad[3].e.clip_norm = 0;
    bad[4].field = "steps", bad[4].e.steps = 0;
    bad[5].field = "participants", bad[5].e.participants = -1;
    bad[6].field = "mechanism", bad[6].e.mechanism = "";
    bad[7].field = "mechanism", bad[7].e.mechanism = NULL;
    bad[8].field = "population_id", bad[8].e.population_id = 0;
    bad[9].field = "noise_multiplier", bad[9].e.noise_multiplier = NAN;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(fl_store_ledger_append(f->st, NULL, &bad[i].e), FL_ERR_MISUSE);
        if (!strstr(fl_store_errmsg(f->st), bad[i].field))
            fail_msg("case %d: '%s' does not name %s", i, fl_store_errmsg(f->st), bad[i].field);
    }
    e = sample_entry(f->pop, 0);
    e.params_json = "{bad";
    assert_int_equal(fl_store_ledger_append(f->st, NULL, &e), FL_ERR_FORMAT);
    e = sample_entry(999, 0);
    assert_int_equal(fl_store_ledger_append(f->st, NULL, &e), FL_ERR_NOT_FOUND);
    e = sample_entry(f->pop, 999);
    assert_int_equal(fl_store_ledger_append(f->st, NULL, &e), FL_ERR_NOT_FOUND);
    e = sample_entry(other, rid); /* round of another population */
    assert_int_equal(fl_store_ledger_append(f->st, NULL, &e), FL_ERR_MISUSE);
    assert_int_equal(fl_store_ledger_append(f->st, NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_ledger_list(f->st, NULL, &n, f->pop), FL_ERR_MISUSE);
    assert_int_equal(fl_store_ledger_list(f->st, &list, &n, -2), FL_ERR_MISUSE);

    /* Append-only even for raw SQL. */
    sqlite3 *raw = store_raw_open(f->dir.path);
    assert_int_not_equal(
        sqlite3_exec(raw, "UPDATE privacy_ledger SET clip_norm = 9", NULL, NULL, NULL), SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(raw, "DELETE FROM privacy_ledger", NULL, NULL, NULL),
                         SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(raw,
                                      "INSERT OR REPLACE INTO privacy_ledger SELECT id, "
                                      "population_id, round_id, mechanism, 1, 0, 1, 1, 0, '{}', "
                                      "created_at FROM privacy_ledger",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    assert_non_null(strstr(sqlite3_errmsg(raw), "append-only"));
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM privacy_ledger"), 3);
    sqlite3_close(raw);
}

/* The coordinator's round commit: model + round completion + ledger entry, all or none. */
static void test_round_commit_is_atomic(void **state) {
    struct fixture *f = *state;
    int64_t rid = 0;
    STORE_OK(f->st, fl_store_round_create(f->st, &rid, f->pop, 0, 0, NULL));
    STORE_OK(f->st, fl_store_round_start(f->st, rid));

    /* Attempt 1 fails half-way and is rolled back: nothing of it stays. */
    fl_store_model_ref m;
    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_model_put(f->st, &m, f->pop, 0, "w-attempt-1", 11, NULL));
    STORE_OK(f->st, fl_store_round_complete(f->st, rid, m.version));
    fl_store_ledger_entry e = sample_entry(f->pop, rid);
    e.clip_norm = -1;
    assert_int_equal(fl_store_ledger_append(f->st, NULL, &e), FL_ERR_MISUSE);
    assert_int_equal(fl_store_in_transaction(f->st), 1);
    STORE_OK(f->st, fl_store_rollback(f->st));
    fl_store_model *got = NULL;
    assert_int_equal(fl_store_model_get(f->st, &got, m.version), FL_ERR_NOT_FOUND);
    fl_store_round *rd = NULL;
    STORE_OK(f->st, fl_store_round_get(f->st, &rd, rid));
    assert_int_equal(rd->state, FL_STORE_ROUND_RUNNING);
    fl_store_free(f->st, rd);

    /* Attempt 2 commits all three. */
    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_model_put(f->st, &m, f->pop, 0, "w-attempt-2", 11, NULL));
    STORE_OK(f->st, fl_store_round_complete(f->st, rid, m.version));
    e = sample_entry(f->pop, rid);
    STORE_OK(f->st, fl_store_ledger_append(f->st, NULL, &e));
    STORE_OK(f->st, fl_store_commit(f->st));
    STORE_OK(f->st, fl_store_round_get(f->st, &rd, rid));
    assert_int_equal(rd->state, FL_STORE_ROUND_COMPLETED);
    assert_int_equal(rd->result_version, m.version);
    fl_store_free(f->st, rd);
    fl_store_ledger_entry *list = NULL;
    size_t n = 0;
    STORE_OK(f->st, fl_store_ledger_list(f->st, &list, &n, f->pop));
    assert_int_equal(n, 1);
    assert_int_equal(list[0].round_id, rid);
    fl_store_free(f->st, list);
    assert_int_equal(fl_store_check(f->st), FL_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_populations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_participants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ledger, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_commit_is_atomic, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
