// Non-finite attribution: one batched check, then counts for the culprits.
#include "utils/non_finite.h"

#include <ATen/ATen.h>

#include "utils/strings.h"

namespace ampkit::detail {

std::vector<NonFiniteTensor> find_non_finite(
    const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::vector<size_t> checked;
  std::vector<at::Tensor> values;
  std::vector<at::Tensor> flags;
  for (size_t i = 0; i < named.size(); ++i) {
    const at::Tensor& t = named[i].second;
    if (!t.defined()) {
      continue;
    }
    at::Tensor v = t.is_sparse() ? t._values() : t;
    // Gathered on the first tensor's device, so that one copy to the host
    // reads them all.
    const c10::Device device = values.empty() ? v.device() : values[0].device();
    flags.push_back(at::isfinite(v).logical_not().any().to(device));
    checked.push_back(i);
    values.push_back(std::move(v));
  }
  std::vector<NonFiniteTensor> found;
  if (flags.empty()) {
    return found;
  }
  const at::Tensor bad = at::stack(flags).to(at::kCPU);  // the one host sync
  const bool* is_bad = bad.data_ptr<bool>();
  for (size_t k = 0; k < checked.size(); ++k) {
    if (!is_bad[k]) {
      continue;
    }
    NonFiniteTensor f;
    f.name = named[checked[k]].first;
    f.numel = values[k].numel();
    f.nan = at::isnan(values[k]).sum().item<int64_t>();
    f.inf = at::isinf(values[k]).sum().item<int64_t>();
    found.push_back(std::move(f));
  }
  return found;
}

std::string describe_non_finite(const std::vector<NonFiniteTensor>& found) {
  std::string out;
  for (const auto& f : found) {
    std::string kinds;
    if (f.nan > 0) {
      kinds = std::to_string(f.nan) + " NaN";
    }
    if (f.inf > 0) {
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(f.inf) + " inf";
    }
    out += (out.empty() ? "" : ", ") + f.name + " (" + kinds + " of " +
           std::to_string(f.numel) + (f.numel == 1 ? " value)" : " values)");
  }
  return out;
}

std::string skipped_step_line(
    int64_t step,
    const std::string& where,
    double old_scale,
    double new_scale) {
  return "step " + std::to_string(step) + " skipped: non-finite gradients in " +
         where + "; loss scale " + exact_number(old_scale) + " -> " +
         exact_number(new_scale);
}

}  // namespace ampkit::detail
