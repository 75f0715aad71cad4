# install.cmake: what `cmake --install` puts where.
#
#   lib/libkeel.so.0 (+ libkeel.so, libkeel.a)   the library, shared and static
#   include/keel.h, keel_stats.h, keel_dist.h,
#   keel_train.h                                  the public API
#   bin/keel                                      the command
#   lib/pkgconfig/keel.pc                         pkg-config --cflags --libs keel
#   lib/cmake/keel/keelConfig*.cmake              find_package(keel) -> keel::keel
#
# keel::keel is the shared library; it needs nothing else at link time (its
# own dependencies, OpenBLAS and pthreads, are recorded in libkeel.so).
include(CMakePackageConfigHelpers)

install(TARGETS keel_shared EXPORT keelTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS keel ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS keel_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/keel.h ${CMAKE_SOURCE_DIR}/include/keel_stats.h
              ${CMAKE_SOURCE_DIR}/include/keel_dist.h ${CMAKE_SOURCE_DIR}/include/keel_train.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KEEL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/keel)
install(EXPORT keelTargets NAMESPACE keel:: DESTINATION ${KEEL_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/keelConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/keelConfig.cmake
                              INSTALL_DESTINATION ${KEEL_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/keelConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/keelConfig.cmake ${CMAKE_BINARY_DIR}/keelConfigVersion.cmake
        DESTINATION ${KEEL_CMAKE_DIR})

# pkg-config: paths relative to the prefix, so an installed tree can move.
file(RELATIVE_PATH KEEL_PC_UP /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${CMAKE_SOURCE_DIR}/cmake/keel.pc.in ${CMAKE_BINARY_DIR}/keel.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/keel.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
