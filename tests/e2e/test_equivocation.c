/* Server equivocation is caught (docs/protocol.md 5.5, docs/secagg.md "Context"): real SDK
 * clients against the REAL coordinator, in-process on 127.0.0.1, secure aggregation on,
 * central DP. A test-only coordinator hook (fl__coord_debug_task_model_set; never set in
 * production) plays a coordinator that gives two of the six selected devices a different,
 * validly signed model version in their round task. Every device binds the SHA-256 of the
 * model it verified, with the round's session id, into its secagg context; devices on
 * different models cannot open each other's shares, so every device (complete graph) stops
 * before its masked input exists, the round is abandoned at the masked deadline with a
 * logged reason, no model version is published and no privacy budget is spent. The same
 * devices then complete an honest round with the hook removed (the context does not get
 * in the way of a normal round, and the test can tell the two apart). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "sdk_fixture.h"

#define N 6

typedef int64_t (*task_model_fn)(void *user, int64_t round_id, uint32_t client_index,
                                 int64_t base_version);
void fl__coord_debug_task_model_set(fl_coord *co, task_model_fn fn, void *user);

struct equiv {
    int64_t other;  /* the version the victims are given */
    int calls;      /* tasks built */
    int forged;     /* tasks that named the other version */
};

/* Devices with secagg index 0 and 1 are told to train on another model version. */
static int64_t equivocate(void *user, int64_t round_id, uint32_t client_index,
                          int64_t base_version) {
    struct equiv *e = user;
    (void)round_id;
    e->calls++;
    if (client_index < 2 && e->other != base_version) {
        e->forged++;
        return e->other;
    }
    return 0;
}

static int64_t db_count(struct sfx *f, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* The population's current model version (admin API). */
static int64_t current_version(struct sfx *f) {
    char out[16384];
    assert_int_equal(sfx_admin(f, "GET", "/v1/admin/populations/eq", NULL, NULL, 0, out,
                               sizeof(out)), 200);
    const char *p = strstr(out, "\"model_version\":");
    assert_non_null(p);
    return strtoll(p + strlen("\"model_version\":"), NULL, 10);
}

/* State and reason of the population's newest round (admin API), copied into out. */
static void last_round(struct sfx *f, char *state, size_t n, char *reason, size_t rn) {
    char out[16384];
    assert_int_equal(sfx_admin(f, "GET", "/v1/admin/populations/eq/rounds?limit=1", NULL, NULL,
                               0, out, sizeof(out)), 200);
    const char *p = strstr(out, "\"state\":\"");
    assert_non_null(p);
    snprintf(state, n, "%.*s", (int)strcspn(p + 9, "\""), p + 9);
    p = strstr(out, "\"reason\":\"");
    snprintf(reason, rn, "%.*s", p ? (int)strcspn(p + 10, "\"") : 0, p ? p + 10 : "");
}

struct ended {
    struct sdev *d;
    int rounds;
};

/* Every device ended `rounds` rounds (completed or given up). */
static bool all_ended(void *u) {
    struct ended *e = u;
    for (int i = 0; i < N; i++) {
        fl_client_stats cs;
        sdev_stats(&e->d[i], &cs);
        if (cs.rounds_completed + cs.rounds_failed < (uint64_t)e->rounds)
            return false;
    }
    return true;
}

static void test_equivocation_abandons_round(void **state) {
    (void)state;
    struct sfx *f = sfx_start(false);
    size_t mlen;
    uint8_t *m = sfx_model(&mlen);
    char etok[256], out[16384];
    const char *json =
        "{\"name\":\"eq\",\"allowed_regions\":[\"EU\"],"
        "\"selection\":{\"target\":6,\"over_selection\":1.0,\"min_participants\":4,"
        "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":1,\"max_retry_s\":2},"
        "\"deadlines_s\":{\"advertise\":20,\"share\":20,\"masked\":20,\"unmask\":20},"
        "\"training\":{\"epochs\":1,\"batch_size\":8,\"learning_rate\":0.05,"
        "\"max_examples\":40},"
        "\"update\":{\"weighting\":\"uniform\"},\"strategy\":{\"name\":\"fedavg\"},"
        "\"secagg\":{\"enabled\":true,\"neighbors\":5,\"threshold_fraction\":0.5},"
        "\"privacy\":{\"mode\":\"central\",\"clip_norm\":1.0,\"noise_multiplier\":1.0,"
        "\"epsilon_budget\":1000,\"delta\":1e-5,\"population_size\":1000}}";
    sfx_population(f, json, m, mlen, etok, sizeof(etok));
    int64_t v_first = current_version(f);
    /* A second, validly signed version of the same architecture (other weights). */
    uint32_t sizes[] = {SFX_IN, SFX_HID, SFX_CLASSES};
    uint8_t *m2 = malloc(mlen);
    size_t m2len = 0;
    assert_non_null(m2);
    assert_int_equal(fl_client_model_init(m2, mlen, &m2len, sizes, 3, 77, NULL), FL_OK);
    assert_int_equal(sfx_admin(f, "POST", "/v1/admin/populations/eq/models",
                               "application/octet-stream", m2, m2len, out, sizeof(out)), 201);
    int64_t base = current_version(f);
    assert_true(base != v_first);
    int64_t versions0 = db_count(f, "SELECT count(*) FROM models");
    struct equiv e = {v_first, 0, 0};
    fl__coord_debug_task_model_set(f->co, equivocate, &e);

    struct sdev d[N];
    memset(d, 0, sizeof(d));
    for (int i = 0; i < N; i++) {
        struct sdev_opts o = {.population = "eq", .etok = etok, .n_examples = 20};
        assert_int_equal(sdev_open(&d[i], f, i, &o), FL_OK);
        d[i].max_rounds = 1;
    }
    struct ended en = {d, 1};
    int passes = sdev_drive(f, d, N, all_ended, &en, 2000, 200);
    assert_true(passes < 2000);
    assert_int_equal(e.forged, 2);
    /* Every device gave the round up, on a share that did not open (FL_ERR_CRYPTO). */
    for (int i = 0; i < N; i++) {
        fl_client_stats cs;
        sdev_stats(&d[i], &cs);
        if (cs.last_error != FL_ERR_CRYPTO)
            fprintf(stderr, "device %d: %s (%s)\n", i, fl_status_name(cs.last_error),
                    fl_client_errmsg(d[i].c));
        assert_int_equal(cs.rounds_completed, 0);
        assert_int_equal(cs.rounds_failed, 1);
        assert_int_equal(cs.last_error, FL_ERR_CRYPTO);
    }
    /* The coordinator abandons the round at the masked deadline: no masked input came. */
    char st[32], why[256];
    for (int k = 0; k < 50; k++) {
        last_round(f, st, sizeof(st), why, sizeof(why));
        if (strcmp(st, "abandoned") == 0)
            break;
        sfx_advance(f, 5000);
    }
    fprintf(stderr, "equivocating round: %s (%s)\n", st, why);
    assert_string_equal(st, "abandoned");
    assert_non_null(strstr(why, "masked"));
    /* Nothing published, nothing charged, nothing aggregated. */
    assert_int_equal(current_version(f), base);
    assert_int_equal(db_count(f, "SELECT count(*) FROM models"), versions0);
    assert_int_equal(db_count(f, "SELECT count(*) FROM privacy_ledger"), 0);
    assert_false(sfx_aggregated(f));

    /* The same devices, an honest coordinator: the next round completes. */
    fl__coord_debug_task_model_set(f->co, NULL, NULL);
    for (int i = 0; i < N; i++)
        d[i].max_rounds = 2;
    en.rounds = 2;
    passes = sdev_drive(f, d, N, all_ended, &en, 4000, 200);
    assert_true(passes < 4000);
    assert_true(sfx_aggregated(f));
    last_round(f, st, sizeof(st), why, sizeof(why));
    assert_string_equal(st, "completed");
    assert_int_equal(db_count(f, "SELECT count(*) FROM privacy_ledger"), 1);
    assert_true(current_version(f) > base);
    for (int i = 0; i < N; i++) {
        fl_client_stats cs;
        sdev_stats(&d[i], &cs);
        assert_int_equal(cs.rounds_completed, 1);
    }
    for (int i = 0; i < N; i++)
        sdev_close(&d[i]);
    sfx_stop(f);
    free(m);
    free(m2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivocation_abandons_round),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
