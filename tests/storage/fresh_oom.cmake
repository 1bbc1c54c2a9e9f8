# test_store_fresh_oom (registered by the glob) walks the store calls; the same program
# walks the audit log calls and fl_store_check as two more tests, each short under ASan.
if(TEST test_store_fresh_oom)
  foreach(walk audit check)
    add_test(NAME test_store_fresh_oom_${walk} COMMAND test_store_fresh_oom ${walk})
    set_tests_properties(test_store_fresh_oom_${walk} PROPERTIES LABELS "storage;unit"
      TIMEOUT 300 ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout")
  endforeach()
endif()
