#ifndef FL_TEST_FAULT_VFS_H
#define FL_TEST_FAULT_VFS_H
/* A fault-injecting SQLite VFS for the reliability tests ("flfault"). It wraps the default
 * "unix" VFS and passes every call through, while it can:
 *
 *  - count I/O calls (xWrite, xTruncate, xSync, xDelete) and fail the N-th xWrite with
 *    SQLITE_IOERR_WRITE or the N-th xSync with SQLITE_IOERR_FSYNC (one-shot faults);
 *  - refuse writes that would grow the files it has open past a byte budget, with
 *    SQLITE_FULL, as a full disk does (ENOSPC);
 *  - model power loss. While tracking, it keeps for every database, WAL and journal file
 *    the content that was last made durable by an xSync, the writes and truncations
 *    since, and which directory entries (creations, deletions) were made durable by a
 *    directory fsync (the unix VFS's "openDirectory" system call, which it makes only to
 *    fsync a directory, is hooked to see those). A cut puts every tracked file back to
 *    what a machine would find after losing power at that instant, then runs the cut
 *    handler (the tests _exit the workload process there, like the power going away).
 *
 * Power-loss models:
 *   FAULT_VFS_LOSE_UNSYNCED  every write, truncation, creation and deletion not yet
 *                            covered by an fsync (of the file, or of its directory for
 *                            creations and deletions) is lost; synced data is intact.
 *   FAULT_VFS_TORN           harsher: each 512-byte sector of each unsynced write
 *                            independently reached the disk or not (so unsynced writes
 *                            may be torn and persist out of order: any subset of them, a
 *                            later kept write winning over an earlier one on the same
 *                            sector); each unsynced truncation independently happened or
 *                            not; each file whose directory entry changed since the last
 *                            directory fsync independently shows the old or the new entry.
 *                            Synced data is never altered, and bytes outside a write are
 *                            never touched (SQLite's powersafe-overwrite assumption).
 *
 * The -shm file is not tracked: the unix VFS opens it without xOpen, and SQLite rebuilds
 * it after a crash. Test helper, single-threaded, one process-wide state. */
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#define FAULT_VFS_NAME "flfault"

enum fault_vfs_model {
    FAULT_VFS_LOSE_UNSYNCED = 0, /* drop every unsynced change */
    FAULT_VFS_TORN = 1           /* keep a random subset of unsynced sectors, tear writes */
};

/* Registers the VFS (not as the default). Idempotent. Returns SQLITE_OK or an error. */
int fault_vfs_register(void);

/* Writes "file:<path>?vfs=flfault" into buf, the name that opens path through the VFS
 * (SQLite here is built with URI file names enabled; fault_vfs_uri_supported() says). */
const char *fault_vfs_uri(char *buf, size_t cap, const char *path);
int fault_vfs_uri_supported(void);

/* Forgets all counters, faults, the budget and all power-loss tracking (frees its
 * memory) and unhooks the directory fsync. Open files keep working. */
void fault_vfs_reset(void);

/* ---- counters and one-shot faults ---- */

/* I/O calls seen since the last reset: xWrite + xTruncate + xSync + xDelete. */
long fault_vfs_io_count(void);
long fault_vfs_write_count(void);
long fault_vfs_sync_count(void);
/* Directory fsyncs seen while tracking. */
long fault_vfs_dir_sync_count(void);
/* Faults that fired (write, sync, disk full) since the last reset. */
long fault_vfs_fired(void);
/* Fails the n-th xWrite (1-based, counted from this call) with SQLITE_IOERR_WRITE and the
 * n-th xSync with SQLITE_IOERR_FSYNC; 0 disarms. Each fires once. */
void fault_vfs_fail_write_at(long n);
void fault_vfs_fail_sync_at(long n);

/* ---- disk full ---- */

/* Limits the total size of the files the VFS has open to bytes (-1 = no limit): a write
 * that would grow them past it fails with SQLITE_FULL and writes nothing. Overwrites
 * inside a file's current size always succeed. */
void fault_vfs_set_budget(int64_t bytes);
/* Total size in bytes of the files the VFS has open now. */
int64_t fault_vfs_usage(void);

/* ---- power loss ---- */

/* Starts tracking: from now on every file opened, written, truncated, synced or deleted
 * through the VFS is tracked; files already on disk count as durable when first seen. */
int fault_vfs_track(void);
/* Arms a power cut at the k-th I/O call from now (that call does not happen): the files
 * are reverted with the given model (seed drives FAULT_VFS_TORN), then on_cut(user) is
 * called; it must not return into SQLite (the tests _exit). k 0 disarms. */
void fault_vfs_cut_at(long k, enum fault_vfs_model model, uint64_t seed, void (*on_cut)(void *),
                      void *user);
/* Self-test of the checkers: on = every xSync returns SQLITE_OK without syncing or
 * making anything durable (a disk that ignores flushes), so a cut must lose acknowledged
 * commits. Off by default and after a reset. */
void fault_vfs_set_lying_sync(int on);
/* Reverts the tracked files now, as a power cut would; returns 0 or -1 (errno). */
int fault_vfs_power_cut(enum fault_vfs_model model, uint64_t seed);
/* Statistics of the last revert: unsynced writes dropped and (torn model) kept. */
void fault_vfs_last_cut_stats(long *writes_dropped, long *sectors_kept, long *entries_reverted);

#endif
