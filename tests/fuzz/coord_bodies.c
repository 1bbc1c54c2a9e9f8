/* libFuzzer target for the coordinator's JSON request-body validators: the first byte picks
 * the parser (even: POST /v1/checkin body, odd: admin population config), the rest is the
 * body. Binary secagg bodies are parsed by the secagg library (its own fuzz targets); the
 * coordinator only peeks their header, which the round tests cover.
 *
 * Oracles beyond the sanitizers: the answer is 200 (valid) or a 4xx the protocol lists for
 * these bodies (400 with a JSON error), never 5xx; and the same input answers the same. */
#include <stddef.h>
#include <stdint.h>

int fl__coord_fuzz_checkin(const uint8_t *b, size_t n);
int fl__coord_fuzz_population(const uint8_t *b, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 65536)
        return 0;
    int (*parse)(const uint8_t *, size_t) =
        data[0] & 1 ? fl__coord_fuzz_population : fl__coord_fuzz_checkin;
    int st = parse(data + 1, size - 1);
    CHECK(st == 200 || st == 400);
    CHECK(parse(data + 1, size - 1) == st);
    return 0;
}
