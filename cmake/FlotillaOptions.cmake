# Build options. All FL_-prefixed so a parent project can set them.
option(FL_BUILD_TESTS "Build the cmocka test suite" ON)
option(FL_BUILD_BENCH "Build the benchmarks under tests/bench" ON)
option(FL_BUILD_FUZZERS "Build libFuzzer targets (needs clang)" OFF)
option(FL_WERROR "Treat warnings as errors" ON)
set(FL_SANITIZE "" CACHE STRING "Sanitizers, e.g. address,undefined")
set(FL_CRYPTO_BACKEND "sodium" CACHE STRING "Default secagg crypto backend: sodium (libsodium+OpenSSL) or mbedtls")
set_property(CACHE FL_CRYPTO_BACKEND PROPERTY STRINGS sodium mbedtls)
set(FL_WITH_CUDA "AUTO" CACHE STRING "Build CUDA parts: AUTO (if nvcc and NCCL under /usr/local/cuda), ON, OFF")

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

set(CMAKE_C_STANDARD 11)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
set(CMAKE_C_VISIBILITY_PRESET hidden)
set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)

# Warning flags applied per target by fl_target_defaults().
set(FL_WARNING_FLAGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wformat=2 -Wvla -Wno-unused-parameter)
if(FL_WERROR)
  list(APPEND FL_WARNING_FLAGS -Werror)
endif()

if(FL_SANITIZE)
  set(FL_SANITIZE_FLAGS -fsanitize=${FL_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
else()
  set(FL_SANITIZE_FLAGS "")
endif()
if(FL_BUILD_FUZZERS)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FL_BUILD_FUZZERS needs clang: configure with CC=clang")
  endif()
  # Libraries get coverage instrumentation so libFuzzer sees their branches; the fuzz
  # executables add -fsanitize=fuzzer themselves.
  if(NOT FL_SANITIZE)
    set(FL_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  endif()
  list(APPEND FL_SANITIZE_FLAGS -fsanitize=fuzzer-no-link)
endif()

function(fl_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:C>:${FL_WARNING_FLAGS}>)
  target_compile_definitions(${tgt} PRIVATE _POSIX_C_SOURCE=200809L _DEFAULT_SOURCE)
  if(FL_SANITIZE_FLAGS)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:C>:${FL_SANITIZE_FLAGS}>)
    target_link_options(${tgt} PRIVATE ${FL_SANITIZE_FLAGS})
  endif()
endfunction()
