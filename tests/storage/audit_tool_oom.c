/* flotilla-audit under allocation failure: runs the tool with failalloc.so preloaded, failing
 * the n-th malloc/calloc/realloc for n = 1, 2, ... until a run no longer reaches call n,
 * for verify, show, export (jsonl and csv), report and demo. Every run must end with an
 * exit status (never a signal); a run in which the failure was injected must either
 * produce exactly the output of the undisturbed run (the failure was absorbed, e.g. a
 * stdio buffer) or exit 2 saying "out of memory" (or an I/O error) on stderr, and must
 * never print "VERIFIED" unless it succeeded in full.
 *
 * usage: test_audit_tool_oom TOOL FAILALLOC.so WORKDIR [STRIDE [DEMO_STRIDE]]
 *   STRIDE (default 1) tests every STRIDE-th call number of the bundle commands;
 *   DEMO_STRIDE (default 1) that of demo, which builds a store through SQLite (tens of
 *   thousands of allocations, a fresh database each run): 0 skips it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *tool, *shim, *dir;
static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Whole file as a NUL-terminated string (empty when missing); caller frees. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    if (!b) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    if (f) {
        size_t r;
        while ((r = fread(b + n, 1, cap - n, f)) > 0) {
            n += r;
            if (n == cap) {
                char *nb = realloc(b, cap * 2 + 1);
                if (!nb) {
                    fprintf(stderr, "out of memory\n");
                    exit(2);
                }
                b = nb;
                cap *= 2;
            }
        }
        fclose(f);
    }
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

/* Runs tool args... with stdout/stderr in dir/out, dir/err; fail_at 0 = no injection.
 * Returns the wait status. */
static int run(const char *const *args, unsigned long fail_at) {
    char outp[512], errp[512], env_n[64], env_mark[600], env_pre[600];
    snprintf(outp, sizeof(outp), "%s/out", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    snprintf(env_n, sizeof(env_n), "FL_FAILALLOC_N=%lu", fail_at);
    snprintf(env_mark, sizeof(env_mark), "FL_FAILALLOC_MARK=%s/mark", dir);
    snprintf(env_pre, sizeof(env_pre), "LD_PRELOAD=%s", shim);
    char *envp[256];
    int ne = 0;
    for (char **e = environ; *e && ne < 250; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "FL_FAILALLOC_", 13))
            envp[ne++] = *e;
    envp[ne++] = env_n;
    envp[ne++] = env_mark;
    envp[ne++] = env_pre;
    envp[ne] = NULL;
    const char *argv[16];
    int n = 0;
    argv[n++] = tool;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    fflush(NULL);
    pid_t pid = 0;
    int err = posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (err) {
        fprintf(stderr, "cannot run %s: %s\n", tool, strerror(err));
        exit(2);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

static int mark_exists(void) {
    char p[512];
    snprintf(p, sizeof(p), "%s/mark", dir);
    struct stat sb;
    if (stat(p, &sb) != 0)
        return 0;
    unlink(p);
    return 1;
}

/* Walks one command line; out_file (or NULL for stdout) is where its output goes. Returns
 * the number of call numbers at which a failure was injected. */
static unsigned long walk(const char *name, const char *const *args, const char *out_file,
                          unsigned long stride, unsigned long max_n) {
    char outp[512];
    snprintf(outp, sizeof(outp), "%s/out", dir);
    const char *where = out_file ? out_file : outp;
    mark_exists();
    int st = run(args, 0);
    CHECK(WIFEXITED(st), "%s: reference run ended by signal", name);
    int ref_rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    size_t ref_len = 0;
    char *ref = slurp(where, &ref_len);
    unsigned long injected = 0, absorbed = 0, n;
    for (n = 1; max_n == 0 || n <= max_n; n += stride) {
        if (out_file)
            unlink(out_file);
        st = run(args, n);
        if (!mark_exists()) {
            /* Call n was never reached: the whole run is behind us. */
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == ref_rc, "%s: n=%lu past the end: status %d",
                  name, n, st);
            break;
        }
        injected++;
        if (!WIFEXITED(st)) {
            char errp[512];
            snprintf(errp, sizeof(errp), "%s/err", dir);
            char *err = slurp(errp, NULL);
            CHECK(0, "%s: n=%lu: killed by signal %d; stderr: %s", name, n,
                  WIFSIGNALED(st) ? WTERMSIG(st) : -1, err);
            free(err);
            continue;
        }
        int rc = WEXITSTATUS(st);
        size_t len = 0;
        char *got = slurp(where, &len);
        char errp[512];
        snprintf(errp, sizeof(errp), "%s/err", dir);
        char *err = slurp(errp, NULL);
        int same = rc == ref_rc && len == ref_len && memcmp(got, ref, len) == 0;
        if (same) {
            absorbed++;
        } else {
            CHECK(rc == 2, "%s: n=%lu: output differs but exit status %d (want 2); stderr: %s",
                  name, n, rc, err);
            CHECK(strstr(err, "out of memory") || strstr(err, "cannot"),
                  "%s: n=%lu: exit 2 without a clear message; stderr: %s", name, n, err);
            /* A failed run may have printed a partial listing but never claims success. */
            CHECK(!strstr(got, "VERIFIED") || strstr(got, "NOT VERIFIED") ||
                      strstr(got, "INCOMPLETE"),
                  "%s: n=%lu: claims VERIFIED after a failure: %s", name, n, got);
        }
        free(got);
        free(err);
    }
    printf("%-14s calls 1..%lu walked (stride %lu): %lu failures injected, %lu absorbed\n", name,
           n - 1, stride, injected, absorbed);
    free(ref);
    return injected;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOOL FAILALLOC.so WORKDIR [STRIDE]\n", argv[0]);
        return 2;
    }
    tool = argv[1];
    shim = argv[2];
    dir = argv[3];
    unsigned long stride = argc > 4 ? strtoul(argv[4], NULL, 10) : 1;
    unsigned long demo_stride = argc > 5 ? strtoul(argv[5], NULL, 10) : 1;
    if (stride == 0)
        stride = 1;
    mkdir(dir, 0700);
    char bundle[512], vkey[512] = "", outf[512];
    snprintf(bundle, sizeof(bundle), "%s/demo.jsonl", dir);
    snprintf(outf, sizeof(outf), "%s/file.out", dir);

    /* A small demo log: both populations, a refusal, an erasure, a retention sweep. */
    const char *demo[] = {"demo", bundle, "--rounds", "6", NULL};
    int st = run(demo, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "demo failed (status %d)\n", st);
        return 1;
    }
    char outp[512];
    snprintf(outp, sizeof(outp), "%s/out", dir);
    char *o = slurp(outp, NULL);
    const char *k = strstr(o, "verifier key: ");
    if (k) {
        k += strlen("verifier key: ");
        size_t l = strcspn(k, "\n");
        snprintf(vkey, sizeof(vkey), "%.*s", (int)l, k);
    }
    free(o);
    if (!vkey[0]) {
        fprintf(stderr, "demo printed no verifier key\n");
        return 1;
    }
    unsigned long total = 0;
    const char *verify[] = {"verify", bundle, "--key", vkey, NULL};
    total += walk("verify", verify, NULL, stride, 0);
    const char *show[] = {"show", bundle, NULL};
    total += walk("show", show, NULL, stride, 0);
    const char *jsonl[] = {"export", bundle, "--format", "jsonl", "-o", outf, NULL};
    total += walk("export jsonl", jsonl, outf, stride, 0);
    const char *csv[] = {"export", bundle, "--format", "csv", NULL};
    total += walk("export csv", csv, NULL, stride, 0);
    const char *report[] = {"report", bundle, "-o", outf, "--key", vkey, NULL};
    total += walk("report", report, outf, stride, 0);
    /* A bundle over the 64 KiB the tool reads first: its first calls include growing the
     * read buffer. */
    char big[512];
    snprintf(big, sizeof(big), "%s/big.jsonl", dir);
    const char *demo_big[] = {"demo", big, "--rounds", "200", NULL};
    st = run(demo_big, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "demo --rounds 200 failed (status %d)", st);
    struct stat sb;
    CHECK(stat(big, &sb) == 0 && sb.st_size > 65536, "the big bundle is not over 64 KiB");
    const char *verify_big[] = {"verify", big, NULL};
    total += walk("verify big", verify_big, NULL, 1, 8);
    /* demo writes a fresh store each time; its output names the file, so compare as is. */
    char bundle2[512];
    snprintf(bundle2, sizeof(bundle2), "%s/demo2.jsonl", dir);
    const char *demo2[] = {"demo", bundle2, "--rounds", "5", NULL};
    if (demo_stride)
        total += walk("demo", demo2, NULL, demo_stride, 0);
    CHECK(total > 0, "no failure was ever injected: is %s preloaded?", shim);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
