#include "distributed/compat.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/version.h>

#include <cstdlib>
#include <type_traits>

#include "ampkit/error.h"
#include "utils/strings.h"

namespace ampkit::dist::detail {
namespace {

#if TORCH_VERSION_MAJOR >= 2
// 2.x: backends hang under a ProcessGroup that dispatches by device type.
// Its constructor lost the Options argument in 2.6.
// A template so that only the constructor this LibTorch has is compiled.
template <typename PG = c10d::ProcessGroup>
c10::intrusive_ptr<c10d::ProcessGroup> wrap_backend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const c10::intrusive_ptr<c10d::Backend>& backend,
    c10d::ProcessGroup::BackendType type,
    std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<PG> pg;
  if constexpr (
      std::is_constructible_v<PG, c10::intrusive_ptr<c10d::Store>, int, int>) {
    pg = c10::make_intrusive<PG>(store, rank, size);
    (void)timeout;
  } else {
    auto options = c10::make_intrusive<typename PG::Options>(
        type == c10d::ProcessGroup::BackendType::NCCL ? "nccl" : "gloo",
        timeout);
    pg = c10::make_intrusive<PG>(store, rank, size, options);
  }
  pg->setBackend(c10::DeviceType::CPU, type, backend);
  pg->setBackend(c10::DeviceType::CUDA, type, backend);
  pg->setDefaultBackend(type);
  return pg;
}
#endif

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& hostname) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!hostname.empty()) {
    options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  } else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  auto gloo =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
  return wrap_backend(
      store,
      rank,
      size,
      c10::static_intrusive_pointer_cast<c10d::Backend>(gloo),
      c10d::ProcessGroup::BackendType::GLOO,
      timeout);
#else
  return gloo;
#endif
}

bool nccl_available() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
  return wrap_backend(
      store,
      rank,
      size,
      c10::static_intrusive_pointer_cast<c10d::Backend>(nccl),
      c10d::ProcessGroup::BackendType::NCCL,
      timeout);
#else
  return nccl;
#endif
#else
  (void)store;
  (void)rank;
  (void)size;
  (void)timeout;
  throw Unsupported(
      "Distributed",
      "the NCCL backend is not in this LibTorch (built without "
      "USE_C10D_NCCL). Use backend gloo, or a LibTorch built with CUDA and "
      "NCCL.");
#endif
}

namespace {
// A template so that only the constructor this LibTorch has is compiled.
template <typename R = c10d::Reducer>
std::unique_ptr<c10d::Reducer> construct_reducer(ReducerArgs& a) {
  const std::vector<bool> expect_sparse(a.params.size(), false);
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Limits = std::vector<size_t>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Names = std::unordered_map<size_t, std::string>;
  // 2.8 and later drop per_bucket_size_limits and add trailing flags; the
  // leading arguments stay the same.
  auto without_limits = [&](auto&&... tail) {
    return std::make_unique<R>(
        std::move(a.params),
        std::move(a.bucket_indices),
        std::move(a.group),
        expect_sparse,
        a.bucket_bytes_cap,
        a.find_unused_parameters,
        a.gradient_as_bucket_view,
        std::move(a.param_names),
        a.first_bucket_bytes_cap,
        std::forward<decltype(tail)>(tail)...);
  };
  if constexpr (std::is_constructible_v<
                    R,
                    Params,
                    Buckets,
                    Limits,
                    Group,
                    std::vector<bool>,
                    int64_t,
                    bool,
                    bool,
                    Names,
                    int64_t>) {
    // 1.13 .. 2.7: with per-bucket size limits.
    return std::make_unique<R>(
        std::move(a.params),
        std::move(a.bucket_indices),
        std::move(a.per_bucket_size_limits),
        std::move(a.group),
        expect_sparse,
        a.bucket_bytes_cap,
        a.find_unused_parameters,
        a.gradient_as_bucket_view,
        std::move(a.param_names),
        a.first_bucket_bytes_cap);
  } else if constexpr (std::is_constructible_v<
                           R,
                           Params,
                           Buckets,
                           Group,
                           std::vector<bool>,
                           int64_t,
                           bool,
                           bool,
                           Names,
                           int64_t,
                           bool,
                           bool>) {
    // 2.8 .. 2.10: skip_all_reduce_unused_params and use_python_reducer
    // (false, false: Python DDP's defaults).
    return without_limits(false, false);
  } else if constexpr (std::is_constructible_v<
                           R,
                           Params,
                           Buckets,
                           Group,
                           std::vector<bool>,
                           int64_t,
                           bool,
                           bool,
                           Names,
                           int64_t,
                           bool,
                           bool,
                           std::vector<int64_t>>) {
    // 2.11: bucket_bytes_cap_list, empty as Python DDP passes it without
    // bucket_cap_mb_list (the Reducer then rebuilds buckets by
    // first_bucket_bytes_cap and bucket_bytes_cap).
    return without_limits(false, false, std::vector<int64_t>{});
  } else {
    // Newer (main after the 2.11 cut): batched gradient copies as well.
    return without_limits(false, false, std::vector<int64_t>{}, false);
  }
}
}  // namespace

std::unique_ptr<c10d::Reducer> make_reducer(ReducerArgs args) {
  return construct_reducer(args);
}

bool port_in_use(const std::exception& e) {
  const std::string said = ampkit::detail::lower(e.what());
  return said.find("already in use") != std::string::npos ||
         said.find("eaddrinuse") != std::string::npos;
}

}  // namespace ampkit::dist::detail
