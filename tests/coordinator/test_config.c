/* Configuration: defaults, the JSON config file loader, validation at create. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void test_defaults_and_sizes(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    assert_int_equal(cfg.struct_size, sizeof(cfg));
    assert_string_equal(cfg.listen_address, "127.0.0.1");
    assert_int_equal(cfg.limits.enroll_bytes, 4096);
    assert_int_equal(cfg.limits.checkin_bytes, 8192);
    assert_int_equal(fl_coord_sha256_bytes(), FL_COORD_SHA256_BYTES);
    assert_int_equal(fl_coord_seed_bytes(), FL_COORD_SEED_BYTES);
    assert_int_equal(fl_coord_public_key_bytes(), FL_COORD_PUBLIC_KEY_BYTES);
    assert_int_equal(fl_coord_key_id_bytes(), FL_COORD_KEY_ID_BYTES);
    fl_coord *co = NULL;
    char err[256];
    /* db_path missing: MISUSE naming the field. */
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_null(co);
    assert_non_null(strstr(err, "db_path"));
    cfg.db_path = ":memory:";
    cfg.threads = 0;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "threads"));
    fl_coord_destroy(NULL);
    fl_coord_config_doc_free(NULL);
}

static void test_load_file(void **state) {
    (void)state;
    write_file("admin.token", "fla_0123456789abcdefghijklmnop\n");
    write_file("sign.key", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    assert_int_equal(load("{\"listen\":\"127.0.0.1\",\"port\":0,\"threads\":2,"
                          "\"database\":\"coord.db\",\"admin_token_file\":\"admin.token\","
                          "\"signing_key_file\":\"sign.key\",\"log_level\":\"warn\","
                          "\"limits\":{\"checkin_bytes\":2048}}",
                          &cfg, &doc, err, sizeof(err)),
                     FL_OK);
    assert_non_null(doc);
    assert_int_equal(cfg.port, 0);
    assert_int_equal(cfg.threads, 2);
    assert_int_equal(cfg.has_admin_token, 1);
    assert_int_equal(cfg.has_signing_key, 1);
    assert_int_equal(cfg.signing_seed[31], 0x1f);
    assert_int_equal(cfg.limits.checkin_bytes, 2048);
    assert_int_equal(cfg.logger.min_level, FL_LOG_WARN);
    assert_non_null(strstr(cfg.db_path, g_dir));
    /* The loaded config creates a working coordinator with the pinned key. */
    fl_coord *co = NULL;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    fl_coord_config_doc_free(doc);
    char kid[FL_COORD_KEY_ID_BYTES];
    uint8_t pk[32];
    fl_coord_public_key(co, pk, kid);
    assert_int_equal(strlen(kid), 16);
    fl_coord_destroy(co);
    char p[256];
    snprintf(p, sizeof(p), "%s/coord.db", g_dir);
    unlink(p);
}

/* An SQLite URI is not rewritten as a path next to the config file (so ?vfs= / ?mode= work). */
static void test_load_uri_database(void **state) {
    (void)state;
    write_file("admin.token", "fla_0123456789abcdefghijklmnop\n");
    char body[512], uri[320], p[256];
    snprintf(uri, sizeof(uri), "file:%s/uri.db?mode=rwc", g_dir);
    snprintf(body, sizeof(body),
             "{\"port\":0,\"threads\":1,\"database\":\"%s\",\"admin_token_file\":"
             "\"admin.token\"}", uri);
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    assert_int_equal(load(body, &cfg, &doc, err, sizeof(err)), FL_OK);
    assert_string_equal(cfg.db_path, uri);
    fl_coord *co = NULL;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_OK);
    fl_coord_config_doc_free(doc);
    fl_coord_destroy(co);
    snprintf(p, sizeof(p), "%s/uri.db", g_dir);
    assert_int_equal(access(p, F_OK), 0);
    unlink(p);
}

static void test_load_errors(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    assert_int_equal(load("{\"database\":\"x.db\",\"bogus\":1}", &cfg, &doc, err, sizeof(err)),
                     FL_ERR_FORMAT);
    assert_null(doc);
    assert_non_null(strstr(err, "bogus"));
    assert_int_equal(load("{\"port\":70000}", &cfg, &doc, err, sizeof(err)), FL_ERR_FORMAT);
    assert_non_null(strstr(err, "port"));
    assert_int_equal(load("{\"admin_token_sha256\":\"zz\"}", &cfg, &doc, err, sizeof(err)),
                     FL_ERR_FORMAT);
    assert_int_equal(load("{\"limits\":{\"nope\":1}}", &cfg, &doc, err, sizeof(err)),
                     FL_ERR_FORMAT);
    assert_int_equal(load("{\"signing_key_file\":\"missing.key\"}", &cfg, &doc, err, sizeof(err)),
                     FL_ERR_IO);
    /* An absolute side-file path is named in the message (it was uninitialised memory). */
    assert_int_equal(load("{\"admin_token_file\":\"/nonexistent/flotilla.token\"}", &cfg, &doc,
                          err, sizeof(err)),
                     FL_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/flotilla.token"));
    assert_int_equal(load("[1]", &cfg, &doc, err, sizeof(err)), FL_ERR_FORMAT);
    assert_int_equal(load("{\"port\":", &cfg, &doc, err, sizeof(err)), FL_ERR_FORMAT);
    fl_coord_config_init(&cfg);
    assert_int_equal(fl_coord_config_load(&doc, &cfg, "/nonexistent/c.json", err, sizeof(err)),
                     FL_ERR_IO);
}

/* The request deadline: defaults, file fields under "limits", and the ranges checked at
 * create (limit-1, limit, limit+1 on each bound). */
static void test_request_deadline_config(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    fl_coord_config_init(&cfg);
    assert_int_equal(cfg.request_deadline_s, 10);
    assert_int_equal(cfg.request_min_body_rate, 16384);
    assert_int_equal(load("{\"database\":\"x.db\",\"limits\":{\"request_deadline_s\":3,"
                          "\"request_min_body_rate\":2048,\"connection_timeout_s\":20}}",
                          &cfg, &doc, err, sizeof(err)),
                     FL_OK);
    assert_int_equal(cfg.request_deadline_s, 3);
    assert_int_equal(cfg.request_min_body_rate, 2048);
    assert_int_equal(cfg.limits.connection_timeout_s, 20);
    fl_coord_config_doc_free(doc);
    doc = NULL;
    assert_int_equal(load("{\"limits\":{\"request_deadline_s\":-1}}", &cfg, &doc, err,
                          sizeof(err)),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(err, "request_deadline_s"));
    assert_int_equal(load("{\"limits\":{\"request_min_body_rate\":\"fast\"}}", &cfg, &doc, err,
                          sizeof(err)),
                     FL_ERR_FORMAT);
    assert_non_null(strstr(err, "request_min_body_rate"));
    static const struct {
        unsigned deadline, rate;
        fl_status want;
    } cases[] = {
        {0, 16384, FL_OK},          /* 0 = no deadline */
        {3599, 16384, FL_OK},       {3600, 16384, FL_OK},         {3601, 16384, FL_ERR_MISUSE},
        {10, 1023, FL_ERR_MISUSE},  {10, 1024, FL_OK},            {10, 1025, FL_OK},
        {10, 999999999u, FL_OK},    {10, 1000000000u, FL_OK},     {10, 1000000001u, FL_ERR_MISUSE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fl_coord_config_init(&cfg);
        cfg.db_path = ":memory:";
        cfg.request_deadline_s = cases[i].deadline;
        cfg.request_min_body_rate = cases[i].rate;
        fl_coord *co = NULL;
        fl_status rc = fl_coord_create(&co, &cfg, err, sizeof(err));
        if (rc != cases[i].want)
            fprintf(stderr, "case %zu: %d (%s)\n", i, (int)rc, err);
        assert_int_equal(rc, cases[i].want);
        if (rc != FL_OK)
            assert_non_null(strstr(err, cases[i].deadline > 3600 ? "request_deadline_s"
                                                                 : "request_min_body_rate"));
        fl_coord_destroy(co);
    }
}

/* "secagg": {"unmask_threads": N}: default one per online CPU, at most 8; 1..64 in the
 * file and at create. */
static void test_secagg_unmask_threads_config(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned want = cpus < 1 ? 1u : cpus > 8 ? 8u : (unsigned)cpus;
    fl_coord_config_init(&cfg);
    assert_int_equal(cfg.secagg_unmask_threads, want);
    assert_int_equal(load("{\"database\":\"x.db\",\"secagg\":{\"unmask_threads\":4}}", &cfg,
                          &doc, err, sizeof(err)),
                     FL_OK);
    assert_int_equal(cfg.secagg_unmask_threads, 4);
    fl_coord_config_doc_free(doc);
    doc = NULL;
    /* An empty object keeps the default. */
    fl_coord_config_init(&cfg);
    assert_int_equal(load("{\"database\":\"x.db\",\"secagg\":{}}", &cfg, &doc, err, sizeof(err)),
                     FL_OK);
    assert_int_equal(cfg.secagg_unmask_threads, want);
    fl_coord_config_doc_free(doc);
    doc = NULL;
    static const char *const bad[] = {
        "{\"secagg\":{\"unmask_threads\":0}}", "{\"secagg\":{\"unmask_threads\":65}}",
        "{\"secagg\":{\"unmask_threads\":\"2\"}}", "{\"secagg\":3}",
        "{\"secagg\":{\"unmask_threads\":2,\"threads\":2}}", "{\"secagg\":{\"thread\":2}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_coord_config_init(&cfg);
        assert_int_equal(load(bad[i], &cfg, &doc, err, sizeof(err)), FL_ERR_FORMAT);
        assert_non_null(strstr(err, "'secagg"));
        assert_null(doc);
    }
    static const struct {
        unsigned threads;
        fl_status want;
    } cases[] = {{0, FL_ERR_MISUSE}, {1, FL_OK}, {64, FL_OK}, {65, FL_ERR_MISUSE}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fl_coord_config_init(&cfg);
        cfg.db_path = ":memory:";
        cfg.secagg_unmask_threads = cases[i].threads;
        fl_coord *co = NULL;
        fl_status rc = fl_coord_create(&co, &cfg, err, sizeof(err));
        assert_int_equal(rc, cases[i].want);
        if (rc != FL_OK)
            assert_non_null(strstr(err, "config.secagg_unmask_threads"));
        fl_coord_destroy(co);
    }
}

/* "shutdown_drain_s": default 5, 0..300 in the file and at create. */
static void test_shutdown_drain_config(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    fl_coord_config_init(&cfg);
    assert_int_equal(cfg.shutdown_drain_s, 5);
    assert_int_equal(load("{\"database\":\"x.db\",\"shutdown_drain_s\":0}", &cfg, &doc, err,
                          sizeof(err)),
                     FL_OK);
    assert_int_equal(cfg.shutdown_drain_s, 0);
    fl_coord_config_doc_free(doc);
    doc = NULL;
    fl_coord_config_init(&cfg);
    assert_int_equal(load("{\"database\":\"x.db\",\"shutdown_drain_s\":300}", &cfg, &doc,
                          err, sizeof(err)),
                     FL_OK);
    assert_int_equal(cfg.shutdown_drain_s, 300);
    fl_coord_config_doc_free(doc);
    doc = NULL;
    static const char *const bad[] = {"{\"shutdown_drain_s\":301}", "{\"shutdown_drain_s\":-1}",
                                      "{\"shutdown_drain_s\":\"5\"}",
                                      "{\"shutdown_drain_s\":1.5}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_coord_config_init(&cfg);
        assert_int_equal(load(bad[i], &cfg, &doc, err, sizeof(err)), FL_ERR_FORMAT);
        assert_non_null(strstr(err, "'shutdown_drain_s' must be an integer 0..300"));
        assert_null(doc);
        assert_int_equal(cfg.shutdown_drain_s, 5);
    }
    static const struct {
        unsigned drain;
        fl_status want;
    } cases[] = {{0, FL_OK}, {300, FL_OK}, {301, FL_ERR_MISUSE}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fl_coord_config_init(&cfg);
        cfg.db_path = ":memory:";
        cfg.shutdown_drain_s = cases[i].drain;
        fl_coord *co = NULL;
        fl_status rc = fl_coord_create(&co, &cfg, err, sizeof(err));
        assert_int_equal(rc, cases[i].want);
        if (rc != FL_OK)
            assert_non_null(strstr(err, "config.shutdown_drain_s must be 0..300"));
        fl_coord_destroy(co);
    }
}

/* "database_busy_timeout_ms": default 5000, 0..600000 in the file and at create. */
static void test_db_busy_timeout_config(void **state) {
    (void)state;
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    fl_coord_config_init(&cfg);
    assert_int_equal(cfg.db_busy_timeout_ms, 5000);
    static const unsigned good[] = {0, 250, 600000};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char json[128];
        snprintf(json, sizeof(json), "{\"database\":\"x.db\",\"database_busy_timeout_ms\":%u}",
                 good[i]);
        fl_coord_config_init(&cfg);
        assert_int_equal(load(json, &cfg, &doc, err, sizeof(err)), FL_OK);
        assert_int_equal(cfg.db_busy_timeout_ms, good[i]);
        fl_coord_config_doc_free(doc);
        doc = NULL;
    }
    static const char *const bad[] = {"{\"database_busy_timeout_ms\":600001}",
                                      "{\"database_busy_timeout_ms\":-1}",
                                      "{\"database_busy_timeout_ms\":\"5000\"}",
                                      "{\"database_busy_timeout_ms\":0.5}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fl_coord_config_init(&cfg);
        assert_int_equal(load(bad[i], &cfg, &doc, err, sizeof(err)), FL_ERR_FORMAT);
        assert_non_null(strstr(err, "'database_busy_timeout_ms' must be an integer 0..600000"));
        assert_null(doc);
        assert_int_equal(cfg.db_busy_timeout_ms, 5000);
    }
    fl_coord_config_init(&cfg);
    cfg.db_path = ":memory:";
    cfg.db_busy_timeout_ms = 600001;
    fl_coord *co = NULL;
    assert_int_equal(fl_coord_create(&co, &cfg, err, sizeof(err)), FL_ERR_MISUSE);
    assert_non_null(strstr(err, "config.db_busy_timeout_ms must be 0..600000"));
    assert_null(co);
}

static void test_signed_message(void **state) {
    (void)state;
    uint8_t m[64];
    size_t n = 0;
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), &n, "flotilla/v1/model", 3, "ab", 2),
                     FL_OK);
    assert_int_equal(n, 58);
    assert_memory_equal(m, "flotilla/v1/model\0", 18);
    assert_int_equal(m[18], 3);
    assert_int_equal(m[25], 0);
    assert_int_equal(fl_coord_signed_message(m, sizeof(m), &n, "other", 3, "ab", 2),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_coord_signed_message(m, 40, &n, "flotilla/v1/task", 3, "ab", 2),
                     FL_ERR_MISUSE);
}

/* examples/coordinator.conf.json loads with every field it shows (an unknown or misspelt one
 * would be refused), once its /etc and /var paths point at files in the test directory. */
static void test_example_config(void **state) {
    (void)state;
    char p[512];
    snprintf(p, sizeof(p), "%s/examples/coordinator.conf.json", FL_SOURCE_DIR);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    static char text[8192], out[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof(text) - 1);
    text[n] = '\0';
    /* Drop the absolute directories: what is left is relative to the config file. */
    static const char *const dirs[] = {"/etc/flotilla/", "/var/lib/flotilla/"};
    size_t o = 0;
    for (const char *c = text; *c;) {
        size_t skip = 0;
        for (size_t d = 0; d < 2 && !skip; d++)
            if (strncmp(c, dirs[d], strlen(dirs[d])) == 0)
                skip = strlen(dirs[d]);
        if (skip) {
            c += skip;
            continue;
        }
        out[o++] = *c++;
    }
    out[o] = '\0';
    write_file("admin.token", "fla_0123456789abcdefghijklmnop\n");
    write_file("signing.key", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    write_file("pseudonym.key",
               "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    char tls[256];
    snprintf(tls, sizeof(tls), "%s/tls", g_dir);
    mkdir(tls, 0700);
    write_file("tls/cert.pem", "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n");
    write_file("tls/key.pem", "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n");
    fl_coord_config cfg;
    fl_coord_config_doc *doc = NULL;
    char err[256];
    fl_status st = load(out, &cfg, &doc, err, sizeof(err));
    if (st != FL_OK)
        fail_msg("examples/coordinator.conf.json: %s", err);
    assert_string_equal(cfg.listen_address, "0.0.0.0");
    assert_int_equal(cfg.port, 8443);
    assert_int_equal(cfg.threads, 8);
    assert_int_equal(cfg.max_long_poll_s, 30);
    assert_int_equal(cfg.shutdown_drain_s, 5);
    assert_int_equal(cfg.secagg_unmask_threads, 2);
    assert_int_equal(cfg.has_admin_token, 1);
    assert_int_equal(cfg.has_signing_key, 1);
    assert_int_equal(cfg.has_pseudonym_key, 1);
    assert_int_equal(cfg.pseudonym_key[0], 0xff);
    assert_non_null(cfg.tls_cert_pem);
    assert_string_equal(cfg.audit_origin, "flotilla.example.org/coordinator");
    assert_int_equal(cfg.retention_days, 365);
    assert_int_equal(cfg.limits.model_bytes, 268435456);
    assert_int_equal(cfg.limits.connection_memory, 32768);
    assert_int_equal(cfg.request_deadline_s, 10);
    assert_int_equal(cfg.request_min_body_rate, 16384);
    assert_int_equal(cfg.logger.min_level, FL_LOG_INFO);
    assert_non_null(strstr(cfg.db_path, g_dir));
    fl_coord_config_doc_free(doc);
    const char *files[] = {"signing.key", "pseudonym.key", "tls/cert.pem", "tls/key.pem"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(tls);
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/fl-coord-cfg-XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_sizes),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_load_uri_database),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_request_deadline_config),
        cmocka_unit_test(test_secagg_unmask_threads_config),
        cmocka_unit_test(test_shutdown_drain_config),
        cmocka_unit_test(test_db_busy_timeout_config),
        cmocka_unit_test(test_signed_message),
        cmocka_unit_test(test_example_config),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char p[256];
    const char *files[] = {"c.json", "admin.token", "sign.key", "coord.db-wal", "coord.db-shm"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return rc;
}
