/* Revealed pairwise seeds (config.reveal_pair_seeds, docs/secagg.md "Revealed pairwise
 * seeds"): exact sums with dropouts at every phase on full and sparse graphs, both backends
 * and mixed, serial and job-wise final advances, active mode (a lying server still caught);
 * the server makes no X25519 agreement when every survivor answers and only the missing ones
 * when some do not; configs that may not use it are refused, parties that disagree on it
 * fail at KEYS; the server's checks of the seed list change nothing; an unchecked seed is
 * what the docs say it is. Its allocation-failure walk is in test_sa_oom_sparse.c. */
#include "sa_rig.h"
#include "secagg_internal.h"
#include "test_sa_harness.h"

/* ---- rounds through the harness, with the final advance's work recorded ---- */

struct work {
    uint32_t jobs;  /* 0: fl_secagg_server_advance; else unmask_begin's max_jobs */
    uint64_t secrets, agree, masks;
};

static fl_status finish_work(void *user, fl_secagg_server *srv) {
    struct work *w = user;
    fl_status st;
    if (!w->jobs) {
        st = fl_secagg_server_advance(srv);
    } else {
        size_t nj = 0;
        st = fl_secagg_server_unmask_begin(srv, w->jobs, &nj);
        while (st == FL_OK && nj > 0) {
            /* run the jobs back to front: the order of jobs must not matter */
            for (size_t j = nj; j-- > 0;)
                (void)fl_secagg_server_unmask_run(srv, j);
            st = fl_secagg_server_unmask_next(srv, &nj);
        }
    }
    if (st == FL_OK)
        fl__sa_server_unmask_work(srv, &w->secrets, &w->agree, &w->masks);
    return st;
}

/* Drops `masked` clients before their masked input and `unmask` more after it (every
 * third client first), runs the round and returns its result with the work in *w. */
static void run(uint32_t n, uint32_t k, uint32_t t, int reveal, uint32_t early, int phase,
                uint32_t unmask, fl_secagg_backend cb, fl_secagg_backend sb, uint64_t seed,
                struct work *w, struct sa_result *r) {
    struct sa_opts o;
    uint8_t *drop = calloc(n, 1);
    assert_non_null(drop);
    uint32_t want = early + unmask;
    for (uint32_t i = 0, c = 0; c < want; i = (i + 3) % n) {
        if (drop[i]) {
            i++;
            continue;
        }
        drop[i] = (uint8_t)(c < early ? phase : SA_DROP_UNMASK);
        c++;
    }
    sa_opts_init(&o, n, 24, k, t);
    o.cfg.reveal_pair_seeds = reveal;
    o.client_backend = cb;
    o.server_backend = sb;
    o.drop = drop;
    o.seed = seed;
    o.finish = finish_work;
    o.finish_user = w;
    sa_run(&o, r);
    free(drop);
}

static void expect_sum(const struct sa_result *r, uint32_t want_count) {
    if (r->st != FL_OK)
        fail_msg("%s (%s)", fl_status_name(r->st), r->errmsg);
    assert_true(r->sum_ok);
    assert_int_equal(r->count, want_count);
    assert_int_equal(r->count, r->expect_count);
}

struct shape {
    uint32_t n, k, t;    /* k, t = 0: derived */
    uint32_t early, late; /* drops before masking, and after it */
};

static const struct shape shapes[] = {
    {3, 2, 2, 1, 0}, {10, 9, 5, 2, 3}, {10, 4, 3, 1, 1}, {100, 0, 0, 5, 2}};

static void test_sums_and_work(void **state) {
    (void)state;
    const fl_secagg_backend S = FL_SECAGG_BACKEND_SODIUM;
    for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++) {
        uint32_t n = shapes[c].n, k = shapes[c].k, t = shapes[c].t;
        uint32_t early = shapes[c].early, late = shapes[c].late;
        uint64_t seed = 500 + c * 10;
        struct work w = {0}, w0 = {0};
        struct sa_result r;
        /* Dropped before masking, everyone else answers: no agreement at all. */
        run(n, k, t, 1, early, SA_DROP_MASKED, 0, S, S, seed, &w, &r);
        expect_sum(&r, n - early);
        assert_int_equal(w.agree, 0);
        assert_int_equal(w.secrets, n - early); /* only the self-mask seeds are rebuilt */
        run(n, k, t, 0, early, SA_DROP_MASKED, 0, S, S, seed, &w0, &r);
        expect_sum(&r, n - early);
        assert_true(w0.agree > 0);
        assert_int_equal(w.masks, w0.masks); /* the same masks, found another way */
        /* Some survivors drop before unmasking: the missing seeds come from rebuilt keys. */
        if (late) {
            memset(&w, 0, sizeof(w));
            memset(&w0, 0, sizeof(w0));
            run(n, k, t, 1, early, SA_DROP_MASKED, late, S, S, seed + 1, &w, &r);
            expect_sum(&r, n - early);
            run(n, k, t, 0, early, SA_DROP_MASKED, late, S, S, seed + 1, &w0, &r);
            expect_sum(&r, n - early);
            assert_true(w.agree < w0.agree);
            assert_int_equal(w.masks, w0.masks);
        }
        /* Drops before the graph's secrets were shared need no seed. */
        memset(&w, 0, sizeof(w));
        run(n, k, t, 1, early, SA_DROP_ADVERTISE, 0, S, S, seed + 2, &w, &r);
        expect_sum(&r, n - early);
        run(n, k, t, 1, early, SA_DROP_SHARES, late, S, S, seed + 3, &w, &r);
        expect_sum(&r, n - early);
        assert_int_equal(w.agree, 0);
        /* One beyond what the round survives: a clean abort. */
        if (t) {
            run(n, k, t, 1, n - t + 1, SA_DROP_MASKED, 0, S, S, seed + 4, &w, &r);
            assert_int_equal(r.st, FL_ERR_ABORTED);
            assert_non_null(strstr(r.errmsg, "too few survivors"));
            run(n, k, t, 1, early, SA_DROP_MASKED, n - t + 1 - early, S, S, seed + 5, &w, &r);
            assert_int_equal(r.st, FL_ERR_ABORTED);
        }
    }
}

static void test_backends_and_jobs(void **state) {
    (void)state;
    const fl_secagg_backend S = FL_SECAGG_BACKEND_SODIUM, M = FL_SECAGG_BACKEND_MBEDTLS;
    const fl_secagg_backend pairs[3][2] = {{M, S}, {S, M}, {M, M}};
    for (size_t p = 0; p < 3; p++) {
        struct work w = {0};
        struct sa_result r;
        run(10, 4, 3, 1, 1, SA_DROP_MASKED, 1, pairs[p][0], pairs[p][1], 600 + p, &w, &r);
        expect_sum(&r, 9);
    }
    /* Job-wise final advance, jobs run out of order. */
    for (uint32_t jobs = 1; jobs <= 7; jobs += 3) {
        struct work w = {.jobs = jobs}, w1 = {0};
        struct sa_result r;
        run(100, 0, 0, 1, 5, SA_DROP_MASKED, 2, S, S, 610, &w, &r);
        expect_sum(&r, 95);
        run(100, 0, 0, 1, 5, SA_DROP_MASKED, 2, S, S, 610, &w1, &r);
        expect_sum(&r, 95);
        assert_int_equal(w.agree, w1.agree);
        assert_int_equal(w.masks, w1.masks);
    }
}

/* Active mode (signed advertisements, the consistency round): dropouts in every phase, with
 * device certificates too, and each lie of sa_lie_about_dropout still caught. The seeds a
 * client reveals follow the survivor set it signed. */
static void test_active_mode(void **state) {
    (void)state;
    const uint32_t n = 10, k = 9, t = 5;
    for (int dev = 0; dev < 2; dev++) {
        struct sa_opts o;
        struct sa_result r;
        uint8_t drop[10] = {0};
        drop[1] = SA_DROP_SHARES;
        drop[3] = SA_DROP_MASKED;
        drop[5] = SA_DROP_MASKED;
        drop[7] = SA_DROP_CONSISTENCY;
        drop[9] = SA_DROP_UNMASK;
        struct work w = {0};
        sa_opts_init(&o, n, 16, k, t);
        o.cfg.active = 1;
        o.cfg.device_certs = dev;
        o.cfg.reveal_pair_seeds = 1;
        o.drop = drop;
        o.seed = 800 + (uint64_t)dev;
        o.finish = finish_work;
        o.finish_user = &w;
        sa_run(&o, &r);
        expect_sum(&r, 7);
        /* 3 and 5 dropped before masking; 7 did not sign and 9 did not answer, so their
         * seeds with 3 and 5 come from the rebuilt keys: 2 x 2 agreements. */
        assert_int_equal(w.agree, 4);
    }
    struct sa_opts lo;
    sa_lie_opts_init(&lo);
    lo.cfg.reveal_pair_seeds = 1;
    sa_check_lies_caught(&lo, 810);
}

/* ---- configuration ---- */

static void test_config(void **state) {
    (void)state;
    fl_secagg_config c;
    char m[256];
    fl_secagg_config_init(&c);
    assert_int_equal(c.reveal_pair_seeds, 0);
    c.num_clients = 10;
    c.dim = 8;
    c.reveal_pair_seeds = 2;
    assert_int_equal(fl_secagg_config_resolve(&c, m, sizeof(m)), FL_ERR_MISUSE);
    assert_non_null(strstr(m, "reveal_pair_seeds: must be 0 or 1"));
    c.reveal_pair_seeds = 1;
    c.active = 1; /* active mode may reveal: the seeds follow the signed survivor set */
    memset(c.verify_key, 7, sizeof(c.verify_key));
    fl_secagg_config ca = c;
    assert_int_equal(fl_secagg_config_resolve(&ca, m, sizeof(m)), FL_OK);
    c.active = 0;
    c.bits = 32;
    c.norm_bits = 8;
    c.norm_dim = 8;
    c.norm_bound2 = 100;
    assert_int_equal(fl_secagg_config_resolve(&c, m, sizeof(m)), FL_ERR_MISUSE);
    assert_non_null(strstr(m, "unchecked seeds need norm_bits = 0"));
    c.norm_bits = c.norm_dim = 0;
    c.norm_bound2 = 0;
    assert_int_equal(fl_secagg_config_resolve(&c, m, sizeof(m)), FL_OK);
    assert_int_equal(c.reveal_pair_seeds, 1);
    /* The unmask answer's limit grows by the seed list. */
    fl_secagg_config c0 = c;
    c0.reveal_pair_seeds = 0;
    assert_int_equal(fl__sa_msg_limit(&c, FL_SECAGG_MSG_UNMASK_SHARES) -
                         fl__sa_msg_limit(&c0, FL_SECAGG_MSG_UNMASK_SHARES),
                     4 + (size_t)c.degree * (4 + 32));
}

/* Parties that disagree fail at KEYS; a config of the 0.4 size means off. */
static void test_disagreement(void **state) {
    (void)state;
    for (int v = 0; v < 3; v++) {
        struct sa_opts o;
        struct sa_result r;
        sa_opts_init(&o, 6, 8, 5, 3);
        fl_secagg_config c0 = o.cfg;
        /* 0: client 0 without, the rest with; 1: client 0 with, the rest without; 2: the
         * rest pass a struct of the 0.4 size, so their 1 is not read. */
        o.cfg.reveal_pair_seeds = v != 1;
        c0.reveal_pair_seeds = v != 0;
        if (v == 2)
            o.cfg.struct_size = offsetof(fl_secagg_config, reveal_pair_seeds);
        o.client_cfg = &c0;
        o.seed = 700 + (uint64_t)v;
        sa_run(&o, &r);
        assert_int_equal(r.client_failures, 1);
        assert_int_equal(r.client_fail_code, FL_ERR_PROTOCOL);
        expect_sum(&r, 5);
    }
}

/* ---- the server's checks of the seed list ---- */

static fl_status send_edited(struct rig *R, uint32_t i, size_t len,
                             void (*edit)(uint8_t *m, size_t *len, const void *u),
                             const void *u) {
    uint8_t *m = rig_dup(R->reply[i], R->reply_len[i], 64);
    if (edit)
        edit(m, &len, u);
    rig_fix_len(m, len);
    fl_status st = fl_secagg_server_receive(R->srv, i, m, len);
    free(m);
    return st;
}

static void expect_reject(struct rig *R, uint32_t i, size_t len,
                          void (*edit)(uint8_t *m, size_t *len, const void *u), const void *u,
                          fl_status want, const char *part) {
    uint32_t pending = fl_secagg_server_pending(R->srv);
    fl_status st = send_edited(R, i, len, edit, u);
    if (st != want || !strstr(fl_secagg_server_errmsg(R->srv), part))
        fail_msg("want %s '%s', got %s '%s'", fl_status_name(want), part, fl_status_name(st),
                 fl_secagg_server_errmsg(R->srv));
    assert_int_equal(fl_secagg_server_pending(R->srv), pending);
    assert_int_equal(fl_secagg_server_phase(R->srv), FL_SECAGG_PHASE_UNMASK);
}

struct put {
    size_t off; /* body offset */
    uint32_t v;
};

static void put32(uint8_t *m, size_t *len, const void *u) {
    (void)len;
    const struct put *p = u;
    fl__put_u32le(m + RIG_H + p->off, p->v);
}

static void xor8(uint8_t *m, size_t *len, const void *u) {
    (void)len;
    const struct put *p = u;
    m[RIG_H + p->off] ^= (uint8_t)p->v;
}

/* n = 5, k = 4, t = 3: clients 3 and 4 send their shares and never mask; every unmask
 * answer carries 5 entries (4 neighbours and itself) and two seeds (for 3 and 4). */
static void rig_to_unmask(struct rig *R) {
    rig_init_seeds(R, 5, 8, 4, 3, 32, 0, 1);
    rig_start(R);
    rig_send_all(R, 0);
    rig_step(R, RIG_ALL);
    rig_send_all(R, 0);
    rig_step(R, RIG_ALL);
    rig_send_all(R, 0x18); /* 3 and 4 keep their masked inputs */
    rig_step(R, 0x07);
    assert_int_equal(fl_secagg_server_phase(R->srv), FL_SECAGG_PHASE_UNMASK);
}

static void test_server_checks(void **state) {
    (void)state;
    struct rig R;
    rig_to_unmask(&R);
    /* count u32 | 5 x (peer u32, kind u8, y[33]) | nseed u32 | 2 x (peer u32, seed[32]) */
    const size_t es = 38, ss = 36, so = 4 + 5 * es;
    size_t len = R.reply_len[1];
    assert_int_equal(len, RIG_H + so + 4 + 2 * ss);
    assert_int_equal(fl__get_u32le(R.reply[1] + RIG_H + so), 2);
    uint32_t a = fl__get_u32le(R.reply[1] + RIG_H + so + 4),
             b = fl__get_u32le(R.reply[1] + RIG_H + so + 4 + ss);
    assert_true((a == 3 && b == 4) || (a == 4 && b == 3));
    const struct put n3 = {so, 3}, n1 = {so, 1}, n0 = {so, 0}, p2 = {so + 4, 2},
                     p0 = {so + 4 + ss, 0}, swap = {so + 4, 3 ^ 4};
    expect_reject(&R, 1, RIG_H + so, NULL, NULL, FL_ERR_FORMAT, "entries, expected 5");
    expect_reject(&R, 1, RIG_H + so + 2, NULL, NULL, FL_ERR_FORMAT, "entries, expected 5");
    expect_reject(&R, 1, len, put32, &n3, FL_ERR_FORMAT, "seeds do not fit");
    expect_reject(&R, 1, len, put32, &n1, FL_ERR_FORMAT, "seeds do not fit");
    expect_reject(&R, 1, len - ss, put32, &n1, FL_ERR_PROTOCOL, "seeds do not match");
    expect_reject(&R, 1, RIG_H + so + 4, put32, &n0, FL_ERR_PROTOCOL, "seeds do not match");
    expect_reject(&R, 1, len - 1, NULL, NULL, FL_ERR_FORMAT, "seeds do not fit");
    expect_reject(&R, 1, len + 1, NULL, NULL, FL_ERR_FORMAT, "seeds do not fit");
    expect_reject(&R, 1, len, put32, &p2, FL_ERR_PROTOCOL, "seeds do not match");
    expect_reject(&R, 1, len, put32, &p0, FL_ERR_PROTOCOL, "seeds do not match");
    expect_reject(&R, 1, len, xor8, &swap, FL_ERR_PROTOCOL, "seeds do not match");
    /* Every honest answer is still taken, and the round gives the exact sum with no
     * agreement. */
    rig_send_all(&R, 0x18);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x07);
    uint64_t sec, agree, masks;
    fl__sa_server_unmask_work(R.srv, &sec, &agree, &masks);
    assert_int_equal(agree, 0);
    assert_int_equal(sec, 3);
    assert_int_equal(masks, 3 + 2 * 3);
    rig_free(&R);
}

/* The seeds cannot be checked (why the option needs active = 0 and norm_bits = 0): a
 * wrong one is taken and spoils the sum, as a wrong input of a semi-honest client would. */
static void test_unchecked_seed(void **state) {
    (void)state;
    struct rig R;
    rig_to_unmask(&R);
    const struct put flip = {4 + 5 * 38 + 4 + 4 + 7, 0x01};
    assert_int_equal(send_edited(&R, 1, R.reply_len[1], xor8, &flip), FL_OK);
    rig_set_reply(&R, 1, NULL, 0);
    rig_send_all(&R, 0x18);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    const uint32_t *sum;
    uint32_t count;
    assert_int_equal(fl_secagg_server_result(R.srv, &sum, NULL, &count), FL_OK);
    assert_int_equal(count, 3);
    size_t same = 0;
    for (uint32_t j = 0; j < R.d; j++)
        same += sum[j] == R.x[0][j] + R.x[1][j] + R.x[2][j];
    assert_true(same < R.d);
    rig_free(&R);
}

/* A client's answer carries seeds only for the neighbours whose s share it reveals; with
 * nobody dropped the list is empty. */
static void test_client_answer(void **state) {
    (void)state;
    struct rig R;
    rig_init_seeds(&R, 5, 8, 4, 3, 32, 0, 1);
    rig_start(&R);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    rig_send_all(&R, 0);
    rig_step(&R, RIG_ALL);
    for (uint32_t i = 0; i < 5; i++) {
        assert_int_equal(R.reply_len[i], RIG_H + 4 + 5 * 38 + 4);
        assert_int_equal(fl__get_u32le(R.reply[i] + RIG_H + 4 + 5 * 38), 0);
    }
    rig_send_all(&R, 0);
    assert_int_equal(fl_secagg_server_advance(R.srv), FL_OK);
    rig_check_sum(&R, 0x1F);
    rig_free(&R);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums_and_work),   cmocka_unit_test(test_backends_and_jobs),
        cmocka_unit_test(test_active_mode),     cmocka_unit_test(test_config),
        cmocka_unit_test(test_disagreement),    cmocka_unit_test(test_server_checks),
        cmocka_unit_test(test_unchecked_seed),  cmocka_unit_test(test_client_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
