/* Prometheus scrapes the real executable: `flotilla-coordinator serve` runs as a child
 * process, one secagg round with central DP completes, then a real `prometheus` server
 * (child process, temp config and TSDB, scraping 127.0.0.1:<port>/metrics every second) is
 * asked through its HTTP API until the target is up and the coordinator's metrics arrive:
 * completed rounds, clients per phase, dropouts, durations, bytes and epsilon spent. The
 * exposition is also linted with `promtool check metrics` when promtool is installed.
 * Skips (77) when prometheus is not installed (scripts/setup.sh --tests installs it). */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coord_testkit.h"

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

extern char **environ;

enum { N = 3 };

/* Full path of an executable found in PATH, or false. */
static bool in_path(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t k = strcspn(path, ":");
        snprintf(out, n, "%.*s/%s", (int)k, path, name);
        if (k && access(out, X_OK) == 0)
            return true;
        path += k + (path[k] == ':');
    }
    return false;
}

/* A TCP port that was free on 127.0.0.1 a moment ago. */
static unsigned free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    close(s);
    return ntohs(a.sin_port);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

struct prom {
    pid_t pid;
    unsigned port;
    char dir[64];
    char log[128];
};

static void prom_start(struct prom *pr, const char *exe, unsigned target_port) {
    snprintf(pr->dir, sizeof(pr->dir), "/tmp/fl-prom-XXXXXX");
    assert_non_null(mkdtemp(pr->dir));
    char conf[128], tsdb[128], listen[64], a1[192], a2[192], a3[96];
    snprintf(conf, sizeof(conf), "%s/prometheus.yml", pr->dir);
    snprintf(tsdb, sizeof(tsdb), "%s/data", pr->dir);
    snprintf(pr->log, sizeof(pr->log), "%s/prometheus.log", pr->dir);
    FILE *fp = fopen(conf, "w");
    assert_non_null(fp);
    fprintf(fp,
            "global:\n"
            "  scrape_interval: %lds\n"
            "  scrape_timeout: %lds\n"
            "scrape_configs:\n"
            "  - job_name: flotilla\n"
            "    metrics_path: /metrics\n"
            "    static_configs:\n"
            "      - targets: ['127.0.0.1:%u']\n",
            fl_test_scaled(1), fl_test_scaled(1), target_port);
    fclose(fp);
    pr->port = free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", pr->port);
    snprintf(a1, sizeof(a1), "--config.file=%s", conf);
    snprintf(a2, sizeof(a2), "--storage.tsdb.path=%s", tsdb);
    snprintf(a3, sizeof(a3), "--web.listen-address=%s", listen);
    char *argv[] = {(char *)exe, a1, a2, a3, "--log.level=warn", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, pr->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&pr->pid, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
}

static void prom_stop(struct prom *pr) {
    if (pr->pid > 0) {
        int st;
        kill(pr->pid, SIGTERM);
        while (waitpid(pr->pid, &st, 0) < 0 && errno == EINTR)
            ;
        pr->pid = 0;
    }
    if (pr->dir[0])
        nftw(pr->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Runs an instant query against Prometheus; returns the first sample's value, or NAN when
 * the query has no result yet (or Prometheus is not answering yet). */
static double prom_query(struct fx *f, struct prom *pr, const char *query) {
    char path[512];
    char *esc = curl_easy_escape(NULL, query, 0);
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", esc);
    curl_free(esc);
    /* http_req asserts a connection: probe readiness with a raw handle first. */
    CURL *c = curl_easy_init();
    char url[600];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/-/ready", pr->port);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, fl_test_scaled(5));
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    if (cc != CURLE_OK || code != 200)
        return NAN;
    unsigned saved = f->port;
    f->port = pr->port;
    struct resp r = http_req(f, "GET", path, NULL, NULL, NULL, 0, NULL);
    f->port = saved;
    double v = NAN;
    if (r.status == 200) {
        json_t *j = body_json(&r);
        json_t *res = json_object_get(json_object_get(j, "data"), "result");
        json_t *val = json_object_get(json_array_get(res, 0), "value");
        const char *s = json_string_value(json_array_get(val, 1));
        if (s)
            v = strtod(s, NULL);
        json_decref(j);
    }
    resp_free(&r);
    return v;
}

/* Polls query until its value satisfies pred (up to 30 s times FL_TEST_TIME_SCALE). */
static double prom_wait(struct fx *f, struct prom *pr, const char *query, double at_least) {
    double v = NAN;
    for (long i = 0; i < fl_test_scaled(300); i++) {
        v = prom_query(f, pr, query);
        if (!isnan(v) && v >= at_least)
            return v;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "prometheus: '%s' = %g (wanted >= %g); see %s\n", query, v, at_least,
            pr->log);
    fail();
    return v;
}

static char g_prom[512], g_promtool[512];

static int setup(void **state) {
    *state = fx_new();
    return 0;
}

static int teardown(void **state) {
    fx_free(*state);
    return 0;
}

static void test_prometheus_scrape(void **state) {
    struct fx *f = *state;
    fx_proc_start(f, FL_COORD_EXE);
    /* One completed central-DP secagg round, so every family has a value. */
    struct popcfg pc = {.name = "prom", .target = N, .min = 3, .secagg = true, .neighbors = 2,
                        .mode = "central", .budget = 1000.0};
    struct tc c[N];
    setup_devices(f, &pc, c, N);
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    json_t *o = run_secagg(f, c, N, rid);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
    json_decref(o);

    /* The exposition itself: the families the operator dashboards need. */
    struct resp r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    static const char *const want[] = {
        "flotilla_rounds_total{outcome=\"completed\"} 1",
        "flotilla_population_rounds_total{population=\"prom\",outcome=\"completed\"} 1",
        "flotilla_round_participants{population=\"prom\",phase=\"masked\"} 3",
        "flotilla_round_participants{population=\"prom\",phase=\"selected\"} 3",
        "flotilla_dropouts_total{population=\"prom\",phase=\"share\"} 0",
        "flotilla_round_duration_seconds_count{outcome=\"completed\"} 1",
        "flotilla_aggregation_seconds_count 1",
        "flotilla_update_bytes_total ",
        "flotilla_request_body_bytes_total ",
        "flotilla_response_body_bytes_total ",
        "flotilla_privacy_epsilon_spent{population=\"prom\"} ",
        "flotilla_privacy_epsilon_budget{population=\"prom\"} 1000",
        "flotilla_model_version{population=\"prom\"} 2",
        "\nflotilla_storage_wal_frames ",
        "\nflotilla_storage_checkpoints_total ",
        "\nflotilla_storage_checkpoint_failures_total 0\n",
        "\nflotilla_storage_checkpoint_failing 0\n",
        "\nflotilla_http_requests_in_flight ",
        NULL};
    for (size_t i = 0; want[i]; i++) {
        if (!strstr(r.body, want[i]))
            fprintf(stderr, "missing in /metrics: %s\n%s\n", want[i], r.body);
        assert_non_null(strstr(r.body, want[i]));
    }
    /* The scrape itself at least; the previous request may not have completed yet (its
     * completion callback runs after the client has read its answer). */
    const char *inf = strstr(r.body, "\nflotilla_http_requests_in_flight ");
    assert_true(strtol(inf + strlen("\nflotilla_http_requests_in_flight "), NULL, 10) >= 1);
    if (g_promtool[0]) {
        /* promtool check metrics reads the exposition on stdin; exit 0 = well-formed. */
        char p[192];
        snprintf(p, sizeof(p), "%s/metrics.txt", f->dir);
        FILE *fp = fopen(p, "w");
        assert_non_null(fp);
        fwrite(r.body, 1, r.len, fp);
        fclose(fp);
        char *argv[] = {g_promtool, "check", "metrics", NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, p, O_RDONLY, 0);
        pid_t pid;
        assert_int_equal(posix_spawn(&pid, g_promtool, &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        unlink(p);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "promtool check metrics failed (status %d)\n", st);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    resp_free(&r);

    struct prom pr;
    memset(&pr, 0, sizeof(pr));
    prom_start(&pr, g_prom, f->port);
    double up = prom_wait(f, &pr, "up{job=\"flotilla\"}", 1);
    assert_true(up == 1);
    double done = prom_wait(f, &pr, "flotilla_rounds_total{outcome=\"completed\"}", 1);
    assert_true(done == 1);
    double eps = prom_wait(f, &pr, "flotilla_privacy_epsilon_spent{population=\"prom\"}", 0);
    assert_true(eps > 0 && eps < 1000);
    double masked = prom_wait(f, &pr,
                              "flotilla_round_participants{population=\"prom\",phase=\"masked\"}",
                              3);
    assert_true(masked == 3);
    prom_stop(&pr);
    int st = fx_proc_signal(f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    clients_free(c, N);
}

int main(void) {
    if (!in_path("prometheus", g_prom, sizeof(g_prom))) {
        printf("SKIP: prometheus is not installed (bash scripts/setup.sh --tests)\n");
        return 77;
    }
    if (!in_path("promtool", g_promtool, sizeof(g_promtool)))
        g_promtool[0] = '\0';
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prometheus_scrape, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
