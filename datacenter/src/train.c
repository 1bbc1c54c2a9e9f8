/* The training loop, written once against the compute vtable (fl__dc_ops) and the
 * collective interface (fl__dc_allreduce & co.): data parallelism with bucketed gradient
 * reduction started during backward, Megatron-style tensor parallelism for MLP layer pairs,
 * and ZeRO stage 1 (reduce-scatter, update the local shard, all-gather).
 *
 * Shapes: B global batch, M = this DP rank's rows, L layers, layer i maps in_i -> out_i;
 * on a TP rank a COL layer holds W (out_l, in) and a ROW layer W (out, in_l). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer.h"

fl_status fl__dc_fail(struct fl_dc_trainer *tr, fl_status rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr->err.msg, sizeof(tr->err.msg), fmt, ap);
    va_end(ap);
    tr->err.code = rc;
    if (rc != FL_ERR_MISUSE)
        tr->failed = true;
    return rc;
}

fl_status fl__dc_refuse(struct fl_dc_trainer *tr, fl_status rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr->err.msg, sizeof(tr->err.msg), fmt, ap);
    va_end(ap);
    tr->err.code = rc;
    return rc;
}

/* Backend and collective calls inside functions that have `fl_status rc` and `out:`. */
#define DEV(call)                                                                          \
    do {                                                                                   \
        rc = (call);                                                                       \
        if (rc != FL_OK) {                                                                 \
            fl__dc_fail(tr, rc, "rank %d: %s backend: %s", tr->world->world_rank,          \
                        tr->ops->name, fl__err_msg(&tr->dev->err));                        \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

#define COMM(c, call)                                                                      \
    do {                                                                                   \
        rc = (call);                                                                       \
        if (rc != FL_OK) {                                                                 \
            fl__dc_fail(tr, rc, "%s", fl__err_msg(&(c)->err));                             \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

/* ---- configuration ---- */

void fl_dc_config_init(fl_dc_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->n_layers = 2;
    cfg->sizes[0] = 784;
    cfg->sizes[1] = 128;
    cfg->sizes[2] = 10;
    cfg->dp = 1;
    cfg->tp = 1;
    cfg->zero_stage = 0;
    cfg->backend = FL_DC_BACKEND_AUTO;
    cfg->math = FL_DC_MATH_FP32;
    cfg->optim = FL_DC_OPTIM_ADAMW;
    cfg->lr = 1e-3f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    cfg->weight_decay = 0.0f;
    cfg->momentum = 0.0f;
    cfg->global_batch = 64;
    cfg->seed = 1234;
    cfg->bucket_bytes = 1u << 20;
    cfg->comm_timeout_s = 300.0;
}

/* Checks every field once; the message names the first bad one. */
static fl_status validate(const fl_dc_config *c, int world_size) {
#define BAD(...) return fl__dc_last_error_set(FL_ERR_MISUSE, __VA_ARGS__)
    if (c->struct_size < sizeof(fl_dc_config))
        BAD("config.struct_size is %zu, expected %zu", c->struct_size, sizeof(fl_dc_config));
    if (c->n_layers < 1 || c->n_layers > FL_DC_MAX_LAYERS)
        BAD("config.n_layers must be 1..%d", FL_DC_MAX_LAYERS);
    for (int i = 0; i <= c->n_layers; i++)
        if (c->sizes[i] < 1 || c->sizes[i] > (1 << 24))
            BAD("config.sizes[%d] must be 1..2^24", i);
    if (c->dp < 1 || c->tp < 1)
        BAD("config.dp and config.tp must be >= 1");
    if ((long)c->dp * c->tp != world_size)
        BAD("config.dp * config.tp = %ld but the communicator has %d ranks",
            (long)c->dp * c->tp, world_size);
    for (int i = 0; i + 1 < c->n_layers && c->tp > 1; i += 2)
        if (c->sizes[i + 1] < c->tp)
            BAD("config.sizes[%d] = %d is narrower than config.tp = %d", i + 1, c->sizes[i + 1],
                c->tp);
    if (c->zero_stage != 0 && c->zero_stage != 1)
        BAD("config.zero_stage must be 0 or 1");
    if (c->backend < FL_DC_BACKEND_AUTO || c->backend > FL_DC_BACKEND_CUDA)
        BAD("config.backend is unknown");
    if (c->math < FL_DC_MATH_FP32 || c->math > FL_DC_MATH_BF16)
        BAD("config.math is unknown");
    if (c->optim != FL_DC_OPTIM_SGD && c->optim != FL_DC_OPTIM_ADAMW)
        BAD("config.optim is unknown");
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        BAD("config.lr must be a positive number");
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        BAD("config.beta1 and config.beta2 must be in [0, 1)");
    if (!(c->eps > 0.0f))
        BAD("config.eps must be > 0");
    if (!(c->weight_decay >= 0.0f) || !(c->momentum >= 0.0f && c->momentum < 1.0f))
        BAD("config.weight_decay must be >= 0 and config.momentum in [0, 1)");
    if (c->global_batch < c->dp || c->global_batch > (1 << 24))
        BAD("config.global_batch must be at least config.dp and at most 2^24");
    if (c->bucket_bytes < sizeof(float))
        BAD("config.bucket_bytes must be at least 4");
    if (!(c->comm_timeout_s > 0.0))
        BAD("config.comm_timeout_s must be > 0");
    int widest = 0;
    for (int i = 0; i <= c->n_layers; i++)
        widest = c->sizes[i] > widest ? c->sizes[i] : widest;
    if ((long long)((c->global_batch + c->dp - 1) / c->dp) * widest > 0x7fffffffLL)
        BAD("config.global_batch / dp times the widest layer exceeds 2^31 elements");
    return FL_OK;
#undef BAD
}

/* ---- create / destroy ---- */

static fl_status pick_backend(const fl_dc_config *cfg, const struct fl_dc_comm *world,
                              fl_dc_backend *out) {
    fl_dc_backend b = cfg->backend;
    int gpus = 0;
#ifdef FL_DC_WITH_CUDA
    gpus = fl__dc_cuda_device_count();
#endif
    if (b == FL_DC_BACKEND_AUTO) {
        if (world->kind == FL_DC_COMM_NCCL)
            b = FL_DC_BACKEND_CUDA;
        else if (world->kind == FL_DC_COMM_MPI)
            b = FL_DC_BACKEND_CPU;
        else
            b = gpus > 0 ? FL_DC_BACKEND_CUDA : FL_DC_BACKEND_CPU;
    }
    if (b == FL_DC_BACKEND_CUDA && gpus == 0)
        return fl__dc_last_error_set(FL_ERR_UNSUPPORTED, "CUDA backend asked for but %s",
#ifdef FL_DC_WITH_CUDA
                                     "no GPU is visible"
#else
                                     "this build has no CUDA"
#endif
        );
    if (b == FL_DC_BACKEND_CPU && world->kind == FL_DC_COMM_NCCL)
        return fl__dc_last_error_set(FL_ERR_UNSUPPORTED,
                                     "the CPU backend needs an MPI or single communicator");
    if (b == FL_DC_BACKEND_CUDA && world->kind == FL_DC_COMM_MPI)
        return fl__dc_last_error_set(FL_ERR_UNSUPPORTED,
                                     "the CUDA backend needs an NCCL or single communicator");
    *out = b;
    return FL_OK;
}

static fl_status dalloc(struct fl_dc_trainer *tr, void *pp, size_t n, size_t size) {
    void **p = pp;
    if (fl__mul_overflows(n, size))
        return fl__dc_last_error_set(FL_ERR_NOMEM, "allocation size overflows");
    fl_status rc = tr->ops->alloc(tr->dev, p, n * size);
    if (rc != FL_OK)
        fl__dc_last_error_set(rc, "%s backend: %s", tr->ops->name, fl__err_msg(&tr->dev->err));
    return rc;
}

static void dfree(struct fl_dc_trainer *tr, void *p) {
    if (p)
        tr->ops->free(tr->dev, p);
}

static int act_width(const struct fl__dc_layer *l) {
    return l->split == FL__DC_COL ? l->out_l : l->out;
}

fl_status fl_dc_trainer_create(fl_dc_trainer **out, const fl_dc_config *cfg,
                               fl_dc_comm *world, const fl_allocator *alloc) {
    fl_allocator a;
    fl_status rc;
    struct fl_dc_trainer *tr = NULL;
    fl_dc_backend backend = FL_DC_BACKEND_CPU;
    if (!out || !cfg || !world)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "NULL argument");
    *out = NULL;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "bad allocator struct");
    rc = validate(cfg, world->size);
    if (rc != FL_OK)
        return rc;
    rc = pick_backend(cfg, world, &backend);
    if (rc != FL_OK)
        return rc;
    tr = fl__calloc(&a, 1, sizeof(*tr));
    if (!tr)
        return fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for the trainer");
    tr->alloc = a;
    tr->cfg = *cfg;
    tr->cfg.backend = backend;
    tr->world = world;
    tr->perm_epoch = UINT64_MAX;
    tr->tp_rank = world->rank % cfg->tp;
    tr->dp_rank = world->rank / cfg->tp;
    world->timeout_s = cfg->comm_timeout_s;

    /* 2-D grid: TP groups are consecutive ranks (one node's GPUs in practice, where the
     * per-layer all-reduces want the fastest links); DP groups stride by tp. */
    rc = world->ops->split(world, tr->dp_rank, tr->tp_rank, &tr->tp_comm);
    if (rc == FL_OK)
        rc = world->ops->split(world, tr->tp_rank, tr->dp_rank, &tr->dp_comm);
    if (rc != FL_OK) {
        fl__dc_last_error_set(rc, "splitting the grid: %s", fl__err_msg(&world->err));
        goto out_destroy;
    }
    tr->tp_comm->timeout_s = tr->dp_comm->timeout_s = cfg->comm_timeout_s;

    if (backend == FL_DC_BACKEND_CPU) {
        rc = fl__dc_dev_cpu_create(&tr->dev, &tr->alloc);
    } else {
#ifdef FL_DC_WITH_CUDA
        rc = fl__dc_dev_cuda_create(&tr->dev, &tr->alloc, cfg->math);
#else
        rc = FL_ERR_UNSUPPORTED;
#endif
    }
    if (rc != FL_OK)
        goto out_destroy;
    tr->ops = tr->dev->ops;
    void *stream = tr->ops->stream(tr->dev);
    fl__dc_comm_bind_stream(world, stream);
    fl__dc_comm_bind_stream(tr->dp_comm, stream);
    fl__dc_comm_bind_stream(tr->tp_comm, stream);

    fl__dc_layout(&tr->cfg, tr->tp_rank, tr->layers, tr->buckets, &tr->n_buckets,
                  &tr->arena_len);
    tr->state_len = tr->arena_len;
    if (cfg->zero_stage == 1)
        tr->state_len = tr->buckets[tr->n_buckets - 1].shard_off +
                        tr->buckets[tr->n_buckets - 1].padded / (size_t)cfg->dp;
    tr->full_len = fl__dc_full_offset(&tr->cfg, cfg->n_layers, false);

    int L = cfg->n_layers, widest = cfg->sizes[0];
    tr->max_rows = (cfg->global_batch + cfg->dp - 1) / cfg->dp;
    size_t R = (size_t)tr->max_rows;
    if ((rc = dalloc(tr, &tr->params, tr->arena_len, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->grads, tr->arena_len, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->opt_m, tr->state_len, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->opt_v, tr->state_len, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->act[0], R * (size_t)cfg->sizes[0], sizeof(float))) != FL_OK)
        goto out_destroy;
    for (int i = 0; i < L; i++) {
        int w = act_width(&tr->layers[i]);
        if (tr->layers[i].in_l > widest)
            widest = tr->layers[i].in_l;
        if (w > widest)
            widest = w;
        if ((rc = dalloc(tr, &tr->act[i + 1], R * (size_t)w, sizeof(float))) != FL_OK)
            goto out_destroy;
    }
    if ((rc = dalloc(tr, &tr->dbuf[0], R * (size_t)widest, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->dbuf[1], R * (size_t)widest, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->labels_d, R, sizeof(int32_t))) != FL_OK ||
        (rc = dalloc(tr, &tr->losses_d, R, sizeof(float))) != FL_OK ||
        (rc = dalloc(tr, &tr->correct_d, R, sizeof(float))) != FL_OK)
        goto out_destroy;
    tr->x_h = fl__alloc_array(&a, R * (size_t)cfg->sizes[0], sizeof(float));
    tr->y_h = fl__alloc_array(&a, R, sizeof(int32_t));
    tr->loss_h = fl__alloc_array(&a, R, sizeof(float));
    tr->correct_h = fl__alloc_array(&a, R, sizeof(float));
    float *full = fl__alloc_array(&a, tr->full_len, sizeof(float));
    if (!tr->x_h || !tr->y_h || !tr->loss_h || !tr->correct_h || !full) {
        fl__free(&a, full, tr->full_len * sizeof(float));
        rc = fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for host buffers");
        goto out_destroy;
    }
    fl__dc_init_full(&tr->cfg, full);
    rc = fl__dc_scatter_full(tr, full);
    fl__free(&a, full, tr->full_len * sizeof(float));
    if (rc != FL_OK) {
        fl__dc_last_error_set(rc, "%s", tr->err.msg);
        goto out_destroy;
    }
    *out = tr;
    return FL_OK;
out_destroy:
    fl_dc_trainer_destroy(tr);
    return rc;
}

void fl_dc_trainer_destroy(fl_dc_trainer *tr) {
    if (!tr)
        return;
    fl_allocator a = tr->alloc;
    size_t R = (size_t)tr->max_rows;
    if (tr->dev) {
        if (tr->ops)
            tr->ops->sync(tr->dev);
        dfree(tr, tr->params);
        dfree(tr, tr->grads);
        dfree(tr, tr->opt_m);
        dfree(tr, tr->opt_v);
        for (int i = 0; i <= FL_DC_MAX_LAYERS; i++)
            dfree(tr, tr->act[i]);
        dfree(tr, tr->dbuf[0]);
        dfree(tr, tr->dbuf[1]);
        dfree(tr, tr->labels_d);
        dfree(tr, tr->losses_d);
        dfree(tr, tr->correct_d);
        tr->dev->ops->destroy(tr->dev);
    }
    fl__free(&a, tr->x_h, R * (size_t)tr->cfg.sizes[0] * sizeof(float));
    fl__free(&a, tr->y_h, R * sizeof(int32_t));
    fl__free(&a, tr->loss_h, R * sizeof(float));
    fl__free(&a, tr->correct_h, R * sizeof(float));
    fl__free(&a, tr->perm, tr->perm_n * sizeof(uint32_t));
    fl_dc_comm_close(tr->dp_comm);
    fl_dc_comm_close(tr->tp_comm);
    if (tr->world)
        fl__dc_comm_bind_stream(tr->world, NULL);
    fl__free(&a, tr, sizeof(*tr));
}

const char *fl_dc_trainer_errmsg(const fl_dc_trainer *tr) {
    return tr ? fl__err_msg(&tr->err) : "NULL trainer";
}

fl_dc_backend fl_dc_trainer_backend(const fl_dc_trainer *tr) {
    return tr ? tr->cfg.backend : FL_DC_BACKEND_AUTO;
}

uint64_t fl_dc_trainer_step_count(const fl_dc_trainer *tr) { return tr ? tr->step : 0; }

size_t fl_dc_trainer_param_count(const fl_dc_trainer *tr) { return tr ? tr->full_len : 0; }

/* ---- forward and backward ---- */

/* Forward over M rows already in act[0]; logits end in act[L] (M, classes), identical on
 * every TP rank of the group. One TP all-reduce per COL/ROW pair. */
static fl_status forward(struct fl_dc_trainer *tr, int M) {
    fl_status rc = FL_OK;
    const struct fl__dc_ops *o = tr->ops;
    int L = tr->cfg.n_layers;
    for (int i = 0; i < L; i++) {
        const struct fl__dc_layer *l = &tr->layers[i];
        int w = act_width(l);
        /* act[i+1] (M, w) = act[i] (M, in_l) . W^T, W (w, in_l) */
        DEV(o->gemm(tr->dev, false, true, M, w, l->in_l, 1.0f, tr->act[i], l->in_l,
                    tr->params + l->w_off, l->in_l, 0.0f, tr->act[i + 1], w));
        if (l->split == FL__DC_ROW) {
            /* partial sums over this rank's input slice -> full pre-activation */
            COMM(tr->tp_comm, fl__dc_allreduce(tr->tp_comm, tr->act[i + 1], (size_t)M * w));
            COMM(tr->tp_comm, fl__dc_wait(tr->tp_comm));
        }
        DEV(o->bias_add(tr->dev, tr->act[i + 1], tr->params + l->b_off, M, w));
        if (i + 1 < L)
            DEV(o->relu(tr->dev, tr->act[i + 1], (size_t)M * w));
    }
out:
    return rc;
}

/* Starts the DP reduction of bucket b: an all-reduce, or with ZeRO-1 a reduce-scatter
 * that leaves this rank's shard of the summed gradient in place. */
static fl_status bucket_reduce(struct fl_dc_trainer *tr, int b) {
    fl_status rc = FL_OK;
    struct fl__dc_bucket *bk = &tr->buckets[b];
    float *g = tr->grads + bk->off;
    bk->launched = true;
    if (tr->cfg.dp == 1)
        return FL_OK;
    if (tr->cfg.zero_stage == 1) {
        size_t shard = bk->padded / (size_t)tr->cfg.dp;
        COMM(tr->dp_comm,
             fl__dc_reduce_scatter(tr->dp_comm, g + (size_t)tr->dp_rank * shard, g, shard));
    } else {
        COMM(tr->dp_comm, fl__dc_allreduce(tr->dp_comm, g, bk->padded));
    }
out:
    return rc;
}

/* Backward from dlogits in dbuf[0]. Gradients are written (not accumulated) into the
 * arena; as soon as layer i's weight and bias gradients exist, every bucket whose first
 * tensor belongs to layer >= i is complete and its reduction starts, overlapping the
 * rest of backward (on GPUs; on the CPU the collective runs there and then). */
static fl_status backward(struct fl_dc_trainer *tr, int M) {
    fl_status rc = FL_OK;
    const struct fl__dc_ops *o = tr->ops;
    int L = tr->cfg.n_layers, cur = 0;
    for (int b = 0; b < tr->n_buckets; b++)
        tr->buckets[b].launched = false;
    for (int i = L - 1; i >= 0; i--) {
        const struct fl__dc_layer *l = &tr->layers[i];
        int w = act_width(l);
        float *dz = tr->dbuf[cur];
        /* dW (w, in_l) = dz^T (w, M) . act[i] (M, in_l) */
        DEV(o->gemm(tr->dev, true, false, w, l->in_l, M, 1.0f, dz, w, tr->act[i], l->in_l, 0.0f,
                    tr->grads + l->w_off, l->in_l));
        /* db (b_len) = column sums of dz; a ROW layer's bias is replicated (b_len = w) */
        DEV(o->bias_grad(tr->dev, tr->grads + l->b_off, dz, M, w, 0.0f));
        for (int b = tr->n_buckets - 1; b >= 0; b--) {
            if (!tr->buckets[b].launched && tr->buckets[b].first_tensor >= 2 * i) {
                rc = bucket_reduce(tr, b);
                if (rc != FL_OK)
                    goto out;
            }
        }
        if (i == 0)
            break;
        float *da = tr->dbuf[1 - cur];
        /* da (M, in_l) = dz (M, w) . W (w, in_l) */
        DEV(o->gemm(tr->dev, false, false, M, l->in_l, w, 1.0f, dz, w, tr->params + l->w_off,
                    l->in_l, 0.0f, da, l->in_l));
        if (l->split == FL__DC_COL) {
            /* each rank holds part of dL/dinput: the backward all-reduce of the pair */
            COMM(tr->tp_comm, fl__dc_allreduce(tr->tp_comm, da, (size_t)M * l->in_l));
            COMM(tr->tp_comm, fl__dc_wait(tr->tp_comm));
        }
        DEV(o->relu_bwd(tr->dev, da, tr->act[i], (size_t)M * l->in_l));
        cur = 1 - cur;
    }
    COMM(tr->dp_comm, fl__dc_wait(tr->dp_comm));
out:
    return rc;
}

static fl_status update(struct fl_dc_trainer *tr, float *p, const float *g, float *m, float *v,
                        size_t n) {
    const fl_dc_config *c = &tr->cfg;
    if (c->optim == FL_DC_OPTIM_ADAMW)
        return tr->ops->adamw(tr->dev, p, g, m, v, n, c->lr, c->beta1, c->beta2, c->eps,
                              c->weight_decay, tr->step + 1);
    return tr->ops->sgd(tr->dev, p, g, c->momentum > 0.0f ? m : NULL, n, c->lr, c->momentum,
                        c->weight_decay);
}

/* Optimiser step. ZeRO-1: each DP rank updates only its shard of every bucket with its
 * shard of the optimiser state, then the updated shards are all-gathered in place. */
static fl_status optimise(struct fl_dc_trainer *tr) {
    fl_status rc = FL_OK;
    if (tr->cfg.zero_stage == 0) {
        DEV(update(tr, tr->params, tr->grads, tr->opt_m, tr->opt_v, tr->arena_len));
        goto out;
    }
    for (int b = 0; b < tr->n_buckets; b++) {
        const struct fl__dc_bucket *bk = &tr->buckets[b];
        size_t shard = bk->padded / (size_t)tr->cfg.dp;
        size_t off = bk->off + (size_t)tr->dp_rank * shard;
        DEV(update(tr, tr->params + off, tr->grads + off, tr->opt_m + bk->shard_off,
                   tr->opt_v + bk->shard_off, shard));
        if (tr->cfg.dp > 1)
            COMM(tr->dp_comm, fl__dc_allgather(tr->dp_comm, tr->params + bk->off,
                                               tr->params + off, shard));
    }
    COMM(tr->dp_comm, fl__dc_wait(tr->dp_comm));
out:
    return rc;
}

/* Copies the examples at global positions [pos, pos+M) of the shuffled stream into the
 * host staging buffers. Position p is example perm_{p / n}[p % n]. */
static fl_status fill_batch(struct fl_dc_trainer *tr, const fl_dc_dataset *ds, uint64_t pos,
                            int M) {
    size_t n = ds->n, dim = ds->dim;
    if (tr->perm_n != n) {
        fl__free(&tr->alloc, tr->perm, tr->perm_n * sizeof(uint32_t));
        tr->perm_n = 0;
        tr->perm = fl__alloc_array(&tr->alloc, n, sizeof(uint32_t));
        if (!tr->perm)
            return fl__dc_fail(tr, FL_ERR_NOMEM, "no memory for the shuffle of %zu examples", n);
        tr->perm_n = n;
        tr->perm_epoch = UINT64_MAX;
    }
    for (int k = 0; k < M; k++) {
        uint64_t p = pos + (uint64_t)k, epoch = p / n;
        if (epoch != tr->perm_epoch) {
            fl__dc_permutation(tr->perm, n, tr->cfg.seed, epoch);
            tr->perm_epoch = epoch;
        }
        size_t idx = tr->perm[p % n];
        memcpy(tr->x_h + (size_t)k * dim, ds->x + idx * dim, dim * sizeof(float));
        tr->y_h[k] = ds->y[idx];
    }
    return FL_OK;
}

static fl_status check_data(struct fl_dc_trainer *tr, const fl_dc_dataset *ds) {
    if (!ds)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "data set is NULL");
    if (ds->dim != (size_t)tr->cfg.sizes[0] || ds->classes > tr->cfg.sizes[tr->cfg.n_layers])
        return fl__dc_fail(tr, FL_ERR_MISUSE,
                           "data set has %zu features and %d classes; the model takes %d and %d",
                           ds->dim, ds->classes, tr->cfg.sizes[0],
                           tr->cfg.sizes[tr->cfg.n_layers]);
    return FL_OK;
}

static double busy(const struct fl_dc_trainer *tr) {
    return tr->dp_comm->busy_s + tr->tp_comm->busy_s + tr->world->busy_s;
}

fl_status fl_dc_trainer_step(fl_dc_trainer *tr, const fl_dc_dataset *ds,
                             fl_dc_step_stats *stats) {
    fl_status rc;
    if (!tr)
        return FL_ERR_MISUSE;
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    if ((rc = check_data(tr, ds)) != FL_OK)
        return rc;
    const fl_dc_config *c = &tr->cfg;
    const struct fl__dc_ops *o = tr->ops;
    double t0 = fl__dc_now(), b0 = busy(tr);
    int L = c->n_layers, classes = c->sizes[L];
    int M = (int)fl__dc_chunk_len((size_t)c->global_batch, (size_t)c->dp, (size_t)tr->dp_rank);
    uint64_t pos = tr->step * (uint64_t)c->global_batch +
                   fl__dc_chunk_start((size_t)c->global_batch, (size_t)c->dp,
                                      (size_t)tr->dp_rank);
    if ((rc = fill_batch(tr, ds, pos, M)) != FL_OK)
        return rc;
    DEV(o->h2d(tr->dev, tr->act[0], tr->x_h, (size_t)M * ds->dim * sizeof(float)));
    DEV(o->h2d(tr->dev, tr->labels_d, tr->y_h, (size_t)M * sizeof(int32_t)));
    if ((rc = forward(tr, M)) != FL_OK)
        goto out;
    /* averaging: the loss gradient is scaled by 1/B so the DP sum is the global mean */
    DEV(o->xent(tr->dev, tr->dbuf[0], tr->losses_d, tr->correct_d, tr->act[L], tr->labels_d, M,
                classes, 1.0f / (float)c->global_batch));
    if ((rc = backward(tr, M)) != FL_OK)
        goto out;
    if ((rc = optimise(tr)) != FL_OK)
        goto out;
    /* host waits for the step, watching for asynchronous collective errors */
    COMM(tr->dp_comm, fl__dc_sync(tr->dp_comm));
    COMM(tr->tp_comm, fl__dc_sync(tr->tp_comm));
    DEV(o->d2h(tr->dev, tr->loss_h, tr->losses_d, (size_t)M * sizeof(float)));
    double mine = 0.0;
    for (int k = 0; k < M; k++)
        mine += tr->loss_h[k];
    double loss = mine;
    if (c->dp > 1) {
        /* sum of the DP ranks' partial sums in rank order: the same bits everywhere */
        double *parts = fl__alloc_array(&tr->alloc, (size_t)c->dp, sizeof(double));
        if (!parts) {
            rc = fl__dc_fail(tr, FL_ERR_NOMEM, "no memory for the loss");
            goto out;
        }
        rc = fl__dc_host_allgather(tr->dp_comm, parts, &mine, sizeof(double));
        loss = 0.0;
        for (int r = 0; r < c->dp && rc == FL_OK; r++)
            loss += parts[r];
        fl__free(&tr->alloc, parts, (size_t)c->dp * sizeof(double));
        if (rc != FL_OK) {
            fl__dc_fail(tr, rc, "%s", fl__err_msg(&tr->dp_comm->err));
            goto out;
        }
    }
    tr->step++;
    if (stats && stats->struct_size >= sizeof(*stats)) {
        double dt = fl__dc_now() - t0, cb = busy(tr) - b0;
        stats->step = tr->step;
        stats->loss = loss / (double)c->global_batch;
        stats->step_s = dt;
        stats->comm_s = cb;
        stats->compute_s = dt - cb > 0.0 ? dt - cb : 0.0;
        stats->samples_per_s = dt > 0.0 ? (double)c->global_batch / dt : 0.0;
    }
out:
    return rc;
}

fl_status fl_dc_trainer_evaluate(fl_dc_trainer *tr, const fl_dc_dataset *ds, size_t n,
                                 double *loss, double *accuracy) {
    fl_status rc;
    if (!tr)
        return FL_ERR_MISUSE;
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    if ((rc = check_data(tr, ds)) != FL_OK)
        return rc;
    const struct fl__dc_ops *o = tr->ops;
    int L = tr->cfg.n_layers;
    if (n == 0 || n > ds->n)
        n = ds->n;
    double lsum = 0.0, csum = 0.0;
    /* every DP group evaluates the same examples; TP ranks of a group run in lock-step */
    for (size_t s = 0; s < n; s += (size_t)tr->max_rows) {
        int M = (int)(n - s < (size_t)tr->max_rows ? n - s : (size_t)tr->max_rows);
        DEV(o->h2d(tr->dev, tr->act[0], ds->x + s * ds->dim, (size_t)M * ds->dim * sizeof(float)));
        DEV(o->h2d(tr->dev, tr->labels_d, ds->y + s, (size_t)M * sizeof(int32_t)));
        if ((rc = forward(tr, M)) != FL_OK)
            goto out;
        DEV(o->xent(tr->dev, tr->dbuf[0], tr->losses_d, tr->correct_d, tr->act[L], tr->labels_d,
                    M, tr->cfg.sizes[L], 0.0f));
        COMM(tr->tp_comm, fl__dc_sync(tr->tp_comm));
        DEV(o->d2h(tr->dev, tr->loss_h, tr->losses_d, (size_t)M * sizeof(float)));
        DEV(o->d2h(tr->dev, tr->correct_h, tr->correct_d, (size_t)M * sizeof(float)));
        for (int k = 0; k < M; k++) {
            lsum += tr->loss_h[k];
            csum += tr->correct_h[k];
        }
    }
    if (loss)
        *loss = lsum / (double)n;
    if (accuracy)
        *accuracy = csum / (double)n;
out:
    return rc;
}

/* ---- whole-model gather and scatter ---- */

/* Copies between a rank's local arena and the full canonical model for one layout.
 * to_full: local -> full; otherwise full -> local. */
static void map_layer(const fl_dc_config *cfg, int i, const struct fl__dc_layer *l, float *local,
                      float *full, bool to_full) {
    float *W = full + fl__dc_full_offset(cfg, i, false);
    float *b = full + fl__dc_full_offset(cfg, i, true);
    for (int r = 0; r < l->out_l; r++) {
        float *f = W + (size_t)(r + l->out_off) * (size_t)l->in + (size_t)l->in_off;
        float *x = local + l->w_off + (size_t)r * (size_t)l->in_l;
        if (to_full)
            memcpy(f, x, (size_t)l->in_l * sizeof(float));
        else
            memcpy(x, f, (size_t)l->in_l * sizeof(float));
    }
    int boff = l->split == FL__DC_COL ? l->out_off : 0;
    if (to_full)
        memcpy(b + boff, local + l->b_off, (size_t)l->b_len * sizeof(float));
    else
        memcpy(local + l->b_off, b + boff, (size_t)l->b_len * sizeof(float));
}

fl_status fl__dc_scatter_full(struct fl_dc_trainer *tr, const float *full) {
    fl_status rc = FL_OK;
    float *local = fl__calloc(&tr->alloc, tr->arena_len, sizeof(float));
    if (!local) /* nothing changed yet */
        return fl__dc_refuse(tr, FL_ERR_NOMEM, "no memory for %zu floats", tr->arena_len);
    for (int i = 0; i < tr->cfg.n_layers; i++)
        map_layer(&tr->cfg, i, &tr->layers[i], local, (float *)full, false);
    DEV(tr->ops->h2d(tr->dev, tr->params, local, tr->arena_len * sizeof(float)));
    DEV(tr->ops->zero(tr->dev, tr->grads, tr->arena_len * sizeof(float)));
    DEV(tr->ops->zero(tr->dev, tr->opt_m, tr->state_len * sizeof(float)));
    DEV(tr->ops->zero(tr->dev, tr->opt_v, tr->state_len * sizeof(float)));
    DEV(tr->ops->sync(tr->dev));
    tr->step = 0;
out:
    fl__free(&tr->alloc, local, tr->arena_len * sizeof(float));
    return rc;
}

/* Host and device buffers are taken first; with tp > 1 the TP group agrees on them, so a
 * rank short of memory makes the whole group skip the exchange instead of leaving its peers
 * waiting in it. Such a refusal does not fail the trainer. */
fl_status fl__dc_gather_full(struct fl_dc_trainer *tr, float *full) {
    fl_status rc = FL_OK, mine = FL_ERR_NOMEM;
    int tp = tr->cfg.tp, bad = -1;
    size_t maxlen = 0;
    struct fl__dc_layer *lay = NULL;
    struct fl__dc_bucket bk[2 * FL_DC_MAX_LAYERS];
    float *host = NULL, *dtmp = NULL;
    int nb;
    lay = fl__alloc_array(&tr->alloc, (size_t)tp * FL_DC_MAX_LAYERS, sizeof(*lay));
    if (lay) {
        for (int r = 0; r < tp; r++) {
            size_t len;
            fl__dc_layout(&tr->cfg, r, lay + (size_t)r * FL_DC_MAX_LAYERS, bk, &nb, &len);
            maxlen = len > maxlen ? len : maxlen;
        }
        host = fl__alloc_array(&tr->alloc, (size_t)tp * maxlen, sizeof(float));
    }
    if (host)
        mine = tp > 1 ? dalloc(tr, &dtmp, (size_t)tp * maxlen, sizeof(float)) : FL_OK;
    rc = tp > 1 ? fl__dc_agree(tr->tp_comm, mine, &bad) : mine;
    if (rc != FL_OK && bad < 0 && tp > 1) {
        fl__dc_fail(tr, rc, "%s", fl__err_msg(&tr->tp_comm->err));
        goto out;
    }
    if (rc != FL_OK) {
        if (mine != FL_OK)
            fl__dc_refuse(tr, rc, "rank %d: no buffers to gather the model (%s)",
                          tr->world->world_rank, fl_status_str(mine));
        else
            fl__dc_refuse(tr, rc, "TP rank %d could not gather the model: %s", bad,
                          fl_status_str(rc));
        goto out;
    }
    if (tp == 1) {
        DEV(tr->ops->d2h(tr->dev, host, tr->params, tr->arena_len * sizeof(float)));
    } else {
        /* every TP rank contributes its arena, padded to the longest one */
        float *mine_d = dtmp + (size_t)tr->tp_rank * maxlen;
        DEV(tr->ops->d2d(tr->dev, mine_d, tr->params, tr->arena_len * sizeof(float)));
        COMM(tr->tp_comm, fl__dc_allgather(tr->tp_comm, dtmp, mine_d, maxlen));
        COMM(tr->tp_comm, fl__dc_wait(tr->tp_comm));
        COMM(tr->tp_comm, fl__dc_sync(tr->tp_comm));
        DEV(tr->ops->d2h(tr->dev, host, dtmp, (size_t)tp * maxlen * sizeof(float)));
    }
    for (int r = 0; r < tp; r++)
        for (int i = 0; i < tr->cfg.n_layers; i++)
            map_layer(&tr->cfg, i, &lay[(size_t)r * FL_DC_MAX_LAYERS + (size_t)i],
                      host + (size_t)r * maxlen, full, true);
out:
    if (dtmp)
        dfree(tr, dtmp);
    fl__free(&tr->alloc, host, (size_t)tp * maxlen * sizeof(float));
    fl__free(&tr->alloc, lay, (size_t)tp * FL_DC_MAX_LAYERS * sizeof(*lay));
    return rc;
}

fl_status fl_dc_trainer_params_get(fl_dc_trainer *tr, float *out, size_t n) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!out || n < tr->full_len)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "output holds %zu floats, the model has %zu", n,
                           tr->full_len);
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    return fl__dc_gather_full(tr, out);
}

fl_status fl_dc_trainer_params_set(fl_dc_trainer *tr, const float *in, size_t n) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!in || n != tr->full_len)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "input holds %zu floats, the model has %zu", n,
                           tr->full_len);
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    return fl__dc_scatter_full(tr, in);
}
