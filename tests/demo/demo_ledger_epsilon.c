/* demo_ledger_epsilon: recomputes a run's epsilon from its privacy ledger, independently of
 * the coordinator, for the end-to-end demo test (tests/demo/test_demo_e2e.sh).
 *
 *   demo_ledger_epsilon DB POPULATION ROUNDS DELTA
 *
 * Opens the coordinator database flotilla-sim kept (--db), reads the population's ledger,
 * composes its first ROUNDS entries in a fresh RDP accountant (flotilla-dp's library) and
 * prints one line "epsilon E entries N q Q noise Z gaussian_epsilon G": E the recomputed
 * epsilon at DELTA, N the ledger's length, Q and Z the first entry's sampling rate and noise
 * multiplier, G the continuous Gaussian bound for the same (q, z, ROUNDS), which is what
 * `flotilla-dp epsilon` prints. Exit 0, 1 on failure, 2 bad usage. Executable: printing is
 * allowed (house style 8). */
#include <stdio.h>
#include <stdlib.h>

#include "flotilla/dp.h"
#include "flotilla/storage.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: demo_ledger_epsilon DB POPULATION ROUNDS DELTA\n");
        return 2;
    }
    long rounds = strtol(argv[3], NULL, 10);
    double delta = strtod(argv[4], NULL);
    fl_store *st = NULL;
    fl_store_population *pop = NULL;
    fl_store_ledger_entry *le = NULL;
    fl_dp_accountant *acc = NULL, *gauss = NULL;
    size_t n = 0;
    int rc = 1;
    char msg[256] = "";
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.create_if_missing = 0;
    if (fl_store_open(&st, argv[1], &cfg) != FL_OK ||
        fl_store_population_find(st, &pop, argv[2]) != FL_OK ||
        fl_store_ledger_list(st, &le, &n, pop->id) != FL_OK) {
        fprintf(stderr, "demo_ledger_epsilon: %s\n", fl_store_errmsg(st));
        goto out;
    }
    if (rounds < 1 || (size_t)rounds > n) {
        fprintf(stderr, "demo_ledger_epsilon: ledger has %zu entries, %ld asked\n", n, rounds);
        goto out;
    }
    if (fl_dp_accountant_create(&acc, NULL, NULL, msg, sizeof(msg)) != FL_OK ||
        fl_dp_accountant_create(&gauss, NULL, NULL, msg, sizeof(msg)) != FL_OK)
        goto out_msg;
    for (long i = 0; i < rounds; i++) {
        fl_dp_ledger_entry e;
        fl_dp_event ev;
        fl_dp_ledger_entry_init(&e, le[i].mechanism);
        e.q = le[i].sampling_rate;
        e.noise_multiplier = le[i].noise_multiplier;
        e.clip_norm = le[i].clip_norm;
        e.steps = (uint64_t)le[i].steps;
        e.participants = (uint64_t)le[i].participants;
        if (fl_dp_ledger_entry_parse_params(&e, le[i].params_json, msg, sizeof(msg)) != FL_OK ||
            fl_dp_ledger_entry_to_event(&ev, &e, msg, sizeof(msg)) != FL_OK ||
            fl_dp_accountant_compose(acc, &ev) != FL_OK)
            goto out_msg;
        fl_dp_event_gaussian(&ev, e.q, e.noise_multiplier, e.steps);
        if (fl_dp_accountant_compose(gauss, &ev) != FL_OK)
            goto out_msg;
    }
    double eps = 0, geps = 0;
    if (fl_dp_accountant_epsilon(acc, &eps, NULL, delta) != FL_OK ||
        fl_dp_accountant_epsilon(gauss, &geps, NULL, delta) != FL_OK)
        goto out_msg;
    printf("epsilon %.9g entries %zu q %.9g noise %.9g mechanism %s gaussian_epsilon %.9g\n", eps,
           n, le[0].sampling_rate, le[0].noise_multiplier, le[0].mechanism, geps);
    rc = 0;
    goto out;
out_msg:
    fprintf(stderr, "demo_ledger_epsilon: %s\n", msg[0] ? msg : "accountant failed");
out:
    fl_dp_accountant_destroy(acc);
    fl_dp_accountant_destroy(gauss);
    if (le)
        fl_store_free(st, le);
    if (pop)
        fl_store_free(st, pop);
    fl_store_close(st);
    return rc;
}
