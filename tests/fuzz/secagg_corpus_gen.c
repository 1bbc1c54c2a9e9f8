/* Writes the seed corpora of the secagg fuzz targets: one valid message per phase and
 * mode, framed as the targets expect. Not built by CMake; run by hand:
 *   cc -Isecagg/include -Icore/include tests/fuzz/secagg_corpus_gen.c \
 *      build/secagg/libflotilla-secagg-static.a build/core/libflotilla-core-static.a \
 *      -lsodium -lcrypto -lmbedcrypto -lm -o /tmp/gen && /tmp/gen tests/fuzz/corpus */
#include <stdio.h>

#include "secagg_fuzz_driver.h"

static void put(const char *dir, const char *target, int phase, int active, uint32_t who,
                const uint8_t *m, size_t ml, const char *tag) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/seed_p%d_a%d_%s", dir, target, phase, active, tag);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return;
    uint8_t hdr[2] = {(uint8_t)(phase | (active << 3)), (uint8_t)who};
    fwrite(hdr, 1, 2, fp);
    fwrite(m, 1, ml, fp);
    fclose(fp);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fuzz/corpus";
    for (int active = 0; active < 2; active++)
        for (int phase = 0; phase < 5; phase++) {
            if (phase == FL_SECAGG_PHASE_CONSISTENCY && !active)
                continue;
            struct fz f;
            if (fz_setup(&f, phase, active) != 0) {
                fprintf(stderr, "setup %d/%d failed\n", phase, active);
                return 1;
            }
            put(dir, "secagg_server_msg", phase, active, 1, f.reply[1], f.reply_len[1], "valid");
            if (f.reply_len[1] > 30)
                put(dir, "secagg_server_msg", phase, active, 1, f.reply[1], 30, "trunc");
            const uint8_t *m;
            size_t ml;
            if (phase > 0 && fl_secagg_server_outgoing(f.srv, 1, &m, &ml) == FL_OK)
                put(dir, "secagg_client_msg", phase, active, 1, m, ml, "valid");
            fz_free(&f);
        }
    return 0;
}
