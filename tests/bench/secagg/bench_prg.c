/* bench_prg: throughput of the secagg mask PRG (crypto.h prg(): AES-128-CTR keystream) on
 * every built backend, and the sodium backend's two implementations of it (OpenSSL EVP and
 * libgcrypt, which prg() picks between), against a reference measured in the same run:
 *   - OpenSSL EVP aes-128-ctr driven directly, one context, in-place 16 KiB updates (what
 *     `openssl speed -evp aes-128-ctr -bytes 16384` measures), and optionally
 *   - the `openssl speed` command itself (--openssl-speed), parsed from its output;
 * plus libsodium's ChaCha20 (crypto_stream_chacha20_ietf) keystream for the record.
 * The same total bytes are also drawn in --piece BYTES pieces (8192 = 2048 mask words, the
 * server's mask removal chunk), once with a prg() call per piece (the seed's counter
 * advanced between pieces: the stateless cost) and once through the streaming PRG (one
 * prg_open, prg_next per piece, prg_close): rows "prg-pieces/<backend>" and
 * "stream-pieces/<backend>" (and "stream-pieces/openssl", "stream-pieces/libgcrypt" for the
 * sodium backend's two implementations); JSON adds "piece_bytes" and "pieces" (per backend
 * and size: both rates and stream_over_prg).
 *
 * Usage: bench_prg [--size BYTES[,BYTES...]] [--min-time SECONDS] [--reps N] [--wall]
 *                  [--piece BYTES] [--openssl-speed] [--json]
 * Sizes accept K/M/G suffixes (binary). Each measurement runs for --min-time seconds (0.5)
 * of thread CPU time (--wall: wall-clock time, and `openssl speed -elapsed`), --reps times
 * (3), interleaved; the best run is reported. Prints a table, or one JSON object. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <sodium.h>
#if defined(FL_HAVE_MBEDTLS_BUILD)
#include <mbedtls/aesni.h>
#endif

#include "crypto.h"
#include "secagg_internal.h"

#include "bench_util.h"

#define MAX_SIZES 16
#define MAX_RESULTS 64

struct result {
    char impl[64];   /* implementation measured */
    size_t size;     /* bytes per call */
    double mbps;     /* 10^6 bytes per second */
    double calls;    /* calls timed */
};

static struct result results[MAX_RESULTS];
static size_t n_results;

/* CPU time of this thread by default, as `openssl speed` divides by user CPU time unless
 * given -elapsed: on a shared machine wall time mostly measures the neighbours. */
static clockid_t bench_clock = CLOCK_THREAD_CPUTIME_ID;

static double now_s(void) {
    return bench_clock_s(bench_clock);
}

/* Records a measurement, keeping the best of repeated runs of the same impl and size (the
 * machine is shared, so the best run is the least disturbed one). */
static void add_result(const char *impl, size_t size, double bytes, double secs, double calls) {
    double mbps = bytes / secs / 1e6;
    for (size_t i = 0; i < n_results; i++) {
        struct result *r = &results[i];
        if (strcmp(r->impl, impl) == 0 && r->size == size) {
            if (mbps > r->mbps) {
                r->mbps = mbps;
                r->calls = calls;
            }
            return;
        }
    }
    if (n_results >= MAX_RESULTS)
        return;
    struct result *r = &results[n_results++];
    snprintf(r->impl, sizeof(r->impl), "%s", impl);
    r->size = size;
    r->mbps = mbps;
    r->calls = calls;
}

/* ---- measured functions: each fills size bytes of keystream once ---- */

struct job {
    const struct fl__sa_crypto *crypto; /* for prg() */
    EVP_CIPHER_CTX *evp;                /* for the EVP reference */
    uint8_t seed[32];
};

static int run_prg(struct job *j, uint8_t *buf, size_t size) {
    return j->crypto->prg(buf, size, j->seed);
}

/* Reference: one long-lived EVP context, in-place updates in 16 KiB pieces (as openssl
 * speed does); no per-call context setup, so this is an upper bound for prg(). */
static int run_prg_openssl(struct job *j, uint8_t *buf, size_t size) {
    return fl__sa_prg_openssl(buf, size, j->seed);
}

static int run_prg_gcrypt(struct job *j, uint8_t *buf, size_t size) {
    return fl__sa_prg_gcrypt(buf, size, j->seed);
}

/* Pieces of g_piece bytes (the last one shorter). */
static size_t g_piece = 8192;


/* Stateless: one prg() per piece from a seed whose counter is advanced by the pieces
 * before it (g_piece is a multiple of 16). */
static int run_prg_pieces(struct job *j, uint8_t *buf, size_t size) {
    uint8_t s[32];
    memcpy(s, j->seed, 32);
    for (size_t off = 0; off < size; off += g_piece) {
        size_t take = size - off < g_piece ? size - off : g_piece;
        if (j->crypto->prg(buf + off, take, s) != 0)
            return -1;
        fl__sa_ctr_add(s + 16, g_piece / 16);
    }
    return 0;
}

/* Streaming: one open, prg_next per piece, one close. */
static int run_stream_pieces(struct job *j, uint8_t *buf, size_t size) {
    _Alignas(16) uint8_t ctx[FL__SA_PRG_STREAM_MAX];
    int rc = 0;
    if (j->crypto->prg_open(ctx, j->seed) != 0) {
        j->crypto->prg_close(ctx);
        return -1;
    }
    for (size_t off = 0; off < size && rc == 0; off += g_piece) {
        size_t take = size - off < g_piece ? size - off : g_piece;
        rc = j->crypto->prg_next(ctx, buf + off, take);
    }
    j->crypto->prg_close(ctx);
    return rc;
}

static int run_evp_ref(struct job *j, uint8_t *buf, size_t size) {
    for (size_t off = 0; off < size; off += 16384) {
        int take = (int)(size - off < 16384 ? size - off : 16384), outl = 0;
        if (EVP_EncryptUpdate(j->evp, buf + off, &outl, buf + off, take) != 1)
            return -1;
    }
    return 0;
}

static int run_chacha20(struct job *j, uint8_t *buf, size_t size) {
    return crypto_stream_chacha20_ietf(buf, size, j->seed, j->seed) == 0 ? 0 : -1;
}

static int measure(const char *impl, int (*fn)(struct job *, uint8_t *, size_t), struct job *j,
                   uint8_t *buf, size_t size, double min_time) {
    if (fn(j, buf, size) != 0) /* warm-up (page faults, CPU clock) */
        return -1;
    double calls = 0, t0 = now_s(), t = 0;
    do {
        for (int k = 0; k < 8; k++)
            if (fn(j, buf, size) != 0)
                return -1;
        calls += 8;
        t = now_s() - t0;
    } while (t < min_time);
    add_result(impl, size, calls * (double)size, t, calls);
    return 0;
}

/* Runs `openssl speed -evp aes-128-ctr -bytes 16384 -seconds 1` and returns its figure in
 * 10^6 bytes/s, or -1. Its table reports 1000s of bytes per second ("12345.67k"). */
static double openssl_speed_cli(int wall) {
    FILE *p = popen(wall ? "openssl speed -elapsed -evp aes-128-ctr -bytes 16384 -seconds 1 "
                           "2>/dev/null"
                         : "openssl speed -evp aes-128-ctr -bytes 16384 -seconds 1 2>/dev/null",
                    "r");
    char line[512];
    double kbps = -1;
    if (!p)
        return -1;
    while (fgets(line, sizeof(line), p)) {
        if (strncasecmp(line, "aes-128-ctr", 11) != 0)
            continue;
        /* The figure is the last whitespace-separated token of the row. */
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        while (n > 0 && line[n - 1] != ' ' && line[n - 1] != '\t')
            n--;
        kbps = strtod(line + n, NULL);
    }
    pclose(p);
    return kbps > 0 ? kbps / 1e3 : -1;
}

static const struct result *find(const char *impl, size_t size) {
    for (size_t i = 0; i < n_results; i++)
        if (strcmp(results[i].impl, impl) == 0 && results[i].size == size)
            return &results[i];
    return NULL;
}

int main(int argc, char **argv) {
    size_t sizes[MAX_SIZES] = {16384, 1u << 20, 4u << 20};
    size_t n_sizes = 3;
    double min_time = 0.5;
    int json = 0, cli = 0, reps = 3;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--openssl-speed") == 0) {
            cli = 1;
        } else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc) {
            min_time = strtod(argv[++i], NULL);
            if (!(min_time > 0 && min_time < 60)) {
                fprintf(stderr, "bad --min-time\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--piece") == 0 && i + 1 < argc) {
            if (bench_parse_size(argv[++i], &g_piece) != 0 || g_piece == 0 || g_piece % 16) {
                fprintf(stderr, "bad --piece (a multiple of 16 bytes)\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--wall") == 0) {
            bench_clock = CLOCK_MONOTONIC;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)strtol(argv[++i], NULL, 10);
            if (reps < 1 || reps > 100) {
                fprintf(stderr, "bad --reps\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            const char *s = argv[++i];
            n_sizes = 0;
            while (*s) {
                if (n_sizes == MAX_SIZES || bench_parse_size(s, &sizes[n_sizes]) != 0) {
                    fprintf(stderr, "bad --size %s\n", argv[i]);
                    return 2;
                }
                n_sizes++;
                const char *comma = strchr(s, ',');
                s = comma ? comma + 1 : s + strlen(s);
            }
        } else {
            fprintf(stderr, "usage: %s [--size BYTES[,BYTES...]] [--min-time S] "
                            "[--reps N] [--wall] [--piece BYTES] [--openssl-speed] [--json]\n",
                    argv[0]);
            return 2;
        }
    }

    const struct fl__sa_crypto *be[2] = {fl__sa_crypto_get(FL__SA_BACKEND_SODIUM),
                                         fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS)};
    if (!be[0]) {
        fprintf(stderr, "sodium backend unavailable\n");
        return 1;
    }
    size_t max = 0;
    for (size_t i = 0; i < n_sizes; i++)
        max = sizes[i] > max ? sizes[i] : max;
    uint8_t *buf = aligned_alloc(64, (max + 63) / 64 * 64); /* openssl speed aligns too */
    if (!buf) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    memset(buf, 0, max);

    struct job j;
    memset(&j, 0, sizeof(j));
    randombytes_buf(j.seed, sizeof(j.seed));
    j.evp = EVP_CIPHER_CTX_new();
    if (!j.evp || EVP_EncryptInit_ex(j.evp, EVP_aes_128_ctr(), NULL, j.seed, j.seed + 16) != 1) {
        fprintf(stderr, "EVP init failed\n");
        return 1;
    }

    char name[64];
    int rc = 0;
    int have_gcrypt = fl__sa_prg_gcrypt(buf, 16, j.seed) == 0;
    /* The sodium backend's stream on each implementation, as tables. */
    struct fl__sa_crypto impl_tab[2] = {*be[0], *be[0]};
    impl_tab[0].prg_open = fl__sa_prg_open_openssl;
    impl_tab[1].prg_open = fl__sa_prg_open_gcrypt;
    for (int rep = 0; rep < reps; rep++)
    for (size_t i = 0; i < n_sizes && rc == 0; i++) {
        rc |= measure("openssl-evp-reference", run_evp_ref, &j, buf, sizes[i], min_time);
        for (int b = 0; b < 2; b++) {
            if (!be[b])
                continue;
            j.crypto = be[b];
            snprintf(name, sizeof(name), "prg/%s", be[b]->name);
            rc |= measure(name, run_prg, &j, buf, sizes[i], min_time);
            snprintf(name, sizeof(name), "prg-pieces/%s", be[b]->name);
            rc |= measure(name, run_prg_pieces, &j, buf, sizes[i], min_time);
            if (be[b]->prg_open) {
                snprintf(name, sizeof(name), "stream-pieces/%s", be[b]->name);
                rc |= measure(name, run_stream_pieces, &j, buf, sizes[i], min_time);
            }
        }
        if (be[0]->prg_open) {
            j.crypto = &impl_tab[0];
            rc |= measure("stream-pieces/openssl", run_stream_pieces, &j, buf, sizes[i],
                          min_time);
            j.crypto = &impl_tab[1];
            if (have_gcrypt)
                rc |= measure("stream-pieces/libgcrypt", run_stream_pieces, &j, buf, sizes[i],
                              min_time);
        }
        rc |= measure("prg-impl/openssl", run_prg_openssl, &j, buf, sizes[i], min_time);
        if (have_gcrypt)
            rc |= measure("prg-impl/libgcrypt", run_prg_gcrypt, &j, buf, sizes[i], min_time);
        rc |= measure("chacha20-ietf/libsodium", run_chacha20, &j, buf, sizes[i], min_time);
    }
    double cli_mbps = -1;
    for (int rep = 0; cli && rep < reps; rep++) { /* best of reps, like our own figures */
        double v = openssl_speed_cli(bench_clock == CLOCK_MONOTONIC);
        cli_mbps = v > cli_mbps ? v : cli_mbps;
    }
    EVP_CIPHER_CTX_free(j.evp);
    free(buf);
    if (rc != 0) {
        fprintf(stderr, "a measured call failed\n");
        return 1;
    }

    int aesni = -1;
#if defined(FL_HAVE_MBEDTLS_BUILD) && defined(MBEDTLS_AESNI_C) && defined(MBEDTLS_HAVE_X86_64)
    aesni = mbedtls_aesni_has_support(MBEDTLS_AESNI_AES) ? 1 : 0;
#endif

    if (json) {
        printf("{\"bench\":\"prg\",\"clock\":\"%s\",\"min_time_s\":%.3f,\"reps\":%d,"
               "\"mbedtls_aesni\":%d,\"sodium_prg_impl\":\"%s\",",
               bench_clock == CLOCK_MONOTONIC ? "wall" : "thread-cpu", min_time, reps, aesni,
               fl__sa_prg_impl());
        if (cli_mbps > 0)
            printf("\"openssl_speed_cli_MBps\":%.1f,", cli_mbps);
        else
            printf("\"openssl_speed_cli_MBps\":null,");
        printf("\"results\":[");
        for (size_t i = 0; i < n_results; i++) {
            const struct result *r = &results[i];
            const struct result *ref = find("openssl-evp-reference", r->size);
            printf("%s{\"impl\":\"%s\",\"size\":%zu,\"MBps\":%.1f,\"calls\":%.0f,"
                   "\"ratio_vs_evp\":%.3f",
                   i ? "," : "", r->impl, r->size, r->mbps, r->calls,
                   ref ? r->mbps / ref->mbps : 0.0);
            if (cli_mbps > 0)
                printf(",\"ratio_vs_openssl_speed\":%.3f", r->mbps / cli_mbps);
            printf("}");
        }
        printf("],\"piece_bytes\":%zu,\"pieces\":[", g_piece);
        int first = 1;
        for (int b = 0; b < 2; b++) {
            if (!be[b])
                continue;
            for (size_t i = 0; i < n_sizes; i++) {
                char pn[64], sn[64];
                snprintf(pn, sizeof(pn), "prg-pieces/%s", be[b]->name);
                snprintf(sn, sizeof(sn), "stream-pieces/%s", be[b]->name);
                const struct result *pr = find(pn, sizes[i]), *sr = find(sn, sizes[i]);
                if (!pr || !sr)
                    continue;
                printf("%s{\"backend\":\"%s\",\"size\":%zu,\"prg_MBps\":%.1f,"
                       "\"stream_MBps\":%.1f,\"stream_over_prg\":%.3f}",
                       first ? "" : ",", be[b]->name, sizes[i], pr->mbps, sr->mbps,
                       sr->mbps / pr->mbps);
                first = 0;
            }
        }
        printf("]}\n");
    } else {
        printf("mbedTLS AES-NI in use: %s\n",
               aesni < 0 ? "n/a" : (aesni ? "yes" : "no (software AES)"));
        printf("sodium backend's prg() runs on: %s\n", fl__sa_prg_impl());
        printf("pieces (prg-pieces/*, stream-pieces/*): %zu bytes\n", g_piece);
        if (cli_mbps > 0)
            printf("openssl speed -evp aes-128-ctr -bytes 16384: %.1f MB/s\n", cli_mbps);
        printf("%-28s %10s %12s %10s%s\n", "impl", "size", "MB/s", "vs EVP",
               cli_mbps > 0 ? "  vs speed" : "");
        for (size_t i = 0; i < n_results; i++) {
            const struct result *r = &results[i];
            const struct result *ref = find("openssl-evp-reference", r->size);
            printf("%-28s %10zu %12.1f %9.1f%%", r->impl, r->size, r->mbps,
                   ref ? 100.0 * r->mbps / ref->mbps : 0.0);
            if (cli_mbps > 0)
                printf("  %8.1f%%", 100.0 * r->mbps / cli_mbps);
            printf("\n");
        }
    }
    return 0;
}
