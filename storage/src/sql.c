/* Every SQL statement the store runs after open, in one place. All are static texts;
 * values are bound with sqlite3_bind_*, never pasted in. */

#include "store_internal.h"
#include "audit_internal.h"

/* Column lists shared by a statement and the row decoder that reads it. */
#define POP_COLS "id, name, config_json, epsilon, delta, allowed_regions_json, created_at, state"
#define CLIENT_COLS "client_id, region, population_id, enrolled_at, last_seen, revoked_at"
#define MODEL_COLS "version, parent, population_id, sha256, metadata_json, created_at, size"
#define ROUND_COLS                                                                                 \
    "id, population_id, round_number, state, config_json, base_version, result_version, "          \
    "created_at, started_at, ended_at, checked_in, selected, completed, dropped, abandon_reason"
#define LEDGER_COLS                                                                                \
    "id, population_id, round_id, mechanism, sampling_rate, noise_multiplier, clip_norm, "         \
    "steps, participants, params_json, created_at"

static const char *const fl__store_sql[FL__STORE_STMT_COUNT] = {
    [FL__STORE_BEGIN_WRITE] = "BEGIN IMMEDIATE",
    [FL__STORE_BEGIN_READ] = "BEGIN DEFERRED",
    [FL__STORE_COMMIT] = "COMMIT",
    [FL__STORE_ROLLBACK] = "ROLLBACK",
    [FL__STORE_SAVEPOINT] = "SAVEPOINT fl_op",
    [FL__STORE_RELEASE] = "RELEASE fl_op",
    [FL__STORE_ROLLBACK_TO] = "ROLLBACK TO fl_op",
    [FL__STORE_JSON_VALID] = "SELECT json_valid(?1)",
    [FL__STORE_JSON_TYPE] = "SELECT json_type(?1)",
    /* Only run on valid JSON: json_type raises on malformed input. */
    [FL__STORE_JSON_STRING_ARRAY] = "SELECT json_type(?1) = 'array' AND NOT EXISTS "
                                    "(SELECT 1 FROM json_each(?1) WHERE type <> 'text')",

    [FL__STORE_POP_INSERT] = "INSERT INTO populations (name, config_json, epsilon, delta, "
                             "allowed_regions_json, created_at, state) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)",
    [FL__STORE_POP_GET] = "SELECT " POP_COLS " FROM populations WHERE id = ?1",
    [FL__STORE_POP_FIND] = "SELECT " POP_COLS " FROM populations WHERE name = ?1",
    [FL__STORE_POP_STATE_GET] = "SELECT state FROM populations WHERE id = ?1",
    [FL__STORE_POP_STATE_SET] = "UPDATE populations SET state = ?2 WHERE id = ?1",
    [FL__STORE_POP_CONFIG_SET] = "UPDATE populations SET config_json = ?2, epsilon = ?3, "
                                 "delta = ?4, allowed_regions_json = ?5 WHERE id = ?1",
    [FL__STORE_POP_LIST] = "SELECT " POP_COLS " FROM populations ORDER BY id",
    [FL__STORE_POP_CLIENT_COUNT] = "SELECT count(*) FROM clients WHERE population_id = ?1",

    [FL__STORE_CLIENT_INSERT] = "INSERT INTO clients (client_id, token_sha256, region, "
                                "population_id, enrolled_at, last_seen) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
    [FL__STORE_CLIENT_GET] = "SELECT " CLIENT_COLS " FROM clients WHERE client_id = ?1",
    [FL__STORE_CLIENT_HASH] = "SELECT token_sha256 FROM clients WHERE client_id = ?1",
    [FL__STORE_CLIENT_TOUCH] = "UPDATE clients SET last_seen = ?2 WHERE client_id = ?1",
    /* Inserts nothing for an unknown client (the caller reads sqlite3_changes). */
    [FL__STORE_IDENTITY_INSERT] = "INSERT INTO client_identities (client_id, population_id, "
                                  "device_id, verify_key, cert) SELECT client_id, "
                                  "population_id, ?2, ?3, ?4 FROM clients WHERE client_id = ?1",
    [FL__STORE_IDENTITY_GET] = "SELECT device_id, verify_key, cert FROM client_identities "
                               "WHERE client_id = ?1",
    /* Whether ?2 is registered to a client other than ?1 in ?1's population. */
    [FL__STORE_IDENTITY_DEVICE_OWNER] = "SELECT 1 FROM client_identities i JOIN clients c "
                                        "ON c.client_id = ?1 WHERE i.population_id = "
                                        "c.population_id AND i.device_id = ?2 "
                                        "AND i.client_id <> ?1",

    [FL__STORE_MODEL_FIND_SHA] = "SELECT version FROM models "
                                 "WHERE ifnull(population_id, 0) = ?1 AND sha256 = ?2",
    [FL__STORE_MODEL_INSERT] = "INSERT INTO models (parent, population_id, sha256, "
                               "metadata_json, created_at, size, bytes) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [FL__STORE_MODEL_GET] = "SELECT " MODEL_COLS ", bytes FROM models WHERE version = ?1",
    [FL__STORE_MODEL_EXISTS] = "SELECT 1 FROM models WHERE version = ?1",
    /* Walks parents with a depth bound (?2), newest first. */
    [FL__STORE_MODEL_LINEAGE] =
        "WITH RECURSIVE chain(v, depth) AS ("
        "  SELECT version, 0 FROM models WHERE version = ?1"
        "  UNION ALL"
        "  SELECT m.parent, c.depth + 1 FROM models m JOIN chain c ON m.version = c.v"
        "  WHERE m.parent IS NOT NULL AND c.depth + 1 < ?2"
        ") SELECT m.version, m.parent, m.population_id, m.sha256, m.metadata_json, m.created_at,"
        " m.size FROM chain c JOIN models m ON m.version = c.v ORDER BY c.depth",
    [FL__STORE_MODEL_ALL] = "SELECT version, sha256, size, bytes FROM models ORDER BY version",

    [FL__STORE_TAG_UPSERT] = "INSERT INTO tags (name, version, updated_at) VALUES (?1, ?2, ?3) "
                             "ON CONFLICT (name) DO UPDATE SET version = excluded.version, "
                             "updated_at = excluded.updated_at",
    [FL__STORE_TAG_GET] = "SELECT version FROM tags WHERE name = ?1",
    [FL__STORE_TAG_DELETE] = "DELETE FROM tags WHERE name = ?1",

    [FL__STORE_ROUND_NEXT] = "SELECT ifnull(max(round_number), 0) + 1 FROM rounds "
                             "WHERE population_id = ?1",
    [FL__STORE_ROUND_INSERT] = "INSERT INTO rounds (population_id, round_number, state, "
                               "config_json, base_version, created_at) "
                               "VALUES (?1, ?2, 0, ?3, ?4, ?5)",
    [FL__STORE_ROUND_GET] = "SELECT " ROUND_COLS " FROM rounds WHERE id = ?1",
    [FL__STORE_ROUND_FIND] = "SELECT " ROUND_COLS " FROM rounds "
                             "WHERE population_id = ?1 AND round_number = ?2",
    [FL__STORE_ROUND_LATEST] = "SELECT " ROUND_COLS " FROM rounds WHERE population_id = ?1 "
                               "ORDER BY round_number DESC LIMIT 1",
    [FL__STORE_ROUND_UNFINISHED] = "SELECT " ROUND_COLS " FROM rounds WHERE population_id = ?1 "
                                   "AND state IN (0, 1) ORDER BY round_number",
    [FL__STORE_ROUND_STATE] = "SELECT state, population_id FROM rounds WHERE id = ?1",
    [FL__STORE_ROUND_START] = "UPDATE rounds SET state = 1, started_at = ?2 WHERE id = ?1",
    [FL__STORE_ROUND_COUNTS] = "UPDATE rounds SET checked_in = ?2, selected = ?3, "
                               "completed = ?4, dropped = ?5 WHERE id = ?1",
    [FL__STORE_ROUND_COMPLETE] = "UPDATE rounds SET state = 2, result_version = ?2, "
                                 "ended_at = ?3 WHERE id = ?1",
    [FL__STORE_ROUND_ABANDON] = "UPDATE rounds SET state = 3, abandon_reason = ?2, "
                                "ended_at = ?3 WHERE id = ?1",

    /* A NULL hash (?5) keeps the row's hash: only a new participation brings a new one. */
    [FL__STORE_PART_UPSERT] = "INSERT INTO round_participants (round_id, client_id, state, "
                              "updated_at, participation_hash) VALUES (?1, ?2, ?3, ?4, ?5) "
                              "ON CONFLICT (round_id, client_id) DO UPDATE SET "
                              "state = excluded.state, updated_at = excluded.updated_at, "
                              "participation_hash = ifnull(excluded.participation_hash, "
                              "participation_hash)",
    [FL__STORE_PART_LIST] = "SELECT round_id, client_id, state, updated_at "
                            "FROM round_participants WHERE round_id = ?1 ORDER BY client_id",
    [FL__STORE_PART_GET] = "SELECT round_id, client_id, state, updated_at, participation_hash "
                           "FROM round_participants WHERE round_id = ?1 AND client_id = ?2",

    [FL__STORE_LEDGER_INSERT] = "INSERT INTO privacy_ledger (population_id, round_id, "
                                "mechanism, sampling_rate, noise_multiplier, clip_norm, steps, "
                                "participants, params_json, created_at) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [FL__STORE_LEDGER_LIST] = "SELECT " LEDGER_COLS " FROM privacy_ledger "
                              "WHERE population_id = ?1 ORDER BY id",
};

sqlite3_stmt *fl__store_stmt(fl_store *st, enum fl__store_stmt_id id) {
    if (!FL_ALWAYS(id < FL__STORE_STMT_COUNT && fl__store_sql[id])) {
        fl__err_set(&st->err, FL_ERR_INTERNAL, "storage: unknown statement %d", (int)id);
        return NULL;
    }
    if (!st->stmt[id]) {
        int rc = sqlite3_prepare_v3(st->db, fl__store_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                    &st->stmt[id], NULL);
        if (rc != SQLITE_OK) {
            fl__store_sqlerr(st, rc, "preparing a statement");
            sqlite3_finalize(st->stmt[id]);
            st->stmt[id] = NULL;
            return NULL;
        }
    }
    return st->stmt[id];
}

/* ---- audit log (audit.c) ---- */

static const char *const fl__store_audit_sql_text[FL__AUDIT_STMT_COUNT] = {
    [FL__AUDIT_SIZE] = "SELECT ifnull(max(seq) + 1, 0) FROM audit_entries",
    /* The time of the last entry (created_at is written with the entry's time). */
    [FL__AUDIT_LAST_TIME] = "SELECT created_at FROM audit_entries ORDER BY seq DESC LIMIT 1",
    [FL__AUDIT_ENTRY_INSERT] = "INSERT INTO audit_entries (seq, type, population_id, created_at, "
                               "data) VALUES (?1, ?2, ?3, ?4, ?5)",
    [FL__AUDIT_ENTRY_GET] = "SELECT data FROM audit_entries WHERE seq = ?1",
    [FL__AUDIT_ENTRY_RANGE] = "SELECT seq, data FROM audit_entries WHERE seq < ?1 ORDER BY seq",
    /* The latest entry of one type for a population (index (population_id, type, seq)). */
    [FL__AUDIT_ENTRY_POP_LATEST] = "SELECT seq, data FROM audit_entries WHERE population_id = ?1 "
                                   "AND type = ?2 ORDER BY seq DESC LIMIT 1",
    /* The latest completed round, when the latest round was abandoned. */
    [FL__AUDIT_ENTRY_POP_COMPLETED] =
        "SELECT seq, data FROM audit_entries WHERE population_id = ?1 AND type = 'round' AND "
        "json_extract(CAST(data AS TEXT), '$.outcome') = 'completed' ORDER BY seq DESC LIMIT 1",
    [FL__AUDIT_NODE_INSERT] = "INSERT INTO audit_tree (level, idx, hash) VALUES (?1, ?2, ?3)",
    [FL__AUDIT_NODE_GET] = "SELECT hash FROM audit_tree WHERE level = ?1 AND idx = ?2",
    [FL__AUDIT_CP_INSERT] = "INSERT INTO audit_checkpoints (tree_size, root, origin, public_key, "
                            "note, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [FL__AUDIT_CP_LATEST] = "SELECT tree_size, root, created_at, note, origin, public_key "
                            "FROM audit_checkpoints ORDER BY tree_size DESC LIMIT 1",
    [FL__AUDIT_CP_ALL] = "SELECT note FROM audit_checkpoints ORDER BY tree_size",
    [FL__AUDIT_POP_GET] = "SELECT name, config_json, epsilon, delta, allowed_regions_json "
                          "FROM populations WHERE id = ?1",
    [FL__AUDIT_ROUND_GET] = "SELECT population_id, round_number, state, config_json, "
                            "base_version, result_version, started_at, ended_at, checked_in, "
                            "selected, completed, dropped FROM rounds WHERE id = ?1",
    [FL__AUDIT_MODEL_GET] = "SELECT population_id, sha256 FROM models WHERE version = ?1",
    [FL__AUDIT_LEDGER_ROUND] = "SELECT mechanism, sampling_rate, noise_multiplier, clip_norm, "
                               "steps FROM privacy_ledger WHERE round_id = ?1 ORDER BY id",
    [FL__AUDIT_REGIONS] = "SELECT c.region, count(*) FROM round_participants p "
                          "JOIN clients c ON c.client_id = p.client_id "
                          "WHERE p.round_id = ?1 AND p.state IN (1, 2, 3) "
                          "GROUP BY c.region ORDER BY c.region",
    [FL__AUDIT_CLIENT_GET] = "SELECT population_id FROM clients WHERE client_id = ?1",
    [FL__AUDIT_CLIENT_PARTS_DELETE] = "DELETE FROM round_participants WHERE client_id = ?1",
    [FL__AUDIT_CLIENT_DELETE] = "DELETE FROM clients WHERE client_id = ?1",
    [FL__AUDIT_CLIENT_STATE] = "SELECT population_id, ifnull(revoked_at, 0) FROM clients "
                               "WHERE client_id = ?1",
    /* ?2 NULL reinstates. */
    [FL__AUDIT_CLIENT_SET_REVOKED] = "UPDATE clients SET revoked_at = ?2 WHERE client_id = ?1",
    /* Participations in finished rounds (2 = COMPLETED, 3 = ABANDONED) older than ?1. */
    [FL__AUDIT_EXPIRED_PARTS_DELETE] =
        "DELETE FROM round_participants WHERE updated_at < ?1 AND round_id IN "
        "(SELECT id FROM rounds WHERE state IN (2, 3))",
    [FL__AUDIT_EXPIRED_CLIENT_PARTS_DELETE] =
        "DELETE FROM round_participants WHERE client_id IN "
        "(SELECT client_id FROM clients WHERE last_seen < ?1)",
    [FL__AUDIT_EXPIRED_CLIENTS_DELETE] = "DELETE FROM clients WHERE last_seen < ?1",
};

const char *fl__store_audit_sql(enum fl__store_audit_stmt_id id) {
    if (!FL_ALWAYS((unsigned)id < FL__AUDIT_STMT_COUNT))
        return NULL;
    return fl__store_audit_sql_text[id];
}
