/* Randomized Hadamard rotation for distributed DP (KLS21 Section 4): x <- H D x with D random
 * signs expanded from a public seed and H the normalised Walsh-Hadamard matrix. It spreads an
 * update's energy evenly over the coordinates so that modular wrap-around becomes unlikely. */

#include <math.h>
#include <string.h>

#include "chacha.h"
#include "fl_internal.h"
#include "flotilla/dp.h"

#define SIGN_CHUNK 512 /* keystream bytes per batch: 4096 signs */

/* Multiplies x by the +-1 signs of the seed's rotation stream: ChaCha20-IETF keyed by the
 * seed under a nonce whose last byte is 0x80 (so it never meets a fl_dp_rng stream, whose
 * nonces are small counters); bit i of the stream set means x[i] is negated. */
static int apply_signs(double *x, size_t n, const uint8_t *seed) {
    uint8_t nonce[FL__DP_CHACHA_NONCE_BYTES] = {0};
    nonce[11] = 0x80;
    uint8_t ks[SIGN_CHUNK];
    for (size_t base = 0; base < n; base += (size_t)SIGN_CHUNK * 8) {
        /* Block counter continues the stream across batches (64 bytes per block). */
        uint32_t ic = (uint32_t)(base / 8 / 64);
        if (fl__dp_chacha20_keystream(ks, SIGN_CHUNK, nonce, ic, seed) != 0) {
            fl_memzero(ks, sizeof(ks));
            return -1;
        }
        size_t m = n - base < (size_t)SIGN_CHUNK * 8 ? n - base : (size_t)SIGN_CHUNK * 8;
        for (size_t i = 0; i < m; i++)
            if ((ks[i >> 3] >> (i & 7)) & 1)
                x[base + i] = -x[base + i];
    }
    fl_memzero(ks, sizeof(ks));
    return 0;
}

/* In-place normalised fast Walsh-Hadamard transform (Sylvester order), n a power of two. */
static void fwht(double *x, size_t n) {
    for (size_t h = 1; h < n; h <<= 1) {
        for (size_t i = 0; i < n; i += h << 1) {
            for (size_t j = i; j < i + h; j++) {
                double a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    double s = 1.0 / sqrt((double)n);
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static int pow2(size_t n) {
    return n > 0 && (n & (n - 1)) == 0;
}

fl_status fl_dp_rotation_forward(double *x, size_t n, const uint8_t *seed) {
    if (!x || !seed || !pow2(n) || n > ((size_t)1 << 40) || fl__dp_crypto_init() != 0)
        return FL_ERR_MISUSE;
    if (apply_signs(x, n, seed) != 0)
        return FL_ERR_CRYPTO;
    fwht(x, n);
    return FL_OK;
}

fl_status fl_dp_rotation_inverse(double *x, size_t n, const uint8_t *seed) {
    if (!x || !seed || !pow2(n) || n > ((size_t)1 << 40) || fl__dp_crypto_init() != 0)
        return FL_ERR_MISUSE;
    fwht(x, n);
    return apply_signs(x, n, seed) == 0 ? FL_OK : FL_ERR_CRYPTO;
}
