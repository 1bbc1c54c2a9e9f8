# test_audit_cov_demo (registered by the glob) runs flotilla-audit demo with its store
# failing mid-round. It needs the tool, and for its allocation walk the failalloc shim
# (defined in audit_tool_oom.cmake, which sorts before this file), for its lock walk the
# faillock shim (defined here). Like audit_tool_oom it runs in the plain and coverage
# builds only: it spawns the demo a hundred times or so, too slow under the sanitizers, where
# it is skipped (no FL_AUDIT_TOOL); and the shims cannot be preloaded under ASan.
# faillock.c: a test-only LD_PRELOAD shim that fails SQLite's WAL-index write locks from
# the n-th on (SQLITE_BUSY), the only way to make the demo's fl_store_begin fail.
if(TARGET fl_test_failalloc)
  add_library(fl_test_faillock SHARED ${CMAKE_CURRENT_SOURCE_DIR}/faillock.c)
  target_compile_options(fl_test_faillock PRIVATE ${FL_WARNING_FLAGS} -fno-profile-arcs
    -fno-test-coverage)
  target_link_libraries(fl_test_faillock PRIVATE ${CMAKE_DL_LIBS})
endif()
if(TEST test_audit_cov_demo AND TARGET flotilla-audit AND TARGET fl_test_failalloc)
  add_dependencies(test_audit_cov_demo flotilla-audit fl_test_failalloc fl_test_faillock)
  set(_demo_env FL_AUDIT_TOOL=$<TARGET_FILE:flotilla-audit>
    FL_FAILALLOC_SO=$<TARGET_FILE:fl_test_failalloc>
    FL_FAILLOCK_SO=$<TARGET_FILE:fl_test_faillock>)
  set_tests_properties(test_audit_cov_demo PROPERTIES ENVIRONMENT "${_demo_env}"
    LABELS "storage;audit;integration" TIMEOUT 120)
endif()
