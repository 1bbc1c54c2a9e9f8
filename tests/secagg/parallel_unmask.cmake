# The parallel-unmask test runs the server's jobs on real pthreads.
if(TARGET test_sa_parallel_unmask)
  target_link_libraries(test_sa_parallel_unmask PRIVATE Threads::Threads)
  fl_thread_tests(test_sa_parallel_unmask)
endif()
