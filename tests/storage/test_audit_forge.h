#ifndef FL_TEST_AUDIT_FORGE_H
#define FL_TEST_AUDIT_FORGE_H
/* Bundles as a dishonest operator holding the signing key could publish them, for the
 * verifier tests: the entry lines given, one checkpoint over all of them signed with the
 * fixture's real key, and a one-call verifier over a bundle held in memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_internal.h"
#include "test_audit_util.h"

/* Verifies a bundle held in memory: FL_OK or the failure, with the verdict (v may be NULL
 * when only the status matters). */
static inline fl_status audit_bundle_check(const uint8_t *buf, size_t len, const char *vkey,
                                           fl_store_audit_verdict *v) {
    fl_store_audit_bundle *b = NULL;
    fl_status r = fl_store_audit_bundle_open(&b, buf, len, NULL);
    if (r == FL_OK)
        r = fl_store_audit_bundle_verify(b, vkey, v);
    else if (v)
        snprintf(v->message, sizeof(v->message), "%s", fl_store_audit_bundle_errmsg(b));
    fl_store_audit_bundle_close(b);
    return r;
}

/* Runs the verifier's entry rules on m (a doctored entry, consumed) as entry idx after the
 * population state before: want NULL = it must pass, else the refusal must name want. */
static inline void audit_rule_expect(json_t *m, int64_t idx,
                                     const struct fl__store_audit_pop *before,
                                     const char *want) {
    char why[256] = "";
    int budget = 0;
    int r = fl__store_audit_check(m, idx, before, why, sizeof(why), &budget);
    char *s = json_dumps(m, FL__AUDIT_JSON_FLAGS);
    if (!want && r != 0)
        fail_msg("refused (%s): %s", why, s);
    if (want && (r == 0 || !strstr(why, want)))
        fail_msg("%s with \"%s\", want \"%s\": %s", r ? "refused" : "accepted", why, want, s);
    free(s);
    json_decref(m);
}

/* MTH of n leaf hashes (RFC 9162 2.1.1), straight from the definition. */
static inline void audit_mth(uint8_t out[32], uint8_t (*leaves)[32], size_t n) {
    if (n == 1) {
        memcpy(out, leaves[0], 32);
        return;
    }
    size_t k = 1;
    while (k * 2 < n)
        k *= 2;
    uint8_t buf[65];
    buf[0] = 1;
    audit_mth(buf + 1, leaves, k);
    audit_mth(buf + 33, leaves + k, n - k);
    crypto_hash_sha256(out, buf, 65);
}

/* A bundle of the n (<= 64) entry lines with one checkpoint over them, signed with f's key;
 * malloc'ed, *len its size. */
static inline uint8_t *audit_bundle_resign(const struct audit_fx *f, char **entries, size_t n,
                                           size_t *len) {
    size_t cap = 1 << 16, at = 0;
    uint8_t *out = malloc(cap);
    char vkey[256];
    uint8_t leaves[64][32], root[32];
    assert_non_null(out);
    assert_true(n >= 1 && n <= 64);
    STORE_OK(f->st, fl_store_audit_vkey(vkey, sizeof(vkey), AUDIT_ORIGIN, f->pk));
    at += (size_t)snprintf((char *)out, cap,
                           "{\"checkpoints\":1,\"entries\":%zu,\"format\":\"flotilla-audit-"
                           "bundle/1\",\"origin\":\"%s\",\"public_key\":\"%s\"}\n",
                           n, AUDIT_ORIGIN, vkey);
    for (size_t i = 0; i < n; i++) {
        size_t el = strlen(entries[i]);
        assert_true(at + el + 1 < cap);
        memcpy(out + at, entries[i], el);
        at += el;
        out[at++] = '\n';
        fl_store_audit_leaf_hash(leaves[i], entries[i], el);
    }
    audit_mth(root, leaves, n);
    char *note = NULL;
    size_t nl = 0;
    assert_int_equal(
        fl__store_audit_note_sign(NULL, AUDIT_ORIGIN, (int64_t)n, root, f->sk, &note, &nl), FL_OK);
    json_t *line = json_pack("{s:s}", "checkpoint", note);
    char *text = json_dumps(line, FL__AUDIT_JSON_FLAGS);
    at += (size_t)snprintf((char *)out + at, cap - at, "%s\n", text);
    free(text);
    json_decref(line);
    fl__free(NULL, note, nl + 1);
    *len = at;
    return out;
}

#endif /* FL_TEST_AUDIT_FORGE_H */
