# The registry demo runs twice on a fresh file: first run stores, second run reuses.
if(TARGET registry-demo)
  add_test(NAME storage_registry_demo
    COMMAND sh -c "rm -f registry-demo-test.db registry-demo-test.db-wal registry-demo-test.db-shm && \"$1\" registry-demo-test.db && \"$1\" registry-demo-test.db | grep -q 'reused'" sh $<TARGET_FILE:registry-demo>
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(storage_registry_demo PROPERTIES LABELS "storage;integration" TIMEOUT 60)
endif()
