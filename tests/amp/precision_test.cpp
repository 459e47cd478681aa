// Precision parsing and printing in accelerate's spellings.
#include "ampkit/amp/precision.h"

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit {
namespace {

TEST(PrecisionTest, ParsesAccelerateSpellings) {
  EXPECT_EQ(parse_precision("no"), Precision::no);
  EXPECT_EQ(parse_precision("fp16"), Precision::fp16);
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_EQ(parse_precision("auto"), Precision::automatic);
}

TEST(PrecisionTest, AcceptsFp32AsNoAndIgnoresCaseAndSpaces) {
  EXPECT_EQ(parse_precision("fp32"), Precision::no);
  EXPECT_EQ(parse_precision(" BF16\n"), Precision::bf16);
  EXPECT_EQ(parse_precision("FP16"), Precision::fp16);
}

TEST(PrecisionTest, RejectsUnknownValueListingTheValidOnes) {
  AMPKIT_EXPECT_THROWS_WITH(
      parse_precision("fp64"),
      InvalidArgument,
      "Precision: unknown mixed precision, got \"fp64\"; valid values: no, "
      "fp16, bf16, auto");
  AMPKIT_EXPECT_THROWS_WITH(
      parse_precision("bfloat16"), InvalidArgument, "Did you mean bf16?");
  AMPKIT_EXPECT_THROWS_WITH(
      parse_precision("fp8"), InvalidArgument, "fp8 training is not supported");
  AMPKIT_EXPECT_THROWS_WITH(parse_precision(""), InvalidArgument, "got \"\"");
}

TEST(PrecisionTest, RoundTripsThroughToString) {
  for (Precision p :
       {Precision::no,
        Precision::fp16,
        Precision::bf16,
        Precision::automatic}) {
    EXPECT_EQ(parse_precision(to_string(p)), p);
  }
}

TEST(PrecisionTest, MapsReducedPrecisionsToAutocastDtypes) {
  EXPECT_EQ(to_dtype(Precision::fp16), c10::ScalarType::Half);
  EXPECT_EQ(to_dtype(Precision::bf16), c10::ScalarType::BFloat16);
  AMPKIT_EXPECT_THROWS_WITH(to_dtype(Precision::no), InvalidArgument, "got no");
  AMPKIT_EXPECT_THROWS_WITH(
      to_dtype(Precision::automatic), InvalidArgument, "Resolve auto first");
}

}  // namespace
}  // namespace ampkit
