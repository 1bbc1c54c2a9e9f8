#ifndef FLOTILLA_AUDIT_INTERNAL_H
#define FLOTILLA_AUDIT_INTERNAL_H

/* Audit log internals shared by audit.c (the store side), audit_rules.c (entry schema
 * and rules, run both when appending and when verifying), audit_note.c (signed
 * checkpoints) and audit_bundle.c (the offline verifier). Prefix fl__store_audit_. */

#include <jansson.h>
#include <sqlite3.h>

#include "fl_internal.h"
#include "flotilla/storage.h"

/* ---- SQL ----
 * The audit statements live in sql.c next to the others. They are prepared per call
 * (struct fl__store_audit_stmts) because the handle's statement cache is sized for the
 * base schema. */
enum fl__store_audit_stmt_id {
    FL__AUDIT_SIZE,
    FL__AUDIT_LAST_TIME,
    FL__AUDIT_ENTRY_INSERT,
    FL__AUDIT_ENTRY_GET,
    FL__AUDIT_ENTRY_RANGE,
    FL__AUDIT_ENTRY_POP_LATEST,
    FL__AUDIT_ENTRY_POP_COMPLETED,
    FL__AUDIT_NODE_INSERT,
    FL__AUDIT_NODE_GET,
    FL__AUDIT_CP_INSERT,
    FL__AUDIT_CP_LATEST,
    FL__AUDIT_CP_ALL,
    FL__AUDIT_POP_GET,
    FL__AUDIT_ROUND_GET,
    FL__AUDIT_MODEL_GET,
    FL__AUDIT_LEDGER_ROUND,
    FL__AUDIT_REGIONS,
    FL__AUDIT_CLIENT_GET,
    FL__AUDIT_CLIENT_PARTS_DELETE,
    FL__AUDIT_CLIENT_DELETE,
    FL__AUDIT_CLIENT_STATE,
    FL__AUDIT_CLIENT_SET_REVOKED,
    FL__AUDIT_EXPIRED_PARTS_DELETE,
    FL__AUDIT_EXPIRED_CLIENT_PARTS_DELETE,
    FL__AUDIT_EXPIRED_CLIENTS_DELETE,
    FL__AUDIT_STMT_COUNT
};

/* Static SQL text of an audit statement (sql.c). */
const char *fl__store_audit_sql(enum fl__store_audit_stmt_id id);

/* Statements prepared for the duration of one API call. */
struct fl__store_audit_stmts {
    fl_store *st;
    sqlite3_stmt *s[FL__AUDIT_STMT_COUNT];
};
/* Returns statement id, preparing it on first use in this call; NULL on failure (err set). */
sqlite3_stmt *fl__store_audit_stmt(struct fl__store_audit_stmts *c,
                                   enum fl__store_audit_stmt_id id);
/* Finalizes every statement prepared in this call. */
void fl__store_audit_stmts_done(struct fl__store_audit_stmts *c);

/* ---- canonical JSON ----
 * Canonical form: Jansson with JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII, values
 * only objects, arrays, strings, integers and null. */
#define FL__AUDIT_JSON_FLAGS (JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII)

/* Dumps v canonically into a new buffer from alloc (*len bytes, NUL-terminated, free with
 * size *len + 1). FL_ERR_NOMEM or FL_ERR_TOO_LARGE (over max bytes). */
fl_status fl__store_audit_dump(const fl_allocator *alloc, const json_t *v, size_t max, char **out,
                               size_t *len);
/* Parses len bytes at p and checks they are canonical: FL_OK and *out (a new reference),
 * or FL_ERR_FORMAT with why filled. */
fl_status fl__store_audit_parse(const char *p, size_t len, json_t **out, char *why, size_t why_len);

/* ---- entry rules ----
 * What the log says about one population so far; built by replaying its entries (the
 * verifier replays all of them, an append only the latest entry of each kind, which is
 * enough because each part of the state is set by one kind of entry). */
struct fl__store_audit_pop {
    int64_t id; /* population id */
    char name[FL_STORE_NAME_MAX + 1];
    int64_t budget_eps_e9;    /* budget epsilon, 1e-9 units */
    int64_t budget_delta_e18; /* budget delta, 1e-18 units */
    json_t *allowed;          /* allowed regions (array of strings; [] = any), owned */
    int64_t eps_total_e9;     /* cumulative epsilon so far */
    int64_t last_round;       /* highest logged round number, 0 = none */
    int has_model;            /* 1 once a current model is known */
    int64_t model_version;    /* current model */
    char model_sha[65];       /* its SHA-256, hex */
    int seen;                 /* 1 once the log has an entry of this population */
};

void fl__store_audit_pop_init(struct fl__store_audit_pop *p);
void fl__store_audit_pop_free(struct fl__store_audit_pop *p);

/* Checks one parsed entry: its schema (exact field set and types per type) and its rules
 * against pop, the state of the entry's population before it (NULL when the log has no
 * such population yet). seq is the entry's expected index. 0 = fine; otherwise -1 with
 * the reason in why, and *budget set to 1 when the problem is a budget overrun. */
int fl__store_audit_check(const json_t *entry, int64_t seq, const struct fl__store_audit_pop *pop,
                          char *why, size_t why_len, int *budget);
/* Applies a checked entry to pop (fresh population state for population_created).
 * FL_ERR_NOMEM possible. */
fl_status fl__store_audit_apply(const json_t *entry, struct fl__store_audit_pop *pop);
/* The population id an entry belongs to, 0 for global entries (retention). */
int64_t fl__store_audit_entry_pop(const json_t *entry);

/* ---- fixed point ---- */
/* ceil(x * scale) / floor(x * scale) / llround(x * scale) as int64 after range checks;
 * -1 if x is not finite, negative or too large. */
int64_t fl__store_audit_fixed_ceil(double x, double scale);
int64_t fl__store_audit_fixed_floor(double x, double scale);
int64_t fl__store_audit_fixed_round(double x, double scale);

/* ---- hex ---- */
void fl__store_audit_hex(char *out, const uint8_t *p, size_t n); /* 2n digits + NUL */

/* ---- checkpoints (signed notes) ---- */
/* Builds the signed note of (origin, size, root) with sk into a new NUL-terminated buffer
 * from alloc (*len bytes, free with *len + 1). */
fl_status fl__store_audit_note_sign(const fl_allocator *alloc, const char *origin, int64_t size,
                                    const uint8_t root[32], const uint8_t sk[64], char **out,
                                    size_t *len);
/* Parses and verifies a note against (origin, public key): FL_OK with size and root;
 * FL_ERR_FORMAT or FL_ERR_CRYPTO with why filled. */
fl_status fl__store_audit_note_verify(const char *note, size_t len, const char *origin,
                                      const uint8_t pk[32], int64_t *size, uint8_t root[32],
                                      char *why, size_t why_len);
/* Parses a verifier key "<name>+<hex id>+<base64(0x01 || pk)>": FL_OK with the name (into
 * name, cap bytes) and pk, FL_ERR_FORMAT otherwise. Strict: re-encoding must give the
 * same text. */
fl_status fl__store_audit_vkey_parse(const char *vkey, char *name, size_t cap, uint8_t pk[32]);
/* 1 if origin is a valid log name (1..FL_STORE_AUDIT_ORIGIN_MAX printable ASCII, no '+'). */
int fl__store_audit_origin_ok(const char *origin);

#endif /* FLOTILLA_AUDIT_INTERNAL_H */
