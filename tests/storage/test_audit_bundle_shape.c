/* The offline verifier on bundles whose shape is wrong although every checkpoint is
 * validly signed (what an operator holding the key could publish): header fields missing,
 * mistyped or inconsistent with the lines, checkpoint lines of the wrong form, checkpoint
 * sizes that do not grow or do not cover the entries, an oversized entry; plus the bundle
 * API's argument checks and accessors, and a log with more populations than the verifier's
 * first allocation holds. */
#include "audit_internal.h"
#include "merkle_internal.h"
#include "test_audit_util.h"

struct src {
    struct audit_fx f;
    char vkey[256];
    char *e[16]; /* canonical entries from a real log */
    size_t n;
};

static void src_make(struct src *s) {
    memset(s, 0, sizeof(*s));
    audit_fx_setup(&s->f, 3);
    STORE_OK(s->f.st, audit_fx_round(&s->f, 0, 0.5, NULL));
    STORE_OK(s->f.st, audit_fx_round(&s->f, 1, 0.5, NULL));
    STORE_OK(s->f.st, fl_store_audit_vkey(s->vkey, sizeof(s->vkey), AUDIT_ORIGIN, s->f.pk));
    int64_t n = 0;
    STORE_OK(s->f.st, fl_store_audit_size(s->f.st, &n));
    assert_int_equal(n, 4);
    for (int64_t i = 0; i < n; i++) {
        fl_store_audit_entry *x = NULL;
        STORE_OK(s->f.st, fl_store_audit_entry_get(s->f.st, &x, i));
        s->e[i] = strdup(x->json);
        fl_store_free(s->f.st, x);
    }
    s->n = (size_t)n;
}

static void src_free(struct src *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i]);
    audit_fx_teardown(&s->f);
}

/* Signed checkpoint line for the first size entries (root computed from the bytes; a size
 * above n signs the root of all n, so that only the size is wrong). */
static char *cp_line(const struct src *s, int64_t size) {
    struct fl__store_merkle_mem t;
    fl__store_merkle_mem_init(&t, NULL);
    for (int64_t i = 0; i < size && (size_t)i < s->n; i++) {
        uint8_t leaf[32];
        fl_store_audit_leaf_hash(leaf, s->e[i], strlen(s->e[i]));
        assert_int_equal(fl__store_merkle_mem_append(&t, leaf), FL_OK);
    }
    uint8_t root[32];
    struct fl__store_merkle_src ms = fl__store_merkle_mem_src(&t);
    assert_int_equal(fl__store_merkle_root(&ms, t.size, root), FL_OK);
    fl__store_merkle_mem_free(&t);
    char *note = NULL;
    size_t nl = 0;
    assert_int_equal(fl__store_audit_note_sign(NULL, AUDIT_ORIGIN, size, root, s->f.sk, &note, &nl),
                     FL_OK);
    json_t *line = json_pack("{s:s}", "checkpoint", note);
    char *text = json_dumps(line, FL__AUDIT_JSON_FLAGS);
    json_decref(line);
    fl__free(NULL, note, nl + 1);
    return text;
}

/* The header of an honest bundle with n entries and m checkpoints, as a Jansson object. */
static json_t *header(const struct src *s, size_t n, size_t m) {
    return json_pack("{s:I,s:I,s:s,s:s,s:s}", "checkpoints", (json_int_t)m, "entries",
                     (json_int_t)n, "format", "flotilla-audit-bundle/1", "origin", AUDIT_ORIGIN,
                     "public_key", s->vkey);
}

struct buf {
    char *p;
    size_t len, cap;
};

static void put(struct buf *b, const char *text) {
    size_t n = strlen(text);
    if (b->len + n + 2 > b->cap) {
        b->cap = (b->len + n + 2) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, text, n);
    b->len += n;
    b->p[b->len++] = '\n';
}

/* Header h (consumed), the n entries, then the given checkpoint lines (consumed). */
static struct buf assemble(const struct src *s, json_t *h, size_t n, char **cps, size_t m) {
    struct buf b = {NULL, 0, 0};
    char *ht = json_dumps(h, FL__AUDIT_JSON_FLAGS);
    put(&b, ht);
    free(ht);
    json_decref(h);
    for (size_t i = 0; i < n; i++)
        put(&b, s->e[i]);
    for (size_t i = 0; i < m; i++) {
        put(&b, cps[i]);
        free(cps[i]);
    }
    return b;
}

/* Opens and verifies b; returns the first failure, with the message in msg. */
static fl_status verify(struct buf *b, char *msg, size_t cap, fl_store_audit_verdict *v) {
    fl_store_audit_bundle *h = NULL;
    fl_store_audit_verdict local;
    if (!v)
        v = &local;
    fl_status r = fl_store_audit_bundle_open(&h, b->p, b->len, NULL);
    if (r == FL_OK) {
        r = fl_store_audit_bundle_verify(h, NULL, v);
        snprintf(msg, cap, "%s", v->message);
    } else {
        snprintf(msg, cap, "%s", fl_store_audit_bundle_errmsg(h));
    }
    fl_store_audit_bundle_close(h);
    free(b->p);
    b->p = NULL;
    return r;
}

#define EXPECT_BUNDLE(b, code, text)                                                               \
    do {                                                                                           \
        char m_[600];                                                                              \
        fl_status r_ = verify(&(b), m_, sizeof(m_), NULL);                                         \
        if (r_ != (code) || !strstr(m_, (text)))                                                   \
            fail_msg("got %s \"%s\", want %s \"%s\"", fl_status_name(r_), m_,                      \
                     fl_status_name(code), (text));                                                \
    } while (0)

static void test_honest_baseline(void **state) {
    (void)state;
    struct src s;
    src_make(&s);
    char *cps[2] = {cp_line(&s, 2), cp_line(&s, 4)};
    struct buf b = assemble(&s, header(&s, 4, 2), 4, cps, 2);
    EXPECT_BUNDLE(b, FL_OK, "VERIFIED: 4 entries, 2 checkpoints");
    src_free(&s);
}

static void test_header_fields(void **state) {
    (void)state;
    struct src s;
    src_make(&s);
    const char *need = "header: needs exactly checkpoints, entries, format, origin, public_key";
    struct {
        const char *key;
        json_t *value; /* NULL: remove the key */
    } edits[] = {
        {"format", NULL},                     /* four fields */
        {"origin", json_integer(1)},          /* not a string */
        {"public_key", json_null()},          /* not a string */
        {"format", json_array()},             /* not a string */
        {"entries", json_string("4")},        /* not an integer */
        {"checkpoints", json_string("1")},    /* not an integer */
        {"zz", json_integer(0)},              /* a sixth field */
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        json_t *h = header(&s, 4, 1);
        if (edits[i].value)
            json_object_set_new(h, edits[i].key, edits[i].value);
        else
            json_object_del(h, edits[i].key);
        char *cps[1] = {cp_line(&s, 4)};
        struct buf b = assemble(&s, h, 4, cps, 1);
        EXPECT_BUNDLE(b, FL_ERR_FORMAT, need);
    }
    /* Five fields, one of them renamed. */
    json_t *h = header(&s, 4, 1);
    json_object_del(h, "format");
    json_object_set_new(h, "formats", json_string("flotilla-audit-bundle/1"));
    char *cps[1] = {cp_line(&s, 4)};
    struct buf b = assemble(&s, h, 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, need);
    /* Counts that do not describe the lines. */
    cps[0] = cp_line(&s, 4);
    b = assemble(&s, header(&s, 0, 5), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "is not the number of lines (or 0)");
    cps[0] = cp_line(&s, 4);
    b = assemble(&s, header(&s, 5, 0), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "is not the number of lines (or 0)");
    /* A bad origin; a public key too long to be one. */
    h = header(&s, 4, 1);
    json_object_set_new(h, "origin", json_string("bad origin"));
    cps[0] = cp_line(&s, 4);
    b = assemble(&s, h, 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "header: bad origin or public_key");
    char longkey[300];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    h = header(&s, 4, 1);
    json_object_set_new(h, "public_key", json_string(longkey));
    cps[0] = cp_line(&s, 4);
    b = assemble(&s, h, 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "header: bad origin or public_key");
    src_free(&s);
}

static void test_checkpoint_lines(void **state) {
    (void)state;
    struct src s;
    src_make(&s);
    /* {"checkpoint": 1} and {"checkpoint": note, "x": 1} */
    char *cps[2];
    cps[0] = strdup("{\"checkpoint\":1}");
    struct buf b = assemble(&s, header(&s, 4, 1), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "checkpoint 0: line is not {\"checkpoint\": note}");
    char *good = cp_line(&s, 4);
    json_t *j = json_loads(good, 0, NULL);
    free(good);
    json_object_set_new(j, "x", json_integer(1));
    cps[0] = json_dumps(j, FL__AUDIT_JSON_FLAGS);
    json_decref(j);
    b = assemble(&s, header(&s, 4, 1), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "checkpoint 0: line is not {\"checkpoint\": note}");
    /* Sizes that do not grow: 2 then 2, and a first checkpoint of size 0. */
    cps[0] = cp_line(&s, 2);
    cps[1] = cp_line(&s, 2);
    b = assemble(&s, header(&s, 4, 2), 4, cps, 2);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "checkpoint 1: tree size 2 does not grow");
    cps[0] = cp_line(&s, 0);
    cps[1] = cp_line(&s, 4);
    b = assemble(&s, header(&s, 4, 2), 4, cps, 2);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "checkpoint 0: tree size 0 does not grow");
    /* The last checkpoint does not cover every entry (or covers more than there are). */
    cps[0] = cp_line(&s, 3);
    b = assemble(&s, header(&s, 4, 1), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "the last checkpoint covers 3 entries, the bundle has 4");
    cps[0] = cp_line(&s, 5);
    b = assemble(&s, header(&s, 4, 1), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "the last checkpoint covers 5 entries, the bundle has 4");
    /* A checkpoint whose signed root is not the entries' root. */
    cps[0] = cp_line(&s, 2);
    char *e1 = s.e[1];
    s.e[1] = s.e[0];
    cps[1] = cp_line(&s, 4); /* signed over a log with entry 1 replaced */
    s.e[1] = e1;
    b = assemble(&s, header(&s, 4, 2), 4, cps, 2);
    EXPECT_BUNDLE(b, FL_ERR_CRYPTO, "checkpoint 1 (size 4) does not match the entries");
    src_free(&s);
}

static void test_oversized_entry(void **state) {
    (void)state;
    struct src s;
    src_make(&s);
    /* Entry 3 padded past 64 KiB inside a string: still canonical JSON. */
    size_t big = FL_STORE_AUDIT_ENTRY_MAX + 10;
    char *e = malloc(big + 1);
    json_t *j = json_loads(s.e[3], 0, NULL);
    char *pad = malloc(big);
    memset(pad, 'x', big - 1);
    pad[big - 1] = '\0';
    json_object_set_new(j, "coordinator", json_string(pad));
    char *t = json_dumps(j, FL__AUDIT_JSON_FLAGS);
    json_decref(j);
    free(pad);
    free(e);
    free(s.e[3]);
    s.e[3] = t;
    assert_true(strlen(t) > FL_STORE_AUDIT_ENTRY_MAX);
    char *cps[1] = {cp_line(&s, 4)};
    struct buf b = assemble(&s, header(&s, 4, 1), 4, cps, 1);
    EXPECT_BUNDLE(b, FL_ERR_FORMAT, "entry 3 is longer than 65536 bytes");
    src_free(&s);
}

static void test_api_and_accessors(void **state) {
    (void)state;
    struct src s;
    src_make(&s);
    char *cps[1] = {cp_line(&s, 4)};
    struct buf b = assemble(&s, header(&s, 4, 1), 4, cps, 1);
    fl_store_audit_bundle *h = NULL;
    /* Argument checks. */
    assert_int_equal(fl_store_audit_bundle_open(NULL, b.p, b.len, NULL), FL_ERR_MISUSE);
    fl_allocator bad = {0};
    assert_int_equal(fl_store_audit_bundle_open(&h, b.p, b.len, &bad), FL_ERR_MISUSE);
    assert_null(h);
    assert_int_equal(fl_store_audit_bundle_open(&h, NULL, 10, NULL), FL_ERR_MISUSE);
    assert_string_equal(fl_store_audit_bundle_errmsg(h), "bytes is NULL");
    /* A failed handle reports nothing and verifies as failed. */
    assert_int_equal(fl_store_audit_bundle_entry_count(h), 0);
    assert_int_equal(fl_store_audit_bundle_checkpoint_count(h), 0);
    assert_null(fl_store_audit_bundle_entry(h, 0, NULL));
    assert_null(fl_store_audit_bundle_checkpoint(h, 0, NULL));
    assert_string_equal(fl_store_audit_bundle_origin(h), "");
    assert_string_equal(fl_store_audit_bundle_vkey(h), "");
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_verify(h, NULL, &v), FL_ERR_MISUSE);
    assert_int_equal(v.ok, 0);
    assert_int_equal(v.bad_line, 1);
    assert_non_null(strstr(v.message, "bytes is NULL"));
    fl_store_audit_bundle_close(h);
    h = NULL;
    /* NULL handle. */
    assert_int_equal(fl_store_audit_bundle_verify(NULL, NULL, &v), FL_ERR_MISUSE);
    assert_string_equal(fl_store_audit_bundle_errmsg(NULL), "bundle handle is NULL");
    assert_int_equal(fl_store_audit_bundle_entry_count(NULL), 0);
    assert_int_equal(fl_store_audit_bundle_checkpoint_count(NULL), 0);
    assert_null(fl_store_audit_bundle_entry(NULL, 0, NULL));
    assert_null(fl_store_audit_bundle_checkpoint(NULL, 0, NULL));
    assert_string_equal(fl_store_audit_bundle_origin(NULL), "");
    assert_string_equal(fl_store_audit_bundle_vkey(NULL), "");
    fl_store_audit_bundle_close(NULL);
    /* A good handle: accessors, with and without a length out, in and out of range. */
    assert_int_equal(fl_store_audit_bundle_open(&h, b.p, b.len, NULL), FL_OK);
    assert_int_equal(fl_store_audit_bundle_entry_count(h), 4);
    assert_int_equal(fl_store_audit_bundle_checkpoint_count(h), 1);
    size_t len = 0;
    const char *p = fl_store_audit_bundle_entry(h, 3, &len);
    assert_non_null(p);
    assert_int_equal(len, strlen(s.e[3]));
    assert_memory_equal(p, s.e[3], len);
    assert_non_null(fl_store_audit_bundle_entry(h, 0, NULL));
    assert_null(fl_store_audit_bundle_entry(h, 4, &len));
    p = fl_store_audit_bundle_checkpoint(h, 0, &len);
    assert_non_null(p);
    assert_memory_equal(p, "{\"checkpoint\":", 14);
    assert_non_null(fl_store_audit_bundle_checkpoint(h, 0, NULL));
    assert_null(fl_store_audit_bundle_checkpoint(h, 1, &len));
    assert_string_equal(fl_store_audit_bundle_origin(h), AUDIT_ORIGIN);
    assert_string_equal(fl_store_audit_bundle_vkey(h), s.vkey);
    /* The verdict is optional. */
    assert_int_equal(fl_store_audit_bundle_verify(h, s.vkey, NULL), FL_OK);
    fl_store_audit_bundle_close(h);
    free(b.p);
    src_free(&s);
}

/* More populations than the verifier's first table holds (8): its table grows. */
static void test_many_populations(void **state) {
    (void)state;
    struct audit_fx f;
    audit_fx_setup(&f, 2);
    for (int i = 0; i < 12; i++) {
        char name[16];
        int64_t id = 0;
        snprintf(name, sizeof(name), "pop-%02d", i);
        STORE_OK(f.st, fl_store_population_create(f.st, &id, name, "{}", 1, 0, "[]"));
        STORE_OK(f.st, fl_store_audit_append_population(f.st, NULL, id));
        STORE_OK(f.st, fl_store_audit_append_refusal(f.st, NULL, id, 1, 2.0, 0));
    }
    STORE_OK(f.st, fl_store_audit_checkpoint_sign(f.st, NULL, AUDIT_ORIGIN, f.sk));
    uint8_t *buf = NULL;
    size_t len = 0;
    STORE_OK(f.st, fl_store_audit_export(f.st, &buf, &len));
    fl_store_audit_bundle *b = NULL;
    fl_store_audit_verdict v;
    assert_int_equal(fl_store_audit_bundle_open(&b, buf, len, NULL), FL_OK);
    assert_int_equal(fl_store_audit_bundle_verify(b, NULL, &v), FL_OK);
    assert_int_equal(v.entries, 2 + 24);
    fl_store_audit_bundle_close(b);
    fl_store_free(f.st, buf);
    audit_fx_teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honest_baseline),  cmocka_unit_test(test_header_fields),
        cmocka_unit_test(test_checkpoint_lines), cmocka_unit_test(test_oversized_entry),
        cmocka_unit_test(test_api_and_accessors), cmocka_unit_test(test_many_populations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
