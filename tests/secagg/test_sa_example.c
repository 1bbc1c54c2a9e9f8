/* The example of docs/secagg.md, compiled and run; and a check that every FL_API function of
 * the public header is named in docs/secagg.md. Keep the example in sync with the doc. */
#include <stdio.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/secagg.h"

int secagg_example(void);


/* One in-memory round with three clients; returns 0 if the sum is x0 + x1 + x2. */
int secagg_example(void) {
    fl_secagg_config cfg;
    fl_secagg_config_init(&cfg);
    cfg.num_clients = 3;        /* n */
    cfg.dim = 4;                /* d */
    cfg.bits = 16;              /* inputs and sum mod 2^16 */
    if (fl_secagg_config_resolve(&cfg, NULL, 0) != FL_OK)   /* derives k, t */
        return -1;

    fl_secagg_server *srv;
    fl_secagg_client *cl[3];
    const uint64_t round_id = 1;
    if (fl_secagg_server_create(&srv, &cfg, round_id, NULL, NULL) != FL_OK)
        return -1;
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t x[4] = {i, 10 * i, 100 * i, 7};
        const uint8_t *msg;
        size_t len;
        fl_secagg_client_create(&cl[i], &cfg, round_id, i, NULL, NULL);
        fl_secagg_client_set_input(cl[i], x, 4);
        fl_secagg_client_start(cl[i], &msg, &len);          /* ADVERTISE */
        fl_secagg_server_receive(srv, i, msg, len);
    }
    /* Each advance closes a phase (a coordinator does it when pending() hits 0 or a
     * deadline passes) and yields one message per remaining client. */
    while (fl_secagg_server_advance(srv) == FL_OK &&
           fl_secagg_server_phase(srv) != FL_SECAGG_PHASE_DONE) {
        for (uint32_t i = 0; i < 3; i++) {
            const uint8_t *in, *out;
            size_t in_len, out_len;
            if (fl_secagg_server_outgoing(srv, i, &in, &in_len) != FL_OK)
                continue;
            if (fl_secagg_client_handle(cl[i], in, in_len, &out, &out_len) == FL_OK)
                fl_secagg_server_receive(srv, i, out, out_len);
        }
    }
    const uint32_t *sum;
    uint32_t count = 0;
    int rc = fl_secagg_server_result(srv, &sum, NULL, &count) == FL_OK && count == 3 &&
                     sum[0] == 3 && sum[1] == 30 && sum[2] == 300 && sum[3] == 21
                 ? 0 : -1;
    for (uint32_t i = 0; i < 3; i++)
        fl_secagg_client_destroy(cl[i]);
    fl_secagg_server_destroy(srv);
    return rc;
}

static void test_example_runs(void **state) {
    (void)state;
    assert_int_equal(secagg_example(), 0);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

static void test_every_api_documented(void **state) {
    (void)state;
    char *hdr = slurp(FL_SOURCE_DIR "/secagg/include/flotilla/secagg.h");
    char *doc = slurp(FL_SOURCE_DIR "/docs/secagg.md");
    assert_non_null(hdr);
    assert_non_null(doc);
    int found = 0;
    for (char *p = strstr(hdr, "FL_API"); p; p = strstr(p + 6, "FL_API")) {
        /* The function name is the identifier right before the first '('. */
        char *paren = strchr(p, '(');
        if (!paren)
            break;
        char *name = paren;
        while (name > p && (name[-1] == '_' || (name[-1] >= 'a' && name[-1] <= 'z') ||
                            (name[-1] >= '0' && name[-1] <= '9')))
            name--;
        if (paren - name < 11 || paren - name > 70 || strncmp(name, "fl_secagg_", 10) != 0)
            continue;
        char sym[80];
        memcpy(sym, name, (size_t)(paren - name));
        sym[paren - name] = 0;
        if (!strstr(doc, sym))
            fail_msg("%s is not documented in docs/secagg.md", sym);
        found++;
    }
    assert_true(found >= 30);
    free(hdr);
    free(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_runs),
        cmocka_unit_test(test_every_api_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
