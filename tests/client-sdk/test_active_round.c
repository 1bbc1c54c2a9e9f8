/* Secure aggregation in active-adversary mode, SDK side, against the REAL coordinator
 * in-process on 127.0.0.1 over the libcurl transport (wrapped by flotilla-sim's fault
 * transport, which observes every exchange). A device authority (this test) makes its key
 * pair, certifies each device's key with its device id (v2 certificate) and the population
 * is created with secagg.consistency_check and the authority's verification key; devices
 * pin the same key in fl_client_config.
 *
 *  - A round completes with every device signing the survivor set (the consistency phase:
 *    a POST of each device's signature and its result, and the coordinator's phase count),
 *    and the unmasked sum equals the sum of the devices' own vectors bit for bit; also with
 *    a device that vanishes before its masked input (dropped; the survivors' sum).
 *  - A client enrolled with an identity but run without one (the app lost it) refuses the
 *    active task: FL_ERR_STATE with the reason, no model download, nothing posted.
 *  - Enrollment with a certificate from another authority, without an identity, or with a
 *    device id already enrolled is refused with the coordinator's reason and leaves the
 *    client FAILED (sticky). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <sodium.h>

#include "flotilla/secagg.h"
#include "sdk_fixture.h"

/* ---- the device authority ---- */

struct authority {
    uint8_t vk[32], sk[64];
};

static void authority_make(struct authority *a) {
    assert_int_equal(fl_secagg_signing_keygen(a->vk, a->sk, FL_SECAGG_BACKEND_DEFAULT), FL_OK);
}

/* Device k's identity: its own key pair and device id "device-<k>", certified by a; the app
 * pins `pinned` (the authority key it was given). */
static void identity_make(struct sdev_identity *id, const struct authority *a,
                          const uint8_t pinned[32], int k) {
    char name[32];
    snprintf(name, sizeof(name), "device-%d", k);
    sdev_identity_make(id, a->sk, pinned, name);
}

/* ---- population and devices ---- */

#define NDEV 4

struct world {
    struct sfx *f;
    struct authority auth;
    uint8_t *model;
    size_t mlen;
    char etok[256];
    struct sdev d[NDEV];
    struct sdev_identity id[NDEV];
    int n;
    /* what each device's transport saw of the consistency phase */
    int cons_post[NDEV], cons_result[NDEV], model_get[NDEV], posts[NDEV];
};

/* Counts the exchanges of interest per device (its consistency posts and results, model
 * downloads, phase posts and uploads). */
struct obs {
    struct world *w;
    int k;
};
static struct obs obs_ctx[NDEV];

static void observe(void *user, const fl_client_request *req, int status) {
    struct obs *o = user;
    struct world *w = o->w;
    bool post = strcmp(req->method, "POST") == 0;
    if (post && strstr(req->path, "/secagg/consistency") && !strstr(req->path, "/result") &&
        (status == 202 || status == 200))
        w->cons_post[o->k]++;
    if (!post && strstr(req->path, "/secagg/consistency/result") && status == 200)
        w->cons_result[o->k]++;
    if (!post && strstr(req->path, "/v1/models/"))
        w->model_get[o->k]++;
    if (post && (strstr(req->path, "/secagg/") || strstr(req->path, "/update")))
        w->posts[o->k]++;
}

static void world_open(struct world *w, int n, int dl) {
    memset(w, 0, sizeof(*w));
    w->f = sfx_start(false);
    authority_make(&w->auth);
    w->model = sfx_model(&w->mlen);
    char json[4096];
    sfx_active_pop_json(json, sizeof(json), "pop", n, n > 3 ? n - 1 : n, w->auth.vk, dl, NULL);
    sfx_population(w->f, json, w->model, w->mlen, w->etok, sizeof(w->etok));
    w->n = n;
    for (int i = 0; i < n; i++) {
        identity_make(&w->id[i], &w->auth, w->auth.vk, i);
        struct sdev_opts o = {.population = "pop", .etok = w->etok, .n_examples = 20};
        assert_int_equal(sdev_open_identity(&w->d[i], w->f, i, &o, &w->id[i]), FL_OK);
        obs_ctx[i] = (struct obs){w, i};
        sim_ft_set_observe(w->d[i].ft, observe, &obs_ctx[i]);
    }
}

static void world_close(struct world *w) {
    for (int i = 0; i < w->n; i++)
        sdev_close(&w->d[i]);
    sfx_stop(w->f);
    free(w->model);
    sodium_memzero(w->auth.sk, sizeof(w->auth.sk));
}

/* The coordinator's admin view of the round: phase_counts.consistency. */
static long consistency_count(struct world *w, int64_t rid) {
    char path[96], out[8192];
    snprintf(path, sizeof(path), "/v1/admin/rounds/%lld", (long long)rid);
    assert_int_equal(sfx_admin(w->f, "GET", path, NULL, NULL, 0, out, sizeof(out)), 200);
    const char *pc = strstr(out, "\"phase_counts\"");
    assert_non_null(pc);
    const char *c = strstr(pc, "\"consistency\"");
    assert_non_null(c);
    c += 13;
    while (*c == ' ' || *c == ':')
        c++;
    return strtol(c, NULL, 10);
}

static void active_round(const char *vanish_phase) {
    struct world w;
    world_open(&w, NDEV, 10);
    bool in[NDEV];
    sdev_round_vanish(w.f, w.d, NDEV, vanish_phase, in);
    sfx_check_sum(w.f, w.d, w.n, in, true);
    int survivors = 0;
    for (int i = 0; i < NDEV; i++) {
        fl_client_stats cs;
        sdev_stats(&w.d[i], &cs);
        if (!in[i]) {
            assert_int_equal(cs.rounds_completed, 0);
            assert_int_equal(w.cons_post[i], 0);
            continue;
        }
        survivors++;
        if (cs.rounds_completed != 1)
            fprintf(stderr, "device %d: %s\n", i, fl_client_errmsg(w.d[i].c));
        assert_int_equal(cs.rounds_completed, 1);
        assert_int_equal(cs.rounds_failed, 0);
        assert_int_equal(cs.uploads, 1);
        /* The consistency phase ran on this device: its signature was accepted once and
         * the signatures' result fetched (what lets it go on to unmasking). */
        assert_int_equal(w.cons_post[i], 1);
        assert_true(w.cons_result[i] >= 1);
    }
    pthread_mutex_lock(&w.f->lock);
    int64_t rid = w.f->sum.round_id;
    pthread_mutex_unlock(&w.f->lock);
    assert_int_equal(consistency_count(&w, rid), survivors);
    world_close(&w);
}

/* ---- tests ---- */

static void test_active_round_exact(void **st) {
    (void)st;
    active_round(NULL);
}

static void test_active_round_dropout_before_masked(void **st) {
    (void)st;
    active_round("/secagg/masked");
}

/* A client enrolled with an identity, then run without one (the app lost its identity but
 * kept the token): the active task is refused before the model is fetched, nothing is
 * posted, the round is given up (FL_ERR_STATE, not sticky), the others' round goes on. */
static void test_no_identity_refuses_active_task(void **st) {
    (void)st;
    struct world w;
    world_open(&w, 3, 10); /* active mode needs 3 clients at least */
    /* Device 0 enrolls (one step), then comes back without its identity. */
    int64_t next;
    assert_int_equal(fl_client_step(w.d[0].c, &next), FL_OK);
    char tok[256];
    assert_int_equal(fl_client_token(w.d[0].c, tok, sizeof(tok)), FL_OK);
    sdev_close(&w.d[0]);
    struct sdev_opts o = {.population = "pop", .client_token = tok, .n_examples = 20};
    assert_int_equal(sdev_open(&w.d[0], w.f, 0, &o), FL_OK);
    sim_ft_set_observe(w.d[0].ft, observe, &obs_ctx[0]);
    fl_client_stats cs;
    int pass;
    for (pass = 0; pass < 400; pass++) {
        sdev_drive(w.f, w.d, 3, NULL, NULL, 1, 200);
        sdev_stats(&w.d[0], &cs);
        if (cs.rounds_failed)
            break;
    }
    assert_true(pass < 400);
    assert_int_equal(cs.selected, 1);
    assert_int_equal(cs.rounds_failed, 1);
    assert_int_equal(cs.rounds_completed, 0);
    assert_int_equal(cs.last_error, FL_ERR_STATE);
    assert_int_equal(cs.state, FL_CLIENT_STATE_IDLE); /* not sticky */
    assert_non_null(strstr(fl_client_errmsg(w.d[0].c),
                           "the population requires a device identity (secagg active mode)"));
    assert_int_equal(w.model_get[0], 0);
    assert_int_equal(w.posts[0], 0);
    assert_int_equal(w.d[0].up.calls, 0); /* nothing trained */
    world_close(&w);
}

/* Enrollment refused by the coordinator: the reason reaches fl_client_errmsg and the
 * client is FAILED (sticky). */
static void expect_enroll_refused(struct world *w, const struct sdev_identity *id, fl_status want,
                                  const char *const *needles) {
    struct sdev d;
    struct sdev_opts o = {.population = "pop", .etok = w->etok, .n_examples = 5};
    assert_int_equal(sdev_open_identity(&d, w->f, 9, &o, id), FL_OK);
    int64_t next;
    assert_int_equal(fl_client_step(d.c, &next), want);
    assert_int_equal(fl_client_step(d.c, &next), want); /* sticky */
    fl_client_stats cs;
    sdev_stats(&d, &cs);
    assert_int_equal(cs.state, FL_CLIENT_STATE_FAILED);
    char tok[256];
    assert_int_equal(fl_client_token(d.c, tok, sizeof(tok)), FL_ERR_NOT_FOUND);
    const char *msg = fl_client_errmsg(d.c);
    for (int i = 0; needles[i]; i++) {
        if (!strstr(msg, needles[i]))
            fprintf(stderr, "errmsg '%s' lacks '%s'\n", msg, needles[i]);
        assert_non_null(strstr(msg, needles[i]));
    }
    sdev_close(&d);
}

static void test_enrollment_refusals(void **st) {
    (void)st;
    struct world w;
    world_open(&w, 3, 10); /* a secure population needs 3 clients at least; one enrolls */
    /* A certificate from another authority (the app pinned that one, so the SDK's own
     * check passes; the population's authority refuses it). */
    struct authority other;
    authority_make(&other);
    struct sdev_identity bad;
    identity_make(&bad, &other, other.vk, 7);
    static const char *const n1[] = {"enrollment refused", "invalid_field", "secagg_identity",
                                     "does not verify", NULL};
    expect_enroll_refused(&w, &bad, FL_ERR_AUTH, n1);
    /* No identity at all. */
    static const char *const n2[] = {"enrollment refused", "invalid_field", "secagg_identity",
                                     NULL};
    expect_enroll_refused(&w, NULL, FL_ERR_AUTH, n2);
    /* Device 0's id again, with a fresh key certified by the right authority (a second
     * client for an enrolled device). */
    int64_t next;
    assert_int_equal(fl_client_step(w.d[0].c, &next), FL_OK); /* device 0 enrolls */
    char tok[256];
    assert_int_equal(fl_client_token(w.d[0].c, tok, sizeof(tok)), FL_OK);
    struct sdev_identity twin;
    identity_make(&twin, &w.auth, w.auth.vk, 0);
    assert_memory_equal(twin.device_id, w.id[0].device_id, 32);
    static const char *const n3[] = {"enrollment refused", "conflict", "already enrolled", NULL};
    expect_enroll_refused(&w, &twin, FL_ERR_STATE, n3);
    sodium_memzero(other.sk, sizeof(other.sk));
    world_close(&w);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_active_round_exact),
        cmocka_unit_test(test_active_round_dropout_before_masked),
        cmocka_unit_test(test_no_identity_refuses_active_task),
        cmocka_unit_test(test_enrollment_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
