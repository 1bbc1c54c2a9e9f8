/* In-memory coordinator for tests and flotilla-sim (see mini_coord.h). */

#include "mini_coord.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "flotilla/secagg.h"
#include "flotilla/tensor.h"

#define MC_CHECK(x)                                                                            \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "mini_coord: %s:%d: %s\n", __FILE__, __LINE__, #x);                \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

struct mc_client {
    char token[96];        /* client token */
    int64_t round;         /* round it was selected for, 0 = none */
    uint32_t index;        /* index in that round */
    char pid[33];          /* participation id */
    uint8_t posted[5];     /* phase posted in the current round */
    uint8_t hash[5][32];   /* SHA-256 of what was posted */
};

struct mc_coord {
    mc_config cfg;
    char population[65];
    uint8_t pk[32], sk[64];
    char key_id[17];
    char enroll_token[64];
    struct mc_client *cl;
    size_t n_cl, cap_cl;
    uint8_t *model;
    size_t model_len;
    int64_t version;
    size_t n_layers;
    size_t n_params;
    /* round */
    int64_t next_round_id;
    int64_t round_id;       /* 0 = none forming or running */
    int started;
    uint32_t n_sel;
    size_t *sel;            /* (round_size) client slots */
    fl_secagg_server *srv;
    int phase;              /* 0..4 open phase, 5 = done */
    int64_t phase_deadline;
    uint32_t *acc;          /* plain: sum of updates mod 2^b (length L) */
    uint32_t plain_count;
    size_t L;               /* update vector length */
    int64_t last_round_id;  /* last finished round */
    char last_state[16];
    int64_t last_new_version;
    uint32_t last_participants;
    /* faults */
    int tamper, strip;
    uint8_t old_pk[32];
    void (*cap_fn)(void *, const void *, size_t);
    void *cap_user;
    mc_stats st;
};

struct mc_conn {
    mc_coord *mc;
    int fail_n, fail_after;
    int status;
    char hdr[4][160];
    int n_hdr;
    uint8_t *body;
    size_t len;
    int pending;
    int fail_now;
};

static int64_t mc_now(mc_coord *mc) {
    return mc->cfg.clock ? mc->cfg.clock(mc->cfg.clock_user) : 0;
}

void mc_config_init(mc_config *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->population = "sim";
    cfg->round_size = 3;
    cfg->min_clients = 2;
    cfg->secagg = 1;
    cfg->dp_mode = "none";
    cfg->clip_norm = 10.0;
    cfg->granularity = 1.0 / 65536;
    cfg->modulus_bits = 32;
    cfg->epochs = 1;
    cfg->batch_size = 16;
    cfg->learning_rate = 0.05;
    cfg->max_examples = 1000;
    cfg->retry_after_s = 5;
    cfg->phase_timeout_ms = 60000;
    cfg->seed = 1;
}

static void keypair(mc_coord *mc, uint64_t seed) {
    uint8_t s[32] = {0};
    memcpy(s, &seed, sizeof(seed));
    s[31] = 0x5a;
    crypto_sign_seed_keypair(mc->pk, mc->sk, s);
    fl_client_key_id(mc->key_id, mc->pk);
}

mc_coord *mc_create(const mc_config *cfg) {
    MC_CHECK(sodium_init() >= 0);
    mc_coord *mc = calloc(1, sizeof(*mc));
    MC_CHECK(mc);
    mc->cfg = *cfg;
    snprintf(mc->population, sizeof(mc->population), "%s", cfg->population);
    mc->cfg.population = mc->population;
    keypair(mc, cfg->seed);
    memcpy(mc->old_pk, mc->pk, 32);
    snprintf(mc->enroll_token, sizeof(mc->enroll_token), "flp_mini-coordinator-enrollment-%016" PRIx64,
             cfg->seed);
    mc->model = malloc(cfg->model_len);
    MC_CHECK(mc->model);
    memcpy(mc->model, cfg->model, cfg->model_len);
    mc->model_len = cfg->model_len;
    mc->version = 1;
    mc->st.model_version = 1;
    fl_client_trainer *tr = NULL;
    MC_CHECK(fl_client_trainer_create(&tr, mc->model, mc->model_len, NULL) == FL_OK);
    mc->n_params = fl_client_trainer_num_params(tr);
    fl_client_trainer_destroy(tr);
    fl_safetensors *st = NULL;
    MC_CHECK(fl_safetensors_create(&st, NULL) == FL_OK);
    MC_CHECK(fl_safetensors_parse(st, mc->model, mc->model_len) == FL_OK);
    mc->n_layers = fl_safetensors_count(st) / 2;
    fl_safetensors_destroy(st);
    mc->L = mc->n_params + 1;
    mc->sel = calloc(cfg->round_size, sizeof(size_t));
    MC_CHECK(mc->sel);
    mc->next_round_id = 100;
    return mc;
}

static void round_clear(mc_coord *mc) {
    fl_secagg_server_destroy(mc->srv);
    mc->srv = NULL;
    free(mc->acc);
    mc->acc = NULL;
    mc->round_id = 0;
    mc->started = 0;
    mc->n_sel = 0;
    mc->phase = 0;
    mc->plain_count = 0;
}

void mc_destroy(mc_coord *mc) {
    if (!mc)
        return;
    round_clear(mc);
    free(mc->sel);
    free(mc->cl);
    free(mc->model);
    free(mc);
}

void mc_public_key(const mc_coord *mc, uint8_t pk[32]) {
    memcpy(pk, mc->old_pk, 32);
}

const char *mc_enrollment_token(const mc_coord *mc) {
    return mc->enroll_token;
}

void mc_rotate_key_unpinned(mc_coord *mc) {
    keypair(mc, mc->cfg.seed + 1000003);
}

void mc_tamper_models(mc_coord *mc, int on) {
    mc->tamper = on;
}

void mc_strip_signatures(mc_coord *mc, int on) {
    mc->strip = on;
}

void mc_set_capture(mc_coord *mc, void (*fn)(void *, const void *, size_t), void *user) {
    mc->cap_fn = fn;
    mc->cap_user = user;
}

void mc_get_stats(const mc_coord *mc, mc_stats *out) {
    *out = mc->st;
    out->model_version = (uint64_t)mc->version;
    out->last_participants = mc->last_participants;
}

const uint8_t *mc_model(const mc_coord *mc, size_t *len) {
    *len = mc->model_len;
    return mc->model;
}

/* ---- responses ---- */

static void reply(mc_conn *c, int status, const char *ctype, const void *body, size_t len) {
    free(c->body);
    c->body = NULL;
    c->status = status;
    c->n_hdr = 0;
    c->len = len;
    if (len) {
        c->body = malloc(len);
        MC_CHECK(c->body);
        memcpy(c->body, body, len);
    }
    if (ctype)
        snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Content-Type: %s", ctype);
}

static void reply_json(mc_conn *c, int status, const char *json) {
    reply(c, status, "application/json", json, strlen(json));
}

static void reply_error(mc_conn *c, int status, const char *code, int retry_after) {
    char b[256];
    snprintf(b, sizeof(b), "{\"error\":{\"status\":%d,\"code\":\"%s\",\"message\":\"%s\"}}",
             status, code, code);
    reply_json(c, status, b);
    if (retry_after >= 0)
        snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Retry-After: %d", retry_after);
}

static void sign_reply(mc_coord *mc, mc_conn *c, const char *context, uint64_t id) {
    uint8_t h[32], msg[64], sig[64];
    crypto_hash_sha256(h, c->body, c->len);
    size_t cl = strlen(context);
    memcpy(msg, context, cl);
    msg[cl] = 0;
    for (int i = 0; i < 8; i++)
        msg[cl + 1 + i] = (uint8_t)(id >> (8 * i));
    memcpy(msg + cl + 9, h, 32);
    crypto_sign_detached(sig, NULL, msg, cl + 41, mc->sk);
    if (mc->strip)
        return;
    char hex[65], b64[100];
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    sodium_bin2base64(b64, sizeof(b64), sig, 64, sodium_base64_VARIANT_ORIGINAL);
    snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Flotilla-Content-SHA256: %s", hex);
    snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Flotilla-Signature: %s", b64);
    snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Flotilla-Key-Id: %s", mc->key_id);
}

/* ---- state helpers ---- */

static struct mc_client *auth(mc_coord *mc, const char *bearer) {
    if (!bearer)
        return NULL;
    for (size_t i = 0; i < mc->n_cl; i++)
        if (strcmp(mc->cl[i].token, bearer) == 0)
            return &mc->cl[i];
    return NULL;
}

static void finish_round(mc_coord *mc, const char *state) {
    mc->last_round_id = mc->round_id;
    snprintf(mc->last_state, sizeof(mc->last_state), "%s", state);
    if (strcmp(state, "completed") == 0)
        mc->st.rounds_completed++;
    else
        mc->st.rounds_aborted++;
    round_clear(mc);
}

/* Applies sum (L words, count clients, weight sum in the last word) as FedAvg. */
static void aggregate(mc_coord *mc, const uint32_t *sum, uint32_t count) {
    uint32_t bits = mc->cfg.modulus_bits;
    uint64_t mod = bits >= 32 ? (UINT64_C(1) << 32) : (UINT64_C(1) << bits);
    double W = (double)sum[mc->L - 1];
    if (W <= 0)
        W = count;
    fl_client_trainer *tr = NULL;
    MC_CHECK(fl_client_trainer_create(&tr, mc->model, mc->model_len, NULL) == FL_OK);
    float *p = malloc(mc->n_params * sizeof(float));
    MC_CHECK(p);
    MC_CHECK(fl_client_trainer_get_params(tr, p, mc->n_params) == FL_OK);
    for (size_t i = 0; i < mc->n_params; i++) {
        int64_t v = (int64_t)sum[i];
        if ((uint64_t)v >= mod / 2)
            v -= (int64_t)mod; /* centred lift */
        p[i] += (float)((double)v * mc->cfg.granularity / W);
    }
    MC_CHECK(fl_client_trainer_set_params(tr, p, mc->n_params) == FL_OK);
    size_t len = 0;
    fl_client_trainer_save(tr, NULL, 0, &len);
    uint8_t *m = malloc(len);
    MC_CHECK(m);
    MC_CHECK(fl_client_trainer_save(tr, m, len, &len) == FL_OK);
    fl_client_trainer_destroy(tr);
    free(p);
    free(mc->model);
    mc->model = m;
    mc->model_len = len;
    mc->version++;
    mc->last_new_version = mc->version;
    mc->last_participants = count;
}

static void start_round(mc_coord *mc) {
    mc->started = 1;
    mc->phase = 0;
    mc->phase_deadline = mc_now(mc) + mc->cfg.phase_timeout_ms;
    if (mc->cfg.secagg) {
        fl_secagg_config sc;
        fl_secagg_config_init(&sc);
        sc.num_clients = mc->n_sel;
        sc.dim = (uint32_t)mc->L;
        sc.bits = mc->cfg.modulus_bits;
        sc.degree = mc->n_sel - 1;
        MC_CHECK(fl_secagg_config_resolve(&sc, NULL, 0) == FL_OK);
        uint8_t seed[32] = {0};
        memcpy(seed, &mc->round_id, 8);
        MC_CHECK(fl_secagg_server_create(&mc->srv, &sc, (uint64_t)mc->round_id, seed, NULL) ==
                 FL_OK);
    } else {
        mc->acc = calloc(mc->L, sizeof(uint32_t));
        MC_CHECK(mc->acc);
    }
}

/* Closes the open secagg phase (all answered or deadline) and moves on. */
static void advance(mc_coord *mc) {
    fl_status rc = fl_secagg_server_advance(mc->srv);
    if (rc != FL_OK) {
        finish_round(mc, "aborted");
        return;
    }
    fl_secagg_phase ph = fl_secagg_server_phase(mc->srv);
    mc->phase_deadline = mc_now(mc) + mc->cfg.phase_timeout_ms;
    if (ph == FL_SECAGG_PHASE_DONE) {
        const uint32_t *sum;
        size_t dim;
        uint32_t count;
        MC_CHECK(fl_secagg_server_result(mc->srv, &sum, &dim, &count) == FL_OK);
        aggregate(mc, sum, count);
        finish_round(mc, "completed");
        return;
    }
    mc->phase = ph == FL_SECAGG_PHASE_SHARE_KEYS     ? 1
                : ph == FL_SECAGG_PHASE_MASKED_INPUT ? 2
                : ph == FL_SECAGG_PHASE_CONSISTENCY  ? 3
                                                     : 4;
}

static void close_plain(mc_coord *mc) {
    if (mc->plain_count >= mc->cfg.min_clients) {
        aggregate(mc, mc->acc, mc->plain_count);
        finish_round(mc, "completed");
    } else {
        finish_round(mc, "aborted");
    }
}

void mc_tick(mc_coord *mc) {
    if (!mc->round_id || !mc->started || mc_now(mc) < mc->phase_deadline)
        return;
    if (mc->cfg.secagg)
        advance(mc);
    else
        close_plain(mc);
}

/* ---- endpoints ---- */

static void h_enroll(mc_coord *mc, mc_conn *c, const char *bearer) {
    if (!bearer || strcmp(bearer, mc->enroll_token) != 0) {
        reply_error(c, 401, "unauthorized", -1);
        return;
    }
    if (mc->n_cl == mc->cap_cl) {
        mc->cap_cl = mc->cap_cl ? mc->cap_cl * 2 : 64;
        mc->cl = realloc(mc->cl, mc->cap_cl * sizeof(*mc->cl));
        MC_CHECK(mc->cl);
    }
    struct mc_client *k = &mc->cl[mc->n_cl];
    memset(k, 0, sizeof(*k));
    uint8_t r[32];
    randombytes_buf(r, sizeof(r));
    char b64[64];
    sodium_bin2base64(b64, sizeof(b64), r, 32, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    snprintf(k->token, sizeof(k->token), "flc_%016zx.%s", mc->n_cl, b64);
    char body[512];
    snprintf(body, sizeof(body),
             "{\"client_id\":\"%016zx\",\"client_token\":\"%s\",\"population\":\"%s\","
             "\"coordinator_key_id\":\"%s\",\"protocol\":\"flotilla/v1\"}",
             mc->n_cl, k->token, mc->population, mc->key_id);
    mc->n_cl++;
    reply_json(c, 201, body);
}

static void selected_body(mc_coord *mc, struct mc_client *k, char *b, size_t n) {
    snprintf(b, n,
             "{\"status\":\"selected\",\"round_id\":%" PRId64 ",\"participation_id\":\"%s\","
             "\"task_url\":\"/v1/rounds/%" PRId64 "/task\",\"model_url\":\"/v1/models/%s/%" PRId64
             "\"}",
             k->round, k->pid, k->round, mc->population, mc->version);
}

static void h_checkin(mc_coord *mc, mc_conn *c, struct mc_client *k) {
    char b[1024];
    mc->st.checkins++;
    if (k->round && k->round == mc->round_id) {
        selected_body(mc, k, b, sizeof(b));
        reply_json(c, 200, b);
        return;
    }
    if (!mc->round_id) {
        mc->round_id = mc->next_round_id++;
        mc->n_sel = 0;
    }
    if (mc->started || mc->n_sel >= mc->cfg.round_size) {
        snprintf(b, sizeof(b), "{\"status\":\"retry\",\"retry_after_s\":%u,\"reason\":\"%s\"}",
                 mc->cfg.retry_after_s, "round_full");
        reply_json(c, 200, b);
        snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Retry-After: %u", mc->cfg.retry_after_s);
        return;
    }
    k->round = mc->round_id;
    k->index = mc->n_sel;
    memset(k->posted, 0, sizeof(k->posted));
    uint8_t r[16];
    randombytes_buf(r, sizeof(r));
    sodium_bin2hex(k->pid, sizeof(k->pid), r, 16);
    mc->sel[mc->n_sel++] = (size_t)(k - mc->cl);
    selected_body(mc, k, b, sizeof(b));
    reply_json(c, 200, b);
    if (mc->n_sel == mc->cfg.round_size)
        start_round(mc);
}

static int participant(mc_coord *mc, mc_conn *c, struct mc_client *k, int64_t rid,
                       const char *idem) {
    if (!idem) {
        reply_error(c, 400, "missing_field", -1);
        return 0;
    }
    if (k->round != rid || strcmp(idem, k->pid) != 0) {
        reply_error(c, 403, "not_a_participant", -1);
        return 0;
    }
    (void)mc;
    return 1;
}

static void h_task(mc_coord *mc, mc_conn *c, struct mc_client *k, int64_t rid) {
    char tensors[2048] = "", *p = tensors;
    for (size_t l = 1; l <= mc->n_layers; l++)
        p += snprintf(p, sizeof(tensors) - (size_t)(p - tensors), "%s\"fc%zu.weight\",\"fc%zu.bias\"",
                      l > 1 ? "," : "", l, l);
    uint8_t sid[32] = {0};
    memcpy(sid, &rid, 8);
    char sid64[64];
    sodium_bin2base64(sid64, sizeof(sid64), sid, 32, sodium_base64_VARIANT_ORIGINAL);
    char body[8192];
    snprintf(body, sizeof(body),
             "{\"protocol\":\"flotilla/v1\",\"population\":\"%s\",\"round_id\":%" PRId64
             ",\"kind\":\"sync\",\"model\":{\"version\":%" PRId64 ",\"url\":\"/v1/models/%s/%" PRId64
             "\",\"bytes\":%zu},\"training\":{\"epochs\":%u,\"batch_size\":%u,"
             "\"learning_rate\":%.17g,\"max_examples\":%u,\"optimizer\":\"sgd\","
             "\"proximal_mu\":%.17g},\"update\":{\"tensors\":[%s],\"length\":%zu,"
             "\"weighting\":\"%s\",\"weight_cap\":1000},\"dp\":{\"mode\":\"%s\","
             "\"clip_norm\":%.17g,\"clip_kind\":\"flat\",\"modulus_bits\":%u,"
             "\"granularity\":%.17g,\"rotation\":{\"kind\":\"none\"}},"
             "\"secagg\":{\"enabled\":%s,\"session_id\":\"%s\",\"client_index\":%u,"
             "\"num_clients\":%u,\"neighbors\":%u,\"modulus_bits\":%u,\"vector_length\":%zu},"
             "\"deadlines\":{\"advertise_unix_ms\":0}}",
             mc->population, rid, mc->version, mc->population, mc->version, mc->model_len,
             mc->cfg.epochs, mc->cfg.batch_size, mc->cfg.learning_rate, mc->cfg.max_examples,
             mc->cfg.proximal_mu, tensors, mc->L,
             mc->cfg.weighting_examples ? "examples" : "uniform", mc->cfg.dp_mode,
             mc->cfg.clip_norm, mc->cfg.modulus_bits, mc->cfg.granularity,
             mc->cfg.secagg ? "true" : "false", sid64, k->index, mc->cfg.round_size,
             mc->cfg.round_size - 1, mc->cfg.modulus_bits, mc->L);
    reply_json(c, 200, body);
    sign_reply(mc, c, "flotilla/v1/task", (uint64_t)rid);
}

static void h_model(mc_coord *mc, mc_conn *c, int64_t ver) {
    if (ver != mc->version) {
        reply_error(c, 404, "not_found", -1);
        return;
    }
    reply(c, 200, "application/octet-stream", mc->model, mc->model_len);
    sign_reply(mc, c, "flotilla/v1/model", (uint64_t)ver);
    if (mc->tamper)
        c->body[c->len / 2] ^= 1;
}

static const char *const phases[5] = {"advertise", "share", "masked", "consistency", "unmask"};

static void h_phase_post(mc_coord *mc, mc_conn *c, struct mc_client *k, int ph,
                         const uint8_t *body, size_t len) {
    uint8_t h[32];
    crypto_hash_sha256(h, body, len);
    if (k->posted[ph]) {
        if (memcmp(h, k->hash[ph], 32) == 0)
            reply_json(c, 200, "{\"accepted\":true}");
        else
            reply_error(c, 409, "already_submitted", -1);
        return;
    }
    if (!mc->started || ph > mc->phase) {
        reply_error(c, 425, "phase_not_open", 0);
        return;
    }
    if (ph < mc->phase) {
        reply_error(c, 410, "round_closed", -1);
        return;
    }
    if (fl_secagg_server_receive(mc->srv, k->index, body, len) != FL_OK) {
        reply_error(c, 400, "invalid_message", -1);
        return;
    }
    k->posted[ph] = 1;
    memcpy(k->hash[ph], h, 32);
    reply_json(c, 202, "{\"accepted\":true}");
    if (fl_secagg_server_pending(mc->srv) == 0)
        advance(mc);
}

static void outcome_json(mc_coord *mc, mc_conn *c) {
    char b[256];
    snprintf(b, sizeof(b),
             "{\"round_id\":%" PRId64 ",\"state\":\"%s\",\"new_model_version\":%" PRId64
             ",\"participants\":%u,\"reason\":null}",
             mc->last_round_id, mc->last_state, mc->last_new_version, mc->last_participants);
    reply_json(c, 200, b);
}

static void h_phase_result(mc_coord *mc, mc_conn *c, struct mc_client *k, int ph, int64_t rid) {
    if (rid == mc->last_round_id && rid != mc->round_id) {
        if (ph == 4 || strcmp(mc->last_state, "completed") != 0)
            outcome_json(mc, c);
        else
            reply_error(c, 410, "round_closed", -1);
        return;
    }
    if (!mc->started || mc->phase <= ph) {
        reply(c, 204, NULL, NULL, 0);
        snprintf(c->hdr[c->n_hdr++], sizeof(c->hdr[0]), "Retry-After: 0");
        return;
    }
    const uint8_t *m;
    size_t ml;
    if (fl_secagg_server_outgoing(mc->srv, k->index, &m, &ml) != FL_OK) {
        reply_error(c, 410, "round_closed", -1);
        return;
    }
    reply(c, 200, "application/octet-stream", m, ml);
}

static void h_update(mc_coord *mc, mc_conn *c, struct mc_client *k, const uint8_t *body,
                     size_t len) {
    uint8_t h[32];
    crypto_hash_sha256(h, body, len);
    if (k->posted[2]) {
        reply_json(c, memcmp(h, k->hash[2], 32) == 0 ? 200 : 409, "{\"accepted\":true}");
        return;
    }
    if (!mc->started) {
        reply_error(c, 425, "phase_not_open", 0);
        return;
    }
    size_t wb = mc->cfg.modulus_bits <= 32 ? 4 : 8;
    if (len != mc->L * wb || wb != 4) {
        reply_error(c, 400, "invalid_message", -1);
        return;
    }
    for (size_t i = 0; i < mc->L; i++) {
        uint32_t v = (uint32_t)body[4 * i] | (uint32_t)body[4 * i + 1] << 8 |
                     (uint32_t)body[4 * i + 2] << 16 | (uint32_t)body[4 * i + 3] << 24;
        mc->acc[i] += v;
        if (mc->cfg.modulus_bits < 32)
            mc->acc[i] &= (1u << mc->cfg.modulus_bits) - 1;
    }
    k->posted[2] = 1;
    memcpy(k->hash[2], h, 32);
    mc->plain_count++;
    reply_json(c, 202, "{\"accepted\":true}");
    if (mc->plain_count == mc->n_sel)
        close_plain(mc);
}

static void h_status(mc_coord *mc, mc_conn *c, int64_t rid) {
    if (rid == mc->last_round_id && rid != mc->round_id) {
        outcome_json(mc, c);
        return;
    }
    char b[128];
    snprintf(b, sizeof(b), "{\"round_id\":%" PRId64 ",\"state\":\"%s\"}", rid,
             mc->started ? "masked" : "forming");
    reply_json(c, 200, b);
}

static void dispatch(mc_coord *mc, mc_conn *c, const fl_client_request *req) {
    const char *bearer = NULL, *idem = NULL;
    for (size_t i = 0; i < req->n_headers; i++) {
        const char *h = req->headers[i];
        if (strncmp(h, "Authorization: Bearer ", 22) == 0)
            bearer = h + 22;
        else if (strncmp(h, "Idempotency-Key: ", 17) == 0)
            idem = h + 17;
    }
    const char *path = req->path;
    int post = strcmp(req->method, "POST") == 0;
    mc->st.requests++;
    if (post && strcmp(path, "/v1/enroll") == 0) {
        h_enroll(mc, c, bearer);
        return;
    }
    struct mc_client *k = auth(mc, bearer);
    if (!k) {
        reply_error(c, 401, "unauthorized", -1);
        return;
    }
    if (post && strcmp(path, "/v1/checkin") == 0) {
        h_checkin(mc, c, k);
        return;
    }
    int64_t rid = 0, ver = 0;
    char rest[128] = "";
    int n = 0;
    char pop[80];
    if (sscanf(path, "/v1/models/%79[^/]/%" SCNd64 "%n", pop, &ver, &n) == 2 &&
        path[n] == '\0') {
        if (strcmp(pop, mc->population) != 0)
            reply_error(c, 404, "not_found", -1);
        else
            h_model(mc, c, ver);
        return;
    }
    if (sscanf(path, "/v1/rounds/%" SCNd64 "/%127s", &rid, rest) != 2) {
        reply_error(c, 404, "not_found", -1);
        return;
    }
    int finished = rid == mc->last_round_id && rid != mc->round_id;
    if (!finished && rid != mc->round_id) {
        reply_error(c, 410, "round_closed", -1);
        return;
    }
    if (!participant(mc, c, k, rid, idem))
        return;
    if (strcmp(rest, "task") == 0 && !post) {
        if (finished)
            reply_error(c, 410, "round_closed", -1);
        else
            h_task(mc, c, k, rid);
        return;
    }
    if (strcmp(rest, "status") == 0 && !post) {
        h_status(mc, c, rid);
        return;
    }
    if (strcmp(rest, "update") == 0 && post) {
        if (finished)
            reply_error(c, 410, "round_closed", -1);
        else
            h_update(mc, c, k, req->body, req->body_len);
        return;
    }
    for (int ph = 0; ph < 5; ph++) {
        char want[64];
        snprintf(want, sizeof(want), "secagg/%s", phases[ph]);
        size_t wl = strlen(want);
        if (strncmp(rest, want, wl) != 0)
            continue;
        if (post && rest[wl] == '\0') {
            if (finished)
                reply_error(c, 410, "round_closed", -1);
            else
                h_phase_post(mc, c, k, ph, req->body, req->body_len);
            return;
        }
        if (!post && strncmp(rest + wl, "/result", 7) == 0) {
            h_phase_result(mc, c, k, ph, rid);
            return;
        }
    }
    reply_error(c, 404, "not_found", -1);
}

/* ---- transport ---- */

static void capture(mc_coord *mc, const void *d, size_t n) {
    if (mc->cap_fn && n)
        mc->cap_fn(mc->cap_user, d, n);
}

static fl_status conn_send(void *ctx, const fl_client_request *req) {
    mc_conn *c = ctx;
    mc_coord *mc = c->mc;
    capture(mc, req->method, strlen(req->method));
    capture(mc, req->path, strlen(req->path));
    for (size_t i = 0; i < req->n_headers; i++)
        capture(mc, req->headers[i], strlen(req->headers[i]));
    capture(mc, req->body, req->body_len);
    c->pending = 1;
    c->fail_now = 0;
    if (c->fail_n > 0) {
        c->fail_n--;
        c->fail_now = 1;
        if (!c->fail_after)
            return FL_OK; /* lost before the server saw it */
    }
    dispatch(mc, c, req);
    return FL_OK;
}

static fl_status conn_recv(void *ctx, fl_client_response *resp) {
    mc_conn *c = ctx;
    if (!c->pending)
        return FL_ERR_MISUSE;
    c->pending = 0;
    if (c->fail_now)
        return FL_ERR_IO;
    fl_status rc = fl_client_response_set_status(resp, c->status);
    for (int i = 0; i < c->n_hdr && rc == FL_OK; i++) {
        const char *h = c->hdr[i], *colon = strchr(h, ':');
        capture(c->mc, h, strlen(h));
        rc = fl_client_response_add_header(resp, h, (size_t)(colon - h), colon + 1,
                                           strlen(colon + 1));
    }
    capture(c->mc, c->body, c->len);
    /* Deliver in pieces, as a network would. */
    for (size_t off = 0; off < c->len && rc == FL_OK; off += 1000)
        rc = fl_client_response_append(resp, c->body + off,
                                       c->len - off < 1000 ? c->len - off : 1000);
    return rc;
}

static void conn_cancel(void *ctx) {
    ((mc_conn *)ctx)->pending = 0;
}

mc_conn *mc_connect(mc_coord *mc, fl_client_transport *tp) {
    mc_conn *c = calloc(1, sizeof(*c));
    MC_CHECK(c);
    c->mc = mc;
    memset(tp, 0, sizeof(*tp));
    tp->struct_size = sizeof(*tp);
    tp->send = conn_send;
    tp->recv = conn_recv;
    tp->cancel = conn_cancel;
    tp->ctx = c;
    return c;
}

void mc_conn_free(mc_conn *c) {
    if (!c)
        return;
    free(c->body);
    free(c);
}

void mc_conn_fail_next(mc_conn *c, int n, int after_server) {
    c->fail_n = n;
    c->fail_after = after_server;
}
