# A tiny run of the audit benchmark so it keeps building and working (not a measurement).
# The bench target is defined later (tests/bench/storage), hence the generator expression.
if(FL_BUILD_BENCH)
  add_test(NAME bench_audit_smoke
    COMMAND $<TARGET_FILE:bench_audit> --entries 300 --batch 100 --rounds 5 --proofs 20 --json)
  set_tests_properties(bench_audit_smoke PROPERTIES LABELS "storage;audit;integration" TIMEOUT 60)
endif()
