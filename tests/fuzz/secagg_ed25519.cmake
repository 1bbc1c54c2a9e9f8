# secagg Ed25519 differential fuzz target: each input is verified on both crypto backends
# (sodium-openssl and mbedtls), which must make the same decision (docs/secagg.md, "Ed25519
# on mbedTLS"). Seeds in corpus/secagg_ed25519_diff/, one per mode and mutation. The harness
# builds cases with libsodium's group arithmetic, hence the direct link. In a build without
# mbedTLS the target compares nothing and its replay only runs the seeds through.
if(TARGET fl_secagg_static)
  fl_add_fuzzer(secagg_ed25519_diff SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/secagg_ed25519_diff.c
    LIBS fl_secagg_static PkgConfig::SODIUM LABEL secagg)
endif()
