/* Slow HTTP attacks against the real `flotilla-coordinator serve` executable on loopback,
 * with `slowhttptest` (docs/reliability.md; installed by scripts/setup.sh --tests; the test
 * exits 77, skipped, without it).
 *
 * The coordinator runs with its default limits (connection timeout 30 s, 64 connections per
 * IP, 10,000 in all, 2 HTTP threads). A legitimate client, connecting from another loopback
 * address (127.0.0.2, as a device behind another IP would), sends /healthz and check-in
 * requests in turn, each on a fresh connection, and records their latencies: first a
 * baseline with no attack, then during each attack: slowloris (slow headers, -H), slow body
 * (R-U-Dead-Yet, -B, against POST /v1/checkin with a Content-Length under its cap) and slow
 * read (-X, GET /metrics). Checked: every legitimate request answered 200 (availability
 * 100%); the legitimate p99 within 2x the baseline p99 (with a 20 ms floor for timer noise
 * on a loaded machine; the CI profile only reports the ratio and checks p99 < 1 s); the
 * coordinator alive afterwards. Reported: the attack's connections as slowhttptest saw
 * them (the per-IP limit caps what one address holds).
 *
 * CI: slowloris and slow body, 6 s each, 200 connections. FL_RELIABILITY_PROFILE=long: the
 * three attacks, 20 s each, 400 connections. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "coord_testkit.h"
#include "rel_coord.h"

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

extern char **environ;

static const char *find_tool(const char *name, char *buf, size_t n) {
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t k = strcspn(path, ":");
        snprintf(buf, n, "%.*s/%s", (int)k, path, name);
        if (access(buf, X_OK) == 0)
            return buf;
        path += k;
        if (*path == ':')
            path++;
    }
    return NULL;
}

/* ---- the legitimate client ---- */

struct lat {
    double *v;
    size_t n, cap;
    int fails;
};

static void lat_add(struct lat *l, double s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = realloc(l->v, l->cap * sizeof(double));
        assert_non_null(l->v);
    }
    l->v[l->n++] = s;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double lat_q(struct lat *l, double q) {
    if (l->n == 0)
        return NAN;
    qsort(l->v, l->n, sizeof(double), cmp_d);
    size_t i = (size_t)ceil(q * (double)l->n) - 1;
    return l->v[i < l->n ? i : l->n - 1];
}

/* One request on a fresh connection from 127.0.0.2; latency in seconds, or -1. */
static double legit_one(unsigned port, const char *path, const char *tok, const char *body) {
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[256], auth[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    struct curl_slist *h = NULL;
    if (tok) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
        h = curl_slist_append(h, auth);
        h = curl_slist_append(h, "Content-Type: application/json");
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_INTERFACE, "host!127.0.0.2");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, NULL);
    FILE *null = fopen("/dev/null", "w");
    curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
    double t0 = rel_mono_s();
    CURLcode rc = curl_easy_perform(c);
    double dt = rel_mono_s() - t0;
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    if (null)
        fclose(null);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK || st != 200) {
        if (getenv("FL_TEST_VERBOSE"))
            fprintf(stderr, "legit %s: %s %ld\n", path, curl_easy_strerror(rc), st);
        return -1;
    }
    return dt;
}

static const char checkin_body[] =
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true}}";

/* Requests for `secs` seconds, about every 20 ms, alternating /healthz and a check-in. */
static void legit_run(struct fx *f, const char *tok, double secs, struct lat *hz, struct lat *ck) {
    double end = rel_mono_s() + secs;
    for (long i = 0; rel_mono_s() < end && i < 100000; i++) {
        double d = (i & 1) ? legit_one(f->port, "/v1/checkin", tok, checkin_body)
                           : legit_one(f->port, "/healthz", NULL, NULL);
        struct lat *l = (i & 1) ? ck : hz;
        if (d < 0)
            l->fails++;
        else
            lat_add(l, d);
        rel_sleep_ms(20);
    }
}

/* ---- slowhttptest ---- */

struct attack {
    const char *name;
    const char *mode; /* -H, -B, -X */
    const char *path;
    const char *verb; /* NULL: the tool's default */
};

/* Runs slowhttptest for secs against f in the background; returns its pid. */
static pid_t attack_start(struct fx *f, const char *tool, const struct attack *a, int conns,
                          int secs, const char *csv_prefix) {
    char url[128], c[16], l[16], r[16];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", f->port, a->path);
    snprintf(c, sizeof(c), "%d", conns);
    snprintf(l, sizeof(l), "%d", secs);
    snprintf(r, sizeof(r), "%d", conns); /* all connections within about a second */
    char *argv[40];
    int k = 0;
    argv[k++] = (char *)tool;
    argv[k++] = (char *)a->mode;
    argv[k++] = "-c";
    argv[k++] = c;
    argv[k++] = "-r";
    argv[k++] = r;
    argv[k++] = "-l";
    argv[k++] = l;
    argv[k++] = "-i";
    argv[k++] = "5";
    argv[k++] = "-u";
    argv[k++] = url;
    argv[k++] = "-p";
    argv[k++] = "3";
    argv[k++] = "-g";
    argv[k++] = "-o";
    argv[k++] = (char *)csv_prefix;
    if (a->verb) {
        argv[k++] = "-t";
        argv[k++] = (char *)a->verb;
    }
    if (strcmp(a->mode, "-B") == 0) {
        argv[k++] = "-s";
        argv[k++] = "8000"; /* under the check-in cap: the body is read, slowly */
        argv[k++] = "-f";
        argv[k++] = "application/json";
    }
    if (strcmp(a->mode, "-X") == 0) {
        argv[k++] = "-k";
        argv[k++] = "3";
        argv[k++] = "-n";
        argv[k++] = "2";
        argv[k++] = "-w";
        argv[k++] = "10";
        argv[k++] = "-y";
        argv[k++] = "20";
        argv[k++] = "-z";
        argv[k++] = "32";
    }
    argv[k] = NULL;
    char log[256];
    snprintf(log, sizeof(log), "%s.log", csv_prefix);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, tool, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    return pid;
}

/* Waits for the tool (at most secs + 15 s, then SIGKILL). */
static void attack_wait(pid_t pid, int secs) {
    int st;
    for (int i = 0; i < (secs + 15) * 10; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return;
        rel_sleep_ms(100);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

/* Largest "connected" count in slowhttptest's CSV (columns: seconds, closed, pending,
 * connected, service available), or -1. */
static int attack_max_connected(const char *csv_prefix) {
    char p[256], line[256];
    snprintf(p, sizeof(p), "%s.csv", csv_prefix);
    FILE *fp = fopen(p, "r");
    if (!fp)
        return -1;
    int best = -1;
    while (fgets(line, sizeof(line), fp)) {
        int sec, closed, pending, connected;
        if (sscanf(line, "%d,%d,%d,%d", &sec, &closed, &pending, &connected) == 4 &&
            connected > best)
            best = connected;
    }
    fclose(fp);
    return best;
}

static int slow_setup(void **state) {
    *state = fx_new();
    return 0;
}

static int slow_teardown(void **state) {
    fx_free(*state); /* kills a coordinator still running */
    return 0;
}

static void test_slow(void **state) {
    char tool[512];
    if (!find_tool("slowhttptest", tool, sizeof(tool))) {
        fprintf(stderr, "slowhttptest not installed (scripts/setup.sh --tests): skipped\n");
        fx_free(*state);
        exit(77);
    }
    int lng = rel_long();
    int secs = (int)rel_envl("FL_REL_SLOW_S", lng ? 20 : 6);
    int conns = (int)rel_envl("FL_REL_SLOW_CONNS", lng ? 400 : 200);
    struct fx *f = *state;
    /* FL_REL_SLOW_PER_IP: the per-IP limit (default 64; 0 = off, so one address can hold
     * every slow connection it opens). */
    long per_ip = rel_envl("FL_REL_SLOW_PER_IP", 64);
    char extra[96];
    snprintf(extra, sizeof(extra), "\"limits\":{\"per_ip_connections\":%ld}", per_ip);
    rel_proc_start(f, FL_COORD_EXE, extra);
    fprintf(stderr, "per-IP connection limit %ld%s\n", per_ip, per_ip ? "" : " (off)");
    char *tok[1];
    struct popcfg pc = {.name = "slow", .target = 1000, .min = 1, .secagg = false, .mode = "none"};
    setup_population(f, &pc, tok, 1);
    /* Is 127.0.0.2 usable as a source address here? */
    if (legit_one(f->port, "/healthz", NULL, NULL) < 0) {
        fprintf(stderr, "cannot connect from 127.0.0.2: skipped\n");
        free(tok[0]);
        fx_free(f);
        *state = NULL;
        exit(77);
    }
    struct lat bh = {0}, bc = {0};
    legit_run(f, tok[0], lng ? 8.0 : 3.0, &bh, &bc);
    double base_h = lat_q(&bh, 0.99), base_c = lat_q(&bc, 0.99);
    fprintf(stderr,
            "baseline (no attack): /healthz %zu requests p50 %.2f ms p99 %.2f ms; "
            "check-in %zu p50 %.2f ms p99 %.2f ms; failures %d\n",
            bh.n, 1e3 * lat_q(&bh, 0.5), 1e3 * base_h, bc.n, 1e3 * lat_q(&bc, 0.5), 1e3 * base_c,
            bh.fails + bc.fails);
    assert_int_equal(bh.fails + bc.fails, 0);
    static const struct attack attacks[] = {
        {"slowloris (slow headers)", "-H", "/healthz", NULL},
        {"slow body (R-U-Dead-Yet)", "-B", "/v1/checkin", "POST"},
        {"slow read", "-X", "/metrics", NULL},
    };
    int n_attacks = lng ? 3 : 2;
    for (int a = 0; a < n_attacks; a++) {
        char prefix[160];
        snprintf(prefix, sizeof(prefix), "%s/slow%d", f->dir, a);
        pid_t pid = attack_start(f, tool, &attacks[a], conns, secs, prefix);
        rel_sleep_ms(1500); /* let the connections open */
        struct lat h = {0}, c = {0};
        legit_run(f, tok[0], secs - 2.5, &h, &c);
        attack_wait(pid, secs);
        int held = attack_max_connected(prefix);
        double ph = lat_q(&h, 0.99), pcq = lat_q(&c, 0.99);
        fprintf(stderr,
                "%s, %d connections for %d s (at most %d connected at once): "
                "/healthz %zu requests p50 %.2f ms p99 %.2f ms (%.2fx baseline); check-in %zu "
                "p50 %.2f ms p99 %.2f ms (%.2fx); legitimate failures %d\n",
                attacks[a].name, conns, secs, held, h.n, 1e3 * lat_q(&h, 0.5), 1e3 * ph,
                ph / base_h, c.n, 1e3 * lat_q(&c, 0.5), 1e3 * pcq, pcq / base_c, h.fails + c.fails);
        assert_int_equal(h.fails + c.fails, 0);
        assert_true(h.n > 10 && c.n > 10);
        assert_true(ph < 1.0 && pcq < 1.0);
        if (lng) {
            assert_true(ph <= fmax(2 * base_h, base_h + 0.020));
            assert_true(pcq <= fmax(2 * base_c, base_c + 0.020));
        }
        free(h.v);
        free(c.v);
        char p[200];
        snprintf(p, sizeof(p), "%s.csv", prefix);
        unlink(p);
        snprintf(p, sizeof(p), "%s.html", prefix);
        unlink(p);
        snprintf(p, sizeof(p), "%s.log", prefix);
        unlink(p);
    }
    assert_int_equal(rel_healthz(f->port), 200);
    int st = fx_proc_signal(f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(bh.v);
    free(bc.v);
    free(tok[0]);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slow, slow_setup, slow_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
