/* Network faults between devices and the real `flotilla-coordinator serve`
 * (docs/reliability.md, "Coordinator level"): packet loss, latency and connection resets
 * in the middle of uploads, while rounds with and without secure aggregation run.
 *
 * The test moves itself into a fresh network namespace (unshare(CLONE_NEWNET) at the start
 * of main, before any thread exists; the coordinator it spawns inherits it), brings its
 * loopback up and installs an nftables rule that drops 10% of the packets on it at random
 * (this kernel has no sch_netem, so `tc netem` is not available; nft's `numgen random`
 * is). Loopback packets pass the input hook once, so every segment, SYN and ACK of both
 * directions is lost with probability 0.1 and TCP recovers by retransmission.
 *
 * The rule applies to the proxy's connections to the coordinator (from 127.0.0.2), so the
 * loss is on the devices' path and not on the test's own checks.
 * On top of that the devices talk to the coordinator through a small TCP proxy in this
 * process that resets connections: for every connection (FL_REL_NET_RESET_PCT) it draws a
 * byte count B (1..6000) of device-to-coordinator traffic (a few requests on a keep-alive
 * connection) and either cuts the connection once B
 * bytes went through (the coordinator gets part of a request: a reset in the middle of an
 * upload), or forwards the request that crosses B and then drops the coordinator's answer
 * and resets the device (the coordinator processed it and the device does not know: the
 * case idempotency is for). The device is reset with SO_LINGER 0 (an RST); the proxy then
 * closes its coordinator side. The proxy also delays every chunk it forwards, each way, by
 * a uniform draw in [0, 2 x FL_REL_NET_DELAY_MS] (10 ms in the CI profile, 50 in the long
 * one), so requests cross phase closes and deadlines at varied times.
 *
 * Devices (the coordinator test kit's stand-ins: the secagg client state machine and dp's
 * encoder) retry every request on a transport error or a 5xx, with the same body and the
 * same Idempotency-Key (the participation id), like the SDK. Rounds alternate between "ns"
 * (secure aggregation) and "np" (plain updates); neither has DP, so each completed round's
 * model is predictable exactly: the previous model plus the FedAvg of the n devices'
 * vectors. Checks: every round completes or is abandoned with a reason and nothing stored;
 * each completed model is exact (an update counted twice or lost would change it); each
 * completed round has exactly n completed participants; the coordinator's accepted-update
 * counter grew by exactly n per completed round; the database passes integrity_check.
 *
 * Needs root (CAP_SYS_ADMIN for the namespace, CAP_NET_ADMIN in it) and the nft program
 * (`scripts/setup.sh --tests` installs nftables); otherwise it exits 77 (ctest SKIP).
 * In the CI profile the minimum TCP retransmission timeout of 127.0.0.1 is lowered to 20 ms
 * (`ip route change ... rto_min`, when iproute2 is there) so that losses cost less waiting;
 * the long profile keeps the kernel's 200 ms. A lost SYN still costs the kernel's 1 s.
 * Profiles: CI 4 rounds of 5 devices; FL_RELIABILITY_PROFILE=long 40 rounds of 10.
 * FL_REL_NET_ROUNDS, FL_REL_NET_CLIENTS, FL_REL_NET_LOSS_PCT (10), FL_REL_NET_RESET_PCT
 * (percent of connections the proxy cuts, 100) override; FL_RELIABILITY_SEED replays the
 * proxy's draws (not the kernel's). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <sqlite3.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"
#include "rel_coord.h"

extern char **environ;

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

enum { NDEV = 16, POPS = 2, SKIP = 77, TRIES = 40 };

static const char *const pop_name[POPS] = {"ns", "np"};

/* ---- the network namespace ---- */

static int netns_skip_reason(char *why, size_t n) {
    if (geteuid() != 0) {
        snprintf(why, n, "needs root (a network namespace and nftables rules)");
        return 1;
    }
    if (unshare(CLONE_NEWNET) != 0) {
        snprintf(why, n, "unshare(CLONE_NEWNET) failed: %s", strerror(errno));
        return 1;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    bool up = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    up = up && ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
    if (fd >= 0)
        close(fd);
    if (!up) {
        snprintf(why, n, "cannot bring up lo in the new namespace: %s", strerror(errno));
        return 1;
    }
    return 0;
}

/* Runs `nft args...` (from PATH); its exit status, or -1 when it could not run. Output goes
 * to out_path when given, else to /dev/null. */
static int run_nft(const char *out_path, char *const argv[]) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path ? out_path : "/dev/null",
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "nft", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Lowers the minimum TCP retransmission timeout on 127.0.0.1 to ms (from the kernel's
 * 200 ms) with iproute2, so that the CI profile's losses cost less waiting; the losses and
 * retransmissions are the same. Returns 0, or -1 when `ip` is missing or refused. */
static int set_rto_min(unsigned ms) {
    char rto[32];
    snprintf(rto, sizeof(rto), "%ums", ms);
    char *argv[] = {"ip",    "route", "change", "local", "127.0.0.1", "dev",     "lo",
                    "table", "local", "proto",  "kernel", "scope",    "host",    "src",
                    "127.0.0.1", "rto_min", rto, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "ip", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The loss rule on the devices' traffic to and from the coordinator's TCP port, both
 * directions: the proxy connects from 127.0.0.2, so the test's own checks (model
 * downloads, /metrics, from 127.0.0.1) are not slowed down. A counter of those packets
 * comes before it. */
static int nft_install(const char *dir, int loss_pct, unsigned port) {
    char path[160], rule[64];
    snprintf(path, sizeof(path), "%s/rules.nft", dir);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return -1;
    snprintf(rule, sizeof(rule), "numgen random mod 100 < %d", loss_pct);
    fprintf(fp,
            "table inet flnet {\n"
            "  chain in {\n"
            "    type filter hook input priority 0; policy accept;\n"
            "    ip saddr 127.0.0.2 tcp dport %u counter\n"
            "    ip daddr 127.0.0.2 tcp sport %u counter\n"
            "    ip saddr 127.0.0.2 tcp dport %u %s counter drop\n"
            "    ip daddr 127.0.0.2 tcp sport %u %s counter drop\n"
            "  }\n"
            "}\n",
            port, port, port, rule, port, rule);
    fclose(fp);
    char *argv[] = {"nft", "-f", path, NULL};
    int rc = run_nft(NULL, argv);
    unlink(path);
    return rc;
}

/* Packets seen on lo's input hook and packets dropped, from the rule counters. */
static void nft_counters(const char *dir, long long *seen, long long *dropped) {
    char path[160], line[512];
    snprintf(path, sizeof(path), "%s/counters.txt", dir);
    char *argv[] = {"nft", "list", "chain", "inet", "flnet", "in", NULL};
    *seen = *dropped = 0;
    if (run_nft(path, argv) != 0)
        return;
    FILE *fp = fopen(path, "r");
    while (fp && fgets(line, sizeof(line), fp)) {
        const char *c = strstr(line, "counter packets ");
        if (!c)
            continue;
        long long v = strtoll(c + strlen("counter packets "), NULL, 10);
        if (strstr(line, "drop"))
            *dropped += v;
        else
            *seen += v;
    }
    if (fp)
        fclose(fp);
    unlink(path);
}

/* ---- the resetting proxy ---- */

struct proxy {
    int lfd;
    unsigned port;   /* where devices connect */
    unsigned target; /* the coordinator */
    int reset_pct;   /* connections that get a cut */
    int delay_ms;    /* mean latency added to each forwarded chunk, each way */
    pthread_t th;
    atomic_bool stop;
    atomic_int active;
    pthread_mutex_t mu;
    uint64_t rng;
    atomic_long conns, cut_upload, cut_response;
};

enum { CUT_NONE = 0, CUT_UPLOAD = 1, CUT_RESPONSE = 2 };

struct pconn {
    struct proxy *px;
    int c;
    int mode;
    long cut_at;
    uint64_t rng; /* this connection's latency draws */
};

/* Latency: each chunk waits uniform [0, 2 x delay_ms] before it is forwarded (TCP keeps
 * the order, so this delays and spreads the traffic but never reorders it). */
static void pconn_delay(struct pconn *pc) {
    int d = pc->px->delay_ms;
    if (d > 0)
        rel_sleep_ms((long)(rel_next(&pc->rng) % (uint64_t)(2 * d + 1)));
}

static void rst_close(int fd) {
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *pconn_main(void *arg) {
    struct pconn *pc = arg;
    struct proxy *px = pc->px;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa, from;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)px->target);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    memset(&from, 0, sizeof(from));
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7F000002); /* 127.0.0.2: the lossy path */
    if (s < 0 || bind(s, (struct sockaddr *)&from, sizeof(from)) != 0 ||
        connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (s >= 0)
            close(s);
        rst_close(pc->c);
        goto out;
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(pc->c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t buf[16384];
    long up = 0;
    for (;;) {
        struct pollfd p[2] = {{pc->c, POLLIN, 0}, {s, POLLIN, 0}};
        int pr = poll(p, 2, 200);
        if (pr < 0 && errno == EINTR)
            continue;
        if (atomic_load(&px->stop)) {
            close(pc->c);
            close(s);
            break;
        }
        if (pr <= 0)
            continue;
        if (p[0].revents) {
            ssize_t n = recv(pc->c, buf, sizeof(buf), 0);
            if (n <= 0) {
                close(pc->c);
                close(s);
                break;
            }
            if (pc->mode == CUT_UPLOAD && up + n >= pc->cut_at) {
                /* Part of a request reaches the coordinator; the device is reset. */
                size_t part = (size_t)(pc->cut_at - up);
                if (part > 0)
                    (void)write_all(s, buf, part);
                rst_close(pc->c);
                close(s);
                atomic_fetch_add(&px->cut_upload, 1);
                break;
            }
            up += n;
            pconn_delay(pc);
            if (write_all(s, buf, (size_t)n) != 0) {
                rst_close(pc->c);
                close(s);
                break;
            }
        }
        if (p[1].revents) {
            ssize_t n = recv(s, buf, sizeof(buf), 0);
            if (n <= 0) {
                close(pc->c);
                close(s);
                break;
            }
            if (pc->mode == CUT_RESPONSE && up >= pc->cut_at) {
                /* The coordinator answered a request it processed; the device never
                 * hears it. */
                rst_close(pc->c);
                close(s);
                atomic_fetch_add(&px->cut_response, 1);
                break;
            }
            pconn_delay(pc);
            if (write_all(pc->c, buf, (size_t)n) != 0) {
                close(pc->c);
                close(s);
                break;
            }
        }
    }
out:
    atomic_fetch_sub(&px->active, 1);
    free(pc);
    return NULL;
}

static void *proxy_main(void *arg) {
    struct proxy *px = arg;
    while (!atomic_load(&px->stop)) {
        struct pollfd p = {px->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        struct pconn *pc = calloc(1, sizeof(*pc));
        if (!pc) {
            close(c);
            continue;
        }
        pc->px = px;
        pc->c = c;
        pthread_mutex_lock(&px->mu);
        uint64_t x = rel_next(&px->rng);
        pc->mode = (int)(x % 100) < px->reset_pct ? 1 + (int)((x >> 8) & 1) : CUT_NONE;
        pc->cut_at = 1 + (long)((x >> 16) % 6000);
        pc->rng = rel_next(&px->rng);
        pthread_mutex_unlock(&px->mu);
        atomic_fetch_add(&px->conns, 1);
        atomic_fetch_add(&px->active, 1);
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, pconn_main, pc) != 0) {
            atomic_fetch_sub(&px->active, 1);
            close(c);
            free(pc);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

static void proxy_start(struct proxy *px, unsigned target, int reset_pct, int delay_ms,
                        uint64_t seed) {
    px->target = target;
    px->reset_pct = reset_pct;
    px->delay_ms = delay_ms;
    px->rng = seed ^ 0x9E3779B97F4A7C15ull;
    pthread_mutex_init(&px->mu, NULL);
    px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(px->lfd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(px->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(px->lfd, 64), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(px->lfd, (struct sockaddr *)&sa, &sl), 0);
    px->port = ntohs(sa.sin_port);
    atomic_store(&px->stop, false);
    assert_int_equal(pthread_create(&px->th, NULL, proxy_main, px), 0);
}

static void proxy_stop(struct proxy *px) {
    if (px->lfd <= 0)
        return;
    atomic_store(&px->stop, true);
    pthread_join(px->th, NULL);
    for (int i = 0; i < 100 && atomic_load(&px->active) > 0; i++)
        rel_sleep_ms(50); /* each connection thread notices stop within 200 ms */
    close(px->lfd);
    px->lfd = 0;
    pthread_mutex_destroy(&px->mu);
}

/* ---- devices ---- */

struct net {
    struct fx *f;
    struct proxy px;
    unsigned coord_port;
    int n;
    struct tc dev[POPS][NDEV];
    CURL *h[NDEV]; /* one keep-alive handle per device */
    float cur[POPS][D];
    int64_t cur_version[POPS];
    /* figures */
    long requests, retries, transport_errors, timeouts, replayed, http_5xx;
    int completed[POPS], abandoned[POPS];
};

/* One device request through the proxy, retried on a transport error or a 5xx with the same
 * body and Idempotency-Key (TRIES at most, then the test fails). Returns the status. */
static long dev_req(struct net *t, int i, const char *method, const char *path, const char *tok,
                    const char *ct, const void *body, size_t len, const char *pid,
                    struct resp *r) {
    t->f->port = t->px.port;
    t->requests++;
    for (int k = 0; k < TRIES; k++) {
        if (k > 0) {
            t->retries++;
            rel_sleep_ms(20);
        }
        double t0 = rel_mono_s();
        CURLcode rc =
            rel_http(t->f, t->h[i], method, path, tok, ct, body, len, pid, 20000, r);
        if (getenv("FL_REL_NET_TRACE"))
            fprintf(stderr, "  device %d %s %s: %d %ld in %.3f s\n", i, method, path, (int)rc,
                    rc == CURLE_OK ? r->status : 0L, rel_mono_s() - t0);
        if (rc != CURLE_OK) {
            t->transport_errors++;
            t->timeouts += rc == CURLE_OPERATION_TIMEDOUT;
            if (getenv("FL_TEST_VERBOSE"))
                fprintf(stderr, "  device %d %s %s: %s (retrying)\n", i, method, path,
                        curl_easy_strerror(rc));
            resp_free(r);
            continue;
        }
        if (r->status >= 500) {
            t->http_5xx++;
            resp_free(r);
            continue;
        }
        char v[16];
        if (header_in(r, "Idempotent-Replayed", v, sizeof(v)))
            t->replayed++;
        t->f->port = t->coord_port;
        return r->status;
    }
    fprintf(stderr, "device %d: %s %s failed %d times\n", i, method, path, TRIES);
    fail();
    return -1;
}

static const char checkin_body[] =
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true},"
    "\"capabilities\":{\"secagg\":true}}";

/* One round of population p over the faulty network. Returns 1 completed, 2 abandoned
 * (some device was told 410: the round ended without a result). */
static int net_round(struct net *t, int p, int64_t *rid) {
    struct tc *c = t->dev[p];
    int n = t->n;
    struct resp r;
    char path[160];
    *rid = 0;
    for (int i = 0; i < n; i++) {
        long st = dev_req(t, i, "POST", "/v1/checkin", c[i].tok, "application/json",
                          checkin_body, strlen(checkin_body), NULL, &r);
        json_t *j = body_json(&r);
        const char *status = json_string_value(json_object_get(j, "status"));
        if (st != 200 || !status || strcmp(status, "selected") != 0)
            fprintf(stderr, "check-in %d of %s: %ld %s\n", i, pop_name[p], st, r.body);
        assert_int_equal(st, 200);
        assert_string_equal(status, "selected");
        snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        int64_t got = json_integer_value(json_object_get(j, "round_id"));
        assert_true(i == 0 || got == *rid);
        *rid = got;
        json_decref(j);
        resp_free(&r);
    }
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)*rid);
    for (int i = 0; i < n; i++) {
        long st = dev_req(t, i, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, &r);
        assert_int_equal(st, 200);
        parse_task(&r, &c[i].task);
        resp_free(&r);
        assert_int_equal(c[i].task.rid, *rid);
        assert_int_equal(c[i].task.model_version, t->cur_version[p]);
        c[i].drop = DROP_NONE;
        encode(&c[i], i);
    }
    if (p == 1) { /* plain updates */
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)*rid);
        uint8_t body[16 + 4 * 1024];
        for (int i = 0; i < n; i++) {
            size_t len = rel_plain_body(&c[i], body);
            long st = dev_req(t, i, "POST", path, c[i].tok, "application/octet-stream", body, len,
                              c[i].pid, &r);
            if (st != 202 && st != 200)
                fprintf(stderr, "update %d: %ld %s\n", i, st, r.body);
            assert_true(st == 202 || st == 200);
            resp_free(&r);
        }
        snprintf(path, sizeof(path), "/v1/rounds/%lld/status", (long long)*rid);
        for (int k = 0; k < 500; k++) {
            long st = dev_req(t, 0, "GET", path, c[0].tok, NULL, NULL, 0, c[0].pid, &r);
            assert_int_equal(st, 200);
            json_t *o = body_json(&r);
            const char *state = json_string_value(json_object_get(o, "state"));
            int res = state && strcmp(state, "completed") == 0   ? 1
                      : state && strcmp(state, "abandoned") == 0 ? 2
                                                                 : 0;
            json_decref(o);
            resp_free(&r);
            if (res)
                return res;
            rel_sleep_ms(20);
        }
        fail_msg("plain round %lld did not end", (long long)*rid);
        return 0;
    }
    static const char *const phases[4] = {"advertise", "share", "masked", "unmask"};
    const uint8_t *out[NDEV];
    size_t out_len[NDEV];
    secagg_clients_start(c, n, *rid, out, out_len);
    int result = 1;
    for (int ph = 0; ph < 4 && result == 1; ph++) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s", (long long)*rid, phases[ph]);
        for (int i = 0; i < n; i++) {
            long st = dev_req(t, i, "POST", path, c[i].tok, "application/octet-stream", out[i],
                              out_len[i], c[i].pid, &r);
            if (st == 410) {
                result = 2;
                resp_free(&r);
                break;
            }
            if (st != 202 && st != 200)
                fprintf(stderr, "post %s %d: %ld %s\n", phases[ph], i, st, r.body);
            assert_true(st == 202 || st == 200);
            resp_free(&r);
        }
        if (result != 1)
            break;
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s/result?wait=10", (long long)*rid,
                 phases[ph]);
        for (int i = 0; i < n; i++) {
            long st = dev_req(t, i, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, &r);
            if (st == 410) {
                result = 2;
                resp_free(&r);
                break;
            }
            if (st != 200)
                fprintf(stderr, "result %s %d: %ld %s\n", phases[ph], i, st, r.body);
            assert_int_equal(st, 200);
            if (ph < 3) {
                fl_status fs = fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                       &out[i], &out_len[i]);
                assert_int_equal(fs, FL_OK);
            } else {
                json_t *o = body_json(&r);
                assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
                assert_int_equal(json_integer_value(json_object_get(o, "participants")), n);
                json_decref(o);
            }
            resp_free(&r);
        }
    }
    secagg_clients_free(c, n);
    return result;
}

/* A completed round: exactly the previous model plus the FedAvg of the n devices' vectors,
 * n completed participants. */
static void check_completed(struct net *t, int p, int64_t rid) {
    struct fx *f = t->f;
    struct tc *c = t->dev[p];
    sqlite3 *db = rel_db_open(f->db);
    assert_non_null(db);
    long long id = (long long)rid;
    assert_int_equal(rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id), 2);
    int64_t v = rel_q(db, "SELECT result_version FROM rounds WHERE id = %lld", id);
    assert_int_equal(rel_q(db, "SELECT parent FROM models WHERE version = %lld", (long long)v),
                     t->cur_version[p]);
    assert_int_equal(rel_q(db, "SELECT completed FROM rounds WHERE id = %lld", id), t->n);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM round_participants WHERE round_id = %lld "
                           "AND state = 2",
                           id),
                     t->n);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM models WHERE "
                           "json_extract(metadata_json, '$.round_id') = %lld",
                           id),
                     1);
    rel_db_close(db);
    float w[D], b[2], expect[D];
    fetch_model(f, &c[0], pop_name[p], v, w, b);
    expected_fedavg(c, t->n, t->cur[p], expect);
    if (memcmp(w, expect, sizeof(w)) != 0)
        for (int j = 0; j < D; j++)
            fprintf(stderr, "round %lld w[%d] = %.9g, expected %.9g\n", id, j, w[j], expect[j]);
    assert_memory_equal(w, expect, sizeof(w));
    memcpy(t->cur[p], expect, sizeof(expect));
    t->cur_version[p] = v;
    t->completed[p]++;
}

/* An abandoned round: a reason, and nothing of it stored. */
static void check_abandoned(struct net *t, int p, int64_t rid) {
    sqlite3 *db = rel_db_open(t->f->db);
    assert_non_null(db);
    long long id = (long long)rid;
    for (int k = 0; k < 100 && rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id) != 3;
         k++)
        rel_sleep_ms(20); /* the abandonment is written just after the 410s */
    assert_int_equal(rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id), 3);
    assert_int_equal(
        rel_q(db, "SELECT length(abandon_reason) > 0 FROM rounds WHERE id = %lld", id), 1);
    assert_int_equal(rel_q(db, "SELECT result_version IS NULL FROM rounds WHERE id = %lld", id),
                     1);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM round_participants WHERE round_id = %lld "
                           "AND state = 2",
                           id),
                     0);
    rel_db_close(db);
    t->abandoned[p]++;
}

/* ---- the test ---- */

static int net_setup(void **state) {
    struct net *t = calloc(1, sizeof(*t));
    if (!t)
        return -1;
    t->f = fx_new();
    for (int i = 0; i < NDEV; i++)
        t->h[i] = curl_easy_init();
    *state = t;
    return 0;
}

static int net_teardown(void **state) {
    struct net *t = *state;
    proxy_stop(&t->px);
    for (int i = 0; i < NDEV; i++)
        curl_easy_cleanup(t->h[i]);
    for (int p = 0; p < POPS; p++)
        clients_free(t->dev[p], NDEV);
    t->f->port = t->coord_port;
    fx_free(t->f);
    free(t);
    return 0;
}

static void test_net_faults(void **state) {
    struct net *t = *state;
    int lng = rel_long();
    uint64_t seed = rel_seed0();
    t->n = (int)rel_envl("FL_REL_NET_CLIENTS", lng ? 10 : 5);
    long rounds = rel_envl("FL_REL_NET_ROUNDS", lng ? 40 : 4);
    int loss = (int)rel_envl("FL_REL_NET_LOSS_PCT", 10);
    int reset = (int)rel_envl("FL_REL_NET_RESET_PCT", 100);
    int delay = (int)rel_envl("FL_REL_NET_DELAY_MS", lng ? 50 : 10);
    long rto_ms = rel_envl("FL_REL_NET_RTO_MIN_MS", lng ? 0 : 20); /* 0: the kernel's 200 */
    bool rto_set = rto_ms > 0 && set_rto_min((unsigned)rto_ms) == 0;
    assert_true(t->n >= 3 && t->n <= NDEV && loss >= 0 && loss < 100 && delay >= 0 &&
                delay <= 5000);
    fprintf(stderr,
            "network faults: seed %llu, %d devices, %ld rounds (secagg and plain alternating), "
            "%d%% packet loss between the proxy and the coordinator (lo), %d%% of proxied "
            "connections reset, %d ms mean latency added per chunk each way (0-%d ms), TCP "
            "rto_min %s\n",
            (unsigned long long)seed, t->n, rounds, loss, reset, delay, 2 * delay,
            rto_set ? "lowered to FL_REL_NET_RTO_MIN_MS" : "200 ms (kernel default)");
    fx_proc_start(t->f, FL_COORD_EXE);
    t->coord_port = t->f->port;
    for (int p = 0; p < POPS; p++) {
        char *tok[NDEV];
        struct popcfg pc = {.name = pop_name[p], .target = t->n, .min = t->n, .secagg = p == 0,
                            .neighbors = t->n - 1, .mode = "none", .budget = 1e6};
        setup_population(t->f, &pc, tok, t->n);
        for (int i = 0; i < t->n; i++)
            t->dev[p][i].tok = tok[i];
        for (int j = 0; j < D; j++)
            t->cur[p][j] = base_w(j);
        char q[128];
        snprintf(q, sizeof(q), "SELECT version FROM tags WHERE name = 'population/%s'",
                 pop_name[p]);
        t->cur_version[p] = db_int(t->f, q);
    }
    /* The faults start once the populations exist (their setup is not under test). */
    if (nft_install(t->f->dir, loss, t->coord_port) != 0)
        fail_msg("nft could not install the loss rule");
    proxy_start(&t->px, t->coord_port, reset, delay, seed);
    double acc0 = rel_metric(t->f, "flotilla_updates_accepted_total");
    double t0 = rel_mono_s();
    for (long k = 0; k < rounds; k++) {
        int p = (int)(k % POPS);
        double before = rel_metric(t->f, "flotilla_updates_accepted_total");
        int64_t rid = 0;
        int res = net_round(t, p, &rid);
        if (res == 1) {
            check_completed(t, p, rid);
            double after = rel_metric(t->f, "flotilla_updates_accepted_total");
            if (after - before != t->n)
                fprintf(stderr, "round %lld: %g updates accepted, %d devices\n", (long long)rid,
                        after - before, t->n);
            assert_true(after - before == t->n);
        } else {
            check_abandoned(t, p, rid);
        }
        if (getenv("FL_TEST_VERBOSE"))
            fprintf(stderr, "  round %lld of %s: %s\n", (long long)rid, pop_name[p],
                    res == 1 ? "completed" : "abandoned");
    }
    double elapsed = rel_mono_s() - t0;
    double acc1 = rel_metric(t->f, "flotilla_updates_accepted_total");
    long long seen = -1, dropped = -1;
    nft_counters(t->f->dir, &seen, &dropped);
    proxy_stop(&t->px);
    int st = fx_proc_signal(t->f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char why[256];
    assert_true(rel_db_ok(t->f->db, why, sizeof(why)));
    /* Whole database: one model per completed round, n completed participants each. */
    sqlite3 *db = rel_db_open(t->f->db);
    assert_non_null(db);
    assert_int_equal(rel_q(db, "SELECT count(*) FROM rounds WHERE state NOT IN (2, 3)"), 0);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM rounds r WHERE r.state = 2 AND ("
                           " r.completed != %d OR (SELECT count(*) FROM round_participants q"
                           " WHERE q.round_id = r.id AND q.state = 2) != %d OR (SELECT count(*)"
                           " FROM models m WHERE json_extract(m.metadata_json, '$.round_id') ="
                           " r.id) != 1)",
                           t->n, t->n),
                     0);
    rel_db_close(db);
    fprintf(stderr,
            "network faults: %ld rounds in %.1f s: ns (secagg) %d completed, %d abandoned; np "
            "(plain) %d completed, %d abandoned; models exact %d/%d; updates accepted %.0f for "
            "%d completed rounds x %d devices (duplicates 0)\n",
            rounds, elapsed, t->completed[0], t->abandoned[0], t->completed[1], t->abandoned[1],
            t->completed[0] + t->completed[1], t->completed[0] + t->completed[1], acc1 - acc0,
            t->completed[0] + t->completed[1], t->n);
    fprintf(stderr,
            "network faults: %ld device requests, %ld retries (%ld transport errors, %ld of "
            "them timeouts; %ld 5xx), %ld answers marked Idempotent-Replayed; proxy: %ld "
            "connections, %ld reset mid-upload, %ld reset after the coordinator answered; "
            "proxy-coordinator packets on lo: %lld, dropped %lld (%.1f%%)\n",
            t->requests, t->retries, t->transport_errors, t->timeouts, t->http_5xx, t->replayed,
            atomic_load(&t->px.conns), atomic_load(&t->px.cut_upload),
            atomic_load(&t->px.cut_response), seen, dropped,
            seen > 0 ? 100.0 * (double)dropped / (double)seen : 0.0);
    assert_true(t->completed[0] >= 1 && t->completed[1] >= 1);
    assert_true(acc1 - acc0 == (double)(t->completed[0] + t->completed[1]) * t->n);
    /* The faults happened: resets of both kinds and packet loss (a test that saw none
     * would prove nothing). */
    if (reset > 0 && rounds >= 4) {
        assert_true(atomic_load(&t->px.cut_upload) > 0);
        assert_true(atomic_load(&t->px.cut_response) > 0);
        /* Enough answers dropped that some must have been to a post (a replay). */
        if (atomic_load(&t->px.cut_response) >= 40)
            assert_true(t->replayed > 0);
    }
    if (loss > 0)
        assert_true(dropped > 0);
}

int main(void) {
    char why[160];
    if (netns_skip_reason(why, sizeof(why))) {
        printf("test_rel_coord_net: skipped: %s\n", why);
        return SKIP;
    }
    char *argv[] = {"nft", "list", "ruleset", NULL};
    if (run_nft(NULL, argv) != 0) {
        printf("test_rel_coord_net: skipped: the nft program is missing or does not work "
               "(scripts/setup.sh --tests installs nftables)\n");
        return SKIP;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_net_faults, net_setup, net_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
