/* Data sets: an IDX (MNIST/Fashion-MNIST) loader that reads gzip through zlib, in-memory
 * data sets for tests, and the seeded per-epoch shuffle the trainer draws batches from. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <zlib.h>

#include "dc_internal.h"

/* ---- shuffling ---- */

uint64_t fl__dc_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void fl__dc_permutation(uint32_t *perm, size_t n, uint64_t seed, uint64_t epoch) {
    uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (epoch + 1));
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        /* multiply-shift maps 64 random bits onto [0, i) with negligible bias */
        size_t j = (size_t)(((unsigned __int128)fl__dc_splitmix64(&s) * i) >> 64);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

/* ---- file reading ---- */

fl_status fl__dc_read_maybe_gz(const fl_allocator *a, const char *path, uint8_t **out,
                               size_t *len, struct fl__err *err) {
    *out = NULL;
    *len = 0;
    gzFile f = gzopen(path, "rb"); /* reads plain files unchanged too */
    if (!f)
        return fl__err_set(err, FL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    fl_status rc = FL_OK;
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = fl__alloc(a, cap);
    if (!buf) {
        rc = fl__err_set(err, FL_ERR_NOMEM, "no memory reading %s", path);
        goto out_close;
    }
    for (;;) {
        if (n == cap) {
            uint8_t *nb = fl__realloc(a, buf, cap, cap * 2);
            if (!nb) {
                rc = fl__err_set(err, FL_ERR_NOMEM, "no memory reading %s", path);
                goto out_free;
            }
            buf = nb;
            cap *= 2;
        }
        size_t want = cap - n > (1u << 30) ? (1u << 30) : cap - n;
        int got = gzread(f, buf + n, (unsigned)want);
        if (got < 0) {
            int zerr = 0;
            const char *m = gzerror(f, &zerr);
            rc = fl__err_set(err, FL_ERR_IO, "reading %s: %s", path, m ? m : "zlib error");
            goto out_free;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    *out = buf;
    *len = n;
    /* the caller frees with size cap, which it does not know: shrink to n */
    if (n < cap) {
        uint8_t *nb = fl__realloc(a, buf, cap, n ? n : 1);
        if (nb)
            *out = nb;
        else {
            rc = fl__err_set(err, FL_ERR_NOMEM, "no memory reading %s", path);
            goto out_free;
        }
    }
    goto out_close;
out_free:
    fl__free(a, buf, cap);
    *out = NULL;
    *len = 0;
out_close:
    gzclose(f);
    return rc;
}

static uint32_t get_u32be(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* ---- data sets ---- */

fl_status fl_dc_dataset_open_idx(fl_dc_dataset **out, const char *images_path,
                                 const char *labels_path, size_t limit,
                                 const fl_allocator *alloc) {
    struct fl__err err = {0};
    fl_allocator a;
    uint8_t *img = NULL, *lab = NULL;
    size_t img_len = 0, lab_len = 0;
    struct fl_dc_dataset *ds = NULL;
    fl_status rc;
    if (!out || !images_path || !labels_path)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "NULL argument");
    *out = NULL;
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "bad allocator struct");
    rc = fl__dc_read_maybe_gz(&a, images_path, &img, &img_len, &err);
    if (rc != FL_OK)
        goto out;
    rc = fl__dc_read_maybe_gz(&a, labels_path, &lab, &lab_len, &err);
    if (rc != FL_OK)
        goto out;
    if (img_len < 16 || get_u32be(img) != 0x00000803u) {
        rc = fl__err_set(&err, FL_ERR_FORMAT, "%s: not an IDX3 u8 image file", images_path);
        goto out;
    }
    if (lab_len < 8 || get_u32be(lab) != 0x00000801u) {
        rc = fl__err_set(&err, FL_ERR_FORMAT, "%s: not an IDX1 u8 label file", labels_path);
        goto out;
    }
    size_t n = get_u32be(img + 4), rows = get_u32be(img + 8), cols = get_u32be(img + 12);
    size_t dim = rows * cols;
    if (get_u32be(lab + 4) != n || dim == 0 || n == 0 || (img_len - 16) / dim < n ||
        lab_len - 8 < n) {
        rc = fl__err_set(&err, FL_ERR_FORMAT, "IDX sizes do not match (%zu images of %zux%zu)",
                         n, rows, cols);
        goto out;
    }
    if (limit && limit < n)
        n = limit;
    ds = fl__calloc(&a, 1, sizeof(*ds));
    if (!ds) {
        rc = fl__err_set(&err, FL_ERR_NOMEM, "no memory for the data set");
        goto out;
    }
    ds->alloc = a;
    ds->n = n;
    ds->dim = dim;
    ds->x = fl__alloc_array(&a, n * dim, sizeof(float));
    ds->y = fl__alloc_array(&a, n, sizeof(int32_t));
    if (!ds->x || !ds->y) {
        rc = fl__err_set(&err, FL_ERR_NOMEM, "no memory for %zu examples", n);
        goto out;
    }
    for (size_t i = 0; i < n * dim; i++)
        ds->x[i] = (float)img[16 + i] * (1.0f / 255.0f);
    int classes = 0;
    for (size_t i = 0; i < n; i++) {
        ds->y[i] = lab[8 + i];
        if (ds->y[i] + 1 > classes)
            classes = ds->y[i] + 1;
    }
    ds->classes = classes;
    *out = ds;
    ds = NULL;
out:
    fl__free(&a, img, img_len ? img_len : 1);
    fl__free(&a, lab, lab_len ? lab_len : 1);
    fl_dc_dataset_close(ds);
    if (rc != FL_OK)
        fl__dc_last_error_set(rc, "%s", fl__err_msg(&err));
    return rc;
}

fl_status fl_dc_dataset_from_memory(fl_dc_dataset **out, const float *x, size_t n, size_t dim,
                                    const int32_t *labels, int n_classes,
                                    const fl_allocator *alloc) {
    fl_allocator a;
    if (out)
        *out = NULL;
    if (!out || !x || !labels || n == 0 || dim == 0 || n_classes <= 0)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "NULL argument or zero size");
    if (fl__allocator_copy(&a, alloc) != FL_OK)
        return fl__dc_last_error_set(FL_ERR_MISUSE, "bad allocator struct");
    for (size_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= n_classes)
            return fl__dc_last_error_set(FL_ERR_MISUSE, "label %zu out of range", i);
    if (fl__mul_overflows(n, dim))
        return fl__dc_last_error_set(FL_ERR_MISUSE, "n * dim overflows");
    struct fl_dc_dataset *ds = fl__calloc(&a, 1, sizeof(*ds));
    if (!ds)
        return fl__dc_last_error_set(FL_ERR_NOMEM, "no memory for the data set");
    ds->alloc = a;
    ds->n = n;
    ds->dim = dim;
    ds->classes = n_classes;
    ds->x = fl__alloc_array(&a, n * dim, sizeof(float));
    ds->y = fl__alloc_array(&a, n, sizeof(int32_t));
    if (!ds->x || !ds->y) {
        fl_dc_dataset_close(ds);
        return fl__dc_last_error_set(FL_ERR_NOMEM, "no memory for %zu examples", n);
    }
    memcpy(ds->x, x, n * dim * sizeof(float));
    memcpy(ds->y, labels, n * sizeof(int32_t));
    *out = ds;
    return FL_OK;
}

size_t fl_dc_dataset_count(const fl_dc_dataset *ds) { return ds ? ds->n : 0; }
size_t fl_dc_dataset_dim(const fl_dc_dataset *ds) { return ds ? ds->dim : 0; }
int fl_dc_dataset_classes(const fl_dc_dataset *ds) { return ds ? ds->classes : 0; }

void fl_dc_dataset_close(fl_dc_dataset *ds) {
    if (!ds)
        return;
    fl_allocator a = ds->alloc;
    if (ds->x)
        fl__free(&a, ds->x, ds->n * ds->dim * sizeof(float));
    if (ds->y)
        fl__free(&a, ds->y, ds->n * sizeof(int32_t));
    fl__free(&a, ds, sizeof(*ds));
}
