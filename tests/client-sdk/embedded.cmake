# The client SDK's embedded profile (libflotilla_client_embedded.so: mbedTLS for all crypto,
# no libsodium, OpenSSL or libcurl; client-sdk/CMakeLists.txt), included by CMakeLists.txt:
#   client_embedded_deps                    NEEDED entries and undefined symbols of the .so
#   client_embedded_deps_selfcheck          the same check must reject the normal SDK
#   client_embedded_exports                 meta export check (fl_client_* only, documented)
#   client_test_crypto_profiles_sodium      known answers on the normal objects ...
#   client_test_crypto_profiles_embedded    ... and the same ones on the embedded objects
#   client_test_identity_embedded           device identity (test_identity.c) on mbedTLS
#   client_test_embedded_round              rounds through the REAL coordinator with devices
#                                           on the embedded .so (secagg, distributed DP,
#                                           signed task and model; a tampered model refused)
if(TARGET fl_client_embedded)
  find_program(FL_READELF NAMES readelf llvm-readelf)
  find_program(FL_NM_EMB NAMES nm llvm-nm)
  find_program(FL_STRIP NAMES strip llvm-strip)
  set(_emb_dir ${CMAKE_CURRENT_SOURCE_DIR})
  if(FL_READELF AND FL_NM_EMB)
    add_test(NAME client_embedded_deps COMMAND ${CMAKE_COMMAND} -DREADELF=${FL_READELF}
      -DNM=${FL_NM_EMB} -DSTRIP=${FL_STRIP} -DLIB=$<TARGET_FILE:fl_client_embedded>
      -P ${_emb_dir}/check_embedded_deps.cmake)
    add_test(NAME client_embedded_deps_selfcheck COMMAND ${CMAKE_COMMAND}
      -DREADELF=${FL_READELF} -DNM=${FL_NM_EMB} -DLIB=$<TARGET_FILE:fl_client_sdk>
      -P ${_emb_dir}/check_embedded_deps.cmake)
    set_tests_properties(client_embedded_deps client_embedded_deps_selfcheck PROPERTIES
      LABELS "client-sdk;unit")
    set_tests_properties(client_embedded_deps_selfcheck PROPERTIES WILL_FAIL TRUE)
    add_test(NAME client_embedded_exports COMMAND ${CMAKE_COMMAND} -DNM=${FL_NM_EMB}
      -DLIB=$<TARGET_FILE:fl_client_embedded> -DCOMP=client-sdk
      -DINCLUDE_DIR=${PROJECT_SOURCE_DIR}/client-sdk/include/flotilla
      -DDOC=${PROJECT_SOURCE_DIR}/docs/client-sdk.md
      -P ${PROJECT_SOURCE_DIR}/tests/meta/check_exports.cmake)
    set_tests_properties(client_embedded_exports PROPERTIES LABELS "client-sdk;meta")
  endif()

  # One source, two profiles: the internals of each are reached through its static objects.
  set(_emb_inc ${PROJECT_SOURCE_DIR}/client-sdk/src ${PROJECT_SOURCE_DIR}/core/src
    ${PROJECT_SOURCE_DIR}/secagg/src ${PROJECT_SOURCE_DIR}/dp/src)
  fl_add_test(client_test_crypto_profiles_sodium SOURCES ${_emb_dir}/test_crypto_profiles.c
    LIBS fl_client_sdk_static PkgConfig::SODIUM PkgConfig::SQLITE3 Threads::Threads m
    LABELS "client-sdk;unit" TIMEOUT 120)
  target_include_directories(client_test_crypto_profiles_sodium PRIVATE ${_emb_inc})
  if(CURL_FOUND)
    target_link_libraries(client_test_crypto_profiles_sodium PRIVATE PkgConfig::CURL)
    target_compile_definitions(client_test_crypto_profiles_sodium PRIVATE FL_TEST_HAVE_CURL)
  endif()
  fl_add_test(client_test_crypto_profiles_embedded SOURCES ${_emb_dir}/test_crypto_profiles.c
    LIBS fl_client_embedded_static LABELS "client-sdk;unit" TIMEOUT 120)
  target_include_directories(client_test_crypto_profiles_embedded PRIVATE ${_emb_inc})
  target_compile_definitions(client_test_crypto_profiles_embedded PRIVATE FL_TEST_EMBEDDED)
  # The device identity (keys made and certificates checked on mbedTLS alone).
  if(EXISTS ${_emb_dir}/test_identity.c)
    fl_add_test(client_test_identity_embedded SOURCES ${_emb_dir}/test_identity.c
      LIBS fl_client_embedded_static LABELS "client-sdk;unit" TIMEOUT 120)
    target_include_directories(client_test_identity_embedded PRIVATE ${_emb_inc})
    target_compile_definitions(client_test_identity_embedded PRIVATE FL_TEST_EMBEDDED)
  endif()

  # Devices on the shared embedded library (its public API only); the coordinator is the
  # normal static one, and the test's own HTTP transport uses libcurl (the library does not).
  if(TARGET fl_coordinator_static AND CURL_FOUND
     AND EXISTS ${_emb_dir}/test_embedded_round.c)
    fl_add_test(client_test_embedded_round SOURCES ${_emb_dir}/test_embedded_round.c
      LIBS fl_client_embedded fl_coordinator_static PkgConfig::CURL PkgConfig::SODIUM
      Threads::Threads m LABELS "client-sdk;integration" TIMEOUT 300)
  endif()
endif()
