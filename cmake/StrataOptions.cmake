# Compiler warnings, sanitizers and the CUDA switch.

add_library(strata_warnings INTERFACE)
target_compile_options(strata_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
  -Wno-missing-field-initializers>)
if(STRATA_WERROR)
  target_compile_options(strata_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

if(STRATA_SANITIZE)
  if(NOT STRATA_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "STRATA_SANITIZE=${STRATA_SANITIZE}: accepted values are address, undefined, thread")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${STRATA_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${STRATA_SANITIZE})
  if(STRATA_SANITIZE STREQUAL "undefined")
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  endif()
endif()

find_program(STRATA_CCACHE ccache)
if(STRATA_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${STRATA_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${STRATA_CCACHE})
endif()

# CUDA: AUTO builds the backend when nvcc is found (also under /usr/local/cuda).
if(NOT STRATA_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "STRATA_CUDA=${STRATA_CUDA}: accepted values are AUTO, ON, OFF")
endif()
set(STRATA_HAS_CUDA OFF)
# STRATA_CUDA_EMULATE: the CUDA backend compiled as C++ against the emulated CUDA runtime,
# cuBLASLt and NCCL of tests/cuda_emu (no nvcc, no GPU): for running the GPU-labelled tests on
# machines without a GPU (CI). Not for training: the emulator is thousands of times slower.
option(STRATA_CUDA_EMULATE "Build the CUDA backend against the emulated CUDA runtime (tests only)" OFF)
if(STRATA_CUDA_EMULATE)
  if(STRATA_SANITIZE STREQUAL "thread")
    message(FATAL_ERROR "STRATA_CUDA_EMULATE runs kernels on fibers, which the thread sanitizer cannot follow")
  endif()
  set(STRATA_HAS_CUDA ON)
elseif(NOT STRATA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(STRATA_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(STRATA_NVCC)
      set(CMAKE_CUDA_COMPILER ${STRATA_NVCC})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # A machine with a GPU builds for that GPU; elsewhere (CI) for Hopper.
      find_program(STRATA_NVIDIA_SMI nvidia-smi NO_CACHE)
      if(STRATA_NVIDIA_SMI)
        execute_process(COMMAND ${STRATA_NVIDIA_SMI} -L RESULT_VARIABLE smi_rc OUTPUT_QUIET ERROR_QUIET)
      endif()
      if(STRATA_NVIDIA_SMI AND smi_rc EQUAL 0)
        set(CMAKE_CUDA_ARCHITECTURES native)
      else()
        set(CMAKE_CUDA_ARCHITECTURES 90)
      endif()
    endif()
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 dialect for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(STRATA_HAS_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no nvcc was found (set CMAKE_CUDA_COMPILER or use STRATA_CUDA=AUTO)")
  endif()
endif()
