/* Power loss: a writer process runs a mixed storage workload through the fault VFS and
 * the power is cut at a random I/O call (the k-th write, truncation, fsync or delete,
 * k drawn uniformly over a calibrated workload). At the cut the VFS puts every database,
 * WAL and journal file back to what a machine would find after losing power there
 * (fault_vfs.h: FAULT_VFS_LOSE_UNSYNCED or the harsher FAULT_VFS_TORN, alternating) and
 * the writer _exits. The next writer starts on those very files, as after a reboot (so
 * WAL recovery itself runs under later cuts); a copy of them is checked first, through
 * the normal unix VFS:
 *
 *   - fl_store_open succeeds and fl_store_check passes (integrity_check,
 *     foreign_key_check, every model re-hashed);
 *   - every acknowledged operation (the API call, or fl_store_commit for a group,
 *     returned FL_OK before the cut) is present and byte-exact: model bytes and hash,
 *     round fields, ledger entry fields, client token, tag;
 *   - the operation in flight at the cut is all there or not there at all (a group is
 *     model + round create/start/complete + ledger entry in one transaction);
 *   - no half-applied group anywhere (every group round COMPLETED with its model and
 *     exactly one ledger entry; every group model and ledger entry has its round).
 *
 * One writer in eight starts on a fresh file instead (creation and schema migrations
 * under the cut). Environment: FL_RELIABILITY_PROFILE=long (default cuts 400, 200 per
 * model; short: 24), FL_RELIABILITY_CUTS, FL_RELIABILITY_SEED. */
#include <signal.h>
#include <sys/wait.h>

#include <sodium.h>

#include "rel_util.h"

#define CUT_EXIT 42       /* writer exit status after a power cut */
#define STEPS_PER_LIFE 10 /* operations per writer */

enum rec_type { REC_OPENED = 1, REC_INTENT, REC_ACK, REC_DONE, REC_CUT };
enum op_kind {
    OP_GROUP = 1,
    OP_TAG,
    OP_ENROLL,
    OP_PUT,
    OP_LEDGER,
    OP_ROUND,
    OP_START,
    OP_POP,
    OP_REOPEN /* close (checkpoint, WAL removed) and open again */
};

/* One pipe record (< PIPE_BUF: written atomically). */
struct rec {
    uint8_t type, kind;
    uint32_t life, index;
    int64_t a, b, c; /* ids: group = version, round, ledger; others use a (and b) */
    int64_t d;       /* REC_CUT: directory fsyncs seen; others: I/O calls so far */
};

/* ---- the writer ---- */

static int pipe_fd = -1;
static int script_reopen; /* 1: steps 0 and 1 are a group and a reopen (targeted test) */

static void send_rec(uint8_t type, uint8_t kind, uint32_t life, uint32_t index, int64_t a,
                     int64_t b, int64_t c) {
    /* Zeroed first: the record goes to the pipe whole, its padding bytes too (memcheck:
     * "write(buf) points to uninitialised byte(s)"). */
    struct rec r;
    memset(&r, 0, sizeof(r));
    r.type = type;
    r.kind = kind;
    r.life = life;
    r.index = index;
    r.a = a;
    r.b = b;
    r.c = c;
    r.d = type == REC_CUT ? fault_vfs_dir_sync_count() : fault_vfs_io_count();
    if (write(pipe_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(30);
}

static void on_cut(void *user) {
    (void)user;
    long dropped = 0, kept = 0, entries = 0;
    fault_vfs_last_cut_stats(&dropped, &kept, &entries);
    send_rec(REC_CUT, 0, 0, 0, dropped, kept, entries);
    _exit(CUT_EXIT);
}

/* Runs one life on path. pop 0: fresh store, the writer creates its population first. */
static void writer(const char *path, int64_t pop, uint32_t life, uint64_t seed, long cut_k,
                   enum fault_vfs_model model, int lying) {
    static uint8_t buf[REL_MODEL_MAX];
    char j1[96], j2[96], j3[96];
    if (fault_vfs_register() != SQLITE_OK || fault_vfs_track() != SQLITE_OK)
        _exit(20);
    fault_vfs_set_lying_sync(lying);
    fault_vfs_cut_at(cut_k, model, seed ^ 0xC0FFEE, on_cut, NULL);
    fl_store *st = NULL;
    if (rel_open_fault(&st, path, NULL) != FL_OK)
        _exit(21);
    send_rec(REC_OPENED, 0, life, 0, 0, 0, 0);
    int64_t latest = 0;
    (void)fl_store_tag_resolve(st, &latest, "latest");
    uint32_t i = 0;
    if (pop == 0) {
        send_rec(REC_INTENT, OP_POP, life, i, 0, 0, 0);
        if (fl_store_population_create(st, &pop, "pl", NULL, 100.0, 1e-6, NULL) != FL_OK)
            _exit(22);
        send_rec(REC_ACK, OP_POP, life, i, pop, 0, 0);
        i++;
    }
    uint64_t rng = seed;
    for (; i < STEPS_PER_LIFE; i++) {
        uint32_t pick = (uint32_t)(rel_rng(&rng) % 17);
        int kind = pick < 7    ? OP_GROUP
                   : pick < 9  ? OP_TAG
                   : pick < 11 ? OP_ENROLL
                   : pick < 13 ? OP_PUT
                   : pick < 15 ? OP_LEDGER
                   : pick < 16 ? OP_ROUND
                               : OP_REOPEN;
        if (kind == OP_TAG && latest == 0)
            kind = OP_PUT;
        if (script_reopen && i < 2)
            kind = i == 0 ? OP_GROUP : OP_REOPEN;
        send_rec(REC_INTENT, (uint8_t)kind, life, i, latest, 0, 0);
        fl_store_model_ref ref;
        int64_t rid = 0, lid = 0;
        switch (kind) {
        case OP_GROUP: {
            size_t n = rel_model_bytes(buf, life, i);
            fl_store_ledger_entry e;
            if (fl_store_begin(st) != FL_OK)
                _exit(23);
            if (fl_store_model_put(st, &ref, pop, latest, buf, n,
                                   rel_json(j1, sizeof(j1), "group", life, i)) != FL_OK ||
                ref.existed)
                _exit(24);
            if (fl_store_round_create(st, &rid, pop, 0, latest,
                                      rel_json(j2, sizeof(j2), "group", life, i)) != FL_OK ||
                fl_store_round_start(st, rid) != FL_OK ||
                fl_store_round_complete(st, rid, ref.version) != FL_OK)
                _exit(25);
            e = rel_ledger_entry(pop, rid, life, i, j3, sizeof(j3));
            if (fl_store_ledger_append(st, &lid, &e) != FL_OK)
                _exit(26);
            if (fl_store_commit(st) != FL_OK)
                _exit(27);
            send_rec(REC_ACK, OP_GROUP, life, i, ref.version, rid, lid);
            latest = ref.version;
            break;
        }
        case OP_TAG:
            if (fl_store_tag_set(st, "latest", latest) != FL_OK)
                _exit(28);
            send_rec(REC_ACK, OP_TAG, life, i, latest, 0, 0);
            break;
        case OP_ENROLL: {
            char id[64];
            uint8_t tok[32];
            rel_client(id, sizeof(id), tok, life, i);
            if (fl_store_client_enroll(st, id, tok, sizeof(tok), "eu", pop) != FL_OK)
                _exit(29);
            send_rec(REC_ACK, OP_ENROLL, life, i, 0, 0, 0);
            break;
        }
        case OP_PUT: {
            size_t n = rel_model_bytes(buf, life, i);
            if (fl_store_model_put(st, &ref, pop, 0, buf, n,
                                   rel_json(j1, sizeof(j1), "put", life, i)) != FL_OK ||
                ref.existed)
                _exit(31);
            send_rec(REC_ACK, OP_PUT, life, i, ref.version, 0, 0);
            if (latest == 0)
                latest = ref.version;
            break;
        }
        case OP_LEDGER: {
            fl_store_ledger_entry e = rel_ledger_entry(pop, 0, life, i, j3, sizeof(j3));
            if (fl_store_ledger_append(st, &lid, &e) != FL_OK)
                _exit(32);
            send_rec(REC_ACK, OP_LEDGER, life, i, lid, 0, 0);
            break;
        }
        case OP_REOPEN:
            /* The checkpoint at close, the WAL's removal (not fsynced in its directory)
             * and its re-creation all run under the cut too. */
            fl_store_close(st);
            st = NULL;
            if (rel_open_fault(&st, path, NULL) != FL_OK)
                _exit(35);
            send_rec(REC_ACK, OP_REOPEN, life, i, 0, 0, 0);
            break;
        case OP_ROUND:
            if (fl_store_round_create(st, &rid, pop, 0, 0,
                                      rel_json(j2, sizeof(j2), "solo", life, i)) != FL_OK)
                _exit(33);
            send_rec(REC_ACK, OP_ROUND, life, i, rid, 0, 0);
            send_rec(REC_INTENT, OP_START, life, i, rid, 0, 0);
            if (fl_store_round_start(st, rid) != FL_OK)
                _exit(34);
            send_rec(REC_ACK, OP_START, life, i, rid, 0, 0);
            break;
        }
    }
    send_rec(REC_DONE, 0, life, 0, fault_vfs_io_count(), 0, 0);
    fl_store_close(st);
    _exit(0);
}

/* ---- the checker ---- */

struct figures {
    int quiet; /* do not print each loss (the self-test expects many) */
    long lives, fresh, main_acked_lives, writer_failures;
    long cuts[2], uncut, acked, lost, corrupt, inflight_present, inflight_absent;
    long dropped_writes, kept_sectors, dir_entries, dir_syncs;
};

/* What the checker knows about one store file (the main one or a fresh one). */
struct history {
    struct rec *acks; /* every acknowledged op on this store */
    size_t nacks, cap;
    int64_t pop; /* population id, 0 until known */
    int64_t tag; /* value "latest" must have (0 = unset) */
};

static void hist_add(struct history *h, const struct rec *r) {
    if (h->nacks == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 256;
        h->acks = realloc(h->acks, h->cap * sizeof(*h->acks));
        assert_non_null(h->acks);
    }
    h->acks[h->nacks++] = *r;
}

/* Reports a lost/mismatched acknowledged op (counted; the test fails after the cut). */
#define LOST(fig, msg, ...)                                                                        \
    do {                                                                                           \
        (fig)->lost++;                                                                             \
        if (!(fig)->quiet)                                                                         \
            print_error("LOST: " msg "\n", __VA_ARGS__);                                           \
    } while (0)

static int model_matches(fl_store *st, int64_t version, uint32_t life, uint32_t index,
                         const char *kind, int64_t pop, int64_t parent) {
    static uint8_t buf[REL_MODEL_MAX];
    char j[96];
    fl_store_model *m = NULL;
    if (fl_store_model_get(st, &m, version) != FL_OK)
        return 0;
    size_t n = rel_model_bytes(buf, life, index);
    int ok = m->size == n && memcmp(m->bytes, buf, n) == 0 && m->population_id == pop &&
             (parent < 0 || m->parent == parent) &&
             strcmp(m->metadata_json, rel_json(j, sizeof(j), kind, life, index)) == 0;
    uint8_t h[32];
    char hex[FL_STORE_SHA256_HEX_BYTES];
    static const char digits[] = "0123456789abcdef";
    crypto_hash_sha256(h, buf, n);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[h[i] >> 4];
        hex[2 * i + 1] = digits[h[i] & 15];
    }
    hex[64] = '\0';
    ok = ok && strcmp(hex, m->sha256_hex) == 0;
    fl_store_free(st, m);
    return ok;
}

static int ledger_matches(const fl_store_ledger_entry *got, int64_t pop, int64_t round_id,
                          uint32_t life, uint32_t index) {
    char j[96];
    fl_store_ledger_entry e = rel_ledger_entry(pop, round_id, life, index, j, sizeof(j));
    return got->population_id == e.population_id && got->round_id == e.round_id &&
           strcmp(got->mechanism, e.mechanism) == 0 && got->sampling_rate == e.sampling_rate &&
           got->noise_multiplier == e.noise_multiplier && got->clip_norm == e.clip_norm &&
           got->steps == e.steps && got->participants == e.participants &&
           strcmp(got->params_json, e.params_json) == 0;
}

static const fl_store_ledger_entry *ledger_find(const fl_store_ledger_entry *l, size_t n,
                                                int64_t id) {
    for (size_t i = 0; i < n; i++)
        if (l[i].id == id)
            return &l[i];
    return NULL;
}

static int round_matches(fl_store *st, int64_t rid, int64_t pop, fl_store_round_state state,
                         int64_t result, const char *kind, uint32_t life, uint32_t index) {
    char j[96];
    fl_store_round *r = NULL;
    if (fl_store_round_get(st, &r, rid) != FL_OK)
        return 0;
    int ok = r->population_id == pop && r->state == state && r->result_version == result &&
             strcmp(r->config_json, rel_json(j, sizeof(j), kind, life, index)) == 0 &&
             (state == FL_STORE_ROUND_OPEN || r->started_at > 0) &&
             (state != FL_STORE_ROUND_COMPLETED || r->ended_at > 0);
    fl_store_free(st, r);
    return ok;
}

/* One acknowledged op is there, byte-exact. */
static void check_ack(fl_store *st, const struct history *h, const struct rec *a,
                      const fl_store_ledger_entry *led, size_t nled, struct figures *fig) {
    switch (a->kind) {
    case OP_POP:
        break; /* checked through every other op's population */
    case OP_GROUP: {
        const fl_store_ledger_entry *e = ledger_find(led, nled, a->c);
        if (!model_matches(st, a->a, a->life, a->index, "group", h->pop, -1) ||
            !round_matches(st, a->b, h->pop, FL_STORE_ROUND_COMPLETED, a->a, "group", a->life,
                           a->index) ||
            !e || !ledger_matches(e, h->pop, a->b, a->life, a->index))
            LOST(fig, "group life %u step %u (version %lld, round %lld, ledger %lld)", a->life,
                 a->index, (long long)a->a, (long long)a->b, (long long)a->c);
        break;
    }
    case OP_PUT:
        if (!model_matches(st, a->a, a->life, a->index, "put", h->pop, 0))
            LOST(fig, "model put life %u step %u (version %lld)", a->life, a->index,
                 (long long)a->a);
        break;
    case OP_LEDGER: {
        const fl_store_ledger_entry *e = ledger_find(led, nled, a->a);
        if (!e || !ledger_matches(e, h->pop, 0, a->life, a->index))
            LOST(fig, "ledger append life %u step %u (id %lld)", a->life, a->index,
                 (long long)a->a);
        break;
    }
    case OP_ENROLL: {
        char id[64];
        uint8_t tok[32];
        rel_client(id, sizeof(id), tok, a->life, a->index);
        if (fl_store_client_authenticate(st, id, tok, sizeof(tok)) != FL_OK)
            LOST(fig, "client enroll life %u step %u (%s)", a->life, a->index, id);
        break;
    }
    case OP_ROUND:
    case OP_START: {
        fl_store_round *r = NULL;
        char j[96];
        int ok = fl_store_round_get(st, &r, a->a) == FL_OK;
        ok = ok && r->population_id == h->pop &&
             strcmp(r->config_json, rel_json(j, sizeof(j), "solo", a->life, a->index)) == 0 &&
             (a->kind == OP_ROUND || (r->state == FL_STORE_ROUND_RUNNING && r->started_at > 0));
        fl_store_free(st, r);
        if (!ok)
            LOST(fig, "round %s life %u step %u (round %lld)",
                 a->kind == OP_ROUND ? "create" : "start", a->life, a->index, (long long)a->a);
        break;
    }
    case OP_TAG:
    case OP_REOPEN:
        break; /* tag: checked against h->tag; reopen writes nothing of its own */
    default:
        fail_msg("unknown op kind %d", a->kind);
    }
}

/* Raw lookups for the op in flight: id of the row whose JSON column equals json, or 0. */
static int64_t raw_find(sqlite3 *raw, const char *sql, const char *json) {
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, sql, -1, &s, NULL), SQLITE_OK);
    sqlite3_bind_text(s, 1, json, -1, SQLITE_TRANSIENT);
    int64_t id = 0;
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        id = sqlite3_column_int64(s, 0);
        n++;
    }
    sqlite3_finalize(s);
    if (n > 1)
        fail_msg("%d rows for %s", n, json);
    return id;
}

/* The op in flight at the cut: all or nothing, exact if there. Returns 1 if it is there. */
static int check_inflight(fl_store *st, sqlite3 *raw, struct history *h, const struct rec *in,
                          const fl_store_ledger_entry *led, size_t nled, struct figures *fig) {
    char j[96];
    switch (in->kind) {
    case OP_GROUP: {
        rel_json(j, sizeof(j), "group", in->life, in->index);
        int64_t v = raw_find(raw, "SELECT version FROM models WHERE metadata_json = ?1", j);
        int64_t r = raw_find(raw, "SELECT id FROM rounds WHERE config_json = ?1", j);
        int64_t l = raw_find(raw, "SELECT id FROM privacy_ledger WHERE params_json = ?1", j);
        if (!v && !r && !l)
            return 0;
        const fl_store_ledger_entry *e = ledger_find(led, nled, l);
        if (!v || !r || !l || !model_matches(st, v, in->life, in->index, "group", h->pop, -1) ||
            !round_matches(st, r, h->pop, FL_STORE_ROUND_COMPLETED, v, "group", in->life,
                           in->index) ||
            !e || !ledger_matches(e, h->pop, r, in->life, in->index)) {
            fig->corrupt++;
            print_error("HALF-APPLIED group life %u step %u: model %lld round %lld ledger %lld\n",
                        in->life, in->index, (long long)v, (long long)r, (long long)l);
        }
        return 1;
    }
    case OP_PUT: {
        int64_t v = raw_find(raw, "SELECT version FROM models WHERE metadata_json = ?1",
                             rel_json(j, sizeof(j), "put", in->life, in->index));
        if (v && !model_matches(st, v, in->life, in->index, "put", h->pop, 0)) {
            fig->corrupt++;
            print_error("partial model put life %u step %u\n", in->life, in->index);
        }
        return v != 0;
    }
    case OP_LEDGER: {
        int64_t l = raw_find(raw, "SELECT id FROM privacy_ledger WHERE params_json = ?1",
                             rel_json(j, sizeof(j), "solo", in->life, in->index));
        const fl_store_ledger_entry *e = ledger_find(led, nled, l);
        if (l && (!e || !ledger_matches(e, h->pop, 0, in->life, in->index))) {
            fig->corrupt++;
            print_error("partial ledger entry life %u step %u\n", in->life, in->index);
        }
        return l != 0;
    }
    case OP_ENROLL: {
        char id[64];
        uint8_t tok[32];
        rel_client(id, sizeof(id), tok, in->life, in->index);
        fl_store_client *c = NULL;
        fl_status r = fl_store_client_get(st, &c, id);
        fl_store_free(st, c);
        if (r == FL_OK && fl_store_client_authenticate(st, id, tok, sizeof(tok)) != FL_OK) {
            fig->corrupt++;
            print_error("client %s present without its token hash\n", id);
        }
        return r == FL_OK;
    }
    case OP_ROUND: {
        int64_t r = raw_find(raw, "SELECT id FROM rounds WHERE config_json = ?1",
                             rel_json(j, sizeof(j), "solo", in->life, in->index));
        if (r &&
            !round_matches(st, r, h->pop, FL_STORE_ROUND_OPEN, 0, "solo", in->life, in->index)) {
            fig->corrupt++;
            print_error("partial round create life %u step %u\n", in->life, in->index);
        }
        return r != 0;
    }
    case OP_START: {
        fl_store_round *r = NULL;
        if (fl_store_round_get(st, &r, in->a) != FL_OK) {
            LOST(fig, "round %lld (created before its start was cut)", (long long)in->a);
            return 0;
        }
        int started = r->state == FL_STORE_ROUND_RUNNING;
        if (!(started ? r->started_at > 0
                      : r->state == FL_STORE_ROUND_OPEN && r->started_at == 0)) {
            fig->corrupt++;
            print_error("partial round start (round %lld)\n", (long long)in->a);
        }
        fl_store_free(st, r);
        return started;
    }
    case OP_TAG:
    case OP_POP:
    case OP_REOPEN:
        return -1; /* handled by the caller, or nothing to check */
    default:
        fail_msg("unknown op kind %d", in->kind);
    }
    return 0;
}

/* Global invariants over raw SQL: no half-applied group anywhere. */
static void check_groups(sqlite3 *raw, struct figures *fig) {
    static const char *const bad[] = {
        /* a group round that is not COMPLETED, or lacks its model or its one ledger entry */
        "SELECT count(*) FROM rounds r WHERE json_extract(r.config_json, '$.k') = 'group' AND "
        "(r.state != 2 OR NOT EXISTS (SELECT 1 FROM models m WHERE m.version = "
        "r.result_version AND m.metadata_json = r.config_json) OR (SELECT count(*) FROM "
        "privacy_ledger l WHERE l.round_id = r.id AND l.params_json = r.config_json) != 1)",
        /* a group model without its round */
        "SELECT count(*) FROM models m WHERE json_extract(m.metadata_json, '$.k') = 'group' AND "
        "NOT EXISTS (SELECT 1 FROM rounds r WHERE r.result_version = m.version)",
        /* a group ledger entry without its completed round */
        "SELECT count(*) FROM privacy_ledger l WHERE l.round_id IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM rounds r WHERE r.id = l.round_id AND r.state = 2)",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t n = store_raw_int(raw, bad[i]);
        if (n != 0) {
            fig->corrupt++;
            print_error("half-applied group (%lld rows): %s\n", (long long)n, bad[i]);
        }
    }
}

/* Checks a copy of the store after a cut. inflight: the op running at the cut, or NULL. */
static void check_store(const char *copy, struct history *h, const struct rec *inflight,
                        struct figures *fig) {
    fl_store *st = NULL;
    fl_status r = fl_store_open(&st, copy, NULL);
    if (r != FL_OK) {
        fig->corrupt++;
        print_error("reopen after the cut failed: %s: %s\n", fl_status_name(r),
                    fl_store_errmsg(st));
        fl_store_close(st);
        return;
    }
    r = fl_store_check(st);
    if (r != FL_OK) {
        fig->corrupt++;
        print_error("fl_store_check after the cut: %s: %s\n", fl_status_name(r),
                    fl_store_errmsg(st));
        fl_store_close(st);
        return;
    }
    if (h->pop == 0 && inflight && inflight->kind == OP_POP) {
        /* A fresh store cut while creating its population: there or not, nothing else. */
        fl_store_population *p = NULL;
        if (fl_store_population_find(st, &p, "pl") == FL_OK)
            h->pop = p->id;
        fl_store_free(st, p);
    }
    fl_store_ledger_entry *led = NULL;
    size_t nled = 0;
    if (h->pop)
        STORE_OK(st, fl_store_ledger_list(st, &led, &nled, h->pop));
    for (size_t i = 0; i < h->nacks; i++)
        check_ack(st, h, &h->acks[i], led, nled, fig);
    fig->acked += (long)h->nacks;

    sqlite3 *raw = store_raw_open(copy);
    if (inflight) {
        int there = check_inflight(st, raw, h, inflight, led, nled, fig);
        if (inflight->kind == OP_TAG) {
            int64_t v = 0;
            (void)fl_store_tag_resolve(st, &v, "latest");
            if (v != h->tag && v != inflight->a)
                LOST(fig, "tag latest is %lld, expected %lld or %lld", (long long)v,
                     (long long)h->tag, (long long)inflight->a);
            there = v == inflight->a && v != h->tag;
            h->tag = v;
        }
        if (there == 1)
            fig->inflight_present++;
        else if (there == 0)
            fig->inflight_absent++;
    }
    if (h->tag) {
        int64_t v = 0;
        if (fl_store_tag_resolve(st, &v, "latest") != FL_OK || v != h->tag)
            LOST(fig, "tag latest is %lld, expected %lld", (long long)v, (long long)h->tag);
    }
    fl_store_free(st, led);
    fl_store_close(st);
    check_groups(raw, fig);
    if (store_raw_int(raw, "PRAGMA user_version") != FL_STORE_SCHEMA_VERSION) {
        fig->corrupt++;
        print_error("schema version is not %d\n", FL_STORE_SCHEMA_VERSION);
    }
    sqlite3_close(raw);
}

/* ---- driver ---- */

struct life_result {
    int status;          /* CUT_EXIT, 0 (ran to the end) */
    long io;             /* I/O calls of a complete life (REC_DONE) */
    struct rec inflight; /* last intent without ack */
    int has_inflight;
    long reopen_io; /* I/O calls when the first reopen was acknowledged, 0 if none */
};

static struct life_result run_life(const char *path, struct history *h, uint32_t life,
                                   uint64_t seed, long cut_k, enum fault_vfs_model model, int lying,
                                   struct figures *fig) {
    struct life_result res;
    memset(&res, 0, sizeof(res));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        pipe_fd = fds[1];
        writer(path, h->pop, life, seed, cut_k, model, lying);
        _exit(0);
    }
    close(fds[1]);
    struct rec r;
    ssize_t got;
    for (;;) {
        got = read(fds[0], &r, sizeof(r));
        if (got < 0 && errno == EINTR)
            continue;
        if (got == 0)
            break;
        assert_int_equal(got, sizeof(r));
        switch (r.type) {
        case REC_INTENT:
            res.inflight = r;
            res.has_inflight = 1;
            break;
        case REC_ACK:
            res.has_inflight = 0;
            if (r.kind == OP_POP)
                h->pop = r.a;
            if (r.kind == OP_TAG)
                h->tag = r.a;
            if (r.kind == OP_REOPEN && res.reopen_io == 0)
                res.reopen_io = (long)r.d;
            hist_add(h, &r);
            break;
        case REC_DONE:
            res.io = r.a;
            break;
        case REC_CUT:
            fig->dropped_writes += r.a;
            fig->kept_sectors += r.b;
            fig->dir_entries += r.c;
            fig->dir_syncs += r.d;
            break;
        default:
            break;
        }
    }
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    res.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (res.status != 0 && res.status != CUT_EXIT && !fig->quiet)
        fail_msg("writer life %u failed (status 0x%x): a store call failed without a cut", life,
                 status);
    return res;
}

/* Runs `cuts` power cuts on a fresh directory (models alternating, one writer in eight on
 * a fresh file). strict: fail at the first loss or corruption. lying: the disk ignores
 * fsync (checker self-test: losses expected). */
static void run_cuts(long cuts, uint64_t seed, int strict, int lying, struct figures *fig) {
    struct store_tdir t;
    store_tdir_make(&t, "main.db");
    char copy[400], fresh[400], calib[400];
    snprintf(copy, sizeof(copy), "%s/check.db", t.dir);
    snprintf(fresh, sizeof(fresh), "%s/fresh.db", t.dir);
    snprintf(calib, sizeof(calib), "%s/calib.db", t.dir);
    struct history main_h = {0}, calib_h = {0};
    struct figures scratch;
    memset(&scratch, 0, sizeof(scratch));

    /* Calibrate: I/O calls of one complete life on a fresh file and on a populated one. */
    uint64_t rng = seed;
    struct life_result c =
        run_life(calib, &calib_h, 9999, rng, 0, FAULT_VFS_LOSE_UNSYNCED, 0, &scratch);
    assert_int_equal(c.status, 0);
    long io_fresh = c.io;
    c = run_life(calib, &calib_h, 9998, rel_rng(&rng), 0, FAULT_VFS_LOSE_UNSYNCED, 0, &scratch);
    assert_int_equal(c.status, 0);
    long io_life = c.io;
    rel_remove_db(calib);
    free(calib_h.acks);
    assert_true(io_fresh > 10 && io_life > 10);
    if (lying) {
        /* The store and its population exist durably before the disk starts lying. */
        c = run_life(t.path, &main_h, 0, rel_rng(&rng), 0, FAULT_VFS_LOSE_UNSYNCED, 0, fig);
        assert_int_equal(c.status, 0);
    }

    uint32_t life = lying ? 1 : 0;
    long done = 0;
    while (done < cuts) {
        enum fault_vfs_model model = (done & 1) ? FAULT_VFS_TORN : FAULT_VFS_LOSE_UNSYNCED;
        int is_fresh = !lying && life > 0 && rel_rng(&rng) % 8 == 0;
        struct history fresh_h = {0};
        struct history *h = is_fresh ? &fresh_h : &main_h;
        const char *path = is_fresh ? fresh : t.path;
        long range = (is_fresh || main_h.pop == 0) ? io_fresh : io_life;
        long k = 1 + (long)(rel_rng(&rng) % (uint64_t)range);
        struct life_result res = run_life(path, h, life, rel_rng(&rng), k, model, lying, fig);
        if (res.status != 0 && res.status != CUT_EXIT) {
            fig->writer_failures++; /* only with a lying disk: the store is damaged */
            break;
        }
        if (res.status == CUT_EXIT) {
            fig->cuts[model]++;
            done++;
        } else {
            fig->uncut++;
        }
        assert_int_equal(rel_copy_db(path, copy), 0);
        long before_lost = fig->lost, before_corrupt = fig->corrupt;
        check_store(copy, h, res.has_inflight ? &res.inflight : NULL, fig);
        rel_remove_db(copy);
        if (strict && (fig->lost != before_lost || fig->corrupt != before_corrupt))
            fail_msg("after cut %ld (life %u, k=%ld, %s model, %s store): %ld acknowledged "
                     "operations lost, %ld corruptions; rerun with FL_RELIABILITY_SEED=%llu",
                     done, life, k, model == FAULT_VFS_TORN ? "torn" : "lose-unsynced",
                     is_fresh ? "fresh" : "main", fig->lost - before_lost,
                     fig->corrupt - before_corrupt, (unsigned long long)seed);
        if (is_fresh) {
            rel_remove_db(fresh);
            free(fresh_h.acks);
            fig->fresh++;
        }
        if (h == &main_h && main_h.nacks > 0)
            fig->main_acked_lives++;
        life++;
    }
    fig->lives = life;
    free(main_h.acks);
    store_tdir_rm(&t);
}

static void print_figures(const char *what, const struct figures *f, double took) {
    print_message("%s: cuts %ld (lose-unsynced %ld, torn %ld), lives %ld (fresh %ld, uncut "
                  "%ld), acknowledged-op checks %ld, acknowledged lost %ld, corruptions %ld, "
                  "in-flight ops present %ld / absent %ld, unsynced writes dropped %ld, torn "
                  "sectors kept %ld, directory entries reverted %ld, directory fsyncs %ld, "
                  "%.1f s\n",
                  what, f->cuts[0] + f->cuts[1], f->cuts[0], f->cuts[1], f->lives, f->fresh,
                  f->uncut, f->acked, f->lost, f->corrupt, f->inflight_present, f->inflight_absent,
                  f->dropped_writes, f->kept_sectors, f->dir_entries, f->dir_syncs, took);
}

static void test_power_loss(void **state) {
    (void)state;
    int is_long = rel_long_profile();
    long cuts = rel_env_long("FL_RELIABILITY_CUTS", is_long ? 400 : 24);
    uint64_t seed = rel_seed();
    print_message("power loss: %ld cuts (%s profile), FL_RELIABILITY_SEED=%llu\n", cuts,
                  is_long ? "long" : "short", (unsigned long long)seed);
    assert_true(sodium_init() >= 0);
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip(); /* this SQLite cannot name a VFS in a file name */
    struct figures fig;
    memset(&fig, 0, sizeof(fig));
    double t0 = rel_now_s();
    run_cuts(cuts, seed, 1, 0, &fig);
    print_figures("power loss", &fig, rel_now_s() - t0);
    assert_int_equal(fig.lost, 0);
    assert_int_equal(fig.corrupt, 0);
    /* The cuts must have hit real work: acknowledged ops kept, in-flight ones dropped,
     * directory fsyncs seen (else the directory model is not being exercised). */
    assert_true(fig.acked > 0);
    assert_true(fig.dropped_writes > 0);
    assert_true(fig.inflight_absent > 0);
    assert_true(fig.dir_syncs > 0);
    fault_vfs_reset();
}

/* Targeted: cuts at each of the first I/O calls after the store was closed (checkpoint,
 * WAL removed without a directory fsync) and opened again, where the directory holds
 * changes no fsync has covered yet: the old WAL may come back. */
static void test_power_loss_after_wal_removal(void **state) {
    (void)state;
    uint64_t seed = rel_seed();
    assert_true(sodium_init() >= 0);
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    struct store_tdir t;
    store_tdir_make(&t, "base.db");
    char work[400], copy[400];
    snprintf(work, sizeof(work), "%s/work.db", t.dir);
    snprintf(copy, sizeof(copy), "%s/check.db", t.dir);
    struct figures fig;
    memset(&fig, 0, sizeof(fig));
    struct history base = {0};
    struct life_result res = run_life(t.path, &base, 0, seed, 0, FAULT_VFS_LOSE_UNSYNCED, 0, &fig);
    assert_int_equal(res.status, 0);
    script_reopen = 1;
    assert_int_equal(rel_copy_db(t.path, work), 0);
    struct history h = base;
    h.acks = NULL;
    h.nacks = h.cap = 0;
    uint64_t life_seed = seed ^ 0x5EED;
    res = run_life(work, &h, 1, life_seed, 0, FAULT_VFS_LOSE_UNSYNCED, 0, &fig);
    assert_int_equal(res.status, 0);
    long k0 = res.reopen_io;
    assert_true(k0 > 0);
    free(h.acks);
    for (int model = 0; model < 2; model++) {
        for (long delta = 1; delta <= 6; delta++) {
            assert_int_equal(rel_copy_db(t.path, work), 0);
            h = base;
            h.cap = base.nacks;
            h.acks = malloc(h.cap * sizeof(*h.acks));
            assert_non_null(h.acks);
            memcpy(h.acks, base.acks, base.nacks * sizeof(*h.acks));
            res =
                run_life(work, &h, 1, life_seed, k0 + delta, (enum fault_vfs_model)model, 0, &fig);
            assert_int_equal(res.status, CUT_EXIT);
            fig.cuts[model]++;
            assert_int_equal(rel_copy_db(work, copy), 0);
            check_store(copy, &h, res.has_inflight ? &res.inflight : NULL, &fig);
            rel_remove_db(copy);
            rel_remove_db(work);
            free(h.acks);
            if (fig.lost || fig.corrupt)
                fail_msg("cut %ld I/O calls after the reopen (%s model): %ld lost, %ld corrupt; "
                         "FL_RELIABILITY_SEED=%llu",
                         delta, model ? "torn" : "lose-unsynced", fig.lost, fig.corrupt,
                         (unsigned long long)seed);
        }
    }
    script_reopen = 0;
    print_figures("after WAL removal", &fig, 0);
    /* The cuts must have found the directory holding unsynced changes. */
    assert_true(fig.dir_entries > 0);
    free(base.acks);
    store_tdir_rm(&t);
}

/* Self-test: the same cuts on a disk that ignores fsync must lose acknowledged commits,
 * and the checker must see it (so a store that did not sync would fail the test above). */
static void test_power_loss_detects_lying_disk(void **state) {
    (void)state;
    uint64_t seed = rel_seed();
    assert_true(sodium_init() >= 0);
    assert_int_equal(fault_vfs_register(), SQLITE_OK);
    if (!fault_vfs_uri_supported())
        skip();
    struct figures fig;
    memset(&fig, 0, sizeof(fig));
    fig.quiet = 1;
    double t0 = rel_now_s();
    run_cuts(8, seed, 0, 1, &fig);
    print_figures("lying disk (self-test)", &fig, rel_now_s() - t0);
    print_message("lying disk (self-test): %ld writers failed on the damaged store\n",
                  fig.writer_failures);
    assert_true(fig.lost + fig.corrupt + fig.writer_failures > 0);
    fault_vfs_reset();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_power_loss),
        cmocka_unit_test(test_power_loss_after_wal_removal),
        cmocka_unit_test(test_power_loss_detects_lying_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
