# README.md must quote main.cpp's lines between "// [readme-begin]" and
# "// [readme-end]" exactly, as one ```cpp block.
file(READ "${SOURCE}" source)
string(REGEX MATCH "// \\[readme-begin\\]\n(.*)// \\[readme-end\\]" _ "${source}")
set(quoted "${CMAKE_MATCH_1}")
if(quoted STREQUAL "")
  message(FATAL_ERROR "${SOURCE}: no [readme-begin]/[readme-end] markers")
endif()
file(READ "${README}" readme)
string(FIND "${readme}" "```cpp\n${quoted}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR
    "${README} does not quote ${SOURCE} between its markers. Copy the lines "
    "between // [readme-begin] and // [readme-end] into the README's ```cpp "
    "block.")
endif()
