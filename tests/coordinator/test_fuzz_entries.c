/* The validation entry points the fuzzers drive (tests/fuzz/coord_bodies.c): the check-in
 * body and the population config parsed from raw bytes without a coordinator, answering the
 * HTTP status the endpoint would. Bytes that are not JSON, JSON that is not an object, an
 * invalid field and a valid body each get their status; the corpus replays cover the rest. */
#include <stdint.h>
#include <string.h>

#include "fl_test.h"

/* Internal (coordinator/src/coord_internal.h), linked from the static library. */
int fl__coord_fuzz_checkin(const uint8_t *b, size_t n);
int fl__coord_fuzz_population(const uint8_t *b, size_t n);

static int checkin(const char *s) {
    return fl__coord_fuzz_checkin((const uint8_t *)s, strlen(s));
}

static int population(const char *s) {
    return fl__coord_fuzz_population((const uint8_t *)s, strlen(s));
}

static void test_checkin_bodies(void **state) {
    (void)state;
    assert_int_equal(checkin("{\"region\":"), 400);
    assert_int_equal(checkin("[1,2]"), 400);
    assert_int_equal(checkin(""), 400);
    assert_int_equal(checkin("{\"region\":\"EU\"}"), 400); /* no eligibility */
    assert_int_equal(checkin("{\"region\":\"EU\",\"region\":\"US\"}"), 400); /* duplicate */
    assert_int_equal(checkin("{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                             "\"unmetered\":false,\"idle\":true,\"battery_pct\":40,"
                             "\"examples\":12},\"capabilities\":{\"secagg\":true,"
                             "\"max_model_bytes\":1000}}"),
                     200);
}

static void test_population_configs(void **state) {
    (void)state;
    assert_int_equal(population("not json"), 400);
    assert_int_equal(population("[\"name\"]"), 400);
    assert_int_equal(population("{\"name\":\"p\"}"), 400); /* no allowed_regions */
    assert_int_equal(population("{\"name\":\"p\",\"allowed_regions\":[\"EU\"],"
                                "\"selection\":{\"target\":0}}"),
                     400);
    assert_int_equal(population("{\"name\":\"p\",\"allowed_regions\":[\"EU\",\"*\"],"
                                "\"strategy\":{\"name\":\"fedyogi\"},"
                                "\"privacy\":{\"mode\":\"distributed\"}}"),
                     200);
    /* The secure minimum of 3 (seeds pop_secure_* and pop_plain_min1 in the corpus). */
    assert_int_equal(population("{\"name\":\"s\",\"allowed_regions\":[\"*\"],"
                                "\"selection\":{\"target\":5,\"min_participants\":2},"
                                "\"secagg\":{\"enabled\":true}}"),
                     400);
    assert_int_equal(population("{\"name\":\"s\",\"allowed_regions\":[\"*\"],"
                                "\"selection\":{\"target\":2}}"),
                     400);
    assert_int_equal(population("{\"name\":\"s\",\"allowed_regions\":[\"*\"],"
                                "\"selection\":{\"target\":3,\"min_participants\":3},"
                                "\"secagg\":{\"enabled\":true}}"),
                     200);
    assert_int_equal(population("{\"name\":\"p\",\"allowed_regions\":[\"*\"],"
                                "\"selection\":{\"target\":1,\"min_participants\":1},"
                                "\"secagg\":{\"enabled\":false}}"),
                     200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkin_bodies),
        cmocka_unit_test(test_population_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
