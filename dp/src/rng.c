/* fl_dp_rng: buffered random bytes from the OS CSPRNG, a seeded ChaCha20 stream or a
 * caller's callback. */

#include <string.h>

#include "chacha.h"
#include "rng_bits.h"
#include "sampler_table.h"

#define FL__DP_OS_RESEED 256 /* refills (1 MiB) between OS reseeds of the OS-backed rng */

size_t fl_dp_seed_bytes(void) {
    return FL_DP_SEED_BYTES;
}

size_t fl_dp_rng_buffer_bytes(void) {
    return FL_DP_RNG_BUFFER_BYTES;
}

/* Fills buf from the configured source; returns the source's status. */
static fl_status rng_source_fill(struct fl_dp_rng *rng) {
    uint8_t *b = (uint8_t *)rng->buf;
    switch (rng->kind) {
    case FL__DP_RNG_OS: {
        /* Fast-key-erasure generator: the key comes from the OS CSPRNG every
         * FL__DP_OS_RESEED refills; each refill is ChaCha20 blocks 0..63 under the current
         * key and block 64 becomes the next key, so a later compromise of the state never
         * reveals bytes already handed out. One getrandom call per 1 MiB instead of per
         * 4 KiB: the syscall otherwise dominates the samplers' cost. */
        uint8_t nonce[FL__DP_CHACHA_NONCE_BYTES] = {0};
        uint8_t next[64];
        if (rng->refills % FL__DP_OS_RESEED == 0 &&
            fl__dp_os_random(rng->key, sizeof(rng->key)) != 0)
            return FL_ERR_CRYPTO;
        rng->refills++;
        if (fl__dp_chacha20_keystream(b, FL_DP_RNG_BUFFER_BYTES, nonce, 0, rng->key) != 0 ||
            fl__dp_chacha20_keystream(next, sizeof(next), nonce, FL_DP_RNG_BUFFER_BYTES / 64,
                                      rng->key) != 0) {
            fl_memzero(next, sizeof(next));
            return FL_ERR_CRYPTO;
        }
        memcpy(rng->key, next, sizeof(rng->key));
        fl_memzero(next, sizeof(next));
        return FL_OK;
    }
    case FL__DP_RNG_CHACHA20: {
        uint8_t nonce[FL__DP_CHACHA_NONCE_BYTES] = {0};
        fl__put_u64le(nonce, rng->refills);
        rng->refills++;
        if (fl__dp_chacha20_keystream(b, FL_DP_RNG_BUFFER_BYTES, nonce, 0, rng->key) != 0)
            return FL_ERR_CRYPTO;
        return FL_OK;
    }
    case FL__DP_RNG_USER:
    default:
        return rng->src.fill(rng->src.user, b, FL_DP_RNG_BUFFER_BYTES);
    }
}

void fl__dp_rng_refill(struct fl_dp_rng *rng) {
    rng->pos = 0;
    if (rng->failed) {
        memset(rng->buf, 0, sizeof(rng->buf));
        return;
    }
    fl_status st = rng_source_fill(rng);
    if (st != FL_OK) {
        if ((unsigned)st >= FL_STATUS_COUNT) /* a callback's unknown code */
            st = FL_ERR_INTERNAL;
        rng->failed = st;
        fl__err_set(&rng->err, st, "random source failed: %s", fl_status_str(st));
        fl_memzero(rng->buf, sizeof(rng->buf));
    }
}

static fl_status rng_new(struct fl_dp_rng **out, const fl_allocator *alloc) {
    fl_allocator a;
    if (!out || fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    *out = NULL;
    struct fl_dp_rng *rng = fl__alloc(&a, sizeof(*rng));
    if (!rng)
        return FL_ERR_NOMEM;
    memset(rng, 0, sizeof(*rng));
    rng->alloc = a;
    rng->pos = FL_DP_RNG_BUFFER_BYTES; /* empty: the first read refills */
    *out = rng;
    return FL_OK;
}

fl_status fl_dp_rng_create(fl_dp_rng **out, const fl_dp_rng_source *src,
                           const fl_allocator *alloc) {
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (!src || src->struct_size < sizeof(fl_dp_rng_source) || !src->fill)
        return FL_ERR_MISUSE;
    struct fl_dp_rng *rng;
    fl_status st = rng_new(&rng, alloc);
    if (st != FL_OK)
        return st;
    rng->kind = FL__DP_RNG_USER;
    rng->src = *src;
    *out = rng;
    return FL_OK;
}

fl_status fl_dp_rng_create_os(fl_dp_rng **out, const fl_allocator *alloc) {
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (fl__dp_crypto_init() != 0)
        return FL_ERR_CRYPTO;
    struct fl_dp_rng *rng;
    fl_status st = rng_new(&rng, alloc);
    if (st != FL_OK)
        return st;
    rng->kind = FL__DP_RNG_OS;
    *out = rng;
    return FL_OK;
}

fl_status fl_dp_rng_create_chacha20(fl_dp_rng **out, const uint8_t *seed, size_t seed_len,
                                    const fl_allocator *alloc) {
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (!seed || seed_len != FL_DP_SEED_BYTES)
        return FL_ERR_MISUSE;
    if (fl__dp_crypto_init() != 0)
        return FL_ERR_CRYPTO;
    struct fl_dp_rng *rng;
    fl_status st = rng_new(&rng, alloc);
    if (st != FL_OK)
        return st;
    rng->kind = FL__DP_RNG_CHACHA20;
    memcpy(rng->key, seed, FL_DP_SEED_BYTES);
    *out = rng;
    return FL_OK;
}

void fl_dp_rng_destroy(fl_dp_rng *rng) {
    if (!rng)
        return;
    fl_allocator a = rng->alloc;
    if (rng->table)
        fl__free(&a, rng->table, sizeof(*rng->table));
    fl_memzero(rng, sizeof(*rng));
    fl__free(&a, rng, sizeof(*rng));
}

const char *fl_dp_rng_errmsg(const fl_dp_rng *rng) {
    if (!rng)
        return fl_status_str(FL_ERR_MISUSE);
    return fl__err_msg(&rng->err);
}

fl_status fl_dp_rng_bytes(fl_dp_rng *rng, uint8_t *out, size_t n) {
    if (!rng)
        return FL_ERR_MISUSE;
    if (!out && n > 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_rng_bytes: out is NULL");
    while (n > 0 && !rng->failed) {
        if (rng->pos >= FL_DP_RNG_BUFFER_BYTES)
            fl__dp_rng_refill(rng);
        if (rng->failed)
            break;
        size_t avail = FL_DP_RNG_BUFFER_BYTES - rng->pos;
        size_t k = n < avail ? n : avail;
        uint8_t *src = (uint8_t *)rng->buf + rng->pos;
        memcpy(out, src, k);
        fl_memzero(src, k); /* handed out: do not keep a copy */
        rng->pos += k;
        out += k;
        n -= k;
    }
    /* Word readers need an 8-byte-aligned position: skip the rest of a partly used word. */
    rng->pos = (rng->pos + 7) & ~(size_t)7;
    return rng->failed;
}

fl_status fl_dp_rng_uniform(fl_dp_rng *rng, uint64_t *out, uint64_t bound) {
    if (!rng)
        return FL_ERR_MISUSE;
    if (!out || bound == 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_rng_uniform: %s",
                           out ? "bound is 0" : "out is NULL");
    uint64_t v = fl__dp_rng_below(rng, bound);
    if (rng->failed)
        return rng->failed;
    *out = v;
    return FL_OK;
}
