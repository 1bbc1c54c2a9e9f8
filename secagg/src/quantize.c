/* Float updates <-> Z_{2^b}: clipping, scaling, stochastic rounding, headroom. */

#include <math.h>
#include <string.h>

#include "secagg_internal.h"

uint32_t fl_secagg_headroom_bits(uint32_t n) {
    uint32_t b = 0;
    while (b < 32 && ((uint64_t)1 << b) < n)
        b++;
    return b;
}

fl_status fl_secagg_quant_init(fl_secagg_quant *q, float clip, uint32_t bits,
                               uint32_t max_summands) {
    if (!q || !isfinite(clip) || !(clip > 0.0f) || bits < 1 || bits > 32 || max_summands == 0)
        return FL_ERR_MISUSE;
    uint64_t top = ((uint64_t)1 << bits) - 1; /* largest value of Z_{2^b} */
    uint64_t levels = top / max_summands;     /* n * levels <= 2^b - 1: the sum never wraps */
    if (levels < 1)
        return FL_ERR_RANGE;
    q->clip = clip;
    q->bits = bits;
    q->max_summands = max_summands;
    q->levels = (uint32_t)levels;
    return FL_OK;
}

static int quant_ok(const fl_secagg_quant *q) {
    if (!q || !isfinite(q->clip) || !(q->clip > 0.0f) || q->bits < 1 || q->bits > 32 ||
        q->max_summands == 0 || q->levels == 0)
        return 0;
    uint64_t top = ((uint64_t)1 << q->bits) - 1;
    return (uint64_t)q->levels * q->max_summands <= top;
}

/* Randomness: one 32-byte seed from the CSPRNG, expanded with the AES-CTR PRG into 32-bit
 * uniforms u; q = floor(v) + (u < frac(v) * 2^32), so E[q] = v up to 2^-32. */
fl_status fl_secagg_quantize(uint32_t *out, const float *in, size_t dim,
                             const fl_secagg_quant *q, fl_secagg_backend backend) {
    if ((!out || !in) && dim)
        return FL_ERR_MISUSE;
    if (!quant_ok(q))
        return FL_ERR_MISUSE;
    const struct fl__sa_crypto *c = fl__sa_backend(backend);
    if (!c)
        return FL_ERR_UNSUPPORTED;
    uint8_t seed[32];
    uint8_t rnd[FL__SA_MASK_CHUNK * 4];
    fl_status st = FL_OK;
    if (c->random(seed, sizeof(seed)) != 0) {
        st = FL_ERR_CRYPTO;
        goto out;
    }
    const double clip = q->clip, scale = (double)q->levels / (2.0 * clip);
    for (size_t off = 0; off < dim; off += FL__SA_MASK_CHUNK) {
        size_t m = dim - off < FL__SA_MASK_CHUNK ? dim - off : FL__SA_MASK_CHUNK;
        /* Each chunk uses its own seed: seed XOR chunk index in the last 8 bytes. */
        uint8_t cs[32];
        memcpy(cs, seed, 32);
        uint64_t ci = off / FL__SA_MASK_CHUNK;
        for (int i = 0; i < 8; i++)
            cs[24 + i] ^= (uint8_t)(ci >> (8 * i));
        int rc = c->prg(rnd, m * 4, cs);
        fl_memzero(cs, sizeof(cs));
        if (rc != 0) {
            st = FL_ERR_CRYPTO;
            goto out;
        }
        for (size_t i = 0; i < m; i++) {
            double x = in[off + i];
            if (isnan(x)) {
                st = FL_ERR_RANGE;
                goto out;
            }
            if (x < -clip)
                x = -clip;
            if (x > clip)
                x = clip;
            double v = (x + clip) * scale; /* in [0, levels] */
            double fl = floor(v);
            double frac = v - fl;
            uint32_t u = fl__get_u32le(rnd + 4 * i);
            uint64_t qi = (uint64_t)fl + ((double)u < frac * 4294967296.0 ? 1u : 0u);
            if (qi > q->levels)
                qi = q->levels;
            out[off + i] = (uint32_t)qi;
        }
    }
out:
    if (st != FL_OK && out)
        fl_memzero(out, dim * sizeof(uint32_t));
    fl_memzero(seed, sizeof(seed));
    fl_memzero(rnd, sizeof(rnd));
    return st;
}

fl_status fl_secagg_dequantize_sum(float *out, const uint32_t *sum, size_t dim, uint32_t count,
                                   const fl_secagg_quant *q) {
    if ((!out || !sum) && dim)
        return FL_ERR_MISUSE;
    if (!quant_ok(q) || count > q->max_summands)
        return FL_ERR_MISUSE;
    const double step = 2.0 * (double)q->clip / (double)q->levels;
    const double offset = (double)count * (double)q->clip;
    for (size_t i = 0; i < dim; i++)
        out[i] = (float)((double)sum[i] * step - offset);
    return FL_OK;
}
