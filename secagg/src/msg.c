/* Wire format helpers: the fixed header, bounds-checked readers, output buffers. */

#include <string.h>

#include "secagg_internal.h"

void fl__sa_put_header(uint8_t *p, fl_secagg_msg_type type, uint64_t round_id,
                       uint32_t client, uint32_t body_len) {
    p[0] = FL__SA_MAGIC0;
    p[1] = FL__SA_MAGIC1;
    p[2] = FL__SA_VERSION;
    p[3] = (uint8_t)type;
    fl__put_u64le(p + 4, round_id);
    fl__put_u32le(p + 12, client);
    fl__put_u32le(p + 16, body_len);
}

static const char *type_name(unsigned t) {
    static const char *const names[] = {"?",           "ADVERTISE",       "KEYS",
                                        "SHARES",      "CIPHERTEXTS",     "MASKED_INPUT",
                                        "CONSISTENCY_REQ", "CONSISTENCY_SIG", "UNMASK_REQ",
                                        "UNMASK_SHARES"};
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

fl_status fl_secagg_message_peek(fl_secagg_msg_type *type, uint64_t *round_id,
                                 uint32_t *client, const uint8_t *msg, size_t len) {
    if (!msg || len < FL_SECAGG_HEADER_BYTES)
        return FL_ERR_FORMAT;
    if (msg[0] != FL__SA_MAGIC0 || msg[1] != FL__SA_MAGIC1 || msg[2] != FL__SA_VERSION)
        return FL_ERR_FORMAT;
    if (msg[3] < FL_SECAGG_MSG_ADVERTISE || msg[3] > FL_SECAGG_MSG_UNMASK_SHARES)
        return FL_ERR_FORMAT;
    if (type)
        *type = (fl_secagg_msg_type)msg[3];
    if (round_id)
        *round_id = fl__get_u64le(msg + 4);
    if (client)
        *client = fl__get_u32le(msg + 12);
    return FL_OK;
}

fl_status fl__sa_open_msg(struct fl__sa_reader *r, struct fl__err *err, const uint8_t *msg,
                          size_t len, fl_secagg_msg_type expect_type, uint64_t round_id,
                          uint32_t expect_client, size_t limit) {
    if (!msg)
        return fl__err_set(err, FL_ERR_MISUSE, "message: NULL");
    if (len < FL_SECAGG_HEADER_BYTES)
        return fl__err_set(err, FL_ERR_FORMAT, "message: truncated header (%zu bytes)", len);
    if (msg[0] != FL__SA_MAGIC0 || msg[1] != FL__SA_MAGIC1)
        return fl__err_set(err, FL_ERR_FORMAT, "message: bad magic");
    if (msg[2] != FL__SA_VERSION)
        return fl__err_set(err, FL_ERR_FORMAT, "message: unsupported version %u", msg[2]);
    unsigned t = msg[3];
    if (t < FL_SECAGG_MSG_ADVERTISE || t > FL_SECAGG_MSG_UNMASK_SHARES)
        return fl__err_set(err, FL_ERR_FORMAT, "message: unknown type %u", t);
    uint64_t rid = fl__get_u64le(msg + 4);
    uint32_t client = fl__get_u32le(msg + 12);
    uint32_t body = fl__get_u32le(msg + 16);
    if ((size_t)body != len - FL_SECAGG_HEADER_BYTES)
        return fl__err_set(err, FL_ERR_FORMAT, "message: body length %u but %zu bytes follow",
                           body, len - FL_SECAGG_HEADER_BYTES);
    if (rid != round_id)
        return fl__err_set(err, FL_ERR_STATE,
                           "message: for round %llu, this is round %llu",
                           (unsigned long long)rid, (unsigned long long)round_id);
    if (t != (unsigned)expect_type)
        return fl__err_set(err, FL_ERR_STATE, "message: %s out of phase (expected %s)",
                           type_name(t), type_name(expect_type));
    if (len > limit)
        return fl__err_set(err, FL_ERR_TOO_LARGE, "message: %s of %zu bytes exceeds limit %zu",
                           type_name(t), len, limit);
    if (expect_client != UINT32_MAX && client != expect_client)
        return fl__err_set(err, FL_ERR_PROTOCOL, "message: client %u, expected %u", client,
                           expect_client);
    r->p = msg + FL_SECAGG_HEADER_BYTES;
    r->left = body;
    return FL_OK;
}

int fl__sa_read_u32(struct fl__sa_reader *r, uint32_t *v) {
    if (r->left < 4)
        return -1;
    *v = fl__get_u32le(r->p);
    r->p += 4;
    r->left -= 4;
    return 0;
}

int fl__sa_read_u8(struct fl__sa_reader *r, uint8_t *v) {
    if (r->left < 1)
        return -1;
    *v = r->p[0];
    r->p += 1;
    r->left -= 1;
    return 0;
}

int fl__sa_read_bytes(struct fl__sa_reader *r, const uint8_t **p, size_t n) {
    if (r->left < n)
        return -1;
    *p = r->p;
    r->p += n;
    r->left -= n;
    return 0;
}

int fl__sa_buf_reserve(struct fl__sa_buf *b, const fl_allocator *a, size_t n) {
    /* Keep the buffer if it fits and is not far larger than needed: a client's d-sized
     * masked-input buffer must not linger through the small unmask phase. */
    if (b->cap >= n && (b->cap <= 4 * n || b->cap <= 65536))
        return 0;
    uint8_t *p = fl__alloc(a, n ? n : 1);
    if (!p)
        return -1;
    fl__sa_buf_free(b, a);
    b->p = p;
    b->cap = n ? n : 1;
    b->len = 0;
    return 0;
}

void fl__sa_buf_free(struct fl__sa_buf *b, const fl_allocator *a) {
    if (!b || !b->p)
        return;
    fl_memzero(b->p, b->cap);
    fl__free(a, b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}
