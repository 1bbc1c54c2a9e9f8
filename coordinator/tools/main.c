/* flotilla-coordinator: the long-lived coordinator service.
 *
 *   flotilla-coordinator serve --config FILE    run until SIGTERM/SIGINT
 *   flotilla-coordinator gen-key --out FILE     write a fresh Ed25519 seed (hex, mode 0600)
 *   flotilla-coordinator gen-admin-token        print a token and the SHA-256 for the config
 *   flotilla-coordinator hash-token             read a token on stdin, print its SHA-256
 *   flotilla-coordinator --help | --version
 *
 * Logs are JSON lines on stderr: {"ts":..., "level":..., "msg":...}. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "flotilla/coordinator.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void log_json(void *user, fl_log_level level, const char *msg) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    json_t *o = json_pack("{s:f, s:s, s:s, s:s}", "ts",
                          (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, "level",
                          names[level <= FL_LOG_ERROR ? level : FL_LOG_ERROR], "component",
                          "coordinator", "msg", msg);
    /* json_dumpb twice (measure, then write) and compare: json_dumps can drop an object
     * member when an allocation fails inside it, which would log a line without its msg. */
    size_t n = o ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;
    char *line = n ? malloc(n) : NULL;
    if (line && json_dumpb(o, line, n, JSON_COMPACT) == n)
        fprintf(stderr, "%.*s\n", (int)n, line);
    else
        fprintf(stderr, "{\"level\":\"error\",\"component\":\"coordinator\","
                        "\"msg\":\"a log line could not be formatted (out of memory)\"}\n");
    free(line);
    if (o)
        json_decref(o);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: flotilla-coordinator COMMAND [OPTIONS]\n"
            "\n"
            "commands:\n"
            "  serve --config FILE      run the coordinator until SIGTERM or SIGINT\n"
            "  gen-key --out FILE       write a new Ed25519 signing seed (64 hex chars, 0600)\n"
            "                           and print its public key and key id\n"
            "  gen-admin-token          print a new admin token and its SHA-256 (put the hash\n"
            "                           in the config as admin_token_sha256)\n"
            "  hash-token               read a token on stdin and print its SHA-256\n"
            "\n"
            "options:\n"
            "  -h, --help               this help\n"
            "  --version                print the version\n"
            "\n"
            "The config file is JSON; see docs/coordinator.md and examples/coordinator.conf.json.\n"
            "Logs are JSON lines on stderr. The protocol is docs/protocol.md.\n");
}

static int cmd_serve(const char *path) {
    fl_coord_config cfg;
    fl_coord_config_init(&cfg);
    cfg.logger.fn = log_json;
    char err[512];
    fl_coord_config_doc *doc = NULL;
    if (fl_coord_config_load(&doc, &cfg, path, err, sizeof(err)) != FL_OK) {
        log_json(NULL, FL_LOG_ERROR, err);
        return 2;
    }
    fl_coord *co = NULL;
    fl_status rc = fl_coord_create(&co, &cfg, err, sizeof(err));
    fl_coord_config_doc_free(doc);
    if (rc != FL_OK) {
        log_json(NULL, FL_LOG_ERROR, err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (fl_coord_start(co) != FL_OK) {
        log_json(NULL, FL_LOG_ERROR, fl_coord_errmsg(co));
        fl_coord_destroy(co);
        return 1;
    }
    while (!g_stop) {
        int64_t ms = fl_coord_tick(co);
        if (ms > 100)
            ms = 100;
        struct timespec ts = {0, (long)ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    log_json(NULL, FL_LOG_INFO, "signal received: shutting down");
    fl_coord_stop(co);
    fl_coord_destroy(co);
    return 0;
}

static int cmd_gen_key(const char *out) {
    uint8_t seed[32], pk[32], sk[64], h[32];
    char hex[65];
    randombytes_buf(seed, sizeof(seed));
    sodium_bin2hex(hex, sizeof(hex), seed, sizeof(seed));
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        fprintf(stderr, "gen-key: cannot create %s: %s\n", out, strerror(errno));
        return 1;
    }
    size_t n = strlen(hex);
    hex[n] = '\n';
    ssize_t w = write(fd, hex, n + 1);
    close(fd);
    if (w != (ssize_t)(n + 1)) {
        fprintf(stderr, "gen-key: write failed\n");
        return 1;
    }
    crypto_sign_seed_keypair(pk, sk, seed);
    crypto_hash_sha256(h, pk, 32);
    sodium_bin2hex(hex, sizeof(hex), pk, 32);
    printf("public_key %s\n", hex);
    sodium_bin2hex(hex, sizeof(hex), h, 8);
    printf("key_id %s\n", hex);
    sodium_memzero(seed, sizeof(seed));
    sodium_memzero(sk, sizeof(sk));
    return 0;
}

static void print_hash(const char *tok) {
    uint8_t h[32];
    char hex[65];
    crypto_hash_sha256(h, (const uint8_t *)tok, strlen(tok));
    sodium_bin2hex(hex, sizeof(hex), h, 32);
    printf("sha256 %s\n", hex);
}

int main(int argc, char **argv) {
    if (sodium_init() < 0) {
        fprintf(stderr, "libsodium failed to initialise\n");
        return 1;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("flotilla-coordinator %s\n", fl_version_string());
        return 0;
    }
    if (strcmp(cmd, "serve") == 0) {
        const char *config = NULL;
        for (int i = 2; i < argc; i++) {
            if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) && i + 1 < argc)
                config = argv[++i];
            else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                usage(stdout);
                return 0;
            } else {
                fprintf(stderr, "serve: unknown argument '%s'\n", argv[i]);
                return 2;
            }
        }
        if (!config) {
            fprintf(stderr, "serve: --config FILE is required\n");
            return 2;
        }
        return cmd_serve(config);
    }
    if (strcmp(cmd, "gen-key") == 0) {
        if (argc != 4 || strcmp(argv[2], "--out") != 0) {
            fprintf(stderr, "usage: flotilla-coordinator gen-key --out FILE\n");
            return 2;
        }
        return cmd_gen_key(argv[3]);
    }
    if (strcmp(cmd, "gen-admin-token") == 0) {
        uint8_t r[32];
        char b64[64], tok[80];
        randombytes_buf(r, sizeof(r));
        sodium_bin2base64(b64, sizeof(b64), r, sizeof(r), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
        snprintf(tok, sizeof(tok), "fla_%s", b64);
        printf("token %s\n", tok);
        print_hash(tok);
        return 0;
    }
    if (strcmp(cmd, "hash-token") == 0) {
        char line[512];
        if (!fgets(line, sizeof(line), stdin)) {
            fprintf(stderr, "hash-token: no token on stdin\n");
            return 2;
        }
        line[strcspn(line, "\r\n")] = '\0';
        print_hash(line);
        return 0;
    }
    fprintf(stderr, "unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
