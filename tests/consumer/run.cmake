# Installs the ampkit build into BUILD_DIR/install, then configures, builds and
# runs the consumer project against that tree (run by CTest: install_consumer).
set(prefix ${BUILD_DIR}/consumer-install)
set(work ${BUILD_DIR}/consumer-build)
file(REMOVE_RECURSE ${prefix} ${work})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
set(launcher "")
find_program(ccache_program ccache)
if(ccache_program)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache_program})
endif()
# Only the install prefix: the package itself must find the LibTorch it was
# built against.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${work} -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${prefix} ${launcher})
run(${CMAKE_COMMAND} --build ${work})
run(${work}/consumer)
