#ifndef FL_CLIENT_INTERNAL_H
#define FL_CLIENT_INTERNAL_H

/* Internals shared by the client SDK's files (fl__client_ prefix; never exported). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fl_internal.h"
#include "flotilla/client.h"
#include "flotilla/tensor.h"

/* The allocator to hand to other components' APIs: a copied default (all zero) becomes NULL,
 * which they read as libc. */
static inline const fl_allocator *fl__client_ext_alloc(const fl_allocator *a) {
    return a && a->alloc ? a : NULL;
}

/* ---- time ---- */

/* Wall clock in Unix ms (CLOCK_REALTIME). */
int64_t fl__client_now_real(void *unused);
/* Sleeps ms milliseconds (0 returns at once). */
void fl__client_sleep_ms(int64_t ms);

/* ---- deterministic PRNG (shuffling, jitter, init) ----
 * xoshiro256** seeded through splitmix64; not for secrets. */
struct fl__client_rng {
    uint64_t s[4];
};
void fl__client_rng_seed(struct fl__client_rng *r, uint64_t seed);
uint64_t fl__client_rng_next(struct fl__client_rng *r);
/* Uniform in [0, n) (n > 0), without modulo bias. */
uint64_t fl__client_rng_below(struct fl__client_rng *r, uint64_t n);
/* Uniform double in [0, 1). */
double fl__client_rng_unit(struct fl__client_rng *r);

/* ---- JSON reader ----
 * A validating, non-allocating tokenizer (RFC 8259) over a caller-owned token array. Each
 * token records its byte span, kind, and the index one past its subtree, so lookups skip
 * whole values. Depth is limited to FL__CLIENT_JSON_MAX_DEPTH. */
#define FL__CLIENT_JSON_MAX_DEPTH 32

enum fl__client_jkind {
    FL__J_OBJECT = 1,
    FL__J_ARRAY,
    FL__J_STRING,
    FL__J_NUMBER,
    FL__J_TRUE,
    FL__J_FALSE,
    FL__J_NULL
};

struct fl__client_jtok {
    uint8_t kind;      /* enum fl__client_jkind */
    uint32_t start;    /* first byte (after the quote for strings) */
    uint32_t end;      /* one past the last byte (before the closing quote for strings) */
    uint32_t next;     /* token index one past this value's subtree */
    uint32_t count;    /* members (object) or elements (array) */
};

struct fl__client_json {
    const char *text;              /* the document (not owned) */
    size_t len;
    struct fl__client_jtok *tok;   /* token array (caller-owned) */
    size_t ntok;                   /* tokens used */
    size_t cap;                    /* tokens available */
};

/* Parses text[0..len) into j->tok (cap tokens). The top level must be an object.
 * Returns FL_OK, FL_ERR_FORMAT (malformed, nesting too deep, bad UTF-8 escapes) or
 * FL_ERR_TOO_LARGE (more than cap tokens or len >= 2^32). */
fl_status fl__client_json_parse(struct fl__client_json *j, const char *text, size_t len,
                                struct fl__client_jtok *tok, size_t cap);
/* Index of the value of key in object token obj, or -1 (absent or obj not an object). A
 * key is compared after unescaping. */
long fl__client_json_get(const struct fl__client_json *j, long obj, const char *key);
/* Index of element i of array token arr, or -1. */
long fl__client_json_at(const struct fl__client_json *j, long arr, size_t i);
/* String value of token t unescaped into buf (NUL-terminated); false if t is not a string,
 * the result does not fit, or it contains NUL. */
bool fl__client_json_str(const struct fl__client_json *j, long t, char *buf, size_t cap);
/* Integer value in [-(2^53-1), 2^53-1]; false if not an integer number. */
bool fl__client_json_int(const struct fl__client_json *j, long t, int64_t *out);
/* Finite number value; false otherwise. */
bool fl__client_json_num(const struct fl__client_json *j, long t, double *out);
/* Boolean value; false if not true/false. */
bool fl__client_json_bool(const struct fl__client_json *j, long t, bool *out);
/* Kind of token t, 0 if t < 0. */
int fl__client_json_kind(const struct fl__client_json *j, long t);

/* ---- JSON writer ----
 * Appends to a fixed buffer; overflow is sticky and reported by _ok(). */
struct fl__client_jw {
    char *buf;
    size_t cap, len;
    bool overflow;
};
void fl__client_jw_init(struct fl__client_jw *w, char *buf, size_t cap);
void fl__client_jw_raw(struct fl__client_jw *w, const char *s);
void fl__client_jw_str(struct fl__client_jw *w, const char *s); /* quoted, escaped */
void fl__client_jw_int(struct fl__client_jw *w, int64_t v);
bool fl__client_jw_ok(const struct fl__client_jw *w);

/* ---- byte helpers ---- */
/* Lowercase hex of n bytes into out (2n + 1 chars). */
void fl__client_hex(char *out, const uint8_t *in, size_t n);
/* Decodes exactly n bytes of lowercase/uppercase hex from s (2n chars, then NUL). */
bool fl__client_unhex(uint8_t *out, size_t n, const char *s);
/* Decodes standard base64 with padding into out (exactly n bytes expected). */
bool fl__client_unbase64(uint8_t *out, size_t n, const char *s);
/* SHA-256. */
void fl__client_sha256(uint8_t out[32], const void *data, size_t len);
/* Ed25519 verification (pure, RFC 8032): FL_OK (0) if sig is valid for msg under pk,
 * FL_ERR_CRYPTO if not, FL_ERR_UNSUPPORTED if the build has no verifier. */
int fl__client_ed25519_verify(const uint8_t sig[64], const uint8_t *msg, size_t len,
                              const uint8_t pk[32]);
/* OS randomness. */
void fl__client_random(void *out, size_t n);

/* ---- dense kernels (kernels.c) ----
 * Row-major float32. CBLAS when the build has it, portable loops otherwise. */
/* C(M,N) = A(M,K) * B(N,K)^T + (accumulate ? C : 0) */
void fl__client_gemm_nt(float *c, const float *a, const float *b, size_t m, size_t n, size_t k,
                        int accumulate);
/* C(M,N) += A(K,M)^T * B(K,N) */
void fl__client_gemm_tn_acc(float *c, const float *a, const float *b, size_t m, size_t n,
                            size_t k);
/* C(M,N) = A(M,K) * B(K,N) */
void fl__client_gemm_nn(float *c, const float *a, const float *b, size_t m, size_t n, size_t k);
/* 1 if CBLAS is used. */
int fl__client_kernels_blas(void);
/* 1 and a sentence in buf if OpenBLAS runs pre-AVX2 kernels (core type `core`) on a CPU
 * with AVX2 + FMA (AVX-512: avx512), naming the OPENBLAS_CORETYPE to set; else 0. */
int fl__client_blas_advice_for(const char *core, int avx2_fma, int avx512, char *buf,
                               size_t len);
/* The same for this process: the loaded OpenBLAS and this CPU (0 without CBLAS or x86). */
int fl__client_blas_advice(char *buf, size_t len);

/* ---- network description shared by the trainer and the update pipeline ---- */
struct fl__client_layer {
    uint32_t in, out;        /* weight is (out, in), bias (out) */
    size_t w_off, b_off;     /* float offsets of weight and bias in the parameter arena */
    char wname[24], bname[24]; /* tensor names in the model */
};

/* Parses a model's tensors into a layer table: fc1..fcK (or dense). Returns FL_OK,
 * FL_ERR_FORMAT (message in err), FL_ERR_UNSUPPORTED. */
fl_status fl__client_net_from_safetensors(const fl_safetensors *st, struct fl__client_layer *ly,
                                          size_t *n_layers, size_t *n_params,
                                          struct fl__err *err);

/* Internal training entry used by the round: trains with the built-in trainer's arenas and
 * checks the interrupt flag between batches. */
fl_status fl__client_trainer_train_store_cb(fl_client_trainer *tr, fl_client_store *st,
                                            const fl_client_train_params *p,
                                            uint64_t *examples_used, double *mean_loss,
                                            int (*cancelled)(void *), void *cancel_user);
/* Parameter and global-reference arenas (num_params floats each). */
float *fl__client_trainer_params_ptr(fl_client_trainer *tr);
const float *fl__client_trainer_global_ptr(const fl_client_trainer *tr);
const struct fl__client_layer *fl__client_trainer_layers(const fl_client_trainer *tr,
                                                         size_t *n);
/* Frees gradient and momentum arenas (between training and the update). */
void fl__client_trainer_release_work(fl_client_trainer *tr);

/* ---- store internals used by the trainer ---- */
uint32_t fl__client_store_feature_dim(const fl_client_store *st);
/* Dense example ids (oldest first) into a freshly allocated array of *alloc_n entries
 * (allocator a; free *alloc_n * 8 bytes), *n of them used. */
fl_status fl__client_store_dense_ids(fl_client_store *st, int64_t **ids, size_t *n,
                                     size_t *alloc_n, const fl_allocator *a);
/* Reads dense example id into x (feature_dim floats) and *y. */
fl_status fl__client_store_read_dense(fl_client_store *st, int64_t id, float *x, int32_t *y);

#endif /* FL_CLIENT_INTERNAL_H */
