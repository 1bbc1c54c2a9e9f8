/* Devices on the embedded SDK (libflotilla_client_embedded.so: mbedTLS for every primitive,
 * no libsodium, OpenSSL or libcurl inside) take part in rounds of the REAL coordinator, which
 * runs in-process on 127.0.0.1 on the normal libsodium code (fl_coordinator_static). The
 * devices reach it through this test's own HTTP transport (libcurl in the test program, as an
 * app would bring its platform's stack), since the embedded library has no default transport.
 *
 *  - secure aggregation, no DP: every task and model is signed and verified on the device
 *    (Ed25519 on mbedTLS); the coordinator's unmasked sum (its test hook) must equal the sum
 *    of the devices' known updates bit for bit, and model version 2 base + their FedAvg;
 *  - secure aggregation + distributed DP: the devices rotate with mbedTLS's ChaCha20 and the
 *    coordinator un-rotates with libsodium's; the decoded average must be within the noise
 *    of the known average (a sign mismatch would smear each device's spike over all d'
 *    coordinates, far outside the tolerance);
 *  - secure aggregation in active-adversary mode (secagg.consistency_check): each device's
 *    identity key is made by the embedded library (fl_client_identity_keygen, mbedTLS) and
 *    certified by a device authority (libsodium here); advertisements are signed and the
 *    survivor set checked on mbedTLS's Ed25519, and the sum is exact as above;
 *  - a model whose signature header was altered, and one whose body was altered with its
 *    SHA-256 header recomputed (so that only the signature can catch it), are refused with
 *    FL_ERR_CRYPTO and nothing is uploaded.
 *
 * Known updates: a custom trainer (fl_client_config.train_fn, public API) adds a fixed
 * per-device delta of multiples of 2^-10 to a model whose weights are themselves multiples
 * of 2^-10, so trained - global is exact in float and the quantized words are known. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>

#include "fl_test.h"
#include "flotilla/client.h"
#include "flotilla/coordinator.h"
#include "flotilla/tensor.h" /* the core's safetensors reader, from the static coordinator */

#define ADMIN "fla_embedded-profile-test-admin-token-0123456789"
#define IN 12 /* MLP 12 -> 8 -> 3 */
#define HID 8
#define CLS 3
#define D (IN * HID + HID + HID * CLS + CLS) /* 131 update coordinates */
#define NDEV 4
#define MAXV 1024
#define GAMMA (1.0 / 1024)

/* ---- the coordinator, with a frozen clock moved by the driver ---- */

typedef void (*sum_hook_fn)(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                            uint32_t count, const float *delta, size_t dim);
void fl__coord_debug_hook_set(fl_coord *co, sum_hook_fn fn, void *user);

struct world {
    char dir[64], db[128], base_url[64];
    fl_coord *co;
    uint8_t pk[32];
    _Atomic int64_t now_ms;
    pthread_mutex_t lock; /* guards the hook's copy below */
    int sums;
    uint64_t sum[MAXV];
    size_t vec_len, dim;
    uint32_t count;
    float delta[MAXV];
};

static int64_t world_clock(void *user) {
    return atomic_load(&((struct world *)user)->now_ms);
}

static void on_sum(void *user, int64_t round_id, const uint64_t *sum, size_t vec_len,
                   uint32_t count, const float *delta, size_t dim) {
    struct world *w = user;
    (void)round_id;
    pthread_mutex_lock(&w->lock);
    w->sums++;
    w->vec_len = vec_len < MAXV ? vec_len : MAXV;
    w->dim = dim < MAXV ? dim : MAXV;
    w->count = count;
    memcpy(w->sum, sum, w->vec_len * sizeof(uint64_t));
    memcpy(w->delta, delta, w->dim * sizeof(float));
    pthread_mutex_unlock(&w->lock);
}

static void coord_log(void *user, fl_log_level level, const char *msg) {
    (void)user;
    if (getenv("FL_TEST_VERBOSE") || (level >= FL_LOG_WARN && getenv("FL_TEST_LOG")))
        fprintf(stderr, "  [coordinator] %s\n", msg);
}

static void world_start(struct world *w) {
    memset(w, 0, sizeof(*w));
    snprintf(w->dir, sizeof(w->dir), "/tmp/fl-emb-test-XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->db, sizeof(w->db), "%s/coord.db", w->dir);
    atomic_store(&w->now_ms, 1767225600000);
    pthread_mutex_init(&w->lock, NULL);
    fl_coord_config cc;
    fl_coord_config_init(&cc);
    cc.port = 0;
    cc.threads = 2;
    cc.db_path = w->db;
    cc.has_admin_token = 1;
    crypto_hash_sha256(cc.admin_token_sha256, (const uint8_t *)ADMIN, strlen(ADMIN));
    cc.clock = world_clock;
    cc.clock_user = w;
    cc.logger.fn = coord_log;
    cc.logger.min_level = FL_LOG_DEBUG;
    cc.limits.per_ip_connections = 0;
    char err[256] = "";
    if (fl_coord_create(&w->co, &cc, err, sizeof(err)) != FL_OK)
        fail_msg("coordinator: %s", err);
    assert_int_equal(fl_coord_start(w->co), FL_OK);
    snprintf(w->base_url, sizeof(w->base_url), "http://127.0.0.1:%u", fl_coord_port(w->co));
    char kid[FL_COORD_KEY_ID_BYTES];
    fl_coord_public_key(w->co, w->pk, kid);
    fl__coord_debug_hook_set(w->co, on_sum, w);
}

static void world_stop(struct world *w) {
    fl_coord_destroy(w->co);
    static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
    char p[200];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s%s", w->db, tails[i]);
        unlink(p);
    }
    rmdir(w->dir);
    pthread_mutex_destroy(&w->lock);
}

/* ---- HTTP over libcurl (the test's; the library has none) ---- */

struct bytes {
    uint8_t *p;
    size_t len;
};

static size_t to_bytes(char *p, size_t sz, size_t n, void *u) {
    struct bytes *b = u;
    uint8_t *q = realloc(b->p, b->len + sz * n + 1);
    if (!q)
        return 0;
    memcpy(q + b->len, p, sz * n);
    b->p = q;
    b->len += sz * n;
    b->p[b->len] = 0;
    return sz * n;
}

/* One exchange; returns the HTTP status (0 if the exchange failed). */
static long http(const char *url, const char *method, const char *const *hdrs, size_t nh,
                 const void *body, size_t len, long timeout_ms, struct bytes *out,
                 struct bytes *headers) {
    CURL *e = curl_easy_init();
    assert_non_null(e);
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; i < nh; i++)
        h = curl_slist_append(h, hdrs[i]);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, to_bytes);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    if (headers) {
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, to_bytes);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, headers);
    }
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 60000L);
    long code = 0;
    if (curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return code;
}

static long admin(struct world *w, const char *path, const char *ctype, const void *body,
                  size_t len, char *out, size_t cap) {
    char url[256], auth[128], ct[96];
    snprintf(url, sizeof(url), "%s%s", w->base_url, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", ADMIN);
    snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
    const char *hd[] = {auth, ct};
    struct bytes b = {0};
    long code = http(url, "POST", hd, 2, body, len, 0, &b, NULL);
    snprintf(out, cap, "%s", b.p ? (const char *)b.p : "");
    free(b.p);
    return code;
}

/* ---- the device transport: blocking, with optional model tampering ---- */

enum tamper { TAMPER_NONE, TAMPER_SIGNATURE, TAMPER_BODY_REHASHED };

struct dev_transport {
    const char *base_url;
    const fl_client_request *req;
    enum tamper tamper;
    int tampered;    /* model responses altered */
    int consistency; /* consistency signatures accepted (POST .../secagg/consistency) */
};

static fl_status dt_send(void *ctx, const fl_client_request *req) {
    ((struct dev_transport *)ctx)->req = req;
    return FL_OK;
}

/* Alters a model answer in place: one character of the base64 signature (a middle one, so
 * the header stays canonical base64 of 64 bytes), or one body byte with the SHA-256 header
 * recomputed. */
static void tamper_model(struct dev_transport *t, struct bytes *body, char *sig, char *sha) {
    if (t->tamper == TAMPER_SIGNATURE && sig) {
        sig[10] = sig[10] == 'A' ? 'B' : 'A';
        t->tampered++;
    } else if (t->tamper == TAMPER_BODY_REHASHED && sha && body->len > 100) {
        body->p[body->len - 7] ^= 0x01; /* a weight's low mantissa bit */
        uint8_t h[32];
        crypto_hash_sha256(h, body->p, body->len);
        for (int i = 0; i < 32; i++)
            snprintf(sha + 2 * i, 3, "%02x", h[i]);
        t->tampered++;
    }
}

static fl_status dt_recv(void *ctx, fl_client_response *resp) {
    struct dev_transport *t = ctx;
    const fl_client_request *rq = t->req;
    if (!rq)
        return FL_ERR_STATE;
    t->req = NULL;
    char url[512];
    snprintf(url, sizeof(url), "%s%s", t->base_url, rq->path);
    struct bytes body = {0}, hb = {0};
    long code = http(url, rq->method, rq->headers, rq->n_headers, rq->body, rq->body_len,
                     rq->timeout_ms, &body, &hb);
    fl_status rc = FL_OK;
    if (code == 0) {
        rc = FL_ERR_IO;
        goto out;
    }
    /* Header lines "Name: value\r\n"; the status line and the blank line are skipped. */
    char *names[32], *vals[32];
    size_t nh = 0;
    char *sig = NULL, *sha = NULL;
    for (char *line = (char *)hb.p, *next; line && *line && nh < 32; line = next) {
        next = line + strcspn(line, "\n");
        if (*next)
            *next++ = '\0';
        line[strcspn(line, "\r")] = '\0';
        char *colon = strchr(line, ':');
        if (!colon || strncmp(line, "HTTP/", 5) == 0)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        names[nh] = line;
        vals[nh] = v;
        if (strcasecmp(line, "Flotilla-Signature") == 0)
            sig = v;
        if (strcasecmp(line, "Flotilla-Content-SHA256") == 0)
            sha = v;
        nh++;
    }
    if (strncmp(rq->path, "/v1/models/", 11) == 0 && code == 200)
        tamper_model(t, &body, sig, sha);
    if (strcmp(rq->method, "POST") == 0 && strstr(rq->path, "/secagg/consistency") &&
        (code == 202 || code == 200))
        t->consistency++;
    rc = fl_client_response_set_status(resp, (int)code);
    for (size_t i = 0; i < nh && rc == FL_OK; i++)
        rc = fl_client_response_add_header(resp, names[i], strlen(names[i]), vals[i],
                                           strlen(vals[i]));
    if (rc == FL_OK && body.len)
        rc = fl_client_response_append(resp, body.p, body.len);
out:
    free(body.p);
    free(hb.p);
    return rc;
}

static void dt_cancel(void *ctx) {
    ((struct dev_transport *)ctx)->req = NULL;
}

/* ---- model and known updates ---- */

/* The MLP with every weight rounded to a multiple of 2^-10 (all tensors are F32, so every
 * 4-byte word after the safetensors header is a weight). */
static uint8_t *make_model(size_t *len) {
    uint32_t sizes[] = {IN, HID, CLS};
    assert_int_equal(fl_client_model_init(NULL, 0, len, sizes, 3, 5, NULL), FL_ERR_TOO_LARGE);
    uint8_t *m = malloc(*len);
    assert_non_null(m);
    assert_int_equal(fl_client_model_init(m, *len, len, sizes, 3, 5, NULL), FL_OK);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | m[i];
    size_t off = 8 + (size_t)hl;
    assert_int_equal((*len - off) % 4, 0);
    assert_int_equal((*len - off) / 4, D);
    for (size_t p = off; p < *len; p += 4) {
        float f;
        memcpy(&f, m + p, 4);
        f = (float)(nearbyint((double)f * 1024) / 1024);
        memcpy(m + p, &f, 4);
    }
    return m;
}

/* The update tensors of a safetensors image, flattened in update order. */
static void flat(const uint8_t *m, size_t len, float *out) {
    static const char *const names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, m, len), FL_OK);
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        fl_tensor_view v;
        assert_int_equal(fl_safetensors_find(st, &v, names[i]), FL_OK);
        assert_true(off + v.nbytes / 4 <= D);
        memcpy(out + off, v.data, v.nbytes);
        off += v.nbytes / 4;
    }
    assert_int_equal(off, D);
    fl_safetensors_destroy(st);
}

/* Device k's update, coordinate j (flattened fc1.weight, fc1.bias, fc2.weight, fc2.bias).
 * spike: device k puts 0.95 on coordinate 5k and nothing elsewhere (DP round); otherwise a
 * small pattern of multiples of 2^-10 (exact round). */
static double known_delta(int k, size_t j, bool spike) {
    if (spike)
        return j == (size_t)(5 * k) ? 0.95 : 0.0;
    return (double)((int)((j * 7 + (size_t)k * 13) % 9) - 4) * GAMMA;
}

struct trainer {
    int k;
    bool spike;
    int calls;
};

/* A custom trainer, as an app with its own engine would supply: adds the known delta. */
static fl_status train(void *user, fl_client_tensor *t, size_t n, const fl_client_train_params *p,
                       fl_client_store *store, uint64_t *examples_used) {
    struct trainer *tr = user;
    static const char *const order[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    (void)p;
    (void)store;
    size_t j = 0;
    for (int o = 0; o < 4; o++)
        for (size_t i = 0; i < n; i++)
            if (strcmp(t[i].name, order[o]) == 0)
                for (size_t e = 0; e < t[i].numel; e++, j++)
                    t[i].data[e] =
                        (float)((double)t[i].data[e] + known_delta(tr->k, j, tr->spike));
    assert_int_equal(j, D);
    tr->calls++;
    *examples_used = 10;
    return FL_OK;
}

/* ---- devices ---- */

struct dev {
    fl_client_store *store;
    struct dev_transport tr;
    struct trainer trainer;
    fl_client *c;
};

static void dev_log(void *u, fl_log_level lv, const char *msg) {
    (void)lv;
    if (getenv("FL_TEST_LOG"))
        fprintf(stderr, "  [device %d] %s\n", ((struct dev *)u)->trainer.k, msg);
}

/* The device authority of active-mode populations: an Ed25519 key pair (libsodium). */
struct authority {
    uint8_t vk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
};

static void dev_open(struct dev *d, struct world *w, int k, const char *pop, const char *etok,
                     bool spike, enum tamper tamper, const struct authority *auth) {
    memset(d, 0, sizeof(*d));
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = IN;
    sc.clock = world_clock;
    sc.clock_user = w;
    assert_int_equal(fl_client_store_open(&d->store, &sc, NULL, 0), FL_OK);
    for (int i = 0; i < 10; i++) {
        float x[IN];
        for (int j = 0; j < IN; j++)
            x[j] = (float)(k + i + j) * 0.01f;
        assert_int_equal(fl_client_store_add(d->store, x, IN, (i + k) % CLS), FL_OK);
    }
    d->tr.base_url = w->base_url;
    d->tr.tamper = tamper;
    d->trainer.k = k;
    d->trainer.spike = spike;
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    cfg.logger.fn = dev_log;
    cfg.logger.user = d;
    cfg.logger.min_level = FL_LOG_DEBUG;
    cfg.population = pop;
    cfg.region = "EU";
    memcpy(cfg.coordinator_key, w->pk, 32);
    cfg.has_coordinator_key = 1;
    cfg.enrollment_token = etok;
    cfg.transport.struct_size = sizeof(cfg.transport);
    cfg.transport.send = dt_send;
    cfg.transport.recv = dt_recv;
    cfg.transport.cancel = dt_cancel;
    cfg.transport.ctx = &d->tr;
    cfg.store = d->store;
    cfg.train_fn = train;
    cfg.train_user = &d->trainer;
    cfg.clock = world_clock;
    cfg.clock_user = w;
    cfg.seed = (uint64_t)k + 1;
    cfg.backoff_initial_ms = 200;
    cfg.backoff_max_ms = 2000;
    if (auth) {
        /* The device's key pair from the embedded library, certified for device id
         * "emb-device-<k>" by the authority: its signature over ("flotilla-secagg-cert-v2"
         * || device_id || verify_key). */
        uint8_t vk[32], stmt[23 + 64];
        assert_int_equal(fl_client_identity_keygen(vk, cfg.secagg_signing_key), FL_OK);
        snprintf((char *)cfg.secagg_device_id, sizeof(cfg.secagg_device_id), "emb-device-%d", k);
        memcpy(stmt, "flotilla-secagg-cert-v2", 23);
        memcpy(stmt + 23, cfg.secagg_device_id, 32);
        memcpy(stmt + 55, vk, 32);
        crypto_sign_detached(cfg.secagg_cert, NULL, stmt, sizeof(stmt), auth->sk);
        memcpy(cfg.secagg_authority_key, auth->vk, 32);
        cfg.has_secagg_identity = 1;
    }
    char err[256] = "";
    if (fl_client_create(&d->c, &cfg, err, sizeof(err)) != FL_OK)
        fail_msg("fl_client_create: %s", err);
    fl_client_eligibility e = {sizeof(e), 1, 1, 1, 80};
    assert_int_equal(fl_client_set_eligibility(d->c, &e), FL_OK);
}

static void dev_close(struct dev *d) {
    fl_client_destroy(d->c);
    fl_client_store_close(d->store);
}

static void stats(const struct dev *d, fl_client_stats *cs) {
    memset(cs, 0, sizeof(*cs));
    cs->struct_size = sizeof(*cs);
    assert_int_equal(fl_client_stats_get(d->c, cs), FL_OK);
}

/* Steps every device until each has finished one round (completed or given up), moving the
 * frozen clock to the earliest next action (at least 200 ms) between passes. */
static void drive(struct world *w, struct dev *d, int n) {
    for (int pass = 0; pass < 600; pass++) {
        int64_t earliest = INT64_MAX;
        int busy = 0;
        for (int i = 0; i < n; i++) {
            fl_client_stats cs;
            stats(&d[i], &cs);
            if (cs.rounds_completed + cs.rounds_failed > 0 && cs.state == FL_CLIENT_STATE_IDLE)
                continue;
            busy++;
            int64_t next = 0;
            fl_status rc = fl_client_step(d[i].c, &next);
            if (rc != FL_OK)
                fail_msg("device %d: %s (%s)", i, fl_client_status_name(rc),
                         fl_client_errmsg(d[i].c));
            earliest = next < earliest ? next : earliest;
        }
        if (!busy)
            return;
        int64_t now = atomic_load(&w->now_ms);
        int64_t to = earliest != INT64_MAX && earliest > now + 200 ? earliest : now + 200;
        atomic_store(&w->now_ms, to);
        fl_coord_tick(w->co);
    }
    fail_msg("devices did not finish their round in 600 passes");
}

/* Creates a population (JSON below), uploads the model, starts it; etok gets the token. */
static void population(struct world *w, const char *name, int n, const char *mode, double noise,
                       const uint8_t *model, size_t mlen, char *etok, size_t cap,
                       const struct authority *auth) {
    char json[2048], priv[200] = "", active[160] = "", out[8192], path[160];
    if (auth) {
        char hex[65];
        sodium_bin2hex(hex, sizeof(hex), auth->vk, 32);
        snprintf(active, sizeof(active),
                 ",\"consistency_check\":true,\"authority_key\":\"%s\"", hex);
    }
    if (strcmp(mode, "none") != 0)
        snprintf(priv, sizeof(priv),
                 ",\"noise_multiplier\":%g,\"epsilon_budget\":1000,\"delta\":1e-5,"
                 "\"population_size\":1000", noise);
    snprintf(json, sizeof(json),
             "{\"name\":\"%s\",\"allowed_regions\":[\"EU\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":1,"
             "\"max_retry_s\":60},"
             "\"deadlines_s\":{\"advertise\":30,\"share\":30,\"masked\":30,\"consistency\":30,"
             "\"unmask\":30},"
             "\"training\":{\"epochs\":1,\"batch_size\":8,\"learning_rate\":0.1,"
             "\"max_examples\":100},"
             "\"update\":{\"tensors\":[\"fc1.weight\",\"fc1.bias\",\"fc2.weight\",\"fc2.bias\"],"
             "\"weighting\":\"uniform\",\"weight_cap\":22},"
             "\"strategy\":{\"name\":\"fedavg\"},"
             "\"secagg\":{\"enabled\":%s,\"threshold_fraction\":0.5%s},"
             "\"privacy\":{\"mode\":\"%s\",\"clip_norm\":1.0%s}}",
             name, n, n, n > 1 ? "true" : "false", active, mode, priv);
    long code = admin(w, "/v1/admin/populations", "application/json", json, strlen(json), out,
                      sizeof(out));
    if (code != 201)
        fail_msg("create population: %ld %s", code, out);
    const char *et = strstr(out, "\"enrollment_token\":\"");
    assert_non_null(et);
    snprintf(etok, cap, "%.*s", (int)strcspn(et + 20, "\""), et + 20);
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/models", name);
    code = admin(w, path, "application/octet-stream", model, mlen, out, sizeof(out));
    if (code != 201)
        fail_msg("upload model: %ld %s", code, out);
    snprintf(path, sizeof(path), "/v1/admin/populations/%s/start", name);
    assert_int_equal(admin(w, path, "application/json", NULL, 0, out, sizeof(out)), 200);
}

/* Model version v of pop, flattened in update order, fetched with device 0's token. */
static void fetch_model(struct world *w, struct dev *d0, const char *pop, int v, float *out) {
    char tok[FL_CLIENT_TOKEN_MAX_CHARS + 1], url[256], auth[300];
    assert_int_equal(fl_client_token(d0->c, tok, sizeof(tok)), FL_OK);
    snprintf(url, sizeof(url), "%s/v1/models/%s/%d", w->base_url, pop, v);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    const char *hd[] = {auth};
    struct bytes b = {0};
    assert_int_equal(http(url, "GET", hd, 1, NULL, 0, 0, &b, NULL), 200);
    flat(b.p, b.len, out);
    free(b.p);
}

static int64_t centred(uint64_t x) {
    return x >= (1ull << 31) ? -(int64_t)((1ull << 32) - x) : (int64_t)x;
}

/* ---- tests ---- */

static void round_with(const char *mode, double noise, bool active) {
    bool dp = strcmp(mode, "none") != 0;
    struct world w;
    world_start(&w);
    struct authority auth;
    crypto_sign_keypair(auth.vk, auth.sk);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    float base[D], neu[D];
    flat(model, mlen, base);
    char etok[256];
    population(&w, "emb", NDEV, mode, noise, model, mlen, etok, sizeof(etok),
               active ? &auth : NULL);
    struct dev d[NDEV];
    for (int k = 0; k < NDEV; k++)
        dev_open(&d[k], &w, k, "emb", etok, dp, TAMPER_NONE, active ? &auth : NULL);
    drive(&w, d, NDEV);
    for (int k = 0; k < NDEV; k++) {
        fl_client_stats cs;
        stats(&d[k], &cs);
        if (cs.rounds_completed != 1)
            fail_msg("device %d: completed %llu, failed %llu: %s", k,
                     (unsigned long long)cs.rounds_completed,
                     (unsigned long long)cs.rounds_failed, fl_client_errmsg(d[k].c));
        assert_int_equal(cs.uploads, 1);
        assert_int_equal(d[k].trainer.calls, 1);
        assert_int_equal(d[k].tr.consistency, active ? 1 : 0); /* the phase ran iff active */
    }
    pthread_mutex_lock(&w.lock);
    assert_int_equal(w.sums, 1);
    assert_int_equal(w.count, NDEV);
    assert_int_equal(w.dim, D);
    double mean[D];
    for (size_t j = 0; j < D; j++) {
        mean[j] = 0;
        for (int k = 0; k < NDEV; k++)
            mean[j] += known_delta(k, j, dp) / NDEV;
    }
    if (!dp) {
        /* Words: each device's delta / gamma exactly, then w = 1; the sum modulo 2^32. */
        assert_int_equal(w.vec_len, D + 1);
        for (size_t j = 0; j < D; j++) {
            int64_t want = 0;
            for (int k = 0; k < NDEV; k++)
                want += (int64_t)llround(known_delta(k, j, false) / GAMMA);
            assert_int_equal(centred(w.sum[j]), want);
            assert_true(w.delta[j] == (float)((double)want * GAMMA / NDEV));
        }
        assert_int_equal(w.sum[D], NDEV);
    } else {
        /* Noise on the average: z * C / n = 0.0125 per coordinate, plus the rounding; the
         * bound is 6.4 sigma. Mismatched signs would leave each spike of 0.2375 near 0. */
        double worst = 0;
        for (size_t j = 0; j < D; j++)
            worst = fmax(worst, fabs(w.delta[j] - mean[j]));
        if (getenv("FL_TEST_VERBOSE"))
            fprintf(stderr, "distributed DP: largest error of the decoded average %g\n", worst);
        if (worst > 0.08)
            fail_msg("decoded average off by %g (spikes of 0.2375 expected)", worst);
    }
    pthread_mutex_unlock(&w.lock);
    fetch_model(&w, &d[0], "emb", 2, neu);
    for (size_t j = 0; j < D; j++)
        assert_true(neu[j] == (float)(base[j] + (double)w.delta[j]));
    for (int k = 0; k < NDEV; k++)
        dev_close(&d[k]);
    free(model);
    sodium_memzero(auth.sk, sizeof(auth.sk));
    world_stop(&w);
}

static void test_secagg_round_exact(void **st) {
    (void)st;
    round_with("none", 0, false);
}

/* Active-adversary mode: signed advertisements and the consistency phase on mbedTLS. */
static void test_secagg_active_round_exact(void **st) {
    (void)st;
    round_with("none", 0, true);
}

static void test_secagg_distributed_dp_round(void **st) {
    (void)st;
    round_with("distributed", 0.05, false);
}

static void refuse(enum tamper how) {
    struct world w;
    world_start(&w);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    char etok[256];
    population(&w, "one", 1, "none", 0, model, mlen, etok, sizeof(etok), NULL);
    struct dev d;
    dev_open(&d, &w, 0, "one", etok, false, how, NULL);
    drive(&w, &d, 1);
    fl_client_stats cs;
    stats(&d, &cs);
    assert_true(d.tr.tampered >= 1);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.rounds_completed, 0);
    assert_int_equal(cs.uploads, 0);
    assert_int_equal(cs.last_error, FL_ERR_CRYPTO);
    assert_int_equal(d.trainer.calls, 0); /* refused before training */
    assert_non_null(strstr(fl_client_errmsg(d.c), "signature does not verify"));
    pthread_mutex_lock(&w.lock);
    assert_int_equal(w.sums, 0);
    pthread_mutex_unlock(&w.lock);
    dev_close(&d);
    free(model);
    world_stop(&w);
}

static void test_refuses_model_with_altered_signature(void **st) {
    (void)st;
    refuse(TAMPER_SIGNATURE);
}

static void test_refuses_altered_model_with_matching_hash(void **st) {
    (void)st;
    refuse(TAMPER_BODY_REHASHED);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secagg_round_exact),
        cmocka_unit_test(test_secagg_distributed_dp_round),
        cmocka_unit_test(test_secagg_active_round_exact),
        cmocka_unit_test(test_refuses_model_with_altered_signature),
        cmocka_unit_test(test_refuses_altered_model_with_matching_hash),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
