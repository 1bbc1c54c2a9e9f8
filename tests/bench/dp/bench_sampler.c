/* bench_sampler: throughput of the exact discrete Gaussian sampler.
 *
 *   bench_sampler [--sigma S] [--count N] [--rng chacha20|os] [--laplace] [--json]
 *
 * sigma^2 is passed to the sampler as an exact rational: sigma^2 itself when it is an integer,
 * otherwise rounded up with fl_dp_variance_to_rational. Samples are drawn in chunks of 64K
 * into one buffer (so batches take the table-driven path); the figure is samples per second of
 * wall-clock (CLOCK_MONOTONIC) time, and the JSON also gives process CPU time, which is the
 * steadier figure on a loaded machine. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flotilla/dp.h"

#include "bench_util.h"

#define CHUNK 65536

static void usage(void) {
    fprintf(stderr, "usage: bench_sampler [--sigma S] [--count N] [--rng chacha20|os] "
                    "[--laplace] [--json]\n");
    exit(2);
}

int main(int argc, char **argv) {
    double sigma = 100.0;
    unsigned long long count = 1000000;
    int json = 0, use_os = 0, laplace = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sigma") && i + 1 < argc)
            sigma = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rng") && i + 1 < argc) {
            i++;
            if (!strcmp(argv[i], "os"))
                use_os = 1;
            else if (strcmp(argv[i], "chacha20"))
                usage();
        } else if (!strcmp(argv[i], "--laplace"))
            laplace = 1;
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else
            usage();
    }
    if (!(sigma > 0) || !isfinite(sigma) || count == 0)
        usage();

    uint64_t num, den;
    double s2 = sigma * sigma;
    if (s2 == floor(s2) && s2 <= (double)FL_DP_SIGMA2_MAX) {
        num = (uint64_t)s2;
        den = 1;
    } else {
        uint64_t d = (uint64_t)1 << 20;
        while (d > 1 && s2 * (double)d > (double)FL_DP_SIGMA2_MAX)
            d >>= 1;
        if (fl_dp_variance_to_rational(&num, &den, s2, d) != FL_OK) {
            fprintf(stderr, "bench_sampler: sigma %g out of range\n", sigma);
            return 1;
        }
    }

    fl_dp_rng *rng = NULL;
    uint8_t seed[FL_DP_SEED_BYTES] = {1, 2, 3};
    fl_status st = use_os ? fl_dp_rng_create_os(&rng, NULL)
                          : fl_dp_rng_create_chacha20(&rng, seed, sizeof(seed), NULL);
    if (st != FL_OK) {
        fprintf(stderr, "bench_sampler: rng: %s\n", fl_status_str(st));
        return 1;
    }
    int64_t *buf = malloc(sizeof(int64_t) * CHUNK);
    if (!buf)
        return 1;
    /* Warm-up: page in the buffer and the code. */
    st = fl_dp_discrete_gaussian(rng, buf, CHUNK, num, den);

    double sum = 0, sumsq = 0;
    double t0 = bench_wall_s(), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (unsigned long long done = 0; done < count && st == FL_OK;) {
        size_t k = count - done < CHUNK ? (size_t)(count - done) : CHUNK;
        st = laplace ? fl_dp_discrete_laplace(rng, buf, k, num, den)
                     : fl_dp_discrete_gaussian(rng, buf, k, num, den);
        for (size_t j = 0; j < k; j++) {
            sum += (double)buf[j];
            sumsq += (double)buf[j] * (double)buf[j];
        }
        done += k;
    }
    double dt = bench_wall_s() - t0, dc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (st != FL_OK) {
        fprintf(stderr, "bench_sampler: %s\n", fl_dp_rng_errmsg(rng));
        return 1;
    }
    double mean = sum / (double)count, var = sumsq / (double)count - mean * mean;
    double rate = (double)count / dt;
    if (json)
        printf("{\"impl\": \"flotilla\", \"dist\": \"%s\", \"sigma\": %.17g, \"sigma2_num\": %llu, "
               "\"sigma2_den\": %llu, \"count\": %llu, \"seconds\": %.6f, "
               "\"samples_per_s\": %.1f, \"cpu_seconds\": %.6f, \"samples_per_cpu_s\": %.1f, "
               "\"mean\": %.6g, \"var\": %.6g, \"rng\": \"%s\"}\n",
               laplace ? "discrete_laplace" : "discrete_gaussian", sigma, (unsigned long long)num,
               (unsigned long long)den, count, dt, rate, dc, (double)count / dc, mean, var,
               use_os ? "os" : "chacha20");
    else
        printf("%s sigma=%g (sigma^2=%llu/%llu) count=%llu: %.3f s, %.2f M samples/s, "
               "mean %.4g var %.6g (rng %s)\n",
               laplace ? "discrete laplace" : "discrete gaussian", sigma, (unsigned long long)num,
               (unsigned long long)den, count, dt, rate / 1e6, mean, var,
               use_os ? "os" : "chacha20");
    free(buf);
    fl_dp_rng_destroy(rng);
    return 0;
}
