# secagg fuzz targets: the server-side and client-side message parsers of every phase
# (corpora in corpus/secagg_server_msg/ and corpus/secagg_client_msg/, generated from a
# real round by tests/fuzz/secagg_corpus_gen.c; see docs/secagg.md).
if(TARGET fl_secagg_static)
  fl_add_fuzzer(secagg_server_msg SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/secagg_server_msg.c
    LIBS fl_secagg_static LABEL secagg)
  fl_add_fuzzer(secagg_client_msg SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/secagg_client_msg.c
    LIBS fl_secagg_static LABEL secagg)
endif()
