/* Replays every file of a corpus directory through LLVMFuzzerTestOneInput, so committed
 * corpora are regression tests in every build (no libFuzzer needed). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        fprintf(stderr, "cannot open corpus %s\n", argv[1]);
        return 1;
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        uint8_t *buf = malloc((size_t)st.st_size + 1);
        size_t got = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
        fclose(f);
        if (!buf)
            return 1;
        LLVMFuzzerTestOneInput(buf, got);
        free(buf);
        n++;
    }
    closedir(d);
    printf("replayed %d corpus files\n", n);
    return n > 0 ? 0 : 1;
}
