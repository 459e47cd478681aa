// Helpers shared by ampkit's GoogleTest suites.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

// Expects `statement` to throw `exception_type` whose what() contains
// `substring`; any other exception fails the test with its message.
#define AMPKIT_EXPECT_THROWS_WITH(statement, exception_type, substring)    \
  do {                                                                     \
    try {                                                                  \
      statement;                                                           \
      ADD_FAILURE() << "expected " #exception_type " from " #statement;    \
    } catch (const exception_type& e) {                                    \
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(substring)); \
    }                                                                      \
  } while (0)
