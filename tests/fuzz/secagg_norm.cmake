# secagg norm-proof fuzz target: fl_secagg_norm_check on a MASKED_INPUT with its proof,
# checked against a real server (corpus/secagg_norm_proof/, written by
# fuzz_gen_secagg_norm_proof from secagg_norm_corpus_gen.c: each client's masked input from a
# real round of secagg_norm_fuzz.h, plus truncated and bit-flipped variants). Norm proofs
# need libsodium, hence the direct link (the target hashes with it too).
if(TARGET fl_secagg_static)
  fl_add_fuzzer(secagg_norm_proof SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/secagg_norm_proof.c
    LIBS fl_secagg_static PkgConfig::SODIUM LABEL secagg)
  add_executable(fuzz_gen_secagg_norm_proof ${CMAKE_CURRENT_SOURCE_DIR}/secagg_norm_corpus_gen.c)
  fl_target_defaults(fuzz_gen_secagg_norm_proof)
  target_link_libraries(fuzz_gen_secagg_norm_proof PRIVATE fl_secagg_static)
  # The committed valid seeds must still verify (they go stale when the proof format moves).
  add_test(NAME fuzz_seeds_secagg_norm_proof COMMAND fuzz_gen_secagg_norm_proof --check
    ${CMAKE_CURRENT_SOURCE_DIR}/corpus/secagg_norm_proof)
  set_tests_properties(fuzz_seeds_secagg_norm_proof PROPERTIES LABELS "secagg;fuzz-regress")
endif()
