/* Benchmark: fl_safetensors_load() of a model file against a plain read() of the same
 * file into a fresh buffer, measured in the same run with a warm page cache.
 *
 *   bench_safetensors_load [--size-mb N] [--tensors N] [--reps N] [--dir D] [--json]
 *                          [--max-ratio R]
 *
 * The file holds N F32 tensors totalling about size-mb MiB (default 100 MiB, 256
 * tensors), written with the safetensors writer. Each repetition times both paths,
 * interleaved; the report gives medians and ratio = load / read (target <= 1.2).
 * With --max-ratio the exit status is 1 when the ratio is above R. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flotilla/tensor.h"

#include "bench_util.h"

/* The reference: open, fstat, malloc, read everything, close, free. Returns a checksum
 * byte so the work cannot be optimised away. */
static unsigned plain_read(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        perror(path);
        exit(1);
    }
    size_t len = (size_t)sb.st_size, got = 0;
    unsigned char *buf = malloc(len);
    if (!buf) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0) {
            perror("read");
            exit(1);
        }
        got += (size_t)n;
    }
    close(fd);
    unsigned c = buf[len - 1];
    free(buf);
    return c;
}

static unsigned flotilla_load(const char *path, size_t want_count) {
    fl_safetensors *st = NULL;
    if (fl_safetensors_create(&st, NULL) != FL_OK || fl_safetensors_load(st, path) != FL_OK ||
        fl_safetensors_count(st) != want_count) {
        fprintf(stderr, "load failed: %s\n", fl_safetensors_errmsg(st));
        exit(1);
    }
    fl_tensor_view v;
    fl_safetensors_at(st, &v, want_count - 1);
    unsigned c = ((const unsigned char *)v.data)[v.nbytes - 1];
    fl_safetensors_destroy(st);
    return c;
}

int main(int argc, char **argv) {
    double size_mb = 100, max_ratio = 0;
    int tensors = 256, reps = 9, json = 0;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size-mb") == 0 && i + 1 < argc)
            size_mb = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--tensors") == 0 && i + 1 < argc)
            tensors = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--max-ratio") == 0 && i + 1 < argc)
            max_ratio = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else {
            fprintf(stderr, "usage: %s [--size-mb N] [--tensors N] [--reps N] [--dir D] "
                            "[--json] [--max-ratio R]\n", argv[0]);
            return 2;
        }
    }
    if (size_mb <= 0 || tensors < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bad sizes\n");
        return 2;
    }

    /* Build the model: tensors x [rows, 1024] F32. */
    size_t total = (size_t)(size_mb * 1024 * 1024);
    uint64_t rows = total / ((size_t)tensors * 4096);
    if (rows == 0)
        rows = 1;
    size_t tbytes = (size_t)rows * 4096;
    float *blob = malloc(tbytes * (size_t)tensors);
    if (!blob) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < tbytes / 4 * (size_t)tensors; i++)
        blob[i] = (float)(i % 1000) * 0.001f;
    fl_safetensors_writer *w = NULL;
    fl_safetensors_writer_create(&w, NULL);
    for (int t = 0; t < tensors; t++) {
        char name[64];
        const uint64_t shape[2] = {rows, 1024};
        snprintf(name, sizeof(name), "layers.%d.weight", t);
        if (fl_safetensors_writer_add(w, name, FL_DTYPE_F32, 2, shape,
                                      (const char *)blob + (size_t)t * tbytes, tbytes) != FL_OK) {
            fprintf(stderr, "add: %s\n", fl_safetensors_writer_errmsg(w));
            return 1;
        }
    }
    fl_safetensors_writer_set_metadata(w, FL_SAFETENSORS_META_ARCH, "bench");
    char path[4096];
    snprintf(path, sizeof(path), "%s/fl_bench_%d.safetensors", dir, (int)getpid());
    double t0 = bench_wall_s();
    if (fl_safetensors_writer_write_file(w, path) != FL_OK) {
        fprintf(stderr, "write: %s\n", fl_safetensors_writer_errmsg(w));
        return 1;
    }
    double write_s = bench_wall_s() - t0;
    fl_safetensors_writer_destroy(w);
    free(blob);
    struct stat sb;
    stat(path, &sb);

    /* Warm the page cache and both code paths. */
    unsigned sink = plain_read(path) + flotilla_load(path, (size_t)tensors);

    double *rd = calloc((size_t)reps, sizeof(double)), *ld = calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
        double a = bench_wall_s();
        sink += plain_read(path);
        double b = bench_wall_s();
        sink += flotilla_load(path, (size_t)tensors);
        double c = bench_wall_s();
        rd[r] = b - a;
        ld[r] = c - b;
    }
    unlink(path);
    double mr = bench_median(rd, (size_t)reps), ml = bench_median(ld, (size_t)reps);
    double ratio = ml / mr;
    double mib = (double)sb.st_size / (1024.0 * 1024.0);
    if (json) {
        printf("{\"bench\":\"safetensors_load\",\"file_bytes\":%lld,\"tensors\":%d,\"reps\":%d,"
               "\"read_ms_median\":%.3f,\"load_ms_median\":%.3f,\"ratio\":%.3f,"
               "\"read_mib_s\":%.1f,\"load_mib_s\":%.1f,\"write_file_ms\":%.1f,"
               "\"target_ratio\":1.2,\"sink\":%u}\n",
               (long long)sb.st_size, tensors, reps, mr * 1e3, ml * 1e3, ratio, mib / mr,
               mib / ml, write_s * 1e3, sink & 0);
    } else {
        printf("safetensors load of %.1f MiB, %d tensors, %d reps (warm cache, medians)\n", mib,
               tensors, reps);
        printf("  read()            %8.3f ms  %8.1f MiB/s  (reference)\n", mr * 1e3, mib / mr);
        printf("  fl_safetensors_load %6.3f ms  %8.1f MiB/s  ratio %.3f (target <= 1.2)\n",
               ml * 1e3, mib / ml, ratio);
        printf("  (atomic write_file took %.1f ms)\n", write_s * 1e3);
    }
    free(rd);
    free(ld);
    return (max_ratio > 0 && ratio > max_ratio) ? 1 : 0;
}
