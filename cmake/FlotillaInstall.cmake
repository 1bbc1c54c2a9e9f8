include(GNUInstallDirs)
get_property(_fl_comps GLOBAL PROPERTY FL_COMPONENTS)
foreach(comp IN LISTS _fl_comps)
  string(REPLACE "-" "_" name "${comp}")
  install(TARGETS fl_${name} EXPORT flotillaTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${comp}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT flotillaTargets NAMESPACE flotilla:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flotilla)
file(WRITE ${PROJECT_BINARY_DIR}/flotillaConfig.cmake
  "include(\${CMAKE_CURRENT_LIST_DIR}/flotillaTargets.cmake)\n")
install(FILES ${PROJECT_BINARY_DIR}/flotillaConfig.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flotilla)
