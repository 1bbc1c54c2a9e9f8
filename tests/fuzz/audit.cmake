# audit fuzz targets: the offline bundle verifier, entry rules and checkpoint notes (corpus in
# corpus/audit_bundle/; seeds from `flotilla-audit demo`, see corpus/audit_bundle/README), and
# the Merkle inclusion / consistency proof verifiers (corpus/audit_proofs/, see its README).
fl_add_fuzzer(audit_bundle SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audit_bundle.c
  LIBS fl_storage_static LABEL storage)
set_tests_properties(fuzz_replay_audit_bundle PROPERTIES LABELS "storage;audit;fuzz-regress")
fl_add_fuzzer(audit_proofs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audit_proofs.c
  LIBS fl_storage_static LABEL storage)
set_tests_properties(fuzz_replay_audit_proofs PROPERTIES LABELS "storage;audit;fuzz-regress")
