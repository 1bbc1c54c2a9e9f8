#ifndef FLOTILLA_DP_H
#define FLOTILLA_DP_H

/* Flotilla differential privacy: clipping, exact discrete noise, central and distributed
 * DP, the RDP accountant and budget checks. Pure library: no I/O, no clocks, no globals. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== mechanisms: clipping, samplers, central and distributed DP (dp-mechanisms) ==== */

/* ==== end mechanisms ==== */

/* ==== accounting: RDP accountant, conversion, budget (dp-accountant) ==== */

/* Renyi-DP accounting (Mironov 2017) for the Poisson-subsampled Gaussian mechanism (Mironov,
 * Talwar, Zhang 2019), the discrete Gaussian (Canonne, Kamath, Steinke 2020) and the
 * distributed discrete Gaussian (Kairouz, Liu, Steinke 2021), with RDP -> (epsilon, delta)
 * conversion, a composing accountant handle and a budget check for one population.
 *
 * Conventions: "orders" are Renyi orders alpha > 1; "rdp" is the RDP epsilon at each order
 * (nats); epsilon is in nats; delta in (0, 1). Functions without a handle take an optional
 * errmsg buffer (NULL or errmsg_len 0 = no message) that receives a NUL-terminated English
 * detail on failure. All functions are pure and thread-safe except those on one
 * fl_dp_accountant handle, which must be used by one thread at a time. */

/* Number of default RDP orders: 1.1..10.9 step 0.1 (99), 11..63 (53), 128, 256, 512, 1024 --
 * identical to dp_accounting's DEFAULT_RDP_ORDERS. */
#define FL_DP_DEFAULT_ORDERS_COUNT 156

/* Returns FL_DP_DEFAULT_ORDERS_COUNT (for bindings). Thread-safe. */
FL_API size_t fl_dp_default_orders_count(void);

/* Writes the default orders, ascending, into orders_out.
 * orders_out, orders_len: caller buffer of at least FL_DP_DEFAULT_ORDERS_COUNT doubles.
 * Returns FL_OK, or FL_ERR_MISUSE (NULL buffer, buffer too small). Thread-safe. */
FL_API fl_status fl_dp_default_orders(double *orders_out, size_t orders_len);

/* RDP -> (epsilon, delta) conversion. */
typedef enum fl_dp_conversion {
    /* Canonne-Kamath-Steinke 2020 Prop. 12 / Balle et al. 2020 (as dp_accounting):
     * eps = rdp + log1p(-1/a) - log(delta * a) / (a - 1), plus the KL shortcut. Default. */
    FL_DP_CONVERSION_IMPROVED = 0,
    /* Mironov 2017 Prop. 3: eps = rdp + log(1/delta) / (a - 1). Looser; matches older
     * tools (TF Privacy get_privacy_spent, Opacus). */
    FL_DP_CONVERSION_CLASSIC = 1
} fl_dp_conversion;

/* Kinds of composable privacy events. Values are stable. */
typedef enum fl_dp_event_kind {
    /* Poisson-subsampled Gaussian: each record is included with probability q, the clipped
     * sum gets N(0, (noise_multiplier * clip)^2) noise per coordinate. q = 1 is the plain
     * Gaussian mechanism, RDP alpha / (2 z^2). Exact at integer and fractional orders. */
    FL_DP_EVENT_GAUSSIAN = 1,
    /* Discrete Gaussian N_Z(0, sigma^2) per coordinate on integer vectors whose L2 sensitivity
     * is l2_sensitivity: RDP alpha * l2^2 / (2 sigma^2) (CKS 2020). With q < 1 the general
     * Poisson-subsampling bound of Zhu & Wang 2019 (Thm 5) is used at integer orders. */
    FL_DP_EVENT_DISCRETE_GAUSSIAN = 2,
    /* Distributed discrete Gaussian: the sum of n_clients independent N_Z(0, sigma^2) shares
     * (sigma >= 0.5, integer grid units) on dim-dimensional integer vectors, bounded by
     * Kairouz-Liu-Steinke 2021 Prop. 14 with tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2
     * k / (k + 1)). Subsampling as for FL_DP_EVENT_DISCRETE_GAUSSIAN. */
    FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN = 3
} fl_dp_event_kind;

/* One privacy event, repeated count times. Fill with one of the fl_dp_event_* helpers,
 * then adjust fields. Fields not used by kind are ignored. */
typedef struct fl_dp_event {
    size_t struct_size;       /* sizeof(fl_dp_event) */
    fl_dp_event_kind kind;    /* which mechanism */
    double q;                 /* Poisson sampling probability in [0, 1]; 1 = no sampling */
    double noise_multiplier;  /* GAUSSIAN: noise stddev / L2 sensitivity, >= 0 (0 = no noise) */
    double sigma;             /* DISCRETE*: stddev parameter of each discrete Gaussian, grid units */
    double l2_sensitivity;    /* DISCRETE*: L2 sensitivity on the integer grid, > 0 */
    double l1_sensitivity;    /* DISTRIBUTED: L1 sensitivity on the grid; 0 = min(sqrt(d) l2, l2^2) */
    uint64_t dim;             /* DISTRIBUTED: vector dimension d, >= 1 */
    uint64_t n_clients;       /* DISTRIBUTED: number of noise shares summed, >= 1 */
    uint64_t count;           /* how many times the event is composed, >= 0 */
} fl_dp_event;

/* Fill ev with a Poisson-subsampled Gaussian event (q, noise multiplier z, count). */
FL_API void fl_dp_event_gaussian(fl_dp_event *ev, double q, double noise_multiplier,
                                 uint64_t count);
/* Fill ev with a discrete Gaussian event (sigma, l2 sensitivity on the grid, q, count). */
FL_API void fl_dp_event_discrete_gaussian(fl_dp_event *ev, double sigma, double l2_sensitivity,
                                          double q, uint64_t count);
/* Fill ev with a distributed discrete Gaussian event: n_clients shares of N_Z(0, sigma^2),
 * dim coordinates, sensitivity l2 (l1 = 0: derived), sampling q, count. */
FL_API void fl_dp_event_distributed_discrete_gaussian(fl_dp_event *ev, double sigma,
                                                      uint64_t n_clients, uint64_t dim,
                                                      double l2_sensitivity,
                                                      double l1_sensitivity, double q,
                                                      uint64_t count);

/* RDP of the Poisson-subsampled Gaussian mechanism, one step, at each order.
 * rdp_out: n_orders results (nats; +inf when noise_multiplier is 0 and q > 0).
 * orders, n_orders: Renyi orders, each finite and > 1.
 * q in [0, 1]; noise_multiplier >= 0. Integer orders use the exact binomial sum; fractional
 * orders the two-series expansion of Mironov et al. 2019 Sec. 3.3 with exact signs, stopped
 * once the remaining alternating tail is below 1e-12 of the sum (and bounded from above
 * otherwise). Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_dp_rdp_sampled_gaussian(double *rdp_out, const double *orders,
                                            size_t n_orders, double q, double noise_multiplier,
                                            char *errmsg, size_t errmsg_len);

/* RDP of count compositions of ev at each order (rdp_out[i] = count * rdp_one[i]).
 * Returns FL_OK or FL_ERR_MISUSE naming the bad field. Thread-safe. */
FL_API fl_status fl_dp_rdp_event(double *rdp_out, const double *orders, size_t n_orders,
                                 const fl_dp_event *ev, char *errmsg, size_t errmsg_len);

/* Smallest epsilon over the orders for which (epsilon, delta)-DP follows from the RDP curve.
 * epsilon_out: >= 0, +inf if no order gives a finite bound. order_out (optional): the
 * minimising order (0 when epsilon is 0 or delta >= 1 makes the question trivial).
 * delta in (0, 1]. Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_dp_rdp_to_epsilon(double *epsilon_out, double *order_out,
                                      const double *orders, const double *rdp, size_t n_orders,
                                      double delta, fl_dp_conversion conversion,
                                      char *errmsg, size_t errmsg_len);

/* Smallest delta over the orders for which (epsilon, delta)-DP follows from the RDP curve.
 * delta_out in [0, 1]; order_out (optional) the minimising order. epsilon >= 0.
 * Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_dp_rdp_to_delta(double *delta_out, double *order_out, const double *orders,
                                    const double *rdp, size_t n_orders, double epsilon,
                                    fl_dp_conversion conversion, char *errmsg,
                                    size_t errmsg_len);

/* ---- accountant handle ---- */

/* Accountant configuration; fl_dp_accountant_config_init() fills the defaults. */
typedef struct fl_dp_accountant_config {
    size_t struct_size;          /* sizeof(fl_dp_accountant_config) */
    const double *orders;        /* Renyi orders (> 1, finite); NULL = the defaults; copied */
    size_t n_orders;             /* number of orders (ignored when orders is NULL) */
    fl_dp_conversion conversion; /* default FL_DP_CONVERSION_IMPROVED */
} fl_dp_accountant_config;

/* Fills cfg with defaults: default orders, improved conversion. */
FL_API void fl_dp_accountant_config_init(fl_dp_accountant_config *cfg);

/* Opaque composing accountant: holds the running RDP curve of everything composed. Memory is
 * O(orders); composing an event already seen (same parameters as the previous one) costs
 * O(orders), a new one its RDP evaluation once. One thread at a time per handle. */
typedef struct fl_dp_accountant fl_dp_accountant;

/* Creates an empty accountant. out: receives the handle (NULL on failure). cfg: NULL =
 * defaults; validated here. alloc: NULL = libc; copied. errmsg: optional detail.
 * Returns FL_OK, FL_ERR_MISUSE (bad field, named in errmsg) or FL_ERR_NOMEM. */
FL_API fl_status fl_dp_accountant_create(fl_dp_accountant **out,
                                         const fl_dp_accountant_config *cfg,
                                         const fl_allocator *alloc, char *errmsg,
                                         size_t errmsg_len);

/* Frees the accountant. NULL is a no-op. */
FL_API void fl_dp_accountant_destroy(fl_dp_accountant *acc);

/* Forgets everything composed (keeps orders and conversion). */
FL_API void fl_dp_accountant_reset(fl_dp_accountant *acc);

/* Composes ev (count times) into the running curve. On failure nothing changes.
 * Returns FL_OK, FL_ERR_MISUSE (bad event; see errmsg). */
FL_API fl_status fl_dp_accountant_compose(fl_dp_accountant *acc, const fl_dp_event *ev);

/* Epsilon at delta of everything composed so far; order_out (optional) the optimal order.
 * Returns FL_OK or FL_ERR_MISUSE (delta outside (0, 1]). */
FL_API fl_status fl_dp_accountant_epsilon(fl_dp_accountant *acc, double *epsilon_out,
                                          double *order_out, double delta);

/* Delta at epsilon of everything composed so far; order_out (optional) the optimal order.
 * Returns FL_OK or FL_ERR_MISUSE (epsilon negative or NaN). */
FL_API fl_status fl_dp_accountant_delta(fl_dp_accountant *acc, double *delta_out,
                                        double *order_out, double epsilon);

/* Epsilon at delta as if ev were composed now, without changing the accountant (what-if
 * for a proposed round). Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_dp_accountant_epsilon_if(fl_dp_accountant *acc, double *epsilon_out,
                                             double *order_out, const fl_dp_event *ev,
                                             double delta);

/* Borrowed view of the orders and the running RDP curve (n entries each), valid until the
 * next call that changes the accountant or its destruction. Any output may be NULL. */
FL_API void fl_dp_accountant_curve(const fl_dp_accountant *acc, const double **orders_out,
                                   const double **rdp_out, size_t *n_out);

/* Detail of the last failure on acc (static status string if none); owned by acc, valid
 * until the next call on it. */
FL_API const char *fl_dp_accountant_errmsg(const fl_dp_accountant *acc);

/* Smallest noise multiplier z for which steps compositions of the Poisson-subsampled
 * Gaussian (q, z) give epsilon <= target_epsilon at delta, found by bisection on z to a
 * relative tolerance rel_tol (0 = 1e-6) after bracketing in [1e-3, 1e4]; the returned z
 * always meets the target (upper end of the final bracket). cfg: NULL = defaults.
 * epsilon_out (optional): epsilon reached with z_out. Returns FL_OK, FL_ERR_MISUSE, or
 * FL_ERR_RANGE when even z = 1e4 cannot reach the target. Thread-safe. */
FL_API fl_status fl_dp_noise_multiplier_for_epsilon(double *z_out, double *epsilon_out,
                                                    double q, uint64_t steps,
                                                    double target_epsilon, double delta,
                                                    double rel_tol,
                                                    const fl_dp_accountant_config *cfg,
                                                    const fl_allocator *alloc, char *errmsg,
                                                    size_t errmsg_len);

/* ---- privacy budget ---- */

/* Mechanism names used in ledger entries (the ledger's mechanism text). */
#define FL_DP_MECH_GAUSSIAN "gaussian"
#define FL_DP_MECH_DISCRETE_GAUSSIAN "discrete_gaussian"
#define FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN "distributed_discrete_gaussian"

/* One round of a population's privacy ledger, as stored (storage keeps the same fields; the
 * dp library never reads storage itself). Mechanism parameters beyond the common columns are
 * kept in params_json, read and written by the helpers below. */
typedef struct fl_dp_ledger_entry {
    size_t struct_size;       /* sizeof(fl_dp_ledger_entry) */
    const char *mechanism;    /* one of FL_DP_MECH_*; borrowed */
    double q;                 /* sampling probability of a client in the round, [0, 1] */
    double noise_multiplier;  /* gaussian: noise stddev / clip_norm */
    double clip_norm;         /* L2 clip norm (model units; informational for accounting) */
    uint64_t steps;           /* noisy aggregations in the round (usually 1) */
    uint64_t participants;    /* clients whose updates were summed; the DDG's n_clients */
    double sigma;             /* discrete mechanisms: per-share sigma, grid units (params_json) */
    double l2_sensitivity;    /* discrete mechanisms: L2 sensitivity on the grid (params_json) */
    double l1_sensitivity;    /* DDG: L1 sensitivity on the grid, 0 = derived (params_json) */
    uint64_t dim;             /* DDG: vector dimension (params_json) */
} fl_dp_ledger_entry;

/* Zeroes e, sets struct_size and the mechanism (borrowed). */
FL_API void fl_dp_ledger_entry_init(fl_dp_ledger_entry *e, const char *mechanism);

/* Parses params_json, a flat JSON object such as
 * {"sigma": 12.5, "l2_sensitivity": 400, "l1_sensitivity": 0, "dim": 1024}, into e's
 * mechanism-parameter fields (keys absent keep their value; unknown keys are ignored;
 * NULL or "" is {}). Returns FL_OK or FL_ERR_FORMAT. */
FL_API fl_status fl_dp_ledger_entry_parse_params(fl_dp_ledger_entry *e, const char *params_json,
                                                 char *errmsg, size_t errmsg_len);

/* Writes e's mechanism parameters as params_json into buf (NUL-terminated; "{}" for the
 * gaussian). Returns FL_OK, or FL_ERR_TOO_LARGE when buf_len is too small. */
FL_API fl_status fl_dp_ledger_entry_format_params(char *buf, size_t buf_len,
                                                  const fl_dp_ledger_entry *e);

/* Converts a ledger entry to the event it accounts for (count = steps).
 * Returns FL_OK or FL_ERR_MISUSE (unknown mechanism, bad field). */
FL_API fl_status fl_dp_ledger_entry_to_event(fl_dp_event *ev, const fl_dp_ledger_entry *e,
                                             char *errmsg, size_t errmsg_len);

/* A population's privacy budget: total (epsilon, delta) over its lifetime. */
typedef struct fl_dp_budget {
    double epsilon;  /* > 0 */
    double delta;    /* in (0, 1) */
} fl_dp_budget;

/* Outcome of a budget check (filled whenever the check could be computed). */
typedef struct fl_dp_budget_report {
    double epsilon_before;  /* epsilon of the ledger so far at budget.delta */
    double order_before;    /* its optimal order */
    double epsilon_after;   /* epsilon if the proposed round runs */
    double order_after;     /* its optimal order */
    double epsilon_budget;  /* budget.epsilon */
    double delta;           /* budget.delta */
    double remaining;       /* budget.epsilon - epsilon_after (negative if refused) */
} fl_dp_budget_report;

/* Decides whether the proposed round fits the budget given the ledger so far. Pure: builds a
 * temporary accountant (cfg NULL = defaults; alloc NULL = libc).
 * report_out (optional): the figures. ledger, n_ledger: the rounds already run (any order).
 * Returns FL_OK (allowed), FL_ERR_BUDGET (it would exceed: errmsg gives the current epsilon,
 * the epsilon after the round and the budget), FL_ERR_MISUSE (bad budget or entry, named),
 * FL_ERR_NOMEM. Thread-safe. */
FL_API fl_status fl_dp_budget_check(fl_dp_budget_report *report_out, const fl_dp_budget *budget,
                                    const fl_dp_ledger_entry *ledger, size_t n_ledger,
                                    const fl_dp_ledger_entry *proposed,
                                    const fl_dp_accountant_config *cfg,
                                    const fl_allocator *alloc, char *errmsg,
                                    size_t errmsg_len);

/* Same decision in O(orders) against an accountant that already holds the ledger (the
 * coordinator composes each committed round into it). Does not compose proposed.
 * Returns as fl_dp_budget_check; the message is also kept as fl_dp_accountant_errmsg(acc). */
FL_API fl_status fl_dp_accountant_budget_check(fl_dp_accountant *acc,
                                               fl_dp_budget_report *report_out,
                                               const fl_dp_budget *budget,
                                               const fl_dp_ledger_entry *proposed);

/* ==== end accounting ==== */

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_DP_H */
