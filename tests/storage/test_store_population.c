/* Population settings changes and the population listing: round trips, refusals that
 * change nothing, the change grouped with its audit entry (both or neither), and a listing
 * that does not stop at a gap in the ids. */
#include <math.h>

#include "test_store_util.h"

struct fixture {
    struct store_tdir dir;
    fl_store *st;
    int64_t now; /* fake clock, Unix ms */
    int64_t pop; /* a population created by setup */
};

static int64_t fixture_clock(void *user) {
    return ((struct fixture *)user)->now;
}

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    store_tdir_make(&f->dir, "pop.db");
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

/* Asserts the stored settings of population id. */
static void expect_pop(struct fixture *f, int64_t id, const char *config, double eps,
                       double delta, const char *regions) {
    fl_store_population *p = NULL;
    STORE_OK(f->st, fl_store_population_get(f->st, &p, id));
    assert_string_equal(p->config_json, config);
    assert_true(p->epsilon == eps);
    assert_true(p->delta == delta);
    assert_string_equal(p->allowed_regions_json, regions);
    fl_store_free(f->st, p);
}

static void test_update_round_trip(void **state) {
    struct fixture *f = *state;
    f->now += 5000;
    STORE_OK(f->st, fl_store_population_update_config(f->st, f->pop, "{\"lr\":0.05}", 4.0, 1e-7,
                                                      "[\"eu\",\"us\"]"));
    expect_pop(f, f->pop, "{\"lr\":0.05}", 4.0, 1e-7, "[\"eu\",\"us\"]");
    fl_store_population *p = NULL;
    STORE_OK(f->st, fl_store_population_get(f->st, &p, f->pop));
    /* Name, creation time and state are kept. */
    assert_string_equal(p->name, "keyboard");
    assert_int_equal(p->created_at, f->now - 5000);
    assert_int_equal(p->state, FL_STORE_POPULATION_ACTIVE);
    fl_store_free(f->st, p);
    /* NULL JSON arguments are the documented defaults. */
    STORE_OK(f->st, fl_store_population_update_config(f->st, f->pop, NULL, 1.0, 0, NULL));
    expect_pop(f, f->pop, "{}", 1.0, 0, "[]");
    /* It survives closing and reopening the store. */
    fl_store_close(f->st);
    f->st = store_open_ok(f->dir.path, NULL);
    expect_pop(f, f->pop, "{}", 1.0, 0, "[]");
}

static void test_update_refusals_change_nothing(void **state) {
    struct fixture *f = *state;
    const char *cfg = "{\"lr\":0.1}", *regs = "[\"eu\"]";
    assert_int_equal(fl_store_population_update_config(NULL, f->pop, "{}", 1, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_update_config(f->st, 0, "{}", 1, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{}", 0, 0, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f->st), "epsilon"));
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{}", INFINITY, 0, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{}", 1, 1.0, NULL),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_store_errmsg(f->st), "delta"));
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{\"lr\":", 1, 0, NULL),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{}", 1, 0, "[1]"),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{}", 1, 0, "\"eu\""),
                     FL_ERR_FORMAT);
    assert_int_equal(fl_store_population_update_config(f->st, f->pop + 100, "{}", 1, 0, NULL),
                     FL_ERR_NOT_FOUND);
    expect_pop(f, f->pop, cfg, 8.0, 1e-6, regs);
    /* A CLOSED population's settings are final. */
    STORE_OK(f->st, fl_store_population_set_state(f->st, f->pop, FL_STORE_POPULATION_CLOSED));
    assert_int_equal(fl_store_population_update_config(f->st, f->pop, "{}", 1, 0, NULL),
                     FL_ERR_STATE);
    assert_non_null(strstr(fl_store_errmsg(f->st), "closed"));
    expect_pop(f, f->pop, cfg, 8.0, 1e-6, regs);
}

/* The coordinator's pattern: the audit entry and the row change in one transaction. A
 * failing audit append rolled back leaves the row as it was; a committed group changes
 * both. */
static void test_update_with_audit_entry(void **state) {
    struct fixture *f = *state;
    int64_t n0 = 0, n1 = 0, n2 = 0;
    STORE_OK(f->st, fl_store_audit_size(f->st, &n0));
    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_population_update_config(f->st, f->pop, "{\"lr\":0.2}", 2.0, 1e-6,
                                                      "[]"));
    /* An epsilon the log cannot state: refused, and the caller rolls the group back. */
    assert_int_equal(fl_store_audit_append_config(f->st, NULL, f->pop, "{\"lr\":0.2}", 1e-12,
                                                  1e-6, "[]"),
                     FL_ERR_MISUSE);
    STORE_OK(f->st, fl_store_rollback(f->st));
    expect_pop(f, f->pop, "{\"lr\":0.1}", 8.0, 1e-6, "[\"eu\"]");
    STORE_OK(f->st, fl_store_audit_size(f->st, &n1));
    assert_int_equal(n1, n0);

    STORE_OK(f->st, fl_store_begin(f->st));
    STORE_OK(f->st, fl_store_audit_append_config(f->st, NULL, f->pop, "{\"lr\":0.2}", 2.0, 1e-6,
                                                 "[]"));
    STORE_OK(f->st, fl_store_population_update_config(f->st, f->pop, "{\"lr\":0.2}", 2.0, 1e-6,
                                                      "[]"));
    STORE_OK(f->st, fl_store_commit(f->st));
    expect_pop(f, f->pop, "{\"lr\":0.2}", 2.0, 1e-6, "[]");
    STORE_OK(f->st, fl_store_audit_size(f->st, &n2));
    /* population_created (first entry for it) and config_changed. */
    assert_int_equal(n2, n0 + 2);
}

static void test_list(void **state) {
    struct fixture *f = *state;
    fl_store_population *arr = NULL;
    size_t n = 99;
    assert_int_equal(fl_store_population_list(f->st, NULL, &n), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_list(f->st, &arr, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_list(NULL, &arr, &n), FL_ERR_MISUSE);
    STORE_OK(f->st, fl_store_population_list(f->st, &arr, &n));
    assert_int_equal(n, 1);
    assert_string_equal(arr[0].name, "keyboard");
    assert_string_equal(arr[0].config_json, "{\"lr\":0.1}");
    fl_store_free(f->st, arr);

    int64_t b = 0, c = 0;
    STORE_OK(f->st, fl_store_population_create(f->st, &b, "speech", "{\"k\":1}", 3.0, 0, NULL));
    STORE_OK(f->st, fl_store_population_create(f->st, &c, "vision", NULL, 1e9, 0, "[\"us\"]"));
    STORE_OK(f->st, fl_store_population_set_state(f->st, c, FL_STORE_POPULATION_CLOSED));
    /* A gap in the ids (a population row removed by hand): the listing goes on past it,
     * where a walk of ids from 1 would stop. */
    fl_store_close(f->st);
    sqlite3 *db = store_raw_open(f->dir.path);
    char sql[128];
    snprintf(sql, sizeof(sql), "DELETE FROM populations WHERE id = %lld", (long long)b);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    f->st = store_open_ok(f->dir.path, NULL);
    STORE_OK(f->st, fl_store_population_list(f->st, &arr, &n));
    assert_int_equal(n, 2);
    assert_int_equal(arr[0].id, f->pop);
    assert_int_equal(arr[1].id, c);
    assert_string_equal(arr[1].name, "vision");
    assert_string_equal(arr[1].config_json, "{}");
    assert_string_equal(arr[1].allowed_regions_json, "[\"us\"]");
    assert_int_equal(arr[1].state, FL_STORE_POPULATION_CLOSED);
    fl_store_free(f->st, arr);
}

static void test_list_empty(void **state) {
    (void)state;
    struct store_tdir d;
    store_tdir_make(&d, "empty.db");
    fl_store *st = store_open_ok(d.path, NULL);
    fl_store_population *arr = (fl_store_population *)&d; /* must be reset to NULL */
    size_t n = 7;
    STORE_OK(st, fl_store_population_list(st, &arr, &n));
    assert_null(arr);
    assert_int_equal(n, 0);
    fl_store_close(st);
    store_tdir_rm(&d);
}

static void test_client_count(void **state) {
    struct fixture *f = *state;
    int64_t n = -1, other = 0;
    STORE_OK(f->st, fl_store_population_client_count(f->st, f->pop, &n));
    assert_int_equal(n, 0);
    STORE_OK(f->st, fl_store_population_create(f->st, &other, "speech", NULL, 1.0, 0, NULL));
    static const uint8_t tok[FL_STORE_TOKEN_MIN_BYTES] = "0123456789abcdef";
    STORE_OK(f->st, fl_store_client_enroll(f->st, "c1", tok, sizeof(tok), "eu", f->pop));
    STORE_OK(f->st, fl_store_client_enroll(f->st, "c2", tok, sizeof(tok), "eu", f->pop));
    STORE_OK(f->st, fl_store_client_enroll(f->st, "c3", tok, sizeof(tok), "eu", other));
    STORE_OK(f->st, fl_store_population_client_count(f->st, f->pop, &n));
    assert_int_equal(n, 2);
    STORE_OK(f->st, fl_store_population_client_count(f->st, other, &n));
    assert_int_equal(n, 1);
    assert_int_equal(fl_store_population_client_count(f->st, other + 1, &n), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_population_client_count(f->st, 0, &n), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_client_count(f->st, f->pop, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_population_client_count(NULL, f->pop, &n), FL_ERR_MISUSE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_update_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_refusals_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_with_audit_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test(test_list_empty),
        cmocka_unit_test_setup_teardown(test_client_count, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
