/* Communication graph: Harary graph H(k, n) over a permutation drawn from a public seed
 * (Bell et al., CCS 2020), or the complete graph when k = n - 1 (Bonawitz et al.). */

#include <string.h>

#include "secagg_internal.h"

/* Reads 64-bit little-endian words from a PRG stream; grows (regenerates a longer prefix)
 * when exhausted, which keeps the stream identical because prg(n) is a prefix of prg(m).
 * FL_OK, FL_ERR_NOMEM or FL_ERR_CRYPTO (the PRG failed while growing). */
struct word_stream {
    uint8_t *buf;
    size_t len, pos;
    uint8_t seed[32];
    const struct fl__sa_crypto *crypto;
    const fl_allocator *a;
};

static fl_status stream_next(struct word_stream *s, uint64_t *out) {
    if (s->pos + 8 > s->len) {
        size_t nlen = s->len * 2;
        uint8_t *nb = fl__alloc(s->a, nlen);
        if (!nb)
            return FL_ERR_NOMEM;
        if (s->crypto->prg(nb, nlen, s->seed) != 0) {
            fl__free(s->a, nb, nlen);
            return FL_ERR_CRYPTO;
        }
        fl__free(s->a, s->buf, s->len);
        s->buf = nb;
        s->len = nlen;
    }
    *out = fl__get_u64le(s->buf + s->pos);
    s->pos += 8;
    return FL_OK;
}

/* Uniform integer in [0, bound) by rejection sampling (bound >= 1); codes of stream_next. */
static fl_status stream_uniform(struct word_stream *s, uint64_t bound, uint64_t *out) {
    uint64_t limit = UINT64_MAX - (UINT64_MAX % bound); /* accept r < limit */
    for (;;) {
        uint64_t r;
        fl_status st = stream_next(s, &r);
        if (st != FL_OK)
            return st;
        if (r < limit) {
            *out = r % bound;
            return FL_OK;
        }
    }
}

fl_status fl__sa_graph_init(struct fl__sa_graph *g, uint32_t n, uint32_t k,
                            const uint8_t seed[32], const struct fl__sa_crypto *crypto,
                            const fl_allocator *a) {
    memset(g, 0, sizeof(*g));
    g->n = n;
    g->k = k;
    if (k + 1 == n) {
        g->complete = 1;
        return FL_OK;
    }
    fl_status st = FL_ERR_NOMEM;
    struct word_stream s = {0};
    s.crypto = crypto;
    s.a = a;
    g->perm = fl__alloc_array(a, n, sizeof(uint32_t));
    g->pos = fl__alloc_array(a, n, sizeof(uint32_t));
    if (!g->perm || !g->pos)
        goto out_fail;
    /* Domain-separated PRG seed for the permutation. */
    static const char label[] = "flotilla-secagg-graph-v1";
    uint8_t in[sizeof(label) - 1 + 32];
    memcpy(in, label, sizeof(label) - 1);
    memcpy(in + sizeof(label) - 1, seed, 32);
    if (crypto->sha256(s.seed, in, sizeof(in)) != 0) {
        st = FL_ERR_CRYPTO;
        goto out_fail;
    }
    s.len = 8 * ((size_t)n + 64);
    s.buf = fl__alloc(a, s.len);
    if (!s.buf)
        goto out_fail;
    if (crypto->prg(s.buf, s.len, s.seed) != 0) {
        st = FL_ERR_CRYPTO;
        goto out_fail;
    }
    /* Fisher-Yates: perm[ring position] = client. */
    for (uint32_t i = 0; i < n; i++)
        g->perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint64_t j;
        if ((st = stream_uniform(&s, (uint64_t)i + 1, &j)) != FL_OK)
            goto out_fail;
        uint32_t tmp = g->perm[i];
        g->perm[i] = g->perm[j];
        g->perm[j] = tmp;
    }
    for (uint32_t i = 0; i < n; i++)
        g->pos[g->perm[i]] = i;
    fl__free(a, s.buf, s.len);
    return FL_OK;
out_fail:
    fl__free(a, s.buf, s.len);
    fl__sa_graph_free(g, a);
    return st;
}

void fl__sa_graph_free(struct fl__sa_graph *g, const fl_allocator *a) {
    if (!g)
        return;
    fl__free(a, g->perm, (size_t)g->n * sizeof(uint32_t));
    fl__free(a, g->pos, (size_t)g->n * sizeof(uint32_t));
    g->perm = g->pos = NULL;
}
