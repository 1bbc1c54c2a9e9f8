# test_sa_active_norm.c again on the client SDK's embedded profile (mbedTLS only, no
# libsodium, so no norm proofs): active mode with norm proofs must be refused cleanly there.
# The normal build of the same file is registered by the glob in CMakeLists.txt.
if(TARGET fl_client_embedded_static)
  fl_add_test(test_sa_active_norm_embedded
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sa_active_norm.c
    LIBS fl_client_embedded_static LABELS "secagg;unit")
  target_compile_definitions(test_sa_active_norm_embedded PRIVATE FL_TEST_EMBEDDED)
endif()
