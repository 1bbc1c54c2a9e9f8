/* Writes the seed corpus of the secagg_norm_proof fuzz target: the MASKED_INPUT of each
 * client of a real round (secagg_norm_fuzz.h), which must pass fl_secagg_norm_check, plus
 * truncated, bit-flipped, misaddressed and overlong variants, each framed with the sender
 * byte the target expects. The round's keys are random, so every run writes other bytes.
 *
 *   fuzz_gen_secagg_norm_proof OUT_DIR     (e.g. tests/fuzz/corpus/secagg_norm_proof)
 *   fuzz_gen_secagg_norm_proof --check DIR
 *
 * --check (a ctest) reads DIR's valid_c* seeds back and fails unless each still passes
 * fl_secagg_norm_check: a change to the proof format or its statement leaves the committed
 * corpus without a valid message, and the fuzzer without a path into the verifier's end,
 * until the corpus is written again with this program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secagg_norm_fuzz.h"

static int put(const char *dir, const char *name, uint8_t from, const uint8_t *m, size_t ml) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return -1;
    fputc(from, fp);
    fwrite(m, 1, ml, fp);
    return fclose(fp) == 0 ? 0 : -1;
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A copy of m with byte `at` xor-ed with `x` (or set to `x` when set is 1). */
static int put_edit(const char *dir, const char *name, uint8_t from, const uint8_t *m, size_t ml,
                    size_t at, uint8_t x, int set) {
    uint8_t *b = malloc(ml);
    if (!b)
        return -1;
    memcpy(b, m, ml);
    b[at] = set ? x : (uint8_t)(b[at] ^ x);
    int rc = put(dir, name, from, b, ml);
    free(b);
    return rc;
}

/* Checks that DIR's valid_c<i> seeds still verify; 0 if they all do. */
static int check(const char *dir) {
    fl_secagg_config cfg;
    nf_config(&cfg);
    static uint8_t buf[1 << 16];
    int bad = 0;
    for (uint32_t i = 0; i < NF_N; i++) {
        char path[4096], em[256];
        snprintf(path, sizeof(path), "%s/valid_c%u", dir, i);
        FILE *fp = fopen(path, "rb");
        size_t n = fp ? fread(buf, 1, sizeof(buf), fp) : 0;
        if (fp)
            fclose(fp);
        fl_secagg_norm_ticket t;
        if (n < 1 || buf[0] != i ||
            fl_secagg_norm_check(&t, &cfg, NF_ROUND, i, buf + 1, n - 1, em, sizeof(em)) != FL_OK) {
            fprintf(stderr, "%s: %s; rewrite the corpus with fuzz_gen_secagg_norm_proof DIR\n",
                    path, n < 1 ? "missing" : em);
            bad = 1;
        }
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--check") == 0)
        return check(argv[2]);
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR | --check DIR\n", argv[0]);
        return 2;
    }
    const char *out = argv[1];
    struct nf f;
    if (nf_setup(&f) != 0) {
        fprintf(stderr, "round setup failed\n");
        nf_free(&f);
        return 1;
    }
    int bad = 0;
    char name[64];
    for (uint32_t i = 0; i < NF_N; i++) {
        fl_secagg_norm_ticket t;
        char em[256];
        if (fl_secagg_norm_check(&t, &f.cfg, NF_ROUND, i, f.reply[i], f.reply_len[i], em,
                                 sizeof(em)) != FL_OK) {
            fprintf(stderr, "client %u: its own masked input fails the check: %s\n", i, em);
            bad = 1;
        }
        snprintf(name, sizeof(name), "valid_c%u", i);
        bad |= put(out, name, (uint8_t)i, f.reply[i], f.reply_len[i]);
    }
    /* Variants of client 1's message. Body: 13 masked words (4 inputs + 9 limbs of rho),
     * then the proof: V | S | 31 bit commitments | e | 31 x (e0 z0 z1) | za | zb | zc | zf. */
    const uint8_t *m = f.reply[1];
    size_t ml = f.reply_len[1], h = FL_SECAGG_HEADER_BYTES, words = 13 * 4;
    size_t proof = h + words, e = proof + 2 * 32 + 31 * 32, bits = e + 32;
    if (ml != proof + 5 * 32 + 31 * (32 + 96) + 2 * NF_D * 32) {
        fprintf(stderr, "MASKED_INPUT is %zu bytes: the layout above is out of date\n", ml);
        nf_free(&f);
        return 1;
    }
    bad |= put(out, "trunc_header", 1, m, h - 1);
    bad |= put(out, "trunc_words", 1, m, h + words / 2);
    bad |= put(out, "trunc_proof", 1, m, proof + 100);
    bad |= put(out, "trunc_last", 1, m, ml - 1);
    bad |= put(out, "wrong_sender", 2, m, ml);
    bad |= put_edit(out, "wrong_round", 1, m, ml, 4, 1, 0);
    bad |= put_edit(out, "flip_word", 1, m, ml, h + 3, 0x10, 0); /* proof still verifies */
    bad |= put_edit(out, "flip_limb", 1, m, ml, h + 4 * 4 + 1, 0x01, 0);
    bad |= put_edit(out, "flip_V", 1, m, ml, proof + 5, 0x04, 0);
    bad |= put_edit(out, "flip_S", 1, m, ml, proof + 32 + 7, 0x20, 0);
    bad |= put_edit(out, "flip_bitcommit", 1, m, ml, proof + 64 + 3 * 32, 0x02, 0);
    bad |= put_edit(out, "flip_e", 1, m, ml, e, 0x01, 0);
    bad |= put_edit(out, "flip_orproof", 1, m, ml, bits + 96 * 5 + 40, 0x08, 0);
    bad |= put_edit(out, "scalar_unreduced", 1, m, ml, bits + 31, 0xff, 1);
    bad |= put_edit(out, "flip_zf", 1, m, ml, ml - 32, 0x01, 0);
    /* The same with the header's body length (offset 16) agreeing, so that the body length
     * check and the size limit are reached, not the header's own check. */
    uint8_t *b = malloc(ml + 1);
    if (b) {
        memcpy(b, m, ml);
        b[ml] = 0;
        bad |= put(out, "overlong", 1, b, ml + 1);
        put_le32(b + 16, (uint32_t)(ml + 1 - h));
        bad |= put(out, "overlong_body", 1, b, ml + 1);
        put_le32(b + 16, (uint32_t)(ml - 1 - h));
        bad |= put(out, "short_body", 1, b, ml - 1);
        put_le32(b + 16, (uint32_t)(words - 4));
        bad |= put(out, "no_proof_body", 1, b, h + words - 4);
        free(b);
    }
    nf_free(&f);
    return bad ? 1 : 0;
}
