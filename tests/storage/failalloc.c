/* Test-only allocation failure injector, loaded into a program with LD_PRELOAD.
 *
 * FL_FAILALLOC_N=n makes the n-th call (counted from 1) to malloc, calloc or realloc made
 * after the program's first sodium_init() (the first line of flotilla-audit's main) fail
 * with ENOMEM; every other call goes to libc.
 * When FL_FAILALLOC_MARK names a file, that file is created at the moment the failure is
 * injected, so a driver can tell "ran to the end without reaching call n" from "call n
 * failed and the program coped". Without FL_FAILALLOC_N nothing is failed.
 *
 * Calls made inside Jansson's json_loadb (interposed here too) are neither failed nor
 * counted: Jansson 2.14's lexer ignores a failed append to the text it has read and then
 * trips an assertion or overruns its buffer in lex_scan_string (load.c:442), a crash in the
 * library that no caller can prevent. Failures inside the rest of Jansson (dumps, objects,
 * arrays) are injected.
 *
 * The real functions are found with dlsym(RTLD_NEXT); dlsym itself may allocate, so calls
 * made while it runs are served from a small static arena (never freed: free() ignores
 * pointers into it). Single-threaded programs only (the counter is not atomic). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FA_EXPORT __attribute__((visibility("default")))

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);

static void *(*real_json_loadb)(const char *, size_t, size_t, void *);
static int in_loadb; /* inside json_loadb: nothing failed or counted */
static int (*real_sodium_init)(void);

static unsigned long fail_at; /* call number to fail, 0 = none */
static unsigned long calls;   /* calls counted since the constructor */
static int armed;             /* set by the constructor */
static const char *mark;      /* file to create when the failure is injected */

static _Alignas(max_align_t) unsigned char arena[4096];
static size_t arena_used;
static int resolving;

static void *arena_alloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof(arena) - arena_used)
        return NULL;
    void *p = arena + arena_used;
    arena_used += n;
    return p;
}

static int in_arena(const void *p) {
    return (const unsigned char *)p >= arena && (const unsigned char *)p < arena + sizeof(arena);
}

static void resolve(void) {
    if (real_malloc || resolving)
        return;
    resolving = 1;
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_sodium_init = (int (*)(void))dlsym(RTLD_NEXT, "sodium_init");
    real_json_loadb =
        (void *(*)(const char *, size_t, size_t, void *))dlsym(RTLD_NEXT, "json_loadb");
    resolving = 0;
}

/* 1 when this call is the one to fail. */
static int should_fail(void) {
    if (!armed || fail_at == 0 || in_loadb)
        return 0;
    if (++calls != fail_at)
        return 0;
    if (mark) {
        int fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0)
            close(fd);
    }
    errno = ENOMEM;
    return 1;
}

static void disarm(void) {
    armed = 0;
}

__attribute__((constructor)) static void failalloc_init(void) {
    resolve();
    const char *n = getenv("FL_FAILALLOC_N");
    mark = getenv("FL_FAILALLOC_MARK");
    fail_at = n ? strtoul(n, NULL, 10) : 0;
}

/* flotilla-audit's main starts with sodium_init(): counting starts there, and the exit
 * handler registered then runs before the program's destructors, where a coverage build
 * writes its counters (libgcov does not survive a failed allocation): injection stops at
 * exit. */
FA_EXPORT int sodium_init(void);
FA_EXPORT int sodium_init(void) {
    resolve();
    if (!armed) {
        atexit(disarm);
        armed = 1;
    }
    return real_sodium_init ? real_sodium_init() : -1;
}

FA_EXPORT void *malloc(size_t n) {
    resolve();
    if (!real_malloc)
        return arena_alloc(n);
    return should_fail() ? NULL : real_malloc(n);
}

FA_EXPORT void *calloc(size_t n, size_t size) {
    resolve();
    if (!real_calloc) {
        if (size && n > SIZE_MAX / size)
            return NULL;
        return arena_alloc(n * size); /* static storage: already zero */
    }
    return should_fail() ? NULL : real_calloc(n, size);
}

FA_EXPORT void *realloc(void *p, size_t n) {
    resolve();
    if (in_arena(p)) {
        void *q = malloc(n);
        if (q) {
            size_t left = (size_t)(arena + sizeof(arena) - (unsigned char *)p);
            memcpy(q, p, n < left ? n : left); /* may copy past the block, never the arena */
        }
        return q;
    }
    if (!real_realloc)
        return arena_alloc(n);
    return should_fail() ? NULL : real_realloc(p, n);
}

FA_EXPORT void free(void *p) {
    if (!p || in_arena(p))
        return;
    resolve();
    if (real_free)
        real_free(p);
}

/* Jansson's json_loadb (json_t *, json_error_t * as void * here), run with injection off. */
FA_EXPORT void *json_loadb(const char *buffer, size_t buflen, size_t flags, void *error);
FA_EXPORT void *json_loadb(const char *buffer, size_t buflen, size_t flags, void *error) {
    resolve();
    if (!real_json_loadb)
        return NULL;
    in_loadb++;
    void *v = real_json_loadb(buffer, buflen, flags, error);
    in_loadb--;
    return v;
}
