# Test helpers shared by every tests/<area>/CMakeLists.txt.
#
#   zinc_add_test(NAME name SOURCES a.c ... [LIBS ...] [LABELS ...] [ARGS ...]
#                 [TIMEOUT s] [RANKS 1 2 3 4])
#
# Without RANKS the test runs as one process. With RANKS it runs under
# mpirun once per rank count, as name_np<N> (oversubscribed: CI has 2
# cores); the variants above the smallest multi-rank count are labelled
# `wide` as well: the sanitizer builds run each program at one rank and at
# its smallest multi-rank count (the same code under the sanitizer), the
# plain build at every count. Exit code 77 means SKIPPED (ctest prints it as "Skipped"): a test
# that needs a GPU, several ranks or a missing kernel feature says so loudly
# instead of passing. Every test links zinc_test_common (tests/common/: the
# seeded random generator, the bitwise comparison, stderr capture).
find_package(PkgConfig REQUIRED)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)

set(ZINC_TEST_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1"
  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  "OMPI_MCA_btl_vader_single_copy_mechanism=none"
  "OMPI_MCA_rmaps_base_oversubscribe=1"
  "ZINC_TEST_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
  "ZINC_TEST_BINARY_DIR=${CMAKE_BINARY_DIR}")
if(ZINC_SANITIZE MATCHES "address")
  # MPI and hwloc keep some allocations for the life of the process.
  list(APPEND ZINC_TEST_ENV
    "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0"
    "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0")
endif()
if(ZINC_SANITIZE MATCHES "undefined")
  list(APPEND ZINC_TEST_ENV "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endif()
if(ZINC_SANITIZE MATCHES "thread")
  list(APPEND ZINC_TEST_ENV "TSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/tsan.supp:halt_on_error=1:second_deadlock_stack=1")
endif()

set(ZINC_MPIEXEC ${MPIEXEC_EXECUTABLE})

function(zinc_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ARGS;RANKS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE zinc_internal zinc_test_common PkgConfig::CMOCKA
    ${T_LIBS})
  target_include_directories(${T_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_RANKS)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
    set(_names ${T_NAME})
  else()
    set(_names "")
    set(_narrow 0) # the smallest rank count above 1
    foreach(n ${T_RANKS})
      if(n GREATER 1 AND (_narrow EQUAL 0 OR n LESS _narrow))
        set(_narrow ${n})
      endif()
    endforeach()
    foreach(n ${T_RANKS})
      add_test(NAME ${T_NAME}_np${n}
        COMMAND ${ZINC_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${n} --oversubscribe
                ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_NAME}> ${T_ARGS})
      list(APPEND _names ${T_NAME}_np${n})
      if(n GREATER _narrow)
        list(APPEND _wide ${T_NAME}_np${n})
      endif()
    endforeach()
    list(APPEND T_LABELS mpi)
  endif()
  foreach(_n ${_names})
    set(_labels ${T_LABELS})
    if(_n IN_LIST _wide)
      list(APPEND _labels wide)
    endif()
    set_tests_properties(${_n} PROPERTIES ENVIRONMENT "${ZINC_TEST_ENV}"
      SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT} LABELS "${_labels}")
  endforeach()
endfunction()
