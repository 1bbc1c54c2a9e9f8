/* Disk full at the checkpoint, and the restart on a full disk. The fault VFS refuses, with
 * SQLITE_FULL, any write that would grow the store's files past a byte budget
 * (fault_vfs.h); test_rel_diskfull.c covers a full disk at the WAL append. Here the WAL is
 * already large (an earlier big transaction grew it to ~1,650 frames and a checkpoint
 * emptied it), so the next commits overwrite WAL space inside its current size and need
 * no new bytes, while the checkpoint that copies their new pages back must grow the
 * database file. The budget is set to the current usage (no growth at all). Checked:
 *
 *   - commits are acknowledged (FL_OK) while they fit in the WAL, also after the automatic
 *     checkpoint (store.c, wal_hook: PASSIVE, once the WAL holds >= 1000 frames) has
 *     failed; the failure is reported as the store documents it: a FL_LOG_WARN
 *     "storage: checkpoint failed: database or disk is full", the commit still FL_OK, the
 *     handle not made read-only;
 *   - once the WAL itself would have to grow, the commit is refused (FL_ERR_IO, "full",
 *     within the call); the handle still reads everything and fl_store_check passes; the
 *     database and WAL files did not grow;
 *   - budget lifted: the very next commit's checkpoint succeeds (no warning, the database
 *     file grows by the pages), the commit after restarts the WAL from its start (same
 *     file size, PRAGMA wal_checkpoint sees only that commit's frames);
 *   - closed and reopened with space back: every acknowledged model byte-exact, every
 *     refused one absent, fl_store_check and PRAGMA integrity_check ok.
 *
 * The restart on a full disk, two ways: the handle closed while the disk is full (its
 * close-time checkpoint fails too, the WAL stays), and a writer process SIGKILLed while
 * the disk is full (once while commits still fit and checkpoints fail, once after the
 * refusals began). Reopened with the disk still full (budget = the files' sizes): the open
 * succeeds or fails cleanly, reads see every acknowledged commit, a write that cannot fit
 * is refused with "full"; then with space back the same handle writes, its checkpoint
 * folds the WAL, and a normal reopen finds everything acknowledged and nothing refused.
 * Environment: FL_RELIABILITY_SEED (the kill delays). */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "rel_util.h"

#define CK_MODEL (64 * 1024)     /* phase-B model: ~17 WAL frames a commit */
#define CK_FILL_MODELS 100       /* phase A: 100 x 64 KiB in one transaction, ~1,650 frames */
#define CK_BIG (8 * 1024 * 1024) /* larger than the whole WAL: never fits on a full disk */
#define CK_MAX_B 400             /* phase-B commits before giving up */
#define CK_MAX_ITEMS 1024        /* acknowledged / refused operations tracked */
#define CK_WAL_FRAMES_MIN 1100   /* WAL size phase A must reach, in 4 KiB frames */

enum ck_tag { TAG_FILL = 1, TAG_FULL = 2, TAG_BIG = 3, TAG_AFTER = 4, TAG_REOPEN = 5 };

/* ---- content ---- */

static uint8_t ck_buf[CK_BIG];


static size_t ck_size(uint32_t tag) {
    return tag == TAG_BIG ? CK_BIG : CK_MODEL;
}

/* ---- what was acknowledged ---- */

struct ck_item {
    int64_t version; /* 0 for a refused or unresolved operation */
    uint32_t tag, index;
};

struct ck_set {
    struct ck_item acked[CK_MAX_ITEMS];
    int nacked;
    struct ck_item refused[CK_MAX_ITEMS];
    int nrefused;
};

static void ck_add(struct ck_item *list, int *n, int64_t version, uint32_t tag, uint32_t index) {
    if (*n >= CK_MAX_ITEMS)
        return;
    list[*n].version = version;
    list[*n].tag = tag;
    list[*n].index = index;
    (*n)++;
}

/* ---- store log (how a failed checkpoint is reported) ---- */

struct ck_log {
    long ckpt_fail;     /* "checkpoint failed" warnings */
    long ckpt_fail_msg; /* of them, saying the disk is full */
    long fsync_poison;  /* "fsync failed" errors: the handle made read-only */
    char last[256];     /* the last checkpoint warning */
};

static void ck_log_fn(void *user, fl_log_level level, const char *msg) {
    struct ck_log *l = user;
    if (level == FL_LOG_WARN && strstr(msg, "checkpoint failed")) {
        l->ckpt_fail++;
        if (strstr(msg, "full"))
            l->ckpt_fail_msg++;
        snprintf(l->last, sizeof(l->last), "%s", msg);
    }
    if (strstr(msg, "refuses writes"))
        l->fsync_poison++;
}

static fl_status ck_open(fl_store **st, const char *path, struct ck_log *log) {
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.logger.fn = ck_log_fn;
    cfg.logger.user = log;
    cfg.logger.min_level = FL_LOG_WARN;
    return rel_open_fault(st, path, &cfg);
}

/* One model put of (tag, index); on FL_OK *version is set. No cmocka calls: also run in a
 * forked writer. */
static fl_status ck_put(fl_store *st, int64_t pop, uint32_t tag, uint32_t index, int64_t *version,
                        double *took) {
    char meta[96];
    size_t n = ck_size(tag);
    rel_fill_stamped(ck_buf, n, tag, index);
    snprintf(meta, sizeof(meta), "{\"k\":%" PRIu32 ",\"i\":%" PRIu32 "}", tag, index);
    fl_store_model_ref ref;
    double t0 = rel_now_s();
    fl_status r = fl_store_model_put(st, &ref, pop, 0, ck_buf, n, meta);
    if (took)
        *took = rel_now_s() - t0;
    if (r == FL_OK)
        *version = ref.version;
    return r;
}

/* 1 if the stored version holds exactly the bytes of (tag, index). */
static int ck_model_ok(fl_store *st, int64_t version, uint32_t tag, uint32_t index) {
    fl_store_model *m = NULL;
    if (fl_store_model_get(st, &m, version) != FL_OK)
        return 0;
    size_t n = ck_size(tag);
    rel_fill_stamped(ck_buf, n, tag, index);
    int ok = m->size == n && memcmp(m->bytes, ck_buf, n) == 0;
    fl_store_free(st, m);
    return ok;
}

static int64_t ck_file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static void ck_assert_full(fl_store *st, fl_status r, const char *what, double took) {
    if (r != FL_ERR_IO && r != FL_ERR_ABORTED)
        fail_msg("%s on a full disk returned %s (%s), not FL_ERR_IO", what, fl_status_name(r),
                 fl_store_errmsg(st));
    if (!strstr(fl_store_errmsg(st), "full"))
        fail_msg("%s on a full disk: the message does not say so: '%s'", what, fl_store_errmsg(st));
    if (took > 2.0)
        fail_msg("%s took %.1f s to fail on a full disk", what, took);
}

/* Every acknowledged model is readable, byte-exact, on st. */
static void ck_verify_acked(fl_store *st, const struct ck_set *s, const char *when) {
    for (int i = 0; i < s->nacked; i++)
        if (!ck_model_ok(st, s->acked[i].version, s->acked[i].tag, s->acked[i].index))
            fail_msg("%s: acknowledged model (tag %u, #%u, version %lld) missing or changed: "
                     "%s",
                     when, s->acked[i].tag, s->acked[i].index, (long long)s->acked[i].version,
                     fl_store_errmsg(st));
}

/* Versions of the models stored for (tag, index) (0, 1 or, wrongly, more). */
static int64_t ck_raw_count(sqlite3 *raw, uint32_t tag, uint32_t index, int64_t *version) {
    char sql[200];
    snprintf(sql, sizeof(sql),
             "SELECT count(*), ifnull(max(version), 0) FROM models WHERE "
             "json_extract(metadata_json, '$.k') = %" PRIu32
             " AND json_extract(metadata_json, '$.i') = %" PRIu32,
             tag, index);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(s, 0);
    if (version)
        *version = sqlite3_column_int64(s, 1);
    sqlite3_finalize(s);
    return n;
}

static void ck_raw_text(sqlite3 *raw, const char *sql, char *out, size_t cap) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(s, 0);
    snprintf(out, cap, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(s);
}

/* Reopens path normally (space back, unix VFS) and checks everything: each acknowledged
 * model byte-exact, each refused one absent, the operation in flight (inflight, may be
 * NULL) whole or absent, no other model, fl_store_check and integrity_check ok. Returns
 * 1 if the in-flight operation is there. */
static int ck_verify_final(const char *path, const struct ck_set *s, const struct ck_item *inflight,
                           const char *when) {
    fl_store *st = store_open_ok(path, NULL);
    ck_verify_acked(st, s, when);
    STORE_OK(st, fl_store_check(st));
    sqlite3 *raw = store_raw_open(path);
    for (int i = 0; i < s->nrefused; i++)
        if (ck_raw_count(raw, s->refused[i].tag, s->refused[i].index, NULL) != 0)
            /* A refused commit that is there after all: the store reported a failure for a
             * commit that was durable (e.g. a checkpoint failure turned into a commit
             * failure). A storage bug, not a test problem. */
            fail_msg("%s: BUG: a refused commit (tag %u, #%u) is in the store", when,
                     s->refused[i].tag, s->refused[i].index);
    int present = 0;
    if (inflight) {
        int64_t v = 0;
        int64_t n = ck_raw_count(raw, inflight->tag, inflight->index, &v);
        assert_true(n <= 1);
        present = (int)n;
        if (present && !ck_model_ok(st, v, inflight->tag, inflight->index))
            fail_msg("%s: the commit in flight at the kill is there but not byte-exact", when);
    }
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM models"), s->nacked + present);
    char ic[128];
    ck_raw_text(raw, "PRAGMA integrity_check", ic, sizeof(ic));
    if (strcmp(ic, "ok") != 0)
        fail_msg("%s: integrity_check: %s", when, ic);
    sqlite3_close(raw);
    fl_store_close(st);
    return present;
}

/* ---- arranging the full disk ---- */

struct ck_run {
    struct store_tdir t;
    char wal[400]; /* the -wal file */
    fl_store *st;  /* the handle through the fault VFS */
    int64_t pop;
    struct ck_log log;
    struct ck_set set;
    int64_t db0, wal0;    /* file sizes when the budget was set (bytes) */
    int64_t budget;       /* bytes: the usage then */
    int first_fail;       /* phase-B commit whose checkpoint failed first, -1 none */
    int acked_b;          /* phase-B commits acknowledged */
    int acked_after_fail; /* of them, after the first failed checkpoint */
    double max_ack_s;     /* slowest acknowledged phase-B commit */
    double refuse_s;      /* the refused commit */
};

/* A new store with a population, opened through the fault VFS with the log captured. */
static void ck_setup(struct ck_run *c, const char *name) {
    memset(c, 0, sizeof(*c));
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    store_tdir_make(&c->t, name);
    snprintf(c->wal, sizeof(c->wal), "%s-wal", c->t.path);
    fl_store *st = store_open_ok(c->t.path, NULL);
    STORE_OK(st, fl_store_population_create(st, &c->pop, "ckpt", NULL, 10.0, 1e-6, NULL));
    fl_store_close(st);
    fault_vfs_reset();
    fl_status r = ck_open(&c->st, c->t.path, &c->log);
    if (r != FL_OK)
        fail_msg("open through the fault VFS: %s", fl_store_errmsg(c->st));
    c->first_fail = -1;
}

/* Phase A (no budget): one transaction of CK_FILL_MODELS models grows the WAL past
 * CK_WAL_FRAMES_MIN frames; its commit's checkpoint copies them all to the database file,
 * so the next commit starts the WAL again from its start, inside its current size. */
static void ck_phase_fill(struct ck_run *c) {
    int64_t v[CK_FILL_MODELS];
    STORE_OK(c->st, fl_store_begin(c->st));
    for (uint32_t i = 0; i < CK_FILL_MODELS; i++)
        STORE_OK(c->st, ck_put(c->st, c->pop, TAG_FILL, i, &v[i], NULL));
    STORE_OK(c->st, fl_store_commit(c->st));
    for (uint32_t i = 0; i < CK_FILL_MODELS; i++)
        ck_add(c->set.acked, &c->set.nacked, v[i], TAG_FILL, i);
    assert_int_equal(c->log.ckpt_fail, 0);
    assert_true(ck_file_size(c->wal) >= (int64_t)CK_WAL_FRAMES_MIN * 4096);
    assert_true(ck_file_size(c->t.path) >= (int64_t)CK_FILL_MODELS * CK_MODEL);
}

/* Phase B: budget = usage (the disk is full); commits until one is refused. */
static void ck_phase_full(struct ck_run *c) {
    fault_vfs_reset();
    c->db0 = ck_file_size(c->t.path);
    c->wal0 = ck_file_size(c->wal);
    c->budget = fault_vfs_usage();
    assert_int_equal(c->budget, c->db0 + c->wal0); /* only the database and WAL count */
    fault_vfs_set_budget(c->budget);
    fl_status r = FL_OK;
    uint32_t i;
    for (i = 0; i < CK_MAX_B; i++) {
        long before = c->log.ckpt_fail;
        int64_t v = 0;
        double took = 0;
        r = ck_put(c->st, c->pop, TAG_FULL, i, &v, &took);
        if (r != FL_OK) {
            c->refuse_s = took;
            break;
        }
        ck_add(c->set.acked, &c->set.nacked, v, TAG_FULL, i);
        c->acked_b++;
        if (took > c->max_ack_s)
            c->max_ack_s = took;
        if (c->first_fail >= 0)
            c->acked_after_fail++;
        else if (c->log.ckpt_fail > before)
            c->first_fail = (int)i;
    }
    if (i == CK_MAX_B)
        fail_msg("%d commits fitted on a full disk: the WAL never had to grow", CK_MAX_B);
    ck_add(c->set.refused, &c->set.nrefused, 0, TAG_FULL, i);
    ck_assert_full(c->st, r, "a commit needing a bigger WAL", c->refuse_s);
    assert_int_equal(fl_store_in_transaction(c->st), 0);
    /* The checkpoints failed, and that did not fail their commits. A refusal before any
     * checkpoint warning means the checkpoint failure was reported as a commit failure. */
    if (c->first_fail < 0)
        fail_msg("BUG: no checkpoint failure was reported before commit #%u was refused (%s): "
                 "a checkpoint failure turned into a commit failure?",
                 i, fl_store_errmsg(c->st));
    assert_true(c->acked_after_fail >= 1);
    assert_int_equal(c->log.ckpt_fail_msg, c->log.ckpt_fail);
    assert_int_equal(c->log.fsync_poison, 0);
    /* Nothing grew: the WAL was overwritten in place, the database file could not grow. */
    assert_int_equal(ck_file_size(c->t.path), c->db0);
    assert_int_equal(ck_file_size(c->wal), c->wal0);
    assert_true(fault_vfs_usage() <= c->budget);
    assert_true(fault_vfs_fired() > 0);

    /* A commit larger than the whole WAL is refused too. */
    int64_t v = 0;
    double took = 0;
    r = ck_put(c->st, c->pop, TAG_BIG, 0, &v, &took);
    ck_add(c->set.refused, &c->set.nrefused, 0, TAG_BIG, 0);
    ck_assert_full(c->st, r, "an 8 MiB commit", took);
}

/* ---- test 1: the checkpoint on a full disk, on one handle ---- */

static void test_checkpoint_disk_full(void **state) {
    (void)state;
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    static struct ck_run c;
    ck_setup(&c, "ckpt.db");
    ck_phase_fill(&c);
    ck_phase_full(&c);

    /* The handle still reads everything and is consistent. */
    ck_verify_acked(c.st, &c.set, "full disk, same handle");
    STORE_OK(c.st, fl_store_check(c.st));
    /* fl_store_wal_stats_get shows it without the log: one failure per warning, the
     * latest attempt failed, the WAL past the checkpoint threshold. */
    fl_store_wal_stats ws;
    assert_int_equal(fl_store_wal_stats_get(NULL, &ws), FL_ERR_MISUSE);
    assert_int_equal(fl_store_wal_stats_get(c.st, NULL), FL_ERR_MISUSE);
    STORE_OK(c.st, fl_store_wal_stats_get(c.st, &ws));
    assert_int_equal((long)ws.checkpoint_failures, c.log.ckpt_fail);
    assert_true(ws.checkpoints > ws.checkpoint_failures); /* the fill's checkpoint succeeded */
    assert_int_equal(ws.last_checkpoint_failed, 1);
    assert_true(ws.wal_frames >= 1000);

    /* Space back: the next commit's checkpoint succeeds and grows the database file by
     * the phase-B pages; the commit after that starts the WAL again from its start. */
    fault_vfs_set_budget(-1);
    long warned = c.log.ckpt_fail;
    int64_t v = 0;
    double t0 = rel_now_s();
    STORE_OK(c.st, ck_put(c.st, c.pop, TAG_AFTER, 0, &v, NULL));
    double fold_s = rel_now_s() - t0;
    ck_add(c.set.acked, &c.set.nacked, v, TAG_AFTER, 0);
    assert_int_equal(c.log.ckpt_fail, warned); /* this checkpoint did not fail */
    fl_store_wal_stats ws2;
    STORE_OK(c.st, fl_store_wal_stats_get(c.st, &ws2));
    assert_int_equal(ws2.last_checkpoint_failed, 0);
    assert_int_equal(ws2.checkpoints, ws.checkpoints + 1);
    assert_int_equal(ws2.checkpoint_failures, ws.checkpoint_failures);
    int64_t db1 = ck_file_size(c.t.path);
    if (db1 < c.db0 + (int64_t)c.acked_b * CK_MODEL)
        fail_msg("the checkpoint after space came back did not grow the database file: %lld -> "
                 "%lld bytes for %d commits of %d bytes",
                 (long long)c.db0, (long long)db1, c.acked_b, CK_MODEL);
    int64_t wal1 = ck_file_size(c.wal); /* that commit's frames had to grow the WAL */
    assert_true(wal1 > c.wal0);
    STORE_OK(c.st, ck_put(c.st, c.pop, TAG_AFTER, 1, &v, NULL));
    ck_add(c.set.acked, &c.set.nacked, v, TAG_AFTER, 1);
    assert_int_equal(ck_file_size(c.wal), wal1); /* reused from its start, not grown */
    sqlite3 *raw = store_raw_open(c.t.path);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA wal_checkpoint(PASSIVE)", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int busy = sqlite3_column_int(s, 0), frames = sqlite3_column_int(s, 1),
        copied = sqlite3_column_int(s, 2);
    sqlite3_finalize(s);
    sqlite3_close(raw);
    /* Only the last commit's frames (~17) are in the WAL: it was folded back and reset. */
    if (busy != 0 || frames <= 0 || frames >= 100 || copied != frames)
        fail_msg("after space came back the WAL was not folded back and reset: "
                 "wal_checkpoint = (%d, %d, %d)",
                 busy, frames, copied);
    fl_store_close(c.st);
    assert_int_equal(ck_file_size(c.wal), -1); /* close checkpointed and removed it */
    fault_vfs_reset();

    ck_verify_final(c.t.path, &c.set, NULL, "reopened with space back");
    print_message("checkpoint on a full disk: WAL %lld bytes, database %lld; budget %lld "
                  "(no growth): %d commits of %d bytes acknowledged, the checkpoint failed "
                  "from commit %d on (%ld warnings, '%s'), %d commits acknowledged after it "
                  "(slowest %.1f ms); commit %d refused in %.2f ms (the WAL full); space back: "
                  "checkpoint folded %lld bytes into the database in %.1f ms, WAL reset "
                  "(%d frames)\n",
                  (long long)c.wal0, (long long)c.db0, (long long)c.budget, c.acked_b, CK_MODEL,
                  c.first_fail, c.log.ckpt_fail, c.log.last, c.acked_after_fail, c.max_ack_s * 1e3,
                  c.acked_b, c.refuse_s * 1e3, (long long)(db1 - c.db0), fold_s * 1e3, frames);
    store_tdir_rm(&c.t);
}

/* ---- test 2: the restart on a full disk ---- */

/* Reopens path through the fault VFS with the disk still full (budget = the sizes of the
 * database and WAL files, which is all it will open) and checks: the open succeeds, or
 * fails cleanly and saying why; reads see every acknowledged model; a commit larger than
 * the whole WAL is refused; a 64 KiB one is acknowledged if the WAL has room (room: it
 * must have; *small_ok says which). Returns the open handle or NULL. */
static fl_store *ck_reopen_full(const char *path, const char *wal, struct ck_set *set,
                                struct ck_log *log, int64_t pop, int room, int *small_ok,
                                const char *when) {
    if (small_ok)
        *small_ok = 0;
    fault_vfs_reset();
    int64_t db = ck_file_size(path), w = ck_file_size(wal);
    assert_true(db > 0 && w > 0); /* the WAL was not folded back: it is still there */
    fault_vfs_set_budget(db + w);
    fl_store *st = NULL;
    double t0 = rel_now_s();
    fl_status r = ck_open(&st, path, log);
    double took = rel_now_s() - t0;
    if (r != FL_OK) {
        /* Allowed: a clean failure that says why. Not expected with SQLite 3: opening and
         * WAL recovery write nothing but the -shm. */
        if (r != FL_ERR_IO || !strstr(fl_store_errmsg(st), "full"))
            fail_msg("%s: opening on a full disk failed unclearly: %s: %s", when, fl_status_name(r),
                     fl_store_errmsg(st));
        print_message("%s: opening on a full disk refused: %s\n", when, fl_store_errmsg(st));
        fl_store_close(st);
        return NULL;
    }
    if (took > 2.0)
        fail_msg("%s: opening on a full disk took %.1f s", when, took);
    ck_verify_acked(st, set, when);
    STORE_OK(st, fl_store_check(st));
    int64_t v = 0;
    r = ck_put(st, pop, TAG_BIG, 1, &v, &took);
    ck_add(set->refused, &set->nrefused, 0, TAG_BIG, 1);
    ck_assert_full(st, r, "an 8 MiB commit after reopening on a full disk", took);
    assert_int_equal(ck_file_size(path), db);
    assert_int_equal(ck_file_size(wal), w);
    /* A 64 KiB commit fits if the WAL has room past its last commit (room: the writer was
     * killed before its commits were refused): acknowledged, although its checkpoint fails
     * again. Otherwise it is refused like the 8 MiB one. */
    long warned = log->ckpt_fail;
    uint32_t index = 1000 + (uint32_t)(set->nacked + set->nrefused); /* unique */
    r = ck_put(st, pop, TAG_REOPEN, index, &v, &took);
    if (r == FL_OK) {
        ck_add(set->acked, &set->nacked, v, TAG_REOPEN, index);
        assert_int_equal(log->ckpt_fail, warned + 1);
        assert_int_equal(ck_file_size(path), db);
    } else {
        ck_add(set->refused, &set->nrefused, 0, TAG_REOPEN, index);
        ck_assert_full(st, r, "a 64 KiB commit after reopening on a full disk", took);
        if (room)
            fail_msg("%s: a 64 KiB commit was refused although the WAL had room", when);
    }
    if (small_ok)
        *small_ok = r == FL_OK;
    assert_int_equal(ck_file_size(wal), w);
    return st;
}

/* Space back on st (a handle through the fault VFS): a commit is acknowledged, its
 * checkpoint (the WAL holds >= 1000 frames) succeeds and the database file grows; the
 * close folds the rest and removes the WAL. */
static void ck_space_back(fl_store *st, struct ck_set *set, struct ck_log *log, int64_t pop,
                          const char *path, const char *wal, uint32_t index) {
    fault_vfs_set_budget(-1);
    int64_t db = ck_file_size(path);
    long warned = log->ckpt_fail;
    int64_t v = 0;
    STORE_OK(st, ck_put(st, pop, TAG_REOPEN, index, &v, NULL));
    ck_add(set->acked, &set->nacked, v, TAG_REOPEN, index);
    assert_int_equal(log->ckpt_fail, warned);
    assert_true(ck_file_size(path) > db);
    fl_store_close(st);
    assert_int_equal(ck_file_size(wal), -1);
    fault_vfs_reset();
}

/* Closed while the disk is full, reopened while still full, closed again, then space back. */
static void test_restart_full_after_close(void **state) {
    (void)state;
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    static struct ck_run c;
    ck_setup(&c, "close.db");
    ck_phase_fill(&c);
    ck_phase_full(&c);
    long warned = c.log.ckpt_fail;
    fl_store_close(c.st); /* its checkpoint fails too: the WAL stays */
    c.st = NULL;
    assert_int_equal(ck_file_size(c.t.path), c.db0);
    assert_int_equal(ck_file_size(c.wal), c.wal0);
    int opened_full = 0, small_fit = 0;
    for (int round = 0; round < 2; round++) { /* reopen full, close full, and again */
        int small_ok = 0;
        fl_store *st = ck_reopen_full(c.t.path, c.wal, &c.set, &c.log, c.pop, 0, &small_ok,
                                      "reopened on a full disk after a close");
        if (st)
            opened_full++;
        small_fit += small_ok;
        fl_store_close(st);
        assert_int_equal(ck_file_size(c.wal), c.wal0);
    }
    fault_vfs_reset();
    fl_store *st = NULL;
    if (ck_open(&st, c.t.path, &c.log) != FL_OK)
        fail_msg("reopening with space back: %s", fl_store_errmsg(st));
    ck_space_back(st, &c.set, &c.log, c.pop, c.t.path, c.wal, 0);
    ck_verify_final(c.t.path, &c.set, NULL, "closed on a full disk, reopened with space back");
    /* The close-time checkpoint is SQLite's own (not the wal hook): its failure is not
     * logged, and fl_store_close returns nothing; the WAL is simply kept. */
    assert_int_equal(c.log.ckpt_fail, warned + small_fit);
    print_message("restart after a close on a full disk: %d commits acknowledged (%d after "
                  "the checkpoint failed, %ld checkpoint warnings); the close's checkpoint "
                  "failed silently, WAL kept; reopened on the full disk %d/2 times: reads ok, "
                  "8 MiB commits refused, 64 KiB commits acknowledged %d/2; space back: all "
                  "%d acknowledged models byte-exact, %d refused absent\n",
                  c.acked_b, c.acked_after_fail, c.log.ckpt_fail, opened_full, small_fit,
                  c.set.nacked, c.set.nrefused);
    store_tdir_rm(&c.t);
}

/* ---- the killed writer ---- */

enum ck_rec_type { CK_INTENT = 1, CK_ACK, CK_REFUSED, CK_FULL, CK_BAD };

/* One pipe record (< PIPE_BUF: written atomically, so a kill never splits one). */
struct ck_rec {
    uint32_t type, tag, index, pad;
    int64_t version;
    int64_t ckpt_fail; /* checkpoint warnings so far */
};

static int ck_pipe = -1;
static struct ck_log ck_child_log;

static void ck_send(uint32_t type, uint32_t tag, uint32_t index, int64_t version) {
    struct ck_rec r;
    memset(&r, 0, sizeof(r));
    r.type = type;
    r.tag = tag;
    r.index = index;
    r.version = version;
    r.ckpt_fail = ck_child_log.ckpt_fail;
    if (write(ck_pipe, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(30);
}

/* The writer: phase A, then the full disk (budget = usage): commits until refused, then
 * 8 MiB commits (refused) and reads until it is killed. Exits only on a failure. */
static void ck_writer(const char *path, int64_t pop) {
    if (fault_vfs_register() != SQLITE_OK)
        _exit(20);
    fault_vfs_reset();
    fl_store *st = NULL;
    if (ck_open(&st, path, &ck_child_log) != FL_OK)
        _exit(21);
    int64_t v[CK_FILL_MODELS];
    if (fl_store_begin(st) != FL_OK)
        _exit(22);
    for (uint32_t i = 0; i < CK_FILL_MODELS; i++)
        if (ck_put(st, pop, TAG_FILL, i, &v[i], NULL) != FL_OK)
            _exit(22);
    if (fl_store_commit(st) != FL_OK)
        _exit(22);
    for (uint32_t i = 0; i < CK_FILL_MODELS; i++)
        ck_send(CK_ACK, TAG_FILL, i, v[i]);
    fault_vfs_set_budget(fault_vfs_usage());
    int64_t last = v[0];
    uint32_t i;
    for (i = 0; i < CK_MAX_B; i++) {
        int64_t ver = 0;
        ck_send(CK_INTENT, TAG_FULL, i, 0);
        if (ck_put(st, pop, TAG_FULL, i, &ver, NULL) != FL_OK)
            break;
        ck_send(CK_ACK, TAG_FULL, i, ver);
        last = ver;
    }
    if (i == CK_MAX_B || !strstr(fl_store_errmsg(st), "full"))
        _exit(23);
    ck_send(CK_REFUSED, TAG_FULL, i, 0);
    ck_send(CK_FULL, 0, 0, 0);
    double t0 = rel_now_s();
    for (uint32_t j = 0; rel_now_s() - t0 < 60; j++) {
        int64_t ver = 0;
        ck_send(CK_INTENT, TAG_BIG, 100 + j, 0);
        if (ck_put(st, pop, TAG_BIG, 100 + j, &ver, NULL) == FL_OK)
            ck_send(CK_ACK, TAG_BIG, 100 + j, ver);
        else
            ck_send(CK_REFUSED, TAG_BIG, 100 + j, 0);
        if (!ck_model_ok(st, last, TAG_FULL, i - 1))
            ck_send(CK_BAD, TAG_FULL, i - 1, last);
    }
    _exit(24);
}

/* Kills the writer at a point (mid = after 3 commits acknowledged past the first failed
 * checkpoint; else once the commits are refused), after a random delay up to max_us;
 * then reopens on the full disk (*opened: the open succeeded; *small_ok: a 64 KiB commit
 * fitted) and with space back. Returns 1 if the commit in flight at the kill was there. */
static int ck_kill_once(int mid, uint64_t *seed, long max_us, int *acked_b, int *ckpt_warn,
                        int *opened, int *small_ok) {
    struct ck_run c;
    memset(&c, 0, sizeof(c));
    store_tdir_make(&c.t, "kill.db");
    snprintf(c.wal, sizeof(c.wal), "%s-wal", c.t.path);
    fl_store *st = store_open_ok(c.t.path, NULL);
    STORE_OK(st, fl_store_population_create(st, &c.pop, "kill", NULL, 10.0, 1e-6, NULL));
    fl_store_close(st);
    fault_vfs_reset();
    struct ck_set *set = calloc(1, sizeof(*set));
    assert_non_null(set);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        ck_pipe = fds[1];
        ck_writer(c.t.path, c.pop);
        _exit(25);
    }
    close(fds[1]);
    struct ck_item inflight = {0, 0, 0};
    int has_inflight = 0, killed = 0, past_fail = 0;
    *acked_b = 0;
    *ckpt_warn = 0;
    struct ck_rec r;
    for (;;) {
        ssize_t got = read(fds[0], &r, sizeof(r));
        if (got < 0 && errno == EINTR)
            continue;
        if (got == 0)
            break;
        assert_int_equal(got, sizeof(r));
        switch (r.type) {
        case CK_INTENT:
            inflight.tag = r.tag;
            inflight.index = r.index;
            has_inflight = 1;
            break;
        case CK_ACK:
            has_inflight = 0;
            ck_add(set->acked, &set->nacked, r.version, r.tag, r.index);
            if (r.tag == TAG_FULL) {
                (*acked_b)++;
                if (r.ckpt_fail > 0)
                    past_fail++;
            }
            break;
        case CK_REFUSED:
            has_inflight = 0;
            ck_add(set->refused, &set->nrefused, 0, r.tag, r.index);
            break;
        case CK_BAD:
            kill(pid, SIGKILL);
            fail_msg("the writer lost an acknowledged model on its own full-disk handle");
            break;
        default:
            break;
        }
        *ckpt_warn = (int)r.ckpt_fail;
        if (!killed && ((mid && past_fail >= 3) || (!mid && r.type == CK_FULL))) {
            usleep((useconds_t)(rel_rng(seed) % (uint64_t)max_us));
            kill(pid, SIGKILL);
            killed = 1;
        }
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
        fail_msg("the writer ended on its own (status 0x%x) before the kill", status);
    if (!mid && *ckpt_warn == 0)
        fail_msg("the writer saw no checkpoint failure before its commits were refused");

    const char *when = mid ? "killed while checkpoints failed, reopened on a full disk"
                           : "killed after commits were refused, reopened on a full disk";
    struct ck_log log;
    memset(&log, 0, sizeof(log));
    st = ck_reopen_full(c.t.path, c.wal, set, &log, c.pop, mid, small_ok, when);
    *opened = st != NULL;
    if (!st) {
        fault_vfs_reset();
        if (ck_open(&st, c.t.path, &log) != FL_OK)
            fail_msg("reopening with space back: %s", fl_store_errmsg(st));
    }
    ck_space_back(st, set, &log, c.pop, c.t.path, c.wal, 0);
    int present = ck_verify_final(c.t.path, set, has_inflight ? &inflight : NULL, when);
    free(set);
    store_tdir_rm(&c.t);
    return present;
}

/* A writer SIGKILLed on a full disk, twice at each of two points. */
static void test_restart_full_after_kill(void **state) {
    (void)state;
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    uint64_t seed = rel_seed();
    print_message("restart after a kill on a full disk: seed %" PRIu64 "\n", seed);
    for (int k = 0; k < 4; k++) {
        int mid = k < 2;
        int acked_b = 0, warn = 0, opened = 0, small_ok = 0;
        double t0 = rel_now_s();
        int present =
            ck_kill_once(mid, &seed, mid ? 3000 : 20000, &acked_b, &warn, &opened, &small_ok);
        print_message("  kill %d (%s): %d full-disk commits acknowledged, %d checkpoint "
                      "warnings before the kill; reopened on the full disk: %s, 8 MiB commit "
                      "refused, 64 KiB commit %s; space back: all there, the commit in flight "
                      "%s; %.2f s\n",
                      k + 1, mid ? "while checkpoints failed" : "after the refusals began", acked_b,
                      warn, opened ? "reads ok" : "open refused cleanly",
                      small_ok ? "acknowledged" : "refused", present ? "present" : "absent",
                      rel_now_s() - t0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_disk_full),
        cmocka_unit_test(test_restart_full_after_close),
        cmocka_unit_test(test_restart_full_after_kill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
