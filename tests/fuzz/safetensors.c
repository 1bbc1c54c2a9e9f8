/* libFuzzer target for the safetensors reader (and, on valid input, the writer).
 *
 * Oracles beyond the sanitizers: with the libc allocator a parse never reports
 * FL_ERR_NOMEM; every view lies inside the input; find() agrees with at(); and a valid image
 * re-serialized by the writer parses back to the same tensors and metadata. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/tensor.h"

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Views of b must equal those of a (same names, in any order). */
static void check_same(const fl_safetensors *a, const fl_safetensors *b) {
    CHECK(fl_safetensors_count(a) == fl_safetensors_count(b));
    CHECK(fl_safetensors_metadata_count(a) == fl_safetensors_metadata_count(b));
    for (size_t i = 0; i < fl_safetensors_count(a); i++) {
        fl_tensor_view va, vb;
        CHECK(fl_safetensors_at(a, &va, i) == FL_OK);
        CHECK(fl_safetensors_find(b, &vb, va.name) == FL_OK);
        CHECK(va.dtype == vb.dtype && va.ndim == vb.ndim && va.nbytes == vb.nbytes);
        CHECK(va.ndim == 0 || memcmp(va.shape, vb.shape, va.ndim * sizeof(uint64_t)) == 0);
        CHECK(va.nbytes == 0 || memcmp(va.data, vb.data, va.nbytes) == 0);
    }
    for (size_t i = 0; i < fl_safetensors_metadata_count(a); i++) {
        const char *k, *v;
        CHECK(fl_safetensors_metadata_at(a, &k, &v, i) == FL_OK);
        const char *v2 = fl_safetensors_metadata_get(b, k);
        CHECK(v2 && strcmp(v, v2) == 0);
    }
}

static void roundtrip(const fl_safetensors *st) {
    fl_safetensors_writer *w = NULL;
    CHECK(fl_safetensors_writer_create(&w, NULL) == FL_OK);
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        fl_tensor_view v;
        CHECK(fl_safetensors_at(st, &v, i) == FL_OK);
        fl_status rc = fl_safetensors_writer_add(w, v.name, v.dtype, v.ndim, v.shape, v.data,
                                                 v.nbytes);
        if (rc != FL_OK) {
            /* The writer is stricter only about empty names. */
            CHECK(rc == FL_ERR_MISUSE && v.name[0] == '\0');
            goto out;
        }
    }
    for (size_t i = 0; i < fl_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        CHECK(fl_safetensors_metadata_at(st, &k, &v, i) == FL_OK);
        CHECK(fl_safetensors_writer_set_metadata(w, k, v) == FL_OK);
    }
    size_t len = 0;
    CHECK(fl_safetensors_writer_size(w, &len) == FL_OK);
    uint8_t *buf = malloc(len);
    CHECK(buf != NULL);
    CHECK(fl_safetensors_writer_serialize(w, buf, len) == FL_OK);
    fl_safetensors *st2 = NULL;
    CHECK(fl_safetensors_create(&st2, NULL) == FL_OK);
    CHECK(fl_safetensors_parse(st2, buf, len) == FL_OK);
    check_same(st, st2);
    fl_safetensors_destroy(st2);
    free(buf);
out:
    fl_safetensors_writer_destroy(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fl_safetensors *st = NULL;
    if (fl_safetensors_create(&st, NULL) != FL_OK)
        return 0;
    fl_status rc = fl_safetensors_parse(st, data, size);
    CHECK(rc != FL_ERR_NOMEM && rc != FL_ERR_INTERNAL && rc != FL_ERR_MISUSE);
    if (rc != FL_OK) {
        CHECK(fl_safetensors_errmsg(st)[0] != '\0');
        CHECK(fl_safetensors_count(st) == 0);
        fl_safetensors_destroy(st);
        return 0;
    }
    unsigned sum = 0;
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        fl_tensor_view v, f;
        CHECK(fl_safetensors_at(st, &v, i) == FL_OK);
        const uint8_t *p = v.data;
        CHECK(p >= data && p + v.nbytes <= data + size);
        for (size_t j = 0; j < v.nbytes; j++)
            sum += p[j];
        for (size_t d = 0; d < v.ndim; d++)
            sum += (unsigned)v.shape[d];
        CHECK(fl_safetensors_find(st, &f, v.name) == FL_OK && f.data == v.data);
        CHECK(fl_dtype_size(v.dtype) > 0);
    }
    for (size_t i = 0; i < fl_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        CHECK(fl_safetensors_metadata_at(st, &k, &v, i) == FL_OK);
        CHECK(fl_safetensors_metadata_get(st, k) == v); /* keys are unique */
    }
    roundtrip(st);
    fl_safetensors_destroy(st);
    return (int)(sum & 0);
}
