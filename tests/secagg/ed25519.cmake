# Ed25519 on the mbedTLS backend. test_ed25519_mbedtls checks the Wei25519 group through
# mbedTLS itself when the backend is built (the same feature macro as the secagg objects);
# the 1,000-case random comparison with libsodium runs as four ctests of 250 cases (one
# executable, PART PARTS arguments) so each stays short under ASan; and the derivation script
# must reproduce every curve constant in ed25519_mbedtls.c.
if(TARGET test_ed25519_mbedtls)
  if(FL_HAVE_MBEDTLS)
    target_compile_definitions(test_ed25519_mbedtls PRIVATE FL_HAVE_MBEDTLS_BUILD)
  endif()
  set_tests_properties(test_ed25519_mbedtls PROPERTIES TIMEOUT 240)
endif()
fl_add_test(test_ed25519_random SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/ed25519_random.c
  LIBS fl_secagg_static LABELS "secagg;unit" TIMEOUT 240 ARGS 0 4)
foreach(part 1 2 3)
  add_test(NAME test_ed25519_random_${part} COMMAND test_ed25519_random ${part} 4)
  set_tests_properties(test_ed25519_random_${part} PROPERTIES LABELS "secagg;unit" TIMEOUT 240
    ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout")
endforeach()
find_program(FL_PYTHON3 NAMES python3)
if(FL_PYTHON3)
  add_test(NAME secagg_wei25519_constants
    COMMAND ${FL_PYTHON3} ${PROJECT_SOURCE_DIR}/secagg/tools/wei25519_constants.py
            --check ${PROJECT_SOURCE_DIR}/secagg/src/ed25519_mbedtls.c)
  set_tests_properties(secagg_wei25519_constants PROPERTIES LABELS "secagg;unit" TIMEOUT 60)
endif()
