/* libFuzzer target for the SDK's task-config parser (docs/protocol.md 4.2), the JSON a device
 * parses after the signature check: any bytes must parse or be refused with FL_ERR_FORMAT /
 * FL_ERR_TOO_LARGE, never crash, and leave nothing allocated. A parsed task is also run
 * through the update builder on a small synthetic model (fc1 4x3), so every accepted
 * combination of fields reaches the encoders (clip, central or distributed encode). The
 * task must name round 17 of population "pop". Corpus: corpus/client_task/. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "client_round.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

/* A fixed "trained" model: fc1.weight (3, 4) and fc1.bias (3); the global is all zeros. */
static fl_status src_get(void *user, const char *name, float *trained, float *global,
                         size_t *numel) {
    (void)user;
    size_t n;
    if (strcmp(name, "fc1.weight") == 0)
        n = 12;
    else if (strcmp(name, "fc1.bias") == 0)
        n = 3;
    else
        return FL_ERR_NOT_FOUND;
    *numel = n;
    for (size_t i = 0; i < n; i++) {
        if (trained)
            trained[i] = 0.05f * (float)((int)i - 5);
        if (global)
            global[i] = 0;
    }
    return FL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536)
        return 0;
    struct fl__client_task t;
    struct fl__err err = {0};
    fl_status rc = fl__client_task_parse(&t, (const char *)data, size, 17, "pop", NULL, &err);
    CHECK(rc == FL_OK || rc == FL_ERR_FORMAT || rc == FL_ERR_TOO_LARGE);
    if (rc != FL_OK)
        return 0;
    CHECK(t.round_id == 17 && t.n_tensors >= 1);
    /* Keep the encoders' work small: only tasks whose vectors fit the tiny model. */
    if (t.update_dim <= 15) {
        struct fl__client_update_src src = {src_get, NULL, NULL};
        void *vec = NULL;
        size_t len = 0, wb = 0;
        rc = fl__client_update_build(&vec, &len, &wb, &t, &src, 7, NULL, NULL, NULL, &err);
        if (rc == FL_OK) {
            CHECK(len == (size_t)t.update_length && (wb == 4 || wb == 8));
            fl__free(NULL, vec, len * wb);
        }
    }
    fl__client_task_free(&t, NULL);
    return 0;
}
