#ifndef FLOTILLA_SIM_TRANSPORT_H
#define FLOTILLA_SIM_TRANSPORT_H

/* A fault-injecting, capturing transport that wraps another fl_client_transport (normally
 * the SDK's libcurl transport talking to a real coordinator). Everything it does happens
 * on the wire between the SDK and the real server, never instead of the server:
 *
 *  - capture: every byte the device sends (request line path, headers, body) and receives
 *    (kept headers, body) goes to a callback;
 *  - lost request: the request never reaches the server; the device sees a network error;
 *  - lost response: the server acts on the request, the answer is lost on the way back;
 *  - tampered body: one byte of the response body is flipped;
 *  - stripped signature: the Flotilla-Signature header is removed;
 *  - offline: the device has no network (every request is lost) until a given time;
 *  - delay: the request waits before it goes out (slow devices).
 *
 * Faults are chosen by rules (method, a path substring, how many matching requests to let
 * through first, how many to hit) or by a decision callback (the simulator's random
 * dropouts). Used by flotilla-sim and by the SDK's round tests. One thread at a time per
 * handle (one device). */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sim_ft sim_ft;

enum sim_ft_action {
    SIM_FT_PASS = 0,          /* forward untouched */
    SIM_FT_DROP_REQUEST,      /* never reaches the server; FL_ERR_IO */
    SIM_FT_DROP_RESPONSE,     /* reaches the server; the answer is lost; FL_ERR_IO */
    SIM_FT_TAMPER_BODY,       /* flip one byte in the middle of the response body */
    SIM_FT_STRIP_SIGNATURE    /* remove Flotilla-Signature from the response */
};

/* A rule: applies `action` to requests whose method equals `method` (NULL = any) and whose
 * path contains `path_contains` (NULL = any), after letting `skip` such requests through,
 * `count` times (-1 = for ever). Strings are copied. */
typedef struct sim_ft_rule {
    const char *method;
    const char *path_contains;
    int skip;
    int count;
    enum sim_ft_action action;
} sim_ft_rule;

/* Direction of captured bytes. */
enum sim_ft_dir { SIM_FT_SENT = 0, SIM_FT_RECEIVED = 1 };

typedef void (*sim_ft_capture_fn)(void *user, enum sim_ft_dir dir, const void *data, size_t n);

/* Decision callback, asked for every request before the rules: returns an action and may
 * set *delay_ms (wait before sending) and *offline_until_ms (the device is offline until
 * that time of the clock: this request and every later one before it are lost). */
typedef enum sim_ft_action (*sim_ft_decide_fn)(void *user, const fl_client_request *req,
                                               int64_t *delay_ms, int64_t *offline_until_ms);

/* Observer, told the HTTP status of every exchange that completed (status 0: it failed on
 * the way, lost or a transport error). */
typedef void (*sim_ft_observe_fn)(void *user, const fl_client_request *req, int status);

/* Wraps inner (copied; its ctx must outlive the wrapper). clock: NULL = CLOCK_REALTIME ms.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM. */
fl_status sim_ft_create(sim_ft **out, const fl_client_transport *inner, fl_client_clock_fn clock,
                        void *clock_user);
void sim_ft_destroy(sim_ft *ft);
/* The wrapper's vtable, to put into fl_client_config.transport. */
void sim_ft_transport(sim_ft *ft, fl_client_transport *out);
/* Adds a rule (at most 16). Returns FL_OK, FL_ERR_MISUSE, FL_ERR_TOO_LARGE (full), FL_ERR_NOMEM. */
fl_status sim_ft_add_rule(sim_ft *ft, const sim_ft_rule *rule);
/* Removes every rule. */
void sim_ft_clear_rules(sim_ft *ft);
void sim_ft_set_capture(sim_ft *ft, sim_ft_capture_fn fn, void *user);
void sim_ft_set_decide(sim_ft *ft, sim_ft_decide_fn fn, void *user);
void sim_ft_set_observe(sim_ft *ft, sim_ft_observe_fn fn, void *user);
/* The device is offline (every request lost) until clock time until_ms (0 = online now). */
void sim_ft_set_offline_until(sim_ft *ft, int64_t until_ms);

typedef struct sim_ft_stats {
    uint64_t requests;         /* requests the SDK started */
    uint64_t forwarded;        /* requests that reached the inner transport */
    uint64_t faults;           /* requests hit by a fault (any action but PASS, or offline) */
} sim_ft_stats;
void sim_ft_get_stats(const sim_ft *ft, sim_ft_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_SIM_TRANSPORT_H */
