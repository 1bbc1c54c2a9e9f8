/* Fuzz target: every server-side parser (ADVERTISE, SHARES, MASKED_INPUT, CONSISTENCY_SIG,
 * UNMASK_SHARES), fed to a server standing in the matching phase. The server is a cached
 * fixture (secagg_fuzz_driver.h): a rejected message must leave its phase and pending count
 * as they were, and from time to time the reused round is finished and its sum checked. An
 * accepted message changes the round, which is then closed (advance, as
 * fl_secagg_server_would_advance foresaw) and rebuilt. */
#include <stdint.h>

#include "secagg_fuzz_driver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int phase, mode;
    uint32_t who;
    if (fz_frame(data, size, &phase, &mode, &who) != 0)
        return 0;
    struct fz *f = fz_get(phase, mode);
    if (!f)
        return 0;
    fl_secagg_phase ph = fl_secagg_server_phase(f->srv);
    uint32_t pending = fl_secagg_server_pending(f->srv);
    fl_status st = fl_secagg_server_receive(f->srv, who, data + 2, size - 2);
    if (st != FL_OK) {
        /* Documented: on any error the server state is unchanged. */
        if (fl_secagg_server_phase(f->srv) != ph || fl_secagg_server_pending(f->srv) != pending)
            __builtin_trap();
        fz_check_reused(phase, mode);
        return 0;
    }
    /* Accepted: whatever arrived, the round can still be closed without crashing, and
     * fl_secagg_server_would_advance foresaw whether the close aborts for too few. */
    (void)fl_secagg_server_pending(f->srv);
    fl_status w = fl_secagg_server_would_advance(f->srv);
    fl_status a = fl_secagg_server_advance(f->srv);
    if ((w == FL_OK && a == FL_ERR_ABORTED) || (w == FL_ERR_ABORTED && a != FL_ERR_ABORTED))
        __builtin_trap();
    fz_drop(phase, mode);
    return 0;
}
