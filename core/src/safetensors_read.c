/* Safetensors reader: validates a whole image before exposing zero-copy views into it.
 *
 * Parsing is two passes over the Jansson tree. Pass 1 validates every entry and sums what
 * the handle must keep (views, shapes, names, metadata); one arena is then allocated and
 * pass 2 fills it. The Jansson tree is freed before returning, so a parsed handle holds
 * exactly one arena allocation (plus the file buffer for _load). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "fl_internal.h"
#include "flotilla/tensor.h"

/* Names are truncated to this many bytes in error messages. */
#define ST_NAME_IN_MSG 64

struct st_meta {
    const char *key;   /* NUL-terminated, in the arena */
    const char *value; /* NUL-terminated, in the arena */
};

struct fl_safetensors {
    fl_allocator alloc;          /* copy of the caller's allocator */
    struct fl__err err;          /* last failure */
    uint8_t *file;               /* buffer read by _load, or NULL */
    size_t file_len;             /* its size in bytes */
    void *arena;                 /* views, name index, metadata, shapes, strings */
    size_t arena_len;            /* arena size in bytes */
    fl_tensor_view *views;       /* count views, in data-buffer order */
    const fl_tensor_view **by_name; /* count pointers into views, sorted by name */
    size_t count;                /* number of tensors */
    struct st_meta *meta;        /* nmeta entries, header order */
    size_t nmeta;                /* number of metadata entries */
};

/* What pass 1 learns about one tensor entry. */
struct st_decoded {
    fl_dtype dtype;  /* element type */
    size_t ndim;     /* number of dimensions */
    uint64_t begin;  /* data_offsets[0], bytes from the data buffer start */
    uint64_t end;    /* data_offsets[1] */
    size_t nbytes;   /* product(shape) * dtype size */
};

/* Sub-byte dtypes of the format that we recognise but cannot represent as byte views. */
static const char *const k_subbyte_dtypes[] = {"F4", "F6_E2M3", "F6_E3M2"};

size_t fl_safetensors_max_header_bytes(void) { return FL_SAFETENSORS_MAX_HEADER_BYTES; }

/* ---- handle lifecycle ---- */

static void st_clear(fl_safetensors *st) {
    fl__free(&st->alloc, st->arena, st->arena_len);
    fl__free(&st->alloc, st->file, st->file_len);
    st->arena = NULL;
    st->arena_len = 0;
    st->file = NULL;
    st->file_len = 0;
    st->views = NULL;
    st->by_name = NULL;
    st->count = 0;
    st->meta = NULL;
    st->nmeta = 0;
}

fl_status fl_safetensors_create(fl_safetensors **out, const fl_allocator *alloc) {
    fl_allocator a;
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    fl_safetensors *st = fl__calloc(&a, 1, sizeof(*st));
    if (!st)
        return FL_ERR_NOMEM;
    st->alloc = a;
    fl__err_clear(&st->err);
    *out = st;
    return FL_OK;
}

void fl_safetensors_destroy(fl_safetensors *st) {
    if (!st)
        return;
    st_clear(st);
    fl_allocator a = st->alloc;
    fl__free(&a, st, sizeof(*st));
}

const char *fl_safetensors_errmsg(const fl_safetensors *st) {
    if (!st)
        return "NULL safetensors handle";
    return fl__err_msg(&st->err);
}

/* ---- entry validation ---- */

/* Reads a JSON integer that must be >= 0. */
static int get_u64(const json_t *j, uint64_t *out) {
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(j);
    return 1;
}

/* Validates one tensor entry against the data buffer length. When shape_out is non-NULL
 * the dimensions are also stored there (pass 2). Returns FL_OK or the error set on st. */
static fl_status decode_entry(fl_safetensors *st, const char *name, const json_t *obj,
                              uint64_t data_len, struct st_decoded *d, uint64_t *shape_out) {
    struct fl__err *e = &st->err;
    const int nl = ST_NAME_IN_MSG;
    if (!json_is_object(obj))
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': entry is not an object", nl, name);

    const json_t *jd = json_object_get(obj, "dtype");
    if (!jd)
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': missing \"dtype\"", nl, name);
    if (!json_is_string(jd))
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': dtype is not a string", nl, name);
    const char *dname = json_string_value(jd);
    d->dtype = fl_dtype_from_name(dname);
    if (d->dtype == FL_DTYPE_INVALID) {
        for (size_t i = 0; i < sizeof(k_subbyte_dtypes) / sizeof(k_subbyte_dtypes[0]); i++) {
            if (strcmp(dname, k_subbyte_dtypes[i]) == 0)
                return fl__err_set(e, FL_ERR_UNSUPPORTED,
                                   "tensor '%.*s': sub-byte dtype '%s' is not supported", nl,
                                   name, dname);
        }
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': unknown dtype '%.32s'", nl, name,
                           dname);
    }

    const json_t *js = json_object_get(obj, "shape");
    if (!js)
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': missing \"shape\"", nl, name);
    if (!json_is_array(js))
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': shape is not an array", nl, name);
    d->ndim = json_array_size(js);
    if (d->ndim > FL_TENSOR_MAX_NDIM)
        return fl__err_set(e, FL_ERR_FORMAT,
                           "tensor '%.*s': shape has %zu dimensions, more than ndim limit %d", nl,
                           name, d->ndim, FL_TENSOR_MAX_NDIM);
    uint64_t dims[FL_TENSOR_MAX_NDIM];
    for (size_t i = 0; i < d->ndim; i++) {
        if (!get_u64(json_array_get(js, i), &dims[i]))
            return fl__err_set(e, FL_ERR_FORMAT,
                               "tensor '%.*s': shape[%zu] is not a non-negative integer", nl,
                               name, i);
    }
    if (fl_tensor_nbytes(&d->nbytes, d->dtype, d->ndim, dims) != FL_OK)
        return fl__err_set(e, FL_ERR_FORMAT,
                           "tensor '%.*s': size of shape x dtype overflows", nl, name);

    const json_t *jo = json_object_get(obj, "data_offsets");
    if (!jo)
        return fl__err_set(e, FL_ERR_FORMAT, "tensor '%.*s': missing \"data_offsets\"", nl,
                           name);
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !get_u64(json_array_get(jo, 0), &d->begin) || !get_u64(json_array_get(jo, 1), &d->end))
        return fl__err_set(e, FL_ERR_FORMAT,
                           "tensor '%.*s': data_offsets is not two non-negative integers", nl,
                           name);
    if (d->end < d->begin)
        return fl__err_set(e, FL_ERR_FORMAT,
                           "tensor '%.*s': data_offsets end %llu is before begin %llu", nl, name,
                           (unsigned long long)d->end, (unsigned long long)d->begin);
    if (d->end > data_len)
        return fl__err_set(e, FL_ERR_FORMAT,
                           "tensor '%.*s': data_offsets [%llu, %llu] outside the data buffer "
                           "of %llu bytes", nl, name, (unsigned long long)d->begin,
                           (unsigned long long)d->end, (unsigned long long)data_len);
    if (d->end - d->begin != (uint64_t)d->nbytes)
        return fl__err_set(e, FL_ERR_FORMAT,
                           "tensor '%.*s': size mismatch: data_offsets span %llu bytes but "
                           "shape x dtype needs %zu", nl, name,
                           (unsigned long long)(d->end - d->begin), d->nbytes);
    if (shape_out)
        memcpy(shape_out, dims, d->ndim * sizeof(uint64_t));
    return FL_OK;
}

/* __metadata__: absent/null, or an object of string values. */
static fl_status check_metadata(fl_safetensors *st, const json_t *m) {
    const char *k;
    json_t *v;
    if (json_is_null(m))
        return FL_OK;
    if (!json_is_object(m))
        return fl__err_set(&st->err, FL_ERR_FORMAT, "__metadata__ is not an object");
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return fl__err_set(&st->err, FL_ERR_FORMAT,
                               "__metadata__ value for key '%.*s' is not a string",
                               ST_NAME_IN_MSG, k);
    }
    return FL_OK;
}

/* ---- layout checks ---- */

/* Data order: by begin, then end (zero-size tensors first), then name for a total order. */
static int cmp_data_order(const void *pa, const void *pb) {
    const fl_tensor_view *a = pa, *b = pb;
    const uint8_t *da = a->data, *db = b->data;
    if (da != db)
        return da < db ? -1 : 1;
    if (a->nbytes != b->nbytes)
        return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int cmp_name(const void *pa, const void *pb) {
    const fl_tensor_view *const *a = pa, *const *b = pb;
    return strcmp((*a)->name, (*b)->name);
}

/* Walks the tensors in data order and checks that they tile [0, data_len) exactly. */
static fl_status check_tiling(fl_safetensors *st, const uint8_t *data, size_t data_len) {
    size_t expect = 0;                /* first byte not yet covered */
    const fl_tensor_view *prev = NULL; /* tensor that ends at expect */
    const int nl = ST_NAME_IN_MSG;
    for (size_t i = 0; i < st->count; i++) {
        const fl_tensor_view *v = &st->views[i];
        size_t begin = (size_t)((const uint8_t *)v->data - data);
        if (begin < expect)
            return fl__err_set(&st->err, FL_ERR_FORMAT,
                               "tensors '%.*s' and '%.*s' overlap in the data buffer", nl,
                               prev ? prev->name : "", nl, v->name);
        if (begin > expect)
            return fl__err_set(&st->err, FL_ERR_FORMAT,
                               "hole in the data buffer: bytes [%zu, %zu) before tensor '%.*s' "
                               "belong to no tensor", expect, begin, nl, v->name);
        if (v->nbytes > 0) {
            expect = begin + v->nbytes;
            prev = v;
        }
    }
    if (expect != data_len)
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "data buffer has %zu trailing bytes after the last tensor "
                           "(a hole at the end)", data_len - expect);
    return FL_OK;
}

/* ---- parsing ---- */

/* Rounds n up to a multiple of 16 (arena section alignment); 0 on overflow. */
static size_t round16(size_t n) {
    return n > SIZE_MAX - 15 ? 0 : (n + 15) & ~(size_t)15;
}

/* Adds b to *a, failing on overflow. */
static int add_size(size_t *a, size_t b) {
    if (b > SIZE_MAX - *a)
        return 0;
    *a += b;
    return 1;
}

static fl_status map_json_error(fl_safetensors *st, const json_error_t *je) {
    switch (json_error_code(je)) {
    case json_error_unknown: /* Jansson leaves this when an allocation failed */
    case json_error_out_of_memory:
        return fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory parsing the header JSON");
    case json_error_duplicate_key:
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "duplicate key in header JSON near byte %d: tensor names (and keys) "
                           "must be unique", je->position);
    case json_error_invalid_utf8:
        return fl__err_set(&st->err, FL_ERR_FORMAT, "header JSON is not valid UTF-8: %s",
                           je->text);
    default:
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "header is not well-formed JSON: %s (byte %d)", je->text,
                           je->position);
    }
}

/* Parses buf into st, which must be empty except possibly for st->file. */
static fl_status parse_image(fl_safetensors *st, const uint8_t *buf, size_t len) {
    fl_status rc = FL_OK;
    json_t *root = NULL;
    json_error_t je;
    memset(&je, 0, sizeof(je)); /* Jansson leaves it unset on some allocation failures */

    if (len < 8)
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "file of %zu bytes is too short for the 8-byte header length", len);
    uint64_t hlen = fl__get_u64le(buf);
    if (hlen > FL_SAFETENSORS_MAX_HEADER_BYTES)
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "header length %llu exceeds the limit of %u bytes",
                           (unsigned long long)hlen, FL_SAFETENSORS_MAX_HEADER_BYTES);
    if (hlen > len - 8)
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "header length %llu runs past the end of the file (%zu bytes follow "
                           "the length field)", (unsigned long long)hlen, len - 8);
    if (hlen == 0 || buf[8] != '{')
        return fl__err_set(&st->err, FL_ERR_FORMAT, "header JSON does not start with '{'");
    const uint8_t *data = buf + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;

    root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root && json_error_code(&je) != json_error_out_of_memory &&
        json_error_code(&je) != json_error_unknown) {
        /* Jansson 2.14 reports an allocation failure inside its lexer as a syntax error
         * ("invalid token"), so one failure cannot tell a bad header from a transient OOM.
         * Parsing is deterministic: a second attempt fails the same way on a bad header
         * and succeeds after a transient OOM. Only bad headers pay for the retry. */
        root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    }
    if (!root)
        return map_json_error(st, &je);
    if (!json_is_object(root)) {
        rc = fl__err_set(&st->err, FL_ERR_FORMAT, "header JSON is not an object");
        goto out_free_json;
    }

    /* Pass 1: validate and size. */
    size_t count = 0, ndims = 0, str_bytes = 0, nmeta = 0;
    const json_t *meta = NULL;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            meta = val;
            if ((rc = check_metadata(st, val)) != FL_OK)
                goto out_free_json;
            continue;
        }
        struct st_decoded d;
        if ((rc = decode_entry(st, key, val, data_len, &d, NULL)) != FL_OK)
            goto out_free_json;
        count++;
        ndims += d.ndim;
        str_bytes += strlen(key) + 1;
    }
    if (json_is_object(meta)) {
        json_object_foreach((json_t *)meta, key, val) {
            nmeta++;
            str_bytes += strlen(key) + 1 + json_string_length(val) + 1;
        }
    }

    /* One arena: views | by_name | meta | shapes | strings. Every count is bounded by the
     * header length, but sizes are still computed with overflow checks. */
    size_t off_views = 0, off_index, off_meta, off_shapes, off_str, total = 0;
    int ok = !fl__mul_overflows(count, sizeof(fl_tensor_view)) &&
             !fl__mul_overflows(count, sizeof(void *)) &&
             !fl__mul_overflows(nmeta, sizeof(struct st_meta)) &&
             !fl__mul_overflows(ndims, sizeof(uint64_t));
    if (ok) {
        total = round16(count * sizeof(fl_tensor_view));
        off_index = total;
        ok = add_size(&total, round16(count * sizeof(void *)));
        off_meta = total;
        ok = ok && add_size(&total, round16(nmeta * sizeof(struct st_meta)));
        off_shapes = total;
        ok = ok && add_size(&total, round16(ndims * sizeof(uint64_t)));
        off_str = total;
        ok = ok && add_size(&total, str_bytes);
    }
    if (!ok) {
        rc = fl__err_set(&st->err, FL_ERR_TOO_LARGE, "header describes too many objects");
        goto out_free_json;
    }
    uint8_t *arena = fl__alloc(&st->alloc, total);
    if (!arena) {
        rc = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory for the tensor table");
        goto out_free_json;
    }
    st->arena = arena;
    st->arena_len = total;
    st->views = (fl_tensor_view *)(void *)(arena + off_views);
    st->by_name = (const fl_tensor_view **)(void *)(arena + off_index);
    st->meta = (struct st_meta *)(void *)(arena + off_meta);
    uint64_t *shapes = (uint64_t *)(void *)(arena + off_shapes);
    char *strs = (char *)(arena + off_str);

    /* Pass 2: fill. decode_entry cannot fail here; it is re-run only to extract values. */
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        struct st_decoded d;
        fl_tensor_view *v = &st->views[st->count];
        if (FL_NEVER(decode_entry(st, key, val, data_len, &d, shapes) != FL_OK)) {
            rc = FL_ERR_INTERNAL;
            goto out_free_json;
        }
        size_t kl = strlen(key) + 1;
        memcpy(strs, key, kl);
        v->name = strs;
        strs += kl;
        v->dtype = d.dtype;
        v->ndim = d.ndim;
        v->shape = d.ndim ? shapes : NULL;
        shapes += d.ndim;
        v->data = data + d.begin;
        v->nbytes = d.nbytes;
        st->count++;
    }
    if (json_is_object(meta)) {
        json_object_foreach((json_t *)meta, key, val) {
            size_t kl = strlen(key) + 1, vl = json_string_length(val);
            memcpy(strs, key, kl);
            st->meta[st->nmeta].key = strs;
            strs += kl;
            memcpy(strs, json_string_value(val), vl);
            strs[vl] = '\0';
            st->meta[st->nmeta].value = strs;
            strs += vl + 1;
            st->nmeta++;
        }
    }

    if (st->count > 1)
        qsort(st->views, st->count, sizeof(fl_tensor_view), cmp_data_order);
    if ((rc = check_tiling(st, data, data_len)) != FL_OK)
        goto out_free_json;
    for (size_t i = 0; i < st->count; i++)
        st->by_name[i] = &st->views[i];
    if (st->count > 1)
        qsort(st->by_name, st->count, sizeof(void *), cmp_name);

out_free_json:
    json_decref(root);
    return rc;
}

fl_status fl_safetensors_parse(fl_safetensors *st, const void *buf, size_t len) {
    if (!st)
        return FL_ERR_MISUSE;
    st_clear(st);
    fl__err_clear(&st->err);
    if (!buf && len > 0)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "NULL buffer with nonzero length");
    fl_status rc = parse_image(st, buf, len);
    if (rc != FL_OK)
        st_clear(st);
    return rc;
}

/* Reads exactly len bytes from fd into buf, retrying on EINTR and short reads. */
static fl_status read_all(fl_safetensors *st, int fd, uint8_t *buf, size_t len,
                          const char *path) {
    size_t got = 0;
    while (got < len) {
        size_t want = len - got;
        if (want > ((size_t)1 << 30))
            want = (size_t)1 << 30; /* some kernels cap a single read below 2 GiB */
        ssize_t n = read(fd, buf + got, want);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fl__err_set(&st->err, FL_ERR_IO, "read '%s': %s", path, strerror(errno));
        }
        if (n == 0)
            return fl__err_set(&st->err, FL_ERR_IO, "read '%s': file shrank while reading",
                               path);
        got += (size_t)n;
    }
    return FL_OK;
}

fl_status fl_safetensors_load(fl_safetensors *st, const char *path) {
    fl_status rc;
    struct stat sb;
    if (!st)
        return FL_ERR_MISUSE;
    st_clear(st);
    fl__err_clear(&st->err);
    if (!path)
        return fl__err_set(&st->err, FL_ERR_MISUSE, "NULL path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fl__err_set(&st->err, FL_ERR_IO, "open '%s': %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        rc = fl__err_set(&st->err, FL_ERR_IO, "stat '%s': %s", path, strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = fl__err_set(&st->err, FL_ERR_IO, "'%s' is not a regular file", path);
        goto out_close;
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        rc = fl__err_set(&st->err, FL_ERR_TOO_LARGE, "'%s' does not fit in memory", path);
        goto out_close;
    }
    size_t len = (size_t)sb.st_size;
    st->file = fl__alloc(&st->alloc, len);
    if (!st->file) {
        rc = fl__err_set(&st->err, FL_ERR_NOMEM, "out of memory for %zu-byte file '%s'", len,
                         path);
        goto out_close;
    }
    st->file_len = len;
    if ((rc = read_all(st, fd, st->file, len, path)) != FL_OK)
        goto out_close;
    rc = parse_image(st, st->file, len);

out_close:
    close(fd);
    if (rc != FL_OK)
        st_clear(st);
    return rc;
}

/* ---- accessors (const: safe from many threads after a successful parse) ---- */

size_t fl_safetensors_count(const fl_safetensors *st) { return st ? st->count : 0; }

fl_status fl_safetensors_at(const fl_safetensors *st, fl_tensor_view *out, size_t index) {
    if (!st || !out)
        return FL_ERR_MISUSE;
    if (index >= st->count)
        return FL_ERR_NOT_FOUND;
    *out = st->views[index];
    return FL_OK;
}

fl_status fl_safetensors_find(const fl_safetensors *st, fl_tensor_view *out, const char *name) {
    if (!st || !out || !name)
        return FL_ERR_MISUSE;
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->by_name[mid]->name);
        if (c == 0) {
            *out = *st->by_name[mid];
            return FL_OK;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return FL_ERR_NOT_FOUND;
}

const char *fl_safetensors_metadata_get(const fl_safetensors *st, const char *key) {
    if (!st || !key)
        return NULL;
    for (size_t i = 0; i < st->nmeta; i++) {
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].value;
    }
    return NULL;
}

size_t fl_safetensors_metadata_count(const fl_safetensors *st) { return st ? st->nmeta : 0; }

fl_status fl_safetensors_metadata_at(const fl_safetensors *st, const char **key,
                                     const char **value, size_t index) {
    if (!st)
        return FL_ERR_MISUSE;
    if (index >= st->nmeta)
        return FL_ERR_NOT_FOUND;
    if (key)
        *key = st->meta[index].key;
    if (value)
        *value = st->meta[index].value;
    return FL_OK;
}
