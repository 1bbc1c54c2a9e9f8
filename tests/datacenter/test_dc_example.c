/* Train a 784-64-10 MLP on a little Fashion-MNIST with the datacenter library, on one
 * process, checkpoint it and write the model. (docs/datacenter.md shows this file.) */
#include <stdio.h>

#include "flotilla/datacenter.h"

#define DIR "/usr/share/datasets/fashion-mnist"

int main(void) {
    fl_dc_comm *world = NULL;
    fl_dc_dataset *train = NULL;
    fl_dc_trainer *tr = NULL;
    fl_dc_config cfg;
    int rc = 1;

    if (fl_dc_dataset_open_idx(&train, DIR "/train-images-idx3-ubyte.gz",
                               DIR "/train-labels-idx1-ubyte.gz", 1000, NULL) != FL_OK) {
        printf("no data set (%s): skipped\n", fl_dc_last_error());
        return 0;
    }
    fl_dc_config_init(&cfg);   /* 784-128-10, AdamW, dp = tp = 1 */
    cfg.sizes[1] = 64;
    cfg.global_batch = 100;
    cfg.lr = 3e-3f;
    if (fl_dc_comm_open(&world, FL_DC_COMM_SINGLE, NULL) != FL_OK ||
        fl_dc_trainer_create(&tr, &cfg, world, NULL) != FL_OK) {
        printf("setup: %s\n", fl_dc_last_error());
        goto out;
    }
    for (int s = 0; s < 30; s++) {
        fl_dc_step_stats st = {.struct_size = sizeof(st)};
        if (fl_dc_trainer_step(tr, train, &st) != FL_OK) {
            printf("step: %s\n", fl_dc_trainer_errmsg(tr));
            goto out;
        }
        if (st.step % 10 == 0)
            printf("step %llu loss %.4f %.0f samples/s\n", (unsigned long long)st.step, st.loss,
                   st.samples_per_s);
    }
    if (fl_dc_trainer_checkpoint_save(tr, "/tmp/fl-dc-example-ckpt") != FL_OK ||
        fl_dc_trainer_model_save(tr, "/tmp/fl-dc-example.safetensors") != FL_OK) {
        printf("save: %s\n", fl_dc_trainer_errmsg(tr));
        goto out;
    }
    rc = 0;
out:
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(world);
    fl_dc_dataset_close(train);
    return rc;
}
