#include <stdlib.h>
#include <string.h>

#include "fl_internal.h"

int fl__mul_overflows(size_t n, size_t size) {
    return size != 0 && n > SIZE_MAX / size;
}

fl_status fl__allocator_copy(fl_allocator *out, const fl_allocator *in) {
    memset(out, 0, sizeof(*out));
    if (!in)
        return FL_OK;
    if (in->struct_size < sizeof(fl_allocator) || !in->alloc || !in->free)
        return FL_ERR_MISUSE;
    *out = *in;
    return FL_OK;
}

void *fl__alloc(const fl_allocator *a, size_t size) {
    if (size == 0)
        size = 1;
    if (a && a->alloc)
        return a->alloc(a->user, size);
    return malloc(size);
}

void *fl__alloc_array(const fl_allocator *a, size_t n, size_t size) {
    if (fl__mul_overflows(n, size))
        return NULL;
    return fl__alloc(a, n * size);
}

void *fl__calloc(const fl_allocator *a, size_t n, size_t size) {
    void *p = fl__alloc_array(a, n, size);
    if (p)
        memset(p, 0, (n * size) != 0 ? n * size : 1);
    return p;
}

void *fl__realloc(const fl_allocator *a, void *p, size_t old_size, size_t new_size) {
    if (new_size == 0)
        new_size = 1;
    if (!a || !a->alloc)
        return realloc(p, new_size);
    if (a->realloc)
        return a->realloc(a->user, p, old_size, new_size);
    void *q = a->alloc(a->user, new_size);
    if (!q)
        return NULL;
    if (p) {
        memcpy(q, p, old_size < new_size ? old_size : new_size);
        a->free(a->user, p, old_size);
    }
    return q;
}

void fl__free(const fl_allocator *a, void *p, size_t size) {
    if (!p)
        return;
    if (a && a->free)
        a->free(a->user, p, size ? size : 1);
    else
        free(p);
}

char *fl__strdup(const fl_allocator *a, const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = fl__alloc(a, n);
    if (d)
        memcpy(d, s, n);
    return d;
}
