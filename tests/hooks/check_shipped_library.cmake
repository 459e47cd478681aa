# The shipped libampkit has the test hook points but no way to set them from
# the environment: neither fault-injection variable's name is in it.
# Run as cmake -DLIBRARY=path -P this.
file(STRINGS "${LIBRARY}" found REGEX "AMPKIT_(FAULT|SELF_TEST)_INJECT")
if(found)
  message(FATAL_ERROR "${LIBRARY} contains test-hook variables: ${found}")
endif()
message(STATUS "${LIBRARY}: no test-hook variables")
