/* Device and admin endpoints: enrollment, check-in with selection and pace steering, task
 * config and model downloads (signed), and the admin API. Every handler validates its whole
 * input before it changes anything. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>
#include <sodium.h>

#include "coord_internal.h"

static int store_fail(fl_coord *co, struct fl__coord_reply *rep, fl_status rc) {
    if (rc == FL_ERR_BUSY) {
        rep->retry_after_s = 2;
        return fl__coord_error(rep, 503, "unavailable", NULL, "database busy");
    }
    if (rc == FL_ERR_NOMEM)
        return fl__coord_oom(rep);
    fl__log(&co->logger, FL_LOG_ERROR, "storage: %s", fl_store_errmsg(co->store));
    if (rc == FL_ERR_IO) {
        /* A full disk, a failed write or fsync: the service's condition, not the request's
         * fault nor a bug; devices back off and retry. */
        rep->retry_after_s = 5;
        return fl__coord_error(rep, 503, "storage_unavailable", NULL,
                               "storage cannot write now (disk full or I/O error)");
    }
    return fl__coord_error(rep, 500, "internal", NULL, "database error");
}

static const char *opt_string(json_t *o, const char *key, size_t max, bool *bad) {
    json_t *v = json_object_get(o, key);
    if (!v)
        return NULL;
    if (!json_is_string(v) || json_string_length(v) > max) {
        *bad = true;
        return NULL;
    }
    return json_string_value(v);
}

/* ---- enrollment ---- */

/* Enrolment limits of p at now (lock held): 403 enrollment_closed when max_clients are
 * enrolled, 429 rate_limited (retry_after_s) when the max_per_minute bucket is empty.
 * Returns 0 when the enrolment may go ahead (the caller then takes a token with
 * enroll_take), else the status set in rep. */
static int enroll_limits(fl_coord *co, struct fl__coord_pop *p, int64_t now,
                         struct fl__coord_reply *rep) {
    if (p->enroll_max_clients > 0) {
        int64_t n = 0;
        fl_status rc = fl_store_population_client_count(co->store, p->id, &n);
        if (rc != FL_OK)
            return store_fail(co, rep, rc);
        if (n >= p->enroll_max_clients)
            return fl__coord_error(rep, 403, "enrollment_closed", NULL,
                                   "population '%s' has its %lld clients (enrollment.max_clients)",
                                   p->name, (long long)p->enroll_max_clients);
    }
    if (p->enroll_per_minute > 0) {
        double cap = (double)p->enroll_per_minute;
        if (p->enroll_refill_at == 0 || now < p->enroll_refill_at) {
            p->enroll_tokens = p->enroll_refill_at == 0 ? cap : p->enroll_tokens;
            p->enroll_refill_at = now; /* first use, or the clock went back */
        }
        p->enroll_tokens += (double)(now - p->enroll_refill_at) * cap / 60000.0;
        if (p->enroll_tokens > cap)
            p->enroll_tokens = cap;
        p->enroll_refill_at = now;
        if (p->enroll_tokens < 1.0) {
            double wait_ms = (1.0 - p->enroll_tokens) * 60000.0 / cap;
            rep->retry_after_s = (int)ceil(wait_ms / 1000.0 - 1e-6); /* float slack */
            if (rep->retry_after_s < 1)
                rep->retry_after_s = 1;
            /* counted in flotilla_http_requests_total{route="enroll",code="429"} */
            return fl__coord_error(rep, 429, "rate_limited", NULL,
                                   "population '%s' takes at most %lld enrolments a minute",
                                   p->name, (long long)p->enroll_per_minute);
        }
    }
    return 0;
}

/* Takes one enrolment from p's bucket (after a successful enrolment; lock held). */
static void enroll_take(struct fl__coord_pop *p) {
    if (p->enroll_per_minute > 0)
        p->enroll_tokens -= 1.0;
}

/* Reads the optional "secagg_identity" of an enrollment body: device_id (64 hex), verify_key
 * (64 hex) and cert (128 hex), each checked for its exact length before it is decoded.
 * *has is false when the field is absent. false with a 400 in rep on a malformed one. */
static bool parse_identity(json_t *body, fl_store_client_identity *id, bool *has,
                           struct fl__coord_reply *rep) {
    static const char *const keys[3] = {"device_id", "verify_key", "cert"};
    uint8_t *out[3] = {id->device_id, id->verify_key, id->cert};
    const size_t len[3] = {sizeof(id->device_id), sizeof(id->verify_key), sizeof(id->cert)};
    json_t *o = json_object_get(body, "secagg_identity");
    *has = o != NULL;
    if (!o)
        return true;
    if (!json_is_object(o))
        return fl__coord_error(rep, 400, "invalid_field", "secagg_identity",
                               "'secagg_identity' must be an object {device_id, verify_key, "
                               "cert}"), false;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (!v || !json_is_string(v) || json_string_length(v) != 2 * len[i] ||
            !fl__coord_unhex(out[i], len[i], json_string_value(v)))
            return fl__coord_error(rep, 400, "invalid_field", "secagg_identity",
                                   "'secagg_identity.%s' must be %zu hex characters", keys[i],
                                   2 * len[i]), false;
    }
    return true;
}

int fl__coord_h_enroll(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    const char *tok = fl__coord_bearer(rq);
    if (!tok)
        return fl__coord_error(rep, 401, "unauthorized", "Authorization",
                               "population enrollment token required");
    json_t *body = fl__coord_parse_body(rq, rep);
    if (!body)
        return rep->status;
    int status;
    bool bad = false;
    json_t *jp = json_object_get(body, "population");
    json_t *jr = json_object_get(body, "region");
    const char *platform = opt_string(body, "platform", 32, &bad);
    if (bad) {
        status = fl__coord_error(rep, 400, "invalid_field", "platform",
                                 "'platform' must be a string of at most 32 characters");
        goto out;
    }
    opt_string(body, "sdk_version", 32, &bad);
    if (bad) {
        status = fl__coord_error(rep, 400, "invalid_field", "sdk_version",
                                 "'sdk_version' must be a string of at most 32 characters");
        goto out;
    }
    if (!jp || !jr) {
        status = fl__coord_error(rep, 400, "missing_field", jp ? "region" : "population",
                                 "'%s' is required", jp ? "region" : "population");
        goto out;
    }
    if (!json_is_string(jp) ||
        !fl__coord_valid_name(json_string_value(jp), FL__COORD_NAME_MAX, true)) {
        status = fl__coord_error(rep, 400, "invalid_field", "population",
                                 "'population' must be 1-64 characters [A-Za-z0-9_.-]");
        goto out;
    }
    if (!json_is_string(jr) ||
        !fl__coord_valid_name(json_string_value(jr), FL__COORD_REGION_MAX, false)) {
        status = fl__coord_error(rep, 400, "invalid_field", "region",
                                 "'region' must be 1-32 characters [A-Za-z0-9_-]");
        goto out;
    }
    const char *region = json_string_value(jr);
    fl_store_client_identity ident;
    bool has_ident = false;
    memset(&ident, 0, sizeof(ident));
    uint8_t h[32];
    fl__coord_sha256(h, tok, strlen(tok));
    fl__coord_lock(co);
    struct fl__coord_pop *p = fl__coord_pop_find(co, json_string_value(jp));
    if (!p || fl_memeq_ct(h, p->enroll_hash, 32) != 0) {
        status = fl__coord_error(rep, 401, "unauthorized", "Authorization",
                                 "enrollment token does not match the population");
        goto out_unlock;
    }
    if (!fl__coord_region_allowed(p, region)) {
        atomic_fetch_add(&co->metrics.checkins[FL__CHK_REJECTED], 0);
        status = fl__coord_error(rep, 403, "region_not_allowed", "region",
                                 "population '%s' does not accept region '%s'", p->name, region);
        goto out_unlock;
    }
    /* Active-adversary SecAgg: the device's v2 certificate must verify under the population's
     * authority key before anything is written. Elsewhere the identity is ignored (not even
     * parsed). */
    if (p->active && !parse_identity(body, &ident, &has_ident, rep)) {
        status = rep->status;
        goto out_unlock;
    }
    if (p->active && !has_ident) {
        status = fl__coord_error(rep, 400, "invalid_field", "secagg_identity",
                                 "population '%s' requires 'secagg_identity' (secagg "
                                 "consistency_check: device certificates)", p->name);
        goto out_unlock;
    }
    if (p->active && fl_secagg_cert_check_device(ident.cert, p->authority_key, ident.device_id,
                                                 ident.verify_key,
                                                 FL_SECAGG_BACKEND_DEFAULT) != FL_OK) {
        status = fl__coord_error(rep, 400, "invalid_field", "secagg_identity",
                                 "'secagg_identity': the certificate does not verify under the "
                                 "population's authority key");
        goto out_unlock;
    }
    status = enroll_limits(co, p, fl__coord_now(co), rep);
    if (status != 0)
        goto out_unlock;
    uint8_t idb[8], secret[32];
    char cid[FL__COORD_CLIENT_ID_CHARS + 1], sec[FL__COORD_SECRET_CHARS + 1];
    char token[4 + FL__COORD_CLIENT_ID_CHARS + 1 + FL__COORD_SECRET_CHARS + 1];
    fl_status rc;
    /* With an identity, the client row and its identity are one transaction: a device id
     * already registered in the population leaves no client behind. */
    bool own_tx = p->active && !fl_store_in_transaction(co->store);
    rc = own_tx ? fl_store_begin(co->store) : FL_OK;
    for (int attempt = 0; rc == FL_OK; attempt++) {
        fl__coord_random(idb, sizeof(idb));
        fl__coord_random(secret, sizeof(secret));
        fl__coord_hex(cid, idb, 8);
        fl__coord_b64url(sec, secret, sizeof(secret));
        snprintf(token, sizeof(token), "flc_%s.%s", cid, sec);
        rc = fl_store_client_enroll(co->store, cid, token, strlen(token), region, p->id);
        if (rc != FL_ERR_EXISTS || attempt == 3)
            break;
    }
    bool device_taken = false;
    if (rc == FL_OK && p->active) {
        rc = fl_store_client_identity_put(co->store, cid, &ident);
        device_taken = rc == FL_ERR_EXISTS; /* a fresh client has none: the device is taken */
    }
    if (own_tx) {
        if (rc == FL_OK)
            rc = fl_store_commit(co->store);
        if (rc != FL_OK && fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
    }
    fl_memzero(secret, sizeof(secret));
    fl_memzero(sec, sizeof(sec));
    if (rc != FL_OK) {
        fl_memzero(token, sizeof(token));
        status = device_taken ? fl__coord_error(rep, 409, "conflict", "secagg_identity",
                                                "device already enrolled in population '%s'",
                                                p->name)
                              : store_fail(co, rep, rc);
        goto out_unlock;
    }
    p->clients++;
    enroll_take(p);
    atomic_fetch_add(&co->metrics.enrollments, 1);
    fl__log(&co->logger, FL_LOG_INFO, "client %s enrolled in %s (%s, %s)", cid, p->name, region,
            platform ? platform : "unknown platform");
    status = fl__coord_json(rep, 201,
                            json_pack("{s:s, s:s, s:s, s:s, s:s}", "client_id", cid,
                                      "client_token", token, "population", p->name,
                                      "coordinator_key_id", co->key_id, "protocol",
                                      "flotilla/v1"));
    fl_memzero(token, sizeof(token));
out_unlock:
    fl__coord_unlock(co);
out:
    json_decref(body);
    return status;
}

/* ---- check-in ---- */

static int clamp_retry(const struct fl__coord_pop *p, int64_t base_s) {
    int64_t s = base_s + (p->sel.jitter_s > 0
                              ? (int64_t)fl__coord_random_below((uint32_t)p->sel.jitter_s + 1)
                              : 0);
    if (s < p->sel.min_retry_s)
        s = p->sel.min_retry_s;
    if (s > p->sel.max_retry_s)
        s = p->sel.max_retry_s;
    return (int)s;
}

static int reply_retry(fl_coord *co, struct fl__coord_reply *rep, int retry_s,
                       const char *reason) {
    atomic_fetch_add(&co->metrics.checkins[FL__CHK_RETRY], 1);
    rep->retry_after_s = retry_s;
    return fl__coord_json(rep, 200, json_pack("{s:s, s:i, s:s}", "status", "retry",
                                              "retry_after_s", retry_s, "reason", reason));
}

static int reply_selected(fl_coord *co, struct fl__coord_reply *rep, struct fl__coord_pop *p,
                          const struct fl__coord_participant *pt) {
    struct fl__coord_round *r = p->round;
    char task_url[64], model_url[128];
    snprintf(task_url, sizeof(task_url), "/v1/rounds/%lld/task", (long long)pt->sel_rid);
    snprintf(model_url, sizeof(model_url), "/v1/models/%s/%lld", p->name,
             (long long)pt->base_version);
    atomic_fetch_add(&co->metrics.checkins[FL__CHK_SELECTED], 1);
    return fl__coord_json(
        rep, 200,
        json_pack("{s:s, s:I, s:s, s:s, s:s, s:{s:I}}", "status", "selected", "round_id",
                  (json_int_t)pt->sel_rid, "participation_id", pt->pid, "task_url", task_url,
                  "model_url", model_url, "deadlines",
                  r->rp.buffered ? "masked_unix_ms" : "advertise_unix_ms",
                  (json_int_t)(r->rp.buffered ? pt->deadline
                                              : r->forming_deadline +
                                                    p->deadlines_s[0] * 1000)));
}

/* Validates the check-in body into facts; sets a 400 on failure. */
struct checkin_facts {
    const char *region;
    unsigned elig;        /* FL__ELIG_* that are true */
    int64_t examples;     /* -1 = not given */
    bool secagg;
    int64_t max_model_bytes; /* -1 = not given */
};

static bool checkin_parse(json_t *b, struct checkin_facts *f, struct fl__coord_reply *rep) {
    json_t *jr = json_object_get(b, "region");
    if (!jr)
        return fl__coord_error(rep, 400, "missing_field", "region", "'region' is required"), false;
    if (!json_is_string(jr) || !fl__coord_valid_name(json_string_value(jr), FL__COORD_REGION_MAX,
                                                     false))
        return fl__coord_error(rep, 400, "invalid_field", "region",
                               "'region' must be 1-32 characters [A-Za-z0-9_-]"), false;
    f->region = json_string_value(jr);
    json_t *e = json_object_get(b, "eligibility");
    if (!e)
        return fl__coord_error(rep, 400, "missing_field", "eligibility",
                               "'eligibility' is required"), false;
    if (!json_is_object(e))
        return fl__coord_error(rep, 400, "invalid_field", "eligibility",
                               "'eligibility' must be an object"), false;
    static const char *const facts[3] = {"charging", "unmetered", "idle"};
    static const char *const fields[3] = {"eligibility.charging", "eligibility.unmetered",
                                          "eligibility.idle"};
    f->elig = 0;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(e, facts[i]);
        if (!v || !json_is_boolean(v))
            return fl__coord_error(rep, 400, v ? "invalid_field" : "missing_field", fields[i],
                                   "'%s' must be true or false", fields[i]), false;
        if (json_is_true(v))
            f->elig |= 1u << i;
    }
    json_t *bp = json_object_get(e, "battery_pct");
    if (bp && (!json_is_integer(bp) || json_integer_value(bp) < 0 || json_integer_value(bp) > 100))
        return fl__coord_error(rep, 400, "invalid_field", "eligibility.battery_pct",
                               "'eligibility.battery_pct' must be an integer 0-100"), false;
    json_t *ex = json_object_get(e, "examples");
    if (ex && (!json_is_integer(ex) || json_integer_value(ex) < 0))
        return fl__coord_error(rep, 400, "invalid_field", "eligibility.examples",
                               "'eligibility.examples' must be an integer >= 0"), false;
    f->examples = ex ? json_integer_value(ex) : -1;
    bool bad = false;
    opt_string(b, "sdk_version", 32, &bad);
    if (bad)
        return fl__coord_error(rep, 400, "invalid_field", "sdk_version",
                               "'sdk_version' must be a string of at most 32 characters"), false;
    f->secagg = true;
    f->max_model_bytes = -1;
    json_t *cap = json_object_get(b, "capabilities");
    if (cap) {
        if (!json_is_object(cap))
            return fl__coord_error(rep, 400, "invalid_field", "capabilities",
                                   "'capabilities' must be an object"), false;
        json_t *sa = json_object_get(cap, "secagg");
        if (sa && !json_is_boolean(sa))
            return fl__coord_error(rep, 400, "invalid_field", "capabilities.secagg",
                                   "'capabilities.secagg' must be true or false"), false;
        f->secagg = !sa || json_is_true(sa);
        json_t *mm = json_object_get(cap, "max_model_bytes");
        if (mm && (!json_is_integer(mm) || json_integer_value(mm) < 0))
            return fl__coord_error(rep, 400, "invalid_field", "capabilities.max_model_bytes",
                                   "'capabilities.max_model_bytes' must be an integer >= 0"),
                   false;
        f->max_model_bytes = mm ? json_integer_value(mm) : -1;
    }
    return true;
}

/* Creates a forming round for p (lock held): fixes its parameters from the population
 * config and base model, and asks the dp accountant whether the round fits the privacy
 * budget. A round that cannot run leaves nothing in storage; why says why (logged). */
fl_status fl__coord_round_create(fl_coord *co, struct fl__coord_pop *p, int64_t now, char *why,
                                 size_t why_len) {
    /* Rounds end in the audit log in order: an abandonment that could not be written (disk
     * full) is written before the next round exists, or no round starts. */
    if (p->abandon_pending) {
        fl_status arc = fl__coord_abandon_unfinished(co, p, p->abandon_reason);
        if (arc != FL_OK) /* a storage failure: the caller answers 503 */
            return arc == FL_ERR_BUSY ? arc : FL_ERR_IO;
        p->abandon_pending = false;
    }
    struct fl__coord_round *r = fl__calloc(fl__coord_alloc(co), 1, sizeof(*r));
    if (!r)
        return FL_ERR_NOMEM;
    double capd = (double)p->sel.target * p->sel.over_selection;
    r->cap = (size_t)capd;
    if ((double)r->cap < capd)
        r->cap++;
    if (p->buffered) {
        /* A buffer holds the devices training now plus the K updates it folds. */
        json_t *st = json_object_get(p->config, "strategy");
        r->rp.buffered = true;
        r->rp.buffer_k = (uint32_t)json_integer_value(json_object_get(st, "buffer_size"));
        r->rp.max_inflight = (uint32_t)json_integer_value(json_object_get(st, "max_concurrency"));
        r->rp.max_staleness = json_integer_value(json_object_get(st, "max_staleness"));
        r->rp.staleness_alpha = json_number_value(json_object_get(st, "staleness_alpha"));
        r->cap = (size_t)r->rp.max_inflight + r->rp.buffer_k;
    }
    r->parts = fl__calloc(fl__coord_alloc(co), r->cap, sizeof(*r->parts));
    if (!r->parts) {
        fl__free(fl__coord_alloc(co), r, sizeof(*r));
        return FL_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->cap; i++)
        r->parts[i].dropped_at = -1;
    if (!p->buffered && fl__coord_round_index_init(co, r) != FL_OK) {
        fl__free(fl__coord_alloc(co), r->parts, r->cap * sizeof(*r->parts));
        fl__free(fl__coord_alloc(co), r, sizeof(*r));
        return FL_ERR_NOMEM;
    }
    r->base_version = p->model_version;
    fl_status prc = fl__coord_round_params_init(co, p, r, why, why_len);
    if (prc == FL_OK)
        prc = fl__coord_budget_check(co, p, r, why, why_len);
    if (prc == FL_ERR_NOMEM) {
        /* Transient: the check-in gets a 503 and the next one tries again (no pause). */
        why[0] = '\0';
        fl__coord_round_free(co, r);
        return prc;
    }
    if (prc != FL_OK) {
        if (prc == FL_ERR_BUDGET) {
            p->budget_exhausted = true;
            atomic_fetch_add(&co->metrics.rounds_refused_budget, 1);
        }
        if (!why[0])
            snprintf(why, why_len, "round parameters: %s", fl_status_str(prc));
        fl__log(&co->logger, prc == FL_ERR_BUDGET ? FL_LOG_WARN : FL_LOG_ERROR,
                "population %s: round not started: %s", p->name, why);
        /* Operators read it from the population (GET .../populations/{name}). */
        snprintf(p->round_error, sizeof(p->round_error), "%s", why);
        p->round_error_at = now;
        p->next_round_at = now + 60 * 1000;
        fl__coord_round_free(co, r);
        return prc;
    }
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "{\"target\":%lld,\"cap\":%zu,\"min_participants\":%lld}",
             (long long)p->sel.target, r->cap, (long long)p->sel.min_participants);
    fl_status rc = fl_store_round_create(co->store, &r->id, p->id, 0, p->model_version, cfg);
    if (rc != FL_OK) {
        fl__coord_round_free(co, r);
        return rc;
    }
    r->state = FL__ROUND_FORMING;
    r->created_at = now;
    p->round_error[0] = '\0';
    p->round_error_at = 0;
    r->forming_deadline = now + p->sel.forming_s * 1000;
    fl__coord_random(r->session_id, sizeof(r->session_id));
    p->round = r;
    fl__log(&co->logger, FL_LOG_INFO, "round %lld of %s forming (cap %zu)", (long long)r->id,
            p->name, r->cap);
    return FL_OK;
}

/* Check-in to a buffered (FedBuff) population (lock held): the device gets a participation
 * in the open buffer on the current model version, unless max_concurrency devices are
 * training already. A device with a live participation gets it again; one whose update is
 * in the open buffer waits for the next buffer. */
static int checkin_buffered(fl_coord *co, struct fl__coord_reply *rep, struct fl__coord_pop *p,
                            const char *client_id, int64_t now) {
    struct fl__coord_round *r = p->round;
    if (!r) {
        /* As for synchronous rounds: a refused budget is checked again after a minute. */
        if (p->budget_exhausted && now < p->next_round_at)
            return reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "budget_exhausted");
        fl_status rc = fl__coord_buffer_open(co, p, now, NULL);
        p->budget_exhausted = rc == FL_ERR_BUDGET;
        if (rc == FL_ERR_BUDGET)
            return reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "budget_exhausted");
        if (rc == FL_ERR_BUSY || rc == FL_ERR_NOMEM || rc == FL_ERR_IO)
            return store_fail(co, rep, rc);
        if (rc != FL_OK || !p->round)
            return reply_retry(co, rep, clamp_retry(p, 60), "no_round_forming");
        r = p->round;
    }
    struct fl__coord_participant *pt = NULL;
    size_t inflight = 0;
    fl__coord_buffer_tick(co, p, now);
    if (r->n >= r->cap)
        fl__coord_buffer_compact(r);
    for (size_t i = 0; i < r->n; i++) {
        struct fl__coord_participant *q = &r->parts[i];
        bool live = !(q->posted & (1u << FL__PH_MASKED)) && q->dropped_at < 0 &&
                    now < q->deadline;
        inflight += live;
        if (strcmp(q->client_id, client_id) != 0)
            continue;
        if (live)
            return reply_selected(co, rep, p, q);
        if (q->posted & (1u << FL__PH_MASKED))
            return reply_retry(co, rep, clamp_retry(p, p->sel.min_retry_s), "round_full");
        pt = q; /* expired or dropped: the slot is reused for a fresh participation */
    }
    if (!pt && (inflight >= r->rp.max_inflight || r->n >= r->cap))
        return reply_retry(co, rep, clamp_retry(p, p->sel.min_retry_s), "round_full");
    if (pt && inflight >= r->rp.max_inflight)
        return reply_retry(co, rep, clamp_retry(p, p->sel.min_retry_s), "round_full");
    /* The id is drawn first so that its hash is recorded with the selection. */
    uint8_t pid[16], ph[32];
    char pid_hex[FL__COORD_PID_CHARS + 1];
    fl__coord_random(pid, sizeof(pid));
    fl__coord_hex(pid_hex, pid, sizeof(pid));
    fl_status rc = fl_store_participant_set_v2(co->store, r->id, client_id,
                                               FL_STORE_PARTICIPANT_SELECTED,
                                               fl__coord_pid_hash(ph, pid_hex));
    if (rc != FL_OK)
        return store_fail(co, rep, rc);
    if (!pt) {
        pt = &r->parts[r->n];
        pt->index = (uint32_t)r->n;
        r->n++;
    }
    uint32_t index = pt->index;
    memset(pt, 0, sizeof(*pt));
    pt->index = index;
    pt->dropped_at = -1;
    snprintf(pt->client_id, sizeof(pt->client_id), "%s", client_id);
    memcpy(pt->pid, pid_hex, sizeof(pt->pid));
    pt->sel_rid = r->id;
    pt->base_version = p->model_version;
    pt->deadline = now + p->deadlines_s[FL__PH_MASKED] * 1000;
    return reply_selected(co, rep, p, pt);
}

int fl__coord_h_checkin(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int status;
    json_t *body = NULL;
    struct checkin_facts f;
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    body = fl__coord_parse_body(rq, rep);
    if (!body)
        return rep->status;
    if (!checkin_parse(body, &f, rep)) {
        json_decref(body);
        return rep->status;
    }
    int64_t now = fl__coord_now(co);
    if (!fl__coord_pace_check(co, ca.client_id, now, rep)) {
        json_decref(body);
        return rep->status;
    }
    fl__coord_lock(co);
    struct fl__coord_pop *p = fl__coord_pop_by_id(co, ca.population_id);
    if (!p) {
        status = fl__coord_error(rep, 401, "token_revoked", "Authorization",
                                 "the client's population is closed");
        goto out_unlock;
    }
    if (!fl__coord_region_allowed(p, f.region)) {
        atomic_fetch_add(&co->metrics.checkins[FL__CHK_REJECTED], 1);
        status = fl__coord_error(rep, 403, "region_not_allowed", "region",
                                 "population '%s' does not accept region '%s'", p->name,
                                 f.region);
        goto out_unlock;
    }
    struct fl__coord_round *r = p->round;
    if (r && !p->buffered) {
        struct fl__coord_participant *again = fl__coord_round_find(r, ca.client_id);
        if (again) {
            status = reply_selected(co, rep, p, again);
            goto out_unlock;
        }
    }
    if (!p->running || p->model_version == 0) {
        status = reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "population_stopped");
        goto out_unlock;
    }
    if ((f.elig & p->sel.require) != p->sel.require ||
        (f.examples >= 0 && f.examples < p->sel.min_examples) ||
        (f.examples < 0 && p->sel.min_examples > 0)) {
        status = reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "not_eligible");
        goto out_unlock;
    }
    json_t *sa = json_object_get(p->config, "secagg");
    if (!f.secagg && json_is_true(json_object_get(sa, "enabled"))) {
        status = reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "secagg_required");
        goto out_unlock;
    }
    if (p->buffered) {
        status = checkin_buffered(co, rep, p, ca.client_id, now);
        goto out_unlock;
    }
    if (!r) {
        if (p->budget_exhausted && now < p->next_round_at) {
            status = reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "budget_exhausted");
            goto out_unlock;
        }
        if (now < p->next_round_at) {
            status = reply_retry(co, rep, clamp_retry(p, (p->next_round_at - now) / 1000),
                                 "no_round_forming");
            goto out_unlock;
        }
        char why[400] = "";
        fl_status rc = fl__coord_round_create(co, p, now, why, sizeof(why));
        p->budget_exhausted = rc == FL_ERR_BUDGET;
        if (rc == FL_ERR_BUDGET) {
            status = reply_retry(co, rep, clamp_retry(p, p->sel.max_retry_s), "budget_exhausted");
            goto out_unlock;
        }
        if (rc != FL_OK && why[0]) {
            /* The population cannot run rounds as configured (logged once per minute). */
            status = reply_retry(co, rep, clamp_retry(p, 60), "no_round_forming");
            goto out_unlock;
        }
        if (rc != FL_OK) {
            status = store_fail(co, rep, rc);
            goto out_unlock;
        }
        r = p->round;
    }
    if (r->state != FL__ROUND_FORMING || r->n >= r->cap) {
        int64_t left = r->state == FL__ROUND_RUNNING ? (r->run_deadline - now) / 1000 : 0;
        status = reply_retry(co, rep, clamp_retry(p, left > 0 ? left : 0), "round_full");
        goto out_unlock;
    }
    /* Selection lives in memory: the participants reach storage with the round's outcome
     * (one transaction at commit, or at abandon), not one synchronous write each. A crash
     * before then abandons the round at restart, and nothing of it was used. */
    struct fl__coord_participant *pt = fl__coord_round_add(r, ca.client_id);
    uint8_t pid[16];
    fl__coord_random(pid, sizeof(pid));
    fl__coord_hex(pt->pid, pid, sizeof(pid));
    pt->sel_rid = r->id;
    pt->base_version = r->base_version;
    /* This device fills the round: start it before answering, so that a start that fails
     * (the round is then abandoned) is not answered "selected". */
    fl_status sr = fl__coord_round_maybe_start(co, p, now);
    if (sr == FL_OK)
        status = reply_selected(co, rep, p, pt);
    else if (sr == FL_ERR_STATE)
        status = reply_retry(co, rep, clamp_retry(p, 60), "no_round_forming");
    else
        status = store_fail(co, rep, sr);
out_unlock:
    fl__coord_unlock(co);
    /* Pace steering: a retry answer sets when the client may come back (else 429). */
    fl__coord_pace_set(co, ca.client_id, now, status == 200 ? rep->retry_after_s : 0);
    if (body)
        json_decref(body);
    return status;
}

/* ---- signed downloads ---- */

static void sign_body(fl_coord *co, struct fl__coord_reply *rep, const char *ctx, uint64_t id,
                      const void *body, size_t len) {
    uint8_t msg[FL__COORD_SIGNED_MAX], sig[64], h[32];
    size_t n = 0;
    fl__coord_sha256(h, body, len);
    fl__coord_signed_message_h(msg, &n, ctx, id, h);
    crypto_sign_detached(sig, NULL, msg, n, co->sign_sk);
    fl__coord_b64(rep->sig_b64, sizeof(rep->sig_b64), sig, sizeof(sig));
    fl__coord_hex(rep->sha_hex, h, 32);
}

int fl__coord_h_model(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int status;
    int64_t version;
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    fl__coord_lock(co);
    struct fl__coord_pop *p = fl__coord_pop_by_id(co, ca.population_id);
    if (!p || strcmp(p->name, rq->seg[2]) != 0 || !fl__coord_parse_id(rq->seg[3], &version)) {
        status = fl__coord_error(rep, 404, "not_found", NULL, "no such model");
        goto out_unlock;
    }
    /* The current version comes from memory, signed once; older ones from storage. */
    struct fl__coord_blob *b = NULL;
    fl_status rc = fl__coord_model_blob(co, p, version, &b);
    if (rc == FL_ERR_NOT_FOUND) {
        status = fl__coord_error(rep, 404, "not_found", NULL, "no such model version");
        goto out_unlock;
    }
    if (rc == FL_ERR_NOMEM) {
        status = fl__coord_oom(rep);
        goto out_unlock;
    }
    if (rc != FL_OK) {
        status = store_fail(co, rep, rc);
        goto out_unlock;
    }
    snprintf(rep->etag, sizeof(rep->etag), "\"%s\"", b->sha_hex);
    const char *inm = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "If-None-Match");
    if (inm && strcmp(inm, rep->etag) == 0) {
        rep->status = 304;
        status = 304;
    } else {
        fl__coord_reply_blob(rep, b, "application/octet-stream");
        status = 200;
        atomic_fetch_add(&co->metrics.model_bytes_out, b->len);
    }
    fl__coord_blob_unref(b);
out_unlock:
    fl__coord_unlock(co);
    return status;
}

/* Builds the task config of docs/protocol.md section 4.2 for one participant of the running
 * round: everything the device needs to train, encode and mask exactly as the round's
 * aggregation will decode. */
static json_t *task_json(fl_coord *co, struct fl__coord_pop *p,
                         const struct fl__coord_participant *pt) {
    struct fl__coord_round *r = p->round;
    const struct fl__coord_round_params *rp = &r->rp;
    json_t *cfg = p->config;
    json_t *pr = json_object_get(cfg, "privacy");
    json_t *st = json_object_get(cfg, "strategy");
    json_t *up = json_object_get(cfg, "update");
    char sid[64], rseed[64], qseed[64], model_url[128];
    fl__coord_b64(sid, sizeof(sid), r->session_id, 32);
    fl__coord_b64(rseed, sizeof(rseed), rp->rotation_seed, 32);
    fl__coord_b64(qseed, sizeof(qseed), rp->quant_seed, 32);
    int64_t mv = pt->base_version;
    if (co->debug_task_model && rp->secagg) {
        /* Tests only: play a coordinator that gives this participant another model. */
        int64_t alt = co->debug_task_model(co->debug_task_model_user, r->id, pt->index, mv);
        if (alt > 0)
            mv = alt;
    }
    snprintf(model_url, sizeof(model_url), "/v1/models/%s/%lld", p->name, (long long)mv);
    /* Jansson's setters fail quietly under memory pressure; a task missing a member would
     * still be signed and sent, so every failure is collected and the task refused. */
    int bad = 0;
#define FL__TSET(o, k, v) (bad |= json_object_set_new((o), (k), (v)) != 0)
    json_t *training = json_deep_copy(json_object_get(cfg, "training"));
    json_t *mu = json_object_get(st, "proximal_mu");
    FL__TSET(training, "optimizer", json_string("sgd"));
    FL__TSET(training, "proximal_mu", json_real(mu ? json_number_value(mu) : 0.0));
    json_t *tensors = json_array();
    for (size_t i = 0; i < rp->n_tensors; i++)
        bad |= json_array_append_new(tensors, json_string(rp->tensors[i])) != 0;
    json_t *update = json_pack("{s:o, s:I, s:I, s:O, s:O}", "tensors", tensors, "length",
                               (json_int_t)rp->vec_len, "dim", (json_int_t)rp->dim, "weighting",
                               json_object_get(up, "weighting"), "weight_cap",
                               json_object_get(up, "weight_cap"));
    const char *mode = rp->dp == FL__DP_DISTRIBUTED ? "distributed"
                       : rp->dp == FL__DP_CENTRAL   ? "central"
                                                    : "none";
    json_t *dp = json_pack("{s:s, s:f, s:s, s:I, s:f, s:f}", "mode", mode, "clip_norm", rp->clip,
                           "clip_kind", "flat", "modulus_bits", (json_int_t)rp->bits,
                           "granularity", rp->granularity, "beta", rp->beta);
    if (dp && rp->dp != FL__DP_NONE)
        FL__TSET(dp, "noise_multiplier", json_real(rp->noise_multiplier));
    if (dp && rp->dp == FL__DP_DISTRIBUTED) {
        FL__TSET(dp, "mechanism", json_string("discrete_gaussian"));
        FL__TSET(dp, "client_sigma",
                 json_real(sqrt((double)rp->sigma2_num / (double)rp->sigma2_den)));
        FL__TSET(dp, "client_variance_num", json_integer((json_int_t)rp->sigma2_num));
        FL__TSET(dp, "client_variance_den", json_integer((json_int_t)rp->sigma2_den));
        FL__TSET(dp, "min_survivors", json_integer(rp->n_min));
        FL__TSET(dp, "rotation",
                 json_pack("{s:s, s:s}", "kind", "hadamard", "seed", rseed));
        FL__TSET(dp, "quantization_seed", json_string(qseed));
    } else if (dp) {
        FL__TSET(dp, "rotation", json_pack("{s:s}", "kind", "none"));
    }
    json_t *sa = json_pack("{s:b}", "enabled", rp->secagg ? 1 : 0);
    if (sa && rp->secagg) {
        FL__TSET(sa, "session_id", json_string(sid));
        FL__TSET(sa, "client_index", json_integer(pt->index));
        FL__TSET(sa, "num_clients", json_integer((json_int_t)r->n));
        FL__TSET(sa, "neighbors", json_integer(rp->degree));
        FL__TSET(sa, "threshold", json_integer(rp->threshold));
        FL__TSET(sa, "modulus_bits", json_integer(rp->bits));
        FL__TSET(sa, "vector_length", json_integer((json_int_t)rp->vec_len));
        if (rp->active) {
            /* Active mode: devices pin the authority key from their own configuration,
             * never from the coordinator, so the task does not carry it. */
            FL__TSET(sa, "consistency_check", json_true());
            FL__TSET(sa, "device_certs", json_true());
        }
        if (rp->reveal_seeds)
            FL__TSET(sa, "reveal_pair_seeds", json_true());
        if (rp->norm_bits)
            FL__TSET(sa, "norm_proof",
                     json_pack("{s:I, s:I, s:I, s:I}", "bits", (json_int_t)rp->norm_bits,
                               "dim", (json_int_t)rp->dim, "bound2",
                               (json_int_t)rp->norm_bound2, "weight_max",
                               (json_int_t)rp->norm_weight_max));
    }
    int64_t bdl[FL__PH_COUNT];
    for (int k = 0; k < FL__PH_COUNT; k++)
        bdl[k] = pt->deadline;
    const int64_t *dl = rp->buffered ? bdl : r->phase_deadline;
    json_t *t = json_pack(
        "{s:s, s:s, s:I, s:s, s:{s:I, s:s}, s:O, s:o, s:o, s:o, s:o,"
        " s:{s:I, s:I, s:I, s:I, s:I}}",
        "protocol", "flotilla/v1", "population", p->name, "round_id", (json_int_t)pt->sel_rid,
        "kind", rp->buffered ? "buffered" : "sync", "model", "version", (json_int_t)mv, "url",
        model_url,
        "data_schema", json_object_get(cfg, "data_schema") ? json_object_get(cfg, "data_schema")
                                                           : json_null(),
        "training", training, "update", update, "dp", dp, "secagg", sa,
        "deadlines", "advertise_unix_ms", (json_int_t)dl[0], "share_unix_ms", (json_int_t)dl[1],
        "masked_unix_ms", (json_int_t)dl[2], "consistency_unix_ms", (json_int_t)dl[3],
        "unmask_unix_ms", (json_int_t)dl[4]);
    /* The model's SHA-256 and size, so a device can check its cached copy or the download
     * before it trains (docs/protocol.md section 4.2). */
    struct fl__coord_blob *mb = NULL;
    if (t && fl__coord_model_blob(co, p, mv, &mb) != FL_OK) {
        bad = 1;
    } else if (t) {
        json_t *mo = json_object_get(t, "model");
        FL__TSET(mo, "sha256", json_string(mb->sha_hex));
        FL__TSET(mo, "bytes", json_integer((json_int_t)mb->len));
    }
    fl__coord_blob_unref(mb);
    if (t && rp->buffered)
        FL__TSET(t, "buffered",
                 json_pack("{s:i, s:I, s:f}", "buffer_size", (int)rp->buffer_k,
                           "max_staleness", (json_int_t)rp->max_staleness, "staleness_alpha",
                           rp->staleness_alpha));
#undef FL__TSET
    (void)pr;
    if (t && bad) {
        json_decref(t);
        t = NULL;
    }
    return t;
}

int fl__coord_h_task(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    struct fl__coord_client_auth ca;
    int status;
    int64_t rid;
    struct fl__coord_pop *p = NULL;
    struct fl__coord_round *r = NULL;
    if (!fl__coord_auth_client(rq, rep, &ca))
        return rep->status;
    if (!fl__coord_parse_id(rq->seg[2], &rid))
        return fl__coord_error(rep, 400, "invalid_parameter", "round_id",
                               "round id must be a positive integer");
    fl__coord_lock(co);
    struct fl__coord_participant *pt = fl__coord_participant_of(rq, rep, &ca, rid, &p, &r);
    if (!pt) {
        status = rep->status;
        goto out_unlock;
    }
    if (r->state == FL__ROUND_FORMING) {
        /* The secagg graph (num_clients) is fixed only when the round starts. */
        /* Short: the round starts as soon as it fills, usually well before its deadline. */
        rep->retry_after_s = 1;
        status = fl__coord_error(rep, 425, "phase_not_open", NULL,
                                 "round %lld is still forming; fetch the task when it starts",
                                 (long long)rid);
        goto out_unlock;
    }
    if (r != p->round) {
        status = fl__coord_error(rep, 410, "round_closed", NULL, "round %lld has ended",
                                 (long long)rid);
        goto out_unlock;
    }
    if (r->task) {
        fl__coord_reply_blob(rep, r->task, "application/json");
        status = 200;
        goto out_unlock;
    }
    json_t *t = task_json(co, p, pt);
    char *text = t ? fl__coord_json_dumps(co, t, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (t)
        json_decref(t);
    /* The blob or the reply frees it (the size with its NUL, as it was allocated). */
    size_t text_size = text ? strlen(text) + 1 : 0;
    if (!text) {
        rep->retry_after_s = 1;
        status = fl__coord_error(rep, 503, "unavailable", NULL,
                                 "could not build the task (out of memory or storage)");
        goto out_unlock;
    }
    if (!r->rp.secagg && !r->rp.buffered) {
        /* Every participant of a plain synchronous round gets the same bytes: build and
         * sign them once. */
        struct fl__coord_blob *b = fl__coord_blob_wrap(co, (uint8_t *)text, text_size);
        if (b)
            b->len = text_size - 1; /* the body: without the NUL */
        if (!b) {
            status = fl__coord_oom(rep);
            goto out_unlock;
        }
        uint8_t h[32];
        b->id = rid;
        fl__coord_sha256(h, b->data, b->len);
        fl__coord_blob_sign(co, b, "flotilla/v1/task", h);
        r->task = b;
        fl__coord_reply_blob(rep, b, "application/json");
        status = 200;
        goto out_unlock;
    }
    rep->bytes_owned = text;
    rep->owned_size = text_size;
    rep->bytes = (const uint8_t *)text;
    rep->len = text_size - 1;
    rep->content_type = "application/json";
    rep->status = status = 200;
    sign_body(co, rep, "flotilla/v1/task", (uint64_t)rid, rep->bytes, rep->len);
out_unlock:
    fl__coord_unlock(co);
    return status;
}

/* ---- admin ---- */

/* Minimal safetensors check: u64le header length, JSON object header inside the buffer. */
static bool safetensors_ok(const uint8_t *b, size_t n) {
    if (n < 10)
        return false;
    uint64_t h = fl__get_u64le(b);
    if (h < 2 || h > n - 8 || h > 100u * 1024 * 1024)
        return false;
    json_t *j = json_loadb((const char *)b + 8, (size_t)h, 0, NULL);
    bool ok = j && json_is_object(j);
    if (j)
        json_decref(j);
    return ok;
}

static int admin_create(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    json_t *body = fl__coord_parse_body(rq, rep);
    if (!body)
        return rep->status;
    int status;
    char *cfg_text = NULL, *regions_text = NULL;
    struct fl__coord_pop *p = fl__calloc(fl__coord_alloc(co), 1, sizeof(*p));
    if (!p) {
        status = fl__coord_oom(rep);
        goto out;
    }
    if (!fl__coord_pop_parse(co, p, body, rep)) {
        status = rep->status;
        goto out;
    }
    uint8_t secret[32], h[32];
    char sec[FL__COORD_SECRET_CHARS + 1], token[4 + FL__COORD_SECRET_CHARS + 1], hex[65];
    fl__coord_random(secret, sizeof(secret));
    fl__coord_b64url(sec, secret, sizeof(secret));
    snprintf(token, sizeof(token), "flp_%s", sec);
    fl__coord_sha256(h, token, strlen(token));
    memcpy(p->enroll_hash, h, 32);
    fl__coord_hex(hex, h, 32);
    json_t *stored = json_deep_copy(p->config);
    json_object_set_new(stored, "enrollment_token_sha256", json_string(hex));
    cfg_text = fl__coord_json_dumps(co, stored, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(stored);
    json_t *regs = json_deep_copy(json_object_get(p->config, "allowed_regions"));
    if (p->any_region)
        json_array_clear(regs);
    regions_text = fl__coord_json_dumps(co, regs, JSON_COMPACT);
    json_decref(regs);
    if (!cfg_text || !regions_text) {
        status = fl__coord_oom(rep);
        goto out;
    }
    json_t *pr = json_object_get(p->config, "privacy");
    bool dp = strcmp(json_string_value(json_object_get(pr, "mode")), "none") != 0;
    /* Without DP the store still wants a finite budget: a large one the audit log can
     * state (epsilon 1e9, fixed point 1e18), never approached since such rounds spend 0. */
    double eps = dp ? json_number_value(json_object_get(pr, "epsilon_budget")) : 1e9;
    double delta = dp ? json_number_value(json_object_get(pr, "delta")) : 0.0;
    fl__coord_lock(co);
    if (fl__coord_pop_find(co, p->name)) {
        fl__coord_unlock(co);
        status = fl__coord_error(rep, 409, "conflict", "name", "population '%s' exists", p->name);
        goto out;
    }
    /* Room in memory first: once committed, the population must not be refused. */
    if (co->n_pops == co->cap_pops) {
        size_t nc = co->cap_pops ? co->cap_pops * 2 : 8;
        struct fl__coord_pop **np = fl__realloc(fl__coord_alloc(co), co->pops,
                                                co->cap_pops * sizeof(*np), nc * sizeof(*np));
        if (!np) {
            fl__coord_unlock(co);
            status = fl__coord_oom(rep);
            goto out;
        }
        co->pops = np;
        co->cap_pops = nc;
    }
    fl_status rc = fl_store_begin(co->store);
    if (rc == FL_OK)
        rc = fl_store_population_create(co->store, &p->id, p->name, cfg_text, eps, delta,
                                        regions_text);
    if (rc == FL_OK)
        rc = fl_store_population_set_state(co->store, p->id, FL_STORE_POPULATION_PAUSED);
    if (rc == FL_OK)
        rc = fl_store_audit_append_population(co->store, NULL, p->id);
    if (rc == FL_OK)
        rc = fl_store_commit(co->store);
    if (rc != FL_OK) {
        if (fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
        status = rc == FL_ERR_EXISTS
                     ? fl__coord_error(rep, 409, "conflict", "name", "population exists")
                     : store_fail(co, rep, rc);
        fl__coord_unlock(co);
        goto out;
    }
    co->pops[co->n_pops++] = p;
    fl__coord_epsilon_refresh(co, p);
    fl__coord_audit_checkpoint(co);
    fl__log(&co->logger, FL_LOG_INFO, "population %s created", p->name);
    status = fl__coord_json(rep, 201, json_pack("{s:o, s:s}", "population",
                                                fl__coord_pop_state_json(co, p),
                                                "enrollment_token", token));
    p = NULL;
    fl__coord_unlock(co);
out:
    /* Every path: the 409 and storage-failure ones also leave the token on the stack. */
    fl_memzero(token, sizeof(token));
    fl_memzero(sec, sizeof(sec));
    fl_memzero(secret, sizeof(secret));
    fl__coord_text_free(co, cfg_text);
    fl__coord_text_free(co, regions_text);
    fl__coord_pop_free(co, p);
    json_decref(body);
    return status;
}

static int admin_upload_model(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep,
                              struct fl__coord_pop *p) {
    const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && strcmp(ct, "application/octet-stream") != 0)
        return fl__coord_error(rep, 415, "unsupported_media_type", "Content-Type",
                               "models are application/octet-stream");
    if (!safetensors_ok(rq->body, rq->body_len))
        return fl__coord_error(rep, 400, "invalid_message", NULL,
                               "body is not a safetensors file");
    fl_store_model_ref ref;
    char tag[FL__COORD_NAME_MAX + 16];
    snprintf(tag, sizeof(tag), "population/%s", p->name);
    fl_status rc = fl_store_begin(co->store);
    if (rc == FL_OK)
        rc = fl_store_model_put(co->store, &ref, p->id, p->model_version, rq->body, rq->body_len,
                                "{\"source\":\"admin\"}");
    if (rc == FL_OK)
        rc = fl_store_tag_set(co->store, tag, ref.version);
    if (rc == FL_OK && !p->audit_off)
        rc = fl_store_audit_append_model(co->store, NULL, p->id, ref.version);
    if (rc == FL_OK)
        rc = fl_store_commit(co->store);
    if (rc != FL_OK) {
        if (fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
        return store_fail(co, rep, rc);
    }
    p->model_version = ref.version;
    fl__coord_audit_checkpoint(co);
    fl__log(&co->logger, FL_LOG_INFO, "population %s: model version %lld", p->name,
            (long long)ref.version);
    return fl__coord_json(rep, 201, json_pack("{s:I, s:s}", "version", (json_int_t)ref.version,
                                              "sha256", ref.sha256_hex));
}

static const char *round_state_name(fl_store_round_state s) {
    switch (s) {
    case FL_STORE_ROUND_OPEN: return "forming";
    case FL_STORE_ROUND_RUNNING: return "running";
    case FL_STORE_ROUND_COMPLETED: return "completed";
    case FL_STORE_ROUND_ABANDONED: return "abandoned";
    }
    return "unknown";
}

static json_t *round_json(fl_coord *co, const fl_store_round *r) {
    struct fl__coord_pop *p = fl__coord_pop_by_id(co, r->population_id);
    json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:I}", "round_id", (json_int_t)r->id,
                          "population", p ? p->name : "", "round_number",
                          (json_int_t)r->round_number, "state", round_state_name(r->state),
                          "base_model_version", (json_int_t)r->base_version, "selected",
                          (json_int_t)r->counts.selected, "started_unix_ms",
                          (json_int_t)r->created_at);
    if (!o)
        return NULL;
    json_object_set_new(o, "new_model_version",
                        r->result_version ? json_integer(r->result_version) : json_null());
    json_object_set_new(o, "ended_unix_ms", r->ended_at ? json_integer(r->ended_at) : json_null());
    json_object_set_new(o, "reason",
                        r->abandon_reason ? json_string(r->abandon_reason) : json_null());
    json_object_set_new(o, "checked_in", json_integer((json_int_t)r->counts.checked_in));
    json_object_set_new(o, "completed", json_integer((json_int_t)r->counts.completed));
    json_object_set_new(o, "dropped", json_integer((json_int_t)r->counts.dropped));
    /* Live figures of a round this process holds (current or a finished one kept):
     * selected, accepted per phase and dropped per phase. */
    const struct fl__coord_round *mr = p ? fl__coord_round_lookup(p, r->id) : NULL;
    if (mr) {
        json_t *acc = json_object(), *drop = json_object();
        for (int k = 0; k < FL__PH_COUNT; k++) {
            int64_t a = 0, d = 0;
            for (size_t i = 0; i < mr->n; i++) {
                a += (mr->parts[i].posted >> k) & 1u;
                d += mr->parts[i].dropped_at == k;
            }
            json_object_set_new(acc, fl__coord_phase_names[k], json_integer(a));
            json_object_set_new(drop, fl__coord_phase_names[k], json_integer(d));
        }
        json_object_set_new(o, "phase_counts", acc);
        json_object_set_new(o, "dropped_by_phase", drop);
        if (mr == p->round)
            json_object_set_new(o, "selected", json_integer((json_int_t)mr->n));
        json_object_set_new(o, "participants", json_integer((json_int_t)mr->n));
    } else {
        json_object_set_new(o, "phase_counts", json_null());
        json_object_set_new(o, "dropped_by_phase", json_null());
        json_object_set_new(o, "participants", json_integer((json_int_t)r->counts.selected));
    }
    return o;
}

/* ---- outcome of a round no longer in memory ---- */

/* Storage holds per round its state, result version, counts and abandonment reason, and
 * per participant its state (selected, completed, dropped): enough for the fields of the
 * outcome (round.c outcome_json), built the same way: participants are the round's
 * completed count once completed (the survivors), its selected count otherwise. Not the
 * participation id but its hash (schema version 6, fl__coord_pid_hash): the Idempotency-Key
 * must hash to it, compared in constant time, as the id itself is in memory. A row written
 * before the hash was stored has none, and there the token's client id is all that is
 * checked (the key must still be present, checked before). A round that never started keeps
 * its selection in memory until it ends (api.c check-in); after a crash its devices are
 * not recorded, so an unrecorded caller of such a round keeps the 410 it got before (it
 * cannot be told apart from one selected before the crash). So does one of a round that
 * ended before the retention window: the sweep (audit.c) deleted its participations. */
int fl__coord_status_stored(fl_coord *co, struct fl__coord_reply *rep,
                            const struct fl__coord_client_auth *ca, int64_t rid,
                            const char *key) {
    struct fl__coord_pop *p = fl__coord_pop_by_id(co, ca->population_id);
    fl_store_round *sr = NULL;
    fl_store_participant *sp = NULL;
    uint8_t stored[FL_STORE_PARTICIPATION_HASH_BYTES], presented[32];
    int has_hash = 0;
    int status = rep->status;
    if (!p || p->buffered)
        return status; /* buffered participations are found by their own id (round.c) */
    fl_status rc = fl_store_round_get(co->store, &sr, rid);
    if (rc == FL_ERR_NOT_FOUND)
        goto out;
    if (rc != FL_OK) {
        fl__coord_reply_clear(co, rep);
        status = store_fail(co, rep, rc);
        goto out;
    }
    bool ended = sr->state == FL_STORE_ROUND_COMPLETED || sr->state == FL_STORE_ROUND_ABANDONED;
    if (sr->population_id != p->id || !ended)
        goto out;
    rc = fl_store_participant_get_v2(co->store, &sp, stored, &has_hash, rid, ca->client_id);
    if (rc != FL_OK && rc != FL_ERR_NOT_FOUND) {
        fl__coord_reply_clear(co, rep);
        status = store_fail(co, rep, rc);
        goto out;
    }
    if (rc == FL_ERR_NOT_FOUND || sp->state == FL_STORE_PARTICIPANT_CHECKED_IN) {
        bool swept = co->retention_ms > 0 && sr->ended_at < fl__coord_now(co) - co->retention_ms;
        if (sr->started_at == 0 || swept)
            goto out;
        goto out_not_participant;
    }
    if (has_hash && (!fl__coord_pid_hash(presented, key) ||
                     fl_memeq_ct(presented, stored, sizeof(presented)) != 0))
        goto out_not_participant; /* another round's key, or none this coordinator gave */
    bool completed = sr->state == FL_STORE_ROUND_COMPLETED;
    json_t *o = json_pack("{s:I, s:s}", "round_id", (json_int_t)rid, "state",
                          completed ? "completed" : "abandoned");
    int bad = !o;
    if (o) {
        bad |= json_object_set_new(o, "new_model_version",
                                   sr->result_version ? json_integer(sr->result_version)
                                                      : json_null()) != 0;
        bad |= json_object_set_new(o, "participants",
                                   json_integer(completed ? sr->counts.completed
                                                          : sr->counts.selected)) != 0;
        bad |= json_object_set_new(o, "reason",
                                   sr->abandon_reason ? json_string(sr->abandon_reason)
                                                      : json_null()) != 0;
    }
    fl__coord_reply_clear(co, rep);
    if (bad) {
        json_decref(o);
        status = fl__coord_oom(rep);
        goto out;
    }
    status = fl__coord_json(rep, 200, o);
    goto out;
out_not_participant:
    fl__coord_reply_clear(co, rep);
    status = fl__coord_error(rep, 403, "not_a_participant", "Idempotency-Key",
                             "not a participant of round %lld", (long long)rid);
out:
    fl_store_free(co->store, sp);
    fl_store_free(co->store, sr);
    return status;
}

/* ---- configuration changes ---- */

/* Appends a "config_changed" audit entry for population p with configuration cfg (lock
 * held, inside the caller's transaction). The hashed configuration is the stored form
 * (enrollment token hash included) plus "state" ("active" or "paused"), so a start or a
 * stop changes the hash as well. Populations whose budget the log cannot state
 * (audit_off) are not logged. */
static fl_status audit_config(fl_coord *co, const struct fl__coord_pop *p, json_t *cfg,
                              bool running) {
    if (p->audit_off)
        return FL_OK;
    char hex[65];
    fl__coord_hex(hex, p->enroll_hash, 32);
    json_t *stored = json_deep_copy(cfg);
    json_t *regs = json_deep_copy(json_object_get(cfg, "allowed_regions"));
    if (!stored || !regs) {
        json_decref(stored);
        json_decref(regs);
        return FL_ERR_NOMEM;
    }
    json_object_set_new(stored, "enrollment_token_sha256", json_string(hex));
    json_object_set_new(stored, "state", json_string(running ? "active" : "paused"));
    bool any = false;
    size_t i;
    json_t *r;
    json_array_foreach(regs, i, r) any |=
        json_is_string(r) && strcmp(json_string_value(r), "*") == 0;
    if (any)
        json_array_clear(regs);
    char *cfg_text = fl__coord_json_dumps(co, stored, JSON_COMPACT | JSON_SORT_KEYS);
    char *regions_text = fl__coord_json_dumps(co, regs, JSON_COMPACT);
    json_decref(stored);
    json_decref(regs);
    json_t *pr = json_object_get(cfg, "privacy");
    bool dp = strcmp(json_string_value(json_object_get(pr, "mode")), "none") != 0;
    double eps = dp ? json_number_value(json_object_get(pr, "epsilon_budget")) : 1e9;
    double delta = dp ? json_number_value(json_object_get(pr, "delta")) : 0.0;
    fl_status rc = cfg_text && regions_text
                       ? fl_store_audit_append_config(co->store, NULL, p->id, cfg_text, eps, delta,
                                                      regions_text)
                       : FL_ERR_NOMEM;
    fl__coord_text_free(co, cfg_text);
    fl__coord_text_free(co, regions_text);
    return rc;
}

/* Writes p's settings cfg (normalised, as validated) to its storage row in the caller's
 * transaction (lock held), in the form a creation stores (the enrollment token hash added,
 * keys sorted), so a restart reloads exactly these settings. */
static fl_status store_config(fl_coord *co, const struct fl__coord_pop *p, json_t *cfg) {
    char hex[65];
    fl__coord_hex(hex, p->enroll_hash, 32);
    json_t *stored = json_deep_copy(cfg);
    json_t *regs = json_deep_copy(json_object_get(cfg, "allowed_regions"));
    char *cfg_text = NULL, *regions_text = NULL;
    fl_status rc = FL_ERR_NOMEM;
    if (!stored || !regs)
        goto out;
    json_object_set_new(stored, "enrollment_token_sha256", json_string(hex));
    bool any = false;
    size_t i;
    json_t *r;
    json_array_foreach(regs, i, r) any |=
        json_is_string(r) && strcmp(json_string_value(r), "*") == 0;
    if (any)
        json_array_clear(regs);
    cfg_text = fl__coord_json_dumps(co, stored, JSON_COMPACT | JSON_SORT_KEYS);
    regions_text = fl__coord_json_dumps(co, regs, JSON_COMPACT);
    if (!cfg_text || !regions_text)
        goto out;
    json_t *pr = json_object_get(cfg, "privacy");
    bool dp = strcmp(json_string_value(json_object_get(pr, "mode")), "none") != 0;
    double eps = dp ? json_number_value(json_object_get(pr, "epsilon_budget")) : 1e9;
    double delta = dp ? json_number_value(json_object_get(pr, "delta")) : 0.0;
    rc = fl_store_population_update_config(co->store, p->id, cfg_text, eps, delta, regions_text);
out:
    json_decref(stored);
    json_decref(regs);
    fl__coord_text_free(co, cfg_text);
    fl__coord_text_free(co, regions_text);
    return rc;
}

/* Start or stop (lock held): the state and its config_changed entry in one transaction. */
static int admin_set_running(fl_coord *co, struct fl__coord_reply *rep, struct fl__coord_pop *p,
                             bool run) {
    if (p->running != run) {
        fl_status rc = fl_store_begin(co->store);
        if (rc == FL_OK)
            rc = fl_store_population_set_state(
                co->store, p->id, run ? FL_STORE_POPULATION_ACTIVE : FL_STORE_POPULATION_PAUSED);
        if (rc == FL_OK)
            rc = audit_config(co, p, p->config, run);
        if (rc == FL_OK)
            rc = fl_store_commit(co->store);
        if (rc != FL_OK) {
            if (fl_store_in_transaction(co->store))
                fl_store_rollback(co->store);
            return store_fail(co, rep, rc);
        }
        p->running = run;
        if (!run && p->round)
            fl__coord_round_abandon(co, p, "stopped by admin");
        fl__coord_audit_checkpoint(co);
        fl__log(&co->logger, FL_LOG_INFO, "population %s %s", p->name, run ? "started" : "stopped");
    }
    return fl__coord_json(rep, 200, fl__coord_pop_state_json(co, p));
}

/* POST /v1/admin/populations/{name}/enrollment-token (lock held): a fresh enrollment token
 * replaces the population's (the old one stops working at once; enrolled clients keep their
 * own tokens). The new hash is stored and a config_changed entry logged in one transaction;
 * on failure the old token stays. Answers the new token once. */
static int admin_rotate_token(fl_coord *co, struct fl__coord_reply *rep,
                              struct fl__coord_pop *p) {
    uint8_t secret[32], old[32];
    char sec[FL__COORD_SECRET_CHARS + 1], token[4 + FL__COORD_SECRET_CHARS + 1];
    fl__coord_random(secret, sizeof(secret));
    fl__coord_b64url(sec, secret, sizeof(secret));
    snprintf(token, sizeof(token), "flp_%s", sec);
    memcpy(old, p->enroll_hash, 32);
    fl__coord_sha256(p->enroll_hash, token, strlen(token));
    fl_status rc = fl_store_begin(co->store);
    if (rc == FL_OK)
        rc = audit_config(co, p, p->config, p->running);
    if (rc == FL_OK)
        rc = store_config(co, p, p->config);
    if (rc == FL_OK)
        rc = fl_store_commit(co->store);
    int status;
    if (rc != FL_OK) {
        if (fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
        memcpy(p->enroll_hash, old, 32);
        status = store_fail(co, rep, rc);
        goto out;
    }
    fl__coord_audit_checkpoint(co);
    fl__log(&co->logger, FL_LOG_INFO, "population %s: enrollment token rotated", p->name);
    status = fl__coord_json(rep, 200, json_pack("{s:s, s:o}", "enrollment_token", token,
                                                "population", fl__coord_pop_state_json(co, p)));
out:
    fl_memzero(token, sizeof(token));
    fl_memzero(sec, sizeof(sec));
    fl_memzero(secret, sizeof(secret));
    return status;
}

/* PATCH /v1/admin/populations/{name} (lock held): changes the mutable settings of a
 * population (docs/protocol.md section 8): selection.*, deadlines_s.*, allowed_regions,
 * enrollment.* and,
 * with DP, privacy.epsilon_budget, which may only go down and never below the epsilon
 * already spent. The merged configuration is validated exactly like a creation; on success
 * it replaces the population's settings, in memory and in its storage row (so a restart
 * keeps them), and a config_changed audit entry is appended, in one transaction (all or
 * nothing). A forming or running round keeps the settings it started
 * with; the next round uses the new ones. */
static int admin_patch(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep,
                       struct fl__coord_pop *p) {
    static const char *const sel_keys[] = {
        "target",   "over_selection", "min_participants", "min_examples",     "forming_s",
        "jitter_s", "min_retry_s",    "max_retry_s",      "round_interval_s", "require",
        "target_grace_s", NULL};
    json_t *body = fl__coord_parse_body(rq, rep);
    if (!body)
        return rep->status;
    int status = 0;
    json_t *cfg = NULL;
    struct fl__coord_pop *tmp = NULL;
    const char *key;
    json_t *v;
    char field[96];
    if (json_object_size(body) == 0) {
        status = fl__coord_error(rep, 400, "invalid_field", NULL, "nothing to change");
        goto out;
    }
    json_object_foreach(body, key, v) {
        if (strcmp(key, "allowed_regions") == 0)
            continue;
        bool sel = strcmp(key, "selection") == 0, dl = strcmp(key, "deadlines_s") == 0,
             pr = strcmp(key, "privacy") == 0, en = strcmp(key, "enrollment") == 0;
        if (!sel && !dl && !pr && !en) {
            status = fl__coord_error(rep, 400, "invalid_field", key,
                                     "'%.32s' cannot be changed (mutable: selection, "
                                     "deadlines_s, allowed_regions, enrollment, "
                                     "privacy.epsilon_budget)",
                                     key);
            goto out;
        }
        if (!json_is_object(v)) {
            status =
                fl__coord_error(rep, 400, "invalid_field", key, "'%.32s' must be an object", key);
            goto out;
        }
        const char *k2;
        json_t *v2;
        json_object_foreach(v, k2, v2) {
            bool ok = false;
            if (sel)
                for (int i = 0; sel_keys[i]; i++)
                    ok |= strcmp(k2, sel_keys[i]) == 0;
            if (dl)
                for (int i = 0; i < FL__PH_COUNT; i++)
                    ok |= strcmp(k2, fl__coord_phase_names[i]) == 0;
            if (pr)
                ok = strcmp(k2, "epsilon_budget") == 0;
            if (en)
                ok = strcmp(k2, "max_per_minute") == 0 || strcmp(k2, "max_clients") == 0;
            if (!ok) {
                snprintf(field, sizeof(field), "%.32s.%.48s", key, k2);
                status = fl__coord_error(rep, 400, "invalid_field", field, "'%s' cannot be changed",
                                         field);
                goto out;
            }
        }
    }
    json_t *pr_old = json_object_get(p->config, "privacy");
    bool dp = strcmp(json_string_value(json_object_get(pr_old, "mode")), "none") != 0;
    json_t *eb = json_object_get(json_object_get(body, "privacy"), "epsilon_budget");
    if (eb) {
        double old = json_number_value(json_object_get(pr_old, "epsilon_budget"));
        if (!dp) {
            status = fl__coord_error(rep, 400, "invalid_field", "privacy.epsilon_budget",
                                     "the population has no differential privacy");
            goto out;
        }
        if (!json_is_number(eb) || !(json_number_value(eb) <= old)) {
            status = fl__coord_error(rep, 400, "invalid_field", "privacy.epsilon_budget",
                                     "'privacy.epsilon_budget' can only be lowered (now %g)", old);
            goto out;
        }
        fl__coord_epsilon_refresh(co, p);
        if (json_number_value(eb) < p->epsilon_spent) {
            status = fl__coord_error(rep, 409, "conflict", "privacy.epsilon_budget",
                                     "epsilon %g is already spent", p->epsilon_spent);
            goto out;
        }
    }
    cfg = json_deep_copy(p->config);
    tmp = fl__calloc(fl__coord_alloc(co), 1, sizeof(*tmp));
    if (!cfg || !tmp) {
        status = fl__coord_oom(rep);
        goto out;
    }
    json_object_foreach(body, key, v) {
        if (strcmp(key, "allowed_regions") == 0)
            json_object_set(cfg, key, v);
        else
            json_object_update(json_object_get(cfg, key), v);
    }
    if (!fl__coord_pop_parse(co, tmp, cfg, rep)) {
        status = rep->status;
        goto out;
    }
    /* The audit entry first: a population the log has not seen yet is logged as created
     * with its stored (old) terms, then changed; the row follows in the same transaction. */
    fl_status rc = fl_store_begin(co->store);
    if (rc == FL_OK)
        rc = audit_config(co, p, cfg, p->running);
    if (rc == FL_OK)
        rc = store_config(co, p, cfg);
    if (rc == FL_OK)
        rc = fl_store_commit(co->store);
    if (rc != FL_OK) {
        if (fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
        status = store_fail(co, rep, rc);
        goto out;
    }
    /* Swap the parsed settings in; tmp takes the old ones and frees them. */
    json_t *oc = p->config;
    p->config = tmp->config;
    tmp->config = oc;
    char **orr = p->regions;
    size_t on = p->n_regions;
    p->regions = tmp->regions;
    p->n_regions = tmp->n_regions;
    tmp->regions = orr;
    tmp->n_regions = on;
    size_t ocap = p->regions_cap; /* the sizes go with the arrays (fl__free) */
    p->regions_cap = tmp->regions_cap;
    tmp->regions_cap = ocap;
    p->any_region = tmp->any_region;
    p->sel = tmp->sel;
    memcpy(p->deadlines_s, tmp->deadlines_s, sizeof(p->deadlines_s));
    p->enroll_per_minute = tmp->enroll_per_minute;
    p->enroll_max_clients = tmp->enroll_max_clients;
    if (p->enroll_tokens > (double)p->enroll_per_minute)
        p->enroll_tokens = (double)p->enroll_per_minute; /* a smaller bucket */
    p->budget_exhausted = false; /* the next round start checks the budget again */
    fl__coord_epsilon_refresh(co, p);
    fl__coord_audit_checkpoint(co);
    fl__log(&co->logger, FL_LOG_INFO, "population %s: configuration changed", p->name);
    status = fl__coord_json(rep, 200, fl__coord_pop_state_json(co, p));
out:
    fl__coord_pop_free(co, tmp);
    if (cfg)
        json_decref(cfg);
    json_decref(body);
    return status;
}

int fl__coord_h_admin(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    if (!fl__coord_auth_admin(rq, rep))
        return rep->status;
    if (rq->route == FL__R_ADMIN_POPS && strcmp(rq->method, "POST") == 0)
        return admin_create(co, rq, rep);
    int status;
    fl__coord_lock(co);
    if (rq->route == FL__R_ADMIN_POPS) {
        json_t *list = json_array();
        for (size_t i = 0; i < co->n_pops; i++)
            json_array_append_new(list, fl__coord_pop_state_json(co, co->pops[i]));
        status = fl__coord_json(rep, 200, json_pack("{s:o}", "populations", list));
        goto out_unlock;
    }
    if (rq->route == FL__R_ADMIN_ROUND) {
        int64_t rid;
        fl_store_round *r = NULL;
        if (!fl__coord_parse_id(rq->seg[3], &rid)) {
            status = fl__coord_error(rep, 400, "invalid_parameter", "round_id",
                                     "round id must be a positive integer");
            goto out_unlock;
        }
        fl_status rc = fl_store_round_get(co->store, &r, rid);
        if (rc == FL_ERR_NOT_FOUND) {
            status = fl__coord_error(rep, 404, "not_found", "round_id", "no round %lld",
                                     (long long)rid);
            goto out_unlock;
        }
        if (rc != FL_OK) {
            status = store_fail(co, rep, rc);
            goto out_unlock;
        }
        status = fl__coord_json(rep, 200, round_json(co, r));
        fl_store_free(co->store, r);
        goto out_unlock;
    }
    struct fl__coord_pop *p = fl__coord_pop_find(co, rq->seg[3]);
    if (!p) {
        status = fl__coord_error(rep, 404, "not_found", "population", "no population '%.64s'",
                                 rq->seg[3]);
        goto out_unlock;
    }
    fl_status rc;
    switch (rq->route) {
    case FL__R_ADMIN_POP:
        if (strcmp(rq->method, "PATCH") == 0)
            status = admin_patch(co, rq, rep, p);
        else
            status = fl__coord_json(rep, 200, fl__coord_pop_state_json(co, p));
        break;
    case FL__R_ADMIN_POP_START:
        if (p->model_version == 0) {
            status = fl__coord_error(rep, 409, "conflict", NULL,
                                     "upload a model version before starting");
            break;
        }
        status = admin_set_running(co, rep, p, true);
        break;
    case FL__R_ADMIN_POP_STOP:
        status = admin_set_running(co, rep, p, false);
        break;
    case FL__R_ADMIN_POP_MODELS:
        status = admin_upload_model(co, rq, rep, p);
        break;
    case FL__R_ADMIN_POP_TOKEN:
        status = admin_rotate_token(co, rep, p);
        break;
    case FL__R_ADMIN_POP_ROUNDS: {
        int64_t limit = 50;
        const char *ls = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "limit");
        if (ls && (!fl__coord_parse_id(ls, &limit) || limit > 1000)) {
            status = fl__coord_error(rep, 400, "invalid_parameter", "limit",
                                     "'limit' must be 1-1000");
            break;
        }
        json_t *list = json_array();
        fl_store_round *r = NULL;
        rc = fl_store_round_find(co->store, &r, p->id, 0);
        int64_t num = rc == FL_OK ? r->round_number : 0;
        while (rc == FL_OK && limit-- > 0) {
            json_array_append_new(list, round_json(co, r));
            fl_store_free(co->store, r);
            r = NULL;
            if (--num < 1)
                break;
            rc = fl_store_round_find(co->store, &r, p->id, num);
        }
        fl_store_free(co->store, r);
        if (rc != FL_OK && rc != FL_ERR_NOT_FOUND) {
            json_decref(list);
            status = store_fail(co, rep, rc);
            break;
        }
        status = fl__coord_json(rep, 200, json_pack("{s:o}", "rounds", list));
        break;
    }
    default:
        status = fl__coord_error(rep, 404, "not_found", NULL, "no such endpoint");
    }
out_unlock:
    fl__coord_unlock(co);
    return status;
}

/* ---- fuzzing entry points (tests/fuzz/coord_bodies.c) ---- */

/* Runs the check-in body validation on raw bytes; returns the HTTP status it would answer
 * (200 when the body is valid). */
int fl__coord_fuzz_checkin(const uint8_t *b, size_t n) {
    struct fl__coord_reply rep;
    memset(&rep, 0, sizeof(rep));
    rep.retry_after_s = -1;
    json_t *body = json_loadb((const char *)b, n, JSON_REJECT_DUPLICATES, NULL);
    int status = 400;
    if (body && json_is_object(body)) {
        struct checkin_facts f;
        status = checkin_parse(body, &f, &rep) ? 200 : rep.status;
    }
    if (body)
        json_decref(body);
    if (rep.json)
        json_decref(rep.json);
    return status;
}

/* POST /v1/admin/clients/{client_id}/revoke and .../reinstate: blocks a client without
 * erasing it, or unblocks it. Storage records the state (so it survives a restart); the
 * auth cache mark is flipped under the coordinator lock before the reply, so from then on
 * every request with the client's token is refused (401 token_revoked) or accepted again.
 * A revoked client in a forming or running round can send nothing more and drops out of it
 * like any silent device. The client's records stay; erasure is a separate request. */
int fl__coord_h_client_revoke(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    if (!fl__coord_auth_admin(rq, rep))
        return rep->status;
    const char *cid = rq->seg[3];
    /* Coordinator-issued ids are 16 lowercase hex digits; nothing else can be enrolled. */
    bool valid = strlen(cid) == FL__COORD_CLIENT_ID_CHARS;
    for (size_t i = 0; valid && cid[i]; i++)
        valid = (cid[i] >= '0' && cid[i] <= '9') || (cid[i] >= 'a' && cid[i] <= 'f');
    if (!valid)
        return fl__coord_error(rep, 400, "invalid_parameter", "client_id",
                               "client id must be 16 lowercase hex characters");
    bool revoke = rq->route == FL__R_ADMIN_CLIENT_REVOKE;
    int64_t at = 0, seq = -1;
    int status;
    fl__coord_lock(co);
    /* Storage logs a client_revoked / client_reinstated audit entry (pseudonym only, same
     * key as erasure) in the same transaction, when the state changes. */
    fl_status rc = revoke ? fl_store_client_revoke(co->store, &at, &seq, cid, fl__coord_now(co),
                                                   co->pseudonym_key)
                          : fl_store_client_reinstate(co->store, &seq, cid, co->pseudonym_key);
    if (rc == FL_ERR_NOT_FOUND) {
        status = fl__coord_error(rep, 404, "not_found", "client_id", "no such client");
        goto out_unlock;
    }
    if (rc != FL_OK) {
        status = store_fail(co, rep, rc);
        goto out_unlock;
    }
    fl__coord_auth_cache_set_revoked(co, cid, revoke);
    fl__log(&co->logger, FL_LOG_INFO, "client %s %s", cid, revoke ? "revoked" : "reinstated");
    /* audit_index: the entry this call logged, null when nothing changed (as erase's). */
    status = fl__coord_json(
        rep, 200,
        json_pack("{s:s, s:s, s:o, s:o}", "status", revoke ? "revoked" : "active", "client_id",
                  cid, "revoked_at", revoke ? json_integer(at) : json_null(), "audit_index",
                  seq >= 0 ? json_integer(seq) : json_null()));
out_unlock:
    fl__coord_unlock(co);
    return status;
}
