/* secagg configuration: defaults, validation, (k, t) derivation, size getters, identities. */

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "secagg_internal.h"

/* ---- size getters (each equals its macro; tested) ---- */

size_t fl_secagg_seed_bytes(void) { return FL_SECAGG_SEED_BYTES; }
size_t fl_secagg_verify_key_bytes(void) { return FL_SECAGG_VERIFY_KEY_BYTES; }
size_t fl_secagg_signing_key_bytes(void) { return FL_SECAGG_SIGNING_KEY_BYTES; }
size_t fl_secagg_cert_bytes(void) { return FL_SECAGG_CERT_BYTES; }
size_t fl_secagg_header_bytes(void) { return FL_SECAGG_HEADER_BYTES; }
size_t fl_secagg_max_bits(void) { return FL_SECAGG_MAX_BITS; }
size_t fl_secagg_max_clients(void) { return FL_SECAGG_MAX_CLIENTS; }
size_t fl_secagg_max_dim(void) { return FL_SECAGG_MAX_DIM; }
size_t fl_secagg_max_edges(void) { return FL_SECAGG_MAX_EDGES; }
size_t fl_secagg_context_bytes(void) { return FL_SECAGG_CONTEXT_BYTES; }
size_t fl_secagg_device_id_bytes(void) { return FL_SECAGG_DEVICE_ID_BYTES; }

/* ---- backends ---- */

const struct fl__sa_crypto *fl__sa_backend(fl_secagg_backend b) {
    switch (b) {
    case FL_SECAGG_BACKEND_DEFAULT:
#if defined(FL_SECAGG_DEFAULT_MBEDTLS)
        return fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
#else
        return fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
#endif
    case FL_SECAGG_BACKEND_SODIUM:
        return fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    case FL_SECAGG_BACKEND_MBEDTLS:
        return fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    }
    return NULL;
}

/* ---- (k, t) derivation after Bell et al. (CCS 2020) ----
 * Random Harary graph H(k, n): a client's k neighbours are a uniformly random k-subset of
 * the other clients, so the number of adversarial (or surviving) neighbours follows a
 * hypergeometric law. With A = floor(gamma n) adversarial and D = floor(delta n) dropped
 * clients, sigma = 40 and eta = 20:
 *  - connectivity: removing A + D clients disconnects H(k, n) only if two disjoint runs of
 *    k/2 consecutive ring positions are all removed; a union bound over the < n^2/2 pairs
 *    of runs must stay below 2^-(sigma+1);
 *  - security: t1 = min x with P[adversarial neighbours > x] < 2^-(sigma+1) / n;
 *    semi-malicious servers need 2t > k + adversarial neighbours, so t1 is raised to
 *    ceil((t1 + k - 1.25) / 2);
 *  - correctness: t2 = min r with P[surviving neighbours <= r] >= 2^-eta / n;
 *  - k is the smallest even degree with t1 < t2, and t = max(t1 + 1, 2).
 * The constants (sigma + 1 per event, the 1e-14 guard on floor/ceil) follow the paper's
 * reference parameter finder, so the table in /work/shared/reference agrees exactly. */

#define FL__SA_SIGMA 40.0
#define FL__SA_ETA 20.0
#define FL__SA_RATE_EPS 1e-14
#define FL__SA_DERIVE_MAX_N 1000000u

/* log of the hypergeometric pmf: x marked among k draws from N with K marked. */
static double hyper_lpmf(uint32_t N, uint32_t K, uint32_t k, uint32_t x) {
    if (x > k || x > K || (N - K) < (k - x))
        return -INFINITY;
    return lgamma(K + 1.0) - lgamma(x + 1.0) - lgamma((double)K - x + 1.0) +
           lgamma((double)N - K + 1.0) - lgamma((double)k - x + 1.0) -
           lgamma((double)N - K - k + x + 1.0) - lgamma(N + 1.0) + lgamma(k + 1.0) +
           lgamma((double)N - k + 1.0);
}

/* Smallest x with P[X > x] < q, X ~ Hypergeometric(N, K, k). */
static uint32_t upper_quantile(uint32_t N, uint32_t K, uint32_t k, double q) {
    double tail = 0.0; /* P[X > x] while scanning x downwards */
    uint32_t best = k;
    for (uint32_t x = k + 1; x-- > 0;) {
        if (!(tail < q))
            break;
        best = x;
        tail += exp(hyper_lpmf(N, K, k, x));
    }
    return best;
}

/* Smallest r with P[X <= r] >= q. */
static uint32_t lower_quantile(uint32_t N, uint32_t K, uint32_t k, double q) {
    double cdf = 0.0;
    for (uint32_t r = 0; r <= k; r++) {
        cdf += exp(hyper_lpmf(N, K, k, r));
        if (cdf >= q)
            return r;
    }
    return k;
}

/* Threshold for the complete graph (k = n - 1, every client also holds a share of its own
 * secrets, so n holders): semi-honest t > A, semi-malicious 2t > n + A. */
static uint32_t full_graph_threshold(uint32_t n, uint32_t A, int active) {
    uint32_t t = active ? (n + A) / 2 + 1 : A + 1;
    return t < 2 ? 2 : t;
}

/* Threshold for a given sparse k (the security side only); used when k is overridden. */
static uint32_t sparse_threshold(uint32_t n, uint32_t A, uint32_t k, int active) {
    double t1 = upper_quantile(n, A, k, pow(2.0, -(FL__SA_SIGMA + 1.0)) / n);
    if (active)
        t1 = ceil((t1 + k - 1.25) / 2.0);
    uint32_t t = (uint32_t)t1 + 1;
    if (t < 2)
        t = 2;
    return t > k ? k : t;
}

static int rate_ok(double r) { return isfinite(r) && r >= 0.0 && r < 1.0; }

fl_status fl_secagg_params_derive(uint32_t *degree, uint32_t *threshold, uint32_t n,
                                  double adversarial_rate, double dropout_rate, int active) {
    if (!degree || !threshold || n < 3 || n > FL__SA_DERIVE_MAX_N ||
        !rate_ok(adversarial_rate) || !rate_ok(dropout_rate))
        return FL_ERR_MISUSE;
    uint32_t A = (uint32_t)floor((adversarial_rate + FL__SA_RATE_EPS) * n);
    uint32_t D = (uint32_t)floor((dropout_rate + FL__SA_RATE_EPS) * n);
    uint32_t S = (uint32_t)ceil((1.0 - dropout_rate - FL__SA_RATE_EPS) * n);
    uint32_t B = A + D;
    double log_q_sec = -(FL__SA_SIGMA + 1.0) * log(2.0);
    double q1 = pow(2.0, -(FL__SA_SIGMA + 1.0)) / n;
    double q2 = pow(2.0, -FL__SA_ETA) / n; /* rates in [0, 1) give A <= n and S <= n */
    for (uint32_t k = 2; k + 1 < n; k += 2) {
        if (k <= B) {
            double lp = log((double)n) + log((double)n - k - 1) - log(2.0) + lgamma(B + 1.0) +
                        lgamma((double)n - k + 1.0) - lgamma(n + 1.0) -
                        lgamma((double)B - k + 1.0);
            if (lp >= log_q_sec)
                continue;
        }
        double t1 = upper_quantile(n, A, k, q1);
        uint32_t t2 = lower_quantile(n, S, k, q2);
        if (active)
            t1 = ceil((t1 + k - 1.25) / 2.0);
        if ((double)t2 > t1) {
            uint32_t t = (uint32_t)t1 + 1;
            *degree = k;
            *threshold = t < 2 ? 2 : t;
            return FL_OK;
        }
    }
    /* No sparse graph works: the original protocol on the complete graph. */
    uint32_t t = full_graph_threshold(n, A, active);
    if (t > S) /* S <= n */
        return FL_ERR_RANGE;
    *degree = n - 1;
    *threshold = t;
    return FL_OK;
}

/* ---- configuration ---- */

void fl_secagg_config_init(fl_secagg_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->bits = 32;
    cfg->adversarial_rate = 0.05;
    cfg->dropout_rate = 0.05;
    cfg->backend = FL_SECAGG_BACKEND_DEFAULT;
}

fl_status fl__sa_config_check(fl_secagg_config *out, const fl_secagg_config *in,
                              struct fl__err *err) {
    if (!out || !in)
        return fl__err_set(err, FL_ERR_MISUSE, "config: NULL");
    /* The struct grew at the end: a caller built against the header before `context`
     * passes the older size and gets an all-zero context. */
    if (in->struct_size != sizeof(fl_secagg_config) &&
        in->struct_size != offsetof(fl_secagg_config, context) &&
        in->struct_size != offsetof(fl_secagg_config, norm_bits) &&
        in->struct_size != offsetof(fl_secagg_config, device_certs) &&
        in->struct_size != offsetof(fl_secagg_config, reveal_pair_seeds))
        return fl__err_set(err, FL_ERR_MISUSE, "config.struct_size: %zu, expected %zu",
                           in->struct_size, sizeof(fl_secagg_config));
    fl_secagg_config c;
    memset(&c, 0, sizeof(c));
    memcpy(&c, in, in->struct_size);
    c.struct_size = sizeof(c);
    if (c.num_clients < 3 || c.num_clients > FL_SECAGG_MAX_CLIENTS)
        return fl__err_set(err, FL_ERR_MISUSE, "config.num_clients: %u not in 3..%u",
                           c.num_clients, (unsigned)FL_SECAGG_MAX_CLIENTS);
    if (c.dim < 1 || c.dim > FL_SECAGG_MAX_DIM)
        return fl__err_set(err, FL_ERR_MISUSE, "config.dim: %u not in 1..%u", c.dim,
                           (unsigned)FL_SECAGG_MAX_DIM);
    if (c.bits < 1 || c.bits > FL_SECAGG_MAX_BITS)
        return fl__err_set(err, FL_ERR_MISUSE, "config.bits: %u not in 1..32", c.bits);
    if (!rate_ok(c.adversarial_rate))
        return fl__err_set(err, FL_ERR_MISUSE, "config.adversarial_rate: not in [0, 1)");
    if (!rate_ok(c.dropout_rate))
        return fl__err_set(err, FL_ERR_MISUSE, "config.dropout_rate: not in [0, 1)");
    if (c.active != 0 && c.active != 1)
        return fl__err_set(err, FL_ERR_MISUSE, "config.active: must be 0 or 1");
    if (c.device_certs != 0 && c.device_certs != 1)
        return fl__err_set(err, FL_ERR_MISUSE, "config.device_certs: must be 0 or 1");
    if (c.device_certs && !c.active)
        return fl__err_set(err, FL_ERR_MISUSE,
                           "config.device_certs: device certificates need active = 1");
    if (c.reveal_pair_seeds != 0 && c.reveal_pair_seeds != 1)
        return fl__err_set(err, FL_ERR_MISUSE, "config.reveal_pair_seeds: must be 0 or 1");
    if (c.reveal_pair_seeds && c.norm_bits)
        return fl__err_set(err, FL_ERR_MISUSE,
                           "config.reveal_pair_seeds: unchecked seeds need norm_bits = 0");
    if (c.backend != FL_SECAGG_BACKEND_DEFAULT && c.backend != FL_SECAGG_BACKEND_SODIUM &&
        c.backend != FL_SECAGG_BACKEND_MBEDTLS)
        return fl__err_set(err, FL_ERR_MISUSE, "config.backend: unknown value %d",
                           (int)c.backend);
    const struct fl__sa_crypto *crypto = fl__sa_backend(c.backend);
    if (!crypto)
        return fl__err_set(err, FL_ERR_UNSUPPORTED, "config.backend: not built");
    uint32_t n = c.num_clients;
    if (c.degree == 0) {
        uint32_t k, t;
        fl_status st = fl_secagg_params_derive(&k, &t, n, c.adversarial_rate, c.dropout_rate,
                                               c.active);
        if (st != FL_OK)
            return fl__err_set(err, FL_ERR_MISUSE,
                               "config.degree: no (k, t) satisfies the rates for n = %u", n);
        c.degree = k;
        if (c.threshold == 0)
            c.threshold = t;
    }
    if (!(c.degree == n - 1 || (c.degree % 2 == 0 && c.degree >= 2 && c.degree <= n - 2)))
        return fl__err_set(err, FL_ERR_MISUSE,
                           "config.degree: %u must be n-1 or even in 2..n-2", c.degree);
    if ((uint64_t)n * c.degree > FL_SECAGG_MAX_EDGES)
        return fl__err_set(err, FL_ERR_MISUSE, "config.degree: n * k exceeds %u",
                           (unsigned)FL_SECAGG_MAX_EDGES);
    if (c.threshold == 0) {
        uint32_t A = (uint32_t)floor((c.adversarial_rate + FL__SA_RATE_EPS) * n);
        c.threshold = c.degree == n - 1 ? full_graph_threshold(n, A, c.active)
                                        : sparse_threshold(n, A, c.degree, c.active);
        if (c.threshold > c.degree)
            c.threshold = c.degree;
    }
    if (c.threshold < 2 || c.threshold > c.degree)
        return fl__err_set(err, FL_ERR_MISUSE, "config.threshold: %u not in 2..k (k = %u)",
                           c.threshold, c.degree);
    fl_status nst = fl__sa_norm_config_check(&c, err);
    if (nst != FL_OK)
        return nst;
    *out = c;
    return FL_OK;
}

fl_status fl_secagg_config_resolve(fl_secagg_config *cfg, char *errmsg, size_t errmsg_len) {
    struct fl__err err;
    fl__err_clear(&err);
    fl_secagg_config out;
    fl_status st = fl__sa_config_check(&out, cfg, &err);
    if (st == FL_OK) {
        /* Write back no more than the caller's struct holds. */
        size_t keep = cfg->struct_size;
        out.struct_size = keep;
        memcpy(cfg, &out, keep);
    }
    if (errmsg && errmsg_len > 0)
        snprintf(errmsg, errmsg_len, "%s", st == FL_OK ? "" : fl__err_msg(&err));
    return st;
}

/* ---- message size limits ---- */

size_t fl__sa_msg_limit(const fl_secagg_config *cfg, fl_secagg_msg_type type) {
    size_t k = cfg->degree, n = cfg->num_clients;
    size_t adv = fl__sa_adv_bytes(cfg);
    size_t h = FL_SECAGG_HEADER_BYTES, bm = fl__sa_bitmap_bytes(cfg->num_clients);
    switch (type) {
    case FL_SECAGG_MSG_ADVERTISE:
        return h + adv;
    case FL_SECAGG_MSG_KEYS:
        return h + 56 + k * (4 + adv);
    case FL_SECAGG_MSG_SHARES:
        return h + FL__SA_COMMIT_BYTES + 4 + k * (4 + FL__SA_SHARE_CT_BYTES);
    case FL_SECAGG_MSG_CIPHERTEXTS:
        return h + 4 + k * (4 + FL__SA_SHARE_CT_BYTES);
    case FL_SECAGG_MSG_MASKED_INPUT:
        return h + fl__sa_vec_len(cfg) * fl__sa_elem_bytes(cfg->bits) +
               fl__sa_norm_proof_bytes(cfg);
    case FL_SECAGG_MSG_CONSISTENCY_REQ:
        return h + 4 + bm;
    case FL_SECAGG_MSG_CONSISTENCY_SIG:
        return h + FL__SA_SIG_BYTES;
    case FL_SECAGG_MSG_UNMASK_REQ:
        return h + 4 + bm + 4 + k * (4 + FL__SA_SIG_BYTES);
    case FL_SECAGG_MSG_UNMASK_SHARES:
        return h + 4 + (k + 1) * (4 + 1 + FL__SA_SHARE_Y_BYTES) +
               (cfg->reveal_pair_seeds ? 4 + k * (4 + FL__SA_PAIR_SEED_BYTES) : 0);
    }
    (void)n;
    return 0;
}

size_t fl_secagg_max_message_bytes(const fl_secagg_config *cfg) {
    fl_secagg_config c;
    if (fl__sa_config_check(&c, cfg, NULL) != FL_OK)
        return 0;
    size_t best = 0;
    for (int t = FL_SECAGG_MSG_ADVERTISE; t <= FL_SECAGG_MSG_UNMASK_SHARES; t++) {
        size_t l = fl__sa_msg_limit(&c, (fl_secagg_msg_type)t);
        if (l > best)
            best = l;
    }
    return best;
}

/* ---- identities (active mode) ---- */

fl_status fl_secagg_signing_keygen(uint8_t verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                                   uint8_t signing_key[FL_SECAGG_SIGNING_KEY_BYTES],
                                   fl_secagg_backend backend) {
    if (!verify_key || !signing_key)
        return FL_ERR_MISUSE;
    const struct fl__sa_crypto *c = fl__sa_backend(backend);
    if (!c)
        return FL_ERR_UNSUPPORTED; /* backend not built (every built backend has Ed25519) */
    uint8_t seed[32];
    fl_status st = FL_OK;
    if (c->random(seed, sizeof(seed)) != 0 ||
        c->ed25519_keypair(verify_key, signing_key, seed) != 0) {
        fl_memzero(signing_key, FL_SECAGG_SIGNING_KEY_BYTES);
        st = FL_ERR_CRYPTO;
    }
    fl_memzero(seed, sizeof(seed));
    return st;
}

fl_status fl_secagg_cert_issue(uint8_t cert[FL_SECAGG_CERT_BYTES],
                               const uint8_t authority_key[FL_SECAGG_SIGNING_KEY_BYTES],
                               uint32_t client_index,
                               const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                               fl_secagg_backend backend) {
    if (!cert || !authority_key || !client_verify_key)
        return FL_ERR_MISUSE;
    const struct fl__sa_crypto *c = fl__sa_backend(backend);
    if (!c)
        return FL_ERR_UNSUPPORTED; /* backend not built */
    uint8_t stmt[64];
    size_t len = fl__sa_cert_statement(stmt, sizeof(stmt), client_index, client_verify_key);
    if (c->ed25519_sign(cert, stmt, len, authority_key) != 0)
        return FL_ERR_CRYPTO;
    return FL_OK;
}

/* The v2 statement ("flotilla-secagg-cert-v2" || device_id || vk) for issuing or checking a
 * device certificate, and the backend to sign or verify it with. */
static fl_status device_statement(uint8_t stmt[FL__SA_STMT_BYTES], size_t *len,
                                  const struct fl__sa_crypto **c,
                                  const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
                                  const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                                  fl_secagg_backend backend) {
    /* All zero is what an identity left unset holds: never a device. */
    uint8_t any = 0;
    for (size_t i = 0; i < FL_SECAGG_DEVICE_ID_BYTES; i++)
        any |= device_id[i];
    if (!any)
        return FL_ERR_MISUSE;
    *c = fl__sa_backend(backend);
    if (!*c)
        return FL_ERR_UNSUPPORTED; /* backend not built */
    *len = fl__sa_cert_statement_device(stmt, FL__SA_STMT_BYTES, device_id, client_verify_key);
    return *len ? FL_OK : FL_ERR_CRYPTO;
}

fl_status fl_secagg_cert_issue_device(uint8_t cert[FL_SECAGG_CERT_BYTES],
                                      const uint8_t authority_key[FL_SECAGG_SIGNING_KEY_BYTES],
                                      const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
                                      const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                                      fl_secagg_backend backend) {
    if (!cert || !authority_key || !device_id || !client_verify_key)
        return FL_ERR_MISUSE;
    const struct fl__sa_crypto *c = NULL;
    uint8_t stmt[FL__SA_STMT_BYTES];
    size_t len = 0;
    fl_status rc = device_statement(stmt, &len, &c, device_id, client_verify_key, backend);
    if (rc == FL_OK && c->ed25519_sign(cert, stmt, len, authority_key) != 0)
        rc = FL_ERR_CRYPTO;
    if (rc == FL_ERR_CRYPTO)
        fl_memzero(cert, FL_SECAGG_CERT_BYTES);
    return rc;
}

fl_status fl_secagg_cert_check_device(const uint8_t cert[FL_SECAGG_CERT_BYTES],
                                      const uint8_t authority_vk[FL_SECAGG_VERIFY_KEY_BYTES],
                                      const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
                                      const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                                      fl_secagg_backend backend) {
    if (!cert || !authority_vk || !device_id || !client_verify_key)
        return FL_ERR_MISUSE;
    const struct fl__sa_crypto *c = NULL;
    uint8_t stmt[FL__SA_STMT_BYTES];
    size_t len = 0;
    fl_status rc = device_statement(stmt, &len, &c, device_id, client_verify_key, backend);
    if (rc == FL_OK && c->ed25519_verify(cert, stmt, len, authority_vk) != 0)
        rc = FL_ERR_CRYPTO;
    return rc;
}
