/* The SDK starts no threads of its own (docs/client-sdk.md, "Threads"): a process that links
 * the SDK, creates a client with the default transport, fills an example store, trains the
 * built-in MLP on it (the CBLAS path when the build has it) and builds a round's update
 * (task parse, delta, clip, rotation, distributed-DP noise, quantization) must still be
 * running exactly one thread, before and after. Debian's default libopenblas.so.0 is the
 * pthread flavour, whose library constructor starts a pool at load time; with it this test
 * fails at its first check (run it with LD_LIBRARY_PATH=/usr/lib/<arch>/openblas-pthread
 * to see). When the build links OpenBLAS (FL_TEST_EXPECT_CBLAS), the test also checks that
 * the trainer really used CBLAS and that the libopenblas mapped into the process is the
 * serial one. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#ifdef FL_TEST_HAVE_CURL
#include <curl/curl.h>
#endif

#include "client_round.h"
#include "fl_test.h"
#include "flotilla/client.h"

#define IN 32 /* MLP 32-16-10 */
#define HID 16
#define CLS 10
#define N_EX 256 /* examples in the store */

/* Threads of this process: the entries of /proc/self/task. */
static int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Counts the mappings of /proc/self/maps whose path contains needle. */
static int maps_count(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

#ifndef FL_TEST_HAVE_CURL
/* A build without libcurl has no default transport: this one is never called (the client
 * is created and destroyed without a round, so no traffic). */
static fl_status no_send(void *ctx, const fl_client_request *req) {
    (void)ctx;
    (void)req;
    return FL_ERR_IO;
}
static fl_status no_recv(void *ctx, fl_client_response *resp) {
    (void)ctx;
    (void)resp;
    return FL_ERR_IO;
}
#endif

/* Update source over the trainer's arenas: tensor name -> (trained, global) floats. */
static fl_status src_get(void *user, const char *name, float *trained, float *global,
                         size_t *numel) {
    fl_client_trainer *tr = user;
    size_t nl;
    const struct fl__client_layer *ly = fl__client_trainer_layers(tr, &nl);
    const float *w = fl__client_trainer_params_ptr(tr), *g = fl__client_trainer_global_ptr(tr);
    for (size_t i = 0; i < nl; i++) {
        size_t off, n;
        if (strcmp(name, ly[i].wname) == 0) {
            off = ly[i].w_off;
            n = (size_t)ly[i].in * ly[i].out;
        } else if (strcmp(name, ly[i].bname) == 0) {
            off = ly[i].b_off;
            n = ly[i].out;
        } else {
            continue;
        }
        *numel = n;
        if (trained)
            memcpy(trained, w + off, n * sizeof(float));
        if (global)
            memcpy(global, g + off, n * sizeof(float));
        return FL_OK;
    }
    return FL_ERR_NOT_FOUND;
}

/* A round-17 task of population "pop" for the 698-parameter MLP: distributed DP (flat clip,
 * Hadamard rotation to 1024, discrete Gaussian), secure aggregation of 4 devices. */
static size_t task_json(char *buf, size_t cap, const char *t1, const char *t2, const char *t3,
                        const char *t4) {
    int n = snprintf(
        buf, cap,
        "{\"data_schema\":null,\"deadlines\":{\"advertise_unix_ms\":1767225630000,"
        "\"consistency_unix_ms\":1767225720000,\"masked_unix_ms\":1767225720800,"
        "\"share_unix_ms\":1767225660000,\"unmask_unix_ms\":1767225750000},"
        "\"dp\":{\"beta\":0.6065306597126334,\"client_sigma\":12.5,"
        "\"client_variance_den\":1048,\"client_variance_num\":163840,\"clip_kind\":\"flat\","
        "\"clip_norm\":1.0,\"granularity\":0.0009765625,\"mechanism\":\"discrete_gaussian\","
        "\"min_survivors\":3,\"mode\":\"distributed\",\"modulus_bits\":32,"
        "\"noise_multiplier\":1.0,"
        "\"quantization_seed\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\","
        "\"rotation\":{\"kind\":\"hadamard\","
        "\"seed\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh4=\"}},"
        "\"kind\":\"sync\",\"model\":{\"url\":\"/v1/models/pop/1\",\"version\":1},"
        "\"population\":\"pop\",\"protocol\":\"flotilla/v1\",\"round_id\":17,"
        "\"secagg\":{\"client_index\":1,\"enabled\":true,\"modulus_bits\":32,\"neighbors\":3,"
        "\"num_clients\":4,"
        "\"session_id\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\",\"threshold\":2,"
        "\"vector_length\":1025},"
        "\"training\":{\"batch_size\":8,\"epochs\":2,\"learning_rate\":0.05,"
        "\"max_examples\":%d,\"optimizer\":\"sgd\",\"proximal_mu\":0.0},"
        "\"update\":{\"dim\":698,\"length\":1025,"
        "\"tensors\":[\"%s\",\"%s\",\"%s\",\"%s\"],\"weight_cap\":%d,"
        "\"weighting\":\"uniform\"}}",
        N_EX, t1, t2, t3, t4, N_EX);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static void test_no_threads(void **state) {
    (void)state;
    /* Loading the SDK (and what it links) must not have started anything. */
    assert_int_equal(thread_count(), 1);
#ifdef FL_TEST_EXPECT_CBLAS
    assert_int_equal(fl__client_kernels_blas(), 1);
    assert_true(maps_count("/openblas-serial/") > 0);
    assert_int_equal(maps_count("/openblas-pthread/"), 0);
#else
    /* Portable kernels: no OpenBLAS of either flavour in the process. */
    assert_int_equal(fl__client_kernels_blas(), 0);
    assert_int_equal(maps_count("libopenblas"), 0);
#endif

    fl_client_store_config sc;
    fl_client_store_config_init(&sc);
    sc.path = ":memory:";
    sc.feature_dim = IN;
    fl_client_store *st = NULL;
    char err[256];
    assert_int_equal(fl_client_store_open(&st, &sc, err, sizeof(err)), FL_OK);
    uint64_t s = 11;
    float x[IN];
    for (int i = 0; i < N_EX; i++) {
        int32_t y = i % CLS;
        for (int j = 0; j < IN; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) +
                   (j % CLS == y ? 0.8f : 0.0f);
        }
        assert_int_equal(fl_client_store_add(st, x, IN, y), FL_OK);
    }

    /* A client with the default transport where the build has one. */
    fl_client_config cc;
    fl_client_config_init(&cc);
    cc.population = "pop";
    cc.region = "eu";
    memset(cc.coordinator_key, 7, sizeof(cc.coordinator_key));
    cc.has_coordinator_key = 1;
    cc.enrollment_token = "enrollment-token-of-this-test";
    cc.store = st;
    fl_client_curl *curl = NULL;
#ifdef FL_TEST_HAVE_CURL
    fl_client_curl_config kc;
    fl_client_curl_config_init(&kc);
    kc.base_url = "http://127.0.0.1:9";
    assert_int_equal(fl_client_curl_create(&curl, &kc, err, sizeof(err)), FL_OK);
    assert_int_equal(fl_client_curl_transport(curl, &cc.transport), FL_OK);
#else
    cc.transport.struct_size = sizeof(cc.transport);
    cc.transport.send = no_send;
    cc.transport.recv = no_recv;
#endif
    fl_client *c = NULL;
    fl_status rc = fl_client_create(&c, &cc, err, sizeof(err));
    if (rc != FL_OK)
        fprintf(stderr, "fl_client_create: %s\n", err);
    assert_int_equal(rc, FL_OK);

    /* Local training with the built-in MLP trainer, from the store. */
    const uint32_t sizes[3] = {IN, HID, CLS};
    size_t mlen = 0;
    assert_int_equal(fl_client_model_init(NULL, 0, &mlen, sizes, 3, 5, NULL), FL_ERR_TOO_LARGE);
    uint8_t *model = malloc(mlen);
    assert_non_null(model);
    assert_int_equal(fl_client_model_init(model, mlen, &mlen, sizes, 3, 5, NULL), FL_OK);
    fl_client_trainer *tr = NULL;
    assert_int_equal(fl_client_trainer_create(&tr, model, mlen, NULL), FL_OK);
    assert_int_equal(fl_client_trainer_num_params(tr), 698);
    size_t nl;
    const struct fl__client_layer *ly = fl__client_trainer_layers(tr, &nl);
    assert_int_equal(nl, 2);

    /* The round's task, parsed as the client would after the signature check. */
    char body[3072];
    size_t blen = task_json(body, sizeof(body), ly[0].wname, ly[0].bname, ly[1].wname, ly[1].bname);
    struct fl__client_task task;
    struct fl__err ferr = {0};
    assert_int_equal(fl__client_task_parse(&task, body, blen, 17, "pop", NULL, &ferr), FL_OK);
    uint64_t used = 0;
    double loss0 = 0, loss1 = 0;
    fl_client_train_params p = task.train;
    p.epochs = 1;
    assert_int_equal(fl_client_trainer_train_store(tr, st, &p, &used, &loss0), FL_OK);
    p.epochs = task.train.epochs;
    assert_int_equal(fl_client_trainer_train_store(tr, st, &p, &used, &loss1), FL_OK);
    assert_int_equal(used, N_EX);
    assert_true(loss1 < loss0); /* it learned: the kernels really ran */
    fl__client_trainer_release_work(tr);

    /* The private update: delta, clip, rotation, noise, quantization. */
    struct fl__client_update_src src = {src_get, NULL, tr};
    void *vec = NULL;
    size_t len = 0, wb = 0;
    assert_int_equal(
        fl__client_update_build(&vec, &len, &wb, &task, &src, used, NULL, NULL, NULL, &ferr),
        FL_OK);
    assert_int_equal(len, 1025);
    assert_int_equal(wb, 4);
    fl__free(NULL, vec, len * wb);
    fl__client_task_free(&task, NULL);

    assert_int_equal(thread_count(), 1);
#ifdef FL_TEST_EXPECT_CBLAS
    assert_int_equal(maps_count("/openblas-pthread/"), 0);
#endif
    fl_client_trainer_destroy(tr);
    free(model);
    fl_client_destroy(c);
    fl_client_curl_destroy(curl);
    fl_client_store_close(st);
    assert_int_equal(thread_count(), 1);
}

int main(void) {
#ifdef FL_TEST_HAVE_CURL
    /* What an app does once before using the curl transport (no threads either). */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_threads),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
#ifdef FL_TEST_HAVE_CURL
    curl_global_cleanup();
#endif
    return rc;
}
