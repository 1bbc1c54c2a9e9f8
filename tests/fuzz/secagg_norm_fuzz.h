/* The rounds the secagg_norm_proof fuzz target and its seed generator share: n = 3 clients
 * on the complete graph, d = 2 words of 32 bits, norm proofs with m = 2 bits per coordinate
 * and z_0^2 <= 1; in variant 1 the last coordinate is a weight in [1, 2] (norm_tail_max).
 * That is 5 proven bits either way (every part of the proof: range bits, tail bits, bound
 * bits), so one verification is about a millisecond and the fuzzer spends its time in the
 * parser and the verifier, not in a large proof (10^7 runs take about an hour on one core). A
 * seed only verifies under exactly its config and round id, so both sides take them from
 * here.
 *
 * Input framing: byte 0 = variant (bit 7) | the sender's index (bits 0-6, mod NF_N); the rest
 * is the message. */
#ifndef FL_FUZZ_SECAGG_NORM_H
#define FL_FUZZ_SECAGG_NORM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/secagg.h"

#define NF_N 3
#define NF_D 2
#define NF_ROUND 0x4E0F3A11ull

#define NF_VARIANTS 2

static inline void nf_config(fl_secagg_config *cfg, int variant) {
    fl_secagg_config_init(cfg);
    cfg->num_clients = NF_N;
    cfg->dim = NF_D;
    cfg->degree = NF_N - 1;
    cfg->threshold = 2;
    cfg->bits = 32;
    cfg->norm_bits = 2;
    cfg->norm_dim = 1;
    cfg->norm_bound2 = 1;
    cfg->norm_tail_max = variant ? 2 : 0;
}

/* Client i's input, centred: {i - 1, 1}; the first squares to at most 1, the last is also a
 * weight in [1, 2]. */
static inline void nf_input(uint32_t x[NF_D], uint32_t i) {
    x[0] = i - 1; /* -1 mod 2^32 for client 0 */
    x[1] = 1;
}

/* A real round stopped with the server in MASKED_INPUT: every client has answered the
 * ciphertexts, and its MASKED_INPUT reply (proof inside) is kept undelivered. */
struct nf {
    fl_secagg_config cfg;
    int variant; /* nf_config's */
    fl_secagg_server *srv;
    fl_secagg_client *cl[NF_N];
    uint8_t *reply[NF_N]; /* MASKED_INPUT of client i, reply_len[i] bytes */
    size_t reply_len[NF_N];
};

static inline void nf_free(struct nf *f) {
    fl_secagg_server_destroy(f->srv);
    for (int i = 0; i < NF_N; i++) {
        fl_secagg_client_destroy(f->cl[i]);
        free(f->reply[i]);
    }
    memset(f, 0, sizeof(*f));
}

/* Builds the round of `variant` up to MASKED_INPUT. Returns 0, or -1 (then nf_free it). */
static inline int nf_setup(struct nf *f, int variant) {
    memset(f, 0, sizeof(*f));
    nf_config(&f->cfg, variant);
    f->variant = variant;
    uint8_t seed[32] = {0x4e};
    if (fl_secagg_server_create(&f->srv, &f->cfg, NF_ROUND, seed, NULL) != FL_OK)
        return -1;
    for (uint32_t i = 0; i < NF_N; i++) {
        uint32_t x[NF_D];
        const uint8_t *m;
        size_t ml;
        nf_input(x, i);
        if (fl_secagg_client_create(&f->cl[i], &f->cfg, NF_ROUND, i, NULL, NULL) != FL_OK ||
            fl_secagg_client_set_input(f->cl[i], x, NF_D) != FL_OK ||
            fl_secagg_client_start(f->cl[i], &m, &ml) != FL_OK ||
            fl_secagg_server_receive(f->srv, i, m, ml) != FL_OK)
            return -1;
    }
    while (fl_secagg_server_phase(f->srv) != FL_SECAGG_PHASE_MASKED_INPUT) {
        if (fl_secagg_server_advance(f->srv) != FL_OK)
            return -1;
        int masked = fl_secagg_server_phase(f->srv) == FL_SECAGG_PHASE_MASKED_INPUT;
        for (uint32_t i = 0; i < NF_N; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            if (fl_secagg_server_outgoing(f->srv, i, &m, &ml) != FL_OK ||
                fl_secagg_client_handle(f->cl[i], m, ml, &r, &rl) != FL_OK)
                return -1;
            if (masked) {
                f->reply[i] = malloc(rl);
                if (!f->reply[i])
                    return -1;
                memcpy(f->reply[i], r, rl);
                f->reply_len[i] = rl;
            } else if (fl_secagg_server_receive(f->srv, i, r, rl) != FL_OK) {
                return -1;
            }
        }
        if (fl_secagg_server_phase(f->srv) == FL_SECAGG_PHASE_DONE)
            return -1;
    }
    return 0;
}

/* After the server accepted client `who`'s masked input (whatever its words), delivers the
 * other clients' kept replies and runs the round to its end with every client answering.
 * Returns 0 if the round ends DONE with all NF_N inputs and the exact sum of nf_input, 1 if
 * it fails at the final advance with FL_ERR_PROTOCOL (the link check: the masked words were
 * not the proven ones), -1 on anything else. */
static inline int nf_finish(struct nf *f, uint32_t who) {
    for (uint32_t i = 0; i < NF_N; i++)
        if (i != who && fl_secagg_server_receive(f->srv, i, f->reply[i], f->reply_len[i]))
            return -1;
    for (;;) {
        fl_secagg_phase ph = fl_secagg_server_phase(f->srv);
        fl_status st = fl_secagg_server_advance(f->srv);
        if (st != FL_OK)
            return st == FL_ERR_PROTOCOL && ph == FL_SECAGG_PHASE_UNMASK ? 1 : -1;
        if (fl_secagg_server_phase(f->srv) == FL_SECAGG_PHASE_DONE)
            break;
        for (uint32_t i = 0; i < NF_N; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            if (fl_secagg_server_outgoing(f->srv, i, &m, &ml) != FL_OK ||
                fl_secagg_client_handle(f->cl[i], m, ml, &r, &rl) != FL_OK ||
                fl_secagg_server_receive(f->srv, i, r, rl) != FL_OK)
                return -1;
        }
    }
    const uint32_t *sum;
    size_t dim;
    uint32_t count;
    if (fl_secagg_server_result(f->srv, &sum, &dim, &count) != FL_OK || dim != NF_D ||
        count != NF_N)
        return -1;
    uint32_t want[NF_D] = {0};
    for (uint32_t i = 0; i < NF_N; i++) {
        uint32_t x[NF_D];
        nf_input(x, i);
        for (uint32_t j = 0; j < NF_D; j++)
            want[j] += x[j];
    }
    return memcmp(sum, want, sizeof(want)) == 0 ? 0 : -1;
}

#endif /* FL_FUZZ_SECAGG_NORM_H */
