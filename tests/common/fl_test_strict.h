#ifndef FL_TEST_STRICT_H
#define FL_TEST_STRICT_H
/* A strict allocator for the tests: counts calls, fails the fail_at-th allocation (0 =
 * never), and counts frees given another size than the one allocated (bad_frees), except
 * a size of `any_size` when that is non-zero (e.g. 1 for the datacenter CPU backend's device
 * buffers, documented to be freed with size 0 and given to the hook as 1). */
#include <stdlib.h>
#include <string.h>

#include "flotilla/common.h"

struct fl_test_strict {
    long calls, fail_at, live, reallocs, bad_frees;
    size_t any_size;
};

static inline void *fl_test_strict_alloc(void *u, size_t n) {
    struct fl_test_strict *s = u;
    s->calls++;
    if (s->fail_at > 0 && s->calls == s->fail_at)
        return NULL;
    size_t *p = malloc(n + 2 * sizeof(size_t));
    if (!p)
        return NULL;
    p[0] = n;
    s->live++;
    return p + 2;
}

static inline void fl_test_strict_free(void *u, void *ptr, size_t n) {
    struct fl_test_strict *s = u;
    if (!ptr)
        return;
    size_t *p = (size_t *)ptr - 2;
    if (p[0] != n && !(s->any_size && n == s->any_size))
        s->bad_frees++;
    s->live--;
    free(p);
}

static inline void *fl_test_strict_realloc(void *u, void *ptr, size_t old, size_t n) {
    struct fl_test_strict *s = u;
    s->reallocs++;
    void *q = fl_test_strict_alloc(u, n);
    if (!q)
        return NULL;
    if (ptr) {
        memcpy(q, ptr, old < n ? old : n);
        fl_test_strict_free(u, ptr, old);
    }
    return q;
}

static inline fl_allocator fl_test_strict_allocator(struct fl_test_strict *s,
                                                    int with_realloc) {
    fl_allocator a = {sizeof(fl_allocator), fl_test_strict_alloc,
                      with_realloc ? fl_test_strict_realloc : NULL, fl_test_strict_free, s};
    return a;
}

#endif
