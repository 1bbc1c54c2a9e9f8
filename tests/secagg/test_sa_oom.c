/* Allocation-failure walk: the server (or one client) gets an allocator that fails its i-th
 * allocation, for every i. Each entry point must return FL_ERR_NOMEM and stay usable: the
 * call is retried with the failure cleared, the round must still give the exact sum, and
 * nothing may leak (checked by the counting allocator and ASan). */
#include "test_sa_harness.h"

#define N 4
#define D 5

/* Calls expr; on FL_ERR_NOMEM clears the failure point and calls it once more. */
#define RETRY(cnt, nomem, expr)                                                              \
    ({                                                                                       \
        fl_status _st = (expr);                                                              \
        if (_st == FL_ERR_NOMEM) {                                                           \
            (nomem)++;                                                                       \
            (cnt)->fail_at = 0;                                                              \
            _st = (expr);                                                                    \
        }                                                                                    \
        _st;                                                                                 \
    })

/* Runs one round; `victim` = -1 for the server, else a client index; active 2 = active with
 * device certificates. Returns the number of NOMEM results seen. */
static int walk_once(int victim, long fail_at, int active, int norm,
                     struct fl_test_counting *cnt) {
    int nomem = 0;
    memset(cnt, 0, sizeof(*cnt));
    cnt->fail_at = fail_at;
    fl_allocator fa = fl_test_counting_allocator(cnt);
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = N;
    cfg.dim = D;
    cfg.degree = 3;
    cfg.threshold = 2;
    cfg.active = active != 0;
    cfg.device_certs = active == 2;
    if (norm) { /* norm proofs: the prover's and the verifier's work memory too */
        cfg.norm_bits = 6;
        cfg.norm_dim = D - 1;
        cfg.norm_bound2 = 1000;
    }
    struct sa_identities I = {0};
    if (active == 2) {
        sa_make_device_identities(&I, N, FL_SECAGG_BACKEND_SODIUM);
        memcpy(cfg.verify_key, I.authority_vk, 32);
    } else if (active) {
        sa_make_identities(&I, N);
        memcpy(cfg.verify_key, I.authority_vk, 32);
    }
    fl_secagg_server *srv = NULL;
    fl_secagg_client *cl[N] = {0};
    const fl_allocator *sa = victim < 0 ? &fa : NULL;
    assert_int_equal(RETRY(cnt, nomem, fl_secagg_server_create(&srv, &cfg, 9, NULL, sa)), FL_OK);
    uint32_t expect[D] = {0};
    for (uint32_t i = 0; i < N; i++) {
        const fl_allocator *ca = victim == (int)i ? &fa : NULL;
        uint32_t x[D];
        for (uint32_t j = 0; j < D; j++)
            expect[j] += x[j] = norm ? i + j : i * 100 + j;
        const uint8_t *m;
        size_t ml;
        assert_int_equal(RETRY(cnt, nomem, fl_secagg_client_create(&cl[i], &cfg, 9, i,
                                                                   active ? &I.ids[i] : NULL, ca)),
                         FL_OK);
        assert_int_equal(RETRY(cnt, nomem, fl_secagg_client_set_input(cl[i], x, D)), FL_OK);
        assert_int_equal(RETRY(cnt, nomem, fl_secagg_client_start(cl[i], &m, &ml)), FL_OK);
        assert_int_equal(RETRY(cnt, nomem, fl_secagg_server_receive(srv, i, m, ml)), FL_OK);
    }
    for (;;) {
        assert_int_equal(RETRY(cnt, nomem, fl_secagg_server_advance(srv)), FL_OK);
        if (fl_secagg_server_phase(srv) == FL_SECAGG_PHASE_DONE)
            break;
        for (uint32_t i = 0; i < N; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            assert_int_equal(fl_secagg_server_outgoing(srv, i, &m, &ml), FL_OK);
            assert_int_equal(RETRY(cnt, nomem, fl_secagg_client_handle(cl[i], m, ml, &r, &rl)),
                             FL_OK);
            assert_int_equal(RETRY(cnt, nomem, fl_secagg_server_receive(srv, i, r, rl)), FL_OK);
        }
    }
    const uint32_t *sum;
    uint32_t count;
    assert_int_equal(fl_secagg_server_result(srv, &sum, NULL, &count), FL_OK);
    assert_int_equal(count, N);
    assert_memory_equal(sum, expect, sizeof(expect));
    for (uint32_t i = 0; i < N; i++)
        fl_secagg_client_destroy(cl[i]);
    fl_secagg_server_destroy(srv);
    free(I.ids);
    assert_int_equal(cnt->live, 0);
    assert_int_equal(cnt->live_bytes, 0);
    return nomem;
}

static void walk(int victim, int active, int norm) {
    struct fl_test_counting cnt;
    walk_once(victim, 0, active, norm, &cnt);
    long total = cnt.calls;
    assert_true(total > 3);
    for (long i = 1; i <= total; i++) {
        int nomem = walk_once(victim, i, active, norm, &cnt);
        if (nomem == 0)
            fail_msg("victim %d: failing allocation %ld of %ld gave no FL_ERR_NOMEM", victim, i,
                     total);
    }
}

static void test_oom_server(void **state) {
    (void)state;
    walk(-1, 0, 0);
    walk(-1, 1, 0);
    walk(-1, 2, 0);
    walk(-1, 0, 1);
}

static void test_oom_client(void **state) {
    (void)state;
    walk(0, 0, 0);
    walk(2, 1, 0);
    walk(3, 2, 0);
    walk(1, 0, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_server),
        cmocka_unit_test(test_oom_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
