/* Dropouts at every phase: up to n - t clients the round still yields the exact sum of the
 * clients whose masked input arrived; one more and the server aborts cleanly. */
#include "test_sa_harness.h"

static void run_drops(uint32_t n, uint32_t k, uint32_t t, int active, int phase, uint32_t drops,
                      int expect_ok, uint64_t seed) {
    struct sa_opts o;
    struct sa_result r;
    uint8_t *drop = calloc(n, 1);
    assert_non_null(drop);
    /* Drop a spread of clients (every other one first). */
    for (uint32_t i = 0, c = 0; c < drops; i = (i + 2) % n) {
        if (!drop[i]) {
            drop[i] = (uint8_t)phase;
            c++;
        } else {
            i++;
        }
    }
    sa_opts_init(&o, n, 24, k, t);
    o.cfg.active = active;
    o.drop = drop;
    o.seed = seed;
    sa_run(&o, &r);
    if (expect_ok) {
        if (r.st != FL_OK)
            fail_msg("phase %d drops %u: %s (%s)", phase, drops, fl_status_name(r.st), r.errmsg);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, r.expect_count);
        uint32_t want = phase <= SA_DROP_MASKED ? n - drops : n;
        assert_int_equal(r.count, want);
    } else {
        assert_int_equal(r.st, FL_ERR_ABORTED);
        assert_non_null(strstr(r.errmsg, "too few survivors"));
    }
    free(drop);
}

static void test_full_graph_each_phase(void **state) {
    (void)state;
    const uint32_t n = 10, k = 9, t = 5;
    int phases[] = {SA_DROP_ADVERTISE, SA_DROP_SHARES, SA_DROP_MASKED, SA_DROP_UNMASK};
    for (size_t p = 0; p < 4; p++) {
        run_drops(n, k, t, 0, phases[p], 1, 1, 100 + p);
        run_drops(n, k, t, 0, phases[p], n - t, 1, 110 + p);
        run_drops(n, k, t, 0, phases[p], n - t + 1, 0, 120 + p);
    }
}

static void test_active_each_phase(void **state) {
    (void)state;
    const uint32_t n = 10, k = 9, t = 5;
    int phases[] = {SA_DROP_ADVERTISE, SA_DROP_SHARES, SA_DROP_MASKED, SA_DROP_CONSISTENCY,
                    SA_DROP_UNMASK};
    for (size_t p = 0; p < 5; p++) {
        run_drops(n, k, t, 1, phases[p], n - t, 1, 200 + p);
        run_drops(n, k, t, 1, phases[p], n - t + 1, 0, 210 + p);
    }
}

static void test_n100_full_graph(void **state) {
    (void)state;
    run_drops(100, 99, 51, 0, SA_DROP_MASKED, 49, 1, 300);
    run_drops(100, 99, 51, 0, SA_DROP_MASKED, 50, 0, 301);
    run_drops(100, 99, 51, 0, SA_DROP_UNMASK, 49, 1, 302);
}

/* Mixed dropouts on the sparse graph: random clients leave at random phases. */
static void test_sparse_mixed(void **state) {
    (void)state;
    uint64_t rs = 42;
    for (int trial = 0; trial < 4; trial++) {
        const uint32_t n = 100;
        uint8_t drop[100] = {0};
        for (uint32_t c = 0; c < 10; c++)
            drop[sa_rng_next(&rs) % n] = (uint8_t)(1 + sa_rng_next(&rs) % 5);
        for (uint32_t i = 0; i < n; i++)
            if (drop[i] == SA_DROP_CONSISTENCY)
                drop[i] = SA_DROP_UNMASK;
        struct sa_opts o;
        struct sa_result r;
        sa_opts_init(&o, n, 40, 0, 0); /* derived k = 12, t = 6 */
        o.drop = drop;
        o.seed = 400 + (uint64_t)trial;
        sa_run(&o, &r);
        if (r.st != FL_OK)
            fail_msg("trial %d: %s (%s)", trial, fl_status_name(r.st), r.errmsg);
        assert_true(r.sum_ok);
        assert_int_equal(r.count, r.expect_count);
    }
}

/* A sparse graph where one client's neighbourhood is wiped out: the server drops it from
 * the round (pruning) instead of failing, and the sum covers the others. */
static void test_sparse_pruning(void **state) {
    (void)state;
    const uint32_t n = 20, k = 4, t = 3;
    /* Drop every client at advertise except a block; some clients end with < t - 1
     * neighbours and must be pruned. */
    uint8_t drop[20] = {0};
    for (uint32_t i = 0; i < n; i += 3)
        drop[i] = SA_DROP_ADVERTISE;
    struct sa_opts o;
    struct sa_result r;
    sa_opts_init(&o, n, 8, k, t);
    o.drop = drop;
    o.seed = 500;
    sa_run(&o, &r);
    if (r.st == FL_OK) {
        assert_true(r.sum_ok);
        assert_int_equal(r.count, r.expect_count);
    } else {
        assert_int_equal(r.st, FL_ERR_ABORTED);
    }
}

/* What the test's tamper hook saw of the server's KEYS and CIPHERTEXTS messages. */
struct seen {
    uint32_t n;
    uint32_t nbrs[20][8];  /* KEYS: each client's neighbours in U1 */
    uint32_t nnbrs[20];
    int got_ct[20];        /* a CIPHERTEXTS message reached the client */
    uint32_t senders[20][8]; /* and the senders it listed, in order */
    uint32_t nsenders[20];
};

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void record(void *user, int to_server, uint32_t client, fl_secagg_msg_type type,
                   uint8_t *msg, size_t *len, size_t cap) {
    (void)cap;
    struct seen *S = user;
    const uint8_t *b = msg + FL_SECAGG_HEADER_BYTES;
    if (to_server || client >= S->n)
        return;
    if (type == FL_SECAGG_MSG_KEYS) {
        uint32_t cnt = get_u32(b + 52);
        size_t entry = (*len - FL_SECAGG_HEADER_BYTES - 56) / (cnt ? cnt : 1);
        assert_true(cnt <= 8);
        for (uint32_t i = 0; i < cnt; i++)
            S->nbrs[client][i] = get_u32(b + 56 + i * entry);
        S->nnbrs[client] = cnt;
    } else if (type == FL_SECAGG_MSG_CIPHERTEXTS) {
        uint32_t cnt = get_u32(b);
        size_t entry = (*len - FL_SECAGG_HEADER_BYTES - 4) / (cnt ? cnt : 1);
        assert_true(cnt <= 8);
        S->got_ct[client] = 1;
        for (uint32_t i = 0; i < cnt; i++)
            S->senders[client][i] = get_u32(b + 4 + i * entry);
        S->nsenders[client] = cnt;
    }
}

/* A client that sent its shares but lost all but one neighbour at that phase is pruned
 * (t = 3 needs two): its ciphertexts, already placed in its neighbours' messages, must not
 * be forwarded, and the holes the silent neighbours left must close up. */
static void test_sparse_pruned_sender(void **state) {
    (void)state;
    const uint32_t n = 20, k = 4, t = 3;
    struct sa_opts o;
    struct sa_result r;
    struct seen S0 = {.n = n};
    sa_opts_init(&o, n, 8, k, t);
    o.seed = 700;
    o.tamper = record;
    o.tamper_user = &S0;
    sa_run(&o, &r); /* learns the graph: the same seed draws the same one */
    assert_int_equal(r.st, FL_OK);
    const uint32_t x = 5;
    assert_int_equal(S0.nnbrs[x], k);
    uint8_t drop[20] = {0};
    for (uint32_t i = 1; i < k; i++)
        drop[S0.nbrs[x][i]] = SA_DROP_SHARES;
    const uint32_t keep = S0.nbrs[x][0];
    struct seen S = {.n = n};
    o.drop = drop;
    o.tamper_user = &S;
    sa_run(&o, &r);
    if (r.st != FL_OK)
        fail_msg("%s (%s)", fl_status_name(r.st), r.errmsg);
    assert_true(r.sum_ok);
    assert_int_equal(r.count, r.expect_count);
    assert_false(S.got_ct[x]); /* pruned after sending its shares */
    assert_true(S.got_ct[keep]);
    for (uint32_t w = 0; w < n; w++) {
        if (!S.got_ct[w])
            continue;
        /* Only senders that stayed (got their own CIPHERTEXTS), each once, in the order
         * of w's neighbour list, which is the order of its KEYS message. */
        uint32_t pos = 0;
        for (uint32_t i = 0; i < S.nsenders[w]; i++) {
            uint32_t u = S.senders[w][i];
            assert_true(u < n && u != x && !drop[u] && S.got_ct[u]);
            while (pos < S.nnbrs[w] && S.nbrs[w][pos] != u)
                pos++;
            assert_true(pos < S.nnbrs[w]);
            pos++;
        }
        /* ... and all of them. */
        uint32_t want = 0;
        for (uint32_t j = 0; j < S.nnbrs[w]; j++) {
            uint32_t u = S.nbrs[w][j];
            want += !drop[u] && S.got_ct[u];
        }
        assert_int_equal(S.nsenders[w], want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_graph_each_phase),
        cmocka_unit_test(test_active_each_phase),
        cmocka_unit_test(test_n100_full_graph),
        cmocka_unit_test(test_sparse_mixed),
        cmocka_unit_test(test_sparse_pruning),
        cmocka_unit_test(test_sparse_pruned_sender),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
