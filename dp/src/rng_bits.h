#ifndef FLOTILLA_DP_RNG_BITS_H
#define FLOTILLA_DP_RNG_BITS_H

/* Internals of fl_dp_rng: the buffered byte source and the inline readers the samplers use
 * on their hot path. Never installed. */

#include <stdint.h>
#include <string.h>

#include "fl_internal.h"
#include "flotilla/dp.h"

/* 128-bit unsigned arithmetic (GCC/Clang) for exact products of 64-bit values. */
__extension__ typedef unsigned __int128 fl__dp_u128;

enum fl__dp_rng_kind {
    FL__DP_RNG_USER = 0,    /* caller's fill callback */
    FL__DP_RNG_OS = 1,      /* ChaCha20 fast key erasure, keyed by randombytes_buf */
    FL__DP_RNG_CHACHA20 = 2 /* seeded ChaCha20-IETF keystream */
};

struct fl__dp_sampler_table; /* sampler_table.h */

struct fl_dp_rng {
    fl_allocator alloc;            /* copied at create */
    struct fl__err err;            /* last failure detail */
    fl_status failed;              /* sticky fill failure (FL_OK while healthy) */
    enum fl__dp_rng_kind kind;     /* which source refills buf */
    fl_dp_rng_source src;          /* user source (kind USER) */
    uint8_t key[FL_DP_SEED_BYTES]; /* ChaCha20 key (CHACHA20, OS); wiped on destroy */
    uint64_t refills;              /* refills so far: CHACHA20 nonce, OS reseed schedule */
    size_t pos;                    /* next unread byte of buf */
    uint64_t bits;                 /* single-bit reservoir (low bits first) */
    unsigned nbits;                /* valid bits in the reservoir */
    /* Discrete Gaussian tables for the last sigma^2 sampled in a batch (sampler_table.c);
     * NULL until then, freed on destroy. */
    struct fl__dp_sampler_table *table;
    /* Word-aligned random bytes: FL_DP_RNG_BUFFER_BYTES. */
    uint64_t buf[FL_DP_RNG_BUFFER_BYTES / 8];
};

/* Refills buf (pos = 0). On a source failure, marks the rng failed, records the detail and
 * zeroes buf so that readers see zeros; callers check rng->failed in every loop that may
 * repeat on its outcome. */
void fl__dp_rng_refill(struct fl_dp_rng *rng);

/* Next 64 uniform bits. */
static inline uint64_t fl__dp_rng_u64(struct fl_dp_rng *rng) {
    if (rng->pos >= FL_DP_RNG_BUFFER_BYTES)
        fl__dp_rng_refill(rng);
    uint64_t x = rng->buf[rng->pos / 8];
    rng->pos += 8;
    return x;
}

/* Next w uniform bits (1 <= w <= 32) from the reservoir, as an integer in [0, 2^w). A partly
 * used word is discarded when fewer than w bits are left. */
static inline uint64_t fl__dp_rng_take(struct fl_dp_rng *rng, unsigned w) {
    if (rng->nbits < w) {
        rng->bits = fl__dp_rng_u64(rng);
        rng->nbits = 64;
    }
    uint64_t v = rng->bits & (((uint64_t)1 << w) - 1);
    rng->bits >>= w;
    rng->nbits -= w;
    return v;
}

/* Next uniform bit. */
static inline unsigned fl__dp_rng_bit(struct fl_dp_rng *rng) {
    return (unsigned)fl__dp_rng_take(rng, 1);
}

/* Uniform integer in [0, bound), bound >= 1, exact (Lemire's multiply-and-reject): with x
 * uniform on w bits, floor(x bound / 2^w) is uniform once the x whose low product part falls
 * below 2^w mod bound are rejected. Bounds below 2^24 use 32-bit draws from the reservoir
 * (rejection probability < 2^-8), larger ones whole 64-bit words. */
static inline uint64_t fl__dp_rng_below(struct fl_dp_rng *rng, uint64_t bound) {
    if (bound < ((uint64_t)1 << 24)) {
        uint64_t m = fl__dp_rng_take(rng, 32) * bound;
        uint32_t lo = (uint32_t)m;
        if (lo < bound) {
            uint32_t thr = (uint32_t)(((uint64_t)1 << 32) % bound);
            while (lo < thr && !rng->failed) {
                m = fl__dp_rng_take(rng, 32) * bound;
                lo = (uint32_t)m;
            }
        }
        return m >> 32;
    }
    uint64_t x = fl__dp_rng_u64(rng);
    fl__dp_u128 m = (fl__dp_u128)x * bound;
    uint64_t lo = (uint64_t)m;
    if (lo < bound) {
        uint64_t thr = (0 - bound) % bound; /* 2^64 mod bound */
        while (lo < thr && !rng->failed) {
            x = fl__dp_rng_u64(rng);
            m = (fl__dp_u128)x * bound;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#endif /* FLOTILLA_DP_RNG_BITS_H */
