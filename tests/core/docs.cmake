# The docs/core.md example, built against the shared library (public API only) and run.
# tests/meta checks that the example in the doc is this file verbatim.
add_executable(core_example_safetensors ${CMAKE_CURRENT_LIST_DIR}/example_safetensors.c)
fl_target_defaults(core_example_safetensors)
target_link_libraries(core_example_safetensors PRIVATE fl_core)
add_test(NAME core_doc_example COMMAND core_example_safetensors)
set_tests_properties(core_doc_example PROPERTIES LABELS "core;unit"
  PASS_REGULAR_EXPRESSION "mlp v3, 2 tensors")
