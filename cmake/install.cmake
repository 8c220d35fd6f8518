# Installation of the library, header, CMake package, pkg-config file and the
# uninstall target; included by the top-level CMakeLists.txt after every
# target is defined (the plugins and hvdrun install themselves in their own
# folders). Layout and use: "Install / uninstall" in README.md.

install(TARGETS hvd hvd_static EXPORT hvdTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/hvd.h ${PROJECT_SOURCE_DIR}/include/hvd_transport.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(HVD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hvd)
install(EXPORT hvdTargets NAMESPACE hvd:: DESTINATION ${HVD_INSTALL_CMAKEDIR}
        FILE hvdTargets.cmake)
include(CMakePackageConfigHelpers)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hvdConfig.cmake.in ${CMAKE_BINARY_DIR}/cmake/hvdConfig.cmake
  INSTALL_DESTINATION ${HVD_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/hvdConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/hvdConfig.cmake ${CMAKE_BINARY_DIR}/cmake/hvdConfigVersion.cmake
        DESTINATION ${HVD_INSTALL_CMAKEDIR})

# pkg-config. The prefix is the one the files are installed into, known only
# at install time (`cmake --install --prefix P` overrides
# CMAKE_INSTALL_PREFIX): hvd.pc is installed with a placeholder, which the
# install step then replaces with that prefix.
set(HVD_PC_PREFIX "@HVD_PC_INSTALL_PREFIX@")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(HVD_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(HVD_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(HVD_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(HVD_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(HVD_PC_LIBS_PRIVATE "")
set(HVD_PC_REQUIRES_PRIVATE "")
if(HVD_HAVE_GLOO)
  # Gloo ships no .pc file: its library by name, with its folder when that is
  # not one the linker searches anyway.
  get_target_property(gloo_configs gloo IMPORTED_CONFIGURATIONS)
  set(gloo_file "")
  foreach(cfg ${gloo_configs})
    get_target_property(gloo_file gloo IMPORTED_LOCATION_${cfg})
    if(gloo_file)
      break()
    endif()
  endforeach()
  if(NOT gloo_file)
    get_target_property(gloo_file gloo IMPORTED_LOCATION)
  endif()
  if(gloo_file)
    get_filename_component(gloo_dir "${gloo_file}" DIRECTORY)
    list(FIND CMAKE_C_IMPLICIT_LINK_DIRECTORIES "${gloo_dir}" gloo_implicit)
    if(gloo_implicit EQUAL -1 AND NOT gloo_dir MATCHES "^(/usr)?/lib(64)?$")
      string(APPEND HVD_PC_LIBS_PRIVATE " -L${gloo_dir}")
    endif()
  endif()
  string(APPEND HVD_PC_LIBS_PRIVATE " -lgloo")
endif()
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(HVD_PC_CRYPTO QUIET libcrypto)
endif()
if(HVD_PC_CRYPTO_FOUND)
  set(HVD_PC_REQUIRES_PRIVATE "libcrypto")
else()
  get_filename_component(crypto_dir "${OPENSSL_CRYPTO_LIBRARY}" DIRECTORY)
  string(APPEND HVD_PC_LIBS_PRIVATE " -L${crypto_dir} -lcrypto")
endif()
# The C++ runtime (a C program links libhvd.a with the C driver).
foreach(lib ${HVD_CXX_RUNTIME_LIBS})
  string(APPEND HVD_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
if(CMAKE_THREAD_LIBS_INIT)
  string(APPEND HVD_PC_LIBS_PRIVATE " ${CMAKE_THREAD_LIBS_INIT}")
else()
  string(APPEND HVD_PC_LIBS_PRIVATE " -lpthread")
endif()
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND HVD_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
string(STRIP "${HVD_PC_LIBS_PRIVATE}" HVD_PC_LIBS_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/hvd.pc.in ${CMAKE_BINARY_DIR}/cmake/hvd.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/hvd.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(pc_dir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
else()
  set(pc_dir "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
install(CODE "
  set(pc_file \"\$ENV{DESTDIR}${pc_dir}/hvd.pc\")
  file(READ \"\${pc_file}\" pc)
  string(REPLACE \"@HVD_PC_INSTALL_PREFIX@\" \"\${CMAKE_INSTALL_PREFIX}\" pc \"\${pc}\")
  file(WRITE \"\${pc_file}\" \"\${pc}\")
")

# `cmake --build <dir> --target uninstall` removes what the last
# `cmake --install <dir>` put down (the files in install_manifest.txt).
if(NOT TARGET uninstall)
  add_custom_target(uninstall
    COMMAND ${CMAKE_COMMAND} -DHVD_MANIFEST=${CMAKE_BINARY_DIR}/install_manifest.txt
            -P ${PROJECT_SOURCE_DIR}/cmake/uninstall.cmake
    COMMENT "Removing the files listed in install_manifest.txt"
    VERBATIM)
endif()
