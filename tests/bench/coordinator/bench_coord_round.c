/* One federated round's coordinator-side wall time and peak RSS, against the real
 * flotilla-coordinator executable (a child process on an ephemeral 127.0.0.1 port with a
 * temporary database).
 *
 *   bench_coord_round [--n N] [--d D] [--secagg 0|1] [--rounds R] [--threads T]
 *                     [--exe PATH] [--json]
 *
 * N stand-in devices (one thread, one keep-alive libcurl handle, requests in sequence) run
 * R rounds each: check-in, signed task, then the plain update (secagg 0) or the four SecAgg+
 * phases (secagg 1, the secagg client state machine). Every update is a fixed random vector
 * (no training), encoded before the timer starts. The device-side compute inside the round
 * (secagg client key agreement, masking, share handling) is timed separately and
 * subtracted: the reported coordinator time is round wall time minus device compute, i.e.
 * HTTP on loopback plus all server work (selection, secagg server, aggregation, commit).
 * coordinator_cpu_s is the CPU time (user + system) the coordinator process used per round,
 * which varies less than wall time on a loaded machine. Peak RSS is the child's VmHWM from
 * /proc. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>

#include "flotilla/secagg.h"

#ifndef FL_COORD_EXE
#define FL_COORD_EXE "flotilla-coordinator"
#endif

extern char **environ;

#define ADMIN "fla_bench-admin-token-0123456789abcdefgh"

static void die(const char *msg) {
    fprintf(stderr, "bench_coord_round: %s\n", msg);
    exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- HTTP (one keep-alive handle) ---- */

struct buf {
    char *p;
    size_t n, cap;
};

static size_t on_data(char *p, size_t sz, size_t n, void *u) {
    struct buf *b = u;
    size_t k = sz * n;
    if (b->n + k + 1 > b->cap) {
        size_t nc = (b->n + k + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np)
            return 0;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, k);
    b->n += k;
    b->p[b->n] = '\0';
    return k;
}

static CURL *g_curl;
static unsigned g_port;
static struct buf g_body;

static long req(const char *method, const char *path, const char *token, const char *ctype,
                const void *body, size_t len, const char *pid) {
    char url[256], h1[300], h2[128], h3[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", g_port, path);
    struct curl_slist *h = NULL;
    if (token) {
        snprintf(h1, sizeof(h1), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, h1);
    }
    if (ctype) {
        snprintf(h2, sizeof(h2), "Content-Type: %s", ctype);
        h = curl_slist_append(h, h2);
    }
    if (pid) {
        snprintf(h3, sizeof(h3), "Idempotency-Key: %s", pid);
        h = curl_slist_append(h, h3);
    }
    h = curl_slist_append(h, "Expect:");
    g_body.n = 0;
    if (g_body.p)
        g_body.p[0] = '\0';
    curl_easy_setopt(g_curl, CURLOPT_URL, url);
    curl_easy_setopt(g_curl, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(g_curl, CURLOPT_POST, 1L);
        curl_easy_setopt(g_curl, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(g_curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
    } else {
        curl_easy_setopt(g_curl, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(g_curl, CURLOPT_HTTPHEADER, h);
    CURLcode rc = curl_easy_perform(g_curl);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        fprintf(stderr, "%s %s: %s\n", method, path, curl_easy_strerror(rc));
        die("request failed");
    }
    long st = 0;
    curl_easy_getinfo(g_curl, CURLINFO_RESPONSE_CODE, &st);
    return st;
}

static json_t *req_json(long want, const char *method, const char *path, const char *token,
                        const char *json, const char *pid) {
    long st = req(method, path, token, json ? "application/json" : NULL, json,
                  json ? strlen(json) : 0, pid);
    if (st != want) {
        fprintf(stderr, "%s %s: %ld (want %ld): %.300s\n", method, path, st, want,
                g_body.p ? g_body.p : "");
        die("unexpected status");
    }
    json_t *j = json_loadb(g_body.p ? g_body.p : "", g_body.n, 0, NULL);
    if (!j)
        die("answer is not JSON");
    return j;
}

/* ---- child process ---- */

static pid_t g_child;
static char g_dir[64];

static long rss_kb(const char *field) {
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)g_child);
    FILE *f = fopen(p, "r");
    long v = -1;
    if (!f)
        return v;
    size_t fl = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            v = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    return v;
}

/* CPU seconds (user + system) the child has used so far, from /proc/<pid>/stat. Less
 * sensitive than wall time to other work on a shared machine. */
static double cpu_s(void) {
    char p[64], line[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)g_child);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    double v = 0;
    if (fgets(line, sizeof(line), f)) {
        char *s = strrchr(line, ')');
        unsigned long ut = 0, st = 0;
        /* fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt
         * majflt cmajflt utime stime */
        if (s && sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                        &st) == 2)
            v = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    fclose(f);
    return v;
}

static void cleanup(void) {
    if (g_child > 0) {
        int st;
        kill(g_child, SIGTERM);
        waitpid(g_child, &st, 0);
        g_child = 0;
    }
    if (g_dir[0]) {
        char p[160];
        static const char *const names[] = {"coord.db", "coord.db-wal", "coord.db-shm",
                                            "c.json", "serve.log", NULL};
        for (int i = 0; names[i]; i++) {
            snprintf(p, sizeof(p), "%s/%s", g_dir, names[i]);
            unlink(p);
        }
        rmdir(g_dir);
    }
}

static void start_coordinator(const char *exe, unsigned threads) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/fl-bench-round-XXXXXX");
    if (!mkdtemp(g_dir))
        die("mkdtemp");
    uint8_t h[32];
    char hex[65], conf[160], log[160];
    crypto_hash_sha256(h, (const uint8_t *)ADMIN, strlen(ADMIN));
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    snprintf(conf, sizeof(conf), "%s/c.json", g_dir);
    snprintf(log, sizeof(log), "%s/serve.log", g_dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        die("config");
    fprintf(f, "{\"database\":\"%s/coord.db\",\"port\":0,\"threads\":%u,"
               "\"admin_token_sha256\":\"%s\",\"log_level\":\"info\","
               "\"limits\":{\"per_ip_connections\":0,\"model_bytes\":1000000000}}\n",
            g_dir, threads, hex);
    fclose(f);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)exe, "serve", "--config", conf, NULL};
    if (posix_spawn(&g_child, exe, &fa, NULL, argv, environ) != 0)
        die("cannot start flotilla-coordinator (--exe)");
    posix_spawn_file_actions_destroy(&fa);
    /* The executable logs "listening on 127.0.0.1:<port>" at info level. */
    for (int i = 0; i < 200 && !g_port; i++) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        FILE *lf = fopen(log, "r");
        char line[1024];
        while (lf && fgets(line, sizeof(line), lf)) {
            char *s = strstr(line, "listening on 127.0.0.1:");
            if (s)
                g_port = (unsigned)strtoul(s + 23, NULL, 10);
        }
        if (lf)
            fclose(lf);
    }
    if (!g_port)
        die("the coordinator did not report its port");
}

/* ---- the round ---- */

struct dev {
    char tok[128];
    char pid[40];
    int64_t rid;
    uint32_t index, n, k, t;
    fl_secagg_client *sa;
    const uint8_t *out;
    size_t out_len;
};

int main(int argc, char **argv) {
    unsigned n = 100, threads = 4, rounds = 1;
    size_t d = 10000;
    int secagg = 0, as_json = 0;
    const char *exe = FL_COORD_EXE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--d") == 0 && i + 1 < argc)
            d = (size_t)strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--secagg") == 0 && i + 1 < argc)
            secagg = strcmp(argv[++i], "0") != 0;
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--exe") == 0 && i + 1 < argc)
            exe = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else {
            fprintf(stderr, "usage: %s [--n N] [--d D] [--secagg 0|1] [--rounds R] "
                            "[--threads T] [--exe PATH] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (n < 2 || d < 1 || rounds < 1)
        die("bad arguments");
    if (sodium_init() < 0)
        die("sodium");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_curl = curl_easy_init();
    curl_easy_setopt(g_curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(g_curl, CURLOPT_WRITEDATA, &g_body);
    curl_easy_setopt(g_curl, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(g_curl, CURLOPT_TIMEOUT, 600L);
    start_coordinator(exe, threads);
    atexit(cleanup);

    /* Population, model (d zeros in "w"), n enrolled devices: not timed. */
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"name\":\"bench\",\"allowed_regions\":[\"*\"],"
             "\"selection\":{\"target\":%u,\"over_selection\":1.0,\"min_participants\":%u,"
             "\"require\":[],\"forming_s\":3600,\"jitter_s\":0,\"min_retry_s\":1},"
             "\"deadlines_s\":{\"advertise\":3600,\"share\":3600,\"masked\":3600,"
             "\"unmask\":3600},\"update\":{\"tensors\":[\"w\"]},"
             "\"secagg\":{\"enabled\":%s},\"privacy\":{\"mode\":\"none\",\"modulus_bits\":32}}",
             n, n, secagg ? "true" : "false");
    json_t *j = req_json(201, "POST", "/v1/admin/populations", ADMIN, body, NULL);
    char etok[128];
    snprintf(etok, sizeof(etok), "%s", json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    char hdr[160];
    int hl = snprintf(hdr, sizeof(hdr),
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", d,
                      d * 4);
    size_t mlen = 8 + (size_t)hl + d * 4;
    uint8_t *model = calloc(1, mlen);
    for (int b = 0; b < 8; b++)
        model[b] = (uint8_t)((uint64_t)hl >> (8 * b));
    memcpy(model + 8, hdr, (size_t)hl);
    if (req("POST", "/v1/admin/populations/bench/models", ADMIN, "application/octet-stream",
            model, mlen, NULL) != 201)
        die("model upload");
    free(model);
    json_decref(req_json(200, "POST", "/v1/admin/populations/bench/start", ADMIN, NULL, NULL));
    struct dev *dv = calloc(n, sizeof(*dv));
    for (unsigned i = 0; i < n; i++) {
        j = req_json(201, "POST", "/v1/enroll", etok,
                     "{\"population\":\"bench\",\"region\":\"EU\"}", NULL);
        snprintf(dv[i].tok, sizeof(dv[i].tok), "%s",
                 json_string_value(json_object_get(j, "client_token")));
        json_decref(j);
    }
    /* Fixed random update vectors (d words + the weight 1), encoded before the clock. */
    size_t L = d + 1;
    uint32_t *vec = malloc((size_t)n * L * sizeof(uint32_t));
    if (!vec)
        die("out of memory");
    randombytes_buf(vec, (size_t)n * L * sizeof(uint32_t));
    for (unsigned i = 0; i < n; i++) {
        for (size_t k = 0; k < d; k++)
            vec[(size_t)i * L + k] %= 2001; /* small values, as quantized deltas */
        vec[(size_t)i * L + d] = 1;
    }
    long rss_setup = rss_kb("VmRSS");
    const char *checkin = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                          "\"unmetered\":true,\"idle\":true}}";
    static const char *phases[4] = {"advertise", "share", "masked", "unmask"};
    double total_wall = 0, total_client = 0, cpu0 = cpu_s();
    double phase_wall[6] = {0};
    for (unsigned round = 0; round < rounds; round++) {
        double client = 0, t0 = now_s(), tp = t0;
        for (unsigned i = 0; i < n; i++) {
            j = req_json(200, "POST", "/v1/checkin", dv[i].tok, checkin, NULL);
            if (strcmp(json_string_value(json_object_get(j, "status")), "selected") != 0)
                die("a device was not selected");
            snprintf(dv[i].pid, sizeof(dv[i].pid), "%s",
                     json_string_value(json_object_get(j, "participation_id")));
            dv[i].rid = json_integer_value(json_object_get(j, "round_id"));
            json_decref(j);
        }
        char path[160];
        snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)dv[0].rid);
        for (unsigned i = 0; i < n; i++) {
            j = req_json(200, "GET", path, dv[i].tok, NULL, dv[i].pid);
            json_t *sa = json_object_get(j, "secagg");
            dv[i].index = (uint32_t)json_integer_value(json_object_get(sa, "client_index"));
            dv[i].n = (uint32_t)json_integer_value(json_object_get(sa, "num_clients"));
            dv[i].k = (uint32_t)json_integer_value(json_object_get(sa, "neighbors"));
            dv[i].t = (uint32_t)json_integer_value(json_object_get(sa, "threshold"));
            if ((size_t)json_integer_value(json_object_get(json_object_get(j, "update"),
                                                           "length")) != L)
                die("unexpected update length");
            json_decref(j);
        }
        phase_wall[0] += now_s() - tp;
        tp = now_s();
        if (!secagg) {
            snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)dv[0].rid);
            for (unsigned i = 0; i < n; i++) {
                long st = req("POST", path, dv[i].tok, "application/octet-stream",
                              vec + (size_t)i * L, L * 4, dv[i].pid); /* LE host */
                if (st != 202)
                    die("update refused");
            }
            phase_wall[3] += now_s() - tp;
            tp = now_s();
            snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=60", (long long)dv[0].rid);
            j = req_json(200, "GET", path, dv[0].tok, NULL, dv[0].pid);
            if (strcmp(json_string_value(json_object_get(j, "state")), "completed") != 0)
                die("round did not complete");
            json_decref(j);
            phase_wall[5] += now_s() - tp;
        } else {
            for (unsigned i = 0; i < n; i++) {
                double c0 = now_s();
                fl_secagg_config cfg;
                fl_secagg_config_init(&cfg);
                cfg.num_clients = dv[i].n;
                cfg.dim = (uint32_t)L;
                cfg.bits = 32;
                cfg.degree = dv[i].k;
                cfg.threshold = dv[i].t;
                if (fl_secagg_client_create(&dv[i].sa, &cfg, (uint64_t)dv[i].rid, dv[i].index,
                                            NULL, NULL) != FL_OK ||
                    fl_secagg_client_set_input(dv[i].sa, vec + (size_t)i * L, L) != FL_OK ||
                    fl_secagg_client_start(dv[i].sa, &dv[i].out, &dv[i].out_len) != FL_OK)
                    die("secagg client");
                client += now_s() - c0;
            }
            for (int ph = 0; ph < 4; ph++) {
                char pp[160], rp[160];
                snprintf(pp, sizeof(pp), "/v1/rounds/%lld/secagg/%s", (long long)dv[0].rid,
                         phases[ph]);
                snprintf(rp, sizeof(rp), "/v1/rounds/%lld/secagg/%s/result?wait=60",
                         (long long)dv[0].rid, phases[ph]);
                for (unsigned i = 0; i < n; i++)
                    if (req("POST", pp, dv[i].tok, "application/octet-stream", dv[i].out,
                            dv[i].out_len, dv[i].pid) != 202) {
                        fprintf(stderr, "%s: %.300s\n", phases[ph], g_body.p);
                        die("phase post refused");
                    }
                for (unsigned i = 0; i < n; i++) {
                    long st = req("GET", rp, dv[i].tok, NULL, NULL, 0, dv[i].pid);
                    if (st != 200)
                        die("phase result");
                    if (ph == 3) {
                        if (i == 0 && !strstr(g_body.p, "\"completed\""))
                            die("round did not complete");
                        continue;
                    }
                    double c0 = now_s();
                    if (fl_secagg_client_handle(dv[i].sa, (const uint8_t *)g_body.p, g_body.n,
                                                &dv[i].out, &dv[i].out_len) != FL_OK)
                        die("secagg client handle");
                    client += now_s() - c0;
                }
                phase_wall[1 + ph] += now_s() - tp;
                tp = now_s();
            }
            for (unsigned i = 0; i < n; i++) {
                fl_secagg_client_destroy(dv[i].sa);
                dv[i].sa = NULL;
            }
        }
        total_wall += now_s() - t0;
        total_client += client;
    }
    long hwm = rss_kb("VmHWM");
    double coord_cpu = (cpu_s() - cpu0) / rounds;
    double wall = total_wall / rounds, cli = total_client / rounds, coord = wall - cli;
    if (as_json) {
        printf("{\"bench\":\"coordinator_round\",\"n\":%u,\"d\":%zu,\"secagg\":%s,\"rounds\":%u,"
               "\"threads\":%u,\"round_wall_s\":%.4f,\"device_compute_s\":%.4f,"
               "\"coordinator_s\":%.4f,\"rounds_per_s\":%.4f,\"coordinator_cpu_s\":%.4f,"
               "\"coordinator_rss_setup_kb\":%ld,"
               "\"coordinator_peak_rss_kb\":%ld,\"phase_wall_s\":{\"select_task\":%.4f,"
               "\"advertise\":%.4f,\"share\":%.4f,\"masked_or_update\":%.4f,\"unmask\":%.4f,"
               "\"status\":%.4f}}\n",
               n, d, secagg ? "true" : "false", rounds, threads, wall, cli, coord,
               coord > 0 ? 1.0 / coord : 0.0, coord_cpu, rss_setup, hwm, phase_wall[0] / rounds,
               phase_wall[1] / rounds, phase_wall[2] / rounds, phase_wall[3] / rounds,
               phase_wall[4] / rounds, phase_wall[5] / rounds);
    } else {
        printf("n=%u d=%zu secagg=%s: round %.3f s, device compute %.3f s, coordinator %.3f s "
               "(%.2f rounds/s; %.3f s of its CPU), coordinator RSS %ld kB after setup, peak "
               "%ld kB\n",
               n, d, secagg ? "on" : "off", wall, cli, coord, coord > 0 ? 1.0 / coord : 0.0,
               coord_cpu, rss_setup, hwm);
    }
    free(vec);
    free(dv);
    free(g_body.p);
    curl_easy_cleanup(g_curl);
    curl_global_cleanup();
    return 0;
}
