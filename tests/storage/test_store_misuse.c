/* Every public storage call, store-side audit calls included, on a NULL handle
 * (FL_ERR_MISUSE) and on a failed handle (FL_ERR_STATE, keeping the open failure's
 * message), and the argument checks each call makes on a working handle: the documented
 * code, a message naming the argument, and nothing written. */
#include <math.h>

#include "test_audit_util.h"

/* Calls every fallible public entry point that takes a handle, with arguments that would
 * be fine on a working store, and checks each returns want. */
static void call_all(fl_store *st, fl_status want) {
    int64_t id = 0, n64 = 0;
    size_t n = 0;
    int hh = 0;
    uint8_t h[32], key[32], proof[4][32];
    memset(key, 1, sizeof(key));
    fl_store_population *pop = NULL;
    fl_store_client *cl = NULL;
    fl_store_model *m = NULL;
    fl_store_model_ref ref;
    fl_store_round *rd = NULL;
    fl_store_participant *pa = NULL;
    fl_store_ledger_entry le = {0}, *lel = NULL;
    le.population_id = 1;
    le.mechanism = "gaussian";
    le.sampling_rate = 0.5;
    le.clip_norm = 1;
    le.steps = 1;
    fl_store_round_counts counts = {1, 1, 1, 0};
    fl_store_audit_round_info info;
    fl_store_audit_round_info_init(&info);
    info.round_id = 1;
    fl_store_audit_entry *ae = NULL;
    fl_store_audit_checkpoint *cp = NULL;
    fl_store_retention_result rr;
    uint8_t *buf = NULL;
    uint8_t sk[64] = {0};
    const fl_status got[] = {
        fl_store_check(st),
        fl_store_begin(st),
        fl_store_commit(st),
        fl_store_rollback(st),
        fl_store_population_create(st, &id, "p", "{}", 1, 0, "[]"),
        fl_store_population_get(st, &pop, 1),
        fl_store_population_find(st, &pop, "p"),
        fl_store_population_set_state(st, 1, FL_STORE_POPULATION_PAUSED),
        fl_store_population_update_config(st, 1, "{}", 1, 0, "[]"),
        fl_store_population_list(st, &pop, &n),
        fl_store_population_client_count(st, 1, &n64),
        fl_store_client_enroll(st, "c", "0123456789abcdef", 16, "EU", 1),
        fl_store_client_get(st, &cl, "c"),
        fl_store_client_authenticate(st, "c", "0123456789abcdef", 16),
        fl_store_client_touch(st, "c"),
        fl_store_model_put(st, &ref, 1, 0, "m", 1, NULL),
        fl_store_model_get(st, &m, 1),
        fl_store_model_lineage(st, &m, &n, 1, 0),
        fl_store_tag_set(st, "t", 1),
        fl_store_tag_resolve(st, &id, "t"),
        fl_store_tag_delete(st, "t"),
        fl_store_round_create(st, &id, 1, 0, 0, NULL),
        fl_store_round_start(st, 1),
        fl_store_round_set_counts(st, 1, &counts),
        fl_store_round_complete(st, 1, 1),
        fl_store_round_abandon(st, 1, "why"),
        fl_store_round_get(st, &rd, 1),
        fl_store_round_find(st, &rd, 1, 1),
        fl_store_round_list_unfinished(st, &rd, &n, 0),
        fl_store_participant_set(st, 1, "c", FL_STORE_PARTICIPANT_SELECTED),
        fl_store_participant_list(st, &pa, &n, 1),
        fl_store_participant_set_v2(st, 1, "c", FL_STORE_PARTICIPANT_SELECTED, key),
        fl_store_participant_get(st, &pa, 1, "c"),
        fl_store_participant_get_v2(st, &pa, h, &hh, 1, "c"),
        fl_store_ledger_append(st, &id, &le),
        fl_store_ledger_list(st, &lel, &n, 1),
        fl_store_audit_append_population(st, NULL, 1),
        fl_store_audit_append_config(st, NULL, 1, "{}", 1, 0, "[]"),
        fl_store_audit_append_model(st, NULL, 1, 1),
        fl_store_audit_append_round(st, NULL, &info),
        fl_store_audit_append_refusal(st, NULL, 1, 1, 5, 0),
        fl_store_client_erase(st, NULL, "c", key),
        fl_store_retention_sweep(st, &rr, 1000),
        fl_store_audit_size(st, &n64),
        fl_store_audit_entry_get(st, &ae, 0),
        fl_store_audit_root(st, h, 0),
        fl_store_audit_inclusion_proof(st, proof, 4, &n, 0, 1),
        fl_store_audit_consistency_proof(st, proof, 4, &n, 0, 1),
        fl_store_audit_checkpoint_sign(st, &cp, AUDIT_ORIGIN, sk),
        fl_store_audit_checkpoint_latest(st, &cp),
        fl_store_audit_export(st, &buf, &n),
        fl_store_audit_export_file(st, "/nonexistent-dir/bundle.jsonl"),
    };
    for (size_t i = 0; i < sizeof(got) / sizeof(got[0]); i++)
        if (got[i] != want)
            fail_msg("call %zu: %s, want %s", i, fl_status_name(got[i]), fl_status_name(want));
    /* Nothing was handed out. */
    assert_null(pop);
    assert_null(cl);
    assert_null(m);
    assert_null(rd);
    assert_null(pa);
    assert_null(lel);
    assert_null(ae);
    assert_null(cp);
    assert_null(buf);
    assert_int_equal(fl_store_in_transaction(st), 0);
}

static void test_null_handle(void **state) {
    (void)state;
    call_all(NULL, FL_ERR_MISUSE);
    assert_string_equal(fl_store_errmsg(NULL), "store handle is NULL");
    fl_store_close(NULL);
    fl_store_free(NULL, NULL);
    fl_store_interrupt(NULL);
    assert_int_equal(fl_store_open(NULL, ":memory:", NULL), FL_ERR_MISUSE);
}

static void test_failed_handle(void **state) {
    (void)state;
    fl_store *st = NULL;
    fl_status r = fl_store_open(&st, "/nonexistent-dir/sub/x.db", NULL);
    assert_int_not_equal(r, FL_OK);
    assert_non_null(st);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", fl_store_errmsg(st));
    assert_true(msg[0] != '\0');
    call_all(st, FL_ERR_STATE);
    /* The open failure's message is kept for the caller. */
    assert_string_equal(fl_store_errmsg(st), msg);
    fl_store_interrupt(st);
    fl_store_close(st);
}

/* A working store with one population, a client, a model and a round. */
struct fx {
    struct store_tdir t;
    fl_store *st;
    int64_t pop, v1, round;
};

static void fx_make(struct fx *x) {
    memset(x, 0, sizeof(*x));
    store_tdir_make(&x->t, "misuse.db");
    x->st = store_open_ok(x->t.path, NULL);
    fl_store_model_ref ref;
    STORE_OK(x->st, fl_store_population_create(x->st, &x->pop, "p", "{}", 1, 0, "[\"EU\"]"));
    STORE_OK(x->st, fl_store_client_enroll(x->st, "c1", "0123456789abcdef", 16, "EU", x->pop));
    STORE_OK(x->st, fl_store_model_put(x->st, &ref, x->pop, 0, "m1", 2, NULL));
    x->v1 = ref.version;
    STORE_OK(x->st, fl_store_round_create(x->st, &x->round, x->pop, 0, x->v1, NULL));
}

static void fx_free(struct fx *x) {
    fl_store_close(x->st);
    store_tdir_rm(&x->t);
}

/* r must be code, and the message must mention word. */
#define EXPECT(st, call, code, word)                                                               \
    do {                                                                                           \
        fl_status r_ = (call);                                                                     \
        if (r_ != (code))                                                                          \
            fail_msg("%s -> %s (%s), want %s", #call, fl_status_name(r_), fl_store_errmsg(st),     \
                     fl_status_name(code));                                                        \
        if (!strstr(fl_store_errmsg(st), (word)))                                                  \
            fail_msg("%s: message \"%s\" does not mention \"%s\"", #call, fl_store_errmsg(st),     \
                     (word));                                                                      \
    } while (0)

static void test_null_outputs(void **state) {
    (void)state;
    struct fx x;
    fx_make(&x);
    fl_store *st = x.st;
    size_t n = 0;
    EXPECT(st, fl_store_population_get(st, NULL, x.pop), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_population_find(st, NULL, "p"), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_population_list(st, NULL, &n), FL_ERR_MISUSE, "NULL");
    EXPECT(st, fl_store_population_client_count(st, x.pop, NULL), FL_ERR_MISUSE, "count");
    EXPECT(st, fl_store_client_get(st, NULL, "c1"), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_model_get(st, NULL, x.v1), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_model_lineage(st, NULL, &n, x.v1, 0), FL_ERR_MISUSE, "NULL");
    EXPECT(st, fl_store_tag_resolve(st, NULL, "t"), FL_ERR_MISUSE, "version_out");
    EXPECT(st, fl_store_round_get(st, NULL, x.round), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_round_find(st, NULL, x.pop, 1), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_round_list_unfinished(st, NULL, &n, 0), FL_ERR_MISUSE, "NULL");
    EXPECT(st, fl_store_participant_list(st, NULL, &n, x.round), FL_ERR_MISUSE, "NULL");
    EXPECT(st, fl_store_ledger_list(st, NULL, &n, x.pop), FL_ERR_MISUSE, "NULL");
    EXPECT(st, fl_store_ledger_append(st, NULL, NULL), FL_ERR_MISUSE, "entry");
    EXPECT(st, fl_store_round_set_counts(st, x.round, NULL), FL_ERR_MISUSE, "counts");
    EXPECT(st, fl_store_audit_entry_get(st, NULL, 0), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_audit_root(st, NULL, 0), FL_ERR_MISUSE, "root");
    uint8_t proof[4][32];
    EXPECT(st, fl_store_audit_inclusion_proof(st, NULL, 4, &n, 0, 1), FL_ERR_MISUSE, "proof");
    EXPECT(st, fl_store_audit_consistency_proof(st, proof, 4, NULL, 0, 1), FL_ERR_MISUSE,
           "count");
    EXPECT(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, NULL), FL_ERR_MISUSE,
           "secret_key");
    EXPECT(st, fl_store_audit_checkpoint_latest(st, NULL), FL_ERR_MISUSE, "out");
    EXPECT(st, fl_store_audit_export(st, NULL, &n), FL_ERR_MISUSE, "NULL");
    uint8_t *b = NULL;
    EXPECT(st, fl_store_audit_export(st, &b, NULL), FL_ERR_MISUSE, "NULL");
    EXPECT(st, fl_store_audit_export_file(st, NULL), FL_ERR_MISUSE, "path");
    EXPECT(st, fl_store_audit_export_file(st, ""), FL_ERR_MISUSE, "path");
    fx_free(&x);
}

static void test_bad_numbers(void **state) {
    (void)state;
    struct fx x;
    fx_make(&x);
    fl_store *st = x.st;
    fl_store_population *p = NULL;
    fl_store_round *rd = NULL;
    fl_store_round_counts neg = {1, -1, 0, 0};
    /* populations */
    EXPECT(st, fl_store_population_set_state(st, 0, FL_STORE_POPULATION_PAUSED), FL_ERR_MISUSE,
           "id");
    EXPECT(st, fl_store_population_set_state(st, x.pop, (fl_store_population_state)7),
           FL_ERR_MISUSE, "state");
    EXPECT(st, fl_store_population_create(st, NULL, "q", "{}", 1, NAN, "[]"), FL_ERR_MISUSE,
           "delta");
    EXPECT(st, fl_store_population_create(st, NULL, "q", "{}", 1, 1.0, "[]"), FL_ERR_MISUSE,
           "delta");
    EXPECT(st, fl_store_population_get(st, &p, 0), FL_ERR_MISUSE, "id");
    /* rounds */
    EXPECT(st, fl_store_round_create(st, NULL, x.pop, -1, 0, NULL), FL_ERR_MISUSE, "round");
    EXPECT(st, fl_store_round_create(st, NULL, x.pop, 0, -1, NULL), FL_ERR_MISUSE, "base");
    EXPECT(st, fl_store_round_start(st, 0), FL_ERR_MISUSE, "round_id");
    EXPECT(st, fl_store_round_set_counts(st, 0, &neg), FL_ERR_MISUSE, "round_id");
    EXPECT(st, fl_store_round_set_counts(st, x.round, &neg), FL_ERR_MISUSE, ">= 0");
    EXPECT(st, fl_store_round_complete(st, 0, x.v1), FL_ERR_MISUSE, "round_id");
    EXPECT(st, fl_store_round_complete(st, x.round, 0), FL_ERR_MISUSE, "result_version");
    EXPECT(st, fl_store_round_abandon(st, 0, "r"), FL_ERR_MISUSE, "round_id");
    EXPECT(st, fl_store_round_abandon(st, x.round, NULL), FL_ERR_MISUSE, "reason");
    EXPECT(st, fl_store_round_abandon(st, x.round, ""), FL_ERR_MISUSE, "reason");
    EXPECT(st, fl_store_round_get(st, &rd, 0), FL_ERR_MISUSE, "round_id");
    EXPECT(st, fl_store_round_find(st, &rd, 0, 1), FL_ERR_MISUSE, "population");
    EXPECT(st, fl_store_round_find(st, &rd, x.pop, -1), FL_ERR_MISUSE, "round");
    EXPECT(st, fl_store_participant_set(st, 0, "c1", FL_STORE_PARTICIPANT_SELECTED), FL_ERR_MISUSE,
           "round_id");
    EXPECT(st, fl_store_participant_set(st, x.round, "c1", (fl_store_participant_state)9),
           FL_ERR_MISUSE, "state");
    /* ledger */
    fl_store_ledger_entry le = {0};
    le.population_id = x.pop;
    le.mechanism = "gaussian";
    le.sampling_rate = 0.5;
    le.clip_norm = 1;
    le.steps = 1;
    le.round_id = -1;
    EXPECT(st, fl_store_ledger_append(st, NULL, &le), FL_ERR_MISUSE, "round_id");
    le.round_id = 0;
    le.sampling_rate = 0;
    EXPECT(st, fl_store_ledger_append(st, NULL, &le), FL_ERR_MISUSE, "sampling_rate");
    le.sampling_rate = INFINITY;
    EXPECT(st, fl_store_ledger_append(st, NULL, &le), FL_ERR_MISUSE, "sampling_rate");
    le.sampling_rate = 0.5;
    le.clip_norm = NAN;
    EXPECT(st, fl_store_ledger_append(st, NULL, &le), FL_ERR_MISUSE, "clip_norm");
    EXPECT(st, fl_store_population_set_state(st, x.pop, (fl_store_population_state)-1),
           FL_ERR_MISUSE, "state");
    EXPECT(st, fl_store_participant_set(st, x.round, "c1", (fl_store_participant_state)-1),
           FL_ERR_MISUSE, "state");
    const fl_store_round_counts bad_counts[] = {{-1, 0, 0, 0}, {1, 1, -1, 0}, {1, 1, 0, -1}};
    for (int i = 0; i < 3; i++)
        EXPECT(st, fl_store_round_set_counts(st, x.round, &bad_counts[i]), FL_ERR_MISUSE, ">= 0");
    char reason[2048];
    memset(reason, 'r', sizeof(reason) - 1);
    reason[sizeof(reason) - 1] = '\0';
    EXPECT(st, fl_store_round_abandon(st, x.round, reason), FL_ERR_MISUSE, "reason");
    /* names: NULL, or a character the kind of name does not allow */
    fl_store_client *cl = NULL;
    EXPECT(st, fl_store_population_find(st, &p, NULL), FL_ERR_MISUSE, "name");
    EXPECT(st, fl_store_client_get(st, &cl, "has space"), FL_ERR_MISUSE, "client_id");
    EXPECT(st, fl_store_client_authenticate(st, "has space", "0123456789abcdef", 16), FL_ERR_MISUSE,
           "client_id");
    EXPECT(st, fl_store_client_touch(st, "has space"), FL_ERR_MISUSE, "client_id");
    EXPECT(st, fl_store_participant_set(st, x.round, "has space", FL_STORE_PARTICIPANT_SELECTED),
           FL_ERR_MISUSE, "client_id");
    EXPECT(st, fl_store_tag_delete(st, "bad tag"), FL_ERR_MISUSE, "tag");
    assert_null(p);
    assert_null(cl);
    /* clients */
    EXPECT(st, fl_store_client_authenticate(st, "c1", NULL, 16), FL_ERR_MISUSE, "token");
    assert_int_equal(fl_store_client_authenticate(st, "c1", NULL, 0), FL_ERR_AUTH);
    /* tags */
    EXPECT(st, fl_store_tag_delete(st, "never-set"), FL_ERR_NOT_FOUND, "never-set");
    /* audit */
    EXPECT(st, fl_store_audit_append_population(st, NULL, 0), FL_ERR_MISUSE, "population_id");
    EXPECT(st, fl_store_audit_append_config(st, NULL, 0, "{}", 1, 0, "[]"), FL_ERR_MISUSE,
           "population_id");
    EXPECT(st, fl_store_audit_append_model(st, NULL, 0, x.v1), FL_ERR_MISUSE, "population_id");
    EXPECT(st, fl_store_audit_append_model(st, NULL, x.pop, 0), FL_ERR_MISUSE, "version");
    EXPECT(st, fl_store_audit_append_refusal(st, NULL, 0, 1, 5, 0), FL_ERR_MISUSE,
           "population_id");
    EXPECT(st, fl_store_audit_append_refusal(st, NULL, x.pop, 0, 5, 0), FL_ERR_MISUSE,
           "round_number");
    EXPECT(st, fl_store_audit_append_refusal(st, NULL, x.pop, 1, NAN, 0), FL_ERR_MISUSE,
           "epsilon_requested");
    EXPECT(st, fl_store_audit_append_refusal(st, NULL, x.pop, 1, 5, 1.0), FL_ERR_MISUSE,
           "delta");
    EXPECT(st, fl_store_audit_append_refusal(st, NULL, x.pop, 1, 5, -0.5), FL_ERR_MISUSE,
           "delta");
    uint8_t key[32] = {0};
    EXPECT(st, fl_store_client_erase(st, NULL, "bad id", key), FL_ERR_MISUSE, "client_id");
    EXPECT(st, fl_store_client_erase(st, NULL, NULL, key), FL_ERR_MISUSE, "client_id");
    EXPECT(st, fl_store_audit_entry_get(st, (fl_store_audit_entry **)&p, -1), FL_ERR_MISUSE,
           "seq");
    EXPECT(st, fl_store_audit_entry_get(st, (fl_store_audit_entry **)&p, 0), FL_ERR_NOT_FOUND,
           "does not exist");
    assert_null(p);
    uint8_t sk[64] = {0};
    EXPECT(st, fl_store_audit_checkpoint_sign(st, NULL, AUDIT_ORIGIN, sk), FL_ERR_STATE,
           "empty");
    /* Nothing reached the log. */
    int64_t size = -1;
    STORE_OK(st, fl_store_audit_size(st, &size));
    assert_int_equal(size, 0);
    fx_free(&x);
}

/* fl_store_audit_pseudonym and fl_store_audit_round_info_init need no handle. */
static void test_handle_free_calls(void **state) {
    (void)state;
    char out[FL_STORE_AUDIT_PSEUDONYM_BYTES];
    uint8_t key[32] = {0};
    assert_int_equal(fl_store_audit_pseudonym(NULL, key, "c"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_pseudonym(out, NULL, "c"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_pseudonym(out, key, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_pseudonym(out, key, "has space"), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_pseudonym(out, key, ""), FL_ERR_MISUSE);
    assert_int_equal(fl_store_audit_pseudonym(out, key, "c"), FL_OK);
    assert_int_equal(strlen(out), 64);
    fl_store_audit_round_info_init(NULL); /* a no-op */
    fl_store_audit_round_info info;
    memset(&info, 0x5a, sizeof(info));
    fl_store_audit_round_info_init(&info);
    assert_int_equal(info.struct_size, sizeof(info));
    assert_null(info.regions);
    assert_null(info.coordinator_version);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_handle),
        cmocka_unit_test(test_failed_handle),
        cmocka_unit_test(test_null_outputs),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_handle_free_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
