/* registry-demo: a tour of the Flotilla model registry.
 *
 * Opens (or creates) a store, puts a model, tags it "production", puts a child version,
 * prints the lineage and reads the child back with its SHA-256 verified.
 * Usage: registry-demo [PATH]   (default: registry-demo.db in the current directory) */
#include <stdio.h>
#include <string.h>

#include "flotilla/storage.h"

#define N_WEIGHTS 1024

/* Stops the demo with the store's explanation of what went wrong. */
static int fail(fl_store *st, const char *step, fl_status rc) {
    fprintf(stderr, "registry-demo: %s failed: %s (%s)\n", step, fl_store_errmsg(st),
            fl_status_name(rc));
    fl_store_close(st);
    return 1;
}

/* Stand-in "weights": a sawtooth; a training round nudges them by delta. */
static void make_weights(float *w, float delta) {
    for (int i = 0; i < N_WEIGHTS; i++)
        w[i] = (float)(i % 17) * 0.01f + delta;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "registry-demo.db";
    float weights[N_WEIGHTS];
    fl_store *st = NULL;
    fl_status rc = fl_store_open(&st, path, NULL);
    if (rc != FL_OK)
        return fail(st, "opening the store", rc);
    printf("Flotilla model registry demo\n");
    printf("  store: %s (schema v%d, WAL, synchronous=FULL)\n\n", path, fl_store_schema_version());

    /* 1. A population (an FL task) to own the models; found again on later runs. */
    int64_t pop = 0;
    fl_store_population *p = NULL;
    rc = fl_store_population_find(st, &p, "demo-keyboard");
    if (rc == FL_OK) {
        pop = p->id;
        fl_store_free(st, p);
    } else if (rc == FL_ERR_NOT_FOUND) {
        rc = fl_store_population_create(st, &pop, "demo-keyboard", "{\"rounds\":100}", 8.0, 1e-6,
                                        "[\"eu\",\"us\"]");
    }
    if (rc != FL_OK)
        return fail(st, "setting up the population", rc);
    printf("1. population \"demo-keyboard\" has id %lld\n", (long long)pop);

    /* 2. Put the base model. Identical bytes are stored once: a rerun finds them. */
    fl_store_model_ref base;
    make_weights(weights, 0.0f);
    rc = fl_store_model_put(st, &base, pop, 0, weights, sizeof(weights),
                            "{\"arch\":\"saw-1024\",\"note\":\"initial weights\"}");
    if (rc != FL_OK)
        return fail(st, "putting the base model", rc);
    printf("2. base model  -> version %lld, %zu bytes, sha256 %.16s... %s\n",
           (long long)base.version, sizeof(weights), base.sha256_hex,
           base.existed ? "(same bytes already stored: reused)" : "(new)");

    /* 3. Tag it: tags are movable names for versions. */
    rc = fl_store_tag_set(st, "production", base.version);
    if (rc != FL_OK)
        return fail(st, "tagging", rc);
    printf("3. tag \"production\" -> version %lld\n", (long long)base.version);

    /* 4. A child version, as a training round would produce; the round's writes would be
     *    grouped with fl_store_begin/fl_store_commit. */
    fl_store_model_ref child;
    make_weights(weights, 0.001f);
    rc = fl_store_model_put(st, &child, pop, base.version, weights, sizeof(weights),
                            "{\"arch\":\"saw-1024\",\"note\":\"after round 1\"}");
    if (rc != FL_OK)
        return fail(st, "putting the child model", rc);
    printf("4. child model -> version %lld (parent %lld), sha256 %.16s... %s\n",
           (long long)child.version, (long long)base.version, child.sha256_hex,
           child.existed ? "(reused)" : "(new)");

    /* 5. Lineage: walk parents back to the root. */
    fl_store_model *chain = NULL;
    size_t n = 0;
    rc = fl_store_model_lineage(st, &chain, &n, child.version, 0);
    if (rc != FL_OK)
        return fail(st, "reading the lineage", rc);
    printf("5. lineage of version %lld:\n", (long long)child.version);
    for (size_t i = 0; i < n; i++)
        printf("     %s version %lld  %zu bytes  sha256 %.16s...  %s\n", i ? "<-" : "  ",
               (long long)chain[i].version, chain[i].size, chain[i].sha256_hex,
               chain[i].metadata_json);
    fl_store_free(st, chain);

    /* 6. Read the child back: the store re-hashes the bytes and refuses corrupt ones. */
    fl_store_model *m = NULL;
    rc = fl_store_model_get(st, &m, child.version);
    if (rc != FL_OK)
        return fail(st, "reading the child model back", rc);
    int same = m->size == sizeof(weights) && memcmp(m->bytes, weights, sizeof(weights)) == 0;
    printf("6. read version %lld back: %zu bytes, SHA-256 verified, bytes %s\n",
           (long long)m->version, m->size, same ? "identical" : "DIFFERENT");
    fl_store_free(st, m);

    int64_t prod = 0;
    rc = fl_store_tag_resolve(st, &prod, "production");
    if (rc != FL_OK)
        return fail(st, "resolving the tag", rc);
    printf("\nDone: \"production\" serves version %lld. Run me again: identical bytes are "
           "reused, not stored twice.\n",
           (long long)prod);
    fl_store_close(st);
    return same ? 0 : 1;
}
