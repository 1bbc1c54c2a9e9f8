/* Tensor element types and size arithmetic shared by the safetensors reader and writer. */
#include <string.h>

#include "fl_internal.h"
#include "flotilla/tensor.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "flotilla tensors assume a little-endian host (safetensors data is little-endian)"
#endif

struct dtype_info {
    const char *name; /* safetensors dtype string */
    size_t size;      /* bytes per element */
};

static const struct dtype_info k_dtypes[FL_DTYPE_COUNT] = {
    [FL_DTYPE_BOOL] = {"BOOL", 1},
    [FL_DTYPE_U8] = {"U8", 1},
    [FL_DTYPE_I8] = {"I8", 1},
    [FL_DTYPE_U16] = {"U16", 2},
    [FL_DTYPE_I16] = {"I16", 2},
    [FL_DTYPE_F16] = {"F16", 2},
    [FL_DTYPE_BF16] = {"BF16", 2},
    [FL_DTYPE_U32] = {"U32", 4},
    [FL_DTYPE_I32] = {"I32", 4},
    [FL_DTYPE_F32] = {"F32", 4},
    [FL_DTYPE_U64] = {"U64", 8},
    [FL_DTYPE_I64] = {"I64", 8},
    [FL_DTYPE_F64] = {"F64", 8},
    [FL_DTYPE_C64] = {"C64", 8},
    [FL_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [FL_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [FL_DTYPE_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 1},
    [FL_DTYPE_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 1},
    [FL_DTYPE_F8_E8M0] = {"F8_E8M0", 1},
};

size_t fl_dtype_size(fl_dtype dtype) {
    if ((unsigned)dtype >= FL_DTYPE_COUNT)
        return 0;
    return k_dtypes[dtype].size;
}

const char *fl_dtype_name(fl_dtype dtype) {
    if ((unsigned)dtype >= FL_DTYPE_COUNT)
        return NULL;
    return k_dtypes[dtype].name;
}

fl_dtype fl_dtype_from_name(const char *name) {
    if (!name)
        return FL_DTYPE_INVALID;
    for (unsigned i = 1; i < FL_DTYPE_COUNT; i++) {
        if (k_dtypes[i].name && strcmp(k_dtypes[i].name, name) == 0)
            return (fl_dtype)i;
    }
    return FL_DTYPE_INVALID;
}

size_t fl_tensor_max_ndim(void) { return FL_TENSOR_MAX_NDIM; }

/* A zero dimension makes the tensor empty whatever the other dimensions are, so zeros are
 * looked for first: [0, 2^63, 2^63] is a valid empty tensor, not an overflow. */
fl_status fl_tensor_nbytes(size_t *out, fl_dtype dtype, size_t ndim, const uint64_t *shape) {
    size_t esize = fl_dtype_size(dtype);
    if (!out || esize == 0 || ndim > FL_TENSOR_MAX_NDIM || (ndim > 0 && !shape))
        return FL_ERR_MISUSE;
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            *out = 0;
            return FL_OK;
        }
    }
    size_t total = esize;
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] > SIZE_MAX || fl__mul_overflows(total, (size_t)shape[i]))
            return FL_ERR_RANGE;
        total *= (size_t)shape[i];
    }
    *out = total;
    return FL_OK;
}
