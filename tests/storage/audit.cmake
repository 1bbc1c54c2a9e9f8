# Audit log tests: labelled audit as well as storage (ctest -L audit).
foreach(t test_audit_merkle test_audit_log test_audit_bundle test_audit_time)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES LABELS "storage;audit;unit" TIMEOUT 120)
  endif()
endforeach()
# flotilla-audit end to end, and the HTML report rendered in headless Chromium (skipped with
# exit code 77 when Chromium is missing).
if(TARGET flotilla-audit)
  add_test(NAME audit_tool
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/audit_tool.sh $<TARGET_FILE:flotilla-audit>
      ${CMAKE_CURRENT_BINARY_DIR}/audit_tool)
  set_tests_properties(audit_tool PROPERTIES LABELS "storage;audit;integration" TIMEOUT 120)
  add_test(NAME audit_render
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/audit_render.sh $<TARGET_FILE:flotilla-audit>
      ${CMAKE_CURRENT_BINARY_DIR}/audit_render ${PROJECT_SOURCE_DIR})
  set_tests_properties(audit_render PROPERTIES LABELS "storage;audit;integration;slow" TIMEOUT 180
    SKIP_RETURN_CODE 77)
endif()
