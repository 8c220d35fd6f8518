# hvd_add_transport_plugin(<name> SOURCES <files...> [LINK <libraries...>]
#                          [LINK_OPTIONS <options...>])
# Builds lib/libhvd_transport_<name>.so, a transport plugin the core loads
# with dlopen: from hvd's public headers, the kit (src/transports/kit, as
# "kit/...") and the libraries named; it links neither libhvd nor anything
# of hvd's and exports only its table (<name>_transport.map beside it).
# Installed next to libhvd.so, where the core looks for plugins.
include_guard(GLOBAL)

function(hvd_add_transport_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LINK;LINK_OPTIONS" ${ARGN})
  set(target hvd_transport_${name})
  set(map ${CMAKE_CURRENT_SOURCE_DIR}/${name}_transport.map)
  get_filename_component(transports ${CMAKE_CURRENT_FUNCTION_LIST_DIR} DIRECTORY)
  add_library(${target} MODULE ${P_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${target}
    PREFIX "lib"
    LINK_DEPENDS ${map}
    INSTALL_RPATH "${HVD_LIB_INSTALL_RPATH}")
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include ${transports})
  target_link_libraries(${target} PRIVATE ${P_LINK} Threads::Threads)
  target_link_options(${target} PRIVATE
    -Wl,--version-script=${map} -Wl,--no-undefined ${P_LINK_OPTIONS})
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()
