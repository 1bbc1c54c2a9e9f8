/* Accountant benchmark: epsilon over 10^4 rounds at 64 RDP orders.
 *
 *   same_event      every round composes the same sampled Gaussian (q, z) and then queries
 *                   epsilon(delta): the federated-learning case, O(orders) per round
 *   distinct_event  every round has a different noise multiplier, so its RDP curve is
 *                   evaluated from scratch (the worst case); run on fewer rounds
 *   trivial_loop    the floor: add a fixed 64-entry vector and take a minimum per round
 *
 * Goal: under 1 ms of compute per round added (compose + query). Usage:
 *   bench_accountant [--rounds N] [--json] */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flotilla/dp.h"

#include "bench_util.h"

#define N_ORDERS 64

/* 64 orders: 1.25..8 by 0.25 (28), 9..40 (32), 48, 64, 128, 256. */
static void bench_orders(double *o) {
    size_t k = 0;
    for (int t = 5; t <= 32; t++)
        o[k++] = t / 4.0;
    for (int a = 9; a <= 40; a++)
        o[k++] = a;
    o[k++] = 48;
    o[k++] = 64;
    o[k++] = 128;
    o[k++] = 256;
}

static void check(fl_status rc, const char *what, const fl_dp_accountant *acc) {
    if (rc != FL_OK) {
        fprintf(stderr, "bench_accountant: %s: %s\n", what, fl_dp_accountant_errmsg(acc));
        exit(1);
    }
}

/* Runs `rounds` rounds; returns seconds; *eps_out is the final epsilon. */
static double run_rounds(long rounds, int distinct, double *eps_out, double *order_out) {
    double orders[N_ORDERS];
    bench_orders(orders);
    fl_dp_accountant_config cfg;
    fl_dp_accountant_config_init(&cfg);
    cfg.orders = orders;
    cfg.n_orders = N_ORDERS;
    fl_dp_accountant *acc;
    char err[256];
    if (fl_dp_accountant_create(&acc, &cfg, NULL, err, sizeof err) != FL_OK) {
        fprintf(stderr, "bench_accountant: %s\n", err);
        exit(1);
    }
    fl_dp_event ev;
    double eps = 0, order = 0, t0 = bench_wall_s();
    for (long r = 0; r < rounds; r++) {
        double z = distinct ? 1.1 + 1e-6 * (double)r : 1.1;
        fl_dp_event_gaussian(&ev, 0.01, z, 1);
        check(fl_dp_accountant_compose(acc, &ev), "compose", acc);
        check(fl_dp_accountant_epsilon(acc, &eps, &order, 1e-5), "epsilon", acc);
    }
    double dt = bench_wall_s() - t0;
    fl_dp_accountant_destroy(acc);
    *eps_out = eps;
    *order_out = order;
    return dt;
}

/* The floor for "compose + query": vector add and a minimum, no special functions. */
static double trivial_loop(long rounds, double *sink) {
    double curve[N_ORDERS] = {0}, step[N_ORDERS], orders[N_ORDERS];
    bench_orders(orders);
    for (size_t i = 0; i < N_ORDERS; i++)
        step[i] = 1e-4 * orders[i];
    double best = 0, t0 = bench_wall_s();
    for (long r = 0; r < rounds; r++) {
        best = 1e300;
        for (size_t i = 0; i < N_ORDERS; i++) {
            curve[i] += step[i];
            double e = curve[i] + 11.5 / (orders[i] - 1.0);
            if (e < best)
                best = e;
        }
        __asm__ volatile("" : : "g"(curve) : "memory"); /* keep the loop */
    }
    *sink = best;
    return bench_wall_s() - t0;
}

int main(int argc, char **argv) {
    long rounds = 10000;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            char *end;
            errno = 0;
            rounds = strtol(argv[++i], &end, 10);
            if (*end || errno || rounds < 1) {
                fprintf(stderr, "bench_accountant: --rounds needs an integer >= 1\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_accountant [--rounds N] [--json]\n");
            return 2;
        }
    }
    long distinct_rounds = rounds < 500 ? rounds : 500;
    double eps_same, ord_same, eps_dist, ord_dist, sink;
    double t_same = run_rounds(rounds, 0, &eps_same, &ord_same);
    double t_dist = run_rounds(distinct_rounds, 1, &eps_dist, &ord_dist);
    double t_triv = trivial_loop(rounds, &sink);
    double us_same = 1e6 * t_same / (double)rounds;
    double us_dist = 1e6 * t_dist / (double)distinct_rounds;
    double us_triv = 1e6 * t_triv / (double)rounds;
    if (json) {
        printf("{\"bench\": \"accountant\", \"orders\": %d, \"rounds\": %ld, "
               "\"same_event\": {\"total_ms\": %.3f, \"us_per_round\": %.4f, \"epsilon\": %.6f, "
               "\"order\": %g}, "
               "\"distinct_event\": {\"rounds\": %ld, \"us_per_round\": %.2f}, "
               "\"trivial_loop\": {\"us_per_round\": %.4f}, "
               "\"ratio_same_vs_trivial\": %.1f, \"goal_us_per_round\": 1000, "
               "\"meets_goal\": %s}\n",
               N_ORDERS, rounds, 1e3 * t_same, us_same, eps_same, ord_same, distinct_rounds,
               us_dist, us_triv, us_same / us_triv,
               (us_same < 1000 && us_dist < 1000) ? "true" : "false");
    } else {
        printf("accountant, %d orders, %ld rounds of q=0.01 z=1.1, delta=1e-5\n", N_ORDERS, rounds);
        printf("  same event:     %.3f ms total, %.3f us per round (compose + epsilon), "
               "epsilon %.4f at order %g\n",
               1e3 * t_same, us_same, eps_same, ord_same);
        printf("  distinct event: %.1f us per round (RDP evaluated each round, %ld rounds)\n",
               us_dist, distinct_rounds);
        printf("  trivial loop:   %.4f us per round; same-event / trivial = %.1fx\n", us_triv,
               us_same / us_triv);
        printf("  goal < 1000 us per round: %s\n",
               (us_same < 1000 && us_dist < 1000) ? "met" : "NOT met");
    }
    return 0;
}
