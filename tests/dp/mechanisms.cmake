# The docs/dp.md "Mechanisms" example, built against the shared library (public API only)
# and run; tests/meta checks that the doc shows this file verbatim.
add_executable(dp_example_mechanisms ${CMAKE_CURRENT_LIST_DIR}/example_mechanisms.c)
fl_target_defaults(dp_example_mechanisms)
target_link_libraries(dp_example_mechanisms PRIVATE fl_dp)
add_test(NAME dp_doc_example_mechanisms COMMAND dp_example_mechanisms)
set_tests_properties(dp_doc_example_mechanisms PROPERTIES LABELS "dp;unit"
  PASS_REGULAR_EXPRESSION "distributed round ok")
