# python.cmake: the Python package `keel` (python/keel) built into
# <build>/python, importable with PYTHONPATH=<build>/python. The extension
# links libkeel.so from this build (rpath $ORIGIN/../..).
#
# It needs Debian's python3-dev and python3-numpy; without them the package
# is skipped with a warning. Debian's /usr/bin/python3 is preferred when
# present (other interpreters on PATH may lack numpy); -DPython3_EXECUTABLE
# chooses another.
option(KEEL_PYTHON "Build the Python package (python3-dev, python3-numpy)" ON)
if(NOT KEEL_PYTHON)
  return()
endif()
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module NumPy)
if(NOT Python3_Development.Module_FOUND OR NOT Python3_NumPy_FOUND)
  message(WARNING "python3-dev or python3-numpy not found: the Python package is not built")
  set(KEEL_PYTHON OFF)
  return()
endif()

# tools/setup.sh reads it to say how to import build/python
set(KEEL_PYTHON_EXECUTABLE ${Python3_EXECUTABLE} CACHE INTERNAL "the interpreter of build/python")
set(KEEL_PY_DIR ${CMAKE_BINARY_DIR}/python/keel)
Python3_add_library(keel_python MODULE WITH_SOABI
                    ${CMAKE_SOURCE_DIR}/python/keel/_keel.c
                    ${CMAKE_SOURCE_DIR}/python/keel/_keel_mem.c
                    ${CMAKE_SOURCE_DIR}/python/keel/_keel_train.c)
set_target_properties(keel_python PROPERTIES OUTPUT_NAME _keel
                      LIBRARY_OUTPUT_DIRECTORY ${KEEL_PY_DIR}
                      BUILD_RPATH "$ORIGIN/../.." C_VISIBILITY_PRESET hidden)
target_compile_options(keel_python PRIVATE ${KEEL_WARNINGS})
target_link_libraries(keel_python PRIVATE keel_shared Python3::NumPy)

# The pure-Python modules, copied beside the extension.
file(GLOB KEEL_PY_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/keel/*.py)
foreach(src ${KEEL_PY_SOURCES})
  get_filename_component(name ${src} NAME)
  add_custom_command(OUTPUT ${KEEL_PY_DIR}/${name}
                     COMMAND ${CMAKE_COMMAND} -E copy_if_different ${src} ${KEEL_PY_DIR}/${name}
                     DEPENDS ${src} VERBATIM)
  list(APPEND KEEL_PY_COPIES ${KEEL_PY_DIR}/${name})
endforeach()
add_custom_target(keel_python_files ALL DEPENDS ${KEEL_PY_COPIES})
add_dependencies(keel_python keel_python_files)

# The pytest suite (tests/python), by ctest: python_tests. In a sanitizer
# build the interpreter gets ASan's runtime preloaded (gcc's; clang's
# runtime is linked differently, so its builds skip the suite) and runs the
# quick selection of the suite models.
set(KEEL_PY_ENV "")
if(KEEL_SANITIZE_THREAD OR (KEEL_SAN_FLAGS AND NOT CMAKE_C_COMPILER_ID STREQUAL "GNU"))
  message(STATUS "python_tests: not run with this compiler and sanitizer")
  return()
endif()
if(KEEL_SANITIZE_ADDRESS)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE KEEL_ASAN_RT OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND KEEL_PY_ENV KEEL_PRELOAD=${KEEL_ASAN_RT} KEEL_PY_QUICK=1)
endif()
add_test(NAME python_tests
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/python/run_pytest.sh ${Python3_EXECUTABLE}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(python_tests PROPERTIES LABELS "python" ENVIRONMENT "${KEEL_PY_ENV}")
