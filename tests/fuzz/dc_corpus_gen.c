/* Writes the seed corpus of the dc_checkpoint fuzz target: a real checkpoint shard and a
 * real model file of the fuzz target's trainer (dc_checkpoint.h), each with the mode byte
 * the target expects, plus truncated and mis-pointed variants.
 *
 *   fuzz_gen_dc_checkpoint OUT_DIR      (build with FL_BUILD_FUZZERS=ON or not) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dc_checkpoint.h"

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static uint8_t buf[1 << 20];
    *len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return buf;
}

static int put(const char *dir, const char *name, uint8_t mode, const char *prefix,
               const uint8_t *data, size_t len) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fputc(mode, f);
    if (prefix)
        fputs(prefix, f);
    fwrite(data, 1, len, f);
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const char *out = argv[1];
    fl_dc_comm *c = NULL;
    fl_dc_trainer *tr = NULL;
    fl_dc_config cfg;
    dc_fuzz_config(&cfg);
    if (fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, NULL) != FL_OK ||
        fl_dc_trainer_create(&tr, &cfg, c, NULL) != FL_OK) {
        fprintf(stderr, "trainer: %s\n", fl_dc_last_error());
        return 1;
    }
    char dir[] = "/tmp/fl_dc_seed_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[512];
    size_t len = 0;
    uint8_t *b;
    int bad = 0;
    /* model file */
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (fl_dc_trainer_model_save(tr, path) != FL_OK || !(b = slurp(path, &len))) {
        fprintf(stderr, "model: %s\n", fl_dc_trainer_errmsg(tr));
        return 1;
    }
    bad |= put(out, "model_valid", 0, NULL, b, len);
    bad |= put(out, "model_truncated", 0, NULL, b, len / 2);
    unlink(path);
    /* checkpoint shard (step 0) */
    if (fl_dc_trainer_checkpoint_save(tr, dir) != FL_OK) {
        fprintf(stderr, "checkpoint: %s\n", fl_dc_trainer_errmsg(tr));
        return 1;
    }
    snprintf(path, sizeof(path), "%s/step-00000000/rank-00000.safetensors", dir);
    if (!(b = slurp(path, &len)))
        return 1;
    bad |= put(out, "ckpt_valid", 1, NULL, b, len);
    bad |= put(out, "ckpt_truncated", 1, NULL, b, len - 40);
    bad |= put(out, "ckpt_latest", 3, DC_FUZZ_STEP "\n", b, len);
    bad |= put(out, "ckpt_latest_bad", 3, "step-../x\n", b, len);
    bad |= put(out, "ckpt_latest_missing", 3, "step-00000009\n", b, len);
    unlink(path);
    snprintf(path, sizeof(path), "%s/latest", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/step-00000000", dir);
    rmdir(path);
    rmdir(dir);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    return bad ? 1 : 0;
}
