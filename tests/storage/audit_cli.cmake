# flotilla-audit as a program: usage and I/O errors, every entry type in show, export and
# report, forged and non-bundle files (audit_tool_cli.c runs the tool it is given).
if(TARGET flotilla-audit)
  fl_add_test(test_audit_tool_cli SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audit_tool_cli.c
    LIBS fl_storage_static LABELS "storage;audit;integration" TIMEOUT 120
    ARGS $<TARGET_FILE:flotilla-audit>)
  add_dependencies(test_audit_tool_cli flotilla-audit)
endif()
