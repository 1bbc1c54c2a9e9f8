/* HTTP layer: the libmicrohttpd daemon, request bodies with per-route caps, routing,
 * error bodies and the operational endpoints (/healthz, /readyz, /metrics). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <microhttpd.h>
#include <openssl/evp.h>

#include "coord_internal.h"

/* ---- request deadlines and half-closed clients ----
 *
 * libmicrohttpd 0.9.75 has an idle timeout only: a client that trickles a request (one byte
 * every few seconds) keeps its connection forever, and a client that half-closes in the
 * middle of a request is sometimes not noticed until the idle timeout. Every connection is
 * therefore tracked here (NOTIFY_CONNECTION), and a watchdog thread (one per coordinator,
 * started with the daemon) shuts down the socket of a connection whose request did not
 * arrive within its deadline, or whose client sent EOF before the request was complete
 * (seen on two sweeps in a row, so a complete request that just arrived with its EOF is
 * never cut). shutdown() makes MHD's next read return 0 and MHD closes the connection
 * itself; the fd is closed only by MHD, after CLOSED is notified, and the notification
 * takes the same mutex as the sweep, so a sweep never touches a reused fd.
 *
 * A request cut by its deadline is answered 408 (JSON error body, Connection: close) before
 * the close wherever that is safe, and only closed elsewhere (docs/protocol.md section 7):
 *  - headers that complete past the deadline (before a sweep shut them): 408 queued through
 *    MHD by the access handler, like any early answer (TLS too);
 *  - a body chunk that arrives past the deadline: the handler, on MHD's own thread, writes
 *    the 408 to the socket itself (MHD 0.9.75 refuses MHD_queue_response in the middle of
 *    a body) and closes; plain HTTP only;
 *  - the watchdog writes the 408 itself only when MHD cannot be writing to that socket: plain
 *    HTTP, headers processed, a body arriving, no 100-continue to send (the "quiet" flag).
 *    While headers arrive MHD may write an error answer of its own (400, 431), and under
 *    TLS the watchdog owns no session, so there it only shuts the socket, as before.
 *    Headers that never complete cannot be answered through MHD either: 0.9.75 refuses
 *    MHD_queue_response before the header block is parsed, from any callback or thread,
 *    and its own timeouts close silently (docs/protocol.md section 7 lists what was tried).
 * Whoever answers or closes first claims the request by moving its phase with a
 * compare-and-swap (READING -> LATE for a deadline, READING -> BUSY for an answer), so one
 * request never gets two answers and every deadline close is counted once. */

enum conn_phase {
    CONN_IDLE = 0,    /* kept alive between requests */
    CONN_READING = 1, /* a request is arriving (or the first one is awaited) */
    CONN_BUSY = 2,    /* the request is complete: handled, parked or being answered */
    CONN_LATE = 3     /* cut by its deadline: answered 408 and/or shut; nothing else is sent */
};

struct conn_watch {
    struct conn_watch *prev, *next;  /* in watch->head (watch->mu) */
    int fd;                          /* the connection's socket (MHD owns it) */
    atomic_int phase;                /* enum conn_phase */
    _Atomic int64_t since_ms;        /* monotonic ms: READING since / IDLE since */
    _Atomic int64_t allowance_ms;    /* body allowance added to the deadline */
    atomic_bool quiet;               /* a body is arriving and MHD writes nothing to the
                                        socket until it is complete: the watchdog may */
    int eof_sweeps;                  /* sweeps in a row that saw EOF (watchdog only) */
    bool shut;                       /* already shut down (watchdog only) */
};

struct fl__coord_http_watch {
    fl_coord *co;
    pthread_mutex_t mu;              /* guards head and every record's membership */
    pthread_cond_t cv;               /* wakes the watchdog at stop */
    bool stop;                       /* guarded by mu */
    bool thread_started;
    pthread_t thread;
    struct conn_watch *head;
    int64_t deadline_ms;             /* request deadline; 0 = none */
    int64_t idle_ms;                 /* the idle timeout */
    bool tls;                        /* HTTPS: only MHD can write to a connection */
    atomic_uint_fast64_t closed_deadline; /* connections shut for a missed deadline */
    atomic_uint_fast64_t closed_eof;      /* connections shut after an early EOF */
};

#define WATCH_SWEEP_MS 100

static int64_t mono_ms(void) {
    return fl__coord_mono_ms();
}

static struct conn_watch *conn_watch_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (struct conn_watch *)ci->socket_context : NULL;
}

/* True when the request of w is past its deadline. */
static bool conn_late(const struct fl__coord_http_watch *wa, const struct conn_watch *w,
                      int64_t now) {
    if (wa->deadline_ms <= 0)
        return false;
    int64_t since = atomic_load(&w->since_ms);
    int ph = atomic_load(&w->phase);
    if (ph == CONN_READING)
        return now - since > wa->deadline_ms + atomic_load(&w->allowance_ms);
    /* Between requests MHD's idle timeout closes a silent connection; a request line that
     * trickles in (no callback sees it until it is complete) is bounded here. */
    if (ph == CONN_IDLE)
        return now - since > wa->idle_ms + wa->deadline_ms;
    return false;
}

/* Sets the phase of w to `to` unless the deadline claimed the request (CONN_LATE): true when
 * the caller may go on and answer. NULL (an unwatched connection) is always true. */
static bool conn_claim(struct conn_watch *w, int to) {
    if (!w)
        return true;
    int ph = atomic_load(&w->phase);
    while (ph != CONN_LATE)
        if (atomic_compare_exchange_weak(&w->phase, &ph, to))
            return true;
    return false;
}

/* Claims a request that is still arriving for its deadline (READING -> LATE). */
static bool conn_claim_late(struct conn_watch *w) {
    int ph = CONN_READING;
    return atomic_compare_exchange_strong(&w->phase, &ph, CONN_LATE);
}

/* Writes the 408 answer to a plain-HTTP socket that nothing else writes to now (see the
 * section comment), in one non-blocking send: the socket's send buffer is empty at this
 * point, so it goes out whole; if not, the client sees a cut answer and then the close,
 * which it treats like the close alone. */
static void conn_write_408(int fd) {
    static const char body[] = "{\"error\":{\"status\":408,\"code\":\"request_timeout\","
                               "\"message\":\"the request did not arrive within its "
                               "deadline\"}}";
    char msg[512], date[64];
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm))
        date[0] = '\0';
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                     "Server: flotilla-coordinator/" FL_VERSION_STRING "\r\n"
                     "Cache-Control: no-store\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s%s%s\r\n%s",
                     sizeof(body) - 1, date[0] ? "Date: " : "", date, date[0] ? "\r\n" : "",
                     body);
    if (n > 0 && (size_t)n < sizeof(msg))
        (void)send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct fl__coord_http_watch *wa = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn_watch *w = ci ? fl__calloc(fl__coord_alloc(wa->co), 1, sizeof(*w)) : NULL;
        if (!w)
            return; /* not watched: the idle timeout still applies */
        w->fd = ci->connect_fd;
        atomic_store(&w->phase, CONN_READING);
        atomic_store(&w->since_ms, mono_ms());
        pthread_mutex_lock(&wa->mu);
        w->next = wa->head;
        if (wa->head)
            wa->head->prev = w;
        wa->head = w;
        pthread_mutex_unlock(&wa->mu);
        *socket_context = w;
        return;
    }
    struct conn_watch *w = *socket_context;
    if (!w)
        return;
    pthread_mutex_lock(&wa->mu);
    if (w->prev)
        w->prev->next = w->next;
    else
        wa->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&wa->mu);
    fl__free(fl__coord_alloc(wa->co), w, sizeof(*w));
    *socket_context = NULL;
}

/* The request line of a request arrived (MHD_OPTION_URI_LOG_CALLBACK): on a kept-alive
 * connection its deadline starts now. Returns the initial request context (none). */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)cls;
    (void)uri;
    struct conn_watch *w = conn_watch_of(conn);
    if (w && atomic_load(&w->phase) == CONN_IDLE) {
        atomic_store(&w->allowance_ms, 0);
        atomic_store(&w->since_ms, mono_ms());
        atomic_store(&w->phase, CONN_READING);
    }
    return NULL;
}

static void watch_sweep(struct fl__coord_http_watch *wa) {
    int64_t now = mono_ms();
    pthread_mutex_lock(&wa->mu);
    for (struct conn_watch *w = wa->head; w; w = w->next) {
        int ph = atomic_load(&w->phase);
        if (w->shut || ph == CONN_BUSY || ph == CONN_LATE) {
            w->eof_sweeps = 0;
            continue;
        }
        bool late = conn_late(wa, w, now);
        if (late && ph == CONN_READING) {
            /* Claimed here unless the handler finished or cut the request meanwhile. */
            if (!conn_claim_late(w)) {
                w->eof_sweeps = 0;
                continue;
            }
            if (atomic_load(&w->quiet) && !wa->tls)
                conn_write_408(w->fd);
        }
        if (!late) {
            char c;
            ssize_t k = recv(w->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            w->eof_sweeps = k == 0 ? w->eof_sweeps + 1 : 0;
        }
        if (late || w->eof_sweeps >= 2) {
            shutdown(w->fd, SHUT_RDWR);
            w->shut = true;
            atomic_fetch_add(late ? &wa->closed_deadline : &wa->closed_eof, 1);
        }
    }
    pthread_mutex_unlock(&wa->mu);
}

static void *watch_main(void *arg) {
    struct fl__coord_http_watch *wa = arg;
    pthread_mutex_lock(&wa->mu);
    while (!wa->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += WATCH_SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int rc = pthread_cond_timedwait(&wa->cv, &wa->mu, &ts);
        if (wa->stop)
            break;
        if (rc == ETIMEDOUT || rc == 0) {
            pthread_mutex_unlock(&wa->mu);
            watch_sweep(wa);
            pthread_mutex_lock(&wa->mu);
        }
    }
    pthread_mutex_unlock(&wa->mu);
    return NULL;
}

static struct fl__coord_http_watch *watch_create(fl_coord *co) {
    struct fl__coord_http_watch *wa = fl__calloc(fl__coord_alloc(co), 1, sizeof(*wa));
    if (!wa)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wa->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&wa->mu, NULL);
    wa->co = co;
    wa->deadline_ms = (int64_t)co->request_deadline_s * 1000;
    wa->idle_ms = (int64_t)co->limits.connection_timeout_s * 1000;
    wa->tls = co->tls_cert != NULL;
    return wa;
}

/* Stops the watchdog thread (before the daemon stops: no sweep runs during teardown). */
static void watch_stop_thread(struct fl__coord_http_watch *wa) {
    if (!wa || !wa->thread_started)
        return;
    pthread_mutex_lock(&wa->mu);
    wa->stop = true;
    pthread_cond_signal(&wa->cv);
    pthread_mutex_unlock(&wa->mu);
    pthread_join(wa->thread, NULL);
    wa->thread_started = false;
}

static void watch_destroy(struct fl__coord_http_watch *wa) {
    if (!wa)
        return;
    watch_stop_thread(wa);
    /* Records left are freed by MHD's CLOSED notifications before this point. */
    pthread_cond_destroy(&wa->cv);
    pthread_mutex_destroy(&wa->mu);
    fl__free(fl__coord_alloc(wa->co), wa, sizeof(*wa));
}

/* ---- per-request context ---- */

struct req_ctx {
    enum fl__coord_route route;
    size_t cap;        /* body cap of the route */
    uint8_t *body;     /* Content-Length bytes, or NULL */
    size_t body_len;   /* expected length */
    size_t body_got;   /* received so far */
    bool answered;     /* a reply was already queued (early error) */
    bool parked;       /* the handler suspended the connection (long poll) */
    bool close;        /* close the connection after the reply (framing errors: what
                          follows on it cannot be trusted) */
    struct conn_watch *watch; /* the connection's deadline record, or NULL */
    EVP_MAC_CTX *mac;  /* the body's tag as it arrives (update and secagg posts), so the
                          handler, under the coordinator lock, does not compute it */
    struct fl__coord_req rq;
};

/* ---- replies ---- */

int fl__coord_json(struct fl__coord_reply *rep, int status, json_t *body) {
    rep->status = status;
    if (rep->json)
        json_decref(rep->json);
    rep->json = body;
    return status;
}

int fl__coord_error(struct fl__coord_reply *rep, int status, const char *code,
                    const char *field, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:i, s:s, s:s}", "status", status, "code", code, "message", msg);
    if (e && field)
        json_object_set_new(e, "field", json_string(field));
    if (e && rep->retry_after_s >= 0 && (status == 429 || status == 503 || status == 425))
        json_object_set_new(e, "retry_after_s", json_integer(rep->retry_after_s));
    if (status == 401)
        rep->www_auth = true;
    return fl__coord_json(rep, status, e ? json_pack("{s:o}", "error", e) : NULL);
}

int fl__coord_oom(struct fl__coord_reply *rep) {
    rep->retry_after_s = 1;
    return fl__coord_error(rep, 503, "unavailable", NULL, "out of memory");
}

json_t *fl__coord_parse_body(const struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && strncmp(ct, "application/json", 16) != 0) {
        fl__coord_error(rep, 415, "unsupported_media_type", "Content-Type",
                        "expected application/json, got '%.64s'", ct);
        return NULL;
    }
    json_error_t jerr;
    memset(&jerr, 0, sizeof(jerr)); /* Jansson leaves it unset on some allocation failures */
    /* Jansson needs no NUL: load from the exact bytes, rejecting NUL characters. */
    json_t *v = json_loadb((const char *)rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v && rq->body_len > 0) {
        /* Jansson's lexer reports a failed allocation as a syntax error (lex_scan_string):
         * a body that parses the second time was refused for memory, not for its JSON. */
        memset(&jerr, 0, sizeof(jerr));
        v = json_loadb((const char *)rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &jerr);
    }
    if (!v && (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0])) {
        /* Out of memory, not the client's JSON (every syntax error has a text). */
        fl__coord_oom(rep);
        return NULL;
    }
    if (!v) {
        fl__coord_error(rep, 400, "malformed_json", NULL, "body is not valid JSON: %s (line %d)",
                        jerr.text, jerr.line);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        fl__coord_error(rep, 400, "malformed_json", NULL, "body must be a JSON object");
        return NULL;
    }
    return v;
}

const char *fl__coord_bearer(const struct fl__coord_req *rq) {
    const char *h = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    size_t n = strlen(h);
    if (n < 20 || n > 200)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return NULL;
    }
    return h;
}

bool fl__coord_auth_admin(const struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    const char *tok = fl__coord_bearer(rq);
    if (!rq->co->has_admin || !tok) {
        fl__coord_error(rep, 401, "unauthorized", "Authorization", "admin bearer token required");
        return false;
    }
    uint8_t h[32];
    fl__coord_sha256(h, tok, strlen(tok));
    if (fl_memeq_ct(h, rq->co->admin_hash, 32) != 0) {
        fl__coord_error(rep, 401, "unauthorized", "Authorization", "wrong admin token");
        return false;
    }
    return true;
}

/* ---- routing ---- */

static const char *route_allow(enum fl__coord_route r) {
    switch (r) {
    case FL__R_HEALTHZ: case FL__R_READYZ: case FL__R_METRICS: case FL__R_TASK:
    case FL__R_MODEL: case FL__R_ADMIN_POP_ROUNDS: case FL__R_ADMIN_ROUND:
    case FL__R_SECAGG_RESULT: case FL__R_STATUS: case FL__R_AUDIT_CHECKPOINT:
    case FL__R_AUDIT_INCLUSION: case FL__R_AUDIT_CONSISTENCY: case FL__R_ADMIN_AUDIT_BUNDLE:
        return "GET";
    case FL__R_ENROLL: case FL__R_CHECKIN: case FL__R_ADMIN_POP_START: case FL__R_ADMIN_POP_STOP:
    case FL__R_ADMIN_POP_MODELS: case FL__R_SECAGG_POST: case FL__R_UPDATE:
    case FL__R_ADMIN_CLIENT_ERASE: case FL__R_ADMIN_POP_TOKEN: case FL__R_ADMIN_CLIENT_REVOKE:
    case FL__R_ADMIN_CLIENT_REINSTATE:
        return "POST";
    case FL__R_ADMIN_POPS:
        return "GET, POST";
    case FL__R_ADMIN_POP:
        return "GET, PATCH";
    default:
        return NULL;
    }
}

const char *fl__coord_route_name(enum fl__coord_route r) {
    static const char *names[FL__R_COUNT] = {
        "not_found", "healthz", "readyz", "metrics", "enroll", "checkin", "task", "model",
        "admin_populations", "admin_population", "admin_population_start",
        "admin_population_stop", "admin_population_models", "admin_population_rounds",
        "admin_round", "secagg_post", "secagg_result", "update", "status",
        "audit_checkpoint", "audit_inclusion", "audit_consistency", "admin_audit_bundle",
        "admin_client_erase", "admin_population_enrollment_token", "admin_client_revoke",
        "admin_client_reinstate"};
    return (unsigned)r < FL__R_COUNT ? names[r] : "unknown";
}

/* Splits url into segments and finds the route. */
static enum fl__coord_route route_of(struct fl__coord_req *rq, const char *url) {
    size_t n = strlen(url);
    if (n == 0 || n >= sizeof(rq->path_buf) || url[0] != '/')
        return FL__R_NOT_FOUND;
    memcpy(rq->path_buf, url + 1, n);
    rq->nseg = 0;
    char *p = rq->path_buf;
    while (1) {
        if (rq->nseg == 8)
            return FL__R_NOT_FOUND;
        rq->seg[rq->nseg++] = p;
        char *s = strchr(p, '/');
        if (!s)
            break;
        *s = '\0';
        p = s + 1;
    }
    for (size_t i = 0; i < rq->nseg; i++)
        if (rq->seg[i][0] == '\0')
            return FL__R_NOT_FOUND;
    const char *const *sg = rq->seg;
    size_t k = rq->nseg;
#define SEG(i, s) (strcmp(sg[i], s) == 0)
    if (k == 1 && SEG(0, "healthz"))
        return FL__R_HEALTHZ;
    if (k == 1 && SEG(0, "readyz"))
        return FL__R_READYZ;
    if (k == 1 && SEG(0, "metrics"))
        return FL__R_METRICS;
    if (k < 2 || !SEG(0, "v1"))
        return FL__R_NOT_FOUND;
    if (k == 2 && SEG(1, "enroll"))
        return FL__R_ENROLL;
    if (k == 2 && SEG(1, "checkin"))
        return FL__R_CHECKIN;
    if (k == 4 && SEG(1, "rounds") && SEG(3, "task"))
        return FL__R_TASK;
    if (k == 4 && SEG(1, "rounds") && SEG(3, "update"))
        return FL__R_UPDATE;
    if (k == 4 && SEG(1, "rounds") && SEG(3, "status"))
        return FL__R_STATUS;
    if (k == 5 && SEG(1, "rounds") && SEG(3, "secagg"))
        return FL__R_SECAGG_POST;
    if (k == 6 && SEG(1, "rounds") && SEG(3, "secagg") && SEG(5, "result"))
        return FL__R_SECAGG_RESULT;
    if (k == 4 && SEG(1, "models"))
        return FL__R_MODEL;
    if (k == 3 && SEG(1, "audit") && SEG(2, "checkpoint"))
        return FL__R_AUDIT_CHECKPOINT;
    if (k == 4 && SEG(1, "audit") && SEG(2, "proof") && SEG(3, "inclusion"))
        return FL__R_AUDIT_INCLUSION;
    if (k == 4 && SEG(1, "audit") && SEG(2, "proof") && SEG(3, "consistency"))
        return FL__R_AUDIT_CONSISTENCY;
    if (k == 4 && SEG(1, "admin") && SEG(2, "audit") && SEG(3, "bundle"))
        return FL__R_ADMIN_AUDIT_BUNDLE;
    if (k == 5 && SEG(1, "admin") && SEG(2, "clients") && SEG(4, "erase"))
        return FL__R_ADMIN_CLIENT_ERASE;
    if (k == 5 && SEG(1, "admin") && SEG(2, "clients") && SEG(4, "revoke"))
        return FL__R_ADMIN_CLIENT_REVOKE;
    if (k == 5 && SEG(1, "admin") && SEG(2, "clients") && SEG(4, "reinstate"))
        return FL__R_ADMIN_CLIENT_REINSTATE;
    if (k >= 3 && SEG(1, "admin")) {
        if (SEG(2, "populations")) {
            if (k == 3)
                return FL__R_ADMIN_POPS;
            if (k == 4)
                return FL__R_ADMIN_POP;
            if (k == 5 && SEG(4, "start"))
                return FL__R_ADMIN_POP_START;
            if (k == 5 && SEG(4, "stop"))
                return FL__R_ADMIN_POP_STOP;
            if (k == 5 && SEG(4, "models"))
                return FL__R_ADMIN_POP_MODELS;
            if (k == 5 && SEG(4, "rounds"))
                return FL__R_ADMIN_POP_ROUNDS;
            if (k == 5 && SEG(4, "enrollment-token"))
                return FL__R_ADMIN_POP_TOKEN;
        }
        if (k == 4 && SEG(2, "rounds"))
            return FL__R_ADMIN_ROUND;
    }
#undef SEG
    return FL__R_NOT_FOUND;
}

static size_t route_cap(fl_coord *co, const struct fl__coord_req *rq, enum fl__coord_route r,
                        const char *method) {
    if (strcmp(method, "PATCH") == 0 && r == FL__R_ADMIN_POP)
        return co->limits.admin_json_bytes;
    if (strcmp(method, "POST") != 0)
        return 0;
    switch (r) {
    case FL__R_SECAGG_POST: return fl__coord_round_body_cap(co, rq->seg[2], rq->seg[4]);
    case FL__R_UPDATE: return fl__coord_round_body_cap(co, rq->seg[2], NULL);
    case FL__R_ENROLL: return co->limits.enroll_bytes;
    case FL__R_CHECKIN: return co->limits.checkin_bytes;
    case FL__R_ADMIN_POPS: return co->limits.admin_json_bytes;
    case FL__R_ADMIN_POP_MODELS: return co->limits.model_bytes;
    case FL__R_ADMIN_POP_START: case FL__R_ADMIN_POP_STOP: return 1024;
    case FL__R_ADMIN_CLIENT_ERASE: return 1024;
    case FL__R_ADMIN_CLIENT_REVOKE: case FL__R_ADMIN_CLIENT_REINSTATE: return 1024;
    case FL__R_ADMIN_POP_TOKEN: return 1024;
    default: return 0;
    }
}

static bool method_allowed(enum fl__coord_route r, const char *method) {
    const char *allow = route_allow(r);
    if (!allow)
        return true; /* 404 decides */
    if (strcmp(method, "HEAD") == 0)
        method = "GET";
    size_t m = strlen(method);
    for (const char *p = allow; (p = strstr(p, method)) != NULL; p += m)
        if ((p == allow || p[-1] == ' ') && (p[m] == '\0' || p[m] == ','))
            return true;
    return false;
}

/* ---- operational endpoints ---- */

static int h_ops(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    fl_coord *co = rq->co;
    switch (rq->route) {
    case FL__R_HEALTHZ:
        return fl__coord_json(rep, 200, json_pack("{s:s}", "status", "ok"));
    case FL__R_READYZ:
        if (!atomic_load(&co->ready)) {
            rep->retry_after_s = 5;
            return fl__coord_error(rep, 503, "unavailable", NULL, "coordinator is not ready");
        }
        return fl__coord_json(rep, 200, json_pack("{s:s}", "status", "ready"));
    case FL__R_METRICS: {
        size_t size = 0;
        char *text = fl__coord_metrics_render(co, &size);
        if (!text)
            return fl__coord_oom(rep);
        rep->status = 200;
        rep->bytes_owned = text;
        rep->owned_size = size;
        rep->bytes = (const uint8_t *)text;
        rep->len = strlen(text);
        rep->content_type = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    default:
        return fl__coord_error(rep, 404, "not_found", NULL, "no such endpoint");
    }
}

static int dispatch(struct fl__coord_req *rq, struct fl__coord_reply *rep) {
    switch (rq->route) {
    case FL__R_HEALTHZ: case FL__R_READYZ: case FL__R_METRICS:
        return h_ops(rq, rep);
    case FL__R_ENROLL:
        return fl__coord_h_enroll(rq, rep);
    case FL__R_CHECKIN:
        return fl__coord_h_checkin(rq, rep);
    case FL__R_TASK:
        return fl__coord_h_task(rq, rep);
    case FL__R_MODEL:
        return fl__coord_h_model(rq, rep);
    case FL__R_ADMIN_POPS: case FL__R_ADMIN_POP: case FL__R_ADMIN_POP_START:
    case FL__R_ADMIN_POP_STOP: case FL__R_ADMIN_POP_MODELS: case FL__R_ADMIN_POP_ROUNDS:
    case FL__R_ADMIN_ROUND: case FL__R_ADMIN_POP_TOKEN:
        return fl__coord_h_admin(rq, rep);
    case FL__R_SECAGG_POST:
        return fl__coord_h_secagg_post(rq, rep);
    case FL__R_SECAGG_RESULT:
        return fl__coord_h_secagg_result(rq, rep);
    case FL__R_UPDATE:
        return fl__coord_h_update(rq, rep);
    case FL__R_STATUS:
        return fl__coord_h_status(rq, rep);
    case FL__R_AUDIT_CHECKPOINT: case FL__R_AUDIT_INCLUSION: case FL__R_AUDIT_CONSISTENCY:
    case FL__R_ADMIN_AUDIT_BUNDLE: case FL__R_ADMIN_CLIENT_ERASE:
        return fl__coord_h_audit(rq, rep);
    case FL__R_ADMIN_CLIENT_REVOKE: case FL__R_ADMIN_CLIENT_REINSTATE:
        return fl__coord_h_client_revoke(rq, rep);
    default:
        return fl__coord_error(rep, 404, "not_found", NULL, "no such endpoint");
    }
}

static void blob_release(void *cls) {
    fl__coord_blob_unref(cls);
}

static enum MHD_Result queue_reply(fl_coord *co, struct MHD_Connection *conn,
                                   enum fl__coord_route route, struct fl__coord_reply *rep,
                                   bool close) {
    struct MHD_Response *r = NULL;
    if (rep->blob) {
        /* Shared body: the response keeps the reference and drops it once sent. */
        rep->len = rep->blob->len;
        r = MHD_create_response_from_buffer_with_free_callback_cls(
            rep->blob->len, rep->blob->data, blob_release, rep->blob);
        if (r) {
            rep->blob = NULL;
            if (rep->content_type)
                MHD_add_response_header(r, "Content-Type", rep->content_type);
        }
    } else if (rep->json) {
        char *text = fl__coord_json_dumps(co, rep->json, JSON_COMPACT);
        if (text) {
            size_t n = strlen(text);
            atomic_fetch_add(&co->metrics.bytes_out, n);
            r = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_COPY);
            fl__coord_text_free(co, text);
        }
        if (r)
            MHD_add_response_header(r, "Content-Type", "application/json");
    } else if (rep->bytes || rep->status == 204 || rep->status == 304) {
        r = MHD_create_response_from_buffer(rep->len, (void *)rep->bytes, MHD_RESPMEM_MUST_COPY);
        if (r && rep->content_type)
            MHD_add_response_header(r, "Content-Type", rep->content_type);
    }
    if (!r) {
        static const char oom[] =
            "{\"error\":{\"status\":500,\"code\":\"internal\",\"message\":\"out of memory\"}}";
        rep->status = 500;
        r = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
    }
    MHD_add_response_header(r, "Server", "flotilla-coordinator/" FL_VERSION_STRING);
    if (rep->etag[0]) {
        MHD_add_response_header(r, "ETag", rep->etag);
        MHD_add_response_header(r, "Cache-Control", "private, max-age=31536000, immutable");
    } else {
        MHD_add_response_header(r, "Cache-Control", "no-store");
    }
    if (rep->retry_after_s >= 0) {
        char ra[24];
        snprintf(ra, sizeof(ra), "%d", rep->retry_after_s);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (rep->allow)
        MHD_add_response_header(r, "Allow", rep->allow);
    if (rep->www_auth)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"flotilla\"");
    if (rep->replayed)
        MHD_add_response_header(r, "Idempotent-Replayed", "true");
    if (rep->sig_b64[0]) {
        MHD_add_response_header(r, "Flotilla-Signature", rep->sig_b64);
        MHD_add_response_header(r, "Flotilla-Key-Id", co->key_id);
    }
    if (rep->sha_hex[0])
        MHD_add_response_header(r, "Flotilla-Content-SHA256", rep->sha_hex);
    /* A client that half-closed before this reply is closed by the watchdog (EOF seen on two
     * sweeps), which costs no system call per request here. */
    if (close)
        MHD_add_response_header(r, "Connection", "close");
    atomic_fetch_add(&co->metrics.bytes_out, rep->json ? 0 : rep->len);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)rep->status, r);
    MHD_destroy_response(r);
    fl__coord_metrics_http(&co->metrics, route, rep->status);
    return ret;
}

void fl__coord_reply_clear(fl_coord *co, struct fl__coord_reply *rep) {
    if (rep->json)
        json_decref(rep->json);
    fl__coord_blob_unref(rep->blob);
    fl__free(fl__coord_alloc(co), rep->bytes_owned, rep->owned_size);
    memset(rep, 0, sizeof(*rep));
    rep->retry_after_s = -1;
}

/* First call for a request: route it and refuse what can be refused before reading the
 * body (method, size cap, missing Content-Length). Returns true when a reply was queued. */
/* Counts Content-Length headers: MHD's lookup returns only the first, and two framings of
 * one request are how smuggling through a proxy starts (RFC 9112 6.3). */
static enum MHD_Result count_content_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                            const char *value) {
    (void)kind;
    (void)value;
    if (key && strcasecmp(key, "Content-Length") == 0)
        (*(int *)cls)++;
    return MHD_YES;
}

/* Finds a header whose name holds a space or a tab: RFC 9112 section 5.1 requires a 400
 * for whitespace between a field name and its colon, and libmicrohttpd 0.9.75 keeps such a
 * name (e.g. "Content-Length ") as an ordinary header, so no framing check would see it. */
static enum MHD_Result find_spaced_name(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value) {
    (void)kind;
    (void)value;
    if (key && strpbrk(key, " \t")) {
        *(const char **)cls = key;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Message-level checks (RFC 9112): Host on HTTP/1.1 and header names without whitespace.
 * Returns true when a 400 was set; the connection is then closed after the reply. */
static bool syntax_checks(struct req_ctx *ctx, struct MHD_Connection *conn, const char *version,
                          struct fl__coord_reply *rep) {
    const char *spaced = NULL;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, find_spaced_name, &spaced);
    if (spaced) {
        ctx->close = true;
        fl__coord_error(rep, 400, "invalid_parameter", NULL,
                        "whitespace in the header name '%.40s' (RFC 9112 section 5.1)", spaced);
        return true;
    }
    if (version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
        !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)) {
        ctx->close = true;
        fl__coord_error(rep, 400, "invalid_parameter", "Host",
                        "HTTP/1.1 requests need a Host header (RFC 9112 section 3.2)");
        return true;
    }
    return false;
}

static bool early_checks(fl_coord *co, struct req_ctx *ctx, struct MHD_Connection *conn,
                         const char *method, const char *version, struct fl__coord_reply *rep) {
    if (syntax_checks(ctx, conn, version, rep))
        return true;
    if (!method_allowed(ctx->route, method)) {
        rep->allow = route_allow(ctx->route);
        fl__coord_error(rep, 405, "method_not_allowed", NULL, "method %.16s not allowed; use %s",
                        method, rep->allow);
        return true;
    }
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    unsigned long long len = 0;
    int n_cl = 0;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_content_length, &n_cl);
    if (n_cl > 1) {
        ctx->close = true;
        fl__coord_error(rep, 400, "invalid_parameter", "Content-Length",
                        "more than one Content-Length header");
        return true;
    }
    if (cl && te) {
        ctx->close = true;
        fl__coord_error(rep, 400, "invalid_parameter", "Transfer-Encoding",
                        "Content-Length together with Transfer-Encoding");
        return true;
    }
    if (cl) {
        char *end = NULL;
        len = strtoull(cl, &end, 10);
        if (!end || *end || cl[0] == '-' || cl[0] == '\0') {
            ctx->close = true;
            fl__coord_error(rep, 400, "invalid_parameter", "Content-Length", "bad Content-Length");
            return true;
        }
    } else if (te) {
        if (ctx->cap == 0) {
            fl__coord_error(rep, 413, "body_too_large", NULL, "this endpoint takes no body");
            return true;
        }
        fl__coord_error(rep, 411, "length_required", "Content-Length",
                        "request bodies need a Content-Length");
        return true;
    }
    if (len > ctx->cap) {
        fl__coord_error(rep, 413, "body_too_large", NULL,
                        "body of %llu bytes exceeds this endpoint's limit of %zu bytes", len,
                        ctx->cap);
        return true;
    }
    if (len > 0) {
        ctx->body = fl__alloc(fl__coord_alloc(co), (size_t)len);
        if (!ctx->body) {
            rep->retry_after_s = 1;
            fl__coord_error(rep, 503, "unavailable", NULL, "out of memory for the body");
            return true;
        }
        if ((ctx->route == FL__R_UPDATE || ctx->route == FL__R_SECAGG_POST) && co->body_mac) {
            ctx->mac = EVP_MAC_CTX_new(co->body_mac);
            if (ctx->mac && EVP_MAC_init(ctx->mac, co->body_mac_key, 32, NULL) != 1) {
                EVP_MAC_CTX_free(ctx->mac);
                ctx->mac = NULL; /* the handler tags the body itself */
            }
        }
    }
    ctx->body_len = (size_t)len;
    return false;
}

/* The context of every request whose own could not be allocated (never written, never
 * freed): such a request is answered 503 on its first call and its body discarded. */
static struct req_ctx oom_ctx;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    fl_coord *co = cls;
    struct req_ctx *ctx = *con_cls;
    struct fl__coord_reply rep;
    memset(&rep, 0, sizeof(rep));
    rep.retry_after_s = -1;
    if (ctx == &oom_ctx) {
        *upload_data_size = 0; /* answered 503 already: discard the body */
        return MHD_YES;
    }
    if (!ctx) {
        ctx = fl__calloc(fl__coord_alloc(co), 1, sizeof(*ctx));
        if (!ctx) {
            /* A clean 503 instead of a dropped connection; the connection closes after it,
             * since its body (if any) is not read. */
            *con_cls = &oom_ctx;
            fl__coord_oom(&rep);
            enum MHD_Result r = queue_reply(co, conn, FL__R_NOT_FOUND, &rep, true);
            fl__coord_reply_clear(co, &rep);
            return r;
        }
        *con_cls = ctx;
        atomic_fetch_add(&co->inflight, 1); /* until on_completed: fl_coord_stop drains */
        ctx->rq.co = co;
        ctx->rq.conn = conn;
        ctx->rq.method = method;
        ctx->route = route_of(&ctx->rq, url);
        ctx->rq.route = ctx->route;
        ctx->cap = route_cap(co, &ctx->rq, ctx->route, method);
        ctx->watch = co->watch ? conn_watch_of(conn) : NULL;
        bool late = ctx->watch && conn_late(co->watch, ctx->watch, mono_ms());
        if (late || early_checks(co, ctx, conn, method, version, &rep)) {
            ctx->answered = true;
            if (!conn_claim(ctx->watch, CONN_BUSY))
                return MHD_NO; /* the watchdog cut it first */
            if (late) {
                /* Headers complete past the deadline: 408 through MHD (TLS too). */
                atomic_fetch_add(&co->watch->closed_deadline, 1);
                ctx->close = true;
                fl__coord_error(&rep, 408, "request_timeout", NULL,
                                "the request did not arrive within its deadline");
            }
            enum MHD_Result r = queue_reply(co, conn, ctx->route, &rep, ctx->close);
            fl__coord_reply_clear(co, &rep);
            return r;
        }
        if (ctx->watch && ctx->body_len > 0) {
            atomic_store(&ctx->watch->allowance_ms,
                         (int64_t)(ctx->body_len * 1000 / co->request_min_body_rate));
            /* MHD now only reads the body, unless it has a 100 Continue to send first. */
            if (!MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT))
                atomic_store(&ctx->watch->quiet, true);
        }
        return MHD_YES;
    }
    if (ctx->parked) {
        /* Resumed long poll: run the handler again; it answers or parks once more. */
        ctx->parked = false;
        goto run_handler;
    }
    if (ctx->answered) {
        *upload_data_size = 0; /* discard whatever still arrives */
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        if (ctx->watch && conn_late(co->watch, ctx->watch, mono_ms())) {
            /* A body trickling past its deadline: 408 written here, on MHD's thread, where
             * MHD writes nothing else (plain HTTP; under TLS only MHD could, and it cannot
             * answer in the middle of a body), then closed (MHD_NO). */
            if (conn_claim_late(ctx->watch)) {
                atomic_fetch_add(&co->watch->closed_deadline, 1);
                if (!co->watch->tls)
                    conn_write_408(ctx->watch->fd);
            }
            return MHD_NO;
        }
        if (n > ctx->body_len - ctx->body_got) {
            /* More than Content-Length: MHD prevents this; refuse defensively. */
            ctx->answered = true;
            *upload_data_size = 0;
            fl__coord_error(&rep, 413, "body_too_large", NULL, "body longer than Content-Length");
            enum MHD_Result r = queue_reply(co, conn, ctx->route, &rep, ctx->close);
            fl__coord_reply_clear(co, &rep);
            return r;
        }
        memcpy(ctx->body + ctx->body_got, upload_data, n);
        if (ctx->mac && EVP_MAC_update(ctx->mac, (const unsigned char *)upload_data, n) != 1) {
            EVP_MAC_CTX_free(ctx->mac);
            ctx->mac = NULL;
        }
        ctx->body_got += n;
        atomic_fetch_add(&co->metrics.bytes_in, n);
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* Body complete. */
    ctx->answered = true;
    if (!conn_claim(ctx->watch, CONN_BUSY))
        return MHD_NO; /* cut by the watchdog (408 and/or shut) just before */
    ctx->rq.body = ctx->body;
    ctx->rq.body_len = ctx->body_got;
    if (ctx->mac) {
        size_t tl = 0;
        ctx->rq.body_tagged = ctx->body_got == ctx->body_len &&
                              EVP_MAC_final(ctx->mac, ctx->rq.body_tag, &tl,
                                            sizeof(ctx->rq.body_tag)) == 1 &&
                              tl == sizeof(ctx->rq.body_tag);
        EVP_MAC_CTX_free(ctx->mac);
        ctx->mac = NULL;
    }
run_handler:
    if (atomic_load(&co->stopped) && ctx->route != FL__R_HEALTHZ) {
        rep.retry_after_s = 5;
        fl__coord_error(&rep, 503, "unavailable", NULL, "coordinator is shutting down");
        ctx->close = true; /* the server is going away: no keep-alive */
    } else {
        ctx->rq.park = false;
        dispatch(&ctx->rq, &rep);
        if (ctx->rq.park) {
            /* Suspended by the handler (lock held there); no reply until resumed. */
            ctx->parked = true;
            fl__coord_reply_clear(co, &rep);
            return MHD_YES;
        }
    }
    if (!rep.json && !rep.bytes && !rep.blob && rep.status == 0)
        fl__coord_error(&rep, 500, "internal", NULL, "handler produced no reply");
    enum MHD_Result r = queue_reply(co, conn, ctx->route, &rep, ctx->close);
    fl__coord_reply_clear(co, &rep);
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    struct req_ctx *ctx = *con_cls;
    (void)cls;
    (void)conn;
    (void)toe;
    if (!ctx || ctx == &oom_ctx)
        return;
    if (ctx->watch) {
        /* Kept alive: the next request's deadline starts at its request line. */
        atomic_store(&ctx->watch->quiet, false);
        atomic_store(&ctx->watch->since_ms, mono_ms());
        atomic_store(&ctx->watch->phase, CONN_IDLE);
    }
    if (ctx->rq.waiter.draining) {
        ctx->rq.waiter.draining = false;
        atomic_fetch_sub(&ctx->rq.co->draining, 1);
    }
    if (ctx->rq.waiter.linked) {
        /* Only at daemon shutdown: a parked poll that was never resumed. */
        fl_coord *co = ctx->rq.co;
        fl__coord_lock(co);
        if (ctx->rq.waiter.linked) {
            struct fl__coord_waiter *w = &ctx->rq.waiter;
            if (w->prev)
                w->prev->next = w->next;
            else
                co->waiters = w->next;
            if (w->next)
                w->next->prev = w->prev;
            w->linked = false;
            co->n_waiters--;
        }
        fl__coord_unlock(co);
    }
    EVP_MAC_CTX_free(ctx->mac);
    fl_coord *co = ctx->rq.co;
    fl__free(fl__coord_alloc(co), ctx->body, ctx->body_len);
    fl__free(fl__coord_alloc(co), ctx, sizeof(*ctx));
    *con_cls = NULL;
    atomic_fetch_sub(&co->inflight, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    fl_coord *co = cls;
    char buf[256];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    fl__log(&co->logger, FL_LOG_WARN, "http: %s", buf);
}

fl_status fl__coord_http_start(fl_coord *co) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, co->listen_address, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)co->port_cfg);
    } else if (inet_pton(AF_INET6, co->listen_address, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)co->port_cfg);
        flags |= MHD_USE_IPv6;
    } else {
        return fl__err_set(&co->err, FL_ERR_MISUSE, "listen_address '%s' is not an IP literal",
                           co->listen_address);
    }
    if (co->tls_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            return fl__err_set(&co->err, FL_ERR_UNSUPPORTED, "libmicrohttpd was built without TLS");
        flags |= MHD_USE_TLS;
    }
    co->watch = watch_create(co);
    if (!co->watch)
        return fl__err_set(&co->err, FL_ERR_NOMEM, "out of memory");
    struct MHD_OptionItem opts[18];
    size_t k = 0;
#define OPT(o, v, p) opts[k++] = (struct MHD_OptionItem){o, (intptr_t)(v), p}
    OPT(MHD_OPTION_THREAD_POOL_SIZE, co->threads, NULL);
    OPT(MHD_OPTION_CONNECTION_TIMEOUT, co->limits.connection_timeout_s, NULL);
    OPT(MHD_OPTION_PER_IP_CONNECTION_LIMIT, co->limits.per_ip_connections, NULL);
    OPT(MHD_OPTION_CONNECTION_LIMIT, co->limits.max_connections, NULL);
    OPT(MHD_OPTION_CONNECTION_MEMORY_LIMIT, co->limits.connection_memory, NULL);
    OPT(MHD_OPTION_SOCK_ADDR, 0, &ss);
    OPT(MHD_OPTION_NOTIFY_COMPLETED, on_completed, co);
    OPT(MHD_OPTION_NOTIFY_CONNECTION, on_connection, co->watch);
    OPT(MHD_OPTION_URI_LOG_CALLBACK, on_request_line, co);
    OPT(MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL);
    if (co->tls_cert) {
        OPT(MHD_OPTION_HTTPS_MEM_CERT, 0, co->tls_cert);
        OPT(MHD_OPTION_HTTPS_MEM_KEY, 0, co->tls_key);
    }
    OPT(MHD_OPTION_END, 0, NULL);
#undef OPT
    co->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, co,
                                  /* the logger must come first, or MHD logs to stderr */
                                  MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, co,
                                  MHD_OPTION_ARRAY, opts,
                                  MHD_OPTION_END);
    if (!co->daemon) {
        watch_destroy(co->watch);
        co->watch = NULL;
        return fl__err_set(&co->err, FL_ERR_IO, "could not start the HTTP server on %s:%u",
                           co->listen_address, co->port_cfg);
    }
    if (pthread_create(&co->watch->thread, NULL, watch_main, co->watch) == 0)
        co->watch->thread_started = true;
    else
        fl__log(&co->logger, FL_LOG_WARN,
                "http: no watchdog thread: request deadlines are not enforced");
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(co->daemon, MHD_DAEMON_INFO_BIND_PORT);
    co->port = info ? info->port : co->port_cfg;
    return FL_OK;
}

void fl__coord_http_quiesce(fl_coord *co) {
    if (!co->daemon || co->quiesced_fd >= 0)
        return;
    MHD_socket fd = MHD_quiesce_daemon(co->daemon);
    if (fd == MHD_INVALID_SOCKET)
        return;
    /* MHD's threads may still hold the descriptor until MHD_stop_daemon, so it is closed
     * only then; shutting it down now makes the kernel refuse new connections (on Linux a
     * listening socket stops listening) instead of queueing them unaccepted. */
    shutdown(fd, SHUT_RDWR);
    co->quiesced_fd = fd;
}

void fl__coord_http_stop(fl_coord *co) {
    watch_stop_thread(co->watch);
    if (co->daemon) {
        MHD_stop_daemon(co->daemon);
        co->daemon = NULL;
    }
    if (co->quiesced_fd >= 0) {
        close(co->quiesced_fd);
        co->quiesced_fd = -1;
    }
    watch_destroy(co->watch);
    co->watch = NULL;
}

void fl__coord_http_closed(const fl_coord *co, uint64_t *deadline, uint64_t *eof) {
    /* The watch lives from http_start until after the daemon (and so every handler that
     * could call this) has stopped. */
    const struct fl__coord_http_watch *w = co->watch;
    *deadline = w ? (uint64_t)atomic_load(&w->closed_deadline) : 0;
    *eof = w ? (uint64_t)atomic_load(&w->closed_eof) : 0;
}
