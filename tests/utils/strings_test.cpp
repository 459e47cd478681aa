// The shared string helpers (utils/strings.h): what every option, config
// value and environment variable is parsed with.
#include "utils/strings.h"

#include <gtest/gtest.h>

namespace ampkit::detail {
namespace {

TEST(StringsTest, ParseIntTakesWholeStringsOnlyWithinTheRange) {
  EXPECT_EQ(parse_int("42"), 42);
  EXPECT_EQ(parse_int("-7"), -7);
  EXPECT_EQ(parse_int("9223372036854775807"), INT64_MAX);
  for (const char* bad :
       {"",
        "-",
        "+3",
        " 3",
        "3 ",
        "12abc",
        "1e3",
        "0x10",
        "9223372036854775808",
        "3.0"}) {
    EXPECT_FALSE(parse_int(bad).has_value()) << bad;
  }
  EXPECT_EQ(parse_int("5", 1, 5), 5);
  EXPECT_FALSE(parse_int("6", 1, 5).has_value());
  EXPECT_FALSE(parse_int("0", 1, 5).has_value());
}

TEST(StringsTest, ParseDoubleTakesWholeNumbersWithAnOptionalPlus) {
  EXPECT_EQ(parse_double("1.5"), 1.5);
  EXPECT_EQ(parse_double("+2e-3"), 2e-3);
  EXPECT_EQ(parse_double("-0.25"), -0.25);
  for (const char* bad : {"", "+", ".", "1.2.3", "1,5", " 1", "1 ", "abc"}) {
    EXPECT_FALSE(parse_double(bad).has_value()) << bad;
  }
}

TEST(StringsTest, ExactNumberReadsBackAsTheSameDouble) {
  for (double v : {0.1, 1.0 / 3.0, 65536.0, 2e-300, -1.5}) {
    EXPECT_EQ(parse_double(exact_number(v)), v) << exact_number(v);
  }
  EXPECT_EQ(exact_number(0.5), "0.5");
}

TEST(StringsTest, LowerAndJoin) {
  EXPECT_EQ(lower("BF16 Yes"), "bf16 yes");
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(join({"a"}, ", "), "a");
  EXPECT_EQ(join({}, ", "), "");
}

// As Python's str.split(sep) and str.strip(chars): the config answers
// ("0, 1" for gpu_ids), log_with lists and FSDP's class lists go through
// them, and an empty piece is kept for the caller to refuse or skip.
TEST(StringsTest, SplitKeepsEmptyPiecesAndTrimStripsBothEnds) {
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(split("a,b", ','), (Pieces{"a", "b"}));
  EXPECT_EQ(split("a,,b", ','), (Pieces{"a", "", "b"}));
  EXPECT_EQ(split("a,", ','), (Pieces{"a", ""}));
  EXPECT_EQ(split("", ','), (Pieces{""}));
  EXPECT_EQ(trim("  0 \t\n"), "0");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("\"jsonl\" ", " \""), "jsonl");
  EXPECT_EQ(trim(" a b "), "a b");
}

}  // namespace
}  // namespace ampkit::detail
