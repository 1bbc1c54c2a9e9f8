/* One federated round's coordinator-side wall time and peak RSS, against the real
 * flotilla-coordinator executable (a child process on an ephemeral 127.0.0.1 port with a
 * temporary database).
 *
 *   bench_coord_round [--n N] [--d D] [--secagg 0|1] [--fedbuff 0|1] [--rounds R]
 *                     [--threads T] [--concurrency C] [--distinct M] [--exe PATH]
 *                     [--dir DIR] [--same-session] [--unmask-threads U] [--json]
 *
 * N stand-in devices run R rounds each: check-in, signed task, then the plain update
 * (secagg 0) or the four SecAgg+ phases (secagg 1, the secagg client state machine).
 * --fedbuff 1 (with secagg 0) makes the population asynchronous (FedBuff, buffer size K = N,
 * docs/protocol.md 5.4): the same steps, and a "round" is one buffer, applied when its N-th
 * update arrives (the status wait is left out: that upload's answer comes after it). All
 * devices live in this one thread; their requests go over C keep-alive libcurl connections
 * (the multi interface): C = 1 sends one request at a time (the default, as in the earlier
 * figures); C > 1 keeps up to C requests in flight, as concurrent devices would. Every step
 * is a barrier: all N check-ins, then all N task fetches, then all N uploads (or, per secagg
 * phase, all N posts, then all N result fetches). Every update is a fixed random vector (no
 * training), encoded before the timer starts; --distinct M keeps only M different vectors
 * (device i sends vector i mod M; default M = N), so that N x d beyond this machine's memory
 * (N = 5000, d = 1e6 is 20 GB of updates) still runs: the coordinator sees the same bytes.
 * The device-side compute inside the round (secagg client key agreement, masking, share
 * handling) is timed separately and subtracted: the reported coordinator time is round wall
 * time minus device compute, i.e. HTTP on loopback plus all server work (selection, secagg
 * server, aggregation, commit).
 * coordinator_cpu_s is the CPU time (user + system) the coordinator process used per round,
 * which varies less than wall time on a loaded machine. Per-round figures are in the JSON
 * arrays, with their medians. Peak RSS is the child's VmHWM from /proc; the secagg
 * parameters the coordinator chose (neighbours k, threshold t) are reported so that a
 * reference run (flower_round.py) can use the same. The coordinator's database goes in a
 * fresh directory under DIR (default /tmp, on disk here: its commits are real fsyncs; a
 * tmpfs such as /dev/shm shows what the fsyncs cost).
 *
 * The coordinator runs in a session of its own, as a service does, with the devices on
 * other machines. Linux with sched_autogroup_enabled (the default on desktop and many VM
 * kernels) schedules each session as one group: in this process's session, the stand-in
 * devices and the coordinator shared one group's CPU share, and on a machine busy with other
 * sessions' work the C = 16 rounds at d = 1e5 took 2-3x as long as C = 1 with the same CPU
 * time: one request at a time, the group mostly sleeps between short bursts and is run as
 * soon as it wakes, while 16 uploads in flight keep it runnable and it waits its turn behind
 * the other groups (the coordinator's run-queue wait went from 0.02-0.05 s to 0.3-1.0 s a
 * round). --same-session keeps the old arrangement, to show that. Per round the JSON also
 * has the coordinator's minor page faults, context switches and run-queue wait, and the
 * stand-in devices' CPU and run-queue wait (this process), so a slow round says whether the
 * coordinator worked, waited for a lock or waited for a CPU. --unmask-threads U sets the
 * coordinator's secagg.unmask_threads (0, the default: leave the coordinator's own). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>

#include "flotilla/secagg.h"

#define BENCH_NAME "bench_coord_round"
#include "bench_util.h"

#ifndef FL_COORD_EXE
#define FL_COORD_EXE "flotilla-coordinator"
#endif

#define ADMIN "fla_bench-admin-token-0123456789abcdefgh"

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
        bench_die("request failed", NULL);
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
        bench_die("unexpected status", NULL);
    }
    json_t *j = json_loadb(g_body.p ? g_body.p : "", g_body.n, 0, NULL);
    if (!j)
        bench_die("answer is not JSON", NULL);
    return j;
}

/* ---- child process ---- */

static pid_t g_child;
static char g_dir[256];
static bool g_same_session; /* --same-session: the coordinator stays in this session */

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

/* CPU seconds a process has used so far (*run) and seconds its threads spent runnable but
 * waiting for a CPU (*wait): sums over its threads of the first two fields of
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds; /proc/<pid>/stat counts 10 ms ticks, too
 * coarse for one round). CPU time is less sensitive than wall time to other work on a shared
 * machine; the wait shows how much of the wall time went to other processes' turns. */
static void sched_s(pid_t pid, double *run, double *wait) {
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/task", (int)pid);
    *run = *wait = 0;
    DIR *dir = opendir(p);
    if (!dir)
        return;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char q[128];
        snprintf(q, sizeof(q), "%s/%.20s/schedstat", p, e->d_name);
        FILE *f = fopen(q, "r");
        unsigned long long ns = 0, wns = 0;
        if (f && fscanf(f, "%llu %llu", &ns, &wns) == 2) {
            *run += (double)ns / 1e9;
            *wait += (double)wns / 1e9;
        }
        if (f)
            fclose(f);
    }
    closedir(dir);
}

static double cpu_s(void) {
    double run, wait;
    sched_s(g_child, &run, &wait);
    return run;
}

/* Minor page faults of the whole child (field 10 of /proc/<pid>/stat counts every thread of
 * the process) and its context switches (voluntary + involuntary, summed over
 * /proc/<pid>/task/<tid>/status: the process's own status has the main thread's only).
 * They tell allocation churn (fresh pages for every body) and lock or I/O waits apart from
 * plain CPU work. */
static double minflt(void) {
    char p[64], line[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)g_child);
    FILE *f = fopen(p, "r");
    double v = 0;
    if (!f)
        return v;
    if (fgets(line, sizeof(line), f)) {
        /* After "pid (comm) ": state is field 3, minflt field 10. */
        char *s = strrchr(line, ')');
        unsigned long long x = 0;
        if (s && sscanf(s + 1, " %*c %*d %*d %*d %*d %*d %*u %llu", &x) == 1)
            v = (double)x;
    }
    fclose(f);
    return v;
}

static double ctxsw(void) {
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/task", (int)g_child);
    DIR *dir = opendir(p);
    if (!dir)
        return 0;
    double v = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char q[128], line[256];
        snprintf(q, sizeof(q), "%s/%.20s/status", p, e->d_name);
        FILE *f = fopen(q, "r");
        while (f && fgets(line, sizeof(line), f)) {
            unsigned long long x = 0;
            if (sscanf(line, "voluntary_ctxt_switches: %llu", &x) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %llu", &x) == 1)
                v += (double)x;
        }
        if (f)
            fclose(f);
    }
    closedir(dir);
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
        char p[300];
        static const char *const names[] = {"coord.db", "coord.db-wal", "coord.db-shm",
                                            "c.json",   "serve.log",    NULL};
        for (int i = 0; names[i]; i++) {
            snprintf(p, sizeof(p), "%s/%s", g_dir, names[i]);
            unlink(p);
        }
        rmdir(g_dir);
    }
}

static void start_coordinator(const char *exe, unsigned threads, unsigned unmask_threads,
                              const char *base) {
    if ((size_t)snprintf(g_dir, sizeof(g_dir), "%s/fl-bench-round-XXXXXX", base) >=
        sizeof(g_dir) - 20)
        bench_die("--dir: path too long", NULL);
    if (!mkdtemp(g_dir))
        bench_die("mkdtemp", NULL);
    uint8_t h[32];
    char hex[65], conf[300], log[300];
    crypto_hash_sha256(h, (const uint8_t *)ADMIN, strlen(ADMIN));
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    snprintf(conf, sizeof(conf), "%s/c.json", g_dir);
    snprintf(log, sizeof(log), "%s/serve.log", g_dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        bench_die("config", NULL);
    fprintf(f,
            "{\"database\":\"%s/coord.db\",\"port\":0,\"threads\":%u,"
            "\"admin_token_sha256\":\"%s\",\"log_level\":\"info\","
            "\"limits\":{\"per_ip_connections\":0,\"model_bytes\":1000000000}",
            g_dir, threads, hex);
    if (unmask_threads)
        fprintf(f, ",\"secagg\":{\"unmask_threads\":%u}", unmask_threads);
    fprintf(f, "}\n");
    fclose(f);
    char *argv[] = {(char *)exe, "serve", "--config", conf, NULL};
    if (access(exe, X_OK) != 0)
        bench_die("cannot start flotilla-coordinator (--exe)", NULL);
    int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (lfd < 0)
        bench_die("cannot create the coordinator's log", NULL);
    pid_t parent = getpid();
    g_child = fork();
    if (g_child < 0)
        bench_die("fork", NULL);
    if (g_child == 0) {
        /* Only async-signal-safe calls until exec. Its own session (own scheduler
         * autogroup; see the header) unless --same-session; it gets SIGTERM if this process
         * dies without cleanup (a signal), as Ctrl-C no longer reaches it. */
        static const char fail[] = "bench_coord_round: exec of the coordinator failed\n";
        if (!g_same_session)
            setsid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        if (dup2(lfd, 2) == 2) {
            execv(exe, argv);
            ssize_t w = write(2, fail, sizeof(fail) - 1);
            (void)w;
        }
        _exit(127);
    }
    close(lfd);
    /* The executable logs "listening on 127.0.0.1:<port>" at info level (60 s at most: a
     * sanitizer build on a loaded machine starts slowly). */
    for (int i = 0; i < 1200 && !g_port; i++) {
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
        int st;
        if (!g_port && waitpid(g_child, &st, WNOHANG) == g_child) {
            g_child = 0;
            fprintf(stderr, "bench_coord_round: the coordinator exited; its log:\n");
            FILE *ef = fopen(log, "r");
            char el[1024];
            while (ef && fgets(el, sizeof(el), ef))
                fputs(el, stderr);
            if (ef)
                fclose(ef);
            exit(1);
        }
    }
    if (!g_port)
        bench_die("the coordinator did not report its port", NULL);
}

/* ---- concurrent requests (libcurl multi, C connections) ---- */

/* One request of a batch, filled in by the batch's prep callback. */
struct call {
    const char *method; /* "GET" or "POST" */
    char path[192];     /* path and query */
    const char *token;  /* bearer token, or NULL */
    const char *ctype;  /* Content-Type, or NULL */
    const void *body;   /* POST body, alive until the batch returns */
    size_t len;         /* bytes of body */
    const char *pid;    /* Idempotency-Key (participation id), or NULL */
};

/* One keep-alive connection of the pool. */
struct conn {
    CURL *h;               /* easy handle, reused across requests */
    struct buf b;          /* answer body of the request in flight */
    struct curl_slist *hl; /* its header list */
    unsigned item;         /* index in the batch of the request in flight */
};

typedef void (*prep_fn)(unsigned i, struct call *c, void *u);
typedef void (*done_fn)(unsigned i, long status, const struct buf *b, void *u);

static CURLM *g_multi;
static struct conn *g_conns;
static unsigned g_nconns;

static void conns_open(unsigned c) {
    g_multi = curl_multi_init();
    g_conns = calloc(c, sizeof(*g_conns));
    if (!g_multi || !g_conns)
        bench_die("out of memory", NULL);
    g_nconns = c;
    for (unsigned k = 0; k < c; k++) {
        CURL *h = curl_easy_init();
        if (!h)
            bench_die("curl_easy_init", NULL);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &g_conns[k].b);
        curl_easy_setopt(h, CURLOPT_PRIVATE, &g_conns[k]);
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 600L);
        g_conns[k].h = h;
    }
}

static void conns_close(void) {
    for (unsigned k = 0; k < g_nconns; k++) {
        curl_easy_cleanup(g_conns[k].h);
        free(g_conns[k].b.p);
    }
    free(g_conns);
    curl_multi_cleanup(g_multi);
}

static void conn_arm(struct conn *c, const struct call *k) {
    char url[256], h[300];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", g_port, k->path);
    c->hl = NULL;
    if (k->token) {
        snprintf(h, sizeof(h), "Authorization: Bearer %s", k->token);
        c->hl = curl_slist_append(c->hl, h);
    }
    if (k->ctype) {
        snprintf(h, sizeof(h), "Content-Type: %s", k->ctype);
        c->hl = curl_slist_append(c->hl, h);
    }
    if (k->pid) {
        snprintf(h, sizeof(h), "Idempotency-Key: %s", k->pid);
        c->hl = curl_slist_append(c->hl, h);
    }
    c->hl = curl_slist_append(c->hl, "Expect:");
    c->b.n = 0;
    if (c->b.p)
        c->b.p[0] = '\0';
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST, k->method);
    if (strcmp(k->method, "POST") == 0) {
        curl_easy_setopt(c->h, CURLOPT_POST, 1L);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, k->body ? k->body : "");
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(k->body ? k->len : 0));
    } else {
        curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hl);
}

/* Runs requests 0..n-1 with at most g_nconns in flight; done() runs for each as it
 * completes (in completion order), before its connection takes the next request. */
static void batch_run(unsigned n, prep_fn prep, done_fn done, void *u) {
    unsigned next = 0, active = 0;
    struct conn **idle = malloc(g_nconns * sizeof(*idle));
    unsigned nidle = 0;
    if (!idle)
        bench_die("out of memory", NULL);
    for (unsigned k = 0; k < g_nconns; k++)
        idle[nidle++] = &g_conns[g_nconns - 1 - k];
    for (;;) {
        while (nidle > 0 && next < n) {
            struct conn *c = idle[--nidle];
            struct call k;
            memset(&k, 0, sizeof(k));
            prep(next, &k, u);
            conn_arm(c, &k);
            c->item = next++;
            if (curl_multi_add_handle(g_multi, c->h) != CURLM_OK)
                bench_die("curl_multi_add_handle", NULL);
            active++;
        }
        if (active == 0)
            break;
        int running = 0, q = 0, finished = 0;
        if (curl_multi_perform(g_multi, &running) != CURLM_OK)
            bench_die("curl_multi_perform", NULL);
        CURLMsg *m;
        while ((m = curl_multi_info_read(g_multi, &q)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct conn *c = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            if (m->data.result != CURLE_OK) {
                fprintf(stderr, "request %u: %s\n", c->item, curl_easy_strerror(m->data.result));
                bench_die("request failed", NULL);
            }
            long st = 0;
            curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &st);
            curl_multi_remove_handle(g_multi, c->h);
            curl_slist_free_all(c->hl);
            c->hl = NULL;
            done(c->item, st, &c->b, u);
            idle[nidle++] = c;
            active--;
            finished++;
        }
        if (!finished && active > 0 && curl_multi_poll(g_multi, NULL, 0, 1000, NULL) != CURLM_OK)
            bench_die("curl_multi_poll", NULL);
    }
    free(idle);
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

#define UPDATE_HEADER_BYTES 16 /* plain update round header (docs/protocol.md 5.2) */

static unsigned g_distinct; /* distinct update vectors (--distinct); device i sends i mod it */

/* Device i's update words: after the header, 4-byte aligned (malloc'd rows, stride 4k). */
static uint32_t *words(uint8_t *rows, size_t stride, unsigned i) {
    return (uint32_t *)(void *)(rows + (size_t)(i % g_distinct) * stride + UPDATE_HEADER_BYTES);
}

/* State shared by the batch callbacks of one round. */
struct round_ctx {
    struct dev *dv;  /* the N devices */
    uint8_t *rows;   /* (N, stride): 16-byte round header ("FLUP"...) + L words */
    size_t stride;   /* bytes per row: 16 + 4 L */
    size_t L;        /* words per update: d + 1 */
    int phase;       /* secagg phase 0..3 */
    double client_s; /* device compute inside the round, seconds */
};

static const char *const k_phases[4] = {"advertise", "share", "masked", "unmask"};
static const char k_checkin[] = "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,"
                                "\"unmetered\":true,\"idle\":true}}";

static json_t *expect_json(unsigned i, long want, long st, const struct buf *b, const char *what) {
    if (st != want) {
        fprintf(stderr, "%s (device %u): %ld (want %ld): %.300s\n", what, i, st, want,
                b->p ? b->p : "");
        bench_die("unexpected status", NULL);
    }
    json_t *j = json_loadb(b->p ? b->p : "", b->n, 0, NULL);
    if (!j)
        bench_die("answer is not JSON", NULL);
    return j;
}

static void prep_checkin(unsigned i, struct call *c, void *u) {
    struct round_ctx *r = u;
    c->method = "POST";
    snprintf(c->path, sizeof(c->path), "/v1/checkin");
    c->token = r->dv[i].tok;
    c->ctype = "application/json";
    c->body = k_checkin;
    c->len = sizeof(k_checkin) - 1;
}

static void done_checkin(unsigned i, long st, const struct buf *b, void *u) {
    struct round_ctx *r = u;
    json_t *j = expect_json(i, 200, st, b, "check-in");
    const char *s = json_string_value(json_object_get(j, "status"));
    if (!s || strcmp(s, "selected") != 0)
        bench_die("a device was not selected", NULL);
    snprintf(r->dv[i].pid, sizeof(r->dv[i].pid), "%s",
             json_string_value(json_object_get(j, "participation_id")));
    r->dv[i].rid = json_integer_value(json_object_get(j, "round_id"));
    json_decref(j);
}

static void prep_task(unsigned i, struct call *c, void *u) {
    struct round_ctx *r = u;
    c->method = "GET";
    snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/task", (long long)r->dv[i].rid);
    c->token = r->dv[i].tok;
    c->pid = r->dv[i].pid;
}

static void done_task(unsigned i, long st, const struct buf *b, void *u) {
    struct round_ctx *r = u;
    json_t *j = expect_json(i, 200, st, b, "task");
    json_t *sa = json_object_get(j, "secagg");
    r->dv[i].index = (uint32_t)json_integer_value(json_object_get(sa, "client_index"));
    r->dv[i].n = (uint32_t)json_integer_value(json_object_get(sa, "num_clients"));
    r->dv[i].k = (uint32_t)json_integer_value(json_object_get(sa, "neighbors"));
    r->dv[i].t = (uint32_t)json_integer_value(json_object_get(sa, "threshold"));
    if ((size_t)json_integer_value(json_object_get(json_object_get(j, "update"), "length")) != r->L)
        bench_die("unexpected update length", NULL);
    json_decref(j);
}

static void prep_update(unsigned i, struct call *c, void *u) {
    struct round_ctx *r = u;
    c->method = "POST";
    snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/update", (long long)r->dv[i].rid);
    c->token = r->dv[i].tok;
    c->ctype = "application/octet-stream";
    /* Protocol 1.1 plain body: "FLUP" || u32le 1 || u64le round id || words (LE host). */
    uint8_t *row = r->rows + (size_t)(i % g_distinct) * r->stride;
    uint64_t rid = (uint64_t)r->dv[i].rid;
    memcpy(row, "FLUP", 4);
    row[4] = 1;
    row[5] = row[6] = row[7] = 0;
    for (int b = 0; b < 8; b++)
        row[8 + b] = (uint8_t)(rid >> (8 * b));
    c->body = row;
    c->len = r->stride;
    c->pid = r->dv[i].pid;
}

static void done_accepted(unsigned i, long st, const struct buf *b, void *u) {
    (void)u;
    if (st != 202) {
        fprintf(stderr, "upload (device %u): %ld: %.300s\n", i, st, b->p ? b->p : "");
        bench_die("upload refused", NULL);
    }
}

static void prep_phase_post(unsigned i, struct call *c, void *u) {
    struct round_ctx *r = u;
    c->method = "POST";
    snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/secagg/%s", (long long)r->dv[i].rid,
             k_phases[r->phase]);
    c->token = r->dv[i].tok;
    c->ctype = "application/octet-stream";
    c->body = r->dv[i].out;
    c->len = r->dv[i].out_len;
    c->pid = r->dv[i].pid;
}

static void prep_phase_result(unsigned i, struct call *c, void *u) {
    struct round_ctx *r = u;
    c->method = "GET";
    snprintf(c->path, sizeof(c->path), "/v1/rounds/%lld/secagg/%s/result?wait=60",
             (long long)r->dv[i].rid, k_phases[r->phase]);
    c->token = r->dv[i].tok;
    c->pid = r->dv[i].pid;
}

static void done_phase_result(unsigned i, long st, const struct buf *b, void *u) {
    struct round_ctx *r = u;
    if (st != 200) {
        fprintf(stderr, "%s result (device %u): %ld: %.300s\n", k_phases[r->phase], i, st,
                b->p ? b->p : "");
        bench_die("phase result", NULL);
    }
    if (r->phase == 3) {
        if (!strstr(b->p ? b->p : "", "\"completed\""))
            bench_die("round did not complete", NULL);
        return;
    }
    double c0 = bench_wall_s();
    if (fl_secagg_client_handle(r->dv[i].sa, (const uint8_t *)b->p, b->n, &r->dv[i].out,
                                &r->dv[i].out_len) != FL_OK)
        bench_die("secagg client handle", NULL);
    r->client_s += bench_wall_s() - c0;
}

static unsigned parse_uint(const char *flag, const char *v, unsigned lo, unsigned hi) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end); /* accepts 1e4 */
    if (errno || end == v || *end || x < lo || x > hi || x != (double)(unsigned)x) {
        fprintf(stderr, "bench_coord_round: %s wants an integer in [%u, %u], got '%s'\n", flag, lo,
                hi, v);
        exit(2);
    }
    return (unsigned)x;
}

/* Median of v[0..n) on a copy: the arrays are printed in round order afterwards. */
static double median(const double *v, unsigned n) {
    double *s = malloc(n * sizeof(*s));
    if (!s)
        bench_die("out of memory", NULL);
    memcpy(s, v, n * sizeof(*s));
    double m = bench_median(s, n);
    free(s);
    return m;
}

static void print_array(const char *name, const double *v, unsigned n) {
    printf(",\"%s\":[", name);
    for (unsigned i = 0; i < n; i++)
        printf("%s%.4f", i ? "," : "", v[i]);
    printf("]");
}

int main(int argc, char **argv) {
    unsigned n = 100, threads = 4, rounds = 1, conc = 1, unmask_threads = 0;
    size_t d = 10000;
    int secagg = 0, fedbuff = 0, as_json = 0;
    const char *exe = FL_COORD_EXE, *base = "/tmp";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n = parse_uint("--n", argv[++i], 2, 1000000);
        else if (strcmp(argv[i], "--d") == 0 && i + 1 < argc)
            d = parse_uint("--d", argv[++i], 1, 100000000);
        else if (strcmp(argv[i], "--secagg") == 0 && i + 1 < argc)
            secagg = (int)parse_uint("--secagg", argv[++i], 0, 1);
        else if (strcmp(argv[i], "--fedbuff") == 0 && i + 1 < argc)
            fedbuff = (int)parse_uint("--fedbuff", argv[++i], 0, 1);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = parse_uint("--rounds", argv[++i], 1, 100000);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = parse_uint("--threads", argv[++i], 1, 256);
        else if (strcmp(argv[i], "--unmask-threads") == 0 && i + 1 < argc)
            unmask_threads = parse_uint("--unmask-threads", argv[++i], 0, 64);
        else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc)
            conc = parse_uint("--concurrency", argv[++i], 1, 10000);
        else if (strcmp(argv[i], "--distinct") == 0 && i + 1 < argc)
            g_distinct = parse_uint("--distinct", argv[++i], 1, 1000000);
        else if (strcmp(argv[i], "--exe") == 0 && i + 1 < argc)
            exe = argv[++i];
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            base = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else if (strcmp(argv[i], "--same-session") == 0)
            g_same_session = true;
        else {
            fprintf(stderr,
                    "usage: %s [--n N] [--d D] [--secagg 0|1] [--fedbuff 0|1] [--rounds R] "
                    "[--threads T] [--concurrency C] [--distinct M] [--exe PATH] [--dir DIR] "
                    "[--same-session] [--unmask-threads U] [--json]\n",
                    argv[0]);
            return 2;
        }
    }
    if (secagg && n < 3) {
        /* The coordinator refuses a secure population below 3 (a sum of 2 reveals each). */
        fprintf(stderr, "--secagg 1 needs --n 3 or more (secure aggregation needs 3 "
                        "participants)\n");
        return 2;
    }
    if (secagg && fedbuff) {
        fprintf(stderr, "--fedbuff 1 needs --secagg 0 (FedBuff with secure aggregation runs "
                        "synchronous rounds)\n");
        return 2;
    }
    if (conc > n)
        conc = n;
    if (g_distinct == 0 || g_distinct > n)
        g_distinct = n;
    if (sodium_init() < 0)
        bench_die("sodium", NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_curl = curl_easy_init();
    curl_easy_setopt(g_curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(g_curl, CURLOPT_WRITEDATA, &g_body);
    curl_easy_setopt(g_curl, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(g_curl, CURLOPT_TIMEOUT, 600L);
    atexit(cleanup); /* also stops the child when start_coordinator gives up */
    start_coordinator(exe, threads, unmask_threads, base);

    /* Population, model (d zeros in "w"), n enrolled devices: not timed. The clip norm (in
     * units of the granularity 2^-10) is above the updates' norm (words below 2001, so at
     * most 2000 sqrt(d)), as an honest device's updates are: the coordinator's norm check
     * passes them unclipped. (With the default clip of 1.0 every update here was clipped,
     * which measured the rare over-the-bound path instead of a normal round.) */
    double clip = 2000.0 * sqrt((double)d) / 1024.0 * 1.001 + 1.0;
    char body[2048], strategy[128] = "";
    if (fedbuff)
        snprintf(strategy, sizeof(strategy),
                 "\"strategy\":{\"name\":\"fedbuff\",\"buffer_size\":%u,"
                 "\"max_concurrency\":%u},",
                 n, n);
    snprintf(body, sizeof(body),
             "{\"name\":\"bench\",\"allowed_regions\":[\"*\"],%s"
             "\"selection\":{\"target\":%u,\"over_selection\":1.0,\"min_participants\":%u,"
             "\"require\":[],\"forming_s\":3600,\"jitter_s\":0,\"min_retry_s\":1},"
             "\"deadlines_s\":{\"advertise\":3600,\"share\":3600,\"masked\":3600,"
             "\"unmask\":3600},\"update\":{\"tensors\":[\"w\"]},"
             "\"secagg\":{\"enabled\":%s},\"privacy\":{\"mode\":\"none\",\"modulus_bits\":32,"
             "\"granularity\":0.0009765625,\"clip_norm\":%.6f}}",
             strategy, n, n, secagg ? "true" : "false", clip);
    json_t *j = req_json(201, "POST", "/v1/admin/populations", ADMIN, body, NULL);
    char etok[128];
    snprintf(etok, sizeof(etok), "%s", json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    char hdr[160];
    int hl =
        snprintf(hdr, sizeof(hdr),
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", d, d * 4);
    size_t mlen = 8 + (size_t)hl + d * 4;
    uint8_t *model = calloc(1, mlen);
    if (!model)
        bench_die("out of memory", NULL);
    for (int b = 0; b < 8; b++)
        model[b] = (uint8_t)((uint64_t)hl >> (8 * b));
    memcpy(model + 8, hdr, (size_t)hl);
    if (req("POST", "/v1/admin/populations/bench/models", ADMIN, "application/octet-stream", model,
            mlen, NULL) != 201)
        bench_die("model upload", NULL);
    free(model);
    json_decref(req_json(200, "POST", "/v1/admin/populations/bench/start", ADMIN, NULL, NULL));
    struct dev *dv = calloc(n, sizeof(*dv));
    if (!dv)
        bench_die("out of memory", NULL);
    for (unsigned i = 0; i < n; i++) {
        j = req_json(201, "POST", "/v1/enroll", etok,
                     "{\"population\":\"bench\",\"region\":\"EU\"}", NULL);
        snprintf(dv[i].tok, sizeof(dv[i].tok), "%s",
                 json_string_value(json_object_get(j, "client_token")));
        json_decref(j);
    }
    /* Fixed random update vectors (d words + the weight 1), encoded before the clock. */
    size_t L = d + 1;
    size_t stride = UPDATE_HEADER_BYTES + L * sizeof(uint32_t);
    uint8_t *rows = malloc((size_t)g_distinct * stride);
    double *wall_r = calloc(rounds, sizeof(double)), *coord_r = calloc(rounds, sizeof(double));
    double *cpu_r = calloc(rounds, sizeof(double)), *flt_r = calloc(rounds, sizeof(double));
    double *csw_r = calloc(rounds, sizeof(double)), *cwait_r = calloc(rounds, sizeof(double));
    double *bcpu_r = calloc(rounds, sizeof(double)), *bwait_r = calloc(rounds, sizeof(double));
    if (!rows || !wall_r || !coord_r || !cpu_r || !flt_r || !csw_r || !cwait_r || !bcpu_r ||
        !bwait_r)
        bench_die("out of memory", NULL);
    for (unsigned i = 0; i < g_distinct; i++) {
        uint32_t *w = words(rows, stride, i);
        randombytes_buf(w, L * sizeof(uint32_t));
        for (size_t k = 0; k < d; k++)
            w[k] %= 2001; /* small values, as quantized deltas */
        w[d] = 1;
    }
    conns_open(conc);
    long rss_setup = rss_kb("VmRSS");
    double total_wall = 0, total_client = 0, cpu0 = cpu_s();
    double phase_wall[6] = {0};
    struct round_ctx rc = {.dv = dv, .rows = rows, .stride = stride, .L = L};
    for (unsigned round = 0; round < rounds; round++) {
        double rflt0 = minflt(), rcsw0 = ctxsw(), rcpu0, rwait0, bcpu0, bwait0;
        sched_s(g_child, &rcpu0, &rwait0);
        sched_s(getpid(), &bcpu0, &bwait0);
        double t0 = bench_wall_s(), tp = t0;
        rc.client_s = 0;
        batch_run(n, prep_checkin, done_checkin, &rc);
        for (unsigned i = 1; i < n; i++)
            if (dv[i].rid != dv[0].rid)
                bench_die("devices were put in different rounds", NULL);
        batch_run(n, prep_task, done_task, &rc);
        phase_wall[0] += bench_wall_s() - tp;
        tp = bench_wall_s();
        if (!secagg) {
            batch_run(n, prep_update, done_accepted, &rc);
            phase_wall[3] += bench_wall_s() - tp;
            tp = bench_wall_s();
            if (!fedbuff) { /* a buffer is applied by its last upload's request */
                char path[160];
                snprintf(path, sizeof(path), "/v1/rounds/%lld/status?wait=60",
                         (long long)dv[0].rid);
                j = req_json(200, "GET", path, dv[0].tok, NULL, dv[0].pid);
                const char *state = json_string_value(json_object_get(j, "state"));
                if (!state || strcmp(state, "completed") != 0)
                    bench_die("round did not complete", NULL);
                json_decref(j);
                phase_wall[5] += bench_wall_s() - tp;
            }
        } else {
            for (unsigned i = 0; i < n; i++) {
                double c0 = bench_wall_s();
                fl_secagg_config cfg;
                fl_secagg_config_init(&cfg);
                cfg.num_clients = dv[i].n;
                cfg.dim = (uint32_t)L;
                cfg.bits = 32;
                cfg.degree = dv[i].k;
                cfg.threshold = dv[i].t;
                if (fl_secagg_client_create(&dv[i].sa, &cfg, (uint64_t)dv[i].rid, dv[i].index, NULL,
                                            NULL) != FL_OK ||
                    fl_secagg_client_set_input(dv[i].sa, words(rows, stride, i), L) != FL_OK ||
                    fl_secagg_client_start(dv[i].sa, &dv[i].out, &dv[i].out_len) != FL_OK)
                    bench_die("secagg client", NULL);
                rc.client_s += bench_wall_s() - c0;
            }
            for (int ph = 0; ph < 4; ph++) {
                rc.phase = ph;
                batch_run(n, prep_phase_post, done_accepted, &rc);
                batch_run(n, prep_phase_result, done_phase_result, &rc);
                phase_wall[1 + ph] += bench_wall_s() - tp;
                tp = bench_wall_s();
            }
            for (unsigned i = 0; i < n; i++) {
                fl_secagg_client_destroy(dv[i].sa);
                dv[i].sa = NULL;
            }
        }
        wall_r[round] = bench_wall_s() - t0;
        coord_r[round] = wall_r[round] - rc.client_s;
        double rcpu1, rwait1, bcpu1, bwait1;
        sched_s(g_child, &rcpu1, &rwait1);
        sched_s(getpid(), &bcpu1, &bwait1);
        cpu_r[round] = rcpu1 - rcpu0;
        cwait_r[round] = rwait1 - rwait0;
        bcpu_r[round] = bcpu1 - bcpu0;
        bwait_r[round] = bwait1 - bwait0;
        flt_r[round] = minflt() - rflt0;
        csw_r[round] = ctxsw() - rcsw0;
        total_wall += wall_r[round];
        total_client += rc.client_s;
    }
    if (fedbuff) { /* every buffer was applied: one model version per round */
        j = req_json(200, "GET", "/v1/admin/populations/bench", ADMIN, NULL, NULL);
        json_int_t v = json_integer_value(json_object_get(j, "model_version"));
        json_decref(j);
        if (v != 1 + (json_int_t)rounds)
            bench_die("FedBuff buffers were not all applied", NULL);
    }
    long hwm = rss_kb("VmHWM");
    double coord_cpu = (cpu_s() - cpu0) / rounds;
    double wall = total_wall / rounds, cli = total_client / rounds, coord = wall - cli;
    double med = median(coord_r, rounds);
    if (as_json) {
        printf("{\"bench\":\"coordinator_round\",\"n\":%u,\"d\":%zu,\"secagg\":%s,"
               "\"fedbuff\":%s,\"rounds\":%u,"
               "\"threads\":%u,\"unmask_threads\":%u,\"concurrency\":%u,"
               "\"distinct_updates\":%u,"
               "\"coordinator_session\":\"%s\","
               "\"secagg_k\":%u,\"secagg_t\":%u,"
               "\"round_wall_s\":%.4f,\"device_compute_s\":%.4f,"
               "\"coordinator_s\":%.4f,\"rounds_per_s\":%.4f,\"coordinator_cpu_s\":%.4f,"
               "\"median_round_wall_s\":%.4f,\"median_coordinator_s\":%.4f,"
               "\"median_coordinator_cpu_s\":%.4f,\"median_coordinator_minflt\":%.0f,"
               "\"median_coordinator_ctxsw\":%.0f,\"median_coordinator_runq_wait_s\":%.4f,"
               "\"median_devices_cpu_s\":%.4f,\"median_devices_runq_wait_s\":%.4f,"
               "\"coordinator_rss_setup_kb\":%ld,"
               "\"coordinator_peak_rss_kb\":%ld,\"phase_wall_s\":{\"select_task\":%.4f,"
               "\"advertise\":%.4f,\"share\":%.4f,\"masked_or_update\":%.4f,\"unmask\":%.4f,"
               "\"status\":%.4f}",
               n, d, secagg ? "true" : "false", fedbuff ? "true" : "false", rounds, threads,
               unmask_threads, conc,
               g_distinct,
               g_same_session ? "same" : "own", dv[0].k,
               dv[0].t, wall, cli, coord, coord > 0 ? 1.0 / coord : 0.0, coord_cpu,
               median(wall_r, rounds), med, median(cpu_r, rounds), median(flt_r, rounds),
               median(csw_r, rounds), median(cwait_r, rounds), median(bcpu_r, rounds),
               median(bwait_r, rounds),
               rss_setup, hwm, phase_wall[0] / rounds, phase_wall[1] / rounds,
               phase_wall[2] / rounds, phase_wall[3] / rounds, phase_wall[4] / rounds,
               phase_wall[5] / rounds);
        print_array("round_wall_times_s", wall_r, rounds);
        print_array("coordinator_times_s", coord_r, rounds);
        print_array("coordinator_cpu_times_s", cpu_r, rounds);
        print_array("coordinator_minflt", flt_r, rounds);
        print_array("coordinator_ctxsw", csw_r, rounds);
        print_array("coordinator_runq_wait_s", cwait_r, rounds);
        print_array("devices_cpu_s", bcpu_r, rounds);
        print_array("devices_runq_wait_s", bwait_r, rounds);
        printf("}\n");
    } else {
        printf("n=%u d=%zu secagg=%s concurrency=%u: round %.3f s, device compute %.3f s, "
               "coordinator %.3f s (median %.3f s, %.2f rounds/s; %.3f s of its CPU), "
               "coordinator RSS %ld kB after setup, peak %ld kB\n",
               n, d, secagg ? "on" : "off", conc, wall, cli, coord, med,
               coord > 0 ? 1.0 / coord : 0.0, coord_cpu, rss_setup, hwm);
    }
    conns_close();
    free(wall_r);
    free(coord_r);
    free(cpu_r);
    free(flt_r);
    free(csw_r);
    free(cwait_r);
    free(bcpu_r);
    free(bwait_r);
    free(rows);
    free(dv);
    free(g_body.p);
    curl_easy_cleanup(g_curl);
    curl_global_cleanup();
    return 0;
}
