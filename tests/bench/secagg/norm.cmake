# bench_norm (norm proofs: prove, verify, proof size and the round with and without them)
# calls libsodium for its reference, a ristretto255 scalar multiplication. Smoke run at a
# small size so it stays working; the exit status is non-zero if a round fails, a sum is
# wrong or a client's own proof does not verify. Figures: `bench_norm --dim 256
# --bits-per-coord 16` (see its header comment).
if(TARGET bench_norm)
  target_link_libraries(bench_norm PRIVATE PkgConfig::SODIUM)
  add_test(NAME secagg_bench_norm_smoke
    COMMAND bench_norm --dim 8 --bits-per-coord 4 --clients 3 --reps 1 --json)
  set_tests_properties(secagg_bench_norm_smoke PROPERTIES LABELS "secagg;bench" TIMEOUT 120)
endif()
