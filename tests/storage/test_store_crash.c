/* Crash consistency: a writer process commits rounds (model version + round + ledger
 * entry, one transaction each) in a loop and is killed with SIGKILL at random moments,
 * at least FL_CRASH_KILLS times (default 200). After each kill the store is reopened and
 * checked: PRAGMA integrity_check and foreign keys (fl_store_check, which also re-hashes
 * every version), every version the writer reported through the pipe after its commit
 * returned is present with the right hash and bytes, and no transaction is half-applied.
 *
 * Environment: FL_CRASH_KILLS (kills, default 200), FL_CRASH_SEED (timing seed). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <sys/wait.h>
#include <time.h>

#include "fl_test_time.h"
#include "test_store_util.h"

#define MAX_MODEL 2048

/* One report from the writer: written with a single write() (< PIPE_BUF, so atomic)
 * only after fl_store_commit returned FL_OK. */
struct report {
    int64_t version;    /* committed model version */
    uint32_t life;      /* writer process number */
    uint32_t index;     /* commit number within that life */
    uint8_t sha256[32]; /* hash the writer computed from its bytes */
};

/* Deterministic model bytes for (life, index), so the checker can rebuild them. */
static size_t model_bytes(uint8_t *buf, uint32_t life, uint32_t index) {
    uint32_t x = life * 2654435761u ^ (index + 1) * 40503u;
    size_t n = 32 + (x % (MAX_MODEL - 32));
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)x;
    }
    /* Make every (life, index) distinct so no put is deduplicated. */
    memcpy(buf, &life, sizeof(life));
    memcpy(buf + 4, &index, sizeof(index));
    return n;
}

static void writer(const char *path, int64_t pop, uint32_t life, int fd) {
    fl_store *st = NULL;
    if (fl_store_open(&st, path, NULL) != FL_OK)
        _exit(10);
    int64_t parent = 0;
    fl_store_tag_resolve(st, &parent, "latest");
    /* "Opened" marker (version 0), so most kills can be aimed at the commit loop. */
    struct report ready = {0, life, 0, {0}};
    if (write(fd, &ready, sizeof(ready)) != (ssize_t)sizeof(ready))
        _exit(16);
    uint8_t buf[MAX_MODEL];
    for (uint32_t i = 0;; i++) {
        size_t n = model_bytes(buf, life, i);
        fl_store_model_ref ref;
        int64_t rid = 0;
        fl_store_ledger_entry e;
        memset(&e, 0, sizeof(e));
        e.population_id = pop;
        e.mechanism = "gaussian";
        e.sampling_rate = 0.01;
        e.noise_multiplier = 1.0;
        e.clip_norm = 1.0;
        e.steps = 1;
        e.participants = (int64_t)i;
        if (fl_store_begin(st) != FL_OK)
            _exit(11);
        if (fl_store_model_put(st, &ref, pop, parent, buf, n, "{\"crash\":true}") != FL_OK ||
            ref.existed)
            _exit(12);
        if (fl_store_round_create(st, &rid, pop, 0, parent, NULL) != FL_OK ||
            fl_store_round_complete(st, rid, ref.version) != FL_OK)
            _exit(13);
        e.round_id = rid;
        if (fl_store_ledger_append(st, NULL, &e) != FL_OK)
            _exit(14);
        if (fl_store_commit(st) != FL_OK)
            _exit(15);
        struct report rep = {ref.version, life, i, {0}};
        crypto_hash_sha256(rep.sha256, buf, n);
        if (write(fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
            _exit(16);
        /* A single-call transaction between the grouped ones. */
        if (fl_store_tag_set(st, "latest", ref.version) != FL_OK)
            _exit(17);
        parent = ref.version;
    }
}

static uint64_t rng_state;
static uint32_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Every reported version is present with the reported hash (one raw pass, no blobs). */
static void check_reports_present(sqlite3 *raw, const struct report *reps, size_t n) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(raw, "SELECT sha256 FROM models WHERE version = ?1", -1, &s, NULL),
        SQLITE_OK);
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int64(s, 1, reps[i].version);
        if (sqlite3_step(s) != SQLITE_ROW)
            fail_msg("reported version %lld (life %u, commit %u) is missing",
                     (long long)reps[i].version, reps[i].life, reps[i].index);
        assert_int_equal(sqlite3_column_bytes(s, 0), 32);
        assert_memory_equal(sqlite3_column_blob(s, 0), reps[i].sha256, 32);
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
}

/* Through the API: bytes readable, hash verified on read, equal to what was written. */
static void check_reports_readable(fl_store *st, const struct report *reps, size_t n) {
    uint8_t buf[MAX_MODEL];
    for (size_t i = 0; i < n; i++) {
        fl_store_model *m = NULL;
        STORE_OK(st, fl_store_model_get(st, &m, reps[i].version));
        size_t len = model_bytes(buf, reps[i].life, reps[i].index);
        assert_int_equal(m->size, len);
        assert_memory_equal(m->bytes, buf, len);
        fl_store_free(st, m);
    }
}

/* No half-applied transaction: each committed round has its model and ledger entry. */
static void check_atomicity(sqlite3 *raw, int64_t base_models) {
    int64_t models = store_raw_int(raw, "SELECT count(*) FROM models");
    int64_t rounds = store_raw_int(raw, "SELECT count(*) FROM rounds");
    int64_t ledger = store_raw_int(raw, "SELECT count(*) FROM privacy_ledger");
    int64_t good =
        store_raw_int(raw, "SELECT count(*) FROM rounds r WHERE r.state = 2 AND EXISTS "
                           "(SELECT 1 FROM models m WHERE m.version = r.result_version) "
                           "AND EXISTS (SELECT 1 FROM privacy_ledger l WHERE l.round_id = "
                           "r.id)");
    if (models - base_models != rounds || rounds != ledger || good != rounds)
        fail_msg("half-applied transaction: models %lld (+%lld before), rounds %lld, ledger %lld, "
                 "complete rounds %lld",
                 (long long)models, (long long)base_models, (long long)rounds, (long long)ledger,
                 (long long)good);
}

static void test_kill9_writer(void **state) {
    (void)state;
    const char *env = getenv("FL_CRASH_KILLS");
    int kills = env ? (int)strtol(env, NULL, 10) : 200;
    env = getenv("FL_CRASH_SEED");
    rng_state = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    if (rng_state == 0)
        rng_state = 88172645463325252ull;
    print_message("crash test: %d kills, FL_CRASH_SEED=%llu\n", kills,
                  (unsigned long long)rng_state);
    assert_true(sodium_init() >= 0);

    struct store_tdir t;
    store_tdir_make(&t, "crash.db");
    fl_store *st = store_open_ok(t.path, NULL);
    int64_t pop = 0;
    STORE_OK(st, fl_store_population_create(st, &pop, "crash", NULL, 10, 1e-6, NULL));
    fl_store_close(st);

    size_t cap = 1024, nrep = 0;
    struct report *reps = malloc(cap * sizeof(*reps));
    double t0 = now_s();
    int lives_with_commits = 0;
    for (int life = 0; life < kills; life++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            writer(t.path, pop, (uint32_t)life, fds[1]);
            _exit(0);
        }
        close(fds[1]);
        /* One kill in five lands anywhere from fork to the end of open (WAL recovery
         * included); the rest wait for the "opened" marker and then up to 60 ms, a
         * handful of commits. Both delays are times FL_TEST_TIME_SCALE (a slow tool
         * slows the writer as much). */
        size_t first = nrep;
        struct timespec d = {0, 0};
        long us;
        if (rng_next() % 5 == 0) {
            us = (long)(rng_next() % 5000) * fl_test_time_scale();
        } else {
            struct report ready;
            ssize_t got;
            do
                got = read(fds[0], &ready, sizeof(ready));
            while (got < 0 && errno == EINTR);
            if (got != (ssize_t)sizeof(ready) || ready.version != 0)
                fail_msg("writer life %d did not open the store", life);
            us = (long)(rng_next() % 60000) * fl_test_time_scale();
        }
        d.tv_sec = us / 1000000;
        d.tv_nsec = us % 1000000 * 1000;
        nanosleep(&d, NULL);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
            fail_msg("writer life %d ended on its own (status 0x%x): a store call failed", life,
                     status);
        for (;;) {
            if (nrep == cap) {
                cap *= 2;
                reps = realloc(reps, cap * sizeof(*reps));
                assert_non_null(reps);
            }
            ssize_t got = read(fds[0], &reps[nrep], sizeof(*reps));
            if (got == 0)
                break;
            if (got < 0 && errno == EINTR)
                continue;
            assert_int_equal(got, sizeof(*reps));
            if (reps[nrep].version != 0) /* skip "opened" markers */
                nrep++;
        }
        close(fds[0]);
        lives_with_commits += nrep > first;

        /* Reopen (recovers the WAL) and check. */
        st = store_open_ok(t.path, NULL);
        STORE_OK(st, fl_store_check(st));
        check_reports_readable(st, reps + first, nrep - first);
        fl_store_close(st);
        sqlite3 *raw = store_raw_open(t.path);
        check_reports_present(raw, reps, nrep);
        check_atomicity(raw, 0);
        sqlite3_close(raw);
    }
    /* Finally every reported version, through the API. */
    st = store_open_ok(t.path, NULL);
    check_reports_readable(st, reps, nrep);
    fl_store_close(st);
    double took = now_s() - t0;
    print_message("crash test: %d kills, %zu reported commits, %d lives committed, %.1f s\n", kills,
                  nrep, lives_with_commits, took);
    /* The kills must have landed among commits, not only before the first one. */
    assert_true(lives_with_commits >= kills / 4);
    free(reps);
    store_tdir_rm(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
