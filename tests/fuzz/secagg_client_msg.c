/* Fuzz target: every client-side parser (KEYS, CIPHERTEXTS, CONSISTENCY_REQ, UNMASK_REQ)
 * and the header reader, fed to a client waiting in the matching phase. The round is a
 * cached fixture (secagg_fuzz_driver.h): a message the client rejects without failing must
 * leave it in the phase it was in, and from time to time the reused round is finished and
 * its sum checked. A message that was accepted or failed the client is followed by a
 * rebuild. */
#include <stdint.h>

#include "secagg_fuzz_driver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int phase, mode;
    uint32_t who;
    if (fz_frame(data, size, &phase, &mode, &who) != 0)
        return 0;
    (void)fl_secagg_message_peek(NULL, NULL, NULL, data + 2, size - 2);
    /* The client waits for the message that opens `phase`: set the round up one phase
     * earlier (the passive round has no consistency phase). */
    if (phase == FL_SECAGG_PHASE_ADVERTISE)
        phase = FL_SECAGG_PHASE_SHARE_KEYS;
    int before = phase - 1;
    if (phase == FL_SECAGG_PHASE_UNMASK && (mode == 0 || mode == 3))
        before = FL_SECAGG_PHASE_MASKED_INPUT;
    struct fz *f = fz_get(before, mode);
    if (!f)
        return 0;
    fl_secagg_phase ph = fl_secagg_client_phase(f->cl[who]);
    const uint8_t *r;
    size_t rl;
    fl_status st = fl_secagg_client_handle(f->cl[who], data + 2, size - 2, &r, &rl);
    if (st != FL_OK && fl_secagg_client_phase(f->cl[who]) == ph) {
        fz_check_reused(before, mode); /* rejected, not failed: must be as before */
        return 0;
    }
    fz_drop(before, mode);
    return 0;
}
