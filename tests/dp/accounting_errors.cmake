# test_accounting_errors swaps Jansson's allocator (json_set_alloc_funcs) to check that the
# params_json helpers report FL_ERR_NOMEM, so it calls Jansson itself.
if(TARGET test_accounting_errors)
  target_link_libraries(test_accounting_errors PRIVATE PkgConfig::JANSSON)
endif()
