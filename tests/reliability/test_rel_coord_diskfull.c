/* A full disk under the real `flotilla-coordinator serve` (docs/reliability.md,
 * "Coordinator level"): writes are refused inside the request that needs them, health and
 * read endpoints stay up, and service resumes at the first request once space is freed.
 *
 * The test moves itself into a private mount namespace (unshare(CLONE_NEWNS) at the start
 * of main) and mounts a 4 MiB tmpfs under its temporary directory; the coordinator's
 * database lives there (its config, key and log stay outside, so the log keeps working).
 * A round of population "df" (plain updates, 4 devices, no DP: its model is predictable
 * exactly) completes first. In the second round, once every device is selected and has its
 * task, the test checkpoints the WAL to zero bytes (so that the next commit has to grow a
 * file) and fills the tmpfs with a filler file until write() fails with ENOSPC. Then:
 *
 *   - the devices post their updates; the last one triggers the aggregation, whose commit
 *     must fail: the request itself answers (no hang), the round ends abandoned with a
 *     reason naming the full disk, and nothing of it is stored;
 *   - a check-in that must create the next round and an admin model upload are refused
 *     inside their request (an error status, no row written);
 *   - /healthz, /readyz, /metrics, the round's status and a model download keep answering
 *     200 throughout;
 *   - the filler is removed and the very next check-in succeeds (no retry, no restart); the
 *     time from the removal to that answer is reported. The round then completes with the
 *     exact model. After SIGTERM the database passes integrity_check and the final state
 *     is checked with SQL.
 *
 * Needs root (a mount namespace and a tmpfs); otherwise exits 77 (ctest SKIP). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "coord_testkit.h"
#include "rel_coord.h"

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

enum { N = 4, SKIP = 77 };

struct dfull {
    struct fx *f;
    char disk[96];    /* the tmpfs mount point */
    char filler[160]; /* the file that fills it */
    bool mounted;
    struct tc dev[N];
    float cur[D];
    int64_t cur_version;
};

/* ---- the private tmpfs ---- */

static int ns_skip_reason(char *why, size_t n) {
    if (geteuid() != 0) {
        snprintf(why, n, "needs root (a private mount namespace and a tmpfs)");
        return 1;
    }
    /* The kernel ignores source and type for a propagation change; "none" rather than NULL
     * (Valgrind 3.19 reads the type as a string: "mount(type) points to unaddressable"). */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, n, "cannot make a private mount namespace: %s", strerror(errno));
        return 1;
    }
    return 0;
}

/* Writes the filler until the tmpfs refuses (ENOSPC), big chunks then small ones. Returns
 * the bytes written. */
static long long fill_disk(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    static uint8_t chunk[65536];
    memset(chunk, 0xA5, sizeof(chunk));
    long long total = 0;
    for (size_t sz = sizeof(chunk); sz >= 1; sz /= 16) {
        for (;;) {
            ssize_t w = write(fd, chunk, sz);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                assert_int_equal(errno, ENOSPC);
                break;
            }
            total += w;
        }
    }
    close(fd);
    return total;
}

/* ---- devices ---- */

static const char checkin_body[] =
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true}}";

/* Check-in of device i: its status and (when selected) participation id and round. */
static long checkin(struct dfull *t, int i, int64_t *rid) {
    struct resp r = http_json(t->f, "POST", "/v1/checkin", t->dev[i].tok, checkin_body);
    long st = r.status;
    if (st == 200) {
        json_t *j = body_json(&r);
        const char *s = json_string_value(json_object_get(j, "status"));
        if (!s || strcmp(s, "selected") != 0)
            fprintf(stderr, "check-in %d: %s\n", i, r.body);
        assert_string_equal(s, "selected");
        snprintf(t->dev[i].pid, sizeof(t->dev[i].pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        *rid = json_integer_value(json_object_get(j, "round_id"));
        json_decref(j);
    }
    resp_free(&r);
    return st;
}

static void tasks(struct dfull *t, int64_t rid) {
    fetch_tasks(t->f, t->dev, N, rid);
    for (int i = 0; i < N; i++)
        assert_int_equal(t->dev[i].task.model_version, t->cur_version);
}

/* Posts device i's plain update; returns the status (the request's latency in *lat_s). */
static long post_update(struct dfull *t, int i, int64_t rid, double *lat_s) {
    char path[96];
    uint8_t body[16 + 4 * 1024];
    snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    size_t len = rel_plain_body(&t->dev[i], body);
    double t0 = rel_mono_s();
    struct resp r =
        http_req(t->f, "POST", path, t->dev[i].tok, "application/octet-stream", body, len,
                 t->dev[i].pid);
    if (lat_s)
        *lat_s = rel_mono_s() - t0;
    long st = r.status;
    if (st != 202)
        fprintf(stderr, "update %d: %ld %s\n", i, st, r.body ? r.body : "");
    resp_free(&r);
    return st;
}

/* The round's state as devices see it: "completed", "abandoned", ... (caller frees) and
 * its reason. Polls until it is no longer running (bounded). */
static char *round_end(struct dfull *t, int64_t rid, char *reason, size_t rlen) {
    for (int k = 0; k < 250; k++) {
        json_t *o = round_status(t->f, &t->dev[0], rid);
        const char *s = json_string_value(json_object_get(o, "state"));
        if (s && (strcmp(s, "completed") == 0 || strcmp(s, "abandoned") == 0)) {
            char *out = strdup(s);
            const char *why = json_string_value(json_object_get(o, "reason"));
            if (!why)
                why = json_string_value(json_object_get(o, "abandon_reason"));
            snprintf(reason, rlen, "%s", why ? why : "");
            json_decref(o);
            return out;
        }
        json_decref(o);
        rel_sleep_ms(20);
    }
    fail_msg("round %lld did not end", (long long)rid);
    return NULL;
}

static long get_status(struct dfull *t, const char *path, const char *tok) {
    struct resp r = http_req(t->f, "GET", path, tok, NULL, NULL, 0, NULL);
    long st = r.status;
    resp_free(&r);
    return st;
}

/* Health and read endpoints: all 200. */
static void reads_up(struct dfull *t, int64_t rid) {
    char path[128];
    assert_int_equal(get_status(t, "/healthz", NULL), 200);
    assert_int_equal(get_status(t, "/readyz", NULL), 200);
    assert_int_equal(get_status(t, "/metrics", NULL), 200);
    snprintf(path, sizeof(path), "/v1/models/df/%lld", (long long)t->cur_version);
    assert_int_equal(get_status(t, path, t->dev[0].tok), 200);
    json_t *o = round_status(t->f, &t->dev[0], rid); /* asserts 200 */
    json_decref(o);
}

/* ---- the test ---- */

static int df_setup(void **state) {
    struct dfull *t = calloc(1, sizeof(*t));
    if (!t)
        return -1;
    t->f = fx_new();
    snprintf(t->disk, sizeof(t->disk), "%.64s/disk", t->f->dir);
    if (mkdir(t->disk, 0700) != 0)
        return -1;
    if (mount("tmpfs", t->disk, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0700") != 0) {
        fprintf(stderr, "mount tmpfs: %s\n", strerror(errno));
        return -1;
    }
    t->mounted = true;
    snprintf(t->f->db, sizeof(t->f->db), "%s/coord.db", t->disk);
    snprintf(t->filler, sizeof(t->filler), "%s/filler", t->disk);
    *state = t;
    return 0;
}

static int df_teardown(void **state) {
    struct dfull *t = *state;
    if (t->f->child > 0)
        fx_proc_signal(t->f, SIGKILL);
    clients_free(t->dev, N);
    unlink(t->filler);
    if (t->mounted) {
        umount2(t->disk, MNT_DETACH); /* the tmpfs and everything in it go */
        rmdir(t->disk);
    }
    fx_free(t->f);
    free(t);
    return 0;
}

/* The model of completed round rid: exactly the previous one plus the FedAvg of the N
 * devices' vectors. */
static void check_completed(struct dfull *t, int64_t rid) {
    sqlite3 *db = rel_db_open(t->f->db);
    assert_non_null(db);
    long long id = (long long)rid;
    assert_int_equal(rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id), 2);
    int64_t v = rel_q(db, "SELECT result_version FROM rounds WHERE id = %lld", id);
    assert_int_equal(rel_q(db, "SELECT parent FROM models WHERE version = %lld", (long long)v),
                     t->cur_version);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM round_participants WHERE round_id = %lld AND "
                           "state = 2",
                           id),
                     N);
    rel_db_close(db);
    float w[D], b[2], expect[D];
    fetch_model(t->f, &t->dev[0], "df", v, w, b);
    expected_fedavg(t->dev, N, t->cur, expect);
    assert_memory_equal(w, expect, sizeof(w));
    memcpy(t->cur, expect, sizeof(expect));
    t->cur_version = v;
}

static void run_round(struct dfull *t, int64_t *rid) {
    for (int i = 0; i < N; i++)
        assert_int_equal(checkin(t, i, rid), 200);
    tasks(t, *rid);
    for (int i = 0; i < N; i++)
        assert_int_equal(post_update(t, i, *rid, NULL), 202);
    char reason[256];
    char *s = round_end(t, *rid, reason, sizeof(reason));
    assert_string_equal(s, "completed");
    free(s);
    check_completed(t, *rid);
}

static int64_t count_rows(struct dfull *t, const char *table) {
    sqlite3 *db = rel_db_open(t->f->db);
    assert_non_null(db);
    int64_t n = rel_q(db, "SELECT count(*) FROM %s", table);
    rel_db_close(db);
    return n;
}

static void test_disk_full(void **state) {
    struct dfull *t = *state;
    fx_proc_start(t->f, FL_COORD_EXE);
    char *tok[N];
    struct popcfg pc = {.name = "df", .target = N, .min = N, .secagg = false, .mode = "none",
                        .budget = 1e6};
    setup_population(t->f, &pc, tok, N);
    for (int i = 0; i < N; i++)
        t->dev[i].tok = tok[i];
    for (int j = 0; j < D; j++)
        t->cur[j] = base_w(j);
    t->cur_version = db_int(t->f, "SELECT version FROM tags WHERE name = 'population/df'");
    int64_t rid = 0;
    run_round(t, &rid); /* a clean round first */

    /* Round 2: selected and trained, then the disk fills before the updates arrive. */
    int64_t rid2 = 0;
    for (int i = 0; i < N; i++)
        assert_int_equal(checkin(t, i, &rid2), 200);
    tasks(t, rid2);
    {
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(t->f->db, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        assert_int_equal(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
    }
    int64_t models_before = count_rows(t, "models");
    int64_t rounds_before = count_rows(t, "rounds");
    long long filled = fill_disk(t->filler);
    double lat = 0, lat_max = 0;
    long st_last = 0;
    for (int i = 0; i < N; i++) {
        long st = post_update(t, i, rid2, &lat);
        if (lat > lat_max)
            lat_max = lat;
        if (i < N - 1)
            assert_int_equal(st, 202);
        st_last = st;
    }
    char reason[256];
    char *s2 = round_end(t, rid2, reason, sizeof(reason));
    fprintf(stderr,
            "disk full: tmpfs filled (%lld filler bytes); the update that completes round %lld "
            "answered %ld in %.1f ms; the round ended %s (%s)\n",
            filled, (long long)rid2, st_last, lat_max * 1e3, s2, reason);
    assert_string_equal(s2, "abandoned");
    free(s2);
    assert_non_null(strstr(reason, "full"));
    reads_up(t, rid2);

    /* Writes that need the disk are refused inside their request. */
    int64_t rid3 = 0;
    double t0 = rel_mono_s();
    long st_checkin = checkin(t, 0, &rid3);
    double lat_checkin = rel_mono_s() - t0;
    assert_int_equal(st_checkin, 503); /* transient: Retry-After, not a bug's 500 */
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    t0 = rel_mono_s();
    struct resp r = http_req(t->f, "POST", "/v1/admin/populations/df/models", ADMIN_TOKEN,
                             "application/octet-stream", model, mlen, NULL);
    double lat_upload = rel_mono_s() - t0;
    long st_upload = r.status;
    resp_free(&r);
    free(model);
    assert_int_equal(st_upload, 503);
    fprintf(stderr,
            "disk full: check-in needing a new round %ld in %.1f ms; admin model upload %ld in "
            "%.1f ms\n",
            st_checkin, lat_checkin * 1e3, st_upload, lat_upload * 1e3);
    reads_up(t, rid2);
    assert_int_equal(count_rows(t, "models"), models_before);
    assert_int_equal(count_rows(t, "rounds"), rounds_before);

    /* Space comes back: the very next check-in works. */
    assert_int_equal(unlink(t->filler), 0);
    t0 = rel_mono_s();
    assert_int_equal(checkin(t, 0, &rid3), 200);
    double resumed = rel_mono_s() - t0;
    for (int i = 1; i < N; i++)
        assert_int_equal(checkin(t, i, &rid3), 200);
    assert_true(rid3 > rid2);
    tasks(t, rid3);
    for (int i = 0; i < N; i++)
        assert_int_equal(post_update(t, i, rid3, NULL), 202);
    char *s3 = round_end(t, rid3, reason, sizeof(reason));
    assert_string_equal(s3, "completed");
    free(s3);
    check_completed(t, rid3);
    fprintf(stderr,
            "disk full: space freed; the first check-in after it answered 200 in %.1f ms (no "
            "retry, no restart); round %lld completed with the exact model\n",
            resumed * 1e3, (long long)rid3);

    int st = fx_proc_signal(t->f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char why[256];
    assert_true(rel_db_ok(t->f->db, why, sizeof(why)));
    sqlite3 *db = rel_db_open(t->f->db);
    assert_non_null(db);
    /* Round 2: nothing of it stored (no model, no completed participant). */
    long long id2 = (long long)rid2;
    int64_t state2 = rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id2);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM models WHERE "
                           "json_extract(metadata_json, '$.round_id') = %lld",
                           id2),
                     0);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM round_participants WHERE round_id = %lld AND "
                           "state = 2",
                           id2),
                     0);
    assert_int_equal(rel_q(db, "SELECT count(*) FROM rounds WHERE state = 2"), 2);
    assert_int_equal(rel_q(db, "SELECT version FROM tags WHERE name = 'population/df'"),
                     t->cur_version);
    rel_db_close(db);
    /* The abandonment could not be written while the disk was full; the ticker retries it
     * once space is back (so it may already be written), and the next start abandons every
     * round left open, not only the latest (bug 9 in docs/reliability.md, fixed). */
    assert_true(state2 == 1 || state2 == 3);
    fx_proc_start(t->f, FL_COORD_EXE);
    st = fx_proc_signal(t->f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    db = rel_db_open(t->f->db);
    assert_non_null(db);
    int64_t state2b = rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id2);
    int64_t open_rounds = rel_q(db, "SELECT count(*) FROM rounds WHERE state NOT IN (2, 3)");
    rel_db_close(db);
    fprintf(stderr,
            "disk full: round %lld in the database after the graceful stop: %s; after the next "
            "start: %s\n",
            id2, state2 == 3 ? "abandoned (retried once space was back)" : "still running",
            state2b == 3 ? "abandoned" : "STILL RUNNING (bug 9)");
    assert_int_equal(state2b, 3);
    assert_int_equal(open_rounds, 0);
}

int main(void) {
    char why[160];
    if (ns_skip_reason(why, sizeof(why))) {
        printf("test_rel_coord_diskfull: skipped: %s\n", why);
        return SKIP;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disk_full, df_setup, df_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
