# Install rules and the package config that lets another CMake project call
# find_package(ampkit) and link ampkit::ampkit.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ampkit EXPORT ampkitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ampkit
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/ampkit/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ampkit)
install(EXPORT ampkitTargets
  NAMESPACE ampkit::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ampkit)

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/ampkitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ampkitConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ampkit)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/ampkitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/ampkitConfig.cmake
  ${PROJECT_BINARY_DIR}/ampkitConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ampkit)
