#ifndef FLOTILLA_DC_INTERNAL_H
#define FLOTILLA_DC_INTERNAL_H

/* Datacenter internals (fl__dc_ prefix): the compute-backend vtable, the collective vtable,
 * the model layout and the trainer struct. Never installed, never exported. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fl_internal.h"
#include "flotilla/datacenter.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records the detail of a create/open failure for fl_dc_last_error(); returns code. */
fl_status fl__dc_last_error_set(fl_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A copied allocator (fl__allocator_copy) as an argument for another create call:
 * the zeroed libc default becomes NULL. */
static inline const fl_allocator *fl__dc_alloc_arg(const fl_allocator *a) {
    return a && a->alloc ? a : NULL;
}

/* Monotonic wall clock in seconds. */
double fl__dc_now(void);

/* Start of chunk i when n items are split over parts as evenly as possible:
 * part i holds [chunk_start(n,parts,i), chunk_start(n,parts,i+1)). */
static inline size_t fl__dc_chunk_start(size_t n, size_t parts, size_t i) {
    return (n / parts) * i + (i < n % parts ? i : n % parts);
}
static inline size_t fl__dc_chunk_len(size_t n, size_t parts, size_t i) {
    return n / parts + (i < n % parts ? 1 : 0);
}

/* ---- compute backend ----
 * Every pointer passed to these functions is "device" memory of the backend (host memory
 * for the CPU backend). All calls are enqueued in order on the backend's compute stream;
 * d2h waits for completion. Matrices are row-major. */
struct fl__dc_dev;

struct fl__dc_ops {
    const char *name;
    fl_dc_backend kind;
    /* zero-filled allocation of bytes; *p NULL on failure */
    fl_status (*alloc)(struct fl__dc_dev *d, void **p, size_t bytes);
    void (*free)(struct fl__dc_dev *d, void *p);
    fl_status (*h2d)(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes);
    fl_status (*d2h)(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes);
    fl_status (*d2d)(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes);
    fl_status (*zero)(struct fl__dc_dev *d, void *p, size_t bytes);
    /* C(M,N) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T; lda etc. are row strides */
    fl_status (*gemm)(struct fl__dc_dev *d, bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc);
    /* Y(M,N) += b(N) broadcast over rows */
    fl_status (*bias_add)(struct fl__dc_dev *d, float *Y, const float *b, int M, int N);
    /* Y = max(Y, 0) in place, n elements */
    fl_status (*relu)(struct fl__dc_dev *d, float *Y, size_t n);
    /* dY *= (H > 0) where H is the post-ReLU activation, n elements */
    fl_status (*relu_bwd)(struct fl__dc_dev *d, float *dY, const float *H, size_t n);
    /* db(N) = beta*db + sum over rows of dY(M,N), rows added in order 0..M-1 */
    fl_status (*bias_grad)(struct fl__dc_dev *d, float *db, const float *dY, int M, int N,
                           float beta);
    /* Row-wise softmax cross-entropy on logits (M,N) with labels (M): losses(M) = -log p_y,
     * dlogits(M,N) = (softmax - onehot) * scale (may alias logits), correct(M) = argmax==y */
    fl_status (*xent)(struct fl__dc_dev *d, float *dlogits, float *losses, float *correct,
                      const float *logits, const int32_t *labels, int M, int N, float scale);
    /* AdamW on n elements: m,v moments; t is the 1-based step for bias correction */
    fl_status (*adamw)(struct fl__dc_dev *d, float *p, const float *g, float *m, float *v,
                       size_t n, float lr, float b1, float b2, float eps, float wd, uint64_t t);
    /* SGD with optional momentum buffer m (NULL when momentum == 0) */
    fl_status (*sgd)(struct fl__dc_dev *d, float *p, const float *g, float *m, size_t n,
                     float lr, float momentum, float wd);
    /* Opaque compute stream handed to the NCCL comm for ordering (NULL on the CPU). */
    void *(*stream)(struct fl__dc_dev *d);
    /* Blocks until every enqueued call has finished. */
    fl_status (*sync)(struct fl__dc_dev *d);
    void (*destroy)(struct fl__dc_dev *d);
};

struct fl__dc_dev {
    const struct fl__dc_ops *ops;
    struct fl__err err;   /* detail of the last failure */
    const fl_allocator *alloc; /* host allocator of the owner */
    void *impl;           /* backend state */
};

/* CPU backend (always built). */
fl_status fl__dc_dev_cpu_create(struct fl__dc_dev **out, const fl_allocator *alloc);
#ifdef FL_DC_WITH_CUDA
/* CUDA backend: uses the current device; math selects cuBLAS compute type. */
fl_status fl__dc_dev_cuda_create(struct fl__dc_dev **out, const fl_allocator *alloc,
                                 fl_dc_math math);
/* Number of visible GPUs (0 on any error, e.g. no driver). */
int fl__dc_cuda_device_count(void);
#endif

/* ---- collectives ----
 * Ops are enqueued: on NCCL they run on the comm's own stream after everything already
 * enqueued on the bound compute stream, and wait() orders later compute work after them; on
 * MPI and single they complete before returning. Reductions are sums in a fixed order
 * (rank 0 first), so every rank gets bit-identical results. */
struct fl_dc_comm;

struct fl__dc_comm_ops {
    const char *name;
    /* buf(n) <- sum over ranks, in place */
    fl_status (*allreduce)(struct fl_dc_comm *c, float *buf, size_t n);
    /* recv(n) <- sum over ranks of send[rank*n .. rank*n+n); recv may equal send + rank*n */
    fl_status (*reduce_scatter)(struct fl_dc_comm *c, float *recv, const float *send, size_t n);
    /* recv(size*n) <- concatenation of every rank's send(n); send may equal recv + rank*n */
    fl_status (*allgather)(struct fl_dc_comm *c, float *recv, const float *send, size_t n);
    /* HOST memory: buf(bytes) from root to all (small control data; synchronous) */
    fl_status (*bcast)(struct fl_dc_comm *c, void *buf, size_t bytes, int root);
    /* HOST memory: recv(size*bytes) <- every rank's send(bytes) (synchronous) */
    fl_status (*host_allgather)(struct fl_dc_comm *c, void *recv, const void *send,
                                size_t bytes);
    /* later compute work waits for enqueued collectives (no host wait) */
    fl_status (*wait)(struct fl_dc_comm *c);
    /* host waits until collectives and the bound compute stream are done, watching for
     * asynchronous errors and the timeout */
    fl_status (*sync)(struct fl_dc_comm *c);
    /* new communicator of the ranks with the same color, ordered by key */
    fl_status (*split)(struct fl_dc_comm *c, int color, int key, struct fl_dc_comm **out);
    void (*abort)(struct fl_dc_comm *c);
    void (*close)(struct fl_dc_comm *c);
};

struct fl_dc_comm {
    const struct fl__dc_comm_ops *ops;
    fl_dc_comm_kind kind;
    int rank, size;          /* in this communicator */
    int world_rank;          /* rank in the job, for messages */
    fl_allocator alloc;      /* host allocator */
    struct fl__err err;      /* detail of the last failure */
    double busy_s;           /* accumulated time in collectives (s) */
    double timeout_s;        /* NCCL: stuck-collective limit (s) */
    bool failed;             /* sticky after an abort */
    bool self_timed;         /* the backend accounts busy_s itself (GPU events) */
    void *stream;            /* NCCL: bound compute stream (cudaStream_t) */
    void *impl;              /* backend state */
};

/* Allocates the common part of a communicator. */
fl_status fl__dc_comm_new(struct fl_dc_comm **out, const struct fl__dc_comm_ops *ops,
                          fl_dc_comm_kind kind, int rank, int size, const fl_allocator *alloc);
fl_status fl__dc_comm_single_open(struct fl_dc_comm **out, const fl_allocator *alloc);
#ifdef FL_DC_WITH_MPI
fl_status fl__dc_comm_mpi_open(struct fl_dc_comm **out, const fl_allocator *alloc);
#endif
#ifdef FL_DC_WITH_CUDA
fl_status fl__dc_comm_nccl_open(struct fl_dc_comm **out, const fl_allocator *alloc);
#endif
/* Binds the compute stream that collectives order against (NCCL only; no-op otherwise). */
void fl__dc_comm_bind_stream(struct fl_dc_comm *c, void *stream);

/* Timed front ends: call the backend, account busy time, mark failure sticky. */
fl_status fl__dc_allreduce(struct fl_dc_comm *c, float *buf, size_t n);
fl_status fl__dc_reduce_scatter(struct fl_dc_comm *c, float *recv, const float *send, size_t n);
fl_status fl__dc_allgather(struct fl_dc_comm *c, float *recv, const float *send, size_t n);
fl_status fl__dc_bcast(struct fl_dc_comm *c, void *buf, size_t bytes, int root);
fl_status fl__dc_host_allgather(struct fl_dc_comm *c, void *recv, const void *send,
                                size_t bytes);
/* Every rank passes its status; all get FL_OK only if every rank had FL_OK, else the
 * first failing rank's code (and *bad_rank, if non-NULL, that rank). Synchronous. */
fl_status fl__dc_agree(struct fl_dc_comm *c, fl_status mine, int *bad_rank);
fl_status fl__dc_wait(struct fl_dc_comm *c);
fl_status fl__dc_sync(struct fl_dc_comm *c);

/* ---- data ---- */

struct fl_dc_dataset {
    fl_allocator alloc;  /* copied allocator */
    size_t n;            /* examples */
    size_t dim;          /* features per example */
    int classes;         /* max label + 1 */
    float *x;            /* (n, dim) features */
    int32_t *y;          /* (n) labels */
};

/* Reads a whole file, gunzipping it when it starts with the gzip magic. */
fl_status fl__dc_read_maybe_gz(const fl_allocator *a, const char *path, uint8_t **out,
                               size_t *len, struct fl__err *err);

/* Per-epoch permutation of 0..n-1 from (seed, epoch): Fisher-Yates over splitmix64. */
void fl__dc_permutation(uint32_t *perm, size_t n, uint64_t seed, uint64_t epoch);
/* splitmix64 step: next value of the state */
uint64_t fl__dc_splitmix64(uint64_t *state);

/* ---- model layout ---- */

/* How one linear layer is split over the TP ranks (Megatron-LM). */
enum fl__dc_split {
    FL__DC_REP = 0, /* replicated: every TP rank holds the whole layer */
    FL__DC_COL = 1, /* column-parallel: output features split, input replicated */
    FL__DC_ROW = 2  /* row-parallel: input features split, partial outputs all-reduced */
};

struct fl__dc_layer {
    int in, out;            /* full widths */
    enum fl__dc_split split;
    int in_l, out_l;        /* this rank's widths of W (out_l, in_l) */
    int in_off, out_off;    /* where this rank's slice starts in the full W */
    size_t w_off, b_off;    /* offsets (floats) of W (out_l, in_l) and b in the arena */
    int b_len;              /* bias floats held: out_l for COL, out otherwise */
    int bucket;             /* DP bucket holding W (b is in the same or a later one) */
};

struct fl__dc_bucket {
    size_t off;             /* first float in the arena */
    size_t len;             /* floats holding tensors */
    size_t padded;          /* len rounded up to a multiple of dp (ZeRO shards) */
    size_t shard_off;       /* this bucket's first float in the sharded optimiser state */
    int first_tensor;       /* index of the first tensor (2*layer + is_bias) */
    bool launched;          /* reduction started this step */
};

/* Fills the per-layer split and offsets and the buckets for (tp_rank of tp, dp).
 * Returns the arena size in floats via *arena_len. Pure function (no allocation
 * beyond the caller's arrays). */
void fl__dc_layout(const fl_dc_config *cfg, int tp_rank, struct fl__dc_layer *layers,
                   struct fl__dc_bucket *buckets, int *n_buckets, size_t *arena_len);

/* Canonical offset of layer i's weight in the full flattened model. */
size_t fl__dc_full_offset(const fl_dc_config *cfg, int layer, bool bias);

/* Fills full (canonical order) with the deterministic initial weights of cfg->seed:
 * U(-1/sqrt(in), 1/sqrt(in)) for weights and biases, as PyTorch's nn.Linear. */
void fl__dc_init_full(const fl_dc_config *cfg, float *full);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_DC_INTERNAL_H */
