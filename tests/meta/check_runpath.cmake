# cmake -DREADELF=readelf -DLIB=lib.so -P this   (tests/meta/CMakeLists.txt: meta_runpath_*)
#
# A shared library's RUNPATH (or RPATH) has no empty element: the dynamic loader reads an
# empty one (a leading, trailing or doubled ':') as the current directory, so a library
# planted in whatever directory the app runs from would be loaded in place of a dependency.
foreach(v READELF LIB)
  if(NOT ${v})
    message(FATAL_ERROR "${v} is required")
  endif()
endforeach()
execute_process(COMMAND ${READELF} -d ${LIB} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIB} failed")
endif()
string(REPLACE "\n" ";" lines "${dyn}")
foreach(line IN LISTS lines)
  if(line MATCHES "\\((RUNPATH|RPATH)\\)[^[]*\\[([^]]*)\\]")
    set(kind ${CMAKE_MATCH_1})
    set(path "${CMAKE_MATCH_2}")
    message(STATUS "${LIB}: ${kind} ${path}")
    if(path STREQUAL "" OR path MATCHES "^:" OR path MATCHES ":$" OR path MATCHES "::")
      message(FATAL_ERROR "${LIB}: ${kind} '${path}' has an empty element (the current "
                          "directory)")
    endif()
  endif()
endforeach()
