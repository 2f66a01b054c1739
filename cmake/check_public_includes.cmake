# The public-header check of the code outside src/ that uses strata (examples/, bench/): a
# module's public headers are those in its own folder (src/M/*.h); its subfolders (engine/zero/,
# gpu/cuda/, ...) are its own business. Any `#include "M/SUB/..."` of a strata module M in the
# files under DIRS (comma-separated) stops the build with the file, the line and the rule.
# Touches STAMP when all is well.
cmake_minimum_required(VERSION 3.24)  # IN_LIST in script mode
string(REPLACE "," ";" modules "${MODULES}")
string(REPLACE "," ";" dirs "${DIRS}")
set(errors "")
foreach(dir ${dirs})
  file(GLOB_RECURSE files "${dir}/*.h" "${dir}/*.cpp" "${dir}/*.cu" "${dir}/*.cuh")
  foreach(f ${files})
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/[a-z_0-9]+/")
    foreach(line ${lines})
      string(REGEX MATCH "\"([a-z_]+)/" _ "${line}")
      if(CMAKE_MATCH_1 IN_LIST modules)
        string(APPEND errors "\n  ${f}: ${line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(errors)
  message(FATAL_ERROR "public headers: code outside src/ includes a module's internal header "
                      "(only src/MODULE/*.h are public; add what it needs to one of those):"
                      "${errors}")
endif()
file(TOUCH "${STAMP}")
