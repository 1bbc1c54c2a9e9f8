#ifndef FLOTILLA_DC_TRAINER_H
#define FLOTILLA_DC_TRAINER_H

/* The trainer struct, shared by train.c (steps) and ckpt.c (model files, checkpoints). */

#include "dc_internal.h"

struct fl_dc_trainer {
    fl_allocator alloc;          /* host allocator (copied) */
    struct fl__err err;          /* detail of the last failure */
    fl_dc_config cfg;            /* validated copy */
    bool failed;                 /* sticky after a failed step or collective */

    /* ---- grid ---- */
    struct fl_dc_comm *world;    /* borrowed: all dp*tp ranks */
    struct fl_dc_comm *dp_comm;  /* owned: ranks with my tp_rank, ordered by dp_rank */
    struct fl_dc_comm *tp_comm;  /* owned: ranks with my dp_rank, ordered by tp_rank */
    int dp_rank, tp_rank;        /* my coordinates: world rank = dp_rank * tp + tp_rank */

    /* ---- compute ---- */
    struct fl__dc_dev *dev;      /* owned compute backend */
    const struct fl__dc_ops *ops;/* dev->ops */

    /* ---- layout ---- */
    struct fl__dc_layer layers[FL_DC_MAX_LAYERS];
    struct fl__dc_bucket buckets[2 * FL_DC_MAX_LAYERS];
    int n_buckets;
    size_t arena_len;            /* floats in the param and grad arenas (padded buckets) */
    size_t state_len;            /* floats per optimiser moment: arena_len, or the shard */
    size_t full_len;             /* floats in the unsharded model */

    /* ---- device memory (backend pointers) ---- */
    float *params;               /* (arena_len) this rank's weights, FP32 master copy */
    float *grads;                /* (arena_len) gradients, reduced in place per bucket */
    float *opt_m, *opt_v;        /* (state_len) AdamW moments / SGD momentum in opt_m */
    int max_rows;                /* rows per forward: ceil(global_batch / dp) */
    float *act[FL_DC_MAX_LAYERS + 1]; /* act[0] input (rows, in_0); act[i+1] output of layer
                                       * i (rows, out_l for COL layers, out otherwise) */
    float *dbuf[2];              /* (rows, widest) ping-pong activation gradients */
    int32_t *labels_d;           /* (rows) */
    float *losses_d, *correct_d; /* (rows) per-example loss and 0/1 hit */

    /* ---- host staging ---- */
    float *x_h;                  /* (rows, in_0) batch features */
    int32_t *y_h;                /* (rows) batch labels */
    float *loss_h, *correct_h;   /* (rows) */
    uint32_t *perm;              /* (perm_n) current epoch's shuffle */
    size_t perm_n;               /* examples in the data set it was made for */
    uint64_t perm_epoch;         /* epoch it belongs to; UINT64_MAX = none */

    /* ---- progress ---- */
    uint64_t step;               /* optimiser steps completed */
};

/* Marks the trainer failed (sticky), records the detail and returns rc. */
fl_status fl__dc_fail(struct fl_dc_trainer *tr, fl_status rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the detail and returns rc without failing the trainer: for refusals that changed
 * nothing and left no collective half done (e.g. a host allocation before any exchange). */
fl_status fl__dc_refuse(struct fl_dc_trainer *tr, fl_status rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Gathers the full model (canonical order) into host memory full(full_len) on every rank. */
fl_status fl__dc_gather_full(struct fl_dc_trainer *tr, float *full);
/* Scatters a full model into this rank's parameter slices and resets optimiser and step. */
fl_status fl__dc_scatter_full(struct fl_dc_trainer *tr, const float *full);

#endif /* FLOTILLA_DC_TRAINER_H */
