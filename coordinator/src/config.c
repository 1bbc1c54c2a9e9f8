/* Configuration file loading (JSON via Jansson). Format: docs/coordinator.md. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

struct fl_coord_config_doc {
    json_t *root;
    char *dir;         /* directory of the config file */
    char *tls_cert;    /* file contents */
    char *tls_key;
};

void fl_coord_config_doc_free(fl_coord_config_doc *doc) {
    if (!doc)
        return;
    if (doc->root)
        json_decref(doc->root);
    free(doc->dir);
    free(doc->tls_cert);
    if (doc->tls_key) {
        fl_memzero(doc->tls_key, strlen(doc->tls_key));
        free(doc->tls_key);
    }
    free(doc);
}

/* Resolves path relative to the config file's directory into buf. */
static const char *resolve(const fl_coord_config_doc *doc, const char *path, char *buf,
                           size_t n) {
    if (path[0] == '/') {
        snprintf(buf, n, "%s", path); /* for error messages; the full path is read */
        return path;
    }
    snprintf(buf, n, "%s/%s", doc->dir, path);
    return buf;
}

static const char *const top_keys[] = {"listen", "port", "threads", "database",
                                       "admin_token_sha256", "admin_token_file",
                                       "signing_key_file", "tls", "limits", "max_long_poll_s",
                                       "log_level", "audit", "secagg", "shutdown_drain_s",
                                       "database_busy_timeout_ms", NULL};

static bool known(const char *k, const char *const *keys) {
    for (size_t i = 0; keys[i]; i++)
        if (strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

#define BAD(code, ...)                                                                         \
    do {                                                                                       \
        snprintf(err, errlen, __VA_ARGS__);                                                    \
        rc = (code);                                                                           \
        goto out_fail;                                                                         \
    } while (0)

static bool get_uint(json_t *o, const char *k, unsigned long long max, unsigned long long *out) {
    json_t *v = json_object_get(o, k);
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (unsigned long long)json_integer_value(v) > max)
        return false;
    *out = (unsigned long long)json_integer_value(v);
    return true;
}

/* Reads a secret file: trims trailing whitespace. */
static fl_status read_secret(char **out, const char *path) {
    size_t n = 0;
    fl_status rc = fl__coord_read_file(out, &n, path, 4096);
    if (rc != FL_OK)
        return rc;
    while (n && ((*out)[n - 1] == '\n' || (*out)[n - 1] == '\r' || (*out)[n - 1] == ' '))
        (*out)[--n] = '\0';
    return FL_OK;
}

fl_status fl_coord_config_load(fl_coord_config_doc **out, fl_coord_config *cfg, const char *path,
                               char *errmsg, size_t errmsg_len) {
    char local[256], pbuf[4096];
    char *err = errmsg ? errmsg : local;
    size_t errlen = errmsg ? errmsg_len : sizeof(local);
    if (errlen)
        err[0] = '\0';
    if (!out || !cfg || !path || cfg->struct_size != sizeof(*cfg)) {
        snprintf(err, errlen, "out, cfg (initialised) and path are required");
        return FL_ERR_MISUSE;
    }
    *out = NULL;
    fl_status rc = FL_OK;
    char *secret = NULL;
    fl_coord_config_doc *doc = calloc(1, sizeof(*doc));
    char *pcopy = strdup(path);
    if (!doc || !pcopy) {
        free(pcopy);
        free(doc);
        return FL_ERR_NOMEM;
    }
    doc->dir = strdup(dirname(pcopy));
    free(pcopy);
    if (!doc->dir)
        BAD(FL_ERR_NOMEM, "out of memory");
    json_error_t jerr;
    doc->root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc->root)
        BAD(jerr.position == 0 && jerr.line <= 0 ? FL_ERR_IO : FL_ERR_FORMAT,
            "%s: %s (line %d)", path, jerr.text, jerr.line);
    if (!json_is_object(doc->root))
        BAD(FL_ERR_FORMAT, "%s: the configuration must be a JSON object", path);
    const char *key;
    json_t *v;
    json_object_foreach(doc->root, key, v) {
        if (!known(key, top_keys))
            BAD(FL_ERR_FORMAT, "unknown configuration field '%.64s'", key);
    }
    json_t *o = doc->root;
    if ((v = json_object_get(o, "listen"))) {
        if (!json_is_string(v))
            BAD(FL_ERR_FORMAT, "'listen' must be an IP address string");
        cfg->listen_address = json_string_value(v);
    }
    unsigned long long u = cfg->port;
    if (!get_uint(o, "port", 65535, &u))
        BAD(FL_ERR_FORMAT, "'port' must be an integer 0..65535");
    cfg->port = (unsigned)u;
    u = cfg->threads;
    if (!get_uint(o, "threads", 256, &u) || u < 1)
        BAD(FL_ERR_FORMAT, "'threads' must be an integer 1..256");
    cfg->threads = (unsigned)u;
    u = cfg->max_long_poll_s;
    if (!get_uint(o, "max_long_poll_s", 60, &u))
        BAD(FL_ERR_FORMAT, "'max_long_poll_s' must be an integer 0..60");
    cfg->max_long_poll_s = (unsigned)u;
    u = cfg->shutdown_drain_s;
    if (!get_uint(o, "shutdown_drain_s", 300, &u))
        BAD(FL_ERR_FORMAT, "'shutdown_drain_s' must be an integer 0..300");
    cfg->shutdown_drain_s = (unsigned)u;
    u = cfg->db_busy_timeout_ms;
    if (!get_uint(o, "database_busy_timeout_ms", 600000, &u))
        BAD(FL_ERR_FORMAT, "'database_busy_timeout_ms' must be an integer 0..600000");
    cfg->db_busy_timeout_ms = (unsigned)u;
    if ((v = json_object_get(o, "database"))) {
        if (!json_is_string(v))
            BAD(FL_ERR_FORMAT, "'database' must be a path string");
        cfg->db_path = json_string_value(v);
        /* A relative path is the config file's neighbour; an SQLite URI ("file:...", e.g.
         * with ?vfs= or ?mode=) is passed through as written. */
        if (cfg->db_path[0] != '/' && strcmp(cfg->db_path, ":memory:") != 0 &&
            strncmp(cfg->db_path, "file:", 5) != 0) {
            snprintf(pbuf, sizeof(pbuf), "%s/%s", doc->dir, cfg->db_path);
            json_object_set_new(o, "database", json_string(pbuf));
            cfg->db_path = json_string_value(json_object_get(o, "database"));
        }
    }
    if ((v = json_object_get(o, "secagg"))) {
        json_t *ut = json_object_get(v, "unmask_threads");
        if (!json_is_object(v) || json_object_size(v) != (ut ? 1u : 0u))
            BAD(FL_ERR_FORMAT, "'secagg' must be {\"unmask_threads\": 1..64}");
        u = cfg->secagg_unmask_threads;
        if (!get_uint(v, "unmask_threads", 64, &u) || u < 1)
            BAD(FL_ERR_FORMAT, "'secagg.unmask_threads' must be an integer 1..64");
        cfg->secagg_unmask_threads = (unsigned)u;
    }
    if ((v = json_object_get(o, "log_level"))) {
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        if (strcmp(s, "debug") == 0)
            cfg->logger.min_level = FL_LOG_DEBUG;
        else if (strcmp(s, "info") == 0)
            cfg->logger.min_level = FL_LOG_INFO;
        else if (strcmp(s, "warn") == 0)
            cfg->logger.min_level = FL_LOG_WARN;
        else if (strcmp(s, "error") == 0)
            cfg->logger.min_level = FL_LOG_ERROR;
        else
            BAD(FL_ERR_FORMAT, "'log_level' must be debug, info, warn or error");
    }
    json_t *ah = json_object_get(o, "admin_token_sha256");
    json_t *af = json_object_get(o, "admin_token_file");
    if (ah && af)
        BAD(FL_ERR_FORMAT, "give admin_token_sha256 or admin_token_file, not both");
    if (ah) {
        if (!json_is_string(ah) || !fl__coord_unhex(cfg->admin_token_sha256, 32,
                                                    json_string_value(ah)))
            BAD(FL_ERR_FORMAT, "'admin_token_sha256' must be 64 hex characters");
        cfg->has_admin_token = 1;
    } else if (af) {
        if (!json_is_string(af))
            BAD(FL_ERR_FORMAT, "'admin_token_file' must be a path string");
        if (read_secret(&secret, resolve(doc, json_string_value(af), pbuf, sizeof(pbuf))) != FL_OK)
            BAD(FL_ERR_IO, "cannot read admin_token_file %s", pbuf);
        if (strlen(secret) < 20)
            BAD(FL_ERR_FORMAT, "the admin token must have at least 20 characters");
        fl__coord_sha256(cfg->admin_token_sha256, secret, strlen(secret));
        cfg->has_admin_token = 1;
        fl_memzero(secret, strlen(secret));
        free(secret);
        secret = NULL;
    }
    if ((v = json_object_get(o, "signing_key_file"))) {
        if (!json_is_string(v))
            BAD(FL_ERR_FORMAT, "'signing_key_file' must be a path string");
        if (read_secret(&secret, resolve(doc, json_string_value(v), pbuf, sizeof(pbuf))) != FL_OK)
            BAD(FL_ERR_IO, "cannot read signing_key_file %s", pbuf);
        if (!fl__coord_unhex(cfg->signing_seed, 32, secret))
            BAD(FL_ERR_FORMAT, "signing_key_file must hold a 64-hex-character Ed25519 seed");
        cfg->has_signing_key = 1;
        fl_memzero(secret, strlen(secret));
        free(secret);
        secret = NULL;
    }
    if ((v = json_object_get(o, "tls"))) {
        json_t *cf = json_object_get(v, "cert_file"), *kf = json_object_get(v, "key_file");
        if (!json_is_object(v) || !json_is_string(cf) || !json_is_string(kf))
            BAD(FL_ERR_FORMAT, "'tls' must be {\"cert_file\": ..., \"key_file\": ...}");
        if (fl__coord_read_file(&doc->tls_cert, NULL, resolve(doc, json_string_value(cf), pbuf,
                                                              sizeof(pbuf)), 1 << 20) != FL_OK)
            BAD(FL_ERR_IO, "cannot read tls.cert_file %s", pbuf);
        if (fl__coord_read_file(&doc->tls_key, NULL, resolve(doc, json_string_value(kf), pbuf,
                                                             sizeof(pbuf)), 1 << 20) != FL_OK)
            BAD(FL_ERR_IO, "cannot read tls.key_file %s", pbuf);
        cfg->tls_cert_pem = doc->tls_cert;
        cfg->tls_key_pem = doc->tls_key;
    }
    if ((v = json_object_get(o, "limits"))) {
        static const char *const lkeys[] = {"enroll_bytes", "checkin_bytes", "admin_json_bytes",
                                            "model_bytes", "connection_timeout_s",
                                            "per_ip_connections", "max_connections",
                                            "connection_memory", "request_deadline_s",
                                            "request_min_body_rate", NULL};
        if (!json_is_object(v))
            BAD(FL_ERR_FORMAT, "'limits' must be an object");
        json_t *lv;
        json_object_foreach(v, key, lv) {
            if (!known(key, lkeys))
                BAD(FL_ERR_FORMAT, "unknown field 'limits.%.64s'", key);
        }
        fl_coord_limits *l = &cfg->limits;
        unsigned long long x;
#define LIM(name, field) \
        x = l->field; \
        if (!get_uint(v, name, UINT32_MAX, &x)) \
            BAD(FL_ERR_FORMAT, "'limits.%s' must be a non-negative integer", name); \
        l->field = x;
        LIM("enroll_bytes", enroll_bytes)
        LIM("checkin_bytes", checkin_bytes)
        LIM("admin_json_bytes", admin_json_bytes)
        LIM("model_bytes", model_bytes)
        LIM("connection_timeout_s", connection_timeout_s)
        LIM("per_ip_connections", per_ip_connections)
        LIM("max_connections", max_connections)
        LIM("connection_memory", connection_memory)
#undef LIM
        /* Deadline fields live at the end of fl_coord_config (grown after the limits). */
        x = cfg->request_deadline_s;
        if (!get_uint(v, "request_deadline_s", UINT32_MAX, &x))
            BAD(FL_ERR_FORMAT, "'limits.request_deadline_s' must be a non-negative integer");
        cfg->request_deadline_s = (unsigned)x;
        x = cfg->request_min_body_rate;
        if (!get_uint(v, "request_min_body_rate", UINT32_MAX, &x))
            BAD(FL_ERR_FORMAT, "'limits.request_min_body_rate' must be a non-negative integer");
        cfg->request_min_body_rate = (unsigned)x;
    }
    if ((v = json_object_get(o, "audit"))) {
        static const char *const akeys[] = {"origin", "pseudonym_key_file", "retention_days",
                                            NULL};
        if (!json_is_object(v))
            BAD(FL_ERR_FORMAT, "'audit' must be an object");
        json_t *av;
        json_object_foreach(v, key, av) {
            if (!known(key, akeys))
                BAD(FL_ERR_FORMAT, "unknown field 'audit.%.64s'", key);
        }
        if ((av = json_object_get(v, "origin"))) {
            if (!json_is_string(av))
                BAD(FL_ERR_FORMAT, "'audit.origin' must be a string");
            cfg->audit_origin = json_string_value(av);
        }
        unsigned long long d = cfg->retention_days;
        if (!get_uint(v, "retention_days", 36500, &d))
            BAD(FL_ERR_FORMAT, "'audit.retention_days' must be an integer 0..36500");
        cfg->retention_days = (unsigned)d;
        if ((av = json_object_get(v, "pseudonym_key_file"))) {
            if (!json_is_string(av))
                BAD(FL_ERR_FORMAT, "'audit.pseudonym_key_file' must be a path string");
            if (read_secret(&secret, resolve(doc, json_string_value(av), pbuf, sizeof(pbuf))) !=
                FL_OK)
                BAD(FL_ERR_IO, "cannot read audit.pseudonym_key_file %s", pbuf);
            if (!fl__coord_unhex(cfg->pseudonym_key, 32, secret))
                BAD(FL_ERR_FORMAT, "audit.pseudonym_key_file must hold 64 hex characters");
            cfg->has_pseudonym_key = 1;
            fl_memzero(secret, strlen(secret));
            free(secret);
            secret = NULL;
        }
    }
    *out = doc;
    return FL_OK;
out_fail:
    if (secret) {
        fl_memzero(secret, strlen(secret));
        free(secret);
    }
    fl_coord_config_doc_free(doc);
    return rc;
}
