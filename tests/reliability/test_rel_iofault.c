/* I/O fault walks. For each top-level storage operation (open of a fresh store, model
 * put, round create/start/complete, ledger append, a grouped round commit, tag set,
 * client enroll, and a put big enough to trigger a WAL checkpoint) and for each fault
 * kind (the N-th xWrite fails with SQLITE_IOERR_WRITE; the N-th xSync fails with
 * SQLITE_IOERR_FSYNC), N runs from 1 until the operation makes fewer than N such calls.
 * Each step starts from a copy of the same small store, opened through the fault VFS
 * with a counting allocator, and checks:
 *
 *   - the operation returns FL_OK, or an error code from {FL_ERR_IO, FL_ERR_ABORTED}
 *     with a message; no crash, nothing leaked (store allocator and, under ASan, LSan);
 *   - after a failed fsync the handle acknowledges nothing more: a write call and
 *     fl_store_begin return FL_ERR_IO naming the fsync failure, reads still work, and
 *     after close + reopen writes work again;
 *   - after a failed write the handle keeps working (a follow-up write succeeds);
 *   - after reopening through the normal VFS, fl_store_check passes and the operation is
 *     fully there or not there at all (all of a group, or none); if it returned FL_OK it
 *     is there; the rest of the store is unchanged.
 *
 * The handle under test skips the real fsync (fault_vfs_set_lying_sync): no power is lost
 * here, the files are read back by the same machine, and fsyncs on a shared CI disk were
 * most of the run time. Injected fsync failures still fire. The reopen checks use the
 * normal VFS.
 *
 * Allocation failures (the store allocator and SQLite's) are walked by
 * tests/storage/test_store_oom.c and not repeated here. */
#include <sys/stat.h>

#include "rel_util.h"

enum op {
    OP_OPEN,
    OP_PUT,
    OP_ROUND_CREATE,
    OP_ROUND_START,
    OP_ROUND_COMPLETE,
    OP_LEDGER,
    OP_GROUP,
    OP_TAG,
    OP_ENROLL,
    OP_PUT_CHECKPOINT,
    OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "open",          "model put",    "round create", "round start",   "round complete",
    "ledger append", "group commit", "tag set",      "client enroll", "put + checkpoint"};

/* The checkpoint op puts a 96 KiB model (about 25 WAL pages) on a store whose WAL already
 * holds at least CKPT_FILL frames, so its commit crosses the store's 1000-frame checkpoint
 * threshold and the checkpoint runs inside the call. */
#define BIG_MODEL (96 * 1024)
#define CKPT_FILL 985

/* Ids in the template store. */
struct tmpl {
    struct store_tdir t; /* directory: template.db, work.db */
    char work[400];      /* the copy each step runs on */
    char ckpt[400];      /* template.db with a WAL just under the checkpoint threshold */
    int64_t pop, v1, r_open, r_running;
    int64_t ledger_count, model_count, round_count;
};

struct walk_figures {
    long steps, faults, errors, ok_after_fault, durable_after_error, poisoned_checks;
};

static uint8_t *big_model(void) {
    static uint8_t *buf;
    if (!buf) {
        buf = malloc(BIG_MODEL);
        assert_non_null(buf);
        uint64_t s = 7;
        for (size_t i = 0; i < BIG_MODEL; i++)
            buf[i] = (uint8_t)rel_rng(&s);
    }
    return buf;
}

/* Schema signature seen for each user_version (every migration commits with its version
 * bump, so one version must always come with the same schema). */
static char *schema_seen[FL_STORE_SCHEMA_VERSION + 1];

static char *schema_signature(sqlite3 *raw) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw,
                                        "SELECT ifnull(group_concat(type || ':' || name, ','), '') "
                                        "FROM (SELECT type, name FROM sqlite_schema ORDER BY "
                                        "type, name)",
                                        -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    char *sig = strdup((const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    assert_non_null(sig);
    return sig;
}

static void make_template(struct tmpl *tp) {
    store_tdir_make(&tp->t, "template.db");
    snprintf(tp->work, sizeof(tp->work), "%s/work.db", tp->t.dir);
    fl_store *st = store_open_ok(tp->t.path, NULL);
    uint8_t buf[REL_MODEL_MAX];
    size_t n = rel_model_bytes(buf, 1, 1);
    fl_store_model_ref ref;
    char j[96];
    STORE_OK(st, fl_store_population_create(st, &tp->pop, "p", NULL, 10.0, 1e-6, NULL));
    STORE_OK(st, fl_store_model_put(st, &ref, tp->pop, 0, buf, n, NULL));
    tp->v1 = ref.version;
    STORE_OK(st, fl_store_round_create(st, &tp->r_open, tp->pop, 0, tp->v1, NULL));
    STORE_OK(st, fl_store_round_create(st, &tp->r_running, tp->pop, 0, tp->v1, NULL));
    STORE_OK(st, fl_store_round_start(st, tp->r_running));
    fl_store_ledger_entry e = rel_ledger_entry(tp->pop, 0, 1, 1, j, sizeof(j));
    STORE_OK(st, fl_store_ledger_append(st, NULL, &e));
    fl_store_close(st); /* checkpoints and removes the WAL: one file to copy */
    /* The checkpoint template: the same store, its WAL filled by tag updates to just under
     * the threshold, copied while open (every frame committed, the WAL not yet folded). */
    char src[420], wal[440];
    snprintf(src, sizeof(src), "%s/ckpt-src.db", tp->t.dir);
    snprintf(wal, sizeof(wal), "%s-wal", src);
    snprintf(tp->ckpt, sizeof(tp->ckpt), "%s/template-ckpt.db", tp->t.dir);
    assert_int_equal(rel_copy_file(tp->t.path, src), 0);
    fault_vfs_reset();
    fault_vfs_set_lying_sync(1); /* 300-odd commits: skip their real fsyncs */
    assert_int_equal(rel_open_fault(&st, src, NULL), FL_OK);
    struct stat sb;
    for (int i = 0;; i++) {
        STORE_OK(st, fl_store_tag_set(st, (i & 1) ? "fill-a" : "fill-b", tp->v1));
        assert_int_equal(stat(wal, &sb), 0);
        if (sb.st_size >= 32 + (off_t)CKPT_FILL * (4096 + 24))
            break;
    }
    assert_true(sb.st_size < 32 + (off_t)1000 * (4096 + 24));
    assert_int_equal(rel_copy_db(src, tp->ckpt), 0);
    fl_store_close(st);
    fault_vfs_reset();
    rel_remove_db(src);
    sqlite3 *raw = store_raw_open(tp->t.path);
    if (!schema_seen[FL_STORE_SCHEMA_VERSION])
        schema_seen[FL_STORE_SCHEMA_VERSION] = schema_signature(raw);
    tp->ledger_count = store_raw_int(raw, "SELECT count(*) FROM privacy_ledger");
    tp->model_count = store_raw_int(raw, "SELECT count(*) FROM models");
    tp->round_count = store_raw_int(raw, "SELECT count(*) FROM rounds");
    sqlite3_close(raw);
}

/* Runs op on st (opened through the fault VFS). Grouped calls stop at the first error. */
static fl_status run_op(enum op op, fl_store *st, const struct tmpl *tp) {
    uint8_t buf[REL_MODEL_MAX];
    char j1[96], j2[96], j3[96];
    fl_store_model_ref ref;
    fl_store_ledger_entry e;
    int64_t rid = 0;
    uint8_t tok[32];
    char cid[64];
    fl_status r;
    switch (op) {
    case OP_PUT:
        return fl_store_model_put(st, &ref, tp->pop, tp->v1, buf, rel_model_bytes(buf, 2, 2),
                                  rel_json(j1, sizeof(j1), "put", 2, 2));
    case OP_PUT_CHECKPOINT:
        return fl_store_model_put(st, &ref, tp->pop, tp->v1, big_model(), BIG_MODEL,
                                  rel_json(j1, sizeof(j1), "big", 2, 2));
    case OP_ROUND_CREATE:
        return fl_store_round_create(st, NULL, tp->pop, 0, tp->v1,
                                     rel_json(j2, sizeof(j2), "round", 2, 2));
    case OP_ROUND_START:
        return fl_store_round_start(st, tp->r_open);
    case OP_ROUND_COMPLETE:
        return fl_store_round_complete(st, tp->r_running, tp->v1);
    case OP_LEDGER:
        e = rel_ledger_entry(tp->pop, 0, 2, 2, j3, sizeof(j3));
        return fl_store_ledger_append(st, NULL, &e);
    case OP_TAG:
        return fl_store_tag_set(st, "production", tp->v1);
    case OP_ENROLL:
        rel_client(cid, sizeof(cid), tok, 2, 2);
        return fl_store_client_enroll(st, cid, tok, sizeof(tok), "eu", tp->pop);
    case OP_GROUP:
        r = fl_store_begin(st);
        if (r != FL_OK)
            return r;
        r = fl_store_model_put(st, &ref, tp->pop, tp->v1, buf, rel_model_bytes(buf, 3, 3),
                               rel_json(j1, sizeof(j1), "group", 3, 3));
        if (r == FL_OK)
            r = fl_store_round_create(st, &rid, tp->pop, 0, tp->v1,
                                      rel_json(j2, sizeof(j2), "group", 3, 3));
        if (r == FL_OK)
            r = fl_store_round_start(st, rid);
        if (r == FL_OK)
            r = fl_store_round_complete(st, rid, ref.version);
        if (r == FL_OK) {
            e = rel_ledger_entry(tp->pop, rid, 3, 3, j3, sizeof(j3));
            r = fl_store_ledger_append(st, NULL, &e);
        }
        if (r == FL_OK)
            return fl_store_commit(st);
        if (fl_store_in_transaction(st))
            (void)fl_store_rollback(st);
        return r;
    case OP_OPEN:
    case OP_COUNT:
        break;
    }
    fail_msg("run_op: bad op %d", op);
    return FL_ERR_INTERNAL;
}

/* After reopening: is op there (1) or not (0)? Fails the test on a partial state. */
static int op_present(enum op op, fl_store *st, sqlite3 *raw, const struct tmpl *tp) {
    uint8_t buf[REL_MODEL_MAX];
    char j[96];
    fl_store_round *r = NULL;
    int there = 0;
    int64_t n;
    switch (op) {
    case OP_PUT:
    case OP_PUT_CHECKPOINT: {
        int big = op == OP_PUT_CHECKPOINT;
        n = store_raw_int(raw, "SELECT count(*) FROM models");
        if (n == tp->model_count)
            return 0;
        assert_int_equal(n, tp->model_count + 1);
        fl_store_model *m = NULL;
        STORE_OK(st, fl_store_model_get(st, &m, tp->v1 + 1));
        size_t len = big ? BIG_MODEL : rel_model_bytes(buf, 2, 2);
        assert_int_equal(m->size, len);
        assert_memory_equal(m->bytes, big ? big_model() : buf, len);
        assert_string_equal(m->metadata_json, rel_json(j, sizeof(j), big ? "big" : "put", 2, 2));
        assert_int_equal(m->parent, tp->v1);
        fl_store_free(st, m);
        return 1;
    }
    case OP_ROUND_CREATE:
        n = store_raw_int(raw, "SELECT count(*) FROM rounds");
        if (n == tp->round_count)
            return 0;
        assert_int_equal(n, tp->round_count + 1);
        STORE_OK(st, fl_store_round_find(st, &r, tp->pop, 0));
        assert_int_equal(r->state, FL_STORE_ROUND_OPEN);
        assert_string_equal(r->config_json, rel_json(j, sizeof(j), "round", 2, 2));
        fl_store_free(st, r);
        return 1;
    case OP_ROUND_START:
        STORE_OK(st, fl_store_round_get(st, &r, tp->r_open));
        there = r->state == FL_STORE_ROUND_RUNNING;
        assert_true(there ? r->started_at > 0
                          : r->state == FL_STORE_ROUND_OPEN && r->started_at == 0);
        fl_store_free(st, r);
        return there;
    case OP_ROUND_COMPLETE:
        STORE_OK(st, fl_store_round_get(st, &r, tp->r_running));
        there = r->state == FL_STORE_ROUND_COMPLETED;
        if (there)
            assert_true(r->result_version == tp->v1 && r->ended_at > 0);
        else
            assert_true(r->state == FL_STORE_ROUND_RUNNING && r->result_version == 0 &&
                        r->ended_at == 0);
        fl_store_free(st, r);
        return there;
    case OP_LEDGER: {
        fl_store_ledger_entry *l = NULL;
        size_t cnt = 0;
        STORE_OK(st, fl_store_ledger_list(st, &l, &cnt, tp->pop));
        if ((int64_t)cnt == tp->ledger_count + 1) {
            fl_store_ledger_entry want = rel_ledger_entry(tp->pop, 0, 2, 2, j, sizeof(j));
            const fl_store_ledger_entry *g = &l[cnt - 1];
            assert_string_equal(g->params_json, want.params_json);
            assert_string_equal(g->mechanism, want.mechanism);
            assert_true(g->sampling_rate == want.sampling_rate && g->clip_norm == want.clip_norm &&
                        g->noise_multiplier == want.noise_multiplier && g->steps == want.steps &&
                        g->participants == want.participants);
            there = 1;
        } else {
            assert_int_equal(cnt, tp->ledger_count);
        }
        fl_store_free(st, l);
        return there;
    }
    case OP_TAG: {
        int64_t v = 0;
        fl_status s = fl_store_tag_resolve(st, &v, "production");
        assert_true(s == FL_OK || s == FL_ERR_NOT_FOUND);
        if (s == FL_OK)
            assert_int_equal(v, tp->v1);
        return s == FL_OK;
    }
    case OP_ENROLL: {
        char cid[64];
        uint8_t tok[32];
        rel_client(cid, sizeof(cid), tok, 2, 2);
        fl_store_client *c = NULL;
        fl_status s = fl_store_client_get(st, &c, cid);
        fl_store_free(st, c);
        assert_true(s == FL_OK || s == FL_ERR_NOT_FOUND);
        if (s == FL_OK)
            STORE_OK(st, fl_store_client_authenticate(st, cid, tok, sizeof(tok)));
        return s == FL_OK;
    }
    case OP_GROUP: {
        rel_json(j, sizeof(j), "group", 3, 3);
        int64_t models = store_raw_int(raw, "SELECT count(*) FROM models");
        int64_t rounds = store_raw_int(raw, "SELECT count(*) FROM rounds");
        int64_t ledger = store_raw_int(raw, "SELECT count(*) FROM privacy_ledger");
        int none =
            models == tp->model_count && rounds == tp->round_count && ledger == tp->ledger_count;
        int all = models == tp->model_count + 1 && rounds == tp->round_count + 1 &&
                  ledger == tp->ledger_count + 1;
        if (!none && !all)
            fail_msg("half-applied group: models %lld rounds %lld ledger %lld", (long long)models,
                     (long long)rounds, (long long)ledger);
        if (none)
            return 0;
        int64_t ok = store_raw_int(
            raw, "SELECT count(*) FROM rounds r JOIN models m ON m.version = r.result_version "
                 "JOIN privacy_ledger l ON l.round_id = r.id WHERE r.state = 2 AND "
                 "r.config_json = m.metadata_json AND l.params_json = r.config_json AND "
                 "json_extract(r.config_json, '$.k') = 'group'");
        assert_int_equal(ok, 1);
        fl_store_model *m = NULL;
        STORE_OK(st, fl_store_model_get(st, &m, tp->v1 + 1));
        size_t len = rel_model_bytes(buf, 3, 3);
        assert_int_equal(m->size, len);
        assert_memory_equal(m->bytes, buf, len);
        fl_store_free(st, m);
        return 1;
    }
    case OP_OPEN:
    case OP_COUNT:
        break;
    }
    fail_msg("op_present: bad op %d", op);
    return 0;
}

/* The template's own rows are untouched (other than what op changes). */
static void check_rest(enum op op, fl_store *st, const struct tmpl *tp) {
    fl_store_population *p = NULL;
    STORE_OK(st, fl_store_population_get(st, &p, tp->pop));
    assert_string_equal(p->name, "p");
    fl_store_free(st, p);
    fl_store_model *m = NULL;
    uint8_t buf[REL_MODEL_MAX];
    STORE_OK(st, fl_store_model_get(st, &m, tp->v1));
    size_t n = rel_model_bytes(buf, 1, 1);
    assert_int_equal(m->size, n);
    assert_memory_equal(m->bytes, buf, n);
    fl_store_free(st, m);
    fl_store_round *r = NULL;
    if (op != OP_ROUND_START) {
        STORE_OK(st, fl_store_round_get(st, &r, tp->r_open));
        assert_int_equal(r->state, FL_STORE_ROUND_OPEN);
        fl_store_free(st, r);
    }
    if (op != OP_ROUND_COMPLETE) {
        STORE_OK(st, fl_store_round_get(st, &r, tp->r_running));
        assert_int_equal(r->state, FL_STORE_ROUND_RUNNING);
        fl_store_free(st, r);
    }
}

/* After a failed fsync: no more writes on this handle, reads fine. */
static void check_poisoned(fl_store *st, const struct tmpl *tp) {
    fl_status r = fl_store_tag_set(st, "after-fsync-error", tp->v1);
    if (r != FL_ERR_IO)
        fail_msg("a write after a failed fsync returned %s (%s), not FL_ERR_IO", fl_status_name(r),
                 fl_store_errmsg(st));
    assert_non_null(strstr(fl_store_errmsg(st), "fsync"));
    r = fl_store_begin(st);
    if (r != FL_ERR_IO)
        fail_msg("fl_store_begin after a failed fsync returned %s (%s), not FL_ERR_IO",
                 fl_status_name(r), fl_store_errmsg(st));
    assert_int_equal(fl_store_in_transaction(st), 0);
    fl_store_population *p = NULL;
    STORE_OK(st, fl_store_population_get(st, &p, tp->pop));
    fl_store_free(st, p);
}

/* After a fault while creating a store: a schema version with exactly that version's
 * schema (nothing half-migrated); FL_OK only with the current version. */
static void check_open_atomic(const char *path, fl_status r, int kind, long n) {
    sqlite3 *raw = store_raw_open(path);
    int64_t v = store_raw_int(raw, "PRAGMA user_version");
    char *sig = schema_signature(raw);
    sqlite3_close(raw);
    if (v < 0 || v > FL_STORE_SCHEMA_VERSION)
        fail_msg("open with %s %ld failing: user_version %lld", kind ? "fsync" : "write", n,
                 (long long)v);
    if (v == 0 && sig[0] != '\0')
        fail_msg("open with %s %ld failing: version 0 with a schema: %s", kind ? "fsync" : "write",
                 n, sig);
    if (!schema_seen[v]) {
        schema_seen[v] = sig;
    } else {
        if (strcmp(schema_seen[v], sig) != 0)
            fail_msg("open with %s %ld failing left a half-migrated store: version %lld has "
                     "schema\n  %s\nbut earlier\n  %s",
                     kind ? "fsync" : "write", n, (long long)v, sig, schema_seen[v]);
        free(sig);
    }
    if (r == FL_OK && v != FL_STORE_SCHEMA_VERSION)
        fail_msg("open returned FL_OK but the schema is at version %lld", (long long)v);
}

/* One step: op with the n-th write (kind 0) or sync (kind 1) failing. Returns 1 while the
 * fault fired (so the walk goes on to n + 1). */
static int step(enum op op, int kind, long n, const struct tmpl *tp, struct walk_figures *f) {
    struct fl_test_counting cnt;
    memset(&cnt, 0, sizeof(cnt));
    fl_allocator a = fl_test_counting_allocator(&cnt);
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.allocator = &a;
    fl_store *st = NULL;
    fl_status r;
    rel_remove_db(tp->work);
    if (op == OP_OPEN) {
        fault_vfs_reset();
        fault_vfs_set_lying_sync(1);
        if (kind == 0)
            fault_vfs_fail_write_at(n);
        else
            fault_vfs_fail_sync_at(n);
        r = rel_open_fault(&st, tp->work, &cfg);
    } else {
        if (op == OP_PUT_CHECKPOINT)
            assert_int_equal(rel_copy_db(tp->ckpt, tp->work), 0);
        else
            assert_int_equal(rel_copy_file(tp->t.path, tp->work), 0);
        r = rel_open_fault(&st, tp->work, &cfg);
        if (r != FL_OK)
            fail_msg("open: %s", fl_store_errmsg(st));
        fault_vfs_reset();
        fault_vfs_set_lying_sync(1);
        if (kind == 0)
            fault_vfs_fail_write_at(n);
        else
            fault_vfs_fail_sync_at(n);
        r = run_op(op, st, tp);
    }
    int fired = fault_vfs_fired() > 0;
    if (getenv("REL_DEBUG"))
        print_message("DEBUG %s kind %d n %ld: fired %d rc %s: %s (writes %ld syncs %ld)\n",
                      op_names[op], kind, n, fired, fl_status_name(r), fl_store_errmsg(st),
                      fault_vfs_write_count(), fault_vfs_sync_count());
    fault_vfs_reset();
    fault_vfs_set_lying_sync(1);
    f->steps++;
    f->faults += fired;
    if (!fired && r != FL_OK)
        fail_msg("%s failed without a fault: %s: %s", op_names[op], fl_status_name(r),
                 fl_store_errmsg(st));
    if (r != FL_OK) {
        f->errors++;
        if (r != FL_ERR_IO && r != FL_ERR_ABORTED)
            fail_msg("%s with %s %ld failing returned %s (%s)", op_names[op],
                     kind ? "fsync" : "write", n, fl_status_name(r), fl_store_errmsg(st));
        if (strlen(fl_store_errmsg(st)) < 8)
            fail_msg("%s: error without a useful message: '%s'", op_names[op], fl_store_errmsg(st));
    } else if (fired) {
        f->ok_after_fault++;
    }
    int poisoned = 0;
    if (op != OP_OPEN && fired) {
        if (kind == 1) {
            /* Also when the call succeeded: a failed fsync in the checkpoint that follows
             * a durable commit still stops further writes. */
            check_poisoned(st, tp);
            poisoned = 1;
            f->poisoned_checks++;
        } else if (kind == 0) {
            /* A failed write is not sticky: the same handle writes again. */
            fl_status r2 = fl_store_tag_set(st, "after-write-error", tp->v1);
            if (r2 != FL_OK)
                fail_msg("%s: a write after a failed write returned %s (%s)", op_names[op],
                         fl_status_name(r2), fl_store_errmsg(st));
        }
    }
    fl_store_close(st);
    fault_vfs_reset();
    if (cnt.live != 0)
        fail_msg("%s with %s %ld failing: %ld store allocations leaked", op_names[op],
                 kind ? "fsync" : "write", n, cnt.live);

    /* Reopen through the normal VFS. */
    if (op == OP_OPEN)
        check_open_atomic(tp->work, r, kind, n);
    st = store_open_ok(tp->work, NULL);
    STORE_OK(st, fl_store_check(st));
    if (op != OP_OPEN) {
        sqlite3 *raw = store_raw_open(tp->work);
        int there = op_present(op, st, raw, tp);
        sqlite3_close(raw);
        if (r == FL_OK && !there)
            fail_msg("%s returned FL_OK with %s %ld failing, but is not in the store", op_names[op],
                     kind ? "fsync" : "write", n);
        if (r != FL_OK && there)
            f->durable_after_error++;
        check_rest(op, st, tp);
        if (poisoned) /* writes work again after reopening */
            STORE_OK(st, fl_store_tag_set(st, "after-reopen", tp->v1));
    }
    fl_store_close(st);
    return fired;
}

static void walk(int kind) {
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    struct tmpl tp;
    make_template(&tp);
    struct walk_figures total;
    memset(&total, 0, sizeof(total));
    for (int op = 0; op < OP_COUNT; op++) {
        struct walk_figures f;
        memset(&f, 0, sizeof(f));
        long n = 1;
        while (step((enum op)op, kind, n, &tp, &f))
            n++;
        print_message("%s faults, %-16s: %ld steps (calls 1..%ld fail in turn), %ld errors, %ld "
                      "FL_OK despite the fault, %ld durable despite an error, %ld poison checks\n",
                      kind ? "fsync" : "write", op_names[op], f.steps, n - 1, f.errors,
                      f.ok_after_fault, f.durable_after_error, f.poisoned_checks);
        assert_true(f.faults > 0);
        if (op == OP_PUT_CHECKPOINT && kind == 1)
            assert_true(n - 1 >= 3); /* commit, then the checkpoint's WAL and database syncs */
        total.steps += f.steps;
        total.faults += f.faults;
        total.errors += f.errors;
        total.ok_after_fault += f.ok_after_fault;
        total.durable_after_error += f.durable_after_error;
        total.poisoned_checks += f.poisoned_checks;
    }
    print_message("%s faults: %ld steps, %ld faults, %ld clean errors, 0 crashes, 0 leaks, 0 "
                  "partial states, %ld FL_OK despite the fault, %ld durable despite an error\n",
                  kind ? "fsync" : "write", total.steps, total.faults, total.errors,
                  total.ok_after_fault, total.durable_after_error);
    rel_remove_db(tp.work);
    rel_remove_db(tp.ckpt);
    store_tdir_rm(&tp.t);
}

static void test_write_faults(void **state) {
    (void)state;
    walk(0);
}

static void test_fsync_faults(void **state) {
    (void)state;
    walk(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_faults),
        cmocka_unit_test(test_fsync_faults),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(big_model());
    for (int i = 0; i <= FL_STORE_SCHEMA_VERSION; i++)
        free(schema_seen[i]);
    return rc;
}
