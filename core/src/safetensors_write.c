/* Safetensors writer: collects borrowed tensors, builds the JSON header with Jansson, and
 * writes the image to memory or atomically to a file.
 *
 * The header (with its 8-byte length prefix and space padding) is built lazily and cached
 * until the next add/set_metadata, so _size followed by _serialize builds it once. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "fl_internal.h"
#include "flotilla/tensor.h"

/* One added tensor; name and shape share one allocation (shape first, then the name). */
struct wr_tensor {
    uint64_t *shape;     /* ndim dims, start of the owned block; NULL when ndim == 0 */
    char *name;          /* NUL-terminated copy, inside the block (or the block if ndim 0) */
    size_t block_len;    /* bytes of the block starting at shape-or-name */
    fl_dtype dtype;      /* element type */
    size_t ndim;         /* number of dimensions */
    const void *data;    /* borrowed tensor bytes */
    size_t nbytes;       /* their length */
};

/* One metadata entry; key and value share one allocation (key, NUL, value, NUL). */
struct wr_meta {
    char *key;        /* owned block */
    char *value;      /* inside the block */
    size_t block_len; /* block size in bytes */
};

struct fl_safetensors_writer {
    fl_allocator alloc;       /* copy of the caller's allocator */
    struct fl__err err;       /* last failure */
    struct wr_tensor *t;      /* added tensors, insertion order */
    size_t nt, cap_t;         /* used / allocated entries of t */
    struct wr_meta *m;        /* metadata, insertion order */
    size_t nm, cap_m;         /* used / allocated entries of m */
    uint8_t *header;          /* cached 8-byte length + padded JSON, or NULL when stale */
    size_t header_len;        /* bytes of header (multiple of 8) */
    struct wr_tensor **order; /* nt pointers: data-buffer order of the cached header */
    size_t data_len;          /* data buffer size for the cached header */
};

/* ---- helpers ---- */

/* Strict UTF-8 check (no overlongs, no surrogates, nothing above U+10FFFF): JSON strings
 * must be valid UTF-8, and reporting it here gives a better message than Jansson's NULL. */
static int utf8_valid(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        size_t n;
        unsigned min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return 0;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return 0;
            c = (c << 6) | (s[i] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return 0;
        s += n + 1;
    }
    return 1;
}

static void drop_header(fl_safetensors_writer *w) {
    fl__free(&w->alloc, w->header, w->header_len);
    fl__free(&w->alloc, w->order, w->nt * sizeof(*w->order));
    w->header = NULL;
    w->header_len = 0;
    w->order = NULL;
    w->data_len = 0;
}

/* Grows an array of elem-size entries so one more fits. */
static int grow(const fl_allocator *a, void **arr, size_t *cap, size_t used, size_t elem) {
    if (used < *cap)
        return 1;
    size_t ncap = *cap ? *cap * 2 : 8;
    if (fl__mul_overflows(ncap, elem))
        return 0;
    void *p = fl__realloc(a, *arr, *cap * elem, ncap * elem);
    if (!p)
        return 0;
    *arr = p;
    *cap = ncap;
    return 1;
}

/* ---- lifecycle ---- */

fl_status fl_safetensors_writer_create(fl_safetensors_writer **out, const fl_allocator *alloc) {
    fl_allocator a;
    if (!out)
        return FL_ERR_MISUSE;
    *out = NULL;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return FL_ERR_MISUSE;
    fl_safetensors_writer *w = fl__calloc(&a, 1, sizeof(*w));
    if (!w)
        return FL_ERR_NOMEM;
    w->alloc = a;
    fl__err_clear(&w->err);
    *out = w;
    return FL_OK;
}

void fl_safetensors_writer_destroy(fl_safetensors_writer *w) {
    if (!w)
        return;
    drop_header(w);
    for (size_t i = 0; i < w->nt; i++) {
        void *block = w->t[i].shape ? (void *)w->t[i].shape : (void *)w->t[i].name;
        fl__free(&w->alloc, block, w->t[i].block_len);
    }
    for (size_t i = 0; i < w->nm; i++)
        fl__free(&w->alloc, w->m[i].key, w->m[i].block_len);
    fl__free(&w->alloc, w->t, w->cap_t * sizeof(*w->t));
    fl__free(&w->alloc, w->m, w->cap_m * sizeof(*w->m));
    fl_allocator a = w->alloc;
    fl__free(&a, w, sizeof(*w));
}

const char *fl_safetensors_writer_errmsg(const fl_safetensors_writer *w) {
    if (!w)
        return "NULL safetensors writer";
    return fl__err_msg(&w->err);
}

/* ---- adding content ---- */

fl_status fl_safetensors_writer_add(fl_safetensors_writer *w, const char *name, fl_dtype dtype,
                                    size_t ndim, const uint64_t *shape, const void *data,
                                    size_t nbytes) {
    if (!w)
        return FL_ERR_MISUSE;
    fl__err_clear(&w->err);
    if (!name || !*name)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "tensor name is NULL or empty");
    if (!utf8_valid(name))
        return fl__err_set(&w->err, FL_ERR_MISUSE, "tensor name is not valid UTF-8");
    if (strcmp(name, "__metadata__") == 0)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "tensor name '__metadata__' is reserved");
    if (fl_dtype_size(dtype) == 0)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "tensor '%.64s': unknown dtype %d", name,
                           (int)dtype);
    if (ndim > FL_TENSOR_MAX_NDIM || (ndim > 0 && !shape))
        return fl__err_set(&w->err, FL_ERR_MISUSE,
                           "tensor '%.64s': bad shape (ndim %zu, limit %d)", name, ndim,
                           FL_TENSOR_MAX_NDIM);
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] > (uint64_t)INT64_MAX)
            return fl__err_set(&w->err, FL_ERR_MISUSE,
                               "tensor '%.64s': shape[%zu] exceeds INT64_MAX", name, i);
    }
    size_t need;
    if (fl_tensor_nbytes(&need, dtype, ndim, shape) != FL_OK)
        return fl__err_set(&w->err, FL_ERR_RANGE, "tensor '%.64s': size overflows", name);
    if (need != nbytes)
        return fl__err_set(&w->err, FL_ERR_MISUSE,
                           "tensor '%.64s': nbytes %zu but shape x dtype needs %zu", name,
                           nbytes, need);
    if (nbytes > 0 && !data)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "tensor '%.64s': NULL data", name);
    for (size_t i = 0; i < w->nt; i++) {
        if (strcmp(w->t[i].name, name) == 0)
            return fl__err_set(&w->err, FL_ERR_EXISTS, "tensor '%.64s' was already added",
                               name);
    }

    /* Allocate everything before changing any state, so failure adds nothing. */
    drop_header(w);
    if (!grow(&w->alloc, (void **)&w->t, &w->cap_t, w->nt, sizeof(*w->t)))
        return fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory adding tensor");
    size_t nl = strlen(name) + 1;
    size_t block_len = ndim * sizeof(uint64_t) + nl; /* ndim <= 64: no overflow */
    uint8_t *block = fl__alloc(&w->alloc, block_len);
    if (!block)
        return fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory adding tensor");
    struct wr_tensor *t = &w->t[w->nt];
    t->shape = ndim ? (uint64_t *)(void *)block : NULL;
    if (ndim)
        memcpy(t->shape, shape, ndim * sizeof(uint64_t));
    t->name = (char *)block + ndim * sizeof(uint64_t);
    memcpy(t->name, name, nl);
    t->block_len = block_len;
    t->dtype = dtype;
    t->ndim = ndim;
    t->data = data;
    t->nbytes = nbytes;
    w->nt++;
    return FL_OK;
}

fl_status fl_safetensors_writer_set_metadata(fl_safetensors_writer *w, const char *key,
                                             const char *value) {
    if (!w)
        return FL_ERR_MISUSE;
    fl__err_clear(&w->err);
    if (!key || !value)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "metadata key or value is NULL");
    if (!utf8_valid(key) || !utf8_valid(value))
        return fl__err_set(&w->err, FL_ERR_MISUSE, "metadata '%.64s' is not valid UTF-8", key);
    size_t kl = strlen(key) + 1, vl = strlen(value) + 1;
    if (kl > SIZE_MAX - vl)
        return fl__err_set(&w->err, FL_ERR_RANGE, "metadata too long");
    char *block = fl__alloc(&w->alloc, kl + vl);
    if (!block)
        return fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory setting metadata");
    memcpy(block, key, kl);
    memcpy(block + kl, value, vl);

    size_t i;
    for (i = 0; i < w->nm; i++) {
        if (strcmp(w->m[i].key, key) == 0)
            break;
    }
    if (i == w->nm && !grow(&w->alloc, (void **)&w->m, &w->cap_m, w->nm, sizeof(*w->m))) {
        fl__free(&w->alloc, block, kl + vl);
        return fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory setting metadata");
    }
    drop_header(w);
    if (i < w->nm)
        fl__free(&w->alloc, w->m[i].key, w->m[i].block_len);
    else
        w->nm++;
    w->m[i].key = block;
    w->m[i].value = block + kl;
    w->m[i].block_len = kl + vl;
    return FL_OK;
}

/* ---- header ---- */

/* Data order: larger elements first so every tensor is naturally aligned, then by name. */
static int cmp_layout(const void *pa, const void *pb) {
    const struct wr_tensor *a = *(const struct wr_tensor *const *)pa;
    const struct wr_tensor *b = *(const struct wr_tensor *const *)pb;
    size_t sa = fl_dtype_size(a->dtype), sb = fl_dtype_size(b->dtype);
    if (sa != sb)
        return sa > sb ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Builds the Jansson tree for the current order; NULL on allocation failure. */
static json_t *build_json(fl_safetensors_writer *w) {
    json_t *root = json_object();
    if (!root)
        return NULL;
    if (w->nm > 0) {
        json_t *meta = json_object();
        if (json_object_set_new(root, "__metadata__", meta) != 0)
            goto out_fail;
        for (size_t i = 0; i < w->nm; i++) {
            if (json_object_set_new(meta, w->m[i].key, json_string(w->m[i].value)) != 0)
                goto out_fail;
        }
    }
    size_t off = 0;
    for (size_t i = 0; i < w->nt; i++) {
        const struct wr_tensor *t = w->order[i];
        json_t *e = json_object();
        if (json_object_set_new(root, t->name, e) != 0)
            goto out_fail;
        /* set_new takes ownership even when it fails, so nothing leaks on these paths. */
        json_t *shape, *offs;
        if (json_object_set_new(e, "dtype", json_string(fl_dtype_name(t->dtype))) != 0 ||
            json_object_set_new(e, "shape", shape = json_array()) != 0 ||
            json_object_set_new(e, "data_offsets", offs = json_array()) != 0)
            goto out_fail;
        for (size_t d = 0; d < t->ndim; d++) {
            if (json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) != 0)
                goto out_fail;
        }
        /* off + nbytes <= data_len was checked against INT64_MAX by the caller. */
        if (json_array_append_new(offs, json_integer((json_int_t)off)) != 0 ||
            json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes))) != 0)
            goto out_fail;
        off += t->nbytes;
    }
    return root;

out_fail:
    json_decref(root);
    return NULL;
}

/* Makes w->header/order/data_len current. */
static fl_status ensure_header(fl_safetensors_writer *w) {
    fl_status rc = FL_OK;
    json_t *root = NULL;
    if (w->header)
        return FL_OK;

    size_t data_len = 0;
    for (size_t i = 0; i < w->nt; i++) {
        if (w->t[i].nbytes > (size_t)INT64_MAX - data_len)
            return fl__err_set(&w->err, FL_ERR_TOO_LARGE, "data buffer too large");
        data_len += w->t[i].nbytes;
    }
    struct wr_tensor **order = fl__alloc_array(&w->alloc, w->nt, sizeof(*order));
    if (!order)
        return fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory building the header");
    for (size_t i = 0; i < w->nt; i++)
        order[i] = &w->t[i];
    if (w->nt > 1)
        qsort(order, w->nt, sizeof(*order), cmp_layout);
    w->order = order;

    root = build_json(w);
    if (!root) {
        rc = fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory building the header JSON");
        goto out_fail;
    }
    size_t jlen = json_dumpb(root, NULL, 0, JSON_COMPACT);
    if (jlen == 0) {
        rc = fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory encoding the header JSON");
        goto out_fail;
    }
    /* Pad with spaces so 8 + padded is a multiple of 8. */
    size_t padded = (jlen + 7) & ~(size_t)7;
    if (padded > FL_SAFETENSORS_MAX_HEADER_BYTES) {
        rc = fl__err_set(&w->err, FL_ERR_TOO_LARGE,
                         "header of %zu bytes exceeds the limit of %u bytes", padded,
                         FL_SAFETENSORS_MAX_HEADER_BYTES);
        goto out_fail;
    }
    if (data_len > SIZE_MAX - 8 - padded) {
        rc = fl__err_set(&w->err, FL_ERR_TOO_LARGE, "image does not fit in size_t");
        goto out_fail;
    }
    uint8_t *hdr = fl__alloc(&w->alloc, 8 + padded);
    if (!hdr) {
        rc = fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory for the header");
        goto out_fail;
    }
    if (json_dumpb(root, (char *)hdr + 8, jlen, JSON_COMPACT) != jlen) {
        fl__free(&w->alloc, hdr, 8 + padded);
        rc = fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory encoding the header JSON");
        goto out_fail;
    }
    memset(hdr + 8 + jlen, ' ', padded - jlen);
    fl__put_u64le(hdr, (uint64_t)padded);
    json_decref(root);
    w->header = hdr;
    w->header_len = 8 + padded;
    w->data_len = data_len;
    return FL_OK;

out_fail:
    json_decref(root);
    drop_header(w);
    return rc;
}

fl_status fl_safetensors_writer_size(fl_safetensors_writer *w, size_t *out_len) {
    if (!w)
        return FL_ERR_MISUSE;
    fl__err_clear(&w->err);
    if (!out_len)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "NULL out_len");
    fl_status rc = ensure_header(w);
    if (rc == FL_OK)
        *out_len = w->header_len + w->data_len;
    return rc;
}

fl_status fl_safetensors_writer_serialize(fl_safetensors_writer *w, void *out, size_t out_len) {
    if (!w)
        return FL_ERR_MISUSE;
    fl__err_clear(&w->err);
    if (!out)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "NULL output buffer");
    fl_status rc = ensure_header(w);
    if (rc != FL_OK)
        return rc;
    size_t total = w->header_len + w->data_len;
    if (out_len < total)
        return fl__err_set(&w->err, FL_ERR_MISUSE,
                           "output buffer of %zu bytes is too small: %zu needed", out_len,
                           total);
    uint8_t *p = out;
    memcpy(p, w->header, w->header_len);
    p += w->header_len;
    for (size_t i = 0; i < w->nt; i++) {
        if (w->order[i]->nbytes) {
            memcpy(p, w->order[i]->data, w->order[i]->nbytes);
            p += w->order[i]->nbytes;
        }
    }
    return FL_OK;
}

/* ---- atomic file write ---- */

static fl_status write_all(fl_safetensors_writer *w, int fd, const void *buf, size_t len,
                           const char *path) {
    const uint8_t *p = buf;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? (size_t)1 << 30 : len;
        ssize_t n = write(fd, p, chunk);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fl__err_set(&w->err, FL_ERR_IO, "write '%s': %s", path, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return FL_OK;
}

/* fsyncs the directory holding path so the rename itself is durable. */
static fl_status sync_parent_dir(fl_safetensors_writer *w, char *tmp, const char *path) {
    char *slash = strrchr(tmp, '/');
    const char *dir = ".";
    if (slash == tmp) {
        dir = "/";
    } else if (slash) {
        *slash = '\0';
        dir = tmp;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return fl__err_set(&w->err, FL_ERR_IO, "open directory of '%s': %s", path,
                           strerror(errno));
    fl_status rc = FL_OK;
    if (fsync(dfd) != 0 && errno != EINVAL) /* some filesystems cannot fsync directories */
        rc = fl__err_set(&w->err, FL_ERR_IO, "fsync directory of '%s': %s", path,
                         strerror(errno));
    close(dfd);
    return rc;
}

fl_status fl_safetensors_writer_write_file(fl_safetensors_writer *w, const char *path) {
    static const char suffix[] = ".tmp.XXXXXX";
    fl_status rc;
    if (!w)
        return FL_ERR_MISUSE;
    fl__err_clear(&w->err);
    if (!path || !*path)
        return fl__err_set(&w->err, FL_ERR_MISUSE, "NULL or empty path");
    if ((rc = ensure_header(w)) != FL_OK)
        return rc;

    size_t pl = strlen(path);
    size_t tmp_len = pl + sizeof(suffix);
    char *tmp = fl__alloc(&w->alloc, tmp_len);
    if (!tmp)
        return fl__err_set(&w->err, FL_ERR_NOMEM, "out of memory for the temporary name");
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, suffix, sizeof(suffix));
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = fl__err_set(&w->err, FL_ERR_IO, "create temporary file for '%s': %s", path,
                         strerror(errno));
        goto out_free_tmp;
    }
    /* mkstemp creates 0600; model files are meant to be shared like any output file. */
    if (fchmod(fd, 0644) != 0) {
        rc = fl__err_set(&w->err, FL_ERR_IO, "chmod '%s': %s", tmp, strerror(errno));
        goto out_close;
    }
    if ((rc = write_all(w, fd, w->header, w->header_len, path)) != FL_OK)
        goto out_close;
    for (size_t i = 0; i < w->nt; i++) {
        if ((rc = write_all(w, fd, w->order[i]->data, w->order[i]->nbytes, path)) != FL_OK)
            goto out_close;
    }
    if (fsync(fd) != 0) {
        rc = fl__err_set(&w->err, FL_ERR_IO, "fsync '%s': %s", tmp, strerror(errno));
        goto out_close;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = fl__err_set(&w->err, FL_ERR_IO, "close '%s': %s", tmp, strerror(errno));
        goto out_unlink;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = fl__err_set(&w->err, FL_ERR_IO, "rename '%s' to '%s': %s", tmp, path,
                         strerror(errno));
        goto out_unlink;
    }
    rc = sync_parent_dir(w, tmp, path); /* the file is in place even if this fails */
    goto out_free_tmp;

out_close:
    close(fd);
out_unlink:
    unlink(tmp);
out_free_tmp:
    fl__free(&w->alloc, tmp, tmp_len);
    return rc;
}
