// accelerate's utils/operations.py for C++ batches: one visitor over the
// tensors inside tensors, pairs, tuples, vectors, maps and
// torch::data::Example, and what the Accelerator builds on it (moving a batch
// to the device, converting outputs to fp32, collecting a forward's tensors,
// finding a batch's size).
#pragma once

#include <torch/data/example.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ampkit {

namespace detail {
template <typename T>
struct is_pair : std::false_type {};
template <typename A, typename B>
struct is_pair<std::pair<A, B>> : std::true_type {};
template <typename T>
struct is_tuple : std::false_type {};
template <typename... Ts>
struct is_tuple<std::tuple<Ts...>> : std::true_type {};
template <typename T>
struct is_vector : std::false_type {};
template <typename T, typename A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <typename T>
struct is_map : std::false_type {};
template <typename K, typename V, typename C, typename A>
struct is_map<std::map<K, V, C, A>> : std::true_type {};
template <typename K, typename V, typename H, typename E, typename A>
struct is_map<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <typename T>
struct is_example : std::false_type {};
template <typename D, typename T>
struct is_example<torch::data::Example<D, T>> : std::true_type {
  // Example<D, NoTarget> (NoTarget is void) has no target member.
  static constexpr bool has_target = !std::is_void_v<T>;
};
/// The containers recursively_apply looks into (not a tensor itself).
template <typename T>
inline constexpr bool is_nested_v =
    is_pair<T>::value || is_tuple<T>::value || is_vector<T>::value ||
    is_map<T>::value || is_example<T>::value;
template <typename T>
using if_nested = std::enable_if_t<is_nested_v<std::decay_t<T>>>;
}  // namespace detail

/// accelerate's recursively_apply: `value` with every torch::Tensor inside it
/// replaced by fn(tensor), through std::pair, std::tuple, std::vector,
/// std::map / std::unordered_map (their values) and torch::data::Example
/// (data and target), nested in any way; anything else is kept as it is.
template <typename Fn, typename T>
T recursively_apply(const Fn& fn, T value) {
  using V = std::decay_t<T>;
  if constexpr (std::is_same_v<V, torch::Tensor>) {
    return fn(std::move(value));
  } else if constexpr (detail::is_pair<V>::value) {
    // Braces evaluate left to right: collectives run in one order on every
    // process.
    return V{
        recursively_apply(fn, std::move(value.first)),
        recursively_apply(fn, std::move(value.second))};
  } else if constexpr (detail::is_tuple<V>::value) {
    return std::apply(
        [&fn](auto&&... elements) {
          return V{recursively_apply(fn, std::move(elements))...};
        },
        std::move(value));
  } else if constexpr (detail::is_vector<V>::value) {
    if constexpr (!std::is_arithmetic_v<typename V::value_type>) {
      for (auto& element : value) {
        element = recursively_apply(fn, std::move(element));
      }
    }
    return value;
  } else if constexpr (detail::is_map<V>::value) {
    for (auto& entry : value) {
      entry.second = recursively_apply(fn, std::move(entry.second));
    }
    return value;
  } else if constexpr (detail::is_example<V>::value) {
    value.data = recursively_apply(fn, std::move(value.data));
    if constexpr (detail::is_example<V>::has_target) {
      value.target = recursively_apply(fn, std::move(value.target));
    }
    return value;
  } else {
    return value;
  }
}

/// Calls fn(tensor) for every torch::Tensor inside `value`, in order (the
/// containers of recursively_apply).
template <typename Fn, typename T>
void for_each_tensor(const T& value, const Fn& fn) {
  if constexpr (std::is_same_v<T, torch::Tensor>) {
    fn(value);
  } else if constexpr (detail::is_pair<T>::value) {
    for_each_tensor(value.first, fn);
    for_each_tensor(value.second, fn);
  } else if constexpr (detail::is_tuple<T>::value) {
    std::apply(
        [&fn](const auto&... elements) {
          (for_each_tensor(elements, fn), ...);
        },
        value);
  } else if constexpr (detail::is_vector<T>::value) {
    if constexpr (!std::is_arithmetic_v<typename T::value_type>) {
      for (const auto& element : value) {
        for_each_tensor(element, fn);
      }
    }
  } else if constexpr (detail::is_map<T>::value) {
    for (const auto& entry : value) {
      for_each_tensor(entry.second, fn);
    }
  } else if constexpr (detail::is_example<T>::value) {
    for_each_tensor(value.data, fn);
    if constexpr (detail::is_example<T>::has_target) {
      for_each_tensor(value.target, fn);
    }
  }
}

/// accelerate's send_to_device: every defined tensor of `batch` on `device`.
template <typename T>
T send_to_device(T batch, const c10::Device& device) {
  return recursively_apply(
      [&device](torch::Tensor t) { return t.defined() ? t.to(device) : t; },
      std::move(batch));
}

/// accelerate's convert_to_fp32: every float16 and bfloat16 tensor of
/// `value` as float32; other tensors and values unchanged.
template <typename T>
T convert_to_fp32(T value) {
  return recursively_apply(
      [](torch::Tensor t) {
        const bool half =
            t.defined() && (t.scalar_type() == c10::ScalarType::Half ||
                            t.scalar_type() == c10::ScalarType::BFloat16);
        return half ? t.to(c10::ScalarType::Float) : t;
      },
      std::move(value));
}

/// The defined tensors of `value`, in order.
template <typename T>
std::vector<torch::Tensor> collect_tensors(const T& value) {
  std::vector<torch::Tensor> out;
  for_each_tensor(value, [&out](const torch::Tensor& t) {
    if (t.defined()) {
      out.push_back(t);
    }
  });
  return out;
}

/// accelerate's find_batch_size: the samples in a batch. A std::vector is a
/// list of samples (what a torch::data loader without Stack returns), so
/// its length; otherwise the first dimension of the first tensor found (an
/// Example's data first, a pair's or tuple's first element first); 0 when
/// there is none.
template <typename T>
int64_t find_batch_size(const T& batch) {
  if constexpr (detail::is_vector<T>::value) {
    return static_cast<int64_t>(batch.size());
  } else {
    int64_t size = 0;
    bool found = false;
    for_each_tensor(batch, [&](const torch::Tensor& t) {
      if (!found && t.defined() && t.dim() > 0) {
        size = t.size(0);
        found = true;
      }
    });
    return size;
  }
}

}  // namespace ampkit
