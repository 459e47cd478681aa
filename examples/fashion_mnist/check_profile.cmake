# Checks the demo's --profile-steps output: PROFILE (profile.json) holds the
# profiled step count and, per step, the CNN's two convolutions and two
# max-poolings; the table beside it exists.
file(READ ${PROFILE} json)
string(JSON steps GET "${json}" steps)
if(NOT steps EQUAL 2)
  message(FATAL_ERROR "profile.json: steps ${steps}, expected 2")
endif()
string(JSON n LENGTH "${json}" ops)
set(found "")
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${json}" ops ${i} name)
  string(JSON calls GET "${json}" ops ${i} calls)
  if(name STREQUAL "aten::convolution" OR
     name STREQUAL "aten::max_pool2d_with_indices")
    if(NOT calls EQUAL 2)
      message(FATAL_ERROR "profile.json: ${name} ran ${calls} times a step, "
        "expected 2 (the CNN's two layers)")
    endif()
    list(APPEND found ${name})
  endif()
endforeach()
list(LENGTH found count)
if(NOT count EQUAL 2)
  message(FATAL_ERROR "profile.json: found [${found}] of aten::convolution "
    "and aten::max_pool2d_with_indices among ${n} operators")
endif()
get_filename_component(dir ${PROFILE} DIRECTORY)
if(NOT EXISTS ${dir}/profile.txt)
  message(FATAL_ERROR "no profile.txt beside ${PROFILE}")
endif()
message(STATUS "profile.json: ${n} operators, 2 steps")
