/* bench_norm: the cost of secagg norm proofs (normproof.c), per client and per round, as
 * ratios against references measured in the same run (the dev VM is shared and loaded, so
 * only ratios carry from one run to another).
 *
 *   bench_norm [--dim D] [--bits-per-coord M] [--clients N] [--reps R] [--norm-dim K]
 *              [--wall] [--json]
 *
 * D inputs (64) of b = 32 bits, each proven in [-2^(M-1), 2^(M-1)) (M = 8); the first K
 * (D) also bounded in L2 by K * 4^(M-1), which every in-range vector meets; N >= 3 clients
 * (5) on the derived graph. Each figure is the best of R runs (3) of one round with proofs
 * and one without, same clients, inputs and order.
 *
 * Figures per client: prove (fl_secagg_client_set_input, which makes the proof), verify
 * (fl_secagg_norm_check on the client's real MASKED_INPUT), proof bytes. Per round: the
 * whole round in process (server and clients, all calls timed), the server's share of it,
 * and its final advance, which in norm mode ends with the link check (d variable-base
 * multiplications). Reference: one crypto_scalarmult_ristretto255 (variable base, the
 * bulk of proving and verifying), so prove and verify are reported per proven bit
 * (D * M + bits of the bound) in units of that multiplication.
 *
 * Times are CPU time of this thread unless --wall (the library starts no threads). Exit
 * status 1 if a round fails, a sum is wrong or a client's own proof does not verify. */

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flotilla/secagg.h"
#include "secagg_internal.h"

#include "bench_util.h"

static clockid_t bench_clock = CLOCK_THREAD_CPUTIME_ID; /* --wall: CLOCK_MONOTONIC */

static double now_s(void) {
    return bench_clock_s(bench_clock);
}

static double min_pos(double best, double v) {
    return best == 0 || v < best ? v : best;
}

/* Figures of one round; times in seconds. */
struct round_t {
    double total;   /* every library call of the round, clients and server */
    double server;  /* the server's calls */
    double finish;  /* the server's final advance (UNMASK -> DONE) */
    double prove;   /* mean fl_secagg_client_set_input per client */
    double verify;  /* mean fl_secagg_norm_check per client (norm mode) */
    size_t msg_len; /* bytes of client 0's MASKED_INPUT */
};

/* Best-of accumulation of round figures (msg_len is the same every run). */
static void keep_best(struct round_t *best, const struct round_t *r) {
    best->total = min_pos(best->total, r->total);
    best->server = min_pos(best->server, r->server);
    best->finish = min_pos(best->finish, r->finish);
    best->prove = min_pos(best->prove, r->prove);
    best->verify = min_pos(best->verify, r->verify);
    best->msg_len = r->msg_len;
}

#define SRV(call) (t0 = now_s(), st = (call), r->server += now_s() - t0, st)
#define CLI(call) (st = (call))

/* Runs one round of cfg with inputs x (n x d), all clients answering every phase, and
 * times it. In norm mode each client's MASKED_INPUT is then checked with
 * fl_secagg_norm_check. Returns 0 if the round ends DONE with the plain sum. */
static int run_round(const fl_secagg_config *cfg, uint64_t round_id, const uint32_t *x,
                     struct round_t *r) {
    uint32_t n = cfg->num_clients, d = cfg->dim;
    fl_secagg_server *srv = NULL;
    fl_secagg_client **cl = calloc(n, sizeof(*cl));
    uint8_t **masked = calloc(n, sizeof(*masked));
    size_t *masked_len = calloc(n, sizeof(*masked_len));
    uint8_t seed[32] = {1};
    double t0, t_start = now_s(), t_other = 0; /* t_other: the bench's own copies */
    fl_status st;
    int rc = -1;
    memset(r, 0, sizeof(*r));
    if (!cl || !masked || !masked_len)
        goto out;
    if (SRV(fl_secagg_server_create(&srv, cfg, round_id, seed, NULL)) != FL_OK) {
        fprintf(stderr, "server_create: %s\n", fl_status_str(st));
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *m;
        size_t ml;
        if (fl_secagg_client_create(&cl[i], cfg, round_id, i, NULL, NULL) != FL_OK)
            goto out;
        double tp = now_s();
        if (fl_secagg_client_set_input(cl[i], x + (size_t)i * d, d) != FL_OK) {
            fprintf(stderr, "set_input %u: %s\n", i, fl_secagg_client_errmsg(cl[i]));
            goto out;
        }
        r->prove += now_s() - tp;
        if (CLI(fl_secagg_client_start(cl[i], &m, &ml)) != FL_OK ||
            SRV(fl_secagg_server_receive(srv, i, m, ml)) != FL_OK)
            goto out;
    }
    for (;;) {
        fl_secagg_phase ph = fl_secagg_server_phase(srv);
        double ta = now_s();
        if (SRV(fl_secagg_server_advance(srv)) != FL_OK) {
            fprintf(stderr, "advance from phase %d: %s\n", (int)ph, fl_secagg_server_errmsg(srv));
            goto out;
        }
        if (ph == FL_SECAGG_PHASE_UNMASK)
            r->finish = now_s() - ta;
        ph = fl_secagg_server_phase(srv);
        if (ph == FL_SECAGG_PHASE_DONE)
            break;
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *m, *rep;
            size_t ml, rl;
            if (SRV(fl_secagg_server_outgoing(srv, i, &m, &ml)) != FL_OK ||
                CLI(fl_secagg_client_handle(cl[i], m, ml, &rep, &rl)) != FL_OK) {
                fprintf(stderr, "client %u: %s\n", i, fl_secagg_client_errmsg(cl[i]));
                goto out;
            }
            if (ph == FL_SECAGG_PHASE_MASKED_INPUT) {
                double tc = now_s();
                masked[i] = malloc(rl);
                if (!masked[i])
                    goto out;
                memcpy(masked[i], rep, rl);
                masked_len[i] = rl;
                t_other += now_s() - tc;
            }
            if (SRV(fl_secagg_server_receive(srv, i, rep, rl)) != FL_OK) {
                fprintf(stderr, "server, from %u: %s\n", i, fl_secagg_server_errmsg(srv));
                goto out;
            }
        }
    }
    r->total = now_s() - t_start - t_other;
    r->prove /= n;
    r->msg_len = masked_len[0];
    const uint32_t *sum;
    size_t dim;
    uint32_t count;
    if (fl_secagg_server_result(srv, &sum, &dim, &count) != FL_OK || dim != d || count != n)
        goto out;
    for (uint32_t j = 0; j < d; j++) {
        uint32_t want = 0;
        for (uint32_t i = 0; i < n; i++)
            want += x[(size_t)i * d + j];
        if (sum[j] != want) {
            fprintf(stderr, "sum[%u] = %u, expected %u\n", j, sum[j], want);
            goto out;
        }
    }
    if (cfg->norm_bits) {
        for (uint32_t i = 0; i < n; i++) {
            fl_secagg_norm_ticket tk;
            char em[256];
            double tv = now_s();
            st = fl_secagg_norm_check(&tk, cfg, round_id, i, masked[i], masked_len[i], NULL, em,
                                      sizeof(em));
            r->verify += now_s() - tv;
            if (st != FL_OK) {
                fprintf(stderr, "norm_check of client %u: %s\n", i, em);
                goto out;
            }
        }
        r->verify /= n;
    }
    rc = 0;
out:
    fl_secagg_server_destroy(srv);
    for (uint32_t i = 0; cl && i < n; i++)
        fl_secagg_client_destroy(cl[i]);
    for (uint32_t i = 0; masked && i < n; i++)
        free(masked[i]);
    free(cl);
    free(masked);
    free(masked_len);
    return rc;
}

/* Best time of one crypto_scalarmult_ristretto255 (variable base) over `iters` distinct
 * random scalars and points. */
static double time_scalarmult(int iters) {
    uint8_t(*s)[32] = malloc((size_t)iters * 32), (*p)[32] = malloc((size_t)iters * 32);
    uint8_t q[32], acc = 0;
    double best = 0;
    if (!s || !p)
        goto out;
    for (int i = 0; i < iters; i++) {
        uint8_t h[64];
        randombytes_buf(h, sizeof(h));
        crypto_core_ristretto255_from_hash(p[i], h);
        crypto_core_ristretto255_scalar_random(s[i]);
    }
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (int i = 0; i < iters; i++) {
            if (crypto_scalarmult_ristretto255(q, s[i], p[i]) != 0)
                fprintf(stderr, "scalarmult: identity\n");
            acc ^= q[0];
        }
        best = min_pos(best, (now_s() - t0) / iters);
    }
    if (acc == 0x5a) /* keeps the loop; says nothing */
        fprintf(stderr, " ");
out:
    free(s);
    free(p);
    return best;
}

int main(int argc, char **argv) {
    long d = 64, m = 8, n = 5, reps = 3, nd = -1;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--wall") == 0) {
            bench_clock = CLOCK_MONOTONIC;
        } else if (strcmp(argv[i], "--dim") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 1 << 20, &d) != 0)
                goto usage;
        } else if (strcmp(argv[i], "--bits-per-coord") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 31, &m) != 0 || m < 2)
                goto usage;
        } else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 100000, &n) != 0 || n < 3)
                goto usage;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 1000, &reps) != 0)
                goto usage;
        } else if (strcmp(argv[i], "--norm-dim") == 0 && i + 1 < argc) {
            if (bench_parse_count(argv[++i], 1 << 20, &nd) != 0)
                goto usage;
        } else {
            goto usage;
        }
    }
    if (nd < 0)
        nd = d;
    if (nd > d || m + fl_secagg_headroom_bits((uint32_t)n) > 32) {
        fprintf(stderr, "bench_norm: need norm-dim <= dim and M + ceil(log2 N) <= 32\n");
        return 2;
    }
    if (sodium_init() < 0)
        return 1;

    fl_secagg_config plain, norm;
    fl_secagg_config_init(&plain);
    plain.num_clients = (uint32_t)n;
    plain.dim = (uint32_t)d;
    plain.bits = 32;
    norm = plain;
    uint64_t half = (uint64_t)1 << (m - 1);
    norm.norm_bits = (uint32_t)m;
    norm.norm_dim = (uint32_t)nd;
    norm.norm_bound2 = (uint64_t)nd * half * half;
    char em[256];
    if (fl_secagg_config_resolve(&plain, em, sizeof(em)) != FL_OK ||
        fl_secagg_config_resolve(&norm, em, sizeof(em)) != FL_OK) {
        fprintf(stderr, "config: %s\n", em);
        return 2;
    }
    /* Inputs spread over the whole range [-2^(M-1), 2^(M-1)), as words mod 2^32. */
    uint32_t *x = malloc((size_t)n * (size_t)d * sizeof(uint32_t));
    if (!x)
        return 1;
    uint64_t rs = 0x6e6f726dull;
    for (size_t k = 0; k < (size_t)n * (size_t)d; k++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        int64_t z = (int64_t)((rs >> 33) % (2 * half)) - (int64_t)half;
        x[k] = (uint32_t)z;
    }

    double smul = time_scalarmult(200);
    struct round_t best_plain = {0}, best_norm = {0}, r;
    for (long rep = 0; rep < reps; rep++) {
        if (run_round(&plain, 0xB0000000ull + (uint64_t)rep, x, &r) != 0)
            goto fail;
        keep_best(&best_plain, &r);
        if (run_round(&norm, 0xB1000000ull + (uint64_t)rep, x, &r) != 0)
            goto fail;
        keep_best(&best_norm, &r);
        smul = min_pos(smul, time_scalarmult(50));
    }
    free(x);

    /* Proven bits, read back from the proof size (160 + 128 per bit + 64 per coordinate
     * bytes, docs/secagg.md) so that the figure follows the format. */
    size_t pbytes = fl__sa_norm_proof_bytes(&norm), limbs = fl__sa_norm_limbs(&norm);
    size_t nbits = (pbytes - 160 - 64 * (size_t)d) / 128;
    size_t K = nbits - (size_t)d * (size_t)m;
    double prove_x = best_norm.prove / ((double)nbits * smul);
    double verify_x = best_norm.verify / ((double)nbits * smul);
    double round_ratio = best_norm.total / best_plain.total;
    double server_ratio = best_norm.server / best_plain.server;
    /* The link check's extra cost per coordinate: a multiplication and a hash to the group. */
    double link_x = (best_norm.finish - best_plain.finish) / ((double)d * smul);
    const char *clk = bench_clock == CLOCK_MONOTONIC ? "wall" : "thread_cpu";
    if (json) {
        printf("{\"bench\":\"secagg_norm\",\"dim\":%ld,\"bits_per_coord\":%ld,\"norm_dim\":%ld,"
               "\"norm_bound2\":%llu,\"clients\":%ld,\"bits\":32,\"reps\":%ld,\"clock\":\"%s\","
               "\"proven_bits\":%zu,\"limbs\":%zu,\"scalarmult_us\":%.2f,"
               "\"prove_ms\":%.3f,\"prove_x_smul_per_bit\":%.3f,"
               "\"verify_ms\":%.3f,\"verify_x_smul_per_bit\":%.3f,"
               "\"proof_bytes\":%zu,\"proof_bytes_per_bit\":%.1f,"
               "\"masked_input_bytes\":%zu,\"masked_input_bytes_plain\":%zu,"
               "\"round_ms\":%.3f,\"round_plain_ms\":%.3f,\"round_ratio\":%.2f,"
               "\"server_ms\":%.3f,\"server_plain_ms\":%.3f,\"server_ratio\":%.2f,"
               "\"final_advance_ms\":%.3f,\"final_advance_plain_ms\":%.3f,"
               "\"link_x_smul_per_coord\":%.2f}\n",
               d, m, nd, (unsigned long long)norm.norm_bound2, n, reps, clk, nbits, limbs,
               smul * 1e6, best_norm.prove * 1e3, prove_x, best_norm.verify * 1e3, verify_x, pbytes,
               (double)pbytes / (double)nbits, best_norm.msg_len, best_plain.msg_len,
               best_norm.total * 1e3, best_plain.total * 1e3, round_ratio, best_norm.server * 1e3,
               best_plain.server * 1e3, server_ratio, best_norm.finish * 1e3,
               best_plain.finish * 1e3, link_x);
    } else {
        printf("secagg norm proofs: d = %ld, m = %ld, norm_dim = %ld, bound2 = %llu, n = %ld, "
               "b = 32; best of %ld (%s time)\n",
               d, m, nd, (unsigned long long)norm.norm_bound2, n, reps,
               bench_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU");
        printf("reference: crypto_scalarmult_ristretto255 (variable base) = %.1f us; "
               "%zu proven bits per client (d*m + %zu)\n\n",
               smul * 1e6, nbits, K);
        printf("%-34s %12s %16s\n", "per client", "", "x smul per bit");
        printf("%-34s %9.2f ms %16.2f\n", "prove (client_set_input)", best_norm.prove * 1e3,
               prove_x);
        printf("%-34s %9.2f ms %16.2f\n", "verify (fl_secagg_norm_check)", best_norm.verify * 1e3,
               verify_x);
        printf("%-34s %9zu B  %13.1f B/bit\n", "proof", pbytes, (double)pbytes / (double)nbits);
        printf("%-34s %9zu B  (%zu without proofs; %zu limb words)\n\n", "MASKED_INPUT message",
               best_norm.msg_len, best_plain.msg_len, limbs);
        printf("%-34s %12s %12s %8s\n", "per round", "no proofs", "proofs", "ratio");
        printf("%-34s %9.2f ms %9.2f ms %8.2f\n", "whole round (clients + server)",
               best_plain.total * 1e3, best_norm.total * 1e3, round_ratio);
        printf("%-34s %9.2f ms %9.2f ms %8.2f\n", "server calls", best_plain.server * 1e3,
               best_norm.server * 1e3, server_ratio);
        printf("%-34s %9.2f ms %9.2f ms %8.2f\n", "final advance (link check)",
               best_plain.finish * 1e3, best_norm.finish * 1e3,
               best_norm.finish / best_plain.finish);
        printf("link check: %.2f smul per coordinate over the plain final advance\n", link_x);
    }
    return 0;
usage:
    fprintf(stderr,
            "usage: %s [--dim D] [--bits-per-coord M] [--clients N] [--reps R] "
            "[--norm-dim K] [--wall] [--json]\n",
            argv[0]);
    return 2;
fail:
    free(x);
    return 1;
}
