/* Fuzz target: fl_secagg_norm_check, the stateless parser and verifier of a MASKED_INPUT
 * that carries a norm proof (round and config of secagg_norm_fuzz.h), checked against the
 * server that would receive the same bytes:
 *  - the ticket is all zero unless FL_OK, and then names this round, sender and message;
 *  - the server (a cached real round in MASKED_INPUT) accepts the message through
 *    fl_secagg_server_receive_checked exactly when the check passed: with a valid ticket it
 *    skips the proof, without one it verifies it itself, so a disagreement is a bug in one
 *    of the two paths; a refusal leaves its phase and pending count as they were;
 *  - once it accepted, the round is run to the end: it must finish with the exact sum, or
 *    fail the final link check (masked words other than the proven ones). A wrong sum that
 *    passes is a soundness bug.
 * An accepted input consumes the cached round; the next one builds a fresh round. Byte 0
 * picks the config variant (plain ranges, or a weight coordinate) and the sender. */
#include <sodium.h>
#include <stdint.h>
#include <string.h>

#include "secagg_norm_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct nf nf_slot[NF_VARIANTS];
static int nf_ready[NF_VARIANTS];

static int ticket_is_zero(const fl_secagg_norm_ticket *t) {
    static const fl_secagg_norm_ticket zero;
    return memcmp(t, &zero, sizeof(zero)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    int variant = data[0] >> 7;
    uint32_t from = (uint32_t)(data[0] & 0x7f) % NF_N;
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    fl_secagg_config cfg;
    nf_config(&cfg, variant);

    fl_secagg_norm_ticket t;
    memset(&t, 0xA5, sizeof(t)); /* the call must overwrite it whatever happens */
    char em[128];
    fl_status st =
        fl_secagg_norm_check(&t, &cfg, NF_ROUND, from, msg, len, NULL, em, sizeof(em));
    if (!memchr(em, '\0', sizeof(em)))
        __builtin_trap();
    if (st == FL_OK) {
        /* The digest binds the message: the same check of one changed byte differs. */
        static const uint8_t zero[32];
        if (t.valid != 1 || t.round_id != NF_ROUND || t.client != from || em[0] != '\0' ||
            memcmp(t.digest, zero, 32) == 0)
            __builtin_trap();
    } else {
        /* The documented codes for a message (never MISUSE: the config is good). */
        if (!ticket_is_zero(&t) || em[0] == '\0' ||
            (st != FL_ERR_FORMAT && st != FL_ERR_TOO_LARGE && st != FL_ERR_STATE &&
             st != FL_ERR_PROTOCOL && st != FL_ERR_CRYPTO))
            __builtin_trap();
    }

    struct nf *f = &nf_slot[variant];
    if (!nf_ready[variant]) {
        if (nf_setup(f, variant) != 0) {
            nf_free(f);
            return 0;
        }
        nf_ready[variant] = 1;
    }
    uint32_t pending = fl_secagg_server_pending(f->srv);
    fl_status sst = fl_secagg_server_receive_checked(f->srv, from, msg, len, &t);
    if ((st == FL_OK) != (sst == FL_OK))
        __builtin_trap();
    if (sst != FL_OK) {
        if (fl_secagg_server_phase(f->srv) != FL_SECAGG_PHASE_MASKED_INPUT ||
            fl_secagg_server_pending(f->srv) != pending)
            __builtin_trap();
        return 0;
    }
    if (nf_finish(f, from) < 0)
        __builtin_trap();
    nf_free(f);
    nf_ready[variant] = 0;
    return 0;
}
