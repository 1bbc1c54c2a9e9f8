/* Writes the seed corpus of the secagg_norm_proof fuzz target: the MASKED_INPUT of each
 * client of a real round of each config variant (secagg_norm_fuzz.h), which must pass
 * fl_secagg_norm_check, plus truncated, bit-flipped, misaddressed and overlong variants, each
 * framed with the variant and sender byte the target expects. The round's keys are random,
 * so every run writes other bytes.
 *
 *   fuzz_gen_secagg_norm_proof OUT_DIR     (e.g. tests/fuzz/corpus/secagg_norm_proof)
 *   fuzz_gen_secagg_norm_proof --check DIR
 *
 * --check (a ctest) reads DIR's valid_* seeds back and fails unless each still passes
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

/* File name of client i's valid seed of a variant. */
static void valid_name(char *out, size_t cap, int variant, uint32_t i) {
    snprintf(out, cap, "%s_c%u", variant ? "valid_tail" : "valid", i);
}

/* Checks that DIR's valid seeds still verify; 0 if they all do. */
static int check(const char *dir) {
    static uint8_t buf[1 << 16];
    int bad = 0;
    for (int v = 0; v < NF_VARIANTS; v++) {
        fl_secagg_config cfg;
        nf_config(&cfg, v);
        for (uint32_t i = 0; i < NF_N; i++) {
            char name[64], path[4096], em[256];
            valid_name(name, sizeof(name), v, i);
            snprintf(path, sizeof(path), "%s/%s", dir, name);
            FILE *fp = fopen(path, "rb");
            size_t n = fp ? fread(buf, 1, sizeof(buf), fp) : 0;
            if (fp)
                fclose(fp);
            fl_secagg_norm_ticket t;
            snprintf(em, sizeof(em), "missing or misframed");
            if (n < 1 || buf[0] != (uint8_t)(i | (unsigned)v << 7) ||
                fl_secagg_norm_check(&t, &cfg, NF_ROUND, i, buf + 1, n - 1, NULL, em,
                                     sizeof(em))) {
                fprintf(stderr, "%s: %s; rewrite the corpus with fuzz_gen_secagg_norm_proof DIR\n",
                        path, em);
                bad = 1;
            }
        }
    }
    return bad;
}

/* Writes the seeds of one variant; names of the broken ones start with `pre`. */
static int write_variant(const char *out, int v, const char *pre) {
    struct nf f;
    if (nf_setup(&f, v) != 0) {
        fprintf(stderr, "round setup (variant %d) failed\n", v);
        nf_free(&f);
        return 1;
    }
    int bad = 0;
    char name[64];
    uint8_t fr = (uint8_t)(v << 7); /* framing byte of client 0 */
    for (uint32_t i = 0; i < NF_N; i++) {
        fl_secagg_norm_ticket t;
        char em[256];
        if (fl_secagg_norm_check(&t, &f.cfg, NF_ROUND, i, f.reply[i], f.reply_len[i], NULL, em,
                                 sizeof(em)) != FL_OK) {
            fprintf(stderr, "variant %d, client %u: its own masked input fails the check: %s\n", v,
                    i, em);
            bad = 1;
        }
        valid_name(name, sizeof(name), v, i);
        bad |= put(out, name, (uint8_t)(fr | i), f.reply[i], f.reply_len[i]);
    }
    /* Variants of client 1's message. Body: NF_D + 9 masked words (the inputs, then 9 limbs of
     * rho), then the proof: V | S | nb bit commitments | e | nb x (e0 z0 z1) | za (d) |
     * zb (d) | zc | zf, nb read back from the length. */
    const uint8_t *m = f.reply[1];
    size_t ml = f.reply_len[1], h = FL_SECAGG_HEADER_BYTES, words = (NF_D + 9) * 4;
    size_t proof = h + words, fixed = 5 * 32 + 2 * NF_D * 32;
    if (ml < proof + fixed || (ml - proof - fixed) % 128 != 0) {
        fprintf(stderr, "MASKED_INPUT is %zu bytes: the layout above is out of date\n", ml);
        nf_free(&f);
        return 1;
    }
    size_t nb = (ml - proof - fixed) / 128;
    size_t e = proof + 2 * 32 + nb * 32, bits = e + 32;
    uint8_t c1 = (uint8_t)(fr | 1), c2 = (uint8_t)(fr | 2);
    struct {
        const char *tag;
        size_t at;
        uint8_t x;
        int set;
    } edits[] = {
        {"wrong_round", 4, 1, 0},
        {"flip_word", h + 3, 0x10, 0}, /* the proof still verifies */
        {"flip_limb", h + 4 * 4 + 1, 0x01, 0},
        {"flip_V", proof + 5, 0x04, 0},
        {"flip_S", proof + 32 + 7, 0x20, 0},
        {"flip_bitcommit", proof + 64 + 3 * 32, 0x02, 0},
        {"flip_lastcoord", proof + 64 + (nb - 8) * 32 + 9, 0x01, 0}, /* the tail's bits */
        {"flip_e", e, 0x01, 0},
        {"flip_orproof", bits + 96 * 5 + 40, 0x08, 0},
        {"flip_orproof_tail", bits + 96 * (nb - 9) + 70, 0x40, 0},
        {"scalar_unreduced", bits + 31, 0xff, 1},
        {"flip_zf", ml - 32, 0x01, 0},
    };
    for (size_t k = 0; k < sizeof(edits) / sizeof(edits[0]); k++) {
        snprintf(name, sizeof(name), "%s%s", pre, edits[k].tag);
        bad |= put_edit(out, name, c1, m, ml, edits[k].at, edits[k].x, edits[k].set);
    }
    const struct {
        const char *tag;
        size_t len;
    } cuts[] = {{"trunc_header", h - 1},
                {"trunc_words", h + words / 2},
                {"trunc_proof", proof + 100},
                {"trunc_last", ml - 1}};
    for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
        snprintf(name, sizeof(name), "%s%s", pre, cuts[k].tag);
        bad |= put(out, name, c1, m, cuts[k].len);
    }
    snprintf(name, sizeof(name), "%swrong_sender", pre);
    bad |= put(out, name, c2, m, ml);
    /* The same with the header's body length (offset 16) agreeing, so that the body length
     * check and the size limit are reached, not the header's own check. */
    uint8_t *b = malloc(ml + 1);
    if (b) {
        memcpy(b, m, ml);
        b[ml] = 0;
        snprintf(name, sizeof(name), "%soverlong", pre);
        bad |= put(out, name, c1, b, ml + 1);
        put_le32(b + 16, (uint32_t)(ml + 1 - h));
        snprintf(name, sizeof(name), "%soverlong_body", pre);
        bad |= put(out, name, c1, b, ml + 1);
        put_le32(b + 16, (uint32_t)(ml - 1 - h));
        snprintf(name, sizeof(name), "%sshort_body", pre);
        bad |= put(out, name, c1, b, ml - 1);
        put_le32(b + 16, (uint32_t)(words - 4));
        snprintf(name, sizeof(name), "%sno_proof_body", pre);
        bad |= put(out, name, c1, b, h + words - 4);
        free(b);
    }
    nf_free(&f);
    return bad;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--check") == 0)
        return check(argv[2]);
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR | --check DIR\n", argv[0]);
        return 2;
    }
    int bad = write_variant(argv[1], 0, "");
    bad |= write_variant(argv[1], 1, "tail_");
    return bad ? 1 : 0;
}
