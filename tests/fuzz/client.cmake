# client-sdk fuzz targets: the task-config parser with the update pipeline behind it
# (corpus/client_task/), and every answer a device parses, driven through a real client
# over an in-memory transport (corpus/client_protocol/: enrollment, check-in, errors,
# signed task and model, phase results, outcomes). Seeds are hand-built records: task
# configs in the coordinator's exact layout (none/central/distributed, plain/secagg, per-layer,
# buffered) and whole exchanges (enrol, select, signed task and model, accept, outcome).
if(TARGET fl_client_sdk_static)
  fl_add_fuzzer(client_task SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/client_task.c
    LIBS fl_client_sdk_static LABEL client-sdk)
  target_include_directories(fuzz_replay_client_task PRIVATE
    ${PROJECT_SOURCE_DIR}/client-sdk/src ${PROJECT_SOURCE_DIR}/core/src)
  fl_add_fuzzer(client_protocol SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/client_protocol.c
    LIBS fl_client_sdk_static PkgConfig::SODIUM LABEL client-sdk)
  if(FL_BUILD_FUZZERS)
    target_include_directories(fuzz_client_task PRIVATE
      ${PROJECT_SOURCE_DIR}/client-sdk/src ${PROJECT_SOURCE_DIR}/core/src)
  endif()
endif()
