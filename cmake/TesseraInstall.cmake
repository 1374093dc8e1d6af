# install/export so that a user's project can find_package(tessera) and link tessera::tessera.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(_tessera_libs tessera tessera_capi tessera_models tessera_backends tessera_core tessera_quant)
foreach(t IN LISTS TESSERA_EXTRA_EXPORTS)
  list(APPEND _tessera_libs ${t})
endforeach()
install(TARGETS ${_tessera_libs} EXPORT tesseraTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/tessera DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The C++ headers (core/, quant/, models/, backends/) keep their layout under tessera/internal so
# that C++ users can include "models/model.h" etc.; the C API in tessera/tessera.h is the stable ABI
# (tessera/tessera.hpp is its header-only C++ wrapper).
foreach(dir core quant models backends)
  install(DIRECTORY ${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/internal FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT tesseraTargets NAMESPACE tessera:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/tesseraConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/tesseraConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tesseraConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tesseraConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/tesseraConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
