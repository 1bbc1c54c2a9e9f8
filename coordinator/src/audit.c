/* Audit log integration (docs/audit.md "Coordinator integration", docs/coordinator.md
 * "Audit log"): the "round" entry committed with each round, signed checkpoints, the
 * retention timer, client erasure, and the audit endpoints (checkpoint and proofs public,
 * the bundle and erasure admin-only). The log itself (entries, Merkle tree, rules) is
 * storage's; this file only feeds it and serves it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>
#include <sodium.h>

#include "flotilla/dp.h"
#include "flotilla/version.h"

#include "coord_internal.h"

#define COORD_VERSION "flotilla-coordinator/" FL_VERSION_STRING
#define SWEEP_INTERVAL_MS (3600 * 1000LL)

/* ---- setup ---- */

fl_status fl__coord_audit_setup(fl_coord *co, const fl_coord_config *cfg, const uint8_t seed[32],
                                char *errmsg, size_t errmsg_len) {
    if (cfg->audit_origin) {
        size_t n = strlen(cfg->audit_origin);
        bool ok = n >= 1 && n <= FL_STORE_AUDIT_ORIGIN_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = cfg->audit_origin[i] > 0x20 && cfg->audit_origin[i] < 0x7f &&
                 cfg->audit_origin[i] != '+';
        if (!ok) {
            snprintf(errmsg, errmsg_len,
                     "config.audit_origin: 1..128 printable ASCII characters without '+' or "
                     "spaces");
            return FL_ERR_MISUSE;
        }
        memcpy(co->audit_origin, cfg->audit_origin, n + 1);
    } else {
        snprintf(co->audit_origin, sizeof(co->audit_origin), "flotilla-coordinator/%s", co->key_id);
    }
    if (cfg->has_pseudonym_key) {
        memcpy(co->pseudonym_key, cfg->pseudonym_key, sizeof(co->pseudonym_key));
    } else {
        /* Derived: HMAC-SHA256(signing seed, label). Stable with a stable signing key, and
         * not the key itself. */
        static const char label[] = "flotilla/v1/audit-pseudonym-key";
        crypto_auth_hmacsha256(co->pseudonym_key, (const unsigned char *)label, sizeof(label) - 1,
                               seed);
    }
    if (cfg->retention_days > 36500) {
        snprintf(errmsg, errmsg_len, "config.retention_days: at most 36500");
        return FL_ERR_MISUSE;
    }
    co->retention_ms = (int64_t)cfg->retention_days * 86400 * 1000;
    co->next_sweep_at = 0; /* first tick */
    return FL_OK;
}

void fl__coord_audit_checkpoint(fl_coord *co) {
    int64_t size = 0;
    if (fl_store_in_transaction(co->store) || fl_store_audit_size(co->store, &size) != FL_OK ||
        size == 0)
        return;
    fl_status rc = fl_store_audit_checkpoint_sign(co->store, NULL, co->audit_origin, co->sign_sk);
    if (rc != FL_OK)
        fl__log(&co->logger, FL_LOG_WARN, "audit checkpoint not signed: %s",
                fl_store_errmsg(co->store));
}

/* ---- round entries ---- */

fl_status fl__coord_ledger_epsilon(fl_coord *co, const struct fl__coord_pop *p, double delta,
                                   double *eps) {
    fl_store_ledger_entry *le = NULL;
    size_t n = 0;
    fl_dp_accountant *acc = NULL;
    char msg[256];
    *eps = 0;
    fl_status rc = fl_store_ledger_list(co->store, &le, &n, p->id);
    if (rc == FL_OK && n > 0)
        rc = fl_dp_accountant_create(&acc, NULL, fl__coord_pub_alloc(co), msg, sizeof(msg));
    for (size_t i = 0; rc == FL_OK && i < n; i++) {
        fl_dp_ledger_entry e;
        fl_dp_event ev;
        fl_dp_ledger_entry_init(&e, le[i].mechanism);
        e.q = le[i].sampling_rate;
        e.noise_multiplier = le[i].noise_multiplier;
        e.clip_norm = le[i].clip_norm;
        e.steps = (uint64_t)le[i].steps;
        e.participants = (uint64_t)le[i].participants;
        rc = fl_dp_ledger_entry_parse_params(&e, le[i].params_json, msg, sizeof(msg));
        if (rc == FL_OK)
            rc = fl_dp_ledger_entry_to_event(&ev, &e, msg, sizeof(msg));
        if (rc == FL_OK)
            rc = fl_dp_accountant_compose(acc, &ev);
    }
    if (rc == FL_OK && n > 0)
        rc = fl_dp_accountant_epsilon(acc, eps, NULL, delta);
    fl_dp_accountant_destroy(acc);
    fl_store_free(co->store, le);
    return rc;
}

/* Region counts of a buffered round's contributors (their participation rows in the buffer
 * also hold devices still training, which the store's count would include). */
static fl_status buffered_regions(fl_coord *co, const struct fl__coord_round *r,
                                  fl_store_audit_region **out, size_t *n_out, char ***names) {
    fl_store_audit_region *rg = fl__calloc(fl__coord_alloc(co), r->n ? r->n : 1, sizeof(*rg));
    char **nm = fl__calloc(fl__coord_alloc(co), r->n ? r->n : 1, sizeof(*nm));
    size_t n = 0;
    fl_status rc = rg && nm ? FL_OK : FL_ERR_NOMEM;
    for (size_t i = 0; rc == FL_OK && i < r->n; i++) {
        const struct fl__coord_participant *pt = &r->parts[i];
        bool in = (pt->posted & (1u << FL__PH_MASKED)) &&
                  (pt->dropped_at < 0 || pt->dropped_at > FL__PH_MASKED);
        if (!in)
            continue;
        fl_store_client *c = NULL;
        rc = fl_store_client_get(co->store, &c, pt->client_id);
        if (rc != FL_OK)
            break;
        size_t j = 0;
        while (j < n && strcmp(nm[j], c->region) != 0)
            j++;
        if (j == n) {
            nm[n] = fl__strdup(fl__coord_alloc(co), c->region);
            if (!nm[n])
                rc = FL_ERR_NOMEM;
            else
                rg[n++].count = 0;
        }
        if (rc == FL_OK)
            rg[j].count++;
        fl_store_free(co->store, c);
    }
    for (size_t j = 0; j < n; j++)
        rg[j].region = nm[j];
    *out = rg;
    *n_out = n;
    *names = nm;
    return rc;
}

/* Dropouts by the phase each client missed into by_phase; returns their total. A client
 * that never sent its masked input (and was not marked) counts as a masked-phase dropout;
 * in an abandoned round, clients still alive at the end are not dropouts. */
static int64_t dropouts(const struct fl__coord_round *r, bool completed,
                        int64_t by_phase[FL__PH_COUNT]) {
    int64_t dropped = 0;
    memset(by_phase, 0, FL__PH_COUNT * sizeof(int64_t));
    if (r->rp.buffered)
        return 0; /* buffered: only contributors are counted (completed = selected) */
    for (size_t i = 0; i < r->n; i++) {
        const struct fl__coord_participant *pt = &r->parts[i];
        bool in = (pt->posted & (1u << FL__PH_MASKED)) &&
                  (pt->dropped_at < 0 || pt->dropped_at > FL__PH_MASKED);
        if (completed && in)
            continue;
        if (!completed && pt->dropped_at < 0)
            continue;
        int ph =
            pt->dropped_at >= 0 && pt->dropped_at < FL__PH_COUNT ? pt->dropped_at : FL__PH_MASKED;
        by_phase[ph]++;
        dropped++;
    }
    return dropped;
}

fl_status fl__coord_audit_abandon_counts(fl_coord *co, const struct fl__coord_round *r) {
    int64_t by[FL__PH_COUNT];
    int64_t sel = r->rp.buffered ? 0 : (int64_t)r->n;
    if (r->rp.buffered)
        return FL_OK;
    fl_store_round_counts c = {sel, sel, 0, dropouts(r, false, by)};
    return fl_store_round_set_counts(co->store, r->id, &c);
}

fl_status fl__coord_audit_round(fl_coord *co, struct fl__coord_pop *p,
                                const struct fl__coord_round *r, uint32_t count) {
    if (p->audit_off)
        return FL_OK;
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = r->id;
    bool completed = r->state == FL__ROUND_COMPLETED;
    int64_t dropped = dropouts(r, completed, info.dropped_by_phase);
    if (completed && !r->rp.buffered && (int64_t)count + dropped != (int64_t)r->n) {
        /* Defensive: never log per-phase figures that do not add up to the counts. */
        memset(info.dropped_by_phase, 0, sizeof(info.dropped_by_phase));
        info.dropped_by_phase[FL__PH_MASKED] = (int64_t)r->n - (int64_t)count;
    }
    /* The secagg session exists once the round ran (n, k, t fixed then). */
    if (r->rp.secagg && r->rp.threshold > 0 && r->started_at > 0) {
        info.secagg_enabled = 1;
        info.secagg_n = (int64_t)r->n;
        info.secagg_k = r->rp.degree;
        info.secagg_t = r->rp.threshold;
        /* The bound the server enforced, as the task's secagg.norm_proof states it. */
        if (r->rp.norm_bits) {
            info.norm_proof_enabled = 1;
            info.norm_bits = r->rp.norm_bits;
            info.norm_bound2 = r->rp.norm_bound2;
            info.norm_dim = (uint32_t)r->rp.dim;
            info.norm_weight_max = r->rp.norm_weight_max;
        }
    }
    /* Active mode (protocol 5.6): the log names the device authority by the SHA-256 of its
     * verification key, so an auditor can tell which rounds were protected against a
     * coordinator lying about dropouts, and under which authority. */
    uint8_t authority_fp[crypto_hash_sha256_BYTES];
    if (info.secagg_enabled && r->rp.active) {
        crypto_hash_sha256(authority_fp, p->authority_key, sizeof(p->authority_key));
        info.secagg_active = 1;
        info.authority_key_sha256 = authority_fp;
    }
    if (info.secagg_enabled && r->rp.reveal_seeds)
        info.secagg_reveal_seeds = 1;
    double delta = 0, total = 0;
    if (r->rp.dp != FL__DP_NONE) {
        json_t *pr = json_object_get(p->config, "privacy");
        delta = json_number_value(json_object_get(pr, "delta"));
        fl_status rc = fl__coord_ledger_epsilon(co, p, delta, &total);
        if (rc != FL_OK)
            return rc;
    }
    info.epsilon_total = total;
    info.delta = delta;
    info.coordinator_version = COORD_VERSION;
    fl_store_audit_region *rg = NULL;
    char **names = NULL;
    size_t nrg = 0;
    fl_status rc = FL_OK;
    if (r->rp.buffered && completed) {
        rc = buffered_regions(co, r, &rg, &nrg, &names);
        info.regions = rg;
        info.n_regions = nrg;
    } else if (r->rp.buffered) {
        /* An abandoned buffer counts no client (its counts stay 0), whatever participation
         * rows of devices still training it holds: no regions either. */
        static const fl_store_audit_region none[1];
        info.regions = none;
    }
    if (rc == FL_OK)
        rc = fl_store_audit_append_round(co->store, NULL, &info);
    for (size_t j = 0; names && j < nrg; j++)
        fl__free(fl__coord_alloc(co), names[j], strlen(names[j]) + 1);
    fl__free(fl__coord_alloc(co), names, (r->n ? r->n : 1) * sizeof(*names));
    fl__free(fl__coord_alloc(co), rg, (r->n ? r->n : 1) * sizeof(*rg));
    return rc;
}

fl_status fl__coord_audit_restart_abandon(fl_coord *co, struct fl__coord_pop *p, int64_t round_id,
                                          const char *reason) {
    fl_store_audit_round_info info;
    double eps = 0;
    fl_store_audit_round_info_init(&info);
    info.round_id = round_id;
    info.coordinator_version = COORD_VERSION;
    json_t *pr = json_object_get(p->config, "privacy");
    const char *mode = json_string_value(json_object_get(pr, "mode"));
    if (mode && strcmp(mode, "none") != 0) {
        info.delta = json_number_value(json_object_get(pr, "delta"));
        if (fl__coord_ledger_epsilon(co, p, info.delta, &eps) != FL_OK)
            fl__log(&co->logger, FL_LOG_WARN, "population %s: epsilon not computed", p->name);
        info.epsilon_total = eps;
    }
    /* Nobody is known to have dropped: the round ended with the process. */
    fl_store_round *r = NULL;
    fl_status rc = fl_store_round_get(co->store, &r, round_id);
    if (rc == FL_OK && !reason && r->counts.dropped != 0) {
        fl_store_round_counts c = r->counts;
        c.dropped = 0;
        rc = fl_store_round_set_counts(co->store, round_id, &c);
    }
    fl_store_free(co->store, r);
    if (rc == FL_OK)
        rc = fl_store_round_abandon(co->store, round_id,
                                    reason ? reason : "coordinator restarted");
    /* The abandonment and its entry are one (the caller's transaction): a refused append is
     * returned, so the caller rolls the abandonment back too. */
    if (rc == FL_OK && !p->audit_off)
        rc = fl_store_audit_append_round(co->store, NULL, &info);
    return rc;
}

/* ---- retention ---- */

void fl__coord_audit_tick(fl_coord *co, int64_t now) {
    if (co->retention_ms <= 0 || now < co->next_sweep_at)
        return;
    co->next_sweep_at = now + SWEEP_INTERVAL_MS;
    fl_store_retention_result res;
    fl_status rc = fl_store_retention_sweep(co->store, &res, co->retention_ms);
    if (rc != FL_OK) {
        fl__log(&co->logger, FL_LOG_ERROR, "retention sweep failed: %s",
                fl_store_errmsg(co->store));
        return;
    }
    fl__log(&co->logger, FL_LOG_INFO,
            "retention sweep: %lld client(s), %lld participation(s) deleted (audit entry %lld)",
            (long long)res.clients_deleted, (long long)res.participations_deleted,
            (long long)res.seq);
    if (res.clients_deleted > 0)
        fl__coord_auth_cache_clear(co);
    fl__coord_audit_checkpoint(co);
}

/* ---- endpoints ---- */

static int audit_store_fail(fl_coord *co, struct fl__coord_reply *rep, fl_status rc) {
    if (rc == FL_ERR_NOMEM)
        return fl__coord_oom(rep);
    fl__log(&co->logger, FL_LOG_ERROR, "audit: %s", fl_store_errmsg(co->store));
    if (rc == FL_ERR_BUSY) {
        rep->retry_after_s = 1;
        return fl__coord_error(rep, 503, "unavailable", NULL, "database busy");
    }
    if (rc == FL_ERR_IO) {
        /* As api.c's store_fail: a full disk, a failed write or fsync is transient. */
        rep->retry_after_s = 5;
        return fl__coord_error(rep, 503, "storage_unavailable", NULL,
                               "storage cannot write now (disk full or I/O error)");
    }
    return fl__coord_error(rep, 500, "internal", NULL, "storage error");
}

static bool query_int(struct fl__coord_req *rq, struct fl__coord_reply *rep, const char *name,
                      bool zero_ok, int64_t *out) {
    const char *s = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
    if (s && zero_ok && strcmp(s, "0") == 0) {
        *out = 0;
        return true;
    }
    if (!s || !fl__coord_parse_id(s, out)) {
        fl__coord_error(rep, 400, "invalid_parameter", name, "'%s' must be a %s integer", name,
                        zero_ok ? "non-negative" : "positive");
        return false;
    }
    return true;
}

static json_t *proof_json(uint8_t (*proof)[32], size_t count) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < count; i++) {
        char b64[64];
        fl__coord_b64(b64, sizeof(b64), proof[i], 32);
        json_array_append_new(a, json_string(b64));
    }
    return a;
}

static int h_checkpoint(fl_coord *co, struct fl__coord_reply *rep) {
    fl_store_audit_checkpoint *cp = NULL;
    fl_status rc = fl_store_audit_checkpoint_latest(co->store, &cp);
    if (rc == FL_ERR_NOT_FOUND)
        return fl__coord_error(rep, 404, "not_found", NULL, "no checkpoint signed yet");
    if (rc != FL_OK)
        return audit_store_fail(co, rep, rc);
    char root[64], vkey[256];
    fl__coord_b64(root, sizeof(root), cp->root, 32);
    if (fl_store_audit_vkey(vkey, sizeof(vkey), co->audit_origin, co->sign_pk) != FL_OK)
        vkey[0] = '\0';
    int st = fl__coord_json(rep, 200,
                            json_pack("{s:s, s:I, s:s, s:I, s:s, s:s}", "origin", co->audit_origin,
                                      "tree_size", (json_int_t)cp->tree_size, "root", root,
                                      "created_unix_ms", (json_int_t)cp->created_at, "note",
                                      cp->note, "verifier_key", vkey));
    fl_store_free(co->store, cp);
    return st;
}

static int h_inclusion(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    int64_t index, size;
    if (!query_int(rq, rep, "index", true, &index) || !query_int(rq, rep, "size", false, &size))
        return rep->status;
    uint8_t proof[FL_STORE_AUDIT_PROOF_MAX][32];
    size_t count = 0;
    fl_status rc = fl_store_audit_inclusion_proof(co->store, proof, FL_STORE_AUDIT_PROOF_MAX,
                                                  &count, index, size);
    if (rc == FL_ERR_RANGE)
        return fl__coord_error(rep, 400, "invalid_parameter", "index",
                               "need index < size <= the log size");
    if (rc != FL_OK)
        return audit_store_fail(co, rep, rc);
    fl_store_audit_entry *e = NULL;
    rc = fl_store_audit_entry_get(co->store, &e, index);
    if (rc != FL_OK)
        return audit_store_fail(co, rep, rc);
    char leaf[64];
    fl__coord_b64(leaf, sizeof(leaf), e->leaf_hash, 32);
    int st = fl__coord_json(rep, 200,
                            json_pack("{s:I, s:I, s:s, s:s, s:o}", "index", (json_int_t)index,
                                      "tree_size", (json_int_t)size, "entry", e->json, "leaf_hash",
                                      leaf, "proof", proof_json(proof, count)));
    fl_store_free(co->store, e);
    return st;
}

static int h_consistency(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    int64_t first, second;
    if (!query_int(rq, rep, "first", true, &first) || !query_int(rq, rep, "second", false, &second))
        return rep->status;
    uint8_t proof[FL_STORE_AUDIT_PROOF_MAX][32];
    size_t count = 0;
    fl_status rc = fl_store_audit_consistency_proof(co->store, proof, FL_STORE_AUDIT_PROOF_MAX,
                                                    &count, first, second);
    if (rc == FL_ERR_RANGE)
        return fl__coord_error(rep, 400, "invalid_parameter", "first",
                               "need first <= second <= the log size");
    if (rc != FL_OK)
        return audit_store_fail(co, rep, rc);
    return fl__coord_json(rep, 200,
                          json_pack("{s:I, s:I, s:o}", "first", (json_int_t)first, "second",
                                    (json_int_t)second, "proof", proof_json(proof, count)));
}

static int h_bundle(fl_coord *co, struct fl__coord_reply *rep) {
    fl__coord_audit_checkpoint(co); /* cover everything logged so far */
    uint8_t *b = NULL;
    size_t len = 0;
    fl_status rc = fl_store_audit_export(co->store, &b, &len);
    if (rc == FL_ERR_NOT_FOUND)
        return fl__coord_error(rep, 404, "not_found", NULL, "the audit log is empty");
    if (rc != FL_OK)
        return audit_store_fail(co, rep, rc);
    char *copy = fl__alloc(fl__coord_alloc(co), len);
    if (!copy) {
        fl_store_free(co->store, b);
        return fl__coord_oom(rep);
    }
    memcpy(copy, b, len);
    fl_store_free(co->store, b);
    rep->status = 200;
    rep->bytes_owned = copy;
    rep->owned_size = len;
    rep->bytes = (const uint8_t *)copy;
    rep->len = len;
    rep->content_type = "application/x-ndjson";
    return 200;
}

static int h_erase(fl_coord *co, struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    const char *cid = rq->seg[3];
    if (!fl__coord_valid_name(cid, FL__COORD_CLIENT_ID_CHARS, false))
        return fl__coord_error(rep, 404, "not_found", "client_id", "no such client");
    /* A client in a forming or running round is part of that round's record until it
     * ends: erase it afterwards. */
    for (size_t i = 0; i < co->n_pops; i++) {
        struct fl__coord_round *r = co->pops[i]->round;
        const struct fl__coord_participant *pt = r ? fl__coord_round_find(r, cid) : NULL;
        if (pt) {
            rep->retry_after_s = 30;
            return fl__coord_error(rep, 409, "conflict", "client_id",
                                   "client %s is in round %lld; retry when it ends", cid,
                                   (long long)r->id);
        }
    }
    int64_t seq = -1;
    fl_status rc = fl_store_client_erase(co->store, &seq, cid, co->pseudonym_key);
    if (rc == FL_ERR_NOT_FOUND)
        return fl__coord_error(rep, 404, "not_found", "client_id", "no such client");
    if (rc != FL_OK)
        return audit_store_fail(co, rep, rc);
    fl__coord_auth_cache_clear(co);
    fl__coord_rounds_forget_client(co, cid);
    fl__coord_audit_checkpoint(co);
    char pseudo[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    fl_store_audit_pseudonym(pseudo, co->pseudonym_key, cid);
    fl__log(&co->logger, FL_LOG_INFO, "client erased (pseudonym %s, audit entry %lld)", pseudo,
            (long long)seq);
    return fl__coord_json(rep, 200,
                          json_pack("{s:s, s:s, s:I}", "status", "erased", "pseudonym", pseudo,
                                    "audit_index", (json_int_t)seq));
}

int fl__coord_h_audit(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    bool admin = rq->route == FL__R_ADMIN_AUDIT_BUNDLE || rq->route == FL__R_ADMIN_CLIENT_ERASE;
    if (admin && !fl__coord_auth_admin(rq, rep))
        return rep->status;
    int st;
    fl__coord_lock(co);
    switch (rq->route) {
    case FL__R_AUDIT_CHECKPOINT:
        st = h_checkpoint(co, rep);
        break;
    case FL__R_AUDIT_INCLUSION:
        st = h_inclusion(co, rq, rep);
        break;
    case FL__R_AUDIT_CONSISTENCY:
        st = h_consistency(co, rq, rep);
        break;
    case FL__R_ADMIN_AUDIT_BUNDLE:
        st = h_bundle(co, rep);
        break;
    case FL__R_ADMIN_CLIENT_ERASE:
        st = h_erase(co, rq, rep);
        break;
    default:
        st = fl__coord_error(rep, 404, "not_found", NULL, "no such endpoint");
    }
    fl__coord_unlock(co);
    return st;
}
