# ctest install.pc-paths: metaroce.pc gives pkg-config the directories the
# install puts the headers and archives in, whether CMAKE_INSTALL_LIBDIR and
# CMAKE_INSTALL_INCLUDEDIR are relative (the default) or absolute (Nix, some
# distribution recipes). An absolute includedir was written under the prefix
# ("${prefix}//nix/store/x-dev/include"), with no warning; an absolute libdir
# left prefix empty, so -L and -I were both wrong.
#   cmake -DPKG_CONFIG=PKG_CONFIG -DSCRATCH=DIR -P pc_paths_test.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/MetaRoCEPkgConfig.cmake)
set(PROJECT_VERSION 0.1.0)
set(METAROCE_PC_REQUIRES "")
file(REMOVE_RECURSE ${SCRATCH})
set(failures 0)

# check(NAME LIBDIR INCLUDEDIR WANT_L WANT_I): the .pc made for LIBDIR and
# INCLUDEDIR, installed where LIBDIR puts it (under SCRATCH/NAME as the
# prefix where relative), must give exactly -I<WANT_I> and -L<WANT_L>.
function(check name libdir includedir want_l want_i)
  set(CMAKE_INSTALL_PREFIX ${SCRATCH}/${name})
  set(CMAKE_INSTALL_LIBDIR ${libdir})
  set(CMAKE_INSTALL_INCLUDEDIR ${includedir})
  if(IS_ABSOLUTE "${libdir}")
    set(pcdir ${SCRATCH}/${name}-abs${libdir}/pkgconfig)  # where DESTDIR would put it
  else()
    set(pcdir ${CMAKE_INSTALL_PREFIX}/${libdir}/pkgconfig)
  endif()
  metaroce_configure_pc(${pcdir}/metaroce.pc)
  set(ENV{PKG_CONFIG_PATH} ${pcdir})
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs metaroce RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(why "")
  if(NOT rc EQUAL 0)
    set(why "pkg-config failed (${rc}): ${err}")
  elseif(out MATCHES "//")
    set(why "a doubled slash")
  else()
    separate_arguments(words UNIX_COMMAND "${out}")
    set(got_i "")
    set(got_l "")
    foreach(word IN LISTS words)
      if(word MATCHES "^-([IL])(.*)$")
        set(flag ${CMAKE_MATCH_1})
        set(path ${CMAKE_MATCH_2})
        cmake_path(NORMAL_PATH path)
        string(REGEX REPLACE "/$" "" path "${path}")
        if(flag STREQUAL "I")
          list(APPEND got_i ${path})
        else()
          list(APPEND got_l ${path})
        endif()
      endif()
    endforeach()
    if(NOT got_i STREQUAL want_i OR NOT got_l STREQUAL want_l)
      set(why "-I ${got_i} -L ${got_l}, wanted -I ${want_i} -L ${want_l}")
    endif()
  endif()
  if(why)
    message("FAIL: ${name} (libdir ${libdir}, includedir ${includedir}): ${why}\n  ${out}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message("ok:   ${name} (libdir ${libdir}, includedir ${includedir}): ${out}")
  endif()
endfunction()

check(relative lib include ${SCRATCH}/relative/lib ${SCRATCH}/relative/include)
check(lib64 lib64 include ${SCRATCH}/lib64/lib64 ${SCRATCH}/lib64/include)
check(absolute-includedir lib /nix/store/x-dev/include ${SCRATCH}/absolute-includedir/lib
      /nix/store/x-dev/include)
check(absolute-libdir /nix/store/x/lib include /nix/store/x/lib ${SCRATCH}/absolute-libdir/include)
check(both-absolute /nix/store/x/lib /nix/store/x-dev/include /nix/store/x/lib
      /nix/store/x-dev/include)
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} case(s) failed")
endif()
