# `cmake --build <dir> --target bench_sampler_compare` runs the NumPy/OpenDP comparison
# (tests/bench/dp/bench_sampler.py) against this build's bench_sampler, with the project venv
# when it exists. Not a ctest: timings depend on the machine.
if(TARGET bench_sampler)
  if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(_fl_bench_py ${PROJECT_SOURCE_DIR}/.venv/bin/python)
  else()
    set(_fl_bench_py python3)
  endif()
  add_custom_target(bench_sampler_compare
    COMMAND ${_fl_bench_py} ${CMAKE_CURRENT_SOURCE_DIR}/bench_sampler.py
            --bin $<TARGET_FILE:bench_sampler>
    DEPENDS bench_sampler
    USES_TERMINAL
    COMMENT "exact discrete Gaussian vs NumPy and OpenDP")
endif()
