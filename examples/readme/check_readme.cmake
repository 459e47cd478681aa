# The Markdown file given as README (docs/quick-tour.md) must quote main.cpp's
# lines between "// [readme-begin]" and "// [readme-end]" exactly, as one
# "```cpp quote" block (a whole program, so the snippet extraction of
# examples/migrating leaves it out).
file(READ "${SOURCE}" source)
string(REGEX MATCH "// \\[readme-begin\\]\n(.*)// \\[readme-end\\]" _ "${source}")
set(quoted "${CMAKE_MATCH_1}")
if(quoted STREQUAL "")
  message(FATAL_ERROR "${SOURCE}: no [readme-begin]/[readme-end] markers")
endif()
file(READ "${README}" readme)
string(FIND "${readme}" "```cpp quote\n${quoted}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR
    "${README} does not quote ${SOURCE} between its markers. Copy the lines "
    "between // [readme-begin] and // [readme-end] into its ```cpp quote "
    "block.")
endif()
