# datacenter fuzz target: checkpoint shards and model files the trainer reads back
# (corpus/dc_checkpoint/, written by fuzz_gen_dc_checkpoint from dc_corpus_gen.c: a real
# checkpoint and model of the target's 6-5-3 trainer, plus broken variants).
if(TARGET fl_datacenter_static)
  fl_add_fuzzer(dc_checkpoint SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/dc_checkpoint.c
    LIBS fl_datacenter_static LABEL datacenter)
  add_executable(fuzz_gen_dc_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/dc_corpus_gen.c)
  fl_target_defaults(fuzz_gen_dc_checkpoint)
  target_link_libraries(fuzz_gen_dc_checkpoint PRIVATE fl_datacenter_static)
endif()
