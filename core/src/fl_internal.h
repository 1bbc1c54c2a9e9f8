#ifndef FLOTILLA_INTERNAL_H
#define FLOTILLA_INTERNAL_H

/* Cross-component internals (fl__ prefix). Never installed, never exported. */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#define FL__ERRMSG_MAX 256

/* Last error detail owned by a handle: code + message. */
struct fl__err {
    fl_status code;
    char msg[FL__ERRMSG_MAX];
};

/* Records code and a printf-style message into err (if non-NULL); returns code so
 * callers can write `return fl__err_set(&h->err, FL_ERR_FORMAT, "...")`. */
fl_status fl__err_set(struct fl__err *err, fl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void fl__err_clear(struct fl__err *err);
/* Message for a handle's errmsg(): the detail if one is set, else the status string. */
const char *fl__err_msg(const struct fl__err *err);

/* ---- allocation funnel ----
 * Every library allocation goes through these, with the instance's allocator (NULL =
 * libc). Sizes are passed to free so counting allocators can track bytes. */
void *fl__alloc(const fl_allocator *a, size_t size);
void *fl__calloc(const fl_allocator *a, size_t n, size_t size);   /* zeroed, overflow-checked */
void *fl__alloc_array(const fl_allocator *a, size_t n, size_t size); /* overflow-checked */
void *fl__realloc(const fl_allocator *a, void *p, size_t old_size, size_t new_size);
void fl__free(const fl_allocator *a, void *p, size_t size);
char *fl__strdup(const fl_allocator *a, const char *s);
/* 1 if n*size overflows size_t. */
int fl__mul_overflows(size_t n, size_t size);
/* Copies the caller's allocator (or libc defaults) into out; FL_ERR_MISUSE on a bad struct. */
fl_status fl__allocator_copy(fl_allocator *out, const fl_allocator *in);

/* ---- logging ---- */
void fl__log(const fl_logger *lg, fl_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- defensive checks ----
 * FL_ALWAYS/FL_NEVER evaluate to the condition; in debug builds a violated one asserts. */
#include <assert.h>
#ifdef NDEBUG
#define FL_ALWAYS(x) (x)
#define FL_NEVER(x) (x)
#else
#define FL_ALWAYS(x) ((x) ? 1 : (assert(0 && #x), 0))
#define FL_NEVER(x) ((x) ? (assert(0 && #x), 1) : 0)
#endif

/* ---- wider vector loops on CPUs that have them ----
 * FL__SIMD_CLONES on a hot loop's function compiles it for AVX-512, AVX2 and the baseline
 * x86-64 (SSE2) and picks one clone at load time from the CPU. GCC only: clang 14 makes the
 * ifunc resolver of a static function global with default visibility, so a shared library
 * would export "<name>.resolver" (the meta_exports tests); clang builds keep the baseline
 * loop, and -DFL_NO_SIMD_CLONES keeps it everywhere. So do ThreadSanitizer builds: TSan
 * instruments the resolver, which the dynamic linker runs before TSan is set up (a crash
 * at start-up). */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(FL_NO_SIMD_CLONES) &&  \
    !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define FL__SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef FL__SIMD_CLONES
#define FL__SIMD_CLONES
#endif

/* ---- little-endian helpers for wire formats ---- */
static inline void fl__put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t fl__get_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void fl__put_u64le(uint8_t *p, uint64_t v) {
    fl__put_u32le(p, (uint32_t)v); fl__put_u32le(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t fl__get_u64le(const uint8_t *p) {
    return (uint64_t)fl__get_u32le(p) | ((uint64_t)fl__get_u32le(p + 4) << 32);
}

#endif /* FLOTILLA_INTERNAL_H */
