#ifndef FLOTILLA_DATACENTER_H
#define FLOTILLA_DATACENTER_H

/* Flotilla datacenter trainer: trains the population's global model (the MLP family the
 * SDK trains: softmax regression and MLPs with ReLU, e.g. 784-128-10) on central data with
 * data parallelism (DP), Megatron-style tensor parallelism (TP) and ZeRO stage 1, over one
 * collective interface with three backends (single process, MPI on the CPU, NCCL on GPUs).
 *
 * The library never calls MPI_Init/MPI_Finalize, never prints and never exits: the
 * application (flotilla-train) owns the process, MPI and output. Errors are fl_status codes
 * with a detail string on the handle. Every collective function below must be called by all
 * ranks of the communicator, in the same order.
 *
 * Tensor naming in model files (safetensors, F32, PyTorch nn.Linear layout):
 *   "layers.<i>.weight"  (out_i, in_i)   row-major
 *   "layers.<i>.bias"    (out_i)
 * for i = 0 .. n_layers-1, with in_0 = sizes[0] and out_i = sizes[i+1]. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sizes ---- */

/* Most linear layers in one model. */
#define FL_DC_MAX_LAYERS 16
/* Returns FL_DC_MAX_LAYERS of the loaded library. */
FL_API size_t fl_dc_max_layers(void);

/* ---- enums (values are stable; lists only grow) ---- */

/* Where the arithmetic runs. */
typedef enum fl_dc_backend {
    FL_DC_BACKEND_AUTO = 0, /* CUDA if built in and a GPU is visible, else CPU */
    FL_DC_BACKEND_CPU = 1,  /* plain C + OpenBLAS (or a built-in GEMM) on host memory */
    FL_DC_BACKEND_CUDA = 2  /* cuBLAS + CUDA C kernels on the rank's GPU */
} fl_dc_backend;

/* Which collective implementation a communicator uses. */
typedef enum fl_dc_comm_kind {
    FL_DC_COMM_SINGLE = 0, /* one process, collectives are copies */
    FL_DC_COMM_MPI = 1,    /* MPI_COMM_WORLD, host buffers, deterministic reduction order */
    FL_DC_COMM_NCCL = 2,   /* NCCL over MPI bootstrap, device buffers, one GPU per process */
    FL_DC_COMM_AUTO = 3    /* NCCL if a GPU is visible, else MPI if size > 1, else single */
} fl_dc_comm_kind;

/* Optimiser. State is FP32 and sharded over DP ranks with ZeRO stage 1. */
typedef enum fl_dc_optim {
    FL_DC_OPTIM_SGD = 0,  /* p -= lr * (g + wd*p), with momentum if momentum > 0 */
    FL_DC_OPTIM_ADAMW = 1 /* decoupled weight decay Adam with bias correction */
} fl_dc_optim;

/* GEMM arithmetic on the CUDA backend (master weights always stay FP32). */
typedef enum fl_dc_math {
    FL_DC_MATH_FP32 = 0, /* full FP32 (also the only mode of the CPU backend) */
    FL_DC_MATH_TF32 = 1, /* TF32 tensor cores, FP32 accumulate */
    FL_DC_MATH_BF16 = 2  /* BF16 tensor cores on FP32 operands, FP32 accumulate */
} fl_dc_math;

/* ---- communicator ---- */

/* A group of ranks with one collective backend. Thread-safety: one thread at a time. */
typedef struct fl_dc_comm fl_dc_comm;

/* Opens a communicator over all processes of the job.
 *   out    receives the handle (NULL on failure).
 *   kind   backend; FL_DC_COMM_MPI and _NCCL need MPI to be initialised by the caller
 *          (MPI_Init); _NCCL selects GPU (node-local rank % visible GPUs), lets rank 0
 *          create the NCCL unique id and broadcasts it over MPI.
 *   alloc  allocator (copied; NULL = libc).
 * Returns FL_OK, FL_ERR_MISUSE (bad kind or allocator), FL_ERR_UNSUPPORTED (backend not
 * built, no GPU, or MPI not initialised), FL_ERR_NOMEM, FL_ERR_IO (MPI/NCCL/CUDA failure;
 * detail via fl_dc_last_error when out is NULL). Collective for MPI and NCCL. */
FL_API fl_status fl_dc_comm_open(fl_dc_comm **out, fl_dc_comm_kind kind,
                                 const fl_allocator *alloc);

/* Closes a communicator (and its sub-communicators must be closed first by the owner).
 * NULL is a no-op. */
FL_API void fl_dc_comm_close(fl_dc_comm *comm);

/* Rank of the calling process in comm, 0-based; -1 for NULL. */
FL_API int fl_dc_comm_rank(const fl_dc_comm *comm);
/* Number of ranks in comm; 0 for NULL. */
FL_API int fl_dc_comm_size(const fl_dc_comm *comm);
/* Kind actually in use (AUTO resolved). */
FL_API fl_dc_comm_kind fl_dc_comm_kind_of(const fl_dc_comm *comm);

/* Marks comm failed after an error elsewhere; for NCCL also ncclCommAbort, so that
 * kernels of this rank stuck in a collective return. MPI offers no per-communicator abort:
 * the application ends the job with MPI_Abort (flotilla-train does, after printing the
 * message). The handle must still be closed. NULL is a no-op. */
FL_API void fl_dc_comm_abort(fl_dc_comm *comm);

/* Detail of the last failure on comm. Never NULL. */
FL_API const char *fl_dc_comm_errmsg(const fl_dc_comm *comm);

/* Detail of the last failure of a create/open call that returned no handle, for the
 * calling thread's most recent such call. Never NULL. */
FL_API const char *fl_dc_last_error(void);

/* ---- data set ---- */

/* Labelled examples in host memory: float features (n, dim) in [0,1] and int32 labels.
 * Read-only after creation; may be shared by trainers of one thread. */
typedef struct fl_dc_dataset fl_dc_dataset;

/* Loads an IDX image file (magic 0x00000803, u8 pixels) and IDX label file (0x00000801),
 * either plain or gzip-compressed (detected), e.g. Fashion-MNIST's
 * train-images-idx3-ubyte.gz. Pixels are scaled by 1/255.
 *   out         receives the handle (NULL on failure).
 *   images_path, labels_path  file paths.
 *   limit       keep at most this many examples (0 = all).
 *   alloc       allocator (copied; NULL = libc).
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_IO, FL_ERR_FORMAT (bad magic, size mismatch,
 * label >= 256), FL_ERR_NOMEM. Detail via fl_dc_last_error. */
FL_API fl_status fl_dc_dataset_open_idx(fl_dc_dataset **out, const char *images_path,
                                        const char *labels_path, size_t limit,
                                        const fl_allocator *alloc);

/* Creates a data set from copies of caller arrays: x (n, dim) floats, labels (n) in
 * [0, n_classes). Returns FL_OK, FL_ERR_MISUSE (NULL, zero size, bad label), FL_ERR_NOMEM. */
FL_API fl_status fl_dc_dataset_from_memory(fl_dc_dataset **out, const float *x, size_t n,
                                           size_t dim, const int32_t *labels, int n_classes,
                                           const fl_allocator *alloc);

/* Number of examples / features per example / classes (max label + 1). 0 for NULL. */
FL_API size_t fl_dc_dataset_count(const fl_dc_dataset *ds);
FL_API size_t fl_dc_dataset_dim(const fl_dc_dataset *ds);
FL_API int fl_dc_dataset_classes(const fl_dc_dataset *ds);

/* Frees a data set. NULL is a no-op. */
FL_API void fl_dc_dataset_close(fl_dc_dataset *ds);

/* ---- configuration ---- */

typedef struct fl_dc_config {
    size_t struct_size;      /* sizeof(fl_dc_config) */
    int n_layers;            /* linear layers, 1..FL_DC_MAX_LAYERS (1 = softmax regression) */
    int sizes[FL_DC_MAX_LAYERS + 1]; /* widths: sizes[0] inputs .. sizes[n_layers] classes */
    int dp;                  /* data-parallel ranks (>= 1) */
    int tp;                  /* tensor-parallel ranks (>= 1); dp * tp == world size */
    int zero_stage;          /* 0 (replicated optimiser state) or 1 (sharded over DP) */
    fl_dc_backend backend;   /* where to compute; default AUTO */
    fl_dc_math math;         /* CUDA GEMM arithmetic; default FP32 */
    fl_dc_optim optim;       /* default ADAMW */
    float lr;                /* learning rate; default 1e-3 */
    float beta1, beta2;      /* AdamW moments; default 0.9, 0.999 */
    float eps;               /* AdamW epsilon; default 1e-8 */
    float weight_decay;      /* decoupled (AdamW) or L2 (SGD); default 0 */
    float momentum;          /* SGD momentum; default 0 */
    int global_batch;        /* examples per step over all DP ranks; default 64 */
    uint64_t seed;           /* weight init and data shuffle seed; default 1234 */
    size_t bucket_bytes;     /* DP gradient bucket size in bytes; default 1 MiB */
    double comm_timeout_s;   /* a collective stuck longer aborts the communicator
                              * (NCCL backend); default 300 */
    fl_logger log;           /* optional log callback; default off */
} fl_dc_config;

/* Fills cfg with the defaults above and the 784-128-10 MLP, dp = tp = 1, zero 0. */
FL_API void fl_dc_config_init(fl_dc_config *cfg);

/* ---- trainer ---- */

/* One rank's part of a DP x TP training job. Thread-safety: one thread at a time. */
typedef struct fl_dc_trainer fl_dc_trainer;

/* Per-step figures for progress output. */
typedef struct fl_dc_step_stats {
    size_t struct_size;  /* sizeof(fl_dc_step_stats), set by the caller */
    uint64_t step;       /* steps completed after this one */
    double loss;         /* mean cross-entropy over the global batch (nats) */
    double step_s;       /* wall time of the step on this rank (s) */
    double comm_s;       /* time in collectives on this rank (s); with overlap on GPUs the
                          * comm stream's busy time, part of which is hidden */
    double compute_s;    /* step_s - exposed communication (s) */
    double samples_per_s;/* global_batch / step_s */
} fl_dc_step_stats;

/* Creates this rank's trainer: builds the DP x TP grid from world (rank r has
 * tp_rank = r % tp, dp_rank = r / tp; sub-communicators by split), picks the compute
 * backend, lays out parameters, gradients and optimiser state in arenas, and initialises
 * the weights from cfg->seed (the same values for every grid shape). Collective on world.
 *   out    receives the handle (NULL on failure; detail via fl_dc_last_error).
 *   cfg    validated here; copied.
 *   world  the job's communicator; borrowed, must outlive the trainer.
 *   alloc  allocator for host memory (copied; NULL = libc).
 * Returns FL_OK, FL_ERR_MISUSE (a bad field, named in the message, or dp*tp != size),
 * FL_ERR_UNSUPPORTED (CUDA asked but not available, or a CPU backend on an NCCL comm),
 * FL_ERR_NOMEM, FL_ERR_IO. */
FL_API fl_status fl_dc_trainer_create(fl_dc_trainer **out, const fl_dc_config *cfg,
                                      fl_dc_comm *world, const fl_allocator *alloc);

/* Destroys the trainer and its sub-communicators. NULL is a no-op. Not collective. */
FL_API void fl_dc_trainer_destroy(fl_dc_trainer *tr);

/* Detail of the last failure on tr. Never NULL. */
FL_API const char *fl_dc_trainer_errmsg(const fl_dc_trainer *tr);

/* Backend actually used (AUTO resolved). */
FL_API fl_dc_backend fl_dc_trainer_backend(const fl_dc_trainer *tr);

/* Steps completed so far (after a resume, the checkpoint's count). */
FL_API uint64_t fl_dc_trainer_step_count(const fl_dc_trainer *tr);

/* Runs one optimiser step on the next global batch of ds (a fixed per-epoch shuffle of
 * ds by cfg->seed; the position is part of the checkpoint). Each DP rank takes its slice
 * of the batch; gradients are averaged over the global batch. Collective on world.
 *   stats  optional; filled on success (set struct_size first).
 * Returns FL_OK, FL_ERR_MISUSE (dim/classes do not match the model), FL_ERR_IO (a
 * backend call failed), FL_ERR_ABORTED (a collective failed or timed out; the
 * communicator was aborted; the message names the rank) or FL_ERR_NOMEM. After an error
 * the trainer is failed (sticky) and only destroy is useful. */
FL_API fl_status fl_dc_trainer_step(fl_dc_trainer *tr, const fl_dc_dataset *ds,
                                    fl_dc_step_stats *stats);

/* Forward pass over the first n examples of ds (0 = all): mean loss and accuracy.
 * Collective on world. Returns like fl_dc_trainer_step. */
FL_API fl_status fl_dc_trainer_evaluate(fl_dc_trainer *tr, const fl_dc_dataset *ds, size_t n,
                                        double *loss, double *accuracy);

/* Number of floats in the full (unsharded) model: sum of out_i*in_i + out_i. */
FL_API size_t fl_dc_trainer_param_count(const fl_dc_trainer *tr);

/* Gathers the full model into out in canonical order (for each layer: weight (out, in)
 * row-major, then bias), identical on every rank. Collective on world.
 * Returns FL_OK, FL_ERR_MISUSE (NULL or n < param_count), FL_ERR_IO, FL_ERR_ABORTED. */
FL_API fl_status fl_dc_trainer_params_get(fl_dc_trainer *tr, float *out, size_t n);

/* Replaces the weights by a full model in canonical order (each rank keeps its shard) and
 * resets the optimiser state and step count. Not collective (every rank passes the same
 * values). Returns FL_OK, FL_ERR_MISUSE, FL_ERR_IO. */
FL_API fl_status fl_dc_trainer_params_set(fl_dc_trainer *tr, const float *in, size_t n);

/* Writes the full model as safetensors (names above) to path, atomically, from world
 * rank 0, with metadata flotilla.arch = "mlp-<sizes>" and flotilla.dc.step. Collective.
 * Returns FL_OK, FL_ERR_IO, FL_ERR_NOMEM, FL_ERR_ABORTED. */
FL_API fl_status fl_dc_trainer_model_save(fl_dc_trainer *tr, const char *path);

/* Loads a full model from a safetensors image in memory (every rank passes the same
 * bytes) and behaves like fl_dc_trainer_params_set. Returns FL_OK, FL_ERR_FORMAT (a
 * tensor is missing or has the wrong dtype or shape, named in the message),
 * FL_ERR_NOMEM, FL_ERR_IO. Not collective. */
FL_API fl_status fl_dc_trainer_model_load(fl_dc_trainer *tr, const void *buf, size_t len);

/* Writes a sharded checkpoint: <dir>/step-<NNNNNNNN>/rank-<RRRRR>.safetensors per rank
 * (parameters, optimiser state, step and data position, grid), each written atomically;
 * once all ranks succeeded, world rank 0 atomically replaces <dir>/latest with the step
 * directory's name. A job killed at any moment leaves `latest` naming a complete
 * checkpoint. Collective; dir must be on a file system all ranks see.
 * Returns FL_OK, FL_ERR_IO (on any rank), FL_ERR_NOMEM, FL_ERR_ABORTED. */
FL_API fl_status fl_dc_trainer_checkpoint_save(fl_dc_trainer *tr, const char *dir);

/* Restores the checkpoint named by <dir>/latest: parameters, optimiser state, step count
 * and data position, so that training continues exactly as if never stopped. The grid
 * (dp, tp, zero), model sizes and optimiser must match. Collective.
 * Returns FL_OK, FL_ERR_NOT_FOUND (no `latest`), FL_ERR_FORMAT or FL_ERR_CORRUPT (a shard
 * does not match this job), FL_ERR_IO, FL_ERR_NOMEM. */
FL_API fl_status fl_dc_trainer_checkpoint_load(fl_dc_trainer *tr, const char *dir);

/* Checkpoint retention: keeps the checkpoint <dir>/latest names and the keep - 1 newest
 * step directories older than it, and removes the other older ones (their files, then the
 * directory). Step directories newer than `latest` (a save that died before `latest`
 * moved) and anything not named step-<digits> are left alone. Not collective: call it on
 * one rank after fl_dc_trainer_checkpoint_save. *removed (may be NULL) counts the removed
 * directories. Returns FL_OK, FL_ERR_MISUSE (dir NULL or keep 0), FL_ERR_NOT_FOUND (no
 * dir or no `latest`), FL_ERR_CORRUPT (`latest` names no step directory), FL_ERR_IO (a
 * directory could not be removed, e.g. it holds something other than files: the others
 * are still removed; errmsg names the first), FL_ERR_NOMEM. errmsg (may be NULL) gets the
 * reason. A crash while it runs leaves `latest` and its checkpoint untouched. */
FL_API fl_status fl_dc_checkpoint_prune(const char *dir, unsigned keep, unsigned *removed,
                                        char *errmsg, size_t errmsg_len);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_DATACENTER_H */
