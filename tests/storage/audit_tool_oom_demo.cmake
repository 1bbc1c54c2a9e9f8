# test_audit_cov_demo (registered by the glob) runs flotilla-audit demo with its store
# failing mid-round. It needs the tool, and for its allocation walk the failalloc shim
# (defined in audit_tool_oom.cmake, which sorts before this file). Like audit_tool_oom it
# runs in the plain and coverage builds only: it spawns the demo a hundred times or so,
# too slow under the sanitizers, where it is skipped (no FL_AUDIT_TOOL).
if(TEST test_audit_cov_demo AND TARGET flotilla-audit AND TARGET fl_test_failalloc)
  add_dependencies(test_audit_cov_demo flotilla-audit fl_test_failalloc)
  set_tests_properties(test_audit_cov_demo PROPERTIES
    ENVIRONMENT "FL_AUDIT_TOOL=$<TARGET_FILE:flotilla-audit>;FL_FAILALLOC_SO=$<TARGET_FILE:fl_test_failalloc>"
    LABELS "storage;audit;integration" TIMEOUT 120)
endif()
