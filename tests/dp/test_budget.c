/* Budget checks over a ledger, params_json round trips, and allocation-failure walks. */
#include "fl_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flotilla/dp.h"

static fl_dp_ledger_entry gaussian_round(double q, double z) {
    fl_dp_ledger_entry e;
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_GAUSSIAN);
    e.q = q;
    e.noise_multiplier = z;
    e.clip_norm = 1.0;
    e.steps = 1;
    e.participants = 100;
    return e;
}

/* 0.1 / 2.0 / delta 1e-6: 99 rounds spend about 2.90 and 100 rounds 2.914 (dp_vectors.csv), so
 * with a budget of 2.914 the 100th round fits and the 101st does not. */
static void test_budget_allows_then_refuses(void **state) {
    (void)state;
    fl_dp_ledger_entry ledger[101];
    for (int i = 0; i < 101; i++)
        ledger[i] = gaussian_round(0.1, 2.0);
    fl_dp_budget b = {2.915, 1e-6};
    fl_dp_budget_report rep;
    char msg[256] = "";
    assert_int_equal(
        fl_dp_budget_check(&rep, &b, ledger, 99, &ledger[99], NULL, NULL, msg, sizeof msg), FL_OK);
    assert_true(fabs(rep.epsilon_after - 2.914173762) < 0.01 * 2.914173762);
    assert_true(rep.epsilon_before < rep.epsilon_after && rep.remaining > 0);
    assert_true(rep.epsilon_budget == 2.915 && rep.delta == 1e-6);
    assert_int_equal(
        fl_dp_budget_check(&rep, &b, ledger, 100, &ledger[100], NULL, NULL, msg, sizeof msg),
        FL_ERR_BUDGET);
    assert_true(rep.remaining < 0 && rep.epsilon_after > 2.915);
    /* The message names the current epsilon, the epsilon after the round and the budget. */
    char want[64];
    snprintf(want, sizeof want, "epsilon so far %.6g", rep.epsilon_before);
    assert_non_null(strstr(msg, want));
    snprintf(want, sizeof want, "after the proposed round %.6g", rep.epsilon_after);
    assert_non_null(strstr(msg, want));
    assert_non_null(strstr(msg, "budget epsilon 2.915 at delta 1e-06"));
    print_message("refusal: %s\n", msg);

    /* The handle variant agrees in O(orders) and keeps the message. */
    fl_dp_accountant *acc;
    fl_dp_event ev;
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, NULL, 0), FL_OK);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &ledger[i], NULL, 0), FL_OK);
        assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    }
    fl_dp_budget_report rep2;
    assert_int_equal(fl_dp_accountant_budget_check(acc, &rep2, &b, &ledger[100]), FL_ERR_BUDGET);
    assert_true(rep2.epsilon_after == rep.epsilon_after);
    assert_string_equal(fl_dp_accountant_errmsg(acc), msg);
    fl_dp_accountant_destroy(acc);

    /* Empty ledger, first round. */
    assert_int_equal(fl_dp_budget_check(&rep, &b, NULL, 0, &ledger[0], NULL, NULL, NULL, 0), FL_OK);
    assert_true(rep.epsilon_before == 0.0);
}

/* A round without noise has infinite epsilon and is refused. */
static void test_no_noise_refused(void **state) {
    (void)state;
    fl_dp_ledger_entry e = gaussian_round(0.1, 0.0);
    fl_dp_budget b = {100.0, 1e-5};
    char msg[256];
    assert_int_equal(fl_dp_budget_check(NULL, &b, NULL, 0, &e, NULL, NULL, msg, sizeof msg),
                     FL_ERR_BUDGET);
    assert_non_null(strstr(msg, "inf"));
}

static void test_discrete_rounds(void **state) {
    (void)state;
    fl_dp_ledger_entry ledger[3];
    fl_dp_ledger_entry_init(&ledger[0], FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN);
    ledger[0].q = 0.01;
    ledger[0].participants = 200;
    ledger[0].steps = 1;
    assert_int_equal(
        fl_dp_ledger_entry_parse_params(&ledger[0],
                                        " {\"sigma\": 25, \"l2_sensitivity\": 150, \"dim\": 4096, "
                                        "\"note\": \"x\\\"y\", \"rotation\": true, \"seed\": null}",
                                        NULL, 0),
        FL_OK);
    assert_true(ledger[0].sigma == 25 && ledger[0].l2_sensitivity == 150 && ledger[0].dim == 4096 &&
                ledger[0].l1_sensitivity == 0);
    fl_dp_ledger_entry_init(&ledger[1], FL_DP_MECH_DISCRETE_GAUSSIAN);
    ledger[1].sigma = 400;
    ledger[1].l2_sensitivity = 100;
    fl_dp_ledger_entry_init(&ledger[2], FL_DP_MECH_GAUSSIAN);
    ledger[2].q = 0.01;
    ledger[2].noise_multiplier = 1.0;
    fl_dp_budget b = {10.0, 1e-5};
    fl_dp_budget_report rep;
    assert_int_equal(fl_dp_budget_check(&rep, &b, ledger, 2, &ledger[2], NULL, NULL, NULL, 0),
                     FL_OK);
    assert_true(rep.epsilon_before > 0 && rep.epsilon_after > rep.epsilon_before);

    /* params_json round trip. */
    char buf[256];
    assert_int_equal(fl_dp_ledger_entry_format_params(buf, sizeof buf, &ledger[0]), FL_OK);
    fl_dp_ledger_entry back;
    fl_dp_ledger_entry_init(&back, FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN);
    assert_int_equal(fl_dp_ledger_entry_parse_params(&back, buf, NULL, 0), FL_OK);
    assert_true(back.sigma == 25 && back.l2_sensitivity == 150 && back.dim == 4096);
    assert_int_equal(fl_dp_ledger_entry_format_params(buf, 8, &ledger[0]), FL_ERR_TOO_LARGE);
    assert_int_equal(fl_dp_ledger_entry_format_params(buf, sizeof buf, &ledger[2]), FL_OK);
    assert_string_equal(buf, "{}");
    assert_int_equal(fl_dp_ledger_entry_parse_params(&back, "", NULL, 0), FL_OK);
    assert_int_equal(fl_dp_ledger_entry_parse_params(&back, NULL, NULL, 0), FL_OK);
    assert_int_equal(fl_dp_ledger_entry_parse_params(&back, "{ }", NULL, 0), FL_OK);
}

static void test_bad_input(void **state) {
    (void)state;
    char msg[256];
    fl_dp_ledger_entry e;
    fl_dp_ledger_entry_init(&e, FL_DP_MECH_GAUSSIAN);
    const char *bad_json[] = {
        "[1]",
        "{\"sigma\": }",
        "{\"sigma\": 1,}",
        "{\"sigma\" 1}",
        "{\"sigma\": 1} x",
        "{\"sigma\": {\"a\": 1}}",
        "{\"dim\": -1}",
        "{\"dim\": 1.5}",
        "{\"sigma\": 1e999}",
        "{\"sigma\": \"unterminated}",
        "{sigma: 1}",
    };
    for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++) {
        msg[0] = '\0';
        if (fl_dp_ledger_entry_parse_params(&e, bad_json[i], msg, sizeof msg) != FL_ERR_FORMAT)
            fail_msg("accepted %s", bad_json[i]);
        assert_non_null(strstr(msg, "params_json"));
    }
    fl_dp_budget b = {1.0, 1e-5};
    fl_dp_ledger_entry ok = gaussian_round(0.1, 1.0), bad = gaussian_round(0.1, 1.0);
    bad.mechanism = "laplace";
    assert_int_equal(fl_dp_budget_check(NULL, &b, &bad, 1, &ok, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "ledger[0]: ledger entry: unknown mechanism \"laplace\""));
    bad = gaussian_round(1.5, 1.0);
    assert_int_equal(fl_dp_budget_check(NULL, &b, &ok, 1, &bad, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "proposed round: event.q"));
    fl_dp_budget nb = {0.0, 1e-5};
    assert_int_equal(fl_dp_budget_check(NULL, &nb, &ok, 1, &ok, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "budget.epsilon"));
    nb.epsilon = 1;
    nb.delta = 1;
    assert_int_equal(fl_dp_budget_check(NULL, &nb, &ok, 1, &ok, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_dp_budget_check(NULL, &b, NULL, 3, &ok, NULL, NULL, msg, sizeof msg),
                     FL_ERR_MISUSE);
    fl_dp_ledger_entry ddg;
    fl_dp_ledger_entry_init(&ddg, FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN);
    ddg.sigma = 3;
    ddg.l2_sensitivity = 10;
    ddg.dim = 10; /* participants missing */
    fl_dp_event ev;
    assert_int_equal(fl_dp_ledger_entry_to_event(&ev, &ddg, msg, sizeof msg), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "n_clients"));
}

static void test_oom_walk(void **state) {
    (void)state;
    fl_dp_ledger_entry ledger[5];
    for (int i = 0; i < 5; i++)
        ledger[i] = gaussian_round(0.1, 2.0);
    fl_dp_budget b = {1.0, 1e-5};
    int saw_ok = 0;
    for (long k = 1; k < 10 && !saw_ok; k++) {
        struct fl_test_counting c = {0};
        c.fail_at = k;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_status rc = fl_dp_budget_check(NULL, &b, ledger, 4, &ledger[4], NULL, &a, NULL, 0);
        if (rc == FL_OK)
            saw_ok = 1;
        else
            assert_int_equal(rc, FL_ERR_NOMEM);
        assert_int_equal(c.live, 0);
    }
    assert_true(saw_ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_allows_then_refuses),
        cmocka_unit_test(test_no_noise_refused),
        cmocka_unit_test(test_discrete_rounds),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
