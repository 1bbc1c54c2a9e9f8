/* Budget enforcement over a real SQLite privacy ledger (storage + dp, as the coordinator
 * wires them): rounds are appended to the ledger of a store in a temporary directory, the
 * store is closed and reopened (the ledger survives restarts), the cumulative epsilon is
 * recomputed from the stored entries, and the round that would exceed the population's budget
 * is refused before it starts and leaves no ledger entry. Linked to fl_dp_static and
 * fl_storage_static by tests/dp/accounting.cmake. */
#include "fl_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flotilla/dp.h"
#include "flotilla/storage.h"

#define STEPS_PER_ROUND 10

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/fl_dp_ledger_XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/store.db", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    char p[160];
    const char *suffix[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", f->path, suffix[i]);
        unlink(p);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static fl_store *open_store(const char *path) {
    fl_store *st = NULL;
    fl_status rc = fl_store_open(&st, path, NULL);
    if (rc != FL_OK)
        fail_msg("fl_store_open: %s", fl_store_errmsg(st));
    return st;
}

/* Storage row -> dp ledger entry (strings stay borrowed from the row). */
static void to_dp_entry(fl_dp_ledger_entry *e, const fl_store_ledger_entry *row) {
    fl_dp_ledger_entry_init(e, row->mechanism);
    e->q = row->sampling_rate;
    e->noise_multiplier = row->noise_multiplier;
    e->clip_norm = row->clip_norm;
    e->steps = (uint64_t)row->steps;
    e->participants = (uint64_t)row->participants;
    char msg[256];
    if (fl_dp_ledger_entry_parse_params(e, row->params_json, msg, sizeof msg) != FL_OK)
        fail_msg("params_json of ledger entry %lld: %s", (long long)row->id, msg);
}

/* The coordinator's step 2: read the population's ledger and ask dp about the next round. */
static fl_status check_round(fl_store *st, int64_t pop, const fl_dp_ledger_entry *proposed,
                             fl_dp_budget_report *rep, char *msg, size_t msg_len,
                             size_t *n_entries) {
    fl_store_population *p = NULL;
    fl_store_ledger_entry *rows = NULL;
    size_t n = 0;
    assert_int_equal(fl_store_population_get(st, &p, pop), FL_OK);
    assert_int_equal(fl_store_ledger_list(st, &rows, &n, pop), FL_OK);
    fl_dp_ledger_entry *entries = calloc(n ? n : 1, sizeof(*entries));
    assert_non_null(entries);
    for (size_t i = 0; i < n; i++)
        to_dp_entry(&entries[i], &rows[i]);
    fl_dp_budget budget = {p->epsilon, p->delta};
    fl_status rc = fl_dp_budget_check(rep, &budget, entries, n, proposed, NULL, NULL, msg, msg_len);
    free(entries);
    fl_store_free(st, rows);
    fl_store_free(st, p);
    *n_entries = n;
    return rc;
}

/* Appends the round's ledger entry, as the coordinator does when the round commits. */
static void append_round(fl_store *st, int64_t pop, int64_t round_id, const fl_dp_ledger_entry *e) {
    char params[256];
    assert_int_equal(fl_dp_ledger_entry_format_params(params, sizeof params, e), FL_OK);
    fl_store_ledger_entry row;
    memset(&row, 0, sizeof row);
    row.population_id = pop;
    row.round_id = round_id;
    row.mechanism = e->mechanism;
    row.sampling_rate = e->q;
    row.noise_multiplier = e->noise_multiplier;
    row.clip_norm = e->clip_norm;
    row.steps = (int64_t)e->steps;
    row.participants = (int64_t)e->participants;
    row.params_json = params;
    if (fl_store_ledger_append(st, NULL, &row) != FL_OK)
        fail_msg("ledger append: %s", fl_store_errmsg(st));
}

static void test_ledger_budget_across_restarts(void **state) {
    struct fixture *f = *state;
    const double budget_eps = 8.0, budget_delta = 1e-5;
    fl_store *st = open_store(f->path);
    int64_t pop = 0;
    assert_int_equal(
        fl_store_population_create(st, &pop, "keyboard-en", NULL, budget_eps, budget_delta, NULL),
        FL_OK);

    /* Round 1 used distributed DP (discrete Gaussian shares under secure aggregation);
     * later rounds use central DP, q = 0.1, z = 1.0, 10 noisy steps each. */
    fl_dp_ledger_entry ddg, central;
    fl_dp_ledger_entry_init(&ddg, FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN);
    ddg.q = 0.1;
    ddg.noise_multiplier = 6.3;
    ddg.clip_norm = 1.0;
    ddg.steps = 1;
    ddg.participants = 1000;
    ddg.sigma = 20.0;
    ddg.l2_sensitivity = 100.0;
    ddg.dim = 1000;
    fl_dp_ledger_entry_init(&central, FL_DP_MECH_GAUSSIAN);
    central.q = 0.1;
    central.noise_multiplier = 1.0;
    central.clip_norm = 1.0;
    central.steps = STEPS_PER_ROUND;
    central.participants = 100;

    /* Expected cumulative epsilon, composed independently round by round. */
    fl_dp_accountant *expect;
    assert_int_equal(fl_dp_accountant_create(&expect, NULL, NULL, NULL, 0), FL_OK);

    int64_t round_no = 0, refused_round = 0;
    double last_allowed_eps = 0.0;
    for (int r = 1; r <= 30 && !refused_round; r++) {
        const fl_dp_ledger_entry *proposed = r == 1 ? &ddg : &central;
        /* Restart the coordinator every 4 rounds: the ledger must survive. */
        if (r % 4 == 0) {
            fl_store_close(st);
            st = open_store(f->path);
        }
        int64_t round_id = 0;
        assert_int_equal(fl_store_round_create(st, &round_id, pop, 0, 0, NULL), FL_OK);
        round_no++;
        fl_dp_budget_report rep;
        char msg[256] = "";
        size_t n_before = 0;
        fl_status rc = check_round(st, pop, proposed, &rep, msg, sizeof msg, &n_before);
        assert_int_equal(n_before, (size_t)(r - 1)); /* every committed round is there */

        fl_dp_event ev;
        double want_before, want_after;
        assert_int_equal(fl_dp_ledger_entry_to_event(&ev, proposed, NULL, 0), FL_OK);
        assert_int_equal(fl_dp_accountant_epsilon(expect, &want_before, NULL, budget_delta), FL_OK);
        assert_int_equal(fl_dp_accountant_epsilon_if(expect, &want_after, NULL, &ev, budget_delta),
                         FL_OK);
        assert_true(fabs(rep.epsilon_before - want_before) <= 1e-9 * (1 + want_before));
        assert_true(fabs(rep.epsilon_after - want_after) <= 1e-9 * (1 + want_after));

        if (rc == FL_ERR_BUDGET) {
            /* Refused before it starts: abandon the round, append nothing. */
            assert_true(want_after > budget_eps && want_before <= budget_eps);
            assert_non_null(strstr(msg, "budget epsilon 8"));
            print_message("round %lld refused: %s\n", (long long)round_no, msg);
            assert_int_equal(fl_store_round_abandon(st, round_id, msg), FL_OK);
            refused_round = round_no;
            break;
        }
        assert_int_equal(rc, FL_OK);
        assert_true(want_after <= budget_eps);
        assert_int_equal(fl_store_round_start(st, round_id), FL_OK);
        /* ... the round runs ... then its ledger entry commits with it. */
        assert_int_equal(fl_store_begin(st), FL_OK);
        append_round(st, pop, round_id, proposed);
        assert_int_equal(fl_store_commit(st), FL_OK);
        assert_int_equal(fl_dp_accountant_compose(expect, &ev), FL_OK);
        last_allowed_eps = want_after;
    }
    /* 100 central steps give 7.90 (plus the DDG round), 110 give 8.25 > 8. */
    assert_true(refused_round >= 8 && refused_round <= 12);
    assert_true(last_allowed_eps > 7.5 && last_allowed_eps <= budget_eps);

    /* After one more restart the refused round left no trace and the cumulative epsilon is
     * recomputed from storage alone; asking again still refuses. */
    fl_store_close(st);
    st = open_store(f->path);
    fl_dp_budget_report rep;
    char msg[256];
    size_t n = 0;
    assert_int_equal(check_round(st, pop, &central, &rep, msg, sizeof msg, &n), FL_ERR_BUDGET);
    assert_int_equal(n, (size_t)(refused_round - 1));
    assert_true(fabs(rep.epsilon_before - last_allowed_eps) <= 1e-9 * last_allowed_eps);
    /* A smaller round (one step) still fits, if the budget allows it. */
    fl_dp_ledger_entry small = central;
    small.steps = 1;
    fl_status rc = check_round(st, pop, &small, &rep, msg, sizeof msg, &n);
    assert_true(rc == (rep.epsilon_after <= budget_eps ? FL_OK : FL_ERR_BUDGET));
    fl_dp_accountant_destroy(expect);
    fl_store_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ledger_budget_across_restarts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
