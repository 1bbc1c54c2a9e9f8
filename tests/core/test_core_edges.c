/* Edge cases of core that the other core tests leave out: the allocation funnel with every
 * kind of hook, error records and logging, status names, the safetensors reader's rarer
 * malformed headers (types of every field, zero-size tensors sharing an offset, metadata
 * null) and accessors, the writer's UTF-8 check, size limits, relative and refused paths,
 * and a size-checking allocator that fails each allocation of a file write in turn. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_test.h"
#include "fl_test_strict.h"
#include "fl_internal.h"
#include "flotilla/tensor.h"

/* Builds an image from a header string and dlen data bytes (a pattern). Caller frees. */
static uint8_t *image(const char *hdr, size_t dlen, size_t *len) {
    size_t hl = strlen(hdr);
    uint8_t *b = malloc(8 + hl + dlen + 1);
    assert_non_null(b);
    fl__put_u64le(b, (uint64_t)hl);
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < dlen; i++)
        b[8 + hl + i] = (uint8_t)(i * 7 + 1);
    *len = 8 + hl + dlen;
    return b;
}

/* Parses hdr + dlen bytes; asserts the status and that the message contains want. */
static void expect_parse(const char *hdr, size_t dlen, fl_status want_rc, const char *want) {
    size_t len;
    uint8_t *img = image(hdr, dlen, &len);
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    fl_status rc = fl_safetensors_parse(st, img, len);
    const char *msg = fl_safetensors_errmsg(st);
    if (rc != want_rc || (want && !strstr(msg, want)))
        fail_msg("header %s: got %s '%s', want %s with '%s'", hdr, fl_status_name(rc), msg,
                 fl_status_name(want_rc), want ? want : "");
    if (rc != FL_OK)
        assert_int_equal(fl_safetensors_count(st), 0);
    fl_safetensors_destroy(st);
    free(img);
}

/* ---- allocation funnel ---- */

static void test_alloc_hooks(void **state) {
    (void)state;
    struct fl_test_strict s = {0};
    fl_allocator with = fl_test_strict_allocator(&s, 1);
    fl_allocator without = fl_test_strict_allocator(&s, 0), out;

    /* allocator_copy refuses each kind of bad struct, and copies a good one */
    fl_allocator bad = with;
    bad.struct_size = sizeof(fl_allocator) - 1;
    assert_int_equal(fl__allocator_copy(&out, &bad), FL_ERR_MISUSE);
    bad = with;
    bad.alloc = NULL;
    assert_int_equal(fl__allocator_copy(&out, &bad), FL_ERR_MISUSE);
    bad = with;
    bad.free = NULL;
    assert_int_equal(fl__allocator_copy(&out, &bad), FL_ERR_MISUSE);
    assert_int_equal(fl__allocator_copy(&out, &with), FL_OK);
    assert_ptr_equal(out.realloc, fl_test_strict_realloc);
    assert_ptr_equal(out.user, &s);

    /* overflow checks: a zero element size never overflows, n*size past SIZE_MAX does */
    assert_int_equal(fl__mul_overflows(SIZE_MAX, 0), 0);
    assert_int_equal(fl__mul_overflows(SIZE_MAX / 2 + 1, 2), 1);
    assert_int_equal(fl__mul_overflows(SIZE_MAX / 2, 2), 0);
    long calls = s.calls;
    assert_null(fl__calloc(&with, SIZE_MAX / 4, 8));
    assert_int_equal(s.calls, calls); /* refused before reaching the hook */

    /* a zero-byte request still returns a distinct, freeable block */
    uint8_t *z = fl__calloc(&with, 0, 16);
    assert_non_null(z);
    assert_int_equal(z[0], 0);
    fl__free(&with, z, 0);

    /* realloc through the hook, through alloc+copy+free, and with libc */
    uint8_t *p = fl__alloc(&with, 4);
    memcpy(p, "abcd", 4);
    p = fl__realloc(&with, p, 4, 8);
    assert_int_equal(s.reallocs, 1);
    assert_memory_equal(p, "abcd", 4);
    p = fl__realloc(&without, p, 8, 0); /* shrinks to one byte */
    assert_int_equal(s.reallocs, 1);
    assert_int_equal(p[0], 'a');
    fl__free(&without, p, 1);
    s.fail_at = s.calls + 1;
    assert_null(fl__realloc(&without, NULL, 0, 8));
    s.fail_at = s.calls + 1;
    assert_null(fl__calloc(&with, 2, 2));
    s.fail_at = 0;
    fl_allocator libc = {0}; /* a copied NULL allocator: every path falls back to libc */
    char *q = fl__realloc(&libc, NULL, 0, 3);
    assert_non_null(q);
    q = fl__realloc(NULL, q, 3, 0);
    assert_non_null(q);
    fl__free(&libc, q, 1);
    fl__free(&with, NULL, 5);

    /* strdup: NULL in, NULL out; a failed allocation gives NULL */
    assert_null(fl__strdup(&with, NULL));
    char *d = fl__strdup(&with, "flotilla");
    assert_string_equal(d, "flotilla");
    fl__free(&with, d, 9);
    s.fail_at = s.calls + 1;
    assert_null(fl__strdup(&with, "x"));
    assert_int_equal(s.live, 0);
    assert_int_equal(s.bad_frees, 0);
}

/* ---- errors, logging, status ---- */

struct log_rec {
    int n;
    fl_log_level level;
    char msg[600];
};

static void log_fn(void *user, fl_log_level level, const char *msg) {
    struct log_rec *r = user;
    r->n++;
    r->level = level;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
}

static void test_err_and_log(void **state) {
    (void)state;
    struct fl__err e;
    assert_int_equal(fl__err_set(NULL, FL_ERR_IO, "ignored %d", 1), FL_ERR_IO);
    fl__err_clear(NULL);
    assert_string_equal(fl__err_msg(NULL), fl_status_str(FL_ERR_MISUSE));
    /* no format: the message is the status text */
    const char *volatile nofmt = NULL;
    fl__err_clear(&e);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-security"
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    assert_int_equal(fl__err_set(&e, FL_ERR_TIMEOUT, nofmt), FL_ERR_TIMEOUT);
#pragma GCC diagnostic pop
    assert_string_equal(fl__err_msg(&e), "deadline passed");
    /* a long message is cut to the buffer, NUL-terminated */
    char big[1000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    fl__err_set(&e, FL_ERR_FORMAT, "%s", big);
    assert_int_equal(strlen(fl__err_msg(&e)), FL__ERRMSG_MAX - 1);
    /* a cleared record with a code but no text falls back to the status string */
    e.code = FL_ERR_BUSY;
    e.msg[0] = '\0';
    assert_string_equal(fl__err_msg(&e), "resource busy");

    struct log_rec r = {0};
    fl_logger lg = {log_fn, &r, FL_LOG_WARN};
    fl__log(NULL, FL_LOG_ERROR, "dropped");
    fl__log(&lg, FL_LOG_INFO, "below the level");
    assert_int_equal(r.n, 0);
    fl__log(&lg, FL_LOG_WARN, "round %d of %s", 7, "pop");
    assert_int_equal(r.n, 1);
    assert_int_equal(r.level, FL_LOG_WARN);
    assert_string_equal(r.msg, "round 7 of pop");
    fl__log(&lg, FL_LOG_ERROR, "%s", big); /* cut to the 512-byte line buffer */
    assert_int_equal(strlen(r.msg), 511);
    fl_logger off = {NULL, &r, FL_LOG_DEBUG};
    fl__log(&off, FL_LOG_ERROR, "off");
    assert_int_equal(r.n, 2);

    assert_string_equal(fl_status_name((fl_status)FL_STATUS_COUNT), "FL_ERR_UNKNOWN");
    assert_string_equal(fl_status_name((fl_status)-1), "FL_ERR_UNKNOWN");
    assert_string_equal(fl_status_str((fl_status)-1), "unknown status");
    assert_string_equal(fl_status_name(FL_ERR_INTERNAL), "FL_ERR_INTERNAL");

    /* build features: known names answer 0 or 1, near misses never match */
    const char *feat[] = {"cuda", "mbedtls", "openblas", "mpi"};
    for (size_t i = 0; i < sizeof(feat) / sizeof(feat[0]); i++) {
        int h = fl_build_has(feat[i]);
        assert_true(h == 0 || h == 1);
        assert_int_equal(fl_build_has(feat[i]), h);
    }
    assert_int_equal(fl_build_has("MPI"), 0);
    assert_int_equal(fl_build_has("mp"), 0);
    assert_int_equal(fl_build_has("openblas "), 0);
    assert_int_equal(fl_build_has(""), 0);

    unsigned char buf[4] = {1, 2, 3, 4};
    fl_memzero(buf, 0);
    assert_int_equal(buf[0], 1);
    assert_int_equal(fl_memeq_ct(buf, buf, 0), 0);
}

/* ---- tensor helpers ---- */

static void test_tensor_helpers(void **state) {
    (void)state;
    size_t n = 99;
    assert_int_equal(fl_dtype_size((fl_dtype)FL_DTYPE_COUNT), 0);
    assert_int_equal(fl_dtype_size((fl_dtype)-1), 0);
    assert_null(fl_dtype_name((fl_dtype)-3));
    assert_null(fl_dtype_name(FL_DTYPE_INVALID));
    assert_int_equal(fl_dtype_from_name("f32"), FL_DTYPE_INVALID);
    assert_int_equal(fl_dtype_from_name("F32 "), FL_DTYPE_INVALID);
    assert_int_equal(fl_dtype_from_name("F8_E8M0"), FL_DTYPE_F8_E8M0);
    assert_int_equal(fl_tensor_max_ndim(), FL_TENSOR_MAX_NDIM);
    assert_int_equal(fl_safetensors_max_header_bytes(), FL_SAFETENSORS_MAX_HEADER_BYTES);
    /* misuse leaves *out alone */
    assert_int_equal(fl_tensor_nbytes(NULL, FL_DTYPE_F32, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_INVALID, 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_F32, FL_TENSOR_MAX_NDIM + 1, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_F32, 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(n, 99);
    /* scalar, exact limit, one past it */
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_F64, 0, NULL), FL_OK);
    assert_int_equal(n, 8);
    uint64_t lim[2] = {SIZE_MAX / 8, 2};
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_U32, 2, lim), FL_OK);
    assert_int_equal(n, (SIZE_MAX / 8) * 8);
    lim[1] = 3;
    n = 5;
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_U32, 2, lim), FL_ERR_RANGE);
    assert_int_equal(n, 5);
    uint64_t zero_last[3] = {UINT64_MAX, UINT64_MAX, 0};
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_C64, 3, zero_last), FL_OK);
    assert_int_equal(n, 0);
    uint64_t all64[FL_TENSOR_MAX_NDIM];
    for (int i = 0; i < FL_TENSOR_MAX_NDIM; i++)
        all64[i] = 1;
    all64[FL_TENSOR_MAX_NDIM - 1] = 3;
    assert_int_equal(fl_tensor_nbytes(&n, FL_DTYPE_BF16, FL_TENSOR_MAX_NDIM, all64), FL_OK);
    assert_int_equal(n, 6);
}

/* ---- reader: malformed headers the main test does not reach ---- */

static void test_reader_field_types(void **state) {
    (void)state;
    expect_parse("{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, FL_ERR_FORMAT,
                 "tensor 'a': dtype is not a string");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1,
                 FL_ERR_FORMAT, "tensor 'a': shape is not an array");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1,
                 FL_ERR_FORMAT, "shape[0] is not a non-negative integer");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,\"2\"],\"data_offsets\":[0,2]}}", 2,
                 FL_ERR_FORMAT, "shape[1] is not a non-negative integer");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,-2],\"data_offsets\":[0,2]}}", 2,
                 FL_ERR_FORMAT, "shape[1] is not a non-negative integer");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"0\":1}}}", 1,
                 FL_ERR_FORMAT, "data_offsets is not two non-negative integers");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}", 1,
                 FL_ERR_FORMAT, "data_offsets is not two non-negative integers");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,1]}}", 1,
                 FL_ERR_FORMAT, "data_offsets is not two non-negative integers");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", 1,
                 FL_ERR_FORMAT, "data_offsets is not two non-negative integers");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.5]}}", 1,
                 FL_ERR_FORMAT, "data_offsets is not two non-negative integers");
    /* offsets that would wrap a 64-bit addition */
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
                 "\"data_offsets\":[9223372036854775807,9223372036854775807]}}",
                 1, FL_ERR_FORMAT, "outside the data buffer");
    /* a dimension bigger than any size_t product: overflow, not a wrap */
    expect_parse("{\"a\":{\"dtype\":\"F64\",\"shape\":[9223372036854775807,3],"
                 "\"data_offsets\":[0,8]}}",
                 8, FL_ERR_FORMAT, "overflows");
    /* sub-byte type names are unsupported, not unknown; names in messages are cut */
    expect_parse("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                 FL_ERR_UNSUPPORTED, "sub-byte dtype 'F6_E3M2'");
    char hdr[400];
    char longname[201];
    memset(longname, 'n', 200);
    longname[200] = '\0';
    snprintf(hdr, sizeof(hdr), "{\"%s\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}",
             longname);
    expect_parse(hdr, 0, FL_ERR_FORMAT, "unknown dtype 'X'");
    /* metadata: null is allowed, an array or a non-string value is not */
    expect_parse("{\"__metadata__\":null,\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                 "\"data_offsets\":[0,2]}}",
                 2, FL_OK, NULL);
    expect_parse("{\"__metadata__\":[\"k\"]}", 0, FL_ERR_FORMAT, "__metadata__ is not an object");
    expect_parse("{\"__metadata__\":{\"k\":null}}", 0, FL_ERR_FORMAT,
                 "value for key 'k' is not a string");
    /* header length exactly at the limit is checked against the file, one past is refused */
    uint8_t b[16] = {0};
    fl__put_u64le(b, (uint64_t)FL_SAFETENSORS_MAX_HEADER_BYTES + 1);
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "exceeds the limit"));
    fl__put_u64le(b, (uint64_t)FL_SAFETENSORS_MAX_HEADER_BYTES);
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "runs past the end"));
    fl__put_u64le(b, UINT64_MAX); /* must not wrap into a small length */
    assert_int_equal(fl_safetensors_parse(st, b, sizeof(b)), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "exceeds the limit"));
    fl__put_u64le(b, 0); /* an empty header */
    assert_int_equal(fl_safetensors_parse(st, b, 8), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "does not start with '{'"));
    assert_int_equal(fl_safetensors_parse(st, b, 0), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "file of 0 bytes"));
    fl_safetensors_destroy(st);
    /* a header of only "{}" and no data is an empty, valid file */
    expect_parse("{}", 0, FL_OK, NULL);
}

/* Zero-size tensors may share an offset with each other and with the start of a non-empty
 * tensor; they are ordered before it (then by name), and inside one they overlap. */
static void test_reader_zero_size_order(void **state) {
    (void)state;
    const char *hdr = "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                      "\"z2\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                      "\"z1\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]},"
                      "\"z3\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]},"
                      "\"__metadata__\":{\"k1\":\"v1\",\"k2\":\"\"}}";
    size_t len;
    uint8_t *img = image(hdr, 4, &len);
    fl_safetensors *st = NULL;
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, img, len), FL_OK);
    assert_int_equal(fl_safetensors_count(st), 4);
    const char *order[4] = {"z1", "z2", "b", "z3"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(fl_safetensors_at(st, &v, i), FL_OK);
        assert_string_equal(v.name, order[i]);
    }
    assert_int_equal(fl_safetensors_at(st, &v, 4), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_safetensors_at(st, NULL, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_find(st, &v, "z2"), FL_OK);
    assert_int_equal(v.ndim, 2);
    assert_int_equal(v.shape[1], 3);
    assert_int_equal(v.nbytes, 0);
    assert_int_equal(fl_safetensors_find(st, &v, "z0"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_safetensors_find(st, &v, "zz"), FL_ERR_NOT_FOUND);
    /* metadata accessors: either out-pointer may be NULL; NULL key finds nothing */
    const char *k = NULL, *val = NULL;
    assert_int_equal(fl_safetensors_metadata_count(st), 2);
    assert_int_equal(fl_safetensors_metadata_at(st, &k, NULL, 1), FL_OK);
    assert_string_equal(k, "k2");
    assert_int_equal(fl_safetensors_metadata_at(st, NULL, &val, 0), FL_OK);
    assert_string_equal(val, "v1");
    assert_int_equal(fl_safetensors_metadata_at(st, &k, &val, 2), FL_ERR_NOT_FOUND);
    assert_null(fl_safetensors_metadata_get(st, NULL));
    assert_string_equal(fl_safetensors_metadata_get(st, "k2"), "");
    assert_null(fl_safetensors_metadata_get(st, "k3"));
    /* parsing again replaces everything, also after a failure */
    assert_int_equal(fl_safetensors_parse(st, img, len - 1), FL_ERR_FORMAT);
    assert_int_equal(fl_safetensors_metadata_count(st), 0);
    assert_null(fl_safetensors_metadata_get(st, "k1"));
    fl_safetensors_destroy(st);
    free(img);

    /* a zero-size tensor inside a non-empty one overlaps it */
    expect_parse("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                 4, FL_ERR_FORMAT, "tensors 'b' and 'z' overlap");
    /* a zero-size tensor past the end of the buffer is outside it */
    expect_parse("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]}}",
                 4, FL_ERR_FORMAT, "outside the data buffer");
}

/* load: a directory, an empty file and a file too short are refused cleanly. */
static void test_reader_load_paths(void **state) {
    (void)state;
    char dir[] = "/tmp/fl_core_edges_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_safetensors *st = NULL;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_load(st, dir), FL_ERR_IO);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "is not a regular file"));
    char path[128];
    snprintf(path, sizeof(path), "%s/empty.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(fl_safetensors_load(st, path), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "file of 0 bytes"));
    unlink(path);
    snprintf(path, sizeof(path), "%s/missing", dir);
    assert_int_equal(fl_safetensors_load(st, path), FL_ERR_IO);
    assert_non_null(strstr(fl_safetensors_errmsg(st), "open"));
    fl_safetensors_destroy(st);
    rmdir(dir);

    fl_allocator bad = {0};
    st = (fl_safetensors *)&bad;
    assert_int_equal(fl_safetensors_create(&st, &bad), FL_ERR_MISUSE);
    assert_null(st);
    struct fl_test_strict s = {.fail_at = 1};
    fl_allocator a = fl_test_strict_allocator(&s, 0);
    assert_int_equal(fl_safetensors_create(&st, &a), FL_ERR_NOMEM);
    assert_null(st);
    fl_safetensors_writer *w = (fl_safetensors_writer *)&bad;
    s.calls = 0;
    assert_int_equal(fl_safetensors_writer_create(&w, &a), FL_ERR_NOMEM);
    assert_null(w);
}

/* ---- writer ---- */

static void test_writer_utf8(void **state) {
    (void)state;
    fl_safetensors_writer *w = NULL;
    const uint8_t d[1] = {9};
    const uint64_t one = 1;
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    /* valid: 2-, 3- and 4-byte sequences up to U+10FFFF */
    const char *good[] = {"\xc2\x80", "\xe2\x82\xac", "\xf0\x9f\x9a\xa2", "\xf4\x8f\xbf\xbf",
                          "\xed\x9f\xbf"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(fl_safetensors_writer_add(w, good[i], FL_DTYPE_U8, 1, &one, d, 1),
                         FL_OK);
    /* invalid: overlong, above U+10FFFF, stray or missing continuation, 5-byte lead */
    const char *badn[] = {"\xc0\x80",          "\xe0\x80\xaf",     "\xf0\x80\x80\x80",
                          "\xf4\x90\x80\x80",  "\x80",             "\xc2",
                          "\xe2\x28\xa1",      "\xf0\x9f\x9a",     "\xf8\x88\x80\x80\x80",
                          "\xc2\x80\xff",      "\xed\xbf\xbf"};
    for (size_t i = 0; i < sizeof(badn) / sizeof(badn[0]); i++) {
        if (fl_safetensors_writer_add(w, badn[i], FL_DTYPE_U8, 1, &one, d, 1) != FL_ERR_MISUSE)
            fail_msg("invalid UTF-8 name %zu accepted", i);
        assert_string_equal(fl_safetensors_writer_errmsg(w), "tensor name is not valid UTF-8");
        if (fl_safetensors_writer_set_metadata(w, "k", badn[i]) != FL_ERR_MISUSE)
            fail_msg("invalid UTF-8 metadata value %zu accepted", i);
    }
    assert_int_equal(fl_safetensors_writer_set_metadata(w, NULL, "v"), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_set_metadata(w, "\xc0\xaf", "v"), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_set_metadata(NULL, "k", "v"), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_add(w, NULL, FL_DTYPE_U8, 1, &one, d, 1),
                     FL_ERR_MISUSE);
    assert_string_equal(fl_safetensors_writer_errmsg(w), "tensor name is NULL or empty");
    assert_int_equal(fl_safetensors_writer_add(w, "s", FL_DTYPE_U8, 1, NULL, d, 1),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "bad shape (ndim 1"));
    uint64_t dims[FL_TENSOR_MAX_NDIM + 1];
    for (int i = 0; i <= FL_TENSOR_MAX_NDIM; i++)
        dims[i] = 1;
    assert_int_equal(fl_safetensors_writer_add(w, "s", FL_DTYPE_U8, FL_TENSOR_MAX_NDIM + 1, dims,
                                               d, 1),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_add(w, "s", FL_DTYPE_U8, FL_TENSOR_MAX_NDIM, dims, d,
                                               1),
                     FL_OK);
    dims[0] = (uint64_t)INT64_MAX + 1;
    dims[1] = 0;
    assert_int_equal(fl_safetensors_writer_add(w, "big", FL_DTYPE_U8, 2, dims, NULL, 0),
                     FL_ERR_MISUSE);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "shape[0] exceeds INT64_MAX"));
    /* the valid names survive a round trip */
    size_t len = 0;
    assert_int_equal(fl_safetensors_writer_size(w, &len), FL_OK);
    uint8_t *img = malloc(len);
    assert_int_equal(fl_safetensors_writer_serialize(w, img, len - 1), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "too small"));
    assert_int_equal(fl_safetensors_writer_serialize(w, img, len), FL_OK);
    assert_int_equal(fl_safetensors_writer_size(NULL, &len), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_serialize(NULL, img, len), FL_ERR_MISUSE);
    fl_safetensors *st = NULL;
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_parse(st, img, len), FL_OK);
    assert_int_equal(fl_safetensors_count(st), 6);
    assert_int_equal(fl_safetensors_find(st, &v, "\xf0\x9f\x9a\xa2"), FL_OK);
    assert_int_equal(((const uint8_t *)v.data)[0], 9);
    assert_int_equal(fl_safetensors_find(st, &v, "s"), FL_OK);
    assert_int_equal(v.ndim, FL_TENSOR_MAX_NDIM);
    fl_safetensors_destroy(st);
    free(img);
    fl_safetensors_writer_destroy(w);
}

/* A tensor of 2^63 bytes cannot be described by a header (offsets are JSON int64); nothing
 * is read from its (borrowed) data. */
static void test_writer_data_too_large(void **state) {
    (void)state;
    static const uint8_t byte = 1;
    fl_safetensors_writer *w = NULL;
    const uint64_t half = (uint64_t)1 << 62;
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(w, "a", FL_DTYPE_U16, 1, &half, &byte,
                                               (size_t)half * 2),
                     FL_OK);
    size_t len = 0;
    assert_int_equal(fl_safetensors_writer_size(w, &len), FL_ERR_TOO_LARGE);
    assert_string_equal(fl_safetensors_writer_errmsg(w), "data buffer too large");
    assert_int_equal(len, 0);
    uint8_t out[8];
    assert_int_equal(fl_safetensors_writer_serialize(w, out, sizeof(out)), FL_ERR_TOO_LARGE);
    assert_int_equal(fl_safetensors_writer_write_file(w, "/tmp/fl_never_written"),
                     FL_ERR_TOO_LARGE);
    assert_int_equal(access("/tmp/fl_never_written", F_OK), -1);
    fl_safetensors_writer_destroy(w);
}

static int count_entries(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int n = -1;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

/* A relative path (the directory fsync'd is "."), a path that is a directory (rename fails,
 * the temporary file is removed) and an allocation failure at each point of write_file,
 * with free sizes checked. */
static void test_writer_file_paths(void **state) {
    (void)state;
    char dir[] = "/tmp/fl_core_edges_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(dir), 0);
    const float f[3] = {1, 2, 3};
    const uint64_t three = 3;
    fl_safetensors_writer *w = NULL;
    assert_int_equal(fl_safetensors_writer_create(&w, NULL), FL_OK);
    assert_int_equal(fl_safetensors_writer_add(w, "w", FL_DTYPE_F32, 1, &three, f, 12), FL_OK);
    assert_int_equal(fl_safetensors_writer_write_file(w, "rel.safetensors"), FL_OK);
    assert_int_equal(fl_safetensors_writer_write_file(w, ""), FL_ERR_MISUSE);
    assert_int_equal(fl_safetensors_writer_write_file(NULL, "x"), FL_ERR_MISUSE);
    struct stat sb;
    assert_int_equal(stat("rel.safetensors", &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644);
    assert_int_equal(mkdir("adir", 0755), 0);
    assert_int_equal(fl_safetensors_writer_write_file(w, "adir"), FL_ERR_IO);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "rename"));
    assert_int_equal(count_entries("."), 2); /* rel.safetensors and adir: no temp left */
    assert_int_equal(fl_safetensors_writer_write_file(w, "nodir/x.safetensors"), FL_ERR_IO);
    assert_non_null(strstr(fl_safetensors_writer_errmsg(w), "create temporary file"));
    fl_safetensors_writer_destroy(w);
    fl_safetensors *st = NULL;
    fl_tensor_view v;
    assert_int_equal(fl_safetensors_create(&st, NULL), FL_OK);
    assert_int_equal(fl_safetensors_load(st, "rel.safetensors"), FL_OK);
    assert_int_equal(fl_safetensors_find(st, &v, "w"), FL_OK);
    assert_memory_equal(v.data, f, 12);
    fl_safetensors_destroy(st);

    int done = 0;
    for (long k = 1; k < 100 && !done; k++) {
        struct fl_test_strict s = {.fail_at = k};
        fl_allocator a = fl_test_strict_allocator(&s, (int)(k & 1));
        fl_status rc = fl_safetensors_writer_create(&w, &a);
        for (int i = 0; rc == FL_OK && i < 9; i++) {
            char name[8];
            snprintf(name, sizeof(name), "t%d", i);
            rc = fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 1, &three, f, 12);
        }
        if (rc == FL_OK)
            rc = fl_safetensors_writer_set_metadata(w, "k", "v");
        if (rc == FL_OK)
            rc = fl_safetensors_writer_write_file(w, "oom.safetensors");
        if (s.calls < k) {
            assert_int_equal(rc, FL_OK);
            done = 1;
        } else {
            assert_int_equal(rc, FL_ERR_NOMEM);
            assert_int_equal(access("oom.safetensors", F_OK), -1);
        }
        fl_safetensors_writer_destroy(w);
        w = NULL;
        assert_int_equal(s.live, 0);
        assert_int_equal(s.bad_frees, 0);
    }
    assert_true(done);
    /* the load with a strict allocator frees what it allocated, by size */
    struct fl_test_strict s = {0};
    fl_allocator a = fl_test_strict_allocator(&s, 0);
    assert_int_equal(fl_safetensors_create(&st, &a), FL_OK);
    assert_int_equal(fl_safetensors_load(st, "oom.safetensors"), FL_OK);
    assert_int_equal(fl_safetensors_count(st), 9);
    assert_int_equal(fl_safetensors_load(st, "adir"), FL_ERR_IO);
    fl_safetensors_destroy(st);
    assert_int_equal(s.live, 0);
    assert_int_equal(s.bad_frees, 0);

    assert_int_equal(chdir(cwd), 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_hooks),
        cmocka_unit_test(test_err_and_log),
        cmocka_unit_test(test_tensor_helpers),
        cmocka_unit_test(test_reader_field_types),
        cmocka_unit_test(test_reader_zero_size_order),
        cmocka_unit_test(test_reader_load_paths),
        cmocka_unit_test(test_writer_utf8),
        cmocka_unit_test(test_writer_data_too_large),
        cmocka_unit_test(test_writer_file_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
