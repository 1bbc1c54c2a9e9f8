/* Slow request headers (slowloris) against the request deadline (docs/protocol.md section 7):
 * a client that trickles its request line or its header block past
 * limits.request_deadline_s gets its connection closed at the deadline with no answer at
 * all (libmicrohttpd 0.9.75 accepts no response before the header block is complete, and
 * writing a 408 into the socket behind its back could interleave with an error answer of
 * its own; section 7 says why), counted once each as
 * flotilla_http_connections_closed_total{reason="deadline"} and never as an answered 408;
 * while several such clients trickle, other clients are served at once. Plain HTTP, the
 * coordinator in-process with a 2 s deadline; waits and bounds times FL_TEST_TIME_SCALE. */
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "coord_testkit.h"

/* The coordinator with a 2 s request deadline (times S) and a 30 s idle timeout (times S),
 * so that only the deadline can close a trickling connection in the test's time. */
static int setup_slow(void **state) {
    struct fx *f = fx_new();
    fl_coord_config cfg;
    fx_config_init(f, &cfg);
    cfg.request_deadline_s = (unsigned)fl_test_scaled(2);
    cfg.limits.connection_timeout_s = (unsigned)fl_test_scaled(30);
    char err[256] = "";
    if (fl_coord_create(&f->co, &cfg, err, sizeof(err)) != FL_OK) {
        fprintf(stderr, "create: %s\n", err);
        fx_free(f);
        return -1;
    }
    if (fl_coord_start(f->co) != FL_OK) {
        fprintf(stderr, "start: %s\n", fl_coord_errmsg(f->co));
        fx_free(f);
        return -1;
    }
    f->port = fl_coord_port(f->co);
    *state = f;
    return 0;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int tcp_connect(unsigned port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One slow client: sends head at once (may be empty), then trickle one byte every gap_s
 * seconds, and records how its connection ended. */
struct slow {
    unsigned port;
    const char *head;    /* sent at once */
    const char *trickle; /* then byte by byte (long enough to outlast the deadline) */
    double gap_s;
    /* results */
    pthread_t th;
    size_t got;     /* bytes the server sent (expected: none) */
    char first[64]; /* the first of them, for the failure message */
    bool ended;     /* the server ended the connection (FIN or reset) */
    bool reset;     /* ... by a reset (ECONNRESET / EPIPE) rather than a FIN */
    size_t sent;    /* trickled bytes sent before the end */
    double elapsed; /* seconds from connect to the end */
};

/* Waits up to ms for the server to send or close; reads what it sent into s. Returns true
 * when the connection ended. */
static bool slow_wait(struct slow *s, int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, ms) > 0) {
        char buf[512];
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k > 0) {
            if (s->got < sizeof(s->first) - 1) {
                size_t c = (size_t)k < sizeof(s->first) - 1 - s->got
                               ? (size_t)k
                               : sizeof(s->first) - 1 - s->got;
                memcpy(s->first + s->got, buf, c);
            }
            s->got += (size_t)k;
            continue;
        }
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        s->ended = true;
        s->reset = k < 0;
        return true;
    }
    return false;
}

static void *slow_main(void *arg) {
    struct slow *s = arg;
    int fd = tcp_connect(s->port);
    double t0 = mono_s();
    if (fd < 0)
        return NULL;
    size_t hn = strlen(s->head);
    if (hn && send(fd, s->head, hn, MSG_NOSIGNAL) != (ssize_t)hn) {
        s->ended = s->reset = true;
    }
    for (size_t i = 0; !s->ended && s->trickle[i]; i++) {
        if (send(fd, s->trickle + i, 1, MSG_NOSIGNAL) != 1) {
            s->ended = s->reset = true; /* EPIPE / ECONNRESET: closed under us */
            break;
        }
        s->sent++;
        if (slow_wait(s, fd, (int)(s->gap_s * 1000)))
            break;
    }
    if (!s->ended)
        (void)slow_wait(s, fd, (int)fl_test_scaled(15000));
    s->elapsed = mono_s() - t0;
    close(fd);
    return NULL;
}

/* Sum of every flotilla_http_requests_total series with code="408" (0 when none). */
static long answered_408(struct fx *f) {
    struct resp r = http_req(f, "GET", "/metrics", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    long n = 0;
    for (const char *p = r.body; (p = strstr(p, "\nflotilla_http_requests_total{")) != NULL;) {
        p++;
        const char *eol = strchr(p, '\n');
        const char *code = strstr(p, "code=\"408\"}");
        if (code && (!eol || code < eol))
            n += strtol(strchr(code, '}') + 2, NULL, 10);
    }
    resp_free(&r);
    return n;
}

/* Four slow clients at once, two trickling the request line and two the header block after
 * a complete request line (one of them a POST announcing a body), one byte every 0.25 s
 * (their requests would take ~10-30 s): each is closed at the 2 s deadline (well before the
 * 30 s idle timeout) without a single byte of answer, and counted once as a deadline close;
 * nothing is counted as an answered 408. Meanwhile /healthz on other connections answers 200
 * within 1 s every time. */
static void test_slow_headers_closed(void **state) {
    struct fx *f = *state;
    const long S = fl_test_time_scale();
    const double before_dl = metric_value(f, "flotilla_http_connections_closed_total"
                                             "{reason=\"deadline\"}");
    const long before_408 = answered_408(f);
    static const char filler[] =
        "X-Filler-0: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
        "X-Filler-1: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    char line_trickle[256], post_trickle[256];
    snprintf(line_trickle, sizeof(line_trickle), "GET /healthz HTTP/1.1\r\nHost: x\r\n%s\r\n",
             filler);
    snprintf(post_trickle, sizeof(post_trickle),
             "Content-Type: application/json\r\n%s"
             "Content-Length: 2\r\n\r\n{}",
             filler);
    struct slow s[4] = {
        {.head = "", .trickle = line_trickle},
        {.head = "GE", .trickle = line_trickle + 2},
        {.head = "GET /healthz HTTP/1.1\r\n", .trickle = line_trickle + 23},
        {.head = "POST /v1/enroll HTTP/1.1\r\nHost: x\r\n", .trickle = post_trickle},
    };
    for (int i = 0; i < 4; i++) {
        s[i].port = f->port;
        s[i].gap_s = 0.25 * (double)S;
        assert_int_equal(pthread_create(&s[i].th, NULL, slow_main, &s[i]), 0);
    }
    /* Others are served meanwhile: a fresh connection each time, for 3 s (past the deadline
     * of the slow ones). */
    int served = 0;
    double t_end = mono_s() + 3.0 * (double)S;
    while (mono_s() < t_end) {
        double t0 = mono_s();
        struct resp r = http_req(f, "GET", "/healthz", NULL, NULL, NULL, 0, NULL);
        double el = mono_s() - t0;
        if (r.status != 200 || el > 1.0 * (double)S)
            fprintf(stderr, "/healthz during the slow clients: %ld after %.2f s\n", r.status, el);
        assert_int_equal(r.status, 200);
        assert_true(el < 1.0 * (double)S);
        resp_free(&r);
        served++;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_true(served >= 5);
    for (int i = 0; i < 4; i++) {
        pthread_join(s[i].th, NULL);
        if (s[i].got || !s[i].ended || s[i].elapsed < 1.5 * (double)S ||
            s[i].elapsed > 12.0 * (double)S || getenv("FL_TEST_VERBOSE"))
            fprintf(stderr,
                    "slow client %d: %zu bytes back (\"%s\"), ended %d (reset %d) after %.2f s, "
                    "%zu bytes trickled\n",
                    i, s[i].got, s[i].first, s[i].ended, s[i].reset, s[i].elapsed, s[i].sent);
        assert_true(s[i].ended);
        /* No answer (neither 408 nor anything else), at the deadline (not before it, nor at
         * the idle timeout), before the request was complete. */
        assert_int_equal(s[i].got, 0);
        assert_true(s[i].elapsed >= 1.5 * (double)S);
        assert_true(s[i].elapsed < 12.0 * (double)S);
        assert_true(s[i].sent + 1 < strlen(s[i].trickle));
    }
    /* Each counted once as a deadline close, none as an answered 408. */
    double dl = metric_value(f, "flotilla_http_connections_closed_total{reason=\"deadline\"}");
    assert_true(dl - before_dl == 4.0);
    assert_int_equal(answered_408(f), before_408);
    /* And the coordinator still serves. */
    struct resp r = http_req(f, "GET", "/healthz", NULL, NULL, NULL, 0, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slow_headers_closed, setup_slow, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
