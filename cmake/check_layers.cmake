# The layer order of ../shared/DESIGN.md, checked: every #include of a
# layer's public header ("ampkit/<layer>/...") or private header
# ("<layer>/...", src/<layer>/) from a file of src/ or include/ampkit/ must
# point to the same layer or a lower one. utils/ and the root headers
# (ampkit/error.h, ampkit/state_dict.h, ampkit/version.h) are below every
# layer; the umbrella ampkit/ampkit.h is above all of them.
# Also: LibTorch version branches (#if on TORCH_VERSION_*, any use of
# AMPKIT_TORCH_AT_LEAST) live only in a layer's compat.h/compat.cpp; other
# files test the feature macros those define.
# Run as cmake -DROOT=<source dir> -P check_layers.cmake.
set(layers utils amp distributed data optim checkpoint track diag config accelerator)
set(violations "")
set(edges 0)
foreach(base src include/ampkit)
  file(GLOB_RECURSE files RELATIVE "${ROOT}/${base}"
    "${ROOT}/${base}/*.h" "${ROOT}/${base}/*.cpp")
  foreach(file IN LISTS files)
    string(REGEX MATCH "^[^/]+" from "${file}")
    list(FIND layers "${from}" from_rank)
    if(from_rank EQUAL -1 OR NOT file MATCHES "/")
      continue()  # a file outside the layer folders
    endif()
    if(NOT file MATCHES "/compat\\.(h|cpp)$")
      file(STRINGS "${ROOT}/${base}/${file}" branches
        REGEX "AMPKIT_TORCH_AT_LEAST|^[ \t]*#[ \t]*(if|elif).*TORCH_VERSION_")
      foreach(line IN LISTS branches)
        string(STRIP "${line}" line)
        list(APPEND violations
          "${base}/${file}: a LibTorch version branch outside compat: ${line}")
      endforeach()
    endif()
    file(STRINGS "${ROOT}/${base}/${file}" includes
      REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"]+\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" target "${line}")
      if(target MATCHES "^ampkit/ampkit\\.h$")
        set(to_rank 99)
        set(to "the umbrella header")
      elseif(target MATCHES "^ampkit/([^/]+)/")
        set(to "${CMAKE_MATCH_1}")
        list(FIND layers "${to}" to_rank)
      elseif(target MATCHES "^([^/]+)/")
        set(to "${CMAKE_MATCH_1}")
        list(FIND layers "${to}" to_rank)
      else()
        continue()  # a root header or a file of the same folder
      endif()
      if(to_rank EQUAL -1)
        continue()  # not a layer (a third-party header)
      endif()
      math(EXPR edges "${edges} + 1")
      if(to_rank GREATER from_rank)
        list(APPEND violations
          "${base}/${file}: #include \"${target}\": ${from}/ is below ${to} in the layer order")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR
    "Against the layer order (${layers}, lowest first; ../shared/DESIGN.md) "
    "or outside compat:\n  ${text}\nMove the code to the higher layer, or "
    "pass what it needs down as a parameter or callback; put version "
    "branches in the layer's compat.h as a feature macro.")
endif()
message(STATUS "layers: ${edges} include edges between layers, all downward")
