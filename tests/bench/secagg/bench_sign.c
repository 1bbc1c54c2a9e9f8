/* bench_sign: Ed25519 keypair / sign / verify on every built secagg backend (crypto.h), in
 * one run, so the mbedTLS backend (ed25519_mbedtls.c, Weierstrass arithmetic of mbedtls_ecp)
 * is reported as a ratio against libsodium measured on the same machine at the same time.
 *
 * Usage: bench_sign [--iters N] [--msg BYTES] [--reps R] [--wall] [--json]
 * Each operation runs N times (200) over N distinct seeds and messages of BYTES bytes (64),
 * R times (3) interleaved across backends; the best run is kept. Times are CPU time of this
 * thread unless --wall. Exit status 1 if a signature fails to verify or the backends
 * disagree on a public key or signature (Ed25519 is deterministic). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto.h"

#include "bench_util.h"

#define OPS 3
static const char *const op_names[OPS] = {"keypair", "sign", "verify"};

static clockid_t bench_clock = CLOCK_THREAD_CPUTIME_ID; /* --wall: CLOCK_MONOTONIC */

static double now_s(void) {
    return bench_clock_s(bench_clock);
}

struct backend_run {
    const struct fl__sa_crypto *c;
    uint8_t *pk, *sk, *sig; /* N x 32, N x 64, N x 64 */
    double best[OPS];       /* seconds per operation, best of the reps */
};

/* Times one operation over all n items; returns -1 on any failure. */
static int run_op(struct backend_run *b, int op, size_t n, const uint8_t *seeds,
                  const uint8_t *msgs, size_t mlen) {
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        int rc;
        if (op == 0)
            rc = b->c->ed25519_keypair(b->pk + 32 * i, b->sk + 64 * i, seeds + 32 * i);
        else if (op == 1)
            rc = b->c->ed25519_sign(b->sig + 64 * i, msgs + mlen * i, mlen, b->sk + 64 * i);
        else
            rc = b->c->ed25519_verify(b->sig + 64 * i, msgs + mlen * i, mlen, b->pk + 32 * i);
        if (rc != 0) {
            fprintf(stderr, "%s: %s failed at item %zu\n", b->c->name, op_names[op], i);
            return -1;
        }
    }
    double per = (now_s() - t0) / (double)n;
    if (b->best[op] == 0 || per < b->best[op])
        b->best[op] = per;
    return 0;
}

int main(int argc, char **argv) {
    long iters = 200, mlen = 64, reps = 3;
    int json = 0, rc = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--wall") == 0) {
            bench_clock = CLOCK_MONOTONIC;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 10000000, &iters) != 0)
                goto usage;
        } else if (strcmp(argv[i], "--msg") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 1 << 24, &mlen) != 0)
                goto usage;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 1000, &reps) != 0)
                goto usage;
        } else {
            goto usage;
        }
    }

    enum fl__sa_backend_id ids[2] = {FL__SA_BACKEND_SODIUM, FL__SA_BACKEND_MBEDTLS};
    struct backend_run runs[2];
    size_t nb = 0, n = (size_t)iters, ml = (size_t)mlen;
    uint8_t *seeds = malloc(32 * n), *msgs = malloc(ml * n);
    memset(runs, 0, sizeof(runs));
    if (!seeds || !msgs)
        goto out;
    for (int b = 0; b < 2; b++) {
        const struct fl__sa_crypto *c = fl__sa_crypto_get(ids[b]);
        if (!c || !c->ed25519_sign)
            continue;
        runs[nb].c = c;
        runs[nb].pk = malloc(32 * n);
        runs[nb].sk = malloc(64 * n);
        runs[nb].sig = malloc(64 * n);
        if (!runs[nb].pk || !runs[nb].sk || !runs[nb].sig)
            goto out;
        nb++;
    }
    if (nb == 0 || runs[0].c->random(seeds, 32 * n) != 0 || runs[0].c->random(msgs, ml * n) != 0)
        goto out;
    for (long r = 0; r < reps; r++)
        for (int op = 0; op < OPS; op++)
            for (size_t b = 0; b < nb; b++)
                if (run_op(&runs[b], op, n, seeds, msgs, ml) != 0)
                    goto out;
    for (size_t b = 1; b < nb; b++) {
        if (memcmp(runs[b].pk, runs[0].pk, 32 * n) != 0 ||
            memcmp(runs[b].sig, runs[0].sig, 64 * n) != 0) {
            fprintf(stderr, "%s and %s disagree on a key or signature\n", runs[0].c->name,
                    runs[b].c->name);
            goto out;
        }
    }

    if (json) {
        printf("{\"bench\":\"secagg_ed25519\",\"iters\":%ld,\"msg_bytes\":%ld,\"reps\":%ld,"
               "\"clock\":\"%s\",\"results\":[",
               iters, mlen, reps, bench_clock == CLOCK_MONOTONIC ? "wall" : "thread_cpu");
        for (size_t b = 0; b < nb; b++)
            for (int op = 0; op < OPS; op++)
                printf("%s{\"backend\":\"%s\",\"op\":\"%s\",\"us\":%.2f,\"ops_per_s\":%.1f,"
                       "\"ratio_vs_%s\":%.2f}",
                       b || op ? "," : "", runs[b].c->name, op_names[op], runs[b].best[op] * 1e6,
                       1.0 / runs[b].best[op], runs[0].c->name,
                       runs[b].best[op] / runs[0].best[op]);
        printf("]}\n");
    } else {
        printf("Ed25519, %ld items x %ld-byte messages, best of %ld (%s time)\n", iters, mlen, reps,
               bench_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU");
        printf("%-16s %-8s %12s %12s %16s\n", "backend", "op", "us/op", "ops/s", "time vs sodium");
        for (size_t b = 0; b < nb; b++)
            for (int op = 0; op < OPS; op++)
                printf("%-16s %-8s %12.2f %12.1f %15.2fx\n", runs[b].c->name, op_names[op],
                       runs[b].best[op] * 1e6, 1.0 / runs[b].best[op],
                       runs[b].best[op] / runs[0].best[op]);
    }
    rc = 0;
out:
    for (size_t b = 0; b < 2; b++) {
        free(runs[b].pk);
        free(runs[b].sk);
        free(runs[b].sig);
    }
    free(seeds);
    free(msgs);
    return rc;
usage:
    fprintf(stderr, "usage: %s [--iters N] [--msg BYTES] [--reps R] [--wall] [--json]\n", argv[0]);
    return 2;
}
