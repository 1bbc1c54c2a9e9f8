# A tiny run of the audit benchmark so it keeps building and working (not a measurement).
if(TARGET bench_audit)
  add_test(NAME bench_audit_smoke
    COMMAND bench_audit --entries 300 --batch 100 --rounds 5 --proofs 20 --json)
  set_tests_properties(bench_audit_smoke PROPERTIES LABELS "storage;audit;integration" TIMEOUT 60)
endif()
