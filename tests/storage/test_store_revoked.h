#ifndef FL_TEST_STORE_REVOKED_H
#define FL_TEST_STORE_REVOKED_H
/* The revocation read shared by the storage tests of client revocation (test_store_revoke.c,
 * test_audit_revoke.c). */
#include "test_store_util.h"

/* revoked_at of client_id as the auth path reads it (fl_store_client_get; 0 = not revoked). */
static inline int64_t revoked_at(fl_store *st, const char *client_id) {
    fl_store_client *c = NULL;
    STORE_OK(st, fl_store_client_get(st, &c, client_id));
    int64_t at = c->revoked_at;
    fl_store_free(st, c);
    return at;
}

#endif
