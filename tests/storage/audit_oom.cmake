# test_audit_oom (registered by the glob) runs the store-allocator walk; the same program
# runs the SQLite and Jansson allocator walks as two more tests, each short under ASan.
if(TEST test_audit_oom)
  foreach(walk sqlite json)
    add_test(NAME test_audit_oom_${walk} COMMAND test_audit_oom ${walk})
    set_tests_properties(test_audit_oom_${walk} PROPERTIES LABELS "storage;audit;unit"
      TIMEOUT 300 ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout")
  endforeach()
  set_tests_properties(test_audit_oom PROPERTIES LABELS "storage;audit;unit")
endif()
