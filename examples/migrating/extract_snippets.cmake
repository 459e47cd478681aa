cmake_minimum_required(VERSION 3.21)
# Writes every ```cpp block of the given Markdown files into ONE C++ file
# (one translation unit: each one that includes torch.h costs 20-30 s), each
# block as the body of its own function, after prelude.h. #line directives
# make a compile error name the Markdown file and line. Function names carry
# the file's name and the block's number, so they are unique across files.
# Blocks fenced "```cpp quote" (whole programs quoted from an example, checked
# by that example's own test) are not extracted: the search below is for
# "```cpp" followed directly by a newline.
#
# cmake -DMARKDOWN="README.md|docs/a.md" [-DROOT=<source dir>]
#       -DPRELUDE=prelude.h -DOUTPUT=out.cpp -P extract_snippets.cmake
# (MARKDOWN: absolute paths separated by '|' or ';'; ROOT, when given, is
# cut from the names in the function names.)
string(REPLACE "|" ";" markdown_files "${MARKDOWN}")
set(out "// Generated from the Markdown files below by extract_snippets.cmake;\n")
string(APPEND out "// do not edit.\n")
foreach(markdown IN LISTS markdown_files)
  string(APPEND out "//   ${markdown}\n")
endforeach()
string(APPEND out "#include \"${PRELUDE}\"\n\nnamespace migrating {\n")
set(total 0)
foreach(markdown IN LISTS markdown_files)
  file(READ "${markdown}" text)
  set(name "${markdown}")
  if(DEFINED ROOT AND NOT ROOT STREQUAL "")
    file(RELATIVE_PATH name "${ROOT}" "${markdown}")
  endif()
  string(MAKE_C_IDENTIFIER "${name}" prefix)
  set(rest "${text}")
  set(consumed "")
  set(count 0)
  while(TRUE)
    string(FIND "${rest}" "```cpp\n" begin)
    if(begin EQUAL -1)
      break()
    endif()
    math(EXPR body_begin "${begin} + 7")
    string(SUBSTRING "${rest}" 0 ${body_begin} before)
    string(APPEND consumed "${before}")
    string(SUBSTRING "${rest}" ${body_begin} -1 rest)
    string(FIND "${rest}" "```" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${markdown}: a ```cpp block is not closed")
    endif()
    string(SUBSTRING "${rest}" 0 ${end} body)
    # The block's first line in the file: newlines before it, plus one.
    string(REGEX MATCHALL "\n" newlines "${consumed}")
    list(LENGTH newlines line)
    math(EXPR line "${line} + 1")
    math(EXPR count "${count} + 1")
    string(APPEND out "\n[[maybe_unused]] void ${prefix}_snippet_${count}() {\n")
    string(APPEND out "#line ${line} \"${markdown}\"\n${body}}\n")
    string(APPEND consumed "${body}")
    string(SUBSTRING "${rest}" ${end} -1 rest)
  endwhile()
  math(EXPR total "${total} + ${count}")
endforeach()
if(total EQUAL 0)
  message(FATAL_ERROR "${MARKDOWN}: no ```cpp blocks")
endif()
string(APPEND out "\n}  // namespace migrating\n")
file(WRITE "${OUTPUT}.tmp" "${out}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
