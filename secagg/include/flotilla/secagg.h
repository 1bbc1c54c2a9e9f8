#ifndef FLOTILLA_SECAGG_H
#define FLOTILLA_SECAGG_H

/* Flotilla secagg: secure aggregation of integer vectors (Bonawitz et al., CCS 2017) over the
 * sparse k-regular communication graph of SecAgg+ (Bell et al., CCS 2020).
 *
 * The server learns only the sum mod 2^b of the inputs of the clients that completed the
 * masked-input phase, even if clients drop out at any phase. Client and server are state
 * machines fed with byte buffers; they open no sockets, read no clocks and start no threads.
 * Protocol, wire format and parameter choices are described in docs/secagg.md.
 *
 * Thread-safety: every handle may be used by one thread at a time; distinct handles are
 * independent. The one exception: distinct jobs of fl_secagg_server_unmask_run may run at
 * the same time on the caller's threads. The free functions (config, params,
 * quantization) are thread-safe. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sizes and limits (each has a getter below, tested equal) ---- */

#define FL_SECAGG_SEED_BYTES 32         /* graph seed chosen by the server */
#define FL_SECAGG_VERIFY_KEY_BYTES 32   /* Ed25519 public key (authority or client) */
#define FL_SECAGG_SIGNING_KEY_BYTES 64  /* Ed25519 secret key, seed || public key */
#define FL_SECAGG_CERT_BYTES 64         /* authority signature over a client's signing key */
#define FL_SECAGG_HEADER_BYTES 20       /* fixed header of every wire message */
#define FL_SECAGG_MAX_BITS 32           /* inputs live in Z_{2^b}, 1 <= b <= 32 */
#define FL_SECAGG_MAX_CLIENTS 65536     /* upper bound on n */
#define FL_SECAGG_MAX_DIM 268435456u    /* upper bound on d (2^28 elements) */
#define FL_SECAGG_MAX_EDGES 4194304u    /* upper bound on n * k (graph edges, both directions) */
#define FL_SECAGG_CONTEXT_BYTES 32      /* round context bound into keys and shares */
#define FL_SECAGG_DEVICE_ID_BYTES 32    /* stable device identity in device certificates */

FL_API size_t fl_secagg_seed_bytes(void);
FL_API size_t fl_secagg_verify_key_bytes(void);
FL_API size_t fl_secagg_signing_key_bytes(void);
FL_API size_t fl_secagg_cert_bytes(void);
FL_API size_t fl_secagg_header_bytes(void);
FL_API size_t fl_secagg_max_bits(void);
FL_API size_t fl_secagg_max_clients(void);
FL_API size_t fl_secagg_max_dim(void);
FL_API size_t fl_secagg_max_edges(void);
FL_API size_t fl_secagg_context_bytes(void);
FL_API size_t fl_secagg_device_id_bytes(void);

/* ---- configuration ---- */

/* Crypto backend. Both produce byte-identical messages for the same randomness and
 * interoperate: clients on one backend can run against a server on the other. */
typedef enum fl_secagg_backend {
    FL_SECAGG_BACKEND_DEFAULT = 0, /* the build's FL_CRYPTO_BACKEND choice */
    FL_SECAGG_BACKEND_SODIUM = 1,  /* libsodium + OpenSSL */
    FL_SECAGG_BACKEND_MBEDTLS = 2  /* mbedTLS alone (FL_ERR_UNSUPPORTED if not built) */
} fl_secagg_backend;

/* Shared by client and server; both sides must use the same values (the server's
 * key-distribution message repeats n, k, t, b, d and the mode, and a client rejects a
 * mismatch). Fill with fl_secagg_config_init(), then set at least num_clients and dim. */
typedef struct fl_secagg_config {
    size_t struct_size;        /* sizeof(fl_secagg_config); set by config_init */
    uint32_t num_clients;      /* n: clients selected for the round, 3..FL_SECAGG_MAX_CLIENTS */
    uint32_t dim;              /* d: elements per input vector, 1..FL_SECAGG_MAX_DIM */
    uint32_t bits;             /* b: inputs and sum are mod 2^b, 1..32 (default 32) */
    uint32_t degree;           /* k: neighbours per client; 0 = derive (default); n-1 = the
                                  complete graph (original protocol); else even, 2..n-2 */
    uint32_t threshold;        /* t: Shamir threshold; 0 = derive (default); else 1..k */
    double adversarial_rate;   /* fraction of clients colluding with the server, for the
                                  (k, t) derivation (default 0.05) */
    double dropout_rate;       /* fraction of clients expected to drop, for the (k, t)
                                  derivation (default 0.05) */
    int active;                /* 0 = semi-honest server (default); 1 = active adversary:
                                  signed advertisements + consistency-check phase */
    uint8_t verify_key[FL_SECAGG_VERIFY_KEY_BYTES]; /* active mode: pinned Ed25519 key of
                                  the authority that certifies client signing keys */
    fl_secagg_backend backend; /* crypto backend (default FL_SECAGG_BACKEND_DEFAULT) */
    fl_logger logger;          /* optional log callback (default off) */
    /* Added in 0.2 (a struct_size of offsetof(fl_secagg_config, context) is still accepted
     * and means an all-zero context). */
    uint8_t context[FL_SECAGG_CONTEXT_BYTES]; /* what every party of the round must agree on
                                  beyond the round id, e.g. a hash of the session and of the
                                  model the client trained on (docs/secagg.md "Context").
                                  Bound into the share-encryption key, the shares' associated
                                  data and (active mode) the signed advertisement: clients
                                  with different contexts cannot open each other's shares, and
                                  a client that receives such a share fails (FL_ERR_CRYPTO,
                                  sticky) before it sends its masked input. In active mode the
                                  server needs the same value (it checks advertisements); in
                                  semi-honest mode it does not use it. All zero (default) = no
                                  context: the derivations without it. */
    /* Added in 0.3: norm-bounded inputs (docs/secagg.md "Norm proofs"); a struct_size of
     * offsetof(fl_secagg_config, norm_bits) is still accepted and means off. Each client
     * proves in zero knowledge that its input, read as centred values z_j in
     * [-2^(b-1), 2^(b-1)), has every z_j in [-2^(m-1), 2^(m-1)) and sum_{j < norm_dim} z_j^2
     * <= norm_bound2; the server refuses a masked input whose proof fails and, after
     * unmasking, fails the round (FL_ERR_PROTOCOL) unless the sum is the sum of proven
     * inputs, so one client moves the first norm_dim coordinates of the sum by at most
     * sqrt(norm_bound2) in L2 and the others by their range. Costs grow with d * m
     * (docs/secagg.md); libsodium builds only. */
    uint32_t norm_bits;       /* m: 0 = off (default); else 2..b - ceil(log2 n) */
    uint32_t norm_dim;        /* the first norm_dim inputs are in the L2 bound (0..d) */
    uint64_t norm_bound2;     /* bound on their sum of squares */
    uint32_t norm_tail_max;   /* 0 = the other inputs (j >= norm_dim) have the m-bit range
                                 too; else each must lie in [1, norm_tail_max] (a weight),
                                 with norm_tail_max * n < 2^(b-1) */
    /* Added in 0.4: device-bound certificates (docs/secagg.md "Active mode"); a struct_size
     * of offsetof(fl_secagg_config, device_certs) is still accepted and means 0. */
    int device_certs;         /* active mode: 1 = certificates bind a device id
                                 (fl_secagg_cert_issue_device), 0 = the client index (v1,
                                 default); 1 requires active = 1 */
    /* Added in 0.5: revealed pairwise seeds (docs/secagg.md "Revealed pairwise seeds"); a
     * struct_size of offsetof(fl_secagg_config, reveal_pair_seeds) is still accepted and
     * means 0. With 1, a client's unmask answer also carries, for each neighbour that
     * dropped before the masked inputs, the mask seed the two of them shared, so the server
     * removes those masks without rebuilding the dropped client's key or doing one X25519
     * agreement per (dropped, surviving) pair; it rebuilds the key only where a survivor
     * did not answer. The server learns nothing it would not learn from the rebuilt key
     * (in active mode too: seeds are revealed only for the signed survivor set's complement).
     * The seeds cannot be checked, so a lying client could spoil the sum: allowed only
     * where a client's input is not bounded anyway (norm_bits = 0). Every party of the
     * round must use the same value (the KEYS message carries it). */
    int reveal_pair_seeds;    /* 0 = off (default), 1 = on; needs norm_bits = 0 */
} fl_secagg_config;

/* Fills cfg with the documented defaults (num_clients and dim are 0 = unset). cfg NULL is
 * a no-op. */
FL_API void fl_secagg_config_init(fl_secagg_config *cfg);

/* Validates cfg and replaces degree/threshold 0 by the derived values (in place).
 * Returns FL_OK, FL_ERR_MISUSE with a message naming the field (errmsg may be NULL; if not,
 * it receives up to errmsg_len bytes, NUL-terminated), or FL_ERR_UNSUPPORTED when the
 * chosen backend is not built (every built backend has Ed25519, so active mode is
 * available on each). */
FL_API fl_status fl_secagg_config_resolve(fl_secagg_config *cfg, char *errmsg,
                                          size_t errmsg_len);

/* Derives the graph degree k and threshold t for n clients as Bell et al. (CCS 2020)
 * prescribe: the smallest even k for which a random Harary graph stays connected after
 * removing adversarial and dropped clients except with probability 2^-41 per bad event,
 * and a t between the adversarial-neighbour and surviving-neighbour quantiles, with 40 bits
 * of security and 20 bits of correctness. active selects the semi-malicious bound
 * (2t > k + corrupt neighbours). When no sparse k exists (small n), returns the complete
 * graph k = n - 1 with the full-graph threshold. Outputs first. FL_ERR_MISUSE on n < 2 or
 * rates outside [0, 1); FL_ERR_RANGE when no parameters satisfy the bounds. */
FL_API fl_status fl_secagg_params_derive(uint32_t *degree, uint32_t *threshold,
                                         uint32_t num_clients, double adversarial_rate,
                                         double dropout_rate, int active);

/* Largest message either side may send or accept for a resolved config (the transport can
 * use it as its limit); 0 if cfg is not valid. */
FL_API size_t fl_secagg_max_message_bytes(const fl_secagg_config *cfg);

/* ---- phases and message inspection ---- */

typedef enum fl_secagg_phase {
    FL_SECAGG_PHASE_ADVERTISE = 0,    /* round 0: clients advertise public keys */
    FL_SECAGG_PHASE_SHARE_KEYS = 1,   /* round 1: encrypted Shamir shares to neighbours */
    FL_SECAGG_PHASE_MASKED_INPUT = 2, /* round 2: masked input vectors */
    FL_SECAGG_PHASE_CONSISTENCY = 3,  /* round 3 (active only): signatures on survivor set */
    FL_SECAGG_PHASE_UNMASK = 4,       /* round 4: shares for self masks / dropped keys */
    FL_SECAGG_PHASE_DONE = 5,         /* finished: server has the sum, client is done */
    FL_SECAGG_PHASE_FAILED = 6        /* sticky failure (abort or protocol/crypto error) */
} fl_secagg_phase;

/* Message types on the wire (header byte 3). */
typedef enum fl_secagg_msg_type {
    FL_SECAGG_MSG_ADVERTISE = 1,      /* client -> server: public keys */
    FL_SECAGG_MSG_KEYS = 2,           /* server -> client: round params + neighbours' keys */
    FL_SECAGG_MSG_SHARES = 3,         /* client -> server: encrypted shares per neighbour */
    FL_SECAGG_MSG_CIPHERTEXTS = 4,    /* server -> client: shares addressed to it */
    FL_SECAGG_MSG_MASKED_INPUT = 5,   /* client -> server: masked vector */
    FL_SECAGG_MSG_CONSISTENCY_REQ = 6,/* server -> client: survivor set to sign */
    FL_SECAGG_MSG_CONSISTENCY_SIG = 7,/* client -> server: signature on the survivor set */
    FL_SECAGG_MSG_UNMASK_REQ = 8,     /* server -> client: survivor set (+ signatures) */
    FL_SECAGG_MSG_UNMASK_SHARES = 9   /* client -> server: decrypted shares */
} fl_secagg_msg_type;

/* Reads the fixed header of msg without validating the body: type, round id and client
 * index (the sender for client messages, the recipient for server messages). Outputs may be
 * NULL. FL_ERR_FORMAT on a short buffer, bad magic or version, or an unknown type. */
FL_API fl_status fl_secagg_message_peek(fl_secagg_msg_type *type, uint64_t *round_id,
                                        uint32_t *client, const uint8_t *msg, size_t len);

/* ---- active mode: identities ----
 * In active mode every client holds an Ed25519 signing key certified by an authority, and
 * every client pins the authority's verification key (cfg.verify_key). Two certificate
 * kinds exist:
 *  - v1 (cfg.device_certs = 0): the authority's signature over ("flotilla-secagg-cert-v1" ||
 *    u32 LE client index || client verification key). The index is assigned per round, so
 *    the authority must be online and per-round (in practice the coordinator itself, which
 *    could then certify clients of its own making).
 *  - v2 (cfg.device_certs = 1): the signature over ("flotilla-secagg-cert-v2" || device_id
 *    || client verification key). It binds a stable device identity, so it is issued once,
 *    offline, by an authority that must not be the coordinator for the guarantee to hold.
 *    The device id travels in the ADVERTISE and in KEYS; the server checks the certificate,
 *    and so does every neighbour, which also refuses a KEYS message listing one device id
 *    twice or its own (fl_secagg_server_device_id lets the coordinator check the mapping of
 *    round indices to devices). */

typedef struct fl_secagg_identity {
    size_t struct_size;                                 /* sizeof(fl_secagg_identity), or
                                                           offsetof(..., device_id) for a
                                                           caller built before device ids
                                                           (then v1 certificates only) */
    uint8_t signing_key[FL_SECAGG_SIGNING_KEY_BYTES];  /* client's Ed25519 secret key */
    uint8_t cert[FL_SECAGG_CERT_BYTES];                 /* authority's certificate */
    /* Added in 0.4. */
    uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES];       /* device-certificate mode: the id
                                                           the certificate binds (public; not
                                                           all zero) */
} fl_secagg_identity;

/* Generates a fresh Ed25519 key pair with the backend's CSPRNG (authority or client key).
 * Outputs first. FL_ERR_MISUSE on NULL, FL_ERR_UNSUPPORTED if the backend is not built,
 * FL_ERR_CRYPTO on a backend failure (signing_key is then zeroed). */
FL_API fl_status fl_secagg_signing_keygen(uint8_t verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                                          uint8_t signing_key[FL_SECAGG_SIGNING_KEY_BYTES],
                                          fl_secagg_backend backend);

/* Authority side: certifies client_verify_key for client_index (v1 certificate, for
 * cfg.device_certs = 0). Returns the same codes as fl_secagg_signing_keygen. */
FL_API fl_status fl_secagg_cert_issue(uint8_t cert[FL_SECAGG_CERT_BYTES],
                                      const uint8_t authority_key[FL_SECAGG_SIGNING_KEY_BYTES],
                                      uint32_t client_index,
                                      const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES],
                                      fl_secagg_backend backend);

/* Authority side: certifies client_verify_key for the device device_id (v2 certificate, for
 * cfg.device_certs = 1): the authority's Ed25519 signature over ("flotilla-secagg-cert-v2"
 * || device_id || client_verify_key). Meant to be issued once per device key, offline, by
 * an authority other than the coordinator. Outputs first; all inputs are public except
 * authority_key. FL_ERR_MISUSE on NULL or an all-zero device_id, FL_ERR_UNSUPPORTED if the
 * backend is not built, FL_ERR_CRYPTO on a backend failure (cert is then zeroed). */
FL_API fl_status fl_secagg_cert_issue_device(
    uint8_t cert[FL_SECAGG_CERT_BYTES],
    const uint8_t authority_key[FL_SECAGG_SIGNING_KEY_BYTES],
    const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
    const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES], fl_secagg_backend backend);

/* Checks a v2 (device) certificate outside a round: FL_OK when cert is authority_vk's
 * Ed25519 signature over ("flotilla-secagg-cert-v2" || device_id || client_verify_key), the
 * statement fl_secagg_cert_issue_device signs and every round participant checks. Lets a
 * coordinator refuse a device at enrollment rather than in a round. All inputs are public;
 * nothing is written. Thread-safe. Returns FL_OK; FL_ERR_CRYPTO (the certificate does not
 * verify: no detail, no oracle); FL_ERR_MISUSE on NULL or an all-zero device_id (never a
 * device); FL_ERR_UNSUPPORTED if the backend is not built. */
FL_API fl_status fl_secagg_cert_check_device(
    const uint8_t cert[FL_SECAGG_CERT_BYTES],
    const uint8_t authority_vk[FL_SECAGG_VERIFY_KEY_BYTES],
    const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
    const uint8_t client_verify_key[FL_SECAGG_VERIFY_KEY_BYTES], fl_secagg_backend backend);

/* ---- server ---- */

typedef struct fl_secagg_server fl_secagg_server;

/* Creates the server for one round and opens the advertise phase. cfg is copied (degree
 * and threshold resolved); round_id must be unique per round (every message carries it);
 * graph_seed (FL_SECAGG_SEED_BYTES) selects the public random graph, NULL = fresh random.
 * alloc NULL = libc; it is copied and must outlive the handle. Memory: O(d + n*k), never
 * O(n*d). Returns FL_OK, FL_ERR_MISUSE (bad config; fl_secagg_config_resolve names the
 * field), FL_ERR_UNSUPPORTED or FL_ERR_NOMEM. *out is NULL on failure. */
FL_API fl_status fl_secagg_server_create(fl_secagg_server **out, const fl_secagg_config *cfg,
                                         uint64_t round_id, const uint8_t *graph_seed,
                                         const fl_allocator *alloc);

/* Wipes and frees everything; NULL is a no-op. */
FL_API void fl_secagg_server_destroy(fl_secagg_server *srv);

/* Current phase of the server. */
FL_API fl_secagg_phase fl_secagg_server_phase(const fl_secagg_server *srv);

/* Feeds one message from client `from` (the transport's authenticated sender). Masked
 * inputs are folded into the accumulator here and not kept. On any error the server state
 * is unchanged and the round continues without that message: FL_ERR_FORMAT (malformed,
 * truncated, trailing bytes), FL_ERR_TOO_LARGE (over the per-type limit), FL_ERR_STATE
 * (wrong round id, or a message of another phase), FL_ERR_EXISTS (second message from the
 * client in this phase), FL_ERR_PROTOCOL (sender mismatch, a client outside the current
 * set, inconsistent content), FL_ERR_CRYPTO (bad signature), FL_ERR_ABORTED if the round
 * already failed, FL_ERR_NOMEM. FL_ERR_STATE also once fl_secagg_server_unmask_begin has
 * succeeded (the shares are being used). */
FL_API fl_status fl_secagg_server_receive(fl_secagg_server *srv, uint32_t from,
                                          const uint8_t *msg, size_t len);

/* ---- norm proofs: checking a masked input off the server's thread ----
 * fl_secagg_server_receive checks a MASKED_INPUT's norm proof itself, which costs about
 * 0.3 ms per proven bit here (about d * norm_bits of them; docs/secagg.md). A transport that
 * serialises calls on the server (a lock) can check the proof first, on any thread, with
 * fl_secagg_norm_check, then hand the message and the ticket to
 * fl_secagg_server_receive_checked under its lock, which then only hashes the message. A
 * ticket is trusted as the caller's own statement: it binds the message, round, sender and
 * the config's norm parameters, not a secret. */

typedef struct fl_secagg_norm_ticket {
    uint8_t digest[32]; /* SHA-256 binding the message, round, sender and norm parameters */
    uint64_t round_id;  /* the round and client it was checked for */
    uint32_t client;
    uint32_t valid;     /* 1 once the proof verified */
} fl_secagg_norm_ticket;

/* Checks the header, length and norm proof of client `from`'s MASKED_INPUT message for a
 * round with config cfg (thread-safe, touches no server; work memory through alloc, NULL =
 * libc). *ticket is zeroed, then filled on FL_OK. Returns FL_OK; FL_ERR_MISUSE (NULL, bad
 * config, or a config without norm proofs);
 * FL_ERR_FORMAT / FL_ERR_TOO_LARGE / FL_ERR_STATE / FL_ERR_PROTOCOL (the message is not that
 * client's masked input for that round); FL_ERR_CRYPTO (the proof does not verify);
 * FL_ERR_NOMEM. errmsg as in fl_secagg_config_resolve. */
FL_API fl_status fl_secagg_norm_check(fl_secagg_norm_ticket *ticket,
                                      const fl_secagg_config *cfg, uint64_t round_id,
                                      uint32_t from, const uint8_t *msg, size_t len,
                                      const fl_allocator *alloc, char *errmsg,
                                      size_t errmsg_len);

/* fl_secagg_server_receive, except that a MASKED_INPUT whose bytes, round, sender and norm
 * parameters match a valid ticket is not checked again. With a ticket that does not match,
 * the proof is checked here. FL_ERR_MISUSE on a NULL argument; otherwise as
 * fl_secagg_server_receive. */
FL_API fl_status fl_secagg_server_receive_checked(fl_secagg_server *srv, uint32_t from,
                                                  const uint8_t *msg, size_t len,
                                                  const fl_secagg_norm_ticket *ticket);

/* Number of clients the current phase still waits for (0 = every expected client has
 * answered and the coordinator may advance without waiting for a deadline). */
FL_API uint32_t fl_secagg_server_pending(const fl_secagg_server *srv);

/* Closes the current phase: clients that did not answer are dropped. Prepares the outgoing
 * per-client messages of the next phase, or after the unmask phase reconstructs and removes
 * the masks. Returns FL_OK, FL_ERR_ABORTED (too few survivors to continue or reconstruct;
 * sticky, the message says how many were needed), FL_ERR_PROTOCOL (reconstructed keys do
 * not match the advertised ones: a client sent bad shares; sticky), FL_ERR_STATE (round
 * already done), FL_ERR_NOMEM (not sticky: retry). The final advance runs on the calling
 * thread; fl_secagg_server_unmask_begin/run/next below do the same work on the caller's
 * threads. FL_ERR_MISUSE (nothing changes) while such an unmask is in progress. */
FL_API fl_status fl_secagg_server_advance(fl_secagg_server *srv);

/* Whether fl_secagg_server_advance, called now, would go on to the next phase rather than
 * abort for too few survivors (or too few shares at unmasking), judged on the messages
 * received so far: FL_OK, FL_ERR_ABORTED (it would abort), FL_ERR_STATE (round done or
 * failed, or unmasking begun), FL_ERR_NOMEM, FL_ERR_MISUSE (NULL). Changes nothing, the
 * error message included. A caller may close a phase before its deadline when this says
 * it can (the coordinator's selection.target_grace_s). Ask again right before: a later
 * message can turn the answer (rarely to FL_ERR_ABORTED: a masked input from the first
 * surviving neighbour of a client that dropped makes its key needed). A primitive failing
 * during the advance is not foreseen. */
FL_API fl_status fl_secagg_server_would_advance(const fl_secagg_server *srv);

/* ---- server: the final advance on the caller's threads ----
 * The last advance (phase UNMASK -> DONE) is the expensive one: it rebuilds the secrets of
 * the survivors and of the dropped clients, derives one pairwise seed per (dropped client,
 * surviving neighbour) with an X25519 agreement, and expands and removes every mask over
 * the d-length sum. These calls split that work into independent jobs that the caller may
 * run on threads of its own (the library still starts none):
 *
 *     size_t njobs;
 *     fl_status st = fl_secagg_server_unmask_begin(srv, nthreads, &njobs);
 *     while (st == FL_OK && njobs > 0) {
 *         // run fl_secagg_server_unmask_run(srv, j) once for each j < njobs, in any order,
 *         // on any threads, and wait until all have returned
 *         st = fl_secagg_server_unmask_next(srv, &njobs);
 *     }
 *
 * There are two batches: the secrets (split by client, balanced by cost), then the mask
 * removal (split into disjoint slices of the sum). The result is the same as
 * fl_secagg_server_advance's, which runs the same jobs one after the other. */

/* Starts the final advance in phase UNMASK and hands out the first batch: *njobs jobs,
 * numbered 0..*njobs-1, 1 <= *njobs <= max_jobs (and at most 64; each job can use ~256 KiB
 * of work memory, allocated here through the server's allocator). No further message is
 * accepted once it succeeds. Returns FL_OK; FL_ERR_MISUSE (NULL argument, max_jobs == 0, or
 * an unmask already begun); FL_ERR_STATE (a phase other than UNMASK; DONE included);
 * FL_ERR_ABORTED (a secret has fewer than t shares; sticky, as advance); FL_ERR_NOMEM (not
 * sticky: nothing changed, retry); the sticky code if the round already failed. On
 * failure *njobs is 0 (when njobs is not NULL). */
FL_API fl_status fl_secagg_server_unmask_begin(fl_secagg_server *srv, uint32_t max_jobs,
                                               size_t *njobs);

/* Runs job `job` of the current batch. Thread-safety: distinct jobs of one batch may run
 * at the same time on different threads; no other call on srv may overlap them (begin and
 * next included). Each job runs once: FL_ERR_MISUSE if job >= *njobs, if it already ran
 * (or is running), or if no unmask was begun; a refused call changes nothing. Never
 * touches errmsg (other jobs may be running): a failing job returns its code
 * (FL_ERR_PROTOCOL: rebuilt secret does not match, or shares do not combine;
 * FL_ERR_CRYPTO: a primitive failed), and the next fl_secagg_server_unmask_next fails the
 * round with it and sets the message. */
FL_API fl_status fl_secagg_server_unmask_run(fl_secagg_server *srv, size_t job);

/* Closes the current batch once every job of it has returned, and hands out the next:
 * *njobs > 0 jobs to run, or *njobs == 0 when the round is DONE (the sum is ready). If a
 * job failed, the round fails (sticky) with the code and message of the lowest-numbered
 * failed job, the same as fl_secagg_server_advance gives for that failure, and the work
 * memory is wiped and freed; later calls return that sticky code. FL_ERR_MISUSE (nothing
 * changes, *njobs untouched; run the missing jobs and call again) if a job of the batch has
 * not returned, or no unmask was begun (njobs NULL: likewise). */
FL_API fl_status fl_secagg_server_unmask_next(fl_secagg_server *srv, size_t *njobs);

/* Outgoing message for client `to` in the current phase. *msg is owned by the server and
 * valid until the next advance or destroy. FL_ERR_NOT_FOUND if the client has no message
 * (it dropped, or the phase has no server message), FL_ERR_MISUSE on bad arguments. */
FL_API fl_status fl_secagg_server_outgoing(const fl_secagg_server *srv, uint32_t to,
                                           const uint8_t **msg, size_t *len);

/* The result once the phase is DONE: *sum (d values mod 2^b, owned by the server, valid
 * until destroy), *dim = d, *count = number of clients whose inputs are in the sum. Any
 * output may be NULL. FL_ERR_STATE before DONE. */
FL_API fl_status fl_secagg_server_result(const fl_secagg_server *srv, const uint32_t **sum,
                                         size_t *dim, uint32_t *count);

/* Effective degree k and threshold t of the round (outputs may be NULL). */
FL_API void fl_secagg_server_params(const fl_secagg_server *srv, uint32_t *degree,
                                    uint32_t *threshold);

/* Device-certificate mode: copies into out the device id that client `index` advertised
 * (its certificate over it was verified when the ADVERTISE was accepted), so that the
 * coordinator can check that index is the device it assigned. Public data. Returns FL_OK;
 * FL_ERR_MISUSE (NULL argument, index >= n, or a round without cfg.device_certs);
 * FL_ERR_STATE (no ADVERTISE accepted from that client). Does not touch errmsg. */
FL_API fl_status fl_secagg_server_device_id(const fl_secagg_server *srv, uint32_t index,
                                            uint8_t out[FL_SECAGG_DEVICE_ID_BYTES]);

/* Detail of the last failure on srv (never NULL; valid until the next call on srv). */
FL_API const char *fl_secagg_server_errmsg(const fl_secagg_server *srv);

/* ---- client ---- */

typedef struct fl_secagg_client fl_secagg_client;

/* Creates client `index` (0..n-1, as assigned by the coordinator) for round round_id. cfg
 * is copied and resolved. id is required in active mode (copied and wiped at destroy) and
 * ignored otherwise; with cfg.device_certs it must have the device_id field (struct_size
 * = sizeof(fl_secagg_identity)) set to a non-zero id. alloc NULL = libc. Returns FL_OK,
 * FL_ERR_MISUSE, FL_ERR_UNSUPPORTED or FL_ERR_NOMEM. */
FL_API fl_status fl_secagg_client_create(fl_secagg_client **out, const fl_secagg_config *cfg,
                                         uint64_t round_id, uint32_t index,
                                         const fl_secagg_identity *id,
                                         const fl_allocator *alloc);

/* Wipes all secrets and frees; NULL is a no-op. */
FL_API void fl_secagg_client_destroy(fl_secagg_client *cli);

/* Sets the input vector (d values, each < 2^b; copied, wiped at destroy). May be called any
 * time before the CIPHERTEXTS message is handled. FL_ERR_MISUSE (wrong length or phase),
 * FL_ERR_RANGE (a value >= 2^b), FL_ERR_NOMEM. */
FL_API fl_status fl_secagg_client_set_input(fl_secagg_client *cli, const uint32_t *x,
                                            size_t dim);

/* Generates the round's key pairs and returns the ADVERTISE message in *out (owned by the
 * client, valid until the next call on cli). FL_ERR_STATE if already started, FL_ERR_CRYPTO
 * (sticky), FL_ERR_NOMEM. */
FL_API fl_status fl_secagg_client_start(fl_secagg_client *cli, const uint8_t **out,
                                        size_t *out_len);

/* Handles one server message and returns the client's reply in *out (owned by the client,
 * valid until the next call on cli). A message that fails to parse (FL_ERR_FORMAT,
 * FL_ERR_TOO_LARGE), belongs to another round or phase (FL_ERR_STATE) or is addressed to
 * another client (FL_ERR_PROTOCOL) is rejected with no state change. Protocol violations
 * in well-formed messages (parameter mismatch, neighbours outside the graph, fewer than t
 * neighbours left, a server asking for both shares of a peer, a survivor set that differs
 * from the signed one) fail the client stickily with FL_ERR_PROTOCOL; bad ciphertexts or
 * signatures with FL_ERR_CRYPTO. FL_ERR_MISUSE (not sticky) if the input is needed but
 * not set. After the UNMASK_REQ reply the phase is DONE. */
FL_API fl_status fl_secagg_client_handle(fl_secagg_client *cli, const uint8_t *msg,
                                         size_t len, const uint8_t **out, size_t *out_len);

/* Current phase of the client (the phase whose server message it waits for). */
FL_API fl_secagg_phase fl_secagg_client_phase(const fl_secagg_client *cli);

/* Detail of the last failure on cli (never NULL; valid until the next call on cli). */
FL_API const char *fl_secagg_client_errmsg(const fl_secagg_client *cli);

/* ---- quantization helpers (float updates -> Z_{2^b}) ----
 * Each client maps x in [-clip, clip] to an integer in [0, levels] by
 *   q = stochastic_round((clamp(x) + clip) * levels / (2 * clip)),
 * and levels = floor((2^b - 1) / max_summands), so the sum of up to max_summands inputs
 * never wraps mod 2^b (the headroom is ceil(log2(max_summands)) bits). The decoded sum is
 *   sum_float = S * 2 * clip / levels - count * clip, with count the number of summands. */

typedef struct fl_secagg_quant {
    float clip;            /* inputs are clamped to [-clip, clip], clip > 0 */
    uint32_t bits;         /* b of the secagg round */
    uint32_t max_summands; /* n: most inputs that will be summed */
    uint32_t levels;       /* per-input integer range [0, levels]; derived */
} fl_secagg_quant;

/* Fills q. FL_ERR_MISUSE on NULL, clip not finite or <= 0, bits outside 1..32 or
 * max_summands == 0; FL_ERR_RANGE if 2^b - 1 < max_summands (no level left). */
FL_API fl_status fl_secagg_quant_init(fl_secagg_quant *q, float clip, uint32_t bits,
                                      uint32_t max_summands);

/* Bits of headroom needed so that n values of b - headroom bits sum without wrapping:
 * ceil(log2(n)); 0 for n <= 1. */
FL_API uint32_t fl_secagg_headroom_bits(uint32_t n);

/* Quantizes d floats with stochastic rounding whose randomness comes from the backend's
 * CSPRNG (expanded with the mask PRG). NaN inputs give FL_ERR_RANGE with out wiped;
 * infinities are clamped. FL_ERR_MISUSE on NULL or a bad q, FL_ERR_CRYPTO on RNG failure. */
FL_API fl_status fl_secagg_quantize(uint32_t *out, const float *in, size_t dim,
                                    const fl_secagg_quant *q, fl_secagg_backend backend);

/* Decodes a sum of `count` quantized inputs (count <= q->max_summands) back to floats.
 * FL_ERR_MISUSE on NULL, a bad q or count out of range. */
FL_API fl_status fl_secagg_dequantize_sum(float *out, const uint32_t *sum, size_t dim,
                                          uint32_t count, const fl_secagg_quant *q);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_SECAGG_H */
