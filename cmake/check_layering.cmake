# The layering check of one module (strata_add_module runs it before the module builds): every
# `#include "M/..."` in the module's sources, where M is a strata module (MODULES), must name the
# module itself or one it declares (ALLOWED: its DEPS and theirs). Otherwise the build stops with
# the file, the line and the fix. Lists come comma-separated. Touches STAMP when all is well.
cmake_minimum_required(VERSION 3.24)  # IN_LIST in script mode
string(REPLACE "," ";" modules "${MODULES}")
string(REPLACE "," ";" allowed "${ALLOWED}")
file(GLOB_RECURSE files "${DIR}/*.h" "${DIR}/*.cpp" "${DIR}/*.cu" "${DIR}/*.cuh")
set(errors "")
foreach(f ${files})
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
  foreach(line ${lines})
    string(REGEX MATCH "\"([a-z_]+)/" _ "${line}")
    set(m "${CMAKE_MATCH_1}")
    if(m IN_LIST modules AND NOT m IN_LIST allowed)
      string(APPEND errors "\n  ${f}: ${line}: module ${MODULE} does not declare strata_${m}")
    endif()
  endforeach()
endforeach()
if(errors)
  message(FATAL_ERROR "layering: src/${MODULE} includes headers of modules it does not depend "
                      "on (add the module to DEPS in src/${MODULE}/CMakeLists.txt if the "
                      "layering of src/CMakeLists.txt allows it, or move the code):${errors}")
endif()
file(TOUCH "${STAMP}")
