/* NCCL backend of the collective interface, on device buffers, one GPU per process.
 *
 * Bootstrap: the GPU is the node-local rank modulo the visible GPUs; rank 0 creates the NCCL
 * unique id and broadcasts it over MPI (mpirun, or srun with PMI: MPI hides which).
 * Ordering: each communicator has its own stream. A collective first makes that stream wait
 * for an event recorded on the bound compute stream, so it starts as soon as the gradients
 * enqueued before it are ready and runs while the compute stream goes on with backward;
 * wait() makes the compute stream wait for the collectives (no host block).
 * Failure: sync() polls instead of blocking, checking ncclCommGetAsyncError and a deadline;
 * an error or a stuck collective (dead peer) aborts the communicator with ncclCommAbort and
 * returns FL_ERR_ABORTED with a message naming the rank, so the job exits instead of
 * hanging. Small host-side control data (status agreement, broadcasts) goes over MPI. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include "dc_internal.h"

#define NCCL_TIMING_SLOTS 256

struct nccl_impl {
    ncclComm_t comm;         /* NULL after an abort */
    MPI_Comm mpi;            /* same ranks, for bootstrap and host-side data */
    cudaStream_t cs;         /* this communicator's stream */
    cudaEvent_t ready;       /* recorded on the compute stream before each collective */
    cudaEvent_t done;        /* recorded on cs by wait()/sync() */
    cudaEvent_t compute_done;/* recorded on the compute stream by sync() */
    cudaEvent_t t0[NCCL_TIMING_SLOTS], t1[NCCL_TIMING_SLOTS]; /* per-collective timing */
    int n_timed;             /* slots used since the last sync */
};

static fl_status cuda_fail(struct fl_dc_comm *c, cudaError_t e, const char *what, int line) {
    return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: %s:%d: %s: %s", c->world_rank,
                       __FILE__, line, what, cudaGetErrorString(e));
}

static fl_status nccl_fail(struct fl_dc_comm *c, ncclResult_t r, const char *what, int line) {
    struct nccl_impl *m = c->impl;
    if (m->comm) {
        ncclCommAbort(m->comm);
        m->comm = NULL;
    }
    c->failed = true;
    return fl__err_set(&c->err, FL_ERR_ABORTED,
                       "rank %d: %s:%d: %s: %s; NCCL communicator aborted", c->world_rank,
                       __FILE__, line, what, ncclGetErrorString(r));
}

#define CUDA_TRY(c, call)                                                                  \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess)                                                             \
            return cuda_fail((c), e_, #call, __LINE__);                                    \
    } while (0)

#define NCCL_TRY(c, call)                                                                  \
    do {                                                                                   \
        ncclResult_t r_ = (call);                                                          \
        if (r_ != ncclSuccess)                                                             \
            return nccl_fail((c), r_, #call, __LINE__);                                    \
    } while (0)

/* Orders the comm stream after the compute stream and opens a timing slot. */
static fl_status before(struct fl_dc_comm *c) {
    struct nccl_impl *m = c->impl;
    if (!m->comm)
        return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: NCCL communicator was aborted",
                           c->world_rank);
    if (c->stream) {
        CUDA_TRY(c, cudaEventRecord(m->ready, (cudaStream_t)c->stream));
        CUDA_TRY(c, cudaStreamWaitEvent(m->cs, m->ready, 0));
    }
    if (m->n_timed < NCCL_TIMING_SLOTS)
        CUDA_TRY(c, cudaEventRecord(m->t0[m->n_timed], m->cs));
    return FL_OK;
}

static fl_status after(struct fl_dc_comm *c) {
    struct nccl_impl *m = c->impl;
    if (m->n_timed < NCCL_TIMING_SLOTS) {
        CUDA_TRY(c, cudaEventRecord(m->t1[m->n_timed], m->cs));
        m->n_timed++;
    }
    return FL_OK;
}

static fl_status n_allreduce(struct fl_dc_comm *c, float *buf, size_t n) {
    struct nccl_impl *m = c->impl;
    fl_status rc = before(c);
    if (rc != FL_OK)
        return rc;
    NCCL_TRY(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, m->comm, m->cs));
    return after(c);
}

static fl_status n_reduce_scatter(struct fl_dc_comm *c, float *recv, const float *send,
                                  size_t n) {
    struct nccl_impl *m = c->impl;
    fl_status rc = before(c);
    if (rc != FL_OK)
        return rc;
    NCCL_TRY(c, ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, m->comm, m->cs));
    return after(c);
}

static fl_status n_allgather(struct fl_dc_comm *c, float *recv, const float *send, size_t n) {
    struct nccl_impl *m = c->impl;
    fl_status rc = before(c);
    if (rc != FL_OK)
        return rc;
    NCCL_TRY(c, ncclAllGather(send, recv, n, ncclFloat, m->comm, m->cs));
    return after(c);
}

static fl_status n_bcast(struct fl_dc_comm *c, void *buf, size_t bytes, int root) {
    struct nccl_impl *m = c->impl;
    if (bytes > 0x7fffffff || MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, m->mpi) != MPI_SUCCESS)
        return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: MPI_Bcast failed", c->world_rank);
    return FL_OK;
}

static fl_status n_host_allgather(struct fl_dc_comm *c, void *recv, const void *send,
                                  size_t bytes) {
    struct nccl_impl *m = c->impl;
    if (bytes > 0x7fffffff / (size_t)c->size ||
        MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->mpi) !=
            MPI_SUCCESS)
        return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: MPI_Allgather failed",
                           c->world_rank);
    return FL_OK;
}

static fl_status n_wait(struct fl_dc_comm *c) {
    struct nccl_impl *m = c->impl;
    if (!c->stream)
        return FL_OK;
    CUDA_TRY(c, cudaEventRecord(m->done, m->cs));
    CUDA_TRY(c, cudaStreamWaitEvent((cudaStream_t)c->stream, m->done, 0));
    return FL_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fl_status n_sync(struct fl_dc_comm *c) {
    struct nccl_impl *m = c->impl;
    if (!m->comm)
        return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: NCCL communicator was aborted",
                           c->world_rank);
    CUDA_TRY(c, cudaEventRecord(m->done, m->cs));
    if (c->stream)
        CUDA_TRY(c, cudaEventRecord(m->compute_done, (cudaStream_t)c->stream));
    double t0 = now_s();
    for (;;) {
        cudaError_t a = cudaEventQuery(m->done);
        cudaError_t b = c->stream ? cudaEventQuery(m->compute_done) : cudaSuccess;
        if (a == cudaSuccess && b == cudaSuccess)
            break;
        if (a != cudaSuccess && a != cudaErrorNotReady)
            return cuda_fail(c, a, "collective stream", __LINE__);
        if (b != cudaSuccess && b != cudaErrorNotReady)
            return cuda_fail(c, b, "compute stream", __LINE__);
        ncclResult_t ar = ncclSuccess;
        NCCL_TRY(c, ncclCommGetAsyncError(m->comm, &ar));
        if (ar != ncclSuccess && ar != ncclInProgress)
            return nccl_fail(c, ar, "asynchronous NCCL error", __LINE__);
        if (now_s() - t0 > c->timeout_s) {
            ncclCommAbort(m->comm);
            m->comm = NULL;
            c->failed = true;
            return fl__err_set(&c->err, FL_ERR_ABORTED,
                               "rank %d: a collective did not finish within %.0f s (dead or "
                               "stuck peer); NCCL communicator aborted",
                               c->world_rank, c->timeout_s);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    /* busy time of the comm stream: the sum of the collectives' own durations */
    for (int i = 0; i < m->n_timed; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, m->t0[i], m->t1[i]) == cudaSuccess)
            c->busy_s += 1e-3 * ms;
    }
    m->n_timed = 0;
    return FL_OK;
}

static void n_abort(struct fl_dc_comm *c) {
    struct nccl_impl *m = c->impl;
    if (m && m->comm) {
        ncclCommAbort(m->comm);
        m->comm = NULL;
    }
    c->failed = true;
}

static void free_impl(struct fl_dc_comm *c, struct nccl_impl *m) {
    if (!m)
        return;
    if (m->comm)
        ncclCommDestroy(m->comm);
    if (m->cs)
        cudaStreamDestroy(m->cs);
    if (m->ready)
        cudaEventDestroy(m->ready);
    if (m->done)
        cudaEventDestroy(m->done);
    if (m->compute_done)
        cudaEventDestroy(m->compute_done);
    for (int i = 0; i < NCCL_TIMING_SLOTS; i++) {
        if (m->t0[i])
            cudaEventDestroy(m->t0[i]);
        if (m->t1[i])
            cudaEventDestroy(m->t1[i]);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && m->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&m->mpi);
    fl__free(&c->alloc, m, sizeof(*m));
}

static void n_close(struct fl_dc_comm *c) {
    free_impl(c, c->impl);
    c->impl = NULL;
}

static fl_status n_split(struct fl_dc_comm *c, int color, int key, struct fl_dc_comm **out);

static const struct fl__dc_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = n_allreduce,
    .reduce_scatter = n_reduce_scatter,
    .allgather = n_allgather,
    .bcast = n_bcast,
    .host_allgather = n_host_allgather,
    .wait = n_wait,
    .sync = n_sync,
    .split = n_split,
    .abort = n_abort,
    .close = n_close,
};

/* Creates the stream and events of a communicator. */
static fl_status make_impl(struct fl_dc_comm *c, struct nccl_impl *m) {
    CUDA_TRY(c, cudaStreamCreateWithFlags(&m->cs, cudaStreamNonBlocking));
    CUDA_TRY(c, cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
    CUDA_TRY(c, cudaEventCreateWithFlags(&m->done, cudaEventDisableTiming));
    CUDA_TRY(c, cudaEventCreateWithFlags(&m->compute_done, cudaEventDisableTiming));
    for (int i = 0; i < NCCL_TIMING_SLOTS; i++) {
        CUDA_TRY(c, cudaEventCreate(&m->t0[i]));
        CUDA_TRY(c, cudaEventCreate(&m->t1[i]));
    }
    return FL_OK;
}

static fl_status wrap(struct fl_dc_comm **out, struct fl_dc_comm *parent, MPI_Comm mpi,
                      ncclComm_t nc, int world_rank, const fl_allocator *alloc) {
    int rank = 0, size = 1;
    MPI_Comm_rank(mpi, &rank);
    MPI_Comm_size(mpi, &size);
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    fl_status rc = fl__dc_comm_new(out, &nccl_ops, FL_DC_COMM_NCCL, rank, size, alloc);
    if (rc != FL_OK) {
        MPI_Comm_free(&mpi);
        if (nc)
            ncclCommDestroy(nc);
        return rc;
    }
    struct fl_dc_comm *c = *out;
    c->world_rank = world_rank;
    c->self_timed = true;
    if (parent) {
        c->timeout_s = parent->timeout_s;
        c->stream = parent->stream;
    }
    struct nccl_impl *m = fl__calloc(&c->alloc, 1, sizeof(*m));
    if (!m) {
        MPI_Comm_free(&mpi);
        if (nc)
            ncclCommDestroy(nc);
        fl__free(&c->alloc, c, sizeof(*c));
        *out = NULL;
        return fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for an NCCL communicator");
    }
    m->mpi = mpi;
    m->comm = nc;
    c->impl = m;
    rc = make_impl(c, m);
    if (rc != FL_OK) {
        fl__dc_last_error_set(rc, "%s", fl__err_msg(&c->err));
        fl_dc_comm_close(c);
        *out = NULL;
    }
    return rc;
}

static fl_status n_split(struct fl_dc_comm *c, int color, int key, struct fl_dc_comm **out) {
    struct nccl_impl *m = c->impl;
    MPI_Comm sub;
    ncclComm_t nc = NULL;
    if (MPI_Comm_split(m->mpi, color, key, &sub) != MPI_SUCCESS)
        return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: MPI_Comm_split failed",
                           c->world_rank);
    ncclResult_t r = ncclCommSplit(m->comm, color, key, &nc, NULL);
    if (r != ncclSuccess) {
        MPI_Comm_free(&sub);
        return nccl_fail(c, r, "ncclCommSplit", __LINE__);
    }
    fl_status rc = wrap(out, c, sub, nc, c->world_rank, &c->alloc);
    if (rc != FL_OK)
        return fl__err_set(&c->err, rc, "%s", fl_dc_last_error());
    return FL_OK;
}

fl_status fl__dc_comm_nccl_open(struct fl_dc_comm **out, const fl_allocator *alloc) {
    MPI_Comm dup, node;
    int rank = 0, size = 1, local = 0, ngpu = 0;
    ncclUniqueId id;
    ncclComm_t nc = NULL;
    ncclResult_t r;
    cudaError_t e;
    *out = NULL;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS)
        return fl__dc_last_error_set(FL_ERR_IO, "MPI_Comm_dup failed");
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
    /* one process per GPU: the node-local rank picks the device */
    if (MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    if ((e = cudaGetDeviceCount(&ngpu)) != cudaSuccess || ngpu == 0) {
        MPI_Comm_free(&dup);
        return fl__dc_last_error_set(FL_ERR_UNSUPPORTED, "rank %d: no GPU visible (%s)", rank,
                                     e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    }
    if ((e = cudaSetDevice(local % ngpu)) != cudaSuccess) {
        MPI_Comm_free(&dup);
        return fl__dc_last_error_set(FL_ERR_IO, "rank %d: %s:%d: cudaSetDevice(%d): %s", rank,
                                     __FILE__, __LINE__, local % ngpu, cudaGetErrorString(e));
    }
    memset(&id, 0, sizeof(id));
    if (rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
        /* the others are about to wait in the broadcast: end the job cleanly instead */
        fl__dc_last_error_set(FL_ERR_IO, "rank 0: %s:%d: ncclGetUniqueId: %s", __FILE__,
                              __LINE__, ncclGetErrorString(r));
        MPI_Comm_free(&dup);
        return FL_ERR_IO;
    }
    if (MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, dup) != MPI_SUCCESS) {
        MPI_Comm_free(&dup);
        return fl__dc_last_error_set(FL_ERR_IO, "rank %d: broadcasting the NCCL id failed",
                                     rank);
    }
    if ((r = ncclCommInitRank(&nc, size, id, rank)) != ncclSuccess) {
        MPI_Comm_free(&dup);
        return fl__dc_last_error_set(FL_ERR_IO, "rank %d: %s:%d: ncclCommInitRank: %s", rank,
                                     __FILE__, __LINE__, ncclGetErrorString(r));
    }
    return wrap(out, NULL, dup, nc, rank, alloc);
}
