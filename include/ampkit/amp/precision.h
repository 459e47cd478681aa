// ampkit::Precision: the mixed-precision modes, spelled as accelerate spells
// them ("no", "fp16", "bf16", "auto").
#pragma once

#include <string>
#include <string_view>

#include <c10/core/ScalarType.h>

namespace ampkit {

/// What autocast computes in. `automatic` stands for accelerate's "auto" and
/// is resolved against the hardware by the Accelerator before training.
enum class Precision { no, fp16, bf16, automatic };

/// Parses "no", "fp16", "bf16" or "auto" (any case, surrounding spaces
/// ignored); "fp32" is accepted as "no". Throws ampkit::InvalidArgument that
/// lists the valid values for anything else.
Precision parse_precision(std::string_view text);

/// The accelerate spelling: "no", "fp16", "bf16" or "auto".
std::string to_string(Precision precision);

/// The autocast dtype of a reduced precision: kHalf for fp16, kBFloat16 for
/// bf16. Throws ampkit::InvalidArgument for `no` and `automatic`.
c10::ScalarType to_dtype(Precision precision);

}  // namespace ampkit
