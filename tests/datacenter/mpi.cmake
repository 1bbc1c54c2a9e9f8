# MPI integration tests: grid-vs-single equivalence and kill-and-resume, under mpirun.
if(MPI_C_FOUND AND TARGET fl_datacenter_static)
  add_executable(mpi_equiv ${CMAKE_CURRENT_LIST_DIR}/mpi_equiv.c)
  fl_target_defaults(mpi_equiv)
  target_include_directories(mpi_equiv PRIVATE ${CMOCKA_INCLUDE_DIR} ${PROJECT_SOURCE_DIR}/tests/common)
  target_link_libraries(mpi_equiv PRIVATE fl_datacenter_static MPI::MPI_C ${CMOCKA_LIBRARY})

  # OpenMPI refuses root without these; OpenBLAS threads would oversubscribe the 2 cores.
  # Under ASan, OpenMPI's own allocations at exit show up as leaks: leak checking is off for
  # the mpirun tests only.
  set(_dc_mpi_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 CMOCKA_MESSAGE_OUTPUT=stdout)
  if(FL_SANITIZE)
    list(APPEND _dc_mpi_env ASAN_OPTIONS=detect_leaks=0)
  endif()
  set(_dc_mpiexec ${MPIEXEC_EXECUTABLE})
  if(NOT _dc_mpiexec)
    set(_dc_mpiexec mpirun)
  endif()
  foreach(np 2 4)
    add_test(NAME dc_mpi_equiv_np${np}
      COMMAND ${_dc_mpiexec} --oversubscribe -np ${np} $<TARGET_FILE:mpi_equiv>)
    set_tests_properties(dc_mpi_equiv_np${np} PROPERTIES LABELS "datacenter;integration"
      TIMEOUT 120 ENVIRONMENT "${_dc_mpi_env}")
  endforeach()
  if(TARGET flotilla-train)
    add_test(NAME dc_kill_resume_np2 COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/kill_resume.sh
      $<TARGET_FILE:flotilla-train> ${_dc_mpiexec} 2 "--dp 2")
    add_test(NAME dc_kill_resume_np4 COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/kill_resume.sh
      $<TARGET_FILE:flotilla-train> ${_dc_mpiexec} 4 "--dp 2 --tp 2 --zero 1")
    set_tests_properties(dc_kill_resume_np2 dc_kill_resume_np4 PROPERTIES
      LABELS "datacenter;integration" TIMEOUT 120 ENVIRONMENT "${_dc_mpi_env}")
  endif()
endif()
if(MPI_C_FOUND AND TARGET flotilla-train AND TARGET fl_storage_static)
  add_test(NAME dc_registry_np2 COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/registry.sh
    $<TARGET_FILE:flotilla-train> ${_dc_mpiexec})
  set_tests_properties(dc_registry_np2 PROPERTIES LABELS "datacenter;integration" TIMEOUT 60
    ENVIRONMENT "${_dc_mpi_env}")
endif()
