/* Client authentication with an in-memory cache, and check-in pacing (429).
 *
 * Client ids never change their token, so once a token has been checked against storage
 * the pair (client id, SHA-256(token)) and the client's population are kept in an
 * open-addressing hash table under a lock of its own. A request then costs one SHA-256
 * and a constant-time compare, without the coordinator lock or SQLite. A wrong token for a
 * cached id is refused from memory (no oracle: same 401 as an unknown id). The table is
 * bounded; when it is full it is cleared and refilled from storage on demand.
 *
 * The same entry carries the pacing state of docs/protocol.md section 8: the earliest time
 * the client may check in again (90% of the retry_after_s it was last given), and whether
 * the client is revoked (POST /v1/admin/clients/{id}/revoke), so a revoked device is
 * refused from memory too. The revoke handler flips the mark under the coordinator lock,
 * and a miss fills its entry under that lock, so the two cannot interleave. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

#define AUTH_CACHE_MAX (1u << 22) /* entries kept at most (~4M clients, ~270 MiB) */

struct auth_entry {
    uint64_t id;             /* client id (16 hex digits as a number); 0 = empty slot */
    uint8_t tok_hash[32];    /* SHA-256 of the client's token */
    int64_t population_id;
    int64_t pace_until;      /* Unix ms before which a check-in gets 429; 0 = none */
    int64_t pace_retry_s;    /* the retry_after_s that set pace_until */
    bool revoked;            /* the client is revoked: 401 token_revoked */
};

struct fl__coord_auth_cache {
    pthread_mutex_t lock;
    struct auth_entry *slots; /* (cap) power of two */
    size_t cap, used;
};

fl_status fl__coord_auth_cache_create(fl_coord *co) {
    struct fl__coord_auth_cache *c = fl__calloc(&co->alloc, 1, sizeof(*c));
    if (!c)
        return FL_ERR_NOMEM;
    c->cap = 1024;
    c->slots = fl__calloc(&co->alloc, c->cap, sizeof(*c->slots));
    if (!c->slots) {
        fl__free(&co->alloc, c, sizeof(*c));
        return FL_ERR_NOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    co->auth = c;
    return FL_OK;
}

void fl__coord_auth_cache_destroy(fl_coord *co) {
    struct fl__coord_auth_cache *c = co->auth;
    if (!c)
        return;
    fl_memzero(c->slots, c->cap * sizeof(*c->slots));
    fl__free(&co->alloc, c->slots, c->cap * sizeof(*c->slots));
    pthread_mutex_destroy(&c->lock);
    fl__free(&co->alloc, c, sizeof(*c));
    co->auth = NULL;
}

void fl__coord_auth_cache_clear(fl_coord *co) {
    struct fl__coord_auth_cache *c = co->auth;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    fl_memzero(c->slots, c->cap * sizeof(*c->slots));
    c->used = 0;
    pthread_mutex_unlock(&c->lock);
}

static uint64_t id_hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Slot of id, or the empty slot where it would go. Cache lock held. */
static struct auth_entry *slot_of(struct fl__coord_auth_cache *c, uint64_t id) {
    size_t mask = c->cap - 1;
    for (size_t i = id_hash(id) & mask;; i = (i + 1) & mask)
        if (c->slots[i].id == id || c->slots[i].id == 0)
            return &c->slots[i];
}

/* Makes room for one more entry: doubles the table, or clears it at the bound. */
static void grow(fl_coord *co, struct fl__coord_auth_cache *c) {
    if ((c->used + 1) * 4 < c->cap * 3)
        return;
    size_t ncap = c->cap * 2;
    struct auth_entry *ns = ncap <= AUTH_CACHE_MAX ? fl__calloc(&co->alloc, ncap, sizeof(*ns))
                                                   : NULL;
    if (!ns) { /* at the bound or out of memory: forget everything, refill on demand */
        fl_memzero(c->slots, c->cap * sizeof(*c->slots));
        c->used = 0;
        return;
    }
    struct auth_entry *old = c->slots;
    size_t ocap = c->cap;
    c->slots = ns;
    c->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].id)
            *slot_of(c, old[i].id) = old[i];
    fl_memzero(old, ocap * sizeof(*old));
    fl__free(&co->alloc, old, ocap * sizeof(*old));
}

static uint64_t parse_id(const char *hex16) {
    uint8_t b[8];
    if (!fl__coord_unhex(b, 8, hex16))
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v ? v : 1; /* id 0 marks empty slots: map the all-zero id onto a probe miss */
}

/* 401 token_revoked for a client whose right token was presented (a wrong token gets the
 * plain 401 first, so revocation is no oracle for token guessers). */
static bool refuse_revoked(fl_coord *co, struct fl__coord_reply *rep) {
    atomic_fetch_add(&co->metrics.auth_revoked, 1);
    fl__coord_error(rep, 401, "token_revoked", "Authorization", "the client is revoked");
    return false;
}

bool fl__coord_auth_client(struct fl__coord_req *rq, struct fl__coord_reply *rep,
                           struct fl__coord_client_auth *out) {
    fl_coord *co = rq->co;
    const char *tok = fl__coord_bearer(rq);
    size_t tl = tok ? strlen(tok) : 0;
    if (!tok || tl != 4 + FL__COORD_CLIENT_ID_CHARS + 1 + FL__COORD_SECRET_CHARS ||
        strncmp(tok, "flc_", 4) != 0 || tok[4 + FL__COORD_CLIENT_ID_CHARS] != '.') {
        fl__coord_error(rep, 401, "unauthorized", "Authorization", "client bearer token required");
        return false;
    }
    memcpy(out->client_id, tok + 4, FL__COORD_CLIENT_ID_CHARS);
    out->client_id[FL__COORD_CLIENT_ID_CHARS] = '\0';
    uint64_t id = parse_id(out->client_id);
    if (!id) {
        fl__coord_error(rep, 401, "unauthorized", "Authorization", "client bearer token required");
        return false;
    }
    uint8_t h[32];
    fl__coord_sha256(h, tok, tl);
    struct fl__coord_auth_cache *c = co->auth;
    pthread_mutex_lock(&c->lock);
    struct auth_entry *e = slot_of(c, id);
    if (e->id == id) {
        bool ok = fl_memeq_ct(e->tok_hash, h, 32) == 0;
        bool revoked = e->revoked;
        out->population_id = e->population_id;
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_add(&co->metrics.auth_cache_hits, 1);
        if (!ok)
            fl__coord_error(rep, 401, "unauthorized", "Authorization", "unknown client token");
        else if (revoked)
            return refuse_revoked(co, rep);
        return ok;
    }
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(&co->metrics.auth_cache_misses, 1);

    fl__coord_lock(co);
    fl_status rc = fl_store_client_authenticate(co->store, out->client_id, tok, tl);
    fl_store_client *sc = NULL;
    bool revoked = false;
    if (rc == FL_OK)
        rc = fl_store_client_get(co->store, &sc, out->client_id);
    if (rc == FL_OK) {
        out->population_id = sc->population_id;
        revoked = sc->revoked_at != 0;
    } else if (rc != FL_ERR_AUTH) {
        fl__coord_error(rep, 503, "unavailable", NULL, "database: %s", fl_store_errmsg(co->store));
    }
    fl_store_free(co->store, sc);
    if (rc == FL_OK) {
        /* Still under the coordinator lock: a revocation cannot slip in between the read
         * above and this fill (see fl__coord_auth_cache_set_revoked). */
        pthread_mutex_lock(&c->lock);
        grow(co, c);
        e = slot_of(c, id);
        if (e->id != id) {
            memset(e, 0, sizeof(*e));
            e->id = id;
            c->used++;
        }
        memcpy(e->tok_hash, h, 32);
        e->population_id = out->population_id;
        e->revoked = revoked;
        pthread_mutex_unlock(&c->lock);
    }
    fl__coord_unlock(co);
    if (rc == FL_ERR_AUTH) {
        fl__coord_error(rep, 401, "unauthorized", "Authorization", "unknown client token");
        return false;
    }
    if (rc != FL_OK) {
        rep->retry_after_s = 5;
        return false;
    }
    if (revoked)
        return refuse_revoked(co, rep);
    return true;
}

void fl__coord_auth_cache_set_revoked(fl_coord *co, const char *client_id, bool revoked) {
    uint64_t id = parse_id(client_id);
    struct fl__coord_auth_cache *c = co->auth;
    if (!id || !c)
        return;
    pthread_mutex_lock(&c->lock);
    struct auth_entry *e = slot_of(c, id);
    if (e->id == id)
        e->revoked = revoked;
    pthread_mutex_unlock(&c->lock);
}

bool fl__coord_pace_check(fl_coord *co, const char *client_id, int64_t now,
                          struct fl__coord_reply *rep) {
    uint64_t id = parse_id(client_id);
    struct fl__coord_auth_cache *c = co->auth;
    int64_t until = 0;
    pthread_mutex_lock(&c->lock);
    struct auth_entry *e = slot_of(c, id);
    if (e->id == id)
        until = e->pace_until;
    pthread_mutex_unlock(&c->lock);
    if (until == 0 || now >= until)
        return true;
    int64_t left = (until - now + 999) / 1000;
    rep->retry_after_s = (int)(left > 0 ? left : 1);
    atomic_fetch_add(&co->metrics.rate_limited, 1);
    fl__coord_error(rep, 429, "rate_limited", NULL,
                    "checked in before the retry_after_s it was given; retry in %d s",
                    rep->retry_after_s);
    return false;
}

void fl__coord_pace_set(fl_coord *co, const char *client_id, int64_t now, int retry_s) {
    uint64_t id = parse_id(client_id);
    struct fl__coord_auth_cache *c = co->auth;
    pthread_mutex_lock(&c->lock);
    struct auth_entry *e = slot_of(c, id);
    if (e->id == id) {
        e->pace_retry_s = retry_s;
        e->pace_until = retry_s > 0 ? now + (int64_t)retry_s * 900 : 0; /* 90% */
    }
    pthread_mutex_unlock(&c->lock);
}
