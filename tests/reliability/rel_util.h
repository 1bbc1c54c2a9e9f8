#ifndef FL_TEST_REL_UTIL_H
#define FL_TEST_REL_UTIL_H
/* Helpers shared by the reliability tests: the test profile, deterministic workload
 * content (so a checker can rebuild exactly what a writer stored), file copies and
 * opening a store through the fault VFS. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault_vfs.h"
#include "test_store_util.h"

/* ---- profile ---- */

/* 1 when FL_RELIABILITY_PROFILE=long (the figures in docs/reliability.md), else 0 (the
 * short CI profile, each test well under 30 s with ASan). */
static inline int rel_long_profile(void) {
    const char *p = getenv("FL_RELIABILITY_PROFILE");
    return p && strcmp(p, "long") == 0;
}

/* An integer from the environment, or dflt. */
static inline long rel_env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    if (!v || !v[0])
        return dflt;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end && *end == '\0' ? n : dflt;
}

/* FL_RELIABILITY_SEED, else the clock; printed by each test so a failure can be rerun. */
static inline uint64_t rel_seed(void) {
    const char *v = getenv("FL_RELIABILITY_SEED");
    if (v && v[0])
        return strtoull(v, NULL, 10);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
}

static inline uint64_t rel_rng(uint64_t *s) {
    if (*s == 0)
        *s = 0x2545F4914F6CDD1Dull;
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline double rel_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- deterministic content ---- */

#define REL_MODEL_MAX (160 * 1024)

/* Fills buf[0..n) (n >= 8) with xorshift bytes seeded by (a, b), then stamps a and b in
 * the first 8 bytes: distinct content for every (a, b). */
static inline void rel_fill_stamped(uint8_t *buf, size_t n, uint32_t a, uint32_t b) {
    uint32_t x = (a + 1) * 2654435761u ^ (b + 1) * 2246822519u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)x;
    }
    memcpy(buf, &a, sizeof(a));
    memcpy(buf + 4, &b, sizeof(b));
}

/* Model bytes for (life, index): usually 64 B..8 KiB, one in eight 40..160 KiB (overflow
 * chains over many pages and WAL frames). Distinct for every (life, index). */
static inline size_t rel_model_bytes(uint8_t *buf, uint32_t life, uint32_t index) {
    uint32_t x = (life + 1) * 2654435761u ^ (index + 1) * 2246822519u;
    x ^= x >> 15;
    size_t n = (x & 7) == 0 ? 40960 + (x >> 3) % (REL_MODEL_MAX - 40960) : 64 + (x >> 3) % 8128;
    rel_fill_stamped(buf, n, life, index);
    return n;
}

/* A JSON object naming (life, index) and a kind: metadata, round config, ledger params. */
static inline const char *rel_json(char *buf, size_t cap, const char *kind, uint32_t life,
                                   uint32_t index) {
    snprintf(buf, cap, "{\"k\":\"%s\",\"life\":%" PRIu32 ",\"i\":%" PRIu32 "}", kind, life, index);
    return buf;
}

/* Ledger entry for (life, index); strings point into json (>= 64 bytes). */
static inline fl_store_ledger_entry rel_ledger_entry(int64_t pop, int64_t round_id, uint32_t life,
                                                     uint32_t index, char *json, size_t cap) {
    fl_store_ledger_entry e;
    memset(&e, 0, sizeof(e));
    e.population_id = pop;
    e.round_id = round_id;
    e.mechanism = (index & 1) ? "ddgauss" : "gaussian";
    e.sampling_rate = (double)(index % 100 + 1) / 1000.0;
    e.noise_multiplier = 0.5 + (double)(life % 64) / 64.0;
    e.clip_norm = 1.0 + (double)index;
    e.steps = (int64_t)index + 1;
    e.participants = (int64_t)life * 1000 + index;
    e.params_json = rel_json(json, cap, round_id ? "group" : "solo", life, index);
    return e;
}

/* Client ID and 32-byte token for (life, index). */
static inline void rel_client(char *id, size_t cap, uint8_t token[32], uint32_t life,
                              uint32_t index) {
    snprintf(id, cap, "c-%" PRIu32 "-%" PRIu32, life, index);
    uint64_t s = ((uint64_t)life << 32 | index) + 1;
    for (int i = 0; i < 32; i++)
        token[i] = (uint8_t)rel_rng(&s);
}

/* ---- files ---- */

/* Copies src to dst (dst replaced); a missing src removes dst. 0 or -1. */
static inline int rel_copy_file(const char *src, const char *dst) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        if (errno != ENOENT)
            return -1;
        return unlink(dst) == 0 || errno == ENOENT ? 0 : -1;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[1 << 16];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n) {
            rc = -1;
            break;
        }
    if (n < 0)
        rc = -1;
    close(in);
    close(out);
    return rc;
}

/* Copies a database with its -wal and -journal (not -shm: SQLite rebuilds it). The
 * rollback journal exists only while a fresh file is switched to WAL mode: a cut there
 * leaves page 1 torn and the journal hot, and without it the copy would read as "not a
 * database" where the real files recover. 0 or -1. */
static inline int rel_copy_db(const char *src, const char *dst) {
    static const char *const sfx[] = {"-wal", "-journal"};
    char s[512], d[512];
    int rc = rel_copy_file(src, dst);
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (snprintf(s, sizeof(s), "%s%s", src, sfx[i]) >= (int)sizeof(s) ||
            snprintf(d, sizeof(d), "%s%s", dst, sfx[i]) >= (int)sizeof(d))
            return -1;
        rc |= rel_copy_file(s, d);
    }
    if (snprintf(d, sizeof(d), "%s-shm", dst) >= (int)sizeof(d))
        return -1;
    if (unlink(d) != 0 && errno != ENOENT)
        rc = -1;
    return rc;
}

/* Removes a database and its -wal, -shm and -journal files. */
static inline void rel_remove_db(const char *path) {
    static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
    char p[512];
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
        if (snprintf(p, sizeof(p), "%s%s", path, sfx[i]) < (int)sizeof(p))
            unlink(p);
}

/* Opens path through the fault VFS (URI name). */
static inline fl_status rel_open_fault(fl_store **st, const char *path,
                                       const fl_store_config *cfg) {
    char uri[512];
    return fl_store_open(st, fault_vfs_uri(uri, sizeof(uri), path), cfg);
}

#endif
