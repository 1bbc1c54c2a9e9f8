/* MPI backend of the collective interface, on host buffers.
 *
 * MPI_Allreduce may sum in any order and need not give every rank the same bits, which
 * would let DP replicas drift apart. So every reduction here is done by hand: each rank
 * receives everybody's copy of one chunk (MPI_Alltoallv), sums them in rank order
 * 0, 1, ..., size-1, and the chunks are then all-gathered. That is the reduce-scatter +
 * all-gather decomposition of a ring all-reduce with the same bandwidth per rank, and the
 * result is bit-identical on every rank and from run to run. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "dc_internal.h"

struct mpi_impl {
    MPI_Comm comm;     /* our own duplicate, errors returned */
    float *scratch;    /* receive area for the all-to-all */
    size_t scratch_n;  /* floats in scratch */
    int *counts;       /* (4, size) ints: send counts/displs, recv counts/displs */
};

static fl_status mpi_fail(struct fl_dc_comm *c, int code, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof(s), "unknown MPI error");
    return fl__err_set(&c->err, FL_ERR_ABORTED, "rank %d: %s failed: %s", c->world_rank, what, s);
}

#define MPI_TRY(c, call)                                                                   \
    do {                                                                                   \
        int e_ = (call);                                                                   \
        if (e_ != MPI_SUCCESS)                                                             \
            return mpi_fail((c), e_, #call);                                               \
    } while (0)

static fl_status scratch_reserve(struct fl_dc_comm *c, size_t n) {
    struct mpi_impl *m = c->impl;
    if (m->scratch_n >= n)
        return FL_OK;
    float *p = fl__alloc_array(&c->alloc, n, sizeof(float));
    if (!p)
        return fl__err_set(&c->err, FL_ERR_NOMEM, "no memory for %zu floats", n);
    fl__free(&c->alloc, m->scratch, m->scratch_n * sizeof(float));
    m->scratch = p;
    m->scratch_n = n;
    return FL_OK;
}

/* Sums parts consecutive blocks of len floats from src into dst in block order. */
static void ordered_sum(float *dst, const float *src, int parts, size_t len) {
    for (size_t k = 0; k < len; k++)
        dst[k] = src[k];
    for (int i = 1; i < parts; i++) {
        const float *s = src + (size_t)i * len;
        for (size_t k = 0; k < len; k++)
            dst[k] += s[k];
    }
}

static fl_status mpi_allreduce(struct fl_dc_comm *c, float *buf, size_t n) {
    struct mpi_impl *m = c->impl;
    int P = c->size;
    if (n > INT_MAX)
        return fl__err_set(&c->err, FL_ERR_TOO_LARGE, "all-reduce of %zu floats", n);
    size_t mine = fl__dc_chunk_len(n, (size_t)P, (size_t)c->rank);
    fl_status rc = scratch_reserve(c, mine * (size_t)P + 1);
    if (rc != FL_OK)
        return rc;
    int *sc = m->counts, *sd = sc + P, *rcnt = sd + P, *rd = rcnt + P;
    for (int j = 0; j < P; j++) {
        sc[j] = (int)fl__dc_chunk_len(n, (size_t)P, (size_t)j);
        sd[j] = (int)fl__dc_chunk_start(n, (size_t)P, (size_t)j);
        rcnt[j] = (int)mine;
        rd[j] = (int)(mine * (size_t)j);
    }
    /* reduce-scatter: chunk j of every rank goes to rank j */
    MPI_TRY(c, MPI_Alltoallv(buf, sc, sd, MPI_FLOAT, m->scratch, rcnt, rd, MPI_FLOAT, m->comm));
    ordered_sum(buf + fl__dc_chunk_start(n, (size_t)P, (size_t)c->rank), m->scratch, P, mine);
    /* all-gather the reduced chunks back in place */
    MPI_TRY(c, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, sc, sd, MPI_FLOAT, m->comm));
    return FL_OK;
}

static fl_status mpi_reduce_scatter(struct fl_dc_comm *c, float *recv, const float *send,
                                    size_t n) {
    struct mpi_impl *m = c->impl;
    int P = c->size;
    if (n > INT_MAX / (size_t)P)
        return fl__err_set(&c->err, FL_ERR_TOO_LARGE, "reduce-scatter of %zu floats", n);
    fl_status rc = scratch_reserve(c, n * (size_t)P + 1);
    if (rc != FL_OK)
        return rc;
    MPI_TRY(c, MPI_Alltoall(send, (int)n, MPI_FLOAT, m->scratch, (int)n, MPI_FLOAT, m->comm));
    ordered_sum(recv, m->scratch, P, n);
    return FL_OK;
}

static fl_status mpi_allgather(struct fl_dc_comm *c, float *recv, const float *send, size_t n) {
    struct mpi_impl *m = c->impl;
    if (n > INT_MAX / (size_t)c->size)
        return fl__err_set(&c->err, FL_ERR_TOO_LARGE, "all-gather of %zu floats", n);
    if (send == recv + (size_t)c->rank * n)
        MPI_TRY(c, MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, recv, (int)n, MPI_FLOAT, m->comm));
    else
        MPI_TRY(c, MPI_Allgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, m->comm));
    return FL_OK;
}

static fl_status mpi_bcast(struct fl_dc_comm *c, void *buf, size_t bytes, int root) {
    struct mpi_impl *m = c->impl;
    if (bytes > INT_MAX)
        return fl__err_set(&c->err, FL_ERR_TOO_LARGE, "broadcast of %zu bytes", bytes);
    MPI_TRY(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, m->comm));
    return FL_OK;
}

static fl_status mpi_host_allgather(struct fl_dc_comm *c, void *recv, const void *send,
                                    size_t bytes) {
    struct mpi_impl *m = c->impl;
    if (bytes > INT_MAX / (size_t)c->size)
        return fl__err_set(&c->err, FL_ERR_TOO_LARGE, "all-gather of %zu bytes", bytes);
    MPI_TRY(c, MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->comm));
    return FL_OK;
}

static fl_status mpi_nop(struct fl_dc_comm *c) { return FL_OK; }

static fl_status mpi_split(struct fl_dc_comm *c, int color, int key, struct fl_dc_comm **out);

/* MPI offers no abort of one communicator that leaves the process usable; the
 * application ends the job with MPI_Abort after reading the message. */
static void mpi_abort(struct fl_dc_comm *c) { c->failed = true; }

static void mpi_close(struct fl_dc_comm *c) {
    struct mpi_impl *m = c->impl;
    if (!m)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && m->comm != MPI_COMM_NULL)
        MPI_Comm_free(&m->comm);
    fl__free(&c->alloc, m->scratch, m->scratch_n * sizeof(float));
    fl__free(&c->alloc, m->counts, 4 * (size_t)c->size * sizeof(int));
    fl__free(&c->alloc, m, sizeof(*m));
    c->impl = NULL;
}

static const struct fl__dc_comm_ops mpi_ops = {
    .name = "mpi",
    .allreduce = mpi_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .bcast = mpi_bcast,
    .host_allgather = mpi_host_allgather,
    .wait = mpi_nop,
    .sync = mpi_nop,
    .split = mpi_split,
    .abort = mpi_abort,
    .close = mpi_close,
};

/* Wraps an MPI communicator we own (comm is freed on failure). */
static fl_status wrap(struct fl_dc_comm **out, MPI_Comm comm, int world_rank,
                      const fl_allocator *alloc) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    fl_status rc = fl__dc_comm_new(out, &mpi_ops, FL_DC_COMM_MPI, rank, size, alloc);
    if (rc != FL_OK)
        goto out_free_comm;
    struct fl_dc_comm *c = *out;
    c->world_rank = world_rank;
    struct mpi_impl *m = fl__calloc(&c->alloc, 1, sizeof(*m));
    int *counts = fl__alloc_array(&c->alloc, 4 * (size_t)size, sizeof(int));
    if (!m || !counts) {
        fl__free(&c->alloc, m, sizeof(*m));
        fl__free(&c->alloc, counts, 4 * (size_t)size * sizeof(int));
        fl__free(&c->alloc, c, sizeof(*c));
        *out = NULL;
        rc = fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for an MPI communicator");
        goto out_free_comm;
    }
    m->comm = comm;
    m->counts = counts;
    c->impl = m;
    return FL_OK;
out_free_comm:
    MPI_Comm_free(&comm);
    return rc;
}

static fl_status mpi_split(struct fl_dc_comm *c, int color, int key, struct fl_dc_comm **out) {
    struct mpi_impl *m = c->impl;
    MPI_Comm sub;
    MPI_TRY(c, MPI_Comm_split(m->comm, color, key, &sub));
    fl_status rc = wrap(out, sub, c->world_rank, &c->alloc);
    if (rc != FL_OK)
        return fl__err_set(&c->err, rc, "%s", fl_dc_last_error());
    return FL_OK;
}

fl_status fl__dc_comm_mpi_open(struct fl_dc_comm **out, const fl_allocator *alloc) {
    MPI_Comm dup;
    int e = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    if (e != MPI_SUCCESS)
        return fl__dc_last_error_set(FL_ERR_IO, "MPI_Comm_dup failed (%d)", e);
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    return wrap(out, dup, wr, alloc);
}
