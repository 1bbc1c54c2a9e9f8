/* Round parameters, the privacy-budget check, and aggregation: decoding the final sum
 * (docs/protocol.md sections 5.1 and 9), central DP noise, the server strategies (FedAvg,
 * FedAvgM, FedProx, FedAdagrad, FedAdam, FedYogi; Reddi et al. 2021), and the one storage
 * transaction that records a completed round: new model version, its tag, the optimiser
 * state, participants, the round record and the privacy-ledger entry. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/dp.h"
#include "flotilla/tensor.h"

#include "coord_internal.h"

/* Probability bound on any coordinate of a distributed-DP sum wrapping mod 2^b. */
#define DDG_WRAP_PROB 1e-9

void fl__coord_round_params_free(fl_coord *co, struct fl__coord_round_params *rp) {
    for (size_t i = 0; i < rp->n_tensors; i++)
        fl__free(fl__coord_alloc(co), rp->tensors[i], strlen(rp->tensors[i]) + 1);
    fl__free(fl__coord_alloc(co), rp->tensors, rp->tensors_cap * sizeof(char *));
    rp->tensors = NULL;
    rp->n_tensors = 0;
    rp->tensors_cap = 0;
}

static void central_params(fl_dp_central_params *cp, const struct fl__coord_round_params *rp) {
    fl_dp_central_params_init(cp);
    cp->clip = rp->clip;
    cp->granularity = rp->granularity;
    cp->beta = rp->beta;
    cp->sigma2_num = rp->sigma2_num;
    cp->sigma2_den = rp->sigma2_den;
}

static void distributed_params(fl_dp_distributed_params *dp,
                               const struct fl__coord_round_params *rp) {
    fl_dp_distributed_params_init(dp);
    dp->dim = rp->dim;
    dp->clip = rp->clip;
    dp->granularity = rp->granularity;
    dp->beta = rp->beta;
    dp->modulus_bits = rp->bits;
    dp->n_min = rp->n_min;
    dp->sigma2_num = rp->sigma2_num;
    dp->sigma2_den = rp->sigma2_den;
}

/* Adds tensor names to rp: update.tensors, or every F32 tensor of the model. Fills dim. */
static fl_status collect_tensors(fl_coord *co, struct fl__coord_round_params *rp, json_t *list,
                                 const fl_safetensors *st, char *why, size_t why_len) {
    size_t n = list ? json_array_size(list) : fl_safetensors_count(st);
    rp->tensors = fl__calloc(fl__coord_alloc(co), n ? n : 1, sizeof(char *));
    if (!rp->tensors)
        return FL_ERR_NOMEM;
    rp->tensors_cap = n ? n : 1;
    rp->dim = 0;
    for (size_t i = 0; i < n; i++) {
        fl_tensor_view v;
        if (list) {
            const char *name = json_string_value(json_array_get(list, i));
            if (!name || fl_safetensors_find(st, &v, name) != FL_OK) {
                snprintf(why, why_len, "update tensor '%.64s' is not in the model",
                         name ? name : "?");
                return FL_ERR_FORMAT;
            }
            if (v.dtype != FL_DTYPE_F32) {
                snprintf(why, why_len, "update tensor '%.64s' is not F32", name);
                return FL_ERR_FORMAT;
            }
        } else {
            fl_safetensors_at(st, &v, i);
            if (v.dtype != FL_DTYPE_F32)
                continue;
        }
        rp->tensors[rp->n_tensors] = fl__strdup(fl__coord_alloc(co), v.name);
        if (!rp->tensors[rp->n_tensors])
            return FL_ERR_NOMEM;
        rp->n_tensors++;
        rp->dim += v.nbytes / 4;
    }
    if (rp->dim == 0) {
        snprintf(why, why_len, "the model has no F32 update tensors");
        return FL_ERR_FORMAT;
    }
    return FL_OK;
}

/* Norm proofs (secagg.norm_proof; docs/protocol.md section 5.1): a device proves that its
 * model coordinates have sum z^2 <= B^2, B the l2_bound of fl_dp_central_info for clip times
 * the largest weight (what the server clips a plain update to), that each lies in
 * [-2^(m-1), 2^(m-1)), and that its weight lies in [1, largest weight]. m plus the headroom
 * of cap devices must fit the modulus, so that the proven inputs cannot wrap the sum. */
static fl_status norm_params(struct fl__coord_round_params *rp, size_t cap, char *why,
                             size_t why_len) {
    uint64_t wmax = rp->weight_examples ? (uint64_t)rp->weight_cap : 1;
    double b2 = fl__coord_norm_bound2(rp, wmax);
    /* B^2 = 0 would admit only zero updates (and the audit log refuses it): not a bound. */
    if (!(b2 >= 1.0 && b2 < 4e18)) {
        snprintf(why, why_len, "no norm bound for clip %g x weight %llu at granularity %g",
                 rp->clip, (unsigned long long)wmax, rp->granularity);
        return FL_ERR_RANGE;
    }
    uint64_t bound2 = (uint64_t)b2, root = (uint64_t)sqrt(b2);
    while (root * root > bound2)
        root--;
    while ((root + 1) * (root + 1) <= bound2)
        root++;
    uint32_t m = 1;
    while (m < 64 && (root >> m) != 0)
        m++;
    m++; /* the sign */
    uint32_t head = fl_secagg_headroom_bits((uint32_t)cap);
    if (m + head > rp->bits) {
        snprintf(why, why_len, "norm proofs need %u bits per coordinate and %u of headroom for "
                 "%zu devices, over privacy.modulus_bits %u (raise granularity or lower "
                 "clip_norm)", m, head, cap, rp->bits);
        return FL_ERR_RANGE;
    }
    rp->norm_bits = m;
    rp->norm_bound2 = bound2;
    rp->norm_weight_max = (uint32_t)wmax;
    return FL_OK;
}

fl_status fl__coord_round_params_init(fl_coord *co, struct fl__coord_pop *p,
                                      struct fl__coord_round *r, char *why, size_t why_len) {
    struct fl__coord_round_params *rp = &r->rp;
    json_t *cfg = p->config;
    json_t *pr = json_object_get(cfg, "privacy");
    json_t *up = json_object_get(cfg, "update");
    const char *mode = json_string_value(json_object_get(pr, "mode"));
    rp->secagg = json_is_true(json_object_get(json_object_get(cfg, "secagg"), "enabled"));
    rp->active = rp->secagg && p->active;
    rp->reveal_seeds =
        rp->secagg &&
        json_is_true(json_object_get(json_object_get(cfg, "secagg"), "reveal_pair_seeds"));
    rp->dp = strcmp(mode, "central") == 0       ? FL__DP_CENTRAL
             : strcmp(mode, "distributed") == 0 ? FL__DP_DISTRIBUTED
                                                : FL__DP_NONE;
    rp->weight_examples =
        strcmp(json_string_value(json_object_get(up, "weighting")), "examples") == 0;
    rp->weight_cap = json_integer_value(json_object_get(up, "weight_cap"));
    rp->bits = (uint32_t)json_integer_value(json_object_get(pr, "modulus_bits"));
    rp->clip = json_number_value(json_object_get(pr, "clip_norm"));
    rp->granularity = json_number_value(json_object_get(pr, "granularity"));
    rp->beta = exp(-0.5);
    rp->noise_multiplier = rp->dp != FL__DP_NONE
                               ? json_number_value(json_object_get(pr, "noise_multiplier"))
                               : 0.0;
    double pop_size = rp->dp != FL__DP_NONE
                          ? (double)json_integer_value(json_object_get(pr, "population_size"))
                          : 1.0;
    /* Charge what can actually take part: over-selection admits up to
     * ceil(target * over_selection) devices per round, not just the target. */
    double cap = ceil((double)p->sel.target * p->sel.over_selection);
    rp->q = cap / pop_size;
    if (rp->q > 1.0)
        rp->q = 1.0;
    /* A FedBuff buffer takes whichever devices happen to arrive first, not a Poisson sample
     * of the population: nothing random decides who is in it, so no amplification by
     * sampling may be claimed. Each flush is charged as one unsampled Gaussian step. */
    if (r->rp.buffered)
        rp->q = 1.0;
    fl__coord_random(rp->rotation_seed, sizeof(rp->rotation_seed));
    fl__coord_random(rp->quant_seed, sizeof(rp->quant_seed));

    struct fl__coord_blob *m = NULL;
    fl_safetensors *st = NULL;
    fl_status rc = fl__coord_model_blob(co, p, r->base_version, &m);
    if (rc != FL_OK) {
        snprintf(why, why_len, "model version %lld: %s", (long long)r->base_version,
                 rc == FL_ERR_NOMEM ? "out of memory" : fl_store_errmsg(co->store));
        goto out;
    }
    rc = fl_safetensors_create(&st, fl__coord_pub_alloc(co));
    if (rc == FL_OK)
        rc = fl_safetensors_parse(st, m->data, m->len);
    if (rc != FL_OK) {
        snprintf(why, why_len, "model version %lld is not safetensors: %s",
                 (long long)r->base_version, fl_safetensors_errmsg(st));
        goto out;
    }
    rc = collect_tensors(co, rp, json_object_get(up, "tensors"), st, why, why_len);
    if (rc != FL_OK)
        goto out;
    rp->dim_coded = rp->dim;
    if (rp->dp == FL__DP_DISTRIBUTED) {
        fl_dp_distributed_params dp;
        fl_dp_distributed_params_init(&dp);
        dp.dim = rp->dim;
        dp.clip = rp->clip;
        dp.beta = rp->beta;
        dp.modulus_bits = rp->bits;
        dp.n_min = (uint32_t)p->sel.min_participants;
        /* fl_dp_distributed_choose picks the finest gamma the modulus allows, which with
         * many bits makes the per-client variance overflow the sampler's 2^40 range
         * (FL_ERR_RANGE). Choosing as if the modulus were smaller only makes wrap-around
         * less likely, so step the bits down until a choice fits; the field stays 2^b. */
        rc = FL_ERR_RANGE;
        for (uint32_t b = rp->bits; b >= 8 && rc == FL_ERR_RANGE; b--) {
            dp.modulus_bits = b;
            rc = fl_dp_distributed_choose(&dp, rp->noise_multiplier, (uint32_t)r->cap,
                                          DDG_WRAP_PROB);
        }
        dp.modulus_bits = rp->bits;
        fl_dp_distributed_info info;
        if (rc == FL_OK)
            rc = fl_dp_distributed_info_get(&info, &dp, dp.n_min);
        if (rc != FL_OK) {
            snprintf(why, why_len, "no distributed-DP parameters for %u bits, %zu clients, "
                     "d=%zu (%s)", rp->bits, r->cap, rp->dim, fl_status_str(rc));
            goto out;
        }
        rp->granularity = dp.granularity;
        rp->sigma2_num = dp.sigma2_num;
        rp->sigma2_den = dp.sigma2_den;
        rp->n_min = dp.n_min;
        rp->l2_bound = info.l2_bound;
        rp->dim_coded = info.dim_padded;
    } else if (rp->dp == FL__DP_CENTRAL) {
        fl_dp_central_params cp;
        fl_dp_central_info info;
        rp->sigma2_num = rp->sigma2_den = 1;
        central_params(&cp, rp);
        rc = fl_dp_central_info_get(&info, &cp, rp->dim);
        double var = rp->noise_multiplier * info.l2_bound;
        var *= var;
        if (rc == FL_OK)
            rc = fl_dp_variance_to_rational(&rp->sigma2_num, &rp->sigma2_den, var, 1);
        if (rc != FL_OK) {
            snprintf(why, why_len, "central noise variance %.3g is out of range for "
                     "granularity %g", var, rp->granularity);
            goto out;
        }
        rp->l2_bound = info.l2_bound;
    }
    rp->vec_len = rp->dim_coded + 1;
    if (rp->secagg && rp->vec_len > 268435456u) {
        snprintf(why, why_len, "update vector of %zu coordinates is too long for secagg",
                 rp->vec_len);
        rc = FL_ERR_RANGE;
    }
    /* A secure sum adds the weight coordinates mod 2^bits unseen: cap devices at the weight
     * bound must not wrap (a wrap would be a silently wrong average, not an error). */
    uint64_t wmax = rp->weight_examples ? (uint64_t)rp->weight_cap : 1;
    if (rc == FL_OK && rp->secagg && rp->bits < 64 &&
        (double)wmax * (double)r->cap >= ldexp(1.0, (int)rp->bits)) {
        snprintf(why, why_len, "weights up to %llu from %zu devices can wrap the %u-bit secure "
                 "sum (lower update.weight_cap or raise privacy.modulus_bits)",
                 (unsigned long long)wmax, r->cap, rp->bits);
        rc = FL_ERR_RANGE;
    }
    rp->norm_bits = 0;
    rp->norm_bound2 = 0;
    if (rc == FL_OK && rp->secagg &&
        json_is_true(json_object_get(json_object_get(cfg, "secagg"), "norm_proof")))
        rc = norm_params(rp, r->cap, why, why_len);
out:
    fl_safetensors_destroy(st);
    fl__coord_blob_unref(m);
    return rc;
}

/* ---- privacy ledger and budget ---- */

/* The ledger entry a round of rp with `participants` clients charges. */
static void round_entry(fl_dp_ledger_entry *e, const struct fl__coord_round_params *rp,
                        uint64_t participants) {
    bool dist = rp->dp == FL__DP_DISTRIBUTED;
    fl_dp_ledger_entry_init(e, dist ? FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN
                                    : FL_DP_MECH_DISCRETE_GAUSSIAN);
    e->q = rp->q;
    e->noise_multiplier = rp->noise_multiplier;
    e->clip_norm = rp->clip;
    e->steps = 1;
    e->participants = participants;
    e->sigma = sqrt((double)rp->sigma2_num / (double)rp->sigma2_den);
    e->l2_sensitivity = rp->l2_bound;
    if (dist)
        e->dim = rp->dim_coded;
}

fl_status fl__coord_budget_check(fl_coord *co, struct fl__coord_pop *p,
                                 const struct fl__coord_round *r, char *why, size_t why_len) {
    const struct fl__coord_round_params *rp = &r->rp;
    if (rp->dp == FL__DP_NONE)
        return FL_OK;
    json_t *pr = json_object_get(p->config, "privacy");
    fl_dp_budget budget = {json_number_value(json_object_get(pr, "epsilon_budget")),
                           json_number_value(json_object_get(pr, "delta"))};
    fl_store_ledger_entry *le = NULL;
    size_t n = 0;
    fl_status rc = fl_store_ledger_list(co->store, &le, &n, p->id);
    if (rc != FL_OK) {
        snprintf(why, why_len, "reading the privacy ledger: %s", fl_store_errmsg(co->store));
        return rc;
    }
    fl_dp_ledger_entry *es = n ? fl__calloc(&co->alloc, n, sizeof(*es)) : NULL;
    if (n && !es) {
        fl_store_free(co->store, le);
        snprintf(why, why_len, "out of memory");
        return FL_ERR_NOMEM;
    }
    for (size_t i = 0; i < n && rc == FL_OK; i++) {
        fl_dp_ledger_entry_init(&es[i], le[i].mechanism);
        es[i].q = le[i].sampling_rate;
        es[i].noise_multiplier = le[i].noise_multiplier;
        es[i].clip_norm = le[i].clip_norm;
        es[i].steps = (uint64_t)le[i].steps;
        es[i].participants = (uint64_t)le[i].participants;
        rc = fl_dp_ledger_entry_parse_params(&es[i], le[i].params_json, why, why_len);
    }
    fl_dp_ledger_entry proposed;
    /* The noise of a distributed round is sized for n_min survivors: charge that case. A
     * FedBuff buffer flushes with exactly K updates. */
    round_entry(&proposed, rp,
                rp->dp == FL__DP_DISTRIBUTED ? rp->n_min : rp->buffered ? rp->buffer_k : r->cap);
    fl_dp_budget_report report;
    memset(&report, 0, sizeof(report));
    char msg[256] = "";
    if (rc == FL_OK)
        rc = fl_dp_budget_check(&report, &budget, es, n, &proposed, NULL,
                                fl__coord_pub_alloc(co), msg, sizeof(msg));
    if (rc == FL_ERR_BUDGET) {
        snprintf(why, why_len, "privacy budget exhausted: %s", msg);
        /* Logged once per refusal streak (each check-in while exhausted re-checks). */
        if (!p->budget_exhausted && !p->audit_off) {
            fl_store_round *last = NULL;
            int64_t num = 1;
            if (fl_store_round_find(co->store, &last, p->id, 0) == FL_OK)
                num = last->round_number + 1;
            fl_store_free(co->store, last);
            fl_status arc = fl_store_audit_append_refusal(co->store, NULL, p->id, num,
                                                          report.epsilon_after, budget.delta);
            if (arc == FL_OK)
                fl__coord_audit_checkpoint(co);
            else
                fl__log(&co->logger, FL_LOG_WARN, "population %s: refusal not logged: %s",
                        p->name, fl_store_errmsg(co->store));
        }
    }
    else if (rc != FL_OK && msg[0])
        snprintf(why, why_len, "privacy budget check failed: %s", msg);
    else if (rc == FL_OK)
        fl__log(&co->logger, FL_LOG_INFO,
                "population %s: privacy budget allows the round (epsilon %.4f -> %.4f of %.4f "
                "at delta %g)", p->name, report.epsilon_before, report.epsilon_after,
                report.epsilon_budget, report.delta);
    fl__free(&co->alloc, es, n * sizeof(*es));
    fl_store_free(co->store, le);
    return rc;
}

/* Epsilon spent so far, for /metrics: the ledger composed into a fresh accountant at the
 * budget's delta. Failures leave the previous figure (logged at debug). Lock held. */
void fl__coord_epsilon_refresh(fl_coord *co, struct fl__coord_pop *p) {
    json_t *pr = json_object_get(p->config, "privacy");
    const char *mode = json_string_value(json_object_get(pr, "mode"));
    if (!mode || strcmp(mode, "none") == 0) {
        p->epsilon_budget = 0;
        p->epsilon_spent = 0;
        return;
    }
    p->epsilon_budget = json_number_value(json_object_get(pr, "epsilon_budget"));
    double eps = 0;
    fl_status rc = fl__coord_ledger_epsilon(co, p, json_number_value(json_object_get(pr, "delta")),
                                            &eps);
    if (rc == FL_OK)
        p->epsilon_spent = eps;
    else
        fl__log(&co->logger, FL_LOG_DEBUG, "population %s: epsilon not computed: %s", p->name,
                fl_status_str(rc));
}

/* ---- strategies ---- */

enum strategy { ST_FEDAVG, ST_FEDAVGM, ST_FEDADAGRAD, ST_FEDADAM, ST_FEDYOGI };

static enum strategy strategy_of(const char *name) {
    if (strcmp(name, "fedavgm") == 0)
        return ST_FEDAVGM;
    if (strcmp(name, "fedadagrad") == 0)
        return ST_FEDADAGRAD;
    if (strcmp(name, "fedadam") == 0)
        return ST_FEDADAM;
    if (strcmp(name, "fedyogi") == 0)
        return ST_FEDYOGI;
    return ST_FEDAVG; /* fedavg, fedprox (clients add the proximal term), fedbuff */
}

static double num_or(json_t *o, const char *key, double def) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* Applies the population's strategy to the flattened weights w (dim) with the averaged
 * delta d, producing the new optimiser state in m, v (dim each; NULL when unused). The
 * previous state is p->opt_* if it belongs to the base version, else zero moments and
 * v = tau^2 (Reddi et al. 2021 initialise v_{-1} >= tau^2). */
static void apply_strategy(struct fl__coord_pop *p, int64_t base_version, float *w,
                           const float *d, size_t dim, float *m, float *v) {
    json_t *st = json_object_get(p->config, "strategy");
    enum strategy s = strategy_of(json_string_value(json_object_get(st, "name")));
    double lr = num_or(st, "server_lr", 1.0);
    double tau = num_or(st, "tau", 1e-3);
    double b1 = num_or(st, "beta1", 0.9), b2 = num_or(st, "beta2", 0.99);
    double mom = num_or(st, "momentum", 0.9);
    bool prev = p->opt_dim == dim && p->opt_version == base_version;
    for (size_t i = 0; i < dim; i++) {
        double di = d[i];
        double mi = prev && p->opt_m ? p->opt_m[i] : 0.0;
        double vi = prev && p->opt_v ? p->opt_v[i] : tau * tau;
        switch (s) {
        case ST_FEDAVG:
            w[i] = (float)(w[i] + lr * di);
            break;
        case ST_FEDAVGM:
            mi = mom * mi + di;
            w[i] = (float)(w[i] + lr * mi);
            break;
        case ST_FEDADAGRAD:
            vi += di * di;
            w[i] = (float)(w[i] + lr * di / (sqrt(vi) + tau));
            break;
        case ST_FEDADAM:
        case ST_FEDYOGI:
            mi = b1 * mi + (1 - b1) * di;
            if (s == ST_FEDADAM) {
                vi = b2 * vi + (1 - b2) * di * di;
            } else {
                double dd = di * di, sg = vi - dd > 0 ? 1.0 : vi - dd < 0 ? -1.0 : 0.0;
                vi = vi - (1 - b2) * dd * sg;
            }
            w[i] = (float)(w[i] + lr * mi / (sqrt(vi) + tau));
            break;
        }
        if (m)
            m[i] = (float)mi;
        if (v)
            v[i] = (float)vi;
    }
}

/* ---- optimiser state in the registry ---- */

static void opt_tag(char *out, size_t n, const struct fl__coord_pop *p) {
    snprintf(out, n, "population/%s/optimizer", p->name);
}

void fl__coord_opt_load(fl_coord *co, struct fl__coord_pop *p) {
    char tag[FL__COORD_NAME_MAX + 32];
    opt_tag(tag, sizeof(tag), p);
    int64_t v = 0;
    fl_store_model *m = NULL;
    fl_safetensors *st = NULL;
    if (fl_store_tag_resolve(co->store, &v, tag) != FL_OK ||
        fl_store_model_get(co->store, &m, v) != FL_OK)
        return;
    if (fl_safetensors_create(&st, fl__coord_pub_alloc(co)) == FL_OK &&
        fl_safetensors_parse(st, m->bytes, m->size) == FL_OK) {
        fl_tensor_view tm, tv;
        bool hm = fl_safetensors_find(st, &tm, "m") == FL_OK && tm.dtype == FL_DTYPE_F32;
        bool hv = fl_safetensors_find(st, &tv, "v") == FL_OK && tv.dtype == FL_DTYPE_F32;
        size_t dim = hm ? tm.nbytes / 4 : hv ? tv.nbytes / 4 : 0;
        if (dim && (!hm || !hv || tm.nbytes == tv.nbytes)) {
            p->opt_m = hm ? fl__alloc(fl__coord_alloc(co), tm.nbytes) : NULL;
            p->opt_v = hv ? fl__alloc(fl__coord_alloc(co), tv.nbytes) : NULL;
            if ((!hm || p->opt_m) && (!hv || p->opt_v)) {
                if (hm)
                    memcpy(p->opt_m, tm.data, tm.nbytes);
                if (hv)
                    memcpy(p->opt_v, tv.data, tv.nbytes);
                p->opt_dim = dim;
                p->opt_version = m->parent;
            } else {
                fl__free(fl__coord_alloc(co), p->opt_m, tm.nbytes);
                fl__free(fl__coord_alloc(co), p->opt_v, tv.nbytes);
                p->opt_m = p->opt_v = NULL;
            }
        }
    }
    fl_safetensors_destroy(st);
    fl_store_free(co->store, m);
}

/* Serialises a writer into a buffer of *len bytes from the instance allocator. */
static fl_status writer_bytes(fl_coord *co, fl_safetensors_writer *w, uint8_t **out,
                              size_t *len) {
    fl_status rc = fl_safetensors_writer_size(w, len);
    if (rc != FL_OK)
        return rc;
    *out = fl__alloc(fl__coord_alloc(co), *len);
    if (!*out)
        return FL_ERR_NOMEM;
    rc = fl_safetensors_writer_serialize(w, *out, *len);
    if (rc != FL_OK) {
        fl__free(fl__coord_alloc(co), *out, *len);
        *out = NULL;
    }
    return rc;
}

/* ---- aggregation ---- */

/* Central DP: adds the population's discrete Gaussian noise (sigma^2 = sigma2_num/den on the
 * lattice, fixed when the round's parameters were set) to the integer sum z (dim), with a
 * fresh OS-seeded generator. The one noise step of synchronous rounds and FedBuff flushes. */
static fl_status central_noise(fl_coord *co, const struct fl__coord_round_params *rp,
                               int64_t *z, char *why, size_t why_len) {
    fl_dp_central_params cp;
    fl_dp_rng *rng = NULL;
    central_params(&cp, rp);
    fl_status rc = fl_dp_rng_create_os(&rng, fl__coord_pub_alloc(co));
    if (rc == FL_OK)
        rc = fl_dp_central_noise(rng, z, rp->dim, &cp);
    fl_dp_rng_destroy(rng);
    if (rc != FL_OK)
        snprintf(why, why_len, "central noise failed: %s", fl_status_str(rc));
    return rc;
}

/* FedBuff with central DP: the buffer holds sum_i trunc(f_i * c_i), c_i device i's clipped
 * integer update (||c_i|| <= B, the l2_bound the noise is calibrated to) and f_i =
 * 1/(1+s_i)^alpha its staleness weight, each an integer kept exactly in a double (buffer.c).
 * The noise goes on that integer sum exactly as on a synchronous round's, and the step
 * divides by the fixed K, never by a data-dependent total, so the released average has the
 * sensitivity B * granularity / K the noise was sized for. */
static fl_status decode_buffer_central(fl_coord *co, const struct fl__coord_round *r,
                                       float *delta, char *why, size_t why_len) {
    const struct fl__coord_round_params *rp = &r->rp;
    int64_t *z = fl__alloc_array(&co->alloc, rp->dim, sizeof(int64_t));
    if (!z)
        return FL_ERR_NOMEM;
    for (size_t i = 0; i < rp->dim; i++)
        z[i] = (int64_t)r->bnum[i]; /* exact: |sum| <= K * 2^31 < 2^53 */
    fl_status rc = central_noise(co, rp, z, why, why_len);
    if (rc == FL_OK)
        for (size_t i = 0; i < rp->dim; i++)
            delta[i] = (float)((double)z[i] * rp->granularity / (double)rp->buffer_k);
    fl_memzero(z, rp->dim * sizeof(int64_t));
    fl__free(&co->alloc, z, rp->dim * sizeof(int64_t));
    return rc;
}

/* Turns the final sum into the averaged delta (dim floats). */
static fl_status decode_sum(fl_coord *co, const struct fl__coord_round *r,
                            const uint64_t *sum, uint32_t count, float *delta, char *why,
                            size_t why_len) {
    const struct fl__coord_round_params *rp = &r->rp;
    fl_status rc = FL_OK;
    if (rp->buffered && rp->dp == FL__DP_CENTRAL)
        return decode_buffer_central(co, r, delta, why, why_len);
    if (rp->buffered) {
        /* FedBuff: the staleness-weighted sum over K (or over the summed weights). */
        double denom = rp->weight_examples ? r->bwsum : (double)count;
        if (denom <= 0) {
            snprintf(why, why_len, "the weights sum to zero");
            return FL_ERR_RANGE;
        }
        for (size_t i = 0; i < rp->dim; i++)
            delta[i] = (float)(r->bnum[i] * rp->granularity / denom);
        return FL_OK;
    }
    if (rp->dp == FL__DP_DISTRIBUTED) {
        fl_dp_distributed_params dp;
        distributed_params(&dp, rp);
        rc = fl_dp_distributed_decode(delta, sum, rp->dim_coded, &dp, rp->rotation_seed,
                                      fl__coord_pub_alloc(co));
        if (rc != FL_OK) {
            snprintf(why, why_len, "distributed-DP decode failed: %s", fl_status_str(rc));
            return rc;
        }
        for (size_t i = 0; i < rp->dim; i++)
            delta[i] = (float)((double)delta[i] / count);
        return FL_OK;
    }
    int64_t *z = fl__alloc_array(&co->alloc, rp->dim, sizeof(int64_t));
    if (!z)
        return FL_ERR_NOMEM;
    uint64_t mod = (uint64_t)1 << rp->bits, half = mod >> 1;
    for (size_t i = 0; i < rp->dim; i++)
        z[i] = sum[i] >= half ? -(int64_t)(mod - sum[i]) : (int64_t)sum[i];
    if (rp->dp == FL__DP_CENTRAL)
        rc = central_noise(co, rp, z, why, why_len);
    uint64_t wsum = sum[rp->vec_len - 1];
    double denom = rp->weight_examples ? (double)wsum : (double)count;
    if (rc == FL_OK && denom <= 0) {
        snprintf(why, why_len, "the weights sum to zero");
        rc = FL_ERR_RANGE;
    }
    if (rc == FL_OK)
        for (size_t i = 0; i < rp->dim; i++)
            delta[i] = (float)((double)z[i] * rp->granularity / denom);
    fl_memzero(z, rp->dim * sizeof(int64_t));
    fl__free(&co->alloc, z, rp->dim * sizeof(int64_t));
    return rc;
}

/* Builds the new model's safetensors bytes (base with the update tensors replaced by w) and
 * the optimiser state bytes (NULL when the strategy keeps none). */
static fl_status build_model(fl_coord *co, struct fl__coord_pop *p, struct fl__coord_round *r,
                             const struct fl__coord_blob *bm, const float *delta,
                             uint8_t **model, size_t *model_len, uint8_t **opt,
                             size_t *opt_len, float **m_out, float **v_out, char *why,
                             size_t why_len) {
    const struct fl__coord_round_params *rp = &r->rp;
    fl_safetensors *st = NULL;
    fl_safetensors_writer *w = NULL, *ow = NULL;
    float *wv = NULL, *m = NULL, *v = NULL;
    size_t *offs = NULL;
    *model = *opt = NULL;
    fl_status rc = fl_safetensors_create(&st, fl__coord_pub_alloc(co));
    if (rc == FL_OK)
        rc = fl_safetensors_parse(st, bm->data, bm->len);
    if (rc != FL_OK) {
        snprintf(why, why_len, "reading the base model: %s", fl_status_str(rc));
        goto out;
    }
    wv = fl__alloc_array(&co->alloc, rp->dim, sizeof(float));
    offs = fl__calloc(fl__coord_alloc(co), rp->n_tensors + 1, sizeof(size_t));
    enum strategy s = strategy_of(
        json_string_value(json_object_get(json_object_get(p->config, "strategy"), "name")));
    bool need_m = s == ST_FEDAVGM || s == ST_FEDADAM || s == ST_FEDYOGI;
    bool need_v = s == ST_FEDADAGRAD || s == ST_FEDADAM || s == ST_FEDYOGI;
    if (need_m)
        m = fl__alloc_array(fl__coord_alloc(co), rp->dim, sizeof(float));
    if (need_v)
        v = fl__alloc_array(fl__coord_alloc(co), rp->dim, sizeof(float));
    if (!wv || !offs || (need_m && !m) || (need_v && !v)) {
        rc = FL_ERR_NOMEM;
        goto out;
    }
    size_t off = 0;
    for (size_t t = 0; t < rp->n_tensors; t++) {
        fl_tensor_view tv;
        if (fl_safetensors_find(st, &tv, rp->tensors[t]) != FL_OK) {
            rc = FL_ERR_FORMAT;
            goto out;
        }
        offs[t] = off;
        memcpy(wv + off, tv.data, tv.nbytes);
        off += tv.nbytes / 4;
    }
    apply_strategy(p, r->base_version, wv, delta, rp->dim, m, v);
    for (size_t i = 0; i < rp->dim; i++)
        if (!isfinite(wv[i])) {
            snprintf(why, why_len, "the new weights are not finite (coordinate %zu)", i);
            rc = FL_ERR_RANGE;
            goto out;
        }
    rc = fl_safetensors_writer_create(&w, fl__coord_pub_alloc(co));
    for (size_t i = 0; rc == FL_OK && i < fl_safetensors_count(st); i++) {
        fl_tensor_view tv;
        fl_safetensors_at(st, &tv, i);
        const void *data = tv.data;
        for (size_t t = 0; t < rp->n_tensors; t++)
            if (strcmp(rp->tensors[t], tv.name) == 0)
                data = wv + offs[t];
        rc = fl_safetensors_writer_add(w, tv.name, tv.dtype, tv.ndim, tv.shape, data,
                                       tv.nbytes);
    }
    for (size_t i = 0; rc == FL_OK && i < fl_safetensors_metadata_count(st); i++) {
        const char *k, *val;
        fl_safetensors_metadata_at(st, &k, &val, i);
        rc = fl_safetensors_writer_set_metadata(w, k, val);
    }
    char num[32];
    snprintf(num, sizeof(num), "%lld", (long long)r->id);
    if (rc == FL_OK)
        rc = fl_safetensors_writer_set_metadata(w, "flotilla.round_id", num);
    snprintf(num, sizeof(num), "%lld", (long long)r->base_version);
    if (rc == FL_OK)
        rc = fl_safetensors_writer_set_metadata(w, "flotilla.parent_version", num);
    if (rc == FL_OK)
        rc = writer_bytes(co, w, model, model_len);
    if (rc == FL_OK && (m || v)) {
        uint64_t shape[1] = {rp->dim};
        rc = fl_safetensors_writer_create(&ow, fl__coord_pub_alloc(co));
        if (rc == FL_OK && m)
            rc = fl_safetensors_writer_add(ow, "m", FL_DTYPE_F32, 1, shape, m,
                                           rp->dim * sizeof(float));
        if (rc == FL_OK && v)
            rc = fl_safetensors_writer_add(ow, "v", FL_DTYPE_F32, 1, shape, v,
                                           rp->dim * sizeof(float));
        if (rc == FL_OK)
            rc = fl_safetensors_writer_set_metadata(
                ow, "flotilla.optimizer",
                json_string_value(json_object_get(json_object_get(p->config, "strategy"),
                                                  "name")));
        if (rc == FL_OK)
            rc = writer_bytes(co, ow, opt, opt_len);
    }
    if (rc != FL_OK && !why[0])
        snprintf(why, why_len, "building the new model: %s", fl_status_str(rc));
out:
    if (rc == FL_OK) {
        *m_out = m;
        *v_out = v;
    } else {
        fl__free(fl__coord_alloc(co), m, rp->dim * sizeof(float));
        fl__free(fl__coord_alloc(co), v, rp->dim * sizeof(float));
        fl__free(fl__coord_alloc(co), *model, *model_len);
        *model = NULL;
    }
    fl_safetensors_writer_destroy(ow);
    fl_safetensors_writer_destroy(w);
    fl_safetensors_destroy(st);
    fl__free(fl__coord_alloc(co), offs, (rp->n_tensors + 1) * sizeof(size_t));
    if (wv)
        fl__free(&co->alloc, wv, rp->dim * sizeof(float));
    return rc;
}

/* Writes everything a completed round produces in one transaction. */
/* "commit failed: <why>" for a round commit that failed with rc: the store's message when
 * the store failed; a failure outside it (the ledger parameters, the accountant) leaves the
 * store's message at "success", so then the status name. */
static void commit_why(fl_coord *co, fl_status rc, char *why, size_t why_len) {
    const char *m = fl_store_errmsg(co->store);
    if (!m || !*m || strcmp(m, fl_status_str(FL_OK)) == 0)
        m = fl_status_str(rc);
    snprintf(why, why_len, "commit failed: %s", m);
}

static fl_status commit_round(fl_coord *co, struct fl__coord_pop *p, struct fl__coord_round *r,
                              const uint8_t *model, size_t model_len, const uint8_t *opt,
                              size_t opt_len, uint32_t count, int64_t *version_out,
                              char sha_out[FL_STORE_SHA256_HEX_BYTES], char *why,
                              size_t why_len) {
    char meta[256], tag[FL__COORD_NAME_MAX + 32];
    fl_store_model_ref ref, oref;
    snprintf(meta, sizeof(meta),
             "{\"source\":\"round\",\"round_id\":%lld,\"participants\":%u,\"key_id\":\"%s\"}",
             (long long)r->id, count, co->key_id);
    fl_status rc = fl_store_begin(co->store);
    if (rc != FL_OK) {
        commit_why(co, rc, why, why_len);
        return rc;
    }
    rc = fl_store_model_put(co->store, &ref, p->id, r->base_version, model, model_len, meta);
    snprintf(tag, sizeof(tag), "population/%s", p->name);
    if (rc == FL_OK)
        rc = fl_store_tag_set(co->store, tag, ref.version);
    if (rc == FL_OK && opt) {
        opt_tag(tag, sizeof(tag), p);
        rc = fl_store_model_put(co->store, &oref, 0, ref.version, opt, opt_len,
                                "{\"kind\":\"optimizer_state\"}");
        if (rc == FL_OK)
            rc = fl_store_tag_set(co->store, tag, oref.version);
    }
    uint32_t done = 0;
    for (size_t i = 0; rc == FL_OK && i < r->n; i++) {
        const struct fl__coord_participant *pt = &r->parts[i];
        bool in = (pt->posted & (1u << FL__PH_MASKED)) &&
                  (pt->dropped_at < 0 || pt->dropped_at > FL__PH_MASKED);
        if (r->rp.buffered && !in)
            continue; /* still training: its participation moves to the next buffer */
        done += in;
        uint8_t ph[32];
        rc = fl_store_participant_set_v2(co->store, r->id, pt->client_id,
                                         in ? FL_STORE_PARTICIPANT_COMPLETED
                                            : FL_STORE_PARTICIPANT_DROPPED,
                                         fl__coord_pid_hash(ph, pt->pid));
    }
    int64_t sel = r->rp.buffered ? (int64_t)count : (int64_t)r->n;
    fl_store_round_counts counts = {sel, sel, (int64_t)count, sel - (int64_t)count};
    (void)done;
    if (rc == FL_OK)
        rc = fl_store_round_set_counts(co->store, r->id, &counts);
    if (rc == FL_OK)
        rc = fl_store_round_complete(co->store, r->id, ref.version);
    if (rc == FL_OK && r->rp.dp != FL__DP_NONE) {
        fl_dp_ledger_entry e;
        char params[512];
        round_entry(&e, &r->rp, count);
        rc = fl_dp_ledger_entry_format_params(params, sizeof(params), &e);
        fl_store_ledger_entry le = {0};
        le.population_id = p->id;
        le.round_id = r->id;
        le.mechanism = e.mechanism;
        le.sampling_rate = e.q;
        le.noise_multiplier = e.noise_multiplier;
        le.clip_norm = e.clip_norm;
        le.steps = (int64_t)e.steps;
        le.participants = (int64_t)e.participants;
        le.params_json = params;
        if (rc == FL_OK)
            rc = fl_store_ledger_append(co->store, NULL, &le);
    }
    /* The audit entry commits with the round: with the ledger entry just appended, the
     * accountant's total is the one after this round. */
    if (rc == FL_OK) {
        enum fl__coord_round_state was = r->state;
        r->state = FL__ROUND_COMPLETED;
        rc = fl__coord_audit_round(co, p, r, count);
        r->state = was;
        if (rc != FL_OK)
            fl__log(&co->logger, FL_LOG_ERROR, "round %lld: audit entry refused: %s",
                    (long long)r->id, fl_store_errmsg(co->store));
    }
    if (rc == FL_OK)
        rc = fl_store_commit(co->store);
    /* The reason, before the rollback (every store call clears the handle's message). */
    if (rc != FL_OK)
        commit_why(co, rc, why, why_len);
    if (rc != FL_OK && fl_store_in_transaction(co->store))
        fl_store_rollback(co->store);
    if (rc == FL_OK) {
        *version_out = ref.version;
        memcpy(sha_out, ref.sha256_hex, FL_STORE_SHA256_HEX_BYTES);
    }
    return rc;
}

void fl__coord_round_aggregate(fl_coord *co, struct fl__coord_pop *p, const uint64_t *sum,
                               uint32_t count) {
    struct fl__coord_round *r = p->round;
    const struct fl__coord_round_params *rp = &r->rp;
    char why[400] = "";
    uint8_t *model = NULL, *opt = NULL;
    size_t model_len = 0, opt_len = 0;
    float *m = NULL, *v = NULL;
    int64_t version = 0;
    char sha_hex[FL_STORE_SHA256_HEX_BYTES] = "";
    int64_t t0 = fl__coord_mono_us();
    if (count == 0) {
        fl__coord_round_abandon(co, p, "no update reached the sum");
        return;
    }
    struct fl__coord_blob *base = NULL;
    fl_status rc = fl__coord_model_blob(co, p, r->base_version, &base);
    if (rc != FL_OK)
        snprintf(why, sizeof(why), "reading the base model: %s", fl_status_str(rc));
    /* Decode, strategy and serialisation are O(model) and touch nothing shared that can
     * change meanwhile (the round is DONE and cannot be retired, the optimiser state and
     * config change only here): run them without the lock, so check-ins, polls and other
     * populations go on. FedBuff keeps the lock: its buffer takes folds at any time. */
    bool unlocked = rc == FL_OK && !rp->buffered;
    if (unlocked) {
        r->aggregating = true;
        fl__coord_unlock(co);
    }
    float *delta = rc == FL_OK ? fl__calloc(&co->alloc, rp->dim, sizeof(float)) : NULL;
    if (rc == FL_OK)
        rc = delta ? decode_sum(co, r, sum, count, delta, why, sizeof(why)) : FL_ERR_NOMEM;
    if (rc == FL_OK && co->debug_sum && sum)
        co->debug_sum(co->debug_user, r->id, sum, rp->vec_len, count, delta, rp->dim);
    if (rc == FL_OK)
        rc = build_model(co, p, r, base, delta, &model, &model_len, &opt, &opt_len, &m, &v,
                         why, sizeof(why));
    if (unlocked) {
        fl__coord_lock(co);
        r->aggregating = false;
    }
    fl__coord_blob_unref(base);
    if (rc == FL_OK) {
        rc = commit_round(co, p, r, model, model_len, opt, opt_len, count, &version,
                          sha_hex, why, sizeof(why));
    }
    if (delta) {
        fl_memzero(delta, rp->dim * sizeof(float));
        fl__free(&co->alloc, delta, rp->dim * sizeof(float));
    }
    if (rc == FL_OK) {
        /* The new version is what devices download next and the next round's base: keep
         * it in memory, signed once. */
        fl__coord_model_cache_set(co, p, model, model_len, version, sha_hex);
        model = NULL;
    }
    fl__free(fl__coord_alloc(co), model, model_len);
    fl__free(fl__coord_alloc(co), opt, opt_len);
    atomic_fetch_add(&co->metrics.agg_count, 1);
    atomic_fetch_add(&co->metrics.agg_sum_us, (uint64_t)(fl__coord_mono_us() - t0));
    if (rc != FL_OK) {
        fl__free(fl__coord_alloc(co), m, rp->dim * sizeof(float));
        fl__free(fl__coord_alloc(co), v, rp->dim * sizeof(float));
        if (!why[0])
            snprintf(why, sizeof(why), "aggregation failed: %s", fl_status_str(rc));
        fl__coord_round_abandon(co, p, why);
        return;
    }
    fl__free(fl__coord_alloc(co), p->opt_m, p->opt_dim * sizeof(float));
    fl__free(fl__coord_alloc(co), p->opt_v, p->opt_dim * sizeof(float));
    p->opt_m = m;
    p->opt_v = v;
    p->opt_dim = (m || v) ? rp->dim : 0;
    p->opt_version = version;
    p->model_version = version;
    p->rounds_completed++;
    r->state = FL__ROUND_COMPLETED;
    r->new_version = version;
    r->survivors = count;
    atomic_fetch_add(&co->metrics.rounds_completed, 1);
    p->rounds_done[0]++;
    fl__coord_metrics_round_done(&co->metrics, 0, fl__coord_now(co) - r->created_at);
    if (rp->dp != FL__DP_NONE)
        fl__coord_epsilon_refresh(co, p);
    fl__log(&co->logger, FL_LOG_INFO,
            "round %lld of %s completed: %u client(s) in the sum, model version %lld",
            (long long)r->id, p->name, count, (long long)version);
    fl__coord_audit_checkpoint(co);
    fl__coord_round_retire(co, p);
}
