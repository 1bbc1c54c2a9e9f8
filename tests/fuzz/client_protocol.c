/* libFuzzer target for every answer a device parses: a real fl_client is driven through its
 * protocol state machine over an in-memory transport whose responses come from the input
 * (enrollment and check-in answers, error bodies, task configs, models, secagg phase
 * results, round outcomes, Retry-After values). Bodies of task and model downloads are
 * signed by the harness with the key the client pins, so fuzzed task JSON and safetensors
 * get past the signature check and reach the parsers, training and the update pipeline.
 *
 * Input: records [status selector: 1 byte][body length: 2 bytes LE][flags: 1 byte][body].
 * The selector picks the HTTP status from a table; flag bit 0 adds "Retry-After: <byte 0 of
 * body>" and bit 1 drops the signature headers. When the input runs out, requests fail with
 * FL_ERR_IO. Oracles beyond the sanitizers: step never returns anything but the documented
 * codes, and the client is destroyed without leaks. Corpus: corpus/client_protocol/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "flotilla/client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

static const int statuses[] = {200, 201, 202, 204, 400, 401, 403, 404, 409, 410,
                               425, 429, 500, 503, 200, 200};

struct mem {
    const uint8_t *p;
    size_t n;
    uint8_t sk[64], pk[32];
    char path[512];
    int64_t now;
};

static int64_t clock_fn(void *u) {
    return ((struct mem *)u)->now;
}

static fl_status m_send(void *ctx, const fl_client_request *req) {
    struct mem *m = ctx;
    snprintf(m->path, sizeof(m->path), "%s", req->path);
    return FL_OK;
}

/* The id a signed body is bound to: the round of a task, the version of a model. */
static int signed_context(const char *path, const char **ctx, uint64_t *id) {
    const char *p;
    if (strncmp(path, "/v1/rounds/", 11) == 0 && strstr(path, "/task")) {
        *ctx = "flotilla/v1/task";
        *id = strtoull(path + 11, NULL, 10);
        return 1;
    }
    if (strncmp(path, "/v1/models/", 11) == 0 && (p = strrchr(path, '/')) != NULL) {
        *ctx = "flotilla/v1/model";
        *id = strtoull(p + 1, NULL, 10);
        return 1;
    }
    return 0;
}

/* Ed25519 signatures are deterministic, and most records of a mutated input are the same
 * as in the input it came from, so the last few signed messages are remembered (the
 * signing cost otherwise rivals what the client does with the body). */
#define SIG_CACHE 16
static struct {
    uint8_t msg[64]; /* context || 0 || id (8 bytes LE) || SHA-256 of the body */
    size_t len;      /* bytes used in msg; 0 = empty slot */
    uint8_t sig[64];
} sig_cache[SIG_CACHE];
static unsigned sig_next;

static void sign_cached(uint8_t sig[64], const uint8_t *msg, size_t len, const uint8_t *sk) {
    for (unsigned i = 0; i < SIG_CACHE; i++)
        if (sig_cache[i].len == len && memcmp(sig_cache[i].msg, msg, len) == 0) {
            memcpy(sig, sig_cache[i].sig, 64);
            return;
        }
    crypto_sign_detached(sig, NULL, msg, len, sk);
    unsigned k = sig_next++ % SIG_CACHE;
    memcpy(sig_cache[k].msg, msg, len);
    sig_cache[k].len = len;
    memcpy(sig_cache[k].sig, sig, 64);
}

static fl_status m_recv(void *ctx, fl_client_response *resp) {
    struct mem *m = ctx;
    if (m->n < 4)
        return FL_ERR_IO;
    int status = statuses[m->p[0] % (sizeof(statuses) / sizeof(statuses[0]))];
    size_t len = (size_t)m->p[1] | (size_t)m->p[2] << 8;
    uint8_t flags = m->p[3];
    m->p += 4;
    m->n -= 4;
    if (len > m->n)
        len = m->n;
    const uint8_t *body = m->p;
    m->p += len;
    m->n -= len;
    fl_status rc = fl_client_response_set_status(resp, status);
    if (rc == FL_OK && (flags & 1) && len) {
        char ra[8];
        int k = snprintf(ra, sizeof(ra), "%u", body[0] % 5);
        rc = fl_client_response_add_header(resp, "Retry-After", 11, ra, (size_t)k);
    }
    const char *sctx;
    uint64_t id;
    if (rc == FL_OK && !(flags & 2) && signed_context(m->path, &sctx, &id)) {
        uint8_t h[32], msg[64], sig[64];
        char hex[65], b64[100], kid[17];
        crypto_hash_sha256(h, body, len);
        size_t cl = strlen(sctx);
        memcpy(msg, sctx, cl);
        msg[cl] = 0;
        for (int i = 0; i < 8; i++)
            msg[cl + 1 + i] = (uint8_t)(id >> (8 * i));
        memcpy(msg + cl + 9, h, 32);
        sign_cached(sig, msg, cl + 41, m->sk);
        sodium_bin2hex(hex, sizeof(hex), h, 32);
        sodium_bin2base64(b64, sizeof(b64), sig, 64, sodium_base64_VARIANT_ORIGINAL);
        fl_client_key_id(kid, m->pk);
        rc = fl_client_response_add_header(resp, "Flotilla-Content-SHA256", 23, hex, 64);
        if (rc == FL_OK)
            rc = fl_client_response_add_header(resp, "Flotilla-Signature", 18, b64, strlen(b64));
        if (rc == FL_OK)
            rc = fl_client_response_add_header(resp, "Flotilla-Key-Id", 15, kid, 16);
    }
    if (rc == FL_OK && len)
        rc = fl_client_response_append(resp, body, len);
    return rc == FL_ERR_TOO_LARGE ? rc : FL_OK;
}

/* Work that does not depend on the input is done once: the coordinator's signing key (from
 * a fixed seed) and the example store (six dense examples in an in-memory SQLite store).
 * The client is created fresh per input. The store is shared across inputs: with no
 * retention limits set, a client only reads it, which the harness checks (six examples are
 * still there). */
static uint8_t coord_sk[64], coord_pk[32];
static fl_client_store *shared_store;

static void setup_once(void) {
    CHECK(sodium_init() >= 0);
    uint8_t seed[32];
    memset(seed, 7, sizeof(seed));
    crypto_sign_seed_keypair(coord_pk, coord_sk, seed);
    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = 4;
    CHECK(fl_client_store_open(&shared_store, &sc, NULL, 0) == FL_OK);
    for (int i = 0; i < 6; i++) {
        float x[4] = {0.1f * (float)i, 0.2f, -0.3f, 0.05f * (float)(i % 3)};
        CHECK(fl_client_store_add(shared_store, x, 4, i % 3) == FL_OK);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20)
        return 0;
    static int init;
    if (!init) {
        setup_once();
        init = 1;
    }
    struct mem m = {data, size, {0}, {0}, "", 1767225600000};
    memcpy(m.sk, coord_sk, sizeof(m.sk));
    memcpy(m.pk, coord_pk, sizeof(m.pk));
    fl_client_store *st = shared_store;
    fl_client_config cfg;
    fl_client_config_init(&cfg);
    cfg.population = "pop";
    cfg.region = "EU";
    memcpy(cfg.coordinator_key, m.pk, 32);
    cfg.has_coordinator_key = 1;
    cfg.enrollment_token = "flp_fuzz-enrollment-token-000000";
    cfg.transport.struct_size = sizeof(cfg.transport);
    cfg.transport.send = m_send;
    cfg.transport.recv = m_recv;
    cfg.transport.ctx = &m;
    cfg.store = st;
    cfg.clock = clock_fn;
    cfg.clock_user = &m;
    cfg.seed = 1;
    cfg.max_model_bytes = 1 << 20;
    cfg.backoff_initial_ms = 10;
    cfg.backoff_max_ms = 100;
    cfg.long_poll_s = 0;
    fl_client *c = NULL;
    CHECK(fl_client_create(&c, &cfg, NULL, 0) == FL_OK);
    for (int i = 0; i < 200 && (m.n >= 4 || i < 2); i++) {
        int64_t next = 0;
        fl_status rc = fl_client_step(c, &next);
        CHECK(rc == FL_OK || rc == FL_ERR_AUTH || rc == FL_ERR_CRYPTO || rc == FL_ERR_STATE ||
              rc == FL_ERR_PROTOCOL);
        if (rc != FL_OK)
            break;
        if (next > m.now)
            m.now = next; /* jump to the next action */
    }
    fl_client_stats cs = {.struct_size = sizeof(cs)};
    CHECK(fl_client_stats_get(c, &cs) == FL_OK);
    fl_client_destroy(c);
    /* The store is shared, so a change would persist: checking it every 256 inputs (and on
     * the first) catches one without a SQL query per input. */
    static unsigned long runs;
    if (runs++ % 256 == 0) {
        uint64_t count = 0;
        CHECK(fl_client_store_stats(st, &count, NULL) == FL_OK && count == 6);
    }
    return 0;
}
