/* dp's ChaCha20 keystream and OS randomness on mbedTLS (the client SDK's embedded profile;
 * see chacha.h). No process-wide state: each call owns its contexts. */

#include <string.h>

#include <mbedtls/chacha20.h>
#include <mbedtls/entropy.h>
#include <mbedtls/platform_util.h>

#include "chacha.h"

int fl__dp_crypto_init(void) {
    return 0; /* mbedTLS needs no global initialisation */
}

int fl__dp_chacha20_keystream(uint8_t *out, size_t n, const uint8_t nonce[12], uint32_t block,
                              const uint8_t key[32]) {
    if (!out || !nonce || !key)
        return -1;
    /* mbedtls_chacha20_crypt XORs its input with the keystream and allows input == output;
     * over zeros that is the keystream. It wipes its context before returning. */
    memset(out, 0, n);
    if (mbedtls_chacha20_crypt(key, nonce, block, n, out, out) != 0) {
        mbedtls_platform_zeroize(out, n);
        return -1;
    }
    return 0;
}

/* The entropy module's output is SHA-512 over the platform source (getrandom or
 * /dev/urandom), at most MBEDTLS_ENTROPY_BLOCK_SIZE bytes per call. A fresh context per call
 * keeps the library free of globals and locks; callers ask for a 32-byte key at a time. */
int fl__dp_os_random(uint8_t *out, size_t n) {
    if (!out || n > 256)
        return -1;
    mbedtls_entropy_context ent;
    int rc = 0;
    mbedtls_entropy_init(&ent);
    for (size_t off = 0; off < n && rc == 0;) {
        size_t take = n - off < 32 ? n - off : 32;
        rc = mbedtls_entropy_func(&ent, out + off, take);
        off += take;
    }
    mbedtls_entropy_free(&ent);
    if (rc != 0) {
        mbedtls_platform_zeroize(out, n);
        return -1;
    }
    return 0;
}
