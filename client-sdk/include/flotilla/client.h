#ifndef FLOTILLA_CLIENT_H
#define FLOTILLA_CLIENT_H

/* Flotilla client SDK: the library a device app embeds to take part in federated rounds.
 *
 * The SDK keeps training examples on the device (an SQLite example store with retention
 * limits), trains locally (a built-in dense trainer or the app's own engine through a
 * callback), turns the result into a private update (delta, clip, quantize, distributed-DP
 * noise, secure-aggregation masks) and speaks the coordinator's wire protocol
 * (docs/protocol.md) over a transport the app may supply. It verifies the coordinator's
 * Ed25519 signature on every task config and model against a key the app pins, and it
 * refuses anything unsigned or mismatching. Raw examples never leave the device.
 *
 * Rules that hold for every function here:
 *  - Fallible calls return fl_status (FL_OK = 0). Bad arguments give FL_ERR_MISUSE with a
 *    message naming the argument, available from the handle's errmsg function.
 *  - Handles are opaque, created with _create/_open and freed with _destroy/_close;
 *    _destroy(NULL)/_close(NULL) are no-ops.
 *  - Each handle takes an fl_allocator (NULL = libc) that receives every allocation the SDK
 *    itself makes for it. SQLite and libcurl allocate through their own (process-wide)
 *    allocators; the SDK does not change them.
 *  - One thread at a time per handle, except fl_client_interrupt(), which is safe from any
 *    thread. The SDK starts no thread unless the app calls fl_client_worker_start().
 *  - Nothing is printed; diagnostics go to the optional fl_logger.
 *  - Times are Unix milliseconds from the configured clock (default CLOCK_REALTIME).
 *
 * The full guide with a compiled example is docs/client-sdk.md. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sizes and limits (each macro has a getter, tested equal) ---- */

#define FL_CLIENT_PUBLIC_KEY_BYTES 32        /* coordinator Ed25519 public key */
#define FL_CLIENT_KEY_ID_CHARS 16            /* hex chars of a key id (without NUL) */
#define FL_CLIENT_TOKEN_MAX_CHARS 200        /* longest bearer token (without NUL) */
#define FL_CLIENT_MAX_LAYERS 16              /* dense layers of the built-in trainer */
#define FL_CLIENT_MAX_TENSORS 256            /* tensors per model the SDK accepts */
#define FL_CLIENT_MAX_JSON_BYTES 262144      /* largest JSON answer the SDK accepts */
#define FL_CLIENT_SIGNING_KEY_BYTES 64       /* device identity: Ed25519 secret key (seed ||
                                                verification key) */
#define FL_CLIENT_DEVICE_ID_BYTES 32         /* device identity: the id its certificate binds */
#define FL_CLIENT_CERT_BYTES 64              /* device identity: the authority's certificate */

FL_API size_t fl_client_public_key_bytes(void);
FL_API size_t fl_client_key_id_chars(void);
FL_API size_t fl_client_token_max_chars(void);
FL_API size_t fl_client_max_layers(void);
FL_API size_t fl_client_max_tensors(void);
FL_API size_t fl_client_max_json_bytes(void);
FL_API size_t fl_client_signing_key_bytes(void);
FL_API size_t fl_client_device_id_bytes(void);
FL_API size_t fl_client_cert_bytes(void);

/* ---- version and status names ----
 * The shared library exports only fl_client_* names, so the core's version and status-name
 * getters are offered again under this prefix for apps and bindings that load the SDK alone.
 * All are thread-safe and return static strings. */

/* The library's version as M * 1000000 + m * 1000 + p: compare it with FL_VERSION_NUMBER
 * from flotilla/version.h to check that the header and the loaded library match. */
FL_API int fl_client_version_number(void);

/* The library's version as "M.m.p". */
FL_API const char *fl_client_version_string(void);

/* Short symbolic name of a status code, e.g. "FL_ERR_MISUSE" (as fl_status_name). */
FL_API const char *fl_client_status_name(fl_status code);

/* English description of a status code, never NULL (as fl_status_str). */
FL_API const char *fl_client_status_str(fl_status code);

/* Writes the key id of a coordinator public key (docs/protocol.md 4.1: lowercase hex of the
 * first 8 bytes of SHA-256(pk)) into out as FL_CLIENT_KEY_ID_CHARS chars plus a NUL.
 *   out      buffer of at least FL_CLIENT_KEY_ID_CHARS + 1 bytes.
 *   pk       FL_CLIENT_PUBLIC_KEY_BYTES bytes.
 * Returns FL_OK or FL_ERR_MISUSE (NULL argument). Thread-safe. */
FL_API fl_status fl_client_key_id(char *out, const uint8_t *pk);

/* Makes a device identity key pair for secure aggregation's active-adversary mode
 * (docs/client-sdk.md "Device identity"): a fresh Ed25519 key pair from the build's CSPRNG
 * (libsodium, or mbedTLS's CTR-DRBG in the embedded profile). The app keeps signing_key
 * secret on the device (fl_client_config.secagg_signing_key), sends verify_key to its device
 * authority, which certifies it together with the device id, offline, and stores the
 * certificate with the key.
 *   verify_key   receives FL_CLIENT_PUBLIC_KEY_BYTES bytes (public).
 *   signing_key  receives FL_CLIENT_SIGNING_KEY_BYTES bytes (secret: wipe it when done; its
 *                last 32 bytes are verify_key).
 * Returns FL_OK, FL_ERR_MISUSE (NULL argument), FL_ERR_CRYPTO (the generator failed;
 * signing_key is then zeroed) or FL_ERR_UNSUPPORTED (no Ed25519 in this build). Thread-safe. */
FL_API fl_status fl_client_identity_keygen(uint8_t *verify_key, uint8_t *signing_key);

/* Clock hook: current time in Unix milliseconds. */
typedef int64_t (*fl_client_clock_fn)(void *user);

/* ==== example store ==== */

/* An SQLite database of training examples on the device. Two kinds of example:
 * dense ones (feature_dim float32 features + an int32 label, used by the built-in trainer)
 * and raw byte blobs (for custom trainers). Retention limits are applied on every insert,
 * on open and before training: examples older than max_age_ms go first, then the oldest
 * until the store holds at most max_bytes of payload and max_examples examples. */
typedef struct fl_client_store fl_client_store;

typedef struct fl_client_store_config {
    size_t struct_size;            /* sizeof(fl_client_store_config); set by config_init */
    const fl_allocator *allocator; /* NULL = libc; copied */
    const char *path;              /* database file (created if missing) or ":memory:";
                                      required; copied */
    uint32_t feature_dim;          /* floats per dense example, 1..1048576; 0 = raw only */
    int64_t max_age_ms;            /* examples older than this are deleted; 0 = no limit */
    uint64_t max_bytes;            /* payload bytes kept at most; 0 = no limit */
    uint64_t max_examples;         /* examples kept at most; 0 = no limit */
    fl_client_clock_fn clock;      /* NULL = CLOCK_REALTIME */
    void *clock_user;              /* passed to clock */
} fl_client_store_config;

/* Fills cfg with defaults: no path, feature_dim 0, no retention limits, libc allocator,
 * real-time clock. NULL is a no-op. Thread-safe. */
FL_API void fl_client_store_config_init(fl_client_store_config *cfg);

/* Opens (creating if needed) the store at cfg->path and applies retention.
 *   out  receives the handle; NULL on failure.
 *   cfg  validated here; a bad field gives FL_ERR_MISUSE (errmsg: use a NULL-handle message
 *        via errmsg_out when non-NULL, up to errmsg_len bytes, NUL-terminated).
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM, FL_ERR_IO (cannot open or create),
 * FL_ERR_FORMAT (the file is not a store of this SDK, or feature_dim differs from the one
 * it was created with), FL_ERR_BUSY (locked). */
FL_API fl_status fl_client_store_open(fl_client_store **out, const fl_client_store_config *cfg,
                                      char *errmsg_out, size_t errmsg_len);

/* Closes the store. NULL is a no-op. */
FL_API void fl_client_store_close(fl_client_store *st);

/* Detail of the last failure on st; owned by st, valid until the next call on it. Never
 * NULL (a NULL st gives a generic message). */
FL_API const char *fl_client_store_errmsg(const fl_client_store *st);

/* Adds one dense example: features (n floats, n must equal feature_dim, all finite) and its
 * label (>= 0). The data are copied. Retention runs afterwards.
 * Returns FL_OK, FL_ERR_MISUSE (NULL, wrong n, raw-only store, negative label), FL_ERR_RANGE
 * (non-finite feature), FL_ERR_TOO_LARGE (one example over max_bytes), FL_ERR_IO,
 * FL_ERR_BUSY, FL_ERR_NOMEM. */
FL_API fl_status fl_client_store_add(fl_client_store *st, const float *features, size_t n,
                                     int32_t label);

/* Adds one raw example of len bytes (1..16 MiB; copied). Returns as fl_client_store_add. */
FL_API fl_status fl_client_store_add_raw(fl_client_store *st, const void *data, size_t len);

/* Applies the retention limits now. removed (optional) receives the number deleted.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_IO, FL_ERR_BUSY. */
FL_API fl_status fl_client_store_prune(fl_client_store *st, uint64_t *removed);

/* Number of examples and their payload bytes (either output may be NULL).
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_IO. */
FL_API fl_status fl_client_store_stats(fl_client_store *st, uint64_t *count, uint64_t *bytes);

/* Deletes every example. Returns FL_OK, FL_ERR_MISUSE, FL_ERR_IO, FL_ERR_BUSY. */
FL_API fl_status fl_client_store_clear(fl_client_store *st);

/* Lists example ids, oldest first, for custom trainers: writes up to cap ids into ids and
 * the number written into *n; starts after id `after` (0 = from the start), so repeated
 * calls page through the store. Returns FL_OK, FL_ERR_MISUSE, FL_ERR_IO. */
FL_API fl_status fl_client_store_ids(fl_client_store *st, int64_t *ids, size_t cap, size_t *n,
                                     int64_t after);

/* Reads example id. For a dense example, features (cap floats) receives feature_dim floats
 * and *label the label; for a raw one, features is ignored and *label is -1. raw (optional,
 * raw_cap bytes) receives the payload bytes of either kind and *raw_len their count (if
 * raw_cap is too small, nothing is copied, *raw_len is the size needed and FL_ERR_TOO_LARGE
 * is returned). Any output may be NULL.
 * Returns FL_OK, FL_ERR_NOT_FOUND, FL_ERR_MISUSE, FL_ERR_TOO_LARGE, FL_ERR_IO. */
FL_API fl_status fl_client_store_get(fl_client_store *st, int64_t id, float *features,
                                     size_t cap, int32_t *label, void *raw, size_t raw_cap,
                                     size_t *raw_len);

/* ==== models and the built-in trainer ==== */

/* The built-in trainer handles dense feed-forward networks stored as safetensors with F32
 * tensors named fc1.weight (out, in), fc1.bias (out), fc2.weight, ... fcK.bias, with ReLU
 * between layers and softmax cross-entropy on the last (K = 1 is softmax regression; the
 * pair dense.weight / dense.bias is also accepted as K = 1). */

/* Builds the safetensors image of a freshly initialised network: sizes[0] inputs,
 * sizes[1..n_sizes-1] layer widths (n_sizes 2..FL_CLIENT_MAX_LAYERS + 1), He-uniform weights
 * from a ChaCha20 stream of seed, zero biases, metadata flotilla.arch = "mlp".
 *   out, cap   output buffer; out may be NULL with cap 0 to query the size.
 *   out_len    receives the image size (also on FL_ERR_TOO_LARGE).
 * Returns FL_OK, FL_ERR_MISUSE (bad sizes), FL_ERR_TOO_LARGE (cap too small),
 * FL_ERR_NOMEM. Thread-safe. */
FL_API fl_status fl_client_model_init(void *out, size_t cap, size_t *out_len,
                                      const uint32_t *sizes, size_t n_sizes, uint64_t seed,
                                      const fl_allocator *alloc);

/* Hyper-parameters of local training (the task config's "training" object). */
typedef struct fl_client_train_params {
    size_t struct_size;      /* sizeof(fl_client_train_params); set by _init */
    uint32_t epochs;         /* passes over the data, >= 1 (default 1) */
    uint32_t batch_size;     /* examples per step, >= 1 (default 32) */
    double learning_rate;    /* SGD step size, >= 0 (default 0.05) */
    double momentum;         /* heavy-ball momentum in [0, 1) (default 0.9) */
    double weight_decay;     /* L2 penalty added to the gradient, >= 0 (default 0) */
    double proximal_mu;      /* FedProx mu >= 0: adds mu/2 ||w - w_global||^2 (default 0) */
    uint64_t max_examples;   /* examples used at most (0 = all; default 0) */
    uint64_t seed;           /* shuffling seed; equal seeds give equal results (default 1) */
} fl_client_train_params;

/* Fills p with the defaults above. NULL is a no-op. Thread-safe. */
FL_API void fl_client_train_params_init(fl_client_train_params *p);

/* A built-in trainer: the network's parameters, the global reference copy (for FedProx and
 * the delta), gradients and momentum, each one contiguous float32 arena. */
typedef struct fl_client_trainer fl_client_trainer;

/* Creates a trainer from a safetensors image of a supported network (copied: the image may
 * be freed afterwards). Its weights become both the parameters and the global reference.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_FORMAT (not safetensors, or not a supported network:
 * the message names the tensor), FL_ERR_UNSUPPORTED (non-F32 tensor), FL_ERR_NOMEM. */
FL_API fl_status fl_client_trainer_create(fl_client_trainer **out, const void *model,
                                          size_t model_len, const fl_allocator *alloc);

/* fl_client_trainer_create with the reason for a failure: since a trainer that fails to be
 * created is never returned, its errmsg cannot be read, so the detail (which tensor is
 * missing or has the wrong shape or dtype, what is wrong with the safetensors image) is
 * written to errmsg_out (optional; errmsg_len bytes, NUL-terminated, truncated to fit; an
 * empty string on FL_OK). Same arguments and codes as fl_client_trainer_create. */
FL_API fl_status fl_client_trainer_create_v2(fl_client_trainer **out, const void *model,
                                             size_t model_len, const fl_allocator *alloc,
                                             char *errmsg_out, size_t errmsg_len);

/* Frees the trainer. NULL is a no-op. */
FL_API void fl_client_trainer_destroy(fl_client_trainer *tr);

/* Detail of the last failure on tr (never NULL; owned by tr, valid until the next call). */
FL_API const char *fl_client_trainer_errmsg(const fl_client_trainer *tr);

/* Number of float parameters (0 for NULL), and the input and output widths. */
FL_API size_t fl_client_trainer_num_params(const fl_client_trainer *tr);
FL_API size_t fl_client_trainer_num_inputs(const fl_client_trainer *tr);
FL_API size_t fl_client_trainer_num_classes(const fl_client_trainer *tr);

/* Trains on n in-memory examples: x is (n, inputs) row-major floats, y holds n labels in
 * [0, classes). Runs p->epochs shuffled passes of p->batch_size (the last batch may be
 * smaller). mean_loss (optional) receives the mean training loss of the last epoch.
 * Returns FL_OK, FL_ERR_MISUSE (bad argument or label), FL_ERR_RANGE (loss became
 * non-finite; the parameters are then unspecified), FL_ERR_NOMEM. */
FL_API fl_status fl_client_trainer_train(fl_client_trainer *tr, const float *x, const int32_t *y,
                                         size_t n, const fl_client_train_params *p,
                                         double *mean_loss);

/* Trains on the dense examples of st (feature_dim must equal the network's inputs), reading
 * one batch at a time, so memory is O(batch x inputs) whatever the store holds.
 * examples_used (optional) receives the number of distinct examples trained on.
 * Returns the codes of fl_client_trainer_train plus FL_ERR_IO (store read failed) and
 * FL_ERR_NOT_FOUND (the store is empty). */
FL_API fl_status fl_client_trainer_train_store(fl_client_trainer *tr, fl_client_store *st,
                                               const fl_client_train_params *p,
                                               uint64_t *examples_used, double *mean_loss);

/* Evaluates n examples: mean loss and accuracy (either may be NULL). Does not change the
 * parameters. Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM. */
FL_API fl_status fl_client_trainer_evaluate(fl_client_trainer *tr, const float *x,
                                            const int32_t *y, size_t n, double *loss,
                                            double *accuracy);

/* Mean loss over n examples and its gradient with respect to every parameter (grad:
 * num_params floats, in parameter order; the weight decay and proximal terms of p are
 * included; p NULL = neither). Does not change the parameters.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM. */
FL_API fl_status fl_client_trainer_gradient(fl_client_trainer *tr, float *grad, size_t grad_len,
                                            double *loss, const float *x, const int32_t *y,
                                            size_t n, const fl_client_train_params *p);

/* Copies the parameters out (in order fc1.weight, fc1.bias, fc2.weight, ...), or in.
 * len must equal num_params. set_params does not change the global reference.
 * Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_client_trainer_get_params(const fl_client_trainer *tr, float *out, size_t len);
FL_API fl_status fl_client_trainer_set_params(fl_client_trainer *tr, const float *in, size_t len);

/* Serializes the current parameters as a safetensors image (same names and shapes as the
 * model it was created from). out may be NULL with cap 0 to query the size; *out_len gets
 * the size. Returns FL_OK, FL_ERR_MISUSE, FL_ERR_TOO_LARGE (cap too small), FL_ERR_NOMEM. */
FL_API fl_status fl_client_trainer_save(fl_client_trainer *tr, void *out, size_t cap,
                                        size_t *out_len);

/* ==== custom trainers ==== */

/* One model tensor handed to a custom trainer: a float32 copy the trainer updates in place. */
typedef struct fl_client_tensor {
    const char *name;       /* tensor name from the model (owned by the SDK) */
    size_t ndim;            /* number of dimensions */
    const uint64_t *shape;  /* ndim sizes, outermost first */
    float *data;            /* numel floats, row-major; starts as the global model */
    size_t numel;           /* number of elements */
} fl_client_tensor;

/* A custom trainer. The SDK calls it once per round with every F32 tensor of the global
 * model (copies), the round's hyper-parameters and the example store; the trainer writes
 * the trained values into the tensors' data and the number of examples it used into
 * *examples_used. Returning anything but FL_OK abandons the round (nothing is sent). The
 * callback runs on the thread that drives the client; it must not call back into the
 * client handle except fl_client_interrupt(). */
typedef fl_status (*fl_client_train_fn)(void *user, fl_client_tensor *tensors, size_t n_tensors,
                                        const fl_client_train_params *params,
                                        fl_client_store *store, uint64_t *examples_used);

/* ==== transport ==== */

/* One HTTP request the SDK wants sent. Every pointer is owned by the SDK and valid until the
 * transport's recv returns something other than FL_ERR_AGAIN or the request is cancelled. */
typedef struct fl_client_request {
    size_t struct_size;          /* sizeof(fl_client_request) */
    const char *method;          /* "GET" or "POST" */
    const char *path;            /* absolute path and query, e.g. "/v1/checkin" */
    const char *const *headers;  /* n_headers "Name: value" lines (no CR/LF) */
    size_t n_headers;
    const uint8_t *body;         /* body bytes for POST (may be NULL when body_len is 0) */
    size_t body_len;             /* sent as Content-Length */
    uint32_t timeout_ms;         /* whole-request timeout the SDK asks for (long polls
                                    included) */
} fl_client_request;

/* The response being received; owned by the SDK. The transport reports what arrives with
 * the three functions below, in any order and in as many pieces as it likes. */
typedef struct fl_client_response fl_client_response;

/* Records the HTTP status (100..599). Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_client_response_set_status(fl_client_response *resp, int status);

/* Records one response header (name and value without CR/LF; lengths in bytes). The SDK
 * keeps only the headers it uses. Returns FL_OK, FL_ERR_MISUSE or FL_ERR_TOO_LARGE (a value
 * over 1 KiB). */
FL_API fl_status fl_client_response_add_header(fl_client_response *resp, const char *name,
                                               size_t name_len, const char *value,
                                               size_t value_len);

/* Appends body bytes. Returns FL_OK, FL_ERR_MISUSE, FL_ERR_TOO_LARGE (the body exceeds the
 * limit the SDK set for this request: the transport must stop and return that code from
 * recv) or FL_ERR_NOMEM. */
FL_API fl_status fl_client_response_append(fl_client_response *resp, const void *data,
                                           size_t len);

/* ---- standalone responses (for transports that wrap another transport) ----
 * A wrapper (capture, fault injection, caching) hands a response of its own to the inner
 * transport's recv, reads or changes what arrived with the getters below, and replays it
 * into the SDK's response with fl_client_response_set_status/add_header/append. Only the
 * headers the SDK uses are kept (Retry-After, Content-Type and the Flotilla-* signature
 * headers), so replaying the kept ones loses nothing the SDK would read. One thread at a
 * time per response. */

/* Creates an empty response that accepts bodies of at most limit bytes.
 *   out    receives the response (NULL on failure).
 *   alloc  NULL = libc; copied.
 * Returns FL_OK, FL_ERR_MISUSE (NULL out, incomplete allocator), FL_ERR_NOMEM. */
FL_API fl_status fl_client_response_create(fl_client_response **out, size_t limit,
                                           const fl_allocator *alloc);

/* Frees a response made by fl_client_response_create (wiping its body). NULL is a no-op.
 * Never call it on the response the SDK passes to recv. */
FL_API void fl_client_response_destroy(fl_client_response *resp);

/* Empties resp (status, kept headers, body) and sets its body limit. NULL is a no-op. */
FL_API void fl_client_response_reset(fl_client_response *resp, size_t limit);

/* The recorded HTTP status, 0 if none yet (or resp is NULL). */
FL_API int fl_client_response_status(const fl_client_response *resp);

/* The body size limit of resp: for the SDK's response, the limit it chose for the request
 * in flight (a wrapper creates its own response with the same limit). 0 for NULL. */
FL_API size_t fl_client_response_limit(const fl_client_response *resp);

/* The body received so far: *len (optional) receives its size. The pointer is owned by resp
 * and valid until the next call that changes resp; NULL when the body is empty. */
FL_API const uint8_t *fl_client_response_body(const fl_client_response *resp, size_t *len);

/* Kept header number i (0-based, in a fixed order): *name receives its canonical name and
 * *value its value (both owned by resp, valid until it changes).
 * Returns FL_OK, FL_ERR_NOT_FOUND (i past the last one; outputs set to NULL) or
 * FL_ERR_MISUSE. */
FL_API fl_status fl_client_response_header_at(const fl_client_response *resp, size_t i,
                                              const char **name, const char **value);

/* The interface between the protocol core and the network (the SDK never owns sockets).
 * Contract: at most one request is in flight per client.
 *  - send(ctx, req): starts req. FL_OK = accepted; FL_ERR_AGAIN = cannot start now, the SDK
 *    calls send again on its next step; any other code is a transport failure (FL_ERR_IO
 *    for network trouble, which the SDK retries with backoff).
 *  - recv(ctx, resp): delivers (part of) the response with the fl_client_response_*
 *    functions. FL_OK = the whole response was delivered; FL_ERR_AGAIN = not finished yet
 *    (non-blocking transports; the app's step call returns FL_ERR_AGAIN and the app calls
 *    again when the transport is ready); FL_ERR_IO / FL_ERR_TIMEOUT = the exchange failed
 *    (retried with backoff); FL_ERR_TOO_LARGE = an append was refused.
 *  - cancel(ctx) (optional): abandons the request in flight (interrupt, destroy).
 * A blocking transport simply does all the work in send or recv and never returns
 * FL_ERR_AGAIN. */
typedef struct fl_client_transport {
    size_t struct_size;                                           /* sizeof(...) */
    fl_status (*send)(void *ctx, const fl_client_request *req);   /* required */
    fl_status (*recv)(void *ctx, fl_client_response *resp);       /* required */
    void (*cancel)(void *ctx);                                    /* optional */
    void *ctx;                                                    /* passed to each */
} fl_client_transport;

/* ---- default HTTPS transport on libcurl (blocking) ---- */

typedef struct fl_client_curl fl_client_curl;

typedef struct fl_client_curl_config {
    size_t struct_size;            /* sizeof(fl_client_curl_config); set by config_init */
    const fl_allocator *allocator; /* NULL = libc; copied */
    const char *base_url;          /* "https://host[:port]" (http:// only for loopback
                                      hosts); required; copied */
    const char *pinned_public_key; /* libcurl pin, e.g. "sha256//<base64>;sha256//<...>",
                                      or NULL = no pinning; copied */
    const char *ca_file;           /* CA bundle path, NULL = system default; copied */
    uint32_t connect_timeout_ms;   /* default 10000 */
} fl_client_curl_config;

/* Fills cfg with defaults. NULL is a no-op. Thread-safe. */
FL_API void fl_client_curl_config_init(fl_client_curl_config *cfg);

/* Creates a libcurl transport. curl_global_init must have been called by the app (libcurl
 * requires it once per process before threads start); the SDK never calls it.
 * Returns FL_OK, FL_ERR_MISUSE (bad field, named in errmsg_out), FL_ERR_UNSUPPORTED (built
 * without libcurl), FL_ERR_NOMEM. */
FL_API fl_status fl_client_curl_create(fl_client_curl **out, const fl_client_curl_config *cfg,
                                       char *errmsg_out, size_t errmsg_len);

/* Frees the transport. NULL is a no-op. */
FL_API void fl_client_curl_destroy(fl_client_curl *t);

/* Fills out with the vtable of t (t must outlive every client using it; one client per
 * transport at a time). Returns FL_OK or FL_ERR_MISUSE. */
FL_API fl_status fl_client_curl_transport(fl_client_curl *t, fl_client_transport *out);

/* ==== the client ==== */

/* Device facts sent at check-in (docs/protocol.md section 3). */
typedef struct fl_client_eligibility {
    size_t struct_size;   /* sizeof(fl_client_eligibility) */
    int charging;         /* 1 if on external power */
    int unmetered;        /* 1 if on an unmetered network */
    int idle;             /* 1 if the user is not using the device */
    int battery_pct;      /* 0..100, or -1 = not reported */
} fl_client_eligibility;

typedef struct fl_client_config {
    size_t struct_size;            /* sizeof(fl_client_config); set by config_init */
    const fl_allocator *allocator; /* NULL = libc; copied */
    fl_logger logger;              /* default off */
    const char *population;        /* population name, 1-64 chars [A-Za-z0-9_.-]; required */
    const char *region;            /* 1-32 chars [A-Za-z0-9_-]; required */
    const char *platform;          /* at most 32 printable chars; default "linux" */
    uint8_t coordinator_key[FL_CLIENT_PUBLIC_KEY_BYTES]; /* pinned Ed25519 key; required */
    int has_coordinator_key;       /* must be 1: the SDK never runs without a pinned key */
    const char *client_token;      /* token from an earlier enrollment, or NULL */
    const char *enrollment_token;  /* used to enroll when client_token is NULL */
    fl_client_transport transport; /* required (see fl_client_curl_transport) */
    fl_client_store *store;        /* example store; required; must outlive the client */
    fl_client_train_fn train_fn;   /* NULL = the built-in trainer */
    void *train_user;              /* passed to train_fn */
    double momentum;               /* built-in trainer momentum (default 0.9) */
    double weight_decay;           /* built-in trainer weight decay (default 0) */
    uint64_t max_model_bytes;      /* largest model accepted, default 64 MiB (also sent as
                                      capabilities.max_model_bytes) */
    uint32_t backoff_initial_ms;   /* first failure backoff, default 1000 */
    uint32_t backoff_max_ms;       /* cap on backoff, default 3600000 */
    uint32_t request_timeout_ms;   /* per request (not long polls), default 30000 */
    uint32_t long_poll_s;          /* ?wait= of phase-result and round-status long polls,
                                      0..60 (0 = answer at once), default 30 */
    int secagg_backend;            /* fl_secagg_backend value; 0 = build default */
    uint64_t seed;                 /* 0 = OS randomness for shuffling and jitter; other
                                      values make both deterministic (tests, simulation).
                                      Quantization and DP noise always use the OS CSPRNG. */
    fl_client_clock_fn clock;      /* NULL = CLOCK_REALTIME */
    void *clock_user;              /* passed to clock */
    /* Grown at the end (device identity): a struct_size of offsetof(fl_client_config,
     * has_secagg_identity) is still accepted and means no identity. The identity lets the
     * device take part in populations that run secure aggregation in active-adversary mode
     * (task secagg.consistency_check, docs/client-sdk.md "Device identity"); without one the
     * SDK refuses those rounds (nothing is sent). All four fields are copied at create, the
     * signing key is wiped at destroy; the certificate must verify (checked at create). */
    int has_secagg_identity;       /* 1 = the four fields below are set; default 0 */
    uint8_t secagg_signing_key[FL_CLIENT_SIGNING_KEY_BYTES]; /* secret: the device's Ed25519
                                      key (fl_client_identity_keygen) */
    uint8_t secagg_device_id[FL_CLIENT_DEVICE_ID_BYTES]; /* the device id its certificate
                                      binds (not all zero; public, sent at enrollment) */
    uint8_t secagg_cert[FL_CLIENT_CERT_BYTES]; /* the device authority's Ed25519 signature
                                      over ("flotilla-secagg-cert-v2" || device id ||
                                      verification key) */
    uint8_t secagg_authority_key[FL_CLIENT_PUBLIC_KEY_BYTES]; /* the device authority's
                                      Ed25519 verification key, pinned by the app: the SDK
                                      checks every neighbour's certificate against it and
                                      never takes an authority key from the coordinator */
    /* Grown at the end (retry bound): a struct_size of offsetof(fl_client_config,
     * retry_timeout_ms) (the struct with the identity and no more) is still accepted and
     * means 0, no limit, as before the field existed. 64 bits wide so that it starts past the
     * older struct's tail padding on every ABI. */
    uint64_t retry_timeout_ms;     /* longest time an exchange that no round deadline bounds
                                      (enrollment, check-in, the task download) is retried
                                      after transient failures (network errors, closed
                                      connections, 408, 429, 5xx), counted from the start of
                                      its first failed try. A backoff that would overshoot
                                      it is cut so that the last try starts at its end
                                      (unless a Retry-After asks for later or the gap would
                                      be under backoff_initial_ms / 2); then the SDK gives
                                      up: fl_client_run returns FL_ERR_TIMEOUT, a selected
                                      round is given up, and the client checks in again
                                      after the backoff, retrying afresh (not sticky). Any
                                      answer (a 425 included) starts the window over.
                                      0 = no limit; at most 2^40; default 300000 (5 min) */
} fl_client_config;

/* Fills cfg with the documented defaults. NULL is a no-op. Thread-safe. */
FL_API void fl_client_config_init(fl_client_config *cfg);

typedef struct fl_client fl_client;

/* Creates a client. Everything in cfg is validated and copied (the store and transport
 * are borrowed). No network traffic happens here.
 *   out         receives the handle (NULL on failure).
 *   errmsg_out  optional buffer for the reason (names the bad field), errmsg_len bytes.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM. */
FL_API fl_status fl_client_create(fl_client **out, const fl_client_config *cfg,
                                  char *errmsg_out, size_t errmsg_len);

/* Cancels any request in flight, wipes secrets and frees. NULL is a no-op. */
FL_API void fl_client_destroy(fl_client *c);

/* Detail of the last failure on c (never NULL; owned by c, valid until the next call). */
FL_API const char *fl_client_errmsg(const fl_client *c);

/* Sets the eligibility facts sent at the next check-in (copied). Returns FL_OK or
 * FL_ERR_MISUSE (battery_pct out of range). */
FL_API fl_status fl_client_set_eligibility(fl_client *c, const fl_client_eligibility *e);

/* Where the client is. */
typedef enum fl_client_state {
    FL_CLIENT_STATE_IDLE = 0,        /* waiting for the next check-in time */
    FL_CLIENT_STATE_ENROLL = 1,      /* enrolling */
    FL_CLIENT_STATE_CHECKIN = 2,     /* checking in */
    FL_CLIENT_STATE_TASK = 3,        /* fetching the task config */
    FL_CLIENT_STATE_MODEL = 4,       /* fetching the model */
    FL_CLIENT_STATE_TRAIN = 5,       /* training and building the update */
    FL_CLIENT_STATE_SECAGG = 6,      /* in the secure-aggregation phases */
    FL_CLIENT_STATE_UPLOAD = 7,      /* plain update upload */
    FL_CLIENT_STATE_OUTCOME = 8,     /* waiting for the round outcome */
    FL_CLIENT_STATE_FAILED = 9       /* sticky: token revoked, region refused or key
                                        mismatch; see errmsg; destroy the client */
} fl_client_state;

/* Counters and the last outcome, for apps and tests. */
typedef struct fl_client_stats {
    size_t struct_size;          /* sizeof(fl_client_stats); set by the caller */
    fl_client_state state;       /* current state */
    uint64_t checkins;           /* check-ins sent */
    uint64_t selected;           /* times selected for a round */
    uint64_t rounds_completed;   /* rounds whose outcome was "completed" after our upload */
    uint64_t rounds_failed;      /* rounds given up (closed, aborted, verification failure) */
    uint64_t uploads;            /* updates accepted by the server */
    uint64_t transient_errors;   /* failed exchanges retried with backoff */
    uint64_t bytes_sent;         /* request bodies */
    uint64_t bytes_received;     /* response bodies */
    int64_t next_action_ms;      /* when fl_client_step wants to run next */
    int64_t round_id;            /* current or last round, 0 = none */
    int64_t model_version;       /* model version trained last, 0 = none */
    uint64_t examples_trained;   /* examples used in the last local training */
    double train_loss;           /* mean loss of the last local training */
    fl_status last_error;        /* code of the last failure the steps met (transient,
                                    round given up, retry_timeout_ms, sticky); FL_OK = none
                                    yet. Not cleared by later success; interrupts and
                                    argument errors of calls do not set it */
    /* Grown at the end: a struct_size of offsetof(fl_client_stats, retry_timeouts) is still
     * accepted and filled up to there. */
    uint64_t retry_timeouts;     /* exchanges given up after fl_client_config.retry_timeout_ms
                                    (last_error FL_ERR_TIMEOUT) */
} fl_client_stats;

/* Fills *out (out->struct_size must be set: sizeof(fl_client_stats), or the older size
 * offsetof(fl_client_stats, retry_timeouts), which gets the fields before it). Returns FL_OK
 * or FL_ERR_MISUSE. */
FL_API fl_status fl_client_stats_get(const fl_client *c, fl_client_stats *out);

/* Does the next piece of work: at most one HTTP exchange and the computation that follows
 * it (training runs inside the step after the model arrives). *next_ms (optional) receives
 * the time at which the client wants to be stepped again (<= now means at once).
 * Returns one of:
 *   FL_OK             progress made, or nothing due yet. The failures the client handles
 *                     itself return FL_OK too, each setting stats last_error and the errmsg
 *                     and logged: transient ones (network errors, closed connections, 408,
 *                     429, 5xx, a malformed answer) are retried with backoff; a round that
 *                     cannot go on (410 or another refused request, a bad signature or
 *                     hash, an oversized model or answer, failed training or secure
 *                     aggregation, its deadlines passed while retrying) is given up
 *                     (rounds_failed); an exchange no round deadline bounds that kept
 *                     failing for cfg.retry_timeout_ms is given up (retry_timeouts,
 *                     last_error FL_ERR_TIMEOUT; see docs/client-sdk.md for the backoff).
 *   FL_ERR_AGAIN      the transport's send or recv would block: call again when it is ready.
 *   FL_ERR_CANCELLED  fl_client_interrupt() was called (reported once): a request in flight
 *                     is cancelled and sent again by the next step, interrupted training
 *                     starts again; the round goes on while it is open.
 *   FL_ERR_AUTH       sticky (below): the client token was refused (401 at check-in or on a
 *                     round request: enroll again), or enrollment was refused (400, 401,
 *                     404: e.g. a bad enrollment token, an unknown population, a refused
 *                     field; the errmsg has the coordinator's reason).
 *   FL_ERR_STATE      sticky: the region is refused (403 region_not_allowed), or enrollment
 *                     was refused with 403 or 409 (e.g. the device identity's certificate,
 *                     or a device id already enrolled).
 *   FL_ERR_CRYPTO     sticky: the enrollment answer names another coordinator key id than
 *                     the pinned key's.
 *   FL_ERR_PROTOCOL   sticky: the enrollment answer is for another population or protocol.
 *                     (A malformed or unexpected answer is otherwise transient: FL_OK.)
 *   FL_ERR_INTERNAL   the request could not be built (a bug; not sticky).
 *   FL_ERR_MISUSE     c is NULL.
 * Sticky: the client is in FL_CLIENT_STATE_FAILED, its round dropped, and every later step
 * returns the same code at once (after reporting a pending interrupt); the errmsg carries
 * the reason (the coordinator's, where it gave one); destroy the client. */
FL_API fl_status fl_client_step(fl_client *c, int64_t *next_ms);

/* Convenience loop for blocking transports: steps, sleeping between steps (in slices of
 * at most 50 ms, so that an interrupt is noticed), until one of the ends below. Transient
 * failures and their retries happen inside, as in fl_client_step.
 * Returns one of:
 *   FL_OK             a round the client took part in ended during this call, completed or
 *                     given up: see stats rounds_completed, rounds_failed and last_error.
 *   FL_ERR_AGAIN      the next step is due later than max_wait_ms from now; nothing is
 *                     wrong. (A transport's FL_ERR_AGAIN is not returned: the loop tries
 *                     the transport again after 1 ms.)
 *   FL_ERR_TIMEOUT    an exchange no round deadline bounds (enrollment, check-in, the task
 *                     download) kept failing for cfg.retry_timeout_ms during this call and
 *                     was given up, with the round it had selected if any (this code then
 *                     wins over FL_OK); fl_client_errmsg says what failed. Not sticky:
 *                     the client is idle and a later call checks in again after the
 *                     backoff.
 *   FL_ERR_CANCELLED  interrupted (fl_client_interrupt(), also by fl_client_worker_stop()).
 *   FL_ERR_AUTH, FL_ERR_STATE, FL_ERR_CRYPTO, FL_ERR_PROTOCOL
 *                     sticky, as in fl_client_step (returned at once by every later call).
 *   FL_ERR_INTERNAL   as in fl_client_step.
 *   FL_ERR_MISUSE     c is NULL. */
FL_API fl_status fl_client_run(fl_client *c, uint32_t max_wait_ms);

/* Asks a running fl_client_step/fl_client_run to stop at the next safe point (checked
 * between exchanges, between training batches and in sleeps) and return FL_ERR_CANCELLED.
 * The request stays pending until it is delivered once. Safe from any thread and from
 * signal handlers. NULL is a no-op. */
FL_API void fl_client_interrupt(fl_client *c);

/* Copies the client token (after enrollment) into buf as a NUL-terminated string for the
 * app to keep in secure storage. Returns FL_OK, FL_ERR_NOT_FOUND (not enrolled yet),
 * FL_ERR_TOO_LARGE (buf smaller than the token + 1), FL_ERR_MISUSE. */
FL_API fl_status fl_client_token(const fl_client *c, char *buf, size_t len);

/* Optional worker thread: runs fl_client_run in a loop until fl_client_worker_stop (or a
 * sticky failure; FL_ERR_TIMEOUT does not stop it: see stats retry_timeouts). While it
 * runs, only fl_client_interrupt, fl_client_worker_stop, fl_client_stats_get (which takes
 * a snapshot under a lock) and this function may be called on c. Returns FL_OK,
 * FL_ERR_STATE (already running; the handle's error message is the worker's and is left
 * alone), FL_ERR_UNSUPPORTED (no threads in this build), FL_ERR_NOMEM. */
FL_API fl_status fl_client_worker_start(fl_client *c);

/* Stops and joins the worker (interrupting it). No-op when none runs. */
FL_API void fl_client_worker_stop(fl_client *c);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_CLIENT_H */
