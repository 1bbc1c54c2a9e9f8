/* The flotilla-dp command: good and bad arguments, exit codes, text and JSON output.
 * Runs the built executable (path from FL_DP_CLI, set by tests/dp/accounting.cmake). */
#include "fl_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#ifndef FL_DP_CLI
#define FL_DP_CLI FL_BINARY_DIR "/dp/tools/flotilla-dp"
#endif

/* Runs "flotilla-dp ARGS" (stderr folded into stdout); returns the exit status. */
static int run(const char *args, char *out, size_t out_len) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", FL_DP_CLI, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, out_len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* Value of "key": number in a one-line JSON object. */
static double json_num(const char *js, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(js, pat);
    assert_non_null(p);
    return strtod(p + strlen(pat), NULL);
}

static void test_epsilon(void **state) {
    (void)state;
    char out[4096];
    assert_int_equal(
        run("epsilon --q 0.01 --sigma 1.1 --steps 10000 --delta 1e-5", out, sizeof out), 0);
    assert_non_null(strstr(out, "epsilon = 5.63"));
    assert_non_null(strstr(out, "optimal RDP order 4.7"));
    assert_int_equal(
        run("epsilon --q=0.01 --sigma=1.1 --steps=10000 --delta=1e-5 --json", out, sizeof out), 0);
    double eps = json_num(out, "epsilon");
    assert_true(fabs(eps - 5.63201067) / 5.63201067 < 0.01);
    assert_true(json_num(out, "order") == 4.7);
    /* Classic conversion and custom orders (TF Privacy MNIST tutorial, 1.00). */
    assert_int_equal(run("epsilon --q 0.004266666666666667 --sigma 1.12 --steps 234 --delta 1e-5 "
                         "--classic --json --orders 2,4,8,12,13,14,16,20,32,63",
                         out, sizeof out),
                     0);
    assert_true(fabs(json_num(out, "epsilon") - 1.000300912) < 1e-3);
    assert_true(json_num(out, "order") == 13);
    assert_int_equal(
        run("delta --q 0.01 --sigma 1.1 --steps 10000 --epsilon 5.63199 --json", out, sizeof out),
        0);
    assert_true(fabs(json_num(out, "delta") - 1e-5) / 1e-5 < 1e-3);
}

static void test_sigma(void **state) {
    (void)state;
    char out[4096];
    assert_int_equal(
        run("sigma --q 0.01 --steps 10000 --epsilon 5.632 --delta 1e-5 --json", out, sizeof out),
        0);
    double z = json_num(out, "sigma"), eps = json_num(out, "epsilon");
    assert_true(fabs(z - 1.1) < 1e-3 && eps <= 5.632);
    assert_int_equal(
        run("sigma --q 0.01 --steps 10000 --epsilon 1 --delta 1e-5 --tol 1e-3", out, sizeof out),
        0);
    assert_non_null(strstr(out, "sigma = "));
    /* Out of reach: computation failure, exit 1. */
    assert_int_equal(
        run("sigma --q 1 --steps 1000000 --epsilon 0.001 --delta 1e-9", out, sizeof out), 1);
    assert_non_null(strstr(out, "target"));
}

static void test_help(void **state) {
    (void)state;
    char out[8192];
    assert_int_equal(run("--help", out, sizeof out), 0);
    assert_non_null(strstr(out, "usage: flotilla-dp"));
    assert_int_equal(run("sigma -h", out, sizeof out), 0);
    assert_non_null(strstr(out, "--epsilon"));
}

static void test_bad_arguments(void **state) {
    (void)state;
    struct {
        const char *args, *expect;
    } cases[] = {
        {"", "missing command"},
        {"frobnicate", "unknown command"},
        {"epsilon --q abc --sigma 1 --steps 10 --delta 1e-5", "--q 'abc'"},
        {"epsilon --q 0.1x --sigma 1 --steps 10 --delta 1e-5", "not a finite number"},
        {"epsilon --q nan --sigma 1 --steps 10 --delta 1e-5", "not a finite number"},
        {"epsilon --q 1e999 --sigma 1 --steps 10 --delta 1e-5", "not a finite number"},
        {"epsilon --q 1.5 --sigma 1 --steps 10 --delta 1e-5", "--q must be in (0, 1]"},
        {"epsilon --q 0 --sigma 1 --steps 10 --delta 1e-5", "--q must be in (0, 1]"},
        {"epsilon --q 0.1 --sigma -1 --steps 10 --delta 1e-5", "--sigma must be > 0"},
        {"epsilon --q 0.1 --sigma 1 --steps -3 --delta 1e-5", "--steps '-3'"},
        {"epsilon --q 0.1 --sigma 1 --steps 2.5 --delta 1e-5", "--steps '2.5'"},
        {"epsilon --q 0.1 --sigma 1 --steps 0 --delta 1e-5", "--steps '0'"},
        {"epsilon --q 0.1 --sigma 1 --steps 99999999999999999999999 --delta 1e-5", "--steps"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1", "--delta must be in (0, 1)"},
        {"epsilon --q 0.1 --sigma 1 --steps 10", "missing --delta"},
        {"epsilon --q 0.1 --steps 10 --delta 1e-5", "missing --sigma"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 --epsilon 1", "what this command"},
        {"epsilon --q 0.1 --q 0.2 --sigma 1 --steps 10 --delta 1e-5", "given twice"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta", "needs a value"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 --bogus 1", "unknown option"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 stray", "unexpected argument"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 --json=1", "takes no value"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 --orders 2,0.5", "--orders"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 --orders 2,,3", "--orders"},
        {"sigma --q 0.1 --steps 10 --epsilon 1 --delta 1e-5 --sigma 2", "what this command"},
        {"sigma --q 0.1 --steps 10 --epsilon 0 --delta 1e-5", "--epsilon must be > 0"},
        {"sigma --q 0.1 --steps 10 --epsilon 1 --delta 1e-5 --tol 0.9", "--tol"},
        {"epsilon --q 0.1 --sigma 1 --steps 10 --delta 1e-5 --tol 0.1", "only applies"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run(cases[i].args, out, sizeof out);
        if (rc != 2 || !strstr(out, cases[i].expect))
            fail_msg("'%s': exit %d, output: %s", cases[i].args, rc, out);
        assert_non_null(strstr(out, "--help"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epsilon),
        cmocka_unit_test(test_sigma),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
