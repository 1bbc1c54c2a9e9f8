/* The secure minimum of a population's selection: the secagg server needs n >= 3 clients, so
 * a population with secure aggregation on (semi-honest or active, FedBuff with secagg
 * included) is refused at creation and at PATCH with a 400 naming the field when
 * selection.min_participants or selection.target is below 3, and nothing is stored; 3 is
 * accepted, and a minimum left to its default is raised to 3. Populations without secure
 * aggregation keep minimums of 1 and 2. A secure population stored with a minimum of 2 (by
 * a version before this rule) still loads, with its minimum raised to 3 in memory, and its
 * rounds never start with fewer than 3 devices: at the forming deadline a round of 2 is
 * extended, then abandoned "too few clients", while one of 3 starts. Populations do not
 * come from the configuration file (it refuses a "populations" key), so creation, PATCH and
 * loading are the only paths. Runs the coordinator in-process (coord_testkit.c). */
#include <sodium.h>
#include <stdio.h>
#include <unistd.h>

#include "coord_testkit.h"

/* ---- helpers ---- */

/* POST /v1/admin/populations with {"name": name, "allowed_regions": ["*"], extra}. */
static struct resp create(struct fx *f, const char *name, const char *extra) {
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],\"update\":{\"tensors\":[\"w\"]},%s}",
             name, extra);
    return http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN, body);
}

/* Asserts a 400 invalid_field naming field whose message contains want. */
static void assert_refused(struct resp *r, const char *field, const char *want) {
    if (r->status != 400)
        fprintf(stderr, "expected 400 on %s: %ld %s\n", field, r->status, r->body);
    assert_error(r, 400, "invalid_field");
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "field")), field);
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!strstr(msg, want))
        fprintf(stderr, "message: %s\nwanted: %s\n", msg, want);
    assert_non_null(strstr(msg, want));
    json_decref(j);
    resp_free(r);
}

/* The population's selection.<key> as GET /v1/admin/populations/{name} shows it. */
static int64_t sel_int(struct fx *f, const char *name, const char *key) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_req(f, "GET", path, ADMIN_TOKEN, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    int64_t v = json_integer_value(
        json_object_get(json_object_get(json_object_get(j, "config"), "selection"), key));
    json_decref(j);
    resp_free(&r);
    return v;
}

/* Asserts a 201 and returns nothing else of it. */
static void assert_created(struct resp *r) {
    if (r->status != 201)
        fprintf(stderr, "expected 201: %ld %s\n", r->status, r->body);
    assert_int_equal(r->status, 201);
    resp_free(r);
}

/* ---- creation ---- */

/* Every secure flavour with a minimum or target below 3: 400 naming the field, nothing
 * stored. */
static void test_secure_below_three_refused(void **state) {
    struct fx *f = *state;
    const char *want2 = "selection.min_participants: secure aggregation needs at least 3 "
                        "participants, got 2";
    /* secagg on explicitly, and by default (no secagg section) */
    struct resp r = create(f, "s",
                           "\"selection\":{\"target\":5,\"min_participants\":2},"
                           "\"secagg\":{\"enabled\":true}");
    assert_refused(&r, "selection.min_participants", want2);
    r = create(f, "s", "\"selection\":{\"target\":5,\"min_participants\":2}");
    assert_refused(&r, "selection.min_participants", want2);
    r = create(f, "s", "\"selection\":{\"target\":5,\"min_participants\":1}");
    assert_refused(&r, "selection.min_participants", "at least 3 participants, got 1");
    /* with distributed DP, and FedBuff with secagg on (synchronous secure rounds) */
    r = create(f, "s",
               "\"selection\":{\"target\":5,\"min_participants\":2},"
               "\"privacy\":{\"mode\":\"distributed\"}");
    assert_refused(&r, "selection.min_participants", want2);
    r = create(f, "s",
               "\"selection\":{\"target\":5,\"min_participants\":2},"
               "\"strategy\":{\"name\":\"fedbuff\"},\"secagg\":{\"enabled\":true}");
    assert_refused(&r, "selection.min_participants", want2);
    /* active mode (consistency check under a device authority's key) */
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_keypair(pk, sk);
    char hex[2 * sizeof(pk) + 1], extra[512];
    sodium_bin2hex(hex, sizeof(hex), pk, sizeof(pk));
    snprintf(extra, sizeof(extra),
             "\"selection\":{\"target\":5,\"min_participants\":2},"
             "\"secagg\":{\"enabled\":true,\"consistency_check\":true,\"authority_key\":\"%s\"}",
             hex);
    r = create(f, "s", extra);
    assert_refused(&r, "selection.min_participants", want2);
    /* a target below 3: named when the minimum is defaulted, mentioned when it is not */
    r = create(f, "s", "\"selection\":{\"target\":2}");
    assert_refused(&r, "selection.target",
                   "selection.target: secure aggregation needs at least 3 participants, got 2");
    r = create(f, "s", "\"selection\":{\"target\":1}");
    assert_refused(&r, "selection.target", "got 1");
    r = create(f, "s", "\"selection\":{\"target\":2,\"min_participants\":2}");
    assert_refused(&r, "selection.min_participants", "got 2 (selection.target too)");
    assert_int_equal(db_int(f, "SELECT count(*) FROM populations"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries"), 0);

    /* 3 is enough, for each of them. */
    r = create(f, "s3",
               "\"selection\":{\"target\":3,\"min_participants\":3},"
               "\"secagg\":{\"enabled\":true}");
    assert_created(&r);
    assert_int_equal(sel_int(f, "s3", "min_participants"), 3);
    r = create(f, "d3",
               "\"selection\":{\"target\":5,\"min_participants\":3},"
               "\"privacy\":{\"mode\":\"distributed\"}");
    assert_created(&r);
    r = create(f, "fb3",
               "\"selection\":{\"target\":5,\"min_participants\":3},"
               "\"strategy\":{\"name\":\"fedbuff\"},\"secagg\":{\"enabled\":true}");
    assert_created(&r);
    snprintf(extra, sizeof(extra),
             "\"selection\":{\"target\":5,\"min_participants\":3},"
             "\"secagg\":{\"enabled\":true,\"consistency_check\":true,\"authority_key\":\"%s\"}",
             hex);
    r = create(f, "a3", extra);
    assert_created(&r);
    /* A defaulted minimum is 80% of the target, at least 3 with secure aggregation. */
    r = create(f, "def3", "\"selection\":{\"target\":3}");
    assert_created(&r);
    assert_int_equal(sel_int(f, "def3", "min_participants"), 3);
    r = create(f, "def10", "\"selection\":{\"target\":10}");
    assert_created(&r);
    assert_int_equal(sel_int(f, "def10", "min_participants"), 8);
    assert_int_equal(db_int(f, "SELECT count(*) FROM populations"), 6);
    sodium_memzero(sk, sizeof(sk));
}

/* Without secure aggregation a minimum (and target) of 1 or 2 is still accepted, in
 * synchronous plain rounds and in asynchronous FedBuff. */
static void test_plain_small_accepted(void **state) {
    struct fx *f = *state;
    struct resp r = create(f, "p1",
                           "\"selection\":{\"target\":1,\"min_participants\":1},"
                           "\"secagg\":{\"enabled\":false}");
    assert_created(&r);
    r = create(f, "p2",
               "\"selection\":{\"target\":2,\"min_participants\":2},"
               "\"secagg\":{\"enabled\":false}");
    assert_created(&r);
    r = create(f, "pd", "\"selection\":{\"target\":2},\"secagg\":{\"enabled\":false}");
    assert_created(&r);
    assert_int_equal(sel_int(f, "pd", "min_participants"), 1);
    r = create(f, "fb",
               "\"selection\":{\"target\":10,\"min_participants\":1},"
               "\"strategy\":{\"name\":\"fedbuff\"},\"secagg\":{\"enabled\":false}");
    assert_created(&r);
    r = create(f, "pc",
               "\"selection\":{\"target\":2,\"min_participants\":2},"
               "\"secagg\":{\"enabled\":false},\"privacy\":{\"mode\":\"central\"}");
    assert_created(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM populations"), 5);
}

/* ---- PATCH ---- */

static long patch(struct fx *f, const char *name, const char *json, struct resp *out) {
    char path[128];
    snprintf(path, sizeof(path), "/v1/admin/populations/%s", name);
    struct resp r = http_json(f, "PATCH", path, ADMIN_TOKEN, json);
    long st = r.status;
    if (out)
        *out = r;
    else
        resp_free(&r);
    return st;
}

/* PATCH validates the merged config like a creation: a secure population's minimum cannot
 * go below 3 (refused, nothing changed or logged), a plain one's can. */
static void test_patch_refused(void **state) {
    struct fx *f = *state;
    struct resp r = create(f, "sp", "\"selection\":{\"target\":4,\"min_participants\":3}");
    assert_created(&r);
    r = create(f, "pp",
               "\"selection\":{\"target\":4,\"min_participants\":3},"
               "\"secagg\":{\"enabled\":false}");
    assert_created(&r);
    int64_t entries = db_int(f, "SELECT count(*) FROM audit_entries");
    assert_int_equal(patch(f, "sp", "{\"selection\":{\"min_participants\":2}}", &r), 400);
    assert_refused(&r, "selection.min_participants",
                   "selection.min_participants: secure aggregation needs at least 3 "
                   "participants, got 2");
    assert_int_equal(patch(f, "sp", "{\"selection\":{\"target\":2,\"min_participants\":2}}", &r),
                     400);
    assert_refused(&r, "selection.min_participants", "(selection.target too)");
    assert_int_equal(patch(f, "sp", "{\"selection\":{\"target\":2}}", NULL), 400);
    assert_int_equal(sel_int(f, "sp", "min_participants"), 3);
    assert_int_equal(sel_int(f, "sp", "target"), 4);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries"), entries);
    /* 3 (and more) stays allowed; the plain population goes down to 1. */
    assert_int_equal(patch(f, "sp", "{\"selection\":{\"target\":3,\"min_participants\":3}}", NULL),
                     200);
    assert_int_equal(sel_int(f, "sp", "target"), 3);
    assert_int_equal(patch(f, "pp", "{\"selection\":{\"target\":1,\"min_participants\":1}}", NULL),
                     200);
    assert_int_equal(sel_int(f, "pp", "min_participants"), 1);
}

/* ---- stored configs and round forming ---- */

/* Checks in c[0..n) (all selected into one round) and returns the round. */
static int64_t checkin(struct fx *f, struct tc *c, int n) {
    int64_t rid = 0;
    checkin_all(f, c, n, &rid);
    return rid;
}

static const char *round_state(struct fx *f, int64_t rid, char *buf, size_t n, char *reason,
                               size_t rn) {
    json_t *j = admin_round(f, rid);
    snprintf(buf, n, "%s", json_string_value(json_object_get(j, "state")));
    const char *why = json_string_value(json_object_get(j, "reason"));
    snprintf(reason, rn, "%s", why ? why : "");
    json_decref(j);
    return buf;
}

/* A secure population stored with min_participants 2 (written before the rule; here edited
 * into the database) loads with its minimum raised to 3: a round that has only 2 devices at
 * the forming deadline is extended once, then abandoned for too few clients, never started
 * (the secagg server would refuse it). A round of 3 at the deadline starts. */
static void test_stored_min_raised(void **state) {
    struct fx *f = *state;
    enum { N = 5 };
    struct popcfg pc = {
        .name = "old", .target = 4, .min = 3, .secagg = true, .mode = "none", .bits = 32};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    fx_stop(f);
    db_exec(f, "UPDATE populations SET config_json = replace(config_json, "
               "'\"min_participants\":3', '\"min_participants\":2') WHERE name = 'old'");
    assert_int_equal(db_int(f, "SELECT count(*) FROM populations WHERE config_json LIKE "
                               "'%\"min_participants\":2%'"),
                     1);
    fx_start(f);
    assert_int_equal(sel_int(f, "old", "min_participants"), 3);

    char st[32], why[160];
    int64_t rid = checkin(f, c, 2);
    fx_advance(f, 61 * 1000); /* forming deadline: 2 < 3, extended once */
    assert_string_equal(round_state(f, rid, st, sizeof(st), why, sizeof(why)), "forming");
    fx_advance(f, 61 * 1000);
    assert_string_equal(round_state(f, rid, st, sizeof(st), why, sizeof(why)), "abandoned");
    assert_string_equal(why, "too few clients selected: 2 < 3");

    /* The next round: 3 devices at the deadline are enough, and it runs. */
    fx_advance(f, 61 * 1000);
    int64_t rid2 = checkin(f, c + 2, 3);
    assert_true(rid2 > rid);
    fx_advance(f, 61 * 1000);
    assert_string_equal(round_state(f, rid2, st, sizeof(st), why, sizeof(why)), "running");
    clients_free(c, N);
}

/* The configuration file carries no populations: a "populations" key is refused like any
 * unknown field, so the API and storage are the only ways a population config comes in. */
static void test_config_file_has_no_populations(void **state) {
    struct fx *f = *state;
    char path[192];
    snprintf(path, sizeof(path), "%s/with-pops.json", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"populations\":[{\"name\":\"p\",\"allowed_regions\":[\"*\"],"
          "\"selection\":{\"target\":2,\"min_participants\":2}}]}\n",
          fp);
    fclose(fp);
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    fl_coord_config_doc *doc = NULL;
    char err[256];
    assert_int_equal(fl_coord_config_load(&doc, &cfg, path, err, sizeof(err)), FL_ERR_FORMAT);
    assert_null(doc);
    assert_non_null(strstr(err, "'populations'"));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_secure_below_three_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_plain_small_accepted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_patch_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stored_min_raised, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_config_file_has_no_populations, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
