/* Key derivation, commitments, signed statements and mask expansion. */

#include <string.h>

#include "secagg_internal.h"

static const uint8_t fl__sa_salt[] = "flotilla-secagg-v1";

static int context_set(const uint8_t *context) {
    uint8_t any = 0;
    for (size_t i = 0; context && i < FL_SECAGG_CONTEXT_BYTES; i++)
        any |= context[i];
    return any != 0;
}

int fl__sa_has_context(const fl_secagg_config *cfg) { return context_set(cfg->context); }

int fl__sa_derive_pair_key(uint8_t out[32], const struct fl__sa_crypto *crypto,
                           const char *label, const uint8_t sk[32], const uint8_t peer_pk[32],
                           uint64_t round_id, uint32_t u, uint32_t v, const uint8_t *context) {
    uint8_t shared[32];
    uint8_t info[16 + 8 + 4 + 4 + FL_SECAGG_CONTEXT_BYTES];
    size_t ll = strlen(label);
    if (ll > 16)
        return -1;
    int rc = -1;
    if (crypto->x25519_shared(shared, sk, peer_pk) != 0)
        goto out;
    /* info = label || round || min(u, v) || max(u, v) [|| context]: both ends derive the
     * same key, and only if they agree on the context. */
    uint32_t lo = u < v ? u : v, hi = u < v ? v : u;
    size_t il = ll + 16;
    memcpy(info, label, ll);
    fl__put_u64le(info + ll, round_id);
    fl__put_u32le(info + ll + 8, lo);
    fl__put_u32le(info + ll + 12, hi);
    if (context_set(context)) {
        memcpy(info + il, context, FL_SECAGG_CONTEXT_BYTES);
        il += FL_SECAGG_CONTEXT_BYTES;
    }
    if (crypto->hkdf_sha256(out, 32, fl__sa_salt, sizeof(fl__sa_salt) - 1, shared, 32, info,
                            il) != 0)
        goto out;
    rc = 0;
out:
    fl_memzero(shared, sizeof(shared));
    if (rc != 0)
        fl_memzero(out, 32);
    return rc;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FL__SA_LOAD_LE(dst, src) memcpy(&(dst), (src), 4)
#else
#define FL__SA_LOAD_LE(dst, src) ((dst) = fl__get_u32le(src))
#endif

void fl__sa_add_u32le(uint32_t *restrict acc, const uint8_t *restrict p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        FL__SA_LOAD_LE(v, p + 4 * i);
        acc[i] += v;
    }
}

void fl__sa_sub_u32le(uint32_t *restrict acc, const uint8_t *restrict p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        FL__SA_LOAD_LE(v, p + 4 * i);
        acc[i] -= v;
    }
}

void fl__sa_ctr_add(uint8_t iv[16], uint64_t blocks) {
    unsigned carry = 0;
    for (int i = 15; i >= 0; i--) {
        unsigned sum = iv[i] + (unsigned)(blocks & 0xFF) + carry;
        iv[i] = (uint8_t)sum;
        carry = sum >> 8;
        blocks >>= 8;
        if (!blocks && !carry)
            break;
    }
}

/* With the streaming PRG (crypto.h prg_open): one open, then FL__SA_MASK_STREAM_CHUNK
 * pieces of keystream through the start of scratch (L1-sized; the stream context follows
 * them in scratch). Without it, the PRG takes no offset, so chunk c of FL__SA_MASK_CHUNK
 * elements is produced from a seed whose counter half is advanced by c * chunk / 16 blocks:
 * AES-CTR keystream is the same as one long call. */
_Static_assert(4 * FL__SA_MASK_STREAM_CHUNK + FL__SA_PRG_STREAM_MAX <= 4 * FL__SA_MASK_CHUNK,
               "fl__sa_mask_apply's scratch holds a stream chunk and its context");

int fl__sa_mask_apply(uint32_t *acc, size_t dim, const uint8_t seed[32], int sign,
                      const struct fl__sa_crypto *crypto, uint8_t *scratch) {
    uint8_t s[32];
    int rc = -1;
    int stream = crypto->prg_open && crypto->prg_next && crypto->prg_close &&
                 crypto->prg_stream_size <= FL__SA_PRG_STREAM_MAX;
    size_t chunk = stream ? FL__SA_MASK_STREAM_CHUNK : FL__SA_MASK_CHUNK;
    uint8_t *ctx = scratch + 4 * FL__SA_MASK_STREAM_CHUNK;
    memcpy(s, seed, 32);
    if (stream && crypto->prg_open(ctx, s) != 0) {
        crypto->prg_close(ctx);
        goto out;
    }
    for (size_t off = 0; off < dim; off += chunk) {
        size_t m = dim - off < chunk ? dim - off : chunk;
        if (stream ? crypto->prg_next(ctx, scratch, m * 4) != 0
                   : crypto->prg(scratch, m * 4, s) != 0)
            goto out_close;
        if (sign > 0)
            fl__sa_add_u32le(acc + off, scratch, m);
        else
            fl__sa_sub_u32le(acc + off, scratch, m);
        if (!stream)
            fl__sa_ctr_add(s + 16, (FL__SA_MASK_CHUNK * 4) / 16);
    }
    rc = 0;
out_close:
    if (stream)
        crypto->prg_close(ctx); /* wipes the key schedule */
out:
    fl_memzero(s, sizeof(s));
    /* Only the first chunk's worth was ever written. */
    fl_memzero(scratch, (dim < chunk ? dim : chunk) * 4);
    return rc;
}

/* The fused add is a quarter to a sixth of the mask work once the keystream is VAES-fast;
 * the baseline x86-64 build vectorizes it 4 words wide, AVX-512 16 (0.30 -> 0.27 ns per
 * word and mask with the keystream, docs/secagg.md "Wider adds"): FL__SIMD_CLONES
 * (fl_internal.h). */

/* acc[i] += sum_j sign_j src_j[i] for m (1..FL__SA_MASK_FUSE) sources src_j = src + j *
 * stride, with neg[j] = 0 (add) or 0xFFFFFFFF (subtract): (v ^ neg) - neg is v or -v, so
 * the loop is branch-free and vectorizes; M is a constant in each instantiation. */
#define FL__SA_FUSE_LOOP(M)                                                                   \
    for (size_t i = 0; i < n; i++) {                                                          \
        uint32_t sum = 0;                                                                     \
        for (size_t j = 0; j < (M); j++) {                                                    \
            uint32_t v;                                                                       \
            FL__SA_LOAD_LE(v, src + j * stride + 4 * i);                                      \
            sum += (v ^ neg[j]) - neg[j];                                                     \
        }                                                                                     \
        acc[i] += sum;                                                                        \
    }

FL__SIMD_CLONES
static void fuse_apply(uint32_t *restrict acc, const uint8_t *restrict src, size_t stride,
                       const uint32_t neg[FL__SA_MASK_FUSE], size_t m, size_t n) {
    _Static_assert(FL__SA_MASK_FUSE == 4, "fuse_apply has cases for 1..4 sources");
    switch (m) {
    case 1:
        FL__SA_FUSE_LOOP(1)
        break;
    case 2:
        FL__SA_FUSE_LOOP(2)
        break;
    case 3:
        FL__SA_FUSE_LOOP(3)
        break;
    default:
        FL__SA_FUSE_LOOP(4)
        break;
    }
}

/* Fallback for a table without the streaming PRG: one prg() call per chunk and source,
 * the counter half of each seed advanced by a chunk's blocks after each call. */
static int mask_range_prg(uint32_t *acc, size_t lo, size_t hi, uint8_t (*s)[32],
                          const uint32_t *neg, size_t m, const struct fl__sa_crypto *crypto,
                          uint8_t *scratch) {
    const size_t chunk = FL__SA_MASK_STREAM_CHUNK, stride = chunk * 4;
    for (size_t off = lo; off < hi; off += chunk) {
        size_t len = hi - off < chunk ? hi - off : chunk;
        for (size_t j = 0; j < m; j++) {
            if (crypto->prg(scratch + j * stride, len * 4, s[j]) != 0)
                return -1;
            fl__sa_ctr_add(s[j] + 16, stride / 16);
        }
        fuse_apply(acc + off, scratch, stride, neg, m, len);
    }
    return 0;
}

/* With the streaming PRG: one open per source and call, then L1-sized pieces of each
 * keystream, added in one fused pass per chunk. The stream contexts follow the keystream
 * area in scratch. */
static int mask_range_stream(uint32_t *acc, size_t lo, size_t hi, uint8_t (*s)[32],
                             const uint32_t *neg, size_t m, const struct fl__sa_crypto *crypto,
                             uint8_t *scratch) {
    const size_t chunk = FL__SA_MASK_STREAM_CHUNK, stride = chunk * 4;
    uint8_t *ctx = scratch + (size_t)FL__SA_MASK_FUSE * stride;
    size_t nopen = 0;
    int rc = -1;
    for (; nopen < m; nopen++) {
        if (crypto->prg_open(ctx + nopen * FL__SA_PRG_STREAM_MAX, s[nopen]) != 0) {
            crypto->prg_close(ctx + nopen * FL__SA_PRG_STREAM_MAX);
            goto out;
        }
    }
    for (size_t off = lo; off < hi; off += chunk) {
        size_t len = hi - off < chunk ? hi - off : chunk;
        for (size_t j = 0; j < m; j++)
            if (crypto->prg_next(ctx + j * FL__SA_PRG_STREAM_MAX, scratch + j * stride,
                                 len * 4) != 0)
                goto out;
        fuse_apply(acc + off, scratch, stride, neg, m, len);
    }
    rc = 0;
out:
    for (size_t j = 0; j < nopen; j++)
        crypto->prg_close(ctx + j * FL__SA_PRG_STREAM_MAX); /* wipes the key schedules */
    return rc;
}

int fl__sa_mask_apply_range(uint32_t *acc, size_t lo, size_t hi, const uint8_t (*seeds)[32],
                            const int *signs, size_t m, const struct fl__sa_crypto *crypto,
                            uint8_t *scratch) {
    uint8_t s[FL__SA_MASK_FUSE][32];
    uint32_t neg[FL__SA_MASK_FUSE] = {0};
    int rc;
    if (m == 0 || lo >= hi)
        return 0;
    if (m > FL__SA_MASK_FUSE || lo % 4 != 0)
        return -1;
    for (size_t j = 0; j < m; j++) {
        memcpy(s[j], seeds[j], 32);
        neg[j] = signs[j] > 0 ? 0u : 0xFFFFFFFFu;
        /* Element lo starts AES block lo / 4 of the keystream. */
        fl__sa_ctr_add(s[j] + 16, lo / 4);
    }
    if (crypto->prg_open && crypto->prg_next && crypto->prg_close &&
        crypto->prg_stream_size <= FL__SA_PRG_STREAM_MAX)
        rc = mask_range_stream(acc, lo, hi, s, neg, m, crypto, scratch);
    else
        rc = mask_range_prg(acc, lo, hi, s, neg, m, crypto, scratch);
    fl_memzero(s, sizeof(s));
    if (rc != 0) /* keystream of the chunks drawn so far */
        fl_memzero(scratch, (size_t)FL__SA_MASK_FUSE * 4 * FL__SA_MASK_STREAM_CHUNK);
    return rc;
}

int fl__sa_mask_apply_many(uint32_t *acc, size_t dim, const uint8_t (*seeds)[32],
                           const int *signs, size_t m, const struct fl__sa_crypto *crypto,
                           uint8_t *scratch) {
    if (m > FL__SA_MASK_FUSE)
        return -1;
    return fl__sa_mask_apply_range(acc, 0, dim, seeds, signs, m, crypto, scratch);
}

int fl__sa_mask_apply_blocked(uint32_t *acc, size_t lo, size_t hi, const uint8_t (*seeds)[32],
                              const int *signs, size_t m, const struct fl__sa_crypto *crypto,
                              uint8_t *scratch, int (*stop)(const void *), const void *arg) {
    if (lo % 4 != 0)
        return -1;
    for (size_t b = lo; b < hi; b += FL__SA_MASK_BLOCK) {
        size_t e = hi - b < FL__SA_MASK_BLOCK ? hi : b + FL__SA_MASK_BLOCK;
        for (size_t g = 0; g < m; g += FL__SA_MASK_FUSE) {
            if (stop && stop(arg))
                return 0;
            size_t f = m - g < FL__SA_MASK_FUSE ? m - g : FL__SA_MASK_FUSE;
            if (fl__sa_mask_apply_range(acc, b, e, seeds + g, signs + g, f, crypto, scratch) !=
                0)
                return -1;
        }
    }
    return 0;
}

int fl__sa_commit_b(uint8_t out[32], const struct fl__sa_crypto *crypto, uint64_t round_id,
                    uint32_t u, const uint8_t b[32]) {
    static const char label[] = "flotilla-secagg-b-v1";
    uint8_t buf[sizeof(label) - 1 + 8 + 4 + 32];
    size_t o = sizeof(label) - 1;
    memcpy(buf, label, o);
    fl__put_u64le(buf + o, round_id);
    fl__put_u32le(buf + o + 8, u);
    memcpy(buf + o + 12, b, 32);
    int rc = crypto->sha256(out, buf, sizeof(buf));
    fl_memzero(buf, sizeof(buf));
    return rc;
}

size_t fl__sa_adv_statement(uint8_t *buf, size_t cap, uint64_t round_id, uint32_t u,
                            const uint8_t c_pk[32], const uint8_t s_pk[32],
                            const uint8_t *context) {
    static const char label[] = "flotilla-secagg-adv-v1";
    size_t o = sizeof(label) - 1;
    size_t cl = context_set(context) ? FL_SECAGG_CONTEXT_BYTES : 0;
    if (cap < o + 8 + 4 + 64 + cl)
        return 0;
    memcpy(buf, label, o);
    fl__put_u64le(buf + o, round_id);
    fl__put_u32le(buf + o + 8, u);
    memcpy(buf + o + 12, c_pk, 32);
    memcpy(buf + o + 44, s_pk, 32);
    if (cl)
        memcpy(buf + o + 76, context, cl);
    return o + 76 + cl;
}

size_t fl__sa_cert_statement(uint8_t *buf, size_t cap, uint32_t u, const uint8_t vk[32]) {
    static const char label[] = "flotilla-secagg-cert-v1";
    size_t o = sizeof(label) - 1;
    if (cap < o + 4 + 32)
        return 0;
    memcpy(buf, label, o);
    fl__put_u32le(buf + o, u);
    memcpy(buf + o + 4, vk, 32);
    return o + 36;
}

size_t fl__sa_cert_statement_device(uint8_t *buf, size_t cap,
                                    const uint8_t device_id[FL_SECAGG_DEVICE_ID_BYTES],
                                    const uint8_t vk[32]) {
    static const char label[] = "flotilla-secagg-cert-v2";
    size_t o = sizeof(label) - 1;
    if (cap < o + FL_SECAGG_DEVICE_ID_BYTES + 32)
        return 0;
    memcpy(buf, label, o);
    memcpy(buf + o, device_id, FL_SECAGG_DEVICE_ID_BYTES);
    memcpy(buf + o + FL_SECAGG_DEVICE_ID_BYTES, vk, 32);
    return o + FL_SECAGG_DEVICE_ID_BYTES + 32;
}

uint8_t *fl__sa_u3_statement(size_t *out_len, const fl_allocator *a, uint64_t round_id,
                             uint32_t n, const uint8_t *bitmap, size_t bitmap_len) {
    static const char label[] = "flotilla-secagg-u3-v1";
    size_t o = sizeof(label) - 1;
    size_t len = o + 8 + 4 + bitmap_len;
    uint8_t *buf = fl__alloc(a, len);
    if (!buf)
        return NULL;
    memcpy(buf, label, o);
    fl__put_u64le(buf + o, round_id);
    fl__put_u32le(buf + o + 8, n);
    memcpy(buf + o + 12, bitmap, bitmap_len);
    *out_len = len;
    return buf;
}
