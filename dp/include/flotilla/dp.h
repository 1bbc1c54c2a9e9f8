#ifndef FLOTILLA_DP_H
#define FLOTILLA_DP_H

/* Flotilla differential privacy: clipping, exact discrete noise, central and distributed
 * DP, the RDP accountant and budget checks. Pure library: no I/O, no clocks, no globals. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== mechanisms: clipping, samplers, central and distributed DP (dp-mechanisms) ==== */

/* Conventions for this section. Vectors are passed as (pointer, length); outputs come first.
 * Noise variances on the integer lattice are exact rationals sigma^2 = num/den (num, den >= 1)
 * so that no floating-point number ever decides a noise sample. Functions that take an
 * fl_dp_rng record failure detail on it (fl_dp_rng_errmsg); the others document their codes.
 * Unless stated otherwise nothing here keeps global state: every function is thread-safe
 * when its handles and buffers are not shared between threads. */

/* ---- random source ----
 * fl_dp_rng is a buffered source of uniform bytes behind every sampler. It reads a few KB at
 * a time from a fill callback and hands out bits from the buffer. Built-ins: the OS CSPRNG
 * (libsodium randombytes_buf) and a seeded ChaCha20 keystream for reproducible runs. One
 * thread at a time per handle. A fill failure makes the handle failed (sticky) until it is
 * destroyed: every later call returns the same code. Buffered random bytes are wiped when
 * consumed in bulk, on refill and on destroy. */

#define FL_DP_SEED_BYTES 32 /* seed of the ChaCha20 stream and of the rotation */
#define FL_DP_RNG_BUFFER_BYTES 4096 /* bytes read from the source per refill */

/* FL_DP_SEED_BYTES, for bindings. */
FL_API size_t fl_dp_seed_bytes(void);

/* FL_DP_RNG_BUFFER_BYTES, for bindings. */
FL_API size_t fl_dp_rng_buffer_bytes(void);

/* Fill callback: write exactly n uniformly random bytes to buf and return FL_OK, or return
 * an error code (the rng becomes failed with that code). n <= FL_DP_RNG_BUFFER_BYTES. */
typedef fl_status (*fl_dp_rng_fill_fn)(void *user, uint8_t *buf, size_t n);

/* A caller-supplied random source. The caller keeps `user` alive while the rng exists. */
typedef struct fl_dp_rng_source {
    size_t struct_size;     /* sizeof(fl_dp_rng_source) */
    fl_dp_rng_fill_fn fill; /* required */
    void *user;             /* passed to fill */
} fl_dp_rng_source;

typedef struct fl_dp_rng fl_dp_rng; /* opaque buffered random source */

/* Creates an rng reading from `src` (copied). alloc: NULL = libc, copied.
 * Returns FL_OK, FL_ERR_MISUSE (NULL out/src/fill, bad struct_size), FL_ERR_NOMEM. */
FL_API fl_status fl_dp_rng_create(fl_dp_rng **out, const fl_dp_rng_source *src,
                                  const fl_allocator *alloc);

/* Creates an rng on the OS CSPRNG: a ChaCha20 fast-key-erasure generator keyed from the OS
 * (libsodium's randombytes_buf, i.e. getrandom; mbedTLS's entropy source in the embedded
 * build) and re-keyed from it every 1 MiB; after each 4 KiB refill the key is replaced by
 * further keystream, so a later compromise of the handle does not reveal earlier output. (One
 * syscall per 4 KiB would otherwise cost more than the sampling.) The backend's one-time
 * initialisation (sodium_init) is idempotent and thread-safe. Use this for real noise.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM, FL_ERR_CRYPTO (the crypto backend failed to
 * initialise). */
FL_API fl_status fl_dp_rng_create_os(fl_dp_rng **out, const fl_allocator *alloc);

/* Creates an rng on the ChaCha20 (IETF) keystream keyed by the FL_DP_SEED_BYTES `seed`: refill
 * number i is the first FL_DP_RNG_BUFFER_BYTES bytes of the keystream under nonce = i as a
 * 12-byte little-endian integer. The same seed gives the same samples on every platform.
 * For tests and for public shared randomness only: a known seed gives no privacy. The seed
 * is copied and wiped on destroy. Returns FL_OK, FL_ERR_MISUSE (NULL args, seed_len !=
 * FL_DP_SEED_BYTES), FL_ERR_NOMEM, FL_ERR_CRYPTO (the crypto backend failed to initialise).
 */
FL_API fl_status fl_dp_rng_create_chacha20(fl_dp_rng **out, const uint8_t *seed, size_t seed_len,
                                           const fl_allocator *alloc);

/* Wipes and frees. NULL is a no-op. */
FL_API void fl_dp_rng_destroy(fl_dp_rng *rng);

/* Detail of the last failure on rng (owned by rng, valid until the next call on it). */
FL_API const char *fl_dp_rng_errmsg(const fl_dp_rng *rng);

/* Writes n uniformly random bytes to out. Each call starts at an 8-byte boundary of the
 * buffered stream (the rest of a partly used word is skipped), so two calls of 3 bytes are not
 * bytes 0..5 of the stream. Returns FL_OK, FL_ERR_MISUSE, or the sticky fill error. */
FL_API fl_status fl_dp_rng_bytes(fl_dp_rng *rng, uint8_t *out, size_t n);

/* *out = a uniform integer in [0, bound), exactly (rejection sampling, no modulo bias).
 * Returns FL_OK, FL_ERR_MISUSE (bound == 0, NULL args), or the sticky fill error. */
FL_API fl_status fl_dp_rng_uniform(fl_dp_rng *rng, uint64_t *out, uint64_t bound);

/* ---- exact samplers (Canonne, Kamath, Steinke 2020) ----
 * Exact: every accept/reject is decided by integer comparisons against random bits, so the
 * output distribution is the stated one given a uniform source. The only departures are
 * events of probability below 2^-1000 per sample: a comparison with the stored 1024-bit
 * expansion of exp(-1) that ties on all bits falls back to fresh coins, and a proposal so
 * large that 128-bit arithmetic would overflow returns FL_ERR_RANGE. Running time is random
 * and depends on the output (as in the paper): mind timing side channels where they matter. */

/* Largest sigma2_num and sigma2_den accepted by the Gaussian sampler (2^40). */
#define FL_DP_SIGMA2_MAX ((uint64_t)1 << 40)

/* Writes n independent samples of the discrete Gaussian N_Z(0, sigma^2) to out, where
 * sigma^2 = sigma2_num / sigma2_den: P(x) proportional to exp(-x^2 / (2 sigma^2)), x in Z.
 * Batches of n < 1024 use CKS20 Algorithm 3 with a discrete Laplace proposal of scale
 * t = 2^s within a factor sqrt(2) of sigma; batches of n >= 1024 use an exact rejection
 * sampler over an alias-table proposal built once per sigma^2 and cached on rng (about 40 KB
 * through rng's allocator; if that allocation fails the first method is used). Both are exact
 * in the sense above; docs/dp.md gives the argument.
 * 1 <= sigma2_num, sigma2_den <= FL_DP_SIGMA2_MAX (sigma between 2^-20 and 2^20).
 * Returns FL_OK; FL_ERR_MISUSE (NULL rng, NULL out with n > 0, sigma^2 out of range);
 * FL_ERR_RANGE if an intermediate overflows 128 bits, which needs a proposal beyond 2^40
 * standard deviations (probability below 2^-1000); or the sticky fill error. On error the
 * contents of out are unspecified. */
FL_API fl_status fl_dp_discrete_gaussian(fl_dp_rng *rng, int64_t *out, size_t n,
                                         uint64_t sigma2_num, uint64_t sigma2_den);

/* Adds n discrete Gaussian samples (as above) to vec in place. On FL_ERR_RANGE (a sum would
 * overflow int64_t) or another error, the elements before the failing one have been noised
 * and the rest are unchanged; do not release vec after an error. */
FL_API fl_status fl_dp_discrete_gaussian_add(fl_dp_rng *rng, int64_t *vec, size_t n,
                                             uint64_t sigma2_num, uint64_t sigma2_den);

/* Writes n samples of the discrete Laplace distribution with scale b = scale_num / scale_den
 * to out: P(x) proportional to exp(-|x| / b), x in Z (CKS20 Algorithm 2). 1 <= scale_num,
 * scale_den <= 2^40. Returns FL_OK, FL_ERR_MISUSE, or the sticky fill error. */
FL_API fl_status fl_dp_discrete_laplace(fl_dp_rng *rng, int64_t *out, size_t n,
                                        uint64_t scale_num, uint64_t scale_den);

/* Writes the rational sigma2_num / sigma2_den >= x (the smallest with denominator den, then
 * reduced) so that a real-valued variance can be handed to the samplers without ever
 * decreasing the noise. 1 <= den <= 2^20; x finite, > 0 and with x * den <= 2^40.
 * Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_dp_variance_to_rational(uint64_t *sigma2_num, uint64_t *sigma2_den, double x,
                                            uint64_t den);

/* ---- clipping ----
 * L2 clipping of a float32 update: if ||v||_2 > clip, v <- v * clip / ||v||_2. Norms are
 * computed in double. The input is checked first: a NaN or infinity anywhere returns
 * FL_ERR_RANGE with v unchanged (never propagated). A zero vector is left as is (norm 0).
 * Scaling is done in double and rounded to float, so the clipped norm may exceed clip by
 * a relative 2^-23; privacy code downstream re-checks its own bounds on integers. */

/* *norm_out = ||v||_2 (double accumulation). Returns FL_OK, FL_ERR_MISUSE (NULL v with n > 0,
 * NULL norm_out), FL_ERR_RANGE (non-finite element). */
FL_API fl_status fl_dp_l2_norm(double *norm_out, const float *v, size_t n);

/* Clips v (n floats) to L2 norm <= clip in place. norm_out (optional) receives the pre-clip
 * norm, for adaptive clipping. clip must be finite and > 0.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_RANGE (non-finite element: v unchanged). */
FL_API fl_status fl_dp_clip_l2(float *v, size_t n, double clip, double *norm_out);

/* Per-layer clipping: v is n_layers consecutive slices of layer_sizes[i] floats (summing to
 * n); slice i is clipped to clips[i]. norms_out (optional, n_layers doubles) receives the
 * pre-clip norms. The clipped update has L2 norm <= sqrt(sum clips[i]^2), which is the
 * sensitivity to use (fl_dp_clip_layers_total). All slices are checked before any is
 * modified. Returns FL_OK, FL_ERR_MISUSE (NULL arrays, sizes not summing to n, bad clip),
 * FL_ERR_RANGE (non-finite element: v unchanged). */
FL_API fl_status fl_dp_clip_l2_layers(float *v, size_t n, const size_t *layer_sizes,
                                      const double *clips, size_t n_layers, double *norms_out);

/* sqrt(sum clips[i]^2): the overall L2 bound after per-layer clipping. Returns 0 on bad
 * input (NULL, a non-finite or non-positive clip). */
FL_API double fl_dp_clip_layers_total(const double *clips, size_t n_layers);

/* ---- adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021) ----
 * The clip norm C follows the target quantile gamma of the clients' update norms. Each
 * client reports the bit b_i = [||update_i|| <= C] (fl_dp_adaptive_clip_bit); the server
 * noises the count with a discrete Gaussian of variance bit_sigma2 and forms
 * b_hat = (sum b_i + noise) / m, then C <- C * exp(-eta * (b_hat - gamma)) (geometric update).
 * If more than a gamma fraction of clients is unclipped, C shrinks, else it grows. Only the
 * noised count is released; the update itself uses floating point, which is post-processing. */

typedef struct fl_dp_adaptive_clip_config {
    size_t struct_size;        /* sizeof(fl_dp_adaptive_clip_config) */
    double initial_clip;       /* C_0 > 0, model units; default 0.1 */
    double target_quantile;    /* gamma in (0, 1); default 0.5 */
    double learning_rate;      /* eta_C > 0; default 0.2 */
    uint64_t bit_sigma2_num;   /* variance of the noise on the bit count = num/den (count */
    uint64_t bit_sigma2_den;   /*   units, >= 1 each); default 1/1 */
    double min_clip;           /* lower bound on C (>= 0, 0 = none); default 0 */
    double max_clip;           /* upper bound on C (0 = none); default 0 */
} fl_dp_adaptive_clip_config;

/* Adaptive clipping state; caller-owned, fields read-only for the caller. */
typedef struct fl_dp_adaptive_clip {
    fl_dp_adaptive_clip_config cfg; /* validated copy */
    double clip;                    /* current clip norm C, model units */
    double last_fraction;           /* last noised fraction b_hat (may be outside [0, 1]) */
    uint64_t rounds;                /* updates applied */
} fl_dp_adaptive_clip;

/* Fills the documented defaults. */
FL_API void fl_dp_adaptive_clip_config_init(fl_dp_adaptive_clip_config *cfg);

/* Validates cfg and sets st->clip = initial_clip. Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_dp_adaptive_clip_init(fl_dp_adaptive_clip *st,
                                          const fl_dp_adaptive_clip_config *cfg);

/* Client side: 1 if update_norm <= clip, else 0 (a NaN norm gives 0). */
FL_API int fl_dp_adaptive_clip_bit(double update_norm, double clip);

/* Server side, central noise: adds N_Z(0, bit_sigma2) to bit_sum (the plain count of 1-bits
 * from n_clients clients), then applies the geometric update. *noised_sum_out (optional)
 * gets the released noised count. Returns FL_OK, FL_ERR_MISUSE (bit_sum > n_clients,
 * n_clients == 0), or the rng's error (state unchanged on error). */
FL_API fl_status fl_dp_adaptive_clip_update(fl_dp_adaptive_clip *st, fl_dp_rng *rng,
                                            uint64_t bit_sum, uint64_t n_clients,
                                            int64_t *noised_sum_out);

/* Server side when the count is already noised (e.g. the bits went through distributed DP
 * and secure aggregation): applies the geometric update with b_hat = noised_sum / n_clients.
 * Returns FL_OK or FL_ERR_MISUSE (n_clients == 0). */
FL_API fl_status fl_dp_adaptive_clip_update_noised(fl_dp_adaptive_clip *st, int64_t noised_sum,
                                                   uint64_t n_clients);

/* AMR21 Section 3: when a total noise multiplier z is split between the bit count (noise
 * std sigma_b on the count) and the update sum, the update sum must use
 * z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) to keep the same overall privacy. Writes z_delta.
 * Returns FL_OK, or FL_ERR_MISUSE if z <= 0, sigma_b <= 0 or 2 sigma_b <= z (the bit noise
 * alone would use up the budget). */
FL_API fl_status fl_dp_adaptive_clip_update_multiplier(double *z_delta, double z, double sigma_b);

/* ---- lattice helpers ----
 * Map floats to the integer lattice gamma*Z and back. */

/* out[i] = round(x[i] / granularity), ties to even (deterministic; ||out - x/gamma||_inf <= 1/2).
 * Returns FL_OK, FL_ERR_MISUSE (NULL with n > 0, granularity not finite > 0), FL_ERR_RANGE
 * (non-finite x[i], or |x[i] / granularity| >= 2^62). */
FL_API fl_status fl_dp_lattice_encode(int64_t *out, const float *x, size_t n, double granularity);

/* out[i] = (float)(q[i] * granularity). Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_dp_lattice_decode(float *out, const int64_t *q, size_t n, double granularity);

/* ---- central DP (DP-FedAvg, McMahan et al. 2018) ----
 * Each client update is clipped to `clip`, scaled by 1/granularity and rounded with
 * conditional randomized rounding (KLS21) so that the integer vector has
 * ||q||_2^2 <= floor(l2_bound^2) (fl_dp_central_encode); the server sums the integer vectors,
 * adds N_Z(0, sigma^2) to every coordinate (fl_dp_central_noise) and maps back
 * (fl_dp_lattice_decode). The L2 sensitivity of the integer sum is the l2_bound of
 * fl_dp_central_info. */

typedef struct fl_dp_central_params {
    size_t struct_size;  /* sizeof(fl_dp_central_params) */
    double clip;         /* L2 clip c of one client's update, model units, > 0 */
    double granularity;  /* lattice step gamma, model units, > 0 */
    double beta;         /* conditional rounding bias in [0, 1); default exp(-1/2) */
    uint64_t sigma2_num; /* noise variance on the summed lattice = num/den (lattice units^2) */
    uint64_t sigma2_den;
} fl_dp_central_params;

/* What the accountant needs for one central round. */
typedef struct fl_dp_central_info {
    double l2_bound;      /* L2 sensitivity of the integer sum (lattice units), enforced */
    double sigma;         /* noise std on each lattice coordinate, sqrt(num/den) */
    double noise_multiplier; /* sigma / l2_bound: the z of the Gaussian RDP curve; CKS20 shows
                                the discrete Gaussian's RDP is at most the continuous one's */
} fl_dp_central_info;

/* Fills defaults: clip 1, granularity 1e-3, beta exp(-1/2), sigma^2 1/1. */
FL_API void fl_dp_central_params_init(fl_dp_central_params *p);

/* Fills *info for p and dim. Returns FL_OK or FL_ERR_MISUSE (invalid params). */
FL_API fl_status fl_dp_central_info_get(fl_dp_central_info *info, const fl_dp_central_params *p,
                                        size_t dim);

/* Client/server side: clips a copy of update (dim floats; not modified), scales by
 * 1/granularity and rounds with conditional randomized rounding into out (dim int64). At most
 * 1000 rounding attempts (failure probability per attempt <= beta). Returns FL_OK,
 * FL_ERR_MISUSE, FL_ERR_RANGE (non-finite update, or the scaled values too large),
 * FL_ERR_AGAIN (1000 attempts failed; astronomically unlikely for beta < 0.99), FL_ERR_NOMEM,
 * or the rng's error. alloc: NULL = libc, for a dim-double workspace. */
FL_API fl_status fl_dp_central_encode(fl_dp_rng *rng, int64_t *out, const float *update, size_t dim,
                                      const fl_dp_central_params *p, double *norm_out,
                                      const fl_allocator *alloc);

/* Streaming variant of fl_dp_central_encode for memory-tight clients: the same mechanism run
 * straight from the float update into the caller's words, each reduced modulo 2^modulus_bits,
 * with no workspace (nothing is allocated). out: out_len == dim words of word_bytes bytes
 * (4: an array of uint32_t, 8: of uint64_t); 1 <= modulus_bits <= 8 * word_bytes. Word i is
 * q[i] mod 2^b (two's complement), where q is the int64 vector fl_dp_central_encode writes for
 * the same rng state: it draws the same random words in the same order, so with word_bytes 8
 * and modulus_bits 64 the output equals fl_dp_central_encode's bit for bit. norm_out
 * (optional): pre-clip norm. Returns FL_OK, FL_ERR_MISUSE (NULL vectors, out_len != dim, bad
 * word_bytes / modulus_bits, invalid params), FL_ERR_RANGE (non-finite update, or the scaled
 * values too large; out untouched), FL_ERR_AGAIN (1000 rounding attempts failed), or the rng's
 * error. out is zeroed on FL_ERR_AGAIN and on an rng failure. */
FL_API fl_status fl_dp_central_encode_into(fl_dp_rng *rng, void *out, size_t out_len,
                                           size_t word_bytes, uint32_t modulus_bits,
                                           const float *update, size_t dim,
                                           const fl_dp_central_params *p, double *norm_out);

/* Server side: adds N_Z(0, sigma^2) to every coordinate of the integer sum (dim int64) in place.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_RANGE (int64 overflow), or the rng's error. */
FL_API fl_status fl_dp_central_noise(fl_dp_rng *rng, int64_t *sum, size_t dim,
                                     const fl_dp_central_params *p);

/* ---- distributed DP (Kairouz, Liu, Steinke 2021: distributed discrete Gaussian) ----
 * Client: clip to c; scale by 1/gamma; pad to a power of two d' and rotate with the
 * randomized Hadamard transform H D (D: random signs from the public rotation seed, H: the
 * Walsh-Hadamard matrix divided by sqrt(d')); conditional randomized rounding, retried until
 * ||x~||_2^2 <= floor(l2_bound^2) with
 *   l2_bound^2 = min(c^2/gamma^2 + d'/4 + sqrt(2 ln(1/beta)) (c/gamma + sqrt(d')/2),
 *                    (c/gamma + sqrt(d'))^2);
 * add N_Z(0, sigma_c^2) per coordinate where sigma_c^2 = sigma2_num/sigma2_den is the
 * per-client variance, chosen as sigma^2 / n_min so that any n >= n_min survivors still
 * carry total variance >= sigma^2; reduce modulo 2^b. Server: the secure-aggregation sum
 * modulo 2^b is mapped to [-2^(b-1), 2^(b-1)), multiplied by gamma and rotated back
 * (D H^T), keeping the first d coordinates. */

typedef struct fl_dp_distributed_params {
    size_t struct_size;      /* sizeof(fl_dp_distributed_params) */
    size_t dim;              /* model dimension d (floats per update) */
    double clip;             /* L2 clip c, model units, > 0 */
    double granularity;      /* gamma, model units per lattice step, > 0 */
    double beta;             /* conditional rounding bias in [0, 1); default exp(-1/2) */
    uint32_t modulus_bits;   /* b: the secure-aggregation field is Z_{2^b}, 2 <= b <= 62 */
    uint32_t n_min;          /* minimum number of surviving clients, >= 1 */
    uint64_t sigma2_num;     /* per-client noise variance sigma_c^2 = num/den, lattice units */
    uint64_t sigma2_den;
} fl_dp_distributed_params;

/* Noise and sensitivity of one distributed round, for the accountant. KLS21 Theorem 1: with
 * n survivors the round is (eps^2/2)-concentrated DP with
 *   eps = min(sqrt(l2^2/(n sc2) + tau d'/2), l2/sqrt(n sc2) + tau sqrt(d')),
 *   tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sc2 k/(k+1)), sc2 = per-client variance;
 * rho = eps^2/2 is filled in for n = n_survivors. */
typedef struct fl_dp_distributed_info {
    size_t dim_padded;          /* d': power of two >= dim */
    double l2_bound;            /* L2 sensitivity of one client after rounding (lattice units) */
    double l1_bound;            /* L1 bound after rounding: min(l2^2, sqrt(d') l2) */
    double client_variance;     /* sigma_c^2 = sigma2_num / sigma2_den */
    double total_variance;      /* n_survivors * sigma_c^2: variance of the summed noise */
    double tau;                 /* KLS21 tau for n_survivors */
    double rho;                 /* zCDP rho for one round with n_survivors clients */
    double noise_multiplier;    /* sqrt(total_variance) / l2_bound */
    double modular_wrap_bound;  /* bound on P(any coordinate of the sum wraps mod 2^b) for
                                   n_survivors clients (sub-Gaussian tail, see docs/dp.md) */
} fl_dp_distributed_info;

/* Fills defaults: dim 0, clip 1, granularity 1e-3, beta exp(-1/2), 20 bits, n_min 1,
 * sigma^2 1/1. */
FL_API void fl_dp_distributed_params_init(fl_dp_distributed_params *p);

/* Chooses granularity and the per-client variance for a target: total noise std
 * noise_multiplier * clip (model units) once n_min clients survive, at most n_max clients
 * summed, modulus 2^modulus_bits, and a wrap-around probability <= wrap_prob. gamma is the
 * smallest value for which the sub-Gaussian bound 2 d' exp(-2^(2b) / (8 v)) <= wrap_prob,
 * v = (n_max c / gamma)^2 / d' + n_max / 4 + (n_max / n_min) (z c / gamma)^2, holds (widened if
 * needed so that the per-client variance stays <= FL_DP_SIGMA2_MAX); the per-client variance
 * (z c / gamma)^2 / n_min is rounded up to a rational. p->dim, clip,
 * beta, modulus_bits, n_min are taken from *p and the rest filled in. Returns FL_OK,
 * FL_ERR_MISUSE (bad arguments), FL_ERR_RANGE (no gamma works: more bits are needed). */
FL_API fl_status fl_dp_distributed_choose(fl_dp_distributed_params *p, double noise_multiplier,
                                          uint32_t n_max, double wrap_prob);

/* Fills *info for n_survivors (>= n_min) clients. Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_dp_distributed_info_get(fl_dp_distributed_info *info,
                                            const fl_dp_distributed_params *p,
                                            uint32_t n_survivors);

/* d': the power of two >= dim (the length of encoded vectors), 0 if dim is 0 or too large. */
FL_API size_t fl_dp_distributed_padded_dim(size_t dim);

/* Client side. Encodes update (p->dim floats, not modified) into out (dim_padded words, each
 * in [0, 2^b)), ready to be masked by secure aggregation. rotation_seed: the round's public
 * FL_DP_SEED_BYTES seed, the same for all clients and the server. rng: private randomness
 * (rounding and noise; use fl_dp_rng_create_os). norm_out (optional): pre-clip norm.
 * alloc: NULL = libc, for a d'-double workspace. Returns FL_OK, FL_ERR_MISUSE, FL_ERR_RANGE
 * (non-finite update), FL_ERR_AGAIN (1000 rounding attempts failed), FL_ERR_NOMEM, or the
 * rng's error. */
FL_API fl_status fl_dp_distributed_encode(fl_dp_rng *rng, uint64_t *out, size_t out_len,
                                          const float *update, const fl_dp_distributed_params *p,
                                          const uint8_t *rotation_seed, double *norm_out,
                                          const fl_allocator *alloc);

/* In-place variant of fl_dp_distributed_encode for memory-tight clients: it needs neither a
 * separate d'-word output nor a d'-double workspace, only a d'/8-byte bitmap.
 * buf: buf_len >= dim_padded doubles in memory from an allocator (no declared type: its bytes
 * are reused as words). On entry buf[0..p->dim) holds the update (the rest is ignored). On
 * FL_OK the first dim_padded words of word_bytes bytes (4: read buf as uint32_t, 8: as
 * uint64_t) hold the encoded vector, each in [0, 2^b) (word_bytes 4 needs modulus_bits <= 32),
 * and the bytes after them (up to buf_len doubles) are zeroed, so nothing of the un-noised
 * rotation remains. For an update of floats converted exactly (buf[i] = (double)update[i]) the
 * words equal those fl_dp_distributed_encode writes for the same rng state, bit for bit
 * (conditional rounding records its decisions in the bitmap, and the noised words are
 * written in a second pass over the rotated vector). rotation_seed, rng, norm_out: as for
 * fl_dp_distributed_encode. alloc: NULL = libc, for the bitmap. Returns FL_OK, FL_ERR_MISUSE
 * (NULL args, buf_len < dim_padded, bad word_bytes, invalid params; buf untouched),
 * FL_ERR_RANGE (non-finite update; buf untouched), FL_ERR_NOMEM (buf untouched),
 * FL_ERR_AGAIN (1000 rounding attempts failed), or the rng's error; after FL_ERR_AGAIN, a
 * sampler overflow or an rng failure the whole of buf is zeroed. */
FL_API fl_status fl_dp_distributed_encode_inplace(fl_dp_rng *rng, double *buf, size_t buf_len,
                                                  size_t word_bytes,
                                                  const fl_dp_distributed_params *p,
                                                  const uint8_t *rotation_seed, double *norm_out,
                                                  const fl_allocator *alloc);

/* Server side. Decodes sum (dim_padded words, the secure-aggregation sum mod 2^b) into out
 * (p->dim floats): centered lift, times gamma, inverse rotation. The result estimates the
 * sum of the clipped updates plus noise. Returns FL_OK, FL_ERR_MISUSE (bad lengths, sum
 * word >= 2^b), FL_ERR_NOMEM. */
FL_API fl_status fl_dp_distributed_decode(float *out, const uint64_t *sum, size_t sum_len,
                                          const fl_dp_distributed_params *p,
                                          const uint8_t *rotation_seed, const fl_allocator *alloc);

/* ---- randomized Hadamard rotation ----
 * x <- H D x on n = power-of-two doubles (D: +-1 signs from the ChaCha20 stream of seed,
 * H: Walsh-Hadamard / sqrt(n)); orthogonal, so norms are preserved up to rounding. The
 * inverse is x <- D H x (H is symmetric and its own inverse). Returns FL_OK or FL_ERR_MISUSE
 * (n not a power of two, NULL args); FL_ERR_NOMEM is not possible (no allocation). */
FL_API fl_status fl_dp_rotation_forward(double *x, size_t n, const uint8_t *seed);
FL_API fl_status fl_dp_rotation_inverse(double *x, size_t n, const uint8_t *seed);

/* ==== end mechanisms ==== */

/* ==== accounting: RDP accountant, conversion, budget (dp-accountant) ==== */

/* Renyi-DP accounting (Mironov 2017) for the Poisson-subsampled Gaussian mechanism (Mironov,
 * Talwar, Zhang 2019), the discrete Gaussian (Canonne, Kamath, Steinke 2020) and the
 * distributed discrete Gaussian (Kairouz, Liu, Steinke 2021), with RDP -> (epsilon, delta)
 * conversion, a composing accountant handle and a budget check for one population.
 *
 * Conventions: "orders" are Renyi orders alpha > 1; "rdp" is the RDP epsilon at each order
 * (nats); epsilon is in nats; delta in (0, 1). Functions without a handle take an optional
 * errmsg buffer (NULL or errmsg_len 0 = no message) that receives a NUL-terminated English
 * detail on failure. All functions are pure and thread-safe except those on one
 * fl_dp_accountant handle, which must be used by one thread at a time. */

/* Number of default RDP orders: 1.1..10.9 step 0.1 (99), 11..63 (53), 128, 256, 512, 1024 --
 * identical to dp_accounting's DEFAULT_RDP_ORDERS. */
#define FL_DP_DEFAULT_ORDERS_COUNT 156

/* Returns FL_DP_DEFAULT_ORDERS_COUNT (for bindings). Thread-safe. */
FL_API size_t fl_dp_default_orders_count(void);

/* Writes the default orders, ascending, into orders_out.
 * orders_out, orders_len: caller buffer of at least FL_DP_DEFAULT_ORDERS_COUNT doubles.
 * Returns FL_OK, or FL_ERR_MISUSE (NULL buffer, buffer too small). Thread-safe. */
FL_API fl_status fl_dp_default_orders(double *orders_out, size_t orders_len);

/* RDP -> (epsilon, delta) conversion. */
typedef enum fl_dp_conversion {
    /* Canonne-Kamath-Steinke 2020 Prop. 12 / Balle et al. 2020 (as dp_accounting):
     * eps = rdp + log1p(-1/a) - log(delta * a) / (a - 1), plus the KL shortcut. Default. */
    FL_DP_CONVERSION_IMPROVED = 0,
    /* Mironov 2017 Prop. 3: eps = rdp + log(1/delta) / (a - 1). Looser; matches older
     * tools (TF Privacy get_privacy_spent, Opacus). */
    FL_DP_CONVERSION_CLASSIC = 1
} fl_dp_conversion;

/* Kinds of composable privacy events. Values are stable. */
typedef enum fl_dp_event_kind {
    /* Poisson-subsampled Gaussian: each record is included with probability q, the clipped
     * sum gets N(0, (noise_multiplier * clip)^2) noise per coordinate. q = 1 is the plain
     * Gaussian mechanism, RDP alpha / (2 z^2). Exact at integer and fractional orders. */
    FL_DP_EVENT_GAUSSIAN = 1,
    /* Discrete Gaussian N_Z(0, sigma^2) per coordinate on integer vectors whose L2 sensitivity
     * is l2_sensitivity: RDP alpha * l2^2 / (2 sigma^2) (CKS 2020). With q < 1 the general
     * Poisson-subsampling bound of Zhu & Wang 2019 (Thm 5) is used at integer orders. */
    FL_DP_EVENT_DISCRETE_GAUSSIAN = 2,
    /* Distributed discrete Gaussian: the sum of n_clients independent N_Z(0, sigma^2) shares
     * (sigma >= 0.5, integer grid units) on dim-dimensional integer vectors, bounded by
     * Kairouz-Liu-Steinke 2021 Prop. 14 with tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2
     * k / (k + 1)). Subsampling as for FL_DP_EVENT_DISCRETE_GAUSSIAN. */
    FL_DP_EVENT_DISTRIBUTED_DISCRETE_GAUSSIAN = 3
} fl_dp_event_kind;

/* One privacy event, repeated count times. Fill with one of the fl_dp_event_* helpers,
 * then adjust fields. Fields not used by kind are ignored. */
typedef struct fl_dp_event {
    size_t struct_size;       /* sizeof(fl_dp_event) */
    fl_dp_event_kind kind;    /* which mechanism */
    double q;                 /* Poisson sampling probability in [0, 1]; 1 = no sampling */
    double noise_multiplier;  /* GAUSSIAN: noise stddev / L2 sensitivity, >= 0 (0: no noise) */
    double sigma;             /* DISCRETE*: sigma of each discrete Gaussian, grid units */
    double l2_sensitivity;    /* DISCRETE*: L2 sensitivity on the integer grid, > 0 */
    double l1_sensitivity;    /* DISTRIBUTED: L1 sensitivity on the grid; 0 = derived */
    uint64_t dim;             /* DISTRIBUTED: vector dimension d, >= 1 */
    uint64_t n_clients;       /* DISTRIBUTED: number of noise shares summed, >= 1 */
    uint64_t count;           /* how many times the event is composed, >= 0 */
} fl_dp_event;

/* Fill ev with a Poisson-subsampled Gaussian event (q, noise multiplier z, count). */
FL_API void fl_dp_event_gaussian(fl_dp_event *ev, double q, double noise_multiplier,
                                 uint64_t count);
/* Fill ev with a discrete Gaussian event (sigma, l2 sensitivity on the grid, q, count). */
FL_API void fl_dp_event_discrete_gaussian(fl_dp_event *ev, double sigma, double l2_sensitivity,
                                          double q, uint64_t count);
/* Fill ev with a distributed discrete Gaussian event: n_clients shares of N_Z(0, sigma^2),
 * dim coordinates, sensitivity l2 (l1 = 0: derived), sampling q, count. */
FL_API void fl_dp_event_distributed_discrete_gaussian(fl_dp_event *ev, double sigma,
                                                      uint64_t n_clients, uint64_t dim,
                                                      double l2_sensitivity,
                                                      double l1_sensitivity, double q,
                                                      uint64_t count);

/* RDP of the Poisson-subsampled Gaussian mechanism, one step, at each order.
 * rdp_out: n_orders results (nats; +inf when noise_multiplier is 0 and q > 0).
 * orders, n_orders: Renyi orders, each finite and > 1.
 * q in [0, 1]; noise_multiplier >= 0. Integer orders use the exact binomial sum; fractional
 * orders the two-series expansion of Mironov et al. 2019 Sec. 3.3 with exact signs, stopped
 * once the remaining alternating tail is below 1e-12 of the sum (and bounded from above
 * otherwise). Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_dp_rdp_sampled_gaussian(double *rdp_out, const double *orders,
                                            size_t n_orders, double q, double noise_multiplier,
                                            char *errmsg, size_t errmsg_len);

/* RDP of count compositions of ev at each order (rdp_out[i] = count * rdp_one[i]).
 * Returns FL_OK or FL_ERR_MISUSE naming the bad field. Thread-safe. */
FL_API fl_status fl_dp_rdp_event(double *rdp_out, const double *orders, size_t n_orders,
                                 const fl_dp_event *ev, char *errmsg, size_t errmsg_len);

/* Smallest epsilon over the orders for which (epsilon, delta)-DP follows from the RDP curve.
 * epsilon_out: >= 0, +inf if no order gives a finite bound. order_out (optional): the
 * minimising order (0 when epsilon is 0 or delta >= 1 makes the question trivial).
 * delta in (0, 1]. Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_dp_rdp_to_epsilon(double *epsilon_out, double *order_out,
                                      const double *orders, const double *rdp, size_t n_orders,
                                      double delta, fl_dp_conversion conversion,
                                      char *errmsg, size_t errmsg_len);

/* Smallest delta over the orders for which (epsilon, delta)-DP follows from the RDP curve.
 * delta_out in [0, 1]; order_out (optional) the minimising order. epsilon >= 0.
 * Returns FL_OK or FL_ERR_MISUSE. Thread-safe. */
FL_API fl_status fl_dp_rdp_to_delta(double *delta_out, double *order_out, const double *orders,
                                    const double *rdp, size_t n_orders, double epsilon,
                                    fl_dp_conversion conversion, char *errmsg,
                                    size_t errmsg_len);

/* ---- accountant handle ---- */

/* Accountant configuration; fl_dp_accountant_config_init() fills the defaults. */
typedef struct fl_dp_accountant_config {
    size_t struct_size;          /* sizeof(fl_dp_accountant_config) */
    const double *orders;        /* Renyi orders (> 1, finite); NULL = the defaults; copied */
    size_t n_orders;             /* number of orders (ignored when orders is NULL) */
    fl_dp_conversion conversion; /* default FL_DP_CONVERSION_IMPROVED */
} fl_dp_accountant_config;

/* Fills cfg with defaults: default orders, improved conversion. */
FL_API void fl_dp_accountant_config_init(fl_dp_accountant_config *cfg);

/* Opaque composing accountant: holds the running RDP curve of everything composed. Memory is
 * O(orders); composing an event already seen (same parameters as the previous one) costs
 * O(orders), a new one its RDP evaluation once. One thread at a time per handle. */
typedef struct fl_dp_accountant fl_dp_accountant;

/* Creates an empty accountant. out: receives the handle (NULL on failure). cfg: NULL =
 * defaults; validated here. alloc: NULL = libc; copied. errmsg: optional detail.
 * Returns FL_OK, FL_ERR_MISUSE (bad field, named in errmsg) or FL_ERR_NOMEM. */
FL_API fl_status fl_dp_accountant_create(fl_dp_accountant **out,
                                         const fl_dp_accountant_config *cfg,
                                         const fl_allocator *alloc, char *errmsg,
                                         size_t errmsg_len);

/* Frees the accountant. NULL is a no-op. */
FL_API void fl_dp_accountant_destroy(fl_dp_accountant *acc);

/* Forgets everything composed (keeps orders and conversion). */
FL_API void fl_dp_accountant_reset(fl_dp_accountant *acc);

/* Composes ev (count times) into the running curve. On failure nothing changes.
 * Returns FL_OK, FL_ERR_MISUSE (bad event; see errmsg). */
FL_API fl_status fl_dp_accountant_compose(fl_dp_accountant *acc, const fl_dp_event *ev);

/* Epsilon at delta of everything composed so far; order_out (optional) the optimal order.
 * Returns FL_OK or FL_ERR_MISUSE (delta outside (0, 1]). */
FL_API fl_status fl_dp_accountant_epsilon(fl_dp_accountant *acc, double *epsilon_out,
                                          double *order_out, double delta);

/* Delta at epsilon of everything composed so far; order_out (optional) the optimal order.
 * Returns FL_OK or FL_ERR_MISUSE (epsilon negative or NaN). */
FL_API fl_status fl_dp_accountant_delta(fl_dp_accountant *acc, double *delta_out,
                                        double *order_out, double epsilon);

/* Epsilon at delta as if ev were composed now, without changing the accountant (what-if
 * for a proposed round). Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_dp_accountant_epsilon_if(fl_dp_accountant *acc, double *epsilon_out,
                                             double *order_out, const fl_dp_event *ev,
                                             double delta);

/* Borrowed view of the orders and the running RDP curve (n entries each), valid until the
 * next call that changes the accountant or its destruction. Any output may be NULL. */
FL_API void fl_dp_accountant_curve(const fl_dp_accountant *acc, const double **orders_out,
                                   const double **rdp_out, size_t *n_out);

/* Detail of the last failure on acc (static status string if none); owned by acc, valid
 * until the next call on it. */
FL_API const char *fl_dp_accountant_errmsg(const fl_dp_accountant *acc);

/* Smallest noise multiplier z for which steps compositions of the Poisson-subsampled
 * Gaussian (q, z) give epsilon <= target_epsilon at delta, found by bisection on z to a
 * relative tolerance rel_tol (0 = 1e-6) after bracketing in [1e-3, 1e4]; the returned z
 * always meets the target (upper end of the final bracket). cfg: NULL = defaults.
 * epsilon_out (optional): epsilon reached with z_out. Returns FL_OK, FL_ERR_MISUSE, or
 * FL_ERR_RANGE when even z = 1e4 cannot reach the target. Thread-safe. */
FL_API fl_status fl_dp_noise_multiplier_for_epsilon(double *z_out, double *epsilon_out,
                                                    double q, uint64_t steps,
                                                    double target_epsilon, double delta,
                                                    double rel_tol,
                                                    const fl_dp_accountant_config *cfg,
                                                    const fl_allocator *alloc, char *errmsg,
                                                    size_t errmsg_len);

/* ---- privacy budget ---- */

/* Mechanism names used in ledger entries (the ledger's mechanism text). The short aliases
 * "dgauss" and "ddgauss" are accepted for the two discrete mechanisms. */
#define FL_DP_MECH_GAUSSIAN "gaussian"
#define FL_DP_MECH_DISCRETE_GAUSSIAN "discrete_gaussian"
#define FL_DP_MECH_DISTRIBUTED_DISCRETE_GAUSSIAN "distributed_discrete_gaussian"

/* One round of a population's privacy ledger, as stored (storage keeps the same fields; the
 * dp library never reads storage itself). Mechanism parameters beyond the common columns are
 * kept in params_json, read and written by the helpers below. */
typedef struct fl_dp_ledger_entry {
    size_t struct_size;       /* sizeof(fl_dp_ledger_entry) */
    const char *mechanism;    /* one of FL_DP_MECH_*; borrowed */
    double q;                 /* sampling probability of a client in the round, [0, 1] */
    double noise_multiplier;  /* gaussian: noise stddev / clip_norm */
    double clip_norm;         /* L2 clip norm (model units; informational for accounting) */
    uint64_t steps;           /* noisy aggregations in the round (usually 1) */
    uint64_t participants;    /* clients whose updates were summed; the DDG's n_clients */
    double sigma;             /* discrete mechanisms: per-share sigma, grid units (params_json) */
    double l2_sensitivity;    /* discrete mechanisms: L2 sensitivity on the grid (params_json) */
    double l1_sensitivity;    /* DDG: L1 sensitivity on the grid, 0 = derived (params_json) */
    uint64_t dim;             /* DDG: vector dimension (params_json) */
} fl_dp_ledger_entry;

/* Zeroes e, sets struct_size and the mechanism (borrowed). */
FL_API void fl_dp_ledger_entry_init(fl_dp_ledger_entry *e, const char *mechanism);

/* Parses params_json, a flat JSON object such as
 * {"sigma": 12.5, "l2_sensitivity": 400, "l1_sensitivity": 0, "dim": 1024}, into e's
 * mechanism-parameter fields (keys absent keep their value; unknown keys are ignored;
 * NULL or "" is {}). Returns FL_OK or FL_ERR_FORMAT. */
FL_API fl_status fl_dp_ledger_entry_parse_params(fl_dp_ledger_entry *e, const char *params_json,
                                                 char *errmsg, size_t errmsg_len);

/* Writes e's mechanism parameters as params_json into buf (NUL-terminated; "{}" for the
 * gaussian). Returns FL_OK, FL_ERR_MISUSE (NULL buf or e, buf_len 0), FL_ERR_TOO_LARGE when
 * buf_len is too small, or FL_ERR_NOMEM; on any failure buf holds "". */
FL_API fl_status fl_dp_ledger_entry_format_params(char *buf, size_t buf_len,
                                                  const fl_dp_ledger_entry *e);

/* Converts a ledger entry to the event it accounts for (count = steps).
 * Returns FL_OK or FL_ERR_MISUSE (unknown mechanism, bad field). */
FL_API fl_status fl_dp_ledger_entry_to_event(fl_dp_event *ev, const fl_dp_ledger_entry *e,
                                             char *errmsg, size_t errmsg_len);

/* A population's privacy budget: total (epsilon, delta) over its lifetime. */
typedef struct fl_dp_budget {
    double epsilon;  /* > 0 */
    double delta;    /* in (0, 1) */
} fl_dp_budget;

/* Outcome of a budget check (filled whenever the check could be computed). */
typedef struct fl_dp_budget_report {
    double epsilon_before;  /* epsilon of the ledger so far at budget.delta */
    double order_before;    /* its optimal order */
    double epsilon_after;   /* epsilon if the proposed round runs */
    double order_after;     /* its optimal order */
    double epsilon_budget;  /* budget.epsilon */
    double delta;           /* budget.delta */
    double remaining;       /* budget.epsilon - epsilon_after (negative if refused) */
} fl_dp_budget_report;

/* Decides whether the proposed round fits the budget given the ledger so far. Pure: builds a
 * temporary accountant (cfg NULL = defaults; alloc NULL = libc).
 * report_out (optional): the figures. ledger, n_ledger: the rounds already run (any order).
 * Returns FL_OK (allowed), FL_ERR_BUDGET (it would exceed: errmsg gives the current epsilon,
 * the epsilon after the round and the budget), FL_ERR_MISUSE (bad budget or entry, named),
 * FL_ERR_NOMEM. Thread-safe. */
FL_API fl_status fl_dp_budget_check(fl_dp_budget_report *report_out, const fl_dp_budget *budget,
                                    const fl_dp_ledger_entry *ledger, size_t n_ledger,
                                    const fl_dp_ledger_entry *proposed,
                                    const fl_dp_accountant_config *cfg,
                                    const fl_allocator *alloc, char *errmsg,
                                    size_t errmsg_len);

/* Same decision in O(orders) against an accountant that already holds the ledger (the
 * coordinator composes each committed round into it). Does not compose proposed.
 * Returns as fl_dp_budget_check; the message is also kept as fl_dp_accountant_errmsg(acc). */
FL_API fl_status fl_dp_accountant_budget_check(fl_dp_accountant *acc,
                                               fl_dp_budget_report *report_out,
                                               const fl_dp_budget *budget,
                                               const fl_dp_ledger_entry *proposed);

/* ==== end accounting ==== */

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_DP_H */
