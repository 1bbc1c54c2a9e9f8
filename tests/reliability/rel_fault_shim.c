/* Test-only part of `rel-coordinator-flfault`: the real coordinator's main
 * (coordinator/tools/main.c, compiled unchanged) linked with this file, which puts the fault
 * VFS (fault_vfs.c) under the service before main runs. Used by the power-loss sweep of
 * test_rel_coord_kill (docs/reliability.md, "Coordinator level").
 *
 * Why a constructor and the default VFS instead of a `file:<path>?vfs=flfault` database
 * name: the coordinator's config loader turns every database path that does not start
 * with '/' into one relative to the config file, so a URI never reaches SQLite. Making
 * "flfault" the process's default VFS puts every file the store opens through it with no
 * change to the coordinator. The coordinator serialises all store calls under its lock, so
 * the VFS's single-threaded state is used by one thread at a time.
 *
 * Environment (all optional; without FL_REL_FLFAULT=1 the program is the plain coordinator):
 *   FL_REL_FLFAULT=1          register "flfault" as the default VFS and track for power loss
 *   FL_REL_CUT_AT=k           cut the power at the k-th I/O call (write, truncate, sync,
 *                             delete) since start; the process then exits with status 86
 *   FL_REL_CUT_MODEL=0|1      0 lose-unsynced, 1 torn (fault_vfs.h)
 *   FL_REL_CUT_SEED=n         drives the torn model
 *   FL_REL_CUT_ON_SIGNAL=j    instead of FL_REL_CUT_AT: SIGUSR1 arms the cut at the j-th I/O
 *                             call after it arrives (the test sends it just before the
 *                             request that completes a round, to cut inside its commit)
 *   FL_REL_LYING_SYNC=1       self-test: every fsync is acknowledged and not done (a cut must
 *                             then lose acknowledged commits, and the sweep must notice)
 *   FL_REL_IO_FILE=path       at a normal exit, and at a cut, the I/O count (and the cut's
 *                             statistics) are written there: "io <n> dropped <w> kept <s>
 *                             entries <e>\n" */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fault_vfs.h"

enum { REL_SHIM_CUT_EXIT = 86 };

static void shim_report(void) {
    const char *path = getenv("FL_REL_IO_FILE");
    if (!path || !path[0])
        return;
    long dropped = 0, kept = 0, entries = 0;
    fault_vfs_last_cut_stats(&dropped, &kept, &entries);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "io %ld dropped %ld kept %ld entries %ld\n", fault_vfs_io_count(), dropped, kept,
            entries);
    fclose(f);
}

static void shim_on_cut(void *user) {
    (void)user;
    shim_report();
    _exit(REL_SHIM_CUT_EXIT); /* the power went away: no cleanup, no atexit */
}

static long shim_sig_k;
static enum fault_vfs_model shim_model;
static uint64_t shim_seed;

/* SIGUSR1: arms the cut relative to now. Only counters are written here; the test sends it
 * between requests, while no store call runs. */
static void shim_on_usr1(int sig) {
    (void)sig;
    fault_vfs_cut_at(shim_sig_k, shim_model, shim_seed, shim_on_cut, NULL);
}

__attribute__((constructor)) static void shim_init(void) {
    const char *on = getenv("FL_REL_FLFAULT");
    if (!on || strcmp(on, "1") != 0)
        return;
    if (fault_vfs_register() != SQLITE_OK) {
        fprintf(stderr, "rel-coordinator-flfault: cannot register the fault VFS\n");
        _exit(2);
    }
    sqlite3_vfs *v = sqlite3_vfs_find(FAULT_VFS_NAME);
    if (!v || sqlite3_vfs_register(v, 1) != SQLITE_OK || fault_vfs_track() != 0) {
        fprintf(stderr, "rel-coordinator-flfault: cannot make the fault VFS the default\n");
        _exit(2);
    }
    const char *k = getenv("FL_REL_CUT_AT"), *ks = getenv("FL_REL_CUT_ON_SIGNAL");
    const char *m = getenv("FL_REL_CUT_MODEL"), *s = getenv("FL_REL_CUT_SEED");
    shim_model = m && strcmp(m, "1") == 0 ? FAULT_VFS_TORN : FAULT_VFS_LOSE_UNSYNCED;
    shim_seed = s ? strtoull(s, NULL, 10) : 1;
    long cut = k ? strtol(k, NULL, 10) : 0;
    if (cut > 0)
        fault_vfs_cut_at(cut, shim_model, shim_seed, shim_on_cut, NULL);
    const char *lie = getenv("FL_REL_LYING_SYNC");
    if (lie && strcmp(lie, "1") == 0)
        fault_vfs_set_lying_sync(1);
    shim_sig_k = ks ? strtol(ks, NULL, 10) : 0;
    if (shim_sig_k > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = shim_on_usr1;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
    }
    atexit(shim_report);
}
