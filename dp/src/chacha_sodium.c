/* dp's ChaCha20 keystream and OS randomness on libsodium (the normal build; see chacha.h). */

#include <sodium.h>
#include <string.h>

#include "chacha.h"

int fl__dp_crypto_init(void) {
    /* Idempotent and thread-safe: 1 when already initialised, -1 on failure. */
    return sodium_init() < 0 ? -1 : 0;
}

int fl__dp_chacha20_keystream(uint8_t *out, size_t n, const uint8_t nonce[12], uint32_t block,
                              const uint8_t key[32]) {
    if (!out || !nonce || !key)
        return -1;
    /* XOR over zeros: libsodium's keystream call has no initial-counter argument. */
    memset(out, 0, n);
    return crypto_stream_chacha20_ietf_xor_ic(out, out, n, nonce, block, key) == 0 ? 0 : -1;
}

int fl__dp_os_random(uint8_t *out, size_t n) {
    if (!out || n > 256)
        return -1;
    randombytes_buf(out, n);
    return 0;
}
