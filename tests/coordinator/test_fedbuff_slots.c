/* FedBuff participations over time (buffer.c, api.c checkin_buffered; docs/protocol.md
 * section 5.4): a device whose update is in the open buffer is told round_full until the
 * buffer is applied; an update posted after the participation's deadline (before any tick
 * dropped it) is 410 round_closed, an empty one 400; an expired participation's slot is
 * reused by the same device with a fresh participation id; when the buffer's table is full
 * of expired slots a check-in compacts it; devices still training carry over into the next
 * buffer, and the buffer of K updates yields the next model version. The ticker thread is
 * stopped: the test moves the clock and ticks itself. */
#include <sqlite3.h>

#include "coord_testkit.h"

enum { NDEV = 6 };

static const char *const CHECKIN =
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true},"
    "\"capabilities\":{\"secagg\":false}}";

static void stop_ticker(struct fx *f) {
    if (f->ticking) {
        atomic_store(&f->stop_ticker, true);
        pthread_join(f->ticker, NULL);
        f->ticking = false;
    }
}

static int setup(void **state) {
    fx_setup(state);
    stop_ticker(*state);
    return 0;
}

/* Checks device i in: returns the status word ("selected" or the retry reason); when
 * selected, its task is fetched and its update encoded. */
static void checkin(struct fx *f, struct tc *c, int i, char *word, size_t n) {
    struct resp r = http_json(f, "POST", "/v1/checkin", c->tok, CHECKIN);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    const char *st = json_string_value(json_object_get(j, "status"));
    if (strcmp(st, "selected") == 0) {
        snprintf(word, n, "selected");
        snprintf(c->pid, sizeof(c->pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        int64_t rid = json_integer_value(json_object_get(j, "round_id"));
        char path[96];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)rid);
        struct resp t = http_req(f, "GET", path, c->tok, NULL, NULL, 0, c->pid);
        assert_int_equal(t.status, 200);
        parse_task(&t, &c->task);
        resp_free(&t);
        encode(c, i);
    } else {
        snprintf(word, n, "%s", json_string_value(json_object_get(j, "reason")));
    }
    json_decref(j);
    resp_free(&r);
}

static struct resp post(struct fx *f, struct tc *c, bool empty) {
    uint8_t body[16 + 4 * 1024];
    size_t bl = plain_update_body(body, c->task.rid, c->words, c->task.vec_len, 4);
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c->task.rid);
    return http_req(f, "POST", path, c->tok, "application/octet-stream", empty ? NULL : body,
                    empty ? 0 : bl, c->pid);
}

static int64_t version_of(struct fx *f) {
    struct resp r = http_json(f, "GET", "/v1/admin/populations/fs", ADMIN_TOKEN, NULL);
    json_t *j = body_json(&r);
    int64_t v = json_integer_value(json_object_get(j, "model_version"));
    json_decref(j);
    resp_free(&r);
    return v;
}

static void later(struct fx *f, int64_t ms) {
    atomic_fetch_add(&f->now_ms, ms);
}

static void test_slots_over_time(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":3,\"max_concurrency\":2,"
                                          "\"max_staleness\":5,\"staleness_alpha\":1.0"};
    struct tc c[NDEV];
    setup_devices(f, &pc, c, NDEV);
    char w[32];
    /* Two train (max_concurrency 2); the third is turned away. */
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[1], 1, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[2], 2, w, sizeof(w));
    assert_string_equal(w, "round_full");
    /* Device 0's update is in the buffer: it waits for the next buffer. An empty post is
     * 400 and changes nothing. */
    struct resp r = post(f, &c[0], true);
    assert_error(&r, 400, "invalid_message");
    resp_free(&r);
    r = post(f, &c[0], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    later(f, 61 * 1000); /* also past the pace of every device so far */
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "round_full");
    /* Device 1's deadline (60 s) has passed; no tick dropped it yet: its post is late. */
    r = post(f, &c[1], false);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    /* It checks in again: its expired slot is reused with a fresh participation. */
    char old_pid[40];
    snprintf(old_pid, sizeof(old_pid), "%s", c[1].pid);
    checkin(f, &c[1], 1, w, sizeof(w));
    assert_string_equal(w, "selected");
    assert_string_not_equal(c[1].pid, old_pid);
    /* Devices 2 and 3 fill the table (cap = max_concurrency + K = 5 slots: 0, 1, 2, 3 and
     * the next); then all three trainers expire. */
    checkin(f, &c[2], 2, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[3], 3, w, sizeof(w));
    assert_string_equal(w, "round_full"); /* 1 and 2 train */
    later(f, 61 * 1000);
    fl_coord_tick(f->co); /* drops 1 and 2 */
    checkin(f, &c[3], 3, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[4], 4, w, sizeof(w));
    assert_string_equal(w, "selected"); /* the fifth slot */
    later(f, 61 * 1000);
    fl_coord_tick(f->co); /* drops 3 and 4: the table is full of expired slots */
    /* Device 5 needs a slot: the table is compacted (device 0's posted slot stays). */
    checkin(f, &c[5], 5, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[2], 2, w, sizeof(w));
    assert_string_equal(w, "selected");
    r = post(f, &c[5], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    assert_int_equal(version_of(f), 1);
    /* Device 4 comes back: its slot was compacted away; it gets a fresh one (only device 2
     * trains). */
    checkin(f, &c[4], 4, w, sizeof(w));
    assert_string_equal(w, "selected");
    /* The third update applies the buffer: version 2; device 4, still training, carries
     * over into the next buffer and its update (one version stale) counts there. */
    r = post(f, &c[2], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    assert_int_equal(version_of(f), 2);
    r = post(f, &c[4], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    later(f, 61 * 1000);
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "selected");
    assert_int_equal(c[0].task.model_version, 2);
    /* Stopping abandons the open buffer: a config_changed entry and the buffer's round
     * entry (abandoned: no client counted, so no regions) reach the audit log. */
    int64_t before = db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'round'");
    r = http_json(f, "POST", "/v1/admin/populations/fs/stop", ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'round'"),
                     before + 1);
    clients_free(c, NDEV);
}

/* A device still training when the buffer is applied carries over into the next one and
 * its update, one version stale, counts there. */
static void test_carry_over(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":3,"
                                          "\"max_staleness\":0"};
    struct tc c[4];
    setup_devices(f, &pc, c, 4);
    char w[32];
    for (int i = 0; i < 3; i++) {
        checkin(f, &c[i], i, w, sizeof(w));
        assert_string_equal(w, "selected");
    }
    for (int i = 0; i < 2; i++) {
        struct resp r = post(f, &c[i], false);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    assert_int_equal(version_of(f), 2);
    /* Device 2 trained on version 1; max_staleness 0: its update is too stale now. */
    struct resp r = post(f, &c[2], false);
    assert_error(&r, 410, "stale_update");
    resp_free(&r);
    /* Its status shows the buffer it now belongs to, still open. */
    json_t *st = round_status(f, &c[2], c[2].task.rid);
    assert_non_null(json_object_get(st, "state"));
    json_decref(st);
    clients_free(c, 4);
}


/* 40-bit arithmetic: 8-byte words, validated (range, norm) and folded like 4-byte ones; a
 * word at 2^40 is refused naming its coordinate. */
static void test_wide_words(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 40,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":2"};
    char *tok[2];
    setup_population(f, &pc, tok, 2);
    struct tc c[2];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 2; i++)
        c[i].tok = tok[i];
    char w[32];
    for (int i = 0; i < 2; i++) {
        checkin(f, &c[i], i, w, sizeof(w));
        assert_string_equal(w, "selected");
        assert_int_equal(c[i].task.bits, 40);
    }
    uint8_t body[16 + 8 * 1024];
    char path[96];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c[0].task.rid);
    size_t bl = plain_update_body(body, c[0].task.rid, c[0].words, c[0].task.vec_len, 8);
    body[16 + 5 * 8 + 5] = 0x01; /* coordinate 5 = 2^40 + ... */
    struct resp r =
        http_req(f, "POST", path, c[0].tok, "application/octet-stream", body, bl, c[0].pid);
    assert_error(&r, 400, "invalid_message");
    assert_non_null(strstr(r.body, "coordinate 5"));
    resp_free(&r);
    r = http_req(f, "POST", path, c[0].tok, "application/octet-stream", body, bl - 8, c[0].pid);
    assert_error(&r, 400, "invalid_message"); /* a word short */
    resp_free(&r);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)c[i].task.rid);
        bl = plain_update_body(body, c[i].task.rid, c[i].words, c[i].task.vec_len, 8);
        r = http_req(f, "POST", path, c[i].tok, "application/octet-stream", body, bl, c[i].pid);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    assert_int_equal(version_of(f), 2);
    clients_free(c, 2);
}


/* Who may post into a buffer, and erasure while a buffer is open: a wrong participation id
 * or a round id the device was never given is 403 not_a_participant; a training device
 * cannot be erased (409) while one that is not in the buffer can. */
static void test_participants_and_erasure(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":1,\"max_concurrency\":2"};
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    char w[32];
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "selected");
    int64_t rid1 = c[0].task.rid;
    /* Device 0's update applies buffer 1 (K = 1); device 1 then trains in buffer 2. */
    struct resp r = post(f, &c[0], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    checkin(f, &c[1], 1, w, sizeof(w));
    assert_string_equal(w, "selected");
    assert_true(c[1].task.rid > rid1);
    /* Device 1 with a wrong participation id; device 2 (never selected) naming buffer 1. */
    struct tc fake = c[1];
    snprintf(fake.pid, sizeof(fake.pid), "00000000000000000000000000000000");
    r = post(f, &fake, false);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    struct tc other = c[1];
    other.tok = c[2].tok;
    other.task.rid = rid1;
    r = post(f, &other, false);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    /* Device 1's update applies buffer 2: buffer 1 is now older than the last one kept.
     * Naming it (or a buffer not yet opened) is still refused. */
    r = post(f, &c[1], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    r = post(f, &other, false);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    other.task.rid = 9999;
    r = post(f, &other, false);
    assert_error(&r, 410, "round_closed");
    resp_free(&r);
    checkin(f, &c[1], 1, w, sizeof(w)); /* trains again, in buffer 3 */
    assert_string_equal(w, "selected");
    /* Erasure: device 1 trains in the open buffer (409); device 2 is in none (200). */
    char path[96];
    snprintf(path, sizeof(path), "/v1/admin/clients/%.16s/erase", c[1].tok + 4);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_error(&r, 409, "conflict");
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/admin/clients/%.16s/erase", c[2].tok + 4);
    r = http_json(f, "POST", path, ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    clients_free(c, 3);
}


/* An expired device coming back while max_concurrency others train: its old slot is kept
 * for it but it waits (round_full); when the buffer is applied, expired, dropped and
 * contributed participations stay behind and only live ones carry over. */
static void test_expired_waits(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":2,\"max_concurrency\":2"};
    struct tc c[5];
    setup_devices(f, &pc, c, 5);
    char w[32];
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "selected");
    later(f, 61 * 1000);
    fl_coord_tick(f->co); /* device 0 expired */
    checkin(f, &c[1], 1, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[2], 2, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "round_full"); /* 1 and 2 train */
    /* 1 posts; a minute on, 2 has expired (its late post is refused) and 3 and 4 train; 4
     * posts: the buffer (1, 4) is applied and 3, still training, carries over. */
    struct resp r = post(f, &c[1], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    later(f, 61 * 1000);
    checkin(f, &c[3], 3, w, sizeof(w));
    assert_string_equal(w, "selected");
    r = post(f, &c[2], false);
    assert_error(&r, 410, "round_closed"); /* 2's deadline passed meanwhile */
    resp_free(&r);
    checkin(f, &c[4], 4, w, sizeof(w));
    assert_string_equal(w, "selected");
    r = post(f, &c[4], false);
    assert_int_equal(r.status, 202);
    resp_free(&r);
    assert_int_equal(version_of(f), 2);
    r = post(f, &c[3], false); /* carried over into the next buffer */
    assert_int_equal(r.status, 202);
    resp_free(&r);
    clients_free(c, 5);
}


/* A buffer's audit entry counts its contributors by region (here EU and US), not the
 * devices still training in it. */
static void test_regions_of_contributors(void **state) {
    struct fx *f = *state;
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":3,\"max_concurrency\":4"};
    char *tok[3];
    setup_population(f, &pc, tok, 3); /* EU */
    /* One more device, in the US (a fresh enrollment token). */
    struct resp r = http_json(f, "POST", "/v1/admin/populations/fs/enrollment-token",
                              ADMIN_TOKEN, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"fs\",\"region\":\"US\"}");
    assert_int_equal(r.status, 201);
    j = body_json(&r);
    struct tc c[4];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    c[3].tok = strdup(json_string_value(json_object_get(j, "client_token")));
    json_decref(j);
    resp_free(&r);
    free(etok);
    char w[32];
    for (int i = 0; i < 4; i++) {
        checkin(f, &c[i], i, w, sizeof(w));
        assert_string_equal(w, "selected");
    }
    int64_t rounds = db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'round'");
    static const int order[3] = {0, 3, 1}; /* EU, US, EU; device 2 still trains */
    for (int i = 0; i < 3; i++) {
        r = post(f, &c[order[i]], false);
        assert_int_equal(r.status, 202);
        resp_free(&r);
    }
    assert_int_equal(version_of(f), 2);
    assert_int_equal(db_int(f, "SELECT count(*) FROM audit_entries WHERE type = 'round'"),
                     rounds + 1);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT data FROM audit_entries WHERE type = 'round' "
                                            "ORDER BY seq DESC LIMIT 1", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *data = (const char *)sqlite3_column_text(st, 0);
    assert_non_null(strstr(data, "\"EU\":2"));
    assert_non_null(strstr(data, "\"US\":1"));
    sqlite3_finalize(st);
    sqlite3_close(db);
    clients_free(c, 4);
}

static void count_sums(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                       uint32_t count, const float *delta, size_t dim) {
    (void)round_id;
    (void)sum;
    (void)vec_len;
    (void)count;
    (void)delta;
    (void)dim;
    (*(int *)user)++;
}

/* A participation carried across two buffers posts under the id of the first (older than
 * the last buffer kept): its body limit and its participation are still found, and its
 * update counts (two versions stale). The test hook, which hands out synchronous rounds'
 * sums, is not called for buffers (they have no secure sum). */
static void test_two_buffers_later(void **state) {
    struct fx *f = *state;
    int sums = 0;
    fl__coord_debug_hook_set(f->co, count_sums, &sums);
    struct popcfg pc = {.name = "fs", .target = 10, .min = 1, .secagg = false, .mode = "none",
                        .strategy = "fedbuff", .bits = 32,
                        .strategy_extra = "\"buffer_size\":1,\"max_concurrency\":2"};
    char *tok[3];
    setup_population(f, &pc, tok, 3);
    struct tc c[3];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 3; i++)
        c[i].tok = tok[i];
    char w[32];
    checkin(f, &c[0], 0, w, sizeof(w));
    assert_string_equal(w, "selected");
    checkin(f, &c[1], 1, w, sizeof(w));
    assert_string_equal(w, "selected");
    struct resp r = post(f, &c[0], false); /* buffer 1 applied: version 2 */
    assert_int_equal(r.status, 202);
    resp_free(&r);
    checkin(f, &c[2], 2, w, sizeof(w));
    assert_string_equal(w, "selected");
    r = post(f, &c[2], false); /* buffer 2 applied: version 3 */
    assert_int_equal(r.status, 202);
    resp_free(&r);
    assert_int_equal(version_of(f), 3);
    /* A second FedBuff population with no open buffer takes part in the body-limit search. */
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"idle\",\"allowed_regions\":[\"*\"],\"strategy\":{\"name\":"
                  "\"fedbuff\"},\"secagg\":{\"enabled\":false}}");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    char sp[96];
    snprintf(sp, sizeof(sp), "/v1/rounds/%lld/secagg/share", (long long)c[1].task.rid);
    r = http_req(f, "POST", sp, c[1].tok, "application/octet-stream", "x", 1, c[1].pid);
    assert_error(&r, 404, "not_found"); /* buffers have no secagg phases */
    resp_free(&r);
    r = post(f, &c[1], false); /* still under buffer 1's id */
    assert_int_equal(r.status, 202);
    resp_free(&r);
    assert_int_equal(version_of(f), 4);
    assert_int_equal(sums, 0);
    clients_free(c, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slots_over_time, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_carry_over, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_wide_words, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_participants_and_erasure, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_expired_waits, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_regions_of_contributors, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_two_buffers_later, setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
