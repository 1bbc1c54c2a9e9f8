/* Model registry throughput: fl_store_model_put / fl_store_model_get for --count models of
 * --size bytes, against references measured in the same run on the same disk:
 *   raw_fsync      write() of the same bytes to one file + fsync() after each model (the
 *                  floor for a durable put)
 *   sqlite_insert  plain SQLite INSERT of the blob, WAL + synchronous=FULL, one
 *                  transaction per model: no hashing, dedup lookup or checks
 *   sqlite_select  plain SQLite SELECT of the blob by rowid, copied out (no hash check)
 *   sha256         hashing the bytes alone with OpenSSL, as the store does (the check
 *                  every put and get pays)
 * Ratios are time per model of the registry call over its reference (1.0 = same cost).
 *
 * Usage: bench_registry [--size BYTES] [--count N] [--dir DIR] [--json] */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "flotilla/storage.h"

#define BENCH_NAME "bench_registry"
#include "bench_util.h"

struct result {
    const char *name; /* measurement */
    double seconds;   /* wall time for all models */
};

static void usage(void) {
    fprintf(stderr, "usage: bench_registry [--size BYTES] [--count N] [--dir DIR] [--json]\n"
                    "  --size   model size in bytes (default 1048576)\n"
                    "  --count  models to put and get (default 50)\n"
                    "  --dir    directory for the temporary files (default $TMPDIR or /tmp)\n"
                    "  --json   print one JSON object instead of a table\n");
}

/* A plain decimal >= 1 (no K/M/G suffix, unlike bench_parse_size): --size and --count. */
static size_t parse_size(const char *s, const char *flag) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || !end || *end || v == 0)
        bench_die("bad value for", flag);
    return (size_t)v;
}

/* Model i: pseudo-random bytes, the index in front so every model is distinct. */
static void make_model(uint8_t *buf, size_t n, size_t i) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (i + 1);
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[k] = (uint8_t)x;
    }
    memcpy(buf, &i, n < sizeof(i) ? n : sizeof(i));
}

static void sql_ok(sqlite3 *db, int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
        bench_die(what, sqlite3_errmsg(db));
}

int main(int argc, char **argv) {
    size_t size = 1 << 20, count = 50;
    const char *dir = bench_tmpdir();
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            size = parse_size(argv[++i], "--size");
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = parse_size(argv[++i], "--count");
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else {
            usage();
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (size < 8 || size > 512u * 1024 * 1024)
        bench_die("--size must be 8..536870912", NULL);

    char work[512], path[600];
    snprintf(work, sizeof(work), "%s/fl_bench_registry_XXXXXX", dir);
    if (!mkdtemp(work))
        bench_die("mkdtemp failed", strerror(errno));
    uint8_t *buf = malloc(size), *copy = malloc(size);
    if (!buf || !copy)
        bench_die("out of memory", NULL);
    struct result res[6];
    int nres = 0;
    double t;

    /* ---- reference: hashing alone ---- */
    uint8_t h[32];
    double hash_total = 0;
    for (size_t i = 0; i < count; i++) {
        make_model(buf, size, i);
        t = bench_wall_s();
        if (EVP_Digest(buf, size, h, NULL, EVP_sha256(), NULL) != 1)
            bench_die("EVP_Digest failed", NULL);
        hash_total += bench_wall_s() - t;
    }
    res[nres++] = (struct result){"sha256", hash_total};

    /* ---- reference: write() + fsync() per model ---- */
    snprintf(path, sizeof(path), "%s/raw.bin", work);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        bench_die("open raw.bin", strerror(errno));
    double raw_total = 0;
    for (size_t i = 0; i < count; i++) {
        make_model(buf, size, i);
        t = bench_wall_s();
        size_t off = 0;
        while (off < size) {
            ssize_t w = write(fd, buf + off, size - off);
            if (w < 0 && errno != EINTR)
                bench_die("write", strerror(errno));
            off += w > 0 ? (size_t)w : 0;
        }
        if (fsync(fd) != 0)
            bench_die("fsync", strerror(errno));
        raw_total += bench_wall_s() - t;
    }
    close(fd);
    unlink(path);
    res[nres++] = (struct result){"raw_fsync", raw_total};

    /* ---- reference: plain SQLite insert/select ---- */
    snprintf(path, sizeof(path), "%s/raw.db", work);
    sqlite3 *db = NULL;
    sql_ok(db, sqlite3_open(path, &db), "sqlite open");
    sql_ok(db,
           sqlite3_exec(db,
                        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                        "CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
                        NULL, NULL, NULL),
           "sqlite setup");
    sqlite3_stmt *ins = NULL, *sel = NULL;
    sql_ok(db, sqlite3_prepare_v2(db, "INSERT INTO blobs (data) VALUES (?1)", -1, &ins, NULL),
           "prepare insert");
    sql_ok(db, sqlite3_prepare_v2(db, "SELECT data FROM blobs WHERE id = ?1", -1, &sel, NULL),
           "prepare select");
    double ins_total = 0, sel_total = 0;
    for (size_t i = 0; i < count; i++) {
        make_model(buf, size, i);
        t = bench_wall_s();
        sqlite3_bind_blob64(ins, 1, buf, size, SQLITE_STATIC);
        sql_ok(db, sqlite3_step(ins), "insert");
        sqlite3_reset(ins);
        ins_total += bench_wall_s() - t;
    }
    for (size_t i = 0; i < count; i++) {
        t = bench_wall_s();
        sqlite3_bind_int64(sel, 1, (sqlite3_int64)i + 1);
        sql_ok(db, sqlite3_step(sel), "select");
        if ((size_t)sqlite3_column_bytes(sel, 0) != size)
            bench_die("select returned the wrong size", NULL);
        memcpy(copy, sqlite3_column_blob(sel, 0), size);
        sqlite3_reset(sel);
        sel_total += bench_wall_s() - t;
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(sel);
    sqlite3_close(db);
    res[nres++] = (struct result){"sqlite_insert", ins_total};
    res[nres++] = (struct result){"sqlite_select", sel_total};

    /* ---- the registry ---- */
    snprintf(path, sizeof(path), "%s/registry.db", work);
    fl_store *st = NULL;
    if (fl_store_open(&st, path, NULL) != FL_OK)
        bench_die("fl_store_open", fl_store_errmsg(st));
    int64_t *versions = calloc(count, sizeof(*versions));
    if (!versions)
        bench_die("out of memory", NULL);
    double put_total = 0, get_total = 0;
    int64_t parent = 0;
    for (size_t i = 0; i < count; i++) {
        make_model(buf, size, i);
        fl_store_model_ref ref;
        t = bench_wall_s();
        if (fl_store_model_put(st, &ref, 0, parent, buf, size, "{\"bench\":true}") != FL_OK)
            bench_die("fl_store_model_put", fl_store_errmsg(st));
        put_total += bench_wall_s() - t;
        versions[i] = parent = ref.version;
    }
    for (size_t i = 0; i < count; i++) {
        fl_store_model *m = NULL;
        t = bench_wall_s();
        if (fl_store_model_get(st, &m, versions[i]) != FL_OK)
            bench_die("fl_store_model_get", fl_store_errmsg(st));
        memcpy(copy, m->bytes, size); /* same work as the select reference */
        fl_store_free(st, m);
        get_total += bench_wall_s() - t;
    }
    fl_store_close(st);
    res[nres++] = (struct result){"registry_put", put_total};
    res[nres++] = (struct result){"registry_get", get_total};

    double put_vs_sqlite = put_total / ins_total, put_vs_fsync = put_total / raw_total;
    double get_vs_sqlite = get_total / sel_total;
    double mb = (double)size * (double)count / (1024.0 * 1024.0);
    if (json) {
        printf("{\"bench\":\"storage_registry\",\"size\":%zu,\"count\":%zu,\"results\":[", size,
               count);
        for (int i = 0; i < nres; i++)
            printf("%s{\"name\":\"%s\",\"seconds\":%.6f,\"ops_per_s\":%.2f,\"mib_per_s\":%.2f}",
                   i ? "," : "", res[i].name, res[i].seconds, (double)count / res[i].seconds,
                   mb / res[i].seconds);
        printf("],\"ratios\":{\"put_vs_sqlite_insert\":%.3f,\"put_vs_raw_fsync\":%.3f,"
               "\"get_vs_sqlite_select\":%.3f}}\n",
               put_vs_sqlite, put_vs_fsync, get_vs_sqlite);
    } else {
        printf("model registry: %zu models of %zu bytes (%.1f MiB) in %s\n", count, size, mb, work);
        printf("  %-14s %10s %10s %10s\n", "measure", "ms/model", "models/s", "MiB/s");
        for (int i = 0; i < nres; i++)
            printf("  %-14s %10.3f %10.1f %10.1f\n", res[i].name,
                   1000.0 * res[i].seconds / (double)count, (double)count / res[i].seconds,
                   mb / res[i].seconds);
        printf("  put / sqlite_insert = %.2fx   put / raw_fsync = %.2fx   get / sqlite_select = "
               "%.2fx\n",
               put_vs_sqlite, put_vs_fsync, get_vs_sqlite);
    }

    /* Clean up the work directory. */
    const char *files[] = {"registry.db", "registry.db-wal", "registry.db-shm",
                           "raw.db",      "raw.db-wal",      "raw.db-shm"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", work, files[i]);
        unlink(path);
    }
    rmdir(work);
    free(versions);
    free(buf);
    free(copy);
    return 0;
}
