# Accounting tests beyond the globbed cmocka units (included by tests/dp/CMakeLists.txt).

# test_cli runs the flotilla-dp executable.
if(TARGET test_cli AND TARGET flotilla-dp)
  add_dependencies(test_cli flotilla-dp)
  target_compile_definitions(test_cli PRIVATE FL_DP_CLI="$<TARGET_FILE:flotilla-dp>")
endif()

# Cross-check against Google's dp_accounting in the project venv.
set(_fl_dp_py ${PROJECT_SOURCE_DIR}/.venv/bin/python)
if(TARGET flotilla-dp AND EXISTS ${_fl_dp_py})
  add_test(NAME test_vs_dp_accounting
    COMMAND ${_fl_dp_py} ${CMAKE_CURRENT_SOURCE_DIR}/test_vs_dp_accounting.py
            --cli $<TARGET_FILE:flotilla-dp>)
  set_tests_properties(test_vs_dp_accounting PROPERTIES LABELS "dp;integration" TIMEOUT 120)
else()
  message(STATUS "dp: ${_fl_dp_py} not found; test_vs_dp_accounting skipped (run scripts/setup.sh)")
endif()

# The budget check against a real SQLite privacy ledger needs storage.
if(TARGET test_budget_ledger)
  if(TARGET fl_storage_static)
    target_link_libraries(test_budget_ledger PRIVATE fl_storage_static)
    set_tests_properties(test_budget_ledger PROPERTIES LABELS "dp;integration")
  else()
    message(STATUS "dp: storage not built; test_budget_ledger cannot link")
  endif()
endif()
