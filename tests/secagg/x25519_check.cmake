# The small-order X25519 table of secagg/src/x25519_check.c must be exactly what its
# derivation script prints (test_sa_x25519_check checks the function itself).
find_program(FL_PYTHON3 NAMES python3)
if(FL_PYTHON3)
  add_test(NAME secagg_x25519_small_order
    COMMAND ${FL_PYTHON3} ${PROJECT_SOURCE_DIR}/secagg/tools/x25519_small_order.py
            --check ${PROJECT_SOURCE_DIR}/secagg/src/x25519_check.c)
  set_tests_properties(secagg_x25519_small_order PROPERTIES LABELS "secagg;unit" TIMEOUT 60)
endif()
