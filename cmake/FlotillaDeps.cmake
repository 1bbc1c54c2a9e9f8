# Every dependency is an imported target: pkg-config first, CMake config or plain find second.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(MHD IMPORTED_TARGET libmicrohttpd)
pkg_check_modules(CURL IMPORTED_TARGET libcurl)
pkg_check_modules(ZLIB IMPORTED_TARGET zlib)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
# libgcrypt: secagg's mask PRG on CPUs with VAES (docs/secagg.md, Crypto backends).
pkg_check_modules(GCRYPT IMPORTED_TARGET libgcrypt)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# Debian's mbedTLS 2.28 ships neither a .pc file nor a CMake config.
find_path(MBEDTLS_INCLUDE_DIR mbedtls/version.h)
find_library(MBEDCRYPTO_LIBRARY mbedcrypto)
if(MBEDTLS_INCLUDE_DIR AND MBEDCRYPTO_LIBRARY)
  add_library(fl_dep_mbedcrypto UNKNOWN IMPORTED)
  set_target_properties(fl_dep_mbedcrypto PROPERTIES
    IMPORTED_LOCATION "${MBEDCRYPTO_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MBEDTLS_INCLUDE_DIR}")
  set(FL_HAVE_MBEDTLS ON)
else()
  message(STATUS "mbedTLS not found: the mbedtls secagg backend is skipped (run scripts/setup.sh)")
  set(FL_HAVE_MBEDTLS OFF)
endif()

find_library(CMOCKA_LIBRARY cmocka)
find_path(CMOCKA_INCLUDE_DIR cmocka.h)

find_package(MPI COMPONENTS C)

# CUDA: auto-detected under /usr/local/cuda.
set(FL_HAVE_CUDA OFF)
if(NOT FL_WITH_CUDA STREQUAL "OFF")
  if(EXISTS /usr/local/cuda/bin/nvcc AND EXISTS /usr/local/cuda/include/nccl.h)
    set(FL_HAVE_CUDA ON)
  elseif(EXISTS /usr/local/cuda/bin/nvcc)
    find_path(NCCL_INCLUDE_DIR nccl.h PATHS /usr/local/cuda/include /usr/include)
    if(NCCL_INCLUDE_DIR)
      set(FL_HAVE_CUDA ON)
    endif()
  endif()
  if(NOT FL_HAVE_CUDA)
    if(FL_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "FL_WITH_CUDA=ON but nvcc/NCCL were not found under /usr/local/cuda")
    endif()
    message(STATUS "CUDA or NCCL not found under /usr/local/cuda: CUDA parts are skipped")
  endif()
endif()
