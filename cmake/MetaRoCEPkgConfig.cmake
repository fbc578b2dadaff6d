# metaroce.pc, pkg-config's metaroce (README.md, "Installing"), kept apart
# from the install rules so that tests/install/pc_paths_test.cmake can run
# it under `cmake -P`.

# metaroce_configure_pc(OUT): writes cmake/metaroce.pc.in to OUT for
# CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR, with PROJECT_VERSION
# and METAROCE_PC_REQUIRES. The .pc finds its prefix from its own place
# (${pcfiledir}), so that --prefix and DESTDIR at install time move it with
# everything else. A directory given absolute (as Nix and some distribution
# recipes give them) is written as it is: it was "${prefix}//abs/include",
# under the prefix. An absolute libdir puts the .pc outside the prefix,
# where its place says nothing of it, so prefix is then CMAKE_INSTALL_PREFIX
# as configured (an install to another --prefix leaves it behind).
function(metaroce_configure_pc out)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(METAROCE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(METAROCE_PC_PREFIX "\${pcfiledir}/${up}")
  endif()
  foreach(dir LIBDIR INCLUDEDIR)
    if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
      set(METAROCE_PC_${dir} "${CMAKE_INSTALL_${dir}}")
    else()
      set(METAROCE_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
    endif()
  endforeach()
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/metaroce.pc.in ${out} @ONLY)
endfunction()
