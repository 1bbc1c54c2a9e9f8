#ifndef FLOTILLA_COMMON_H
#define FLOTILLA_COMMON_H

/* Flotilla core: status codes, allocator hooks, logging, versioning, secret wiping.
 * Every other component's public header includes this one. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FL_BUILDING_LIBRARY)
#define FL_API __attribute__((visibility("default")))
#else
#define FL_API
#endif

/* ---- status codes ----
 * Stable values: codes only grow; a retired code stays reserved. */
typedef enum fl_status {
    FL_OK = 0,
    FL_ERR_NOMEM = 1,       /* an allocation failed */
    FL_ERR_MISUSE = 2,      /* bad argument or call out of order by the caller */
    FL_ERR_FORMAT = 3,      /* malformed input (file, message, config) */
    FL_ERR_IO = 4,          /* read/write/fsync or database I/O failed */
    FL_ERR_AGAIN = 5,       /* would block; call again */
    FL_ERR_CANCELLED = 6,   /* interrupted by the caller */
    FL_ERR_NOT_FOUND = 7,   /* no such object */
    FL_ERR_EXISTS = 8,      /* object exists and is immutable */
    FL_ERR_CRYPTO = 9,      /* authentication, signature or key agreement failed */
    FL_ERR_STATE = 10,      /* message or call not valid in the current phase/state */
    FL_ERR_RANGE = 11,      /* value outside the allowed range (overflow, wrap) */
    FL_ERR_BUDGET = 12,     /* privacy budget would be exceeded */
    FL_ERR_ABORTED = 13,    /* protocol aborted (e.g. too few survivors); sticky */
    FL_ERR_PROTOCOL = 14,   /* peer violated the protocol */
    FL_ERR_AUTH = 15,       /* missing or wrong credentials */
    FL_ERR_TOO_LARGE = 16,  /* input exceeds a configured size limit */
    FL_ERR_UNSUPPORTED = 17,/* feature not built in or not supported */
    FL_ERR_TIMEOUT = 18,    /* a deadline passed */
    FL_ERR_BUSY = 19,       /* resource busy (e.g. database locked) */
    FL_ERR_CORRUPT = 20,    /* stored data failed an integrity check */
    FL_ERR_INTERNAL = 21    /* internal invariant broken (a bug) */
} fl_status;

#define FL_STATUS_COUNT 22

/* Static, never-NULL English description of a status code ("unknown status" for
 * codes outside the table). Thread-safe. */
FL_API const char *fl_status_str(fl_status code);

/* Short symbolic name, e.g. "FL_ERR_FORMAT". Thread-safe. */
FL_API const char *fl_status_name(fl_status code);

/* ---- allocator hooks ----
 * Passed per instance at creation (NULL = libc). realloc may be NULL, in which case
 * alloc+copy+free is used. struct_size must be sizeof(fl_allocator). */
typedef struct fl_allocator {
    size_t struct_size;                               /* sizeof(fl_allocator) */
    void *(*alloc)(void *user, size_t size);          /* like malloc */
    void *(*realloc)(void *user, void *ptr, size_t old_size, size_t new_size); /* optional */
    void (*free)(void *user, void *ptr, size_t size); /* like free; size is what was asked */
    void *user;                                       /* passed to every hook */
} fl_allocator;

/* ---- logging ----
 * Off by default: libraries never write to stdout/stderr. */
typedef enum fl_log_level {
    FL_LOG_DEBUG = 0,
    FL_LOG_INFO = 1,
    FL_LOG_WARN = 2,
    FL_LOG_ERROR = 3
} fl_log_level;

typedef void (*fl_log_fn)(void *user, fl_log_level level, const char *msg);

typedef struct fl_logger {
    fl_log_fn fn;           /* NULL = logging off */
    void *user;             /* passed to fn */
    fl_log_level min_level; /* messages below this level are dropped */
} fl_logger;

/* ---- version and build features ---- */

/* FL_VERSION_NUMBER of the library actually loaded. */
FL_API int fl_version_number(void);
/* "M.m.p" of the loaded library. */
FL_API const char *fl_version_string(void);
/* 1 if the build has the named feature ("cuda", "mbedtls", "openblas", "mpi"), else 0. */
FL_API int fl_build_has(const char *feature);

/* ---- secrets ----
 * Wipes len bytes at p in a way the compiler cannot elide. NULL/0 is a no-op. */
FL_API void fl_memzero(void *p, size_t len);

/* Constant-time comparison of two len-byte buffers: 0 if equal, -1 otherwise. */
FL_API int fl_memeq_ct(const void *a, const void *b, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_COMMON_H */
