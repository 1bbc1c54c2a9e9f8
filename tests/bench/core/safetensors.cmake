# Smoke run of the safetensors load benchmark (small file, no ratio check) so it stays working.
if(TARGET core_bench_safetensors_load)
  add_test(NAME core_bench_safetensors_load_smoke
    COMMAND core_bench_safetensors_load --size-mb 2 --tensors 8 --reps 3 --json
      --dir ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(core_bench_safetensors_load_smoke PROPERTIES LABELS "core;bench" TIMEOUT 60)
endif()
