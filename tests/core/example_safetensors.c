/* docs/core.md example: save a model to a safetensors image, then read it back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/common.h"
#include "flotilla/tensor.h"

int main(void) {
    /* fc.weight (2, 3) and fc.bias (3,), float32. */
    const float weight[6] = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, -0.5f};
    const float bias[3] = {0.1f, 0.2f, 0.3f};
    const uint64_t wshape[2] = {2, 3}, bshape[1] = {3};
    fl_safetensors_writer *w = NULL;
    fl_safetensors *st = NULL;
    void *image = NULL;
    size_t len = 0;
    int ok = 0;

    if (fl_safetensors_writer_create(&w, NULL) != FL_OK)
        return 1;
    /* Data is borrowed: weight and bias must outlive the writer. */
    if (fl_safetensors_writer_add(w, "fc.weight", FL_DTYPE_F32, 2, wshape, weight,
                                  sizeof(weight)) != FL_OK ||
        fl_safetensors_writer_add(w, "fc.bias", FL_DTYPE_F32, 1, bshape, bias,
                                  sizeof(bias)) != FL_OK ||
        fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp") != FL_OK ||
        fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_VERSION, "3") != FL_OK ||
        fl_safetensors_writer_size(w, &len) != FL_OK || (image = malloc(len)) == NULL ||
        fl_safetensors_writer_serialize(w, image, len) != FL_OK) {
        fprintf(stderr, "write: %s\n", fl_safetensors_writer_errmsg(w));
        goto out;
    }

    /* Parse zero-copy: views point into image, which must outlive st. */
    if (fl_safetensors_create(&st, NULL) != FL_OK)
        goto out;
    fl_status rc = fl_safetensors_parse(st, image, len);
    if (rc != FL_OK) {
        fprintf(stderr, "%s: %s\n", fl_status_name(rc), fl_safetensors_errmsg(st));
        goto out;
    }
    printf("%s v%s, %zu tensors\n", fl_safetensors_metadata_get(st, FL_SAFETENSORS_META_ARCH),
           fl_safetensors_metadata_get(st, FL_SAFETENSORS_META_VERSION),
           fl_safetensors_count(st));
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        fl_tensor_view v;
        fl_safetensors_at(st, &v, i);
        printf("  %-10s %s ndim=%zu nbytes=%zu\n", v.name, fl_dtype_name(v.dtype), v.ndim,
               v.nbytes);
    }
    fl_tensor_view b;
    if (fl_safetensors_find(st, &b, "fc.bias") == FL_OK && b.dtype == FL_DTYPE_F32) {
        float last; /* views may be unaligned: copy rather than cast */
        memcpy(&last, (const char *)b.data + 2 * sizeof(float), sizeof(float));
        ok = last == 0.3f;
    }

out:
    fl_safetensors_destroy(st);
    fl_safetensors_writer_destroy(w);
    free(image);
    return ok ? 0 : 1;
}
