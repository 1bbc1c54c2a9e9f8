# test_ed25519_mbedtls_faults (globbed by CMakeLists.txt here) defines its own calloc to fail
# mbedTLS's allocations and reads the backend's internal group, so it needs the same feature
# macro as the secagg objects. Its curve-construction walk forks one child per allocation.
if(TARGET test_ed25519_mbedtls_faults)
  if(FL_HAVE_MBEDTLS)
    target_compile_definitions(test_ed25519_mbedtls_faults PRIVATE FL_HAVE_MBEDTLS_BUILD)
  endif()
  set_tests_properties(test_ed25519_mbedtls_faults PROPERTIES TIMEOUT 240)
endif()
