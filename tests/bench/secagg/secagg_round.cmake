# Smoke runs of the secagg round benchmark (small sizes) so it stays working; the exit status
# is non-zero if the secure sum differs from the plain sum. The full grid is
# `bench_secagg --table full` (see docs/secagg.md for recorded figures).
if(TARGET bench_secagg)
  add_test(NAME secagg_bench_round_smoke COMMAND bench_secagg --n 30 --d 2000 --drop 0.1 --json)
  # The regex replaces the exit status as the verdict (CTest ignores it once one is set), so
  # it also asks for the equal sums; and the final advance's work counts must be there
  # (10% dropout: some agreements) with the primitive floor computed from them.
  set_tests_properties(secagg_bench_round_smoke PROPERTIES LABELS "secagg;bench" TIMEOUT 120
    PASS_REGULAR_EXPRESSION
    "\"paced\":false,\"status\":0,\"sum_matches_plain\":true,.*\"unmask_agreements\":[1-9][0-9]*,\"unmask_masks\":[1-9][0-9]*,.*\"floor_over_plain\":[0-9]")
  # One write per message (--paced) instead of a phase's messages in bursts.
  add_test(NAME secagg_bench_round_smoke_paced
    COMMAND bench_secagg --n 30 --d 2000 --drop 0.1 --paced --json)
  set_tests_properties(secagg_bench_round_smoke_paced PROPERTIES LABELS "secagg;bench"
    TIMEOUT 120 PASS_REGULAR_EXPRESSION "\"paced\":true,\"status\":0,\"sum_matches_plain\":true")
  # The final advance on the benchmark's own threads (unmask_begin/run/next).
  target_link_libraries(bench_secagg PRIVATE Threads::Threads)
  add_test(NAME secagg_bench_round_smoke_threads
    COMMAND bench_secagg --n 30 --d 5000 --drop 0.1 --threads 3 --json)
  set_tests_properties(secagg_bench_round_smoke_threads
    PROPERTIES LABELS "secagg;bench" TIMEOUT 120)
  # Active-adversary mode with device certificates (--active 2, as the coordinator runs it),
  # 3 clients leaving after their shares: equal sums, the consistency phase timed at the
  # server (its receives, a non-zero figure) and signed by all 27 survivors.
  add_test(NAME secagg_bench_round_smoke_active
    COMMAND bench_secagg --n 30 --d 2000 --drop 0.1 --active 2 --json)
  set_tests_properties(secagg_bench_round_smoke_active PROPERTIES LABELS "secagg;bench"
    TIMEOUT 120 PASS_REGULAR_EXPRESSION
    "\"status\":0,\"sum_matches_plain\":true,.*\"consistency\":\\[0\\.[0-9]*[1-9][0-9]*,[0-9.]+\\].*\"active\":2,\"device_certs\":true,\"consistency_s\":[0-9.]+,\"consistency_signatures\":27,")
  if(FL_HAVE_MBEDTLS)
    add_test(NAME secagg_bench_round_smoke_mbedtls
      COMMAND bench_secagg --n 20 --d 1000 --backend mbedtls --json)
    set_tests_properties(secagg_bench_round_smoke_mbedtls
      PROPERTIES LABELS "secagg;bench" TIMEOUT 120)
  endif()
endif()
# Revealed pairwise seeds (--reveal 1): equal sums and no agreement in the final advance
# (every survivor answers, so every dropped client's seeds were revealed).
if(TARGET bench_secagg)
  add_test(NAME secagg_bench_round_smoke_reveal
    COMMAND bench_secagg --n 30 --d 2000 --drop 0.1 --reveal 1 --json)
  set_tests_properties(secagg_bench_round_smoke_reveal PROPERTIES LABELS "secagg;bench"
    TIMEOUT 120 PASS_REGULAR_EXPRESSION
    "\"status\":0,\"sum_matches_plain\":true,.*\"unmask_agreements\":0,\"unmask_masks\":[1-9][0-9]*,.*\"reveal_pair_seeds\":true")
endif()
