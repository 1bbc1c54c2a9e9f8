/* Backend selection for the secagg crypto layer. */

#include <sodium.h>

#include "crypto.h"

/* Returns the backend table, running the backend's one-time init first. sodium_init() is
 * idempotent and thread-safe (it returns 1 when already initialised, -1 on failure), so
 * calling it on every lookup is cheap and needs no lock of our own. The sodium table is
 * also used for Shamir randomness and is always built. */
const struct fl__sa_crypto *fl__sa_crypto_get(enum fl__sa_backend_id id) {
    switch (id) {
    case FL__SA_BACKEND_SODIUM:
        if (sodium_init() < 0)
            return NULL;
        return &fl__sa_crypto_sodium;
    case FL__SA_BACKEND_MBEDTLS:
#if defined(FL_HAVE_MBEDTLS_BUILD)
        /* The mbedTLS backend seeds its DRBG lazily (pthread_once) on first use. */
        return &fl__sa_crypto_mbedtls;
#else
        return NULL;
#endif
    }
    return NULL;
}
