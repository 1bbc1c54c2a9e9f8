/* Replay, Sybil / quota and norm-bound behaviour of the coordinator (docs/reliability.md),
 * in-process with the test kit's fixture (injected clock, ticker) and stand-in devices.
 *
 * test_replay: every client message of three secure-aggregation rounds (5 devices) is
 * captured and replayed, with its original token and participation id, into its own round
 * after the round completed and into every later round, and (with the device's current
 * participation id) into the later round's open phase. Accepted = a 202, or a 200 that
 * changed the model, the ledger or the accepted-update counter; each completed round's
 * model must be exactly the previous model plus the FedAvg of that round's own messages.
 * Plain updates carry no round binding: a party holding a device's current credentials can
 * submit the device's old update instead of a new one; measured and reported.
 *
 * test_sybil: forged and wrong-kind tokens, repeated check-ins per credential, another
 * device's participation id, double submissions: at most one update per client per round
 * (exact model), no participant added by a refused request; enrolment by one party (no
 * limit exists in protocol v1: measured and reported).
 *
 * test_norm: a device that sends its update x100 (no clipping), or the largest value the
 * modulus allows, in a plain round (no DP), a plain round with central DP and a secure
 * aggregation round: what the server accepts and how far the aggregate moves, against the
 * clip/n bound an honest round keeps. Today the server checks only the modulus range and the
 * weight coordinate, so the boosted update is applied in full (reported in
 * docs/reliability.md); FL_REL_STRICT=1 makes that a failure for the plain rounds, where the
 * server sees the update and could refuse it. */
#include <math.h>

#include "coord_testkit.h"
#include "flotilla/secagg.h"
#include "rel_coord.h"

enum { N = 5, ROUNDS = 3, MAXCAP = 256 };

static const char checkin_ok[] =
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true},"
    "\"capabilities\":{\"secagg\":true}}";

struct captured {
    int dev;
    int64_t rid;
    int phase; /* 0..3 secagg phases, 4 plain update */
    char pid[40];
    uint8_t *body;
    size_t len;
};

struct capture {
    struct captured m[MAXCAP];
    int n;
};

static const char *const phase_names[5] = {"advertise", "share", "masked", "unmask", "update"};

static void cap_add(struct capture *cp, int dev, int64_t rid, int phase, const char *pid,
                    const uint8_t *b, size_t len) {
    assert_true(cp->n < MAXCAP);
    struct captured *m = &cp->m[cp->n++];
    m->dev = dev;
    m->rid = rid;
    m->phase = phase;
    snprintf(m->pid, sizeof(m->pid), "%s", pid);
    m->body = malloc(len);
    assert_non_null(m->body);
    memcpy(m->body, b, len);
    m->len = len;
}

static void cap_free(struct capture *cp) {
    for (int i = 0; i < cp->n; i++)
        free(cp->m[i].body);
    cp->n = 0;
}

static struct resp post_to(struct fx *f, const char *tok, int64_t rid, int phase, const char *pid,
                           const uint8_t *b, size_t len) {
    char path[128];
    if (phase == 4)
        snprintf(path, sizeof(path), "/v1/rounds/%lld/update", (long long)rid);
    else
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s", (long long)rid,
                 phase_names[phase]);
    return http_req(f, "POST", path, tok, "application/octet-stream", b, len, pid);
}

/* Clients selected in pop's current round (the coordinator keeps selections in memory and
 * writes participants with the round's outcome). */
static int64_t selected(struct fx *f, const char *pop) {
    char name[128];
    snprintf(name, sizeof(name), "flotilla_round_selected{population=\"%s\"}", pop);
    double v = rel_metric(f, name);
    return isnan(v) ? -1 : (int64_t)v;
}

/* Participant rows of round rid once it ended (each client at most once). */
static int64_t participants(struct fx *f, int64_t rid) {
    char q[160];
    snprintf(q, sizeof(q), "SELECT count(*) FROM round_participants WHERE round_id = %lld",
             (long long)rid);
    return db_int(f, q);
}

static double accepted_total(struct fx *f) {
    return rel_metric(f, "flotilla_updates_accepted_total");
}

static int64_t tag_version(struct fx *f, const char *pop) {
    char q[128];
    snprintf(q, sizeof(q), "SELECT version FROM tags WHERE name = 'population/%s'", pop);
    return db_int(f, q);
}

/* The words of device c as a little-endian u32 body (plain update, b <= 32). */
/* A plain update body (docs/protocol.md 5.2, protocol 1.1): the round header "FLUP" ||
 * u32le 1 || u64le round id, then the words. */
static size_t words_body(const struct tc *c, uint8_t *out) {
    memcpy(out, "FLUP\x01\0\0\0", 8);
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t)((uint64_t)c->task.rid >> (8 * b));
    for (size_t j = 0; j < c->task.vec_len; j++) {
        uint32_t w = (uint32_t)c->words[j];
        memcpy(out + 16 + 4 * j, &w, 4);
    }
    return 16 + 4 * c->task.vec_len;
}

/* Runs one secure-aggregation round of c[0..N) (already checked in, tasks fetched),
 * capturing each message; before posting phase k, replays the phase-k messages captured
 * in earlier rounds with the device's current participation id (expected: refused). */
static void secagg_round_captured(struct fx *f, struct tc *c, int64_t rid, struct capture *cp,
                                  int *replays, int *accepted) {
    const uint8_t *out[N];
    size_t out_len[N];
    secagg_clients_start(c, N, rid, out, out_len);
    for (int ph = 0; ph < 4; ph++) {
        int before = cp->n;
        for (int i = 0; i < before; i++) {
            struct captured *m = &cp->m[i];
            if (m->phase != ph || m->rid == rid)
                continue;
            struct resp r = post_to(f, c[m->dev].tok, rid, ph, c[m->dev].pid, m->body, m->len);
            (*replays)++;
            if (r.status == 202 || r.status == 200) {
                (*accepted)++;
                fprintf(stderr, "replay of round %lld %s into round %lld (current id): %ld\n",
                        (long long)m->rid, phase_names[ph], (long long)rid, r.status);
            }
            resp_free(&r);
        }
        for (int i = 0; i < N; i++)
            cap_add(cp, i, rid, ph, c[i].pid, out[i], out_len[i]);
        if (ph < 3) {
            secagg_phase_all(f, c, N, rid, phase_names[ph], out, out_len);
            continue;
        }
        json_t *o = secagg_unmask_all(f, c, N, rid, out, out_len);
        assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
        json_decref(o);
    }
    secagg_clients_free(c, N);
}

/* Replays every captured message with its original token and participation id into its
 * original round path. Returns how many were accepted (202, or a change of the model tag
 * or of the accepted-update counter). */
static int replay_all(struct fx *f, struct tc *c, struct capture *cp, const char *pop, int *replays,
                      int *replayed200) {
    int64_t v0 = tag_version(f, pop);
    double a0 = accepted_total(f);
    int accepted = 0;
    for (int i = 0; i < cp->n; i++) {
        struct captured *m = &cp->m[i];
        struct resp r = post_to(f, c[m->dev].tok, m->rid, m->phase, m->pid, m->body, m->len);
        (*replays)++;
        char hv[16];
        if (r.status == 200 && header_in(&r, "Idempotent-Replayed", hv, sizeof(hv)))
            (*replayed200)++;
        else if (r.status != 410 && r.status != 403)
            fprintf(stderr, "replay round %lld %s: %ld %s\n", (long long)m->rid,
                    phase_names[m->phase], r.status, r.body);
        if (r.status == 202)
            accepted++;
        assert_true(r.status == 200 || r.status == 410 || r.status == 403);
        resp_free(&r);
    }
    if (tag_version(f, pop) != v0 || accepted_total(f) != a0)
        accepted++;
    assert_int_equal(tag_version(f, pop), v0);
    assert_true(accepted_total(f) == a0);
    return accepted;
}

static void check_model(struct fx *f, struct tc *c, const char *pop, float *base) {
    int64_t v = tag_version(f, pop);
    float w[D], b[2], expect[D];
    fetch_model(f, &c[0], pop, v, w, b);
    expected_fedavg(c, N, base, expect);
    assert_memory_equal(w, expect, sizeof(w));
    memcpy(base, expect, sizeof(expect));
}

static void test_replay(void **state) {
    struct fx *f = *state;
    char *tok[N];
    struct popcfg pc = {.name = "rs", .target = N, .min = N, .secagg = true, .neighbors = N - 1,
                        .mode = "none"};
    setup_population(f, &pc, tok, N);
    struct tc *c = calloc(N, sizeof(*c));
    assert_non_null(c);
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    struct capture *cp = calloc(1, sizeof(*cp));
    assert_non_null(cp);
    float base[D];
    for (int j = 0; j < D; j++)
        base[j] = base_w(j);
    int replays = 0, accepted = 0, replayed200 = 0, checkin_replays = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int64_t rid;
        checkin_all(f, c, N, &rid);
        /* Replayed check-ins (same credential, same body) add no participant. */
        for (int i = 0; i < N; i++) {
            struct resp rr = http_json(f, "POST", "/v1/checkin", c[i].tok, checkin_ok);
            assert_int_equal(rr.status, 200);
            resp_free(&rr);
            checkin_replays++;
        }
        assert_int_equal(selected(f, "rs"), N);
        fetch_tasks(f, c, N, rid);
        /* Old messages with their old participation ids into this round: 403. */
        for (int i = 0; i < cp->n; i++) {
            struct captured *m = &cp->m[i];
            struct resp rr = post_to(f, c[m->dev].tok, rid, m->phase, m->pid, m->body, m->len);
            replays++;
            if (rr.status == 202 || rr.status == 200)
                accepted++;
            assert_true(rr.status == 403 || rr.status == 425);
            resp_free(&rr);
        }
        secagg_round_captured(f, c, rid, cp, &replays, &accepted);
        check_model(f, c, "rs", base);
        assert_int_equal(participants(f, rid), N);
        accepted += replay_all(f, c, cp, "rs", &replays, &replayed200);
        /* Unchanged after the replays: same version (replay_all), same bytes. */
        float w[D], b[2];
        fetch_model(f, &c[0], "rs", tag_version(f, "rs"), w, b);
        assert_memory_equal(w, base, sizeof(w));
    }
    fprintf(stderr,
            "replay (secure aggregation, %d rounds x %d devices, %d messages "
            "captured): %d replays, %d accepted, %d answered 200 Idempotent-Replayed with no "
            "effect; %d repeated check-ins added no participant\n",
            ROUNDS, N, cp->n, replays, accepted, replayed200, checkin_replays);
    assert_int_equal(accepted, 0);

    /* Plain updates: no round binding inside the body. */
    char *tp[N];
    struct popcfg pp = {.name = "rp", .target = N, .min = N, .secagg = false, .mode = "none"};
    setup_population(f, &pp, tp, N);
    struct tc *d = calloc(N, sizeof(*d));
    assert_non_null(d);
    for (int i = 0; i < N; i++)
        d[i].tok = tp[i];
    for (int j = 0; j < D; j++)
        base[j] = base_w(j);
    uint8_t body[4 * 1024];
    uint8_t old[N][4 * 64];
    size_t old_len = 0;
    char old_pid[N][40];
    int64_t old_rid = 0;
    int plain_old_id = 0, plain_sub = 0, plain_sub_tries = 0;
    for (int r = 0; r < 2; r++) {
        int64_t rid;
        checkin_all(f, d, N, &rid);
        fetch_tasks(f, d, N, rid);
        if (r == 1) {
            /* Old updates with old ids: 403. */
            for (int i = 0; i < N; i++) {
                struct resp rr = post_to(f, d[i].tok, rid, 4, old_pid[i], old[i], old_len);
                if (rr.status == 202)
                    plain_old_id++;
                assert_int_equal(rr.status, 403);
                resp_free(&rr);
            }
            /* Device 0's old update with its current id, instead of a new one: accepted
             * (the body has no round binding); its new update is then 409. */
            struct resp rr = post_to(f, d[0].tok, rid, 4, d[0].pid, old[0], old_len);
            plain_sub_tries++;
            if (rr.status == 202) {
                plain_sub++;
                /* The words in the sum are now the old ones. */
                for (size_t j = 0; j < d[0].task.vec_len; j++) {
                    uint32_t w;
                    memcpy(&w, old[0] + 16 + 4 * j, 4);
                    d[0].words[j] = w;
                }
            }
            resp_free(&rr);
        }
        for (int i = 0; i < N; i++) {
            size_t len = words_body(&d[i], body);
            if (r == 0) {
                memcpy(old[i], body, len);
                old_len = len;
                snprintf(old_pid[i], sizeof(old_pid[i]), "%s", d[i].pid);
            }
            struct resp rr = post_to(f, d[i].tok, rid, 4, d[i].pid, body, len);
            assert_true(rr.status == 202 || (r == 1 && i == 0 && plain_sub && rr.status == 200));
            resp_free(&rr);
        }
        json_t *o = NULL;
        for (int k = 0; k < 50 && !o; k++) {
            o = round_status(f, &d[0], rid);
            if (strcmp(json_string_value(json_object_get(o, "state")), "completed") != 0) {
                json_decref(o);
                o = NULL;
                rel_sleep_ms(20);
            }
        }
        assert_non_null(o);
        json_decref(o);
        check_model(f, d, "rp", base);
        old_rid = rid;
    }
    (void)old_rid;
    fprintf(stderr,
            "replay (plain updates): old updates with old ids into a later round: %d "
            "accepted of %d; a device's old update posted with its current id: %d of %d "
            "accepted (plain update bodies name their round since protocol 1.1; one update "
            "per client per round holds: exact model)\n",
            plain_old_id, N, plain_sub, plain_sub_tries);
    assert_int_equal(plain_old_id, 0);
    clients_free(c, N);
    clients_free(d, N);
    free(c);
    free(d);
    cap_free(cp);
    free(cp);
}

/* ---- Sybil / quota ---- */

static void test_sybil(void **state) {
    struct fx *f = *state;
    char *tok[N];
    struct popcfg pc = {.name = "sy", .target = N, .min = N, .secagg = false, .mode = "none"};
    setup_population(f, &pc, tok, N);
    struct popcfg po = {.name = "other", .target = N, .min = N, .secagg = false, .mode = "none"};
    char *tok_other[1];
    setup_population(f, &po, tok_other, 1);
    struct tc *c = calloc(N, sizeof(*c));
    assert_non_null(c);
    for (int i = 0; i < N; i++)
        c[i].tok = tok[i];
    /* Forged credentials at check-in: all 401, nothing stored. */
    char forged[8][256];
    char id[17];
    memcpy(id, tok[0] + 4, 16);
    id[16] = '\0';
    snprintf(forged[0], 256, "flc_%s.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", id);
    snprintf(forged[1], 256, "flc_0123456789abcdef.%.43s", tok[0] + 21);
    snprintf(forged[2], 256, "%s", ADMIN_TOKEN);
    snprintf(forged[3], 256, "flc_%s", id);
    snprintf(forged[4], 256, "%.*sX", (int)strlen(tok[0]) - 1, tok[0]);
    snprintf(forged[5], 256, "flp_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    snprintf(forged[6], 256, "flc_%s.%.43s", id, tok[1] + 21); /* id of 0, secret of 1 */
    snprintf(forged[7], 256, "%s", "short");
    int64_t parts0 = db_int(f, "SELECT count(*) FROM round_participants");
    int refused = 0;
    for (int i = 0; i < 8; i++) {
        struct resp r = http_json(f, "POST", "/v1/checkin", forged[i], checkin_ok);
        if (r.status != 401)
            fprintf(stderr, "forged token %d: %ld %s\n", i, r.status, r.body);
        assert_int_equal(r.status, 401);
        refused++;
        resp_free(&r);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM round_participants"), parts0);
    /* Repeated check-ins per credential: one participation. */
    int64_t rid;
    for (int k = 0; k < 5; k++)
        checkin_all(f, c, 1, &rid);
    assert_int_equal(selected(f, "sy"), 1);
    checkin_all(f, c, N, &rid);
    assert_int_equal(selected(f, "sy"), N);
    /* A token of another population cannot join this round. */
    struct tc o;
    memset(&o, 0, sizeof(o));
    o.tok = tok_other[0];
    snprintf(o.pid, sizeof(o.pid), "%s", c[0].pid);
    fetch_tasks(f, c, N, rid);
    uint8_t body[4096];
    size_t len = words_body(&c[1], body);
    struct resp r = post_to(f, o.tok, rid, 4, c[0].pid, body, len);
    assert_true(r.status == 410 || r.status == 403);
    resp_free(&r);
    /* Device 1's token with device 0's participation id: 403. */
    r = post_to(f, c[1].tok, rid, 4, c[0].pid, body, len);
    assert_error(&r, 403, "not_a_participant");
    resp_free(&r);
    /* Double submission: same bytes 200 replayed, other bytes 409. */
    for (int i = 0; i < N; i++) {
        len = words_body(&c[i], body);
        r = post_to(f, c[i].tok, rid, 4, c[i].pid, body, len);
        assert_int_equal(r.status, 202);
        resp_free(&r);
        if (i == 0) {
            r = post_to(f, c[i].tok, rid, 4, c[i].pid, body, len);
            assert_int_equal(r.status, 200);
            resp_free(&r);
            body[0] ^= 1;
            r = post_to(f, c[i].tok, rid, 4, c[i].pid, body, len);
            assert_error(&r, 409, "already_submitted");
            resp_free(&r);
        }
    }
    json_t *st = NULL;
    for (int k = 0; k < 50 && !st; k++) {
        st = round_status(f, &c[0], rid);
        if (strcmp(json_string_value(json_object_get(st, "state")), "completed") != 0) {
            json_decref(st);
            st = NULL;
            rel_sleep_ms(20);
        }
    }
    assert_non_null(st);
    assert_int_equal(json_integer_value(json_object_get(st, "participants")), N);
    json_decref(st);
    assert_int_equal(participants(f, rid), N);
    float base[D];
    for (int j = 0; j < D; j++)
        base[j] = base_w(j);
    check_model(f, c, "sy", base);
    /* Sybil enrolment: one party holding the enrollment token enrols many clients. */
    r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                  "{\"name\":\"sy2\",\"allowed_regions\":[\"*\"],\"selection\":{\"target\":5,"
                  "\"min_participants\":5,\"over_selection\":1.0,\"require\":[],"
                  "\"min_retry_s\":1}}");
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    char *etok = strdup(json_string_value(json_object_get(j, "enrollment_token")));
    json_decref(j);
    resp_free(&r);
    int sybils = 100, enrolled = 0;
    double t0 = rel_mono_s();
    for (int i = 0; i < sybils; i++) {
        r = http_json(f, "POST", "/v1/enroll", etok, "{\"population\":\"sy2\",\"region\":\"EU\"}");
        enrolled += r.status == 201;
        resp_free(&r);
    }
    double dt = rel_mono_s() - t0;
    fprintf(stderr,
            "Sybil/quota: %d forged or wrong-kind tokens refused 401 (nothing stored); "
            "5 repeated check-ins = 1 participation; another device's participation id 403; "
            "a second, different update 409; exact model (each device once); one party "
            "enrolled %d of %d clients in %.2f s (no enrolment limit in protocol v1)\n",
            refused, enrolled, sybils, dt);
    assert_int_equal(refused, 8);
    free(etok);
    free(tok_other[0]);
    clients_free(c, N);
    free(c);
}

/* ---- norm bound ---- */

/* Signed value of word w mod 2^b. */
static int64_t centred(uint64_t w, uint32_t bits) {
    uint64_t mod = (uint64_t)1 << bits;
    return w >= mod / 2 ? -(int64_t)(mod - w) : (int64_t)w;
}

static double l2_diff(const float *a, const float *b) {
    double s = 0;
    for (int j = 0; j < D; j++)
        s += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
    return sqrt(s);
}

/* One round of population pop (plain or secagg) where device 0 sends `boost` x its honest
 * vector (boost 0: the largest positive value of the modulus in every coordinate). Returns
 * the L2 distance between the model and the honest round's model, or -1 when the server
 * refused the boosted update. */
static double boosted_round(struct fx *f, struct tc *c, const char *pop, bool secagg, double boost,
                            float *base, int *status_out) {
    int64_t rid;
    checkin_all(f, c, N, &rid);
    fetch_tasks(f, c, N, rid);
    float honest[D];
    expected_fedavg(c, N, base, honest);
    uint32_t bits = c[0].task.bits;
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    for (int j = 0; j < D; j++) {
        /* boost 0: the largest positive value, less a margin so that the others' honest
         * values cannot wrap the sum. */
        int64_t z = boost > 0 ? (int64_t)llround((double)centred(c[0].words[j], bits) * boost)
                              : (int64_t)(mask >> 1) - 4096;
        c[0].words[j] = (uint64_t)z & mask;
    }
    float boosted[D];
    expected_fedavg(c, N, base, boosted);
    int st0 = 0;
    if (secagg) {
        json_t *o = run_secagg(f, c, N, rid);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
        json_decref(o);
        st0 = 202;
    } else {
        uint8_t body[4096];
        for (int i = 0; i < N; i++) {
            size_t len = words_body(&c[i], body);
            struct resp r = post_to(f, c[i].tok, rid, 4, c[i].pid, body, len);
            if (i == 0)
                st0 = (int)r.status;
            else
                assert_int_equal(r.status, 202);
            resp_free(&r);
        }
        if (st0 != 202) {
            /* Refused: the round runs on without device 0 (its deadline). */
            *status_out = st0;
            return -1;
        }
        json_t *o = NULL;
        for (int k = 0; k < 50 && !o; k++) {
            o = round_status(f, &c[0], rid);
            if (strcmp(json_string_value(json_object_get(o, "state")), "completed") != 0) {
                json_decref(o);
                o = NULL;
                rel_sleep_ms(20);
            }
        }
        assert_non_null(o);
        json_decref(o);
    }
    *status_out = st0;
    float w[D], b[2];
    fetch_model(f, &c[0], pop, tag_version(f, pop), w, b);
    if (c[0].task.mode == 0 && secagg)
        assert_memory_equal(w, boosted, sizeof(w)); /* applied in full, exactly */
    double moved = l2_diff(w, honest);
    memcpy(base, w, sizeof(w));
    return moved;
}

static void test_norm(void **state) {
    struct fx *f = *state;
    struct {
        const char *name, *mode;
        bool secagg;
    } pops[3] = {
        {"nplain", "none", false}, {"ncentral", "central", false}, {"nsecagg", "none", true}};
    bool strict = getenv("FL_REL_STRICT") != NULL;
    for (int p = 0; p < 3; p++) {
        char *tok[N];
        struct popcfg pc = {.name = pops[p].name, .target = N, .min = N, .secagg = pops[p].secagg,
                            .neighbors = N - 1, .mode = pops[p].mode, .budget = 1e6};
        setup_population(f, &pc, tok, N);
        struct tc *c = calloc(N, sizeof(*c));
        assert_non_null(c);
        for (int i = 0; i < N; i++)
            c[i].tok = tok[i];
        float base[D];
        for (int j = 0; j < D; j++)
            base[j] = base_w(j);
        double honest_norm = 0;
        int st100 = 0, stmax = 0;
        double m100 = boosted_round(f, c, pops[p].name, pops[p].secagg, 100.0, base, &st100);
        for (int j = 0; j < D; j++)
            honest_norm += (double)c[0].delta[j] * c[0].delta[j];
        honest_norm = sqrt(honest_norm);
        double mmax = -1;
        if (m100 >= 0)
            mmax = boosted_round(f, c, pops[p].name, pops[p].secagg, 0, base, &stmax);
        double bound = 1.0 / N; /* clip / n */
        fprintf(stderr,
                "norm bound, %s (%s%s): device 0 x100 (its honest |delta| %.3f, clip "
                "1): %s, aggregate moved %.3f = %.1fx the clip/n bound %.3f; largest value "
                "of the modulus: %s, moved %.4g (%.3gx)%s\n",
                pops[p].name, pops[p].mode, pops[p].secagg ? ", secure aggregation" : ", plain",
                honest_norm, st100 == 202 ? "accepted" : "refused", m100, m100 / bound, bound,
                stmax == 202 ? "accepted" : "refused", mmax, mmax / bound,
                pops[p].mode[0] == 'c' ? " (central noise included)" : "");
        if (strict && !pops[p].secagg)
            assert_true(st100 != 202);
        clients_free(c, N);
        free(c);
    }
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replay, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_sybil, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_norm, fx_setup, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
