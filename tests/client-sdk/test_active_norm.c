/* Active-adversary secure aggregation WITH norm proofs, SDK side, against the REAL
 * coordinator in-process on 127.0.0.1 over the libcurl transport (wrapped by flotilla-sim's
 * fault transport, which observes every exchange). The population sets
 * secagg.consistency_check with the device authority's key and secagg.norm_proof; each
 * device holds a v2 identity (its key, device id and the authority's certificate) and pins
 * the authority key. The SDK builds one secagg config from the task with both the active
 * fields (signed advertisements, consistency phase) and the norm bound (a proof in its
 * masked input):
 *  - a round completes with every device signing the survivor set, and the unmasked sum
 *    equals the sum of the devices' own quantized vectors bit for bit;
 *  - with a device that vanishes before its masked input, the others' sum, exactly.
 * (A device over the bound cannot come from the SDK, whose prover refuses it; the
 * coordinator's test_secagg_active_norm.c covers a forger.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "flotilla/secagg.h"
#include "sdk_fixture.h"

#define NDEV 4

struct world {
    struct sfx *f;
    uint8_t auth_vk[32], auth_sk[64];
    uint8_t *model;
    size_t mlen;
    char etok[256];
    struct sdev d[NDEV];
    struct sdev_identity id[NDEV];
    int cons_post[NDEV];  /* consistency signatures accepted, per device */
    int masked_post[NDEV]; /* masked inputs (with their proofs) accepted, per device */
    size_t masked_len[NDEV]; /* bytes of the last masked input posted, per device */
};

struct obs {
    struct world *w;
    int k;
};
static struct obs obs_ctx[NDEV];

static void observe(void *user, const fl_client_request *req, int status) {
    struct obs *o = user;
    bool post = strcmp(req->method, "POST") == 0, ok = status == 202 || status == 200;
    if (post && ok && strstr(req->path, "/secagg/consistency") && !strstr(req->path, "/result"))
        o->w->cons_post[o->k]++;
    if (post && strstr(req->path, "/secagg/masked")) {
        o->w->masked_len[o->k] = req->body_len;
        if (ok)
            o->w->masked_post[o->k]++;
    }
}

static void world_open(struct world *w) {
    memset(w, 0, sizeof(*w));
    w->f = sfx_start(false);
    assert_int_equal(fl_secagg_signing_keygen(w->auth_vk, w->auth_sk, FL_SECAGG_BACKEND_DEFAULT),
                     FL_OK);
    w->model = sfx_model(&w->mlen);
    char json[4096];
    sfx_active_pop_json(json, sizeof(json), "pop", NDEV, 3, w->auth_vk, 30,
                        ",\"norm_proof\":true");
    sfx_population(w->f, json, w->model, w->mlen, w->etok, sizeof(w->etok));
    for (int i = 0; i < NDEV; i++) {
        char name[32];
        snprintf(name, sizeof(name), "norm-device-%d", i);
        sdev_identity_make(&w->id[i], w->auth_sk, w->auth_vk, name);
        struct sdev_opts o = {.population = "pop", .etok = w->etok, .n_examples = 20};
        assert_int_equal(sdev_open_identity(&w->d[i], w->f, i, &o, &w->id[i]), FL_OK);
        obs_ctx[i] = (struct obs){w, i};
        sim_ft_set_observe(w->d[i].ft, observe, &obs_ctx[i]);
    }
}

static void world_close(struct world *w) {
    for (int i = 0; i < NDEV; i++)
        sdev_close(&w->d[i]);
    sfx_stop(w->f);
    free(w->model);
    sodium_memzero(w->auth_sk, sizeof(w->auth_sk));
}

/* Words of the round's vector (from the coordinator's sum). */
static size_t vec_len(struct world *w) {
    pthread_mutex_lock(&w->f->lock);
    size_t L = w->f->sum.vec_len;
    pthread_mutex_unlock(&w->f->lock);
    return L;
}

static void active_norm_round(const char *vanish_phase) {
    struct world w;
    world_open(&w);
    bool in[NDEV];
    sdev_round_vanish(w.f, w.d, NDEV, vanish_phase, in);
    sfx_check_sum(w.f, w.d, NDEV, in, false);
    for (int i = 0; i < NDEV; i++) {
        fl_client_stats cs;
        sdev_stats(&w.d[i], &cs);
        if (!in[i]) {
            assert_int_equal(cs.rounds_completed, 0);
            assert_int_equal(w.cons_post[i], 0);
            continue;
        }
        if (cs.rounds_completed != 1)
            fprintf(stderr, "device %d: %s\n", i, fl_client_errmsg(w.d[i].c));
        assert_int_equal(cs.rounds_completed, 1);
        assert_int_equal(cs.rounds_failed, 0);
        /* Its masked input with the proof, and its consistency signature, accepted once. */
        assert_int_equal(w.masked_post[i], 1);
        assert_int_equal(w.cons_post[i], 1);
        /* The masked input carries a proof: at least 64 bytes per coordinate beyond the
         * words (docs/secagg.md "Norm proofs"). */
        assert_true(w.masked_len[i] >= FL_SECAGG_HEADER_BYTES + 68 * vec_len(&w));
    }
    world_close(&w);
}

static void test_active_norm_round_exact(void **st) {
    (void)st;
    active_norm_round(NULL);
}

static void test_active_norm_dropout_before_masked(void **st) {
    (void)st;
    active_norm_round("/secagg/masked");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_active_norm_round_exact),
        cmocka_unit_test(test_active_norm_dropout_before_masked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
