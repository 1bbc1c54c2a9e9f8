#include <string.h>

#include "fl_internal.h"

int fl_version_number(void) { return FL_VERSION_NUMBER; }

const char *fl_version_string(void) { return FL_VERSION_STRING; }

int fl_build_has(const char *feature) {
    if (!feature)
        return 0;
#ifdef FL_HAVE_CUDA_BUILD
    if (strcmp(feature, "cuda") == 0)
        return 1;
#endif
#ifdef FL_HAVE_MBEDTLS_BUILD
    if (strcmp(feature, "mbedtls") == 0)
        return 1;
#endif
#ifdef FL_HAVE_OPENBLAS_BUILD
    if (strcmp(feature, "openblas") == 0)
        return 1;
#endif
#ifdef FL_HAVE_MPI_BUILD
    if (strcmp(feature, "mpi") == 0)
        return 1;
#endif
    return 0;
}
