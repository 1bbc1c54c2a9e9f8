#ifndef FL_TEST_H
#define FL_TEST_H
/* Shared test helpers: cmocka includes and a counting/failing allocator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "flotilla/common.h"

/* Counts allocations and live bytes; fails the fail_at-th allocation (1-based) when
 * fail_at > 0, so OOM walks can hit every allocation point. */
struct fl_test_counting {
    long allocs, frees, live, fail_at, calls;
    size_t live_bytes, peak_bytes;
};

static inline void *fl_test_count_alloc(void *u, size_t n) {
    struct fl_test_counting *c = u;
    c->calls++;
    if (c->fail_at > 0 && c->calls == c->fail_at)
        return NULL;
    size_t *p = malloc(n + sizeof(size_t) * 2);
    if (!p)
        return NULL;
    p[0] = n;
    c->allocs++;
    c->live++;
    c->live_bytes += n;
    if (c->live_bytes > c->peak_bytes)
        c->peak_bytes = c->live_bytes;
    return p + 2;
}

static inline void fl_test_count_free(void *u, void *ptr, size_t n) {
    struct fl_test_counting *c = u;
    (void)n;
    if (!ptr)
        return;
    size_t *p = (size_t *)ptr - 2;
    c->frees++;
    c->live--;
    c->live_bytes -= p[0];
    free(p);
}

static inline fl_allocator fl_test_counting_allocator(struct fl_test_counting *c) {
    fl_allocator a = {sizeof(fl_allocator), fl_test_count_alloc, NULL, fl_test_count_free, c};
    return a;
}

#endif
