/* Test-only SQLite allocation hook shared by the storage allocation walks: installed
 * process-wide, it fails the n-th SQLite allocation after sqlite_countdown is set to n
 * (0 = off) and counts the refusals in sqlite_failures. Lookaside is turned off so every
 * allocation goes through the hook. */
#ifndef FL_TEST_SQLITE_FAIL_HOOK_H
#define FL_TEST_SQLITE_FAIL_HOOK_H

#include <stdlib.h>

#include <sqlite3.h>

static sqlite3_mem_methods sqlite_orig_mem;
static long sqlite_countdown; /* 0 = off; 1 = fail the next SQLite allocation */
static long sqlite_failures;  /* SQLite allocations refused so far */

static int sqlite_should_fail(void) {
    if (sqlite_countdown > 0 && --sqlite_countdown == 0) {
        sqlite_failures++;
        return 1;
    }
    return 0;
}
static void *sqlite_hook_malloc(int n) {
    return sqlite_should_fail() ? NULL : sqlite_orig_mem.xMalloc(n);
}
static void *sqlite_hook_realloc(void *p, int n) {
    return sqlite_should_fail() ? NULL : sqlite_orig_mem.xRealloc(p, n);
}
static void sqlite_hook_free(void *p) {
    sqlite_orig_mem.xFree(p);
}
static int sqlite_hook_size(void *p) {
    return sqlite_orig_mem.xSize(p);
}
static int sqlite_hook_roundup(int n) {
    return sqlite_orig_mem.xRoundup(n);
}
static int sqlite_hook_init(void *u) {
    return sqlite_orig_mem.xInit(u);
}
static void sqlite_hook_shutdown(void *u) {
    sqlite_orig_mem.xShutdown(u);
}

static void install_sqlite_hook(void) {
    sqlite3_shutdown();
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &sqlite_orig_mem) != SQLITE_OK)
        abort();
    static sqlite3_mem_methods m;
    m = sqlite_orig_mem;
    m.xMalloc = sqlite_hook_malloc;
    m.xFree = sqlite_hook_free;
    m.xRealloc = sqlite_hook_realloc;
    m.xSize = sqlite_hook_size;
    m.xRoundup = sqlite_hook_roundup;
    m.xInit = sqlite_hook_init;
    m.xShutdown = sqlite_hook_shutdown;
    if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK ||
        sqlite3_config(SQLITE_CONFIG_LOOKASIDE, 0, 0) != SQLITE_OK ||
        sqlite3_initialize() != SQLITE_OK)
        abort();
}

#endif
