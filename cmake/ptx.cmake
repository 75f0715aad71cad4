# ptx.cmake: keel's GPU kernels (src/device/kernels/*.cu) compiled to PTX by
# clang's CUDA mode, with no CUDA SDK (-nocudainc -nocudalib, the prelude in
# kernels/prelude.h), and embedded in the library as a C string
# (keel_cuda_ptx in ${CMAKE_BINARY_DIR}/keel_ptx.c). The PTX targets sm_80
# with PTX ISA 7.0: the driver JIT-compiles it for any NVIDIA GPU from sm_80
# up. A kernel that does not compile fails the build.
#
# Sets KEEL_PTX_SOURCE (the generated C file) when a clang is found;
# -DKEEL_CUDA_KERNELS=OFF builds without kernels (keel_cuda_open then says
# so).
find_program(KEEL_CLANG NAMES clang clang-16 clang-15 clang-14)
if(KEEL_CLANG)
  option(KEEL_CUDA_KERNELS "GPU kernels compiled to PTX by clang" ON)
else()
  option(KEEL_CUDA_KERNELS "GPU kernels compiled to PTX by clang" OFF)
endif()
if(KEEL_CUDA_KERNELS AND NOT KEEL_CLANG)
  message(FATAL_ERROR "KEEL_CUDA_KERNELS=ON needs clang (apt-get install clang)")
endif()
message(STATUS "keel: GPU kernels (PTX by clang): ${KEEL_CUDA_KERNELS}")

if(KEEL_CUDA_KERNELS)
  file(GLOB KEEL_CU_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/device/kernels/*.cu)
  set(KEEL_PTX_FILES)
  foreach(cu ${KEEL_CU_SOURCES})
    get_filename_component(stem ${cu} NAME_WE)
    set(ptx ${CMAKE_BINARY_DIR}/ptx/${stem}.ptx)
    add_custom_command(
      OUTPUT ${ptx}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/ptx
      COMMAND ${KEEL_CLANG} -x cuda --cuda-device-only -nocudainc -nocudalib
              --cuda-gpu-arch=sm_80 -Xclang -target-feature -Xclang +ptx70
              -O3 -S -Wall -Werror -Wno-unknown-cuda-version
              -I ${CMAKE_SOURCE_DIR}/src/device/kernels ${cu} -o ${ptx}
      DEPENDS ${cu} ${CMAKE_SOURCE_DIR}/src/device/kernels/prelude.h
              ${CMAKE_SOURCE_DIR}/src/device/kernels/fmath.h
      COMMENT "PTX: ${stem}.cu"
      VERBATIM)
    list(APPEND KEEL_PTX_FILES ${ptx})
  endforeach()
  set(KEEL_PTX_SOURCE ${CMAKE_BINARY_DIR}/keel_ptx.c)
  add_custom_command(
    OUTPUT ${KEEL_PTX_SOURCE}
    COMMAND ${CMAKE_COMMAND} -DOUT=${KEEL_PTX_SOURCE} "-DPTX=${KEEL_PTX_FILES}"
            -P ${CMAKE_SOURCE_DIR}/cmake/embed_ptx.cmake
    DEPENDS ${KEEL_PTX_FILES} ${CMAKE_SOURCE_DIR}/cmake/embed_ptx.cmake
    COMMENT "PTX: embedding ${KEEL_PTX_FILES}"
    VERBATIM)
endif()
