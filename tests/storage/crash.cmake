# The kill -9 crash test forks writers and runs a few seconds: integration, not unit.
if(TEST test_store_crash)
  set_tests_properties(test_store_crash PROPERTIES LABELS "storage;integration" TIMEOUT 120)
endif()
