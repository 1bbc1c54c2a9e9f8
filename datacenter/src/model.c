/* Model layout: which slice of each linear layer a TP rank holds (Megatron-LM's
 * column/row split), where every tensor lives in the parameter arena, and how the arena is
 * cut into DP gradient buckets padded for ZeRO sharding. Also the deterministic initial
 * weights, generated for the full model so every grid shape starts from the same point. */
#include <math.h>
#include <string.h>

#include "dc_internal.h"

/* Megatron pairs consecutive layers: the first of a pair is column-parallel (each TP rank
 * computes a slice of the output features, no communication), the second row-parallel
 * (each rank multiplies its slice of the input features; the partial outputs are summed by
 * one all-reduce). A leftover last layer (odd count, e.g. softmax regression) is
 * replicated: every TP rank computes it in full on identical inputs. */
static enum fl__dc_split split_of(int layer, int n_layers, int tp) {
    if (tp == 1)
        return FL__DC_REP;
    if (layer % 2 == 0)
        return layer + 1 < n_layers ? FL__DC_COL : FL__DC_REP;
    return FL__DC_ROW;
}

void fl__dc_layout(const fl_dc_config *cfg, int tp_rank, struct fl__dc_layer *layers,
                   struct fl__dc_bucket *buckets, int *n_buckets, size_t *arena_len) {
    int L = cfg->n_layers;
    size_t tp = (size_t)cfg->tp, r = (size_t)tp_rank;
    size_t tsize[2 * FL_DC_MAX_LAYERS];

    for (int i = 0; i < L; i++) {
        struct fl__dc_layer *l = &layers[i];
        memset(l, 0, sizeof(*l));
        l->in = cfg->sizes[i];
        l->out = cfg->sizes[i + 1];
        l->split = split_of(i, L, cfg->tp);
        l->in_l = l->in;
        l->out_l = l->out;
        if (l->split == FL__DC_COL) {
            l->out_l = (int)fl__dc_chunk_len((size_t)l->out, tp, r);
            l->out_off = (int)fl__dc_chunk_start((size_t)l->out, tp, r);
        } else if (l->split == FL__DC_ROW) {
            l->in_l = (int)fl__dc_chunk_len((size_t)l->in, tp, r);
            l->in_off = (int)fl__dc_chunk_start((size_t)l->in, tp, r);
        }
        l->b_len = l->split == FL__DC_COL ? l->out_l : l->out;
        tsize[2 * i] = (size_t)l->out_l * (size_t)l->in_l;
        tsize[2 * i + 1] = (size_t)l->b_len;
    }

    /* Buckets are filled from the last tensor backwards, the order in which backward
     * produces gradients, and closed once they reach bucket_bytes. */
    int first[2 * FL_DC_MAX_LAYERS];
    int nb = 0;
    size_t acc = 0, cap = cfg->bucket_bytes / sizeof(float);
    if (cap == 0)
        cap = 1;
    for (int t = 2 * L - 1; t >= 0; t--) {
        acc += tsize[t];
        if (acc >= cap || t == 0) {
            first[nb++] = t;
            acc = 0;
        }
    }
    /* arena order: bucket 0 holds the first tensors */
    size_t off = 0, shard_off = 0, dp = (size_t)cfg->dp;
    for (int b = 0; b < nb; b++) {
        struct fl__dc_bucket *bk = &buckets[b];
        int t0 = first[nb - 1 - b];
        int t1 = b + 1 < nb ? first[nb - 2 - b] : 2 * L; /* one past the last tensor */
        memset(bk, 0, sizeof(*bk));
        bk->off = off;
        bk->first_tensor = t0;
        for (int t = t0; t < t1; t++) {
            struct fl__dc_layer *l = &layers[t / 2];
            if (t % 2 == 0) {
                l->w_off = off;
                l->bucket = b;
            } else {
                l->b_off = off;
            }
            off += tsize[t];
        }
        bk->len = off - bk->off;
        /* pad so that every DP rank owns an equal shard; round to 4 floats as well so that
         * shards start 16-byte aligned */
        size_t q = dp * 4;
        bk->padded = (bk->len + q - 1) / q * q;
        bk->shard_off = shard_off;
        shard_off += bk->padded / dp;
        off = bk->off + bk->padded;
    }
    *n_buckets = nb;
    *arena_len = off;
}

size_t fl__dc_full_offset(const fl_dc_config *cfg, int layer, bool bias) {
    size_t off = 0;
    for (int i = 0; i < layer; i++)
        off += (size_t)cfg->sizes[i + 1] * ((size_t)cfg->sizes[i] + 1);
    if (bias)
        off += (size_t)cfg->sizes[layer + 1] * (size_t)cfg->sizes[layer];
    return off;
}

void fl__dc_init_full(const fl_dc_config *cfg, float *full) {
    for (int i = 0; i < cfg->n_layers; i++) {
        size_t in = (size_t)cfg->sizes[i], out = (size_t)cfg->sizes[i + 1];
        float bound = 1.0f / sqrtf((float)in);
        uint64_t s = cfg->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i;
        float *w = full + fl__dc_full_offset(cfg, i, false);
        for (size_t k = 0; k < out * in + out; k++) {
            /* 24 random bits -> [0, 1) exactly representable in float */
            float u = (float)(fl__dc_splitmix64(&s) >> 40) * (1.0f / 16777216.0f);
            w[k] = (2.0f * u - 1.0f) * bound;
        }
    }
}
