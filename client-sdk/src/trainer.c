/* The built-in trainer: dense networks fc1..fcK with ReLU between layers and softmax
 * cross-entropy on the last, trained with SGD + momentum, weight decay and the FedProx
 * proximal term. Deterministic under a seed: the only randomness is the shuffle, drawn
 * from xoshiro256** seeded with the caller's seed.
 *
 * Memory (d = number of parameters, B = batch, W = sum of layer widths):
 *   arena  (2, d) floats  parameters, then the global reference (FedProx, delta)
 *   work   (2, d) floats  gradients, then momentum; allocated for training only
 *   ws     B * (W + 2 * max width + inputs) floats of activations and batch data. */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

struct fl_client_trainer {
    fl_allocator alloc;                               /* caller's allocator (copied) */
    struct fl__err err;                               /* last error */
    size_t n_layers;                                  /* K */
    struct fl__client_layer layers[FL_CLIENT_MAX_LAYERS]; /* fc1..fcK */
    size_t n_params;                                  /* d */
    size_t max_width;                                 /* widest layer (inputs included) */
    size_t sum_out;                                   /* W = sum of layer outputs */
    float *arena;                                     /* (2, d): params, global */
    float *params;                                    /* (d) = arena */
    float *global;                                    /* (d) = arena + d */
    float *work;                                      /* (2, d): grad, momentum; or NULL */
    float *grad;                                      /* (d) */
    float *mom;                                       /* (d) */
    float *ws;                                        /* batch workspace, ws_cap floats */
    size_t ws_cap;                                    /* floats in ws */
    size_t ws_batch;                                  /* batch size ws was sized for */
};

/* ---- model parsing ---- */

/* Parses "fcN.weight" / "fcN.bias" (N 1..MAX) or "dense.*"; returns N (dense = 1), 0 if the
 * name is not a layer tensor; *is_bias tells which. */
static int layer_index(const char *name, int *is_bias) {
    const char *dot = strchr(name, '.');
    if (!dot)
        return 0;
    const char *suffix = dot + 1;
    if (strcmp(suffix, "weight") == 0)
        *is_bias = 0;
    else if (strcmp(suffix, "bias") == 0)
        *is_bias = 1;
    else
        return 0;
    size_t plen = (size_t)(dot - name);
    if (plen == 5 && strncmp(name, "dense", 5) == 0)
        return -1;
    if (plen < 3 || plen > 4 || strncmp(name, "fc", 2) != 0)
        return 0;
    int n = 0;
    for (size_t i = 2; i < plen; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        n = n * 10 + (name[i] - '0');
    }
    if (name[2] == '0' || n < 1 || n > FL_CLIENT_MAX_LAYERS)
        return 0;
    return n;
}

fl_status fl__client_net_from_safetensors(const fl_safetensors *st, struct fl__client_layer *ly,
                                          size_t *n_layers, size_t *n_params,
                                          struct fl__err *err) {
    fl_tensor_view w[FL_CLIENT_MAX_LAYERS], b[FL_CLIENT_MAX_LAYERS];
    int have_w[FL_CLIENT_MAX_LAYERS] = {0}, have_b[FL_CLIENT_MAX_LAYERS] = {0};
    int dense = 0, fc = 0, maxn = 0;
    size_t count = fl_safetensors_count(st);
    if (count == 0)
        return fl__err_set(err, FL_ERR_FORMAT, "the model has no tensors");
    for (size_t i = 0; i < count; i++) {
        fl_tensor_view v;
        fl_safetensors_at(st, &v, i);
        int is_bias = 0;
        int n = layer_index(v.name, &is_bias);
        if (n == 0)
            return fl__err_set(err, FL_ERR_FORMAT,
                               "tensor '%.64s' is not a layer of the built-in trainer "
                               "(fcN.weight/fcN.bias or dense.weight/dense.bias)", v.name);
        if (v.dtype != FL_DTYPE_F32)
            return fl__err_set(err, FL_ERR_UNSUPPORTED, "tensor '%.64s' is %s, not F32", v.name,
                               fl_dtype_name(v.dtype) ? fl_dtype_name(v.dtype) : "?");
        if (n < 0)
            dense = 1, n = 1;
        else
            fc = 1;
        if (n < 1 || n > FL_CLIENT_MAX_LAYERS)
            return fl__err_set(err, FL_ERR_FORMAT, "bad layer number in '%.64s'", v.name);
        size_t slot = (size_t)(n - 1);
        int *have = is_bias ? &have_b[slot] : &have_w[slot];
        if (*have)
            return fl__err_set(err, FL_ERR_FORMAT, "layer %d appears twice", n);
        *have = 1;
        if (is_bias)
            b[slot] = v;
        else
            w[slot] = v;
        if (n > maxn)
            maxn = n;
    }
    if (dense && fc)
        return fl__err_set(err, FL_ERR_FORMAT, "model mixes dense.* and fcN.* tensors");
    size_t off = 0;
    for (int l = 0; l < maxn; l++) {
        if (!have_w[l] || !have_b[l])
            return fl__err_set(err, FL_ERR_FORMAT, "layer %d lacks its %s", l + 1,
                               have_w[l] ? "bias" : "weight");
        if (w[l].ndim != 2 || b[l].ndim != 1 || w[l].shape[0] != b[l].shape[0] ||
            w[l].shape[0] == 0 || w[l].shape[1] == 0 || w[l].shape[0] > (1u << 24) ||
            w[l].shape[1] > (1u << 24))
            return fl__err_set(err, FL_ERR_FORMAT,
                               "layer %d: weight must be (out, in) and bias (out), 1..2^24", l + 1);
        if (l > 0 && w[l].shape[1] != w[l - 1].shape[0])
            return fl__err_set(err, FL_ERR_FORMAT, "layer %d takes %llu inputs but layer %d has "
                               "%llu outputs", l + 1, (unsigned long long)w[l].shape[1], l,
                               (unsigned long long)w[l - 1].shape[0]);
        struct fl__client_layer *L = &ly[l];
        L->out = (uint32_t)w[l].shape[0];
        L->in = (uint32_t)w[l].shape[1];
        size_t wn = (size_t)L->out * L->in;
        if (off > SIZE_MAX / 8 - wn - L->out)
            return fl__err_set(err, FL_ERR_FORMAT, "model too large");
        L->w_off = off;
        L->b_off = off + wn;
        off += wn + L->out;
        snprintf(L->wname, sizeof(L->wname), "%s", w[l].name);
        snprintf(L->bname, sizeof(L->bname), "%s", b[l].name);
    }
    if (ly[maxn - 1].out < 2)
        return fl__err_set(err, FL_ERR_FORMAT, "the last layer needs at least 2 classes");
    *n_layers = (size_t)maxn;
    *n_params = off;
    return FL_OK;
}

/* ---- lifecycle ---- */

fl_status fl_client_trainer_create(fl_client_trainer **out, const void *model, size_t model_len,
                                   const fl_allocator *alloc) {
    fl_allocator a;
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (!model || model_len == 0 || fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    fl_status rc;
    fl_safetensors *st = NULL;
    fl_client_trainer *tr = fl__calloc(&a, 1, sizeof(*tr));
    if (!tr)
        return FL_ERR_NOMEM;
    tr->alloc = a;
    rc = fl_safetensors_create(&st, fl__client_ext_alloc(&tr->alloc));
    if (rc != FL_OK)
        goto out_fail;
    rc = fl_safetensors_parse(st, model, model_len);
    if (rc != FL_OK) {
        fl__err_set(&tr->err, rc, "model: %s", fl_safetensors_errmsg(st));
        goto out_fail;
    }
    rc = fl__client_net_from_safetensors(st, tr->layers, &tr->n_layers, &tr->n_params, &tr->err);
    if (rc != FL_OK)
        goto out_fail;
    tr->max_width = tr->layers[0].in;
    for (size_t l = 0; l < tr->n_layers; l++) {
        tr->sum_out += tr->layers[l].out;
        if (tr->layers[l].out > tr->max_width)
            tr->max_width = tr->layers[l].out;
    }
    tr->arena = fl__alloc_array(&tr->alloc, tr->n_params, 2 * sizeof(float));
    if (!tr->arena) {
        rc = FL_ERR_NOMEM;
        goto out_fail;
    }
    tr->params = tr->arena;
    tr->global = tr->arena + tr->n_params;
    for (size_t l = 0; l < tr->n_layers; l++) {
        fl_tensor_view v;
        struct fl__client_layer *L = &tr->layers[l];
        fl_safetensors_find(st, &v, L->wname);
        memcpy(tr->params + L->w_off, v.data, v.nbytes); /* may be unaligned in the image */
        fl_safetensors_find(st, &v, L->bname);
        memcpy(tr->params + L->b_off, v.data, v.nbytes);
    }
    memcpy(tr->global, tr->params, tr->n_params * sizeof(float));
    fl_safetensors_destroy(st);
    *out = tr;
    return FL_OK;
out_fail:
    fl_safetensors_destroy(st);
    fl_client_trainer_destroy(tr);
    return rc;
}

void fl__client_trainer_release_work(fl_client_trainer *tr) {
    if (tr->work)
        fl__free(&tr->alloc, tr->work, tr->n_params * 2 * sizeof(float));
    tr->work = tr->grad = tr->mom = NULL;
    if (tr->ws)
        fl__free(&tr->alloc, tr->ws, tr->ws_cap * sizeof(float));
    tr->ws = NULL;
    tr->ws_cap = tr->ws_batch = 0;
}

void fl_client_trainer_destroy(fl_client_trainer *tr) {
    if (!tr)
        return;
    fl__client_trainer_release_work(tr);
    if (tr->arena)
        fl__free(&tr->alloc, tr->arena, tr->n_params * 2 * sizeof(float));
    fl_allocator a = tr->alloc;
    fl__free(&a, tr, sizeof(*tr));
}

const char *fl_client_trainer_errmsg(const fl_client_trainer *tr) {
    return tr ? fl__err_msg(&tr->err) : "no trainer handle";
}

size_t fl_client_trainer_num_params(const fl_client_trainer *tr) {
    return tr ? tr->n_params : 0;
}

size_t fl_client_trainer_num_inputs(const fl_client_trainer *tr) {
    return tr ? tr->layers[0].in : 0;
}

size_t fl_client_trainer_num_classes(const fl_client_trainer *tr) {
    return tr ? tr->layers[tr->n_layers - 1].out : 0;
}

float *fl__client_trainer_params_ptr(fl_client_trainer *tr) {
    return tr->params;
}

const float *fl__client_trainer_global_ptr(const fl_client_trainer *tr) {
    return tr->global;
}

const struct fl__client_layer *fl__client_trainer_layers(const fl_client_trainer *tr, size_t *n) {
    *n = tr->n_layers;
    return tr->layers;
}

void fl_client_train_params_init(fl_client_train_params *p) {
    if (!p)
        return;
    memset(p, 0, sizeof(*p));
    p->struct_size = sizeof(*p);
    p->epochs = 1;
    p->batch_size = 32;
    p->learning_rate = 0.05;
    p->momentum = 0.9;
    p->seed = 1;
}

static fl_status check_params(fl_client_trainer *tr, const fl_client_train_params *p) {
    if (!p || p->struct_size < sizeof(*p))
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "params: call fl_client_train_params_init");
    if (p->epochs < 1 || p->batch_size < 1 || p->batch_size > 65536)
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "params: epochs >= 1, batch_size 1..65536");
    if (!(p->learning_rate >= 0 && p->learning_rate < 1e6) ||
        !(p->momentum >= 0 && p->momentum < 1) ||
        !(p->weight_decay >= 0 && p->weight_decay < 1e6) ||
        !(p->proximal_mu >= 0 && p->proximal_mu < 1e6))
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "params: learning_rate, weight_decay and "
                           "proximal_mu must be finite and >= 0, momentum in [0, 1)");
    return FL_OK;
}

/* ---- workspace ---- */

/* Floats of batch workspace for batch b: activations of every layer, two gradient buffers
 * of the widest layer, and the batch's inputs. */
static size_t ws_floats(const fl_client_trainer *tr, size_t b) {
    return b * (tr->sum_out + 2 * tr->max_width + tr->layers[0].in);
}

static fl_status ensure_ws(fl_client_trainer *tr, size_t b) {
    if (tr->ws && tr->ws_batch >= b)
        return FL_OK;
    size_t need = ws_floats(tr, b);
    if (fl__mul_overflows(need, sizeof(float)) || b > SIZE_MAX / 4 / (tr->sum_out + 1))
        return fl__err_set(&tr->err, FL_ERR_NOMEM, "batch workspace too large");
    float *ws = fl__alloc_array(&tr->alloc, need, sizeof(float));
    if (!ws)
        return fl__err_set(&tr->err, FL_ERR_NOMEM, "out of memory for the batch workspace");
    if (tr->ws)
        fl__free(&tr->alloc, tr->ws, tr->ws_cap * sizeof(float));
    tr->ws = ws;
    tr->ws_cap = need;
    tr->ws_batch = b;
    return FL_OK;
}

/* Activation buffer of layer l for batch capacity ws_batch: (B, out_l). */
static float *act(fl_client_trainer *tr, size_t l) {
    size_t off = 0;
    for (size_t i = 0; i < l; i++)
        off += tr->layers[i].out;
    return tr->ws + off * tr->ws_batch;
}

static float *xbuf(fl_client_trainer *tr) {
    return tr->ws + tr->ws_batch * (tr->sum_out + 2 * tr->max_width);
}

/* ---- forward and backward ---- */

/* Forward pass of b examples x (b, in). Fills activations; the last layer holds logits. */
static void forward(fl_client_trainer *tr, const float *x, size_t b) {
    const float *in = x;
    for (size_t l = 0; l < tr->n_layers; l++) {
        const struct fl__client_layer *L = &tr->layers[l];
        float *z = act(tr, l); /* (b, out) */
        const float *bias = tr->params + L->b_off;
        for (size_t i = 0; i < b; i++)
            memcpy(z + i * L->out, bias, L->out * sizeof(float));
        fl__client_gemm_nt(z, in, tr->params + L->w_off, b, L->out, L->in, 1);
        if (l + 1 < tr->n_layers)
            for (size_t i = 0; i < b * L->out; i++)
                z[i] = z[i] > 0.0f ? z[i] : 0.0f;
        in = z;
    }
}

/* Softmax cross-entropy on the logits (b, C) in place: turns them into
 * scale * (softmax - onehot) and returns the summed loss and the number correct. */
static double softmax_xent(float *logits, const int32_t *y, size_t b, size_t c, float scale,
                           size_t *correct) {
    double loss = 0;
    size_t ok = 0;
    for (size_t i = 0; i < b; i++) {
        float *z = logits + i * c;
        size_t arg = 0;
        float mx = z[0];
        for (size_t j = 1; j < c; j++)
            if (z[j] > mx)
                mx = z[j], arg = j;
        if (arg == (size_t)y[i])
            ok++;
        double sum = 0;
        for (size_t j = 0; j < c; j++) {
            z[j] = expf(z[j] - mx);
            sum += z[j];
        }
        float inv = (float)(1.0 / sum);
        loss += -log((double)z[y[i]] * inv);
        for (size_t j = 0; j < c; j++)
            z[j] = z[j] * inv * scale;
        z[y[i]] -= scale;
    }
    if (correct)
        *correct += ok;
    return loss;
}

/* Accumulates the gradient of scale * (summed loss) of b examples into grad; returns the
 * summed loss. Activations must come from forward() on the same x. */
static double backward(fl_client_trainer *tr, const float *x, const int32_t *y, size_t b,
                       float scale, float *grad) {
    size_t K = tr->n_layers;
    float *dz = act(tr, K - 1); /* logits become dL/dz in place */
    double loss = softmax_xent(dz, y, b, tr->layers[K - 1].out, scale, NULL);
    float *bufs[2] = {tr->ws + tr->ws_batch * tr->sum_out,
                      tr->ws + tr->ws_batch * (tr->sum_out + tr->max_width)};
    for (size_t l = K; l-- > 0;) {
        const struct fl__client_layer *L = &tr->layers[l];
        const float *in = l > 0 ? act(tr, l - 1) : x; /* (b, in) */
        /* dW (out, in) += dz^T (out, b) x in (b, in); db += column sums of dz. */
        fl__client_gemm_tn_acc(grad + L->w_off, dz, in, L->out, L->in, b);
        float *db = grad + L->b_off;
        for (size_t i = 0; i < b; i++) {
            const float *row = dz + i * L->out;
            for (size_t j = 0; j < L->out; j++)
                db[j] += row[j];
        }
        if (l == 0)
            break;
        /* dIn (b, in) = dz (b, out) x W (out, in); ReLU mask from the stored activation. */
        float *din = bufs[l & 1];
        fl__client_gemm_nn(din, dz, tr->params + L->w_off, b, L->in, L->out);
        for (size_t i = 0; i < b * L->in; i++)
            if (in[i] <= 0.0f)
                din[i] = 0.0f;
        dz = din;
    }
    return loss;
}

/* Adds weight decay and the proximal term to grad. */
static void regularize(fl_client_trainer *tr, float *grad, const fl_client_train_params *p) {
    if (!p)
        return;
    float wd = (float)p->weight_decay, mu = (float)p->proximal_mu;
    if (wd == 0.0f && mu == 0.0f)
        return;
    const float *w = tr->params, *g0 = tr->global;
    for (size_t i = 0; i < tr->n_params; i++)
        grad[i] += wd * w[i] + mu * (w[i] - g0[i]);
}

/* Loss including the regularisers (for the gradient check). */
static double reg_loss(const fl_client_trainer *tr, const fl_client_train_params *p) {
    if (!p)
        return 0;
    double s = 0;
    for (size_t i = 0; i < tr->n_params; i++) {
        double w = tr->params[i], d = w - tr->global[i];
        s += 0.5 * p->weight_decay * w * w + 0.5 * p->proximal_mu * d * d;
    }
    return s;
}

static fl_status ensure_work(fl_client_trainer *tr) {
    if (tr->work)
        return FL_OK;
    tr->work = fl__calloc(&tr->alloc, tr->n_params, 2 * sizeof(float));
    if (!tr->work)
        return fl__err_set(&tr->err, FL_ERR_NOMEM, "out of memory for gradients and momentum");
    tr->grad = tr->work;
    tr->mom = tr->work + tr->n_params;
    return FL_OK;
}

/* One SGD step on a batch already in x (b, in) / y. Returns the summed loss in *loss. */
static fl_status sgd_step(fl_client_trainer *tr, const float *x, const int32_t *y, size_t b,
                          const fl_client_train_params *p, double *loss) {
    memset(tr->grad, 0, tr->n_params * sizeof(float));
    forward(tr, x, b);
    *loss = backward(tr, x, y, b, 1.0f / (float)b, tr->grad);
    if (!isfinite(*loss))
        return fl__err_set(&tr->err, FL_ERR_RANGE, "training loss is not finite (diverged)");
    regularize(tr, tr->grad, p);
    float lr = (float)p->learning_rate, m = (float)p->momentum;
    float *w = tr->params, *g = tr->grad, *v = tr->mom;
    for (size_t i = 0; i < tr->n_params; i++) {
        float vi = m * v[i] + g[i];
        /* Momentum of weights whose gradient stays zero (e.g. inputs that are always 0)
         * decays into subnormals, which are 100x slower on x86; flush them to zero. */
        vi = fabsf(vi) < 1e-30f ? 0.0f : vi;
        v[i] = vi;
        w[i] -= lr * vi;
    }
    return FL_OK;
}

static fl_status check_labels(fl_client_trainer *tr, const int32_t *y, size_t n) {
    size_t c = fl_client_trainer_num_classes(tr);
    for (size_t i = 0; i < n; i++)
        if (y[i] < 0 || (size_t)y[i] >= c)
            return fl__err_set(&tr->err, FL_ERR_MISUSE, "label %zu is %d, outside [0, %zu)", i,
                               y[i], c);
    return FL_OK;
}

static void shuffle(size_t *idx, size_t n, struct fl__client_rng *r) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)fl__client_rng_below(r, i);
        size_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

fl_status fl_client_trainer_train(fl_client_trainer *tr, const float *x, const int32_t *y,
                                  size_t n, const fl_client_train_params *p, double *mean_loss) {
    if (!tr)
        return FL_ERR_MISUSE;
    fl__err_clear(&tr->err);
    if (!x || !y || n == 0)
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "x and y must not be NULL and n > 0");
    fl_status rc = check_params(tr, p);
    if (rc == FL_OK)
        rc = check_labels(tr, y, n);
    if (rc != FL_OK)
        return rc;
    size_t use = p->max_examples && p->max_examples < n ? (size_t)p->max_examples : n;
    size_t bs = p->batch_size < use ? p->batch_size : use;
    size_t in = tr->layers[0].in;
    size_t *idx = fl__alloc_array(&tr->alloc, n, sizeof(size_t));
    int32_t *yb = fl__alloc_array(&tr->alloc, bs, sizeof(int32_t));
    if (!idx || !yb) {
        rc = fl__err_set(&tr->err, FL_ERR_NOMEM, "out of memory for the shuffle");
        goto out;
    }
    if ((rc = ensure_work(tr)) != FL_OK || (rc = ensure_ws(tr, bs)) != FL_OK)
        goto out;
    struct fl__client_rng rng;
    fl__client_rng_seed(&rng, p->seed);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    if (use < n)
        shuffle(idx, n, &rng);
    double last = 0;
    for (uint32_t e = 0; e < p->epochs && rc == FL_OK; e++) {
        shuffle(idx, use, &rng);
        double sum = 0;
        for (size_t s = 0; s < use && rc == FL_OK; s += bs) {
            size_t b = use - s < bs ? use - s : bs;
            float *xb = xbuf(tr);
            for (size_t i = 0; i < b; i++) {
                memcpy(xb + i * in, x + idx[s + i] * in, in * sizeof(float));
                yb[i] = y[idx[s + i]];
            }
            double l;
            rc = sgd_step(tr, xb, yb, b, p, &l);
            sum += l;
        }
        last = sum / (double)use;
    }
    if (rc == FL_OK && mean_loss)
        *mean_loss = last;
out:
    if (idx)
        fl__free(&tr->alloc, idx, n * sizeof(size_t));
    if (yb)
        fl__free(&tr->alloc, yb, bs * sizeof(int32_t));
    return rc;
}

fl_status fl__client_trainer_train_store_cb(fl_client_trainer *tr, fl_client_store *st,
                                            const fl_client_train_params *p,
                                            uint64_t *examples_used, double *mean_loss,
                                            int (*cancelled)(void *), void *cancel_user) {
    fl__err_clear(&tr->err);
    fl_status rc = check_params(tr, p);
    if (rc != FL_OK)
        return rc;
    if (fl__client_store_feature_dim(st) != tr->layers[0].in)
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "store feature_dim %u != model inputs %u",
                           fl__client_store_feature_dim(st), tr->layers[0].in);
    rc = fl_client_store_prune(st, NULL);
    if (rc != FL_OK)
        return fl__err_set(&tr->err, rc, "store: %s", fl_client_store_errmsg(st));
    int64_t *ids = NULL;
    size_t n = 0, n_alloc = 0;
    rc = fl__client_store_dense_ids(st, &ids, &n, &n_alloc, &tr->alloc);
    if (rc != FL_OK)
        return fl__err_set(&tr->err, rc, "store: %s", fl_client_store_errmsg(st));
    int32_t *yb = NULL;
    size_t bs = 1, use = n, in = tr->layers[0].in;
    if (n == 0) {
        rc = fl__err_set(&tr->err, FL_ERR_NOT_FOUND, "the example store has no dense examples");
        goto out;
    }
    use = p->max_examples && p->max_examples < n ? (size_t)p->max_examples : n;
    bs = p->batch_size < use ? p->batch_size : use;
    yb = fl__alloc_array(&tr->alloc, bs, sizeof(int32_t));
    if (!yb) {
        rc = fl__err_set(&tr->err, FL_ERR_NOMEM, "out of memory for labels");
        goto out;
    }
    if ((rc = ensure_work(tr)) != FL_OK || (rc = ensure_ws(tr, bs)) != FL_OK)
        goto out;
    struct fl__client_rng rng;
    fl__client_rng_seed(&rng, p->seed);
    /* Subset first (when capped), then a fresh permutation of the subset per epoch. */
    for (size_t i = n; i > 1 && use < n; i--) {
        size_t j = (size_t)fl__client_rng_below(&rng, i);
        int64_t t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    double last = 0;
    for (uint32_t e = 0; e < p->epochs && rc == FL_OK; e++) {
        for (size_t i = use; i > 1; i--) {
            size_t j = (size_t)fl__client_rng_below(&rng, i);
            int64_t t = ids[i - 1];
            ids[i - 1] = ids[j];
            ids[j] = t;
        }
        double sum = 0;
        for (size_t s = 0; s < use && rc == FL_OK; s += bs) {
            if (cancelled && cancelled(cancel_user)) {
                rc = fl__err_set(&tr->err, FL_ERR_CANCELLED, "training interrupted");
                break;
            }
            size_t b = use - s < bs ? use - s : bs;
            float *xb = xbuf(tr);
            for (size_t i = 0; i < b && rc == FL_OK; i++) {
                rc = fl__client_store_read_dense(st, ids[s + i], xb + i * in, &yb[i]);
                if (rc != FL_OK)
                    fl__err_set(&tr->err, rc, "store: %s", fl_client_store_errmsg(st));
            }
            if (rc == FL_OK)
                rc = check_labels(tr, yb, b);
            double l = 0;
            if (rc == FL_OK)
                rc = sgd_step(tr, xb, yb, b, p, &l);
            sum += l;
        }
        last = sum / (double)use;
    }
    if (rc == FL_OK) {
        if (examples_used)
            *examples_used = use;
        if (mean_loss)
            *mean_loss = last;
    }
out:
    if (yb)
        fl__free(&tr->alloc, yb, bs * sizeof(int32_t));
    fl__free(&tr->alloc, ids, n_alloc * sizeof(int64_t));
    return rc;
}

fl_status fl_client_trainer_train_store(fl_client_trainer *tr, fl_client_store *st,
                                        const fl_client_train_params *p,
                                        uint64_t *examples_used, double *mean_loss) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!st)
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "store must not be NULL");
    return fl__client_trainer_train_store_cb(tr, st, p, examples_used, mean_loss, NULL, NULL);
}

/* Runs f over chunks of at most 256 examples: forward, then either loss/accuracy only
 * (grad NULL) or gradient accumulation with scale 1/n. */
static fl_status over_chunks(fl_client_trainer *tr, const float *x, const int32_t *y, size_t n,
                             float *grad, double *loss_sum, size_t *correct) {
    size_t chunk = n < 256 ? n : 256;
    fl_status rc = ensure_ws(tr, chunk);
    if (rc != FL_OK)
        return rc;
    size_t in = tr->layers[0].in, C = fl_client_trainer_num_classes(tr);
    *loss_sum = 0;
    for (size_t s = 0; s < n; s += chunk) {
        size_t b = n - s < chunk ? n - s : chunk;
        const float *xb = x + s * in;
        forward(tr, xb, b);
        if (grad)
            *loss_sum += backward(tr, xb, y + s, b, 1.0f / (float)n, grad);
        else
            *loss_sum += softmax_xent(act(tr, tr->n_layers - 1), y + s, b, C, 1.0f, correct);
    }
    return FL_OK;
}

fl_status fl_client_trainer_evaluate(fl_client_trainer *tr, const float *x, const int32_t *y,
                                     size_t n, double *loss, double *accuracy) {
    if (!tr)
        return FL_ERR_MISUSE;
    fl__err_clear(&tr->err);
    if (!x || !y || n == 0)
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "x and y must not be NULL and n > 0");
    fl_status rc = check_labels(tr, y, n);
    double sum = 0;
    size_t ok = 0;
    if (rc == FL_OK)
        rc = over_chunks(tr, x, y, n, NULL, &sum, &ok);
    if (rc == FL_OK) {
        if (loss)
            *loss = sum / (double)n;
        if (accuracy)
            *accuracy = (double)ok / (double)n;
    }
    return rc;
}

fl_status fl_client_trainer_gradient(fl_client_trainer *tr, float *grad, size_t grad_len,
                                     double *loss, const float *x, const int32_t *y, size_t n,
                                     const fl_client_train_params *p) {
    if (!tr)
        return FL_ERR_MISUSE;
    fl__err_clear(&tr->err);
    if (!grad || grad_len != tr->n_params || !x || !y || n == 0)
        return fl__err_set(&tr->err, FL_ERR_MISUSE,
                           "grad must hold num_params floats; x, y non-NULL, n > 0");
    if (p && p->struct_size < sizeof(*p))
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "p: call fl_client_train_params_init");
    fl_status rc = check_labels(tr, y, n);
    if (rc != FL_OK)
        return rc;
    memset(grad, 0, grad_len * sizeof(float));
    double sum = 0;
    rc = over_chunks(tr, x, y, n, grad, &sum, NULL);
    if (rc != FL_OK)
        return rc;
    regularize(tr, grad, p);
    if (loss)
        *loss = sum / (double)n + reg_loss(tr, p);
    return FL_OK;
}

fl_status fl_client_trainer_get_params(const fl_client_trainer *tr, float *out, size_t len) {
    if (!tr || !out || len != tr->n_params)
        return FL_ERR_MISUSE;
    memcpy(out, tr->params, len * sizeof(float));
    return FL_OK;
}

fl_status fl_client_trainer_set_params(fl_client_trainer *tr, const float *in, size_t len) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!in || len != tr->n_params)
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "in must hold num_params (%zu) floats",
                           tr->n_params);
    memcpy(tr->params, in, len * sizeof(float));
    return FL_OK;
}

fl_status fl_client_trainer_save(fl_client_trainer *tr, void *out, size_t cap, size_t *out_len) {
    if (!tr)
        return FL_ERR_MISUSE;
    fl__err_clear(&tr->err);
    if (!out_len || (!out && cap))
        return fl__err_set(&tr->err, FL_ERR_MISUSE, "out_len must not be NULL");
    fl_safetensors_writer *w = NULL;
    fl_status rc = fl_safetensors_writer_create(&w, fl__client_ext_alloc(&tr->alloc));
    for (size_t l = 0; l < tr->n_layers && rc == FL_OK; l++) {
        const struct fl__client_layer *L = &tr->layers[l];
        uint64_t ws[2] = {L->out, L->in}, bs[1] = {L->out};
        rc = fl_safetensors_writer_add(w, L->wname, FL_DTYPE_F32, 2, ws, tr->params + L->w_off,
                                       (size_t)L->out * L->in * sizeof(float));
        if (rc == FL_OK)
            rc = fl_safetensors_writer_add(w, L->bname, FL_DTYPE_F32, 1, bs,
                                           tr->params + L->b_off, L->out * sizeof(float));
    }
    if (rc == FL_OK)
        rc = fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp");
    size_t need = 0;
    if (rc == FL_OK)
        rc = fl_safetensors_writer_size(w, &need);
    if (rc == FL_OK) {
        *out_len = need;
        if (cap < need)
            rc = fl__err_set(&tr->err, FL_ERR_TOO_LARGE, "the image needs %zu bytes", need);
        else
            rc = fl_safetensors_writer_serialize(w, out, cap);
    }
    if (rc != FL_OK && rc != FL_ERR_TOO_LARGE && tr->err.code == FL_OK)
        fl__err_set(&tr->err, rc, "save: %s", w ? fl_safetensors_writer_errmsg(w) : "no writer");
    fl_safetensors_writer_destroy(w);
    return rc;
}

/* ---- fresh models ---- */

fl_status fl_client_model_init(void *out, size_t cap, size_t *out_len, const uint32_t *sizes,
                               size_t n_sizes, uint64_t seed, const fl_allocator *alloc) {
    fl_allocator a;
    if (!out_len || !sizes || n_sizes < 2 || n_sizes > FL_CLIENT_MAX_LAYERS + 1 ||
        (!out && cap) || fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    size_t total = 0;
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i] == 0 || sizes[i] > (1u << 24))
            return FL_ERR_MISUSE;
    if (sizes[n_sizes - 1] < 2)
        return FL_ERR_MISUSE;
    for (size_t l = 0; l + 1 < n_sizes; l++) {
        size_t wn = (size_t)sizes[l] * sizes[l + 1];
        if (total > SIZE_MAX / 8 - wn - sizes[l + 1])
            return FL_ERR_MISUSE;
        total += wn + sizes[l + 1];
    }
    float *p = fl__alloc_array(&a, total, sizeof(float));
    if (!p)
        return FL_ERR_NOMEM;
    struct fl__client_rng rng;
    fl__client_rng_seed(&rng, seed);
    fl_safetensors_writer *w = NULL;
    fl_status rc = fl_safetensors_writer_create(&w, fl__client_ext_alloc(&a));
    size_t off = 0;
    for (size_t l = 0; l + 1 < n_sizes && rc == FL_OK; l++) {
        size_t in = sizes[l], o = sizes[l + 1];
        /* He-uniform: U(-b, b) with b = sqrt(6 / fan_in), suited to ReLU layers. */
        double bound = sqrt(6.0 / (double)in);
        for (size_t i = 0; i < in * o; i++)
            p[off + i] = (float)((2.0 * fl__client_rng_unit(&rng) - 1.0) * bound);
        memset(p + off + in * o, 0, o * sizeof(float));
        char wn[24], bn[24];
        snprintf(wn, sizeof(wn), "fc%zu.weight", l + 1);
        snprintf(bn, sizeof(bn), "fc%zu.bias", l + 1);
        uint64_t ws[2] = {o, in}, bs[1] = {o};
        rc = fl_safetensors_writer_add(w, wn, FL_DTYPE_F32, 2, ws, p + off, in * o * sizeof(float));
        if (rc == FL_OK)
            rc = fl_safetensors_writer_add(w, bn, FL_DTYPE_F32, 1, bs, p + off + in * o,
                                           o * sizeof(float));
        off += in * o + o;
    }
    if (rc == FL_OK)
        rc = fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp");
    size_t need = 0;
    if (rc == FL_OK)
        rc = fl_safetensors_writer_size(w, &need);
    if (rc == FL_OK) {
        *out_len = need;
        rc = cap < need ? FL_ERR_TOO_LARGE : fl_safetensors_writer_serialize(w, out, cap);
    }
    fl_safetensors_writer_destroy(w);
    fl__free(&a, p, total * sizeof(float));
    return rc;
}
