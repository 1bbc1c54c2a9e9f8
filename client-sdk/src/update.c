/* Task config parsing and the private update pipeline (docs/protocol.md 4.2 and 5.1):
 * delta = trained - global over update.tensors, weighting, L2 clip, quantization to the
 * integer lattice of step gamma with unbiased randomized rounding, distributed-DP noise,
 * reduction modulo 2^b, and the trailing weight coordinate. */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "client_round.h"
#include "flotilla/dp.h"

#define FL_SECAGG_MAX_DIM_FALLBACK (INT64_C(1) << 31) /* longest update vector accepted */

/* ---- task config ---- */

#define TASK_TOKENS 4096

static bool name_ok(const char *s, size_t max, const char *extra) {
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr(extra, c)))
            return false;
    }
    return true;
}

/* Gets an integer field in [lo, hi]; absent gives def unless required. */
static bool get_int(const struct fl__client_json *j, long obj, const char *key, int64_t lo,
                    int64_t hi, int64_t def, bool required, int64_t *out) {
    long t = fl__client_json_get(j, obj, key);
    if (t < 0) {
        *out = def;
        return !required;
    }
    int64_t v;
    if (!fl__client_json_int(j, t, &v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool get_num(const struct fl__client_json *j, long obj, const char *key, double lo,
                    double hi, double def, bool required, double *out) {
    long t = fl__client_json_get(j, obj, key);
    if (t < 0) {
        *out = def;
        return !required;
    }
    double v;
    if (!fl__client_json_num(j, t, &v) || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

static bool get_seed(const struct fl__client_json *j, long t, uint8_t out[32]) {
    char b64[64];
    return fl__client_json_str(j, t, b64, sizeof(b64)) && fl__client_unbase64(out, 32, b64);
}

void fl__client_task_free(struct fl__client_task *t, const fl_allocator *a) {
    if (t->tensors)
        fl__free(a, t->tensors, t->tensors_bytes);
    if (t->clip_norms)
        fl__free(a, t->clip_norms, t->n_tensors * sizeof(double));
    fl_memzero(t, sizeof(*t));
}

#define BAD(field) do { what = field; goto bad; } while (0)

fl_status fl__client_task_parse(struct fl__client_task *t, const char *body, size_t len,
                                int64_t round_id, const char *population,
                                const fl_allocator *a, struct fl__err *err) {
    memset(t, 0, sizeof(*t));
    struct fl__client_jtok *tok = fl__alloc_array(a, TASK_TOKENS, sizeof(*tok));
    if (!tok)
        return fl__err_set(err, FL_ERR_NOMEM, "out of memory parsing the task");
    struct fl__client_json j;
    const char *what = NULL;
    fl_status rc = fl__client_json_parse(&j, body, len, tok, TASK_TOKENS);
    if (rc != FL_OK) {
        fl__err_set(err, FL_ERR_FORMAT, "task config is not a JSON object of at most %d tokens",
                    TASK_TOKENS);
        goto out;
    }
    char s[FL__CLIENT_NAME_MAX + 1];
    int64_t iv;
    bool bv;
    if (!fl__client_json_str(&j, fl__client_json_get(&j, 0, "protocol"), s, sizeof(s)) ||
        strcmp(s, "flotilla/v1") != 0)
        BAD("protocol (must be flotilla/v1)");
    if (!fl__client_json_str(&j, fl__client_json_get(&j, 0, "population"), s, sizeof(s)) ||
        strcmp(s, population) != 0)
        BAD("population (not this client's)");
    if (!get_int(&j, 0, "round_id", 1, (INT64_C(1) << 53) - 1, 0, true, &t->round_id) ||
        t->round_id != round_id)
        BAD("round_id (not the round this client was selected for)");
    if (!fl__client_json_str(&j, fl__client_json_get(&j, 0, "kind"), s, sizeof(s)) ||
        (strcmp(s, "sync") != 0 && strcmp(s, "buffered") != 0))
        BAD("kind");
    t->buffered = strcmp(s, "buffered") == 0;

    long m = fl__client_json_get(&j, 0, "model");
    if (fl__client_json_kind(&j, m) != FL__J_OBJECT)
        BAD("model");
    if (!get_int(&j, m, "version", 1, (INT64_C(1) << 53) - 1, 0, true, &t->model_version))
        BAD("model.version");
    long ms = fl__client_json_get(&j, m, "sha256");
    if (ms >= 0) {
        char hex[72];
        if (!fl__client_json_str(&j, ms, hex, sizeof(hex)) ||
            !fl__client_unhex(t->model_sha256, 32, hex))
            BAD("model.sha256");
        t->has_model_sha256 = 1;
    }
    if (!get_int(&j, m, "bytes", 1, (INT64_C(1) << 53) - 1, 0, false, &t->model_bytes))
        BAD("model.bytes");
    if (!fl__client_json_str(&j, fl__client_json_get(&j, m, "url"), t->model_url,
                             sizeof(t->model_url)) ||
        strncmp(t->model_url, "/v1/", 4) != 0 || !name_ok(t->model_url, FL__CLIENT_URL_MAX, "/_.-"))
        BAD("model.url");

    long tr = fl__client_json_get(&j, 0, "training");
    fl_client_train_params_init(&t->train);
    if (tr >= 0 && fl__client_json_kind(&j, tr) != FL__J_OBJECT)
        BAD("training");
    if (!get_int(&j, tr, "epochs", 1, 1000, 1, false, &iv))
        BAD("training.epochs");
    t->train.epochs = (uint32_t)iv;
    if (!get_int(&j, tr, "batch_size", 1, 65536, 32, false, &iv))
        BAD("training.batch_size");
    t->train.batch_size = (uint32_t)iv;
    if (!get_num(&j, tr, "learning_rate", 0, 1e6, 0.05, false, &t->train.learning_rate))
        BAD("training.learning_rate");
    if (!get_int(&j, tr, "max_examples", 1, (INT64_C(1) << 53) - 1, 1000, false, &iv))
        BAD("training.max_examples");
    t->train.max_examples = (uint64_t)iv;
    if (!get_num(&j, tr, "proximal_mu", 0, 1e6, 0.0, false, &t->train.proximal_mu))
        BAD("training.proximal_mu");
    long opt = fl__client_json_get(&j, tr, "optimizer");
    if (opt >= 0 && (!fl__client_json_str(&j, opt, s, sizeof(s)) || strcmp(s, "sgd") != 0))
        BAD("training.optimizer (only sgd)");

    long up = fl__client_json_get(&j, 0, "update");
    long tl = fl__client_json_get(&j, up, "tensors");
    if (fl__client_json_kind(&j, tl) != FL__J_ARRAY || j.tok[tl].count == 0 ||
        j.tok[tl].count > FL_CLIENT_MAX_TENSORS)
        BAD("update.tensors (1..256 names)");
    t->n_tensors = j.tok[tl].count;
    /* One block: the pointer table, then the NUL-terminated names. */
    size_t names = 0;
    for (size_t i = 0; i < t->n_tensors; i++) {
        long e = fl__client_json_at(&j, tl, i);
        if (!fl__client_json_str(&j, e, s, sizeof(s)) || !*s)
            BAD("update.tensors (names of 1..128 bytes)");
        names += strlen(s) + 1;
    }
    t->tensors_bytes = t->n_tensors * sizeof(char *) + names;
    t->tensors = fl__alloc(a, t->tensors_bytes);
    if (!t->tensors) {
        rc = fl__err_set(err, FL_ERR_NOMEM, "out of memory for the tensor list");
        t->tensors_bytes = 0;
        goto out;
    }
    char *p = (char *)(t->tensors + t->n_tensors);
    for (size_t i = 0; i < t->n_tensors; i++) {
        fl__client_json_str(&j, fl__client_json_at(&j, tl, i), s, sizeof(s));
        for (size_t k = 0; k < i; k++)
            if (strcmp(t->tensors[k], s) == 0)
                BAD("update.tensors (duplicate name)");
        size_t n = strlen(s) + 1;
        memcpy(p, s, n);
        t->tensors[i] = p;
        p += n;
    }
    if (!get_int(&j, up, "length", 2, FL_SECAGG_MAX_DIM_FALLBACK, 0, true, &t->update_length))
        BAD("update.length");
    if (!get_int(&j, up, "dim", 1, FL_SECAGG_MAX_DIM_FALLBACK - 1, 0, true, &t->update_dim))
        BAD("update.dim");
    if (!fl__client_json_str(&j, fl__client_json_get(&j, up, "weighting"), s, sizeof(s)) ||
        (strcmp(s, "uniform") != 0 && strcmp(s, "examples") != 0))
        BAD("update.weighting");
    t->weighting_examples = strcmp(s, "examples") == 0;
    if (!get_int(&j, up, "weight_cap", 1, INT64_C(1) << 31, 1000, false, &t->weight_cap))
        BAD("update.weight_cap");

    long dp = fl__client_json_get(&j, 0, "dp");
    if (fl__client_json_kind(&j, dp) != FL__J_OBJECT ||
        !fl__client_json_str(&j, fl__client_json_get(&j, dp, "mode"), s, sizeof(s)))
        BAD("dp.mode");
    if (strcmp(s, "none") == 0)
        t->dp_mode = FL__DP_NONE;
    else if (strcmp(s, "central") == 0)
        t->dp_mode = FL__DP_CENTRAL;
    else if (strcmp(s, "distributed") == 0)
        t->dp_mode = FL__DP_DISTRIBUTED;
    else
        BAD("dp.mode");
    if (!get_num(&j, dp, "clip_norm", 1e-30, 1e9, 1.0, false, &t->clip_norm))
        BAD("dp.clip_norm");
    long ck = fl__client_json_get(&j, dp, "clip_kind");
    if (ck >= 0) {
        if (!fl__client_json_str(&j, ck, s, sizeof(s)) ||
            (strcmp(s, "flat") != 0 && strcmp(s, "per_layer") != 0))
            BAD("dp.clip_kind");
        t->clip_per_layer = strcmp(s, "per_layer") == 0;
    }
    if (t->clip_per_layer) {
        long cn = fl__client_json_get(&j, dp, "clip_norms");
        if (fl__client_json_kind(&j, cn) != FL__J_ARRAY || j.tok[cn].count != t->n_tensors)
            BAD("dp.clip_norms (one bound per update tensor)");
        t->clip_norms = fl__alloc_array(a, t->n_tensors, sizeof(double));
        if (!t->clip_norms) {
            rc = fl__err_set(err, FL_ERR_NOMEM, "out of memory for clip_norms");
            goto out;
        }
        for (size_t i = 0; i < t->n_tensors; i++)
            if (!fl__client_json_num(&j, fl__client_json_at(&j, cn, i), &t->clip_norms[i]) ||
                !(t->clip_norms[i] > 0))
                BAD("dp.clip_norms");
    }
    if (!get_int(&j, dp, "modulus_bits", 1, 62, 32, false, &iv))
        BAD("dp.modulus_bits");
    t->modulus_bits = (uint32_t)iv;
    if (!get_num(&j, dp, "granularity", 1e-30, 1e9, 1.0 / 1024, false, &t->granularity))
        BAD("dp.granularity");
    if (!get_num(&j, dp, "beta", 0, 0.999999, exp(-0.5), false, &t->beta))
        BAD("dp.beta");
    bool dist = t->dp_mode == FL__DP_DISTRIBUTED;
    if (!get_num(&j, dp, "client_sigma", 0, 1e9, 0, false, &t->client_sigma))
        BAD("dp.client_sigma");
    if (!get_int(&j, dp, "client_variance_num", 1, (INT64_C(1) << 53) - 1, 0, dist, &iv))
        BAD("dp.client_variance_num");
    t->client_var_num = (uint64_t)iv;
    if (!get_int(&j, dp, "client_variance_den", 1, (INT64_C(1) << 53) - 1, 0, dist, &iv))
        BAD("dp.client_variance_den");
    t->client_var_den = (uint64_t)iv;
    if (!get_int(&j, dp, "min_survivors", 1, 1 << 30, 0, dist, &iv))
        BAD("dp.min_survivors");
    t->min_survivors = (uint32_t)iv;
    long rot = fl__client_json_get(&j, dp, "rotation");
    if (rot >= 0) {
        if (fl__client_json_kind(&j, rot) != FL__J_OBJECT ||
            !fl__client_json_str(&j, fl__client_json_get(&j, rot, "kind"), s, sizeof(s)) ||
            (strcmp(s, "none") != 0 && strcmp(s, "hadamard") != 0))
            BAD("dp.rotation.kind");
        t->rotation_hadamard = strcmp(s, "hadamard") == 0;
        if (t->rotation_hadamard &&
            !get_seed(&j, fl__client_json_get(&j, rot, "seed"), t->rotation_seed))
            BAD("dp.rotation.seed (base64 of 32 bytes)");
    }
    /* v1: the Hadamard rotation goes with distributed DP and only with it (4.2). */
    if (dist != (t->rotation_hadamard != 0))
        BAD("dp.rotation (hadamard with distributed mode, none otherwise)");
    long qs = fl__client_json_get(&j, dp, "quantization_seed");
    uint8_t qseed[32];
    if (qs >= 0 && !get_seed(&j, qs, qseed))
        BAD("dp.quantization_seed (base64 of 32 bytes)");

    long sa = fl__client_json_get(&j, 0, "secagg");
    if (fl__client_json_kind(&j, sa) != FL__J_OBJECT ||
        !fl__client_json_bool(&j, fl__client_json_get(&j, sa, "enabled"), &bv))
        BAD("secagg.enabled");
    t->secagg = bv;
    if (t->secagg) {
        uint8_t sid[32];
        if (!get_seed(&j, fl__client_json_get(&j, sa, "session_id"), sid))
            BAD("secagg.session_id");
        if (!get_int(&j, sa, "num_clients", 2, 65536, 0, true, &iv))
            BAD("secagg.num_clients");
        t->sa_clients = (uint32_t)iv;
        if (!get_int(&j, sa, "client_index", 0, t->sa_clients - 1, 0, true, &iv))
            BAD("secagg.client_index");
        t->sa_index = (uint32_t)iv;
        if (!get_int(&j, sa, "neighbors", 0, t->sa_clients - 1, 0, true, &iv))
            BAD("secagg.neighbors");
        t->sa_neighbors = (uint32_t)iv;
        if (!get_int(&j, sa, "threshold", 1, t->sa_clients, 0, true, &iv))
            BAD("secagg.threshold");
        t->sa_threshold = (uint32_t)iv;
        if (!get_int(&j, sa, "modulus_bits", 1, 32, t->modulus_bits, false, &iv) ||
            (uint32_t)iv != t->modulus_bits || t->modulus_bits > 32)
            BAD("secagg.modulus_bits (must equal dp.modulus_bits, at most 32)");
        if (!get_int(&j, sa, "vector_length", 2, FL_SECAGG_MAX_DIM_FALLBACK, 0, true,
                     &t->sa_vector_length) ||
            t->sa_vector_length != t->update_length)
            BAD("secagg.vector_length (must equal update.length)");
        /* Norm proofs (protocol 1.2, section 5.1): the device proves its update's norm. */
        long np = fl__client_json_get(&j, sa, "norm_proof");
        if (np >= 0) {
            int64_t nb, nd, b2, wm;
            if (fl__client_json_kind(&j, np) != FL__J_OBJECT ||
                !get_int(&j, np, "bits", 2, 32, 0, true, &nb) ||
                !get_int(&j, np, "dim", 0, t->update_length, 0, true, &nd) ||
                !get_int(&j, np, "bound2", 0, INT64_MAX, 0, true, &b2) ||
                !get_int(&j, np, "weight_max", 0, UINT32_MAX, 0, false, &wm))
                BAD("secagg.norm_proof (bits 2..32, dim <= update.length, bound2 >= 0, "
                    "weight_max 0..2^32-1)");
            t->sa_norm_bits = (uint32_t)nb;
            t->sa_norm_dim = (uint32_t)nd;
            t->sa_norm_bound2 = (uint64_t)b2;
            t->sa_norm_weight_max = (uint32_t)wm;
        }
        /* Active-adversary mode (protocol: populations with secagg.consistency_check). The
         * SDK runs it only with device-bound (v2) certificates, which the coordinator
         * announces with device_certs; v1 certificates name a per-round client index and
         * would need an online authority. */
        bool cc = false, dc = false;
        long ccv = fl__client_json_get(&j, sa, "consistency_check");
        long dcv = fl__client_json_get(&j, sa, "device_certs");
        if (ccv >= 0 && !fl__client_json_bool(&j, ccv, &cc))
            BAD("secagg.consistency_check");
        if (dcv >= 0 && !fl__client_json_bool(&j, dcv, &dc))
            BAD("secagg.device_certs");
        if (cc != dc)
            BAD("secagg.device_certs (active mode is run with device certificates only: "
                "consistency_check and device_certs go together)");
        t->sa_active = cc;
        /* Revealed pairwise seeds (protocol 1.4): unchecked, so never with a bounded input. */
        bool rv = false;
        long rvv = fl__client_json_get(&j, sa, "reveal_pair_seeds");
        if (rvv >= 0 && (!fl__client_json_bool(&j, rvv, &rv) || (rv && np >= 0)))
            BAD("secagg.reveal_pair_seeds (a boolean, not with norm_proof)");
        t->sa_reveal_seeds = rv;
    }
    long dl = fl__client_json_get(&j, 0, "deadlines");
    static const char *const dn[5] = {"advertise_unix_ms", "share_unix_ms", "masked_unix_ms",
                                      "consistency_unix_ms", "unmask_unix_ms"};
    for (int k = 0; k < 5; k++)
        if (!get_int(&j, dl, dn[k], 0, (INT64_C(1) << 53) - 1, 0, false, &t->deadlines[k]))
            BAD("deadlines");
    rc = FL_OK;
    goto out;
bad:
    rc = fl__err_set(err, FL_ERR_FORMAT, "task config: bad or missing field %s", what);
out:
    fl__free(a, tok, TASK_TOKENS * sizeof(*tok));
    if (rc != FL_OK)
        fl__client_task_free(t, a);
    return rc;
}

/* ---- update pipeline ---- */

/* Distributed mode: *delta (d floats) goes into a buffer of L = d' + 1 doubles that
 * fl_dp_distributed_encode_inplace turns into the d' noised words, the delta being freed
 * first unless keep_delta (a test observer wants it); the buffer is then shrunk to the L wire
 * words of wb bytes. On FL_OK *vec is that vector (weight word not yet set). */
static fl_status encode_distributed(void **vec, const struct fl__client_task *t, float **delta,
                                    size_t d, size_t L, size_t wb, double bound, bool keep_delta,
                                    fl_dp_rng *rng, const fl_allocator *a,
                                    const fl_allocator *ea, struct fl__err *err) {
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = d;
    p.clip = bound;
    p.granularity = t->granularity;
    p.beta = t->beta;
    p.modulus_bits = t->modulus_bits;
    p.n_min = t->min_survivors;
    p.sigma2_num = t->client_var_num;
    p.sigma2_den = t->client_var_den;
    /* L doubles: d' for the encoder, and room for L words of 8 bytes when b > 32. */
    double *buf = fl__alloc_array(a, L, sizeof(double));
    if (!buf)
        return fl__err_set(err, FL_ERR_NOMEM, "out of memory for the update vector");
    for (size_t i = 0; i < d; i++)
        buf[i] = (double)(*delta)[i];
    if (!keep_delta) {
        /* The float delta is spent: free it before the encoder runs (memory peak). */
        fl_memzero(*delta, d * sizeof(float));
        fl__free(a, *delta, d * sizeof(float));
        *delta = NULL;
    }
    fl_status rc = fl_dp_distributed_encode_inplace(rng, buf, L, wb, &p, t->rotation_seed, NULL,
                                                    ea);
    if (rc != FL_OK) {
        fl__err_set(err, rc, "distributed DP encoding failed: %s",
                    rc == FL_ERR_MISUSE ? "bad task parameters" : fl_status_str(rc));
        goto out_free;
    }
    if (L * wb == L * sizeof(double)) {
        *vec = buf;
        return FL_OK;
    }
    /* The words are the front of the buffer, the rest is wiped: shrink to the wire size. */
    void *v = fl__realloc(a, buf, L * sizeof(double), L * wb);
    if (!v) {
        rc = fl__err_set(err, FL_ERR_NOMEM, "out of memory for the update vector");
        goto out_free;
    }
    *vec = v;
    return FL_OK;
out_free:
    fl_memzero(buf, L * sizeof(double));
    fl__free(a, buf, L * sizeof(double));
    return rc;
}

/* Builds the vector of docs/protocol.md 5.1 from the task and the trained/global tensors.
 *
 * none/central: clip (flat, or per layer), multiply by the weight w, then
 * fl_dp_central_encode_into with clip = w * C (C the flat bound or the per-layer total): the
 * dp library's central mechanism (scale by 1/gamma, conditional randomised rounding against
 * the exact integer bound) streamed from the float delta straight into the wire words,
 * reduced mod 2^b. distributed: fl_dp_distributed_encode_inplace with the task's exact
 * per-device variance, n_min and rotation seed (clip, pad to d', rotate, round, add the
 * device's discrete Gaussian noise, reduce mod 2^b) on a d'-double buffer that becomes the
 * wire vector; w is 1. In every mode the weight is appended as the last word.
 * Randomness (rounding, noise) comes from the OS CSPRNG through a dp rng. Peak memory, after
 * the caller's model copies are released through src->release: none/central, the d-float
 * delta + the output (2 x 4d with 32-bit words); distributed, the delta + the (d' + 1)-double
 * buffer (4d + 8d'), the delta being freed before the encode, whose only other need is a
 * d'/8-byte bitmap; the buffer is then shrunk to the wire words (4d' with 32-bit words). */
fl_status fl__client_update_build(void **out, size_t *out_len, size_t *word_bytes,
                                  const struct fl__client_task *t,
                                  const struct fl__client_update_src *src, uint64_t examples,
                                  fl__client_update_observer obs, void *obs_user,
                                  const fl_allocator *a, struct fl__err *err) {
    *out = NULL;
    *out_len = 0;
    fl_status rc = FL_OK;
    size_t d = 0, *sizes = NULL, max_t = 0;
    float *delta = NULL, *g = NULL;
    void *vec = NULL;
    fl_dp_rng *rng = NULL;
    const fl_allocator *ea = fl__client_ext_alloc(a);
    size_t L = 0, wb = t->modulus_bits <= 32 ? 4 : 8;
    sizes = fl__calloc(a, t->n_tensors, sizeof(size_t));
    if (!sizes)
        return fl__err_set(err, FL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < t->n_tensors; i++) {
        if (src->get(src->user, t->tensors[i], NULL, NULL, &sizes[i]) != FL_OK) {
            rc = fl__err_set(err, FL_ERR_FORMAT, "update tensor '%.64s' is not in the model",
                             t->tensors[i]);
            goto out;
        }
        if (sizes[i] > ((size_t)1 << 31) - d) {
            rc = fl__err_set(err, FL_ERR_TOO_LARGE, "update vector too long");
            goto out;
        }
        d += sizes[i];
    }
    if (t->update_dim && (size_t)t->update_dim != d) {
        rc = fl__err_set(err, FL_ERR_FORMAT, "task update.dim %lld does not match the model's "
                         "%zu floats", (long long)t->update_dim, d);
        goto out;
    }
    L = (t->dp_mode == FL__DP_DISTRIBUTED ? fl_dp_distributed_padded_dim(d) : d) + 1;
    if (L < 2 || (t->update_length && (size_t)t->update_length != L)) {
        rc = fl__err_set(err, FL_ERR_FORMAT, "task update.length %lld does not match the model "
                         "(%zu)", (long long)t->update_length, L);
        goto out;
    }
    /* (d) delta = trained - global, tensors in update order. */
    delta = fl__alloc_array(a, d, sizeof(float));
    if (!delta) {
        rc = fl__err_set(err, FL_ERR_NOMEM, "out of memory for the delta (%zu floats)", d);
        goto out;
    }
    for (size_t i = 0; i < t->n_tensors; i++)
        max_t = sizes[i] > max_t ? sizes[i] : max_t;
    /* The global values of one tensor at a time: O(largest tensor), not O(d). */
    g = fl__alloc_array(a, max_t, sizeof(float));
    if (!g) {
        rc = fl__err_set(err, FL_ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t off = 0;
    for (size_t i = 0; i < t->n_tensors; i++) {
        size_t n = sizes[i];
        src->get(src->user, t->tensors[i], delta + off, g, &n);
        for (size_t k = 0; k < n; k++) {
            delta[off + k] -= g[k];
            if (!isfinite(delta[off + k])) {
                rc = fl__err_set(err, FL_ERR_RANGE, "the trained model has non-finite values");
                goto out;
            }
        }
        off += n;
    }
    fl__free(a, g, max_t * sizeof(float));
    g = NULL;
    /* The model copies are no longer needed: let the caller free them before the vector. */
    if (src->release)
        src->release(src->user);
    /* Clip: the flat bound C, or each layer to its own bound (overall bound = total). */
    double bound = t->clip_norm;
    if (t->clip_per_layer) {
        rc = fl_dp_clip_l2_layers(delta, d, sizes, t->clip_norms, t->n_tensors, NULL);
        bound = fl_dp_clip_layers_total(t->clip_norms, t->n_tensors);
    } else if (t->dp_mode != FL__DP_DISTRIBUTED) {
        rc = fl_dp_clip_l2(delta, d, bound, NULL); /* the encoder below clips in that mode */
    }
    if (rc != FL_OK) {
        fl__err_set(err, rc, "clipping failed");
        goto out;
    }
    int64_t w = 1;
    if (t->weighting_examples && t->dp_mode != FL__DP_DISTRIBUTED) {
        w = (int64_t)(examples < (uint64_t)t->weight_cap ? examples : (uint64_t)t->weight_cap);
        if (w < 1)
            w = 1;
        for (size_t k = 0; k < d; k++)
            delta[k] = (float)((double)delta[k] * (double)w);
    }
    uint64_t mask = t->modulus_bits >= 64 ? UINT64_MAX : (UINT64_C(1) << t->modulus_bits) - 1;
    if ((uint64_t)w > mask) {
        rc = fl__err_set(err, FL_ERR_RANGE, "weight %lld does not fit in %u bits", (long long)w,
                         t->modulus_bits);
        goto out;
    }
    rc = fl_dp_rng_create_os(&rng, ea);
    if (rc != FL_OK) {
        fl__err_set(err, rc, "could not open the OS random source");
        goto out;
    }
    if (t->dp_mode == FL__DP_DISTRIBUTED) {
        rc = encode_distributed(&vec, t, &delta, d, L, wb, bound, obs != NULL, rng, a, ea, err);
        if (rc != FL_OK)
            goto out;
        goto weight;
    }
    fl_dp_central_params cp;
    fl_dp_central_params_init(&cp);
    cp.clip = (double)w * bound;
    cp.granularity = t->granularity;
    cp.beta = t->beta;
    /* none/central: straight into the wire words, no d-sized workspace. */
    vec = fl__alloc_array(a, L, wb);
    if (!vec) {
        rc = fl__err_set(err, FL_ERR_NOMEM, "out of memory for the update vector");
        goto out;
    }
    rc = fl_dp_central_encode_into(rng, vec, d, wb, t->modulus_bits, delta, d, &cp, NULL);
    if (rc != FL_OK) {
        fl__err_set(err, rc, "quantization failed (%s)",
                    rc == FL_ERR_RANGE ? "values too large for the granularity"
                                       : fl_status_str(rc));
        goto out;
    }
weight:
    if (wb == 4)
        ((uint32_t *)vec)[L - 1] = (uint32_t)w;
    else
        ((uint64_t *)vec)[L - 1] = (uint64_t)w;
    if (obs)
        obs(obs_user, t->round_id, delta, d, vec, L, wb);
    *out = vec;
    *out_len = L;
    *word_bytes = wb;
    vec = NULL;
out:
    fl_dp_rng_destroy(rng);
    if (vec)
        fl__free(a, vec, L * wb);
    if (g)
        fl__free(a, g, max_t * sizeof(float));
    if (delta) {
        fl_memzero(delta, d * sizeof(float));
        fl__free(a, delta, d * sizeof(float));
    }
    fl__free(a, sizes, t->n_tensors * sizeof(size_t));
    return rc;
}
