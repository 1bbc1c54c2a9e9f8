#ifndef FL_TEST_AUDIT_UTIL_H
#define FL_TEST_AUDIT_UTIL_H
/* Helpers shared by the audit tests: a store with one population, enrolled clients and a
 * base model, and a round runner that commits like the coordinator does (model version +
 * round record + ledger entry + audit entry in one transaction). */
#include <sodium.h>

#include "test_store_util.h"

#define AUDIT_ORIGIN "flotilla.test/audit"

struct audit_fx {
    struct store_tdir t;
    fl_store *st;
    int64_t pop;      /* population "keyboard", regions EU and UK, budget (8, 1e-6) */
    int64_t model;    /* current model version */
    int64_t round_no; /* last round number */
    double eps_total; /* accountant total so far */
    uint8_t pk[32];   /* checkpoint key */
    uint8_t sk[64];
    int64_t now;   /* fake clock, Unix ms */
    int n_clients; /* enrolled clients c000.. */
    char msg[256]; /* errmsg of the last failed audit_fx_round */
    /* NULL, or called on the round info audit_fx_round built; it returns the info to append
     * (info itself, or a copy it owns, e.g. one of an older struct_size). */
    const fl_store_audit_round_info *(*edit)(fl_store_audit_round_info *info, void *user);
    void *edit_user;
};

static inline int64_t audit_fx_clock(void *user) {
    struct audit_fx *f = user;
    return f->now;
}

static inline fl_store *audit_fx_open(struct audit_fx *f, const fl_allocator *a) {
    fl_store_config cfg;
    fl_store_config_init(&cfg);
    cfg.allocator = a;
    cfg.clock = audit_fx_clock;
    cfg.clock_user = f;
    fl_store *st = NULL;
    fl_status r = fl_store_open(&st, f->t.path, &cfg);
    if (r != FL_OK)
        fail_msg("open: %s", fl_store_errmsg(st));
    return st;
}

static inline void audit_fx_weights(float *w, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((i * 7 + (size_t)seed * 13) % 101) * 0.01f;
}

static inline void audit_fx_setup(struct audit_fx *f, int n_clients) {
    memset(f, 0, sizeof(*f));
    assert_int_equal(sodium_init() >= 0, 1);
    store_tdir_make(&f->t, "audit.db");
    f->now = 1700000000000;
    f->st = audit_fx_open(f, NULL);
    unsigned char seed[32];
    memset(seed, 7, sizeof(seed));
    crypto_sign_seed_keypair(f->pk, f->sk, seed);
    STORE_OK(f->st,
             fl_store_population_create(f->st, &f->pop, "keyboard", "{\"task\":\"next-word\"}", 8.0,
                                        1e-6, "[\"EU\",\"UK\"]"));
    for (int i = 0; i < n_clients; i++) {
        char id[16];
        uint8_t tok[16];
        snprintf(id, sizeof(id), "c%03d", i);
        memset(tok, i + 1, sizeof(tok));
        STORE_OK(f->st,
                 fl_store_client_enroll(f->st, id, tok, sizeof(tok), i % 3 ? "EU" : "UK", f->pop));
    }
    f->n_clients = n_clients;
    float w[64];
    audit_fx_weights(w, 64, 0);
    fl_store_model_ref ref;
    STORE_OK(f->st, fl_store_model_put(f->st, &ref, f->pop, 0, w, sizeof(w), NULL));
    f->model = ref.version;
    STORE_OK(f->st, fl_store_audit_append_population(f->st, NULL, f->pop));
    STORE_OK(f->st, fl_store_audit_append_model(f->st, NULL, f->pop, f->model));
}

static inline void audit_fx_teardown(struct audit_fx *f) {
    fl_store_close(f->st);
    store_tdir_rm(&f->t);
}

/* Runs one round with all n_clients selected, `dropped` of them dropping in the masked
 * phase, spending eps_step; returns what fl_store_audit_append_round returned (the whole
 * transaction is rolled back unless it is FL_OK). */
static inline fl_status audit_fx_round(struct audit_fx *f, int dropped, double eps_step,
                                       int64_t *seq) {
    fl_store *st = f->st;
    int64_t rid = 0;
    int n = f->n_clients;
    f->now += 60000;
    STORE_OK(st, fl_store_begin(st));
    STORE_OK(st, fl_store_round_create(st, &rid, f->pop, 0, f->model, "{\"lr\":0.1}"));
    STORE_OK(st, fl_store_round_start(st, rid));
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof(id), "c%03d", i);
        STORE_OK(st, fl_store_participant_set(st, rid, id,
                                              i < dropped ? FL_STORE_PARTICIPANT_DROPPED
                                                          : FL_STORE_PARTICIPANT_COMPLETED));
    }
    fl_store_round_counts counts = {n + 2, n, n - dropped, dropped};
    STORE_OK(st, fl_store_round_set_counts(st, rid, &counts));
    float w[64];
    audit_fx_weights(w, 64, (int)f->round_no + 1);
    fl_store_model_ref ref;
    STORE_OK(st, fl_store_model_put(st, &ref, f->pop, f->model, w, sizeof(w), NULL));
    f->now += 1000;
    STORE_OK(st, fl_store_round_complete(st, rid, ref.version));
    fl_store_ledger_entry le = {0};
    le.population_id = f->pop;
    le.round_id = rid;
    le.mechanism = "ddgauss";
    le.sampling_rate = 0.01;
    le.noise_multiplier = 1.1;
    le.clip_norm = 1.0;
    le.steps = 1;
    le.participants = n - dropped;
    STORE_OK(st, fl_store_ledger_append(st, NULL, &le));
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = rid;
    info.dropped_by_phase[FL_STORE_AUDIT_PHASE_MASKED] = dropped;
    info.secagg_enabled = 1;
    info.secagg_n = n;
    info.secagg_k = n > 1 ? n - 1 : 1;
    info.secagg_t = (n - dropped) / 2 > 0 ? (n - dropped) / 2 : 1;
    info.epsilon_total = f->eps_total + eps_step;
    info.delta = 1e-7;
    info.coordinator_version = "test-1.0";
    fl_status r =
        fl_store_audit_append_round(st, seq, f->edit ? f->edit(&info, f->edit_user) : &info);
    if (r == FL_OK) {
        STORE_OK(st, fl_store_commit(st));
        f->model = ref.version;
        f->eps_total += eps_step;
        f->round_no++;
    } else {
        snprintf(f->msg, sizeof(f->msg), "%s", fl_store_errmsg(st));
        STORE_OK(st, fl_store_rollback(st));
    }
    return r;
}

/* Reads a whole file into a malloc'ed buffer. */
static inline uint8_t *audit_read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return b;
}

#endif
