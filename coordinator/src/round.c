/* Running rounds: the secure-aggregation phases over HTTP (docs/protocol.md section 5), the
 * plain /update path, per-phase deadlines, idempotency per (round, client, phase), and
 * long polls parked with libmicrohttpd's suspend/resume.
 *
 * Privacy: in secagg rounds a device's message goes straight into the secagg server state
 * machine, which folds masked inputs into one accumulator; in plain rounds the update is
 * folded into the round's accumulator and the request buffer is freed with the request. No
 * per-device update is kept or written anywhere; only SHA-256 digests of accepted messages
 * are remembered (for idempotent retries). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <math.h>

#include <microhttpd.h>

#include "flotilla/dp.h"
#include "flotilla/secagg.h"

#include "coord_internal.h"

const char *const fl__coord_phase_names[FL__PH_COUNT] = {"advertise", "share", "masked",
                                                         "consistency", "unmask"};

int64_t fl__coord_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t fl__coord_mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int phase_of_name(const char *s) {
    for (int k = 0; k < FL__PH_COUNT; k++)
        if (strcmp(s, fl__coord_phase_names[k]) == 0)
            return k;
    return -1;
}

/* The secagg message type a device posts in phase k. */
static fl_secagg_msg_type phase_msg_type(int k) {
    static const fl_secagg_msg_type t[FL__PH_COUNT] = {
        FL_SECAGG_MSG_ADVERTISE, FL_SECAGG_MSG_SHARES, FL_SECAGG_MSG_MASKED_INPUT,
        FL_SECAGG_MSG_CONSISTENCY_SIG, FL_SECAGG_MSG_UNMASK_SHARES};
    return t[k];
}

static int phase_of_secagg(fl_secagg_phase ph) {
    switch (ph) {
    case FL_SECAGG_PHASE_ADVERTISE: return FL__PH_ADVERTISE;
    case FL_SECAGG_PHASE_SHARE_KEYS: return FL__PH_SHARE;
    case FL_SECAGG_PHASE_MASKED_INPUT: return FL__PH_MASKED;
    case FL_SECAGG_PHASE_CONSISTENCY: return FL__PH_CONSISTENCY;
    case FL_SECAGG_PHASE_UNMASK: return FL__PH_UNMASK;
    default: return FL__PH_DONE;
    }
}

/* ---- lookups ---- */

/* Client ids are 16 random hex digits: their value, mixed, is a good hash. */
static uint64_t client_key(const char *id) {
    uint64_t v = 0;
    for (size_t i = 0; i < FL__COORD_CLIENT_ID_CHARS && id[i]; i++)
        v = v * 31 + (uint8_t)id[i];
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    return v;
}

fl_status fl__coord_round_index_init(fl_coord *co, struct fl__coord_round *r) {
    size_t slots = 16;
    while (slots < 2 * r->cap)
        slots *= 2;
    r->pidx = fl__calloc(fl__coord_alloc(co), slots, sizeof(*r->pidx));
    if (!r->pidx)
        return FL_ERR_NOMEM;
    r->pidx_mask = slots - 1;
    return FL_OK;
}

struct fl__coord_participant *fl__coord_round_find(const struct fl__coord_round *r,
                                                   const char *client_id) {
    if (!r->pidx) {
        for (size_t i = 0; i < r->n; i++)
            if (strcmp(r->parts[i].client_id, client_id) == 0)
                return &r->parts[i];
        return NULL;
    }
    for (size_t i = client_key(client_id) & r->pidx_mask;; i = (i + 1) & r->pidx_mask) {
        uint32_t k = r->pidx[i];
        if (k == 0)
            return NULL;
        if (strcmp(r->parts[k - 1].client_id, client_id) == 0)
            return &r->parts[k - 1];
    }
}

struct fl__coord_participant *fl__coord_round_add(struct fl__coord_round *r,
                                                  const char *client_id) {
    struct fl__coord_participant *pt = &r->parts[r->n];
    snprintf(pt->client_id, sizeof(pt->client_id), "%s", client_id);
    pt->index = (uint32_t)r->n;
    r->n++;
    if (r->pidx) {
        size_t i = client_key(client_id) & r->pidx_mask;
        while (r->pidx[i])
            i = (i + 1) & r->pidx_mask;
        r->pidx[i] = (uint32_t)r->n;
    }
    return pt;
}

struct fl__coord_round *fl__coord_round_lookup(struct fl__coord_pop *p, int64_t rid) {
    if (p->round && p->round->id == rid)
        return p->round;
    if (p->last && p->last->id == rid)
        return p->last;
    for (size_t i = 0; i < FL__COORD_ROUNDS_KEPT - 1 && p->older[i]; i++)
        if (p->older[i]->id == rid)
            return p->older[i];
    return NULL;
}

void fl__coord_rounds_forget_client(fl_coord *co, const char *client_id) {
    for (size_t i = 0; i < co->n_pops; i++) {
        struct fl__coord_pop *p = co->pops[i];
        struct fl__coord_round *kept[FL__COORD_ROUNDS_KEPT];
        size_t nk = 0;
        if (p->last)
            kept[nk++] = p->last;
        for (size_t j = 0; j < FL__COORD_ROUNDS_KEPT - 1 && p->older[j]; j++)
            kept[nk++] = p->older[j];
        for (size_t j = 0; j < nk; j++) {
            struct fl__coord_participant *pt = fl__coord_round_find(kept[j], client_id);
            if (!pt)
                continue;
            for (int k = 0; k < FL__PH_COUNT; k++) {
                fl__free(fl__coord_alloc(co), pt->result[k], pt->result_len[k]);
                pt->result[k] = NULL;
                pt->result_len[k] = 0;
            }
            /* The empty id is the tombstone: no client id is empty, so no lookup matches
             * it, and its index slot stays taken, keeping other clients' probe chains. */
            fl_memzero(pt->client_id, sizeof(pt->client_id));
            fl_memzero(pt->pid, sizeof(pt->pid));
            fl_memzero(pt->hash, sizeof(pt->hash));
            fl_memzero(pt->device_id, sizeof(pt->device_id));
        }
    }
}

struct fl__coord_participant *fl__coord_participant_of(struct fl__coord_req *rq,
                                                      struct fl__coord_reply *rep,
                                                      const struct fl__coord_client_auth *ca,
                                                      int64_t rid,
                                                      struct fl__coord_pop **pop_out,
                                                      struct fl__coord_round **round_out) {
    const char *key = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Idempotency-Key");
    if (!key) {
        fl__coord_error(rep, 400, "missing_field", "Idempotency-Key",
                        "the Idempotency-Key header (participation_id) is required");
        return NULL;
    }
    struct fl__coord_pop *p = fl__coord_pop_by_id(rq->co, ca->population_id);
    struct fl__coord_round *r = p ? fl__coord_round_lookup(p, rid) : NULL;
    if (p && p->buffered) {
        /* A buffered participation keeps the round id it was given while it moves from
         * buffer to buffer: find it by client and that id in the open or last buffer. */
        struct fl__coord_round *cand[2] = {p->round, p->last};
        for (int c = 0; c < 2; c++)
            for (size_t i = 0; cand[c] && i < cand[c]->n; i++) {
                struct fl__coord_participant *pt = &cand[c]->parts[i];
                if (pt->sel_rid != rid || strcmp(pt->client_id, ca->client_id) != 0)
                    continue;
                if (strlen(key) != FL__COORD_PID_CHARS ||
                    fl_memeq_ct(pt->pid, key, FL__COORD_PID_CHARS) != 0)
                    break;
                *pop_out = p;
                *round_out = cand[c];
                return pt;
            }
        if (!r && p->round && rid < p->round->id)
            r = p->round; /* an id this population handed out: not this client's */
    }
    if (!r) {
        fl__coord_error(rep, 410, "round_closed", NULL, "round %lld is not open",
                        (long long)rid);
        return NULL;
    }
    /* A client appears at most once per round; compare its key in constant time. */
    struct fl__coord_participant *pt = fl__coord_round_find(r, ca->client_id);
    if (pt && strlen(key) == FL__COORD_PID_CHARS &&
        fl_memeq_ct(pt->pid, key, FL__COORD_PID_CHARS) == 0) {
        *pop_out = p;
        *round_out = r;
        return pt;
    }
    fl__coord_error(rep, 403, "not_a_participant", "Idempotency-Key",
                    "not a participant of round %lld", (long long)rid);
    return NULL;
}

/* ---- long-poll waiters ---- */

static void waiter_unlink(fl_coord *co, struct fl__coord_waiter *w) {
    if (!w->linked)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        co->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    w->linked = false;
    co->n_waiters--;
}

/* Parks the request: links its waiter and suspends the connection. The handler returns
 * without a reply; libmicrohttpd calls it again after MHD_resume_connection. Lock held, so
 * that a wake-up cannot slip in between linking and suspending. */
static int park(struct fl__coord_req *rq, struct fl__coord_reply *rep, int64_t rid, int phase) {
    fl_coord *co = rq->co;
    struct fl__coord_waiter *w = &rq->waiter;
    w->conn = rq->conn;
    w->round_id = rid;
    w->phase = phase;
    w->deadline_mono = rq->wait_until;
    w->prev = NULL;
    w->next = co->waiters;
    if (co->waiters)
        co->waiters->prev = w;
    co->waiters = w;
    w->linked = true;
    co->n_waiters++;
    MHD_suspend_connection(rq->conn);
    rq->park = true;
    atomic_fetch_add(&co->metrics.long_polls_parked, 1);
    rep->status = 0;
    return 0;
}

/* Unlinks w and resumes its connection; one resumed while the coordinator stops is counted
 * until its answer is sent, so that fl_coord_stop can wait for it. */
static void waiter_resume(fl_coord *co, struct fl__coord_waiter *w) {
    waiter_unlink(co, w);
    w->draining = atomic_load(&co->stopped);
    if (w->draining)
        atomic_fetch_add(&co->draining, 1);
    MHD_resume_connection(w->conn);
}

void fl__coord_waiters_wake(fl_coord *co, int64_t round_id, int phase) {
    struct fl__coord_waiter *w = co->waiters, *next;
    for (; w; w = next) {
        next = w->next;
        if (w->round_id != round_id || (phase >= 0 && w->phase != phase))
            continue;
        waiter_resume(co, w);
    }
}

void fl__coord_waiters_expire(fl_coord *co, int64_t now_mono) {
    struct fl__coord_waiter *w = co->waiters, *next;
    for (; w; w = next) {
        next = w->next;
        if (now_mono < w->deadline_mono && !atomic_load(&co->stopped))
            continue;
        waiter_resume(co, w);
    }
}

/* Parses ?wait= (0..60, default 30), capped by the configuration. */
static bool wait_param(struct fl__coord_req *rq, struct fl__coord_reply *rep, int def,
                       int *out) {
    const char *ws = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "wait");
    int v = def;
    if (ws) {
        size_t n = strlen(ws);
        if (n == 0 || n > 2 || ws[0] < '0' || ws[0] > '9' ||
            (n == 2 && (ws[1] < '0' || ws[1] > '9'))) {
            fl__coord_error(rep, 400, "invalid_parameter", "wait", "'wait' must be 0-60");
            return false;
        }
        v = ws[0] - '0';
        if (n == 2)
            v = v * 10 + (ws[1] - '0');
        if (v > 60) {
            fl__coord_error(rep, 400, "invalid_parameter", "wait", "'wait' must be 0-60");
            return false;
        }
    }
    if (v > (int)rq->co->max_long_poll_s)
        v = (int)rq->co->max_long_poll_s;
    *out = v;
    return true;
}

/* ---- outcome ---- */

static const char *round_state_word(const struct fl__coord_round *r) {
    switch (r->state) {
    case FL__ROUND_FORMING: return "forming";
    case FL__ROUND_COMPLETED: return "completed";
    case FL__ROUND_ABANDONED: return "abandoned";
    case FL__ROUND_RUNNING:
        if (r->rp.buffered)
            return "buffering";
        return r->phase < FL__PH_COUNT && r->rp.secagg ? fl__coord_phase_names[r->phase]
               : r->phase < FL__PH_COUNT               ? "masked"
                                                       : "aggregating";
    }
    return "unknown";
}

static json_t *outcome_json(const struct fl__coord_round *r) {
    json_t *o = json_pack("{s:I, s:s}", "round_id", (json_int_t)r->id, "state",
                          round_state_word(r));
    if (!o)
        return NULL;
    json_object_set_new(o, "new_model_version",
                        r->new_version ? json_integer(r->new_version) : json_null());
    json_object_set_new(o, "participants",
                        json_integer(r->state == FL__ROUND_COMPLETED ? (json_int_t)r->survivors
                                                                     : (json_int_t)r->n));
    json_object_set_new(o, "reason", r->reason[0] ? json_string(r->reason) : json_null());
    return o;
}

static bool terminal(const struct fl__coord_round *r) {
    return r->state == FL__ROUND_COMPLETED || r->state == FL__ROUND_ABANDONED;
}

/* ---- running a round ---- */

size_t fl__coord_round_body_cap(fl_coord *co, const char *rid_text, const char *phase) {
    int64_t rid;
    size_t cap = 4096; /* unknown rounds: small, the handler answers 404/410 */
    if (!fl__coord_parse_id(rid_text, &rid))
        return cap;
    int k = phase ? phase_of_name(phase) : FL__PH_MASKED;
    fl__coord_lock(co);
    for (size_t i = 0; i < co->n_pops; i++) {
        struct fl__coord_round *r = fl__coord_round_lookup(co->pops[i], rid);
        if (!r)
            continue;
        size_t kk = r->rp.degree ? r->rp.degree : (r->cap > 1 ? r->cap - 1 : 1);
        if (k == FL__PH_SHARE)
            cap = 256 * kk + 4096;
        else if (k == FL__PH_MASKED)
            /* Norm proofs: 64 limbs at most, 128 bytes per proven bit (m per coordinate,
             * plus up to 64 for the weight's range and 64 for the bound), 64 per coordinate
             * and 160 (docs/secagg.md "Norm proofs"). */
            cap = 8 * r->rp.vec_len + 4096 +
                  (r->rp.norm_bits ? 4 * 64 + 160 + 64 * r->rp.vec_len +
                                         128 * (r->rp.vec_len * r->rp.norm_bits + 128)
                                   : 0);
        else if (k == FL__PH_UNMASK)
            cap = 128 * (kk + 1) + 4096;
        fl__coord_unlock(co);
        return cap;
    }
    /* A buffered participation posts under the id of the buffer it was selected in. */
    for (size_t i = 0; i < co->n_pops; i++) {
        struct fl__coord_round *r = co->pops[i]->round;
        if (co->pops[i]->buffered && r && rid < r->id && k == FL__PH_MASKED &&
            8 * r->rp.vec_len + 4096 > cap)
            cap = 8 * r->rp.vec_len + 4096;
    }
    fl__coord_unlock(co);
    return cap;
}

static void free_results(fl_coord *co, struct fl__coord_round *r) {
    for (size_t i = 0; i < r->n; i++)
        for (int k = 0; k < FL__PH_COUNT; k++) {
            fl__free(fl__coord_alloc(co), r->parts[i].result[k], r->parts[i].result_len[k]);
            r->parts[i].result[k] = NULL;
        }
}

/* Makes room for a new p->last: the current one moves to the front of p->older, without
 * what only a current round needs (phase results, the shared task body), and the oldest
 * kept round is freed. A FedBuff buffer is freed at once: its participations move from
 * buffer to buffer and are looked up in the open and last buffers only. */
static void keep_finished(fl_coord *co, struct fl__coord_pop *p) {
    struct fl__coord_round *r = p->last;
    p->last = NULL;
    if (!r)
        return;
    if (p->buffered) {
        fl__coord_round_free(co, r);
        return;
    }
    free_results(co, r);
    fl__coord_blob_unref(r->task);
    r->task = NULL;
    fl__coord_round_free(co, p->older[FL__COORD_ROUNDS_KEPT - 2]);
    memmove(&p->older[1], &p->older[0], (FL__COORD_ROUNDS_KEPT - 2) * sizeof(p->older[0]));
    p->older[0] = r;
}

void fl__coord_round_retire(fl_coord *co, struct fl__coord_pop *p) {
    struct fl__coord_round *r = p->round;
    if (!r)
        return;
    if (r->sa) {
        fl_secagg_server_destroy(r->sa);
        r->sa = NULL;
    }
    if (r->acc) {
        fl_memzero(r->acc, r->rp.vec_len * sizeof(uint64_t));
        fl__free(&co->alloc, r->acc, r->rp.vec_len * sizeof(uint64_t));
        r->acc = NULL;
    }
    if (r->bnum) {
        fl_memzero(r->bnum, r->rp.dim * sizeof(double));
        fl__free(&co->alloc, r->bnum, r->rp.dim * sizeof(double));
        r->bnum = NULL;
    }
    /* Keep the last phase's results only while a poll may still ask; the outcome JSON is
     * built from the round record. */
    if (r->state == FL__ROUND_ABANDONED)
        free_results(co, r);
    keep_finished(co, p);
    p->last = r;
    p->round = NULL;
    p->next_round_at = fl__coord_now(co) + p->sel.round_interval_s * 1000;
    fl__coord_waiters_wake(co, r->id, -1);
}

/* The secagg context devices derive from their task (docs/protocol.md 5.5):
 * SHA-256("flotilla/v1/secagg-context" || 0x00 || session_id || SHA-256(model)). Semi-honest
 * rounds leave the server's context zero (only the clients compare it); in active mode it is
 * part of each signed advertisement, which the server checks, so it needs the same value. */
static fl_status active_context(fl_coord *co, struct fl__coord_pop *p,
                                const struct fl__coord_round *r,
                                uint8_t out[FL_SECAGG_CONTEXT_BYTES]) {
    static const char label[] = "flotilla/v1/secagg-context";
    uint8_t m[sizeof(label) + 64];
    struct fl__coord_blob *mb = NULL;
    fl_status rc = fl__coord_model_blob(co, p, r->base_version, &mb);
    if (rc != FL_OK)
        return rc;
    memcpy(m, label, sizeof(label)); /* with its terminating 0x00 */
    memcpy(m + sizeof(label), r->session_id, 32);
    bool ok = fl__coord_unhex(m + sizeof(label) + 32, 32, mb->sha_hex);
    fl__coord_blob_unref(mb);
    if (!ok)
        return FL_ERR_CORRUPT;
    fl__coord_sha256(out, m, sizeof(m));
    return FL_OK;
}

/* Active rounds: reads the device id registered to each participant (its enrollment's
 * secagg_identity) into pt->device_id. A participant without one (erased since it checked
 * in) is evicted: the secagg server still expects its ADVERTISE, but it is dropped now and
 * never heard. Any other storage failure is returned. Lock held.
 * The ids read are pairwise distinct by construction, so no seat is checked against the
 * others: one participant per client (fl__coord_round_find before _add), one population per
 * round, one identity per client and UNIQUE (population_id, device_id) in storage, and no
 * erasure of a client in a round (docs/coordinator.md "One device, one seat";
 * test_secagg_seats.c). */
static fl_status load_device_ids(fl_coord *co, struct fl__coord_pop *p,
                                 struct fl__coord_round *r) {
    for (size_t i = 0; i < r->n; i++) {
        struct fl__coord_participant *pt = &r->parts[i];
        fl_store_client_identity id;
        fl_status rc = fl_store_client_identity_get(co->store, &id, pt->client_id);
        if (rc == FL_ERR_NOT_FOUND) {
            fl__log(&co->logger, FL_LOG_WARN, "round %lld: participant %s has no device "
                    "identity; dropped", (long long)r->id, pt->client_id);
            pt->evicted = true;
            pt->dropped_at = FL__PH_ADVERTISE;
            p->dropouts[FL__PH_ADVERTISE]++;
            continue;
        }
        if (rc != FL_OK)
            return rc;
        memcpy(pt->device_id, id.device_id, sizeof(pt->device_id));
    }
    return FL_OK;
}

/* Evicted participants that the secagg server still counts as pending in phase k. */
static uint32_t evicted_pending(const struct fl__coord_round *r, int k) {
    uint32_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->parts[i].evicted && r->parts[i].dropped_at == k &&
             !(r->parts[i].posted & (1u << k));
    return n;
}

fl_status fl__coord_round_run(fl_coord *co, struct fl__coord_pop *p, int64_t now) {
    struct fl__coord_round *r = p->round;
    char why[256];
    /* OPEN -> RUNNING, the selection counts and the selected participants (kept in memory
     * while the round formed): one transaction, one fsync. */
    fl_store_round_counts counts = {(int64_t)r->n, (int64_t)r->n, 0, 0};
    bool own_tx = !fl_store_in_transaction(co->store);
    fl_status rc = own_tx ? fl_store_begin(co->store) : FL_OK;
    for (size_t i = 0; rc == FL_OK && !r->rp.buffered && i < r->n; i++) {
        uint8_t ph[32];
        fl_status pr = fl_store_participant_set_v2(co->store, r->id, r->parts[i].client_id,
                                                   FL_STORE_PARTICIPANT_SELECTED,
                                                   fl__coord_pid_hash(ph, r->parts[i].pid));
        /* A client erased since it checked in is left out; anything else (memory, I/O, a
         * busy database: the transaction is gone) fails the start with its own code. */
        if (pr == FL_ERR_NOT_FOUND)
            fl__log(&co->logger, FL_LOG_WARN, "round %lld: participant %s not recorded: %s",
                    (long long)r->id, r->parts[i].client_id, fl_store_errmsg(co->store));
        else
            rc = pr;
    }
    if (rc == FL_OK)
        rc = fl_store_round_start(co->store, r->id);
    if (rc == FL_OK)
        rc = fl_store_round_set_counts(co->store, r->id, &counts);
    if (rc == FL_OK && own_tx)
        rc = fl_store_commit(co->store);
    if (rc != FL_OK) {
        fl__log(&co->logger, FL_LOG_ERROR, "round %lld: start failed: %s", (long long)r->id,
                fl_store_errmsg(co->store));
        if (own_tx && fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
        fl__coord_round_abandon(co, p, "storage error at round start");
        return rc;
    }
    r->state = FL__ROUND_RUNNING;
    r->started_at = now;
    int64_t t = now;
    for (int k = 0; k < FL__PH_COUNT; k++) {
        bool used = r->rp.secagg ? k != FL__PH_CONSISTENCY || r->rp.active : k == FL__PH_MASKED;
        if (used)
            t += p->deadlines_s[k] * 1000;
        r->phase_deadline[k] = t;
        r->goal_close_at[k] = 0;
    }
    r->run_deadline = t;
    r->goal = p->sel.target;
    r->goal_grace_ms = p->sel.target_grace_s < 0 ? -1 : p->sel.target_grace_s * 1000;
    if (r->rp.secagg) {
        /* fl_secagg_config_resolve refuses n < 3; population validation and the forming
         * deadline (pop.c, SECAGG_MIN_CLIENTS) keep such a round from getting here. */
        if (r->n < 3) {
            fl__coord_round_abandon(co, p, "secure aggregation needs at least 3 clients");
            return FL_ERR_STATE;
        }
        json_t *sa = json_object_get(p->config, "secagg");
        int64_t kcfg = json_integer_value(json_object_get(sa, "neighbors"));
        double frac = json_number_value(json_object_get(sa, "threshold_fraction"));
        fl_secagg_config cfg;
        fl_secagg_config_init(&cfg);
        cfg.num_clients = (uint32_t)r->n;
        cfg.dim = (uint32_t)r->rp.vec_len;
        cfg.bits = r->rp.bits;
        if (r->rp.norm_bits) {
            /* Every model coordinate in the L2 bound; the weight coordinate only in range. */
            cfg.norm_bits = r->rp.norm_bits;
            cfg.norm_dim = (uint32_t)r->rp.dim;
            cfg.norm_bound2 = r->rp.norm_bound2;
            cfg.norm_tail_max = r->rp.norm_weight_max;
        }
        /* The rates that size a derived graph (pop.c validated them). */
        json_t *dr = json_object_get(sa, "dropout_rate");
        json_t *ar = json_object_get(sa, "adversarial_rate");
        if (dr)
            cfg.dropout_rate = json_number_value(dr);
        if (ar)
            cfg.adversarial_rate = json_number_value(ar);
        if (kcfg > 0) {
            uint32_t k = (uint32_t)kcfg;
            if (k % 2)
                k++;
            if (k >= cfg.num_clients - 1 || k < 2)
                k = cfg.num_clients - 1;
            uint32_t th = (uint32_t)(frac * k + 0.999999);
            cfg.degree = k;
            cfg.threshold = th < 1 ? 1 : th > k ? k : th;
        }
        cfg.reveal_pair_seeds = r->rp.reveal_seeds;
        if (r->rp.active) {
            /* Active mode with device certificates under the population's authority key;
             * each participant's registered device id is what its ADVERTISE must name. */
            cfg.active = 1;
            cfg.device_certs = 1;
            memcpy(cfg.verify_key, p->authority_key, sizeof(cfg.verify_key));
            rc = active_context(co, p, r, cfg.context);
            if (rc != FL_OK) {
                fl__coord_round_abandon(co, p, "reading the round's model for its secagg context");
                return rc;
            }
            rc = load_device_ids(co, p, r);
            if (rc != FL_OK) {
                fl__coord_round_abandon(co, p, "storage error reading device identities");
                return rc;
            }
        }
        fl_secagg_config tried = cfg;
        rc = fl_secagg_config_resolve(&cfg, why, sizeof(why));
        if (rc != FL_OK && kcfg > 0) {
            cfg = tried;
            cfg.degree = cfg.threshold = 0; /* the configured k does not fit n: derive */
            rc = fl_secagg_config_resolve(&cfg, why, sizeof(why));
        }
        if (rc == FL_OK)
            rc = fl_secagg_server_create(&r->sa, &cfg, (uint64_t)r->id, r->session_id,
                                         fl__coord_pub_alloc(co));
        if (rc == FL_OK)
            r->sa_cfg = cfg;
        if (rc != FL_OK) {
            char msg[300];
            snprintf(msg, sizeof(msg), "secure aggregation could not start: %s",
                     rc == FL_ERR_NOMEM ? "out of memory" : why);
            fl__coord_round_abandon(co, p, msg);
            return rc == FL_ERR_NOMEM ? FL_ERR_NOMEM : FL_ERR_STATE;
        }
        fl_secagg_server_params(r->sa, &r->rp.degree, &r->rp.threshold);
        r->phase = FL__PH_ADVERTISE;
    } else if (r->rp.buffered) {
        /* No phases or round deadline: each participation has its own deadline. */
        r->bnum = fl__calloc(&co->alloc, r->rp.dim, sizeof(double));
        if (!r->bnum) {
            fl__coord_round_abandon(co, p, "out of memory for the buffer");
            return FL_ERR_NOMEM;
        }
        for (int k = 0; k < FL__PH_COUNT; k++)
            r->phase_deadline[k] = INT64_MAX;
        r->run_deadline = INT64_MAX;
        r->phase = FL__PH_MASKED;
    } else {
        r->acc = fl__calloc(&co->alloc, r->rp.vec_len, sizeof(uint64_t));
        if (!r->acc) {
            fl__coord_round_abandon(co, p, "out of memory for the accumulator");
            return FL_ERR_NOMEM;
        }
        r->phase = FL__PH_MASKED;
    }
    atomic_fetch_add(&co->metrics.rounds_started, 1);
    fl__log(&co->logger, FL_LOG_INFO,
            "round %lld of %s running with %zu clients (%s, d=%zu, vector %zu, k=%u, t=%u)",
            (long long)r->id, p->name, r->n,
            r->rp.secagg ? "secagg" : r->rp.buffered ? "buffered" : "plain", r->rp.dim,
            r->rp.vec_len, r->rp.degree, r->rp.threshold);
    return FL_OK;
}

static uint32_t alive_posted(const struct fl__coord_round *r, int k) {
    uint32_t m = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->parts[i].dropped_at < 0 && (r->parts[i].posted & (1u << k)))
            m++;
    return m;
}

/* ---- the last secagg advance on transient threads ---- */

struct unmask_batch {
    fl_secagg_server *sa;
    size_t njobs;
    atomic_size_t next; /* next job to take */
};

static void *unmask_worker(void *arg) {
    struct unmask_batch *b = arg;
    size_t j;
    while ((j = atomic_fetch_add(&b->next, 1)) < b->njobs)
        (void)fl_secagg_server_unmask_run(b->sa, j); /* a failure surfaces at next */
    return NULL;
}

/* fl_secagg_server_advance, except that the last one (UNMASK -> DONE) runs its jobs on
 * co->unmask_threads threads: this one plus workers started for each batch and joined
 * before the batch ends, so no thread outlives the call. A worker that cannot be started
 * leaves its jobs to the others. Returns what advance would; FL_ERR_NOMEM changes nothing.
 * *threaded: the jobs were spread over threads. Touches sa and the constant
 * co->unmask_threads only: the last advance runs without the lock (close_phase). */
static fl_status secagg_advance(fl_coord *co, fl_secagg_server *sa, bool *threaded) {
    unsigned nt = co->unmask_threads;
    *threaded = false;
    if (nt <= 1 || fl_secagg_server_phase(sa) != FL_SECAGG_PHASE_UNMASK)
        return fl_secagg_server_advance(sa);
    size_t nj;
    fl_status st = fl_secagg_server_unmask_begin(sa, nt, &nj);
    *threaded = st == FL_OK;
    while (st == FL_OK && nj > 0) {
        pthread_t th[64];
        struct unmask_batch b = {.sa = sa, .njobs = nj};
        atomic_init(&b.next, 0);
        unsigned started = 0;
        /* nt <= 64: fl_coord_create checks it. */
        while (started + 1 < nt && started + 1 < nj &&
               pthread_create(&th[started], NULL, unmask_worker, &b) == 0)
            started++;
        unmask_worker(&b);
        for (unsigned i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        st = fl_secagg_server_unmask_next(sa, &nj);
    }
    return st;
}

/* Closes phase r->phase: drops the clients that did not post, checks the minimum, advances
 * the secagg server, caches each survivor's next message, and wakes the pollers. After the
 * last phase, aggregates and commits. Lock held. */
static void close_phase(fl_coord *co, struct fl__coord_pop *p, int64_t now) {
    struct fl__coord_round *r = p->round;
    int k = r->phase;
    char why[400];
    for (size_t i = 0; i < r->n; i++)
        if (r->parts[i].dropped_at < 0 && !(r->parts[i].posted & (1u << k))) {
            r->parts[i].dropped_at = (int8_t)k;
            p->dropouts[k]++;
        }
    uint32_t m = alive_posted(r, k);
    if (k <= FL__PH_MASKED && (int64_t)m < p->sel.min_participants) {
        snprintf(why, sizeof(why), "too few survivors in phase %s: %u < %lld",
                 fl__coord_phase_names[k], m, (long long)p->sel.min_participants);
        fl__coord_round_abandon(co, p, why);
        return;
    }
    if (!r->rp.secagg) {
        r->phase = FL__PH_DONE;
        fl__coord_waiters_wake(co, r->id, k);
        fl__coord_round_aggregate(co, p, r->acc, r->received);
        return;
    }
    fl_status rc;
    bool threaded;
    if (fl_secagg_server_phase(r->sa) == FL_SECAGG_PHASE_UNMASK) {
        /* The last advance rebuilds the secrets and removes the masks, a secure round's
         * costliest step (O(n d), more with dropouts). It runs without the lock, as the
         * aggregation after it does: nothing else uses r->sa once the phase is over (a late
         * unmask post finds the round DONE: 410, or 200 for a replay), the round reads
         * "aggregating" and cannot be abandoned meanwhile, and p->round stays r. */
        fl__coord_debug_unmask_fn hook = co->debug_unmask;
        void *hook_user = co->debug_unmask_user;
        r->phase = FL__PH_DONE;
        r->aggregating = true;
        fl__coord_unlock(co);
        if (hook)
            hook(hook_user, r->id);
        rc = secagg_advance(co, r->sa, &threaded);
        fl__coord_lock(co);
        r->aggregating = false;
        if (rc == FL_ERR_NOMEM)
            r->phase = k; /* retried from the ticker, as below */
    } else {
        rc = secagg_advance(co, r->sa, &threaded);
    }
    if (threaded)
        co->unmask_threaded++;
    if (rc == FL_ERR_NOMEM) {
        fl__log(&co->logger, FL_LOG_WARN, "round %lld: out of memory closing phase %s; retrying",
                (long long)r->id, fl__coord_phase_names[k]);
        return;
    }
    if (rc != FL_OK) {
        snprintf(why, sizeof(why), "secure aggregation failed in phase %s (%u posted): %s",
                 fl__coord_phase_names[k], m, fl_secagg_server_errmsg(r->sa));
        fl__coord_round_abandon(co, p, why);
        return;
    }
    int next = phase_of_secagg(fl_secagg_server_phase(r->sa));
    if (next == FL__PH_DONE) {
        const uint32_t *sum = NULL;
        size_t dim = 0;
        uint32_t count = 0;
        uint64_t *s64 = NULL;
        if (fl_secagg_server_result(r->sa, &sum, &dim, &count) == FL_OK &&
            dim == r->rp.vec_len)
            s64 = fl__alloc_array(&co->alloc, dim, sizeof(uint64_t));
        if (!s64) {
            fl__coord_round_abandon(co, p, "could not read the secure aggregation result");
            return;
        }
        for (size_t i = 0; i < dim; i++)
            s64[i] = sum[i];
        r->phase = FL__PH_DONE;
        fl__coord_round_aggregate(co, p, s64, count);
        fl__free(&co->alloc, s64, dim * sizeof(uint64_t));
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        struct fl__coord_participant *pt = &r->parts[i];
        const uint8_t *msg;
        size_t len;
        if (pt->dropped_at >= 0)
            continue;
        if (fl_secagg_server_outgoing(r->sa, pt->index, &msg, &len) != FL_OK) {
            pt->dropped_at = (int8_t)next; /* the library left it out of the next phase */
            p->dropouts[next]++;
            continue;
        }
        pt->result[k] = fl__alloc(fl__coord_alloc(co), len);
        if (!pt->result[k]) {
            pt->dropped_at = (int8_t)next;
            continue;
        }
        memcpy(pt->result[k], msg, len);
        pt->result_len[k] = (uint32_t)len;
    }
    /* Results of phases before k are no longer asked for by a device that follows the
     * protocol; free them to keep memory O(n * k). */
    if (k > 0)
        for (size_t i = 0; i < r->n; i++) {
            fl__free(fl__coord_alloc(co), r->parts[i].result[k - 1],
                     r->parts[i].result_len[k - 1]);
            r->parts[i].result[k - 1] = NULL;
        }
    r->phase = next;
    fl__log(&co->logger, FL_LOG_DEBUG, "round %lld: phase %s closed with %u, now %s",
            (long long)r->id, fl__coord_phase_names[k], m, fl__coord_phase_names[next]);
    (void)now;
    fl__coord_waiters_wake(co, r->id, k);
}

/* With selection.target_grace_s: whether phase k, short of every live participant, may
 * close now. Once `target` participants have posted in it the grace starts; when it ends
 * the phase closes, provided the secagg server foresees that its advance goes on with the
 * posts it has (else the phase waits, as without the setting). */
static bool goal_close(struct fl__coord_round *r, int k, int64_t now) {
    if (r->goal_grace_ms < 0)
        return false;
    if (!r->goal_close_at[k]) {
        int64_t posted = r->rp.secagg ? (int64_t)alive_posted(r, k) : (int64_t)r->received;
        if (posted < r->goal)
            return false;
        r->goal_close_at[k] = now + r->goal_grace_ms;
    }
    if (now < r->goal_close_at[k])
        return false;
    return !r->rp.secagg || fl_secagg_server_would_advance(r->sa) == FL_OK;
}

/* Closes the open phase if every live participant posted, its deadline passed, or its
 * goal was met (goal_close). */
static void maybe_close(fl_coord *co, struct fl__coord_pop *p, int64_t now) {
    for (int guard = 0; guard < FL__PH_COUNT; guard++) {
        struct fl__coord_round *r = p->round;
        if (!r || r->state != FL__ROUND_RUNNING || r->phase >= FL__PH_DONE || r->rp.buffered)
            return;
        int k = r->phase;
        bool all;
        if (r->rp.secagg) {
            /* An evicted participant will never post; the server still waits for it. */
            all = fl_secagg_server_pending(r->sa) <= (r->rp.active ? evicted_pending(r, k) : 0);
        } else {
            uint32_t alive = 0;
            for (size_t i = 0; i < r->n; i++)
                alive += r->parts[i].dropped_at < 0;
            all = r->received >= alive;
        }
        int why = all ? 0 : now >= r->phase_deadline[k] ? 1 : 2;
        if (why == 2 && !goal_close(r, k, now))
            return;
        close_phase(co, p, now);
        if (p->round == r && r->phase == k)
            return; /* not advanced (retry later) */
        atomic_fetch_add(&co->metrics.phases_closed[why], 1);
    }
}

void fl__coord_round_tick(fl_coord *co, struct fl__coord_pop *p, int64_t now) {
    maybe_close(co, p, now);
}

/* ---- posting a message ---- */

static int reply_accepted(struct fl__coord_reply *rep, const struct fl__coord_round *r, int k,
                          int status) {
    rep->replayed = status == 200;
    return fl__coord_json(rep, status,
                          json_pack("{s:I, s:s, s:b}", "round_id", (json_int_t)r->id, "phase",
                                    r->rp.secagg ? fl__coord_phase_names[k] : "update",
                                    "accepted", 1));
}

/* OR of every word of an update body (vec_len words of wb bytes, little-endian) with the
 * bits above 2^b: zero when every word is in range. Written as one branch-free pass the
 * compiler vectorises. */
FL__SIMD_CLONES
static uint64_t words_over(const uint8_t *b, size_t vec_len, size_t wb, uint64_t mask) {
    uint64_t bad = 0;
    if (wb == 4) {
        uint32_t m32 = (uint32_t)mask;
        uint32_t bad32 = 0;
        for (size_t i = 0; i < vec_len; i++)
            bad32 |= fl__get_u32le(b + i * 4) & ~m32;
        bad = bad32;
    } else {
        for (size_t i = 0; i < vec_len; i++)
            bad |= fl__get_u64le(b + i * 8) & ~mask;
    }
    return bad;
}

double fl__coord_norm_bound2(const struct fl__coord_round_params *rp, uint64_t w) {
    fl_dp_central_params cp;
    fl_dp_central_info info;
    fl_dp_central_params_init(&cp);
    cp.clip = rp->clip * (double)w;
    cp.granularity = rp->granularity;
    cp.beta = rp->beta;
    if (fl_dp_central_info_get(&info, &cp, rp->dim) != FL_OK)
        return -1.0;
    return floor(info.l2_bound * info.l2_bound + 0.5);
}

static double plain_bound2(const struct fl__coord_round_params *rp, uint64_t w) {
    double b2 = fl__coord_norm_bound2(rp, w);
    return b2 < 0.0 ? 0.0 : b2; /* params were validated at round start; clip all if not */
}

/* Centred value of word i of a plain update body (the first dim words are signed integers
 * modulo 2^b). */
static int64_t plain_word(const uint8_t *b, size_t i, size_t wb, uint64_t mod) {
    uint64_t x = wb == 4 ? fl__get_u32le(b + i * 4) : fl__get_u64le(b + i * 8);
    return x >= (mod >> 1) ? -(int64_t)(mod - x) : (int64_t)x;
}

int64_t fl__coord_plain_value(const struct fl__coord_round_params *rp, const uint8_t *b,
                              size_t i, double scale) {
    size_t wb = rp->bits <= 32 ? 4 : 8;
    int64_t z = plain_word(b, i, wb, (uint64_t)1 << rp->bits);
    /* Toward zero: |trunc(s z)| <= s |z|, so the clipped vector's norm stays <= B. */
    return scale < 1.0 ? (int64_t)((double)z * scale) : z;
}


/* ---- the squared norm of a plain update ----
 * With 4-byte words (b <= 32) every centred value has |z| <= 2^31, so z^2 < 2^62 and the sum
 * over d < 2^32 coordinates is kept exactly in two 64-bit halves (the low and high 32 bits
 * of each square, summed apart: no carries, so the loop vectorises) and rounded to a double
 * once. It does not depend on the order of the words, and it is not a chain of dependent
 * floating-point adds (latency-bound, several cycles a word; the integer loop vectorises).
 * With 8-byte words (b up to 62) the squares need more than 64 bits, so the sum stays a
 * double accumulated in word order. */

/* Magnitude of the centred value of a 4-byte word x < 2^b (as plain_word, without the
 * sign), with half = 2^(b-1) and mod32 = 2^b mod 2^32 (0 for b = 32, where the difference
 * wraps to the right value). A word at or above 2^b gives a meaningless value, and such an
 * update is refused. All 32-bit, with the square widened once, so that the loops vectorise
 * (a 64-bit multiply does not, without AVX-512). */
static inline uint32_t centred_mag32(uint32_t x, uint32_t half, uint32_t mod32) {
    return x >= half ? mod32 - x : x;
}

/* The exact sum hi * 2^32 + lo as the nearest-ish double (at most two roundings). */
static double norm2_of(uint64_t hi, uint64_t lo) {
    uint64_t top = hi >> 32, low = hi << 32;
    low += lo;
    top += low < lo;
    return (double)top * 18446744073709551616.0 + (double)low;
}

/* FedBuff's fold of 4-byte words: sum[i] += what fl__coord_plain_accumulate's general loop
 * adds for word i, in one vectorised pass. With |z| <= 2^31 every step is exact or rounds
 * as there: (double)(int64_t)(z s) is trunc(z s) (|z s| < 2^53), and f v, trunc(f v) are the
 * same operations. `clip` (scale < 1) and `kind` (0: v; 1: f v; 2: trunc(f v)) are
 * constants in each caller below, so each gets a loop of its own. */
static inline __attribute__((always_inline)) void
plain_accumulate32_body(double *restrict sum, const uint8_t *restrict b, size_t dim,
                        uint32_t half, uint32_t mod32, double scale, double f, bool clip,
                        int kind) {
    for (size_t i = 0; i < dim; i++) {
        uint32_t x = fl__get_u32le(b + i * 4);
        double a = (double)centred_mag32(x, half, mod32);
        double v = x >= half ? -a : a;
        if (clip)
            v = trunc(v * scale);
        sum[i] += kind == 0 ? v : kind == 1 ? f * v : trunc(f * v);
    }
}

/* plain_accumulate32_body with `kind` as a constant in each branch. */
static inline __attribute__((always_inline)) void
plain_accumulate32_kind(double *restrict sum, const uint8_t *restrict b, size_t dim,
                        uint32_t half, uint32_t mod32, double scale, double f, bool clip,
                        int kind) {
    if (kind == 0)
        plain_accumulate32_body(sum, b, dim, half, mod32, scale, f, clip, 0);
    else if (kind == 1)
        plain_accumulate32_body(sum, b, dim, half, mod32, scale, f, clip, 1);
    else
        plain_accumulate32_body(sum, b, dim, half, mod32, scale, f, clip, 2);
}

FL__SIMD_CLONES
static void plain_accumulate32(double *restrict sum, const uint8_t *restrict b, size_t dim,
                               uint32_t half, uint32_t mod32, double scale, double f, bool clip,
                               int kind) {
    if (clip)
        plain_accumulate32_kind(sum, b, dim, half, mod32, scale, f, true, kind);
    else
        plain_accumulate32_kind(sum, b, dim, half, mod32, scale, f, false, kind);
}

void fl__coord_plain_accumulate(const struct fl__coord_round_params *rp, const uint8_t *b,
                                double scale, double f, bool trunc_weighted, double *sum) {
    if (rp->bits <= 32) {
        uint64_t mod = (uint64_t)1 << rp->bits;
        int kind = trunc_weighted ? (f < 1.0 ? 2 : 0) : (f == 1.0 ? 0 : 1);
        plain_accumulate32(sum, b, rp->dim, (uint32_t)(mod >> 1), (uint32_t)mod, scale, f,
                           scale < 1.0, kind);
        return;
    }
    for (size_t i = 0; i < rp->dim; i++) {
        double v = (double)fl__coord_plain_value(rp, b, i, scale);
        sum[i] += trunc_weighted ? (f < 1.0 ? trunc(f * v) : v) : f * v;
    }
}

/* ||z||^2 over the first dim words of a body whose words are all below 2^b. */
FL__SIMD_CLONES
static double plain_norm2(const struct fl__coord_round_params *rp, const uint8_t *b) {
    size_t wb = rp->bits <= 32 ? 4 : 8;
    uint64_t mod = (uint64_t)1 << rp->bits;
    if (wb == 4) {
        uint32_t half = (uint32_t)(mod >> 1), mod32 = (uint32_t)mod;
        uint64_t hi = 0, lo = 0;
        for (size_t i = 0; i < rp->dim; i++) {
            uint32_t a = centred_mag32(fl__get_u32le(b + i * 4), half, mod32);
            uint64_t sq = (uint64_t)a * a;
            lo += sq & 0xffffffffu;
            hi += sq >> 32;
        }
        return norm2_of(hi, lo);
    }
    double n2 = 0.0;
    for (size_t i = 0; i < rp->dim; i++) {
        double z = (double)plain_word(b, i, 8, mod);
        n2 += z * z;
    }
    return n2;
}

/* Length and weight checks of a plain update (the first two refusals, in this order); the
 * weight coordinate goes to *w_out. Returns 202 or the error status set in rep. */
static int plain_shape(const struct fl__coord_round_params *rp, const uint8_t *b, size_t len,
                       struct fl__coord_reply *rep, uint64_t *w_out) {
    size_t wb = rp->bits <= 32 ? 4 : 8;
    if (len != rp->vec_len * wb)
        return fl__coord_error(rep, 400, "invalid_message", NULL,
                               "an update is %zu little-endian %zu-byte words (%zu bytes), got "
                               "%zu bytes", rp->vec_len, wb, rp->vec_len * wb, len);
    uint64_t w = wb == 4 ? fl__get_u32le(b + (rp->vec_len - 1) * 4)
                         : fl__get_u64le(b + (rp->vec_len - 1) * 8);
    int64_t wmax = rp->weight_examples ? rp->weight_cap : 1;
    if (w < 1 || w > (uint64_t)wmax)
        return fl__coord_error(rep, 400, "invalid_message", NULL,
                               "the weight coordinate must be 1..%lld", (long long)wmax);
    *w_out = w;
    return 202;
}

/* The refusal of a body with some word at or above 2^b, naming the first one (rare). */
static int plain_over_error(const struct fl__coord_round_params *rp, const uint8_t *b,
                            struct fl__coord_reply *rep) {
    size_t wb = rp->bits <= 32 ? 4 : 8;
    uint64_t mask = ((uint64_t)1 << rp->bits) - 1;
    size_t i = 0;
    while (i + 1 < rp->vec_len && !words_over(b + i * wb, 1, wb, mask))
        i++;
    return fl__coord_error(rep, 400, "invalid_message", NULL,
                           "coordinate %zu is not below 2^%u", i, rp->bits);
}

/* The norm bound (docs/protocol.md section 5.1). The server decodes plain updates anyway,
 * so it enforces what the DP ledger and the clip/n influence bound assume instead of
 * trusting the device: an update over the bound is scaled down to it, as central-DP servers
 * clip (refusing it would let a device that clips slightly differently lose its round;
 * clipping keeps the round and bounds the damage). The comparison is in doubles with a 1e-9
 * relative slack, so an honest update at the bound is never touched by rounding; what that
 * slack lets through is negligible. Returns the scale (1.0: untouched). */
static double plain_scale(const struct fl__coord_round_params *rp, uint64_t w, double n2) {
    double b2 = plain_bound2(rp, w);
    return n2 > b2 * (1.0 + 1e-9) ? sqrt(b2 / n2) * (1.0 - 1e-12) : 1.0;
}

int fl__coord_plain_validate(const struct fl__coord_round_params *rp, const uint8_t *b,
                             size_t len, struct fl__coord_reply *rep, uint64_t *w_out,
                             double *scale_out) {
    size_t wb = rp->bits <= 32 ? 4 : 8;
    uint64_t mask = ((uint64_t)1 << rp->bits) - 1, w;
    int st = plain_shape(rp, b, len, rep, &w);
    if (st != 202)
        return st;
    if (words_over(b, rp->vec_len, wb, mask))
        return plain_over_error(rp, b, rep);
    *scale_out = plain_scale(rp, w, plain_norm2(rp, b));
    *w_out = w;
    return 202;
}

/* The 4-byte-word case of plain_fold over the first dim words, with the squares' halves
 * summed in *hi and *lo: ~40% of the coordinator's CPU at d = 1e6 with the baseline 4-word
 * SSE2 loop, so it is built wider where the CPU allows (FL__SIMD_CLONES). */
FL__SIMD_CLONES
static uint32_t plain_fold_words32(uint64_t *restrict acc, const uint8_t *restrict b,
                                   size_t dim, uint64_t mask, uint32_t half, uint32_t mod32,
                                   uint64_t *hi_out, uint64_t *lo_out) {
    uint32_t m32 = (uint32_t)mask, bad = 0;
    uint64_t hi = 0, lo = 0;
    for (size_t i = 0; i < dim; i++) {
        uint32_t x = fl__get_u32le(b + i * 4), a = centred_mag32(x, half, mod32);
        uint64_t sq = (uint64_t)a * a;
        bad |= x & ~m32;
        acc[i] = (acc[i] + x) & mask;
        lo += sq & 0xffffffffu;
        hi += sq >> 32;
    }
    *hi_out = hi;
    *lo_out = lo;
    return bad;
}

/* One pass over a plain update that passed plain_shape: adds every word into acc (mod 2^b),
 * and returns the OR of the words' bits above 2^b (as words_over) with ||z||^2 of the first
 * dim words in *n2 (the same value plain_norm2 computes: exact with 4-byte words, the same
 * adds in the same order with 8-byte words). Validation and fold used to be three passes
 * (range, norm, fold) under the coordinator lock; at d = 1e6 a body is 4 MB and the
 * accumulator 8 MB, well beyond the caches, so each extra pass was a trip to memory. The
 * caller takes the update out again (plain_unfold) in the rare cases where it is refused or
 * clipped. */
static uint64_t plain_fold(uint64_t *acc, const struct fl__coord_round_params *rp,
                           const uint8_t *b, double *n2) {
    size_t n = rp->vec_len, dim = rp->dim;
    uint64_t mod = (uint64_t)1 << rp->bits, mask = mod - 1;
    if (rp->bits <= 32) {
        uint32_t m32 = (uint32_t)mask, half = (uint32_t)(mod >> 1), mod32 = (uint32_t)mod;
        uint64_t hi, lo;
        uint32_t bad = plain_fold_words32(acc, b, dim, mask, half, mod32, &hi, &lo);
        for (size_t i = dim; i < n; i++) {
            uint32_t x = fl__get_u32le(b + i * 4);
            bad |= x & ~m32;
            acc[i] = (acc[i] + x) & mask;
        }
        *n2 = norm2_of(hi, lo);
        return bad;
    }
    uint64_t bad = 0;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = fl__get_u64le(b + i * 8);
        bad |= x & ~mask;
        acc[i] = (acc[i] + x) & mask;
        if (i < dim) {
            double z = (double)(x >= (mod >> 1) ? -(int64_t)(mod - x) : (int64_t)x);
            s += z * z;
        }
    }
    *n2 = s;
    return bad;
}

/* Takes back what plain_fold added: acc held values below 2^b, and (acc + x - x) mod 2^b is
 * acc again whatever x was, so the accumulator is exactly as before the update. */
static void plain_unfold(uint64_t *acc, const struct fl__coord_round_params *rp,
                         const uint8_t *b) {
    uint64_t mask = ((uint64_t)1 << rp->bits) - 1;
    if (rp->bits <= 32)
        for (size_t i = 0; i < rp->vec_len; i++)
            acc[i] = (acc[i] - fl__get_u32le(b + i * 4)) & mask;
    else
        for (size_t i = 0; i < rp->vec_len; i++)
            acc[i] = (acc[i] - fl__get_u64le(b + i * 8)) & mask;
}

/* Folds a plain update into the accumulator after validating every word; an update over
 * the norm bound goes in clipped (and is counted in flotilla_updates_clipped_total). The
 * refusals and the clipping are those of fl__coord_plain_validate, and a refused update
 * leaves the accumulator as it was. */
static int fold_plain(fl_coord *co, struct fl__coord_round *r, const uint8_t *b, size_t len,
                      struct fl__coord_reply *rep) {
    const struct fl__coord_round_params *rp = &r->rp;
    size_t wb = rp->bits <= 32 ? 4 : 8;
    uint64_t mask = ((uint64_t)1 << rp->bits) - 1;
    uint64_t w;
    int st = plain_shape(rp, b, len, rep, &w);
    if (st != 202)
        return st;
    uint64_t *acc = r->acc;
    double n2;
    uint64_t bad = plain_fold(acc, rp, b, &n2);
    double scale = bad ? 1.0 : plain_scale(rp, w, n2);
    if (bad || scale < 1.0)
        plain_unfold(acc, rp, b);
    if (bad)
        return plain_over_error(rp, b, rep);
    if (scale < 1.0) {
        for (size_t i = 0; i < rp->dim; i++)
            acc[i] = (acc[i] + (uint64_t)fl__coord_plain_value(rp, b, i, scale)) & mask;
        for (size_t i = rp->dim; i < rp->vec_len; i++)
            acc[i] = (acc[i] + (wb == 4 ? fl__get_u32le(b + i * 4) : fl__get_u64le(b + i * 8))) &
                     mask;
        atomic_fetch_add(&co->metrics.updates_clipped, 1);
        fl__log(&co->logger, FL_LOG_INFO, "round %lld: an update over the norm bound was "
                "clipped (scale %.3g)", (long long)r->id, scale);
    }
    r->received++;
    return 202;
}

/* The round binding of a plain update body (docs/protocol.md section 5.2, protocol 1.1):
 * "FLUP" || u32le(1) || u64le(round id) before the words. A body that names another round
 * (a device's update of an earlier round posted again) or lacks the header is refused with
 * 400 before anything is counted. Returns false with the error set in rep. */
static bool plain_header_ok(struct fl__coord_reply *rep, const uint8_t *b, size_t len,
                            int64_t rid) {
    if (len < FL__COORD_UPDATE_HEADER_BYTES || memcmp(b, "FLUP", 4) != 0 ||
        fl__get_u32le(b + 4) != 1) {
        fl__coord_error(rep, 400, "invalid_message", NULL,
                        "an update starts with the 16-byte header \"FLUP\", u32le 1, u64le "
                        "round id (protocol 1.1)");
        return false;
    }
    uint64_t named = fl__get_u64le(b + 8);
    if (named != (uint64_t)rid) {
        fl__coord_error(rep, 400, "invalid_message", NULL,
                        "the update names round %llu, not round %lld", (unsigned long long)named,
                        (long long)rid);
        return false;
    }
    return true;
}

/* Active rounds: true when an ADVERTISE body names the device registered to pt. The device
 * id sits at a fixed offset of the device-certificate ADVERTISE (docs/secagg.md "Wire
 * format": header, then c_pk s_pk vk cert sig device_id, 256 bytes). A body of another length
 * is not this check's to refuse: the server refuses it as malformed (true here). */
static bool advertise_names_device(const struct fl__coord_participant *pt,
                                   const struct fl__coord_req *rq) {
    const size_t body = 32 + 32 + FL_SECAGG_VERIFY_KEY_BYTES + FL_SECAGG_CERT_BYTES + 64;
    if (rq->body_len != FL_SECAGG_HEADER_BYTES + body + FL_SECAGG_DEVICE_ID_BYTES)
        return true;
    return fl_memeq_ct(rq->body + FL_SECAGG_HEADER_BYTES + body, pt->device_id,
                       FL_SECAGG_DEVICE_ID_BYTES) == 0;
}

/* Common part of secagg posts and plain updates (lock held). */
static int post_message(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep,
                        struct fl__coord_pop *p, struct fl__coord_round *r,
                        struct fl__coord_participant *pt, int k,
                        const fl_secagg_norm_ticket *ticket) {
    int64_t now = fl__coord_now(co);
    if (r->state == FL__ROUND_FORMING) {
        int64_t left = (r->forming_deadline - now) / 1000;
        rep->retry_after_s = (int)(left > 1 ? (left < 60 ? left : 60) : 1);
        return fl__coord_error(rep, 425, "phase_not_open", NULL,
                               "round %lld is still forming", (long long)r->id);
    }
    uint8_t h[FL__COORD_BODY_TAG_BYTES];
    if (rq->body_tagged)
        memcpy(h, rq->body_tag, sizeof(h));
    else
        fl__coord_body_tag(co, h, rq->body, rq->body_len);
    if (pt->posted & (1u << k)) {
        if (fl_memeq_ct(h, pt->hash[k], sizeof(h)) == 0)
            return reply_accepted(rep, r, k, 200);
        if (r->rp.buffered)
            return fl__coord_error(rep, 409, "already_submitted", NULL,
                                   "this device's update to buffer %lld was already accepted "
                                   "(one update per device per buffer)", (long long)r->id);
        return fl__coord_error(rep, 409, "already_submitted", NULL,
                               "a different message for phase %s was already accepted",
                               fl__coord_phase_names[k]);
    }
    if (terminal(r))
        return fl__coord_error(rep, 410, "round_closed", NULL, "round %lld has ended%s%s",
                               (long long)r->id, r->reason[0] ? ": " : "", r->reason);
    if (pt->dropped_at >= 0)
        return fl__coord_error(rep, 410, "round_closed", NULL,
                               "this client was dropped from the round in phase %s",
                               fl__coord_phase_names[pt->dropped_at]);
    if (r->rp.buffered) {
        if (now >= pt->deadline)
            return fl__coord_error(rep, 410, "round_closed", NULL,
                                   "the update deadline of this participation passed");
        if (rq->body_len == 0)
            return fl__coord_error(rep, 400, "invalid_message", NULL, "empty body");
        if (!plain_header_ok(rep, rq->body, rq->body_len, pt->sel_rid))
            return rep->status;
        memcpy(pt->hash[k], h, sizeof(h)); /* kept only if accepted (posted bit) */
        /* The answer first: the K-th update applies the buffer, and when the next buffer
         * then fails to open, retiring it frees this one (r, pt). A refusal replaces it. */
        reply_accepted(rep, r, k, 202);
        int st = fl__coord_buffer_fold(co, p, r, pt, rq->body + FL__COORD_UPDATE_HEADER_BYTES,
                                       rq->body_len - FL__COORD_UPDATE_HEADER_BYTES, rep);
        if (st != 202)
            return st;
        atomic_fetch_add(&co->metrics.updates_accepted, 1);
        atomic_fetch_add(&co->metrics.update_bytes, rq->body_len);
        return 202;
    }
    if (r->phase < k) {
        int64_t left = (r->phase_deadline[r->phase] - now) / 1000;
        rep->retry_after_s = (int)(left > 1 ? (left < 5 ? left : 5) : 1);
        return fl__coord_error(rep, 425, "phase_not_open", NULL, "phase %s has not started yet",
                               fl__coord_phase_names[k]);
    }
    if (r->phase > k || now >= r->phase_deadline[k])
        return fl__coord_error(rep, 410, "round_closed", NULL, "phase %s is closed",
                               r->rp.secagg ? fl__coord_phase_names[k] : "update");
    if (rq->body_len == 0)
        return fl__coord_error(rep, 400, "invalid_message", NULL, "empty body");
    int status;
    if (r->rp.secagg) {
        fl_secagg_msg_type type;
        uint64_t mrid;
        uint32_t from;
        if (fl_secagg_message_peek(&type, &mrid, &from, rq->body, rq->body_len) != FL_OK ||
            type != phase_msg_type(k) || mrid != (uint64_t)r->id || from != pt->index)
            return fl__coord_error(rep, 400, "invalid_message", NULL,
                                   "not a %s message of this client for round %lld",
                                   fl__coord_phase_names[k], (long long)r->id);
        if (r->rp.active && k == FL__PH_ADVERTISE && !advertise_names_device(pt, rq)) {
            /* Another device in this client's seat (another enrolled device's certificate):
             * refused before the server records it, and the participant is dropped, since
             * the server cannot un-seat an advertisement it accepted. */
            pt->evicted = true;
            pt->dropped_at = FL__PH_ADVERTISE;
            p->dropouts[FL__PH_ADVERTISE]++;
            fl__log(&co->logger, FL_LOG_WARN, "round %lld: participant %s advertised another "
                    "device; dropped", (long long)r->id, pt->client_id);
            fl__coord_error(rep, 400, "invalid_message", NULL,
                            "the advertisement names another device");
            maybe_close(co, p, now);
            return 400;
        }
        fl_status rc = ticket ? fl_secagg_server_receive_checked(r->sa, pt->index, rq->body,
                                                                 rq->body_len, ticket)
                              : fl_secagg_server_receive(r->sa, pt->index, rq->body,
                                                         rq->body_len);
        if (rc == FL_OK && r->rp.active && k == FL__PH_ADVERTISE) {
            /* The server's view of the seat must match what was checked above. */
            uint8_t dev[FL_SECAGG_DEVICE_ID_BYTES];
            if (fl_secagg_server_device_id(r->sa, pt->index, dev) != FL_OK ||
                fl_memeq_ct(dev, pt->device_id, sizeof(dev)) != 0) {
                /* Cannot happen when the wire format holds; the seat cannot be un-taken, so
                 * the round cannot go on with it. */
                fl__coord_round_abandon(co, p, "an advertisement names another device");
                return fl__coord_error(rep, 400, "invalid_message", NULL,
                                       "the advertisement names another device");
            }
        }
        switch (rc) {
        case FL_OK:
            status = 202;
            break;
        case FL_ERR_EXISTS:
            return fl__coord_error(rep, 409, "already_submitted", NULL,
                                   "phase %s already has a message from this client",
                                   fl__coord_phase_names[k]);
        case FL_ERR_ABORTED:
            return fl__coord_error(rep, 410, "round_closed", NULL, "secure aggregation failed");
        case FL_ERR_NOMEM:
            rep->retry_after_s = 2;
            return fl__coord_oom(rep);
        default:
            return fl__coord_error(rep, 400, "invalid_message", NULL, "%s message rejected: %s",
                                   fl__coord_phase_names[k], fl_secagg_server_errmsg(r->sa));
        }
    } else {
        if (!plain_header_ok(rep, rq->body, rq->body_len, r->id))
            return rep->status;
        status = fold_plain(co, r, rq->body + FL__COORD_UPDATE_HEADER_BYTES,
                            rq->body_len - FL__COORD_UPDATE_HEADER_BYTES, rep);
        if (status != 202)
            return status;
    }
    memcpy(pt->hash[k], h, sizeof(h));
    pt->posted |= (uint8_t)(1u << k);
    if (k == FL__PH_MASKED) {
        atomic_fetch_add(&co->metrics.updates_accepted, 1);
        atomic_fetch_add(&co->metrics.update_bytes, rq->body_len);
    }
    reply_accepted(rep, r, k, 202);
    maybe_close(co, p, now);
    return 202;
}

static bool octet_stream(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && strcmp(ct, "application/octet-stream") != 0) {
        fl__coord_error(rep, 415, "unsupported_media_type", "Content-Type",
                        "messages are application/octet-stream");
        return false;
    }
    return true;
}

/* A masked input with a norm proof costs about 0.3 ms per proven bit to check, so it
 * is checked before the lock is taken, against a copy of the round's secagg config; the
 * receive under the lock then only hashes the message (fl_secagg_server_receive_checked). A
 * proof that does not verify (or a message too long for one) is answered 400 here. Anything
 * else (no such participant, not a norm round, a header for another round or client, out of
 * memory) is left to the locked path, which answers it as usual. Returns false with the
 * answer in rep. */
static bool norm_precheck(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep,
                          const struct fl__coord_client_auth *ca, int64_t rid,
                          fl_secagg_norm_ticket *ticket) {
    struct fl__coord_pop *p = NULL;
    struct fl__coord_round *r = NULL;
    fl_secagg_config cfg;
    uint32_t index = 0;
    bool norm = false;
    struct fl__coord_reply scratch; /* the locked path answers any refusal again */
    memset(&scratch, 0, sizeof(scratch));
    scratch.retry_after_s = -1;
    fl__coord_lock(co);
    struct fl__coord_participant *pt = fl__coord_participant_of(rq, &scratch, ca, rid, &p, &r);
    /* Not for a device whose masked input is in already: the locked path answers the replay
     * (200) or the conflict (409) without anyone paying for a verification. */
    if (pt && r->sa && r->sa_cfg.norm_bits && !(pt->posted & (1u << FL__PH_MASKED))) {
        cfg = r->sa_cfg;
        index = pt->index;
        norm = true;
    }
    fl__coord_unlock(co);
    fl__coord_reply_clear(co, &scratch);
    if (!norm)
        return true;
    char why[200];
    fl_status st = fl_secagg_norm_check(ticket, &cfg, (uint64_t)rid, index, rq->body,
                                        rq->body_len, fl__coord_pub_alloc(co), why,
                                        sizeof(why));
    if (st == FL_ERR_CRYPTO || st == FL_ERR_FORMAT || st == FL_ERR_TOO_LARGE) {
        atomic_fetch_add(&co->metrics.norm_proofs_refused, 1);
        fl__coord_error(rep, 400, "invalid_message", NULL, "masked message rejected: %s", why);
        return false;
    }
    return true;
}

int fl__coord_h_secagg_post(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int64_t rid;
    int k = phase_of_name(rq->seg[4]);
    if (k < 0)
        return fl__coord_error(rep, 404, "not_found", "phase", "no secagg phase '%.32s'",
                               rq->seg[4]);
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    if (!fl__coord_parse_id(rq->seg[2], &rid))
        return fl__coord_error(rep, 400, "invalid_parameter", "round_id",
                               "round id must be a positive integer");
    if (!octet_stream(rq, rep))
        return rep->status;
    int status;
    struct fl__coord_pop *p = NULL;
    struct fl__coord_round *r = NULL;
    fl_secagg_norm_ticket ticket;
    memset(&ticket, 0, sizeof(ticket));
    if (k == FL__PH_MASKED && !norm_precheck(co, rq, rep, &ca, rid, &ticket))
        return rep->status;
    fl__coord_lock(co);
    struct fl__coord_participant *pt = fl__coord_participant_of(rq, rep, &ca, rid, &p, &r);
    if (!pt) {
        status = rep->status;
    } else if (!r->rp.secagg) {
        status = fl__coord_error(rep, 404, "not_found", NULL,
                                 "round %lld has no secure aggregation: POST .../update",
                                 (long long)rid);
    } else if (k == FL__PH_CONSISTENCY && !r->rp.active) {
        status = fl__coord_error(rep, 404, "not_found", "phase",
                                 "round %lld has no consistency phase", (long long)rid);
    } else {
        status = post_message(co, rq, rep, p, r, pt, k, &ticket);
    }
    fl__coord_unlock(co);
    return status;
}

int fl__coord_h_update(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int64_t rid;
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    if (!fl__coord_parse_id(rq->seg[2], &rid))
        return fl__coord_error(rep, 400, "invalid_parameter", "round_id",
                               "round id must be a positive integer");
    if (!octet_stream(rq, rep))
        return rep->status;
    int status;
    struct fl__coord_pop *p = NULL;
    struct fl__coord_round *r = NULL;
    fl__coord_lock(co);
    struct fl__coord_participant *pt = fl__coord_participant_of(rq, rep, &ca, rid, &p, &r);
    if (!pt)
        status = rep->status;
    else if (r->rp.secagg)
        status = fl__coord_error(rep, 404, "not_found", NULL,
                                 "round %lld uses secure aggregation: POST .../secagg/{phase}",
                                 (long long)rid);
    else
        status = post_message(co, rq, rep, p, r, pt, FL__PH_MASKED, NULL);
    fl__coord_unlock(co);
    return status;
}

/* ---- results and status (long polls) ---- */

static int reply_outcome(struct fl__coord_reply *rep, const struct fl__coord_round *r) {
    json_t *o = outcome_json(r);
    if (!o)
        return fl__coord_oom(rep);
    return fl__coord_json(rep, 200, o);
}

/* Sets the long-poll end on the first call; true when the poll has time left. */
static bool poll_time_left(struct fl__coord_req *rq, int wait_s) {
    int64_t now = fl__coord_mono_ms();
    if (rq->wait_until == 0)
        rq->wait_until = now + (int64_t)wait_s * 1000;
    return wait_s > 0 && now < rq->wait_until && !atomic_load(&rq->co->stopped);
}

static int reply_no_content(struct fl__coord_reply *rep) {
    rep->retry_after_s = 0;
    rep->status = 204;
    return 204;
}

int fl__coord_h_secagg_result(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int64_t rid;
    int wait_s;
    int k = phase_of_name(rq->seg[4]);
    if (k < 0)
        return fl__coord_error(rep, 404, "not_found", "phase", "no secagg phase '%.32s'",
                               rq->seg[4]);
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    if (!fl__coord_parse_id(rq->seg[2], &rid))
        return fl__coord_error(rep, 400, "invalid_parameter", "round_id",
                               "round id must be a positive integer");
    if (!wait_param(rq, rep, 30, &wait_s))
        return rep->status;
    int status;
    struct fl__coord_pop *p = NULL;
    struct fl__coord_round *r = NULL;
    fl__coord_lock(co);
    struct fl__coord_participant *pt = fl__coord_participant_of(rq, rep, &ca, rid, &p, &r);
    if (!pt) {
        status = rep->status;
        goto out_unlock;
    }
    if (!r->rp.secagg || (k == FL__PH_CONSISTENCY && !r->rp.active)) {
        status = fl__coord_error(rep, 404, "not_found", "phase", "round %lld has no %s phase",
                                 (long long)rid, fl__coord_phase_names[k]);
        goto out_unlock;
    }
    if (k == FL__PH_UNMASK && terminal(r)) {
        status = reply_outcome(rep, r);
        goto out_unlock;
    }
    bool closed = r->state != FL__ROUND_FORMING && r->phase > k &&
                  !(k == FL__PH_UNMASK && r->phase == FL__PH_DONE);
    if (closed && pt->result[k]) {
        /* Copied under the lock: closing the next phase frees the cached message. */
        rep->bytes_owned = fl__alloc(fl__coord_alloc(co), pt->result_len[k]);
        rep->owned_size = pt->result_len[k];
        if (!rep->bytes_owned) {
            rep->retry_after_s = 1;
            status = fl__coord_oom(rep);
            goto out_unlock;
        }
        memcpy(rep->bytes_owned, pt->result[k], pt->result_len[k]);
        rep->bytes = (const uint8_t *)rep->bytes_owned;
        rep->len = pt->result_len[k];
        rep->content_type = "application/octet-stream";
        rep->status = status = 200;
        goto out_unlock;
    }
    if (closed || terminal(r) || (pt->dropped_at >= 0 && pt->dropped_at <= k)) {
        status = fl__coord_error(rep, 410, "round_closed", NULL,
                                 "no %s result for this client%s%s", fl__coord_phase_names[k],
                                 r->reason[0] ? ": " : "", r->reason);
        goto out_unlock;
    }
    if (!poll_time_left(rq, wait_s)) {
        status = reply_no_content(rep);
        goto out_unlock;
    }
    status = park(rq, rep, rid, k);
out_unlock:
    fl__coord_unlock(co);
    return status;
}

int fl__coord_h_status(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int64_t rid;
    int wait_s;
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    if (!fl__coord_parse_id(rq->seg[2], &rid))
        return fl__coord_error(rep, 400, "invalid_parameter", "round_id",
                               "round id must be a positive integer");
    if (!wait_param(rq, rep, 0, &wait_s))
        return rep->status;
    int status;
    struct fl__coord_pop *p = NULL;
    struct fl__coord_round *r = NULL;
    fl__coord_lock(co);
    struct fl__coord_participant *pt = fl__coord_participant_of(rq, rep, &ca, rid, &p, &r);
    if (!pt && rep->status == 410) /* not in memory: storage */
        status = fl__coord_status_stored(
            co, rep, &ca, rid,
            MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Idempotency-Key"));
    else if (!pt)
        status = rep->status;
    else if (terminal(r) || !poll_time_left(rq, wait_s))
        status = reply_outcome(rep, r);
    else
        status = park(rq, rep, rid, -1);
    fl__coord_unlock(co);
    return status;
}
