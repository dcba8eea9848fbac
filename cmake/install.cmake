# Install rules, pkg-config file, CMake package config, and the install_example test.
# Included at the end of the top-level CMakeLists.txt (all targets exist by then).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(INGOT_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/ingot")

install(TARGETS ingot ingot_static ingot_cli
  EXPORT ingotTargets
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/ingot"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.h")
# Exported as ingot::ingot, ingot::ingot_static (and ingot::ingot_cli).
install(EXPORT ingotTargets NAMESPACE ingot:: DESTINATION "${INGOT_CMAKE_INSTALL_DIR}")

# --- what a static-lib consumer must also link ----------------------------------
# Walk ingot_static's link closure once and derive (a) pkg-config Libs.private
# flags and (b) find_dependency() lines for the package config, so neither has
# to be kept in sync by hand with the library's CMakeLists.
function(_ingot_flat item out)   # item -> list of plain link flags (recursive)
  set(flags "")
  if(item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(item "${CMAKE_MATCH_1}")
  endif()
  get_property(seen GLOBAL PROPERTY _INGOT_SEEN)
  if(item MATCHES "^\\$<" OR item STREQUAL "" OR item IN_LIST seen)
    set(${out} "" PARENT_SCOPE)   # other generator expressions, cycles: skip
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY _INGOT_SEEN "${item}")
  if(TARGET "${item}")
    if(item MATCHES "^(OpenMP|BLAS|LAPACK|Threads|CUDA)::")
      set(pkg "${CMAKE_MATCH_1}")
      if(pkg STREQUAL "CUDA")
        set(pkg CUDAToolkit)
      endif()
      set_property(GLOBAL APPEND PROPERTY _INGOT_DEPS "find_dependency(${pkg})")
    endif()
    get_target_property(imported "${item}" IMPORTED)
    get_target_property(type "${item}" TYPE)
    set(subs "")
    if(imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(loc "${item}" IMPORTED_LOCATION)
      if(NOT loc)
        get_target_property(loc "${item}" IMPORTED_LOCATION_RELEASE)
      endif()
      if(loc)
        list(APPEND subs "${loc}")
      endif()
    endif()
    foreach(p INTERFACE_LINK_LIBRARIES LINK_LIBRARIES)
      if(p STREQUAL "LINK_LIBRARIES" AND (imported OR type STREQUAL "INTERFACE_LIBRARY"))
        continue()
      endif()
      get_target_property(v "${item}" ${p})
      if(v)
        list(APPEND subs ${v})
      endif()
    endforeach()
    foreach(sub IN LISTS subs)
      _ingot_flat("${sub}" f)
      list(APPEND flags ${f})
    endforeach()
    if(item MATCHES "^PkgConfig::" AND flags)   # no find module: recreate it flat
      list(REMOVE_DUPLICATES flags)
      set_property(GLOBAL APPEND PROPERTY _INGOT_DEPS
        "if(NOT TARGET ${item})\n  add_library(${item} INTERFACE IMPORTED)\n  set_target_properties(${item} PROPERTIES INTERFACE_LINK_LIBRARIES \"${flags}\")\nendif()")
    endif()
  elseif(item MATCHES "^-")                             # flag as given
    set(flags "${item}")
  elseif(item MATCHES "^(.*)/lib([^/]+)\\.(so|a)[.0-9]*$")  # full path -> -L -lname
    set(dir "${CMAKE_MATCH_1}")
    set(flags "-l${CMAKE_MATCH_2}")
    if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      list(PREPEND flags "-L${dir}")
    endif()
  elseif(NOT item MATCHES "/")                          # plain name: m, openblas
    set(flags "-l${item}")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
_ingot_flat(ingot_static _ingot_pc_libs)
list(REMOVE_DUPLICATES _ingot_pc_libs)
if(NOT _ingot_pc_libs)
  set(_ingot_pc_libs -llapacke -lopenblas -lm)   # what the CPU backend needs
endif()
get_property(_ingot_deps GLOBAL PROPERTY _INGOT_DEPS)
if(_ingot_deps)
  list(REMOVE_DUPLICATES _ingot_deps)
endif()

# --- pkg-config -------------------------------------------------------------------
# prefix is derived from the .pc file's own location, so the file stays right
# when installed with `cmake --install --prefix DIR` (as the install_example test does).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(INGOT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _rel "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _rel "${_rel}")
  set(INGOT_PC_PREFIX "\${pcfiledir}/${_rel}")
endif()
list(JOIN _ingot_pc_libs " " INGOT_PC_LIBS_PRIVATE)
configure_file(cmake/ingot.pc.in "${PROJECT_BINARY_DIR}/ingot.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/ingot.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

# --- CMake package: find_package(ingot) -------------------------------------------
list(JOIN _ingot_deps "\n" INGOT_FIND_DEPENDENCIES)
configure_package_config_file(cmake/ingotConfig.cmake.in
  "${PROJECT_BINARY_DIR}/ingotConfig.cmake"
  INSTALL_DESTINATION "${INGOT_CMAKE_INSTALL_DIR}")
# 0.x: minor versions may break the API.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/ingotConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/ingotConfig.cmake"
  "${PROJECT_BINARY_DIR}/ingotConfigVersion.cmake"
  DESTINATION "${INGOT_CMAKE_INSTALL_DIR}")

# --- test: install, then build and run a consumer both ways ------------------------
# Skipped in sanitizer builds (slow, and the consumer would need the sanitizer runtime).
if(BUILD_TESTING OR NOT DEFINED BUILD_TESTING)
  if(NOT INGOT_SANITIZE)
    add_test(NAME install_example
      COMMAND sh "${PROJECT_SOURCE_DIR}/tests/install_example/run.sh"
              "${CMAKE_BINARY_DIR}" "${CMAKE_COMMAND}" "${CMAKE_C_COMPILER}")
    set_tests_properties(install_example PROPERTIES RUN_SERIAL TRUE TIMEOUT 300)
  endif()
endif()
