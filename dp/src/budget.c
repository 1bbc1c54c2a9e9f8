/* Privacy ledger entries and the budget check.
 *
 * The ledger itself lives in storage; the coordinator reads a population's entries and hands
 * them here. A round is allowed only if the epsilon of everything already run plus the
 * proposed round, at the budget's delta, stays within the budget's epsilon. */

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- params_json: a flat object of numbers ---- */

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* Parses a JSON string at p (at its opening quote) into key (truncated to key_len - 1).
 * Returns the position after the closing quote, or NULL on a malformed string. */
static const char *parse_string(const char *p, char *key, size_t key_len) {
    size_t k = 0;
    if (*p != '"')
        return NULL;
    p++;
    while (*p && *p != '"') {
        char c = *p;
        if (c == '\\') {
            p++;
            if (!*p)
                return NULL;
            c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p; /* other escapes kept literally */
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i]))
                        return NULL;
                p += 4;
                c = '?';
            }
        } else if ((unsigned char)c < 0x20) {
            return NULL;
        }
        if (k + 1 < key_len)
            key[k++] = c;
        p++;
    }
    if (*p != '"')
        return NULL;
    if (key_len > 0)
        key[k] = '\0';
    return p + 1;
}

fl_status fl_dp_ledger_entry_parse_params(fl_dp_ledger_entry *e, const char *params_json,
                                          char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    const char *p;
    fl__err_clear(&err);
    if (!e) {
        fl__err_set(&err, FL_ERR_MISUSE, "entry is NULL");
        goto out;
    }
    if (!params_json || !*skip_ws(params_json))
        goto out;
    p = skip_ws(params_json);
    if (*p != '{') {
        fl__err_set(&err, FL_ERR_FORMAT, "params_json: expected '{' at offset %td",
                    p - params_json);
        goto out;
    }
    p = skip_ws(p + 1);
    if (*p == '}') {
        p++;
        goto tail;
    }
    for (;;) {
        char key[32];
        p = parse_string(p, key, sizeof(key));
        if (!p) {
            fl__err_set(&err, FL_ERR_FORMAT, "params_json: malformed key");
            goto out;
        }
        p = skip_ws(p);
        if (*p != ':') {
            fl__err_set(&err, FL_ERR_FORMAT, "params_json: expected ':' after \"%s\"", key);
            goto out;
        }
        p = skip_ws(p + 1);
        if (*p == '"') {
            char ignored[2];
            p = parse_string(p, ignored, sizeof(ignored));
            if (!p) {
                fl__err_set(&err, FL_ERR_FORMAT, "params_json: malformed string for \"%s\"", key);
                goto out;
            }
        } else if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) {
            p += 4;
        } else if (!strncmp(p, "false", 5)) {
            p += 5;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            char *end;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno == ERANGE || !isfinite(v)) {
                fl__err_set(&err, FL_ERR_FORMAT, "params_json: bad number for \"%s\"", key);
                goto out;
            }
            p = end;
            if (!strcmp(key, "sigma")) {
                e->sigma = v;
            } else if (!strcmp(key, "l2_sensitivity")) {
                e->l2_sensitivity = v;
            } else if (!strcmp(key, "l1_sensitivity")) {
                e->l1_sensitivity = v;
            } else if (!strcmp(key, "dim")) {
                if (v < 0.0 || v != floor(v) || v > 9.007199254740992e15) {
                    fl__err_set(&err, FL_ERR_FORMAT,
                                "params_json: \"dim\" must be a non-negative integer");
                    goto out;
                }
                e->dim = (uint64_t)v;
            }
        } else {
            fl__err_set(&err, FL_ERR_FORMAT,
                        "params_json: value of \"%s\" must be a number, string, true, false "
                        "or null (no nesting)",
                        key);
            goto out;
        }
        p = skip_ws(p);
        if (*p == ',') {
            p = skip_ws(p + 1);
            continue;
        }
        if (*p == '}') {
            p++;
            break;
        }
        fl__err_set(&err, FL_ERR_FORMAT, "params_json: expected ',' or '}' after \"%s\"", key);
        goto out;
    }
tail:
    if (*skip_ws(p)) {
        fl__err_set(&err, FL_ERR_FORMAT, "params_json: trailing characters after '}'");
        goto out;
    }
out:
    return err.code == FL_OK ? FL_OK : fl__dp_err_out(&err, errmsg, errmsg_len);
}

fl_status fl_dp_ledger_entry_format_params(char *buf, size_t buf_len, const fl_dp_ledger_entry *e) {
    int n;
    if (!buf || buf_len == 0 || !e)
        return FL_ERR_MISUSE;
    if (e->mechanism && !strcmp(e->mechanism, FL_DP_MECH_GAUSSIAN))
        n = snprintf(buf, buf_len, "{}");
    else
        n = snprintf(buf, buf_len,
                     "{\"sigma\": %.17g, \"l2_sensitivity\": %.17g, \"l1_sensitivity\": %.17g, "
                     "\"dim\": %llu}",
                     e->sigma, e->l2_sensitivity, e->l1_sensitivity, (unsigned long long)e->dim);
    if (n < 0 || (size_t)n >= buf_len) {
        buf[0] = '\0';
        return FL_ERR_TOO_LARGE;
    }
    return FL_OK;
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
