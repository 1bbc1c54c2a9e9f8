#ifndef FLOTILLA_TENSOR_H
#define FLOTILLA_TENSOR_H

/* Flotilla core: tensor element types, read-only tensor views, and the safetensors file
 * format (https://huggingface.co/docs/safetensors) used for model blobs and checkpoints.
 *
 * A safetensors file is: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"<key>": "<value>", ...}}
 * and then the data buffer; data_offsets are relative to the start of the data buffer.
 * Tensor data is little-endian and row-major (C order). This library assumes a
 * little-endian host (checked at build time). */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types ----
 * Stable values: the list only grows. Names are the safetensors dtype strings. Sub-byte
 * types of the format (F4, F6_E2M3, F6_E3M2) are not supported. */
typedef enum fl_dtype {
    FL_DTYPE_INVALID = 0,     /* not a type; returned for unknown names */
    FL_DTYPE_BOOL = 1,        /* "BOOL", 1 byte, 0 or 1 */
    FL_DTYPE_U8 = 2,          /* "U8" */
    FL_DTYPE_I8 = 3,          /* "I8" */
    FL_DTYPE_U16 = 4,         /* "U16" */
    FL_DTYPE_I16 = 5,         /* "I16" */
    FL_DTYPE_F16 = 6,         /* "F16", IEEE 754 binary16 */
    FL_DTYPE_BF16 = 7,        /* "BF16", bfloat16 (upper half of a binary32) */
    FL_DTYPE_U32 = 8,         /* "U32" */
    FL_DTYPE_I32 = 9,         /* "I32" */
    FL_DTYPE_F32 = 10,        /* "F32", IEEE 754 binary32 */
    FL_DTYPE_U64 = 11,        /* "U64" */
    FL_DTYPE_I64 = 12,        /* "I64" */
    FL_DTYPE_F64 = 13,        /* "F64", IEEE 754 binary64 */
    FL_DTYPE_C64 = 14,        /* "C64", complex of two binary32 (real, imaginary) */
    FL_DTYPE_F8_E4M3 = 15,    /* "F8_E4M3", 8-bit float e4m3fn */
    FL_DTYPE_F8_E5M2 = 16,    /* "F8_E5M2", 8-bit float e5m2 */
    FL_DTYPE_F8_E4M3FNUZ = 17,/* "F8_E4M3FNUZ" */
    FL_DTYPE_F8_E5M2FNUZ = 18,/* "F8_E5M2FNUZ" */
    FL_DTYPE_F8_E8M0 = 19     /* "F8_E8M0", 8-bit exponent-only scale */
} fl_dtype;

/* One past the largest fl_dtype value. */
#define FL_DTYPE_COUNT 20

/* Size in bytes of one element of dtype; 0 for FL_DTYPE_INVALID or an unknown value.
 * Thread-safe. */
FL_API size_t fl_dtype_size(fl_dtype dtype);

/* Safetensors name of dtype ("F32", "BF16", ...), a static string; NULL for
 * FL_DTYPE_INVALID or an unknown value. Thread-safe. */
FL_API const char *fl_dtype_name(fl_dtype dtype);

/* The dtype whose safetensors name is exactly name (case-sensitive); FL_DTYPE_INVALID if
 * name is NULL or unknown. Thread-safe. */
FL_API fl_dtype fl_dtype_from_name(const char *name);

/* ---- tensors ---- */

/* Largest number of dimensions a tensor may have. Readers reject files with more. */
#define FL_TENSOR_MAX_NDIM 64

/* Returns FL_TENSOR_MAX_NDIM of the loaded library. Thread-safe. */
FL_API size_t fl_tensor_max_ndim(void);

/* Byte size of a dense tensor: product(shape[0..ndim)) * fl_dtype_size(dtype), computed
 * with overflow checks. ndim == 0 is a scalar (one element); any zero dimension gives 0.
 *   out    receives the size on FL_OK (untouched otherwise).
 *   dtype  element type.
 *   ndim   number of dimensions, at most FL_TENSOR_MAX_NDIM.
 *   shape  ndim dimensions (may be NULL when ndim == 0).
 * Returns FL_OK, FL_ERR_MISUSE (NULL out, unknown dtype, ndim too large, NULL shape with
 * ndim > 0) or FL_ERR_RANGE (the size does not fit in size_t). Thread-safe. */
FL_API fl_status fl_tensor_nbytes(size_t *out, fl_dtype dtype, size_t ndim, const uint64_t *shape);

/* A read-only view of one tensor. Every pointer is owned by the container that filled the
 * view (e.g. an fl_safetensors handle) and stays valid until that container is destroyed or
 * re-parsed. */
typedef struct fl_tensor_view {
    const char *name;       /* NUL-terminated UTF-8 name */
    fl_dtype dtype;         /* element type */
    size_t ndim;            /* number of dimensions, 0..FL_TENSOR_MAX_NDIM */
    const uint64_t *shape;  /* ndim dimensions, outermost first; NULL when ndim == 0 */
    const void *data;       /* nbytes of little-endian row-major data; may be unaligned */
    size_t nbytes;          /* product(shape) * fl_dtype_size(dtype) */
} fl_tensor_view;

/* ---- safetensors reader ---- */

/* Largest JSON header accepted by the reader, in bytes (as in the reference
 * implementation). Larger declared headers are rejected with FL_ERR_FORMAT. */
#define FL_SAFETENSORS_MAX_HEADER_BYTES 100000000u

/* Returns FL_SAFETENSORS_MAX_HEADER_BYTES of the loaded library. Thread-safe. */
FL_API size_t fl_safetensors_max_header_bytes(void);

/* Well-known __metadata__ keys under which Flotilla records the model it describes. */
#define FL_SAFETENSORS_META_ARCH "flotilla.arch"       /* model architecture name */
#define FL_SAFETENSORS_META_VERSION "flotilla.version" /* model (round) version */

/* A parsed safetensors file: a table of tensor views plus the metadata.
 * Thread-safety: create/parse/load/destroy need exclusive access; once a parse or load has
 * succeeded, the const accessors (count, at, find, metadata_*) may be called from any
 * number of threads at once, and they never change errmsg. */
typedef struct fl_safetensors fl_safetensors;

/* Creates an empty reader handle (zero tensors, no metadata).
 *   out    receives the handle; set to NULL on failure.
 *   alloc  allocator for everything this handle allocates (copied; NULL = libc). The JSON
 *          parser (Jansson) allocates transient memory with its own global allocator.
 * Returns FL_OK, FL_ERR_MISUSE (NULL out, bad allocator struct) or FL_ERR_NOMEM. */
FL_API fl_status fl_safetensors_create(fl_safetensors **out, const fl_allocator *alloc);

/* Destroys a handle and everything it owns (including a buffer read by _load). Views taken
 * from it become invalid. NULL is a no-op. */
FL_API void fl_safetensors_destroy(fl_safetensors *st);

/* Parses and validates a safetensors image in memory, replacing the handle's contents.
 * Zero-copy: views point into buf, which the caller must keep alive and unchanged until the
 * handle is destroyed or parses again. Everything is validated before any view is exposed:
 * header length (8 <= 8+N <= len, N <= FL_SAFETENSORS_MAX_HEADER_BYTES), well-formed UTF-8
 * JSON object, no duplicate names, known dtype, 0..FL_TENSOR_MAX_NDIM integer dimensions,
 * size = product(shape) x dtype size without overflow, data_offsets [begin, end] inside the
 * data buffer with end - begin == size, and, as the format requires, tensors that tile the
 * data buffer exactly: no overlap, no hole, no trailing bytes. __metadata__ (optional, may
 * be null) must map strings to strings. Unknown keys inside a tensor entry are ignored, as
 * in the reference implementation.
 *   st   handle from fl_safetensors_create.
 *   buf  the image (may be NULL only when len is 0, which is then a format error).
 *   len  its length in bytes.
 * Returns FL_OK; FL_ERR_FORMAT with an errmsg naming the problem (and the tensor, when
 * there is one); FL_ERR_UNSUPPORTED for a sub-byte dtype; FL_ERR_NOMEM; FL_ERR_MISUSE for a
 * NULL st. On failure the handle is left empty. */
FL_API fl_status fl_safetensors_parse(fl_safetensors *st, const void *buf, size_t len);

/* Reads the whole file at path into one buffer owned by the handle (allocated with the
 * handle's allocator) and parses it as fl_safetensors_parse does; views point into that
 * buffer.
 * Returns FL_OK, FL_ERR_IO (open/stat/read failed, or not a regular file), FL_ERR_TOO_LARGE
 * (file larger than size_t), FL_ERR_NOMEM, FL_ERR_MISUSE (NULL argument) or the codes of
 * fl_safetensors_parse. On failure the handle is left empty. */
FL_API fl_status fl_safetensors_load(fl_safetensors *st, const char *path);

/* Detail of the last failure on st (or a status string after success); owned by the
 * handle, valid until the next parse/load on it. Never NULL; NULL st gives a generic
 * message. */
FL_API const char *fl_safetensors_errmsg(const fl_safetensors *st);

/* Number of tensors; 0 for NULL or an empty handle. */
FL_API size_t fl_safetensors_count(const fl_safetensors *st);

/* Fills out with the index-th tensor; tensors are indexed in data-buffer order (by
 * data_offsets), which is stable for a given file.
 * Returns FL_OK, FL_ERR_NOT_FOUND (index >= count) or FL_ERR_MISUSE (NULL argument). */
FL_API fl_status fl_safetensors_at(const fl_safetensors *st, fl_tensor_view *out, size_t index);

/* Fills out with the tensor named name (exact byte comparison, O(log n)).
 * Returns FL_OK, FL_ERR_NOT_FOUND or FL_ERR_MISUSE (NULL argument). */
FL_API fl_status fl_safetensors_find(const fl_safetensors *st, fl_tensor_view *out,
                                     const char *name);

/* Value of __metadata__[key] (owned by the handle), or NULL if absent or key is NULL. */
FL_API const char *fl_safetensors_metadata_get(const fl_safetensors *st, const char *key);

/* Number of __metadata__ entries. */
FL_API size_t fl_safetensors_metadata_count(const fl_safetensors *st);

/* The index-th metadata entry, in header order; key and value are owned by the handle.
 * Either out-pointer may be NULL. Returns FL_OK, FL_ERR_NOT_FOUND (index >= count) or
 * FL_ERR_MISUSE (NULL st). */
FL_API fl_status fl_safetensors_metadata_at(const fl_safetensors *st, const char **key,
                                            const char **value, size_t index);

/* ---- safetensors writer ---- */

/* Collects tensors and metadata, then serializes them to memory or atomically to a file.
 * Tensors are laid out by decreasing dtype size, then by name, and the header is padded
 * with spaces so the data buffer starts 8-byte aligned; every tensor is therefore
 * naturally aligned when the image is at an 8-byte aligned address.
 * Thread-safety: one thread at a time per writer. */
typedef struct fl_safetensors_writer fl_safetensors_writer;

/* Creates an empty writer.
 *   out    receives the handle; set to NULL on failure.
 *   alloc  allocator for everything the writer allocates (copied; NULL = libc); Jansson
 *          allocates transient memory while the header is built.
 * Returns FL_OK, FL_ERR_MISUSE or FL_ERR_NOMEM. */
FL_API fl_status fl_safetensors_writer_create(fl_safetensors_writer **out,
                                              const fl_allocator *alloc);

/* Destroys a writer (not the tensor data it borrowed). NULL is a no-op. */
FL_API void fl_safetensors_writer_destroy(fl_safetensors_writer *w);

/* Detail of the last failure on w; owned by w, valid until the next call on it. */
FL_API const char *fl_safetensors_writer_errmsg(const fl_safetensors_writer *w);

/* Adds one tensor. name and shape are copied; data is BORROWED: it must stay valid and
 * unchanged until the writer is destroyed (it is read by _serialize/_write_file).
 *   name   non-empty valid UTF-8, not "__metadata__", not already added.
 *   dtype  a known dtype.
 *   ndim   0..FL_TENSOR_MAX_NDIM; shape has ndim entries, each <= INT64_MAX.
 *   data   nbytes bytes (may be NULL when nbytes is 0).
 *   nbytes must equal product(shape) * fl_dtype_size(dtype).
 * Returns FL_OK, FL_ERR_MISUSE (message names the bad argument), FL_ERR_EXISTS (duplicate
 * name), FL_ERR_RANGE (size overflow) or FL_ERR_NOMEM; on failure nothing is added. */
FL_API fl_status fl_safetensors_writer_add(fl_safetensors_writer *w, const char *name,
                                           fl_dtype dtype, size_t ndim, const uint64_t *shape,
                                           const void *data, size_t nbytes);

/* Sets __metadata__[key] = value (both copied, valid UTF-8), replacing an earlier value.
 * Returns FL_OK, FL_ERR_MISUSE or FL_ERR_NOMEM. */
FL_API fl_status fl_safetensors_writer_set_metadata(fl_safetensors_writer *w, const char *key,
                                                    const char *value);

/* Total size in bytes of the serialized image for the current contents.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM, or FL_ERR_TOO_LARGE (header over
 * FL_SAFETENSORS_MAX_HEADER_BYTES or size overflow). */
FL_API fl_status fl_safetensors_writer_size(fl_safetensors_writer *w, size_t *out_len);

/* Serializes into out, which must hold at least fl_safetensors_writer_size() bytes;
 * exactly that many are written. Returns FL_OK, FL_ERR_MISUSE (NULL or too small
 * buffer, with the needed size in errmsg), FL_ERR_NOMEM or FL_ERR_TOO_LARGE. */
FL_API fl_status fl_safetensors_writer_serialize(fl_safetensors_writer *w, void *out,
                                                 size_t out_len);

/* Writes the image to path atomically: a temporary file in the same directory is
 * written, fsync'd and renamed over path, then the directory is fsync'd. On failure path
 * is untouched and the temporary file is removed.
 * Returns FL_OK, FL_ERR_MISUSE, FL_ERR_NOMEM, FL_ERR_TOO_LARGE or FL_ERR_IO (with errno
 * text in errmsg). */
FL_API fl_status fl_safetensors_writer_write_file(fl_safetensors_writer *w, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_TENSOR_H */
