/* Signed bodies kept in memory: the population's current model version and the task body
 * of a plain synchronous round, each hashed and signed once (docs/protocol.md section 4.1)
 * and shared by reference with the responses that send them.
 *
 * Without this, every model download read the version from SQLite (storage re-hashes the
 * bytes on each read), copied it twice and signed it again, and every round read the base
 * model twice more (round parameters, then aggregation). The cache holds one model version
 * per population, O(model) memory, replaced when a round commits the next one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "coord_internal.h"

void fl__coord_signed_message_h(uint8_t out[FL__COORD_SIGNED_MAX], size_t *written,
                                const char *context, uint64_t id, const uint8_t sha256[32]) {
    size_t c = strlen(context);
    memcpy(out, context, c);
    out[c] = 0;
    fl__put_u64le(out + c + 1, id);
    memcpy(out + c + 9, sha256, 32);
    *written = c + 9 + 32;
}

void fl__coord_blob_sign(fl_coord *co, struct fl__coord_blob *b, const char *context,
                         const uint8_t sha256[32]) {
    uint8_t msg[FL__COORD_SIGNED_MAX], sig[64];
    size_t n = 0;
    fl__coord_signed_message_h(msg, &n, context, (uint64_t)b->id, sha256);
    crypto_sign_detached(sig, NULL, msg, n, co->sign_sk);
    fl__coord_b64(b->sig_b64, sizeof(b->sig_b64), sig, sizeof(sig));
    fl__coord_hex(b->sha_hex, sha256, 32);
}

void fl__coord_reply_blob(struct fl__coord_reply *rep, struct fl__coord_blob *b,
                          const char *content_type) {
    rep->blob = fl__coord_blob_ref(b);
    rep->len = b->len;
    rep->content_type = content_type;
    rep->status = 200;
    memcpy(rep->sig_b64, b->sig_b64, sizeof(rep->sig_b64));
    memcpy(rep->sha_hex, b->sha_hex, sizeof(rep->sha_hex));
}

fl_status fl__coord_model_blob(fl_coord *co, struct fl__coord_pop *p, int64_t version,
                               struct fl__coord_blob **out) {
    *out = NULL;
    if (p->model_blob && p->model_blob->id == version) {
        *out = fl__coord_blob_ref(p->model_blob);
        return FL_OK;
    }
    fl_store_model *m = NULL;
    fl_status rc = fl_store_model_get(co->store, &m, version);
    if (rc == FL_OK && m->population_id != p->id)
        rc = FL_ERR_NOT_FOUND;
    uint8_t h[32];
    if (rc == FL_OK && !fl__coord_unhex(h, 32, m->sha256_hex))
        rc = FL_ERR_CORRUPT;
    uint8_t *bytes = NULL;
    if (rc == FL_OK) {
        bytes = fl__alloc(fl__coord_alloc(co), m->size);
        if (!bytes)
            rc = FL_ERR_NOMEM;
    }
    struct fl__coord_blob *b = NULL;
    if (rc == FL_OK) {
        memcpy(bytes, m->bytes, m->size);
        b = fl__coord_blob_wrap(co, bytes, m->size);
        if (!b)
            rc = FL_ERR_NOMEM;
    }
    if (rc == FL_OK) {
        b->id = version;
        /* Storage checked the bytes against its SHA-256 on the read: sign that. */
        fl__coord_blob_sign(co, b, "flotilla/v1/model", h);
        if (version == p->model_version) {
            fl__coord_blob_unref(p->model_blob);
            p->model_blob = fl__coord_blob_ref(b);
        }
        *out = b;
    }
    fl_store_free(co->store, m);
    return rc;
}

void fl__coord_model_cache_set(fl_coord *co, struct fl__coord_pop *p, uint8_t *bytes,
                               size_t len, int64_t version, const char *sha256_hex) {
    uint8_t h[32];
    struct fl__coord_blob *b = NULL;
    if (fl__coord_unhex(h, 32, sha256_hex))
        b = fl__coord_blob_wrap(co, bytes, len);
    else
        fl__free(fl__coord_alloc(co), bytes, len);
    if (b) {
        b->id = version;
        fl__coord_blob_sign(co, b, "flotilla/v1/model", h);
    }
    /* On failure the stale entry goes too; the next use reads storage. */
    fl__coord_blob_unref(p->model_blob);
    p->model_blob = b;
}
