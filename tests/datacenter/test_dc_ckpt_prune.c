/* Checkpoint retention (fl_dc_checkpoint_prune): which step directories go, which stay,
 * and the refusals. Builds checkpoint-shaped directories by hand in a temp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "flotilla/datacenter.h"

static char root[64];

static void put(const char *rel, const char *text) {
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void step_dir(unsigned s, int ranks) {
    char p[256];
    snprintf(p, sizeof(p), "%s/step-%08u", root, s);
    assert_int_equal(mkdir(p, 0755), 0);
    for (int r = 0; r < ranks; r++) {
        char f[64];
        snprintf(f, sizeof(f), "step-%08u/rank-%05d.safetensors", s, r);
        put(f, "shard");
    }
}

static int exists(const char *rel) {
    char p[256];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    return stat(p, &st) == 0;
}

static int setup(void **st) {
    (void)st;
    snprintf(root, sizeof(root), "/tmp/fl_dc_prune_XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_keeps_latest_and_newest_older(void **st) {
    (void)st;
    for (unsigned s = 3; s <= 15; s += 3)
        step_dir(s, 2); /* 3 6 9 12 15 */
    put("latest", "step-00000012\n");
    /* Not ours, or not older than latest: left alone. */
    put("notes.txt", "x");
    char p[256];
    snprintf(p, sizeof(p), "%s/step-xyz", root);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/step-0001", root); /* too few digits to be a step */
    assert_int_equal(mkdir(p, 0755), 0);
    unsigned removed = 99;
    char msg[256];
    assert_int_equal(fl_dc_checkpoint_prune(root, 2, &removed, msg, sizeof(msg)), FL_OK);
    assert_int_equal(removed, 2); /* 3 and 6 */
    assert_false(exists("step-00000003"));
    assert_false(exists("step-00000006"));
    assert_true(exists("step-00000009/rank-00001.safetensors"));
    assert_true(exists("step-00000012/rank-00000.safetensors"));
    assert_true(exists("step-00000015")); /* newer than latest */
    assert_true(exists("notes.txt"));
    assert_true(exists("step-xyz"));
    assert_true(exists("step-0001"));
    /* Again: nothing more to do. keep 1: only latest among the older ones. */
    assert_int_equal(fl_dc_checkpoint_prune(root, 2, &removed, NULL, 0), FL_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(fl_dc_checkpoint_prune(root, 1, &removed, NULL, 0), FL_OK);
    assert_int_equal(removed, 1);
    assert_false(exists("step-00000009"));
    assert_true(exists("step-00000012"));
    /* keep larger than what exists: nothing removed. */
    assert_int_equal(fl_dc_checkpoint_prune(root, 50, &removed, NULL, 0), FL_OK);
    assert_int_equal(removed, 0);
}

/* A step directory holding something that is not a file is left (FL_ERR_IO naming it);
 * the others are still removed. Debris files (*.tmp) go with their directory. */
static void test_foreign_content(void **st) {
    (void)st;
    step_dir(1, 1);
    step_dir(2, 1);
    step_dir(3, 1);
    put("step-00000002/rank-00000.safetensors.tmp", "half");
    char p[256];
    snprintf(p, sizeof(p), "%s/step-00000001/sub", root);
    assert_int_equal(mkdir(p, 0755), 0);
    put("latest", "step-00000003");
    unsigned removed = 0;
    char msg[256];
    assert_int_equal(fl_dc_checkpoint_prune(root, 1, &removed, msg, sizeof(msg)), FL_ERR_IO);
    assert_non_null(strstr(msg, "step-00000001"));
    assert_int_equal(removed, 1);
    assert_false(exists("step-00000002"));
    assert_true(exists("step-00000001/sub"));
    assert_true(exists("step-00000003/rank-00000.safetensors"));
}

static void test_refusals(void **st) {
    (void)st;
    char msg[256];
    unsigned removed = 7;
    assert_int_equal(fl_dc_checkpoint_prune(NULL, 1, &removed, msg, sizeof(msg)), FL_ERR_MISUSE);
    assert_int_equal(removed, 0);
    assert_int_equal(fl_dc_checkpoint_prune(root, 0, NULL, msg, sizeof(msg)), FL_ERR_MISUSE);
    assert_non_null(strstr(msg, "keep"));
    /* No latest: nothing is touched. */
    step_dir(1, 1);
    assert_int_equal(fl_dc_checkpoint_prune(root, 1, NULL, msg, sizeof(msg)), FL_ERR_NOT_FOUND);
    assert_true(exists("step-00000001"));
    char p[256];
    snprintf(p, sizeof(p), "%s/missing", root);
    assert_int_equal(fl_dc_checkpoint_prune(p, 1, NULL, msg, sizeof(msg)), FL_ERR_NOT_FOUND);
    /* latest naming something else: corrupt, nothing touched. */
    static const char *const bad[] = {
        "", "\n", "step-12\n", "../step-00000001\n", "step-0000000x\n", "latest\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put("latest", bad[i]);
        assert_int_equal(fl_dc_checkpoint_prune(root, 1, NULL, msg, sizeof(msg)), FL_ERR_CORRUPT);
        assert_true(exists("step-00000001"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keeps_latest_and_newest_older, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_content, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
