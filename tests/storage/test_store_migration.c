#include <stdio.h>
/* Schema versions: upgrade of a v1 database built here with raw SQL (as the first release
 * wrote it), of a v3 one (clients stay active after the revocation column arrives), of a
 * v4 one (client_identities arrives empty and usable) and of a v5 one (participant rows
 * keep no participation hash, new ones carry theirs),
 * atomicity of a failing migration, refusal of a newer database, and several
 * processes opening (and so migrating) one fresh file at once. */
#include <signal.h>
#include <sodium.h>
#include <sys/wait.h>

#include "test_store_util.h"

/* The v1 schema exactly as release 1 created it. Kept here, independent of the library's
 * copy, so a change to the released migration text is caught. */
/* Pseudonym key of the audited revocation in the version-3 upgrade test. */
static const uint8_t revoke_key[FL_STORE_AUDIT_PSEUDONYM_KEY_BYTES] = {3};

static const char v1_schema[] =
    "PRAGMA application_id = 1179406164;"
    "CREATE TABLE populations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE CHECK "
    "(length(name) BETWEEN 1 AND 128), config_json TEXT NOT NULL, epsilon REAL NOT NULL CHECK "
    "(epsilon > 0), delta REAL NOT NULL CHECK (delta >= 0 AND delta < 1), allowed_regions_json "
    "TEXT NOT NULL, created_at INTEGER NOT NULL, state INTEGER NOT NULL DEFAULT 0 CHECK (state "
    "IN (0, 1, 2)));"
    "CREATE TABLE clients (id INTEGER PRIMARY KEY, client_id TEXT NOT NULL UNIQUE, token_sha256 "
    "BLOB NOT NULL CHECK (length(token_sha256) = 32), region TEXT NOT NULL, population_id "
    "INTEGER NOT NULL REFERENCES populations(id), enrolled_at INTEGER NOT NULL, last_seen "
    "INTEGER NOT NULL);"
    "CREATE INDEX clients_population ON clients(population_id);"
    "CREATE TABLE models (version INTEGER PRIMARY KEY, parent INTEGER REFERENCES "
    "models(version), population_id INTEGER REFERENCES populations(id), sha256 BLOB NOT NULL "
    "CHECK (length(sha256) = 32), metadata_json TEXT NOT NULL, created_at INTEGER NOT NULL, "
    "size INTEGER NOT NULL CHECK (size > 0), bytes BLOB NOT NULL);"
    "CREATE UNIQUE INDEX models_content ON models(ifnull(population_id, 0), sha256);"
    "CREATE INDEX models_parent ON models(parent);"
    "CREATE TRIGGER models_immutable_update BEFORE UPDATE ON models BEGIN SELECT "
    "RAISE(ABORT, 'model versions are immutable'); END;"
    "CREATE TRIGGER models_immutable_delete BEFORE DELETE ON models BEGIN SELECT "
    "RAISE(ABORT, 'model versions are immutable'); END;"
    "CREATE TRIGGER models_immutable_replace BEFORE INSERT ON models WHEN EXISTS (SELECT 1 "
    "FROM models WHERE version = NEW.version) OR EXISTS (SELECT 1 FROM models WHERE "
    "ifnull(population_id, 0) = ifnull(NEW.population_id, 0) AND sha256 = NEW.sha256) BEGIN "
    "SELECT RAISE(ABORT, 'model versions are immutable'); END;"
    "CREATE TABLE tags (name TEXT PRIMARY KEY, version INTEGER NOT NULL REFERENCES "
    "models(version), updated_at INTEGER NOT NULL);"
    "CREATE INDEX tags_version ON tags(version);"
    "CREATE TABLE rounds (id INTEGER PRIMARY KEY, population_id INTEGER NOT NULL REFERENCES "
    "populations(id), round_number INTEGER NOT NULL CHECK (round_number >= 1), state INTEGER "
    "NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2, 3)), config_json TEXT NOT NULL, base_version "
    "INTEGER REFERENCES models(version), result_version INTEGER REFERENCES models(version), "
    "created_at INTEGER NOT NULL, started_at INTEGER, ended_at INTEGER, checked_in INTEGER NOT "
    "NULL DEFAULT 0 CHECK (checked_in >= 0), selected INTEGER NOT NULL DEFAULT 0 CHECK "
    "(selected >= 0), completed INTEGER NOT NULL DEFAULT 0 CHECK (completed >= 0), dropped "
    "INTEGER NOT NULL DEFAULT 0 CHECK (dropped >= 0), abandon_reason TEXT, UNIQUE "
    "(population_id, round_number));"
    "CREATE INDEX rounds_base ON rounds(base_version);"
    "CREATE INDEX rounds_result ON rounds(result_version);"
    "CREATE TABLE round_participants (round_id INTEGER NOT NULL REFERENCES rounds(id), "
    "client_id TEXT NOT NULL REFERENCES clients(client_id), state INTEGER NOT NULL CHECK (state "
    "IN (0, 1, 2, 3)), updated_at INTEGER NOT NULL, PRIMARY KEY (round_id, client_id)) WITHOUT "
    "ROWID;"
    "CREATE INDEX round_participants_client ON round_participants(client_id);"
    "PRAGMA user_version = 1;";

static void exec_ok(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err ? err : "?");
}

/* Inserts a model row the way v1 did (hash computed here). */
static void insert_v1_model(sqlite3 *db, int64_t version, int64_t parent, const char *bytes) {
    uint8_t h[32];
    size_t n = strlen(bytes);
    crypto_hash_sha256(h, (const uint8_t *)bytes, n);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO models VALUES (?1, ?2, 1, ?3, '{\"v1\":true}',"
                                        " 1600000000000, ?4, ?5)",
                                        -1, &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(s, 1, version);
    if (parent)
        sqlite3_bind_int64(s, 2, parent);
    sqlite3_bind_blob(s, 3, h, 32, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)n);
    sqlite3_bind_blob(s, 5, bytes, (int)n, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
}

static void make_v1_database(const char *path) {
    sqlite3 *db = store_raw_open(path);
    exec_ok(db, "BEGIN");
    exec_ok(db, v1_schema);
    exec_ok(db, "INSERT INTO populations VALUES (1, 'legacy', '{\"old\":1}', 2.5, 1e-7, "
                "'[\"eu\"]', 1600000000000, 0)");
    exec_ok(db, "INSERT INTO clients VALUES (1, 'old-client', zeroblob(32), 'eu', 1, "
                "1600000000000, 1600000000000)");
    insert_v1_model(db, 1, 0, "legacy weights v1");
    insert_v1_model(db, 2, 1, "legacy weights v2");
    exec_ok(db, "INSERT INTO tags VALUES ('production', 2, 1600000000000)");
    exec_ok(db, "INSERT INTO rounds (id, population_id, round_number, state, config_json, "
                "base_version, result_version, created_at) VALUES (7, 1, 1, 2, '{}', 1, 2, "
                "1600000000000)");
    exec_ok(db, "INSERT INTO round_participants VALUES (7, 'old-client', 2, 1600000000000)");
    exec_ok(db, "COMMIT");
    assert_int_equal(store_raw_int(db, "PRAGMA user_version"), 1);
    sqlite3_close(db);
}

/* The schema of the file at path as one string, whitespace removed, objects by name. */
static char *schema_fingerprint(const char *path) {
    sqlite3 *db = store_raw_open(path);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT group_concat(type || ':' || name || ':' || "
                                        "replace(replace(ifnull(sql, ''), ' ', ''), char(10), ''),"
                                        " '|') FROM (SELECT * FROM sqlite_schema ORDER BY name)",
                                        -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    char *out = strdup((const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

static void test_upgrade_v1_to_current(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "v1.db");
    make_v1_database(t.path);

    fl_store *st = store_open_ok(t.path, NULL);
    /* Schema upgraded... */
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE name = "
                                        "'privacy_ledger'"),
                     1);
    sqlite3_close(raw);
    /* ...old data intact and readable through the API... */
    int64_t v = 0;
    STORE_OK(st, fl_store_tag_resolve(st, &v, "production"));
    assert_int_equal(v, 2);
    fl_store_model *m = NULL;
    STORE_OK(st, fl_store_model_get(st, &m, 2));
    assert_memory_equal(m->bytes, "legacy weights v2", m->size);
    assert_int_equal(m->parent, 1);
    assert_string_equal(m->metadata_json, "{\"v1\":true}");
    fl_store_free(st, m);
    fl_store_population *p = NULL;
    STORE_OK(st, fl_store_population_find(st, &p, "legacy"));
    assert_true(p->epsilon == 2.5);
    fl_store_free(st, p);
    fl_store_participant *parts = NULL;
    size_t n = 0;
    STORE_OK(st, fl_store_participant_list(st, &parts, &n, 7));
    assert_int_equal(n, 1);
    assert_string_equal(parts[0].client_id, "old-client");
    fl_store_free(st, parts);
    /* ...and the new table usable with the old rows. */
    fl_store_ledger_entry e;
    memset(&e, 0, sizeof(e));
    e.population_id = 1;
    e.round_id = 7;
    e.mechanism = "gaussian";
    e.sampling_rate = 0.5;
    e.noise_multiplier = 1.0;
    e.clip_norm = 1.0;
    e.steps = 1;
    e.participants = 1;
    STORE_OK(st, fl_store_ledger_append(st, NULL, &e));
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, 1, 2, "new weights", 11, NULL));
    assert_int_equal(ref.version, 3);
    /* Dedup works on rows v1 wrote. */
    STORE_OK(st, fl_store_model_put(st, &ref, 1, 0, "legacy weights v1", 17, NULL));
    assert_int_equal(ref.existed, 1);
    assert_int_equal(ref.version, 1);
    assert_int_equal(fl_store_check(st), FL_OK);
    fl_store_close(st);

    /* An upgraded file has exactly the schema of a freshly created one. */
    struct store_tdir fresh;
    store_tdir_make(&fresh, "fresh.db");
    st = store_open_ok(fresh.path, NULL);
    fl_store_close(st);
    char *a = schema_fingerprint(t.path), *b = schema_fingerprint(fresh.path);
    assert_string_equal(a, b);
    free(a);
    free(b);
    store_tdir_rm(&fresh);
    store_tdir_rm(&t);
}

/* Migration 6 undone by raw SQL, inside the caller's transaction: round_participants loses
 * participation_hash, exactly its v5 shape. */
static void undo_migration_6(sqlite3 *db) {
    exec_ok(db, "ALTER TABLE round_participants DROP COLUMN participation_hash");
}

/* A version-3 file: a fresh store with migrations 6, 5 and 4 undone by raw SQL (no
 * client_identities, and the clients table loses revoked_at: exactly its v3 shape), holding a
 * client written the way v3 wrote it. */
static void make_v3_database(const char *path, const char *token, size_t token_len) {
    fl_store *st = store_open_ok(path, NULL);
    int64_t pop = 0;
    STORE_OK(st, fl_store_population_create(st, &pop, "legacy", NULL, 2.5, 1e-7, NULL));
    STORE_OK(st, fl_store_client_enroll(st, "api-client", token, token_len, "eu", pop));
    fl_store_close(st);
    sqlite3 *db = store_raw_open(path);
    exec_ok(db, "BEGIN");
    undo_migration_6(db);
    exec_ok(db, "DROP TABLE client_identities"); /* migration 5 undone */
    exec_ok(db, "ALTER TABLE clients DROP COLUMN revoked_at");
    exec_ok(db, "PRAGMA user_version = 3");
    /* Seven columns, as v3 inserted them. */
    exec_ok(db, "INSERT INTO clients VALUES (9, 'old-client', zeroblob(32), 'eu', 1, "
                "1600000000000, 1600000000000)");
    exec_ok(db, "COMMIT");
    assert_int_equal(store_raw_int(db, "SELECT count(*) FROM pragma_table_info('clients') "
                                       "WHERE name = 'revoked_at'"),
                     0);
    sqlite3_close(db);
}

static void test_upgrade_v3_keeps_clients_active(void **state) {
    (void)state;
    static const char token[] = "v3-client-token-0123456789";
    struct store_tdir t;
    store_tdir_make(&t, "v3.db");
    make_v3_database(t.path, token, sizeof(token) - 1);

    fl_store *st = store_open_ok(t.path, NULL);
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM clients WHERE revoked_at IS NULL"),
                     2);
    sqlite3_close(raw);
    /* Every old client is active and still authenticates... */
    const char *ids[] = {"api-client", "old-client"};
    for (int i = 0; i < 2; i++) {
        fl_store_client *c = NULL;
        STORE_OK(st, fl_store_client_get(st, &c, ids[i]));
        assert_int_equal(c->revoked_at, 0);
        assert_int_equal(c->population_id, 1);
        fl_store_free(st, c);
    }
    STORE_OK(st, fl_store_client_authenticate(st, "api-client", token, sizeof(token) - 1));
    /* ...and can be revoked and reinstated on the new column. */
    int64_t at = 0;
    STORE_OK(st, fl_store_client_revoke(st, &at, NULL, "old-client", 1700000000000, revoke_key));
    assert_int_equal(at, 1700000000000);
    STORE_OK(st, fl_store_client_reinstate(st, NULL, "old-client", revoke_key));
    assert_int_equal(fl_store_check(st), FL_OK);
    fl_store_close(st);

    /* The upgraded file has exactly the schema of a fresh one. */
    struct store_tdir fresh;
    store_tdir_make(&fresh, "fresh.db");
    st = store_open_ok(fresh.path, NULL);
    fl_store_close(st);
    char *a = schema_fingerprint(t.path), *b = schema_fingerprint(fresh.path);
    assert_string_equal(a, b);
    free(a);
    free(b);
    store_tdir_rm(&fresh);
    store_tdir_rm(&t);
}

/* A version-4 file: a fresh store with migrations 6 and 5 undone by raw SQL (no
 * client_identities), holding a revoked client and an active one, as v4 wrote them. */
static void make_v4_database(const char *path, const char *token, size_t token_len) {
    fl_store *st = store_open_ok(path, NULL);
    int64_t pop = 0;
    STORE_OK(st, fl_store_population_create(st, &pop, "legacy", NULL, 2.5, 1e-7, NULL));
    STORE_OK(st, fl_store_client_enroll(st, "v4-client", token, token_len, "eu", pop));
    STORE_OK(st, fl_store_client_enroll(st, "v4-revoked", token, token_len, "eu", pop));
    STORE_OK(st, fl_store_client_revoke(st, NULL, NULL, "v4-revoked", 1700000000000, revoke_key));
    fl_store_close(st);
    sqlite3 *db = store_raw_open(path);
    exec_ok(db, "BEGIN");
    undo_migration_6(db);
    exec_ok(db, "DROP TABLE client_identities");
    exec_ok(db, "PRAGMA user_version = 4");
    exec_ok(db, "COMMIT");
    sqlite3_close(db);
}

static void test_upgrade_v4_adds_identities(void **state) {
    (void)state;
    static const char token[] = "v4-client-token-0123456789";
    struct store_tdir t;
    store_tdir_make(&t, "v4.db");
    make_v4_database(t.path, token, sizeof(token) - 1);

    fl_store *st = store_open_ok(t.path, NULL);
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM client_identities"), 0);
    sqlite3_close(raw);
    /* Old clients are intact (the revoked one still revoked) and have no identity... */
    fl_store_client *c = NULL;
    STORE_OK(st, fl_store_client_get(st, &c, "v4-revoked"));
    assert_int_equal(c->revoked_at, 1700000000000);
    fl_store_free(st, c);
    STORE_OK(st, fl_store_client_authenticate(st, "v4-client", token, sizeof(token) - 1));
    fl_store_client_identity id, got;
    assert_int_equal(fl_store_client_identity_get(st, &got, "v4-client"), FL_ERR_NOT_FOUND);
    /* ...and can be given one on the new table, with its constraints. */
    memset(&id, 0x42, sizeof(id));
    STORE_OK(st, fl_store_client_identity_put(st, "v4-client", &id));
    STORE_OK(st, fl_store_client_identity_get(st, &got, "v4-client"));
    assert_memory_equal(&got, &id, sizeof(id));
    assert_int_equal(fl_store_client_identity_put(st, "v4-revoked", &id), FL_ERR_EXISTS);
    assert_int_equal(fl_store_check(st), FL_OK);
    fl_store_close(st);

    /* The upgraded file has exactly the schema of a fresh one. */
    struct store_tdir fresh;
    store_tdir_make(&fresh, "fresh.db");
    st = store_open_ok(fresh.path, NULL);
    fl_store_close(st);
    char *a = schema_fingerprint(t.path), *b = schema_fingerprint(fresh.path);
    assert_string_equal(a, b);
    free(a);
    free(b);
    store_tdir_rm(&fresh);
    store_tdir_rm(&t);
}

/* A version-5 file: a fresh store with migration 6 undone by raw SQL, holding a completed
 * round with two participants (one written through the API, one by a four-column INSERT,
 * as v5 wrote them) and an open round with one. */
static void make_v5_database(const char *path) {
    fl_store *st = store_open_ok(path, NULL);
    int64_t pop = 0, r1 = 0, r2 = 0;
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_population_create(st, &pop, "legacy", NULL, 2.5, 1e-7, NULL));
    const char *ids[] = {"v5-a", "v5-b", "v5-c"};
    for (int i = 0; i < 3; i++)
        STORE_OK(st, fl_store_client_enroll(st, ids[i], "v5-client-token-0123", 20, "eu", pop));
    STORE_OK(st, fl_store_model_put(st, &ref, pop, 0, "v5 weights", 10, NULL));
    STORE_OK(st, fl_store_round_create(st, &r1, pop, 0, ref.version, NULL));
    STORE_OK(st, fl_store_participant_set(st, r1, "v5-a", FL_STORE_PARTICIPANT_SELECTED));
    STORE_OK(st, fl_store_round_create(st, &r2, pop, 0, ref.version, NULL));
    STORE_OK(st, fl_store_participant_set(st, r2, "v5-c", FL_STORE_PARTICIPANT_SELECTED));
    fl_store_close(st);
    assert_int_equal(r1, 1);
    assert_int_equal(r2, 2);
    sqlite3 *db = store_raw_open(path);
    exec_ok(db, "BEGIN");
    undo_migration_6(db);
    exec_ok(db, "PRAGMA user_version = 5");
    exec_ok(db, "INSERT INTO round_participants VALUES (1, 'v5-b', 3, 1600000000000)");
    exec_ok(db, "UPDATE rounds SET state = 2, result_version = 1, ended_at = 1600000000000 "
                "WHERE id = 1");
    exec_ok(db, "COMMIT");
    sqlite3_close(db);
}

static void test_upgrade_v5_adds_participation_hash(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "v5.db");
    make_v5_database(t.path);

    fl_store *st = store_open_ok(t.path, NULL);
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM round_participants WHERE "
                                        "participation_hash IS NULL"),
                     3);
    sqlite3_close(raw);
    /* Old rows are intact and have no hash... */
    uint8_t h[FL_STORE_PARTICIPATION_HASH_BYTES], want[FL_STORE_PARTICIPATION_HASH_BYTES];
    uint8_t zero[FL_STORE_PARTICIPATION_HASH_BYTES] = {0};
    int has = -1;
    fl_store_participant *p = NULL;
    STORE_OK(st, fl_store_participant_get_v2(st, &p, h, &has, 1, "v5-b"));
    assert_int_equal(p->state, FL_STORE_PARTICIPANT_DROPPED);
    assert_int_equal(p->updated_at, 1600000000000);
    assert_int_equal(has, 0);
    assert_memory_equal(h, zero, sizeof(h));
    fl_store_free(st, p);
    STORE_OK(st, fl_store_participant_get_v2(st, &p, h, &has, 1, "v5-a"));
    assert_int_equal(p->state, FL_STORE_PARTICIPANT_SELECTED);
    assert_int_equal(has, 0);
    fl_store_free(st, p);
    /* ...an old row of a round still open keeps none when its state moves... */
    STORE_OK(st, fl_store_participant_set(st, 2, "v5-c", FL_STORE_PARTICIPANT_COMPLETED));
    STORE_OK(st, fl_store_participant_get_v2(st, &p, h, &has, 2, "v5-c"));
    assert_int_equal(has, 0);
    fl_store_free(st, p);
    /* ...and rows written now carry their hash, with the column's constraint. */
    memset(want, 0x5a, sizeof(want));
    STORE_OK(st, fl_store_participant_set_v2(st, 2, "v5-a", FL_STORE_PARTICIPANT_SELECTED, want));
    STORE_OK(st, fl_store_participant_get_v2(st, &p, h, &has, 2, "v5-a"));
    assert_int_equal(has, 1);
    assert_memory_equal(h, want, sizeof(h));
    fl_store_free(st, p);
    assert_int_equal(fl_store_check(st), FL_OK);
    fl_store_close(st);
    raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM round_participants WHERE "
                                        "participation_hash IS NULL"),
                     3);
    assert_int_not_equal(sqlite3_exec(raw,
                                      "UPDATE round_participants SET participation_hash = "
                                      "zeroblob(16) WHERE client_id = 'v5-a'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    sqlite3_close(raw);

    /* The upgraded file has exactly the schema of a fresh one. */
    struct store_tdir fresh;
    store_tdir_make(&fresh, "fresh.db");
    st = store_open_ok(fresh.path, NULL);
    fl_store_close(st);
    char *a = schema_fingerprint(t.path), *b = schema_fingerprint(fresh.path);
    assert_string_equal(a, b);
    free(a);
    free(b);
    store_tdir_rm(&fresh);
    store_tdir_rm(&t);
}

/* Migration 6 fails as a whole on a v5 file that already has a column of that name (an
 * operator's experiment): the version stays 5 and the file is as it was. */
static void test_failed_migration_6_is_rolled_back(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "v5-conflict.db");
    make_v5_database(t.path);
    sqlite3 *raw = store_raw_open(t.path);
    exec_ok(raw, "ALTER TABLE round_participants ADD COLUMN participation_hash TEXT");
    sqlite3_close(raw);
    char *before = schema_fingerprint(t.path);

    fl_store *st = NULL;
    assert_int_not_equal(fl_store_open(&st, t.path, NULL), FL_OK);
    assert_non_null(strstr(fl_store_errmsg(st), "migration"));
    fl_store_close(st);
    raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), 5);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM round_participants"), 3);
    sqlite3_close(raw);
    char *after = schema_fingerprint(t.path);
    assert_string_equal(before, after);
    free(before);
    free(after);
    store_tdir_rm(&t);
}

static void test_failed_migration_is_rolled_back(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "v1-conflict.db");
    make_v1_database(t.path);
    /* Someone created a table migration 2 needs: the migration must fail as a whole. */
    sqlite3 *raw = store_raw_open(t.path);
    exec_ok(raw, "CREATE TABLE obstacle (x)");
    exec_ok(raw, "CREATE INDEX privacy_ledger_round ON obstacle(x)");
    sqlite3_close(raw);

    fl_store *st = NULL;
    fl_status r = fl_store_open(&st, t.path, NULL);
    assert_int_not_equal(r, FL_OK);
    assert_non_null(strstr(fl_store_errmsg(st), "migration"));
    fl_store_close(st);

    raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), 1);
    /* The statements before the failing one were undone too. */
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE name = "
                                        "'privacy_ledger'"),
                     0);
    exec_ok(raw, "DROP TABLE obstacle");
    sqlite3_close(raw);
    /* With the obstacle gone the upgrade goes through. */
    st = store_open_ok(t.path, NULL);
    fl_store_close(st);
    store_tdir_rm(&t);
}

static void test_newer_database_refused(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "future.db");
    make_v1_database(t.path);
    sqlite3 *raw = store_raw_open(t.path);
    char sql[64], want[32];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", FL_STORE_SCHEMA_VERSION + 1);
    snprintf(want, sizeof(want), "version %d", FL_STORE_SCHEMA_VERSION + 1);
    exec_ok(raw, sql);
    sqlite3_close(raw);

    fl_store *st = NULL;
    assert_int_equal(fl_store_open(&st, t.path, NULL), FL_ERR_UNSUPPORTED);
    assert_non_null(st);
    assert_non_null(strstr(fl_store_errmsg(st), "newer"));
    assert_non_null(strstr(fl_store_errmsg(st), want));
    fl_store_close(st);

    /* Untouched: same version, same journal mode, no ledger table added. */
    raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION + 1);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE name = "
                                        "'privacy_ledger'"),
                     0);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "delete");
    sqlite3_finalize(s);
    sqlite3_close(raw);
    store_tdir_rm(&t);
}

static void test_concurrent_first_open(void **state) {
    (void)state;
    struct store_tdir t;
    store_tdir_make(&t, "race.db");
    enum { KIDS = 4 };
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            fl_store *st = NULL;
            int code = 0;
            fl_status r = fl_store_open(&st, t.path, NULL);
            if (r != FL_OK) {
                fprintf(stderr, "child %d: open: %s: %s\n", i, fl_status_name(r),
                        fl_store_errmsg(st));
                code = 1;
            } else {
                char bytes[8];
                fl_store_model_ref ref;
                snprintf(bytes, sizeof(bytes), "kid-%d", i);
                if (fl_store_model_put(st, &ref, 0, 0, bytes, strlen(bytes), NULL) != FL_OK)
                    code = 2;
            }
            fl_store_close(st);
            _exit(code);
        }
    }
    for (int i = 0; i < KIDS; i++) {
        int status = 0;
        assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    sqlite3 *raw = store_raw_open(t.path);
    assert_int_equal(store_raw_int(raw, "SELECT count(*) FROM models"), KIDS);
    assert_int_equal(store_raw_int(raw, "PRAGMA user_version"), FL_STORE_SCHEMA_VERSION);
    sqlite3_close(raw);
    store_tdir_rm(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upgrade_v1_to_current),
        cmocka_unit_test(test_upgrade_v3_keeps_clients_active),
        cmocka_unit_test(test_upgrade_v4_adds_identities),
        cmocka_unit_test(test_upgrade_v5_adds_participation_hash),
        cmocka_unit_test(test_failed_migration_6_is_rolled_back),
        cmocka_unit_test(test_failed_migration_is_rolled_back),
        cmocka_unit_test(test_newer_database_refused),
        cmocka_unit_test(test_concurrent_first_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
