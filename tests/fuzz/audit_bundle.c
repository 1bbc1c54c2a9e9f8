/* libFuzzer target for the audit log's offline verifier: bundles (JSON Lines with signed
 * checkpoints), single entries (schema and rules) and checkpoint notes.
 *
 * An input starting with '{"checkpoints"' is a whole bundle: it is opened and verified.
 * Anything else is tried both as one entry, checked against a fixed population state, and
 * as a checkpoint note under a fixed key. Oracles beyond the sanitizers: with the libc
 * allocator nothing reports FL_ERR_NOMEM; a verified bundle's verdict is consistent with
 * its accessors; an entry that passes the checks re-encodes canonically to the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_internal.h"
#include "flotilla/storage.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Verifier key of the demo bundle's checkpoints (flotilla-audit demo, seed 1). */
#define FUZZ_VKEY                                                                                  \
    "demo.flotilla.example/audit+6a30b610+AYqI4910CfGV/VLbLTy6XXLKZwm/HZQSG/N0iAG0D29c"

static void fuzz_bundle(const uint8_t *data, size_t size) {
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    fl_status r = fl_store_audit_bundle_open(&b, data, size, NULL);
    CHECK(r != FL_ERR_NOMEM);
    r = fl_store_audit_bundle_verify(b, NULL, &v);
    CHECK(r != FL_ERR_NOMEM);
    CHECK((r == FL_OK) == (v.ok == 1));
    if (r == FL_OK) {
        CHECK((size_t)v.entries == fl_store_audit_bundle_entry_count(b));
        CHECK(v.bad_entry == -1 && v.bad_checkpoint == -1);
        for (size_t i = 0; i < fl_store_audit_bundle_entry_count(b); i++) {
            size_t len = 0;
            const char *p = fl_store_audit_bundle_entry(b, i, &len);
            CHECK(p && (const uint8_t *)p >= data && (const uint8_t *)p + len <= data + size);
        }
    }
    fl_store_audit_bundle_close(b);
}

static void fuzz_entry(const uint8_t *data, size_t size) {
    json_t *e = NULL;
    char why[256];
    int budget = 0;
    if (fl__store_audit_parse((const char *)data, size, &e, why, sizeof(why)) != FL_OK)
        return;
    /* A population with a budget of 8, regions EU and UK, 2 epsilon spent, at round 3 with
     * model 5: what most seeds refer to. Checked against "no population" too. */
    struct fl__store_audit_pop pop;
    fl__store_audit_pop_init(&pop);
    pop.id = 1;
    snprintf(pop.name, sizeof(pop.name), "keyboard");
    pop.budget_eps_e9 = 8000000000LL;
    pop.budget_delta_e18 = 1000000000000LL;
    pop.allowed = json_pack("[ss]", "EU", "UK");
    pop.eps_total_e9 = 2000000000LL;
    pop.last_round = 3;
    pop.has_model = 1;
    pop.model_version = 5;
    memset(pop.model_sha, 'a', 64);
    pop.seen = 1;
    int64_t seq = json_integer_value(json_object_get(e, "seq"));
    if (fl__store_audit_check(e, seq, &pop, why, sizeof(why), &budget) == 0) {
        char *again = NULL;
        size_t len = 0;
        CHECK(fl__store_audit_dump(NULL, e, (size_t)FL_STORE_AUDIT_ENTRY_MAX * 2, &again, &len) ==
              FL_OK);
        CHECK(len == size && memcmp(again, data, size) == 0);
        fl__free(NULL, again, len + 1);
        CHECK(fl__store_audit_apply(e, &pop) == FL_OK);
    }
    (void)fl__store_audit_check(e, seq, NULL, why, sizeof(why), &budget);
    fl__store_audit_pop_free(&pop);
    json_decref(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char bundle_prefix[] = "{\"checkpoints\"";
    if (size >= sizeof(bundle_prefix) - 1 &&
        memcmp(data, bundle_prefix, sizeof(bundle_prefix) - 1) == 0) {
        fuzz_bundle(data, size);
        return 0;
    }
    fuzz_entry(data, size);
    int64_t tree_size = 0;
    uint8_t root[32];
    fl_status r =
        fl_store_audit_checkpoint_verify((const char *)data, size, FUZZ_VKEY, &tree_size, root);
    CHECK(r == FL_OK || r == FL_ERR_FORMAT || r == FL_ERR_CRYPTO);
    return 0;
}
