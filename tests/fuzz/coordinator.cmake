# coordinator fuzz targets: JSON request-body validators (corpus in corpus/coord_bodies/) and
# the configuration file parser (corpus/coord_config/: hand-written configs, valid and not).
if(TARGET fl_coordinator_static)
  fl_add_fuzzer(coord_bodies SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/coord_bodies.c
    LIBS fl_coordinator_static LABEL coordinator)
  fl_add_fuzzer(coord_config SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/coord_config.c
    LIBS fl_coordinator_static LABEL coordinator)
endif()
