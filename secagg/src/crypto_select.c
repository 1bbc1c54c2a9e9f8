/* Backend selection for the secagg crypto layer. */

#if !defined(FL_CRYPTO_MBEDTLS_ONLY)
#include <sodium.h>
#endif

#include "crypto.h"

/* Returns the backend table, running the backend's one-time init first. sodium_init() is
 * idempotent and thread-safe (it returns 1 when already initialised, -1 on failure), so
 * calling it on every lookup is cheap and needs no lock of our own. The sodium table is
 * always built, except in the client SDK's embedded profile (FL_CRYPTO_MBEDTLS_ONLY), which
 * leaves crypto_sodium.c out: there the sodium backend is reported as not built (NULL) and
 * the mbedTLS table is the default. */
const struct fl__sa_crypto *fl__sa_crypto_get(enum fl__sa_backend_id id) {
    switch (id) {
    case FL__SA_BACKEND_SODIUM:
#if defined(FL_CRYPTO_MBEDTLS_ONLY)
        return NULL;
#else
        if (sodium_init() < 0)
            return NULL;
        return &fl__sa_crypto_sodium;
#endif
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
