#ifndef FLOTILLA_SIM_MINI_COORD_H
#define FLOTILLA_SIM_MINI_COORD_H

/* An in-memory coordinator that speaks the device side of docs/protocol.md through the SDK's
 * transport interface, with no sockets: enrollment, check-in with pace steering, signed task
 * and model downloads, the secagg phases (fl_secagg_server) or plain uploads, FedAvg on the
 * decoded sum, and new signed model versions. It serves the SDK's tests (protocol, failure
 * injection, traffic capture) and flotilla-sim's single-process mode. Not thread-safe: one
 * thread drives every connection. Test and example code: it exits on impossible failures. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/client.h"

typedef struct mc_coord mc_coord;
typedef struct mc_conn mc_conn;

typedef struct mc_config {
    const char *population;      /* population name */
    const uint8_t *model;        /* initial model (safetensors, fcN layers), copied */
    size_t model_len;
    uint32_t round_size;         /* clients per round (secagg n) */
    uint32_t min_clients;        /* fewest survivors for the round to complete */
    int secagg;                  /* 1 = secure aggregation, 0 = plain uploads */
    const char *dp_mode;         /* "none" or "central" (no server noise is added here) */
    double clip_norm;            /* task dp.clip_norm */
    double granularity;          /* task dp.granularity */
    uint32_t modulus_bits;       /* task dp.modulus_bits */
    uint32_t epochs, batch_size; /* task training */
    double learning_rate;
    double proximal_mu;
    uint32_t max_examples;
    uint32_t retry_after_s;      /* answer to check-ins while no round forms */
    int64_t phase_timeout_ms;    /* a phase closes this long after it opened */
    int weighting_examples;      /* 1 = "examples" weighting */
    uint64_t seed;               /* signing key and graph seed */
    int64_t (*clock)(void *);    /* time source (ms) */
    void *clock_user;
} mc_config;

void mc_config_init(mc_config *cfg);
mc_coord *mc_create(const mc_config *cfg);
void mc_destroy(mc_coord *mc);

/* The coordinator's Ed25519 public key (to pin in the clients). */
void mc_public_key(const mc_coord *mc, uint8_t pk[32]);
/* The population's enrollment token. */
const char *mc_enrollment_token(const mc_coord *mc);

/* A connection for one client: fills *tp with a transport whose requests reach mc. */
mc_conn *mc_connect(mc_coord *mc, fl_client_transport *tp);
void mc_conn_free(mc_conn *conn);

/* Failure injection on a connection: the next `n` exchanges fail with FL_ERR_IO after the
 * server processed the request (a lost response) when after_server is 1, or before it
 * reaches the server when 0. */
void mc_conn_fail_next(mc_conn *conn, int n, int after_server);
/* Replaces the signing key used from now on by a fresh one (clients must refuse). */
void mc_rotate_key_unpinned(mc_coord *mc);
/* Corrupts one byte of every model body served from now on (signature check must fail). */
void mc_tamper_models(mc_coord *mc, int on);
/* Serves bodies without signature headers from now on. */
void mc_strip_signatures(mc_coord *mc, int on);

/* Every byte a connection sends or receives (request line, headers and bodies, response
 * headers and bodies) is passed to this hook when set. */
void mc_set_capture(mc_coord *mc, void (*fn)(void *user, const void *data, size_t len),
                    void *user);

/* Closes phases whose time is up (dropouts). Call regularly. */
void mc_tick(mc_coord *mc);

/* Counters. */
typedef struct mc_stats {
    uint64_t rounds_completed, rounds_aborted, model_version, checkins, requests;
    uint32_t last_participants;
} mc_stats;
void mc_get_stats(const mc_coord *mc, mc_stats *out);

/* Current model bytes (owned by mc, valid until the next round completes). */
const uint8_t *mc_model(const mc_coord *mc, size_t *len);

#endif
