/* The default transport: HTTPS over one libcurl easy handle, blocking (the whole exchange
 * happens inside recv). Connections are reused between requests. No signals (NOSIGNAL), no
 * redirects, only https:// (http:// only to loopback hosts, for tests and simulation), and
 * an optional public-key pin (CURLOPT_PINNEDPUBLICKEY). */

#include <stdio.h>
#include <string.h>

#include "client_internal.h"

#ifdef FL_CLIENT_HAVE_CURL
#include <curl/curl.h>
#endif

struct fl_client_curl {
    fl_allocator alloc;                /* caller's allocator (copied) */
    char *base_url;                    /* "https://host:port" without a trailing slash */
    char *pin;                         /* CURLOPT_PINNEDPUBLICKEY value or NULL */
    char *ca_file;                     /* CA bundle or NULL */
    uint32_t connect_timeout_ms;
#ifdef FL_CLIENT_HAVE_CURL
    CURL *easy;                        /* reused handle (keeps the connection) */
#endif
    const fl_client_request *req;      /* request accepted by send */
    fl_client_response *resp;          /* sink during perform */
    fl_status cb_err;                  /* first error from a callback */
};

void fl_client_curl_config_init(fl_client_curl_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->connect_timeout_ms = 10000;
}

static void msg(char *out, size_t len, const char *m) {
    if (out && len)
        snprintf(out, len, "%s", m);
}

/* https://..., or http:// to a loopback host only. */
static int base_url_ok(const char *u) {
    static const char *const loop[] = {"http://127.0.0.1", "http://localhost", "http://[::1]"};
    size_t n = strlen(u);
    if (n < 9 || n > 512 || u[n - 1] == '/')
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)u[i] <= ' ' || u[i] == 0x7f)
            return 0;
    if (strncmp(u, "https://", 8) == 0)
        return 1;
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(loop[i]);
        if (strncmp(u, loop[i], l) == 0 && (u[l] == '\0' || u[l] == ':'))
            return 1;
    }
    return 0;
}

void fl_client_curl_destroy(fl_client_curl *t) {
    if (!t)
        return;
#ifdef FL_CLIENT_HAVE_CURL
    if (t->easy)
        curl_easy_cleanup(t->easy);
#endif
    if (t->base_url)
        fl__free(&t->alloc, t->base_url, strlen(t->base_url) + 1);
    if (t->pin)
        fl__free(&t->alloc, t->pin, strlen(t->pin) + 1);
    if (t->ca_file)
        fl__free(&t->alloc, t->ca_file, strlen(t->ca_file) + 1);
    fl_allocator a = t->alloc;
    fl__free(&a, t, sizeof(*t));
}

fl_status fl_client_curl_create(fl_client_curl **out, const fl_client_curl_config *cfg,
                                char *errmsg_out, size_t errmsg_len) {
    fl_allocator a;
    if (out)
        *out = NULL;
    if (!out || !cfg || cfg->struct_size < sizeof(*cfg)) {
        msg(errmsg_out, errmsg_len, "out and cfg (from fl_client_curl_config_init) are required");
        return FL_ERR_MISUSE;
    }
    if (!cfg->base_url || !base_url_ok(cfg->base_url)) {
        msg(errmsg_out, errmsg_len,
            "cfg.base_url: https://host[:port] (http:// only to 127.0.0.1, localhost, [::1]), "
            "no trailing slash");
        return FL_ERR_MISUSE;
    }
    if (fl__allocator_copy(&a, cfg->allocator) != FL_OK) {
        msg(errmsg_out, errmsg_len, "cfg.allocator: struct_size, alloc and free are required");
        return FL_ERR_MISUSE;
    }
#if defined(FL_CRYPTO_MBEDTLS_ONLY)
    /* libcurl links OpenSSL or GnuTLS, which the embedded profile must not pull in. */
    msg(errmsg_out, errmsg_len,
        "the embedded (mbedTLS-only) SDK has no libcurl transport: set "
        "fl_client_config.transport to the app's own HTTPS transport");
    return FL_ERR_UNSUPPORTED;
#elif !defined(FL_CLIENT_HAVE_CURL)
    msg(errmsg_out, errmsg_len, "this build has no libcurl transport");
    return FL_ERR_UNSUPPORTED;
#else
    fl_client_curl *t = fl__calloc(&a, 1, sizeof(*t));
    if (!t) {
        msg(errmsg_out, errmsg_len, "out of memory");
        return FL_ERR_NOMEM;
    }
    t->alloc = a;
    t->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 10000;
    t->base_url = fl__strdup(&t->alloc, cfg->base_url);
    if (cfg->pinned_public_key)
        t->pin = fl__strdup(&t->alloc, cfg->pinned_public_key);
    if (cfg->ca_file)
        t->ca_file = fl__strdup(&t->alloc, cfg->ca_file);
    if (!t->base_url || (cfg->pinned_public_key && !t->pin) || (cfg->ca_file && !t->ca_file)) {
        fl_client_curl_destroy(t);
        msg(errmsg_out, errmsg_len, "out of memory");
        return FL_ERR_NOMEM;
    }
    t->easy = curl_easy_init();
    if (!t->easy) {
        fl_client_curl_destroy(t);
        msg(errmsg_out, errmsg_len, "curl_easy_init failed");
        return FL_ERR_NOMEM;
    }
    *out = t;
    return FL_OK;
#endif
}

#ifdef FL_CLIENT_HAVE_CURL
static size_t on_body(char *p, size_t sz, size_t n, void *u) {
    struct fl_client_curl *t = u;
    fl_status rc = fl_client_response_append(t->resp, p, sz * n);
    if (rc != FL_OK) {
        if (t->cb_err == FL_OK)
            t->cb_err = rc;
        return 0; /* aborts the transfer */
    }
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *u) {
    struct fl_client_curl *t = u;
    size_t len = sz * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0)
        return len; /* status line: a new response starts (e.g. after 100 Continue) */
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return len;
    size_t nl = (size_t)(colon - p);
    fl_status rc = fl_client_response_add_header(t->resp, p, nl, colon + 1, len - nl - 1);
    if (rc != FL_OK) {
        if (t->cb_err == FL_OK)
            t->cb_err = rc;
        return 0;
    }
    return len;
}

static fl_status curl_send(void *ctx, const fl_client_request *req) {
    struct fl_client_curl *t = ctx;
    if (!req || !req->method || !req->path || req->path[0] != '/')
        return FL_ERR_MISUSE;
    t->req = req;
    return FL_OK;
}

static fl_status curl_recv(void *ctx, fl_client_response *resp) {
    struct fl_client_curl *t = ctx;
    const fl_client_request *req = t->req;
    if (!req)
        return FL_ERR_MISUSE;
    t->req = NULL;
    t->resp = resp;
    t->cb_err = FL_OK;
    char url[1024];
    int n = snprintf(url, sizeof(url), "%s%s", t->base_url, req->path);
    if (n < 0 || (size_t)n >= sizeof(url))
        return FL_ERR_MISUSE;
    struct curl_slist *hl = NULL, *tmp;
    fl_status rc = FL_OK;
    for (size_t i = 0; i < req->n_headers && rc == FL_OK; i++) {
        tmp = curl_slist_append(hl, req->headers[i]);
        if (!tmp)
            rc = FL_ERR_NOMEM;
        else
            hl = tmp;
    }
    if (rc == FL_OK && (tmp = curl_slist_append(hl, "Expect:")) != NULL)
        hl = tmp;
    CURL *e = t->easy;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)t->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (t->pin)
        curl_easy_setopt(e, CURLOPT_PINNEDPUBLICKEY, t->pin);
    if (t->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, t->ca_file);
    if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body ? (const char *)req->body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    if (rc == FL_OK) {
        CURLcode cc = curl_easy_perform(e);
        if (cc == CURLE_OK) {
            long code = 0;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
            rc = fl_client_response_set_status(resp, (int)code);
            if (rc != FL_OK)
                rc = FL_ERR_PROTOCOL;
        } else if (t->cb_err != FL_OK) {
            rc = t->cb_err;
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
            rc = FL_ERR_TIMEOUT;
        } else if (cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH || cc == CURLE_PEER_FAILED_VERIFICATION) {
            rc = FL_ERR_CRYPTO;
        } else {
            rc = FL_ERR_IO;
        }
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hl);
    t->resp = NULL;
    return rc;
}

static void curl_cancel(void *ctx) {
    struct fl_client_curl *t = ctx;
    t->req = NULL;
}
#endif

fl_status fl_client_curl_transport(fl_client_curl *t, fl_client_transport *out) {
    if (!t || !out)
        return FL_ERR_MISUSE;
#ifdef FL_CLIENT_HAVE_CURL
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->send = curl_send;
    out->recv = curl_recv;
    out->cancel = curl_cancel;
    out->ctx = t;
    return FL_OK;
#else
    return FL_ERR_UNSUPPORTED;
#endif
}
