/* The fault-injecting, capturing transport wrapper (see sim_transport.h). It sits between
 * the SDK and a real transport: the inner transport fills a response of the wrapper's own
 * (fl_client_response_create), and the wrapper replays it, possibly altered, into the
 * SDK's response. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_transport.h"

#define MAX_RULES 16

struct rule {
    char *method;              /* NULL = any */
    char *path;                /* substring, NULL = any */
    int skip;                  /* matching requests still to let through */
    int count;                 /* applications left, -1 = for ever */
    enum sim_ft_action action;
};

struct sim_ft {
    fl_client_transport inner;     /* the wrapped transport */
    fl_client_clock_fn clock;      /* NULL = real time */
    void *clock_user;
    struct rule rules[MAX_RULES];
    int n_rules;
    sim_ft_capture_fn capture;
    void *capture_user;
    sim_ft_decide_fn decide;
    void *decide_user;
    sim_ft_observe_fn observe;
    void *observe_user;
    const fl_client_request *req;  /* the request in flight (owned by the SDK) */
    int64_t offline_until;         /* clock ms; requests before it are lost */
    /* the exchange in flight */
    enum sim_ft_action action;     /* chosen at send */
    int lost;                      /* the request did not go out: recv fails */
    int fresh;                     /* no recv call yet for the request in flight */
    fl_client_response *scratch;   /* what the inner transport received */
    sim_ft_stats stats;
};

static int64_t now_ms(const sim_ft *ft) {
    if (ft->clock)
        return ft->clock(ft->clock_user);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void cap(sim_ft *ft, enum sim_ft_dir dir, const void *p, size_t n) {
    if (ft->capture && n)
        ft->capture(ft->capture_user, dir, p, n);
}

static enum sim_ft_action match_rules(sim_ft *ft, const fl_client_request *req) {
    for (int i = 0; i < ft->n_rules; i++) {
        struct rule *r = &ft->rules[i];
        if (r->count == 0)
            continue;
        if (r->method && strcmp(r->method, req->method) != 0)
            continue;
        if (r->path && !strstr(req->path, r->path))
            continue;
        if (r->skip > 0) {
            r->skip--;
            continue;
        }
        if (r->count > 0)
            r->count--;
        return r->action;
    }
    return SIM_FT_PASS;
}

static fl_status ft_send(void *ctx, const fl_client_request *req) {
    sim_ft *ft = ctx;
    ft->stats.requests++;
    ft->req = req;
    ft->lost = 0;
    int64_t delay = 0, off = 0;
    enum sim_ft_action a = SIM_FT_PASS;
    if (ft->decide)
        a = ft->decide(ft->decide_user, req, &delay, &off);
    if (off > ft->offline_until)
        ft->offline_until = off;
    if (a == SIM_FT_PASS)
        a = match_rules(ft, req);
    ft->action = a;
    sleep_ms(delay);
    if (now_ms(ft) < ft->offline_until || a == SIM_FT_DROP_REQUEST) {
        ft->stats.faults++;
        ft->lost = 1; /* nothing goes out; recv reports the network error */
        return FL_OK;
    }
    if (a != SIM_FT_PASS)
        ft->stats.faults++;
    cap(ft, SIM_FT_SENT, req->path, strlen(req->path));
    for (size_t i = 0; i < req->n_headers; i++)
        cap(ft, SIM_FT_SENT, req->headers[i], strlen(req->headers[i]));
    cap(ft, SIM_FT_SENT, req->body, req->body_len);
    ft->stats.forwarded++;
    ft->fresh = 1;
    return ft->inner.send(ft->inner.ctx, req);
}

static void observe(sim_ft *ft, int status) {
    if (ft->observe && ft->req)
        ft->observe(ft->observe_user, ft->req, status);
    ft->req = NULL;
}

static fl_status ft_recv(void *ctx, fl_client_response *resp) {
    sim_ft *ft = ctx;
    if (ft->lost) {
        ft->lost = 0;
        observe(ft, 0);
        return FL_ERR_IO;
    }
    size_t limit = fl_client_response_limit(resp);
    if (!ft->scratch) {
        fl_status rc = fl_client_response_create(&ft->scratch, limit, NULL);
        if (rc != FL_OK)
            return rc;
    }
    /* A non-blocking inner transport may take several calls: reset only on the first. */
    if (ft->fresh)
        fl_client_response_reset(ft->scratch, limit);
    ft->fresh = 0;
    fl_status rc = ft->inner.recv(ft->inner.ctx, ft->scratch);
    if (rc == FL_ERR_AGAIN)
        return rc;
    size_t blen = 0;
    const uint8_t *body = fl_client_response_body(ft->scratch, &blen);
    const char *name, *value;
    for (size_t i = 0; fl_client_response_header_at(ft->scratch, i, &name, &value) == FL_OK; i++) {
        cap(ft, SIM_FT_RECEIVED, name, strlen(name));
        cap(ft, SIM_FT_RECEIVED, value, strlen(value));
    }
    cap(ft, SIM_FT_RECEIVED, body, blen);
    if (rc == FL_OK && ft->action == SIM_FT_DROP_RESPONSE)
        rc = FL_ERR_IO;
    if (rc != FL_OK) {
        fl_client_response_reset(ft->scratch, limit);
        observe(ft, 0);
        return rc;
    }
    observe(ft, fl_client_response_status(ft->scratch));
    rc = fl_client_response_set_status(resp, fl_client_response_status(ft->scratch));
    for (size_t i = 0;
         rc == FL_OK && fl_client_response_header_at(ft->scratch, i, &name, &value) == FL_OK;
         i++) {
        if (ft->action == SIM_FT_STRIP_SIGNATURE && strcmp(name, "Flotilla-Signature") == 0)
            continue;
        rc = fl_client_response_add_header(resp, name, strlen(name), value, strlen(value));
    }
    if (rc == FL_OK && blen) {
        if (ft->action == SIM_FT_TAMPER_BODY) {
            uint8_t *copy = malloc(blen);
            if (!copy) {
                rc = FL_ERR_NOMEM;
            } else {
                memcpy(copy, body, blen);
                copy[blen / 2] ^= 0x01;
                rc = fl_client_response_append(resp, copy, blen);
                free(copy);
            }
        } else {
            rc = fl_client_response_append(resp, body, blen);
        }
    }
    fl_client_response_reset(ft->scratch, limit);
    return rc;
}

static void ft_cancel(void *ctx) {
    sim_ft *ft = ctx;
    ft->lost = 0;
    ft->req = NULL;
    if (ft->inner.cancel)
        ft->inner.cancel(ft->inner.ctx);
}

fl_status sim_ft_create(sim_ft **out, const fl_client_transport *inner, fl_client_clock_fn clock,
                        void *clock_user) {
    if (!out || !inner || !inner->send || !inner->recv)
        return FL_ERR_MISUSE;
    sim_ft *ft = calloc(1, sizeof(*ft));
    if (!ft)
        return FL_ERR_NOMEM;
    ft->inner = *inner;
    ft->clock = clock;
    ft->clock_user = clock_user;
    *out = ft;
    return FL_OK;
}

void sim_ft_clear_rules(sim_ft *ft) {
    for (int i = 0; i < ft->n_rules; i++) {
        free(ft->rules[i].method);
        free(ft->rules[i].path);
    }
    ft->n_rules = 0;
}

void sim_ft_destroy(sim_ft *ft) {
    if (!ft)
        return;
    sim_ft_clear_rules(ft);
    fl_client_response_destroy(ft->scratch);
    free(ft);
}

void sim_ft_transport(sim_ft *ft, fl_client_transport *out) {
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->send = ft_send;
    out->recv = ft_recv;
    out->cancel = ft_cancel;
    out->ctx = ft;
}

fl_status sim_ft_add_rule(sim_ft *ft, const sim_ft_rule *rule) {
    if (!ft || !rule)
        return FL_ERR_MISUSE;
    if (ft->n_rules == MAX_RULES)
        return FL_ERR_TOO_LARGE;
    struct rule *r = &ft->rules[ft->n_rules];
    memset(r, 0, sizeof(*r));
    r->method = rule->method ? strdup(rule->method) : NULL;
    r->path = rule->path_contains ? strdup(rule->path_contains) : NULL;
    if ((rule->method && !r->method) || (rule->path_contains && !r->path)) {
        free(r->method);
        free(r->path);
        return FL_ERR_NOMEM;
    }
    r->skip = rule->skip;
    r->count = rule->count;
    r->action = rule->action;
    ft->n_rules++;
    return FL_OK;
}

void sim_ft_set_capture(sim_ft *ft, sim_ft_capture_fn fn, void *user) {
    ft->capture = fn;
    ft->capture_user = user;
}

void sim_ft_set_decide(sim_ft *ft, sim_ft_decide_fn fn, void *user) {
    ft->decide = fn;
    ft->decide_user = user;
}

void sim_ft_set_observe(sim_ft *ft, sim_ft_observe_fn fn, void *user) {
    ft->observe = fn;
    ft->observe_user = user;
}

void sim_ft_set_offline_until(sim_ft *ft, int64_t until_ms) {
    ft->offline_until = until_ms;
}

void sim_ft_get_stats(const sim_ft *ft, sim_ft_stats *out) {
    *out = ft->stats;
}
