/* Writes the seed corpora of the secagg fuzz targets: one valid message per phase and
 * mode (a0 semi-honest, a1 active, a2 active with device certificates, a3 semi-honest with
 * revealed pairwise seeds), framed as the
 * targets expect. Keys are fresh on each run, so rerunning rewrites every seed; to add the
 * seeds of one mode only, pass it as the second argument. Not built by CMake; run by hand:
 *   cc -Isecagg/include -Icore/include tests/fuzz/secagg_corpus_gen.c \
 *      build/secagg/libflotilla-secagg-static.a build/core/libflotilla-core-static.a \
 *      -lsodium -lcrypto -lmbedcrypto -lgcrypt -lm -lpthread -o /tmp/gen && \
 *      /tmp/gen tests/fuzz/corpus [mode]
 * (-lgcrypt when the build found libgcrypt). The a2 and a3 seeds were added with mode 2 and 3. */
#include <stdio.h>

#include "secagg_fuzz_driver.h"

static void put(const char *dir, const char *target, int phase, int mode, uint32_t who,
                const uint8_t *m, size_t ml, const char *tag) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/seed_p%d_a%d_%s", dir, target, phase, mode, tag);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return;
    /* Framing of secagg_fuzz_driver.h: bit 3 active; bit 4 device certificates (with bit
     * 3) or revealed seeds (without). */
    int act = mode == 1 || mode == 2, b4 = mode >= 2;
    uint8_t hdr[2] = {(uint8_t)(phase | (act << 3) | (b4 << 4)), (uint8_t)who};
    fwrite(hdr, 1, 2, fp);
    fwrite(m, 1, ml, fp);
    fclose(fp);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fuzz/corpus";
    int only = argc > 2 ? argv[2][0] - '0' : -1;
    for (int mode = 0; mode < FZ_MODES; mode++)
        for (int phase = 0; phase < 5; phase++) {
            if ((phase == FL_SECAGG_PHASE_CONSISTENCY && (mode == 0 || mode == 3)) ||
                (only >= 0 && mode != only))
                continue;
            struct fz f;
            if (fz_setup(&f, phase, mode) != 0) {
                fprintf(stderr, "setup %d/%d failed\n", phase, mode);
                return 1;
            }
            put(dir, "secagg_server_msg", phase, mode, 1, f.reply[1], f.reply_len[1], "valid");
            if (f.reply_len[1] > 30)
                put(dir, "secagg_server_msg", phase, mode, 1, f.reply[1], 30, "trunc");
            const uint8_t *m;
            size_t ml;
            if (phase > 0 && fl_secagg_server_outgoing(f.srv, 1, &m, &ml) == FL_OK)
                put(dir, "secagg_client_msg", phase, mode, 1, m, ml, "valid");
            fz_free(&f);
        }
    return 0;
}
