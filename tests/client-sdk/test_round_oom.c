/* Allocation-failure walk over a whole secure-aggregation round against the REAL
 * coordinator: one of three devices gets the counting allocator (its store, transport and
 * client), and the walk fails its 1st, 2nd, ... allocation in turn, each time in a fresh
 * round. Whatever fails, every call returns (FL_OK with the failure handled inside the
 * round, or FL_ERR_NOMEM from create), and after the device is destroyed nothing it
 * allocated is left. The healthy devices' rounds are abandoned or completed; the clock is
 * then moved past every deadline so the next attempt starts a new round (about one round per
 * allocation point; under a second in the dev build). */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <sodium.h>

#include "sdk_fixture.h"

static void test_round_oom_walk(void **st) {
    (void)st;
    struct sfx *f = sfx_start(false);
    size_t mlen;
    uint8_t *m = sfx_model(&mlen);
    char etok[256];
    const char *json =
        "{\"name\":\"oom\",\"allowed_regions\":[\"EU\"],"
        "\"selection\":{\"target\":3,\"over_selection\":1.0,\"min_participants\":3,"
        "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":1,\"max_retry_s\":5},"
        "\"deadlines_s\":{\"advertise\":10,\"share\":10,\"masked\":10,\"unmask\":10},"
        "\"training\":{\"epochs\":1,\"batch_size\":8,\"learning_rate\":0.1,\"max_examples\":50},"
        "\"update\":{\"weighting\":\"uniform\"},\"strategy\":{\"name\":\"fedavg\"},"
        "\"secagg\":{\"enabled\":true,\"threshold_fraction\":0.5},"
        "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0}}";
    sfx_population(f, json, m, mlen, etok, sizeof(etok));
    long total = 0, step = 1, attempts = 0;
    for (long fail = 0;; fail += step) {
        struct fl_test_counting cnt = {0};
        cnt.fail_at = fail;
        fl_allocator a = fl_test_counting_allocator(&cnt);
        struct sdev d[3];
        memset(d, 0, sizeof(d));
        for (int i = 0; i < 3; i++) {
            struct sdev_opts o = {.population = "oom",
                                  .etok = etok,
                                  .n_examples = 12,
                                  .alloc = i == 1 ? &a : NULL};
            fl_status rc = sdev_open(&d[i], f, i, &o);
            assert_true(rc == FL_OK || (i == 1 && rc == FL_ERR_NOMEM));
        }
        /* Up to one round: every device steps until its round ended. */
        sdev_drive(f, d, 3, NULL, NULL, 150, 200);
        if (fail == 0) /* the walk covers a whole round */
            for (int i = 0; i < 3; i++) {
                fl_client_stats cs;
                sdev_stats(&d[i], &cs);
                if (cs.rounds_completed != 1)
                    fprintf(stderr, "device %d: %s\n", i, fl_client_errmsg(d[i].c));
                assert_int_equal(cs.rounds_completed, 1);
            }
        for (int i = 0; i < 3; i++)
            sdev_close(&d[i]);
        assert_int_equal(cnt.live, 0);
        assert_int_equal(cnt.allocs, cnt.frees);
        attempts++;
        if (fail == 0) {
            total = cnt.calls;
            assert_true(total > 20);
            step = total > 400 ? total / 400 : 1; /* bound the walk's time */
        } else if (fail > total) {
            break;
        }
        /* Past every deadline: the round of this attempt is over either way. */
        sfx_advance(f, 60000);
    }
    fprintf(stderr, "  %ld allocation points, %ld rounds walked\n", total, attempts);
    free(m);
    sfx_stop(f);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_oom_walk)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
