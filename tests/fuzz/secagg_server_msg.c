/* Fuzz target: every server-side parser (ADVERTISE, SHARES, MASKED_INPUT, CONSISTENCY_SIG,
 * UNMASK_SHARES), fed to a server standing in the matching phase. */
#include <stdint.h>

#include "secagg_fuzz_driver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int phase, active;
    uint32_t who;
    struct fz f;
    if (fz_frame(data, size, &phase, &active, &who) != 0)
        return 0;
    if (fz_setup(&f, phase, active) == 0) {
        fl_status st = fl_secagg_server_receive(f.srv, who, data + 2, size - 2);
        /* Whatever arrived, the round can still be closed without crashing. */
        (void)st;
        (void)fl_secagg_server_pending(f.srv);
        (void)fl_secagg_server_advance(f.srv);
    }
    fz_free(&f);
    return 0;
}
