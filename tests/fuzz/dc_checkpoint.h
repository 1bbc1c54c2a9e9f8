/* The datacenter trainer the dc_checkpoint fuzz target and its seed generator share: a
 * 6-5-3 MLP on the CPU backend, one process, AdamW, ZeRO 0. Its checkpoints and model
 * files are small (a few hundred bytes of tensors), so the fuzzer spends its time in the
 * parsers, not in copies. */
#ifndef FL_FUZZ_DC_CHECKPOINT_H
#define FL_FUZZ_DC_CHECKPOINT_H

#include "flotilla/datacenter.h"

/* Name of the step directory the fuzz target's `latest` names by default. */
#define DC_FUZZ_STEP "step-00000001"

static inline void dc_fuzz_config(fl_dc_config *cfg) {
    fl_dc_config_init(cfg);
    cfg->backend = FL_DC_BACKEND_CPU;
    cfg->n_layers = 2;
    cfg->sizes[0] = 6;
    cfg->sizes[1] = 5;
    cfg->sizes[2] = 3;
    cfg->global_batch = 8;
    cfg->bucket_bytes = 4096;
}

#endif /* FL_FUZZ_DC_CHECKPOINT_H */
