/* The server's final advance on the caller's threads: fl_secagg_server_unmask_begin, _run
 * and _next, driven here by real pthreads. The parallel path must give the plain sum (and
 * so the serial path's result) for small and larger rounds, sparse and complete graphs,
 * dropouts at every phase and 1, 2, 3 and 8 threads; a failing job (tampered shares, or a
 * crypto primitive made to fail inside a job) must fail the round with the serial path's
 * code and message; misuse (wrong phase, job out of range, a job run twice, next before
 * every job returned) is refused with nothing changed; an allocation failure at begin
 * leaves the round as it was, and jobs allocate nothing. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "secagg_internal.h"
#include "test_sa_harness.h"

/* ---- one batch on real threads ---- */

#define MAX_THREADS 8

struct batch {
    fl_secagg_server *srv;
    size_t njobs;
    atomic_size_t next;   /* next job to take */
    atomic_size_t failed; /* jobs that returned an error */
    atomic_int code;      /* the code of one failed job (0 = none) */
};

static void *batch_worker(void *arg) {
    struct batch *b = arg;
    size_t j;
    while ((j = atomic_fetch_add(&b->next, 1)) < b->njobs) {
        fl_status st = fl_secagg_server_unmask_run(b->srv, j);
        if (st != FL_OK) {
            int none = 0;
            atomic_fetch_add(&b->failed, 1);
            atomic_compare_exchange_strong(&b->code, &none, (int)st);
        }
    }
    return NULL;
}

/* Runs jobs 0..njobs-1 of the current batch on `threads` threads (this one included). */
static void run_batch(struct batch *b, fl_secagg_server *srv, size_t njobs, unsigned threads) {
    pthread_t th[MAX_THREADS];
    assert_true(threads >= 1 && threads <= MAX_THREADS);
    b->srv = srv;
    b->njobs = njobs;
    atomic_init(&b->next, 0);
    atomic_init(&b->failed, 0);
    atomic_init(&b->code, 0);
    for (unsigned i = 1; i < threads; i++)
        assert_int_equal(pthread_create(&th[i], NULL, batch_worker, b), 0);
    batch_worker(b);
    for (unsigned i = 1; i < threads; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
}

/* sa_opts.finish: the final advance through begin/run/next. */
struct par {
    unsigned threads;             /* threads per batch */
    uint32_t max_jobs;            /* unmask_begin's limit */
    size_t batches;               /* batches run */
    size_t jobs[2];               /* jobs of the first two batches */
    size_t job_failures;          /* jobs that returned an error */
    fl_status job_code;           /* code of one of them */
    struct fl_test_counting *cnt; /* if set: no allocation may happen inside a batch */
};

static fl_status finish_parallel(void *user, fl_secagg_server *srv) {
    struct par *p = user;
    size_t nj = 0;
    fl_status st = fl_secagg_server_unmask_begin(srv, p->max_jobs, &nj);
    while (st == FL_OK && nj > 0) {
        assert_true(nj <= p->max_jobs);
        if (p->batches < 2)
            p->jobs[p->batches] = nj;
        p->batches++;
        long calls = p->cnt ? p->cnt->calls : 0;
        struct batch b;
        run_batch(&b, srv, nj, p->threads);
        if (p->cnt)
            assert_int_equal(p->cnt->calls, calls);
        p->job_failures += atomic_load(&b.failed);
        if (atomic_load(&b.code))
            p->job_code = (fl_status)atomic_load(&b.code);
        st = fl_secagg_server_unmask_next(srv, &nj);
    }
    if (st == FL_OK)
        assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_DONE);
    return st;
}

/* ---- rounds ---- */

struct round_case {
    uint32_t n, k, t, d; /* k, t = 0: derived */
    int active;
    unsigned skip;       /* bit i: skip variant i of check_case (to bound the run time) */
};

/* Drop points spread over the clients: some at every phase. */
static void make_drops(uint8_t *drop, uint32_t n, int active) {
    memset(drop, 0, n);
    if (n <= 16) {
        drop[1] = SA_DROP_ADVERTISE;
        drop[3] = SA_DROP_SHARES;
        drop[5] = SA_DROP_MASKED;
        drop[8] = active ? SA_DROP_CONSISTENCY : SA_DROP_UNMASK;
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = i % 20;
        drop[i] = r == 1 ? SA_DROP_ADVERTISE
                  : r == 6 ? SA_DROP_SHARES
                  : r == 11 || r == 13 ? SA_DROP_MASKED
                  : r == 16 ? (active ? SA_DROP_CONSISTENCY : SA_DROP_UNMASK)
                            : SA_DROP_NEVER;
    }
}

static void opts_for(struct sa_opts *o, const struct round_case *c, const uint8_t *drop,
                     uint64_t seed) {
    sa_opts_init(o, c->n, c->d, c->k, c->t);
    o->cfg.active = c->active;
    o->cfg.dropout_rate = 0.3;
    o->drop = drop;
    o->seed = seed;
}

/* Serial reference, then the parallel path at 1, 2, 3 and 8 threads (3 also with more jobs
 * than threads; c->skip may leave variants out): every run must give the plain sum of the
 * same clients. */
static void check_case(const struct round_case *c) {
    uint8_t *drop = malloc(c->n);
    assert_non_null(drop);
    make_drops(drop, c->n, c->active);
    struct sa_opts o;
    struct sa_result ref, res;
    opts_for(&o, c, drop, 11);
    sa_run(&o, &ref);
    if (ref.st != FL_OK)
        fail_msg("n=%u k=%u serial: %s (%s)", c->n, c->k, fl_status_name(ref.st), ref.errmsg);
    assert_true(ref.sum_ok);
    assert_int_equal(ref.count, ref.expect_count);
    assert_true(ref.count < c->n); /* some clients did drop */
    static const unsigned threads[] = {1, 2, 3, 8, 3};
    static const uint32_t max_jobs[] = {1, 2, 3, 8, 64};
    for (size_t i = 0; i < sizeof(threads) / sizeof(threads[0]); i++) {
        if (c->skip >> i & 1)
            continue;
        struct par p = {.threads = threads[i], .max_jobs = max_jobs[i]};
        opts_for(&o, c, drop, 11);
        o.finish = finish_parallel;
        o.finish_user = &p;
        sa_run(&o, &res);
        if (res.st != FL_OK)
            fail_msg("n=%u k=%u threads=%u: %s (%s)", c->n, c->k, threads[i],
                     fl_status_name(res.st), res.errmsg);
        assert_true(res.sum_ok);
        assert_int_equal(res.count, ref.count);
        assert_int_equal(res.expect_count, ref.expect_count);
        assert_int_equal(p.batches, 2);
        assert_int_equal(p.job_failures, 0);
        /* Secrets batch: one job per rebuilt secret at most; masks batch: slices of at
         * least 1024 elements. */
        size_t cap = max_jobs[i];
        assert_true(p.jobs[0] >= 1 && p.jobs[0] <= cap);
        if (cap <= 8) /* every case rebuilds at least 8 secrets */
            assert_int_equal(p.jobs[0], cap);
        size_t slices = c->d / 1024 ? c->d / 1024 : 1;
        assert_int_equal(p.jobs[1], slices < cap ? slices : cap);
    }
    free(drop);
}

static void test_small_complete(void **state) {
    (void)state;
    struct round_case c = {10, 9, 4, 4099, 0, 0};
    check_case(&c);
}

static void test_small_sparse(void **state) {
    (void)state;
    struct round_case c = {10, 6, 3, 5000, 0, 0};
    check_case(&c);
}

static void test_small_active(void **state) {
    (void)state;
    struct round_case c = {10, 9, 5, 3000, 1, 0};
    check_case(&c);
}

static void test_hundred_sparse(void **state) {
    (void)state;
    struct round_case c = {100, 0, 0, 9000, 0, 0};
    check_case(&c);
}

static void test_hundred_complete(void **state) {
    (void)state;
    /* The costliest round here (99 shares per client): 2 and 8 threads only. */
    struct round_case c = {100, 99, 40, 2100, 0, 0x15};
    check_case(&c);
}

/* d smaller than one slice (one mask job) and d = 1. */
static void test_tiny_dim(void **state) {
    (void)state;
    struct round_case c = {10, 6, 3, 1, 0, 0};
    check_case(&c);
    c.d = 37;
    check_case(&c);
}

/* The mbedTLS backend on the server (its X25519 draws blinding from a shared, locked DRBG):
 * the same sums from several threads. */
static void test_mbedtls_server(void **state) {
    (void)state;
    if (!fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS))
        skip();
    uint8_t drop[10];
    make_drops(drop, 10, 0);
    static const unsigned threads[] = {1, 3, 8};
    for (size_t i = 0; i < 3; i++) {
        struct par p = {.threads = threads[i], .max_jobs = threads[i]};
        struct sa_opts o;
        struct sa_result res;
        sa_opts_init(&o, 10, 2500, 6, 3);
        o.server_backend = FL_SECAGG_BACKEND_MBEDTLS;
        o.drop = drop;
        o.finish = finish_parallel;
        o.finish_user = &p;
        sa_run(&o, &res);
        assert_int_equal(res.st, FL_OK);
        assert_true(res.sum_ok);
        assert_int_equal(res.count, res.expect_count);
        assert_int_equal(p.batches, 2);
    }
}

/* ---- failures inside jobs ---- */

/* Flips a bit of every unmask share that a holder reveals for a victim client. */
struct tamper_shares {
    uint32_t victims[2];
};

static void tamper_unmask(void *user, int to_server, uint32_t client, fl_secagg_msg_type type,
                          uint8_t *msg, size_t *len, size_t cap) {
    struct tamper_shares *t = user;
    (void)client;
    (void)cap;
    if (!to_server || type != FL_SECAGG_MSG_UNMASK_SHARES)
        return;
    const size_t es = 4 + 1 + FL__SA_SHARE_Y_BYTES;
    uint32_t count = fl__get_u32le(msg + FL_SECAGG_HEADER_BYTES);
    uint8_t *e = msg + FL_SECAGG_HEADER_BYTES + 4;
    for (uint32_t i = 0; i < count && (size_t)(e + es - msg) <= *len; i++, e += es) {
        uint32_t v = fl__get_u32le(e);
        if (v == t->victims[0] || v == t->victims[1])
            e[4 + 1 + FL__SA_SHARE_Y_BYTES - 1] ^= 1;
    }
}

/* Two clients far apart (in different jobs) get bad shares: every path must report the
 * lower one, as the serial pass does. */
static void check_tampered(uint32_t v0, uint32_t v1, const uint8_t *drop, const char *want) {
    struct tamper_shares ts = {{v0, v1}};
    struct sa_opts o;
    struct sa_result ref, res;
    sa_opts_init(&o, 100, 600, 0, 0);
    o.drop = drop;
    o.tamper = tamper_unmask;
    o.tamper_user = &ts;
    sa_run(&o, &ref);
    assert_int_equal(ref.st, FL_ERR_PROTOCOL);
    assert_int_equal(ref.failed_at, FL_SECAGG_PHASE_UNMASK);
    assert_non_null(strstr(ref.errmsg, want));
    static const unsigned threads[] = {2, 3, 8};
    for (size_t i = 0; i < 3; i++) {
        struct par p = {.threads = threads[i], .max_jobs = 8};
        o.finish = finish_parallel;
        o.finish_user = &p;
        sa_run(&o, &res);
        assert_int_equal(res.st, FL_ERR_PROTOCOL);
        assert_int_equal(res.failed_at, FL_SECAGG_PHASE_UNMASK);
        assert_string_equal(res.errmsg, ref.errmsg);
        assert_int_equal(p.batches, 1); /* the masks batch never ran */
        assert_true(p.job_failures >= 1);
        assert_int_equal(p.job_code, FL_ERR_PROTOCOL);
    }
}

static void test_tampered_shares(void **state) {
    (void)state;
    uint8_t drop[100] = {0};
    check_tampered(3, 90, NULL, "client 3: rebuilt self-mask seed does not match");
    drop[7] = SA_DROP_MASKED;
    drop[91] = SA_DROP_MASKED;
    check_tampered(7, 91, drop, "client 7: rebuilt masking key does not match");
}

/* A table that fails the x25519_shared or prg call number N (counted across threads). */
static const struct fl__sa_crypto *real;
static struct fl__sa_crypto faulty;
static atomic_long ka_calls, prg_calls;
static long ka_fail_at, prg_fail_at;

static int faulty_shared(uint8_t out[32], const uint8_t sk[32], const uint8_t pk[32]) {
    if (atomic_fetch_add(&ka_calls, 1) + 1 == ka_fail_at)
        return -1;
    return real->x25519_shared(out, sk, pk);
}

static int faulty_prg(uint8_t *out, size_t n, const uint8_t seed[32]) {
    if (atomic_fetch_add(&prg_calls, 1) + 1 == prg_fail_at)
        return -1;
    return real->prg(out, n, seed);
}

/* The masks batch draws keystream through the streaming PRG: its pieces count as prg
 * calls too. */
static int faulty_prg_next(void *ctx, uint8_t *out, size_t n) {
    if (atomic_fetch_add(&prg_calls, 1) + 1 == prg_fail_at)
        return -1;
    return real->prg_next(ctx, out, n);
}

static int setup(void **state) {
    (void)state;
    real = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    if (!real)
        return -1;
    faulty = *real;
    faulty.name = "faulty";
    faulty.x25519_shared = faulty_shared;
    faulty.prg = faulty_prg;
    if (faulty.prg_next)
        faulty.prg_next = faulty_prg_next;
    return 0;
}

/* finish: installs the failing table, runs the final advance (serial if threads == 0),
 * then checks that the failure is sticky and nothing else is reachable. */
struct fault_run {
    struct par p;
    unsigned serial;
    fl_status st;
    char msg[160];
};

static fl_status finish_faulty(void *user, fl_secagg_server *srv) {
    struct fault_run *f = user;
    atomic_store(&ka_calls, 0);
    atomic_store(&prg_calls, 0);
    fl__sa_server_set_crypto(srv, &faulty);
    fl_status st = f->serial ? fl_secagg_server_advance(srv) : finish_parallel(&f->p, srv);
    f->st = st;
    snprintf(f->msg, sizeof(f->msg), "%s", fl_secagg_server_errmsg(srv));
    if (st != FL_OK) {
        size_t nj = 7;
        assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_FAILED);
        assert_int_equal(fl_secagg_server_unmask_next(srv, &nj), st);
        assert_int_equal(nj, 0);
        assert_int_equal(fl_secagg_server_unmask_begin(srv, 2, &nj), st);
        assert_int_equal(fl_secagg_server_unmask_run(srv, 0), FL_ERR_MISUSE);
        assert_int_equal(fl_secagg_server_advance(srv), st);
        assert_int_equal(fl_secagg_server_result(srv, NULL, NULL, NULL), FL_ERR_STATE);
    }
    fl__sa_server_set_crypto(srv, real);
    return st;
}

static void check_fault(long ka_at, long prg_at, fl_status want, const char *want_msg) {
    uint8_t drop[100] = {0};
    for (uint32_t i = 5; i < 100; i += 10)
        drop[i] = SA_DROP_MASKED;
    struct fl_test_counting cnt = {0};
    fl_allocator ca = fl_test_counting_allocator(&cnt);
    static const unsigned threads[] = {0, 1, 3, 8};
    for (size_t i = 0; i < 4; i++) {
        struct fault_run f = {.p = {.threads = threads[i], .max_jobs = 8}, .serial = !threads[i]};
        struct sa_opts o;
        struct sa_result res;
        sa_opts_init(&o, 100, 5000, 0, 0);
        o.drop = drop;
        o.alloc = &ca;
        o.finish = finish_faulty;
        o.finish_user = &f;
        ka_fail_at = ka_at;
        prg_fail_at = prg_at;
        sa_run(&o, &res);
        ka_fail_at = prg_fail_at = 0;
        assert_int_equal(res.st, want);
        assert_int_equal(res.failed_at, FL_SECAGG_PHASE_UNMASK);
        assert_string_equal(res.errmsg, want_msg);
        assert_string_equal(f.msg, want_msg);
        if (!f.serial) {
            assert_true(f.p.job_failures >= 1);
            assert_int_equal(f.p.job_code, want);
        }
        assert_int_equal(cnt.live, 0); /* everything freed (and wiped) at destroy */
    }
}

static void test_crypto_fault_in_secrets_job(void **state) {
    (void)state;
    /* 10 dropped clients x ~k surviving neighbours agreements: fail one in the middle. */
    check_fault(25, 0, FL_ERR_CRYPTO, "pairwise mask removal failed");
    check_fault(1, 0, FL_ERR_CRYPTO, "pairwise mask removal failed");
}

static void test_crypto_fault_in_masks_job(void **state) {
    (void)state;
    check_fault(0, 40, FL_ERR_CRYPTO, "mask removal failed");
    check_fault(0, 1, FL_ERR_CRYPTO, "mask removal failed");
}

/* ---- misuse ---- */

static void test_wrong_phase(void **state) {
    (void)state;
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = 10;
    cfg.dim = 100;
    fl_secagg_server *srv = NULL;
    assert_int_equal(fl_secagg_server_create(&srv, &cfg, 1, NULL, NULL), FL_OK);
    size_t nj = 5;
    assert_int_equal(fl_secagg_server_unmask_begin(srv, 4, &nj), FL_ERR_STATE);
    assert_int_equal(nj, 0);
    assert_non_null(strstr(fl_secagg_server_errmsg(srv), "needs phase 4"));
    assert_int_equal(fl_secagg_server_unmask_run(srv, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_ADVERTISE);
    assert_int_equal(fl_secagg_server_pending(srv), 10);
    assert_int_equal(fl_secagg_server_unmask_begin(NULL, 4, &nj), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_run(NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_next(NULL, &nj), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_next(srv, NULL), FL_ERR_MISUSE);
    fl_secagg_server_destroy(srv);
}

static void run_all(fl_secagg_server *srv, size_t from, size_t to) {
    for (size_t j = from; j < to; j++)
        assert_int_equal(fl_secagg_server_unmask_run(srv, j), FL_OK);
}

/* finish: every refused call, in order, on a server whose unmask shares are all in. */
static fl_status finish_misuse(void *user, fl_secagg_server *srv) {
    (void)user;
    size_t nj = 9;
    uint8_t junk[FL_SECAGG_HEADER_BYTES] = {0};
    /* Before begin. */
    assert_int_equal(fl_secagg_server_unmask_run(srv, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj), FL_ERR_MISUSE);
    assert_int_equal(nj, 9);
    assert_int_equal(fl_secagg_server_unmask_begin(srv, 0, &nj), FL_ERR_MISUSE);
    assert_int_equal(nj, 0);
    assert_int_equal(fl_secagg_server_unmask_begin(srv, 4, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_UNMASK);
    const uint8_t *m;
    size_t ml;
    assert_int_equal(fl_secagg_server_outgoing(srv, 0, &m, &ml), FL_OK);
    /* Begun: the first batch. */
    assert_int_equal(fl_secagg_server_unmask_begin(srv, 4, &nj), FL_OK);
    assert_int_equal(nj, 4);
    assert_int_equal(fl_secagg_server_outgoing(srv, 0, &m, &ml), FL_ERR_NOT_FOUND);
    size_t again = 0;
    assert_int_equal(fl_secagg_server_unmask_begin(srv, 4, &again), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_advance(srv), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_receive(srv, 0, junk, sizeof(junk)), FL_ERR_STATE);
    assert_int_equal(fl_secagg_server_result(srv, NULL, NULL, NULL), FL_ERR_STATE);
    assert_int_equal(fl_secagg_server_unmask_run(srv, nj), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_run(srv, SIZE_MAX), FL_ERR_MISUSE);
    run_all(srv, 0, nj - 1);
    assert_int_equal(fl_secagg_server_unmask_run(srv, 0), FL_ERR_MISUSE); /* ran already */
    size_t nj2 = 42;
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj2), FL_ERR_MISUSE);
    assert_int_equal(nj2, 42);
    assert_non_null(strstr(fl_secagg_server_errmsg(srv), "job 3 of 4 has not finished"));
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_UNMASK);
    run_all(srv, nj - 1, nj);
    /* The masks batch: 3000 elements make 2 slices. */
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj), FL_OK);
    assert_int_equal(nj, 2);
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj2), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_run(srv, 2), FL_ERR_MISUSE);
    run_all(srv, 0, nj);
    assert_int_equal(fl_secagg_server_unmask_run(srv, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj), FL_OK);
    assert_int_equal(nj, 0);
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_DONE);
    /* Done: nothing more to run. */
    assert_int_equal(fl_secagg_server_unmask_begin(srv, 4, &nj), FL_ERR_STATE);
    assert_int_equal(fl_secagg_server_unmask_run(srv, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_unmask_next(srv, &nj), FL_ERR_MISUSE);
    assert_int_equal(fl_secagg_server_advance(srv), FL_ERR_STATE);
    return FL_OK;
}

static void test_misuse_refused(void **state) {
    (void)state;
    uint8_t drop[10] = {0};
    drop[2] = SA_DROP_MASKED;
    struct sa_opts o;
    struct sa_result res;
    sa_opts_init(&o, 10, 3000, 4, 3);
    o.drop = drop;
    o.finish = finish_misuse;
    sa_run(&o, &res);
    assert_int_equal(res.st, FL_OK);
    assert_true(res.sum_ok);
    assert_int_equal(res.count, 9);
}

/* ---- allocation failure at begin ---- */

struct oom_run {
    struct fl_test_counting *cnt;
    struct par p;
    int serial;
};

static fl_status finish_oom(void *user, fl_secagg_server *srv) {
    struct oom_run *r = user;
    size_t nj = 3;
    const uint8_t *m;
    size_t ml;
    long live = r->cnt->live;
    r->cnt->fail_at = r->cnt->calls + 1;
    fl_status st = r->serial ? fl_secagg_server_advance(srv)
                             : fl_secagg_server_unmask_begin(srv, 4, &nj);
    r->cnt->fail_at = 0;
    assert_int_equal(st, FL_ERR_NOMEM);
    assert_int_equal(nj, r->serial ? 3 : 0);
    assert_int_equal(fl_secagg_server_phase(srv), FL_SECAGG_PHASE_UNMASK);
    if (!r->serial) { /* begin failed before anything changed: messages still there */
        assert_int_equal(r->cnt->live, live);
        assert_int_equal(fl_secagg_server_outgoing(srv, 0, &m, &ml), FL_OK);
    }
    return r->serial ? fl_secagg_server_advance(srv) : finish_parallel(&r->p, srv);
}

static void test_nomem_at_begin(void **state) {
    (void)state;
    for (int serial = 0; serial <= 1; serial++) {
        struct fl_test_counting cnt = {0};
        fl_allocator ca = fl_test_counting_allocator(&cnt);
        struct oom_run r = {.cnt = &cnt, .p = {.threads = 2, .max_jobs = 4, .cnt = &cnt},
                            .serial = serial};
        struct sa_opts o;
        struct sa_result res;
        sa_opts_init(&o, 10, 2500, 4, 3);
        o.alloc = &ca;
        o.finish = finish_oom;
        o.finish_user = &r;
        sa_run(&o, &res);
        assert_int_equal(res.st, FL_OK);
        assert_true(res.sum_ok);
        assert_int_equal(cnt.live, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_complete),
        cmocka_unit_test(test_small_sparse),
        cmocka_unit_test(test_small_active),
        cmocka_unit_test(test_hundred_sparse),
        cmocka_unit_test(test_hundred_complete),
        cmocka_unit_test(test_tiny_dim),
        cmocka_unit_test(test_mbedtls_server),
        cmocka_unit_test(test_tampered_shares),
        cmocka_unit_test(test_crypto_fault_in_secrets_job),
        cmocka_unit_test(test_crypto_fault_in_masks_job),
        cmocka_unit_test(test_wrong_phase),
        cmocka_unit_test(test_misuse_refused),
        cmocka_unit_test(test_nomem_at_begin),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
