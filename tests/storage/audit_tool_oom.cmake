# flotilla-audit under allocation failure (audit_tool_oom.c): a test-only LD_PRELOAD shim
# (failalloc.c) fails the n-th malloc/calloc/realloc. Not registered in sanitizer builds:
# ASan's allocator must come first and cannot be preloaded over; the plain and coverage
# builds run it. Every call number of verify, show, export and report is tried; demo (a store
# built through SQLite, ~27000 allocations) every 151st.
if(TARGET flotilla-audit AND NOT FL_SANITIZE AND NOT CMAKE_C_FLAGS MATCHES "sanitize"
   AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
  add_library(fl_test_failalloc SHARED ${CMAKE_CURRENT_SOURCE_DIR}/failalloc.c)
  target_compile_options(fl_test_failalloc PRIVATE ${FL_WARNING_FLAGS} -fno-profile-arcs
    -fno-test-coverage)
  target_link_libraries(fl_test_failalloc PRIVATE ${CMAKE_DL_LIBS})
  add_executable(test_audit_tool_oom ${CMAKE_CURRENT_SOURCE_DIR}/audit_tool_oom.c)
  fl_target_defaults(test_audit_tool_oom)
  add_dependencies(test_audit_tool_oom flotilla-audit fl_test_failalloc)
  add_test(NAME test_audit_tool_oom
    COMMAND test_audit_tool_oom $<TARGET_FILE:flotilla-audit>
      $<TARGET_FILE:fl_test_failalloc> ${CMAKE_CURRENT_BINARY_DIR}/audit_tool_oom 1 151)
  set_tests_properties(test_audit_tool_oom PROPERTIES LABELS "storage;audit;integration"
    TIMEOUT 300)
endif()
# Edges of show and report on demo bundles (audit_tool_edges.sh).
if(TARGET flotilla-audit)
  add_test(NAME audit_tool_edges
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/audit_tool_edges.sh $<TARGET_FILE:flotilla-audit>
      ${CMAKE_CURRENT_BINARY_DIR}/audit_tool_edges)
  set_tests_properties(audit_tool_edges PROPERTIES LABELS "storage;audit;integration" TIMEOUT 60)
endif()
