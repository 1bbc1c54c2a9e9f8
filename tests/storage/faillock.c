/* Test-only lock failure injector for SQLite's WAL index, loaded with LD_PRELOAD.
 *
 * FL_FAILLOCK_N=n makes the n-th write-lock request (counted from 1) on a file whose name
 * ends in "-shm", and every one after it, fail with EAGAIN, as if another process held the
 * lock. A write-lock request is fcntl(fd, F_SETLK / F_SETLKW / F_OFD_SETLK / F_OFD_SETLKW)
 * with l_type F_WRLCK. SQLite's unix VFS takes every WAL-index lock that way (the write
 * lock of BEGIN IMMEDIATE, the checkpoint and recovery locks, an exclusive read mark, the
 * dead-man switch at open) and reads a failed one as SQLITE_BUSY. The failure is sticky so
 * that SQLite's busy handler, which retries, cannot get past it.
 *
 * Only "-shm" files are counted: a lock on the database file itself fails the switch to
 * WAL mode at open, which the store retries for its whole busy timeout by the clock, and
 * libgcov locks the .gcda files of a coverage build the same way when the program exits.
 *
 * Once a failure has been injected, usleep and nanosleep return at once: SQLite's busy
 * handler counts the delays it asked for, not the time that passed, so the default busy
 * timeout (5 s) runs out in milliseconds.
 *
 * When FL_FAILLOCK_MARK names a file, that file is created when the first failure is
 * injected, so a driver can tell "ran to the end without reaching request n" from "request
 * n failed". Without FL_FAILLOCK_N nothing is failed. Single-threaded programs only (the
 * counter is not atomic).
 *
 * fcntl is variadic: the third argument is forwarded as an int, a pointer or not at all,
 * by command, and unknown commands get it as a pointer-sized word (as glibc's own wrapper
 * reads it). Both fcntl and fcntl64 are interposed (Debian's libsqlite3 imports fcntl64;
 * on 64-bit glibc the two are the same function). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FK_EXPORT __attribute__((visibility("default")))

typedef int (*fcntl_fn)(int, int, ...);
static fcntl_fn real_fcntl, real_fcntl64;
static int (*real_usleep)(useconds_t);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);

static unsigned long fail_at; /* request number to fail first, 0 = none */
static unsigned long calls;   /* write-lock requests on -shm files so far */
static int failing;           /* a failure has been injected: every later one fails */
static const char *mark;      /* file to create when the first failure is injected */

static void resolve(void) {
    if (real_fcntl64)
        return;
    real_fcntl = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl");
    real_fcntl64 = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl64");
    if (!real_fcntl64)
        real_fcntl64 = real_fcntl;
    real_usleep = (int (*)(useconds_t))dlsym(RTLD_NEXT, "usleep");
    real_nanosleep =
        (int (*)(const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "nanosleep");
}

__attribute__((constructor)) static void faillock_init(void) {
    resolve();
    const char *n = getenv("FL_FAILLOCK_N");
    mark = getenv("FL_FAILLOCK_MARK");
    fail_at = n ? strtoul(n, NULL, 10) : 0;
}

/* 1 when fd is open on a file whose name ends in "-shm". */
static int is_shm(int fd) {
    char link[64], name[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, name, sizeof(name) - 1);
    if (n < 4)
        return 0;
    name[n] = '\0';
    return strcmp(name + n - 4, "-shm") == 0;
}

/* 1 when this lock request is to fail. */
static int should_fail(int fd, int cmd, const struct flock *fl) {
    if (fail_at == 0 || !fl || fl->l_type != F_WRLCK)
        return 0;
    if (cmd != F_SETLK && cmd != F_SETLKW && cmd != F_OFD_SETLK && cmd != F_OFD_SETLKW)
        return 0;
    if (!is_shm(fd))
        return 0;
    if (failing)
        return 1;
    if (++calls != fail_at)
        return 0;
    failing = 1;
    if (mark) {
        int mfd = open(mark, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (mfd >= 0)
            close(mfd);
    }
    return 1;
}

/* What the third argument of cmd is. */
enum arg_kind { ARG_NONE, ARG_INT, ARG_PTR };

static enum arg_kind arg_kind(int cmd) {
    switch (cmd) {
    case F_GETFD:
    case F_GETFL:
    case F_GETOWN:
    case F_GETSIG:
    case F_GETLEASE:
    case F_GETPIPE_SZ:
    case F_GET_SEALS:
        return ARG_NONE;
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
    case F_SETFD:
    case F_SETFL:
    case F_SETOWN:
    case F_SETSIG:
    case F_SETLEASE:
    case F_NOTIFY:
    case F_SETPIPE_SZ:
    case F_ADD_SEALS:
        return ARG_INT;
    default: /* the lock commands, F_[GS]ETOWN_EX, F_[GS]ET_*RW_HINT, and unknown ones */
        return ARG_PTR;
    }
}

static int forward(fcntl_fn real, int fd, int cmd, va_list ap) {
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    switch (arg_kind(cmd)) {
    case ARG_NONE:
        return real(fd, cmd);
    case ARG_INT:
        return real(fd, cmd, va_arg(ap, int));
    default: {
        void *p = va_arg(ap, void *);
        if (should_fail(fd, cmd, p)) {
            errno = EAGAIN;
            return -1;
        }
        return real(fd, cmd, p);
    }
    }
}

FK_EXPORT int fcntl(int fd, int cmd, ...) {
    resolve();
    va_list ap;
    va_start(ap, cmd);
    int r = forward(real_fcntl, fd, cmd, ap);
    va_end(ap);
    return r;
}

FK_EXPORT int fcntl64(int fd, int cmd, ...);
FK_EXPORT int fcntl64(int fd, int cmd, ...) {
    resolve();
    va_list ap;
    va_start(ap, cmd);
    int r = forward(real_fcntl64, fd, cmd, ap);
    va_end(ap);
    return r;
}

FK_EXPORT int usleep(useconds_t us) {
    resolve();
    if (failing)
        return 0;
    if (!real_usleep) {
        errno = ENOSYS;
        return -1;
    }
    return real_usleep(us);
}

FK_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem) {
    resolve();
    if (failing)
        return 0;
    if (!real_nanosleep) {
        errno = ENOSYS;
        return -1;
    }
    return real_nanosleep(req, rem);
}
