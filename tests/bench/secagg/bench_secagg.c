/* secagg round benchmark: server and client time and memory next to the plain sum.
 *
 * The server runs in a forked child process (so its peak RSS is its own) and talks to the
 * clients in the parent over a socketpair with a small framing; every client runs the real
 * protocol. The plain, insecure baseline is the same server loop fed the same input vectors
 * unmasked: decode each vector from its wire bytes and add it into one accumulator.
 *
 *   bench_secagg [--n N] [--d D] [--drop F] [--k K] [--t T] [--bits B] [--json]
 *                [--backend sodium|mbedtls] [--table [small|full]] [--wall] [--threads N]
 *                [--paced] [--active 0|1|2] [--reveal 0|1]
 *
 * The clients' messages of a phase reach the server in bursts (up to 64 MB, written at
 * once after the simulated clients have computed them), so it handles them back to back,
 * as a server does when many devices answer together. --paced writes each message as soon
 * as its client has computed it instead: the server then sleeps between messages (the
 * clients are simulated one after another) and every message finds its caches cold, which
 * at d = 10^4 costs the share phase ~2.5x.
 *
 * Times are CPU seconds of the measuring process (server child or client parent; all its
 * threads) unless --wall is given. The server side is also timed in wall-clock seconds
 * (the *_wall figures), and the JSON records the 1-minute load average at the start and
 * the server's CPU seconds per phase (server_phases_s: each phase's receives, then the
 * advance that closes it).
 *
 * --threads N (default 1): the server's final advance runs through
 * fl_secagg_server_unmask_begin/run/next with its jobs spread over N threads that the
 * benchmark starts for each batch (the start-up is timed too); 1 is the plain serial
 * fl_secagg_server_advance. CPU time then adds up the threads, wall time shows the gain.
 *
 * Dropped clients (fraction F) leave after sending their shares and before their masked
 * input: the costly case for the server, which must rebuild their masking keys and remove
 * the pairwise masks they share with every surviving neighbour.
 *
 * --active 1|2 (default 0, semi-honest): the round runs in active-adversary mode
 * (cfg.active = 1): signed advertisements checked against a pinned authority key, and the
 * consistency phase (every survivor signs U3; the unmask request carries the neighbours'
 * signatures). 1 uses v1 certificates (over the client index), 2 device certificates
 * (cfg.device_certs = 1, as the coordinator runs it). The authority key and every client's
 * signing key and certificate are made before the round and outside every timed part, as
 * a real authority issues them beforehand; the signing and verifying the round itself does
 * is timed where it happens (server: its receives and advances, consistency phase in
 * server_phases_s; client: advertise, keys, consistency and unmask steps). k and t are
 * derived with the semi-malicious bound, so they can differ from the semi-honest round's.
 * The JSON then gains "active", the consistency phase's server seconds, the number of
 * consistency signatures sent and the client's seconds per step (client_phases_s); the
 * table gains the consistency phase's server and client seconds and the mode. With 0 the
 * output is that of the semi-honest benchmark, unchanged.
 *
 * --reveal 1 (default 0): cfg.reveal_pair_seeds = 1 (with --active too): each survivor's
 * unmask answer also carries the seeds of the masks it shared with dropped neighbours, so
 * the server's final advance makes no X25519 agreement for them (unmask_agreements counts
 * those it still makes). The JSON gains "reveal_pair_seeds": true, the table "seeds".
 *
 * Primitive floor (floor_* in the JSON, floor_x in the table): what the round cannot cost
 * less than with these primitives, measured in the same server process after the round:
 * the fold of the masked inputs (as many vectors at the plain sum's own cost per element),
 * plus the final advance's X25519 agreements (each with its HKDF) and the keystream of its
 * mask expansions (d words each), the counts taken from the server
 * (fl__sa_server_unmask_work) and each unit cost timed here (best of 5); with --threads N
 * the advance's part is divided by N. Removing the masks from the sum, rebuilding secrets,
 * routing messages and everything else is left out, so a target below floor_x is out of
 * reach without other primitives or another protocol. */

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flotilla/secagg.h"
#include "crypto.h"
#include "secagg_internal.h"

#define BENCH_NAME "bench_secagg" /* for bench_die (identity setup) */
#include "bench_util.h"

/* ---- utilities (the bench is an executable: exiting on I/O failure is fine) ---- */

/* CPU time of this process by default (the shared 2-core CI box makes wall time noisy);
 * --wall switches to elapsed time. Server and clients are separate processes, so each side's
 * CPU time is its own. */
static int use_wall = 0;

static double now_s(void) {
    return bench_clock_s(use_wall ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID);
}

/* Cost of one clock read as seen by a measured interval: the median of back-to-back
 * now_s() differences. CPU-time clocks are a system call (~0.25 us idle, several us on a
 * loaded VM), and the server times every message on its own while the plain baseline times
 * one fold per client, so the secagg side would pay it ~4x as often; each measured
 * interval is corrected by it (clamped at 0). */
static double clock_cost;

/* The two calibrations read their clocks directly (no function pointer), so the timed reads
 * are the same calls as in the measured intervals. */
static void calibrate_clock(void) {
    enum { N = 2001 };
    static double d[N];
    for (int i = 0; i < N; i++) {
        double t0 = now_s();
        d[i] = now_s() - t0;
    }
    clock_cost = bench_median(d, N);
}

/* Seconds since t0, less the cost of the clock reads. */
static double since(double t0) {
    double dt = now_s() - t0 - clock_cost;
    return dt > 0 ? dt : 0;
}

/* Wall-clock time, read next to now_s() for the server's *_wall figures; its read cost
 * (a vDSO call, ~20 ns) is calibrated like clock_cost. */
static double wall_cost;

static void calibrate_wall(void) {
    enum { N = 2001 };
    static double d[N];
    for (int i = 0; i < N; i++) {
        double t0 = bench_wall_s();
        d[i] = bench_wall_s() - t0;
    }
    wall_cost = bench_median(d, N);
}

static double wall_since(double t0) {
    double dt = bench_wall_s() - t0 - wall_cost;
    return dt > 0 ? dt : 0;
}

/* Not bench_die: an I/O failure between the two processes exits 2, with errno's text. */
static void die(const char *what) {
    fprintf(stderr, "bench_secagg: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        b += w;
        n -= (size_t)w;
    }
}

static void read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("read");
        b += r;
        n -= (size_t)r;
    }
}

/* Input vector of client i (deterministic, regenerated on demand: never n x d in memory). */
static void gen_input(uint32_t *x, uint32_t d, uint32_t i, uint32_t bits) {
    uint64_t s = 0xC0FFEEull * (i + 1);
    uint32_t m = bits >= 32 ? 0xFFFFFFFFu : ((1u << bits) - 1u);
    for (uint32_t j = 0; j < d; j++)
        x[j] = (uint32_t)bench_splitmix64(&s) & m;
}

/* ---- server process ---- */

/* The insecure baseline's inner loop, written to vectorize as well as the library's fold
 * (restrict pointers, memcpy loads on little-endian hosts): the ratio must not flatter.
 * noinline: inlined into server_main, gcc 12 -O3 loses the restrict qualifiers and leaves
 * the loop scalar, which made the baseline 1.3-4x slower than the library's own fold (and
 * every x_plain recorded before 2026-11-30 that much too flattering). */
__attribute__((noinline)) static void plain_fold(uint32_t *restrict acc,
                                                 const uint8_t *restrict p, uint32_t d) {
    for (uint32_t j = 0; j < d; j++) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint32_t v;
        memcpy(&v, p + 4 * (size_t)j, 4);
#else
        uint32_t v = (uint32_t)p[4 * j] | (uint32_t)p[4 * j + 1] << 8 |
                     (uint32_t)p[4 * j + 2] << 16 | (uint32_t)p[4 * j + 3] << 24;
#endif
        acc[j] += v;
    }
}

enum { CMD_RECV = 'R', CMD_ADVANCE = 'A', CMD_PLAIN = 'P', CMD_END = 'E' };

/* ---- the final advance on N threads (the benchmark's own) ---- */

#define MAX_THREADS 64

static double thread_cpu(void) {
    return bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* Jobs are dealt out in advance (worker i runs jobs i, i + threads, ...), not taken from a
 * shared counter: a worker that the scheduler starts late would otherwise find every job
 * taken by this thread, and the span would measure that delay instead of the split that
 * idle cores give. */
struct batch {
    fl_secagg_server *srv;
    size_t njobs;
    unsigned threads;        /* workers in this batch (this thread is worker 0) */
    double cpu[MAX_THREADS]; /* CPU seconds of each worker in this batch */
};

struct worker {
    struct batch *b;
    unsigned idx;
};

static void *batch_worker(void *arg) {
    struct worker *w = arg;
    struct batch *b = w->b;
    double t0 = thread_cpu();
    for (size_t j = w->idx; j < b->njobs; j += b->threads)
        (void)fl_secagg_server_unmask_run(b->srv, j); /* failures surface at next */
    b->cpu[w->idx] = thread_cpu() - t0;
    return NULL;
}

/* Runs the unmask as begin/run/next with each batch on `threads` threads (this one
 * included); returns what fl_secagg_server_advance would. *span: its critical path in
 * CPU seconds, i.e. the wall time on otherwise idle cores: this thread's own work
 * (begin, next, starting and joining threads) plus, per batch, the busiest worker. On the
 * shared 2-core build box the wall time mostly measures the other tenants. */
static fl_status unmask_threaded(fl_secagg_server *srv, unsigned threads, double *span) {
    double c0 = thread_cpu(), in_batches = 0, busiest = 0;
    size_t nj;
    fl_status st = fl_secagg_server_unmask_begin(srv, threads, &nj);
    while (st == FL_OK && nj > 0) {
        pthread_t th[MAX_THREADS];
        struct worker w[MAX_THREADS];
        unsigned use = nj < threads ? (unsigned)nj : threads, started = 1;
        struct batch b = {.srv = srv, .njobs = nj, .threads = use};
        for (unsigned i = 0; i < use; i++)
            w[i] = (struct worker){&b, i};
        for (; started < use; started++)
            if (pthread_create(&th[started], NULL, batch_worker, &w[started]) != 0)
                break;
        for (unsigned i = started; i < use; i++)
            batch_worker(&w[i]); /* a worker that could not start: its jobs run here */
        batch_worker(&w[0]);
        double most = 0;
        for (unsigned i = 1; i < started; i++) {
            pthread_join(th[i], NULL);
            most = b.cpu[i] > most ? b.cpu[i] : most;
        }
        in_batches += b.cpu[0];
        busiest += b.cpu[0] > most ? b.cpu[0] : most;
        st = fl_secagg_server_unmask_next(srv, &nj);
    }
    *span = thread_cpu() - c0 - in_batches + busiest;
    return st;
}

struct server_stats {
    double t_secagg;       /* seconds in server receive + advance */
    double t_unmask;       /* seconds in the final advance (mask removal) */
    double t_fold;         /* seconds in masked-input receives */
    double t_phase[5][2];  /* seconds per phase (FL_SECAGG_PHASE_ADVERTISE..UNMASK): its
                              receives [0] and the advance that closes it [1] */
    double t_plain;        /* seconds folding the plain vectors */
    double t_span;         /* critical path of the final advance in CPU seconds (see
                              unmask_threaded; = t_unmask with one thread) */
    double w_secagg;       /* the same four in wall-clock seconds */
    double w_unmask;
    double w_fold;
    double w_plain;
    long maxrss_kb;        /* peak RSS of the server process */
    uint32_t k, t;         /* effective degree and threshold */
    uint32_t count;        /* inputs in the secagg sum */
    uint32_t plain_count;  /* inputs in the plain sum */
    int status;            /* final status */
    int match;             /* secagg sum == plain sum */
    uint32_t rejected;     /* messages the server rejected */
    double clock_cost;     /* seconds subtracted from each measured interval */
    uint64_t secrets;      /* the final advance's work (fl__sa_server_unmask_work) */
    uint64_t agreements;
    uint64_t masks;
    double agree_s;        /* unit costs timed after the round: one X25519 + HKDF */
    double prg_byte_s;     /* one keystream byte (crypto prg, 64 KiB calls) */
    double floor_s;        /* the primitive floor (see the top of this file), serial */
    double floor_span_s;   /* the same with the advance's part over the threads */
};

/* Unit costs for the floor: the best (smallest) of 5 timings, per call or byte, in thread
 * CPU seconds; 0 if a call fails. */
static double unit_agree(const struct fl__sa_crypto *c) {
    uint8_t sk[32], pk[32], peer_sk[32], peer_pk[32], out[32];
    if (c->x25519_keypair(pk, sk) || c->x25519_keypair(peer_pk, peer_sk))
        return 0;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = thread_cpu();
        for (uint32_t i = 0; i < 200; i++)
            if (fl__sa_derive_pair_key(out, c, "mask", sk, peer_pk, 42, i, i + 1, NULL))
                return 0;
        double dt = (thread_cpu() - t0) / 200;
        best = dt < best ? dt : best;
    }
    return best;
}

static double unit_prg_byte(const struct fl__sa_crypto *c) {
    enum { CALL = 65536, CALLS = 256 };
    uint8_t *buf = malloc(CALL), seed[32] = {7};
    double best = 1e9;
    for (int rep = 0; buf && rep < 5; rep++) {
        double t0 = thread_cpu();
        for (int i = 0; i < CALLS; i++) {
            seed[0] = (uint8_t)i;
            if (c->prg(buf, CALL, seed)) {
                free(buf);
                return 0;
            }
        }
        double dt = (thread_cpu() - t0) / ((double)CALL * CALLS);
        best = dt < best ? dt : best;
    }
    free(buf);
    return best;
}

static void server_main(int fd, const fl_secagg_config *cfg, unsigned threads) {
    struct server_stats st;
    memset(&st, 0, sizeof(st));
    calibrate_clock();
    calibrate_wall();
    st.clock_cost = clock_cost;
    fl_secagg_server *srv = NULL;
    uint8_t seed[32] = {1, 2, 3};
    if (fl_secagg_server_create(&srv, cfg, 42, seed, NULL) != FL_OK) {
        fprintf(stderr, "server_create failed\n");
        exit(3);
    }
    fl_secagg_server_params(srv, &st.k, &st.t);
    uint32_t n = cfg->num_clients, d = cfg->dim;
    uint32_t *plain = calloc(d, sizeof(uint32_t));
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    if (!plain || !buf)
        exit(3);
    for (;;) {
        uint8_t cmd;
        uint32_t hdr[2];
        read_all(fd, &cmd, 1);
        read_all(fd, hdr, sizeof(hdr));
        if (hdr[1] > cap) {
            free(buf);
            cap = hdr[1];
            buf = malloc(cap);
            if (!buf)
                exit(3);
        }
        read_all(fd, buf, hdr[1]);
        if (cmd == CMD_RECV) {
            fl_secagg_phase ph = fl_secagg_server_phase(srv);
            int masked = ph == FL_SECAGG_PHASE_MASKED_INPUT;
            double w0 = bench_wall_s(), t0 = now_s();
            fl_status s = fl_secagg_server_receive(srv, hdr[0], buf, hdr[1]);
            double dt = since(t0), dw = wall_since(w0);
            st.t_secagg += dt;
            st.w_secagg += dw;
            if ((unsigned)ph < 5)
                st.t_phase[ph][0] += dt;
            if (masked) {
                st.t_fold += dt;
                st.w_fold += dw;
            }
            if (s != FL_OK)
                st.rejected++;
        } else if (cmd == CMD_PLAIN) {
            /* The insecure baseline: decode the wire bytes and add. */
            double w0 = bench_wall_s(), t0 = now_s();
            plain_fold(plain, buf, d);
            st.t_plain += since(t0);
            st.w_plain += wall_since(w0);
            st.plain_count++;
        } else if (cmd == CMD_ADVANCE) {
            fl_secagg_phase ph = fl_secagg_server_phase(srv);
            int last = ph == FL_SECAGG_PHASE_UNMASK;
            double w0 = bench_wall_s(), t0 = now_s(), span = 0, c0 = thread_cpu();
            fl_status s = last && threads > 1 ? unmask_threaded(srv, threads, &span)
                                              : fl_secagg_server_advance(srv);
            double dt = since(t0), dw = wall_since(w0);
            if (!(last && threads > 1))
                span = thread_cpu() - c0;
            if (last)
                st.t_span = span;
            if ((unsigned)ph < 5)
                st.t_phase[ph][1] += dt;
            st.t_secagg += dt;
            st.w_secagg += dw;
            if (last) {
                st.t_unmask = dt;
                st.w_unmask = dw;
                fl__sa_server_unmask_work(srv, &st.secrets, &st.agreements, &st.masks);
            }
            int32_t rs = (int32_t)s;
            write_all(fd, &rs, 4);
            uint32_t cnt = 0;
            const uint8_t *m;
            size_t ml;
            for (uint32_t i = 0; s == FL_OK && i < n; i++)
                if (fl_secagg_server_outgoing(srv, i, &m, &ml) == FL_OK)
                    cnt++;
            write_all(fd, &cnt, 4);
            for (uint32_t i = 0; s == FL_OK && i < n; i++)
                if (fl_secagg_server_outgoing(srv, i, &m, &ml) == FL_OK) {
                    uint32_t h[2] = {i, (uint32_t)ml};
                    write_all(fd, h, sizeof(h));
                    write_all(fd, m, ml);
                }
            if (s != FL_OK) {
                st.status = s;
                fprintf(stderr, "server: %s\n", fl_secagg_server_errmsg(srv));
            }
        } else if (cmd == CMD_END) {
            const uint32_t *sum;
            uint32_t count = 0;
            if (fl_secagg_server_result(srv, &sum, NULL, &count) == FL_OK) {
                st.count = count;
                uint32_t m = cfg->bits >= 32 ? 0xFFFFFFFFu : ((1u << cfg->bits) - 1u);
                st.match = 1;
                for (uint32_t j = 0; j < d; j++)
                    if (sum[j] != (plain[j] & m)) {
                        st.match = 0;
                        break;
                    }
            }
            break;
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    st.maxrss_kb = ru.ru_maxrss; /* before the unit timings below, which allocate */
    const struct fl__sa_crypto *crypto = fl__sa_backend(cfg->backend);
    if (crypto && st.plain_count > 0 && d > 0) {
        st.agree_s = unit_agree(crypto);
        st.prg_byte_s = unit_prg_byte(crypto);
        double adv =
            (double)st.agreements * st.agree_s + (double)st.masks * d * 4.0 * st.prg_byte_s;
        /* The fold of the masked inputs is the plain sum of as many vectors. */
        double fold = st.t_plain / st.plain_count * st.count;
        st.floor_s = fold + adv;
        st.floor_span_s = fold + adv / (threads > 1 ? threads : 1);
    }
    write_all(fd, &st, sizeof(st));
    fl_secagg_server_destroy(srv);
    free(plain);
    free(buf);
    exit(0);
}

/* ---- client side (parent) ---- */

struct result {
    uint32_t n, d, bits;
    unsigned threads;      /* threads of the server's final advance */
    double loadavg;        /* 1-minute load average when the run started */
    double drop;
    struct server_stats srv;
    double t_client[5];    /* mean seconds per client and step: advertise, keys, masked,
                              consistency (active only, else 0), unmask */
    size_t client_peak;    /* peak heap bytes of one client */
    int active;            /* --active: 0 semi-honest, 1 v1 certificates, 2 device certs */
    int reveal;            /* --reveal: cfg.reveal_pair_seeds */
    uint32_t signatures;   /* consistency signatures the clients sent (active) */
};

struct counting {
    size_t live, peak;
};
static void *c_alloc(void *u, size_t n) {
    struct counting *c = u;
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    c->live += n;
    if (c->live > c->peak)
        c->peak = c->live;
    return (uint8_t *)p + 16;
}
static void c_free(void *u, void *ptr, size_t n) {
    struct counting *c = u;
    (void)n;
    if (!ptr)
        return;
    size_t *p = (size_t *)((uint8_t *)ptr - 16);
    c->live -= p[0];
    free(p);
}

/* Client-to-server commands are queued and written in bursts: a phase's messages reach
 * the server back to back, as from many devices at once, instead of one at a time between
 * the (serially simulated) clients' computations, which leaves the server asleep and its
 * caches cold before every message (--paced keeps that, one write per message). */
static int paced = 0;
#define BURST_MAX ((size_t)64 << 20) /* flush before the queue passes this */
static uint8_t *q_buf;
static size_t q_len, q_cap;

static void flush_cmds(int fd) {
    if (q_len)
        write_all(fd, q_buf, q_len);
    q_len = 0;
}

static void q_put(const void *p, size_t n) {
    if (q_len + n > q_cap) {
        size_t cap = q_cap ? q_cap : 1 << 16;
        while (cap < q_len + n)
            cap *= 2;
        uint8_t *b = realloc(q_buf, cap);
        if (!b)
            die("malloc");
        q_buf = b;
        q_cap = cap;
    }
    memcpy(q_buf + q_len, p, n);
    q_len += n;
}

static void send_cmd(int fd, uint8_t cmd, uint32_t client, const uint8_t *m, size_t len) {
    uint32_t h[2] = {client, (uint32_t)len};
    if (q_len && q_len + 9 + len > BURST_MAX)
        flush_cmds(fd);
    q_put(&cmd, 1);
    q_put(h, sizeof(h));
    if (len)
        q_put(m, len);
    if (paced || cmd == CMD_ADVANCE || cmd == CMD_END)
        flush_cmds(fd);
}

/* Device id of client i in device-certificate rounds: distinct per client, never all
 * zero (the index, little endian, then a fixed pattern). */
static void device_id(uint8_t id[FL_SECAGG_DEVICE_ID_BYTES], uint32_t i) {
    for (uint32_t j = 0; j < FL_SECAGG_DEVICE_ID_BYTES; j++)
        id[j] = (uint8_t)(0xD0 + j * 29u);
    for (uint32_t j = 0; j < 4; j++)
        id[j] = (uint8_t)(i >> (8 * j));
}

/* Active mode's client identities, as the authority (signing key auth_sk) issues them
 * before the round: per client a signing key with a v1 (active 1) or device (active 2)
 * certificate. Returns the n identities (calloc'd; the caller wipes and frees them). Not
 * timed; called in the clients' process only, after the fork, so the server's peak RSS
 * does not carry them. */
static fl_secagg_identity *make_identities(const fl_secagg_config *cfg, int active,
                                           const uint8_t auth_sk[FL_SECAGG_SIGNING_KEY_BYTES]) {
    uint32_t n = cfg->num_clients;
    uint8_t vk[FL_SECAGG_VERIFY_KEY_BYTES];
    fl_secagg_identity *ids = calloc(n, sizeof(*ids));
    if (!ids)
        die("malloc");
    fl_status s;
    for (uint32_t i = 0; i < n; i++) {
        fl_secagg_identity *id = &ids[i];
        id->struct_size = sizeof(*id);
        s = fl_secagg_signing_keygen(vk, id->signing_key, cfg->backend);
        if (s != FL_OK)
            bench_die("client keygen", fl_status_str(s));
        if (active == 2) {
            device_id(id->device_id, i);
            s = fl_secagg_cert_issue_device(id->cert, auth_sk, id->device_id, vk, cfg->backend);
        } else {
            s = fl_secagg_cert_issue(id->cert, auth_sk, i, vk, cfg->backend);
        }
        if (s != FL_OK)
            bench_die("certificate issue", fl_status_str(s));
    }
    return ids;
}

static int run_one(struct result *res, uint32_t n, uint32_t d, double drop, uint32_t k,
                   uint32_t t, uint32_t bits, fl_secagg_backend backend, unsigned threads,
                   int active, int reveal) {
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = n;
    cfg.dim = d;
    cfg.degree = k;
    cfg.threshold = t;
    cfg.bits = bits;
    cfg.backend = backend;
    cfg.dropout_rate = drop > 0.05 ? drop : 0.05;
    cfg.active = active != 0;
    cfg.device_certs = active == 2;
    cfg.reveal_pair_seeds = reveal;
    char err[256];
    if (fl_secagg_config_resolve(&cfg, err, sizeof(err)) != FL_OK) {
        fprintf(stderr, "config: %s\n", err);
        return -1;
    }
    /* The authority's key before the fork: the server's config pins its verification key. */
    uint8_t auth_sk[FL_SECAGG_SIGNING_KEY_BYTES];
    if (active) {
        fl_status s = fl_secagg_signing_keygen(cfg.verify_key, auth_sk, cfg.backend);
        if (s != FL_OK)
            bench_die("authority keygen", fl_status_str(s));
    }
    memset(res, 0, sizeof(*res));
    res->active = active;
    res->reveal = reveal;
    res->n = n;
    res->d = d;
    res->drop = drop;
    res->bits = bits;
    res->threads = threads;
    if (getloadavg(&res->loadavg, 1) != 1)
        res->loadavg = -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        die("socketpair");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(sv[0]);
        server_main(sv[1], &cfg, threads);
    }
    close(sv[1]);
    int fd = sv[0];
    fl_secagg_identity *ids = active ? make_identities(&cfg, active, auth_sk) : NULL;
    fl_memzero(auth_sk, sizeof(auth_sk));
    calibrate_clock();

    struct counting cnt0 = {0, 0};
    fl_allocator a0 = {sizeof(fl_allocator), c_alloc, NULL, c_free, &cnt0};
    fl_secagg_client **cl = calloc(n, sizeof(*cl));
    uint8_t *dropped = calloc(n, 1);
    uint32_t *x = malloc((size_t)d * sizeof(uint32_t));
    if (!cl || !dropped || !x)
        die("malloc");
    /* Spread the dropouts over the index space. */
    uint32_t ndrop = (uint32_t)floor(drop * n + 1e-9);
    for (uint32_t j = 0; j < ndrop; j++)
        dropped[(uint32_t)(((uint64_t)j * n) / ndrop)] = 1;
    double tc[5] = {0, 0, 0, 0, 0};
    uint32_t nc[5] = {0, 0, 0, 0, 0};
    for (uint32_t i = 0; i < n; i++) {
        if (fl_secagg_client_create(&cl[i], &cfg, 42, i, ids ? &ids[i] : NULL,
                                    i == 0 ? &a0 : NULL) != FL_OK)
            die("client_create");
        const uint8_t *m;
        size_t ml;
        double t0 = now_s();
        if (fl_secagg_client_start(cl[i], &m, &ml) != FL_OK)
            die("client_start");
        tc[0] += since(t0);
        nc[0]++;
        send_cmd(fd, CMD_RECV, i, m, ml);
    }
    uint8_t *inbuf = NULL;
    size_t incap = 0;
    int status = 0;
    for (int step = 1;; step++) {
        send_cmd(fd, CMD_ADVANCE, 0, NULL, 0);
        int32_t rs;
        uint32_t count;
        read_all(fd, &rs, 4);
        read_all(fd, &count, 4);
        if (rs != 0) {
            status = rs;
            break;
        }
        if (count == 0)
            break; /* DONE */
        /* Read the whole batch first: the server writes it in one go, and answering
         * while it still writes could fill both socket buffers. */
        uint8_t **msgs = calloc(count, sizeof(*msgs));
        uint32_t *hdrs = calloc((size_t)count * 2, sizeof(uint32_t));
        if (!msgs || !hdrs)
            die("malloc");
        for (uint32_t c = 0; c < count; c++) {
            read_all(fd, hdrs + 2 * c, 2 * sizeof(uint32_t));
            msgs[c] = malloc(hdrs[2 * c + 1] ? hdrs[2 * c + 1] : 1);
            if (!msgs[c])
                die("malloc");
            read_all(fd, msgs[c], hdrs[2 * c + 1]);
        }
        for (uint32_t c = 0; c < count; c++) {
            uint32_t h[2] = {hdrs[2 * c], hdrs[2 * c + 1]};
            if (h[1] > incap) {
                free(inbuf);
                incap = h[1];
                inbuf = malloc(incap);
                if (!inbuf)
                    die("malloc");
            }
            memcpy(inbuf, msgs[c], h[1]);
            free(msgs[c]);
            msgs[c] = NULL;
            uint32_t i = h[0];
            fl_secagg_msg_type type;
            fl_secagg_message_peek(&type, NULL, NULL, inbuf, h[1]);
            if (type == FL_SECAGG_MSG_CIPHERTEXTS && dropped[i])
                continue; /* leaves before its masked input */
            /* The client's step: tc/nc slots 1 keys, 2 masked input, 3 consistency
             * signature (active), 4 unmask. */
            int slot = type == FL_SECAGG_MSG_KEYS              ? 1
                       : type == FL_SECAGG_MSG_CIPHERTEXTS     ? 2
                       : type == FL_SECAGG_MSG_CONSISTENCY_REQ ? 3
                                                               : 4;
            if (type == FL_SECAGG_MSG_CIPHERTEXTS) {
                gen_input(x, d, i, bits);
                if (fl_secagg_client_set_input(cl[i], x, d) != FL_OK)
                    die("set_input");
            }
            const uint8_t *m;
            size_t ml;
            double t0 = now_s();
            fl_status s = fl_secagg_client_handle(cl[i], inbuf, h[1], &m, &ml);
            tc[slot] += since(t0);
            nc[slot]++;
            if (s != FL_OK) {
                fprintf(stderr, "client %u: %s\n", i, fl_secagg_client_errmsg(cl[i]));
                continue;
            }
            send_cmd(fd, CMD_RECV, i, m, ml);
            if (type == FL_SECAGG_MSG_CONSISTENCY_REQ)
                res->signatures++;
            if (type == FL_SECAGG_MSG_CIPHERTEXTS) {
                /* The same vector, unmasked, for the plain baseline. */
                uint8_t *p = (uint8_t *)x;
                for (uint32_t j = 0; j < d; j++) {
                    uint32_t v = x[j];
                    p[4 * j] = (uint8_t)v;
                    p[4 * j + 1] = (uint8_t)(v >> 8);
                    p[4 * j + 2] = (uint8_t)(v >> 16);
                    p[4 * j + 3] = (uint8_t)(v >> 24);
                }
                send_cmd(fd, CMD_PLAIN, i, p, (size_t)d * 4);
            }
            if (i == 0 && type == FL_SECAGG_MSG_UNMASK_REQ)
                res->client_peak = cnt0.peak;
        }
        for (uint32_t c = 0; c < count; c++)
            free(msgs[c]);
        free(msgs);
        free(hdrs);
        (void)step;
    }
    send_cmd(fd, CMD_END, 0, NULL, 0);
    read_all(fd, &res->srv, sizeof(res->srv));
    res->srv.status = status ? status : res->srv.status;
    waitpid(pid, NULL, 0);
    close(fd);
    for (int j = 0; j < 5; j++)
        res->t_client[j] = nc[j] ? tc[j] / nc[j] : 0;
    if (!res->client_peak)
        res->client_peak = cnt0.peak;
    for (uint32_t i = 0; i < n; i++)
        fl_secagg_client_destroy(cl[i]);
    free(cl);
    if (ids) {
        fl_memzero(ids, (size_t)n * sizeof(*ids));
        free(ids);
    }
    free(dropped);
    free(x);
    free(inbuf);
    return 0;
}

/* ---- output ---- */

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

static void print_json(const struct result *r) {
    /* t_client[3] is 0 unless active: the sum is then the semi-honest one, bit for bit. */
    double cl = r->t_client[0] + r->t_client[1] + r->t_client[2] + r->t_client[3] +
                r->t_client[4];
    const struct server_stats *v = &r->srv;
    printf("{\"n\":%u,\"d\":%u,\"bits\":%u,\"dropout\":%.2f,\"k\":%u,\"t\":%u,\"threads\":%u,"
           "\"paced\":%s,\"status\":%d,\"sum_matches_plain\":%s,\"count\":%u,"
           "\"server_s\":%.4f,\"server_fold_s\":%.4f,\"server_unmask_s\":%.4f,"
           "\"plain_sum_s\":%.4f,\"server_over_plain\":%.2f,\"unmask_over_plain\":%.2f,"
           "\"server_unmask_span_s\":%.4f,\"server_span_over_plain\":%.2f,"
           "\"server_wall_s\":%.4f,\"server_unmask_wall_s\":%.4f,\"plain_sum_wall_s\":%.4f,"
           "\"server_over_plain_wall\":%.2f,\"unmask_over_plain_wall\":%.2f,"
           "\"server_peak_rss_mb\":%.1f,"
           "\"accumulator_mb\":%.1f,\"client_s\":%.4f,\"client_mask_s\":%.4f,"
           "\"client_peak_heap_mb\":%.2f,\"clock_cost_us\":%.3f,\"loadavg_1m\":%.2f,"
           "\"unmask_secrets\":%llu,\"unmask_agreements\":%llu,\"unmask_masks\":%llu,"
           "\"agreement_us\":%.2f,\"prg_GBps\":%.2f,\"floor_s\":%.4f,"
           "\"floor_over_plain\":%.2f,\"floor_span_over_plain\":%.2f,"
           "\"server_phases_s\":{\"advertise\":[%.4f,%.4f],\"share\":[%.4f,%.4f],"
           "\"masked\":[%.4f,%.4f],\"consistency\":[%.4f,%.4f],\"unmask\":[%.4f,%.4f]}",
           r->n, r->d, r->bits, r->drop, v->k, v->t, r->threads, paced ? "true" : "false",
           v->status,
           v->match ? "true" : "false", v->count, v->t_secagg, v->t_fold, v->t_unmask,
           v->t_plain, ratio(v->t_secagg, v->t_plain), ratio(v->t_unmask, v->t_plain),
           v->t_span, ratio(v->t_secagg - v->t_unmask + v->t_span, v->t_plain), v->w_secagg,
           v->w_unmask, v->w_plain, ratio(v->w_secagg, v->w_plain),
           ratio(v->w_unmask, v->w_plain), v->maxrss_kb / 1024.0, r->d * 4.0 / 1048576.0, cl,
           r->t_client[2], r->client_peak / 1048576.0, v->clock_cost * 1e6, r->loadavg,
           (unsigned long long)v->secrets, (unsigned long long)v->agreements,
           (unsigned long long)v->masks, v->agree_s * 1e6,
           v->prg_byte_s > 0 ? 1e-9 / v->prg_byte_s : 0.0, v->floor_s,
           ratio(v->floor_s, v->t_plain), ratio(v->floor_span_s, v->t_plain),
           v->t_phase[0][0], v->t_phase[0][1], v->t_phase[1][0], v->t_phase[1][1],
           v->t_phase[2][0], v->t_phase[2][1], v->t_phase[3][0], v->t_phase[3][1],
           v->t_phase[4][0], v->t_phase[4][1]);
    /* Active mode only, after everything else: with --active 0 the line stays as it was. */
    if (r->active)
        printf(",\"active\":%d,\"device_certs\":%s,\"consistency_s\":%.4f,"
               "\"consistency_signatures\":%u,\"client_phases_s\":{\"advertise\":%.6f,"
               "\"keys\":%.6f,\"masked\":%.6f,\"consistency\":%.6f,\"unmask\":%.6f}",
               r->active, r->active == 2 ? "true" : "false",
               v->t_phase[3][0] + v->t_phase[3][1], r->signatures, r->t_client[0],
               r->t_client[1], r->t_client[2], r->t_client[3], r->t_client[4]);
    if (r->reveal)
        printf(",\"reveal_pair_seeds\":true");
    printf("}\n");
}

/* The table's columns; active mode (--active 1|2) appends the consistency phase's server
 * seconds, the client's consistency step and the mode. */
static void print_header(int active) {
    printf("%6s %8s %5s %4s %4s %3s | %9s %9s %9s %7s | %9s %7s %7s | %9s %9s %7s | %8s %7s |"
           " %9s %9s %8s | %s",
           "n", "d", "drop", "k", "t", "thr", "server_s", "unmask_s", "plain_s", "x_plain",
           "unm_span", "x_span", "floor_x", "srv_wall", "unm_wall", "x_wall", "rss_MB", "acc_MB",
           "client_s", "mask_s", "cli_MB", "ok");
    if (active)
        printf("%7s | %9s %9s | %s", "", "cons_s", "cli_sig_s", "mode");
    printf("\n");
}

static void print_row(const struct result *r) {
    /* t_client[3] is 0 unless active: the sum is then the semi-honest one, bit for bit. */
    double cl = r->t_client[0] + r->t_client[1] + r->t_client[2] + r->t_client[3] +
                r->t_client[4];
    const struct server_stats *v = &r->srv;
    printf("%6u %8u %4.0f%% %4u %4u %3u | %9.3f %9.3f %9.3f %7.2f | %9.3f %7.2f %7.2f |"
           " %9.3f %9.3f %7.2f | %8.1f %7.1f | %9.4f %9.4f %8.2f | %s",
           r->n, r->d, r->drop * 100, v->k, v->t, r->threads, v->t_secagg, v->t_unmask,
           v->t_plain, ratio(v->t_secagg, v->t_plain), v->t_span,
           ratio(v->t_secagg - v->t_unmask + v->t_span, v->t_plain),
           ratio(v->floor_span_s, v->t_plain), v->w_secagg, v->w_unmask,
           ratio(v->w_secagg, v->w_plain), v->maxrss_kb / 1024.0, r->d * 4.0 / 1048576.0, cl,
           r->t_client[2], r->client_peak / 1048576.0,
           v->status ? "ABORT" : (v->match ? "sum=plain" : "MISMATCH"));
    if (r->active)
        printf(" | %9.4f %9.6f | %s", v->t_phase[3][0] + v->t_phase[3][1], r->t_client[3],
               r->active == 2 ? "active, device certs" : "active, v1 certs");
    if (r->reveal)
        printf(" seeds");
    printf("\n");
    fflush(stdout);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_secagg [--n N] [--d D] [--drop F] [--k K] [--t T] [--bits B]\n"
            "                    [--backend sodium|mbedtls] [--json] [--table [small|full]]\n"
            "                    [--wall] [--threads N] [--paced] [--active 0|1|2]\n"
            "                    [--reveal 0|1]\n");
    exit(2);
}

int main(int argc, char **argv) {
    uint32_t n = 100, d = 10000, k = 0, t = 0, bits = 32;
    double drop = 0.0;
    int json = 0, table = 0, full = 0, row = 0;
    unsigned threads = 1;
    int active = 0, reveal = 0;
    fl_secagg_backend backend = FL_SECAGG_BACKEND_SODIUM;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--row"))
            row = 1;
        else if (!strcmp(a, "--wall"))
            use_wall = 1;
        else if (!strcmp(a, "--paced"))
            paced = 1;
        else if (!strcmp(a, "--table")) {
            table = 1;
            if (v && !strcmp(v, "full"))
                full = 1, i++;
            else if (v && !strcmp(v, "small"))
                i++;
        } else if (!v)
            usage();
        else if (!strcmp(a, "--n"))
            n = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--d"))
            d = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--k"))
            k = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--t"))
            t = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--bits"))
            bits = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--drop"))
            drop = strtod(v, NULL), i++;
        else if (!strcmp(a, "--threads")) {
            char *end;
            unsigned long x = strtoul(v, &end, 10);
            if (*end || x < 1 || x > MAX_THREADS) {
                fprintf(stderr, "bench_secagg: --threads takes 1..%d\n", MAX_THREADS);
                return 2;
            }
            threads = (unsigned)x, i++;
        } else if (!strcmp(a, "--reveal")) {
            if (!v || (strcmp(v, "0") && strcmp(v, "1")))
                usage();
            reveal = v[0] - '0', i++;
        } else if (!strcmp(a, "--active")) {
            if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "2")) {
                fprintf(stderr, "bench_secagg: --active takes 0 (semi-honest), 1 (v1 "
                                "certificates) or 2 (device certificates)\n");
                return 2;
            }
            active = v[0] - '0', i++;
        }
        else if (!strcmp(a, "--backend")) {
            backend = !strcmp(v, "mbedtls") ? FL_SECAGG_BACKEND_MBEDTLS : FL_SECAGG_BACKEND_SODIUM;
            i++;
        } else
            usage();
    }
    if (!table) {
        struct result r;
        if (run_one(&r, n, d, drop, k, t, bits, backend, threads, active, reveal) != 0)
            return 1;
        if (json)
            print_json(&r);
        else {
            if (!row)
                print_header(active);
            print_row(&r);
        }
        return r.srv.status == 0 && r.srv.match ? 0 : 1;
    }
    static const char *const ns[] = {"100", "500", "1000"};
    static const char *const ds[] = {"10000", "100000", "1000000"};
    static const char *const drops[] = {"0", "0.1", "0.3"};
    size_t nd = full ? 3 : 2;
    if (!json)
        print_header(active);
    fflush(stdout);
    int rc = 0;
    char bits_s[16], threads_s[16], active_s[16], reveal_s[16];
    snprintf(reveal_s, sizeof(reveal_s), "%d", reveal);
    snprintf(bits_s, sizeof(bits_s), "%u", bits);
    snprintf(active_s, sizeof(active_s), "%d", active);
    snprintf(threads_s, sizeof(threads_s), "%u", threads);
    /* Each configuration runs in a fresh process (fork + exec of this program), so the
     * server's peak RSS never includes heap left over from an earlier configuration. */
    for (size_t a = 0; a < nd; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 3; c++) {
                char *args[] = {argv[0], "--n", (char *)ns[b], "--d", (char *)ds[a], "--drop",
                                (char *)drops[c], "--bits", bits_s, "--threads", threads_s,
                                "--active", active_s, "--reveal", reveal_s,
                                json ? "--json" : "--row",
                                use_wall ? "--wall" : "--row", paced ? "--paced" : "--row",
                                NULL};
                pid_t pid = fork();
                if (pid < 0)
                    die("fork");
                if (pid == 0) {
                    execv(argv[0], args);
                    _exit(127);
                }
                int ws = 0;
                waitpid(pid, &ws, 0);
                if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
                    rc = 1;
            }
    return rc;
}
