/* Unit tests for the safetensors reader and writer: round trips, metadata, one case per
 * malformed-input class, file I/O, and OOM walks (ours and Jansson's allocator). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "fl_test.h"
#include "flotilla/tensor.h"

/* ---- helpers ---- */

/* Builds an image from a header string (no padding added) and data bytes. Caller frees. */
static uint8_t *mkimg(const char *hdr, const void *data, size_t dlen, size_t *out_len) {
    size_t hl = strlen(hdr);
    uint8_t *b = malloc(8 + hl + dlen + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    if (dlen)
        memcpy(b + 8 + hl, data, dlen);
    *out_len = 8 + hl + dlen;
    return b;
}

/* Parses an image and returns the status; errmsg is copied into msg. */
static fl_status parse_hdr(const char *hdr, size_t dlen, char *msg, size_t msg_len) {
    static const uint8_t zeros[256];
    assert_true(dlen <= sizeof(zeros));
    size_t len;
    uint8_t *img = mkimg(hdr, zeros, dlen, &len);
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    fl_status rc = fl_safetensors_parse(st, img, len);
    snprintf(msg, msg_len, "%s", fl_safetensors_errmsg(st));
    if (rc != FL_OK)
        assert_int_equal(fl_safetensors_count(st), 0); /* failure leaves the handle empty */
    fl_safetensors_destroy(st);
    free(img);
    return rc;
}

/* Asserts that hdr (+dlen zero data bytes) is rejected with FL_ERR_FORMAT and a message
 * containing want. */
static void expect_format(const char *hdr, size_t dlen, const char *want) {
    char msg[512];
    fl_status rc = parse_hdr(hdr, dlen, msg, sizeof(msg));
    if (rc != FL_ERR_FORMAT || !strstr(msg, want))
        fail_msg("header %s: got %s '%s', want FL_ERR_FORMAT with '%s'", hdr,
                 fl_status_name(rc), msg, want);
}

/* Deterministic test pattern. */
static void fill(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed * 29u + 7u);
}

/* ---- round trips ---- */

/* Every dtype as a [2,3] tensor, plus a scalar, an empty tensor and metadata: serialized,
 * parsed back and compared field by field. */
static void test_roundtrip_all_dtypes(void **state) {
    (void)state;
    fl_safetensors_writer *w = NULL;
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    uint8_t data[FL_DTYPE_COUNT][6 * 8];
    char names[FL_DTYPE_COUNT][32];
    const uint64_t shape[2] = {2, 3};
    for (int d = 1; d < FL_DTYPE_COUNT; d++) {
        size_t nb = 6 * fl_dtype_size((fl_dtype)d);
        fill(data[d], nb, (unsigned)d);
        snprintf(names[d], sizeof(names[d]), "layer.%s", fl_dtype_name((fl_dtype)d));
        assert_int_equal(fl_safetensors_writer_add(w, names[d], (fl_dtype)d, 2, shape, data[d],
                                                   nb), FL_OK);
    }
    const double scalar = 3.25;
    const uint64_t empty_shape[3] = {4, 0, 5};
    assert_int_equal(fl_safetensors_writer_add(w, "scalar", FL_DTYPE_F64, 0, NULL, &scalar, 8),
                     FL_OK);
    assert_int_equal(fl_safetensors_writer_add(w, "empty", FL_DTYPE_F32, 3, empty_shape, NULL,
                                               0), FL_OK);
    assert_int_equal(fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp-2"),
                     FL_OK);
    assert_int_equal(fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_VERSION, "41"),
                     FL_OK);
    assert_int_equal(fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_VERSION, "42"),
                     FL_OK); /* replaces */
    assert_int_equal(fl_safetensors_writer_set_metadata(w, "note", "h\xc3\xa9 \"q\" \\ \n"),
                     FL_OK);

    size_t len = 0;
    assert_int_equal(fl_safetensors_writer_size(w, &len), FL_OK);
    uint64_t *buf64 = malloc(len + 8); /* 8-byte aligned */
    uint8_t *buf = (uint8_t *)buf64;
    assert_int_equal(fl_safetensors_writer_serialize(w, buf, len - 1), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "too small"));
    assert_int_equal(fl_safetensors_writer_serialize(w, buf, len + 8), FL_OK);
    assert_int_equal((8 + buf[0] + ((size_t)buf[1] << 8)) % 8, 0); /* data starts aligned */

    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, buf, len), FL_OK);
    assert_int_equal(fl_safetensors_count(st), FL_DTYPE_COUNT - 1 + 2);
    for (int d = 1; d < FL_DTYPE_COUNT; d++) {
        fl_tensor_view v;
        assert_int_equal(fl_safetensors_find(st, &v, names[d]), FL_OK);
        assert_string_equal(v.name, names[d]);
        assert_int_equal(v.dtype, d);
        assert_int_equal(v.ndim, 2);
        assert_int_equal(v.shape[0], 2);
        assert_int_equal(v.shape[1], 3);
        assert_int_equal(v.nbytes, 6 * fl_dtype_size((fl_dtype)d));
        assert_memory_equal(v.data, data[d], v.nbytes);
        /* Writer layout keeps every tensor naturally aligned. */
        assert_int_equal((uintptr_t)v.data % fl_dtype_size((fl_dtype)d), 0);
    }
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_find(st, &v, "scalar"), FL_OK);
    assert_int_equal(v.ndim, 0);
    assert_null(v.shape);
    assert_int_equal(v.nbytes, 8);
    assert_memory_equal(v.data, &scalar, 8);
    assert_int_equal(fl_safetensors_find(st, &v, "empty"), FL_OK);
    assert_int_equal(v.ndim, 3);
    assert_int_equal(v.shape[1], 0);
    assert_int_equal(v.nbytes, 0);
    assert_int_equal(fl_safetensors_find(st, &v, "nope"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_safetensors_find(st, &v, "layer"), FL_ERR_NOT_FOUND);

    /* Iteration is in data order: offsets never decrease. */
    const uint8_t *prev = NULL;
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        assert_int_equal(fl_safetensors_at(st, &v, i), FL_OK);
        assert_true(prev == NULL || (const uint8_t *)v.data >= prev);
        prev = v.data;
    }
    assert_int_equal(fl_safetensors_at(st, &v, fl_safetensors_count(st)), FL_ERR_NOT_FOUND);

    assert_int_equal(fl_safetensors_metadata_count(st), 3);
    assert_string_equal(fl_safetensors_metadata_get(st, FL_SAFETENSORS_META_ARCH), "mlp-2");
    assert_string_equal(fl_safetensors_metadata_get(st, FL_SAFETENSORS_META_VERSION), "42");
    assert_string_equal(fl_safetensors_metadata_get(st, "note"), "h\xc3\xa9 \"q\" \\ \n");
    assert_null(fl_safetensors_metadata_get(st, "absent"));
    const char *k, *val;
    assert_int_equal(fl_safetensors_metadata_at(st, &k, &val, 0), FL_OK);
    assert_string_equal(k, FL_SAFETENSORS_META_ARCH);
    assert_string_equal(val, "mlp-2");
    assert_int_equal(fl_safetensors_metadata_at(st, &k, &val, 3), FL_ERR_NOT_FOUND);

    /* Re-serializing what was read gives the same bytes (layout is canonical). */
    fl_safetensors_writer *w2 = NULL;
    assert_int_equal(fl_safetensors_writer_create(&w2, NULL), FL_OK);
    for (size_t i = 0; i < fl_safetensors_count(st); i++) {
        assert_int_equal(fl_safetensors_at(st, &v, i), FL_OK);
        assert_int_equal(fl_safetensors_writer_add(w2, v.name, v.dtype, v.ndim, v.shape, v.data,
                                                   v.nbytes), FL_OK);
    }
    for (size_t i = 0; i < fl_safetensors_metadata_count(st); i++) {
        assert_int_equal(fl_safetensors_metadata_at(st, &k, &val, i), FL_OK);
        assert_int_equal(fl_safetensors_writer_set_metadata(w2, k, val), FL_OK);
    }
    size_t len2 = 0;
    assert_int_equal(fl_safetensors_writer_size(w2, &len2), FL_OK);
    assert_int_equal(len2, len);
    uint8_t *buf2 = malloc(len2);
    assert_int_equal(fl_safetensors_writer_serialize(w2, buf2, len2), FL_OK);
    assert_memory_equal(buf2, buf, len);

    free(buf2);
    fl_safetensors_writer_destroy(w2);
    fl_safetensors_destroy(st);
    fl_safetensors_writer_destroy(w);
    free(buf64);
}

/* A file produced by the Python reference implementation (safetensors 0.8, BF16 [2]). */
static void test_parse_reference_bytes(void **state) {
    (void)state;
    static const char hdr[] = "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}} ";
    const uint8_t data[4] = {0x80, 0x3f, 0x00, 0xc0}; /* 1.0, -2.0 */
    size_t len;
    uint8_t *img = mkimg(hdr, data, 4, &len);
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, img, len), FL_OK);
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_find(st, &v, "x"), FL_OK);
    assert_int_equal(v.dtype, FL_DTYPE_BF16);
    assert_memory_equal(v.data, data, 4);
    assert_int_equal(fl_safetensors_metadata_count(st), 0);
    /* An empty file with "__metadata__": null and no tensors is valid too. */
    free(img);
    img = mkimg("{\"__metadata__\":null}", NULL, 0, &len);
    assert_int_equal(fl_safetensors_parse(st, img, len), FL_OK);
    assert_int_equal(fl_safetensors_count(st), 0);
    /* Unknown keys inside an entry are ignored, as in the reference implementation. */
    free(img);
    img = mkimg("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", data,
                1, &len);
    assert_int_equal(fl_safetensors_parse(st, img, len), FL_OK);
    assert_int_equal(fl_safetensors_count(st), 1);
    fl_safetensors_destroy(st);
    free(img);
}

/* ---- malformed inputs: one case per class ---- */

#define T(dt, sh, b, e) "{\"dtype\":\"" dt "\",\"shape\":" sh ",\"data_offsets\":[" #b "," #e "]}"

static void test_bad_too_short(void **state) {
    (void)state;
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    const uint8_t b[7] = {2, 0, 0, 0, 0, 0, 0};
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "too short"));
    assert_int_equal(fl_safetensors_parse(st, NULL, 0), FL_ERR_FORMAT);
    fl_safetensors_destroy(st);
}

static void test_bad_header_too_large(void **state) {
    (void)state;
    uint8_t b[16] = {0};
    uint64_t n = (uint64_t)FL_SAFETENSORS_MAX_HEADER_BYTES + 1;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(n >> (8 * i));
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "exceeds the limit"));
    memset(b, 0xff, 8); /* 2^64-1: must not wrap any arithmetic */
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "exceeds the limit"));
    fl_safetensors_destroy(st);
}

static void test_bad_header_past_end(void **state) {
    (void)state;
    uint8_t b[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "past the end"));
    fl_safetensors_destroy(st);
}

static void test_bad_not_object(void **state) {
    (void)state;
    expect_format("[1,2]", 0, "does not start with '{'");
    expect_format(" {}", 0, "does not start with '{'");
}

static void test_bad_json(void **state) {
    (void)state;
    expect_format("{\"a\":", 0, "not well-formed JSON");
    expect_format("{} {}", 0, "not well-formed JSON");
    expect_format("{\"a\":1}\x01", 0, "not well-formed JSON");
}

static void test_bad_utf8_name(void **state) {
    (void)state;
    expect_format("{\"a\xff\":" T("U8", "[1]", 0, 1) "}", 1, "UTF-8");
    expect_format("{\"a\xc0\x80\":" T("U8", "[1]", 0, 1) "}", 1, "UTF-8"); /* overlong */
}

static void test_bad_duplicate_name(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[1]", 0, 1) ",\"a\":" T("U8", "[1]", 1, 2) "}", 2,
                  "duplicate");
}

static void test_bad_unknown_dtype(void **state) {
    (void)state;
    expect_format("{\"a\":" T("F33", "[1]", 0, 4) "}", 4, "unknown dtype 'F33'");
    expect_format("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                  "dtype is not a string");
}

static void test_bad_subbyte_dtype(void **state) {
    (void)state;
    char msg[512];
    assert_int_equal(parse_hdr("{\"a\":" T("F4", "[2]", 0, 1) "}", 1, msg, sizeof(msg)),
                     FL_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "'F4'"));
}

static void test_bad_missing_field(void **state) {
    (void)state;
    expect_format("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "missing \"dtype\"");
    expect_format("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "missing \"shape\"");
    expect_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "missing \"data_offsets\"");
}

static void test_bad_entry_not_object(void **state) {
    (void)state;
    expect_format("{\"a\":[1]}", 0, "tensor 'a': entry is not an object");
}

static void test_bad_shape(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[-1]", 0, 0) "}", 0, "shape[0] is not a non-negative");
    expect_format("{\"a\":" T("U8", "[1.0]", 0, 1) "}", 1, "shape[0] is not a non-negative");
    expect_format("{\"a\":" T("U8", "[1,\"2\"]", 0, 2) "}", 2, "shape[1]");
    expect_format("{\"a\":" T("U8", "3", 0, 3) "}", 3, "shape is not an array");
}

static void test_bad_ndim(void **state) {
    (void)state;
    char hdr[512];
    int n = snprintf(hdr, sizeof(hdr), "{\"a\":{\"dtype\":\"U8\",\"shape\":[1");
    for (int i = 1; i < FL_TENSOR_MAX_NDIM + 1; i++)
        n += snprintf(hdr + n, sizeof(hdr) - (size_t)n, ",1");
    snprintf(hdr + n, sizeof(hdr) - (size_t)n, "],\"data_offsets\":[0,1]}}");
    expect_format(hdr, 1, "ndim limit");
}

static void test_bad_size_overflow(void **state) {
    (void)state;
    expect_format("{\"a\":" T("F32", "[4611686018427387904,4]", 0, 0) "}", 0, "overflows");
    expect_format("{\"a\":" T("F32", "[99999999999999999999]", 0, 0) "}", 0,
                  "not well-formed JSON"); /* beyond a JSON integer Jansson can hold */
}

static void test_bad_offsets_shape(void **state) {
    (void)state;
    expect_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
                  "data_offsets is not two");
    expect_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,-1]}}", 1,
                  "data_offsets is not two");
}

static void test_bad_offsets_reversed(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[0]", 2, 1) "}", 2, "before begin");
}

static void test_bad_offsets_out_of_bounds(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[4]", 0, 4) "}", 3, "outside the data buffer");
    expect_format("{\"a\":" T("U8", "[1]", 9223372036854775806, 9223372036854775807) "}", 3,
                  "outside the data buffer");
}

static void test_bad_size_mismatch(void **state) {
    (void)state;
    expect_format("{\"a\":" T("F32", "[2]", 0, 4) "}", 4, "size mismatch");
}

static void test_bad_overlap(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[4]", 0, 4) ",\"b\":" T("U8", "[4]", 2, 6) "}", 6,
                  "'a' and 'b' overlap");
    expect_format("{\"a\":" T("U8", "[4]", 0, 4) ",\"b\":" T("U8", "[0]", 2, 2) "}", 4,
                  "overlap"); /* an empty tensor inside another one */
}

static void test_bad_hole(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[2]", 0, 2) ",\"b\":" T("U8", "[2]", 3, 5) "}", 5,
                  "hole in the data buffer");
    expect_format("{\"a\":" T("U8", "[2]", 1, 3) "}", 3, "hole in the data buffer");
}

static void test_bad_trailing_bytes(void **state) {
    (void)state;
    expect_format("{\"a\":" T("U8", "[2]", 0, 2) "}", 3, "1 trailing bytes");
}

static void test_bad_metadata(void **state) {
    (void)state;
    expect_format("{\"__metadata__\":[\"a\"]}", 0, "__metadata__ is not an object");
    expect_format("{\"__metadata__\":{\"v\":1}}", 0, "value for key 'v' is not a string");
}

/* ---- writer misuse ---- */

static void test_writer_misuse(void **state) {
    (void)state;
    fl_safetensors_writer *w = NULL;
    const uint64_t s[1] = {2};
    const float f[2] = {1, 2};
    assert_int_equal(fl_safetensors_writer_create(NULL, NULL), FL_ERR_MISUSE);
    fl_allocator bad = {0};
    assert_int_equal(fl_safetensors_writer_create(&w, &bad), FL_ERR_MISUSE);
    assert_null(w);
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(w, "a", FL_DTYPE_F32, 1, s, f, 8), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(w, "a", FL_DTYPE_F32, 1, s, f, 8), FL_ERR_EXISTS);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "already added"));
    assert_int_equal(fl_safetensors_writer_add(w, "b", FL_DTYPE_F32, 1, s, f, 4), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "nbytes 4"));
    assert_int_equal(fl_safetensors_writer_add(w, "b", FL_DTYPE_INVALID, 1, s, f, 8),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_add(w, "__metadata__", FL_DTYPE_F32, 1, s, f, 8),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_add(w, "", FL_DTYPE_F32, 1, s, f, 8), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_add(w, "\xed\xa0\x80", FL_DTYPE_F32, 1, s, f, 8),
                     FL_ERR_MISUSE); /* a surrogate */
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "UTF-8"));
    assert_int_equal(fl_safetensors_writer_add(w, "b", FL_DTYPE_F32, 1, s, NULL, 8),
                     FL_ERR_MISUSE);
    const uint64_t huge[2] = {(uint64_t)1 << 62, (uint64_t)1 << 62};
    assert_int_equal(fl_safetensors_writer_add(w, "b", FL_DTYPE_F32, 2, huge, f, 8),
                     FL_ERR_RANGE);
    assert_int_equal(fl_safetensors_writer_set_metadata(w, "k", NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_set_metadata(w, "k", "\xff"), FL_ERR_MISUSE);
    size_t len = 0;
    assert_int_equal(fl_safetensors_writer_size(w, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_size(w, &len), FL_OK);
    assert_int_equal(fl_safetensors_writer_serialize(w, NULL, len), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_write_file(w, NULL), FL_ERR_MISUSE);
    fl_safetensors_writer_destroy(w);
    fl_safetensors_writer_destroy(NULL);
    assert_int_equal(fl_safetensors_writer_add(NULL, "a", FL_DTYPE_F32, 1, s, f, 8),
                     FL_ERR_MISUSE);
    assert_non_null(fl_safetensors_writer_errmsg(NULL));
}

static void test_reader_misuse(void **state) {
    (void)state;
    fl_safetensors *st = NULL;
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_create(NULL, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_parse(NULL, "x", 1), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_load(NULL, "x"), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_count(NULL), 0);
    assert_int_equal(fl_safetensors_at(NULL, &v, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_find(NULL, &v, "a"), FL_ERR_MISUSE);
    assert_null(fl_safetensors_metadata_get(NULL, "a"));
    assert_int_equal(fl_safetensors_metadata_count(NULL), 0);
    assert_int_equal(fl_safetensors_metadata_at(NULL, NULL, NULL, 0), FL_ERR_MISUSE);
    assert_non_null(fl_safetensors_errmsg(NULL));
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, NULL, 5), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_load(st, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_find(st, &v, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_find(st, NULL, "a"), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_find(st, &v, "a"), FL_ERR_NOT_FOUND); /* empty handle */
    fl_safetensors_destroy(st);
    fl_safetensors_destroy(NULL);
}

/* ---- files ---- */

static int count_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return n;
}

static void test_file_roundtrip(void **state) {
    (void)state;
    char dir[] = "/tmp/fl_st_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], missing[256];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    snprintf(missing, sizeof(missing), "%s/no/such/dir/model.safetensors", dir);

    int32_t a[3] = {1, -2, 3};
    const uint64_t s[1] = {3};
    fl_safetensors_writer *w = NULL;
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(w, "w", FL_DTYPE_I32, 1, s, a, sizeof(a)), FL_OK);
    assert_int_equal(fl_safetensors_writer_write_file(w, path), FL_OK);
    assert_int_equal(count_dir_entries(dir), 1); /* no temporary left behind */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644);

    /* Overwrite atomically with different content. */
    a[0] = 100;
    assert_int_equal(fl_safetensors_writer_set_metadata(w, "v", "2"), FL_OK);
    assert_int_equal(fl_safetensors_writer_write_file(w, path), FL_OK);
    assert_int_equal(count_dir_entries(dir), 1);

    /* Failure leaves nothing behind. */
    assert_int_equal(fl_safetensors_writer_write_file(w, missing), FL_ERR_IO);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "No such file"));
    assert_int_equal(count_dir_entries(dir), 1);

    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_load(st, path), FL_OK);
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_find(st, &v, "w"), FL_OK);
    assert_memory_equal(v.data, a, sizeof(a));
    assert_string_equal(fl_safetensors_metadata_get(st, "v"), "2");

    assert_int_equal(fl_safetensors_load(st, missing), FL_ERR_IO);
    assert_int_equal(fl_safetensors_count(st), 0);
    assert_int_equal(fl_safetensors_load(st, dir), FL_ERR_IO);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "not a regular file"));

    /* A truncated file is a format error, not a crash. */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)sb.st_size - 1), 0);
    fclose(f);
    assert_int_equal(fl_safetensors_load(st, path), FL_ERR_FORMAT);

    fl_safetensors_destroy(st);
    fl_safetensors_writer_destroy(w);
    unlink(path);
    rmdir(dir);
}

/* ---- OOM walks ---- */

/* Jansson's allocator is process-global; the test wraps it to fail the n-th call too. */
static long g_json_calls, g_json_fail_at, g_json_live;

static void *json_count_malloc(size_t n) {
    g_json_calls++;
    if (g_json_fail_at > 0 && g_json_calls == g_json_fail_at)
        return NULL;
    void *p = malloc(n);
    if (p)
        g_json_live++;
    return p;
}

static void json_count_free(void *p) {
    if (p)
        g_json_live--;
    free(p);
}

/* Builds a small model: two tensors and metadata. Returns the status of the first failure. */
static fl_status build_writer(fl_safetensors_writer **out, const fl_allocator *a,
                              const float *f, const uint16_t *h) {
    const uint64_t s2[2] = {2, 2}, s1[1] = {3};
    fl_safetensors_writer *w = NULL;
    fl_status rc = fl_safetensors_writer_create(&w, a);
    if (rc == FL_OK)
        rc = fl_safetensors_writer_add(w, "fc.weight", FL_DTYPE_F32, 2, s2, f, 16);
    if (rc == FL_OK)
        rc = fl_safetensors_writer_add(w, "fc.bias", FL_DTYPE_F16, 1, s1, h, 6);
    for (int i = 0; rc == FL_OK && i < 10; i++) { /* enough to force array growth */
        char name[16];
        snprintf(name, sizeof(name), "t%d", i);
        rc = fl_safetensors_writer_add(w, name, FL_DTYPE_U8, 1, s1, h, 3);
    }
    if (rc == FL_OK)
        rc = fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp");
    if (rc == FL_OK)
        rc = fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "mlp2");
    *out = w;
    return rc;
}

static void test_oom_writer(void **state) {
    (void)state;
    const float f[4] = {1, 2, 3, 4};
    const uint16_t h[3] = {0x3c00, 0x4000, 0x4200};
    int done = 0;
    long nomem = 0;
    for (long fail = 1; fail < 200 && !done; fail++) {
        struct fl_test_counting c = {0};
        c.fail_at = fail;
        fl_allocator a = fl_test_counting_allocator(&c);
        fl_safetensors_writer *w = NULL;
        fl_status rc = build_writer(&w, &a, f, h);
        size_t len = 0;
        uint8_t buf[1024];
        if (rc == FL_OK)
            rc = fl_safetensors_writer_size(w, &len);
        if (rc == FL_OK) {
            assert_true(len <= sizeof(buf));
            rc = fl_safetensors_writer_serialize(w, buf, sizeof(buf));
        }
        if (c.calls < fail) { /* the walk is over: no allocation failed this time */
            assert_int_equal(rc, FL_OK);
            done = 1;
        } else {
            assert_int_equal(rc, FL_ERR_NOMEM);
            nomem++;
        }
        fl_safetensors_writer_destroy(w);
        assert_int_equal(c.live, 0);
    }
    assert_true(done);
    assert_true(nomem >= 10);
}

/* Serializes the build_writer model with libc. Caller frees. */
static uint8_t *small_image(size_t *len) {
    const float f[4] = {1, 2, 3, 4};
    const uint16_t h[3] = {0x3c00, 0x4000, 0x4200};
    fl_safetensors_writer *w = NULL;
    assert_int_equal(build_writer(&w, NULL, f, h), FL_OK);
    assert_int_equal(fl_safetensors_writer_size(w, len), FL_OK);
    uint8_t *img = malloc(*len);
    assert_int_equal(fl_safetensors_writer_serialize(w, img, *len), FL_OK);
    fl_safetensors_writer_destroy(w);
    return img;
}

static void test_oom_reader(void **state) {
    (void)state;
    size_t len;
    uint8_t *img = small_image(&len);
    char path[] = "/tmp/fl_st_oom_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, img, len), (ssize_t)len);
    close(fd);

    for (int use_file = 0; use_file < 2; use_file++) {
        int done = 0;
        for (long fail = 1; fail < 50 && !done; fail++) {
            struct fl_test_counting c = {0};
            c.fail_at = fail;
            fl_allocator a = fl_test_counting_allocator(&c);
            fl_safetensors *st = NULL;
            fl_status rc = fl_safetensors_create(&st, &a);
            if (rc == FL_OK)
                rc = use_file ? fl_safetensors_load(st, path) : fl_safetensors_parse(st, img, len);
            if (c.calls < fail) {
                assert_int_equal(rc, FL_OK);
                assert_int_equal(fl_safetensors_count(st), 12);
                done = 1;
            } else {
                assert_int_equal(rc, FL_ERR_NOMEM);
                assert_int_equal(fl_safetensors_count(st), 0);
            }
            fl_safetensors_destroy(st);
            assert_int_equal(c.live, 0);
        }
        assert_true(done);
    }
    unlink(path);
    free(img);
}

/* Every Jansson allocation inside parse and serialize fails in turn: the result must be
 * FL_ERR_NOMEM and nothing may leak (neither ours nor Jansson's). */
static void test_oom_jansson(void **state) {
    (void)state;
    size_t len;
    uint8_t *img = small_image(&len);
    const float f[4] = {1, 2, 3, 4};
    const uint16_t h[3] = {0x3c00, 0x4000, 0x4200};
    json_set_alloc_funcs(json_count_malloc, json_count_free);
    for (int which = 0; which < 2; which++) {
        int done = 0;
        long fail;
        for (fail = 1; fail < 2000 && !done; fail++) {
            struct fl_test_counting c = {0};
            fl_allocator a = fl_test_counting_allocator(&c);
            g_json_calls = 0;
            g_json_fail_at = fail;
            g_json_live = 0;
            fl_status rc;
            if (which == 0) {
                fl_safetensors *st = NULL;
                assert_int_equal(fl_safetensors_create(&st, &a), FL_OK);
                rc = fl_safetensors_parse(st, img, len);
                if (rc == FL_OK)
                    assert_int_equal(fl_safetensors_count(st), 12);
                fl_safetensors_destroy(st);
            } else {
                fl_safetensors_writer *w = NULL;
                assert_int_equal(build_writer(&w, &a, f, h), FL_OK);
                uint8_t buf[1024];
                rc = fl_safetensors_writer_serialize(w, buf, sizeof(buf));
                if (rc == FL_OK)
                    assert_memory_equal(buf, img, len);
                fl_safetensors_writer_destroy(w);
            }
            /* A failed Jansson allocation gives FL_ERR_NOMEM, or FL_OK with the right
             * content when the reader's one retry absorbed it; never a format error. */
            if (rc != FL_OK)
                assert_int_equal(rc, FL_ERR_NOMEM);
            if (g_json_calls < fail) {
                assert_int_equal(rc, FL_OK);
                done = 1;
            }
            assert_int_equal(c.live, 0);
            assert_int_equal(g_json_live, 0);
        }
        assert_true(done);
        assert_true(fail > 5); /* Jansson really allocated on this path */
    }
    json_set_alloc_funcs(malloc, free);
    free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_parse_reference_bytes),
        cmocka_unit_test(test_bad_too_short),
        cmocka_unit_test(test_bad_header_too_large),
        cmocka_unit_test(test_bad_header_past_end),
        cmocka_unit_test(test_bad_not_object),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_bad_utf8_name),
        cmocka_unit_test(test_bad_duplicate_name),
        cmocka_unit_test(test_bad_unknown_dtype),
        cmocka_unit_test(test_bad_subbyte_dtype),
        cmocka_unit_test(test_bad_missing_field),
        cmocka_unit_test(test_bad_entry_not_object),
        cmocka_unit_test(test_bad_shape),
        cmocka_unit_test(test_bad_ndim),
        cmocka_unit_test(test_bad_size_overflow),
        cmocka_unit_test(test_bad_offsets_shape),
        cmocka_unit_test(test_bad_offsets_reversed),
        cmocka_unit_test(test_bad_offsets_out_of_bounds),
        cmocka_unit_test(test_bad_size_mismatch),
        cmocka_unit_test(test_bad_overlap),
        cmocka_unit_test(test_bad_hole),
        cmocka_unit_test(test_bad_trailing_bytes),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_writer_misuse),
        cmocka_unit_test(test_reader_misuse),
        cmocka_unit_test(test_file_roundtrip),
        cmocka_unit_test(test_oom_writer),
        cmocka_unit_test(test_oom_reader),
        cmocka_unit_test(test_oom_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
