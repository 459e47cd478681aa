# clang-format --dry-run over every C++ file of the project (.clang-format),
# except the generated golden tables (tests/*/golden_*.h, rewritten by their
# generators). Run as cmake -DROOT=<source dir> -DCLANG_FORMAT=<path> -P this.
set(files "")
foreach(dir src include tests tools examples bench)
  file(GLOB_RECURSE found "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.h")
  list(APPEND files ${found})
endforeach()
list(FILTER files EXCLUDE REGEX "/golden_[^/]*\\.h$")
list(LENGTH files count)
execute_process(
  COMMAND "${CLANG_FORMAT}" --dry-run --Werror ${files}
  RESULT_VARIABLE rc
  ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${out}\nNot formatted: run clang-format -i on the "
    "files named above (the style is .clang-format).")
endif()
message(STATUS "clang-format: ${count} files formatted")
