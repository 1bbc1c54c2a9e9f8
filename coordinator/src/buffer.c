/* Asynchronous buffered aggregation (FedBuff; Nguyen et al., "Federated Learning with
 * Buffered Asynchronous Aggregation", AISTATS 2022) for populations without secure
 * aggregation (docs/protocol.md section 5.4).
 *
 * There are no round barriers. The population always has one open buffer (a storage round
 * in state RUNNING). A device that checks in gets the current model version v and a
 * participation; it trains and posts its update (section 5.2 encoding) tagged, through its
 * participation, with v. When the update arrives the model may have moved on to version c;
 * its staleness is s = c - v. Updates with s > max_staleness are refused (410
 * stale_update); the others are decoded at once and added into the buffer with weight
 * 1 / (1 + s)^alpha. When K (buffer_size) updates are in, the buffer becomes one model
 * step: delta = (sum of weighted decoded updates) x granularity / K (or / the sum of
 * weights with "examples" weighting), w += server_lr x delta, committed like a round (new
 * model version, tag, round record, participants), and the next buffer opens. Devices
 * still training keep their participation: it moves into the new buffer.
 *
 * Privacy: the update is folded into the buffer's sum inside the request and the request
 * buffer is freed with the request; nothing per device is kept but the SHA-256 of the
 * accepted bytes (idempotent retries).
 *
 * Central DP (privacy.mode "central"; docs/dp.md "FedBuff"). A device has at most one update
 * in a buffer: check-in gives it one participation per buffer, and the fold refuses a
 * second contribution from the same client. Its update is clipped to the bound B of
 * synchronous central rounds (fl__coord_plain_validate / fl__coord_plain_value, the same
 * code), then weighted; the flush adds the discrete Gaussian noise of a synchronous round
 * (sigma = noise_multiplier x B on the lattice, fl_dp_central_noise) to the buffer's integer
 * sum and divides by the fixed K (aggregate.c). Each flush is charged to the ledger as one
 * discrete-Gaussian step with q = 1, in the flush's commit, and the budget is checked when
 * a buffer opens and again right before it flushes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

fl_status fl__coord_buffer_open(fl_coord *co, struct fl__coord_pop *p, int64_t now,
                                struct fl__coord_round *prev) {
    char why[400] = "";
    fl_status rc = fl__coord_round_create(co, p, now, why, sizeof(why));
    if (rc != FL_OK)
        return rc;
    struct fl__coord_round *r = p->round;
    if (fl__coord_round_run(co, p, now) != FL_OK || p->round != r)
        return FL_ERR_STATE; /* abandoned (logged) */
    if (!prev)
        return FL_OK;
    /* Devices still training keep their participation (same id, round id, base version
     * and deadline); it now belongs to this buffer. */
    for (size_t i = 0; i < prev->n && r->n < r->cap; i++) {
        const struct fl__coord_participant *o = &prev->parts[i];
        if (o->dropped_at >= 0 || (o->posted & (1u << FL__PH_MASKED)) || now >= o->deadline)
            continue;
        struct fl__coord_participant *pt = &r->parts[r->n];
        memcpy(pt->client_id, o->client_id, sizeof(pt->client_id));
        memcpy(pt->pid, o->pid, sizeof(pt->pid));
        pt->sel_rid = o->sel_rid;
        pt->base_version = o->base_version;
        pt->deadline = o->deadline;
        pt->index = (uint32_t)r->n;
        pt->dropped_at = -1;
        r->n++;
    }
    return FL_OK;
}

void fl__coord_buffer_tick(fl_coord *co, struct fl__coord_pop *p, int64_t now) {
    struct fl__coord_round *r = p->round;
    (void)co;
    if (!r || !r->rp.buffered)
        return;
    /* Participations past their deadline without an update are dropped (a late post gets
     * 410); their slots are reclaimed when a check-in needs one. */
    for (size_t i = 0; i < r->n; i++) {
        struct fl__coord_participant *pt = &r->parts[i];
        if (!(pt->posted & (1u << FL__PH_MASKED)) && pt->dropped_at < 0 && now >= pt->deadline) {
            pt->dropped_at = FL__PH_MASKED;
            p->dropouts[FL__PH_MASKED]++;
        }
    }
}

void fl__coord_buffer_compact(struct fl__coord_round *r) {
    size_t out = 0;
    for (size_t i = 0; i < r->n; i++) {
        struct fl__coord_participant *pt = &r->parts[i];
        if (!(pt->posted & (1u << FL__PH_MASKED)) && pt->dropped_at >= 0)
            continue;
        if (out != i)
            r->parts[out] = *pt;
        r->parts[out].index = (uint32_t)out;
        out++;
    }
    for (size_t i = out; i < r->n; i++) {
        memset(&r->parts[i], 0, sizeof(r->parts[i]));
        r->parts[i].dropped_at = -1;
    }
    r->n = out;
}

/* Before a DP buffer is applied (lock held): the privacy budget is checked again, as when
 * the buffer opened, since it may have been lowered meanwhile (PATCH). A refused flush is
 * treated like a synchronous round refused for its budget: nothing is applied or charged,
 * the buffer is abandoned with the reason, the population shows budget_exhausted with the
 * reason in round_error, and no next buffer opens until a check passes. Returns true when
 * the flush may go on. */
static bool flush_allowed(fl_coord *co, struct fl__coord_pop *p, struct fl__coord_round *r,
                          int64_t now) {
    if (r->rp.dp == FL__DP_NONE)
        return true;
    char why[400] = "";
    fl_status rc = fl__coord_budget_check(co, p, r, why, sizeof(why));
    if (rc == FL_OK)
        return true;
    if (!why[0])
        snprintf(why, sizeof(why), "privacy budget check failed: %s", fl_status_str(rc));
    fl__log(&co->logger, rc == FL_ERR_BUDGET ? FL_LOG_WARN : FL_LOG_ERROR,
            "population %s: buffer %lld not applied: %s", p->name, (long long)r->id, why);
    fl__coord_round_abandon(co, p, why);
    if (rc == FL_ERR_BUDGET) {
        p->budget_exhausted = true;
        atomic_fetch_add(&co->metrics.rounds_refused_budget, 1);
    }
    snprintf(p->round_error, sizeof(p->round_error), "%s", why);
    p->round_error_at = now;
    p->next_round_at = now + 60 * 1000;
    return false;
}

/* True when another participation of pt's client in r already contributed. Check-in hands a
 * client one participation per buffer, so this holds by construction; the fold still checks
 * it, since one update per device per buffer is what the central-DP sensitivity rests on. */
static bool client_contributed(const struct fl__coord_round *r,
                               const struct fl__coord_participant *pt) {
    for (size_t i = 0; i < r->n; i++) {
        const struct fl__coord_participant *o = &r->parts[i];
        if (o != pt && (o->posted & (1u << FL__PH_MASKED)) &&
            strcmp(o->client_id, pt->client_id) == 0)
            return true;
    }
    return false;
}

int fl__coord_buffer_fold(fl_coord *co, struct fl__coord_pop *p, struct fl__coord_round *r,
                          struct fl__coord_participant *pt, const uint8_t *b, size_t len,
                          struct fl__coord_reply *rep) {
    const struct fl__coord_round_params *rp = &r->rp;
    uint64_t w = 0;
    double scale = 1.0;
    if (client_contributed(r, pt))
        return fl__coord_error(rep, 409, "already_submitted", NULL,
                               "this device already has an update in buffer %lld (one update "
                               "per device per buffer); check in again after it is applied",
                               (long long)r->id);
    int st = fl__coord_plain_validate(rp, b, len, rep, &w, &scale);
    if (st != 202)
        return st;
    int64_t s = p->model_version - pt->base_version;
    if (s < 0)
        s = 0;
    if (s > rp->max_staleness) {
        pt->dropped_at = FL__PH_MASKED;
        atomic_fetch_add(&co->metrics.stale_rejected, 1);
        return fl__coord_error(rep, 410, "stale_update", NULL,
                               "the update was trained on model version %lld, %lld versions "
                               "behind the current %lld (max_staleness %lld); check in again",
                               (long long)pt->base_version, (long long)s,
                               (long long)p->model_version, (long long)rp->max_staleness);
    }
    double f = 1.0 / pow(1.0 + (double)s, rp->staleness_alpha);
    /* Over the norm bound: folded clipped, as in synchronous plain rounds. */
    /* Central DP: f = 1/(1+s)^alpha <= 1 (s >= 0, alpha >= 0), so a weighted update is no
     * longer than the clipped one and cannot raise the sensitivity above B. The weight goes
     * on the clipped integer update before any noise, rounded toward zero (|trunc(f x)| <=
     * |x|, so the norm stays <= f B <= B) so that the buffer sum stays on the integer
     * lattice the discrete Gaussian needs; the cost is a bias toward zero below one lattice
     * step per coordinate of a stale update (none when f = 1). */
    fl__coord_plain_accumulate(rp, b, scale, f, rp->dp == FL__DP_CENTRAL, r->bnum);
    if (scale < 1.0)
        atomic_fetch_add(&co->metrics.updates_clipped, 1);
    r->bwsum += (double)w;
    r->received++;
    pt->posted |= (uint8_t)(1u << FL__PH_MASKED);
    if (r->received < rp->buffer_k)
        return 202;
    /* K contributions: one model step on the current version, then the next buffer. */
    int64_t now = fl__coord_now(co);
    if (!flush_allowed(co, p, r, now))
        return 202; /* accepted into a buffer that was then abandoned (its status says so) */
    r->base_version = p->model_version;
    r->phase = FL__PH_DONE;
    fl__coord_round_aggregate(co, p, NULL, r->received);
    if (p->last == r) {
        for (size_t i = 0; i < r->n; i++)
            if ((r->parts[i].posted & (1u << FL__PH_MASKED)) && r->parts[i].sel_rid != r->id)
                fl__coord_waiters_wake(co, r->parts[i].sel_rid, -1);
        fl_status orc = p->running && !atomic_load(&co->stopped)
                            ? fl__coord_buffer_open(co, p, now, r)
                            : FL_OK;
        /* A budget refusal was logged (and shown on the population) by the round start. */
        if (orc != FL_OK && orc != FL_ERR_BUDGET)
            fl__log(&co->logger, FL_LOG_ERROR, "population %s: the next buffer did not open; "
                    "the next check-in retries", p->name);
    }
    return 202;
}
