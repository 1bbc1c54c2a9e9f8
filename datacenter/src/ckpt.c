/* Model files and sharded checkpoints, both safetensors (flotilla/tensor.h).
 *
 * Checkpoint layout:  <dir>/step-<NNNNNNNN>/rank-<RRRRR>.safetensors  one per world rank
 *                     <dir>/latest                                    "step-<NNNNNNNN>\n"
 * A shard holds this rank's parameter arena ("params"), its optimiser moments ("opt.m",
 * "opt.v": the full arena, or the ZeRO-1 shard) and, as metadata, the step, the data
 * position, the grid and the model description. Shards are written with the atomic
 * safetensors writer (temp file, fsync, rename); `latest` moves only after every rank
 * reported success, by the same temp-fsync-rename dance. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flotilla/tensor.h"
#include "trainer.h"

#define CKPT_PATH_MAX 4096

/* ---- helpers ---- */

/* "784-128-10" */
static void arch_string(const fl_dc_config *c, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i <= c->n_layers && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? "-%d" : "%d", c->sizes[i]);
}

static void grid_string(const struct fl_dc_trainer *tr, char *buf, size_t len) {
    snprintf(buf, len, "dp=%d,tp=%d,zero=%d,rank=%d", tr->cfg.dp, tr->cfg.tp,
             tr->cfg.zero_stage, tr->world->rank);
}

static const char *optim_name(fl_dc_optim o) { return o == FL_DC_OPTIM_ADAMW ? "adamw" : "sgd"; }

static fl_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return FL_ERR_IO;
    int r = fsync(fd);
    close(fd);
    return r == 0 ? FL_OK : FL_ERR_IO;
}

/* Writes text to path atomically: path.tmp, fsync, rename, fsync the directory. */
static fl_status write_atomic(struct fl_dc_trainer *tr, const char *dir, const char *path,
                              const char *text) {
    char tmp[CKPT_PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return fl__dc_fail(tr, FL_ERR_MISUSE, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return fl__dc_fail(tr, FL_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    int ok = w == (ssize_t)len && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return fl__dc_fail(tr, FL_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    if (fsync_dir(dir) != FL_OK)
        return fl__dc_fail(tr, FL_ERR_IO, "cannot fsync %s: %s", dir, strerror(errno));
    return FL_OK;
}

static fl_status mkdir_p1(struct fl_dc_trainer *tr, const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return fl__dc_fail(tr, FL_ERR_IO, "cannot create directory %s: %s", path,
                           strerror(errno));
    return FL_OK;
}

/* Makes the whole world agree on one status; on failure every rank's trainer carries a
 * message naming the first failing rank. The trainer is not marked failed by I/O errors
 * (training can go on after a failed checkpoint). */
static fl_status agree(struct fl_dc_trainer *tr, fl_status mine) {
    int bad = -1;
    fl_status rc = fl__dc_agree(tr->world, mine, &bad);
    if (rc != FL_OK && mine == FL_OK && bad >= 0) {
        tr->err.code = rc;
        snprintf(tr->err.msg, sizeof(tr->err.msg), "rank %d failed: %s", bad,
                 fl_status_str(rc));
    }
    if (rc != FL_OK && bad < 0) /* the agreement itself failed */
        return fl__dc_fail(tr, rc, "%s", fl__err_msg(&tr->world->err));
    if (rc == FL_ERR_IO || rc == FL_ERR_NOT_FOUND || rc == FL_ERR_FORMAT ||
        rc == FL_ERR_CORRUPT || rc == FL_ERR_NOMEM)
        tr->failed = false; /* recoverable */
    return rc;
}

/* Host copies of params and optimiser state. */
static fl_status pull_state(struct fl_dc_trainer *tr, float **p, float **m, float **v) {
    fl_status rc = FL_OK;
    *p = fl__alloc_array(&tr->alloc, tr->arena_len, sizeof(float));
    *m = fl__alloc_array(&tr->alloc, tr->state_len, sizeof(float));
    *v = fl__alloc_array(&tr->alloc, tr->state_len, sizeof(float));
    if (!*p || !*m || !*v)
        return fl__dc_fail(tr, FL_ERR_NOMEM, "no memory for the checkpoint");
    rc = fl__dc_sync(tr->dp_comm);
    if (rc == FL_OK)
        rc = fl__dc_sync(tr->tp_comm);
    if (rc != FL_OK)
        return fl__dc_fail(tr, rc, "%s", fl_dc_comm_errmsg(tr->dp_comm));
    const struct fl__dc_ops *o = tr->ops;
    if ((rc = o->d2h(tr->dev, *p, tr->params, tr->arena_len * sizeof(float))) != FL_OK ||
        (rc = o->d2h(tr->dev, *m, tr->opt_m, tr->state_len * sizeof(float))) != FL_OK ||
        (rc = o->d2h(tr->dev, *v, tr->opt_v, tr->state_len * sizeof(float))) != FL_OK)
        return fl__dc_fail(tr, rc, "%s backend: %s", o->name, fl__err_msg(&tr->dev->err));
    return FL_OK;
}

static void free_state(struct fl_dc_trainer *tr, float *p, float *m, float *v) {
    fl__free(&tr->alloc, p, tr->arena_len * sizeof(float));
    fl__free(&tr->alloc, m, tr->state_len * sizeof(float));
    fl__free(&tr->alloc, v, tr->state_len * sizeof(float));
}

/* ---- checkpoints ---- */

static fl_status write_shard(struct fl_dc_trainer *tr, const char *path, const float *p,
                             const float *m, const float *v) {
    fl_safetensors_writer *w = NULL;
    char s[256];
    fl_status rc = fl_safetensors_writer_create(&w, fl__dc_alloc_arg(&tr->alloc));
    if (rc != FL_OK)
        return fl__dc_fail(tr, rc, "cannot create a safetensors writer");
    uint64_t np = tr->arena_len, ns = tr->state_len;
    if ((rc = fl_safetensors_writer_add(w, "params", FL_DTYPE_F32, 1, &np, p,
                                        np * sizeof(float))) != FL_OK ||
        (rc = fl_safetensors_writer_add(w, "opt.m", FL_DTYPE_F32, 1, &ns, m,
                                        ns * sizeof(float))) != FL_OK ||
        (rc = fl_safetensors_writer_add(w, "opt.v", FL_DTYPE_F32, 1, &ns, v,
                                        ns * sizeof(float))) != FL_OK)
        goto out_err;
    snprintf(s, sizeof(s), "%" PRIu64, tr->step);
    if ((rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.step", s)) != FL_OK)
        goto out_err;
    /* data position: the next global batch starts at this index of the shuffled stream */
    snprintf(s, sizeof(s), "%" PRIu64, tr->step * (uint64_t)tr->cfg.global_batch);
    if ((rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.data_position", s)) != FL_OK)
        goto out_err;
    snprintf(s, sizeof(s), "%d", tr->cfg.global_batch);
    if ((rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.global_batch", s)) != FL_OK)
        goto out_err;
    snprintf(s, sizeof(s), "%" PRIu64, tr->cfg.seed);
    if ((rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.seed", s)) != FL_OK)
        goto out_err;
    grid_string(tr, s, sizeof(s));
    if ((rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.grid", s)) != FL_OK)
        goto out_err;
    arch_string(&tr->cfg, s, sizeof(s));
    if ((rc = fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, s)) != FL_OK)
        goto out_err;
    if ((rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.optim",
                                                 optim_name(tr->cfg.optim))) != FL_OK)
        goto out_err;
    if ((rc = fl_safetensors_writer_write_file(w, path)) != FL_OK)
        goto out_err;
    fl_safetensors_writer_destroy(w);
    return FL_OK;
out_err:
    fl__dc_fail(tr, rc, "rank %d: writing %s: %s", tr->world->world_rank, path,
                fl_safetensors_writer_errmsg(w));
    fl_safetensors_writer_destroy(w);
    return rc;
}

fl_status fl_dc_trainer_checkpoint_save(fl_dc_trainer *tr, const char *dir) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!dir)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "dir is NULL");
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    char name[64], sdir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    float *p = NULL, *m = NULL, *v = NULL;
    fl_status rc = FL_OK;
    snprintf(name, sizeof(name), "step-%08" PRIu64, tr->step);
    if ((size_t)snprintf(sdir, sizeof(sdir), "%s/%s", dir, name) >= sizeof(sdir) ||
        (size_t)snprintf(path, sizeof(path), "%s/rank-%05d.safetensors", sdir,
                         tr->world->rank) >= sizeof(path))
        rc = fl__dc_fail(tr, FL_ERR_MISUSE, "checkpoint path too long");
    if (rc == FL_OK && tr->world->rank == 0) {
        rc = mkdir_p1(tr, dir);
        if (rc == FL_OK)
            rc = mkdir_p1(tr, sdir);
    }
    if ((rc = agree(tr, rc)) != FL_OK)
        goto out;
    rc = pull_state(tr, &p, &m, &v);
    if (rc == FL_OK)
        rc = write_shard(tr, path, p, m, v);
    if ((rc = agree(tr, rc)) != FL_OK)
        goto out;
    if (tr->world->rank == 0) {
        char latest[CKPT_PATH_MAX], text[80];
        snprintf(text, sizeof(text), "%s\n", name);
        if ((size_t)snprintf(latest, sizeof(latest), "%s/latest", dir) >= sizeof(latest))
            rc = fl__dc_fail(tr, FL_ERR_MISUSE, "checkpoint path too long");
        else
            rc = write_atomic(tr, dir, latest, text);
    }
    rc = agree(tr, rc);
out:
    free_state(tr, p, m, v);
    return rc;
}

/* Reads <dir>/latest into name (without the newline). */
static fl_status read_latest(struct fl_dc_trainer *tr, const char *dir, char *name, size_t len) {
    char path[CKPT_PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/latest", dir) >= sizeof(path))
        return fl__dc_fail(tr, FL_ERR_MISUSE, "checkpoint path too long");
    FILE *f = fopen(path, "r");
    if (!f) {
        tr->err.code = FL_ERR_NOT_FOUND;
        snprintf(tr->err.msg, sizeof(tr->err.msg), "no checkpoint in %s", dir);
        return FL_ERR_NOT_FOUND;
    }
    char *got = fgets(name, (int)len, f);
    fclose(f);
    if (!got)
        return fl__dc_fail(tr, FL_ERR_CORRUPT, "%s is empty", path);
    name[strcspn(name, "\r\n")] = '\0';
    if (strncmp(name, "step-", 5) != 0 || strchr(name, '/'))
        return fl__dc_fail(tr, FL_ERR_CORRUPT, "%s names no step directory", path);
    return FL_OK;
}

static fl_status check_meta(struct fl_dc_trainer *tr, const fl_safetensors *st, const char *key,
                            const char *want, const char *path) {
    const char *got = fl_safetensors_metadata_get(st, key);
    if (!got || strcmp(got, want) != 0)
        return fl__dc_fail(tr, FL_ERR_FORMAT, "%s: %s is '%s', this job has '%s'", path, key,
                           got ? got : "(missing)", want);
    return FL_OK;
}

static fl_status load_vec(struct fl_dc_trainer *tr, const fl_safetensors *st, const char *name,
                          float *dst, size_t n, const char *path) {
    fl_tensor_view tv;
    if (fl_safetensors_find(st, &tv, name) != FL_OK || tv.dtype != FL_DTYPE_F32 ||
        tv.ndim != 1 || tv.shape[0] != n)
        return fl__dc_fail(tr, FL_ERR_FORMAT, "%s: tensor %s missing or not F32 (%zu)", path,
                           name, n);
    memcpy(dst, tv.data, n * sizeof(float));
    return FL_OK;
}

fl_status fl_dc_trainer_checkpoint_load(fl_dc_trainer *tr, const char *dir) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!dir)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "dir is NULL");
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    char name[256], path[CKPT_PATH_MAX], s[256];
    fl_safetensors *st = NULL;
    float *p = NULL, *m = NULL, *v = NULL;
    uint64_t step = 0;
    fl_status rc = read_latest(tr, dir, name, sizeof(name));
    if (rc != FL_OK)
        goto out_agree;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s/rank-%05d.safetensors", dir, name,
                         tr->world->rank) >= sizeof(path)) {
        rc = fl__dc_fail(tr, FL_ERR_MISUSE, "checkpoint path too long");
        goto out_agree;
    }
    if ((rc = fl_safetensors_create(&st, fl__dc_alloc_arg(&tr->alloc))) != FL_OK) {
        fl__dc_fail(tr, rc, "cannot create a safetensors reader");
        goto out_agree;
    }
    if ((rc = fl_safetensors_load(st, path)) != FL_OK) {
        /* a shard that cannot be parsed is corrupt; I/O and memory failures are what they are */
        fl__dc_fail(tr, rc == FL_ERR_IO || rc == FL_ERR_NOMEM ? rc : FL_ERR_CORRUPT,
                    "rank %d: %s: %s", tr->world->world_rank, path, fl_safetensors_errmsg(st));
        rc = tr->err.code;
        goto out_agree;
    }
    grid_string(tr, s, sizeof(s));
    if ((rc = check_meta(tr, st, "flotilla.dc.grid", s, path)) != FL_OK)
        goto out_agree;
    arch_string(&tr->cfg, s, sizeof(s));
    if ((rc = check_meta(tr, st, FL_SAFETENSORS_META_ARCH, s, path)) != FL_OK)
        goto out_agree;
    if ((rc = check_meta(tr, st, "flotilla.dc.optim", optim_name(tr->cfg.optim), path)) != FL_OK)
        goto out_agree;
    snprintf(s, sizeof(s), "%d", tr->cfg.global_batch);
    if ((rc = check_meta(tr, st, "flotilla.dc.global_batch", s, path)) != FL_OK)
        goto out_agree;
    snprintf(s, sizeof(s), "%" PRIu64, tr->cfg.seed);
    if ((rc = check_meta(tr, st, "flotilla.dc.seed", s, path)) != FL_OK)
        goto out_agree;
    const char *sv = fl_safetensors_metadata_get(st, "flotilla.dc.step");
    char *end = NULL;
    errno = 0;
    /* digits only: strtoull would also take a sign ("-1" is 2^64 - 1) or leading spaces */
    step = sv && *sv >= '0' && *sv <= '9' ? strtoull(sv, &end, 10) : 0;
    if (!sv || errno || !end || *end || end == sv) {
        rc = fl__dc_fail(tr, FL_ERR_FORMAT, "%s: bad flotilla.dc.step", path);
        goto out_agree;
    }
    p = fl__alloc_array(&tr->alloc, tr->arena_len, sizeof(float));
    m = fl__alloc_array(&tr->alloc, tr->state_len, sizeof(float));
    v = fl__alloc_array(&tr->alloc, tr->state_len, sizeof(float));
    if (!p || !m || !v) {
        rc = fl__dc_fail(tr, FL_ERR_NOMEM, "no memory for the checkpoint");
        goto out_agree;
    }
    if ((rc = load_vec(tr, st, "params", p, tr->arena_len, path)) != FL_OK ||
        (rc = load_vec(tr, st, "opt.m", m, tr->state_len, path)) != FL_OK ||
        (rc = load_vec(tr, st, "opt.v", v, tr->state_len, path)) != FL_OK)
        goto out_agree;
out_agree:
    rc = agree(tr, rc);
    if (rc == FL_OK) {
        const struct fl__dc_ops *o = tr->ops;
        if ((rc = o->h2d(tr->dev, tr->params, p, tr->arena_len * sizeof(float))) != FL_OK ||
            (rc = o->h2d(tr->dev, tr->opt_m, m, tr->state_len * sizeof(float))) != FL_OK ||
            (rc = o->h2d(tr->dev, tr->opt_v, v, tr->state_len * sizeof(float))) != FL_OK ||
            (rc = o->sync(tr->dev)) != FL_OK)
            fl__dc_fail(tr, rc, "%s backend: %s", o->name, fl__err_msg(&tr->dev->err));
        else
            tr->step = step;
    }
    free_state(tr, p, m, v);
    fl_safetensors_destroy(st);
    return rc;
}

/* ---- model files ---- */

fl_status fl_dc_trainer_model_save(fl_dc_trainer *tr, const char *path) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!path)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "path is NULL");
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    fl_status rc;
    fl_safetensors_writer *w = NULL;
    float *full = fl__alloc_array(&tr->alloc, tr->full_len, sizeof(float));
    /* every rank takes part in the gather or none does; a rank short of memory fails the
     * save everywhere, and like the other refusals of agree() it is not sticky */
    rc = agree(tr, full ? FL_OK : fl__dc_fail(tr, FL_ERR_NOMEM, "no memory for the model"));
    if (rc == FL_OK)
        rc = fl__dc_gather_full(tr, full);
    if (tr->failed) /* an exchange failed; refusals of memory are not sticky */
        goto out;
    if (rc == FL_OK && tr->world->rank == 0) {
        char name[64], s[256];
        rc = fl_safetensors_writer_create(&w, fl__dc_alloc_arg(&tr->alloc));
        for (int i = 0; i < tr->cfg.n_layers && rc == FL_OK; i++) {
            uint64_t shape[2] = {(uint64_t)tr->cfg.sizes[i + 1], (uint64_t)tr->cfg.sizes[i]};
            snprintf(name, sizeof(name), "layers.%d.weight", i);
            rc = fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 2, shape,
                                           full + fl__dc_full_offset(&tr->cfg, i, false),
                                           shape[0] * shape[1] * sizeof(float));
            snprintf(name, sizeof(name), "layers.%d.bias", i);
            if (rc == FL_OK)
                rc = fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 1, shape,
                                               full + fl__dc_full_offset(&tr->cfg, i, true),
                                               shape[0] * sizeof(float));
        }
        arch_string(&tr->cfg, name, sizeof(name));
        snprintf(s, sizeof(s), "mlp-%s", name);
        if (rc == FL_OK)
            rc = fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, s);
        snprintf(s, sizeof(s), "%" PRIu64, tr->step);
        if (rc == FL_OK)
            rc = fl_safetensors_writer_set_metadata(w, "flotilla.dc.step", s);
        if (rc == FL_OK)
            rc = fl_safetensors_writer_write_file(w, path);
        if (rc != FL_OK)
            fl__dc_fail(tr, rc, "writing %s: %s", path,
                        w ? fl_safetensors_writer_errmsg(w) : "no writer");
    }
    rc = agree(tr, rc);
out:
    fl_safetensors_writer_destroy(w);
    fl__free(&tr->alloc, full, tr->full_len * sizeof(float));
    return rc;
}

fl_status fl_dc_trainer_model_load(fl_dc_trainer *tr, const void *buf, size_t len) {
    if (!tr)
        return FL_ERR_MISUSE;
    if (!buf)
        return fl__dc_fail(tr, FL_ERR_MISUSE, "buf is NULL");
    if (tr->failed)
        return tr->err.code ? tr->err.code : FL_ERR_STATE;
    fl_safetensors *st = NULL;
    float *full = NULL;
    fl_status rc = fl_safetensors_create(&st, fl__dc_alloc_arg(&tr->alloc));
    if (rc != FL_OK) /* the refusals below change nothing: the trainer goes on */
        return fl__dc_refuse(tr, rc, "cannot create a safetensors reader");
    if ((rc = fl_safetensors_parse(st, buf, len)) != FL_OK) {
        tr->err.code = rc;
        snprintf(tr->err.msg, sizeof(tr->err.msg), "model: %s", fl_safetensors_errmsg(st));
        goto out;
    }
    full = fl__alloc_array(&tr->alloc, tr->full_len, sizeof(float));
    if (!full) {
        rc = fl__dc_refuse(tr, FL_ERR_NOMEM, "no memory for the model");
        goto out;
    }
    for (int i = 0; i < tr->cfg.n_layers; i++) {
        for (int k = 0; k < 2; k++) {
            char name[64];
            fl_tensor_view tv;
            uint64_t out = (uint64_t)tr->cfg.sizes[i + 1], in = (uint64_t)tr->cfg.sizes[i];
            snprintf(name, sizeof(name), k ? "layers.%d.bias" : "layers.%d.weight", i);
            bool ok = fl_safetensors_find(st, &tv, name) == FL_OK && tv.dtype == FL_DTYPE_F32 &&
                      tv.ndim == (size_t)(k ? 1 : 2) && tv.shape[0] == out &&
                      (k || tv.shape[1] == in);
            if (!ok) {
                rc = FL_ERR_FORMAT;
                tr->err.code = rc;
                snprintf(tr->err.msg, sizeof(tr->err.msg),
                         "model: tensor %s missing or not F32 of shape (%" PRIu64 "%s)", name,
                         out, k ? "" : ", in");
                goto out;
            }
            memcpy(full + fl__dc_full_offset(&tr->cfg, i, k == 1), tv.data, tv.nbytes);
        }
    }
    rc = fl__dc_scatter_full(tr, full);
out:
    fl__free(&tr->alloc, full, tr->full_len * sizeof(float));
    fl_safetensors_destroy(st);
    return rc;
}
