/* Allocation-failure walk on a sparse graph (test_sa_oom.c walks the complete graph, which
 * needs no permutation) with inputs long enough (d > 16 Ki) that a client's masked-input
 * buffer is replaced, not reused, by the smaller messages after it: the server or one client
 * gets an allocator that fails its i-th allocation, for every i, in a semi-honest and an
 * active round where one client drops after its shares, and in a semi-honest round with
 * revealed pairwise seeds (every client a victim in turn, so the dropped client's neighbours
 * are too; the final advance then makes no agreement). Each failing call must return
 * FL_ERR_NOMEM and change nothing: the call is repeated with the failure cleared, the round
 * ends with the exact sum, and nothing leaks (counting allocator, and ASan in that build). */
#include "sa_rig.h"
#include "secagg_internal.h"

#define N 6
#define K 2
#define D 16400 /* 4 d > 64 KiB: the output buffer is not kept for the next message */
#define DROP 5 /* never sends its masked input */

struct walk {
    struct fl_test_counting cnt;
    int nomem;
};

/* Repeats a call once with the failure point cleared when it reports FL_ERR_NOMEM. */
static fl_status again(struct walk *w, fl_status st, int *retry) {
    *retry = 0;
    if (st == FL_ERR_NOMEM) {
        w->nomem++;
        w->cnt.fail_at = 0;
        *retry = 1;
    }
    return st;
}
#define TRY(w, expr)                                                                         \
    do {                                                                                     \
        int retry_;                                                                          \
        fl_status st_ = again((w), (expr), &retry_);                                         \
        if (retry_)                                                                          \
            st_ = (expr);                                                                    \
        if (st_ != FL_OK)                                                                    \
            fail_msg("%s: %s", #expr, fl_status_name(st_));                                  \
    } while (0)

static uint32_t input(uint32_t i, uint32_t j) { return i * 1000003u + j * 7919u + 1u; }

static void round_once(struct walk *w, int victim, int active, struct rig *R, uint32_t *x) {
    fl_allocator fa = fl_test_counting_allocator(&w->cnt);
    const fl_allocator *sa = victim < 0 ? &fa : NULL;
    fl_secagg_server *srv = NULL;
    fl_secagg_client *cl[N] = {0};
    TRY(w, fl_secagg_server_create(&srv, &R->cfg, R->round_id, R->gseed, sa));
    for (uint32_t i = 0; i < N; i++) {
        const fl_allocator *ca = victim == (int)i ? &fa : NULL;
        const uint8_t *m;
        size_t ml;
        TRY(w, fl_secagg_client_create(&cl[i], &R->cfg, R->round_id, i,
                                       active ? &R->ids[i] : NULL, ca));
        TRY(w, fl_secagg_client_set_input(cl[i], x + (size_t)i * D, D));
        TRY(w, fl_secagg_client_start(cl[i], &m, &ml));
        TRY(w, fl_secagg_server_receive(srv, i, m, ml));
    }
    for (;;) {
        TRY(w, fl_secagg_server_advance(srv));
        fl_secagg_phase ph = fl_secagg_server_phase(srv);
        if (ph == FL_SECAGG_PHASE_DONE)
            break;
        for (uint32_t i = 0; i < N; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            if (i == DROP && ph >= FL_SECAGG_PHASE_MASKED_INPUT)
                continue;
            assert_int_equal(fl_secagg_server_outgoing(srv, i, &m, &ml), FL_OK);
            TRY(w, fl_secagg_client_handle(cl[i], m, ml, &r, &rl));
            TRY(w, fl_secagg_server_receive(srv, i, r, rl));
        }
    }
    const uint32_t *sum;
    uint32_t count;
    assert_int_equal(fl_secagg_server_result(srv, &sum, NULL, &count), FL_OK);
    assert_int_equal(count, N - 1);
    if (R->cfg.reveal_pair_seeds) {
        uint64_t sec, agree, masks;
        fl__sa_server_unmask_work(srv, &sec, &agree, &masks);
        assert_int_equal(agree, 0);
    }
    for (uint32_t j = 0; j < D; j++) {
        uint32_t e = 0;
        for (uint32_t i = 0; i < N; i++)
            if (i != DROP)
                e += input(i, j);
        if (sum[j] != e)
            fail_msg("sum[%u] = %u, expected %u", j, sum[j], e);
    }
    for (uint32_t i = 0; i < N; i++)
        fl_secagg_client_destroy(cl[i]);
    fl_secagg_server_destroy(srv);
    assert_int_equal(w->cnt.live, 0);
    assert_int_equal(w->cnt.live_bytes, 0);
}

static void walk(int victim, int active, int reveal) {
    struct rig R; /* configuration, identities and graph seed only */
    rig_init_seeds(&R, N, 4, K, 2, 32, active, reveal);
    R.cfg.dim = D;
    uint32_t *x = malloc((size_t)N * D * sizeof(uint32_t));
    assert_non_null(x);
    for (uint32_t i = 0; i < N; i++)
        for (uint32_t j = 0; j < D; j++)
            x[(size_t)i * D + j] = input(i, j);
    struct walk w;
    memset(&w, 0, sizeof(w));
    round_once(&w, victim, active, &R, x);
    long total = w.cnt.calls;
    assert_true(total > 3);
    for (long i = 1; i <= total; i++) {
        memset(&w, 0, sizeof(w));
        w.cnt.fail_at = i;
        round_once(&w, victim, active, &R, x);
        if (w.nomem == 0)
            fail_msg("victim %d: failing allocation %ld of %ld gave no FL_ERR_NOMEM", victim, i,
                     total);
    }
    free(x);
    rig_free(&R);
}

static void test_oom_sparse_server(void **state) {
    (void)state;
    walk(-1, 0, 0);
    walk(-1, 1, 0);
    walk(-1, 0, 1);
}

static void test_oom_sparse_client(void **state) {
    (void)state;
    walk(0, 0, 0);
    walk(0, 1, 0);
    for (int v = 0; v < N; v++)
        if (v != DROP)
            walk(v, 0, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_sparse_server),
        cmocka_unit_test(test_oom_sparse_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
