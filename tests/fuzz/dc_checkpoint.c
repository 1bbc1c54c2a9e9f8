/* libFuzzer target for what the datacenter trainer reads back: sharded checkpoints
 * (fl_dc_trainer_checkpoint_load: the `latest` pointer, the rank's safetensors shard, its
 * metadata checks against the job and the params / opt.m / opt.v tensors) and model files
 * (fl_dc_trainer_model_load from memory).
 *
 * Input: byte 0 is the mode, the rest the payload.
 *   mode & 1   0: the payload is a model file, loaded from memory;
 *              1: the payload is the shard <dir>/step-00000001/rank-00000.safetensors of a
 *                 checkpoint directory in a private temporary directory, then loaded.
 *   mode & 2   (checkpoint) the payload's first line (at most 64 bytes) is written to
 *              <dir>/latest instead of "step-00000001\n", the rest is the shard.
 * Seeds: tests/fuzz/dc_corpus_gen.c (real checkpoints and models of the same trainer).
 *
 * Oracles beyond the sanitizers: only the documented codes come back (FL_OK, FL_ERR_FORMAT,
 * FL_ERR_CORRUPT, FL_ERR_IO, FL_ERR_NOT_FOUND); a refused file leaves the trainer usable
 * (the refusals are documented as recoverable) and its parameters unchanged; a model that
 * loads puts exactly its tensors' values into the parameters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dc_checkpoint.h"
#include "flotilla/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static char g_dir[256], g_step[320], g_shard[400], g_latest[320];
static fl_dc_comm *g_comm;
static fl_dc_trainer *g_tr;
static size_t g_n;
static float *g_before, *g_after;

static void cleanup(void) {
    unlink(g_shard);
    unlink(g_latest);
    rmdir(g_step);
    rmdir(g_dir);
    fl_dc_trainer_destroy(g_tr);
    fl_dc_comm_close(g_comm);
    free(g_before);
    free(g_after);
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
    snprintf(g_dir, sizeof(g_dir), "%s/fl-fuzz-dc-XXXXXX", base);
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_step, sizeof(g_step), "%s/%s", g_dir, DC_FUZZ_STEP);
    snprintf(g_shard, sizeof(g_shard), "%s/rank-00000.safetensors", g_step);
    snprintf(g_latest, sizeof(g_latest), "%s/latest", g_dir);
    CHECK(mkdir(g_step, 0700) == 0);
    fl_dc_config cfg;
    dc_fuzz_config(&cfg);
    CHECK(fl_dc_comm_open(&g_comm, FL_DC_COMM_SINGLE, NULL) == FL_OK);
    CHECK(fl_dc_trainer_create(&g_tr, &cfg, g_comm, NULL) == FL_OK);
    g_n = fl_dc_trainer_param_count(g_tr);
    g_before = malloc(g_n * sizeof(float));
    g_after = malloc(g_n * sizeof(float));
    CHECK(g_before && g_after);
    atexit(cleanup);
}

/* A model that loaded: every parameter equals its tensor in the file (layers.<i>.weight,
 * layers.<i>.bias, F32, in that order in the canonical arena). */
static void check_model(const uint8_t *buf, size_t len) {
    fl_safetensors *st = NULL;
    CHECK(fl_safetensors_create(&st, NULL) == FL_OK);
    CHECK(fl_safetensors_parse(st, buf, len) == FL_OK);
    fl_dc_config cfg;
    dc_fuzz_config(&cfg);
    size_t off = 0;
    for (int i = 0; i < cfg.n_layers; i++) {
        for (int bias = 0; bias < 2; bias++) {
            char name[64];
            snprintf(name, sizeof(name), bias ? "layers.%d.bias" : "layers.%d.weight", i);
            fl_tensor_view tv;
            CHECK(fl_safetensors_find(st, &tv, name) == FL_OK && tv.dtype == FL_DTYPE_F32);
            size_t n = (size_t)cfg.sizes[i + 1] * (bias ? 1 : (size_t)cfg.sizes[i]);
            CHECK(off + n <= g_n);
            CHECK(memcmp((const float *)g_after + off, tv.data, n * sizeof(float)) == 0);
            off += n;
        }
    }
    CHECK(off == g_n);
    fl_safetensors_destroy(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20))
        return 0;
    if (!g_tr)
        setup();
    CHECK(fl_dc_trainer_params_get(g_tr, g_before, g_n) == FL_OK);
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    fl_status rc;
    if (!(data[0] & 1)) {
        rc = fl_dc_trainer_model_load(g_tr, p, n);
        CHECK(rc == FL_OK || rc == FL_ERR_FORMAT || rc == FL_ERR_CORRUPT);
    } else {
        static const char def[] = DC_FUZZ_STEP "\n";
        const void *latest = def;
        size_t latest_len = sizeof(def) - 1;
        if (data[0] & 2) {
            const uint8_t *nl = memchr(p, '\n', n < 64 ? n : 64);
            size_t k = nl ? (size_t)(nl - p) + 1 : (n < 64 ? n : 64);
            latest = p;
            latest_len = k;
            p += k;
            n -= k;
        }
        CHECK(write_file(g_latest, latest, latest_len) == 0);
        CHECK(write_file(g_shard, p, n) == 0);
        rc = fl_dc_trainer_checkpoint_load(g_tr, g_dir);
        CHECK(rc == FL_OK || rc == FL_ERR_FORMAT || rc == FL_ERR_CORRUPT || rc == FL_ERR_IO ||
              rc == FL_ERR_NOT_FOUND);
    }
    if (rc != FL_OK)
        CHECK(fl_dc_trainer_errmsg(g_tr)[0] != '\0');
    /* The trainer stays usable either way, and a refusal changed nothing. */
    CHECK(fl_dc_trainer_params_get(g_tr, g_after, g_n) == FL_OK);
    if (rc != FL_OK)
        CHECK(memcmp(g_before, g_after, g_n * sizeof(float)) == 0);
    else if (!(data[0] & 1))
        check_model(data + 1, size - 1);
    return 0;
}
