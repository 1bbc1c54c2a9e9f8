#ifndef FL_CLIENT_ROUND_H
#define FL_CLIENT_ROUND_H

/* The parsed task config of one round (docs/protocol.md 4.2) and the update pipeline that
 * turns a trained model into the integer vector of section 5.1. */

#include "client_internal.h"

#define FL__CLIENT_URL_MAX 256
#define FL__CLIENT_NAME_MAX 128

enum fl__client_dp_mode { FL__DP_NONE = 0, FL__DP_CENTRAL = 1, FL__DP_DISTRIBUTED = 2 };

struct fl__client_task {
    int64_t round_id;                    /* round this task belongs to */
    int64_t model_version;               /* global model version to train from */
    uint8_t model_sha256[32];            /* expected SHA-256 of the model body */
    int has_model_sha256;                /* 1 if the task gave model.sha256 */
    int64_t model_bytes;                 /* expected model size, 0 = not given */
    char model_url[FL__CLIENT_URL_MAX + 1]; /* where to fetch the model */
    fl_client_train_params train;        /* epochs, batch, lr, max_examples, proximal_mu */
    char **tensors;                      /* (n_tensors) update tensor names, one block */
    size_t n_tensors;                    /* entries of tensors */
    size_t tensors_bytes;                /* bytes of the block behind tensors */
    int64_t update_length;               /* update.length: vector length incl. the weight */
    int64_t update_dim;                  /* update.dim: floats in the flattened tensors (d) */
    int buffered;                        /* kind "buffered" (FedBuff participation) */
    int weighting_examples;              /* 1 = weight by examples, 0 = uniform */
    int64_t weight_cap;                  /* cap for the examples weighting (>= 1) */
    int dp_mode;                         /* enum fl__client_dp_mode */
    double clip_norm;                    /* L2 clip (flat) */
    int clip_per_layer;                  /* 1 = per-layer clipping with clip_norms */
    double *clip_norms;                  /* (n_tensors) per-layer bounds, or NULL */
    uint32_t modulus_bits;               /* b */
    double granularity;                  /* gamma */
    double beta;                         /* conditional rounding bias */
    double client_sigma;                 /* distributed: noise std in units of gamma (info) */
    uint64_t client_var_num;             /* distributed: exact per-device variance num/den */
    uint64_t client_var_den;             /*   (lattice units squared) */
    uint32_t min_survivors;              /* distributed: n_min the variance is sized for */
    int rotation_hadamard;               /* 1 = randomized Hadamard rotation */
    uint8_t rotation_seed[32];           /* its public seed */
    int secagg;                          /* 1 = secure aggregation enabled */
    uint32_t sa_index;                   /* this device's index in the secagg graph */
    uint32_t sa_clients;                 /* n */
    uint32_t sa_neighbors;               /* k */
    uint32_t sa_threshold;               /* t (Shamir threshold) */
    int64_t sa_vector_length;            /* secagg.vector_length (= update.length) */
    uint32_t sa_norm_bits;               /* secagg.norm_proof.bits (0 = no norm proof) */
    uint32_t sa_norm_dim;                /* secagg.norm_proof.dim */
    uint64_t sa_norm_bound2;             /* secagg.norm_proof.bound2 */
    uint32_t sa_norm_weight_max;         /* secagg.norm_proof.weight_max (0: m-bit range) */
    int sa_active;                       /* secagg.consistency_check: active-adversary mode
                                            (signed advertisements, consistency phase) with
                                            device certificates (secagg.device_certs) */
    int sa_reveal_seeds;                 /* secagg.reveal_pair_seeds (protocol 1.4) */
    int64_t deadlines[5];                /* advertise, share, masked, consistency, unmask */
};

/* Parses and validates the (already signature-checked) task body. round_id and population
 * are what the client expects. On failure err names the field. */
fl_status fl__client_task_parse(struct fl__client_task *t, const char *body, size_t len,
                                int64_t round_id, const char *population,
                                const fl_allocator *a, struct fl__err *err);
void fl__client_task_free(struct fl__client_task *t, const fl_allocator *a);

/* Source of trained and global values for the update: looks tensors up by name. */
struct fl__client_update_src {
    /* Copies numel trained values of tensor name into out, and global values into g.
     * Returns FL_OK or FL_ERR_NOT_FOUND; *numel is set by the size query (out NULL). */
    fl_status (*get)(void *user, const char *name, float *trained, float *global,
                     size_t *numel);
    /* Optional: called once the delta is built, so the caller can free its model copies
     * before the integer vector is allocated (keeps the peak near 3 model sizes). */
    void (*release)(void *user);
    void *user;
};

/* Observer of the update pipeline (tests only): sees the clipped, weighted float delta
 * (d floats, before quantization; in distributed mode the raw delta, as the dp library clips
 * internally) and the final integer vector (len words of word_bytes, weight last) of one
 * device. Never called in production builds unless a test installs it; with one installed,
 * distributed mode keeps the delta alive until the vector is built (more peak memory). */
typedef void (*fl__client_update_observer)(void *user, int64_t round_id, const float *delta,
                                           size_t d, const void *words, size_t len,
                                           size_t word_bytes);

/* Builds the update vector of docs/protocol.md 5.1: *out receives *out_len words (u32 when
 * modulus_bits <= 32, else u64; allocated with a, free with *out_len * word bytes), the
 * last being the weight. examples: number of examples trained on. obs (optional) sees the
 * result. */
fl_status fl__client_update_build(void **out, size_t *out_len, size_t *word_bytes,
                                  const struct fl__client_task *t,
                                  const struct fl__client_update_src *src, uint64_t examples,
                                  fl__client_update_observer obs, void *obs_user,
                                  const fl_allocator *a, struct fl__err *err);

/* Installs the update observer on a client (tests; internal, not exported). */
void fl__client_debug_update_hook_set(fl_client *c, fl__client_update_observer fn, void *user);

#endif /* FL_CLIENT_ROUND_H */
