/* Whether OpenBLAS runs kernels far below what the CPU can do, and what to set instead.
 *
 * OpenBLAS chooses its kernels by CPU model when it is loaded, and Debian 12's 0.3.21 does
 * not know recent Xeons: there it reports "Prescott" and runs SSE3 kernels, 2.5x slower
 * for the built-in trainer than its AVX-512 ones on the build box (docs/client-sdk.md,
 * "OpenBLAS kernel choice"). Only the environment of the process can change that
 * (OPENBLAS_CORETYPE, read at load time), so the SDK can only say so. */

#include <stdio.h>
#include <string.h>

#include "client_internal.h"

#ifdef FL_CLIENT_HAVE_CBLAS
#include <cblas.h>
#endif

/* OpenBLAS x86 core types whose kernels predate AVX2 + FMA. */
static const char *const pre_avx2[] = {
    "Katmai",    "Coppermine", "Northwood",  "Prescott",    "Banias",  "Atom",
    "Core2",     "Penryn",     "Dunnington", "Nehalem",     "Opteron", "Opteron(SSE3)",
    "Barcelona", "Nano",       "Bobcat",     "Sandybridge",
};

int fl__client_blas_advice_for(const char *core, int avx2_fma, int avx512, char *buf, size_t len) {
    if (!core || !avx2_fma)
        return 0;
    int old = 0;
    for (size_t i = 0; i < sizeof(pre_avx2) / sizeof(pre_avx2[0]); i++)
        if (strcmp(core, pre_avx2[i]) == 0)
            old = 1;
    if (!old)
        return 0;
    const char *want = avx512 ? "SkylakeX" : "Haswell";
    if (buf && len)
        snprintf(buf, len,
                 "OpenBLAS runs its %s kernels on a CPU with %s: training is several times "
                 "slower than it could be; start the app with OPENBLAS_CORETYPE=%s in its "
                 "environment",
                 core, avx512 ? "AVX-512" : "AVX2 and FMA", want);
    return 1;
}

int fl__client_blas_advice(char *buf, size_t len) {
#if defined(FL_CLIENT_HAVE_CBLAS) && (defined(__x86_64__) || defined(__i386__)) &&                 \
    (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    int avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    return fl__client_blas_advice_for(openblas_get_corename(), avx2_fma, avx512, buf, len);
#else
    (void)buf, (void)len;
    return 0; /* portable kernels, or not x86: nothing OpenBLAS-specific to say */
#endif
}
