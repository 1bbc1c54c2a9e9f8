/* Coverage of the audit verifier's refusal paths that the bundle and Merkle tests do not
 * reach: every malformed part of a signed checkpoint note and of a verifier key is refused
 * with the documented code, and the Merkle proof code passes a failing hash source's error
 * through, refuses a too-small proof buffer, and rejects proofs of the wrong shape. */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "audit_internal.h"
#include "fl_test.h"
#include "merkle_internal.h"

#define ORIGIN "cov.example/log"

struct note_env {
    uint8_t pk[32], sk[64], pk2[32], sk2[64];
    char vkey[256];
    char *note;
    size_t len;
    uint8_t root[32];
};

static void env_init(struct note_env *e) {
    uint8_t seed[32];
    memset(seed, 7, sizeof(seed));
    crypto_sign_seed_keypair(e->pk, e->sk, seed);
    memset(seed, 8, sizeof(seed));
    crypto_sign_seed_keypair(e->pk2, e->sk2, seed);
    assert_int_equal(fl_store_audit_vkey(e->vkey, sizeof(e->vkey), ORIGIN, e->pk), FL_OK);
    memset(e->root, 0x5a, sizeof(e->root));
    assert_int_equal(fl__store_audit_note_sign(NULL, ORIGIN, 42, e->root, e->sk, &e->note,
                                               &e->len),
                     FL_OK);
}

static void env_free(struct note_env *e) { fl__free(NULL, e->note, e->len + 1); }

/* Verifies a copy of the note with bytes [at, at + n) replaced by rep (m bytes). */
static fl_status verify_edit(const struct note_env *e, size_t at, size_t n, const char *rep) {
    char buf[1024];
    size_t m = strlen(rep);
    assert_true(at + n <= e->len && e->len - n + m < sizeof(buf));
    memcpy(buf, e->note, at);
    memcpy(buf + at, rep, m);
    memcpy(buf + at + m, e->note + at + n, e->len - at - n);
    return fl_store_audit_checkpoint_verify(buf, e->len - n + m, e->vkey, NULL, NULL);
}

static void test_origin_and_vkey(void **state) {
    (void)state;
    struct note_env e;
    env_init(&e);
    char out[256], big[FL_STORE_AUDIT_ORIGIN_MAX + 2];
    /* origins */
    assert_int_equal(fl__store_audit_origin_ok(NULL), 0);
    assert_int_equal(fl__store_audit_origin_ok(""), 0);
    assert_int_equal(fl__store_audit_origin_ok("a b"), 0);
    assert_int_equal(fl__store_audit_origin_ok("a+b"), 0);
    assert_int_equal(fl__store_audit_origin_ok("a\x7f"), 0);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(fl__store_audit_origin_ok(big), 0);
    big[FL_STORE_AUDIT_ORIGIN_MAX] = '\0';
    assert_int_equal(fl__store_audit_origin_ok(big), 1);
    /* making a key */
    assert_int_equal(fl_store_audit_vkey(NULL, 10, ORIGIN, e.pk), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_vkey(out, sizeof(out), ORIGIN, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_vkey(out, sizeof(out), "bad origin", e.pk), FL_ERR_MISUSE);
    out[0] = 'x';
    assert_int_equal(fl_store_audit_vkey(out, 8, ORIGIN, e.pk), FL_ERR_RANGE);
    assert_int_equal(out[0], '\0');
    assert_int_equal(fl_store_audit_vkey(out, 0, ORIGIN, e.pk), FL_ERR_RANGE);
    /* parsing one: each part wrong in turn */
    char name[FL_STORE_AUDIT_ORIGIN_MAX + 1];
    uint8_t pk[32];
    assert_int_equal(fl__store_audit_vkey_parse(e.vkey, name, sizeof(name), pk), FL_OK);
    assert_string_equal(name, ORIGIN);
    assert_memory_equal(pk, e.pk, 32);
    assert_int_equal(fl__store_audit_vkey_parse(NULL, name, sizeof(name), pk), FL_ERR_FORMAT);
    assert_int_equal(fl__store_audit_vkey_parse("no-plus-here", name, sizeof(name), pk),
                     FL_ERR_FORMAT);
    size_t ol = strlen(ORIGIN), vl = strlen(e.vkey);
    char v[300];
    snprintf(v, sizeof(v), "%s", e.vkey + ol); /* empty name */
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    assert_int_equal(fl__store_audit_vkey_parse(e.vkey, name, 4, pk), FL_ERR_FORMAT);
    snprintf(v, sizeof(v), "%sA", e.vkey); /* one character too many */
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    snprintf(v, sizeof(v), "%s", e.vkey);
    v[ol + 9] = '-'; /* second '+' missing */
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    snprintf(v, sizeof(v), "%s", e.vkey);
    v[0] = ' '; /* name not a valid origin */
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    snprintf(v, sizeof(v), "%s", e.vkey);
    v[vl - 2] = '!'; /* not base64 */
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    /* key type byte other than 0x01 */
    uint8_t key[33];
    key[0] = 0x02;
    memcpy(key + 1, e.pk, 32);
    char b64[64];
    sodium_bin2base64(b64, sizeof(b64), key, sizeof(key), sodium_base64_VARIANT_ORIGINAL);
    snprintf(v, sizeof(v), "%.*s%s", (int)(vl - strlen(b64)), e.vkey, b64);
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    snprintf(v, sizeof(v), "%s", e.vkey);
    v[ol + 1] = v[ol + 1] == '0' ? '1' : '0'; /* key id does not match the key */
    assert_int_equal(fl__store_audit_vkey_parse(v, name, sizeof(name), pk), FL_ERR_FORMAT);
    env_free(&e);
}

static void test_note_refusals(void **state) {
    (void)state;
    struct note_env e;
    env_init(&e);
    int64_t size = 0;
    uint8_t root[32];
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, e.len, e.vkey, &size, root), FL_OK);
    assert_int_equal(size, 42);
    assert_memory_equal(root, e.root, 32);
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, e.len, e.vkey, NULL, NULL), FL_OK);
    assert_int_equal(fl_store_audit_checkpoint_verify(NULL, 0, e.vkey, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, e.len, NULL, NULL, NULL),
                     FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, e.len, "bad", NULL, NULL),
                     FL_ERR_FORMAT);
    size_t ol = strlen(ORIGIN);
    /* line 1: no newline at all, another origin */
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, ol, e.vkey, NULL, NULL),
                     FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, 0, 1, "d"), FL_ERR_FORMAT);
    /* line 2: the size "42" at ol + 1 */
    size_t s = ol + 1;
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, s + 2, e.vkey, NULL, NULL),
                     FL_ERR_FORMAT);                              /* no newline */
    assert_int_equal(verify_edit(&e, s, 2, ""), FL_ERR_FORMAT);    /* empty */
    assert_int_equal(verify_edit(&e, s, 2, "042"), FL_ERR_FORMAT); /* leading zero */
    assert_int_equal(verify_edit(&e, s, 2, "1234567890123456789"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, s, 2, "4x"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, s, 2, "43"), FL_ERR_CRYPTO); /* well formed, unsigned */
    /* line 3: the root, 44 base64 characters at s + 3 */
    size_t r = s + 3;
    assert_int_equal(fl_store_audit_checkpoint_verify(e.note, r + 10, e.vkey, NULL, NULL),
                     FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, r, 44, "AAAA"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, r + 42, 1, "B"), FL_ERR_FORMAT); /* not canonical */
    assert_int_equal(verify_edit(&e, r, 1, "!"), FL_ERR_FORMAT);
    /* the signature block: blank line, em dash, space, origin, space, base64, newline */
    size_t b = r + 45;
    assert_int_equal(verify_edit(&e, b, 1, "x"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, b + 1, 1, "-"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, b + 5, 1, "d"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, b + 5 + ol, 1, "_"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, e.len - 1, 1, " "), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, e.len - 5, 1, "!"), FL_ERR_FORMAT);
    assert_int_equal(verify_edit(&e, e.len - 1, 0, "\n"), FL_ERR_FORMAT); /* too long */
    /* signed by another key under the same origin: the key id differs */
    char *other = NULL;
    size_t olen = 0;
    assert_int_equal(fl__store_audit_note_sign(NULL, ORIGIN, 42, e.root, e.sk2, &other, &olen),
                     FL_OK);
    assert_int_equal(fl_store_audit_checkpoint_verify(other, olen, e.vkey, NULL, NULL),
                     FL_ERR_CRYPTO);
    fl__free(NULL, other, olen + 1);
    env_free(&e);
}

/* A hash source over an in-memory tree that fails its fail_at-th call. */
struct failing_src {
    struct fl__store_merkle_mem *t;
    int calls, fail_at;
};

static fl_status failing_get(void *ctx, unsigned level, uint64_t idx, uint8_t out[32]) {
    struct failing_src *f = ctx;
    if (++f->calls == f->fail_at)
        return FL_ERR_IO;
    struct fl__store_merkle_src s = fl__store_merkle_mem_src(f->t);
    return s.get(s.ctx, level, idx, out);
}

static void test_merkle_errors(void **state) {
    (void)state;
    struct fl__store_merkle_mem t;
    fl__store_merkle_mem_init(&t, NULL);
    uint8_t leaf[32];
    for (int i = 0; i < 23; i++) {
        memset(leaf, i, sizeof(leaf));
        assert_int_equal(fl__store_merkle_mem_append(&t, leaf), FL_OK);
    }
    uint8_t proof[FL__MERKLE_MAX_PROOF][32], root[32];
    size_t count = 0;
    /* Every call of the source failing in turn: the error comes back unchanged. */
    for (int which = 0; which < 3; which++) {
        int saw_ok = 0;
        for (int k = 1; k < 64 && !saw_ok; k++) {
            struct failing_src f = {&t, 0, k};
            struct fl__store_merkle_src src = {failing_get, &f};
            fl_status rc;
            if (which == 0)
                rc = fl__store_merkle_inclusion(&src, 13, 23, proof, FL__MERKLE_MAX_PROOF,
                                                &count);
            else if (which == 1)
                rc = fl__store_merkle_consistency(&src, 7, 23, proof, FL__MERKLE_MAX_PROOF,
                                                  &count);
            else
                rc = fl__store_merkle_root(&src, 23, root);
            assert_true(rc == FL_ERR_IO || (rc == FL_OK && f.calls < k));
            saw_ok = rc == FL_OK;
        }
        assert_true(saw_ok);
    }
    /* Buffers one hash too small, and bad arguments. */
    struct fl__store_merkle_src src = fl__store_merkle_mem_src(&t);
    assert_int_equal(fl__store_merkle_inclusion(&src, 13, 23, proof, FL__MERKLE_MAX_PROOF,
                                                &count),
                     FL_OK);
    size_t need = count;
    assert_int_equal(fl__store_merkle_inclusion(&src, 13, 23, proof, need - 1, &count),
                     FL_ERR_RANGE);
    assert_int_equal(fl__store_merkle_inclusion(&src, 23, 23, proof, 64, &count), FL_ERR_RANGE);
    assert_int_equal(fl__store_merkle_consistency(&src, 7, 23, proof, 64, &count), FL_OK);
    need = count;
    assert_int_equal(fl__store_merkle_consistency(&src, 7, 23, proof, need - 1, &count),
                     FL_ERR_RANGE);
    assert_int_equal(fl__store_merkle_consistency(&src, 24, 23, proof, 64, &count),
                     FL_ERR_RANGE);
    /* The memory source refuses what it does not hold. */
    assert_int_equal(src.get(src.ctx, 64, 0, root), FL_ERR_INTERNAL);
    assert_int_equal(src.get(src.ctx, 0, 23, root), FL_ERR_INTERNAL);
    assert_int_equal(src.get(src.ctx, 4, 2, root), FL_ERR_INTERNAL);
    /* A tree at its maximum size takes no more leaves. */
    uint64_t real = t.size;
    t.size = UINT64_MAX >> 1;
    assert_int_equal(fl__store_merkle_mem_append(&t, leaf), FL_ERR_RANGE);
    t.size = real;
    /* Proofs of the wrong shape. */
    uint8_t r23[32], r7[32];
    assert_int_equal(fl__store_merkle_root(&src, 23, r23), FL_OK);
    assert_int_equal(fl__store_merkle_root(&src, 7, r7), FL_OK);
    assert_int_equal(fl__store_merkle_inclusion(&src, 13, 23, proof, 64, &count), FL_OK);
    memset(leaf, 13, sizeof(leaf));
    uint8_t lh[32];
    memcpy(lh, t.level[0] + 13 * 32, 32);
    assert_int_equal(fl_store_audit_verify_inclusion(lh, 13, 23, (const uint8_t(*)[32])proof,
                                                     count, r23),
                     FL_OK);
    memcpy(proof[count], proof[0], 32); /* one hash too many */
    assert_int_equal(fl_store_audit_verify_inclusion(lh, 13, 23, (const uint8_t(*)[32])proof,
                                                     count + 1, r23),
                     FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_inclusion(lh, 13, 23, (const uint8_t(*)[32])proof,
                                                     count - 1, r23),
                     FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_inclusion(lh, 23, 23, (const uint8_t(*)[32])proof,
                                                     count, r23),
                     FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_inclusion(NULL, 13, 23, NULL, 0, r23), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_inclusion(lh, -1, 23, NULL, 0, r23), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_inclusion(lh, 0, 1, NULL, 1, r23), FL_ERR_MISUSE);
    assert_int_equal(fl__store_merkle_consistency(&src, 7, 23, proof, 64, &count), FL_OK);
    assert_int_equal(fl_store_audit_verify_consistency(7, 23, (const uint8_t(*)[32])proof, count,
                                                       r7, r23),
                     FL_OK);
    memcpy(proof[count], proof[0], 32);
    assert_int_equal(fl_store_audit_verify_consistency(7, 23, (const uint8_t(*)[32])proof,
                                                       count + 1, r7, r23),
                     FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_consistency(7, 23, NULL, 0, r7, r23), FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_consistency(23, 7, NULL, 0, r7, r23), FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_consistency(7, 7, NULL, 0, r7, r23), FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_consistency(7, 7, NULL, 0, r7, r7), FL_OK);
    assert_int_equal(fl_store_audit_verify_consistency(0, 7, NULL, 0, r7, r7), FL_OK);
    assert_int_equal(fl_store_audit_verify_consistency(0, 7, (const uint8_t(*)[32])proof, 1, r7,
                                                       r7),
                     FL_ERR_CRYPTO);
    assert_int_equal(fl_store_audit_verify_consistency(-1, 7, NULL, 0, r7, r7), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_verify_consistency(1, 7, NULL, 0, NULL, r7), FL_ERR_MISUSE);
    fl__store_merkle_mem_free(&t);
    fl__store_merkle_mem_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_origin_and_vkey),
        cmocka_unit_test(test_note_refusals),
        cmocka_unit_test(test_merkle_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
