/* Fault-injecting, power-loss-modelling SQLite VFS for the reliability tests: see
 * fault_vfs.h for what it does and the models it implements.
 *
 * Power-loss bookkeeping. Each tracked path has an entry; each file body an inode. An
 * inode holds `synced` (the bytes an fsync last made durable) and `pending` (writes and
 * truncations since, in order). An entry points at `now` (the inode its name refers to,
 * NULL if deleted) and `durable` (the inode the name refers to after a crash: what the
 * last directory fsync recorded). xSync folds an inode's pending list into synced; a
 * directory fsync sets durable = now for every entry in that directory. A cut writes each
 * entry's durable inode back to disk (or removes the name when durable is NULL). */
#include "fault_vfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FV_SECTOR 512

/* ---- bookkeeping types ---- */

enum fv_op_kind { FV_OP_WRITE, FV_OP_TRUNCATE };

struct fv_op {
    enum fv_op_kind kind; /* write or truncation */
    int64_t off;          /* write: offset; truncate: new size, bytes */
    size_t len;           /* write: bytes */
    uint8_t *data;        /* write: copy of what was written */
    struct fv_op *next;   /* next (later) op */
};

struct fv_inode {
    uint8_t *synced;    /* durable content */
    size_t synced_len;  /* bytes in synced */
    size_t synced_cap;  /* bytes allocated */
    struct fv_op *head; /* unsynced ops, oldest first */
    struct fv_op *tail; /* last unsynced op */
    int refs;           /* entries (now + durable) and open files pointing here */
};

struct fv_entry {
    char *path;               /* full path as SQLite names it */
    struct fv_inode *now;     /* inode the name refers to, NULL if deleted */
    struct fv_inode *durable; /* inode a crash would leave under the name, NULL = none */
    struct fv_entry *next;    /* list link */
};

/* Our sqlite3_file; the wrapped unix file follows it in the same allocation. */
struct fv_file {
    sqlite3_file base;      /* pMethods = fv_io */
    const char *name;       /* file name as SQLite gave it (NULL for temp files) */
    sqlite3_file *real;     /* the unix VFS's file, right after this struct */
    struct fv_inode *inode; /* tracked body, or NULL */
    struct fv_file *next;   /* open-file list (for the disk budget) */
    struct fv_file **prevp; /* link to this node */
};

static struct {
    sqlite3_vfs *orig;             /* the wrapped "unix" VFS */
    long io, writes, syncs, fired; /* counters since reset */
    long fail_write_at;            /* absolute write number to fail, 0 = off */
    long fail_sync_at;             /* absolute sync number to fail, 0 = off */
    int64_t budget;                /* bytes, -1 = unlimited */
    struct fv_file *open_files;    /* files open through the VFS */
    int tracking;                  /* power-loss bookkeeping on */
    struct fv_entry *entries;      /* tracked names */
    long cut_at;                   /* absolute I/O number of the cut, 0 = off */
    enum fault_vfs_model cut_model;
    uint64_t cut_seed;
    void (*on_cut)(void *);
    void *on_cut_user;
    sqlite3_syscall_ptr orig_open_dir; /* unix VFS's openDirectory, while hooked */
    long stat_dropped, stat_kept, stat_entries;
    long dir_syncs; /* directory fsyncs seen while tracking */
    int lying_sync; /* xSync claims success and persists nothing */
} fv = {.budget = -1};

static sqlite3_vfs fv_vfs;
static const sqlite3_io_methods fv_io;

/* ---- small helpers ---- */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "fault_vfs: out of memory\n");
        _exit(99);
    }
    return p;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void inode_unref(struct fv_inode *in) {
    if (!in || --in->refs > 0)
        return;
    struct fv_op *o = in->head;
    while (o) {
        struct fv_op *n = o->next;
        free(o->data);
        free(o);
        o = n;
    }
    free(in->synced);
    free(in);
}

static struct fv_inode *inode_new(void) {
    struct fv_inode *in = xmalloc(sizeof(*in));
    memset(in, 0, sizeof(*in));
    in->refs = 1;
    return in;
}

static void inode_set_len(struct fv_inode *in, size_t len) {
    if (len > in->synced_cap) {
        size_t cap = in->synced_cap ? in->synced_cap : 4096;
        while (cap < len)
            cap *= 2;
        uint8_t *p = xmalloc(cap);
        if (in->synced_len)
            memcpy(p, in->synced, in->synced_len);
        free(in->synced);
        in->synced = p;
        in->synced_cap = cap;
    }
    if (len > in->synced_len)
        memset(in->synced + in->synced_len, 0, len - in->synced_len);
    in->synced_len = len;
}

/* Applies one op to the synced image (used by xSync and by the torn replay). */
static void inode_apply(struct fv_inode *in, const struct fv_op *o) {
    if (o->kind == FV_OP_TRUNCATE) {
        inode_set_len(in, (size_t)o->off);
        return;
    }
    size_t end = (size_t)o->off + o->len;
    if (end > in->synced_len)
        inode_set_len(in, end);
    memcpy(in->synced + o->off, o->data, o->len);
}

static void inode_sync(struct fv_inode *in) {
    struct fv_op *o = in->head;
    while (o) {
        struct fv_op *n = o->next;
        inode_apply(in, o);
        free(o->data);
        free(o);
        o = n;
    }
    in->head = in->tail = NULL;
}

static void inode_push(struct fv_inode *in, enum fv_op_kind kind, int64_t off, const void *data,
                       size_t len) {
    struct fv_op *o = xmalloc(sizeof(*o));
    o->kind = kind;
    o->off = off;
    o->len = len;
    o->data = NULL;
    if (kind == FV_OP_WRITE) {
        o->data = xmalloc(len);
        memcpy(o->data, data, len);
    }
    o->next = NULL;
    if (in->tail)
        in->tail->next = o;
    else
        in->head = o;
    in->tail = o;
}

/* Reads the whole file at path into a fresh inode, or NULL if it does not exist. */
static struct fv_inode *inode_load(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat sb;
    struct fv_inode *in = inode_new();
    if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
        inode_set_len(in, (size_t)sb.st_size);
        size_t got = 0;
        while (got < in->synced_len) {
            ssize_t r = pread(fd, in->synced + got, in->synced_len - got, (off_t)got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        in->synced_len = got;
    }
    close(fd);
    return in;
}

static struct fv_entry *entry_find(const char *path) {
    for (struct fv_entry *e = fv.entries; e; e = e->next)
        if (strcmp(e->path, path) == 0)
            return e;
    return NULL;
}

/* The entry for path, created on first sight from what is on disk (durable by then). */
static struct fv_entry *entry_get(const char *path) {
    struct fv_entry *e = entry_find(path);
    if (e)
        return e;
    e = xmalloc(sizeof(*e));
    size_t n = strlen(path);
    e->path = xmalloc(n + 1);
    memcpy(e->path, path, n + 1);
    e->now = inode_load(path);
    e->durable = e->now;
    if (e->durable)
        e->durable->refs++;
    e->next = fv.entries;
    fv.entries = e;
    return e;
}

/* Length of the directory part of path (up to the last '/'; 0 if none). */
static size_t dir_len(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? (size_t)(s - path) : 0;
}

/* A directory fsync of the directory holding file_path: every name in it is durable. */
static void dir_synced(const char *file_path) {
    size_t dl = dir_len(file_path);
    for (struct fv_entry *e = fv.entries; e; e = e->next) {
        if (dir_len(e->path) != dl || strncmp(e->path, file_path, dl) != 0)
            continue;
        if (e->durable == e->now)
            continue;
        inode_unref(e->durable);
        e->durable = e->now;
        if (e->durable)
            e->durable->refs++;
    }
}

/* Hook for the unix VFS's openDirectory system call: it opens a directory only to fsync
 * it (after a journal or WAL is first synced, and on a delete with dirSync set). */
static int hook_open_directory(const char *path, int *fd) {
    int (*orig)(const char *, int *) = (int (*)(const char *, int *))fv.orig_open_dir;
    int rc = orig(path, fd);
    if (rc == SQLITE_OK && fv.tracking && !fv.lying_sync) {
        fv.dir_syncs++;
        dir_synced(path);
    }
    return rc;
}

/* ---- power cut ---- */

/* Writes content back to path (create, size, bytes); 0 or -1. */
static int write_back(const char *path, const uint8_t *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int rc = ftruncate(fd, (off_t)len) == 0 ? 0 : -1;
    size_t done = 0;
    while (rc == 0 && done < len) {
        ssize_t w = pwrite(fd, data + done, len - done, (off_t)done);
        if (w <= 0)
            rc = -1;
        else
            done += (size_t)w;
    }
    close(fd);
    return rc;
}

static long count_ops(const struct fv_inode *in) {
    long n = 0;
    for (const struct fv_op *o = in ? in->head : NULL; o; o = o->next)
        n += o->kind == FV_OP_WRITE;
    return n;
}

/* What the disk holds for inode in after a crash under model: its synced image, plus (torn
 * model) a random subset of its unsynced sectors and truncations replayed in order. The
 * result is left in a scratch inode the caller frees. */
static struct fv_inode *crash_image(struct fv_inode *in, enum fault_vfs_model model,
                                    uint64_t *rng) {
    struct fv_inode *img = inode_new();
    inode_set_len(img, in->synced_len);
    if (in->synced_len)
        memcpy(img->synced, in->synced, in->synced_len);
    fv.stat_dropped += count_ops(in);
    if (model != FAULT_VFS_TORN)
        return img;
    for (const struct fv_op *o = in->head; o; o = o->next) {
        if (o->kind == FV_OP_TRUNCATE) {
            if (rng_next(rng) & 1)
                inode_apply(img, o);
            continue;
        }
        /* Split at sector boundaries of the file, keep each piece with probability 1/2. */
        int64_t pos = o->off, end = o->off + (int64_t)o->len;
        while (pos < end) {
            int64_t stop = (pos / FV_SECTOR + 1) * FV_SECTOR;
            if (stop > end)
                stop = end;
            if (rng_next(rng) & 1) {
                struct fv_op piece = {FV_OP_WRITE, pos, (size_t)(stop - pos),
                                      o->data + (pos - o->off), NULL};
                inode_apply(img, &piece);
                fv.stat_kept++;
            }
            pos = stop;
        }
    }
    return img;
}

int fault_vfs_power_cut(enum fault_vfs_model model, uint64_t seed) {
    uint64_t rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    int rc = 0;
    fv.stat_dropped = fv.stat_kept = fv.stat_entries = 0;
    for (struct fv_entry *e = fv.entries; e; e = e->next) {
        struct fv_inode *pick = e->durable;
        if (e->durable != e->now) {
            fv.stat_entries++;
            if (model == FAULT_VFS_TORN && (rng_next(&rng) & 1))
                pick = e->now; /* this directory change reached the disk after all */
        }
        if (!pick) {
            if (unlink(e->path) != 0 && errno != ENOENT)
                rc = -1;
            continue;
        }
        struct fv_inode *img = crash_image(pick, model, &rng);
        if (write_back(e->path, img->synced, img->synced_len) != 0)
            rc = -1;
        inode_unref(img);
    }
    return rc;
}

void fault_vfs_last_cut_stats(long *writes_dropped, long *sectors_kept, long *entries_reverted) {
    if (writes_dropped)
        *writes_dropped = fv.stat_dropped;
    if (sectors_kept)
        *sectors_kept = fv.stat_kept;
    if (entries_reverted)
        *entries_reverted = fv.stat_entries;
}

/* Counts one I/O call; runs the armed cut when it is this one. */
static void io_event(const char *what, const char *name, int64_t off, int64_t n) {
    fv.io++;
    if (getenv("FAULT_VFS_TRACE"))
        fprintf(stderr, "fault_vfs: #%ld %s %s off %lld n %lld\n", fv.io, what,
                name ? name : "(temp)", (long long)off, (long long)n);
    if (fv.cut_at > 0 && fv.io == fv.cut_at) {
        fv.cut_at = 0;
        int rc = fault_vfs_power_cut(fv.cut_model, fv.cut_seed);
        if (rc != 0) {
            fprintf(stderr, "fault_vfs: reverting files after the cut failed: %s\n",
                    strerror(errno));
            _exit(98);
        }
        if (fv.on_cut)
            fv.on_cut(fv.on_cut_user);
        _exit(97); /* a cut handler must not return into SQLite */
    }
}

/* ---- io methods ---- */

static int fv_close(sqlite3_file *f) {
    struct fv_file *p = (struct fv_file *)f;
    int rc = p->real->pMethods ? p->real->pMethods->xClose(p->real) : SQLITE_OK;
    if (p->prevp) {
        *p->prevp = p->next;
        if (p->next)
            p->next->prevp = p->prevp;
        p->prevp = NULL;
    }
    inode_unref(p->inode);
    p->inode = NULL;
    return rc;
}

static int fv_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xRead(p->real, buf, n, off);
}

int64_t fault_vfs_usage(void) {
    int64_t total = 0;
    for (struct fv_file *p = fv.open_files; p; p = p->next) {
        sqlite3_int64 sz = 0;
        if (p->real->pMethods && p->real->pMethods->xFileSize(p->real, &sz) == SQLITE_OK)
            total += sz;
    }
    return total;
}

static int fv_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
    struct fv_file *p = (struct fv_file *)f;
    io_event("write", p->name, off, n);
    fv.writes++;
    if (fv.fail_write_at > 0 && fv.writes == fv.fail_write_at) {
        fv.fail_write_at = 0;
        fv.fired++;
        return SQLITE_IOERR_WRITE;
    }
    if (fv.budget >= 0) {
        sqlite3_int64 sz = 0;
        if (p->real->pMethods->xFileSize(p->real, &sz) != SQLITE_OK)
            return SQLITE_IOERR_FSTAT;
        int64_t grow = off + n > sz ? off + n - sz : 0;
        if (grow > 0 && fault_vfs_usage() + grow > fv.budget) {
            fv.fired++;
            return SQLITE_FULL;
        }
    }
    int rc = p->real->pMethods->xWrite(p->real, buf, n, off);
    if (rc == SQLITE_OK && p->inode && fv.tracking)
        inode_push(p->inode, FV_OP_WRITE, off, buf, (size_t)n);
    return rc;
}

static int fv_truncate(sqlite3_file *f, sqlite3_int64 size) {
    struct fv_file *p = (struct fv_file *)f;
    io_event("truncate", p->name, size, 0);
    int rc = p->real->pMethods->xTruncate(p->real, size);
    if (rc == SQLITE_OK && p->inode && fv.tracking)
        inode_push(p->inode, FV_OP_TRUNCATE, size, NULL, 0);
    return rc;
}

static int fv_sync(sqlite3_file *f, int flags) {
    struct fv_file *p = (struct fv_file *)f;
    io_event("sync", p->name, flags, 0);
    fv.syncs++;
    if (fv.fail_sync_at > 0 && fv.syncs == fv.fail_sync_at) {
        fv.fail_sync_at = 0;
        fv.fired++;
        return SQLITE_IOERR_FSYNC;
    }
    if (fv.lying_sync)
        return SQLITE_OK; /* a disk that acknowledges flushes it never does */
    int rc = p->real->pMethods->xSync(p->real, flags);
    if (rc == SQLITE_OK && p->inode && fv.tracking)
        inode_sync(p->inode);
    return rc;
}

static int fv_file_size(sqlite3_file *f, sqlite3_int64 *size) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xFileSize(p->real, size);
}

static int fv_lock(sqlite3_file *f, int level) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xLock(p->real, level);
}

static int fv_unlock(sqlite3_file *f, int level) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xUnlock(p->real, level);
}

static int fv_check_reserved(sqlite3_file *f, int *out) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int fv_file_control(sqlite3_file *f, int op, void *arg) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xFileControl(p->real, op, arg);
}

static int fv_sector_size(sqlite3_file *f) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xSectorSize(p->real);
}

static int fv_device_chars(sqlite3_file *f) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xDeviceCharacteristics(p->real);
}

static int fv_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xShmMap(p->real, pg, pgsz, extend, pp);
}

static int fv_shm_lock(sqlite3_file *f, int off, int n, int flags) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xShmLock(p->real, off, n, flags);
}

static void fv_shm_barrier(sqlite3_file *f) {
    struct fv_file *p = (struct fv_file *)f;
    p->real->pMethods->xShmBarrier(p->real);
}

static int fv_shm_unmap(sqlite3_file *f, int del) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xShmUnmap(p->real, del);
}

static int fv_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xFetch(p->real, off, n, pp);
}

static int fv_unfetch(sqlite3_file *f, sqlite3_int64 off, void *ptr) {
    struct fv_file *p = (struct fv_file *)f;
    return p->real->pMethods->xUnfetch(p->real, off, ptr);
}

static const sqlite3_io_methods fv_io = {
    3,
    fv_close,
    fv_read,
    fv_write,
    fv_truncate,
    fv_sync,
    fv_file_size,
    fv_lock,
    fv_unlock,
    fv_check_reserved,
    fv_file_control,
    fv_sector_size,
    fv_device_chars,
    fv_shm_map,
    fv_shm_lock,
    fv_shm_barrier,
    fv_shm_unmap,
    fv_fetch,
    fv_unfetch,
};

/* ---- vfs methods ---- */

static int tracked_type(int flags) {
    return (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL |
                     SQLITE_OPEN_SUPER_JOURNAL)) != 0;
}

static int fv_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags,
                   int *out_flags) {
    (void)vfs;
    struct fv_file *p = (struct fv_file *)f;
    memset(p, 0, sizeof(*p));
    p->real = (sqlite3_file *)(p + 1);
    p->name = name;
    struct fv_entry *e = NULL;
    if (fv.tracking && name && tracked_type(flags))
        e = entry_get(name);
    int rc = fv.orig->xOpen(fv.orig, name, p->real, flags, out_flags);
    if (p->real->pMethods == NULL)
        return rc; /* nothing to close */
    p->base.pMethods = &fv_io;
    p->next = fv.open_files;
    if (fv.open_files)
        fv.open_files->prevp = &p->next;
    p->prevp = &fv.open_files;
    fv.open_files = p;
    if (rc == SQLITE_OK && e) {
        if (!e->now)
            e->now = inode_new(); /* created (durable only after a directory fsync) */
        p->inode = e->now;
        p->inode->refs++;
    }
    return rc;
}

static int fv_delete(sqlite3_vfs *vfs, const char *path, int dir_sync) {
    (void)vfs;
    io_event("delete", path, dir_sync, 0);
    struct fv_entry *e = fv.tracking ? entry_get(path) : NULL;
    struct fv_inode *was = e ? e->now : NULL;
    if (e)
        e->now = NULL; /* before the call: a dirSync inside it records the deletion */
    int rc = fv.orig->xDelete(fv.orig, path, dir_sync);
    if (e) {
        if (rc == SQLITE_OK || rc == SQLITE_IOERR_DELETE_NOENT)
            inode_unref(was);
        else
            e->now = was;
    }
    return rc;
}

static int fv_access(sqlite3_vfs *vfs, const char *path, int flags, int *out) {
    (void)vfs;
    return fv.orig->xAccess(fv.orig, path, flags, out);
}

static int fv_full_pathname(sqlite3_vfs *vfs, const char *path, int n, char *out) {
    (void)vfs;
    return fv.orig->xFullPathname(fv.orig, path, n, out);
}

static void *fv_dlopen(sqlite3_vfs *vfs, const char *path) {
    (void)vfs;
    return fv.orig->xDlOpen(fv.orig, path);
}

static void fv_dlerror(sqlite3_vfs *vfs, int n, char *msg) {
    (void)vfs;
    fv.orig->xDlError(fv.orig, n, msg);
}

static void (*fv_dlsym(sqlite3_vfs *vfs, void *h, const char *sym))(void) {
    (void)vfs;
    return fv.orig->xDlSym(fv.orig, h, sym);
}

static void fv_dlclose(sqlite3_vfs *vfs, void *h) {
    (void)vfs;
    fv.orig->xDlClose(fv.orig, h);
}

static int fv_randomness(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return fv.orig->xRandomness(fv.orig, n, out);
}

static int fv_sleep(sqlite3_vfs *vfs, int us) {
    (void)vfs;
    return fv.orig->xSleep(fv.orig, us);
}

static int fv_current_time(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    return fv.orig->xCurrentTime(fv.orig, out);
}

static int fv_last_error(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return fv.orig->xGetLastError(fv.orig, n, out);
}

static int fv_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    (void)vfs;
    return fv.orig->xCurrentTimeInt64(fv.orig, out);
}

/* ---- public ---- */

int fault_vfs_register(void) {
    if (fv.orig)
        return SQLITE_OK;
    int rc = sqlite3_initialize();
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_vfs *u = sqlite3_vfs_find("unix");
    if (!u || u->iVersion < 2)
        return SQLITE_ERROR;
    fv.orig = u;
    memset(&fv_vfs, 0, sizeof(fv_vfs));
    fv_vfs.iVersion = 2;
    /* Room for our struct, then the unix file (struct fv_file is pointer-aligned). */
    fv_vfs.szOsFile = (int)sizeof(struct fv_file) + u->szOsFile;
    fv_vfs.mxPathname = u->mxPathname;
    fv_vfs.zName = FAULT_VFS_NAME;
    fv_vfs.xOpen = fv_open;
    fv_vfs.xDelete = fv_delete;
    fv_vfs.xAccess = fv_access;
    fv_vfs.xFullPathname = fv_full_pathname;
    fv_vfs.xDlOpen = fv_dlopen;
    fv_vfs.xDlError = fv_dlerror;
    fv_vfs.xDlSym = fv_dlsym;
    fv_vfs.xDlClose = fv_dlclose;
    fv_vfs.xRandomness = fv_randomness;
    fv_vfs.xSleep = fv_sleep;
    fv_vfs.xCurrentTime = fv_current_time;
    fv_vfs.xGetLastError = fv_last_error;
    fv_vfs.xCurrentTimeInt64 = fv_current_time64;
    return sqlite3_vfs_register(&fv_vfs, 0);
}

int fault_vfs_uri_supported(void) {
    return sqlite3_compileoption_used("USE_URI");
}

const char *fault_vfs_uri(char *buf, size_t cap, const char *path) {
    snprintf(buf, cap, "file:%s?vfs=" FAULT_VFS_NAME, path);
    return buf;
}

static void unhook_dir_sync(void) {
    if (fv.orig_open_dir) {
        fv.orig->xSetSystemCall(fv.orig, "openDirectory", fv.orig_open_dir);
        fv.orig_open_dir = NULL;
    }
}

void fault_vfs_reset(void) {
    unhook_dir_sync();
    fv.io = fv.writes = fv.syncs = fv.fired = fv.dir_syncs = 0;
    fv.lying_sync = 0;
    fv.fail_write_at = fv.fail_sync_at = 0;
    fv.budget = -1;
    fv.cut_at = 0;
    fv.on_cut = NULL;
    fv.tracking = 0;
    for (struct fv_file *p = fv.open_files; p; p = p->next) {
        inode_unref(p->inode);
        p->inode = NULL;
    }
    struct fv_entry *e = fv.entries;
    while (e) {
        struct fv_entry *n = e->next;
        inode_unref(e->now);
        inode_unref(e->durable);
        free(e->path);
        free(e);
        e = n;
    }
    fv.entries = NULL;
}

long fault_vfs_io_count(void) {
    return fv.io;
}
long fault_vfs_write_count(void) {
    return fv.writes;
}
long fault_vfs_sync_count(void) {
    return fv.syncs;
}
long fault_vfs_dir_sync_count(void) {
    return fv.dir_syncs;
}
void fault_vfs_set_lying_sync(int on) {
    fv.lying_sync = on;
}
long fault_vfs_fired(void) {
    return fv.fired;
}

void fault_vfs_fail_write_at(long n) {
    fv.fail_write_at = n > 0 ? fv.writes + n : 0;
}

void fault_vfs_fail_sync_at(long n) {
    fv.fail_sync_at = n > 0 ? fv.syncs + n : 0;
}

void fault_vfs_set_budget(int64_t bytes) {
    fv.budget = bytes;
}

int fault_vfs_track(void) {
    if (!fv.orig)
        return SQLITE_MISUSE;
    if (!fv.orig_open_dir) {
        sqlite3_syscall_ptr cur = fv.orig->iVersion >= 3 && fv.orig->xGetSystemCall
                                      ? fv.orig->xGetSystemCall(fv.orig, "openDirectory")
                                      : NULL;
        if (!cur)
            return SQLITE_NOTFOUND; /* cannot see directory fsyncs: refuse to guess */
        if (fv.orig->xSetSystemCall(fv.orig, "openDirectory",
                                    (sqlite3_syscall_ptr)hook_open_directory) != SQLITE_OK)
            return SQLITE_ERROR;
        fv.orig_open_dir = cur;
    }
    fv.tracking = 1;
    return SQLITE_OK;
}

void fault_vfs_cut_at(long k, enum fault_vfs_model model, uint64_t seed, void (*on_cut)(void *),
                      void *user) {
    fv.cut_at = k > 0 ? fv.io + k : 0;
    fv.cut_model = model;
    fv.cut_seed = seed;
    fv.on_cut = on_cut;
    fv.on_cut_user = user;
}
