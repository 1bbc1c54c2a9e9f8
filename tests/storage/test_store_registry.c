/* Model registry: put/get round trips, content addressing and deduplication, lineage,
 * tags, immutability (API and triggers), and corruption detection on read. */
#include <sodium.h>

#include "test_store_util.h"

struct fixture {
    struct store_tdir dir;
    fl_store *st;
    int64_t pop;
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    store_tdir_make(&f->dir, "registry.db");
    f->st = store_open_ok(f->dir.path, NULL);
    STORE_OK(f->st, fl_store_population_create(f->st, &f->pop, "mnist", "{\"rounds\":10}", 3.0,
                                               1e-5, "[\"eu\",\"us\"]"));
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    fl_store_close(f->st);
    store_tdir_rm(&f->dir);
    free(f);
    return 0;
}

static void fill_pattern(uint8_t *buf, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
}

static void sha_hex(char out[65], const void *data, size_t n) {
    uint8_t h[32];
    crypto_hash_sha256(h, data, n);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static void test_put_get_round_trip(void **state) {
    struct fixture *f = *state;
    size_t n = 1 << 20;
    uint8_t *buf = malloc(n);
    fill_pattern(buf, n, 7);
    char want[65];
    sha_hex(want, buf, n);

    fl_store_model_ref ref;
    STORE_OK(f->st, fl_store_model_put(f->st, &ref, f->pop, 0, buf, n, "{\"arch\":\"cnn\"}"));
    assert_true(ref.version > 0);
    assert_int_equal(ref.existed, 0);
    assert_string_equal(ref.sha256_hex, want);

    fl_store_model *m = NULL;
    STORE_OK(f->st, fl_store_model_get(f->st, &m, ref.version));
    assert_int_equal(m->version, ref.version);
    assert_int_equal(m->parent, 0);
    assert_int_equal(m->population_id, f->pop);
    assert_string_equal(m->sha256_hex, want);
    assert_string_equal(m->metadata_json, "{\"arch\":\"cnn\"}");
    assert_int_equal(m->size, n);
    assert_true(m->created_at > 1600000000000LL);
    assert_int_equal((uintptr_t)m->bytes % 16, 0);
    assert_memory_equal(m->bytes, buf, n);
    fl_store_free(f->st, m);

    /* No population, no metadata: defaults. */
    STORE_OK(f->st, fl_store_model_put(f->st, &ref, 0, ref.version, "tiny", 4, NULL));
    STORE_OK(f->st, fl_store_model_get(f->st, &m, ref.version));
    assert_int_equal(m->population_id, 0);
    assert_int_equal(m->parent, ref.version - 1);
    assert_string_equal(m->metadata_json, "{}");
    assert_memory_equal(m->bytes, "tiny", 4);
    fl_store_free(f->st, m);
    free(buf);
}

static void test_identical_bytes_dedup(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref a, b, c, d;
    STORE_OK(f->st, fl_store_model_put(f->st, &a, f->pop, 0, "same bytes", 10, "{\"n\":1}"));
    /* Same bytes, same population: the first version comes back, nothing is written. */
    STORE_OK(f->st, fl_store_model_put(f->st, &b, f->pop, 0, "same bytes", 10, "{\"n\":2}"));
    assert_int_equal(b.existed, 1);
    assert_int_equal(b.version, a.version);
    assert_string_equal(b.sha256_hex, a.sha256_hex);
    fl_store_model *m = NULL;
    STORE_OK(f->st, fl_store_model_get(f->st, &m, a.version));
    assert_string_equal(m->metadata_json, "{\"n\":1}"); /* first put wins */
    fl_store_free(f->st, m);

    /* Another population (or none) gets its own version of the same bytes. */
    int64_t pop2;
    STORE_OK(f->st, fl_store_population_create(f->st, &pop2, "other", NULL, 1, 0, NULL));
    STORE_OK(f->st, fl_store_model_put(f->st, &c, pop2, 0, "same bytes", 10, NULL));
    assert_int_equal(c.existed, 0);
    assert_true(c.version > a.version);
    STORE_OK(f->st, fl_store_model_put(f->st, &d, 0, 0, "same bytes", 10, NULL));
    assert_int_equal(d.existed, 0);
    STORE_OK(f->st, fl_store_model_put(f->st, &b, 0, 0, "same bytes", 10, NULL));
    assert_int_equal(b.existed, 1);
    assert_int_equal(b.version, d.version);
    /* One differing byte is a new version. */
    STORE_OK(f->st, fl_store_model_put(f->st, &b, f->pop, 0, "same bytez", 10, NULL));
    assert_int_equal(b.existed, 0);
}

static void test_put_get_bad_arguments(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref ref;
    fl_store_model *m = (fl_store_model *)&ref;
    assert_int_equal(fl_store_model_put(NULL, &ref, 0, 0, "x", 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_put(f->st, NULL, 0, 0, "x", 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_put(f->st, &ref, 0, 0, NULL, 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_put(f->st, &ref, 0, 0, "x", 0, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_put(f->st, &ref, -1, 0, "x", 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_put(f->st, &ref, 0, -3, "x", 1, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_put(f->st, &ref, 999, 0, "x", 1, NULL), FL_ERR_NOT_FOUND);
    assert_non_null(strstr(fl_store_errmsg(f->st), "population 999"));
    assert_int_equal(fl_store_model_put(f->st, &ref, 0, 999, "x", 1, NULL), FL_ERR_NOT_FOUND);
    assert_non_null(strstr(fl_store_errmsg(f->st), "parent"));
    assert_int_equal(fl_store_model_put(f->st, &ref, 0, 0, "x", 1, "{not json"), FL_ERR_FORMAT);
    assert_non_null(strstr(fl_store_errmsg(f->st), "metadata_json"));
    assert_int_equal(ref.version, 0);

    assert_int_equal(fl_store_model_get(f->st, NULL, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_get(f->st, &m, 0), FL_ERR_MISUSE);
    assert_null(m);
    assert_int_equal(fl_store_model_get(f->st, &m, 12345), FL_ERR_NOT_FOUND);
    assert_null(m);

    /* Size limit from the config. */
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.max_model_bytes = 100;
    fl_store *small = NULL;
    STORE_OK(small, fl_store_open(&small, f->dir.path, &cfg));
    uint8_t big[101] = {0};
    assert_int_equal(fl_store_model_put(small, &ref, 0, 0, big, 101, NULL), FL_ERR_TOO_LARGE);
    STORE_OK(small, fl_store_model_put(small, &ref, 0, 0, big, 100, NULL));
    fl_store_close(small);

    /* Oversized JSON. */
    size_t jn = FL_STORE_JSON_MAX + 10;
    char *json = malloc(jn + 1);
    json[0] = '"';
    memset(json + 1, 'a', jn - 2);
    json[jn - 1] = '"';
    json[jn] = '\0';
    assert_int_equal(fl_store_model_put(f->st, &ref, 0, 0, "j", 1, json), FL_ERR_TOO_LARGE);
    free(json);
}

static void test_lineage(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref v[5];
    int64_t parent = 0;
    for (int i = 0; i < 5; i++) {
        char bytes[16], meta[32];
        snprintf(bytes, sizeof(bytes), "model-%d", i);
        snprintf(meta, sizeof(meta), "{\"gen\":%d}", i);
        STORE_OK(f->st,
                 fl_store_model_put(f->st, &v[i], f->pop, parent, bytes, strlen(bytes), meta));
        parent = v[i].version;
    }
    fl_store_model *chain = NULL;
    size_t n = 0;
    STORE_OK(f->st, fl_store_model_lineage(f->st, &chain, &n, v[4].version, 0));
    assert_int_equal(n, 5);
    for (size_t i = 0; i < n; i++) {
        char meta[32];
        assert_int_equal(chain[i].version, v[4 - i].version);
        assert_string_equal(chain[i].sha256_hex, v[4 - i].sha256_hex);
        snprintf(meta, sizeof(meta), "{\"gen\":%d}", (int)(4 - i));
        assert_string_equal(chain[i].metadata_json, meta);
        assert_null(chain[i].bytes);
        assert_int_equal(chain[i].size, 7);
        assert_int_equal(chain[i].parent, i + 1 < n ? chain[i + 1].version : 0);
    }
    fl_store_free(f->st, chain);

    STORE_OK(f->st, fl_store_model_lineage(f->st, &chain, &n, v[4].version, 2));
    assert_int_equal(n, 2);
    assert_int_equal(chain[1].version, v[3].version);
    fl_store_free(f->st, chain);

    STORE_OK(f->st, fl_store_model_lineage(f->st, &chain, &n, v[0].version, 0));
    assert_int_equal(n, 1);
    fl_store_free(f->st, chain);

    assert_int_equal(fl_store_model_lineage(f->st, &chain, &n, 9999, 0), FL_ERR_NOT_FOUND);
    assert_null(chain);
    assert_int_equal(n, 0);
    assert_int_equal(fl_store_model_lineage(f->st, NULL, &n, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_lineage(f->st, &chain, NULL, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_store_model_lineage(f->st, &chain, &n, -1, 0), FL_ERR_MISUSE);
}

static void test_tags(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref a, b;
    STORE_OK(f->st, fl_store_model_put(f->st, &a, f->pop, 0, "A", 1, NULL));
    STORE_OK(f->st, fl_store_model_put(f->st, &b, f->pop, a.version, "B", 1, NULL));
    int64_t v = -1;
    assert_int_equal(fl_store_tag_resolve(f->st, &v, "production"), FL_ERR_NOT_FOUND);
    assert_int_equal(v, 0);
    STORE_OK(f->st, fl_store_tag_set(f->st, "production", a.version));
    STORE_OK(f->st, fl_store_tag_resolve(f->st, &v, "production"));
    assert_int_equal(v, a.version);
    /* Tags move. */
    STORE_OK(f->st, fl_store_tag_set(f->st, "production", b.version));
    STORE_OK(f->st, fl_store_tag_set(f->st, "mnist/canary-1.0:x_y", a.version));
    STORE_OK(f->st, fl_store_tag_resolve(f->st, &v, "production"));
    assert_int_equal(v, b.version);
    STORE_OK(f->st, fl_store_tag_resolve(f->st, &v, "mnist/canary-1.0:x_y"));
    assert_int_equal(v, a.version);
    /* Delete. */
    STORE_OK(f->st, fl_store_tag_delete(f->st, "production"));
    assert_int_equal(fl_store_tag_resolve(f->st, &v, "production"), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_tag_delete(f->st, "production"), FL_ERR_NOT_FOUND);
    /* The versions themselves are untouched. */
    fl_store_model *m = NULL;
    STORE_OK(f->st, fl_store_model_get(f->st, &m, b.version));
    fl_store_free(f->st, m);

    /* Bad arguments. */
    char longname[FL_STORE_NAME_MAX + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(fl_store_tag_set(f->st, longname, a.version), FL_ERR_MISUSE);
    longname[FL_STORE_NAME_MAX] = '\0';
    STORE_OK(f->st, fl_store_tag_set(f->st, longname, a.version));
    assert_int_equal(fl_store_tag_set(f->st, "", a.version), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_set(f->st, NULL, a.version), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_set(f->st, "has space", a.version), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_set(f->st, "quote'", a.version), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_set(f->st, "ok", 0), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_set(f->st, "ok", 777), FL_ERR_NOT_FOUND);
    assert_int_equal(fl_store_tag_resolve(f->st, NULL, "ok"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_resolve(f->st, &v, "bad name"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_tag_delete(f->st, NULL), FL_ERR_MISUSE);
}

static void test_immutable_through_sql(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref a;
    STORE_OK(f->st, fl_store_model_put(f->st, &a, f->pop, 0, "frozen", 6, "{\"k\":1}"));
    sqlite3 *raw = store_raw_open(f->dir.path);
    const char *attacks[] = {
        "UPDATE models SET metadata_json = '{\"k\":2}'",
        "UPDATE models SET bytes = x'00'",
        "UPDATE models SET version = version + 100",
        "DELETE FROM models",
        "INSERT OR REPLACE INTO models (version, sha256, metadata_json, created_at, size, bytes) "
        "SELECT version, sha256, '{}', created_at, size, bytes FROM models",
        /* Same content, new version number: REPLACE would drop the old row via the
         * content index. */
        "INSERT OR REPLACE INTO models (version, population_id, sha256, metadata_json, "
        "created_at, size, bytes) SELECT version + 1000, population_id, sha256, '{}', "
        "created_at, size, bytes FROM models",
    };
    for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++) {
        int rc = sqlite3_exec(raw, attacks[i], NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            fail_msg("'%s' was allowed", attacks[i]);
        if (!strstr(sqlite3_errmsg(raw), "immutable"))
            fail_msg("'%s' failed for another reason: %s", attacks[i], sqlite3_errmsg(raw));
    }
    sqlite3_close(raw);
    fl_store_model *m = NULL;
    STORE_OK(f->st, fl_store_model_get(f->st, &m, a.version));
    assert_string_equal(m->metadata_json, "{\"k\":1}");
    assert_memory_equal(m->bytes, "frozen", 6);
    fl_store_free(f->st, m);
    assert_int_equal(fl_store_check(f->st), FL_OK);
}

static void test_corruption_detected_on_read(void **state) {
    struct fixture *f = *state;
    fl_store_model_ref a, b;
    STORE_OK(f->st, fl_store_model_put(f->st, &a, f->pop, 0, "good bytes", 10, NULL));
    STORE_OK(f->st, fl_store_model_put(f->st, &b, f->pop, 0, "other bytes", 11, NULL));
    assert_int_equal(fl_store_check(f->st), FL_OK);
    /* Tamper behind the library's back: drop the guard, flip the stored bytes. */
    sqlite3 *raw = store_raw_open(f->dir.path);
    assert_int_equal(sqlite3_exec(raw,
                                  "DROP TRIGGER models_immutable_update;"
                                  "UPDATE models SET bytes = CAST('evil bytes' AS BLOB) "
                                  "WHERE version = (SELECT min(version) FROM models);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(raw);
    fl_store_model *m = (fl_store_model *)&a;
    assert_int_equal(fl_store_model_get(f->st, &m, a.version), FL_ERR_CORRUPT);
    assert_null(m); /* nothing is returned */
    assert_non_null(strstr(fl_store_errmsg(f->st), "SHA-256"));
    /* Other versions stay readable; the full check names the problem. */
    STORE_OK(f->st, fl_store_model_get(f->st, &m, b.version));
    fl_store_free(f->st, m);
    assert_int_equal(fl_store_check(f->st), FL_ERR_CORRUPT);
    assert_non_null(strstr(fl_store_errmsg(f->st), "does not match"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_identical_bytes_dedup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_get_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lineage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_immutable_through_sql, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_detected_on_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
