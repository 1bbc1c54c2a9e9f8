/* Checkpoint retention: removes the step directories older than the one `latest` names,
 * all but the newest keep - 1 of them (ckpt.c has the layout). A directory that `latest`
 * does not name is never read by a resume, so a crash in the middle of a removal leaves
 * nothing a resume could trip on, and the next prune finishes the job. Step directories
 * newer than `latest` (a save that died before `latest` moved) are left alone: a later
 * save of that step reuses them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flotilla/datacenter.h"

static fl_status say(char *msg, size_t len, fl_status rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fl_status say(char *msg, size_t len, fl_status rc, const char *fmt, ...) {
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* "step-<digits>" (at most 19 digits, as written by %08 PRIu64) -> *step; else 0. */
static int parse_step(const char *name, uint64_t *step) {
    if (strncmp(name, "step-", 5) != 0)
        return 0;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n < 8 || n > 19 || strspn(d, "0123456789") != n)
        return 0;
    *step = strtoull(d, NULL, 10);
    return 1;
}

static int cmp_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Removes the regular files of dir/name, then the directory. 0, or an errno value (the
 * first failure; ENOTEMPTY when it holds something that is not a file: left in place). */
static int remove_step(int dfd, const char *name) {
    int sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (sfd < 0)
        return errno;
    DIR *d = fdopendir(sfd);
    if (!d) {
        int e = errno;
        close(sfd);
        return e;
    }
    int err = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        int bad = 0;
        if (fstatat(sfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            bad = errno;
        else if (!S_ISREG(st.st_mode))
            bad = ENOTEMPTY;
        else if (unlinkat(sfd, e->d_name, 0) != 0)
            bad = errno;
        if (bad && !err)
            err = bad;
    }
    closedir(d);
    if (!err && unlinkat(dfd, name, AT_REMOVEDIR) != 0)
        err = errno;
    return err;
}

fl_status fl_dc_checkpoint_prune(const char *dir, unsigned keep, unsigned *removed, char *errmsg,
                                 size_t errmsg_len) {
    if (removed)
        *removed = 0;
    if (errmsg && errmsg_len)
        errmsg[0] = '\0';
    if (!dir || keep == 0)
        return say(errmsg, errmsg_len, FL_ERR_MISUSE, "%s",
                   !dir ? "dir is NULL" : "keep must be at least 1 (the latest checkpoint)");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        return say(errmsg, errmsg_len, errno == ENOENT ? FL_ERR_NOT_FOUND : FL_ERR_IO,
                   "cannot open %s: %s", dir, strerror(errno));
    char name[64] = "";
    uint64_t latest = 0;
    int lfd = openat(dfd, "latest", O_RDONLY);
    if (lfd < 0) {
        close(dfd);
        return say(errmsg, errmsg_len, FL_ERR_NOT_FOUND, "no checkpoint in %s", dir);
    }
    ssize_t got = read(lfd, name, sizeof(name) - 1);
    close(lfd);
    name[got > 0 ? got : 0] = '\0';
    name[strcspn(name, "\r\n")] = '\0';
    if (!parse_step(name, &latest)) {
        close(dfd);
        return say(errmsg, errmsg_len, FL_ERR_CORRUPT, "%s/latest names no step directory", dir);
    }
    /* The older step directories, newest first. */
    DIR *d = fdopendir(dup(dfd));
    if (!d) {
        close(dfd);
        return say(errmsg, errmsg_len, FL_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    }
    uint64_t *old = NULL;
    size_t n = 0, cap = 0;
    fl_status rc = FL_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint64_t s;
        struct stat st;
        if (!parse_step(e->d_name, &s) || s >= latest ||
            fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            uint64_t *g = realloc(old, nc * sizeof(*old));
            if (!g) {
                rc = say(errmsg, errmsg_len, FL_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            old = g;
            cap = nc;
        }
        old[n++] = s;
    }
    closedir(d);
    if (rc == FL_OK) {
        if (n > 1)
            qsort(old, n, sizeof(*old), cmp_desc);
        for (size_t i = keep - 1; i < n; i++) {
            char sn[32];
            snprintf(sn, sizeof(sn), "step-%08" PRIu64, old[i]);
            int err = remove_step(dfd, sn);
            if (err == 0) {
                if (removed)
                    (*removed)++;
            } else if (rc == FL_OK) {
                /* Go on with the others; report the first that stayed. */
                rc = say(errmsg, errmsg_len, FL_ERR_IO, "cannot remove %s/%s: %s", dir, sn,
                         strerror(err));
            }
        }
        if (fsync(dfd) != 0 && rc == FL_OK)
            rc = say(errmsg, errmsg_len, FL_ERR_IO, "cannot fsync %s: %s", dir, strerror(errno));
    }
    free(old);
    close(dfd);
    return rc;
}
