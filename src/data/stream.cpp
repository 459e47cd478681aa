// StreamLoader's checks and its end-of-pass notice (data/stream.h).
#include "ampkit/data/stream.h"

#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"
#include "utils/components.h"

namespace ampkit::data::detail {

void check_stream_options(const StreamLoaderOptions& options) {
  if (options.batch_size() == 0) {
    throw InvalidArgument(
        component::kStreamLoader,
        "batch_size must be at least 1, got 0. Give the DataLoaderOptions "
        "the number of examples per batch.");
  }
  if (options.num_processes() < 1 || options.process_index() < 0 ||
      options.process_index() >= options.num_processes()) {
    throw InvalidArgument(
        component::kStreamLoader,
        "process_index must be in [0, num_processes) with num_processes >= "
        "1, got process_index " +
            std::to_string(options.process_index()) + " and num_processes " +
            std::to_string(options.num_processes()) + ".");
  }
}

void report_stream_end(const StreamEpochEnd& end, int64_t num_processes) {
  if (end.dropped == 0) {
    return;
  }
  warn(
      component::kStreamLoader,
      "the stream ended unevenly after " + std::to_string(end.steps) +
          " steps: " + std::to_string(end.dropped) + " of " +
          std::to_string(num_processes) +
          " processes still had a batch, which none trained on, so that "
          "every process stopped at the same step. Make the stream's batch "
          "count a multiple of the process count to use every batch.");
}

}  // namespace ampkit::data::detail
