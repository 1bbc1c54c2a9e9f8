/* Populations: config validation with defaults, loading from storage at startup (rounds
 * left open by a previous process are abandoned), region policy, and round timers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/secagg.h"

#include "coord_internal.h"

#define phase_names fl__coord_phase_names

/* Fewest clients a secure round can start with: fl_secagg_config_resolve refuses
 * num_clients < 3 (with 2, each client could unmask the other's input from the sum). round.c
 * checks the same number when a round starts. */
#define SECAGG_MIN_CLIENTS 3

/* ---- field helpers: each sets a 400 naming path.key and returns false on a bad value ---- */

static bool get_int(json_t *obj, const char *path, const char *key, int64_t def, int64_t lo,
                    int64_t hi, int64_t *out, struct fl__coord_reply *rep) {
    json_t *v = json_object_get(obj, key);
    char field[96];
    snprintf(field, sizeof(field), "%s%s%s", path, *path ? "." : "", key);
    if (!v) {
        *out = def;
        json_object_set_new(obj, key, json_integer(def));
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        fl__coord_error(rep, 400, "invalid_field", field, "'%s' must be an integer in %lld..%lld",
                        field, (long long)lo, (long long)hi);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

static bool get_num(json_t *obj, const char *path, const char *key, double def, double lo,
                    double hi, bool lo_open, double *out, struct fl__coord_reply *rep) {
    json_t *v = json_object_get(obj, key);
    char field[96];
    snprintf(field, sizeof(field), "%s%s%s", path, *path ? "." : "", key);
    if (!v) {
        *out = def;
        json_object_set_new(obj, key, json_real(def));
        return true;
    }
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d <= lo)) {
        fl__coord_error(rep, 400, "invalid_field", field, "'%s' must be a number in %s%g..%g]",
                        field, lo_open ? "(" : "[", lo, hi);
        return false;
    }
    *out = d;
    return true;
}

static bool get_bool(json_t *obj, const char *path, const char *key, bool def, bool *out,
                     struct fl__coord_reply *rep) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        *out = def;
        json_object_set_new(obj, key, json_boolean(def));
        return true;
    }
    if (!json_is_boolean(v)) {
        fl__coord_error(rep, 400, "invalid_field", key, "'%s.%s' must be true or false", path,
                        key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

static bool get_enum(json_t *obj, const char *path, const char *key, const char *def,
                     const char *const *allowed, const char **out,
                     struct fl__coord_reply *rep) {
    json_t *v = json_object_get(obj, key);
    char field[96];
    snprintf(field, sizeof(field), "%s%s%s", path, *path ? "." : "", key);
    if (!v && def) {
        json_object_set_new(obj, key, json_string(def));
        v = json_object_get(obj, key);
    }
    if (v && json_is_string(v))
        for (size_t i = 0; allowed[i]; i++)
            if (strcmp(json_string_value(v), allowed[i]) == 0) {
                if (out)
                    *out = allowed[i];
                return true;
            }
    fl__coord_error(rep, 400, v ? "invalid_field" : "missing_field", field,
                    "'%s' must be one of the documented values (e.g. '%s')", field, allowed[0]);
    return false;
}

/* Returns obj[key] as an object, creating {} when absent; NULL (400 set) when not one. */
static json_t *sub_object(json_t *obj, const char *key, struct fl__coord_reply *rep) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        v = json_object();
        if (!v || json_object_set_new(obj, key, v) != 0) {
            fl__coord_oom(rep);
            return NULL;
        }
        return v;
    }
    if (!json_is_object(v)) {
        fl__coord_error(rep, 400, "invalid_field", key, "'%s' must be an object", key);
        return NULL;
    }
    return v;
}

/* ---- population config ---- */

/* secagg.consistency_check (SecAgg's active-adversary mode, docs/protocol.md "Device
 * identities") and secagg.authority_key, the device authority's Ed25519 verification key
 * (64 hex characters) that every device's v2 certificate must verify under. They come
 * together: the consistency check means little unless clients are certified by an
 * authority that is not the coordinator, and a key without the check would be unused.
 * Refused with what the coordinator cannot combine: secagg off, and FedBuff (its own
 * slotting, not the phased rounds). Norm proofs combine (docs/secagg.md "Norm proofs":
 * the proof rides in MASKED_INPUT, before the consistency phase). Sets p->active and
 * p->authority_key; false with a 400 in rep. */
static bool active_parse(struct fl__coord_pop *p, json_t *sa, bool check, bool secagg_on,
                         const char *strategy, struct fl__coord_reply *rep) {
    json_t *ak = json_object_get(sa, "authority_key");
    p->active = false;
    memset(p->authority_key, 0, sizeof(p->authority_key));
    if (!check) {
        if (ak)
            return fl__coord_error(rep, 400, "invalid_field", "secagg.authority_key",
                                   "'secagg.authority_key' is only used with "
                                   "secagg.consistency_check true"), false;
        return true;
    }
    if (!secagg_on)
        return fl__coord_error(rep, 400, "invalid_field", "secagg.consistency_check",
                               "'secagg.consistency_check' needs secagg.enabled"), false;
    if (strcmp(strategy, "fedbuff") == 0)
        return fl__coord_error(rep, 400, "invalid_field", "secagg.consistency_check",
                               "'secagg.consistency_check' is not supported with the fedbuff "
                               "strategy"), false;
    uint8_t key[FL_SECAGG_VERIFY_KEY_BYTES], any = 0;
    if (!ak || !json_is_string(ak) || json_string_length(ak) != 2 * sizeof(key) ||
        !fl__coord_unhex(key, sizeof(key), json_string_value(ak)))
        return fl__coord_error(rep, 400, "invalid_field", "secagg.authority_key",
                               "'secagg.authority_key' must be the device authority's Ed25519 "
                               "verification key, 64 hex characters"), false;
    for (size_t i = 0; i < sizeof(key); i++)
        any |= key[i];
    if (!any)
        return fl__coord_error(rep, 400, "invalid_field", "secagg.authority_key",
                               "'secagg.authority_key' must not be all zero"), false;
    /* Normalised to lowercase, as the population shows it. */
    char hex[2 * FL_SECAGG_VERIFY_KEY_BYTES + 1];
    fl__coord_hex(hex, key, sizeof(key));
    if (json_object_set_new(sa, "authority_key", json_string(hex)) != 0)
        return fl__coord_oom(rep), false;
    memcpy(p->authority_key, key, sizeof(key));
    p->active = true;
    return true;
}

static void regions_free(fl_coord *co, struct fl__coord_pop *p) {
    for (size_t i = 0; i < p->n_regions; i++)
        fl__free(fl__coord_alloc(co), p->regions[i], strlen(p->regions[i]) + 1);
    fl__free(fl__coord_alloc(co), p->regions, p->regions_cap * sizeof(char *));
    p->regions = NULL;
    p->n_regions = 0;
    p->regions_cap = 0;
}

bool fl__coord_pop_parse(fl_coord *co, struct fl__coord_pop *p, json_t *cfg,
                         struct fl__coord_reply *rep) {
    json_t *name = json_object_get(cfg, "name");
    if (!name)
        return fl__coord_error(rep, 400, "missing_field", "name", "'name' is required"), false;
    if (!json_is_string(name) ||
        !fl__coord_valid_name(json_string_value(name), FL__COORD_NAME_MAX, true))
        return fl__coord_error(rep, 400, "invalid_field", "name",
                               "'name' must be 1-64 characters [A-Za-z0-9_.-]"), false;
    snprintf(p->name, sizeof(p->name), "%s", json_string_value(name));

    json_t *regions = json_object_get(cfg, "allowed_regions");
    if (!regions)
        return fl__coord_error(rep, 400, "missing_field", "allowed_regions",
                               "'allowed_regions' is required"), false;
    if (!json_is_array(regions) || json_array_size(regions) == 0 ||
        json_array_size(regions) > 256)
        return fl__coord_error(rep, 400, "invalid_field", "allowed_regions",
                               "'allowed_regions' must be a list of 1-256 regions"), false;
    regions_free(co, p);
    p->any_region = false;
    p->regions = fl__calloc(fl__coord_alloc(co), json_array_size(regions), sizeof(char *));
    if (!p->regions)
        return fl__coord_oom(rep), false;
    p->regions_cap = json_array_size(regions);
    size_t i;
    json_t *r;
    json_array_foreach(regions, i, r) {
        const char *s = json_is_string(r) ? json_string_value(r) : NULL;
        if (s && strcmp(s, "*") == 0) {
            p->any_region = true;
            continue;
        }
        if (!s || !fl__coord_valid_name(s, FL__COORD_REGION_MAX, false))
            return fl__coord_error(rep, 400, "invalid_field", "allowed_regions",
                                   "each region must be '*' or 1-32 characters [A-Za-z0-9_-]"),
                   false;
        p->regions[p->n_regions] = fl__strdup(fl__coord_alloc(co), s);
        if (!p->regions[p->n_regions])
            return fl__coord_oom(rep), false;
        p->n_regions++;
    }
    json_t *ds = json_object_get(cfg, "data_schema");
    if (ds && !json_is_object(ds))
        return fl__coord_error(rep, 400, "invalid_field", "data_schema",
                               "'data_schema' must be an object"), false;

    /* selection */
    json_t *sel = sub_object(cfg, "selection", rep);
    if (!sel)
        return false;
    struct fl__coord_selection *s = &p->sel;
    bool min_defaulted = json_object_get(sel, "min_participants") == NULL;
    if (!get_int(sel, "selection", "target", 100, 1, 100000, &s->target, rep) ||
        !get_num(sel, "selection", "over_selection", 1.3, 1.0, 3.0, false, &s->over_selection,
                 rep) ||
        !get_int(sel, "selection", "min_participants",
                 s->target * 8 / 10 > 0 ? s->target * 8 / 10 : 1, 1, s->target,
                 &s->min_participants, rep) ||
        !get_int(sel, "selection", "min_examples", 0, 0, INT64_C(1) << 40, &s->min_examples,
                 rep) ||
        !get_int(sel, "selection", "forming_s", 60, 1, 86400, &s->forming_s, rep) ||
        !get_int(sel, "selection", "jitter_s", 60, 0, 86400, &s->jitter_s, rep) ||
        !get_int(sel, "selection", "min_retry_s", 30, 1, 86400, &s->min_retry_s, rep) ||
        !get_int(sel, "selection", "max_retry_s", 3600, 1, 86400, &s->max_retry_s, rep) ||
        !get_int(sel, "selection", "round_interval_s", 0, 0, 86400, &s->round_interval_s, rep))
        return false;
    if (s->min_retry_s > s->max_retry_s)
        return fl__coord_error(rep, 400, "invalid_field", "selection.min_retry_s",
                               "'selection.min_retry_s' must not exceed max_retry_s"), false;
    /* Optional and off unless given: absent or null is not written back, so a stored
     * config reads the same as before the field existed. */
    json_t *tg = json_object_get(sel, "target_grace_s");
    s->target_grace_s = -1;
    if (tg && !json_is_null(tg)) {
        if (!json_is_integer(tg) || json_integer_value(tg) < 0 ||
            json_integer_value(tg) > 86400)
            return fl__coord_error(rep, 400, "invalid_field", "selection.target_grace_s",
                                   "'selection.target_grace_s' must be null or an integer in "
                                   "0..86400"),
                   false;
        s->target_grace_s = json_integer_value(tg);
    }
    s->require = 0;
    json_t *req = json_object_get(sel, "require");
    if (!req) {
        req = json_pack("[ss]", "charging", "unmetered");
        json_object_set_new(sel, "require", req);
    }
    if (!req || !json_is_array(req))
        return fl__coord_error(rep, 400, "invalid_field", "selection.require",
                               "'selection.require' must be a list"), false;
    json_array_foreach(req, i, r) {
        const char *v = json_is_string(r) ? json_string_value(r) : "";
        if (strcmp(v, "charging") == 0)
            s->require |= FL__ELIG_CHARGING;
        else if (strcmp(v, "unmetered") == 0)
            s->require |= FL__ELIG_UNMETERED;
        else if (strcmp(v, "idle") == 0)
            s->require |= FL__ELIG_IDLE;
        else
            return fl__coord_error(rep, 400, "invalid_field", "selection.require",
                                   "'selection.require' entries are charging, unmetered, idle"),
                   false;
    }

    /* enrolment limits per enrollment token (the population's): a bucket of max_per_minute
     * enrolments refilled at max_per_minute per minute, and a cap on enrolled clients;
     * 0 = no limit */
    json_t *en = sub_object(cfg, "enrollment", rep);
    if (!en)
        return false;
    if (!get_int(en, "enrollment", "max_per_minute", 0, 0, 1000000, &p->enroll_per_minute,
                 rep) ||
        !get_int(en, "enrollment", "max_clients", 0, 0, INT64_C(1000000000),
                 &p->enroll_max_clients, rep))
        return false;

    /* deadlines */
    json_t *dl = sub_object(cfg, "deadlines_s", rep);
    if (!dl)
        return false;
    static const int64_t def_dl[5] = {30, 30, 600, 30, 30};
    for (int k = 0; k < 5; k++)
        if (!get_int(dl, "deadlines_s", phase_names[k], def_dl[k], 1, 86400, &p->deadlines_s[k],
                     rep))
            return false;

    /* training and update: passed to devices in the task config */
    json_t *tr = sub_object(cfg, "training", rep);
    if (!tr)
        return false;
    int64_t iv;
    double dv;
    if (!get_int(tr, "training", "epochs", 1, 1, 1000, &iv, rep) ||
        !get_int(tr, "training", "batch_size", 32, 1, 65536, &iv, rep) ||
        !get_num(tr, "training", "learning_rate", 0.05, 0.0, 1e6, true, &dv, rep) ||
        !get_int(tr, "training", "max_examples", 1000, 1, INT64_C(1) << 40, &iv, rep))
        return false;
    json_t *up = sub_object(cfg, "update", rep);
    if (!up)
        return false;
    static const char *const weighting[] = {"uniform", "examples", NULL};
    if (!get_enum(up, "update", "weighting", "uniform", weighting, NULL, rep) ||
        !get_int(up, "update", "weight_cap", 1000, 1, INT64_C(1) << 40, &iv, rep))
        return false;
    json_t *tensors = json_object_get(up, "tensors");
    if (tensors && !json_is_array(tensors))
        return fl__coord_error(rep, 400, "invalid_field", "update.tensors",
                               "'update.tensors' must be a list of tensor names"), false;

    /* strategy */
    json_t *st = sub_object(cfg, "strategy", rep);
    if (!st)
        return false;
    static const char *const strategies[] = {"fedavg", "fedavgm", "fedprox", "fedadam",
                                             "fedyogi", "fedadagrad", "fedbuff", NULL};
    const char *sname = NULL;
    if (!get_enum(st, "strategy", "name", "fedavg", strategies, &sname, rep) ||
        !get_num(st, "strategy", "server_lr", 1.0, 0.0, 1e6, true, &dv, rep))
        return false;
    if (strcmp(sname, "fedavgm") == 0 &&
        !get_num(st, "strategy", "momentum", 0.9, 0.0, 1.0, false, &dv, rep))
        return false;
    if (strcmp(sname, "fedprox") == 0 &&
        !get_num(st, "strategy", "proximal_mu", 0.01, 0.0, 1e6, false, &dv, rep))
        return false;
    if ((strcmp(sname, "fedadam") == 0 || strcmp(sname, "fedyogi") == 0) &&
        (!get_num(st, "strategy", "beta1", 0.9, 0.0, 1.0, false, &dv, rep) ||
         !get_num(st, "strategy", "beta2", 0.99, 0.0, 1.0, false, &dv, rep)))
        return false;
    if ((strcmp(sname, "fedadam") == 0 || strcmp(sname, "fedyogi") == 0 ||
         strcmp(sname, "fedadagrad") == 0) &&
        !get_num(st, "strategy", "tau", 1e-3, 0.0, 1e6, true, &dv, rep))
        return false;
    if (strcmp(sname, "fedbuff") == 0) {
        int64_t k;
        if (!get_int(st, "strategy", "buffer_size", 10, 1, 100000, &k, rep) ||
            !get_int(st, "strategy", "max_concurrency", k * 4 < 100000 ? k * 4 : 100000, 1,
                     100000, &iv, rep) ||
            !get_num(st, "strategy", "staleness_alpha", 0.5, 0.0, 100.0, false, &dv, rep) ||
            !get_int(st, "strategy", "max_staleness", 10, 0, 1000000, &iv, rep))
            return false;
    }

    /* secagg */
    json_t *sa = sub_object(cfg, "secagg", rep);
    if (!sa)
        return false;
    bool b;
    if (!get_bool(sa, "secagg", "enabled", true, &b, rep) ||
        !get_int(sa, "secagg", "neighbors", 0, 0, 65535, &iv, rep) ||
        !get_num(sa, "secagg", "threshold_fraction", 0.66, 0.5, 1.0, false, &dv, rep) ||
        !get_bool(sa, "secagg", "consistency_check", false, &b, rep))
        return false;
    bool norm_proof, reveal;
    if (!get_bool(sa, "secagg", "norm_proof", false, &norm_proof, rep) ||
        !get_bool(sa, "secagg", "reveal_pair_seeds", false, &reveal, rep))
        return false;
    bool secagg_on = json_is_true(json_object_get(sa, "enabled"));
    if (!active_parse(p, sa, b, secagg_on, sname, rep))
        return false;
    /* The expected dropout and collusion rates that size a derived graph (neighbors 0):
     * optional, 0.05 each (the secagg library's defaults) when absent, and not written back,
     * so a stored config reads the same as before the fields existed. */
    static const char *const rates[] = {"dropout_rate", "adversarial_rate"};
    for (int ri = 0; ri < 2; ri++) {
        json_t *v = json_object_get(sa, rates[ri]);
        if (v && (!json_is_number(v) || !(json_number_value(v) >= 0.0) ||
                  !(json_number_value(v) <= 0.5))) {
            char field[48];
            snprintf(field, sizeof(field), "secagg.%s", rates[ri]);
            return fl__coord_error(rep, 400, "invalid_field", field,
                                   "'%s' must be a number in 0..0.5", field),
                   false;
        }
    }
    /* Revealed seeds cannot be checked: only where a device's input is not bounded anyway
     * (docs/secagg.md "Revealed pairwise seeds"). */
    if (reveal && (!secagg_on || norm_proof))
        return fl__coord_error(rep, 400, "invalid_field", "secagg.reveal_pair_seeds",
                               "'secagg.reveal_pair_seeds' needs secagg.enabled and not "
                               "secagg.norm_proof"), false;
    /* A secure round (FedBuff with secagg on included: it runs synchronous secure rounds)
     * that formed with fewer than SECAGG_MIN_CLIENTS would only be abandoned at its start, so
     * such a selection is refused here. A minimum left to its default (80% of the target) is
     * raised to the secure minimum instead: the target is already at least that. */
    if (secagg_on && !min_defaulted && s->min_participants < SECAGG_MIN_CLIENTS)
        return fl__coord_error(rep, 400, "invalid_field", "selection.min_participants",
                               "selection.min_participants: secure aggregation needs at least "
                               "%d participants, got %lld%s", SECAGG_MIN_CLIENTS,
                               (long long)s->min_participants,
                               s->target < SECAGG_MIN_CLIENTS ? " (selection.target too)" : ""),
               false;
    if (secagg_on && s->target < SECAGG_MIN_CLIENTS)
        return fl__coord_error(rep, 400, "invalid_field", "selection.target",
                               "selection.target: secure aggregation needs at least %d "
                               "participants, got %lld", SECAGG_MIN_CLIENTS,
                               (long long)s->target), false;
    if (secagg_on && s->min_participants < SECAGG_MIN_CLIENTS) {
        s->min_participants = SECAGG_MIN_CLIENTS;
        if (json_object_set_new(sel, "min_participants", json_integer(SECAGG_MIN_CLIENTS)) != 0)
            return fl__coord_oom(rep), false;
    }

    /* privacy */
    json_t *pr = sub_object(cfg, "privacy", rep);
    if (!pr)
        return false;
    static const char *const modes[] = {"none", "central", "distributed", NULL};
    static const char *const rotations[] = {"none", "hadamard", NULL};
    const char *mode = NULL;
    bool rot_defaulted = json_object_get(pr, "rotation") == NULL;
    if (!get_enum(pr, "privacy", "mode", "none", modes, &mode, rep) ||
        !get_int(pr, "privacy", "modulus_bits", 32, 8, secagg_on ? 32 : 62, &iv, rep) ||
        !get_enum(pr, "privacy", "rotation", "none", rotations, NULL, rep) ||
        !get_num(pr, "privacy", "clip_norm", 1.0, 0.0, 1e9, true, &dv, rep) ||
        !get_num(pr, "privacy", "granularity", 1.0 / 1024, 0.0, 1e9, true, &dv, rep))
        return false;
    if (strcmp(mode, "none") != 0) {
        if (!get_num(pr, "privacy", "noise_multiplier", 1.0, 0.0, 1e6, true, &dv, rep) ||
            !get_num(pr, "privacy", "epsilon_budget", 8.0, 0.0, 1e6, true, &dv, rep) ||
            !get_num(pr, "privacy", "delta", 1e-6, 0.0, 1.0, true, &dv, rep) ||
            !get_int(pr, "privacy", "population_size", 100000, 1, INT64_C(1) << 40, &iv, rep))
            return false;
        if (dv >= 1.0)
            return fl__coord_error(rep, 400, "invalid_field", "privacy.delta",
                                   "'privacy.delta' must be below 1"), false;
        if (norm_proof && strcmp(mode, "distributed") == 0)
            /* The device adds its noise before masking, so a proof would bound the noisy
             * vector, whose norm the noise dominates: not offered until noise is proven. */
            return fl__coord_error(rep, 400, "invalid_field", "secagg.norm_proof",
                                   "'secagg.norm_proof' is not supported with distributed DP "
                                   "yet (use central DP or none)"), false;
        if (strcmp(mode, "distributed") == 0 && !secagg_on)
            /* With secagg off, fedbuff is asynchronous FedBuff: it weighs each update by
             * its staleness in the clear, which rules out distributed DP's masked sum. */
            return fl__coord_error(rep, 400, "invalid_field", "privacy.mode", "%s",
                                   strcmp(sname, "fedbuff") == 0
                                       ? "distributed DP needs secagg.enabled (asynchronous "
                                         "FedBuff, secagg.enabled false, supports privacy.mode "
                                         "'none' or 'central')"
                                       : "distributed DP needs secagg.enabled"), false;
        if (strcmp(json_string_value(json_object_get(up, "weighting")), "uniform") != 0)
            return fl__coord_error(rep, 400, "invalid_field", "update.weighting",
                                   "differential privacy needs uniform weighting"), false;
    }
    if (norm_proof && !secagg_on)
        return fl__coord_error(rep, 400, "invalid_field", "secagg.norm_proof",
                               "'secagg.norm_proof' needs secagg.enabled (the server bounds "
                               "plain updates itself)"), false;
    /* FedBuff without secure aggregation runs asynchronously (docs/protocol.md 5.4): the
     * server weighs each update by its staleness, which needs it in the clear. Central DP
     * adds its noise to each buffer (buffer.c); distributed DP was refused above (it needs
     * secure aggregation), and with secagg on fedbuff runs synchronous secure rounds. */
    p->buffered = strcmp(sname, "fedbuff") == 0 && !secagg_on;
    /* The distributed-DP encoder always rotates (randomised Hadamard); the others never. */
    const char *rot = json_string_value(json_object_get(pr, "rotation"));
    bool dist = strcmp(mode, "distributed") == 0;
    if (dist != (strcmp(rot, "hadamard") == 0)) {
        if (rot_defaulted) {
            json_object_set_new(pr, "rotation", json_string(dist ? "hadamard" : "none"));
        } else {
            return fl__coord_error(rep, 400, "invalid_field", "privacy.rotation",
                                   "'privacy.rotation' must be 'hadamard' with distributed DP "
                                   "and 'none' otherwise"), false;
        }
    }
    if (p->config != cfg) {
        json_incref(cfg);
        if (p->config)
            json_decref(p->config);
        p->config = cfg;
    }
    return true;
}

bool fl__coord_region_allowed(const struct fl__coord_pop *p, const char *region) {
    if (p->any_region)
        return true;
    for (size_t i = 0; i < p->n_regions; i++)
        if (strcmp(p->regions[i], region) == 0)
            return true;
    return false;
}

void fl__coord_round_free(fl_coord *co, struct fl__coord_round *r) {
    if (!r)
        return;
    fl_secagg_server_destroy(r->sa);
    if (r->acc) {
        fl_memzero(r->acc, r->rp.vec_len * sizeof(uint64_t));
        fl__free(&co->alloc, r->acc, r->rp.vec_len * sizeof(uint64_t));
    }
    if (r->bnum) {
        fl_memzero(r->bnum, r->rp.dim * sizeof(double));
        fl__free(&co->alloc, r->bnum, r->rp.dim * sizeof(double));
    }
    for (size_t i = 0; i < r->n; i++)
        for (int k = 0; k < FL__PH_COUNT; k++)
            fl__free(fl__coord_alloc(co), r->parts[i].result[k], r->parts[i].result_len[k]);
    fl__coord_blob_unref(r->task);
    fl__coord_round_params_free(co, &r->rp);
    if (r->pidx)
        fl__free(fl__coord_alloc(co), r->pidx, (r->pidx_mask + 1) * sizeof(*r->pidx));
    fl__free(fl__coord_alloc(co), r->parts, r->cap * sizeof(*r->parts));
    fl__free(fl__coord_alloc(co), r, sizeof(*r));
}

void fl__coord_pop_free(fl_coord *co, struct fl__coord_pop *p) {
    if (!p)
        return;
    fl__coord_round_free(co, p->round);
    fl__coord_round_free(co, p->last);
    for (size_t i = 0; i < FL__COORD_ROUNDS_KEPT - 1; i++)
        fl__coord_round_free(co, p->older[i]);
    fl__free(fl__coord_alloc(co), p->opt_m, p->opt_dim * sizeof(float));
    fl__free(fl__coord_alloc(co), p->opt_v, p->opt_dim * sizeof(float));
    fl__coord_blob_unref(p->model_blob);
    regions_free(co, p);
    if (p->config)
        json_decref(p->config);
    fl__free(fl__coord_alloc(co), p, sizeof(*p));
}

struct fl__coord_pop *fl__coord_pop_find(fl_coord *co, const char *name) {
    for (size_t i = 0; i < co->n_pops; i++)
        if (strcmp(co->pops[i]->name, name) == 0)
            return co->pops[i];
    return NULL;
}

struct fl__coord_pop *fl__coord_pop_by_id(fl_coord *co, int64_t id) {
    for (size_t i = 0; i < co->n_pops; i++)
        if (co->pops[i]->id == id)
            return co->pops[i];
    return NULL;
}

fl_status fl__coord_abandon_unfinished(fl_coord *co, struct fl__coord_pop *p,
                                       const char *reason) {
    fl_store_round *rs = NULL;
    size_t n = 0;
    fl_status rc = fl_store_round_list_unfinished(co->store, &rs, &n, p->id);
    for (size_t i = 0; rc == FL_OK && i < n; i++) {
        int64_t rid = rs[i].id;
        if (p->round && p->round->id == rid)
            continue; /* this process's live round */
        /* The abandonment and its audit entry commit together or not at all; at start-up a
         * failure stops the coordinator (a round ended without its entry, or a new round
         * beside an open one, would break the log's promises). */
        rc = fl_store_begin(co->store);
        if (rc == FL_OK)
            rc = fl__coord_audit_restart_abandon(co, p, rid, reason);
        if (rc == FL_OK)
            rc = fl_store_commit(co->store);
        if (rc != FL_OK) {
            if (!reason) /* start-up: the caller's error */
                fl__err_set(&co->err, rc, "population %s: round %lld, left open by the "
                            "previous process, could not be abandoned (nothing written): %s",
                            p->name, (long long)rid, fl_store_errmsg(co->store));
            if (fl_store_in_transaction(co->store))
                fl_store_rollback(co->store);
            break;
        }
        fl__log(&co->logger, FL_LOG_WARN, "round %lld of %s abandoned: %s", (long long)rid,
                p->name, reason ? reason : "coordinator restarted");
        if (!reason)
            atomic_fetch_add(&co->metrics.rounds_abandoned, 1);
    }
    if (rc != FL_OK && !reason && n == 0)
        fl__err_set(&co->err, rc, "population %s: listing its open rounds: %s", p->name,
                    fl_store_errmsg(co->store));
    fl_store_free(co->store, rs);
    return rc;
}

void fl__coord_round_abandon(fl_coord *co, struct fl__coord_pop *p, const char *reason) {
    struct fl__coord_round *r = p->round;
    if (!r)
        return;
    if (r->aggregating) {
        /* Its sum is being turned into the next model without the lock: it completes (or
         * fails and is abandoned then), as it would have had the lock been held. */
        fl__log(&co->logger, FL_LOG_INFO, "round %lld of %s is aggregating; not abandoned (%s)",
                (long long)r->id, p->name, reason);
        return;
    }
    /* The selection of a forming synchronous round is kept in memory (api.c; a running
     * round's was written when it started): record who was selected together with the
     * abandonment, in one transaction. A participant that cannot be recorded (client
     * erased meanwhile) is skipped; each call is a savepoint. */
    bool own_tx = !fl_store_in_transaction(co->store) && fl_store_begin(co->store) == FL_OK;
    bool record = !r->rp.buffered && r->n > 0 && r->state == FL__ROUND_FORMING;
    for (size_t i = 0; own_tx && record && i < r->n; i++) {
        uint8_t ph[32];
        if (fl_store_participant_set_v2(co->store, r->id, r->parts[i].client_id,
                                        FL_STORE_PARTICIPANT_SELECTED,
                                        fl__coord_pid_hash(ph, r->parts[i].pid)) != FL_OK)
            fl__log(&co->logger, FL_LOG_WARN, "round %lld: participant %s not recorded: %s",
                    (long long)r->id, r->parts[i].client_id, fl_store_errmsg(co->store));
    }
    if (own_tx && fl__coord_audit_abandon_counts(co, r) != FL_OK)
        fl__log(&co->logger, FL_LOG_WARN, "round %lld: counts not recorded: %s",
                (long long)r->id, fl_store_errmsg(co->store));
    fl_status rc = fl_store_round_abandon(co->store, r->id, reason);
    if (rc == FL_OK && own_tx) {
        /* The audit entry goes with the abandonment; a refused one (logged) does not keep
         * the round from ending. */
        enum fl__coord_round_state was = r->state;
        r->state = FL__ROUND_ABANDONED;
        if (fl__coord_audit_round(co, p, r, 0) != FL_OK)
            fl__log(&co->logger, FL_LOG_WARN, "round %lld: audit entry not logged: %s",
                    (long long)r->id, fl_store_errmsg(co->store));
        r->state = was;
    }
    if (own_tx) {
        if (rc == FL_OK)
            rc = fl_store_commit(co->store);
        if (rc != FL_OK && fl_store_in_transaction(co->store))
            fl_store_rollback(co->store);
        if (rc != FL_OK) /* at least the abandonment itself */
            rc = fl_store_round_abandon(co->store, r->id, reason);
    }
    if (rc != FL_OK) {
        fl__log(&co->logger, FL_LOG_ERROR, "round %lld: abandon failed (retried): %s",
                (long long)r->id, fl_store_errmsg(co->store));
        p->abandon_pending = true;
        p->abandon_retry_at = 0;
        snprintf(p->abandon_reason, sizeof(p->abandon_reason), "%s", reason);
    }
    fl__log(&co->logger, FL_LOG_WARN, "round %lld of %s abandoned: %s", (long long)r->id,
            p->name, reason);
    atomic_fetch_add(&co->metrics.rounds_abandoned, 1);
    p->rounds_done[1]++;
    fl__coord_metrics_round_done(&co->metrics, 1, fl__coord_now(co) - r->created_at);
    r->state = FL__ROUND_ABANDONED;
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    fl__coord_round_retire(co, p);
    if (!fl_store_in_transaction(co->store))
        fl__coord_audit_checkpoint(co);
}

json_t *fl__coord_pop_state_json(fl_coord *co, const struct fl__coord_pop *p) {
    (void)co;
    json_t *o = json_pack("{s:s, s:s, s:O}", "name", p->name, "state",
                          !p->running            ? "stopped"
                          : p->budget_exhausted ? "budget_exhausted"
                                                : "running",
                          "config", p->config);
    if (!o)
        return NULL;
    json_object_set_new(o, "model_version",
                        p->model_version ? json_integer(p->model_version) : json_null());
    json_object_set_new(o, "current_round", p->round ? json_integer(p->round->id) : json_null());
    if (p->round) {
        json_object_set_new(o, "round_state",
                            json_string(p->round->state == FL__ROUND_FORMING ? "forming"
                                                                             : "running"));
        json_object_set_new(o, "round_selected", json_integer((json_int_t)p->round->n));
    }
    json_object_set_new(o, "round_error",
                        p->round_error[0]
                            ? json_pack("{s:s, s:I}", "message", p->round_error, "at_unix_ms",
                                        (json_int_t)p->round_error_at)
                            : json_null());
    return o;
}

/* ---- loading at startup ---- */

/* A secure population stored before its selection had to reach SECAGG_MIN_CLIENTS (its
 * rounds with fewer were abandoned at their start) would now fail to parse and stop the
 * coordinator from opening: its target and minimum are raised to the secure minimum in
 * memory, with a warning. The stored row is left as it was until the next PATCH. Returns
 * false when out of memory. */
static bool raise_secure_minimum(fl_coord *co, const char *name, json_t *cfg) {
    json_t *sa = json_object_get(cfg, "secagg");
    json_t *en = json_is_object(sa) ? json_object_get(sa, "enabled") : NULL;
    json_t *sel = json_object_get(cfg, "selection");
    if (!json_is_object(sel) || (en && !json_is_true(en)))
        return true;
    static const char *const keys[] = {"target", "min_participants"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(sel, keys[i]);
        if (!json_is_integer(v) || json_integer_value(v) >= SECAGG_MIN_CLIENTS)
            continue;
        fl__log(&co->logger, FL_LOG_WARN,
                "population %s: selection.%s %lld raised to %d (secure aggregation needs at "
                "least %d participants)", name, keys[i], (long long)json_integer_value(v),
                SECAGG_MIN_CLIENTS, SECAGG_MIN_CLIENTS);
        if (json_object_set_new(sel, keys[i], json_integer(SECAGG_MIN_CLIENTS)) != 0)
            return false;
    }
    return true;
}

fl_status fl__coord_pop_load(fl_coord *co, const fl_store_population *sp) {
    struct fl__coord_reply rep;
    memset(&rep, 0, sizeof(rep));
    json_error_t jerr;
    json_t *cfg = json_loads(sp->config_json, 0, &jerr);
    fl_status rc = FL_OK;
    struct fl__coord_pop *p = fl__calloc(fl__coord_alloc(co), 1, sizeof(*p));
    if (!p) {
        rc = FL_ERR_NOMEM;
        goto out;
    }
    if (!cfg || !json_is_object(cfg)) {
        rc = fl__err_set(&co->err, FL_ERR_CORRUPT, "population %s: config is not JSON", sp->name);
        goto out;
    }
    const char *hash = json_string_value(json_object_get(cfg, "enrollment_token_sha256"));
    if (!hash || !fl__coord_unhex(p->enroll_hash, 32, hash)) {
        rc = fl__err_set(&co->err, FL_ERR_CORRUPT, "population %s: no enrollment token hash",
                         sp->name);
        goto out;
    }
    json_object_del(cfg, "enrollment_token_sha256");
    if (!raise_secure_minimum(co, sp->name, cfg)) {
        rc = FL_ERR_NOMEM;
        goto out;
    }
    if (!fl__coord_pop_parse(co, p, cfg, &rep)) {
        rc = fl__err_set(&co->err, FL_ERR_CORRUPT, "population %s: stored config invalid",
                         sp->name);
        goto out;
    }
    p->id = sp->id;
    p->running = sp->state == FL_STORE_POPULATION_ACTIVE;
    p->audit_off = !(sp->epsilon < 9e9);
    if (p->audit_off)
        fl__log(&co->logger, FL_LOG_WARN, "population %s: budget epsilon %g cannot be stated in "
                "the audit log; its rounds are not logged", p->name, sp->epsilon);
    char tag[FL__COORD_NAME_MAX + 16];
    snprintf(tag, sizeof(tag), "population/%s", p->name);
    int64_t v = 0;
    if (fl_store_tag_resolve(co->store, &v, tag) == FL_OK)
        p->model_version = v;
    fl__coord_opt_load(co, p);
    fl__coord_epsilon_refresh(co, p);
    /* Rounds left OPEN or RUNNING by a previous process cannot continue: their secagg
     * state and accumulators lived in that process's memory. Every one is abandoned, not
     * only the latest (an abandonment refused by a full disk leaves an older one behind). */
    rc = fl__coord_abandon_unfinished(co, p, NULL);
    if (rc != FL_OK)
        goto out;
    if (co->n_pops == co->cap_pops) {
        size_t nc = co->cap_pops ? co->cap_pops * 2 : 8;
        struct fl__coord_pop **np = fl__realloc(fl__coord_alloc(co), co->pops,
                                                co->cap_pops * sizeof(*np), nc * sizeof(*np));
        if (!np) {
            rc = FL_ERR_NOMEM;
            goto out;
        }
        co->pops = np;
        co->cap_pops = nc;
    }
    co->pops[co->n_pops++] = p;
    p = NULL;
out:
    if (rep.json)
        json_decref(rep.json);
    if (cfg)
        json_decref(cfg);
    fl__coord_pop_free(co, p);
    return rc;
}

fl_status fl__coord_pops_load_all(fl_coord *co) {
    fl_store_population *arr = NULL;
    size_t n = 0;
    fl_status rc = fl_store_population_list(co->store, &arr, &n);
    if (rc != FL_OK)
        return fl__err_set(&co->err, rc, "%s", fl_store_errmsg(co->store));
    for (size_t i = 0; i < n && rc == FL_OK; i++)
        if (arr[i].state != FL_STORE_POPULATION_CLOSED)
            rc = fl__coord_pop_load(co, &arr[i]);
    fl_store_free(co->store, arr);
    return rc;
}

/* ---- timers ---- */

fl_status fl__coord_round_maybe_start(fl_coord *co, struct fl__coord_pop *p, int64_t now) {
    struct fl__coord_round *r = p->round;
    if (r && r->state == FL__ROUND_FORMING && r->n >= r->cap)
        return fl__coord_round_run(co, p, now);
    return FL_OK;
}

void fl__coord_tick_pops(fl_coord *co, int64_t now) {
    for (size_t i = 0; i < co->n_pops; i++) {
        struct fl__coord_pop *p = co->pops[i];
        if (p->abandon_pending && now >= p->abandon_retry_at) {
            if (fl__coord_abandon_unfinished(co, p, p->abandon_reason) == FL_OK) {
                p->abandon_pending = false;
                fl__coord_audit_checkpoint(co);
            } else {
                p->abandon_retry_at = now + 1000;
            }
        }
        struct fl__coord_round *r = p->round;
        if (!r)
            continue;
        if (r->state == FL__ROUND_FORMING && now >= r->forming_deadline) {
            /* Validation keeps a secure population's minimum at SECAGG_MIN_CLIENTS or more;
             * the round checks it again so that no path starts one the secagg server
             * would refuse. */
            int64_t need = p->sel.min_participants;
            if (r->rp.secagg && need < SECAGG_MIN_CLIENTS)
                need = SECAGG_MIN_CLIENTS;
            if ((int64_t)r->n >= need) {
                (void)fl__coord_round_run(co, p, now); /* a failure abandons it (logged) */
            } else if (!r->extended && r->n > 0) {
                /* Some clients came but too few: give the round one more forming window
                 * before abandoning it (devices already selected keep their slot). */
                r->extended = true;
                r->forming_deadline = now + p->sel.forming_s * 1000;
                fl__log(&co->logger, FL_LOG_INFO,
                        "round %lld of %s: %zu < %lld clients at the forming deadline; "
                        "forming extended once by %llds", (long long)r->id, p->name, r->n,
                        (long long)need, (long long)p->sel.forming_s);
            } else {
                char why[128];
                snprintf(why, sizeof(why), "too few clients selected: %zu < %lld", r->n,
                         (long long)need);
                fl__coord_round_abandon(co, p, why);
            }
        } else if (r->state == FL__ROUND_RUNNING && r->rp.buffered) {
            fl__coord_buffer_tick(co, p, now);
        } else if (r->state == FL__ROUND_RUNNING) {
            fl__coord_round_tick(co, p, now);
        }
    }
}

/* Runs the admin population-config validation on raw bytes (tests/fuzz/coord_bodies.c);
 * returns the HTTP status it would answer (200 when valid). */
int fl__coord_fuzz_population(const uint8_t *b, size_t n) {
    struct fl__coord_reply rep;
    memset(&rep, 0, sizeof(rep));
    rep.retry_after_s = -1;
    json_t *cfg = json_loadb((const char *)b, n, JSON_REJECT_DUPLICATES, NULL);
    int status = 400;
    struct fl__coord_pop *p = calloc(1, sizeof(*p));
    if (cfg && json_is_object(cfg) && p)
        status = fl__coord_pop_parse(NULL, p, cfg, &rep) ? 200 : rep.status;
    fl__coord_pop_free(NULL, p);
    if (cfg)
        json_decref(cfg);
    if (rep.json)
        json_decref(rep.json);
    return status;
}
