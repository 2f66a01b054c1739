# strata_add_module(NAME SOURCES ... DEPS ...): one static library per module under src/.
function(strata_add_module name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(strata_${name} STATIC ${A_SOURCES})
  target_include_directories(strata_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(strata_${name} PUBLIC ${A_DEPS} PRIVATE strata_warnings ${A_PRIVATE_DEPS})
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
