/* The collective interface: public communicator functions, timed front ends and the
 * single-process backend. DP, TP and ZeRO in train.c are written against fl__dc_* only. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dc_internal.h"

#ifdef FL_DC_WITH_MPI
#include <mpi.h>
#endif

/* ---- last-error slot for calls that return no handle ---- */

static _Thread_local char fl__dc_last_msg[FL__ERRMSG_MAX];

fl_status fl__dc_last_error_set(fl_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fl__dc_last_msg, sizeof(fl__dc_last_msg), fmt, ap);
    va_end(ap);
    return code;
}

const char *fl_dc_last_error(void) {
    return fl__dc_last_msg[0] ? fl__dc_last_msg : "no error";
}

double fl__dc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t fl_dc_max_layers(void) { return FL_DC_MAX_LAYERS; }

/* ---- common part ---- */

fl_status fl__dc_comm_new(struct fl_dc_comm **out, const struct fl__dc_comm_ops *ops,
                          fl_dc_comm_kind kind, int rank, int size, const fl_allocator *alloc) {
    fl_allocator a;
    *out = NULL;
    if (fl__allocator_copy(&a, fl__dc_alloc_arg(alloc)) != FL_OK)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "bad allocator struct");
    struct fl_dc_comm *c = fl__calloc(&a, 1, sizeof(*c));
    if (!c)
        return fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for a communicator");
    c->ops = ops;
    c->kind = kind;
    c->rank = rank;
    c->size = size;
    c->world_rank = rank;
    c->alloc = a;
    c->timeout_s = 300.0;
    *out = c;
    return FL_OK;
}

void fl__dc_comm_bind_stream(struct fl_dc_comm *c, void *stream) {
    if (c)
        c->stream = stream;
}

/* ---- single-process backend: every collective over one rank is a copy ---- */

static fl_status single_allreduce(struct fl_dc_comm *c, float *buf, size_t n) {
    return FL_OK;
}

static fl_status single_reduce_scatter(struct fl_dc_comm *c, float *recv, const float *send,
                                       size_t n) {
    if (recv != send)
        memmove(recv, send, n * sizeof(float));
    return FL_OK;
}

static fl_status single_allgather(struct fl_dc_comm *c, float *recv, const float *send,
                                  size_t n) {
    if (recv != send)
        memmove(recv, send, n * sizeof(float));
    return FL_OK;
}

static fl_status single_bcast(struct fl_dc_comm *c, void *buf, size_t bytes, int root) {
    return FL_OK;
}

static fl_status single_host_allgather(struct fl_dc_comm *c, void *recv, const void *send,
                                       size_t bytes) {
    if (recv != send)
        memmove(recv, send, bytes);
    return FL_OK;
}

static fl_status single_nop(struct fl_dc_comm *c) { return FL_OK; }

static fl_status single_split(struct fl_dc_comm *c, int color, int key,
                              struct fl_dc_comm **out);

static void single_abort(struct fl_dc_comm *c) { c->failed = true; }

static void single_close(struct fl_dc_comm *c) {}

static const struct fl__dc_comm_ops single_ops = {
    .name = "single",
    .allreduce = single_allreduce,
    .reduce_scatter = single_reduce_scatter,
    .allgather = single_allgather,
    .bcast = single_bcast,
    .host_allgather = single_host_allgather,
    .wait = single_nop,
    .sync = single_nop,
    .split = single_split,
    .abort = single_abort,
    .close = single_close,
};

static fl_status single_split(struct fl_dc_comm *c, int color, int key,
                              struct fl_dc_comm **out) {
    fl_status rc = fl__dc_comm_new(out, &single_ops, FL_DC_COMM_SINGLE, 0, 1, &c->alloc);
    if (rc == FL_OK)
        (*out)->world_rank = c->world_rank;
    return rc;
}

fl_status fl__dc_comm_single_open(struct fl_dc_comm **out, const fl_allocator *alloc) {
    return fl__dc_comm_new(out, &single_ops, FL_DC_COMM_SINGLE, 0, 1, alloc);
}

/* ---- timed front ends ---- */

/* Every front end refuses to run on a failed communicator so that a rank never enters a
 * collective its peers have given up on. */
#define FL__DC_COMM_CALL(c, expr)                                                          \
    do {                                                                                   \
        if ((c)->failed)                                                                   \
            return fl__err_set(&(c)->err, FL_ERR_ABORTED,                                  \
                               "rank %d: communicator already failed", (c)->world_rank);   \
        double t0_ = fl__dc_now();                                                         \
        fl_status rc_ = (expr);                                                            \
        if (!(c)->self_timed)                                                              \
            (c)->busy_s += fl__dc_now() - t0_;                                             \
        if (rc_ != FL_OK && rc_ != FL_ERR_MISUSE)                                          \
            (c)->failed = true;                                                            \
        return rc_;                                                                        \
    } while (0)

fl_status fl__dc_allreduce(struct fl_dc_comm *c, float *buf, size_t n) {
    FL__DC_COMM_CALL(c, c->ops->allreduce(c, buf, n));
}

fl_status fl__dc_reduce_scatter(struct fl_dc_comm *c, float *recv, const float *send, size_t n) {
    FL__DC_COMM_CALL(c, c->ops->reduce_scatter(c, recv, send, n));
}

fl_status fl__dc_allgather(struct fl_dc_comm *c, float *recv, const float *send, size_t n) {
    FL__DC_COMM_CALL(c, c->ops->allgather(c, recv, send, n));
}

fl_status fl__dc_bcast(struct fl_dc_comm *c, void *buf, size_t bytes, int root) {
    FL__DC_COMM_CALL(c, c->ops->bcast(c, buf, bytes, root));
}

fl_status fl__dc_host_allgather(struct fl_dc_comm *c, void *recv, const void *send,
                                size_t bytes) {
    FL__DC_COMM_CALL(c, c->ops->host_allgather(c, recv, send, bytes));
}

fl_status fl__dc_agree(struct fl_dc_comm *c, fl_status mine, int *bad_rank) {
    int st[64], *all = st;
    fl_status rc;
    if (bad_rank)
        *bad_rank = -1;
    if ((size_t)c->size > sizeof(st) / sizeof(st[0])) {
        all = fl__alloc_array(&c->alloc, (size_t)c->size, sizeof(int));
        if (!all)
            return fl__err_set(&c->err, FL_ERR_NOMEM, "no memory to agree on a status");
    }
    int v = (int)mine;
    rc = fl__dc_host_allgather(c, all, &v, sizeof(int));
    if (rc == FL_OK) {
        for (int i = 0; i < c->size; i++) {
            if (all[i] != FL_OK) {
                rc = (fl_status)all[i];
                if (bad_rank)
                    *bad_rank = i;
                break;
            }
        }
    }
    if (all != st)
        fl__free(&c->alloc, all, (size_t)c->size * sizeof(int));
    return rc;
}

fl_status fl__dc_wait(struct fl_dc_comm *c) { FL__DC_COMM_CALL(c, c->ops->wait(c)); }

fl_status fl__dc_sync(struct fl_dc_comm *c) { FL__DC_COMM_CALL(c, c->ops->sync(c)); }

/* ---- public API ---- */

#ifdef FL_DC_WITH_MPI
static int mpi_ready(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}
#endif

fl_status fl_dc_comm_open(fl_dc_comm **out, fl_dc_comm_kind kind, const fl_allocator *alloc) {
    fl_allocator a;
    if (!out)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "out is NULL");
    *out = NULL;
    /* checked here: the backends take a zeroed struct for the libc default (split copies) */
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "bad allocator struct");
    if (kind == FL_DC_COMM_AUTO) {
        kind = FL_DC_COMM_SINGLE;
#ifdef FL_DC_WITH_MPI
        if (mpi_ready()) {
            int size = 1;
            MPI_Comm_size(MPI_COMM_WORLD, &size);
            if (size > 1)
                kind = FL_DC_COMM_MPI;
#ifdef FL_DC_WITH_CUDA
            if (fl__dc_cuda_device_count() > 0)
                kind = FL_DC_COMM_NCCL;
#endif
        }
#endif
    }
    switch (kind) {
    case FL_DC_COMM_SINGLE:
        return fl__dc_comm_single_open(out, alloc);
    case FL_DC_COMM_MPI:
#ifdef FL_DC_WITH_MPI
        if (!mpi_ready())
            return fl__dc_last_error_set(FL_ERR_UNSUPPORTED, "MPI is not initialised");
        return fl__dc_comm_mpi_open(out, alloc);
#else
        return fl__dc_last_error_set(FL_ERR_UNSUPPORTED, "built without MPI");
#endif
    case FL_DC_COMM_NCCL:
#if defined(FL_DC_WITH_CUDA) && defined(FL_DC_WITH_MPI)
        if (!mpi_ready())
            return fl__dc_last_error_set(FL_ERR_UNSUPPORTED,
                                         "NCCL bootstrap needs MPI to be initialised");
        return fl__dc_comm_nccl_open(out, alloc);
#else
        return fl__dc_last_error_set(FL_ERR_UNSUPPORTED, "built without CUDA/NCCL or MPI");
#endif
    default:
        return fl__dc_last_error_set(FL_ERR_MISUSE, "unknown communicator kind %d", (int)kind);
    }
}

void fl_dc_comm_close(fl_dc_comm *comm) {
    if (!comm)
        return;
    comm->ops->close(comm);
    fl_allocator a = comm->alloc;
    fl__free(&a, comm, sizeof(*comm));
}

int fl_dc_comm_rank(const fl_dc_comm *comm) { return comm ? comm->rank : -1; }

int fl_dc_comm_size(const fl_dc_comm *comm) { return comm ? comm->size : 0; }

fl_dc_comm_kind fl_dc_comm_kind_of(const fl_dc_comm *comm) {
    return comm ? comm->kind : FL_DC_COMM_SINGLE;
}

void fl_dc_comm_abort(fl_dc_comm *comm) {
    if (comm) {
        comm->ops->abort(comm);
        comm->failed = true;
    }
}

const char *fl_dc_comm_errmsg(const fl_dc_comm *comm) {
    return comm ? fl__err_msg(&comm->err) : "NULL communicator";
}
