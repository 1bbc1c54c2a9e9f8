/* Model uploads whose safetensors header is not a JSON object (docs/openapi.yaml, POST
 * /v1/admin/populations/{name}/models): a header that is not JSON at all, JSON that is not an
 * object, and a header length past the body are each refused 400 invalid_message and store
 * nothing; the real model then uploads as version 1. Runs the coordinator in-process
 * (coord_testkit.c). */
#include "coord_testkit.h"

/* A body: u64le header length h, then text (h bytes of it), then pad bytes of zeros. */
static size_t body_of(uint8_t *out, uint64_t h, const char *text, size_t pad) {
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)(h >> (8 * b));
    size_t n = strlen(text);
    memcpy(out + 8, text, n);
    memset(out + 8 + n, 0, pad);
    return 8 + n + pad;
}

static void test_model_header_not_object(void **state) {
    struct fx *f = *state;
    struct resp r = http_json(f, "POST", "/v1/admin/populations", ADMIN_TOKEN,
                              "{\"name\":\"mh\",\"allowed_regions\":[\"*\"]}");
    assert_int_equal(r.status, 201);
    resp_free(&r);
    static const struct {
        const char *text;
        uint64_t h;      /* 0: strlen(text) */
        size_t pad;
    } cases[] = {
        {"{\"w\":", 0, 8},              /* truncated JSON */
        {"not json at all", 0, 8},     /* not JSON */
        {"[1,2,3]   ", 0, 8},          /* JSON, not an object */
        {"\"str\"", 0, 8},             /* JSON string */
        {"{}", 4096, 8},               /* header longer than the body */
    };
    const char *path = "/v1/admin/populations/mh/models";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t body[256];
        uint64_t h = cases[i].h ? cases[i].h : strlen(cases[i].text);
        size_t n = body_of(body, h, cases[i].text, cases[i].pad);
        r = http_req(f, "POST", path, ADMIN_TOKEN, "application/octet-stream", body, n, NULL);
        if (r.status != 400)
            fprintf(stderr, "case %zu: %ld %s\n", i, r.status, r.body);
        assert_error(&r, 400, "invalid_message");
        resp_free(&r);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM models"), 0);
    size_t mlen;
    uint8_t *model = make_model(&mlen);
    r = http_req(f, "POST", path, ADMIN_TOKEN, "application/octet-stream", model, mlen, NULL);
    assert_int_equal(r.status, 201);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "version")), 1);
    json_decref(j);
    resp_free(&r);
    free(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_model_header_not_object, fx_setup, fx_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
