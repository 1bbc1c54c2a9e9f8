/* libFuzzer target for the coordinator's configuration file parser, fl_coord_config_load.
 *
 * The input is written as <dir>/coordinator.conf.json in a private temporary directory that
 * also holds the side files a configuration names (relative paths resolve against the
 * config's directory): admin.token (a 32-character token), short.token (too short),
 * signing.key and pseudonym.key (64 hex characters), bad.key (not hex), cert.pem, key.pem.
 * Absolute paths reach the real file system read-only; run the fuzzer with stdin from
 * /dev/null (scripts/fuzz.sh does), since a config may name /dev/stdin.
 *
 * Oracles beyond the sanitizers: the answer is FL_OK, FL_ERR_FORMAT or FL_ERR_IO (or
 * FL_ERR_TOO_LARGE from a side file over its cap), a failure carries a message and no
 * document, a success keeps every limit in its documented range and resolves a relative
 * database path into the config's directory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flotilla/coordinator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static char g_dir[256];
static char g_conf[300];

static const struct {
    const char *name;
    const char *text;
} g_side[] = {
    {"admin.token", "0123456789abcdefghijklmnopqrstuv\n"},
    {"short.token", "tooshort\n"},
    {"signing.key", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60\n"},
    {"pseudonym.key", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"},
    {"bad.key", "not a key\n"},
    {"cert.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
    {"key.pem", "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"},
};

static void cleanup(void) {
    char p[400];
    for (size_t i = 0; i < sizeof(g_side) / sizeof(g_side[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", g_dir, g_side[i].name);
        unlink(p);
    }
    unlink(g_conf);
    rmdir(g_dir);
}

static int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    int bad = fclose(f) != 0 || w != size;
    return bad ? -1 : 0;
}

static void setup(void) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof(g_dir), "%s/fl-fuzz-config-XXXXXX", base);
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_conf, sizeof(g_conf), "%s/coordinator.conf.json", g_dir);
    char p[400];
    for (size_t i = 0; i < sizeof(g_side) / sizeof(g_side[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", g_dir, g_side[i].name);
        CHECK(write_file(p, g_side[i].text, strlen(g_side[i].text)) == 0);
    }
    atexit(cleanup);
}

/* Loads the config file and checks the result. */
static void load(void) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    fl_coord_config_doc *doc = (fl_coord_config_doc *)1;
    char err[512];
    memset(err, 0, sizeof(err));
    fl_status rc = fl_coord_config_load(&doc, &cfg, g_conf, err, sizeof(err));
    CHECK(rc == FL_OK || rc == FL_ERR_FORMAT || rc == FL_ERR_IO || rc == FL_ERR_TOO_LARGE);
    if (rc != FL_OK) {
        CHECK(doc == NULL);
        CHECK(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        return;
    }
    CHECK(doc != NULL);
    CHECK(cfg.port <= 65535 && cfg.threads <= 256 && cfg.max_long_poll_s <= 60);
    CHECK(cfg.retention_days <= 36500);
    if (cfg.db_path) {
        /* absolute (relative paths are resolved next to the config), in memory, or an SQLite
         * URI kept as written */
        CHECK(cfg.db_path[0] == '/' || strcmp(cfg.db_path, ":memory:") == 0 ||
              strncmp(cfg.db_path, "file:", 5) == 0);
        (void)strlen(cfg.db_path);
    }
    if (cfg.listen_address)
        (void)strlen(cfg.listen_address);
    if (cfg.audit_origin)
        (void)strlen(cfg.audit_origin);
    CHECK(!cfg.tls_cert_pem == !cfg.tls_key_pem);
    if (cfg.tls_cert_pem)
        (void)strlen(cfg.tls_cert_pem);
    fl_coord_config_doc_free(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536)
        return 0;
    if (!g_dir[0])
        setup();
    CHECK(write_file(g_conf, data, size) == 0);
    load();
    return 0;
}
