# Finds the C libraries stagecraft links against, with pkg-config, and the optional CUDA
# toolkit + NCCL. A missing library stops configure with the Debian package to install.
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
    message(FATAL_ERROR "pkg-config not found: install the Debian package 'pkg-config' "
                        "(or run deploy/install-deps.sh)")
endif()

# sc_require_pkg(<target suffix> <pkg-config module> <debian package>)
function(sc_require_pkg name module debian)
    pkg_check_modules(SC_${name} QUIET IMPORTED_TARGET GLOBAL ${module})
    if(NOT SC_${name}_FOUND)
        message(FATAL_ERROR "pkg-config module '${module}' not found: install the Debian package "
                            "'${debian}' (or run deploy/install-deps.sh)")
    endif()
    add_library(sc::${name} ALIAS PkgConfig::SC_${name})
    set(SC_FOUND_LIBS "${SC_FOUND_LIBS} ${module}-${SC_${name}_VERSION}" PARENT_SCOPE)
endfunction()

set(SC_FOUND_LIBS "")
sc_require_pkg(cmocka    cmocka        libcmocka-dev)
sc_require_pkg(jansson   jansson       libjansson-dev)
if(NOT STAGECRAFT_KERNELS_ONLY)
    sc_require_pkg(grpc      grpc          libgrpc-dev)
    sc_require_pkg(protobufc libprotobuf-c libprotobuf-c-dev)
    sc_require_pkg(zmq       libzmq        libzmq3-dev)
    sc_require_pkg(hwloc     hwloc         libhwloc-dev)
    sc_require_pkg(sqlite3   sqlite3       libsqlite3-dev)
    # the coordinator's dashboard and /metrics (coordinator/http.c)
    sc_require_pkg(mhd       libmicrohttpd libmicrohttpd-dev)

    find_program(SC_PROTOC_C NAMES protoc-c)
    if(NOT SC_PROTOC_C)
        message(FATAL_ERROR "protoc-c not found: install the Debian package "
                            "'protobuf-c-compiler' (or run deploy/install-deps.sh)")
    endif()
endif()

# --- BLAS (optional, wanted) ------------------------------------------------------------
# The CPU fast path runs its matrix products on OpenBLAS (Debian: libopenblas-openmp-dev, which
# deploy/install-deps.sh installs). AUTO uses it when pkg-config finds it; without it the CPU
# runs the reference kernels only (correct, several times slower), and configure says so.
# Debian installs OpenBLAS's variants side by side (pthreads, OpenMP, serial); the OpenMP one is
# taken where it is there, with the program's run path pointing at it, so that the elementwise
# loops share the BLAS's threads (kernels/threads_cpu.c; docs/benchmarks.md has the figures).
set(STAGECRAFT_BLAS "AUTO" CACHE STRING "CPU matrix products on OpenBLAS: AUTO, ON or OFF")
set_property(CACHE STAGECRAFT_BLAS PROPERTY STRINGS AUTO ON OFF)
set(SC_BLAS_ENABLED OFF)
set(SC_BLAS_WHY "STAGECRAFT_BLAS=OFF")
if(NOT STAGECRAFT_BLAS STREQUAL "OFF")
    find_package(OpenMP COMPONENTS C QUIET)
    set(_omp_pc "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp/pkgconfig")
    set(_path "$ENV{PKG_CONFIG_PATH}")
    if(OpenMP_C_FOUND AND EXISTS "${_omp_pc}/openblas.pc" AND "$ENV{PKG_CONFIG_SYSROOT_DIR}" STREQUAL "")
        set(ENV{PKG_CONFIG_PATH} "${_omp_pc}${_path}")
        if(NOT _path STREQUAL "")
            set(ENV{PKG_CONFIG_PATH} "${_omp_pc}:${_path}")
        endif()
    endif()
    pkg_check_modules(SC_openblas QUIET IMPORTED_TARGET GLOBAL openblas)
    set(ENV{PKG_CONFIG_PATH} "${_path}")
    if(SC_openblas_FOUND)
        add_library(sc::blas ALIAS PkgConfig::SC_openblas)
        set(SC_BLAS_ENABLED ON)
        set(SC_BLAS_VARIANT "")
        if(SC_openblas_LIBDIR MATCHES "openblas-openmp")
            set(SC_BLAS_VARIANT " (OpenMP)")
        endif()
        set(SC_FOUND_LIBS "${SC_FOUND_LIBS} openblas-${SC_openblas_VERSION}${SC_BLAS_VARIANT}")
    else()
        set(SC_BLAS_WHY "pkg-config module 'openblas' not found: install the Debian package "
                        "'libopenblas-openmp-dev' (or run deploy/install-deps.sh)")
        if(STAGECRAFT_BLAS STREQUAL "ON")
            message(FATAL_ERROR "STAGECRAFT_BLAS=ON but ${SC_BLAS_WHY}")
        endif()
    endif()
endif()
if(NOT SC_BLAS_ENABLED)
    message(WARNING "stagecraft: CPU kernels without BLAS, reference only (${SC_BLAS_WHY})")
endif()

# --- CUDA + NCCL (optional) -------------------------------------------------------------
set(STAGECRAFT_CUDA "AUTO" CACHE STRING "Build the CUDA parts: AUTO, ON or OFF")
set_property(CACHE STAGECRAFT_CUDA PROPERTY STRINGS AUTO ON OFF)

set(SC_CUDA_ENABLED OFF)
set(SC_CUDA_WHY "STAGECRAFT_CUDA=OFF")
if(NOT STAGECRAFT_CUDA STREQUAL "OFF")
    set(_roots "")
    if(DEFINED CUDAToolkit_ROOT)
        list(APPEND _roots "${CUDAToolkit_ROOT}")
    endif()
    if(DEFINED ENV{CUDAToolkit_ROOT})
        list(APPEND _roots "$ENV{CUDAToolkit_ROOT}")
    endif()
    list(APPEND _roots "/usr/local/cuda")
    find_program(SC_NVCC NAMES nvcc HINTS ${_roots} PATH_SUFFIXES bin)
    set(_nccl_roots "")
    if(DEFINED NCCL_ROOT)
        list(APPEND _nccl_roots "${NCCL_ROOT}")
    endif()
    if(DEFINED ENV{NCCL_ROOT})
        list(APPEND _nccl_roots "$ENV{NCCL_ROOT}")
    endif()
    list(APPEND _nccl_roots ${_roots})
    find_path(SC_NCCL_INCLUDE nccl.h HINTS ${_nccl_roots} PATH_SUFFIXES include)
    find_library(SC_NCCL_LIB nccl HINTS ${_nccl_roots} PATH_SUFFIXES lib64 lib)
    if(SC_NVCC AND ((SC_NCCL_INCLUDE AND SC_NCCL_LIB) OR STAGECRAFT_KERNELS_ONLY))
        set(SC_CUDA_ENABLED ON) # the kernels alone need no NCCL
    else()
        set(SC_CUDA_WHY "nvcc: ${SC_NVCC}; nccl.h: ${SC_NCCL_INCLUDE}; libnccl: ${SC_NCCL_LIB}")
        if(STAGECRAFT_CUDA STREQUAL "ON")
            message(FATAL_ERROR "STAGECRAFT_CUDA=ON but the CUDA toolkit or NCCL was not found "
                                "(${SC_CUDA_WHY}); set CUDAToolkit_ROOT / NCCL_ROOT, or use "
                                "STAGECRAFT_CUDA=AUTO or OFF")
        endif()
    endif()
endif()

if(SC_CUDA_ENABLED)
    if(NOT DEFINED CMAKE_CUDA_COMPILER)
        set(CMAKE_CUDA_COMPILER "${SC_NVCC}")
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        # Hopper and Ampere as real code, plus PTX for newer GPUs to JIT.
        set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
    endif()
    # one CUDA runtime in every program: the shared one that CUDA::cudart and NCCL use, not
    # also the static one nvcc links into targets with .cu sources by default
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
        set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    if(SC_NCCL_LIB AND SC_NCCL_INCLUDE)
        add_library(sc::nccl UNKNOWN IMPORTED GLOBAL)
        set_target_properties(sc::nccl PROPERTIES IMPORTED_LOCATION "${SC_NCCL_LIB}"
                                                  INTERFACE_INCLUDE_DIRECTORIES "${SC_NCCL_INCLUDE}")
    endif()
    set(SC_BUILD_KIND "CUDA ${CUDAToolkit_VERSION} (nvcc ${SC_NVCC}, NCCL ${SC_NCCL_LIB})")
    # The GPU backend module (gpu/) and the programs that load it must agree on every type and
    # function they share: its interface is named by the version and a digest of the headers
    # both are built from (configure runs again when one changes).
    file(GLOB _abi_headers ${PROJECT_SOURCE_DIR}/common/*.h ${PROJECT_SOURCE_DIR}/kernels/*.h
         ${PROJECT_SOURCE_DIR}/kernels/*.cuh ${PROJECT_SOURCE_DIR}/worker/transport/*.h)
    list(SORT _abi_headers)
    set(_abi_text "")
    foreach(_h ${_abi_headers})
        file(READ ${_h} _t)
        string(APPEND _abi_text "${_t}")
    endforeach()
    string(SHA256 _abi_digest "${_abi_text}")
    string(SUBSTRING "${_abi_digest}" 0 16 _abi_digest)
    set(SC_GPU_MODULE_ABI "${PROJECT_VERSION}-${_abi_digest}")
    set(SC_GPU_MODULE_BUILD_PATH "${CMAKE_BINARY_DIR}/lib/libstagecraft-gpu.so")
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                 ${_abi_headers})
else()
    set(SC_BUILD_KIND "CPU-only (${SC_CUDA_WHY})")
endif()

message(STATUS "stagecraft: found${SC_FOUND_LIBS}; build: ${SC_BUILD_KIND}")
