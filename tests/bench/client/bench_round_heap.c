/* Peak heap of the client SDK during a whole federated round, for models of d parameters.
 *
 * The real coordinator runs in-process on 127.0.0.1 (fl_coordinator_static, plain HTTP) and
 * the devices use the SDK's public API over its libcurl transport. Each device gets its own
 * counting fl_allocator, passed to its store, its transport and its client, so the count is
 * every byte the SDK itself allocates for that device (SQLite's and libcurl's internal
 * allocations go through their own process-wide allocators and are not in it). A round is:
 * enrollment, check-in, signed task and model download, local training, the update pipeline
 * (delta, clip, quantize, modular reduction; with --secagg the secagg phases and masks), the
 * upload and the outcome. Reported per d: the model's F32 size 4d, the peak live bytes of
 * device 0 (and the largest over the devices), the target 4 x 4d + 1 MiB, and the ratio.
 *
 * The model is an MLP 784-H-10 (the Fashion-MNIST shape) with H chosen so that
 * d = 795 H + 10 is closest to the asked d; each device holds 64 examples.
 * Both clocks are faked (the coordinator's and the devices'), so pace steering and deadlines
 * cost no wall time.
 *
 * usage: bench_round_heap [--d N]... [--secagg N] [--privacy none|central|distributed] [--json]
 * (distributed DP runs with secure aggregation only, so it needs --secagg)
 * (default: --d 10000 --d 100000 --d 1000000, plain uploads, central DP). An executable:
 * exits on setup failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "flotilla/client.h"
#include "flotilla/coordinator.h"

#define BENCH_NAME "bench_round_heap"
#include "bench_util.h"

#define ADMIN "fla_bench-round-heap-admin-token-0123456789"
#define IN 784
#define CLASSES 10
#define EXAMPLES 64
#define MAX_DEVICES 16

/* ---- fake clock shared by the coordinator and the devices ---- */

static int64_t g_now = 1767225600000;
static int64_t clock_fn(void *u) {
    (void)u;
    return g_now;
}

/* ---- counting allocator ----
 * Every block carries a header with its size and list links, so live bytes are exact without
 * trusting the size the SDK passes to free (which is also checked), and the blocks live at
 * the peak can be listed (the big ones explain the peak). */
#define SNAP_MAX 24
#define SNAP_MIN_BYTES 32768

struct block {
    size_t size;              /* bytes asked */
    struct block *prev, *next; /* live list */
    size_t pad;               /* keeps the payload 16-byte aligned */
};

struct counter {
    size_t live;                 /* bytes allocated now */
    size_t peak;                 /* most bytes allocated at once */
    size_t calls;                /* allocations */
    size_t bad_frees;            /* frees whose size differs from the allocation's */
    struct block head;           /* live list sentinel */
    size_t snap[SNAP_MAX];       /* sizes of the big blocks live at the peak, largest first */
    size_t n_snap;
};

static void counter_init(struct counter *c) {
    memset(c, 0, sizeof(*c));
    c->head.prev = c->head.next = &c->head;
}

static void snapshot(struct counter *c) {
    c->n_snap = 0;
    for (struct block *b = c->head.next; b != &c->head; b = b->next) {
        if (b->size < SNAP_MIN_BYTES)
            continue;
        size_t i;
        if (c->n_snap < SNAP_MAX)
            i = c->n_snap++;
        else if (c->snap[SNAP_MAX - 1] >= b->size)
            continue;
        else
            i = SNAP_MAX - 1;
        c->snap[i] = b->size;
        for (; i > 0 && c->snap[i - 1] < c->snap[i]; i--) {
            size_t t = c->snap[i - 1];
            c->snap[i - 1] = c->snap[i];
            c->snap[i] = t;
        }
    }
}

static void link_block(struct counter *c, struct block *b, size_t size) {
    b->size = size;
    b->next = c->head.next;
    b->prev = &c->head;
    c->head.next->prev = b;
    c->head.next = b;
    c->live += size;
    if (c->live > c->peak) {
        /* Snapshots only on peaks that grow by 1/64: cheap, and exact enough to explain. */
        if (c->live > c->peak + c->peak / 64)
            snapshot(c);
        c->peak = c->live;
    }
}

static void unlink_block(struct counter *c, struct block *b) {
    b->prev->next = b->next;
    b->next->prev = b->prev;
    c->live -= b->size;
}

static void *c_alloc(void *user, size_t size) {
    struct counter *c = user;
    struct block *b = malloc(sizeof(*b) + size);
    if (!b)
        return NULL;
    c->calls++;
    link_block(c, b, size);
    return b + 1;
}

static void c_free(void *user, void *ptr, size_t size) {
    struct counter *c = user;
    if (!ptr)
        return;
    struct block *b = (struct block *)ptr - 1;
    if (b->size != size)
        c->bad_frees++;
    unlink_block(c, b);
    free(b);
}

static void *c_realloc(void *user, void *ptr, size_t old_size, size_t new_size) {
    struct counter *c = user;
    if (!ptr)
        return c_alloc(user, new_size);
    struct block *b = (struct block *)ptr - 1;
    if (b->size != old_size)
        c->bad_frees++;
    unlink_block(c, b);
    struct block *nb = realloc(b, sizeof(*b) + new_size);
    if (!nb) {
        link_block(c, b, old_size);
        return NULL;
    }
    link_block(c, nb, new_size);
    return nb + 1;
}

/* ---- admin API over libcurl ---- */

struct buf {
    char *b;
    size_t len, cap;
};

static size_t sink(char *p, size_t sz, size_t n, void *u) {
    struct buf *r = u;
    size_t k = sz * n;
    if (r->len + k + 1 > r->cap) {
        r->cap = (r->len + k + 1) * 2;
        r->b = realloc(r->b, r->cap);
        if (!r->b)
            bench_die("out of memory", NULL);
    }
    memcpy(r->b + r->len, p, k);
    r->len += k;
    r->b[r->len] = 0;
    return k;
}

static long admin(unsigned port, const char *path, const char *ctype, const void *body,
                  size_t len, struct buf *out) {
    CURL *e = curl_easy_init();
    char url[256], auth[128], ct[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", ADMIN);
    snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, ct);
    out->len = 0;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    if (curl_easy_perform(e) != CURLE_OK)
        bench_die("admin request failed", path);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return code;
}

/* ---- one measurement ---- */

struct device {
    struct counter cnt;
    fl_allocator alloc;
    fl_client_store *store;
    fl_client_curl *curl;
    fl_client *c;
    size_t live_before; /* live bytes once created, before the first step */
};

struct result {
    size_t d;              /* parameters */
    uint32_t hidden;       /* H of 784-H-10 */
    size_t snap[SNAP_MAX]; /* big blocks live at device 0's peak */
    size_t n_snap;
    size_t peak0;          /* device 0 peak live bytes */
    size_t peak_max;       /* largest peak over the devices */
    size_t before0;        /* device 0 live bytes after creation */
    size_t model_bytes;    /* safetensors image size */
    uint64_t completed;    /* devices whose round completed */
    uint64_t leaked;       /* bytes still live after destroy (all devices) */
    size_t bad_frees;      /* frees with a wrong size (all devices) */
    double seconds;        /* wall time of the round */
};

static void measure(size_t d_want, int n_dev, const char *privacy, struct result *res) {
    uint32_t hidden = (uint32_t)(((double)d_want - 10) / 795.0 + 0.5);
    if (hidden < 1)
        hidden = 1;
    memset(res, 0, sizeof(*res));
    res->hidden = hidden;
    res->d = (size_t)IN * hidden + hidden + (size_t)hidden * CLASSES + CLASSES;

    char dir[] = "/tmp/fl-bench-heap-XXXXXX", db[128];
    if (!mkdtemp(dir))
        bench_die("mkdtemp failed", NULL);
    snprintf(db, sizeof(db), "%s/coord.db", dir);
    fl_coord_config cc;
    fl_coord_config_init(&cc);
    cc.port = 0;
    cc.threads = 2;
    cc.db_path = db;
    cc.has_admin_token = 1;
    crypto_hash_sha256(cc.admin_token_sha256, (const uint8_t *)ADMIN, strlen(ADMIN));
    cc.clock = clock_fn;
    fl_coord *co = NULL;
    char err[256];
    if (fl_coord_create(&co, &cc, err, sizeof(err)) != FL_OK || fl_coord_start(co) != FL_OK)
        bench_die("coordinator start failed", err);
    unsigned port = fl_coord_port(co);
    uint8_t pk[32];
    char kid[17];
    fl_coord_public_key(co, pk, kid);

    struct buf out = {0};
    char pop[2048], priv[256];
    if (!strcmp(privacy, "central"))
        snprintf(priv, sizeof(priv),
                 "{\"mode\":\"central\",\"clip_norm\":1.0,\"modulus_bits\":32,"
                 "\"noise_multiplier\":1.0,\"delta\":1e-5,\"population_size\":1000,"
                 "\"epsilon_budget\":1e6}");
    else if (!strcmp(privacy, "distributed"))
        snprintf(priv, sizeof(priv),
                 "{\"mode\":\"distributed\",\"clip_norm\":1.0,\"noise_multiplier\":1.0,"
                 "\"delta\":1e-5,\"population_size\":1000,\"epsilon_budget\":1e6}");
    else
        snprintf(priv, sizeof(priv), "{\"mode\":\"none\"}");
    snprintf(pop, sizeof(pop),
             "{\"name\":\"heap\",\"allowed_regions\":[\"EU\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"forming_s\":60,\"jitter_s\":0,\"min_retry_s\":30,\"max_retry_s\":600},"
             "\"deadlines_s\":{\"advertise\":60,\"share\":60,\"masked\":120,\"unmask\":60},"
             "\"training\":{\"epochs\":1,\"batch_size\":16,\"learning_rate\":0.01},"
             "\"update\":{\"tensors\":[\"fc1.weight\",\"fc1.bias\",\"fc2.weight\","
             "\"fc2.bias\"]},\"strategy\":{\"name\":\"fedavg\"},"
             "\"secagg\":%s,\"privacy\":%s}",
             n_dev, n_dev,
             n_dev > 1 ? "{\"enabled\":true,\"threshold_fraction\":0.5}" : "{\"enabled\":false}",
             priv);
    long code = admin(port, "/v1/admin/populations", "application/json", pop, strlen(pop), &out);
    if (code != 201)
        bench_die("create population", out.b);
    char etok[128] = "";
    const char *et = strstr(out.b, "\"enrollment_token\":\"");
    if (!et || sscanf(et + 20, "%127[^\"]", etok) != 1)
        bench_die("no enrollment token", out.b);
    uint32_t sizes[3] = {IN, hidden, CLASSES};
    size_t mlen = 0;
    fl_client_model_init(NULL, 0, &mlen, sizes, 3, 1, NULL);
    uint8_t *model = malloc(mlen);
    if (!model || fl_client_model_init(model, mlen, &mlen, sizes, 3, 1, NULL) != FL_OK)
        bench_die("model_init", NULL);
    res->model_bytes = mlen;
    if (admin(port, "/v1/admin/populations/heap/models", "application/octet-stream", model, mlen,
              &out) != 201)
        bench_die("upload model", out.b);
    if (admin(port, "/v1/admin/populations/heap/start", "application/json", NULL, 0, &out) != 200)
        bench_die("start population", out.b);
    free(model);

    struct device dev[MAX_DEVICES];
    memset(dev, 0, sizeof(dev));
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%u", port);
    for (int k = 0; k < n_dev; k++) {
        struct device *v = &dev[k];
        counter_init(&v->cnt);
        v->alloc = (fl_allocator){sizeof(fl_allocator), c_alloc, c_realloc, c_free, &v->cnt};
        fl_client_store_config sc;
        fl_client_store_config_init(&sc);
        sc.allocator = &v->alloc;
        sc.path = ":memory:";
        sc.feature_dim = IN;
        sc.clock = clock_fn;
        if (fl_client_store_open(&v->store, &sc, err, sizeof(err)) != FL_OK)
            bench_die("store open", err);
        uint64_t s = (uint64_t)k * 7919 + 1;
        for (int i = 0; i < EXAMPLES; i++) {
            float x[IN];
            for (int j = 0; j < IN; j++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                x[j] = (float)(s >> 40) / 16777216.0f;
            }
            if (fl_client_store_add(v->store, x, IN, i % CLASSES) != FL_OK)
                bench_die("store add", fl_client_store_errmsg(v->store));
        }
        fl_client_curl_config tc;
        fl_client_curl_config_init(&tc);
        tc.allocator = &v->alloc;
        tc.base_url = base;
        if (fl_client_curl_create(&v->curl, &tc, err, sizeof(err)) != FL_OK)
            bench_die("curl transport", err);
        fl_client_config cfg;
        fl_client_config_init(&cfg);
        cfg.allocator = &v->alloc;
        cfg.population = "heap";
        cfg.region = "EU";
        memcpy(cfg.coordinator_key, pk, 32);
        cfg.has_coordinator_key = 1;
        cfg.enrollment_token = etok;
        if (fl_client_curl_transport(v->curl, &cfg.transport) != FL_OK)
            bench_die("curl vtable", NULL);
        cfg.store = v->store;
        cfg.clock = clock_fn;
        cfg.seed = (uint64_t)k + 1;
        cfg.long_poll_s = 0; /* one thread steps every device: never park on a long poll */
        cfg.backoff_initial_ms = 100;
        cfg.backoff_max_ms = 2000;
        if (fl_client_create(&v->c, &cfg, err, sizeof(err)) != FL_OK)
            bench_die("client create", err);
        fl_client_eligibility e = {sizeof(e), 1, 1, 1, 90};
        fl_client_set_eligibility(v->c, &e);
        v->live_before = v->cnt.live;
    }

    double t0 = bench_wall_s();
    for (int it = 0; it < 4000; it++) {
        int done = 0;
        int64_t earliest = INT64_MAX;
        for (int k = 0; k < n_dev; k++) {
            fl_client_stats cs = {.struct_size = sizeof(cs)};
            fl_client_stats_get(dev[k].c, &cs);
            if (cs.rounds_completed || cs.rounds_failed) {
                done++;
                continue;
            }
            int64_t next = 0;
            if (cs.next_action_ms <= g_now) {
                fl_status rc = fl_client_step(dev[k].c, &next);
                if (rc != FL_OK && rc != FL_ERR_AGAIN)
                    bench_die("step", fl_client_errmsg(dev[k].c));
            } else {
                next = cs.next_action_ms;
            }
            if (next < earliest)
                earliest = next;
        }
        if (done == n_dev)
            break;
        if (earliest > g_now)
            g_now = earliest < g_now + 1000 ? earliest : g_now + 1000;
        fl_coord_tick(co);
    }
    res->seconds = bench_wall_s() - t0;
    res->before0 = dev[0].live_before;
    for (int k = 0; k < n_dev; k++) {
        fl_client_stats cs = {.struct_size = sizeof(cs)};
        fl_client_stats_get(dev[k].c, &cs);
        res->completed += cs.rounds_completed;
        if (getenv("FL_BENCH_VERBOSE"))
            fprintf(stderr, "device %d: completed %llu failed %llu uploads %llu err %d: %s\n", k,
                    (unsigned long long)cs.rounds_completed,
                    (unsigned long long)cs.rounds_failed, (unsigned long long)cs.uploads,
                    (int)cs.last_error, fl_client_errmsg(dev[k].c));
        if (dev[k].cnt.peak > res->peak_max)
            res->peak_max = dev[k].cnt.peak;
        fl_client_destroy(dev[k].c);
        fl_client_curl_destroy(dev[k].curl);
        fl_client_store_close(dev[k].store);
        res->leaked += dev[k].cnt.live;
        res->bad_frees += dev[k].cnt.bad_frees;
    }
    res->peak0 = dev[0].cnt.peak;
    res->n_snap = dev[0].cnt.n_snap;
    memcpy(res->snap, dev[0].cnt.snap, sizeof(res->snap));
    fl_coord_destroy(co);
    free(out.b);
    char p[200];
    const char *sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s%s", db, sfx[i]);
        unlink(p);
    }
    rmdir(dir);
}

int main(int argc, char **argv) {
    size_t ds[16];
    int nd = 0, n_dev = 1, json = 0;
    const char *privacy = "central";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (v && !strcmp(argv[i], "--d") && nd < 16 && ++i)
            ds[nd++] = (size_t)strtod(v, NULL);
        else if (v && !strcmp(argv[i], "--secagg") && ++i)
            n_dev = (int)strtol(v, NULL, 10);
        else if (v && !strcmp(argv[i], "--privacy") && ++i)
            privacy = v;
        else {
            fprintf(stderr, "usage: bench_round_heap [--d N]... [--secagg DEVICES] "
                            "[--privacy none|central|distributed] [--json]\n");
            return 2;
        }
    }
    if (n_dev < 1 || n_dev > MAX_DEVICES)
        bench_die("--secagg wants 2..16 devices", NULL);
    if (strcmp(privacy, "none") && strcmp(privacy, "central") && strcmp(privacy, "distributed"))
        bench_die("--privacy: none, central or distributed", NULL);
    if (!strcmp(privacy, "distributed") && n_dev < 2)
        bench_die("--privacy distributed needs --secagg (2..16 devices)", NULL);
    if (!nd) {
        ds[nd++] = 10000;
        ds[nd++] = 100000;
        ds[nd++] = 1000000;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || sodium_init() < 0)
        bench_die("curl/sodium init failed", NULL);
    int ok = 1;
    if (json)
        printf("{\"bench\":\"client_round_heap\",\"coordinator\":\"real, in-process\","
               "\"mode\":\"%s\",\"devices\":%d,\"privacy\":\"%s\",\"rows\":[",
               n_dev > 1 ? "secagg" : "plain", n_dev, privacy);
    else
        printf("client round peak heap (SDK allocations via the counting allocator), real "
               "coordinator in-process, %s, %d device(s), privacy %s\n"
               "%10s %10s %12s %12s %12s %12s %7s %9s %6s\n",
               n_dev > 1 ? "secagg" : "plain uploads", n_dev, privacy, "d", "4d (B)",
               "idle (B)", "peak dev0", "peak max", "target", "peak/4d", "completed", "s");
    for (int i = 0; i < nd; i++) {
        struct result r;
        measure(ds[i], n_dev, privacy, &r);
        size_t target = 4 * 4 * r.d + (1u << 20);
        int pass = r.completed == (uint64_t)n_dev && r.peak_max <= target && !r.leaked &&
                   !r.bad_frees;
        ok &= pass;
        if (json)
            printf("%s{\"d\":%zu,\"hidden\":%u,\"model_f32_bytes\":%zu,\"safetensors_bytes\":%zu,"
                   "\"idle_bytes\":%zu,\"peak_bytes_device0\":%zu,\"peak_bytes_max\":%zu,"
                   "\"target_bytes\":%zu,\"peak_over_4d\":%.3f,\"rounds_completed\":%llu,"
                   "\"leaked_bytes\":%llu,\"bad_frees\":%zu,\"seconds\":%.3f,\"pass\":%s",
                   i ? "," : "", r.d, r.hidden, 4 * r.d, r.model_bytes, r.before0, r.peak0,
                   r.peak_max, target, (double)r.peak_max / (4.0 * (double)r.d),
                   (unsigned long long)r.completed, (unsigned long long)r.leaked, r.bad_frees,
                   r.seconds, pass ? "true" : "false");
        if (json) {
            printf(",\"peak_blocks_device0\":[");
            for (size_t b = 0; b < r.n_snap; b++)
                printf("%s%zu", b ? "," : "", r.snap[b]);
            printf("]}");
        }
        else
            printf("%10zu %10zu %12zu %12zu %12zu %12zu %7.2f %6llu/%-2d %6.2f%s\n", r.d, 4 * r.d,
                   r.before0, r.peak0, r.peak_max, target,
                   (double)r.peak_max / (4.0 * (double)r.d), (unsigned long long)r.completed,
                   n_dev, r.seconds, pass ? "" : "  FAIL");
        if (!json) {
            printf("%10s blocks >= 32 KiB live at the peak (device 0):", "");
            for (size_t b = 0; b < r.n_snap; b++)
                printf(" %zu", r.snap[b]);
            printf("\n");
        }
        fflush(stdout);
    }
    if (json)
        printf("],\"pass\":%s}\n", ok ? "true" : "false");
    curl_global_cleanup();
    return ok ? 0 : 1;
}
