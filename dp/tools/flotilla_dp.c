/* flotilla-dp: operator command for the RDP accountant.
 *
 *   flotilla-dp epsilon --q Q --sigma S --steps T --delta D   epsilon and the optimal order
 *   flotilla-dp delta   --q Q --sigma S --steps T --epsilon E delta and the optimal order
 *   flotilla-dp sigma   --q Q --steps T --epsilon E --delta D smallest noise multiplier
 *
 * Exit status: 0 success, 1 the computation failed (e.g. target out of reach), 2 bad usage.
 * Every number is parsed with strtod/strtoull and fully validated. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/dp.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define MAX_ORDERS 4096

static const char usage_text[] =
    "usage: flotilla-dp <command> [options]\n"
    "\n"
    "Commands:\n"
    "  epsilon  --q Q --sigma S --steps T --delta D    epsilon spent and the optimal RDP order\n"
    "  delta    --q Q --sigma S --steps T --epsilon E  delta at a given epsilon\n"
    "  sigma    --q Q --steps T --epsilon E --delta D  smallest noise multiplier meeting the\n"
    "                                                  target (bisection to --tol)\n"
    "\n"
    "Mechanism: T compositions of the Poisson-subsampled Gaussian mechanism with sampling\n"
    "probability Q in (0, 1] and noise multiplier S > 0 (noise stddev / L2 clip norm).\n"
    "\n"
    "Options:\n"
    "  --q Q          sampling probability, 0 < Q <= 1\n"
    "  --sigma S      noise multiplier, S > 0\n"
    "  --steps T      number of compositions, integer >= 1\n"
    "  --delta D      target delta, 0 < D < 1\n"
    "  --epsilon E    target epsilon, E > 0\n"
    "  --tol R        sigma: relative bisection tolerance (default 1e-6), 0 < R < 0.5\n"
    "  --orders LIST  comma-separated RDP orders > 1 (default: dp_accounting's 156 orders)\n"
    "  --classic      classic RDP conversion eps = rdp + log(1/delta)/(a-1) instead of the\n"
    "                 improved one (Canonne-Kamath-Steinke 2020 Prop. 12)\n"
    "  --json         one JSON object on stdout\n"
    "  -h, --help     this text\n"
    "\n"
    "Exit status: 0 success, 1 computation failed, 2 bad arguments.\n";

struct opts {
    const char *cmd;
    double q, sigma, delta, epsilon, tol;
    uint64_t steps;
    int have_q, have_sigma, have_delta, have_epsilon, have_tol, have_steps, have_orders;
    int classic, json;
    double orders[MAX_ORDERS];
    size_t n_orders;
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "flotilla-dp: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'flotilla-dp --help'.\n");
    return EXIT_USAGE;
}

/* Parses a whole string as a finite double. */
static int parse_double(const char *s, double *out) {
    char *end;
    if (!s || !*s)
        return 0;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

/* Parses a whole string as a decimal integer >= 1 that fits uint64_t. */
static int parse_steps(const char *s, uint64_t *out) {
    char *end;
    if (!s || *s < '0' || *s > '9') /* strtoull would accept "-1" and leading spaces */
        return 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < 1)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static int parse_orders(const char *s, struct opts *o) {
    char buf[65536];
    if (strlen(s) >= sizeof(buf))
        return 0;
    memcpy(buf, s, strlen(s) + 1);
    o->n_orders = 0;
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        double v;
        if (o->n_orders >= MAX_ORDERS || !parse_double(p, &v) || !(v > 1.0))
            return 0;
        o->orders[o->n_orders++] = v;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 1;
}

static int parse_args(int argc, char **argv, struct opts *o) {
    memset(o, 0, sizeof(*o));
    if (argc < 2)
        return usage_error("missing command (epsilon, delta or sigma)");
    o->cmd = argv[1];
    if (strcmp(o->cmd, "epsilon") && strcmp(o->cmd, "delta") && strcmp(o->cmd, "sigma"))
        return usage_error("unknown command '%s'", o->cmd);
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        char name[32];
        if (strncmp(arg, "--", 2) != 0)
            return usage_error("unexpected argument '%s'", arg);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof(name))
            return usage_error("unknown option '%s'", arg);
        memcpy(name, arg, len);
        name[len] = '\0';
        if (!strcmp(name, "--json") || !strcmp(name, "--classic")) {
            if (eq)
                return usage_error("option %s takes no value", name);
            int *flag = !strcmp(name, "--json") ? &o->json : &o->classic;
            *flag = 1;
            continue;
        }
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc)
                return usage_error("option %s needs a value", name);
            val = argv[++i];
        }
        double *dst = NULL;
        int *have = NULL;
        if (!strcmp(name, "--q")) {
            dst = &o->q, have = &o->have_q;
        } else if (!strcmp(name, "--sigma")) {
            dst = &o->sigma, have = &o->have_sigma;
        } else if (!strcmp(name, "--delta")) {
            dst = &o->delta, have = &o->have_delta;
        } else if (!strcmp(name, "--epsilon")) {
            dst = &o->epsilon, have = &o->have_epsilon;
        } else if (!strcmp(name, "--tol")) {
            dst = &o->tol, have = &o->have_tol;
        } else if (!strcmp(name, "--steps")) {
            if (o->have_steps)
                return usage_error("option %s given twice", name);
            if (!parse_steps(val, &o->steps))
                return usage_error("--steps '%s': expected an integer >= 1", val);
            o->have_steps = 1;
            continue;
        } else if (!strcmp(name, "--orders")) {
            if (o->have_orders)
                return usage_error("option %s given twice", name);
            if (!parse_orders(val, o))
                return usage_error("--orders '%s': expected comma-separated numbers > 1", val);
            o->have_orders = 1;
            continue;
        } else {
            return usage_error("unknown option '%s'", name);
        }
        if (*have)
            return usage_error("option %s given twice", name);
        if (!parse_double(val, dst))
            return usage_error("%s '%s': not a finite number", name, val);
        *have = 1;
    }
    /* Which options each command needs. */
    int is_eps = !strcmp(o->cmd, "epsilon"), is_delta = !strcmp(o->cmd, "delta");
    int is_sigma = !strcmp(o->cmd, "sigma");
    if (!o->have_q)
        return usage_error("%s: missing --q", o->cmd);
    if (!o->have_steps)
        return usage_error("%s: missing --steps", o->cmd);
    if ((is_eps || is_delta) && !o->have_sigma)
        return usage_error("%s: missing --sigma", o->cmd);
    if (is_sigma && o->have_sigma)
        return usage_error("%s: --sigma is what this command computes", o->cmd);
    if ((is_eps || is_sigma) && !o->have_delta)
        return usage_error("%s: missing --delta", o->cmd);
    if ((is_delta || is_sigma) && !o->have_epsilon)
        return usage_error("%s: missing --epsilon", o->cmd);
    if (is_eps && o->have_epsilon)
        return usage_error("%s: --epsilon is what this command computes", o->cmd);
    if (is_delta && o->have_delta)
        return usage_error("%s: --delta is what this command computes", o->cmd);
    if (!is_sigma && o->have_tol)
        return usage_error("%s: --tol only applies to the sigma command", o->cmd);
    /* Ranges. */
    if (!(o->q > 0.0 && o->q <= 1.0))
        return usage_error("--q must be in (0, 1]");
    if (o->have_sigma && !(o->sigma > 0.0))
        return usage_error("--sigma must be > 0");
    if (o->have_delta && !(o->delta > 0.0 && o->delta < 1.0))
        return usage_error("--delta must be in (0, 1)");
    if (o->have_epsilon && !(o->epsilon > 0.0))
        return usage_error("--epsilon must be > 0");
    if (o->have_tol && !(o->tol > 0.0 && o->tol < 0.5))
        return usage_error("--tol must be in (0, 0.5)");
    return 0;
}

static void config_from(fl_dp_accountant_config *cfg, const struct opts *o) {
    fl_dp_accountant_config_init(cfg);
    if (o->have_orders) {
        cfg->orders = o->orders;
        cfg->n_orders = o->n_orders;
    }
    cfg->conversion = o->classic ? FL_DP_CONVERSION_CLASSIC : FL_DP_CONVERSION_IMPROVED;
}

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "flotilla-dp: %s: %s\n", what, msg);
    return EXIT_FAIL;
}

static int run_epsilon_or_delta(const struct opts *o) {
    fl_dp_accountant_config cfg;
    fl_dp_accountant *acc = NULL;
    fl_dp_event ev;
    char err[256];
    double value = 0.0, order = 0.0;
    int is_eps = !strcmp(o->cmd, "epsilon");
    int rc = 0;

    config_from(&cfg, o);
    if (fl_dp_accountant_create(&acc, &cfg, NULL, err, sizeof(err)) != FL_OK)
        return fail("accountant", err);
    fl_dp_event_gaussian(&ev, o->q, o->sigma, o->steps);
    fl_status st = fl_dp_accountant_compose(acc, &ev);
    if (st == FL_OK)
        st = is_eps ? fl_dp_accountant_epsilon(acc, &value, &order, o->delta)
                    : fl_dp_accountant_delta(acc, &value, &order, o->epsilon);
    if (st != FL_OK) {
        rc = fail(o->cmd, fl_dp_accountant_errmsg(acc));
        goto out;
    }
    const char *conv = o->classic ? "classic" : "improved";
    if (o->json) {
        /* JSON has no infinity: an unbounded epsilon is written as null. */
        char num[64];
        if (isfinite(value))
            snprintf(num, sizeof(num), "%.17g", value);
        else
            snprintf(num, sizeof(num), "null");
        printf("{\"command\": \"%s\", \"q\": %.17g, \"sigma\": %.17g, \"steps\": %" PRIu64
               ", \"%s\": %.17g, \"%s\": %s, \"order\": %.17g, \"conversion\": \"%s\"}\n",
               o->cmd, o->q, o->sigma, o->steps, is_eps ? "delta" : "epsilon",
               is_eps ? o->delta : o->epsilon, is_eps ? "epsilon" : "delta", num, order, conv);
    } else if (is_eps) {
        printf("epsilon = %.6g (optimal RDP order %g) for q = %g, sigma = %g, steps = %" PRIu64
               ", delta = %g [%s conversion]\n",
               value, order, o->q, o->sigma, o->steps, o->delta, conv);
    } else {
        printf("delta = %.6g (optimal RDP order %g) for q = %g, sigma = %g, steps = %" PRIu64
               ", epsilon = %g [%s conversion]\n",
               value, order, o->q, o->sigma, o->steps, o->epsilon, conv);
    }
out:
    fl_dp_accountant_destroy(acc);
    return rc;
}

static int run_sigma(const struct opts *o) {
    fl_dp_accountant_config cfg;
    char err[256];
    double z = 0.0, eps = 0.0, tol = o->have_tol ? o->tol : 1e-6;
    config_from(&cfg, o);
    if (fl_dp_noise_multiplier_for_epsilon(&z, &eps, o->q, o->steps, o->epsilon, o->delta, tol,
                                           &cfg, NULL, err, sizeof(err)) != FL_OK)
        return fail("sigma", err);
    if (o->json)
        printf("{\"command\": \"sigma\", \"q\": %.17g, \"steps\": %" PRIu64
               ", \"epsilon_target\": %.17g, \"delta\": %.17g, \"sigma\": %.17g, "
               "\"epsilon\": %.17g, \"tolerance\": %.17g, \"conversion\": \"%s\"}\n",
               o->q, o->steps, o->epsilon, o->delta, z, eps, tol,
               o->classic ? "classic" : "improved");
    else
        printf("sigma = %.8g (epsilon %.6g <= target %g at delta %g; q = %g, steps = %" PRIu64
               "; relative tolerance %g)\n",
               z, eps, o->epsilon, o->delta, o->q, o->steps, tol);
    return 0;
}

int main(int argc, char **argv) {
    struct opts *o;
    int rc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
            (i == 1 && !strcmp(argv[i], "help"))) {
            fputs(usage_text, stdout);
            return 0;
        }
    }
    o = malloc(sizeof(*o));
    if (!o) {
        fprintf(stderr, "flotilla-dp: out of memory\n");
        return EXIT_FAIL;
    }
    rc = parse_args(argc, argv, o);
    if (rc == 0)
        rc = !strcmp(o->cmd, "sigma") ? run_sigma(o) : run_epsilon_or_delta(o);
    free(o);
    return rc;
}
