/* Privacy ledger entries and the budget check.
 *
 * The ledger itself lives in storage; the coordinator reads a population's entries and hands
 * them here. A round is allowed only if the epsilon of everything already run plus the
 * proposed round, at the budget's delta, stays within the budget's epsilon. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "rdp_internal.h"

void fl_dp_ledger_entry_init(fl_dp_ledger_entry *e, const char *mechanism) {
    if (!e)
        return;
    memset(e, 0, sizeof(*e));
    e->struct_size = sizeof(*e);
    e->mechanism = mechanism;
    e->q = 1.0;
    e->steps = 1;
}

/* ---- params_json: a flat JSON object of numbers, read and written with Jansson ---- */

/* Reads an optional finite number member; absent or null leaves *out unchanged. */
static int get_number(json_t *obj, const char *key, double *out, struct fl__err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        fl__err_set(err, FL_ERR_FORMAT, "params_json: \"%s\" must be a finite number", key);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

fl_status fl_dp_ledger_entry_parse_params(fl_dp_ledger_entry *e, const char *params_json,
                                          char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    json_t *root = NULL;
    json_error_t jerr;
    double dim = -1.0;
    fl__err_clear(&err);
    if (!e) {
        fl__err_set(&err, FL_ERR_MISUSE, "entry is NULL");
        goto out;
    }
    if (!params_json || params_json[strspn(params_json, " \t\r\n")] == '\0')
        goto out;
    root = json_loads(params_json, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        fl__err_set(&err, FL_ERR_FORMAT, "params_json: %s at offset %d", jerr.text,
                    jerr.position);
        goto out;
    }
    if (!json_is_object(root)) {
        fl__err_set(&err, FL_ERR_FORMAT, "params_json: expected a JSON object");
        goto out;
    }
    if (get_number(root, "sigma", &e->sigma, &err) ||
        get_number(root, "l2_sensitivity", &e->l2_sensitivity, &err) ||
        get_number(root, "l1_sensitivity", &e->l1_sensitivity, &err) ||
        get_number(root, "dim", &dim, &err))
        goto out;
    if (json_object_get(root, "dim") && !json_is_null(json_object_get(root, "dim"))) {
        if (dim < 0.0 || dim != floor(dim) || dim > 9.007199254740992e15) {
            fl__err_set(&err, FL_ERR_FORMAT, "params_json: \"dim\" must be a non-negative integer");
            goto out;
        }
        e->dim = (uint64_t)dim;
    }
out:
    json_decref(root);
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}

fl_status fl_dp_ledger_entry_format_params(char *buf, size_t buf_len, const fl_dp_ledger_entry *e) {
    fl_status rc = FL_OK;
    json_t *obj;
    if (!buf || buf_len == 0 || !e)
        return FL_ERR_MISUSE;
    buf[0] = '\0';
    if (e->mechanism && !strcmp(e->mechanism, FL_DP_MECH_GAUSSIAN))
        obj = json_object();
    else
        obj = json_pack("{s:f, s:f, s:f, s:I}", "sigma", e->sigma, "l2_sensitivity",
                        e->l2_sensitivity, "l1_sensitivity", e->l1_sensitivity, "dim",
                        (json_int_t)e->dim);
    if (!obj)
        return FL_ERR_NOMEM;
    size_t need = json_dumpb(obj, NULL, 0, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (need == 0) {
        rc = FL_ERR_NOMEM;
    } else if (need >= buf_len) {
        rc = FL_ERR_TOO_LARGE;
    } else if (json_dumpb(obj, buf, buf_len, JSON_COMPACT | JSON_REAL_PRECISION(17)) != need) {
        /* The second pass allocates too (Jansson's cycle check) and can fail on its own. */
        buf[0] = '\0';
        rc = FL_ERR_NOMEM;
    } else {
        buf[need] = '\0';
    }
    json_decref(obj);
    return rc;
}

static fl_status entry_to_event(fl_dp_event *ev, const fl_dp_ledger_entry *e, struct fl__err *err) {
    if (!e || e->struct_size < sizeof(fl_dp_ledger_entry))
        return fl__err_set(err, FL_ERR_MISUSE, "ledger entry: NULL or struct_size too small");
    if (!e->mechanism)
        return fl__err_set(err, FL_ERR_MISUSE, "ledger entry: mechanism is NULL");
    if (!strcmp(e->mechanism, FL_DP_MECH_GAUSSIAN)) {
        fl_dp_event_gaussian(ev, e->q, e->noise_multiplier, e->steps);
    } else if (!strcmp(e->mechanism, FL_DP_MECH_DISCRETE_GAUSSIAN) ||
               !strcmp(e->mechanism, "dgauss")) {
        fl_dp_event_discrete_gaussian(ev, e->sigma, e->l2_sensitivity, e->q, e->steps);
    } else if (!strcmp(e->mechanism, FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN) ||
               !strcmp(e->mechanism, "ddgauss")) {
        fl_dp_event_distributed_discrete_gaussian(ev, e->sigma, e->participants, e->dim,
                                                  e->l2_sensitivity, e->l1_sensitivity, e->q,
                                                  e->steps);
    } else {
        return fl__err_set(err, FL_ERR_MISUSE, "ledger entry: unknown mechanism \"%.64s\"",
                           e->mechanism);
    }
    return fl__dp_event_validate(ev, err);
}

fl_status fl_dp_ledger_entry_to_event(fl_dp_event *ev, const fl_dp_ledger_entry *e, char *errmsg,
                                      size_t errmsg_len) {
    struct fl__err err;
    fl__err_clear(&err);
    if (!ev)
        fl__err_set(&err, FL_ERR_MISUSE, "ev is NULL");
    else
        entry_to_event(ev, e, &err);
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}

static fl_status budget_valid(const fl_dp_budget *b, struct fl__err *err) {
    if (!b)
        return fl__err_set(err, FL_ERR_MISUSE, "budget is NULL");
    if (!(b->epsilon > 0.0) || !isfinite(b->epsilon))
        return fl__err_set(err, FL_ERR_MISUSE, "budget.epsilon = %g: must be finite and > 0",
                           b->epsilon);
    if (!(b->delta > 0.0 && b->delta < 1.0))
        return fl__err_set(err, FL_ERR_MISUSE, "budget.delta = %g: must be in (0, 1)", b->delta);
    return FL_OK;
}

/* Prepends "what: " to err's message; returns its code. */
static fl_status prefix_err(struct fl__err *err, const char *what) {
    char msg[FL__ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "%s", fl__err_msg(err));
    return fl__err_set(err, err->code, "%s: %s", what, msg);
}

/* The decision shared by both entry points; acc already holds the ledger. */
static fl_status decide(fl_dp_accountant *acc, fl_dp_budget_report *rep, const fl_dp_budget *b,
                        const fl_dp_ledger_entry *proposed, struct fl__err *err) {
    fl_dp_event ev;
    fl_dp_budget_report r;
    fl_status rc = budget_valid(b, err);
    if (rc != FL_OK)
        return rc;
    if ((rc = entry_to_event(&ev, proposed, err)) != FL_OK)
        return prefix_err(err, "proposed round");
    memset(&r, 0, sizeof(r));
    r.epsilon_budget = b->epsilon;
    r.delta = b->delta;
    if ((rc = fl_dp_accountant_epsilon(acc, &r.epsilon_before, &r.order_before, b->delta)) ||
        (rc = fl_dp_accountant_epsilon_if(acc, &r.epsilon_after, &r.order_after, &ev, b->delta)))
        return fl__err_set(err, rc, "%s", fl_dp_accountant_errmsg(acc));
    r.remaining = b->epsilon - r.epsilon_after;
    if (rep)
        *rep = r;
    if (!(r.epsilon_after <= b->epsilon))
        return fl__err_set(err, FL_ERR_BUDGET,
                           "privacy budget exceeded: epsilon so far %.6g (order %g), after the "
                           "proposed round %.6g (order %g), budget epsilon %.6g at delta %.3g",
                           r.epsilon_before, r.order_before, r.epsilon_after, r.order_after,
                           b->epsilon, b->delta);
    return FL_OK;
}

fl_status fl_dp_budget_check(fl_dp_budget_report *report_out, const fl_dp_budget *budget,
                             const fl_dp_ledger_entry *ledger, size_t n_ledger,
                             const fl_dp_ledger_entry *proposed, const fl_dp_accountant_config *cfg,
                             const fl_allocator *alloc, char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    fl_dp_accountant *acc = NULL;
    fl_status rc;
    fl__err_clear(&err);
    if (budget_valid(budget, &err) != FL_OK)
        goto out;
    if (n_ledger > 0 && !ledger) {
        fl__err_set(&err, FL_ERR_MISUSE, "ledger is NULL with n_ledger = %zu", n_ledger);
        goto out;
    }
    rc = fl_dp_accountant_create(&acc, cfg, alloc, err.msg, sizeof(err.msg));
    if (rc != FL_OK) {
        err.code = rc;
        goto out;
    }
    for (size_t i = 0; i < n_ledger; i++) {
        fl_dp_event ev;
        if ((rc = entry_to_event(&ev, &ledger[i], &err)) != FL_OK) {
            char where[32];
            snprintf(where, sizeof(where), "ledger[%zu]", i);
            prefix_err(&err, where);
            goto out_acc;
        }
        if ((rc = fl_dp_accountant_compose(acc, &ev)) != FL_OK) {
            fl__err_set(&err, rc, "ledger[%zu]: %s", i, fl_dp_accountant_errmsg(acc));
            goto out_acc;
        }
    }
    decide(acc, report_out, budget, proposed, &err);
out_acc:
    fl_dp_accountant_destroy(acc);
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}

fl_status fl_dp_accountant_budget_check(fl_dp_accountant *acc, fl_dp_budget_report *report_out,
                                        const fl_dp_budget *budget,
                                        const fl_dp_ledger_entry *proposed) {
    struct fl__err err;
    if (!acc)
        return FL_ERR_MISUSE;
    fl__err_clear(&err);
    fl_status rc = decide(acc, report_out, budget, proposed, &err);
    *fl__dp_accountant_err(acc) = err;
    return rc;
}
