/* Helper for the Python round-trip test (tests/core/safetensors_compat.py).
 *
 *   st_tool write PATH [--numpy-only]  writes the reference model described below
 *   st_tool dump PATH                  prints the file as JSON on stdout:
 *       {"metadata": {...}, "tensors": {"name": {"dtype", "shape", "hex"}}}
 *
 * Reference model: for each dtype below a [2,3] tensor "t.<DTYPE>" whose element k is
 *   floats (F16, BF16, F32, F64): (k - 3) / 4;  signed ints: 3k - 5;  unsigned: 3k + 1;
 *   BOOL: k % 3 == 0;  C64: (k, -k).
 * plus "scalar" (I32, shape [], 42), "empty" (F32, shape [0, 4]) and metadata
 * flotilla.arch=mlp-test, flotilla.version=7, note="héllo". --numpy-only leaves out BF16,
 * which numpy cannot load. This is a tool: it prints and exits on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "flotilla/tensor.h"

#define DIE(...)                                                                             \
    do {                                                                                     \
        fprintf(stderr, "st_tool: " __VA_ARGS__);                                            \
        fputc('\n', stderr);                                                                 \
        exit(1);                                                                             \
    } while (0)

static uint16_t f16_bits(float f) { /* exact for the normal values used here */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if ((x & 0x7fffffff) == 0)
        return sign;
    uint32_t exp = ((x >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (exp << 10) | ((x & 0x7fffff) >> 13));
}

static uint16_t bf16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)(x >> 16);
}

/* Fills 6 elements of dtype following the formula in the file comment. */
static void fill(fl_dtype dt, uint8_t *out) {
    for (int k = 0; k < 6; k++) {
        float f = (float)(k - 3) / 4.0f;
        double d = (double)(k - 3) / 4.0;
        long long s = 3LL * k - 5;
        unsigned long long u = 3ULL * (unsigned)k + 1;
        size_t es = fl_dtype_size(dt);
        uint8_t *p = out + (size_t)k * es;
        switch (dt) {
        case FL_DTYPE_F16: { uint16_t v = f16_bits(f); memcpy(p, &v, 2); break; }
        case FL_DTYPE_BF16: { uint16_t v = bf16_bits(f); memcpy(p, &v, 2); break; }
        case FL_DTYPE_F32: memcpy(p, &f, 4); break;
        case FL_DTYPE_F64: memcpy(p, &d, 8); break;
        case FL_DTYPE_I8: { int8_t v = (int8_t)s; memcpy(p, &v, 1); break; }
        case FL_DTYPE_I16: { int16_t v = (int16_t)s; memcpy(p, &v, 2); break; }
        case FL_DTYPE_I32: { int32_t v = (int32_t)s; memcpy(p, &v, 4); break; }
        case FL_DTYPE_I64: { int64_t v = (int64_t)s; memcpy(p, &v, 8); break; }
        case FL_DTYPE_U8: { uint8_t v = (uint8_t)u; memcpy(p, &v, 1); break; }
        case FL_DTYPE_U16: { uint16_t v = (uint16_t)u; memcpy(p, &v, 2); break; }
        case FL_DTYPE_U32: { uint32_t v = (uint32_t)u; memcpy(p, &v, 4); break; }
        case FL_DTYPE_U64: { uint64_t v = (uint64_t)u; memcpy(p, &v, 8); break; }
        case FL_DTYPE_BOOL: p[0] = (uint8_t)(k % 3 == 0); break;
        case FL_DTYPE_C64: { float c[2] = {(float)k, (float)-k}; memcpy(p, c, 8); break; }
        default: DIE("no formula for %s", fl_dtype_name(dt));
        }
    }
}

static int do_write(const char *path, int numpy_only) {
    static const fl_dtype types[] = {
        FL_DTYPE_F16, FL_DTYPE_BF16, FL_DTYPE_F32, FL_DTYPE_F64, FL_DTYPE_I8,
        FL_DTYPE_I16, FL_DTYPE_I32, FL_DTYPE_I64, FL_DTYPE_U8, FL_DTYPE_U16,
        FL_DTYPE_U32, FL_DTYPE_U64, FL_DTYPE_BOOL, FL_DTYPE_C64,
    };
    enum { NT = sizeof(types) / sizeof(types[0]) };
    static uint8_t data[NT][6 * 8];
    static char names[NT][32];
    static const int32_t scalar = 42;
    const uint64_t shape[2] = {2, 3}, empty[2] = {0, 4};
    fl_safetensors_writer *w = NULL;
    if (fl_safetensors_writer_create(&w, NULL) != FL_OK)
        DIE("create failed");
    for (size_t i = 0; i < NT; i++) {
        if (numpy_only && types[i] == FL_DTYPE_BF16)
            continue;
        fill(types[i], data[i]);
        snprintf(names[i], sizeof(names[i]), "t.%s", fl_dtype_name(types[i]));
        if (fl_safetensors_writer_add(w, names[i], types[i], 2, shape, data[i],
                                      6 * fl_dtype_size(types[i])) != FL_OK)
            DIE("add: %s", fl_safetensors_writer_errmsg(w));
    }
    if (fl_safetensors_writer_add(w, "scalar", FL_DTYPE_I32, 0, NULL, &scalar, 4) != FL_OK ||
        fl_safetensors_writer_add(w, "empty", FL_DTYPE_F32, 2, empty, NULL, 0) != FL_OK ||
        fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp-test") != FL_OK ||
        fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_VERSION, "7") != FL_OK ||
        fl_safetensors_writer_set_metadata(w, "note", "h\xc3\xa9llo") != FL_OK)
        DIE("add: %s", fl_safetensors_writer_errmsg(w));
    if (fl_safetensors_writer_write_file(w, path) != FL_OK)
        DIE("write: %s", fl_safetensors_writer_errmsg(w));
    fl_safetensors_writer_destroy(w);
    return 0;
}

static int do_dump(const char *path) {
    fl_safetensors *st = NULL;
    if (fl_safetensors_create(&st, NULL) != FL_OK)
        DIE("create failed");
    if (fl_safetensors_load(st, path) != FL_OK)
        DIE("load %s: %s", path, fl_safetensors_errmsg(st));
    json_t *root = json_object(), *meta = json_object(), *tensors = json_object();
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "tensors", tensors);
    for (size_t i = 0; i < fl_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        fl_safetensors_metadata_at(st, &k, &v, i);
        json_object_set_new(meta, k, json_string(v));
    }
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        fl_tensor_view v;
        fl_safetensors_at(st, &v, i);
        json_t *t = json_object(), *shape = json_array();
        for (size_t d = 0; d < v.ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)v.shape[d]));
        char *hex = malloc(v.nbytes * 2 + 1);
        if (!hex)
            DIE("out of memory");
        for (size_t b = 0; b < v.nbytes; b++)
            snprintf(hex + 2 * b, 3, "%02x", ((const uint8_t *)v.data)[b]);
        hex[2 * v.nbytes] = '\0';
        json_object_set_new(t, "dtype", json_string(fl_dtype_name(v.dtype)));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "hex", json_string(hex));
        json_object_set_new(tensors, v.name, t);
        free(hex);
    }
    json_dumpf(root, stdout, JSON_INDENT(1));
    fputc('\n', stdout);
    json_decref(root);
    fl_safetensors_destroy(st);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "write") == 0)
        return do_write(argv[2], argc >= 4 && strcmp(argv[3], "--numpy-only") == 0);
    if (argc == 3 && strcmp(argv[1], "dump") == 0)
        return do_dump(argv[2]);
    fprintf(stderr, "usage: %s write PATH [--numpy-only] | dump PATH\n", argv[0]);
    return 2;
}
