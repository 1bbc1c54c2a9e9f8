/* Configuration errors, field by field: every invalid key or value of the JSON config file
 * (fl_coord_config_load) gets FL_ERR_FORMAT or FL_ERR_IO and a message that names the field;
 * every out-of-range field of fl_coord_config is refused by fl_coord_create with
 * FL_ERR_MISUSE naming it (each bound tested on both sides); and the public calls refuse NULL
 * handles and arguments, or a handle in the wrong state, as coordinator.h documents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_test.h"
#include "flotilla/coordinator.h"

static char g_dir[64];

static void write_file(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static fl_status load(const char *text, fl_coord_config *cfg, fl_coord_config_doc **doc,
                      char *err, size_t n) {
    write_file("c.json", text);
    char p[256];
    snprintf(p, sizeof(p), "%s/c.json", g_dir);
    fl_coord_config_init(cfg);
    return fl_coord_config_load(doc, cfg, p, err, n);
}

#define HEX64 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

/* Every invalid field of the file: the status and a piece of the message. */
static void test_file_field_errors(void **state) {
    (void)state;
    write_file("short.token", "too-short\n");
    write_file("bad.key", "not hex at all\n");
    write_file("good.key", HEX64 "\r\n \n");
    char big[5000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    write_file("big.token", big); /* over the 4 KiB a secret file may hold */
    static const struct {
        const char *json;
        fl_status want;
        const char *msg;
    } cases[] = {
        {"{\"admin_token_file\":\"big.token\"}", FL_ERR_IO, "admin_token_file"},
        {"{\"listen\":5}", FL_ERR_FORMAT, "'listen'"},
        {"{\"port\":-1}", FL_ERR_FORMAT, "'port'"},
        {"{\"port\":\"80\"}", FL_ERR_FORMAT, "'port'"},
        {"{\"threads\":257}", FL_ERR_FORMAT, "'threads'"},
        {"{\"threads\":0}", FL_ERR_FORMAT, "'threads' must be an integer 1..256"},
        {"{\"max_long_poll_s\":61}", FL_ERR_FORMAT, "'max_long_poll_s'"},
        {"{\"database\":7}", FL_ERR_FORMAT, "'database'"},
        {"{\"log_level\":\"loud\"}", FL_ERR_FORMAT, "'log_level'"},
        {"{\"log_level\":3}", FL_ERR_FORMAT, "'log_level'"},
        {"{\"admin_token_sha256\":\"" HEX64 "\",\"admin_token_file\":\"a\"}", FL_ERR_FORMAT,
         "not both"},
        {"{\"admin_token_sha256\":12}", FL_ERR_FORMAT, "'admin_token_sha256'"},
        {"{\"admin_token_sha256\":\"" HEX64 "00\"}", FL_ERR_FORMAT, "'admin_token_sha256'"},
        {"{\"admin_token_file\":1}", FL_ERR_FORMAT, "'admin_token_file'"},
        {"{\"admin_token_file\":\"short.token\"}", FL_ERR_FORMAT, "at least 20"},
        {"{\"signing_key_file\":false}", FL_ERR_FORMAT, "'signing_key_file'"},
        {"{\"signing_key_file\":\"bad.key\"}", FL_ERR_FORMAT, "64-hex-character"},
        {"{\"tls\":\"yes\"}", FL_ERR_FORMAT, "'tls'"},
        {"{\"tls\":{\"cert_file\":\"c.pem\"}}", FL_ERR_FORMAT, "'tls'"},
        {"{\"tls\":{\"cert_file\":1,\"key_file\":\"k.pem\"}}", FL_ERR_FORMAT, "'tls'"},
        {"{\"tls\":{\"cert_file\":\"missing.pem\",\"key_file\":\"good.key\"}}", FL_ERR_IO,
         "tls.cert_file"},
        {"{\"tls\":{\"cert_file\":\"good.key\",\"key_file\":\"missing.pem\"}}", FL_ERR_IO,
         "tls.key_file"},
        {"{\"limits\":[]}", FL_ERR_FORMAT, "'limits'"},
        {"{\"limits\":{\"enroll_bytes\":-5}}", FL_ERR_FORMAT, "limits.enroll_bytes"},
        {"{\"limits\":{\"checkin_bytes\":1.5}}", FL_ERR_FORMAT, "limits.checkin_bytes"},
        {"{\"limits\":{\"admin_json_bytes\":\"x\"}}", FL_ERR_FORMAT, "limits.admin_json_bytes"},
        {"{\"limits\":{\"model_bytes\":5000000000}}", FL_ERR_FORMAT, "limits.model_bytes"},
        {"{\"limits\":{\"connection_timeout_s\":null}}", FL_ERR_FORMAT,
         "limits.connection_timeout_s"},
        {"{\"limits\":{\"per_ip_connections\":-1}}", FL_ERR_FORMAT, "limits.per_ip_connections"},
        {"{\"limits\":{\"max_connections\":true}}", FL_ERR_FORMAT, "limits.max_connections"},
        {"{\"limits\":{\"connection_memory\":-2}}", FL_ERR_FORMAT, "limits.connection_memory"},
        {"{\"audit\":1}", FL_ERR_FORMAT, "'audit'"},
        {"{\"audit\":{\"owner\":\"x\"}}", FL_ERR_FORMAT, "audit.owner"},
        {"{\"audit\":{\"origin\":5}}", FL_ERR_FORMAT, "audit.origin"},
        {"{\"audit\":{\"retention_days\":36501}}", FL_ERR_FORMAT, "audit.retention_days"},
        {"{\"audit\":{\"pseudonym_key_file\":[]}}", FL_ERR_FORMAT, "audit.pseudonym_key_file"},
        {"{\"audit\":{\"pseudonym_key_file\":\"missing.key\"}}", FL_ERR_IO,
         "audit.pseudonym_key_file"},
        {"{\"audit\":{\"pseudonym_key_file\":\"bad.key\"}}", FL_ERR_FORMAT, "64 hex"},
        {"{\"database\":\"x.db\",\"database\":\"y.db\"}", FL_ERR_FORMAT, "duplicate"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fl_coord_config cfg;
        static int sentinel;
        fl_coord_config_doc *doc = (fl_coord_config_doc *)&sentinel; /* reset to NULL */
        char err[256] = "";
        fl_status rc = load(cases[i].json, &cfg, &doc, err, sizeof(err));
        if (rc != cases[i].want || !strstr(err, cases[i].msg))
            fprintf(stderr, "case %zu %s: %d '%s'\n", i, cases[i].json, (int)rc, err);
        assert_int_equal(rc, cases[i].want);
        assert_null(doc);
        assert_non_null(strstr(err, cases[i].msg));
    }
}

/* The accepted forms: log levels, a trimmed key file, the audit section, absolute paths. */
static void test_file_accepted_forms(void **state) {
    (void)state;
    write_file("good.key", HEX64 "\r\n \n");
    write_file("cert.pem", "-----BEGIN CERTIFICATE-----\n");
    static const struct {
        const char *level;
        fl_log_level want;
    } levels[] = {{"debug", FL_LOG_DEBUG}, {"info", FL_LOG_INFO}, {"warn", FL_LOG_WARN},
                  {"error", FL_LOG_ERROR}};
    char body[1024], err[256];
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    for (size_t i = 0; i < 4; i++) {
        snprintf(body, sizeof(body), "{\"log_level\":\"%s\",\"database\":\":memory:\"}",
                 levels[i].level);
        assert_int_equal(load(body, &cfg, &doc, err, sizeof(err)), FL_OK);
        assert_int_equal(cfg.logger.min_level, levels[i].want);
        assert_string_equal(cfg.db_path, ":memory:"); /* not made relative */
        fl_coord_config_doc_free(doc);
        doc = NULL;
    }
    snprintf(body, sizeof(body),
             "{\"database\":\"%s/abs.db\",\"admin_token_sha256\":\"" HEX64 "\","
             "\"tls\":{\"cert_file\":\"cert.pem\",\"key_file\":\"%s/good.key\"},"
             "\"audit\":{\"origin\":\"example.org/log\",\"retention_days\":30,"
             "\"pseudonym_key_file\":\"good.key\"},"
             "\"limits\":{\"enroll_bytes\":100,\"checkin_bytes\":200,\"admin_json_bytes\":2048,"
             "\"model_bytes\":4096,\"connection_timeout_s\":5,\"per_ip_connections\":0,"
             "\"max_connections\":32,\"connection_memory\":9000}}",
             g_dir, g_dir);
    assert_int_equal(load(body, &cfg, &doc, err, sizeof(err)), FL_OK);
    assert_non_null(doc);
    assert_int_equal(cfg.has_admin_token, 1);
    /* Hex digits in either case. */
    fl_coord_config_doc *doc2 = NULL;
    assert_int_equal(load("{\"admin_token_sha256\":\"00010203040506070809"
                          "0A0B0C0D0E0F101112131415161718191A1B1C1D1E1F\"}",
                          &cfg, &doc2, err, sizeof(err)),
                     FL_OK);
    assert_int_equal(cfg.admin_token_sha256[10], 0x0a);
    assert_int_equal(cfg.admin_token_sha256[31], 0x1f);
    fl_coord_config_doc_free(doc2);
    assert_int_equal(load("{\"admin_token_sha256\":\"0g0102030405060708090a0b0c0d0e0f"
                          "101112131415161718191a1b1c1d1e1f\"}",
                          &cfg, &doc2, err, sizeof(err)),
                     FL_ERR_FORMAT);
    snprintf(body, sizeof(body),
             "{\"database\":\"%s/abs.db\",\"admin_token_sha256\":\"" HEX64 "\","
             "\"tls\":{\"cert_file\":\"cert.pem\",\"key_file\":\"%s/good.key\"},"
             "\"audit\":{\"origin\":\"example.org/log\",\"retention_days\":30,"
             "\"pseudonym_key_file\":\"good.key\"},"
             "\"limits\":{\"enroll_bytes\":100,\"checkin_bytes\":200,\"admin_json_bytes\":2048,"
             "\"model_bytes\":4096,\"connection_timeout_s\":5,\"per_ip_connections\":0,"
             "\"max_connections\":32,\"connection_memory\":9000}}",
             g_dir, g_dir);
    fl_coord_config_doc_free(doc);
    assert_int_equal(load(body, &cfg, &doc, err, sizeof(err)), FL_OK);
    assert_int_equal(cfg.admin_token_sha256[31], 0x1f);
    assert_int_equal(cfg.has_pseudonym_key, 1);
    assert_int_equal(cfg.pseudonym_key[1], 0x01);
    assert_int_equal(cfg.retention_days, 30);
    assert_string_equal(cfg.audit_origin, "example.org/log");
    assert_non_null(strstr(cfg.tls_cert_pem, "BEGIN CERTIFICATE"));
    assert_non_null(strstr(cfg.tls_key_pem, "0001020304"));
    assert_int_equal(cfg.limits.enroll_bytes, 100);
    assert_int_equal(cfg.limits.checkin_bytes, 200);
    assert_int_equal(cfg.limits.admin_json_bytes, 2048);
    assert_int_equal(cfg.limits.model_bytes, 4096);
    assert_int_equal(cfg.limits.connection_timeout_s, 5);
    assert_int_equal(cfg.limits.per_ip_connections, 0);
    assert_int_equal(cfg.limits.max_connections, 32);
    assert_int_equal(cfg.limits.connection_memory, 9000);
    snprintf(body, sizeof(body), "%s/abs.db", g_dir);
    assert_string_equal(cfg.db_path, body);
    fl_coord_config_doc_free(doc);
}

/* fl_coord_config_load's own arguments. */
static void test_load_misuse(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[128];
    fl_coord_config_init(&cfg);
    assert_int_equal(fl_coord_config_load(NULL, &cfg, "/x", err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "required"));
    assert_int_equal(fl_coord_config_load(&doc, NULL, "/x", err, sizeof(err)), FL_ERR_MISUSE);
    assert_int_equal(fl_coord_config_load(&doc, &cfg, NULL, err, sizeof(err)), FL_ERR_MISUSE);
    cfg.struct_size = 3;
    assert_int_equal(fl_coord_config_load(&doc, &cfg, "/x", err, sizeof(err)), FL_ERR_MISUSE);
    /* No message buffer (NULL, or zero length): the status alone. */
    fl_coord_config_init(&cfg);
    assert_int_equal(fl_coord_config_load(&doc, &cfg, "/nonexistent/c.json", NULL, 0),
                     FL_ERR_IO);
    snprintf(err, sizeof(err), "untouched");
    assert_int_equal(fl_coord_config_load(&doc, &cfg, "/nonexistent/c.json", err, 0), FL_ERR_IO);
    assert_string_equal(err, "untouched");
    assert_null(doc);
    fl_coord_config_init(NULL); /* a no-op */
    /* An empty file and a directory are not configurations. */
    write_file("empty.json", "");
    char p[256];
    snprintf(p, sizeof(p), "%s/empty.json", g_dir);
    fl_coord_config_init(&cfg);
    assert_int_not_equal(fl_coord_config_load(&doc, &cfg, p, err, sizeof(err)), FL_OK);
    assert_null(doc);
    assert_non_null(strstr(err, "empty.json"));
    assert_int_not_equal(fl_coord_config_load(&doc, &cfg, g_dir, err, sizeof(err)), FL_OK);
    assert_null(doc);
    unlink(p);
}

/* fl_coord_create: each field's bounds, one below and one above, named in the message. */
static void test_create_bounds(void **state) {
    (void)state;
    enum { PORT, THREADS, ENROLL, CHECKIN, ADMIN, MODEL, TIMEOUT, MAXCONN, MEM, POLL };
    static const struct {
        int field;
        unsigned long long value;
        const char *msg; /* NULL: accepted */
    } cases[] = {
        {PORT, 65536, "config.port"},
        {THREADS, 0, "config.threads"},          {THREADS, 257, "config.threads"},
        {ENROLL, 63, "enroll_bytes"},            {ENROLL, (1u << 20) + 1, "enroll_bytes"},
        {CHECKIN, 63, "checkin_bytes"},          {CHECKIN, (1u << 20) + 1, "checkin_bytes"},
        {ADMIN, 1023, "admin_json_bytes"},       {ADMIN, (16u << 20) + 1, "admin_json_bytes"},
        {MODEL, 0, "model_bytes"},               {MODEL, 1000000001u, "model_bytes"},
        {TIMEOUT, 0, "connection_timeout_s"},    {TIMEOUT, 3601, "connection_timeout_s"},
        {MAXCONN, 15, "max_connections"},        {MAXCONN, 1000001, "max_connections"},
        {MEM, 8191, "connection_memory"},        {MEM, (1u << 20) + 1, "connection_memory"},
        {POLL, 61, "max_long_poll_s"},
        {PORT, 0, NULL},   {THREADS, 256, NULL}, {ENROLL, 64, NULL}, {CHECKIN, 1u << 20, NULL},
        {ADMIN, 1024, NULL}, {MODEL, 1, NULL}, {TIMEOUT, 3600, NULL}, {MAXCONN, 16, NULL},
        {MEM, 8192, NULL}, {POLL, 60, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fl_coord_config cfg;
        fl_coord_config_init(&cfg);
        cfg.db_path = ":memory:";
        unsigned long long v = cases[i].value;
        switch (cases[i].field) {
        case PORT: cfg.port = (unsigned)v; break;
        case THREADS: cfg.threads = (unsigned)v; break;
        case ENROLL: cfg.limits.enroll_bytes = v; break;
        case CHECKIN: cfg.limits.checkin_bytes = v; break;
        case ADMIN: cfg.limits.admin_json_bytes = v; break;
        case MODEL: cfg.limits.model_bytes = v; break;
        case TIMEOUT: cfg.limits.connection_timeout_s = (unsigned)v; break;
        case MAXCONN: cfg.limits.max_connections = (unsigned)v; break;
        case MEM: cfg.limits.connection_memory = v; break;
        case POLL: cfg.max_long_poll_s = (unsigned)v; break;
        }
        fl_coord *co = NULL;
        char err[256] = "";
        fl_status rc = fl_coord_create(&co, &cfg, err, sizeof(err));
        if (cases[i].msg) {
            if (rc != FL_ERR_MISUSE || !strstr(err, cases[i].msg))
                fprintf(stderr, "case %zu: %d '%s'\n", i, (int)rc, err);
            assert_int_equal(rc, FL_ERR_MISUSE);
            assert_null(co);
            assert_non_null(strstr(err, cases[i].msg));
        } else {
            if (rc != FL_OK)
                fprintf(stderr, "case %zu: %s\n", i, err);
            assert_int_equal(rc, FL_OK);
            assert_non_null(co);
            fl_coord_destroy(co);
        }
    }
}

/* fl_coord_create: the other fields (struct size, address, database, TLS pairing, audit
 * origin and retention, allocator) and its own arguments. */
static void test_create_fields(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord *co = NULL;
    char err[256];
    fl_coord_config_init(&cfg);
    cfg.db_path = ":memory:";
    assert_int_equal(fl_coord_create(NULL, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "required"));
    assert_int_equal(fl_coord_create(&co, NULL, err, sizeof(err)), FL_ERR_MISUSE);
    /* Without a message buffer the status still comes back; a zero-length one is left
     * alone. */
    assert_int_equal(fl_coord_create(&co, NULL, NULL, 0), FL_ERR_MISUSE);
    snprintf(err, sizeof(err), "untouched");
    assert_int_equal(fl_coord_create(&co, NULL, err, 0), FL_ERR_MISUSE);
    assert_string_equal(err, "untouched");
    cfg.struct_size = sizeof(cfg) - 8;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "struct_size"));
    fl_coord_config_init(&cfg);
    cfg.db_path = ":memory:";
    cfg.listen_address = "";
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "listen_address"));
    cfg.listen_address = NULL;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "listen_address"));
    fl_coord_config_init(&cfg);
    cfg.db_path = "";
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "db_path"));
    cfg.db_path = ":memory:";
    cfg.tls_cert_pem = "-----BEGIN CERTIFICATE-----";
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "go together"));
    cfg.tls_cert_pem = NULL;
    cfg.tls_key_pem = "-----BEGIN PRIVATE KEY-----";
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    cfg.tls_key_pem = NULL;
    static const char *const bad_origins[] = {"", "has space", "plus+sign", "tab\there",
                                              "\x7f"};
    for (size_t i = 0; i < sizeof(bad_origins) / sizeof(bad_origins[0]); i++) {
        cfg.audit_origin = bad_origins[i];
        assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
        assert_non_null(strstr(err, "audit_origin"));
        assert_null(co);
    }
    char longest[130];
    memset(longest, 'o', 129);
    longest[129] = '\0';
    cfg.audit_origin = longest; /* 129 characters: one too many */
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    longest[128] = '\0';
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    fl_coord_destroy(co);
    co = NULL;
    cfg.audit_origin = NULL;
    cfg.retention_days = 36501;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "retention_days"));
    cfg.retention_days = 36500;
    cfg.has_pseudonym_key = 1; /* a key of its own instead of the derived one */
    memset(cfg.pseudonym_key, 0x5a, sizeof(cfg.pseudonym_key));
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    fl_coord_destroy(co);
    co = NULL;
    cfg.has_pseudonym_key = 0;
    cfg.retention_days = 0;
    /* An allocator without its free function is refused. */
    struct fl_test_counting cnt = {0};
    fl_allocator a = fl_test_counting_allocator(&cnt);
    a.free = NULL;
    cfg.allocator = &a;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "allocator"));
    assert_null(co);
    /* A database that cannot be opened: the path is in the message. */
    cfg.allocator = NULL;
    cfg.db_path = "/nonexistent-dir/sub/coord.db";
    assert_int_not_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    assert_null(co);
    assert_non_null(strstr(err, "/nonexistent-dir/sub/coord.db"));
}

/* The handle calls with NULL or in the wrong state. */
static void test_handle_misuse(void **state) {
    (void)state;
    assert_int_equal(fl_coord_start(NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_coord_port(NULL), 0);
    assert_int_equal(fl_coord_tick(NULL), 1000);
    fl_coord_stop(NULL);
    assert_non_null(strstr(fl_coord_errmsg(NULL), "no coordinator"));
    uint8_t pk[FL_COORD_PUBLIC_KEY_BYTES];
    char kid[FL_COORD_KEY_ID_BYTES];
    memset(pk, 0xAA, sizeof(pk));
    fl_coord_public_key(NULL, pk, kid);
    assert_int_equal(pk[0], 0xAA); /* untouched */

    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.db_path = ":memory:";
    cfg.port = 0;
    cfg.threads = 1;
    fl_coord *co = NULL;
    char err[256];
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    fl_coord_public_key(co, NULL, kid); /* each output is optional */
    assert_int_equal(strlen(kid), 16);
    fl_coord_public_key(co, pk, NULL);
    assert_int_not_equal(pk[0] == 0xAA && pk[1] == 0xAA && pk[2] == 0xAA, 1);
    assert_int_equal(fl_coord_start(co), FL_OK);
    assert_true(fl_coord_port(co) > 0);
    /* Started twice: FL_ERR_STATE with a message. */
    assert_int_equal(fl_coord_start(co), FL_ERR_STATE);
    assert_non_null(strstr(fl_coord_errmsg(co), "already started"));
    assert_int_equal(fl_coord_tick(co), 100);
    fl_coord_stop(co);
    fl_coord_stop(co); /* twice: a no-op */
    /* Stopped: no ticks (the next in 1 s), no restart. */
    assert_int_equal(fl_coord_tick(co), 1000);
    assert_int_equal(fl_coord_start(co), FL_ERR_STATE);
    fl_coord_destroy(co);
}

static void test_signed_message_misuse(void **state) {
    (void)state;
    uint8_t m[64];
    size_t n = 0;
    const char *ctx = "flotilla/v1/model";
    assert_int_equal(fl_coord_signed_message(NULL, sizeof(m), &n, ctx, 1, "a", 1),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), NULL, ctx, 1, "a", 1), FL_ERR_MISUSE);
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), &n, NULL, 1, "a", 1), FL_ERR_MISUSE);
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), &n, ctx, 1, NULL, 1), FL_ERR_MISUSE);
    /* An empty body may be NULL: the message is the context, the id and SHA-256(""). */
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), &n, ctx, 1, NULL, 0), FL_OK);
    assert_int_equal(n, strlen(ctx) + 1 + 8 + 32);
    static const uint8_t empty_sha[4] = {0xe3, 0xb0, 0xc4, 0x42};
    assert_memory_equal(m + strlen(ctx) + 1 + 8, empty_sha, 4);
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), &n, "flotilla/v1/task", 2, "", 0),
                     FL_OK);
    assert_int_equal(n, strlen("flotilla/v1/task") + 1 + 8 + 32);
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/fl-coord-cfgerr-XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_field_errors),
        cmocka_unit_test(test_file_accepted_forms),
        cmocka_unit_test(test_load_misuse),
        cmocka_unit_test(test_create_bounds),
        cmocka_unit_test(test_create_fields),
        cmocka_unit_test(test_handle_misuse),
        cmocka_unit_test(test_signed_message_misuse),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char p[256];
    const char *files[] = {"c.json", "short.token", "bad.key", "good.key", "cert.pem",
                           "big.token"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return rc;
}
