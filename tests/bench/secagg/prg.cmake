# bench_prg reports whether mbedTLS uses AES-NI; it needs the same feature macro as the
# secagg objects to include <mbedtls/aesni.h> only when mbedTLS is built in.
if(TARGET bench_prg AND FL_HAVE_MBEDTLS)
  target_compile_definitions(bench_prg PRIVATE FL_HAVE_MBEDTLS_BUILD)
endif()
