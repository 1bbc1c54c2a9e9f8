# coordinator fuzz targets: JSON request-body validators (corpus in corpus/coord_bodies/).
if(TARGET fl_coordinator_static)
  fl_add_fuzzer(coord_bodies SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/coord_bodies.c
    LIBS fl_coordinator_static LABEL coordinator)
endif()
