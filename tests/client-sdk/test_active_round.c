/* Secure aggregation in active-adversary mode, SDK side, against the REAL coordinator
 * in-process on 127.0.0.1 over the libcurl transport (wrapped by flotilla-sim's fault
 * transport). A device authority (this test) makes its key pair and certifies each device's
 * key with its device id (v2 certificate); the population is created with
 * secagg.consistency_check and the authority's verification key, and devices pin the same
 * key in fl_client_config.
 *
 *  - Enrollment with a certificate from another authority, without an identity, or with a
 *    device id already enrolled is refused with the coordinator's reason and leaves the
 *    client FAILED (sticky); a device with its identity enrolls. */
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
    uint8_t vk[32];
    memset(id, 0, sizeof(*id));
    assert_int_equal(fl_client_identity_keygen(vk, id->signing_key), FL_OK);
    snprintf((char *)id->device_id, sizeof(id->device_id), "device-%d", k);
    assert_int_equal(
        fl_secagg_cert_issue_device(id->cert, a->sk, id->device_id, vk, FL_SECAGG_BACKEND_DEFAULT),
        FL_OK);
    memcpy(id->authority_key, pinned, 32);
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
};

static void pop_json(char *out, size_t cap, const char *name, int target, int min,
                     const uint8_t auth_vk[32], int dl) {
    char hex[65];
    sodium_bin2hex(hex, sizeof(hex), auth_vk, 32);
    snprintf(out, cap,
             "{\"name\":\"%s\",\"allowed_regions\":[\"EU\"],"
             "\"selection\":{\"target\":%d,\"over_selection\":1.0,\"min_participants\":%d,"
             "\"require\":[],\"forming_s\":5,\"jitter_s\":0,\"min_retry_s\":1,"
             "\"max_retry_s\":60},"
             "\"deadlines_s\":{\"advertise\":%d,\"share\":%d,\"masked\":%d,\"consistency\":%d,"
             "\"unmask\":%d},"
             "\"training\":{\"epochs\":2,\"batch_size\":8,\"learning_rate\":0.1,"
             "\"max_examples\":100},"
             "\"update\":{\"tensors\":[\"fc1.weight\",\"fc1.bias\",\"fc2.weight\",\"fc2.bias\"],"
             "\"weighting\":\"uniform\"},"
             "\"strategy\":{\"name\":\"fedavg\"},"
             "\"secagg\":{\"enabled\":true,\"threshold_fraction\":0.5,"
             "\"consistency_check\":true,\"authority_key\":\"%s\"},"
             "\"privacy\":{\"mode\":\"none\",\"clip_norm\":1.0}}",
             name, target, min, dl, dl, dl, dl, dl, hex);
}

static void world_open(struct world *w, int n, int dl) {
    memset(w, 0, sizeof(*w));
    w->f = sfx_start(false);
    authority_make(&w->auth);
    w->model = sfx_model(&w->mlen);
    char json[4096];
    pop_json(json, sizeof(json), "pop", n, n > 3 ? n - 1 : n, w->auth.vk, dl);
    sfx_population(w->f, json, w->model, w->mlen, w->etok, sizeof(w->etok));
    w->n = n;
    for (int i = 0; i < n; i++) {
        identity_make(&w->id[i], &w->auth, w->auth.vk, i);
        struct sdev_opts o = {"pop", w->etok, NULL, 20, 0, NULL, NULL};
        assert_int_equal(sdev_open_identity(&w->d[i], w->f, i, &o, &w->id[i]), FL_OK);
    }
}

static void world_close(struct world *w) {
    for (int i = 0; i < w->n; i++)
        sdev_close(&w->d[i]);
    sfx_stop(w->f);
    free(w->model);
    sodium_memzero(w->auth.sk, sizeof(w->auth.sk));
}

/* ---- tests ---- */

/* Enrollment refused by the coordinator: the reason reaches fl_client_errmsg and the
 * client is FAILED (sticky). */
static void expect_enroll_refused(struct world *w, const struct sdev_identity *id, fl_status want,
                                  const char *const *needles) {
    struct sdev d;
    struct sdev_opts o = {"pop", w->etok, NULL, 5, 0, NULL, NULL};
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
    world_open(&w, 1, 10);
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
        cmocka_unit_test(test_enrollment_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
