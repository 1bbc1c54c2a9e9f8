/* flotilla-sim: N SDK clients in one process against a coordinator.
 *
 * Each simulated device is a real fl_client (own example store with its partition of
 * Fashion-MNIST, the libcurl transport wrapped by sim_transport for injected dropouts and
 * slow uploads) on its own small-stack thread, stepping the client and sleeping until the
 * next action. The coordinator is either started in-process on 127.0.0.1 with a temporary
 * SQLite database (default) or reached at --url. The population is created through the
 * admin API. The main thread watches the rounds through the admin API, evaluates each new
 * model version on the 10k test set, reads epsilon from /metrics and prints one line per
 * round.
 *
 *   flotilla-sim --clients 1000 --per-round 100 --rounds 30 --alpha 0.5 --secagg on \
 *                --dp central --noise 1.0 --epsilon 8 --summary-json out.json
 *
 * --secagg-active plays the device authority too: it makes an authority key pair, gives
 * every device its own identity (a key pair from fl_client_identity_keygen, a device id and
 * the authority's v2 certificate over both, fl_secagg_cert_issue_device) and creates the
 * population with secagg.consistency_check and the authority's verification key, so the
 * rounds run secure aggregation in active-adversary mode.
 *
 * Executable: printing and exit codes are allowed here (house style 8). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>
#include <zlib.h>

#include "flotilla/client.h"
#include "flotilla/coordinator.h"
#include "flotilla/secagg.h"
#include "flotilla/storage.h"
#include "sim_transport.h"

#define EXIT_SKIP 77
#define ADMIN_TOKEN_DEFAULT "fla_flotilla-sim-admin-token-0123456789abcdef"
#define RING 4096 /* per-round tallies, indexed by round id modulo RING */

/* ---- options ---- */

/* The update clip norm without DP. The SDK always clips before SecAgg's fixed-point encoding
 * (the quantizer needs a bound), and the privacy default of 1.0 is a DP sensitivity, not a
 * training choice: on the demo setting the devices' update norms are 1-3.5 in the first
 * rounds (median ~1.4), so a bound of 1 shrank most plain-FedAvg steps. 50 is over 10x the
 * largest norm seen and still keeps a coordinate's 32-bit sum from wrapping in the demo
 * setting: 130 devices x weight <= 186 examples x 50 x 2^10 (granularity 2^-10) < 2^31. */
#define NO_DP_CLIP 50.0

struct opts {
    int clients, per_round, rounds;
    double alpha;              /* Dirichlet concentration; 0 = IID */
    double dropout;            /* per-phase probability that a device vanishes */
    double slow;               /* fraction of slow devices */
    int slow_ms;               /* their extra delay before uploading */
    bool secagg;
    bool secagg_active;        /* active-adversary mode with device identities */
    bool secagg_reveal;        /* secagg.reveal_pair_seeds */
    const char *dp;            /* none, central, distributed */
    double noise, epsilon, delta;
    double clip;               /* update L2 clip norm (default: 1 with DP, NO_DP_CLIP without) */
    bool clip_given;           /* --clip was on the command line */
    const char *weighting;     /* uniform, examples */
    double local_momentum;     /* the devices' SGD momentum */
    const char *model;         /* "784-128-10" */
    uint64_t seed;
    int epochs, batch;
    double lr, server_lr, over_selection, momentum;
    const char *strategy;      /* fedavg, fedavgm, fedadam, ... */
    long train_n, test_n;      /* subsample sizes (0 = all) */
    const char *data;
    const char *url, *admin_token, *key_hex, *population;
    const char *summary;
    const char *db;            /* coordinator database to keep (NULL: temporary, deleted) */
    const char *audit_bundle;  /* export the run's audit bundle here after the run */
    int deadline_s, masked_s, forming_s;
    double rest_s;             /* a device rests up to this long after each round */
    int max_retry_s;           /* pace steering: the longest retry the server hands out */
    int target_grace_s;        /* selection.target_grace_s; -1 = not set (off) */
    double min_accuracy;       /* exit 1 if the final accuracy is lower (CI) */
    int timeout_s;             /* give up after this long */
    int coord_threads;
    int verbose;
};

static void usage(void) {
    fprintf(stderr,
            "usage: flotilla-sim [options]\n"
            "  --clients N         simulated devices (100)\n"
            "  --per-round K       clients per round, the population's target (10; at least 3\n"
            "                      with --secagg on)\n"
            "  --rounds R          completed rounds to run (5)\n"
            "  --alpha A           Dirichlet non-IID concentration; 0 = IID (0)\n"
            "  --dropout P         probability a device vanishes in each phase (0)\n"
            "  --slow F            fraction of slow devices (0); --slow-ms MS their delay (3000)\n"
            "  --secagg on|off     secure aggregation (on)\n"
            "  --secagg-active     active-adversary secure aggregation: the sim is the device\n"
            "                      authority (one certified identity per device)\n"
            "  --secagg-reveal     secagg.reveal_pair_seeds: survivors reveal the mask seeds\n"
            "                      they shared with devices that dropped before masking\n"
            "  --dp none|central|distributed  (none); --noise Z (1.0); --epsilon E budget (8)\n"
            "  --delta D (1e-5); --clip C update L2 clip norm (1.0 with DP, 50 without)\n"
            "  --weighting uniform|examples  server average over devices (uniform with DP,\n"
            "                      examples without: each update counts by its example count)\n"
            "  --model 784-128-10  MLP layer sizes\n"
            "  --epochs E (2) --batch B (16) --lr LR (0.05) --server-lr S (1.0)\n"
            "  --over-selection X (1.3); --strategy NAME (fedavg); --momentum M (fedavgm, 0.9)\n"
            "  --local-momentum M  the devices' SGD momentum (0.9)\n"
            "  --train-examples N, --test-examples N  subsample Fashion-MNIST (all)\n"
            "  --data DIR          Fashion-MNIST *.gz (/usr/share/datasets/fashion-mnist)\n"
            "  --url URL --admin-token T --coordinator-key HEX  use a running coordinator\n"
            "  --population NAME (sim)\n"
            "  --deadline-s S phase deadlines (10); --masked-s S (60); --forming-s S (3)\n"
            "  --rest-s S          after a round a device is away for uniform [0, S) s (10)\n"
            "  --max-retry-s S     pace steering: longest retry_after_s (5)\n"
            "  --target-grace-s S  close a phase S s after --per-round devices posted in it\n"
            "                      (selection.target_grace_s; off: wait for all or the deadline)\n"
            "  --seed S (1); --summary-json FILE; --min-accuracy A (exit 1 below)\n"
            "  --db PATH           in-process coordinator's database, kept (temporary)\n"
            "  --audit-bundle FILE export the audit log of the run's database (see docs/audit.md)\n"
            "  --timeout-s S (3600); --coord-threads N (4); --verbose\n");
}

static bool parse_opts(struct opts *o, int argc, char **argv) {
    *o = (struct opts){.clients = 100, .per_round = 10, .rounds = 5, .secagg = true,
                       .dp = "none", .noise = 1.0, .epsilon = 8.0, .delta = 1e-5, .clip = 1.0,
                       .model = "784-128-10", .seed = 1, .epochs = 2, .batch = 16, .lr = 0.05,
                       .server_lr = 1.0, .over_selection = 1.3, .strategy = "fedavg",
                       .momentum = 0.9, .local_momentum = 0.9, .slow_ms = 3000,
                       .data = "/usr/share/datasets/fashion-mnist", .population = "sim",
                       .admin_token = ADMIN_TOKEN_DEFAULT, .deadline_s = 10, .masked_s = 60,
                       .forming_s = 3, .rest_s = 10, .max_retry_s = 5, .target_grace_s = -1,
                       .timeout_s = 3600,
                       .coord_threads = 4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v && ++i)
        if (OPT("--clients")) o->clients = (int)strtol(v, NULL, 10);
        else if (OPT("--per-round")) o->per_round = (int)strtol(v, NULL, 10);
        else if (OPT("--rounds")) o->rounds = (int)strtol(v, NULL, 10);
        else if (OPT("--alpha")) o->alpha = strtod(v, NULL);
        else if (OPT("--dropout")) o->dropout = strtod(v, NULL);
        else if (OPT("--slow")) o->slow = strtod(v, NULL);
        else if (OPT("--slow-ms")) o->slow_ms = (int)strtol(v, NULL, 10);
        else if (OPT("--secagg")) o->secagg = strcmp(v, "off") != 0;
        else if (OPT("--dp")) o->dp = v;
        else if (OPT("--noise")) o->noise = strtod(v, NULL);
        else if (OPT("--epsilon")) o->epsilon = strtod(v, NULL);
        else if (OPT("--delta")) o->delta = strtod(v, NULL);
        else if (OPT("--clip")) o->clip = strtod(v, NULL), o->clip_given = true;
        else if (OPT("--weighting")) o->weighting = v;
        else if (OPT("--local-momentum")) o->local_momentum = strtod(v, NULL);
        else if (OPT("--model")) o->model = v;
        else if (OPT("--seed")) o->seed = strtoull(v, NULL, 10);
        else if (OPT("--epochs")) o->epochs = (int)strtol(v, NULL, 10);
        else if (OPT("--batch")) o->batch = (int)strtol(v, NULL, 10);
        else if (OPT("--lr")) o->lr = strtod(v, NULL);
        else if (OPT("--server-lr")) o->server_lr = strtod(v, NULL);
        else if (OPT("--strategy")) o->strategy = v;
        else if (OPT("--momentum")) o->momentum = strtod(v, NULL);
        else if (OPT("--over-selection")) o->over_selection = strtod(v, NULL);
        else if (OPT("--train-examples")) o->train_n = strtol(v, NULL, 10);
        else if (OPT("--test-examples")) o->test_n = strtol(v, NULL, 10);
        else if (OPT("--data")) o->data = v;
        else if (OPT("--url")) o->url = v;
        else if (OPT("--admin-token")) o->admin_token = v;
        else if (OPT("--coordinator-key")) o->key_hex = v;
        else if (OPT("--population")) o->population = v;
        else if (OPT("--deadline-s")) o->deadline_s = (int)strtol(v, NULL, 10);
        else if (OPT("--masked-s")) o->masked_s = (int)strtol(v, NULL, 10);
        else if (OPT("--forming-s")) o->forming_s = (int)strtol(v, NULL, 10);
        else if (OPT("--rest-s")) o->rest_s = strtod(v, NULL);
        else if (OPT("--max-retry-s")) o->max_retry_s = (int)strtol(v, NULL, 10);
        else if (OPT("--target-grace-s")) o->target_grace_s = (int)strtol(v, NULL, 10);
        else if (OPT("--summary-json")) o->summary = v;
        else if (OPT("--db")) o->db = v;
        else if (OPT("--audit-bundle")) o->audit_bundle = v;
        else if (OPT("--min-accuracy")) o->min_accuracy = strtod(v, NULL);
        else if (OPT("--timeout-s")) o->timeout_s = (int)strtol(v, NULL, 10);
        else if (OPT("--coord-threads")) o->coord_threads = (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--verbose") == 0) o->verbose = 1;
        else if (strcmp(a, "--secagg-active") == 0) o->secagg_active = true;
        else if (strcmp(a, "--secagg-reveal") == 0) o->secagg_reveal = true;
        else {
            fprintf(stderr, "unknown or incomplete option %s\n", a);
            return false;
        }
#undef OPT
    }
    if (o->clients < 2 || o->per_round < 2 || o->per_round > o->clients || o->rounds < 1 ||
        o->alpha < 0 || o->dropout < 0 || o->dropout >= 1 || o->slow < 0 || o->slow > 1 ||
        o->target_grace_s < -1 || o->target_grace_s > 86400 ||
        (strcmp(o->dp, "none") && strcmp(o->dp, "central") && strcmp(o->dp, "distributed"))) {
        fprintf(stderr, "bad option values\n");
        return false;
    }
    bool dp = strcmp(o->dp, "none") != 0;
    if (!o->clip_given)
        o->clip = dp ? 1.0 : NO_DP_CLIP;
    if (!o->weighting)
        o->weighting = dp ? "uniform" : "examples";
    if (!(o->clip > 0 && o->clip <= 1e4) ||
        (strcmp(o->weighting, "uniform") && strcmp(o->weighting, "examples")) ||
        !(o->local_momentum >= 0 && o->local_momentum < 1)) {
        fprintf(stderr, "bad --clip (0, 1e4], --weighting uniform|examples or --local-momentum "
                "[0, 1)\n");
        return false;
    }
    if (dp && strcmp(o->weighting, "uniform") != 0) {
        fprintf(stderr, "--weighting examples needs --dp none (DP bounds each device's "
                "contribution, so every update counts the same)\n");
        return false;
    }
    if (o->url && (o->db || o->audit_bundle)) {
        fprintf(stderr, "--db and --audit-bundle need the in-process coordinator (no --url)\n");
        return false;
    }
    if (o->secagg && o->per_round < 3) {
        /* The coordinator refuses a secure population below 3 (a sum of 2 reveals each). */
        fprintf(stderr, "--per-round must be 3 or more with --secagg on (secure aggregation "
                        "needs 3 participants)\n");
        return false;
    }
    if (o->secagg_reveal && !o->secagg) {
        fprintf(stderr, "--secagg-reveal needs --secagg on\n");
        return false;
    }
    if (o->secagg_active && !o->secagg) {
        fprintf(stderr, "--secagg-active needs --secagg on\n");
        return false;
    }
    if (o->url && !o->key_hex) {
        fprintf(stderr, "--url needs --coordinator-key (the pinned public key, 64 hex)\n");
        return false;
    }
    return true;
}

/* ---- time, randomness ---- */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* splitmix64: the simulation's reproducible randomness (partition, dropouts, slowness). */
static uint64_t rnd(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) {
    return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0);
}

static double normal(uint64_t *s) {
    double u = unif(s), v = unif(s);
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(2 * M_PI * v);
}

/* Gamma(a, 1) by Marsaglia-Tsang (with the a < 1 boost). */
static double gamma_draw(uint64_t *s, double a) {
    if (a < 1) {
        double u = unif(s);
        return gamma_draw(s, a + 1) * pow(u > 0 ? u : 1e-300, 1.0 / a);
    }
    double d = a - 1.0 / 3, c = 1.0 / sqrt(9 * d);
    for (;;) {
        double x = normal(s), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = unif(s);
        if (log(u > 0 ? u : 1e-300) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* ---- Fashion-MNIST ---- */

static uint8_t *read_gz(const char *dir, const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    uint8_t *b = malloc(cap);
    int r;
    while (b && (r = gzread(f, b + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)r;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    gzclose(f);
    *len = n;
    return b;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Images (n, 784) in [0, 1] and labels; returns n (0 if missing or malformed, or out of
 * memory: then *oom is set). *x and *y are the caller's to free, NULL when 0 is returned. */
static size_t load_idx(const char *dir, const char *img, const char *lab, float **x, int32_t **y,
                       bool *oom) {
    size_t il = 0, ll = 0, n = 0;
    uint8_t *ib = read_gz(dir, img, &il), *lb = read_gz(dir, lab, &ll);
    *x = NULL;
    *y = NULL;
    if (ib && lb && il >= 16 && ll >= 8 && be32(ib) == 2051 && be32(lb) == 2049 &&
        be32(ib + 8) * be32(ib + 12) == 784) {
        n = be32(ib + 4);
        if (il < 16 + n * 784 || ll < 8 + n)
            n = 0;
    }
    if (n) {
        *x = malloc(n * 784 * sizeof(float));
        *y = malloc(n * sizeof(int32_t));
        if (!*x || !*y) {
            fprintf(stderr, "out of memory loading %s\n", img);
            free(*x);
            free(*y);
            *x = NULL;
            *y = NULL;
            *oom = true;
            n = 0;
            goto out;
        }
        for (size_t i = 0; i < n * 784; i++)
            (*x)[i] = (float)ib[16 + i] / 255.0f;
        for (size_t i = 0; i < n; i++)
            (*y)[i] = lb[8 + i];
    }
out:
    free(ib);
    free(lb);
    return n;
}

/* Partitions n examples over c clients: IID (shuffled, equal shares) or Dirichlet(alpha)
 * per class (Hsu et al. 2019). owner[i] receives example i's client; every client gets at
 * least one example. Returns false if out of memory. */
static bool partition(int *owner, const int32_t *y, size_t n, int c, double alpha, uint64_t *s) {
    bool ok = false;
    size_t *idx = malloc(n * sizeof(size_t));
    double *p = NULL;
    size_t *count = NULL;
    if (!idx)
        goto out;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd(s) % (i + 1)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    if (alpha <= 0) {
        for (size_t i = 0; i < n; i++)
            owner[idx[i]] = (int)(i % (size_t)c);
    } else {
        p = malloc((size_t)c * sizeof(double));
        count = calloc((size_t)c, sizeof(size_t));
        if (!p || !count)
            goto out;
        for (int k = 0; k < 10; k++) {
            double tot = 0;
            for (int j = 0; j < c; j++)
                tot += p[j] = gamma_draw(s, alpha);
            /* Walk the shuffled examples of class k, giving each client its share. */
            size_t cnt = 0;
            for (size_t i = 0; i < n; i++)
                cnt += y[idx[i]] == k;
            size_t seen = 0;
            double acc = 0;
            int j = 0;
            for (size_t i = 0; i < n; i++) {
                if (y[idx[i]] != k)
                    continue;
                while (j < c - 1 && (double)seen >= (acc + p[j]) / tot * (double)cnt)
                    acc += p[j++];
                owner[idx[i]] = j;
                seen++;
            }
        }
        /* Nobody left empty: take one example from the largest owner. */
        for (size_t i = 0; i < n; i++)
            count[owner[i]]++;
        for (int j = 0; j < c; j++) {
            if (count[j])
                continue;
            int big = 0;
            for (int b = 1; b < c; b++)
                big = count[b] > count[big] ? b : big;
            for (size_t i = 0; i < n; i++)
                if (owner[idx[i]] == big) {
                    owner[idx[i]] = j;
                    count[big]--;
                    count[j]++;
                    break;
                }
        }
    }
    ok = true;
out:
    free(count);
    free(p);
    free(idx);
    return ok;
}

/* ---- HTTP to the coordinator (admin API, model downloads, metrics) ---- */

struct buf {
    char *p;
    size_t len;
};

static size_t sink(char *p, size_t sz, size_t n, void *u) {
    struct buf *b = u;
    char *nb = realloc(b->p, b->len + sz * n + 1);
    if (!nb)
        return 0;
    memcpy(nb + b->len, p, sz * n);
    b->p = nb;
    b->len += sz * n;
    b->p[b->len] = 0;
    return sz * n;
}

static long http(const char *base, const char *method, const char *path, const char *token,
                 const char *ctype, const void *body, size_t len, struct buf *out) {
    CURL *e = curl_easy_init();
    if (!e)
        return -1;
    char url[1024], auth[300], ct[96];
    snprintf(url, sizeof(url), "%s%s", base, path);
    struct curl_slist *h = NULL;
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    if (ctype) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
        h = curl_slist_append(h, ct);
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
    long code = -1;
    if (curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return code;
}

/* ---- simulated devices ---- */

struct sim;

struct dev {
    int id;
    struct sim *sim;
    fl_client_store *store;
    fl_client_curl *curl;
    sim_ft *ft;
    fl_client *c;
    pthread_t th;
    bool slow;
    uint64_t rng;              /* dropout draws */
    int64_t dropped_round;     /* round it vanished in (counted once) */
};

struct tally {
    _Atomic int64_t rid;       /* round this slot describes */
    atomic_int selected, in_sum, dropped;
};

struct sim {
    struct opts o;
    char base[128];
    uint8_t pk[32];
    fl_coord *co;
    atomic_bool stop, tick_stop;
    pthread_t ticker;
    bool ticker_up;            /* the ticker thread runs (join it) */
    struct dev *devs;          /* o.clients entries once allocated, else NULL */
    int started;               /* device threads started: devs[0..started) */
    pthread_mutex_t train_lock; /* counting semaphore for training (one per core) */
    pthread_cond_t train_cv;
    int train_slots;
    struct tally tally[RING];
    uint8_t auth_vk[32];       /* --secagg-active: the device authority's key pair (the sim */
    uint8_t auth_sk[64];       /*   plays the authority; the secret is wiped at the end) */
    atomic_llong injected;     /* dropouts injected */
    _Atomic long long train_us, train_n; /* time spent in training steps */
};

static struct tally *tally_of(struct sim *s, int64_t rid) {
    struct tally *t = &s->tally[rid % RING];
    int64_t cur = atomic_load(&t->rid);
    if (cur != rid && atomic_compare_exchange_strong(&t->rid, &cur, rid)) {
        atomic_store(&t->selected, 0);
        atomic_store(&t->in_sum, 0);
        atomic_store(&t->dropped, 0);
    }
    return t;
}

static int64_t path_round(const char *path) {
    if (strncmp(path, "/v1/rounds/", 11) != 0)
        return 0;
    return strtoll(path + 11, NULL, 10);
}

/* Dropouts: before each phase post (secagg) or the plain upload, the device vanishes with
 * probability --dropout: no network until the round is surely over. Slow devices wait
 * --slow-ms before their masked input / update. */
static enum sim_ft_action decide(void *user, const fl_client_request *req, int64_t *delay,
                                 int64_t *offline) {
    struct dev *d = user;
    struct sim *s = d->sim;
    if (strcmp(req->method, "POST") != 0)
        return SIM_FT_PASS;
    bool phase = strstr(req->path, "/secagg/") || strstr(req->path, "/update");
    if (!phase)
        return SIM_FT_PASS;
    int64_t rid = path_round(req->path);
    bool upload = strstr(req->path, "/secagg/masked") || strstr(req->path, "/update");
    if (upload && d->slow)
        *delay = s->o.slow_ms;
    if (s->o.dropout > 0 && d->dropped_round != rid && unif(&d->rng) < s->o.dropout) {
        d->dropped_round = rid;
        /* Offline past the round's last deadline, so it is dropped, not late. */
        int64_t span = 1000LL * (3 * s->o.deadline_s + s->o.masked_s + s->o.forming_s + 5);
        *offline = real_ms() + span;
        atomic_fetch_add(&tally_of(s, rid)->dropped, 1);
        atomic_fetch_add(&s->injected, 1);
    }
    return SIM_FT_PASS;
}

static void observe(void *user, const fl_client_request *req, int status) {
    struct dev *d = user;
    int64_t rid = path_round(req->path);
    if (!rid)
        return;
    if (strcmp(req->method, "GET") == 0 && strstr(req->path, "/task") && status == 200)
        atomic_fetch_add(&tally_of(d->sim, rid)->selected, 1);
    if (strcmp(req->method, "POST") == 0 && status == 202 &&
        (strstr(req->path, "/secagg/masked") || strstr(req->path, "/update")))
        atomic_fetch_add(&tally_of(d->sim, rid)->in_sum, 1);
}

/* One device: steps its client and sleeps until the next action. After each round it took
 * part in, the device is away (unplugged, in use) for a random rest, so the next rounds
 * draw from the whole population rather than from the devices that just finished. */
static void *dev_main(void *arg) {
    struct dev *d = arg;
    struct sim *s = d->sim;
    uint64_t ended = 0;
    while (!atomic_load(&s->stop)) {
        fl_client_stats cs = {.struct_size = sizeof(cs)};
        fl_client_stats_get(d->c, &cs);
        if (cs.rounds_completed + cs.rounds_failed != ended) {
            ended = cs.rounds_completed + cs.rounds_failed;
            int64_t until = real_ms() + (int64_t)(unif(&d->rng) * s->o.rest_s * 1000);
            while (real_ms() < until && !atomic_load(&s->stop))
                sleep_ms(200);
        }
        bool train = cs.state == FL_CLIENT_STATE_TRAIN;
        if (train) {
            /* At most one training per core at a time (CPU-bound, BLAS). */
            pthread_mutex_lock(&s->train_lock);
            while (s->train_slots == 0)
                pthread_cond_wait(&s->train_cv, &s->train_lock);
            s->train_slots--;
            pthread_mutex_unlock(&s->train_lock);
        }
        int64_t next = 0;
        double t0 = train ? mono_s() : 0;
        fl_status rc = fl_client_step(d->c, &next);
        if (train) {
            atomic_fetch_add(&s->train_us, (long long)((mono_s() - t0) * 1e6));
            atomic_fetch_add(&s->train_n, 1);
            pthread_mutex_lock(&s->train_lock);
            s->train_slots++;
            pthread_cond_signal(&s->train_cv);
            pthread_mutex_unlock(&s->train_lock);
        }
        if (rc != FL_OK && rc != FL_ERR_AGAIN && rc != FL_ERR_CANCELLED) {
            if (s->o.verbose)
                fprintf(stderr, "device %d stopped: %s\n", d->id, fl_client_errmsg(d->c));
            break;
        }
        int64_t wait = next - real_ms();
        while (wait > 0 && !atomic_load(&s->stop)) {
            sleep_ms(wait < 200 ? wait : 200);
            wait = next - real_ms();
        }
    }
    return NULL;
}

static void dev_log(void *u, fl_log_level lv, const char *msg) {
    struct dev *d = u;
    if (d->sim->o.verbose > 0 && lv >= FL_LOG_WARN)
        fprintf(stderr, "  [device %d] %s\n", d->id, msg);
}

static void *tick_main(void *arg) {
    struct sim *s = arg;
    while (!atomic_load(&s->tick_stop)) {
        fl_coord_tick(s->co);
        sleep_ms(20);
    }
    return NULL;
}

static void coord_log(void *u, fl_log_level lv, const char *msg) {
    struct sim *s = u;
    static double t0;
    if (t0 == 0)
        t0 = mono_s();
    if (s->o.verbose || lv >= FL_LOG_ERROR)
        fprintf(stderr, "  %7.2f [coordinator] %s\n", mono_s() - t0, msg);
}

/* ---- monitoring ---- */

/* Epsilon of the population from /metrics, or -1. */
static double metrics_epsilon(const struct sim *s) {
    struct buf b = {0};
    double eps = -1;
    if (http(s->base, "GET", "/metrics", NULL, NULL, NULL, 0, &b) == 200 && b.p) {
        char key[160];
        snprintf(key, sizeof(key), "flotilla_privacy_epsilon_spent{population=\"%s\"} ",
                 s->o.population);
        const char *p = strstr(b.p, key);
        if (p)
            eps = strtod(p + strlen(key), NULL);
    }
    free(b.p);
    return eps;
}

/* Rounds the coordinator refused for the privacy budget, from /metrics, or -1. */
static long long metrics_budget_refusals(const struct sim *s) {
    struct buf b = {0};
    long long n = -1;
    static const char key[] = "\nflotilla_rounds_refused_budget_total ";
    if (http(s->base, "GET", "/metrics", NULL, NULL, NULL, 0, &b) == 200 && b.p) {
        const char *p = strstr(b.p, key);
        if (p)
            n = strtoll(p + strlen(key), NULL, 10);
    }
    free(b.p);
    return n;
}

/* Accuracy of model version v on the test set, or -1. */
static double evaluate(const struct sim *s, const char *token, int64_t v, const float *x,
                       const int32_t *y, size_t n) {
    char path[256];
    snprintf(path, sizeof(path), "/v1/models/%s/%lld", s->o.population, (long long)v);
    struct buf b = {0};
    double acc = -1;
    if (http(s->base, "GET", path, token, NULL, NULL, 0, &b) == 200) {
        fl_client_trainer *tr = NULL;
        if (fl_client_trainer_create(&tr, b.p, b.len, NULL) == FL_OK)
            fl_client_trainer_evaluate(tr, x, y, n, NULL, &acc);
        fl_client_trainer_destroy(tr);
    }
    free(b.p);
    return acc;
}

/* ---- main ---- */

static int parse_sizes(const char *spec, uint32_t *sizes, int cap) {
    int n = 0;
    const char *p = spec;
    while (*p && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1)
            return 0;
        sizes[n++] = (uint32_t)v;
        p = *end == '-' ? end + 1 : end;
        if (*end && *end != '-')
            return 0;
    }
    return n;
}

/* Stops and frees what the run started, in the order the shutdown needs: the devices are
 * told to stop, the ticker is joined, the coordinator stops (which answers the parked long
 * polls, so no device stays blocked), the device threads are joined, then the handles are
 * freed. Safe on a run built only in part (NULL handles, s->started threads) and when
 * called again. */
static void sim_shutdown(struct sim *s) {
    atomic_store(&s->stop, true);
    for (int i = 0; s->devs && i < s->o.clients; i++)
        fl_client_interrupt(s->devs[i].c);
    if (s->ticker_up) {
        atomic_store(&s->tick_stop, true);
        pthread_join(s->ticker, NULL);
        s->ticker_up = false;
    }
    fl_coord_stop(s->co);
    for (int i = 0; i < s->started; i++)
        pthread_join(s->devs[i].th, NULL);
    s->started = 0;
    fl_coord_destroy(s->co);
    s->co = NULL;
    for (int i = 0; s->devs && i < s->o.clients; i++) {
        fl_client_destroy(s->devs[i].c);
        sim_ft_destroy(s->devs[i].ft);
        fl_client_curl_destroy(s->devs[i].curl);
        fl_client_store_close(s->devs[i].store);
    }
    free(s->devs);
    s->devs = NULL;
}

/* Exit status: 0 the rounds ran (or the privacy budget stopped them); 1 a failure (the
 * coordinator, the population, a device, --min-accuracy not reached); 2 a bad command line
 * (also --model, --coordinator-key, --db); 77 (skip) Fashion-MNIST not found in --data.
 * Every exit after the command line is parsed leaves through `out`, which releases what
 * was built so far. */
int main(int argc, char **argv) {
    struct sim *s = calloc(1, sizeof(*s));
    if (!s || !parse_opts(&s->o, argc, argv)) {
        usage();
        free(s);
        return 2;
    }
    struct opts *o = &s->o;
    /* What `out` releases; set before the first jump there. */
    int rc = 1;
    bool curl_up = false, tmp_dir = false;
    float *xtr = NULL, *xte = NULL;
    int32_t *ytr = NULL, *yte = NULL;
    int *owner = NULL;
    uint8_t *model = NULL;
    char dir[] = "/tmp/flotilla-sim-XXXXXX", db[1024] = "";
    char path[1100]; /* admin API paths; also "<db>-journal" at the end */
    struct buf b = {0};
    json_t *doc = NULL;
    pthread_mutex_init(&s->train_lock, NULL);
    pthread_cond_init(&s->train_cv, NULL);
    /* OpenBLAS threads would fight the device threads: one BLAS thread each. The program
     * is re-run by the path /proc/self/exe names, not by that link itself: under a loader
     * such as Valgrind the link is the tool, which cannot load itself ("mmap(0x58000000)
     * failed in UME"), while readlink gives this program's path. If the exec fails, the
     * run goes on with OpenBLAS's default threads. */
    if (!getenv("OPENBLAS_NUM_THREADS")) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        if (n > 0) {
            self[n] = '\0';
            execv(self, argv);
        }
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if ((rlim_t)o->clients * 2 + 64 > rl.rlim_cur)
        fprintf(stderr, "warning: %llu file descriptors may be too few for %d clients\n",
                (unsigned long long)rl.rlim_cur, o->clients);
    if (sodium_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "libsodium or libcurl failed to initialise\n");
        goto out;
    }
    curl_up = true;
    double t_start = mono_s();

    /* Data. */
    bool oom = false;
    size_t ntr = load_idx(o->data, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                          &xtr, &ytr, &oom);
    size_t nte = oom ? 0 : load_idx(o->data, "t10k-images-idx3-ubyte.gz",
                                    "t10k-labels-idx1-ubyte.gz", &xte, &yte, &oom);
    if (oom)
        goto out;
    if (!ntr || !nte) {
        fprintf(stderr, "Fashion-MNIST not found in %s (set --data)\n", o->data);
        rc = EXIT_SKIP;
        goto out;
    }
    uint64_t rs = o->seed * 0x2545f4914f6cdd1dull + 7;
    if (o->train_n > 0 && (size_t)o->train_n < ntr) {
        /* A random subsample (partial Fisher-Yates on rows). */
        for (size_t i = 0; i < (size_t)o->train_n; i++) {
            size_t j = i + (size_t)(rnd(&rs) % (ntr - i));
            for (size_t k = 0; k < 784; k++) {
                float t = xtr[i * 784 + k];
                xtr[i * 784 + k] = xtr[j * 784 + k];
                xtr[j * 784 + k] = t;
            }
            int32_t t = ytr[i];
            ytr[i] = ytr[j];
            ytr[j] = t;
        }
        ntr = (size_t)o->train_n;
    }
    if (o->test_n > 0 && (size_t)o->test_n < nte)
        nte = (size_t)o->test_n;
    owner = malloc(ntr * sizeof(int));
    if (!owner || !partition(owner, ytr, ntr, o->clients, o->alpha, &rs)) {
        fprintf(stderr, "out of memory partitioning the training set\n");
        goto out;
    }

    /* Model. */
    uint32_t sizes[FL_CLIENT_MAX_LAYERS + 1];
    int ns = parse_sizes(o->model, sizes, FL_CLIENT_MAX_LAYERS + 1);
    size_t mlen = 0;
    if (ns < 2 || sizes[0] != 784 || sizes[ns - 1] != 10) {
        fprintf(stderr, "--model must be 784-...-10\n");
        rc = 2;
        goto out;
    }
    fl_client_model_init(NULL, 0, &mlen, sizes, (size_t)ns, o->seed, NULL);
    model = malloc(mlen);
    if (!model || fl_client_model_init(model, mlen, &mlen, sizes, (size_t)ns, o->seed, NULL)) {
        fprintf(stderr, "could not build the initial model %s\n", o->model);
        goto out;
    }

    /* Coordinator. */
    if (o->url) {
        snprintf(s->base, sizeof(s->base), "%s", o->url);
        if (strlen(o->key_hex) != 64 || sodium_hex2bin(s->pk, 32, o->key_hex, 64, NULL, NULL,
                                                       NULL) != 0) {
            fprintf(stderr, "--coordinator-key: 64 hex characters\n");
            rc = 2;
            goto out;
        }
    } else {
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            goto out;
        }
        if (o->db) {
            rmdir(dir);
            if (access(o->db, F_OK) == 0) {
                fprintf(stderr, "--db %s exists: give a new path\n", o->db);
                rc = 2;
                goto out;
            }
            snprintf(db, sizeof(db), "%s", o->db);
        } else {
            tmp_dir = true;
            snprintf(db, sizeof(db), "%s/coord.db", dir);
        }
        fl_coord_config cc;
        fl_coord_config_init(&cc);
        cc.port = 0;
        cc.threads = (unsigned)o->coord_threads;
        cc.db_path = db;
        cc.has_admin_token = 1;
        crypto_hash_sha256(cc.admin_token_sha256, (const uint8_t *)o->admin_token,
                           strlen(o->admin_token));
        cc.logger.fn = coord_log;
        cc.logger.user = s;
        cc.logger.min_level = o->verbose ? FL_LOG_DEBUG : FL_LOG_INFO;
        /* Every device connects from 127.0.0.1 and keeps its connection alive. */
        cc.limits.per_ip_connections = 0;
        cc.limits.max_connections = (unsigned)o->clients * 2 + 256;
        cc.limits.connection_timeout_s = 300;
        cc.max_long_poll_s = 30;
        char err[256];
        if (fl_coord_create(&s->co, &cc, err, sizeof(err)) != FL_OK ||
            fl_coord_start(s->co) != FL_OK) {
            fprintf(stderr, "coordinator: %s\n", s->co ? fl_coord_errmsg(s->co) : err);
            goto out;
        }
        char kid[FL_COORD_KEY_ID_BYTES];
        fl_coord_public_key(s->co, s->pk, kid);
        snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%u", fl_coord_port(s->co));
        if (pthread_create(&s->ticker, NULL, tick_main, s) != 0) {
            fprintf(stderr, "could not start the coordinator's ticker thread\n");
            goto out;
        }
        s->ticker_up = true;
    }

    /* --secagg-active: the device authority's key pair, made here as an offline authority
     * would; the population is told the verification key, the devices pin it. */
    char active[256] = "", consistency_dl[48] = "";
    if (o->secagg_active) {
        if (fl_secagg_signing_keygen(s->auth_vk, s->auth_sk, FL_SECAGG_BACKEND_DEFAULT) !=
            FL_OK) {
            fprintf(stderr, "could not make the device authority's key\n");
            goto out;
        }
        char vkhex[65];
        sodium_bin2hex(vkhex, sizeof(vkhex), s->auth_vk, sizeof(s->auth_vk));
        snprintf(active, sizeof(active), ",\"consistency_check\":true,\"authority_key\":\"%s\"",
                 vkhex);
        snprintf(consistency_dl, sizeof(consistency_dl), ",\"consistency\":%d", o->deadline_s);
    }

    /* Population through the admin API. */
    char priv[512] = "";
    if (strcmp(o->dp, "none") != 0)
        snprintf(priv, sizeof(priv),
                 ",\"noise_multiplier\":%g,\"epsilon_budget\":%g,\"delta\":%g,"
                 "\"population_size\":%d", o->noise, o->epsilon, o->delta, o->clients);
    int minp = (int)ceil(o->per_round * 0.8);
    char mom[64] = "";
    if (strcmp(o->strategy, "fedavgm") == 0)
        snprintf(mom, sizeof(mom), ",\"momentum\":%g", o->momentum);
    /* A device vanishes before each of its (up to) four posts with probability --dropout:
     * the population's expected dropout rate over a round sizes the secagg graph. */
    char drop[48] = "";
    if (o->dropout > 0) {
        double lost = 1.0 - pow(1.0 - o->dropout, 4);
        snprintf(drop, sizeof(drop), ",\"dropout_rate\":%.4f", lost < 0.5 ? lost : 0.5);
    }
    char grace[48] = "";
    if (o->target_grace_s >= 0)
        snprintf(grace, sizeof(grace), ",\"target_grace_s\":%d", o->target_grace_s);
    char pop[4096];
    snprintf(pop, sizeof(pop),
             "{\"name\":\"%s\",\"allowed_regions\":[\"*\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":%g,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":%d,\"jitter_s\":1,\"min_retry_s\":1,"
             "\"max_retry_s\":%d%s},"
             "\"deadlines_s\":{\"advertise\":%d,\"share\":%d,\"masked\":%d,\"unmask\":%d%s},"
             "\"training\":{\"epochs\":%d,\"batch_size\":%d,\"learning_rate\":%g,"
             "\"max_examples\":100000},"
             "\"update\":{\"weighting\":\"%s\"},"
             "\"strategy\":{\"name\":\"%s\",\"server_lr\":%g%s},"
             "\"secagg\":{\"enabled\":%s%s%s%s},"
             "\"privacy\":{\"mode\":\"%s\",\"clip_norm\":%g%s}}",
             o->population, o->per_round, o->over_selection, minp, o->forming_s,
             o->max_retry_s, grace, o->deadline_s,
             o->deadline_s, o->masked_s, o->deadline_s, consistency_dl, o->epochs, o->batch,
             o->lr, o->weighting, o->strategy,
             o->server_lr, mom,
             o->secagg ? "true" : "false", active,
             o->secagg_reveal ? ",\"reveal_pair_seeds\":true" : "", drop, o->dp, o->clip,
             priv);
    long code = http(s->base, "POST", "/v1/admin/populations", o->admin_token,
                     "application/json", pop, strlen(pop), &b);
    doc = code == 201 ? json_loads(b.p, 0, NULL) : NULL;
    const char *et = doc ? json_string_value(json_object_get(doc, "enrollment_token")) : NULL;
    if (!et) {
        fprintf(stderr, "creating the population failed: %ld %s\n", code, b.p ? b.p : "");
        goto out;
    }
    char etok[256];
    snprintf(etok, sizeof(etok), "%s", et);
    json_decref(doc);
    doc = NULL;
    free(b.p);
    b = (struct buf){0};
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/models", o->population);
    if (http(s->base, "POST", path, o->admin_token, "application/octet-stream", model, mlen,
             &b) != 201) {
        fprintf(stderr, "model upload failed: %s\n", b.p ? b.p : "");
        goto out;
    }
    free(b.p);
    b = (struct buf){0};
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/start", o->population);
    http(s->base, "POST", path, o->admin_token, "application/json", NULL, 0, &b);
    free(b.p);
    b = (struct buf){0};

    /* Devices. */
    s->devs = calloc((size_t)o->clients, sizeof(struct dev));
    if (!s->devs) {
        fprintf(stderr, "out of memory for %d devices\n", o->clients);
        goto out;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->train_slots = cores > 0 ? (int)cores : 1;
    size_t max_ex = 0;
    for (int i = 0; i < o->clients; i++) {
        struct dev *d = &s->devs[i];
        d->id = i;
        d->sim = s;
        d->rng = o->seed * 1000003ull + (uint64_t)i;
        d->slow = unif(&d->rng) < o->slow;
        fl_client_store_config sc;
        fl_client_store_config_init(&sc);
        sc.path = ":memory:";
        sc.feature_dim = 784;
        if (fl_client_store_open(&d->store, &sc, NULL, 0) != FL_OK) {
            fprintf(stderr, "device %d: could not open its example store\n", i);
            goto out;
        }
        size_t cnt = 0;
        for (size_t k = 0; k < ntr; k++)
            if (owner[k] == i) {
                fl_client_store_add(d->store, xtr + k * 784, 784, ytr[k]);
                cnt++;
            }
        max_ex = cnt > max_ex ? cnt : max_ex;
        fl_client_curl_config tc;
        fl_client_curl_config_init(&tc);
        tc.base_url = s->base;
        char err[256];
        fl_client_transport inner, outer;
        if (fl_client_curl_create(&d->curl, &tc, err, sizeof(err)) != FL_OK) {
            fprintf(stderr, "transport: %s\n", err);
            goto out;
        }
        fl_client_curl_transport(d->curl, &inner);
        if (sim_ft_create(&d->ft, &inner, NULL, NULL) != FL_OK) {
            fprintf(stderr, "device %d: out of memory for its fault transport\n", i);
            goto out;
        }
        sim_ft_set_decide(d->ft, decide, d);
        sim_ft_set_observe(d->ft, observe, d);
        sim_ft_transport(d->ft, &outer);
        fl_client_config cfg;
        fl_client_config_init(&cfg);
        cfg.logger.fn = dev_log;
        cfg.logger.user = d;
        cfg.logger.min_level = FL_LOG_WARN;
        cfg.population = o->population;
        cfg.region = "EU";
        memcpy(cfg.coordinator_key, s->pk, 32);
        cfg.has_coordinator_key = 1;
        cfg.enrollment_token = etok;
        cfg.transport = outer;
        cfg.store = d->store;
        cfg.seed = o->seed * 7919u + (uint64_t)i + 1;
        cfg.backoff_initial_ms = 500;
        cfg.backoff_max_ms = 10000;
        cfg.long_poll_s = 25;
        cfg.request_timeout_ms = 60000;
        cfg.momentum = o->local_momentum;
        fl_status irc = FL_OK;
        if (o->secagg_active) {
            /* The device's identity: its own key pair, a device id, and the authority's
             * certificate over both (issued once per device, as a provisioning step). */
            uint8_t vk[32];
            cfg.has_secagg_identity = 1;
            snprintf((char *)cfg.secagg_device_id, sizeof(cfg.secagg_device_id),
                     "flotilla-sim device %d", i);
            irc = fl_client_identity_keygen(vk, cfg.secagg_signing_key);
            if (irc == FL_OK)
                irc = fl_secagg_cert_issue_device(cfg.secagg_cert, s->auth_sk,
                                                  cfg.secagg_device_id, vk,
                                                  FL_SECAGG_BACKEND_DEFAULT);
            memcpy(cfg.secagg_authority_key, s->auth_vk, sizeof(cfg.secagg_authority_key));
        }
        if (irc != FL_OK) {
            fl_memzero(cfg.secagg_signing_key, sizeof(cfg.secagg_signing_key));
            fprintf(stderr, "device %d: could not make its identity: %s\n", i,
                    fl_client_status_name(irc));
            goto out;
        }
        irc = fl_client_create(&d->c, &cfg, err, sizeof(err));
        fl_memzero(cfg.secagg_signing_key, sizeof(cfg.secagg_signing_key)); /* copied */
        if (irc != FL_OK) {
            fprintf(stderr, "client: %s\n", err);
            goto out;
        }
        fl_client_eligibility e = {sizeof(e), 1, 1, 1, 90};
        fl_client_set_eligibility(d->c, &e);
    }
    free(owner);
    free(xtr);
    free(ytr);
    owner = NULL;
    xtr = NULL;
    ytr = NULL;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    for (; s->started < o->clients; s->started++)
        if (pthread_create(&s->devs[s->started].th, &attr, dev_main, &s->devs[s->started]) != 0)
            break;
    pthread_attr_destroy(&attr);
    if (s->started < o->clients) {
        fprintf(stderr, "could not start device thread %d\n", s->started);
        goto out;
    }
    printf("flotilla-sim: %d clients (largest partition %zu examples, %s), %d per round, "
           "model %s, secagg %s, dp %s; coordinator %s\n",
           o->clients, max_ex, o->alpha > 0 ? "Dirichlet" : "IID", o->per_round, o->model,
           o->secagg_active ? "active" : o->secagg ? "on" : "off", o->dp, s->base);
    fflush(stdout);

    /* Watch rounds. */
    int completed = 0, abandoned = 0;
    int64_t last_reported = 0;
    double acc = -1, eps = -1, t_rounds = mono_s();
    char token[FL_CLIENT_TOKEN_MAX_CHARS + 1] = "";
    bool budget_out = false; /* the accountant refused a round: no further round will run */
    while (completed < o->rounds && mono_s() - t_start < o->timeout_s) {
        sleep_ms(250);
        /* Checked before the round list, so the rounds that ended first are reported. */
        bool refused = strcmp(o->dp, "none") != 0 && metrics_budget_refusals(s) > 0;
        if (!token[0])
            for (int i = 0; i < o->clients && !token[0]; i++)
                if (fl_client_token(s->devs[i].c, token, sizeof(token)) != FL_OK)
                    token[0] = 0;
        snprintf(path, sizeof(path), "/v1/admin/populations/%s/rounds?limit=50", o->population);
        b = (struct buf){0};
        if (http(s->base, "GET", path, o->admin_token, NULL, NULL, 0, &b) != 200) {
            free(b.p);
            b = (struct buf){0};
            continue;
        }
        doc = json_loads(b.p, 0, NULL);
        free(b.p);
        b = (struct buf){0};
        json_t *rounds = json_object_get(doc, "rounds");
        /* Newest first: report ended rounds in ascending order. */
        for (size_t k = json_array_size(rounds); k-- > 0 && completed < o->rounds;) {
            json_t *r = json_array_get(rounds, k);
            int64_t rid = json_integer_value(json_object_get(r, "round_id"));
            const char *st = json_string_value(json_object_get(r, "state"));
            if (rid <= last_reported || !st)
                continue;
            bool done = strcmp(st, "completed") == 0, aband = strcmp(st, "abandoned") == 0;
            if (!done && !aband)
                break; /* later rounds cannot have ended before this one */
            last_reported = rid;
            struct tally *t = tally_of(s, rid);
            if (aband) {
                abandoned++;
                printf("round %lld abandoned: %s\n", (long long)rid,
                       json_string_value(json_object_get(r, "reason")));
                fflush(stdout);
                continue;
            }
            completed++;
            int64_t v = json_integer_value(json_object_get(r, "new_model_version"));
            acc = token[0] ? evaluate(s, token, v, xte, yte, nte) : -1;
            eps = strcmp(o->dp, "none") != 0 ? metrics_epsilon(s) : 0;
            printf("round %3d (id %lld): participants %3d of %3d selected, dropouts %3d, "
                   "test accuracy %.4f, epsilon %.3f, %.1f s\n",
                   completed, (long long)rid, atomic_load(&t->in_sum),
                   (int)json_integer_value(json_object_get(r, "selected")),
                   atomic_load(&t->dropped), acc, eps, mono_s() - t_start);
            fflush(stdout);
        }
        json_decref(doc);
        doc = NULL;
        if (refused && completed < o->rounds) {
            budget_out = true;
            printf("privacy budget exhausted: the coordinator refused the next round "
                   "(epsilon %.3f of %g); stopping after %d rounds\n", eps, o->epsilon,
                   completed);
            break;
        }
    }
    double wall = mono_s() - t_start;

    /* Shut down. */
    double rounds_s = mono_s() - t_rounds;
    sim_shutdown(s); /* before the audit export: the coordinator's database is closed */
    /* Audit: the log the coordinator appended to its database, exported as a bundle. */
    int64_t audit_entries = -1;
    const char *audit_state = "none";
    if (db[0] && o->audit_bundle) {
        fl_store *st = NULL;
        fl_store_config stc;
        fl_store_config_init(&stc);
        stc.create_if_missing = 0;
        unlink(o->audit_bundle);
        if (fl_store_open(&st, db, &stc) != FL_OK ||
            fl_store_audit_size(st, &audit_entries) != FL_OK) {
            fprintf(stderr, "audit: cannot read %s: %s\n", db, fl_store_errmsg(st));
            audit_state = "error";
        } else if (audit_entries == 0) {
            audit_state = "no_entries";
            printf("audit: the coordinator appended no audit entries to %s (not integrated "
                   "yet); no bundle written\n", o->db ? db : "its database");
        } else {
            fl_status arc = fl_store_audit_export_file(st, o->audit_bundle);
            if (arc == FL_OK) {
                audit_state = "exported";
                printf("audit: %lld entries; bundle written to %s\n", (long long)audit_entries,
                       o->audit_bundle);
            } else if (arc == FL_ERR_NOT_FOUND) {
                audit_state = "no_checkpoint";
                printf("audit: %lld entries but no signed checkpoint; no bundle written\n",
                       (long long)audit_entries);
            } else {
                audit_state = "error";
                fprintf(stderr, "audit: export failed: %s\n", fl_store_errmsg(st));
            }
        }
        fl_store_close(st);
    }
    if (o->verbose && atomic_load(&s->train_n))
        printf("local training: %lld steps, %.1f ms each\n", atomic_load(&s->train_n),
               (double)atomic_load(&s->train_us) / 1e3 / (double)atomic_load(&s->train_n));
    printf("done: %d rounds completed, %d abandoned, final accuracy %.4f, epsilon %.3f "
           "(delta %g), %lld dropouts injected, wall %.1f s (rounds %.1f s)\n",
           completed, abandoned, acc, eps, strcmp(o->dp, "none") ? o->delta : 0.0,
           (long long)atomic_load(&s->injected), wall, rounds_s);
    if (o->summary) {
        FILE *f = fopen(o->summary, "w");
        if (f) {
            fprintf(f,
                    "{\"rounds\":%d,\"rounds_abandoned\":%d,\"clients\":%d,\"per_round\":%d,"
                    "\"alpha\":%g,\"secagg\":%s,\"secagg_active\":%s,\"dp\":\"%s\","
                    "\"noise_multiplier\":%g,"
                    "\"final_accuracy\":%.6f,\"epsilon\":%.6f,\"delta\":%g,"
                    "\"dropouts_injected\":%lld,\"wall_time_s\":%.3f,"
                    "\"strategy\":\"%s\",\"budget_exhausted\":%s,\"audit_entries\":%lld,"
                    "\"audit\":\"%s\"}\n",
                    completed, abandoned, o->clients, o->per_round, o->alpha,
                    o->secagg ? "true" : "false", o->secagg_active ? "true" : "false", o->dp,
                    o->noise, acc, eps,
                    strcmp(o->dp, "none") ? o->delta : 0.0, (long long)atomic_load(&s->injected),
                    wall, o->strategy, budget_out ? "true" : "false", (long long)audit_entries,
                    audit_state);
            fclose(f);
        }
    }
    /* Stopping at the privacy budget is the accountant doing its job, not a failure. */
    rc = completed >= o->rounds || budget_out ? 0 : 1;
    if (o->min_accuracy > 0 && !(acc >= o->min_accuracy)) {
        fprintf(stderr, "final accuracy %.4f is below --min-accuracy %.4f\n", acc,
                o->min_accuracy);
        rc = 1;
    }

out:
    sim_shutdown(s);
    if (tmp_dir) {
        /* The temporary database (not a --db one, which is kept). */
        static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
        for (int i = 0; i < 4; i++) {
            snprintf(path, sizeof(path), "%s%s", db, tails[i]);
            unlink(path);
        }
        rmdir(dir);
    }
    json_decref(doc);
    free(b.p);
    free(model);
    free(owner);
    free(xtr);
    free(ytr);
    free(xte);
    free(yte);
    pthread_cond_destroy(&s->train_cv);
    pthread_mutex_destroy(&s->train_lock);
    if (curl_up)
        curl_global_cleanup();
    fl_memzero(s->auth_sk, sizeof(s->auth_sk));
    free(s);
    return rc;
}
