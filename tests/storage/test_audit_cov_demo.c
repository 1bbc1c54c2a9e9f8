/* flotilla-audit demo when its store fails in the middle of a round: each step's failure
 * must end the demo with exit status 2 and a message naming the call that failed, and no
 * bundle claimed as written.
 *
 * Two ways of making the store fail, each aimed at the steps the other cannot reach:
 *   - a file size limit (RLIMIT_FSIZE, inherited by the tool; SIGXFSZ ignored) makes the
 *     first write past it fail: stepping the limit down from the smallest one the demo
 *     gets through, the failing write moves back through the last steps of the log, down
 *     to the budget refusal (`demo --rounds 27`: the health population's ninth round is
 *     over its budget) and the round commit before it;
 *   - the failalloc shim (FL_FAILALLOC_SO) fails the n-th allocation: n is stepped through
 *     the first round's counts and completion in `demo --rounds 1` (the round is found
 *     from the end of the run, walking back until the failing call is one of the round's).
 *   - fl_store_begin allocates nothing and writes nothing: it runs BEGIN IMMEDIATE, which
 *     takes the WAL write lock. The faillock shim (FL_FAILLOCK_SO) fails the n-th write lock
 *     on the WAL index (the -shm file) and every one after it, which SQLite reports as
 *     SQLITE_BUSY once its busy handler gives up; the first n that fails a call of the round
 *     loop is found by bisection in `demo --rounds 1`, and that call must be the round's
 *     fl_store_begin.
 * The tool and the shims come from FL_AUDIT_TOOL, FL_FAILALLOC_SO and FL_FAILLOCK_SO (set by
 * audit_tool_oom_demo.cmake, not in sanitizer builds); without them the tests are skipped. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fl_test.h"

extern char **environ;

static const char *tool, *shim, *lockshim;
static char dir[] = "/tmp/fl-audit-demo-test-XXXXXX";

struct outcome {
    int status;    /* wait status */
    char call[64]; /* the DEMO_CHECK call that failed ("" if none named) */
    char err[512]; /* stderr, truncated */
    int reached;   /* the shim's n-th allocation or lock was failed */
};

/* What run_demo makes fail besides the file size limit. */
enum fault {
    FAULT_ALLOC, /* failalloc: the n-th allocation */
    FAULT_LOCK,  /* faillock: the n-th write lock on the WAL index, and every later one */
};

/* Runs `flotilla-audit demo OUT --rounds R`, failing the fail_at-th allocation or lock
 * (0: none) and with a file size limit of fsize bytes (0: none). */
static void run_demo_fault(struct outcome *o, const char *rounds, enum fault kind,
                           unsigned long fail_at, rlim_t fsize) {
    char out[128], errp[128], mark[128], env_n[64], env_mark[160], env_pre[600];
    snprintf(out, sizeof(out), "%s/demo.jsonl", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    snprintf(mark, sizeof(mark), "%s/mark", dir);
    unlink(mark);
    unlink(out);
    char *envp[256];
    int ne = 0;
    for (char **e = environ; *e && ne < 250; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "FL_FAILALLOC_", 13) &&
            strncmp(*e, "FL_FAILLOCK_", 12))
            envp[ne++] = *e;
    if (fail_at) {
        const char *var = kind == FAULT_LOCK ? "FL_FAILLOCK" : "FL_FAILALLOC";
        snprintf(env_n, sizeof(env_n), "%s_N=%lu", var, fail_at);
        snprintf(env_mark, sizeof(env_mark), "%s_MARK=%s", var, mark);
        snprintf(env_pre, sizeof(env_pre), "LD_PRELOAD=%s", kind == FAULT_LOCK ? lockshim : shim);
        envp[ne++] = env_n;
        envp[ne++] = env_mark;
        envp[ne++] = env_pre;
    }
    envp[ne] = NULL;
    const char *argv[] = {tool, "demo", out, "--rounds", rounds, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    if (fsize)
        lim.rlim_cur = fsize;
    /* the child inherits the limit and the ignored SIGXFSZ (a failed write, not a kill) */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    pid_t pid = 0;
    int err = posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, envp);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    posix_spawn_file_actions_destroy(&fa);
    if (err)
        fail_msg("cannot run %s: %s", tool, strerror(err));
    o->status = 0;
    while (waitpid(pid, &o->status, 0) < 0 && errno == EINTR)
        ;
    memset(o->err, 0, sizeof(o->err));
    FILE *f = fopen(errp, "r");
    if (f) {
        size_t n = fread(o->err, 1, sizeof(o->err) - 1, f);
        o->err[n] = '\0';
        fclose(f);
    }
    o->call[0] = '\0';
    const char *c = strstr(o->err, "flotilla-audit demo: fl_store_");
    if (c) {
        c += strlen("flotilla-audit demo: ");
        size_t n = strcspn(c, "(");
        snprintf(o->call, sizeof(o->call), "%.*s", (int)n, c);
    }
    struct stat sb;
    o->reached = stat(mark, &sb) == 0;
    /* A failed demo leaves no bundle behind to be taken for a finished one... unless the
     * export itself was done: it is the last step. */
    if (!(WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0) &&
        strcmp(o->call, "fl_store_audit_export_file") != 0 &&
        strcmp(o->call, "fl_store_audit_vkey") != 0)
        assert_int_equal(stat(out, &sb), -1);
}

/* The same, failing the fail_at-th allocation. */
static void run_demo(struct outcome *o, const char *rounds, unsigned long fail_at, rlim_t fsize) {
    run_demo_fault(o, rounds, FAULT_ALLOC, fail_at, fsize);
}

static int exit_status(const struct outcome *o) {
    return WIFEXITED(o->status) ? WEXITSTATUS(o->status) : -1;
}

/* A failed run: exit 2 naming the failed call, never a signal. */
static void check_failed(const struct outcome *o, const char *what) {
    if (exit_status(o) != 2 || !o->call[0])
        fail_msg("%s: status %d, stderr: %s", what, o->status, o->err);
}

static int setup(void **state) {
    (void)state;
    tool = getenv("FL_AUDIT_TOOL");
    shim = getenv("FL_FAILALLOC_SO");
    lockshim = getenv("FL_FAILLOCK_SO");
    if (!tool || !tool[0])
        return 0;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char p[128];
    const char *names[] = {"demo.jsonl", "err", "mark"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return 0;
}

/* The file size limit stepped down through the end of `demo --rounds 27`. */
static void test_demo_write_failures(void **state) {
    (void)state;
    if (!tool || !tool[0])
        skip();
    struct outcome o;
    /* The smallest limit (to 16 KiB) the demo gets through: doubling, then bisecting. */
    rlim_t lo = 256 * 1024, hi = 0;
    for (rlim_t l = lo; l <= (rlim_t)1 << 30; l *= 2) {
        run_demo(&o, "27", 0, l);
        if (exit_status(&o) == 0) {
            hi = l;
            break;
        }
        assert_int_equal(exit_status(&o), 2); /* may fail opening the store: no call named */
        lo = l;
    }
    assert_true(hi > 0);
    while (hi - lo > 16384) {
        rlim_t mid = lo + (hi - lo) / 2;
        run_demo(&o, "27", 0, mid);
        if (exit_status(&o) == 0) {
            hi = mid;
        } else {
            assert_int_equal(exit_status(&o), 2);
            lo = mid;
        }
    }
    /* Down from there 8 KiB (two WAL frames) at a time, until the round commit before the
     * refusal fails (the refusal's commit writes three frames or more). */
    int refusal = 0, commit = 0, steps = 0;
    for (rlim_t l = hi; l > 8192 && !commit && steps < 200; l -= 8192, steps++) {
        run_demo(&o, "27", 0, l);
        if (exit_status(&o) == 0)
            continue;
        check_failed(&o, "stepping the limit down");
        assert_non_null(strstr(o.err, "I/O"));
        refusal |= strcmp(o.call, "fl_store_audit_append_refusal") == 0;
        commit |= strcmp(o.call, "fl_store_commit") == 0;
    }
    print_message("%d limits tried below %lu bytes\n", steps, (unsigned long)hi);
    assert_true(refusal);
    assert_true(commit);
}

/* Every allocation around the counts and completion of the first round failed in turn. */
static void test_demo_round_allocation_failures(void **state) {
    (void)state;
    if (!tool || !tool[0] || !shim || !shim[0])
        skip();
    struct outcome o;
    /* How many allocations a whole run makes: the largest n it still reaches. */
    unsigned long lo = 1, hi = 1;
    for (;;) {
        run_demo(&o, "1", hi, 0);
        if (!o.reached)
            break;
        lo = hi;
        hi *= 2;
        assert_true(hi < 100000000UL);
    }
    while (hi - lo > 1) {
        unsigned long mid = lo + (hi - lo) / 2;
        run_demo(&o, "1", mid, 0);
        if (o.reached)
            lo = mid;
        else
            hi = mid;
    }
    /* Back from the end, 200 at a time, to the round's participants (some 700 allocations
     * for the 30 of them) or counts. */
    unsigned long n = lo;
    int found = 0;
    for (int i = 0; i < 100 && n > 200; i++, n -= 200) {
        run_demo(&o, "1", n, 0);
        found = strcmp(o.call, "fl_store_participant_set") == 0 ||
                strcmp(o.call, "fl_store_round_set_counts") == 0;
        if (found)
            break;
    }
    assert_true(found);
    /* Then forward 16 at a time through the counts and the completion (some 50 and 100
     * allocations: every n in them would be tried by a walk of stride 1, which the demo's
     * size makes too slow). */
    int counts = 0, complete = 0;
    for (int i = 0; i < 200 && !complete; i++, n += 16) {
        run_demo(&o, "1", n, 0);
        assert_true(o.reached);
        if (exit_status(&o) == 0)
            continue; /* absorbed (SQLite's page cache, stdio) */
        check_failed(&o, "failing an allocation");
        assert_non_null(strstr(o.err, "out of memory"));
        counts |= strcmp(o.call, "fl_store_round_set_counts") == 0;
        complete |= strcmp(o.call, "fl_store_round_complete") == 0;
    }
    assert_true(counts);
    assert_true(complete);
}

/* 1 when o failed before the round loop: opening the store (no call named) or one of the
 * calls that set up the populations. */
static int failed_before_rounds(const struct outcome *o) {
    static const char *const setup_calls[] = {
        "fl_store_population_create", "fl_store_audit_append_population", "fl_store_client_enroll",
        "fl_store_model_put",         "fl_store_audit_append_model",
    };
    if (exit_status(o) == 0)
        return 0;
    if (!o->call[0])
        return 1;
    for (size_t i = 0; i < sizeof(setup_calls) / sizeof(setup_calls[0]); i++)
        if (strcmp(o->call, setup_calls[i]) == 0)
            return 1;
    return 0;
}

/* The round's fl_store_begin failing on a lock it cannot take. With the locks failing from
 * the n-th on, the demo fails in the call that asks for the n-th: the later n, the later
 * the call, so the first n that fails a call of the round loop is found by bisection. The
 * round loop's first lock is BEGIN IMMEDIATE's write lock: that call must be
 * fl_store_begin, and the one before it (n - 1) the last of the set-up. */
static void test_demo_begin_lock_failure(void **state) {
    (void)state;
    if (!tool || !tool[0] || !lockshim || !lockshim[0])
        skip();
    struct outcome o;
    run_demo_fault(&o, "1", FAULT_LOCK, 1, 0); /* the first lock: opening the store */
    assert_true(o.reached);
    assert_true(failed_before_rounds(&o));
    /* lo fails before the rounds, hi does not: doubling, then bisecting. */
    unsigned long lo = 1, hi = 2;
    for (;;) {
        run_demo_fault(&o, "1", FAULT_LOCK, hi, 0);
        if (!failed_before_rounds(&o))
            break;
        lo = hi;
        hi *= 2;
        if (hi > 2048)
            fail_msg("lock %lu still fails before the round loop: %s", lo, o.err);
    }
    int runs = 0;
    while (hi - lo > 1) {
        unsigned long mid = lo + (hi - lo) / 2;
        run_demo_fault(&o, "1", FAULT_LOCK, mid, 0);
        runs++;
        if (failed_before_rounds(&o))
            lo = mid;
        else
            hi = mid;
    }
    print_message("the round's first lock is WAL-index write lock %lu (%d bisection runs)\n", hi,
                  runs);
    run_demo_fault(&o, "1", FAULT_LOCK, lo, 0);
    check_failed(&o, "failing the last lock before the round loop");
    assert_string_equal(o.call, "fl_store_audit_append_model");
    run_demo_fault(&o, "1", FAULT_LOCK, hi, 0);
    assert_true(o.reached);
    check_failed(&o, "failing the round's first lock");
    if (strcmp(o.call, "fl_store_begin") != 0)
        fail_msg("lock %lu: expected fl_store_begin to fail, got: %s", hi, o.err);
    assert_non_null(strstr(o.err, "flotilla-audit demo: fl_store_begin(st): resource busy"));
    assert_non_null(strstr(o.err, "database is locked"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_write_failures),
        cmocka_unit_test(test_demo_round_allocation_failures),
        cmocka_unit_test(test_demo_begin_lock_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
