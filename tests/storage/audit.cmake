# Audit log tests: labelled audit as well as storage (ctest -L audit).
foreach(t test_audit_merkle test_audit_log test_audit_bundle)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES LABELS "storage;audit;unit" TIMEOUT 120)
  endif()
endforeach()
