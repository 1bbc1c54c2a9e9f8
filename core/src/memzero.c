#include <string.h>

#include "flotilla/common.h"

/* A volatile function pointer stops the compiler from proving the store dead. */
static void *(*const volatile fl_memset_v)(void *, int, size_t) = memset;

void fl_memzero(void *p, size_t len) {
    if (p && len)
        fl_memset_v(p, 0, len);
}

int fl_memeq_ct(const void *a, const void *b, size_t len) {
    const volatile unsigned char *x = a;
    const volatile unsigned char *y = b;
    unsigned char d = 0;
    for (size_t i = 0; i < len; i++)
        d |= (unsigned char)(x[i] ^ y[i]);
    /* Map 0 -> 0, nonzero -> -1 without a data-dependent branch. */
    return (int)((1 & ((unsigned)(d - 1) >> 8)) - 1);
}
