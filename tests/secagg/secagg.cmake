# secagg protocol tests: labels and timeouts beyond the defaults of CMakeLists.txt here.
#
# params.c uses libm (lgamma/exp/log for the (k, t) derivation). Until secagg/CMakeLists.txt
# lists it, link it here so every consumer of the static and shared builds gets it.
if(TARGET fl_secagg_static)
  target_link_libraries(fl_secagg_static INTERFACE m)
endif()
if(TARGET fl_secagg)
  target_link_libraries(fl_secagg PRIVATE m)
endif()
