# A tiny run of the registry benchmark so it keeps building and working (not a measurement).
if(TARGET bench_registry)
  add_test(NAME bench_registry_smoke COMMAND bench_registry --size 4096 --count 5 --json)
  set_tests_properties(bench_registry_smoke PROPERTIES LABELS "storage;integration" TIMEOUT 60)
endif()
