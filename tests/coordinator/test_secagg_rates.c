/* secagg.dropout_rate and secagg.adversarial_rate: a population's expected rates of
 * devices that drop and that collude with the server, which size the SecAgg+ graph the
 * coordinator derives for each round (secagg.neighbors 0) as fl_secagg_params_derive does.
 * Runs the coordinator in-process (coord_testkit.c). */
#include "coord_testkit.h"
#include "flotilla/secagg.h"

/* secagg.dropout_rate and secagg.adversarial_rate size a derived graph (neighbors 0) as
 * fl_secagg_params_derive does for the round's n: at n = 10 the default 5% gives k = 2, and
 * 20% expected dropouts k = 4 (each client's secrets survive more silent neighbours). Values
 * outside 0..0.5 are refused naming the field. */
static void test_rates_size_the_graph(void **state) {
    struct fx *f = *state;
    enum { N = 10 };
    static const double rates[] = {0.0, 0.2};
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof(name), "tgr%d", i);
        struct popcfg pc = {.name = name, .target = N, .min = 3, .secagg = true,
                            .neighbors = 0, .mode = "none"};
        struct popsel sel = {.dropout_rate = rates[i]};
        struct tc c[N];
        setup_devices_sel(f, &pc, &sel, c, N);
        int64_t rid;
        checkin_all(f, c, N, &rid);
        fetch_tasks(f, c, N, rid);
        uint32_t k = 0, t = 0;
        assert_int_equal(fl_secagg_params_derive(&k, &t, N, 0.05, i ? 0.2 : 0.05, 0), FL_OK);
        assert_int_equal(c[0].task.k, k);
        assert_int_equal(c[0].task.t, t);
        assert_int_equal(c[0].task.k, i ? 4 : 2);
        clients_free(c, N);
        fx_advance(f, 200000); /* the round ends at its deadlines */
    }
    static const char *const bad[] = {"\"dropout_rate\":0.6", "\"dropout_rate\":-0.1",
                                      "\"adversarial_rate\":\"x\"",
                                      "\"adversarial_rate\":0.51"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"name\":\"tgb%zu\",\"allowed_regions\":[\"*\"],"
                 "\"update\":{\"tensors\":[\"w\"]},\"secagg\":{%s}}", i, bad[i]);
        struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
        if (r.status != 400 || !strstr(r.body, "secagg."))
            fail_msg("case %zu: %ld %s", i, r.status, r.body);
        resp_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rates_size_the_graph, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
