# core fuzz targets: the safetensors reader (corpus in corpus/safetensors/).
fl_add_fuzzer(safetensors SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/safetensors.c
  LIBS fl_core_static LABEL core)
