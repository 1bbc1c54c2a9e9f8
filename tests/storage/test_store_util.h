#ifndef FL_TEST_STORE_UTIL_H
#define FL_TEST_STORE_UTIL_H
/* Helpers shared by the storage tests: a private temporary directory per test and raw
 * SQLite access for checks the API deliberately cannot make. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fl_test.h"
#include "flotilla/storage.h"

struct store_tdir {
    char dir[256];  /* the directory, removed with its files by store_tdir_rm */
    char path[320]; /* dir/<name>, the database file */
};

static inline void store_tdir_make(struct store_tdir *t, const char *name) {
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof(t->dir), "%s/fl_store_XXXXXX", base && base[0] ? base : "/tmp");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof(t->path), "%s/%s", t->dir, name);
}

static inline void store_tdir_rm(struct store_tdir *t) {
    DIR *d = opendir(t->dir);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof(p), "%s/%s", t->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(t->dir);
}

/* Opens a raw connection (for tampering and inspection). */
static inline sqlite3 *store_raw_open(const char *path) {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* Runs one integer query on a raw connection. */
static inline int64_t store_raw_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Opens a store with defaults (and an optional allocator) and fails the test on error. */
static inline fl_store *store_open_ok(const char *path, const fl_allocator *a) {
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.allocator = a;
    fl_store *st = NULL;
    fl_status r = fl_store_open(&st, path, &cfg);
    if (r != FL_OK)
        fail_msg("fl_store_open(%s): %s: %s", path, fl_status_name(r), fl_store_errmsg(st));
    return st;
}

#define STORE_OK(st, call)                                                                         \
    do {                                                                                           \
        fl_status r_ = (call);                                                                     \
        if (r_ != FL_OK)                                                                           \
            fail_msg("%s -> %s: %s", #call, fl_status_name(r_), fl_store_errmsg(st));              \
    } while (0)

#endif
