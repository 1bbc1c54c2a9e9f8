# Python compatibility round trip: a C helper tool plus a script run with the project venv
# (created by scripts/pydeps.sh). Skipped, with a message, only when the venv is missing.
add_executable(core_st_tool ${CMAKE_CURRENT_LIST_DIR}/tools/st_tool.c)
fl_target_defaults(core_st_tool)
target_link_libraries(core_st_tool PRIVATE fl_core_static PkgConfig::JANSSON)

set(_fl_venv_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
add_test(NAME core_safetensors_python
  COMMAND sh -c "if [ ! -x \"$0\" ]; then echo \"SKIP: $0 missing; run scripts/pydeps.sh\"; exit 77; fi; exec \"$0\" \"$@\""
    ${_fl_venv_python} ${CMAKE_CURRENT_LIST_DIR}/safetensors_compat.py
    $<TARGET_FILE:core_st_tool> ${CMAKE_CURRENT_BINARY_DIR}/safetensors_compat)
set_tests_properties(core_safetensors_python PROPERTIES LABELS "core;integration"
  SKIP_RETURN_CODE 77 TIMEOUT 120)
