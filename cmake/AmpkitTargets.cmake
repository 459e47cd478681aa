# Shared build settings: warnings on our own targets and one precompiled
# header (torch/torch.h and the standard library) reused by every target.

function(ampkit_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
endfunction()

# The PCH is built once, in an object library, and every other target reuses
# it, so <torch/torch.h> is parsed once per build rather than once per file.
if(AMPKIT_USE_PCH)
  add_library(ampkit_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
  target_link_libraries(ampkit_pch PRIVATE torch)
  set_target_properties(ampkit_pch PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_precompile_headers(ampkit_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch.h)
  ampkit_warnings(ampkit_pch)
endif()

# GCC uses a PCH only under the flags it was built with; the PCH is -fPIC
# (the library is shared), so executables are compiled -fPIC too rather than
# CMake's -fPIE.
function(ampkit_use_pch target)
  if(AMPKIT_USE_PCH)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_compile_options(${target} PRIVATE -fPIC)
    else()
      set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    endif()
    target_precompile_headers(${target} REUSE_FROM ampkit_pch)
  endif()
endfunction()
