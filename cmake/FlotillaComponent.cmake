# fl_add_component(<comp> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
#
# Builds one component three ways from one set of objects:
#   fl_<comp>_obj     OBJECT library (hidden visibility, PIC)
#   fl_<comp>         SHARED library exporting only FL_API symbols (alias flotilla::<comp>)
#   fl_<comp>_static  STATIC library that tests link to reach internals without exporting them
# PUBLIC_DEPS name other components (without the fl_ prefix) or imported targets.
function(fl_add_component comp)
  cmake_parse_arguments(A "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  string(REPLACE "-" "_" name "${comp}")
  if(NOT A_SOURCES)
    message(STATUS "flotilla: component ${comp} has no sources yet; skipped")
    return()
  endif()
  set(obj fl_${name}_obj)
  add_library(${obj} OBJECT ${A_SOURCES})
  fl_target_defaults(${obj})
  target_compile_features(${obj} PUBLIC c_std_11)
  target_compile_definitions(${obj} PRIVATE FL_BUILDING_LIBRARY)
  target_include_directories(${obj} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:include>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/core/src)

  add_library(fl_${name} SHARED $<TARGET_OBJECTS:${obj}>)
  add_library(fl_${name}_static STATIC $<TARGET_OBJECTS:${obj}>)
  add_library(flotilla::${comp} ALIAS fl_${name})
  set_target_properties(fl_${name} PROPERTIES OUTPUT_NAME flotilla-${comp}
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  set_target_properties(fl_${name}_static PROPERTIES OUTPUT_NAME flotilla-${comp}-static)
  # Symbols from static dependencies stay local: each .so exports only its own FL_API.
  target_link_options(fl_${name} PRIVATE "LINKER:--exclude-libs,ALL" "LINKER:--no-undefined")
  foreach(t fl_${name} fl_${name}_static)
    fl_target_defaults(${t})
    target_include_directories(${t} PUBLIC
      $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:include>)
    target_compile_features(${t} PUBLIC c_std_11)
  endforeach()
  # Internal include dirs for tests linking the static build.
  target_include_directories(fl_${name}_static PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/src>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/core/src>)

  foreach(dep IN LISTS A_PUBLIC_DEPS)
    string(REPLACE "-" "_" dn "${dep}")
    if(TARGET fl_${dn}_obj)
      target_link_libraries(${obj} PUBLIC fl_${dn}_obj)
      # The shared library carries its own hidden copy of the dependency (internals such
      # as fl__alloc are never exported), and consumers also get the dependency's API.
      target_link_libraries(fl_${name} PRIVATE fl_${dn}_static INTERFACE fl_${dn})
      target_link_libraries(fl_${name}_static PUBLIC fl_${dn}_static)
    else()
      target_link_libraries(${obj} PUBLIC ${dep})
      target_link_libraries(fl_${name} PUBLIC ${dep})
      target_link_libraries(fl_${name}_static PUBLIC ${dep})
    endif()
  endforeach()
  foreach(dep IN LISTS A_PRIVATE_DEPS)
    string(REPLACE "-" "_" dn "${dep}")
    if(TARGET fl_${dn}_obj)
      # Objects need the headers only; link the matching library flavour.
      target_include_directories(${obj} PRIVATE $<TARGET_PROPERTY:fl_${dn}_obj,INTERFACE_INCLUDE_DIRECTORIES>)
      target_link_libraries(fl_${name} PRIVATE fl_${dn}_static)
      target_link_libraries(fl_${name}_static PUBLIC fl_${dn}_static)
    else()
      target_link_libraries(${obj} PRIVATE ${dep})
      target_link_libraries(fl_${name} PRIVATE ${dep})
      target_link_libraries(fl_${name}_static PUBLIC ${dep})
    endif()
  endforeach()
  set_property(GLOBAL APPEND PROPERTY FL_COMPONENTS ${comp})
endfunction()

# fl_add_test(<name> SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s])
# One cmocka executable = one ctest, labelled per component and kind.
function(fl_add_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  fl_target_defaults(${name})
  target_include_directories(${name} PRIVATE ${CMOCKA_INCLUDE_DIR} ${PROJECT_SOURCE_DIR}/tests/common)
  target_link_libraries(${name} PRIVATE ${A_LIBS} ${CMOCKA_LIBRARY})
  target_compile_definitions(${name} PRIVATE
    FL_SOURCE_DIR="${PROJECT_SOURCE_DIR}" FL_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name} ${A_ARGS})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
    ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout")
endfunction()

# fl_thread_tests(<test>...): tests that run several threads of the project's own (the
# coordinator's HTTP workers and its rounds' unlocked steps, the SDK's worker, secagg's
# parallel unmask). Each gets the label "threads" and its executable joins the target
# fl_thread_tests, which the tsan preset builds and runs under ThreadSanitizer. Call it in
# the directory that added the tests (a test's properties belong to that directory).
function(fl_thread_tests)
  foreach(t IN LISTS ARGN)
    set_property(TEST ${t} APPEND PROPERTY LABELS threads)
    set_property(GLOBAL APPEND PROPERTY FL_THREAD_TEST_TARGETS ${t})
  endforeach()
endfunction()

# fl_add_embedded_objects(<comp> SOURCES ... [DEPS ...])
#
# The client SDK's embedded profile (mbedTLS for every primitive, no libsodium, OpenSSL or
# libcurl): a second OBJECT library fl_<comp>_emb_obj compiled from the component's own
# sources, with the crypto files swapped by the caller, FL_CRYPTO_MBEDTLS_ONLY defined and
# otherwise the flags of fl_<comp>_obj. client-sdk/CMakeLists.txt links these objects into
# libflotilla_client_embedded.so. DEPS name components (their headers) or imported targets;
# core and mbedTLS are always added.
function(fl_add_embedded_objects comp)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  string(REPLACE "-" "_" name "${comp}")
  set(obj fl_${name}_emb_obj)
  add_library(${obj} OBJECT ${A_SOURCES})
  fl_target_defaults(${obj})
  target_compile_features(${obj} PUBLIC c_std_11)
  target_compile_definitions(${obj} PRIVATE FL_BUILDING_LIBRARY FL_CRYPTO_MBEDTLS_ONLY
    FL_HAVE_MBEDTLS_BUILD)
  target_include_directories(${obj} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include
    ${CMAKE_CURRENT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/core/include
    ${PROJECT_SOURCE_DIR}/core/src)
  target_link_libraries(${obj} PRIVATE fl_dep_mbedcrypto)
  foreach(dep IN LISTS A_DEPS)
    string(REPLACE "-" "_" dn "${dep}")
    if(TARGET fl_${dn}_obj)
      target_include_directories(${obj} PRIVATE
        $<TARGET_PROPERTY:fl_${dn}_obj,INTERFACE_INCLUDE_DIRECTORIES>)
    else()
      target_link_libraries(${obj} PRIVATE ${dep})
    endif()
  endforeach()
endfunction()
