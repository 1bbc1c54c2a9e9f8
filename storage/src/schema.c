/* Schema and migrations.
 *
 * The schema version lives in PRAGMA user_version; PRAGMA application_id marks the file
 * as a Flotilla store. Migration N takes a database from version N-1 to N and runs in one
 * write transaction together with the user_version bump, so a crash leaves either the old
 * or the new schema, never a mix. Migrations are append-only: once released, a migration's
 * text never changes (databases in the field were built from it).
 *
 * JSON columns are validated in C before every write (json_valid through a prepared
 * statement), not by CHECK constraints: connections run with trusted_schema off, under
 * which SQLite 3.40 refuses json_valid() inside the schema. */

#include <string.h>

#include "store_internal.h"

/* 'FLOT' */
#define FL__STORE_APPLICATION_ID 0x464C4F54

/* v1: populations, clients, immutable model versions, tags, rounds, participants. */
static const char fl__store_migration_1[] =
    "PRAGMA application_id = 1179406164;\n"
    "CREATE TABLE populations (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),\n"
    "  config_json TEXT NOT NULL,\n"
    "  epsilon REAL NOT NULL CHECK (epsilon > 0),\n"
    "  delta REAL NOT NULL CHECK (delta >= 0 AND delta < 1),\n"
    "  allowed_regions_json TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  state INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2))\n"
    ");\n"
    "CREATE TABLE clients (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  client_id TEXT NOT NULL UNIQUE,\n"
    "  token_sha256 BLOB NOT NULL CHECK (length(token_sha256) = 32),\n"
    "  region TEXT NOT NULL,\n"
    "  population_id INTEGER NOT NULL REFERENCES populations(id),\n"
    "  enrolled_at INTEGER NOT NULL,\n"
    "  last_seen INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX clients_population ON clients(population_id);\n"
    /* bytes is the last column so listings never read the blob's overflow pages. */
    "CREATE TABLE models (\n"
    "  version INTEGER PRIMARY KEY,\n"
    "  parent INTEGER REFERENCES models(version),\n"
    "  population_id INTEGER REFERENCES populations(id),\n"
    "  sha256 BLOB NOT NULL CHECK (length(sha256) = 32),\n"
    "  metadata_json TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  size INTEGER NOT NULL CHECK (size > 0),\n"
    "  bytes BLOB NOT NULL\n"
    ");\n"
    "CREATE UNIQUE INDEX models_content ON models(ifnull(population_id, 0), sha256);\n"
    "CREATE INDEX models_parent ON models(parent);\n"
    "CREATE TRIGGER models_immutable_update BEFORE UPDATE ON models\n"
    "BEGIN SELECT RAISE(ABORT, 'model versions are immutable'); END;\n"
    "CREATE TRIGGER models_immutable_delete BEFORE DELETE ON models\n"
    "BEGIN SELECT RAISE(ABORT, 'model versions are immutable'); END;\n"
    /* INSERT OR REPLACE deletes the conflicting row without firing DELETE triggers
     * (recursive_triggers is off), so refuse any insert that would conflict. */
    "CREATE TRIGGER models_immutable_replace BEFORE INSERT ON models\n"
    "WHEN EXISTS (SELECT 1 FROM models WHERE version = NEW.version)\n"
    "  OR EXISTS (SELECT 1 FROM models WHERE ifnull(population_id, 0) =\n"
    "             ifnull(NEW.population_id, 0) AND sha256 = NEW.sha256)\n"
    "BEGIN SELECT RAISE(ABORT, 'model versions are immutable'); END;\n"
    "CREATE TABLE tags (\n"
    "  name TEXT PRIMARY KEY,\n"
    "  version INTEGER NOT NULL REFERENCES models(version),\n"
    "  updated_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX tags_version ON tags(version);\n"
    "CREATE TABLE rounds (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  population_id INTEGER NOT NULL REFERENCES populations(id),\n"
    "  round_number INTEGER NOT NULL CHECK (round_number >= 1),\n"
    "  state INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2, 3)),\n"
    "  config_json TEXT NOT NULL,\n"
    "  base_version INTEGER REFERENCES models(version),\n"
    "  result_version INTEGER REFERENCES models(version),\n"
    "  created_at INTEGER NOT NULL,\n"
    "  started_at INTEGER,\n"
    "  ended_at INTEGER,\n"
    "  checked_in INTEGER NOT NULL DEFAULT 0 CHECK (checked_in >= 0),\n"
    "  selected INTEGER NOT NULL DEFAULT 0 CHECK (selected >= 0),\n"
    "  completed INTEGER NOT NULL DEFAULT 0 CHECK (completed >= 0),\n"
    "  dropped INTEGER NOT NULL DEFAULT 0 CHECK (dropped >= 0),\n"
    "  abandon_reason TEXT,\n"
    "  UNIQUE (population_id, round_number)\n"
    ");\n"
    "CREATE INDEX rounds_base ON rounds(base_version);\n"
    "CREATE INDEX rounds_result ON rounds(result_version);\n"
    "CREATE TABLE round_participants (\n"
    "  round_id INTEGER NOT NULL REFERENCES rounds(id),\n"
    "  client_id TEXT NOT NULL REFERENCES clients(client_id),\n"
    "  state INTEGER NOT NULL CHECK (state IN (0, 1, 2, 3)),\n"
    "  updated_at INTEGER NOT NULL,\n"
    "  PRIMARY KEY (round_id, client_id)\n"
    ") WITHOUT ROWID;\n"
    "CREATE INDEX round_participants_client ON round_participants(client_id);\n"
    "PRAGMA user_version = 1;\n";

/* v2: the append-only privacy ledger read by the DP accountant. */
static const char fl__store_migration_2[] =
    "CREATE TABLE privacy_ledger (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  population_id INTEGER NOT NULL REFERENCES populations(id),\n"
    "  round_id INTEGER REFERENCES rounds(id),\n"
    "  mechanism TEXT NOT NULL CHECK (length(mechanism) BETWEEN 1 AND 64),\n"
    "  sampling_rate REAL NOT NULL CHECK (sampling_rate > 0 AND sampling_rate <= 1),\n"
    "  noise_multiplier REAL NOT NULL CHECK (noise_multiplier >= 0),\n"
    "  clip_norm REAL NOT NULL CHECK (clip_norm > 0),\n"
    "  steps INTEGER NOT NULL CHECK (steps >= 1),\n"
    "  participants INTEGER NOT NULL CHECK (participants >= 0),\n"
    "  params_json TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX privacy_ledger_population ON privacy_ledger(population_id, id);\n"
    "CREATE INDEX privacy_ledger_round ON privacy_ledger(round_id);\n"
    "CREATE TRIGGER privacy_ledger_append_only_update BEFORE UPDATE ON privacy_ledger\n"
    "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;\n"
    "CREATE TRIGGER privacy_ledger_append_only_delete BEFORE DELETE ON privacy_ledger\n"
    "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;\n"
    "CREATE TRIGGER privacy_ledger_append_only_replace BEFORE INSERT ON privacy_ledger\n"
    "WHEN EXISTS (SELECT 1 FROM privacy_ledger WHERE id = NEW.id)\n"
    "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;\n"
    "PRAGMA user_version = 2;\n";

/* v3: the tamper-evident audit log (storage/src/audit.c, docs/audit.md): entries (canonical
 * JSON bytes, the Merkle leaves), the hashes of every complete subtree of the RFC 9162 tree
 * (level 0 = leaf hashes) so proofs are O(log n) reads, and signed checkpoints. All three
 * are append-only, like the model table: triggers refuse UPDATE, DELETE and INSERT OR
 * REPLACE. */
static const char fl__store_migration_3[] =
    "CREATE TABLE audit_entries (\n"
    "  seq INTEGER PRIMARY KEY CHECK (seq >= 0),\n"
    "  type TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 32),\n"
    "  population_id INTEGER REFERENCES populations(id),\n"
    "  created_at INTEGER NOT NULL,\n"
    "  data BLOB NOT NULL CHECK (length(data) BETWEEN 2 AND 65536)\n"
    ");\n"
    /* An append finds a population's latest entry of each type in O(log n). */
    "CREATE INDEX audit_entries_population ON audit_entries(population_id, type, seq);\n"
    "CREATE TABLE audit_tree (\n"
    "  level INTEGER NOT NULL CHECK (level BETWEEN 0 AND 63),\n"
    "  idx INTEGER NOT NULL CHECK (idx >= 0),\n"
    "  hash BLOB NOT NULL CHECK (length(hash) = 32),\n"
    "  PRIMARY KEY (level, idx)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE audit_checkpoints (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  tree_size INTEGER NOT NULL UNIQUE CHECK (tree_size >= 1),\n"
    "  root BLOB NOT NULL CHECK (length(root) = 32),\n"
    "  origin TEXT NOT NULL,\n"
    "  public_key BLOB NOT NULL CHECK (length(public_key) = 32),\n"
    "  note TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE TRIGGER audit_entries_append_only_update BEFORE UPDATE ON audit_entries\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_entries_append_only_delete BEFORE DELETE ON audit_entries\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_entries_append_only_replace BEFORE INSERT ON audit_entries\n"
    "WHEN EXISTS (SELECT 1 FROM audit_entries WHERE seq = NEW.seq)\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_tree_append_only_update BEFORE UPDATE ON audit_tree\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_tree_append_only_delete BEFORE DELETE ON audit_tree\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_tree_append_only_replace BEFORE INSERT ON audit_tree\n"
    "WHEN EXISTS (SELECT 1 FROM audit_tree WHERE level = NEW.level AND idx = NEW.idx)\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_checkpoints_append_only_update BEFORE UPDATE ON audit_checkpoints\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_checkpoints_append_only_delete BEFORE DELETE ON audit_checkpoints\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "CREATE TRIGGER audit_checkpoints_append_only_replace BEFORE INSERT ON audit_checkpoints\n"
    "WHEN EXISTS (SELECT 1 FROM audit_checkpoints WHERE id = NEW.id OR\n"
    "             tree_size = NEW.tree_size)\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;\n"
    "PRAGMA user_version = 3;\n";

/* v4: client revocation (fl_store_client_revoke). A nullable column rather than a table of
 * its own: the auth path already reads the client's row, so it learns the state in the same
 * lookup, and erasure and the retention sweep delete it with the row. Old rows read NULL,
 * so every client of a migrated database stays active. */
static const char fl__store_migration_4[] =
    "ALTER TABLE clients ADD COLUMN revoked_at INTEGER\n"
    "  CHECK (revoked_at IS NULL OR revoked_at > 0);\n"
    "PRAGMA user_version = 4;\n";

/* v5: device identities for secure aggregation in active mode (docs/protocol.md "Device
 * identities"): a client's Ed25519 verification key, the 32-byte device id its v2
 * certificate binds, and that certificate, written in the enrollment's transaction. One
 * device per population: UNIQUE (population_id, device_id) is what keeps one device from
 * enrolling as two clients. The row lives exactly as long as the client's: erasure and the
 * retention sweep delete the client, and ON DELETE CASCADE takes the identity with it in the
 * same statement (foreign keys are on); revocation keeps both, so a revoked device cannot
 * come back as a new client. population_id is a copy of the client's, for the constraint. */
static const char fl__store_migration_5[] =
    "CREATE TABLE client_identities (\n"
    "  client_id TEXT PRIMARY KEY REFERENCES clients(client_id) ON DELETE CASCADE,\n"
    "  population_id INTEGER NOT NULL REFERENCES populations(id),\n"
    "  device_id BLOB NOT NULL CHECK (length(device_id) = 32),\n"
    "  verify_key BLOB NOT NULL CHECK (length(verify_key) = 32),\n"
    "  cert BLOB NOT NULL CHECK (length(cert) = 64),\n"
    "  UNIQUE (population_id, device_id)\n"
    ") WITHOUT ROWID;\n"
    "PRAGMA user_version = 5;\n";

/* v6: the hash of each participant's participation id (fl_store_participant_set_v2), so a
 * device's status poll of a round answered from storage can be matched against the key
 * it was given (docs/protocol.md 5.3) without the id itself ever reaching the disk. A
 * nullable column: rows written before it read NULL and are checked on the client id alone,
 * as before. Erasure and the retention sweep delete it with the row. */
static const char fl__store_migration_6[] =
    "ALTER TABLE round_participants ADD COLUMN participation_hash BLOB\n"
    "  CHECK (participation_hash IS NULL OR length(participation_hash) = 32);\n"
    "PRAGMA user_version = 6;\n";

static const char *const fl__store_migrations[FL_STORE_SCHEMA_VERSION] = {
    fl__store_migration_1,
    fl__store_migration_2,
    fl__store_migration_3,
    fl__store_migration_4,
    fl__store_migration_5,
    fl__store_migration_6,
};

/* Reads user_version, application_id and the number of schema objects in one statement, so
 * the three come from one snapshot even while another process is migrating the file. */
static fl_status read_header(fl_store *st, int64_t *version, int64_t *app, int64_t *objects) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT (SELECT user_version FROM pragma_user_version), "
                                "(SELECT application_id FROM pragma_application_id), "
                                "(SELECT count(*) FROM sqlite_schema)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *version = sqlite3_column_int64(s, 0);
            *app = sqlite3_column_int64(s, 1);
            *objects = sqlite3_column_int64(s, 2);
            rc = SQLITE_OK;
        }
    }
    fl_status r = rc == SQLITE_OK ? FL_OK : fl__store_sqlerr(st, rc, "reading the schema version");
    sqlite3_finalize(s);
    return r;
}

/* Decides whether we may use this file: a fresh file (both 0, no tables), or a Flotilla
 * store at or below our version. */
static fl_status read_version(fl_store *st, int64_t *version) {
    int64_t app = 0, tables = 0;
    fl_status r = read_header(st, version, &app, &tables);
    if (r != FL_OK)
        return r;
    if (app == 0 && *version == 0 && tables == 0)
        return FL_OK; /* fresh database */
    if (app != FL__STORE_APPLICATION_ID)
        return fl__err_set(&st->err, FL_ERR_FORMAT,
                           "not a Flotilla store: SQLite file with application_id %lld and "
                           "%lld tables",
                           (long long)app, (long long)tables);
    if (*version > FL_STORE_SCHEMA_VERSION)
        return fl__err_set(&st->err, FL_ERR_UNSUPPORTED,
                           "database schema version %lld is newer than this library supports "
                           "(%d): it was written by a newer Flotilla; upgrade Flotilla to open it",
                           (long long)*version, FL_STORE_SCHEMA_VERSION);
    return FL_OK;
}

fl_status fl__store_schema_precheck(fl_store *st) {
    int64_t version = 0;
    return read_version(st, &version);
}

fl_status fl__store_migrate(fl_store *st) {
    int64_t version = 0;
    fl_status r = read_version(st, &version);
    if (r != FL_OK)
        return r;
    while (version < FL_STORE_SCHEMA_VERSION) {
        /* The write lock serialises concurrent openers; re-read under it, since another
         * process may have upgraded while we waited. */
        r = fl__store_exec(st, FL__STORE_BEGIN_WRITE, "starting a schema migration");
        if (r != FL_OK)
            return r;
        r = read_version(st, &version);
        if (r == FL_OK && version < FL_STORE_SCHEMA_VERSION) {
            int64_t target = version + 1;
            int rc = sqlite3_exec(st->db, fl__store_migrations[target - 1], NULL, NULL, NULL);
            if (rc != SQLITE_OK)
                r = fl__store_sqlerr(st, rc, "schema migration failed");
            else
                fl__log(&st->logger, FL_LOG_INFO, "storage: schema migrated %lld -> %lld",
                        (long long)version, (long long)target);
        }
        if (r != FL_OK) {
            (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            return r;
        }
        r = fl__store_exec(st, FL__STORE_COMMIT, "committing a schema migration");
        if (r != FL_OK) {
            (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            return r;
        }
        r = read_version(st, &version);
        if (r != FL_OK)
            return r;
    }
    return FL_OK;
}
