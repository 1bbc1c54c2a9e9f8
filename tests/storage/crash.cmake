# The kill -9 crash test forks writers and runs a few seconds: integration, not unit.
# Sanitizer builds kill the writer 60 times instead of 200 (FL_CRASH_KILLS): every kill runs
# the same store code after it (reopen, fl_store_check, reads), and what the kill moments
# vary is SQLite's recovery, which ASan does not instrument; the dev stage still kills 200
# times. The checks after each kill re-read every commit so far: 200 kills took ~20 s of the
# ASan stage, 60 take ~3.5 s.
if(TEST test_store_crash)
  set_tests_properties(test_store_crash PROPERTIES LABELS "storage;integration" TIMEOUT 120)
  if(FL_SANITIZE)
    set_tests_properties(test_store_crash PROPERTIES
      ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout;FL_CRASH_KILLS=60")
  endif()
endif()
