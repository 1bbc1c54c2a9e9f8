/* flotilla-train: trains the population's global model on central data.
 *
 *   mpirun -np 4 flotilla-train --dp 2 --tp 2 --zero 1 --steps 1000 --ckpt /ckpt \
 *          --registry /var/lib/flotilla/store.db --from production --publish --tag production
 *
 * One process per GPU (or per CPU slot on the CPU backend). Loads a model version from the
 * registry (or a safetensors file, or the seeded initial weights), trains it, writes sharded
 * checkpoints, and publishes the result with lineage back to the registry. On any error
 * the message names the rank and the job is aborted, never left hanging. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "flotilla/datacenter.h"
#include "flotilla/tensor.h"
#ifdef FL_DC_WITH_STORAGE
#include "flotilla/storage.h"
#endif

static int g_rank = 0;
static fl_dc_comm *g_world = NULL;

/* Prints the message with the rank, aborts the communicator and the MPI job. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "flotilla-train: rank %d: %s\n", g_rank, msg);
    fflush(stderr);
    if (g_world)
        fl_dc_comm_abort(g_world);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CHECK(call, what)                                                                  \
    do {                                                                                   \
        fl_status rc_ = (call);                                                            \
        if (rc_ != FL_OK)                                                                  \
            die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, (what), fl_status_name(rc_),     \
                tr ? fl_dc_trainer_errmsg(tr) : fl_dc_last_error());                       \
    } while (0)

struct opts {
    const char *data_dir;
    size_t limit, eval;
    int steps, ckpt_every, ckpt_keep, log_every, resume, publish, kill_at;
    const char *ckpt_dir, *init_file, *out_file, *registry, *from, *tag;
    int64_t population;
    fl_dc_comm_kind comm;
};

static void usage(void) {
    fprintf(stderr,
            "usage: flotilla-train [options]\n"
            "  --data DIR         Fashion-MNIST IDX(.gz) directory\n"
            "                     [/usr/share/datasets/fashion-mnist]\n"
            "  --limit N          use the first N training examples (0 = all)\n"
            "  --layers A,B,..    layer widths [784,128,10]; 784,10 = softmax regression\n"
            "  --dp N --tp N      grid (dp*tp = number of processes) [1,1]\n"
            "  --zero 0|1         ZeRO stage [0]\n"
            "  --backend auto|cpu|cuda   --math fp32|tf32|bf16   --comm auto|single|mpi|nccl\n"
            "  --optim adamw|sgd  --lr X  --momentum X  --wd X  --batch N (global)  --seed N\n"
            "  --bucket-kb N      DP gradient bucket size [1024]\n"
            "  --steps N          optimiser steps to reach (counting resumed ones) [100]\n"
            "  --ckpt DIR --ckpt-every N --resume   sharded checkpoints\n"
            "  --ckpt-keep K        keep the K newest checkpoints (default 0: all)\n"
            "  --init FILE        start from this safetensors model\n"
            "  --out FILE         write the final model (safetensors)\n"
            "  --registry DB --from VERSION|TAG --population ID --publish --tag TAG\n"
            "  --eval N           evaluate on N test examples at the end (0 = skip)\n"
            "  --log-every N      progress line every N steps [10]\n"
            "  --kill-at N        (testing) SIGKILL this process after step N\n");
}

static long parse_long(const char *s, const char *what) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || end == s)
        die("bad %s: '%s'", what, s);
    return v;
}

static float parse_float(const char *s, const char *what) {
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || !end || *end || end == s)
        die("bad %s: '%s'", what, s);
    return v;
}

static void parse_layers(fl_dc_config *cfg, const char *s) {
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > (1 << 24))
            die("bad --layers: '%s'", s);
        if (n > FL_DC_MAX_LAYERS)
            die("--layers: at most %d layers", FL_DC_MAX_LAYERS);
        cfg->sizes[n++] = (int)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            die("bad --layers: '%s'", s);
        p = end + 1;
    }
    if (n < 2)
        die("--layers needs at least input,classes");
    cfg->n_layers = n - 1;
}

static void parse(int argc, char **argv, fl_dc_config *cfg, struct opts *o) {
    static const struct option lo[] = {
        {"data", 1, 0, 'd'},       {"limit", 1, 0, 'n'},    {"layers", 1, 0, 'L'},
        {"dp", 1, 0, 'D'},         {"tp", 1, 0, 'T'},       {"zero", 1, 0, 'Z'},
        {"backend", 1, 0, 'b'},    {"math", 1, 0, 'M'},     {"comm", 1, 0, 'C'},
        {"optim", 1, 0, 'O'},      {"lr", 1, 0, 'l'},       {"momentum", 1, 0, 'm'},
        {"wd", 1, 0, 'w'},         {"batch", 1, 0, 'B'},    {"seed", 1, 0, 's'},
        {"bucket-kb", 1, 0, 'k'},  {"steps", 1, 0, 'S'},    {"ckpt", 1, 0, 'c'},
        {"ckpt-every", 1, 0, 'e'}, {"resume", 0, 0, 'r'},   {"init", 1, 0, 'i'},
        {"out", 1, 0, 'o'},        {"registry", 1, 0, 'R'}, {"from", 1, 0, 'f'},
        {"population", 1, 0, 'p'}, {"publish", 0, 0, 'P'},  {"tag", 1, 0, 'g'},
        {"eval", 1, 0, 'E'},       {"log-every", 1, 0, 'v'}, {"kill-at", 1, 0, 'K'},
        {"ckpt-keep", 1, 0, 'x'},  {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'd': o->data_dir = optarg; break;
        case 'n': o->limit = (size_t)parse_long(optarg, "--limit"); break;
        case 'L': parse_layers(cfg, optarg); break;
        case 'D': cfg->dp = (int)parse_long(optarg, "--dp"); break;
        case 'T': cfg->tp = (int)parse_long(optarg, "--tp"); break;
        case 'Z': cfg->zero_stage = (int)parse_long(optarg, "--zero"); break;
        case 'b':
            cfg->backend = !strcmp(optarg, "cpu")    ? FL_DC_BACKEND_CPU
                           : !strcmp(optarg, "cuda") ? FL_DC_BACKEND_CUDA
                                                     : FL_DC_BACKEND_AUTO;
            break;
        case 'M':
            cfg->math = !strcmp(optarg, "tf32")   ? FL_DC_MATH_TF32
                        : !strcmp(optarg, "bf16") ? FL_DC_MATH_BF16
                                                  : FL_DC_MATH_FP32;
            break;
        case 'C':
            o->comm = !strcmp(optarg, "single") ? FL_DC_COMM_SINGLE
                      : !strcmp(optarg, "mpi")  ? FL_DC_COMM_MPI
                      : !strcmp(optarg, "nccl") ? FL_DC_COMM_NCCL
                                                : FL_DC_COMM_AUTO;
            break;
        case 'O': cfg->optim = !strcmp(optarg, "sgd") ? FL_DC_OPTIM_SGD : FL_DC_OPTIM_ADAMW; break;
        case 'l': cfg->lr = parse_float(optarg, "--lr"); break;
        case 'm': cfg->momentum = parse_float(optarg, "--momentum"); break;
        case 'w': cfg->weight_decay = parse_float(optarg, "--wd"); break;
        case 'B': cfg->global_batch = (int)parse_long(optarg, "--batch"); break;
        case 's': cfg->seed = (uint64_t)parse_long(optarg, "--seed"); break;
        case 'k': cfg->bucket_bytes = (size_t)parse_long(optarg, "--bucket-kb") * 1024; break;
        case 'S': o->steps = (int)parse_long(optarg, "--steps"); break;
        case 'c': o->ckpt_dir = optarg; break;
        case 'e': o->ckpt_every = (int)parse_long(optarg, "--ckpt-every"); break;
        case 'x': o->ckpt_keep = (int)parse_long(optarg, "--ckpt-keep"); break;
        case 'r': o->resume = 1; break;
        case 'i': o->init_file = optarg; break;
        case 'o': o->out_file = optarg; break;
        case 'R': o->registry = optarg; break;
        case 'f': o->from = optarg; break;
        case 'p': o->population = parse_long(optarg, "--population"); break;
        case 'P': o->publish = 1; break;
        case 'g': o->tag = optarg; break;
        case 'E': o->eval = (size_t)parse_long(optarg, "--eval"); break;
        case 'v': o->log_every = (int)parse_long(optarg, "--log-every"); break;
        case 'K': o->kill_at = (int)parse_long(optarg, "--kill-at"); break;
        case 'h': usage(); MPI_Finalize(); exit(0);
        default: usage(); die("bad arguments");
        }
    }
    if (optind < argc)
        die("unexpected argument '%s'", argv[optind]);
    if (o->ckpt_keep < 0)
        die("--ckpt-keep wants 0 (keep all) or more");
}

/* Reads a whole file (rank 0) and broadcasts it to every rank. */
static void *read_bcast(const char *path, size_t *len) {
    uint64_t n = 0;
    void *buf = NULL;
    if (g_rank == 0) {
        FILE *f = fopen(path, "rb");
        if (!f)
            die("cannot open %s: %s", path, strerror(errno));
        if (fseek(f, 0, SEEK_END) != 0)
            die("cannot seek %s", path);
        long sz = ftell(f);
        rewind(f);
        if (sz < 0)
            die("cannot size %s", path);
        n = (uint64_t)sz;
        buf = malloc(n ? n : 1);
        if (!buf || fread(buf, 1, n, f) != n)
            die("cannot read %s", path);
        fclose(f);
    }
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g_rank != 0 && !(buf = malloc(n ? n : 1)))
        die("out of memory");
    if (n > 0x7fffffffu)
        die("model larger than 2 GiB");
    MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    *len = n;
    return buf;
}

#ifdef FL_DC_WITH_STORAGE
/* Resolves --from (a version number or a tag) and fetches its bytes on rank 0, then
 * broadcasts them. Returns the version. */
static int64_t registry_fetch(fl_store *st, const char *from, void **buf, size_t *len) {
    int64_t version = 0;
    uint64_t n = 0;
    *buf = NULL;
    if (g_rank == 0) {
        char *end = NULL;
        long long v = strtoll(from, &end, 10);
        if (end && *end == '\0' && end != from)
            version = v;
        else if (fl_store_tag_resolve(st, &version, from) != FL_OK)
            die("registry: no tag '%s': %s", from, fl_store_errmsg(st));
        fl_store_model *m = NULL;
        if (fl_store_model_get(st, &m, version) != FL_OK)
            die("registry: version %" PRId64 ": %s", version, fl_store_errmsg(st));
        n = m->size;
        *buf = malloc(n ? n : 1);
        if (!*buf)
            die("out of memory");
        memcpy(*buf, m->bytes, n);
        fl_store_free(st, m);
    }
    MPI_Bcast(&version, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g_rank != 0 && !(*buf = malloc(n ? n : 1)))
        die("out of memory");
    if (n > 0x7fffffffu)
        die("model larger than 2 GiB");
    MPI_Bcast(*buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    *len = n;
    return version;
}
#endif

int main(int argc, char **argv) {
    fl_dc_config cfg;
    struct opts o;
    fl_dc_trainer *tr = NULL;
    fl_dc_dataset *train = NULL, *test = NULL;
    int size = 1;
    char a[1024], b[1024];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fl_dc_config_init(&cfg);
    memset(&o, 0, sizeof(o));
    o.data_dir = "/usr/share/datasets/fashion-mnist";
    o.steps = 100;
    o.log_every = 10;
    o.comm = FL_DC_COMM_AUTO;
    parse(argc, argv, &cfg, &o);
    if (cfg.dp * cfg.tp != size && cfg.tp == 1)
        cfg.dp = size / cfg.tp; /* default: all ranks data-parallel */

    CHECK(fl_dc_comm_open(&g_world, o.comm, NULL), "opening the communicator");
    snprintf(a, sizeof(a), "%s/train-images-idx3-ubyte.gz", o.data_dir);
    snprintf(b, sizeof(b), "%s/train-labels-idx1-ubyte.gz", o.data_dir);
    CHECK(fl_dc_dataset_open_idx(&train, a, b, o.limit, NULL), "loading the training set");
    CHECK(fl_dc_trainer_create(&tr, &cfg, g_world, NULL), "creating the trainer");

#ifdef FL_DC_WITH_STORAGE
    fl_store *store = NULL;
    int64_t parent = 0;
    if (o.registry && g_rank == 0 && fl_store_open(&store, o.registry, NULL) != FL_OK)
        die("registry %s: %s", o.registry, fl_store_errmsg(store));
#else
    if (o.registry)
        die("this flotilla-train was built without the storage component");
#endif

    /* starting point: registry version, model file, or the seeded initial weights */
    if (o.from) {
#ifdef FL_DC_WITH_STORAGE
        if (!o.registry)
            die("--from needs --registry");
        void *buf;
        size_t len;
        parent = registry_fetch(store, o.from, &buf, &len);
        CHECK(fl_dc_trainer_model_load(tr, buf, len), "loading the registry model");
        free(buf);
#endif
    } else if (o.init_file) {
        size_t len;
        void *buf = read_bcast(o.init_file, &len);
        CHECK(fl_dc_trainer_model_load(tr, buf, len), "loading the initial model");
        free(buf);
    }
    if (o.resume && o.ckpt_dir) {
        fl_status rc = fl_dc_trainer_checkpoint_load(tr, o.ckpt_dir);
        if (rc == FL_OK && g_rank == 0)
            printf("resumed from %s at step %" PRIu64 "\n", o.ckpt_dir,
                   fl_dc_trainer_step_count(tr));
        else if (rc == FL_ERR_NOT_FOUND && g_rank == 0)
            printf("no checkpoint in %s: starting fresh\n", o.ckpt_dir);
        else if (rc != FL_OK && rc != FL_ERR_NOT_FOUND)
            CHECK(rc, "resuming");
    }
    if (g_rank == 0) {
        printf("flotilla-train: %d ranks = dp %d x tp %d, zero %d, backend %s, %zu examples, "
               "%zu params\n",
               size, cfg.dp, cfg.tp, cfg.zero_stage,
               fl_dc_trainer_backend(tr) == FL_DC_BACKEND_CUDA ? "cuda" : "cpu",
               fl_dc_dataset_count(train), fl_dc_trainer_param_count(tr));
        fflush(stdout);
    }

    double *all = malloc(2 * (size_t)size * sizeof(double));
    if (!all)
        die("out of memory");
    while (fl_dc_trainer_step_count(tr) < (uint64_t)o.steps) {
        fl_dc_step_stats st = {.struct_size = sizeof(st)};
        CHECK(fl_dc_trainer_step(tr, train, &st), "training step");
        int s = (int)st.step;
        if (o.log_every > 0 && (s % o.log_every == 0 || s == o.steps)) {
            /* per-rank compute vs communication time */
            double mine[2] = {st.compute_s, st.comm_s};
            MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            if (g_rank == 0) {
                printf("step %5d  loss %.5f  %9.0f samples/s ", s, st.loss, st.samples_per_s);
                for (int r = 0; r < size; r++)
                    printf(" | r%d compute %.2fms comm %.2fms", r, 1e3 * all[2 * r],
                           1e3 * all[2 * r + 1]);
                printf("\n");
                fflush(stdout);
            }
        }
        if (o.ckpt_dir && o.ckpt_every > 0 && s % o.ckpt_every == 0) {
            CHECK(fl_dc_trainer_checkpoint_save(tr, o.ckpt_dir), "writing a checkpoint");
            if (o.ckpt_keep > 0 && g_rank == 0) {
                /* A failed prune costs disk, not the job: say so and go on. */
                char why[256];
                if (fl_dc_checkpoint_prune(o.ckpt_dir, (unsigned)o.ckpt_keep, NULL, why,
                                           sizeof(why)) != FL_OK)
                    fprintf(stderr, "flotilla-train: pruning checkpoints: %s\n", why);
            }
        }
        if (o.kill_at > 0 && s == o.kill_at) {
            fflush(stdout);
            raise(SIGKILL); /* simulate a crashed job (tests) */
        }
    }
    free(all);

    if (o.eval > 0) {
        double loss = 0, acc = 0;
        snprintf(a, sizeof(a), "%s/t10k-images-idx3-ubyte.gz", o.data_dir);
        snprintf(b, sizeof(b), "%s/t10k-labels-idx1-ubyte.gz", o.data_dir);
        CHECK(fl_dc_dataset_open_idx(&test, a, b, o.eval, NULL), "loading the test set");
        CHECK(fl_dc_trainer_evaluate(tr, test, 0, &loss, &acc), "evaluating");
        if (g_rank == 0)
            printf("test: %zu examples  loss %.4f  accuracy %.4f\n", fl_dc_dataset_count(test),
                   loss, acc);
    }

    const char *out = o.out_file;
    char tmp_out[256];
    if (!out && o.publish) {
        snprintf(tmp_out, sizeof(tmp_out), "flotilla-train-%d.safetensors", (int)getpid());
        MPI_Bcast(tmp_out, sizeof(tmp_out), MPI_CHAR, 0, MPI_COMM_WORLD);
        out = tmp_out;
    }
    if (out)
        CHECK(fl_dc_trainer_model_save(tr, out), "writing the model");
#ifdef FL_DC_WITH_STORAGE
    if (o.publish && g_rank == 0) {
        size_t len;
        FILE *f = fopen(out, "rb");
        if (!f)
            die("cannot reopen %s", out);
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        rewind(f);
        void *buf = malloc(len ? len : 1);
        if (!buf || fread(buf, 1, len, f) != len)
            die("cannot read %s", out);
        fclose(f);
        char meta[512];
        snprintf(meta, sizeof(meta),
                 "{\"trainer\":\"flotilla-train\",\"steps\":%" PRIu64
                 ",\"dp\":%d,\"tp\":%d,\"zero\":%d,\"global_batch\":%d}",
                 fl_dc_trainer_step_count(tr), cfg.dp, cfg.tp, cfg.zero_stage, cfg.global_batch);
        fl_store_model_ref ref;
        if (fl_store_model_put(store, &ref, o.population, parent, buf, len, meta) != FL_OK)
            die("registry: publishing: %s", fl_store_errmsg(store));
        if (o.tag && fl_store_tag_set(store, o.tag, ref.version) != FL_OK)
            die("registry: tag %s: %s", o.tag, fl_store_errmsg(store));
        printf("published version %" PRId64 " (parent %" PRId64 ", sha256 %s)%s%s\n",
               ref.version, parent, ref.sha256_hex, o.tag ? " tagged " : "", o.tag ? o.tag : "");
        free(buf);
        if (out == tmp_out)
            unlink(tmp_out);
    }
    fl_store_close(store);
#endif

    fl_dc_trainer_destroy(tr);
    fl_dc_dataset_close(train);
    fl_dc_dataset_close(test);
    fl_dc_comm_close(g_world);
    MPI_Finalize();
    return 0;
}
