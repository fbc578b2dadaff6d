# Installing the libraries: what another program (built by any compiler, or
# an out-of-tree shared object such as a libfabric provider) can link.
#
# Where a library is built with link-time optimization (GCC's bytecode in
# the archive, which clang++ or another GCC cannot read: "undefined
# reference to ~UdpEndpoint"), the installed archive is a second build of the
# same sources with the same flags, minus link-time optimization. The tree's
# own programs keep linking the LTO build: its figure stays as it was
# (-ffat-lto-objects on the tree's build itself cost 8 instructions per data
# packet, scripts/engine-instructions.sh: 1,243.0 against 1,235.0, GCC 12).
# The price, for a program built against the installed engine: 1,549.1
# instructions per data packet (the probe linked with the installed archive);
# one relocatable object per library made by a GCC link with LTO
# (-r -flinker-output=nolto-rel) gave 1,497.8, not worth a custom build step.
# Installed archives hold position-independent code, so that a shared object
# can take them in.
include(GNUInstallDirs)

# metaroce_install_library(TARGET NAME): installs TARGET (or its copy, see
# above) as MetaRoCE::NAME; call once TARGET is fully set up. Libraries it
# links that were installed before it are linked as their installed copies.
function(metaroce_install_library target name)
  add_library(MetaRoCE::${name} ALIAS ${target})
  get_target_property(ipo ${target} INTERPROCEDURAL_OPTIMIZATION)
  if(NOT ipo)
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
    set(installed ${target})
  else()
    set(installed ${target}_installed)
    get_target_property(sources ${target} SOURCES)
    add_library(${installed} STATIC ${sources})
    get_property(renames GLOBAL PROPERTY METAROCE_INSTALLED_RENAMES)
    foreach(prop INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES COMPILE_OPTIONS
                 COMPILE_DEFINITIONS COMPILE_FEATURES INTERFACE_COMPILE_FEATURES LINK_LIBRARIES
                 INTERFACE_LINK_LIBRARIES)
      get_property(set TARGET ${target} PROPERTY ${prop} SET)
      if(set)
        get_target_property(value ${target} ${prop})
        foreach(rename IN LISTS renames)  # "from=to"
          string(REPLACE "=" ";" pair "${rename}")
          list(GET pair 0 from)
          list(GET pair 1 to)
          list(TRANSFORM value REPLACE "^${from}$" "${to}")
          list(TRANSFORM value REPLACE "<LINK_ONLY:${from}>" "<LINK_ONLY:${to}>")
        endforeach()
        set_property(TARGET ${installed} PROPERTY ${prop} "${value}")
      endif()
    endforeach()
    set_target_properties(${installed} PROPERTIES
      EXPORT_NAME ${name} OUTPUT_NAME ${target} POSITION_INDEPENDENT_CODE ON
      INTERPROCEDURAL_OPTIMIZATION OFF
      ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/installed)
    set_property(GLOBAL APPEND PROPERTY METAROCE_INSTALLED_RENAMES "${target}=${installed}")
  endif()
  install(TARGETS ${installed} EXPORT MetaRoCETargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
