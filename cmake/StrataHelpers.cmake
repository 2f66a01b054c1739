# strata_add_module(NAME SOURCES ... DEPS ...): one static library per module under src/.
function(strata_add_module name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(strata_${name} STATIC ${A_SOURCES})
  target_include_directories(strata_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(strata_${name} PUBLIC ${A_DEPS} PRIVATE strata_warnings ${A_PRIVATE_DEPS})
  # The layering, enforced: the module's sources (src/NAME, subfolders included) may include the
  # headers of the module itself and of the strata modules its DEPS name, and theirs; any other
  # strata header stops the build (cmake/check_layering.cmake, rerun when a source changes).
  set(sees ${name})
  foreach(dep ${A_DEPS} ${A_PRIVATE_DEPS})
    if(dep MATCHES "^strata_(.+)$")
      get_property(dep_sees GLOBAL PROPERTY STRATA_MODULE_SEES_${CMAKE_MATCH_1})
      list(APPEND sees ${CMAKE_MATCH_1} ${dep_sees})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES sees)
  set_property(GLOBAL PROPERTY STRATA_MODULE_SEES_${name} ${sees})
  set(dir ${PROJECT_SOURCE_DIR}/src/${name})
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${dir}/*.h ${dir}/*.cpp ${dir}/*.cu ${dir}/*.cuh)
  string(REPLACE ";" "," sees_arg "${sees}")
  string(REPLACE ";" "," modules_arg "${STRATA_MODULES}")
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/layering.stamp)
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DMODULE=${name} -DALLOWED=${sees_arg} -DMODULES=${modules_arg}
            -DDIR=${dir} -DSTAMP=${stamp} -P ${PROJECT_SOURCE_DIR}/cmake/check_layering.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/check_layering.cmake
    COMMENT "Checking the layering of ${name}")
  add_custom_target(strata_${name}_layering DEPENDS ${stamp})
  add_dependencies(strata_${name} strata_${name}_layering strata_include_cycles)
endfunction()

# strata_add_test(NAME SOURCES ... LIBS ... LABELS ... [MPI_RANKS n ...] [TIMEOUT s])
# A GoogleTest executable registered with ctest. With MPI_RANKS, one ctest entry per rank count,
# run under mpirun (with --oversubscribe, and --allow-run-as-root when root).
function(strata_add_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;LIBS;LABELS;MPI_RANKS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS} GTest::gtest GTest::gtest_main strata_warnings)
  if("gpu" IN_LIST A_LABELS)
    set_property(GLOBAL APPEND PROPERTY STRATA_GPU_TESTS ${name})  # the target gpu_tests
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  if(A_MPI_RANKS)
    set(_root_flag "")
    execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_uid STREQUAL "0")
      set(_root_flag --allow-run-as-root)
    endif()
    foreach(np ${A_MPI_RANKS})
      add_test(NAME ${name}_np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${_root_flag} --oversubscribe -np ${np}
                       $<TARGET_FILE:${name}>)
      set_tests_properties(${name}_np${np} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
                           ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;STRATA_TEST_NP=${np}")
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
  endif()
endfunction()

# strata_add_bench(NAME SOURCES ... LIBS ...): a benchmark executable under bench/.
function(strata_add_bench name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/bench)
  target_link_libraries(${name} PRIVATE ${A_LIBS} strata_warnings)
endfunction()
