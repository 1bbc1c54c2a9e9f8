/* Coordinator lifecycle: configuration defaults and validation, create/start/tick/stop,
 * the signing key, and the signed-message layout of docs/protocol.md section 4.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "coord_internal.h"

size_t fl_coord_sha256_bytes(void) { return FL_COORD_SHA256_BYTES; }
size_t fl_coord_seed_bytes(void) { return FL_COORD_SEED_BYTES; }
size_t fl_coord_public_key_bytes(void) { return FL_COORD_PUBLIC_KEY_BYTES; }
size_t fl_coord_key_id_bytes(void) { return FL_COORD_KEY_ID_BYTES; }

/* The unmasking is memory-bound past a few threads, and it runs without the coordinator's
 * lock, so it may take every core for its short span: up to 8, one per online CPU. */
unsigned fl__coord_default_unmask_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : n > 8 ? 8u : (unsigned)n;
}

void fl_coord_config_init(fl_coord_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->listen_address = "127.0.0.1";
    cfg->port = 8080;
    cfg->threads = 4;
    cfg->limits.enroll_bytes = 4096;
    cfg->limits.checkin_bytes = 8192;
    cfg->limits.admin_json_bytes = 64 * 1024;
    cfg->limits.model_bytes = 256u * 1024 * 1024;
    cfg->limits.connection_timeout_s = 30;
    cfg->limits.per_ip_connections = 64;
    cfg->limits.max_connections = 10000;
    cfg->limits.connection_memory = 32 * 1024;
    cfg->max_long_poll_s = 30;
    cfg->request_deadline_s = 10;
    cfg->request_min_body_rate = 16384;
    cfg->secagg_unmask_threads = fl__coord_default_unmask_threads();
    cfg->shutdown_drain_s = 5;
    cfg->db_busy_timeout_ms = 5000;
    cfg->logger.min_level = FL_LOG_INFO;
}

int64_t fl__coord_now(const fl_coord *co) {
    if (co->clock)
        return co->clock(co->clock_user);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void fl__coord_lock(fl_coord *co) { pthread_mutex_lock(&co->lock); }
void fl__coord_unlock(fl_coord *co) { pthread_mutex_unlock(&co->lock); }

/* Checks every field; the message names the first bad one. */
static fl_status config_check(const fl_coord_config *c, char *msg, size_t n) {
#define BAD(...) do { snprintf(msg, n, __VA_ARGS__); return FL_ERR_MISUSE; } while (0)
    if (c->struct_size != sizeof(fl_coord_config))
        BAD("config.struct_size: call fl_coord_config_init()");
    if (!c->listen_address || !*c->listen_address)
        BAD("config.listen_address is required");
    if (c->port > 65535)
        BAD("config.port must be 0..65535");
    if (c->threads < 1 || c->threads > 256)
        BAD("config.threads must be 1..256");
    if (!c->db_path || !*c->db_path)
        BAD("config.db_path is required");
    if ((c->tls_cert_pem == NULL) != (c->tls_key_pem == NULL))
        BAD("config.tls_cert_pem and config.tls_key_pem go together");
    const fl_coord_limits *l = &c->limits;
    if (l->enroll_bytes < 64 || l->enroll_bytes > (1u << 20))
        BAD("config.limits.enroll_bytes must be 64..1048576");
    if (l->checkin_bytes < 64 || l->checkin_bytes > (1u << 20))
        BAD("config.limits.checkin_bytes must be 64..1048576");
    if (l->admin_json_bytes < 1024 || l->admin_json_bytes > (16u << 20))
        BAD("config.limits.admin_json_bytes must be 1024..16777216");
    if (l->model_bytes < 1 || l->model_bytes > 1000000000u)
        BAD("config.limits.model_bytes must be 1..1000000000");
    if (l->connection_timeout_s < 1 || l->connection_timeout_s > 3600)
        BAD("config.limits.connection_timeout_s must be 1..3600");
    if (l->max_connections < 16 || l->max_connections > 1000000)
        BAD("config.limits.max_connections must be 16..1000000");
    if (l->connection_memory < 8192 || l->connection_memory > (1u << 20))
        BAD("config.limits.connection_memory must be 8192..1048576");
    if (c->max_long_poll_s > 60)
        BAD("config.max_long_poll_s must be 0..60");
    if (c->request_deadline_s > 3600)
        BAD("config.request_deadline_s must be 0..3600");
    if (c->request_min_body_rate < 1024 || c->request_min_body_rate > 1000000000u)
        BAD("config.request_min_body_rate must be 1024..1000000000");
    if (c->secagg_unmask_threads < 1 || c->secagg_unmask_threads > 64)
        BAD("config.secagg_unmask_threads must be 1..64");
    if (c->shutdown_drain_s > 300)
        BAD("config.shutdown_drain_s must be 0..300");
    if (c->db_busy_timeout_ms > 600000)
        BAD("config.db_busy_timeout_ms must be 0..600000");
#undef BAD
    return FL_OK;
}

static void store_log_forward(void *user, fl_log_level level, const char *msg) {
    fl_coord *co = user;
    fl__log(&co->logger, level, "%s", msg); /* storage prefixes its own */
}

static int64_t store_clock(void *user) {
    return fl__coord_now((const fl_coord *)user);
}

fl_status fl_coord_create(fl_coord **out, const fl_coord_config *cfg, char *errmsg,
                          size_t errmsg_len) {
    char local[256];
    if (!errmsg || errmsg_len == 0) {
        errmsg = local;
        errmsg_len = sizeof(local);
    }
    errmsg[0] = '\0';
    if (!out || !cfg) {
        snprintf(errmsg, errmsg_len, "out and cfg are required");
        return FL_ERR_MISUSE;
    }
    *out = NULL;
    fl_status rc = config_check(cfg, errmsg, errmsg_len);
    if (rc != FL_OK)
        return rc;
    if (sodium_init() < 0) {
        snprintf(errmsg, errmsg_len, "libsodium failed to initialise");
        return FL_ERR_CRYPTO;
    }
    fl_allocator alloc;
    rc = fl__allocator_copy(&alloc, cfg->allocator);
    if (rc != FL_OK) {
        snprintf(errmsg, errmsg_len, "config.allocator is invalid");
        return rc;
    }
    fl_coord *co = fl__calloc(&alloc, 1, sizeof(*co));
    if (!co) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return FL_ERR_NOMEM;
    }
    co->alloc = alloc;
    co->quiesced_fd = -1;
    pthread_mutex_init(&co->lock, NULL);
    co->logger = cfg->logger;
    co->port_cfg = cfg->port;
    co->threads = cfg->threads;
    co->limits = cfg->limits;
    co->request_deadline_s = cfg->request_deadline_s;
    co->request_min_body_rate = cfg->request_min_body_rate;
    co->unmask_threads = cfg->secagg_unmask_threads;
    co->drain_s = cfg->shutdown_drain_s;
    co->max_long_poll_s = cfg->max_long_poll_s;
    co->clock = cfg->clock;
    co->clock_user = cfg->clock_user;
    co->has_admin = cfg->has_admin_token != 0;
    memcpy(co->admin_hash, cfg->admin_token_sha256, 32);
    co->listen_address = fl__strdup(&co->alloc, cfg->listen_address);
    co->db_path = fl__strdup(&co->alloc, cfg->db_path);
    co->tls_cert = fl__strdup(&co->alloc, cfg->tls_cert_pem);
    co->tls_key = fl__strdup(&co->alloc, cfg->tls_key_pem);
    if (!co->listen_address || !co->db_path || (cfg->tls_cert_pem && !co->tls_cert) ||
        (cfg->tls_key_pem && !co->tls_key)) {
        snprintf(errmsg, errmsg_len, "out of memory");
        rc = FL_ERR_NOMEM;
        goto out_fail;
    }
    uint8_t seed[32];
    if (cfg->has_signing_key)
        memcpy(seed, cfg->signing_seed, 32);
    else
        randombytes_buf(seed, 32);
    /* Posted bodies are told apart by a Poly1305 tag (fl__coord_body_tag); a NULL MAC (no
     * provider offers it) falls back to libsodium's. */
    co->body_mac = EVP_MAC_fetch(NULL, "POLY1305", NULL);
    randombytes_buf(co->body_mac_key, sizeof(co->body_mac_key));
    crypto_sign_seed_keypair(co->sign_pk, co->sign_sk, seed);
    uint8_t h[32];
    fl__coord_sha256(h, co->sign_pk, 32);
    fl__coord_hex(co->key_id, h, 8);
    rc = fl__coord_audit_setup(co, cfg, seed, errmsg, errmsg_len);
    fl_memzero(seed, sizeof(seed));
    if (rc != FL_OK)
        goto out_fail;

    fl_store_config sc;
    fl_store_config_init(&sc);
    sc.allocator = cfg->allocator;
    sc.logger.fn = co->logger.fn ? store_log_forward : NULL;
    sc.logger.user = co;
    sc.logger.min_level = co->logger.min_level;
    sc.max_model_bytes = co->limits.model_bytes;
    sc.busy_timeout_ms = (int)cfg->db_busy_timeout_ms;
    sc.clock = store_clock;
    sc.clock_user = co;
    rc = fl_store_open(&co->store, co->db_path, &sc);
    if (rc != FL_OK) {
        snprintf(errmsg, errmsg_len, "opening database %s: %s", co->db_path,
                 fl_store_errmsg(co->store));
        goto out_fail;
    }
    rc = fl__coord_auth_cache_create(co);
    if (rc != FL_OK) {
        snprintf(errmsg, errmsg_len, "out of memory");
        goto out_fail;
    }
    rc = fl__coord_pops_load_all(co);
    if (rc != FL_OK) {
        snprintf(errmsg, errmsg_len, "loading populations: %s", fl__err_msg(&co->err));
        goto out_fail;
    }
    fl__coord_audit_checkpoint(co); /* covers rounds abandoned at restart */
    fl__log(&co->logger, FL_LOG_INFO, "coordinator ready: %zu population(s), key id %s",
            co->n_pops, co->key_id);
    *out = co;
    return FL_OK;
out_fail:
    fl_coord_destroy(co);
    return rc;
}

fl_status fl_coord_start(fl_coord *co) {
    if (!co)
        return FL_ERR_MISUSE;
    if (co->daemon || atomic_load(&co->stopped))
        return fl__err_set(&co->err, FL_ERR_STATE, "already started or stopped");
    co->started_at = fl__coord_now(co);
    fl_status rc = fl__coord_http_start(co);
    if (rc != FL_OK)
        return rc;
    atomic_store(&co->ready, true);
    fl__log(&co->logger, FL_LOG_INFO, "listening on %s:%u (%s, %u threads)", co->listen_address,
            co->port, co->tls_cert ? "https" : "http", co->threads);
    return FL_OK;
}

unsigned fl_coord_port(const fl_coord *co) {
    return co ? co->port : 0;
}

int64_t fl_coord_tick(fl_coord *co) {
    if (!co || atomic_load(&co->stopped))
        return 1000;
    int64_t now = fl__coord_now(co);
    fl__coord_lock(co);
    fl__coord_tick_pops(co, now);
    fl__coord_audit_tick(co, now);
    fl__coord_waiters_expire(co, fl__coord_mono_ms());
    fl__coord_unlock(co);
    return 100;
}

void fl_coord_stop(fl_coord *co) {
    if (!co)
        return;
    bool was = atomic_exchange(&co->stopped, true);
    atomic_store(&co->ready, false);
    if (was)
        return;
    /* Refuse new connections, answer parked long polls (503) and let requests already in
     * flight finish (answered 503 too) before the daemon goes away: stopping it at once
     * would close those connections unanswered. Resumed polls get up to 2 s whatever
     * drain_s says; everything else up to drain_s. */
    fl__coord_http_quiesce(co);
    fl__coord_lock(co);
    fl__coord_waiters_expire(co, INT64_MAX);
    fl__coord_unlock(co);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms =
            (int64_t)(now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        bool polls = atomic_load(&co->draining) > 0 && ms < 2000;
        bool requests = atomic_load(&co->inflight) > 0 && ms < (int64_t)co->drain_s * 1000;
        if (!polls && !requests)
            break;
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&co->inflight) > 0)
        fl__log(&co->logger, FL_LOG_WARN, "stopping with %d request(s) unfinished after %u s",
                atomic_load(&co->inflight), co->drain_s);
    fl__coord_http_stop(co);
    fl__coord_lock(co);
    for (size_t i = 0; i < co->n_pops; i++)
        if (co->pops[i]->round)
            fl__coord_round_abandon(co, co->pops[i], "coordinator shutting down");
    fl__coord_audit_checkpoint(co); /* clean shutdown: the log is fully signed */
    fl__coord_unlock(co);
    fl__log(&co->logger, FL_LOG_INFO, "coordinator stopped");
}

void fl_coord_destroy(fl_coord *co) {
    if (!co)
        return;
    if (co->daemon)
        fl_coord_stop(co);
    for (size_t i = 0; i < co->n_pops; i++)
        fl__coord_pop_free(co, co->pops[i]);
    fl__free(&co->alloc, co->pops, co->cap_pops * sizeof(*co->pops));
    fl__coord_auth_cache_destroy(co);
    fl_store_close(co->store);
    if (co->listen_address)
        fl__free(&co->alloc, co->listen_address, strlen(co->listen_address) + 1);
    if (co->db_path)
        fl__free(&co->alloc, co->db_path, strlen(co->db_path) + 1);
    if (co->tls_key) {
        size_t n = strlen(co->tls_key) + 1;
        fl_memzero(co->tls_key, n);
        fl__free(&co->alloc, co->tls_key, n);
    }
    if (co->tls_cert)
        fl__free(&co->alloc, co->tls_cert, strlen(co->tls_cert) + 1);
    fl_memzero(co->sign_sk, sizeof(co->sign_sk));
    fl_memzero(co->pseudonym_key, sizeof(co->pseudonym_key));
    fl_memzero(co->body_mac_key, sizeof(co->body_mac_key));
    EVP_MAC_free(co->body_mac);
    pthread_mutex_destroy(&co->lock);
    fl_allocator alloc = co->alloc;
    fl__free(&alloc, co, sizeof(*co));
}

const char *fl_coord_errmsg(const fl_coord *co) {
    return co ? fl__err_msg(&co->err) : "no coordinator handle";
}

void fl_coord_public_key(const fl_coord *co, uint8_t pk[FL_COORD_PUBLIC_KEY_BYTES],
                         char key_id[FL_COORD_KEY_ID_BYTES]) {
    if (!co)
        return;
    if (pk)
        memcpy(pk, co->sign_pk, 32);
    if (key_id)
        memcpy(key_id, co->key_id, FL_COORD_KEY_ID_BYTES);
}

fl_status fl_coord_signed_message(uint8_t *out, size_t out_len, size_t *written,
                                  const char *context, uint64_t id, const void *body,
                                  size_t body_len) {
    if (!out || !written || !context || (!body && body_len))
        return FL_ERR_MISUSE;
    if (strcmp(context, "flotilla/v1/task") != 0 && strcmp(context, "flotilla/v1/model") != 0)
        return FL_ERR_MISUSE;
    size_t need = strlen(context) + 1 + 8 + 32;
    if (out_len < need)
        return FL_ERR_MISUSE;
    uint8_t h[32], msg[FL__COORD_SIGNED_MAX];
    crypto_hash_sha256(h, body, body_len);
    fl__coord_signed_message_h(msg, written, context, id, h);
    memcpy(out, msg, *written);
    return FL_OK;
}

void fl__coord_debug_hook_set(fl_coord *co, fl__coord_debug_sum_fn fn, void *user) {
    fl__coord_lock(co);
    co->debug_sum = fn;
    co->debug_user = user;
    fl__coord_unlock(co);
}

void fl__coord_debug_unmask_hook_set(fl_coord *co, fl__coord_debug_unmask_fn fn, void *user) {
    fl__coord_lock(co);
    co->debug_unmask = fn;
    co->debug_unmask_user = user;
    fl__coord_unlock(co);
}

uint64_t fl__coord_debug_unmask_threaded(fl_coord *co) {
    fl__coord_lock(co);
    uint64_t n = co->unmask_threaded;
    fl__coord_unlock(co);
    return n;
}

size_t fl__coord_debug_kept_slots(fl_coord *co, const char *client_id, size_t *with_data) {
    size_t n = 0, data = 0;
    static const uint8_t zero[sizeof(((struct fl__coord_participant *)0)->hash)];
    fl__coord_lock(co);
    for (size_t i = 0; i < co->n_pops; i++) {
        const struct fl__coord_pop *p = co->pops[i];
        const struct fl__coord_round *kept[FL__COORD_ROUNDS_KEPT] = {p->last};
        for (size_t j = 0; j < FL__COORD_ROUNDS_KEPT - 1; j++)
            kept[j + 1] = p->older[j];
        for (size_t j = 0; j < FL__COORD_ROUNDS_KEPT; j++)
            for (size_t q = 0; kept[j] && q < kept[j]->n; q++) {
                const struct fl__coord_participant *pt = &kept[j]->parts[q];
                if (strcmp(pt->client_id, client_id) != 0)
                    continue;
                n++;
                bool any = pt->pid[0] != '\0' || memcmp(pt->hash, zero, sizeof(zero)) != 0;
                for (int k = 0; k < FL__PH_COUNT; k++)
                    any = any || pt->result[k] != NULL;
                data += any;
            }
    }
    fl__coord_unlock(co);
    if (with_data)
        *with_data = data;
    return n;
}

void fl__coord_debug_task_model_set(fl_coord *co, fl__coord_debug_task_model_fn fn,
                                    void *user) {
    fl__coord_lock(co);
    co->debug_task_model = fn;
    co->debug_task_model_user = user;
    fl__coord_unlock(co);
}
